//! The plugin host with real, compiled plugins: the first-party ones, chains, and a plugin that
//! misbehaves on purpose in every way the host must contain.

use crate::harness;

use mimeo::plugin::{ChainOutcome, HostSettings, Outcome, Plugin, PluginError, PluginHost, TransformContext};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn host() -> PluginHost {
    let cache = tempfile::tempdir().unwrap().keep();
    PluginHost::new(HostSettings {
        cache_dir: cache,
        ..Default::default()
    })
    .unwrap()
}

fn load(host: &PluginHost, name: &str) -> Arc<Plugin> {
    let path = harness::plugin_dir().join(format!("{name}.wasm"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    host.load(name, &bytes)
        .unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

fn copy() -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": "creds", "namespace": "tenant-a",
                        "labels": {"mimeo.dev/managed-by": "mimeo"},
                        "annotations": {"mimeo.dev/rule": "SyncRule/platform/creds"}},
           "type": "Opaque",
           "data": {".dockerconfigjson": "e30=", "username": "dQ==", "password": "cA=="}})
}

fn ctx() -> TransformContext {
    TransformContext {
        rule: "SyncRule/platform/creds".into(),
        source_api_version: "v1".into(),
        source_kind: "Secret".into(),
        source_namespace: Some("platform".into()),
        source_name: "creds".into(),
        target_namespace: Some("tenant-a".into()),
        target_name: "creds".into(),
        ..Default::default()
    }
}

fn written(outcome: ChainOutcome) -> Value {
    match outcome {
        ChainOutcome::Write(v) => v,
        other => panic!("expected a write, got {other:?}"),
    }
}

#[test]
fn first_party_plugins_and_a_chain() {
    let host = host();
    let filter = load(&host, "filter-keys");
    let rename = load(&host, "rename-keys");
    let set_metadata = load(&host, "set-metadata");
    assert_eq!(filter.interface_version, "0.2.0");
    assert_eq!(filter.info.name, "filter-keys");

    let only_docker = (
        filter.clone(),
        json!({"include": [".dockerconfigjson"]}).to_string(),
    );
    let out = written(
        host.run_chain(std::slice::from_ref(&only_docker), &ctx(), copy())
            .unwrap(),
    );
    assert_eq!(out["data"], json!({".dockerconfigjson": "e30="}));

    let renamed = (
        rename.clone(),
        json!({"rename": {".dockerconfigjson": "config.json"}}).to_string(),
    );
    let out = written(host.run_chain(&[only_docker, renamed], &ctx(), copy()).unwrap());
    assert_eq!(
        out["data"],
        json!({"config.json": "e30="}),
        "filter, then rename, in order"
    );
    assert_eq!(out["metadata"]["labels"]["mimeo.dev/managed-by"], "mimeo");

    let labelled = (
        set_metadata,
        json!({"labels": {"copied-into": "{{target.namespace}}"}}).to_string(),
    );
    let out = written(host.run_chain(&[labelled], &ctx(), copy()).unwrap());
    assert_eq!(out["metadata"]["labels"]["copied-into"], "tenant-a");

    let err = host.validate_config(&rename, r#"{"rename": 5}"#).unwrap_err();
    assert!(matches!(err, PluginError::InvalidConfig(_)), "{err}");
}

/// A component of the old interface loads, describes itself and runs beside a new one; the new
/// one gets the inputs, the old one its call without them.
#[test]
fn both_interface_versions_run_in_one_chain() {
    let host = host();
    let legacy = load(&host, "legacy-v0-1");
    let template = load(&host, "template");
    assert_eq!(legacy.interface_version, "0.1.0");
    assert_eq!(legacy.info.name, "legacy-v0-1");
    assert!(
        legacy
            .exports
            .iter()
            .any(|e| e == "mimeo:transform/transformer@0.1.0"),
        "{:?}",
        legacy.exports
    );
    assert_eq!(template.interface_version, "0.2.0");
    let mut context = ctx();
    context.inputs = vec![mimeo::plugin::TransformInput {
        name: "endpoint".into(),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("platform".into()),
        object_name: "endpoint".into(),
        cluster: String::new(),
        object: json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "endpoint", "namespace": "platform"},
                       "data": {"host": "registry.example.com"}})
        .to_string(),
    }]
    .into();
    let chain = [
        (legacy, "{}".to_owned()),
        (
            template,
            json!({"annotations": {"example.com/registry": "{{ inputs.endpoint.data.host }}"}}).to_string(),
        ),
    ];
    let out = written(host.run_chain(&chain, &context, copy()).unwrap());
    assert_eq!(out["metadata"]["labels"]["legacy-plugin"], "v0.1.0");
    assert_eq!(
        out["metadata"]["annotations"]["example.com/registry"],
        "registry.example.com"
    );
}

