//! Clusters from a platform's inventory, against real control planes: the platform cluster (the
//! harness, where mimeo runs) lists the clusters; each listed cluster is a control plane of its
//! own. The tests play the cluster manager: for openMCP the cluster provider that answers
//! `AccessRequest`s with a real ServiceAccount and Role in the target cluster, for Cluster API
//! the writer of `<name>-kubeconfig`, for ClusterProfiles a provider plugin of the test's own.

use crate::harness;

use harness::{Harness, eventually, eventually_within, service_account_kubeconfig, stays};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Client, ResourceExt};
use mimeo::api::{ClusterInventory, RemoteCluster};
use mimeo_envtest::ControlPlane;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const FIXTURES: &str = "../shared/fixtures/inventory";

fn fixture(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(FIXTURES)
        .join(path)
}

use harness::kubectl_apply;
use harness::openmcp_provider::{ProviderRules, access_requests, grant_in, put_kubeconfig, run_provider};

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

async fn value_in(client: &Client, ns: &str, name: &str) -> Option<String> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()??;
    harness::secret_value(&secret, "value")
}

async fn remote_cluster(h: &Harness, name: &str) -> Option<RemoteCluster> {
    Api::<RemoteCluster>::all(h.client.clone())
        .get_opt(name)
        .await
        .unwrap()
}

async fn inventory_problem(h: &Harness, inventory: &str, entry: &str) -> Option<(String, String)> {
    let inv = Api::<ClusterInventory>::all(h.client.clone())
        .get_opt(inventory)
        .await
        .ok()??;
    let p = inv.status?.problems.into_iter().find(|p| p.name == entry)?;
    Some((p.reason, p.message))
}

fn copy_rule(name: &str, selector: Value, target_namespace: &str) -> Value {
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule", "metadata": {"name": name},
           "spec": {"source": {"kind": "Secret", "namespace": "platform", "name": "pull"},
                    "targets": [{"clusterSelector": selector, "namespace": target_namespace, "createNamespace": true}]}})
}

/// Lets the tenant of `tenant` (see `harness::tenant_client`) do anything with these resources of
/// `group` in its own namespace: what a platform gives a team that may make its own entries.
async fn let_tenant_write(h: &Harness, group: &str, resources: &[&str]) {
    h.apply(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": "entries", "namespace": "tenant"},
                   "rules": [{"apiGroups": [group], "resources": resources, "verbs": ["*"]}]}),
    )
    .await;
    h.apply(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "entries", "namespace": "tenant"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "entries"},
                   "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": "tenant"}]}),
    )
    .await;
}

fn openmcp_cluster(ns: &str, name: &str, purposes: &[&str]) -> Value {
    json!({"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster",
           "metadata": {"name": name, "namespace": ns, "labels": {"landscape": "eu"}},
           "spec": {"profile": "test", "tenancy": "Shared", "purposes": purposes}})
}

async fn put_source(h: &Harness, value: &str) {
    h.put_secret("platform", "pull", &[("value", value)]).await;
}

/// A rule starting to use an inventory's cluster asks for its access at once, not at the
/// inventory's next look 10 s later: the inventory was woken by a watch of its own and read the
/// fleet's cache of RemoteClusters, which could still say no rule used the cluster (about one new
/// Cluster in seven waited 10 s). 20 Clusters in a row, each asked for within 2 s of its
/// RemoteCluster saying a rule uses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_a_rule_starts_using_is_asked_for_at_once() {
    let h = Harness::start().await;
    h.plane
        .install_crds(&[
            fixture("openmcp/clusters.openmcp.cloud_clusters.yaml"),
            fixture("openmcp/clusters.openmcp.cloud_accessrequests.yaml"),
        ])
        .await
        .unwrap();
    h.namespace("platform", &[], &[]).await;
    put_source(&h, "one").await;
    kubectl_apply(
        &h.plane,
        &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterInventory",
        "metadata": {"name": "fleet"},
        "spec": {"namespaces": ["platform"], "openMCP": {},
                 "selector": {"matchPurposes": [{"operator": "ContainsAny", "values": ["workload"]}]}}}),
    );
    h.apply(copy_rule(
        "pull",
        json!({"matchLabels": {"mimeo.dev/inventory": "fleet"}}),
        "apps",
    ))
    .await;
    let requests = Api::<DynamicObject>::namespaced_with(h.client.clone(), "platform", &access_requests());
    let rules_using = |name: String| {
        let h = &h;
        async move {
            remote_cluster(h, &name)
                .await
                .and_then(|rc| rc.status?.rules)
                .unwrap_or(0)
        }
    };
    let mut asked = Vec::new();
    for round in 0..20 {
        let name = format!("r{round}");
        let rc = format!("fleet-platform-{name}");
        kubectl_apply(&h.plane, &openmcp_cluster("platform", &name, &["workload"]));
        eventually(&format!("a rule uses {rc}"), || async {
            (rules_using(rc.clone()).await == 1).then_some(())
        })
        .await;
        let used = Instant::now();
        harness::eventually_within(
            &format!("the AccessRequest of {name}, within 2 s of a rule using it"),
            Duration::from_secs(2),
            || async {
                requests
                    .get_opt(&format!("mimeo-{rc}"))
                    .await
                    .unwrap()
                    .map(|_| ())
            },
        )
        .await;
        asked.push(used.elapsed());
    }
    asked.sort();
    println!(
        "a rule using a cluster to its AccessRequest: p50 {:?}, max {:?}",
        asked[10], asked[19]
    );
}

