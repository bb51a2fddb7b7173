//! Kyverno `generate` rules that clone (`clone` or `cloneList`) with `synchronize: true`,
//! triggered by namespaces (`match` on kind `Namespace`, generating into
//! `{{request.object.metadata.name}}`): the copy-into-every-namespace pattern of Kyverno's
//! policy library. Each becomes a `ClusterSyncRule` (a cluster-wide rule, as the policy is).
//! Anything else a rule could do (other triggers, preconditions, variables in names, wildcards in
//! `exclude`) is reported, not guessed.

use super::model::{Inventory, Migration, Place, Tool};
use super::rules::rule_name;
use super::selector::Selector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};

/// The one way a namespace-triggered rule names the namespace it generates into.
fn is_trigger_namespace(value: &Value) -> bool {
    value
        .as_str()
        .and_then(|s| s.strip_prefix("{{"))
        .and_then(|s| s.strip_suffix("}}"))
        .is_some_and(|inner| inner.trim() == "request.object.metadata.name")
}

fn plain(s: &str) -> bool {
    !s.is_empty() && !s.contains(['*', '?', '{', '}'])
}

pub fn translate(inventory: &Inventory, migration: &mut Migration) {
    for policy in &inventory.policies {
        let kind = policy["kind"].as_str().unwrap_or_default();
        let name = policy["metadata"]["name"].as_str().unwrap_or_default();
        for (i, rule) in policy["spec"]["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let generate = &rule["generate"];
            if generate.is_null() || (generate["clone"].is_null() && generate["cloneList"].is_null()) {
                continue;
            }
            let rule_label = rule["name"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("rules[{i}]"));
            let what = format!("{kind} {name}, rule {rule_label}");
            if generate["synchronize"] != json!(true) {
                migration.note(
                    Tool::Kyverno,
                    &what,
                    "clones without synchronize: true (a one-time copy, not kept in sync); not translated",
                );
                continue;
            }
            if kind != "ClusterPolicy" {
                migration.note(Tool::Kyverno, &what, "a namespaced Policy's generate rule is not translated: only ClusterPolicies copy across namespaces");
                continue;
            }
            match namespaces_of(rule) {
                Ok(selector) => rules_for(
                    inventory,
                    migration,
                    &what,
                    name,
                    &rule_label,
                    generate,
                    &selector,
                ),
                Err(why) => migration.note(Tool::Kyverno, &what, why),
            }
        }
    }
}

/// The namespaces a namespace-triggered rule generates into, as one selector.
fn namespaces_of(rule: &Value) -> Result<Selector, String> {
    if !rule["preconditions"].is_null() || !rule["celPreconditions"].is_null() {
        return Err("it has preconditions, which mimeo cannot evaluate; not translated".into());
    }
    if !is_trigger_namespace(&rule["generate"]["namespace"]) {
        return Err(format!(
            "it generates into {}, not into the namespace that triggers it ({{{{request.object.metadata.name}}}}); not translated",
            rule["generate"]["namespace"]
        ));
    }
    let matched = &rule["match"];
    let resources: Vec<&Value> = if !matched["resources"].is_null() {
        vec![&matched["resources"]]
    } else {
        match (matched["any"].as_array(), matched["all"].as_array()) {
            (Some(any), None) if any.len() == 1 => vec![&any[0]["resources"]],
            (None, Some(all)) if all.len() == 1 => vec![&all[0]["resources"]],
            _ => return Err("its match has several filters; only one resources filter is translated".into()),
        }
    };
    let resources = resources[0];
    let kinds: Vec<&str> = resources["kinds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if kinds.is_empty() || !kinds.iter().all(|k| matches!(*k, "Namespace" | "v1/Namespace")) {
        return Err(format!(
            "it is triggered by {kinds:?}, not by namespaces; not translated"
        ));
    }
    let mut selector = Selector::all();
    if let Some(names) = resources["names"].as_array() {
        let names: Vec<String> = names
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        if !names.iter().all(|n| plain(n)) {
            return Err("it matches namespaces by wildcard names; not translated".into());
        }
        selector = Selector::names(names);
    }
    if !resources["selector"].is_null() {
        let label_selector: LabelSelector = serde_json::from_value(resources["selector"].clone())
            .map_err(|e| format!("its selector is not a label selector ({e}); not translated"))?;
        selector = selector.and(&from_label_selector(&label_selector)?);
    }
    let excluded = &rule["exclude"];
    if !excluded.is_null() {
        let resources: Vec<&Value> = if !excluded["resources"].is_null() {
            vec![&excluded["resources"]]
        } else {
            excluded["any"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| &a["resources"])
                .collect()
        };
        for r in resources {
            let only_names = r
                .as_object()
                .is_some_and(|o| o.keys().all(|k| k == "names" || k == "kinds"));
            let names: Vec<&str> = r["names"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if !only_names || names.is_empty() || !names.iter().all(|n| plain(n)) {
                return Err("its exclude is more than plain namespace names; not translated".into());
            }
            for n in names {
                selector = selector.except(n);
            }
        }
    }
    Ok(selector)
}

/// A text selector from a `LabelSelector`, for combining.
fn from_label_selector(s: &LabelSelector) -> Result<Selector, String> {
    let mut parts = Vec::new();
    for (k, v) in s.match_labels.iter().flatten() {
        parts.push(format!("{k}={v}"));
    }
    for e in s.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            other => return Err(format!("the selector operator {other:?} is not a Kubernetes one")),
        });
    }
    Selector::parse(&parts.join(","))
}

