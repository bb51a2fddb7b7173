//! Rules running `oci://` plugins, against a real apiserver and a real registry (Debian's
//! docker-registry), with artifacts pushed by oras: by tag and by digest, pinned in status,
//! served from the cache after a restart with the registry gone, every failure as a condition
//! that writes nothing, and recovery without a restart.

use crate::harness;

use harness::{Harness, eventually, eventually_within, secret_value};
use kube::api::{Api, Patch, PatchParams};
use mimeo::api::SyncRule;
use mimeo::controller::{ControllerConfig, OciPolicy};
use mimeo::plugin::oci::{OciSettings, RegistryTrust};
use mimeo_envtest::Registry;
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

fn plugin_bytes(name: &str) -> Vec<u8> {
    std::fs::read(harness::plugin_dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A controller whose compiled-plugin and artifact caches live in `dir`.
fn config(dir: &Path, policy: OciPolicy) -> ControllerConfig {
    let mut config = ControllerConfig {
        oci: OciSettings {
            cache_dir: dir.join("artifacts"),
            ..Default::default()
        },
        oci_policy: policy,
        ..Default::default()
    };
    config.plugin_host.cache_dir = dir.join("compiled");
    config
}

fn filter_rule(name: &str, plugin: &str) -> Value {
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
           "metadata": {"name": name, "namespace": "platform"},
           "spec": {"source": {"kind": "Secret", "name": "creds"},
                    "targets": [{"namespace": "tenant", "name": name}],
                    "transforms": [{"plugin": plugin, "config": {"include": ["keep"]}}]}})
}

async fn setup(h: &Harness) {
    h.namespace("platform", &[], &[]).await;
    h.namespace("tenant", &[], &[("mimeo.dev/accept-from", "platform")])
        .await;
    h.put_secret("platform", "creds", &[("keep", "k1"), ("drop", "d1")])
        .await;
}

/// Waits for the filtered copy `tenant/<name>` holding `keep`; returns when it appeared.
async fn wait_filtered(h: &Harness, name: &str, keep: &str) -> Instant {
    eventually(&format!("filtered copy {name}"), || async {
        let copy = h.secrets("tenant").get_opt(name).await.ok()??;
        (secret_value(&copy, "keep").as_deref() == Some(keep) && secret_value(&copy, "drop").is_none())
            .then(Instant::now)
    })
    .await
}

/// The pull secret `platform/registry-pull`, with the credentials of the registries started
/// with auth here (user `puller`) for `host`.
async fn put_pull_secret(h: &Harness, host: &str) {
    let auth = format!(
        "{{\"auths\": {{\"{host}\": {{\"username\": \"puller\", \"password\": \"pull-secret-distinctive\"}}}}}}"
    );
    let pull_secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": "registry-pull", "namespace": "platform"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": auth},
    }))
    .unwrap();
    h.secrets("platform")
        .patch(
            "registry-pull",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&pull_secret),
        )
        .await
        .unwrap();
}

/// When the copy `tenant/<name>` carries the Python plugin's annotation, if it does.
async fn annotated(h: &Harness, name: &str) -> Option<Instant> {
    let copy = h.secrets("tenant").get_opt(name).await.ok()??;
    (copy.metadata.annotations?.get("example.com/by")? == "python").then(Instant::now)
}

/// The plugins the rule's status pins, once it pins any (the status is written after the copies).
async fn pins(h: &Harness, name: &str) -> Vec<(String, String)> {
    eventually(&format!("plugin pins in the status of {name}"), || async {
        let rule = h.rule("platform", name).await?;
        let pins: Vec<(String, String)> = rule
            .status?
            .plugins
            .into_iter()
            .map(|p| (p.plugin, p.digest))
            .collect();
        (!pins.is_empty()).then_some(pins)
    })
    .await
}

