//! `mimeo migrate --from openmcp-helmdeployer` against a real apiserver: openMCP's CRDs and
//! HelmDeployer's own test fixture (test-05: two Clusters, a HelmDeployment whose selector names
//! a definition of the HelmDeployerConfig, the source Secrets) applied with kubectl, and the
//! copies HelmDeployer makes next to the selected Cluster written as it writes them (its labels,
//! its field manager); beside them a look-alike made with kubectl. Then the same on a target
//! cluster of its own control plane, read and written through `--cluster-kubeconfig`.

use crate::harness;
use crate::mimeo_migrate;

use harness::Harness;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use mimeo::cmd::migrate::Plan;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const OPENMCP: &str = "../shared/fixtures/inventory/openmcp";

fn fixture(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(OPENMCP).join(file)
}

fn kubectl(h: &Harness, args: &[&str], stdin: Option<&Value>) {
    kubectl_on(h.plane.kubeconfig_path(), args, stdin)
}

/// kubectl (client-side, as people run it) against the cluster of `kubeconfig`.
fn kubectl_on(kubeconfig: &Path, args: &[&str], stdin: Option<&Value>) {
    let input = stdin.map(Value::to_string).unwrap_or_default();
    harness::kubectl(kubeconfig, args, input.as_bytes());
}

/// A Secret as HelmDeployer's `ManageSecrets` writes it next to a Cluster: the source's data, its
/// three labels, created by its client (which names no field manager, so the apiserver takes
/// the user agent's program, `openmcp-operator`).
async fn helmdeployer_copy(client: &Client, namespace: &str, name: &str, source: (&str, &str)) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace, "labels": {
            "openmcp.cloud/managed-by": "helmdeploy.HelmDeployer",
            "helm.open-control-plane.io/source-namespace": source.0,
            "helm.open-control-plane.io/source-name": source.1}},
        "type": "Opaque", "stringData": {"value": source.1}}))
    .unwrap();
    let params = PostParams {
        field_manager: Some("openmcp-operator".into()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), namespace)
        .create(&params, &secret)
        .await
        .unwrap();
}

/// The plane with openMCP's CRDs, HelmDeployer's test-05 fixture, a second HelmDeployment that
/// wants a target the first one has, and the copies.
async fn platform() -> Harness {
    let h = Harness::without_controller().await;
    let crds = [
        "clusters.openmcp.cloud_clusters.yaml",
        "helm.open-control-plane.io_helmdeployerconfigs.yaml",
        "helm.open-control-plane.io_helmdeployments.yaml",
    ];
    h.plane
        .install_crds(&crds.map(fixture))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for ns in ["openmcp-system", "test-0", "test-1", "team"] {
        h.namespace(ns, &[], &[]).await;
    }
    let test_05 = fixture("helmdeployer-test-05");
    kubectl(&h, &["apply", "-f", test_05.to_str().unwrap()], None);
    // Created after hd-0, so hd-0 is HelmDeployer's first for secret-1 next to cluster-0.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let hd_1 = json!({"apiVersion": "helm.open-control-plane.io/v1alpha1", "kind": "HelmDeployment",
        "metadata": {"name": "hd-1", "namespace": "team"},
        "spec": {"chartSource": {"oci": {"url": "oci://example.org/repo/charts", "interval": "10m"}},
                 "namespace": "team-apps",
                 "selector": {"matchLabels": {"helm.open-control-plane.io/target": "true"}},
                 "secretsToCopy": {"toPlatformCluster": [{"source": {"name": "team-secret"}, "target": {"name": "secret-1"}}]}}});
    kubectl(&h, &["apply", "-f", "-"], Some(&hd_1));
    // HelmDeployer's copies next to cluster-0 (the only Cluster with purpose `single`).
    helmdeployer_copy(&h.client, "test-0", "secret-1", ("default", "secret-1")).await;
    helmdeployer_copy(&h.client, "test-0", "copied-secret-2", ("default", "secret-2")).await;
    helmdeployer_copy(
        &h.client,
        "test-0",
        "secret-cfg-1",
        ("openmcp-system", "secret-cfg-1"),
    )
    .await;
    helmdeployer_copy(
        &h.client,
        "test-0",
        "secret-overwrite",
        ("default", "secret-overwrite"),
    )
    .await;
    // A look-alike with HelmDeployer's labels, written with kubectl by whoever may write test-0.
    let look_alike = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "copied-secret-cfg-2", "namespace": "test-0", "labels": {
            "openmcp.cloud/managed-by": "helmdeploy.HelmDeployer",
            "helm.open-control-plane.io/source-namespace": "openmcp-system",
            "helm.open-control-plane.io/source-name": "secret-cfg-2"}},
        "stringData": {"value": "mine"}});
    kubectl(&h, &["apply", "-f", "-"], Some(&look_alike));
    h
}

