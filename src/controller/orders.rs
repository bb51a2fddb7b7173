//! The watches `targets[].forEach` reads its objects through, one set per cluster: the cluster
//! mimeo runs in, or a `RemoteCluster` (say openMCP's onboarding cluster, where tenants order).
//! Each set is a [`NextToWatches`] of that cluster's client: one watch per kind, shared by every
//! rule that follows it, waking a rule when the objects it chose change.

use super::fleet::ClusterHandle;
use super::next_to::NextToWatches;
use super::watches::Triggers;
use crate::locks::lock;
use crate::sync::ownership::RuleKey;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// A cluster's watches, with the handle they were made for: a cluster whose handle was made
/// anew (new credentials) gets new watches.
struct ClusterOrders {
    handle: Arc<super::watches::Watches>,
    watches: Arc<NextToWatches>,
}

pub struct OrderWatches {
    triggers: Triggers,
    clusters: Mutex<HashMap<Option<String>, ClusterOrders>>,
}

impl OrderWatches {
    pub fn new(triggers: Triggers) -> Self {
        OrderWatches {
            triggers,
            clusters: Mutex::new(HashMap::new()),
        }
    }

    /// The watches of the cluster `handle` reaches.
    pub fn of(&self, handle: &ClusterHandle) -> Arc<NextToWatches> {
        let mut clusters = lock(&self.clusters);
        if let Some(known) = clusters.get(&handle.name)
            && Arc::ptr_eq(&known.handle, &handle.watches)
        {
            return known.watches.clone();
        }
        let watches = NextToWatches::new(handle.client.clone(), self.triggers.clone());
        clusters.insert(
            handle.name.clone(),
            ClusterOrders {
                handle: handle.watches.clone(),
                watches: watches.clone(),
            },
        );
        watches
    }

    /// Forgets what `rule` follows in every cluster but `keep`; a cluster no rule follows in any
    /// more has its watches stopped.
    pub fn forget_except(&self, rule: &RuleKey, keep: &BTreeSet<Option<String>>) {
        let mut clusters = lock(&self.clusters);
        for (cluster, orders) in clusters.iter() {
            if !keep.contains(cluster) {
                orders.watches.forget(rule);
            }
        }
        clusters.retain(|_, orders| orders.watches.in_use());
    }

    pub fn forget(&self, rule: &RuleKey) {
        self.forget_except(rule, &BTreeSet::new());
    }
}
