//! Runs a plugin's fixture cases natively, calling its [`Guest`] implementation directly. The
//! layout is described in `plugins/README.md`:
//!
//! ```text
//! fixtures/<case>/object.yaml          the object handed to the plugin (YAML or JSON)
//! fixtures/<case>/config.json          the rule's config for the plugin
//! fixtures/<case>/context.json         optional: rule, source*, target* (see README)
//! fixtures/<case>/expected.yaml        the object written (the input when `unchanged`), or
//! fixtures/<case>/expected-skip.txt    a substring of the skip reason, or
//! fixtures/<case>/expected-error.txt   a substring of the validate-config or transform error
//! fixtures/<case>/expected-outcome.txt optional with expected.yaml: `unchanged` or `write`
//! ```

use crate::{Context, Guest, ObjectRef, Outcome, Target};
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};

/// What a case expects.
#[derive(Debug)]
pub enum Expected {
    Object(Value),
    Skip(String),
    Error(String),
}

/// One fixture case, read from its directory.
#[derive(Debug)]
pub struct Case {
    pub name: String,
    pub object: Value,
    pub config: String,
    pub context: Context,
    pub expected: Expected,
    /// `unchanged` or `write`, when the case says which outcome gives the expected object.
    pub outcome: Option<String>,
}

fn read(path: &Path) -> Result<Option<String>, String> {
    match fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn yaml(path: &Path, text: &str) -> Result<Value, String> {
    serde_yaml_ng::from_str(text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The context for a case: `context.json` where it says, else taken from the object.
fn context(object: &Value, given: &Value, config: &str) -> Result<Context, String> {
    let known = [
        "rule",
        "sourceCluster",
        "sourceApiVersion",
        "sourceKind",
        "sourceNamespace",
        "sourceName",
        "targetCluster",
        "targetNamespace",
        "targetName",
    ];
    let Some(given) = given.as_object() else {
        return Err("context.json is not a JSON object".into());
    };
    if let Some(unknown) = given.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!(
            "context.json: unknown key {unknown:?}; known: {}",
            known.join(", ")
        ));
    }
    let from_object = |pointer: &str| object.pointer(pointer).and_then(Value::as_str).map(str::to_owned);
    let string = |key: &str, default: Option<String>| -> Result<String, String> {
        match given.get(key) {
            None => Ok(default.unwrap_or_default()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(format!("context.json: {key} must be a string, not {other}")),
        }
    };
    // A null namespace stands for a cluster-scoped object.
    let namespace = |key: &str| -> Result<Option<String>, String> {
        match given.get(key) {
            None => Ok(from_object("/metadata/namespace")),
            Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(format!(
                "context.json: {key} must be a string or null, not {other}"
            )),
        }
    };
    Ok(Context {
        rule: string("rule", Some("SyncRule/platform/fixtures".into()))?,
        source: ObjectRef {
            api_version: string("sourceApiVersion", from_object("/apiVersion"))?,
            kind: string("sourceKind", from_object("/kind"))?,
            namespace: namespace("sourceNamespace")?,
            name: string("sourceName", from_object("/metadata/name"))?,
        },
        source_cluster: string("sourceCluster", None)?,
        target: Target {
            cluster: string("targetCluster", None)?,
            namespace: namespace("targetNamespace")?,
            name: string("targetName", from_object("/metadata/name"))?,
        },
        config: config.to_owned(),
    })
}

/// Reads one case from its directory.
pub fn load(dir: &Path) -> Result<Case, String> {
    let name = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let object_path = dir.join("object.yaml");
    let object_text = read(&object_path)?.ok_or_else(|| format!("{}: missing", object_path.display()))?;
    let object = yaml(&object_path, &object_text)?;
    let config = read(&dir.join("config.json"))?.unwrap_or_else(|| "{}".into());
    let given = match read(&dir.join("context.json"))? {
        Some(text) => serde_json::from_str(&text).map_err(|e| format!("context.json: {e}"))?,
        None => Value::Object(Default::default()),
    };
    let context = context(&object, &given, config.trim())?;
    let expected_path = dir.join("expected.yaml");
    let mut expected = Vec::new();
    if let Some(text) = read(&expected_path)? {
        expected.push(Expected::Object(yaml(&expected_path, &text)?));
    }
    if let Some(text) = read(&dir.join("expected-skip.txt"))? {
        expected.push(Expected::Skip(text.trim().to_owned()));
    }
    if let Some(text) = read(&dir.join("expected-error.txt"))? {
        expected.push(Expected::Error(text.trim().to_owned()));
    }
    if expected.len() != 1 {
        return Err(format!(
            "{}: needs exactly one of expected.yaml, expected-skip.txt, expected-error.txt",
            dir.display()
        ));
    }
    let outcome = read(&dir.join("expected-outcome.txt"))?.map(|s| s.trim().to_owned());
    match (&outcome, &expected[0]) {
        (None, _) => {}
        (Some(o), Expected::Object(_)) if o == "unchanged" || o == "write" => {}
        (Some(o), _) => {
            return Err(format!(
                "expected-outcome.txt says {o:?}: it must be unchanged or write, next to expected.yaml"
            ));
        }
    }
    Ok(Case {
        name,
        object,
        config: config.trim().to_owned(),
        context,
        expected: expected.remove(0),
        outcome,
    })
}

/// Runs one case; `Err` says how the plugin's answer differs from the expected one.
pub fn run<G: Guest>(case: &Case) -> Result<(), String> {
    let answer = G::validate_config(case.config.clone())
        .and_then(|()| G::transform(case.context.clone(), case.object.to_string()));
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    match (&case.expected, answer) {
        (Expected::Object(want), Ok(outcome @ (Outcome::Unchanged | Outcome::Write(_)))) => {
            let (tag, got) = match outcome {
                Outcome::Write(json) => (
                    "write",
                    serde_json::from_str(&json).map_err(|e| format!("wrote invalid JSON: {e}"))?,
                ),
                _ => ("unchanged", case.object.clone()),
            };
            if case.outcome.as_deref().is_some_and(|o| o != tag) {
                return Err(format!(
                    "outcome is {tag}, expected {}",
                    case.outcome.as_deref().unwrap_or_default()
                ));
            }
            if &got == want {
                Ok(())
            } else {
                Err(format!("{tag}:\n{}\nexpected\n{}", pretty(&got), pretty(want)))
            }
        }
        (Expected::Skip(want), Ok(Outcome::Skip(reason))) if reason.contains(want.as_str()) => Ok(()),
        (Expected::Error(want), Err(error)) if error.contains(want.as_str()) => Ok(()),
        (want, got) => Err(format!("expected {want:?}, got {got:?}")),
    }
}

/// Runs every case under `<crate>/fixtures`, panicking with all failures at once.
pub fn run_all<G: Guest>(crate_dir: &str) {
    let root = PathBuf::from(crate_dir).join("fixtures");
    let mut dirs: Vec<PathBuf> = fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "{}: no cases", root.display());
    let info = G::describe();
    assert!(!info.name.is_empty() && !info.version.is_empty() && !info.description.is_empty());
    let failures: Vec<String> = dirs
        .iter()
        .filter_map(|dir| {
            let result = load(dir).and_then(|case| run::<G>(&case));
            result
                .err()
                .map(|e| format!("case {}: {e}", dir.file_name().unwrap().to_string_lossy()))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n\n{}",
        failures.len(),
        dirs.len(),
        failures.join("\n\n")
    );
    eprintln!("{}: {} fixture cases passed", info.name, dirs.len());
}
