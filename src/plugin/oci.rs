//! Plugins as OCI artifacts, in the CNCF Wasm OCI artifact layout: an image manifest
//! (`application/vnd.oci.image.manifest.v1+json`) with the config
//! `application/vnd.wasm.config.v0+json` and one `application/wasm` layer, the component. So an
//! artifact pushed by oras or wkg runs in mimeo, and one pushed by mimeo pulls with them. Layers of
//! Kubewarden's media type (`application/vnd.wasm.content.layer.v1+wasm`) are accepted too.
//!
//! The manifest types are oci-client's; the layout's config blob is oci-wasm's [`WasmConfig`],
//! which records the component's world, imports and exports. The requests are mimeo's own
//! ([`distribution`]), because a rule's author chooses the registry and the registry chooses
//! where its token service and its redirects send mimeo: only places [`address`] allows, and never
//! a registry's error body in a message. What is added here: strict references, size caps before
//! and while downloading, digest checks of our own as a layer streams to disk ([`streamed`]), so
//! that memory stays flat whatever an artifact's size, a bounded content-addressed disk cache (so
//! pinned references need no registry after a restart), one download per digest however many
//! rules ask at once, a global limit on downloads at once with a share of it per namespace
//! ([`slots`]), and errors with a reason for a status condition and never a secret in them.

mod address;
mod cache;
mod challenge;
mod credential_helper;
mod credentials;
mod distribution;
mod error;
mod manifest;
mod network;
mod reference;
mod settings;
mod slots;
mod streamed;
mod trust;

pub use address::RegistryReach;
pub use error::OciError;
pub use network::{Network, NetworkError};

pub use credential_helper::{HelperError, helper_for, run_helper};
pub use credentials::{Credentials, credentials_from_docker_config};
pub use manifest::{
    CONFIG_MEDIA_TYPE, LAYER_MEDIA_TYPE, LAYER_MEDIA_TYPES, MANIFEST_MEDIA_TYPE, accepts_layer_media_type,
};
pub use reference::{OciReference, is_loopback};
pub use settings::OciSettings;
pub use trust::{CaArgument, RegistryTrust, TrustError};

use crate::sync::hash::digest_bytes;
use cache::Cache;
use distribution::RegistryClient;
use futures::StreamExt as _;
use oci_client::manifest::{OciImageManifest, OciManifest};
use oci_wasm::{ToConfig, WasmConfig};
use slots::DownloadSlots;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The annotation naming the WIT interface a plugin implements, e.g. `mimeo:transform@0.1.0`.
pub const ANNOTATION_INTERFACE: &str = "dev.mimeo.interface";
/// The standard OCI annotation for a human-readable description.
pub const ANNOTATION_DESCRIPTION: &str = "org.opencontainers.image.description";
/// The standard OCI annotations for the plugin's own name and version, as it describes itself.
pub const ANNOTATION_TITLE: &str = "org.opencontainers.image.title";
pub const ANNOTATION_VERSION: &str = "org.opencontainers.image.version";

/// The annotations mimeo puts on a plugin it pushes.
pub fn plugin_annotations(interface_version: &str, info: &super::PluginInfo) -> BTreeMap<String, String> {
    let mut annotations = BTreeMap::from([(
        ANNOTATION_INTERFACE.to_owned(),
        format!("mimeo:transform@{interface_version}"),
    )]);
    for (key, value) in [
        (ANNOTATION_DESCRIPTION, &info.description),
        (ANNOTATION_TITLE, &info.name),
        (ANNOTATION_VERSION, &info.version),
    ] {
        if !value.is_empty() {
            annotations.insert(key.to_owned(), value.clone());
        }
    }
    annotations
}

/// A component fetched from a registry (or the cache).
#[derive(Clone, Debug)]
pub struct Fetched {
    pub bytes: Arc<Vec<u8>>,
    pub manifest_digest: String,
    pub layer_digest: String,
    pub from_cache: bool,
    /// The manifest's annotations.
    pub annotations: BTreeMap<String, String>,
}

