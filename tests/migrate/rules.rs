//! `mimeo migrate` against a real apiserver: for each tool, objects annotated as that tool's
//! documentation describes them, and the copies it made, with the marks it writes on them; the
//! command's output applied with `mimeo migrate --apply`; then mimeo keeps exactly the copies that tool makes (the
//! expected set written out here from the tool's semantics), adopting the existing ones in place.

use crate::harness;

use harness::{Harness, apiserver_writes, eventually};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

/// Runs `mimeo migrate` with the plane's kubeconfig: (stdout, stderr).
fn migrate(h: &Harness, from: &str) -> (String, String) {
    migrate_with(h, &["--from", from])
}

fn migrate_with(h: &Harness, args: &[&str]) -> (String, String) {
    let (code, stdout, stderr) = crate::mimeo_migrate(h, args);
    assert_eq!(code, 0, "{stderr}");
    (stdout, stderr)
}

/// The cut-over's third step: `mimeo migrate --apply` of the plan (its stdout).
async fn apply_all(h: &Harness, yaml: &str) -> String {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), yaml).unwrap();
    let (code, stdout, stderr) = crate::mimeo_migrate(h, &["--apply", file.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    stdout
}

/// `kubectl apply -f -` (client-side, as users apply their files).
fn kubectl_apply(h: &Harness, object: &Value) {
    harness::kubectl_apply(&h.plane, object);
}

/// Metadata with these annotations (none: no `annotations` field, which server-side apply would
/// otherwise own as a whole).
fn metadata(ns: &str, name: &str, pairs: &[(&str, &str)]) -> Value {
    let mut metadata = json!({"name": name, "namespace": ns});
    if !pairs.is_empty() {
        let annotations: serde_json::Map<_, _> =
            pairs.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        metadata["annotations"] = annotations.into();
    }
    metadata
}

async fn secret(h: &Harness, ns: &str, name: &str, value: &str, annotations_: &[(&str, &str)]) {
    h.apply(json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": metadata(ns, name, annotations_),
                   "stringData": {"value": value}}))
        .await;
}

async fn config_map(h: &Harness, ns: &str, name: &str, value: &str, annotations_: &[(&str, &str)]) {
    h.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": metadata(ns, name, annotations_),
                   "data": {"value": value}}))
        .await;
}

/// Every copy mimeo holds now, as `Kind ns/name`.
async fn mimeo_copies(h: &Harness) -> BTreeSet<String> {
    let params = ListParams::default().labels("mimeo.dev/managed-by=mimeo");
    let mut out = BTreeSet::new();
    for s in Api::<Secret>::all(h.client.clone()).list(&params).await.unwrap() {
        out.insert(format!(
            "Secret {}/{}",
            s.metadata.namespace.unwrap(),
            s.metadata.name.unwrap()
        ));
    }
    for c in Api::<ConfigMap>::all(h.client.clone())
        .list(&params)
        .await
        .unwrap()
    {
        out.insert(format!(
            "ConfigMap {}/{}",
            c.metadata.namespace.unwrap(),
            c.metadata.name.unwrap()
        ));
    }
    out
}

