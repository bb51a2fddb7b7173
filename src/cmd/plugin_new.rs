//! `mimeo plugin new --lang LANG NAME`: a plugin to start from, not an empty folder, as `kwctl
//! scaffold` gives Kubewarden's authors. For Python, JavaScript, Go and C it is the repository's
//! example in that language (`plugins/examples/<lang>`: it adds an annotation) under the new
//! name, with the WIT beside it and its build script pointed there; for Rust, a crate on
//! wit-bindgen that does the same. Each comes with three of the shared fixture cases, which
//! `mimeo plugin test --fixtures fixtures build/NAME.wasm` runs. Pure: the files are returned,
//! and the command writes them.

/// The languages a plugin can be started in.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    Rust,
    Python,
    Javascript,
    Go,
    C,
}

impl Lang {
    fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Javascript => "javascript",
            Lang::Go => "go",
            Lang::C => "c",
        }
    }
}

/// A file of the new plugin, its path relative to the plugin's folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewFile {
    pub path: String,
    pub content: String,
    pub executable: bool,
}

/// A name that cannot be a plugin's.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "{0:?} cannot name a plugin: use 1 to 63 lowercase letters, digits and '-', starting with a letter (it names the folder, the component file and the crate)"
)]
pub struct BadName(pub String);

const WIT: &str = include_str!("../../wit/transform.wit");

/// The shared fixture cases every new plugin gets, by file: a write, an unchanged copy, an error.
const FIXTURES: &[(&str, &str)] = &[
    (
        "adds-annotation/object.yaml",
        include_str!("../../plugins/examples/python/fixtures/adds-annotation/object.yaml"),
    ),
    (
        "adds-annotation/config.json",
        include_str!("../../plugins/examples/python/fixtures/adds-annotation/config.json"),
    ),
    (
        "adds-annotation/context.json",
        include_str!("../../plugins/examples/python/fixtures/adds-annotation/context.json"),
    ),
    (
        "adds-annotation/expected.yaml",
        include_str!("../../plugins/examples/python/fixtures/adds-annotation/expected.yaml"),
    ),
    (
        "adds-annotation/expected-outcome.txt",
        include_str!("../../plugins/examples/python/fixtures/adds-annotation/expected-outcome.txt"),
    ),
    (
        "unchanged-when-present/object.yaml",
        include_str!("../../plugins/examples/python/fixtures/unchanged-when-present/object.yaml"),
    ),
    (
        "unchanged-when-present/config.json",
        include_str!("../../plugins/examples/python/fixtures/unchanged-when-present/config.json"),
    ),
    (
        "unchanged-when-present/context.json",
        include_str!("../../plugins/examples/python/fixtures/unchanged-when-present/context.json"),
    ),
    (
        "unchanged-when-present/expected.yaml",
        include_str!("../../plugins/examples/python/fixtures/unchanged-when-present/expected.yaml"),
    ),
    (
        "unchanged-when-present/expected-outcome.txt",
        include_str!("../../plugins/examples/python/fixtures/unchanged-when-present/expected-outcome.txt"),
    ),
    (
        "error-missing-key/object.yaml",
        include_str!("../../plugins/examples/python/fixtures/error-missing-key/object.yaml"),
    ),
    (
        "error-missing-key/config.json",
        include_str!("../../plugins/examples/python/fixtures/error-missing-key/config.json"),
    ),
    (
        "error-missing-key/expected-error.txt",
        include_str!("../../plugins/examples/python/fixtures/error-missing-key/expected-error.txt"),
    ),
];

/// The example's own files for `lang` (the build script first), Rust's template for Rust.
fn sources(lang: Lang) -> Vec<(&'static str, &'static str)> {
    match lang {
        Lang::Python => vec![
            ("build.sh", include_str!("../../plugins/examples/python/build.sh")),
            ("app.py", include_str!("../../plugins/examples/python/app.py")),
        ],
        Lang::Javascript => vec![
            (
                "build.sh",
                include_str!("../../plugins/examples/javascript/build.sh"),
            ),
            (
                "add-annotation.js",
                include_str!("../../plugins/examples/javascript/add-annotation.js"),
            ),
        ],
        Lang::Go => vec![
            ("build.sh", include_str!("../../plugins/examples/go/build.sh")),
            (
                "export_mimeo_transform_transformer/add_annotation.go",
                include_str!(
                    "../../plugins/examples/go/export_mimeo_transform_transformer/add_annotation.go"
                ),
            ),
        ],
        Lang::C => vec![
            ("build.sh", include_str!("../../plugins/examples/c/build.sh")),
            (
                "add_annotation.c",
                include_str!("../../plugins/examples/c/add_annotation.c"),
            ),
            ("json.c", include_str!("../../plugins/examples/c/json.c")),
            ("json.h", include_str!("../../plugins/examples/c/json.h")),
        ],
        Lang::Rust => vec![
            ("build.sh", RUST_BUILD),
            ("Cargo.toml", RUST_CARGO),
            ("src/lib.rs", RUST_LIB),
        ],
    }
}

