//! `rewrite-namespace`: rewrites the namespace names a Kyverno policy names, for the copy's
//! target. Two families: `kyverno.io` `Policy` and `ClusterPolicy` (`v1`, `v2beta1`), whose
//! `spec.rules[]` name namespaces in filters, generate targets, contexts and preconditions; and
//! the CEL kinds of `policies.kyverno.io` (`ValidatingPolicy`, `NamespacedValidatingPolicy`, ...),
//! whose namespace selectors and CEL expressions do. Plain namespace names are rewritten always;
//! string literals inside JMESPath and CEL expressions (found by parsing them) and wildcards only
//! when the config asks. Never `metadata`: the host sets the copy's namespace. Other objects are
//! written unchanged.

mod cel_policies;
mod config;
mod kyverno_rules;
mod literals;
mod rewriter;

use config::Config;
use mimeo_plugin_sdk::{Context, Guest, Outcome, PluginInfo, log, outcome, parse_object};
use rewriter::Rewriter;
use serde_json::Value;

/// Which policy family an object is of, if any.
enum Family {
    Rules,
    Cel,
}

/// The family of `api_version` `kind`; an error for a version of a known kind this plugin does
/// not know, rather than a guess.
fn family(api_version: &str, kind: &str) -> Result<Option<Family>, String> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let (family, versions, what) = match group {
        "kyverno.io" if matches!(kind, "Policy" | "ClusterPolicy") => {
            (Family::Rules, &kyverno_rules::VERSIONS[..], "rules")
        }
        "policies.kyverno.io" if cel_policies::KINDS.contains(&kind) => {
            (Family::Cel, &cel_policies::VERSIONS[..], "fields")
        }
        _ => return Ok(None),
    };
    if !versions.contains(&version) {
        let mut known: Vec<String> = versions.iter().map(|v| format!("{group}/{v}")).collect();
        let last = known.pop().unwrap_or_default();
        return Err(format!(
            "{api_version} {kind}: this plugin knows the {what} of {} and {last} only",
            known.join(", ")
        ));
    }
    Ok(Some(family))
}

struct RewriteNamespace;

impl Guest for RewriteNamespace {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "rewrite-namespace".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description:
                "Rewrites namespace references in Kyverno policies (Policy, ClusterPolicy and the CEL \
                          kinds of policies.kyverno.io) for the copy's target"
                    .into(),
            kinds: kyverno_rules::VERSIONS
                .iter()
                .flat_map(|v| ["Policy", "ClusterPolicy"].map(|k| format!("kyverno.io/{v}/{k}")))
                .chain(
                    cel_policies::VERSIONS
                        .iter()
                        .flat_map(|v| cel_policies::KINDS.map(|k| format!("policies.kyverno.io/{v}/{k}"))),
                )
                .collect(),
        }
    }

    fn validate_config(config: String) -> Result<(), String> {
        Config::parse(&config).map(drop)
    }

    fn transform(ctx: Context, object: String) -> Result<Outcome, String> {
        let config = Config::parse(&ctx.config)?;
        let before = parse_object(&object)?;
        let api_version = before
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = before.get("kind").and_then(Value::as_str).unwrap_or_default();
        let Some(family) = family(api_version, kind)? else {
            log::debug(&format!(
                "{api_version} {kind} is not a Kyverno policy this plugin knows: left unchanged"
            ));
            return Ok(Outcome::Unchanged);
        };
        let mut after = before.clone();
        let mut rewriter = Rewriter {
            config: &config,
            ctx: &ctx,
            changes: Vec::new(),
        };
        if let Some(spec) = after.get_mut("spec") {
            match family {
                Family::Rules => rewriter.rules(spec)?,
                Family::Cel => rewriter.cel_policy(spec)?,
            }
        }
        if rewriter.changes.is_empty() {
            log::debug("no namespace references to rewrite");
        } else {
            let n = rewriter.changes.len();
            log::debug(&format!(
                "rewrote {n} namespace reference{}: {}",
                if n == 1 { "" } else { "s" },
                rewriter.changes.join("; ")
            ));
        }
        Ok(outcome(&before, after))
    }
}

