//! The cost of one plugin call (fresh store, instantiate from `InstancePre`, call, result) on a
//! 1 KiB and a 100 KiB Secret, and of loading a plugin: compiling it versus reading the
//! precompiled artifact from the cache. `cargo bench --bench plugin_call`.
//!
//! Plugins come from `plugins/build.sh` (Rust) and `plugins/examples/*/build.sh` (Python,
//! JavaScript, C, Go) in `~/.cache/mimeo/plugins`; examples that are not built are left out.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mimeo::plugin::{HostSettings, PluginHost, TransformContext};
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

fn plugin_dir() -> PathBuf {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("plugins/build.sh");
    let output = std::process::Command::new("bash")
        .arg(script)
        .output()
        .expect("plugins/build.sh runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .last()
            .unwrap()
            .trim(),
    )
}

fn secret(bytes: usize) -> String {
    let value = "A".repeat(bytes * 4 / 3);
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": "creds", "namespace": "tenant-a", "labels": {"mimeo.dev/managed-by": "mimeo"}},
           "data": {"payload": value, "other": "b3RoZXI="}})
    .to_string()
}

fn ctx() -> TransformContext {
    TransformContext {
        rule: "SyncRule/platform/creds".into(),
        source_kind: "Secret".into(),
        source_api_version: "v1".into(),
        source_name: "creds".into(),
        target_namespace: Some("tenant-a".into()),
        target_name: "creds".into(),
        ..Default::default()
    }
}

fn host(cache: &std::path::Path) -> PluginHost {
    PluginHost::new(HostSettings {
        cache_dir: cache.to_owned(),
        deadline: Duration::from_secs(10),
        max_memory_bytes: 256 << 20,
        ..Default::default()
    })
    .unwrap()
}

fn calls(c: &mut Criterion) {
    let dir = plugin_dir();
    let cache = tempfile::tempdir().unwrap();
    let host = host(cache.path());
    let mut group = c.benchmark_group("call");
    let plugins = [
        ("filter-keys", r#"{"include": ["payload"]}"#.to_owned()),
        (
            "add-annotation-c",
            r#"{"key": "example.com/lang", "value": "c"}"#.to_owned(),
        ),
        (
            "add-annotation-go",
            r#"{"key": "example.com/lang", "value": "go"}"#.to_owned(),
        ),
        (
            "add-annotation-javascript",
            r#"{"key": "example.com/lang", "value": "js"}"#.to_owned(),
        ),
        (
            "add-annotation-python",
            r#"{"key": "example.com/lang", "value": "py"}"#.to_owned(),
        ),
    ];
    for (name, config) in plugins {
        let Ok(bytes) = std::fs::read(dir.join(format!("{name}.wasm"))) else {
            eprintln!("{name}.wasm is not built; skipped");
            continue;
        };
        let plugin = host.load(name, &bytes).unwrap();
        for size in [1024, 100 * 1024] {
            let object = secret(size);
            host.transform(&plugin, &ctx(), &config, &object).unwrap();
            group.bench_with_input(
                BenchmarkId::new(name, format!("{}KiB", size / 1024)),
                &object,
                |b, object| b.iter(|| host.transform(&plugin, &ctx(), &config, object).unwrap()),
            );
        }
    }
    group.finish();
}

fn loading(c: &mut Criterion) {
    let dir = plugin_dir();
    let mut group = c.benchmark_group("load");
    group.sample_size(10);
    for name in [
        "filter-keys",
        "add-annotation-python",
        "add-annotation-javascript",
    ] {
        let Ok(bytes) = std::fs::read(dir.join(format!("{name}.wasm"))) else {
            continue;
        };
        group.bench_function(BenchmarkId::new("compile", name), |b| {
            b.iter(|| {
                let cache = tempfile::tempdir().unwrap();
                host(cache.path()).load(name, &bytes).unwrap()
            })
        });
        let warm = tempfile::tempdir().unwrap();
        host(warm.path()).load(name, &bytes).unwrap();
        group.bench_function(BenchmarkId::new("from-cache", name), |b| {
            b.iter(|| host(warm.path()).load(name, &bytes).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, calls, loading);
criterion_main!(benches);
