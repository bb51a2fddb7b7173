//! Every write mimeo makes to a copy that is there is conditional on the version it was decided
//! from, and the apiserver is the fence: a write decided from a version someone else has since
//! replaced is refused whenever it arrives (held by a partition, sent by a replica frozen past its
//! Lease), and the newer copy stays. Each way of writing (server-side apply, replace, delete and
//! create again, delete, orphan) is played as two replicas would: the old holder's write decided
//! before the new holder's, arriving after it. Against a real apiserver.

use crate::harness;

use harness::{Harness, secret_value};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use mimeo::api::{DeletionPolicy, MetadataPolicy, SourceRef};
use mimeo::controller::write::{self, Removed, Written};
use mimeo::sync::decide::Write;
use mimeo::sync::desired::{CopyTarget, DesiredCopy, desired_copy};
use mimeo::sync::live::LiveCopy;
use mimeo::sync::ownership::RuleKey;
use serde_json::json;

const NS: &str = "tenant";

fn secrets() -> ApiResource {
    ApiResource::erase::<Secret>(&())
}

/// The copy of version `value` of the source, as a rule would want it; `type` as given (a change
/// of a Secret's type makes mimeo delete and create the copy again).
fn copy_of(value: &str, type_: &str) -> DesiredCopy {
    let source = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "platform", "resourceVersion": "1"},
        "type": type_, "data": {"v": base64(value)}});
    desired_copy(
        &RuleKey::sync_rule("platform", "creds"),
        &MetadataPolicy::default(),
        &source,
        &SourceRef {
            namespace: Some("platform".into()),
            name: "creds".into(),
        },
        CopyTarget {
            cluster: None,
            namespace: Some(NS.into()),
            name: "creds".into(),
        },
    )
}

fn base64(value: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(value)
}

fn stored(written: Written) -> LiveCopy {
    match written {
        Written::Stored(object) => LiveCopy::summed_up(object),
        other => panic!("expected the write to be stored, got {other:?}"),
    }
}

async fn value_now(h: &Harness) -> Option<String> {
    let copy = h.secrets(NS).get_opt("creds").await.unwrap()?;
    secret_value(&copy, "v")
}

/// The copy as the old holder read it (`v1`), and the newer `v3` the new holder wrote over it
/// since; returns the old holder's view.
async fn overtaken(h: &Harness) -> LiveCopy {
    let _ = h.secrets(NS).delete("creds", &Default::default()).await;
    let resource = secrets();
    let client = &h.client;
    let v1 = stored(
        write::write(client, &resource, &copy_of("v1", "Opaque"), None, Write::Create)
            .await
            .unwrap(),
    );
    let v3 = copy_of("v3", "Opaque");
    stored(
        write::write(client, &resource, &v3, Some(&v1), Write::Apply)
            .await
            .unwrap(),
    );
    assert_eq!(value_now(h).await.as_deref(), Some("v3"));
    v1
}

#[tokio::test]
async fn a_write_decided_from_a_replaced_version_is_refused_by_the_apiserver_and_the_newer_copy_stays() {
    let h = Harness::without_controller().await;
    h.namespace(NS, &[], &[]).await;
    let (client, resource) = (&h.client, secrets());

    // Each way the old holder could write its `v2` over the `v1` it read.
    for (how, type_) in [
        (Write::Apply, "Opaque"),
        (Write::Replace, "Opaque"),
        (Write::Recreate, "example.com/other"),
    ] {
        let read = overtaken(&h).await;
        let late = write::write(client, &resource, &copy_of("v2", type_), Some(&read), how)
            .await
            .unwrap();
        assert!(
            matches!(late, Written::Refused),
            "{how:?} over a replaced version: {late:?}"
        );
        assert_eq!(value_now(&h).await.as_deref(), Some("v3"), "after a late {how:?}");
    }

    // Removals decided from the old version leave the newer copy, and its marks, as they are.
    for policy in [DeletionPolicy::Delete, DeletionPolicy::Orphan] {
        let read = overtaken(&h).await;
        let late = write::remove(client, &resource, &read, policy).await.unwrap();
        assert_eq!(late, Removed::Refused, "{policy:?} of a replaced version");
        let there = h.secrets(NS).get("creds").await.unwrap();
        assert_eq!(secret_value(&there, "v").as_deref(), Some("v3"));
        assert!(
            there
                .metadata
                .labels
                .unwrap_or_default()
                .contains_key("mimeo.dev/managed-by")
        );
    }

    // A write over a copy deleted since it was read does not bring it back.
    let read = overtaken(&h).await;
    h.secrets(NS).delete("creds", &Default::default()).await.unwrap();
    let late = write::write(
        client,
        &resource,
        &copy_of("v2", "Opaque"),
        Some(&read),
        Write::Apply,
    )
    .await
    .unwrap();
    assert!(
        matches!(late, Written::Refused),
        "an apply over a deleted copy: {late:?}"
    );
    assert_eq!(value_now(&h).await, None);

    // Decided from the version that is there, each goes through: the fence costs no request.
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &resource);
    let mut current = stored(
        write::write(client, &resource, &copy_of("v1", "Opaque"), None, Write::Create)
            .await
            .unwrap(),
    );
    for (value, how) in [("v2", Write::Apply), ("v3", Write::Replace), ("v4", Write::Apply)] {
        current = stored(
            write::write(client, &resource, &copy_of(value, "Opaque"), Some(&current), how)
                .await
                .unwrap(),
        );
        assert_eq!(value_now(&h).await.as_deref(), Some(value));
    }
    let there = LiveCopy::summed_up(api.get("creds").await.unwrap());
    assert_eq!(
        write::remove(client, &resource, &there, DeletionPolicy::Delete)
            .await
            .unwrap(),
        Removed::Done(DeletionPolicy::Delete)
    );
    assert_eq!(value_now(&h).await, None);
}
