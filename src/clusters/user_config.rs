//! The cluster a command talks to, found as kubectl finds it: `--kubeconfig` and `--context`
//! first, then `$KUBECONFIG` and `~/.kube/config`, then (in a pod) the service account. When none
//! works, one line says what was tried and what to do, not kube's chain of causes.

use super::explain_client_error;
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::path::{Path, PathBuf};

/// Why no cluster configuration could be had.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UserConfigError {
    #[error("the kubeconfig {path} cannot be read: {message}")]
    Unreadable { path: String, message: String },
    #[error("the kubeconfig {where_}: {message}")]
    Unusable { where_: String, message: String },
    #[error(
        "no cluster to talk to: {tried}; give --kubeconfig FILE (or set KUBECONFIG), or run in a pod with a service account"
    )]
    NoneFound { tried: String },
}

/// The configuration `--kubeconfig` and `--context` name, else the one kubectl would use.
pub async fn user_config(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<kube::Config, UserConfigError> {
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    let unusable = |where_: String| {
        move |e: kube::config::KubeconfigError| UserConfigError::Unusable {
            where_,
            message: explain_client_error(&e),
        }
    };
    if let Some(path) = kubeconfig {
        let shown = path.display().to_string();
        let read = Kubeconfig::read_from(path).map_err(|e| UserConfigError::Unreadable {
            path: shown.clone(),
            message: explain_client_error(&e),
        })?;
        return kube::Config::from_custom_kubeconfig(read, &options)
            .await
            .map_err(unusable(shown));
    }
    if context.is_some() {
        return kube::Config::from_kubeconfig(&options)
            .await
            .map_err(unusable(found_where(&Facts::here())));
    }
    kube::Config::infer().await.map_err(|e| match Facts::here() {
        // A kubeconfig was there and failed: its own error says why.
        facts if facts.kubeconfig_env.is_some() || facts.default_exists => UserConfigError::Unusable {
            where_: found_where(&facts),
            message: explain_client_error(&e),
        },
        facts => UserConfigError::NoneFound { tried: tried(&facts) },
    })
}

/// What kubectl's search would find here.
struct Facts {
    kubeconfig_env: Option<String>,
    default_path: Option<PathBuf>,
    default_exists: bool,
    in_pod: bool,
}

impl Facts {
    fn here() -> Facts {
        let default_path = std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".kube/config"));
        Facts {
            kubeconfig_env: std::env::var("KUBECONFIG").ok().filter(|v| !v.is_empty()),
            default_exists: default_path.as_ref().is_some_and(|p| p.exists()),
            default_path,
            in_pod: std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
        }
    }
}

fn found_where(facts: &Facts) -> String {
    match (&facts.kubeconfig_env, &facts.default_path) {
        (Some(env), _) => format!("$KUBECONFIG ({env})"),
        (None, Some(path)) => path.display().to_string(),
        (None, None) => "~/.kube/config".into(),
    }
}

fn tried(facts: &Facts) -> String {
    let default = facts
        .default_path
        .as_ref()
        .map_or("~/.kube/config".into(), |p| p.display().to_string());
    let pod = match facts.in_pod {
        true => "the pod's service account did not work",
        false => "this is not a pod (KUBERNETES_SERVICE_HOST is not set)",
    };
    format!("KUBECONFIG is not set, {default} does not exist, and {pod}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_found_says_what_was_tried() {
        let facts = Facts {
            kubeconfig_env: None,
            default_path: Some("/home/u/.kube/config".into()),
            default_exists: false,
            in_pod: false,
        };
        let error = UserConfigError::NoneFound { tried: tried(&facts) };
        assert_eq!(
            error.to_string(),
            "no cluster to talk to: KUBECONFIG is not set, /home/u/.kube/config does not exist, and this is not a pod (KUBERNETES_SERVICE_HOST is not set); give --kubeconfig FILE (or set KUBECONFIG), or run in a pod with a service account"
        );
        let set = Facts {
            kubeconfig_env: Some("./kubeconfig".into()),
            ..facts
        };
        assert_eq!(found_where(&set), "$KUBECONFIG (./kubeconfig)");
    }

    #[tokio::test]
    async fn a_missing_kubeconfig_file_is_named() {
        let error = user_config(Some(Path::new("/nonexistent/kubeconfig")), None)
            .await
            .unwrap_err();
        let text = error.to_string();
        assert!(
            text.starts_with("the kubeconfig /nonexistent/kubeconfig cannot be read: "),
            "{text}"
        );
        assert!(!text.contains('\n'), "one line: {text}");
    }

    #[tokio::test]
    async fn an_unknown_context_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: a, context: {cluster: c, user: u}}]\ncurrent-context: a\n",
        )
        .unwrap();
        assert!(user_config(Some(&path), Some("a")).await.is_ok());
        let error = user_config(Some(&path), Some("b")).await.unwrap_err();
        assert!(error.to_string().contains('b'), "{error}");
    }
}
