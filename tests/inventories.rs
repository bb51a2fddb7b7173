//! Clusters from a platform's inventory, against real control planes: the platform cluster (the
//! harness, where mimeo runs) lists the clusters; each listed cluster is a control plane of its
//! own. The tests play the cluster manager: for openMCP the cluster provider that answers
//! `AccessRequest`s with a real ServiceAccount and Role in the target cluster, for Cluster API
//! the writer of `<name>-kubeconfig`, for ClusterProfiles a provider plugin of the test's own.

mod common;

use common::{Harness, eventually, service_account_kubeconfig, stays};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::{Client, ResourceExt};
use mimeo::api::{ClusterInventory, RemoteCluster};
use mimeo_envtest::ControlPlane;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const FIXTURES: &str = "../shared/fixtures/inventory";

fn fixture(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(FIXTURES)
        .join(path)
}

/// `kubectl apply -f -` (client-side), as users and cluster managers' manifests are applied.
fn kubectl_apply(plane: &ControlPlane, object: &Value) {
    use std::io::Write;
    let mut child = std::process::Command::new(mimeo_envtest::binaries().unwrap().kubectl())
        .args(["apply", "-f", "-", "--kubeconfig"])
        .arg(plane.kubeconfig_path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(object.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn access_requests() -> ApiResource {
    resource(
        "clusters.openmcp.cloud",
        "v1alpha1",
        "AccessRequest",
        "accessrequests",
    )
}

async fn namespace_in(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("{e}"),
    }
}

async fn value_in(client: &Client, ns: &str, name: &str) -> Option<String> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()??;
    common::secret_value(&secret, "value")
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

/// A ServiceAccount in `plane` with a ClusterRole of exactly `rules`, and a kubeconfig with a
/// token of its own: what a cluster provider hands out.
async fn grant_in(plane: &ControlPlane, client: &Client, name: &str, rules: &Value) -> String {
    namespace_in(client, "access").await;
    let apply = |object: Value| {
        let client = client.clone();
        async move {
            let gvk = kube::core::GroupVersionKind::try_from(&kube::core::TypeMeta {
                api_version: object["apiVersion"].as_str().unwrap().into(),
                kind: object["kind"].as_str().unwrap().into(),
            })
            .unwrap();
            let ar = ApiResource::from_gvk(&gvk);
            let name = object["metadata"]["name"].as_str().unwrap().to_owned();
            let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
                Some(ns) => Api::namespaced_with(client, ns, &ar),
                None => Api::all_with(client, &ar),
            };
            api.patch(
                &name,
                &PatchParams::apply("provider").force(),
                &Patch::Apply(&object),
            )
            .await
            .unwrap();
        }
    };
    apply(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": "access"}})).await;
    apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules})).await;
    apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                 "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "access"}]}))
    .await;
    service_account_kubeconfig(plane, client, "access", name).await
}

/// The cluster provider's view of what to do with each Cluster's requests.
#[derive(Default)]
struct ProviderRules {
    deny: BTreeSet<String>,
    ignore: BTreeSet<String>,
    /// The rules each granted request asked for, by request name.
    asked: BTreeMap<String, Value>,
    /// Requests answered, in order.
    answered: Vec<String>,
}

/// Plays openMCP's cluster provider on the platform cluster: every unanswered `AccessRequest`
/// for a Cluster it knows is granted with a ServiceAccount of exactly the requested rules in that
/// Cluster's control plane, a kubeconfig Secret beside the request and `Granted`; or denied, or
/// left alone, as `rules` say.
fn run_provider(
    h_client: Client,
    planes: Arc<BTreeMap<String, (Arc<ControlPlane>, Client)>>,
    rules: Arc<Mutex<ProviderRules>>,
) {
    tokio::spawn(async move {
        let api = Api::<DynamicObject>::all_with(h_client.clone(), &access_requests());
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let Ok(list) = api.list(&ListParams::default()).await else {
                continue;
            };
            for request in list {
                let value = serde_json::to_value(&request).unwrap();
                if !value["status"]["phase"].is_null() {
                    continue;
                }
                let (ns, name) = (request.namespace().unwrap(), request.name_any());
                let cluster = value["spec"]["clusterRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let namespaced =
                    Api::<DynamicObject>::namespaced_with(h_client.clone(), &ns, &access_requests());
                let now = "2026-01-01T00:00:00Z";
                let status = {
                    let rules = rules.lock().unwrap();
                    if rules.ignore.contains(&cluster) {
                        continue;
                    }
                    rules.deny.contains(&cluster).then(|| json!({"phase": "Denied", "conditions": [
                        {"type": "Granted", "status": "False", "reason": "NotAllowed", "lastTransitionTime": now,
                         "message": "this landscape does not grant access to secrets"}]}))
                };
                let status = match status {
                    Some(status) => status,
                    None => {
                        let Some((plane, client)) = planes.get(&cluster) else {
                            continue;
                        };
                        let all_rules: Vec<Value> = value["spec"]["token"]["permissions"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .flat_map(|p| p["rules"].as_array().cloned().unwrap_or_default())
                            .collect();
                        let kubeconfig = grant_in(plane, client, &name, &json!(all_rules)).await;
                        let secret = format!("{name}-access");
                        put_kubeconfig(&h_client, &ns, &secret, "kubeconfig", &kubeconfig).await;
                        let mut r = rules.lock().unwrap();
                        r.asked.insert(name.clone(), json!(all_rules));
                        r.answered.push(name.clone());
                        json!({"phase": "Granted", "secretRef": {"name": secret}})
                    }
                };
                let mut status = status;
                status["observedGeneration"] = json!(request.metadata.generation.unwrap_or(1));
                let patch = json!({"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "AccessRequest", "status": status});
                if let Err(e) = namespaced
                    .patch_status(
                        &name,
                        &PatchParams::apply("provider").force(),
                        &Patch::Apply(&patch),
                    )
                    .await
                {
                    eprintln!("provider: answering {ns}/{name}: {e}");
                }
            }
        }
    });
}

async fn put_kubeconfig(client: &Client, ns: &str, name: &str, key: &str, kubeconfig: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns},
        "stringData": {key: kubeconfig},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply("provider").force(),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap();
}

fn openmcp_cluster(ns: &str, name: &str, purposes: &[&str]) -> Value {
    json!({"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster",
           "metadata": {"name": name, "namespace": ns, "labels": {"landscape": "eu"}},
           "spec": {"profile": "test", "tenancy": "Shared", "purposes": purposes}})
}

async fn put_source(h: &Harness, value: &str) {
    h.put_secret("platform", "pull", &[("value", value)]).await;
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
    let tenant = common::tenant_client(&h, "tenant").await;
    h.apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": "clusters", "namespace": "tenant"},
                   "rules": [{"apiGroups": ["clusters.openmcp.cloud"], "resources": ["clusters", "accessrequests"], "verbs": ["*"]}]}))
    .await;
    h.apply(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "clusters", "namespace": "tenant"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "clusters"},
                   "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": "tenant"}]}),
    )
    .await;
    common::apply_as(&tenant, openmcp_cluster("tenant", "t1", &["workload"]))
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
    let expected = mimeo::remote_rbac::objects(&mimeo::remote_rbac::RbacOptions {
        kinds: mimeo::sync::kinds::default_allowed_kinds()
            .iter()
            .map(|k| {
                if k.group.is_empty() {
                    k.kind.clone()
                } else {
                    format!("{}.{}", k.kind, k.group)
                }
            })
            .filter(|k| mimeo::remote_rbac::resolve_kind(k).is_ok())
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
