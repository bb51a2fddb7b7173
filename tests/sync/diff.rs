//! `mimeo diff` against a real apiserver, as the binary a user runs: each kind of change a rule
//! can make (create, change through a transform chain, delete, orphan), what it leaves alone
//! (no consent, a conflict), refusals in the apiserver's and the controller's words, what a
//! tenant's own permissions allow, and the exit codes of `kubectl diff`.

use crate::harness;

use harness::{Harness, eventually, tenant_client};
use serde_json::{Value, json};

/// Runs `mimeo diff -f <rule>` with this kubeconfig and the test plugins; returns the exit code
/// and stdout + stderr.
fn diff(kubeconfig: &str, rule: &Value, extra: &[&str]) -> (i32, String) {
    let plugins = harness::plugin_dir();
    let mut args = vec!["--plugin-dir", plugins.to_str().unwrap()];
    args.extend_from_slice(extra);
    harness::mimeo_diff(kubeconfig, &serde_yaml_ng::to_string(rule).unwrap(), &args)
}

fn rule(spec: Value) -> Value {
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
           "metadata": {"name": "registry", "namespace": "platform"}, "spec": spec})
}

async fn world(h: &Harness) {
    h.namespace("platform", &[], &[]).await;
    for ns in ["tenant-a", "tenant-b", "tenant-d"] {
        h.namespace(ns, &[("tier", "x")], &[("mimeo.dev/accept-from", "platform")])
            .await;
    }
    h.namespace("tenant-c", &[("tier", "x")], &[]).await;
    h.put_secret(
        "platform",
        "registry",
        &[("username", "robot"), ("password", "hunter2")],
    )
    .await;
    // Someone else's object where a copy would go.
    h.put_secret("tenant-d", "registry", &[("theirs", "yes")]).await;
}

fn expect(text: &str, lines: &[&str]) {
    for line in lines {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}

#[tokio::test]
async fn diff_shows_each_change_before_it_is_applied() {
    let h = Harness::start_with(mimeo::controller::ControllerConfig {
        plugin_dir: Some(harness::plugin_dir()),
        ..Default::default()
    })
    .await;
    world(&h).await;
    let admin = h.plane.kubeconfig_yaml().to_owned();
    let fan_out = rule(json!({"source": {"kind": "Secret", "name": "registry"},
                              "targets": [{"namespaceSelector": {"matchLabels": {"tier": "x"}}}]}));

    // A new rule: two copies to create, one namespace without consent, one conflict.
    let (code, text) = diff(&admin, &fan_out, &[]);
    assert_eq!(code, 1, "{text}");
    expect(
        &text,
        &[
            "SyncRule/platform/registry: 2 to create, 0 to change, 0 to delete, 0 to orphan, 0 in sync, 2 not written",
            "+ create Secret tenant-a/registry (from platform/registry)",
            "+ create Secret tenant-b/registry (from platform/registry)",
            "! NotAccepted Secret tenant-c/registry: namespace tenant-c does not accept",
            "! Conflict Secret tenant-d/registry: an object not managed by mimeo has this name",
            "--- (nothing there)",
            "+++ tenant-a/registry (after apply)",
            "password: (7 bytes, digest ",
        ],
    );
    assert!(
        !text.contains("aHVudGVyMg==") && !text.contains("hunter2"),
        "{text}"
    );
    let (_, shown) = diff(&admin, &fan_out, &["--show-secrets"]);
    assert!(shown.contains("password: aHVudGVyMg=="), "{shown}");
    assert!(
        h.secrets("tenant-a").get_opt("registry").await.unwrap().is_none(),
        "diff writes nothing"
    );

    // Applied: nothing left to change.
    h.apply(fan_out.clone()).await;
    for ns in ["tenant-a", "tenant-b"] {
        eventually(&format!("the copy in {ns}"), || async {
            h.secrets(ns).get_opt("registry").await.unwrap()
        })
        .await;
    }
    eventually("the rule's inventory", || async {
        let status = h.rule("platform", "registry").await?.status?;
        (status.counts.get("Synced") == Some(&2)).then_some(())
    })
    .await;
    let (code, text) = diff(&admin, &fan_out, &[]);
    assert_eq!(code, 0, "{text}");
    expect(
        &text,
        &[
            "= in sync Secret tenant-a/registry",
            "= in sync Secret tenant-b/registry",
        ],
    );

    // A transform chain: what the plugin makes of each copy is in the diff.
    let filtered = rule(json!({"source": {"kind": "Secret", "name": "registry"},
                               "targets": [{"namespaceSelector": {"matchLabels": {"tier": "x"}}}],
                               "transforms": [{"plugin": "file://filter-keys.wasm", "config": {"include": ["username"]}}]}));
    let (code, text) = diff(&admin, &filtered, &[]);
    assert_eq!(code, 1, "{text}");
    expect(
        &text,
        &[
            "~ change Secret tenant-a/registry (from platform/registry; replaced: fields others added go)",
            "--- tenant-a/registry (now)",
            "+++ tenant-a/registry (after apply)",
        ],
    );
    let removed: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("-  password:"))
        .collect();
    assert_eq!(removed.len(), 2, "the password goes from both copies:\n{text}");

    // Fewer targets: the copy no target selects goes, or stays without mimeo's marks.
    let narrowed = rule(json!({"source": {"kind": "Secret", "name": "registry"},
                               "targets": [{"namespace": "tenant-a"}]}));
    let (code, text) = diff(&admin, &narrowed, &[]);
    assert_eq!(code, 1, "{text}");
    expect(
        &text,
        &[
            "= in sync Secret tenant-a/registry",
            "- delete Secret tenant-b/registry",
        ],
    );
    let mut orphaning = narrowed.clone();
    orphaning["spec"]["deletion"] = json!("Orphan");
    let (_, text) = diff(&admin, &orphaning, &[]);
    expect(&text, &["- orphan Secret tenant-b/registry"]);

    // Targets in other clusters: whether the cluster lets the rule use it, as the controller
    // decides; their copies are not shown.
    h.namespace("mimeo-system", &[], &[]).await;
    h.register_cluster("b", h.plane.kubeconfig_yaml(), json!({}))
        .await;
    let remote = rule(json!({"source": {"kind": "Secret", "name": "registry"},
                             "targets": [{"cluster": "b", "namespace": "apps"}, {"cluster": "nowhere", "namespace": "apps"}]}));
    let (code, text) = diff(&admin, &remote, &[]);
    assert_eq!(code, 1, "the local copies would go: {text}");
    expect(
        &text,
        &[
            "- delete Secret tenant-a/registry",
            "! NotAccepted RemoteCluster b: RemoteCluster b does not allow SyncRules from namespace platform",
            "! ClusterMissing RemoteCluster nowhere: RemoteCluster nowhere does not exist",
        ],
    );

    // Refused by the controller: its reason and message.
    let deployments = rule(
        json!({"source": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"},
                                  "targets": [{"namespace": "tenant-a"}]}),
    );
    let (code, text) = diff(&admin, &deployments, &[]);
    assert_eq!(code, 2, "{text}");
    expect(
        &text,
        &["the controller would refuse it: KindNotAllowed: this installation of mimeo syncs"],
    );
    // Refused by the apiserver: its message.
    let both = rule(
        json!({"source": {"kind": "Secret", "name": "registry", "selector": {"matchLabels": {"a": "b"}}},
                           "targets": [{"namespace": "tenant-a"}]}),
    );
    let (code, text) = diff(&admin, &both, &[]);
    assert_eq!(code, 2, "{text}");
    expect(
        &text,
        &["the apiserver refuses the rule", "set exactly one of source.name"],
    );
    // A plugin that refuses its config: the chain's reason.
    let bad_config = rule(json!({"source": {"kind": "Secret", "name": "registry"},
                                 "targets": [{"namespace": "tenant-a"}],
                                 "transforms": [{"plugin": "file://filter-keys.wasm", "config": {"include": []}}]}));
    let (code, text) = diff(&admin, &bad_config, &[]);
    assert_eq!(code, 2, "{text}");
    expect(
        &text,
        &["would refuse it: PluginUnavailable: plugin file://filter-keys.wasm"],
    );
}

