//! Guest bindings for the `mimeo:transform@0.2.0` world `plugin`, and the small helpers mimeo's
//! first-party plugins share: config parsing, key globs, `{{placeholder}}` templates, Kubernetes
//! name checks, and the outcome for an object that may or may not have changed.
//!
//! A plugin implements [`Guest`] and exports it:
//!
//! ```ignore
//! use mimeo_plugin_sdk::{Context, Guest, Outcome, PluginInfo};
//! struct MyPlugin;
//! impl Guest for MyPlugin { /* describe, validate_config, transform */ }
//! mimeo_plugin_sdk::export!(MyPlugin);
//! ```
//!
//! A plugin built on this SDK exports `transformer@0.2.0`, so it needs a mimeo that knows 0.2.0;
//! it gets the rule's inputs in [`Context::inputs`], each an [`Input`] with its object as JSON.

wit_bindgen::generate!({
    world: "plugin",
    path: "../../wit",
    // Plugin crates call `mimeo_plugin_sdk::export!(T)`; the macro finds the bindings here.
    pub_export_macro: true,
    default_bindings_module: "mimeo_plugin_sdk",
});

pub use exports::mimeo::transform::transformer::Guest;
pub use mimeo::transform::types::{Context, Input, ObjectRef, Outcome, PluginInfo, Target};

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

#[cfg(feature = "fixtures")]
pub mod fixtures;
pub mod template;

/// Log lines through the host's `log` import (stderr when running natively, as in `cargo test`).
pub mod log {
    pub use crate::mimeo::transform::log::Level;

    pub fn log(level: Level, message: &str) {
        #[cfg(target_family = "wasm")]
        crate::mimeo::transform::log::log(level, message);
        #[cfg(not(target_family = "wasm"))]
        eprintln!("[{level:?}] {message}");
    }
    pub fn debug(message: &str) {
        log(Level::Debug, message)
    }
    pub fn info(message: &str) {
        log(Level::Info, message)
    }
    pub fn warn(message: &str) {
        log(Level::Warn, message)
    }
}

/// Parses a rule's config (JSON) into `T`; an empty string counts as `{}`. The error says what is
/// wrong in serde's words, which name the field and what was expected.
pub fn parse_config<T: DeserializeOwned>(config: &str) -> Result<T, String> {
    let config = if config.trim().is_empty() { "{}" } else { config };
    serde_json::from_str(config).map_err(|e| format!("invalid config: {e}"))
}

/// Parses the object mimeo hands over; it is always a JSON object.
pub fn parse_object(object: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str(object) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err("the object is not a JSON object".into()),
        Err(e) => Err(format!("the object is not valid JSON: {e}")),
    }
}

/// `unchanged` when `after` equals `before`, else `write(after)`.
pub fn outcome(before: &Map<String, Value>, after: Map<String, Value>) -> Outcome {
    if *before == after {
        Outcome::Unchanged
    } else {
        Outcome::Write(Value::Object(after).to_string())
    }
}

/// Whether `pattern` matches `text`, where `*` matches any run of characters (also none). The
/// same globs as a rule's `metadata` filters.
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if text.len() < first.len() + last.len() || !text.starts_with(first) || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

/// The maps of an object that hold keyed data: `data` and `binaryData` (Secrets, ConfigMaps), and
/// `stringData` should a Secret carry it.
pub const DATA_FIELDS: [&str; 3] = ["data", "binaryData", "stringData"];

/// Prefix of mimeo's own labels and annotations, which plugins must leave alone.
pub const MIMEO_PREFIX: &str = "mimeo.dev/";

/// Whether `key` is valid as a key of a Secret's or ConfigMap's data: `[-._a-zA-Z0-9]+`, at most
/// 253 characters, and neither `.` nor `..`.
pub fn check_data_key(key: &str) -> Result<(), String> {
    let ok = !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{key:?} is not a valid data key: use letters, digits, '-', '_' and '.' (at most 253)"
        ))
    }
}

