//! Docker credential helpers (`credHelpers`, `credsStore` in `~/.docker/config.json`), as docker,
//! oras and kwctl run them: `docker-credential-<name> get` with the registry on stdin, a JSON
//! `{"Username", "Secret"}` on stdout. Docker Desktop, gcloud, ECR and ACR keep credentials
//! there, not in `auths`, so a push from a laptop needs the helper run. Only `mimeo plugin`'s
//! commands run one, as the user: the controller reads `auths` of pull secrets alone.

use super::credentials::Credentials;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

/// Why a helper gave no credentials.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HelperError {
    #[error(
        "the Docker config names the credential helper docker-credential-{helper} for {registry}, which is not on the PATH: install it, or give --username and --password"
    )]
    NotFound { helper: String, registry: String },
    #[error("the credential helper docker-credential-{helper} failed for {registry}: {message}")]
    Failed {
        helper: String,
        registry: String,
        message: String,
    },
}

#[derive(Deserialize, Default)]
struct HelperConfig {
    #[serde(default, rename = "credHelpers")]
    cred_helpers: BTreeMap<String, String>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
}

#[derive(Deserialize)]
struct HelperAnswer {
    #[serde(rename = "Username")]
    username: String,
    #[serde(rename = "Secret")]
    secret: String,
}

/// The helper a Docker config names for `registry`: its own in `credHelpers`, else `credsStore`.
pub fn helper_for(json: &[u8], registry: &str) -> Option<String> {
    let config: HelperConfig = serde_json::from_slice(json).ok()?;
    let wanted = super::credentials::normalize(registry);
    config
        .cred_helpers
        .iter()
        .find(|(key, _)| super::credentials::normalize(key) == wanted)
        .map(|(_, helper)| helper.clone())
        .or(config.creds_store)
        .filter(|helper| !helper.is_empty())
}

/// Runs `docker-credential-<helper> get` for `registry`. `Ok(None)`: the helper has nothing for
/// it (its "credentials not found in native keychain"), and the registry is tried anonymously.
/// Nothing of what the helper prints reaches a message but its error line.
pub fn run_helper(helper: &str, registry: &str) -> Result<Option<Credentials>, HelperError> {
    let program = format!("docker-credential-{helper}");
    let spawned = Command::new(&program)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(HelperError::NotFound {
                helper: helper.to_owned(),
                registry: registry.to_owned(),
            });
        }
        Err(e) => return Err(failed(helper, registry, e.to_string())),
    };
    if let Some(mut stdin) = child.stdin.take() {
        match stdin.write_all(registry.as_bytes()) {
            // A helper may answer (often: that it has nothing) without reading what it was asked.
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                return Err(failed(helper, registry, e.to_string()));
            }
            _ => {}
        }
    }
    let output = child
        .wait_with_output()
        .map_err(|e| failed(helper, registry, e.to_string()))?;
    if !output.status.success() {
        // Helpers say so on stdout, docker's own on stderr: the first line of either.
        let said = [&output.stdout, &output.stderr]
            .iter()
            .map(|b| {
                String::from_utf8_lossy(b)
                    .trim()
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_owned()
            })
            .find(|line| !line.is_empty())
            .unwrap_or_else(|| format!("exit {}", output.status));
        if said.to_ascii_lowercase().contains("credentials not found") {
            return Ok(None);
        }
        return Err(failed(helper, registry, said));
    }
    let answer: HelperAnswer = serde_json::from_slice(&output.stdout).map_err(|_| {
        failed(
            helper,
            registry,
            "its answer is not the JSON of a credential helper".into(),
        )
    })?;
    Ok(Some(Credentials::Basic {
        username: answer.username,
        password: answer.secret,
    }))
}

fn failed(helper: &str, registry: &str, message: String) -> HelperError {
    HelperError::Failed {
        helper: helper.to_owned(),
        registry: registry.to_owned(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registrys_own_helper_comes_before_the_store() {
        let json = br#"{"auths": {}, "credHelpers": {"https://gcr.io": "gcloud"}, "credsStore": "desktop"}"#;
        assert_eq!(helper_for(json, "gcr.io").as_deref(), Some("gcloud"));
        assert_eq!(helper_for(json, "ghcr.io").as_deref(), Some("desktop"));
        assert_eq!(helper_for(br#"{"auths": {}}"#, "ghcr.io"), None);
        assert_eq!(helper_for(br#"{"credsStore": ""}"#, "ghcr.io"), None);
    }

    #[test]
    fn a_missing_helper_is_named() {
        let error = run_helper("mimeo-test-no-such-helper", "ghcr.io").unwrap_err();
        assert_eq!(
            error.to_string(),
            "the Docker config names the credential helper docker-credential-mimeo-test-no-such-helper for ghcr.io, which is not on the PATH: install it, or give --username and --password"
        );
    }
}
