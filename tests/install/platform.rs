//! mimeo as the openmcp-operator starts a platform service: `init` with `--environment`,
//! `--verbosity` and `--provider-name`, then `run` with those, `--metrics-bind-address=:PORT`,
//! `--metrics-secure=false` and `--leader-elect=true`, each exactly as the operator writes them.

use crate::harness::{self, eventually};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use mimeo_envtest::ControlPlane;
use serde_json::{Value, json};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const CRDS: [&str; 5] = [
    "syncrules.mimeo.dev",
    "clustersyncrules.mimeo.dev",
    "remoteclusters.mimeo.dev",
    "clusterinventories.mimeo.dev",
    "mimeoconfigs.mimeo.dev",
];

/// The arguments the operator appends to `init` and to `run`.
const OPERATOR_FLAGS: [&str; 3] = ["--environment=e2e", "--verbosity=INFO", "--provider-name=mimeo"];

fn mimeo(kubeconfig: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mimeo"));
    command
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("POD_NAMESPACE", "platform")
        .env_remove("MIMEO_LOG_LEVEL");
    command
}

fn init(kubeconfig: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["init"];
    args.extend(OPERATOR_FLAGS);
    args.extend(extra);
    mimeo(kubeconfig, &args).output().unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

async fn crd_state(client: &Client) -> Vec<(String, bool, Vec<String>)> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let mut out = Vec::new();
    for name in CRDS {
        let Some(crd) = api.get_opt(name).await.unwrap() else {
            out.push((name.to_owned(), false, vec![]));
            continue;
        };
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        let managers = crd
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .filter_map(|f| f.manager)
            .collect();
        out.push((name.to_owned(), established, managers));
    }
    out
}

async fn namespace(client: &Client, name: &str) {
    let api = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("{e}"),
    }
}

/// `init` on a bare cluster installs the CRDs (Established, under field manager `mimeo`) and
/// the seal key; run again it exits 0 and keeps the very key.
#[tokio::test]
async fn init_installs_the_crds_and_the_seal_key_and_runs_again_safely() {
    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let client = plane.client().await.unwrap();
    namespace(&client, "platform").await;

    let first = init(plane.kubeconfig_path(), &["--log-format=json"]);
    assert!(first.status.success(), "{}", text(&first));
    for (name, established, managers) in crd_state(&client).await {
        assert!(established, "{name} is not Established after init");
        assert!(managers.contains(&"mimeo".to_owned()), "{name}: {managers:?}");
    }
    let secrets = Api::<Secret>::namespaced(client.clone(), "platform");
    let key = secrets.get("mimeo-seal-key").await.unwrap().data.unwrap();
    assert!(
        text(&first).contains("installed as an openMCP platform service"),
        "{}",
        text(&first)
    );

    let second = init(plane.kubeconfig_path(), &[]);
    assert!(second.status.success(), "{}", text(&second));
    assert_eq!(
        secrets.get("mimeo-seal-key").await.unwrap().data.unwrap(),
        key,
        "a second init replaced the seal key"
    );
}

/// Over CRDs an older mimeo installed with `kubectl apply` (here: one whose schema lacks a field
/// of today's), with a rule in use, `init` takes the CRDs over and upgrades them, and the rule
/// stays as it was.
#[tokio::test]
async fn init_upgrades_older_crds_with_rules_in_use() {
    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let client = plane.client().await.unwrap();
    namespace(&client, "platform").await;
    namespace(&client, "apps").await;

    // Today's CRDs with the SyncRule's schema described otherwise and an extra printer column:
    // CRDs that differ, as an older release's would.
    let mut older: Vec<Value> = mimeo::api::all_crds()
        .into_iter()
        .map(|crd| serde_json::to_value(crd).unwrap())
        .collect();
    let sync_rule = older
        .iter_mut()
        .find(|c| c["metadata"]["name"] == "syncrules.mimeo.dev")
        .unwrap();
    sync_rule["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "Old", "type": "string", "jsonPath": ".spec.source.name"}));
    let today = sync_rule["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"].clone();
    sync_rule["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] = json!("an older mimeo");
    for crd in &older {
        harness::kubectl_apply(&plane, crd);
    }
    eventually("the older CRDs served", || async {
        crd_state(&client)
            .await
            .iter()
            .all(|(_, established, _)| *established)
            .then_some(())
    })
    .await;
    let rules = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        "apps",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("mimeo.dev", "v1alpha1", "SyncRule"),
            "syncrules",
        ),
    );
    let rule: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
        "metadata": {"name": "keep-me", "namespace": "apps"},
        "spec": {"source": {"kind": "Secret", "name": "db"}, "targets": [{"namespace": "apps", "name": "db-copy"}]},
    }))
    .unwrap();
    let made = rules.create(&PostParams::default(), &rule).await.unwrap();

    let output = init(plane.kubeconfig_path(), &[]);
    assert!(output.status.success(), "{}", text(&output));
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get("syncrules.mimeo.dev")
        .await
        .unwrap();
    let crd = serde_json::to_value(crd).unwrap();
    assert_eq!(
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"], today,
        "init did not upgrade the schema"
    );
    let kept = rules.get("keep-me").await.unwrap();
    assert_eq!(kept.metadata.uid, made.metadata.uid);
    assert_eq!(kept.data["spec"], made.data["spec"]);
}