#[test]
fn misbehaving_plugins_are_contained_and_the_host_goes_on() {
    // A deadline with room: on a loaded machine, touching 64 MiB or writing 4 MiB must hit its
    // own limit first, not the clock.
    let host = PluginHost::new(HostSettings {
        cache_dir: tempfile::tempdir().unwrap().keep(),
        deadline: Duration::from_secs(1),
        ..Default::default()
    })
    .unwrap();
    let bad = load(&host, "misbehave");
    let good = load(&host, "filter-keys");
    type Expect = fn(&PluginError) -> bool;
    let cases: Vec<(&str, Expect)> = vec![
        ("loop", |e| matches!(e, PluginError::Timeout(_))),
        ("alloc", |e| matches!(e, PluginError::OutOfMemory(_))),
        ("trap", |e| matches!(e, PluginError::Trap { .. })),
        ("recurse", |e| matches!(e, PluginError::Trap { .. })),
        ("huge-output", |e| {
            matches!(e, PluginError::OutputTooLarge(..) | PluginError::OutOfMemory(_))
        }),
        ("invalid-json", |e| matches!(e, PluginError::InvalidOutput(_))),
        (
            "change-kind",
            |e| matches!(e, PluginError::Violation(m) if m.contains("kind")),
        ),
        (
            "change-namespace",
            |e| matches!(e, PluginError::Violation(m) if m.contains("namespace")),
        ),
        (
            "drop-ownership",
            |e| matches!(e, PluginError::Violation(m) if m.contains("mimeo's own labels")),
        ),
        (
            "error",
            |e| matches!(e, PluginError::Failed(m) if m.contains("asked to fail")),
        ),
    ];
    for (behaviour, expected) in cases {
        let started = Instant::now();
        // Just over the output cap: the size is what is wrong, not the time it takes to make.
        let config = match behaviour {
            "huge-output" => json!({"do": behaviour, "bytes": (4 << 20) + 1024}),
            _ => json!({"do": behaviour}),
        };
        let step = (bad.clone(), config.to_string());
        let err = host.run_chain(&[step], &ctx(), copy()).expect_err(behaviour);
        assert!(
            expected(&err.error),
            "{behaviour}: unexpected error {}",
            err.error
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{behaviour} took {:?}",
            started.elapsed()
        );
        println!("{behaviour}: {} ({:?})", err.error, started.elapsed());
        // The host still serves the next call.
        let step = (good.clone(), json!({"include": ["username"]}).to_string());
        let out = written(host.run_chain(&[step], &ctx(), copy()).unwrap());
        assert_eq!(out["data"], json!({"username": "dQ=="}), "after {behaviour}");
    }

    let skip = (bad.clone(), json!({"do": "skip"}).to_string());
    match host.run_chain(&[skip], &ctx(), copy()).unwrap() {
        ChainOutcome::Skip { reason, .. } => assert_eq!(reason, "asked to skip"),
        other => panic!("expected a skip, got {other:?}"),
    }
    let noisy = host
        .transform(
            &bad,
            &ctx(),
            &json!({"do": "log"}).to_string(),
            &copy().to_string(),
        )
        .unwrap();
    assert_eq!(
        noisy,
        Outcome::Unchanged,
        "a plugin that logs a lot is rate-limited, not failed"
    );
}

