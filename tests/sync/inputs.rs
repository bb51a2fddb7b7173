//! Copies made from several objects, against a real apiserver: a rule's `inputs` reach the
//! plugins, a change to any of them rewrites the copies, a missing one stops the rule with the
//! copies left as they are, and a tenant cannot read inputs beyond its namespace or the
//! installation's kinds. The template plugin assembles, `secretType` declares the copy's type.

use crate::harness;

use base64::Engine as _;
use harness::{Harness, apply_as, eventually, secret_value, stays, tenant_client};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Patch, PatchParams};
use mimeo::api::SyncRule;
use mimeo::controller::ControllerConfig;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

async fn harness() -> Harness {
    Harness::start_with(ControllerConfig {
        plugin_dir: Some(harness::plugin_dir()),
        ..Default::default()
    })
    .await
}

/// Applies every object of a file in `examples/`, as the admin.
async fn apply_example(h: &Harness, file: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let object: Value = serde::Deserialize::deserialize(document).unwrap();
        if !object.is_null() {
            h.apply(object).await;
        }
    }
}

/// The Docker config a dockerconfigjson copy holds, decoded and parsed.
fn docker_config(copy: &Secret) -> Value {
    let text = secret_value(copy, ".dockerconfigjson").expect("a .dockerconfigjson key");
    serde_json::from_str(&text).expect("the Docker config is JSON")
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

async fn put_config_map(h: &Harness, ns: &str, name: &str, data: Value) {
    h.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": ns}, "data": data}))
        .await;
}

async fn patch_secret(h: &Harness, ns: &str, name: &str, string_data: Value) {
    h.secrets(ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"stringData": string_data})),
        )
        .await
        .unwrap();
}

/// `examples/registry-from-parts.yaml` as its comments say: a valid dockerconfigjson in
/// flux-apps, following each input's rotation; its input deleted stops the rule with the copy
/// as it was, and re-created lets it go on.
#[tokio::test]
async fn registry_credentials_are_assembled_from_a_secret_and_a_config_map() {
    let h = harness().await;
    apply_example(&h, "registry-from-parts.yaml").await;
    let copy = eventually("the assembled copy in flux-apps", || async {
        h.secrets("flux-apps").get_opt("chart-registry").await.unwrap()
    })
    .await;
    assert_eq!(copy.type_.as_deref(), Some("kubernetes.io/dockerconfigjson"));
    let keys: Vec<String> = copy.data.clone().unwrap_or_default().into_keys().collect();
    assert_eq!(
        keys,
        [".dockerconfigjson"],
        "replaceData: the source's keys are gone"
    );
    let auth = &docker_config(&copy)["auths"]["registry.example.com"];
    assert_eq!(auth["username"], "demo-robot");
    assert_eq!(auth["password"], "not-a-real-password");
    assert_eq!(auth["auth"], b64("demo-robot:not-a-real-password"));
    h.wait_ready("platform-registry", "chart-registry-pull", "True", "Synced")
        .await;

    // The source rotates: the copy follows.
    patch_secret(
        &h,
        "platform-registry",
        "registry-robot",
        json!({"password": "rotated-1"}),
    )
    .await;
    eventually("the rotated password in the copy", || async {
        let copy = h.secrets("flux-apps").get("chart-registry").await.unwrap();
        let auth = docker_config(&copy)["auths"]["registry.example.com"].clone();
        (auth["password"] == "rotated-1" && auth["auth"] == b64("demo-robot:rotated-1")).then_some(())
    })
    .await;

    // The input rotates: the copy follows.
    put_config_map(
        &h,
        "platform-registry",
        "registry-endpoint",
        json!({"host": "mirror.example.com"}),
    )
    .await;
    eventually("the new host in the copy", || async {
        let copy = h.secrets("flux-apps").get("chart-registry").await.unwrap();
        let auths = docker_config(&copy)["auths"].clone();
        (auths.get("mirror.example.com").is_some() && auths.get("registry.example.com").is_none())
            .then_some(())
    })
    .await;
    h.wait_ready("platform-registry", "chart-registry-pull", "True", "Synced")
        .await;

    // The input goes: nothing is written, the rule says which input and why.
    let before = h.secrets("flux-apps").get("chart-registry").await.unwrap();
    h.config_maps("platform-registry")
        .delete("registry-endpoint", &DeleteParams::default())
        .await
        .unwrap();
    let refused = h
        .wait_ready(
            "platform-registry",
            "chart-registry-pull",
            "False",
            "InputNotFound",
        )
        .await;
    let message = &refused.status.unwrap().conditions[0].message;
    assert!(
        message.contains("input endpoint (ConfigMap platform-registry/registry-endpoint) does not exist"),
        "{message}"
    );
    patch_secret(
        &h,
        "platform-registry",
        "registry-robot",
        json!({"password": "rotated-2"}),
    )
    .await;
    stays(
        "the copy as it was while its input is missing",
        Duration::from_secs(2),
        || async {
            let now = h.secrets("flux-apps").get("chart-registry").await.unwrap();
            now.data == before.data && now.metadata.resource_version == before.metadata.resource_version
        },
    )
    .await;

    // It comes back: the copy is made from both again.
    put_config_map(
        &h,
        "platform-registry",
        "registry-endpoint",
        json!({"host": "registry.example.com"}),
    )
    .await;
    eventually("the copy made from the re-created input", || async {
        let copy = h.secrets("flux-apps").get("chart-registry").await.unwrap();
        let auth = docker_config(&copy)["auths"]["registry.example.com"].clone();
        (auth["password"] == "rotated-2").then_some(())
    })
    .await;
    h.wait_ready("platform-registry", "chart-registry-pull", "True", "Synced")
        .await;
}