mimeo_plugin_sdk::export!(RewriteNamespace);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, From, is_namespace_name};
    use crate::kyverno_rules::is_namespace_variable;
    use mimeo_plugin_sdk::{ObjectRef, Target};
    use serde_json::json;

    fn context(config: &Value, source_ns: Option<&str>, target_ns: Option<&str>, cluster: &str) -> Context {
        Context {
            rule: "SyncRule/platform/test".into(),
            source: ObjectRef {
                api_version: "kyverno.io/v1".into(),
                kind: "Policy".into(),
                namespace: source_ns.map(Into::into),
                name: "p".into(),
            },
            source_cluster: String::new(),
            target: Target {
                cluster: cluster.into(),
                namespace: target_ns.map(Into::into),
                name: "p".into(),
            },
            config: config.to_string(),
            inputs: Vec::new(),
        }
    }

    /// Transforms `object` for a copy from `default` to `tenant-a` in cluster `eu1`.
    fn run(config: Value, object: &Value) -> Result<Value, String> {
        run_in(context(&config, Some("default"), Some("tenant-a"), "eu1"), object)
    }

    fn run_in(ctx: Context, object: &Value) -> Result<Value, String> {
        RewriteNamespace::validate_config(ctx.config.clone())?;
        match RewriteNamespace::transform(ctx, object.to_string())? {
            Outcome::Unchanged => Ok(object.clone()),
            Outcome::Write(json) => Ok(serde_json::from_str(&json).unwrap()),
            Outcome::Skip(reason) => panic!("skipped: {reason}"),
        }
    }

    fn policy(rule: Value) -> Value {
        json!({"apiVersion": "kyverno.io/v1", "kind": "Policy",
               "metadata": {"name": "p", "namespace": "tenant-a"},
               "spec": {"rules": [rule]}})
    }

    fn to_target() -> Value {
        json!({"rewrites": [{"from": "default", "to": "{{target.namespace}}"},
                            {"from": "shared", "to": "shared-{{ target.cluster }}"}]})
    }

    #[test]
    fn fixtures() {
        mimeo_plugin_sdk::fixtures::run_all::<RewriteNamespace>(env!("CARGO_MANIFEST_DIR"));
    }

    #[test]
    fn config() {
        let err = |c: &str| Config::parse(c).unwrap_err();
        assert!(err("").contains("missing field `rewrites`"));
        assert!(err("{}").contains("missing field `rewrites`"));
        assert!(err("[]").contains("expected an object"));
        assert!(err("{").starts_with("invalid config: "));
        assert!(err(r#"{"rewrite": []}"#).contains("unknown field `rewrite`"));
        assert!(err(r#"{"rewrites": [], "x": 1}"#).contains("unknown field `x`, expected `rewrites`"));
        assert!(err(r#"{"rewrites": []}"#).contains("rewrites is empty"));
        assert!(err(r#"{"rewrites": "default"}"#).contains("rewrites must be a list"));
        assert!(err(r#"{"rewrites": ["default"]}"#).contains("rewrites[0] must be an object"));
        assert!(err(r#"{"rewrites": [{"from": "a"}]}"#).contains("missing field `rewrites[0].to`"));
        assert!(err(r#"{"rewrites": [{"to": "a"}]}"#).contains("missing field `rewrites[0].from`"));
        assert!(
            err(r#"{"rewrites": [{"from": 1, "to": "a"}]}"#)
                .contains("rewrites[0].from must be a string, not the number 1")
        );
        assert!(err(r#"{"rewrites": [{"from": "", "to": "a"}]}"#).contains("rewrites[0].from is empty"));
        assert!(err(r#"{"rewrites": [{"from": "a", "to": ""}]}"#).contains("rewrites[0].to is empty"));
        assert!(
            err(r#"{"rewrites": [{"from": "team-*", "to": "a"}]}"#)
                .contains("rewrites[0].from \"team-*\" is not a namespace name")
        );
        assert!(
            err(r#"{"rewrites": [{"from": "a", "to": "b", "too": "c"}]}"#)
                .contains("rewrites[0]: unknown field `too`, expected `from` and `to`")
        );
        assert!(
            err(r#"{"rewrites": [{"from": "a", "to": "{{target.name}}"}]}"#).contains(
                "unknown placeholder {{target.name}}; known: {{target.namespace}}, {{target.cluster}}, \
                 {{source.namespace}}"
            )
        );
        assert!(err(r#"{"from": "a", "to": "{{target.namespace"}"#).contains("without a closing"));
        assert!(
            err(r#"{"from": "a", "to": "Tenant_A"}"#).contains("to: \"Tenant_A\" is not a namespace name")
        );
        assert!(err(r#"{"from": "a", "to": "t_{{target.namespace}}"}"#).contains("around its placeholders"));
        assert!(err(r#"{"from": "a", "to": "b", "x": 1}"#).contains("unknown field `x`, expected `from`"));
        assert!(
            err(r#"{"rewrites": [{"from": "*", "to": "a"}, {"from": "b", "to": "c"}]}"#)
                .contains("it must be the last rewrite, or rewrites[1] would never apply")
        );
        assert!(
            err(r#"{"rewrites": [{"from": "a", "to": "b"}, {"from": "a", "to": "c"}]}"#)
                .contains("rewrites[1] rewrites \"a\" again; rewrites[0] already does")
        );
        // The shorthands: one object instead of the list, and the config being that object.
        for shorthand in [
            r#"{"from": "default", "to": "{{target.namespace}}"}"#,
            r#"{"rewrites": {"from": "default", "to": "{{target.namespace}}"}}"#,
        ] {
            let config = Config::parse(shorthand).unwrap();
            assert_eq!(config.rewrites.len(), 1);
            assert_eq!(config.rewrites[0].from, From::Name("default".into()));
        }
        assert!(
            Config::parse(r#"{"rewrites": [{"from": "a", "to": "b"}, {"from": "*", "to": "c"}]}"#).is_ok()
        );
    }

    #[test]
    fn names_and_variables() {
        assert!(is_namespace_name("default"));
        assert!(is_namespace_name("team-a1"));
        assert!(!is_namespace_name("*"));
        assert!(!is_namespace_name("kube-*"));
        assert!(!is_namespace_name("?*"));
        assert!(!is_namespace_name("Default"));
        assert!(!is_namespace_name("{{request.namespace}}"));
        assert!(!is_namespace_name(&"a".repeat(64)));
        assert!(is_namespace_variable(&json!("{{request.namespace}}")));
        assert!(is_namespace_variable(&json!(
            "{{ request.object.metadata.namespace }}"
        )));
        assert!(!is_namespace_variable(&json!("{{request.object.metadata.name}}")));
        assert!(!is_namespace_variable(&json!("ns-{{request.namespace}}")));
        assert!(!is_namespace_variable(&json!(" {{request.namespace}}")));
        assert!(!is_namespace_variable(&json!(["{{request.namespace}}"])));
    }

    #[test]
    fn every_path() {
        let rule = json!({
            "name": "r",
            "match": {"resources": {"namespaces": ["default", "kube-system"]},
                      "any": [{"resources": {"namespaces": ["shared"]}}],
                      "all": [{"resources": {"namespaces": ["default"], "kinds": ["Pod"]}}]},
            "exclude": {"resources": {"namespaces": ["default"]},
                        "any": [{"resources": {"namespaces": ["default"]}}],
                        "all": [{"resources": {"namespaces": ["shared"]}}]},
            "generate": {"namespace": "default", "clone": {"namespace": "shared", "name": "default"},
                         "cloneList": {"namespace": "default", "kinds": ["v1/Secret"]}},
            "preconditions": {"any": [{"key": "{{request.namespace}}", "operator": "Equals", "value": "default"}],
                              "all": [{"key": "shared", "operator": "NotEquals",
                                       "value": "{{request.object.metadata.namespace}}"},
                                      {"key": "{{ request.namespace }}", "operator": "AnyIn",
                                       "value": ["default", "other", 3, "shared"]}]}
        });
        let got = run(to_target(), &policy(rule)).unwrap();
        let want = policy(json!({
            "name": "r",
            "match": {"resources": {"namespaces": ["tenant-a", "kube-system"]},
                      "any": [{"resources": {"namespaces": ["shared-eu1"]}}],
                      "all": [{"resources": {"namespaces": ["tenant-a"], "kinds": ["Pod"]}}]},
            "exclude": {"resources": {"namespaces": ["tenant-a"]},
                        "any": [{"resources": {"namespaces": ["tenant-a"]}}],
                        "all": [{"resources": {"namespaces": ["shared-eu1"]}}]},
            "generate": {"namespace": "tenant-a", "clone": {"namespace": "shared-eu1", "name": "default"},
                         "cloneList": {"namespace": "tenant-a", "kinds": ["v1/Secret"]}},
            "preconditions": {"any": [{"key": "{{request.namespace}}", "operator": "Equals", "value": "tenant-a"}],
                              "all": [{"key": "shared-eu1", "operator": "NotEquals",
                                       "value": "{{request.object.metadata.namespace}}"},
                                      {"key": "{{ request.namespace }}", "operator": "AnyIn",
                                       "value": ["tenant-a", "other", 3, "shared-eu1"]}]}
        }));
        assert_eq!(got, want);
        // Idempotent: the result has nothing left to rewrite.
        let ctx = context(&to_target(), Some("default"), Some("tenant-a"), "eu1");
        assert!(matches!(
            RewriteNamespace::transform(ctx, want.to_string()),
            Ok(Outcome::Unchanged)
        ));
    }

    #[test]
    fn leaves_alone() {
        let rule = json!({
            "name": "r",
            "match": {"any": [{"resources": {"namespaces": ["kube-*", "*", "?efault", "{{request.namespace}}"],
                                             "namespaceSelector": {"matchLabels": {"ns": "default"}}},
                               "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "default"}]}]},
            "generate": {"namespace": "{{request.object.metadata.name}}",
                         "foreach": [{"namespace": "default"}],
                         "data": {"data": {"from": "default"}}},
            "mutate": {"targets": [{"name": "default"}],
                       "patchStrategicMerge": {"metadata": {"namespace": "default"}}},
            "validate": {"deny": {"conditions": {"any": [{"key": "{{request.namespace}}", "operator": "Equals",
                                                          "value": "default"}]}}},
            "preconditions": {"any": [
                // the other side is not the request's namespace
                {"key": "{{request.object.metadata.labels.env}}", "operator": "Equals", "value": "default"},
                // not a comparison of names
                {"key": "{{request.namespace}}", "operator": "GreaterThan", "value": "default"},
                {"key": "{{request.namespace}}", "value": "default"},
                // wildcards and variables on the plain side
                {"key": "{{request.namespace}}", "operator": "Equals", "value": "def*"},
                {"key": "{{request.namespace}}", "operator": "Equals", "value": "{{request.namespace}}"},
                // a list key
                {"key": ["default"], "operator": "AnyIn", "value": "{{request.namespace}}"}
            ]}
        });
        let mut object = policy(rule);
        object["metadata"]["namespace"] = json!("default");
        object["spec"]["webhookConfiguration"] = json!({"namespace": "default"});
        object["status"] = json!({"autogen": {"rules": [{"generate": {"namespace": "default"}}]}});
        let ctx = context(&to_target(), Some("default"), Some("tenant-a"), "eu1");
        let answer = RewriteNamespace::transform(ctx, object.to_string());
        assert!(matches!(answer, Ok(Outcome::Unchanged)), "{answer:?}");
    }

    #[test]
    fn wildcard_from() {
        let config = json!({"rewrites": [{"from": "kube-system", "to": "kube-system"},
                                         {"from": "*", "to": "{{target.namespace}}"}]});
        let rule = json!({"match": {"any": [{"resources": {"namespaces":
            ["default", "kube-system", "team-1", "kube-*", "*", "{{request.namespace}}"]}}]}});
        let got = run(config, &policy(rule)).unwrap();
        assert_eq!(
            got["spec"]["rules"][0]["match"]["any"][0]["resources"]["namespaces"],
            json!([
                "tenant-a",
                "kube-system",
                "tenant-a",
                "kube-*",
                "*",
                "{{request.namespace}}"
            ])
        );
    }

    #[test]
    fn legacy_preconditions_and_v2beta1() {
        let mut object = policy(json!({"preconditions": [
            {"key": "{{request.namespace}}", "operator": "In", "value": ["default", "shared"]},
            {"key": "default", "operator": "Equals", "value": "{{request.namespace}}"}]}));
        object["apiVersion"] = json!("kyverno.io/v2beta1");
        let got = run(to_target(), &object).unwrap();
        assert_eq!(
            got["spec"]["rules"][0]["preconditions"],
            json!([{"key": "{{request.namespace}}", "operator": "In", "value": ["tenant-a", "shared-eu1"]},
                   {"key": "tenant-a", "operator": "Equals", "value": "{{request.namespace}}"}])
        );
    }

    #[test]
    fn other_kinds_and_versions() {
        let config = json!({"from": "default", "to": "{{target.namespace}}"});
        let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "c", "namespace": "tenant-a"},
                               "spec": {"rules": [{"generate": {"namespace": "default"}}]}});
        let exception = json!({"apiVersion": "kyverno.io/v2", "kind": "PolicyException",
                               "metadata": {"name": "e", "namespace": "tenant-a"},
                               "spec": {"match": {"any": [{"resources": {"namespaces": ["default"]}}]}}});
        let other_group = json!({"apiVersion": "policies.kyverno.io/v1alpha1", "kind": "Policy",
                                 "metadata": {"name": "e", "namespace": "tenant-a"},
                                 "spec": {"rules": [{"generate": {"namespace": "default"}}]}});
        for object in [configmap, exception, other_group] {
            let ctx = context(&config, Some("default"), Some("tenant-a"), "");
            assert!(matches!(
                RewriteNamespace::transform(ctx, object.to_string()),
                Ok(Outcome::Unchanged)
            ));
        }
        let mut future = policy(json!({"generate": {"namespace": "default"}}));
        future["apiVersion"] = json!("kyverno.io/v3");
        assert!(run(config, &future).unwrap_err().contains(
            "kyverno.io/v3 Policy: this plugin knows the rules of kyverno.io/v1 and kyverno.io/v2beta1"
        ));
    }

    #[test]
    fn empty_placeholders() {
        let mut cluster_policy = policy(json!({"generate": {"namespace": "default"}}));
        cluster_policy["kind"] = json!("ClusterPolicy");
        cluster_policy["metadata"] = json!({"name": "p"});
        let err = run_in(context(&to_target(), None, None, "eu1"), &cluster_policy).unwrap_err();
        assert!(
            err.contains(
                "spec.rules[0].generate.namespace: cannot rewrite \"default\" with rewrites[0] \
                 (to \"{{target.namespace}}\"): {{target.namespace}} is empty"
            ),
            "{err}"
        );
        // Nothing to rewrite: the empty placeholder does not matter.
        let mut other = cluster_policy.clone();
        other["spec"]["rules"][0]["generate"]["namespace"] = json!("kyverno");
        assert_eq!(
            run_in(context(&to_target(), None, None, "eu1"), &other).unwrap(),
            other
        );
        // An empty cluster name, and a source namespace.
        let mut shared = cluster_policy.clone();
        shared["spec"]["rules"][0]["generate"]["namespace"] = json!("shared");
        let err = run_in(context(&to_target(), None, None, ""), &shared).unwrap_err();
        assert!(err.contains("{{target.cluster}} is empty: the copy goes to the cluster mimeo runs in"));
        let config = json!({"from": "default", "to": "from-{{source.namespace}}"});
        let err = run_in(context(&config, None, None, ""), &cluster_policy).unwrap_err();
        assert!(err.contains("{{source.namespace}} is empty"));
        let got = run_in(context(&config, Some("platform"), None, ""), &cluster_policy).unwrap();
        assert_eq!(
            got["spec"]["rules"][0]["generate"]["namespace"],
            json!("from-platform")
        );
        // A result that is not a namespace name.
        let config = json!({"from": "default", "to": "{{target.namespace}}-{{target.namespace}}"});
        let long = "a".repeat(40);
        let err = run_in(context(&config, None, Some(&long), ""), &cluster_policy).unwrap_err();
        assert!(err.contains("which is not a namespace name"), "{err}");
    }

    #[test]
    fn never_touches_metadata_or_other_fields() {
        let mut object = policy(json!({"generate": {"namespace": "default"}}));
        object["metadata"]["namespace"] = json!("default");
        object["metadata"]["labels"] = json!({"ns": "default"});
        let got = run(to_target(), &object).unwrap();
        assert_eq!(got["metadata"], object["metadata"]);
        assert_eq!(
            got["spec"]["rules"][0]["generate"]["namespace"],
            json!("tenant-a")
        );
    }

    fn with_options(expressions: bool, wildcards: bool) -> Value {
        let mut config = to_target();
        config["expressions"] = json!(expressions);
        config["wildcards"] = json!(wildcards);
        config
    }

    #[test]
    fn options_in_the_config() {
        let err = |c: &str| Config::parse(c).unwrap_err();
        assert!(
            err(r#"{"rewrites": [{"from": "a", "to": "b"}], "expressions": "yes"}"#)
                .contains("expressions must be true or false, not the string \"yes\"")
        );
        assert!(
            err(r#"{"from": "a", "to": "b", "wildcards": true}"#)
                .contains("wildcards goes beside a list of rewrites")
        );
        assert!(
            err(r#"{"rewrites": [{"from": "a", "to": "b"}], "x": 1}"#)
                .contains("unknown field `x`, expected `rewrites`, `expressions` or `wildcards`")
        );
        let config =
            Config::parse(r#"{"rewrites": [{"from": "a", "to": "b"}], "expressions": true}"#).unwrap();
        assert!(config.expressions && !config.wildcards);
    }

    /// Literals inside JMESPath (Kyverno's `{{ }}` and context `jmesPath`) and CEL (`validate.cel`,
    /// `celPreconditions`) of `kyverno.io` rules, only with `expressions` on; and never by `*`.
    #[test]
    fn expressions_in_kyverno_rules() {
        let rule = json!({
            "name": "r",
            "context": [{"name": "ns", "variable": {"jmesPath": "request.namespace == 'default'"}},
                        {"name": "cm", "apiCall": {"urlPath": "/api/v1/namespaces/default/configmaps",
                                                    "jmesPath": "items[?metadata.namespace == `\"default\"`]"}}],
            "preconditions": {"all": [{"key": "{{ request.namespace == 'default' || request.namespace == 'default-x' }}",
                                       "operator": "Equals", "value": true}]},
            "celPreconditions": [{"name": "ns", "expression": "request.namespace in ['default', 'shared']"}],
            "validate": {"message": "not in {{ 'default' }}: {{request.object.metadata.name}}",
                         "cel": {"expressions": [{"expression": "object.metadata.namespace != \"default\"",
                                                  "messageExpression": "'default is ' + 'reserved'"}]}}
        });
        let got = run(with_options(true, false), &policy(rule.clone())).unwrap();
        let r = &got["spec"]["rules"][0];
        assert_eq!(
            r["context"][0]["variable"]["jmesPath"],
            json!("request.namespace == 'tenant-a'")
        );
        assert_eq!(
            r["context"][1]["apiCall"]["urlPath"],
            json!("/api/v1/namespaces/tenant-a/configmaps")
        );
        assert_eq!(
            r["context"][1]["apiCall"]["jmesPath"],
            json!("items[?metadata.namespace == `\"tenant-a\"`]")
        );
        assert_eq!(
            r["preconditions"]["all"][0]["key"],
            json!("{{ request.namespace == 'tenant-a' || request.namespace == 'default-x' }}")
        );
        assert_eq!(
            r["celPreconditions"][0]["expression"],
            json!("request.namespace in ['tenant-a', 'shared-eu1']")
        );
        assert_eq!(
            r["validate"]["message"],
            json!("not in {{ 'tenant-a' }}: {{request.object.metadata.name}}")
        );
        assert_eq!(
            r["validate"]["cel"]["expressions"][0],
            json!({"expression": "object.metadata.namespace != \"tenant-a\"",
                   "messageExpression": "'default is ' + 'reserved'"})
        );
        // Off by default: only the URL path, a plain place, changes.
        let got = run(to_target(), &policy(rule.clone())).unwrap();
        let mut want = policy(rule.clone());
        want["spec"]["rules"][0]["context"][1]["apiCall"]["urlPath"] =
            json!("/api/v1/namespaces/tenant-a/configmaps");
        assert_eq!(got, want);
        // `*` never applies inside an expression.
        let config = json!({"rewrites": [{"from": "*", "to": "{{target.namespace}}"}], "expressions": true});
        let got = run(
            config,
            &policy(json!({"context": [{"name": "n",
            "variable": {"jmesPath": "request.namespace == 'default'"}}]})),
        )
        .unwrap();
        assert_eq!(
            got["spec"]["rules"][0]["context"][0]["variable"]["jmesPath"],
            json!("request.namespace == 'default'")
        );
        // An expression that does not parse is an error naming where it is.
        let broken = policy(
            json!({"preconditions": {"all": [{"key": "{{ request.namespace = 'default' }}",
                                                               "operator": "Equals", "value": true}]}}),
        );
        let err = run(with_options(true, false), &broken).unwrap_err();
        assert!(
            err.starts_with("spec.rules[0].preconditions.all[0].key: "),
            "{err}"
        );
        assert!(err.contains("'=' is not valid"), "{err}");
        assert!(err.contains("\"expressions\": true"), "{err}");
        assert!(run(to_target(), &broken).is_ok());
        // Kyverno's ternary, which this parser cannot read: left as it is when it quotes no
        // rewritten namespace (as in the library's schedule-based-quotas policy).
        let ternary = policy(json!({"mutate": {"patchStrategicMerge": {"spec": {"hard": {
            "cpu": "{{ isBusinessHours ? '20' : '10' }}"}}}}}));
        assert_eq!(run(with_options(true, false), &ternary).unwrap(), ternary);
        let ternary = policy(json!({"mutate": {"patchStrategicMerge": {"spec": {"hard": {
            "cpu": "{{ request.namespace == 'default' ? '20' : '10' }}"}}}}}));
        let err = run(with_options(true, false), &ternary).unwrap_err();
        assert!(err.contains("Invalid character: ?"), "{err}");
    }

    #[test]
    fn namespace_names_and_param_refs() {
        let rule = json!({
            "match": {"any": [{"resources": {"kinds": ["Namespace"], "names": ["default", "kube-system", "default-*"]}},
                              {"resources": {"kinds": ["ConfigMap"], "names": ["default"]}}]},
            "validate": {"cel": {"paramRef": {"name": "limits", "namespace": "default"},
                                 "expressions": [{"expression": "true"}]}}
        });
        let got = run(to_target(), &policy(rule)).unwrap();
        let r = &got["spec"]["rules"][0];
        assert_eq!(
            r["match"]["any"][0]["resources"]["names"],
            json!(["tenant-a", "kube-system", "default-*"])
        );
        assert_eq!(
            r["match"]["any"][1]["resources"]["names"],
            json!(["default"]),
            "not Namespaces"
        );
        assert_eq!(r["validate"]["cel"]["paramRef"]["namespace"], json!("tenant-a"));
    }

    #[test]
    fn wildcards_with_the_namespace_as_prefix() {
        let rule = json!({
            "match": {"any": [{"resources": {"namespaces": ["default-*", "default*", "default-?", "defaults-*",
                                                            "kube-*", "*", "shared-*-x"]}}]},
            "preconditions": {"any": [{"key": "{{request.namespace}}", "operator": "AnyIn",
                                       "value": ["default-*", "other-*"]}]}
        });
        let got = run(with_options(false, true), &policy(rule.clone())).unwrap();
        let r = &got["spec"]["rules"][0];
        assert_eq!(
            r["match"]["any"][0]["resources"]["namespaces"],
            json!([
                "tenant-a-*",
                "tenant-a*",
                "tenant-a-?",
                "defaults-*",
                "kube-*",
                "*",
                "shared-eu1-*-x"
            ])
        );
        assert_eq!(
            r["preconditions"]["any"][0]["value"],
            json!(["tenant-a-*", "other-*"])
        );
        let got = run(to_target(), &policy(rule.clone())).unwrap();
        assert_eq!(got, policy(rule));
    }

    #[test]
    fn namespace_selectors_by_name() {
        let selector = json!({"matchLabels": {"kubernetes.io/metadata.name": "default", "team": "default"},
                              "matchExpressions": [
                                  {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["default", "x"]},
                                  {"key": "kubernetes.io/metadata.name", "operator": "Exists"},
                                  {"key": "team", "operator": "In", "values": ["default"]}]});
        let want = json!({"matchLabels": {"kubernetes.io/metadata.name": "tenant-a", "team": "default"},
                          "matchExpressions": [
                              {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["tenant-a", "x"]},
                              {"key": "kubernetes.io/metadata.name", "operator": "Exists"},
                              {"key": "team", "operator": "In", "values": ["default"]}]});
        let got = run(
            to_target(),
            &policy(json!({"match": {"resources": {"namespaceSelector": selector}}})),
        )
        .unwrap();
        assert_eq!(
            got["spec"]["rules"][0]["match"]["resources"]["namespaceSelector"],
            want
        );
        let cel = json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
                         "metadata": {"name": "v"},
                         "spec": {"matchConstraints": {"namespaceSelector": selector},
                                  "validations": [{"expression": "true"}]}});
        let got = run_in(
            context(&to_target(), Some("default"), Some("tenant-a"), "eu1"),
            &cel,
        )
        .unwrap();
        assert_eq!(got["spec"]["matchConstraints"]["namespaceSelector"], want);
    }

    fn cel_policy(kind: &str, version: &str, spec: Value) -> Value {
        json!({"apiVersion": format!("policies.kyverno.io/{version}"), "kind": kind,
               "metadata": {"name": "p", "namespace": "tenant-a"}, "spec": spec})
    }

    #[test]
    fn cel_policy_family() {
        let spec = json!({
            "matchConditions": [{"name": "ns", "expression": "request.namespace == 'default'"}],
            "variables": [{"name": "v", "expression": "object.metadata.namespace == \"default\" ? 'default' : 'x'"}],
            "validations": [{"expression": "variables.v != 'default-x'", "message": "in default",
                             "messageExpression": "'namespace ' + 'default'"}],
            "auditAnnotations": [{"key": "k", "valueExpression": "'default'"}],
            "generate": [{"expression": "generator.apply(\"default\", [variables.v])"}],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: '/metadata/labels/ns', value: 'default'}]"}}],
            "template": {"value": "metadata: {namespace: default}"}
        });
        for (kind, version) in [
            ("NamespacedValidatingPolicy", "v1"),
            ("ValidatingPolicy", "v1beta1"),
            ("NamespacedMutatingPolicy", "v1beta1"),
            ("PolicyException", "v1alpha1"),
        ] {
            let got = run(
                with_options(true, false),
                &cel_policy(kind, version, spec.clone()),
            )
            .unwrap();
            let s = &got["spec"];
            assert_eq!(
                s["matchConditions"][0]["expression"],
                json!("request.namespace == 'tenant-a'"),
                "{kind}"
            );
            assert_eq!(
                s["variables"][0]["expression"],
                json!("object.metadata.namespace == \"tenant-a\" ? 'tenant-a' : 'x'")
            );
            assert_eq!(
                s["validations"][0],
                json!({"expression": "variables.v != 'default-x'", "message": "in default",
                              "messageExpression": "'namespace ' + 'tenant-a'"})
            );
            assert_eq!(s["auditAnnotations"][0]["valueExpression"], json!("'tenant-a'"));
            assert_eq!(
                s["generate"][0]["expression"],
                json!("generator.apply(\"tenant-a\", [variables.v])")
            );
            assert_eq!(
                s["mutations"][0]["jsonPatch"]["expression"],
                json!("[JSONPatch{op: 'add', path: '/metadata/labels/ns', value: 'tenant-a'}]")
            );
            assert_eq!(s["template"], spec["template"]);
            assert_eq!(got["metadata"], cel_policy(kind, version, json!({}))["metadata"]);
        }
        // Without `expressions`, CEL stays as it is.
        let object = cel_policy("NamespacedValidatingPolicy", "v1", spec.clone());
        assert_eq!(run(to_target(), &object).unwrap(), object);
        // A CEL expression that does not parse is an error naming the field.
        let broken = cel_policy(
            "NamespacedValidatingPolicy",
            "v1",
            json!({"validations": [{"expression": "object.metadata.namespace == "}]}),
        );
        let err = run(with_options(true, false), &broken).unwrap_err();
        assert!(err.starts_with("spec.validations[0].expression: "), "{err}");
        assert!(err.contains("Syntax error"), "{err}");
        // A version this plugin does not know, and a kind of the group it does not know.
        let future = cel_policy("ValidatingPolicy", "v2", spec.clone());
        assert!(run(to_target(), &future).unwrap_err().contains(
            "policies.kyverno.io/v2 ValidatingPolicy: this plugin knows the fields of policies.kyverno.io/v1, \
             policies.kyverno.io/v1beta1 and policies.kyverno.io/v1alpha1 only"
        ));
        let other = cel_policy("SomethingNew", "v1", spec);
        assert_eq!(run(with_options(true, false), &other).unwrap(), other);
    }

    /// Kyverno's own namespaced CEL samples (`policies-cel/` of the Kyverno fixtures beside the
    /// repository, read in place, as `tests/sync/kinds.rs` finds them): copied from their namespace to `tenant-a`, only their namespace literals differ.
    #[test]
    fn kyverno_cel_samples() {
        let beside =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/kyverno");
        let kyverno = match std::env::var_os("MIMEO_KYVERNO_FIXTURES") {
            Some(dir) => std::path::PathBuf::from(dir),
            None if !beside.exists() => std::path::PathBuf::from("/work/shared/fixtures/kyverno"),
            None => beside,
        };
        let dir = kyverno.join("policies-cel");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            panic!("the fixtures are missing: {}", dir.display());
        };
        let mut seen = 0;
        for entry in entries {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let object: Value = serde_yaml_ng::from_str(&text).unwrap();
            let from = object["metadata"]["namespace"].as_str().unwrap().to_owned();
            let config =
                json!({"rewrites": [{"from": from, "to": "{{target.namespace}}"}], "expressions": true});
            let got = run_in(context(&config, Some(&from), Some("tenant-a"), ""), &object).unwrap();
            // What changed is exactly the literals: the text with each quoted `from` replaced.
            let want_text = text
                .replace(&format!("'{from}'"), "'tenant-a'")
                .replace(&format!("\"{from}\""), "\"tenant-a\"");
            let mut want: Value = serde_yaml_ng::from_str(&want_text).unwrap();
            want["metadata"] = object["metadata"].clone();
            assert_eq!(got, want, "{}", path.display());
            seen += 1;
        }
        assert_eq!(seen, 4);
    }
}
