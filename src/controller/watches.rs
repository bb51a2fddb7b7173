//! The shared watches, and the routing from a watch event to exactly the rules it concerns.
//!
//! - Copies: one label-selected watch per kind over all namespaces, so only copies are cached.
//! - Namespaces: one metadata-only watch.
//! - Sources: one watch per (kind, namespace) that holds sources, started when the first rule
//!   needs it and stopped when the last rule lets go. Never one watch per rule.
//!
//! Each rule declares its [`Interest`] (which source watch, which names or selector, which
//! namespaces) when it is reconciled; events are matched against those interests, so an event
//! wakes exactly the rules it may concern. Caches drop `managedFields`.

use super::error::Error;
use crate::api::{ClusterSyncRule, RemoteCluster, SyncRule};
use crate::clusters::{KubeconfigProblem, classify};
use crate::metrics::Metrics;
use crate::sync::ownership::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, RuleKey, RuleKind, recorded_rule};
use crate::sync::targets::NamespaceInfo;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::core::{ApiResource, Selector, SelectorExt};
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::DefaultBackoff;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::task::AbortHandle;

/// How long a reconcile waits for a cache of this cluster to fill before it gives up and retries.
const CACHE_TIMEOUT: Duration = Duration::from_secs(30);
/// The same for another cluster: its copies are marked and the rule goes on with the others.
const REMOTE_CACHE_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest pause between two attempts to re-open a watch on another cluster, so that a
/// cluster back from an outage is watched again within seconds.
const REMOTE_WATCH_BACKOFF_CAP: Duration = Duration::from_secs(4);

/// Which cluster a set of watches looks at; it decides how patiently they wait and retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// The cluster mimeo runs in: wait for caches, back off like client-go.
    Local,
    /// A `RemoteCluster`: never hold up the rule for long, and come back quickly after outages.
    Remote,
}

impl Reach {
    fn cache_timeout(self) -> Duration {
        match self {
            Reach::Local => CACHE_TIMEOUT,
            Reach::Remote => REMOTE_CACHE_TIMEOUT,
        }
    }

    fn backoff(self) -> Box<dyn Backoff> {
        match self {
            Reach::Local => Box::new(DefaultBackoff::default()),
            Reach::Remote => Box::new(CappedBackoff::new(
                Duration::from_millis(250),
                REMOTE_WATCH_BACKOFF_CAP,
            )),
        }
    }
}

/// Exponential backoff that doubles from `first` up to `cap`, and starts over on reset.
#[derive(Clone, Debug)]
pub struct CappedBackoff {
    first: Duration,
    next: Duration,
    cap: Duration,
}

impl CappedBackoff {
    pub fn new(first: Duration, cap: Duration) -> Self {
        CappedBackoff {
            first,
            next: first,
            cap,
        }
    }
}

impl Iterator for CappedBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let now = self.next;
        self.next = (self.next * 2).min(self.cap);
        Some(now)
    }
}

impl Backoff for CappedBackoff {
    fn reset(&mut self) {
        self.next = self.first;
    }
}

/// Identifies one shared source watch: a kind in a namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceWatchKey {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub namespace: String,
}

impl SourceWatchKey {
    pub fn new(resource: &ApiResource, namespace: &str) -> Self {
        SourceWatchKey {
            group: resource.group.clone(),
            version: resource.version.clone(),
            plural: resource.plural.clone(),
            namespace: namespace.to_owned(),
        }
    }
}

/// Which source objects a rule reads.
#[derive(Clone, Debug)]
pub struct SourceInterest {
    pub watch: SourceWatchKey,
    pub resource: ApiResource,
    pub name: Option<String>,
    pub selector: Option<Selector>,
    /// Names that matched at the last reconcile: a source that stops matching must wake the rule.
    pub matched: BTreeSet<String>,
}

impl SourceInterest {
    fn concerns(&self, object: &DynamicObject) -> bool {
        let name = object.name_any();
        match (&self.name, &self.selector) {
            (Some(wanted), _) => *wanted == name,
            (None, Some(selector)) => selector.matches(object.labels()) || self.matched.contains(&name),
            (None, None) => false,
        }
    }
}

/// Which namespaces' comings, goings and label or annotation changes matter to a rule.
#[derive(Clone, Debug, Default)]
pub struct NamespaceInterest {
    pub names: BTreeSet<String>,
    /// The rule selects namespaces by labels, so any namespace may matter.
    pub any: bool,
}