/// openMCP end to end: only the selected Clusters of the named namespace become RemoteClusters;
/// an AccessRequest is made only when a rule uses one, for exactly what `mimeo remote rbac`
/// computes; copies arrive, rotate, survive a re-issued credential; a denied or never granted
/// request is a condition; losing the purpose removes the copy, the RemoteCluster and the
/// request; a tenant's Cluster in its own namespace gains nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn openmcp_clusters_get_copies_through_access_requests() {
    let h = Harness::start().await;
    h.plane
        .install_crds(&[
            fixture("openmcp/clusters.openmcp.cloud_clusters.yaml"),
            fixture("openmcp/clusters.openmcp.cloud_accessrequests.yaml"),
        ])
        .await
        .unwrap();
    let (b, c) = tokio::join!(ControlPlane::start(), ControlPlane::start());
    let (b, c) = (Arc::new(b.unwrap()), Arc::new(c.unwrap()));
    let (b_client, c_client) = (b.client().await.unwrap(), c.client().await.unwrap());
    let planes = Arc::new(BTreeMap::from([
        ("w1".to_owned(), (b.clone(), b_client.clone())),
        ("w2".to_owned(), (c.clone(), c_client.clone())),
        ("t1".to_owned(), (c.clone(), c_client.clone())),
    ]));
    let rules = Arc::new(Mutex::new(ProviderRules::default()));
    rules.lock().unwrap().ignore.insert("w3".into());
    run_provider(h.client.clone(), planes, rules.clone());

    for ns in ["platform", "tenant"] {
        kubectl_apply(
            &h.plane,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        );
    }
    put_source(&h, "one").await;
    kubectl_apply(&h.plane, &openmcp_cluster("platform", "w1", &["workload"]));
    kubectl_apply(&h.plane, &openmcp_cluster("platform", "m1", &["mcp"]));
    // A tenant who may create Clusters in its own namespace.
    let tenant = harness::tenant_client(&h, "tenant").await;
    let_tenant_write(&h, "clusters.openmcp.cloud", &["clusters", "accessrequests"]).await;
    harness::apply_as(&tenant, openmcp_cluster("tenant", "t1", &["workload"]))
        .await
        .unwrap();

    kubectl_apply(
        &h.plane,
        &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterInventory",
        "metadata": {"name": "fleet"},
        "spec": {"namespaces": ["platform"], "openMCP": {"grantTimeoutSeconds": 3, "createNamespaces": true},
                 "selector": {"matchPurposes": [{"operator": "ContainsAny", "values": ["workload"]}]}}}),
    );
    let rc = eventually("the RemoteCluster of w1", || {
        remote_cluster(&h, "fleet-platform-w1")
    })
    .await;
    let labels = rc.labels();
    assert_eq!(
        labels.get("purpose.mimeo.dev/workload").map(String::as_str),
        Some("true")
    );
    assert_eq!(labels.get("landscape").map(String::as_str), Some("eu"));
    assert_eq!(
        labels.get("mimeo.dev/inventory").map(String::as_str),
        Some("fleet")
    );
    let origin = rc.spec.origin.clone().unwrap();
    assert_eq!(
        (origin.kind.as_str(), origin.entry.as_str()),
        ("Cluster.clusters.openmcp.cloud", "platform/w1")
    );
    assert!(
        rc.spec.kubeconfig_secret_ref.is_none(),
        "no access before a rule uses it"
    );
    let requests = Api::<DynamicObject>::all_with(h.client.clone(), &access_requests());
    stays(
        "no AccessRequest while no rule uses the cluster",
        Duration::from_secs(2),
        || async {
            requests
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
        },
    )
    .await;
    assert!(
        remote_cluster(&h, "fleet-platform-m1").await.is_none(),
        "m1 has no workload purpose"
    );
    assert!(
        remote_cluster(&h, "fleet-tenant-t1").await.is_none(),
        "the tenant's namespace is not named"
    );

    // A rule uses the inventory's clusters: access is asked for, granted, and the copy arrives.
    let started = Instant::now();
    h.apply(copy_rule(
        "pull",
        json!({"matchLabels": {"mimeo.dev/inventory": "fleet"}}),
        "apps",
    ))
    .await;
    eventually("the copy in w1", || async {
        (value_in(&b_client, "apps", "pull").await.as_deref() == Some("one")).then_some(())
    })
    .await;
    println!(
        "rule applied to first copy in a granted openMCP cluster: {:?}",
        started.elapsed()
    );
    let asked = rules
        .lock()
        .unwrap()
        .asked
        .get("mimeo-fleet-platform-w1")
        .cloned()
        .unwrap();
    let expected = mimeo::clusters::remote_rbac::objects(&mimeo::clusters::remote_rbac::RbacOptions {
        kinds: mimeo::sync::kinds::default_allowed_kinds()
            .iter()
            .map(|k| {
                if k.group.is_empty() {
                    k.kind.clone()
                } else {
                    format!("{}.{}", k.kind, k.group)
                }
            })
            .filter(|k| mimeo::clusters::remote_rbac::resolve_kind(k).is_ok())
            .collect(),
        create_namespaces: true,
        ..Default::default()
    })
    .unwrap();
    let cluster_role = expected.iter().find(|o| o["kind"] == "ClusterRole").unwrap();
    assert_eq!(
        asked, cluster_role["rules"],
        "asked for exactly what `mimeo remote rbac` grants"
    );
    assert_eq!(
        requests.list(&ListParams::default()).await.unwrap().items.len(),
        1,
        "one request: w1's"
    );

    // Rotation through the granted access.
    put_source(&h, "two").await;
    eventually("the copy rotated", || async {
        (value_in(&b_client, "apps", "pull").await.as_deref() == Some("two")).then_some(())
    })
    .await;

    // The provider re-issues the credential under a new Secret and revokes the old one.
    let old_sa = "mimeo-fleet-platform-w1";
    let kubeconfig = grant_in(&b, &b_client, "reissued", &asked).await;
    put_kubeconfig(
        &h.client,
        "platform",
        "reissued-access",
        "kubeconfig",
        &kubeconfig,
    )
    .await;
    let platform_requests =
        Api::<DynamicObject>::namespaced_with(h.client.clone(), "platform", &access_requests());
    platform_requests
        .patch_status(old_sa, &PatchParams::apply("provider").force(), &Patch::Apply(&json!({
            "apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "AccessRequest",
            "status": {"phase": "Granted", "observedGeneration": 1, "secretRef": {"name": "reissued-access"}}})))
        .await
        .unwrap();
    Api::<ServiceAccount>::namespaced(b_client.clone(), "access")
        .delete(old_sa, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the RemoteCluster follows the re-issued Secret", || async {
        let rc = remote_cluster(&h, "fleet-platform-w1").await?;
        (rc.spec.kubeconfig_secret_ref?.name == "reissued-access").then_some(())
    })
    .await;
    put_source(&h, "three").await;
    eventually("the copy rotated with the new credential", || async {
        (value_in(&b_client, "apps", "pull").await.as_deref() == Some("three")).then_some(())
    })
    .await;

    // Denied, and never granted: conditions, not hangs.
    rules.lock().unwrap().deny.insert("w2".into());
    kubectl_apply(&h.plane, &openmcp_cluster("platform", "w2", &["workload"]));
    kubectl_apply(
        &h.plane,
        &openmcp_cluster("platform", "w3", &["workload", "extra"]),
    );
    let (reason, message) = eventually("w2 denied", || async {
        inventory_problem(&h, "fleet", "w2")
            .await
            .filter(|(r, _)| r == "AccessDenied")
    })
    .await;
    assert!(
        message.contains("does not grant access to secrets"),
        "{reason}: {message}"
    );
    let (_, message) = eventually("w3 never granted", || async {
        inventory_problem(&h, "fleet", "w3")
            .await
            .filter(|(r, _)| r == "AccessNotGranted")
    })
    .await;
    assert!(message.contains("not granted after"), "{message}");
    let rc = remote_cluster(&h, "fleet-platform-w2").await.unwrap();
    let ready = rc
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "NoAccessYet"),
        "{}",
        ready.message
    );
    assert_eq!(
        value_in(&b_client, "apps", "pull").await.as_deref(),
        Some("three"),
        "w1 goes on"
    );

    // w1 loses its purpose: the copy goes (per deletion), then the RemoteCluster and the request.
    kubectl_apply(&h.plane, &openmcp_cluster("platform", "w1", &["mcp"]));
    eventually("the copy in w1 removed", || async {
        value_in(&b_client, "apps", "pull").await.is_none().then_some(())
    })
    .await;
    eventually("w1's RemoteCluster removed", || async {
        remote_cluster(&h, "fleet-platform-w1")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    eventually("w1's AccessRequest deleted", || async {
        platform_requests
            .get_opt("mimeo-fleet-platform-w1")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;

    // The tenant's own Cluster never got a request or a RemoteCluster.
    let tenant_requests =
        Api::<DynamicObject>::namespaced_with(h.client.clone(), "tenant", &access_requests());
    assert!(
        tenant_requests
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(!rules.lock().unwrap().answered.iter().any(|r| r.contains("t1")));

    // Deleting the rule: no rule needs the clusters, so the remaining requests go too.
    Api::<mimeo::api::ClusterSyncRule>::all(h.client.clone())
        .delete("pull", &DeleteParams::default())
        .await
        .unwrap();
    eventually("no AccessRequest once no rule uses the clusters", || async {
        requests
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
            .then_some(())
    })
    .await;
}

/// The rules a cluster admin's kubeconfig would carry, for tests where the credential is not what
/// is being tested.
fn everything() -> Value {
    json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])
}

fn capi_cluster(version: &str, ns: &str, name: &str, labels: Value) -> Value {
    json!({"apiVersion": format!("cluster.x-k8s.io/{version}"), "kind": "Cluster",
           "metadata": {"name": name, "namespace": ns, "labels": labels},
           "spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": 6443}}})
}

