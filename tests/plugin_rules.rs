//! Transform plugins in rules, against a real apiserver: a chain shapes the copies, a skip leaves
//! a namespace without one, and a failure leaves the previous copy as it was.

mod common;

use common::{Harness, eventually, secret_value};
use mimeo::controller::ControllerConfig;
use serde_json::json;
use std::time::Duration;

async fn harness() -> Harness {
    let config = ControllerConfig {
        plugin_dir: Some(common::plugin_dir()),
        ..Default::default()
    };
    let h = Harness::start_with(config).await;
    h.namespace("platform", &[], &[]).await;
    for ns in ["tenant-a", "tenant-b"] {
        h.namespace(ns, &[("tier", "x")], &[("mimeo.dev/accept-from", "platform")])
            .await;
    }
    h.put_secret(
        "platform",
        "registry",
        &[(".dockerconfigjson", "{}"), ("username", "u"), ("password", "p")],
    )
    .await;
    h
}

fn rule(transforms: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule", "metadata": {"name": "registry", "namespace": "platform"},
           "spec": {"source": {"kind": "Secret", "name": "registry"},
                    "targets": [{"namespaceSelector": {"matchLabels": {"tier": "x"}}}],
                    "transforms": transforms}})
}

#[tokio::test]
async fn a_chain_filters_then_renames_keys() {
    let h = harness().await;
    h.apply(rule(json!([
        {"plugin": "file://filter-keys.wasm", "config": {"include": [".dockerconfigjson"]}},
        {"plugin": "file://rename-keys.wasm", "config": {"rename": {".dockerconfigjson": "config.json"}}},
    ])))
    .await;
    for ns in ["tenant-a", "tenant-b"] {
        let copy = eventually(&format!("the transformed copy in {ns}"), || async {
            h.secrets(ns).get_opt("registry").await.unwrap()
        })
        .await;
        let keys: Vec<String> = copy.data.clone().unwrap_or_default().into_keys().collect();
        assert_eq!(keys, ["config.json"]);
        assert_eq!(secret_value(&copy, "config.json").as_deref(), Some("{}"));
    }
    h.wait_ready("platform", "registry", "True", "Synced").await;
}

#[tokio::test]
async fn a_skip_leaves_one_namespace_without_a_copy_and_says_why() {
    let h = harness().await;
    h.apply(rule(
        json!([{"plugin": "file://misbehave.wasm", "config": {"skip-namespace": "tenant-b"}}]),
    ))
    .await;
    eventually("the copy in tenant-a", || async {
        h.secrets("tenant-a").get_opt("registry").await.unwrap()
    })
    .await;
    let rule = h.wait_ready("platform", "registry", "True", "Synced").await;
    assert!(
        rule.status.as_ref().unwrap().conditions[0]
            .message
            .contains("1 skipped by plugins")
    );
    let status = rule.status.unwrap();
    let skipped = status
        .targets
        .iter()
        .find(|c| c.namespace.as_deref() == Some("tenant-b"))
        .unwrap();
    assert!(
        skipped
            .message
            .as_deref()
            .unwrap()
            .contains("skipped by plugin file://misbehave.wasm"),
        "{skipped:?}"
    );
    assert!(h.secrets("tenant-b").get_opt("registry").await.unwrap().is_none());
}

#[tokio::test]
async fn a_failing_plugin_leaves_the_previous_copy() {
    let h = harness().await;
    h.apply(rule(
        json!([{"plugin": "file://filter-keys.wasm", "config": {"include": ["username"]}}]),
    ))
    .await;
    let before = eventually("the first copy", || async {
        h.secrets("tenant-a").get_opt("registry").await.unwrap()
    })
    .await;
    h.wait_ready("platform", "registry", "True", "Synced").await;

    h.apply(rule(
        json!([{"plugin": "file://misbehave.wasm", "config": {"do": "loop"}}]),
    ))
    .await;
    let failed = h
        .wait_ready("platform", "registry", "False", "PluginFailed")
        .await;
    let message = failed.status.unwrap().targets[0].message.clone().unwrap();
    assert!(message.contains("deadline"), "{message}");
    common::stays("the previous copy untouched", Duration::from_secs(1), || async {
        h.secrets("tenant-a")
            .get("registry")
            .await
            .unwrap()
            .metadata
            .resource_version
            == before.metadata.resource_version
    })
    .await;

    h.apply(rule(json!([{"plugin": "file://missing.wasm"}]))).await;
    let unavailable = h
        .wait_ready("platform", "registry", "False", "PluginUnavailable")
        .await;
    assert!(
        unavailable.status.unwrap().conditions[0]
            .message
            .contains("missing.wasm")
    );
    assert!(
        h.secrets("tenant-a").get_opt("registry").await.unwrap().is_some(),
        "nothing lost"
    );
}
