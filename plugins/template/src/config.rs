//! The plugin's config: which values are templates and where each goes. Everything that can be
//! checked without rendering is checked here, so a bad rule fails in `validate-config`, before any
//! copy.

use mimeo_plugin_sdk::{MIMEO_PREFIX, check_data_key, check_label_value, check_metadata_key, parse_config};
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    #[serde(default)]
    string_data: BTreeMap<String, String>,
    #[serde(default)]
    data: BTreeMap<String, String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    replace_data: bool,
}

/// Where a rendered value goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// `data[key]`, from plain text (base64-encoded for a Secret).
    StringData,
    /// `data[key]` as rendered (base64 already, for a Secret).
    Data,
    Label,
    Annotation,
}

impl Field {
    /// The config field, as the user wrote it.
    pub fn config_name(self) -> &'static str {
        match self {
            Field::StringData => "stringData",
            Field::Data => "data",
            Field::Label => "labels",
            Field::Annotation => "annotations",
        }
    }
}

/// One template of the config.
#[derive(Debug, PartialEq)]
pub struct Entry {
    pub field: Field,
    pub key: String,
    pub source: String,
}

impl Entry {
    /// How errors name this template: `stringData[.dockerconfigjson]`.
    pub fn name(&self) -> String {
        format!("{}[{}]", self.field.config_name(), self.key)
    }
}

#[derive(Debug)]
pub struct Config {
    /// In the config's order: stringData, data, labels, annotations, each by key.
    pub entries: Vec<Entry>,
    /// The copy's data holds only the templated keys.
    pub replace_data: bool,
}

fn check_metadata(field: Field, key: &str, source: &str) -> Result<(), String> {
    let what = field.config_name();
    if key.starts_with(MIMEO_PREFIX) {
        return Err(format!(
            "{what}[{key}]: keys under {MIMEO_PREFIX} are mimeo's own and cannot be set"
        ));
    }
    check_metadata_key(key).map_err(|e| format!("{what}[{key}]: {e}"))?;
    // A value without template syntax renders as itself: check it now rather than at each copy.
    if field == Field::Label && !source.contains('{') {
        check_label_value(source).map_err(|e| format!("{what}[{key}]: {source:?} {e}"))?;
    }
    Ok(())
}

/// Parses and checks a config (JSON; empty counts as `{}`), without compiling the templates.
pub fn parse(config: &str) -> Result<Config, String> {
    let raw: RawConfig = parse_config(config)?;
    if let Some(key) = raw.string_data.keys().find(|k| raw.data.contains_key(*k)) {
        return Err(format!(
            "data key {key:?} is in both stringData and data: give it in one of them"
        ));
    }
    let fields = [
        (Field::StringData, raw.string_data),
        (Field::Data, raw.data),
        (Field::Label, raw.labels),
        (Field::Annotation, raw.annotations),
    ];
    let mut entries = Vec::new();
    for (field, templates) in fields {
        for (key, source) in templates {
            match field {
                Field::StringData | Field::Data => {
                    check_data_key(&key).map_err(|e| format!("{}[{key}]: {e}", field.config_name()))?
                }
                Field::Label | Field::Annotation => check_metadata(field, &key, &source)?,
            }
            entries.push(Entry { field, key, source });
        }
    }
    if entries.is_empty() {
        return Err(
            "invalid config: give at least one template in stringData, data, labels or annotations".into(),
        );
    }
    let has_data = entries
        .iter()
        .any(|e| matches!(e.field, Field::StringData | Field::Data));
    if raw.replace_data && !has_data {
        return Err(
            "invalid config: replaceData needs at least one stringData or data template; \
             to drop data keys use the filter-keys plugin"
                .into(),
        );
    }
    Ok(Config {
        entries,
        replace_data: raw.replace_data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_in_order_with_their_names() {
        let config = parse(
            r#"{"annotations": {"a": "x"}, "labels": {"team": "{{ rule }}"},
                "data": {"b": "YQ=="}, "stringData": {".dockerconfigjson": "{}"}, "replaceData": true}"#,
        )
        .unwrap();
        let names: Vec<String> = config.entries.iter().map(Entry::name).collect();
        assert_eq!(
            names,
            [
                "stringData[.dockerconfigjson]",
                "data[b]",
                "labels[team]",
                "annotations[a]"
            ]
        );
        assert!(config.replace_data);
        assert!(!parse(r#"{"labels": {"a": "b"}}"#).unwrap().replace_data);
    }

    #[test]
    fn refuses_bad_configs() {
        let cases = [
            ("", "at least one template"),
            ("{}", "at least one template"),
            (r#"{"labels": {}}"#, "at least one template"),
            (r#"{"stringdata": {"a": "b"}}"#, "unknown field `stringdata`"),
            (r#"{"data": {"a": 1}}"#, "invalid type: integer"),
            (
                r#"{"data": {"a/b": "x"}}"#,
                "data[a/b]: \"a/b\" is not a valid data key",
            ),
            (
                r#"{"stringData": {"a": "x"}, "data": {"a": "eA=="}}"#,
                "in both stringData and data",
            ),
            (r#"{"labels": {"mimeo.dev/x": "y"}}"#, "mimeo's own"),
            (r#"{"annotations": {"mimeo.dev/x": "y"}}"#, "mimeo's own"),
            (
                r#"{"labels": {"-x": "y"}}"#,
                "labels[-x]: \"-x\" is not a valid label or annotation key",
            ),
            (
                r#"{"labels": {"x": "a b"}}"#,
                "labels[x]: \"a b\" is not a valid label value",
            ),
            (
                r#"{"labels": {"x": "a"}, "replaceData": true}"#,
                "replaceData needs",
            ),
        ];
        for (config, error) in cases {
            let got = parse(config).unwrap_err();
            assert!(got.contains(error), "{config}: {got}");
        }
        // Templated label values are checked once rendered; annotation values are free text.
        assert!(parse(r#"{"labels": {"x": "{{ 'a b' }}"}, "annotations": {"y": "a b"}}"#).is_ok());
    }
}
