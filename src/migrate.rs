//! `mimeo migrate`: what another copy tool copies in a cluster, as mimeo rules.
//!
//! Reading the cluster ([`read`]) gives an [`Inventory`] of plain values: namespaces, the Secrets
//! and ConfigMaps that carry another tool's annotations, and Kyverno's policies. Each tool's
//! module turns it into rules, pure and unit-tested: kubernetes-replicator ([`replicator`]),
//! kubernetes-reflector ([`reflector`]), config-syncer/kubed ([`kubed`]) and Kyverno's
//! `generate` with `clone`/`cloneList` and `synchronize: true` ([`kyverno`]). A [`Migration`]
//! holds the rules, the consent each target namespace needs, the copies that tool made (or would
//! make) that the rules are to adopt, and a note for everything that could not be translated.

pub mod kubed;
pub mod kyverno;
pub mod read;
pub mod reflector;
pub mod replicator;
pub mod selector;

use crate::sync::ownership::{ACCEPT_FROM_ANNOTATION, ADOPT_BY_ANNOTATION};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// The label every namespace carries with its own name.
const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// A namespace as the tools see it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Namespace {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// A Secret or ConfigMap, without its content.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Object {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// What migrating reads from a cluster.
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    pub namespaces: Vec<Namespace>,
    pub objects: Vec<Object>,
    /// Kyverno `ClusterPolicy` and `Policy` objects, as JSON.
    pub policies: Vec<Value>,
}

impl Namespace {
    /// Its labels with the one Kubernetes sets to its name, which selectors may name.
    fn labels_with_name(&self) -> BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        labels
            .entry(NAME_LABEL.to_owned())
            .or_insert_with(|| self.name.clone());
        labels
    }
}

impl Inventory {
    /// The namespaces `selector` selects.
    fn matching(&self, selector: &selector::Selector) -> Vec<&Namespace> {
        self.namespaces
            .iter()
            .filter(|n| selector.matches(&n.labels_with_name()))
            .collect()
    }

    fn namespace(&self, name: &str) -> Option<&Namespace> {
        self.namespaces.iter().find(|n| n.name == name)
    }

    fn object(&self, kind: &str, namespace: &str, name: &str) -> Option<&Object> {
        self.objects
            .iter()
            .find(|o| o.kind == kind && o.namespace == namespace && o.name == name)
    }
}

/// The tools `mimeo migrate` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tool {
    Replicator,
    Reflector,
    Kubed,
    Kyverno,
}

impl Tool {
    pub const ALL: [Tool; 4] = [Tool::Replicator, Tool::Reflector, Tool::Kubed, Tool::Kyverno];

    /// Its name on the command line and in rule names.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Replicator => "replicator",
            Tool::Reflector => "reflector",
            Tool::Kubed => "kubed",
            Tool::Kyverno => "kyverno",
        }
    }
}

/// A copy: where it is (or would be) in this cluster.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Place {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

/// The rules for one tool's copies, and what applying them needs.
#[derive(Clone, Debug, Default)]
pub struct Migration {
    /// `SyncRule` and `ClusterSyncRule` objects.
    pub rules: Vec<Value>,
    /// For each target namespace, the namespaces whose `SyncRule`s it must accept.
    pub consents: BTreeMap<String, BTreeSet<String>>,
    /// Every copy the rules make in this cluster now, with the rule (`SyncRule/ns/name`) that
    /// makes it. Those that exist already are adopted.
    pub copies: BTreeMap<Place, String>,
    /// The copies that exist already, with the rule to adopt each.
    pub adoptions: BTreeMap<Place, String>,
    /// What could not be translated, and why; one line each.
    pub notes: Vec<String>,
}

impl Migration {
    /// Adds a rule, records the copies it makes now (`places`) and adopts those that exist.
    fn add_rule(&mut self, inventory: &Inventory, rule: Value, places: Vec<Place>) {
        let reference = format!(
            "{}/{}{}",
            rule["kind"].as_str().unwrap_or_default(),
            rule["metadata"]["namespace"]
                .as_str()
                .map(|ns| format!("{ns}/"))
                .unwrap_or_default(),
            rule["metadata"]["name"].as_str().unwrap_or_default()
        );
        // A copy in a namespace that does not exist is made once it does, by both tools.
        for place in places
            .into_iter()
            .filter(|p| inventory.namespace(&p.namespace).is_some())
        {
            if inventory
                .object(&place.kind, &place.namespace, &place.name)
                .is_some()
            {
                self.adoptions.insert(place.clone(), reference.clone());
            }
            self.copies.insert(place, reference.clone());
        }
        self.rules.push(rule);
    }

    /// `SyncRule`s in `from` may write into `target`.
    fn consent(&mut self, target: &str, from: &str) {
        if target != from {
            self.consents
                .entry(target.to_owned())
                .or_default()
                .insert(from.to_owned());
        }
    }

    fn note(&mut self, tool: Tool, what: &str, why: impl AsRef<str>) {
        self.notes
            .push(format!("{}: {what}: {}", tool.name(), why.as_ref()));
    }

