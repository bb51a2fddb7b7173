//! Where a rule's inputs are read from, decided before anything is read: the kind must be one the
//! installation syncs, and a `SyncRule` reads only from its own namespace, as it does its source.

use super::kinds::{AllowedKind, KindRef};
use super::ownership::RuleKind;
use super::rule_problem::RuleProblem;
use crate::api::{Input, InputRef};

impl KindRef {
    /// The kind an input names, filling in the API version of the well-known kinds.
    pub fn of_input(from: &InputRef) -> KindRef {
        KindRef::of(from.api_version.as_deref(), &from.kind)
    }
}

/// Refuses inputs of kinds the installation does not sync: reading them would need rights the
/// installation was not given for that purpose.
pub fn check_kinds(inputs: &[Input], allowed: &[AllowedKind]) -> Result<(), RuleProblem> {
    for input in inputs {
        let kind = KindRef::of_input(&input.from);
        if !kind.allowed_by(allowed) {
            return Err(RuleProblem {
                reason: "KindNotAllowed",
                message: format!(
                    "input {}: this installation of mimeo does not sync {} (the controller's \
                     --allow-kind), so it does not read it either",
                    input.name,
                    kind.as_allowed()
                ),
            });
        }
    }
    Ok(())
}

/// The namespace an input is read from, once discovery has said whether its kind is namespaced:
/// a `SyncRule`'s own; in a `ClusterSyncRule` the one it names, else the source's. A
/// cluster-scoped input is only for a `ClusterSyncRule`.
pub fn namespace_of(
    rule: RuleKind,
    rule_namespace: Option<&str>,
    source_namespace: Option<&str>,
    input: &Input,
    namespaced: bool,
) -> Result<Option<String>, RuleProblem> {
    let problem = |reason, message: String| RuleProblem { reason, message };
    match (rule, namespaced) {
        (RuleKind::SyncRule, true) => {
            if input.from.namespace.is_some() {
                return Err(problem(
                    "NotAllowedInSyncRule",
                    format!(
                        "input {}: a SyncRule reads inputs from its own namespace only: remove \
                         inputs[].from.namespace (or use a ClusterSyncRule)",
                        input.name
                    ),
                ));
            }
            Ok(rule_namespace.map(str::to_owned))
        }
        (RuleKind::SyncRule, false) => Err(problem(
            "NotAllowedInSyncRule",
            format!(
                "input {}: {} is cluster-scoped, and a SyncRule reads only from its own namespace: \
                 use a ClusterSyncRule",
                input.name, input.from.kind
            ),
        )),
        (RuleKind::ClusterSyncRule, true) => input
            .from
            .namespace
            .as_deref()
            .or(source_namespace)
            .filter(|ns| !ns.is_empty())
            .map(|ns| Some(ns.to_owned()))
            .ok_or_else(|| {
                problem(
                    "InvalidInput",
                    format!(
                        "input {}: {} lives in a namespace, and the source has none to default to: \
                         set inputs[].from.namespace",
                        input.name, input.from.kind
                    ),
                )
            }),
        (RuleKind::ClusterSyncRule, false) => match &input.from.namespace {
            Some(_) => Err(problem(
                "InvalidInput",
                format!(
                    "input {}: {} is cluster-scoped: remove inputs[].from.namespace",
                    input.name, input.from.kind
                ),
            )),
            None => Ok(None),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(kind: &str, namespace: Option<&str>) -> Input {
        Input {
            name: "registry".into(),
            from: InputRef {
                api_version: None,
                kind: kind.into(),
                name: "host".into(),
                namespace: namespace.map(str::to_owned),
            },
        }
    }

    #[test]
    fn a_sync_rule_reads_inputs_from_its_own_namespace_only() {
        let own = namespace_of(
            RuleKind::SyncRule,
            Some("team"),
            None,
            &input("ConfigMap", None),
            true,
        );
        assert_eq!(own.unwrap().as_deref(), Some("team"));
        let elsewhere = namespace_of(
            RuleKind::SyncRule,
            Some("team"),
            None,
            &input("ConfigMap", Some("kube-system")),
            true,
        )
        .unwrap_err();
        assert_eq!(elsewhere.reason, "NotAllowedInSyncRule");
        assert!(
            elsewhere.message.contains("input registry"),
            "{}",
            elsewhere.message
        );
        let cluster_scoped = namespace_of(
            RuleKind::SyncRule,
            Some("team"),
            None,
            &input("ClusterPolicy", None),
            false,
        );
        assert_eq!(cluster_scoped.unwrap_err().reason, "NotAllowedInSyncRule");
    }

    #[test]
    fn a_cluster_rule_names_the_namespace_or_takes_the_sources() {
        let named = namespace_of(
            RuleKind::ClusterSyncRule,
            None,
            Some("src"),
            &input("ConfigMap", Some("other")),
            true,
        );
        assert_eq!(named.unwrap().as_deref(), Some("other"));
        let defaulted = namespace_of(
            RuleKind::ClusterSyncRule,
            None,
            Some("src"),
            &input("Secret", None),
            true,
        );
        assert_eq!(defaulted.unwrap().as_deref(), Some("src"));
        let none = namespace_of(
            RuleKind::ClusterSyncRule,
            None,
            None,
            &input("Secret", None),
            true,
        );
        assert_eq!(none.unwrap_err().reason, "InvalidInput");
        let scoped = namespace_of(
            RuleKind::ClusterSyncRule,
            None,
            Some("src"),
            &input("ClusterPolicy", Some("x")),
            false,
        );
        assert_eq!(scoped.unwrap_err().reason, "InvalidInput");
    }

    #[test]
    fn inputs_of_kinds_the_installation_does_not_sync_are_refused() {
        let allowed = super::super::kinds::default_allowed_kinds();
        assert!(check_kinds(&[input("ConfigMap", None)], &allowed).is_ok());
        let mut other = input("Deployment", None);
        other.from.api_version = Some("apps/v1".into());
        let refused = check_kinds(&[other], &allowed).unwrap_err();
        assert_eq!(refused.reason, "KindNotAllowed");
        assert!(refused.message.contains("apps/v1/Deployment") || refused.message.contains("Deployment"));
    }
}
