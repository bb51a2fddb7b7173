//! What the reconciler needs to know of either rule kind.

use crate::api::{ClusterSyncRule, RuleSpec, RuleStatus, SyncRule};
use crate::sync::ownership::RuleKey;
use kube::api::{Api, ObjectMeta};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::hash::{DefaultHasher, Hash, Hasher};

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

/// What of a rule calls for a look when it changes: its spec (the generation), its deletion, its
/// finalizers, labels and annotations (touching one is how a user asks for a look), everything
/// but the status. Its status is mimeo's own record of the last look: a look woken by writing it
/// would find nothing new, and, coming behind every rotation, would hold up the next one.
pub fn calls_for_a_look(meta: &ObjectMeta) -> u64 {
    let mut hasher = DefaultHasher::new();
    (
        meta.generation,
        meta.deletion_timestamp.is_some(),
        &meta.finalizers,
        &meta.labels,
        &meta.annotations,
    )
        .hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{CopyState, CopyStatus, SourceRef};

    fn rule() -> SyncRule {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
            "metadata": {"name": "r", "namespace": "team", "generation": 1, "resourceVersion": "10",
                         "finalizers": ["mimeo.dev/cleanup"]},
            "spec": {"source": {"kind": "Secret", "name": "creds"}, "targets": [{"namespace": "apps"}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_status_write_calls_for_no_look() {
        let before = rule();
        let mut after = before.clone();
        after.metadata.resource_version = Some("11".into());
        after.status = Some(RuleStatus {
            targets: vec![CopyStatus {
                source: SourceRef {
                    namespace: None,
                    name: "creds".into(),
                },
                cluster: None,
                namespace: Some("apps".into()),
                name: "creds".into(),
                state: CopyState::Synced,
                hash: Some("abc".into()),
                message: None,
                since: None,
            }],
            ..Default::default()
        });
        assert_eq!(
            calls_for_a_look(&before.metadata),
            calls_for_a_look(&after.metadata)
        );
    }

    #[test]
    fn spec_deletion_finalizers_and_metadata_call_for_a_look() {
        let before = calls_for_a_look(&rule().metadata);
        let changes: [fn(&mut ObjectMeta); 5] = [
            |m| m.generation = Some(2),
            |m| {
                m.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ))
            },
            |m| m.finalizers = None,
            |m| m.labels = Some([("team".to_owned(), "a".to_owned())].into()),
            |m| m.annotations = Some([("poke".to_owned(), "1".to_owned())].into()),
        ];
        for change in changes {
            let mut meta = rule().metadata;
            change(&mut meta);
            assert_ne!(calls_for_a_look(&meta), before, "{meta:?}");
        }
    }
}