/// Waits until mimeo holds exactly `expected`, then checks that nothing is written for 5 s.
async fn keeps_exactly(h: &Harness, expected: &[&str]) {
    let expected: BTreeSet<String> = expected.iter().map(|s| s.to_string()).collect();
    eventually("mimeo holds exactly the expected copies", || async {
        let got = mimeo_copies(h).await;
        (got == expected).then_some(()).or_else(|| {
            println!("copies now: {got:?}");
            None
        })
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = apiserver_writes(&h.client, &["secrets", "configmaps"]).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = apiserver_writes(&h.client, &["secrets", "configmaps"]).await;
    assert_eq!(after - before, 0, "copies written while nothing changed");
    assert_eq!(mimeo_copies(h).await, expected);
}

/// The uid and value of an existing copy, to show it was adopted in place with its content.
async fn uid_and_value(h: &Harness, ns: &str, name: &str) -> (String, Value) {
    let s = Api::<Secret>::namespaced(h.client.clone(), ns)
        .get(name)
        .await
        .unwrap();
    (s.metadata.uid.unwrap(), serde_json::to_value(s.data).unwrap())
}

/// kubernetes-replicator's fixture, as its README describes it: in `default`, a Secret pushed by
/// names and a pattern, a ConfigMap pushed by a selector, a Secret that allows pulls into `other`
/// and `namespace-.*`; pull replicas in `other` (holding `replica`) and in `nope` (refused).
async fn replicator_fixture(h: &Harness, replica: &str) {
    // The namespaces as a platform makes them: client-side `kubectl apply`, labels and all.
    for (ns, labels) in [
        ("my-ns-1", json!({})),
        ("namespace-1", json!({})),
        ("namespace-22", json!({"team": "a"})),
        ("other", json!({"team": "a"})),
        ("nope", json!({})),
    ] {
        kubectl_apply(
            h,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}),
        );
    }
    const P: &str = "replicator.v1.mittwald.de/";
    let a = |k: &str| format!("{P}{k}");
    secret(
        h,
        "default",
        "test-secret",
        "s1",
        &[(&a("replicate-to"), "my-ns-1,namespace-[0-9]*")],
    )
    .await;
    config_map(
        h,
        "default",
        "settings",
        "c1",
        &[(&a("replicate-to-matching"), "team=a")],
    )
    .await;
    let (allowed, allowed_namespaces) = (a("replication-allowed"), a("replication-allowed-namespaces"));
    let allows = [
        (allowed.as_str(), "true"),
        (allowed_namespaces.as_str(), "other,namespace-.*"),
    ];
    secret(h, "default", "some-secret", "p1", &allows).await;
    let from = a("replicate-from");
    let from = [(from.as_str(), "default/some-secret")];
    secret(h, "other", "secret-replica", replica, &from).await;
    secret(h, "nope", "secret-replica", "", &from).await;
}

/// kubernetes-replicator: push by names, a regular expression and a label selector; pull with
/// `replicate-from`, allowed and refused.
#[tokio::test]
async fn from_kubernetes_replicator() {
    let mut h = Harness::without_controller().await;
    replicator_fixture(&h, "p1").await;
    // The copies the replicator pushed, with the marks it writes; the pull replicas are in the
    // fixture.
    let marks = [
        ("replicator.v1.mittwald.de/replicated-at", "2026-12-01T10:00:00Z"),
        ("replicator.v1.mittwald.de/replicated-from-version", "1234"),
    ];
    for ns in ["my-ns-1", "namespace-1", "namespace-22"] {
        secret(&h, ns, "test-secret", "s1", &marks).await;
    }
    for ns in ["namespace-22", "other"] {
        config_map(&h, ns, "settings", "c1", &marks).await;
    }
    let adopted_before = uid_and_value(&h, "my-ns-1", "test-secret").await;

    let (yaml, notes) = migrate(&h, "replicator");
    assert!(
        !yaml.contains("czE") && !yaml.contains("cDE"),
        "a Secret value in the output:\n{yaml}"
    );
    assert!(notes.contains("does not allow the namespace nope"), "{notes}");
    assert!(
        notes.contains("\"namespace-[0-9]*\" becomes a namespacePattern target"),
        "{notes}"
    );
    // The cut-over's second step: what applying the migration would do, consent and adoption
    // marks of the same file included. The copy the replicator made is adopted, not a conflict.
    let (code, said) = harness::mimeo_diff(h.plane.kubeconfig_yaml(), &yaml, &[]);
    assert_eq!(code, 1, "{said}");
    for expected in [
        "~ change Secret my-ns-1/test-secret",
        "~ change Secret namespace-1/test-secret",
        "~ change Secret namespace-22/test-secret",
        "~ change ConfigMap other/settings",
        "~ change Secret other/secret-replica",
    ] {
        assert!(said.contains(expected), "missing {expected:?} in:\n{said}");
    }
    assert!(
        !said.contains("! Conflict") && !said.contains("! NotAccepted"),
        "{said}"
    );
    assert!(
        !said.contains("czE") && !said.contains("cDE"),
        "a Secret value in the diff:\n{said}"
    );
    apply_all(&h, &yaml).await;
    h.start_controller().await;
    keeps_exactly(
        &h,
        &[
            "ConfigMap namespace-22/settings",
            "ConfigMap other/settings",
            "Secret my-ns-1/test-secret",
            "Secret namespace-1/test-secret",
            "Secret namespace-22/test-secret",
            "Secret other/secret-replica",
        ],
    )
    .await;
    assert_eq!(
        uid_and_value(&h, "my-ns-1", "test-secret").await,
        adopted_before,
        "adopted in place"
    );
    let replica = uid_and_value(&h, "other", "secret-replica").await;
    assert_eq!(replica.1, json!({"value": "cDE="}));
    // The replicator's pattern follows namespaces created later, as it did there: one that
    // matches and accepts the rule gets its copy; one that matches but does not accept, none.
    h.namespace(
        "namespace-3",
        &[],
        &[("mimeo.dev/accept-from", "default/replicator-secret-test-secret")],
    )
    .await;
    h.namespace("namespace-4", &[], &[]).await;
    eventually("the copy in a namespace created later", || async {
        mimeo_copies(&h)
            .await
            .contains("Secret namespace-3/test-secret")
            .then_some(())
    })
    .await;
    assert!(!mimeo_copies(&h).await.contains("Secret namespace-4/test-secret"));
    // The refused replica is left as it was: not mimeo's.
    let refused = Api::<Secret>::namespaced(h.client.clone(), "nope")
        .get("secret-replica")
        .await
        .unwrap();
    assert!(refused.metadata.labels.unwrap_or_default().is_empty());
}

