//! Attacks by a tenant, against a real apiserver. The controller holds only the Helm chart's RBAC,
//! and the tenant is a real identity (a ServiceAccount with a token of its own) whose Role allows
//! Secrets, ConfigMaps and `SyncRule`s in its own namespace and nothing else. Each attack is made
//! as the tenant would make it and must fail with the stated condition; each has its positive
//! twin, the legitimate use, which must still work.

use crate::harness;

use harness::{Harness, WAIT, apply_as, eventually, secret_value, tenant_client};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use mimeo::api::{RemoteCluster, SyncRule};
use mimeo::controller::ControllerConfig;
use mimeo_envtest::ControlPlane;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const TENANT: &str = "tenant-a";

/// A control plane with the controller under the chart's RBAC, namespaces `mimeo-system` and
/// `tenant-a`, and the tenant's client.
async fn start(config: ControllerConfig) -> (Harness, Client) {
    let h = Harness::start_with_chart_rbac(config).await;
    h.namespace(TENANT, &[("team", "a")], &[]).await;
    let tenant = tenant_client(&h, TENANT).await;
    // The identity is what the tests say it is: it may not act beyond its namespace.
    let forbidden = |r: kube::Result<()>| matches!(r, Err(kube::Error::Api(e)) if e.code == 403);
    assert!(forbidden(
        apply_as(
            &tenant,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x", "namespace": "mimeo-system"}})
        )
        .await
    ));
    assert!(forbidden(
        apply_as(
            &tenant,
            json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster", "metadata": {"name": "x"},
                   "spec": {"kubeconfigSecretRef": {"namespace": TENANT, "name": "k"}}})
        )
        .await
    ));
    (h, tenant)
}

fn secret(name: &str, type_: &str, annotations: Value, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "type": type_,
           "metadata": {"name": name, "namespace": TENANT, "annotations": annotations},
           "stringData": data})
}

fn sync_rule(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
           "metadata": {"name": name, "namespace": TENANT}, "spec": spec})
}

/// A TCP listener on loopback that counts the connections it is offered and answers none.
async fn listener() -> (u16, Arc<AtomicUsize>) {
    let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = socket.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = socket.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            drop(stream);
        }
    });
    (port, seen)
}

async fn remote_ready(h: &Harness, name: &str) -> Option<(String, String, String)> {
    let rc = Api::<RemoteCluster>::all(h.client.clone()).get(name).await.ok()?;
    let c = rc.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
    Some((c.status, c.reason, c.message))
}

/// The tenant's SyncRule's Ready condition, as the tenant reads it.
async fn tenant_rule_ready(tenant: &Client, name: &str) -> Option<(String, String, String)> {
    let rule = Api::<SyncRule>::namespaced(tenant.clone(), TENANT)
        .get(name)
        .await
        .ok()?;
    let c = rule.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
    Some((c.status, c.reason, c.message))
}

async fn wait_tenant_rule(tenant: &Client, name: &str, status: &str, reason: &str) -> String {
    eventually(&format!("SyncRule {name} Ready={status} {reason}"), || async {
        let (s, r, m) = tenant_rule_ready(tenant, name).await?;
        (s == status && r == reason).then_some(m)
    })
    .await
}

/// 1. A kubeconfig Secret in the tenant's namespace (as Cluster API writes them) cannot make
/// mimeo send its own ServiceAccount token, read its files, skip TLS checks, talk in clear text
/// or go through a proxy: each is refused by name and the server it names hears nothing at all.
#[tokio::test]
async fn a_kubeconfig_cannot_make_mimeo_send_its_credentials_or_read_its_files() {
    let (h, tenant) = start(ControllerConfig::default()).await;
    let (port, heard) = listener().await;
    // Stands for mimeo's own ServiceAccount token: a file on mimeo's file system.
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "mimeo-own-service-account-token").unwrap();
    let ca = {
        let b64 = |yaml: &str| {
            yaml.lines()
                .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
                .map(str::to_owned)
        };
        b64(h.plane.kubeconfig_yaml()).expect("the envtest kubeconfig carries its CA inline")
    };
    let server = format!("https://127.0.0.1:{port}");
    let kubeconfig = |cluster: String, user: String| {
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {cluster}}}]\n\
             contexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n\
             users: [{{name: u, user: {user}}}]\n"
        )
    };
    let https = format!("{{server: '{server}', certificate-authority-data: {ca}}}");
    // (name, kubeconfig, what the refusal must name)
    let attacks = [
        (
            "token-file",
            kubeconfig(
                https.clone(),
                format!("{{tokenFile: '{}'}}", token_file.display()),
            ),
            "tokenFile",
        ),
        (
            "skip-verify",
            kubeconfig(
                format!("{{server: '{server}', insecure-skip-tls-verify: true}}"),
                "{token: inline-token}".into(),
            ),
            "insecure-skip-tls-verify",
        ),
        (
            "plain-http",
            kubeconfig(
                format!("{{server: 'http://127.0.0.1:{port}'}}"),
                "{token: inline-token}".into(),
            ),
            "http://",
        ),
        (
            "client-cert-files",
            kubeconfig(
                https.clone(),
                format!(
                    "{{client-certificate: '{0}', client-key: '{0}'}}",
                    token_file.display()
                ),
            ),
            "client-certificate",
        ),
        (
            "ca-file",
            kubeconfig(
                format!(
                    "{{server: '{server}', certificate-authority: '{}'}}",
                    token_file.display()
                ),
                "{token: inline-token}".into(),
            ),
            "certificate-authority",
        ),
        (
            "proxy",
            kubeconfig(
                format!(
                    "{{server: 'https://10.255.255.1:6443', certificate-authority-data: {ca}, proxy-url: 'http://127.0.0.1:{port}'}}"
                ),
                "{token: inline-token}".into(),
            ),
            "proxy-url",
        ),
    ];
    h.namespace("apps", &[], &[]).await;
    for (name, text, _) in &attacks {
        apply_as(
            &tenant,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": format!("{name}-kubeconfig"), "namespace": TENANT},
                   "stringData": {"value": text}}),
        )
        .await
        .unwrap();
        // The platform registers the tenant's cluster, as it would a Cluster API one.
        h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster",
                       "metadata": {"name": name, "labels": {"hostile": "yes"}},
                       "spec": {"kubeconfigSecretRef": {"namespace": TENANT, "name": format!("{name}-kubeconfig")}}}))
            .await;
    }
    // A platform rule that writes into every such cluster: the fleet's connections refuse too.
    h.put_secret("mimeo-system", "pull", &[("k", "v")]).await;
    h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule", "metadata": {"name": "fan-out"},
                   "spec": {"source": {"kind": "Secret", "namespace": "mimeo-system", "name": "pull"},
                            "targets": [{"clusterSelector": {"matchLabels": {"hostile": "yes"}}, "namespace": "apps"}]}}))
        .await;
    for (name, _, field) in &attacks {
        let message = eventually(&format!("RemoteCluster {name} refused"), || async {
            let (status, reason, message) = remote_ready(&h, name).await?;
            (status == "False" && reason == "InvalidKubeconfig").then_some(message)
        })
        .await;
        assert!(message.contains(field), "{name}: {message}");
    }
    let rule = eventually("the fan-out rule has looked at every hostile cluster", || async {
        let rule = Api::<mimeo::api::ClusterSyncRule>::all(h.client.clone())
            .get("fan-out")
            .await
            .ok()?;
        let problems = rule.status?.problems;
        (problems.len() == attacks.len()).then_some(problems)
    })
    .await;
    for copy in &rule {
        assert_ne!(copy.state, mimeo::api::CopyState::Synced, "{copy:?}");
        assert!(
            copy.message
                .as_deref()
                .unwrap_or_default()
                .contains("InvalidKubeconfig"),
            "{copy:?}"
        );
    }
    // Give any request time to arrive: nothing may.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        heard.load(Ordering::SeqCst),
        0,
        "the attacker's server was contacted"
    );

    // The positive twin: an inline kubeconfig of a real cluster is used.
    let other = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    apply_as(
        &tenant,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "real-kubeconfig", "namespace": TENANT},
               "stringData": {"value": other.kubeconfig_yaml()}}),
    )
    .await
    .unwrap();
    h.apply(
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster", "metadata": {"name": "real"},
                   "spec": {"kubeconfigSecretRef": {"namespace": TENANT, "name": "real-kubeconfig"}}}),
    )
    .await;
    eventually("the real cluster connects", || async {
        let (status, reason, _) = remote_ready(&h, "real").await?;
        (status == "True" && reason == "Connected").then_some(())
    })
    .await;
}

