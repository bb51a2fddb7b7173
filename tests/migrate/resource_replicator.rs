//! `mimeo migrate --from openmcp-resource-replicator` against a real apiserver: openMCP's
//! `Cluster` CRD and the replicator's CRDs (patched as the fixture's README says, so that
//! templates are stored), the upstream environment (its namespaces and `Cluster`s on the
//! platform cluster) and upstream examples applied with kubectl: their sources, their
//! (Cluster)Replicas as the replicator left them (with its finalizer), and the copies as their
//! `_after` files show them. Then the plan, the cut-over as the notes say it (ignore, apply,
//! Synced, finalizer removed, (Cluster)Replica deleted), and the controller's adoption: each copy
//! the same object (same uid), now mimeo's. The examples that copy onto other Clusters run with
//! the environment's two workload Clusters as control planes of their own, reached through
//! `--cluster-kubeconfig` and, once migrated, through the inventory's `AccessRequest`s, answered
//! by the test playing openMCP's cluster provider.

use crate::harness;
use crate::mimeo_migrate;

use harness::Harness;
use harness::openmcp_provider::{ProviderRules, run_provider};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use mimeo::api::ClusterSyncRule;
use mimeo::cmd::migrate::Plan;
use mimeo_envtest::ControlPlane;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
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

/// What an example leaves once the replicator ran.
struct Example {
    /// The (Cluster)Replica: kind, namespace, name.
    replica: (String, Option<String>, String),
    /// Its copies on the platform cluster (`namespace/name`), with their uids.
    copies: BTreeMap<String, String>,
    /// Its copies on other Clusters: (`namespace/name` of the Cluster, of the copy), with their
    /// uids.
    cluster_copies: BTreeMap<(String, String), String>,
    /// Each copy as its `_after` file shows it, by `namespace/name`.
    shown: BTreeMap<String, Value>,
}

/// The workload Clusters of the upstream environment (`workloads/wl-01`, `-02`) as control
/// planes of their own, by `namespace/name`.
type Workloads = BTreeMap<String, Arc<ControlPlane>>;

/// Applies `file` (or a folder of them) with kubectl to the plane of `kubeconfig`.
fn apply_on(kubeconfig: &Path, file: &Path) {
    harness::kubectl(kubeconfig, &["apply", "-f", file.to_str().unwrap()], b"");
}

/// Creates `namespace` with kubectl where it is missing, as the replicator would have.
fn namespace_on(kubeconfig: &Path, namespace: &str) {
    let (exists, _) = harness::run_kubectl(kubeconfig, &["get", "namespace", namespace], b"");
    if !exists {
        harness::kubectl(kubeconfig, &["create", "namespace", namespace], b"");
    }
}