type SharedDownload = Arc<tokio::sync::OnceCell<Result<Fetched, OciError>>>;

/// The registry client and artifact cache every rule shares (behind an `Arc`).
pub struct Oci {
    settings: OciSettings,
    /// One client per registry, scheme and credentials: a client keeps the tokens its credentials
    /// earned, which must not serve a rule with other credentials (or none).
    clients: Mutex<HashMap<ClientKey, Arc<RegistryClient>>>,
    cache: Cache,
    requests: AtomicU64,
    /// Downloads in flight, so concurrent fetches of one artifact share one.
    downloads: Mutex<HashMap<String, SharedDownload>>,
    /// How many registry downloads run at once, and for one namespace.
    slots: Arc<DownloadSlots>,
}

/// Picks the process's rustls crypto provider if none is picked yet. Two are linked (ring, which
/// kube was built with, and aws-lc-rs, which the registry client's reqwest brings), and rustls then
/// panics rather than guess when a TLS client is built. aws-lc-rs is what kube installs itself
/// in that case, so the binary, the tests and every client agree on one.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Fails only if another thread installed one in between, which is as good.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
}

/// Which oci-client serves a request: the registry, plain HTTP or not, and a fingerprint of the
/// credentials (never the password itself).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ClientKey {
    registry: String,
    plain_http: bool,
    credentials: String,
}

/// Tells credentials apart without keeping the password in another form that could be shown.
fn fingerprint(credentials: &Credentials) -> String {
    match credentials {
        Credentials::Anonymous => "anonymous".to_owned(),
        Credentials::Basic { username, password } => {
            digest_bytes(format!("{username}\0{password}").as_bytes())
        }
    }
}

/// Past this many clients the map starts afresh: each holds only tokens and a connection pool,
/// and distinct credentials are few unless they keep rotating.
const MAX_CLIENTS: usize = 64;

impl Oci {
    pub fn new(settings: OciSettings) -> Result<Oci, OciError> {
        install_crypto_provider();
        Ok(Oci {
            cache: Cache::new(settings.cache_dir.clone(), settings.cache_max_bytes)?,
            settings: settings.clone(),
            clients: Mutex::new(HashMap::new()),
            requests: AtomicU64::new(0),
            downloads: Mutex::new(HashMap::new()),
            slots: DownloadSlots::new(settings.download_concurrency, settings.downloads_per_namespace),
        })
    }

    pub fn settings(&self) -> &OciSettings {
        &self.settings
    }

    /// Registry operations started so far (a resolve, a manifest read, a layer read, a push; the
    /// authentication requests they make on the way are not counted apart). A warm cache makes
    /// none.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// The client for a registry and credentials: plain HTTP for loopback and the configured
    /// insecure registries, HTTPS for the rest and for any registry given a CA of its own.
    fn client_for(
        &self,
        reference: &OciReference,
        credentials: &Credentials,
    ) -> Result<Arc<RegistryClient>, OciError> {
        let plain_http = self.settings.plain_http(&reference.registry);
        let key = ClientKey {
            registry: reference.registry.to_ascii_lowercase(),
            plain_http,
            credentials: fingerprint(credentials),
        };
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let client = Arc::new(RegistryClient::new(
            reference,
            plain_http,
            credentials,
            &self.settings,
        )?);
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// Runs one registry operation under the timeout, counting it, with any secret scrubbed from
    /// its error.
    async fn call<T>(
        &self,
        reference: &OciReference,
        credentials: &Credentials,
        operation: impl Future<Output = Result<T, OciError>>,
    ) -> Result<T, OciError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(self.settings.timeout, operation).await {
            Ok(result) => result.map_err(|e| scrub(e, credentials)),
            Err(_) => Err(OciError::Unreachable {
                registry: reference.registry.clone(),
                message: format!("no answer within {:?}", self.settings.timeout),
            }),
        }
    }

