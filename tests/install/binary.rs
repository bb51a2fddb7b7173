//! The `mimeo` binary as an operator runs it: refuses to start without CRDs or with registry CAs
//! it cannot use, serves health and metrics, and shuts down cleanly on SIGTERM; its `--help`
//! lists each command on one short line; its completion scripts work in bash; kubectl runs it as
//! a plugin; without a cluster to talk to it says so in one line.

use crate::harness;

use mimeo_envtest::ControlPlane;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn mimeo() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mimeo"))
}

/// Every command list of `--help` (the top level's and each group's) gives a command one line
/// that fits a terminal; the long text is the command's own `--help`.
#[test]
fn help_lists_each_command_on_one_short_line() {
    for group in [&[][..], &["plugin"], &["remote"]] {
        let output = mimeo().args(group).arg("--help").output().unwrap();
        assert!(output.status.success());
        let help = String::from_utf8(output.stdout).unwrap();
        let commands: Vec<&str> = help
            .split("Commands:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("no command list in:\n{help}"))
            .lines()
            .take_while(|l| !l.trim().is_empty())
            .collect();
        assert!(commands.len() >= 2, "{help}");
        for line in &commands {
            assert!(
                line.starts_with("  ") && !line.starts_with("   "),
                "a continued line in:\n{help}"
            );
            assert!(line.len() <= 100, "longer than 100 characters: {line:?}");
        }
    }
    let long = mimeo().args(["diff", "--help"]).output().unwrap();
    let long = String::from_utf8(long.stdout).unwrap();
    assert!(
        long.contains("Exit status as `kubectl diff`"),
        "diff --help keeps its long text:\n{long}"
    );
}

/// `mimeo completion bash`, sourced in a real bash, completes the commands; the script for each
/// other shell is made too.
#[test]
fn completion_scripts_complete_the_commands_in_bash() {
    let script = mimeo().args(["completion", "bash"]).output().unwrap();
    assert!(script.status.success());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mimeo.bash");
    std::fs::write(&file, &script.stdout).unwrap();
    let complete = |line: &str| {
        let words: Vec<&str> = line.split(' ').collect();
        let program = format!(
            "source {}; COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE='{line}'; COMP_POINT={}; _mimeo mimeo; echo \"${{COMPREPLY[@]}}\"",
            file.display(),
            words
                .iter()
                .map(|w| format!("'{w}'"))
                .collect::<Vec<_>>()
                .join(" "),
            words.len() - 1,
            line.len()
        );
        let output = Command::new("bash").args(["-c", &program]).output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let offered = complete("mimeo su");
    assert!(offered.split_whitespace().any(|w| w == "suspend"), "{offered}");
    let offered = complete("mimeo status --c");
    assert!(offered.split_whitespace().any(|w| w == "--context"), "{offered}");
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let output = mimeo().args(["completion", shell]).output().unwrap();
        assert!(output.status.success() && output.stdout.len() > 100, "{shell}");
    }
}

/// Installed as `kubectl-mimeo` on the PATH (krew's convention), `kubectl mimeo ...` runs it, and
/// its help says so.
#[test]
fn kubectl_runs_it_as_a_plugin() {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_mimeo"), dir.path().join("kubectl-mimeo")).unwrap();
    let kubectl = mimeo_envtest::binaries().unwrap().kubectl();
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new(&kubectl)
        .args(["mimeo", "--help"])
        .env("PATH", &path)
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(help.contains("Usage: kubectl mimeo "), "{help}");
    let listed = Command::new(&kubectl)
        .args(["plugin", "list"])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&listed.stdout).contains("kubectl-mimeo"));
}

/// No kubeconfig anywhere and not in a pod: one line says what was tried and what to do.
#[test]
fn no_cluster_to_talk_to_is_said_in_one_line() {
    let home = tempfile::tempdir().unwrap();
    let output = mimeo()
        .args(["status", "-n", "x"])
        .env_remove("KUBECONFIG")
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", home.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("no cluster to talk to: KUBECONFIG is not set")
            && stderr.contains("give --kubeconfig FILE"),
        "{stderr}"
    );
}

#[tokio::test]
async fn refuses_to_start_without_crds() {
    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let output = mimeo()
        .args([
            "run",
            "--log-format",
            "json",
            "--http-addr",
            &format!("127.0.0.1:{}", harness::free_port()),
        ])
        .env("KUBECONFIG", plane.kubeconfig_path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("the mimeo CRDs are not installed"), "{stderr}");
    assert!(
        stderr.contains("mimeo crds | kubectl apply --server-side -f -"),
        "{stderr}"
    );
}

/// A registry CA that cannot be used stops `mimeo run` at once, naming the file and the fix,
/// before it connects to any cluster.
#[test]
fn refuses_registry_cas_it_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("ca.pem");
    std::fs::write(&not_pem, "not a certificate").unwrap();
    let not_pem = not_pem.to_str().unwrap();
    for (args, expected) in [
        (
            vec!["--plugin-registry-ca", "/nonexistent/ca.pem"],
            "registry CA file /nonexistent/ca.pem: No such file",
        ),
        (vec!["--plugin-registry-ca", not_pem], "holds no PEM certificate"),
        (
            vec!["--plugin-registry-ca", "harbor corp=/etc/ca.pem"],
            "not a registry host",
        ),
    ] {
        let output = mimeo()
            .arg("run")
            .args(&args)
            .env("KUBECONFIG", dir.path().join("no-kubeconfig"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("kubeconfig"),
            "{args:?} got as far as the cluster: {stderr}"
        );
    }
}

