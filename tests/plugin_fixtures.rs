//! Every plugin's fixture cases, run through `mimeo plugin test` as a plugin author runs them:
//! the same host, limits and output checks as the controller.

mod harness;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// (component file, fixture directory) for every first-party plugin.
fn first_party() -> Vec<(PathBuf, PathBuf)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("plugins");
    let built = harness::plugin_dir();
    [
        ("filter-keys", "filter-keys"),
        ("rename-keys", "rename-keys"),
        ("set-metadata", "set-metadata"),
        ("rewrite-namespace", "rewrite-namespace"),
        ("template", "template"),
        ("misbehave", "testing/misbehave"),
    ]
    .into_iter()
    .map(|(name, dir)| {
        (
            built.join(format!("{name}.wasm")),
            root.join(dir).join("fixtures"),
        )
    })
    .collect()
}

/// The case folders under a `fixtures` folder, in order.
fn cases(fixtures: &Path) -> Vec<PathBuf> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(fixtures)
        .unwrap_or_else(|e| panic!("{}: {e}", fixtures.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    cases
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// A case's `inputs/<name>.yaml` (or `.json`) files, one object each, as `--input <name>=<file>`
/// in file-name order, the order the context lists them in (as the SDK's fixture runner reads
/// them); none without an `inputs` folder. Any other file there is refused, so that a misnamed
/// input is not silently left out.
fn input_args(case: &Path) -> Result<Vec<String>, String> {
    let dir = case.join("inputs");
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .map(|e| e.map(|e| e.path()).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    files.sort();
    let mut args: Vec<String> = Vec::new();
    let mut names: Vec<String> = Vec::new();
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
        if names.contains(&name) {
            return Err(format!("{}: a second input named {name:?}", file.display()));
        }
        args.push(format!("--input={name}={}", file.display()));
        names.push(name);
    }
    Ok(args)
}

/// Runs one case; returns what went wrong, if anything.
fn run_case(plugin: &Path, case: &Path) -> Result<(), String> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mimeo"));
    command
        .args(["plugin", "test", "--json", "--rule", "SyncRule/platform/fixtures"])
        // The cases check outcomes, not speed (the deadline is tested in plugin_host.rs): a call
        // of a few milliseconds ran past the 100 ms default once, on a machine running CI and
        // benchmarks at once.
        .args(["--deadline-ms", "5000"])
        .arg(plugin);
    command.arg("-f").arg(case.join("object.yaml"));
    if case.join("config.json").exists() {
        command
            .arg("--config")
            .arg(format!("@{}", case.join("config.json").display()));
    }
    if case.join("context.json").exists() {
        command.arg("--context").arg(case.join("context.json"));
    }
    command.args(input_args(case)?);
    let output = command.output().map_err(|e| e.to_string())?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    let code = output.status.code();
    // A case whose plugin output the host refuses (the plugin's own tests see the raw output).
    if let Some(expected) = read(&case.join("expected-host-error.txt")) {
        if code != Some(1) || !stderr.contains(expected.trim()) {
            return Err(format!(
                "exit {code:?}, expected the host to refuse with {:?}: {stderr}",
                expected.trim()
            ));
        }
        return Ok(());
    }
    if let Some(expected) = read(&case.join("expected.yaml")) {
        let want: Value = serde_yaml_ng::from_str(&expected).map_err(|e| format!("expected.yaml: {e}"))?;
        if code != Some(0) {
            return Err(format!("exit {code:?}, expected a write: {stderr}"));
        }
        let got: Value =
            serde_json::from_str(&stdout).map_err(|e| format!("output is not JSON ({e}): {stdout}"))?;
        if got != want {
            return Err(format!("got\n{got:#}\nexpected\n{want:#}"));
        }
        // `mimeo plugin test` says which of the two it was, on a line of its own.
        if let Some(outcome) = read(&case.join("expected-outcome.txt"))
            && !stderr
                .lines()
                .any(|l| l == format!("outcome: {}", outcome.trim()))
        {
            return Err(format!(
                "expected the line `outcome: {}` on stderr: {stderr}",
                outcome.trim()
            ));
        }
    } else if let Some(expected) = read(&case.join("expected-skip.txt")) {
        if code != Some(3) || !stderr.contains(expected.trim()) {
            return Err(format!(
                "exit {code:?}, expected a skip containing {:?}: {stderr}",
                expected.trim()
            ));
        }
    } else if let Some(expected) = read(&case.join("expected-error.txt")) {
        if code != Some(1) || !stderr.contains(expected.trim()) {
            return Err(format!(
                "exit {code:?}, expected an error containing {:?}: {stderr}",
                expected.trim()
            ));
        }
    } else {
        return Err("no expected.yaml, expected-skip.txt or expected-error.txt".into());
    }
    Ok(())
}

#[test]
fn fixtures_pass_through_mimeo_plugin_test() {
    let mut failures = Vec::new();
    let mut ran = 0;
    for (plugin, fixtures) in first_party() {
        for case in cases(&fixtures) {
            ran += 1;
            if let Err(why) = run_case(&plugin, &case) {
                failures.push(format!("{}: {why}", case.display()));
            }
        }
    }
    println!("{ran} fixture cases");
    assert!(ran >= 8, "too few fixture cases found: {ran}");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The example plugins in other languages (`plugins/examples/*`), where built. CI builds them
/// all and sets `MIMEO_REQUIRE_EXAMPLES=1`, so there a missing one fails the test.
#[test]
fn example_plugins_pass_the_shared_fixtures() {
    let require = std::env::var_os("MIMEO_REQUIRE_EXAMPLES").is_some();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("plugins/examples");
    let built = harness::plugin_dir();
    let mut failures = Vec::new();
    let mut ran = 0;
    for lang in ["c", "go", "javascript", "python"] {
        let plugin = built.join(format!("add-annotation-{lang}.wasm"));
        if !plugin.exists() {
            let note = format!(
                "{} is not built (plugins/examples/{lang}/build.sh)",
                plugin.display()
            );
            if require {
                failures.push(note);
            } else {
                eprintln!("skipping: {note}");
            }
            continue;
        }
        // Built from the repository's wit: the interface version the examples are written for.
        match inspect(&plugin) {
            Ok(shown) => {
                for expected in [
                    "interface:   mimeo:transform@0.2.0",
                    "  mimeo:transform/transformer@0.2.0",
                    "  mimeo:transform/log@0.2.0",
                ] {
                    if !shown.contains(expected) {
                        failures.push(format!("{lang}: missing {expected:?} in\n{shown}"));
                    }
                }
            }
            Err(why) => failures.push(format!("{lang}: {why}")),
        }
        let fixtures = root.join(lang).join("fixtures");
        for case in cases(&fixtures) {
            ran += 1;
            if let Err(why) = run_case(&plugin, &case) {
                failures.push(format!("{lang} {}: {why}", case.display()));
            }
        }
    }
    println!("{ran} example fixture cases");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// What `mimeo plugin inspect` prints about a plugin, or why it failed.
fn inspect(plugin: &Path) -> Result<String, String> {
    let output = Command::new(env!("CARGO_BIN_EXE_mimeo"))
        .args(["plugin", "inspect"])
        .arg(plugin)
        .output()
        .map_err(|e| e.to_string())?;
    if !output.status.success() {
        return Err(format!(
            "mimeo plugin inspect {}: {}",
            plugin.display(),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[test]
fn inspect_shows_what_a_plugin_is() {
    let stdout = inspect(&harness::plugin_dir().join("filter-keys.wasm")).unwrap_or_else(|e| panic!("{e}"));
    for expected in [
        "plugin:      filter-keys",
        "interface:   mimeo:transform@0.2.0",
        "digest:      sha256:",
        "  mimeo:transform/transformer@0.2.0",
        "  mimeo:transform/log@0.2.0",
    ] {
        assert!(stdout.contains(expected), "missing {expected:?} in\n{stdout}");
    }
    let not_a_plugin = Command::new(env!("CARGO_BIN_EXE_mimeo"))
        .args(["plugin", "inspect"])
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .output()
        .unwrap();
    assert!(!not_a_plugin.status.success());
    assert!(String::from_utf8_lossy(&not_a_plugin.stderr).contains("not a WebAssembly component"));
}

/// What an author sees of `mimeo plugin test`: the plugin's `log` lines and the outcome on
/// stderr beside the object, a trap in words, and its raw frames only with `--verbose`.
#[test]
fn plugin_test_shows_logs_outcome_and_traps_in_words() {
    let plugin = harness::plugin_dir().join("misbehave.wasm");
    let object = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        object.path(),
        "apiVersion: v1\nkind: Secret\nmetadata: {name: a, namespace: b}\ndata: {k: dg==}\n",
    )
    .unwrap();
    let run = |config: &str, extra: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_mimeo"))
            .args(["plugin", "test"])
            .arg(&plugin)
            .arg("-f")
            .arg(object.path())
            .args(["--config", config])
            .args(extra)
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(r#"{"do": "log", "lines": 2}"#, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("misbehave: log line 1 of 2"), "{stderr}");
    assert!(stderr.contains("misbehave: log line 2 of 2"), "{stderr}");
    assert!(stderr.lines().any(|l| l == "outcome: unchanged"), "{stderr}");
    let (code, stderr) = run(r#"{"do": "trap"}"#, &[]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("it wrote to stderr: panicked at"), "{stderr}");
    assert!(
        !stderr.contains("wasm backtrace"),
        "frames only with --verbose: {stderr}"
    );
    let (_, verbose) = run(r#"{"do": "trap"}"#, &["--verbose"]);
    assert!(verbose.contains("wasm backtrace"), "{verbose}");
}

/// A JavaScript plugin that throws an `Error` (here a TypeError from a mistake in the plugin)
/// shows the error's name and message, through the `errorsAsStrings` wrapper of the example:
/// thrown as it is, componentize-js aborts with `expected a string, received [object]`. Builds
/// a copy of the example with the mistake, with the example's own build.sh (which needs node
/// and npm); CI sets `MIMEO_REQUIRE_EXAMPLES=1`, so there it always runs.
#[test]
fn a_javascript_error_shows_its_message() {
    let require = std::env::var_os("MIMEO_REQUIRE_EXAMPLES").is_some();
    let has_npm = Command::new("npm")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !require && !has_npm {
        eprintln!("skipping: no npm to build the JavaScript example with");
        return;
    }
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("plugins/examples/javascript");
    let source = std::fs::read_to_string(example.join("add-annotation.js")).unwrap();
    let marker = "transform(ctx, object) {";
    assert!(source.contains(marker), "the example's transform moved");
    let broken = source.replacen(
        marker,
        &format!("{marker}\n    if (ctx.config.includes('mistake')) ctx.nothing.here = 1;"),
        1,
    );
    let dir = tempfile::tempdir().unwrap();
    let (js, wasm) = (dir.path().join("mistake.js"), dir.path().join("mistake.wasm"));
    std::fs::write(&js, broken).unwrap();
    let built = Command::new(example.join("build.sh"))
        .arg(&js)
        .arg(&wasm)
        .status()
        .unwrap();
    assert!(built.success(), "build.sh failed");
    let object = dir.path().join("object.yaml");
    std::fs::write(
        &object,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: a, namespace: b}\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_mimeo"))
        .args(["plugin", "test"])
        .arg(&wasm)
        .arg("-f")
        .arg(&object)
        .args(["--config", r#"{"key": "mistake"}"#])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            r#"the plugin reported an error: TypeError: can't access property "here", ctx.nothing is undefined"#
        ),
        "{stderr}"
    );
}
