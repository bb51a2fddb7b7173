//! Other clusters: turning a `RemoteCluster`'s kubeconfig into a client, and saying clearly why
//! when that cannot be done; and the client of the cluster mimeo runs in. Every client counts its
//! requests (`metrics::requests`), bounds those in flight (`in_flight`) and sends a rule's writes
//! only while this replica holds the rule's shard (`fence`). Nothing here reads the Secret or
//! talks to a cluster on its own.
//!
//! A kubeconfig Secret may be written by someone with far fewer rights than mimeo (a tenant, or
//! Cluster API next to its Cluster object), yet the client made from it runs inside mimeo's pod.
//! So only what the kubeconfig carries inline is used: nothing that names a file of mimeo's
//! (its ServiceAccount token, its certificates), runs a program, goes through a proxy, or sends
//! credentials where they could be read on the way (plain HTTP, unverified TLS).

pub mod fence;
mod in_flight;
pub mod remote_rbac;
pub mod user_config;

use crate::error_text::with_causes;
use crate::metrics::CountRequests;
use in_flight::{BoundInFlight, REQUESTS_IN_FLIGHT};
use kube::config::{AuthInfo, Cluster, KubeConfigOptions, Kubeconfig};

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

fn invalid(message: impl Into<String>) -> KubeconfigProblem {
    problem("InvalidKubeconfig", message)
}

/// Parses a kubeconfig (its current context) and refuses what a controller must not use: exec
/// plugins and auth providers, which run programs or reach out from inside mimeo's pod, and every
/// field of the current context's cluster and user that [`check_cluster`] and [`check_user`]
/// refuse.
pub fn parse(text: &str) -> Result<Kubeconfig, KubeconfigProblem> {
    // The parser's own message may quote the text it stumbled on, which may be a credential:
    // say only that it failed.
    let kubeconfig = Kubeconfig::from_yaml(text)
        .map_err(|_| invalid("the Secret's key does not hold a readable kubeconfig"))?;
    let current = kubeconfig.current_context.clone().unwrap_or_default();
    let context = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| invalid(format!("the kubeconfig has no current context ({current:?})")))?;
    let cluster_name = &context.cluster;
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == *cluster_name)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| {
            invalid(format!(
                "the current context names cluster {cluster_name:?}, which the kubeconfig does not define"
            ))
        })?;
    check_cluster(cluster_name, cluster)?;
    let user = context.user.clone().unwrap_or_default();
    if let Some(auth) = kubeconfig
        .auth_infos
        .iter()
        .find(|a| a.name == user)
        .and_then(|a| a.auth_info.as_ref())
    {
        check_user(&user, auth)?;
    }
    Ok(kubeconfig)
}

/// Refuses a cluster entry that would make mimeo read its own files or send credentials where
/// someone on the way could read them.
fn check_cluster(name: &str, cluster: &Cluster) -> Result<(), KubeconfigProblem> {
    let refused = |field: &str, why: &str| {
        invalid(format!(
            "cluster {name:?} sets {field}, which mimeo refuses: {why}"
        ))
    };
    let server = cluster.server.as_deref().unwrap_or_default();
    match server.split_once("://") {
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("https") => {}
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("http") => {
            return Err(refused(
                "an http:// server",
                "credentials would travel in clear text; use the cluster's https:// URL",
            ));
        }
        _ => {
            return Err(invalid(format!(
                "cluster {name:?} has no https:// server URL ({server:?})"
            )));
        }
    }
    if cluster.insecure_skip_tls_verify == Some(true) {
        return Err(refused(
            "insecure-skip-tls-verify",
            "credentials would go to a server whose certificate nobody checked; put the cluster's \
             CA in certificate-authority-data instead",
        ));
    }
    if cluster.certificate_authority.is_some() {
        return Err(refused(
            "certificate-authority (a file path)",
            "mimeo does not read files named by a kubeconfig; inline the CA as \
             certificate-authority-data",
        ));
    }
    if cluster.proxy_url.is_some() {
        return Err(refused(
            "proxy-url",
            "mimeo's requests to other clusters do not go through proxies a kubeconfig names",
        ));
    }
    Ok(())
}

/// Refuses a user entry that would run a program or make mimeo send or read its own files (its
/// ServiceAccount token is one `tokenFile` away).
fn check_user(name: &str, auth: &AuthInfo) -> Result<(), KubeconfigProblem> {
    if auth.exec.is_some() {
        return Err(problem(
            "ExecNotAllowed",
            format!(
                "user {name:?} authenticates with an exec plugin, which mimeo does not run; use a token or a client certificate"
            ),
        ));
    }
    if auth.auth_provider.is_some() {
        return Err(problem(
            "ExecNotAllowed",
            format!(
                "user {name:?} uses an auth provider, which mimeo does not run; use a token or a client certificate"
            ),
        ));
    }
    for (set, field, inline) in [
        (auth.token_file.is_some(), "tokenFile", "token"),
        (
            auth.client_certificate.is_some(),
            "client-certificate",
            "client-certificate-data",
        ),
        (auth.client_key.is_some(), "client-key", "client-key-data"),
    ] {
        if set {
            return Err(invalid(format!(
                "user {name:?} sets {field} (a file path), which mimeo refuses: it would read a \
                 file of mimeo's own and send it to the cluster; inline it as {inline}"
            )));
        }
    }
    Ok(())
}

