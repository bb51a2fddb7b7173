//! Kinds beyond Secrets and ConfigMaps, against real control planes with Kyverno's real CRDs
//! (from `../shared/fixtures/kyverno`, or `MIMEO_KYVERNO_FIXTURES`): no Kyverno controller runs;
//! mimeo copies the objects and the apiserver validates them against Kyverno's schema.

use crate::harness;

use harness::{Harness, eventually};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use mimeo::api::{ClusterSyncRule, CopyState, RuleStatus, SyncRule};
use mimeo::controller::ControllerConfig;
use mimeo_envtest::ControlPlane;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Kyverno's fixtures: `MIMEO_KYVERNO_FIXTURES`, else `../shared/fixtures/kyverno` beside the
/// repository, else the workplace's shared folder. Missing fixtures fail the tests that need them.
fn fixtures() -> PathBuf {
    if let Some(dir) = std::env::var_os("MIMEO_KYVERNO_FIXTURES") {
        return PathBuf::from(dir);
    }
    let beside = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/kyverno");
    let workplace = PathBuf::from("/work/shared/fixtures/kyverno");
    if !beside.exists() && workplace.exists() {
        return workplace;
    }
    beside
}

/// The CRD files in one folder of the fixtures, sorted.
fn crd_files(folder: &str) -> Vec<PathBuf> {
    let dir = fixtures().join(folder);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

fn kyverno_crds() -> Vec<PathBuf> {
    crd_files("crds")
}

/// Kyverno's CEL policy family (`policies.kyverno.io`).
fn cel_crds() -> Vec<PathBuf> {
    crd_files("crds-cel")
}

/// A controller that syncs these kinds.
fn allowing(kinds: &[&str]) -> ControllerConfig {
    ControllerConfig {
        allowed_kinds: kinds.iter().map(|k| k.parse().unwrap()).collect(),
        ..Default::default()
    }
}

/// Every Kyverno object in the sample policy files, by kind: (file, object).
fn sample_policies(kind: &str) -> Vec<(String, Value)> {
    let dir = fixtures().join("policies");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(document).unwrap();
            let is_kyverno = value["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("kyverno.io/"));
            if is_kyverno && value["kind"] == kind {
                out.push((file.file_name().unwrap().to_string_lossy().into_owned(), value));
            }
        }
    }
    assert!(!out.is_empty(), "no {kind} in {}", dir.display());
    out
}

fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap();
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn policies() -> ApiResource {
    resource("kyverno.io/v1", "Policy", "policies")
}

fn cluster_policies() -> ApiResource {
    resource("kyverno.io/v1", "ClusterPolicy", "clusterpolicies")
}

async fn apply_object(client: &Client, resource: &ApiResource, object: &Value) {
    let name = object["metadata"]["name"].as_str().unwrap();
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(object))
        .await
        .unwrap_or_else(|e| panic!("applying {name}: {e}"));
}

async fn get_object(client: &Client, resource: &ApiResource, ns: Option<&str>, name: &str) -> Option<Value> {
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    let object = api.get_opt(name).await.ok()??;
    Some(serde_json::to_value(object).unwrap())
}

async fn cluster_rule_status(h: &Harness, name: &str) -> Option<RuleStatus> {
    Api::<ClusterSyncRule>::all(h.client.clone())
        .get_opt(name)
        .await
        .unwrap()?
        .status
}

/// The source objects of one kind, renamed so that names from different files do not collide,
/// labelled for a selector, and placed in `namespace` (for a namespaced kind).
fn prepared(kind: &str, namespace: Option<&str>) -> Vec<Value> {
    sample_policies(kind)
        .into_iter()
        .enumerate()
        .map(|(i, (file, mut object))| {
            let name = format!("s{i}-{}", object["metadata"]["name"].as_str().unwrap());
            object["apiVersion"] = json!("kyverno.io/v1");
            object["metadata"] = json!({"name": name, "labels": {"fixture": "kyverno"},
                "annotations": {"fixture.mimeo.dev/file": file}});
            if let Some(ns) = namespace {
                object["metadata"]["namespace"] = json!(ns);
            }
            object
        })
        .collect()
}

/// 4 (namespaced half): every sample `Policy` round-trips through a rule unchanged.
#[tokio::test]
async fn every_sample_policy_round_trips_unchanged() {
    let h = Harness::start().await;
    h.plane.install_crds(&kyverno_crds()).await.unwrap();
    h.namespace("policies", &[], &[]).await;
    h.namespace("tenant-a", &[], &[]).await;
    let sources = prepared("Policy", Some("policies"));
    for source in &sources {
        apply_object(&h.client, &policies(), source).await;
    }
    h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule", "metadata": {"name": "all-policies"},
        "spec": {"source": {"kind": "Policy", "namespace": "policies", "selector": {"matchLabels": {"fixture": "kyverno"}}},
                 "targets": [{"namespace": "tenant-a"}]}}))
        .await;
    for source in &sources {
        let name = source["metadata"]["name"].as_str().unwrap();
        let copy = eventually(&format!("a copy of Policy {name}"), || async {
            get_object(&h.client, &policies(), Some("tenant-a"), name).await
        })
        .await;
        let original = get_object(&h.client, &policies(), Some("policies"), name)
            .await
            .unwrap();
        assert_eq!(copy["spec"], original["spec"], "Policy {name} changed on the way");
        assert!(
            copy.get("status")
                .is_none_or(|s| s != &original["status"] || s.is_null())
        );
    }
    println!("{} sample Policies copied unchanged", sources.len());
}

