//! Which namespaces a rule's targets select, and the name each copy gets there.

use super::next_to::Holders;
use super::object_selector::{InvalidSelector, selector};
use crate::api::{NextTo, Target};
use kube::core::{Selector, SelectorExt};
use regex::{Regex, RegexBuilder};
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

/// A `namespacePattern` that cannot be compiled (bad syntax, or beyond the size limit).
#[derive(Debug, thiserror::Error)]
#[error("invalid namespacePattern {pattern:?}: {reason}")]
pub struct InvalidPattern {
    pub pattern: String,
    pub reason: String,
}

/// A target that cannot be resolved to namespaces.
#[derive(Debug, thiserror::Error)]
pub enum InvalidTarget {
    #[error(transparent)]
    Selector(#[from] InvalidSelector),
    #[error(transparent)]
    Pattern(#[from] InvalidPattern),
}

/// The most memory a compiled `namespacePattern` may take, so a rule's author cannot make the
/// controller build a huge automaton.
const PATTERN_SIZE_LIMIT: usize = 64 * 1024;

/// Anchors a pattern the way kubernetes-replicator does, so patterns migrated from it select the
/// same namespaces: `^` prepended and `$` appended where missing. Alternations are not grouped
/// (`a|b` becomes `^a|b$`), exactly as the replicator does.
pub fn anchored(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 2);
    if !pattern.starts_with('^') {
        out.push('^');
    }
    out.push_str(pattern);
    if !pattern.ends_with('$') {
        out.push('$');
    }
    out
}

/// Compiles a `namespacePattern`, anchored, within [`PATTERN_SIZE_LIMIT`].
pub fn namespace_pattern(pattern: &str) -> Result<Regex, InvalidPattern> {
    RegexBuilder::new(&anchored(pattern))
        .size_limit(PATTERN_SIZE_LIMIT)
        .dfa_size_limit(PATTERN_SIZE_LIMIT)
        .build()
        .map_err(|e| InvalidPattern {
            pattern: pattern.to_owned(),
            reason: match e {
                regex::Error::CompiledTooBig(limit) => {
                    format!("the compiled pattern would exceed {limit} bytes: make it simpler")
                }
                other => syntax_reason(&other.to_string()),
            },
        })
}

/// The gist of a regex parse error, on one line: its last line without `error: ` (the lines
/// before point into the anchored pattern, which the rule's author did not write).
fn syntax_reason(full: &str) -> String {
    let last = full.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(full);
    last.trim().trim_start_matches("error: ").to_owned()
}

/// The namespaces the targets select in one cluster, given that cluster's namespaces and the
/// namespaces each `nextTo` was found in, each with its rename, without duplicates, sorted.
pub fn placements(
    targets: &[Target],
    namespaces: &[NamespaceInfo],
    holders: &Holders,
    namespaced: bool,
) -> Result<Vec<Placement>, InvalidTarget> {
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
        if let Some(pattern) = &target.namespace_pattern {
            let pattern = namespace_pattern(pattern)?;
            for ns in namespaces
                .iter()
                .filter(|n| !n.terminating && pattern.is_match(&n.name))
            {
                out.push(Placement {
                    namespace: Some(ns.name.clone()),
                    rename: target.name.clone(),
                    exists: true,
                    create: false,
                });
            }
        }
        if let Some(next_to) = &target.next_to {
            let trusted = TrustedNamespaces::of(next_to)?;
            // Only namespaces that exist and stay (an object in a namespace being deleted goes
            // too), and that the target trusts.
            let usable = |name: &str| {
                namespaces
                    .iter()
                    .any(|n| n.name == name && !n.terminating && trusted.trusts(n))
            };
            for ns in holders.of(next_to).filter(|ns| usable(ns)) {
                out.push(Placement {
                    namespace: Some(ns.to_owned()),
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

/// The namespaces whose objects a `nextTo` counts: those it names and those its
/// `namespaceSelector` chooses; every namespace when it does neither.
struct TrustedNamespaces<'a> {
    names: &'a [String],
    selector: Option<Selector>,
}

impl<'a> TrustedNamespaces<'a> {
    fn of(next_to: &'a NextTo) -> Result<Self, InvalidSelector> {
        Ok(TrustedNamespaces {
            names: &next_to.namespaces,
            selector: next_to.namespace_selector.as_ref().map(selector).transpose()?,
        })
    }

    fn trusts(&self, namespace: &NamespaceInfo) -> bool {
        match &self.selector {
            None if self.names.is_empty() => true,
            selector => {
                self.names.contains(&namespace.name)
                    || selector.as_ref().is_some_and(|s| s.matches(&namespace.labels))
            }
        }
    }
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
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

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
        let got = placements(&targets, &namespaces, &Holders::default(), true).unwrap();
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
        let got = placements(&targets, &namespaces, &Holders::default(), true).unwrap();
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
        let got = placements(&targets, &[ns("ignored", &[])], &Holders::default(), false).unwrap();
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
        let got = placements(&targets, &[], &Holders::default(), true).unwrap();
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
        assert_eq!(
            placements(&targets, &namespaces, &Holders::default(), true)
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn patterns_are_anchored_like_kubernetes_replicator() {
        assert_eq!(anchored("app-[0-9]+"), "^app-[0-9]+$");
        assert_eq!(anchored("^app"), "^app$");
        assert_eq!(anchored("app$"), "^app$");
        assert_eq!(anchored("^app$"), "^app$");
        // Not grouped: the replicator's own reading of an alternation.
        assert_eq!(anchored("a|b"), "^a|b$");
    }

    #[test]
    fn a_pattern_matches_whole_names() {
        let re = namespace_pattern("app-[0-9]+").unwrap();
        assert!(re.is_match("app-1"));
        assert!(re.is_match("app-42"));
        assert!(!re.is_match("app-x"));
        assert!(!re.is_match("xapp-1"));
        assert!(!re.is_match("app-1x"));
        // `^a|b$`: starts with a, or ends with b.
        let alt = namespace_pattern("a|b").unwrap();
        assert!(alt.is_match("abc") && alt.is_match("cab") && !alt.is_match("cac"));
    }

    #[test]
    fn a_bad_or_huge_pattern_is_an_error() {
        let bad = namespace_pattern("(").unwrap_err();
        assert_eq!(bad.to_string(), "invalid namespacePattern \"(\": unclosed group");
        let huge = namespace_pattern("[a-z]{1000}[0-9]{1000}").unwrap_err();
        assert!(huge.reason.contains("exceed"), "{huge}");
    }

    #[test]
    fn a_pattern_selects_existing_namespaces_by_name() {
        let mut going = ns("app-3", &[]);
        going.terminating = true;
        let namespaces = [
            ns("app-1", &[]),
            ns("app-x", &[]),
            ns("xapp-1", &[]),
            ns("app-22", &[]),
            going,
        ];
        let targets = [Target {
            namespace_pattern: Some("app-[0-9]+".into()),
            ..Default::default()
        }];
        let got = placements(&targets, &namespaces, &Holders::default(), true).unwrap();
        let got: Vec<&str> = got.iter().map(|p| p.namespace.as_deref().unwrap()).collect();
        assert_eq!(got, ["app-1", "app-22"]);
        let bad = [Target {
            namespace_pattern: Some("(".into()),
            ..Default::default()
        }];
        assert!(matches!(
            placements(&bad, &namespaces, &Holders::default(), true),
            Err(InvalidTarget::Pattern(_))
        ));
    }

    #[test]
    fn next_to_selects_the_live_namespaces_its_holders_were_found_in() {
        let mut going = ns("going", &[]);
        going.terminating = true;
        let namespaces = [ns("a", &[]), ns("b", &[]), going];
        let target: Target = serde_json::from_value(serde_json::json!({
            "nextTo": {"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster"},
            "name": "registry-credentials",
        }))
        .unwrap();
        let mut holders = Holders::default();
        let found = ["a", "going", "not-listed-yet"].map(str::to_owned);
        holders.insert(target.next_to.clone().unwrap(), found.into());
        let got = placements(&[target], &namespaces, &holders, true).unwrap();
        let got: Vec<(&str, Option<&str>)> = got
            .iter()
            .map(|p| (p.namespace.as_deref().unwrap(), p.rename.as_deref()))
            .collect();
        assert_eq!(got, [("a", Some("registry-credentials"))]);
    }

    #[test]
    fn next_to_counts_objects_only_in_the_namespaces_it_trusts() {
        let namespaces = [
            ns("platform", &[]),
            ns("mcp--1", &[("openmcp.cloud/managed-by", "ManagedControlPlane")]),
            ns("tenant", &[]),
        ];
        let found = ["platform", "mcp--1", "tenant"].map(str::to_owned);
        let placed = |next_to: serde_json::Value| {
            let target: Target = serde_json::from_value(serde_json::json!({"nextTo": next_to})).unwrap();
            let mut holders = Holders::default();
            holders.insert(target.next_to.clone().unwrap(), found.clone().into());
            placements(&[target], &namespaces, &holders, true)
                .unwrap()
                .into_iter()
                .map(|p| p.namespace.unwrap())
                .collect::<Vec<_>>()
        };
        let kind = |extra: serde_json::Value| {
            let mut next_to =
                serde_json::json!({"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster"});
            next_to
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            next_to
        };
        assert_eq!(
            placed(kind(serde_json::json!({}))),
            ["mcp--1", "platform", "tenant"]
        );
        assert_eq!(
            placed(kind(serde_json::json!({"namespaces": ["platform"]}))),
            ["platform"]
        );
        let by_label = serde_json::json!({"namespaceSelector": {"matchLabels": {"openmcp.cloud/managed-by": "ManagedControlPlane"}}});
        assert_eq!(placed(kind(by_label)), ["mcp--1"]);
        let both = serde_json::json!({"namespaces": ["platform"],
            "namespaceSelector": {"matchLabels": {"openmcp.cloud/managed-by": "ManagedControlPlane"}}});
        assert_eq!(placed(kind(both)), ["mcp--1", "platform"]);
    }
}
