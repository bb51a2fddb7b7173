mod plugin_cmd;

use anyhow::Context;
use clap::Parser;
use mimeo::cli::{Cli, Command, PluginCommand, RemoteCommand, RunArgs};
use mimeo::controller::{self, ControllerConfig};
use mimeo::metrics::Metrics;
use mimeo::replicas;
use mimeo::server::{self, Readiness};
use mimeo::sync::scope::Scope;
use std::process::ExitCode;
use std::sync::Arc;

/// jemalloc, set to hand freed pages back to the system within about a second (a background
/// thread purges them; it sleeps while nothing is left to purge). A pass over thousands of
/// copies allocates and frees tens of MiB; glibc's malloc kept them in its per-thread arenas,
/// so the resident set stayed at the pass's peak: at 10,000 copies 114.9 MiB with glibc, 88.8
/// with this (`cargo bench --bench scale -- --sources 100`).
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings, read when it starts (`_RJEM_MALLOC_CONF` in the environment overrides).
/// `retain:false` unmaps what it purges: a plugin's compile runs in a child of this binary
/// under a data limit (`RLIMIT_DATA`, counting address space), and the JavaScript example's
/// compile, 450 MB resident, ran out of a 1024 MiB limit with the address space jemalloc keeps
/// by default.
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static malloc_conf: &[u8] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,retain:false\0";

