//! The conditions as GitOps tools read them: rules and RemoteClusters made with kubectl on a real
//! apiserver, then read back with `kubectl get -o json` and handed to kstatus (the library behind
//! Flux's health checks, `tests/support/kstatus/`). A rule in sync is Current; one waiting for
//! something that comes by itself is InProgress (`Reconciling`); one that only a change by someone
//! lets go on is Failed (`Stalled`), where with `Ready=False` alone it would read InProgress until
//! a deploy timed out. `kubectl wait --for=condition=Stalled` finds the stalled one, and
//! `kubectl get`'s Source column names a selector rule's selector.

use crate::harness;

use harness::{Harness, eventually};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

fn kubectl(h: &Harness, args: &[&str]) -> String {
    harness::kubectl(h.plane.kubeconfig_path(), args, b"")
}

/// What kstatus makes of each object `kubectl get RESOURCES -o json` lists: `Kind/name` to
/// (status, message).
fn kstatus_of(h: &Harness, resources: &str) -> BTreeMap<String, (String, String)> {
    let listed = kubectl(h, &["get", resources, "-A", "-o", "json"]);
    let reader = mimeo_envtest::kstatus().unwrap_or_else(|e| panic!("{e}"));
    let mut child = Command::new(reader)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(listed.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let mut parts = line.splitn(3, ' ');
            let object = parts.next().unwrap().to_owned();
            let status = parts.next().unwrap_or_default().to_owned();
            (object, (status, parts.next().unwrap_or_default().to_owned()))
        })
        .collect()
}

fn rule(name: &str, source: &str, target: &str) -> Value {
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
           "metadata": {"name": name, "namespace": "platform"},
           "spec": {"source": {"kind": "Secret", "name": source}, "targets": [{"namespace": target}]}})
}

#[tokio::test]
async fn kstatus_tells_a_stalled_rule_from_one_in_progress() {
    let h = Harness::start().await;
    h.namespace("platform", &[], &[]).await;
    h.namespace("apps", &[], &[("mimeo.dev/accept-from", "platform")])
        .await;
    h.namespace("closed", &[], &[]).await;
    h.namespace("mimeo-system", &[], &[]).await;
    h.put_secret("platform", "creds", &[("password", "one")]).await;
    for object in [
        rule("synced", "creds", "apps"),
        rule("waiting", "not-yet", "apps"),
        rule("refused", "creds", "closed"),
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster", "metadata": {"name": "no-secret"},
               "spec": {"kubeconfigSecretRef": {"namespace": "mimeo-system", "name": "not-yet"}}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "garbage", "namespace": "mimeo-system"},
               "stringData": {"value": "this is no kubeconfig"}}),
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster", "metadata": {"name": "garbage"},
               "spec": {"kubeconfigSecretRef": {"namespace": "mimeo-system", "name": "garbage"}}}),
    ] {
        harness::kubectl_apply(&h.plane, &object);
    }
    h.wait_ready("platform", "synced", "True", "Synced").await;
    h.wait_ready("platform", "waiting", "False", "SourceNotFound")
        .await;
    h.wait_ready("platform", "refused", "False", "NotAccepted").await;
    let expected = [
        ("SyncRule/synced", "Current"),
        ("SyncRule/waiting", "InProgress"),
        ("SyncRule/refused", "Failed"),
        ("RemoteCluster/no-secret", "InProgress"),
        ("RemoteCluster/garbage", "Failed"),
    ];
    let read = eventually("kstatus reads each as expected", || async {
        let mut read = kstatus_of(&h, "syncrules.mimeo.dev");
        read.extend(kstatus_of(&h, "remoteclusters.mimeo.dev"));
        expected
            .iter()
            .all(|(object, status)| read.get(*object).is_some_and(|(s, _)| s == status))
            .then_some(read)
    })
    .await;
    println!("{read:#?}");
    let (_, message) = &read["SyncRule/refused"];
    assert!(
        message.contains("closed"),
        "the stalled one says where: {message}"
    );

    // `kubectl wait` finds the stalled rule, and times out on the one in progress.
    let (waited, out) = harness::run_kubectl(
        h.plane.kubeconfig_path(),
        &[
            "wait",
            "-n",
            "platform",
            "syncrule/refused",
            "--for=condition=Stalled",
            "--timeout=10s",
        ],
        b"",
    );
    assert!(waited, "{out}");
    let (waited, _) = harness::run_kubectl(
        h.plane.kubeconfig_path(),
        &[
            "wait",
            "-n",
            "platform",
            "syncrule/waiting",
            "--for=condition=Stalled",
            "--timeout=1s",
        ],
        b"",
    );
    assert!(!waited, "a rule waiting for its source is not stalled");

    // `kubectl get` names each rule's source: by name, or the selector of a selector rule.
    harness::kubectl_apply(
        &h.plane,
        &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                "metadata": {"name": "chosen", "namespace": "platform"},
                "spec": {"source": {"kind": "Secret", "selector": {"matchLabels": {"app": "web"}}},
                         "targets": [{"namespace": "apps"}]}}),
    );
    h.wait_ready("platform", "chosen", "True", "NothingToCopy").await;
    let listed = kubectl(&h, &["get", "syncrules", "-n", "platform"]);
    let row = |name: &str| {
        listed
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no row for {name}:\n{listed}"))
            .to_owned()
    };
    assert!(row("chosen").contains("selector app=web"), "{listed}");
    assert!(row("synced").contains(" creds "), "{listed}");

    // The source comes: the rule is Ready, and neither condition is left.
    h.put_secret("platform", "not-yet", &[("password", "two")]).await;
    let rule = h.wait_ready("platform", "waiting", "True", "Synced").await;
    let types: Vec<String> = rule
        .status
        .unwrap()
        .conditions
        .into_iter()
        .map(|c| c.type_)
        .collect();
    assert_eq!(types, ["Ready"]);
    eventually("kstatus reads it Current", || async {
        let read = kstatus_of(&h, "syncrules.mimeo.dev");
        (read["SyncRule/waiting"].0 == "Current").then_some(())
    })
    .await;
}
