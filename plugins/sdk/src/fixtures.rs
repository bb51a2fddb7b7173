//! Runs a plugin's fixture cases natively, calling its [`Guest`] implementation directly. The
//! layout is described in `plugins/README.md`:
//!
//! ```text
//! fixtures/<case>/object.yaml          the object handed to the plugin (YAML or JSON)
//! fixtures/<case>/config.json          the rule's config for the plugin
//! fixtures/<case>/context.json         optional: rule, source*, target* (see README)
//! fixtures/<case>/inputs/<name>.yaml   optional: the rule's inputs, one object a file (or .json),
//!                                      handed in file-name order, named by the file stem
//! fixtures/<case>/expected.yaml        the object written (the input when `unchanged`), or
//! fixtures/<case>/expected-skip.txt    a substring of the skip reason, or
//! fixtures/<case>/expected-error.txt   a substring of the validate-config or transform error
//! fixtures/<case>/expected-outcome.txt optional with expected.yaml: `unchanged` or `write`
//! ```

use crate::{Context, Guest, Input, ObjectRef, Outcome, Target};
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
fn context(object: &Value, given: &Value, config: &str, inputs: Vec<Input>) -> Result<Context, String> {
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
        inputs,
    })
}

/// The reference the host would give for `object`: its apiVersion, kind, namespace and name.
fn object_ref(path: &Path, object: &Value) -> Result<ObjectRef, String> {
    let field = |pointer: &str| object.pointer(pointer).and_then(Value::as_str).map(str::to_owned);
    let required = |pointer: &str| {
        field(pointer).ok_or_else(|| format!("{}: {pointer} is missing or not a string", path.display()))
    };
    Ok(ObjectRef {
        api_version: required("/apiVersion")?,
        kind: required("/kind")?,
        namespace: field("/metadata/namespace"),
        name: required("/metadata/name")?,
    })
}

/// The case's inputs from `inputs/<name>.yaml` (or `.json`), in file-name order as the host hands
/// them in rule order; any other file there is refused, so a misnamed input is not silently lost.
fn inputs(dir: &Path, cluster: &str) -> Result<Vec<Input>, String> {
    let dir = dir.join("inputs");
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    let mut paths = entries
        .map(|e| e.map(|e| e.path()).map_err(|e| format!("{}: {e}", dir.display())))
        .collect::<Result<Vec<_>, _>>()?;
    paths.sort();
    let mut inputs: Vec<Input> = Vec::new();
    for path in paths {
        let stem = path
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let extension = path.extension().and_then(|e| e.to_str());
        if !path.is_file() || !matches!(extension, Some("yaml" | "json")) {
            return Err(format!("{}: an input is a .yaml or .json file", path.display()));
        }
        if inputs.iter().any(|i| i.name == stem) {
            return Err(format!("{}: a second input named {stem:?}", path.display()));
        }
        let text = read(&path)?.unwrap_or_default();
        let object = yaml(&path, &text)?;
        inputs.push(Input {
            name: stem,
            source: object_ref(&path, &object)?,
            cluster: cluster.to_owned(),
            object: object.to_string(),
        });
    }
    Ok(inputs)
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
    let cluster = given
        .get("sourceCluster")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let inputs = inputs(dir, cluster)?;
    let context = context(&object, &given, config.trim(), inputs)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A case directory under the system's temp dir, removed when dropped.
    struct TempCase(PathBuf);

    impl TempCase {
        fn new(name: &str, files: &[(&str, &str)]) -> Self {
            let dir = std::env::temp_dir().join(format!("mimeo-sdk-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            for (path, text) in files {
                let path = dir.join(path);
                fs::create_dir_all(path.parent().unwrap()).unwrap();
                fs::write(path, text).unwrap();
            }
            TempCase(dir)
        }
    }

    impl Drop for TempCase {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    const OBJECT: &str = "{apiVersion: v1, kind: Secret, metadata: {name: s, namespace: a}}";

    #[test]
    fn inputs_in_file_name_order_with_the_source_cluster() {
        let case = TempCase::new(
            "inputs",
            &[
                ("object.yaml", OBJECT),
                ("expected-error.txt", "x"),
                ("context.json", r#"{"sourceCluster": "eu1"}"#),
                (
                    "inputs/registry.yaml",
                    "{apiVersion: v1, kind: ConfigMap, metadata: {name: reg, namespace: b}}",
                ),
                (
                    "inputs/node.json",
                    r#"{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}"#,
                ),
            ],
        );
        let inputs = load(&case.0).unwrap().context.inputs;
        let names: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["node", "registry"]);
        assert_eq!(inputs[0].source.namespace, None);
        assert_eq!(inputs[1].source.kind, "ConfigMap");
        assert_eq!(inputs[1].source.namespace.as_deref(), Some("b"));
        assert_eq!(inputs[1].source.name, "reg");
        assert!(inputs.iter().all(|i| i.cluster == "eu1"));
        let object: Value = serde_json::from_str(&inputs[1].object).unwrap();
        assert_eq!(object["metadata"]["name"], "reg");
    }

    #[test]
    fn no_inputs_directory_means_none() {
        let case = TempCase::new(
            "no-inputs",
            &[("object.yaml", OBJECT), ("expected-error.txt", "x")],
        );
        assert!(load(&case.0).unwrap().context.inputs.is_empty());
    }

    #[test]
    fn bad_inputs_are_refused() {
        let cases = [
            ("inputs/notes.txt", "hello", "an input is a .yaml or .json file"),
            (
                "inputs/cm.yaml",
                "{kind: ConfigMap, metadata: {name: c}}",
                "/apiVersion is missing",
            ),
        ];
        for (i, (path, text, error)) in cases.into_iter().enumerate() {
            let case = TempCase::new(
                &format!("bad-input-{i}"),
                &[("object.yaml", OBJECT), ("expected-error.txt", "x"), (path, text)],
            );
            let got = load(&case.0).unwrap_err();
            assert!(got.contains(error), "{path}: {got}");
        }
        let twice = TempCase::new(
            "twice",
            &[
                ("object.yaml", OBJECT),
                ("expected-error.txt", "x"),
                (
                    "inputs/c.json",
                    r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}"#,
                ),
                (
                    "inputs/c.yaml",
                    "{apiVersion: v1, kind: ConfigMap, metadata: {name: c}}",
                ),
            ],
        );
        assert!(load(&twice.0).unwrap_err().contains("a second input named \"c\""));
    }
}
