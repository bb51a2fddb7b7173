//! The custom resources of group `mimeo.dev`, version `v1alpha1`: what users write.
//!
//! The field names are a contract with users, so they stay plain. Validation lives in the schema
//! (enums, `x-kubernetes-validations` CEL rules with messages a person understands) wherever the
//! apiserver can enforce it, so a bad rule is refused at `kubectl apply` rather than failing later.

mod config;
mod crds;
mod inventory;
mod object_selector;
mod remote_cluster;
mod rule;

pub use config::{MimeoConfig, MimeoConfigSpec, MimeoConfigStatus, PluginSettings, RegistrySettings};
pub use crds::{all_crds, crds_yaml};
pub use inventory::{
    ClusterApiInventory, ClusterInventory, ClusterInventorySpec, ClusterInventoryStatus,
    ClusterProfileInventory, EntryProblem, OpenMcpInventory, RemoteClusterTemplate,
};
pub use object_selector::{ObjectIdentity, ObjectSelector, PurposeOperator, PurposeRequirement};
pub use remote_cluster::{
    KubeconfigSecretRef, Origin, RemoteCluster, RemoteClusterSpec, RemoteClusterStatus,
};
pub use rule::{
    ClusterCopies, ClusterSyncRule, ClusterSyncRuleSpec, ConflictPolicy, CopyState, CopyStatus,
    DeletionPolicy, ForEach, Input, InputRef, KeyFilter, MetadataPolicy, NextTo, PluginPin, PullSecretRef,
    RuleSpec, RuleStatus, SecretType, Source, SourceRef, SyncRule, SyncRuleSpec, Target, Transform,
};

/// The API group of every mimeo resource.
pub const GROUP: &str = "mimeo.dev";
