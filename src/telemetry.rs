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

/// kube's client logs every failed request at ERROR (its tracing layer's `on_failure`), and every
/// watch cut short at WARN (`eof in poll`): a workload cluster restarting made 573 such ERROR
/// lines in 12 minutes, and anyone paging on ERROR was woken by each. mimeo says once that a
/// cluster does not answer and once that it does again, and counts the requests
/// (`mimeo_apiserver_requests_total{code="<error>"}`), so those lines are off unless the filter
/// names kube's targets itself (`info,kube_client=debug`).
const KUBE_REQUEST_FAILURES: &str = "kube_client::client=error,kube_client::client::builder=off";

/// The filter as given, with kube's per-request failure lines off unless it names kube.
fn with_defaults(filter: &str) -> String {
    match filter.contains("kube") {
        true => filter.to_owned(),
        false => format!("{filter},{KUBE_REQUEST_FAILURES}"),
    }
}

pub fn init(filter: &str, format: LogFormat) -> Result<(), String> {
    let filter = tracing_subscriber::EnvFilter::try_new(with_defaults(filter))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubes_line_per_failed_request_is_off_unless_asked_for() {
        assert_eq!(
            with_defaults("info"),
            "info,kube_client::client=error,kube_client::client::builder=off"
        );
        assert_eq!(
            with_defaults("info,mimeo=debug"),
            "info,mimeo=debug,kube_client::client=error,kube_client::client::builder=off"
        );
        assert_eq!(with_defaults("info,kube_client=debug"), "info,kube_client=debug");
        for given in ["info", "debug", "warn,mimeo=trace", "info,kube=debug"] {
            tracing_subscriber::EnvFilter::try_new(with_defaults(given)).unwrap();
        }
    }
}
