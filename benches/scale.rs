//! Scenario benchmark against a real control plane, with `mimeo run` as its own process:
//!
//! - **throughput**: copies written per second by one rule fanning sources out to 100 namespaces,
//!   over the raw write ceiling of the same apiserver (the same objects written by a plain client
//!   with server-side apply and mimeo's write concurrency);
//! - **memory**: the controller's resident memory idle, at 1,000 copies and at all of them, and
//!   settled after the many rules below, against the same copies after a restart (what it holds
//!   without the peak of writing them);
//! - **many rules**: 500 `SyncRule`s of one copy each, created at once: rules per second, and the
//!   apiserver requests each costs;
//! - **restart**: the apiserver writes a restarted controller makes with nothing changed, and its
//!   resident set against the settled one's for the same copies (what a burst left behind);
//! - **deletion**: the big rule deleted, until its last copy is gone.
//!
//! `cargo bench --bench scale` (`-- --sources 100` for 10,000 copies; `-- --sources 500
//! --raw-all` for 50,000, the raw client writing as many; `-- --many-rules 1000` for 1,000 rules
//! of 100 copies each instead, memory and status sizes; `--settle-secs S` waits that long before
//! the settled figure, 65 unless said). Figures are printed;
//! docs/benchmarks.md records a run. With
//! `MIMEO_BENCH_WRAP=heaptrack` the controller runs under that profiler (its resident set is
//! then the profiler's too).

#[path = "support/processes.rs"]
mod processes;

#[path = "../tests/harness/mod.rs"]
mod harness;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use mimeo_envtest::ControlPlane;
use processes::{Mimeo, apiserver_requests, apply, requests_since};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

/// Target namespaces.
const NAMESPACES: usize = 100;
/// Sources in the first round (x NAMESPACES copies), and in all unless `-- --sources N` says
/// (100 sources: 10,000 copies).
const FIRST_SOURCES: usize = 10;
const DEFAULT_SOURCES: usize = 50;
/// Writes in flight at once for the raw client: mimeo's own per-rule write concurrency.
const RAW_CONCURRENCY: usize = 16;
/// The resources mimeo writes, whose apiserver write counters a restart must leave alone.
const WRITTEN: &[&str] = &["secrets", "syncrules", "events"];
/// The resources whose requests the many-rules figure counts.
const SCALE_RESOURCES: &[&str] = &["secrets", "syncrules", "events", "namespaces"];
/// Rules of one copy each, created at once.
const RULES: usize = 500;
/// Bytes of data in each Secret.
const VALUE_BYTES: usize = 1024;
/// How long after the last write the resident set counts as settled, unless `--settle-secs`
/// says: past the controller's tidy (every 60 s), which forgets what the burst of writes needed
/// remembered. The events it published are forgotten six minutes after the last (`--settle-secs
/// 450`).
const SETTLE_SECS: usize = 65;

fn settle() -> Duration {
    Duration::from_secs(arg("--settle-secs").unwrap_or(SETTLE_SECS) as u64)
}

/// The number after `flag` on the command line.
fn arg(flag: &str) -> Option<usize> {
    std::env::args()
        .skip_while(|a| a != flag)
        .nth(1)
        .and_then(|n| n.parse().ok())
}

