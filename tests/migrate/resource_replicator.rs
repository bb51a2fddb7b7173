//! `mimeo migrate --from openmcp-resource-replicator` against a real apiserver: openMCP's
//! `Cluster` CRD and the replicator's CRDs (patched as the fixture's README says, so that
//! templates are stored), the upstream environment (its namespaces and `Cluster`s on the
//! platform cluster) and upstream examples applied with kubectl: their sources, their
//! (Cluster)Replicas as the replicator left them (with its finalizer), and the copies as their
//! `_after` files show them. Then the plan, the cut-over as the notes say it (ignore, apply,
//! Synced, finalizer removed, (Cluster)Replica deleted), and the controller's adoption: each copy
//! the same object (same uid), now mimeo's. The examples that copy onto other Clusters are
//! unit-tested (`src/cmd/migrate/resource_replicator.rs`): they would need a control plane per
//! workload Cluster.

use crate::harness;

use harness::Harness;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use mimeo::api::ClusterSyncRule;
use mimeo::cmd::migrate::Plan;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const OPENMCP: &str = "../shared/fixtures/inventory/openmcp";
const P: &str = "openmcp-resource-replicator";
const FINALIZER: &str = "replica.core.open-control-plane.io/finalizer";

fn fixture(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(OPENMCP).join(path)
}

fn replicator(path: &str) -> PathBuf {
    fixture(&format!("resource-replicator/{path}"))
}

