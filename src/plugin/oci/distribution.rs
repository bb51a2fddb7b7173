//! The registry's HTTP API (the OCI distribution spec), as mimeo speaks it: a manifest's digest
//! (HEAD), a manifest and a blob (GET, capped while read), and a push (blobs, then the manifest).
//!
//! mimeo makes these requests itself, with oci-client's types but not its client, because
//! oci-client asks whatever token realm a registry's challenge names and follows up to ten
//! redirects anywhere, and puts a registry's error bodies in its errors; none of that can be set
//! from outside it, and a rule's author chooses the registry. Here:
//!
//! - the realm of a challenge is checked ([`Origin::check_url`]) before it is asked anything,
//!   and it is the challenge of the very answer being retried: no second look at the registry
//!   that could see another one;
//! - every name is resolved by [`CheckedResolver`], which refuses loopback, link-local and
//!   metadata addresses unless the registry is one, and private ones outside the allowed
//!   networks, and the connection goes to the addresses it checked; every redirect passes
//!   [`Origin::check_redirect`], at most [`MAX_REDIRECTS`](super::address::MAX_REDIRECTS) of them;
//! - a rule's basic credentials go to a token service only on the registry's own host or one the
//!   platform trusts ([`Origin::may_send_credentials`]); reqwest drops them on a redirect to
//!   another host;
//! - a blob's body is handed back unread, for the caller to stream to disk and check as it comes;
//! - a registry's answer other than success is shown by its status code alone, never its body;
//! - environment proxies (`HTTPS_PROXY`...) are not used: the checks above must see the
//!   addresses connected to.

use super::address::{Origin, Refusal, find_refusal, shorten, shown_url};
use super::challenge::{Challenge, parse_challenge, parse_token, scope};
use super::credentials::Credentials;
use super::error::OciError;
use super::reference::OciReference;
use super::settings::OciSettings;
use crate::error_text::with_causes;
use bytes::Bytes;
use futures::StreamExt;
use reqwest::header::{
    ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, LOCATION, WWW_AUTHENTICATE,
};
use reqwest::{Method, RequestBuilder, Response, StatusCode, Url};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The largest token service answer read: a token is a few KiB.
const MAX_TOKEN_BYTES: u64 = 64 << 10;
/// How much of a 400 answer is looked at (never shown) to tell a TLS server answering plain HTTP.
const SNIFF_BYTES: u64 = 512;

