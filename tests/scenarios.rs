//! The sync controller's scenarios, each against a real kube-apiserver with the controller
//! running in-process.

mod harness;

use harness::{Harness, eventually, secret, secret_value, stays};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn sync_rule(ns: &str, name: &str, spec: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule", "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

/// 1. Registry credentials next to a HelmRelease, and a rotation reaching the copy.
#[tokio::test]
async fn registry_credentials_follow_rotation() {
    let h = Harness::start().await;
    h.namespace("platform-helm", &[], &[]).await;
    h.namespace("cluster-a", &[], &[("mimeo.dev/accept-from", "platform-helm")])
        .await;
    let mut creds = secret(
        "platform-helm",
        "registry-creds",
        "kubernetes.io/dockerconfigjson",
        &[(".dockerconfigjson", r#"{"auths":{"r.example":{"auth":"djE="}}}"#)],
    );
    // As `kubectl apply` leaves it: the whole Secret again, which no copy takes along.
    creds.metadata.annotations = Some(
        [(
            "kubectl.kubernetes.io/last-applied-configuration".to_owned(),
            serde_json::to_string(&creds).unwrap(),
        )]
        .into(),
    );
    h.secrets("platform-helm")
        .create(&PostParams::default(), &creds)
        .await
        .unwrap();
    h.apply(sync_rule(
        "platform-helm",
        "chart-registry-creds",
        json!({
            "source": {"kind": "Secret", "name": "registry-creds"},
            "targets": [{"namespace": "cluster-a", "name": "helm-registry"}],
        }),
    ))
    .await;

    let copy = eventually("the copy in cluster-a", || async {
        h.secrets("cluster-a").get_opt("helm-registry").await.unwrap()
    })
    .await;
    assert_eq!(copy.type_.as_deref(), Some("kubernetes.io/dockerconfigjson"));
    assert_eq!(
        secret_value(&copy, ".dockerconfigjson").unwrap(),
        r#"{"auths":{"r.example":{"auth":"djE="}}}"#
    );
    let labels = copy.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("mimeo.dev/managed-by").map(String::as_str),
        Some("mimeo")
    );
    let annotations = copy.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations["mimeo.dev/rule"],
        "SyncRule/platform-helm/chart-registry-creds"
    );
    assert_eq!(
        annotations["mimeo.dev/source"],
        "Secret/platform-helm/registry-creds"
    );
    assert!(
        !annotations.contains_key("kubectl.kubernetes.io/last-applied-configuration"),
        "{annotations:?}"
    );
    let managers: Vec<String> = copy
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(
        managers,
        ["mimeo"],
        "written by server-side apply under one field manager"
    );

    let rule = h
        .wait_ready("platform-helm", "chart-registry-creds", "True", "Synced")
        .await;
    let status = rule.status.unwrap();
    assert_eq!(status.copies.as_deref(), Some("1/1"));
    assert_eq!(status.observed_generation, rule.metadata.generation);
    assert_eq!(status.counts, BTreeMap::from([("Synced".to_owned(), 1)]));
    assert!(status.problems.is_empty() && status.targets.is_empty());

    let rotated = secret(
        "platform-helm",
        "registry-creds",
        "kubernetes.io/dockerconfigjson",
        &[(".dockerconfigjson", r#"{"auths":{"r.example":{"auth":"djI="}}}"#)],
    );
    let started = Instant::now();
    h.secrets("platform-helm")
        .replace("registry-creds", &PostParams::default(), &rotated)
        .await
        .unwrap();
    eventually("the rotated value in the copy", || async {
        let copy = h.secrets("cluster-a").get("helm-registry").await.unwrap();
        secret_value(&copy, ".dockerconfigjson")
            .filter(|v| v.contains("djI="))
            .map(|_| ())
    })
    .await;
    let took = started.elapsed();
    println!("rotation reached the copy in {took:?}");
    assert!(
        took < Duration::from_secs(1),
        "rotation took {took:?}, more than a second"
    );
}

fn config_map(ns: &str, name: &str, data: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}, "data": harness::map(data)}))
        .unwrap()
}

