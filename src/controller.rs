//! The controller: shared watches, one loop per rule kind (the same generic [`rule_loop`]), and
//! the context they share.
//!
//! Every decision is made in `crate::sync`. The apiserver is read by the caches (`watches`,
//! `fleet`, the plugin and `nextTo` caches) and by the rule pipeline's gather step; copies are
//! written and removed only through `write`, under one field manager; the record step writes a
//! rule's status and events; `inventory`, `remote` and `seal_key` write their own objects.

pub mod configuration;
mod context;
pub use context::Context;
pub(crate) mod error;
pub(crate) mod fleet;
mod inventory;
mod live_kinds;
mod next_to;
mod orders;
pub(crate) mod plugins;
pub(crate) mod reconcile;
mod recorder;
mod retry;
pub(crate) mod rule;
mod rule_status;
pub mod seal_key;
mod turns;
mod watches;
// Public for the integration tests that race a first write against another writer.
pub mod write;

pub use crate::inventory::InventorySettings;
pub use error::Error;
pub use plugins::OciPolicy;
pub use rule::RuleResource;

use crate::api::{ClusterSyncRule, RemoteCluster, SyncRule};
use crate::metrics::Metrics;
use crate::plugin::oci::{Oci, OciSettings};
use crate::plugin::{HostSettings, PluginHost};
use crate::server::Readiness;
use crate::sync::kinds::{AllowedKind, default_allowed_kinds};
use crate::sync::scope::Scope;
use crate::sync::seal::SealKey;
use fleet::Fleet;
use futures::StreamExt;
use futures::channel::mpsc::UnboundedReceiver;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use std::future::Future;
use std::sync::Arc;
use watches::Triggers;

/// What the controller is started with.
#[derive(Clone, Debug, Default)]
pub struct ControllerConfig {
    /// The namespaces mimeo may read and write in: all, or a list (then only the `SyncRule`s
    /// of those namespaces are reconciled, and no `ClusterSyncRule`s or `RemoteCluster`s).
    pub scope: Scope,
    /// Names this instance in events (the pod name in a cluster).
    pub instance: Option<String>,
    /// Where `file://` plugins are looked up.
    pub plugin_dir: Option<std::path::PathBuf>,
    /// Limits and the compiled-artifact cache of the plugin host.
    pub plugin_host: HostSettings,
    /// The kinds rules may sync; rules for others are refused. Empty means the defaults.
    pub allowed_kinds: Vec<AllowedKind>,
    /// The kinds `targets[].nextTo` may follow (mimeo must be able to list and watch them);
    /// empty, none.
    pub next_to_kinds: Vec<AllowedKind>,
    /// The configuration object to follow, if any ([`configuration`]): it may change the kinds
    /// while mimeo runs.
    pub configuration: Option<configuration::ConfigSource>,
    /// How `oci://` plugins are fetched and where they are kept.
    pub oci: OciSettings,
    /// What the installation allows of `oci://` plugins, and its own registry credentials.
    pub oci_policy: OciPolicy,
    /// Where the key that seals every copy comes from ([`crate::sync::seal`]).
    pub seal_key: SealKeySource,
    /// How `ClusterInventory`s get credentials, and where mimeo keeps them.
    pub inventory: InventorySettings,
    /// The shards this replica holds (`crate::replicas::shards`): all of one, by default.
    pub shards: crate::replicas::shards::Shards,
}

/// Where the seal key comes from.
#[derive(Clone, Debug)]
pub enum SealKeySource {
    /// A Secret in mimeo's own namespace, created with a new random key when it is missing.
    Secret { namespace: String, name: String },
    /// This key (tests).
    Key(SealKey),
}

impl Default for SealKeySource {
    fn default() -> Self {
        SealKeySource::Secret {
            namespace: "default".into(),
            name: seal_key::DEFAULT_NAME.into(),
        }
    }
}

/// Fails with a clear message when the CRDs are not installed. Limited to namespaces, mimeo
/// lists only `SyncRule`s, in one of its namespaces: it may read nothing cluster-wide.
pub async fn check_crds(client: &Client, scope: &Scope) -> Result<(), Error> {
    let probe = ListParams::default().limit(1);
    let results = match scope.namespaces().and_then(|names| names.first()) {
        Some(namespace) => vec![
            Api::<SyncRule>::namespaced(client.clone(), namespace)
                .list(&probe)
                .await
                .map(|_| ()),
        ],
        None => vec![
            Api::<SyncRule>::all(client.clone())
                .list(&probe)
                .await
                .map(|_| ()),
            Api::<ClusterSyncRule>::all(client.clone())
                .list(&probe)
                .await
                .map(|_| ()),
            Api::<RemoteCluster>::all(client.clone())
                .list(&probe)
                .await
                .map(|_| ()),
        ],
    };
    for result in results {
        match result {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => return Err(Error::CrdsMissing(e.message)),
            Err(e) => return Err(Error::Kube(e)),
        }
    }
    Ok(())
}

