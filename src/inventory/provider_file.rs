//! The installation's credentials providers for `ClusterProfile`s, in the KEP-5339 provider file
//! format that Argo CD and MultiKueue read (`{"providers": [{"name", "execConfig"}]}`), and
//! running one: the exec plugin the file names, under a timeout, with its output read as a
//! client-go `ExecCredential`. Only this file, which the administrator mounts, names a command;
//! a `ClusterProfile` may add arguments or environment only where the file's policy says so.

use super::cluster_profile::{ClusterInfo, extension};
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// The extension through which a profile hands a plugin its per-cluster configuration.
const EXEC_EXTENSION: &str = "client.authentication.k8s.io/exec";
/// KEP-5339's extensions for per-cluster arguments and environment variables.
const ARGS_EXTENSION: &str = "clusterprofiles.multicluster.x-k8s.io/exec/additional-args";
const ENVS_EXTENSION: &str = "clusterprofiles.multicluster.x-k8s.io/exec/additional-envs";
/// The most a plugin may print; a credential is a few KiB.
const MAX_OUTPUT: u64 = 1 << 20;

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ProviderFile {
    pub providers: Vec<Provider>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Provider {
    pub name: String,
    pub exec_config: ExecConfig,
    #[serde(default, rename = "profileSourcedCLIArgsPolicy")]
    pub profile_sourced_cli_args_policy: Option<String>,
    #[serde(default)]
    pub profile_sourced_env_vars_policy: Option<String>,
}

/// client-go's `ExecConfig`, the fields mimeo uses.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExecConfig {
    pub api_version: String,
    pub command: String,
    #[serde(default)]
    pub args: Option<Vec<String>>,
    #[serde(default)]
    pub env: Option<Vec<EnvVar>>,
    #[serde(default)]
    pub provide_cluster_info: bool,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

/// What a plugin proved: a token or a client certificate, and until when.
#[derive(Clone, PartialEq)]
pub struct Credential {
    pub token: Option<String>,
    pub client_certificate_data: Option<String>,
    pub client_key_data: Option<String>,
    pub expires: Option<Timestamp>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .field("client_certificate", &self.client_certificate_data.is_some())
            .field("expires", &self.expires)
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("reading the provider file {0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("the provider file {0} is not a KEP-5339 provider file: {1}")]
    Parse(PathBuf, serde_json::Error),
    #[error(
        "no provider file is configured (--cluster-profile-providers), so ClusterProfiles cannot be reached"
    )]
    NoFile,
    #[error("the provider file names no provider {0:?}")]
    NoSuchProvider(String),
    #[error("provider {provider:?}: unsupported {field} {value:?}")]
    Policy {
        provider: String,
        field: &'static str,
        value: String,
    },
    #[error("provider {provider:?}: the profile's {extension} extension is not a {wanted}")]
    Extension {
        provider: String,
        extension: &'static str,
        wanted: &'static str,
    },
    #[error("provider {0:?}: starting {1}: {2}")]
    Start(String, String, std::io::Error),
    #[error("provider {0:?}: the plugin did not finish within {1:?} and was stopped")]
    Timeout(String, Duration),
    #[error("provider {provider:?}: the plugin failed ({status}){said}")]
    Failed {
        provider: String,
        status: String,
        said: String,
    },
    #[error("provider {0:?}: the plugin's output is not an ExecCredential of {1}: {2}")]
    Output(String, String, String),
}

impl ProviderFile {
    pub fn read(path: &Path) -> Result<ProviderFile, ProviderError> {
        let bytes = std::fs::read(path).map_err(|e| ProviderError::Read(path.into(), e))?;
        serde_json::from_slice(&bytes).map_err(|e| ProviderError::Parse(path.into(), e))
    }

    pub fn provider(&self, name: &str) -> Result<&Provider, ProviderError> {
        self.providers
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| ProviderError::NoSuchProvider(name.into()))
    }
}

/// The command line and environment a plugin runs with, for one cluster: the file's, plus what
/// the profile's extensions add where the file's policies allow it.
#[derive(Clone, Debug, PartialEq)]
pub struct Invocation {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// `KUBERNETES_EXEC_INFO`, when the plugin asks for the cluster.
    pub exec_info: Option<Value>,
}