/// All a rule watches, as declared at its last reconcile.
#[derive(Clone, Debug, Default)]
pub struct Interest {
    pub source: Option<SourceInterest>,
    pub namespaces: NamespaceInterest,
}

/// Channels into the two controllers: sending a rule's reference makes it reconcile.
#[derive(Clone)]
pub struct Triggers {
    sync_rules: UnboundedSender<ObjectRef<SyncRule>>,
    cluster_sync_rules: UnboundedSender<ObjectRef<ClusterSyncRule>>,
    remote_clusters: UnboundedSender<ObjectRef<RemoteCluster>>,
}

/// The receiving ends, one per controller.
pub struct TriggerStreams {
    pub sync_rules: UnboundedReceiver<ObjectRef<SyncRule>>,
    pub cluster_sync_rules: UnboundedReceiver<ObjectRef<ClusterSyncRule>>,
    pub remote_clusters: UnboundedReceiver<ObjectRef<RemoteCluster>>,
}

impl Triggers {
    pub fn new() -> (Self, TriggerStreams) {
        let (sync_tx, sync_rx) = unbounded();
        let (cluster_tx, cluster_rx) = unbounded();
        let (remote_tx, remote_rx) = unbounded();
        (
            Triggers {
                sync_rules: sync_tx,
                cluster_sync_rules: cluster_tx,
                remote_clusters: remote_tx,
            },
            TriggerStreams {
                sync_rules: sync_rx,
                cluster_sync_rules: cluster_rx,
                remote_clusters: remote_rx,
            },
        )
    }