/// Runs the controller until `shutdown` completes, then finishes the reconciles in flight.
pub async fn run(
    client: Client,
    config: ControllerConfig,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    check_crds(&client, &config.scope).await?;
    let seal_key = Arc::new(match &config.seal_key {
        SealKeySource::Key(key) => key.clone(),
        SealKeySource::Secret { namespace, name } => {
            seal_key::load_or_create(&client, namespace, name).await?
        }
    });
    let (triggers, streams) = Triggers::new(&config.scope);
    let ctx = context(&client, &config, metrics, seal_key, triggers)?;
    let fleet = ctx.fleet.clone();

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };

    report(&ctx, fleet.clone(), readiness);
    tokio::spawn(tidy(Arc::downgrade(&ctx)));
    match (&config.configuration, &config.scope) {
        (Some(source), Scope::Cluster) => {
            tokio::spawn(configuration::follow(
                client.clone(),
                source.clone(),
                ctx.kinds.clone(),
                ctx.shards.clone(),
                stopped(),
            ));
        }
        (Some(source), Scope::Namespaces(_)) => tracing::warn!(
            config = %source.name,
            "limited to namespaces, mimeo reads no cluster-scoped object: the configuration object is not followed"
        ),
        (None, _) => {}
    }

    // One SyncRule controller over all namespaces, or one per namespace of the scope: a Role
    // grants list and watch in one namespace only.
    let sync_loops =
        futures::future::join_all(streams.sync_rules.into_iter().map(|(namespace, triggers)| {
            let sync_rules = match &namespace {
                Some(ns) => Api::<SyncRule>::namespaced(client.clone(), ns),
                None => Api::<SyncRule>::all(client.clone()),
            };
            rule_loop(sync_rules, triggers, ctx.clone(), stopped())
        }));
    let sync_loop = async {
        sync_loops.await;
    };
    match &config.scope {
        Scope::Namespaces(_) => {
            tracing::info!(namespaces = %config.scope, "limited to namespaces: reconciling their SyncRules; ClusterSyncRules and RemoteClusters are not read");
            until_stopped(sync_loop, stopped(), &ctx).await;
        }
        Scope::Cluster => {
            let cluster_rules = Api::<ClusterSyncRule>::all(client.clone());
            let cluster_loop = rule_loop(cluster_rules, streams.cluster_sync_rules, ctx.clone(), stopped());
            let remote_loop = remote_cluster_loop(&ctx, streams.remote_clusters, stopped());
            let inventory_loop = inventory::run(
                client.clone(),
                config.inventory.clone(),
                ctx.kinds.clone(),
                ctx.fleet.remote_clusters(),
                streams.inventories,
                config.shards.clone(),
                stopped(),
            );
            let loops = async {
                futures::join!(sync_loop, cluster_loop, remote_loop, inventory_loop);
            };
            until_stopped(loops, stopped(), &ctx).await;
        }
    }
    tracing::info!("controller stopped");
    Ok(())
}

/// How often what bursts of writes leave behind is forgotten: the flap guard's histories end
/// after its two-minute window, the events remembered six minutes after the last.
const TIDY_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Forgets, every [`TIDY_EVERY`] while the controller runs, the flap guard's histories that no
/// longer count, with the room they took, and the events a quiet recorder remembers: nothing
/// else comes to sweep them once writes stop.
async fn tidy(ctx: std::sync::Weak<Context>) {
    let mut tick = tokio::time::interval(TIDY_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(ctx) = ctx.upgrade() else { return };
        let now = std::time::Instant::now();
        crate::locks::lock(&ctx.flaps).sweep(now);
        if ctx.events.renew_if_quiet(now) {
            tracing::debug!("event recorder renewed after a quiet spell");
        }
    }
}

/// The context every reconcile shares, with the caches and the fleet it starts, each waking
/// rules through `triggers`.
fn context(
    client: &Client,
    config: &ControllerConfig,
    metrics: Arc<Metrics>,
    seal_key: Arc<SealKey>,
    triggers: Triggers,
) -> Result<Arc<Context>, Error> {
    let plugin_config_maps = plugins::config_maps::PluginConfigMaps::new(client.clone(), triggers.clone());
    let plugin_files = plugins::files::PluginFiles::new(triggers.clone());
    let next_to = next_to::NextToWatches::new(client.clone(), triggers.clone());
    let orders = orders::OrderWatches::new(triggers.clone());
    let fleet = Fleet::start(
        client.clone(),
        config.scope.clone(),
        metrics.clone(),
        triggers,
        seal_key.clone(),
    );
    let kinds = live_kinds::LiveKinds::new(crate::config::Kinds {
        allowed: match config.allowed_kinds.is_empty() {
            true => default_allowed_kinds(),
            false => config.allowed_kinds.clone(),
        },
        next_to: config.next_to_kinds.clone(),
    });
    let host = PluginHost::new(config.plugin_host.clone()).map_err(|e| Error::PluginHost(e.to_string()))?;
    let reporter = Reporter {
        controller: "mimeo".into(),
        instance: config.instance.clone(),
    };
    let retries = retry::Retries::counted(metrics.rules_retrying());
    Ok(Arc::new(Context {
        client: client.clone(),
        metrics,
        events: recorder::Events::new(client.clone(), reporter),
        statuses: Default::default(),
        scope: config.scope.clone(),
        fleet,
        in_flight: Arc::new(tokio::sync::watch::Sender::new(0)),
        kinds,
        next_to,
        orders,
        plugins: plugins::Plugins::new(
            host,
            client.clone(),
            config.plugin_dir.clone(),
            Oci::new(config.oci.clone()).map_err(|e| Error::PluginHost(e.to_string()))?,
            config.oci_policy.clone(),
        ),
        plugin_config_maps,
        plugin_files,
        plugin_dir: config.plugin_dir.clone(),
        chain_outputs: Default::default(),
        flaps: Default::default(),
        retries,
        seal_key,
        shards: config.shards.clone(),
        write_turns: turns::Turns::new(reconcile::WRITE_TURNS),
    }))
}

