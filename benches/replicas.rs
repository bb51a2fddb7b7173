//! Scenario benchmark of several active replicas (issue 32), each `mimeo run` a process of its
//! own with `--shards=3`, against real control planes:
//!
//! - **plugins**: a plugin-heavy rule set (50 `SyncRule`s of one source each into 100 namespaces,
//!   5,000 copies, every copy passing through the `misbehave` test plugin spending 20 ms busy
//!   per call) on 1, 2 and 3 replicas, each on a fresh control plane: the time from the rules
//!   applied to all copies seen, as ratios to one replica. `--plugin-concurrency N` is passed to
//!   every replica (unset: mimeo's default), as a pod's CPU limit would bound it. The plugin
//!   calls of all replicas together (`mimeo_plugin_calls_total`) should be one per copy; the
//!   failed chains (run again) and the shard holds that lapsed (their rules let go) are shown
//!   beside them.
//! - **clusters**: `--clusters N` control planes registered as `RemoteCluster`s, each the target
//!   of a `ClusterSyncRule` of its own, served by 1 and then 3 replicas: each replica's
//!   connections to the hub and to the clusters, and its resident memory; the watches all
//!   replicas hold on the clusters together (from those apiservers' own metrics), against one
//!   replica's.
//!
//! `cargo bench --bench replicas` (add `-- --part plugins` or `-- --part clusters`,
//! `--clusters 9`, `--plugin-concurrency 1`; `--replicas N` runs the plugins part on 1 to N
//! replicas, `--lease-seconds S` gives the shard Leases S seconds instead of 6, and a short one
//! makes holds lapse under load). Figures are printed; docs/benchmarks.md records a
//! run.

#[path = "support/processes.rs"]
mod processes;
#[path = "support/reach.rs"]
mod reach;

#[path = "../tests/harness/mod.rs"]
mod harness;

use futures::TryStreamExt;
use futures::future::join_all;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;
use kube::runtime::watcher;
use mimeo_envtest::ControlPlane;
use processes::{Mimeo, Process, apply};
use reach::{connections_by_port, port_of, watches};
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SHARDS: u32 = 3;
const RULES: usize = 50;
const NAMESPACES: usize = 100;
/// Milliseconds the plugin spends busy on each copy.
const BUSY_MS: u64 = 20;

fn arg(flag: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != flag).nth(1)
}

#[tokio::main]
async fn main() {
    let part = arg("--part");
    if part.as_deref().is_none_or(|p| p == "plugins") {
        plugins().await;
    }
    if part.as_deref().is_none_or(|p| p == "clusters") {
        clusters(arg("--clusters").and_then(|n| n.parse().ok()).unwrap_or(9)).await;
    }
}