    /// The manifest digest a reference stands for: its digest if pinned (no request), else the
    /// tag resolved by the registry.
    pub async fn resolve(
        &self,
        reference: &OciReference,
        credentials: &Credentials,
    ) -> Result<String, OciError> {
        self.resolve_for(reference, credentials, None).await
    }

    /// [`resolve`](Self::resolve) for a rule of namespace `share` (`None`: a cluster rule or
    /// the command line), under a download slot of that namespace's share.
    pub async fn resolve_for(
        &self,
        reference: &OciReference,
        credentials: &Credentials,
        share: Option<&str>,
    ) -> Result<String, OciError> {
        if let Some(digest) = &reference.digest {
            return Ok(digest.clone());
        }
        let _slot = self.slots.acquire(share).await;
        let client = self.client_for(reference, credentials)?;
        let limit = self.settings.max_artifact_bytes;
        let digest = self
            .call(reference, credentials, client.manifest_digest(reference, limit))
            .await?;
        if !reference::is_digest(&digest) {
            return Err(OciError::Registry(format!(
                "{reference}: the registry answered with the digest {:?}; mimeo accepts sha256 only",
                address::shorten(&digest)
            )));
        }
        Ok(digest)
    }

    /// The component bytes of a pinned reference: from the cache without any request when
    /// present, else downloaded once (concurrent callers for the same artifact share one
    /// download), with the manifest's digest and the layer's digest verified, media types
    /// checked, size capped, then stored. An unpinned reference is resolved first (one request).
    ///
    /// The cache is keyed by content, so it serves a digest to any caller; credentials decide
    /// only what may be downloaded.
    pub async fn fetch(
        &self,
        reference: &OciReference,
        credentials: &Credentials,
    ) -> Result<Fetched, OciError> {
        self.fetch_for(reference, credentials, None).await
    }

