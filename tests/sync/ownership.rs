//! What a rule owns is found from its copies, not from its status: a rule of 50,000 copies keeps
//! a small status, restarts without a write and cleans every copy when deleted; clean-up stays
//! right across a controller that was down while the world changed. Against a real apiserver.

use crate::harness;

use harness::{Harness, eventually, eventually_within, secret};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::time::{Duration, Instant};

const MANAGED: &str = "mimeo.dev/managed-by=mimeo";

fn sync_rule(ns: &str, name: &str, spec: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

/// How many copies mimeo's label marks in the whole cluster.
async fn copies(h: &Harness) -> usize {
    let api: Api<Secret> = Api::all(h.client.clone());
    let mut total = 0;
    let mut params = ListParams::default().labels(MANAGED).limit(5000);
    loop {
        let page = api.list_metadata(&params).await.unwrap();
        total += page.items.len();
        match page.metadata.continue_ {
            Some(next) if !next.is_empty() => params = params.continue_token(&next),
            _ => return total,
        }
    }
}

/// 500 sources into 100 namespaces: 50,000 copies of one rule. The status stays under 64 KiB
/// (the old inventory could not be written past about 9,500), a restart writes nothing, and
/// deleting the rule removes every copy before its finalizer lets it go.
#[tokio::test]
async fn a_rule_of_fifty_thousand_copies() {
    const SOURCES: usize = 500;
    const NAMESPACES: usize = 100;
    let mut h = Harness::start().await;
    h.namespace("platform", &[], &[]).await;
    let accept = [("mimeo.dev/accept-from", "platform")];
    let names: Vec<String> = (0..NAMESPACES).map(|i| format!("t{i:03}")).collect();
    futures::future::join_all(names.iter().map(|ns| h.namespace(ns, &[("fan", "in")], &accept))).await;
    let api = h.secrets("platform");
    for chunk in (0..SOURCES).collect::<Vec<_>>().chunks(50) {
        futures::future::join_all(chunk.iter().map(|i| {
            let mut s = secret("platform", &format!("s{i:03}"), "Opaque", &[("k", "v1")]);
            s.metadata.labels = Some([("fan".to_owned(), "out".to_owned())].into());
            let api = api.clone();
            async move { api.create(&PostParams::default(), &s).await.unwrap() }
        }))
        .await;
    }
    let started = Instant::now();
    h.apply(sync_rule(
        "platform",
        "big",
        json!({"source": {"kind": "Secret", "selector": {"matchLabels": {"fan": "out"}}},
               "targets": [{"namespaceSelector": {"matchLabels": {"fan": "in"}}}]}),
    ))
    .await;
    let want = format!("{0}/{0}", SOURCES * NAMESPACES);
    let rule = eventually_within("50,000 copies in sync", Duration::from_secs(900), || async {
        let rule = h.rule("platform", "big").await?;
        (rule.status.as_ref()?.copies.as_deref() == Some(want.as_str())).then_some(rule)
    })
    .await;
    let status = rule.status.unwrap();
    let size = serde_json::to_vec(&status).unwrap().len();
    println!(
        "50,000 copies in sync {:?} after the rule; status {size} bytes: {:?}",
        started.elapsed(),
        status.counts
    );
    assert!(size < 64 * 1024, "a status of {size} bytes");
    assert!(status.problems.is_empty() && status.targets.is_empty());
    assert_eq!(status.clusters.len(), 1);
    assert_eq!(status.clusters[0].synced, (SOURCES * NAMESPACES) as i64);
    assert_eq!(copies(&h).await, SOURCES * NAMESPACES);

    // A restart with nothing changed writes nothing: not a copy, not the status.
    tokio::time::sleep(Duration::from_secs(2)).await;
    h.stop_controller().await;
    let resources = ["secrets", "syncrules"];
    let before = h.apiserver_writes(&resources).await;
    h.start_controller().await;
    eventually_within(
        "the restarted controller reconciling the rule",
        Duration::from_secs(300),
        || async {
            h.metrics
                .encode()
                .contains("mimeo_reconciles_total{kind=\"SyncRule\"}")
                .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = h.apiserver_writes(&resources).await;
    println!("apiserver writes across the restart: {}", after - before);
    assert_eq!(after, before, "a restart with nothing changed must write nothing");

    // Deleted: every copy goes, then the rule.
    let deleting = Instant::now();
    h.delete_rule("platform", "big").await;
    eventually_within(
        "the rule and its copies gone",
        Duration::from_secs(900),
        || async { h.rule("platform", "big").await.is_none().then_some(()) },
    )
    .await;
    println!("50,000 copies deleted in {:?}", deleting.elapsed());
    assert_eq!(copies(&h).await, 0, "copies left behind by a deleted rule");
}

/// Deleted while mimeo was down: its copies go once mimeo is back, found in the copies cache
/// (nothing in the status names them).
#[tokio::test]
async fn a_rule_deleted_while_mimeo_was_down_is_cleaned_up() {
    let mut h = Harness::start().await;
    h.namespace("platform", &[], &[]).await;
    let accept = [("mimeo.dev/accept-from", "platform")];
    for ns in ["d1", "d2", "d3"] {
        h.namespace(ns, &[("down", "yes")], &accept).await;
    }
    h.put_secret("platform", "creds", &[("k", "v1")]).await;
    h.apply(sync_rule(
        "platform",
        "creds",
        json!({"source": {"kind": "Secret", "name": "creds"},
               "targets": [{"namespaceSelector": {"matchLabels": {"down": "yes"}}}]}),
    ))
    .await;
    let rule = h.wait_ready("platform", "creds", "True", "Synced").await;
    assert_eq!(rule.status.unwrap().copies.as_deref(), Some("3/3"));
    h.stop_controller().await;

    // Deleted while down: the finalizer holds it.
    h.delete_rule("platform", "creds").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        h.rule("platform", "creds").await.is_some(),
        "the finalizer holds the rule"
    );
    h.start_controller().await;
    eventually("the deleted rule's copies gone", || async {
        for ns in ["d1", "d2", "d3"] {
            if h.secrets(ns).get_opt("creds").await.unwrap().is_some() {
                return None;
            }
        }
        h.rule("platform", "creds").await.is_none().then_some(())
    })
    .await;
    assert_eq!(copies(&h).await, 0);
}

/// A namespace that left the rule's selector while mimeo was down loses its copy once mimeo is
/// back; the copies still wanted are not written again.
#[tokio::test]
async fn a_namespace_that_left_while_mimeo_was_down_loses_its_copy() {
    let mut h = Harness::start().await;
    h.namespace("platform", &[], &[]).await;
    let accept = [("mimeo.dev/accept-from", "platform")];
    for ns in ["l1", "l2"] {
        h.namespace(ns, &[("team", "a")], &accept).await;
    }
    h.put_secret("platform", "creds", &[("k", "v1")]).await;
    h.apply(sync_rule(
        "platform",
        "creds",
        json!({"source": {"kind": "Secret", "name": "creds"},
               "targets": [{"namespaceSelector": {"matchLabels": {"team": "a"}}}]}),
    ))
    .await;
    h.wait_ready("platform", "creds", "True", "Synced").await;
    let kept = h.secrets("l1").get("creds").await.unwrap();
    h.stop_controller().await;
    h.patch_namespace("l2", json!({"labels": {"team": "b"}})).await;
    h.start_controller().await;
    eventually("the copy gone from the namespace that left", || async {
        h.secrets("l2")
            .get_opt("creds")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    // The status from before the stop says Synced too: wait for the one written after the copy
    // was removed (the removal is seen before the status that counts it is written).
    eventually("the status counting the one copy left", || async {
        let status = h.rule("platform", "creds").await?.status?;
        (status.copies.as_deref() == Some("1/1")).then_some(())
    })
    .await;
    h.wait_ready("platform", "creds", "True", "Synced").await;
    let still = h.secrets("l1").get("creds").await.unwrap();
    assert_eq!(
        still.metadata.resource_version, kept.metadata.resource_version,
        "the copy still wanted was written again"
    );
    // Nothing of the rule's stays behind once it goes.
    h.delete_rule("platform", "creds").await;
    eventually("the rule gone", || async {
        h.rule("platform", "creds").await.is_none().then_some(())
    })
    .await;
    assert_eq!(copies(&h).await, 0);
}

/// Never let go on a partial view: a rule deleted while mimeo cannot list the kind's copies (its
/// RBAC lost `list` on ConfigMaps) keeps its finalizer and its copies, and is cleaned up once the
/// copies can be listed again. Run with the chart's RBAC, edited as an admin would.
#[tokio::test]
async fn a_rule_is_let_go_only_once_its_copies_can_be_listed() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let mut h = Harness::start_with_chart_rbac(mimeo::controller::ControllerConfig::default()).await;
    h.namespace("platform", &[], &[]).await;
    let accept = [("mimeo.dev/accept-from", "platform")];
    for ns in ["v1", "v2"] {
        h.namespace(ns, &[("view", "yes")], &accept).await;
    }
    let settings: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "settings", "namespace": "platform"}, "data": {"k": "v"}}))
    .unwrap();
    h.config_maps("platform")
        .create(&PostParams::default(), &settings)
        .await
        .unwrap();
    h.apply(sync_rule(
        "platform",
        "settings",
        json!({"source": {"kind": "ConfigMap", "name": "settings"},
               "targets": [{"namespaceSelector": {"matchLabels": {"view": "yes"}}}]}),
    ))
    .await;
    h.wait_ready("platform", "settings", "True", "Synced").await;
    h.stop_controller().await;
    h.delete_rule("platform", "settings").await;

    let roles: Api<ClusterRole> = Api::all(h.client.clone());
    let granted = roles.get("mimeo").await.unwrap();
    let mut narrowed = granted.clone();
    for rule in narrowed.rules.iter_mut().flatten() {
        if rule.resources.iter().flatten().any(|r| r == "configmaps") {
            rule.verbs.retain(|v| v != "list" && v != "watch");
        }
    }
    roles
        .replace("mimeo", &PostParams::default(), &narrowed)
        .await
        .unwrap();
    h.start_controller().await;
    let copies_there = || async {
        let mut there = 0;
        for ns in ["v1", "v2"] {
            there += usize::from(h.config_maps(ns).get_opt("settings").await.unwrap().is_some());
        }
        there
    };
    harness::stays(
        "the rule and its copies kept while its copies cannot be listed",
        Duration::from_secs(40),
        || async { h.rule("platform", "settings").await.is_some() && copies_there().await == 2 },
    )
    .await;

    let mut restored = granted;
    restored.metadata.resource_version = roles.get("mimeo").await.unwrap().metadata.resource_version;
    roles
        .replace("mimeo", &PostParams::default(), &restored)
        .await
        .unwrap();
    eventually_within(
        "the rule and its copies gone once they can be listed",
        Duration::from_secs(180),
        || async {
            (h.rule("platform", "settings").await.is_none() && copies_there().await == 0).then_some(())
        },
    )
    .await;
}