async fn set_status(client: &Client, resource: &ApiResource, ns: &str, name: &str, status: Value) {
    let patch = json!({"apiVersion": resource.api_version, "kind": resource.kind, "status": status});
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, resource)
        .patch_status(
            name,
            &PatchParams::apply("cluster-manager").force(),
            &Patch::Apply(&patch),
        )
        .await
        .unwrap();
}

/// Cluster API (v1beta2): a Cluster becomes a RemoteCluster at once but is used only once its
/// control plane is available, through the `<name>-kubeconfig` Cluster API writes; a rotated
/// kubeconfig is followed; losing the label removes the copy and the RemoteCluster; a tenant's
/// Cluster in its own namespace is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_api_clusters_are_used_once_their_control_plane_is_available() {
    // The controller holds only what the chart grants with inventories.clusterAPI.
    let values = ["--set", "inventories.clusterAPI=true"];
    let h = Harness::start_with_chart_values(Default::default(), &values).await;
    h.plane
        .install_crds(&[fixture("cluster-api/cluster.x-k8s.io_clusters.yaml")])
        .await
        .unwrap();
    let b = ControlPlane::start().await.unwrap();
    let b_client = b.client().await.unwrap();
    for ns in ["platform", "capi", "tenant"] {
        kubectl_apply(
            &h.plane,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        );
    }
    put_source(&h, "one").await;
    kubectl_apply(
        &h.plane,
        &capi_cluster("v1beta2", "capi", "c1", json!({"env": "prod"})),
    );
    kubectl_apply(
        &h.plane,
        &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterInventory",
        "metadata": {"name": "capi"},
        "spec": {"namespaces": ["capi"], "clusterAPI": {}, "selector": {"matchLabels": {"env": "prod"}},
                 "remoteClusters": {"labels": {"provider": "capi"}}}}),
    );
    h.apply(copy_rule("pull", json!({"matchLabels": {"env": "prod"}}), "apps"))
        .await;
    let (reason, _) = eventually("c1 waits for its control plane", || async {
        inventory_problem(&h, "capi", "c1")
            .await
            .filter(|(r, _)| r == "ControlPlaneNotAvailable")
    })
    .await;
    assert_eq!(reason, "ControlPlaneNotAvailable");
    let rc = remote_cluster(&h, "capi-capi-c1").await.unwrap();
    assert!(rc.spec.kubeconfig_secret_ref.is_none());
    assert_eq!(rc.labels().get("provider").map(String::as_str), Some("capi"));

    // Cluster API writes the kubeconfig and says the control plane is available.
    let kubeconfig = grant_in(&b, &b_client, "capi-1", &everything()).await;
    put_kubeconfig(&h.client, "capi", "c1-kubeconfig", "value", &kubeconfig).await;
    let clusters = resource("cluster.x-k8s.io", "v1beta2", "Cluster", "clusters");
    let started = Instant::now();
    set_status(
        &h.client,
        &clusters,
        "capi",
        "c1",
        json!({"conditions": [
        {"type": "ControlPlaneAvailable", "status": "True", "reason": "Available", "message": "",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
    )
    .await;
    eventually("the copy in c1", || async {
        (value_in(&b_client, "apps", "pull").await.as_deref() == Some("one")).then_some(())
    })
    .await;
    println!("control plane available to first copy: {:?}", started.elapsed());

    // The kubeconfig rotates (the old credential revoked): copies follow through the new one.
    let kubeconfig = grant_in(&b, &b_client, "capi-2", &everything()).await;
    put_kubeconfig(&h.client, "capi", "c1-kubeconfig", "value", &kubeconfig).await;
    Api::<ServiceAccount>::namespaced(b_client.clone(), "access")
        .delete("capi-1", &DeleteParams::default())
        .await
        .unwrap();
    put_source(&h, "two").await;
    eventually("the copy rotated with the new kubeconfig", || async {
        (value_in(&b_client, "apps", "pull").await.as_deref() == Some("two")).then_some(())
    })
    .await;

    // A tenant's own Cluster, however labelled, is not an entry.
    let tenant = harness::tenant_client(&h, "tenant").await;
    let_tenant_write(&h, "cluster.x-k8s.io", &["clusters"]).await;
    harness::apply_as(
        &tenant,
        capi_cluster("v1beta2", "tenant", "c1", json!({"env": "prod"})),
    )
    .await
    .unwrap();
    stays(
        "no RemoteCluster for the tenant's Cluster",
        Duration::from_secs(2),
        || async { remote_cluster(&h, "capi-tenant-c1").await.is_none() },
    )
    .await;

    // The Cluster loses the label: its copy goes, then its RemoteCluster.
    kubectl_apply(&h.plane, &capi_cluster("v1beta2", "capi", "c1", json!({})));
    eventually("the copy in c1 removed", || async {
        value_in(&b_client, "apps", "pull").await.is_none().then_some(())
    })
    .await;
    eventually("c1's RemoteCluster removed", || async {
        remote_cluster(&h, "capi-capi-c1").await.is_none().then_some(())
    })
    .await;
}

/// Cluster API where only v1beta1 is served (an older management cluster): mimeo reads that
/// version and its `status.controlPlaneReady`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_api_v1beta1_is_read_where_only_it_is_served() {
    let h = Harness::start().await;
    let mut crd: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(fixture("cluster-api/cluster.x-k8s.io_clusters.yaml")).unwrap(),
    )
    .unwrap();
    let versions = crd["spec"]["versions"].as_array_mut().unwrap();
    versions.retain(|v| v["name"] == "v1beta1");
    versions[0]["storage"] = json!(true);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crd.yaml");
    std::fs::write(&path, serde_yaml_ng::to_string(&crd).unwrap()).unwrap();
    h.plane.install_crds(&[path]).await.unwrap();
    let b = ControlPlane::start().await.unwrap();
    let b_client = b.client().await.unwrap();
    for ns in ["platform", "capi"] {
        kubectl_apply(
            &h.plane,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        );
    }
    put_source(&h, "old").await;
    kubectl_apply(
        &h.plane,
        &capi_cluster("v1beta1", "capi", "c1", json!({"env": "prod"})),
    );
    let kubeconfig = grant_in(&b, &b_client, "capi-1", &everything()).await;
    put_kubeconfig(&h.client, "capi", "c1-kubeconfig", "value", &kubeconfig).await;
    set_status(
        &h.client,
        &resource("cluster.x-k8s.io", "v1beta1", "Cluster", "clusters"),
        "capi",
        "c1",
        json!({"controlPlaneReady": true}),
    )
    .await;
    kubectl_apply(
        &h.plane,
        &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterInventory",
        "metadata": {"name": "capi"}, "spec": {"namespaces": ["capi"], "clusterAPI": {}}}),
    );
    h.apply(copy_rule(
        "pull",
        json!({"matchLabels": {"mimeo.dev/inventory": "capi"}}),
        "apps",
    ))
    .await;
    eventually("the copy in the v1beta1 cluster", || async {
        (value_in(&b_client, "apps", "pull").await.as_deref() == Some("old")).then_some(())
    })
    .await;
}

