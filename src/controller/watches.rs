//! The shared watches, and the routing from a watch event to exactly the rules it concerns.
//!
//! - Copies: one label-selected watch per kind over all namespaces, so only copies are cached.
//! - Namespaces: one metadata-only watch.
//!
//! Limited to namespaces ([`Scope::Namespaces`]), nothing is watched cluster-wide: copies are
//! watched per kind and namespace, and each namespace object is watched by name
//! ([`named_namespaces`]: Roles can grant that, not a cluster-wide namespace watch).
//! - Sources: one watch per (kind, namespace) that holds sources, started when the first rule
//!   needs it and stopped when the last rule lets go. Never one watch per rule.
//!
//! Each rule declares its [`Interest`] (which source watch, which names or selector, which
//! namespaces) when it is reconciled; events are matched against those interests, so an event
//! wakes exactly the rules it may concern. Caches drop `managedFields`.

mod discovery;
mod echoes;
mod interest;
mod named_namespaces;
mod relisting;
mod triggers;
mod written;

pub use interest::{Interest, NamespaceInterest, SourceInterest, SourceWatchKey};
pub use triggers::Triggers;

use interest::{CopiesKey, copies_key};
use relisting::relisting;

use super::error::Error;
use super::retry::CappedBackoff;
use crate::clusters::{KubeconfigProblem, classify};
use crate::controller::retry::init_when_listed;
use crate::locks::lock;
use crate::metrics::Metrics;
use crate::sync::desired::strip_uncarried;
use crate::sync::kinds::KindRef;
use crate::sync::live::LiveCopy;
use crate::sync::ownership::{
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, RULE_ANNOTATION, RuleKey, recorded_rule, sealed_rule,
};
use crate::sync::scope::Scope;
use crate::sync::seal::{Place, SealKey};
use crate::sync::targets::NamespaceInfo;
use echoes::CopyId;
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::core::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::DefaultBackoff;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use named_namespaces::NamespaceEvent;
use std::collections::{BTreeMap, BTreeSet, HashMap};
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
/// How log lines name the cluster mimeo runs in.
const LOCAL: &str = "(this cluster)";

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

/// The caches a rule's declared interest reads from, once listed.
pub struct DeclaredCaches {
    pub source: Option<Store<DynamicObject>>,
    /// One per input, in the interest's order.
    pub inputs: Vec<Store<DynamicObject>>,
}

/// One shared watch of a kind and the cache it fills.
struct KindWatch<K: Resource + 'static = DynamicObject>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store: Store<K>,
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
/// The writer of the namespace cache and the sender of its listed flag, until the watch starts.
type NamespacesStart = (
    Writer<PartialObjectMeta<Namespace>>,
    tokio::sync::watch::Sender<bool>,
);
/// A watch of copies: its cache holds them summed up.
type CopiesWatch = KindWatch<LiveCopy>;
/// The watches of one kind's copies, and the kind they share.
type CopiesWatches = (Arc<ApiResource>, Vec<CopiesWatch>);

/// The shared caches and the interests that route their events.
pub struct Watches {
    /// This very value, for the watch tasks it starts: they must not keep it alive.
    me: Weak<Watches>,
    client: Client,
    reach: Reach,
    /// The `RemoteCluster` watched, for log lines; `None` for the cluster mimeo runs in.
    cluster: Option<String>,
    /// The namespaces this cluster's watches may see.
    scope: Scope,
    /// Why the last watch request failed, until a watch lists again.
    failure: Mutex<Option<KubeconfigProblem>>,
    metrics: Arc<Metrics>,
    triggers: Triggers,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    namespaces_listed: Listed,
    /// What starts the namespace watch, taken when a rule first needs namespaces here (a cluster
    /// only read from is never asked for them).
    namespaces_start: Mutex<Option<NamespacesStart>>,
    /// Label-selected watches of copies, per kind some rule copies into this cluster: one over
    /// all namespaces, or one per namespace of the scope.
    copies: Mutex<HashMap<CopiesKey, CopiesWatches>>,
    sources: Mutex<HashMap<SourceWatchKey, KindWatch>>,
    discovery: discovery::Discovery,
    /// Copies written here whose write the copies cache may not have seen yet.
    written: written::Written,
    /// Writes of ours in flight, and what the copies watch brought of their copies meanwhile.
    in_flight: echoes::InFlight,
    interests: interest::Interests,
    seen: Mutex<HashMap<SourceId, (String, Instant)>>,
    tasks: Mutex<Vec<AbortHandle>>,
    /// What tells a copy from an object carrying a copy's marks: only a sealed copy wakes or
    /// belongs to its rule.
    seals: Seals,
}

