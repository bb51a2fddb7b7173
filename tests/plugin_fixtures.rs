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

/// A case's inputs as `--input <name>=<file>`, read as `mimeo plugin test --fixtures` reads them
/// (`mimeo::cmd::plugin_fixtures`): `inputs/<name>.yaml|json` in file-name order, any other file
/// there refused.
fn input_args(case: &Path) -> Result<Vec<String>, String> {
    let parent = case.parent().ok_or("a case has a parent folder")?;
    let read = mimeo::cmd::plugin_fixtures::cases(parent).map_err(|e| e.to_string())?;
    let this = read
        .into_iter()
        .find(|c| case.ends_with(&c.name))
        .ok_or_else(|| format!("{}: not read as a case", case.display()))?;
    Ok(this
        .inputs
        .iter()
        .map(|(name, file)| format!("--input={name}={}", file.display()))
        .collect())
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

/// `mimeo plugin test --fixtures DIR PLUGIN` over every first-party plugin's folder: the same
/// verdicts as the runner above, a line per case; a case whose expectation is wrong fails it
/// with why, exit 1.
#[test]
fn plugin_test_fixtures_runs_every_case_of_a_folder() {
    let fixtures = |plugin: &Path, dir: &Path| {
        Command::new(env!("CARGO_BIN_EXE_mimeo"))
            .args([
                "plugin",
                "test",
                "--rule",
                "SyncRule/platform/fixtures",
                "--deadline-ms",
                "5000",
            ])
            .arg("--fixtures")
            .arg(dir)
            .arg(plugin)
            .output()
            .unwrap()
    };
    for (plugin, dir) in first_party() {
        let output = fixtures(&plugin, &dir);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let count = cases(&dir).len();
        assert!(
            output.status.success() && stdout.contains(&format!("{count} of {count} cases passed")),
            "{}: {stdout}{}",
            dir.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // Step lines while a plugin loads on a terminal (util-linux `script` gives it one), none in
    // a pipe.
    let (plugin, dir) = &first_party()[0];
    let piped = fixtures(plugin, dir);
    assert!(!String::from_utf8_lossy(&piped.stderr).contains("loading "));
    let command = format!(
        "{} plugin test --fixtures {} {}",
        env!("CARGO_BIN_EXE_mimeo"),
        dir.display(),
        plugin.display()
    );
    let on_terminal = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&on_terminal.stdout);
    assert!(
        shown.contains(&format!(
            "loading {} (compiled on first use, then cached)...",
            plugin.display()
        )) && shown.contains("loaded "),
        "{shown}"
    );

    // A wrong expectation: the case fails, with what came out instead.
    let (plugin, dir) = &first_party()[0];
    let copy = tempfile::tempdir().unwrap();
    let first = cases(dir).into_iter().next().unwrap();
    let case = copy.path().join("wrong");
    std::fs::create_dir_all(&case).unwrap();
    for entry in std::fs::read_dir(&first).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file()
            && !path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("expected")
        {
            std::fs::copy(&path, case.join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(case.join("expected-skip.txt"), "a reason no plugin gives").unwrap();
    let output = fixtures(plugin, copy.path());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAIL  wrong: expected a skip containing \"a reason no plugin gives\", got")
            && stdout.contains("0 of 1 cases passed, 1 failed"),
        "{stdout}"
    );
}

/// `mimeo plugin new --lang LANG NAME` for each language: built by its own build script, its
/// fixtures run through `mimeo plugin test --fixtures`, and `inspect` shows its name. Rust always;
/// the other languages where their example is built (their toolchains are then in the cache),
/// and all of them in CI (`MIMEO_REQUIRE_EXAMPLES=1`, after the examples are built).
#[test]
fn plugin_new_gives_a_plugin_that_builds_and_passes_its_fixtures() {
    let require = std::env::var_os("MIMEO_REQUIRE_EXAMPLES").is_some();
    let built = harness::plugin_dir();
    let work = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for lang in ["rust", "python", "javascript", "go", "c"] {
        if lang != "rust" && !require && !built.join(format!("add-annotation-{lang}.wasm")).exists() {
            eprintln!("skipping {lang}: its example is not built (plugins/examples/{lang}/build.sh)");
            continue;
        }
        let name = format!("tenant-note-{lang}");
        let made = Command::new(env!("CARGO_BIN_EXE_mimeo"))
            .args(["plugin", "new", "--lang", lang, &name, "--dir"])
            .arg(work.path())
            .output()
            .unwrap();
        if !made.status.success() {
            failures.push(format!(
                "{lang}: plugin new: {}",
                String::from_utf8_lossy(&made.stderr)
            ));
            continue;
        }
        let folder = work.path().join(&name);
        let build = Command::new(folder.join("build.sh"))
            .current_dir(&folder)
            .env_remove("MIMEO_PLUGIN_OUT")
            .env_remove("MIMEO_WIT")
            // Rust's build cache outside the temporary folder, so that a second run is quick.
            .env(
                "MIMEO_PLUGIN_TARGET_DIR",
                std::env::var_os("HOME")
                    .map(|h| PathBuf::from(h).join(".cache/mimeo/target-new-plugin"))
                    .unwrap_or_else(|| work.path().join("target")),
            )
            .output()
            .unwrap();
        if !build.status.success() {
            failures.push(format!(
                "{lang}: build.sh: {}",
                String::from_utf8_lossy(&build.stderr)
            ));
            continue;
        }
        let component = folder.join("build").join(format!("{name}.wasm"));
        let tested = Command::new(env!("CARGO_BIN_EXE_mimeo"))
            .args(["plugin", "test", "--deadline-ms", "5000", "--fixtures"])
            .arg(folder.join("fixtures"))
            .arg(&component)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&tested.stdout);
        if !tested.status.success() || !stdout.contains("3 of 3 cases passed") {
            failures.push(format!(
                "{lang}: plugin test --fixtures: {stdout}{}",
                String::from_utf8_lossy(&tested.stderr)
            ));
            continue;
        }
        match inspect(&component) {
            Ok(shown) if shown.contains(&name) => {}
            Ok(shown) => failures.push(format!("{lang}: inspect does not name {name}:\n{shown}")),
            Err(why) => failures.push(format!("{lang}: {why}")),
        }
    }
    let again = Command::new(env!("CARGO_BIN_EXE_mimeo"))
        .args(["plugin", "new", "--lang", "rust", "tenant-note-rust", "--dir"])
        .arg(work.path())
        .output()
        .unwrap();
    assert!(
        !again.status.success(),
        "a folder that holds files is not written over"
    );
    let bad = Command::new(env!("CARGO_BIN_EXE_mimeo"))
        .args(["plugin", "new", "--lang", "rust", "Bad_Name", "--dir"])
        .arg(work.path())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cannot name a plugin"));
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