/// A tenant's diff reads with the tenant's rights: what the apiserver refuses the tenant is
/// refused, and what the tenant may not read is an error naming it, not a guess.
#[tokio::test]
async fn a_tenants_diff_reads_with_the_tenants_rights() {
    let h = Harness::start().await;
    world(&h).await;
    let _ = tenant_client(&h, "platform").await;
    let kubeconfig = harness::service_account_kubeconfig(&h.plane, &h.client, "platform", "tenant").await;

    let elsewhere = rule(json!({"source": {"kind": "Secret", "name": "registry"},
                                "inputs": [{"name": "x", "from": {"kind": "Secret", "name": "root", "namespace": "kube-system"}}],
                                "targets": [{"namespace": "tenant-a"}],
                                "transforms": [{"plugin": "file://template.wasm"}]}));
    let (code, text) = diff(&kubeconfig, &elsewhere, &[]);
    assert_eq!(code, 2, "{text}");
    expect(&text, &["a SyncRule reads inputs from its own namespace only"]);

    let fan_out = rule(json!({"source": {"kind": "Secret", "name": "registry"},
                              "targets": [{"namespaceSelector": {"matchLabels": {"tier": "x"}}}]}));
    let (code, text) = diff(&kubeconfig, &fan_out, &[]);
    assert_eq!(code, 2, "{text}");
    expect(
        &text,
        &[
            "listing namespaces (a target selects them by labels, pattern or nextTo)",
            "forbidden",
        ],
    );
}

/// A copy the tenant may not read is undecided: the diff names the failure and exits 2 (it
/// exited 0 before, with nothing else to change, and a script gating on it went ahead).
#[tokio::test]
async fn a_copy_the_tenant_may_not_read_exits_2() {
    let h = Harness::start().await;
    world(&h).await;
    let _ = tenant_client(&h, "platform").await;
    // The tenant may read Namespaces (consent), not Secrets in tenant-a.
    h.apply(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "tenant-namespaces"},
               "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list"]}]}),
    )
    .await;
    h.apply(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "tenant-namespaces"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tenant-namespaces"},
               "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": "platform"}]}),
    )
    .await;
    let kubeconfig = harness::service_account_kubeconfig(&h.plane, &h.client, "platform", "tenant").await;

    let one = rule(json!({"source": {"kind": "Secret", "name": "registry"},
                          "targets": [{"namespace": "tenant-a"}]}));
    let (code, text) = diff(&kubeconfig, &one, &[]);
    expect(&text, &["! Failed Secret tenant-a/registry:", "forbidden"]);
    assert_eq!(code, 2, "{text}");
}