/// One rule kind's controller: the rules `api` lists, looked at when they change, when the caches
/// call for it (`triggers`), and all of them when the shards held change.
fn rule_loop<R: RuleResource>(
    api: Api<R>,
    triggers: UnboundedReceiver<ObjectRef<R>>,
    ctx: Arc<Context>,
    stopped: impl Future<Output = ()> + Send + Sync + 'static,
) -> impl Future<Output = ()> {
    let (rules, changes) = rule_changes(api);
    let shards = ctx.shards.changes();
    Controller::for_stream(changes, rules)
        .reconcile_on(triggers)
        .reconcile_all_on(shards)
        .reconcile_all_on(ctx.kinds.changes())
        .graceful_shutdown_on(stopped)
        .run(reconcile::reconcile::<R>, reconcile::error_policy::<R>, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, kind = R::KIND, "rule controller");
            }
        })
}

/// Reports what the controller holds as it changes: readiness once the fleet's caches are filled,
/// and the shards held in the metrics.
fn report(ctx: &Context, fleet: Arc<Fleet>, readiness: Readiness) {
    let (metrics, shards) = (ctx.metrics.clone(), ctx.shards.clone());
    tokio::spawn(async move {
        let mut held = shards.subscribe();
        loop {
            let now = held.borrow_and_update().clone();
            metrics.set_shards(shards.count(), &now);
            if held.changed().await.is_err() {
                break;
            }
        }
    });
    tokio::spawn(async move {
        if fleet.wait_ready().await.is_ok() {
            readiness.set_ready();
        }
    });
}

/// The `RemoteCluster` status controller: the fleet's `RemoteCluster` watch fills its cache and
/// triggers it. Every `RemoteCluster` is looked at again when the shards held change: a replica
/// that took over the shard of a cluster's name probes it at once, not at its next minute's look,
/// and one that took over a rule shard writes its view of each cluster over the last holder's
/// (`status.unreachableByShard`).
fn remote_cluster_loop(
    ctx: &Arc<Context>,
    triggers: impl futures::Stream<Item = kube::runtime::reflector::ObjectRef<RemoteCluster>> + Send + 'static,
    stopped: impl Future<Output = ()> + Send + Sync + 'static,
) -> impl Future<Output = ()> {
    Controller::for_stream(
        futures::stream::pending::<Result<RemoteCluster, watcher::Error>>(),
        ctx.fleet.remote_clusters(),
    )
    .reconcile_on(triggers)
    .reconcile_all_on(ctx.shards.changes())
    .graceful_shutdown_on(stopped)
    .run(fleet::status::reconcile, fleet::status::error_policy, ctx.clone())
    .for_each(|result| async move {
        if let Err(e) = result {
            tracing::debug!(error = %e, "RemoteCluster controller");
        }
    })
}

/// The cache of one rule kind, and the changes to its rules that call for a look
/// ([`rule::calls_for_a_look`]): not mimeo's own status writes.
fn rule_changes<R: RuleResource>(
    api: Api<R>,
) -> (
    Store<R>,
    impl futures::Stream<Item = Result<R, watcher::Error>> + Send + 'static,
) {
    let (rules, writer) = reflector::store();
    let changes = watcher(api, watcher::Config::default())
        .reflect(writer)
        .applied_objects()
        .predicate_filter(|r: &R| Some(rule::calls_for_a_look(r.meta())), Default::default());
    (rules, changes)
}

/// Runs the controller loops until they end, or, once `stopped` has resolved, until no reconcile
/// is in flight. A kube-runtime controller whose own cache had not listed when the shutdown came
/// keeps waiting for that list; nothing is lost by not waiting for it.
async fn until_stopped(loops: impl Future<Output = ()>, stopped: impl Future<Output = ()>, ctx: &Context) {
    let drained = async {
        stopped.await;
        let mut in_flight = ctx.in_flight.subscribe();
        let _ = in_flight.wait_for(|running| *running == 0).await;
        // Let the loops end on their own when they can.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    tokio::select! {
        () = loops => {}
        () = drained => tracing::debug!("no reconcile in flight; not waiting for the controller streams"),
    }
}

/// How many shared source watches the controller runs now, in all clusters (for tests and
/// benchmarks).
pub fn source_watch_count(ctx: &Context) -> usize {
    ctx.fleet.source_watch_count()
}
