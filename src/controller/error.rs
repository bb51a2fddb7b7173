//! The controller's errors, each with a short label for metrics and a requeue decision.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    #[error("waiting for caches to fill: {0}")]
    NotReady(String),
    #[error("cleaning up copies: {0}")]
    Cleanup(String),
    #[error(
        "the mimeo CRDs are not installed in this cluster ({0}): install them with \
         `mimeo crds | kubectl apply --server-side -f -`"
    )]
    CrdsMissing(String),
    #[error("starting the plugin host: {0}")]
    PluginHost(String),
}

impl Error {
    /// A short, bounded label for the failure counter.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Finalizer(_) => "finalizer",
            Error::NotReady(_) => "not_ready",
            Error::Cleanup(_) => "cleanup",
            Error::CrdsMissing(_) => "crds_missing",
            Error::PluginHost(_) => "plugin_host",
        }
    }

    /// How long to wait before trying again.
    pub fn retry_after(&self) -> Duration {
        match self {
            Error::NotReady(_) => Duration::from_secs(2),
            _ => Duration::from_secs(10),
        }
    }
}

/// Cuts an error message for status and events: the apiserver's messages can be long, and status
/// must stay small.
pub fn short_message(message: &str) -> String {
    const LIMIT: usize = 400;
    if message.len() <= LIMIT {
        return message.to_owned();
    }
    let mut end = LIMIT;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}
