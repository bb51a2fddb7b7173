//! What mimeo never writes, whoever asks: a rule's source, its metadata policy or a plugin.
//!
//! mimeo writes with rights its rules' authors do not have. Some objects turn those rights into
//! more: a `kubernetes.io/service-account-token` Secret naming a ServiceAccount is filled with a
//! long-lived token for it, and a Helm release Secret is what Helm trusts as a release's record.
//! Some metadata hands an object to another controller: Helm, Argo CD and Flux adopt, prune or
//! overwrite what carries their ownership labels and annotations, and Kubernetes deletes what
//! names an owner. None of these may appear on a copy.

use serde_json::Value;

/// Secret types mimeo never writes (and so never copies).
pub const REFUSED_SECRET_TYPES: [&str; 2] = ["kubernetes.io/service-account-token", "helm.sh/release.v1"];

/// Exact label and annotation keys no copy carries.
const EXACT: [&str; 4] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    "app.kubernetes.io/managed-by",
    "kubernetes.io/service-account.name",
    "kubernetes.io/service-account.uid",
];

/// Key prefixes (a domain and its slash) no copy carries.
const PREFIXES: [&str; 2] = ["meta.helm.sh/", "argocd.argoproj.io/"];

/// The domain whose subdomains are Flux's (`kustomize.toolkit.fluxcd.io/name`, ...).
const FLUX_DOMAIN: &str = "toolkit.fluxcd.io";

/// Whether a label or annotation key belongs to something mimeo must not claim or hand over: the
/// ownership marks of Helm, Argo CD and Flux, kubectl's record of the last apply, and the
/// annotations that bind a Secret to a ServiceAccount.
pub fn is_protected_key(key: &str) -> bool {
    if EXACT.contains(&key) || PREFIXES.iter().any(|p| key.starts_with(p)) {
        return true;
    }
    let domain = key.split_once('/').map_or("", |(domain, _)| domain);
    domain == FLUX_DOMAIN || domain.ends_with(&format!(".{FLUX_DOMAIN}"))
}

/// Top-level metadata fields a copy may hold; the apiserver fills in the rest. Anything else
/// (`ownerReferences`, `finalizers`, `managedFields`, `generateName`...) is refused.
pub const WRITABLE_METADATA: [&str; 4] = ["name", "namespace", "labels", "annotations"];

/// Why an object as it is about to be written is refused, if it is: a Secret of a type in
/// [`REFUSED_SECRET_TYPES`].
pub fn refused_copy(object: &Value) -> Option<String> {
    refused_type(object).map(|(type_, why)| format!("mimeo never writes a Secret of type {type_}: {why}"))
}

/// Why an object named as a rule's input is refused, if it is: what a copy could not be, a copy
/// could not be made from either. A token Secret's data rendered into an Opaque copy is the same
/// token in another namespace.
pub fn refused_input(object: &Value) -> Option<String> {
    refused_type(object).map(|(type_, why)| {
        format!("mimeo never reads a Secret of type {type_} into a copy, as a source or an input: {why}")
    })
}

/// The refused Secret type an object has, and why it is refused.
fn refused_type(object: &Value) -> Option<(&str, &'static str)> {
    let is_secret = object["kind"] == "Secret" && object["apiVersion"] == "v1";
    let type_ = object["type"].as_str().unwrap_or_default();
    (is_secret && REFUSED_SECRET_TYPES.contains(&type_)).then(|| {
        let why = match type_ {
            "kubernetes.io/service-account-token" => {
                "Kubernetes would fill it with a token of the ServiceAccount it names"
            }
            _ => "Helm trusts it as the record of a release",
        };
        (type_, why)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn protected_keys() {
        for key in [
            "app.kubernetes.io/managed-by",
            "meta.helm.sh/release-name",
            "meta.helm.sh/release-namespace",
            "argocd.argoproj.io/tracking-id",
            "argocd.argoproj.io/sync-options",
            "kustomize.toolkit.fluxcd.io/name",
            "helm.toolkit.fluxcd.io/namespace",
            "toolkit.fluxcd.io/tenant",
            "kubectl.kubernetes.io/last-applied-configuration",
            "kubernetes.io/service-account.name",
            "kubernetes.io/service-account.uid",
        ] {
            assert!(is_protected_key(key), "{key}");
        }
        for key in [
            "app.kubernetes.io/name",
            "app.kubernetes.io/instance",
            "team",
            "example.com/toolkit.fluxcd.io",
            "nottoolkit.fluxcd.io/x",
            "meta.helm.sh",
            "mimeo.dev/rule",
        ] {
            assert!(!is_protected_key(key), "{key}");
        }
    }

    #[test]
    fn refused_copies() {
        let secret = |type_: &str| json!({"apiVersion": "v1", "kind": "Secret", "type": type_});
        let token = refused_copy(&secret("kubernetes.io/service-account-token")).unwrap();
        assert!(token.contains("token of the ServiceAccount"), "{token}");
        assert!(
            refused_copy(&secret("helm.sh/release.v1"))
                .unwrap()
                .contains("Helm")
        );
        for fine in [
            "Opaque",
            "kubernetes.io/dockerconfigjson",
            "kubernetes.io/tls",
            "",
        ] {
            assert_eq!(refused_copy(&secret(fine)), None, "{fine}");
        }
        let not_a_secret =
            json!({"apiVersion": "example.com/v1", "kind": "Secret", "type": "helm.sh/release.v1"});
        assert_eq!(refused_copy(&not_a_secret), None);
        assert_eq!(refused_input(&not_a_secret), None);
        assert_eq!(
            refused_input(&secret("helm.sh/release.v1")).as_deref(),
            Some(
                "mimeo never reads a Secret of type helm.sh/release.v1 into a copy, as a source or an \
                 input: Helm trusts it as the record of a release"
            )
        );
        assert_eq!(refused_input(&secret("kubernetes.io/dockerconfigjson")), None);
    }
}