/// 2. Fan-out: a ConfigMap into every namespace labelled team=payments, following the labels.
#[tokio::test]
async fn fan_out_follows_namespace_labels() {
    let h = Harness::start().await;
    let accept = [("mimeo.dev/accept-from", "platform-config")];
    h.namespace("platform-config", &[], &[]).await;
    h.namespace("payments-api", &[("team", "payments")], &accept)
        .await;
    h.namespace("payments-worker", &[("team", "payments")], &accept)
        .await;
    h.namespace("marketing", &[("team", "marketing")], &accept).await;
    h.config_maps("platform-config")
        .create(
            &PostParams::default(),
            &config_map(
                "platform-config",
                "ca-bundle",
                &[("ca.crt", "-----BEGIN CERTIFICATE-----")],
            ),
        )
        .await
        .unwrap();
    h.apply(sync_rule(
        "platform-config",
        "ca-bundle",
        json!({
            "source": {"kind": "ConfigMap", "name": "ca-bundle"},
            "targets": [{"namespaceSelector": {"matchLabels": {"team": "payments"}}}],
        }),
    ))
    .await;

    for ns in ["payments-api", "payments-worker"] {
        eventually(&format!("the copy in {ns}"), || async {
            h.config_maps(ns).get_opt("ca-bundle").await.unwrap()
        })
        .await;
    }
    let rule = h
        .wait_ready("platform-config", "ca-bundle", "True", "Synced")
        .await;
    assert_eq!(rule.status.unwrap().copies.as_deref(), Some("2/2"));
    assert!(
        h.config_maps("marketing")
            .get_opt("ca-bundle")
            .await
            .unwrap()
            .is_none()
    );

    h.namespace("payments-reports", &[("team", "payments")], &accept)
        .await;
    eventually("the copy in a namespace created later", || async {
        h.config_maps("payments-reports")
            .get_opt("ca-bundle")
            .await
            .unwrap()
    })
    .await;

    h.patch_namespace("payments-worker", json!({"labels": {"team": "other"}}))
        .await;
    eventually("the copy gone from a relabelled namespace", || async {
        h.config_maps("payments-worker")
            .get_opt("ca-bundle")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    eventually("the status without the relabelled namespace", || async {
        let status = h.rule("platform-config", "ca-bundle").await?.status?;
        (status.copies.as_deref() == Some("2/2") && status.problems.is_empty()).then_some(())
    })
    .await;
}

/// 3. Drift: an edited copy is restored, a key added to it removed, a deleted copy re-created.
#[tokio::test]
async fn drift_is_repaired() {
    let h = Harness::start().await;
    h.namespace("platform", &[], &[]).await;
    h.namespace("tenant", &[], &[("mimeo.dev/accept-from", "*")])
        .await;
    h.put_secret("platform", "db", &[("password", "s3cret-v1")]).await;
    h.apply(sync_rule(
        "platform",
        "db",
        json!({"source": {"kind": "Secret", "name": "db"}, "targets": [{"namespace": "tenant"}]}),
    ))
    .await;
    let original = eventually("the copy", || async {
        h.secrets("tenant").get_opt("db").await.unwrap()
    })
    .await;

    let edit = json!({"data": {"password": "ZWRpdGVk", "extra": "ZXh0cmE="}});
    h.secrets("tenant")
        .patch("db", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    let restored = eventually("the edited copy restored, the added key gone", || async {
        let copy = h.secrets("tenant").get("db").await.unwrap();
        let keys: Vec<String> = copy.data.clone().unwrap_or_default().into_keys().collect();
        (secret_value(&copy, "password").as_deref() == Some("s3cret-v1") && keys == ["password"])
            .then_some(copy)
    })
    .await;
    assert_eq!(restored.metadata.uid, original.metadata.uid, "restored in place");

    h.secrets("tenant")
        .delete("db", &DeleteParams::default())
        .await
        .unwrap();
    let recreated = eventually("the deleted copy re-created", || async {
        let copy = h.secrets("tenant").get_opt("db").await.unwrap()?;
        (copy.metadata.uid != original.metadata.uid).then_some(copy)
    })
    .await;
    assert_eq!(secret_value(&recreated, "password").as_deref(), Some("s3cret-v1"));
}

/// The SyncRule reconciles so far, by the controller's own counter.
fn reconciles(h: &Harness) -> u64 {
    h.metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("mimeo_reconciles_total{kind=\"SyncRule\"}"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// A rotation is one look at the rule: the watch events of the copies it wrote, and of its own
/// status write, wake nobody. A tenant's edit to a copy right after, and a touch of the rule,
/// still do.
#[tokio::test]
async fn a_rotation_is_one_look() {
    let h = Harness::start().await;
    let accept = [("mimeo.dev/accept-from", "platform")];
    h.namespace("platform", &[], &[]).await;
    let targets = ["o1", "o2", "o3", "o4"];
    for ns in targets {
        h.namespace(ns, &[("once", "yes")], &accept).await;
    }
    h.put_secret("platform", "creds", &[("k", "v0")]).await;
    h.apply(sync_rule(
        "platform",
        "creds",
        json!({"source": {"kind": "Secret", "name": "creds"},
        "targets": [{"namespaceSelector": {"matchLabels": {"once": "yes"}}}]}),
    ))
    .await;
    h.wait_ready("platform", "creds", "True", "Synced").await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let rotations = 6;
    let before = reconciles(&h);
    for r in 1..=rotations {
        let value = format!("v{r}");
        h.put_secret("platform", "creds", &[("k", &value)]).await;
        for ns in targets {
            eventually(&format!("{value} reaching {ns}"), || async {
                let copy = h.secrets(ns).get("creds").await.unwrap();
                (secret_value(&copy, "k") == Some(value.clone())).then_some(())
            })
            .await;
        }
        // Time for the copies' watch events and the status write's to come back.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let looks = reconciles(&h) - before;
    println!("{looks} looks for {rotations} rotations");
    // One each; a copy's watch event may come in before its write's reply, and wake the rule
    // once more. Woken by every echo and by its status, it was three each.
    assert!(looks < 2 * rotations, "{looks} looks for {rotations} rotations");

    // The edit is the tenant's of o1, with only its own Role: it cannot pass for mimeo's echo.
    let tenant = harness::tenant_client(&h, "o1").await;
    let edit = json!({"data": {"k": "ZWRpdGVk"}});
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(tenant, "o1")
        .patch("creds", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    eventually("the copy the tenant edited after a rotation restored", || async {
        let copy = h.secrets("o1").get("creds").await.unwrap();
        (secret_value(&copy, "k").as_deref() == Some("v6")).then_some(())
    })
    .await;

    let before = reconciles(&h);
    let touch = json!({"metadata": {"annotations": {"example.com/poke": "1"}}});
    Api::<mimeo::api::SyncRule>::namespaced(h.client.clone(), "platform")
        .patch("creds", &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .unwrap();
    eventually("a touch of the rule making it look again", || async {
        (reconciles(&h) > before).then_some(())
    })
    .await;
}

/// 4. Conflict: an unmanaged object is left alone under Fail, adopted under Adopt, replaced under
/// Overwrite, skipped under Skip (the rule stays Ready); a SyncRule may take over objects only in
/// its own namespace.
#[tokio::test]
async fn conflicts_follow_the_rule() {
    let h = Harness::start().await;
    h.namespace("team", &[], &[]).await;
    h.namespace("other", &[], &[("mimeo.dev/accept-from", "team")])
        .await;
    h.put_secret("team", "src", &[("token", "from-source")]).await;
    let mut existing = Vec::new();
    for (ns, name) in [("team", "adopt-me"), ("team", "overwrite-me"), ("other", "src")] {
        let mut s = secret(ns, name, "Opaque", &[("token", "hand-made"), ("note", "keep?")]);
        s.metadata.labels = Some(harness::map(&[("owner", "someone")]));
        existing.push(h.secrets(ns).create(&PostParams::default(), &s).await.unwrap());
    }
    let [adopt_me, overwrite_me, elsewhere] = <[_; 3]>::try_from(existing).unwrap();

    let rule = |name: &str, target: serde_json::Value, conflict: &str| {
        sync_rule(
            "team",
            name,
            json!({"source": {"kind": "Secret", "name": "src"}, "targets": [target], "conflict": conflict}),
        )
    };
    h.apply(rule(
        "adopt",
        json!({"namespace": "team", "name": "adopt-me"}),
        "Fail",
    ))
    .await;
    let failed = h.wait_ready("team", "adopt", "False", "Conflict").await;
    let copy_status = &failed.status.unwrap().problems[0];
    assert!(
        copy_status
            .message
            .as_deref()
            .unwrap()
            .contains("not managed by mimeo"),
        "{copy_status:?}"
    );
    stays(
        "the unmanaged Secret untouched under Fail",
        Duration::from_secs(1),
        || async {
            h.secrets("team")
                .get("adopt-me")
                .await
                .unwrap()
                .metadata
                .resource_version
                == adopt_me.metadata.resource_version
        },
    )
    .await;

    h.apply(rule(
        "adopt",
        json!({"namespace": "team", "name": "adopt-me"}),
        "Adopt",
    ))
    .await;
    h.wait_ready("team", "adopt", "True", "Synced").await;
    let adopted = h.secrets("team").get("adopt-me").await.unwrap();
    assert_eq!(adopted.metadata.uid, adopt_me.metadata.uid, "adopted in place");
    assert_eq!(secret_value(&adopted, "token").as_deref(), Some("from-source"));
    assert_eq!(
        secret_value(&adopted, "note"),
        None,
        "content is exactly the source's"
    );
    assert_eq!(
        adopted.metadata.labels.unwrap().get("owner").map(String::as_str),
        Some("someone"),
        "other labels kept"
    );

    h.apply(rule(
        "overwrite",
        json!({"namespace": "team", "name": "overwrite-me"}),
        "Overwrite",
    ))
    .await;
    h.wait_ready("team", "overwrite", "True", "Synced").await;
    let overwritten = h.secrets("team").get("overwrite-me").await.unwrap();
    assert_ne!(
        overwritten.metadata.uid, overwrite_me.metadata.uid,
        "replaced by a new object"
    );
    assert_eq!(
        secret_value(&overwritten, "token").as_deref(),
        Some("from-source")
    );
    assert!(
        !overwritten
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("owner")
    );

    h.apply(rule("reach-out", json!({"namespace": "other"}), "Overwrite"))
        .await;
    let refused = h.wait_ready("team", "reach-out", "False", "Conflict").await;
    assert!(
        refused.status.unwrap().problems[0]
            .message
            .as_deref()
            .unwrap()
            .contains("only in its own namespace")
    );
    let untouched = h.secrets("other").get("src").await.unwrap();
    assert_eq!(
        untouched.metadata.resource_version,
        elsewhere.metadata.resource_version
    );

    // Skip: the object in the way is left alone and the copy is Skipped, which leaves the rule
    // Ready; where nothing is in the way the copy is written; once the object goes, it is too.
    h.delete_rule("team", "reach-out").await;
    h.namespace("another", &[], &[("mimeo.dev/accept-from", "team")])
        .await;
    h.apply(sync_rule(
        "team",
        "skip",
        json!({"source": {"kind": "Secret", "name": "src"}, "conflict": "Skip",
               "targets": [{"namespace": "other"}, {"namespace": "another"}]}),
    ))
    .await;
    let skipping = h.wait_ready("team", "skip", "True", "Synced").await;
    let status = skipping.status.unwrap();
    assert!(
        status.conditions[0]
            .message
            .ends_with("1/2 copies in sync; 1 skipped for an object in the way (conflict: Skip)"),
        "{status:?}"
    );
    let skipped = &status.problems[0];
    assert_eq!(skipped.state, mimeo::api::CopyState::Skipped, "{skipped:?}");
    assert!(
        skipped
            .message
            .as_deref()
            .unwrap()
            .starts_with("skipped (conflict: Skip): an object not managed by mimeo"),
        "{skipped:?}"
    );
    assert!(h.secrets("another").get_opt("src").await.unwrap().is_some());
    stays(
        "the object in the way untouched under Skip",
        Duration::from_secs(1),
        || async {
            h.secrets("other")
                .get("src")
                .await
                .unwrap()
                .metadata
                .resource_version
                == elsewhere.metadata.resource_version
        },
    )
    .await;
    h.secrets("other")
        .delete("src", &Default::default())
        .await
        .unwrap();
    // Only copies are watched, so an object in the way that goes is noticed at the next look
    // (within 10 minutes), or at once when asked for one.
    Api::<mimeo::api::SyncRule>::namespaced(h.client.clone(), "team")
        .patch(
            "skip",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"openmcp.cloud/operation": "reconcile"}}})),
        )
        .await
        .unwrap();
    eventually("the copy once nothing is in the way", || async {
        let copy = h.secrets("other").get_opt("src").await.unwrap()?;
        (secret_value(&copy, "token").as_deref() == Some("from-source")).then_some(())
    })
    .await;
}

/// 5. Consent: nothing is written into a namespace that does not accept the rule's namespace.
#[tokio::test]
async fn consent_is_required() {
    let h = Harness::start().await;
    h.namespace("platform", &[], &[]).await;
    h.namespace("tenant-b", &[], &[]).await;
    h.put_secret("platform", "creds", &[("k", "v")]).await;
    h.apply(sync_rule(
        "platform",
        "creds",
        json!({"source": {"kind": "Secret", "name": "creds"}, "targets": [{"namespace": "tenant-b"}]}),
    ))
    .await;
    let refused = h.wait_ready("platform", "creds", "False", "NotAccepted").await;
    let status = refused.status.unwrap();
    assert!(
        status.conditions[0]
            .message
            .contains("0/1 copies in sync; tenant-b/creds: NotAccepted"),
        "{}",
        status.conditions[0].message
    );
    assert!(
        status.problems[0]
            .message
            .as_deref()
            .unwrap()
            .contains("mimeo.dev/accept-from=platform")
    );
    assert!(h.secrets("tenant-b").get_opt("creds").await.unwrap().is_none());

    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(h.client.clone(), "platform");
    eventually("a NotAccepted warning event", || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("NotAccepted") && e.type_.as_deref() == Some("Warning"))
    })
    .await;

    h.patch_namespace(
        "tenant-b",
        json!({"annotations": {"mimeo.dev/accept-from": "platform"}}),
    )
    .await;
    eventually("the copy after consent", || async {
        h.secrets("tenant-b").get_opt("creds").await.unwrap()
    })
    .await;
    h.wait_ready("platform", "creds", "True", "Synced").await;
}

/// 6. Clean-up: rule deletion (Delete and Orphan, and a copy that asks to be kept), source
/// deletion, target namespace deletion.
#[tokio::test]
async fn clean_up_leaves_cluster_and_inventory_agreeing() {
    let h = Harness::start().await;
    let accept = [("mimeo.dev/accept-from", "platform")];
    h.namespace("platform", &[], &[]).await;
    for ns in ["t1", "t2", "t3"] {
        h.namespace(ns, &[("tier", "x")], &accept).await;
    }
    h.put_secret("platform", "a", &[("k", "a")]).await;
    h.put_secret("platform", "b", &[("k", "b")]).await;
    h.put_secret("platform", "c", &[("k", "c")]).await;
    let fan_out = |name: &str, source: &str, deletion: &str| {
        sync_rule(
            "platform",
            name,
            json!({"source": {"kind": "Secret", "name": source},
            "targets": [{"namespaceSelector": {"matchLabels": {"tier": "x"}}}], "deletion": deletion}),
        )
    };
    h.apply(fan_out("deletes", "a", "Delete")).await;
    h.apply(fan_out("orphans", "b", "Orphan")).await;
    h.apply(fan_out("source-goes", "c", "Delete")).await;
    for rule in ["deletes", "orphans", "source-goes"] {
        let r = h.wait_ready("platform", rule, "True", "Synced").await;
        assert_eq!(r.status.unwrap().copies.as_deref(), Some("3/3"));
    }

    // A target namespace goes: its copy goes with it, and the inventories follow.
    Api::<Namespace>::all(h.client.clone())
        .delete("t3", &DeleteParams::default())
        .await
        .unwrap();
    eventually("inventories without the deleted namespace", || async {
        for rule in ["deletes", "orphans", "source-goes"] {
            let status = h.rule("platform", rule).await?.status?;
            if status.copies.as_deref() != Some("2/2")
                || status
                    .problems
                    .iter()
                    .any(|c| c.namespace.as_deref() == Some("t3"))
            {
                return None;
            }
        }
        Some(())
    })
    .await;

    // Delete policy: the rule's copies go with it, but the one its namespace's owner asked to
    // keep (`kubectl annotate ... mimeo.dev/deletion=Orphan`), which stays, no longer mimeo's.
    harness::kubectl(
        h.plane.kubeconfig_path(),
        &["annotate", "secret", "a", "-n", "t2", "mimeo.dev/deletion=Orphan"],
        b"",
    );
    h.delete_rule("platform", "deletes").await;
    eventually("the rule and its copies gone, the one kept orphaned", || async {
        let gone = h.rule("platform", "deletes").await.is_none()
            && h.secrets("t1").get_opt("a").await.unwrap().is_none();
        let kept = h.secrets("t2").get_opt("a").await.unwrap()?;
        let labels = kept.metadata.labels.clone().unwrap_or_default();
        (gone && !labels.contains_key("mimeo.dev/managed-by")).then_some(())
    })
    .await;
    assert_eq!(
        secret_value(&h.secrets("t2").get("a").await.unwrap(), "k").as_deref(),
        Some("a")
    );

    // Orphan policy: the copies stay, no longer marked as mimeo's.
    h.delete_rule("platform", "orphans").await;
    eventually("the rule gone, its copies orphaned", || async {
        if h.rule("platform", "orphans").await.is_some() {
            return None;
        }
        let copy = h.secrets("t1").get_opt("b").await.unwrap()?;
        let labels = copy.metadata.labels.clone().unwrap_or_default();
        let annotations = copy.metadata.annotations.clone().unwrap_or_default();
        (!labels.contains_key("mimeo.dev/managed-by") && !annotations.contains_key("mimeo.dev/rule"))
            .then_some(())
    })
    .await;
    assert_eq!(
        secret_value(&h.secrets("t2").get("b").await.unwrap(), "k").as_deref(),
        Some("b")
    );

    // The source goes: so do its copies, and the rule says why.
    h.secrets("platform")
        .delete("c", &DeleteParams::default())
        .await
        .unwrap();
    let rule = h
        .wait_ready("platform", "source-goes", "False", "SourceNotFound")
        .await;
    let status = rule.status.unwrap();
    assert!(
        status.counts.is_empty() && status.clusters.is_empty(),
        "no copies counted: {status:?}"
    );
    for ns in ["t1", "t2"] {
        assert!(
            h.secrets(ns).get_opt("c").await.unwrap().is_none(),
            "copy of a deleted source left in {ns}"
        );
    }
}

/// 7. Restart: a controller restarted with nothing changed writes nothing; a change made while
/// it was down is picked up.
#[tokio::test]
async fn restart_writes_nothing_and_catches_up() {
    let mut h = Harness::start().await;
    let accept = [("mimeo.dev/accept-from", "platform")];
    h.namespace("platform", &[], &[]).await;
    for ns in ["r1", "r2", "r3"] {
        h.namespace(ns, &[("restart", "yes")], &accept).await;
    }
    h.put_secret("platform", "creds", &[("k", "v1")]).await;
    h.apply(sync_rule(
        "platform",
        "creds",
        json!({"source": {"kind": "Secret", "name": "creds"},
        "targets": [{"namespaceSelector": {"matchLabels": {"restart": "yes"}}}]}),
    ))
    .await;
    h.wait_ready("platform", "creds", "True", "Synced").await;
    // Let the events of the first writes settle into the caches.
    tokio::time::sleep(Duration::from_secs(1)).await;
    h.stop_controller().await;

    let resources = ["secrets", "configmaps", "syncrules", "clustersyncrules"];
    let writes_before = h.apiserver_writes(&resources).await;
    let versions_before = copy_versions(&h).await;
    let rule_version = h
        .rule("platform", "creds")
        .await
        .unwrap()
        .metadata
        .resource_version;

    h.start_controller().await;
    eventually("the restarted controller reconciling the rule", || async {
        h.metrics
            .encode()
            .contains("mimeo_reconciles_total{kind=\"SyncRule\"}")
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes_after = h.apiserver_writes(&resources).await;
    println!(
        "apiserver writes across the restart: {}",
        writes_after - writes_before
    );
    assert_eq!(
        writes_after, writes_before,
        "a restart with nothing changed must write nothing"
    );
    let versions_after = copy_versions(&h).await;
    assert_eq!(versions_after, versions_before);
    assert_eq!(
        h.rule("platform", "creds")
            .await
            .unwrap()
            .metadata
            .resource_version,
        rule_version
    );

    h.stop_controller().await;
    h.put_secret("platform", "creds", &[("k", "v2")]).await;
    h.start_controller().await;
    for ns in ["r1", "r2", "r3"] {
        eventually(&format!("the change made while down reaching {ns}"), || async {
            let copy = h.secrets(ns).get("creds").await.unwrap();
            (secret_value(&copy, "k").as_deref() == Some("v2")).then_some(())
        })
        .await;
    }
}

async fn copy_versions(h: &Harness) -> Vec<Option<String>> {
    let mut versions = Vec::new();
    for ns in ["r1", "r2", "r3"] {
        versions.push(
            h.secrets(ns)
                .get("creds")
                .await
                .unwrap()
                .metadata
                .resource_version,
        );
    }
    versions
}

/// 8. Bad input: a missing source is reported and synced once it appears; 1 MiB copies intact;
/// no secret value shows up in status or events.
#[tokio::test]
async fn missing_source_then_large_secret() {
    let h = Harness::start().await;
    h.namespace("platform", &[], &[]).await;
    h.namespace("tenant", &[], &[("mimeo.dev/accept-from", "platform")])
        .await;
    h.apply(sync_rule(
        "platform",
        "big",
        json!({"source": {"kind": "Secret", "name": "big"}, "targets": [{"namespace": "tenant"}]}),
    ))
    .await;
    let waiting = h.wait_ready("platform", "big", "False", "SourceNotFound").await;
    assert!(
        waiting.status.unwrap().conditions[0]
            .message
            .contains("Secret platform/big does not exist")
    );

    // Just under the apiserver's 1 MiB limit for a Secret's data, bytes of every value.
    let payload: Vec<u8> = (0..(1024 * 1024 - 64))
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    let mut big = secret("platform", "big", "Opaque", &[]);
    big.data = Some([("blob".to_owned(), k8s_openapi::ByteString(payload.clone()))].into());
    h.secrets("platform")
        .create(&PostParams::default(), &big)
        .await
        .unwrap();
    let copy = eventually("the 1 MiB copy", || async {
        h.secrets("tenant").get_opt("big").await.unwrap()
    })
    .await;
    assert_eq!(
        copy.data.unwrap()["blob"].0,
        payload,
        "the copy is byte for byte the source"
    );
    h.wait_ready("platform", "big", "True", "Synced").await;

    // A distinctive value must never surface in status or events.
    h.put_secret("platform", "leak-check", &[("password", "hunter2-distinctive")])
        .await;
    h.apply(sync_rule(
        "platform",
        "leak-check",
        json!({"source": {"kind": "Secret", "name": "leak-check"}, "targets": [{"namespace": "nowhere"}]}),
    ))
    .await;
    h.wait_ready("platform", "leak-check", "False", "NamespaceMissing")
        .await;
    let rules = serde_json::to_string(&h.rule("platform", "leak-check").await.unwrap()).unwrap();
    let events = serde_json::to_string(
        &Api::<k8s_openapi::api::events::v1::Event>::namespaced(h.client.clone(), "platform")
            .list(&ListParams::default())
            .await
            .unwrap(),
    )
    .unwrap();
    for text in [rules, events] {
        assert!(
            !text.contains("hunter2") && !text.contains("aHVudGVyMi1kaXN0aW5jdGl2ZQ"),
            "a secret value leaked: {text}"
        );
    }
}

/// Immutable copies whose content must change are replaced, not left stale.
#[tokio::test]
async fn immutable_copies_are_replaced() {
    let h = Harness::start().await;
    h.namespace("platform", &[], &[]).await;
    h.namespace("tenant", &[], &[("mimeo.dev/accept-from", "platform")])
        .await;
    for (name, value) in [("release-1", "one"), ("release-2", "two")] {
        let mut s = secret("platform", name, "Opaque", &[("version", value)]);
        s.immutable = Some(true);
        h.secrets("platform")
            .create(&PostParams::default(), &s)
            .await
            .unwrap();
    }
    let pinned = |source: &str| {
        sync_rule(
            "platform",
            "pinned",
            json!({"source": {"kind": "Secret", "name": source},
            "targets": [{"namespace": "tenant", "name": "current-release"}]}),
        )
    };
    h.apply(pinned("release-1")).await;
    let first = eventually("the immutable copy", || async {
        h.secrets("tenant").get_opt("current-release").await.unwrap()
    })
    .await;
    assert_eq!(first.immutable, Some(true));

    h.apply(pinned("release-2")).await;
    let second = eventually("the copy replaced with the new content", || async {
        let copy = h.secrets("tenant").get_opt("current-release").await.unwrap()?;
        (secret_value(&copy, "version").as_deref() == Some("two")).then_some(copy)
    })
    .await;
    assert_ne!(
        second.metadata.uid, first.metadata.uid,
        "an immutable copy is deleted and created anew"
    );
    assert_eq!(second.immutable, Some(true));
    h.wait_ready("platform", "pinned", "True", "Synced").await;
}

/// A ClusterSyncRule: a CA bundle into every namespace, no consent needed, the source's own
/// namespace skipped rather than reported as a conflict.
#[tokio::test]
async fn cluster_rule_copies_everywhere() {
    let h = Harness::start().await;
    h.namespace("platform", &[], &[]).await;
    h.namespace("team-a", &[], &[]).await;
    h.namespace("team-b", &[], &[]).await;
    h.config_maps("platform")
        .create(
            &PostParams::default(),
            &config_map("platform", "ca-bundle", &[("ca.crt", "pem")]),
        )
        .await
        .unwrap();
    h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule", "metadata": {"name": "ca-bundle"},
        "spec": {"source": {"kind": "ConfigMap", "namespace": "platform", "name": "ca-bundle"},
                 "targets": [{"namespaceSelector": {}}]}}))
    .await;
    for ns in ["team-a", "team-b", "default", "kube-system"] {
        eventually(&format!("the CA bundle in {ns}"), || async {
            h.config_maps(ns).get_opt("ca-bundle").await.unwrap()
        })
        .await;
    }
    let rules: Api<mimeo::api::ClusterSyncRule> = Api::all(h.client.clone());
    let rule = eventually("the cluster rule ready", || async {
        let rule = rules.get("ca-bundle").await.unwrap();
        let ready = rule.status.as_ref()?.conditions.first()?.clone();
        (ready.status == "True").then_some(rule)
    })
    .await;
    let status = rule.status.unwrap();
    assert!(
        status
            .problems
            .iter()
            .all(|c| c.namespace.as_deref() != Some("platform")),
        "the source is not its own copy"
    );
    let source = h.config_maps("platform").get("ca-bundle").await.unwrap();
    assert!(
        !source.labels().contains_key("mimeo.dev/managed-by"),
        "the source was written as its own copy"
    );
}