/// The tenant's own plugin, in a ConfigMap of its namespace (what `configmap://` allows it).
async fn tenant_plugin(tenant: &Client) -> String {
    let wasm = std::fs::read(harness::plugin_dir().join("misbehave.wasm")).unwrap();
    let plugin: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "plugins", "namespace": TENANT},
        "binaryData": {"misbehave.wasm": k8s_openapi::ByteString(wasm)},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(tenant.clone(), TENANT)
        .create(&PostParams::default(), &plugin)
        .await
        .unwrap();
    format!("configmap://{TENANT}/plugins/misbehave.wasm")
}

fn plugin_config() -> ControllerConfig {
    ControllerConfig {
        plugin_dir: Some(harness::plugin_dir()),
        ..Default::default()
    }
}

/// A rule copying `source` to `target` in the tenant's own namespace, through the tenant's plugin.
fn merging_rule(name: &str, plugin: &str, source: &str, target: &str, patch: Value) -> Value {
    sync_rule(
        name,
        json!({"source": {"kind": "Secret", "name": source},
               "targets": [{"namespace": TENANT, "name": target}],
               "transforms": [{"plugin": plugin, "config": {"do": "merge", "patch": patch}}]}),
    )
}

/// Every Secret of a type that Kubernetes fills with a ServiceAccount's token, anywhere.
async fn token_secrets(h: &Harness) -> Vec<String> {
    Api::<Secret>::all(h.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|s| s.type_.as_deref() == Some("kubernetes.io/service-account-token"))
        .map(|s| format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any()))
        .collect()
}

/// 2. A plugin cannot turn a copy into a ServiceAccount token, hand it to Helm or Argo CD, or
/// give it owners or finalizers; a source that is a token or a Helm release is never copied.
#[tokio::test]
async fn a_plugin_cannot_make_a_token_or_hand_a_copy_to_another_owner() {
    let (h, tenant) = start(plugin_config()).await;
    let plugin = tenant_plugin(&tenant).await;
    h.apply(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "app", "namespace": TENANT}}))
        .await;
    apply_as(
        &tenant,
        secret("creds", "Opaque", json!({}), json!({"password": "s3cret"})),
    )
    .await
    .unwrap();

    let attacks = [
        (
            "to-token",
            json!({"type": "kubernetes.io/service-account-token",
                   "metadata": {"annotations": {"kubernetes.io/service-account.name": "app"}}}),
            "type",
        ),
        (
            "to-owner",
            json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ServiceAccount", "name": "app", "uid": "0"}]}}),
            "ownerReferences",
        ),
        (
            "to-finalizer",
            json!({"metadata": {"finalizers": ["example.com/hold"]}}),
            "finalizers",
        ),
        (
            "to-helm",
            json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": "Helm"},
                                "annotations": {"meta.helm.sh/release-name": "r"}}}),
            "app.kubernetes.io/managed-by",
        ),
        (
            "to-argo",
            json!({"metadata": {"annotations": {"argocd.argoproj.io/tracking-id": "app:/Secret:tenant-a/x"}}}),
            "argocd.argoproj.io/tracking-id",
        ),
        (
            "sa-annotation",
            json!({"metadata": {"annotations": {"kubernetes.io/service-account.name": "app"}}}),
            "kubernetes.io/service-account.name",
        ),
    ];
    for (name, patch, _) in &attacks {
        apply_as(&tenant, merging_rule(name, &plugin, "creds", name, patch.clone()))
            .await
            .unwrap();
    }
    // Sources mimeo never copies, whatever a rule says.
    apply_as(
        &tenant,
        secret(
            "app-token",
            "kubernetes.io/service-account-token",
            json!({"kubernetes.io/service-account.name": "app"}),
            json!({"token": "not-a-real-token"}),
        ),
    )
    .await
    .unwrap();
    apply_as(
        &tenant,
        secret(
            "sh.helm.release.v1.r.v1",
            "helm.sh/release.v1",
            json!({}),
            json!({"release": "x"}),
        ),
    )
    .await
    .unwrap();
    for (name, source) in [
        ("copy-token", "app-token"),
        ("copy-release", "sh.helm.release.v1.r.v1"),
    ] {
        apply_as(
            &tenant,
            sync_rule(
                name,
                json!({"source": {"kind": "Secret", "name": source}, "targets": [{"namespace": TENANT, "name": name}]}),
            ),
        )
        .await
        .unwrap();
    }

    for (name, _, field) in &attacks {
        let message = wait_tenant_rule(&tenant, name, "False", "PluginFailed").await;
        assert!(message.contains(field), "{name}: {message}");
    }
    for name in ["copy-token", "copy-release"] {
        let message = wait_tenant_rule(&tenant, name, "False", "Refused").await;
        assert!(
            message.contains("mimeo never writes a Secret of type"),
            "{name}: {message}"
        );
    }
    let secrets = Api::<Secret>::namespaced(h.client.clone(), TENANT);
    for (name, ..) in &attacks {
        assert!(
            secrets.get_opt(name).await.unwrap().is_none(),
            "{name} was written"
        );
    }
    for name in ["copy-token", "copy-release"] {
        assert!(
            secrets.get_opt(name).await.unwrap().is_none(),
            "{name} was written"
        );
    }
    assert_eq!(
        token_secrets(&h).await,
        [format!("{TENANT}/app-token")],
        "only the tenant's own"
    );

    // The positive twin: a plugin may add data and labels of its own.
    apply_as(
        &tenant,
        merging_rule(
            "fine",
            &plugin,
            "creds",
            "fine",
            json!({"metadata": {"labels": {"team": "a"}}, "data": {"extra": "eA=="}}),
        ),
    )
    .await
    .unwrap();
    wait_tenant_rule(&tenant, "fine", "True", "Synced").await;
    let copy = secrets.get("fine").await.unwrap();
    assert_eq!(copy.labels().get("team").map(String::as_str), Some("a"));
    assert_eq!(secret_value(&copy, "extra").as_deref(), Some("x"));
    assert_eq!(secret_value(&copy, "password").as_deref(), Some("s3cret"));
    assert!(copy.metadata.owner_references.is_none());
}