fn script(dir: &std::path::Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    perms.set_mode(0o755);
    std::fs::set_permissions(&path, perms).unwrap();
}

fn cluster_profile(ns: &str, name: &str, labels: Value) -> Value {
    json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
           "metadata": {"name": name, "namespace": ns, "labels": labels},
           "spec": {"clusterManager": {"name": "test"}, "displayName": name}})
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// ClusterProfiles: server and CA from the profile, credentials only from the provider file's
/// plugin (a profile's extra arguments are ignored unless the file allows them), run under a
/// timeout; a failing or hanging plugin and a profile naming a CA file are conditions; a
/// tenant's profile in its own namespace gains nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_profiles_are_reached_with_the_installations_provider_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    let args_log = dir.path().join("args.log");
    script(
        dir.path(),
        "token-plugin",
        r#"echo "$@" >> "$2"
test -n "$KUBERNETES_EXEC_INFO" || { echo "no cluster info" >&2; exit 2; }
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s","expirationTimestamp":"%s"}}' "$(cat "$1")" "$(date -u -d '+125 seconds' +%Y-%m-%dT%H:%M:%SZ)""#,
    );
    script(
        dir.path(),
        "broken-plugin",
        "echo 'cannot find the cluster in the cloud account' >&2; exit 4",
    );
    script(dir.path(), "slow-plugin", "sleep 30");
    let exec = |command: &str, args: Value| {
        json!({"apiVersion": "client.authentication.k8s.io/v1", "command": command,
                                                 "args": args, "provideClusterInfo": true})
    };
    let providers = json!({"providers": [
        {"name": "token", "execConfig": exec("./token-plugin", json!([token_file, args_log]))},
        {"name": "broken", "execConfig": exec("./broken-plugin", json!(null))},
        {"name": "slow", "execConfig": exec("./slow-plugin", json!(null))},
    ]});
    let providers_file = dir.path().join("providers.json");
    std::fs::write(&providers_file, providers.to_string()).unwrap();
    let config = mimeo::controller::ControllerConfig {
        inventory: mimeo::controller::InventorySettings {
            providers_file: Some(providers_file),
            exec_timeout: Duration::from_secs(2),
            namespace: "mimeo-system".into(),
        },
        ..Default::default()
    };
    // The controller holds only what the chart grants with inventories.clusterProfile (the
    // provider file is given to it directly; the chart would mount it from this ConfigMap).
    let values = [
        "--set",
        "inventories.clusterProfile.enabled=true",
        "--set",
        "inventories.clusterProfile.providersConfigMap=providers",
    ];
    let h = Harness::start_with_chart_values(config, &values).await;
    h.plane
        .install_crds(&[fixture(
            "cluster-inventory-api/multicluster.x-k8s.io_clusterprofiles.yaml",
        )])
        .await
        .unwrap();
    let b = ControlPlane::start().await.unwrap();
    let b_client = b.client().await.unwrap();
    for ns in ["platform", "fleet", "tenant", "mimeo-system"] {
        kubectl_apply(
            &h.plane,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        );
    }
    let kubeconfig = grant_in(&b, &b_client, "profile-1", &everything()).await;
    let parsed: Value = serde_yaml_ng::from_str(&kubeconfig).unwrap();
    let token = parsed["users"][0]["user"]["token"].as_str().unwrap().to_owned();
    std::fs::write(&token_file, &token).unwrap();
    put_source(&h, "one").await;
    let profiles = resource(
        "multicluster.x-k8s.io",
        "v1alpha1",
        "ClusterProfile",
        "clusterprofiles",
    );
    let reach = |provider: &str| {
        json!({"accessProviders": [{"name": provider, "cluster": {
        "server": b.server(), "certificate-authority-data": b64(b.ca_pem().0),
        "extensions": [{"name": "clusterprofiles.multicluster.x-k8s.io/exec/additional-args", "extension": {"args": "--evil"}}]}}]})
    };
    for (name, provider) in [("p1", "token"), ("p2", "broken"), ("p3", "slow")] {
        kubectl_apply(&h.plane, &cluster_profile("fleet", name, json!({"env": "prod"})));
        set_status(&h.client, &profiles, "fleet", name, reach(provider)).await;
    }
    kubectl_apply(&h.plane, &cluster_profile("fleet", "p4", json!({"env": "prod"})));
    set_status(&h.client, &profiles, "fleet", "p4", json!({"accessProviders": [{"name": "token", "cluster": {
        "server": b.server(), "certificate-authority": "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"}}]})).await;
    for (name, provider) in [("token", "token"), ("broken", "broken"), ("slow", "slow")] {
        kubectl_apply(
            &h.plane,
            &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterInventory",
            "metadata": {"name": name},
            "spec": {"namespaces": ["fleet"], "clusterProfile": {"provider": provider},
                     "selector": {"matchLabels": {"env": "prod"}}}}),
        );
    }
    h.apply(copy_rule(
        "pull",
        json!({"matchLabels": {"mimeo.dev/inventory": "token"}}),
        "apps",
    ))
    .await;
    eventually("the copy in the profile's cluster", || async {
        (value_in(&b_client, "apps", "pull").await.as_deref() == Some("one")).then_some(())
    })
    .await;
    let args = std::fs::read_to_string(&args_log).unwrap();
    assert!(!args.contains("--evil"), "a profile added an argument: {args}");
    let credentials = h
        .secrets("mimeo-system")
        .get("mimeo-inventory-token-fleet-p1")
        .await
        .unwrap();
    assert!(credentials.data.unwrap().contains_key("kubeconfig"));

    let (_, message) = eventually("the broken plugin is a condition", || async {
        inventory_problem(&h, "broken", "p2")
            .await
            .filter(|(r, _)| r == "ProviderFailed")
    })
    .await;
    assert!(
        message.contains("cannot find the cluster in the cloud account"),
        "{message}"
    );
    let (_, message) = eventually("the slow plugin is stopped", || async {
        inventory_problem(&h, "slow", "p3")
            .await
            .filter(|(r, _)| r == "ProviderFailed")
    })
    .await;
    assert!(message.contains("did not finish within 2s"), "{message}");
    let (_, message) = eventually("a CA file is refused", || async {
        inventory_problem(&h, "token", "p4")
            .await
            .filter(|(r, _)| r == "ProfileUnusable")
    })
    .await;
    assert!(message.contains("certificate-authority-data"), "{message}");
    let rule = Api::<mimeo::api::ClusterSyncRule>::all(h.client.clone())
        .get("pull")
        .await
        .unwrap();
    let inventories = Api::<ClusterInventory>::all(h.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        !serde_json::to_string(&(rule, inventories.items))
            .unwrap()
            .contains(&token),
        "a token in a status"
    );
    assert!(!harness::logged().contains(&token), "a token in the log");

    // The credential says it expires in 125 s, so it is renewed 2 minutes before: about 5 s on
    // (10 s at the least). The provider now hands out another token and the old one is revoked;
    // copies keep following through the renewed credential.
    let kubeconfig = grant_in(&b, &b_client, "profile-2", &everything()).await;
    let parsed: Value = serde_yaml_ng::from_str(&kubeconfig).unwrap();
    let token = parsed["users"][0]["user"]["token"].as_str().unwrap().to_owned();
    std::fs::write(&token_file, &token).unwrap();
    Api::<ServiceAccount>::namespaced(b_client.clone(), "access")
        .delete("profile-1", &DeleteParams::default())
        .await
        .unwrap();
    let renewals = std::fs::read_to_string(&args_log).unwrap().lines().count();
    eventually("the credential renewed before it expires", || async {
        (std::fs::read_to_string(&args_log).unwrap().lines().count() > renewals).then_some(())
    })
    .await;
    put_source(&h, "two").await;
    eventually("the copy rotated with the renewed credential", || async {
        (value_in(&b_client, "apps", "pull").await.as_deref() == Some("two")).then_some(())
    })
    .await;

    // A tenant's own profile, pointing anywhere, is not read.
    let tenant = harness::tenant_client(&h, "tenant").await;
    let_tenant_write(
        &h,
        "multicluster.x-k8s.io",
        &["clusterprofiles", "clusterprofiles/status"],
    )
    .await;
    harness::apply_as(&tenant, cluster_profile("tenant", "p1", json!({"env": "prod"})))
        .await
        .unwrap();
    stays(
        "no RemoteCluster for the tenant's profile",
        Duration::from_secs(2),
        || async { remote_cluster(&h, "token-tenant-p1").await.is_none() },
    )
    .await;

    // The profile is deleted: its copy goes, then its RemoteCluster and its credentials.
    Api::<DynamicObject>::namespaced_with(h.client.clone(), "fleet", &profiles)
        .delete("p1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the copy removed", || async {
        value_in(&b_client, "apps", "pull").await.is_none().then_some(())
    })
    .await;
    eventually("the RemoteCluster and credentials removed", || async {
        let gone = remote_cluster(&h, "token-fleet-p1").await.is_none()
            && h.secrets("mimeo-system")
                .get_opt("mimeo-inventory-token-fleet-p1")
                .await
                .unwrap()
                .is_none();
        gone.then_some(())
    })
    .await;
}

