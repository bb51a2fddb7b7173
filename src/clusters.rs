//! Other clusters: turning a `RemoteCluster`'s kubeconfig into a client, and saying clearly why
//! when that cannot be done. Nothing here reads the Secret or talks to a cluster on its own.

use crate::error_text::with_causes;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Why a kubeconfig cannot be used, as a condition reason and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeconfigProblem {
    pub reason: &'static str,
    pub message: String,
}

fn problem(reason: &'static str, message: impl Into<String>) -> KubeconfigProblem {
    KubeconfigProblem {
        reason,
        message: message.into(),
    }
}

/// Parses a kubeconfig (its current context) and refuses what a controller must not run:
/// exec plugins and auth providers would run programs or reach out from inside mimeo's pod.
pub fn parse(text: &str) -> Result<Kubeconfig, KubeconfigProblem> {
    // The parser's own message may quote the text it stumbled on, which may be a credential:
    // say only that it failed.
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|_| {
        problem(
            "InvalidKubeconfig",
            "the Secret's key does not hold a readable kubeconfig",
        )
    })?;
    let current = kubeconfig.current_context.clone().unwrap_or_default();
    let context = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| {
            problem(
                "InvalidKubeconfig",
                format!("the kubeconfig has no current context ({current:?})"),
            )
        })?;
    let user = context.user.clone().unwrap_or_default();
    if let Some(auth) = kubeconfig
        .auth_infos
        .iter()
        .find(|a| a.name == user)
        .and_then(|a| a.auth_info.as_ref())
    {
        if auth.exec.is_some() {
            return Err(problem(
                "ExecNotAllowed",
                format!(
                    "user {user:?} authenticates with an exec plugin, which mimeo does not run; use a token or a client certificate"
                ),
            ));
        }
        if auth.auth_provider.is_some() {
            return Err(problem(
                "ExecNotAllowed",
                format!(
                    "user {user:?} uses an auth provider, which mimeo does not run; use a token or a client certificate"
                ),
            ));
        }
    }
    Ok(kubeconfig)
}

/// A client from a kubeconfig as a Secret holds it: UTF-8 text, parsed and checked by [`parse`].
pub async fn client_from_bytes(bytes: Vec<u8>) -> Result<kube::Client, KubeconfigProblem> {
    let text = String::from_utf8(bytes)
        .map_err(|_| problem("InvalidKubeconfig", "the kubeconfig is not UTF-8 text"))?;
    client(parse(&text)?).await
}

/// A client for the kubeconfig's current context.
pub async fn client(kubeconfig: Kubeconfig) -> Result<kube::Client, KubeconfigProblem> {
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| problem("InvalidKubeconfig", format!("the kubeconfig cannot be used: {e}")))?;
    kube::Client::try_from(config)
        .map_err(|e| problem("InvalidKubeconfig", format!("no client from the kubeconfig: {e}")))
}

/// Names the failure of a request to a remote cluster: rejected credentials, or not reached.
pub fn classify(error: &kube::Error) -> KubeconfigProblem {
    match error {
        kube::Error::Api(e) if e.code == 401 => problem(
            "Unauthorized",
            "the cluster rejected the credentials (401): check the token or certificate in the kubeconfig Secret",
        ),
        kube::Error::Api(e) if e.code == 403 => problem(
            "Unauthorized",
            format!("the credentials lack permission (403): {}", e.message),
        ),
        other => problem(
            "Unreachable",
            format!("the cluster cannot be reached: {}", with_causes(other)),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(user: &str) -> String {
        format!(
            "apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:1'}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
users: [{{name: u, user: {user}}}]
"
        )
    }

    #[test]
    fn kubeconfigs() {
        assert!(parse(&kubeconfig("{token: abc}")).is_ok());
        let exec = parse(&kubeconfig(
            "{exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}}",
        ))
        .unwrap_err();
        assert_eq!(exec.reason, "ExecNotAllowed");
        assert!(exec.message.contains("exec plugin"), "{}", exec.message);
        assert_eq!(
            parse("not: [a kubeconfig").unwrap_err().reason,
            "InvalidKubeconfig"
        );
        let no_context = kubeconfig("{token: abc}").replace("current-context: x", "current-context: y");
        assert!(
            parse(&no_context)
                .unwrap_err()
                .message
                .contains("no current context")
        );
    }
}
