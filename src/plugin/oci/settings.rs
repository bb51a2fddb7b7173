//! How the registry client is set up: where artifacts are kept, how large they may be, how
//! registries are reached.

use super::address::RegistryReach;
use super::reference::is_loopback;
use super::trust::RegistryTrust;
use std::path::PathBuf;
use std::time::Duration;

/// Where fetched artifacts are kept, how large they may be, and how registries are reached.
#[derive(Clone, Debug)]
pub struct OciSettings {
    /// Content-addressed store of raw artifacts.
    pub cache_dir: PathBuf,
    /// Bounded; least-recently-used eviction.
    pub cache_max_bytes: u64,
    /// A layer (or manifest) over this is refused: [`super::OciError::TooLarge`].
    pub max_artifact_bytes: u64,
    /// `host[:port]` reached over plain HTTP; so are loopback hosts (127.0.0.0/8, ::1, localhost)
    /// unless `trust` gives them a CA of their own.
    pub insecure_registries: Vec<String>,
    /// CAs trusted for HTTPS registries beside the system's roots.
    pub trust: RegistryTrust,
    /// The longest one registry exchange may take, connecting included: resolving a tag, reading
    /// a manifest, reading a layer, or a whole push. Waiting for a download slot is not counted.
    pub timeout: Duration,
    /// Where registries may send mimeo beyond the defaults, and which token services get
    /// credentials.
    pub reach: RegistryReach,
    /// Registry downloads (a tag resolved, a manifest and its layer fetched) at once, in all.
    pub download_concurrency: usize,
    /// Of those, at most this many for the rules of one namespace.
    pub downloads_per_namespace: usize,
}

impl OciSettings {
    /// Whether `registry` is reached over plain HTTP: an insecure or loopback one, unless it was
    /// given a CA of its own.
    pub fn plain_http(&self, registry: &str) -> bool {
        !self.trust.has_own_ca(registry)
            && (is_loopback(registry)
                || self
                    .insecure_registries
                    .iter()
                    .any(|r| r.eq_ignore_ascii_case(registry)))
    }
}

impl Default for OciSettings {
    fn default() -> Self {
        OciSettings {
            cache_dir: crate::plugin::private_dir::default_cache_dir("oci-cache"),
            cache_max_bytes: 1 << 30,
            max_artifact_bytes: 100 << 20,
            insecure_registries: vec![],
            trust: RegistryTrust::default(),
            timeout: Duration::from_secs(60),
            reach: RegistryReach::default(),
            download_concurrency: 4,
            downloads_per_namespace: 2,
        }
    }
}