/// 2, 3 and 4 (cluster-scoped half): `ClusterPolicy`s go to another cluster. Without Kyverno's
/// CRDs there the copies wait as `KindNotServed`; once installed, every sample arrives unchanged;
/// deleting a source removes its copy there.
#[tokio::test]
async fn cluster_policies_go_to_other_clusters_once_they_serve_the_kind() {
    let h = Harness::start().await;
    h.plane.install_crds(&kyverno_crds()).await.unwrap();
    let b = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let b_client = b.client().await.unwrap();
    h.namespace("mimeo-system", &[], &[]).await;
    h.register_cluster("b", b.kubeconfig_yaml(), json!({})).await;

    let sources = prepared("ClusterPolicy", None);
    for source in &sources {
        apply_object(&h.client, &cluster_policies(), source).await;
    }
    h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule", "metadata": {"name": "cluster-policies"},
        "spec": {"source": {"kind": "ClusterPolicy", "selector": {"matchLabels": {"fixture": "kyverno"}}},
                 "targets": [{"cluster": "b"}], "deletion": "Delete"}}))
        .await;

    // 3. Cluster B has no Kyverno CRDs yet.
    let waiting = eventually("ClusterPolicy copies KindNotServed in B", || async {
        let status = cluster_rule_status(&h, "cluster-policies").await?;
        let first = status.problems.first()?.clone();
        (first.state == CopyState::KindNotServed && status.problems.len() == sources.len()).then_some(first)
    })
    .await;
    let message = waiting.message.unwrap();
    assert!(
        message.contains("does not serve kyverno.io/v1/ClusterPolicy")
            && message.contains("the CustomResourceDefinition of ClusterPolicy.kyverno.io"),
        "{message}"
    );
    b.install_crds(&kyverno_crds()).await.unwrap();

    // 4. Every sample arrives unchanged.
    for source in &sources {
        let name = source["metadata"]["name"].as_str().unwrap();
        let copy = eventually(&format!("ClusterPolicy {name} in B"), || async {
            get_object(&b_client, &cluster_policies(), None, name).await
        })
        .await;
        let original = get_object(&h.client, &cluster_policies(), None, name)
            .await
            .unwrap();
        assert_eq!(
            copy["spec"], original["spec"],
            "ClusterPolicy {name} changed on the way"
        );
    }
    println!("{} sample ClusterPolicies copied unchanged", sources.len());

    // 2. Deleting a source removes its copy in B.
    let gone = sources[0]["metadata"]["name"].as_str().unwrap().to_owned();
    Api::<DynamicObject>::all_with(h.client.clone(), &cluster_policies())
        .delete(&gone, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the copy of a deleted ClusterPolicy removed from B", || async {
        get_object(&b_client, &cluster_policies(), None, &gone)
            .await
            .is_none()
            .then_some(())
    })
    .await;
    let kept = sources[1]["metadata"]["name"].as_str().unwrap();
    assert!(
        get_object(&b_client, &cluster_policies(), None, kept)
            .await
            .is_some()
    );

    // The kind's CRD removed from B takes the copies with it: the rule says the kind is not
    // served there, and deleting the rule does not wait on copies that cannot exist.
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(b_client.clone());
    crds.delete("clusterpolicies.kyverno.io", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the ClusterPolicy CRD gone from B", || async {
        crds.get_opt("clusterpolicies.kyverno.io")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    eventually("the copies KindNotServed in B again", || async {
        let status = cluster_rule_status(&h, "cluster-policies").await?;
        (status.counts.get("KindNotServed") == Some(&(sources.len() as i64 - 1))).then_some(())
    })
    .await;
    let rules: Api<ClusterSyncRule> = Api::all(h.client.clone());
    rules
        .delete("cluster-policies", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the rule gone once the kind is gone from B", || async {
        rules
            .get_opt("cluster-policies")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}

/// 5: a kind outside the allow-list is refused, a made-up kind says it does not exist, and a
/// cluster-scoped kind aimed at a namespace is refused; none of them writes anything.
#[tokio::test]
async fn kinds_outside_the_allow_list_or_the_cluster_are_refused() {
    let h = Harness::start_with(allowing(&[
        "Secret",
        "ConfigMap",
        "Widget.example.com",
        "ClusterRole.rbac.authorization.k8s.io",
    ]))
    .await;
    h.namespace("team", &[], &[]).await;
    let rule = |name: &str, source: Value, targets: Value| {
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule", "metadata": {"name": name, "namespace": "team"},
               "spec": {"source": source, "targets": targets}})
    };
    h.apply(rule(
        "limits",
        json!({"apiVersion": "v1", "kind": "LimitRange", "name": "x"}),
        json!([{"namespace": "elsewhere"}]),
    ))
    .await;
    let refused = h.wait_ready("team", "limits", "False", "KindNotAllowed").await;
    let message = &refused.status.unwrap().conditions[0].message;
    assert!(
        message.contains("syncs Secret, ConfigMap, Widget.example.com")
            && message.contains("LimitRange is not among them"),
        "{message}"
    );

    h.apply(rule(
        "widgets",
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "name": "x"}),
        json!([{"namespace": "elsewhere"}]),
    ))
    .await;
    let unknown = h.wait_ready("team", "widgets", "False", "KindNotServed").await;
    assert!(
        unknown.status.unwrap().conditions[0]
            .message
            .contains("does not serve example.com/v1/Widget")
    );

    h.apply(rule(
        "roles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": "view"}),
        json!([{"namespace": "elsewhere"}]),
    ))
    .await;
    let scoped = h.wait_ready("team", "roles", "False", "InvalidTarget").await;
    assert!(
        scoped.status.unwrap().conditions[0]
            .message
            .contains("is cluster-scoped and cannot live in a SyncRule's namespace")
    );
    let rules: Api<SyncRule> = Api::namespaced(h.client.clone(), "team");
    for name in ["limits", "widgets", "roles"] {
        let status = rules.get(name).await.unwrap().status.unwrap();
        assert!(
            status.counts.is_empty() && status.clusters.is_empty(),
            "{name} made copies"
        );
    }
}

