//! `rename-keys`: renames keys of `data` and `binaryData`. All renames happen at once, so
//! `{"a": "b", "b": "a"}` swaps two keys. A missing old key is ignored; a rename onto a key that
//! stays is an error, as the copy would lose a value.

use mimeo_plugin_sdk::{
    Context, DATA_FIELDS, Guest, Outcome, PluginInfo, check_data_key, log, outcome, parse_config,
    parse_object,
};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Config {
    /// Old key to new key.
    rename: BTreeMap<String, String>,
}

impl Config {
    fn parse(config: &str) -> Result<Self, String> {
        let config: Config = parse_config(config)?;
        if config.rename.is_empty() {
            return Err("rename is empty: give at least one \"old-key\": \"new-key\" pair".into());
        }
        let mut targets = BTreeMap::new();
        for (old, new) in &config.rename {
            check_data_key(old).map_err(|e| format!("rename: {e}"))?;
            check_data_key(new).map_err(|e| format!("rename {old:?}: {e}"))?;
            if old == new {
                return Err(format!("rename {old:?}: the new name is the same as the old one"));
            }
            if let Some(other) = targets.insert(new, old) {
                return Err(format!("rename: both {other:?} and {old:?} would become {new:?}"));
            }
        }
        Ok(config)
    }
}

/// Renames the keys of the data maps of `object`; a key keeps its map (data or binaryData).
fn rename_keys(rename: &BTreeMap<String, String>, object: &mut Map<String, Value>) -> Result<(), String> {
    // Take every key being renamed out first, so that renames onto each other (swaps, chains)
    // work, then put them back under their new names.
    let mut moved: Vec<(&str, String, Value)> = Vec::new();
    for field in DATA_FIELDS {
        if let Some(Value::Object(map)) = object.get_mut(field) {
            for (old, new) in rename {
                if let Some(value) = map.remove(old) {
                    moved.push((field, new.clone(), value));
                }
            }
        }
    }
    // A key must be unique across data and binaryData (a ConfigMap may not hold it in both).
    let staying: BTreeSet<&String> = DATA_FIELDS
        .iter()
        .filter_map(|field| object.get(*field).and_then(Value::as_object))
        .flat_map(Map::keys)
        .collect();
    if let Some((_, new, _)) = moved.iter().find(|(_, new, _)| staying.contains(new)) {
        let old = rename
            .iter()
            .find(|(_, n)| *n == new)
            .map(|(o, _)| o.as_str())
            .unwrap_or_default();
        return Err(format!(
            "cannot rename {old:?} to {new:?}: the object already has a key {new:?}"
        ));
    }
    for (field, new, value) in moved {
        if let Some(Value::Object(map)) = object.get_mut(field) {
            map.insert(new, value);
        }
    }
    Ok(())
}

struct RenameKeys;

impl Guest for RenameKeys {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "rename-keys".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Renames data and binaryData keys; a rename onto an existing key is an error".into(),
            kinds: vec!["Secret".into(), "ConfigMap".into()],
        }
    }

    fn validate_config(config: String) -> Result<(), String> {
        Config::parse(&config).map(drop)
    }

    fn transform(ctx: Context, object: String) -> Result<Outcome, String> {
        let config = Config::parse(&ctx.config)?;
        let before = parse_object(&object)?;
        let present = |key: &String| {
            DATA_FIELDS.iter().any(|f| {
                before
                    .get(*f)
                    .and_then(Value::as_object)
                    .is_some_and(|m| m.contains_key(key))
            })
        };
        let absent: Vec<&String> = config.rename.keys().filter(|k| !present(k)).collect();
        if !absent.is_empty() {
            log::debug(&format!(
                "not renamed, as the object has no such keys: {absent:?}"
            ));
        }
        let mut after = before.clone();
        rename_keys(&config.rename, &mut after)?;
        Ok(outcome(&before, after))
    }
}

mimeo_plugin_sdk::export!(RenameKeys);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fixtures() {
        mimeo_plugin_sdk::fixtures::run_all::<RenameKeys>(env!("CARGO_MANIFEST_DIR"));
    }

    fn renamed(pairs: &[(&str, &str)], object: Value) -> Result<Value, String> {
        let rename = pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        let Value::Object(mut object) = object else {
            unreachable!()
        };
        rename_keys(&rename, &mut object).map(|()| Value::Object(object))
    }

    #[test]
    fn swaps_chains_and_conflicts() {
        let o = json!({"data": {"a": "1", "b": "2"}, "binaryData": {"c": "3"}});
        assert_eq!(
            renamed(&[("a", "b"), ("b", "a")], o.clone()).unwrap(),
            json!({"data": {"a": "2", "b": "1"}, "binaryData": {"c": "3"}})
        );
        assert_eq!(
            renamed(&[("a", "b"), ("b", "z")], o.clone()).unwrap(),
            json!({"data": {"b": "1", "z": "2"}, "binaryData": {"c": "3"}})
        );
        assert!(
            renamed(&[("a", "b")], o.clone())
                .unwrap_err()
                .contains("already has a key \"b\"")
        );
        assert!(
            renamed(&[("a", "c")], o.clone())
                .unwrap_err()
                .contains("already has a key \"c\"")
        );
        assert_eq!(renamed(&[("missing", "x")], o.clone()).unwrap(), o);
    }

    #[test]
    fn config() {
        assert!(
            Config::parse(r#"{"rename": {}}"#)
                .unwrap_err()
                .contains("rename is empty")
        );
        assert!(
            Config::parse(r#"{"rename": {"a": "a"}}"#)
                .unwrap_err()
                .contains("same as the old")
        );
        assert!(
            Config::parse(r#"{"rename": {"a": "x", "b": "x"}}"#)
                .unwrap_err()
                .contains("would become")
        );
        assert!(
            Config::parse(r#"{"rename": {"a": "x/y"}}"#)
                .unwrap_err()
                .contains("not a valid data key")
        );
        assert!(
            Config::parse(r#"{}"#)
                .unwrap_err()
                .contains("missing field `rename`")
        );
    }
}