    /// [`fetch`](Self::fetch) for a rule of namespace `share` (`None`: a cluster rule or the
    /// command line): a download waits for a slot of that namespace's share, then a global one.
    pub async fn fetch_for(
        &self,
        reference: &OciReference,
        credentials: &Credentials,
        share: Option<&str>,
    ) -> Result<Fetched, OciError> {
        let digest = self.resolve_for(reference, credentials, share).await?;
        let pinned = reference.pinned(&digest);
        match self.cached(&digest).await {
            Ok(Some(fetched)) => return Ok(fetched),
            Ok(None) => {}
            // A cache that cannot be read costs a download, not the plugin.
            Err(e) => tracing::warn!(reference = %pinned, error = %e, "reading the artifact cache"),
        }
        // Callers with other credentials or another repository download for themselves: a
        // failure of one must not become another's.
        let key = format!(
            "{}/{}@{digest} as {}",
            pinned.registry,
            pinned.repository,
            fingerprint(credentials)
        );
        let cell = self
            .downloads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.clone())
            .or_default()
            .clone();
        // Whoever comes after the download finished and the entry went finds it in the cache.
        let result = cell
            .get_or_init(|| async {
                match self.cached(&digest).await {
                    Ok(Some(fetched)) => Ok(fetched),
                    _ => {
                        let _slot = self.slots.acquire(share).await;
                        self.download(&pinned, credentials).await
                    }
                }
            })
            .await
            .clone();
        {
            let mut downloads = self.downloads.lock().unwrap_or_else(|p| p.into_inner());
            if downloads.get(&key).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
                downloads.remove(&key);
            }
        }
        result
    }

    /// The artifact with this manifest digest from the disk cache, if it is there: no registry
    /// is asked.
    pub async fn cached(&self, manifest_digest: &str) -> Result<Option<Fetched>, OciError> {
        let cache = self.cache.clone();
        let digest = manifest_digest.to_owned();
        let found = tokio::task::spawn_blocking(move || cache.get(&digest))
            .await
            .map_err(|e| OciError::Cache(e.to_string()))??;
        Ok(found.map(|found| Fetched {
            bytes: Arc::new(found.bytes),
            manifest_digest: manifest_digest.to_owned(),
            layer_digest: found.layer,
            from_cache: true,
            annotations: found.annotations,
        }))
    }

    /// Downloads a pinned artifact, checks it and stores it. The manifest is read whole (capped:
    /// [`distribution::MAX_MANIFEST_BYTES`]); the layer streams into the cache's `tmp/`, its size
    /// and digest checked as it comes ([`streamed::LayerCheck`]), and is renamed into place only
    /// once it matched, so no layer is ever held in memory to be checked.
    async fn download(&self, pinned: &OciReference, credentials: &Credentials) -> Result<Fetched, OciError> {
        let expected = pinned.digest.clone().unwrap_or_default();
        let shown = pinned.to_string();
        let limit = self.settings.max_artifact_bytes;
        let client = self.client_for(pinned, credentials)?;
        let body = self
            .call(pinned, credentials, client.manifest(pinned, limit))
            .await?;
        let actual = digest_bytes(&body);
        if actual != expected {
            return Err(OciError::DigestMismatch { expected, actual });
        }
        let (layer, _) = manifest::check_manifest(&body, &shown, limit)?;

        // From the registry (and where it redirects, within `address`): a descriptor's `urls`
        // could send the request anywhere, and are not read.
        let stream = async {
            let response = client.blob(pinned, &layer.digest).await?;
            let mut check = streamed::LayerCheck::new(&layer.digest, layer.size, limit);
            check.announced(response.content_length())?;
            let mut partial = self.cache.partial()?;
            let mut chunks = response.bytes_stream();
            while let Some(chunk) = chunks.next().await {
                let chunk = chunk.map_err(|e| client.request_error(e))?;
                check.feed(&chunk)?;
                partial.write(&chunk).await?;
            }
            check.finish()?;
            partial.finish().await?;
            Ok(partial)
        };
        let partial = self.call(pinned, credentials, stream).await?;
        let (cache, digest, layer_digest) = (self.cache.clone(), expected.clone(), layer.digest.clone());
        tokio::task::spawn_blocking(move || cache.put_downloaded(&digest, &body, partial, &layer_digest))
            .await
            .map_err(|e| OciError::Cache(e.to_string()))??;
        // Read back as any cached artifact is, checked again on the way.
        let fetched = self
            .cached(&expected)
            .await?
            .ok_or_else(|| OciError::Cache(format!("{shown}: stored, and gone before it could be read")))?;
        Ok(Fetched {
            from_cache: false,
            ..fetched
        })
    }

    /// Pushes a component in the Wasm artifact layout under the reference's tag; returns the
    /// manifest digest.
    pub async fn push(
        &self,
        component: &[u8],
        reference: &OciReference,
        credentials: &Credentials,
        annotations: BTreeMap<String, String>,
    ) -> Result<String, OciError> {
        if reference.tag.is_none() || reference.digest.is_some() {
            return Err(OciError::InvalidReference(format!(
                "{reference}: push to a tag (…:1.0), without a digest: the registry gives the digest"
            )));
        }
        let limit = self.settings.max_artifact_bytes;
        if component.len() as u64 > limit {
            return Err(OciError::TooLarge {
                size: component.len() as u64,
                limit,
            });
        }
        let (config, mut layer) = WasmConfig::from_raw_component(component.to_vec(), None)
            .map_err(|e| OciError::InvalidArtifact(format!("{e:#}")))?;
        // A file name for the layer: `oras pull` writes only titled layers.
        layer.annotations = Some(BTreeMap::from([(
            ANNOTATION_TITLE.to_owned(),
            layer_file_name(annotations.get(ANNOTATION_TITLE).map(String::as_str)),
        )]));
        let config = config
            .to_config()
            .map_err(|e| OciError::InvalidArtifact(format!("{e:#}")))?;
        let layers = vec![layer];
        let annotations = (!annotations.is_empty()).then_some(annotations);
        let mut manifest = OciImageManifest::build(&layers, &config, annotations);
        manifest.media_type = Some(MANIFEST_MEDIA_TYPE.to_owned());
        let body = manifest_bytes(&manifest)?;
        let digest = digest_bytes(&body);
        let client = self.client_for(reference, credentials)?;
        let push = async {
            for (digest, data) in [(config.sha256_digest(), config.data.clone())]
                .into_iter()
                .chain(layers.iter().map(|l| (l.sha256_digest(), l.data.clone())))
            {
                client.push_blob(reference, &digest, data).await?;
            }
            client.push_manifest(reference, MANIFEST_MEDIA_TYPE, body).await
        };
        let answered = self.call(reference, credentials, push).await?;
        // The registry hashes the bytes it was sent, which are these.
        if let Some(answered) = answered.filter(|d| *d != digest) {
            return Err(OciError::DigestMismatch {
                expected: digest,
                actual: address::shorten(&answered),
            });
        }
        Ok(digest)
    }
}

