//! The dashboard and the alerts (issue 33) against what mimeo really exports and what Prometheus
//! really accepts.
//!
//! - `mimeo run`, as a process against a real apiserver and a second one registered as a
//!   `RemoteCluster`, is driven until it has copies in both clusters, called a plugin that works
//!   and one that fails, and rotated a source; then `/metrics` is scraped, and every metric the
//!   dashboard's panels and variables and the alerts' expressions name (found by Prometheus's
//!   own parser: `promtool promql label-matchers set` marks each selector) must be there with at
//!   least one sample. A second replica, standing by, says it holds no shard.
//! - The PrometheusRule the chart renders passes `promtool check rules` and the cases of
//!   `tests/fixtures/alerts.test.yaml` (`promtool test rules`), which fire and do not fire each
//!   alert; docs/operator.md's table of alerts gives each expression as the chart renders it.
//! - Every query of the dashboard parses: each is a recording rule of a file that
//!   `promtool check rules` checks, the dashboard's variables replaced as Grafana would.
//!
//! `helm template` renders the ConfigMap and the PrometheusRule only when enabled:
//! `tests/install/helm.rs` (`lint_and_template_with_each_switch`). promtool comes from
//! `tests/support/build-promtool.sh`, which the first test to need it runs (about ten minutes cold).

use crate::harness;

use harness::{Harness, WAIT, eventually_within};
use mimeo_envtest::ControlPlane;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const NAMESPACE: &str = "mimeo-system";
const RELEASE: &str = "mimeo";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn promtool() -> PathBuf {
    mimeo_envtest::promtool().unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a tool and returns its output; panics when it cannot be started.
fn run(program: &Path, args: &[&str], dir: Option<&Path>) -> Output {
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null());
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    command
        .output()
        .unwrap_or_else(|e| panic!("running {} {args:?}: {e}", program.display()))
}