/// `mimeo migrate`: exit 0 when the plan was printed (or, with `--apply`, applied whole), 1 when
/// the cluster could not be read, the file not parsed, or a part of it not applied.
async fn migrate(args: mimeo::cli::MigrateArgs) -> anyhow::Result<ExitCode> {
    let client = connect().await?;
    if let Some(file) = &args.apply {
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let document: serde_json::Value =
            serde_yaml_ng::from_str(&text).with_context(|| format!("{} is not YAML", file.display()))?;
        let plan = mimeo::cmd::migrate::Plan::from_document(&document)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "{} holds no Migration (the output of mimeo migrate)",
                    file.display()
                )
            })?
            .with_context(|| format!("{} does not read as a Migration", file.display()))?;
        let clusters = cluster_clients(&args.cluster_kubeconfigs).await?;
        let applied = mimeo::cmd::migrate::apply::apply(&client, &clusters, &plan).await;
        for line in &applied.lines {
            println!("{line}");
        }
        for line in &applied.unreached {
            eprintln!("{line}");
        }
        if applied.failed > 0 {
            eprintln!("{} changes not applied: see the lines with !", applied.failed);
            return Ok(ExitCode::from(1));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut inventory = mimeo::cmd::migrate::read::inventory(&client).await?;
    let namespaces = mimeo::cmd::migrate::helmdeployer::target_namespaces(&inventory.helm);
    for (cluster, client) in cluster_clients(&args.cluster_kubeconfigs).await? {
        let read = mimeo::cmd::migrate::read::target_cluster(&cluster, &client, &namespaces).await?;
        inventory.clusters.insert(cluster, read);
    }
    let migration = mimeo::cmd::migrate::migrate(&inventory, &args.options());
    print!("{}", migration.to_yaml());
    for note in &migration.notes {
        eprintln!("note: {note}");
    }
    let platform = migration.consents.iter().map(|(ns, entries)| (None, ns, entries));
    let clusters = migration
        .cluster_consents
        .iter()
        .map(|((cluster, ns), entries)| (Some(cluster.as_str()), ns, entries));
    for (cluster, namespace, entries) in platform.chain(clusters) {
        let on = mimeo::cmd::migrate::on_cluster(cluster);
        for (entry, grant) in entries {
            eprintln!(
                "consent: namespace {namespace}{on} would accept {entry} ({}): the copy there is {}; asked for by {}{}",
                mimeo::sync::ownership::ACCEPT_FROM_ANNOTATION,
                grant.evidence,
                grant.asked_by,
                if grant.written_in.is_empty() {
                    String::new()
                } else {
                    format!(", written in namespace {}", grant.written_in)
                }
            );
        }
    }
    eprintln!(
        "{} rules; {} copies, {} of them existing (to adopt); consent asked of {} namespaces; on other Clusters, {} existing copies to adopt and consent asked of {} namespaces",
        migration.rules.len(),
        migration.copies.len(),
        migration.adoptions.len(),
        migration.consents.len(),
        migration.cluster_adoptions.len(),
        migration.cluster_consents.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// The seal key's Secret: the one given, else `mimeo-seal-key` in the pod's namespace (`default`
/// outside a pod).
fn seal_key_secret(given: Option<(String, String)>) -> (String, String) {
    given.unwrap_or_else(|| {
        let namespace = std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "default".into());
        (namespace, controller::seal_key::DEFAULT_NAME.into())
    })
}

/// A client of the current kubeconfig's cluster, as a user's command reads it.
async fn connect() -> anyhow::Result<kube::Client> {
    kube::Client::try_default().await.map_err(|e| {
        anyhow::anyhow!(
            "connecting to the cluster: {}",
            mimeo::clusters::explain_client_error(&e)
        )
    })
}

/// A client for each openMCP `Cluster` given with `--cluster-kubeconfig`, by `namespace/name`.
async fn cluster_clients(
    given: &[mimeo::cli::ClusterKubeconfig],
) -> anyhow::Result<std::collections::BTreeMap<String, kube::Client>> {
    let mut clients = std::collections::BTreeMap::new();
    for (cluster, path) in mimeo::cli::cluster_kubeconfigs(given).map_err(anyhow::Error::msg)? {
        let client = mimeo::cmd::migrate::read::cluster_client(&cluster, &path).await?;
        clients.insert(cluster, client);
    }
    Ok(clients)
}

/// `mimeo diff`: exit 0 when applying the rule changes nothing, 1 when it changes something, 2
/// when it would be refused, the diff failed, or a copy is undecided (`Report::exit_code`; as
/// `kubectl diff`).
async fn diff(args: mimeo::cli::DiffArgs) -> ExitCode {
    match diff_reports(args).await {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Diffs every rule of the file, printing each report; the exit code of the worst.
async fn diff_reports(args: mimeo::cli::DiffArgs) -> anyhow::Result<u8> {
    use mimeo::cmd::diff::{DiffOptions, Documents};
    let text = if args.file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the rule from stdin")?
    } else {
        std::fs::read_to_string(&args.file).with_context(|| format!("reading {}", args.file.display()))?
    };
    let client = connect().await?;
    let documents = Documents::parse(&text, client.default_namespace())?;
    let registries: Vec<String> = documents
        .rules
        .iter()
        .flat_map(|rule| rule.spec().transforms.iter())
        .filter_map(|t| t.plugin.parse::<mimeo::plugin::oci::OciReference>().ok())
        .map(|r| r.registry)
        .collect();
    let registries: Vec<&str> = registries.iter().map(String::as_str).collect();
    let allowed_kinds = match args.allow_kinds.is_empty() {
        true => mimeo::sync::kinds::default_allowed_kinds(),
        false => args.allow_kinds.clone(),
    };
    let clusters = cluster_clients(&args.cluster_kubeconfigs).await?;
    let (lines, mut worst) =
        mimeo::cmd::diff::metadata::metadata_changes(&client, &clusters, &documents).await;
    print!("{lines}");
    for rule in &documents.rules {
        let options = DiffOptions {
            allowed_kinds: allowed_kinds.clone(),
            next_to_kinds: args.next_to_kinds.clone(),
            plugin_dir: args.plugin_dir.clone(),
            host: args.limits.host_settings(),
            oci: args.registry.oci_settings(&registries)?,
            show_secrets: args.show_secrets,
        };
        let code = match mimeo::cmd::diff::diff(client.clone(), rule, &documents.overlay, options).await {
            Ok(report) => {
                print!("{}", report.render());
                report.exit_code()
            }
            Err(e) => {
                eprintln!("error: {}: {e}", rule.key());
                2
            }
        };
        worst = worst.max(code);
    }
    Ok(worst)
}

/// `mimeo reseal`: exit 0 when every rule was read (and with `--apply` every seal written), 1
/// otherwise.
async fn reseal(args: mimeo::cli::ResealArgs) -> anyhow::Result<ExitCode> {
    let client = connect().await?;
    let (namespace, name) = seal_key_secret(args.seal_key_secret.clone());
    let key = controller::seal_key::load(&client, &namespace, &name).await?;
    let outcome = mimeo::cmd::reseal::reseal(&client, &key, &args.rules, args.apply).await;
    for line in &outcome.lines {
        println!("{line}");
    }
    let verb = if args.apply { "resealed" } else { "to reseal" };
    eprintln!(
        "{} {verb}, {} refused, {} sealed already, {} failed{}",
        outcome.resealed,
        outcome.refused,
        outcome.sealed,
        outcome.failed,
        if !args.apply && outcome.resealed > 0 {
            ": look at them, then run again with --apply"
        } else {
            ""
        }
    );
    Ok(if outcome.failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `mimeo status`: the trees of the rules named, as text or JSON.
async fn status(args: mimeo::cli::StatusArgs) -> anyhow::Result<ExitCode> {
    use mimeo::cli::{ColorChoice, StatusOutput};
    use mimeo::cmd::status::{read, render};
    use std::io::IsTerminal;
    let client = connect().await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let selection = read::Selection::parse(args.rule.as_deref(), &namespace)?;
    let trees = read::read(&client, &selection).await?;
    match args.output {
        StatusOutput::Json => {
            let json = serde_json::json!({ "rules": trees });
            println!("{}", serde_json::to_string_pretty(&json)?);
        }
        StatusOutput::Text => {
            let colors = match args.color {
                ColorChoice::Always => true,
                ColorChoice::Never => false,
                ColorChoice::Auto => {
                    std::io::stdout().is_terminal()
                        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                }
            };
            let colors = if colors {
                render::Colors::On
            } else {
                render::Colors::Off
            };
            print!(
                "{}",
                render::render(&trees, k8s_openapi::jiff::Timestamp::now(), colors)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    // Before any TLS client (kube's or the registry's) is built.
    mimeo::plugin::oci::install_crypto_provider();
    let cli = Cli::parse();
    match cli.command {
        Command::Crds => {
            let yaml = mimeo::api::crds_yaml().context("rendering the CRDs as YAML")?;
            print!("{yaml}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Run(args) => run(args).await.map(|()| ExitCode::SUCCESS),
        Command::Plugin(PluginCommand::Test(args)) => plugin_cmd::test(args).await,
        Command::Plugin(PluginCommand::Inspect(args)) => plugin_cmd::inspect(args).await,
        Command::Plugin(PluginCommand::Push(args)) => plugin_cmd::push(args).await,
        Command::Plugin(PluginCommand::Pull(args)) => plugin_cmd::pull(args).await,
        Command::Plugin(PluginCommand::CompileIntoCache(args)) => {
            mimeo::plugin::compile_into_cache(
                &args.host_settings(),
                &args.digest,
                args.max_compile_mib << 20,
                args.max_compile_cpu_secs,
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Migrate(args) => migrate(args).await,
        Command::Diff(args) => Ok(diff(args).await),
        Command::Reseal(args) => reseal(args).await,
        Command::Status(args) => status(args).await,
        Command::Remote(RemoteCommand::Rbac(args)) => {
            let options = args.options()?;
            let yaml = mimeo::remote_rbac::render(&options)?;
            print!("{yaml}");
            if options.grants_in_every_namespace() {
                eprintln!(
                    "note: no --namespace given: the ClusterRole grants writing copies in every namespace of the cluster"
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    mimeo::telemetry::init(&args.log_level, args.log_format).map_err(anyhow::Error::msg)?;
    let scope = Scope::from_namespaces(args.watch_namespaces.iter().map(String::as_str))?;
    let oci = args.oci.settings()?;
    let metrics = Arc::new(Metrics::new());
    let client = mimeo::clusters::local_client(&metrics.requests_layer(None))
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "connecting to the cluster (kubeconfig or in-cluster): {}",
                mimeo::clusters::explain_client_error(&e)
            )
        })?;
    let readiness = Readiness::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };
    let (bound, serve) = server::bind(args.http_addr, metrics.clone(), readiness.clone(), stopped())
        .await
        .with_context(|| format!("binding {}", args.http_addr))?;
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
        allowed_kinds: args.allow_kinds,
        next_to_kinds: args.next_to_kinds.clone(),
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
        shards: match args.leader.shards {
            1 => replicas::shards::Shards::default(),
            count => replicas::shards::Shards::new(count),
        },
    };
    let mode = replica_mode(&args.leader);
    replicas::run(client, mode, config, metrics, readiness, stopped).await?;
    let _ = server.await;
    Ok(())
}

/// How this replica shares the work, from its flags.
fn replica_mode(leader: &mimeo::cli::LeaderArgs) -> replicas::Mode {
    let namespace = leader
        .leader_elect_namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .unwrap_or_else(|| "default".to_owned());
    let duration = std::time::Duration::from_secs(leader.leader_elect_lease_seconds.max(1));
    if leader.shards > 1 {
        return replicas::Mode::Shards(replicas::shards::ShardSettings {
            count: leader.shards,
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