/// Every Event note in the tenant's namespace, as the standard `view` role would read them.
async fn event_notes(h: &Harness) -> Vec<(String, String)> {
    Api::<Event>::namespaced(h.client.clone(), TENANT)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// 3. Text a plugin chooses (a skip reason, an error, a refused config) reaches the rule's status
/// but never an Event, which more people may read than may read the source it was made from.
#[tokio::test]
async fn a_plugin_cannot_publish_a_source_in_events() {
    let (h, tenant) = start(plugin_config()).await;
    let plugin = tenant_plugin(&tenant).await;
    // What the source holds, as its copy's `data` shows it (base64).
    let leaked = "VE9QLVNFQ1JFVA==";
    apply_as(
        &tenant,
        secret("creds", "Opaque", json!({}), json!({"password": "TOP-SECRET"})),
    )
    .await
    .unwrap();
    let chain = |config: Value| {
        let target = format!("copy-{}", config["do"].as_str().unwrap_or_default());
        json!({"source": {"kind": "Secret", "name": "creds"},
               "targets": [{"namespace": TENANT, "name": target}],
               "transforms": [{"plugin": plugin, "config": config}]})
    };
    apply_as(
        &tenant,
        sync_rule(
            "leak-error",
            chain(json!({"do": "error", "say": "leaked {data}"})),
        ),
    )
    .await
    .unwrap();
    apply_as(
        &tenant,
        sync_rule("leak-skip", chain(json!({"do": "skip", "say": "leaked {data}"}))),
    )
    .await
    .unwrap();
    apply_as(
        &tenant,
        sync_rule(
            "leak-config",
            chain(json!({"do": "error", "during": "validate-config"})),
        ),
    )
    .await
    .unwrap();

    let failed = wait_tenant_rule(&tenant, "leak-error", "False", "PluginFailed").await;
    assert!(
        failed.contains(leaked),
        "the status keeps the plugin's message: {failed}"
    );
    eventually("the skip is in the status", || async {
        let rule = Api::<SyncRule>::namespaced(tenant.clone(), TENANT)
            .get("leak-skip")
            .await
            .ok()?;
        let copy = rule.status?.problems.into_iter().next()?;
        (copy.state == mimeo::api::CopyState::Skipped).then_some(())
    })
    .await;
    let config = wait_tenant_rule(&tenant, "leak-config", "False", "PluginUnavailable").await;
    assert!(config.contains("asked to fail"), "{config}");

    // The events about each: mimeo's own words, none of the plugin's.
    let notes = eventually("events about all three rules", || async {
        let notes = event_notes(&h).await;
        let has = |reason: &str| notes.iter().any(|(r, _)| r == reason);
        (has("PluginFailed") && has("Skipped") && has("PluginUnavailable")).then_some(notes)
    })
    .await;
    for (reason, note) in &notes {
        assert!(
            !note.contains(leaked) && !note.contains("leaked"),
            "{reason}: {note}"
        );
        assert!(!note.contains("asked to fail"), "{reason}: {note}");
    }
    let note = |reason: &str| notes.iter().find(|(r, _)| r == reason).unwrap().1.clone();
    assert!(
        note("PluginFailed").contains("the plugin reported an error"),
        "{notes:?}"
    );
    assert!(
        note("Skipped").contains("skipped by plugin configmap://"),
        "{notes:?}"
    );
    assert!(
        note("PluginUnavailable").contains("the message is in the rule's Ready condition"),
        "{notes:?}"
    );
}

/// Registers a second control plane as `RemoteCluster` b, which the platform lets the SyncRules
/// of team a use (`allowedNamespaces`), and makes there a namespace of the tenant's name that
/// belongs to someone else. Returns the plane (kept alive by the caller) and a client of it.
async fn cluster_b_for_team_a(h: &Harness) -> (ControlPlane, Client) {
    let b = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let b_client = b.client().await.unwrap();
    h.register_cluster("b", b.kubeconfig_yaml(), json!({})).await;
    // The platform lets SyncRules of team a use cluster b.
    Api::<RemoteCluster>::all(h.client.clone())
        .patch(
            "b",
            &PatchParams::apply("test").force(),
            &Patch::Apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster",
                                 "metadata": {"name": "b"},
                                 "spec": {"kubeconfigSecretRef": {"namespace": "mimeo-system", "name": "b-kubeconfig"},
                                          "allowedNamespaces": {"matchLabels": {"team": "a"}}}})),
        )
        .await
        .unwrap();
    // In b, a namespace of the same name belongs to someone else.
    Api::<Namespace>::all(b_client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": TENANT}})).unwrap(),
        )
        .await
        .unwrap();
    (b, b_client)
}

