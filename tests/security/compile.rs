//! A tenant's compiles against everyone else's, on a real apiserver: the controller holds only the
//! Helm chart's RBAC and each tenant is a ServiceAccount whose Role allows Secrets, ConfigMaps and
//! `SyncRule`s in its own namespace. Plugins are compiled one at a time, each in a process of its
//! own under a time limit; a tenant that names many components slow to compile must not make
//! another tenant's plugin wait for all of them.

use crate::harness;

use harness::{Harness, apply_as, eventually, secret_value, tenant_client};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::{Api, PostParams};
use mimeo::controller::ControllerConfig;
use mimeo::plugin::CompilerProcess;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The compile time limit of these tests: each slow component is killed at it.
const COMPILE_LIMIT: Duration = Duration::from_secs(4);
/// How many slow components the first tenant names, one per rule.
const SLOW_RULES: usize = 6;

/// mimeo's binary started through a script that logs each compile's arguments (its `--digest`),
/// so that the order compiles ran in can be read back.
fn logging_compiler(dir: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let (script, log) = (dir.join("compile"), dir.join("runs"));
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            env!("CARGO_BIN_EXE_mimeo")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (script, log)
}

/// The digests of the compiles started so far, in the order they started.
fn compiles_started(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            words.find(|w| *w == "--digest")?;
            words.next().map(str::to_owned)
        })
        .collect()
}

/// A ConfigMap `name` in `namespace` holding `wasm` under `plugin.wasm`, created by the tenant.
async fn put_plugin(tenant: &Client, namespace: &str, name: &str, wasm: Vec<u8>) -> String {
    let plugin: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "binaryData": {"plugin.wasm": k8s_openapi::ByteString(wasm)},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(tenant.clone(), namespace)
        .create(&PostParams::default(), &plugin)
        .await
        .unwrap();
    format!("configmap://{namespace}/{name}/plugin.wasm")
}

/// A rule of `namespace` copying its Secret `source` to `target` beside it, through `plugin`.
fn rule(namespace: &str, name: &str, target: &str, plugin: &str, config: Value) -> Value {
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
           "metadata": {"name": name, "namespace": namespace},
           "spec": {"source": {"kind": "Secret", "name": "source"},
                    "targets": [{"namespace": namespace, "name": target}],
                    "transforms": [{"plugin": plugin, "config": config}]}})
}

fn source(namespace: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": "source", "namespace": namespace},
           "stringData": {"username": "u", "password": "p"}})
}

/// The reason of a rule's Ready condition, if it has one.
async fn ready_reason(h: &Harness, namespace: &str, name: &str) -> Option<String> {
    let rule = h.rule(namespace, name).await?;
    rule.status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.reason)
}

/// Tenant A names six components, each slow to compile (killed at the 4 s limit), in six rules;
/// once the first of them compiles, tenant B applies a rule with an ordinary plugin. Compiles
/// take turns between namespaces, so B's is the next to start: B's copy is Synced after about
/// one of A's slow compiles, not after all six (24 s). A's rules are refused at the limit, in
/// words that name it (the positive twin: B's plugin is compiled and does its work).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_slow_compiles_do_not_queue_ahead_of_another_tenants_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let (program, runs) = logging_compiler(dir.path());
    let mut config = ControllerConfig::default();
    // A cache of its own: B's plugin must really be compiled, not found compiled by another test.
    config.plugin_host.cache_dir = dir.path().join("cache");
    config.plugin_host.compiler = Some(CompilerProcess {
        program,
        timeout: COMPILE_LIMIT,
        max_memory_bytes: 1 << 30,
        max_cpu_time: Duration::from_secs(120),
    });
    let h = Harness::start_with_chart_rbac(config).await;
    h.namespace("tenant-a", &[], &[]).await;
    h.namespace("tenant-b", &[], &[]).await;
    let (a, b) = (
        tenant_client(&h, "tenant-a").await,
        tenant_client(&h, "tenant-b").await,
    );
    apply_as(&a, source("tenant-a")).await.unwrap();
    apply_as(&b, source("tenant-b")).await.unwrap();

    let mut slow_digests = Vec::new();
    for i in 0..SLOW_RULES {
        // Distinct components (one more operation each), so that each is compiled on its own.
        let wasm = harness::slow_to_compile_component(1, 1500, 40_000 + i as u32);
        slow_digests.push(mimeo::sync::hash::digest_bytes(&wasm));
        let plugin = put_plugin(&a, "tenant-a", &format!("slow-{i}"), wasm).await;
        apply_as(
            &a,
            rule(
                "tenant-a",
                &format!("slow-{i}"),
                &format!("copy-{i}"),
                &plugin,
                json!({}),
            ),
        )
        .await
        .unwrap();
    }
    eventually("the first of tenant A's compiles started", || async {
        (!compiles_started(&runs).is_empty()).then_some(())
    })
    .await;
    // The other five reach the queue in the time it takes to read their ConfigMaps.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let filter = std::fs::read(harness::plugin_dir().join("filter-keys.wasm")).unwrap();
    let filter_digest = mimeo::sync::hash::digest_bytes(&filter);
    let plugin = put_plugin(&b, "tenant-b", "filter", filter).await;
    let applied = Instant::now();
    apply_as(
        &b,
        rule(
            "tenant-b",
            "ordinary",
            "copy",
            &plugin,
            json!({"include": ["username"]}),
        ),
    )
    .await
    .unwrap();
    h.wait_ready("tenant-b", "ordinary", "True", "Synced").await;
    let waited = applied.elapsed();
    let copy: Secret = h.secrets("tenant-b").get("copy").await.unwrap();
    assert_eq!(secret_value(&copy, "username").as_deref(), Some("u"));
    assert_eq!(secret_value(&copy, "password"), None, "B's plugin did its work");

    let started = compiles_started(&runs);
    let position = started.iter().position(|d| *d == filter_digest);
    let mut refused_before = 0;
    for i in 0..SLOW_RULES {
        if ready_reason(&h, "tenant-a", &format!("slow-{i}"))
            .await
            .as_deref()
            == Some("PluginUnavailable")
        {
            refused_before += 1;
        }
    }
    println!(
        "tenant B's rule Synced {waited:?} after it was applied; its compile was number {} of \
         those started; {refused_before} of tenant A's {SLOW_RULES} slow compiles were refused by then \
         (limit {COMPILE_LIMIT:?} each)",
        position.map_or("?".into(), |p| (p + 1).to_string())
    );
    assert_eq!(
        position,
        Some(1),
        "B's compile started second, right after the one of A's running when B's rule came \
         (compiles started: {started:?})"
    );
    assert!(
        refused_before <= 2,
        "{refused_before} of A's slow compiles ran before B's rule was Synced"
    );

    // A's rules are refused at the limit, each, in words that name it.
    for i in 0..SLOW_RULES {
        let name = format!("slow-{i}");
        let status = h
            .wait_ready("tenant-a", &name, "False", "PluginUnavailable")
            .await
            .status
            .unwrap();
        assert_eq!(
            status.conditions[0].message,
            format!(
                "plugin configmap://tenant-a/{name}/plugin.wasm: compiling the plugin took longer \
                 than 4s (--plugin-compile-timeout-secs); mimeo does not try this component again \
                 until it restarts"
            )
        );
    }
    let started = compiles_started(&runs);
    for digest in &slow_digests {
        assert_eq!(
            started.iter().filter(|d| *d == digest).count(),
            1,
            "each slow component compiled once: {started:?}"
        );
    }
}
