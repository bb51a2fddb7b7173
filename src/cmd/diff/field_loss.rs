//! What a `kubectl apply --server-side` of a document would delete from an object that exists.
//!
//! kubectl hands the fields that an earlier client-side `kubectl apply` recorded
//! (`kubectl-client-side-apply`) to its server-side field manager (`kubectl`) before it applies;
//! the apiserver then removes every field that manager owned and the document leaves out. So a
//! metadata-only document applied to a Namespace made with `kubectl apply` deletes its labels.
//! `mimeo diff` names those fields rather than predicting a clean change.

use serde_json::Value;

/// The managers whose fields a `kubectl apply --server-side` takes as its own.
const KUBECTL_MANAGERS: [&str; 2] = ["kubectl-client-side-apply", "kubectl"];
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The fields of `live` (an object, with `metadata.managedFields`) that kubectl's managers own
/// and `document` does not set, as dotted paths (`metadata.labels.team`), sorted.
pub fn dropped_by_server_side_apply(live: &Value, document: &Value) -> Vec<String> {
    let mut dropped = Vec::new();
    for entry in live["metadata"]["managedFields"].as_array().into_iter().flatten() {
        let manager = entry["manager"].as_str().unwrap_or_default();
        if !KUBECTL_MANAGERS.contains(&manager) {
            continue;
        }
        let mut leaves = Vec::new();
        leaf_paths(&entry["fieldsV1"], &mut Vec::new(), &mut leaves);
        for path in leaves {
            // kubectl's own bookkeeping, and the label the apiserver sets on every Namespace.
            if path
                .last()
                .is_some_and(|p| p == LAST_APPLIED || p == NAMESPACE_NAME_LABEL)
            {
                continue;
            }
            if !set_in(document, &path) {
                dropped.push(path.join("."));
            }
        }
    }
    dropped.sort();
    dropped.dedup();
    dropped
}

/// The leaves of a `fieldsV1` set: `f:<name>` keys are fields; `.` (the field itself) and list
/// item keys (`k:`, `v:`, `i:`) end a path where they stand.
fn leaf_paths(fields: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let Some(map) = fields.as_object() else {
        return;
    };
    let children: Vec<(&String, &Value)> = map.iter().filter(|(k, _)| k.starts_with("f:")).collect();
    if children.is_empty() {
        if !prefix.is_empty() {
            out.push(prefix.clone());
        }
        return;
    }
    for (key, value) in children {
        prefix.push(key[2..].to_owned());
        leaf_paths(value, prefix, out);
        prefix.pop();
    }
}

fn set_in(document: &Value, path: &[String]) -> bool {
    let mut at = document;
    for part in path {
        match at.get(part) {
            Some(next) => at = next,
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_what_a_metadata_only_document_would_drop() {
        let live = json!({"metadata": {"managedFields": [
            {"manager": "kubectl-client-side-apply", "operation": "Update", "fieldsV1": {
                "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}},
                               "f:labels": {".": {}, "f:team": {}}}}},
            {"manager": "mimeo", "operation": "Apply", "fieldsV1": {
                "f:metadata": {"f:labels": {"f:mimeo.dev/managed-by": {}}}}}
        ]}});
        let document = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "a", "annotations": {"mimeo.dev/accept-from": "x"}}});
        assert_eq!(
            dropped_by_server_side_apply(&live, &document),
            ["metadata.labels.team"]
        );
        let whole = json!({"metadata": {"labels": {"team": "a"}}});
        assert!(dropped_by_server_side_apply(&live, &whole).is_empty());
    }
}
