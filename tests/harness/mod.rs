//! Shared scaffolding for the controller's integration tests: a real control plane with mimeo's
//! CRDs, the controller running in-process against it, and helpers to wait for convergence.
#![allow(dead_code)]

pub mod openmcp_provider;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use mimeo::controller::{self, ControllerConfig, SealKeySource};
use mimeo::metrics::Metrics;
use mimeo::plugin::CompilerProcess;
use mimeo::server::Readiness;
use mimeo_envtest::ControlPlane;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// How long a test waits for a state it expects. Generous: the machines are shared, and a plugin's
/// first compile alone took over 30 s under load once (timings are asserted apart from this).
pub const WAIT: Duration = Duration::from_secs(60);

/// A control plane with mimeo's CRDs and, while started, the controller.
pub struct Harness {
    pub plane: ControlPlane,
    pub client: Client,
    pub metrics: Arc<Metrics>,
    config: ControllerConfig,
    /// The controller holds only the Helm chart's RBAC, rendered with these values (`--set`
    /// arguments), whatever `MIMEO_TEST_CONTROLLER_RBAC` says.
    chart_rbac: Option<Vec<String>>,
    /// The chart's ServiceAccount, once its RBAC was applied (at the first start only).
    chart_account: Option<String>,
    running: Option<(tokio::sync::watch::Sender<bool>, JoinHandle<()>)>,
    /// The key the controller seals copies with, the same across its restarts.
    pub seal_key: mimeo::sync::seal::SealKey,
}

impl Harness {
    /// A fresh control plane with the CRDs installed and the controller running.
    pub async fn start() -> Self {
        Self::start_with(ControllerConfig::default()).await
    }

    /// Like [`Harness::start`], with the controller configured as given.
    pub async fn start_with(config: ControllerConfig) -> Self {
        let mut h = Self::without_controller().await;
        h.config = config;
        h.start_controller().await;
        h
    }

    /// Like [`Harness::start_with`], the controller holding only the Helm chart's RBAC: for tests
    /// of what a tenant can make mimeo do with the rights an installation gives it.
    pub async fn start_with_chart_rbac(config: ControllerConfig) -> Self {
        Self::start_with_chart_values(config, &[]).await
    }

    /// Like [`Harness::start_with_chart_rbac`], the chart rendered with these `helm template`
    /// arguments (`--set-json`, `nextTo.kinds=[...]`).
    pub async fn start_with_chart_values(config: ControllerConfig, values: &[&str]) -> Self {
        let mut h = Self::without_controller().await;
        h.config = config;
        h.chart_rbac = Some(values.iter().map(|v| v.to_string()).collect());
        h.start_controller().await;
        h
    }

    pub async fn without_controller() -> Self {
        init_logs();
        let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
        let crds = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crds/mimeo.yaml");
        plane
            .install_crds(&[crds])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let client = plane.client().await.unwrap();
        Harness {
            plane,
            client,
            metrics: Arc::new(Metrics::new()),
            running: None,
            config: ControllerConfig::default(),
            chart_rbac: None,
            chart_account: None,
            seal_key: mimeo::sync::seal::SealKey::generate().unwrap(),
        }
    }

    pub async fn start_controller(&mut self) {
        assert!(self.running.is_none(), "the controller is already running");
        let (tx, mut rx) = tokio::sync::watch::channel(false);
        let shutdown = async move {
            let _ = rx.wait_for(|stop| *stop).await;
        };
        self.metrics = Arc::new(Metrics::new());
        let client = match (&self.chart_rbac, &self.chart_account) {
            // Started before: the RBAC stays as the test left it, with a fresh token.
            (Some(_), Some(account)) => {
                let admin = self.plane.client().await.unwrap();
                service_account_client(&self.plane, &admin, CHART_NAMESPACE, account).await
            }
            (Some(values), None) => {
                let (client, account) = chart_client(&self.plane, values).await;
                self.chart_account = Some(account);
                client
            }
            (None, _) => controller_client(&self.plane).await,
        };
        let metrics = self.metrics.clone();
        let mut config = self.config.clone();
        // The key is the harness's (a test run has no mimeo namespace to keep it in); `mimeo run`
        // reads it from its Secret, which the binary's tests cover.
        if matches!(config.seal_key, SealKeySource::Secret { .. }) {
            config.seal_key = SealKeySource::Key(self.seal_key.clone());
        }
        // As `mimeo run` does: each plugin is compiled by a process of mimeo's own binary.
        config
            .plugin_host
            .compiler
            .get_or_insert_with(|| CompilerProcess {
                program: env!("CARGO_BIN_EXE_mimeo").into(),
                timeout: Duration::from_secs(120),
                max_memory_bytes: 1 << 30,
                max_cpu_time: Duration::from_secs(120),
            });
        let task = tokio::spawn(async move {
            controller::run(client, config, metrics, Readiness::default(), shutdown)
                .await
                .expect("the controller runs");
        });
        self.running = Some((tx, task));
    }