fn is_name_segment(s: &str, max: usize) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= max
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Whether `key` is a valid label or annotation key: `[prefix/]name`, the prefix a DNS subdomain,
/// the name at most 63 characters of `[-_.a-zA-Z0-9]` starting and ending alphanumeric.
pub fn check_metadata_key(key: &str) -> Result<(), String> {
    let ok = match key.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_name_segment(name, 63),
        None => is_name_segment(key, 63),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{key:?} is not a valid label or annotation key: [prefix/]name, where the name has at most \
             63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, and the \
             prefix is a DNS subdomain"
        ))
    }
}

/// Whether `value` is a valid label value: empty, or at most 63 characters of `[-_.a-zA-Z0-9]`
/// starting and ending alphanumeric. The error says what is wrong without the value, which may
/// be rendered from a Secret: `is not a valid label value: ...`. A caller that knows the value is
/// its config's own may show it beside.
pub fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_name_segment(value, 63) {
        return Ok(());
    }
    let b = value.as_bytes();
    let why = if value.chars().count() > 63 {
        format!(
            "it has {} characters, and at most 63 are allowed",
            value.chars().count()
        )
    } else if !b.iter().all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c)) {
        "it holds characters other than letters, digits, '-', '_' and '.'".to_owned()
    } else {
        "it must start and end with a letter or digit".to_owned()
    };
    Err(format!("is not a valid label value: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let cases = [
            ("*", "anything", true),
            ("*", "", true),
            ("tls.*", "tls.crt", true),
            ("tls.*", "ca.crt", false),
            ("*.crt", "ca.crt", true),
            ("*.crt", "ca.key", false),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "acb", false),
            ("ab*ba", "aba", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(glob_matches(pattern, text), expected, "{pattern} vs {text}");
        }
    }

    #[test]
    fn names() {
        assert!(check_data_key(".dockerconfigjson").is_ok());
        assert!(check_data_key("tls.crt").is_ok());
        assert!(check_data_key("a/b").is_err());
        assert!(check_data_key("..").is_err());
        assert!(check_data_key("").is_err());
        assert!(check_metadata_key("app.kubernetes.io/name").is_ok());
        assert!(check_metadata_key("team").is_ok());
        assert!(check_metadata_key("Team_1").is_ok());
        assert!(check_metadata_key("-team").is_err());
        assert!(check_metadata_key("Example.com/x").is_err());
        assert!(check_metadata_key("a/b/c").is_err());
        assert!(check_label_value("").is_ok());
        assert!(check_label_value("tenant-a").is_ok());
        assert!(check_label_value("SyncRule/a/b").is_err());
        assert!(check_label_value(&"x".repeat(64)).is_err());
        // What is wrong, never the value: a rendered one may come from a Secret.
        for (value, why) in [
            (
                "hunter2 x",
                "it holds characters other than letters, digits, '-', '_' and '.'",
            ),
            ("-hunter2", "it must start and end with a letter or digit"),
            (
                &"hunter2".repeat(10),
                "it has 70 characters, and at most 63 are allowed",
            ),
        ] {
            let error = check_label_value(value).unwrap_err();
            assert_eq!(error, format!("is not a valid label value: {why}"));
            assert!(!error.contains("hunter2"), "{error}");
        }
    }

    #[test]
    fn config_and_outcome() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        struct C {
            #[serde(default)]
            a: Vec<String>,
        }
        assert!(parse_config::<C>("").unwrap().a.is_empty());
        assert!(
            parse_config::<C>(r#"{"b": 1}"#)
                .unwrap_err()
                .contains("unknown field `b`")
        );
        let o = parse_object(r#"{"kind":"Secret"}"#).unwrap();
        assert!(matches!(outcome(&o, o.clone()), Outcome::Unchanged));
        let mut changed = o.clone();
        changed.insert("data".into(), Value::Object(Map::new()));
        assert!(matches!(outcome(&o, changed), Outcome::Write(s) if s.contains("\"data\"")));
        assert!(parse_object("[]").is_err());
    }
}