/// By tag and by digest; the tag pinned in status; after a restart with the registry gone the
/// rules still run from the cache; and the time to a first copy, cold and warm.
#[tokio::test]
async fn rules_run_plugins_from_a_registry_and_then_from_the_cache() {
    let registry = Registry::start().await.unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start_with(config(dir.path(), OciPolicy::default())).await;
    setup(&h).await;
    let host = registry.host();
    let rust = registry
        .push_wasm("plugins/filter-keys:1.0", &plugin_bytes("filter-keys.wasm"))
        .unwrap();
    let python = registry
        .push_wasm(
            "plugins/add-annotation-python:0.1",
            &std::fs::read(harness::example_plugin("python")).unwrap(),
        )
        .unwrap();

    // Cold: nothing cached, nothing compiled.
    let by_tag = format!("oci://{host}/plugins/filter-keys:1.0");
    let started = Instant::now();
    h.apply(filter_rule("by-tag", &by_tag)).await;
    let cold_rust = wait_filtered(&h, "by-tag", "k1").await - started;
    let python_rule = |name: &str| {
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
               "metadata": {"name": name, "namespace": "platform"},
               "spec": {"source": {"kind": "Secret", "name": "creds"},
                        "targets": [{"namespace": "tenant", "name": name}],
                        "transforms": [{"plugin": format!("oci://{host}/plugins/add-annotation-python:0.1"),
                                        "config": {"key": "example.com/by", "value": "python"}}]}})
    };
    let started = Instant::now();
    h.apply(python_rule("python-cold")).await;
    // The 18 MB Python component compiles for 15-30 s alone, more beside the other tests.
    let cold_python = eventually_within("python copy", Duration::from_secs(180), || {
        annotated(&h, "python-cold")
    })
    .await
        - started;
    assert_eq!(pins(&h, "by-tag").await, [(by_tag.clone(), rust.clone())]);

    let by_digest = format!("oci://{host}/plugins/filter-keys@{rust}");
    h.apply(filter_rule("by-digest", &by_digest)).await;
    wait_filtered(&h, "by-digest", "k1").await;
    assert_eq!(pins(&h, "by-digest").await, [(by_digest.clone(), rust.clone())]);

    // Warm: a restarted controller (caches on disk, nothing in memory), a new rule per plugin.
    h.stop_controller().await;
    h.start_controller().await;
    let started = Instant::now();
    h.apply(filter_rule("warm", &by_tag)).await;
    let warm_rust = wait_filtered(&h, "warm", "k1").await - started;
    let started = Instant::now();
    h.apply(python_rule("python-warm")).await;
    let warm_python = eventually("warm python copy", || annotated(&h, "python-warm")).await - started;

    // A restart with the registry gone: pinned tags and digests all come from the cache.
    h.stop_controller().await;
    drop(registry);
    h.start_controller().await;
    h.put_secret("platform", "creds", &[("keep", "k2"), ("drop", "d2")])
        .await;
    for name in ["by-tag", "by-digest", "warm"] {
        wait_filtered(&h, name, "k2").await;
    }
    let ready = h.wait_ready("platform", "by-tag", "True", "Synced").await;
    assert_eq!(ready.status.unwrap().plugins[0].digest, rust);
    eprintln!(
        "rule creation to first copy: Rust filter-keys cold {cold_rust:.2?} warm {warm_rust:.2?}; \
         Python add-annotation cold {cold_python:.2?} warm {warm_python:.2?} (python digest {python})"
    );
}

