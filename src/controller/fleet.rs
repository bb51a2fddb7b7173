//! The clusters rules read from and write to: this one, and every `RemoteCluster` a rule uses.
//!
//! Each remote cluster gets one client and one set of shared [`Watches`], made when the first
//! rule needs the cluster and dropped when the last one lets go. Its kubeconfig Secret is watched
//! (by name), so a rotated credential replaces the client at once. A cluster whose requests fail
//! to connect is marked down: one prober per cluster then retries with capped exponential
//! backoff and wakes the cluster's rules when it answers again, so no rule polls a dead cluster.
//! The `RemoteCluster` status loop is in [`status`]; whether a cluster answers at all, when no
//! request fails because none is made or the link just falls silent, in [`liveness`].

pub(crate) mod liveness;
pub(crate) mod status;

use super::error::Error;
use super::retry::CappedBackoff;
use super::watches::{Listed, Reach, Seals, Triggers, Watches, wait_listed};
use crate::api::{ClusterInventory, CopyState, KubeconfigSecretRef, RemoteCluster};
use crate::clusters::{self, KubeconfigProblem};
use crate::controller::retry::init_when_listed;
use crate::locks::lock;
use crate::metrics::Metrics;
use crate::sync::hash::digest_bytes;
use crate::sync::object_selector::selector;
use crate::sync::ownership::{RuleKey, RuleKind};
use crate::sync::scope::Scope;
use crate::sync::seal::SealKey;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::Api;
use kube::core::SelectorExt;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::task::AbortHandle;

/// Why a cluster is disconnected when the rules using it changed.
const UNUSED: &str = "no rule uses the remote cluster any more; disconnected";
/// Why, when the last rule using it was let go: a replica also lets go of the rules of a shard it
/// no longer holds (handed over, or lapsed while the hub did not answer), which still use it.
const LET_GO: &str = "the last rule here that used the remote cluster was let go (deleted, refused, or its \
                      shard not held by this replica now); disconnected";
/// How long the prober waits for a down cluster to answer one request.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// How often the watches of connected clusters are looked at for a failure to reach them.
const HEALTH_EVERY: Duration = Duration::from_secs(2);

/// A cluster to read from or write to.
#[derive(Clone)]
pub struct ClusterHandle {
    /// The `RemoteCluster`'s name; `None` for the cluster mimeo runs in.
    pub name: Option<String>,
    pub client: Client,
    pub watches: Arc<Watches>,
}

/// Why a rule cannot use a cluster now: the state its copies there get, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterProblem {
    pub state: CopyState,
    pub message: String,
}

impl ClusterProblem {
    fn from_kubeconfig(cluster: &str, problem: KubeconfigProblem) -> Self {
        let state = match problem.reason {
            "Unauthorized" => CopyState::Unauthorized,
            // An inventory's cluster mimeo has no access to (yet, or any more: denied): nothing
            // there can be written or removed, as for a missing cluster.
            "NoAccessYet" => CopyState::ClusterMissing,
            _ => CopyState::Unreachable,
        };
        ClusterProblem {
            state,
            message: format!("RemoteCluster {cluster}: {}: {}", problem.reason, problem.message),
        }
    }
}

struct Connection {
    reference: KubeconfigSecretRef,
    /// Digest of the kubeconfig the client was made from.
    digest: String,
    handle: ClusterHandle,
}

/// The watch of one cluster's kubeconfig Secret, kept while rules use the cluster, connected or
/// not: a Secret that is fixed wakes them as surely as one that is rotated.
struct KubeconfigWatch {
    reference: KubeconfigSecretRef,
    task: AbortHandle,
}

impl Drop for KubeconfigWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Which remote clusters a rule uses.
#[derive(Clone, Debug, Default)]
struct Usage {
    names: BTreeSet<String>,
    /// The rule selects clusters by labels, so any `RemoteCluster` may matter to it.
    any: bool,
}

