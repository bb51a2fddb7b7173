//! Side-by-side scenario benchmark: mimeo and kubernetes-replicator v2.12.4 (built from
//! `../shared/peers/`), each as its own process on a fresh control plane, runs alternating
//! (mimeo, replicator, mimeo, replicator). One Secret of 1 KiB fanned out to N labelled
//! namespaces (mimeo: a `SyncRule` with a `namespaceSelector`; the replicator:
//! `replicate-to-matching`, as its README shows for fan-out), then rotated R times. An independent
//! watch sees the copies. Per run: fan-out time, rotation p50/p99 (a rotation that has not reached
//! every copy within the wait counts as not converged), peak resident memory and CPU time of the
//! tool's process, the apiserver's requests by verb and resource (its own metrics, WATCH
//! excluded), and CPU and requests over an idle period.
//!
//! `cargo bench --bench peers -- [--namespaces N] [--rotations R] [--runs K] [--idle-secs S]
//! [--wait-secs W]` (defaults 100, 10, 2, 60, 30). The replicator ships with client-go's default
//! client rate limit (5 requests/s, burst 10) and no flag to change it; it runs as it ships.

#[path = "support/processes.rs"]
mod processes;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use mimeo_envtest::ControlPlane;
use processes::{Mimeo, Process, apiserver_requests, apply, requests_since};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

const SOURCE_NS: &str = "bench-src";
const NAME: &str = "creds";