/// kubernetes-reflector: auto-reflection by pattern, a hand-made mirror (`reflects`), and a
/// mirror into a namespace the source does not allow.
#[tokio::test]
async fn from_kubernetes_reflector() {
    let mut h = Harness::without_controller().await;
    for ns in ["cert-manager", "app-1", "app-2", "manual", "web"] {
        h.namespace(ns, &[], &[]).await;
    }
    const P: &str = "reflector.v1.k8s.emberstack.com/";
    let a = |k: &str| format!("{P}{k}");
    let (allowed, namespaces, auto, auto_ns) = (
        a("reflection-allowed"),
        a("reflection-allowed-namespaces"),
        a("reflection-auto-enabled"),
        a("reflection-auto-namespaces"),
    );
    secret(
        &h,
        "cert-manager",
        "wildcard-tls",
        "t1",
        &[
            (&allowed, "true"),
            (&namespaces, "app-[0-9]+,manual"),
            (&auto, "true"),
            (&auto_ns, "app-.*"),
        ],
    )
    .await;
    // Automatic mirrors carry `reflects` as well as `auto-reflects`, as the reflector writes them.
    for ns in ["app-1", "app-2"] {
        secret(
            &h,
            ns,
            "wildcard-tls",
            "t1",
            &[
                (&a("auto-reflects"), "True"),
                (&a("reflects"), "cert-manager/wildcard-tls"),
                (&a("reflected-version"), "42"),
            ],
        )
        .await;
    }
    secret(
        &h,
        "manual",
        "tls",
        "t1",
        &[
            (&a("reflects"), "cert-manager/wildcard-tls"),
            (&a("reflected-version"), "42"),
        ],
    )
    .await;
    secret(
        &h,
        "web",
        "tls",
        "",
        &[(&a("reflects"), "cert-manager/wildcard-tls")],
    )
    .await;
    let adopted_before = uid_and_value(&h, "manual", "tls").await;

    let (yaml, notes) = migrate(&h, "reflector");
    assert!(
        notes.contains("which does not allow the namespace web"),
        "{notes}"
    );
    apply_all(&h, &yaml).await;
    h.start_controller().await;
    keeps_exactly(
        &h,
        &[
            "Secret app-1/wildcard-tls",
            "Secret app-2/wildcard-tls",
            "Secret manual/tls",
        ],
    )
    .await;
    // One rule per copy: an automatic mirror, which names its source in `reflects` too, is the
    // auto-reflection rule's alone, and every rule is Synced (none stays in Conflict).
    let rules = Api::<mimeo::api::SyncRule>::namespaced(h.client.clone(), "cert-manager")
        .list(&ListParams::default())
        .await
        .unwrap();
    let names: BTreeSet<String> = rules.iter().map(|r| r.metadata.name.clone().unwrap()).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "reflector-mirrors-secret-wildcard-tls".to_owned(),
            "reflector-secret-wildcard-tls".to_owned()
        ])
    );
    for name in &names {
        h.wait_ready("cert-manager", name, "True", "Synced").await;
    }
    assert_eq!(
        uid_and_value(&h, "manual", "tls").await,
        adopted_before,
        "adopted in place"
    );
}

