//! The command line: flags parsed into plain values, then handed to the parts that do the work.

use crate::telemetry::LogFormat;
use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;

#[derive(Parser, Debug)]
#[command(
    name = "mimeo",
    version,
    about = "Copies Kubernetes objects between namespaces and clusters"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the CustomResourceDefinitions mimeo serves, as YAML.
    Crds,
    /// Run the controller against the current kubeconfig (or the in-cluster service account).
    Run(RunArgs),
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Log filter: a level (`info`, `debug`) or per-target directives (`mimeo=debug,kube=info`).
    #[arg(long, env = "MIMEO_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log format: `json` for machines, `pretty` for humans, `auto` picks pretty on a terminal.
    #[arg(long, env = "MIMEO_LOG_FORMAT", value_enum, default_value = "auto")]
    pub log_format: LogFormat,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    #[arg(long, env = "MIMEO_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    pub http_addr: SocketAddr,
    /// Reconcile only the SyncRules of this namespace (and no ClusterSyncRules).
    #[arg(long, env = "MIMEO_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
}