/// `<plugin name>.wasm`, reduced to characters safe in a file name anywhere.
fn layer_file_name(title: Option<&str>) -> String {
    let stem: String = title
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let stem = stem.trim_matches(['.', '-']);
    format!("{}.wasm", if stem.is_empty() { "plugin" } else { stem })
}

/// A manifest's bytes as pushed: canonical JSON, as oci-client writes it, so the digest is the
/// same whichever of the two pushed it.
fn manifest_bytes(manifest: &OciImageManifest) -> Result<Vec<u8>, OciError> {
    use serde::Serialize as _;
    let mut body = Vec::new();
    let mut serializer =
        serde_json::Serializer::with_formatter(&mut body, olpc_cjson::CanonicalFormatter::new());
    OciManifest::Image(manifest.clone())
        .serialize(&mut serializer)
        .map_err(|e| OciError::Registry(format!("serialising the manifest: {e}")))?;
    Ok(body)
}

/// Removes any secret of `credentials` from the error's text: a registry may echo a header.
fn scrub(error: OciError, credentials: &Credentials) -> OciError {
    let secrets = credentials.secrets();
    if secrets.is_empty() {
        return error;
    }
    let clean = |text: String| {
        secrets
            .iter()
            .fold(text, |text, secret| text.replace(secret.as_str(), "<redacted>"))
    };
    match error {
        OciError::Unreachable { registry, message } => OciError::Unreachable {
            registry,
            message: clean(message),
        },
        OciError::Unauthorized { registry, message } => OciError::Unauthorized {
            registry,
            message: clean(message),
        },
        OciError::Registry(message) => OciError::Registry(clean(message)),
        OciError::WrongMediaType { reference, found } => OciError::WrongMediaType {
            reference,
            found: clean(found),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn reasons_are_distinct_camel_case() {
        let errors = [
            OciError::InvalidReference(String::new()),
            OciError::Unreachable {
                registry: String::new(),
                message: String::new(),
            },
            OciError::Unauthorized {
                registry: String::new(),
                message: String::new(),
            },
            OciError::NotFound {
                reference: String::new(),
            },
            OciError::WrongMediaType {
                reference: String::new(),
                found: String::new(),
            },
            OciError::DigestMismatch {
                expected: String::new(),
                actual: String::new(),
            },
            OciError::TooLarge { size: 0, limit: 0 },
            OciError::LayerSizeMismatch {
                declared: 0,
                received: String::new(),
            },
            OciError::Cache(String::new()),
            OciError::Registry(String::new()),
            OciError::InvalidCredentials(String::new()),
            OciError::InvalidArtifact(String::new()),
            OciError::TokenRealmRefused {
                registry: String::new(),
                realm: String::new(),
                why: String::new(),
            },
            OciError::RedirectRefused {
                registry: String::new(),
                location: String::new(),
                why: String::new(),
            },
        ];
        let reasons: std::collections::BTreeSet<&str> = errors.iter().map(OciError::reason).collect();
        assert_eq!(reasons.len(), errors.len());
        for reason in reasons {
            assert!(reason.chars().next().unwrap().is_ascii_uppercase() && !reason.contains(['_', ' ']));
        }
    }

    #[test]
    fn scrubbing_removes_passwords_and_basic_headers() {
        let creds = Credentials::Basic {
            username: "alice".into(),
            password: "hunter2".into(),
        };
        let header = creds.secrets()[1].clone();
        let error = OciError::Unauthorized {
            registry: "r".into(),
            message: format!("bad password hunter2, header Basic {header}"),
        };
        let shown = scrub(error, &creds).to_string();
        assert!(!shown.contains("hunter2") && !shown.contains(&header), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn loopback_and_insecure_registries_use_plain_http_unless_given_a_ca() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let pem = params
            .self_signed(&rcgen::KeyPair::generate().unwrap())
            .unwrap()
            .pem();
        std::fs::write(&ca, pem).unwrap();
        let arguments: Vec<CaArgument> = [
            ca.display().to_string(),
            format!("127.0.0.1:5000={}", ca.display()),
            format!("harbor.corp={}", ca.display()),
        ]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
        let settings = OciSettings {
            insecure_registries: vec!["Plain.Corp:5000".into()],
            trust: RegistryTrust::load(&arguments, &[]).unwrap(),
            ..OciSettings::default()
        };
        for (registry, plain) in [
            ("127.0.0.1:5001", true),
            ("localhost:5000", true),
            ("plain.corp:5000", true),
            ("127.0.0.1:5000", false),
            ("harbor.corp", false),
            ("ghcr.io", false),
        ] {
            assert_eq!(settings.plain_http(registry), plain, "{registry}");
        }
    }

    #[test]
    fn annotations_name_the_interface_and_description() {
        let info = super::super::PluginInfo {
            name: "filter-keys".into(),
            version: "0.1.0".into(),
            description: "Drops keys".into(),
            kinds: vec![],
        };
        let annotations = plugin_annotations("0.1.0", &info);
        assert_eq!(annotations[ANNOTATION_INTERFACE], "mimeo:transform@0.1.0");
        assert_eq!(annotations[ANNOTATION_DESCRIPTION], "Drops keys");
        assert_eq!(annotations[ANNOTATION_TITLE], "filter-keys");
    }

    #[test]
    fn layer_file_names() {
        assert_eq!(layer_file_name(Some("filter-keys")), "filter-keys.wasm");
        assert_eq!(layer_file_name(Some("../../etc/x")), "etc-x.wasm");
        assert_eq!(layer_file_name(Some("")), "plugin.wasm");
        assert_eq!(layer_file_name(None), "plugin.wasm");
    }

    #[tokio::test]
    async fn pinned_references_resolve_without_a_request() {
        let dir = tempfile::tempdir().unwrap();
        let oci = Oci::new(OciSettings {
            cache_dir: dir.path().to_owned(),
            ..OciSettings::default()
        })
        .unwrap();
        let digest = digest_bytes(b"x");
        let reference: OciReference = format!("oci://r.example/p@{digest}").parse().unwrap();
        assert_eq!(
            oci.resolve(&reference, &Credentials::Anonymous).await.unwrap(),
            digest
        );
        assert_eq!(oci.requests(), 0);
    }

    #[tokio::test]
    async fn a_closed_port_is_unreachable() {
        let dir = tempfile::tempdir().unwrap();
        let oci = Oci::new(OciSettings {
            cache_dir: dir.path().to_owned(),
            timeout: Duration::from_secs(5),
            ..OciSettings::default()
        })
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let reference: OciReference = format!("oci://127.0.0.1:{port}/p:1").parse().unwrap();
        let creds = Credentials::Basic {
            username: "u".into(),
            password: "hunter2".into(),
        };
        let err = oci.fetch(&reference, &creds).await.unwrap_err();
        assert_eq!(err.reason(), "RegistryUnreachable", "{err}");
        assert!(!err.to_string().contains("hunter2"));
        assert_eq!(oci.requests(), 1);
    }

    #[test]
    fn oci_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Oci>();
    }
}
