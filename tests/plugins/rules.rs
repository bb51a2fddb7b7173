//! Transform plugins in rules, against a real apiserver: a chain shapes the copies, a skip leaves
//! a namespace without one, a failure leaves the previous copy as it was, and `configmap://`
//! plugins follow their ConfigMap.

use crate::harness;

use harness::{Harness, chain_counts, eventually, secret_value};
use mimeo::controller::ControllerConfig;
use serde_json::json;
use std::time::Duration;

async fn harness() -> Harness {
    harness_with(ControllerConfig {
        plugin_dir: Some(harness::plugin_dir()),
        ..Default::default()
    })
    .await
}

async fn harness_with(config: ControllerConfig) -> Harness {
    let h = Harness::start_with(config).await;
    h.namespace("platform", &[], &[]).await;
    for ns in ["tenant-a", "tenant-b"] {
        h.namespace(ns, &[("tier", "x")], &[("mimeo.dev/accept-from", "platform")])
            .await;
    }
    h.put_secret(
        "platform",
        "registry",
        &[(".dockerconfigjson", "{}"), ("username", "u"), ("password", "p")],
    )
    .await;
    h
}

fn rule(transforms: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule", "metadata": {"name": "registry", "namespace": "platform"},
           "spec": {"source": {"kind": "Secret", "name": "registry"},
                    "targets": [{"namespaceSelector": {"matchLabels": {"tier": "x"}}}],
                    "transforms": transforms}})
}

#[tokio::test]
async fn a_chain_filters_then_renames_keys() {
    let h = harness().await;
    h.apply(rule(json!([
        {"plugin": "file://filter-keys.wasm", "config": {"include": [".dockerconfigjson"]}},
        {"plugin": "file://rename-keys.wasm", "config": {"rename": {".dockerconfigjson": "config.json"}}},
    ])))
    .await;
    for ns in ["tenant-a", "tenant-b"] {
        let copy = eventually(&format!("the transformed copy in {ns}"), || async {
            h.secrets(ns).get_opt("registry").await.unwrap()
        })
        .await;
        let keys: Vec<String> = copy.data.clone().unwrap_or_default().into_keys().collect();
        assert_eq!(keys, ["config.json"]);
        assert_eq!(secret_value(&copy, "config.json").as_deref(), Some("{}"));
    }
    h.wait_ready("platform", "registry", "True", "Synced").await;
}

#[tokio::test]
async fn a_skip_leaves_one_namespace_without_a_copy_and_says_why() {
    let h = harness().await;
    h.apply(rule(
        json!([{"plugin": "file://misbehave.wasm", "config": {"skip-namespace": "tenant-b"}}]),
    ))
    .await;
    eventually("the copy in tenant-a", || async {
        h.secrets("tenant-a").get_opt("registry").await.unwrap()
    })
    .await;
    let rule = h.wait_ready("platform", "registry", "True", "Synced").await;
    assert!(
        rule.status.as_ref().unwrap().conditions[0]
            .message
            .contains("1 skipped by plugins")
    );
    let status = rule.status.unwrap();
    let skipped = status
        .problems
        .iter()
        .find(|c| c.namespace.as_deref() == Some("tenant-b"))
        .unwrap();
    assert!(
        skipped
            .message
            .as_deref()
            .unwrap()
            .contains("skipped by plugin file://misbehave.wasm"),
        "{skipped:?}"
    );
    assert!(h.secrets("tenant-b").get_opt("registry").await.unwrap().is_none());
}

#[tokio::test]
async fn a_failing_plugin_leaves_the_previous_copy() {
    let h = harness().await;
    h.apply(rule(
        json!([{"plugin": "file://filter-keys.wasm", "config": {"include": ["username"]}}]),
    ))
    .await;
    let before = eventually("the first copy", || async {
        h.secrets("tenant-a").get_opt("registry").await.unwrap()
    })
    .await;
    h.wait_ready("platform", "registry", "True", "Synced").await;

    h.apply(rule(
        json!([{"plugin": "file://misbehave.wasm", "config": {"do": "loop"}}]),
    ))
    .await;
    let failed = h
        .wait_ready("platform", "registry", "False", "PluginFailed")
        .await;
    let message = failed.status.unwrap().problems[0].message.clone().unwrap();
    assert!(message.contains("deadline"), "{message}");
    harness::stays("the previous copy untouched", Duration::from_secs(1), || async {
        h.secrets("tenant-a")
            .get("registry")
            .await
            .unwrap()
            .metadata
            .resource_version
            == before.metadata.resource_version
    })
    .await;

    h.apply(rule(json!([{"plugin": "file://missing.wasm"}]))).await;
    let unavailable = h
        .wait_ready("platform", "registry", "False", "PluginUnavailable")
        .await;
    assert!(
        unavailable.status.unwrap().conditions[0]
            .message
            .contains("missing.wasm")
    );
    assert!(
        h.secrets("tenant-a").get_opt("registry").await.unwrap().is_some(),
        "nothing lost"
    );
}

