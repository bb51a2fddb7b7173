//! Why an artifact could not be resolved, fetched or pushed, with the reason a status or an
//! Event names it by.

/// Why an artifact could not be resolved, fetched or pushed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum OciError {
    #[error("invalid OCI reference {0}")]
    InvalidReference(String),
    #[error("registry {registry} is unreachable: {message}")]
    Unreachable { registry: String, message: String },
    #[error("registry {registry} refused the credentials (or their absence): {message}")]
    Unauthorized { registry: String, message: String },
    #[error("{reference} was not found in the registry")]
    NotFound { reference: String },
    #[error("{reference} is not a Wasm plugin artifact: found {found}")]
    WrongMediaType { reference: String, found: String },
    #[error("digest mismatch: expected {expected}, got {actual}")]
    DigestMismatch { expected: String, actual: String },
    #[error("the artifact is {size} bytes, more than the {limit} allowed")]
    TooLarge { size: u64, limit: u64 },
    /// The registry sent a layer of another size than its manifest gives it.
    #[error("the registry sent {received} bytes of a layer its manifest gives {declared} bytes")]
    LayerSizeMismatch { declared: u64, received: String },
    #[error("artifact cache: {0}")]
    Cache(String),
    #[error("registry: {0}")]
    Registry(String),
    #[error("registry credentials: {0}")]
    InvalidCredentials(String),
    #[error("not a pushable component: {0}")]
    InvalidArtifact(String),
    /// The registry's challenge named a token service mimeo does not ask: see [`super::address`].
    #[error(
        "registry {registry} named the token service {realm}, which mimeo does not ask: {why}. A token \
         service must be HTTPS unless the registry is reached over plain HTTP, off loopback, \
         link-local and cloud metadata addresses unless the registry is there too, and off private \
         addresses outside the networks the platform allowed (--registry-allowed-network): fix the \
         registry's token configuration, or use another registry"
    )]
    TokenRealmRefused {
        registry: String,
        realm: String,
        why: String,
    },
    /// The registry redirected mimeo (or sent an upload) where [`super::address`] does not allow.
    #[error(
        "registry {registry} sent mimeo to {location}, which mimeo does not follow: {why}. Redirects \
         must stay HTTPS unless the registry is reached over plain HTTP, off loopback, link-local \
         and cloud metadata addresses unless the registry is there too, off private addresses \
         outside the networks the platform allowed (--registry-allowed-network), and be few"
    )]
    RedirectRefused {
        registry: String,
        location: String,
        why: String,
    },
}

impl OciError {
    /// A CamelCase reason for a status condition or an Event.
    pub fn reason(&self) -> &'static str {
        match self {
            OciError::InvalidReference(_) => "InvalidReference",
            OciError::Unreachable { .. } => "RegistryUnreachable",
            OciError::Unauthorized { .. } => "RegistryUnauthorized",
            OciError::NotFound { .. } => "ArtifactNotFound",
            OciError::WrongMediaType { .. } => "WrongMediaType",
            OciError::DigestMismatch { .. } => "DigestMismatch",
            OciError::TooLarge { .. } => "ArtifactTooLarge",
            OciError::LayerSizeMismatch { .. } => "ArtifactSizeMismatch",
            OciError::Cache(_) => "ArtifactCacheFailed",
            OciError::Registry(_) => "RegistryError",
            OciError::InvalidCredentials(_) => "InvalidCredentials",
            OciError::InvalidArtifact(_) => "InvalidArtifact",
            OciError::TokenRealmRefused { .. } => "TokenRealmRefused",
            OciError::RedirectRefused { .. } => "RegistryRedirectRefused",
        }
    }

    /// Whether trying again later may help (the registry, the network or the disk), as opposed to
    /// an artifact or reference that stays wrong until someone changes it.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            OciError::Unreachable { .. } | OciError::Registry(_) | OciError::Cache(_)
        )
    }

    /// Whether the artifact itself is wrong, whatever the network or the time: the bytes a
    /// pinned digest names do not hash to it, or are not the size they are said to be, or too
    /// large. Downloading it again would fetch the same bytes, so a rule does not, until it
    /// changes.
    pub fn is_lasting(&self) -> bool {
        matches!(
            self,
            OciError::DigestMismatch { .. } | OciError::LayerSizeMismatch { .. } | OciError::TooLarge { .. }
        )
    }
}
