//! What the reconciler needs to know of either rule kind.

use crate::api::{ClusterSyncRule, RuleSpec, RuleStatus, SyncRule};
use crate::sync::ownership::RuleKey;
use kube::api::Api;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// A `SyncRule` or a `ClusterSyncRule`.
pub trait RuleResource:
    Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// `SyncRule` or `ClusterSyncRule`, for logs and metrics.
    const KIND: &'static str;

    fn key(&self) -> RuleKey;
    fn rule_spec(&self) -> &RuleSpec;
    fn rule_status(&self) -> Option<&RuleStatus>;
    /// The namespace the rule's sources live in.
    fn source_namespace(&self) -> Option<String>;
    /// An API handle for rules of this kind, scoped like this one.
    fn api(&self, client: Client) -> Api<Self>;
}

impl RuleResource for SyncRule {
    const KIND: &'static str = "SyncRule";

    fn key(&self) -> RuleKey {
        RuleKey::sync_rule(&self.namespace().unwrap_or_default(), &self.name_any())
    }

    fn rule_spec(&self) -> &RuleSpec {
        &self.spec
    }

    fn rule_status(&self) -> Option<&RuleStatus> {
        self.status.as_ref()
    }

    fn source_namespace(&self) -> Option<String> {
        self.namespace()
    }

    fn api(&self, client: Client) -> Api<Self> {
        Api::namespaced(client, &self.namespace().unwrap_or_default())
    }
}

impl RuleResource for ClusterSyncRule {
    const KIND: &'static str = "ClusterSyncRule";

    fn key(&self) -> RuleKey {
        RuleKey::cluster_sync_rule(&self.name_any())
    }

    fn rule_spec(&self) -> &RuleSpec {
        &self.spec
    }

    fn rule_status(&self) -> Option<&RuleStatus> {
        self.status.as_ref()
    }

    fn source_namespace(&self) -> Option<String> {
        self.spec.source.namespace.clone()
    }

    fn api(&self, client: Client) -> Api<Self> {
        Api::all(client)
    }
}
