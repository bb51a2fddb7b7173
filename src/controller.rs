//! The controller: shared watches, one reconcile loop per rule kind, and the context they share.
//!
//! Kube client calls live here and in `write`; every decision is made in `crate::sync`.

mod error;
mod fleet;
mod plugins;
mod reconcile;
mod remote;
mod rule;
mod status;
mod watches;
mod write;

pub use error::Error;
pub use plugins::OciPolicy;
pub use rule::RuleResource;

use crate::api::{ClusterSyncRule, RemoteCluster, SyncRule};
use crate::metrics::Metrics;
use crate::plugin::oci::{Oci, OciSettings};
use crate::plugin::{HostSettings, PluginHost};
use crate::server::Readiness;
use crate::sync::kinds::{AllowedKind, default_allowed_kinds};
use fleet::Fleet;
use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::{Controller, watcher};
use std::future::Future;
use std::sync::Arc;
use watches::Triggers;

/// What the controller is started with.
#[derive(Clone, Debug, Default)]
pub struct ControllerConfig {
    /// Reconcile only the `SyncRule`s of this namespace, and no `ClusterSyncRule`s.
    pub watch_namespace: Option<String>,
    /// Names this instance in events (the pod name in a cluster).
    pub instance: Option<String>,
    /// Where `file://` plugins are looked up.
    pub plugin_dir: Option<std::path::PathBuf>,
    /// Limits and the compiled-artifact cache of the plugin host.
    pub plugin_host: HostSettings,
    /// The kinds rules may sync; rules for others are refused. Empty means the defaults.
    pub allowed_kinds: Vec<AllowedKind>,
    /// How `oci://` plugins are fetched and where they are kept.
    pub oci: OciSettings,
    /// What the installation allows of `oci://` plugins, and its own registry credentials.
    pub oci_policy: OciPolicy,
}

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    /// Rule reconciles running now: a shutdown waits for these, not for the controllers' streams.
    pub(crate) in_flight: Arc<tokio::sync::watch::Sender<usize>>,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    fleet: Arc<Fleet>,
    allowed_kinds: Vec<AllowedKind>,
    plugins: plugins::Plugins,
}

/// Fails with a clear message when the CRDs are not installed.
pub async fn check_crds(client: &Client) -> Result<(), Error> {
    let probe = ListParams::default().limit(1);
    for result in [
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
    ] {
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
    check_crds(&client).await?;
    let (triggers, streams) = Triggers::new();
    let fleet = Fleet::start(client.clone(), metrics.clone(), triggers);
    let allowed_kinds = if config.allowed_kinds.is_empty() {
        default_allowed_kinds()
    } else {
        config.allowed_kinds.clone()
    };
    let host = PluginHost::new(config.plugin_host.clone()).map_err(|e| Error::PluginHost(e.to_string()))?;
    let reporter = Reporter {
        controller: "mimeo".into(),
        instance: config.instance.clone(),
    };
    let ctx = Arc::new(Context {
        client: client.clone(),
        metrics,
        recorder: Recorder::new(client.clone(), reporter),
        fleet: fleet.clone(),
        in_flight: Arc::new(tokio::sync::watch::Sender::new(0)),
        allowed_kinds,
        plugins: plugins::Plugins::new(
            host,
            client.clone(),
            config.plugin_dir.clone(),
            Oci::new(config.oci.clone()).map_err(|e| Error::PluginHost(e.to_string()))?,
            config.oci_policy.clone(),
        ),
    });

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

    let ready_fleet = fleet.clone();
    tokio::spawn(async move {
        if ready_fleet.wait_ready().await.is_ok() {
            readiness.set_ready();
        }
    });

    let sync_rules = match &config.watch_namespace {
        Some(ns) => Api::<SyncRule>::namespaced(client.clone(), ns),
        None => Api::<SyncRule>::all(client.clone()),
    };
    let sync_loop = Controller::new(sync_rules, watcher::Config::default())
        .reconcile_on(streams.sync_rules)
        .graceful_shutdown_on(stopped())
        .run(
            reconcile::reconcile::<SyncRule>,
            reconcile::error_policy::<SyncRule>,
            ctx.clone(),
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "SyncRule controller");
            }
        });
    match &config.watch_namespace {
        Some(ns) => {
            tracing::info!(namespace = %ns, "reconciling the SyncRules of one namespace; ClusterSyncRules are not reconciled");
            until_stopped(sync_loop, stopped(), &ctx).await;
        }
        None => {
            let cluster_loop = Controller::new(
                Api::<ClusterSyncRule>::all(client.clone()),
                watcher::Config::default(),
            )
            .reconcile_on(streams.cluster_sync_rules)
            .graceful_shutdown_on(stopped())
            .run(
                reconcile::reconcile::<ClusterSyncRule>,
                reconcile::error_policy::<ClusterSyncRule>,
                ctx.clone(),
            )
            .for_each(|result| async move {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "ClusterSyncRule controller");
                }
            });
            let remote_loop = Controller::new(
                Api::<RemoteCluster>::all(client.clone()),
                watcher::Config::default(),
            )
            .reconcile_on(streams.remote_clusters)
            .graceful_shutdown_on(stopped())
            .run(remote::reconcile, remote::error_policy, ctx.clone())
            .for_each(|result| async move {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "RemoteCluster controller");
                }
            });
            let loops = async {
                futures::join!(sync_loop, cluster_loop, remote_loop);
            };
            until_stopped(loops, stopped(), &ctx).await;
        }
    }
    tracing::info!("controller stopped");
    Ok(())
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