fn arg(name: &str, default: u64) -> u64 {
    std::env::args()
        .skip_while(|a| a != name)
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Tool {
    Mimeo,
    Replicator,
}

/// What one run measured.
struct Run {
    tool: Tool,
    fan_out: Option<Duration>,
    rotations: Vec<Option<Duration>>,
    peak_mib: f64,
    cpu_secs: f64,
    requests: BTreeMap<(String, String), f64>,
    idle_cpu_secs: f64,
    idle_requests: f64,
}

#[tokio::main]
async fn main() {
    let namespaces = arg("--namespaces", 100) as usize;
    let rotations = arg("--rotations", 10) as usize;
    let runs = arg("--runs", 2);
    let idle = Duration::from_secs(arg("--idle-secs", 60));
    let wait = Duration::from_secs(arg("--wait-secs", 30));
    let replicator = build_replicator();
    let mut results = Vec::new();
    for _ in 0..runs {
        for tool in [Tool::Mimeo, Tool::Replicator] {
            let run = scenario(tool, &replicator, namespaces, rotations, idle, wait).await;
            report(&run);
            results.push(run);
        }
    }
    summary(&results, namespaces, rotations);
}

fn build_replicator() -> String {
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/peers/build-kubernetes-replicator.sh");
    let output = std::process::Command::new("bash")
        .arg(&script)
        .output()
        .expect("running the build script");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

fn secret_value(i: usize) -> String {
    format!("{i:06}-{}", "x".repeat(1017))
}

async fn scenario(
    tool: Tool,
    replicator: &str,
    namespaces: usize,
    rotations: usize,
    idle: Duration,
    wait: Duration,
) -> Run {
    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let crds = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crds/mimeo.yaml");
    plane.install_crds(&[crds]).await.unwrap();
    let client = plane.client().await.unwrap();
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SOURCE_NS}}),
    )
    .await;
    for i in 0..namespaces {
        apply(
            &client,
            json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": format!("t-{i}"), "labels": {"fan": "out"},
                         "annotations": {"mimeo.dev/accept-from": SOURCE_NS}}}),
        )
        .await;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut process: Box<dyn Process> = match tool {
        Tool::Mimeo => {
            let mut mimeo = Mimeo::start(plane.kubeconfig_path(), dir.path());
            mimeo.wait_ready().await;
            Box::new(mimeo)
        }
        Tool::Replicator => Box::new(processes::Child::start(
            std::process::Command::new(replicator).args([
                "--kubeconfig",
                plane.kubeconfig_path().to_str().unwrap(),
                "--status-addr",
                "127.0.0.1:0",
                "--replicate-roles=false",
                "--replicate-role-bindings=false",
                "--replicate-service-accounts=false",
            ]),
            &dir.path().join("replicator.log"),
        )),
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let observer = observe(&client, seen_tx);
    let requests_before =
        apiserver_requests(&client, &["secrets", "syncrules", "events", "namespaces"]).await;
    let cpu_before = process.cpu_secs();

    let started = Instant::now();
    let mut source = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": NAME, "namespace": SOURCE_NS},
        "data": {"token": ByteString(secret_value(0).into_bytes())}});
    if tool == Tool::Replicator {
        source["metadata"]["annotations"] =
            json!({"replicator.v1.mittwald.de/replicate-to-matching": "fan=out"});
    }
    apply(&client, source.clone()).await;
    if tool == Tool::Mimeo {
        apply(
            &client,
            json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
            "metadata": {"name": "fan-out", "namespace": SOURCE_NS},
            "spec": {"source": {"kind": "Secret", "name": NAME},
                     "targets": [{"namespaceSelector": {"matchLabels": {"fan": "out"}}}]}}),
        )
        .await;
    }
    let fan_out = all_seen(
        &mut seen,
        &secret_value(0),
        namespaces,
        started,
        Duration::from_secs(300),
    )
    .await;

    let secrets: Api<Secret> = Api::namespaced(client.clone(), SOURCE_NS);
    let mut latencies = Vec::new();
    for r in 1..=rotations {
        let value = secret_value(r);
        let mut next = source.clone();
        next["data"]["token"] = serde_json::to_value(ByteString(value.clone().into_bytes())).unwrap();
        let started = Instant::now();
        secrets
            .patch(NAME, &PatchParams::apply("bench").force(), &Patch::Apply(&next))
            .await
            .unwrap();
        latencies.push(all_seen(&mut seen, &value, namespaces, started, wait).await);
    }
    let requests = requests_since(
        &requests_before,
        &apiserver_requests(&client, &["secrets", "syncrules", "events", "namespaces"]).await,
    );
    let cpu_secs = process.cpu_secs() - cpu_before;

    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle_before = apiserver_requests(&client, &["secrets", "syncrules", "events", "namespaces"]).await;
    let idle_cpu_before = process.cpu_secs();
    tokio::time::sleep(idle).await;
    let idle_cpu_secs = process.cpu_secs() - idle_cpu_before;
    let idle_requests = requests_since(
        &idle_before,
        &apiserver_requests(&client, &["secrets", "syncrules", "events", "namespaces"]).await,
    )
    .values()
    .sum();
    let peak_mib = process.peak_mib();
    observer.abort();
    process.stop();
    Run {
        tool,
        fan_out,
        rotations: latencies,
        peak_mib,
        cpu_secs,
        requests,
        idle_cpu_secs,
        idle_requests,
    }
}

/// Every copy of `creds` outside the source's namespace, with its token, as seen by a watch.
fn observe(
    client: &Client,
    tx: tokio::sync::mpsc::UnboundedSender<(String, String, Instant)>,
) -> tokio::task::JoinHandle<()> {
    let api: Api<Secret> = Api::all(client.clone());
    tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={NAME}"));
        let mut stream = watcher(api, config).applied_objects().boxed();
        while let Some(Ok(copy)) = stream.next().await {
            let ns = copy.metadata.namespace.clone().unwrap_or_default();
            if ns == SOURCE_NS {
                continue;
            }
            let value = copy
                .data
                .as_ref()
                .and_then(|d| d.get("token"))
                .map(|b| String::from_utf8_lossy(&b.0).into_owned());
            if let Some(value) = value {
                let _ = tx.send((ns, value, Instant::now()));
            }
        }
    })
}