/// Every failure gives the rule a condition naming the plugin and the cause, writes nothing new,
/// leaves existing copies as they are, and clears up without a restart once fixed.
#[tokio::test]
async fn registry_failures_are_conditions_and_clear_up() {
    let registry = Registry::start_with_auth("puller", "pull-secret-distinctive")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let open = Registry::start().await.unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let mut settings = config(dir.path(), OciPolicy::default());
    settings.oci.max_artifact_bytes = 2 << 20;
    let h = Harness::start_with(settings).await;
    setup(&h).await;
    let (host, open_host) = (registry.host(), open.host());
    let filter = plugin_bytes("filter-keys.wasm");
    open.push_wasm("plugins/filter-keys:1.0", &filter).unwrap();

    let refused = |name: &'static str, reason: &'static str| {
        let h = &h;
        async move {
            let rule = h.wait_ready("platform", name, "False", reason).await;
            let message = rule.status.unwrap().conditions[0].message.clone();
            assert!(message.contains("plugin oci://"), "{name}: {message}");
            assert!(
                h.secrets("tenant").get_opt(name).await.unwrap().is_none(),
                "{name}: a copy was written"
            );
            assert!(!message.contains("pull-secret-distinctive"), "a password leaked");
            eprintln!("{name}: {reason}: {message}");
        }
    };

    h.apply(filter_rule(
        "unreachable",
        "oci://127.0.0.1:1/plugins/filter-keys:1.0",
    ))
    .await;
    refused("unreachable", "RegistryUnreachable").await;

    h.apply(filter_rule(
        "missing",
        &format!("oci://{open_host}/plugins/filter-keys:2.0"),
    ))
    .await;
    refused("missing", "ArtifactNotFound").await;

    h.apply(filter_rule(
        "locked",
        &format!("oci://{host}/plugins/filter-keys:1.0"),
    ))
    .await;
    refused("locked", "RegistryUnauthorized").await;

    let tarball = tempfile::tempdir().unwrap();
    std::fs::write(tarball.path().join("notes.txt"), "not a plugin").unwrap();
    let status = open
        .oras_command(&[
            "push",
            &format!("{open_host}/plugins/notes:1"),
            "notes.txt:text/plain",
        ])
        .unwrap()
        .current_dir(tarball.path())
        .status()
        .unwrap();
    assert!(status.success());
    h.apply(filter_rule(
        "notes",
        &format!("oci://{open_host}/plugins/notes:1"),
    ))
    .await;
    refused("notes", "WrongMediaType").await;

    // A core module, not a component, in the right layout.
    open.push_wasm("plugins/core:1", b"\0asm\x01\0\0\0").unwrap();
    h.apply(filter_rule("core", &format!("oci://{open_host}/plugins/core:1")))
        .await;
    refused("core", "PluginUnavailable").await;

    // A component (an empty one) that implements no mimeo interface version.
    open.push_wasm("plugins/empty:1", b"\0asm\x0d\0\x01\0").unwrap();
    h.apply(filter_rule(
        "empty",
        &format!("oci://{open_host}/plugins/empty:1"),
    ))
    .await;
    refused("empty", "PluginUnavailable").await;
    let empty = h.rule("platform", "empty").await.unwrap();
    assert!(
        empty.status.unwrap().conditions[0]
            .message
            .contains("does not export mimeo:transform/transformer")
    );

    open.push_wasm("plugins/huge:1", &vec![0u8; 3 << 20]).unwrap();
    h.apply(filter_rule("huge", &format!("oci://{open_host}/plugins/huge:1")))
        .await;
    refused("huge", "ArtifactTooLarge").await;

    // A working rule whose plugin is changed to a missing one keeps its copy as it was.
    h.apply(filter_rule(
        "kept",
        &format!("oci://{open_host}/plugins/filter-keys:1.0"),
    ))
    .await;
    wait_filtered(&h, "kept", "k1").await;
    h.apply(filter_rule(
        "kept",
        &format!("oci://{open_host}/plugins/filter-keys:9.9"),
    ))
    .await;
    h.wait_ready("platform", "kept", "False", "ArtifactNotFound")
        .await;
    h.put_secret("platform", "creds", &[("keep", "k2"), ("drop", "d2")])
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kept = h.secrets("tenant").get("kept").await.unwrap();
    assert_eq!(
        secret_value(&kept, "keep").as_deref(),
        Some("k1"),
        "nothing new is written"
    );

    // Recovery: the missing tag is pushed; the locked registry gets a pull secret.
    open.push_wasm("plugins/filter-keys:2.0", &filter).unwrap();
    wait_filtered(&h, "missing", "k2").await;
    registry.push_wasm("plugins/filter-keys:1.0", &filter).unwrap();
    put_pull_secret(&h, &host).await;
    let mut locked = filter_rule("locked", &format!("oci://{host}/plugins/filter-keys:1.0"));
    locked["spec"]["pluginPullSecrets"] = json!([{"name": "registry-pull"}]);
    h.apply(locked).await;
    wait_filtered(&h, "locked", "k2").await;
    let status = serde_json::to_string(
        &Api::<SyncRule>::namespaced(h.client.clone(), "platform")
            .get("locked")
            .await
            .unwrap(),
    )
    .unwrap();
    assert!(!status.contains("pull-secret-distinctive"));
}

