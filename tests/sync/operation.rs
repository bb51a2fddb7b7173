//! `openmcp.cloud/operation` on a rule, set with `kubectl annotate` as an operator would: under
//! `ignore` mimeo writes and removes nothing (a rotation does not reach the copy, a deleted rule
//! leaves its copy), and says so in the rule's status and `kubectl get`'s columns; `reconcile`
//! makes a pass, after which mimeo removes the annotation.

use crate::harness;

use harness::{Harness, eventually, eventually_within, secret_value, stays};
use kube::api::{Api, ListParams};
use serde_json::json;
use std::time::Duration;

fn kubectl(h: &Harness, args: &[&str]) -> String {
    harness::kubectl(h.plane.kubeconfig_path(), args, b"")
}

/// `kubectl patch --type=merge` of the rule, as an operator would.
fn patch_rule(h: &Harness, patch: &str) {
    kubectl(
        h,
        &[
            "patch",
            "syncrule",
            "creds",
            "-n",
            "platform",
            "--type=merge",
            "-p",
            patch,
        ],
    );
}

async fn copy_value(h: &Harness) -> Option<String> {
    let copy = h.secrets("app").get_opt("creds").await.unwrap()?;
    secret_value(&copy, "password")
}

#[tokio::test]
async fn ignore_keeps_mimeos_hands_off_and_reconcile_asks_for_a_pass() {
    let h = Harness::start().await;
    h.namespace("platform", &[], &[]).await;
    h.namespace("app", &[], &[("mimeo.dev/accept-from", "platform")])
        .await;
    h.put_secret("platform", "creds", &[("password", "one")]).await;
    harness::kubectl_apply(
        &h.plane,
        &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                "metadata": {"name": "creds", "namespace": "platform"},
                "spec": {"source": {"kind": "Secret", "name": "creds"}, "targets": [{"namespace": "app"}]}}),
    );
    h.wait_ready("platform", "creds", "True", "Synced").await;

    kubectl(
        &h,
        &[
            "annotate",
            "syncrule",
            "creds",
            "-n",
            "platform",
            "openmcp.cloud/operation=ignore",
        ],
    );
    let rule = h.wait_ready("platform", "creds", "False", "Ignored").await;
    // `kubectl get` says why; `-o wide` says the whole message.
    let listed = kubectl(&h, &["get", "syncrules", "-A"]);
    assert!(
        listed.contains("REASON") && listed.contains("Ignored"),
        "{listed}"
    );
    assert!(!listed.contains("MESSAGE"), "{listed}");
    let wide = kubectl(&h, &["get", "syncrules", "-A", "-o", "wide"]);
    assert!(
        wide.contains("MESSAGE") && wide.contains("annotated openmcp.cloud/operation: ignore"),
        "{wide}"
    );
    let status = rule.status.unwrap();
    assert_eq!(
        status.copies.as_deref(),
        Some("1/1"),
        "the copies as last seen stay in the status"
    );
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(h.client.clone(), "platform")
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("Ignored") && e.type_.as_deref() == Some("Normal")),
        "a Normal event says the rule is ignored"
    );
    h.put_secret("platform", "creds", &[("password", "two")]).await;
    stays(
        "the copy untouched while the rule is ignored",
        Duration::from_secs(3),
        || async { copy_value(&h).await.as_deref() == Some("one") },
    )
    .await;

    // `reconcile` in place of `ignore`: one pass, and the annotation goes.
    kubectl(
        &h,
        &[
            "annotate",
            "--overwrite",
            "syncrule",
            "creds",
            "-n",
            "platform",
            "openmcp.cloud/operation=reconcile",
        ],
    );
    eventually("the rotation reaches the copy", || async {
        (copy_value(&h).await.as_deref() == Some("two")).then_some(())
    })
    .await;
    h.wait_ready("platform", "creds", "True", "Synced").await;
    eventually("mimeo removes the reconcile annotation", || async {
        let rule = h.rule("platform", "creds").await.unwrap();
        let annotations = rule.metadata.annotations.unwrap_or_default();
        (!annotations.contains_key("openmcp.cloud/operation")).then_some(())
    })
    .await;

    // issue 56: a pass that writes the rule's status (from `Suspended` to `Synced`, the rotation
    // made meanwhile written) gives the rule a new version, so that removing the annotation on
    // the version the pass read was refused, and nothing woke the rule again: the annotation
    // stayed. Three times over (resumed and asked for a pass in one patch), it goes.
    for round in 1..=3 {
        let value = format!("round-{round}");
        patch_rule(&h, r#"{"spec":{"suspend":true}}"#);
        h.wait_ready("platform", "creds", "False", "Suspended").await;
        h.put_secret("platform", "creds", &[("password", &value)]).await;
        patch_rule(
            &h,
            r#"{"metadata":{"annotations":{"openmcp.cloud/operation":"reconcile"}},"spec":{"suspend":false}}"#,
        );
        let annotated = std::time::Instant::now();
        eventually("the rotation reaches the copy", || async {
            (copy_value(&h).await.as_deref() == Some(value.as_str())).then_some(())
        })
        .await;
        eventually_within(
            &format!("mimeo removes the reconcile annotation after a pass that wrote the status ({round})"),
            Duration::from_secs(3),
            || async {
                let rule = h.rule("platform", "creds").await.unwrap();
                let annotations = rule.metadata.annotations.unwrap_or_default();
                (!annotations.contains_key("openmcp.cloud/operation")).then_some(())
            },
        )
        .await;
        println!(
            "reconcile {round}: the annotation gone {:?} after it was set",
            annotated.elapsed()
        );
    }

    // Deleted while ignored: the rule goes, and its copy stays where it is.
    kubectl(
        &h,
        &[
            "annotate",
            "syncrule",
            "creds",
            "-n",
            "platform",
            "openmcp.cloud/operation=ignore",
        ],
    );
    h.wait_ready("platform", "creds", "False", "Ignored").await;
    kubectl(
        &h,
        &["delete", "syncrule", "creds", "-n", "platform", "--wait=false"],
    );
    eventually("the ignored rule deleted", || async {
        h.rule("platform", "creds").await.is_none().then_some(())
    })
    .await;
    stays("its copy left where it is", Duration::from_secs(2), || async {
        copy_value(&h).await.as_deref() == Some("round-3")
    })
    .await;
}

