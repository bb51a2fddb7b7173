//! Scenario benchmark against a real control plane: what a rule with a transform chain costs when
//! its source changes (every copy's chain runs) and when a reconcile changes nothing the chain
//! sees (every copy's outcome is remembered), with the Python example plugin, the slowest to call.
//!
//! `cargo bench --bench chains` (add `-- --copies N --rounds K`). Needs the example plugins built
//! (`bash plugins/examples/build-all.sh`). docs/benchmarks.md records a run.

#[path = "../tests/harness/mod.rs"]
mod harness;

use harness::{Harness, chain_counts, eventually};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use mimeo::controller::ControllerConfig;
use serde_json::json;
use std::time::{Duration, Instant};

const PLUGIN: &str = "add-annotation-python.wasm";

fn arg(name: &str, default: usize) -> usize {
    std::env::args()
        .skip_while(|a| a != name)
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// Waits until every copy carries the plugin's annotation with `value`.
async fn all_annotated(h: &Harness, copies: usize, value: &str) {
    eventually(&format!("{copies} copies annotated {value}"), || async {
        let mut done = 0;
        for i in 0..copies {
            let copy = Api::<Secret>::namespaced(h.client.clone(), &format!("bench-t{i}"))
                .get_opt("creds")
                .await
                .ok()??;
            let annotations = copy.metadata.annotations.unwrap_or_default();
            let user = copy.data.unwrap_or_default().get("user").map(|v| v.0.clone());
            if annotations.get("example.com/by").map(String::as_str) == Some("python")
                && user.as_deref() == Some(value.as_bytes())
            {
                done += 1;
            }
        }
        (done == copies).then_some(())
    })
    .await;
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

#[tokio::main]
async fn main() {
    let copies = arg("--copies", 50);
    let rounds = arg("--rounds", 10);
    let plugin = harness::plugin_dir().join(PLUGIN);
    assert!(
        plugin.is_file(),
        "{} is missing: run `bash plugins/examples/build-all.sh`",
        plugin.display()
    );
    let h = Harness::start_with(ControllerConfig {
        plugin_dir: Some(harness::plugin_dir()),
        ..Default::default()
    })
    .await;
    h.namespace("bench-src", &[], &[]).await;
    for i in 0..copies {
        h.namespace(
            &format!("bench-t{i}"),
            &[("bench", "chains")],
            &[("mimeo.dev/accept-from", "bench-src")],
        )
        .await;
    }
    h.put_secret("bench-src", "creds", &[("user", "v0")]).await;
    h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                   "metadata": {"name": "creds", "namespace": "bench-src"},
                   "spec": {"source": {"kind": "Secret", "name": "creds"},
                            "targets": [{"namespaceSelector": {"matchLabels": {"bench": "chains"}}}],
                            "transforms": [{"plugin": format!("file://{PLUGIN}"),
                                            "config": {"key": "example.com/by", "value": "python"}}]}}))
        .await;
    all_annotated(&h, copies, "v0").await;

    // The source changes: every copy's chain runs, then every copy is written.
    let mut changed = Vec::new();
    for round in 1..=rounds {
        let value = format!("v{round}");
        let started = Instant::now();
        h.put_secret("bench-src", "creds", &[("user", value.as_str())])
            .await;
        all_annotated(&h, copies, &value).await;
        changed.push(started.elapsed());
    }
    let (run_before, remembered_before) = chain_counts(&h.metrics);

    // A namespace's labels change: the rule looks at every copy again, and no chain input changed.
    let mut unchanged = Vec::new();
    for round in 0..rounds {
        let (_, remembered) = chain_counts(&h.metrics);
        let started = Instant::now();
        h.patch_namespace("bench-t0", json!({"labels": {"poked": round.to_string()}}))
            .await;
        eventually("every outcome remembered", || async {
            (chain_counts(&h.metrics).1 >= remembered + copies as u64).then_some(())
        })
        .await;
        unchanged.push(started.elapsed());
    }
    let (run_after, remembered_after) = chain_counts(&h.metrics);
    assert_eq!(
        run_after, run_before,
        "a chain ran though nothing it sees changed"
    );

    let (changed, unchanged) = (median(changed), median(unchanged));
    println!(
        "a rule with the Python add-annotation plugin over {copies} copies, {rounds} rounds each, medians:"
    );
    println!("  source changed: chains run, copies written         {changed:>9.1?}");
    println!("  namespace label changed: chains remembered         {unchanged:>9.1?}");
    println!(
        "  remembered / run: {:.2}  (chains run {}, remembered {})",
        unchanged.as_secs_f64() / changed.as_secs_f64(),
        run_after,
        remembered_after - remembered_before
    );
}