#[tokio::main]
async fn main() {
    let all_sources: usize = arg("--sources").unwrap_or(DEFAULT_SOURCES).max(FIRST_SOURCES + 1);
    let raw_all = std::env::args().any(|a| a == "--raw-all");
    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    plane
        .install_crds(&[std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crds/mimeo.yaml")])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = plane.client().await.unwrap();
    apply(&client, namespace("scale-src", json!({}), json!({}))).await;
    for i in 0..NAMESPACES {
        apply(
            &client,
            namespace(
                &format!("scale-t{i}"),
                json!({"scale": "target"}),
                json!({"mimeo.dev/accept-from": "scale-src"}),
            ),
        )
        .await;
    }
    if let Some(rules) = arg("--many-rules") {
        return many_rules(&plane, &client, rules).await;
    }
    for s in 0..all_sources {
        apply_secret(&client, source(s)).await;
    }

    // The ceiling: the first round's copies (or all of them), written by a plain client.
    let raw_sources = if raw_all { all_sources } else { FIRST_SOURCES };
    let raw_objects: Vec<Value> = (0..raw_sources)
        .flat_map(|s| (0..NAMESPACES).map(move |t| raw_copy(s, t)))
        .collect();
    let started = Instant::now();
    futures::stream::iter(raw_objects)
        .map(|object| {
            let client = client.clone();
            async move { apply_secret(&client, object).await }
        })
        .buffer_unordered(RAW_CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
    let raw = started.elapsed();
    let raw_rate = (raw_sources * NAMESPACES) as f64 / raw.as_secs_f64();

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, plane.kubeconfig_yaml()).unwrap();
    let mut mimeo = Mimeo::start(&kubeconfig, dir.path());
    mimeo.wait_ready().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = mimeo.rss_mib();

    // Round one: the rule, FIRST_SOURCES sources to NAMESPACES namespaces.
    let copies = CopyCounter::start(&client);
    let started = Instant::now();
    apply(
        &client,
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
               "metadata": {"name": "fan-out", "namespace": "scale-src"},
               "spec": {"source": {"kind": "Secret", "selector": {"matchLabels": {"round": "1"}}},
                        "targets": [{"namespaceSelector": {"matchLabels": {"scale": "target"}}}]}}),
    )
    .await;
    copies.wait_for(FIRST_SOURCES * NAMESPACES).await;
    let first = started.elapsed();
    let first_rate = (FIRST_SOURCES * NAMESPACES) as f64 / first.as_secs_f64();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let at_first = mimeo.rss_mib();

    // Round two: the other sources join the selector.
    let started = Instant::now();
    for s in FIRST_SOURCES..all_sources {
        let mut object = source(s);
        object["metadata"]["labels"]["round"] = json!("1");
        apply_secret(&client, object).await;
    }
    copies.wait_for(all_sources * NAMESPACES).await;
    let second = started.elapsed();
    let to_all = first + second;
    let fan_out_status = status_bytes(&client, "fan-out").await;
    let second_rate = ((all_sources - FIRST_SOURCES) * NAMESPACES) as f64 / second.as_secs_f64();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let at_all = mimeo.rss_mib();

    // Many small rules at once: one Secret each, to one namespace each.
    for r in 0..RULES {
        apply_secret(
            &client,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": format!("one-{r}"), "namespace": "scale-src"},
                   "stringData": {"value": value(1000 + r)}}),
        )
        .await;
    }
    let requests_before = apiserver_requests(&client, SCALE_RESOURCES).await;
    let started = Instant::now();
    futures::stream::iter(0..RULES)
        .map(|r| {
            let client = client.clone();
            async move {
                apply(
                    &client,
                    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                           "metadata": {"name": format!("one-{r}"), "namespace": "scale-src"},
                           "spec": {"source": {"kind": "Secret", "name": format!("one-{r}")},
                                    "targets": [{"namespace": format!("scale-t{}", r % NAMESPACES)}]}}),
                )
                .await
            }
        })
        .buffer_unordered(RAW_CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
    copies.wait_for(all_sources * NAMESPACES + RULES).await;
    let many = started.elapsed();
    // Let the status writes and events land.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let requests = requests_since(
        &requests_before,
        &apiserver_requests(&client, SCALE_RESOURCES).await,
    );
    let at_many = mimeo.rss_mib();
    tokio::time::sleep(settle()).await;
    let settled = mimeo.rss_mib();
    let peak = mimeo.peak_rss_mib();

    // Restart with nothing changed.
    let (mut mimeo, caught_up, writes_before) = restart(
        mimeo,
        &client,
        &kubeconfig,
        dir.path(),
        all_sources * NAMESPACES + RULES,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after_restart = mimeo.rss_mib();
    let restart_writes: BTreeMap<(String, String), f64> =
        requests_since(&writes_before, &apiserver_requests(&client, WRITTEN).await)
            .into_iter()
            .filter(|((verb, _), n)| !matches!(verb.as_str(), "GET" | "LIST") && *n > 0.0)
            .collect();
    let restart_write_count = restart_writes.values().sum::<f64>() as u64;

    let deleted = delete_rule(&client, "fan-out", &copies, RULES).await;
    mimeo.stop();
    // MIMEO_BENCH_LOG_DIR keeps the restarted process's log (MIMEO_BENCH_LOG sets its filter).
    if let Ok(logs) = std::env::var("MIMEO_BENCH_LOG_DIR") {
        let _ = std::fs::copy(
            dir.path().join("mimeo.log"),
            std::path::Path::new(&logs).join("scale-restarted.log"),
        );
    }

    let n1 = FIRST_SOURCES * NAMESPACES;
    let n2 = all_sources * NAMESPACES;
    println!("throughput: copies of {VALUE_BYTES}-byte Secrets into {NAMESPACES} namespaces, one rule");
    let n_raw = raw_sources * NAMESPACES;
    println!(
        "  raw client, server-side apply, {RAW_CONCURRENCY} in flight: {n_raw} objects in {raw:.2?}, {raw_rate:.0}/s"
    );
    println!("  mimeo, rule created to {n1} copies seen:       {first:.2?}, {first_rate:.0}/s");
    println!(
        "  mimeo, {} sources joining to {n2} copies seen: {second:.2?}, {second_rate:.0}/s",
        all_sources - FIRST_SOURCES
    );
    println!(
        "  mimeo / raw: {:.2} (first round), {:.2} (second round)",
        first_rate / raw_rate,
        second_rate / raw_rate
    );
    if raw_all {
        println!(
            "  to all {n2} copies: mimeo {to_all:.2?} (both rounds), raw {raw:.2?}: mimeo takes {:.2}x the raw client's time",
            to_all.as_secs_f64() / raw.as_secs_f64()
        );
    }
    println!("  the rule's status at {n2} copies: {fan_out_status} bytes");
    println!("memory: resident set of `mimeo run` (release build)");
    println!("  idle, ready:           {idle:.1} MiB");
    println!("  {n1} copies:           {at_first:.1} MiB");
    println!("  {n2} copies:           {at_all:.1} MiB");
    println!(
        "  {} copies and {} rules: {at_many:.1} MiB 3 s after the last copy, settled ({}s later) \
         {settled:.1} MiB, peak {peak:.1} MiB",
        n2 + RULES,
        RULES + 1,
        settle().as_secs()
    );
    println!(
        "  the same, restarted: {after_restart:.1} MiB (nothing to write); settled / restarted {:.2}",
        settled / after_restart
    );
    println!(
        "  per 1000 copies, {n1} to {n2}: {:.2} MiB",
        (at_all - at_first) / ((n2 - n1) as f64 / 1000.0)
    );
    println!(
        "many rules: {RULES} SyncRules of one copy each, applied {RAW_CONCURRENCY} at a time, to all copies seen: {many:.2?}, {:.0} rules/s",
        RULES as f64 / many.as_secs_f64()
    );
    println!("  apiserver requests per rule, other than the rule's own apply (verb, resource):");
    for ((verb, resource), count) in &requests {
        let count = if resource == "syncrules" && verb == "APPLY" {
            count - RULES as f64
        } else {
            *count
        };
        if count > 0.0 {
            println!("    {verb:<6} {resource:<12} {:.2}", count / RULES as f64);
        }
    }
    println!(
        "restart with {} copies and nothing changed: {restart_write_count} apiserver writes on \
         Secrets, SyncRules and Events; copies reported Synced {caught_up:.2?} after ready",
        n2 + RULES
    );
    for ((verb, resource), n) in &restart_writes {
        println!("    {verb:<6} {resource:<12} {n}");
    }
    println!(
        "deletion: the rule of {n2} copies deleted to its last copy gone: {deleted:.2?}, {:.0} copies/s",
        n2 as f64 / deleted.as_secs_f64()
    );
}