/// 4. A `SyncRule` reads another cluster's namespace of its own name only where the objects'
/// owner there consents, however the cluster's `allowedNamespaces` reads.
#[tokio::test]
async fn reading_another_cluster_needs_the_owners_consent() {
    let (h, tenant) = start(ControllerConfig::default()).await;
    let (_b, b_client) = cluster_b_for_team_a(&h).await;
    let theirs = Api::<ConfigMap>::namespaced(b_client.clone(), TENANT);
    for name in ["settings", "private"] {
        theirs
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name, "labels": {"pick": "me"}},
                                               "data": {"k": format!("{name}-value")}}))
                .unwrap(),
            )
            .await
            .unwrap();
    }
    apply_as(
        &tenant,
        sync_rule(
            "pull",
            json!({"source": {"kind": "ConfigMap", "cluster": "b", "selector": {"matchLabels": {"pick": "me"}}},
                   "targets": [{"namespace": TENANT}]}),
        ),
    )
    .await
    .unwrap();
    let message = wait_tenant_rule(&tenant, "pull", "False", "SourceNotShared").await;
    assert!(
        message.contains("2 objects the selector matches are not shared"),
        "{message}"
    );
    assert!(message.contains("mimeo.dev/share-with=tenant-a"), "{message}");
    assert!(
        !message.contains("private"),
        "someone else's names are not shown: {message}"
    );
    let ours = Api::<ConfigMap>::namespaced(h.client.clone(), TENANT);
    harness::stays(
        "nothing is copied without consent",
        Duration::from_secs(2),
        || async {
            ours.get_opt("settings").await.unwrap().is_none()
                && ours.get_opt("private").await.unwrap().is_none()
        },
    )
    .await;

    // The positive twin: the owner shares one object; it alone is copied.
    theirs
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"mimeo.dev/share-with": TENANT}}})),
        )
        .await
        .unwrap();
    eventually("the shared object is copied", || async {
        let copy = ours.get_opt("settings").await.unwrap()?;
        (copy.data?.get("k").map(String::as_str) == Some("settings-value")).then_some(())
    })
    .await;
    // The copy is written before the status that counts it: wait for the status to say so.
    eventually("the status counting the one object still not shared", || async {
        let (status, reason, message) = tenant_rule_ready(&tenant, "pull").await?;
        (status == "False"
            && reason == "SourceNotShared"
            && message.contains("1 object the selector matches is not shared"))
        .then_some(())
    })
    .await;
    assert!(ours.get_opt("private").await.unwrap().is_none());
    // Consent withdrawn: the copy goes.
    theirs
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"mimeo.dev/share-with": null}}})),
        )
        .await
        .unwrap();
    eventually("the copy goes with the consent", || async {
        ours.get_opt("settings").await.unwrap().is_none().then_some(())
    })
    .await;
}

/// 4b. An input in another cluster is read under the same consent as a source there: a tenant's
/// rule whose source is shared cannot use it to read an object beside it that is not.
#[tokio::test]
async fn inputs_in_another_cluster_need_the_owners_consent_too() {
    let (h, tenant) = start(ControllerConfig {
        plugin_dir: Some(harness::plugin_dir()),
        ..Default::default()
    })
    .await;
    let (_b, b_client) = cluster_b_for_team_a(&h).await;
    let theirs = Api::<ConfigMap>::namespaced(b_client.clone(), TENANT);
    for (name, shared) in [("settings", true), ("private", false)] {
        let annotations = if shared {
            json!({"mimeo.dev/share-with": TENANT})
        } else {
            json!({})
        };
        theirs
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name, "annotations": annotations},
                                               "data": {"k": format!("{name}-value")}}))
                .unwrap(),
            )
            .await
            .unwrap();
    }
    apply_as(
        &tenant,
        sync_rule(
            "pull",
            json!({"source": {"kind": "ConfigMap", "cluster": "b", "name": "settings"},
                   "inputs": [{"name": "private", "from": {"kind": "ConfigMap", "name": "private"}}],
                   "targets": [{"namespace": TENANT}],
                   "transforms": [{"plugin": "file://template.wasm",
                                   "config": {"stringData": {"leaked": "{{ inputs.private.data.k }}"}}}]}),
        ),
    )
    .await
    .unwrap();
    let message = wait_tenant_rule(&tenant, "pull", "False", "InputNotShared").await;
    assert!(
        message.contains("input private (ConfigMap tenant-a/private in RemoteCluster b)"),
        "{message}"
    );
    assert!(message.contains("mimeo.dev/share-with=tenant-a"), "{message}");
    assert!(!message.contains("private-value"), "{message}");
    let ours = Api::<ConfigMap>::namespaced(h.client.clone(), TENANT);
    harness::stays(
        "nothing is copied without the input's consent",
        Duration::from_secs(2),
        || async { ours.get_opt("settings").await.unwrap().is_none() },
    )
    .await;

    // The owner shares it: the copy is made from both.
    theirs
        .patch(
            "private",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"mimeo.dev/share-with": TENANT}}})),
        )
        .await
        .unwrap();
    eventually("the copy made with the shared input", || async {
        let copy = ours.get_opt("settings").await.unwrap()?;
        let data = copy.data?;
        (data.get("leaked").map(String::as_str) == Some("private-value")
            && data.get("k").map(String::as_str) == Some("settings-value"))
        .then_some(())
    })
    .await;
    wait_tenant_rule(&tenant, "pull", "True", "Synced").await;
}

/// 6. A first write never merges into an object that appeared after mimeo looked: it is created
/// with a create-only request, and an object found there is handed back to decide about again.
#[tokio::test]
async fn a_first_write_never_merges_into_an_object_made_meanwhile() {
    use mimeo::api::{MetadataPolicy, SourceRef};
    use mimeo::controller::write::{Written, write};
    use mimeo::sync::decide::Write;
    use mimeo::sync::desired::{CopyTarget, desired_copy};
    use mimeo::sync::ownership::RuleKey;
    let (h, tenant) = start(ControllerConfig::default()).await;
    let source = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                        "metadata": {"name": "creds", "namespace": TENANT}, "data": {"k": "bWltZW8="}});
    let copy_of = |name: &str| {
        desired_copy(
            &RuleKey::sync_rule(TENANT, "r"),
            &MetadataPolicy::default(),
            &source,
            &SourceRef {
                namespace: Some(TENANT.into()),
                name: "creds".into(),
            },
            CopyTarget {
                cluster: None,
                namespace: Some(TENANT.into()),
                name: name.into(),
            },
        )
    };
    let resource = kube::core::ApiResource::erase::<Secret>(&());
    // The tenant creates an object in the place mimeo read as empty.
    apply_as(
        &tenant,
        secret("raced", "Opaque", json!({}), json!({"k": "tenant"})),
    )
    .await
    .unwrap();
    let written = write(&h.client, &resource, &copy_of("raced"), None, Write::Create)
        .await
        .unwrap();
    let Written::Raced(there) = written else {
        panic!("the create went through: {written:?}")
    };
    assert_eq!(there.name_any(), "raced");
    let live = h.secrets(TENANT).get("raced").await.unwrap();
    assert_eq!(
        secret_value(&live, "k").as_deref(),
        Some("tenant"),
        "not merged into"
    );
    assert!(
        !live.labels().contains_key("mimeo.dev/managed-by"),
        "not stamped as mimeo's"
    );

    // The positive twin: where nothing is, the copy is created.
    let Written::Stored(stored) = write(&h.client, &resource, &copy_of("fresh"), None, Write::Create)
        .await
        .unwrap()
    else {
        panic!("no copy created")
    };
    assert_eq!(
        stored.labels().get("mimeo.dev/managed-by").map(String::as_str),
        Some("mimeo")
    );
    let live = h.secrets(TENANT).get("fresh").await.unwrap();
    assert_eq!(secret_value(&live, "k").as_deref(), Some("mimeo"));
}