/// 1: one namespaced `Policy` into three tenant namespaces through `rewrite-namespace`: each copy
/// is accepted by the apiserver and names its own namespace; an update reaches all three.
#[tokio::test]
async fn a_policy_fans_out_with_its_namespaces_rewritten() {
    let config = ControllerConfig {
        plugin_dir: Some(harness::plugin_dir()),
        ..Default::default()
    };
    let h = Harness::start_with(config).await;
    h.plane.install_crds(&kyverno_crds()).await.unwrap();
    h.namespace("policies", &[], &[]).await;
    let tenants = ["tenant-a", "tenant-b", "tenant-c"];
    for tenant in tenants {
        h.namespace(
            tenant,
            &[("tenant", "yes")],
            &[("mimeo.dev/accept-from", "policies")],
        )
        .await;
    }
    let policy = |synchronize: bool| {
        json!({"apiVersion": "kyverno.io/v1", "kind": "Policy",
               "metadata": {"name": "clone-settings", "namespace": "policies"},
               "spec": {"rules": [{
                   "name": "clone-settings",
                   "match": {"any": [{"resources": {"kinds": ["ConfigMap"], "namespaces": ["policies"]}}]},
                   "exclude": {"any": [{"resources": {"namespaces": ["kube-system"]}}]},
                   "generate": {"apiVersion": "v1", "kind": "ConfigMap", "name": "settings",
                                "namespace": "policies", "synchronize": synchronize,
                                "clone": {"namespace": "policies", "name": "base-settings"}}}]}})
    };
    apply_object(&h.client, &policies(), &policy(true)).await;
    h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
        "metadata": {"name": "settings-policy", "namespace": "policies"},
        "spec": {"source": {"kind": "Policy", "name": "clone-settings"},
                 "targets": [{"namespaceSelector": {"matchLabels": {"tenant": "yes"}}}],
                 "transforms": [{"plugin": "file://rewrite-namespace.wasm",
                                 "config": {"rewrites": [{"from": "policies", "to": "{{target.namespace}}"}]}}]}}))
        .await;

    for synchronize in [true, false] {
        if !synchronize {
            apply_object(&h.client, &policies(), &policy(false)).await;
        }
        for tenant in tenants {
            let copy = eventually(
                &format!("the Policy in {tenant} (synchronize {synchronize})"),
                || async {
                    let copy = get_object(&h.client, &policies(), Some(tenant), "clone-settings").await?;
                    (copy["spec"]["rules"][0]["generate"]["synchronize"] == synchronize).then_some(copy)
                },
            )
            .await;
            let rule = &copy["spec"]["rules"][0];
            assert_eq!(rule["generate"]["namespace"], tenant);
            assert_eq!(rule["generate"]["clone"]["namespace"], tenant);
            assert_eq!(
                rule["match"]["any"][0]["resources"]["namespaces"],
                json!([tenant])
            );
            assert_eq!(
                rule["exclude"]["any"][0]["resources"]["namespaces"],
                json!(["kube-system"]),
                "only the mapped namespace is rewritten"
            );
        }
    }
    let rule = h
        .wait_ready("policies", "settings-policy", "True", "Synced")
        .await;
    assert_eq!(rule.status.unwrap().copies.as_deref(), Some("3/3"));
}

/// The expected spec of a copy of a CEL policy from `from` into `tenant`: the source's spec (as
/// the apiserver holds it, defaults filled in) with each string literal `'from'` or `"from"`
/// inside its strings replaced; a field whose whole value is `from` stays.
fn cel_rewritten(spec: &Value, from: &str, tenant: &str) -> Value {
    let text = serde_json::to_string(spec)
        .unwrap()
        .replace(&format!("'{from}'"), &format!("'{tenant}'"))
        .replace(&format!("\\\"{from}\\\""), &format!("\\\"{tenant}\\\""));
    serde_json::from_str(&text).unwrap()
}

