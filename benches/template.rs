//! Scenario benchmark against a real control plane: what the template plugin costs a rotation.
//! Two rules fan out to the same namespaces, one a plain copy and one assembling a
//! `kubernetes.io/dockerconfigjson` from its source and an input with the template plugin; their
//! sources are rotated in turn, and the time until every copy holds the new value is measured
//! by an independent watch.
//!
//! `cargo bench --bench template` (add `-- --copies N --rounds K`). docs/benchmarks.md records a
//! run.

#[path = "../tests/harness/mod.rs"]
mod harness;

use base64::Engine as _;
use futures::StreamExt;
use harness::Harness;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use mimeo::controller::ControllerConfig;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn arg(name: &str, default: usize) -> usize {
    std::env::args()
        .skip_while(|a| a != name)
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// What each copy holds now, as the watch last saw it: the plain copy's `user`, the assembled
/// copy's password.
type Seen = Arc<Mutex<HashMap<(String, String), String>>>;

fn value_of(secret: &Secret) -> Option<String> {
    let data = secret.data.as_ref()?;
    if let Some(user) = data.get("user") {
        return String::from_utf8(user.0.clone()).ok();
    }
    let config: serde_json::Value = serde_json::from_slice(&data.get(".dockerconfigjson")?.0).ok()?;
    config["auths"]["registry.example.com"]["password"]
        .as_str()
        .map(str::to_owned)
}

fn watch_copies(h: &Harness) -> Seen {
    let seen: Seen = Arc::default();
    let api = Api::<Secret>::all(h.client.clone());
    let config = watcher::Config::default().labels("mimeo.dev/managed-by=mimeo");
    let sink = seen.clone();
    tokio::spawn(async move {
        let stream = watcher(api, config).applied_objects();
        futures::pin_mut!(stream);
        while let Some(Ok(secret)) = stream.next().await {
            let key = (
                secret.metadata.namespace.clone().unwrap_or_default(),
                secret.metadata.name.clone().unwrap_or_default(),
            );
            if let Some(value) = value_of(&secret) {
                sink.lock().unwrap().insert(key, value);
            }
        }
    });
    seen
}

/// Waits until all `copies` copies named `name` hold `value`.
async fn reached(seen: &Seen, name: &str, copies: usize, value: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|((_, n), v)| n == name && v.as_str() == value)
            .count();
        if done == copies {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: {done}/{copies} copies hold {value}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn rule(name: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut spec = json!({"source": {"kind": "Secret", "name": name},
                          "targets": [{"namespaceSelector": {"matchLabels": {"bench": "template"}}}]});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
           "metadata": {"name": name, "namespace": "bench-src"}, "spec": spec})
}

#[tokio::main]
async fn main() {
    let copies = arg("--copies", 100);
    let rounds = arg("--rounds", 20);
    let h = Harness::start_with(ControllerConfig {
        plugin_dir: Some(harness::plugin_dir()),
        ..Default::default()
    })
    .await;
    h.namespace("bench-src", &[], &[]).await;
    for i in 0..copies {
        h.namespace(
            &format!("bench-t{i}"),
            &[("bench", "template")],
            &[("mimeo.dev/accept-from", "bench-src")],
        )
        .await;
    }
    let seen = watch_copies(&h);
    h.put_secret("bench-src", "plain", &[("user", "v0")]).await;
    h.put_secret("bench-src", "robot", &[("username", "robot"), ("password", "v0")])
        .await;
    h.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "endpoint", "namespace": "bench-src"},
                   "data": {"host": "registry.example.com"}}))
        .await;
    h.apply(rule("plain", json!({}))).await;
    h.apply(rule(
        "robot",
        json!({"inputs": [{"name": "endpoint", "from": {"kind": "ConfigMap", "name": "endpoint"}}],
               "secretType": "kubernetes.io/dockerconfigjson",
               "transforms": [{"plugin": "file://template.wasm", "config": {
                   "replaceData": true,
                   "stringData": {".dockerconfigjson":
                       "{{ dockerconfigjson(inputs.endpoint.data.host, object.data.username | b64decode, object.data.password | b64decode) }}"}}}]}),
    ))
    .await;
    reached(&seen, "plain", copies, "v0").await;
    reached(&seen, "robot", copies, "v0").await;

    // Rotations, alternating: the plain rule's source, then the template rule's.
    let (mut plain, mut templated) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let value = format!("v{round}");
        let started = Instant::now();
        h.put_secret("bench-src", "plain", &[("user", value.as_str())])
            .await;
        reached(&seen, "plain", copies, &value).await;
        plain.push(started.elapsed());

        let started = Instant::now();
        h.put_secret(
            "bench-src",
            "robot",
            &[("username", "robot"), ("password", value.as_str())],
        )
        .await;
        reached(&seen, "robot", copies, &value).await;
        templated.push(started.elapsed());
    }
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("robot:v{rounds}"));
    let copy = Api::<Secret>::namespaced(h.client.clone(), "bench-t0")
        .get("robot")
        .await
        .unwrap();
    assert_eq!(copy.type_.as_deref(), Some("kubernetes.io/dockerconfigjson"));
    let config: serde_json::Value =
        serde_json::from_slice(&copy.data.unwrap()[".dockerconfigjson"].0).unwrap();
    assert_eq!(config["auths"]["registry.example.com"]["auth"], auth.as_str());

    let (plain, templated) = (median(plain), median(templated));
    println!("a rotation reaching {copies} copies, {rounds} rounds each, alternating, medians:");
    println!("  plain copy                                         {plain:>9.1?}");
    println!("  template plugin (dockerconfigjson from an input)   {templated:>9.1?}");
    println!(
        "  template / plain: {:.2}",
        templated.as_secs_f64() / plain.as_secs_f64()
    );
}