#[tokio::test]
async fn serves_health_and_metrics_and_stops_on_sigterm() {
    let h = harness::Harness::without_controller().await;
    let port = harness::free_port();
    let mut child = mimeo()
        .args([
            "run",
            "--log-format",
            "json",
            "--http-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .env("KUBECONFIG", h.plane.kubeconfig_path())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drain the log as it comes, so a full pipe can never hold the process up.
    let mut pipe = child.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    });

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some((200, body)) = harness::http_get(&format!("127.0.0.1:{port}"), "/readyz") {
            assert_eq!(body, "ok");
            break;
        }
        assert!(Instant::now() < deadline, "mimeo did not become ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        harness::http_get(&format!("127.0.0.1:{port}"), "/healthz").map(|(code, _)| code),
        Some(200)
    );
    // Warnings with a message of their own: a copy not in sync, a cluster not ready.
    h.namespace("platform", &[], &[]).await;
    h.namespace("tenant", &[], &[]).await;
    h.put_secret("platform", "creds", &[("k", "v")]).await;
    h.apply(
        serde_json::json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
        "metadata": {"name": "creds", "namespace": "platform"},
        "spec": {"source": {"kind": "Secret", "name": "creds"}, "targets": [{"namespace": "tenant"}]}}),
    )
    .await;
    h.apply(
        serde_json::json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster",
        "metadata": {"name": "nowhere"},
        "spec": {"kubeconfigSecretRef": {"namespace": "platform", "name": "missing"}}}),
    )
    .await;
    h.wait_ready("platform", "creds", "False", "NotAccepted").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (code, metrics) = harness::http_get(&format!("127.0.0.1:{port}"), "/metrics").unwrap();
    assert_eq!(code, 200);
    for name in [
        "mimeo_copies{state=\"Synced\"}",
        "mimeo_source_watches",
        "mimeo_propagation_seconds_bucket",
    ] {
        assert!(metrics.contains(name), "{name} missing from /metrics:\n{metrics}");
    }

    let started = Instant::now();
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            child.kill().unwrap();
            panic!(
                "mimeo did not stop within 30 s of SIGTERM; its log:\n{}",
                log.join().unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let stderr = log.join().unwrap();
    assert!(status.success(), "exit {status}: {stderr}");
    assert!(stderr.contains("controller stopped"), "{stderr}");
    for line in stderr.lines() {
        serde_json::from_str::<OneKeyPerField>(line)
            .unwrap_or_else(|e| panic!("not a JSON log line with one key per field ({e}): {line}"));
    }
    for warning in ["copy not in sync", "remote cluster not ready"] {
        let line = stderr
            .lines()
            .find(|l| l.contains(warning))
            .unwrap_or_else(|| panic!("no {warning:?} line: {stderr}"));
        let fields: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(fields["message"], warning, "{line}");
        assert!(fields["why"].is_string(), "{line}");
    }
}

/// A JSON object in which no key appears twice (`jq` and most parsers keep only one of them).
struct OneKeyPerField;

impl<'de> serde::Deserialize<'de> for OneKeyPerField {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = OneKeyPerField;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut seen = std::collections::HashSet::new();
                while let Some(key) = map.next_key::<String>()? {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    if !seen.insert(key.clone()) {
                        return Err(serde::de::Error::custom(format!("the key {key:?} appears twice")));
                    }
                }
                Ok(OneKeyPerField)
            }
        }
        d.deserialize_map(Visitor)
    }
}

/// A client certificate of X.509 version 1 (openssl's `x509 -req` without extensions makes one;
/// kubectl accepts it, rustls does not): `mimeo run` stops with a message that says what is
/// wrong and how to fix it, and a `RemoteCluster` with the same kubeconfig says the same.
#[tokio::test]
async fn a_version_1_client_certificate_is_named_and_the_fix_given() {
    let h = harness::Harness::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (ca_cert, ca_key) = h.plane.ca_pem();
    std::fs::write(dir.path().join("ca.crt"), ca_cert).unwrap();
    std::fs::write(dir.path().join("ca.key"), ca_key).unwrap();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "req",
        "-new",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "c.key",
        "-out",
        "c.csr",
        "-subj",
        "/CN=admin/O=system:masters",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "c.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "c.crt",
        "-days",
        "1",
    ]);
    let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
    let kubeconfig = h
        .plane
        .certificate_kubeconfig_yaml(&read("c.crt"), &read("c.key"));
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, &kubeconfig).unwrap();

    let out = mimeo()
        .args(["run", "--http-addr", "127.0.0.1:0"])
        .env("KUBECONFIG", &path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("mimeo run: {stderr}");
    assert!(!out.status.success());
    let words = "X.509 version 1";
    assert!(stderr.contains(words) && stderr.contains("version 3"), "{stderr}");

    h.namespace("mimeo-system", &[], &[]).await;
    h.register_cluster("v1-cert", &kubeconfig, serde_json::json!({}))
        .await;
    let api = kube::Api::<mimeo::api::RemoteCluster>::all(h.client.clone());
    let message = harness::eventually("the RemoteCluster's status", || async {
        let rc = api.get_opt("v1-cert").await.unwrap()?;
        let ready = rc.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
        Some((ready.status, ready.message))
    })
    .await;
    println!("RemoteCluster: {message:?}");
    assert_eq!(message.0, "False");
    assert!(
        message.1.contains(words) && message.1.contains("version 3"),
        "{}",
        message.1
    );
}
