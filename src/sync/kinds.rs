//! Which kind of object a rule copies, and which kinds this build can copy.
//!
//! Nothing else in the pipeline is specific to a kind: an object travels as JSON, and what is
//! copied is every top-level field but `apiVersion`, `kind`, `metadata` and `status` (for a
//! Secret: `type`, `data`, `immutable`; for a ConfigMap: `data`, `binaryData`, `immutable`).

use crate::api::Source;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::core::ApiResource;
use std::fmt;

/// A kind by API version and name, as a rule names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KindRef {
    pub api_version: String,
    pub kind: String,
}

impl KindRef {
    /// The kind a rule's source names, filling in the API version of the well-known kinds.
    pub fn of_source(source: &Source) -> KindRef {
        let api_version = match (&source.api_version, source.kind.as_str()) {
            (Some(v), _) => v.clone(),
            (None, "Secret" | "ConfigMap") => "v1".to_owned(),
            (None, "Policy" | "ClusterPolicy") => "kyverno.io/v1".to_owned(),
            (None, _) => String::new(),
        };
        KindRef {
            api_version,
            kind: source.kind.clone(),
        }
    }

    /// The API resource of a kind this build copies, or `None` for any other kind.
    pub fn supported_resource(&self) -> Option<ApiResource> {
        match (self.api_version.as_str(), self.kind.as_str()) {
            ("v1", "Secret") => Some(ApiResource::erase::<Secret>(&())),
            ("v1", "ConfigMap") => Some(ApiResource::erase::<ConfigMap>(&())),
            _ => None,
        }
    }
}

impl fmt::Display for KindRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)
    }
}

/// The kinds whose copies the controller watches.
pub fn supported_resources() -> Vec<ApiResource> {
    vec![
        ApiResource::erase::<Secret>(&()),
        ApiResource::erase::<ConfigMap>(&()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(api_version: Option<&str>, kind: &str) -> Source {
        Source {
            api_version: api_version.map(str::to_owned),
            kind: kind.to_owned(),
            name: Some("x".into()),
            selector: None,
            namespace: None,
            cluster: None,
        }
    }

    #[test]
    fn well_known_kinds_get_their_api_version() {
        assert_eq!(
            KindRef::of_source(&source(None, "Secret")).to_string(),
            "v1/Secret"
        );
        assert_eq!(
            KindRef::of_source(&source(None, "Policy")).to_string(),
            "kyverno.io/v1/Policy"
        );
        assert_eq!(
            KindRef::of_source(&source(Some("example.com/v2"), "Widget")).to_string(),
            "example.com/v2/Widget"
        );
    }

    #[test]
    fn secrets_and_config_maps_are_supported() {
        assert_eq!(
            KindRef::of_source(&source(None, "Secret"))
                .supported_resource()
                .unwrap()
                .plural,
            "secrets"
        );
        assert_eq!(
            KindRef::of_source(&source(Some("v1"), "ConfigMap"))
                .supported_resource()
                .unwrap()
                .plural,
            "configmaps"
        );
        assert!(
            KindRef::of_source(&source(None, "Policy"))
                .supported_resource()
                .is_none()
        );
    }
}
