//! The fixture format of mimeo's plugins, which `mimeo plugin test --fixtures DIR` runs: a folder
//! per case, in name order, holding
//!
//! - `object.yaml`: the object to transform;
//! - `config.json` (optional): the plugin's config; `context.json` (optional): the context, as
//!   `mimeo plugin test --context` takes it; `inputs/<name>.yaml|json` (optional): the rule's
//!   inputs, in file-name order;
//! - what should come of it, one of: `expected.yaml` (the object written, with
//!   `expected-outcome.txt`, `write` or `unchanged`, optional), `expected-skip.txt` (a text the
//!   skip's reason contains), `expected-error.txt` (a text the plugin's error contains) or
//!   `expected-host-error.txt` (a text mimeo's refusal of the plugin's output contains).
//!
//! Reading a case and judging what ran are here; running it is the command's.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// A case that cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FixtureError {
    #[error("{0}: not a folder of fixture cases")]
    NotAFolder(String),
    #[error("{0}: no fixture cases (a case is a folder with object.yaml)")]
    NoCases(String),
    #[error("{path}: {message}")]
    Case { path: String, message: String },
}

/// What a case expects.
#[derive(Clone, Debug, PartialEq)]
pub enum Expected {
    Write { object: Value, outcome: Option<String> },
    Skip(String),
    Error(String),
    HostError(String),
}

/// One case, read.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub name: String,
    pub object: PathBuf,
    pub config: Option<PathBuf>,
    pub context: Option<PathBuf>,
    /// `(name, file)`, in file-name order.
    pub inputs: Vec<(String, PathBuf)>,
    pub expected: Expected,
}

/// What running a case gave.
#[derive(Clone, Debug, PartialEq)]
pub enum Ran {
    Write {
        object: Value,
        unchanged: bool,
    },
    Skip(String),
    /// The plugin refused its config or failed, or mimeo refused what it returned: the message.
    Error(String),
}

/// The cases under `dir`, in name order.
pub fn cases(dir: &Path) -> Result<Vec<Case>, FixtureError> {
    let shown = dir.display().to_string();
    let entries = std::fs::read_dir(dir).map_err(|_| FixtureError::NotAFolder(shown.clone()))?;
    let mut folders: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("object.yaml").is_file())
        .collect();
    folders.sort();
    if folders.is_empty() {
        return Err(FixtureError::NoCases(shown));
    }
    folders.iter().map(|folder| case(folder)).collect()
}

fn case(folder: &Path) -> Result<Case, FixtureError> {
    let fail = |message: String| FixtureError::Case {
        path: folder.display().to_string(),
        message,
    };
    let read = |file: &str| std::fs::read_to_string(folder.join(file)).ok();
    let optional = |file: &str| Some(folder.join(file)).filter(|p| p.is_file());
    let expected = if let Some(text) = read("expected-host-error.txt") {
        Expected::HostError(text.trim().to_owned())
    } else if let Some(text) = read("expected.yaml") {
        let object = serde_yaml_ng::from_str(&text).map_err(|e| fail(format!("expected.yaml: {e}")))?;
        let outcome = read("expected-outcome.txt").map(|t| t.trim().to_owned());
        if let Some(outcome) = outcome
            .as_deref()
            .filter(|o| !matches!(*o, "write" | "unchanged"))
        {
            return Err(fail(format!(
                "expected-outcome.txt says {outcome:?}: write or unchanged"
            )));
        }
        Expected::Write { object, outcome }
    } else if let Some(text) = read("expected-skip.txt") {
        Expected::Skip(text.trim().to_owned())
    } else if let Some(text) = read("expected-error.txt") {
        Expected::Error(text.trim().to_owned())
    } else {
        return Err(fail(
            "no expected.yaml, expected-skip.txt, expected-error.txt or expected-host-error.txt".into(),
        ));
    };
    Ok(Case {
        name: folder
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        object: folder.join("object.yaml"),
        config: optional("config.json"),
        context: optional("context.json"),
        inputs: inputs(&folder.join("inputs")).map_err(fail)?,
        expected,
    })
}

/// A case's `inputs/<name>.yaml` (or `.json`) files, one object each, in file-name order; any
/// other file there is refused, so that a misnamed input is not silently left out.
fn inputs(dir: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    for file in files {
        let name = file
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let extension = file.extension().and_then(|e| e.to_str());
        if !file.is_file() || !matches!(extension, Some("yaml" | "json")) {
            return Err(format!("{}: an input is a .yaml or .json file", file.display()));
        }
        if found.iter().any(|(n, _)| *n == name) {
            return Err(format!("{}: a second input named {name:?}", file.display()));
        }
        found.push((name, file));
    }
    Ok(found)
}