fn rule(spec: Value) -> Value {
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
           "metadata": {"name": "assembled", "namespace": "team"}, "spec": spec})
}

async fn team(h: &Harness) {
    h.namespace("team", &[], &[]).await;
    for ns in ["tenant-a", "tenant-b"] {
        h.namespace(ns, &[("tier", "x")], &[("mimeo.dev/accept-from", "team")])
            .await;
    }
    h.put_secret("team", "robot", &[("username", "u"), ("password", "p")])
        .await;
}

/// A template that cannot render for one target fails that copy only, naming the template and
/// its line; the other copy is written.
#[tokio::test]
async fn a_template_error_fails_only_that_copy() {
    let h = harness().await;
    team(&h).await;
    put_config_map(&h, "team", "hosts", json!({"tenant-a": "a.example.com"})).await;
    h.apply(rule(json!({
        "source": {"kind": "Secret", "name": "robot"},
        "inputs": [{"name": "hosts", "from": {"kind": "ConfigMap", "name": "hosts"}}],
        "targets": [{"namespaceSelector": {"matchLabels": {"tier": "x"}}}],
        "transforms": [{"plugin": "file://template.wasm", "config": {
            "stringData": {"host": "first line\n{{ inputs.hosts.data[target.namespace] }}"}}}],
    })))
    .await;
    let written = eventually("the copy in tenant-a", || async {
        h.secrets("tenant-a").get_opt("robot").await.unwrap()
    })
    .await;
    assert_eq!(
        secret_value(&written, "host").as_deref(),
        Some("first line\na.example.com")
    );
    let failed = h.wait_ready("team", "assembled", "False", "PluginFailed").await;
    let status = failed.status.unwrap();
    let copy = status
        .problems
        .iter()
        .find(|c| c.namespace.as_deref() == Some("tenant-b"))
        .unwrap();
    let message = copy.message.as_deref().unwrap();
    assert!(
        message.contains("stringData[host]"),
        "names the template: {message}"
    );
    assert!(message.contains("line 2"), "names the line: {message}");
    assert!(h.secrets("tenant-b").get_opt("robot").await.unwrap().is_none());
}

/// A component of interface 0.1.0 (which never sees inputs) and one of 0.2.0 in one chain.
#[tokio::test]
async fn plugins_of_both_interface_versions_run_in_one_chain() {
    let h = harness().await;
    team(&h).await;
    put_config_map(&h, "team", "owner", json!({"team": "payments"})).await;
    h.apply(rule(json!({
        "source": {"kind": "Secret", "name": "robot"},
        "inputs": [{"name": "owner", "from": {"kind": "ConfigMap", "name": "owner"}}],
        "targets": [{"namespace": "tenant-a"}],
        "transforms": [
            {"plugin": "file://legacy-v0-1.wasm"},
            {"plugin": "file://template.wasm", "config": {
                "annotations": {"example.com/owner": "{{ inputs.owner.data.team }}"}}},
        ],
    })))
    .await;
    let copy = eventually("the copy through both plugins", || async {
        h.secrets("tenant-a").get_opt("robot").await.unwrap()
    })
    .await;
    let labels = copy.metadata.labels.clone().unwrap_or_default();
    let annotations = copy.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(labels.get("legacy-plugin").map(String::as_str), Some("v0.1.0"));
    assert_eq!(
        annotations.get("example.com/owner").map(String::as_str),
        Some("payments")
    );
    assert_eq!(secret_value(&copy, "password").as_deref(), Some("p"));
    h.wait_ready("team", "assembled", "True", "Synced").await;
}

