//! Which kind of object a rule copies, and which kinds an installation allows.
//!
//! Nothing else in the pipeline is specific to a kind: an object travels as JSON, and what is
//! copied is every top-level field but `apiVersion`, `kind`, `metadata` and `status` (for a
//! Secret: `type`, `data`, `immutable`; for a ConfigMap: `data`, `binaryData`, `immutable`; for
//! a Kyverno policy, of `kyverno.io` or the CEL kinds of `policies.kyverno.io`: `spec`). Kinds other than Secret and ConfigMap are found by discovery.

use crate::api::Source;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::core::{ApiResource, GroupVersionKind};
use std::fmt;
use std::str::FromStr;

/// A kind by API version and name, as a rule names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KindRef {
    pub api_version: String,
    pub kind: String,
}

impl KindRef {
    /// The kind a rule's source names, filling in the API version of the well-known kinds.
    pub fn of_source(source: &Source) -> KindRef {
        KindRef::of(source.api_version.as_deref(), &source.kind)
    }

    /// A kind as a rule names it, the API version optional for the well-known kinds.
    pub fn of(api_version: Option<&str>, kind: &str) -> KindRef {
        let api_version = match (api_version, kind) {
            (Some(v), _) => v.to_owned(),
            (None, "Secret" | "ConfigMap") => "v1".to_owned(),
            (None, "Policy" | "ClusterPolicy") => "kyverno.io/v1".to_owned(),
            (None, _) => String::new(),
        };
        KindRef {
            api_version,
            kind: kind.to_owned(),
        }
    }

    /// The API group: `""` for the core group.
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map(|(group, _)| group)
            .unwrap_or_default()
    }

    pub fn gvk(&self) -> GroupVersionKind {
        let version = self
            .api_version
            .rsplit_once('/')
            .map(|(_, v)| v)
            .unwrap_or(&self.api_version);
        GroupVersionKind::gvk(self.group(), version, &self.kind)
    }

    /// The API resource of a built-in kind known without asking the cluster (Secret, ConfigMap),
    /// always namespaced; `None` for every other kind.
    pub fn builtin_resource(&self) -> Option<ApiResource> {
        match (self.api_version.as_str(), self.kind.as_str()) {
            ("v1", "Secret") => Some(ApiResource::erase::<Secret>(&())),
            ("v1", "ConfigMap") => Some(ApiResource::erase::<ConfigMap>(&())),
            _ => None,
        }
    }

    /// Whether an allow-list lets this kind be synced.
    pub fn allowed_by(&self, allowed: &[AllowedKind]) -> bool {
        allowed
            .iter()
            .any(|a| a.kind == self.kind && a.group == self.group())
    }

    /// The kind as an allow-list entry would name it: `Secret`, `Policy.kyverno.io`.
    pub fn as_allowed(&self) -> AllowedKind {
        AllowedKind {
            group: self.group().to_owned(),
            kind: self.kind.clone(),
        }
    }
}

/// One entry of the allow-list of kinds an installation syncs: a kind in an API group, any
/// version. Written `Kind` for the core group and `Kind.group` otherwise, as in
/// `Secret` or `ClusterPolicy.kyverno.io`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AllowedKind {
    pub group: String,
    pub kind: String,
}

/// An allow-list entry that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error(
    "{0:?} is not a kind: write Kind for the core group or Kind.group otherwise, as in Secret or Policy.kyverno.io"
)]
pub struct InvalidAllowedKind(pub String);

impl FromStr for AllowedKind {
    type Err = InvalidAllowedKind;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (kind, group) = text.split_once('.').unwrap_or((text, ""));
        let kind_ok = kind.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && kind.chars().all(|c| c.is_ascii_alphanumeric());
        let group_ok = group
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
            && !group.starts_with('.')
            && !group.ends_with('.')
            && (group.is_empty() != text.contains('.'));
        if !kind_ok || !group_ok {
            return Err(InvalidAllowedKind(text.to_owned()));
        }
        Ok(AllowedKind {
            group: group.to_owned(),
            kind: kind.to_owned(),
        })
    }
}

impl fmt::Display for AllowedKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.kind)
        } else {
            write!(f, "{}.{}", self.kind, self.group)
        }
    }
}

