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

/// One place a target points at: a namespace, or the cluster itself for a cluster-scoped kind.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Placement {
    /// `None` for a cluster-scoped kind.
    pub namespace: Option<String>,
    /// The target's rename, if it has one.
    pub rename: Option<String>,
    /// Whether the namespace exists (a target may name one that does not, yet).
    pub exists: bool,
    /// The target asks for the namespace to be created when it does not exist.
    pub create: bool,
}

/// A label selector that cannot be evaluated, with the reason.
#[derive(Debug, thiserror::Error)]
#[error("invalid label selector: {0}")]
pub struct InvalidSelector(pub String);

/// Turns a selector into a matcher.
pub fn selector(selector: &LabelSelector) -> Result<Selector, InvalidSelector> {
    Selector::try_from(selector.clone()).map_err(|e| InvalidSelector(e.0))
}

/// The namespaces the targets select in one cluster, given that cluster's namespaces, each with
/// its rename, without duplicates, sorted.
pub fn placements(
    targets: &[Target],
    namespaces: &[NamespaceInfo],
    namespaced: bool,
) -> Result<Vec<Placement>, InvalidSelector> {
    let mut out = Vec::new();
    for target in targets {
        if !namespaced {
            out.push(Placement {
                namespace: None,
                rename: target.name.clone(),
                exists: true,
                create: false,
            });
            continue;
        }
        if let Some(ns) = &target.namespace {
            let exists = namespaces.iter().any(|n| &n.name == ns && !n.terminating);
            out.push(Placement {
                namespace: Some(ns.clone()),
                rename: target.name.clone(),
                exists,
                create: target.create_namespace,
            });
        }
        if let Some(sel) = &target.namespace_selector {
            let sel = selector(sel)?;
            for ns in namespaces
                .iter()
                .filter(|n| !n.terminating && sel.matches(&n.labels))
            {
                out.push(Placement {
                    namespace: Some(ns.name.clone()),
                    rename: target.name.clone(),
                    exists: true,
                    create: false,
                });
            }
        }
    }
    out.sort();
    out.dedup_by(|later, kept| {
        let same = later.namespace == kept.namespace && later.rename == kept.rename;
        if same {
            kept.create |= later.create;
        }
        same
    });
    Ok(out)
}

/// The targets per cluster they write to: `None` is the cluster mimeo runs in, `Some(name)` a
/// `RemoteCluster`. `select` names the remote clusters whose labels a selector matches.
pub fn targets_by_cluster(
    targets: &[Target],
    select: impl Fn(&Selector) -> Vec<String>,
) -> Result<BTreeMap<Option<String>, Vec<Target>>, InvalidSelector> {
    let mut out: BTreeMap<Option<String>, Vec<Target>> = BTreeMap::new();
    for target in targets {
        let clusters = match (&target.cluster, &target.cluster_selector) {
            (Some(name), _) if !name.is_empty() => vec![Some(name.clone())],
            (_, Some(labels)) => select(&selector(labels)?).into_iter().map(Some).collect(),
            _ => vec![None],
        };
        for cluster in clusters {
            out.entry(cluster).or_default().push(target.clone());
        }
    }
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
        let got = placements(&targets, &namespaces, true).unwrap();
        let got: Vec<(&str, Option<&str>, bool)> = got
            .iter()
            .map(|p| (p.namespace.as_deref().unwrap(), p.rename.as_deref(), p.exists))
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
        let got = placements(&targets, &namespaces, true).unwrap();
        let got: Vec<(&str, bool)> = got
            .iter()
            .map(|p| (p.namespace.as_deref().unwrap(), p.exists))
            .collect();
        assert_eq!(got, [("going", false), ("staying", true)]);
    }

    #[test]
    fn targets_are_grouped_by_cluster() {
        let targets: Vec<Target> = serde_json::from_value(serde_json::json!([
            {"namespace": "apps"},
            {"namespace": "apps", "cluster": ""},
            {"namespace": "apps", "cluster": "eu1"},
            {"namespace": "web", "clusterSelector": {"matchLabels": {"tier": "edge"}}},
        ]))
        .unwrap();
        let edge = |s: &Selector| -> Vec<String> {
            let mut labels = BTreeMap::new();
            labels.insert("tier".to_string(), "edge".to_string());
            if s.matches(&labels) {
                vec!["eu1".into(), "us1".into()]
            } else {
                vec![]
            }
        };
        let got = targets_by_cluster(&targets, edge).unwrap();
        let got: Vec<(Option<&str>, Vec<&str>)> = got
            .iter()
            .map(|(c, ts)| {
                (
                    c.as_deref(),
                    ts.iter().map(|t| t.namespace.as_deref().unwrap()).collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (None, vec!["apps", "apps"]),
                (Some("eu1"), vec!["apps", "web"]),
                (Some("us1"), vec!["web"]),
            ]
        );
    }

    #[test]
    fn a_cluster_scoped_kind_has_one_place_per_target() {
        let targets: Vec<Target> = serde_json::from_value(serde_json::json!([
            {"cluster": "eu1"},
            {"cluster": "eu1", "name": "renamed"},
        ]))
        .unwrap();
        let got = placements(&targets, &[ns("ignored", &[])], false).unwrap();
        let got: Vec<(Option<&str>, Option<&str>)> = got
            .iter()
            .map(|p| (p.namespace.as_deref(), p.rename.as_deref()))
            .collect();
        assert_eq!(got, [(None, None), (None, Some("renamed"))]);
    }

    #[test]
    fn create_survives_deduplication() {
        let targets: Vec<Target> = serde_json::from_value(serde_json::json!([
            {"namespace": "new"},
            {"namespace": "new", "createNamespace": true},
        ]))
        .unwrap();
        let got = placements(&targets, &[], true).unwrap();
        assert_eq!(got.len(), 1);
        assert!(got[0].create && !got[0].exists);
    }

    #[test]
    fn an_empty_selector_selects_every_namespace() {
        let namespaces = [ns("a", &[]), ns("b", &[("x", "y")])];
        let targets = [Target {
            namespace_selector: Some(LabelSelector::default()),
            ..Default::default()
        }];
        assert_eq!(placements(&targets, &namespaces, true).unwrap().len(), 2);
    }
}
