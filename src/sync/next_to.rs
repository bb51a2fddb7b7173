//! `targets[].nextTo`: the namespaces that hold objects of a kind chosen by an [`ObjectSelector`],
//! and which kinds an installation lets rules look at that way.
//!
//! The status of a rule names the namespaces it selects (a copy `NotAccepted` there, say), so a
//! rule choosing namespaces by what they hold tells its author where such objects are. Only the
//! kinds the installation lists may be used; this module must never widen that list.

use super::kinds::{AllowedKind, KindRef};
use super::object_selector::{Matcher, ObjectFacts};
use super::rule_problem::RuleProblem;
use crate::api::{CopyStatus, NextTo, RuleSpec, Target};
use std::collections::{BTreeMap, BTreeSet};

/// What a `nextTo` selector looks at in one object: its labels, and its `spec.purposes` when the
/// watch reads whole objects (a metadata-only watch leaves them empty).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub labels: BTreeMap<String, String>,
    pub purposes: Vec<String>,
}

/// The objects of one kind, by namespace and name.
pub type HeldObjects = BTreeMap<(String, String), Held>;

/// The kind a `nextTo` names.
pub fn kind_of(next_to: &NextTo) -> KindRef {
    KindRef::of(Some(&next_to.api_version), &next_to.kind)
}

/// Whether `matcher` chooses the object at `namespace`/`name` as `held` describes it.
pub fn chooses(matcher: &Matcher, (namespace, name): &(String, String), held: &Held) -> bool {
    matcher.matches(&ObjectFacts {
        namespace,
        name,
        labels: &held.labels,
        purposes: &held.purposes,
    })
}

/// The objects `matcher` chooses: namespace and name, sorted.
pub fn chosen(objects: &HeldObjects, matcher: &Matcher) -> Vec<(String, String)> {
    objects
        .iter()
        .filter(|(at, held)| chooses(matcher, at, held))
        .map(|(at, _)| at.clone())
        .collect()
}

/// The namespaces holding at least one object that `matcher` chooses.
pub fn holding_namespaces(objects: &HeldObjects, matcher: &Matcher) -> BTreeSet<String> {
    chosen(objects, matcher)
        .into_iter()
        .map(|(namespace, _)| namespace)
        .collect()
}

/// Whether a change of one object (`before` to `after`, `None` where it does not exist) may
/// change the namespaces `matcher` selects: it was chosen, or is now.
pub fn changes_choice(
    matcher: &Matcher,
    at: &(String, String),
    before: Option<&Held>,
    after: Option<&Held>,
) -> bool {
    let chosen = |held: Option<&Held>| held.is_some_and(|h| chooses(matcher, at, h));
    chosen(before) != chosen(after)
}

/// The namespaces each `nextTo` of a rule selects, as the controller found them.
#[derive(Clone, Debug, Default)]
pub struct Holders(Vec<(NextTo, BTreeSet<String>)>);

impl Holders {
    pub fn insert(&mut self, next_to: NextTo, namespaces: BTreeSet<String>) {
        self.0.push((next_to, namespaces));
    }

    /// The namespaces found for `next_to`; none when it was not looked up.
    pub fn of(&self, next_to: &NextTo) -> impl Iterator<Item = &str> {
        self.0
            .iter()
            .filter(move |(n, _)| n == next_to)
            .flat_map(|(_, namespaces)| namespaces.iter().map(String::as_str))
    }
}

/// The namespaces to keep a `nextTo`'s copies in while its holders cannot be found: where the
/// rule's copies made by a target with this `nextTo` are (by their name), so that a kind that
/// cannot be read for a while does not cost every copy.
pub fn kept_namespaces(next_to: &NextTo, targets: &[Target], previous: &[CopyStatus]) -> BTreeSet<String> {
    let renames: Vec<Option<&str>> = targets
        .iter()
        .filter(|t| t.next_to.as_ref() == Some(next_to))
        .map(|t| t.name.as_deref())
        .collect();
    previous
        .iter()
        .filter(|c| c.cluster.is_none())
        .filter(|c| {
            renames.iter().any(|rename| match rename {
                // A name made per source and place: any of the rule's copies here may be one.
                Some(name) if name.contains("{{") => true,
                Some(name) => c.name == *name,
                None => c.name == c.source.name,
            })
        })
        .filter_map(|c| c.namespace.clone())
        .collect()
}