/// A guest blocked in a WASI call (a sleep is a monotonic-clock pollable and a poll) is where
/// epoch interruption cannot reach; the deadline must hold there too, in every export: transform,
/// validate-config, and describe (which loading calls).
#[test]
fn the_deadline_holds_while_a_plugin_waits_in_wasi() {
    let host = host();
    let deadline = host.settings().deadline;
    let bad = load(&host, "misbehave");
    let good = load(&host, "filter-keys");
    // Well past the deadline, far short of the hour the guest asks for.
    let bound = deadline * 5;
    for (config, export) in [
        (json!({"do": "sleep"}), "transform"),
        (json!({"do": "poll-clock"}), "transform"),
        (
            json!({"do": "sleep", "during": "validate-config"}),
            "validate-config",
        ),
        (
            json!({"do": "poll-clock", "during": "validate-config"}),
            "validate-config",
        ),
    ] {
        let started = Instant::now();
        let err = match export {
            "transform" => host
                .transform(&bad, &ctx(), &config.to_string(), &copy().to_string())
                .unwrap_err(),
            _ => host.validate_config(&bad, &config.to_string()).unwrap_err(),
        };
        let took = started.elapsed();
        println!("{config} in {export}: {err} after {took:?}");
        assert!(matches!(err, PluginError::Timeout(_)), "{config}: {err}");
        assert!(
            took >= deadline && took < bound,
            "{config} in {export} took {took:?}"
        );
        let step = (good.clone(), json!({"include": ["username"]}).to_string());
        assert!(host.run_chain(&[step], &ctx(), copy()).is_ok(), "after {config}");
    }
    let bytes = std::fs::read(harness::plugin_dir().join("stall-describe.wasm")).unwrap();
    let started = Instant::now();
    let err = host.load("stall-describe", &bytes).unwrap_err();
    let took = started.elapsed();
    println!("stall-describe: {err} after {took:?}");
    assert!(matches!(err, PluginError::Timeout(_)), "{err}");
    assert!(
        took < bound + Duration::from_secs(30),
        "loading took {took:?} (compiling included)"
    );
}

/// An output over the cap is refused for its size however long it took to make, as long as it was
/// made: one still being made at the deadline has no size yet, and is past its deadline.
#[test]
fn an_output_over_the_cap_is_too_large_however_long_it_took_to_make() {
    let deadline = Duration::from_secs(2);
    let host = PluginHost::new(HostSettings {
        cache_dir: tempfile::tempdir().unwrap().keep(),
        deadline,
        ..Default::default()
    })
    .unwrap();
    let bad = load(&host, "misbehave");
    let object = copy().to_string();
    let bytes = (4 << 20) + 1024;
    let run = |busy_ms: u64| {
        let config = json!({"do": "huge-output", "bytes": bytes, "busy-ms": busy_ms});
        let started = Instant::now();
        let err = host
            .transform(&bad, &ctx(), &config.to_string(), &object)
            .unwrap_err();
        (err.to_string(), started.elapsed())
    };

    // Most of the deadline spent before the output is made.
    let (err, took) = run(1500);
    // The object without its closing brace, `,"misbehave":"`, the bytes, and `"}`.
    let size = object.len() - 1 + 14 + bytes + 2;
    assert_eq!(
        err,
        format!("the plugin returned {size} bytes, more than the 4194304 allowed")
    );
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    println!("too large after {took:?}");

    // Still busy at the deadline: nothing was returned to measure.
    let (err, took) = run(3000);
    assert_eq!(err, "the plugin ran past its deadline of 2s");
    assert!(took >= deadline && took < deadline * 5, "{took:?}");
    println!("past its deadline after {took:?}");
}

#[test]
fn not_a_plugin_is_refused_clearly() {
    let host = host();
    let core_module = b"\0asm\x01\0\0\0";
    let err = host.load("core", core_module).unwrap_err();
    assert!(err.to_string().contains("core WebAssembly module"), "{err}");
    let err = host.load("text", b"hello").unwrap_err();
    assert!(matches!(err, PluginError::NotAComponent(_)), "{err}");
}

