//! `set-metadata`: sets and removes labels and annotations on a copy. Values may hold templates
//! such as `{{target.namespace}}`, filled from the context of each copy.

use mimeo_plugin_sdk::template::{self, Piece};
use mimeo_plugin_sdk::{
    Context, Guest, MIMEO_PREFIX, Outcome, PluginInfo, check_label_value, check_metadata_key, log, outcome,
    parse_config, parse_object,
};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The template variables, in the order the error message lists them.
const VARIABLES: [&str; 11] = [
    "target.namespace",
    "target.name",
    "target.cluster",
    "source.namespace",
    "source.name",
    "source.kind",
    "source.cluster",
    "rule",
    "rule.kind",
    "rule.namespace",
    "rule.name",
];

#[derive(Debug, PartialEq)]
enum Part {
    Text(String),
    Var(&'static str),
}

/// A value with `{{variable}}` placeholders (spaces inside the braces are allowed).
#[derive(Debug, PartialEq)]
struct Template(Vec<Part>);

impl Template {
    fn parse(value: &str) -> Result<Self, String> {
        let parts = template::split(value)?
            .into_iter()
            .map(|piece| match piece {
                Piece::Text(text) => Ok(Part::Text(text.to_owned())),
                Piece::Placeholder(name) => VARIABLES
                    .iter()
                    .find(|v| **v == name)
                    .map(|var| Part::Var(var))
                    .ok_or_else(|| {
                        format!(
                            "{value:?} uses the unknown template variable {name:?}; known: {}",
                            VARIABLES.join(", ")
                        )
                    }),
            })
            .collect::<Result<_, String>>()?;
        Ok(Template(parts))
    }

    fn is_literal(&self) -> bool {
        self.0.iter().all(|p| matches!(p, Part::Text(_)))
    }

    fn render(&self, ctx: &Context) -> String {
        // `SyncRule/<namespace>/<name>` or `ClusterSyncRule/<name>`.
        let rule: Vec<&str> = ctx.rule.splitn(3, '/').collect();
        let (rule_kind, rule_namespace, rule_name) = match rule.as_slice() {
            [kind, ns, name] => (*kind, *ns, *name),
            [kind, name] => (*kind, "", *name),
            _ => ("", "", ctx.rule.as_str()),
        };
        let mut out = String::new();
        for part in &self.0 {
            out.push_str(match part {
                Part::Text(text) => text,
                Part::Var("target.namespace") => ctx.target.namespace.as_deref().unwrap_or_default(),
                Part::Var("target.name") => &ctx.target.name,
                Part::Var("target.cluster") => &ctx.target.cluster,
                Part::Var("source.namespace") => ctx.source.namespace.as_deref().unwrap_or_default(),
                Part::Var("source.name") => &ctx.source.name,
                Part::Var("source.kind") => &ctx.source.kind,
                Part::Var("source.cluster") => &ctx.source_cluster,
                Part::Var("rule") => &ctx.rule,
                Part::Var("rule.kind") => rule_kind,
                Part::Var("rule.namespace") => rule_namespace,
                Part::Var("rule.name") => rule_name,
                Part::Var(other) => unreachable!("variable {other} is in VARIABLES but not rendered"),
            });
        }
        out
    }
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    remove_labels: Vec<String>,
    #[serde(default)]
    remove_annotations: Vec<String>,
}

/// What to do to one of `labels` or `annotations`.
#[derive(Debug, Default)]
struct Changes {
    set: BTreeMap<String, Template>,
    remove: Vec<String>,
}

#[derive(Debug)]
struct Config {
    labels: Changes,
    annotations: Changes,
}

fn check_key(what: &str, key: &str) -> Result<(), String> {
    if key.starts_with(MIMEO_PREFIX) {
        return Err(format!(
            "{what} {key:?}: keys under {MIMEO_PREFIX} are mimeo's own and cannot be changed"
        ));
    }
    check_metadata_key(key).map_err(|e| format!("{what}: {e}"))
}

fn changes(
    what: &str,
    remove_field: &str,
    set: BTreeMap<String, String>,
    remove: Vec<String>,
) -> Result<Changes, String> {
    let mut parsed = BTreeMap::new();
    for (key, value) in set {
        check_key(what, &key)?;
        let template = Template::parse(&value).map_err(|e| format!("{what} {key:?}: {e}"))?;
        if what == "labels" && template.is_literal() {
            check_label_value(&value).map_err(|e| format!("{what} {key:?}: {value:?} {e}"))?;
        }
        parsed.insert(key, template);
    }
    for key in &remove {
        check_key(remove_field, key)?;
        if parsed.contains_key(key) {
            return Err(format!("{key:?} is both in {what} and in {remove_field}"));
        }
    }
    Ok(Changes { set: parsed, remove })
}

impl Config {
    fn parse(config: &str) -> Result<Self, String> {
        let raw: RawConfig = parse_config(config)?;
        let config = Config {
            labels: changes("labels", "removeLabels", raw.labels, raw.remove_labels)?,
            annotations: changes(
                "annotations",
                "removeAnnotations",
                raw.annotations,
                raw.remove_annotations,
            )?,
        };
        if [&config.labels, &config.annotations]
            .iter()
            .all(|c| c.set.is_empty() && c.remove.is_empty())
        {
            return Err("nothing to do: give labels, annotations, removeLabels or removeAnnotations".into());
        }
        Ok(config)
    }
}

/// Applies `changes` to `metadata[field]`, creating the map only to set something in it.
fn apply(
    field: &str,
    changes: &Changes,
    ctx: &Context,
    metadata: &mut Map<String, Value>,
) -> Result<(), String> {
    if let Some(Value::Object(map)) = metadata.get_mut(field) {
        for key in &changes.remove {
            map.remove(key);
        }
    }
    if changes.set.is_empty() {
        return Ok(());
    }
    let map = metadata.entry(field).or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(map) = map else {
        return Err(format!("metadata.{field} is not an object"));
    };
    for (key, template) in &changes.set {
        let value = template.render(ctx);
        if field == "labels" && !template.is_literal() {
            check_label_value(&value).map_err(|e| {
                format!("label {key:?} from its template: the rendered value {e} (values are never shown)")
            })?;
        }
        map.insert(key.clone(), Value::String(value));
    }
    Ok(())
}

/// The keys whose values differ between two string maps (either may be absent).
fn changed_keys(before: Option<&Value>, after: Option<&Value>) -> Vec<String> {
    let empty = Map::new();
    let before = before.and_then(Value::as_object).unwrap_or(&empty);
    let after = after.and_then(Value::as_object).unwrap_or(&empty);
    let mut keys: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .cloned()
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

struct SetMetadata;

impl Guest for SetMetadata {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "set-metadata".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Sets and removes labels and annotations on a copy; values may use templates \
                          such as {{target.namespace}}"
                .into(),
            kinds: vec![],
        }
    }