fn yaml(path: &Path) -> Value {
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn kubectl(h: &Harness, args: &[&str]) -> String {
    harness::kubectl(h.plane.kubeconfig_path(), args, b"")
}

/// `mimeo migrate ARGS` with the plane's kubeconfig: (exit code, stdout, stderr).
fn mimeo_migrate(h: &Harness, args: &[&str]) -> (i32, String, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mimeo"))
        .arg("migrate")
        .args(args)
        .env("KUBECONFIG", h.plane.kubeconfig_path())
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The replicator's CRDs as its README says to patch them for templates: `spec.template`
/// untyped and kept whole, and the spec-level rule that does not compile against it dropped.
fn patched_crds(dir: &Path) -> Vec<PathBuf> {
    ["replicas", "clusterreplicas"]
        .map(|plural| {
            let mut crd = yaml(&replicator(&format!(
                "crds/core.open-control-plane.io_{plural}.yaml"
            )));
            for version in crd["spec"]["versions"].as_array_mut().unwrap() {
                let spec = &mut version["schema"]["openAPIV3Schema"]["properties"]["spec"];
                let template = spec["properties"]["template"].as_object_mut().unwrap();
                template.remove("type");
                template.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
                let rules = spec["x-kubernetes-validations"].as_array_mut().unwrap();
                rules.retain(|r| r["rule"] != "has(self.template) || size(self.sources) == 1");
                if rules.is_empty() {
                    spec.as_object_mut().unwrap().remove("x-kubernetes-validations");
                }
            }
            let path = dir.join(format!("{plural}.yaml"));
            std::fs::write(&path, serde_yaml_ng::to_string(&crd).unwrap()).unwrap();
            path
        })
        .to_vec()
}

/// What an example leaves on the platform cluster once the replicator ran.
struct Example {
    /// The (Cluster)Replica: kind, namespace, name.
    replica: (String, Option<String>, String),
    /// Its copies on the platform cluster (`namespace/name`), with their uids.
    copies: BTreeMap<String, String>,
}

/// The plane with the CRDs, the environment and `examples` (`simple/replica`): each one's
/// sources (those upstream lacks are `simple_cross_cluster/dynamic_namespace_before/source.yaml`,
/// as the fixture's README says), its (Cluster)Replica as `_after` shows it (the replicator's
/// finalizer on it) and its copies there, all applied with kubectl.
async fn platform(examples: &[&str]) -> (Harness, Vec<Example>) {
    let h = Harness::without_controller().await;
    let dir = tempfile::tempdir().unwrap();
    let mut crds = vec![fixture("clusters.openmcp.cloud_clusters.yaml")];
    crds.extend(patched_crds(dir.path()));
    h.plane
        .install_crds(&crds)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let environment = replicator("examples/environment");
    kubectl(&h, &["apply", "-f", environment.to_str().unwrap()]);
    let mut applied = Vec::new();
    for name in examples {
        let files = |suffix: &str| -> Vec<PathBuf> {
            let mut files: Vec<PathBuf> = std::fs::read_dir(replicator(&format!("examples/{name}_{suffix}")))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
                .collect();
            files.sort();
            files
        };
        let kind_of = |path: &Path| yaml(path)["kind"].as_str().unwrap().to_owned();
        let mut sources: Vec<PathBuf> = files("before")
            .into_iter()
            .filter(|p| !kind_of(p).ends_with("Replica"))
            .collect();
        if sources.is_empty() {
            sources.push(replicator(
                "examples/simple_cross_cluster/dynamic_namespace_before/source.yaml",
            ));
        }
        let after = files("after");
        let (replicas, copies): (Vec<PathBuf>, Vec<PathBuf>) =
            after.into_iter().partition(|p| kind_of(p).ends_with("Replica"));
        let replica = yaml(&replicas[0]);
        let namespaces: BTreeSet<String> = sources
            .iter()
            .chain(&copies)
            .chain(&replicas)
            .filter_map(|p| yaml(p)["metadata"]["namespace"].as_str().map(str::to_owned))
            .collect();
        for ns in namespaces {
            let (exists, _) =
                harness::run_kubectl(h.plane.kubeconfig_path(), &["get", "namespace", &ns], b"");
            if !exists {
                kubectl(&h, &["create", "namespace", &ns]);
            }
        }
        for file in sources.iter().chain(&replicas).chain(&copies) {
            kubectl(&h, &["apply", "-f", file.to_str().unwrap()]);
        }
        let mut uids = BTreeMap::new();
        for copy in &copies {
            let copy = yaml(copy);
            let (ns, name) = (
                copy["metadata"]["namespace"].as_str().unwrap(),
                copy["metadata"]["name"].as_str().unwrap(),
            );
            let secret = h.secrets(ns).get(name).await.unwrap();
            uids.insert(format!("{ns}/{name}"), secret.metadata.uid.unwrap());
        }
        applied.push(Example {
            replica: (
                replica["kind"].as_str().unwrap().to_owned(),
                replica["metadata"]["namespace"].as_str().map(str::to_owned),
                replica["metadata"]["name"].as_str().unwrap().to_owned(),
            ),
            copies: uids,
        });
    }
    (h, applied)
}

/// Waits until the ClusterSyncRule is Ready and Synced.
async fn wait_synced(h: &Harness, name: &str) -> ClusterSyncRule {
    let rules: Api<ClusterSyncRule> = Api::all(h.client.clone());
    let deadline = Instant::now() + harness::WAIT;
    loop {
        let rule = rules.get_opt(name).await.unwrap();
        let ready = rule
            .as_ref()
            .and_then(|r| r.status.as_ref())
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready").cloned());
        if ready.is_some_and(|r| r.status == "True" && r.reason == "Synced") {
            return rule.unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "ClusterSyncRule {name}: not Synced; last: {:#?}",
            rule.and_then(|r| r.status)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The cut-over note for `what`.
fn cut_over_note<'a>(notes: &'a str, what: &str) -> &'a str {
    notes
        .lines()
        .find(|l| l.contains(&format!("{what}: cut-over: before applying")))
        .unwrap_or_else(|| panic!("no cut-over note for {what} in:\n{notes}"))
}

/// The `-p '...'` JSON patch of the note's `kubectl patch` command.
fn finalizer_patch(note: &str) -> &str {
    let start = note.find("-p '").unwrap() + 4;
    let end = start + note[start..].find('\'').unwrap();
    &note[start..end]
}

/// The arguments of the note's closing `kubectl label` command.
fn relabel(note: &str) -> Vec<&str> {
    let start = note.find("kubectl label ").unwrap() + "kubectl ".len();
    note[start..].split_whitespace().collect()
}

/// The plan for `examples`, applied as its notes say; then the controller adopts each copy.
async fn cut_over(examples: &[&str], rules: &[&str], untranslated: &[&str]) -> (Harness, Vec<Example>, Plan) {
    let (mut h, applied) = platform(examples).await;
    let (code, yaml, notes) = mimeo_migrate(&h, &["--from", P]);
    assert_eq!(code, 0, "{notes}");
    assert!(
        !yaml.contains("cGFzc3dvcmQxMjM") && !yaml.contains("eyJhdXRocyI6"),
        "a Secret value in the output:\n{yaml}"
    );
    let document: Value = serde_yaml_ng::from_str(&yaml).unwrap();
    let plan = Plan::from_document(&document).unwrap().unwrap();
    let names: BTreeSet<&str> = plan
        .rules
        .iter()
        .map(|r| r["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, rules.iter().copied().collect(), "{yaml}\n{notes}");
    assert!(
        plan.consent.is_empty(),
        "ClusterSyncRules need no consent: {yaml}"
    );
    for what in untranslated {
        assert!(
            notes.contains(&format!("{P}: {what}: ")) && notes.contains("Not translated"),
            "{what} in:\n{notes}"
        );
    }
    // Every copy the replicator left is planned for adoption by its replica's rule.
    let expected: BTreeSet<String> = applied
        .iter()
        .filter(|e| !untranslated.iter().any(|u| u.ends_with(&e.replica.2)))
        .flat_map(|e| {
            let rule = match &e.replica.1 {
                Some(ns) => format!("ClusterSyncRule/{P}-{ns}-{}", e.replica.2),
                None => format!("ClusterSyncRule/{P}-{}", e.replica.2),
            };
            e.copies.keys().map(move |c| format!("{c} {rule}"))
        })
        .collect();
    let adopted: BTreeSet<String> = plan
        .adopt
        .iter()
        .map(|a| format!("{}/{} {}", a.namespace, a.name, a.rule))
        .collect();
    assert_eq!(adopted, expected, "{notes}");

    let (code, said) = harness::mimeo_diff(
        h.plane.kubeconfig_yaml(),
        &yaml,
        &["--next-to-kinds", "Cluster.clusters.openmcp.cloud"],
    );
    // Each copy to adopt is annotated; a forEach rule is not diffed, and says so (exit 2).
    for a in &plan.adopt {
        let line = format!(
            "~ annotate Secret {}/{}: mimeo.dev/adopt-by={}",
            a.namespace, a.name, a.rule
        );
        assert!(said.contains(&line), "missing {line:?} in:\n{said}");
    }
    let for_each = plan.rules.iter().any(|r| {
        r["spec"]["targets"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t.get("forEach").is_some())
    });
    assert_eq!(code, if for_each { 2 } else { 1 }, "{said}");
    assert_eq!(said.contains("ForEachNotShown"), for_each, "{said}");
    // 1. Ignore first.
    for e in &applied {
        let (kind, ns, name) = &e.replica;
        let resource = format!("{}s.core.open-control-plane.io", kind.to_lowercase());
        let mut args = vec!["annotate", &resource, name, "openmcp.cloud/operation=ignore"];
        if let Some(ns) = ns {
            args.extend(["-n", ns]);
        }
        kubectl(&h, &args);
    }
    // 2. Apply.
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &yaml).unwrap();
    let (code, out, errors) = mimeo_migrate(&h, &["--apply", file.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{errors}");
    // 3. The controller (following Clusters, as the note says) adopts: Synced.
    h.config_mut().next_to_kinds = vec!["Cluster.clusters.openmcp.cloud".parse().unwrap()];
    h.start_controller().await;
    for rule in rules {
        let synced = wait_synced(&h, rule).await;
        let status = synced.status.unwrap();
        assert_eq!(
            status.counts.get("Synced").copied().unwrap_or_default() as usize,
            plan.adopt
                .iter()
                .filter(|a| a.rule == format!("ClusterSyncRule/{rule}"))
                .count(),
            "{rule}: {status:#?}"
        );
    }
    // 4. The finalizer removed with the note's own patch, the (Cluster)Replica deleted.
    for e in applied
        .iter()
        .filter(|e| !untranslated.iter().any(|u| u.ends_with(&e.replica.2)))
    {
        let (kind, ns, name) = &e.replica;
        let what = match ns {
            Some(ns) => format!("{kind} {ns}/{name}"),
            None => format!("{kind} {name}"),
        };
        let resource = format!("{}s.core.open-control-plane.io", kind.to_lowercase());
        let note = cut_over_note(&notes, &what);
        let patch = finalizer_patch(note);
        let mut args = vec!["patch", &resource, name, "--type=json", "-p", patch];
        if let Some(ns) = ns {
            args.extend(["-n", ns]);
        }
        kubectl(&h, &args);
        let mut args = vec!["delete", &resource, name, "--wait=true", "--timeout=30s"];
        if let Some(ns) = ns {
            args.extend(["-n", ns]);
        }
        kubectl(&h, &args);
        // Then the replicator's labels dropped from its copies, as the note says.
        kubectl(&h, &relabel(note));
        for copy in e.copies.keys() {
            let (ns, name) = copy.split_once('/').unwrap();
            let secret = h.secrets(ns).get(name).await.unwrap();
            let labels = secret.metadata.labels.unwrap_or_default();
            assert!(
                !labels
                    .keys()
                    .any(|l| l.starts_with("replica.core.open-control-plane.io/")
                        || l == "openmcp.cloud/managed-by"),
                "{copy}: {labels:?}"
            );
        }
    }
    (h, applied, plan)
}

/// The copy is the same object the replicator wrote, now mimeo's.
async fn adopted_in_place(h: &Harness, copy: &str, uid: &str) -> Secret {
    let (ns, name) = copy.split_once('/').unwrap();
    let secret = h.secrets(ns).get(name).await.unwrap();
    assert_eq!(
        secret.metadata.uid.as_deref(),
        Some(uid),
        "{copy}: adopted in place"
    );
    let labels = secret.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("mimeo.dev/managed-by").map(String::as_str),
        Some("mimeo"),
        "{copy}: {labels:?}"
    );
    let annotations = secret.metadata.annotations.clone().unwrap_or_default();
    assert!(
        annotations
            .get("mimeo.dev/rule")
            .is_some_and(|r| r.starts_with(&format!("ClusterSyncRule/{P}-"))),
        "{copy}: {annotations:?}"
    );
    secret
}

#[tokio::test]
async fn from_openmcp_resource_replicator() {
    let replica = format!("{P}-test-01-simple");
    let next_to = format!("{P}-test-01-imagepull-next-to");
    let (h, applied, plan) = cut_over(
        &["simple/replica", "templating/next_to", "templating/multi_source"],
        &[&replica, &next_to],
        &["Replica test-01/combined-secret"],
    )
    .await;
    let rule = |name: &str| {
        plan.rules
            .iter()
            .find(|r| r["metadata"]["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(
        rule(&replica)["spec"]["targets"],
        json!([{"namespace": "bar", "createNamespace": true}])
    );
    assert_eq!(
        rule(&next_to)["spec"]["targets"],
        json!([{"forEach": {"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster",
                            "matchPurposes": [{"operator": "ContainsAll", "values": ["controlplane"]}]},
                "namespace": "{{object.namespace}}", "name": "imagepull-{{object.name}}"}])
    );
    for e in &applied[..2] {
        for (copy, uid) in &e.copies {
            adopted_in_place(&h, copy, uid).await;
        }
    }
    // simple: the source's labels and annotations and data, as the replicator copied them.
    let copy = h.secrets("bar").get("cryptic").await.unwrap();
    assert_eq!(
        harness::secret_value(&copy, "password").as_deref(),
        Some("password123")
    );
    let labels = copy.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("app").map(String::as_str), Some("foo"));
    assert_eq!(
        copy.metadata
            .annotations
            .unwrap_or_default()
            .get("foo.bar.baz/ann")
            .map(String::as_str),
        Some("true")
    );
    let pull = h.secrets("user-02").get("imagepull-cp-02").await.unwrap();
    assert_eq!(pull.type_.as_deref(), Some("kubernetes.io/dockerconfigjson"));
    // The untranslated Replica and its copy are left as they are.
    let combined = h.secrets("test-01").get("combined").await.unwrap();
    assert_eq!(
        combined.metadata.uid.as_deref(),
        applied[2].copies.get("test-01/combined").map(String::as_str)
    );
    assert!(
        !combined
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("mimeo.dev/managed-by")
    );
    let replicas = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("core.open-control-plane.io", "v1alpha1", "Replica"),
        "replicas",
    );
    let replicas: Api<DynamicObject> = Api::namespaced_with(h.client.clone(), "test-01", &replicas);
    let left: BTreeSet<String> = replicas
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|r| r.metadata.name.unwrap())
        .collect();
    assert_eq!(left, BTreeSet::from(["combined-secret".to_owned()]));
    let kept = replicas.get("combined-secret").await.unwrap();
    assert_eq!(kept.metadata.finalizers, Some(vec![FINALIZER.to_owned()]));
    // The copies outlive their Replicas: still there, still mimeo's, a while later.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for e in &applied[..2] {
        for (copy, uid) in &e.copies {
            adopted_in_place(&h, copy, uid).await;
        }
    }
}

/// The ClusterReplica of `simple` on a plane of its own: its copy is the same Secret as the
/// Replica's.
#[tokio::test]
async fn from_openmcp_resource_replicator_cluster_replica() {
    let rule = format!("{P}-simple");
    let (h, applied, plan) = cut_over(&["simple/clusterreplica"], &[&rule], &[]).await;
    assert_eq!(
        plan.rules[0]["spec"]["source"],
        json!({"kind": "Secret", "namespace": "foo", "name": "cryptic"})
    );
    let (copy, uid) = applied[0].copies.iter().next().unwrap();
    let copy = adopted_in_place(&h, copy, uid).await;
    assert_eq!(
        copy.metadata
            .annotations
            .unwrap_or_default()
            .get("mimeo.dev/rule"),
        Some(&format!("ClusterSyncRule/{rule}"))
    );
}
