//! What a plugin may and may not change in the object it returns.

use crate::sync::ownership::PREFIX;
use serde_json::Value;

/// Checks a plugin's output against its input: it may change data, labels, annotations and
/// spec, never `apiVersion`, `kind`, the name or namespace, or mimeo's own labels and
/// annotations. Returns what was broken.
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
    for field in ["labels", "annotations"] {
        let ours = |v: &Value| -> Vec<(String, Value)> {
            let mut kv: Vec<(String, Value)> = v
                .pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter(|(k, _)| k.starts_with(PREFIX))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default();
            kv.sort_by(|a, b| a.0.cmp(&b.0));
            kv
        };
        if ours(input) != ours(output) {
            return Err(format!(
                "it changed mimeo's own {field} (those starting with {PREFIX})"
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
}
