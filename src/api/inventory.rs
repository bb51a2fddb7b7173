//! `ClusterInventory`: a platform's own list of clusters (openMCP, Cluster API, SIG
//! `ClusterProfile`s), from which mimeo keeps one `RemoteCluster` per selected entry.

// kube-derive's repeated `printcolumn(...)`/`validation = ...` arguments look like duplicated
// attributes to clippy; they are distinct columns and rules.
#![allow(clippy::duplicated_attributes)]

use super::object_selector::ObjectSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where a platform lists its clusters, and which of them mimeo may write to. Cluster-scoped:
/// only a cluster administrator says which namespaces hold trusted entries.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "mimeo.dev",
    version = "v1alpha1",
    kind = "ClusterInventory",
    doc = "A platform's own list of clusters (openMCP Clusters, Cluster API Clusters, ClusterProfiles), from which mimeo keeps one RemoteCluster per selected entry, with access got the inventory's way.",
    status = "ClusterInventoryStatus",
    shortname = "mci",
    category = "mimeo",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason"),
    printcolumn(name = "Selected", type_ = "integer", json_path = ".status.selected"),
    printcolumn(name = "Connected", type_ = "integer", json_path = ".status.connected"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Message", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].message", priority = "1"),
    validation = Rule::new(
        "(has(self.spec.openMCP) ? 1 : 0) + (has(self.spec.clusterAPI) ? 1 : 0) + (has(self.spec.clusterProfile) ? 1 : 0) == 1"
    ).message("set exactly one of openMCP, clusterAPI and clusterProfile"),
    validation = Rule::new(
        "has(self.spec.openMCP) || !has(self.spec.selector) || !has(self.spec.selector.matchPurposes)"
    ).message("matchPurposes selects openMCP Clusters only: Cluster API Clusters and ClusterProfiles have no purposes"),
    validation = Rule::new(
        "(has(self.spec.namespaces) && size(self.spec.namespaces) > 0) || has(self.spec.namespaceSelector)"
    ).message("name the namespaces entries are read from (namespaces), choose them by label (namespaceSelector), or both"),
    validation = Rule::new(
        "!has(self.spec.namespaceSelector) || (has(self.spec.namespaceSelector.matchLabels) && size(self.spec.namespaceSelector.matchLabels) > 0) || (has(self.spec.namespaceSelector.matchExpressions) && size(self.spec.namespaceSelector.matchExpressions) > 0)"
    ).message("namespaceSelector needs at least one label requirement: an empty selector would read entries from every namespace, tenants' own included"),
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInventorySpec {
    /// The namespaces entries are read from, by name. Entries anywhere else (in a namespace
    /// neither named here nor chosen by `namespaceSelector`) are ignored, so a tenant who may
    /// create a `Cluster` or a `ClusterProfile` in its own namespace gains nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub namespaces: Vec<String>,
    /// The namespaces entries are read from, by their labels, besides those named in
    /// `namespaces`: for platforms that make a namespace per tenant, such as openMCP's
    /// `mcp--<uuid>` (labelled `core.openmcp.cloud/mcp-name` and `.../mcp-namespace`). Followed
    /// as namespaces come, go and change labels. Choose labels only the platform can set: whoever
    /// may label a namespace so that it matches can add entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Which entries become `RemoteCluster`s. Unset: all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<ObjectSelector>,
    /// openMCP `Cluster`s (`clusters.openmcp.cloud`), reached through `AccessRequest`s.
    #[serde(rename = "openMCP", default, skip_serializing_if = "Option::is_none")]
    pub open_mcp: Option<OpenMcpInventory>,
    /// Cluster API `Cluster`s (`cluster.x-k8s.io`), reached through their `<name>-kubeconfig`.
    #[serde(rename = "clusterAPI", default, skip_serializing_if = "Option::is_none")]
    pub cluster_api: Option<ClusterApiInventory>,
    /// SIG-Multicluster `ClusterProfile`s (`multicluster.x-k8s.io`), reached through a
    /// credentials provider of the installation's provider file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_profile: Option<ClusterProfileInventory>,
    /// What each `RemoteCluster` made from an entry gets besides the entry's own labels.
    #[serde(default, skip_serializing_if = "RemoteClusterTemplate::is_empty")]
    pub remote_clusters: RemoteClusterTemplate,
}

/// openMCP: mimeo asks for access with an `AccessRequest` per selected `Cluster`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenMcpInventory {
    /// How long an `AccessRequest` may stay ungranted before the entry is reported as
    /// `AccessNotGranted` (mimeo keeps waiting). Default 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub grant_timeout_seconds: Option<u32>,
    /// Also ask for creating namespaces, for rules whose targets have `createNamespace`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub create_namespaces: bool,
}

/// Cluster API: nothing to configure; the kubeconfig is the Cluster's `<name>-kubeconfig`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ClusterApiInventory {}

/// SIG-Multicluster `ClusterProfile`s.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProfileInventory {
    /// The access provider to use: its entry in `status.accessProviders` gives the server and
    /// CA, and the provider of this name in the installation's provider file
    /// (`--cluster-profile-providers`) gives the credentials.
    #[schemars(length(min = 1, max = 253))]
    pub provider: String,
}

/// Fields of every `RemoteCluster` an inventory makes. Besides these, each gets the labels of its
/// entry's namespace and of the entry itself (the namespace's win, as only the platform labels
/// its namespaces), one label per openMCP purpose, and `mimeo.dev/inventory`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemoteClusterTemplate {
    /// Copied to each `RemoteCluster`'s `allowedNamespaces`. Unset: only `ClusterSyncRule`s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_namespaces: Option<LabelSelector>,
    /// Labels added to each `RemoteCluster`, over the namespace's and the entry's labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl RemoteClusterTemplate {
    fn is_empty(&self) -> bool {
        self.allowed_namespaces.is_none() && self.labels.is_empty()
    }
}

/// What the inventory holds now, as read back from the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInventoryStatus {
    /// The generation of the spec this status was written for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: every selected entry has a connectable `RemoteCluster`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Entries the selector chooses in the namespaces read.
    #[serde(default)]
    pub selected: i32,
    /// Of those, the ones whose `RemoteCluster` has credentials to connect with.
    #[serde(default)]
    pub connected: i32,
    /// Entries that are selected but not connected, and why; at most 20, the rest counted in
    /// `moreProblems`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<EntryProblem>,
    /// How many more entries have problems than `problems` lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub more_problems: Option<i32>,
}

/// Why a selected entry has no usable `RemoteCluster`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EntryProblem {
    /// The entry's namespace.
    pub namespace: String,
    /// The entry's name.
    pub name: String,
    /// `AccessPending`, `AccessDenied`, `AccessNotGranted`, `ControlPlaneNotAvailable`,
    /// `KubeconfigMissing`, `ProviderMissing`, `ProviderFailed`, `NameTaken`.
    pub reason: String,
    /// What is wrong, and what to do about it.
    pub message: String,
}
