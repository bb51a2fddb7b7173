//! `mimeo run`: the controller, its HTTP server, and how this replica shares the work.

use crate::seal_key_secret;
use anyhow::Context;
use mimeo::api::MimeoConfig;
use mimeo::cli::RunArgs;
use mimeo::controller::configuration::ConfigSource;
use mimeo::controller::{self, ControllerConfig};
use mimeo::metrics::Metrics;
use mimeo::replicas;
use mimeo::server::{self, Readiness};
use mimeo::sync::scope::Scope;
use std::sync::Arc;

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    if args.metrics_secure == Some(true) {
        anyhow::bail!(
            "--metrics-secure=true: mimeo serves /metrics over plain HTTP only; pass \
             --metrics-secure=false (as the openmcp-operator does) or leave it out, and keep the \
             port inside the cluster"
        );
    }
    mimeo::telemetry::init(args.log.filter(&args.platform), args.log.log_format)
        .map_err(anyhow::Error::msg)?;
    crate::log_platform(&args.platform);
    let scope = Scope::from_namespaces(args.watch_namespaces.iter().map(String::as_str))?;
    // Refused before connecting to anything: the flags' own registry settings.
    args.oci.settings()?;
    let metrics = Arc::new(Metrics::new());
    let config = crate::cluster_config(&args.cluster).await?;
    let client = mimeo::clusters::local_client(config, &metrics.requests_layer(None)).map_err(|e| {
        anyhow::anyhow!(
            "connecting to the cluster (kubeconfig or in-cluster): {}",
            mimeo::clusters::explain_client_error(&e)
        )
    })?;
    let (args, configuration) = configured(&client, args).await;
    let oci = args.oci.settings()?;
    let readiness = Readiness::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };
    let address = args.listen_address();
    let (bound, serve) = server::bind(address, metrics.clone(), readiness.clone(), stopped())
        .await
        .with_context(|| format!("binding {address}"))?;
    tracing::info!(address = %bound, "serving /metrics, /healthz and /readyz");
    let server = tokio::spawn(serve);
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down: finishing the reconciles in flight");
        let _ = stop_tx.send(true);
        // Kubernetes kills the pod 30 s after SIGTERM; finish before that on our own terms.
        tokio::time::sleep(GRACE).await;
        tracing::error!(grace = ?GRACE, "graceful shutdown did not finish in time; exiting");
        std::process::exit(1);
    });
    let config = ControllerConfig {
        scope,
        instance: std::env::var("POD_NAME").ok(),
        plugin_dir: args.plugins.plugin_dir.clone(),
        plugin_host: args.plugins.host_settings(
            std::env::current_exe().context("finding mimeo's own binary, which compiles plugins")?,
        ),
        allowed_kinds: args.allow_kinds.clone(),
        next_to_kinds: args.next_to_kinds.clone(),
        configuration,
        oci,
        oci_policy: controller::OciPolicy {
            require_digest: args.oci.plugin_require_digest,
            allowed_registries: args.oci.plugin_allowed_registries.clone(),
            docker_config: match &args.oci.plugin_registry_config {
                Some(path) => Some(read_registry_config(path)?),
                None => None,
            },
            docker_config_for_sync_rules: args.oci.plugin_registry_config_for_sync_rules,
        },
        seal_key: {
            let (namespace, name) = seal_key_secret(args.seal_key_secret.clone());
            controller::SealKeySource::Secret { namespace, name }
        },
        inventory: controller::InventorySettings {
            providers_file: args.cluster_profile_providers.clone(),
            exec_timeout: std::time::Duration::from_secs(args.cluster_profile_exec_timeout_secs),
            namespace: std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "default".into()),
        },
        shards: match args.leader.shard_count() {
            1 => replicas::shards::Shards::default(),
            count => replicas::shards::Shards::new(count),
        },
    };
    let mode = replica_mode(&args.leader);
    replicas::run(client, mode, config, metrics, readiness, stopped).await?;
    let _ = server.await;
    Ok(())
}

/// The flags with the configuration object named after --provider-name laid over them, as the
/// object is now, and the object to follow. Without one, or when it cannot be read or applied,
/// the flags (said in the log; the object's status says why once mimeo runs).
async fn configured(client: &kube::Client, args: RunArgs) -> (RunArgs, Option<ConfigSource>) {
    let Some(name) = args.platform.provider_name.clone() else {
        return (args, None);
    };
    let api = kube::Api::<MimeoConfig>::all(client.clone());
    let started = match args.watch_namespaces.is_empty() {
        false => args.clone(),
        true => match api.get_opt(&name).await {
            Ok(Some(object)) => match mimeo::config::apply(&object.spec, &args) {
                Ok(applied) => {
                    tracing::info!(config = %name, "settings from the configuration object over the flags");
                    applied
                }
                Err(problem) => {
                    tracing::error!(config = %name, %problem, "the configuration object is invalid: starting on the flags");
                    args.clone()
                }
            },
            Ok(None) => {
                tracing::info!(config = %name, "no configuration object of this name yet: starting on the flags");
                args.clone()
            }
            Err(e) => {
                tracing::warn!(config = %name, error = %e, "reading the configuration object failed: starting on the flags");
                args.clone()
            }
        },
    };
    let source = ConfigSource {
        name,
        flags: args,
        started: started.clone(),
    };
    (started, Some(source))
}

/// How this replica shares the work, from its flags.
fn replica_mode(leader: &mimeo::cli::LeaderArgs) -> replicas::Mode {
    let namespace = leader
        .leader_elect_namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .unwrap_or_else(|| "default".to_owned());
    let duration = std::time::Duration::from_secs(leader.leader_elect_lease_seconds.max(1));
    let count = leader.shard_count();
    if count > 1 {
        return replicas::Mode::Shards(replicas::shards::ShardSettings {
            count,
            namespace,
            prefix: format!("{}-shard", leader.leader_elect_lease_name),
            identity: identity(),
            duration,
        });
    }
    if !leader.leader_elect {
        return replicas::Mode::Alone;
    }
    replicas::Mode::Leader {
        namespace,
        name: leader.leader_elect_lease_name.clone(),
        identity: identity(),
        duration,
    }
}

/// The controller's registry credentials, refused at start-up unless they read as a Docker config.
fn read_registry_config(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    let bytes =
        std::fs::read(path).with_context(|| format!("reading the registry config {}", path.display()))?;
    let parsed: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|_| anyhow::anyhow!("the registry config {} is not JSON", path.display()))?;
    if !parsed.get("auths").is_some_and(|a| a.is_object()) {
        anyhow::bail!(
            "the registry config {} has no \"auths\" object: write it as a Docker config",
            path.display()
        );
    }
    Ok(bytes)
}

/// This replica's name in the Lease: the pod's name in a cluster, else host and process.
fn identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME") {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "mimeo".to_owned());
    format!("{host}-{}", std::process::id())
}

/// How long a graceful shutdown may take.
const GRACE: std::time::Duration = std::time::Duration::from_secs(20);

/// SIGTERM (what Kubernetes sends) or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = ctrl_c.await;
        }
    }
}
