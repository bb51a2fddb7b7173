//! Scenario benchmark: clusters from an openMCP inventory. A hub control plane runs `mimeo run` as
//! its own process with a `ClusterInventory` of openMCP `Cluster`s and a `ClusterSyncRule` copying
//! a Secret into every cluster of it; the benchmark plays the cluster provider, granting each
//! `AccessRequest` as soon as it sees it (with the target's admin token: the credential is not
//! what is measured).
//!
//! 1. A new `Cluster` to its first copy: `--rounds` times (default 20), one `Cluster` is created,
//!    timed to its `AccessRequest` (mimeo's part), to the grant (the provider's), and to the copy
//!    in its cluster; then deleted, and its copy, RemoteCluster and request waited away.
//! 2. 100 `Cluster`s of which 10 have purpose `workload` (the inventory's selector), each of the
//!    10 a control plane of its own: `AccessRequest`s, `RemoteCluster`s, and mimeo's watches and
//!    connections to each selected cluster.
//!
//! `cargo bench --bench inventory` (add `-- --rounds N --entries 100 --selected 10`).
//! docs/benchmarks.md records a run.

#[path = "support/processes.rs"]
mod processes;
#[path = "support/reach.rs"]
mod reach;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use mimeo_envtest::ControlPlane;
use processes::{Mimeo, Process, apply};
use reach::{connections_by_port, port_of, watches};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn arg(name: &str, default: &str) -> String {
    std::env::args()
        .skip_while(|a| a != name)
        .nth(1)
        .unwrap_or_else(|| default.to_owned())
}

fn access_requests() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("clusters.openmcp.cloud", "v1alpha1", "AccessRequest"),
        "accessrequests",
    )
}

fn cluster(name: &str, purposes: &[&str]) -> serde_json::Value {
    json!({"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster",
           "metadata": {"name": name, "namespace": "platform"},
           "spec": {"profile": "bench", "tenancy": "Shared", "purposes": purposes}})
}

/// When the provider first saw, and granted, each request.
type Seen = Arc<Mutex<BTreeMap<String, (Instant, Instant)>>>;

/// Grants every unanswered request for a Cluster in `targets` with that cluster's admin kubeconfig.
fn provider(hub: Client, targets: Arc<Mutex<BTreeMap<String, String>>>, seen: Seen) {
    tokio::spawn(async move {
        let api = Api::<DynamicObject>::namespaced_with(hub.clone(), "platform", &access_requests());
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let Ok(list) = api.list(&ListParams::default()).await else {
                continue;
            };
            for request in list {
                let value = serde_json::to_value(&request).unwrap();
                if !value["status"]["phase"].is_null() {
                    continue;
                }
                let first = Instant::now();
                let cluster = value["spec"]["clusterRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let Some(kubeconfig) = targets.lock().unwrap().get(&cluster).cloned() else {
                    continue;
                };
                let secret = format!("{}-access", request.name_any());
                apply(
                    &hub,
                    json!({"apiVersion": "v1", "kind": "Secret",
                                   "metadata": {"name": secret, "namespace": "platform"},
                                   "stringData": {"kubeconfig": kubeconfig}}),
                )
                .await;
                let status = json!({"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "AccessRequest",
                                    "status": {"phase": "Granted", "observedGeneration": 1, "secretRef": {"name": secret}}});
                if api
                    .patch_status(
                        &request.name_any(),
                        &PatchParams::apply("provider").force(),
                        &Patch::Apply(&status),
                    )
                    .await
                    .is_ok()
                {
                    seen.lock().unwrap().insert(cluster, (first, Instant::now()));
                }
            }
        }
    });
}

async fn copy_exists(client: &Client) -> bool {
    Api::<Secret>::namespaced(client.clone(), "apps")
        .get_opt("creds")
        .await
        .ok()
        .flatten()
        .is_some()
}

