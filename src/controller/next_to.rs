//! The watches of the kinds `targets[].nextTo` and `targets[].forEach` follow, in one cluster:
//! one per kind over all namespaces, shared by every rule that follows it, started when the first
//! rule needs it and stopped when the last lets go.
//!
//! A watch reads metadata only unless some rule's selector asks about purposes (`spec.purposes`
//! is not in the metadata); it is restarted whole when such a rule comes. Its cache keeps of each
//! object only what selectors look at ([`Held`]), and an event wakes only the rules whose choice
//! it changes: a `Cluster`'s status updates wake nobody.

use super::watches::{Listed, Triggers, wait_listed};
use crate::api::ObjectSelector;
use crate::locks::lock;
use crate::sync::next_to::{Held, HeldObjects, changes_choice, chosen};
use crate::sync::object_selector::{Matcher, purposes_of};
use crate::sync::ownership::RuleKey;
use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::task::AbortHandle;

/// How long a reconcile waits for a watch of a followed kind to list before it reports the kind
/// unreadable (the watch lists later, and wakes the rule then).
const LIST_TIMEOUT: Duration = Duration::from_secs(10);

/// One followed kind: group, version and plural.
type KindKey = (String, String, String);

fn kind_key(resource: &ApiResource) -> KindKey {
    (
        resource.group.clone(),
        resource.version.clone(),
        resource.plural.clone(),
    )
}

/// What a rule follows: a kind and the selector that chooses its objects.
#[derive(Clone)]
struct Followed {
    kind: KindKey,
    matcher: Matcher,
}

/// What a shared watch found, as its readers see it.
#[derive(Clone)]
struct Found {
    objects: Arc<Mutex<HeldObjects>>,
    listed: Listed,
    /// Why the watch fails, while it does.
    failure: Arc<Mutex<Option<String>>>,
}

/// One shared watch.
struct KindWatch {
    /// Whole objects (for their purposes), or metadata only.
    whole: bool,
    found: Found,
    task: AbortHandle,
}

/// The watches of followed kinds, and which rules follow what.
pub struct NextToWatches {
    me: Weak<NextToWatches>,
    client: Client,
    triggers: Triggers,
    watches: Mutex<HashMap<KindKey, KindWatch>>,
    interests: Mutex<HashMap<RuleKey, Vec<Followed>>>,
}

impl Drop for NextToWatches {
    fn drop(&mut self) {
        for (_, watch) in self.watches.get_mut().unwrap_or_else(|p| p.into_inner()).drain() {
            watch.task.abort();
        }
    }
}

impl NextToWatches {
    pub fn new(client: Client, triggers: Triggers) -> Arc<Self> {
        Arc::new_cyclic(|me| NextToWatches {
            me: me.clone(),
            client,
            triggers,
            watches: Mutex::new(HashMap::new()),
            interests: Mutex::new(HashMap::new()),
        })
    }

    /// Records what `rule` follows now (each kind's resource and the selector choosing in it),
    /// starting and stopping watches as needed, and returns for each the chosen objects
    /// (namespace and name), or why the kind cannot be read.
    pub async fn follow(
        &self,
        rule: &RuleKey,
        wanted: &[(ApiResource, &ObjectSelector)],
    ) -> Vec<Result<Vec<(String, String)>, String>> {
        let mut followed = Vec::with_capacity(wanted.len());
        let mut matchers = Vec::with_capacity(wanted.len());
        for (resource, selector) in wanted {
            // The rule's checks made sure the selector parses.
            let matcher = Matcher::new(selector).ok();
            if let Some(matcher) = &matcher {
                followed.push(Followed {
                    kind: kind_key(resource),
                    matcher: matcher.clone(),
                });
            }
            matchers.push(matcher);
        }
        lock(&self.interests).insert(rule.clone(), followed);
        let watches: Vec<_> = wanted
            .iter()
            .map(|(resource, _)| self.acquire(resource))
            .collect();
        self.stop_unused();
        let mut out = Vec::with_capacity(wanted.len());
        for (found, matcher) in watches.into_iter().zip(matchers) {
            let Some(matcher) = matcher else {
                out.push(Err("the selector cannot be evaluated".to_owned()));
                continue;
            };
            match wait_listed(found.listed, "nextTo", LIST_TIMEOUT).await {
                Ok(()) => out.push(Ok(chosen(&lock(&found.objects), &matcher))),
                Err(e) => out.push(Err(lock(&found.failure).clone().unwrap_or_else(|| e.to_string()))),
            }
        }
        out
    }

    /// Whether any rule follows anything here.
    pub fn in_use(&self) -> bool {
        !lock(&self.interests).is_empty()
    }

    /// Forgets a rule (deleted, refused, or following nothing any more).
    pub fn forget(&self, rule: &RuleKey) {
        if lock(&self.interests).remove(rule).is_some() {
            self.stop_unused();
        }
    }

    /// The watch of a kind, started (or restarted whole, when a rule now asks about purposes).
    fn acquire(&self, resource: &ApiResource) -> Found {
        let key = kind_key(resource);
        let whole = lock(&self.interests)
            .values()
            .flatten()
            .any(|f| f.kind == key && f.matcher.uses_purposes());
        let mut watches = lock(&self.watches);
        if let Some(watch) = watches.get(&key)
            && (watch.whole || !whole)
        {
            return watch.found.clone();
        }
        if let Some(old) = watches.remove(&key) {
            old.task.abort();
        }
        let watch = self.start(resource, key.clone(), whole);
        let found = watch.found.clone();
        watches.insert(key, watch);
        found
    }