/// The seal each copy of `platform/creds` carries, and the value it holds, by namespace.
async fn seals_and_values(h: &Harness, namespaces: &[&str]) -> Vec<(Option<String>, Option<String>)> {
    let mut found = Vec::new();
    for ns in namespaces {
        let copy = h.secrets(ns).get_opt("creds").await.unwrap();
        found.push((
            copy.as_ref()
                .and_then(|c| c.metadata.annotations.as_ref()?.get("mimeo.dev/seal").cloned()),
            copy.as_ref().and_then(|c| harness::secret_value(c, "k")),
        ));
    }
    found
}

/// The seal `key` gives `SyncRule/platform/creds`'s copy `creds` in `namespace`.
fn creds_seal(key: &mimeo::sync::seal::SealKey, namespace: &str) -> String {
    let place = mimeo::sync::seal::Place {
        group: "",
        kind: "Secret",
        namespace: Some(namespace),
        name: "creds",
    };
    key.seal(
        &mimeo::sync::ownership::RuleKey::sync_rule("platform", "creds"),
        &place,
    )
}

/// Every copy in `namespaces` sealed under `key` and holding `value`, as [`seals_and_values`]
/// reads them.
fn sealed_by(
    key: &mimeo::sync::seal::SealKey,
    namespaces: &[&str],
    value: &str,
) -> Vec<(Option<String>, Option<String>)> {
    namespaces
        .iter()
        .map(|ns| (Some(creds_seal(key, ns)), Some(value.to_owned())))
        .collect()
}