    /// The controller's configuration, to change before the next [`start_controller`](Self::start_controller).
    pub fn config_mut(&mut self) -> &mut ControllerConfig {
        &mut self.config
    }

    pub async fn stop_controller(&mut self) {
        let (tx, task) = self.running.take().expect("the controller is running");
        tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("the controller stops")
            .unwrap();
    }

    pub fn secrets(&self, ns: &str) -> Api<Secret> {
        Api::namespaced(self.client.clone(), ns)
    }

    pub fn config_maps(&self, ns: &str) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Creates a namespace with labels and annotations.
    pub async fn namespace(&self, name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) {
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": map(labels), "annotations": map(annotations)}
        }))
        .unwrap();
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }

    /// Merges labels and annotations into a namespace (a `null` value removes one).
    pub async fn patch_namespace(&self, name: &str, metadata: Value) {
        Api::<Namespace>::all(self.client.clone())
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": metadata})),
            )
            .await
            .unwrap();
    }

    /// Creates or replaces an Opaque Secret with string data.
    pub async fn put_secret(&self, ns: &str, name: &str, data: &[(&str, &str)]) -> Secret {
        let secret = secret(ns, name, "Opaque", data);
        self.secrets(ns)
            .patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&secret))
            .await
            .unwrap()
    }

    /// Applies any object given as JSON (a rule, a namespace, a Secret...), as the admin.
    pub async fn apply(&self, object: Value) {
        apply_with(&self.client, "test", object).await.unwrap();
    }

    /// Registers another cluster: its kubeconfig in the Secret `mimeo-system/<name>-kubeconfig`
    /// (the namespace must exist) and a `RemoteCluster` `name` with these labels.
    pub async fn register_cluster(&self, name: &str, kubeconfig: &str, labels: Value) {
        let secret_name = format!("{name}-kubeconfig");
        let secret = secret("mimeo-system", &secret_name, "Opaque", &[("value", kubeconfig)]);
        self.secrets("mimeo-system")
            .patch(
                &secret_name,
                &PatchParams::apply("test").force(),
                &Patch::Apply(&secret),
            )
            .await
            .unwrap();
        self.apply(json!({
            "apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster",
            "metadata": {"name": name, "labels": labels},
            "spec": {"kubeconfigSecretRef": {"namespace": "mimeo-system", "name": secret_name}},
        }))
        .await;
    }

    /// The names of the Secrets in `ns` that carry mimeo's label, sorted: the copies there.
    pub async fn copy_names(&self, ns: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .secrets(ns)
            .list(&kube::api::ListParams::default().labels("mimeo.dev/managed-by=mimeo"))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .collect();
        names.sort();
        names
    }

    pub async fn delete_rule(&self, ns: &str, name: &str) {
        Api::<mimeo::api::SyncRule>::namespaced(self.client.clone(), ns)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }

    pub async fn rule(&self, ns: &str, name: &str) -> Option<mimeo::api::SyncRule> {
        Api::<mimeo::api::SyncRule>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
            .unwrap()
    }

    /// Waits until the rule's Ready condition has this status and reason; returns the rule.
    pub async fn wait_ready(&self, ns: &str, name: &str, status: &str, reason: &str) -> mimeo::api::SyncRule {
        let deadline = Instant::now() + WAIT;
        loop {
            let rule = self.rule(ns, name).await;
            let ready = rule.as_ref().and_then(|r| {
                r.status
                    .as_ref()?
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "Ready")
                    .cloned()
            });
            if ready
                .as_ref()
                .is_some_and(|r| r.status == status && r.reason == reason)
            {
                return rule.unwrap();
            }
            if Instant::now() > deadline {
                let last = rule.and_then(|r| r.status);
                panic!(
                    "timed out waiting for SyncRule {ns}/{name} Ready={status} ({reason}); last status: {last:#?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Total write requests the apiserver has served for these resources, from its own metrics.
    pub async fn apiserver_writes(&self, resources: &[&str]) -> u64 {
        apiserver_writes(&self.client, resources).await
    }
}

/// The controller's `mimeo_plugin_chains_total` by result: (run, remembered).
pub fn chain_counts(metrics: &Metrics) -> (u64, u64) {
    let text = metrics.encode();
    let count = |result: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("mimeo_plugin_chains_total{{result=\"{result}\"}} ")))
            .map_or(0, |n| n.trim().parse().unwrap())
    };
    (count("run"), count("remembered"))
}