pub fn invocation(provider: &Provider, cluster: &ClusterInfo) -> Result<Invocation, ProviderError> {
    let exec = &provider.exec_config;
    let mut args = exec.args.clone().unwrap_or_default();
    let mut env: BTreeMap<String, String> = exec
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone()))
        .collect();
    let bad_extension = |extension, wanted| ProviderError::Extension {
        provider: provider.name.clone(),
        extension,
        wanted,
    };
    match provider.profile_sourced_cli_args_policy.as_deref() {
        None | Some("") | Some("Ignore") => {}
        Some("Append") => {
            if let Some(extra) = extension(cluster, ARGS_EXTENSION) {
                let extra: Vec<String> = serde_json::from_value(extra.clone())
                    .map_err(|_| bad_extension(ARGS_EXTENSION, "list of strings"))?;
                args.extend(extra);
            }
        }
        Some(other) => {
            return Err(ProviderError::Policy {
                provider: provider.name.clone(),
                field: "profileSourcedCLIArgsPolicy",
                value: other.into(),
            });
        }
    }
    let profile_env = || -> Result<BTreeMap<String, String>, ProviderError> {
        extension(cluster, ENVS_EXTENSION)
            .map(|extra| {
                serde_json::from_value(extra.clone())
                    .map_err(|_| bad_extension(ENVS_EXTENSION, "map of strings"))
            })
            .unwrap_or_else(|| Ok(BTreeMap::new()))
    };
    match provider.profile_sourced_env_vars_policy.as_deref() {
        None | Some("") | Some("Ignore") => {}
        Some("AppendIfNotExists") => {
            for (name, value) in profile_env()? {
                env.entry(name).or_insert(value);
            }
        }
        Some("Replace") => env.extend(profile_env()?),
        Some(other) => {
            return Err(ProviderError::Policy {
                provider: provider.name.clone(),
                field: "profileSourcedEnvVarsPolicy",
                value: other.into(),
            });
        }
    }
    let exec_info = exec.provide_cluster_info.then(|| {
        let mut cluster_json = json!({"server": cluster.server});
        if let Some(ca) = &cluster.certificate_authority_data {
            cluster_json["certificate-authority-data"] = json!(ca);
        }
        if let Some(name) = &cluster.tls_server_name {
            cluster_json["tls-server-name"] = json!(name);
        }
        if let Some(config) = extension(cluster, EXEC_EXTENSION) {
            cluster_json["config"] = config.clone();
        }
        json!({
            "apiVersion": exec.api_version,
            "kind": "ExecCredential",
            "spec": {"interactive": false, "cluster": cluster_json},
        })
    });
    Ok(Invocation {
        command: exec.command.clone(),
        args,
        env,
        exec_info,
    })
}