/// Issue 18: each of Kyverno's four namespaced CEL samples fanned out, under the default
/// allow-list, to two tenant namespaces through `rewrite-namespace` with `expressions` on: each
/// copy is accepted by the real CRD schema and equals the sample but for the namespace literals
/// of its CEL. A policy whose CEL does not parse is `PluginFailed`, naming the field, and no copy
/// of it is written.
#[tokio::test]
async fn cel_policies_fan_out_with_their_namespace_literals_rewritten() {
    let config = ControllerConfig {
        plugin_dir: Some(harness::plugin_dir()),
        ..Default::default()
    };
    let h = Harness::start_with(config).await;
    h.plane.install_crds(&cel_crds()).await.unwrap();
    let dir = fixtures().join("policies-cel");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let samples: Vec<Value> = files
        .iter()
        .map(|f| serde_yaml_ng::from_str(&std::fs::read_to_string(f).unwrap()).unwrap())
        .collect();
    assert_eq!(samples.len(), 4);
    let mut sources: Vec<String> = samples
        .iter()
        .map(|o| o["metadata"]["namespace"].as_str().unwrap().to_owned())
        .collect();
    sources.sort();
    sources.dedup();
    for ns in &sources {
        h.namespace(ns, &[], &[]).await;
    }
    let tenants = ["team-a", "team-b"];
    for tenant in tenants {
        h.namespace(
            tenant,
            &[("tenant", "yes")],
            &[("mimeo.dev/accept-from", &sources.join(","))],
        )
        .await;
    }
    let plural = |kind: &str| format!("{}ies", kind.to_lowercase().trim_end_matches('y'));
    for (i, object) in samples.iter().enumerate() {
        let kind = object["kind"].as_str().unwrap();
        let api_version = object["apiVersion"].as_str().unwrap();
        let from = object["metadata"]["namespace"].as_str().unwrap();
        apply_object(&h.client, &resource(api_version, kind, &plural(kind)), object).await;
        h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
            "metadata": {"name": format!("cel-{i}"), "namespace": from},
            "spec": {"source": {"apiVersion": api_version, "kind": kind,
                                "name": object["metadata"]["name"]},
                     "targets": [{"namespaceSelector": {"matchLabels": {"tenant": "yes"}}}],
                     "transforms": [{"plugin": "file://rewrite-namespace.wasm",
                                     "config": {"rewrites": [{"from": from, "to": "{{target.namespace}}"}],
                                                "expressions": true}}]}}))
            .await;
    }
    let mut literals = 0;
    for (i, object) in samples.iter().enumerate() {
        let kind = object["kind"].as_str().unwrap();
        let from = object["metadata"]["namespace"].as_str().unwrap();
        let name = object["metadata"]["name"].as_str().unwrap();
        let resource = resource(object["apiVersion"].as_str().unwrap(), kind, &plural(kind));
        h.wait_ready(from, &format!("cel-{i}"), "True", "Synced").await;
        let source = get_object(&h.client, &resource, Some(from), name).await.unwrap();
        for tenant in tenants {
            let copy = get_object(&h.client, &resource, Some(tenant), name)
                .await
                .unwrap_or_else(|| panic!("{kind} {name} in {tenant}"));
            let want = cel_rewritten(&source["spec"], from, tenant);
            assert_eq!(copy["spec"], want, "{kind} {name} in {tenant}");
            if want != source["spec"] {
                literals += 1;
            }
        }
    }
    // Two of the samples name their namespace inside CEL (a matchCondition, a condition).
    assert_eq!(literals, 2 * tenants.len(), "the samples changed shape");

    // CEL that does not parse (the CRD schema does not check it; Kyverno's webhook would).
    let broken = json!({"apiVersion": "policies.kyverno.io/v1", "kind": "NamespacedValidatingPolicy",
        "metadata": {"name": "broken", "namespace": "test-namespace"},
        "spec": {"validationActions": ["Deny"],
                 "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["configmaps"]}]},
                 "validations": [{"expression": "request.namespace == 'test-namespace' &&"}]}});
    let namespaced = resource(
        "policies.kyverno.io/v1",
        "NamespacedValidatingPolicy",
        "namespacedvalidatingpolicies",
    );
    apply_object(&h.client, &namespaced, &broken).await;
    h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
        "metadata": {"name": "broken", "namespace": "test-namespace"},
        "spec": {"source": {"apiVersion": "policies.kyverno.io/v1", "kind": "NamespacedValidatingPolicy", "name": "broken"},
                 "targets": [{"namespace": "team-a"}],
                 "transforms": [{"plugin": "file://rewrite-namespace.wasm",
                                 "config": {"rewrites": [{"from": "test-namespace", "to": "{{target.namespace}}"}],
                                            "expressions": true}}]}}))
        .await;
    let failed = eventually("the unparseable policy PluginFailed", || async {
        let rule = h.rule("test-namespace", "broken").await?;
        let copy = rule.status?.problems.first()?.clone();
        (copy.state == CopyState::PluginFailed).then_some(copy)
    })
    .await;
    let message = failed.message.unwrap();
    assert!(
        message.contains("spec.validations[0].expression: ERROR: <input>:1:")
            && message.contains("Syntax error"),
        "{message}"
    );
    assert!(
        get_object(&h.client, &namespaced, Some("team-a"), "broken")
            .await
            .is_none()
    );
}