/// Pull secrets are read when the registry is asked, not on every reconcile: a missing one stops
/// a rule whose plugin must be fetched, and does not stop one whose plugin is pinned and cached,
/// also after a restart.
#[tokio::test]
async fn pull_secrets_are_read_only_when_the_registry_is_asked() {
    let registry = Registry::start_with_auth("puller", "pull-secret-distinctive")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start_with(config(dir.path(), OciPolicy::default())).await;
    setup(&h).await;
    let host = registry.host();
    registry
        .push_wasm("plugins/filter-keys:1.0", &plugin_bytes("filter-keys.wasm"))
        .unwrap();
    let private = |name: &str, tag: &str| {
        let mut rule = filter_rule(name, &format!("oci://{host}/plugins/filter-keys:{tag}"));
        rule["spec"]["pluginPullSecrets"] = json!([{"name": "registry-pull"}]);
        rule
    };

    h.apply(private("private", "1.0")).await;
    let missing = h
        .wait_ready("platform", "private", "False", "PluginPullSecretNotFound")
        .await;
    let message = &missing.status.unwrap().conditions[0].message;
    assert!(
        message.contains("pull secret platform/registry-pull does not exist"),
        "{message}"
    );
    assert!(h.secrets("tenant").get_opt("private").await.unwrap().is_none());

    put_pull_secret(&h, &host).await;
    wait_filtered(&h, "private", "k1").await;
    h.wait_ready("platform", "private", "True", "Synced").await;

    // Without the Secret, the pinned and compiled plugin still runs.
    h.secrets("platform")
        .delete("registry-pull", &Default::default())
        .await
        .unwrap();
    h.put_secret("platform", "creds", &[("keep", "k2"), ("drop", "d2")])
        .await;
    wait_filtered(&h, "private", "k2").await;
    // And after a restart, from the artifact cache on disk.
    h.stop_controller().await;
    h.start_controller().await;
    h.put_secret("platform", "creds", &[("keep", "k3"), ("drop", "d3")])
        .await;
    wait_filtered(&h, "private", "k3").await;
    let rule = h.wait_ready("platform", "private", "True", "Synced").await;
    assert_eq!(rule.status.unwrap().plugins.len(), 1);

    // A tag not pinned yet must be resolved, which needs the registry and so the Secret.
    registry
        .push_wasm("plugins/filter-keys:1.1", &plugin_bytes("filter-keys.wasm"))
        .unwrap();
    h.apply(private("newer", "1.1")).await;
    h.wait_ready("platform", "newer", "False", "PluginPullSecretNotFound")
        .await;
}

/// A registry whose certificate comes from a private CA: refused with a hint until the controller
/// trusts that CA for it, then used over HTTPS (on loopback too, since it was given a CA).
#[tokio::test]
async fn a_registry_with_a_private_ca_is_used_once_its_ca_is_trusted() {
    let registry = Registry::start_tls().await.unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::start_with(config(dir.path(), OciPolicy::default())).await;
    setup(&h).await;
    let host = registry.host();
    registry
        .push_wasm("plugins/filter-keys:1.0", &plugin_bytes("filter-keys.wasm"))
        .unwrap();
    let plugin = format!("oci://{host}/plugins/filter-keys:1.0");
    let ca = registry.ca_path().unwrap().display().to_string();

    // Loopback without a CA of its own: plain HTTP, which a TLS registry does not answer.
    h.apply(filter_rule("private", &plugin)).await;
    let refused = h
        .wait_ready("platform", "private", "False", "RegistryUnreachable")
        .await;
    let message = refused.status.unwrap().conditions[0].message.clone();
    assert!(message.contains("the registry serves HTTPS"), "{message}");
    eprintln!("no CA: {message}");

    // A CA of its own switches the registry to HTTPS; another registry's CA does not vouch for
    // its certificate.
    h.stop_controller().await;
    let other = Registry::start_tls().await.unwrap_or_else(|e| panic!("{e}"));
    let wrong_ca = format!("{host}={}", other.ca_path().unwrap().display());
    h.config_mut().oci.trust = RegistryTrust::load(&[wrong_ca.parse().unwrap()], &[]).unwrap();
    h.start_controller().await;
    let message = eventually("the untrusted certificate in the rule's status", || async {
        let rule = h.rule("platform", "private").await?;
        let condition = rule.status?.conditions.into_iter().next()?;
        (condition.reason == "RegistryUnreachable" && condition.message.contains("https://"))
            .then_some(condition.message)
    })
    .await;
    assert!(message.contains("private CA"), "{message}");
    eprintln!("another registry's CA: {message}");

    h.stop_controller().await;
    h.config_mut().oci.trust = RegistryTrust::load(&[format!("{host}={ca}").parse().unwrap()], &[]).unwrap();
    h.start_controller().await;
    wait_filtered(&h, "private", "k1").await;
    h.wait_ready("platform", "private", "True", "Synced").await;
    let log = std::fs::read_to_string(registry.log_path()).unwrap();
    assert!(
        log.contains("GET /v2/plugins/filter-keys/blobs/sha256:"),
        "the layer came from the TLS registry:\n{log}"
    );
}