/// `kubectl apply -f FILE` (client-side) of a file in the repository.
fn kubectl_apply_file(plane: &ControlPlane, file: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(file);
    harness::kubectl(
        plane.kubeconfig_path(),
        &["apply", "-f", path.to_str().unwrap()],
        b"",
    );
}

async fn secret_exists(client: &Client, ns: &str, name: &str) -> bool {
    Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
        .is_some()
}

async fn secret_data(client: &Client, ns: &str, name: &str) -> Option<String> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()??;
    harness::secret_value(&secret, ".dockerconfigjson")
}

/// openMCP HelmDeployer's two secret-copying scenarios, as `examples/helmdeployer-*.yaml` write
/// them: registry credentials next to every workload `Cluster` on the platform cluster, and a
/// pull secret into `helm` on each workload cluster itself; a third Cluster appears later and
/// gets both, a rotation reaches all, and a Cluster that loses its purpose loses both copies and
/// its AccessRequest (which HelmDeployer's own copying never did). The controller holds only the
/// chart's RBAC with `inventories.openMCP` and `nextTo.kinds` set.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_helmdeployer_scenarios_as_the_examples_write_them() {
    let config = mimeo::controller::ControllerConfig {
        next_to_kinds: vec!["Cluster.clusters.openmcp.cloud".parse().unwrap()],
        ..Default::default()
    };
    // The controller holds only what the chart grants with these values.
    let values = [
        "--set",
        "inventories.openMCP=true",
        "--set-json",
        r#"nextTo.kinds=["Cluster.clusters.openmcp.cloud"]"#,
    ];
    let h = Harness::start_with_chart_values(config, &values).await;
    h.plane
        .install_crds(&[
            fixture("openmcp/clusters.openmcp.cloud_clusters.yaml"),
            fixture("openmcp/clusters.openmcp.cloud_accessrequests.yaml"),
        ])
        .await
        .unwrap();
    let (b, c, d) = tokio::join!(
        ControlPlane::start(),
        ControlPlane::start(),
        ControlPlane::start()
    );
    let planes: Vec<Arc<ControlPlane>> = [b, c, d].into_iter().map(|p| Arc::new(p.unwrap())).collect();
    let mut clients = Vec::new();
    for plane in &planes {
        clients.push(plane.client().await.unwrap());
    }
    let by_cluster = ["c1", "c2", "c3"]
        .iter()
        .zip(planes.iter().zip(&clients))
        .map(|(name, (plane, client))| ((*name).to_owned(), (plane.clone(), client.clone())))
        .collect();
    run_provider(
        h.client.clone(),
        Arc::new(by_cluster),
        Arc::new(Mutex::new(ProviderRules::default())),
    );
    for ns in ["test-0", "test-1", "test-2"] {
        kubectl_apply(
            &h.plane,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        );
    }
    kubectl_apply(&h.plane, &openmcp_cluster("test-0", "c1", &["workload"]));
    kubectl_apply(
        &h.plane,
        &openmcp_cluster("test-1", "c2", &["workload", "single"]),
    );
    kubectl_apply(&h.plane, &openmcp_cluster("test-2", "mcp-1", &["mcp"]));
    kubectl_apply_file(&h.plane, "examples/helmdeployer-registry-credentials.yaml");
    kubectl_apply_file(&h.plane, "examples/helmdeployer-pull-secret.yaml");

    for ns in ["test-0", "test-1"] {
        eventually("registry credentials next to a workload Cluster", || async {
            secret_exists(&h.client, ns, "chart-registry").await.then_some(())
        })
        .await;
    }
    for client in &clients[..2] {
        eventually("the pull secret in helm on a workload cluster", || async {
            secret_exists(client, "helm", "image-pull").await.then_some(())
        })
        .await;
    }
    assert!(
        !secret_exists(&h.client, "test-2", "chart-registry").await,
        "mcp-1 is not a workload Cluster"
    );
    assert!(!secret_exists(&clients[2], "helm", "image-pull").await);

    // A third Cluster appears: both copies follow it.
    let started = Instant::now();
    kubectl_apply(&h.plane, &openmcp_cluster("test-2", "c3", &["workload"]));
    eventually("registry credentials next to the new Cluster", || async {
        secret_exists(&h.client, "test-2", "chart-registry")
            .await
            .then_some(())
    })
    .await;
    let beside = started.elapsed();
    eventually("the pull secret on the new cluster", || async {
        secret_exists(&clients[2], "helm", "image-pull")
            .await
            .then_some(())
    })
    .await;
    println!(
        "a new workload Cluster: credentials beside it after {beside:?}, pull secret in it after {:?}",
        started.elapsed()
    );

    // The pull secret rotates: every cluster follows.
    let rotated = r#"{"auths":{"images.example.com":{"auth":"cm90YXRlZDpzZWNyZXQ="}}}"#;
    h.apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "image-pull", "namespace": "openmcp-system"},
                   "type": "kubernetes.io/dockerconfigjson", "stringData": {".dockerconfigjson": rotated}}))
    .await;
    for client in &clients {
        eventually("the rotation on every cluster", || async {
            (secret_data(client, "helm", "image-pull").await.as_deref() == Some(rotated)).then_some(())
        })
        .await;
    }

    // c1 stops being a workload cluster: both copies go, and so does mimeo's AccessRequest.
    kubectl_apply(&h.plane, &openmcp_cluster("test-0", "c1", &["mcp"]));
    eventually("the credentials beside c1 removed", || async {
        (!secret_exists(&h.client, "test-0", "chart-registry").await).then_some(())
    })
    .await;
    eventually("the pull secret on c1 removed", || async {
        (!secret_exists(&clients[0], "helm", "image-pull").await).then_some(())
    })
    .await;
    let requests = Api::<DynamicObject>::namespaced_with(h.client.clone(), "test-0", &access_requests());
    eventually("c1's AccessRequest deleted", || async {
        requests
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    assert!(secret_exists(&h.client, "test-1", "chart-registry").await);
    assert!(secret_exists(&clients[1], "helm", "image-pull").await);
}

/// An MCP namespace on the platform cluster as openMCP's ManagedControlPlane controller makes it,
/// made the way an operator would: `kubectl create namespace`, then `kubectl label`.
fn mcp_namespace(plane: &ControlPlane, name: &str, tenant: &str) {
    mcp_namespace_of(plane, name, tenant, "project-x");
}

/// [`mcp_namespace`] for the `ManagedControlPlane` `mcp_namespace/mcp_name` on the onboarding
/// cluster.
fn mcp_namespace_of(plane: &ControlPlane, name: &str, mcp_name: &str, mcp_namespace: &str) {
    let kubeconfig = plane.kubeconfig_path();
    harness::kubectl(kubeconfig, &["create", "namespace", name], b"");
    harness::kubectl(
        kubeconfig,
        &[
            "label",
            "namespace",
            name,
            "openmcp.cloud/managed-by=ManagedControlPlane",
            &format!("core.openmcp.cloud/mcp-name={mcp_name}"),
            &format!("core.openmcp.cloud/mcp-namespace={mcp_namespace}"),
        ],
        b"",
    );
}

/// openMCP's tenants: an inventory over the namespaces chosen by the labels openMCP puts on each
/// MCP's `mcp--<uuid>` namespace. Each MCP's RemoteCluster carries its namespace's labels, so a
/// rule picks one tenant's MCP; a new MCP namespace is followed without an edit; a namespace
/// that loses the label takes its RemoteCluster with it; a tenant's `Cluster` in its own
/// namespace, labelled as if it were an MCP, gains nothing; an empty or missing choice of
/// namespaces is refused by the apiserver.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_namespaces_chosen_by_label_are_followed_without_an_edit() {
    let h = Harness::start().await;
    h.plane
        .install_crds(&[
            fixture("openmcp/clusters.openmcp.cloud_clusters.yaml"),
            fixture("openmcp/clusters.openmcp.cloud_accessrequests.yaml"),
        ])
        .await
        .unwrap();
    h.namespace("platform", &[], &[]).await;
    h.namespace("tenant", &[], &[]).await;
    put_source(&h, "one").await;
    mcp_namespace(&h.plane, "mcp--aaaa", "tenant-a");
    kubectl_apply(&h.plane, &openmcp_cluster("mcp--aaaa", "mcp", &["mcp"]));
    // The tenant may write Clusters in its own namespace, and labels one as tenant-b's MCP.
    let_tenant_write(&h, "clusters.openmcp.cloud", &["clusters"]).await;
    let tenant = harness::tenant_client(&h, "tenant").await;
    let mut forged = openmcp_cluster("tenant", "mcp", &["mcp"]);
    forged["metadata"]["labels"] = json!({"core.openmcp.cloud/mcp-name": "tenant-b",
        "openmcp.cloud/managed-by": "ManagedControlPlane"});
    harness::apply_as(&tenant, forged).await.unwrap();

    let inventory = json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterInventory",
        "metadata": {"name": "mcps"},
        "spec": {"namespaceSelector": {"matchLabels": {"openmcp.cloud/managed-by": "ManagedControlPlane"}},
                 "openMCP": {}, "selector": {"matchPurposes": [{"operator": "ContainsAll", "values": ["mcp"]}]}}});
    kubectl_apply(&h.plane, &inventory);
    // Tenant b's rule: only its MCP.
    h.apply(copy_rule(
        "tenant-b-pull",
        json!({"matchLabels": {"mimeo.dev/inventory": "mcps", "core.openmcp.cloud/mcp-name": "tenant-b"}}),
        "crossplane-system",
    ))
    .await;

    let a = eventually("tenant a's MCP as a RemoteCluster", || {
        remote_cluster(&h, "mcps-mcp--aaaa-mcp")
    })
    .await;
    let labels = a.labels();
    assert_eq!(labels["core.openmcp.cloud/mcp-name"], "tenant-a", "{labels:?}");
    assert_eq!(labels["core.openmcp.cloud/mcp-namespace"], "project-x");
    assert_eq!(labels["purpose.mimeo.dev/mcp"], "true");
    assert!(!labels.contains_key("kubernetes.io/metadata.name"), "{labels:?}");

    // A new MCP: followed without an edit of the inventory, and the rule picks it alone.
    mcp_namespace(&h.plane, "mcp--bbbb", "tenant-b");
    kubectl_apply(&h.plane, &openmcp_cluster("mcp--bbbb", "mcp", &["mcp"]));
    let rules_using = |name: &'static str| {
        let h = &h;
        async move { remote_cluster(h, name).await.and_then(|rc| rc.status?.rules) }
    };
    eventually("tenant b's rule uses tenant b's MCP", || async {
        (rules_using("mcps-mcp--bbbb-mcp").await == Some(1)).then_some(())
    })
    .await;
    let inv = eventually("the inventory counts two MCPs", || async {
        let inv = Api::<ClusterInventory>::all(h.client.clone())
            .get("mcps")
            .await
            .unwrap();
        (inv.status.as_ref()?.selected == 2).then_some(inv)
    })
    .await;
    assert_eq!(inv.status.unwrap().selected, 2);
    stays(
        "tenant a's MCP unused by tenant b's rule, and nothing for the tenant's forged Cluster",
        Duration::from_secs(3),
        || async {
            rules_using("mcps-mcp--aaaa-mcp").await.unwrap_or(0) == 0
                && remote_cluster(&h, "mcps-tenant-mcp").await.is_none()
        },
    )
    .await;

    // Tenant a's MCP goes: its namespace loses the label, and its RemoteCluster goes with it.
    harness::kubectl(
        h.plane.kubeconfig_path(),
        &["label", "namespace", "mcp--aaaa", "openmcp.cloud/managed-by-"],
        b"",
    );
    eventually("tenant a's RemoteCluster removed", || async {
        remote_cluster(&h, "mcps-mcp--aaaa-mcp")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(remote_cluster(&h, "mcps-mcp--bbbb-mcp").await.is_some());

    // openMCP's `ignore`: a new MCP is not followed while the inventory carries it; `reconcile`
    // makes a look at once, after which the annotation goes.
    let kubeconfig = h.plane.kubeconfig_path();
    harness::kubectl(
        kubeconfig,
        &[
            "annotate",
            "clusterinventory",
            "mcps",
            "openmcp.cloud/operation=ignore",
        ],
        b"",
    );
    eventually("the inventory says it is ignored", || async {
        let inv = Api::<ClusterInventory>::all(h.client.clone())
            .get("mcps")
            .await
            .unwrap();
        let ready = inv.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
        (ready.reason == "Ignored" && ready.status == "False").then_some(())
    })
    .await;
    mcp_namespace(&h.plane, "mcp--cccc", "tenant-c");
    kubectl_apply(&h.plane, &openmcp_cluster("mcp--cccc", "mcp", &["mcp"]));
    stays(
        "no RemoteCluster for a new MCP while ignored",
        Duration::from_secs(3),
        || async { remote_cluster(&h, "mcps-mcp--cccc-mcp").await.is_none() },
    )
    .await;
    harness::kubectl(
        kubeconfig,
        &[
            "annotate",
            "--overwrite",
            "clusterinventory",
            "mcps",
            "openmcp.cloud/operation=reconcile",
        ],
        b"",
    );
    // Gone within a few seconds (issue 56: left in place when the pass had written the status).
    let annotated = std::time::Instant::now();
    eventually_within(
        "the new MCP followed, and the annotation gone",
        Duration::from_secs(5),
        || async {
            let inv = Api::<ClusterInventory>::all(h.client.clone())
                .get("mcps")
                .await
                .unwrap();
            let asked = inv
                .metadata
                .annotations
                .unwrap_or_default()
                .contains_key("openmcp.cloud/operation");
            (!asked && remote_cluster(&h, "mcps-mcp--cccc-mcp").await.is_some()).then_some(())
        },
    )
    .await;
    println!(
        "reconcile: the new MCP followed and the annotation gone {:?} after it was set",
        annotated.elapsed()
    );

    // What the apiserver refuses: no namespaces at all, and a selector that would read them all.
    for (spec, says) in [
        (json!({"openMCP": {}}), "namespaceSelector), or both"),
        (
            json!({"openMCP": {}, "namespaceSelector": {}}),
            "an empty selector would read entries from every namespace",
        ),
        (
            json!({"openMCP": {}, "namespaceSelector": {"matchLabels": {}}}),
            "an empty selector",
        ),
    ] {
        let object = json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterInventory",
                            "metadata": {"name": "bad"}, "spec": spec});
        let (ok, out) = harness::run_kubectl(
            h.plane.kubeconfig_path(),
            &["apply", "-f", "-"],
            object.to_string().as_bytes(),
        );
        assert!(!ok && out.contains(says), "{spec}: {out}");
    }
}