#[test]
fn compiled_plugins_are_cached_on_disk() {
    let cache = tempfile::tempdir().unwrap();
    let settings = HostSettings {
        cache_dir: cache.path().to_owned(),
        ..Default::default()
    };
    let bytes = std::fs::read(harness::plugin_dir().join("filter-keys.wasm")).unwrap();
    let first = PluginHost::new(settings.clone()).unwrap();
    let compiled_at = Instant::now();
    first.load("filter-keys", &bytes).unwrap();
    let compile = compiled_at.elapsed();
    let artifacts: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .filter(|item| item.as_ref().unwrap().file_name() != "key")
        .collect();
    assert_eq!(artifacts.len(), 1, "one compiled artifact per digest");

    let second = PluginHost::new(settings).unwrap();
    let loaded_at = Instant::now();
    let plugin = second.load("filter-keys", &bytes).unwrap();
    println!("compile {compile:?}, load from cache {:?}", loaded_at.elapsed());
    assert_eq!(plugin.info.name, "filter-keys");
}

/// A trap is named for what it was, with what the guest said as it went, and without wasmtime's
/// raw frames (those are kept apart, for `mimeo plugin test --verbose`).
#[test]
fn traps_say_what_happened_in_words() {
    let host = host();
    let bad = load(&host, "misbehave");
    let message = |action: &str| {
        let err = host
            .transform(
                &bad,
                &ctx(),
                &json!({"do": action}).to_string(),
                &copy().to_string(),
            )
            .unwrap_err();
        let PluginError::Trap { frames, .. } = &err else {
            panic!("{action}: not a trap: {err}")
        };
        assert!(frames.contains("wasm backtrace"), "{frames}");
        err.to_string()
    };
    // Word for word, but for the line and column of the panic in misbehave's source.
    let panicked = message("trap");
    let (said, place) = panicked.split_once("panicked at ").unwrap();
    assert_eq!(
        said,
        "the plugin trapped: it reached `unreachable` (a panic, an abort or an exception it did not \
         catch); it wrote to stderr: "
    );
    assert!(place.starts_with("testing/misbehave/src/lib.rs:"), "{place}");
    assert!(place.ends_with(": asked to trap"), "{place}");
    assert_eq!(
        message("recurse"),
        "the plugin trapped: stack overflow: the plugin's call stack is exhausted (deep or endless recursion)"
    );
    // A Rust guest's stack lives in its linear memory and runs out there first.
    assert_eq!(
        message("recurse-big-frames"),
        "the plugin trapped: it accessed memory out of bounds, most often a stack overflow (deep or \
         endless recursion, or large locals, exhausting the stack a Rust or C guest keeps in its \
         linear memory)"
    );
}

/// A host compiling as the controller does, in processes of mimeo's binary started through a
/// script that counts them.
fn compiling_host(
    timeout: Duration,
    max_memory_bytes: u64,
    max_cpu_time: Duration,
) -> (PluginHost, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap().keep();
    let (script, log) = (dir.join("compile"), dir.join("runs"));
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho run >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            env!("CARGO_BIN_EXE_mimeo")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let host = PluginHost::new(HostSettings {
        cache_dir: dir.join("cache"),
        compiler: Some(mimeo::plugin::CompilerProcess {
            program: script,
            timeout,
            max_memory_bytes,
            max_cpu_time,
        }),
        ..Default::default()
    })
    .unwrap();
    (host, log)
}

fn compiler_runs(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log).map_or(0, |runs| runs.lines().count())
}

