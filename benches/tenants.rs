//! Scenario benchmark: openMCP's tenants. A platform control plane runs `mimeo run` (allowed to
//! follow `Crossplane`s) with the rules of `examples/service-provider-crossplane.yaml`: an openMCP
//! inventory over the MCP namespaces by their labels, and a service provider's two copies per
//! order. An onboarding control plane holds the orders; one more control plane stands for every
//! tenant's MCP cluster (the benchmark plays openMCP's cluster provider and grants each
//! `AccessRequest` with its admin kubeconfig: the credential is not what is measured).
//!
//! 1. `--namespaces` MCP namespaces (default 1,000), each with one openMCP `Cluster` of purpose
//!    `mcp`; `--selected` of them (default 100) labelled as openMCP labels an MCP's namespace, the
//!    rest not. Measured: the `RemoteCluster`s made, mimeo's watches on the platform apiserver
//!    before the namespaces and after, the requests mimeo made meanwhile (by verb and resource),
//!    how long until every selected MCP had its `RemoteCluster`, and mimeo's memory.
//! 2. A tenant's order to its first copy on its MCP, `--rounds` times (default 20), each round a
//!    tenant not seen before: the order created on the onboarding cluster, timed to the pull secret
//!    in `crossplane-system` on the MCP cluster (access asked for and granted on the way) and to the
//!    chart credentials in its `mcp--` namespace; then the order deleted and both copies waited
//!    away.
//!
//! `cargo bench --bench tenants` (add `-- --namespaces 1000 --selected 100 --rounds 20`).
//! docs/benchmarks.md records a run.

#[path = "support/processes.rs"]
mod processes;
#[path = "support/reach.rs"]
mod reach;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use mimeo_envtest::ControlPlane;
use processes::{Mimeo, Process, apiserver_requests, apply, requests_since};
use reach::{connections_by_port, port_of, watches};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn arg(name: &str, default: &str) -> String {
    std::env::args()
        .skip_while(|a| a != name)
        .nth(1)
        .unwrap_or_else(|| default.to_owned())
}

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1alpha1", kind), plural)
}

/// MCP `i`: its namespace on the platform cluster, its name and its namespace on the onboarding
/// cluster.
fn mcp(i: usize) -> (String, String, String) {
    (
        format!("mcp--{i:04}"),
        format!("tenant-{i:04}"),
        format!("project-{i:04}"),
    )
}

/// Grants every unanswered `AccessRequest`, in any namespace, with `kubeconfig`.
fn provider(platform: Client, kubeconfig: String) {
    tokio::spawn(async move {
        let all = Api::<DynamicObject>::all_with(
            platform.clone(),
            &resource("clusters.openmcp.cloud", "AccessRequest", "accessrequests"),
        );
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let Ok(list) = all.list(&ListParams::default()).await else {
                continue;
            };
            for request in list {
                let value = serde_json::to_value(&request).unwrap();
                if !value["status"]["phase"].is_null() {
                    continue;
                }
                let namespace = request.namespace().unwrap_or_default();
                let secret = format!("{}-access", request.name_any());
                apply(
                    &platform,
                    json!({"apiVersion": "v1", "kind": "Secret",
                           "metadata": {"name": secret, "namespace": namespace},
                           "stringData": {"kubeconfig": kubeconfig}}),
                )
                .await;
                let status = json!({"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "AccessRequest",
                                    "status": {"phase": "Granted", "observedGeneration": 1, "secretRef": {"name": secret}}});
                let _ = Api::<DynamicObject>::namespaced_with(
                    platform.clone(),
                    &namespace,
                    &resource("clusters.openmcp.cloud", "AccessRequest", "accessrequests"),
                )
                .patch_status(
                    &request.name_any(),
                    &PatchParams::apply("provider").force(),
                    &Patch::Apply(&status),
                )
                .await;
            }
        }
    });
}

async fn exists(client: &Client, namespace: &str, name: &str) -> bool {
    Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .is_some()
}