const POLICY_LABEL: &str = "generate.kyverno.io/policy-name";
const RULE_LABEL: &str = "generate.kyverno.io/rule-name";

/// The targets for `namespaces`, never `except`: the namespace the source is in, where a copy
/// would be the source itself (empty: no exception).
fn targets_except(namespaces: &Selector, except: &str) -> Vec<Value> {
    match namespaces.only_names() {
        Some(names) => names
            .iter()
            .filter(|n| *n != except)
            .map(|n| json!({"namespace": n}))
            .collect(),
        None => {
            let selector = if except.is_empty() {
                namespaces.clone()
            } else {
                namespaces.except(except)
            };
            vec![
                json!({"namespaceSelector": serde_json::to_value(selector.to_label_selector()).unwrap_or_default()}),
            ]
        }
    }
}

/// A copy's evidence: Kyverno labels what it generates with the policy and rule that generated it.
fn generated_by<'a>(policy: &'a str, rule: &'a str) -> impl Fn(&super::model::Object) -> Option<String> + 'a {
    move |copy| {
        (copy.labels.get(POLICY_LABEL).map(String::as_str) == Some(policy)
            && copy.labels.get(RULE_LABEL).map(String::as_str) == Some(rule))
        .then(|| format!("{POLICY_LABEL}: {policy}, {RULE_LABEL}: {rule}"))
    }
}

/// What both forms of a `generate` rule are translated with.
struct Generator<'a> {
    inventory: &'a Inventory,
    what: &'a str,
    policy: &'a str,
    rule_label: &'a str,
    namespaces: &'a Selector,
    /// The namespaces the policy's match selects now.
    target_namespaces: Vec<String>,
}

impl Generator<'_> {
    fn targets(&self, except: &str) -> Vec<Value> {
        targets_except(self.namespaces, except)
    }

    /// The `ClusterSyncRule` copying `source` (of `kind`) into `targets`.
    fn rule(
        &self,
        kind: &str,
        api_version: &str,
        mut source: Value,
        suffix: &str,
        targets: Vec<Value>,
    ) -> Value {
        source["kind"] = json!(kind);
        if !matches!(kind, "Secret" | "ConfigMap") || api_version != "v1" {
            source["apiVersion"] = json!(api_version);
        }
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule",
               "metadata": {"name": rule_name(&["kyverno", self.policy, self.rule_label, suffix]),
                            "labels": {"mimeo.dev/migrated-from": "kyverno"}},
               "spec": {"source": source, "targets": targets}})
    }
}

fn rules_for(
    inventory: &Inventory,
    migration: &mut Migration,
    what: &str,
    policy: &str,
    rule_label: &str,
    generate: &Value,
    namespaces: &Selector,
) {
    let g = Generator {
        inventory,
        what,
        policy,
        rule_label,
        namespaces,
        target_namespaces: inventory
            .matching(namespaces)
            .into_iter()
            .map(|n| n.name.clone())
            .collect(),
    };
    let evidence = generated_by(policy, rule_label);
    let provenance = super::model::Provenance {
        evidence: &evidence,
        asked_by: format!("generate in ClusterPolicy {policy}, rule {rule_label}"),
        written_in: String::new(),
    };
    if let Some(clone) = generate["clone"].as_object() {
        clone_rule(&g, migration, &provenance, generate, clone);
    }
    if let Some(list) = generate["cloneList"].as_object() {
        clone_list_rules(&g, migration, &provenance, list);
    }
}