/// A copy whose declared type needs a key the chain did not make is not written, and says which.
#[tokio::test]
async fn a_declared_type_is_checked_before_the_write() {
    let h = harness().await;
    team(&h).await;
    h.apply(rule(json!({
        "source": {"kind": "Secret", "name": "robot"},
        "secretType": "kubernetes.io/tls",
        "targets": [{"namespace": "tenant-a"}],
        "transforms": [{"plugin": "file://template.wasm", "config": {
            "stringData": {"tls.crt": "{{ object.data.username | b64decode }}"}}}],
    })))
    .await;
    let failed = h.wait_ready("team", "assembled", "False", "PluginFailed").await;
    let message = failed.status.unwrap().problems[0].message.clone().unwrap();
    assert!(
        message.contains("a Secret of type kubernetes.io/tls needs the key tls.key"),
        "{message}"
    );
    assert!(
        !message.contains("\"p\"") && !message.contains(": p"),
        "no values: {message}"
    );
    assert!(h.secrets("tenant-a").get_opt("robot").await.unwrap().is_none());
}

/// What a tenant who may write SyncRules only in its own namespace cannot make mimeo read: an
/// input in another namespace (refused by the apiserver), an input of a kind the installation
/// does not sync (refused by mimeo), and a `secretType` mimeo never writes.
#[tokio::test]
async fn a_tenant_cannot_read_inputs_beyond_its_namespace() {
    let h = harness().await;
    team(&h).await;
    h.namespace("kube-secrets", &[], &[]).await;
    h.put_secret("kube-secrets", "root", &[("token", "hunter2")])
        .await;
    let tenant = tenant_client(&h, "team").await;
    let template = json!([{"plugin": "file://template.wasm", "config": {
        "stringData": {"stolen": "{{ inputs.root.data.token }}"}}}]);

    let elsewhere = apply_as(
        &tenant,
        rule(json!({
            "source": {"kind": "Secret", "name": "robot"},
            "inputs": [{"name": "root", "from": {"kind": "Secret", "name": "root", "namespace": "kube-secrets"}}],
            "targets": [{"namespace": "tenant-a"}],
            "transforms": template,
        })),
    )
    .await
    .unwrap_err();
    assert!(
        elsewhere
            .to_string()
            .contains("a SyncRule reads inputs from its own namespace only"),
        "{elsewhere}"
    );

    // A type Kubernetes would fill with a token: not among the types a rule may declare.
    let token = apply_as(
        &tenant,
        rule(json!({"source": {"kind": "Secret", "name": "robot"},
                    "secretType": "kubernetes.io/service-account-token",
                    "targets": [{"namespace": "tenant-a"}], "transforms": template})),
    )
    .await
    .unwrap_err();
    assert!(token.to_string().contains("Unsupported value"), "{token}");

    // A kind the installation does not sync is not read as an input either.
    apply_as(
        &tenant,
        rule(json!({"source": {"kind": "Secret", "name": "robot"},
                    "inputs": [{"name": "sa", "from": {"apiVersion": "v1", "kind": "ServiceAccount", "name": "tenant"}}],
                    "targets": [{"namespace": "tenant-a"}], "transforms": template})),
    )
    .await
    .unwrap();
    let refused = h.wait_ready("team", "assembled", "False", "KindNotAllowed").await;
    let message = &refused.status.unwrap().conditions[0].message;
    assert!(message.contains("input sa"), "{message}");
    assert!(h.secrets("tenant-a").get_opt("robot").await.unwrap().is_none());
}

/// The schema refuses what cannot work: inputs with no plugin to hand them to, a type for a
/// ConfigMap, two inputs of one name.
#[tokio::test]
async fn the_schema_refuses_inputs_and_types_that_cannot_work() {
    let h = Harness::without_controller().await;
    h.namespace("team", &[], &[]).await;
    let api = kube::Api::<SyncRule>::namespaced(h.client.clone(), "team");
    let input = json!({"name": "x", "from": {"kind": "ConfigMap", "name": "x"}});
    let template = json!([{"plugin": "file://template.wasm"}]);
    for (spec, expected) in [
        (
            json!({"source": {"kind": "Secret", "name": "s"}, "targets": [{"namespace": "a"}], "inputs": [input]}),
            "inputs are handed to the transform plugins",
        ),
        (
            json!({"source": {"kind": "ConfigMap", "name": "s"}, "targets": [{"namespace": "a"}],
                   "secretType": "kubernetes.io/tls"}),
            "secretType is for copies of Secrets",
        ),
        (
            json!({"source": {"kind": "Secret", "name": "s"}, "targets": [{"namespace": "a"}],
                   "inputs": [input, input], "transforms": template}),
            "Duplicate value",
        ),
        (
            json!({"source": {"kind": "Secret", "name": "s"}, "targets": [{"namespace": "a"}],
                   "inputs": [{"name": "1x", "from": {"kind": "ConfigMap", "name": "x"}}], "transforms": template}),
            "should match",
        ),
    ] {
        let object: SyncRule = serde_json::from_value(rule(spec)).unwrap();
        let e = api
            .create(&kube::api::PostParams::default(), &object)
            .await
            .unwrap_err();
        assert!(e.to_string().contains(expected), "expected {expected:?}: {e}");
    }
}
