//! Prometheus metrics, prefixed `mimeo_`, served in text format on `/metrics`, with the
//! process's own beside them under the names every client library uses ([`process`]).
//!
//! Labels stay bounded: states, kinds, verbs, reasons and shards are fixed sets, and the only
//! open ones are a cluster (`remote_cluster`: a `RemoteCluster`'s name, [`LOCAL_CLUSTER`] for the
//! cluster mimeo runs in) and a plugin (its reference without tag or digest, [`plugin_label`]).
//! Never a label per copy, rule or namespace: a rule of 50,000 copies costs no more series than a
//! rule of one. The label is `remote_cluster`, not `cluster`: multi-cluster Prometheus setups
//! (Thanos, Mimir) put `cluster` on every series for the cluster it was scraped in, and a series
//! that already carried one would be taken for another cluster's.

mod process;
pub mod requests;

pub use requests::CountRequests;
use requests::{ClusterVerbLabels, RequestLabels};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The `remote_cluster` of the cluster mimeo runs in: no `RemoteCluster` can be named so (names
/// hold no parentheses), and it is not empty, which Prometheus would take for no label at all.
pub const LOCAL_CLUSTER: &str = "(local)";

/// The `remote_cluster` label of a cluster: its `RemoteCluster`'s name, or [`LOCAL_CLUSTER`].
pub fn cluster_label(cluster: Option<&str>) -> String {
    cluster.unwrap_or(LOCAL_CLUSTER).to_owned()
}

/// The `plugin` label of a plugin reference: an `oci://` reference without its tag and digest,
/// so that a new version or a re-pinned tag continues the same series; other references as
/// written (`file://filter-keys.wasm`, `configmap://ns/name/key`).
pub fn plugin_label(reference: &str) -> String {
    let Some(rest) = reference.strip_prefix("oci://") else {
        return reference.to_owned();
    };
    let rest = rest.split_once('@').map_or(rest, |(repository, _)| repository);
    let (path, last) = rest.rsplit_once('/').unwrap_or(("", rest));
    let last = last.split_once(':').map_or(last, |(name, _)| name);
    match path {
        "" => format!("oci://{last}"),
        path => format!("oci://{path}/{last}"),
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    kind: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterStateLabels {
    remote_cluster: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabels {
    remote_cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabels {
    shard: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbLabels {
    verb: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChainLabels {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginErrorLabels {
    plugin: String,
    reason: String,
}

/// A rule's copies counted by cluster (`None`: the cluster mimeo runs in) and state.
pub type CopyCounts = HashMap<(Option<String>, String), i64>;

/// The copies of every rule, summed by state and by (cluster label, state). A state no rule has
/// a copy in is missing from both.
fn copy_totals(
    rules: &HashMap<String, CopyCounts>,
) -> (BTreeMap<String, i64>, BTreeMap<(String, String), i64>) {
    let mut by_state = BTreeMap::new();
    let mut by_cluster = BTreeMap::new();
    for counts in rules.values() {
        for ((cluster, state), n) in counts {
            *by_state.entry(state.clone()).or_default() += n;
            *by_cluster
                .entry((cluster_label(cluster.as_deref()), state.clone()))
                .or_default() += n;
        }
    }
    by_cluster.retain(|_, n| *n != 0);
    (by_state, by_cluster)
}

/// What the copy gauges are summed from.
#[derive(Default)]
struct Copies {
    /// Per rule, so that the gauges are sums that forget deleted rules.
    by_rule: HashMap<String, CopyCounts>,
    /// The (cluster, state) series `cluster_copies` exports now: one that falls to zero is
    /// removed, so clusters no rule writes to any more leave no series behind.
    exported: BTreeSet<(String, String)>,
}

/// Every metric the controller keeps.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<KindLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_duration: Family<KindLabels, Histogram>,
    copies: Family<StateLabels, Gauge>,
    cluster_copies: Family<ClusterStateLabels, Gauge>,
    writes: Family<VerbLabels, Counter>,
    propagation: Histogram,
    source_watches: Gauge,
    shards_held: Family<ShardLabels, Gauge>,
    copy_flaps: Counter,
    copy_writes_refused: Counter,
    rules_retrying: Gauge,
    plugins: PluginMetrics,
    clusters: ClusterMetrics,
    copies_state: Mutex<Copies>,
}

/// The transform plugins' metrics.
struct PluginMetrics {
    calls: Family<PluginLabels, Counter>,
    call_duration: Family<PluginLabels, Histogram>,
    failures: Family<PluginErrorLabels, Counter>,
    chains: Family<ChainLabels, Counter>,
}

impl PluginMetrics {
    fn register(r: &mut Registry) -> Self {
        PluginMetrics {
            calls: registered(
                r,
                "plugin_calls",
                "Transform calls by plugin (its reference without tag or digest), failed ones included",
                Family::<PluginLabels, Counter>::default(),
            ),
            call_duration: registered(
                r,
                "plugin_call_duration_seconds",
                "Time one transform call took, instantiation included, by plugin",
                Family::<PluginLabels, Histogram>::new_with_constructor(|| {
                    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
                }),
            ),
            failures: registered(
                r,
                "plugin_failures",
                "Transform chains that failed on a copy, by the plugin that failed and reason",
                Family::<PluginErrorLabels, Counter>::default(),
            ),
            chains: registered(
                r,
                "plugin_chains",
                "Transform chains for one copy, by result: run (the plugins were called) or remembered (the outcome for the same input was reused)",
                Family::<ChainLabels, Counter>::default(),
            ),
        }
    }
}

/// The metrics of the clusters mimeo talks to.
struct ClusterMetrics {
    remote_cluster_ready: Family<ClusterLabels, Gauge>,
    remote_cluster_rules: Family<ClusterLabels, Gauge>,
    apiserver_requests: Family<RequestLabels, Counter>,
    apiserver_request_duration: Family<ClusterVerbLabels, Histogram>,
}

impl ClusterMetrics {
    fn register(r: &mut Registry) -> Self {
        ClusterMetrics {
            remote_cluster_ready: registered(
                r,
                "remote_cluster_ready",
                "1 while a RemoteCluster is Ready (reached with its kubeconfig), 0 while it is not; exported by the replica that checks it",
                Family::<ClusterLabels, Gauge>::default(),
            ),
            remote_cluster_rules: registered(
                r,
                "remote_cluster_rules",
                "Rules that use a RemoteCluster, as its status.rules says",
                Family::<ClusterLabels, Gauge>::default(),
            ),
            apiserver_requests: registered(
                r,
                "apiserver_requests",
                "Requests to each apiserver (remote_cluster), by verb as the apiserver names it and status code (<error>: no response)",
                Family::<RequestLabels, Counter>::default(),
            ),
            apiserver_request_duration: registered(
                r,
                "apiserver_request_duration_seconds",
                "Time to each apiserver's response headers (for a WATCH: until it started), by verb",
                Family::<ClusterVerbLabels, Histogram>::new_with_constructor(|| {
                    Histogram::new(exponential_buckets(0.005, 2.0, 12))
                }),
            ),
        }
    }
}

/// `metric`, registered in `registry` as `name` with its `help`.
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut root = Registry::default();
        root.register_collector(Box::new(process::Process));
        let r = root.sub_registry_with_prefix("mimeo");
        let metrics = Metrics {
            reconciles: registered(
                r,
                "reconciles",
                "Rule reconciliations",
                Family::<KindLabels, Counter>::default(),
            ),
            reconcile_errors: registered(
                r,
                "reconcile_errors",
                "Failed rule reconciliations by reason",
                Family::<ErrorLabels, Counter>::default(),
            ),
            reconcile_duration: registered(
                r,
                "reconcile_duration_seconds",
                "Time spent reconciling one rule",
                Family::<KindLabels, Histogram>::new_with_constructor(|| {
                    Histogram::new(exponential_buckets(0.001, 2.0, 14))
                }),
            ),
            copies: registered(
                r,
                "copies",
                "Copies by state, over all rules",
                Family::<StateLabels, Gauge>::default(),
            ),
            cluster_copies: registered(
                r,
                "cluster_copies",
                "Copies by cluster (remote_cluster: the RemoteCluster, or (local)) and state, over all rules; a state with no copies in a cluster has no series",
                Family::<ClusterStateLabels, Gauge>::default(),
            ),
            writes: registered(
                r,
                "writes",
                "Writes to copies by verb",
                Family::<VerbLabels, Counter>::default(),
            ),
            propagation: registered(
                r,
                "propagation_seconds",
                "From the controller seeing a source change to a copy of it written",
                Histogram::new(exponential_buckets(0.005, 2.0, 14)),
            ),
            source_watches: registered(
                r,
                "source_watches",
                "Shared source watches running",
                Gauge::default(),
            ),
            shards_held: registered(
                r,
                "shard_held",
                "1 for each shard of the rules this replica holds now, 0 for the others; with one shard, shard 0 is the leader's (0 on a replica standing by)",
                Family::<ShardLabels, Gauge>::default(),
            ),
            copy_flaps: registered(
                r,
                "copy_flaps",
                "Copies the flap guard stopped touching: deleted and created again, or written back after something else changed them, too often within minutes",
                Counter::default(),
            ),
            copy_writes_refused: registered(
                r,
                "copy_writes_refused",
                "Writes and removals of copies the apiserver refused because the copy had changed since the version they were decided from (another replica wrote it after this one lost the rule's shard, or anyone changed it meanwhile); each is decided again, never sent again as it was",
                Counter::default(),
            ),
            rules_retrying: registered(
                r,
                "rules_retrying",
                "Rules whose last look failed (a reconcile error, or copies Failed, PluginFailed or Unauthorized) and that are tried again with backoff",
                Gauge::default(),
            ),
            plugins: PluginMetrics::register(r),
            clusters: ClusterMetrics::register(r),
            copies_state: Mutex::new(Copies::default()),
            registry: root,
        };
        // Every state is exposed from the start, at zero, so dashboards need no special case.
        metrics.set_copies("", None);
        metrics
    }

    /// A layer for a kube client of `cluster` (`None`: the cluster mimeo runs in) that counts
    /// its requests ([`requests`]).
    pub fn requests_layer(&self, cluster: Option<&str>) -> CountRequests {
        CountRequests {
            cluster: Arc::from(cluster_label(cluster)),
            requests: self.clusters.apiserver_requests.clone(),
            durations: self.clusters.apiserver_request_duration.clone(),
        }
    }

    /// Records which of `count` shards this replica holds.
    pub fn set_shards(&self, count: u32, held: &std::collections::BTreeSet<u32>) {
        for shard in 0..count {
            self.shards_held
                .get_or_create(&ShardLabels {
                    shard: shard.to_string(),
                })
                .set(i64::from(held.contains(&shard)));
        }
    }

    pub fn reconciled(&self, kind: &str, took: Duration) {
        let labels = KindLabels {
            kind: kind.to_owned(),
        };
        self.reconciles.get_or_create(&labels).inc();
        self.reconcile_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    pub fn reconcile_failed(&self, kind: &str, reason: &str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels {
                kind: kind.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    pub fn copy_flapped(&self) {
        self.copy_flaps.inc();
    }

    pub fn copy_write_refused(&self) {
        self.copy_writes_refused.inc();
    }

    pub fn wrote(&self, verb: &str) {
        self.writes
            .get_or_create(&VerbLabels {
                verb: verb.to_owned(),
            })
            .inc();
    }

    pub fn propagated(&self, latency: Duration) {
        self.propagation.observe(latency.as_secs_f64());
    }

    /// Counts one transform call of the plugin `reference`, whatever its outcome.
    pub fn plugin_called(&self, reference: &str, took: Duration) {
        let labels = PluginLabels {
            plugin: plugin_label(reference),
        };
        self.plugins.calls.get_or_create(&labels).inc();
        self.plugins
            .call_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// Counts a chain that failed on a copy, in the plugin `reference`.
    pub fn plugin_failed(&self, reference: &str, reason: &str) {
        self.plugins
            .failures
            .get_or_create(&PluginErrorLabels {
                plugin: plugin_label(reference),
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts a transform chain for one copy: run, or its remembered outcome reused.
    pub fn chain(&self, remembered: bool) {
        let result = if remembered { "remembered" } else { "run" };
        self.plugins
            .chains
            .get_or_create(&ChainLabels {
                result: result.to_owned(),
            })
            .inc();
    }

    /// Counts shared source watches started (positive) or stopped (negative), in any cluster.
    pub fn add_source_watches(&self, delta: i64) {
        self.source_watches.inc_by(delta);
    }

    /// The gauge of rules retried with backoff, kept by the retries themselves.
    pub fn rules_retrying(&self) -> Gauge {
        self.rules_retrying.clone()
    }

    /// Records whether the named `RemoteCluster` is ready and how many rules use it, as this
    /// replica just checked; `None` drops its series (deleted, or checked by another replica).
    pub fn set_remote_cluster(&self, name: &str, checked: Option<(bool, i64)>) {
        let labels = ClusterLabels {
            remote_cluster: name.to_owned(),
        };
        match checked {
            Some((ready, rules)) => {
                self.clusters
                    .remote_cluster_ready
                    .get_or_create(&labels)
                    .set(i64::from(ready));
                self.clusters
                    .remote_cluster_rules
                    .get_or_create(&labels)
                    .set(rules);
            }
            None => {
                self.clusters.remote_cluster_ready.remove(&labels);
                self.clusters.remote_cluster_rules.remove(&labels);
            }
        }
    }

    /// Records how many copies of `rule` are in each cluster and state; `None` forgets the rule.
    pub fn set_copies(&self, rule: &str, counts: Option<CopyCounts>) {
        let mut copies = self.copies_state.lock().unwrap_or_else(|p| p.into_inner());
        match counts {
            Some(counts) => copies.by_rule.insert(rule.to_owned(), counts),
            None => copies.by_rule.remove(rule),
        };
        let (by_state, by_cluster) = copy_totals(&copies.by_rule);
        for state in crate::api::CopyState::ALL {
            let state = format!("{state:?}");
            let n = by_state.get(&state).copied().unwrap_or(0);
            self.copies.get_or_create(&StateLabels { state }).set(n);
        }
        for (remote_cluster, state) in &copies.exported {
            if !by_cluster.contains_key(&(remote_cluster.clone(), state.clone())) {
                self.cluster_copies.remove(&ClusterStateLabels {
                    remote_cluster: remote_cluster.clone(),
                    state: state.clone(),
                });
            }
        }
        for ((remote_cluster, state), n) in &by_cluster {
            self.cluster_copies
                .get_or_create(&ClusterStateLabels {
                    remote_cluster: remote_cluster.clone(),
                    state: state.clone(),
                })
                .set(*n);
        }
        copies.exported = by_cluster.into_keys().collect();
    }

    /// The metrics in Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(entries: &[(Option<&str>, &str, i64)]) -> CopyCounts {
        entries
            .iter()
            .map(|(cluster, state, n)| ((cluster.map(str::to_owned), state.to_string()), *n))
            .collect()
    }

    #[test]
    fn copies_are_summed_over_rules_and_forgotten_with_them() {
        let m = Metrics::new();
        m.set_copies("a", Some(counts(&[(None, "Synced", 3)])));
        m.set_copies(
            "b",
            Some(counts(&[
                (None, "Synced", 1),
                (Some("eu1"), "Synced", 1),
                (Some("eu1"), "Conflict", 1),
            ])),
        );
        let text = m.encode();
        for expected in [
            "mimeo_copies{state=\"Synced\"} 5",
            "mimeo_copies{state=\"Conflict\"} 1",
            "mimeo_cluster_copies{remote_cluster=\"(local)\",state=\"Synced\"} 4",
            "mimeo_cluster_copies{remote_cluster=\"eu1\",state=\"Synced\"} 1",
            "mimeo_cluster_copies{remote_cluster=\"eu1\",state=\"Conflict\"} 1",
        ] {
            assert!(text.contains(expected), "missing {expected} in\n{text}");
        }
        m.set_copies("b", None);
        let text = m.encode();
        assert!(text.contains("mimeo_copies{state=\"Synced\"} 3"), "{text}");
        assert!(text.contains("mimeo_copies{state=\"Conflict\"} 0"), "{text}");
        assert!(
            text.contains("mimeo_cluster_copies{remote_cluster=\"(local)\",state=\"Synced\"} 3"),
            "{text}"
        );
        assert!(
            !text.contains("remote_cluster=\"eu1\""),
            "eu1 holds nothing now:\n{text}"
        );
    }

    #[test]
    fn totals_by_state_and_by_cluster() {
        let rules: HashMap<String, CopyCounts> = [
            (
                "a".to_owned(),
                counts(&[(None, "Synced", 2), (Some("x"), "Unreachable", 4)]),
            ),
            (
                "b".to_owned(),
                counts(&[(Some("x"), "Unreachable", 1), (Some("y"), "Synced", 0)]),
            ),
        ]
        .into();
        let (by_state, by_cluster) = copy_totals(&rules);
        assert_eq!(
            by_state,
            BTreeMap::from([("Synced".into(), 2), ("Unreachable".into(), 5)])
        );
        assert_eq!(
            by_cluster,
            BTreeMap::from([
                (("(local)".into(), "Synced".into()), 2),
                (("x".into(), "Unreachable".into()), 5),
            ]),
            "no series for a count of zero"
        );
    }

    #[test]
    fn plugin_labels_leave_out_versions() {
        for (reference, label) in [
            (
                "oci://registry.example.com/mimeo/filter-keys:1.0.0@sha256:abc",
                "oci://registry.example.com/mimeo/filter-keys",
            ),
            (
                "oci://localhost:5000/filter-keys:1.2",
                "oci://localhost:5000/filter-keys",
            ),
            (
                "oci://localhost:5000/filter-keys@sha256:abc",
                "oci://localhost:5000/filter-keys",
            ),
            ("oci://r.example/a/b/c", "oci://r.example/a/b/c"),
            ("file://filter-keys.wasm", "file://filter-keys.wasm"),
            ("configmap://ns/plugins/p.wasm", "configmap://ns/plugins/p.wasm"),
        ] {
            assert_eq!(plugin_label(reference), label, "{reference}");
        }
    }

    #[test]
    fn remote_clusters_are_exported_while_checked_here() {
        let m = Metrics::new();
        m.set_remote_cluster("eu1", Some((false, 2)));
        let text = m.encode();
        assert!(
            text.contains("mimeo_remote_cluster_ready{remote_cluster=\"eu1\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("mimeo_remote_cluster_rules{remote_cluster=\"eu1\"} 2"),
            "{text}"
        );
        m.set_remote_cluster("eu1", None);
        assert!(!m.encode().contains("eu1"));
    }

    #[test]
    fn counters_and_histograms_are_exposed() {
        let m = Metrics::new();
        m.reconciled("SyncRule", Duration::from_millis(3));
        m.reconcile_failed("SyncRule", "kube");
        m.wrote("apply");
        m.propagated(Duration::from_millis(40));
        m.plugin_called("oci://r.example/p:1@sha256:aa", Duration::from_millis(2));
        m.plugin_failed("oci://r.example/p:1@sha256:aa", "timeout");
        let text = m.encode();
        for expected in [
            "mimeo_reconciles_total{kind=\"SyncRule\"} 1",
            "mimeo_reconcile_errors_total{kind=\"SyncRule\",reason=\"kube\"} 1",
            "mimeo_writes_total{verb=\"apply\"} 1",
            "mimeo_propagation_seconds_count 1",
            "mimeo_plugin_calls_total{plugin=\"oci://r.example/p\"} 1",
            "mimeo_plugin_call_duration_seconds_count{plugin=\"oci://r.example/p\"} 1",
            "mimeo_plugin_failures_total{plugin=\"oci://r.example/p\",reason=\"timeout\"} 1",
            "mimeo_rules_retrying 0",
            "mimeo_copy_flaps_total 0",
            "mimeo_copy_writes_refused_total 0",
        ] {
            assert!(text.contains(expected), "missing {expected} in\n{text}");
        }
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn the_process_is_exported_under_the_standard_names() {
        let text = Metrics::new().encode();
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_virtual_memory_bytes ",
            "process_start_time_seconds ",
            "process_open_fds ",
            "process_max_fds ",
            "process_threads ",
        ] {
            assert!(text.lines().any(|l| l.starts_with(name)), "no {name}in\n{text}");
        }
        assert!(!text.contains("mimeo_process"), "{text}");
    }
}
