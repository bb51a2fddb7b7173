//! `mimeo remote rbac` against a real apiserver: the objects it prints apply cleanly, and the
//! apiserver's own RBAC authorizer (asked through SubjectAccessReviews) grants the identity what
//! mimeo needs in a remote cluster and nothing more.

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind, TypeMeta};
use mimeo::clusters::remote_rbac::{self, Identity, RbacOptions, Use};
use mimeo_envtest::ControlPlane;
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

fn mimeo() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mimeo"))
}

/// Every document of a multi-document YAML stream.
fn parse_yaml_stream(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("{e}:\n{text}")))
        .collect()
}

/// Server-side applies an object given as JSON, as `kubectl apply --server-side` would.
async fn apply(client: &Client, object: &Value) {
    let gvk = GroupVersionKind::try_from(&TypeMeta {
        api_version: object["apiVersion"].as_str().unwrap().into(),
        kind: object["kind"].as_str().unwrap().into(),
    })
    .unwrap();
    let resource = ApiResource::from_gvk(&gvk);
    let name = object["metadata"]["name"].as_str().unwrap();
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(object))
        .await
        .unwrap_or_else(|e| panic!("applying {} {name}: {e}", gvk.kind));
}

async fn create_namespace(client: &Client, name: &str) {
    apply(
        client,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )
    .await;
}

/// One request a user might make: verb, group, resource, namespace (`None`: cluster-wide).
#[derive(Clone, Copy, Debug)]
struct Request(&'static str, &'static str, &'static str, Option<&'static str>);

/// Whether the apiserver would allow `user` to make the request.
async fn allowed(client: &Client, user: &str, Request(verb, group, resource, namespace): Request) -> bool {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_owned()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                namespace: namespace.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    answer.status.is_some_and(|s| s.allowed)
}

