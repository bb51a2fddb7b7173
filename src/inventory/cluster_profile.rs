//! SIG-Multicluster `ClusterProfile`s: where a cluster is (server, CA) comes from the profile's
//! `status.accessProviders`; how to prove who mimeo is comes from the installation's provider
//! file alone (see `provider_file`).

use serde_json::Value;

/// What the profile says about reaching its cluster through one access provider: a kubeconfig
/// `cluster` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterInfo {
    pub server: String,
    /// Base64 of the PEM CA bundle, as in a kubeconfig.
    pub certificate_authority_data: Option<String>,
    pub tls_server_name: Option<String>,
    /// The whole entry, handed to an exec plugin that asks for cluster information.
    pub raw: Value,
}

/// Why a profile cannot be used.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProfileProblem {
    #[error("the ClusterProfile lists no access provider named {0:?} in status.accessProviders")]
    NoSuchProvider(String),
    #[error("access provider {0:?} gives no server")]
    NoServer(String),
    #[error(
        "access provider {0:?} names a CA file ({1}); mimeo reads only certificate-authority-data, \
         never a path on its own disk chosen by a ClusterProfile"
    )]
    CaFile(String, String),
    #[error(
        "access provider {0:?} turns off TLS verification (insecure-skip-tls-verify), which mimeo refuses"
    )]
    Insecure(String),
}

/// The named access provider of a profile: `status.accessProviders`, or the deprecated
/// `status.credentialProviders` when only that lists it.
pub fn access_provider(profile: &Value, provider: &str) -> Result<ClusterInfo, ProfileProblem> {
    let status = &profile["status"];
    let found = ["accessProviders", "credentialProviders"]
        .iter()
        .filter_map(|field| status[field].as_array())
        .flatten()
        .find(|p| p["name"] == provider)
        .ok_or_else(|| ProfileProblem::NoSuchProvider(provider.into()))?;
    let cluster = &found["cluster"];
    let server = cluster["server"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ProfileProblem::NoServer(provider.into()))?;
    if let Some(path) = cluster["certificate-authority"]
        .as_str()
        .filter(|p| !p.is_empty())
    {
        return Err(ProfileProblem::CaFile(provider.into(), path.into()));
    }
    if cluster["insecure-skip-tls-verify"] == Value::Bool(true) {
        return Err(ProfileProblem::Insecure(provider.into()));
    }
    let text = |key: &str| cluster[key].as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    Ok(ClusterInfo {
        server: server.into(),
        certificate_authority_data: text("certificate-authority-data"),
        tls_server_name: text("tls-server-name"),
        raw: cluster.clone(),
    })
}

/// The value of a named extension of the cluster entry (`extensions[].extension`).
pub fn extension<'a>(info: &'a ClusterInfo, name: &str) -> Option<&'a Value> {
    info.raw["extensions"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| &e["extension"])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn profile(providers: Value) -> Value {
        json!({"status": {"accessProviders": providers}})
    }

    #[test]
    fn the_named_provider_gives_server_and_ca() {
        let p = profile(json!([
            {"name": "other", "cluster": {"server": "https://other"}},
            {"name": "token", "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority-data": "Q0E=",
             "extensions": [{"name": "client.authentication.k8s.io/exec", "extension": {"audience": "x"}}]}},
        ]));
        let info = access_provider(&p, "token").unwrap();
        assert_eq!(info.server, "https://127.0.0.1:6443");
        assert_eq!(info.certificate_authority_data.as_deref(), Some("Q0E="));
        assert_eq!(
            extension(&info, "client.authentication.k8s.io/exec"),
            Some(&json!({"audience": "x"}))
        );
    }

    #[test]
    fn the_deprecated_field_is_read_too() {
        let p = json!({"status": {"credentialProviders": [{"name": "token", "cluster": {"server": "https://a"}}]}});
        assert_eq!(access_provider(&p, "token").unwrap().server, "https://a");
    }

    #[test]
    fn what_a_profile_must_not_make_mimeo_do_is_refused() {
        let missing = access_provider(&profile(json!([])), "token").unwrap_err();
        assert_eq!(missing, ProfileProblem::NoSuchProvider("token".into()));
        let file = profile(
            json!([{"name": "t", "cluster": {"server": "https://a", "certificate-authority": "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"}}]),
        );
        assert!(matches!(
            access_provider(&file, "t"),
            Err(ProfileProblem::CaFile(..))
        ));
        let insecure = profile(
            json!([{"name": "t", "cluster": {"server": "https://a", "insecure-skip-tls-verify": true}}]),
        );
        assert!(matches!(
            access_provider(&insecure, "t"),
            Err(ProfileProblem::Insecure(..))
        ));
        let no_server = profile(json!([{"name": "t", "cluster": {}}]));
        assert!(matches!(
            access_provider(&no_server, "t"),
            Err(ProfileProblem::NoServer(..))
        ));
    }
}