/// `count` replicas of `mimeo run --shards=3` against `kubeconfig`, with `extra` arguments,
/// waiting until every shard is held (and each replica holds one, when there are enough).
async fn start_replicas(kubeconfig: &Path, root: &Path, count: usize, extra: &[String]) -> Vec<Mimeo> {
    let mut replicas = Vec::new();
    for r in 0..count {
        let dir = root.join(format!("replica-{r}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut args = vec![
            format!("--shards={SHARDS}"),
            "--leader-elect-namespace=default".to_owned(),
            format!(
                "--leader-elect-lease-seconds={}",
                arg("--lease-seconds").unwrap_or_else(|| "6".into())
            ),
        ];
        args.extend_from_slice(extra);
        let name = format!("replica-{r}");
        // MIMEO_BENCH_BIN runs another build (say, the one before a change) in its place.
        let bin = std::env::var("MIMEO_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mimeo").into());
        replicas.push(Mimeo::start_with(
            Path::new(&bin),
            kubeconfig,
            &dir,
            &args,
            &[("POD_NAME", name.as_str())],
        ));
    }
    for replica in &mut replicas {
        replica.wait_ready().await;
    }
    let started = Instant::now();
    loop {
        let held = join_all(replicas.iter().map(held_shards)).await;
        let all: BTreeSet<u32> = held.iter().flatten().copied().collect();
        let each = held.iter().all(|h| !h.is_empty()) || count > SHARDS as usize;
        if all.len() == SHARDS as usize && each {
            return replicas;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the shards were not shared: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The shards a replica's `/readyz` names (`ok: shards [0,2] of 3`).
async fn held_shards(replica: &Mimeo) -> Vec<u32> {
    let Some((200, text)) = replica.get("/readyz").await else {
        return Vec::new();
    };
    let Some(list) = text.split('[').nth(1).and_then(|rest| rest.split(']').next()) else {
        return Vec::new();
    };
    list.split(',').filter_map(|s| s.trim().parse().ok()).collect()
}

/// A control plane with mimeo's CRDs, and a client of it.
async fn plane() -> (ControlPlane, Client) {
    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    plane
        .install_crds(&[PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crds/mimeo.yaml")])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = plane.client().await.unwrap();
    (plane, client)
}

fn namespace(name: &str, annotations: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": name, "labels": {"bench": "target"}, "annotations": annotations}})
}

/// Counts the copies mimeo made (every Secret it labels), by place.
async fn wait_for_copies(client: &Client, n: usize, within: Duration) {
    let api: Api<Secret> = Api::all(client.clone());
    let config = watcher::Config::default().labels("mimeo.dev/managed-by=mimeo");
    let events = watcher(api, config);
    futures::pin_mut!(events);
    let mut seen = HashSet::new();
    let waited = tokio::time::timeout(within, async {
        while let Ok(Some(event)) = events.try_next().await {
            if let watcher::Event::Apply(s) | watcher::Event::InitApply(s) = event {
                seen.insert((s.metadata.namespace, s.metadata.name));
                if seen.len() >= n {
                    return;
                }
            }
        }
    })
    .await;
    assert!(waited.is_ok(), "{n} copies were not seen within {within:?}");
}

/// The sum over `replicas` of a counter's samples: `name` is the family (`mimeo_x_total`, every
/// label set) or one sample (`mimeo_x_total{result="run"}`).
async fn counter(replicas: &[Mimeo], name: &str) -> f64 {
    let mut total = 0.0;
    for replica in replicas {
        total += replica
            .metrics()
            .await
            .lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    total
}

/// What the replicas' plugins did for one run.
struct Calls {
    /// Transform calls, all replicas together.
    calls: f64,
    /// Chains that failed (a failure is not remembered: the chain runs again).
    failed: f64,
    /// Shard holds that lapsed (a renewal after its deadline, or one that failed): the rules
    /// looked at meanwhile were let go, and were looked at again once the shard was held.
    lapses: usize,
}

/// The plugin calls once they stopped coming (a pass may still be running its chains when the
/// last copy is seen), with the failures and the lapsed holds the replicas logged.
async fn calls_made(replicas: &[Mimeo], root: &Path) -> Calls {
    let started = Instant::now();
    let mut last = (
        counter(replicas, "mimeo_plugin_calls_total").await,
        Instant::now(),
    );
    while last.1.elapsed() < Duration::from_secs(5) && started.elapsed() < Duration::from_secs(120) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = counter(replicas, "mimeo_plugin_calls_total").await;
        if now != last.0 {
            last = (now, Instant::now());
        }
    }
    let lapses = (0..replicas.len())
        .map(|r| {
            std::fs::read_to_string(root.join(format!("replica-{r}")).join("mimeo.log"))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("renewed after its deadline") || l.contains("could not be renewed"))
                .count()
        })
        .sum();
    Calls {
        calls: last.0,
        failed: counter(replicas, "mimeo_plugin_failures_total").await,
        lapses,
    }
}

/// One run of the plugin-heavy rule set on `count` replicas: the time to all copies.
async fn plugin_run(count: usize, plugin_dir: &Path, extra: &[String]) -> (Duration, Vec<f64>, Calls) {
    let (plane, client) = plane().await;
    apply(&client, namespace("bench-src", json!({}))).await;
    for t in 0..NAMESPACES {
        apply(
            &client,
            namespace(
                &format!("bench-t{t}"),
                json!({"mimeo.dev/accept-from": "bench-src"}),
            ),
        )
        .await;
    }
    for s in 0..RULES {
        apply(
            &client,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": format!("s{s:02}"), "namespace": "bench-src"},
                   "stringData": {"value": format!("source {s}")}}),
        )
        .await;
    }
    let root = tempfile::tempdir().unwrap();
    let kubeconfig = root.path().join("kubeconfig");
    std::fs::write(&kubeconfig, plane.kubeconfig_yaml()).unwrap();
    let mut args = vec![format!("--plugin-dir={}", plugin_dir.display())];
    args.extend_from_slice(extra);
    let mut replicas = start_replicas(&kubeconfig, root.path(), count, &args).await;
    let cpu_before: Vec<f64> = replicas.iter().map(|r| r.cpu_secs()).collect();

    let started = Instant::now();
    for s in 0..RULES {
        apply(
            &client,
            json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                   "metadata": {"name": format!("r{s:02}"), "namespace": "bench-src"},
                   "spec": {"source": {"kind": "Secret", "name": format!("s{s:02}")},
                            "targets": [{"namespaceSelector": {"matchLabels": {"bench": "target"}}}],
                            "transforms": [{"plugin": "file://misbehave.wasm",
                                            "config": {"busy-ms": BUSY_MS}}]}}),
        )
        .await;
    }
    wait_for_copies(&client, RULES * NAMESPACES, Duration::from_secs(1800)).await;
    let took = started.elapsed();
    let cpu: Vec<f64> = replicas
        .iter()
        .zip(&cpu_before)
        .map(|(r, before)| r.cpu_secs() - before)
        .collect();
    let calls = calls_made(&replicas, root.path()).await;
    for replica in &mut replicas {
        replica.stop();
    }
    (took, cpu, calls)
}