/// `spec.suspend`, set with `kubectl patch` as an operator would: the rule writes nothing (a
/// rotation of its source makes no write of a Secret but the source's own), its status says
/// `Suspended`; set back, the copy follows; a suspended rule that is deleted still removes its
/// copy, per `deletion`.
#[tokio::test]
async fn a_suspended_rule_writes_nothing_until_resumed() {
    let h = Harness::start().await;
    h.namespace("platform", &[], &[]).await;
    h.namespace("app", &[], &[("mimeo.dev/accept-from", "platform")])
        .await;
    h.put_secret("platform", "creds", &[("password", "one")]).await;
    harness::kubectl_apply(
        &h.plane,
        &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                "metadata": {"name": "creds", "namespace": "platform"},
                "spec": {"source": {"kind": "Secret", "name": "creds"}, "targets": [{"namespace": "app"}]}}),
    );
    h.wait_ready("platform", "creds", "True", "Synced").await;
    let suspend = |on: bool| {
        let patch = json!({"spec": {"suspend": on}}).to_string();
        kubectl(
            &h,
            &[
                "patch", "syncrule", "creds", "-n", "platform", "--type", "merge", "-p", &patch,
            ],
        )
    };
    suspend(true);
    h.wait_ready("platform", "creds", "False", "Suspended").await;
    let before = h.apiserver_writes(&["secrets"]).await;
    h.put_secret("platform", "creds", &[("password", "two")]).await;
    stays(
        "the copy untouched while suspended",
        Duration::from_secs(3),
        || async { copy_value(&h).await.as_deref() == Some("one") },
    )
    .await;
    let writes = h.apiserver_writes(&["secrets"]).await - before;
    assert_eq!(writes, 1, "only the source's own rotation is a write");

    suspend(false);
    eventually("the rotation reaches the copy once resumed", || async {
        (copy_value(&h).await.as_deref() == Some("two")).then_some(())
    })
    .await;
    h.wait_ready("platform", "creds", "True", "Synced").await;

    suspend(true);
    h.wait_ready("platform", "creds", "False", "Suspended").await;
    kubectl(
        &h,
        &["delete", "syncrule", "creds", "-n", "platform", "--wait=false"],
    );
    eventually("a deleted suspended rule still removes its copy", || async {
        copy_value(&h).await.is_none().then_some(())
    })
    .await;
}

