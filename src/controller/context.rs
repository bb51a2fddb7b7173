//! What every reconcile shares: the clients, the caches and the fleet, the plugins, the kinds in
//! effect, the shards held. Made once by `controller::run`.

use super::fleet::Fleet;
use crate::metrics::Metrics;
use crate::sync::scope::Scope;
use crate::sync::seal::SealKey;
use kube::Client;
use std::sync::Arc;

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    /// Rule reconciles running now: a shutdown waits for these, not for the controllers' streams.
    pub(crate) in_flight: Arc<tokio::sync::watch::Sender<usize>>,
    pub metrics: Arc<Metrics>,
    /// The event recorder, renewed after a quiet spell ([`super::recorder`]).
    pub events: super::recorder::Events,
    /// The status each rule was last given, so that a rule cached from before that write does
    /// not get it written again.
    pub(super) statuses: std::sync::Mutex<
        std::collections::HashMap<crate::sync::ownership::RuleKey, super::rule_status::LastWritten>,
    >,
    pub(super) scope: Scope,
    pub(super) fleet: Arc<Fleet>,
    /// The kinds rules may sync and `nextTo` may follow, as they are now.
    pub(super) kinds: super::live_kinds::LiveKinds,
    /// The watches of the kinds `targets[].nextTo` follows.
    pub(super) next_to: Arc<super::next_to::NextToWatches>,
    /// The watches of the objects `targets[].forEach` follows, per cluster.
    pub(super) orders: super::orders::OrderWatches,
    pub(super) plugins: super::plugins::Plugins,
    /// The ConfigMaps `configmap://` plugins come from, watched so that a change wakes the rules.
    pub(super) plugin_config_maps: super::plugins::config_maps::PluginConfigMaps,
    /// The `file://` plugins in use, looked at every few seconds so that a replaced one wakes
    /// its rules.
    pub(super) plugin_files: super::plugins::files::PluginFiles,
    /// Where `file://` plugins are.
    pub(super) plugin_dir: Option<std::path::PathBuf>,
    /// What each rule's chain made of each copy, reused while the input is the same.
    pub(super) chain_outputs: super::plugins::chain_outputs::ChainOutputs,
    /// Failed tries in a row per rule, for their backoff.
    pub(super) retries: super::retry::Retries,
    /// What every copy is sealed with.
    pub(crate) seal_key: Arc<SealKey>,
    /// Copies that churn, and those held for it.
    pub(super) flaps: std::sync::Mutex<crate::sync::flap_guard::FlapGuard<super::reconcile::places::FlapKey>>,
    /// The shards this replica holds: it reconciles and writes for their rules alone.
    pub(crate) shards: crate::replicas::shards::Shards,
    /// Turns to make and write a rule's copies (`reconcile::WRITE_TURNS`).
    pub(super) write_turns: Arc<super::turns::Turns>,
}