/// Kyverno's CEL policy kinds (`policies.kyverno.io`), the cluster-scoped ones first, then their
/// namespaced twins. `PolicyException` of that group is not among them: an exception exempts
/// resources from policies, so copying them is left to an explicit `--allow-kind`.
pub const CEL_POLICY_KINDS: [&str; 10] = [
    "ValidatingPolicy",
    "MutatingPolicy",
    "GeneratingPolicy",
    "DeletingPolicy",
    "ImageValidatingPolicy",
    "NamespacedValidatingPolicy",
    "NamespacedMutatingPolicy",
    "NamespacedGeneratingPolicy",
    "NamespacedDeletingPolicy",
    "NamespacedImageValidatingPolicy",
];

/// What an installation syncs unless told otherwise: Secrets, ConfigMaps, Kyverno's `Policy` and
/// `ClusterPolicy`, and its CEL policy kinds.
pub fn default_allowed_kinds() -> Vec<AllowedKind> {
    [
        "Secret",
        "ConfigMap",
        "Policy.kyverno.io",
        "ClusterPolicy.kyverno.io",
    ]
    .into_iter()
    .map(str::to_owned)
    .chain(
        CEL_POLICY_KINDS
            .iter()
            .map(|k| format!("{k}.policies.kyverno.io")),
    )
    .map(|k| k.parse().expect("the defaults are well-formed"))
    .collect()
}

impl fmt::Display for KindRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)
    }
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
    fn secrets_and_config_maps_are_built_in() {
        assert_eq!(
            KindRef::of_source(&source(None, "Secret"))
                .builtin_resource()
                .unwrap()
                .plural,
            "secrets"
        );
        assert_eq!(
            KindRef::of_source(&source(Some("v1"), "ConfigMap"))
                .builtin_resource()
                .unwrap()
                .plural,
            "configmaps"
        );
        assert!(
            KindRef::of_source(&source(None, "Policy"))
                .builtin_resource()
                .is_none()
        );
    }

    #[test]
    fn groups_and_versions() {
        let policy = KindRef::of_source(&source(None, "ClusterPolicy"));
        assert_eq!(policy.group(), "kyverno.io");
        assert_eq!(policy.gvk().version, "v1");
        let secret = KindRef::of_source(&source(None, "Secret"));
        assert_eq!(secret.group(), "");
        assert_eq!(secret.gvk().version, "v1");
    }

    #[test]
    fn the_allow_list() {
        let defaults = default_allowed_kinds();
        let names: Vec<String> = defaults.iter().map(|k| k.to_string()).collect();
        assert_eq!(
            names[..5],
            [
                "Secret",
                "ConfigMap",
                "Policy.kyverno.io",
                "ClusterPolicy.kyverno.io",
                "ValidatingPolicy.policies.kyverno.io",
            ]
        );
        assert_eq!(names.len(), 14);
        assert!(names.contains(&"NamespacedImageValidatingPolicy.policies.kyverno.io".to_owned()));
        assert!(!names.iter().any(|n| n.starts_with("PolicyException")));
        for version in ["v1", "v1beta1"] {
            let api_version = format!("policies.kyverno.io/{version}");
            assert!(
                KindRef::of_source(&source(Some(&api_version), "NamespacedValidatingPolicy"))
                    .allowed_by(&defaults)
            );
        }
        assert!(
            !KindRef::of_source(&source(Some("policies.kyverno.io/v1"), "PolicyException"))
                .allowed_by(&defaults)
        );
        assert!(KindRef::of_source(&source(None, "Policy")).allowed_by(&defaults));
        assert!(KindRef::of_source(&source(Some("kyverno.io/v2beta1"), "Policy")).allowed_by(&defaults));
        assert!(!KindRef::of_source(&source(Some("example.com/v1"), "Policy")).allowed_by(&defaults));
        assert!(!KindRef::of_source(&source(Some("example.com/v1"), "Widget")).allowed_by(&defaults));
        for bad in [
            "",
            "secret",
            "Policy.",
            ".kyverno.io",
            "Po licy",
            "Policy.Kyverno.io",
        ] {
            assert!(bad.parse::<AllowedKind>().is_err(), "{bad:?} was accepted");
        }
        let widget: AllowedKind = "Widget.example.com".parse().unwrap();
        assert_eq!(
            (widget.group.as_str(), widget.kind.as_str()),
            ("example.com", "Widget")
        );
    }
}
