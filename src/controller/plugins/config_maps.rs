//! The ConfigMaps `configmap://` plugins come from, each watched by name (metadata only) while a
//! rule uses it, so that a replaced component, or a ConfigMap created or fixed after the rule,
//! reaches the rule's copies at once rather than at its next retry or resync.

use super::used_by::UsedBy;
use crate::api::Transform;
use crate::controller::watches::Triggers;
use crate::locks::lock;
use crate::plugin::source::{PluginSource, parse};
use crate::sync::ownership::RuleKey;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use tokio::task::AbortHandle;

/// A ConfigMap: namespace and name.
type Place = (String, String);

/// The ConfigMaps a rule's `transforms` name as `configmap://` (those it may read): parsed as the
/// chain parses them, so that a reference the chain refuses is not watched either.
pub fn config_maps_of(transforms: &[Transform], rule_namespace: Option<&str>) -> BTreeSet<Place> {
    transforms
        .iter()
        .filter_map(|t| match parse(&t.plugin, rule_namespace) {
            Ok(PluginSource::ConfigMap { namespace, name, .. }) => Some((namespace, name)),
            _ => None,
        })
        .collect()
}

pub struct PluginConfigMaps {
    client: Client,
    triggers: Triggers,
    /// Shared with the watch tasks, which wake the rules using their ConfigMap.
    used: Arc<Mutex<UsedBy<Place>>>,
    watches: Mutex<HashMap<Place, AbortHandle>>,
}

impl Drop for PluginConfigMaps {
    fn drop(&mut self) {
        for (_, task) in lock(&self.watches).drain() {
            task.abort();
        }
    }
}

impl PluginConfigMaps {
    pub fn new(client: Client, triggers: Triggers) -> Self {
        PluginConfigMaps {
            client,
            triggers,
            used: Arc::default(),
            watches: Mutex::new(HashMap::new()),
        }
    }

    /// Records the ConfigMaps `rule` loads plugins from now (none: it is forgotten); watches new
    /// ones and stops watching those no rule uses any more.
    pub fn uses(&self, rule: &RuleKey, places: BTreeSet<Place>) {
        let (new, gone) = lock(&self.used).set(rule, places);
        let mut watches = lock(&self.watches);
        for place in gone {
            if let Some(task) = watches.remove(&place) {
                task.abort();
            }
        }
        for place in new {
            let task = self.watch(&place);
            watches.insert(place, task);
        }
    }

    fn watch(&self, place: &Place) -> AbortHandle {
        let (namespace, name) = place;
        let api = Api::<PartialObjectMeta<ConfigMap>>::namespaced(self.client.clone(), namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let stream = watcher(api, config).default_backoff();
        let (used, triggers, place) = (Arc::downgrade(&self.used), self.triggers.clone(), place.clone());
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            let mut listed = false;
            while let Some(event) = stream.next().await {
                match event {
                    // The first list is what the rule loaded already; a relist may hide a change.
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) if !listed => {}
                    Ok(watcher::Event::InitDone) => listed = true,
                    Ok(_) => {
                        let Some(used) = used.upgrade() else { break };
                        for rule in lock(&used).rules(&place) {
                            triggers.fire(rule);
                        }
                    }
                    Err(e) => {
                        tracing::debug!(config_map = %format!("{}/{}", place.0, place.1), error = %e, "plugin ConfigMap watch failed; retrying with backoff")
                    }
                }
            }
        })
        .abort_handle()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_config_maps_the_chain_may_read_are_watched() {
        let transforms: Vec<Transform> = serde_json::from_value(serde_json::json!([
            {"plugin": "configmap://team/plugins/a.wasm"},
            {"plugin": "configmap://team/plugins/b.wasm"},
            {"plugin": "configmap://other/plugins/a.wasm"},
            {"plugin": "file://a.wasm"},
        ]))
        .unwrap();
        let places = config_maps_of(&transforms, Some("team"));
        assert_eq!(
            places,
            BTreeSet::from([("team".to_owned(), "plugins".to_owned())])
        );
        // A ClusterSyncRule may name any namespace's.
        assert_eq!(config_maps_of(&transforms, None).len(), 2);
    }
}
