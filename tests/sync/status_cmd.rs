//! `mimeo status` against a real apiserver and the running controller, as the binary a user
//! runs: a tenant's rule with copies Synced, Conflict, NotAccepted, PluginFailed and in a
//! RemoteCluster that does not answer, beside a rule in sync, as a tree and as JSON, read with
//! the tenant's own rights (its namespace only) and with an admin's.

use crate::harness;

use harness::{Harness, eventually, tenant_client};
use serde_json::{Value, json};

const VALUE: &str = "s3cr3t-value-never-shown";

/// Runs `mimeo status ARGS` with this kubeconfig; returns the exit code, stdout and stderr.
fn status(kubeconfig: &str, args: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kubeconfig");
    std::fs::write(&config, kubeconfig).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mimeo"))
        .arg("status")
        .args(args)
        .env("KUBECONFIG", &config)
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn expect(text: &str, lines: &[&str]) {
    for line in lines {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}

fn rule(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
           "metadata": {"name": name, "namespace": "team-a"}, "spec": spec})
}

/// The states of one rule's copies in the JSON output, as `cluster/namespace/name state`.
fn states(json: &Value, rule: &str) -> Vec<String> {
    let rule = json["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == rule)
        .unwrap_or_else(|| panic!("no rule {rule} in {json:#}"));
    let mut states = Vec::new();
    for cluster in rule["clusters"].as_array().unwrap() {
        for namespace in cluster["namespaces"].as_array().unwrap() {
            for copy in namespace["copies"].as_array().unwrap() {
                states.push(format!(
                    "{}/{}/{} {}",
                    cluster["cluster"].as_str().unwrap_or("-"),
                    namespace["namespace"].as_str().unwrap(),
                    copy["name"].as_str().unwrap(),
                    copy["state"].as_str().unwrap(),
                ));
            }
        }
    }
    states
}

#[tokio::test]
async fn status_shows_each_copy_its_state_since_when_and_why() {
    let h = Harness::start_with(mimeo::controller::ControllerConfig {
        plugin_dir: Some(harness::plugin_dir()),
        ..Default::default()
    })
    .await;
    h.namespace("team-a", &[], &[]).await;
    h.namespace("mimeo-system", &[], &[]).await;
    for ns in ["accepts", "taken", "broken"] {
        h.namespace(ns, &[], &[("mimeo.dev/accept-from", "team-a")]).await;
    }
    h.namespace("refuses", &[], &[]).await;
    h.put_secret("team-a", "creds", &[("password", VALUE)]).await;
    // Someone else's Secret where a copy would go.
    h.put_secret("taken", "creds", &[("theirs", "yes")]).await;
    // A cluster that does not answer: this apiserver's kubeconfig, pointed at a closed port.
    let server = h.plane.server().to_owned();
    let closed = h.plane.kubeconfig_yaml().replace(&server, "https://127.0.0.1:1");
    h.apply(json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "east-kubeconfig", "namespace": "mimeo-system"},
                   "stringData": {"value": closed}}))
        .await;
    h.apply(
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster", "metadata": {"name": "east"},
                   "spec": {"kubeconfigSecretRef": {"namespace": "mimeo-system", "name": "east-kubeconfig"},
                            "allowedNamespaces": {}}}),
    )
    .await;

    let tenant = tenant_client(&h, "team-a").await;
    let kubeconfig = harness::service_account_kubeconfig(&h.plane, &h.client, "team-a", "tenant").await;
    // The tenant writes its rule itself. The template names a host for every namespace but
    // `broken`, where the plugin fails.
    let hosts = json!({"team-a": "a", "accepts": "b", "taken": "c", "refuses": "d", "far": "e"});
    harness::apply_as(
        &tenant,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hosts", "namespace": "team-a"},
               "data": hosts}),
    )
    .await
    .unwrap();
    harness::apply_as(
        &tenant,
        rule(
            "creds",
            json!({"source": {"kind": "Secret", "name": "creds"},
                   "inputs": [{"name": "hosts", "from": {"kind": "ConfigMap", "name": "hosts"}}],
                   "targets": [{"namespace": "team-a", "name": "creds-copy"}, {"namespace": "accepts"},
                               {"namespace": "taken"}, {"namespace": "refuses"}, {"namespace": "broken"},
                               {"namespace": "far", "cluster": "east"}],
                   "transforms": [{"plugin": "file://template.wasm", "config": {
                       "stringData": {"host": "{{ inputs.hosts.data[target.namespace] }}"}}}]}),
        ),
    )
    .await
    .unwrap();
    harness::apply_as(
        &tenant,
        rule(
            "quiet",
            json!({"source": {"kind": "Secret", "name": "creds"},
                   "targets": [{"namespace": "team-a", "name": "quiet-copy"}]}),
        ),
    )
    .await
    .unwrap();
    eventually("every copy decided", || async {
        let counts = h.rule("team-a", "creds").await?.status?.counts;
        let quiet = h.rule("team-a", "quiet").await?.status?.counts;
        let want = [
            ("Synced", 2),
            ("Conflict", 1),
            ("NotAccepted", 1),
            ("PluginFailed", 1),
            ("Unreachable", 1),
        ];
        (want.iter().all(|(s, n)| counts.get(*s) == Some(n)) && quiet.get("Synced") == Some(&1)).then_some(())
    })
    .await;

    // The tenant's view: every rule of its namespace, the copies it may list, the rest counted.
    let (code, text, stderr) = status(&kubeconfig, &["-n", "team-a"]);
    println!("{text}");
    assert_eq!(code, 0, "{text}{stderr}");
    expect(
        &text,
        &[
            "SyncRule team-a/creds  Ready=False ",
            "2/6 copies in sync",
            "│ source: Secret team-a/creds\n",
            "│ copies: Conflict 1, NotAccepted 1, PluginFailed 1, Synced 2, Unreachable 1\n",
            "├── this cluster  2/5 in sync\n",
            "│   ├── broken\n│   │   └── creds  PluginFailed  for ",
            "from team-a/creds: plugin file://template.wasm",
            "creds-copy  Synced  written ",
            "creds  Conflict  for ",
            "creds  NotAccepted  for ",
            "└── 1 more copy: you may not list Secret in every namespace: listed in team-a only; not readable in accepts, broken, refuses, taken\n",
            "└── RemoteCluster east  0/1 in sync  Unreachable\n",
            "    └── far\n",
            "        └── creds  Unreachable  for ",
            "SyncRule team-a/quiet  Ready=True ",
            "1/1 copies in sync",
            "quiet-copy  Synced  written ",
        ],
    );
    assert!(!text.contains('\x1b'), "colours in a pipe:\n{text}");
    assert!(
        !text.contains(VALUE) && !stderr.contains(VALUE),
        "a Secret value was shown"
    );

    let (code, json_text, stderr) = status(&kubeconfig, &["-n", "team-a", "-o", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let json: Value = serde_json::from_str(&json_text).unwrap();
    assert_eq!(
        states(&json, "creds"),
        [
            "-/broken/creds PluginFailed",
            "-/refuses/creds NotAccepted",
            "-/taken/creds Conflict",
            "-/team-a/creds-copy Synced",
            "east/far/creds Unreachable"
        ]
    );
    assert_eq!(states(&json, "quiet"), ["-/team-a/quiet-copy Synced"]);
    let creds = json["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "creds")
        .unwrap();
    assert_eq!(creds["clusters"][0]["notListed"], 1, "{creds:#}");
    assert_eq!(creds["ready"]["status"], "False");
    let conflict = &creds["clusters"][0]["namespaces"][2]["copies"][0];
    assert!(conflict["since"].as_str().unwrap().ends_with('Z'), "{conflict}");
    assert!(!conflict["why"].as_str().unwrap().is_empty(), "{conflict}");

    let (_, coloured, _) = status(&kubeconfig, &["creds", "-n", "team-a", "--color", "always"]);
    expect(
        &coloured,
        &[
            "\x1b[32mSynced\x1b[0m",
            "\x1b[31mConflict\x1b[0m",
            "\x1b[33mNotAccepted\x1b[0m",
        ],
    );

    // An admin may list everywhere: the copy in `accepts` is listed too, nothing is left out.
    let admin = h.plane.kubeconfig_yaml().to_owned();
    let (code, json_text, stderr) = status(&admin, &["syncrule/creds", "-n", "team-a", "-o", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let json: Value = serde_json::from_str(&json_text).unwrap();
    assert!(
        states(&json, "creds").contains(&"-/accepts/creds Synced".to_owned()),
        "{json:#}"
    );
    assert!(
        json["rules"][0]["clusters"][0].get("notListed").is_none(),
        "{json:#}"
    );

    // The rule's recent Warning events, as kubectl describe shows them, read with the tenant's
    // rights (it may list events.k8s.io in its namespace).
    expect(&text, &["│ Warning NotAccepted ", "│ Warning Conflict "]);

    // Every rule everywhere, and only those with problems: `creds` (not in sync), not `quiet`.
    let (code, json_text, stderr) = status(&admin, &["-A", "-o", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let names = |text: &str| -> Vec<String> {
        let json: Value = serde_json::from_str(text).unwrap();
        json["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                format!(
                    "{}/{}",
                    r["namespace"].as_str().unwrap_or("-"),
                    r["name"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(names(&json_text), ["team-a/creds", "team-a/quiet"]);
    let (code, json_text, stderr) = status(&admin, &["-A", "--problems", "-o", "json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(names(&json_text), ["team-a/creds"]);
    let (code, _, stderr) = status(&admin, &["-A", "-n", "team-a"]);
    assert_ne!(code, 0, "-A and -n do not go together: {stderr}");

    // What does not exist is an error naming it; what the tenant may not read is the apiserver's
    // refusal, not an empty tree.
    let (code, _, stderr) = status(&kubeconfig, &["nosuch", "-n", "team-a"]);
    assert_ne!(code, 0);
    expect(&stderr, &["SyncRule team-a/nosuch not found"]);
    let (code, _, stderr) = status(&kubeconfig, &["-n", "accepts"]);
    assert_ne!(code, 0);
    expect(
        &stderr,
        &["reading the SyncRules of namespace accepts", "forbidden"],
    );
    let (code, _, stderr) = status(&kubeconfig, &["secret/creds"]);
    assert_ne!(code, 0);
    expect(&stderr, &["\"secret/creds\" is not a rule"]);
}