/// `mimeo ARGS` with the plane's kubeconfig given as `--kubeconfig`: (exit code, stdout, stderr).
async fn mimeo(h: &Harness, args: &[&str]) -> (i32, String, String) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_mimeo"))
        .args(args)
        .arg("--kubeconfig")
        .arg(h.plane.kubeconfig_path())
        .env_remove("KUBECONFIG")
        .output()
        .await
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `mimeo suspend`, `resume` and `reconcile`, run as the binary a user runs, with `--kubeconfig`
/// and `--context`: suspended, a rotation makes no write of a copy; `reconcile` is refused for a
/// suspended rule and, resumed, makes a pass (no write, the copy in sync) and says how the rule
/// stands; with the controller stopped it says nobody took the request up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_resume_and_reconcile_from_the_command_line() {
    let mut h = Harness::start().await;
    h.namespace("platform", &[], &[]).await;
    h.namespace("app", &[], &[("mimeo.dev/accept-from", "platform")])
        .await;
    h.put_secret("platform", "creds", &[("password", "one")]).await;
    harness::kubectl_apply(
        &h.plane,
        &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                "metadata": {"name": "creds", "namespace": "platform"},
                "spec": {"source": {"kind": "Secret", "name": "creds"}, "targets": [{"namespace": "app"}]}}),
    );
    h.wait_ready("platform", "creds", "True", "Synced").await;

    let (code, out, err) = mimeo(&h, &["suspend", "creds", "-n", "platform"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("SyncRule platform/creds suspended"), "{out}");
    h.wait_ready("platform", "creds", "False", "Suspended").await;
    let before = h.apiserver_writes(&["secrets"]).await;
    h.put_secret("platform", "creds", &[("password", "two")]).await;
    stays(
        "the copy untouched while suspended",
        Duration::from_secs(2),
        || async { copy_value(&h).await.as_deref() == Some("one") },
    )
    .await;
    assert_eq!(
        h.apiserver_writes(&["secrets"]).await - before,
        1,
        "the rotation alone"
    );
    let (code, _, err) = mimeo(&h, &["reconcile", "creds", "-n", "platform"]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("is suspended") && err.contains("mimeo resume"),
        "{err}"
    );

    let (code, out, err) = mimeo(
        &h,
        &[
            "resume",
            "syncrule/creds",
            "-n",
            "platform",
            "--context",
            "envtest",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    eventually("the rotation reaches the copy once resumed", || async {
        (copy_value(&h).await.as_deref() == Some("two")).then_some(())
    })
    .await;
    h.wait_ready("platform", "creds", "True", "Synced").await;

    let before = h.apiserver_writes(&["secrets"]).await;
    let (code, out, err) = mimeo(&h, &["reconcile", "creds", "-n", "platform"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("SyncRule platform/creds reconciled: Ready True (Synced): 1/1 copies in sync"),
        "{out}"
    );
    assert_eq!(
        h.apiserver_writes(&["secrets"]).await - before,
        0,
        "a pass over a rule in sync writes no copy"
    );
    let rule = h.rule("platform", "creds").await.unwrap();
    assert!(
        !rule
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("openmcp.cloud/operation"),
        "the request taken up"
    );

    // Mistakes say what is wrong, in one line.
    let (code, _, err) = mimeo(&h, &["suspend", "nope", "-n", "platform"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("SyncRule platform/nope does not exist"), "{err}");
    let (code, _, err) = mimeo(
        &h,
        &["resume", "creds", "-n", "platform", "--context", "elsewhere"],
    )
    .await;
    assert_ne!(code, 0);
    assert!(err.contains("elsewhere"), "{err}");

    // Nobody to take the request up.
    h.stop_controller().await;
    let (code, _, err) = mimeo(&h, &["reconcile", "creds", "-n", "platform", "--timeout", "2s"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("did not take up the request"), "{err}");
}
