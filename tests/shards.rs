//! Several active replicas, as separate `mimeo run` processes against one real apiserver: the
//! rules split into three shards, every copy written once per change whichever replica holds
//! its rule, a killed replica's share taken over, a frozen one (SIGSTOP past its Lease, then
//! SIGCONT) writing nothing it no longer holds, and a replica joining and leaving while sources
//! rotate.

#[path = "../benches/support/processes.rs"]
mod processes;

mod common;

use common::{apiserver_writes, eventually_within};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use mimeo_envtest::ControlPlane;
use processes::Mimeo;
use serde_json::json;
use std::time::{Duration, Instant};

const SHARDS: u32 = 3;
const RULES: usize = 24;
const TARGETS: [&str; 2] = ["t1", "t2"];
/// The Lease duration the replicas run with: short, so that a takeover fits in a test.
const LEASE_SECONDS: u64 = 6;

async fn apply(client: &Client, object: serde_json::Value) {
    let gvk = kube::core::GroupVersionKind::try_from(&kube::core::TypeMeta {
        api_version: object["apiVersion"].as_str().unwrap().into(),
        kind: object["kind"].as_str().unwrap().into(),
    })
    .unwrap();
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let name = object["metadata"]["name"].as_str().unwrap();
    let api: Api<kube::api::DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&object))
        .await
        .unwrap();
}

async fn put_source(client: &Client, r: usize, value: &str) {
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": format!("s{r:02}"), "namespace": "platform"},
               "stringData": {"v": value}}),
    )
    .await;
}

/// How many copies hold `value`.
async fn copies_with(client: &Client, value: &str) -> usize {
    let mut n = 0;
    for ns in TARGETS {
        let list = Api::<Secret>::namespaced(client.clone(), ns)
            .list(&Default::default())
            .await
            .unwrap();
        n += list
            .items
            .iter()
            .filter(|s| {
                s.data
                    .as_ref()
                    .and_then(|d| d.get("v"))
                    .is_some_and(|v| v.0 == value.as_bytes())
            })
            .count();
    }
    n
}

struct Replicas {
    kubeconfig: std::path::PathBuf,
    root: tempfile::TempDir,
}

impl Replicas {
    fn start(&self, name: &str) -> Mimeo {
        let dir = self.root.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        Mimeo::start_with(
            std::path::Path::new(env!("CARGO_BIN_EXE_mimeo")),
            &self.kubeconfig,
            &dir,
            &[
                format!("--shards={SHARDS}"),
                "--leader-elect-namespace=default".into(),
                format!("--leader-elect-lease-seconds={LEASE_SECONDS}"),
            ],
            &[("POD_NAME", name)],
        )
    }
}

/// The shards a replica's `/readyz` names.
async fn shards_of(replica: &Mimeo) -> Option<String> {
    let (code, text) = replica.get("/readyz").await?;
    (code == 200).then(|| {
        text.rsplit_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default()
    })
}

/// Rotates every source to `value`; waits until every copy holds it; returns the copy writes the
/// rotation cost (the apiserver's count of Secret writes, less the sources' own) and how long.
async fn rotate(client: &Client, value: &str) -> (u64, Duration) {
    let before = apiserver_writes(client, &["secrets"]).await;
    let started = Instant::now();
    for r in 0..RULES {
        put_source(client, r, value).await;
    }
    eventually_within(
        &format!("every copy at {value}"),
        Duration::from_secs(90),
        || async { (copies_with(client, value).await == RULES * TARGETS.len()).then_some(()) },
    )
    .await;
    let took = started.elapsed();
    // Late or doubled writes would land in this time.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes = apiserver_writes(client, &["secrets"]).await - before - RULES as u64;
    (writes, took)
}