/// Runs a plugin once: no stdin, at most [`MAX_OUTPUT`] read, stopped at `timeout`. A relative
/// command with a `/` is found beside the provider file, as kubectl finds one beside its
/// kubeconfig; a bare name on the `PATH`.
pub async fn run(
    provider: &Provider,
    invocation: &Invocation,
    file_dir: &Path,
    timeout: Duration,
) -> Result<Credential, ProviderError> {
    let program = if invocation.command.contains('/') && Path::new(&invocation.command).is_relative() {
        file_dir.join(&invocation.command)
    } else {
        PathBuf::from(&invocation.command)
    };
    let mut command = tokio::process::Command::new(&program);
    command
        .args(&invocation.args)
        .envs(&invocation.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(info) = &invocation.exec_info {
        command.env("KUBERNETES_EXEC_INFO", info.to_string());
    }
    let name = provider.name.clone();
    let mut child = command
        .spawn()
        .map_err(|e| ProviderError::Start(name.clone(), program.display().to_string(), e))?;
    let mut stdout = child.stdout.take().expect("piped").take(MAX_OUTPUT);
    let mut stderr = child.stderr.take().expect("piped").take(MAX_OUTPUT);
    let finished = async {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let (read_out, read_err, status) = tokio::join!(
            stdout.read_to_end(&mut out),
            stderr.read_to_end(&mut err),
            child.wait()
        );
        (read_out.and(read_err).and(status), out, err)
    };
    let (status, out, err) = tokio::time::timeout(timeout, finished)
        .await
        .map_err(|_| ProviderError::Timeout(name.clone(), timeout))?;
    let status = status.map_err(|e| ProviderError::Start(name.clone(), program.display().to_string(), e))?;
    if !status.success() {
        return Err(ProviderError::Failed {
            provider: name,
            status: status.to_string(),
            said: last_line(&err).map(|l| format!(": {l}")).unwrap_or_default(),
        });
    }
    credential(&name, &provider.exec_config.api_version, &out)
}

/// The last non-empty line a plugin wrote to stderr, at most 200 characters: its error, as the
/// condition shows it.
fn last_line(stderr: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    let line = text.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
    Some(line.chars().take(200).collect())
}

/// Reads a plugin's output as an `ExecCredential` of the version the file asked for.
pub fn credential(provider: &str, api_version: &str, output: &[u8]) -> Result<Credential, ProviderError> {
    let bad = |why: String| ProviderError::Output(provider.into(), api_version.into(), why);
    let value: Value = serde_json::from_slice(output).map_err(|e| bad(format!("not JSON ({e})")))?;
    if value["kind"] != "ExecCredential" || value["apiVersion"] != api_version {
        return Err(bad(format!(
            "it is {} {}",
            value["apiVersion"].as_str().unwrap_or("?"),
            value["kind"].as_str().unwrap_or("?")
        )));
    }
    let status = &value["status"];
    let text = |key: &str| status[key].as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    let expires = match status["expirationTimestamp"].as_str() {
        None => None,
        Some(t) => Some(
            t.parse::<Timestamp>()
                .map_err(|e| bad(format!("expirationTimestamp {t:?}: {e}")))?,
        ),
    };
    let credential = Credential {
        token: text("token"),
        client_certificate_data: text("clientCertificateData"),
        client_key_data: text("clientKeyData"),
        expires,
    };
    let has_cert = credential.client_certificate_data.is_some() && credential.client_key_data.is_some();
    if credential.token.is_none() && !has_cert {
        return Err(bad(
            "it holds neither a token nor a client certificate and key".into()
        ));
    }
    Ok(credential)
}

/// A kubeconfig for the cluster with a plugin's credential, as JSON (which every kubeconfig
/// reader takes for YAML).
pub fn kubeconfig(info: &ClusterInfo, credential: &Credential) -> String {
    let mut cluster = serde_json::json!({"server": info.server});
    if let Some(ca) = &info.certificate_authority_data {
        cluster["certificate-authority-data"] = ca.clone().into();
    }
    if let Some(name) = &info.tls_server_name {
        cluster["tls-server-name"] = name.clone().into();
    }
    let mut user = serde_json::json!({});
    if let Some(token) = &credential.token {
        user["token"] = token.clone().into();
    }
    if let (Some(cert), Some(key)) = (&credential.client_certificate_data, &credential.client_key_data) {
        user["client-certificate-data"] = cert.clone().into();
        user["client-key-data"] = key.clone().into();
    }
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [{"name": "mimeo", "user": user}],
        "contexts": [{"name": "cluster", "context": {"cluster": "cluster", "user": "mimeo"}}],
        "current-context": "cluster",
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::cluster_profile::access_provider;

    fn provider(policy_args: Option<&str>, policy_env: Option<&str>) -> Provider {
        serde_json::from_value(json!({
            "name": "token",
            "execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": "./plugin",
                           "args": ["--a"], "env": [{"name": "FROM_FILE", "value": "file"}], "provideClusterInfo": true},
            "profileSourcedCLIArgsPolicy": policy_args,
            "profileSourcedEnvVarsPolicy": policy_env,
        }))
        .unwrap()
    }

    fn cluster() -> ClusterInfo {
        access_provider(
            &json!({"status": {"accessProviders": [{"name": "token", "cluster": {
            "server": "https://127.0.0.1:1", "certificate-authority-data": "Q0E=",
            "extensions": [
                {"name": EXEC_EXTENSION, "extension": {"audience": "a"}},
                {"name": ARGS_EXTENSION, "extension": ["--cluster", "c1"]},
                {"name": ENVS_EXTENSION, "extension": {"FROM_FILE": "profile", "EXTRA": "x"}},
            ]}}]}}),
            "token",
        )
        .unwrap()
    }

    #[test]
    fn the_provider_file_format_of_kep_5339_reads() {
        let file: ProviderFile = serde_json::from_str(
            r#"{"providers": [{"name": "eks", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                "args": null, "command": "./eks-aws-auth-plugin.sh", "env": null, "provideClusterInfo": true}}]}"#,
        )
        .unwrap();
        assert_eq!(
            file.provider("eks").unwrap().exec_config.command,
            "./eks-aws-auth-plugin.sh"
        );
        assert!(matches!(
            file.provider("gke"),
            Err(ProviderError::NoSuchProvider(_))
        ));
    }

    #[test]
    fn a_profile_adds_nothing_unless_the_file_allows_it() {
        let plain = invocation(&provider(None, None), &cluster()).unwrap();
        assert_eq!(plain.command, "./plugin");
        assert_eq!(plain.args, vec!["--a"]);
        assert_eq!(plain.env, [("FROM_FILE".to_owned(), "file".to_owned())].into());
        let info = plain.exec_info.unwrap();
        assert_eq!(info["spec"]["cluster"]["server"], "https://127.0.0.1:1");
        assert_eq!(info["spec"]["cluster"]["config"], json!({"audience": "a"}));
        let open = invocation(&provider(Some("Append"), Some("AppendIfNotExists")), &cluster()).unwrap();
        assert_eq!(open.args, vec!["--a", "--cluster", "c1"]);
        assert_eq!(open.env["FROM_FILE"], "file");
        assert_eq!(open.env["EXTRA"], "x");
        let replace = invocation(&provider(None, Some("Replace")), &cluster()).unwrap();
        assert_eq!(replace.env["FROM_FILE"], "profile");
        assert!(matches!(
            invocation(&provider(Some("Sometimes"), None), &cluster()),
            Err(ProviderError::Policy { .. })
        ));
    }

    #[test]
    fn only_an_exec_credential_of_the_asked_version_with_a_secret_is_a_credential() {
        let v1 = "client.authentication.k8s.io/v1";
        let ok = br#"{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                      "status": {"token": "t0k3n", "expirationTimestamp": "2030-01-01T00:00:00Z"}}"#;
        let c = credential("p", v1, ok).unwrap();
        assert_eq!(c.token.as_deref(), Some("t0k3n"));
        assert!(c.expires.is_some());
        assert!(!format!("{c:?}").contains("t0k3n"));
        let empty =
            br#"{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {}}"#;
        assert!(credential("p", v1, empty).is_err());
        let other = br#"{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", "status": {"token": "t"}}"#;
        assert!(credential("p", v1, other).is_err());
        assert!(credential("p", v1, b"token").is_err());
    }

    #[tokio::test]
    async fn a_plugin_runs_under_its_timeout_and_its_failure_is_told() {
        let dir = tempfile::tempdir().unwrap();
        let script = |name: &str, body: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            let mut perms = std::fs::metadata(&path).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
            std::fs::set_permissions(&path, perms).unwrap();
        };
        script(
            "good",
            r#"echo "{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"$FROM_FILE\"}}""#,
        );
        script("slow", "sleep 30");
        script("bad", "echo 'no such cluster' >&2; exit 3");
        let run_one = |command: &str| {
            let mut p = provider(None, None);
            p.exec_config.command = format!("./{command}");
            let inv = invocation(&p, &cluster()).unwrap();
            let dir = dir.path().to_owned();
            async move { run(&p, &inv, &dir, Duration::from_millis(500)).await }
        };
        assert_eq!(run_one("good").await.unwrap().token.as_deref(), Some("file"));
        let started = std::time::Instant::now();
        assert!(matches!(run_one("slow").await, Err(ProviderError::Timeout(..))));
        assert!(started.elapsed() < Duration::from_secs(5));
        let failed = run_one("bad").await.unwrap_err().to_string();
        assert!(
            failed.contains("no such cluster") && failed.contains("3"),
            "{failed}"
        );
        assert!(matches!(run_one("missing").await, Err(ProviderError::Start(..))));
    }
}