/// Refuses a `nextTo` or `forEach` kind the installation does not list (`--next-to-kinds`), in
/// either rule kind: the controller holds read access to those kinds only.
/// A `nextTo` in another cluster is refused too, where the CRD's rule did not run.
pub fn check_allowed(spec: &RuleSpec, allowed: &[AllowedKind]) -> Result<(), RuleProblem> {
    let remote =
        |t: &Target| t.cluster.as_deref().is_some_and(|c| !c.is_empty()) || t.cluster_selector.is_some();
    if spec.targets.iter().any(|t| t.next_to.is_some() && remote(t)) {
        return Err(RuleProblem {
            reason: "InvalidTarget",
            message: "nextTo reads the objects of the cluster mimeo runs in: remove cluster and \
                      clusterSelector from a target with nextTo"
                .to_owned(),
        });
    }
    let followed = spec
        .targets
        .iter()
        .filter_map(|t| t.next_to.as_ref().map(|n| ("nextTo", kind_of(n))))
        .chain(spec.targets.iter().filter_map(|t| {
            t.for_each
                .as_ref()
                .map(|f| ("forEach", super::for_each::kind_of(f)))
        }));
    for (field, kind) in followed {
        if kind.allowed_by(allowed) {
            continue;
        }
        let listed = match allowed.is_empty() {
            true => "no kind".to_owned(),
            false => allowed
                .iter()
                .map(|k| k.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        };
        return Err(RuleProblem {
            reason: "NextToKindNotAllowed",
            message: format!(
                "{field} {kind}: this installation of mimeo lets targets follow {listed}; to allow \
                 {allowed}, add it to the controller's --next-to-kinds (the Helm value \
                 nextTo.kinds, which also grants mimeo get, list and watch on it)",
                allowed = kind.as_allowed()
            ),
        });
    }
    Ok(())
}

/// Why the namespaces of a `nextTo` cannot be found now; the rule's other targets go on.
pub fn not_served(next_to: &NextTo) -> RuleProblem {
    RuleProblem {
        reason: "NextToKindNotServed",
        message: format!(
            "nextTo {}: this cluster does not serve it (no such kind, or its \
             CustomResourceDefinition is not installed): install it, or fix apiVersion and kind; \
             the target follows once it is served",
            kind_of(next_to)
        ),
    }
}

pub fn cluster_scoped(next_to: &NextTo) -> RuleProblem {
    RuleProblem {
        reason: "NextToKindClusterScoped",
        message: format!(
            "nextTo {}: the kind is cluster-scoped, so its objects are in no namespace: name a \
             namespaced kind",
            kind_of(next_to)
        ),
    }
}

pub fn unreadable(next_to: &NextTo, why: &str) -> RuleProblem {
    RuleProblem {
        reason: "NextToKindUnreadable",
        message: format!(
            "nextTo {}: its objects cannot be read ({why}); copies this target made are kept \
             until they can: check that mimeo may get, list and watch the kind (the Helm value \
             nextTo.kinds grants it)",
            kind_of(next_to)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ObjectSelector, PurposeOperator, PurposeRequirement, Target};
    use serde_json::json;

    fn workload() -> Matcher {
        Matcher::new(&ObjectSelector {
            match_purposes: vec![PurposeRequirement {
                operator: PurposeOperator::ContainsAny,
                values: vec!["workload".into()],
            }],
            ..Default::default()
        })
        .unwrap()
    }

    fn held(purposes: &[&str]) -> Held {
        Held {
            labels: BTreeMap::new(),
            purposes: purposes.iter().map(|p| (*p).to_owned()).collect(),
        }
    }

    fn at(namespace: &str, name: &str) -> (String, String) {
        (namespace.to_owned(), name.to_owned())
    }

    #[test]
    fn a_namespace_is_selected_by_any_object_it_holds() {
        let objects: HeldObjects = [
            (at("a", "one"), held(&["mcp"])),
            (at("a", "two"), held(&["workload"])),
            (at("b", "one"), held(&["mcp"])),
            (at("c", "one"), held(&["workload", "single"])),
        ]
        .into();
        let got: Vec<String> = holding_namespaces(&objects, &workload()).into_iter().collect();
        assert_eq!(got, ["a", "c"]);
    }

    #[test]
    fn only_changes_that_flip_the_choice_matter() {
        let m = workload();
        let here = at("a", "x");
        let chosen = held(&["workload"]);
        let other = held(&["mcp"]);
        assert!(changes_choice(&m, &here, None, Some(&chosen)), "created");
        assert!(changes_choice(&m, &here, Some(&chosen), None), "deleted");
        assert!(
            changes_choice(&m, &here, Some(&chosen), Some(&other)),
            "purpose removed"
        );
        assert!(
            !changes_choice(&m, &here, Some(&other), None),
            "an unchosen one went"
        );
        assert!(
            !changes_choice(&m, &here, Some(&chosen), Some(&chosen)),
            "status only"
        );
        assert!(
            !changes_choice(&m, &here, None, Some(&other)),
            "an unchosen one came"
        );
    }

    fn spec_next_to(kind: &str, api_version: &str) -> RuleSpec {
        serde_json::from_value(json!({
            "source": {"kind": "Secret", "name": "s"},
            "targets": [{"namespace": "x"}, {"nextTo": {"apiVersion": api_version, "kind": kind}}],
        }))
        .unwrap()
    }

    #[test]
    fn only_listed_kinds_may_be_followed() {
        let allowed: Vec<AllowedKind> = vec!["Cluster.clusters.openmcp.cloud".parse().unwrap()];
        let cluster = spec_next_to("Cluster", "clusters.openmcp.cloud/v1alpha1");
        assert!(check_allowed(&cluster, &allowed).is_ok());
        let secrets = spec_next_to("Secret", "v1");
        let refused = check_allowed(&secrets, &allowed).unwrap_err();
        assert_eq!(refused.reason, "NextToKindNotAllowed");
        assert!(
            refused
                .message
                .contains("add it to the controller's --next-to-kinds"),
            "{}",
            refused.message
        );
        assert!(
            refused.message.contains("follow Cluster.clusters.openmcp.cloud;"),
            "{}",
            refused.message
        );
        let none = check_allowed(&cluster, &[]).unwrap_err();
        assert!(none.message.contains("follow no kind"), "{}", none.message);
    }

    #[test]
    fn copies_are_kept_where_the_same_next_to_made_them() {
        let targets: Vec<Target> = serde_json::from_value(json!([
            {"namespace": "named", "name": "other"},
            {"nextTo": {"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster"}, "name": "creds"},
        ]))
        .unwrap();
        let previous: Vec<CopyStatus> = serde_json::from_value(json!([
            {"source": {"name": "s"}, "namespace": "a", "name": "creds", "state": "Synced"},
            {"source": {"name": "s"}, "namespace": "named", "name": "other", "state": "Synced"},
            {"source": {"name": "s"}, "cluster": "eu1", "namespace": "b", "name": "creds", "state": "Synced"},
        ]))
        .unwrap();
        let next_to = targets[1].next_to.as_ref().unwrap();
        let kept: Vec<String> = kept_namespaces(next_to, &targets, &previous)
            .into_iter()
            .collect();
        assert_eq!(kept, ["a"]);
    }

    #[test]
    fn next_to_in_another_cluster_is_refused() {
        let spec: RuleSpec = serde_json::from_value(json!({
            "source": {"kind": "Secret", "name": "s"},
            "targets": [{"cluster": "eu1", "nextTo": {"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster"}}],
        }))
        .unwrap();
        let allowed: Vec<AllowedKind> = vec!["Cluster.clusters.openmcp.cloud".parse().unwrap()];
        assert_eq!(
            check_allowed(&spec, &allowed).unwrap_err().reason,
            "InvalidTarget"
        );
    }

    #[test]
    fn holders_are_found_by_their_next_to() {
        let target: Target = serde_json::from_value(json!({
            "nextTo": {"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster",
                       "matchPurposes": [{"operator": "ContainsAny", "values": ["workload"]}]}
        }))
        .unwrap();
        let next_to = target.next_to.unwrap();
        let mut holders = Holders::default();
        holders.insert(next_to.clone(), ["a".to_owned()].into());
        assert_eq!(holders.of(&next_to).collect::<Vec<_>>(), ["a"]);
        let mut other = next_to.clone();
        other.selector.match_purposes.clear();
        assert_eq!(holders.of(&other).count(), 0);
    }
}