    /// Everything to apply, as multi-document YAML: the consent of each target namespace (its
    /// `mimeo.dev/accept-from`, with the entries already there kept), the adoption mark on each
    /// existing copy (metadata only: no Secret value is ever printed), then the rules.
    pub fn to_yaml(&self, inventory: &Inventory) -> Result<String, serde_yaml_ng::Error> {
        let mut out = String::new();
        let mut document = |comment: &str, value: &Value| -> Result<(), serde_yaml_ng::Error> {
            out.push_str("---\n");
            if !comment.is_empty() {
                out.push_str(&format!("# {comment}\n"));
            }
            out.push_str(&serde_yaml_ng::to_string(value)?);
            Ok(())
        };
        for (namespace, from) in &self.consents {
            let mut accepted: Vec<String> = inventory
                .namespace(namespace)
                .and_then(|n| n.annotations.get(ACCEPT_FROM_ANNOTATION))
                .map(|v| {
                    v.split(',')
                        .map(|e| e.trim().to_owned())
                        .filter(|e| !e.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            if accepted.iter().any(|e| e == "*") {
                continue;
            }
            for f in from {
                if !accepted.contains(f) {
                    accepted.push(f.clone());
                }
            }
            document(
                "consent: this namespace accepts copies from these namespaces' SyncRules",
                &json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": namespace,
                                     "annotations": {ACCEPT_FROM_ANNOTATION: accepted.join(",")}}}),
            )?;
        }
        for (place, rule) in &self.adoptions {
            document(
                "an existing copy: the rule named here adopts it (only it) instead of reporting a conflict",
                &json!({"apiVersion": "v1", "kind": place.kind,
                        "metadata": {"name": place.name, "namespace": place.namespace,
                                     "annotations": {ADOPT_BY_ANNOTATION: rule}}}),
            )?;
        }
        for rule in &self.rules {
            document("", rule)?;
        }
        Ok(out)
    }
}

/// Translates what `tools` copy.
pub fn migrate(inventory: &Inventory, tools: &[Tool]) -> Migration {
    let mut migration = Migration::default();
    for tool in tools {
        match tool {
            Tool::Replicator => replicator::translate(inventory, &mut migration),
            Tool::Reflector => reflector::translate(inventory, &mut migration),
            Tool::Kubed => kubed::translate(inventory, &mut migration),
            Tool::Kyverno => kyverno::translate(inventory, &mut migration),
        }
    }
    migration
}

/// A rule name from its parts: lowercase, `-` for anything else, at most 63 characters (with a
/// short hash of the whole when cut, so two long names stay apart).
fn rule_name(parts: &[&str]) -> String {
    let whole: String = parts
        .join("-")
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let whole = whole.trim_matches('-').to_owned();
    if whole.len() <= 63 {
        return whole;
    }
    let hash = crate::sync::hash::digest_bytes(whole.as_bytes());
    format!("{}-{}", whole[..54].trim_end_matches('-'), &hash[7..15])
}

/// A `SyncRule` in `namespace` copying `kind`/`name` to `targets`.
fn sync_rule(tool: Tool, source: &Object, targets: Vec<Value>, metadata: Option<Value>) -> Value {
    let mut spec = json!({"source": {"kind": source.kind, "name": source.name}, "targets": targets});
    if let Some(metadata) = metadata {
        spec["metadata"] = metadata;
    }
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
           "metadata": {"name": rule_name(&[tool.name(), &source.kind, &source.name]),
                        "namespace": source.namespace,
                        "labels": {"mimeo.dev/migrated-from": tool.name()}},
           "spec": spec})
}

/// A target for the namespaces `selector` selects, but never `except` (the source's own).
fn selector_target(selector: &Value, except: &str) -> Value {
    let mut selector = selector.clone();
    let not_source = json!({"key": NAME_LABEL, "operator": "NotIn", "values": [except]});
    match selector.get_mut("matchExpressions").and_then(Value::as_array_mut) {
        Some(expressions) => expressions.push(not_source),
        None => selector["matchExpressions"] = json!([not_source]),
    }
    json!({"namespaceSelector": selector})
}

/// The namespaces of `inventory` that `selector` (as JSON) selects.
fn selected<'a>(inventory: &'a Inventory, selector: &Value) -> Vec<&'a Namespace> {
    use kube::core::SelectorExt;
    let matcher = serde_json::from_value(selector.clone())
        .ok()
        .and_then(|s| crate::sync::targets::selector(&s).ok());
    let Some(matcher) = matcher else {
        return Vec::new();
    };
    inventory
        .namespaces
        .iter()
        .filter(|n| matcher.matches(&n.labels_with_name()))
        .collect()
}

/// Comma-separated entries, trimmed, empty ones dropped.
fn entries(list: &str) -> Vec<&str> {
    list.split(',').map(str::trim).filter(|e| !e.is_empty()).collect()
}

/// The copies a rule makes: `kind`/`name` in each of `namespaces`.
fn places(kind: &str, name: &str, namespaces: impl IntoIterator<Item = String>) -> Vec<Place> {
    namespaces
        .into_iter()
        .map(|namespace| Place {
            kind: kind.to_owned(),
            namespace,
            name: name.to_owned(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_names_fit() {
        assert_eq!(
            rule_name(&["replicator", "Secret", "db.creds"]),
            "replicator-secret-db-creds"
        );
        let long = "x".repeat(80);
        let a = rule_name(&["kubed", "ConfigMap", &long]);
        let b = rule_name(&["kubed", "ConfigMap", &format!("{long}y")]);
        assert!(a.len() <= 63 && b.len() <= 63 && a != b, "{a} {b}");
    }
}