/// The `Crossplane` order kind of openMCP's Crossplane service provider, as a CRD for the
/// onboarding cluster (any content).
fn crossplane_crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "crossplanes.crossplane.services.openmcp.cloud"},
           "spec": {"group": "crossplane.services.openmcp.cloud", "scope": "Namespaced",
                    "names": {"kind": "Crossplane", "plural": "crossplanes", "singular": "crossplane"},
                    "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                                  "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})
}

fn order(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "crossplane.services.openmcp.cloud/v1alpha1", "kind": "Crossplane",
           "metadata": {"name": name, "namespace": namespace}, "spec": {"version": "1.20.0"}})
}

/// A service provider's copies per tenant, as `examples/service-provider-crossplane.yaml` writes
/// them: the platform cluster, an onboarding cluster where tenants order, and two MCP clusters
/// that an openMCP inventory over the `mcp--*` namespaces registers (the test plays openMCP's
/// scheduler and cluster provider). A tenant's order brings its pull secret into
/// `crossplane-system` on its own MCP (created there) and the chart credentials into its
/// `mcp--<uuid>` namespace under the provider's name; a second tenant gets its own and nothing of
/// the first's; a cancelled order removes both; an order in another tenant's name from one's own
/// namespace gains nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenants_order_brings_its_copies_to_its_own_mcp() {
    let config = mimeo::controller::ControllerConfig {
        next_to_kinds: vec!["Crossplane.crossplane.services.openmcp.cloud".parse().unwrap()],
        ..Default::default()
    };
    let h = Harness::start_with(config).await;
    h.plane
        .install_crds(&[
            fixture("openmcp/clusters.openmcp.cloud_clusters.yaml"),
            fixture("openmcp/clusters.openmcp.cloud_accessrequests.yaml"),
        ])
        .await
        .unwrap();
    let (onboarding, mcp_a, mcp_b) = tokio::join!(
        ControlPlane::start(),
        ControlPlane::start(),
        ControlPlane::start()
    );
    let (onboarding, mcp_a, mcp_b) = (
        onboarding.unwrap(),
        Arc::new(mcp_a.unwrap()),
        Arc::new(mcp_b.unwrap()),
    );
    let onboarding_admin = onboarding.client().await.unwrap();
    let (a_client, b_client) = (mcp_a.client().await.unwrap(), mcp_b.client().await.unwrap());

    // The onboarding cluster: the order kind, and mimeo's identity there, which may read orders only.
    kubectl_apply(&onboarding, &crossplane_crd());
    harness::kubectl(
        onboarding.kubeconfig_path(),
        &[
            "wait",
            "--for",
            "condition=established",
            "crd/crossplanes.crossplane.services.openmcp.cloud",
        ],
        b"",
    );
    for object in [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mimeo"}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "mimeo", "namespace": "mimeo"}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "mimeo-orders"},
               "rules": [{"apiGroups": ["crossplane.services.openmcp.cloud"], "resources": ["crossplanes"], "verbs": ["get", "list", "watch"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "mimeo-orders"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "mimeo-orders"},
               "subjects": [{"kind": "ServiceAccount", "name": "mimeo", "namespace": "mimeo"}]}),
    ] {
        kubectl_apply(&onboarding, &object);
    }
    let reader = service_account_kubeconfig(&onboarding, &onboarding_admin, "mimeo", "mimeo").await;
    h.namespace("mimeo-system", &[], &[]).await;
    h.register_cluster("onboarding", &reader, json!({})).await;

    // openMCP's scheduler: an MCP namespace and Cluster per tenant; its cluster provider grants
    // mimeo's AccessRequests with real identities in the MCP clusters.
    mcp_namespace_of(&h.plane, "mcp--aaaa", "tenant-a", "project-a");
    mcp_namespace_of(&h.plane, "mcp--bbbb", "tenant-b", "project-b");
    kubectl_apply(&h.plane, &openmcp_cluster("mcp--aaaa", "tenant-a", &["mcp"]));
    kubectl_apply(&h.plane, &openmcp_cluster("mcp--bbbb", "tenant-b", &["mcp"]));
    let planes = [
        ("tenant-a", (mcp_a.clone(), a_client.clone())),
        ("tenant-b", (mcp_b.clone(), b_client.clone())),
    ]
    .into_iter()
    .map(|(name, plane)| (name.to_owned(), plane))
    .collect();
    run_provider(
        h.client.clone(),
        Arc::new(planes),
        Arc::new(Mutex::new(ProviderRules::default())),
    );

    kubectl_apply_file(&h.plane, "examples/service-provider-crossplane.yaml");

    // Tenant a orders.
    for ns in ["project-a", "project-b"] {
        harness::kubectl(onboarding.kubeconfig_path(), &["create", "namespace", ns], b"");
    }
    let ordered = Instant::now();
    kubectl_apply(&onboarding, &order("project-a", "tenant-a"));
    eventually(
        "tenant a's pull secret in crossplane-system on its MCP",
        || async {
            secret_exists(&a_client, "crossplane-system", "crossplane-image-pull")
                .await
                .then_some(())
        },
    )
    .await;
    let pull_secret_after = ordered.elapsed();
    eventually("tenant a's chart credentials in its MCP namespace", || async {
        secret_exists(&h.client, "mcp--aaaa", "sp-crossplane-crossplane-chart-registry")
            .await
            .then_some(())
    })
    .await;
    println!(
        "an order to its pull secret on the tenant's MCP: {pull_secret_after:?}; both copies: {:?}",
        ordered.elapsed()
    );
    assert!(!secret_exists(&b_client, "crossplane-system", "crossplane-image-pull").await);
    assert!(!secret_exists(&h.client, "mcp--bbbb", "sp-crossplane-crossplane-chart-registry").await);

    // Tenant b orders: its own copies, and nothing of a's changes.
    kubectl_apply(&onboarding, &order("project-b", "tenant-b"));
    eventually("tenant b's pull secret on its MCP", || async {
        secret_exists(&b_client, "crossplane-system", "crossplane-image-pull")
            .await
            .then_some(())
    })
    .await;
    eventually("tenant b's chart credentials in its MCP namespace", || async {
        secret_exists(&h.client, "mcp--bbbb", "sp-crossplane-crossplane-chart-registry")
            .await
            .then_some(())
    })
    .await;
    assert!(secret_exists(&a_client, "crossplane-system", "crossplane-image-pull").await);

    // Tenant a cancels: both of its copies go; b's stay.
    let cancelled = Instant::now();
    harness::kubectl(
        onboarding.kubeconfig_path(),
        &["delete", "crossplane", "tenant-a", "-n", "project-a"],
        b"",
    );
    eventually("tenant a's copies removed", || async {
        let pull = secret_exists(&a_client, "crossplane-system", "crossplane-image-pull").await;
        let chart = secret_exists(&h.client, "mcp--aaaa", "sp-crossplane-crossplane-chart-registry").await;
        (!pull && !chart).then_some(())
    })
    .await;
    assert!(secret_exists(&b_client, "crossplane-system", "crossplane-image-pull").await);
    assert!(secret_exists(&h.client, "mcp--bbbb", "sp-crossplane-crossplane-chart-registry").await);

    // Tenant b orders in tenant a's name, from its own namespace: the order names MCP tenant-a
    // of namespace project-b, which does not exist; a's MCP gets nothing.
    kubectl_apply(&onboarding, &order("project-b", "tenant-a"));
    stays(
        "nothing for tenant a's MCP from b's forged order",
        Duration::from_secs(3),
        || async {
            !secret_exists(&a_client, "crossplane-system", "crossplane-image-pull").await
                && !secret_exists(&h.client, "mcp--aaaa", "sp-crossplane-crossplane-chart-registry").await
        },
    )
    .await;

    // issue 56: with only the documented ClusterRole on the onboarding cluster, mimeo does not
    // ask it for what it may not read again and again (its watch of CRDs there was refused and
    // asked again every 250 ms, for ever). Counted on mimeo's side: the apiserver's own metrics
    // do not count what its authorizer refuses.
    let refused = || {
        h.metrics
            .encode()
            .lines()
            .filter(|l| {
                l.starts_with("mimeo_apiserver_requests_total{")
                    && l.contains("remote_cluster=\"onboarding\"")
                    && l.contains("code=\"403\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    let (refused_before, settled) = (refused(), Instant::now());
    tokio::time::sleep(Duration::from_secs(20)).await;
    let refused_after = refused() - refused_before;
    println!(
        "onboarding cluster: {refused_before} requests refused there up to now, {refused_after} in the next {:?}",
        settled.elapsed()
    );
    assert_eq!(
        refused_after, 0,
        "mimeo keeps asking the onboarding cluster for what it may not read"
    );

    // issue 56: tenant a's MCP unused since the cancel, its access is given back once the grace
    // (30 s) is over, though nothing else wakes the inventory (it stayed until the next look, up
    // to 5 minutes).
    let a_requests = Api::<DynamicObject>::namespaced_with(h.client.clone(), "mcp--aaaa", &access_requests());
    let given_back = eventually_within(
        "tenant a's AccessRequest deleted after the grace",
        Duration::from_secs(40).saturating_sub(cancelled.elapsed()),
        || async {
            let left = a_requests.list(&ListParams::default()).await.unwrap().items;
            left.is_empty().then(|| cancelled.elapsed())
        },
    )
    .await;
    println!("tenant a's access given back {given_back:?} after the cancel (the grace: 30 s)");
    let b_requests = Api::<DynamicObject>::namespaced_with(h.client.clone(), "mcp--bbbb", &access_requests());
    assert_eq!(
        b_requests.list(&ListParams::default()).await.unwrap().items.len(),
        1,
        "tenant b's MCP, still in use, keeps its access"
    );
}