/// A copy the target cluster's own schema rejects (here a Kyverno CRD whose
/// `validationFailureAction` allows only `Enforce`, as a differently configured installation
/// might): the copy's state carries the apiserver's message and nothing is written.
#[tokio::test]
async fn a_copy_the_target_rejects_says_why_and_writes_nothing() {
    let h = Harness::start().await;
    h.plane.install_crds(&kyverno_crds()).await.unwrap();
    let b = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let b_client = b.client().await.unwrap();
    let lenient = "                default: Audit
                description: Deprecated, use validationFailureAction under the validate
                  rule instead.
                enum:
                - audit
                - enforce
                - Audit
                - Enforce
";
    let strict = "                default: Enforce
                description: Deprecated, use validationFailureAction under the validate
                  rule instead.
                enum:
                - Enforce
";
    let crd = std::fs::read_to_string(fixtures().join("crds/kyverno.io_clusterpolicies.yaml")).unwrap();
    assert!(crd.contains(lenient), "the fixture CRD changed shape");
    let dir = tempfile::tempdir().unwrap();
    let strict_crd = dir.path().join("strict-clusterpolicies.yaml");
    std::fs::write(&strict_crd, crd.replace(lenient, strict)).unwrap();
    b.install_crds(&[strict_crd]).await.unwrap();

    h.namespace("mimeo-system", &[], &[]).await;
    h.register_cluster("b", b.kubeconfig_yaml(), json!({})).await;
    let (_, mut audit) = sample_policies("ClusterPolicy")
        .into_iter()
        .find(|(_, p)| p["spec"]["validationFailureAction"] == "Audit")
        .expect("a sample ClusterPolicy in Audit mode");
    audit["metadata"] = json!({"name": "audited"});
    apply_object(&h.client, &cluster_policies(), &audit).await;
    h.apply(
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule", "metadata": {"name": "audited"},
        "spec": {"source": {"kind": "ClusterPolicy", "name": "audited"}, "targets": [{"cluster": "b"}]}}),
    )
    .await;
    let failed = eventually("the rejected copy reported", || async {
        let copy = cluster_rule_status(&h, "audited")
            .await?
            .problems
            .first()?
            .clone();
        (copy.state == CopyState::Failed).then_some(copy)
    })
    .await;
    let message = failed.message.unwrap();
    assert!(
        message.contains("validationFailureAction") && message.contains("Unsupported value"),
        "{message}"
    );
    assert!(
        get_object(&b_client, &cluster_policies(), None, "audited")
            .await
            .is_none()
    );
}

/// Applies every document of a YAML file, finding each kind by discovery (like `kubectl apply`).
async fn apply_file(client: &Client, path: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path);
    let text = std::fs::read_to_string(&path).unwrap();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let object: Value = serde::Deserialize::deserialize(document).unwrap();
        if object.is_null() {
            continue;
        }
        let gvk = GroupVersionKind::try_from(&kube::core::TypeMeta {
            api_version: object["apiVersion"].as_str().unwrap().into(),
            kind: object["kind"].as_str().unwrap().into(),
        })
        .unwrap();
        let (resource, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
        apply_object(client, &resource, &object).await;
    }
}

/// The two Kyverno examples in `examples/` do what their comments say.
#[tokio::test]
async fn the_kyverno_examples_work() {
    let config = ControllerConfig {
        plugin_dir: Some(harness::plugin_dir()),
        ..Default::default()
    };
    let h = Harness::start_with(config).await;
    let b = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let crds = kyverno_crds();
    let (crds_a, crds_b) = tokio::join!(h.plane.install_crds(&crds), b.install_crds(&crds));
    crds_a.unwrap();
    crds_b.unwrap();
    let b_client = b.client().await.unwrap();

    apply_file(&h.client, "examples/policy-fan-out.yaml").await;
    for tenant in ["tenant-blue", "tenant-green"] {
        let copy = eventually(&format!("the Policy in {tenant}"), || async {
            get_object(&h.client, &policies(), Some(tenant), "clone-base-settings").await
        })
        .await;
        assert_eq!(copy["spec"]["rules"][0]["generate"]["namespace"], tenant);
        assert_eq!(copy["spec"]["rules"][0]["generate"]["clone"]["namespace"], tenant);
        assert_eq!(
            namespace_filters(&copy),
            Vec::<String>::new(),
            "Kyverno would refuse the copy"
        );
    }

    h.namespace("mimeo-system", &[], &[]).await;
    h.register_cluster("prod-eu1", b.kubeconfig_yaml(), json!({"env": "prod"}))
        .await;
    apply_file(&h.client, "examples/cluster-policy-fan-out.yaml").await;
    let copy = eventually("the ClusterPolicy in prod-eu1", || async {
        get_object(&b_client, &cluster_policies(), None, "require-team-label").await
    })
    .await;
    let source = get_object(&h.client, &cluster_policies(), None, "require-team-label")
        .await
        .unwrap();
    assert_eq!(copy["spec"], source["spec"]);
}

