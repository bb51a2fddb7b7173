//! The CRDs against a real kube-apiserver: they install, valid rules are accepted, and each
//! invalid shape is refused by the apiserver itself with the message we wrote for it.

use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;
use mimeo::api::{ClusterSyncRule, RemoteCluster, SyncRule};
use mimeo_envtest::ControlPlane;
use serde_json::{Value, json};
use std::path::PathBuf;

fn crd_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crds/mimeo.yaml")
}

async fn plane_with_crds() -> ControlPlane {
    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    println!("control plane ready in {:.2?}", plane.startup_time());
    let names = plane
        .install_crds(&[crd_file()])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        names,
        [
            "syncrules.mimeo.dev",
            "clustersyncrules.mimeo.dev",
            "remoteclusters.mimeo.dev",
            "clusterinventories.mimeo.dev",
            "mimeoconfigs.mimeo.dev"
        ]
    );
    plane.create_namespace("team-a", &[]).await.expect("namespace");
    plane
}

fn sync_rule(spec: Value) -> Value {
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
           "metadata": {"name": "r", "namespace": "team-a"}, "spec": spec})
}

fn cluster_sync_rule(spec: Value) -> Value {
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule",
           "metadata": {"name": "r"}, "spec": spec})
}

/// Creates `object` with a server-side dry run, so cases do not see each other.
async fn create(client: &kube::Client, object: Value) -> Result<(), String> {
    let kind = object["kind"].as_str().unwrap_or_default().to_owned();
    let resource = match kind.as_str() {
        "SyncRule" => ApiResource::erase::<SyncRule>(&()),
        "ClusterSyncRule" => ApiResource::erase::<ClusterSyncRule>(&()),
        "RemoteCluster" => ApiResource::erase::<RemoteCluster>(&()),
        other => panic!("unexpected kind {other}"),
    };
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let object: DynamicObject = serde_json::from_value(object).expect("test object is well-formed");
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    match api.create(&dry_run, &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err(status.message),
        Err(other) => panic!("unexpected client error: {other}"),
    }
}

#[tokio::test]
async fn valid_rules_are_accepted() {
    let plane = plane_with_crds().await;
    let client = plane.client().await.unwrap();
    let cases = [
        (
            "SyncRule by name into a namespace",
            sync_rule(json!({
                "source": {"kind": "Secret", "name": "registry-creds"},
                "targets": [{"namespace": "tenant-a", "name": "helm-registry"}],
                "transforms": [{"plugin": "file://filter-keys.wasm", "config": {"include": [".dockerconfigjson"]}}],
                "conflict": "Fail", "deletion": "Delete",
                "metadata": {"labels": {"include": ["app.kubernetes.io/*"]}},
            })),
        ),
        (
            "SyncRule by selector into selected namespaces of selected clusters",
            sync_rule(json!({
                "source": {"kind": "ConfigMap", "selector": {"matchLabels": {"share": "yes"}}},
                "targets": [{"namespaceSelector": {"matchLabels": {"team": "x"}},
                             "clusterSelector": {"matchLabels": {"region": "eu"}}}],
            })),
        ),
        (
            "SyncRule into namespaces by name pattern",
            sync_rule(json!({
                "source": {"kind": "Secret", "name": "a"},
                "targets": [{"namespacePattern": "app-[0-9]+", "name": "copy"}],
            })),
        ),
        (
            "SyncRule next to openMCP Clusters with a purpose",
            sync_rule(json!({
                "source": {"kind": "Secret", "name": "a"},
                "targets": [{"nextTo": {"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster",
                                        "matchPurposes": [{"operator": "ContainsAny", "values": ["workload"]}],
                                        "matchLabels": {"tier": "prod"}},
                             "cluster": "",
                             "name": "registry-credentials"}],
            })),
        ),
        (
            "SyncRule for any kind by apiVersion",
            sync_rule(json!({
                "source": {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w"},
                "targets": [{"cluster": "workload-eu1"}],
            })),
        ),
        (
            "ClusterSyncRule from a namespace",
            cluster_sync_rule(json!({
                "source": {"kind": "Secret", "namespace": "platform", "name": "pull-secret"},
                "targets": [{"namespaceSelector": {"matchLabels": {"team": "x"}}}],
                "conflict": "Adopt", "deletion": "Orphan",
            })),
        ),
        (
            "SyncRule with an OCI plugin, a refresh interval and a pull secret",
            sync_rule(json!({
                "source": {"kind": "Secret", "name": "a"},
                "targets": [{"namespace": "b"}],
                "transforms": [{"plugin": "oci://registry.example/p:1", "refreshInterval": "1h30m"}],
                "pluginPullSecrets": [{"name": "registry-pull"}],
            })),
        ),
        (
            "ClusterSyncRule creating its target namespace in another cluster",
            cluster_sync_rule(json!({
                "source": {"kind": "Secret", "namespace": "platform", "name": "pull-secret", "cluster": ""},
                "targets": [{"cluster": "workload-eu1", "namespace": "apps", "createNamespace": true}],
            })),
        ),
        (
            "ClusterSyncRule for a ClusterPolicy to other clusters",
            cluster_sync_rule(json!({
                "source": {"kind": "ClusterPolicy", "name": "require-labels"},
                "targets": [{"clusterSelector": {"matchLabels": {"env": "prod"}}}],
            })),
        ),
        (
            "RemoteCluster",
            json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster",
                   "metadata": {"name": "workload-eu1", "labels": {"region": "eu"}},
                   "spec": {"kubeconfigSecretRef": {"namespace": "mimeo-system", "name": "eu1-kubeconfig", "key": "kubeconfig"},
                            "allowedNamespaces": {"matchLabels": {"platform": "true"}}}}),
        ),
    ];
    for (case, object) in cases {
        if let Err(message) = create(&client, object).await {
            panic!("{case}: rejected: {message}");
        }
    }
}