/// Whether what ran is what the case expects; if not, why, in words.
pub fn check(expected: &Expected, ran: &Ran) -> Result<(), String> {
    match (expected, ran) {
        (
            Expected::Write { object, outcome },
            Ran::Write {
                object: got,
                unchanged,
            },
        ) => {
            if got != object {
                return Err(format!(
                    "wrote\n{}\nexpected\n{}",
                    serde_json::to_string_pretty(got).unwrap_or_default(),
                    serde_json::to_string_pretty(object).unwrap_or_default()
                ));
            }
            let was = if *unchanged { "unchanged" } else { "write" };
            match outcome {
                Some(outcome) if outcome != was => Err(format!("the outcome was {was}, expected {outcome}")),
                _ => Ok(()),
            }
        }
        (Expected::Skip(text), Ran::Skip(reason)) if reason.contains(text.as_str()) => Ok(()),
        (Expected::Error(text) | Expected::HostError(text), Ran::Error(message))
            if message.contains(text.as_str()) =>
        {
            Ok(())
        }
        (expected, ran) => Err(format!("expected {}, got {}", describe(expected), said(ran))),
    }
}

fn describe(expected: &Expected) -> String {
    match expected {
        Expected::Write { .. } => "a write (expected.yaml)".into(),
        Expected::Skip(text) => format!("a skip containing {text:?}"),
        Expected::Error(text) => format!("an error containing {text:?}"),
        Expected::HostError(text) => format!("mimeo refusing the output with {text:?}"),
    }
}

fn said(ran: &Ran) -> String {
    match ran {
        Ran::Write { unchanged: true, .. } => "the object unchanged".into(),
        Ran::Write { .. } => "a write".into(),
        Ran::Skip(reason) => format!("a skip: {reason}"),
        Ran::Error(message) => format!("an error: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(dir: &Path, files: &[(&str, &str)]) {
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    #[test]
    fn cases_are_read_in_name_order_with_their_parts() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &[
                ("b-skips/object.yaml", "kind: ConfigMap\n"),
                ("b-skips/expected-skip.txt", "not here\n"),
                ("a-writes/object.yaml", "kind: ConfigMap\n"),
                ("a-writes/config.json", "{}"),
                ("a-writes/expected.yaml", "kind: ConfigMap\nmetadata: {name: x}\n"),
                ("a-writes/expected-outcome.txt", "write\n"),
                ("a-writes/inputs/zz.yaml", "kind: Secret\n"),
                ("a-writes/inputs/aa.json", "{}"),
                ("not-a-case/README", "x"),
            ],
        );
        let found = cases(dir.path()).unwrap();
        assert_eq!(
            found.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["a-writes", "b-skips"]
        );
        assert_eq!(
            found[0]
                .inputs
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>(),
            ["aa", "zz"]
        );
        assert!(found[0].config.is_some() && found[0].context.is_none());
        assert_eq!(
            found[0].expected,
            Expected::Write {
                object: json!({"kind": "ConfigMap", "metadata": {"name": "x"}}),
                outcome: Some("write".into())
            }
        );
        assert_eq!(found[1].expected, Expected::Skip("not here".into()));
    }

    #[test]
    fn a_case_without_an_expectation_or_with_a_stray_input_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &[("c/object.yaml", "kind: ConfigMap\n")]);
        assert!(matches!(cases(dir.path()), Err(FixtureError::Case { .. })));
        write(
            dir.path(),
            &[("c/expected-error.txt", "x"), ("c/inputs/notes.txt", "x")],
        );
        let error = cases(dir.path()).unwrap_err().to_string();
        assert!(error.contains("an input is a .yaml or .json file"), "{error}");
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(cases(empty.path()), Err(FixtureError::NoCases(_))));
    }

    #[test]
    fn what_ran_is_judged_against_what_was_expected() {
        let object = json!({"kind": "ConfigMap"});
        let write = Expected::Write {
            object: object.clone(),
            outcome: Some("unchanged".into()),
        };
        assert!(
            check(
                &write,
                &Ran::Write {
                    object: object.clone(),
                    unchanged: true
                }
            )
            .is_ok()
        );
        let wrong = check(
            &write,
            &Ran::Write {
                object: object.clone(),
                unchanged: false,
            },
        );
        assert_eq!(wrong, Err("the outcome was write, expected unchanged".into()));
        assert!(
            check(
                &Expected::Error("key".into()),
                &Ran::Error("config.key is required".into())
            )
            .is_ok()
        );
        let why = check(&Expected::Skip("x".into()), &Ran::Error("boom".into())).unwrap_err();
        assert_eq!(why, "expected a skip containing \"x\", got an error: boom");
    }
}
