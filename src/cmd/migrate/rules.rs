//! What each tool's module writes rules with: their names, their shape, their targets.

use super::model::{Inventory, Namespace, Object, Place, Tool};
use super::selector::NAME_LABEL;
use serde_json::{Value, json};

/// A rule name from its parts: lowercase, `-` for anything else, at most 63 characters (with a
/// short hash of the whole when cut, so two long names stay apart).
pub(super) fn rule_name(parts: &[&str]) -> String {
    name_within(parts, 63)
}

/// [`rule_name`], at most `max` characters (253 for a cluster-scoped object's name).
pub(super) fn name_within(parts: &[&str], max: usize) -> String {
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
    if whole.len() <= max {
        return whole;
    }
    let hash = crate::sync::hash::digest_bytes(whole.as_bytes());
    format!("{}-{}", whole[..max - 9].trim_end_matches('-'), &hash[7..15])
}

/// A `SyncRule` in `namespace` copying `kind`/`name` to `targets`.
pub(super) fn sync_rule(tool: Tool, source: &Object, targets: Vec<Value>, metadata: Option<Value>) -> Value {
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
pub(super) fn selector_target(selector: &Value, except: &str) -> Value {
    let mut selector = selector.clone();
    let not_source = json!({"key": NAME_LABEL, "operator": "NotIn", "values": [except]});
    match selector.get_mut("matchExpressions").and_then(Value::as_array_mut) {
        Some(expressions) => expressions.push(not_source),
        None => selector["matchExpressions"] = json!([not_source]),
    }
    json!({"namespaceSelector": selector})
}

/// The namespaces of `inventory` that `selector` (as JSON) selects.
pub(super) fn selected<'a>(inventory: &'a Inventory, selector: &Value) -> Vec<&'a Namespace> {
    use kube::core::SelectorExt;
    let matcher = serde_json::from_value(selector.clone())
        .ok()
        .and_then(|s| crate::sync::object_selector::selector(&s).ok());
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
pub(super) fn entries(list: &str) -> Vec<&str> {
    list.split(',').map(str::trim).filter(|e| !e.is_empty()).collect()
}

/// The copies a rule makes: `kind`/`name` in each of `namespaces`.
pub(super) fn places(kind: &str, name: &str, namespaces: impl IntoIterator<Item = String>) -> Vec<Place> {
    namespaces
        .into_iter()
        .map(|namespace| Place {
            kind: kind.to_owned(),
            namespace,
            name: name.to_owned(),
        })
        .collect()
}