/// config-syncer (kubed): into every other namespace, and into those a selector picks.
#[tokio::test]
async fn from_config_syncer() {
    let mut h = Harness::without_controller().await;
    for (ns, labels) in [("platform", vec![]), ("a", vec![("app", "kubed")]), ("b", vec![])] {
        h.namespace(ns, &labels, &[]).await;
    }
    config_map(&h, "platform", "omni", "o", &[("kubed.appscode.com/sync", "")]).await;
    secret(
        &h,
        "platform",
        "picked",
        "k",
        &[("kubed.appscode.com/sync", "app=kubed")],
    )
    .await;
    // The copies config-syncer made, with the origin it writes on each.
    let origin = |name: &str| {
        json!({"namespace": "platform", "name": name, "uid": "u", "resourceVersion": "1"}).to_string()
    };
    for ns in [
        "a",
        "b",
        "default",
        "kube-system",
        "kube-public",
        "kube-node-lease",
    ] {
        config_map(
            &h,
            ns,
            "omni",
            "o",
            &[("kubed.appscode.com/origin", &origin("omni"))],
        )
        .await;
    }
    secret(
        &h,
        "a",
        "picked",
        "k",
        &[("kubed.appscode.com/origin", &origin("picked"))],
    )
    .await;

    // Without --allow-system-namespaces, kube-system is neither asked nor adopted.
    let (yaml, notes) = migrate(&h, "kubed");
    assert!(
        notes.contains("ConfigMap kube-system/omni: in a system namespace"),
        "{notes}"
    );
    assert!(!yaml.contains("\"kube-system\""), "{yaml}");
    let (yaml, _) = migrate_with(&h, &["--from", "kubed", "--allow-system-namespaces"]);
    apply_all(&h, &yaml).await;
    h.start_controller().await;
    // Every other namespace, the system ones too, as config-syncer does.
    keeps_exactly(
        &h,
        &[
            "ConfigMap a/omni",
            "ConfigMap b/omni",
            "ConfigMap default/omni",
            "ConfigMap kube-node-lease/omni",
            "ConfigMap kube-public/omni",
            "ConfigMap kube-system/omni",
            "Secret a/picked",
        ],
    )
    .await;
    // A namespace labelled later is picked up by the selector, consent given as the docs say.
    h.namespace("c", &[("app", "kubed")], &[("mimeo.dev/accept-from", "platform")])
        .await;
    eventually("the copy in a namespace labelled later", || async {
        mimeo_copies(&h).await.contains("Secret c/picked").then_some(())
    })
    .await;
}

