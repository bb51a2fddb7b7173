//! YAML that reads back as what was meant, by every reader.
//!
//! `kubectl` and the apiserver read YAML 1.1 (through `sigs.k8s.io/yaml`), where a plain `yes`,
//! `on`, `0777` or `1_000` is a boolean or a number; YAML 1.2 writers (as `serde_yaml_ng`) leave
//! them unquoted, and a selector value `yes` then reaches the apiserver as `true` and the rule is
//! refused. So every string is written double-quoted (JSON's escapes are YAML's), and a key
//! only stays plain when it cannot read as anything but a string.

use serde_json::Value;
use std::fmt::Write;

/// `value` as block YAML, one document body, ending in a newline.
pub fn to_string(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => write_map(&mut out, map, 0),
        Value::Array(items) if !items.is_empty() => write_seq(&mut out, items, 0),
        scalar => {
            out.push_str(&scalar_text(scalar));
            out.push('\n');
        }
    }
    out
}

/// A scalar, or an empty collection, on one line.
fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(s) => quoted(s),
        Value::Object(_) => "{}".to_owned(),
        Value::Array(_) => "[]".to_owned(),
        other => other.to_string(),
    }
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

/// A key plain only when it is made of letters, digits and `-._/` and starts with a letter, and
/// is none of the words YAML 1.1 reads as booleans or null.
fn key_text(key: &str) -> String {
    const WORDS: [&str; 11] = [
        "y", "n", "yes", "no", "on", "off", "true", "false", "null", "~", "nan",
    ];
    let plain = key.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '/'))
        && !WORDS.contains(&key.to_ascii_lowercase().as_str());
    if plain { key.to_owned() } else { quoted(key) }
}

fn is_block(value: &Value) -> bool {
    match value {
        Value::Object(map) => !map.is_empty(),
        Value::Array(items) => !items.is_empty(),
        _ => false,
    }
}

fn write_map(out: &mut String, map: &serde_json::Map<String, Value>, indent: usize) {
    for (key, value) in map {
        let _ = write!(out, "{:indent$}{}:", "", key_text(key));
        write_value(out, value, indent);
    }
}

fn write_seq(out: &mut String, items: &[Value], indent: usize) {
    for item in items {
        let _ = write!(out, "{:indent$}-", "");
        match item {
            // A map's first entry on the dash's line, the rest under it.
            Value::Object(map) if !map.is_empty() => {
                let mut inner = String::new();
                write_map(&mut inner, map, indent + 2);
                out.push(' ');
                out.push_str(&inner[indent + 2..]);
            }
            Value::Array(inner) if !inner.is_empty() => {
                out.push('\n');
                write_seq(out, inner, indent + 2);
            }
            scalar => {
                let _ = writeln!(out, " {}", scalar_text(scalar));
            }
        }
    }
}

/// After `key:` — a scalar on the same line, a collection below it.
fn write_value(out: &mut String, value: &Value, indent: usize) {
    if !is_block(value) {
        let _ = writeln!(out, " {}", scalar_text(value));
        return;
    }
    out.push('\n');
    match value {
        Value::Object(map) => write_map(out, map, indent + 2),
        Value::Array(items) => write_seq(out, items, indent + 2),
        _ => unreachable!("a block is a map or a sequence"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_back_as_written() {
        let value = json!({
            "apiVersion": "mimeo.dev/v1alpha1",
            "metadata": {"name": "x", "labels": {"yes": "on", "a.b/c": "0777"}},
            "spec": {"targets": [
                {"namespaceSelector": {"matchLabels": {"team": "yes"},
                                        "matchExpressions": [{"key": "k", "operator": "In", "values": ["no", "1_000", "~", "null", "y"]}]}},
                {"namespace": "a"},
                [],
                {}
            ],
            "n": 3, "f": 1.5, "b": true, "z": null, "empty": "", "multi": "a\nb: \"c\"\t#"},
        });
        let text = to_string(&value);
        let back: Value = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(back, value, "{text}");
        assert!(text.contains("team: \"yes\""), "{text}");
        assert!(text.contains("\"yes\": \"on\""), "{text}");
        assert!(text.contains("- \"no\""), "{text}");
    }
}
