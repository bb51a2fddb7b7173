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
        "the mimeo CRDs are not installed in this cluster ({0}): install them with `mimeo init` \
         or `mimeo crds | kubectl apply --server-side -f -`"
    )]
    CrdsMissing(String),
    #[error("starting the plugin host: {0}")]
    PluginHost(String),
    #[error("the seal key: {0}")]
    SealKey(String),
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
            Error::SealKey(_) => "seal_key",
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

/// The apiserver's words about a refused write, without the values it quotes: `Invalid value:
/// "<the value>"` of a Secret's label or data is the secret. Field paths and reasons stay.
pub fn without_values(message: &str) -> String {
    static QUOTED: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r#"(Invalid value|Unsupported value|Duplicate value|Forbidden value): "(?:[^"\\]|\\.)*""#,
        )
        .expect("a valid pattern")
    });
    QUOTED.replace_all(message, "$1: (not shown)").into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_values_are_not_shown() {
        let apiserver = r#"Secret "c" is invalid: metadata.labels: Invalid value: "hunter2 \"x\"": a valid label must be an empty string or consist of alphanumeric characters"#;
        assert_eq!(
            without_values(apiserver),
            "Secret \"c\" is invalid: metadata.labels: Invalid value: (not shown): a valid label must be \
             an empty string or consist of alphanumeric characters"
        );
        let two = r#"data[a b]: Invalid value: "a b": a valid config key, type: Unsupported value: "s3cr3t": supported values: "Opaque""#;
        let shown = without_values(two);
        assert!(
            !shown.contains("s3cr3t") && shown.starts_with("data[a b]: Invalid value: (not shown)"),
            "{shown}"
        );
        assert_eq!(
            without_values("namespaces \"x\" not found"),
            "namespaces \"x\" not found"
        );
    }
}
