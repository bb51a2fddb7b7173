//! Checks on a rule that the CRD schema cannot make: what the installation allows, and what the
//! kind's scope permits.
//!
//! A rule that fails them copies nothing new and leaves existing copies as they are; its `Ready`
//! condition carries the reason and says what to change.

use super::copy_name::NameTemplate;
use super::for_each;
use super::kinds::{AllowedKind, KindRef};
use super::object_selector::{Matcher, selector};
use super::ownership::RuleKind;
use super::rule_problem::RuleProblem;
use super::targets::namespace_pattern;
use crate::api::{RuleSpec, Target};

/// The kind the rule copies, or the problem that stops it: a kind outside the installation's
/// allow-list, a selector or namespace pattern that cannot be evaluated, or a copy name template
/// that cannot give a name.
pub fn check(spec: &RuleSpec, allowed: &[AllowedKind]) -> Result<KindRef, RuleProblem> {
    let kind = KindRef::of_source(&spec.source);
    if !kind.allowed_by(allowed) {
        let list: Vec<String> = allowed.iter().map(|k| k.to_string()).collect();
        return Err(RuleProblem {
            reason: "KindNotAllowed",
            message: format!(
                "this installation of mimeo syncs {}; {} is not among them (the controller's --allow-kind)",
                list.join(", "),
                kind.as_allowed()
            ),
        });
    }
    let selectors = spec
        .source
        .selector
        .iter()
        .chain(spec.targets.iter().filter_map(|t| t.namespace_selector.as_ref()))
        .chain(spec.targets.iter().filter_map(|t| t.cluster_selector.as_ref()));
    for s in selectors {
        selector(s).map_err(|e| RuleProblem {
            reason: "InvalidSelector",
            message: e.to_string(),
        })?;
    }
    for next_to in spec.targets.iter().filter_map(|t| t.next_to.as_ref()) {
        Matcher::new(&next_to.selector).map_err(|e| RuleProblem {
            reason: "InvalidSelector",
            message: format!("nextTo: {e}"),
        })?;
    }
    for target in &spec.targets {
        check_placeholders(target)?;
    }
    for p in spec.targets.iter().filter_map(|t| t.namespace_pattern.as_deref()) {
        namespace_pattern(p).map_err(|e| RuleProblem {
            reason: "InvalidNamespacePattern",
            message: e.to_string(),
        })?;
    }
    Ok(kind)
}

/// A target's name must give a name, and only a `forEach` target may speak of its object (as
/// `{{object.name}}`, in its name, namespace, cluster and selector values).
fn check_placeholders(target: &Target) -> Result<(), RuleProblem> {
    let object_in = |text: &str| for_each::names_object(text);
    if let Some(name) = &target.name {
        // An object's placeholders are checked with a sample object; the copy's own later.
        let name = match target.for_each {
            Some(_) => name
                .replace(for_each::OBJECT_NAME, "a")
                .replace(for_each::OBJECT_NAMESPACE, "a"),
            None => name.clone(),
        };
        NameTemplate::parse(&name).map_err(|e| RuleProblem {
            reason: "InvalidName",
            message: e.to_string(),
        })?;
    }
    if target.for_each.is_some() {
        return Ok(());
    }
    let labels = [&target.namespace_selector, &target.cluster_selector]
        .into_iter()
        .flatten()
        .flat_map(|s| s.match_labels.iter().flat_map(|m| m.values()));
    let places = target.namespace.iter().chain(target.cluster.iter());
    if labels.chain(places).any(|text| object_in(text)) {
        return Err(RuleProblem {
            reason: "InvalidTarget",
            message: format!(
                "{} and {} name the object of a forEach: add forEach to the target, or remove them",
                for_each::OBJECT_NAME,
                for_each::OBJECT_NAMESPACE
            ),
        });
    }
    Ok(())
}

/// Refuses in a `SyncRule` what only a `ClusterSyncRule` may do: read pull secrets from other
/// namespaces, and create namespaces. The CRD's CEL rules refuse both at admission; this check
/// holds where they do not run (a CRD installed without them, or an older one).
pub fn check_authority(rule: RuleKind, spec: &RuleSpec) -> Result<(), RuleProblem> {
    if rule != RuleKind::SyncRule {
        return Ok(());
    }
    let problem = |message: &str| RuleProblem {
        reason: "NotAllowedInSyncRule",
        message: message.to_owned(),
    };
    if spec.plugin_pull_secrets.iter().any(|s| s.namespace.is_some()) {
        return Err(problem(
            "a SyncRule reads plugin pull secrets from its own namespace: remove \
             pluginPullSecrets[].namespace (or use a ClusterSyncRule)",
        ));
    }
    if spec.targets.iter().any(|t| t.create_namespace) {
        return Err(problem(
            "createNamespace is only for ClusterSyncRules: a SyncRule's author may not create \
             namespaces; remove targets[].createNamespace",
        ));
    }
    if spec.source.namespace.is_some() {
        return Err(problem(
            "a SyncRule copies from its own namespace: remove spec.source.namespace (or use a \
             ClusterSyncRule)",
        ));
    }
    if spec.targets.iter().any(|t| t.for_each.is_some()) {
        return Err(problem(
            "forEach is only for ClusterSyncRules: it reads objects in other clusters and chooses \
             places by what they say; remove targets[].forEach",
        ));
    }
    Ok(())
}