/// `platform`, and three namespaces plus `also` labelled `keys=yes` that accept its copies; the
/// three, whose copies the seal-key tests follow.
async fn creds_namespaces(h: &Harness, also: &str) -> [&'static str; 3] {
    h.namespace("platform", &[], &[]).await;
    let targets = ["k1", "k2", "k3"];
    for ns in targets.iter().chain(&[also]) {
        h.namespace(ns, &[("keys", "yes")], &[("mimeo.dev/accept-from", "platform")])
            .await;
    }
    targets
}

/// `platform/creds` at v1, a rule copying it into every namespace labelled `keys=yes`, and every
/// copy in `targets` at v1 under the harness's key.
async fn creds_copied(h: &Harness, targets: &[&str]) {
    h.put_secret("platform", "creds", &[("k", "v1")]).await;
    h.apply(sync_rule(
        "platform",
        "creds",
        json!({"source": {"kind": "Secret", "name": "creds"},
               "targets": [{"namespaceSelector": {"matchLabels": {"keys": "yes"}}}]}),
    ))
    .await;
    eventually("every copy at v1 under the first key", || async {
        (seals_and_values(h, targets).await == sealed_by(&h.seal_key, targets, "v1")).then_some(())
    })
    .await;
}

/// The seal key rotated (issue 43): restarted with a new key and the old one retired beside it,
/// while the source rotates, every copy is still the rule's, current, and sealed anew under the
/// new key; restarted with the old key dropped, every copy still rotates. An object carrying the
/// rule's marks and a seal under a key never given is left alone throughout.
#[tokio::test]
async fn a_rotated_seal_key_keeps_every_copy() {
    use mimeo::sync::seal::SealKey;
    let mut h = Harness::start().await;
    let targets = creds_namespaces(&h, "forged").await;
    // Marks of the rule's copy and a seal no key of this installation gave.
    let stranger = SealKey::generate().unwrap();
    h.apply(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "forged",
                     "labels": {"mimeo.dev/managed-by": "mimeo"},
                     "annotations": {"mimeo.dev/rule": "SyncRule/platform/creds",
                                     "mimeo.dev/seal": creds_seal(&stranger, "forged")}},
        "data": {"k": "bWluZQ=="}}))
        .await;
    let old = h.seal_key.clone();
    creds_copied(&h, &targets).await;

    // Rotated: the new key seals, the old one is retired beside it; the source changes meanwhile.
    h.stop_controller().await;
    let new = SealKey::generate().unwrap();
    h.seal_key = new.clone().with_retired(vec![old.bytes().to_vec()]).unwrap();
    h.put_secret("platform", "creds", &[("k", "v2")]).await;
    h.start_controller().await;
    eventually("every copy at v2, sealed anew under the new key", || async {
        (seals_and_values(&h, &targets).await == sealed_by(&new, &targets, "v2")).then_some(())
    })
    .await;
    h.put_secret("platform", "creds", &[("k", "v3")]).await;
    eventually("every copy at v3", || async {
        (seals_and_values(&h, &targets).await == sealed_by(&new, &targets, "v3")).then_some(())
    })
    .await;

    // The old key dropped: the copies carry the new seal, and still rotate.
    h.stop_controller().await;
    h.seal_key = new.clone();
    h.start_controller().await;
    h.put_secret("platform", "creds", &[("k", "v4")]).await;
    eventually("every copy at v4 with the old key dropped", || async {
        (seals_and_values(&h, &targets).await == sealed_by(&new, &targets, "v4")).then_some(())
    })
    .await;
    let forged = h.secrets("forged").get("creds").await.unwrap();
    assert_eq!(harness::secret_value(&forged, "k").as_deref(), Some("mine"));
    let status = h.rule("platform", "creds").await.unwrap().status.unwrap();
    assert_eq!(status.copies.as_deref(), Some("3/4"), "{status:?}");
    assert!(
        status
            .problems
            .iter()
            .any(|p| p.namespace.as_deref() == Some("forged")),
        "{status:?}"
    );
}