/// The installation may require digests and limit registries.
#[tokio::test]
async fn the_installation_requires_digests_and_limits_registries() {
    let registry = Registry::start().await.unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let policy = OciPolicy {
        require_digest: true,
        allowed_registries: vec![registry.host()],
        ..OciPolicy::default()
    };
    let h = Harness::start_with(config(dir.path(), policy)).await;
    setup(&h).await;
    let host = registry.host();
    let digest = registry
        .push_wasm("plugins/filter-keys:1.0", &plugin_bytes("filter-keys.wasm"))
        .unwrap();
    h.apply(filter_rule(
        "tagged",
        &format!("oci://{host}/plugins/filter-keys:1.0"),
    ))
    .await;
    h.wait_ready("platform", "tagged", "False", "PluginDigestRequired")
        .await;
    h.apply(filter_rule(
        "elsewhere",
        &format!("oci://registry.example/plugins/filter-keys@{digest}"),
    ))
    .await;
    h.wait_ready("platform", "elsewhere", "False", "PluginRegistryNotAllowed")
        .await;
    h.apply(filter_rule(
        "pinned",
        &format!("oci://{host}/plugins/filter-keys@{digest}"),
    ))
    .await;
    wait_filtered(&h, "pinned", "k1").await;
}

/// A tag moved to another artifact is picked up when the rule's `refreshInterval` passes; a
/// rule without one stays on the digest it pinned.
#[tokio::test]
async fn a_moved_tag_is_followed_only_when_the_rule_asks() {
    use mimeo::plugin::oci::{Credentials, Oci, OciReference};
    let registry = Registry::start().await.unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::start_with(config(dir.path(), OciPolicy::default())).await;
    setup(&h).await;
    let host = registry.host();
    let filter = plugin_bytes("filter-keys.wasm");
    let first = registry.push_wasm("plugins/filter-keys:stable", &filter).unwrap();
    let tag = format!("oci://{host}/plugins/filter-keys:stable");
    let mut refreshed = filter_rule("refreshed", &tag);
    refreshed["spec"]["transforms"][0]["refreshInterval"] = json!("2s");
    h.apply(refreshed).await;
    h.apply(filter_rule("pinned", &tag)).await;
    wait_filtered(&h, "refreshed", "k1").await;
    wait_filtered(&h, "pinned", "k1").await;
    assert_eq!(pins(&h, "refreshed").await[0].1, first);

    // The same component pushed again with a description: another manifest under the same tag.
    let pusher = Oci::new(OciSettings {
        cache_dir: dir.path().join("pusher"),
        ..Default::default()
    })
    .unwrap();
    let reference: OciReference = tag.parse().unwrap();
    let annotations = [(
        "org.opencontainers.image.description".to_owned(),
        "filter-keys, pushed again".to_owned(),
    )]
    .into();
    let second = pusher
        .push(&filter, &reference, &Credentials::Anonymous, annotations)
        .await
        .unwrap();
    assert_ne!(first, second);
    eventually("the refreshed rule pins the moved tag", || async {
        (pins(&h, "refreshed").await[0].1 == second).then_some(())
    })
    .await;
    assert_eq!(
        pins(&h, "pinned").await[0].1,
        first,
        "no refreshInterval: the pin stays"
    );
}