/// Everything the controllers of this test binary logged at debug and above, since it started.
static LOGGED: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

/// Logs to the test's output (filtered by `MIMEO_TEST_LOG`, default `mimeo=info`) and, at debug,
/// into [`LOGGED`], for tests of what the log must never say.
fn init_logs() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer};
    struct Captured;
    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            LOGGED
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let filter = std::env::var("MIMEO_TEST_LOG").unwrap_or_else(|_| "mimeo=info".into());
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_test_writer()
                .with_filter(EnvFilter::new(filter)),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(|| Captured)
                .with_filter(EnvFilter::new("mimeo=debug")),
        )
        .try_init();
}

/// What the controllers of this test binary have logged so far (debug and above).
pub fn logged() -> String {
    String::from_utf8_lossy(&LOGGED.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
}

/// Total write requests an apiserver has served for these resources since it started, from its
/// own metrics.
pub async fn apiserver_writes(client: &Client, resources: &[&str]) -> u64 {
    apiserver_write_lines(client, resources)
        .await
        .iter()
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Write requests an apiserver carried out (answered 2xx) for these resources since it started.
/// An apiserver that has just started refuses requests for a moment (its caches still filling):
/// a client's tries then are requests, not writes.
pub async fn apiserver_writes_done(client: &Client, resources: &[&str]) -> u64 {
    apiserver_write_lines(client, resources)
        .await
        .iter()
        .filter(|l| l.contains("code=\"2"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The apiserver's `apiserver_request_total` lines of write requests for these resources, each
/// with its verb, code and count.
pub async fn apiserver_write_lines(client: &Client, resources: &[&str]) -> Vec<String> {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(request).await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| {
            [
                "verb=\"POST\"",
                "verb=\"PUT\"",
                "verb=\"PATCH\"",
                "verb=\"APPLY\"",
                "verb=\"DELETE\"",
            ]
            .iter()
            .any(|v| l.contains(v))
        })
        .filter(|l| resources.iter().any(|r| l.contains(&format!("resource=\"{r}\""))))
        .map(str::to_owned)
        .collect()
}

/// The client the controller runs with: cluster-admin, or with `MIMEO_TEST_CONTROLLER_RBAC=chart`
/// the Helm chart's ServiceAccount (its RBAC rendered by `helm template` with default values and
/// applied here), so that a test run proves the chart's RBAC enough for what the test does.
pub async fn controller_client(plane: &ControlPlane) -> Client {
    match std::env::var("MIMEO_TEST_CONTROLLER_RBAC").as_deref() {
        Ok("chart") => chart_client(plane, &[]).await.0,
        Ok(other) if !other.is_empty() => panic!("MIMEO_TEST_CONTROLLER_RBAC={other}: only `chart` is known"),
        _ => plane.client().await.unwrap(),
    }
}

/// Where the tests install the chart's ServiceAccount.
const CHART_NAMESPACE: &str = "mimeo-system";

/// The chart's RBAC applied, and a client of its ServiceAccount (with that account's name).
async fn chart_client(plane: &ControlPlane, values: &[String]) -> (Client, String) {
    const NAMESPACE: &str = CHART_NAMESPACE;
    let admin = plane.client().await.unwrap();
    let helm = mimeo_envtest::helm().unwrap_or_else(|e| panic!("{e}"));
    let chart = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("charts/mimeo");
    let output = std::process::Command::new(helm)
        .args(["template", "mimeo"])
        .arg(&chart)
        .args(["--namespace", NAMESPACE])
        .args(values)
        .output()
        .expect("running helm template");
    assert!(
        output.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let _ = Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap(),
        )
        .await;
    let mut account = None;
    let text = String::from_utf8(output.stdout).unwrap();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let object: Value = serde::Deserialize::deserialize(document).unwrap();
        let kind = object["kind"].as_str().unwrap_or_default();
        if ![
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
        ]
        .contains(&kind)
        {
            continue;
        }
        if kind == "ServiceAccount" {
            account = object["metadata"]["name"].as_str().map(str::to_owned);
        }
        let gvk = kube::core::GroupVersionKind::try_from(&kube::core::TypeMeta {
            api_version: object["apiVersion"].as_str().unwrap().into(),
            kind: kind.into(),
        })
        .unwrap();
        let (resource, _) = kube::discovery::pinned_kind(&admin, &gvk).await.unwrap();
        let name = object["metadata"]["name"].as_str().unwrap();
        let api: Api<kube::api::DynamicObject> = match object["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(admin.clone(), ns, &resource),
            None => Api::all_with(admin.clone(), &resource),
        };
        api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(&object))
            .await
            .unwrap_or_else(|e| panic!("applying the chart's {kind} {name}: {e}"));
    }
    let account = account.expect("the chart renders a ServiceAccount");
    let client = service_account_client(plane, &admin, NAMESPACE, &account).await;
    (client, account)
}

/// A client of the plane authenticated as ServiceAccount `namespace/name`, with a token of its
/// own from a TokenRequest made by `admin`.
async fn service_account_client(plane: &ControlPlane, admin: &Client, namespace: &str, name: &str) -> Client {
    let kubeconfig = service_account_kubeconfig(plane, admin, namespace, name).await;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// A kubeconfig authenticating as ServiceAccount `namespace/name`, with a token of its own.
pub async fn service_account_kubeconfig(
    plane: &ControlPlane,
    admin: &Client,
    namespace: &str,
    name: &str,
) -> String {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .expect("a TokenRequest answer has a status")
        .token;
    plane.token_kubeconfig_yaml(&token)
}

/// A tenant: a ServiceAccount `tenant` of `namespace` whose Role there allows Secrets,
/// ConfigMaps and `SyncRule`s, and nothing else anywhere. Returns its client, authenticated
/// with a token of its own.
pub async fn tenant_client(h: &Harness, namespace: &str) -> Client {
    h.apply(json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "tenant", "namespace": namespace}}))
        .await;
    h.apply(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "tenant", "namespace": namespace},
        "rules": [
            {"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["*"]},
            {"apiGroups": ["mimeo.dev"], "resources": ["syncrules"], "verbs": ["*"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["get", "list"]},
        ]}),
    )
    .await;
    h.apply(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "tenant", "namespace": namespace},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
                   "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}]}),
    )
    .await;
    service_account_client(&h.plane, &h.client, namespace, "tenant").await
}