fn rule<'a>(plan: &'a Plan, namespace: &str, name: &str) -> &'a Value {
    plan.rules
        .iter()
        .find(|r| r["metadata"]["namespace"] == namespace && r["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no rule {namespace}/{name} in {:#?}", plan.rules))
}

#[tokio::test]
async fn from_openmcp_helmdeployer() {
    let mut h = platform().await;
    let (code, yaml, notes) = mimeo_migrate(&h, &["--from", "openmcp-helmdeployer"]);
    assert_eq!(code, 0, "{notes}");
    assert!(
        !yaml.contains("c2VjcmV0"),
        "a Secret value in the output:\n{yaml}"
    );
    let document: Value = serde_yaml_ng::from_str(&yaml).unwrap();
    let plan = Plan::from_document(&document).unwrap().unwrap();

    let p = "openmcp-helmdeployer";
    let names: BTreeSet<String> = plan
        .rules
        .iter()
        .map(|r| {
            format!(
                "{}/{}",
                r["metadata"]["namespace"].as_str().unwrap(),
                r["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    let expected: BTreeSet<String> = [
        format!("default/{p}-secret-1"),
        format!("default/{p}-secret-2-as-copied-secret-2"),
        format!("default/{p}-secret-3"),
        format!("default/{p}-secret-4-as-copied-secret-4"),
        format!("default/{p}-secret-overwrite"),
        format!("openmcp-system/{p}-secret-cfg-1"),
        format!("openmcp-system/{p}-secret-cfg-2-as-copied-secret-cfg-2"),
        format!("openmcp-system/{p}-secret-cfg-3"),
        format!("openmcp-system/{p}-secret-cfg-4-as-copied-secret-cfg-4"),
    ]
    .into();
    assert_eq!(names, expected, "{yaml}");
    let single = json!([{"operator": "ContainsAll", "values": ["single"]}]);
    let remote = json!({"matchLabels": {"mimeo.dev/inventory": format!("{p}-single")}});
    assert_eq!(
        rule(&plan, "default", &format!("{p}-secret-2-as-copied-secret-2"))["spec"]["targets"],
        json!([{"nextTo": {"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster", "matchPurposes": single,
                           "namespaces": ["test-0"]},
                "name": "copied-secret-2"}])
    );
    assert_eq!(
        rule(&plan, "default", &format!("{p}-secret-overwrite"))["spec"]["targets"][1],
        json!({"clusterSelector": remote, "namespace": "helm"})
    );
    assert_eq!(
        rule(
            &plan,
            "openmcp-system",
            &format!("{p}-secret-cfg-4-as-copied-secret-cfg-4")
        )["spec"]["targets"],
        json!([{"clusterSelector": remote, "namespace": "helm", "name": "copied-secret-cfg-4"}])
    );
    // The overrides and the conflict, said on stderr.
    assert!(
        notes.contains("toPlatformCluster: openmcp-system/secret-overwrite as secret-overwrite (selectorDefinitions.single.secretsToCopy of HelmDeployerConfig helmdeploy) is overridden by default/secret-overwrite"),
        "{notes}"
    );
    assert!(
        notes.contains("HelmDeployment team/hd-1: toPlatformCluster team/team-secret as secret-1: HelmDeployment default/hd-0 copies default/secret-1 there first (on test-0)"),
        "{notes}"
    );
    assert!(
        notes.contains("Secret test-0/copied-secret-cfg-2: exists but carries no mark"),
        "{notes}"
    );
    // Adopted: HelmDeployer's own copies; not the look-alike, and nothing next to cluster-1.
    let adopted: BTreeSet<String> = plan
        .adopt
        .iter()
        .map(|a| format!("{}/{} {}", a.namespace, a.name, a.rule))
        .collect();
    let expected: BTreeSet<String> = [
        format!("test-0/copied-secret-2 SyncRule/default/{p}-secret-2-as-copied-secret-2"),
        format!("test-0/secret-1 SyncRule/default/{p}-secret-1"),
        format!("test-0/secret-cfg-1 SyncRule/openmcp-system/{p}-secret-cfg-1"),
        format!("test-0/secret-overwrite SyncRule/default/{p}-secret-overwrite"),
    ]
    .into();
    assert_eq!(adopted, expected);
    assert_eq!(plan.consent.len(), 1);
    assert_eq!(plan.consent[0].namespace, "test-0");
    let accepted: BTreeSet<&str> = plan.consent[0].accept_from.iter().map(String::as_str).collect();
    assert!(!accepted.iter().any(|e| e.contains("cfg-2")), "{accepted:?}");
    assert_eq!(accepted.len(), 4, "{accepted:?}");
    assert_eq!(
        plan.cluster_inventories,
        [
            json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterInventory",
                "metadata": {"name": format!("{p}-single"), "labels": {"mimeo.dev/migrated-from": p}},
                "spec": {"namespaces": ["test-0"], "openMCP": {}, "selector": {"matchPurposes": single},
                         "remoteClusters": {"allowedNamespaces": {"matchExpressions": [
                             {"key": "kubernetes.io/metadata.name", "operator": "In",
                              "values": ["default", "openmcp-system"]}]}}}})
        ]
    );

    let (code, said) = harness::mimeo_diff(
        h.plane.kubeconfig_yaml(),
        &yaml,
        &["--next-to-kinds", "Cluster.clusters.openmcp.cloud"],
    );
    assert_eq!(code, 1, "{said}");
    assert!(!said.contains("c2VjcmV0"), "a Secret value in the diff:\n{said}");
    for adopted in &plan.adopt {
        let line = format!(
            "~ annotate Secret test-0/{}: mimeo.dev/adopt-by={}",
            adopted.name, adopted.rule
        );
        assert!(said.contains(&line), "missing {line:?} in:\n{said}");
    }
    assert!(
        !said.contains("annotate Secret test-0/copied-secret-cfg-2"),
        "{said}"
    );
    assert!(
        said.contains("SyncRule/openmcp-system/openmcp-helmdeployer-secret-cfg-3: 0 to create"),
        "no RemoteCluster of the inventory yet: {said}"
    );

    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &yaml).unwrap();
    let (code, applied, errors) = mimeo_migrate(&h, &["--apply", file.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{applied}{errors}");
    let test_0 = Api::<Namespace>::all(h.client.clone())
        .get("test-0")
        .await
        .unwrap();
    let consent = test_0.metadata.annotations.unwrap_or_default()["mimeo.dev/accept-from"].clone();
    let consent: BTreeSet<&str> = consent.split(',').collect();
    assert_eq!(consent, accepted);
    for (name, by) in [
        ("secret-1", Some(format!("SyncRule/default/{p}-secret-1"))),
        ("copied-secret-cfg-2", None),
    ] {
        let secret = h.secrets("test-0").get(name).await.unwrap();
        let mark = secret
            .metadata
            .annotations
            .unwrap_or_default()
            .get("mimeo.dev/adopt-by")
            .cloned();
        assert_eq!(mark, by, "{name}");
    }
    let inventories = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("mimeo.dev", "v1alpha1", "ClusterInventory"),
        "clusterinventories",
    );
    let inventories: Api<DynamicObject> = Api::all_with(h.client.clone(), &inventories);
    let made = inventories.get(&format!("{p}-single")).await.unwrap();
    assert_eq!(made.data["spec"]["namespaces"], json!(["test-0"]));
    let rules = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("mimeo.dev", "v1alpha1", "SyncRule"),
        "syncrules",
    );
    let made = Api::<DynamicObject>::namespaced_with(h.client.clone(), "openmcp-system", &rules)
        .get(&format!("{p}-secret-cfg-3"))
        .await
        .unwrap();
    assert_eq!(made.data["spec"]["targets"][0]["clusterSelector"], remote);
    let made = Api::<DynamicObject>::namespaced_with(h.client.clone(), "default", &rules)
        .get(&format!("{p}-secret-2-as-copied-secret-2"))
        .await
        .unwrap();
    assert_eq!(made.data["spec"]["targets"][0]["nextTo"]["matchPurposes"], single);

    // Again: nothing new. Then an inventory of that name that says something else is left alone.
    let (code, again, _) = mimeo_migrate(&h, &["--apply", file.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{again}");
    assert!(
        again.contains(&format!(
            "ClusterInventory {p}-single: exists with this spec already"
        )),
        "{again}"
    );
    let mut other = document.clone();
    other["clusterInventories"][0]["spec"]["namespaces"] = json!(["test-0", "test-1"]);
    std::fs::write(file.path(), serde_yaml_ng::to_string(&other).unwrap()).unwrap();
    let (code, refused, _) = mimeo_migrate(&h, &["--apply", file.path().to_str().unwrap()]);
    assert_eq!(code, 1, "{refused}");
    assert!(
        refused.contains(&format!(
            "! ClusterInventory {p}-single: exists with another spec"
        )),
        "{refused}"
    );
    let kept = inventories.get(&format!("{p}-single")).await.unwrap();
    assert_eq!(kept.data["spec"]["namespaces"], json!(["test-0"]));

    // mimeo then adopts HelmDeployer's copies in place, with the sources that won, and leaves
    // the look-alike alone.
    let uid = |s: Secret| s.metadata.uid.unwrap();
    let before = uid(h.secrets("test-0").get("secret-overwrite").await.unwrap());
    h.config_mut().next_to_kinds = vec!["Cluster.clusters.openmcp.cloud".parse().unwrap()];
    h.start_controller().await;
    let mine = |s: &Secret| {
        s.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("mimeo.dev/managed-by"))
            .is_some()
    };
    harness::eventually(
        "mimeo holds HelmDeployer's four copies next to cluster-0",
        || async {
            let all = Api::<Secret>::all(h.client.clone())
                .list(&Default::default())
                .await
                .unwrap();
            let held: BTreeSet<String> = all
                .items
                .iter()
                .filter(|s| mine(s))
                .map(|s| {
                    format!(
                        "{}/{}",
                        s.metadata.namespace.as_deref().unwrap(),
                        s.metadata.name.as_deref().unwrap()
                    )
                })
                .collect();
            let expected: BTreeSet<String> = [
                "test-0/copied-secret-2",
                "test-0/secret-1",
                "test-0/secret-cfg-1",
                "test-0/secret-overwrite",
            ]
            .map(String::from)
            .into();
            (held == expected).then_some(())
        },
    )
    .await;
    let overwrite = h.secrets("test-0").get("secret-overwrite").await.unwrap();
    assert_eq!(
        harness::secret_value(&overwrite, "value").as_deref(),
        Some("overwritten"),
        "the deployment's source won"
    );
    assert_eq!(uid(overwrite), before, "adopted in place");
    let look_alike = h.secrets("test-0").get("copied-secret-cfg-2").await.unwrap();
    assert_eq!(
        harness::secret_value(&look_alike, "value").as_deref(),
        Some("mine")
    );
}

/// A look-alike of HelmDeployer's copy: its labels, written by someone else with kubectl.
fn look_alike(namespace: &str, name: &str, source: (&str, &str)) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": {
            "openmcp.cloud/managed-by": "helmdeploy.HelmDeployer",
            "helm.open-control-plane.io/source-namespace": source.0,
            "helm.open-control-plane.io/source-name": source.1}},
        "stringData": {"value": "mine"}})
}