async fn plugins() {
    let plugin_dir = harness::plugin_dir();
    assert!(
        plugin_dir.join("misbehave.wasm").is_file(),
        "plugins/build.sh built no misbehave.wasm"
    );
    let extra: Vec<String> = arg("--plugin-concurrency")
        .map(|n| vec![format!("--plugin-concurrency={n}")])
        .unwrap_or_default();
    println!(
        "{RULES} rules x {NAMESPACES} namespaces = {} copies, a plugin busy {BUSY_MS} ms a call, --shards={SHARDS} {extra:?}; {} cores:",
        RULES * NAMESPACES,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:>9} {:>14} {:>16} {:>28} {:>14} {:>9} {:>7} {:>14}",
        "replicas",
        "all copies",
        "speed-up vs 1",
        "CPU seconds per replica",
        "plugin calls",
        "per copy",
        "failed",
        "shard lapses"
    );
    let copies = (RULES * NAMESPACES) as f64;
    let mut one = None;
    let most = arg("--replicas").and_then(|n| n.parse().ok()).unwrap_or(3);
    for count in 1..=most {
        let (took, cpu, calls) = plugin_run(count, &plugin_dir, &extra).await;
        let one = *one.get_or_insert(took);
        let cpu: Vec<String> = cpu.iter().map(|c| format!("{c:.1}")).collect();
        println!(
            "{:>9} {:>14.1?} {:>15.2}x {:>28} {:>14} {:>9.2} {:>7} {:>14}",
            count,
            took,
            one.as_secs_f64() / took.as_secs_f64(),
            cpu.join(" / "),
            calls.calls,
            calls.calls / copies,
            calls.failed,
            calls.lapses
        );
    }
}

