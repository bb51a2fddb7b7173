//! The configuration object (`MimeoConfig`) named after `--provider-name`, as an openMCP
//! installation configures mimeo: a kind allowed while mimeo runs, a setting that needs a
//! restart said so in its status, an invalid object reported while mimeo keeps its last good
//! settings, and an object the CRD refuses.

use crate::harness::{self, eventually};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use mimeo_envtest::ControlPlane;
use serde_json::json;
use std::process::{Child, Command, Stdio};

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("mimeo.dev", "v1alpha1", kind), plural)
}

/// A condition of a status, as (status, reason, message).
fn condition(object: &DynamicObject, type_: &str) -> Option<(String, String, String)> {
    let found = object.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?
        .clone();
    let text = |k: &str| found[k].as_str().unwrap_or_default().to_owned();
    Some((text("status"), text("reason"), text("message")))
}

async fn config(client: &Client) -> Option<DynamicObject> {
    Api::<DynamicObject>::all_with(client.clone(), &resource("MimeoConfig", "mimeoconfigs"))
        .get_opt("mimeo")
        .await
        .ok()?
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_configuration_object_changes_the_kinds_while_mimeo_runs() {
    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let client = plane.client().await.unwrap();
    for ns in ["platform", "apps"] {
        plane.create_namespace(ns, &[]).await.unwrap();
    }
    let init = Command::new(env!("CARGO_BIN_EXE_mimeo"))
        .args(["init", "--provider-name=mimeo"])
        .env("KUBECONFIG", plane.kubeconfig_path())
        .env("POD_NAMESPACE", "platform")
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    let dir = tempfile::tempdir().unwrap();
    let _mimeo = Running(
        Command::new(env!("CARGO_BIN_EXE_mimeo"))
            .args([
                "run",
                "--provider-name=mimeo",
                "--allow-kind=Secret",
                "--http-addr=127.0.0.1:0",
                "--log-format=json",
                &format!("--plugin-cache-dir={}", dir.path().join("plugins").display()),
                &format!("--artifact-cache-dir={}", dir.path().join("artifacts").display()),
            ])
            .env("KUBECONFIG", plane.kubeconfig_path())
            .env("POD_NAMESPACE", "platform")
            .env_remove("MIMEO_ALLOW_KINDS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("mimeo.log")).unwrap())
            .spawn()
            .unwrap(),
    );

    // A rule for ConfigMaps, which the flags do not allow.
    harness::kubectl(
        plane.kubeconfig_path(),
        &[
            "create",
            "configmap",
            "settings",
            "-n",
            "apps",
            "--from-literal=mode=blue",
        ],
        b"",
    );
    harness::kubectl_apply(
        &plane,
        &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                "metadata": {"name": "settings", "namespace": "apps"},
                "spec": {"source": {"kind": "ConfigMap", "name": "settings"},
                         "targets": [{"namespace": "apps", "name": "settings-copy"}]}}),
    );
    let rules =
        Api::<DynamicObject>::namespaced_with(client.clone(), "apps", &resource("SyncRule", "syncrules"));
    eventually(
        "the rule refused: ConfigMap is not allowed by the flags",
        || async {
            let rule = rules.get("settings").await.ok()?;
            condition(&rule, "Ready").filter(|(_, reason, _)| reason == "KindNotAllowed")
        },
    )
    .await;

    // The configuration object allows it: the copy is made without a restart.
    harness::kubectl_apply(
        &plane,
        &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "MimeoConfig", "metadata": {"name": "mimeo"},
                "spec": {"allowedKinds": ["Secret", "ConfigMap"]}}),
    );
    let copies = Api::<ConfigMap>::namespaced(client.clone(), "apps");
    eventually("the ConfigMap copied once the object allows it", || async {
        copies
            .get_opt("settings-copy")
            .await
            .ok()?
            .and_then(|c| c.data?.get("mode").cloned())
            .filter(|m| m == "blue")
    })
    .await;
    let applied = eventually("the object's status", || async {
        let object = config(&client).await?;
        (condition(&object, "Ready")?.0 == "True").then_some(object)
    })
    .await;
    assert_eq!(
        applied.data["status"]["allowedKinds"],
        json!(["Secret", "ConfigMap"])
    );
    assert_eq!(condition(&applied, "RestartRequired").unwrap().0, "False");

    // A setting read only at start: in effect at the next start, and the status says so.
    harness::kubectl_apply(
        &plane,
        &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "MimeoConfig", "metadata": {"name": "mimeo"},
                "spec": {"allowedKinds": ["Secret", "ConfigMap"], "plugins": {"deadlineMs": 250}}}),
    );
    let (_, reason, message) = eventually("RestartRequired", || async {
        condition(&config(&client).await?, "RestartRequired").filter(|(status, ..)| status == "True")
    })
    .await;
    assert_eq!(reason, "ChangedSinceStart");
    assert!(message.contains("spec.plugins.deadlineMs"), "{message}");

    // What the schema refuses never reaches mimeo.
    let (refused, said) = harness::run_kubectl(
        plane.kubeconfig_path(),
        &["apply", "-f", "-"],
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "MimeoConfig", "metadata": {"name": "mimeo"},
               "spec": {"allowedKinds": ["secret"]}})
        .to_string()
        .as_bytes(),
    );
    assert!(!refused, "{said}");
    assert!(said.contains("spec.allowedKinds[0]"), "{said}");

    // What only mimeo can tell is wrong is reported, and the last good settings stay: the
    // ConfigMap rule still copies.
    harness::kubectl_apply(
        &plane,
        &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "MimeoConfig", "metadata": {"name": "mimeo"},
                "spec": {"allowedKinds": ["Secret"],
                         "registries": {"allowed": ["https://registry.example.com"]}}}),
    );
    let (_, reason, message) = eventually("the invalid object reported", || async {
        condition(&config(&client).await?, "Ready").filter(|(status, ..)| status == "False")
    })
    .await;
    assert_eq!(reason, "Invalid");
    assert!(
        message.contains("spec.registries.allowed[0]") && message.contains("last good settings"),
        "{message}"
    );
    harness::kubectl(
        plane.kubeconfig_path(),
        &[
            "patch",
            "configmap",
            "settings",
            "-n",
            "apps",
            "--type=merge",
            "-p",
            r#"{"data":{"mode":"green"}}"#,
        ],
        b"",
    );
    eventually("the copy still follows its source", || async {
        copies
            .get_opt("settings-copy")
            .await
            .ok()?
            .and_then(|c| c.data?.get("mode").cloned())
            .filter(|m| m == "green")
    })
    .await;
    // Its JSON log line says why under a key of its own (issue 56: a second `"message"` key,
    // of which jq and Loki keep one).
    let log = std::fs::read_to_string(dir.path().join("mimeo.log")).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("the configuration object is invalid"))
        .unwrap_or_else(|| panic!("no log line for the invalid object:\n{log}"));
    assert_eq!(line.matches("\"message\":").count(), 1, "{line}");
    assert!(
        line.contains("\"why\":") && line.contains("spec.registries.allowed[0]"),
        "{line}"
    );
    let kept = config(&client).await.unwrap();
    assert_eq!(
        kept.data["status"]["allowedKinds"],
        json!(["Secret", "ConfigMap"]),
        "the kinds of the invalid object were applied"
    );

    // A valid object again, without ConfigMap: the rule is refused again, and its copy kept.
    harness::kubectl_apply(
        &plane,
        &json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "MimeoConfig", "metadata": {"name": "mimeo"},
                "spec": {"allowedKinds": ["Secret"]}}),
    );
    eventually("the rule refused again", || async {
        let rule = rules.get("settings").await.ok()?;
        condition(&rule, "Ready").filter(|(_, reason, _)| reason == "KindNotAllowed")
    })
    .await;
    assert!(
        copies.get_opt("settings-copy").await.unwrap().is_some(),
        "a copy of a kind no longer allowed was deleted"
    );
}
