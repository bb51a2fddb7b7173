//! Prometheus metrics, prefixed `mimeo_`, served in text format on `/metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

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
struct ErrorReason {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
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

/// Every metric the controller keeps.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<KindLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_duration: Family<KindLabels, Histogram>,
    copies: Family<StateLabels, Gauge>,
    writes: Family<VerbLabels, Counter>,
    propagation: Histogram,
    source_watches: Gauge,
    shards_held: Family<ShardLabels, Gauge>,
    plugin_failures: Family<ErrorReason, Counter>,
    plugin_chains: Family<ChainLabels, Counter>,
    copy_flaps: Counter,
    /// Copies by state per rule, so the `copies` gauge is a sum that forgets deleted rules.
    copies_by_rule: Mutex<HashMap<String, HashMap<String, i64>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("mimeo");
        let reconciles = Family::<KindLabels, Counter>::default();
        registry.register("reconciles", "Rule reconciliations", reconciles.clone());
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Failed rule reconciliations by reason",
            reconcile_errors.clone(),
        );
        let reconcile_duration = Family::<KindLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 14))
        });
        registry.register(
            "reconcile_duration_seconds",
            "Time spent reconciling one rule",
            reconcile_duration.clone(),
        );
        let copies = Family::<StateLabels, Gauge>::default();
        registry.register("copies", "Copies by state, over all rules", copies.clone());
        let writes = Family::<VerbLabels, Counter>::default();
        registry.register("writes", "Writes to copies by verb", writes.clone());
        let propagation = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        registry.register(
            "propagation_seconds",
            "From the controller seeing a source change to a copy of it written",
            propagation.clone(),
        );
        let source_watches = Gauge::default();
        registry.register(
            "source_watches",
            "Shared source watches running",
            source_watches.clone(),
        );
        let plugin_failures = Family::<ErrorReason, Counter>::default();
        registry.register(
            "plugin_failures",
            "Transform chains that failed on a copy, by reason",
            plugin_failures.clone(),
        );
        let plugin_chains = Family::<ChainLabels, Counter>::default();
        registry.register(
            "plugin_chains",
            "Transform chains for one copy, by result: run (the plugins were called) or \
             remembered (the outcome for the same input was reused)",
            plugin_chains.clone(),
        );
        let shards_held = Family::<ShardLabels, Gauge>::default();
        registry.register(
            "shard_held",
            "1 for each shard of the rules this replica holds now, 0 for the others",
            shards_held.clone(),
        );
        let copy_flaps = Counter::default();
        registry.register(
            "copy_flaps",
            "Copies the flap guard stopped touching: deleted and created again, or written back \
             after something else changed them, too often within minutes",
            copy_flaps.clone(),
        );
        let metrics = Metrics {
            copy_flaps,
            plugin_failures,
            plugin_chains,
            registry,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            copies,
            writes,
            propagation,
            source_watches,
            shards_held,
            copies_by_rule: Mutex::new(HashMap::new()),
        };
        // Every state is exposed from the start, at zero, so dashboards need no special case.
        metrics.set_copies("", None);
        metrics
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

    pub fn plugin_failed(&self, reason: &str) {
        self.plugin_failures
            .get_or_create(&ErrorReason {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts a transform chain for one copy: run, or its remembered outcome reused.
    pub fn chain(&self, remembered: bool) {
        let result = if remembered { "remembered" } else { "run" };
        self.plugin_chains
            .get_or_create(&ChainLabels {
                result: result.to_owned(),
            })
            .inc();
    }

    /// Counts shared source watches started (positive) or stopped (negative), in any cluster.
    pub fn add_source_watches(&self, delta: i64) {
        self.source_watches.inc_by(delta);
    }

    /// Records how many copies of `rule` are in each state; `None` forgets the rule.
    pub fn set_copies(&self, rule: &str, by_state: Option<HashMap<String, i64>>) {
        let mut all = self.copies_by_rule.lock().unwrap_or_else(|p| p.into_inner());
        match by_state {
            Some(counts) => all.insert(rule.to_owned(), counts),
            None => all.remove(rule),
        };
        let mut totals: HashMap<&str, i64> = HashMap::new();
        for counts in all.values() {
            for (state, n) in counts {
                *totals.entry(state).or_default() += n;
            }
        }
        for state in crate::api::CopyState::ALL {
            let state = format!("{state:?}");
            let n = totals.get(state.as_str()).copied().unwrap_or(0);
            self.copies.get_or_create(&StateLabels { state }).set(n);
        }
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

    #[test]
    fn copies_are_summed_over_rules_and_forgotten_with_them() {
        let m = Metrics::new();
        m.set_copies("a", Some([("Synced".to_owned(), 3)].into()));
        m.set_copies(
            "b",
            Some([("Synced".to_owned(), 2), ("Conflict".to_owned(), 1)].into()),
        );
        let text = m.encode();
        assert!(text.contains("mimeo_copies{state=\"Synced\"} 5"), "{text}");
        assert!(text.contains("mimeo_copies{state=\"Conflict\"} 1"), "{text}");
        m.set_copies("b", None);
        let text = m.encode();
        assert!(text.contains("mimeo_copies{state=\"Synced\"} 3"), "{text}");
        assert!(text.contains("mimeo_copies{state=\"Conflict\"} 0"), "{text}");
    }

    #[test]
    fn counters_and_histograms_are_exposed() {
        let m = Metrics::new();
        m.reconciled("SyncRule", Duration::from_millis(3));
        m.reconcile_failed("SyncRule", "kube");
        m.wrote("apply");
        m.propagated(Duration::from_millis(40));
        let text = m.encode();
        for expected in [
            "mimeo_reconciles_total{kind=\"SyncRule\"} 1",
            "mimeo_reconcile_errors_total{kind=\"SyncRule\",reason=\"kube\"} 1",
            "mimeo_writes_total{verb=\"apply\"} 1",
            "mimeo_propagation_seconds_count 1",
        ] {
            assert!(text.contains(expected), "missing {expected} in\n{text}");
        }
    }
}
