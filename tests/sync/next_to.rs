//! `targets[].nextTo` on a real apiserver with openMCP's `Cluster` CRD: the namespaces holding a
//! `Cluster` with purpose `workload` get the copy, within seconds of one being created; removing
//! the purpose or deleting the `Cluster` removes it; a `SyncRule` still needs consent; a kind the
//! installation does not allow, does not serve or that is cluster-scoped is a clear condition.

use crate::harness;

use harness::{Harness, WAIT, apply_as, eventually, logged, mimeo_diff, stays, tenant_client};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::Api;
use mimeo::api::ClusterSyncRule;
use mimeo::controller::ControllerConfig;
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const CLUSTER_CRD: &str = "../shared/fixtures/inventory/openmcp/clusters.openmcp.cloud_clusters.yaml";

/// Runs kubectl as the admin with `stdin` as its input; panics when it fails.
fn kubectl(h: &Harness, args: &[&str], stdin: &str) -> String {
    harness::kubectl(h.plane.kubeconfig_path(), args, stdin.as_bytes())
}

fn kubectl_apply(h: &Harness, yaml: &str) {
    kubectl(h, &["apply", "-f", "-"], yaml);
}

/// A controller that lets `nextTo` follow openMCP `Cluster`s (and whatever else is given).
async fn start(extra_kinds: &[&str]) -> Harness {
    let h = Harness::start_with(config(extra_kinds)).await;
    install_cluster_crd(&h);
    h
}

fn config(extra_kinds: &[&str]) -> ControllerConfig {
    let next_to_kinds = ["Cluster.clusters.openmcp.cloud"]
        .iter()
        .chain(extra_kinds)
        .map(|k| k.parse().unwrap())
        .collect();
    ControllerConfig {
        next_to_kinds,
        ..Default::default()
    }
}

fn install_cluster_crd(h: &Harness) {
    let crd = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(CLUSTER_CRD);
    kubectl(h, &["apply", "-f", crd.to_str().unwrap()], "");
    kubectl(
        h,
        &[
            "wait",
            "--for=condition=established",
            "--timeout=60s",
            "crd/clusters.clusters.openmcp.cloud",
        ],
        "",
    );
}

/// A namespace, with the annotation `mimeo.dev/accept-from: <accept>` when given.
fn namespace(h: &Harness, name: &str, accept: Option<&str>) {
    let annotations = match accept {
        Some(from) => format!("\n  annotations:\n    mimeo.dev/accept-from: {from}"),
        None => String::new(),
    };
    kubectl_apply(
        h,
        &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}{annotations}\n"),
    );
}

/// An openMCP `Cluster` in `namespace` with these purposes, as its operator would write it.
fn cluster(h: &Harness, namespace: &str, name: &str, purposes: &[&str]) {
    labelled_cluster(h, namespace, name, purposes, &[]);
}

fn labelled_cluster(h: &Harness, namespace: &str, name: &str, purposes: &[&str], labels: &[(&str, &str)]) {
    let purposes = purposes.iter().map(|p| format!("\n  - {p}")).collect::<String>();
    let labels = match labels {
        [] => String::new(),
        some => some.iter().fold("\n  labels:".to_owned(), |out, (k, v)| {
            format!("{out}\n    {k}: {v}")
        }),
    };
    kubectl_apply(
        h,
        &format!(
            "apiVersion: clusters.openmcp.cloud/v1alpha1\nkind: Cluster\nmetadata:\n  name: {name}\n  \
             namespace: {namespace}{labels}\nspec:\n  profile: gardener\n  tenancy: Exclusive\n  \
             purposes:{purposes}\n"
        ),
    );
}

fn delete_cluster(h: &Harness, namespace: &str, name: &str) {
    kubectl(
        h,
        &[
            "delete",
            "clusters.clusters.openmcp.cloud",
            name,
            "-n",
            namespace,
            "--wait=true",
        ],
        "",
    );
}