/// Resolves names for one registry's connections, refusing a name that resolves where the
/// registry may not send mimeo ([`Origin::check_resolved`]). The connection is made to the
/// addresses checked here, so a name that resolves differently the second time gains nothing.
struct CheckedResolver {
    origin: Arc<Origin>,
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let origin = self.origin.clone();
        let name = name.as_str().to_owned();
        Box::pin(async move {
            let addresses: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let ips: Vec<IpAddr> = addresses.iter().map(SocketAddr::ip).collect();
            origin.check_resolved(&name, &ips)?;
            Ok(Box::new(addresses.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// How a client answers the registry's challenges so far.
#[derive(Default)]
struct Authorizations {
    /// The registry asked for basic auth: send the credentials with every request.
    basic: bool,
    /// Bearer tokens by scope, with when to stop using them.
    tokens: HashMap<String, (HeaderValue, Instant)>,
}

/// One registry, reached with one set of credentials.
pub(super) struct RegistryClient {
    http: reqwest::Client,
    origin: Arc<Origin>,
    /// `scheme://host[:port]/`.
    base: Url,
    registry: String,
    plain_http: bool,
    credentials: Credentials,
    authorizations: Mutex<Authorizations>,
}

impl RegistryClient {
    /// A client for `reference`'s registry, over plain HTTP if `plain_http`, trusting the CAs
    /// `settings` gives for it.
    pub fn new(
        reference: &OciReference,
        plain_http: bool,
        credentials: &Credentials,
        settings: &OciSettings,
    ) -> Result<RegistryClient, OciError> {
        let building = |e: &dyn std::error::Error| {
            OciError::Registry(format!("building the registry client: {}", with_causes(e)))
        };
        let origin = Arc::new(Origin::new(reference.host(), plain_http, &settings.reach));
        let redirects = origin.clone();
        let mut builder = reqwest::Client::builder()
            .user_agent(concat!("mimeo/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(settings.timeout)
            .read_timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::custom(move |attempt| match redirects
                .check_redirect(attempt.url(), attempt.previous())
            {
                Ok(()) => attempt.follow(),
                Err(refusal) => attempt.error(refusal),
            }))
            // Where mimeo came from is none of object storage's business.
            .referer(false)
            .no_proxy()
            .dns_resolver(CheckedResolver {
                origin: origin.clone(),
            });
        for der in settings.trust.certificates_for(&reference.registry) {
            let certificate = reqwest::Certificate::from_der(&der).map_err(|e| building(&e))?;
            builder = builder.tls_certs_merge([certificate]);
        }
        let http = builder.build().map_err(|e| building(&e))?;
        let scheme = if plain_http { "http" } else { "https" };
        let base = Url::parse(&format!("{scheme}://{}/", reference.registry))
            .map_err(|e| OciError::InvalidReference(format!("{reference}: {e}")))?;
        Ok(RegistryClient {
            http,
            origin,
            base,
            registry: reference.registry.clone(),
            plain_http,
            credentials: credentials.clone(),
            authorizations: Mutex::default(),
        })
    }

    fn url(&self, path: &str) -> Url {
        // Paths are built from a parsed reference: repository, tag and digest characters only.
        self.base.join(path).unwrap_or_else(|_| self.base.clone())
    }

    fn manifest_url(reference: &OciReference) -> String {
        // Parsing refuses a reference with neither; a hand-built one gets the registry's default.
        let name = reference
            .digest
            .as_deref()
            .or(reference.tag.as_deref())
            .unwrap_or("latest");
        format!("v2/{}/manifests/{name}", reference.repository)
    }

    fn authorizations(&self) -> std::sync::MutexGuard<'_, Authorizations> {
        self.authorizations.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `request` with what the registry asked for so far: the credentials, or a token for
    /// `scope` that is still good.
    fn authorized(&self, request: RequestBuilder, scope: &str) -> RequestBuilder {
        let authorizations = self.authorizations();
        if authorizations.basic
            && let Credentials::Basic { username, password } = &self.credentials
        {
            return request.basic_auth(username, Some(password));
        }
        match authorizations.tokens.get(scope) {
            Some((header, until)) if Instant::now() < *until => request.header(AUTHORIZATION, header.clone()),
            _ => request,
        }
    }

    /// Sends the request `build` makes; if the registry answers 401, answers its challenge (a
    /// token from the realm it names, once checked; or the credentials) and sends it once more.
    /// The second answer is returned whatever it is.
    async fn send(&self, scope: &str, build: impl Fn() -> RequestBuilder) -> Result<Response, OciError> {
        let first = self
            .authorized(build(), scope)
            .send()
            .await
            .map_err(|e| self.request_error(e))?;
        if first.status() != StatusCode::UNAUTHORIZED {
            return Ok(first);
        }
        let challenge = first
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|value| value.to_str().ok())
            .and_then(parse_challenge);
        drop(first);
        match challenge {
            None => {
                return Err(self.unauthorized(
                    "the registry answered 401 Unauthorized with no challenge mimeo can answer (Bearer or Basic)"
                        .into(),
                ));
            }
            Some(Challenge::Basic) => {
                if self.credentials == Credentials::Anonymous {
                    return Err(self.unauthorized(
                        "the registry asks for a username and password (basic auth), and none were given"
                            .into(),
                    ));
                }
                self.authorizations().basic = true;
            }
            Some(Challenge::Bearer { realm, service }) => {
                let token = self.token(&realm, service.as_deref(), scope).await?;
                let mut authorizations = self.authorizations();
                // One token per repository asked: drop the expired ones rather than keep them all.
                let now = Instant::now();
                authorizations.tokens.retain(|_, (_, until)| *until > now);
                authorizations.tokens.insert(scope.to_owned(), token);
            }
        }
        self.authorized(build(), scope)
            .send()
            .await
            .map_err(|e| self.request_error(e))
    }

    /// A token for `scope` from the realm the registry named, once the realm passed the checks.
    async fn token(
        &self,
        realm: &str,
        service: Option<&str>,
        scope: &str,
    ) -> Result<(HeaderValue, Instant), OciError> {
        let refused = |realm: String, why: String| OciError::TokenRealmRefused {
            registry: self.registry.clone(),
            realm,
            why,
        };
        let mut url = Url::parse(realm).map_err(|_| refused(shorten(realm), "it is not a URL".into()))?;
        self.origin
            .check_url(&url)
            .map_err(|refusal| refused(refusal.target, refusal.why.to_string()))?;
        let shown = shown_url(&url);
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = service {
                query.append_pair("service", service);
            }
            query.append_pair("scope", scope);
        }
        // The credentials are for the registry: a token service on another host gets them only
        // if the platform trusts it with them, and is asked without them otherwise.
        let withheld = self.credentials != Credentials::Anonymous && !self.origin.may_send_credentials(&url);
        let mut request = self.http.get(url.clone());
        if let Credentials::Basic { username, password } = &self.credentials
            && !withheld
        {
            request = request.basic_auth(username, Some(password));
        }
        let realm_error = |error: reqwest::Error| match find_refusal(&error) {
            Some(refusal) => refused(shown.clone(), on_the_way(&shown, refusal)),
            None => self.transport_error(error),
        };
        let response = request.send().await.map_err(realm_error)?;
        let status = response.status();
        if !status.is_success() {
            let mut message = format!("the token service at {shown} answered {status}");
            if withheld {
                message.push_str(&format!(
                    "; the pull secret's credentials were not sent to it: they go only to the \
                     registry's own host ({}) or to a token service the platform trusts with them \
                     (--registry-trusted-realm {})",
                    self.origin.host(),
                    url.host_str().unwrap_or_default()
                ));
            }
            return Err(match status.as_u16() {
                401 | 403 => self.unauthorized(message),
                _ => OciError::Registry(format!("registry {}: {message}", self.registry)),
            });
        }
        let no_token = || {
            OciError::Registry(format!(
                "registry {}: the token service at {shown} answered with no token",
                self.registry
            ))
        };
        let body = match read_capped(response, MAX_TOKEN_BYTES).await {
            Ok(body) => body,
            Err(Capped::TooLarge(_)) => return Err(no_token()),
            Err(Capped::Failed(e)) => return Err(realm_error(e)),
        };
        let (token, lifetime) = parse_token(&body).ok_or_else(no_token)?;
        let mut header = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| no_token())?;
        header.set_sensitive(true);
        Ok((header, Instant::now() + lifetime))
    }

    fn unauthorized(&self, message: String) -> OciError {
        OciError::Unauthorized {
            registry: self.registry.clone(),
            message,
        }
    }

    /// A request that failed: refused by the redirect policy or the resolver (the registry's own
    /// name resolves anywhere, so a refusal is always of a place it sent mimeo to), or a
    /// connection that failed.
    pub(super) fn request_error(&self, error: reqwest::Error) -> OciError {
        match find_refusal(&error) {
            Some(refusal) => OciError::RedirectRefused {
                registry: self.registry.clone(),
                location: refusal.target.clone(),
                why: refusal.why.to_string(),
            },
            None => self.transport_error(error),
        }
    }

    fn transport_error(&self, error: reqwest::Error) -> OciError {
        let shown = error.url().map(shown_url);
        let unreachable = error.is_connect()
            || error.is_timeout()
            || error.is_request()
            || error.is_body()
            || error.is_decode();
        let text = with_causes(&error.without_url());
        let mut message = match shown {
            Some(url) => format!("{url}: {text}"),
            None => text,
        };
        if unreachable {
            message.push_str(tls_hint(&message));
            OciError::Unreachable {
                registry: self.registry.clone(),
                message,
            }
        } else {
            OciError::Registry(format!("registry {}: {message}", self.registry))
        }
    }

    /// What an answer other than success means, by its status. The body is not shown; a 400 to
    /// a plain HTTP request is looked at only to tell a TLS server that was asked in plain HTTP.
    async fn refused(
        &self,
        response: Response,
        method: &Method,
        url: &Url,
        reference: &OciReference,
    ) -> OciError {
        let status = response.status();
        let serves_https = self.plain_http
            && status == StatusCode::BAD_REQUEST
            && read_capped(response, SNIFF_BYTES)
                .await
                .is_ok_and(|body| String::from_utf8_lossy(&body).contains("HTTP request to an HTTPS server"));
        refused_by_status(
            status,
            &self.registry,
            &format!("{method} {}", url.path()),
            reference,
            serves_https,
        )
    }

    /// The digest of the manifest `reference` names: the registry's `Docker-Content-Digest` to a
    /// HEAD, else the digest of the manifest's bytes (a registry that gives no digest header, or
    /// does not answer HEAD).
    pub async fn manifest_digest(&self, reference: &OciReference, limit: u64) -> Result<String, OciError> {
        let url = self.url(&Self::manifest_url(reference));
        let scope = scope(&reference.repository, false);
        let accept = super::manifest::accepted_manifest_types().join(", ");
        let response = self
            .send(&scope, || self.http.head(url.clone()).header(ACCEPT, &accept))
            .await?;
        let status = response.status();
        if status.is_success() {
            if let Some(digest) = response
                .headers()
                .get("Docker-Content-Digest")
                .and_then(|v| v.to_str().ok())
            {
                return Ok(digest.to_owned());
            }
        } else if matches!(status.as_u16(), 401 | 403 | 404) {
            return Err(self.refused(response, &Method::HEAD, &url, reference).await);
        }
        let body = self.manifest(reference, limit).await?;
        Ok(crate::sync::hash::digest_bytes(&body))
    }

    /// The bytes of the manifest `reference` names, refused past `limit` or [`MAX_MANIFEST_BYTES`],
    /// whichever is smaller, while it is read: a manifest is a few hundred bytes, and a registry
    /// that sends more is not buffered for it.
    pub async fn manifest(&self, reference: &OciReference, limit: u64) -> Result<Vec<u8>, OciError> {
        let limit = limit.min(MAX_MANIFEST_BYTES);
        let url = self.url(&Self::manifest_url(reference));
        let scope = scope(&reference.repository, false);
        let accept = super::manifest::accepted_manifest_types().join(", ");
        let response = self
            .send(&scope, || self.http.get(url.clone()).header(ACCEPT, &accept))
            .await?;
        if !response.status().is_success() {
            return Err(self.refused(response, &Method::GET, &url, reference).await);
        }
        self.read(response, limit).await
    }

    /// The answer to a GET of a blob of `reference`'s repository, its body not read yet: the
    /// caller streams it ([`super::streamed`]), so that no blob is held in memory whatever its
    /// size. The registry may redirect (to object storage), within [`Origin::check_redirect`].
    pub async fn blob(&self, reference: &OciReference, digest: &str) -> Result<Response, OciError> {
        let url = self.url(&format!("v2/{}/blobs/{digest}", reference.repository));
        let scope = scope(&reference.repository, false);
        let response = self.send(&scope, || self.http.get(url.clone())).await?;
        if !response.status().is_success() {
            return Err(self.refused(response, &Method::GET, &url, reference).await);
        }
        Ok(response)
    }

    async fn read(&self, response: Response, limit: u64) -> Result<Vec<u8>, OciError> {
        read_capped(response, limit).await.map_err(|e| match e {
            Capped::TooLarge(size) => OciError::TooLarge { size, limit },
            Capped::Failed(e) => self.request_error(e),
        })
    }

    /// Uploads a blob in one piece: a POST opens the upload, a PUT to the location the registry
    /// gives (checked like a redirect) sends it.
    pub async fn push_blob(
        &self,
        reference: &OciReference,
        digest: &str,
        data: Bytes,
    ) -> Result<(), OciError> {
        let scope = scope(&reference.repository, true);
        let uploads = self.url(&format!("v2/{}/blobs/uploads/", reference.repository));
        let response = self
            .send(&scope, || {
                self.http.post(uploads.clone()).header(CONTENT_LENGTH, 0)
            })
            .await?;
        if !response.status().is_success() {
            return Err(self.refused(response, &Method::POST, &uploads, reference).await);
        }
        let location = response
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|location| response.url().join(location).ok())
            .ok_or_else(|| {
                OciError::Registry(format!(
                    "registry {}: the upload was opened without a usable Location",
                    self.registry
                ))
            })?;
        self.origin
            .check_url(&location)
            .map_err(|refusal| OciError::RedirectRefused {
                registry: self.registry.clone(),
                location: refusal.target,
                why: refusal.why.to_string(),
            })?;
        let mut target = location.clone();
        target.query_pairs_mut().append_pair("digest", digest);
        let response = self
            .send(&scope, || {
                self.http
                    .put(target.clone())
                    .header(CONTENT_TYPE, "application/octet-stream")
                    .body(data.clone())
            })
            .await?;
        if !response.status().is_success() {
            return Err(self.refused(response, &Method::PUT, &location, reference).await);
        }
        Ok(())
    }

    /// Puts a manifest under `reference`'s tag; returns the digest the registry gives, if any.
    pub async fn push_manifest(
        &self,
        reference: &OciReference,
        media_type: &str,
        body: Vec<u8>,
    ) -> Result<Option<String>, OciError> {
        let url = self.url(&Self::manifest_url(reference));
        let scope = scope(&reference.repository, true);
        let body = Bytes::from(body);
        let response = self
            .send(&scope, || {
                self.http
                    .put(url.clone())
                    .header(CONTENT_TYPE, media_type)
                    .body(body.clone())
            })
            .await?;
        if !response.status().is_success() {
            return Err(self.refused(response, &Method::PUT, &url, reference).await);
        }
        Ok(response
            .headers()
            .get("Docker-Content-Digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned))
    }
}

/// Why a realm's exchange was refused: the realm itself, or where it sent mimeo on to.
fn on_the_way(realm: &str, refusal: &Refusal) -> String {
    if refusal.target == realm {
        refusal.why.to_string()
    } else {
        format!("it sends mimeo on to {}, and {}", refusal.target, refusal.why)
    }
}

enum Capped {
    TooLarge(u64),
    Failed(reqwest::Error),
}

/// The largest manifest read: the OCI distribution spec's 4 MiB, which registries accept at most.
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// A response's body, refused as soon as it says or shows it is over `limit`.
async fn read_capped(response: Response, limit: u64) -> Result<Vec<u8>, Capped> {
    if let Some(length) = response.content_length().filter(|&l| l > limit) {
        return Err(Capped::TooLarge(length));
    }
    let capacity = response.content_length().unwrap_or(0).min(limit) as usize;
    let mut bytes = Vec::with_capacity(capacity);
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(Capped::Failed)?;
        let size = (bytes.len() + chunk.len()) as u64;
        if size > limit {
            return Err(Capped::TooLarge(size));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// A registry's answer other than success, as what it means for a plugin reference, in mimeo's
/// words: the status code and what was asked (`asked`, as `GET /v2/...`), never the body, which
/// a hostile registry would fill with whatever it wants shown in a rule's status.
/// `serves_https`: the answer is a TLS server's to a plain HTTP request.
pub(super) fn refused_by_status(
    status: StatusCode,
    registry: &str,
    asked: &str,
    reference: &OciReference,
    serves_https: bool,
) -> OciError {
    match status.as_u16() {
        401 | 403 => OciError::Unauthorized {
            registry: registry.to_owned(),
            message: format!("the registry answered {status} to {asked}"),
        },
        404 => OciError::NotFound {
            reference: reference.to_string(),
        },
        400 if serves_https => OciError::Unreachable {
            registry: registry.to_owned(),
            message: format!(
                "the registry answered {status} to plain HTTP, as a TLS server does: the registry \
                 serves HTTPS (do not mark it insecure; a loopback registry is reached over HTTPS \
                 once given a CA of its own)"
            ),
        },
        _ => OciError::Registry(format!("{reference}: the registry answered {status} to {asked}")),
    }
}

/// What to do about a failed TLS handshake, judged from the error's text (reqwest and rustls give
/// no typed cause): a certificate nobody vouched for, or no TLS at all.
pub(super) fn tls_hint(message: &str) -> &'static str {
    let lower = message.to_ascii_lowercase();
    if !lower.contains("https://") {
        ""
    } else if lower.contains("certificate") {
        " (is the registry's certificate from a private CA? then trust that CA for this registry)"
    } else if ["corrupt message", "tls", "ssl"]
        .iter()
        .any(|hint| lower.contains(hint))
    {
        " (is it a registry served over plain HTTP? then mark it insecure)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name is checked on the addresses it resolves to, and the refusal comes back through
    /// reqwest's errors to be told apart from a failed connection.
    #[tokio::test]
    async fn names_resolving_to_loopback_are_refused_by_the_resolver() {
        super::super::install_crypto_provider();
        let origin = Arc::new(Origin::new("registry.example", true, &Default::default()));
        let client = reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(CheckedResolver { origin })
            .build()
            .unwrap();
        // `localhost` as a name is refused before any request anyway (`Origin::check_url`);
        // here it stands for any name that resolves to loopback.
        let error = client.get("http://localhost:1/token").send().await.unwrap_err();
        let refusal = find_refusal(&error).unwrap_or_else(|| panic!("{}", with_causes(&error)));
        assert!(
            matches!(refusal.why, super::super::address::Why::Resolved(ip, _) if ip.is_loopback()),
            "{refusal}"
        );
        assert_eq!(refusal.target, "localhost");
    }

    #[test]
    fn a_digest_wins_over_a_tag() {
        let both: OciReference = format!("oci://r.example/p:1@sha256:{}", "a".repeat(64))
            .parse()
            .unwrap();
        assert_eq!(
            RegistryClient::manifest_url(&both),
            format!("v2/p/manifests/sha256:{}", "a".repeat(64))
        );
        let tagged: OciReference = "oci://r.example/a/b:1.0".parse().unwrap();
        assert_eq!(RegistryClient::manifest_url(&tagged), "v2/a/b/manifests/1.0");
    }

    #[test]
    fn answers_are_shown_by_their_status_alone() {
        let reference: OciReference = "oci://r.example/p:1".parse().unwrap();
        let asked = "GET /v2/p/manifests/1";
        for (status, reason, shown) in [
            (
                401,
                "RegistryUnauthorized",
                "the registry answered 401 Unauthorized to GET /v2/p/manifests/1",
            ),
            (
                403,
                "RegistryUnauthorized",
                "the registry answered 403 Forbidden to GET",
            ),
            (404, "ArtifactNotFound", "oci://r.example/p:1 was not found"),
            (
                500,
                "RegistryError",
                "the registry answered 500 Internal Server Error to GET",
            ),
            (502, "RegistryError", "502 Bad Gateway"),
            (400, "RegistryError", "400 Bad Request"),
            (599, "RegistryError", "599"),
        ] {
            let status = StatusCode::from_u16(status).unwrap();
            let error = refused_by_status(status, "r.example", asked, &reference, false);
            assert_eq!(error.reason(), reason, "{status}");
            assert!(error.to_string().contains(shown), "{status}: {error}");
        }
        let plain_to_tls = refused_by_status(StatusCode::BAD_REQUEST, "r.example", asked, &reference, true);
        assert_eq!(plain_to_tls.reason(), "RegistryUnreachable");
        assert!(
            plain_to_tls.to_string().contains("the registry serves HTTPS"),
            "{plain_to_tls}"
        );
    }

    #[test]
    fn tls_failures_say_what_to_change() {
        let url = "https://r.example/v2/p/manifests/1: error sending request: client error (Connect)";
        for (cause, hint) in [
            ("invalid peer certificate: UnknownIssuer", "private CA"),
            ("invalid peer certificate: Expired", "private CA"),
            (
                "received corrupt message of type InvalidContentType",
                "plain HTTP",
            ),
            ("tcp connect error: Connection refused", ""),
        ] {
            let hint_given = tls_hint(&format!("{url}: {cause}"));
            assert!(hint_given.contains(hint), "{cause}: {hint_given:?}");
            assert_eq!(hint_given.is_empty(), hint.is_empty(), "{cause}: {hint_given:?}");
        }
        assert_eq!(tls_hint("http://r.example: invalid peer certificate"), "");
    }
}
