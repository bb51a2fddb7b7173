//! openMCP's cluster provider, played by the tests: it answers `AccessRequest`s on the platform
//! cluster with a real ServiceAccount and ClusterRole in the requested Cluster's control plane.

use super::service_account_kubeconfig;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Client, ResourceExt};
use mimeo_envtest::ControlPlane;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// openMCP's `AccessRequest`.
pub fn access_requests() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("clusters.openmcp.cloud", "v1alpha1", "AccessRequest"),
        "accessrequests",
    )
}

pub async fn namespace_in(client: &Client, name: &str) {
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

/// A ServiceAccount in `plane` with a ClusterRole of exactly `rules`, and a kubeconfig with a
/// token of its own: what a cluster provider hands out.
pub async fn grant_in(plane: &ControlPlane, client: &Client, name: &str, rules: &Value) -> String {
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
pub struct ProviderRules {
    pub deny: BTreeSet<String>,
    pub ignore: BTreeSet<String>,
    /// The rules each granted request asked for, by request name.
    pub asked: BTreeMap<String, Value>,
    /// Requests answered, in order.
    pub answered: Vec<String>,
}

/// Plays openMCP's cluster provider on the platform cluster: every unanswered `AccessRequest`
/// for a Cluster it knows is granted with a ServiceAccount of exactly the requested rules in that
/// Cluster's control plane, a kubeconfig Secret beside the request and `Granted`; or denied, or
/// left alone, as `rules` say.
pub fn run_provider(
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

pub async fn put_kubeconfig(client: &Client, ns: &str, name: &str, key: &str, kubeconfig: &str) {
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