/// `examples/cel-policy-fan-out.yaml` does what its comments say, under the default allow-list.
#[tokio::test]
async fn the_cel_policy_example_works() {
    let config = ControllerConfig {
        plugin_dir: Some(harness::plugin_dir()),
        ..Default::default()
    };
    let h = Harness::start_with(config).await;
    h.plane.install_crds(&cel_crds()).await.unwrap();
    apply_file(&h.client, "examples/cel-policy-fan-out.yaml").await;
    let resource = resource(
        "policies.kyverno.io/v1",
        "NamespacedValidatingPolicy",
        "namespacedvalidatingpolicies",
    );
    let source = get_object(&h.client, &resource, Some("platform-policies"), "require-owner")
        .await
        .unwrap();
    for team in ["team-red", "team-gold"] {
        let copy = eventually(&format!("the policy in {team}"), || async {
            get_object(&h.client, &resource, Some(team), "require-owner").await
        })
        .await;
        let mut want = source["spec"].clone();
        want["matchConditions"][0]["expression"] = json!(format!("request.namespace == '{team}'"));
        assert_eq!(copy["spec"], want, "{team}");
    }
    let rule = h
        .wait_ready("platform-policies", "team-policies", "True", "Synced")
        .await;
    assert_eq!(rule.status.unwrap().copies.as_deref(), Some("2/2"));
}

/// Where a namespaced `Policy` filters by namespace, which Kyverno refuses beyond its CRD's
/// schema ("Filtering namespaces not allowed in namespaced policies"): the paths of every
/// `namespaces` under a rule's `match` or `exclude` (`resources`, `any[].resources`,
/// `all[].resources`).
fn namespace_filters(policy: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let rules = policy["spec"]["rules"].as_array().cloned().unwrap_or_default();
    for (r, rule) in rules.iter().enumerate() {
        for block in ["match", "exclude"] {
            let filter = &rule[block];
            let mut resources = vec![(format!("rules[{r}].{block}.resources"), &filter["resources"])];
            for list in ["any", "all"] {
                for (i, item) in filter[list].as_array().into_iter().flatten().enumerate() {
                    resources.push((
                        format!("rules[{r}].{block}.{list}[{i}].resources"),
                        &item["resources"],
                    ));
                }
            }
            for (path, resources) in resources {
                if resources["namespaces"].as_array().is_some_and(|n| !n.is_empty()) {
                    found.push(format!("{path}.namespaces"));
                }
            }
        }
    }
    found
}

#[test]
fn namespace_filters_are_found_where_kyverno_looks() {
    let policy = json!({"spec": {"rules": [
        {"match": {"any": [{"resources": {"kinds": ["Pod"], "namespaces": ["team"]}}]}},
        {"exclude": {"resources": {"namespaces": ["kube-system"]}}, "match": {"all": [{"resources": {"kinds": ["Pod"]}}]}},
    ]}});
    assert_eq!(
        namespace_filters(&policy),
        [
            "rules[0].match.any[0].resources.namespaces",
            "rules[1].exclude.resources.namespaces"
        ]
    );
    let example = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/policy-fan-out.yaml"),
    )
    .unwrap();
    for document in serde_yaml_ng::Deserializer::from_str(&example) {
        let value: Value = serde::Deserialize::deserialize(document).unwrap();
        if value["kind"] == "Policy" {
            assert_eq!(
                namespace_filters(&value),
                Vec::<String>::new(),
                "the example's Policy"
            );
        }
    }
}

/// Write requests for `resource` that `client`'s apiserver serves over `idle`, after the copies
/// settled: what mimeo writes when nothing changes. Prints them with `what`.
async fn writes_while_idle(client: &Client, resource: &str, idle: std::time::Duration, what: &str) -> u64 {
    let before = harness::apiserver_writes(client, &[resource]).await;
    tokio::time::sleep(idle).await;
    let writes = harness::apiserver_writes(client, &[resource]).await - before;
    println!("{what}: {writes} writes of {resource} over {idle:?} idle");
    writes
}