/// Where an example's build script looks for the WIT and writes the component, and what a new
/// plugin's looks at instead: its own folder.
const REWRITES: [(&str, &str); 2] = [
    (
        r#"wit="${MIMEO_WIT:-$here/../../../wit}""#,
        r#"wit="${MIMEO_WIT:-$here/wit}""#,
    ),
    (
        r#"out="${MIMEO_PLUGIN_OUT:-$HOME/.cache/mimeo/plugins}""#,
        r#"out="${MIMEO_PLUGIN_OUT:-$here/build}""#,
    ),
];

/// Whether `name` may name a plugin.
pub fn check_name(name: &str) -> Result<(), BadName> {
    let ok = (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    match ok {
        true => Ok(()),
        false => Err(BadName(name.to_owned())),
    }
}

/// The files of a new plugin `name` in `lang`.
pub fn files(lang: Lang, name: &str) -> Result<Vec<NewFile>, BadName> {
    check_name(name)?;
    let example = format!("add-annotation-{}", lang.name());
    let crate_name = name.replace('-', "_");
    let mut files: Vec<NewFile> = sources(lang)
        .into_iter()
        .map(|(path, text)| {
            let mut content = text
                .replace("{{NAME}}", name)
                .replace("{{CRATE}}", &crate_name)
                .replace(&example, name);
            if path == "build.sh" {
                for (from, to) in REWRITES {
                    content = content.replace(from, to);
                }
            }
            NewFile {
                path: path.to_owned(),
                content,
                executable: path == "build.sh",
            }
        })
        .collect();
    files.push(NewFile {
        path: "wit/transform.wit".into(),
        content: WIT.to_owned(),
        executable: false,
    });
    files.extend(FIXTURES.iter().map(|(path, text)| NewFile {
        path: format!("fixtures/{path}"),
        content: (*text).to_owned(),
        executable: false,
    }));
    files.push(NewFile {
        path: "README.md".into(),
        content: readme(lang, name),
        executable: false,
    });
    Ok(files)
}

fn readme(lang: Lang, name: &str) -> String {
    format!(
        "# {name}\n\nA mimeo transform plugin in {lang}, made by `mimeo plugin new`: it adds one annotation to\nevery copy (config `{{\"key\": \"example.com/tenant\", \"value\": \"{{{{target.namespace}}}}\"}}`). Change it to\ndo what your copies need.\n\n```sh\n./build.sh                                              # writes build/{name}.wasm\nmimeo plugin test --fixtures fixtures build/{name}.wasm    # every case in fixtures/\nmimeo plugin push build/{name}.wasm oci://registry.example.com/plugins/{name}:0.1.0\n```\n\n`wit/transform.wit` is the interface the plugin is built against (`mimeo:transform@0.2.0`);\na case in `fixtures/` is a folder with `object.yaml`, optional `config.json`, `context.json` and\n`inputs/`, and `expected.yaml` (with `expected-outcome.txt`), `expected-skip.txt` or\n`expected-error.txt`.\n",
        lang = lang.name()
    )
}

const RUST_BUILD: &str = r#"#!/usr/bin/env bash
# Builds {{NAME}}.wasm (a WebAssembly component, wasm32-wasip2, release) into ./build, or
# $MIMEO_PLUGIN_OUT, and prints that folder as the last stdout line. Cargo's build cache is
# ./target, or $MIMEO_PLUGIN_TARGET_DIR.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${MIMEO_PLUGIN_OUT:-$here/build}"
export CARGO_TARGET_DIR="${MIMEO_PLUGIN_TARGET_DIR:-$here/target}"
target=wasm32-wasip2

if command -v rustup >/dev/null; then
    rustup target list --installed | grep -qx "$target" || rustup target add "$target" >&2
fi
(cd "$here" && cargo build --release --target "$target" >&2)
mkdir -p "$out"
cp "$CARGO_TARGET_DIR/$target/release/{{CRATE}}.wasm" "$out/{{NAME}}.wasm.tmp"
mv "$out/{{NAME}}.wasm.tmp" "$out/{{NAME}}.wasm"
echo "[rust] built $out/{{NAME}}.wasm" >&2
echo "$out"
"#;

const RUST_CARGO: &str = r#"[package]
name = "{{NAME}}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
serde_json = "1"
wit-bindgen = { version = "0.63", default-features = false, features = ["macros", "realloc"] }

[profile.release]
opt-level = "s"
lto = true
codegen-units = 1
strip = true
panic = "abort"

# A workspace of its own, wherever the folder is.
[workspace]
"#;

const RUST_LIB: &str = r#"//! {{NAME}}: a mimeo transform plugin in Rust. It adds one annotation to every copy:
//!
//! ```json
//! {"key": "example.com/tenant", "value": "{{target.namespace}}"}
//! ```
//!
//! `key` is required, non-empty and must not start with `mimeo.dev/` (mimeo's own annotations);
//! `value` defaults to "" and may hold `{{target.namespace}}`, the namespace the copy goes to.
//! When the annotation has that value already, the copy is left `unchanged`.

wit_bindgen::generate!({ world: "plugin", path: "wit" });

use exports::mimeo::transform::transformer::Guest;
use mimeo::transform::log::{Level, log};
use mimeo::transform::types::{Context, Outcome, PluginInfo};
use serde_json::{Map, Value};

const RESERVED_PREFIX: &str = "mimeo.dev/";
const TARGET_NAMESPACE: &str = "{{target.namespace}}";

struct Plugin;

/// The config as (key, value), or the message the rule's status shows.
fn parse_config(config: &str) -> Result<(String, String), String> {
    let config = if config.trim().is_empty() { "{}" } else { config };
    let parsed: Value = serde_json::from_str(config).map_err(|e| format!("config is not valid JSON: {e}"))?;
    let Some(parsed) = parsed.as_object() else {
        return Err("config must be a JSON object".into());
    };
    let key = match parsed.get("key") {
        None | Some(Value::Null) => return Err("config.key is required".into()),
        Some(Value::String(key)) if key.is_empty() => return Err("config.key must not be empty".into()),
        Some(Value::String(key)) if key.starts_with(RESERVED_PREFIX) => {
            return Err(format!("config.key must not start with {RESERVED_PREFIX} (mimeo's own annotations)"));
        }
        Some(Value::String(key)) => key.clone(),
        Some(_) => return Err("config.key must be a string".into()),
    };
    let value = match parsed.get("value") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(value)) => value.clone(),
        Some(_) => return Err("config.value must be a string".into()),
    };
    Ok((key, value))
}