/// `generate.clone`: one object into every namespace selected.
fn clone_rule(
    g: &Generator,
    migration: &mut Migration,
    provenance: &super::model::Provenance,
    generate: &Value,
    clone: &serde_json::Map<String, Value>,
) {
    let (Some(namespace), Some(name)) = (
        clone.get("namespace").and_then(Value::as_str),
        clone.get("name").and_then(Value::as_str),
    ) else {
        migration.note(
            Tool::Kyverno,
            g.what,
            "clone without namespace and name; not translated",
        );
        return;
    };
    let kind = generate["kind"].as_str().unwrap_or_default();
    let api_version = generate["apiVersion"].as_str().unwrap_or("v1");
    let copy_name = generate["name"].as_str().unwrap_or(name);
    if !plain(copy_name) {
        migration.note(
            Tool::Kyverno,
            g.what,
            format!("the generated name {copy_name:?} has variables; not translated"),
        );
        return;
    }
    let except = if copy_name == name { namespace } else { "" };
    let targets = g
        .targets(except)
        .iter()
        .map(|t| {
            let mut t = t.clone();
            if copy_name != name {
                t["name"] = json!(copy_name);
            }
            t
        })
        .collect();
    let places = g
        .target_namespaces
        .iter()
        .filter(|n| !(n.as_str() == namespace && copy_name == name))
        .map(|n| Place {
            kind: kind.to_owned(),
            namespace: n.clone(),
            name: copy_name.to_owned(),
        })
        .collect();
    let rule = g.rule(
        kind,
        api_version,
        json!({"name": name, "namespace": namespace}),
        "",
        targets,
    );
    migration.add_rule(g.inventory, rule, places, provenance);
}

/// `generate.cloneList`: the objects of each kind a selector chooses, into every namespace selected.
fn clone_list_rules(
    g: &Generator,
    migration: &mut Migration,
    provenance: &super::model::Provenance,
    list: &serde_json::Map<String, Value>,
) {
    let Some(namespace) = list.get("namespace").and_then(Value::as_str) else {
        migration.note(
            Tool::Kyverno,
            g.what,
            "cloneList without a namespace; not translated",
        );
        return;
    };
    let selector = list.get("selector").cloned().unwrap_or_else(|| json!({}));
    let Ok(label_selector) = serde_json::from_value::<LabelSelector>(selector.clone()) else {
        migration.note(
            Tool::Kyverno,
            g.what,
            "cloneList's selector is not a label selector; not translated",
        );
        return;
    };
    let Ok(matcher) = from_label_selector(&label_selector) else {
        migration.note(
            Tool::Kyverno,
            g.what,
            "cloneList's selector is not a label selector; not translated",
        );
        return;
    };
    for entry in list
        .get("kinds")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        let (api_version, kind) = entry.rsplit_once('/').unwrap_or(("v1", entry));
        let sources: Vec<&super::model::Object> = g
            .inventory
            .objects
            .iter()
            .filter(|o| o.kind == kind && o.namespace == namespace && matcher.matches(&o.labels))
            .collect();
        let places = g
            .target_namespaces
            .iter()
            .filter(|n| n.as_str() != namespace)
            .flat_map(|n| {
                sources.iter().map(move |o| Place {
                    kind: kind.to_owned(),
                    namespace: n.clone(),
                    name: o.name.clone(),
                })
            })
            .collect();
        let rule = g.rule(
            kind,
            api_version,
            json!({"selector": selector, "namespace": namespace}),
            kind,
            g.targets(namespace),
        );
        migration.add_rule(g.inventory, rule, places, provenance);
    }
}

#[cfg(test)]
mod tests {
    use super::super::replicator::tests::{ns, object};
    use super::super::{Inventory, migrate};
    use super::*;