#[tokio::test]
async fn invalid_rules_are_rejected_with_our_messages() {
    let plane = plane_with_crds().await;
    let client = plane.client().await.unwrap();
    let cases = [
        (
            "name and selector both set",
            sync_rule(json!({
                "source": {"kind": "Secret", "name": "a", "selector": {"matchLabels": {"x": "y"}}},
                "targets": [{"namespace": "b"}],
            })),
            "set exactly one of source.name (one object) or source.selector",
        ),
        (
            "neither name nor selector",
            sync_rule(json!({"source": {"kind": "Secret"}, "targets": [{"namespace": "b"}]})),
            "set exactly one of source.name (one object) or source.selector",
        ),
        (
            "no targets",
            sync_rule(json!({"source": {"kind": "Secret", "name": "a"}, "targets": []})),
            "at least one target is needed: say where copies go",
        ),
        (
            "unknown conflict value",
            sync_rule(
                json!({"source": {"kind": "Secret", "name": "a"}, "targets": [{"namespace": "b"}],
                             "conflict": "Replace"}),
            ),
            r#"spec.conflict: Unsupported value: "Replace": supported values: "Fail", "Adopt", "Overwrite", "Skip""#,
        ),
        (
            "unknown deletion value",
            sync_rule(
                json!({"source": {"kind": "Secret", "name": "a"}, "targets": [{"namespace": "b"}],
                             "deletion": "Keep"}),
            ),
            r#"spec.deletion: Unsupported value: "Keep": supported values: "Delete", "Orphan""#,
        ),
        (
            "namespace in a SyncRule source",
            sync_rule(
                json!({"source": {"kind": "Secret", "name": "a", "namespace": "other"},
                             "targets": [{"namespace": "b"}]}),
            ),
            "a SyncRule copies only from its own namespace: remove spec.source.namespace, or use a ClusterSyncRule",
        ),
        (
            "namespace and namespaceSelector both set",
            sync_rule(json!({"source": {"kind": "Secret", "name": "a"},
                             "targets": [{"namespace": "b", "namespaceSelector": {}}]})),
            "set only one of namespace, namespaceSelector, namespacePattern and nextTo in a target",
        ),
        (
            "namespace and namespacePattern both set",
            sync_rule(json!({"source": {"kind": "Secret", "name": "a"},
                             "targets": [{"namespace": "b", "namespacePattern": "b-.*"}]})),
            "set only one of namespace, namespaceSelector, namespacePattern and nextTo in a target",
        ),
        (
            "namespaceSelector and namespacePattern both set",
            sync_rule(json!({"source": {"kind": "Secret", "name": "a"},
                             "targets": [{"namespaceSelector": {}, "namespacePattern": "b-.*"}]})),
            "set only one of namespace, namespaceSelector, namespacePattern and nextTo in a target",
        ),
        (
            "namespace and nextTo both set",
            sync_rule(json!({"source": {"kind": "Secret", "name": "a"},
                             "targets": [{"namespace": "b",
                                          "nextTo": {"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster"}}]})),
            "set only one of namespace, namespaceSelector, namespacePattern and nextTo in a target",
        ),
        (
            "nextTo in another cluster",
            sync_rule(json!({"source": {"kind": "Secret", "name": "a"},
                             "targets": [{"cluster": "eu1",
                                          "nextTo": {"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster"}}]})),
            "nextTo reads the objects of the cluster mimeo runs in: remove cluster and clusterSelector from a target with nextTo",
        ),
        (
            "createNamespace with nextTo",
            cluster_sync_rule(
                json!({"source": {"kind": "Secret", "namespace": "a", "name": "a"},
                       "targets": [{"nextTo": {"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster"},
                                    "createNamespace": true}]}),
            ),
            "createNamespace needs a namespace by name: namespaces matched by a selector, a pattern or nextTo already exist",
        ),
        (
            "cluster and clusterSelector both set",
            sync_rule(json!({"source": {"kind": "Secret", "name": "a"},
                             "targets": [{"namespace": "b", "cluster": "c", "clusterSelector": {}}]})),
            "set cluster or clusterSelector in a target, not both",
        ),
        (
            "a Secret target without a namespace",
            sync_rule(json!({"source": {"kind": "Secret", "name": "a"}, "targets": [{"name": "b"}]})),
            "every target needs namespace, namespaceSelector, namespacePattern or nextTo: Secrets, ConfigMaps and Policies live in namespaces",
        ),
        (
            "an unknown kind without apiVersion",
            sync_rule(json!({"source": {"kind": "Widget", "name": "a"}, "targets": [{"namespace": "b"}]})),
            "source.kind must be Secret, ConfigMap, Policy or ClusterPolicy; for any other kind set source.apiVersion too",
        ),
        (
            "a ClusterPolicy in a SyncRule",
            sync_rule(
                json!({"source": {"kind": "ClusterPolicy", "name": "a"}, "targets": [{"cluster": "c"}]}),
            ),
            "a ClusterPolicy is cluster-scoped and cannot live in a SyncRule's namespace: use a ClusterSyncRule",
        ),
        (
            "a ClusterSyncRule for a Secret without a source namespace",
            cluster_sync_rule(
                json!({"source": {"kind": "Secret", "name": "a"}, "targets": [{"namespace": "b"}]}),
            ),
            "spec.source.namespace is required: name the namespace the source lives in",
        ),
        (
            "a ClusterPolicy copied into a namespace",
            cluster_sync_rule(json!({"source": {"kind": "ClusterPolicy", "name": "a"},
                                     "targets": [{"namespace": "b", "cluster": "c"}]})),
            "a ClusterPolicy is cluster-scoped: its targets name clusters, not namespaces",
        ),
        (
            "a pull secret in another namespace from a SyncRule",
            sync_rule(
                json!({"source": {"kind": "Secret", "name": "a"}, "targets": [{"namespace": "b"}],
                             "pluginPullSecrets": [{"name": "p", "namespace": "elsewhere"}]}),
            ),
            "a SyncRule reads plugin pull secrets from its own namespace: remove pluginPullSecrets[].namespace",
        ),
        (
            "a pull secret without a namespace in a ClusterSyncRule",
            cluster_sync_rule(
                json!({"source": {"kind": "Secret", "namespace": "a", "name": "a"},
                                     "targets": [{"namespace": "b"}], "pluginPullSecrets": [{"name": "p"}]}),
            ),
            "pluginPullSecrets[].namespace is required in a ClusterSyncRule: name the Secret's namespace",
        ),
        (
            "a refresh interval that is not a duration",
            sync_rule(
                json!({"source": {"kind": "Secret", "name": "a"}, "targets": [{"namespace": "b"}],
                             "transforms": [{"plugin": "oci://r.example/p:1", "refreshInterval": "daily"}]}),
            ),
            "spec.transforms[0].refreshInterval",
        ),
        (
            "createNamespace in a SyncRule",
            sync_rule(json!({"source": {"kind": "Secret", "name": "a"},
                             "targets": [{"namespace": "b", "createNamespace": true}]})),
            "createNamespace is only for ClusterSyncRules: a SyncRule's author may not create namespaces",
        ),
        (
            "forEach in a SyncRule",
            sync_rule(json!({"source": {"kind": "Secret", "name": "a"},
                             "targets": [{"namespace": "b", "forEach": {"apiVersion": "example.com/v1", "kind": "Order"}}]})),
            "forEach is only for ClusterSyncRules",
        ),
        (
            "forEach with nextTo",
            cluster_sync_rule(
                json!({"source": {"kind": "Secret", "namespace": "a", "name": "a"},
                                     "targets": [{"nextTo": {"apiVersion": "example.com/v1", "kind": "Cluster"},
                                                  "forEach": {"apiVersion": "example.com/v1", "kind": "Order"}}]}),
            ),
            "forEach chooses places with namespace, namespaceSelector, cluster and clusterSelector: remove nextTo and namespacePattern from a target with forEach",
        ),
        (
            "createNamespace with a namespace selector",
            cluster_sync_rule(
                json!({"source": {"kind": "Secret", "namespace": "a", "name": "a"},
                                     "targets": [{"namespaceSelector": {}, "createNamespace": true}]}),
            ),
            "createNamespace needs a namespace by name: namespaces matched by a selector, a pattern or nextTo already exist",
        ),
        (
            "a RemoteCluster without a kubeconfig reference",
            json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster",
                   "metadata": {"name": "c"}, "spec": {}}),
            "spec.kubeconfigSecretRef is required: name the Secret holding the cluster's kubeconfig",
        ),
    ];
    let mut failures = Vec::new();
    for (case, object, expected) in cases {
        match create(&client, object).await {
            Ok(()) => failures.push(format!("{case}: accepted, expected {expected:?}")),
            Err(message) if message.contains(expected) => println!("{case}: {message}"),
            Err(message) => failures.push(format!(
                "{case}: rejected with {message:?}, expected {expected:?}"
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `kubectl explain` on the installed CRDs says what a kind and a field are (the unit test
/// `every_field_and_kind_is_described` holds every field to it).
#[tokio::test]
async fn kubectl_explain_describes_the_kinds_and_their_fields() {
    let plane = plane_with_crds().await;
    // The apiserver publishes a new CRD's schema a moment after it is established.
    let explain = |what: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let (ok, out) = crate::harness::run_kubectl(plane.kubeconfig_path(), &["explain", what], b"");
            if ok {
                return out;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "kubectl explain {what}: {out}"
            );
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    };
    let kind = explain("syncrules");
    assert!(kind.contains("Copies objects of its own namespace"), "{kind}");
    assert!(!kind.contains("Auto-generated"), "{kind}");
    let field = explain("syncrules.spec.metadata.labels.include");
    assert!(field.contains("Patterns of the keys kept"), "{field}");
    let field = explain("clustersyncrules.spec.targets.forEach");
    assert!(field.contains("once for every object of a kind"), "{field}");
}