/// A hostile registry's token realm, pointing at a sidecar on loopback in plain HTTP or at the
/// cloud metadata service, reaches the rule's status as `TokenRealmRefused`, naming the realm;
/// the sidecar gets not even a connection, and nothing is written.
// Multi-threaded: the scripted servers answer while the controller runs beside the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_token_realm_is_refused_in_the_rules_status() {
    use mimeo_envtest::{Answer, Scripted};
    let sidecar = Scripted::start(|_| Answer::new(200).body(r#"{"token": "stolen"}"#))
        .await
        .unwrap();
    let realms = [
        format!("http://127.0.0.1:{}/token", sidecar.port()),
        "https://169.254.169.254/latest/api/token".to_owned(),
    ];
    let mut hostiles = Vec::new();
    for realm in &realms {
        let challenge = format!(r#"Bearer realm="{realm}",service="hostile""#);
        hostiles.push(
            Scripted::start_tls(move |_| Answer::new(401).header("WWW-Authenticate", &challenge))
                .await
                .unwrap(),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let mut settings = config(dir.path(), OciPolicy::default());
    // Each registry is reached over HTTPS under its own CA, as a registry elsewhere would be.
    let cas: Vec<_> = hostiles
        .iter()
        .map(|h| {
            format!("{}={}", h.host(), h.ca_path().unwrap().display())
                .parse()
                .unwrap()
        })
        .collect();
    settings.oci.trust = RegistryTrust::load(&cas, &[]).unwrap();
    let h = Harness::start_with(settings).await;
    setup(&h).await;

    for (index, (hostile, realm)) in hostiles.iter().zip(&realms).enumerate() {
        let name = format!("hostile-{index}");
        h.apply(filter_rule(
            &name,
            &format!("oci://{}/plugins/filter-keys:1.0", hostile.host()),
        ))
        .await;
        let rule = h
            .wait_ready("platform", &name, "False", "TokenRealmRefused")
            .await;
        let message = rule.status.unwrap().conditions[0].message.clone();
        assert!(
            message.contains(&format!("named the token service {realm}")),
            "{message}"
        );
        assert!(!hostile.requests().is_empty(), "the registry was asked");
        assert!(h.secrets("tenant").get_opt(&name).await.unwrap().is_none());
        eprintln!("{name}: {message}");
    }
    assert_eq!(sidecar.connections(), 0, "the sidecar was reached");
}

/// The controller's own registry credentials serve a ClusterSyncRule, not a SyncRule (which is
/// refused, with a message saying why and what to do), until the installation allows them for
/// SyncRules too.
#[tokio::test]
async fn the_controllers_credentials_serve_sync_rules_only_when_the_installation_says_so() {
    let registry = Registry::start_with_auth("puller", "pull-secret-distinctive")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let host = registry.host();
    registry
        .push_wasm("plugins/filter-keys:1.0", &plugin_bytes("filter-keys.wasm"))
        .unwrap();
    let docker_config = format!(
        r#"{{"auths": {{"{host}": {{"username": "puller", "password": "pull-secret-distinctive"}}}}}}"#
    );
    let dir = tempfile::tempdir().unwrap();
    let policy = OciPolicy {
        docker_config: Some(docker_config.into_bytes()),
        ..OciPolicy::default()
    };
    let mut h = Harness::start_with(config(dir.path(), policy)).await;
    setup(&h).await;
    let plugin = format!("oci://{host}/plugins/filter-keys:1.0");

    h.apply(filter_rule("tenant-rule", &plugin)).await;
    let refused = h
        .wait_ready("platform", "tenant-rule", "False", "RegistryUnauthorized")
        .await;
    let message = refused.status.unwrap().conditions[0].message.clone();
    assert!(
        message.contains("--plugin-registry-config-for-sync-rules") && message.contains("pluginPullSecrets"),
        "{message}"
    );
    assert!(!message.contains("pull-secret-distinctive"), "{message}");
    eprintln!("SyncRule: {message}");

    h.apply(
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule",
                   "metadata": {"name": "platform-rule"},
                   "spec": {"source": {"kind": "Secret", "namespace": "platform", "name": "creds"},
                            "targets": [{"namespace": "tenant", "name": "platform-rule"}],
                            "transforms": [{"plugin": plugin, "config": {"include": ["keep"]}}]}}),
    )
    .await;
    wait_filtered(&h, "platform-rule", "k1").await;

    h.stop_controller().await;
    h.config_mut().oci_policy.docker_config_for_sync_rules = true;
    // A fresh artifact cache: the ClusterSyncRule's download must not serve the SyncRule.
    h.config_mut().oci.cache_dir = dir.path().join("artifacts-2");
    h.start_controller().await;
    wait_filtered(&h, "tenant-rule", "k1").await;
    h.wait_ready("platform", "tenant-rule", "True", "Synced").await;
}

/// filter-keys pushed as `plugins/filter-keys:stable`, and a rule `name` running it by tag with a
/// `refreshInterval` of 2 s, once its first copy is there; returns the digest it pinned.
async fn rule_refreshing_every_2s(h: &Harness, registry: &Registry, name: &str) -> String {
    let pinned = registry
        .push_wasm("plugins/filter-keys:stable", &plugin_bytes("filter-keys.wasm"))
        .unwrap();
    let mut rule = filter_rule(
        name,
        &format!("oci://{}/plugins/filter-keys:stable", registry.host()),
    );
    rule["spec"]["transforms"][0]["refreshInterval"] = json!("2s");
    h.apply(rule).await;
    wait_filtered(h, name, "k1").await;
    pinned
}

/// A registry outage does not stop rotation: once a `refreshInterval` is due while the registry
/// does not answer, the digest pinned before runs on from the caches, the copies follow their
/// source, and a `PluginsRefreshed=False` condition says the tag was not resolved again.
#[tokio::test]
async fn a_registry_outage_keeps_the_pinned_plugin_running() {
    let registry = Registry::start().await.unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::start_with(config(dir.path(), OciPolicy::default())).await;
    setup(&h).await;
    let pinned = rule_refreshing_every_2s(&h, &registry, "refreshed").await;

    drop(registry);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rotated = Instant::now();
    h.put_secret("platform", "creds", &[("keep", "k2"), ("drop", "d2")])
        .await;
    wait_filtered(&h, "refreshed", "k2").await;
    println!(
        "with the registry down and the tag due, a rotation reached the copy in {:?}",
        rotated.elapsed()
    );
    let condition = eventually("PluginsRefreshed=False", || async {
        let status = h.rule("platform", "refreshed").await?.status?;
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
        assert_eq!(ready.status, "True", "{ready:?}");
        status
            .conditions
            .into_iter()
            .find(|c| c.type_ == "PluginsRefreshed" && c.status == "False")
    })
    .await;
    assert_eq!(condition.reason, "RegistryUnreachable");
    assert!(
        condition
            .message
            .contains(&format!("the pinned {pinned} runs on")),
        "{}",
        condition.message
    );
    assert_eq!(pins(&h, "refreshed").await[0].1, pinned);
}

/// A tag moved to an artifact the rule refuses (rename-keys, which refuses filter-keys's config):
/// the status records what the tag resolved to, when, and why it is refused, and the Ready
/// message names the digest.
#[tokio::test]
async fn a_tag_moved_to_a_refused_artifact_is_recorded_as_refused() {
    let registry = Registry::start().await.unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::start_with(config(dir.path(), OciPolicy::default())).await;
    setup(&h).await;
    let first = rule_refreshing_every_2s(&h, &registry, "moving").await;
    assert_eq!(pins(&h, "moving").await[0].1, first);

    let moved = registry
        .push_wasm("plugins/filter-keys:stable", &plugin_bytes("rename-keys.wasm"))
        .unwrap();
    let pushed = k8s_openapi::jiff::Timestamp::now();
    let refused = h
        .wait_ready("platform", "moving", "False", "PluginUnavailable")
        .await
        .status
        .unwrap();
    let pin = &refused.plugins[0];
    assert_eq!(pin.digest, moved, "the status records what the tag resolved to");
    let resolved = pin.resolved_at.as_ref().expect("when it was resolved").0;
    assert!(
        resolved >= pushed - std::time::Duration::from_secs(1),
        "{resolved} vs {pushed}"
    );
    assert!(
        pin.refused
            .as_deref()
            .is_some_and(|r| r.contains("the plugin refused its config")),
        "{pin:?}"
    );
    let message = &refused.conditions[0].message;
    assert!(
        message.contains(&format!("(the tag resolved to {moved} at ")),
        "{message}"
    );
    // The copy made by the accepted artifact stays.
    wait_filtered(&h, "moving", "k1").await;
}