/// The plane with the CRDs, the environment and `examples` (`simple/replica`): each one's
/// sources (those upstream lacks are `simple_cross_cluster/dynamic_namespace_before/source.yaml`,
/// as the fixture's README says), its (Cluster)Replica as `_after` shows it (the replicator's
/// finalizer on it) and its copies where `assign.json` puts them (on the platform cluster
/// without one, else on those of `workloads`), all applied with kubectl.
async fn platform(examples: &[&str], workloads: &Workloads) -> (Harness, Vec<Example>) {
    let h = Harness::without_controller().await;
    let dir = tempfile::tempdir().unwrap();
    let mut crds = vec![
        fixture("clusters.openmcp.cloud_clusters.yaml"),
        fixture("clusters.openmcp.cloud_accessrequests.yaml"),
    ];
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
        let assign: BTreeMap<String, Vec<String>> =
            std::fs::read_to_string(replicator(&format!("examples/{name}_after/assign.json")))
                .map(|t| serde_json::from_str(&t).unwrap())
                .unwrap_or_default();
        let clusters_of = |copy: &Path| -> Vec<&String> {
            let file = copy.file_name().unwrap().to_str().unwrap().to_owned();
            assign
                .iter()
                .filter(|(_, files)| files.contains(&file))
                .map(|(cluster, _)| cluster)
                .collect()
        };
        let (replicas, copies): (Vec<PathBuf>, Vec<PathBuf>) =
            after.into_iter().partition(|p| kind_of(p).ends_with("Replica"));
        let (onto, here): (Vec<PathBuf>, Vec<PathBuf>) =
            copies.into_iter().partition(|c| !clusters_of(c).is_empty());
        let replica = yaml(&replicas[0]);
        let namespaces: BTreeSet<String> = sources
            .iter()
            .chain(&here)
            .chain(&replicas)
            .filter_map(|p| yaml(p)["metadata"]["namespace"].as_str().map(str::to_owned))
            .collect();
        for ns in namespaces {
            namespace_on(h.plane.kubeconfig_path(), &ns);
        }
        for file in sources.iter().chain(&replicas).chain(&here) {
            kubectl(&h, &["apply", "-f", file.to_str().unwrap()]);
        }
        let ns_name = |copy: &Value| {
            format!(
                "{}/{}",
                copy["metadata"]["namespace"].as_str().unwrap(),
                copy["metadata"]["name"].as_str().unwrap()
            )
        };
        let mut uids = BTreeMap::new();
        let mut shown = BTreeMap::new();
        for copy in &here {
            let copy = yaml(copy);
            let (ns, name) = ns_name(&copy)
                .split_once('/')
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .unwrap();
            let secret = h.secrets(&ns).get(&name).await.unwrap();
            uids.insert(format!("{ns}/{name}"), secret.metadata.uid.unwrap());
            shown.insert(ns_name(&copy), copy);
        }
        let mut cluster_uids = BTreeMap::new();
        for file in &onto {
            let copy = yaml(file);
            let (ns, name) = ns_name(&copy)
                .split_once('/')
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .unwrap();
            for cluster in clusters_of(file) {
                let plane = &workloads[cluster];
                namespace_on(plane.kubeconfig_path(), &ns);
                apply_on(plane.kubeconfig_path(), file);
                let secret = Api::<Secret>::namespaced(plane.client().await.unwrap(), &ns)
                    .get(&name)
                    .await
                    .unwrap();
                cluster_uids.insert(
                    (cluster.clone(), format!("{ns}/{name}")),
                    secret.metadata.uid.unwrap(),
                );
            }
            shown.insert(ns_name(&copy), copy);
        }
        applied.push(Example {
            replica: (
                replica["kind"].as_str().unwrap().to_owned(),
                replica["metadata"]["namespace"].as_str().map(str::to_owned),
                replica["metadata"]["name"].as_str().unwrap().to_owned(),
            ),
            copies: uids,
            cluster_copies: cluster_uids,
            shown,
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
    let (mut h, applied) = platform(examples, &Workloads::new()).await;
    let (code, yaml, notes) = mimeo_migrate(&h, &["--from", P]);
    assert_eq!(code, 0, "{notes}");
    assert!(
        !yaml.contains("cGFzc3dvcmQxMjM") && !yaml.contains("eyJhdXRocyI6"),
        "a Secret value in the output:\n{yaml}"
    );
    let document: Value = serde_yaml_ng::from_str(&yaml).unwrap();
    let plan = Plan::from_document(&document).unwrap().unwrap();
    // `-o json` prints the same plan as JSON.
    let (code, json, _) = mimeo_migrate(&h, &["--from", P, "-o", "json"]);
    assert_eq!(code, 0);
    assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), document);
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

/// The replicator's labels on its copies.
fn replicator_labels(secret: &Secret) -> Vec<String> {
    secret
        .metadata
        .labels
        .iter()
        .flatten()
        .map(|(key, _)| key.clone())
        .filter(|l| l.starts_with("replica.core.open-control-plane.io/") || l == "openmcp.cloud/managed-by")
        .collect()
}

/// A cross-cluster example on a platform with the two workload Clusters as control planes of
/// their own: `mimeo migrate` reads them through `--cluster-kubeconfig` and plans each copy there
/// for adoption (in namespaces named or chosen by labels); the cut-over goes as its notes say;
/// the controller reaches the Clusters through the migrated ClusterInventory (AccessRequests
/// granted by the test, as openMCP's cluster provider) and adopts each copy in place: the same
/// object, with the data, type, labels and annotations the `_after` file shows, now mimeo's.
async fn onto_workload_clusters(example: &str) {
    let (wl_01, wl_02) = tokio::join!(ControlPlane::start(), ControlPlane::start());
    let workloads: Workloads = [("wl-01", wl_01), ("wl-02", wl_02)]
        .into_iter()
        .map(|(name, plane)| {
            let plane = Arc::new(plane.unwrap_or_else(|e| panic!("{e}")));
            apply_on(
                plane.kubeconfig_path(),
                &replicator(&format!("examples/environment/cluster_{name}")),
            );
            (format!("workloads/{name}"), plane)
        })
        .collect();
    let (mut h, applied) = platform(&[example], &workloads).await;
    let example_of = &applied[0];
    let rule = format!("{P}-test-01-simple");
    let reference = format!("ClusterSyncRule/{rule}");
    let with_clusters: Vec<String> = workloads
        .iter()
        .flat_map(|(cluster, plane)| {
            [
                "--cluster-kubeconfig".to_owned(),
                format!("{cluster}={}", plane.kubeconfig_path().display()),
            ]
        })
        .collect();
    let with_clusters: Vec<&str> = with_clusters.iter().map(String::as_str).collect();

    let mut args = vec!["--from", P];
    args.extend(&with_clusters);
    let (code, yaml, notes) = mimeo_migrate(&h, &args);
    assert_eq!(code, 0, "{notes}");
    assert!(
        !yaml.contains("cGFzc3dvcmQxMjM"),
        "a Secret value in the output:\n{yaml}"
    );
    let plan = Plan::from_document(&serde_yaml_ng::from_str(&yaml).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(plan.rules.len(), 1, "{yaml}\n{notes}");
    assert_eq!(plan.rules[0]["metadata"]["name"], rule.as_str());
    let adopt: BTreeSet<String> = plan
        .adopt
        .iter()
        .map(|a| {
            format!(
                "{} {}/{} {}",
                a.cluster.as_deref().unwrap_or("platform"),
                a.namespace,
                a.name,
                a.rule
            )
        })
        .collect();
    let expected: BTreeSet<String> = example_of
        .cluster_copies
        .keys()
        .map(|(cluster, copy)| format!("{cluster} {copy} {reference}"))
        .collect();
    assert_eq!(adopt, expected, "every copy on the workload Clusters:\n{notes}");
    assert!(!notes.contains("were not read"), "{notes}");

    // 1. Ignore, 2. apply (the adoption marks go onto the workload Clusters).
    kubectl(
        &h,
        &[
            "annotate",
            "replicas.core.open-control-plane.io",
            "simple",
            "-n",
            "test-01",
            "openmcp.cloud/operation=ignore",
        ],
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &yaml).unwrap();
    let mut args = vec!["--apply", file.path().to_str().unwrap()];
    args.extend(&with_clusters);
    let (code, out, errors) = mimeo_migrate(&h, &args);
    assert_eq!(code, 0, "{out}{errors}");
    let copy_on = |cluster: &str, copy: &str| {
        let plane = workloads[cluster].clone();
        let (ns, name) = copy
            .split_once('/')
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .unwrap();
        async move {
            Api::<Secret>::namespaced(plane.client().await.unwrap(), &ns)
                .get(&name)
                .await
                .unwrap()
        }
    };
    for (cluster, copy) in example_of.cluster_copies.keys() {
        let secret = copy_on(cluster, copy).await;
        let annotations = secret.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations.get("mimeo.dev/adopt-by"),
            Some(&reference),
            "{cluster} {copy}"
        );
    }

    // 3. The controller reaches the Clusters through the migrated inventory, and adopts.
    let planes = workloads.iter().map(|(cluster, plane)| async move {
        let (_, name) = cluster.split_once('/').unwrap();
        (name.to_owned(), (plane.clone(), plane.client().await.unwrap()))
    });
    let planes: BTreeMap<_, _> = futures::future::join_all(planes).await.into_iter().collect();
    run_provider(
        h.client.clone(),
        Arc::new(planes),
        Arc::new(Mutex::new(ProviderRules::default())),
    );
    h.start_controller().await;
    let synced = wait_synced(&h, &rule).await;
    let counts = synced.status.unwrap().counts;
    assert_eq!(
        counts.get("Synced").copied().unwrap_or_default() as usize,
        example_of.cluster_copies.len(),
        "{counts:?}"
    );
    for ((cluster, copy), uid) in &example_of.cluster_copies {
        let secret = copy_on(cluster, copy).await;
        assert_eq!(
            secret.metadata.uid.as_ref(),
            Some(uid),
            "{cluster} {copy}: adopted in place"
        );
        let labels = secret.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("mimeo.dev/managed-by").map(String::as_str),
            Some("mimeo"),
            "{cluster} {copy}: {labels:?}"
        );
        let shown = &example_of.shown[copy];
        assert_eq!(
            serde_json::to_value(&secret.data).unwrap(),
            shown["data"],
            "{cluster} {copy}: the data the _after file shows"
        );
        assert_eq!(secret.type_.as_deref(), shown["type"].as_str());
        for (key, value) in shown["metadata"]["labels"].as_object().unwrap() {
            assert_eq!(
                labels.get(key).map(String::as_str),
                value.as_str(),
                "{cluster} {copy}: label {key}"
            );
        }
        let annotations = secret.metadata.annotations.clone().unwrap_or_default();
        for (key, value) in shown["metadata"]["annotations"].as_object().unwrap() {
            assert_eq!(
                annotations.get(key).map(String::as_str),
                value.as_str(),
                "{cluster} {copy}: annotation {key}"
            );
        }
    }

    // 4. The finalizer removed and the Replica deleted; then its labels dropped on each Cluster.
    let note = cut_over_note(&notes, "Replica test-01/simple");
    assert!(note.contains("on each Cluster it copied onto"), "{note}");
    let resource = "replicas.core.open-control-plane.io";
    kubectl(
        &h,
        &[
            "patch",
            resource,
            "simple",
            "-n",
            "test-01",
            "--type=json",
            "-p",
            finalizer_patch(note),
        ],
    );
    kubectl(
        &h,
        &[
            "delete",
            resource,
            "simple",
            "-n",
            "test-01",
            "--wait=true",
            "--timeout=30s",
        ],
    );
    for plane in workloads.values() {
        harness::kubectl(plane.kubeconfig_path(), &relabel(note), b"");
    }
    for (cluster, copy) in example_of.cluster_copies.keys() {
        let secret = copy_on(cluster, copy).await;
        assert_eq!(
            replicator_labels(&secret),
            Vec::<String>::new(),
            "{cluster} {copy}"
        );
    }
    // The copies outlive the Replica: still there, still mimeo's, a while later.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for ((cluster, copy), uid) in &example_of.cluster_copies {
        let secret = copy_on(cluster, copy).await;
        assert_eq!(secret.metadata.uid.as_ref(), Some(uid), "{cluster} {copy}");
    }
    wait_synced(&h, &rule).await;
}

/// `simple_cross_cluster/fixed_namespace`: `bar` on each workload Cluster (created there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_openmcp_resource_replicator_onto_a_named_namespace() {
    onto_workload_clusters("simple_cross_cluster/fixed_namespace").await;
}

/// `simple_cross_cluster/dynamic_namespace`: the namespaces a label chooses on each Cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_openmcp_resource_replicator_onto_namespaces_chosen_by_labels() {
    onto_workload_clusters("simple_cross_cluster/dynamic_namespace").await;
}

/// `simple_cross_cluster/same_namespace`: the source's namespace, on each Cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_openmcp_resource_replicator_onto_the_sources_namespace() {
    onto_workload_clusters("simple_cross_cluster/same_namespace").await;
}