    fn validate_config(config: String) -> Result<(), String> {
        Config::parse(&config).map(drop)
    }

    fn transform(ctx: Context, object: String) -> Result<Outcome, String> {
        let config = Config::parse(&ctx.config)?;
        let before = parse_object(&object)?;
        let mut after = before.clone();
        let Some(Value::Object(metadata)) = after.get_mut("metadata") else {
            return Err("the object has no metadata".into());
        };
        apply("labels", &config.labels, &ctx, metadata)?;
        apply("annotations", &config.annotations, &ctx, metadata)?;
        for field in ["labels", "annotations"] {
            let changed = changed_keys(
                before.get("metadata").and_then(|m| m.get(field)),
                metadata.get(field),
            );
            if !changed.is_empty() {
                log::debug(&format!("changed {field}: {}", changed.join(", ")));
            }
        }
        Ok(outcome(&before, after))
    }
}

mimeo_plugin_sdk::export!(SetMetadata);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixtures() {
        mimeo_plugin_sdk::fixtures::run_all::<SetMetadata>(env!("CARGO_MANIFEST_DIR"));
    }

    #[test]
    fn templates() {
        assert_eq!(
            Template::parse("plain").unwrap(),
            Template(vec![Part::Text("plain".into())])
        );
        assert_eq!(
            Template::parse("a-{{ target.name }}-{{rule}}").unwrap(),
            Template(vec![
                Part::Text("a-".into()),
                Part::Var("target.name"),
                Part::Text("-".into()),
                Part::Var("rule")
            ])
        );
        assert!(
            Template::parse("{{target.nmespace}}")
                .unwrap_err()
                .contains("unknown template variable \"target.nmespace\"")
        );
        assert!(
            Template::parse("x-{{rule")
                .unwrap_err()
                .contains("without a closing")
        );
        assert!(Template::parse("{single}").unwrap().is_literal());
    }

    #[test]
    fn config() {
        let err = |c: &str| Config::parse(c).unwrap_err();
        assert!(err(r#"{"labels": {"mimeo.dev/managed-by": "x"}}"#).contains("mimeo's own"));
        assert!(err(r#"{"removeAnnotations": ["mimeo.dev/rule"]}"#).contains("mimeo's own"));
        assert!(err(r#"{"labels": {"a": "b c"}}"#).contains("not a valid label value"));
        assert!(
            err(r#"{"labels": {"a": "b"}, "removeLabels": ["a"]}"#)
                .contains("both in labels and in removeLabels")
        );
        assert!(err(r#"{}"#).contains("nothing to do"));
        assert!(err(r#"{"label": {}}"#).contains("unknown field `label`"));
        assert!(Config::parse(r#"{"annotations": {"note": "any value at all: {{rule}}"}}"#).is_ok());
    }
}
