//! Registry credentials, and reading them from a Docker config (`~/.docker/config.json`, or a
//! `kubernetes.io/dockerconfigjson` Secret's `.dockerconfigjson`).

use super::error::OciError;
use base64::Engine as _;
use serde::Deserialize;
use std::collections::BTreeMap;

/// How to authenticate to a registry.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum Credentials {
    #[default]
    Anonymous,
    Basic {
        username: String,
        password: String,
    },
}

/// Never shows the password: credentials end up in logs through `{:?}` sooner or later.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Anonymous => f.write_str("Anonymous"),
            Credentials::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
        }
    }
}

impl Credentials {
    /// The secrets a message must never contain: the password and the basic-auth header value.
    pub(super) fn secrets(&self) -> Vec<String> {
        match self {
            Credentials::Anonymous => vec![],
            Credentials::Basic { username, password } if !password.is_empty() => vec![
                password.clone(),
                base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}")),
            ],
            Credentials::Basic { .. } => vec![],
        }
    }
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, DockerAuth>,
}

#[derive(Deserialize, Default)]
struct DockerAuth {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

/// From a docker config / `kubernetes.io/dockerconfigjson` payload
/// (`{"auths": {host: {"auth": b64(user:pass)} | {"username", "password"}}}`); `None` when it has
/// no entry for the registry, or an entry without credentials (a credential helper's: only
/// `mimeo plugin`'s commands run those, `credential_helper`).
pub fn credentials_from_docker_config(json: &[u8], registry: &str) -> Result<Option<Credentials>, OciError> {
    // Only where it went wrong: serde_json's messages can quote a value, which may be a password.
    let config: DockerConfig = serde_json::from_slice(json).map_err(|e| {
        OciError::InvalidCredentials(format!(
            "not a Docker config (line {}, column {})",
            e.line(),
            e.column()
        ))
    })?;
    let wanted = normalize(registry);
    let entry = config.auths.get(registry).or_else(|| {
        config
            .auths
            .iter()
            .find(|(key, _)| normalize(key) == wanted)
            .map(|(_, v)| v)
    });
    let Some(entry) = entry else {
        return Ok(None);
    };
    if let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(|| {
                OciError::InvalidCredentials(format!(
                    "the auth of {registry} in the Docker config is not base64"
                ))
            })?;
        let (username, password) = decoded.split_once(':').ok_or_else(|| {
            OciError::InvalidCredentials(format!(
                "the auth of {registry} in the Docker config is not username:password"
            ))
        })?;
        return Ok(Some(Credentials::Basic {
            username: username.to_owned(),
            password: password.to_owned(),
        }));
    }
    match (&entry.username, &entry.password) {
        (Some(username), Some(password)) => Ok(Some(Credentials::Basic {
            username: username.clone(),
            password: password.clone(),
        })),
        _ => Ok(None),
    }
}

/// A Docker config key (`https://index.docker.io/v1/`, `http://host:5000`, `host:5000`) or a
/// registry, reduced to the `host[:port]` both name.
pub(super) fn normalize(key: &str) -> String {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_owned(),
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(text: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    #[test]
    fn reads_auth_and_username_password_entries() {
        let json = format!(
            r#"{{"auths": {{
                "127.0.0.1:5000": {{"auth": "{}"}},
                "https://ghcr.io": {{"username": "bot", "password": "p:w"}},
                "https://index.docker.io/v1/": {{"auth": "{}"}},
                "helper.example": {{}}
            }}, "credsStore": "desktop"}}"#,
            b64("alice:s3cr:et"),
            b64("hub:pw")
        );
        let get = |r| credentials_from_docker_config(json.as_bytes(), r).unwrap();
        assert_eq!(
            get("127.0.0.1:5000"),
            Some(Credentials::Basic {
                username: "alice".into(),
                password: "s3cr:et".into()
            })
        );
        assert_eq!(
            get("ghcr.io"),
            Some(Credentials::Basic {
                username: "bot".into(),
                password: "p:w".into()
            })
        );
        assert_eq!(
            get("docker.io"),
            Some(Credentials::Basic {
                username: "hub".into(),
                password: "pw".into()
            })
        );
        assert_eq!(get("127.0.0.1:5001"), None, "another port is another registry");
        assert_eq!(get("helper.example"), None, "credential helpers are not run");
        assert_eq!(get("quay.io"), None);
    }

    #[test]
    fn errors_do_not_quote_secrets() {
        let bad_base64 = br#"{"auths": {"r.example": {"auth": "hunter2!!"}}}"#;
        let err = credentials_from_docker_config(bad_base64, "r.example").unwrap_err();
        assert!(err.to_string().contains("not base64"), "{err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let no_colon = format!(
            r#"{{"auths": {{"r.example": {{"auth": "{}"}}}}}}"#,
            b64("hunter2")
        );
        let err = credentials_from_docker_config(no_colon.as_bytes(), "r.example").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
        for broken in [
            &br#"{"auths": {"r.example": {"auth": "hunter2""#[..],
            br#"{"auths": {"r.example": {"username": "a", "password": 1234567}}}"#,
        ] {
            let err = credentials_from_docker_config(broken, "r.example").unwrap_err();
            let shown = err.to_string();
            assert!(
                !shown.contains("hunter2") && !shown.contains("1234567"),
                "{shown}"
            );
            assert_eq!(err.reason(), "InvalidCredentials");
        }
    }

    #[test]
    fn debug_hides_the_password() {
        let creds = Credentials::Basic {
            username: "alice".into(),
            password: "hunter2".into(),
        };
        let shown = format!("{creds:?}");
        assert!(shown.contains("alice") && !shown.contains("hunter2"), "{shown}");
        assert!(creds.secrets().contains(&"hunter2".to_owned()));
        assert!(creds.secrets().contains(&b64("alice:hunter2")));
    }
}