/// Checks the rule's targets against the scope of its kind, once discovery has told it.
/// A cluster-scoped kind (such as `ClusterPolicy`) goes to other clusters only, without
/// namespaces, and only from a `ClusterSyncRule`; a namespaced kind needs a namespace per target.
pub fn check_scope(
    rule: RuleKind,
    spec: &RuleSpec,
    kind: &KindRef,
    namespaced: bool,
) -> Result<(), RuleProblem> {
    let problem = |message: String| RuleProblem {
        reason: "InvalidTarget",
        message,
    };
    if namespaced {
        if spec.targets.iter().any(|t| {
            t.namespace.is_none()
                && t.namespace_selector.is_none()
                && t.namespace_pattern.is_none()
                && t.next_to.is_none()
        }) {
            return Err(problem(format!(
                "{kind} is namespaced: every target needs namespace, namespaceSelector, namespacePattern or nextTo"
            )));
        }
        return Ok(());
    }
    if rule == RuleKind::SyncRule {
        return Err(problem(format!(
            "{kind} is cluster-scoped and cannot live in a SyncRule's namespace: use a ClusterSyncRule"
        )));
    }
    if spec.source.namespace.is_some() {
        return Err(problem(format!(
            "{kind} is cluster-scoped: remove spec.source.namespace"
        )));
    }
    if spec.targets.iter().any(|t| {
        t.namespace.is_some()
            || t.namespace_selector.is_some()
            || t.namespace_pattern.is_some()
            || t.next_to.is_some()
    }) {
        return Err(problem(format!(
            "{kind} is cluster-scoped: its targets name clusters, not namespaces"
        )));
    }
    let to_this_cluster = spec
        .targets
        .iter()
        .any(|t| t.cluster.as_deref().is_none_or(str::is_empty) && t.cluster_selector.is_none());
    if to_this_cluster {
        return Err(problem(format!(
            "{kind} is cluster-scoped, so a copy in this cluster would be the source itself: give \
             every target a cluster or clusterSelector"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Source, Target, Transform};
    use crate::sync::kinds::default_allowed_kinds;

    fn spec() -> RuleSpec {
        serde_json::from_value(serde_json::json!({
            "source": {"kind": "Secret", "name": "a"},
            "targets": [{"namespace": "b"}],
        }))
        .unwrap()
    }

    fn rule(value: serde_json::Value) -> RuleSpec {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn checks() {
        let defaults = default_allowed_kinds();
        assert_eq!(check(&spec(), &defaults).unwrap().to_string(), "v1/Secret");

        let mut policy = spec();
        policy.source = Source {
            kind: "Policy".into(),
            ..policy.source
        };
        assert_eq!(check(&policy, &defaults).unwrap().group(), "kyverno.io");
        let only_secrets: Vec<AllowedKind> = vec!["Secret".parse().unwrap()];
        let refused = check(&policy, &only_secrets).unwrap_err();
        assert_eq!(refused.reason, "KindNotAllowed");
        assert!(
            refused
                .message
                .contains("syncs Secret; Policy.kyverno.io is not among them"),
            "{}",
            refused.message
        );

        let mut remote = spec();
        remote.targets.push(Target {
            cluster: Some("eu1".into()),
            namespace: Some("b".into()),
            ..Default::default()
        });
        assert!(check(&remote, &defaults).is_ok());

        let mut bad_cluster_selector = spec();
        bad_cluster_selector.targets[0].cluster_selector = Some(
            serde_json::from_value(serde_json::json!({
                "matchExpressions": [{"key": "region", "operator": "Near"}]
            }))
            .unwrap(),
        );
        assert_eq!(
            check(&bad_cluster_selector, &defaults).unwrap_err().reason,
            "InvalidSelector"
        );

        let mut transformed = spec();
        transformed.transforms.push(Transform {
            plugin: "file://x.wasm".into(),
            config: None,
            refresh_interval: None,
        });
        assert!(
            check(&transformed, &defaults).is_ok(),
            "transforms are checked when their plugins load"
        );

        let mut bad_selector = spec();
        bad_selector.targets = vec![
            serde_json::from_value(serde_json::json!({
                "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Sometimes"}]}
            }))
            .unwrap(),
        ];
        assert_eq!(
            check(&bad_selector, &defaults).unwrap_err().reason,
            "InvalidSelector"
        );

        let mut bad_pattern = spec();
        bad_pattern.targets = vec![Target {
            namespace_pattern: Some("(".into()),
            ..Default::default()
        }];
        let refused = check(&bad_pattern, &defaults).unwrap_err();
        assert_eq!(refused.reason, "InvalidNamespacePattern");
        assert!(
            refused.message.contains("invalid namespacePattern \"(\""),
            "{}",
            refused.message
        );
        bad_pattern.targets[0].namespace_pattern = Some("app-[0-9]+".into());
        assert!(check(&bad_pattern, &defaults).is_ok());
    }

    #[test]
    fn scopes() {
        let widget = KindRef {
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
        };
        let cluster = RuleKind::ClusterSyncRule;
        let to_clusters = rule(serde_json::json!({
            "source": {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w"},
            "targets": [{"cluster": "eu1"}, {"clusterSelector": {}}],
        }));
        assert!(check_scope(cluster, &to_clusters, &widget, false).is_ok());
        assert!(
            check_scope(RuleKind::SyncRule, &to_clusters, &widget, false)
                .unwrap_err()
                .message
                .contains("use a ClusterSyncRule")
        );
        assert!(
            check_scope(cluster, &to_clusters, &widget, true)
                .unwrap_err()
                .message
                .contains("is namespaced")
        );
        let here = rule(serde_json::json!({
            "source": {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w"},
            "targets": [{"cluster": "eu1"}, {}],
        }));
        assert!(
            check_scope(cluster, &here, &widget, false)
                .unwrap_err()
                .message
                .contains("would be the source itself")
        );
        let with_namespace = rule(serde_json::json!({
            "source": {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w"},
            "targets": [{"cluster": "eu1", "namespace": "x"}],
        }));
        assert!(
            check_scope(cluster, &with_namespace, &widget, false)
                .unwrap_err()
                .message
                .contains("name clusters, not namespaces")
        );
        let source_namespace = rule(serde_json::json!({
            "source": {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w", "namespace": "x"},
            "targets": [{"cluster": "eu1"}],
        }));
        assert!(check_scope(cluster, &source_namespace, &widget, false).is_err());
    }

    #[test]
    fn a_sync_rule_may_not_do_what_its_crd_rules_refuse_even_without_them() {
        let (sync, cluster) = (RuleKind::SyncRule, RuleKind::ClusterSyncRule);
        // (spec, what the message names)
        let refused = [
            (
                serde_json::json!({"source": {"kind": "Secret", "name": "a"}, "targets": [{"namespace": "b"}],
                                   "pluginPullSecrets": [{"name": "p", "namespace": "kube-system"}]}),
                "pluginPullSecrets[].namespace",
            ),
            (
                serde_json::json!({"source": {"kind": "Secret", "name": "a"},
                                   "targets": [{"namespace": "new", "createNamespace": true}]}),
                "createNamespace",
            ),
            (
                serde_json::json!({"source": {"kind": "Secret", "name": "a", "namespace": "kube-system"},
                                   "targets": [{"namespace": "b"}]}),
                "spec.source.namespace",
            ),
        ];
        for (value, named) in refused {
            let spec = rule(value);
            let problem = check_authority(sync, &spec).unwrap_err();
            assert_eq!(problem.reason, "NotAllowedInSyncRule");
            assert!(problem.message.contains(named), "{named}: {}", problem.message);
            assert_eq!(
                check_authority(cluster, &spec),
                Ok(()),
                "a ClusterSyncRule may: {named}"
            );
        }
        let own = rule(
            serde_json::json!({"source": {"kind": "Secret", "name": "a"}, "targets": [{"namespace": "b"}],
                                          "pluginPullSecrets": [{"name": "p"}]}),
        );
        assert_eq!(check_authority(sync, &own), Ok(()));
    }
}

#[cfg(test)]
mod placeholder_tests {
    use super::*;
    use crate::sync::kinds::default_allowed_kinds;

    fn with_target(target: serde_json::Value) -> RuleSpec {
        serde_json::from_value(serde_json::json!({
            "source": {"kind": "Secret", "namespace": "a", "name": "a"},
            "targets": [target],
        }))
        .unwrap()
    }

    #[test]
    fn only_a_for_each_target_speaks_of_its_object() {
        let for_each = serde_json::json!({"apiVersion": "example.com/v1", "kind": "Order"});
        let ok = with_target(serde_json::json!({"forEach": for_each,
            "namespaceSelector": {"matchLabels": {"order": "{{object.name}}"}},
            "name": "{{object.namespace}}-{{source.name}}"}));
        assert!(check(&ok, &default_allowed_kinds()).is_ok());
        for target in [
            serde_json::json!({"namespace": "{{object.namespace}}"}),
            serde_json::json!({"namespaceSelector": {"matchLabels": {"order": "{{object.name}}"}}}),
            serde_json::json!({"cluster": "{{object.name}}", "namespace": "b"}),
        ] {
            let problem = check(&with_target(target.clone()), &default_allowed_kinds()).unwrap_err();
            assert_eq!(problem.reason, "InvalidTarget", "{target}");
        }
        let problem = check(
            &with_target(serde_json::json!({"namespace": "b", "name": "x-{{object.name}}"})),
            &default_allowed_kinds(),
        )
        .unwrap_err();
        assert_eq!(problem.reason, "InvalidName");
        let problem = check_authority(RuleKind::SyncRule, &{
            let mut spec = ok.clone();
            spec.source.namespace = None;
            spec
        })
        .unwrap_err();
        assert!(
            problem.message.contains("forEach is only for ClusterSyncRules"),
            "{problem:?}"
        );
        assert!(check_authority(RuleKind::ClusterSyncRule, &ok).is_ok());
    }
}