/// Kyverno: a ClusterPolicy that clones a Secret into every namespace but kube-system, and one
/// that clones a labelled list into namespaces with a label.
#[tokio::test]
async fn from_kyverno_clone_policies() {
    let mut h = Harness::without_controller().await;
    let crds = std::path::PathBuf::from("/work/shared/fixtures/kyverno/crds/kyverno.io_clusterpolicies.yaml");
    let beside = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/kyverno/crds/kyverno.io_clusterpolicies.yaml");
    let crd = if beside.exists() { beside } else { crds };
    h.plane.install_crds(&[crd]).await.unwrap();
    for (ns, labels) in [
        ("platform", vec![]),
        ("team-a", vec![("env", "prod")]),
        ("team-b", vec![]),
    ] {
        h.namespace(ns, &labels, &[]).await;
    }
    secret(&h, "platform", "regcred", "r", &[]).await;
    h.apply(json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "ca", "namespace": "platform", "labels": {"allowedToBeCloned": "true"}},
                   "stringData": {"value": "c"}}))
        .await;
    // What Kyverno generated, labelled as it labels what it generates.
    h.apply(json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "regcred", "namespace": "team-a", "labels": {
                       "app.kubernetes.io/managed-by": "kyverno",
                       "generate.kyverno.io/policy-name": "sync-secrets",
                       "generate.kyverno.io/rule-name": "sync-image-pull-secret"}},
                   "stringData": {"value": "r"}}))
        .await;
    let adopted_before = uid_and_value(&h, "team-a", "regcred").await;
    h.apply(json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "sync-secrets"},
        "spec": {"rules": [
            {"name": "sync-image-pull-secret",
             "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
             "exclude": {"any": [{"resources": {"names": ["kube-system", "kube-public", "kube-node-lease", "default"]}}]},
             "generate": {"apiVersion": "v1", "kind": "Secret", "name": "regcred",
                          "namespace": "{{request.object.metadata.name}}", "synchronize": true,
                          "clone": {"namespace": "platform", "name": "regcred"}}},
            {"name": "sync-list",
             "match": {"any": [{"resources": {"kinds": ["Namespace"], "selector": {"matchLabels": {"env": "prod"}}}}]},
             "generate": {"namespace": "{{request.object.metadata.name}}", "synchronize": true,
                          "cloneList": {"namespace": "platform", "kinds": ["v1/Secret"],
                                        "selector": {"matchLabels": {"allowedToBeCloned": "true"}}}}}]}}))
        .await;

    let (yaml, notes) = migrate(&h, "kyverno");
    apply_all(&h, &yaml).await;
    h.start_controller().await;
    // kube-system and the others excluded; the source's own namespace keeps its source.
    keeps_exactly(
        &h,
        &[
            "Secret team-a/ca",
            "Secret team-a/regcred",
            "Secret team-b/regcred",
        ],
    )
    .await;
    assert_eq!(
        uid_and_value(&h, "team-a", "regcred").await,
        adopted_before,
        "adopted in place: {notes}"
    );
}

/// Every namespace's labels.
async fn namespace_labels(h: &Harness) -> Vec<(String, std::collections::BTreeMap<String, String>)> {
    Api::<k8s_openapi::api::core::v1::Namespace>::all(h.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| (n.metadata.name.unwrap(), n.metadata.labels.unwrap_or_default()))
        .collect()
}

/// The copies the replicator made: every object carrying its `replicated-at` mark.
async fn replicator_copies(h: &Harness) -> BTreeSet<String> {
    let marked = |a: &Option<std::collections::BTreeMap<String, String>>| {
        a.as_ref()
            .is_some_and(|a| a.contains_key("replicator.v1.mittwald.de/replicated-at"))
    };
    let mut out = BTreeSet::new();
    for s in Api::<Secret>::all(h.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        if marked(&s.metadata.annotations) {
            out.insert(format!(
                "Secret {}/{}",
                s.metadata.namespace.unwrap(),
                s.metadata.name.unwrap()
            ));
        }
    }
    for c in Api::<ConfigMap>::all(h.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        if marked(&c.metadata.annotations) {
            out.insert(format!(
                "ConfigMap {}/{}",
                c.metadata.namespace.unwrap(),
                c.metadata.name.unwrap()
            ));
        }
    }
    out
}

