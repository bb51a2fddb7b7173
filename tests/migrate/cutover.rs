//! The cut-over from another copier, as users make their objects: Namespaces and copies made with
//! client-side `kubectl apply`, `kubectl create`, Helm and server-side apply; `mimeo migrate`,
//! `mimeo diff` and `mimeo migrate --apply` on them, which must change only the annotations it
//! names; a tenant's annotations, which must grant it nothing; and the plan's YAML read back by
//! kubectl's own reader.

use crate::harness;

use harness::{Harness, eventually};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const REPLICATED_AT: &str = "replicator.v1.mittwald.de/replicated-at";

fn kubectl(h: &Harness, args: &[&str], stdin: &str) -> (bool, String) {
    harness::run_kubectl(h.plane.kubeconfig_path(), args, stdin.as_bytes())
}

fn mimeo(h: &Harness, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mimeo"))
        .args(args)
        .env("KUBECONFIG", h.plane.kubeconfig_path())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `mimeo migrate` (stdout, stderr), which must succeed.
fn migrate(h: &Harness, args: &[&str]) -> (String, String) {
    let (code, out, err) = mimeo(h, &[&["migrate"], args].concat());
    assert_eq!(code, 0, "{err}");
    (out, err)
}

/// `mimeo migrate --apply` of a plan, which must succeed.
fn apply_plan(h: &Harness, plan: &str) -> String {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), plan).unwrap();
    let (code, out, err) = mimeo(h, &["migrate", "--apply", file.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    out
}

/// An object's metadata as the test compares it: uid, labels, annotations (all but mimeo's own
/// and its adoption mark), and its content.
async fn snapshot(h: &Harness, kind: &str, ns: &str, name: &str) -> Value {
    let value = match kind {
        "Namespace" => serde_json::to_value(Api::<Namespace>::all(h.client.clone()).get(name).await.unwrap()),
        "Secret" => serde_json::to_value(h.secrets(ns).get(name).await.unwrap()),
        _ => serde_json::to_value(h.config_maps(ns).get(name).await.unwrap()),
    }
    .unwrap();
    let mut annotations: BTreeMap<String, Value> =
        serde_json::from_value(value["metadata"]["annotations"].clone()).unwrap_or_default();
    annotations.retain(|k, _| !k.starts_with("mimeo.dev/"));
    let mut labels: BTreeMap<String, Value> =
        serde_json::from_value(value["metadata"]["labels"].clone()).unwrap_or_default();
    labels.retain(|k, _| !k.starts_with("mimeo.dev/"));
    json!({"uid": value["metadata"]["uid"], "labels": labels, "annotations": annotations,
           "data": value["data"]})
}

/// A tiny chart holding one Namespace and one copy in it, as a platform's Helm release would.
fn chart(dir: &Path) {
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: team\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("templates/objects.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-helm\n  labels:\n    team: a\n    owner: helm\n\
         ---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n  namespace: team-helm\n  labels:\n    keep: me\n  \
         annotations:\n    replicator.v1.mittwald.de/replicated-at: \"2026-12-01T10:00:00Z\"\nstringData:\n  value: v1\n",
    )
    .unwrap();
}

/// Namespaces and copies made four ways; `migrate`, `diff` and `migrate --apply` leave every
/// field of theirs as it was, add only their annotations, and the copies are adopted in place.
/// (A server-side apply of a metadata-only Namespace, as the output used to be applied, takes the
/// fields of a client-side `kubectl apply` over and drops those it leaves out: shown here too.)
#[tokio::test]
async fn the_cut_over_removes_no_field_whatever_made_the_objects() {
    let mut h = Harness::without_controller().await;
    h.namespace("platform", &[], &[]).await;
    let source = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "platform",
                     "annotations": {"replicator.v1.mittwald.de/replicate-to-matching": "team=a"}},
        "stringData": {"value": "v1"}});
    kubectl(&h, &["apply", "-f", "-"], &source.to_string());
    let objects = |ns: &str, how: &str| {
        json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": ns, "labels": {"team": "a", "owner": how}, "annotations": {"note": how}}},
            {"apiVersion": "v1", "kind": "Secret",
             "metadata": {"name": "creds", "namespace": ns, "labels": {"keep": "me"},
                          "annotations": {REPLICATED_AT: "2026-12-01T10:00:00Z", "note": how}},
             "stringData": {"value": "v1"}}]})
        .to_string()
    };
    for (ns, how, args) in [
        ("team-csa", "apply", vec!["apply", "-f", "-"]),
        ("team-create", "create", vec!["create", "-f", "-"]),
        (
            "team-ssa",
            "server-side",
            vec!["apply", "--server-side", "-f", "-"],
        ),
    ] {
        let (ok, said) = kubectl(&h, &args, &objects(ns, how));
        assert!(ok, "{said}");
    }
    let dir = tempfile::tempdir().unwrap();
    chart(dir.path());
    let helm = mimeo_envtest::helm().unwrap();
    let out = Command::new(helm)
        .args(["install", "team", dir.path().to_str().unwrap(), "--kubeconfig"])
        .arg(h.plane.kubeconfig_path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let teams = ["team-csa", "team-create", "team-ssa", "team-helm"];
    let mut before = BTreeMap::new();
    for ns in teams {
        before.insert(format!("Namespace {ns}"), snapshot(&h, "Namespace", "", ns).await);
        before.insert(format!("Secret {ns}"), snapshot(&h, "Secret", ns, "creds").await);
    }

    let (plan, notes) = migrate(&h, &["--from", "replicator"]);
    for ns in teams {
        assert!(
            notes.contains(&format!(
                "consent: namespace {ns} would accept platform/replicator-secret-creds"
            )),
            "{notes}"
        );
    }
    assert!(notes.contains("written in namespace platform"), "{notes}");
    // kubectl refuses the plan whole: no apiserver serves its kind, so nothing is half-applied.
    let (ok, said) = kubectl(&h, &["apply", "--server-side", "-f", "-"], &plan);
    assert!(!ok && said.contains("Migration"), "{said}");
    let (code, said) = harness::mimeo_diff(h.plane.kubeconfig_yaml(), &plan, &[]);
    assert_eq!(code, 1, "{said}");
    for ns in teams {
        assert!(said.contains(&format!("~ change Secret {ns}/creds")), "{said}");
        assert!(
            said.contains(&format!(
                "~ annotate Namespace {ns}: mimeo.dev/accept-from: \"\" -> \"platform/replicator-secret-creds\""
            )),
            "{said}"
        );
        assert!(
            said.contains(&format!(
                "~ annotate Secret {ns}/creds: mimeo.dev/adopt-by=SyncRule/platform/replicator-secret-creds"
            )),
            "{said}"
        );
    }
    assert!(!said.contains("! "), "{said}");
    let applied = apply_plan(&h, &plan);
    assert!(!applied.contains('!'), "{applied}");

    for ns in teams {
        for (kind, key) in [
            ("Namespace", format!("Namespace {ns}")),
            ("Secret", format!("Secret {ns}")),
        ] {
            let name = if kind == "Namespace" { ns } else { "creds" };
            assert_eq!(
                snapshot(&h, kind, ns, name).await,
                before[&key],
                "{key}: a field changed"
            );
        }
        let namespace = Api::<Namespace>::all(h.client.clone()).get(ns).await.unwrap();
        assert_eq!(
            namespace.metadata.annotations.unwrap()["mimeo.dev/accept-from"],
            "platform/replicator-secret-creds"
        );
    }
    h.start_controller().await;
    for ns in teams {
        eventually("the copy adopted", || async {
            let s = h.secrets(ns).get("creds").await.ok()?;
            s.metadata
                .labels?
                .contains_key("mimeo.dev/managed-by")
                .then_some(())
        })
        .await;
        let after = snapshot(&h, "Secret", ns, "creds").await;
        assert_eq!(
            after["uid"],
            before[&format!("Secret {ns}")]["uid"],
            "{ns}: adopted in place"
        );
        assert_eq!(after["data"], before[&format!("Secret {ns}")]["data"]);
    }
    // The user's next client-side apply of the namespace keeps the consent mimeo added.
    let (ok, said) = kubectl(&h, &["apply", "-f", "-"], &objects("team-csa", "apply"));
    assert!(ok, "{said}");
    let namespace = Api::<Namespace>::all(h.client.clone())
        .get("team-csa")
        .await
        .unwrap();
    assert!(
        namespace
            .metadata
            .annotations
            .unwrap()
            .contains_key("mimeo.dev/accept-from")
    );

    // What the earlier output did: a metadata-only Namespace applied server-side drops a label
    // that a client-side apply had set.
    let (ok, said) = kubectl(&h, &["apply", "-f", "-"], &objects("team-old", "apply"));
    assert!(ok, "{said}");
    let old_style = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "team-old", "annotations": {"mimeo.dev/accept-from": "platform"}}});
    // `mimeo diff` on such a file says so, and exits 2.
    let document: Value = serde_yaml_ng::from_str(&plan).unwrap();
    let old_file = format!(
        "{}---\n{}",
        mimeo::cmd::migrate::yaml::to_string(&old_style),
        mimeo::cmd::migrate::yaml::to_string(&document["rules"][0])
    );
    let (code, said) = harness::mimeo_diff(h.plane.kubeconfig_yaml(), &old_file, &[]);
    assert_eq!(code, 2, "{said}");
    assert!(
        said.contains("! Namespace team-old: `kubectl apply --server-side` of this document would delete metadata.annotations.note, metadata.labels.owner, metadata.labels.team ("),
        "{said}"
    );
    let (ok, said) = kubectl(&h, &["apply", "--server-side", "-f", "-"], &old_style.to_string());
    assert!(ok, "{said}");
    let namespace = Api::<Namespace>::all(h.client.clone())
        .get("team-old")
        .await
        .unwrap();
    assert!(
        !namespace.metadata.labels.unwrap_or_default().contains_key("team"),
        "server-side apply of a metadata-only document no longer drops fields: the plan's design can be revisited"
    );
}