/// Stops `mimeo` and starts it again on the same cluster; returns the new process, how long
/// after it was ready it reported `total` copies Synced, and the apiserver's write counts taken
/// between the two (so that a status write or event of the last phase still in flight is not
/// taken for the new process's).
async fn restart(
    mut mimeo: Mimeo,
    client: &Client,
    kubeconfig: &std::path::Path,
    dir: &std::path::Path,
    total: usize,
) -> (Mimeo, Duration, BTreeMap<(String, String), f64>) {
    mimeo.stop();
    let writes_before = apiserver_requests(client, WRITTEN).await;
    let mut mimeo = Mimeo::start(kubeconfig, dir);
    mimeo.wait_ready().await;
    let synced = format!("mimeo_copies{{state=\"Synced\"}} {total}");
    let restarted = Instant::now();
    while !mimeo.metrics().await.contains(&synced) {
        assert!(
            restarted.elapsed() < Duration::from_secs(600),
            "the restarted controller did not report {synced}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (mimeo, restarted.elapsed(), writes_before)
}

/// Deletes the rule `name` in `scale-src`; returns how long until only `left` copies were there.
async fn delete_rule(client: &Client, name: &str, copies: &CopyCounter, left: usize) -> Duration {
    let started = Instant::now();
    Api::<mimeo::api::SyncRule>::namespaced(client.clone(), "scale-src")
        .delete(name, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("deleting the rule {name}: {e}"));
    copies.wait_for_live(left, Duration::from_secs(900)).await;
    started.elapsed()
}

/// Counts the distinct copies a watch of its own has seen.
struct CopyCounter {
    /// Copies ever seen, and copies there now.
    seen: tokio::sync::watch::Receiver<(usize, usize)>,
}

impl CopyCounter {
    fn start(client: &Client) -> Self {
        let api: Api<Secret> = Api::all(client.clone());
        let config = watcher::Config::default().labels("mimeo.dev/managed-by=mimeo");
        let (tx, seen) = tokio::sync::watch::channel((0, 0));
        tokio::spawn(async move {
            let mut names = HashSet::new();
            let mut live = HashSet::new();
            let events = watcher(api, config);
            futures::pin_mut!(events);
            while let Ok(Some(event)) = events.try_next().await {
                match event {
                    watcher::Event::Apply(s) | watcher::Event::InitApply(s) => {
                        let name = (s.metadata.namespace, s.metadata.name);
                        names.insert(name.clone());
                        live.insert(name);
                    }
                    watcher::Event::Delete(s) => {
                        live.remove(&(s.metadata.namespace, s.metadata.name));
                    }
                    _ => continue,
                }
                tx.send_replace((names.len(), live.len()));
            }
        });
        CopyCounter { seen }
    }

    async fn wait_for(&self, n: usize) {
        self.wait_for_within(n, Duration::from_secs(900)).await;
    }

    async fn wait_for_within(&self, n: usize, wait: Duration) {
        let mut seen = self.seen.clone();
        tokio::time::timeout(wait, seen.wait_for(|(count, _)| *count >= n))
            .await
            .unwrap_or_else(|_| panic!("{n} copies were not seen"))
            .unwrap();
    }

    /// Waits until no more than `n` copies are there.
    async fn wait_for_live(&self, n: usize, wait: Duration) {
        let mut seen = self.seen.clone();
        tokio::time::timeout(wait, seen.wait_for(|(_, live)| *live <= n))
            .await
            .unwrap_or_else(|_| panic!("copies were not down to {n}"))
            .unwrap();
    }
}

fn namespace(name: &str, labels: Value, annotations: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": name, "labels": labels, "annotations": annotations}})
}

fn value(seed: usize) -> String {
    // Printable, distinct per Secret, VALUE_BYTES long.
    let unit = format!("{seed:08x}");
    unit.repeat(VALUE_BYTES / unit.len())
}

fn source(s: usize) -> Value {
    let round = if s < FIRST_SOURCES { "1" } else { "2" };
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": format!("src-{s}"), "namespace": "scale-src", "labels": {"round": round}},
           "stringData": {"value": value(s)}})
}