/// Puts `wasm` under `key` of the ConfigMap `platform/plugins`'s binaryData.
async fn put_plugin(h: &Harness, key: &str, wasm: &[u8]) {
    use base64::Engine as _;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "plugins", "namespace": "platform"},
                    "binaryData": {key: base64::engine::general_purpose::STANDARD.encode(wasm)}});
    kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(h.client.clone(), "platform")
        .patch(
            "plugins",
            &kube::api::PatchParams::apply("test").force(),
            &kube::api::Patch::Apply(&cm),
        )
        .await
        .unwrap();
}

/// Bytes of the apiserver's answers to GETs of single ConfigMaps so far, from its own metrics.
async fn config_map_get_bytes(h: &Harness) -> f64 {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = h.client.request_text(request).await.unwrap();
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_response_sizes_sum{")
                && l.contains("resource=\"configmaps\"")
                && l.contains("verb=\"GET\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits for the copy in tenant-a to hold exactly `keys`, `username` being `user`.
async fn wait_copy(h: &Harness, keys: &[&str], user: &str) {
    eventually(&format!("a copy with {keys:?} and username {user}"), || async {
        let copy = h.secrets("tenant-a").get_opt("registry").await.ok()??;
        let found: Vec<String> = copy.data.clone().unwrap_or_default().into_keys().collect();
        (found == keys && secret_value(&copy, "username").as_deref() == Some(user)).then_some(())
    })
    .await;
}

/// `configmap://` plugins: read from a ConfigMap of the rule's namespace; while it is unchanged a
/// reconcile reads its metadata only, not the component in it; a changed component is loaded at
/// the next reconcile; a missing ConfigMap or key is a condition, and another namespace's
/// ConfigMap is refused.
#[tokio::test]
async fn config_map_plugins_follow_their_config_map() {
    let h = harness().await;
    let read = |name: &str| std::fs::read(harness::plugin_dir().join(name)).unwrap();
    let filter = read("filter-keys.wasm");
    let plugin = |reference: &str| rule(json!([{"plugin": reference, "config": {"include": ["username"]}}]));

    h.apply(plugin("configmap://platform/plugins/transform.wasm"))
        .await;
    let missing = h
        .wait_ready("platform", "registry", "False", "PluginUnavailable")
        .await;
    let message = &missing.status.unwrap().conditions[0].message;
    assert!(
        message.contains("ConfigMap platform/plugins does not exist"),
        "{message}"
    );

    put_plugin(&h, "other.wasm", &filter).await;
    let no_key = eventually("the missing key in the status", || async {
        let rule = h.rule("platform", "registry").await?;
        let message = rule.status?.conditions.into_iter().next()?.message;
        message
            .contains("has no binaryData key transform.wasm")
            .then_some(message)
    })
    .await;
    eprintln!("missing key: {no_key}");

    put_plugin(&h, "transform.wasm", &filter).await;
    wait_copy(&h, &["username"], "u").await;
    h.wait_ready("platform", "registry", "True", "Synced").await;

    // Unchanged: each reconcile reads the ConfigMap's metadata, not the component.
    let before = config_map_get_bytes(&h).await;
    let rounds = 5;
    for round in 0..rounds {
        let user = format!("u{round}");
        h.put_secret(
            "platform",
            "registry",
            &[
                (".dockerconfigjson", "{}"),
                ("username", user.as_str()),
                ("password", "p"),
            ],
        )
        .await;
        wait_copy(&h, &["username"], &user).await;
    }
    let bytes = config_map_get_bytes(&h).await - before;
    eprintln!(
        "{rounds} source changes read {bytes} bytes of ConfigMaps; the component is {} bytes",
        filter.len()
    );
    assert!(
        bytes < filter.len() as f64,
        "{bytes} bytes read for {rounds} reconciles: the component was read again"
    );

    // Changed: another component under the key is loaded at once, the ConfigMap's watch waking
    // the rule with nothing else changed (the 15 s retry and the resync are too slow for the
    // wait). rename-keys refuses filter-keys's config, which shows that it was loaded.
    let replaced = std::time::Instant::now();
    put_plugin(&h, "transform.wasm", &read("rename-keys.wasm")).await;
    let refused_at = eventually(
        "rename-keys refusing the config, with no other change",
        || async {
            let rule = h.rule("platform", "registry").await?;
            let condition = rule.status?.conditions.into_iter().next()?;
            (condition.reason == "PluginUnavailable").then(std::time::Instant::now)
        },
    )
    .await;
    let took = refused_at - replaced;
    eprintln!("a replaced configmap:// component took effect in {took:?}");
    assert!(
        took < Duration::from_secs(10),
        "{took:?}: not woken by the ConfigMap"
    );
    h.put_secret(
        "platform",
        "registry",
        &[(".dockerconfigjson", "{}"), ("username", "v"), ("password", "p")],
    )
    .await;
    let refused = eventually("rename-keys refusing the config", || async {
        let rule = h.rule("platform", "registry").await?;
        let condition = rule.status?.conditions.into_iter().next()?;
        (condition.reason == "PluginUnavailable").then_some(condition.message)
    })
    .await;
    assert!(refused.contains("rename"), "{refused}");
    wait_copy(&h, &["username"], "u4").await;

    put_plugin(&h, "transform.wasm", &filter).await;
    h.put_secret(
        "platform",
        "registry",
        &[(".dockerconfigjson", "{}"), ("username", "w"), ("password", "p")],
    )
    .await;
    wait_copy(&h, &["username"], "w").await;

    // A SyncRule reads plugins from its own namespace only.
    h.apply(plugin("configmap://tenant-a/plugins/transform.wasm"))
        .await;
    let other = eventually("the other namespace refused", || async {
        let rule = h.rule("platform", "registry").await?;
        let message = rule.status?.conditions.into_iter().next()?.message;
        message.contains("own namespace").then_some(message)
    })
    .await;
    eprintln!("other namespace: {other}");
}

/// A chain runs again only when its input changes: a reconcile that changes nothing for a copy
/// (a namespace's labels, a repaired edit) reuses the outcome, a new copy or a changed source runs
/// the plugins.
#[tokio::test]
async fn a_chain_runs_again_only_when_its_input_changes() {
    let h = harness().await;
    h.apply(rule(json!([
        {"plugin": "file://filter-keys.wasm", "config": {"include": ["username", "password"]}},
        {"plugin": "file://rename-keys.wasm", "config": {"rename": {"username": "user"}}},
    ])))
    .await;
    let copy_with = |ns: &'static str, user: &'static str| {
        let h = &h;
        async move {
            eventually(
                &format!("the transformed copy in {ns} with user {user}"),
                || async {
                    let copy = h.secrets(ns).get_opt("registry").await.ok()??;
                    let keys: Vec<String> = copy.data.clone().unwrap_or_default().into_keys().collect();
                    (keys == ["password", "user"] && secret_value(&copy, "user").as_deref() == Some(user))
                        .then_some(())
                },
            )
            .await
        }
    };
    copy_with("tenant-a", "u").await;
    copy_with("tenant-b", "u").await;
    h.wait_ready("platform", "registry", "True", "Synced").await;
    let (run, remembered) = chain_counts(&h.metrics);
    assert!(run >= 2, "{run}");

    // A namespace's labels change: the rule looks again, and nothing it feeds the chain changed.
    h.patch_namespace("tenant-a", json!({"labels": {"touched": "1"}}))
        .await;
    eventually("the rule reconciled with remembered outcomes", || async {
        (chain_counts(&h.metrics).1 >= remembered + 2).then_some(())
    })
    .await;
    assert_eq!(chain_counts(&h.metrics).0, run, "no plugin was called");

    // An edited copy is repaired from the remembered outcome.
    let mut edited = h.secrets("tenant-b").get("registry").await.unwrap();
    edited
        .data
        .get_or_insert_default()
        .insert("extra".into(), k8s_openapi::ByteString(b"x".to_vec()));
    h.secrets("tenant-b")
        .replace("registry", &Default::default(), &edited)
        .await
        .unwrap();
    copy_with("tenant-b", "u").await;
    assert_eq!(
        chain_counts(&h.metrics).0,
        run,
        "no plugin was called for the repair"
    );

    // A new target runs the chain once, for that copy alone.
    h.namespace(
        "tenant-c",
        &[("tier", "x")],
        &[("mimeo.dev/accept-from", "platform")],
    )
    .await;
    copy_with("tenant-c", "u").await;
    h.wait_ready("platform", "registry", "True", "Synced").await;
    assert_eq!(chain_counts(&h.metrics).0, run + 1, "one chain for the new copy");

    // A changed source runs it for every copy.
    h.put_secret(
        "platform",
        "registry",
        &[(".dockerconfigjson", "{}"), ("username", "v"), ("password", "p")],
    )
    .await;
    for ns in ["tenant-a", "tenant-b", "tenant-c"] {
        copy_with(ns, "v").await;
    }
    assert_eq!(
        chain_counts(&h.metrics).0,
        run + 4,
        "one chain per copy of the new source"
    );
}

/// The resident memory of this process (the controller runs in it), from the kernel.
fn resident_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// Plugins that block in WASI (a sleep in transform, in validate-config, in describe) or poll a
/// far clock are each contained at their deadline on a real apiserver: the copy becomes
/// `PluginFailed` (or the rule `PluginUnavailable`), the previous copy stays, and a rule without
/// plugins rotates on while twenty such rules run. Prints how long each took and the process's
/// resident memory; the assertions are on outcomes, not times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_blocked_in_wasi_are_contained_and_other_rules_go_on() {
    let h = harness().await;
    let named = |name: &str, transforms: serde_json::Value| {
        let mut r = rule(transforms);
        r["metadata"]["name"] = json!(name);
        r["spec"]["targets"] = json!([{"namespace": "tenant-a", "name": name}]);
        r
    };
    // The control rule, rotated before and while the hostile rules run.
    h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                   "metadata": {"name": "control", "namespace": "platform"},
                   "spec": {"source": {"kind": "Secret", "name": "registry"},
                            "targets": [{"namespace": "tenant-b", "name": "control"}]}}))
        .await;
    h.wait_ready("platform", "control", "True", "Synced").await;
    let rotate = |round: usize| {
        let h = &h;
        async move {
            let value = format!("v{round}");
            let started = std::time::Instant::now();
            h.put_secret("platform", "registry", &[("username", &value)])
                .await;
            eventually("the control copy rotated", || async {
                let copy = h.secrets("tenant-b").get_opt("control").await.unwrap()?;
                (secret_value(&copy, "username").as_deref() == Some(value.as_str())).then_some(())
            })
            .await;
            started.elapsed()
        }
    };
    let p50 = |mut times: Vec<Duration>| {
        times.sort();
        times[times.len() / 2]
    };
    let mut quiet = Vec::new();
    for round in 0..10 {
        quiet.push(rotate(round).await);
    }
    let rss_before = resident_mib();

    let hostile = [
        ("sleep-transform", json!({"do": "sleep"}), "PluginFailed"),
        ("poll-transform", json!({"do": "poll-clock"}), "PluginFailed"),
        (
            "sleep-validate",
            json!({"do": "sleep", "during": "validate-config"}),
            "PluginUnavailable",
        ),
    ];
    let started = std::time::Instant::now();
    for i in 0..20 {
        let (kind, config, _) = &hostile[i % hostile.len()];
        h.apply(named(
            &format!("{kind}-{i}"),
            json!([{"plugin": "file://misbehave.wasm", "config": config}]),
        ))
        .await;
    }
    h.apply(named(
        "stall-describe",
        json!([{"plugin": "file://stall-describe.wasm"}]),
    ))
    .await;
    for i in 0..20 {
        let (kind, _, reason) = &hostile[i % hostile.len()];
        let name = format!("{kind}-{i}");
        let rule = h.wait_ready("platform", &name, "False", reason).await;
        let status = rule.status.unwrap();
        let message = match *reason {
            "PluginFailed" => status.problems[0].message.clone().unwrap_or_default(),
            _ => status.conditions[0].message.clone(),
        };
        assert!(message.contains("ran past its deadline"), "{name}: {message}");
        assert!(h.secrets("tenant-a").get_opt(&name).await.unwrap().is_none());
    }
    let all_contained = started.elapsed();
    let stalled = h
        .wait_ready("platform", "stall-describe", "False", "PluginUnavailable")
        .await;
    assert!(
        stalled.status.unwrap().conditions[0]
            .message
            .contains("ran past its deadline"),
        "describe is under the deadline too"
    );
    let mut busy = Vec::new();
    for round in 10..20 {
        busy.push(rotate(round).await);
    }
    let rss_after = resident_mib();
    println!(
        "21 hostile rules contained in {all_contained:?}; control rotation p50 {:?} quiet, {:?} with them; \
         resident {rss_before} MiB before, {rss_after} MiB after",
        p50(quiet),
        p50(busy)
    );
}