pub struct Fleet {
    me: Weak<Fleet>,
    /// What copies are sealed with, in every cluster.
    seal_key: Arc<SealKey>,
    local: ClusterHandle,
    /// `false` when mimeo is limited to namespaces: `RemoteCluster`s are then not read at all.
    remote_clusters_enabled: bool,
    metrics: Arc<Metrics>,
    triggers: Triggers,
    remote_clusters: Store<RemoteCluster>,
    remote_clusters_listed: Listed,
    connections: Mutex<HashMap<String, Connection>>,
    kubeconfig_watches: Mutex<HashMap<String, KubeconfigWatch>>,
    usage: Mutex<HashMap<RuleKey, Usage>>,
    /// Clusters that did not answer, with the last error; each has a prober running.
    down: Mutex<HashMap<String, String>>,
    task: Mutex<Option<AbortHandle>>,
    /// The task of [`Fleet::look_at_watches`].
    health: Mutex<Option<AbortHandle>>,
    /// What each connected cluster is: the uid of its `kube-system` namespace, the usual
    /// cluster ID; empty when the identity may not read it. Two `RemoteCluster`s with one uid
    /// are one cluster: a rule's copies there are the same objects through either.
    identities: Mutex<HashMap<String, String>>,
    /// The identities of deleted `RemoteCluster`s that rules still hold copies through: those
    /// copies are in that cluster still, and another registration of it reaches them.
    departed: Mutex<HashMap<String, String>>,
    /// The clients that probe the clusters whose status this replica writes.
    probes: liveness::Probes,
    /// The statuses this replica wrote.
    written: status::Written,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for task in [&mut self.task, &mut self.health] {
            if let Some(task) = task.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
                task.abort();
            }
        }
    }
}

