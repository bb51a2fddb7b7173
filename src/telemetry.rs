//! Logging: JSON lines for machines, a pretty format for humans, filtered by level.

use std::io::IsTerminal;

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Pretty on a terminal, JSON otherwise.
    Auto,
    Json,
    Pretty,
}

/// Installs the global tracing subscriber. `filter` is an `EnvFilter` directive such as `info`
/// or `mimeo=debug,kube=info`.
/// For `mimeo plugin test`: the plugins' own `log` lines (and the host's warnings about them) on
/// stderr, plainly, so that an author sees what the plugin logged beside the outcome.
pub fn init_plugin_log() {
    let filter = tracing_subscriber::EnvFilter::new("warn,mimeo::plugin::state=trace");
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .with_ansi(false)
        .try_init();
}

pub fn init(filter: &str, format: LogFormat) -> Result<(), String> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .map_err(|e| format!("invalid log level {filter:?}: {e}"))?;
    let json = match format {
        LogFormat::Json => true,
        LogFormat::Pretty => false,
        LogFormat::Auto => !std::io::stderr().is_terminal(),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = if json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
    installed.map_err(|e| format!("installing the log subscriber: {e}"))
}