/// A `file://` plugin replaced on disk (as the kubelet updates a mounted ConfigMap) is used
/// without any other change: the plugin files in use are looked at every two seconds.
#[tokio::test]
async fn a_file_plugin_replaced_on_disk_takes_effect() {
    let dir = tempfile::tempdir().unwrap();
    let built = harness::plugin_dir();
    std::fs::copy(built.join("filter-keys.wasm"), dir.path().join("transform.wasm")).unwrap();
    let h = Harness::start_with(ControllerConfig {
        plugin_dir: Some(dir.path().to_owned()),
        ..Default::default()
    })
    .await;
    h.namespace("platform", &[], &[]).await;
    h.namespace(
        "tenant-a",
        &[("tier", "x")],
        &[("mimeo.dev/accept-from", "platform")],
    )
    .await;
    h.put_secret("platform", "registry", &[("username", "u"), ("password", "p")])
        .await;
    h.apply(rule(
        json!([{"plugin": "file://transform.wasm", "config": {"include": ["username"]}}]),
    ))
    .await;
    h.wait_ready("platform", "registry", "True", "Synced").await;

    // rename-keys refuses filter-keys's config: that shows it was loaded.
    let replaced = std::time::Instant::now();
    let partial = dir.path().join("transform.wasm.new");
    std::fs::copy(built.join("rename-keys.wasm"), &partial).unwrap();
    std::fs::rename(&partial, dir.path().join("transform.wasm")).unwrap();
    h.wait_ready("platform", "registry", "False", "PluginUnavailable")
        .await;
    let took = replaced.elapsed();
    eprintln!("a replaced file:// plugin took effect in {took:?}");
    assert!(
        took < Duration::from_secs(10),
        "{took:?}: not noticed by the poll"
    );
}