#[test]
fn a_compiler_process_compiles_plugins_into_the_cache() {
    let (host, runs) = compiling_host(Duration::from_secs(120), 1 << 30, Duration::from_secs(120));
    let filter = load(&host, "filter-keys");
    let out = host
        .transform(
            &filter,
            &ctx(),
            r#"{"include": ["username"]}"#,
            &copy().to_string(),
        )
        .unwrap();
    assert!(matches!(out, Outcome::Write(_)), "{out:?}");
    assert_eq!(compiler_runs(&runs), 1);

    // A second host over the same cache (a restart) loads the signed artifact: no compile.
    let settings = host.settings().clone();
    drop(host);
    let again = PluginHost::new(settings).unwrap();
    load(&again, "filter-keys");
    assert_eq!(compiler_runs(&runs), 1, "loaded from the cache");

    // What the compiler says about a component it cannot compile reaches the error.
    let mut broken = harness::slow_to_compile_component(1, 4, 10);
    let at = broken.len() - 6;
    broken[at] = 0xff; // an opcode that does not exist
    let err = again.load("broken", &broken).unwrap_err();
    assert!(
        matches!(&err, PluginError::Compile(why) if why.contains("failed to parse WebAssembly module")
            || why.contains("illegal opcode") || why.contains("invalid")),
        "{err}"
    );
}

/// A component built to compile slowly is stopped at the time limit, and one built to compile
/// hugely at the memory limit, each with words that name the limit; neither is compiled again.
#[test]
fn components_slow_or_huge_to_compile_are_refused_at_the_limits_and_not_tried_again() {
    let (host, runs) = compiling_host(Duration::from_secs(2), 1 << 30, Duration::from_secs(120));
    let slow = harness::slow_to_compile_component(30, 200, 5_000);
    let started = Instant::now();
    let err = host.load("slow", &slow).unwrap_err();
    let took = started.elapsed();
    assert_eq!(
        err.to_string(),
        "compiling the plugin took longer than 2s (--plugin-compile-timeout-secs); \
         mimeo does not try this component again until it restarts"
    );
    eprintln!("the slow compile was stopped after {took:?} (limit 2 s)");
    let again = host.load("slow", &slow).unwrap_err();
    assert_eq!(again.to_string(), err.to_string());
    assert_eq!(compiler_runs(&runs), 1, "refused without compiling again");

    let (host, runs) = compiling_host(Duration::from_secs(120), 384 << 20, Duration::from_secs(120));
    let huge = harness::slow_to_compile_component(1, 2000, 50_000);
    let started = Instant::now();
    let err = host.load("huge", &huge).unwrap_err();
    eprintln!(
        "the huge compile was stopped after {:?} (limit 384 MiB)",
        started.elapsed()
    );
    assert_eq!(
        err.to_string(),
        "compiling the plugin needed more than 384 MiB of memory (--plugin-compile-memory-mib); \
         mimeo does not try this component again until it restarts"
    );
    assert!(host.load("huge", &huge).is_err());
    assert_eq!(compiler_runs(&runs), 1, "refused without compiling again");
    // The host goes on: a real plugin compiles and runs.
    let filter = load(&host, "filter-keys");
    assert!(host.transform(&filter, &ctx(), "{}", &copy().to_string()).is_ok());
}

/// A compile that spends more CPU time than its limit is stopped there, however much of its wall
/// clock time is left (Cranelift compiles the 30 functions on every core), in words that name
/// the limit; it is not compiled again. A small component compiles under the same limit.
#[test]
fn a_compile_past_its_cpu_time_is_stopped_and_not_tried_again() {
    let (host, runs) = compiling_host(Duration::from_secs(120), 1 << 30, Duration::from_secs(1));
    let slow = harness::slow_to_compile_component(30, 200, 5_000);
    let started = Instant::now();
    let err = host.load("slow", &slow).unwrap_err();
    let took = started.elapsed();
    eprintln!("the compile was stopped after {took:?} (CPU limit 1 s, time limit 120 s)");
    assert_eq!(
        err.to_string(),
        "compiling the plugin used more than 1 s of CPU time (--plugin-compile-cpu-secs); \
         mimeo does not try this component again until it restarts"
    );
    assert_eq!(host.load("slow", &slow).unwrap_err().to_string(), err.to_string());
    assert_eq!(compiler_runs(&runs), 1, "refused without compiling again");
    let small = host
        .load("small", &harness::slow_to_compile_component(1, 4, 10))
        .unwrap_err();
    assert!(
        matches!(small, PluginError::NotAPlugin(_)),
        "compiled, and found to be no plugin: {small}"
    );
}