impl Fleet {
    /// Starts the watches of this cluster and, unless `scope` limits mimeo to namespaces, the
    /// watch on `RemoteCluster`s.
    pub fn start(
        client: Client,
        scope: Scope,
        metrics: Arc<Metrics>,
        triggers: Triggers,
        seal_key: Arc<SealKey>,
    ) -> Arc<Self> {
        let remote_clusters_enabled = scope == Scope::Cluster;
        let local = ClusterHandle {
            name: None,
            client: client.clone(),
            watches: Watches::start(
                client.clone(),
                Reach::Local,
                None,
                scope,
                metrics.clone(),
                triggers.clone(),
                Seals {
                    key: seal_key.clone(),
                },
            ),
        };
        let writer: Writer<RemoteCluster> = Writer::default();
        let remote_clusters = writer.as_reader();
        let (listed_tx, remote_clusters_listed) = tokio::sync::watch::channel(false);
        let fleet = Arc::new_cyclic(|me: &Weak<Fleet>| Fleet {
            me: me.clone(),
            seal_key,
            local,
            remote_clusters_enabled,
            metrics,
            triggers,
            remote_clusters,
            remote_clusters_listed,
            connections: Mutex::new(HashMap::new()),
            kubeconfig_watches: Mutex::new(HashMap::new()),
            usage: Mutex::new(HashMap::new()),
            down: Mutex::new(HashMap::new()),
            task: Mutex::new(None),
            health: Mutex::new(None),
            identities: Mutex::new(HashMap::new()),
            departed: Mutex::new(HashMap::new()),
            probes: liveness::Probes::default(),
            written: status::Written::default(),
        });
        if !remote_clusters_enabled {
            // Nothing to list: the cache stays empty and counts as listed.
            listed_tx.send_replace(true);
            return fleet;
        }
        let stream = init_when_listed(watcher(
            Api::<RemoteCluster>::all(client),
            watcher::Config::default(),
        ))
        .default_backoff()
        .modify(|rc| rc.managed_fields_mut().clear())
        .reflect(writer);
        // Spawned once the Fleet exists: a task started inside `new_cyclic` could see its first
        // event before the Fleet is there to upgrade to, and stop.
        let weak = Arc::downgrade(&fleet);
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                let Some(fleet) = weak.upgrade() else { break };
                if let Ok(event) = &event {
                    // Only now, with the event in the cache the inventory reads: woken by a
                    // watch of its own, it could read this cache before the change and lose it.
                    for inventory in inventories_to_wake(event, &fleet.remote_clusters) {
                        fleet.triggers.fire_inventory(&inventory);
                    }
                }
                match event {
                    Ok(watcher::Event::Apply(rc) | watcher::Event::Delete(rc)) => {
                        fleet.on_remote_cluster(&rc.name_any())
                    }
                    Ok(watcher::Event::InitDone) => {
                        listed_tx.send_replace(true);
                        fleet.on_remote_clusters_relisted();
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "RemoteCluster watch failed; retrying with backoff")
                    }
                }
            }
        });
        let health = tokio::spawn(Self::look_at_watches(Arc::downgrade(&fleet)));
        *lock(&fleet.task) = Some(task.abort_handle());
        *lock(&fleet.health) = Some(health.abort_handle());
        fleet
    }

    /// Every [`HEALTH_EVERY`], marks down a connected cluster whose watches fail to reach it:
    /// the watches see an apiserver go away at once, often before any rule's request does, and
    /// its `RemoteCluster` should say so within seconds. Reads only what the watches recorded.
    async fn look_at_watches(fleet: Weak<Fleet>) {
        loop {
            tokio::time::sleep(HEALTH_EVERY).await;
            let Some(fleet) = fleet.upgrade() else { break };
            let failing: Vec<(String, String)> = lock(&fleet.connections)
                .iter()
                .filter_map(|(name, c)| {
                    let problem = c.handle.watches.failure()?;
                    (problem.reason == "Unreachable").then(|| (name.clone(), problem.message))
                })
                .collect();
            for (name, message) in failing {
                fleet.report_unreachable(&name, &message);
            }
        }
    }

    /// Reads what the named cluster is, once per connection: the uid of its `kube-system`
    /// namespace. Not known when the cluster does not answer (asked again next time); empty when
    /// it may not be read (a cluster only read from, whose identity may read the sources alone).
    async fn learn_identity(&self, name: &str, handle: &ClusterHandle) {
        if lock(&self.identities).contains_key(name) {
            return;
        }
        let api: Api<Namespace> = Api::all(handle.client.clone());
        let uid = match tokio::time::timeout(PROBE_TIMEOUT, api.get_metadata_opt("kube-system")).await {
            Ok(Ok(ns)) => ns.and_then(|ns| ns.metadata.uid).unwrap_or_default(),
            Ok(Err(kube::Error::Api(e))) if e.code == 403 || e.code == 404 => String::new(),
            _ => return,
        };
        let others: Vec<String> = {
            let mut identities = lock(&self.identities);
            identities.insert(name.to_owned(), uid.clone());
            identities
                .iter()
                .filter(|(other, id)| *other != name && !uid.is_empty() && **id == uid)
                .map(|(other, _)| other.clone())
                .collect()
        };
        // A rule reaching the cluster through both uses one; the status of each names the other.
        if others.is_empty() {
            return;
        }
        for cluster in others.iter().map(String::as_str).chain([name]) {
            self.triggers.fire_cluster(cluster);
            self.fire_users(cluster, false);
        }
    }

    /// What the named cluster is (the uid of its `kube-system` namespace), once learnt: of a
    /// deleted `RemoteCluster`, what it was. `None` while not known, empty when not readable.
    pub fn identity(&self, name: &str) -> Option<String> {
        lock(&self.identities)
            .get(name)
            .or(lock(&self.departed).get(name))
            .cloned()
    }

    /// When the named `RemoteCluster` was created (RFC 3339), while it exists.
    pub fn created(&self, name: &str) -> Option<String> {
        let remote = self.remote_clusters.get(&ObjectRef::new(name))?;
        remote
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
    }

    /// The other `RemoteCluster`s that name the cluster `name` names, sorted: for its status.
    pub fn same_cluster_as(&self, name: &str) -> Vec<String> {
        let identities = lock(&self.identities);
        let Some(uid) = identities.get(name).filter(|uid| !uid.is_empty()) else {
            return Vec::new();
        };
        let mut others: Vec<String> = identities
            .iter()
            .filter(|(other, id)| *other != name && *id == uid)
            .filter(|(other, _)| self.remote_clusters.get(&ObjectRef::new(other)).is_some())
            .map(|(other, _)| other.clone())
            .collect();
        others.sort();
        others
    }

    /// Why the named cluster is marked down, while it is.
    pub fn down_because(&self, name: &str) -> Option<String> {
        lock(&self.down).get(name).cloned()
    }

    /// The probe clients of the clusters whose status this replica writes.
    pub fn probes(&self) -> &liveness::Probes {
        &self.probes
    }

    /// The statuses this replica wrote, for deciding on them while the cache catches up.
    pub(crate) fn written(&self) -> &status::Written {
        &self.written
    }

    /// Asks the cluster whether it answers ([`liveness::Probes::probe`]). One that does not, while
    /// rules here use it, is marked down as their own failed request would: they say so at once
    /// instead of each waiting out its deadline, and the prober takes over.
    pub async fn probe(&self, remote: &RemoteCluster) -> Result<String, KubeconfigProblem> {
        let probed = self.probes.probe(&self.local.client, &self.metrics, remote).await;
        let name = remote.name_any();
        match probed {
            Err(problem)
                if problem.reason == liveness::UNREACHABLE && lock(&self.connections).contains_key(&name) =>
            {
                self.report_unreachable(&name, &problem.message);
                Err(liveness::down(&problem.message))
            }
            other => other,
        }
    }

    /// The cluster mimeo runs in.
    pub fn local(&self) -> &ClusterHandle {
        &self.local
    }

    /// Waits until this cluster's caches and the `RemoteCluster` cache hold a full list.
    pub async fn wait_ready(&self) -> Result<(), Error> {
        self.local.watches.wait_ready().await?;
        wait_listed(
            self.remote_clusters_listed.clone(),
            "RemoteCluster",
            Duration::from_secs(30),
        )
        .await
    }

    /// The names of the `RemoteCluster`s whose labels match, sorted.
    pub fn matching_clusters(&self, labels: &kube::core::Selector) -> Vec<String> {
        let mut names: Vec<String> = self
            .remote_clusters
            .state()
            .iter()
            .filter(|rc| rc.metadata.deletion_timestamp.is_none() && labels.matches(rc.labels()))
            .map(|rc| rc.name_any())
            .collect();
        names.sort();
        names
    }

    /// Records which remote clusters `rule` uses (and whether it selects them by labels), and
    /// lets go of those it no longer does. Called before [`Fleet::cluster`].
    pub fn uses(&self, rule: &RuleKey, names: BTreeSet<String>, any: bool) {
        self.record_usage(rule, names, any, UNUSED);
    }

    fn record_usage(&self, rule: &RuleKey, names: BTreeSet<String>, any: bool, unused: &'static str) {
        let before = lock(&self.usage).insert(
            rule.clone(),
            Usage {
                names: names.clone(),
                any,
            },
        );
        let before = before.unwrap_or_default();
        for gone in before.names.difference(&names) {
            if let Some(connection) = lock(&self.connections).get(gone) {
                connection.handle.watches.forget(rule);
            }
        }
        for changed in before.names.symmetric_difference(&names) {
            self.triggers.fire_cluster(changed);
        }
        self.drop_unused(unused);
    }

    /// Forgets a rule in every cluster: deleted, refused, or its shard not held here now.
    pub fn forget(&self, rule: &RuleKey) {
        self.record_usage(rule, BTreeSet::new(), false, LET_GO);
        lock(&self.usage).remove(rule);
        self.local.watches.forget(rule);
    }

    /// How many rules use the named cluster.
    pub fn rules_using(&self, name: &str) -> usize {
        self.rules_using_among(name, |_| true)
    }

    /// How many of the rules `among` picks use the named cluster.
    pub fn rules_using_among(&self, name: &str, among: impl Fn(&RuleKey) -> bool) -> usize {
        lock(&self.usage)
            .iter()
            .filter(|(key, u)| among(key) && u.names.contains(name))
            .count()
    }

    /// How many shared source watches run, in all clusters.
    pub fn source_watch_count(&self) -> usize {
        self.local.watches.source_watch_count()
            + lock(&self.connections)
                .values()
                .map(|c| c.handle.watches.source_watch_count())
                .sum::<usize>()
    }

    /// The named remote cluster, ready to use by `rule`, or why it cannot be.
    /// Pass `needs_namespaces` when the rule writes copies there: a cluster only read from is
    /// not asked for its namespaces.
    pub async fn cluster(
        &self,
        rule: &RuleKey,
        name: &str,
        needs_namespaces: bool,
    ) -> Result<ClusterHandle, ClusterProblem> {
        if !self.remote_clusters_enabled {
            return Err(ClusterProblem {
                state: CopyState::ClusterMissing,
                message: format!(
                    "RemoteCluster {name} is not read: this mimeo is limited to namespaces \
                     (--watch-namespace)"
                ),
            });
        }
        let Some(remote) = self
            .remote_clusters
            .get(&ObjectRef::new(name))
            .filter(|rc| rc.metadata.deletion_timestamp.is_none())
        else {
            return Err(ClusterProblem {
                state: CopyState::ClusterMissing,
                message: format!("RemoteCluster {name} does not exist"),
            });
        };
        self.allowed(rule, &remote)?;
        self.watch_kubeconfig(&remote);
        if let Some(error) = lock(&self.down).get(name) {
            return Err(ClusterProblem {
                state: CopyState::Unreachable,
                message: format!("RemoteCluster {name} does not answer (retrying with backoff): {error}"),
            });
        }
        let handle = self
            .connect(&remote)
            .await
            .map_err(|p| ClusterProblem::from_kubeconfig(name, p))?;
        self.learn_identity(name, &handle).await;
        if !needs_namespaces {
            return Ok(handle);
        }
        // A cluster whose watches already fail is not waited for.
        handle.watches.watch_namespaces();
        let failing = !handle.watches.is_listed() && handle.watches.failure().is_some();
        if failing || handle.watches.wait_ready().await.is_err() {
            let failure = handle.watches.failure().unwrap_or(KubeconfigProblem {
                reason: "Unreachable",
                message: "its watches have not listed yet".into(),
            });
            if failure.reason == "Unreachable" {
                self.report_unreachable(name, &failure.message);
            }
            return Err(ClusterProblem::from_kubeconfig(name, failure));
        }
        Ok(handle)
    }

    /// A `SyncRule` may use a cluster only if the cluster's `allowedNamespaces` selects the
    /// rule's namespace; `ClusterSyncRule`s are trusted.
    fn allowed(&self, rule: &RuleKey, remote: &RemoteCluster) -> Result<(), ClusterProblem> {
        let namespace = rule.namespace.clone().unwrap_or_default();
        let labels = self
            .local
            .watches
            .namespace_labels(&namespace)
            .unwrap_or_default();
        allows(rule, &labels, remote)
    }

    /// Marks a cluster down after a request could not reach it; a prober wakes its rules when it
    /// answers again.
    pub fn report_unreachable(&self, name: &str, error: &str) {
        let newly_down = lock(&self.down)
            .insert(name.to_owned(), error.to_owned())
            .is_none();
        if !newly_down {
            return;
        }
        tracing::warn!(cluster = %name, error = %error, "remote cluster does not answer; probing with backoff");
        // Its status and its rules say so now, not at their next look.
        self.triggers.fire_cluster(name);
        self.fire_users(name, false);
        let weak = self.me.clone();
        let name = name.to_owned();
        tokio::spawn(async move {
            let mut backoff = CappedBackoff::new(Duration::from_millis(500), Duration::from_secs(5));
            loop {
                tokio::time::sleep(backoff.next().unwrap_or(Duration::from_secs(5))).await;
                let Some(fleet) = weak.upgrade() else { break };
                let handle = lock(&fleet.connections).get(&name).map(|c| c.handle.clone());
                let Some(handle) = handle else {
                    // Disconnected meanwhile: the next rule to need it connects afresh.
                    lock(&fleet.down).remove(&name);
                    break;
                };
                match tokio::time::timeout(PROBE_TIMEOUT, handle.client.apiserver_version()).await {
                    Ok(Ok(_)) => {
                        // Else the health check marks it down again for the watch failures of
                        // the outage, until every watch has listed (seen: down, up and down
                        // again within a second of a restart).
                        handle.watches.answered();
                        lock(&fleet.down).remove(&name);
                        tracing::info!(cluster = %name, "remote cluster answers again");
                        fleet.triggers.fire_cluster(&name);
                        fleet.fire_users(&name, false);
                        break;
                    }
                    Ok(Err(e)) => {
                        let problem = clusters::classify(&e);
                        lock(&fleet.down).insert(name.clone(), problem.message);
                    }
                    Err(_) => {}
                }
            }
        });
    }

    /// The client and watches for a remote cluster, made on first use and replaced when its
    /// kubeconfig Secret reference changed.
    async fn connect(&self, remote: &RemoteCluster) -> Result<ClusterHandle, KubeconfigProblem> {
        let name = remote.name_any();
        let reference = kubeconfig_ref(remote)?;
        if let Some(connection) = lock(&self.connections).get(&name)
            && connection.reference == *reference
        {
            return Ok(connection.handle.clone());
        }
        let bytes = read_kubeconfig(&self.local.client, reference).await?;
        let digest = digest_bytes(&bytes);
        let requests = self.metrics.requests_layer(Some(&name));
        let client = clusters::client_from_bytes(bytes, &requests).await?;
        let handle = ClusterHandle {
            name: Some(name.clone()),
            client: client.clone(),
            watches: Watches::start(
                client,
                Reach::Remote,
                Some(name.clone()),
                Scope::Cluster,
                self.metrics.clone(),
                self.triggers.clone(),
                Seals {
                    key: self.seal_key.clone(),
                },
            ),
        };
        let mut connections = lock(&self.connections);
        if let Some(existing) = connections.get(&name)
            && existing.reference == *reference
        {
            // Another reconcile connected meanwhile: use that one, drop this.
            return Ok(existing.handle.clone());
        }
        tracing::info!(cluster = %name, "connected to a remote cluster");
        connections.insert(
            name,
            Connection {
                reference: reference.clone(),
                digest,
                handle: handle.clone(),
            },
        );
        Ok(handle)
    }

    /// Watches a cluster's kubeconfig Secret (by name) while rules use the cluster. When its
    /// content differs from what the client was made from, or changes at all while there is no
    /// client (it was missing or unusable), the client is dropped and the cluster's rules and
    /// status are looked at again, so they use the new kubeconfig at once.
    fn watch_kubeconfig(&self, remote: &RemoteCluster) {
        let name = remote.name_any();
        let Some(reference) = remote.spec.kubeconfig_secret_ref.clone() else {
            return;
        };
        let mut watches = lock(&self.kubeconfig_watches);
        if watches.get(&name).is_some_and(|w| w.reference == reference) {
            return;
        }
        let api = Api::<Secret>::namespaced(self.local.client.clone(), &reference.namespace);
        let stream = watcher::watch_object(api, &reference.name).default_backoff();
        let weak = self.me.clone();
        let (cluster, key) = (name.clone(), reference.key.clone());
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            let mut last: Option<String> = None;
            while let Some(event) = stream.next().await {
                let Ok(secret) = event else { continue };
                let now = secret
                    .and_then(|s| s.data)
                    .and_then(|mut d| d.remove(&key))
                    .map(|b| digest_bytes(&b.0))
                    .unwrap_or_default();
                let Some(fleet) = weak.upgrade() else { break };
                let connected = lock(&fleet.connections).get(&cluster).map(|c| c.digest.clone());
                let changed = match (&connected, &last) {
                    (Some(made_from), _) => *made_from != now,
                    (None, Some(before)) => *before != now,
                    (None, None) => false,
                };
                last = Some(now);
                if changed {
                    tracing::info!(cluster = %cluster, "kubeconfig Secret changed; reconnecting");
                    fleet.disconnect(&cluster);
                    fleet.fire_users(&cluster, false);
                    fleet.triggers.fire_cluster(&cluster);
                }
            }
        })
        .abort_handle();
        watches.insert(name, KubeconfigWatch { reference, task });
    }

    /// Drops a cluster's client and watches (and its probe's client, which may be made from the
    /// same stale kubeconfig), and wakes its rules and its status.
    fn disconnect(&self, name: &str) {
        self.probes.forget(name);
        let gone = lock(&self.connections).remove(name);
        lock(&self.identities).remove(name);
        lock(&self.down).remove(name);
        if gone.is_some() {
            self.fire_users(name, false);
            self.triggers.fire_cluster(name);
        }
    }

    /// Disconnects from the clusters no rule uses here now, saying `why` for each.
    fn drop_unused(&self, why: &'static str) {
        let used: BTreeSet<String> = lock(&self.usage)
            .values()
            .flat_map(|u| u.names.iter().cloned())
            .collect();
        lock(&self.identities).retain(|name, _| used.contains(name));
        lock(&self.departed).retain(|name, _| used.contains(name));
        lock(&self.connections).retain(|name, _| {
            let keep = used.contains(name);
            if !keep {
                tracing::info!(cluster = %name, "{why}");
            }
            keep
        });
        lock(&self.kubeconfig_watches).retain(|name, _| used.contains(name));
    }

    /// Wakes the rules that use the named cluster (and, with `selectors`, every rule that
    /// selects clusters by labels).
    fn fire_users(&self, name: &str, selectors: bool) {
        for (rule, usage) in lock(&self.usage).iter() {
            if usage.names.contains(name) || (selectors && usage.any) {
                self.triggers.fire(rule);
            }
        }
    }

    /// The `RemoteCluster` cache, which the status controller reads too: one watch serves both.
    pub fn remote_clusters(&self) -> Store<RemoteCluster> {
        self.remote_clusters.clone()
    }

    fn on_remote_cluster(&self, name: &str) {
        let current = self.remote_clusters.get(&ObjectRef::new(name));
        let stale = lock(&self.connections).get(name).is_some_and(|c| {
            current
                .as_ref()
                .is_none_or(|rc| rc.spec.kubeconfig_secret_ref.as_ref() != Some(&c.reference))
        });
        match &current {
            // Its copies stay where they are: remember which cluster that is.
            None => {
                self.metrics.set_remote_cluster(name, None);
                self.probes.forget(name);
                self.written.forget(name);
                if let Some(uid) = lock(&self.identities).get(name).filter(|uid| !uid.is_empty()) {
                    lock(&self.departed).insert(name.to_owned(), uid.clone());
                }
            }
            Some(_) => {
                lock(&self.departed).remove(name);
            }
        }
        if stale {
            self.disconnect(name);
        }
        self.fire_users(name, true);
        self.triggers.fire_cluster(name);
    }

    fn on_remote_clusters_relisted(&self) {
        for rule in lock(&self.usage).keys() {
            self.triggers.fire(rule);
        }
        for cluster in self.remote_clusters.state() {
            self.triggers.fire_cluster(&cluster.name_any());
        }
    }
}

