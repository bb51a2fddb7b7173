//! The ConfigMaps `configmap://` plugins come from, each watched by name (metadata only) while a
//! rule uses it, so that a replaced component, or a ConfigMap created or fixed after the rule,
//! reaches the rule's copies at once rather than at its next retry or resync.

use super::watches::Triggers;
use crate::api::Transform;
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

struct Watched {
    rules: Arc<Mutex<BTreeSet<RuleKey>>>,
    task: AbortHandle,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub struct PluginConfigMaps {
    client: Client,
    triggers: Triggers,
    watched: Mutex<HashMap<Place, Watched>>,
    by_rule: Mutex<HashMap<RuleKey, BTreeSet<Place>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl PluginConfigMaps {
    pub fn new(client: Client, triggers: Triggers) -> Self {
        PluginConfigMaps {
            client,
            triggers,
            watched: Mutex::new(HashMap::new()),
            by_rule: Mutex::new(HashMap::new()),
        }
    }

    /// Records the ConfigMaps `rule` loads plugins from now; watches new ones and stops watching
    /// those no rule uses any more.
    pub fn uses(&self, rule: &RuleKey, places: BTreeSet<Place>) {
        let before = lock(&self.by_rule)
            .insert(rule.clone(), places.clone())
            .unwrap_or_default();
        if before == places {
            return;
        }
        let mut watched = lock(&self.watched);
        for gone in before.difference(&places) {
            if let Some(w) = watched.get(gone) {
                let mut rules = lock(&w.rules);
                rules.remove(rule);
                if rules.is_empty() {
                    drop(rules);
                    watched.remove(gone);
                }
            }
        }
        for place in &places {
            let entry = watched.entry(place.clone()).or_insert_with(|| self.watch(place));
            lock(&entry.rules).insert(rule.clone());
        }
    }

    /// Forgets a deleted rule.
    pub fn forget(&self, rule: &RuleKey) {
        self.uses(rule, BTreeSet::new());
        lock(&self.by_rule).remove(rule);
    }

    fn watch(&self, (namespace, name): &Place) -> Watched {
        let rules = Arc::new(Mutex::new(BTreeSet::new()));
        let api = Api::<PartialObjectMeta<ConfigMap>>::namespaced(self.client.clone(), namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let stream = watcher(api, config).default_backoff();
        let (woken, triggers) = (rules.clone(), self.triggers.clone());
        let place = format!("{namespace}/{name}");
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            let mut listed = false;
            while let Some(event) = stream.next().await {
                match event {
                    // The first list is what the rule loaded already; a relist may hide a change.
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) if !listed => {}
                    Ok(watcher::Event::InitDone) => listed = true,
                    Ok(_) => {
                        for rule in lock(&woken).iter() {
                            triggers.fire(rule);
                        }
                    }
                    Err(e) => {
                        tracing::debug!(config_map = %place, error = %e, "plugin ConfigMap watch failed; retrying with backoff")
                    }
                }
            }
        })
        .abort_handle();
        Watched { rules, task }
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