/// Applies an object as `client` (a tenant), with server-side apply.
pub async fn apply_as(client: &Client, object: Value) -> kube::Result<()> {
    apply_with(client, "tenant", object).await
}

/// Server-side applies any object given as JSON with `client`, under field manager `manager`.
async fn apply_with(client: &Client, manager: &str, object: Value) -> kube::Result<()> {
    let gvk = kube::core::GroupVersionKind::try_from(&kube::core::TypeMeta {
        api_version: object["apiVersion"].as_str().unwrap().into(),
        kind: object["kind"].as_str().unwrap().into(),
    })
    .unwrap();
    let resource = kube::core::ApiResource::from_gvk(&gvk);
    let name = object["metadata"]["name"].as_str().unwrap().to_owned();
    let api: Api<kube::api::DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    api.patch(
        &name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(&object),
    )
    .await
    .map(|_| ())
}

/// Runs kubectl (client-side, as people run it) against the cluster of `kubeconfig` with
/// `stdin` as its input: whether it succeeded, and its stdout then its stderr.
pub fn run_kubectl(kubeconfig: &std::path::Path, args: &[&str], stdin: &[u8]) -> (bool, String) {
    use std::io::Write;
    let mut child = std::process::Command::new(mimeo_envtest::binaries().unwrap().kubectl())
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// [`run_kubectl`] that must succeed: its output.
pub fn kubectl(kubeconfig: &std::path::Path, args: &[&str], stdin: &[u8]) -> String {
    let (succeeded, text) = run_kubectl(kubeconfig, args, stdin);
    assert!(succeeded, "kubectl {args:?}: {text}");
    text
}

/// `kubectl apply -f -` (client-side) of `object` on `plane`, as users apply their files and
/// cluster managers their manifests.
pub fn kubectl_apply(plane: &ControlPlane, object: &Value) {
    kubectl(
        plane.kubeconfig_path(),
        &["apply", "-f", "-"],
        object.to_string().as_bytes(),
    );
}

/// Runs `mimeo diff -f` on `yaml` (one or more documents) as the user of the kubeconfig in
/// `kubeconfig` (its YAML), with a fresh plugin cache: the exit code, and stdout then stderr.
pub fn mimeo_diff(kubeconfig: &str, yaml: &str, extra: &[&str]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kubeconfig");
    std::fs::write(&config, kubeconfig).unwrap();
    let file = dir.path().join("rule.yaml");
    std::fs::write(&file, yaml).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mimeo"))
        .args(["diff", "-f"])
        .arg(&file)
        .arg("--cache-dir")
        .arg(dir.path().join("plugin-cache"))
        .args(extra)
        .env("KUBECONFIG", &config)
        .env_remove("MIMEO_PLUGIN_CACHE_DIR")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code().unwrap_or(-1), text)
}