fn annotation(metadata: &kube::api::ObjectMeta, key: &str) -> Option<String> {
    metadata.annotations.as_ref().and_then(|a| a.get(key)).cloned()
}

/// `toTargetCluster` onto cluster-0, whose own control plane is B: HelmDeployer's copy of
/// secret-3 in `helm` there is planned for adoption through `--cluster-kubeconfig`, with B's
/// `helm` asked to accept the rule; a look-alike made with kubectl is not. Without the
/// kubeconfig, `--apply` applies the rest and says, exit 1, what it could not; with it, the
/// entries land in B, the running controller adopts the copy in place (same uid), and deleting
/// the rule deletes it.
#[tokio::test]
async fn from_openmcp_helmdeployer_onto_a_target_cluster() {
    let p = "openmcp-helmdeployer";
    let (mut h, b) = tokio::join!(platform(), mimeo_envtest::ControlPlane::start());
    let b = b.unwrap_or_else(|e| panic!("{e}"));
    let b_client = b.client().await.unwrap();
    Api::<Namespace>::all(b_client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "helm"}})).unwrap(),
        )
        .await
        .unwrap();
    helmdeployer_copy(&b_client, "helm", "secret-3", ("default", "secret-3")).await;
    kubectl_on(
        b.kubeconfig_path(),
        &["apply", "-f", "-"],
        Some(&look_alike("helm", "copied-secret-4", ("default", "secret-4"))),
    );
    let on_b = format!("test-0/cluster-0={}", b.kubeconfig_path().display());

    let (code, yaml, notes) = mimeo_migrate(
        &h,
        &["--from", "openmcp-helmdeployer", "--cluster-kubeconfig", &on_b],
    );
    assert_eq!(code, 0, "{notes}");
    assert!(
        !yaml.contains("c2VjcmV0"),
        "a Secret value in the output:\n{yaml}"
    );
    let document: Value = serde_yaml_ng::from_str(&yaml).unwrap();
    let plan = Plan::from_document(&document).unwrap().unwrap();
    let on_cluster: Vec<String> = plan
        .adopt
        .iter()
        .filter(|a| a.cluster.is_some())
        .map(|a| {
            format!(
                "{} {}/{} {}",
                a.cluster.as_deref().unwrap(),
                a.namespace,
                a.name,
                a.rule
            )
        })
        .collect();
    let rule_3 = format!("SyncRule/default/{p}-secret-3");
    assert_eq!(on_cluster, [format!("test-0/cluster-0 helm/secret-3 {rule_3}")]);
    let consent: Vec<_> = plan.consent.iter().filter(|c| c.cluster.is_some()).collect();
    assert_eq!(consent.len(), 1, "{yaml}");
    assert_eq!(
        (consent[0].namespace.as_str(), consent[0].accept_from.clone()),
        ("helm", vec![format!("default/{p}-secret-3")])
    );
    assert!(
        notes.contains("Secret helm/copied-secret-4 on Cluster test-0/cluster-0: exists but carries no mark"),
        "{notes}"
    );
    assert!(
        notes.contains("consent: namespace helm on Cluster test-0/cluster-0 would accept default/openmcp-helmdeployer-secret-3"),
        "{notes}"
    );

    // diff shows B's entries when given its kubeconfig, and says they were not read otherwise.
    let (code, said) = harness::mimeo_diff(
        h.plane.kubeconfig_yaml(),
        &yaml,
        &[
            "--next-to-kinds",
            "Cluster.clusters.openmcp.cloud",
            "--cluster-kubeconfig",
            &on_b,
        ],
    );
    assert_eq!(code, 1, "{said}");
    for line in [
        format!(
            "~ annotate Namespace helm on Cluster test-0/cluster-0: mimeo.dev/accept-from: \"\" -> \"default/{p}-secret-3\""
        ),
        format!("~ annotate Secret helm/secret-3 on Cluster test-0/cluster-0: mimeo.dev/adopt-by={rule_3}"),
    ] {
        assert!(said.contains(&line), "missing {line:?} in:\n{said}");
    }
    assert!(!said.contains("Secret helm/copied-secret-4"), "{said}");
    let (_, said) = harness::mimeo_diff(h.plane.kubeconfig_yaml(), &yaml, &[]);
    assert!(
        said.contains("note: Secret helm/secret-3 on Cluster test-0/cluster-0: not read, so not shown: give --cluster-kubeconfig test-0/cluster-0=PATH"),
        "{said}"
    );

    // Without B's kubeconfig: the rest is applied, B's entries are not, and that is said.
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &yaml).unwrap();
    let (code, applied, errors) = mimeo_migrate(&h, &["--apply", file.path().to_str().unwrap()]);
    assert_eq!(code, 1, "{applied}{errors}");
    for line in [
        "! Namespace helm on Cluster test-0/cluster-0: not applied: no kubeconfig for this Cluster; give --cluster-kubeconfig test-0/cluster-0=PATH",
        "! Secret helm/secret-3 on Cluster test-0/cluster-0: not applied: no kubeconfig for this Cluster; give --cluster-kubeconfig test-0/cluster-0=PATH",
    ] {
        assert!(errors.contains(line), "missing {line:?} in:\n{errors}");
    }
    assert!(
        applied.contains(&format!("SyncRule default/{p}-secret-3: created")),
        "{applied}"
    );
    let test_0 = Api::<Namespace>::all(h.client.clone())
        .get("test-0")
        .await
        .unwrap();
    assert!(annotation(&test_0.metadata, "mimeo.dev/accept-from").is_some());
    let helm = Api::<Namespace>::all(b_client.clone()).get("helm").await.unwrap();
    assert_eq!(annotation(&helm.metadata, "mimeo.dev/accept-from"), None);

    // With it: B's entries land there, and only there.
    let (code, applied, errors) = mimeo_migrate(
        &h,
        &[
            "--apply",
            file.path().to_str().unwrap(),
            "--cluster-kubeconfig",
            &on_b,
        ],
    );
    assert_eq!(code, 0, "{applied}{errors}");
    let helm = Api::<Namespace>::all(b_client.clone()).get("helm").await.unwrap();
    assert_eq!(
        annotation(&helm.metadata, "mimeo.dev/accept-from"),
        Some(format!("default/{p}-secret-3"))
    );
    let b_secrets = Api::<Secret>::namespaced(b_client.clone(), "helm");
    let copy = b_secrets.get("secret-3").await.unwrap();
    assert_eq!(
        annotation(&copy.metadata, "mimeo.dev/adopt-by"),
        Some(rule_3.clone())
    );
    let uid = copy.metadata.uid.clone().unwrap();
    let look = b_secrets.get("copied-secret-4").await.unwrap();
    assert_eq!(annotation(&look.metadata, "mimeo.dev/adopt-by"), None);

    // B as the inventory would make it a RemoteCluster (tests/sync/inventories.rs does that through
    // openMCP's AccessRequests): by hand, with the inventory's label.
    h.namespace("mimeo-system", &[], &[]).await;
    let kubeconfig = b.token_kubeconfig_yaml(b.admin_token());
    h.apply(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "cluster-0-kubeconfig", "namespace": "mimeo-system"},
        "stringData": {"value": kubeconfig}}))
        .await;
    h.apply(
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster",
        "metadata": {"name": "test-0-cluster-0", "labels": {"mimeo.dev/inventory": format!("{p}-single")}},
        "spec": {"kubeconfigSecretRef": {"namespace": "mimeo-system", "name": "cluster-0-kubeconfig"},
                 "allowedNamespaces": {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                     "operator": "In", "values": ["default", "openmcp-system"]}]}}}),
    )
    .await;
    h.config_mut().next_to_kinds = vec!["Cluster.clusters.openmcp.cloud".parse().unwrap()];
    h.start_controller().await;
    harness::eventually("mimeo holds HelmDeployer's copy on cluster-0", || async {
        let copy = b_secrets.get("secret-3").await.unwrap();
        let held = copy
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("mimeo.dev/managed-by"));
        held.then_some(copy)
    })
    .await;
    let copy = b_secrets.get("secret-3").await.unwrap();
    assert_eq!(
        copy.metadata.uid.as_deref(),
        Some(uid.as_str()),
        "adopted in place"
    );
    assert_eq!(harness::secret_value(&copy, "value").as_deref(), Some("secret-3"));
    let look = b_secrets.get("copied-secret-4").await.unwrap();
    assert_eq!(harness::secret_value(&look, "value").as_deref(), Some("mine"));
    assert!(
        look.metadata
            .labels
            .as_ref()
            .is_none_or(|l| !l.contains_key("mimeo.dev/managed-by")),
        "the look-alike is left alone"
    );

    // The rule owns it now: deleting the rule deletes it.
    let rules = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("mimeo.dev", "v1alpha1", "SyncRule"),
        "syncrules",
    );
    Api::<DynamicObject>::namespaced_with(h.client.clone(), "default", &rules)
        .delete(&format!("{p}-secret-3"), &DeleteParams::default())
        .await
        .unwrap();
    harness::eventually("the adopted copy on cluster-0 deleted with its rule", || async {
        b_secrets
            .get_opt("secret-3")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(b_secrets.get_opt("copied-secret-4").await.unwrap().is_some());
}