/// The real kubernetes-replicator (v2.12.4, built from `../shared/peers/`) on one fixture first,
/// then `mimeo migrate`, the replicator stopped, and mimeo: mimeo keeps the very copies the
/// replicator made, with the same content, adopting every one in place.
#[tokio::test]
async fn the_real_replicator_and_mimeo_after_migrating_keep_the_same_copies() {
    let peers = ["../shared/peers", "/work/shared/peers"]
        .iter()
        .map(|p| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(p))
        .find(|p| p.join("build-kubernetes-replicator.sh").exists())
        .expect("../shared/peers/build-kubernetes-replicator.sh");
    let build = std::process::Command::new("bash")
        .arg(peers.join("build-kubernetes-replicator.sh"))
        .output()
        .unwrap();
    assert!(
        build.status.success(),
        "{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let binary = String::from_utf8(build.stdout).unwrap().trim().to_owned();

    let mut h = Harness::without_controller().await;
    replicator_fixture(&h, "").await;

    let mut replicator = std::process::Command::new(&binary)
        .args([
            "--kubeconfig",
            h.plane.kubeconfig_path().to_str().unwrap(),
            "--status-addr",
            "127.0.0.1:0",
        ])
        .args([
            "--replicate-roles=false",
            "--replicate-role-bindings=false",
            "--replicate-service-accounts=false",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Settled: the same copies for 5 s running.
    let mut made = BTreeSet::new();
    let mut stable_since = std::time::Instant::now();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while stable_since.elapsed() < Duration::from_secs(5) {
        assert!(
            std::time::Instant::now() < deadline,
            "the replicator did not settle: {made:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = replicator_copies(&h).await;
        if now != made || now.is_empty() {
            made = now;
            stable_since = std::time::Instant::now();
        }
    }
    println!("the replicator made {} copies: {made:?}", made.len());
    let mut uids = Vec::new();
    for copy in &made {
        let (kind, place) = copy.split_once(' ').unwrap();
        let (ns, name) = place.split_once('/').unwrap();
        if kind == "Secret" {
            uids.push((ns.to_owned(), name.to_owned(), uid_and_value(&h, ns, name).await));
        }
    }

    let labels_before = namespace_labels(&h).await;
    let (yaml, _) = migrate(&h, "replicator");
    apply_all(&h, &yaml).await;
    // The replicator still runs (step 4 stops it): the cut-over took no label of the namespaces
    // it selects by, so it keeps every copy it made, in place.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(namespace_labels(&h).await, labels_before);
    assert_eq!(
        replicator_copies(&h).await,
        made,
        "the replicator still holds its copies"
    );
    for (ns, name, before) in &uids {
        assert_eq!(
            &uid_and_value(&h, ns, name).await,
            before,
            "{ns}/{name} untouched"
        );
    }
    replicator.kill().unwrap();
    replicator.wait().unwrap();
    h.start_controller().await;
    let made: Vec<&str> = made.iter().map(String::as_str).collect();
    keeps_exactly(&h, &made).await;
    for (ns, name, before) in uids {
        assert_eq!(
            uid_and_value(&h, &ns, &name).await,
            before,
            "{ns}/{name} adopted in place"
        );
    }
}

/// `mimeo.dev/adopt-by` is consent to be taken over, not consent to receive copies: a rule that
/// the target namespace does not accept adopts nothing there, and a mark naming another rule
/// adopts nothing either.
#[tokio::test]
async fn an_adopt_by_mark_does_not_stand_in_for_consent() {
    let h = Harness::start().await;
    h.namespace("platform", &[], &[]).await;
    h.namespace("closed", &[], &[]).await;
    h.namespace("open", &[], &[("mimeo.dev/accept-from", "platform")])
        .await;
    secret(&h, "platform", "creds", "new", &[]).await;
    let mark = [("mimeo.dev/adopt-by", "SyncRule/platform/creds")];
    secret(&h, "closed", "creds", "old", &mark).await;
    secret(
        &h,
        "open",
        "creds",
        "old",
        &[("mimeo.dev/adopt-by", "SyncRule/platform/another")],
    )
    .await;
    h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                   "metadata": {"name": "creds", "namespace": "platform"},
                   "spec": {"source": {"kind": "Secret", "name": "creds"},
                            "targets": [{"namespace": "closed"}, {"namespace": "open"}]}}))
        .await;
    let states = eventually("both copies reported", || async {
        let status = h.rule("platform", "creds").await?.status?;
        let mut states: Vec<String> = status
            .problems
            .iter()
            .map(|t| format!("{} {:?}", t.namespace.clone().unwrap_or_default(), t.state))
            .collect();
        // Problems are listed worst first, not by place.
        states.sort();
        (states.len() == 2).then_some(states)
    })
    .await;
    assert_eq!(states, ["closed NotAccepted", "open Conflict"]);
    for ns in ["closed", "open"] {
        let (_, value) = uid_and_value(&h, ns, "creds").await;
        assert_eq!(value, json!({"value": "b2xk"}), "{ns} left as it was");
    }
}