/// Two `ClusterSyncRule`s copy ClusterPolicies into one remote cluster, one naming
/// `kyverno.io/v1` and one `kyverno.io/v2beta1` (one resource served at two versions): each
/// copy is one object whatever version a watch saw it at, so nothing is deleted as "no longer
/// wanted" and nothing is written while idle, also after an unrelated CRD is installed locally
/// (a discovery change).
#[tokio::test]
async fn rules_naming_two_versions_of_cluster_policies_leave_the_copies_idle() {
    let h = Harness::start().await;
    h.plane.install_crds(&kyverno_crds()).await.unwrap();
    let b = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    b.install_crds(&kyverno_crds()).await.unwrap();
    let b_client = b.client().await.unwrap();
    h.namespace("mimeo-system", &[], &[]).await;
    h.register_cluster("b", b.kubeconfig_yaml(), json!({})).await;

    // Half b goes through v2beta1, whose schema refuses some v1 policies (deny conditions as a
    // list): those go to half a, as a dry run at v2beta1 tells.
    let v2beta1 = resource("kyverno.io/v2beta1", "ClusterPolicy", "clusterpolicies");
    let mut sources = prepared("ClusterPolicy", None);
    for (i, source) in sources.iter_mut().enumerate() {
        let mut probe = source.clone();
        probe["apiVersion"] = json!("kyverno.io/v2beta1");
        probe["metadata"]["name"] = json!(format!("probe-{i}"));
        let probe: DynamicObject = serde_json::from_value(probe).unwrap();
        let dry_run = kube::api::PostParams {
            dry_run: true,
            ..Default::default()
        };
        let fits_v2beta1 = Api::<DynamicObject>::all_with(h.client.clone(), &v2beta1)
            .create(&dry_run, &probe)
            .await
            .is_ok();
        source["metadata"]["labels"]["half"] = json!(if i % 2 == 1 && fits_v2beta1 { "b" } else { "a" });
        apply_object(&h.client, &cluster_policies(), source).await;
    }
    for (half, version) in [("a", "kyverno.io/v1"), ("b", "kyverno.io/v2beta1")] {
        h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule", "metadata": {"name": format!("half-{half}")},
            "spec": {"source": {"apiVersion": version, "kind": "ClusterPolicy", "selector": {"matchLabels": {"half": half}}},
                     "targets": [{"cluster": "b"}], "deletion": "Delete"}}))
            .await;
    }
    for half in ["a", "b"] {
        eventually(&format!("every copy of half {half} Synced"), || async {
            let status = cluster_rule_status(&h, &format!("half-{half}")).await?;
            let want = sources
                .iter()
                .filter(|s| s["metadata"]["labels"]["half"] == half)
                .count();
            (status.copies == Some(format!("{want}/{want}"))).then_some(())
        })
        .await;
    }
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let idle = std::time::Duration::from_secs(60);
    let writes = writes_while_idle(&b_client, "clusterpolicies", idle, "v1 and v2beta1 rules into B").await;
    assert_eq!(writes, 0, "copies churn while nothing changes");

    // An unrelated CRD installed locally changes discovery; the copies stay as they are.
    h.plane.install_crds(&cel_crds()[..1]).await.unwrap();
    let writes = writes_while_idle(
        &b_client,
        "clusterpolicies",
        std::time::Duration::from_secs(20),
        "after an unrelated CRD was installed locally",
    )
    .await;
    assert_eq!(writes, 0, "a discovery change made copies churn");
    for source in &sources {
        let name = source["metadata"]["name"].as_str().unwrap();
        assert!(
            get_object(&b_client, &cluster_policies(), None, name)
                .await
                .is_some(),
            "the copy of {name} is missing"
        );
    }
}

/// Rules naming `policies.kyverno.io/v1` and `v1beta1` of one CEL policy kind, in the local
/// cluster and into a remote one: the copies arrive and nothing is written while idle.
#[tokio::test]
async fn rules_naming_two_versions_of_a_cel_policy_kind_leave_the_copies_idle() {
    // The default allow-list covers both kinds.
    let h = Harness::start().await;
    h.plane.install_crds(&cel_crds()).await.unwrap();
    let b = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    b.install_crds(&cel_crds()).await.unwrap();
    let b_client = b.client().await.unwrap();
    h.namespace("mimeo-system", &[], &[]).await;
    h.register_cluster("b", b.kubeconfig_yaml(), json!({})).await;
    h.namespace("policies", &[], &[]).await;
    h.namespace("tenant", &[], &[("mimeo.dev/accept-from", "policies")])
        .await;

    let sample = std::fs::read_to_string(
        fixtures().join("policies-cel/namespaced-validating-policies_validation-actions_deny.yaml"),
    )
    .unwrap();
    let sample: Value = serde_yaml_ng::from_str(&sample).unwrap();
    let namespaced = resource(
        "policies.kyverno.io/v1",
        "NamespacedValidatingPolicy",
        "namespacedvalidatingpolicies",
    );
    let cluster_wide = resource("policies.kyverno.io/v1", "ValidatingPolicy", "validatingpolicies");
    for (i, half) in ["a", "b", "a", "b"].iter().enumerate() {
        let mut object = sample.clone();
        object["apiVersion"] = json!("policies.kyverno.io/v1");
        object["metadata"] =
            json!({"name": format!("p{i}"), "namespace": "policies", "labels": {"half": half}});
        apply_object(&h.client, &namespaced, &object).await;
        object["kind"] = json!("ValidatingPolicy");
        object["metadata"] = json!({"name": format!("c{i}"), "labels": {"half": half}});
        apply_object(&h.client, &cluster_wide, &object).await;
    }
    for (half, version) in [
        ("a", "policies.kyverno.io/v1"),
        ("b", "policies.kyverno.io/v1beta1"),
    ] {
        h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule", "metadata": {"name": format!("half-{half}"), "namespace": "policies"},
            "spec": {"source": {"apiVersion": version, "kind": "NamespacedValidatingPolicy", "selector": {"matchLabels": {"half": half}}},
                     "targets": [{"namespace": "tenant"}]}}))
            .await;
        h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule", "metadata": {"name": format!("half-{half}")},
            "spec": {"source": {"apiVersion": version, "kind": "ValidatingPolicy", "selector": {"matchLabels": {"half": half}}},
                     "targets": [{"cluster": "b"}], "deletion": "Delete"}}))
            .await;
    }
    for half in ["a", "b"] {
        h.wait_ready("policies", &format!("half-{half}"), "True", "Synced")
            .await;
        eventually(&format!("ClusterSyncRule half-{half} Synced"), || async {
            let status = cluster_rule_status(&h, &format!("half-{half}")).await?;
            (status.copies.as_deref() == Some("2/2")).then_some(())
        })
        .await;
    }
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let idle = std::time::Duration::from_secs(60);
    let (local, remote) = tokio::join!(
        writes_while_idle(
            &h.client,
            "namespacedvalidatingpolicies",
            idle,
            "v1 and v1beta1 SyncRules, locally"
        ),
        writes_while_idle(
            &b_client,
            "validatingpolicies",
            idle,
            "v1 and v1beta1 ClusterSyncRules into B"
        ),
    );
    assert_eq!((local, remote), (0, 0), "copies churn while nothing changes");
    for i in 0..4 {
        let name = format!("p{i}");
        assert!(
            get_object(&h.client, &namespaced, Some("tenant"), &name)
                .await
                .is_some(),
            "{name}"
        );
        let name = format!("c{i}");
        assert!(
            get_object(&b_client, &cluster_wide, None, &name).await.is_some(),
            "{name}"
        );
    }
    // Copies keep their content exactly, whichever version the rule named.
    for (resource, ns, prefix, client) in [
        (&namespaced, Some("tenant"), "p", &h.client),
        (&cluster_wide, None, "c", &b_client),
    ] {
        for i in 0..4 {
            let name = format!("{prefix}{i}");
            let source_ns = ns.map(|_| "policies");
            let source = get_object(&h.client, resource, source_ns, &name).await.unwrap();
            let copy = get_object(client, resource, ns, &name).await.unwrap();
            assert_eq!(copy["spec"], source["spec"], "{name}");
        }
    }
}

