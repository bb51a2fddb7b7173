//! Copy names made per source and place (`targets[].name` with placeholders): a service
//! provider's credentials under `sp-<provider>-<source>` in every MCP namespace, from a rule
//! written with `kubectl apply`. Renaming the template moves the copies: the new names are
//! written, the old removed. A template that cannot give a name stops the rule with
//! `InvalidName`, and one that gives an invalid name for one copy refuses that copy alone.

use crate::harness;

use harness::{Harness, eventually, secret_value};
use serde_json::json;

fn rule(name: &str) -> serde_json::Value {
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule", "metadata": {"name": "crossplane-registry"},
           "spec": {"source": {"kind": "Secret", "namespace": "openmcp-system",
                               "selector": {"matchLabels": {"provider": "crossplane"}}},
                    "targets": [{"namespaceSelector": {"matchLabels": {"openmcp.cloud/managed-by": "ManagedControlPlane"}},
                                 "name": name}]}})
}

#[tokio::test]
async fn copies_are_named_per_source_and_place() {
    let h = Harness::start().await;
    h.namespace("openmcp-system", &[], &[]).await;
    for ns in ["mcp--aaaa", "mcp--bbbb"] {
        h.namespace(ns, &[("openmcp.cloud/managed-by", "ManagedControlPlane")], &[])
            .await;
    }
    for (name, value) in [("chart-registry", "one"), ("image-registry", "two")] {
        harness::kubectl(
            h.plane.kubeconfig_path(),
            &[
                "create",
                "secret",
                "generic",
                name,
                "-n",
                "openmcp-system",
                &format!("--from-literal=token={value}"),
            ],
            b"",
        );
        harness::kubectl(
            h.plane.kubeconfig_path(),
            &[
                "label",
                "secret",
                name,
                "-n",
                "openmcp-system",
                "provider=crossplane",
            ],
            b"",
        );
    }
    harness::kubectl_apply(&h.plane, &rule("sp-crossplane-{{source.name}}"));
    for ns in ["mcp--aaaa", "mcp--bbbb"] {
        eventually("both sources' copies under the provider's names", || async {
            (h.copy_names(ns).await == ["sp-crossplane-chart-registry", "sp-crossplane-image-registry"])
                .then_some(())
        })
        .await;
    }
    let copy = h
        .secrets("mcp--aaaa")
        .get("sp-crossplane-image-registry")
        .await
        .unwrap();
    assert_eq!(secret_value(&copy, "token").as_deref(), Some("two"));

    // A new template: the copies move to the new names, the old ones go.
    harness::kubectl_apply(&h.plane, &rule("{{source.name}}.{{target.namespace}}"));
    eventually("the copies under the new names only", || async {
        (h.copy_names("mcp--bbbb").await == ["chart-registry.mcp--bbbb", "image-registry.mcp--bbbb"])
            .then_some(())
    })
    .await;

    // A template that gives no name at all stops the rule, saying why; the copies stay.
    harness::kubectl_apply(&h.plane, &rule("{{source.labels}}"));
    let problem = eventually("the rule refused with InvalidName", || async {
        let rule = kube::Api::<mimeo::api::ClusterSyncRule>::all(h.client.clone())
            .get("crossplane-registry")
            .await
            .unwrap();
        let ready = rule.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
        (ready.reason == "InvalidName").then_some(ready.message)
    })
    .await;
    assert!(
        problem.contains("unknown placeholder {{source.labels}}"),
        "{problem}"
    );
    assert_eq!(
        h.copy_names("mcp--aaaa").await,
        ["chart-registry.mcp--aaaa", "image-registry.mcp--aaaa"]
    );

    // One that gives an invalid name for a copy in this cluster (target.cluster is empty here)
    // refuses those copies alone, and says which name it gave.
    harness::kubectl_apply(&h.plane, &rule("{{source.name}}-{{target.cluster}}"));
    let problem = eventually("the copies refused for their name", || async {
        let rule = kube::Api::<mimeo::api::ClusterSyncRule>::all(h.client.clone())
            .get("crossplane-registry")
            .await
            .unwrap();
        let status = rule.status?;
        let problem = status
            .problems
            .into_iter()
            .find(|p| p.state == mimeo::api::CopyState::Refused)?;
        problem.message
    })
    .await;
    assert!(
        problem.contains("gives \"chart-registry-\"") || problem.contains("gives \"image-registry-\""),
        "{problem}"
    );
}
