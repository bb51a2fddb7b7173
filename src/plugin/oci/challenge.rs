//! A registry's `WWW-Authenticate` challenge and its token service's answer, as the distribution
//! spec's token authentication has them: pure parsing, so what mimeo follows is decided by code
//! that is read and tested here, not inside an HTTP client.

use serde::Deserialize;
use std::time::Duration;

/// What a registry asks of a client it answered 401.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Challenge {
    /// Get a token from `realm` (a URL the registry chose: check it before asking it anything).
    Bearer { realm: String, service: Option<String> },
    /// Send the username and password with every request.
    Basic,
}

/// The challenge to answer: a Bearer one if offered (registries offering both mean the token
/// flow), else Basic; `None` for a header without either, or one that does not parse.
pub(super) fn parse_challenge(header: &str) -> Option<Challenge> {
    let challenges = http_auth::parse_challenges(header).ok()?;
    let bearer = challenges.iter().find_map(|challenge| {
        if !challenge.scheme.eq_ignore_ascii_case("Bearer") {
            return None;
        }
        let param = |name: &str| {
            challenge
                .params
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .map(|(_, value)| value.to_unescaped())
        };
        Some(Challenge::Bearer {
            realm: param("realm")?,
            service: param("service"),
        })
    });
    bearer.or_else(|| {
        challenges
            .iter()
            .any(|c| c.scheme.eq_ignore_ascii_case("Basic"))
            .then_some(Challenge::Basic)
    })
}

/// The scope of a token for a repository: pull, or pull and push.
pub(super) fn scope(repository: &str, push: bool) -> String {
    format!(
        "repository:{repository}:{}",
        if push { "pull,push" } else { "pull" }
    )
}

/// A token service's answer: `token` (Docker's) or `access_token` (OAuth's), and how long it lasts.
#[derive(Deserialize)]
struct TokenAnswer {
    token: Option<String>,
    access_token: Option<String>,
    expires_in: Option<u64>,
}

/// How long a token without `expires_in` lasts, as the token spec says.
const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(60);

/// The token in a token service's answer and how long to use it: a tenth less than it lasts, so
/// a token is not sent just as it expires. `None` when there is none: the answer's text is never
/// shown, only that it held no token.
pub(super) fn parse_token(body: &[u8]) -> Option<(String, Duration)> {
    let answer: TokenAnswer = serde_json::from_slice(body).ok()?;
    let token = answer
        .token
        .filter(|t| !t.is_empty())
        .or(answer.access_token.filter(|t| !t.is_empty()))?;
    let lifetime = answer
        .expires_in
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_TOKEN_LIFETIME);
    Some((token, lifetime.mul_f32(0.9)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges() {
        let bearer = |realm: &str, service: Option<&str>| {
            Some(Challenge::Bearer {
                realm: realm.into(),
                service: service.map(str::to_owned),
            })
        };
        for (header, expected) in [
            (
                r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:p:pull""#,
                bearer("https://auth.example/token", Some("registry.example")),
            ),
            (
                r#"bearer Realm="https://auth.example/t\"x""#,
                bearer("https://auth.example/t\"x", None),
            ),
            (
                r#"Basic realm="Registry", Bearer realm="https://auth.example/token""#,
                bearer("https://auth.example/token", None),
            ),
            (r#"Basic realm="Registry Realm""#, Some(Challenge::Basic)),
            // A Bearer challenge without a realm cannot be answered; Basic beside it can.
            (r#"Bearer service="x", Basic realm="r""#, Some(Challenge::Basic)),
            (r#"Bearer service="x""#, None),
            (r#"Negotiate abc="d""#, None),
            ("Bearer realm=", None),
            ("", None),
        ] {
            assert_eq!(parse_challenge(header), expected, "{header}");
        }
    }

    #[test]
    fn scopes() {
        assert_eq!(
            scope("plugins/filter-keys", false),
            "repository:plugins/filter-keys:pull"
        );
        assert_eq!(scope("p", true), "repository:p:pull,push");
    }

    #[test]
    fn tokens() {
        let (token, lifetime) = parse_token(br#"{"token": "t1", "expires_in": 300}"#).unwrap();
        assert_eq!((token.as_str(), lifetime), ("t1", Duration::from_secs(270)));
        let (token, lifetime) = parse_token(br#"{"access_token": "t2"}"#).unwrap();
        assert_eq!((token.as_str(), lifetime), ("t2", Duration::from_secs(54)));
        let (token, _) = parse_token(br#"{"token": "", "access_token": "t3"}"#).unwrap();
        assert_eq!(token, "t3");
        for body in [&b"{}"[..], b"not json", br#"{"token": 5}"#, br#"{"token": ""}"#] {
            assert_eq!(parse_token(body), None, "{}", String::from_utf8_lossy(body));
        }
    }
}
