//! What a plugin may and may not change in the object it returns.

use crate::sync::ownership::PREFIX;
use crate::sync::protected::{WRITABLE_METADATA, is_protected_key};
use serde_json::Value;

/// Checks a plugin's output against its input: it may change data, labels, annotations and
/// spec, never `apiVersion`, `kind`, the name or namespace, a Secret's `type`, any other
/// metadata (`ownerReferences`, `finalizers`, `managedFields`...), mimeo's own labels and
/// annotations, or the protected ones (other tools' ownership marks, a ServiceAccount binding,
/// kubectl's last-applied record). Returns what was broken.
pub fn check_output(input: &Value, output: &Value) -> Result<(), String> {
    if !output.is_object() {
        return Err("the output is not a JSON object".into());
    }
    for (pointer, what) in [
        ("/apiVersion", "apiVersion"),
        ("/kind", "kind"),
        ("/metadata/name", "metadata.name"),
        ("/metadata/namespace", "metadata.namespace"),
    ] {
        if input.pointer(pointer) != output.pointer(pointer) {
            return Err(format!("it changed {what}, which plugins may not change"));
        }
    }
    let is_secret = input["kind"] == "Secret" && input["apiVersion"] == "v1";
    if is_secret && input.get("type") != output.get("type") {
        return Err("it changed the Secret's type, which plugins may not change".into());
    }
    let no_metadata = serde_json::Map::new();
    let metadata = |v: &Value| {
        v["metadata"]
            .as_object()
            .cloned()
            .unwrap_or_else(|| no_metadata.clone())
    };
    let (before, after) = (metadata(input), metadata(output));
    for field in before.keys().chain(after.keys()) {
        if !WRITABLE_METADATA.contains(&field.as_str()) && before.get(field) != after.get(field) {
            return Err(format!(
                "it set metadata.{field}, which plugins may not set (only labels and annotations)"
            ));
        }
    }
    for field in ["labels", "annotations"] {
        let guarded = |v: &Value, keep: &dyn Fn(&str) -> bool| -> Vec<(String, Value)> {
            let mut kv: Vec<(String, Value)> = v
                .pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter(|(k, _)| keep(k))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default();
            kv.sort_by(|a, b| a.0.cmp(&b.0));
            kv
        };
        let ours = |k: &str| k.starts_with(PREFIX);
        if guarded(input, &ours) != guarded(output, &ours) {
            return Err(format!(
                "it changed mimeo's own {field} (those starting with {PREFIX})"
            ));
        }
        let (was, now) = (
            guarded(input, &is_protected_key),
            guarded(output, &is_protected_key),
        );
        if was != now {
            let key = now
                .iter()
                .chain(&was)
                .find(|kv| !was.contains(kv) || !now.contains(kv))
                .map(|(k, _)| k.clone())
                .unwrap_or_default();
            return Err(format!(
                "it set or changed the {} {key}, which no copy may carry (another tool's \
                 ownership, a ServiceAccount binding or kubectl's last-applied record)",
                &field[..field.len() - 1]
            ));
        }
    }
    labels_are_valid(output)
}