/// Waits for `check`; on a timeout, fails with the end of mimeo's log.
async fn wait(what: &str, log: &std::path::Path, mut check: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !check().await {
        if started.elapsed() > Duration::from_secs(180) {
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

fn percentile(mut times: Vec<Duration>, p: usize) -> Duration {
    times.sort();
    times[(times.len() * p).div_ceil(100).max(1) - 1]
}

#[tokio::main]
async fn main() {
    let namespaces: usize = arg("--namespaces", "1000").parse().unwrap();
    let selected: usize = arg("--selected", "100").parse().unwrap();
    let rounds: usize = arg("--rounds", "20").parse::<usize>().unwrap().min(selected);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let fixtures = root.join("../shared/fixtures/inventory/openmcp");
    let (platform, onboarding, mcp_plane) = tokio::join!(
        ControlPlane::start(),
        ControlPlane::start(),
        ControlPlane::start()
    );
    let (platform, onboarding, mcp_plane) = (
        platform.unwrap(),
        onboarding.unwrap(),
        Arc::new(mcp_plane.unwrap()),
    );
    platform
        .install_crds(&[
            root.join("crds/mimeo.yaml"),
            fixtures.join("clusters.openmcp.cloud_clusters.yaml"),
            fixtures.join("clusters.openmcp.cloud_accessrequests.yaml"),
        ])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = platform.client().await.unwrap();
    let orders_client = onboarding.client().await.unwrap();
    let mcp_client = mcp_plane.client().await.unwrap();
    apply(
        &orders_client,
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "crossplanes.crossplane.services.openmcp.cloud"},
               "spec": {"group": "crossplane.services.openmcp.cloud", "scope": "Namespaced",
                        "names": {"kind": "Crossplane", "plural": "crossplanes", "singular": "crossplane"},
                        "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                                      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}),
    )
    .await;
    for object in [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mimeo-system"}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "onboarding", "namespace": "mimeo-system"},
               "stringData": {"value": onboarding.token_kubeconfig_yaml(onboarding.admin_token())}}),
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster", "metadata": {"name": "onboarding"},
               "spec": {"kubeconfigSecretRef": {"namespace": "mimeo-system", "name": "onboarding"}}}),
    ] {
        apply(&client, object).await;
    }
    provider(
        client.clone(),
        mcp_plane.token_kubeconfig_yaml(mcp_plane.admin_token()),
    );
    let example = std::fs::read_to_string(root.join("examples/service-provider-crossplane.yaml")).unwrap();
    for document in serde_yaml_ng::Deserializer::from_str(&example) {
        let object: serde_json::Value = serde::Deserialize::deserialize(document).unwrap();
        if !object.is_null() {
            apply(&client, object).await;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, platform.kubeconfig_yaml()).unwrap();
    let log = dir.path().join("mimeo.log");
    let mut mimeo = Mimeo::start_with(
        std::path::Path::new(
            &std::env::var("MIMEO_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mimeo").into()),
        ),
        &kubeconfig,
        dir.path(),
        &["--next-to-kinds=Crossplane.crossplane.services.openmcp.cloud".to_owned()],
        &[],
    );
    mimeo.wait_ready().await;
    let remote_clusters = Api::<mimeo::api::RemoteCluster>::all(client.clone());
    let inventory_count = async || {
        remote_clusters
            .list(&ListParams::default().labels("mimeo.dev/inventory=mcps"))
            .await
            .unwrap()
            .items
            .len()
    };
    tokio::time::sleep(Duration::from_secs(3)).await;

    // 1. The MCP namespaces, each with its Cluster.
    let counted = ["namespaces", "clusters", "remoteclusters", "accessrequests"];
    let watches_before = watches(&client).await;
    let requests_before = apiserver_requests(&client, &counted).await;
    let created = Instant::now();
    for i in 0..namespaces {
        let (namespace, name, project) = mcp(i);
        let labels = match i < selected {
            true => json!({"openmcp.cloud/managed-by": "ManagedControlPlane",
                           "core.openmcp.cloud/mcp-name": name, "core.openmcp.cloud/mcp-namespace": project}),
            false => json!({"team": "other"}),
        };
        apply(&client, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}})).await;
        apply(
            &client,
            json!({"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster",
                   "metadata": {"name": name, "namespace": namespace},
                   "spec": {"profile": "bench", "tenancy": "Exclusive", "purposes": ["mcp"]}}),
        )
        .await;
    }
    let made = created.elapsed();
    wait("a RemoteCluster per selected MCP", &log, async || {
        inventory_count().await == selected
    })
    .await;
    let all_there = created.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let requests = requests_since(&requests_before, &apiserver_requests(&client, &counted).await);
    let watches_after = watches(&client).await;
    println!(
        "{namespaces} MCP namespaces with a Cluster each, {selected} labelled as openMCP labels an MCP's (made in {made:.1?}):"
    );
    println!(
        "  RemoteClusters {}, all there {all_there:.1?} after the first namespace; watches on the platform apiserver {watches_before:.0} before, {watches_after:.0} after",
        inventory_count().await
    );
    println!("  requests meanwhile (the benchmark's own writes included):");
    for ((verb, resource), count) in requests.iter().filter(|(_, c)| **c > 0.0) {
        println!("    {verb:<7} {resource:<16} {count:.0}");
    }
    println!("  mimeo RSS {:.1} MiB", mimeo.rss_mib());

    // 2. Orders, one tenant at a time.
    let (mut to_pull_secret, mut to_both) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let (namespace, name, project) = mcp(round);
        apply(
            &orders_client,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": project}}),
        )
        .await;
        let ordered = Instant::now();
        apply(
            &orders_client,
            json!({"apiVersion": "crossplane.services.openmcp.cloud/v1alpha1", "kind": "Crossplane",
                   "metadata": {"name": name, "namespace": project}, "spec": {"version": "1.20.0"}}),
        )
        .await;
        wait("the pull secret on the MCP", &log, async || {
            exists(&mcp_client, "crossplane-system", "crossplane-image-pull").await
        })
        .await;
        to_pull_secret.push(ordered.elapsed());
        wait("the chart credentials in the MCP namespace", &log, async || {
            exists(&client, &namespace, "sp-crossplane-crossplane-chart-registry").await
        })
        .await;
        to_both.push(ordered.elapsed());
        Api::<DynamicObject>::namespaced_with(
            orders_client.clone(),
            &project,
            &resource("crossplane.services.openmcp.cloud", "Crossplane", "crossplanes"),
        )
        .delete(&name, &Default::default())
        .await
        .unwrap();
        wait("both copies removed", &log, async || {
            !exists(&mcp_client, "crossplane-system", "crossplane-image-pull").await
                && !exists(&client, &namespace, "sp-crossplane-crossplane-chart-registry").await
        })
        .await;
    }
    println!(
        "A tenant's order to its copies, {rounds} rounds (a new tenant each: its MCP's access asked for and granted on the way):"
    );
    println!(
        "  to the pull secret on its MCP cluster        p50 {:>9.1?}  p99 {:.1?}",
        percentile(to_pull_secret.clone(), 50),
        percentile(to_pull_secret, 99)
    );
    println!(
        "  to both copies                               p50 {:>9.1?}  p99 {:.1?}",
        percentile(to_both.clone(), 50),
        percentile(to_both, 99)
    );
    let by_port = connections_by_port(mimeo.pid());
    let to = |plane: &ControlPlane| by_port.get(&port_of(plane.server())).copied().unwrap_or(0);
    println!(
        "  mimeo RSS {:.1} MiB; its connections to the onboarding cluster {}, to the MCP cluster {} ({rounds} RemoteClusters there in turn)",
        mimeo.rss_mib(),
        to(&onboarding),
        to(&mcp_plane)
    );
    mimeo.stop();
}