/// Runs a tool, panicking with its output unless it succeeds; returns its stdout.
fn ok(program: &Path, args: &[&str], dir: Option<&Path>) -> String {
    let output = run(program, args, dir);
    assert!(
        output.status.success(),
        "{} {args:?} failed ({}):\n{}{}",
        program.display(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

// ---------------------------------------------------------------------------------------------
// what the dashboard and the alerts query

/// The chart's PrometheusRule, rendered as release `mimeo` in mimeo-system with the
/// ServiceMonitor on, as an operator would install it.
fn rendered_rule() -> Value {
    let helm = mimeo_envtest::helm().unwrap_or_else(|e| panic!("{e}"));
    let home = tempfile::tempdir().unwrap();
    let chart = repo().join("charts/mimeo");
    let output = Command::new(&helm)
        .args([
            "template",
            RELEASE,
            chart.to_str().unwrap(),
            "--namespace",
            NAMESPACE,
            "--set",
            "prometheusRule.enabled=true",
            "--set",
            "serviceMonitor.enabled=true",
            "--show-only",
            "templates/prometheusrule.yaml",
        ])
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .env("KUBECONFIG", home.path().join("no-kubeconfig"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "helm template failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_yaml_ng::from_slice(&output.stdout).unwrap()
}

/// The rule's groups as a Prometheus rule file.
fn rule_file(rule: &Value) -> String {
    serde_yaml_ng::to_string(&json!({"groups": rule["spec"]["groups"]})).unwrap()
}

/// Every alert's expression, by alert name.
fn alert_exprs(rule: &Value) -> BTreeMap<String, String> {
    rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .map(|r| {
            (
                r["alert"].as_str().unwrap().to_owned(),
                r["expr"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn dashboard() -> Value {
    let path = repo().join("charts/mimeo/dashboards/mimeo.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Replaces the dashboard's variables as Grafana would before it sends a query.
fn as_grafana_sends(expr: &str) -> String {
    expr.replace("$__rate_interval", "2m")
        .replace("$__range", "6h")
        .replace("$namespace", ".*")
        .replace("$job", ".*")
}

/// Every query of the dashboard, variables replaced, by where it is: each panel target's
/// `expr`, and the selector of each `label_values(<selector>, <label>)` variable.
fn dashboard_queries(dashboard: &Value) -> BTreeMap<String, String> {
    let mut queries = BTreeMap::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert!(
            panel
                .get("panels")
                .is_none_or(|p| p.as_array().unwrap().is_empty()),
            "panel {} nests panels, which this test does not read",
            panel["title"]
        );
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            let at = format!(
                "panel {} {:?} target {}",
                panel["id"], panel["title"], target["refId"]
            );
            queries.insert(at, as_grafana_sends(expr));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]["query"].as_str().unwrap();
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .and_then(|q| q.rsplit_once(','))
            .map(|(selector, _label)| selector.trim())
            .unwrap_or_else(|| panic!("variable {}: not label_values(...): {query}", variable["name"]));
        queries.insert(format!("variable {}", variable["name"]), as_grafana_sends(inner));
    }
    queries
}

/// The metric names a PromQL expression selects, as Prometheus's parser finds them: promtool
/// adds a marker matcher to every vector selector, and the names are read off those.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let marked = ok(
        &promtool(),
        &[
            "--experimental",
            "promql",
            "label-matchers",
            "set",
            expr,
            "mimeo_selector_marker",
            "x",
        ],
        None,
    );
    let named = regex::Regex::new(r#"([a-zA-Z_:][a-zA-Z0-9_:]*)\{[^{}]*mimeo_selector_marker="x""#).unwrap();
    let by_matcher =
        regex::Regex::new(r#"\{[^{}]*__name__="([^"]+)"[^{}]*mimeo_selector_marker="x""#).unwrap();
    let found: Vec<String> = named
        .captures_iter(&marked)
        .chain(by_matcher.captures_iter(&marked))
        .map(|c| c[1].to_owned())
        .collect();
    assert_eq!(
        found.len(),
        marked.matches("mimeo_selector_marker").count(),
        "{expr}: a selector whose metric name was not found in\n{marked}"
    );
    found.into_iter().collect()
}

#[test]
fn promtool_is_the_pinned_prometheus() {
    let version = ok(&promtool(), &["--version"], None);
    assert!(version.contains("promtool, version 3.16.0"), "{version}");
}

/// The marker finds every selector's name, and the names of nothing else (functions, labels,
/// aggregation clauses).
#[test]
fn metric_names_are_found_by_the_parser() {
    let found = metric_names(
        r#"histogram_quantile(0.99, sum by (plugin, le) (rate(a_bucket{job="x"}[5m])))
           / on (plugin) group_left sum by (plugin) (b_total) or absent(c{state!~"Synced"})
           and {__name__="d"} unless vector(1)"#,
    );
    let expected: BTreeSet<String> = ["a_bucket", "b_total", "c", "d"].map(String::from).into();
    assert_eq!(found, expected);
}

/// The alerts pass `promtool check rules` and their own cases, and every alert has a case where
/// it fires and one where it does not.
#[test]
fn the_alerts_pass_promtool_and_their_test_cases() {
    let rule = rendered_rule();
    let alerts = alert_exprs(&rule);
    let expected: BTreeSet<&str> = [
        "MimeoCopiesNotInSync",
        "MimeoCopyFlapping",
        "MimeoRemoteClusterUnreachable",
        "MimeoPluginFailing",
        "MimeoRulesRetrying",
        "MimeoNoLeader",
    ]
    .into();
    assert_eq!(
        alerts.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        expected
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("mimeo-rules.yaml"), rule_file(&rule)).unwrap();
    let cases = repo().join("tests/fixtures/alerts.test.yaml");
    std::fs::copy(&cases, dir.path().join("alerts.test.yaml")).unwrap();
    let checked = ok(
        &promtool(),
        &["check", "rules", "mimeo-rules.yaml"],
        Some(dir.path()),
    );
    assert!(checked.contains("SUCCESS: 6 rules found"), "{checked}");
    let tested = ok(
        &promtool(),
        &["test", "rules", "alerts.test.yaml"],
        Some(dir.path()),
    );
    assert!(tested.contains("SUCCESS"), "{tested}");

    // Each alert fires in some case and stays quiet in another.
    let cases: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&cases).unwrap()).unwrap();
    let mut fired = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for case in cases["tests"].as_array().unwrap() {
        for check in case["alert_rule_test"].as_array().unwrap() {
            let name = check["alertname"].as_str().unwrap().to_owned();
            match check["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()) {
                true => fired.insert(name),
                false => quiet.insert(name),
            };
        }
    }
    for alert in &expected {
        assert!(fired.contains(*alert), "no case where {alert} fires");
        assert!(quiet.contains(*alert), "no case where {alert} stays quiet");
    }

    // docs/operator.md's table says what the chart renders.
    let docs = std::fs::read_to_string(repo().join("docs/operator.md")).unwrap();
    for (alert, expr) in &alerts {
        let group = &rule["spec"]["groups"][0]["rules"];
        let rendered = group
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["alert"] == alert.as_str())
            .unwrap();
        let mut said = expr
            .replace(r#"job="mimeo", namespace="mimeo-system", "#, "")
            .replace(r#"job="mimeo", namespace="mimeo-system""#, "")
            .replace("{}", "")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .replace("( ", "(")
            .replace(" )", ")");
        if let Some(wait) = rendered["for"].as_str() {
            said = format!("{said} for {wait}");
        }
        let row = format!("| [`{alert}`](#{}) |", alert.to_lowercase());
        let line = docs
            .lines()
            .find(|l| l.starts_with(&row))
            .unwrap_or_else(|| panic!("docs/operator.md has no row {row}"));
        let documented = line.rsplit(" | `").next().unwrap().trim_end_matches(" |");
        let documented = documented.replacen('`', "", 1).replace("\\|", "|");
        assert_eq!(documented, said, "docs/operator.md's expression of {alert}");
    }

    // promtool's test has teeth: the same cases fail against an alert that never fires.
    let broken = rule_file(&rule).replace("> 0", "> 1e9");
    std::fs::write(dir.path().join("mimeo-rules.yaml"), broken).unwrap();
    let failed = run(
        &promtool(),
        &["test", "rules", "alerts.test.yaml"],
        Some(dir.path()),
    );
    assert!(
        !failed.status.success(),
        "the cases pass against alerts that never fire"
    );
}

/// Every query of the dashboard parses (as a recording rule `promtool check rules` checks), and
/// every panel asks the dashboard's data source variable.
#[test]
fn the_dashboards_queries_parse_and_use_its_data_source() {
    let dashboard = dashboard();
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    assert!(
        variables
            .iter()
            .any(|v| v["type"] == "datasource" && v["name"] == "datasource" && v["query"] == "prometheus"),
        "no Prometheus data source variable: {variables:?}"
    );
    for panel in dashboard["panels"].as_array().unwrap() {
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{}", panel["title"]);
        for target in panel["targets"].as_array().unwrap() {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{}", panel["title"]);
        }
    }
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() > 30, "{} queries", queries.len());
    let rules: Vec<Value> = queries
        .iter()
        .enumerate()
        .map(|(i, (_, expr))| json!({"record": format!("dashboard:query_{i}"), "expr": expr}))
        .collect();
    let file = serde_yaml_ng::to_string(&json!({"groups": [{"name": "dashboard", "rules": rules}]})).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dashboard.yaml");
    std::fs::write(&path, &file).unwrap();
    let output = run(&promtool(), &["check", "rules", path.to_str().unwrap()], None);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "the dashboard's queries do not all parse:\n{said}\n{}",
        queries
            .iter()
            .enumerate()
            .map(|(i, (at, expr))| format!("dashboard:query_{i} = {at}: {expr}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The check has teeth.
    std::fs::write(&path, file.replace("sum by (state)", "sum by (state")).unwrap();
    let broken = run(&promtool(), &["check", "rules", path.to_str().unwrap()], None);
    assert!(!broken.status.success(), "a query that does not parse passed");
}

// ---------------------------------------------------------------------------------------------
// against a running mimeo

/// `mimeo run` as a child process, killed when dropped.
struct Controller {
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Controller {
    fn start(plane: &ControlPlane, pod: &str) -> Controller {
        let dir = tempfile::Builder::new()
            .prefix("mimeo-observability-")
            .tempdir()
            .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = dir.path().join("mimeo.log");
        let plugins = harness::plugin_dir();
        let child = Command::new(env!("CARGO_BIN_EXE_mimeo"))
            .args([
                "run",
                "--log-format=json",
                &format!("--http-addr=127.0.0.1:{port}"),
                "--leader-elect",
                "--shards=1",
                &format!("--leader-elect-namespace={NAMESPACE}"),
                &format!("--plugin-dir={}", plugins.display()),
                &format!("--plugin-cache-dir={}", dir.path().join("plugins").display()),
                &format!("--artifact-cache-dir={}", dir.path().join("artifacts").display()),
            ])
            .env("KUBECONFIG", plane.kubeconfig_path())
            .env("POD_NAME", pod)
            .env("POD_NAMESPACE", NAMESPACE)
            .env_remove("MIMEO_ALLOW_KINDS")
            .env_remove("MIMEO_WATCH_NAMESPACE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting mimeo run");
        Controller {
            child,
            port,
            log,
            _dir: dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET /metrics`, or `None` while it does not answer.
    async fn scrape(&self) -> Option<String> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .ok()?;
        let request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        let response = String::from_utf8(response).ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        if !head.starts_with("HTTP/1.1 200") {
            return None;
        }
        // Prometheus parses what the content type says: the text format's parser takes
        // `prometheus-client`'s counters for untyped.
        assert!(
            head.to_lowercase()
                .contains("content-type: application/openmetrics-text; version=1.0.0"),
            "{head}"
        );
        Some(body.to_owned())
    }
}

/// The metric names with at least one sample in a scrape, with each one's sample lines.
fn samples(scrape: &str) -> BTreeMap<String, Vec<String>> {
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in scrape.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        found
            .entry(line[..end].to_owned())
            .or_default()
            .push(line.to_owned());
    }
    found
}

/// One sample's value, the first whose line contains every one of `parts`.
fn value(samples: &BTreeMap<String, Vec<String>>, name: &str, parts: &[&str]) -> Option<f64> {
    samples
        .get(name)?
        .iter()
        .find(|l| parts.iter().all(|p| l.contains(p)))?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()
}

/// Something the test drove, as a sample shows it: what it is, the metric, parts of the sample's
/// labels, and what its value must be.
type Shown = (
    &'static str,
    &'static str,
    &'static [&'static str],
    fn(f64) -> bool,
);

/// What the scrape must show besides every name being there: the very things the test drove.
fn driven(samples: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let checks: Vec<Shown> = vec![
        (
            "copies in B",
            "mimeo_cluster_copies",
            &[r#"remote_cluster="b""#, r#"state="Synced""#],
            |v| v >= 1.0,
        ),
        (
            "local copies",
            "mimeo_cluster_copies",
            &[r#"remote_cluster="(local)""#, r#"state="Synced""#],
            |v| v >= 2.0,
        ),
        (
            "a PluginFailed copy",
            "mimeo_copies",
            &[r#"state="PluginFailed""#],
            |v| v >= 1.0,
        ),
        (
            "B ready",
            "mimeo_remote_cluster_ready",
            &[r#"remote_cluster="b""#],
            |v| v == 1.0,
        ),
        (
            "rules using B",
            "mimeo_remote_cluster_rules",
            &[r#"remote_cluster="b""#],
            |v| v >= 1.0,
        ),
        (
            "calls of filter-keys",
            "mimeo_plugin_calls_total",
            &[r#"plugin="file://filter-keys.wasm""#],
            |v| v >= 1.0,
        ),
        (
            "failures of misbehave",
            "mimeo_plugin_failures_total",
            &[r#"plugin="file://misbehave.wasm""#, r#"reason="failed""#],
            |v| v >= 1.0,
        ),
        ("a rule retrying", "mimeo_rules_retrying", &[], |v| v >= 1.0),
        ("the leader's shard", "mimeo_shard_held", &[r#"shard="0""#], |v| {
            v == 1.0
        }),
        ("a rotation", "mimeo_propagation_seconds_count", &[], |v| v >= 1.0),
        (
            "requests to this apiserver",
            "mimeo_apiserver_requests_total",
            &[r#"remote_cluster="(local)""#, r#"verb="APPLY""#, r#"code="200""#],
            |v| v >= 1.0,
        ),
        (
            "requests to B",
            "mimeo_apiserver_requests_total",
            &[r#"remote_cluster="b""#, r#"verb="WATCH""#],
            |v| v >= 1.0,
        ),
        ("resident memory", "process_resident_memory_bytes", &[], |v| {
            v > 1e6
        }),
    ];
    checks
        .into_iter()
        .filter(|(_, name, parts, holds)| !value(samples, name, parts).is_some_and(holds))
        .map(|(what, name, parts, _)| format!("{what} ({name} {parts:?})"))
        .collect()
}

/// mimeo, running with copies here and in a `RemoteCluster`, a plugin that works and one that
/// fails, and a rotated source, exports every metric the dashboard and the alerts query.
#[tokio::test]
async fn every_metric_the_dashboard_and_the_alerts_query_is_exported() {
    // The names first: a promtool that is missing fails here, before any cluster starts.
    let mut wanted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (at, expr) in dashboard_queries(&dashboard()) {
        for name in metric_names(&expr) {
            wanted.entry(name).or_default().insert(format!("dashboard {at}"));
        }
    }
    for (alert, expr) in alert_exprs(&rendered_rule()) {
        for name in metric_names(&expr) {
            wanted.entry(name).or_default().insert(format!("alert {alert}"));
        }
    }
    for expected in [
        "mimeo_apiserver_requests_total",
        "mimeo_cluster_copies",
        "mimeo_plugin_calls_total",
        "mimeo_remote_cluster_ready",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
    ] {
        assert!(wanted.contains_key(expected), "{expected} not among {wanted:?}");
    }

    let h = Harness::without_controller().await;
    let b = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let b_client = b.client().await.unwrap();
    for ns in [NAMESPACE, "platform"] {
        h.namespace(ns, &[], &[]).await;
    }
    h.namespace("tenant", &[], &[("mimeo.dev/accept-from", "platform")])
        .await;
    b.create_namespace("tenant", &[]).await.unwrap();
    h.register_cluster("b", &b.token_kubeconfig_yaml(b.admin_token()), json!({}))
        .await;
    h.put_secret("platform", "creds", &[("username", "u0"), ("password", "p0")])
        .await;
    let controller = Controller::start(&h.plane, "mimeo-0");
    let rule = |kind: &str, name: &str, targets: Value, transforms: Value| {
        let mut metadata = json!({"name": name});
        let mut source = json!({"kind": "Secret", "name": "creds"});
        match kind {
            "SyncRule" => metadata["namespace"] = json!("platform"),
            _ => source["namespace"] = json!("platform"),
        }
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": kind, "metadata": metadata,
               "spec": {"source": source, "targets": targets, "transforms": transforms}})
    };
    // Copies here and in B, through a plugin that works...
    h.apply(rule(
        "ClusterSyncRule",
        "everywhere",
        json!([{"namespace": "tenant"}, {"cluster": "b", "namespace": "tenant"}]),
        json!([{"plugin": "file://filter-keys.wasm", "config": {"include": ["password"]}}]),
    ))
    .await;
    h.apply(rule(
        "SyncRule",
        "plain",
        json!([{"namespace": "tenant", "name": "plain"}]),
        json!([]),
    ))
    .await;
    // ... and through one that fails on every copy.
    h.apply(rule(
        "SyncRule",
        "failing",
        json!([{"namespace": "tenant", "name": "failing"}]),
        json!([{"plugin": "file://misbehave.wasm", "config": {"do": "error"}}]),
    ))
    .await;
    // A rotation, once the first copies are there.
    let copies_b = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(b_client, "tenant");
    eventually_within("the copy in B", 3 * WAIT, || async {
        copies_b.get_opt("creds").await.ok().flatten()
    })
    .await;
    h.put_secret("platform", "creds", &[("username", "u1"), ("password", "p1")])
        .await;

    let mut last = String::new();
    let scraped = tokio::time::timeout(5 * WAIT, async {
        loop {
            if let Some(scrape) = controller.scrape().await {
                let found = samples(&scrape);
                if wanted.keys().all(|name| found.contains_key(name)) && driven(&found).is_empty() {
                    return found;
                }
                last = scrape;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    scraped.unwrap_or_else(|_| {
        let found = samples(&last);
        let missing: Vec<String> = wanted
            .iter()
            .filter(|(name, _)| !found.contains_key(*name))
            .map(|(name, by)| format!("{name} (queried by {})", by.iter().cloned().collect::<Vec<_>>().join(", ")))
            .collect();
        panic!(
            "after {:?}:\nmetrics queried but not exported:\n  {}\nnot shown yet: {:?}\n--- last scrape ---\n{last}\n--- mimeo's log ---\n{}",
            5 * WAIT,
            missing.join("\n  "),
            driven(&found),
            controller.log()
        )
    });
    println!(
        "{} metrics queried by the dashboard and the alerts, all exported: {}",
        wanted.len(),
        wanted.keys().cloned().collect::<Vec<_>>().join(", ")
    );

    // A replica standing by says it holds no shard, so that a Lease nobody holds shows
    // (MimeoNoLeader) rather than falling silent.
    let standby = Controller::start(&h.plane, "mimeo-1");
    eventually_within("the standby's metrics", WAIT, || async {
        let found = samples(&standby.scrape().await?);
        (value(&found, "mimeo_shard_held", &[r#"shard="0""#]) == Some(0.0)
            && standby.log().contains("standing by for leadership"))
        .then_some(())
    })
    .await;
    let leader = samples(&controller.scrape().await.unwrap());
    assert_eq!(value(&leader, "mimeo_shard_held", &[r#"shard="0""#]), Some(1.0));
}
