//! Which namespaces a rule's targets select, and the name each copy gets there.

use crate::api::Target;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use std::collections::BTreeMap;

/// A namespace as the controller's metadata cache knows it.
#[derive(Clone, Debug, Default)]
pub struct NamespaceInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The namespace is being deleted: no copy is written into it any more.
    pub terminating: bool,
}

/// One namespace a target points at.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Placement {
    pub namespace: String,
    /// The target's rename, if it has one.
    pub rename: Option<String>,
    /// Whether the namespace exists (a target may name one that does not, yet).
    pub exists: bool,
}

/// A label selector that cannot be evaluated, with the reason.
#[derive(Debug, thiserror::Error)]
#[error("invalid label selector: {0}")]
pub struct InvalidSelector(pub String);

/// Turns a selector into a matcher.
pub fn selector(selector: &LabelSelector) -> Result<Selector, InvalidSelector> {
    Selector::try_from(selector.clone()).map_err(|e| InvalidSelector(e.0))
}

/// The namespaces the targets select, each with its rename, without duplicates, sorted.
/// Targets in other clusters are not looked at here.
pub fn placements(
    targets: &[Target],
    namespaces: &[NamespaceInfo],
) -> Result<Vec<Placement>, InvalidSelector> {
    let mut out = Vec::new();
    for target in targets {
        if let Some(ns) = &target.namespace {
            let exists = namespaces.iter().any(|n| &n.name == ns && !n.terminating);
            out.push(Placement {
                namespace: ns.clone(),
                rename: target.name.clone(),
                exists,
            });
        }
        if let Some(sel) = &target.namespace_selector {
            let sel = selector(sel)?;
            for ns in namespaces
                .iter()
                .filter(|n| !n.terminating && sel.matches(&n.labels))
            {
                out.push(Placement {
                    namespace: ns.name.clone(),
                    rename: target.name.clone(),
                    exists: true,
                });
            }
        }
    }
    out.sort();
    out.dedup_by(|a, b| a.namespace == b.namespace && a.rename == b.rename);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(name: &str, labels: &[(&str, &str)]) -> NamespaceInfo {
        NamespaceInfo {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            annotations: BTreeMap::new(),
            terminating: false,
        }
    }

    fn by_labels(kv: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            match_labels: Some(kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            match_expressions: None,
        }
    }

    #[test]
    fn names_and_selectors() {
        let namespaces = [
            ns("payments-api", &[("team", "payments")]),
            ns("payments-worker", &[("team", "payments")]),
            ns("marketing", &[("team", "marketing")]),
        ];
        let targets = [
            Target {
                namespace: Some("marketing".into()),
                name: Some("renamed".into()),
                ..Default::default()
            },
            Target {
                namespace: Some("not-there-yet".into()),
                ..Default::default()
            },
            Target {
                namespace_selector: Some(by_labels(&[("team", "payments")])),
                ..Default::default()
            },
            // Selects payments-api a second time: one copy only.
            Target {
                namespace: Some("payments-api".into()),
                ..Default::default()
            },
        ];
        let got = placements(&targets, &namespaces).unwrap();
        let got: Vec<(&str, Option<&str>, bool)> = got
            .iter()
            .map(|p| (p.namespace.as_str(), p.rename.as_deref(), p.exists))
            .collect();
        assert_eq!(
            got,
            [
                ("marketing", Some("renamed"), true),
                ("not-there-yet", None, false),
                ("payments-api", None, true),
                ("payments-worker", None, true),
            ]
        );
    }

    #[test]
    fn terminating_namespaces_receive_nothing() {
        let mut going = ns("going", &[("team", "x")]);
        going.terminating = true;
        let namespaces = [going, ns("staying", &[("team", "x")])];
        let targets = [
            Target {
                namespace_selector: Some(by_labels(&[("team", "x")])),
                ..Default::default()
            },
            Target {
                namespace: Some("going".into()),
                name: Some("named".into()),
                ..Default::default()
            },
        ];
        let got = placements(&targets, &namespaces).unwrap();
        let got: Vec<(&str, bool)> = got.iter().map(|p| (p.namespace.as_str(), p.exists)).collect();
        assert_eq!(got, [("going", false), ("staying", true)]);
    }

    #[test]
    fn an_empty_selector_selects_every_namespace() {
        let namespaces = [ns("a", &[]), ns("b", &[("x", "y")])];
        let targets = [Target {
            namespace_selector: Some(LabelSelector::default()),
            ..Default::default()
        }];
        assert_eq!(placements(&targets, &namespaces).unwrap().len(), 2);
    }
}
