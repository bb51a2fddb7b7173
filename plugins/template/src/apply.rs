//! Writes rendered values into the copy. Only `data`, `binaryData`, `stringData`, labels and
//! annotations change; `type`, kind, name and namespace never do.

use crate::config::Field;
use crate::filters::base64_error;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use mimeo_plugin_sdk::{DATA_FIELDS, check_label_value};
use serde_json::{Map, Value};

/// The kinds whose `data` the plugin knows how to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Secret,
    ConfigMap,
}

impl Kind {
    pub fn of(object: &Map<String, Value>) -> Result<Kind, String> {
        let api_version = object.get("apiVersion").and_then(Value::as_str);
        match (api_version, object.get("kind").and_then(Value::as_str)) {
            (Some("v1"), Some("Secret")) => Ok(Kind::Secret),
            (Some("v1"), Some("ConfigMap")) => Ok(Kind::ConfigMap),
            (api_version, kind) => Err(format!(
                "template works on v1 Secrets and ConfigMaps, not {}/{}",
                api_version.unwrap_or("?"),
                kind.unwrap_or("?")
            )),
        }
    }
}

/// One rendered template.
pub struct Rendered<'a> {
    pub field: Field,
    pub key: &'a str,
    pub name: String,
    pub text: String,
}

fn map<'a>(
    object: &'a mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a mut Map<String, Value>, String> {
    object
        .entry(key)
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or_else(|| format!("{path} is not an object"))
}