const WORKLOAD: &str = "\n      matchPurposes:\n      - operator: ContainsAny\n        values: [workload]";

fn ready_of(conditions: &[Condition]) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == "Ready")
}

/// Waits until the ClusterSyncRule's Ready condition has this status and reason; returns it.
async fn wait_cluster_rule(h: &Harness, name: &str, status: &str, reason: &str) -> Condition {
    let rules: Api<ClusterSyncRule> = Api::all(h.client.clone());
    let deadline = Instant::now() + WAIT;
    loop {
        let rule = rules.get_opt(name).await.unwrap();
        let ready = rule
            .as_ref()
            .and_then(|r| r.status.as_ref())
            .and_then(|s| ready_of(&s.conditions).cloned());
        if let Some(ready) = ready.filter(|r| r.status == status && r.reason == reason) {
            return ready;
        }
        assert!(
            Instant::now() < deadline,
            "ClusterSyncRule {name}: no Ready={status} ({reason}); last: {:#?}",
            rule.and_then(|r| r.status)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `check` holds, and says how long that took.
async fn timed<F, Fut>(what: &str, check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<()>>,
{
    let start = Instant::now();
    eventually(what, check).await;
    let took = start.elapsed();
    println!("{what}: {took:.2?}");
    took
}

#[tokio::test]
async fn copies_follow_the_clusters_with_the_purpose() {
    let h = start(&[]).await;
    namespace(&h, "platform", None);
    for ns in ["ws-a", "ws-b", "ws-c"] {
        namespace(&h, ns, None);
    }
    kubectl(
        &h,
        &[
            "create",
            "secret",
            "generic",
            "creds",
            "-n",
            "platform",
            "--from-literal=token=t",
        ],
        "",
    );
    cluster(&h, "ws-a", "workload", &["workload"]);
    labelled_cluster(&h, "ws-b", "onboarding", &["mcp"], &[("tier", "prod")]);
    // First a rule by labels only (its watch reads metadata), then one by purposes (the watch of
    // the kind is restarted reading whole objects); both are served by it.
    kubectl_apply(
        &h,
        "apiVersion: mimeo.dev/v1alpha1\nkind: ClusterSyncRule\nmetadata:\n  name: by-label\nspec:\n  \
         source: {kind: Secret, namespace: platform, name: creds}\n  targets:\n  - name: labelled\n    \
         nextTo:\n      apiVersion: clusters.openmcp.cloud/v1alpha1\n      kind: Cluster\n      \
         matchLabels: {tier: prod}\n",
    );
    wait_cluster_rule(&h, "by-label", "True", "Synced").await;
    assert!(h.secrets("ws-b").get_opt("labelled").await.unwrap().is_some());
    assert!(h.secrets("ws-a").get_opt("labelled").await.unwrap().is_none());
    let creds = format!(
        "apiVersion: mimeo.dev/v1alpha1\nkind: ClusterSyncRule\nmetadata:\n  name: creds\nspec:\n  \
         source: {{kind: Secret, namespace: platform, name: creds}}\n  targets:\n  - name: registry-credentials\n    \
         nextTo:\n      apiVersion: clusters.openmcp.cloud/v1alpha1\n      kind: Cluster{WORKLOAD}\n"
    );
    // mimeo diff first: it lists the Clusters as the controller would follow them.
    let admin = h.plane.kubeconfig_yaml().to_owned();
    let (code, text) = mimeo_diff(
        &admin,
        &creds,
        &["--next-to-kinds", "Cluster.clusters.openmcp.cloud"],
    );
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("+ create Secret ws-a/registry-credentials (from platform/creds)"),
        "{text}"
    );
    assert!(!text.contains("ws-b/registry-credentials"), "{text}");
    let (code, text) = mimeo_diff(&admin, &creds, &[]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("NextToKindNotAllowed"), "{text}");
    kubectl_apply(&h, &creds);
    wait_cluster_rule(&h, "creds", "True", "Synced").await;
    let copy = |ns: &str| {
        let api = h.secrets(ns);
        async move { api.get_opt("registry-credentials").await.unwrap() }
    };
    let started = |whole: bool| {
        let line =
            format!("starting a nextTo watch kind=clusters group=clusters.openmcp.cloud whole={whole}");
        logged().contains(&line)
    };
    assert!(
        started(false) && started(true),
        "metadata first, then whole objects"
    );
    assert!(copy("ws-a").await.is_some(), "next to a workload Cluster");
    assert!(copy("ws-b").await.is_none(), "next to an mcp Cluster only");
    assert!(copy("ws-c").await.is_none(), "next to no Cluster");

    // A new namespace with a new workload Cluster.
    namespace(&h, "ws-new", None);
    cluster(&h, "ws-new", "fresh", &["workload", "single"]);
    let took = timed("the copy next to a new Cluster", || async {
        copy("ws-new").await.map(|_| ())
    })
    .await;
    assert!(took < Duration::from_secs(10), "watched, not polled: {took:?}");

    // The purpose taken away: the copy goes.
    cluster(&h, "ws-a", "workload", &["mcp"]);
    timed("the copy gone once the purpose is removed", || async {
        copy("ws-a").await.is_none().then_some(())
    })
    .await;
    // The Cluster deleted: the copy goes.
    delete_cluster(&h, "ws-new", "fresh");
    timed("the copy gone once the Cluster is deleted", || async {
        copy("ws-new").await.is_none().then_some(())
    })
    .await;
    stays(
        "no copy next to an mcp Cluster",
        Duration::from_secs(2),
        || async { copy("ws-b").await.is_none() },
    )
    .await;
    // The purpose given back: the copy comes back.
    cluster(&h, "ws-a", "workload", &["mcp", "workload"]);
    timed("the copy back with the purpose", || async {
        copy("ws-a").await.map(|_| ())
    })
    .await;
    // The rule by labels still follows, now from the whole-object watch: the label removed
    // (as users do it, with kubectl label), its copy goes.
    assert!(h.secrets("ws-b").get_opt("labelled").await.unwrap().is_some());
    kubectl(
        &h,
        &[
            "label",
            "clusters.clusters.openmcp.cloud",
            "onboarding",
            "-n",
            "ws-b",
            "tier-",
        ],
        "",
    );
    timed("the copy gone once the label is removed", || async {
        h.secrets("ws-b")
            .get_opt("labelled")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_tenant_rule_next_to_clusters_still_needs_consent() {
    let h = start(&[]).await;
    namespace(&h, "team", None);
    namespace(&h, "welcoming", Some("team"));
    namespace(&h, "private", None);
    cluster(&h, "welcoming", "c1", &["workload"]);
    cluster(&h, "private", "c2", &["workload"]);
    let tenant = tenant_client(&h, "team").await;
    h.put_secret("team", "creds", &[("token", "t")]).await;
    apply_as(
        &tenant,
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
               "metadata": {"name": "creds", "namespace": "team"},
               "spec": {"source": {"kind": "Secret", "name": "creds"},
                        "targets": [{"nextTo": {"apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster",
                                                "matchPurposes": [{"operator": "ContainsAny", "values": ["workload"]}]}}]}}),
    )
    .await
    .unwrap();
    let rule = h.wait_ready("team", "creds", "False", "NotAccepted").await;
    // The status names the namespace that does not consent: this is what following a kind tells
    // a tenant, and why only the kinds of --next-to-kinds may be followed.
    let states: Vec<(String, mimeo::api::CopyState)> = rule
        .status
        .unwrap()
        .problems
        .into_iter()
        .map(|c| (c.namespace.unwrap_or_default(), c.state))
        .collect();
    assert!(
        states.contains(&("private".to_owned(), mimeo::api::CopyState::NotAccepted)),
        "{states:?}"
    );
    assert!(h.secrets("welcoming").get_opt("creds").await.unwrap().is_some());
    stays(
        "no copy where the namespace does not consent",
        Duration::from_secs(2),
        || async { h.secrets("private").get_opt("creds").await.unwrap().is_none() },
    )
    .await;
    // Consent given: the copy follows.
    kubectl(
        &h,
        &["annotate", "namespace", "private", "mimeo.dev/accept-from=team"],
        "",
    );
    eventually("the copy once the namespace consents", || async {
        h.secrets("private").get_opt("creds").await.unwrap().map(|_| ())
    })
    .await;
    h.wait_ready("team", "creds", "True", "Synced").await;
}

#[tokio::test]
async fn kinds_that_cannot_be_followed_are_clear_conditions_and_other_targets_go_on() {
    // Widgets are allowed but not served; Namespaces are allowed but cluster-scoped.
    let h = start(&["Widget.example.com", "Namespace"]).await;
    namespace(&h, "platform", None);
    namespace(&h, "named", None);
    h.put_secret("platform", "creds", &[("token", "t")]).await;
    let rule = |name: &str, api_version: &str, kind: &str| {
        format!(
            "apiVersion: mimeo.dev/v1alpha1\nkind: ClusterSyncRule\nmetadata:\n  name: {name}\nspec:\n  \
             source: {{kind: Secret, namespace: platform, name: creds}}\n  targets:\n  - namespace: named\n    \
             name: {name}\n  - nextTo: {{apiVersion: {api_version}, kind: {kind}}}\n    name: {name}\n"
        )
    };
    kubectl_apply(&h, &rule("secrets", "v1", "Secret"));
    kubectl_apply(&h, &rule("widgets", "example.com/v1", "Widget"));
    kubectl_apply(&h, &rule("namespaces", "v1", "Namespace"));

    let refused = wait_cluster_rule(&h, "secrets", "False", "NextToKindNotAllowed").await;
    assert!(
        refused
            .message
            .contains("add it to the controller's --next-to-kinds"),
        "{}",
        refused.message
    );
    let unserved = wait_cluster_rule(&h, "widgets", "False", "NextToKindNotServed").await;
    assert!(
        unserved.message.contains("example.com/v1/Widget"),
        "{}",
        unserved.message
    );
    let scoped = wait_cluster_rule(&h, "namespaces", "False", "NextToKindClusterScoped").await;
    assert!(scoped.message.contains("cluster-scoped"), "{}", scoped.message);
    // Not served, or cluster-scoped: the rule's other target gets its copy all the same.
    for name in ["widgets", "namespaces"] {
        eventually("the other target's copy", || async {
            h.secrets("named").get_opt(name).await.unwrap().map(|_| ())
        })
        .await;
    }
    // A kind not allowed refuses the rule: nothing is written for it.
    assert!(h.secrets("named").get_opt("secrets").await.unwrap().is_none());
}

/// A ClusterSyncRule next to workload Clusters, into `ws` (which holds one) and `named`.
fn workload_rule(h: &Harness) {
    kubectl_apply(
        h,
        &format!(
            "apiVersion: mimeo.dev/v1alpha1\nkind: ClusterSyncRule\nmetadata:\n  name: creds\nspec:\n  \
             source: {{kind: Secret, namespace: platform, name: creds}}\n  targets:\n  - namespace: named\n  \
             - nextTo:\n      apiVersion: clusters.openmcp.cloud/v1alpha1\n      kind: Cluster{WORKLOAD}\n"
        ),
    );
}

#[tokio::test]
async fn the_chart_grants_what_next_to_needs_and_no_more() {
    // The chart's RBAC with nextTo.kinds: the Clusters are read, the copy follows.
    let values = ["--set-json", r#"nextTo.kinds=["Cluster.clusters.openmcp.cloud"]"#];
    let h = Harness::start_with_chart_values(config(&[]), &values).await;
    install_cluster_crd(&h);
    for ns in ["platform", "named", "ws"] {
        namespace(&h, ns, None);
    }
    h.put_secret("platform", "creds", &[("token", "t")]).await;
    cluster(&h, "ws", "c1", &["workload"]);
    workload_rule(&h);
    wait_cluster_rule(&h, "creds", "True", "Synced").await;
    assert!(h.secrets("ws").get_opt("creds").await.unwrap().is_some());

    // The chart's defaults grant no Cluster: the flag alone cannot read them. The target is
    // unreadable, said so; the other target goes on.
    let h = Harness::start_with_chart_rbac(config(&[])).await;
    install_cluster_crd(&h);
    for ns in ["platform", "named", "ws"] {
        namespace(&h, ns, None);
    }
    h.put_secret("platform", "creds", &[("token", "t")]).await;
    cluster(&h, "ws", "c1", &["workload"]);
    workload_rule(&h);
    let unreadable = wait_cluster_rule(&h, "creds", "False", "NextToKindUnreadable").await;
    assert!(unreadable.message.contains("forbidden"), "{}", unreadable.message);
    assert!(
        unreadable
            .message
            .contains("the rule's other targets: 1/1 copies in sync"),
        "{}",
        unreadable.message
    );
    assert!(h.secrets("named").get_opt("creds").await.unwrap().is_some());
    assert!(h.secrets("ws").get_opt("creds").await.unwrap().is_none());
}

/// openMCP's replicator's `NextTo` with a name per `Cluster` (its `templating/next_to` example):
/// a `forEach` over the `Cluster`s of this cluster makes one copy per `Cluster` beside it, named
/// after it, two in a namespace holding two; a `Cluster` that goes takes only its own copy.
#[tokio::test]
async fn for_each_cluster_one_copy_beside_each_named_after_it() {
    let h = start(&[]).await;
    for ns in ["registry", "user-01", "user-02"] {
        kubectl(&h, &["create", "namespace", ns], "");
    }
    kubectl(
        &h,
        &[
            "create",
            "secret",
            "docker-registry",
            "imagepull",
            "-n",
            "registry",
            "--docker-server=ghcr.io",
            "--docker-username=u",
            "--docker-password=p",
        ],
        "",
    );
    for (ns, name) in [("user-01", "cp-01"), ("user-02", "cp-01"), ("user-02", "cp-02")] {
        kubectl_apply(
            &h,
            &format!(
                "apiVersion: clusters.openmcp.cloud/v1alpha1\nkind: Cluster\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{profile: p, tenancy: Shared, purposes: [controlplane]}}\n"
            ),
        );
    }
    kubectl_apply(
        &h,
        "apiVersion: mimeo.dev/v1alpha1
kind: ClusterSyncRule
metadata: {name: imagepull-next-to}
spec:
  source: {kind: Secret, namespace: registry, name: imagepull}
  targets:
    - forEach:
        apiVersion: clusters.openmcp.cloud/v1alpha1
        kind: Cluster
        matchPurposes: [{operator: ContainsAll, values: [controlplane]}]
      namespace: '{{object.namespace}}'
      name: 'imagepull-{{object.name}}'
",
    );
    eventually("a copy beside each Cluster, named after it", || async {
        (h.copy_names("user-01").await == ["imagepull-cp-01"]
            && h.copy_names("user-02").await == ["imagepull-cp-01", "imagepull-cp-02"])
        .then_some(())
    })
    .await;
    let copy = h.secrets("user-02").get("imagepull-cp-02").await.unwrap();
    assert_eq!(copy.type_.as_deref(), Some("kubernetes.io/dockerconfigjson"));
    kubectl(
        &h,
        &[
            "delete",
            "cluster.clusters.openmcp.cloud",
            "cp-01",
            "-n",
            "user-02",
        ],
        "",
    );
    eventually("only the gone Cluster's copy removed", || async {
        (h.copy_names("user-02").await == ["imagepull-cp-02"]
            && h.copy_names("user-01").await == ["imagepull-cp-01"])
        .then_some(())
    })
    .await;
}