/// A namespaced `Widget.example.com` CRD, written into `dir`.
fn widget_crd(dir: &std::path::Path) -> PathBuf {
    let path = dir.join("widgets.yaml");
    std::fs::write(
        &path,
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
         metadata: {name: widgets.example.com}\n\
         spec:\n  group: example.com\n  scope: Namespaced\n\
         \x20 names: {plural: widgets, singular: widget, kind: Widget}\n\
         \x20 versions:\n  - name: v1\n    served: true\n    storage: true\n\
         \x20   schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}\n",
    )
    .unwrap();
    path
}

/// 8 of the tenant-attack review, as a user: rules waiting for a kind are woken within seconds
/// once it is served, even after their retries have backed off for half a minute: one whose
/// source kind (Kyverno's `Policy`) this cluster does not serve yet, one whose copies go into a
/// cluster that does not serve their kind.
#[tokio::test]
async fn a_kind_that_appears_wakes_the_rules_waiting_on_it() {
    let h = Harness::start_with(allowing(&[
        "Secret",
        "ConfigMap",
        "Widget.example.com",
        "Policy.kyverno.io",
    ]))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let widget_crd = widget_crd(dir.path());
    h.plane
        .install_crds(std::slice::from_ref(&widget_crd))
        .await
        .unwrap();
    let b = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let b_client = b.client().await.unwrap();
    h.namespace("mimeo-system", &[], &[]).await;
    h.namespace("team", &[], &[]).await;
    h.namespace("elsewhere", &[], &[("mimeo.dev/accept-from", "team")])
        .await;
    h.register_cluster("b", b.kubeconfig_yaml(), json!({})).await;

    // Waits for its source's kind in this cluster.
    h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
        "metadata": {"name": "policies", "namespace": "team"},
        "spec": {"source": {"kind": "Policy", "name": "require-team"},
                 "targets": [{"namespace": "elsewhere"}]}}))
        .await;
    // Waits for its copy's kind in cluster B.
    let widgets = resource("example.com/v1", "Widget", "widgets");
    apply_object(
        &h.client,
        &widgets,
        &json!({"apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": "w", "namespace": "team"}, "spec": {"size": 3}}),
    )
    .await;
    h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule", "metadata": {"name": "to-b"},
        "spec": {"source": {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w", "namespace": "team"},
                 "targets": [{"cluster": "b", "namespace": "apps", "createNamespace": true}]}}))
        .await;
    h.wait_ready("team", "policies", "False", "KindNotServed").await;
    eventually("the copy in B KindNotServed", || async {
        let status = cluster_rule_status(&h, "to-b").await?;
        (status.problems.first()?.state == CopyState::KindNotServed).then_some(())
    })
    .await;
    // Long enough for both rules' retries to back off past half a minute.
    tokio::time::sleep(Duration::from_secs(35)).await;

    let policy = json!({"apiVersion": "kyverno.io/v1", "kind": "Policy",
        "metadata": {"name": "require-team", "namespace": "team"},
        "spec": {"rules": [{"name": "require-team",
            "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}}]},
            "validate": {"message": "a team label", "pattern": {"metadata": {"labels": {"team": "?*"}}}}}]}});
    let (local, remote) = tokio::join!(
        async {
            h.plane.install_crds(&kyverno_crds()).await.unwrap();
            let served = Instant::now();
            apply_object(&h.client, &policies(), &policy).await;
            eventually("the Policy copied", || async {
                get_object(&h.client, &policies(), Some("elsewhere"), "require-team").await
            })
            .await;
            served.elapsed()
        },
        async {
            b.install_crds(std::slice::from_ref(&widget_crd)).await.unwrap();
            let served = Instant::now();
            eventually("the Widget in B", || async {
                get_object(&b_client, &widgets, Some("apps"), "w").await
            })
            .await;
            served.elapsed()
        }
    );
    eprintln!("after its CRD: the local copy in {local:.1?}, the copy in B in {remote:.1?}");
    for (what, took) in [("the local copy", local), ("the copy in B", remote)] {
        assert!(
            took < Duration::from_secs(15),
            "{what} came {took:?} after its kind was served"
        );
    }
}
