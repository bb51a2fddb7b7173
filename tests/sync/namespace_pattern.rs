//! A `namespacePattern` target on a real apiserver: the namespaces whose whole name matches (and
//! that accept the rule) get copies, namespaces created later too; a pattern that does not
//! compile is a clear condition.

use crate::harness;

use harness::{Harness, eventually, stays};
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn a_pattern_follows_namespaces_created_later() {
    let h = Harness::start().await;
    let accept = [("mimeo.dev/accept-from", "platform")];
    h.namespace("platform", &[], &[]).await;
    for ns in ["app-1", "app-x", "xapp-1"] {
        h.namespace(ns, &[], &accept).await;
    }
    h.put_secret("platform", "creds", &[("token", "t")]).await;
    h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                   "metadata": {"name": "creds", "namespace": "platform"},
                   "spec": {"source": {"kind": "Secret", "name": "creds"},
                            "targets": [{"namespacePattern": "app-[0-9]+"}]}}))
        .await;
    h.wait_ready("platform", "creds", "True", "Synced").await;
    assert!(h.secrets("app-1").get_opt("creds").await.unwrap().is_some());
    for ns in ["app-x", "xapp-1"] {
        assert!(h.secrets(ns).get_opt("creds").await.unwrap().is_none(), "{ns}");
    }
    // Created later: with consent it gets its copy; without, the rule says NotAccepted.
    h.namespace("app-7", &[], &accept).await;
    eventually("the copy in a namespace created later", || async {
        h.secrets("app-7").get_opt("creds").await.unwrap().map(|_| ())
    })
    .await;
    h.namespace("app-8", &[], &[]).await;
    h.wait_ready("platform", "creds", "False", "NotAccepted").await;
    stays("no copy without consent", Duration::from_secs(2), || async {
        h.secrets("app-8").get_opt("creds").await.unwrap().is_none()
    })
    .await;
}

#[tokio::test]
async fn a_pattern_that_does_not_compile_is_a_clear_condition() {
    let h = Harness::start().await;
    h.namespace("platform", &[], &[]).await;
    h.put_secret("platform", "creds", &[("token", "t")]).await;
    h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                   "metadata": {"name": "creds", "namespace": "platform"},
                   "spec": {"source": {"kind": "Secret", "name": "creds"},
                            "targets": [{"namespacePattern": "("}]}}))
        .await;
    let rule = h
        .wait_ready("platform", "creds", "False", "InvalidNamespacePattern")
        .await;
    let ready = rule
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert!(
        ready.message.contains("invalid namespacePattern \"(\""),
        "{}",
        ready.message
    );
}
