//! Scenario benchmark against real control planes: how fast a rotated source reaches its copies
//! in the same cluster and in another one, and how many watches the controller holds for 1 and
//! for 100 rules.
//!
//! `cargo bench --bench propagation` (add `-- --rotations N` to change the count). Figures are
//! printed as a table; docs/benchmarks.md records a run.

#[path = "../tests/harness/mod.rs"]
mod harness;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const TARGETS: usize = 10;

#[tokio::main]
async fn main() {
    let rotations: usize = std::env::args()
        .skip_while(|a| a != "--rotations")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    let mut h = harness::Harness::without_controller().await;
    let client = h.client.clone();
    let watches_without = apiserver_watches(&client).await;
    h.start_controller().await;

    // Propagation: one Secret copied into TARGETS namespaces, rotated `rotations` times.
    namespace(&client, "bench-src", &[]).await;
    for i in 0..TARGETS {
        namespace(&client, &format!("bench-t{i}"), &[("bench", "propagation")]).await;
    }
    let sources: Api<Secret> = Api::namespaced(client.clone(), "bench-src");
    sources
        .create(&PostParams::default(), &secret("creds", "v-initial"))
        .await
        .unwrap();
    apply_rule(
        &client,
        "bench-src",
        "creds",
        json!({"matchLabels": {"bench": "propagation"}}),
    )
    .await;

    let local = rotate(&sources, &client, "creds", "v", rotations).await;

    // Watches: with the one rule above, then with 100 rules.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let one_rule = apiserver_watches(&client).await - watches_without;
    for i in 0..99 {
        let name = format!("extra-{i}");
        sources
            .create(&PostParams::default(), &secret(&name, "x"))
            .await
            .unwrap();
        apply_rule(
            &client,
            "bench-src",
            &name,
            json!({"matchLabels": {"bench": "propagation"}}),
        )
        .await;
    }
    wait_for_copies(&client, 100 * TARGETS).await;
    let hundred_same_ns = apiserver_watches(&client).await - watches_without;
    for i in 0..100 {
        let ns = format!("bench-own-{i}");
        namespace(&client, &ns, &[]).await;
        Api::<Secret>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &secret("own", "x"))
            .await
            .unwrap();
        apply_rule(&client, &ns, "own", json!({"matchLabels": {"bench": "none"}})).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let plus_hundred_own_ns = apiserver_watches(&client).await - watches_without;
    println!("watches the controller holds on the apiserver (apiserver_longrunning_requests, WATCH):");
    println!("  1 rule                                        {one_rule}");
    println!("  100 rules reading one namespace               {hundred_same_ns}");
    println!("  + 100 rules each reading its own namespace    {plus_hundred_own_ns}");

    // The same into 10 namespaces of a second cluster, through a RemoteCluster.
    let remote = mimeo_envtest::ControlPlane::start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let remote_client = remote.client().await.unwrap();
    for i in 0..TARGETS {
        namespace(&remote_client, &format!("bench-t{i}"), &[("bench", "remote")]).await;
    }
    namespace(&client, "mimeo-system", &[]).await;
    let kubeconfig = Secret {
        metadata: kube::core::ObjectMeta {
            name: Some("remote-kubeconfig".into()),
            ..Default::default()
        },
        string_data: Some([("value".to_owned(), remote.kubeconfig_yaml().to_owned())].into()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), "mimeo-system")
        .create(&PostParams::default(), &kubeconfig)
        .await
        .unwrap();
    let cluster = json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster", "metadata": {"name": "remote"},
        "spec": {"kubeconfigSecretRef": {"namespace": "mimeo-system", "name": "remote-kubeconfig"}}});
    Api::<mimeo::api::RemoteCluster>::all(client.clone())
        .patch(
            "remote",
            &PatchParams::apply("bench").force(),
            &Patch::Apply(&cluster),
        )
        .await
        .unwrap();
    sources
        .create(&PostParams::default(), &secret("remote-creds", "r-initial"))
        .await
        .unwrap();
    let rule = json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule", "metadata": {"name": "remote-creds"},
        "spec": {"source": {"kind": "Secret", "name": "remote-creds", "namespace": "bench-src"},
                 "targets": [{"cluster": "remote", "namespaceSelector": {"matchLabels": {"bench": "remote"}}}]}});
    Api::<mimeo::api::ClusterSyncRule>::all(client.clone())
        .patch(
            "remote-creds",
            &PatchParams::apply("bench").force(),
            &Patch::Apply(&rule),
        )
        .await
        .unwrap();
    let to_remote = rotate(&sources, &remote_client, "remote-creds", "r", rotations).await;

    println!(
        "propagation: one Secret to {TARGETS} namespaces, {rotations} rotations, source write to last copy seen"
    );
    println!("  {:<30} {:>9} {:>9} {:>9} {:>9}", "", "p50", "p90", "p99", "max");
    for (what, latencies) in [("same cluster", &local), ("another cluster", &to_remote)] {
        println!(
            "  {what:<30} {:>9.1?} {:>9.1?} {:>9.1?} {:>9.1?}",
            percentile(latencies, 0.5),
            percentile(latencies, 0.9),
            percentile(latencies, 0.99),
            latencies[latencies.len() - 1]
        );
    }
    println!(
        "  another cluster / same cluster, p50: {:.2}",
        percentile(&to_remote, 0.5).as_secs_f64() / percentile(&local, 0.5).as_secs_f64()
    );

    h.stop_controller().await;
}