/// A tenant's `configmap://` component built to compile slowly is refused at the compile's time
/// limit on a real apiserver (`PluginUnavailable`, in words that name the limit), while a rule
/// with a loaded plugin rotates on: compiles run in processes of their own, under permits of
/// their own. Prints how long the refusal and the rotation took. (The memory limit is proven
/// in `plugin_host.rs`, with the same compiler process.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_slow_to_compile_is_refused_and_other_rules_go_on() {
    let mut config = ControllerConfig {
        plugin_dir: Some(harness::plugin_dir()),
        ..Default::default()
    };
    config.plugin_host.compiler = Some(mimeo::plugin::CompilerProcess {
        program: env!("CARGO_BIN_EXE_mimeo").into(),
        timeout: Duration::from_secs(3),
        max_memory_bytes: 1 << 30,
        max_cpu_time: Duration::from_secs(120),
    });
    // A cache of its own: the shared one may hold this very component, compiled by a run with a
    // longer limit, and it would then be loaded instead of compiled.
    let cache = tempfile::tempdir().unwrap();
    config.plugin_host.cache_dir = cache.path().join("compiled");
    let h = harness_with(config).await;
    let mut control =
        rule(json!([{"plugin": "file://filter-keys.wasm", "config": {"include": ["username"]}}]));
    control["metadata"]["name"] = json!("control");
    control["spec"]["targets"] = json!([{"namespace": "tenant-b", "name": "control"}]);
    h.apply(control).await;
    h.wait_ready("platform", "control", "True", "Synced").await;

    put_plugin(
        &h,
        "slow.wasm",
        &harness::slow_to_compile_component(1, 1500, 40_000),
    )
    .await;
    let started = std::time::Instant::now();
    let mut slow = rule(json!([{"plugin": "configmap://platform/plugins/slow.wasm"}]));
    slow["metadata"]["name"] = json!("slow");
    slow["spec"]["targets"] = json!([{"namespace": "tenant-a", "name": "slow"}]);
    h.apply(slow).await;
    // While it compiles, the control rule's source rotates and its copy follows.
    h.put_secret("platform", "registry", &[("username", "during")])
        .await;
    eventually("the control copy rotated during the compile", || async {
        let copy = h.secrets("tenant-b").get_opt("control").await.unwrap()?;
        (secret_value(&copy, "username").as_deref() == Some("during")).then_some(())
    })
    .await;
    let rotated = started.elapsed();

    let status = h
        .wait_ready("platform", "slow", "False", "PluginUnavailable")
        .await
        .status
        .unwrap();
    let refused = started.elapsed();
    assert_eq!(
        status.conditions[0].message,
        "plugin configmap://platform/plugins/slow.wasm: compiling the plugin took longer than 3s \
         (--plugin-compile-timeout-secs); mimeo does not try this component again until it restarts"
    );
    assert!(h.secrets("tenant-a").get_opt("slow").await.unwrap().is_none());
    println!(
        "control copy rotated {rotated:?} after the slow rule was applied; refused after {refused:?} (limit 3 s)"
    );
}