/// Waits until every `can` request is allowed (the authorizer sees new bindings through a watch,
/// so a moment after they are applied), then checks that no `cannot` request is.
async fn check_access(client: &Client, user: &str, can: &[Request], cannot: &[Request]) {
    let deadline = Instant::now() + WAIT;
    for &request in can {
        while !allowed(client, user, request).await {
            assert!(
                Instant::now() < deadline,
                "{user} is still not allowed {request:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for &request in cannot {
        assert!(
            !allowed(client, user, request).await,
            "{user} is allowed {request:?}, which it must not be"
        );
    }
}

#[tokio::test]
async fn a_target_identity_can_watch_copies_everywhere_and_write_them_only_in_its_namespaces() {
    let options = RbacOptions {
        kinds: vec!["Secret".into(), "ConfigMap".into()],
        namespaces: vec!["apps".into()],
        usage: Use::Target,
        create_namespaces: false,
        identity: Identity::User("remote-writer".into()),
        name: None,
    };
    let objects = remote_rbac::objects(&options).unwrap();

    // The command prints the same objects, as YAML that parses.
    let output = mimeo()
        .args([
            "remote",
            "rbac",
            "--kind",
            "Secret",
            "--kind",
            "ConfigMap",
            "--namespace",
            "apps",
            "--user",
            "remote-writer",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(parse_yaml_stream(&stdout), objects, "{stdout}");
    assert_eq!(stdout, remote_rbac::render(&options).unwrap());
    assert!(
        stdout.contains("A label selector does not narrow RBAC"),
        "{stdout}"
    );

    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let client = plane.client().await.unwrap();
    create_namespace(&client, "apps").await;
    for object in &objects {
        apply(&client, object).await;
    }

    check_access(
        &client,
        "remote-writer",
        &[
            Request("list", "", "secrets", None),
            Request("watch", "", "secrets", None),
            Request("list", "", "configmaps", None),
            Request("watch", "", "configmaps", None),
            Request("list", "", "namespaces", None),
            Request("watch", "", "namespaces", None),
            Request("get", "", "namespaces", None),
            Request("get", "", "secrets", Some("apps")),
            Request("create", "", "secrets", Some("apps")),
            Request("update", "", "secrets", Some("apps")),
            Request("patch", "", "secrets", Some("apps")),
            Request("delete", "", "secrets", Some("apps")),
            Request("patch", "", "configmaps", Some("apps")),
            Request("delete", "", "configmaps", Some("apps")),
        ],
        &[
            Request("create", "", "secrets", Some("default")),
            Request("patch", "", "secrets", Some("default")),
            Request("delete", "", "secrets", Some("default")),
            Request("get", "", "secrets", Some("default")),
            Request("patch", "", "configmaps", Some("default")),
            Request("delete", "", "namespaces", None),
            Request("create", "", "namespaces", None),
            Request("get", "", "pods", Some("apps")),
            Request("list", "", "pods", None),
            Request("create", "apps", "deployments", Some("apps")),
            Request("deletecollection", "", "secrets", Some("apps")),
        ],
    )
    .await;

    // With --create-namespaces, the same identity may create namespaces, and still not delete them.
    let creating = RbacOptions {
        create_namespaces: true,
        ..options
    };
    for object in remote_rbac::objects(&creating).unwrap() {
        apply(&client, &object).await;
    }
    check_access(
        &client,
        "remote-writer",
        &[Request("create", "", "namespaces", None)],
        &[Request("delete", "", "namespaces", None)],
    )
    .await;
}

#[tokio::test]
async fn a_source_service_account_can_read_its_namespace_and_nothing_else() {
    // The default subject: a ServiceAccount, which the output creates along with its namespace.
    let options = RbacOptions {
        kinds: vec!["configmaps".into()],
        namespaces: vec!["shared".into()],
        usage: Use::Source,
        ..Default::default()
    };
    let output = mimeo()
        .args([
            "remote",
            "rbac",
            "--source",
            "--kind",
            "configmaps",
            "-n",
            "shared",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let objects = parse_yaml_stream(&String::from_utf8(output.stdout).unwrap());
    assert_eq!(objects, remote_rbac::objects(&options).unwrap());

    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let client = plane.client().await.unwrap();
    create_namespace(&client, "shared").await;
    for object in &objects {
        apply(&client, object).await;
    }

    let user = "system:serviceaccount:mimeo-system:mimeo-remote";
    check_access(
        &client,
        user,
        &[
            Request("get", "", "configmaps", Some("shared")),
            Request("list", "", "configmaps", Some("shared")),
            Request("watch", "", "configmaps", Some("shared")),
        ],
        &[
            Request("list", "", "configmaps", None),
            Request("watch", "", "configmaps", None),
            Request("list", "", "configmaps", Some("default")),
            Request("create", "", "configmaps", Some("shared")),
            Request("update", "", "configmaps", Some("shared")),
            Request("patch", "", "configmaps", Some("shared")),
            Request("delete", "", "configmaps", Some("shared")),
            Request("get", "", "secrets", Some("shared")),
            Request("list", "", "namespaces", None),
        ],
    )
    .await;
}

/// Runs `mimeo remote rbac` with `args`, checks it succeeds, and returns the objects it prints.
fn remote_rbac_objects(args: &[&str]) -> Vec<Value> {
    let output = mimeo().args(["remote", "rbac"]).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    parse_yaml_stream(&String::from_utf8(output.stdout).unwrap())
}

#[tokio::test]
async fn a_kyverno_target_can_write_cluster_policies_cluster_wide_and_policies_only_in_its_namespaces() {
    // SubjectAccessReviews need no CRD: the authorizer checks group and resource names alone.
    let objects = remote_rbac_objects(&[
        "--kind",
        "Policy",
        "--kind",
        "ClusterPolicy",
        "--namespace",
        "apps",
        "--user",
        "u",
    ]);
    let options = RbacOptions {
        kinds: vec!["Policy".into(), "ClusterPolicy".into()],
        namespaces: vec!["apps".into()],
        usage: Use::Target,
        create_namespaces: false,
        identity: Identity::User("u".into()),
        name: None,
    };
    assert_eq!(objects, remote_rbac::objects(&options).unwrap());

    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let client = plane.client().await.unwrap();
    create_namespace(&client, "apps").await;
    for object in &objects {
        apply(&client, object).await;
    }

    const K: &str = "kyverno.io";
    const CRDS: (&str, &str) = ("apiextensions.k8s.io", "customresourcedefinitions");
    check_access(
        &client,
        "u",
        &[
            Request("list", K, "policies", None),
            Request("watch", K, "policies", None),
            Request("get", K, "policies", Some("apps")),
            Request("create", K, "policies", Some("apps")),
            Request("patch", K, "policies", Some("apps")),
            Request("delete", K, "policies", Some("apps")),
            Request("list", K, "clusterpolicies", None),
            Request("watch", K, "clusterpolicies", None),
            Request("get", K, "clusterpolicies", None),
            Request("create", K, "clusterpolicies", None),
            Request("update", K, "clusterpolicies", None),
            Request("patch", K, "clusterpolicies", None),
            Request("delete", K, "clusterpolicies", None),
            Request("get", CRDS.0, CRDS.1, None),
            Request("list", CRDS.0, CRDS.1, None),
            Request("watch", CRDS.0, CRDS.1, None),
            Request("list", "", "namespaces", None),
        ],
        &[
            Request("patch", K, "policies", Some("default")),
            Request("create", K, "policies", Some("default")),
            Request("patch", K, "policies", None),
            Request("deletecollection", K, "clusterpolicies", None),
            Request("create", CRDS.0, CRDS.1, None),
            Request("update", CRDS.0, CRDS.1, None),
            Request("delete", CRDS.0, CRDS.1, None),
            Request("delete", "", "namespaces", None),
            Request("create", "", "namespaces", None),
            Request("list", "", "secrets", None),
            Request("list", K, "clusterpolicyreports", None),
            Request("create", "wgpolicyk8s.io", "policyreports", Some("apps")),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_cluster_policy_source_can_read_cluster_policies_and_write_nothing() {
    // Only cluster-scoped kinds: no --namespace needed.
    let objects = remote_rbac_objects(&["--source", "--kind", "ClusterPolicy", "--user", "s"]);
    assert_eq!(
        objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["ClusterRole", "ClusterRoleBinding"]
    );

    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let client = plane.client().await.unwrap();
    for object in &objects {
        apply(&client, object).await;
    }

    const K: &str = "kyverno.io";
    check_access(
        &client,
        "s",
        &[
            Request("get", K, "clusterpolicies", None),
            Request("list", K, "clusterpolicies", None),
            Request("watch", K, "clusterpolicies", None),
            Request("list", "apiextensions.k8s.io", "customresourcedefinitions", None),
            Request("watch", "apiextensions.k8s.io", "customresourcedefinitions", None),
        ],
        &[
            Request("patch", K, "clusterpolicies", None),
            Request("create", K, "clusterpolicies", None),
            Request("update", K, "clusterpolicies", None),
            Request("delete", K, "clusterpolicies", None),
            Request("list", K, "policies", None),
            Request("get", K, "policies", Some("default")),
            Request(
                "create",
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                None,
            ),
            Request("list", "", "namespaces", None),
            Request("list", "", "secrets", None),
        ],
    )
    .await;

    // With a namespaced kind as well, the namespaces are needed, and the error says for which.
    let output = mimeo()
        .args([
            "remote",
            "rbac",
            "--source",
            "--kind",
            "ClusterPolicy",
            "--kind",
            "Secret",
        ])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("a source cluster needs at least one --namespace for Secret"),
        "{stderr}"
    );
}

#[test]
fn an_unknown_kind_is_refused_with_the_supported_ones() {
    let output = mimeo()
        .args(["remote", "rbac", "--kind", "Pod"])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "unknown kind \"Pod\": this command knows Secret, ConfigMap, Policy.kyverno.io, ClusterPolicy.kyverno.io"
        ),
        "{stderr}"
    );
}