/// The kubeconfig Secret a `RemoteCluster` names; an inventory's `RemoteCluster` names none
/// while its inventory has no access to the cluster yet.
pub fn kubeconfig_ref(remote: &RemoteCluster) -> Result<&KubeconfigSecretRef, KubeconfigProblem> {
    remote
        .spec
        .kubeconfig_secret_ref
        .as_ref()
        .ok_or_else(|| KubeconfigProblem {
            reason: "NoAccessYet",
            message: match &remote.spec.origin {
                Some(origin) => format!(
                    "no kubeconfig yet: ClusterInventory {} asks for access to {} {} once a rule uses \
                 this cluster (its status says how far that is)",
                    origin.inventory, origin.kind, origin.entry
                ),
                None => "it names no kubeconfig Secret (spec.kubeconfigSecretRef)".into(),
            },
        })
}

/// Reads the kubeconfig bytes a `RemoteCluster` points at.
pub async fn read_kubeconfig(
    client: &Client,
    reference: &KubeconfigSecretRef,
) -> Result<Vec<u8>, KubeconfigProblem> {
    let secret = Api::<Secret>::namespaced(client.clone(), &reference.namespace)
        .get_opt(&reference.name)
        .await
        .map_err(|e| KubeconfigProblem {
            reason: "SecretUnreadable",
            message: format!("reading the kubeconfig Secret: {e}"),
        })?
        .ok_or_else(|| KubeconfigProblem {
            reason: "SecretNotFound",
            message: format!("Secret {}/{} does not exist", reference.namespace, reference.name),
        })?;
    secret
        .data
        .and_then(|mut d| d.remove(&reference.key))
        .map(|b| b.0)
        .ok_or_else(|| KubeconfigProblem {
            reason: "KeyMissing",
            message: format!(
                "Secret {}/{} has no key {:?}",
                reference.namespace, reference.name, reference.key
            ),
        })
}