impl Guest for Plugin {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "{{NAME}}".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Adds one annotation (key and value from the config) to every copy.".into(),
            kinds: Vec::new(),
        }
    }

    fn validate_config(config: String) -> Result<(), String> {
        parse_config(&config).map(drop)
    }

    fn transform(ctx: Context, object: String) -> Result<Outcome, String> {
        let (key, mut value) = parse_config(&ctx.config)?;
        if value.contains(TARGET_NAMESPACE) {
            let Some(namespace) = &ctx.target.namespace else {
                return Err(format!("config.value uses {TARGET_NAMESPACE} but the target has no namespace (cluster-scoped)"));
            };
            value = value.replace(TARGET_NAMESPACE, namespace);
        }
        let mut object: Value = serde_json::from_str(&object).map_err(|e| format!("object is not valid JSON: {e}"))?;
        let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
            return Err("object.metadata must be an object".into());
        };
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if annotations.is_null() {
            *annotations = Value::Object(Map::new());
        }
        let Some(annotations) = annotations.as_object_mut() else {
            return Err("metadata.annotations must be an object".into());
        };
        if annotations.get(&key).and_then(Value::as_str) == Some(value.as_str()) {
            log(Level::Info, &format!("annotation {key} already set on {}", ctx.target.name));
            return Ok(Outcome::Unchanged);
        }
        annotations.insert(key.clone(), Value::String(value));
        log(Level::Info, &format!("set annotation {key} on {}", ctx.target.name));
        Ok(Outcome::Write(object.to_string()))
    }
}

export!(Plugin);
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for good in ["a", "tenant-annotation", "p2"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "A", "-a", "a-", "a_b", "a.b", "1a", &"a".repeat(64)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_examples_build_script_is_pointed_at_the_new_folder_and_name() {
        for lang in [Lang::Python, Lang::Javascript, Lang::Go, Lang::C] {
            let files = files(lang, "tenant-note").unwrap();
            let build = files.iter().find(|f| f.path == "build.sh").unwrap();
            assert!(build.executable);
            for (from, to) in REWRITES {
                assert!(!build.content.contains(from), "{lang:?}: {from} left in build.sh");
                assert!(build.content.contains(to), "{lang:?}: {to} not in build.sh");
            }
            assert!(build.content.contains("tenant-note.wasm"), "{lang:?}");
            assert!(
                files.iter().all(|f| !f.content.contains("add-annotation-")),
                "{lang:?}: the example's name left somewhere"
            );
            let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
            for path in [
                "wit/transform.wit",
                "README.md",
                "fixtures/adds-annotation/expected.yaml",
                "fixtures/error-missing-key/expected-error.txt",
            ] {
                assert!(paths.contains(&path), "{lang:?}: {path}");
            }
        }
    }

    #[test]
    fn the_rust_template_is_named_after_the_plugin() {
        let files = files(Lang::Rust, "tenant-note").unwrap();
        let cargo = files.iter().find(|f| f.path == "Cargo.toml").unwrap();
        assert!(cargo.content.contains("name = \"tenant-note\""));
        let build = files.iter().find(|f| f.path == "build.sh").unwrap();
        assert!(build.content.contains("release/tenant_note.wasm"));
        let lib = files.iter().find(|f| f.path == "src/lib.rs").unwrap();
        assert!(lib.content.contains("name: \"tenant-note\".into()"));
        assert!(!lib.content.contains("{{NAME}}"));
        assert!(
            lib.content.contains("\"{{target.namespace}}\""),
            "the placeholder the config uses is kept"
        );
    }
}