/// What a raw client writes for the ceiling: an object the size and shape of a copy.
fn raw_copy(s: usize, t: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": format!("raw-{s}"), "namespace": format!("scale-t{t}"),
                        "labels": {"raw": "yes"},
                        "annotations": {"raw.example/source": format!("scale-src/src-{s}"),
                                        "raw.example/hash": format!("{s:064x}")}},
           "stringData": {"value": value(s)}})
}

/// Server-side apply of a Secret, with no discovery on the way: the raw ceiling must be the
/// apiserver's, not the client's.
async fn apply_secret(client: &Client, object: Value) {
    let namespace = object["metadata"]["namespace"].as_str().unwrap();
    let name = object["metadata"]["name"].as_str().unwrap();
    Api::<Secret>::namespaced(client.clone(), namespace)
        .patch(name, &PatchParams::apply("bench").force(), &Patch::Apply(&object))
        .await
        .unwrap_or_else(|e| panic!("applying {namespace}/{name}: {e}"));
}

/// The size of a `SyncRule`'s status in `scale-src`, as JSON.
async fn status_bytes(client: &Client, name: &str) -> usize {
    let rules: Api<mimeo::api::SyncRule> = Api::namespaced(client.clone(), "scale-src");
    let rule = rules.get(name).await.unwrap();
    serde_json::to_vec(&rule.status).unwrap().len()
}

