//! What part of its own cluster an installation of mimeo may see: all of it, or a list of
//! namespaces (`--watch-namespace`).
//!
//! Limited to namespaces, mimeo needs no cluster-wide permission: it reads and writes only in
//! those namespaces (Roles are enough), so it reconciles no `ClusterSyncRule`s and uses no
//! `RemoteCluster`s, which are cluster-scoped objects.

use super::rule_problem::RuleProblem;
use crate::api::RuleSpec;
use std::collections::BTreeSet;
use std::fmt;

/// The namespaces mimeo may read and write in its own cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// The whole cluster.
    #[default]
    Cluster,
    /// Only these namespaces (never empty).
    Namespaces(BTreeSet<String>),
}

/// A `--watch-namespace` value that is not a namespace name.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "--watch-namespace {0:?} is not a namespace name: lowercase letters, digits and '-', \
     starting and ending with a letter or digit, at most 63 characters"
)]
pub struct InvalidNamespace(pub String);

impl Scope {
    /// The scope the given `--watch-namespace` values make: the whole cluster when there are
    /// none. Repeats are ignored.
    pub fn from_namespaces<I, S>(names: I) -> Result<Self, InvalidNamespace>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut set = BTreeSet::new();
        for name in names {
            let name = name.into();
            if !is_dns_label(&name) {
                return Err(InvalidNamespace(name));
            }
            set.insert(name);
        }
        Ok(if set.is_empty() {
            Scope::Cluster
        } else {
            Scope::Namespaces(set)
        })
    }

    /// Whether mimeo may read and write in `namespace`.
    pub fn contains(&self, namespace: &str) -> bool {
        match self {
            Scope::Cluster => true,
            Scope::Namespaces(names) => names.contains(namespace),
        }
    }

    /// The namespaces, when limited to some.
    pub fn namespaces(&self) -> Option<&BTreeSet<String>> {
        match self {
            Scope::Cluster => None,
            Scope::Namespaces(names) => Some(names),
        }
    }

    /// Why a copy into `namespace` is not attempted, when it is outside the scope.
    pub fn outside(&self, namespace: &str) -> Option<String> {
        (!self.contains(namespace)).then(|| {
            format!(
                "namespace {namespace} is outside the namespaces this mimeo is limited to \
                 ({self}); add it to --watch-namespace (the chart's watchNamespaces) or drop \
                 this target"
            )
        })
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Cluster => f.write_str("the whole cluster"),
            Scope::Namespaces(names) => {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                f.write_str(&names.join(", "))
            }
        }
    }
}

/// A rule this scope cannot serve at all: one that reads from or writes to other clusters, as
/// `RemoteCluster`s are not read when mimeo is limited to namespaces.
pub fn check(scope: &Scope, spec: &RuleSpec) -> Result<(), RuleProblem> {
    if matches!(scope, Scope::Cluster) {
        return Ok(());
    }
    let uses_clusters = spec.source.cluster.as_deref().is_some_and(|c| !c.is_empty())
        || spec
            .targets
            .iter()
            .any(|t| t.cluster.as_deref().is_some_and(|c| !c.is_empty()) || t.cluster_selector.is_some());
    if uses_clusters {
        return Err(RuleProblem {
            reason: "RemoteClustersUnavailable",
            message: format!(
                "this mimeo is limited to namespaces {scope} (--watch-namespace) and does not read \
                 RemoteClusters in that mode; rules that use other clusters need an installation \
                 of mimeo that watches the whole cluster"
            ),
        });
    }
    if spec.targets.iter().any(|t| t.next_to.is_some()) {
        return Err(RuleProblem {
            reason: "NextToUnavailable",
            message: format!(
                "this mimeo is limited to namespaces {scope} (--watch-namespace) and watches no \
                 kind cluster-wide, which targets[].nextTo needs; such rules need an installation \
                 of mimeo that watches the whole cluster"
            ),
        });
    }
    Ok(())
}

fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: serde_json::Value) -> RuleSpec {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn no_namespaces_is_the_whole_cluster() {
        let scope = Scope::from_namespaces(Vec::<String>::new()).unwrap();
        assert_eq!(scope, Scope::Cluster);
        assert!(scope.contains("anything"));
        assert_eq!(scope.outside("anything"), None);
    }

    #[test]
    fn namespaces_limit_what_is_contained() {
        let scope = Scope::from_namespaces(["team-a", "platform", "team-a"]).unwrap();
        assert_eq!(scope.namespaces().map(|n| n.len()), Some(2));
        assert!(scope.contains("platform"));
        assert!(!scope.contains("team-b"));
        let why = scope.outside("team-b").unwrap();
        assert!(why.contains("namespace team-b is outside"), "{why}");
        assert!(why.contains("(platform, team-a)"), "{why}");
    }

    #[test]
    fn a_bad_namespace_name_is_refused_with_the_rule_it_breaks() {
        for bad in ["", "Team", "-a", "a-", "a_b", "a.b", &"x".repeat(64)] {
            let err = Scope::from_namespaces([bad]).unwrap_err();
            assert_eq!(err, InvalidNamespace(bad.to_owned()));
            assert!(err.to_string().contains("not a namespace name"));
        }
        assert!(Scope::from_namespaces(["a", "0", &"x".repeat(63)]).is_ok());
    }

    #[test]
    fn rules_using_other_clusters_are_refused_when_limited_to_namespaces() {
        let scope = Scope::from_namespaces(["platform"]).unwrap();
        let local = spec(json!({"source": {"kind": "Secret", "name": "db"},
                                "targets": [{"namespace": "platform"}]}));
        assert_eq!(check(&scope, &local), Ok(()));
        for remote in [
            json!({"source": {"kind": "Secret", "name": "db", "cluster": "hub"},
                   "targets": [{"namespace": "platform"}]}),
            json!({"source": {"kind": "Secret", "name": "db"},
                   "targets": [{"namespace": "platform", "cluster": "b"}]}),
            json!({"source": {"kind": "Secret", "name": "db"},
                   "targets": [{"namespace": "platform", "clusterSelector": {"matchLabels": {"a": "b"}}}]}),
        ] {
            let problem = check(&scope, &spec(remote.clone())).unwrap_err();
            assert_eq!(problem.reason, "RemoteClustersUnavailable", "{remote}");
            assert!(problem.message.contains("limited to namespaces platform"));
            assert_eq!(check(&Scope::Cluster, &spec(remote)), Ok(()));
        }
    }
}