    pub fn fire(&self, rule: &RuleKey) {
        // A closed channel means the controller is shutting down; nothing to wake then.
        match (rule.kind, &rule.namespace) {
            (RuleKind::SyncRule, Some(ns)) => {
                let _ = self
                    .sync_rules
                    .unbounded_send(ObjectRef::new(&rule.name).within(ns));
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
}

struct SourceWatch {
    store: Store<DynamicObject>,
    listed: Listed,
    task: AbortHandle,
}

/// Whether a watch has delivered its first full list. kube's `Store::wait_until_ready` loses
/// wake-ups when several tasks wait at once, so readiness is tracked here with a channel that
/// any number of waiters can share.
pub(super) type Listed = tokio::sync::watch::Receiver<bool>;

pub(super) async fn wait_listed(mut listed: Listed, what: &str, timeout: Duration) -> Result<(), Error> {
    match tokio::time::timeout(timeout, listed.wait_for(|done| *done)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(_)) => Err(Error::NotReady(format!("the {what} watch stopped"))),
        Err(_) => Err(Error::NotReady(format!("the {what} watch has not listed yet"))),
    }
}

/// A source object, to remember when the controller saw each of its versions.
type SourceId = (String, String, String);
/// A copy: kind (plural), namespace and name.
type CopyId = (String, String, String);

/// The shared caches and the interests that route their events.
pub struct Watches {
    /// This very value, for the watch tasks it starts: they must not keep it alive.
    me: Weak<Watches>,
    client: Client,
    reach: Reach,
    /// Why the last watch request failed, until a watch lists again.
    failure: Mutex<Option<KubeconfigProblem>>,
    metrics: Arc<Metrics>,
    triggers: Triggers,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    copies: Vec<(ApiResource, Store<DynamicObject>)>,
    /// The namespace and copies watches, each listed at least once.
    base_listed: Vec<Listed>,
    sources: Mutex<HashMap<SourceWatchKey, SourceWatch>>,
    /// Copies written here whose write the copies cache may not have seen yet: the version the
    /// cache held before, and the copy the apiserver returned.
    written: Mutex<HashMap<CopyId, (String, Arc<DynamicObject>)>>,
    interests: Mutex<HashMap<RuleKey, Interest>>,
    seen: Mutex<HashMap<SourceId, (String, Instant)>>,
    tasks: Mutex<Vec<AbortHandle>>,
}

impl Drop for Watches {
    fn drop(&mut self) {
        for task in self.tasks.get_mut().unwrap_or_else(|p| p.into_inner()).drain(..) {
            task.abort();
        }
        let sources = self.sources.get_mut().unwrap_or_else(|p| p.into_inner());
        self.metrics.add_source_watches(-(sources.len() as i64));
        for (_, watch) in sources.drain() {
            watch.task.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Watches {
    /// Starts the namespace watch and one copies watch per kind in `copy_kinds`.
    pub fn start(
        client: Client,
        reach: Reach,
        metrics: Arc<Metrics>,
        triggers: Triggers,
        copy_kinds: Vec<ApiResource>,
    ) -> Arc<Self> {
        let ns_writer: Writer<PartialObjectMeta<Namespace>> = Writer::default();
        let namespaces = ns_writer.as_reader();
        let mut copy_writers = Vec::new();
        let mut copies = Vec::new();
        for resource in copy_kinds {
            let writer = Writer::new(resource.clone());
            copies.push((resource.clone(), writer.as_reader()));
            copy_writers.push((resource, writer));
        }
        let (ns_listed_tx, ns_listed) = tokio::sync::watch::channel(false);
        let mut base_listed = vec![ns_listed];
        let mut copy_listed_tx = Vec::new();
        for _ in &copy_writers {
            let (tx, rx) = tokio::sync::watch::channel(false);
            base_listed.push(rx);
            copy_listed_tx.push(tx);
        }
        let this = Arc::new_cyclic(|me| Watches {
            me: me.clone(),
            client: client.clone(),
            reach,
            failure: Mutex::new(None),
            metrics,
            triggers,
            namespaces,
            copies,
            base_listed,
            sources: Mutex::new(HashMap::new()),
            written: Mutex::new(HashMap::new()),
            interests: Mutex::new(HashMap::new()),
            seen: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Vec::new()),
        });

        let mut tasks = Vec::new();
        let weak = this.weak_self();
        let ns_stream = watcher(
            Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
            watcher::Config::default(),
        )
        .backoff(reach.backoff())
        .modify(|ns| ns.managed_fields_mut().clear())
        .reflect(ns_writer);
        tasks.push(spawn_consumer(
            "namespaces",
            ns_stream,
            weak.clone(),
            ns_listed_tx,
            |this, event| match event {
                watcher::Event::Apply(ns) | watcher::Event::Delete(ns) => this.on_namespace(&ns.name_any()),
                watcher::Event::InitDone => this.on_namespaces_relisted(),
                _ => {}
            },
        ));
        for ((resource, writer), listed) in copy_writers.into_iter().zip(copy_listed_tx) {
            let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
            let config = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"));
            let stream = watcher(api, config)
                .backoff(reach.backoff())
                .modify(|o: &mut DynamicObject| o.metadata.managed_fields = None)
                .reflect(writer);
            tasks.push(spawn_consumer(
                "copies",
                stream,
                weak.clone(),
                listed,
                |this, event| match event {
                    watcher::Event::Apply(copy) | watcher::Event::Delete(copy) => {
                        if let Some(rule) = recorded_rule(&copy.metadata) {
                            this.triggers.fire(&rule);
                        }
                    }
                    _ => {}
                },
            ));
        }
        *lock(&this.tasks) = tasks;
        this
    }

    /// Waits until the namespace and copies caches hold a full list.
    pub async fn wait_ready(&self) -> Result<(), Error> {
        for listed in &self.base_listed {
            wait_listed(
                listed.clone(),
                "namespaces and copies",
                self.reach.cache_timeout(),
            )
            .await?;
        }
        Ok(())
    }

    /// Whether the namespace and copies caches have listed (without waiting).
    pub fn is_listed(&self) -> bool {
        self.base_listed.iter().all(|l| *l.borrow())
    }

    /// Why the watches of this cluster fail, while they do.
    pub fn failure(&self) -> Option<KubeconfigProblem> {
        lock(&self.failure).clone()
    }

    fn note_failure(&self, error: &watcher::Error) {
        let problem = match error {
            watcher::Error::InitialListFailed(e)
            | watcher::Error::WatchStartFailed(e)
            | watcher::Error::WatchFailed(e) => classify(e),
            other => KubeconfigProblem {
                reason: "WatchFailed",
                message: other.to_string(),
            },
        };
        *lock(&self.failure) = Some(problem);
    }

    /// Every namespace, with labels and annotations.
    pub fn namespaces(&self) -> Vec<NamespaceInfo> {
        self.namespaces
            .state()
            .iter()
            .map(|ns| NamespaceInfo {
                name: ns.name_any(),
                labels: ns.labels().clone(),
                annotations: ns.annotations().clone(),
                terminating: ns.metadata.deletion_timestamp.is_some(),
            })
            .collect()
    }

    /// A cached copy (an object carrying mimeo's label) of the given kind, if there is one.
    /// Where the cache still holds the version a write of ours replaced, the written copy is
    /// returned instead: deciding on the stale one would write the same content twice.
    pub fn cached_copy(
        &self,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<DynamicObject>> {
        let (_, store) = self.copies.iter().find(|(r, _)| r == resource)?;
        let cached = store.get(&ObjectRef::new_with(name, resource.clone()).within(namespace))?;
        let id = (resource.plural.clone(), namespace.to_owned(), name.to_owned());
        let mut written = lock(&self.written);
        match written.get(&id) {
            Some((replaced, stored)) if cached.resource_version().as_ref() == Some(replaced) => {
                return Some(stored.clone());
            }
            Some(_) => {
                // The cache has caught up (or someone changed the copy since): it is the truth.
                written.remove(&id);
            }
            None => {}
        }
        Some(cached)
    }

    /// Records a write over `replaced` (the version the decision was made on), until the copies
    /// cache moves past that version.
    pub fn wrote(&self, resource: &ApiResource, replaced: Option<&DynamicObject>, stored: DynamicObject) {
        let Some(replaced_version) = replaced.and_then(|r| r.resource_version()) else {
            return;
        };
        let id = (
            resource.plural.clone(),
            stored.namespace().unwrap_or_default(),
            stored.name_any(),
        );
        lock(&self.written).insert(id, (replaced_version, Arc::new(stored)));
    }

    /// Every cached copy that records `rule` as its maker.
    pub fn copies_of(&self, rule: &RuleKey) -> Vec<(ApiResource, Arc<DynamicObject>)> {
        let mut out = Vec::new();
        for (resource, store) in &self.copies {
            for copy in store.state() {
                if recorded_rule(&copy.metadata).as_ref() == Some(rule) {
                    out.push((resource.clone(), copy));
                }
            }
        }
        out
    }

    /// Records what `rule` watches now, starting and stopping shared source watches as needed,
    /// and returns the cache of its sources once it holds a full list.
    pub async fn declare(
        &self,
        rule: &RuleKey,
        interest: Interest,
    ) -> Result<Option<Store<DynamicObject>>, Error> {
        let wanted = interest
            .source
            .as_ref()
            .map(|s| (s.watch.clone(), s.resource.clone()));
        lock(&self.interests).insert(rule.clone(), interest);
        let acquired = wanted.map(|(key, resource)| self.acquire(key, resource));
        self.stop_unused_watches();
        match acquired {
            Some((store, listed)) => {
                wait_listed(listed, "source", self.reach.cache_timeout()).await?;
                Ok(Some(store))
            }
            None => Ok(None),
        }
    }

    /// Updates the names a selector-based rule matched, so that a source leaving the selector
    /// still wakes the rule.
    pub fn set_matched(&self, rule: &RuleKey, matched: BTreeSet<String>) {
        if let Some(source) = lock(&self.interests)
            .get_mut(rule)
            .and_then(|i| i.source.as_mut())
        {
            source.matched = matched;
        }
    }

    /// Forgets a rule (deleted): its source watch stops if no other rule needs it.
    pub fn forget(&self, rule: &RuleKey) {
        lock(&self.interests).remove(rule);
        self.stop_unused_watches();
    }

    /// When the controller saw version `resource_version` of a source, if it did.
    pub fn seen_at(
        &self,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
        resource_version: &str,
    ) -> Option<Instant> {
        let id = (resource.plural.clone(), namespace.to_owned(), name.to_owned());
        lock(&self.seen)
            .get(&id)
            .filter(|(rv, _)| rv == resource_version)
            .map(|(_, at)| *at)
    }

    /// How many shared source watches run.
    pub fn source_watch_count(&self) -> usize {
        lock(&self.sources).len()
    }

    fn acquire(&self, key: SourceWatchKey, resource: ApiResource) -> (Store<DynamicObject>, Listed) {
        let mut sources = lock(&self.sources);
        if let Some(watch) = sources.get(&key) {
            return (watch.store.clone(), watch.listed.clone());
        }
        let (listed_tx, listed) = tokio::sync::watch::channel(false);
        let writer = Writer::new(resource.clone());
        let store = writer.as_reader();
        let api = Api::<DynamicObject>::namespaced_with(self.client.clone(), &key.namespace, &resource);
        let stream = watcher(api, watcher::Config::default())
            .backoff(self.reach.backoff())
            .modify(|o: &mut DynamicObject| o.metadata.managed_fields = None)
            .reflect(writer);
        let watched = key.clone();
        let task = spawn_consumer(
            "sources",
            stream,
            self.weak_self(),
            listed_tx,
            move |this, event| match event {
                watcher::Event::Apply(o) => {
                    this.remember_seen(&watched, o);
                    this.on_source(&watched, o);
                }
                watcher::Event::Delete(o) => this.on_source(&watched, o),
                watcher::Event::InitDone => this.on_sources_relisted(&watched),
                _ => {}
            },
        );
        tracing::debug!(kind = %key.plural, namespace = %key.namespace, "starting a shared source watch");
        sources.insert(
            key,
            SourceWatch {
                store: store.clone(),
                listed: listed.clone(),
                task,
            },
        );
        self.metrics.add_source_watches(1);
        (store, listed)
    }

    fn stop_unused_watches(&self) {
        let used: BTreeSet<SourceWatchKey> = lock(&self.interests)
            .values()
            .filter_map(|i| i.source.as_ref().map(|s| s.watch.clone()))
            .collect();
        let mut sources = lock(&self.sources);
        let before = sources.len();
        sources.retain(|key, watch| {
            let keep = used.contains(key);
            if !keep {
                tracing::debug!(kind = %key.plural, namespace = %key.namespace, "stopping an unused source watch");
                watch.task.abort();
            }
            keep
        });
        self.metrics
            .add_source_watches(sources.len() as i64 - before as i64);
    }

    fn weak_self(&self) -> Weak<Watches> {
        self.me.clone()
    }

    fn remember_seen(&self, key: &SourceWatchKey, object: &DynamicObject) {
        if let Some(rv) = object.resource_version() {
            let id = (key.plural.clone(), key.namespace.clone(), object.name_any());
            lock(&self.seen).insert(id, (rv, Instant::now()));
        }
    }

    fn on_source(&self, key: &SourceWatchKey, object: &DynamicObject) {
        let interests = lock(&self.interests);
        for (rule, interest) in interests.iter() {
            if interest
                .source
                .as_ref()
                .is_some_and(|s| &s.watch == key && s.concerns(object))
            {
                self.triggers.fire(rule);
            }
        }
    }

    fn on_sources_relisted(&self, key: &SourceWatchKey) {
        let interests = lock(&self.interests);
        for (rule, interest) in interests.iter() {
            if interest.source.as_ref().is_some_and(|s| &s.watch == key) {
                self.triggers.fire(rule);
            }
        }
    }

    fn on_namespace(&self, namespace: &str) {
        let interests = lock(&self.interests);
        for (rule, interest) in interests.iter() {
            if interest.namespaces.any || interest.namespaces.names.contains(namespace) {
                self.triggers.fire(rule);
            }
        }
    }

    fn on_namespaces_relisted(&self) {
        let interests = lock(&self.interests);
        for rule in interests.keys() {
            self.triggers.fire(rule);
        }
    }
}

/// Runs a reflected watch stream on its own task, handing each event to `on_event` while the
/// [`Watches`] lives. Watch errors are logged and retried with backoff by the stream itself.
fn spawn_consumer<K, S, F>(
    what: &'static str,
    stream: S,
    watches: Weak<Watches>,
    listed: tokio::sync::watch::Sender<bool>,
    on_event: F,
) -> AbortHandle
where
    K: Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    F: Fn(&Watches, &watcher::Event<K>) + Send + 'static,
{
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            let Some(watches) = watches.upgrade() else { break };
            match event {
                Ok(event) => {
                    if matches!(event, watcher::Event::InitDone) {
                        // The reflector has stored the full list by the time the event gets here.
                        tracing::debug!(watch = what, "watch listed");
                        listed.send_replace(true);
                        *lock(&watches.failure) = None;
                    }
                    on_event(&watches, &event)
                }
                Err(e) => {
                    tracing::warn!(watch = what, error = %e, "watch failed; retrying with backoff");
                    watches.note_failure(&e);
                }
            }
        }
    });
    task.abort_handle()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap_and_starts_over_on_reset() {
        let mut backoff = CappedBackoff::new(Duration::from_millis(250), Duration::from_secs(4));
        let first: Vec<u64> = backoff.by_ref().take(7).map(|d| d.as_millis() as u64).collect();
        assert_eq!(first, [250, 500, 1000, 2000, 4000, 4000, 4000]);
        backoff.reset();
        assert_eq!(backoff.next(), Some(Duration::from_millis(250)));
    }
}