/// A client from a kubeconfig as a Secret holds it: UTF-8 text, parsed and checked by [`parse`].
pub async fn client_from_bytes(
    bytes: Vec<u8>,
    requests: &CountRequests,
) -> Result<kube::Client, KubeconfigProblem> {
    let text = String::from_utf8(bytes).map_err(|_| invalid("the kubeconfig is not UTF-8 text"))?;
    client(parse(&text)?, requests).await
}

/// A client for the kubeconfig's current context, its requests counted by `requests`.
pub async fn client(
    kubeconfig: Kubeconfig,
    requests: &CountRequests,
) -> Result<kube::Client, KubeconfigProblem> {
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| {
            invalid(format!(
                "the kubeconfig cannot be used: {}",
                explain_client_error(&e)
            ))
        })?;
    counted_client(config, requests).map_err(|e| {
        invalid(format!(
            "no client from the kubeconfig: {}",
            explain_client_error(&e)
        ))
    })
}

/// The client of the cluster mimeo runs in (`config`: see [`user_config`]), its requests
/// counted by `requests`.
pub fn local_client(config: kube::Config, requests: &CountRequests) -> Result<kube::Client, kube::Error> {
    counted_client(config, requests)
}

/// kube's own client stack for `config`, with the layer that counts its requests outside it,
/// the write fence outside that (a refused write is no request), and outside both the bound on
/// its requests in flight (`in_flight`), so that a request's wait for its turn is not counted as
/// the apiserver's time and the fence is checked once the wait is over.
fn counted_client(config: kube::Config, requests: &CountRequests) -> Result<kube::Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(requests)
        .with_layer(&fence::CheckFence)
        .with_layer(&BoundInFlight::new(REQUESTS_IN_FLIGHT))
        .build())
}

/// What went wrong making a client from a kubeconfig, with what to do where the TLS library's
/// words alone would not say: the same for `mimeo run`'s own kubeconfig and a `RemoteCluster`'s.
pub fn explain_client_error(error: &(dyn std::error::Error + 'static)) -> String {
    let text = with_causes(error);
    if text.contains("UnsupportedCertVersion") {
        return "the kubeconfig's client certificate is X.509 version 1, which mimeo's TLS library \
                (rustls) does not accept, though kubectl does: reissue it as version 3 (with \
                openssl, give `x509 -req` an -extfile with extendedKeyUsage=clientAuth)"
            .into();
    }
    text
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
        kubeconfig_with("{server: 'https://127.0.0.1:1'}", user)
    }

    fn kubeconfig_with(cluster: &str, user: &str) -> String {
        format!(
            "apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {cluster}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
users: [{{name: u, user: {user}}}]
"
        )
    }

    #[test]
    fn only_inline_credentials_over_verified_tls_are_used() {
        let https = "{server: 'https://10.0.0.1:6443', certificate-authority-data: 'LS0t'}";
        let accepted = [
            (https, "{token: abc}"),
            (
                https,
                "{client-certificate-data: 'LS0t', client-key-data: 'LS0t'}",
            ),
            (https, "{username: a, password: b}"),
            ("{server: 'HTTPS://example.com'}", "{}"),
        ];
        for (cluster, user) in accepted {
            assert!(parse(&kubeconfig_with(cluster, user)).is_ok(), "{cluster} {user}");
        }
        // (cluster, user, what the message must name)
        let refused = [
            (
                https,
                "{tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}",
                "tokenFile",
            ),
            (https, "{token: a, tokenFile: /t}", "tokenFile"),
            (
                https,
                "{client-certificate: /etc/c.crt, client-key-data: 'LS0t'}",
                "client-certificate",
            ),
            (
                https,
                "{client-certificate-data: 'LS0t', client-key: /etc/k.key}",
                "client-key",
            ),
            (
                "{server: 'https://a', certificate-authority: /etc/ca.crt}",
                "{token: a}",
                "certificate-authority",
            ),
            (
                "{server: 'https://a', insecure-skip-tls-verify: true}",
                "{token: a}",
                "insecure-skip-tls-verify",
            ),
            (
                "{server: 'https://a', proxy-url: 'http://127.0.0.1:3128'}",
                "{token: a}",
                "proxy-url",
            ),
            ("{server: 'http://a:8080'}", "{token: a}", "http://"),
            ("{server: 'HTTP://a:8080'}", "{token: a}", "http://"),
            ("{server: 'unix:///run/k.sock'}", "{token: a}", "https://"),
            ("{}", "{token: a}", "https://"),
        ];
        for (cluster, user, field) in refused {
            let problem = parse(&kubeconfig_with(cluster, user)).unwrap_err();
            assert_eq!(problem.reason, "InvalidKubeconfig", "{cluster} {user}");
            assert!(problem.message.contains(field), "{field}: {}", problem.message);
        }
        let unknown = kubeconfig("{token: a}").replace("cluster: c, user", "cluster: d, user");
        assert!(parse(&unknown).unwrap_err().message.contains("does not define"));
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