/// Applies `rendered` to `object` of `kind`; with `replace_data`, the data holds nothing else.
pub fn apply(
    object: &mut Map<String, Value>,
    kind: Kind,
    rendered: Vec<Rendered<'_>>,
    replace_data: bool,
) -> Result<(), String> {
    if replace_data {
        for field in DATA_FIELDS {
            object.remove(field);
        }
    }
    for Rendered {
        field,
        key,
        name,
        text,
    } in rendered
    {
        match field {
            Field::StringData | Field::Data => {
                let value = match (kind, field) {
                    (Kind::Secret, Field::StringData) => STANDARD.encode(&text),
                    (Kind::Secret, _) => {
                        STANDARD.decode(&text).map_err(|e| {
                            format!(
                                "{name}: a Secret's data must be base64 and the rendered text is not ({}); \
                                 give plain text in stringData, or encode it with b64encode",
                                base64_error(&e)
                            )
                        })?;
                        text
                    }
                    (Kind::ConfigMap, _) => text,
                };
                // The key is the template's alone: the apiserver would refuse a ConfigMap key in both
                // data and binaryData, and merge a Secret's stringData over its data.
                for other in ["binaryData", "stringData"] {
                    if let Some(Value::Object(m)) = object.get_mut(other)
                        && m.remove(key).is_some()
                        && m.is_empty()
                    {
                        object.remove(other);
                    }
                }
                map(object, "data", "data")?.insert(key.to_owned(), value.into());
            }
            Field::Label | Field::Annotation => {
                let (field, path) = match field {
                    Field::Label => ("labels", "metadata.labels"),
                    _ => ("annotations", "metadata.annotations"),
                };
                if field == "labels" {
                    check_label_value(&text)
                        .map_err(|e| format!("{name}: the rendered value {e} (values are never shown)"))?;
                }
                let metadata = map(object, "metadata", "metadata")?;
                map(metadata, field, path)?.insert(key.to_owned(), text.into());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    fn value(field: Field, key: &'static str, text: &str) -> Rendered<'static> {
        Rendered {
            field,
            key,
            name: format!("{}[{key}]", field.config_name()),
            text: text.into(),
        }
    }

    fn secret() -> Map<String, Value> {
        object(json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "s", "namespace": "b"},
            "data": {"keep": "a2VlcA==", "plain": "b2xk"}, "stringData": {"plain": "old", "other": "x"}}))
    }

    #[test]
    fn secrets_get_base64_data() {
        let mut s = secret();
        let rendered = vec![
            value(Field::StringData, "plain", "new"),
            value(Field::Data, "raw", "cmF3"),
        ];
        apply(&mut s, Kind::Secret, rendered, false).unwrap();
        assert_eq!(
            Value::Object(s),
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": "s", "namespace": "b"},
                "data": {"keep": "a2VlcA==", "plain": "bmV3", "raw": "cmF3"}, "stringData": {"other": "x"}})
        );
        let mut s = secret();
        let error = apply(
            &mut s,
            Kind::Secret,
            vec![value(Field::Data, "raw", "not base64")],
            false,
        );
        assert!(
            error
                .unwrap_err()
                .starts_with("data[raw]: a Secret's data must be base64")
        );
    }

    #[test]
    fn replace_data_keeps_only_the_templated_keys() {
        let mut s = secret();
        apply(
            &mut s,
            Kind::Secret,
            vec![value(Field::StringData, "only", "x")],
            true,
        )
        .unwrap();
        assert_eq!(s["data"], json!({"only": "eA=="}));
        assert!(!s.contains_key("stringData") && !s.contains_key("binaryData"));
        assert_eq!(
            (s["type"].as_str(), s["metadata"]["name"].as_str()),
            (Some("Opaque"), Some("s"))
        );
    }

    #[test]
    fn config_maps_get_text_as_is() {
        let mut c = object(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
            "binaryData": {"bin": "AA==", "conf": "AA=="}}),
        );
        let rendered = vec![
            value(Field::StringData, "conf", "a: 1\n"),
            value(Field::Data, "raw", "not base64"),
        ];
        apply(&mut c, Kind::ConfigMap, rendered, false).unwrap();
        assert_eq!(c["data"], json!({"conf": "a: 1\n", "raw": "not base64"}));
        assert_eq!(c["binaryData"], json!({"bin": "AA=="}));
        let mut c = object(json!({"kind": "ConfigMap", "binaryData": {"conf": "AA=="}}));
        apply(
            &mut c,
            Kind::ConfigMap,
            vec![value(Field::Data, "conf", "x")],
            false,
        )
        .unwrap();
        assert!(!c.contains_key("binaryData"), "an emptied binaryData goes");
    }

    #[test]
    fn labels_and_annotations() {
        let mut c = object(json!({"kind": "ConfigMap", "metadata": {"name": "c", "labels": {"a": "1"}}}));
        let rendered = vec![
            value(Field::Label, "team", "t-1"),
            value(Field::Annotation, "note", "any text"),
        ];
        apply(&mut c, Kind::ConfigMap, rendered, false).unwrap();
        assert_eq!(
            c["metadata"],
            json!({"name": "c", "labels": {"a": "1", "team": "t-1"}, "annotations": {"note": "any text"}})
        );
        let error = apply(
            &mut c,
            Kind::ConfigMap,
            vec![value(Field::Label, "team", "a b")],
            false,
        );
        assert!(
            error.unwrap_err().starts_with(
                "labels[team]: the rendered value is not a valid label value: it holds characters"
            )
        );
        let mut bad = object(json!({"kind": "ConfigMap", "metadata": {"labels": []}}));
        let error = apply(
            &mut bad,
            Kind::ConfigMap,
            vec![value(Field::Label, "team", "t")],
            false,
        );
        assert_eq!(error.unwrap_err(), "metadata.labels is not an object");
    }

    #[test]
    fn kinds() {
        assert_eq!(Kind::of(&secret()), Ok(Kind::Secret));
        assert_eq!(
            Kind::of(&object(json!({"apiVersion": "v1", "kind": "ConfigMap"}))),
            Ok(Kind::ConfigMap)
        );
        let error = Kind::of(&object(json!({"apiVersion": "kyverno.io/v1", "kind": "Policy"})));
        assert_eq!(
            error.unwrap_err(),
            "template works on v1 Secrets and ConfigMaps, not kyverno.io/v1/Policy"
        );
    }
}