/// Whether `remote` lets `rule` use it, given the labels of the rule's namespace: a `SyncRule`
/// only where the cluster's `allowedNamespaces` selects its namespace; `ClusterSyncRule`s are
/// trusted. `mimeo diff` asks the same.
pub(crate) fn allows(
    rule: &RuleKey,
    namespace_labels: &std::collections::BTreeMap<String, String>,
    remote: &RemoteCluster,
) -> Result<(), ClusterProblem> {
    if rule.kind == RuleKind::ClusterSyncRule {
        return Ok(());
    }
    let namespace = rule.namespace.clone().unwrap_or_default();
    let allowed = match &remote.spec.allowed_namespaces {
        None => false,
        Some(allowed) => selector(allowed).is_ok_and(|s| s.matches(namespace_labels)),
    };
    if allowed {
        return Ok(());
    }
    Err(ClusterProblem {
        state: CopyState::NotAccepted,
        message: format!(
            "RemoteCluster {} does not allow SyncRules from namespace {namespace}: its \
             spec.allowedNamespaces must select that namespace (or use a ClusterSyncRule)",
            remote.name_any()
        ),
    })
}

/// The `ClusterInventory` that made a `RemoteCluster`: its controller owner of that kind.
fn inventory_of(rc: &RemoteCluster) -> Option<&str> {
    let group = ClusterInventory::group(&());
    rc.owner_references()
        .iter()
        .find(|o| {
            o.controller == Some(true)
                && o.kind == ClusterInventory::kind(&())
                && o.api_version.split('/').next() == Some(&*group)
        })
        .map(|o| o.name.as_str())
}