/// Waits for `check`; on a timeout, fails with the end of mimeo's log (`MIMEO_BENCH_LOG=info`
/// makes it say more).
async fn wait(what: &str, log: &std::path::Path, mut check: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !check().await {
        if started.elapsed() > Duration::from_secs(120) {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            panic!(
                "timed out waiting for {what}; mimeo's log ends:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

#[tokio::main]
async fn main() {
    let rounds: usize = arg("--rounds", "20").parse().unwrap();
    let entries: usize = arg("--entries", "100").parse().unwrap();
    let selected: usize = arg("--selected", "10").parse().unwrap();
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/inventory/openmcp");
    let hub = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    hub.install_crds(&[
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crds/mimeo.yaml"),
        fixtures.join("clusters.openmcp.cloud_clusters.yaml"),
        fixtures.join("clusters.openmcp.cloud_accessrequests.yaml"),
    ])
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let client = hub.client().await.unwrap();
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "platform"}}),
    )
    .await;
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": "platform"},
                          "stringData": {"value": "v1"}}),
    )
    .await;
    let mut planes = Vec::new();
    for _ in 0..selected.max(1) {
        planes.push(ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}")));
    }
    let mut remotes = Vec::new();
    for plane in &planes {
        remotes.push(plane.client().await.unwrap());
    }
    let targets: Arc<Mutex<BTreeMap<String, String>>> = Default::default();
    let seen: Seen = Default::default();
    provider(client.clone(), targets.clone(), seen.clone());
    apply(
        &client,
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterInventory", "metadata": {"name": "bench"},
        "spec": {"namespaces": ["platform"], "openMCP": {"createNamespaces": true},
                 "selector": {"matchPurposes": [{"operator": "ContainsAny", "values": ["workload"]}]}}}),
    )
    .await;
    apply(&client, json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule", "metadata": {"name": "fleet"},
        "spec": {"source": {"kind": "Secret", "namespace": "platform", "name": "creds"},
                 "targets": [{"clusterSelector": {"matchLabels": {"mimeo.dev/inventory": "bench"}}, "namespace": "apps", "createNamespace": true}]}}))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, hub.kubeconfig_yaml()).unwrap();
    let log = dir.path().join("mimeo.log");
    let mut mimeo = Mimeo::start(&kubeconfig, dir.path());
    mimeo.wait_ready().await;
    let requests = Api::<DynamicObject>::namespaced_with(client.clone(), "platform", &access_requests());
    let remote_clusters = Api::<mimeo::api::RemoteCluster>::all(client.clone());

    // 1. One new Cluster at a time.
    let (mut to_request, mut to_grant, mut to_copy) = (Vec::new(), Vec::new(), Vec::new());
    let target = &remotes[0];
    for round in 0..rounds {
        let name = format!("new-{round}");
        targets.lock().unwrap().insert(
            name.clone(),
            planes[0].token_kubeconfig_yaml(planes[0].admin_token()),
        );
        let started = Instant::now();
        apply(&client, cluster(&name, &["workload"])).await;
        wait("the copy in the new cluster", &log, async || {
            copy_exists(target).await
        })
        .await;
        let copied = started.elapsed();
        let (asked, granted) = seen.lock().unwrap()[&name];
        to_request.push(asked - started);
        to_grant.push(granted - started);
        to_copy.push(copied);
        Api::<DynamicObject>::namespaced_with(
            client.clone(),
            "platform",
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("clusters.openmcp.cloud", "v1alpha1", "Cluster"),
                "clusters",
            ),
        )
        .delete(&name, &Default::default())
        .await
        .unwrap();
        wait("the copy removed", &log, async || !copy_exists(target).await).await;
        wait("the RemoteCluster and request gone", &log, async || {
            remote_clusters
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
                && requests
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .is_empty()
        })
        .await;
    }
    let grant_share: Vec<Duration> = to_grant.iter().zip(&to_request).map(|(g, r)| *g - *r).collect();
    println!(
        "A new Cluster to its first copy, {rounds} rounds (the provider grants as soon as it sees the request):"
    );
    println!(
        "  to mimeo's AccessRequest seen by the provider  p50 {:>9.1?}",
        median(to_request.clone())
    );
    println!(
        "  the provider's grant (its own part)           p50 {:>9.1?}",
        median(grant_share)
    );
    let mut sorted = to_copy.clone();
    sorted.sort();
    // Nearest rank: the value 99 % of the rounds came within.
    let p99 = sorted[(sorted.len() * 99).div_ceil(100).max(1) - 1];
    println!(
        "  to the copy in the new cluster                p50 {:>9.1?}  p99 {:.1?}  max {:.1?}",
        median(to_copy.clone()),
        p99,
        sorted.last().unwrap()
    );
    let after_grant: Vec<Duration> = to_copy.iter().zip(&to_grant).map(|(c, g)| *c - *g).collect();
    println!(
        "  from the grant to the copy                    p50 {:>9.1?}",
        median(after_grant)
    );

    // 2. Many entries, few selected.
    let watches_before: Vec<f64> = join_all(remotes.iter().map(watches)).await;
    for i in 0..entries {
        let name = format!("c{i:03}");
        let plane = planes.get(i).filter(|_| i < selected);
        let workload = plane.is_some();
        if let Some(plane) = plane {
            targets
                .lock()
                .unwrap()
                .insert(name.clone(), plane.token_kubeconfig_yaml(plane.admin_token()));
        }
        apply(
            &client,
            cluster(&name, if workload { &["workload"] } else { &["mcp"] }),
        )
        .await;
    }
    let started = Instant::now();
    wait("a copy in every selected cluster", &log, async || {
        join_all(remotes.iter().map(copy_exists))
            .await
            .into_iter()
            .all(|b| b)
    })
    .await;
    let all_copied = started.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let request_count = requests.list(&ListParams::default()).await.unwrap().items.len();
    let rc_count = remote_clusters
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    let watches_after: Vec<f64> = join_all(remotes.iter().map(watches)).await;
    let by_port = connections_by_port(mimeo.pid());
    let connections: usize = planes
        .iter()
        .map(|p| by_port.get(&port_of(p.server())).copied().unwrap_or(0))
        .sum();
    let held: f64 = watches_after
        .iter()
        .zip(&watches_before)
        .map(|(a, b)| a - b)
        .sum();
    println!("{entries} Clusters, {selected} with purpose workload (each its own control plane):");
    println!(
        "  AccessRequests {request_count}, RemoteClusters {rc_count}, connections to the selected clusters {connections}, watches on them {held:.0}"
    );
    println!(
        "  all {selected} copies in place {all_copied:.1?} after the last Cluster was created; mimeo RSS {:.1} MiB",
        mimeo.rss_mib()
    );
    mimeo.stop();
}
