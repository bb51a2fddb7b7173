//! The `mimeo` binary: parses the command line and hands each command to its module here, which
//! reads its arguments, makes the clients it needs, calls the library and says how it went (the
//! exit code, and errors as `anyhow` at this edge). What each command decides is in the
//! library's `cmd` (and, for `run`, `controller` and `replicas`).

mod diff;
mod init;
mod migrate;
mod plugin;
mod remote;
mod reseal;
mod rule_actions;
mod run;
mod status;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches};
use mimeo::cli::{Cli, ClusterArgs, Command, PluginCommand, RemoteCommand};
use mimeo::cmd::rule_actions::Action;
use std::process::ExitCode;

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
/// by default. One arena and no thread caches: after a burst of writes, memory that each
/// thread's cache and each of eight arenas kept half-used stayed resident; at 10,500 copies
/// the settled process held 94.1 MiB against 70.4 after a restart, and 64.8 against 60.0 with
/// these two (`cargo bench --bench scale -- --sources 100`), no slower. The plugin compiler's
/// child turns the thread caches back on.
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static malloc_conf: &[u8] =
    b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,retain:false,narenas:1,tcache:false\0";

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    // Before any TLS client (kube's or the registry's) is built.
    mimeo::plugin::oci::install_crypto_provider();
    // Called as kubectl's plugin, its help says `kubectl mimeo`.
    let command = match bin_name() {
        "kubectl-mimeo" => Cli::command().bin_name("kubectl mimeo"),
        _ => Cli::command(),
    };
    let cli = Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit());
    match cli.command {
        Command::Crds => {
            let yaml = mimeo::api::crds_yaml().context("rendering the CRDs as YAML")?;
            print!("{yaml}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Init(args) => init::init(args).await,
        Command::Run(args) => run::run(*args).await.map(|()| ExitCode::SUCCESS),
        Command::Plugin(PluginCommand::New(args)) => plugin::new(args),
        Command::Plugin(PluginCommand::Test(args)) => plugin::test(args).await,
        Command::Plugin(PluginCommand::Inspect(args)) => plugin::inspect(args).await,
        Command::Plugin(PluginCommand::Push(args)) => plugin::push(args).await,
        Command::Plugin(PluginCommand::Pull(args)) => plugin::pull(args).await,
        Command::Plugin(PluginCommand::CompileIntoCache(args)) => {
            mimeo::plugin::compile_into_cache(
                &args.host_settings(),
                &args.digest,
                args.max_compile_mib << 20,
                args.max_compile_cpu_secs,
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Migrate(args) => migrate::migrate(args).await,
        Command::Diff(args) => Ok(diff::diff(args).await),
        Command::Reseal(args) => reseal::reseal(args).await,
        Command::Status(args) => status::status(args).await,
        Command::Remote(RemoteCommand::Rbac(args)) => remote::rbac(args),
        Command::Suspend(args) => rule_actions::act(args, Action::Suspend, None).await,
        Command::Resume(args) => rule_actions::act(args, Action::Resume, None).await,
        Command::Reconcile(args) => rule_actions::act(args.rule, Action::Reconcile, Some(args.timeout)).await,
        Command::Completion(args) => {
            clap_complete::generate(
                args.shell,
                &mut Cli::command(),
                bin_name(),
                &mut std::io::stdout(),
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The name this binary was called by: `kubectl-mimeo` (so `kubectl mimeo ...` works, krew's
/// convention) or `mimeo`.
fn bin_name() -> &'static str {
    let called = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    match called.as_deref() {
        Some("kubectl-mimeo") => "kubectl-mimeo",
        _ => "mimeo",
    }
}

/// The seal key's Secret: the one given, else `mimeo-seal-key` in the pod's namespace (`default`
/// outside a pod).
fn seal_key_secret(given: Option<(String, String)>) -> (String, String) {
    given.unwrap_or_else(|| {
        let namespace = std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "default".into());
        (namespace, mimeo::controller::seal_key::DEFAULT_NAME.into())
    })
}

/// The configuration `--kubeconfig` and `--context` name, else the one kubectl would use.
async fn cluster_config(cluster: &ClusterArgs) -> anyhow::Result<kube::Config> {
    Ok(
        mimeo::clusters::user_config::user_config(cluster.kubeconfig.as_deref(), cluster.context.as_deref())
            .await?,
    )
}

/// A client of the cluster a user's command talks to (`cluster_config`).
async fn connect(cluster: &ClusterArgs) -> anyhow::Result<kube::Client> {
    let config = cluster_config(cluster).await?;
    kube::Client::try_from(config).map_err(|e| {
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

/// Says who installed mimeo, when openMCP's operator did (its flags name the environment and the
/// PlatformService).
fn log_platform(platform: &mimeo::cli::PlatformArgs) {
    if platform.environment.is_some() || platform.provider_name.is_some() {
        tracing::info!(
            environment = platform.environment.as_deref().unwrap_or_default(),
            provider = platform.provider_name.as_deref().unwrap_or_default(),
            "installed as an openMCP platform service"
        );
    }
}
