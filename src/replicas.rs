//! How the replicas of one installation share the work, in one of three modes: a replica alone
//! (`--leader-elect=false`), one leader among standbys holding one Lease (`lease`), or every
//! replica active, each holding shards of the rules, a Lease each (`shards`). [`run`] starts the
//! controller in the mode chosen; the controller itself knows only which rules it holds.

pub mod lease;
pub mod shards;

use crate::controller::{self, ControllerConfig};
use crate::metrics::Metrics;
use crate::server::Readiness;
use kube::Client;
use lease::{Elector, LeaderError};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// How this replica shares the work with the others.
#[derive(Clone, Debug)]
pub enum Mode {
    /// It is the only one: it runs the controller at once.
    Alone,
    /// It runs the controller while it holds the Lease `namespace/name`.
    Leader {
        namespace: String,
        name: String,
        identity: String,
        duration: Duration,
    },
    /// It runs the controller for the shards it holds (`ControllerConfig::shards`).
    Shards(shards::ShardSettings),
}

/// Why the replica stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    #[error(transparent)]
    Controller(#[from] controller::Error),
    #[error(transparent)]
    Lease(#[from] LeaderError),
}

/// Runs the controller as `mode` says until `stopped` resolves. A leader that loses its Lease
/// exits the process at once: past that point another replica may write.
pub async fn run<S, F>(
    client: Client,
    mode: Mode,
    config: ControllerConfig,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    stopped: S,
) -> Result<(), ReplicaError>
where
    S: Fn() -> F,
    F: Future<Output = ()> + Send + 'static,
{
    match mode {
        Mode::Alone => Ok(controller::run(client, config, metrics, readiness, stopped()).await?),
        Mode::Shards(settings) => {
            tracing::info!(shards = settings.count, identity = %settings.identity, "sharing the rules with the other replicas");
            readiness.set_shards(config.shards.clone());
            let (stop_keeping, keeping_stopped) = tokio::sync::oneshot::channel::<()>();
            let keeper = tokio::spawn(shards::keep(
                client.clone(),
                settings,
                config.shards.clone(),
                async move {
                    let _ = keeping_stopped.await;
                },
            ));
            let ran = controller::run(client, config, metrics, readiness, stopped()).await;
            let _ = stop_keeping.send(());
            let _ = keeper.await;
            Ok(ran?)
        }
        Mode::Leader {
            namespace,
            name,
            identity,
            duration,
        } => {
            let elector = Arc::new(Elector::new(
                client.clone(),
                &namespace,
                &name,
                &identity,
                duration,
            ));
            tracing::info!(lease = %format!("{namespace}/{name}"), identity = %identity, "standing by for leadership");
            // A standby is healthy and ready: it takes over when the leader goes. It says it does
            // not hold the one shard, so that a Lease nobody holds shows in the metrics, not as
            // silence.
            readiness.set_ready();
            metrics.set_shards(1, &Default::default());
            tokio::select! {
                acquired = elector.acquire() => acquired?,
                () = stopped() => return Ok(()),
            }
            let holder = elector.clone();
            tokio::spawn(async move {
                let lost = holder.hold().await;
                // Nothing may be written past this point: another replica may take over soon.
                tracing::error!(error = %lost, "lost leadership; exiting so that no two replicas write");
                std::process::exit(1);
            });
            controller::run(client, config, metrics, readiness, stopped()).await?;
            if let Err(e) = elector.release().await {
                tracing::warn!(error = %e, "releasing the leader Lease failed; a standby takes over when it expires");
            }
            Ok(())
        }
    }
}