/// An identity that may not write CRDs gets exit 1 and the step that failed, not a panic.
#[tokio::test]
async fn init_without_rights_on_crds_says_what_failed() {
    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let client = plane.client().await.unwrap();
    namespace(&client, "platform").await;
    let accounts = Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), "platform");
    let account = serde_json::from_value(json!({"metadata": {"name": "init"}})).unwrap();
    accounts.create(&PostParams::default(), &account).await.unwrap();
    let kubeconfig = harness::service_account_kubeconfig(&plane, &client, "platform", "init").await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, kubeconfig).unwrap();

    let output = init(&path, &[]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let said = text(&output);
    assert!(
        said.contains("applying the CustomResourceDefinition syncrules.mimeo.dev")
            && said.contains("forbidden"),
        "{said}"
    );
    assert!(!said.contains("panicked"), "{said}");

    // Given the CRDs but not Secrets: the seal key step fails, and says so once (issue 56: `the
    // seal key: the seal key:`).
    let grant = harness::kubectl(
        plane.kubeconfig_path(),
        &[
            "create",
            "clusterrole",
            "init-crds",
            "--verb=get,list,watch,create,patch,update",
            "--resource=customresourcedefinitions.apiextensions.k8s.io",
        ],
        b"",
    );
    assert!(grant.contains("created"), "{grant}");
    harness::kubectl(
        plane.kubeconfig_path(),
        &[
            "create",
            "clusterrolebinding",
            "init-crds",
            "--clusterrole=init-crds",
            "--serviceaccount=platform:init",
        ],
        b"",
    );
    let output = eventually("init past the CRDs", || async {
        let output = init(&path, &[]);
        text(&output).contains("the seal key").then_some(output)
    })
    .await;
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let said = text(&output);
    // Said once on each line (the log's and the command's own).
    for line in said.lines().filter(|l| l.contains("the seal key")) {
        assert_eq!(line.matches("the seal key").count(), 1, "{line}");
    }
    assert!(
        said.contains("the seal key: Secret platform/") && said.contains("forbidden"),
        "{said}"
    );
}

/// `run` with the operator's flags (ERROR verbosity) copies a Secret, serves metrics on the
/// operator's port, and logs no INFO line.
#[tokio::test]
async fn run_takes_the_operators_flags() {
    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let client = plane.client().await.unwrap();
    namespace(&client, "platform").await;
    namespace(&client, "apps").await;
    let output = init(plane.kubeconfig_path(), &[]);
    assert!(output.status.success(), "{}", text(&output));

    let port = harness::free_port();
    let bind = format!("--metrics-bind-address=:{port}");
    let mut child = mimeo(
        plane.kubeconfig_path(),
        &[
            "run",
            "--environment=e2e",
            "--verbosity=ERROR",
            "--provider-name=mimeo",
            "--leader-elect=true",
            &bind,
            "--metrics-secure=false",
        ],
    )
    .stderr(Stdio::piped())
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();

    harness::kubectl(
        plane.kubeconfig_path(),
        &[
            "create",
            "secret",
            "generic",
            "db",
            "-n",
            "apps",
            "--from-literal=password=v1",
        ],
        b"",
    );
    harness::kubectl_apply(
        &plane,
        &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
            "metadata": {"name": "db", "namespace": "apps"},
            "spec": {"source": {"kind": "Secret", "name": "db"}, "targets": [{"namespace": "apps", "name": "db-copy"}]}}),
    );
    let secrets = Api::<Secret>::namespaced(client.clone(), "apps");
    eventually("the copy, written by run", || async {
        secrets
            .get_opt("db-copy")
            .await
            .ok()
            .flatten()
            .and_then(|s| harness::secret_value(&s, "password"))
            .filter(|v| v == "v1")
    })
    .await;
    let (code, body) = eventually("metrics on the operator's port", || async {
        harness::http_get(&format!("127.0.0.1:{port}"), "/metrics")
    })
    .await;
    assert_eq!(code, 200);
    assert!(body.contains("mimeo_"), "{body}");

    sigterm(child.id());
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(status.success(), "{status:?}: {stderr}");
    for line in stderr.lines() {
        assert!(
            !line.contains("\"level\":\"INFO\"") && !line.contains(" INFO "),
            "an INFO line at --verbosity=ERROR: {line}"
        );
    }
}

/// SIGTERM to a child, as the kubelet stops a pod.
fn sigterm(pid: u32) {
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// What the operator never passes, and what stays an error.
#[test]
fn run_refuses_what_it_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    let none = dir.path().join("no-kubeconfig");
    for (args, expected) in [
        (vec!["run", "--metrics-secure=true"], "plain HTTP only"),
        (vec!["run", "--metrics-secure"], "plain HTTP only"),
        (vec!["run", "--verbosity=TRACE"], "expected DEBUG, INFO or ERROR"),
        (vec!["run", "--metrics-bind-address=eight"], "expected :PORT"),
        (vec!["run", "--leader-elect=maybe"], "invalid value 'maybe'"),
        (
            vec!["init", "--no-such-flag"],
            "unexpected argument '--no-such-flag'",
        ),
    ] {
        let output = mimeo(&none, &args).output().unwrap();
        assert!(!output.status.success(), "{args:?}");
        let said = text(&output);
        assert!(said.contains(expected), "{args:?}: {said}");
    }
}