    fn start(&self, resource: &ApiResource, key: KindKey, whole: bool) -> KindWatch {
        tracing::debug!(kind = %resource.plural, group = %resource.group, whole, "starting a nextTo watch");
        let (listed_tx, listed) = tokio::sync::watch::channel(false);
        let objects = Arc::new(Mutex::new(HeldObjects::new()));
        let failure = Arc::new(Mutex::new(None));
        let config = watcher::Config::default();
        let events = match whole {
            true => watcher(
                Api::<DynamicObject>::all_with(self.client.clone(), resource),
                config,
            )
            .default_backoff()
            .map_ok(|e| held_event(e, |o: DynamicObject| held_of(o.metadata.clone(), &o.data)))
            .boxed(),
            false => watcher(
                Api::<PartialObjectMeta<DynamicObject>>::all_with(self.client.clone(), resource),
                config,
            )
            .default_backoff()
            .map_ok(|e| {
                held_event(e, |o: PartialObjectMeta<DynamicObject>| {
                    held_of(o.metadata, &serde_json::Value::Null)
                })
            })
            .boxed(),
        };
        let (weak, cache, failed) = (self.me.clone(), objects.clone(), failure.clone());
        let task = tokio::spawn(async move {
            let mut events = events;
            let mut relisting: Option<HeldObjects> = None;
            while let Some(event) = events.next().await {
                let Some(this) = weak.upgrade() else { break };
                match event {
                    Ok(watcher::Event::Init) => relisting = Some(HeldObjects::new()),
                    Ok(watcher::Event::InitApply((at, held))) => {
                        relisting.get_or_insert_default().insert(at, held);
                    }
                    Ok(watcher::Event::InitDone) => {
                        *lock(&cache) = relisting.take().unwrap_or_default();
                        *lock(&failed) = None;
                        listed_tx.send_replace(true);
                        this.wake_followers(&key, |_| true);
                    }
                    Ok(watcher::Event::Apply((at, held))) => {
                        let before = lock(&cache).insert(at.clone(), held.clone());
                        this.wake_followers(&key, |m| changes_choice(m, &at, before.as_ref(), Some(&held)));
                    }
                    Ok(watcher::Event::Delete((at, _))) => {
                        let before = lock(&cache).remove(&at);
                        this.wake_followers(&key, |m| changes_choice(m, &at, before.as_ref(), None));
                    }
                    Err(e) => {
                        tracing::warn!(kind = %key.2, error = %e, "nextTo watch failed; retrying with backoff");
                        *lock(&failed) = Some(e.to_string());
                    }
                }
            }
        });
        KindWatch {
            whole,
            found: Found {
                objects,
                listed,
                failure,
            },
            task: task.abort_handle(),
        }
    }

    /// Wakes the rules following `kind` whose selector `concerned` says the event matters to.
    fn wake_followers(&self, kind: &KindKey, concerned: impl Fn(&Matcher) -> bool) {
        let woken: Vec<RuleKey> = lock(&self.interests)
            .iter()
            .filter(|(_, followed)| followed.iter().any(|f| f.kind == *kind && concerned(&f.matcher)))
            .map(|(rule, _)| rule.clone())
            .collect();
        for rule in &woken {
            self.triggers.fire(rule);
        }
    }

    fn stop_unused(&self) {
        let used: BTreeSet<KindKey> = lock(&self.interests)
            .values()
            .flatten()
            .map(|f| f.kind.clone())
            .collect();
        lock(&self.watches).retain(|key, watch| {
            let keep = used.contains(key);
            if !keep {
                tracing::debug!(kind = %key.2, group = %key.0, "stopping an unused nextTo watch");
                watch.task.abort();
            }
            keep
        });
    }
}

/// An object of a followed kind as its cache keeps it: where it is, and what selectors look at.
type Entry = ((String, String), Held);

fn held_of(meta: kube::core::ObjectMeta, data: &serde_json::Value) -> Entry {
    let at = (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    );
    let held = Held {
        labels: meta.labels.unwrap_or_default(),
        purposes: purposes_of(data),
    };
    (at, held)
}

fn held_event<K>(event: watcher::Event<K>, entry: impl Fn(K) -> Entry) -> watcher::Event<Entry> {
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(entry(o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(entry(o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(entry(o)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_object_is_kept_as_its_place_labels_and_purposes() {
        let cluster: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "ws", "labels": {"tier": "prod"}},
            "spec": {"profile": "gardener", "tenancy": "Exclusive", "purposes": ["workload"]},
            "status": {"phase": "Ready"},
        }))
        .unwrap();
        let (at, held) = held_of(cluster.metadata.clone(), &cluster.data);
        assert_eq!(at, ("ws".to_owned(), "c1".to_owned()));
        assert_eq!(held.labels.get("tier").map(String::as_str), Some("prod"));
        assert_eq!(held.purposes, ["workload"]);
        // Metadata only: no purposes to read.
        let (_, meta_only) = held_of(cluster.metadata, &serde_json::Value::Null);
        assert!(meta_only.purposes.is_empty());
    }
}