/// A tenant annotates its own Secret to be pushed into another namespace (and to every namespace
/// by a tool never installed). The migration asks no consent of the victim, adopts nothing of
/// the victim's, and translates nothing for the tool that never ran; the victim's Secret keeps
/// its value after the cut-over.
#[tokio::test]
async fn a_tenant_gains_nothing_by_annotating_its_own_secret() {
    let mut h = Harness::without_controller().await;
    for ns in ["platform", "team", "tenant", "victim"] {
        h.namespace(ns, &[], &[]).await;
    }
    // The replicator did run here: one source it pushed, and its copy.
    h.apply(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "ca", "namespace": "platform",
                     "annotations": {"replicator.v1.mittwald.de/replicate-to": "team"}},
        "stringData": {"value": "ca"}}))
        .await;
    h.apply(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "ca", "namespace": "team", "annotations": {REPLICATED_AT: "2026-12-01T10:00:00Z"}},
        "stringData": {"value": "ca"}}))
        .await;
    h.apply(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "victim"},
                   "stringData": {"password": "the-victims-own"}}),
    )
    .await;
    let tenant = harness::tenant_client(&h, "tenant").await;
    harness::apply_as(
        &tenant,
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "tenant", "annotations": {
                "replicator.v1.mittwald.de/replicate-to": "victim,kube-system",
                "kubed.appscode.com/sync": ""}},
            "stringData": {"password": "the-tenants"}}),
    )
    .await
    .unwrap();
    let victims = h.secrets("victim").get("db").await.unwrap();

    let (plan, notes) = migrate(&h, &[]);
    assert!(notes.contains("kubed: no sign of it in this cluster"), "{notes}");
    assert!(
        notes.contains("Secret victim/db: exists but carries no mark"),
        "{notes}"
    );
    assert!(
        notes.contains("consent: namespace team would accept platform/"),
        "{notes}"
    );
    for line in notes.lines().filter(|l| l.starts_with("consent:")) {
        assert!(
            !line.contains("victim") && !line.contains("kube-system"),
            "{line}"
        );
    }
    let document: Value = serde_yaml_ng::from_str(&plan).unwrap();
    assert_eq!(
        document["consent"],
        json!([{"namespace": "team", "acceptFrom": ["platform/replicator-secret-ca"]}]),
        "{plan}"
    );
    assert_eq!(document["adopt"].as_array().unwrap().len(), 1, "{plan}");
    apply_plan(&h, &plan);
    h.start_controller().await;
    let rule = h
        .wait_ready("tenant", "replicator-secret-db", "False", "NotAccepted")
        .await;
    println!("{:?}", rule.status.map(|s| s.conditions));
    h.wait_ready("platform", "replicator-secret-ca", "True", "Synced")
        .await;
    let after = h.secrets("victim").get("db").await.unwrap();
    assert_eq!(after.data, victims.data, "the victim's Secret keeps its value");
    assert_eq!(after.metadata.uid, victims.metadata.uid);
    assert!(
        !after
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("mimeo.dev/managed-by"),
        "not taken over"
    );
    let namespace = Api::<Namespace>::all(h.client.clone())
        .get("victim")
        .await
        .unwrap();
    assert!(
        !namespace
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("mimeo.dev/accept-from")
    );
    let kube_system: Vec<String> = h
        .config_maps("kube-system")
        .list(&ListParams::default().labels("mimeo.dev/managed-by"))
        .await
        .unwrap()
        .iter()
        .map(|c: &ConfigMap| c.metadata.name.clone().unwrap())
        .collect();
    assert!(kube_system.is_empty(), "{kube_system:?}");
}