    fn policy(rules: Value) -> Value {
        json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "sync-secrets"},
               "spec": {"rules": rules}})
    }

    #[test]
    fn clone_and_clone_list_into_namespaces() {
        let mut labelled = object("Secret", "platform", "a", &[]);
        labelled.labels.insert("allowedToBeCloned".into(), "true".into());
        // What Kyverno generated, labelled as it labels what it generates.
        let mut generated = object("Secret", "team-a", "regcred", &[]);
        generated
            .labels
            .insert(POLICY_LABEL.into(), "sync-secrets".into());
        generated
            .labels
            .insert(RULE_LABEL.into(), "sync-image-pull-secret".into());
        let inventory = Inventory {
            helm: Default::default(),
            clusters: Default::default(),
            kyverno_served: true,
            namespaces: vec![
                ns("platform", &[]),
                ns("team-a", &[("env", "prod")]),
                ns("kube-system", &[]),
            ],
            objects: vec![
                labelled,
                object("Secret", "platform", "b", &[]),
                generated,
                // Someone else's, of the name a cloneList would give: no Kyverno labels.
                object("Secret", "team-a", "a", &[]),
            ],
            policies: vec![policy(json!([
                {"name": "sync-image-pull-secret",
                 "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
                 "exclude": {"any": [{"resources": {"names": ["kube-system"]}}]},
                 "generate": {"apiVersion": "v1", "kind": "Secret", "name": "regcred",
                              "namespace": "{{request.object.metadata.name}}", "synchronize": true,
                              "clone": {"namespace": "platform", "name": "regcred"}}},
                {"name": "sync-list",
                 "match": {"resources": {"kinds": ["Namespace"], "selector": {"matchLabels": {"env": "prod"}}}},
                 "generate": {"namespace": "{{ request.object.metadata.name }}", "synchronize": true,
                              "cloneList": {"namespace": "platform", "kinds": ["v1/Secret"],
                                            "selector": {"matchLabels": {"allowedToBeCloned": "true"}}}}},
                {"name": "once",
                 "match": {"resources": {"kinds": ["Namespace"]}},
                 "generate": {"kind": "Secret", "name": "x", "namespace": "{{request.object.metadata.name}}",
                              "clone": {"namespace": "platform", "name": "x"}}},
                {"name": "on-pods",
                 "match": {"resources": {"kinds": ["Pod"]}},
                 "generate": {"kind": "Secret", "name": "x", "namespace": "{{request.object.metadata.namespace}}",
                              "synchronize": true, "clone": {"namespace": "platform", "name": "x"}}}
            ]))],
            ..Inventory::default()
        };
        let m = migrate(
            &inventory,
            &crate::cmd::migrate::Options {
                named: vec![Tool::Kyverno],
                allow_system_namespaces: true,
                ..crate::cmd::migrate::Options::default()
            },
        );
        assert_eq!(m.rules.len(), 2, "{:?}", m.notes);
        assert_eq!(m.rules[0]["kind"], "ClusterSyncRule");
        assert_eq!(
            m.rules[0]["metadata"]["name"],
            "kyverno-sync-secrets-sync-image-pull-secret"
        );
        assert_eq!(
            m.rules[0]["spec"]["source"],
            json!({"kind": "Secret", "name": "regcred", "namespace": "platform"})
        );
        assert_eq!(
            m.rules[0]["spec"]["targets"],
            json!([{"namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]},
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["platform"]}]}}])
        );
        assert_eq!(
            m.rules[1]["spec"]["source"],
            json!({"kind": "Secret", "namespace": "platform", "selector": {"matchLabels": {"allowedToBeCloned": "true"}}})
        );
        let copies: Vec<String> = m
            .copies
            .keys()
            .map(|p| format!("{}/{}", p.namespace, p.name))
            .collect();
        assert_eq!(copies, ["team-a/a", "team-a/regcred"]);
        assert_eq!(
            m.adoptions
                .keys()
                .map(|p| format!("{}/{}", p.namespace, p.name))
                .collect::<Vec<_>>(),
            ["team-a/regcred"]
        );
        let notes = m.notes.join("\n");
        assert!(
            notes.contains("Secret team-a/a: exists but carries no mark"),
            "{notes}"
        );
        assert!(notes.contains("rule once: clones without synchronize"), "{notes}");
        assert!(notes.contains("rule on-pods: it generates into"), "{notes}");
    }
}