/// The value of the copy in `apps` of a cluster.
async fn copy_value(client: &Client) -> Option<String> {
    let copy = Api::<Secret>::namespaced(client.clone(), "apps")
        .get_opt("creds")
        .await
        .ok()??;
    String::from_utf8(copy.data?.get("value")?.0.clone()).ok()
}

async fn all_hold(clients: &[Client], value: &str) {
    let started = Instant::now();
    loop {
        let values = join_all(clients.iter().map(copy_value)).await;
        if values.iter().all(|v| v.as_deref() == Some(value)) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "copies still not at {value}: {values:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn clusters(count: usize) {
    let (hub, client) = plane().await;
    for ns in ["platform", "mimeo-system"] {
        apply(
            &client,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await;
    }
    let source = |value: &str| {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "creds", "namespace": "platform"},
               "stringData": {"value": value, "pad": "x".repeat(1024)}})
    };
    apply(&client, source("v0")).await;
    let mut planes = Vec::new();
    let mut remotes = Vec::new();
    for i in 0..count {
        let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
        let remote = plane.client().await.unwrap();
        apply(
            &remote,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}),
        )
        .await;
        let name = format!("c{i}");
        apply(
            &client,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": format!("{name}-kubeconfig"), "namespace": "mimeo-system"},
                   "stringData": {"value": plane.token_kubeconfig_yaml(plane.admin_token())}}),
        )
        .await;
        apply(
            &client,
            json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster",
                   "metadata": {"name": name},
                   "spec": {"kubeconfigSecretRef": {"namespace": "mimeo-system", "name": format!("{name}-kubeconfig")}}}),
        )
        .await;
        apply(
            &client,
            json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule",
                   "metadata": {"name": format!("to-{name}")},
                   "spec": {"source": {"kind": "Secret", "namespace": "platform", "name": "creds"},
                            "targets": [{"cluster": name, "namespace": "apps"}]}}),
        )
        .await;
        planes.push(plane);
        remotes.push(remote);
    }
    let root = tempfile::tempdir().unwrap();
    let kubeconfig = root.path().join("kubeconfig");
    std::fs::write(&kubeconfig, hub.kubeconfig_yaml()).unwrap();

    println!("{count} RemoteClusters, each the target of one ClusterSyncRule, --shards={SHARDS}:");
    println!(
        "{:>9} {:>8} {:>10} {:>16} {:>20} {:>24}",
        "replicas", "replica", "RSS MiB", "hub connections", "cluster connections", "clusters connected to"
    );
    for (round, replicas_count) in [1usize, 3].into_iter().enumerate() {
        let before: Vec<f64> = join_all(remotes.iter().map(watches)).await;
        let dir = root.path().join(format!("round-{round}"));
        let mut replicas = start_replicas(&kubeconfig, &dir, replicas_count, &[]).await;
        let value = format!("v{}", round + 1);
        apply(&client, source(&value)).await;
        all_hold(&remotes, &value).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let after: Vec<f64> = join_all(remotes.iter().map(watches)).await;
        for (r, replica) in replicas.iter().enumerate() {
            let by_port = connections_by_port(replica.pid());
            let to_clusters: Vec<usize> = planes
                .iter()
                .map(|p| by_port.get(&port_of(p.server())).copied().unwrap_or(0))
                .collect();
            println!(
                "{:>9} {:>8} {:>10.1} {:>16} {:>20} {:>24}",
                replicas_count,
                r,
                replica.rss_mib(),
                by_port.get(&port_of(hub.server())).copied().unwrap_or(0),
                to_clusters.iter().sum::<usize>(),
                to_clusters.iter().filter(|c| **c > 0).count()
            );
        }
        let held: f64 = after.iter().zip(&before).map(|(a, b)| a - b).sum();
        println!("{replicas_count:>9} replicas together: {held:.0} watches on the {count} clusters");
        for replica in &mut replicas {
            replica.stop();
        }
        // The Leases of a clean stop are released at once; let the clusters' watches close.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}