/// Selector values that YAML 1.1 reads as another type (`yes`, `on`, `0777`) are quoted: kubectl
/// reads each rule of the plan as written and the apiserver takes it. The YAML writer the plan
/// used to be written with is refused on the same rule, which is what this test guards against.
#[tokio::test]
async fn the_plans_rules_read_back_through_kubectl_as_written() {
    let h = Harness::without_controller().await;
    h.namespace("platform", &[], &[]).await;
    h.namespace("team", &[("team", "yes"), ("tier", "on"), ("mode", "0777")], &[])
        .await;
    h.apply(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "ca", "namespace": "platform", "annotations": {
            "replicator.v1.mittwald.de/replicate-to-matching": "team=yes,tier=on,mode=0777"}},
        "stringData": {"value": "ca"}}))
        .await;
    let (plan, _) = migrate(&h, &["--from", "replicator"]);
    let document: Value = serde_yaml_ng::from_str(&plan).unwrap();
    let rule = &document["rules"][0];
    let labels = &rule["spec"]["targets"][0]["namespaceSelector"]["matchLabels"];
    assert_eq!(labels, &json!({"team": "yes", "tier": "on", "mode": "0777"}));
    let written = mimeo::cmd::migrate::yaml::to_string(rule);
    let (ok, said) = kubectl(
        &h,
        &["create", "--dry-run=server", "-o", "json", "-f", "-"],
        &written,
    );
    assert!(ok, "{said}\n{written}");
    let read: Value = serde_json::from_str(&said).unwrap();
    assert_eq!(
        read["spec"]["targets"][0]["namespaceSelector"]["matchLabels"],
        *labels
    );
    let before = serde_yaml_ng::to_string(rule).unwrap();
    let (ok, said) = kubectl(
        &h,
        &["create", "--dry-run=server", "-o", "json", "-f", "-"],
        &before,
    );
    assert!(!ok, "the unquoted YAML read as written after all:\n{said}");
}