/// Removes every CEL rule from a schema, as a CRD installed without them would be.
fn strip_validations(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("x-kubernetes-validations");
            map.values_mut().for_each(strip_validations);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_validations),
        _ => {}
    }
}

/// 7. What the CRD's CEL rules refuse a `SyncRule` is refused in code too: with a CRD installed
/// without them, a tenant still reads no pull secret of another namespace and creates no namespace.
#[tokio::test]
async fn a_crd_without_its_rules_opens_nothing() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let (h, tenant) = start(plugin_config()).await;
    let crds = Api::<CustomResourceDefinition>::all(h.client.clone());
    let mut crd = serde_json::to_value(crds.get("syncrules.mimeo.dev").await.unwrap()).unwrap();
    strip_validations(&mut crd);
    crd["metadata"].as_object_mut().unwrap().remove("managedFields");
    crds.replace(
        "syncrules.mimeo.dev",
        &PostParams::default(),
        &serde_json::from_value(crd).unwrap(),
    )
    .await
    .unwrap();
    apply_as(&tenant, secret("creds", "Opaque", json!({}), json!({"k": "v"})))
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT;
    // The apiserver takes a moment to serve the new schema; until then the CEL rules refuse.
    loop {
        let accepted = apply_as(
            &tenant,
            sync_rule(
                "pull-secret",
                json!({"source": {"kind": "Secret", "name": "creds"}, "targets": [{"namespace": TENANT, "name": "c1"}],
                       "transforms": [{"plugin": "file://filter-keys.wasm", "config": {"include": ["k"]}}],
                       "pluginPullSecrets": [{"name": "pull", "namespace": "mimeo-system"}]}),
            ),
        )
        .await;
        if accepted.is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the schema without CEL rules never served: {accepted:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    apply_as(
        &tenant,
        sync_rule(
            "new-namespace",
            json!({"source": {"kind": "Secret", "name": "creds"},
                   "targets": [{"namespace": "tenant-a-new", "createNamespace": true}]}),
        ),
    )
    .await
    .unwrap();
    let message = wait_tenant_rule(&tenant, "pull-secret", "False", "NotAllowedInSyncRule").await;
    assert!(message.contains("pluginPullSecrets[].namespace"), "{message}");
    let message = wait_tenant_rule(&tenant, "new-namespace", "False", "NotAllowedInSyncRule").await;
    assert!(message.contains("createNamespace"), "{message}");
    let namespaces = Api::<Namespace>::all(h.client.clone());
    assert!(namespaces.get_opt("tenant-a-new").await.unwrap().is_none());
    let secrets = h.secrets(TENANT);
    assert!(secrets.get_opt("c1").await.unwrap().is_none());

    // The positive twin: the same rule without what a SyncRule may not do is served.
    apply_as(
        &tenant,
        sync_rule(
            "pull-secret",
            json!({"source": {"kind": "Secret", "name": "creds"}, "targets": [{"namespace": TENANT, "name": "c1"}],
                   "transforms": [{"plugin": "file://filter-keys.wasm", "config": {"include": ["k"]}}]}),
        ),
    )
    .await
    .unwrap();
    wait_tenant_rule(&tenant, "pull-secret", "True", "Synced").await;
    assert_eq!(
        secret_value(&secrets.get("c1").await.unwrap(), "k").as_deref(),
        Some("v")
    );
}

/// 5. A tenant's `oci://` reference cannot make mimeo fetch what the registry points at: a token
/// realm on loopback named by a registry elsewhere (here one reached over HTTPS under its own
/// CA) is never asked, and a registry's error body never reaches the tenant's status.
// Multi-threaded: the scripted servers answer while the controller runs beside the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_cannot_send_mimeo_to_a_sidecar_or_speak_through_the_status() {
    use mimeo::plugin::oci::{OciSettings, RegistryTrust};
    use mimeo_envtest::{Answer, Registry, Scripted};
    let sidecar = Scripted::start(|_| Answer::new(200).body(r#"{"token": "stolen"}"#))
        .await
        .unwrap();
    let challenge = format!(
        r#"Bearer realm="http://127.0.0.1:{}/token",service="hostile""#,
        sidecar.port()
    );
    let hostile = Scripted::start_tls(move |_| Answer::new(401).header("WWW-Authenticate", &challenge))
        .await
        .unwrap();
    let chatty = Scripted::start_tls(|_| Answer::new(403).body("quoted-from-the-registry-body"))
        .await
        .unwrap();
    let registry = Registry::start().await.unwrap_or_else(|e| panic!("{e}"));
    registry
        .push_wasm(
            "plugins/filter-keys:1.0",
            &std::fs::read(harness::plugin_dir().join("filter-keys.wasm")).unwrap(),
        )
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = ControllerConfig {
        oci: OciSettings {
            cache_dir: dir.path().join("artifacts"),
            ..Default::default()
        },
        ..Default::default()
    };
    config.plugin_host.cache_dir = dir.path().join("compiled");
    let cas: Vec<_> = [&hostile, &chatty]
        .iter()
        .map(|s| {
            format!("{}={}", s.host(), s.ca_path().unwrap().display())
                .parse()
                .unwrap()
        })
        .collect();
    config.oci.trust = RegistryTrust::load(&cas, &[]).unwrap();
    let (h, tenant) = start(config).await;
    apply_as(
        &tenant,
        secret("creds", "Opaque", json!({}), json!({"keep": "k", "drop": "d"})),
    )
    .await
    .unwrap();
    let rule = |name: &str, registry: String| {
        sync_rule(
            name,
            json!({"source": {"kind": "Secret", "name": "creds"},
                   "targets": [{"namespace": TENANT, "name": name}],
                   "transforms": [{"plugin": format!("oci://{registry}/plugins/filter-keys:1.0"),
                                   "config": {"include": ["keep"]}}]}),
        )
    };
    apply_as(&tenant, rule("via-hostile", hostile.host()))
        .await
        .unwrap();
    apply_as(&tenant, rule("via-chatty", chatty.host()))
        .await
        .unwrap();
    apply_as(&tenant, rule("via-registry", registry.host()))
        .await
        .unwrap();

    let refused = wait_tenant_rule(&tenant, "via-hostile", "False", "TokenRealmRefused").await;
    assert!(
        refused.contains(&format!("127.0.0.1:{}", sidecar.port())),
        "{refused}"
    );
    let unauthorized = wait_tenant_rule(&tenant, "via-chatty", "False", "RegistryUnauthorized").await;
    assert!(
        !unauthorized.contains("quoted-from-the-registry-body"),
        "{unauthorized}"
    );
    assert!(unauthorized.contains("403"), "{unauthorized}");
    // The positive twin: the platform's registry serves the tenant's plugin.
    wait_tenant_rule(&tenant, "via-registry", "True", "Synced").await;
    let copy = h.secrets(TENANT).get("via-registry").await.unwrap();
    assert_eq!(secret_value(&copy, "keep").as_deref(), Some("k"));
    assert_eq!(secret_value(&copy, "drop"), None);
    for name in ["via-hostile", "via-chatty"] {
        assert!(h.secrets(TENANT).get_opt(name).await.unwrap().is_none(), "{name}");
    }
    assert!(!hostile.requests().is_empty(), "the hostile registry was asked");
    assert_eq!(sidecar.connections(), 0, "the sidecar was reached");
    let notes = event_notes(&h).await;
    assert!(
        notes
            .iter()
            .all(|(_, n)| !n.contains("quoted-from-the-registry-body")),
        "{notes:?}"
    );
}

/// Creates an object as `client` would with `kubectl create`.
async fn create_as(client: &Client, namespace: &str, object: Value) {
    let secret: Secret = serde_json::from_value(object).unwrap();
    Api::<Secret>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// The Events about a rule: (reason, note).
async fn events_of(h: &Harness, namespace: &str, rule: &str) -> Vec<(String, String)> {
    Api::<Event>::namespaced(h.client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(rule))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// 3. Tenant C writes mimeo's marks, even a real copy's seal, on Secrets of its own, naming
/// tenant A's rule: mimeo neither deletes them as A's leftovers nor takes one at a copy's place
/// for A's copy, says nothing of them in A's Events, and is not woken by them. The twin: A's real
/// copies rotate, and go when A's rule no longer wants them.
#[tokio::test]
async fn marks_anyone_can_write_do_not_make_a_copy() {
    let (h, tenant) = start(ControllerConfig::default()).await;
    h.namespace("tenant-c", &[("team", "c")], &[("mimeo.dev/accept-from", TENANT)])
        .await;
    let c = tenant_client(&h, "tenant-c").await;
    apply_as(
        &tenant,
        secret("creds", "Opaque", json!({}), json!({"password": "a1"})),
    )
    .await
    .unwrap();
    apply_as(
        &tenant,
        sync_rule(
            "share",
            json!({"source": {"kind": "Secret", "name": "creds"},
                   "targets": [{"namespace": "tenant-c"}, {"namespace": "tenant-c", "name": "wanted"}]}),
        ),
    )
    .await
    .unwrap();
    wait_tenant_rule(&tenant, "share", "True", "Synced").await;
    let c_secrets = Api::<Secret>::namespaced(c.clone(), "tenant-c");
    let real = c_secrets.get("creds").await.unwrap();
    let real_annotations = real.metadata.annotations.clone().unwrap();
    let seal = real_annotations
        .get("mimeo.dev/seal")
        .cloned()
        .unwrap_or_default();

    // C's own Secrets with A's marks: one with no seal, one with the seal moved from A's copy.
    let forged = |name: &str, seal: Option<&str>| {
        let mut annotations = json!({"mimeo.dev/rule": format!("SyncRule/{TENANT}/share"),
                                     "mimeo.dev/source": format!("Secret/{TENANT}/creds")});
        if let Some(seal) = seal {
            annotations["mimeo.dev/seal"] = json!(seal);
        }
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": name, "namespace": "tenant-c",
                            "labels": {"mimeo.dev/managed-by": "mimeo"}, "annotations": annotations},
               "stringData": {"password": "c-own"}})
    };
    create_as(&c, "tenant-c", forged("c-unsealed", None)).await;
    create_as(&c, "tenant-c", forged("c-moved-seal", Some(&seal))).await;
    // And one at a place A's rule is about to want, before A's copy is there.
    create_as(&c, "tenant-c", forged("later", Some(&seal))).await;

    // A rotation makes A's rule look: its copies rotate, C's Secrets stay as C made them.
    apply_as(
        &tenant,
        secret("creds", "Opaque", json!({}), json!({"password": "a2"})),
    )
    .await
    .unwrap();
    eventually("A's copies rotated", || async {
        let copy = c_secrets.get("wanted").await.ok()?;
        (secret_value(&copy, "password").as_deref() == Some("a2")).then_some(())
    })
    .await;
    apply_as(
        &tenant,
        sync_rule(
            "share",
            json!({"source": {"kind": "Secret", "name": "creds"},
                   "targets": [{"namespace": "tenant-c"}, {"namespace": "tenant-c", "name": "later"}]}),
        ),
    )
    .await
    .unwrap();
    let conflict = wait_tenant_rule(&tenant, "share", "False", "Conflict").await;
    assert!(
        conflict.contains("tenant-c/later") && conflict.contains("not the seal"),
        "{conflict}"
    );
    // A's copy that the rule no longer wants is deleted: the real one goes, C's stay.
    eventually("A's unwanted copy deleted", || async {
        c_secrets.get_opt("wanted").await.unwrap().is_none().then_some(())
    })
    .await;
    for name in ["c-unsealed", "c-moved-seal", "later"] {
        let there = c_secrets
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            secret_value(&there, "password").as_deref(),
            Some("c-own"),
            "{name}"
        );
    }
    let events = events_of(&h, TENANT, "share").await;
    for (reason, note) in &events {
        assert!(
            !note.contains("c-unsealed") && !note.contains("c-moved-seal"),
            "{reason}: {note}"
        );
    }
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "CopyDeleted" && n.contains("tenant-c/wanted")),
        "{events:?}"
    );

    // Touching C's forged Secrets wakes nobody: A's rule makes no request for them.
    let looks = |h: &Harness| {
        h.metrics
            .encode()
            .lines()
            .filter(|l| l.starts_with("mimeo_reconciles_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = looks(&h);
    for round in 0..5 {
        apply_as(&c, {
            let mut f = forged("c-moved-seal", Some(&seal));
            f["stringData"]["password"] = json!(format!("c-{round}"));
            f
        })
        .await
        .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(looks(&h), before, "a forged copy's changes woke a rule");
    assert!(seal.starts_with("v1."), "a copy carries its seal: {seal:?}");
}

/// 2. A tenant's immutable source, rotated as it must be (deleted and created again) seven times
/// in a minute: its copy follows each time and is never held as flapping. The twin, a copy
/// something else keeps deleting, is held: `tests/sync/flap_guard.rs`.
#[tokio::test]
async fn rotating_an_immutable_source_is_not_churn() {
    let (h, tenant) = start(ControllerConfig::default()).await;
    let immutable = |value: &str| {
        let mut s = secret("cert", "Opaque", json!({}), json!({"tls": value}));
        s["immutable"] = json!(true);
        s
    };
    apply_as(&tenant, immutable("v0")).await.unwrap();
    apply_as(
        &tenant,
        sync_rule(
            "cert",
            json!({"source": {"kind": "Secret", "name": "cert"},
                   "targets": [{"namespace": TENANT, "name": "cert-copy"}]}),
        ),
    )
    .await
    .unwrap();
    let secrets = Api::<Secret>::namespaced(tenant.clone(), TENANT);
    let copy_holds = |value: String| {
        let secrets = secrets.clone();
        async move {
            eventually(&format!("the copy holds {value}"), || async {
                let copy = secrets.get_opt("cert-copy").await.unwrap()?;
                (secret_value(&copy, "tls").as_deref() == Some(value.as_str())).then_some(())
            })
            .await
        }
    };
    copy_holds("v0".into()).await;
    for round in 1..=7 {
        secrets.delete("cert", &Default::default()).await.unwrap();
        eventually("the source gone", || async {
            secrets.get_opt("cert").await.unwrap().is_none().then_some(())
        })
        .await;
        apply_as(&tenant, immutable(&format!("v{round}"))).await.unwrap();
        copy_holds(format!("v{round}")).await;
    }
    let ready = wait_tenant_rule(&tenant, "cert", "True", "Synced").await;
    let flapped = h
        .metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix("mimeo_copy_flaps_total "))
        .map_or(0.0, |n| n.trim().parse().unwrap());
    assert_eq!(flapped, 0.0, "{ready}");
}

/// 4. A ServiceAccount token Secret or a Helm release Secret named as an input is refused as it
/// is as a source (`InputRefused`): nothing of it reaches a copy. The twin: an ordinary Secret as
/// the input is rendered into the copy.
#[tokio::test]
async fn an_input_cannot_carry_a_token_or_a_helm_release_into_a_copy() {
    let (h, tenant) = start(plugin_config()).await;
    h.namespace("victim", &[], &[("mimeo.dev/accept-from", TENANT)])
        .await;
    apply_as(
        &tenant,
        secret("robot", "Opaque", json!({}), json!({"user": "robot"})),
    )
    .await
    .unwrap();
    let token_annotations = json!({"kubernetes.io/service-account.name": "default"});
    apply_as(
        &tenant,
        secret(
            "sa-token",
            "kubernetes.io/service-account-token",
            token_annotations,
            json!({"token": "tenant-token-canary"}),
        ),
    )
    .await
    .unwrap();
    apply_as(
        &tenant,
        secret(
            "sh.helm.release.v1.app.v1",
            "helm.sh/release.v1",
            json!({}),
            json!({"release": "helm-release-canary"}),
        ),
    )
    .await
    .unwrap();
    apply_as(
        &tenant,
        secret("plain", "Opaque", json!({}), json!({"value": "plain-value"})),
    )
    .await
    .unwrap();
    for (rule, input, key) in [
        ("token", "sa-token", "token"),
        ("release", "sh.helm.release.v1.app.v1", "release"),
        ("plain", "plain", "value"),
    ] {
        apply_as(
            &tenant,
            sync_rule(
                rule,
                json!({"source": {"kind": "Secret", "name": "robot"},
                       "inputs": [{"name": "taken", "from": {"kind": "Secret", "name": input}}],
                       "targets": [{"namespace": "victim", "name": rule}],
                       "transforms": [{"plugin": "file://template.wasm", "config": {
                           "stringData": {"out": format!("{{{{ inputs.taken.data.{key} | b64decode }}}}")}}}]}),
            ),
        )
        .await
        .unwrap();
    }
    let copied = eventually("the plain input's copy", || async {
        h.secrets("victim").get_opt("plain").await.unwrap()
    })
    .await;
    assert_eq!(secret_value(&copied, "out").as_deref(), Some("plain-value"));
    wait_tenant_rule(&tenant, "plain", "True", "Synced").await;
    for (rule, type_) in [
        ("token", "kubernetes.io/service-account-token"),
        ("release", "helm.sh/release.v1"),
    ] {
        let message = wait_tenant_rule(&tenant, rule, "False", "InputRefused").await;
        assert!(
            message.contains(&format!("mimeo never reads a Secret of type {type_} into a copy")),
            "{message}"
        );
        assert!(
            h.secrets("victim").get_opt(rule).await.unwrap().is_none(),
            "{rule}"
        );
    }
    let all = Api::<Secret>::all(h.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    for s in all
        .items
        .iter()
        .filter(|s| s.metadata.namespace.as_deref() != Some(TENANT))
    {
        for key in s.data.iter().flat_map(|d| d.keys()) {
            let value = secret_value(s, key).unwrap_or_default();
            assert!(
                !value.contains("canary"),
                "{}/{}: {key}",
                s.metadata.namespace.as_deref().unwrap_or_default(),
                s.metadata.name.as_deref().unwrap_or_default()
            );
        }
    }
}

/// 5. A secret rendered into every failure a template can have at a copy (a label value that is
/// not valid, data that is not base64, JSON and YAML that do not parse, a filter given the wrong
/// value, a declared type's missing key): the failure is in the rule's status and the log, and
/// the secret is in neither, nor in any Event, in plain text or base64. The twin: the same
/// template with a valid label writes the copy.
#[tokio::test]
async fn no_status_event_or_log_line_shows_a_secret() {
    use base64::Engine as _;
    const CANARY: &str = "c4n4ry-Zq7Wx";
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let (h, tenant) = start(plugin_config()).await;
    apply_as(
        &tenant,
        secret(
            "creds",
            "Opaque",
            json!({}),
            json!({"password": CANARY, "json": format!("{{\"a\": {CANARY}")}),
        ),
    )
    .await
    .unwrap();
    let pw = "(object.data.password | b64decode)";
    let cases = [
        (
            "label",
            json!({"labels": {"x": format!("{{{{ {pw} }}}} x")}}),
            None,
        ),
        (
            "label-long",
            json!({"labels": {"x": format!("{{{{ {pw} * 9 }}}}")}}),
            None,
        ),
        ("data", json!({"data": {"k": format!("{{{{ {pw} }}}}!")}}), None),
        (
            "fromjson",
            json!({"stringData": {"k": "{{ object.data.json | b64decode | fromjson }}"}}),
            None,
        ),
        (
            "fromyaml",
            json!({"stringData": {"k": format!("{{{{ ({pw} ~ ': [') | fromyaml }}}}")}}),
            None,
        ),
        (
            "b64decode",
            json!({"stringData": {"k": format!("{{{{ {pw} | b64decode }}}}")}}),
            None,
        ),
        (
            "int",
            json!({"stringData": {"k": format!("{{{{ {pw} | int + [] }}}}")}}),
            None,
        ),
        (
            "type",
            json!({"stringData": {"tls.crt": format!("{{{{ {pw} }}}}")}}),
            Some("kubernetes.io/tls"),
        ),
    ];
    for (name, config, secret_type) in &cases {
        let mut spec = json!({"source": {"kind": "Secret", "name": "creds"},
                              "targets": [{"namespace": TENANT, "name": format!("copy-{name}")}],
                              "transforms": [{"plugin": "file://template.wasm", "config": config}]});
        if let Some(type_) = secret_type {
            spec["secretType"] = json!(type_);
        }
        apply_as(&tenant, sync_rule(name, spec)).await.unwrap();
    }
    apply_as(
        &tenant,
        sync_rule(
            "fine",
            json!({"source": {"kind": "Secret", "name": "creds"},
                   "targets": [{"namespace": TENANT, "name": "copy-fine"}],
                   "transforms": [{"plugin": "file://template.wasm",
                                   "config": {"labels": {"x": "{{ target.name }}"}}}]}),
        ),
    )
    .await
    .unwrap();
    wait_tenant_rule(&tenant, "fine", "True", "Synced").await;
    let mut messages = Vec::new();
    for (name, ..) in &cases {
        wait_tenant_rule(&tenant, name, "False", "PluginFailed").await;
        let rule = Api::<SyncRule>::namespaced(tenant.clone(), TENANT)
            .get(name)
            .await
            .unwrap();
        let status = rule.status.unwrap();
        let text = serde_json::to_string(&status).unwrap();
        messages.push(format!(
            "{name}: {}",
            status.problems[0].message.clone().unwrap_or_default()
        ));
        for shown in [CANARY.to_owned(), b64(CANARY)] {
            assert!(!text.contains(&shown), "{name}'s status shows the secret: {text}");
        }
    }
    eprintln!("{messages:#?}");
    assert!(
        messages[0].contains("labels[x]: the rendered value is not a valid label value"),
        "{}",
        messages[0]
    );
    let events = Api::<Event>::namespaced(h.client.clone(), TENANT)
        .list(&ListParams::default())
        .await
        .unwrap();
    let logged = harness::logged();
    assert!(logged.contains("copy not in sync"), "the failures are logged");
    for shown in [CANARY.to_owned(), b64(CANARY)] {
        for event in &events.items {
            assert!(
                !event.note.as_deref().unwrap_or_default().contains(&shown),
                "{event:?}"
            );
        }
        assert!(!logged.contains(&shown), "the log shows the secret");
    }
}

/// 8. A tenant who may create openMCP `Cluster`s in its own namespace, with the purposes it likes,
/// receives nothing from `examples/helmdeployer-registry-credentials.yaml`: its `nextTo` counts
/// only Clusters in the namespaces the platform trusts. The twin shows what the narrowing stops:
/// the same rule without `nextTo.namespaces` hands the tenant the credentials (a
/// `ClusterSyncRule` needs no consent), and the platform's own Cluster gets its copy either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cluster_gets_no_credentials_from_next_to() {
    let config = ControllerConfig {
        next_to_kinds: vec!["Cluster.clusters.openmcp.cloud".parse().unwrap()],
        ..Default::default()
    };
    let h = Harness::start_with_chart_values(
        config,
        &["--set-json", r#"nextTo.kinds=["Cluster.clusters.openmcp.cloud"]"#],
    )
    .await;
    h.namespace(TENANT, &[], &[]).await;
    let crd = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/inventory/openmcp/clusters.openmcp.cloud_clusters.yaml");
    h.plane.install_crds(&[crd]).await.unwrap();
    let tenant = tenant_client(&h, TENANT).await;
    h.apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": "clusters", "namespace": TENANT},
                   "rules": [{"apiGroups": ["clusters.openmcp.cloud"], "resources": ["clusters"], "verbs": ["*"]}]}))
        .await;
    h.apply(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "clusters", "namespace": TENANT},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "clusters"},
                   "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": TENANT}]}),
    )
    .await;
    let cluster = |ns: &str| {
        json!({"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster",
               "metadata": {"name": "wl", "namespace": ns},
               "spec": {"profile": "x", "tenancy": "Shared", "purposes": ["workload"]}})
    };
    let example = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples/helmdeployer-registry-credentials.yaml");
    harness::kubectl(h.plane.kubeconfig_path(), &["create", "namespace", "test-0"], b"");
    harness::kubectl_apply(&h.plane, &cluster("test-0"));
    eventually("the tenant's Cluster, as the tenant", || async {
        apply_as(&tenant, cluster(TENANT)).await.ok()
    })
    .await;
    harness::kubectl(
        h.plane.kubeconfig_path(),
        &["apply", "-f", example.to_str().unwrap()],
        b"",
    );

    let secrets = |ns: &str| h.secrets(ns);
    eventually("the credentials beside the platform's Cluster", || async {
        secrets("test-0").get_opt("chart-registry").await.unwrap()
    })
    .await;
    harness::stays(
        "no credentials beside the tenant's Cluster",
        Duration::from_secs(3),
        || async { secrets(TENANT).get_opt("chart-registry").await.unwrap().is_none() },
    )
    .await;

    // The twin: without the namespaces the platform trusts, the tenant's Cluster is followed.
    let rules = Api::<mimeo::api::ClusterSyncRule>::all(h.client.clone());
    rules
        .patch(
            "helmdeployer-chart-registry",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "remove", "path": "/spec/targets/0/nextTo/namespaces"}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    eventually(
        "the credentials beside the tenant's Cluster, once nothing narrows nextTo",
        || async { secrets(TENANT).get_opt("chart-registry").await.unwrap() },
    )
    .await;
}