/// The inventories one event of the `RemoteCluster` watch concerns, named once `cache` has
/// applied it: the maker of a changed or deleted `RemoteCluster` (a rule starting or stopping
/// to use it above all: its `status.rules`), and after a list, the makers of all of them (a
/// list's objects reach the cache only with its end, so not for each of them as it comes).
fn inventories_to_wake(
    event: &watcher::Event<RemoteCluster>,
    cache: &Store<RemoteCluster>,
) -> BTreeSet<String> {
    match event {
        watcher::Event::Apply(rc) | watcher::Event::Delete(rc) => {
            inventory_of(rc).map(str::to_owned).into_iter().collect()
        }
        watcher::Event::InitDone => cache
            .state()
            .iter()
            .filter_map(|rc| inventory_of(rc).map(str::to_owned))
            .collect(),
        watcher::Event::Init | watcher::Event::InitApply(_) => BTreeSet::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;

    fn remote_cluster(name: &str, version: &str, owner: Option<&str>, rules: i32) -> RemoteCluster {
        let owners = owner.map(|inventory| {
            serde_json::json!([{"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterInventory",
                                "name": inventory, "uid": "u", "controller": true}])
        });
        serde_json::from_value(serde_json::json!({
            "apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster",
            "metadata": {"name": name, "resourceVersion": version, "ownerReferences": owners},
            "spec": {},
            "status": {"rules": rules},
        }))
        .unwrap()
    }

    /// The lost wake-up of issue 43: the inventory was woken by a watch of its own and read the
    /// fleet's cache, which could still hold the `RemoteCluster` without the rule that now used
    /// it. Woken from the fleet's watch, it is woken only once that cache holds the change.
    #[tokio::test]
    async fn an_inventory_is_woken_once_the_cache_it_reads_holds_the_change() {
        let writer: Writer<RemoteCluster> = Writer::default();
        let cache = writer.as_reader();
        let events = vec![
            watcher::Event::Init,
            watcher::Event::InitApply(remote_cluster("a", "1", Some("fleet"), 0)),
            watcher::Event::InitApply(remote_cluster("own", "2", None, 0)),
            watcher::Event::InitDone,
            watcher::Event::Apply(remote_cluster("a", "3", Some("fleet"), 1)),
            watcher::Event::Apply(remote_cluster("own", "4", None, 1)),
            watcher::Event::Delete(remote_cluster("a", "5", Some("fleet"), 0)),
        ];
        let seen: Vec<(BTreeSet<String>, Option<i32>)> = stream::iter(events.into_iter().map(Ok))
            .reflect(writer)
            .map(|event: Result<_, watcher::Error>| {
                let woken = inventories_to_wake(&event.unwrap(), &cache);
                // What the woken inventory reads: the cache, as the wake is sent.
                let rules = cache
                    .get(&ObjectRef::new("a"))
                    .and_then(|rc| rc.status.as_ref()?.rules);
                (woken, rules)
            })
            .collect()
            .await;
        let fleet = || BTreeSet::from(["fleet".to_owned()]);
        assert_eq!(
            seen,
            [
                (BTreeSet::new(), None),
                (BTreeSet::new(), None),
                (BTreeSet::new(), None),
                (fleet(), Some(0)),
                (fleet(), Some(1)),
                (BTreeSet::new(), Some(1)),
                (fleet(), None),
            ],
            "each wake comes with the cache holding what caused it; not for a cluster of no inventory"
        );
    }
}