/// Every label value of the output is one the apiserver takes. Its refusal would quote the value
/// into the copy's status, and a plugin may have made it from a Secret: the key is named, never
/// the value.
fn labels_are_valid(output: &Value) -> Result<(), String> {
    let Some(labels) = output.pointer("/metadata/labels").and_then(Value::as_object) else {
        return Ok(());
    };
    for (key, value) in labels {
        let Some(value) = value.as_str() else {
            return Err(format!("it set the label {key} to something other than a string"));
        };
        let b = value.as_bytes();
        let valid = b.is_empty()
            || (b.len() <= 63
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c)));
        if !valid {
            return Err(format!(
                "it set the label {key} to a value that is not a valid label value (at most 63 \
                 letters, digits, '-', '_' or '.', starting and ending with a letter or digit; the \
                 value is not shown)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn copy() -> Value {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "c", "namespace": "t", "labels": {"mimeo.dev/managed-by": "mimeo", "team": "a"},
                            "annotations": {"mimeo.dev/rule": "SyncRule/p/r"}},
               "data": {"k": "dg=="}})
    }

    #[test]
    fn allowed_and_forbidden_changes() {
        let edit = |f: &dyn Fn(&mut Value)| {
            let mut v = copy();
            f(&mut v);
            check_output(&copy(), &v)
        };
        assert!(
            edit(&|v| v["data"]["k2"] = json!("eA==")).is_ok(),
            "data may change"
        );
        assert!(
            edit(&|v| v["metadata"]["labels"]["team"] = json!("b")).is_ok(),
            "other labels may change"
        );
        assert!(edit(&|v| v["metadata"]["annotations"]["note"] = json!("x")).is_ok());
        assert!(edit(&|v| v["metadata"]["labels"]["team"] = json!("")).is_ok());
        for bad in ["hunter2 x", "-hunter2", &"hunter2".repeat(10)] {
            let error = edit(&|v| v["metadata"]["labels"]["team"] = json!(bad)).unwrap_err();
            assert!(
                error.starts_with("it set the label team to a value that is not a valid label value"),
                "{error}"
            );
            assert!(!error.contains("hunter2"), "{error}");
        }
        assert!(edit(&|v| v["metadata"]["labels"]["team"] = json!(7)).is_err());
        assert!(
            edit(&|v| v["kind"] = json!("ConfigMap"))
                .unwrap_err()
                .contains("kind")
        );
        assert!(
            edit(&|v| v["apiVersion"] = json!("v2"))
                .unwrap_err()
                .contains("apiVersion")
        );
        assert!(
            edit(&|v| v["metadata"]["namespace"] = json!("other"))
                .unwrap_err()
                .contains("namespace")
        );
        assert!(
            edit(&|v| v["metadata"]["name"] = json!("other"))
                .unwrap_err()
                .contains("name")
        );
        let dropped = edit(&|v| {
            v["metadata"]["labels"]
                .as_object_mut()
                .unwrap()
                .remove("mimeo.dev/managed-by");
        });
        assert!(dropped.unwrap_err().contains("mimeo's own labels"));
        assert!(edit(&|v| v["metadata"]["annotations"]["mimeo.dev/rule"] = json!("x")).is_err());
        assert!(edit(&|v| v["metadata"]["labels"]["mimeo.dev/extra"] = json!("x")).is_err());
        assert!(check_output(&copy(), &json!("a string")).is_err());
    }

    #[test]
    fn a_plugin_cannot_hand_the_copy_to_anyone_or_make_it_a_token() {
        let secret = || {
            let mut v = copy();
            v["type"] = json!("Opaque");
            v
        };
        let edit = |f: &dyn Fn(&mut Value)| {
            let mut v = secret();
            f(&mut v);
            check_output(&secret(), &v)
        };
        // (what the plugin did, what the refusal must name)
        type Change<'a> = &'a dyn Fn(&mut Value);
        let refused: [(Change, &str); 12] = [
            (
                &|v| v["type"] = json!("kubernetes.io/service-account-token"),
                "type",
            ),
            (&|v| v["type"] = json!("helm.sh/release.v1"), "type"),
            (
                &|v| {
                    v.as_object_mut().unwrap().remove("type");
                },
                "type",
            ),
            (
                &|v| {
                    v["metadata"]["ownerReferences"] =
                        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "1"}])
                },
                "metadata.ownerReferences",
            ),
            (
                &|v| v["metadata"]["finalizers"] = json!(["x/y"]),
                "metadata.finalizers",
            ),
            (
                &|v| v["metadata"]["managedFields"] = json!([{"manager": "helm"}]),
                "metadata.managedFields",
            ),
            (
                &|v| v["metadata"]["generateName"] = json!("x-"),
                "metadata.generateName",
            ),
            (
                &|v| v["metadata"]["annotations"]["kubernetes.io/service-account.name"] = json!("default"),
                "kubernetes.io/service-account.name",
            ),
            (
                &|v| v["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("Helm"),
                "app.kubernetes.io/managed-by",
            ),
            (
                &|v| v["metadata"]["annotations"]["meta.helm.sh/release-name"] = json!("r"),
                "meta.helm.sh/release-name",
            ),
            (
                &|v| v["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"] = json!("a"),
                "argocd.argoproj.io/tracking-id",
            ),
            (
                &|v| v["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"] = json!("apps"),
                "kustomize.toolkit.fluxcd.io/name",
            ),
        ];
        for (change, named) in refused {
            let why = edit(change).unwrap_err();
            assert!(why.contains(named), "{named}: {why}");
        }
        assert!(edit(&|v| v["data"]["new"] = json!("eA==")).is_ok());
        assert!(edit(&|v| v["metadata"]["labels"]["app.kubernetes.io/name"] = json!("x")).is_ok());
        // A ConfigMap has no type to guard: a top-level field of another kind is content.
        let mut policy =
            json!({"apiVersion": "kyverno.io/v1", "kind": "Policy", "metadata": {"name": "p"}, "type": "a"});
        let before = policy.clone();
        policy["type"] = json!("b");
        assert!(check_output(&before, &policy).is_ok());
    }
}
