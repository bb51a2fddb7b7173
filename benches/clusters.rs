//! Scenario benchmark: what each registered `RemoteCluster` costs. One hub control plane runs
//! `mimeo run` as its own process; 1, 5 and 10 other control planes are registered in turn, each
//! receiving the copy of one `ClusterSyncRule` (a 1 KiB Secret into namespace `apps`). For each
//! count, a fresh controller: its resident memory once the copies are in place, the watches it
//! holds on each cluster (from that apiserver's own metrics), its TCP connections to each, and how
//! long a rotation of the source takes to reach the farthest copy.
//!
//! `cargo bench --bench clusters` (add `-- --rotations N --counts 1,5,10`). docs/benchmarks.md
//! records a run and what it means for a fleet.

#[path = "support/processes.rs"]
mod processes;
#[path = "support/reach.rs"]
mod reach;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;
use mimeo_envtest::ControlPlane;
use processes::{Mimeo, Process, apply};
use reach::{connections_by_port, port_of, watches};
use serde_json::json;

use std::time::{Duration, Instant};

fn arg(name: &str, default: &str) -> String {
    std::env::args()
        .skip_while(|a| a != name)
        .nth(1)
        .unwrap_or_else(|| default.to_owned())
}

fn secret(value: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": "creds", "namespace": "platform"},
           "type": "Opaque", "stringData": {"value": value, "pad": "x".repeat(1024)}})
}

/// The `value` of the copy in `apps` of a cluster, if there is one.
async fn copy_value(client: &Client) -> Option<String> {
    let copy = Api::<Secret>::namespaced(client.clone(), "apps")
        .get_opt("creds")
        .await
        .ok()??;
    String::from_utf8(copy.data?.get("value")?.0.clone()).ok()
}

/// Waits until every cluster's copy holds `value`; the time it took.
async fn all_hold(clients: &[Client], value: &str) -> Duration {
    let started = Instant::now();
    loop {
        let values = join_all(clients.iter().map(copy_value)).await;
        if values.iter().all(|v| v.as_deref() == Some(value)) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "copies still not at {value}: {values:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

#[tokio::main]
async fn main() {
    let rotations: usize = arg("--rotations", "10").parse().unwrap();
    let counts: Vec<usize> = arg("--counts", "1,5,10")
        .split(',')
        .map(|n| n.parse().unwrap())
        .collect();
    let most = counts.iter().copied().max().unwrap_or(1);

    let hub = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    hub.install_crds(&[std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crds/mimeo.yaml")])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = hub.client().await.unwrap();
    for ns in ["platform", "mimeo-system"] {
        apply(
            &client,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await;
    }
    apply(&client, secret("v0")).await;

    let mut planes = Vec::new();
    for _ in 0..most {
        planes.push(ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}")));
    }
    let mut remotes = Vec::new();
    for plane in &planes {
        let remote = plane.client().await.unwrap();
        apply(
            &remote,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}),
        )
        .await;
        remotes.push(remote);
    }
    apply(
        &client,
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule", "metadata": {"name": "fleet"},
               "spec": {"source": {"kind": "Secret", "namespace": "platform", "name": "creds"},
                        "targets": [{"clusterSelector": {"matchLabels": {"bench": "clusters"}}, "namespace": "apps"}]}}),
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, hub.kubeconfig_yaml()).unwrap();

    // Without any RemoteCluster: the controller's own baseline.
    let mut mimeo = Mimeo::start(&kubeconfig, dir.path());
    mimeo.wait_ready().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let baseline = mimeo.rss_mib();
    mimeo.stop();

    println!("RemoteClusters, each receiving the copy of one ClusterSyncRule; {rotations} rotations each:");
    println!(
        "{:>8} {:>10} {:>14} {:>18} {:>20} {:>16} {:>16}",
        "clusters",
        "RSS MiB",
        "MiB/cluster",
        "watches/cluster",
        "connections/cluster",
        "rotation p50",
        "rotation max"
    );
    println!("{:>8} {:>10.1}", 0, baseline);
    let mut value = 0;
    for &n in &counts {
        for (i, plane) in planes.iter().enumerate().take(n) {
            let name = format!("c{i}");
            let kubeconfig = plane.token_kubeconfig_yaml(plane.admin_token());
            apply(
                &client,
                json!({"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": format!("{name}-kubeconfig"), "namespace": "mimeo-system"},
                       "stringData": {"value": kubeconfig}}),
            )
            .await;
            apply(
                &client,
                json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster",
                       "metadata": {"name": name, "labels": {"bench": "clusters"}},
                       "spec": {"kubeconfigSecretRef": {"namespace": "mimeo-system", "name": format!("{name}-kubeconfig")}}}),
            )
            .await;
        }
        let watches_before: Vec<f64> = join_all(remotes.iter().take(n).map(watches)).await;
        let mut mimeo = Mimeo::start(&kubeconfig, dir.path());
        mimeo.wait_ready().await;
        value += 1;
        let current = format!("v{value}");
        apply(&client, secret(&current)).await;
        all_hold(&remotes[..n], &current).await;
        tokio::time::sleep(Duration::from_secs(3)).await;

        let mut times = Vec::with_capacity(rotations);
        for _ in 0..rotations {
            value += 1;
            let current = format!("v{value}");
            let started = Instant::now();
            apply(&client, secret(&current)).await;
            all_hold(&remotes[..n], &current).await;
            times.push(started.elapsed());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rss = mimeo.rss_mib();
        let watches_after: Vec<f64> = join_all(remotes.iter().take(n).map(watches)).await;
        let held: f64 = watches_after
            .iter()
            .zip(&watches_before)
            .map(|(after, before)| after - before)
            .sum::<f64>()
            / n as f64;
        let by_port = connections_by_port(mimeo.pid());
        let connections: usize = planes
            .iter()
            .take(n)
            .map(|p| by_port.get(&port_of(p.server())).copied().unwrap_or(0))
            .sum();
        let max = times.iter().max().copied().unwrap_or_default();
        println!(
            "{:>8} {:>10.1} {:>14.2} {:>18.1} {:>20.1} {:>16.1?} {:>16.1?}",
            n,
            rss,
            (rss - baseline) / n as f64,
            held,
            connections as f64 / n as f64,
            median(times),
            max
        );
        mimeo.stop();
    }
}