pub fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

pub fn secret(ns: &str, name: &str, type_: &str, data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: kube::core::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        type_: Some(type_.into()),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

/// The value of a Secret key as text.
pub fn secret_value(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()?
        .get(key)
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
}

/// Polls `check` until it returns `Some`, or panics after [`WAIT`] naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_within(what, WAIT, check).await
}

/// [`eventually`] with another wait, for what is known to take long (a large plugin's first
/// compile while other tests compile theirs).
pub async fn eventually_within<T, F, Fut>(what: &str, wait: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + wait;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        if Instant::now() > deadline {
            panic!("timed out after {wait:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks that `check` holds for `period` (to show that something does not happen).
pub async fn stays<F, Fut>(what: &str, period: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + period;
    while Instant::now() < deadline {
        assert!(check().await, "no longer true: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The directory of built plugins (`plugins/build.sh` builds them on first use; cargo makes a
/// second build cheap).
pub fn plugin_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("plugins/build.sh");
        let output = std::process::Command::new("bash")
            .arg(&script)
            .output()
            .expect("running plugins/build.sh");
        assert!(
            output.status.success(),
            "plugins/build.sh failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        PathBuf::from(
            stdout
                .lines()
                .last()
                .expect("plugins/build.sh prints its output directory")
                .trim(),
        )
    })
    .clone()
}

/// An example plugin of `plugins/examples/<lang>` (`add-annotation-<lang>.wasm`), built with its
/// `build.sh` on first use in this process (which installs its toolchain under
/// `~/.cache/mimeo/toolchains` the first time), so that a test needing one passes on a fresh
/// machine without `plugins/examples/build-all.sh` having run first.
pub fn example_plugin(lang: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<BTreeMap<String, PathBuf>> = std::sync::Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(path) = built.get(lang) {
        return path.clone();
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("plugins/examples/{lang}/build.sh"));
    let output = std::process::Command::new("bash")
        .arg(&script)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        output.status.success(),
        "{} failed:\n{}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let out = String::from_utf8_lossy(&output.stdout);
    let dir = PathBuf::from(
        out.lines()
            .last()
            .expect("build.sh prints its output directory")
            .trim(),
    );
    let path = dir.join(format!("add-annotation-{lang}.wasm"));
    assert!(
        path.exists(),
        "{} did not write {}",
        script.display(),
        path.display()
    );
    built.insert(lang.to_owned(), path.clone());
    path
}

/// A component built to be slow and large to compile, not to run: `functions` functions, each
/// of `ops` multiplications over `locals` locals, all live across a loop that branches back
/// every tenth one (so that every block carries every local), summed at the end. Each costs
/// Cranelift far more than its size: one of 2,000 locals and 50,000 operations (0.5 MB) took
/// 37 s and 1.1 GB on a 2-core machine, 30 of 200 and 5,000 took 4.4 s and 130 MB. It is not
/// a mimeo plugin, which only a finished compile would show.
pub fn slow_to_compile_component(functions: u32, locals: u32, ops: u32) -> Vec<u8> {
    fn leb(mut n: u32, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    fn section(id: u8, body: &[u8], out: &mut Vec<u8>) {
        out.push(id);
        leb(body.len() as u32, out);
        out.extend_from_slice(body);
    }
    // A fixed pseudo-random walk over the locals (xorshift), the same bytes every run.
    let mut state = 0x9e37_79b9u32;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state % locals
    };
    let (local_get, local_set, br_if, i32_mul, i32_add) = (0x20, 0x21, 0x0d, 0x6c, 0x6a);
    let mut body = Vec::new();
    body.push(1);
    leb(locals, &mut body);
    body.push(0x7f); // i32
    body.extend_from_slice(&[0x03, 0x40]); // loop, no result
    for op in 0..ops {
        for (instruction, local) in [(local_get, next()), (local_get, next())] {
            body.push(instruction);
            leb(local, &mut body);
        }
        body.push(i32_mul);
        body.push(local_set);
        leb(next(), &mut body);
        if op % 10 == 9 {
            body.push(local_get);
            leb(next(), &mut body);
            body.extend_from_slice(&[br_if, 0]);
        }
    }
    body.push(0x0b); // end of the loop
    body.extend_from_slice(&[local_get, 0]);
    for local in 1..locals {
        body.push(local_get);
        leb(local, &mut body);
        body.push(i32_add);
    }
    body.push(0x0b);
    let mut code = Vec::new();
    leb(functions, &mut code);
    for _ in 0..functions {
        leb(body.len() as u32, &mut code);
        code.extend_from_slice(&body);
    }
    let mut types_of_functions = Vec::new();
    leb(functions, &mut types_of_functions);
    types_of_functions.resize(types_of_functions.len() + functions as usize, 0);
    let mut module = b"\0asm\x01\0\0\0".to_vec();
    section(1, &[1, 0x60, 0, 1, 0x7f], &mut module); // one type: [] -> [i32]
    section(3, &types_of_functions, &mut module); // functions of that type
    section(10, &code, &mut module);
    let mut component = b"\0asm\x0d\0\x01\0".to_vec();
    section(1, &module, &mut component); // the core module
    section(2, &[1, 0, 0, 0], &mut component); // instantiated, so that it is compiled
    component
}

/// The state of the copy at `cluster:namespace/name` as a rule's status tells it: the state the
/// status's `problems` give it, else `Synced` when the status counts copies in sync in that
/// cluster (a status names no copy in sync one by one), else `None`.
#[allow(dead_code)]
pub fn copy_state_in(
    status: &mimeo::api::RuleStatus,
    cluster: Option<&str>,
    namespace: Option<&str>,
    name: &str,
) -> Option<mimeo::api::CopyState> {
    let listed = status
        .problems
        .iter()
        .find(|c| c.cluster.as_deref() == cluster && c.namespace.as_deref() == namespace && c.name == name);
    if let Some(copy) = listed {
        return Some(copy.state);
    }
    status
        .clusters
        .iter()
        .any(|c| c.cluster.as_deref() == cluster && c.synced > 0)
        .then_some(mimeo::api::CopyState::Synced)
}

/// A plain HTTP/1.0 GET of `path` at `address` (`127.0.0.1:PORT`): the status code and the body,
/// or `None` when nothing answers there.
pub fn http_get(address: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((code, body))
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