/// Rotates the source `name` `rotations` times and returns, sorted, how long each took to reach
/// every copy in the cluster of `copies_client` (seen by a watch of its own on the copies).
async fn rotate(
    sources: &Api<Secret>,
    copies_client: &Client,
    name: &str,
    prefix: &str,
    rotations: usize,
) -> Vec<Duration> {
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<(String, String, Instant)>();
    let copies: Api<Secret> = Api::all(copies_client.clone());
    let source = name.to_owned();
    let observer = tokio::spawn(async move {
        let config = watcher::Config::default().labels("mimeo.dev/managed-by=mimeo");
        let mut stream = watcher(copies, config).applied_objects().boxed();
        while let Some(Ok(copy)) = stream.next().await {
            if copy.metadata.name.as_deref() != Some(source.as_str()) {
                continue;
            }
            let value = copy
                .data
                .as_ref()
                .and_then(|d| d.get("token"))
                .map(|b| String::from_utf8_lossy(&b.0).into_owned());
            if let (Some(ns), Some(value)) = (copy.metadata.namespace.clone(), value) {
                let _ = seen_tx.send((ns, value, Instant::now()));
            }
        }
    });
    let current = sources.get(name).await.unwrap();
    let initial = harness::secret_value(&current, "token").unwrap();
    wait_all(&mut seen_rx, &initial).await;

    let mut latencies = Vec::with_capacity(rotations);
    for i in 0..rotations {
        let value = format!("{prefix}-{i}");
        let started = Instant::now();
        sources
            .replace(name, &PostParams::default(), &secret(name, &value))
            .await
            .unwrap();
        let done = wait_all(&mut seen_rx, &value).await;
        latencies.push(done.duration_since(started));
    }
    observer.abort();
    latencies.sort();
    latencies
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize)
        .saturating_sub(1)
        .min(sorted.len() - 1)]
}

/// Waits until every target namespace has seen `value`; returns when the last one did.
async fn wait_all(
    seen: &mut tokio::sync::mpsc::UnboundedReceiver<(String, String, Instant)>,
    value: &str,
) -> Instant {
    let mut at: HashMap<String, Instant> = HashMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while at.len() < TARGETS {
        let (ns, v, when) = tokio::time::timeout_at(deadline, seen.recv())
            .await
            .expect("copies follow within 60 s")
            .unwrap();
        if v == value {
            at.insert(ns, when);
        }
    }
    at.into_values().max().unwrap()
}

async fn wait_for_copies(client: &Client, n: usize) {
    let copies: Api<Secret> = Api::all(client.clone());
    let params = kube::api::ListParams::default().labels("mimeo.dev/managed-by=mimeo");
    let deadline = Instant::now() + Duration::from_secs(300);
    while copies.list_metadata(&params).await.unwrap().items.len() < n {
        assert!(Instant::now() < deadline, "copies did not appear");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Open WATCH requests on the apiserver, from its own metrics.
async fn apiserver_watches(client: &Client) -> i64 {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(request).await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("apiserver_longrunning_requests{") && l.contains("verb=\"WATCH\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as i64
}

async fn namespace(client: &Client, name: &str, labels: &[(&str, &str)]) {
    let labels: HashMap<&str, &str> = labels.iter().copied().collect();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels,
        "annotations": {"mimeo.dev/accept-from": "*"}}}))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

fn secret(name: &str, value: &str) -> Secret {
    Secret {
        metadata: kube::core::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some([("token".to_owned(), ByteString(value.as_bytes().to_vec()))].into()),
        ..Default::default()
    }
}

async fn apply_rule(client: &Client, ns: &str, source: &str, selector: serde_json::Value) {
    let rule = json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule", "metadata": {"name": source, "namespace": ns},
        "spec": {"source": {"kind": "Secret", "name": source}, "targets": [{"namespaceSelector": selector}]}});
    let api: Api<mimeo::api::SyncRule> = Api::namespaced(client.clone(), ns);
    api.patch(source, &PatchParams::apply("bench").force(), &Patch::Apply(&rule))
        .await
        .unwrap();
}
