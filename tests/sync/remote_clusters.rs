//! `RemoteCluster` registration against two real control planes: the status says whether the
//! cluster behind the kubeconfig Secret can be reached, and why not.

use crate::harness;

use harness::{Harness, eventually};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use mimeo::api::RemoteCluster;
use mimeo_envtest::ControlPlane;
use serde_json::json;

async fn put_kubeconfig(h: &Harness, name: &str, kubeconfig: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": "mimeo-system"},
        "stringData": {"value": kubeconfig},
    }))
    .unwrap();
    Api::<Secret>::namespaced(h.client.clone(), "mimeo-system")
        .patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&secret))
        .await
        .unwrap();
}

async fn register(h: &Harness, cluster: &str, secret: &str) {
    h.apply(
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster", "metadata": {"name": cluster},
                   "spec": {"kubeconfigSecretRef": {"namespace": "mimeo-system", "name": secret}}}),
    )
    .await;
}

/// Waits for the cluster's Ready condition to have this reason; returns its message.
async fn wait_reason(h: &Harness, cluster: &str, reason: &str) -> RemoteCluster {
    let api: Api<RemoteCluster> = Api::all(h.client.clone());
    eventually(
        &format!("RemoteCluster {cluster} with reason {reason}"),
        || async {
            let rc = api.get_opt(cluster).await.unwrap()?;
            let ready = rc
                .status
                .as_ref()?
                .conditions
                .iter()
                .find(|c| c.type_ == "Ready")?
                .clone();
            (ready.reason == reason).then_some(rc)
        },
    )
    .await
}

#[tokio::test]
async fn remote_clusters_report_whether_they_can_be_reached() {
    let h = Harness::start().await;
    let cluster_b = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    h.namespace("mimeo-system", &[], &[]).await;

    put_kubeconfig(&h, "b", cluster_b.kubeconfig_yaml()).await;
    register(&h, "workload-b", "b").await;
    let ready = wait_reason(&h, "workload-b", "Connected").await;
    let status = ready.status.unwrap();
    assert_eq!(status.conditions[0].status, "True");
    assert_eq!(status.server_version.as_deref(), Some("v1.36.3"));

    register(&h, "no-secret", "missing").await;
    let missing = wait_reason(&h, "no-secret", "SecretNotFound").await;
    assert!(
        missing.status.unwrap().conditions[0]
            .message
            .contains("mimeo-system/missing does not exist")
    );

    put_kubeconfig(&h, "garbage", "token: hunter2-distinctive: [").await;
    register(&h, "garbage", "garbage").await;
    let garbage = wait_reason(&h, "garbage", "InvalidKubeconfig").await;
    assert!(
        !serde_json::to_string(&garbage).unwrap().contains("hunter2"),
        "a credential leaked into status"
    );

    let exec = cluster_b.kubeconfig_yaml().replace(
        "    client-certificate-data:",
        "    exec: {apiVersion: client.authentication.k8s.io/v1, command: get-token}\n    client-certificate-data:",
    );
    put_kubeconfig(&h, "exec", &exec).await;
    register(&h, "exec", "exec").await;
    wait_reason(&h, "exec", "ExecNotAllowed").await;

    // The kubeconfig of cluster B with the CA of cluster A: B's serving certificate is not trusted.
    let ca_of = |kubeconfig: &str| -> String {
        kubeconfig
            .lines()
            .find(|l| l.contains("certificate-authority-data"))
            .unwrap()
            .to_owned()
    };
    let wrong_ca = cluster_b.kubeconfig_yaml().replace(
        &ca_of(cluster_b.kubeconfig_yaml()),
        &ca_of(h.plane.kubeconfig_yaml()),
    );
    put_kubeconfig(&h, "wrong-ca", &wrong_ca).await;
    register(&h, "wrong-ca", "wrong-ca").await;
    wait_reason(&h, "wrong-ca", "Unreachable").await;

    // A token the cluster does not know.
    let server = cluster_b.server().to_owned();
    let ca = ca_of(cluster_b.kubeconfig_yaml());
    let bad_token = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: b\n  cluster:\n    server: {server}\n{ca}\ncontexts:\n- name: b\n  context: {{cluster: b, user: u}}\ncurrent-context: b\nusers:\n- name: u\n  user: {{token: not-a-real-token}}\n"
    );
    put_kubeconfig(&h, "bad-token", &bad_token).await;
    register(&h, "bad-token", "bad-token").await;
    wait_reason(&h, "bad-token", "Unauthorized").await;
}
