//! The sync controller's scenarios, each against a real kube-apiserver with the controller
//! running in-process.

mod common;

use common::{Harness, eventually, secret, secret_value, stays};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::time::{Duration, Instant};

fn sync_rule(ns: &str, name: &str, spec: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule", "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

/// 1. Registry credentials next to a HelmRelease, and a rotation reaching the copy.
#[tokio::test]
async fn registry_credentials_follow_rotation() {
    let h = Harness::start().await;
    h.namespace("platform-helm", &[], &[]).await;
    h.namespace("cluster-a", &[], &[("mimeo.dev/accept-from", "platform-helm")])
        .await;
    let creds = secret(
        "platform-helm",
        "registry-creds",
        "kubernetes.io/dockerconfigjson",
        &[(".dockerconfigjson", r#"{"auths":{"r.example":{"auth":"djE="}}}"#)],
    );
    h.secrets("platform-helm")
        .create(&PostParams::default(), &creds)
        .await
        .unwrap();
    h.apply(sync_rule(
        "platform-helm",
        "chart-registry-creds",
        json!({
            "source": {"kind": "Secret", "name": "registry-creds"},
            "targets": [{"namespace": "cluster-a", "name": "helm-registry"}],
        }),
    ))
    .await;

    let copy = eventually("the copy in cluster-a", || async {
        h.secrets("cluster-a").get_opt("helm-registry").await.unwrap()
    })
    .await;
    assert_eq!(copy.type_.as_deref(), Some("kubernetes.io/dockerconfigjson"));
    assert_eq!(
        secret_value(&copy, ".dockerconfigjson").unwrap(),
        r#"{"auths":{"r.example":{"auth":"djE="}}}"#
    );
    let labels = copy.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("mimeo.dev/managed-by").map(String::as_str),
        Some("mimeo")
    );
    let annotations = copy.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations["mimeo.dev/rule"],
        "SyncRule/platform-helm/chart-registry-creds"
    );
    assert_eq!(
        annotations["mimeo.dev/source"],
        "Secret/platform-helm/registry-creds"
    );
    let managers: Vec<String> = copy
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(
        managers,
        ["mimeo"],
        "written by server-side apply under one field manager"
    );

    let rule = h
        .wait_ready("platform-helm", "chart-registry-creds", "True", "Synced")
        .await;
    let status = rule.status.unwrap();
    assert_eq!(status.copies.as_deref(), Some("1/1"));
    assert_eq!(status.observed_generation, rule.metadata.generation);
    assert_eq!(status.targets.len(), 1);
    assert!(
        status.targets[0]
            .hash
            .as_deref()
            .is_some_and(|h| h.starts_with("sha256:"))
    );

    let rotated = secret(
        "platform-helm",
        "registry-creds",
        "kubernetes.io/dockerconfigjson",
        &[(".dockerconfigjson", r#"{"auths":{"r.example":{"auth":"djI="}}}"#)],
    );
    let started = Instant::now();
    h.secrets("platform-helm")
        .replace("registry-creds", &PostParams::default(), &rotated)
        .await
        .unwrap();
    eventually("the rotated value in the copy", || async {
        let copy = h.secrets("cluster-a").get("helm-registry").await.unwrap();
        secret_value(&copy, ".dockerconfigjson")
            .filter(|v| v.contains("djI="))
            .map(|_| ())
    })
    .await;
    let took = started.elapsed();
    println!("rotation reached the copy in {took:?}");
    assert!(
        took < Duration::from_secs(1),
        "rotation took {took:?}, more than a second"
    );
}
