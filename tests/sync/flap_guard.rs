//! The flap guard against a real apiserver: a copy that something else keeps deleting stops
//! being re-created after a few rounds, and the rule says so (`Ready=False`, `Flapping`, an
//! event, a metric); a source rotated every half second never trips it, nor does an order made
//! and cancelled again and again.

use crate::harness;

use harness::{Harness, eventually, secret_value};
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;
use std::time::{Duration, Instant};

fn flaps(h: &Harness) -> u64 {
    h.metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix("mimeo_copy_flaps_total "))
        .map_or(0, |n| n.trim().parse().unwrap())
}

async fn start() -> Harness {
    let h = Harness::start().await;
    h.namespace("platform", &[], &[]).await;
    h.namespace("tenant", &[], &[("mimeo.dev/accept-from", "platform")])
        .await;
    h.put_secret("platform", "creds", &[("password", "p0")]).await;
    h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                   "metadata": {"name": "creds", "namespace": "platform"},
                   "spec": {"source": {"kind": "Secret", "name": "creds"},
                            "targets": [{"namespace": "tenant"}]}}))
        .await;
    h.wait_ready("platform", "creds", "True", "Synced").await;
    h
}

/// Another controller deletes the copy whenever it sees it: mimeo re-creates it a few times,
/// then leaves it alone and says why, instead of fighting forever.
#[tokio::test]
async fn a_copy_something_else_keeps_deleting_trips_the_guard() {
    let h = start().await;
    let copies = h.secrets("tenant");
    let started = Instant::now();
    let (stop_tx, mut stop) = tokio::sync::watch::channel(false);
    let fighter = {
        let copies = copies.clone();
        tokio::spawn(async move {
            let mut deleted = 0u32;
            while !*stop.borrow() {
                if copies.get_opt("creds").await.unwrap().is_some()
                    && copies.delete("creds", &DeleteParams::default()).await.is_ok()
                {
                    deleted += 1;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = stop.changed() => {}
                }
            }
            deleted
        })
    };
    let rule = h.wait_ready("platform", "creds", "False", "Flapping").await;
    let tripped = started.elapsed();
    let status = rule.status.unwrap();
    let message = &status.conditions[0].message;
    assert!(
        message.contains("tenant/creds: Flapping (mimeo stopped touching this copy: it was created"),
        "{message}"
    );
    assert_eq!(flaps(&h), 1);
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(h.client.clone(), "platform");
    eventually("a CopyFlapping warning event", || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("CopyFlapping") && e.type_.as_deref() == Some("Warning"))
    })
    .await;

    // Held: after the fighter stops, the copy is not written again, even when the source changes.
    stop_tx.send_replace(true);
    let deleted = fighter.await.unwrap();
    let writes = h.apiserver_writes(&["secrets"]).await;
    h.put_secret("platform", "creds", &[("password", "p1")]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let copy = copies.get_opt("creds").await.unwrap();
    let written = h.apiserver_writes(&["secrets"]).await - writes;
    println!(
        "the guard tripped {tripped:?} after the fight began, after {deleted} deletes by the other side; \
         then {written} secret writes in 3 s (the source's own: 1), copy there: {}",
        copy.is_some()
    );
    assert_eq!(written, 1, "only the source was written while the copy is held");
    assert!(copy.is_none_or(|c| secret_value(&c, "password").as_deref() != Some("p1")));
}

/// A source rotated every half second, twenty times, never trips the guard: rotations are new
/// content, not churn.
#[tokio::test]
async fn rotations_never_trip_the_guard() {
    let h = start().await;
    for round in 1..=20 {
        let value = format!("p{round}");
        h.put_secret("platform", "creds", &[("password", &value)]).await;
        eventually("the copy rotated", || async {
            let copy = h.secrets("tenant").get_opt("creds").await.unwrap()?;
            (secret_value(&copy, "password").as_deref() == Some(value.as_str())).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    h.wait_ready("platform", "creds", "True", "Synced").await;
    assert_eq!(flaps(&h), 0);
}

/// issue 56: a tenant orders a service and cancels it, twenty times in a row (its namespace
/// labelled and unlabelled; the source never changes). Each copy the rules no longer want is
/// mimeo's own decision, not a fight: both go at once after every cancel (five cycles once
/// tripped the guard and left a cancelled order's credentials for ten minutes), and both come
/// back with every order.
#[tokio::test]
async fn an_order_made_and_cancelled_again_and_again_takes_its_copies_at_once() {
    let h = Harness::start().await;
    h.namespace("platform", &[], &[]).await;
    h.namespace("tenant", &[], &[("mimeo.dev/accept-from", "platform")])
        .await;
    let names = ["pull-secret", "chart-credentials"];
    for name in names {
        h.put_secret("platform", name, &[("password", "p0")]).await;
        h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                       "metadata": {"name": name, "namespace": "platform"},
                       "spec": {"source": {"kind": "Secret", "name": name},
                                "targets": [{"namespaceSelector": {"matchLabels": {"order": "placed"}}}]}}))
            .await;
    }
    let copies = h.secrets("tenant");
    let there = || async {
        let mut n = 0;
        for name in names {
            n += usize::from(copies.get_opt(name).await.unwrap().is_some());
        }
        n
    };
    let mut gone_after = Vec::new();
    for cycle in 1..=20 {
        h.patch_namespace("tenant", json!({"labels": {"order": "placed"}}))
            .await;
        eventually(&format!("order {cycle}: both copies"), || async {
            (there().await == names.len()).then_some(())
        })
        .await;
        h.patch_namespace("tenant", json!({"labels": {"order": null}}))
            .await;
        let cancelled = Instant::now();
        let gone = eventually(&format!("cancel {cycle}: both copies gone"), || async {
            (there().await == 0).then(|| cancelled.elapsed())
        })
        .await;
        gone_after.push(gone);
    }
    let mut sorted = gone_after.clone();
    sorted.sort();
    println!(
        "20 orders and cancels: both copies gone {:?} after the cancel (p50), {:?} at most; each: {gone_after:?}",
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1]
    );
    assert!(
        gone_after.iter().all(|g| *g < Duration::from_secs(1)),
        "a cancelled order's copies stayed a second or more: {gone_after:?}"
    );
    assert_eq!(flaps(&h), 0, "an order made and cancelled is not a fight");
    for name in names {
        h.wait_ready("platform", name, "True", "NothingToCopy").await;
    }
}