/// The seal key copies are checked with.
#[derive(Clone)]
pub struct Seals {
    pub key: Arc<SealKey>,
}

impl Seals {
    /// The rule whose copy `meta` is, at its place here of a kind of `resource`, if its seal is
    /// that rule's there.
    fn rule_of(&self, resource: &ApiResource, copy: &LiveCopy) -> Option<RuleKey> {
        let place = Place {
            group: &resource.group,
            kind: &resource.kind,
            namespace: copy.meta().namespace.as_deref(),
            name: copy.meta().name.as_deref().unwrap_or_default(),
        };
        sealed_rule(copy, &self.key, &place)
    }
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
        for (_, (_, watches)) in self.copies.get_mut().unwrap_or_else(|p| p.into_inner()).drain() {
            for watch in watches {
                watch.task.abort();
            }
        }
    }
}

impl Watches {
    /// Sets up the caches of one cluster; every watch starts when something first needs it.
    pub fn start(
        client: Client,
        reach: Reach,
        cluster: Option<String>,
        scope: Scope,
        metrics: Arc<Metrics>,
        triggers: Triggers,
        seals: Seals,
    ) -> Arc<Self> {
        let ns_writer: Writer<PartialObjectMeta<Namespace>> = Writer::default();
        let namespaces = ns_writer.as_reader();
        let (ns_listed_tx, namespaces_listed) = tokio::sync::watch::channel(false);
        Arc::new_cyclic(|me| Watches {
            me: me.clone(),
            client,
            reach,
            cluster,
            scope,
            failure: Mutex::new(None),
            metrics,
            triggers,
            namespaces,
            namespaces_listed,
            namespaces_start: Mutex::new(Some((ns_writer, ns_listed_tx))),
            copies: Mutex::new(HashMap::new()),
            sources: Mutex::new(HashMap::new()),
            discovery: Default::default(),
            written: Default::default(),
            in_flight: Default::default(),
            interests: Default::default(),
            seen: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Vec::new()),
            seals,
        })
    }

    /// Starts the metadata-only namespace watch (or, limited to namespaces, the watch of each
    /// one), once.
    pub fn watch_namespaces(&self) {
        let Some((writer, listed)) = lock(&self.namespaces_start).take() else {
            return;
        };
        if let Some(names) = self.scope.namespaces() {
            let task = self.follow_namespaces(names.clone(), writer, listed);
            lock(&self.tasks).push(task);
            return;
        }
        let stream = init_when_listed(watcher(
            Api::<PartialObjectMeta<Namespace>>::all(self.client.clone()),
            watcher::Config::default(),
        ))
        .backoff(self.reach.backoff())
        .modify(|ns| ns.managed_fields_mut().clear())
        .reflect(writer);
        let task = spawn_consumer(
            "namespaces",
            stream,
            self.weak_self(),
            listed,
            |this, event| match event {
                watcher::Event::Apply(ns) | watcher::Event::Delete(ns) => this.on_namespace(&ns.name_any()),
                watcher::Event::InitDone => this.on_namespaces_relisted(),
                _ => {}
            },
        );
        lock(&self.tasks).push(task);
    }

    /// Follows each namespace of the scope by name ([`named_namespaces`]) into the namespace
    /// cache: it counts as listed once every namespace was read, and then each change wakes the
    /// rules that care about that namespace.
    fn follow_namespaces(
        &self,
        names: BTreeSet<String>,
        mut writer: Writer<PartialObjectMeta<Namespace>>,
        listed: tokio::sync::watch::Sender<bool>,
    ) -> AbortHandle {
        let (mut events, tasks) = named_namespaces::spawn(&self.client, &names);
        lock(&self.tasks).extend(tasks);
        let weak = self.weak_self();
        let task = tokio::spawn(async move {
            // Until every namespace was read once: what was found, and what is still unread.
            let mut first = BTreeMap::new();
            let mut unread = names;
            while let Some(event) = events.recv().await {
                let Some(this) = weak.upgrade() else { break };
                let name = match &event {
                    NamespaceEvent::Seen(ns) => ns.name_any(),
                    NamespaceEvent::Gone(name) => name.clone(),
                    NamespaceEvent::Failed(e) => {
                        match lock(&this.failure).replace(classify(e)).is_none() {
                            true => {
                                tracing::warn!(cluster = this.cluster.as_deref().unwrap_or(LOCAL), error = %e, "watching a namespace failed; retrying, and saying so again only after it is read")
                            }
                            false => tracing::debug!(error = %e, "watching a namespace failed again"),
                        }
                        continue;
                    }
                };
                if !unread.is_empty() {
                    unread.remove(&name);
                    match event {
                        NamespaceEvent::Seen(ns) => first.insert(name, *ns),
                        _ => first.remove(&name),
                    };
                    if unread.is_empty() {
                        writer.apply_watcher_event(&watcher::Event::Init);
                        for ns in std::mem::take(&mut first).into_values() {
                            writer.apply_watcher_event(&watcher::Event::InitApply(ns));
                        }
                        writer.apply_watcher_event(&watcher::Event::InitDone);
                        *lock(&this.failure) = None;
                        tracing::debug!(watch = "namespaces", "namespaces read");
                        listed.send_replace(true);
                        this.on_namespaces_relisted();
                    }
                    continue;
                }
                *lock(&this.failure) = None;
                let cached = this
                    .namespaces
                    .get(&ObjectRef::new(&name))
                    .map(|ns| (ns.resource_version(), ns.metadata.deletion_timestamp.is_some()));
                match event {
                    NamespaceEvent::Seen(ns) => {
                        // A read after an expired watch brings the same version again: no news.
                        if cached == Some((ns.resource_version(), ns.metadata.deletion_timestamp.is_some())) {
                            continue;
                        }
                        writer.apply_watcher_event(&watcher::Event::Apply(*ns));
                    }
                    _ => {
                        if cached.is_none() {
                            continue;
                        }
                        let mut gone = PartialObjectMeta::<Namespace>::default();
                        gone.metadata.name = Some(name.clone());
                        writer.apply_watcher_event(&watcher::Event::Delete(gone));
                    }
                }
                this.on_namespace(&name);
            }
        });
        task.abort_handle()
    }

    /// Waits until the namespace cache holds a full list.
    pub async fn wait_ready(&self) -> Result<(), Error> {
        self.watch_namespaces();
        wait_listed(
            self.namespaces_listed.clone(),
            "namespaces",
            self.reach.cache_timeout(),
        )
        .await
    }

    /// Whether the namespace cache has listed (without waiting).
    pub fn is_listed(&self) -> bool {
        *self.namespaces_listed.borrow()
    }

    /// The API resource of a kind in this cluster and whether it is namespaced, or `None` when
    /// the cluster does not serve it ([`discovery`]). Watching CRDs when the scope allows, so
    /// that what was found is forgotten when they change.
    pub async fn resolve(&self, kind: &KindRef) -> kube::Result<Option<(ApiResource, bool)>> {
        let watches_crds = self.scope == Scope::Cluster;
        if watches_crds && kind.builtin_resource().is_none() {
            let weak = self.weak_self();
            self.discovery
                .watch_crds(&self.client, self.reach.backoff(), move || {
                    if let Some(this) = weak.upgrade() {
                        this.interests.wake_all(&this.triggers);
                    }
                });
        }
        self.discovery.resolve(&self.client, kind, watches_crds).await
    }

    /// Why the watches of this cluster fail, while they do.
    pub fn failure(&self) -> Option<KubeconfigProblem> {
        lock(&self.failure).clone()
    }

    /// The cluster answered a probe after its watches failed: their failure is old news, and
    /// the cluster is not to be marked down again for it (the watches list again after their
    /// backoff, and say so anew if they fail again).
    pub fn answered(&self) {
        *lock(&self.failure) = None;
    }

    /// Records why a watch failed; says whether this starts a failure (none since the last list),
    /// so that an outage is logged once, not at every retry of every watch.
    fn note_failure(&self, error: &watcher::Error) -> bool {
        let problem = match error {
            watcher::Error::InitialListFailed(e)
            | watcher::Error::WatchStartFailed(e)
            | watcher::Error::WatchFailed(e) => classify(e),
            other => KubeconfigProblem {
                reason: "WatchFailed",
                message: other.to_string(),
            },
        };
        lock(&self.failure).replace(problem).is_none()
    }

    /// One namespace's labels, from the cache, if it is there.
    pub fn namespace_labels(&self, name: &str) -> Option<BTreeMap<String, String>> {
        self.namespaces
            .get(&ObjectRef::new(name))
            .map(|ns| ns.labels().clone())
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
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<LiveCopy>> {
        let cached = self.in_copies_cache(resource, namespace, name)?;
        Some(
            self.written
                .truer(&copy_id(&resource.plural, namespace, name), cached),
        )
    }

    /// The object the copies cache holds at a place, as the watch last saw it.
    fn in_copies_cache(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<LiveCopy>> {
        let (kind, stores): (Arc<ApiResource>, Vec<Store<LiveCopy>>) = lock(&self.copies)
            .get(&copies_key(resource))
            .map(|(kind, watches)| (kind.clone(), watches.iter().map(|w| w.store.clone()).collect()))?;
        let mut reference = ObjectRef::new_with(name, kind);
        if let Some(namespace) = namespace {
            reference = reference.within(namespace);
        }
        stores.iter().find_map(|store| store.get(&reference))
    }

    /// Records a write over `replaced` (the version the decision was made on), until the copies
    /// cache moves past that version.
    pub fn wrote(&self, resource: &ApiResource, replaced: Option<&LiveCopy>, stored: DynamicObject) {
        let Some(replaced_version) = replaced.and_then(|r| r.resource_version()) else {
            return;
        };
        let id = copy_id(
            &resource.plural,
            stored.namespace().as_deref(),
            &stored.name_any(),
        );
        let in_cache = |resource: &ApiResource, namespace: Option<&str>, name: &str| {
            self.in_copies_cache(resource, namespace, name)
        };
        self.written.record(
            id,
            resource,
            replaced_version,
            LiveCopy::summed_up(stored),
            &in_cache,
        );
    }

    /// A write of ours to a copy is about to be made: until it comes back, what the copies watch
    /// brings of that copy is held back ([`echoes`]).
    pub fn writing(&self, resource: &ApiResource, namespace: Option<&str>, name: &str) -> WriteInFlight {
        let id = copy_id(&resource.plural, namespace, name);
        self.in_flight.start(&id);
        WriteInFlight {
            watches: self.me.clone(),
            id,
            landed: false,
        }
    }

    /// Whether a copy the copies watch brings is no news: the very version a write of ours
    /// stored (the cache now holds that write, so it is forgotten too), or held back while a
    /// write of ours to it is in flight ([`echoes`]).
    fn echoes_our_write(&self, plural: &str, copy: &LiveCopy) -> bool {
        let Some(version) = copy.meta().resource_version.as_deref() else {
            return false;
        };
        let id = copy_id(
            plural,
            copy.meta().namespace.as_deref(),
            copy.meta().name.as_deref().unwrap_or_default(),
        );
        self.written.is_echo(&id, version) || self.in_flight.hold(&id, recorded_rule(copy), version)
    }

    /// Every cached copy that records `rule` as its maker.
    pub fn copies_of(&self, rule: &RuleKey) -> Vec<(ApiResource, Arc<LiveCopy>)> {
        let mut out = Vec::new();
        let copies: Vec<(ApiResource, Store<LiveCopy>)> = lock(&self.copies)
            .values()
            .flat_map(|(r, watches)| watches.iter().map(|w| ((**r).clone(), w.store.clone())))
            .collect();
        // Compared as text, as `owner_of` does: parsing the mark of each of 100,000 copies at
        // every reconcile of each of 1,000 rules was most of their time.
        let named = rule.to_string();
        for (resource, store) in copies {
            for copy in store.state() {
                // The marks first, which cost nothing: the seal of every copy of every rule of
                // the kind would otherwise be computed at each reconcile of each rule.
                if copy.labels().get(MANAGED_BY_LABEL) == Some(MANAGED_BY_VALUE)
                    && copy.annotations().get(RULE_ANNOTATION) == Some(named.as_str())
                    && self.seals.rule_of(&resource, &copy).as_ref() == Some(rule)
                {
                    out.push((resource.clone(), copy));
                }
            }
        }
        out
    }

    /// Records what `rule` watches now, starting and stopping shared watches as needed, waits
    /// until the copies cache of its kind holds a full list, and returns the cache of its
    /// sources and those of its inputs (in the interest's order) once they do.
    pub async fn declare(&self, rule: &RuleKey, interest: Interest) -> Result<DeclaredCaches, Error> {
        let wanted = interest
            .source
            .as_ref()
            .map(|s| (s.watch.clone(), s.resource.clone()));
        let inputs: Vec<(SourceWatchKey, ApiResource)> = interest
            .inputs
            .iter()
            .map(|s| (s.watch.clone(), s.resource.clone()))
            .collect();
        let copies = interest.copies.clone();
        self.interests.declare(rule, interest);
        let acquired = wanted.map(|(key, resource)| self.acquire(key, resource));
        let inputs: Vec<_> = inputs
            .into_iter()
            .map(|(key, resource)| self.acquire(key, resource))
            .collect();
        let copies_listed = copies.map(|resource| self.acquire_copies(resource));
        self.stop_unused_watches();
        for listed in copies_listed.into_iter().flatten() {
            wait_listed(listed, "copies", self.reach.cache_timeout()).await?;
        }
        let mut input_stores = Vec::with_capacity(inputs.len());
        for (store, listed) in inputs {
            wait_listed(listed, "input", self.reach.cache_timeout()).await?;
            input_stores.push(store);
        }
        let source = match acquired {
            Some((store, listed)) => {
                wait_listed(listed, "source", self.reach.cache_timeout()).await?;
                Some(store)
            }
            None => None,
        };
        Ok(DeclaredCaches {
            source,
            inputs: input_stores,
        })
    }

    /// Updates the names a selector-based rule matched, so that a source leaving the selector
    /// still wakes the rule.
    pub fn set_matched(&self, rule: &RuleKey, matched: BTreeSet<String>) {
        self.interests.set_matched(rule, matched);
    }

    /// Forgets a rule (deleted): its source watch stops if no other rule needs it.
    pub fn forget(&self, rule: &RuleKey) {
        self.interests.forget(rule);
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
        // An empty namespace is a cluster-scoped kind.
        let api = if key.namespace.is_empty() {
            Api::<DynamicObject>::all_with(self.client.clone(), &resource)
        } else {
            Api::<DynamicObject>::namespaced_with(self.client.clone(), &key.namespace, &resource)
        };
        let stream = init_when_listed(watcher(api, watcher::Config::default()))
            .backoff(self.reach.backoff())
            .modify(|o: &mut DynamicObject| strip_uncarried(&mut o.metadata))
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
            KindWatch {
                store: store.clone(),
                listed: listed.clone(),
                task,
            },
        );
        self.metrics.add_source_watches(1);
        (store, listed)
    }

    /// The label-selected watches of this kind's copies (one over all namespaces, or one per
    /// namespace of the scope), started on first use.
    fn acquire_copies(&self, resource: ApiResource) -> Vec<Listed> {
        let mut copies = lock(&self.copies);
        let key = copies_key(&resource);
        if let Some((_, watches)) = copies.get(&key) {
            return watches.iter().map(|w| w.listed.clone()).collect();
        }
        // One kind for the watches and every key of their caches: a key holds its kind.
        let resource = Arc::new(resource);
        let watches: Vec<CopiesWatch> = match self.scope.namespaces() {
            None => vec![self.watch_copies(&resource, None)],
            Some(names) => names
                .iter()
                .map(|ns| self.watch_copies(&resource, Some(ns)))
                .collect(),
        };
        tracing::debug!(kind = %resource.plural, watches = watches.len(), "starting copies watches");
        let listed = watches.iter().map(|w| w.listed.clone()).collect();
        copies.insert(key, (resource, watches));
        listed
    }

    fn watch_copies(&self, resource: &Arc<ApiResource>, namespace: Option<&str>) -> CopiesWatch {
        let (listed_tx, listed) = tokio::sync::watch::channel(false);
        let writer = Writer::new(resource.clone());
        let store = writer.as_reader();
        let api = match namespace {
            None => Api::<DynamicObject>::all_with(self.client.clone(), resource),
            Some(ns) => Api::<DynamicObject>::namespaced_with(self.client.clone(), ns, resource),
        };
        let config = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"));
        // From a failure until the list it starts over with is done (`relisting`), the cache is
        // not current: a copy written meanwhile (or whose event the watch lost as its apiserver
        // went away) is missing from it, and its place would be taken for empty. So it counts as
        // not listed until then: `declare` waits for it (another cluster's is unusable if it
        // does not come), and the list wakes the rules with copies here.
        let (not_current, failed) = (
            listed_tx.clone(),
            Arc::new(std::sync::atomic::AtomicBool::new(false)),
        );
        let relisted = failed.clone();
        // The cache keeps each copy summed up (metadata, a digest of its content): the data a
        // copy holds never stays in memory past its watch event.
        let stream = relisting(move || watcher(api.clone(), config.clone()).boxed())
            .inspect_err(move |_| {
                not_current.send_replace(false);
                failed.store(true, std::sync::atomic::Ordering::Relaxed);
            })
            .backoff(self.reach.backoff())
            .map_ok(summed_up)
            .reflect(writer);
        let plural = resource.plural.clone();
        let kind = resource.clone();
        let task = spawn_consumer(
            "copies",
            stream,
            self.weak_self(),
            listed_tx,
            move |this, event| match event {
                // Listed again after a failure: the rules that waited for it, or were refused
                // this cluster meanwhile, look again, and so do those whose copies changed
                // meanwhile (a list brings no event for them).
                watcher::Event::InitDone if relisted.swap(false, std::sync::atomic::Ordering::Relaxed) => {
                    this.on_copies_relisted(&kind);
                }
                // The echo of a write of ours is no news to the rule that made it: waking it
                // would only have it look again at what it just wrote (at 500 copies, 500
                // wake-ups queuing one more look behind each rotation).
                watcher::Event::Apply(copy) if this.echoes_our_write(&plural, copy) => {}
                // An object carrying a copy's marks without its seal wakes nobody.
                watcher::Event::Apply(copy) | watcher::Event::Delete(copy) => {
                    if let Some(rule) = this.seals.rule_of(&kind, copy) {
                        this.triggers.fire(&rule);
                    }
                }
                _ => {}
            },
        );
        KindWatch { store, listed, task }
    }

    fn stop_unused_watches(&self) {
        let (used, used_copies) = self.interests.in_use();
        lock(&self.copies).retain(|key, (resource, watches)| {
            let keep = used_copies.contains(key);
            if !keep {
                tracing::debug!(kind = %resource.plural, "stopping unused copies watches");
                for watch in watches {
                    watch.task.abort();
                }
            }
            keep
        });
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
        self.interests.wake_for_source(&self.triggers, key, object);
    }

    fn on_sources_relisted(&self, key: &SourceWatchKey) {
        self.interests.wake_readers(&self.triggers, key);
    }

    fn on_copies_relisted(&self, kind: &ApiResource) {
        self.interests.wake_holders(&self.triggers, kind);
    }

    fn on_namespace(&self, namespace: &str) {
        self.interests.wake_for_namespace(&self.triggers, namespace);
    }

    fn on_namespaces_relisted(&self) {
        self.interests.wake_all(&self.triggers);
    }
}