/// `rules` rules of one source each into every target namespace (100 copies a rule): the
/// controller's memory with them all in sync, and again after a restart.
async fn many_rules(plane: &ControlPlane, client: &Client, rules: usize) {
    for r in 0..rules {
        apply_secret(
            client,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": format!("many-{r}"), "namespace": "scale-src"},
                   "stringData": {"value": value(r)}}),
        )
        .await;
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, plane.kubeconfig_yaml()).unwrap();
    let mut mimeo = Mimeo::start(&kubeconfig, dir.path());
    mimeo.wait_ready().await;
    let idle = mimeo.rss_mib();
    let copies = CopyCounter::start(client);
    let started = Instant::now();
    futures::stream::iter(0..rules)
        .map(|r| {
            let client = client.clone();
            async move {
                apply(
                    &client,
                    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                           "metadata": {"name": format!("many-{r}"), "namespace": "scale-src"},
                           "spec": {"source": {"kind": "Secret", "name": format!("many-{r}")},
                                    "targets": [{"namespaceSelector": {"matchLabels": {"scale": "target"}}}]}}),
                )
                .await
            }
        })
        .buffer_unordered(RAW_CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
    let total = rules * NAMESPACES;
    copies.wait_for_within(total, Duration::from_secs(1800)).await;
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let at_all = mimeo.rss_mib();
    mimeo.wait_settled(total, Duration::from_secs(10)).await;
    let settled_after = started.elapsed();
    tokio::time::sleep(settle()).await;
    let settled = mimeo.rss_mib();
    let peak = mimeo.peak_rss_mib();
    let largest = {
        let listed: Api<mimeo::api::SyncRule> = Api::namespaced(client.clone(), "scale-src");
        listed
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|r| serde_json::to_vec(&r.status).unwrap().len())
            .max()
            .unwrap_or_default()
    };
    let (mut mimeo, caught_up, _) = restart(mimeo, client, &kubeconfig, dir.path(), total).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after_restart = mimeo.rss_mib();
    mimeo.stop();
    println!("many rules: {rules} SyncRules of 100 copies each, {total} copies, one replica");
    println!(
        "  rules applied to all copies seen: {took:.2?}, {:.0} copies/s",
        total as f64 / took.as_secs_f64()
    );
    println!(
        "  resident set: idle {idle:.1} MiB, all copies seen {at_all:.1} MiB, settled (all Synced at {settled_after:.2?}, then {}s) {settled:.1} MiB, peak {peak:.1} MiB, restarted {after_restart:.1} MiB (caught up {caught_up:.2?} after ready); settled / restarted {:.2}",
        settle().as_secs(),
        settled / after_restart
    );
    println!("  largest rule status: {largest} bytes");
}
