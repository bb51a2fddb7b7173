//! The channels into the controllers: sending a rule's (or a cluster's, or an inventory's)
//! reference makes it reconcile.

use crate::api::{ClusterInventory, ClusterSyncRule, RemoteCluster, SyncRule};
use crate::sync::ownership::{RuleKey, RuleKind};
use crate::sync::scope::Scope;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use kube::runtime::reflector::ObjectRef;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Channels into the controllers: sending a rule's reference makes it reconcile.
#[derive(Clone)]
pub struct Triggers {
    /// The `SyncRule` controller's, keyed by namespace when there is one controller per
    /// namespace of the scope; under `None` when one controller watches all namespaces.
    sync_rules: Arc<BTreeMap<Option<String>, UnboundedSender<ObjectRef<SyncRule>>>>,
    cluster_sync_rules: UnboundedSender<ObjectRef<ClusterSyncRule>>,
    remote_clusters: UnboundedSender<ObjectRef<RemoteCluster>>,
    /// The `ClusterInventory` controller's: woken by the fleet's `RemoteCluster` watch once its
    /// cache, which the inventory reads, holds the change.
    inventories: UnboundedSender<ObjectRef<ClusterInventory>>,
}

/// The receiving ends, one per controller.
pub struct TriggerStreams {
    /// One per `SyncRule` controller: for a namespace of the scope, or (`None`) for all.
    pub sync_rules: Vec<(Option<String>, UnboundedReceiver<ObjectRef<SyncRule>>)>,
    pub cluster_sync_rules: UnboundedReceiver<ObjectRef<ClusterSyncRule>>,
    pub remote_clusters: UnboundedReceiver<ObjectRef<RemoteCluster>>,
    pub inventories: UnboundedReceiver<ObjectRef<ClusterInventory>>,
}

impl Triggers {
    pub fn new(scope: &Scope) -> (Self, TriggerStreams) {
        let sync_keys: Vec<Option<String>> = match scope.namespaces() {
            None => vec![None],
            Some(names) => names.iter().cloned().map(Some).collect(),
        };
        let mut sync_senders = BTreeMap::new();
        let mut sync_receivers = Vec::with_capacity(sync_keys.len());
        for key in sync_keys {
            let (tx, rx) = unbounded();
            sync_senders.insert(key.clone(), tx);
            sync_receivers.push((key, rx));
        }
        let (cluster_tx, cluster_rx) = unbounded();
        let (remote_tx, remote_rx) = unbounded();
        let (inventory_tx, inventory_rx) = unbounded();
        (
            Triggers {
                sync_rules: Arc::new(sync_senders),
                cluster_sync_rules: cluster_tx,
                remote_clusters: remote_tx,
                inventories: inventory_tx,
            },
            TriggerStreams {
                sync_rules: sync_receivers,
                cluster_sync_rules: cluster_rx,
                remote_clusters: remote_rx,
                inventories: inventory_rx,
            },
        )
    }

    pub fn fire(&self, rule: &RuleKey) {
        // A closed channel means the controller is shutting down; nothing to wake then.
        match (rule.kind, &rule.namespace) {
            (RuleKind::SyncRule, Some(ns)) => {
                let sender = self
                    .sync_rules
                    .get(&None)
                    .or_else(|| self.sync_rules.get(&Some(ns.clone())));
                if let Some(sender) = sender {
                    let _ = sender.unbounded_send(ObjectRef::new(&rule.name).within(ns));
                }
            }
            (RuleKind::SyncRule, None) => {}
            (RuleKind::ClusterSyncRule, _) => {
                let _ = self.cluster_sync_rules.unbounded_send(ObjectRef::new(&rule.name));
            }
        }
    }

    /// Makes a `RemoteCluster`'s status be looked at again.
    pub fn fire_cluster(&self, name: &str) {
        let _ = self.remote_clusters.unbounded_send(ObjectRef::new(name));
    }

    /// Makes a `ClusterInventory` be looked at again.
    pub fn fire_inventory(&self, name: &str) {
        let _ = self.inventories.unbounded_send(ObjectRef::new(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sync_rule_is_woken_through_its_namespace_controller() {
        let scope = Scope::from_namespaces(["a", "b"]).unwrap();
        let (triggers, mut streams) = Triggers::new(&scope);
        let keys: Vec<Option<String>> = streams.sync_rules.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(keys, [Some("a".to_owned()), Some("b".to_owned())]);
        triggers.fire(&RuleKey::sync_rule("b", "r"));
        triggers.fire(&RuleKey::sync_rule("c", "r"));
        let received: Vec<Vec<ObjectRef<SyncRule>>> = streams
            .sync_rules
            .iter_mut()
            .map(|(_, rx)| std::iter::from_fn(|| rx.try_recv().ok()).collect())
            .collect();
        assert_eq!(received, [vec![], vec![ObjectRef::new("r").within("b")]]);

        let (triggers, mut streams) = Triggers::new(&Scope::Cluster);
        triggers.fire(&RuleKey::sync_rule("c", "r"));
        let (key, rx) = &mut streams.sync_rules[0];
        assert_eq!(*key, None);
        assert_eq!(rx.try_recv().ok(), Some(ObjectRef::new("r").within("c")));
    }
}