/// `mimeo reseal` as an administrator runs it: with `KUBECONFIG` and the key's Secret named.
fn mimeo_reseal(h: &Harness, args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mimeo"))
        .arg("reseal")
        .args(args)
        .args(["--seal-key-secret", "mimeo-admin/mimeo-seal-key"])
        .env("KUBECONFIG", h.plane.kubeconfig_path())
        .env_remove("MIMEO_SEAL_KEY_SECRET")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// The seal key lost (issue 43): mimeo restarted with a new key leaves every copy alone as a
/// conflict while the source rotates. `mimeo reseal` lists the rule's copies and refuses two
/// tenants' forgeries (one made with `kubectl apply` in a place the rule copies to, one made
/// under mimeo's own field manager name in a place it does not); with `--apply` it seals the
/// copies anew, every copy is current again, and neither forgery is adopted.
#[tokio::test]
async fn a_lost_seal_key_is_recovered_by_resealing_the_rules_copies() {
    use mimeo::sync::seal::SealKey;
    let mut h = Harness::start().await;
    let targets = creds_namespaces(&h, "tenant").await;
    h.namespace("elsewhere", &[], &[("mimeo.dev/accept-from", "platform")])
        .await;
    h.namespace("mimeo-admin", &[], &[]).await;
    let forgery = |ns: &str| {
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "creds", "namespace": ns,
                         "labels": {"mimeo.dev/managed-by": "mimeo"},
                         "annotations": {"mimeo.dev/rule": "SyncRule/platform/creds",
                                         "mimeo.dev/source": "Secret/platform/creds",
                                         "mimeo.dev/seal": creds_seal(&SealKey::generate().unwrap(), ns)}},
            "data": {"k": "bWluZQ=="}})
    };
    // A tenant of `tenant` forges a copy with kubectl, as people write objects.
    harness::tenant_client(&h, "tenant").await;
    let tenant = harness::service_account_kubeconfig(&h.plane, &h.client, "tenant", "tenant").await;
    let dir = tempfile::tempdir().unwrap();
    let tenant_config = dir.path().join("tenant");
    std::fs::write(&tenant_config, tenant).unwrap();
    harness::kubectl(
        &tenant_config,
        &["apply", "-f", "-"],
        forgery("tenant").to_string().as_bytes(),
    );
    // One of `elsewhere`, where the rule copies nothing, forges it under mimeo's manager name.
    let elsewhere = harness::tenant_client(&h, "elsewhere").await;
    let api: Api<Secret> = Api::namespaced(elsewhere, "elsewhere");
    api.patch(
        "creds",
        &kube::api::PatchParams::apply("mimeo").force(),
        &kube::api::Patch::Apply(forgery("elsewhere")),
    )
    .await
    .unwrap();

    let old = h.seal_key.clone();
    creds_copied(&h, &targets).await;

    // The key lost: mimeo starts with a new one, which an administrator can read.
    h.stop_controller().await;
    let new = SealKey::generate().unwrap();
    h.seal_key = new.clone();
    h.apply(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "mimeo-seal-key", "namespace": "mimeo-admin"},
        "data": {"key": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, new.bytes())}}))
        .await;
    h.start_controller().await;
    h.put_secret("platform", "creds", &[("k", "v2")]).await;
    eventually("every copy a conflict, left at v1", || async {
        let status = h.rule("platform", "creds").await?.status?;
        let conflicts = targets
            .iter()
            .filter(|ns| {
                harness::copy_state_in(&status, None, Some(ns), "creds")
                    == Some(mimeo::api::CopyState::Conflict)
            })
            .count();
        (conflicts == 3).then_some(())
    })
    .await;
    assert_eq!(
        seals_and_values(&h, &targets).await,
        sealed_by(&old, &targets, "v1")
    );

    // Looked at first: the list, and nothing written.
    let (code, text) = mimeo_reseal(&h, &["SyncRule/platform/creds"]);
    assert_eq!(code, 0, "{text}");
    for ns in targets {
        assert!(text.contains(&format!("  reseal   {ns}/creds\n")), "{text}");
    }
    assert!(
        text.contains("  refused  elsewhere/creds: the rule places no copy here"),
        "{text}"
    );
    assert!(
        text.contains("  refused  tenant/creds: its seal was not written by mimeo"),
        "{text}"
    );
    assert!(
        text.contains("3 to reseal, 2 refused, 0 sealed already, 0 failed"),
        "{text}"
    );
    assert_eq!(
        seals_and_values(&h, &targets).await,
        sealed_by(&old, &targets, "v1")
    );

    // Then applied: the copies are the rule's again and follow the source.
    let (code, text) = mimeo_reseal(&h, &["SyncRule/platform/creds", "--apply"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("3 resealed, 2 refused"), "{text}");
    eventually("every copy at v2 under the new key", || async {
        (seals_and_values(&h, &targets).await == sealed_by(&new, &targets, "v2")).then_some(())
    })
    .await;
    h.put_secret("platform", "creds", &[("k", "v3")]).await;
    eventually("every copy at v3", || async {
        (seals_and_values(&h, &targets).await == sealed_by(&new, &targets, "v3")).then_some(())
    })
    .await;
    for ns in ["tenant", "elsewhere"] {
        let forged = h.secrets(ns).get("creds").await.unwrap();
        assert_eq!(
            harness::secret_value(&forged, "k").as_deref(),
            Some("mine"),
            "{ns}"
        );
    }
    let status = h.rule("platform", "creds").await.unwrap().status.unwrap();
    assert_eq!(status.copies.as_deref(), Some("3/4"), "{status:?}");

    // Run again: nothing left to reseal, an unknown rule is an error.
    let (code, text) = mimeo_reseal(&h, &["SyncRule/platform/creds", "SyncRule/platform/none"]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("0 to reseal, 2 refused, 3 sealed already, 1 failed"),
        "{text}"
    );
    assert!(
        text.contains("! SyncRule/platform/none: there is no SyncRule/platform/none"),
        "{text}"
    );
}