/// A copy as `written` and `in_flight` know it.
fn copy_id(plural: &str, namespace: Option<&str>, name: &str) -> CopyId {
    (
        plural.to_owned(),
        namespace.unwrap_or_default().to_owned(),
        name.to_owned(),
    )
}

/// A write of ours in flight to one copy. Say what it stored with [`WriteInFlight::landed`];
/// dropped without that (failed, or cancelled), it wakes the rule for whatever was held back.
pub struct WriteInFlight {
    watches: Weak<Watches>,
    id: CopyId,
    landed: bool,
}

impl WriteInFlight {
    /// The write came back having stored this version (`None`: it stored nothing). Call it once
    /// the write is recorded (`Watches::wrote`), so that an echo coming after is known by it.
    pub fn landed(mut self, stored: Option<&str>) {
        self.landed = true;
        self.settle(stored);
    }

    fn settle(&self, stored: Option<&str>) {
        let Some(watches) = self.watches.upgrade() else {
            return;
        };
        if let Some(rule) = watches.in_flight.finish(&self.id, stored) {
            watches.triggers.fire(&rule);
        }
    }
}

impl Drop for WriteInFlight {
    fn drop(&mut self) {
        if !self.landed {
            self.settle(None);
        }
    }
}

/// A copies watch event with its object summed up, `managedFields` dropped.
fn summed_up(event: watcher::Event<DynamicObject>) -> watcher::Event<LiveCopy> {
    let sum = |mut o: DynamicObject| {
        o.metadata.managed_fields = None;
        LiveCopy::summed_up(o)
    };
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(sum(o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(sum(o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(sum(o)),
        watcher::Event::InitDone => watcher::Event::InitDone,
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
                Err(e) => match watches.note_failure(&e) {
                    true => tracing::warn!(
                        watch = what,
                        cluster = watches.cluster.as_deref().unwrap_or(LOCAL),
                        error = %e,
                        "watch failed; retrying with backoff, and saying so again only after it lists"
                    ),
                    // Counted by mimeo_apiserver_requests_total{code="<error>"}.
                    false => tracing::debug!(watch = what, error = %e, "watch failed again"),
                },
            }
        }
    });
    task.abort_handle()
}