#[tokio::test]
async fn three_active_replicas_share_the_rules_and_survive_a_kill_and_a_freeze() {
    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    plane
        .install_crds(&[std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crds/mimeo.yaml")])
        .await
        .unwrap();
    let client = plane.client().await.unwrap();
    for (ns, annotations) in [
        ("platform", json!({})),
        ("t1", json!({"mimeo.dev/accept-from": "platform"})),
        ("t2", json!({"mimeo.dev/accept-from": "platform"})),
    ] {
        apply(
            &client,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "annotations": annotations}}),
        )
        .await;
    }
    for r in 0..RULES {
        put_source(&client, r, "v0").await;
        apply(
            &client,
            json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                   "metadata": {"name": format!("r{r:02}"), "namespace": "platform"},
                   "spec": {"source": {"kind": "Secret", "name": format!("s{r:02}")},
                            "targets": TARGETS.iter().map(|t| json!({"namespace": t})).collect::<Vec<_>>()}}),
        )
        .await;
    }
    let root = tempfile::tempdir().unwrap();
    let kubeconfig = root.path().join("kubeconfig");
    std::fs::write(&kubeconfig, plane.kubeconfig_yaml()).unwrap();
    let replicas = Replicas { kubeconfig, root };
    let mut a = replicas.start("replica-a");
    let mut b = replicas.start("replica-b");
    let mut c = replicas.start("replica-c");
    for replica in [&mut a, &mut b, &mut c] {
        replica.wait_ready().await;
    }

    // One shard each, and every copy made.
    let held = eventually_within("one shard for each replica", Duration::from_secs(60), || async {
        let mut held = Vec::new();
        for replica in [&a, &b, &c] {
            held.push(shards_of(replica).await?);
        }
        let mut all: Vec<&str> = held.iter().map(|h| h.as_str()).collect();
        all.sort();
        (all == [
            "ok: shards [0] of 3",
            "ok: shards [1] of 3",
            "ok: shards [2] of 3",
        ])
        .then_some(held)
    })
    .await;
    println!("shards held: {held:?}");
    eventually_within("every first copy", Duration::from_secs(60), || async {
        (copies_with(&client, "v0").await == RULES * TARGETS.len()).then_some(())
    })
    .await;
    for replica in [&a, &b, &c] {
        let metrics = replica.metrics().await;
        assert!(
            metrics.contains("mimeo_shard_held{shard=\"0\"}"),
            "the shard metric is missing:\n{metrics}"
        );
    }

    let copies = (RULES * TARGETS.len()) as u64;
    let (writes, took) = rotate(&client, "v1").await;
    println!("rotation with three replicas: {writes} copy writes for {copies} copies, in {took:?}");
    assert_eq!(writes, copies, "each copy written once for one change");

    // A replica killed: its shard is free once its Lease runs out, and another takes it.
    a.signal("KILL");
    a.reap();
    let killed = Instant::now();
    let (writes, took) = rotate(&client, "v2").await;
    println!(
        "rotation right after a SIGKILL: {writes} copy writes, all copies in {took:?} \
         ({:?} after the kill)",
        killed.elapsed()
    );
    assert_eq!(writes, copies, "each copy written once across the takeover");
    assert!(
        took < Duration::from_secs(LEASE_SECONDS * 2 + 10),
        "the killed replica's share was taken over only after {took:?}"
    );

    // A replica frozen past its Lease: the other takes all shards; resumed, the frozen one
    // writes nothing before it holds a shard again.
    b.signal("STOP");
    tokio::time::sleep(Duration::from_secs(LEASE_SECONDS * 2 + 2)).await;
    let (writes, _) = rotate(&client, "v3").await;
    assert_eq!(
        writes, copies,
        "each copy written once while one replica is frozen"
    );
    b.signal("CONT");
    let (writes, _) = rotate(&client, "v4").await;
    println!("rotation right after SIGCONT: {writes} copy writes for {copies} copies");
    assert_eq!(
        writes, copies,
        "the resumed replica wrote a copy it no longer held"
    );

    // A replica joins while sources rotate, then leaves.
    let mut d = replicas.start("replica-d");
    d.wait_ready().await;
    for value in ["v5", "v6"] {
        let (writes, _) = rotate(&client, value).await;
        assert_eq!(
            writes, copies,
            "each copy written once as a replica joins ({value})"
        );
    }
    eventually_within(
        "the joined replica holds a shard",
        Duration::from_secs(60),
        || async { shards_of(&d).await.filter(|s| !s.contains("[]")).map(|_| ()) },
    )
    .await;
    d.stop();
    for value in ["v7", "v8"] {
        let (writes, _) = rotate(&client, value).await;
        assert_eq!(
            writes, copies,
            "each copy written once as a replica leaves ({value})"
        );
    }
    let mut flaps = 0.0;
    for replica in [&b, &c] {
        flaps += replica
            .metrics()
            .await
            .lines()
            .find_map(|l| l.strip_prefix("mimeo_copy_flaps_total "))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
    }
    assert_eq!(flaps, 0.0, "the flap guard tripped");
    b.stop();
    c.stop();
}