/// A rule of 200 sources (a selector) and every namespace (`namespaceSelector: {}`), none of
/// which accepts copies: about 40,000 `NotAccepted` copies. Listing each would put some 6 MB in
/// the status, past what the apiserver takes in one request. The status counts them by state
/// and by cluster and names the first few; the Ready message counts them all.
#[tokio::test]
async fn a_rule_of_many_sources_and_namespaces_keeps_a_status_that_fits() {
    let h = Harness::start().await;
    h.namespace("platform", &[], &[]).await;
    let names: Vec<String> = (0..200).map(|i| format!("tenant-{i:03}")).collect();
    futures::future::join_all(names.iter().map(|ns| h.namespace(ns, &[], &[]))).await;
    futures::future::join_all((0..200).map(|i| {
        let mut s = secret("platform", &format!("s{i:03}"), "Opaque", &[("k", "v")]);
        s.metadata.labels = Some([("fan".to_owned(), "out".to_owned())].into());
        let api = h.secrets("platform");
        async move { api.create(&PostParams::default(), &s).await.unwrap() }
    }))
    .await;
    let started = Instant::now();
    h.apply(sync_rule(
        "platform",
        "everywhere",
        json!({"source": {"kind": "Secret", "selector": {"matchLabels": {"fan": "out"}}},
               "targets": [{"namespaceSelector": {}}]}),
    ))
    .await;
    let rule = h
        .wait_ready("platform", "everywhere", "False", "NotAccepted")
        .await;
    let status = rule.status.unwrap();
    let total: i64 = status.counts.values().sum();
    let size = serde_json::to_vec(&status).unwrap().len();
    println!(
        "{total} copies: {} named, {:?} counted; status {size} bytes, written {:?} after the rule",
        status.problems.len(),
        status.counts,
        started.elapsed()
    );
    assert!(total >= 200 * 200, "{total}");
    assert_eq!(status.counts.get("NotAccepted"), Some(&total));
    assert_eq!(
        status.problems.len() as i64 + status.more_problems.unwrap_or(0),
        total
    );
    assert_eq!(status.clusters.len(), 1);
    assert_eq!(status.clusters[0].copies, total);
    assert!(size < 64 * 1024, "a status of {size} bytes");
    assert_eq!(status.copies.as_deref(), Some(format!("0/{total}").as_str()));
    assert!(
        status.conditions[0]
            .message
            .starts_with(&format!("0/{total} copies in sync")),
        "{}",
        status.conditions[0].message
    );
}
