//! `legacy-v0-1` (tests only): a component of `mimeo:transform@0.1.0`, the interface before
//! inputs, bound with wit-bindgen directly because the SDK follows the current version. It lets
//! the host's tests check that a 0.1.0 component still loads and runs, also in a chain with 0.2.0
//! ones. It marks each copy with the label `legacy-plugin: v0.1.0`, so a test can see it ran.

wit_bindgen::generate!({
    world: "plugin",
    path: "../../../wit/v0.1.0/transform.wit",
});

use exports::mimeo::transform::transformer::Guest;
use mimeo::transform::types::{Context, Outcome, PluginInfo};
use serde_json::{Map, Value};

const LABEL: &str = "legacy-plugin";
const VALUE: &str = "v0.1.0";

struct Legacy;

impl Guest for Legacy {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "legacy-v0-1".into(),
            version: "0.1.0".into(),
            description: format!("Adds the label {LABEL}: {VALUE} (a mimeo:transform@0.1.0 component)"),
            kinds: vec![],
        }
    }

    fn validate_config(config: String) -> Result<(), String> {
        let empty = config.trim().is_empty()
            || serde_json::from_str::<Value>(&config).is_ok_and(|v| v.as_object().is_some_and(Map::is_empty));
        if empty {
            Ok(())
        } else {
            Err(format!(
                "legacy-v0-1 takes no config: {{}} or none, not {}",
                config.trim()
            ))
        }
    }

    fn transform(_ctx: Context, object: String) -> Result<Outcome, String> {
        let mut object: Map<String, Value> = match serde_json::from_str(&object) {
            Ok(Value::Object(o)) => o,
            Ok(_) => return Err("the object is not a JSON object".into()),
            Err(e) => return Err(format!("the object is not valid JSON: {e}")),
        };
        let metadata = object
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
            .ok_or("metadata is not an object")?;
        let labels = metadata
            .entry("labels")
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
            .ok_or("metadata.labels is not an object")?;
        if labels.get(LABEL).and_then(Value::as_str) == Some(VALUE) {
            return Ok(Outcome::Unchanged);
        }
        labels.insert(LABEL.into(), VALUE.into());
        Ok(Outcome::Write(Value::Object(object).to_string()))
    }
}

export!(Legacy);

#[cfg(test)]
mod tests {
    use super::*;
    use mimeo::transform::types::{ObjectRef, Target};
    use serde_json::json;

    fn transform(object: Value) -> Result<Outcome, String> {
        let ctx = Context {
            rule: "SyncRule/a/r".into(),
            source: ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("a".into()),
                name: "c".into(),
            },
            source_cluster: String::new(),
            target: Target {
                cluster: String::new(),
                namespace: Some("b".into()),
                name: "c".into(),
            },
            config: "{}".into(),
        };
        Legacy::transform(ctx, object.to_string())
    }

    #[test]
    fn adds_the_label_once() {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"team": "a"}}, "data": {"k": "v"}});
        let Ok(Outcome::Write(written)) = transform(object.clone()) else {
            panic!("not written")
        };
        let written: Value = serde_json::from_str(&written).unwrap();
        let mut want = object;
        want["metadata"]["labels"]["legacy-plugin"] = json!("v0.1.0");
        assert_eq!(written, want);
        assert!(matches!(transform(written), Ok(Outcome::Unchanged)));
    }

    #[test]
    fn labels_an_object_without_labels_and_refuses_bad_ones() {
        let Ok(Outcome::Write(written)) = transform(json!({"kind": "ConfigMap", "metadata": {"name": "c"}}))
        else {
            panic!("not written")
        };
        assert!(
            written.contains(r#""labels":{"legacy-plugin":"v0.1.0"}"#),
            "{written}"
        );
        let other = json!({"metadata": {"labels": {"legacy-plugin": "v9"}}});
        assert!(matches!(transform(other), Ok(Outcome::Write(w)) if w.contains("v0.1.0")));
        assert_eq!(
            transform(json!({"metadata": {"labels": []}})).unwrap_err(),
            "metadata.labels is not an object"
        );
        assert!(transform(json!([])).is_err());
    }

    #[test]
    fn takes_no_config() {
        for ok in ["", " ", "{}", " { } "] {
            assert!(Legacy::validate_config(ok.into()).is_ok(), "{ok:?}");
        }
        for bad in [r#"{"a": 1}"#, "[]", "null", "{"] {
            assert!(
                Legacy::validate_config(bad.into())
                    .unwrap_err()
                    .contains("takes no config"),
                "{bad:?}"
            );
        }
        assert_eq!(Legacy::describe().name, "legacy-v0-1");
        assert_eq!(Legacy::describe().version, "0.1.0");
    }
}