/// When the last of `n` copies showed `value`, counted from `started`; `None` past `wait`.
async fn all_seen(
    seen: &mut tokio::sync::mpsc::UnboundedReceiver<(String, String, Instant)>,
    value: &str,
    n: usize,
    started: Instant,
    wait: Duration,
) -> Option<Duration> {
    let mut at: HashMap<String, Instant> = HashMap::new();
    let deadline = tokio::time::Instant::from_std(started + wait);
    while at.len() < n {
        match tokio::time::timeout_at(deadline, seen.recv()).await {
            Ok(Some((ns, v, when))) if v == value => {
                at.insert(ns, when);
            }
            Ok(Some(_)) => {}
            _ => return None,
        }
    }
    at.into_values().max().map(|last| last - started)
}

fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    Some(
        sorted[((sorted.len() as f64 * p).ceil() as usize)
            .saturating_sub(1)
            .min(sorted.len() - 1)],
    )
}

fn converged(run: &Run) -> Vec<Duration> {
    let mut done: Vec<Duration> = run.rotations.iter().flatten().copied().collect();
    done.sort();
    done
}

fn show(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.2} s", d.as_secs_f64()))
        .unwrap_or_else(|| "not converged".into())
}

fn report(run: &Run) {
    let done = converged(run);
    println!(
        "{:?}: fan-out {}; rotations {}/{} converged, p50 {}, p99 {}; peak {:.1} MiB; CPU {:.2} s; idle CPU {:.2} s, idle requests {}",
        run.tool,
        show(run.fan_out),
        done.len(),
        run.rotations.len(),
        show(percentile(&done, 0.5)),
        show(percentile(&done, 0.99)),
        run.peak_mib,
        run.cpu_secs,
        run.idle_cpu_secs,
        run.idle_requests
    );
    for ((verb, resource), n) in run.requests.iter().filter(|(_, n)| **n > 0.0) {
        println!("    {verb} {resource}: {n}");
    }
}

fn summary(results: &[Run], namespaces: usize, rotations: usize) {
    let of = |tool: Tool| results.iter().filter(move |r| r.tool == tool);
    let total = |r: &Run| r.requests.values().sum::<f64>();
    println!(
        "\n{namespaces} namespaces, {rotations} rotations, {} runs each",
        of(Tool::Mimeo).count()
    );
    println!("| | mimeo | kubernetes-replicator | replicator / mimeo |");
    println!("|---|---|---|---|");
    let row = |what: &str, f: &dyn Fn(&Run) -> Option<f64>, unit: &str| {
        let values = |tool| of(tool).map(f).collect::<Vec<_>>();
        let text = |v: &[Option<f64>]| {
            v.iter()
                .map(|x| x.map(|x| format!("{x:.2}{unit}")).unwrap_or_else(|| "-".into()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mean = |v: &[Option<f64>]| {
            let xs: Vec<f64> = v.iter().flatten().copied().collect();
            (!xs.is_empty() && xs.len() == v.len()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
        };
        let (m, r) = (values(Tool::Mimeo), values(Tool::Replicator));
        let ratio = match (mean(&m), mean(&r)) {
            (Some(m), Some(r)) if m > 0.0 => format!("{:.1}x", r / m),
            _ => "-".into(),
        };
        println!("| {what} | {} | {} | {ratio} |", text(&m), text(&r));
    };
    row("fan-out", &|r| r.fan_out.map(|d| d.as_secs_f64()), " s");
    row(
        "rotation p50",
        &|r| percentile(&converged(r), 0.5).map(|d| d.as_secs_f64()),
        " s",
    );
    row(
        "rotation p99",
        &|r| percentile(&converged(r), 0.99).map(|d| d.as_secs_f64()),
        " s",
    );
    row("rotations converged", &|r| Some(converged(r).len() as f64), "");
    row("peak resident memory", &|r| Some(r.peak_mib), " MiB");
    row("CPU time, fan-out and rotations", &|r| Some(r.cpu_secs), " s");
    row(
        "apiserver requests, fan-out and rotations",
        &|r| Some(total(r)),
        "",
    );
    row("idle CPU time", &|r| Some(r.idle_cpu_secs), " s");
    row("idle apiserver requests", &|r| Some(r.idle_requests), "");
}
