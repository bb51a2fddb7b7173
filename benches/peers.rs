//! Side-by-side scenario benchmark: mimeo, kubernetes-replicator v2.12.4 (built from
//! `../shared/peers/`) and, when asked, Kyverno v1.19.1 (built from its Go module by
//! `tests/support/build-kyverno.sh`), each on a fresh control plane, runs alternating (mimeo,
//! replicator, kyverno, mimeo, ...). One Secret of 1 KiB fanned out to N labelled namespaces
//! (mimeo: a `SyncRule` with a `namespaceSelector`; the replicator: `replicate-to-matching`, as its
//! README shows for fan-out; Kyverno: a `ClusterPolicy` whose generate rule clones the Secret into
//! every Namespace labelled `fan=out`, `synchronize: true`, `generateExisting: true`), then rotated
//! R times. An independent watch sees the copies. Per run: fan-out time (from the write of the
//! source, then of the rule or policy, to the last copy seen), rotation p50/p99 (a rotation that has
//! not reached every copy within the wait counts as not converged), peak resident memory and CPU
//! time of the tool's processes (Kyverno's admission controller and background controller: CPU
//! summed, peaks summed, each peak printed), the apiserver's requests by verb and resource (its own
//! metrics, WATCH excluded; the resources any of the tools touch, leases included, so every count
//! also holds the apiserver's renewals of its own identity lease, one every 10 s), and CPU and
//! requests over an idle period.
//!
//! `cargo bench --bench peers -- [--namespaces N] [--rotations R] [--runs K] [--idle-secs S]
//! [--wait-secs W] [--tools mimeo,replicator,kyverno] [--kyverno-clone-list 1] [--raw 1]
//! [--settle-ms M] [--each 1]` (defaults 100, 10, 2, 60, 30, `mimeo,replicator`, clone, no raw, 0,
//! quiet). Kyverno is not in the default: its first build takes many minutes and it asks for more
//! of the machine (two processes); `--tools mimeo,replicator,kyverno` adds it. The replicator ships
//! with client-go's default client rate limit (5 requests/s, burst 10) and no flag to change it;
//! it runs as it ships, and so does Kyverno (its own defaults: 100 requests/s, burst 200).
//!
//! Kyverno runs as two local processes, as its DEVELOPMENT.md runs it out of cluster: `--kubeconfig`
//! (each controller as a user of its own, named as its service account, in `system:masters`),
//! `--serverIP=127.0.0.1:<port>` and `--webhookServerPort=<port>` (so the webhook configurations it
//! registers, with its own CA, point at it), the `KYVERNO_*` variables a pod would have, and its
//! namespace `kyverno`. `--kyverno-clone-list 1` clones with `cloneList` (the Secrets labelled
//! `bench=source` in the source namespace) instead of `clone`.
//!
//! `--raw 1` measures the floor in each mimeo run: after each of mimeo's rotations, a plain client
//! makes the same N updates (server-side apply, mimeo's write concurrency) to Secrets of the same
//! shape in N other namespaces, seen by the same watch: a copy's labels and annotations, read after
//! the fan-out, the ones a rotation changes changing with each of its own. Its Secrets are created
//! as mimeo creates a copy (a create-only POST, so two field managers' entries); a second set,
//! created by an apply (one entry), updated the same way in turn, shows what that entry costs. `--settle-ms` waits that long after each
//! rotation, mimeo's or raw, so that neither runs while the other's tail does.
//! `MIMEO_BENCH_BINS=a,b` runs each of these mimeo binaries in every run (in turn, the order
//! swapped from run to run), to compare builds in one run; `MIMEO_BENCH_LOG` sets their log filter
//! and `MIMEO_BENCH_LOG_DIR` keeps their logs (and Kyverno's).

#[path = "support/processes.rs"]
mod processes;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use mimeo_envtest::ControlPlane;
use processes::{Mimeo, Process, apiserver_requests, apply, requests_since};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

const SOURCE_NS: &str = "bench-src";
/// Kyverno's namespace: its leases, its CA and certificate, its ConfigMaps.
const KYVERNO_NS: &str = "kyverno";
/// The users Kyverno's two controllers run as (in `system:masters`), named as their service
/// accounts in the chart: the admission controller leaves the background controller's own writes
/// alone by this name (`--backgroundServiceAccountName`).
const KYVERNO_ADMISSION_USER: &str = "system:serviceaccount:kyverno:kyverno-admission-controller";
const KYVERNO_BACKGROUND_USER: &str = "system:serviceaccount:kyverno:kyverno-background-controller";
const KYVERNO_POLICY: &str = "fan-out";

/// The resources whose requests are counted: those any of the tools reads or writes.
const RESOURCES: &[&str] = &[
    "secrets",
    "syncrules",
    "events",
    "namespaces",
    "leases",
    "configmaps",
    "updaterequests",
    "clusterpolicies",
    "policyreports",
    "clusterpolicyreports",
    "ephemeralreports",
    "clusterephemeralreports",
    "validatingwebhookconfigurations",
    "mutatingwebhookconfigurations",
];
const NAME: &str = "creds";

/// Writes in flight at once for the raw client: mimeo's own per-rule write concurrency.
const RAW_CONCURRENCY: usize = 16;

fn text_arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

fn arg(name: &str, default: u64) -> u64 {
    std::env::args()
        .skip_while(|a| a != name)
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Tool {
    Mimeo,
    Replicator,
    Kyverno,
}

/// What one run measured.
struct Run {
    /// The tool, and for mimeo which binary.
    label: String,
    fan_out: Option<Duration>,
    rotations: Vec<Option<Duration>>,
    /// The same updates by a plain client, one after each rotation (`--raw 1`), to Secrets
    /// created as copies are.
    raw: Vec<Option<Duration>>,
    /// The same again, to Secrets created by an apply.
    applied: Vec<Option<Duration>>,
    /// Requests over the rotations alone, by verb and resource.
    rotation_requests: BTreeMap<(String, String), f64>,
    /// Rule reconciles over the rotations alone (mimeo's own metric).
    rotation_reconciles: Option<f64>,
    peak_mib: f64,
    /// Each process's peak, when the tool is more than one (Kyverno).
    peaks: String,
    cpu_secs: f64,
    requests: BTreeMap<(String, String), f64>,
    idle_cpu_secs: f64,
    idle_requests: f64,
    /// The whole machine over the rotations.
    machine: MachineCpu,
}

#[tokio::main]
async fn main() {
    let namespaces = arg("--namespaces", 100) as usize;
    let rotations = arg("--rotations", 10) as usize;
    let runs = arg("--runs", 2);
    let idle = Duration::from_secs(arg("--idle-secs", 60));
    let wait = Duration::from_secs(arg("--wait-secs", 30));
    let tools = text_arg("--tools").unwrap_or_else(|| "mimeo,replicator".into());
    let options = Options {
        namespaces,
        rotations,
        idle,
        wait,
        raw: arg("--raw", 0) > 0,
        settle: Duration::from_millis(arg("--settle-ms", 0)),
        each: arg("--each", 0) > 0,
        clone_list: arg("--kyverno-clone-list", 0) > 0,
    };
    let bins: Vec<String> = match std::env::var("MIMEO_BENCH_BINS") {
        Ok(bins) if !bins.is_empty() => bins.split(',').map(str::to_owned).collect(),
        _ => vec![env!("CARGO_BIN_EXE_mimeo").to_owned()],
    };
    let replicator = if tools.contains("replicator") {
        build_script("../shared/peers/build-kubernetes-replicator.sh")
    } else {
        String::new()
    };
    let kyverno = if tools.contains("kyverno") {
        build_script("tests/support/build-kyverno.sh")
    } else {
        String::new()
    };
    let mut results = Vec::new();
    for k in 0..runs {
        let mut order: Vec<&String> = bins.iter().collect();
        if k % 2 == 1 {
            order.reverse();
        }
        let mut tools_this_run: Vec<(Tool, &str)> = Vec::new();
        if tools.contains("mimeo") {
            tools_this_run.extend(order.iter().map(|b| (Tool::Mimeo, b.as_str())));
        }
        if tools.contains("replicator") {
            tools_this_run.push((Tool::Replicator, replicator.as_str()));
        }
        if tools.contains("kyverno") {
            tools_this_run.push((Tool::Kyverno, kyverno.as_str()));
        }
        for (tool, program) in tools_this_run {
            let label = match tool {
                Tool::Mimeo if bins.len() > 1 => format!("mimeo {}", label_of(program)),
                Tool::Mimeo => "mimeo".into(),
                Tool::Replicator => "kubernetes-replicator".into(),
                Tool::Kyverno => "kyverno".into(),
            };
            let run = scenario(tool, program, &label, k, &options).await;
            report(&run);
            results.push(run);
        }
    }
    summary(&results, &options);
}

/// What every run is asked to do.
struct Options {
    namespaces: usize,
    rotations: usize,
    idle: Duration,
    wait: Duration,
    raw: bool,
    settle: Duration,
    /// Print each rotation as it ends, with when its source was written (`--each 1`), to lay
    /// beside mimeo's log.
    each: bool,
    /// Kyverno clones with `cloneList` rather than `clone` (`--kyverno-clone-list 1`).
    clone_list: bool,
}

/// A binary's name in the table: its file name, or its directory's for a file named `mimeo`.
fn label_of(program: &str) -> String {
    let path = std::path::Path::new(program);
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or(program);
    match (
        name,
        path.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()),
    ) {
        ("mimeo", Some(dir)) => dir.to_owned(),
        _ => name.to_owned(),
    }
}

/// The tool's process: mimeo's has metrics to read; Kyverno is two.
enum Running {
    Mimeo(Mimeo),
    Other(processes::Child),
    Kyverno(Kyverno),
}

impl Running {
    fn process(&mut self) -> &mut dyn Process {
        match self {
            Running::Mimeo(m) => m,
            Running::Other(c) => c,
            Running::Kyverno(k) => k,
        }
    }

    /// Each process's peak resident memory, when there is more than one.
    fn peaks(&self) -> String {
        match self {
            Running::Kyverno(k) => format!(
                " (admission controller {:.1} MiB, background controller {:.1} MiB)",
                k.admission.peak_mib(),
                k.background.peak_mib()
            ),
            _ => String::new(),
        }
    }

    /// Rule reconciles so far, by mimeo's own counter.
    async fn reconciles(&self) -> Option<f64> {
        let Running::Mimeo(mimeo) = self else {
            return None;
        };
        let text = mimeo.metrics().await;
        Some(
            text.lines()
                .filter(|l| l.starts_with("mimeo_reconciles_total"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum(),
        )
    }
}

/// Runs a build script (relative to the crate) and takes the last line it prints: the tool's
/// binary, or the directory holding it.
fn build_script(relative: &str) -> String {
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative);
    let output = std::process::Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(output.status.success(), "{} failed", script.display());
    let stdout = String::from_utf8(output.stdout).expect("the build script prints UTF-8");
    stdout.lines().last().unwrap_or_default().trim().to_owned()
}

fn secret_value(i: usize) -> String {
    format!("{i:06}-{}", "x".repeat(1017))
}

/// The plain client's two sets of Secrets: one created as mimeo creates a copy (a create-only
/// POST, then applies: two field managers' entries, the create's `Update` and the applies'), one
/// created by an apply (one entry), to show what the create's entry costs each later write.
#[derive(Clone, Copy, Debug, PartialEq)]
enum RawSet {
    Created,
    Applied,
}

impl RawSet {
    /// The prefix of the set's namespaces and values (each 4 bytes, so sizes stay equal).
    fn prefix(self) -> &'static str {
        match self {
            RawSet::Created => "raw-",
            RawSet::Applied => "app-",
        }
    }

    fn namespace(self, i: usize) -> String {
        format!("{}{i}", self.prefix())
    }
}

fn raw_value(set: RawSet, r: usize) -> String {
    format!("{}{r:06}-{}", set.prefix(), "x".repeat(1013))
}

/// The metadata of mimeo's copies, for the raw client to write the same: their labels and
/// annotations (keys renamed out of `mimeo.dev/` at the same length, so that mimeo does not take
/// the raw Secrets for copies), and which annotations a rotation changes.
#[derive(Clone, Debug, Default)]
struct CopyShape {
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    changing: std::collections::BTreeSet<String>,
}

impl CopyShape {
    /// The shape of a copy as read; none changing yet.
    fn of(copy: &Secret) -> CopyShape {
        let renamed = |map: &Option<BTreeMap<String, String>>| -> BTreeMap<String, String> {
            map.iter()
                .flatten()
                .map(|(k, v)| (k.replace("mimeo.dev/", "mimeo.raw/"), v.clone()))
                .collect()
        };
        CopyShape {
            labels: renamed(&copy.metadata.labels),
            annotations: renamed(&copy.metadata.annotations),
            changing: Default::default(),
        }
    }

    /// Marks the annotations whose values differ in `later`, the same copy after a rotation.
    fn changed_in(&mut self, later: &Secret) {
        let later = CopyShape::of(later);
        self.changing = (self.annotations.iter())
            .filter(|(k, v)| later.annotations.get(*k) != Some(*v))
            .map(|(k, _)| k.clone())
            .collect();
    }

    /// The annotations of rotation `r`: the changing ones end in `r`, at the same length.
    fn annotations_at(&self, r: usize) -> BTreeMap<String, String> {
        (self.annotations.iter())
            .map(|(k, v)| match self.changing.contains(k) {
                true => {
                    let digits = format!("{r:08}");
                    let keep = v.len().saturating_sub(digits.len());
                    (k.clone(), format!("{}{digits}", &v[..keep]))
                }
                false => (k.clone(), v.clone()),
            })
            .collect()
    }
}

/// What the raw client writes in its namespace `i` of `set`: a Secret of the size of a copy, with
/// a copy's labels and annotations.
fn raw_object(set: RawSet, i: usize, r: usize, shape: &CopyShape) -> serde_json::Value {
    let (labels, annotations) = (json!(shape.labels), json!(shape.annotations_at(r)));
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": NAME, "namespace": set.namespace(i),
                        "labels": labels, "annotations": annotations},
           "data": {"token": ByteString(raw_value(set, r).into_bytes())}, "type": "Opaque"})
}

/// The plain client's Secrets, created as mimeo creates a copy: a create-only request (POST) under
/// its field manager, so that they carry the same two field managers' entries (the create's
/// `Update` and then the rotations' `Apply`) as a copy.
async fn raw_create(client: &Client, namespaces: usize, shape: &CopyShape) {
    futures::stream::iter(0..namespaces)
        .map(|i| {
            let api: Api<Secret> = Api::namespaced(client.clone(), &RawSet::Created.namespace(i));
            let params = PostParams {
                field_manager: Some("raw".into()),
                ..Default::default()
            };
            async move {
                let secret: Secret =
                    serde_json::from_value(raw_object(RawSet::Created, i, 0, shape)).unwrap();
                api.create(&params, &secret).await.unwrap();
            }
        })
        .buffer_unordered(RAW_CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
}

/// Rotation `r` by a plain client: the N updates, `RAW_CONCURRENCY` in flight.
async fn raw_rotation(client: &Client, set: RawSet, namespaces: usize, r: usize, shape: &CopyShape) {
    futures::stream::iter(0..namespaces)
        .map(|i| {
            let api: Api<Secret> = Api::namespaced(client.clone(), &set.namespace(i));
            async move {
                api.patch(
                    NAME,
                    &PatchParams::apply("raw").force(),
                    &Patch::Apply(&raw_object(set, i, r, shape)),
                )
                .await
                .unwrap();
            }
        })
        .buffer_unordered(RAW_CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
}

/// A fresh control plane; for Kyverno, with users for its two controllers and its CRDs.
async fn start_plane(tool: Tool, program: &str) -> ControlPlane {
    let options = match tool {
        Tool::Kyverno => mimeo_envtest::Options {
            users: vec![KYVERNO_ADMISSION_USER.into(), KYVERNO_BACKGROUND_USER.into()],
            ..Default::default()
        },
        _ => Default::default(),
    };
    let plane = ControlPlane::start_with(options)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut crds = vec![std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crds/mimeo.yaml")];
    if tool == Tool::Kyverno {
        let dir = std::path::Path::new(program).join("crds");
        let files = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
        crds.extend(files.flatten().map(|f| f.path()));
    }
    plane
        .install_crds(&crds)
        .await
        .unwrap_or_else(|e| panic!("installing the CRDs: {e}"));
    plane
}

/// Starts the tool and waits until it is ready to be measured.
async fn start_tool(
    tool: Tool,
    program: &str,
    plane: &ControlPlane,
    client: &Client,
    dir: &std::path::Path,
) -> Running {
    match tool {
        Tool::Mimeo => {
            let mut mimeo = Mimeo::start_bin(std::path::Path::new(program), plane.kubeconfig_path(), dir);
            mimeo.wait_ready().await;
            Running::Mimeo(mimeo)
        }
        Tool::Replicator => Running::Other(processes::Child::start(
            std::process::Command::new(program).args([
                "--kubeconfig",
                plane.kubeconfig_path().to_str().expect("a UTF-8 path"),
                "--status-addr",
                "127.0.0.1:0",
                "--replicate-roles=false",
                "--replicate-role-bindings=false",
                "--replicate-service-accounts=false",
            ]),
            &dir.join("replicator.log"),
        )),
        Tool::Kyverno => {
            Running::Kyverno(Kyverno::start(std::path::Path::new(program), plane, client, dir).await)
        }
    }
}

/// Writes the source and what asks the tool to fan it out; returns the source, to rotate.
async fn trigger(tool: Tool, client: &Client, clone_list: bool) -> serde_json::Value {
    let mut source = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": NAME, "namespace": SOURCE_NS},
        "data": {"token": ByteString(secret_value(0).into_bytes())}});
    match tool {
        Tool::Replicator => {
            source["metadata"]["annotations"] =
                json!({"replicator.v1.mittwald.de/replicate-to-matching": "fan=out"})
        }
        Tool::Kyverno => source["metadata"]["labels"] = json!({"bench": "source"}),
        Tool::Mimeo => {}
    }
    apply(client, source.clone()).await;
    match tool {
        Tool::Mimeo => {
            apply(
                client,
                json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                "metadata": {"name": "fan-out", "namespace": SOURCE_NS},
                "spec": {"source": {"kind": "Secret", "name": NAME},
                         "targets": [{"namespaceSelector": {"matchLabels": {"fan": "out"}}}]}}),
            )
            .await
        }
        Tool::Kyverno => apply(client, kyverno_policy(clone_list)).await,
        Tool::Replicator => {}
    }
    source
}

/// The ClusterPolicy: every Namespace labelled `fan=out`, those there before it too, gets a copy
/// of the source, kept in sync with it.
fn kyverno_policy(clone_list: bool) -> serde_json::Value {
    let target = "{{request.object.metadata.name}}";
    let generate = if clone_list {
        json!({"namespace": target, "synchronize": true, "generateExisting": true,
               "cloneList": {"namespace": SOURCE_NS, "kinds": ["v1/Secret"],
                             "selector": {"matchLabels": {"bench": "source"}}}})
    } else {
        json!({"apiVersion": "v1", "kind": "Secret", "name": NAME, "namespace": target,
               "synchronize": true, "generateExisting": true,
               "clone": {"namespace": SOURCE_NS, "name": NAME}})
    };
    json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
           "metadata": {"name": KYVERNO_POLICY},
           "spec": {"rules": [{"name": "fan-out",
               "match": {"any": [{"resources": {"kinds": ["Namespace"],
                                                "selector": {"matchLabels": {"fan": "out"}}}}]},
               "generate": generate}]}})
}

fn cluster_policies(client: &Client) -> Api<kube::api::DynamicObject> {
    let gvk = kube::core::GroupVersionKind::gvk("kyverno.io", "v1", "ClusterPolicy");
    Api::all_with(
        client.clone(),
        &kube::api::ApiResource::from_gvk_with_plural(&gvk, "clusterpolicies"),
    )
}

/// Waits (up to 120 s) for the policy's Ready condition and prints when it came, counted from
/// `started` (the fan-out's start); not part of any figure.
async fn policy_ready(client: &Client, started: Instant) {
    let api = cluster_policies(client);
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let policy = api.get(KYVERNO_POLICY).await.expect("reading the ClusterPolicy");
        let conditions = policy.data["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let ready = conditions.iter().find(|c| c["type"] == "Ready");
        if ready.is_some_and(|c| c["status"] == "True") {
            println!(
                "kyverno: the ClusterPolicy was Ready {:.2} s after the fan-out's start",
                started.elapsed().as_secs_f64()
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!("kyverno: the ClusterPolicy was not Ready within 120 s after the fan-out");
}

/// The last 40 lines of a log, headed by its name.
fn log_tail(path: &std::path::Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(40)..].join("\n");
    format!("--- {}:\n{tail}", path.display())
}

/// Copies the tool's logs to `to` (`MIMEO_BENCH_LOG_DIR`), named after the run.
fn keep_logs(tool: Tool, dir: &std::path::Path, to: &std::path::Path, run: &str) {
    let logs: &[&str] = match tool {
        Tool::Mimeo => &["mimeo.log"],
        Tool::Replicator => &[],
        Tool::Kyverno => &["kyverno-admission.log", "kyverno-background.log"],
    };
    for log in logs {
        let _ = std::fs::copy(dir.join(log), to.join(format!("{run}-{log}")));
    }
}

/// Kyverno's admission controller and background controller, run as local processes.
struct Kyverno {
    admission: processes::Child,
    background: processes::Child,
}

impl Process for Kyverno {
    fn pid(&self) -> u32 {
        self.admission.pid()
    }

    fn stop(&mut self) {
        self.background.stop();
        self.admission.stop();
    }

    fn cpu_secs(&self) -> f64 {
        self.admission.cpu_secs() + self.background.cpu_secs()
    }

    /// The sum of the two peaks (which need not have come at the same time).
    fn peak_mib(&self) -> f64 {
        self.admission.peak_mib() + self.background.peak_mib()
    }
}

/// A loopback port that was free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("finding a free loopback port")
        .port()
}

impl Kyverno {
    /// Starts both controllers from `bin_dir`, each as its own user, and waits until the admission
    /// controller has registered its webhooks and the background controller leads.
    async fn start(
        bin_dir: &std::path::Path,
        plane: &ControlPlane,
        client: &Client,
        dir: &std::path::Path,
    ) -> Kyverno {
        apply(
            client,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KYVERNO_NS}}),
        )
        .await;
        apply(client, kyverno_config()).await;
        // Kyverno checks a policy against its controllers' rights by SubjectAccessReviews of their
        // user names (groups aside), so `system:masters` is not enough: RBAC must grant them too.
        let subjects: Vec<serde_json::Value> = [KYVERNO_ADMISSION_USER, KYVERNO_BACKGROUND_USER]
            .iter()
            .map(|user| json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}))
            .collect();
        apply(
            client,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": "kyverno-bench"}, "subjects": subjects,
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": "cluster-admin"}}),
        )
        .await;
        let port = free_port();
        let mut admission = kyverno_command(bin_dir, "kyverno", plane, KYVERNO_ADMISSION_USER, dir);
        admission.args([
            format!("--serverIP=127.0.0.1:{port}"),
            "--webhookServerHost=127.0.0.1".into(),
            format!("--webhookServerPort={port}"),
            "--caSecretName=kyverno-svc.kyverno.svc.kyverno-tls-ca".into(),
            "--tlsSecretName=kyverno-svc.kyverno.svc.kyverno-tls-pair".into(),
            format!("--backgroundServiceAccountName={KYVERNO_BACKGROUND_USER}"),
            "--reportsServiceAccountName=system:serviceaccount:kyverno:kyverno-reports-controller".into(),
        ]);
        let mut background = kyverno_command(
            bin_dir,
            "background-controller",
            plane,
            KYVERNO_BACKGROUND_USER,
            dir,
        );
        let kyverno = Kyverno {
            admission: processes::Child::start(&mut admission, &dir.join("kyverno-admission.log")),
            background: processes::Child::start(&mut background, &dir.join("kyverno-background.log")),
        };
        wait_kyverno_ready(client, dir).await;
        kyverno
    }
}

/// Kyverno's ConfigMap as its chart (3.9.1, for v1.19.1) writes it by default, less the resource
/// filters that name the chart's own objects (none of which exist here). Without it the
/// `updateRequestThreshold` is 0 and the background controller skips every UpdateRequest ("the
/// number of updaterequests exceeds the threshold").
fn kyverno_config() -> serde_json::Value {
    let filters = "[*/*,kyverno,*] [Event,*,*] [*/*,kube-system,*] [*/*,kube-public,*] \
        [*/*,kube-node-lease,*] [Node,*,*] [Node/?*,*,*] [APIService,*,*] [APIService/?*,*,*] \
        [TokenReview,*,*] [SubjectAccessReview,*,*] [SelfSubjectAccessReview,*,*] [Binding,*,*] \
        [Pod/binding,*,*] [ReplicaSet,*,*] [ReplicaSet/?*,*,*] [EphemeralReport,*,*] \
        [ClusterEphemeralReport,*,*]";
    let webhooks = json!({"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [KYVERNO_NS]}]}});
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "kyverno", "namespace": KYVERNO_NS},
           "data": {"enableDefaultRegistryMutation": "true", "defaultRegistry": "docker.io",
                    "generateSuccessEvents": "false", "excludeGroups": "system:nodes",
                    "resourceFilters": filters, "updateRequestThreshold": "1000",
                    "webhooks": webhooks.to_string()}})
}

/// One of Kyverno's controllers as its user, with the environment a pod of the chart would have.
fn kyverno_command(
    bin_dir: &std::path::Path,
    bin: &str,
    plane: &ControlPlane,
    user: &str,
    dir: &std::path::Path,
) -> std::process::Command {
    let account = user.rsplit(':').next().unwrap_or(user);
    let kubeconfig = dir.join(format!("{account}.kubeconfig"));
    let yaml = plane
        .user_token_kubeconfig_yaml(user)
        .expect("the plane was started with Kyverno's users");
    std::fs::write(&kubeconfig, yaml).expect("writing Kyverno's kubeconfig");
    let mut command = std::process::Command::new(bin_dir.join(bin));
    command
        .env("KYVERNO_NAMESPACE", KYVERNO_NS)
        .env("KYVERNO_SERVICEACCOUNT_NAME", account)
        .env("KYVERNO_DEPLOYMENT", account)
        .env("KYVERNO_POD_NAME", format!("{account}-local"))
        .env("INIT_CONFIG", "kyverno")
        .env("METRICS_CONFIG", "kyverno-metrics")
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg("--metricsHost=127.0.0.1")
        .arg(format!("--metricsPort={}", free_port()))
        .arg("--controllerRuntimeMetricsAddress=0")
        .arg("--disableLogColor");
    command
}

/// Waits (up to 180 s) until the admission controller has registered its policy webhook with its
/// CA and the background controller holds its lease.
async fn wait_kyverno_ready(client: &Client, dir: &std::path::Path) {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use k8s_openapi::api::coordination::v1::Lease;
    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), KYVERNO_NS);
    let started = Instant::now();
    loop {
        let webhook = webhooks
            .get_opt("kyverno-policy-validating-webhook-cfg")
            .await
            .ok()
            .flatten();
        let has_ca = webhook
            .iter()
            .flat_map(|w| w.webhooks.iter().flatten())
            .any(|w| w.client_config.ca_bundle.is_some());
        let lease = leases
            .get_opt("kyverno-background-controller")
            .await
            .ok()
            .flatten();
        let led = lease.and_then(|l| l.spec?.holder_identity).is_some();
        if has_ca && led {
            println!(
                "kyverno: ready {:.1} s after start",
                started.elapsed().as_secs_f64()
            );
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "Kyverno was not ready within 180 s (policy webhook with a CA: {has_ca}, background controller leading: {led})\n{}\n{}",
            log_tail(&dir.join("kyverno-admission.log")),
            log_tail(&dir.join("kyverno-background.log")),
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn scenario(tool: Tool, program: &str, label: &str, k: u64, options: &Options) -> Run {
    let Options {
        namespaces,
        rotations,
        idle,
        wait,
        ..
    } = *options;
    let plane = start_plane(tool, program).await;
    let client = plane.client().await.unwrap();
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SOURCE_NS}}),
    )
    .await;
    for i in 0..namespaces {
        apply(
            &client,
            json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": format!("t-{i}"), "labels": {"fan": "out"},
                         "annotations": {"mimeo.dev/accept-from": SOURCE_NS}}}),
        )
        .await;
    }
    let raw = options.raw && tool == Tool::Mimeo;
    if raw {
        for i in 0..namespaces {
            for set in [RawSet::Created, RawSet::Applied] {
                apply(
                    &client,
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": set.namespace(i)}}),
                )
                .await;
            }
        }
    }
    let mut dir = tempfile::tempdir().expect("creating a directory for the tool's logs");
    // Asked to keep the logs, keep them if the run fails too (they are copied only at its end).
    dir.disable_cleanup(std::env::var_os("MIMEO_BENCH_LOG_DIR").is_some());
    println!("{label}: logs in {}", dir.path().display());
    let mut running = start_tool(tool, program, &plane, &client, dir.path()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let observer = observe(&client, seen_tx);
    let requests_before = apiserver_requests(&client, RESOURCES).await;
    let cpu_before = running.process().cpu_secs();

    let started = Instant::now();
    let source = trigger(tool, &client, options.clone_list).await;
    let fan_out = all_seen(
        &mut seen,
        &secret_value(0),
        namespaces,
        started,
        Duration::from_secs(300),
    )
    .await;
    if tool == Tool::Kyverno {
        policy_ready(&client, started).await;
    }
    // The raw client writes what mimeo writes: a copy's labels and annotations, those a rotation
    // changes changing with each of its own (known after mimeo's first rotation).
    let (mut shape, mut raw_shape_requests) = (None, 0.0);
    if raw {
        let copy = Api::<Secret>::namespaced(client.clone(), "t-0")
            .get(NAME)
            .await
            .unwrap();
        let created = CopyShape::of(&copy);
        raw_create(&client, namespaces, &created).await;
        raw_rotation(&client, RawSet::Applied, namespaces, 0, &created).await;
        shape = Some(created);
        raw_shape_requests = namespaces as f64;
    }

    tokio::time::sleep(options.settle).await;
    let rotations_before = apiserver_requests(&client, RESOURCES).await;
    let reconciles_before = running.reconciles().await;
    let machine_before = machine_cpu();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), SOURCE_NS);
    let mut latencies = Vec::new();
    let (mut raw_latencies, mut applied_latencies) = (Vec::new(), Vec::new());
    let mut raw_requests = 0.0;
    for r in 1..=rotations {
        let value = secret_value(r);
        let mut next = source.clone();
        next["data"]["token"] = serde_json::to_value(ByteString(value.clone().into_bytes())).unwrap();
        let started = Instant::now();
        let wall = k8s_openapi::jiff::Timestamp::now();
        // A tool whose admission webhook has gone (Kyverno's, failurePolicy Fail) refuses it.
        secrets
            .patch(NAME, &PatchParams::apply("bench").force(), &Patch::Apply(&next))
            .await
            .unwrap_or_else(|e| panic!("{label}: rotation {r}: writing the source: {e}"));
        let latency = all_seen(&mut seen, &value, namespaces, started, wait).await;
        if options.each {
            println!("{label}: rotation {r} written at {wall}: {}", show(latency));
        }
        latencies.push(latency);
        tokio::time::sleep(options.settle).await;
        if let Some(shape) = shape.as_mut().filter(|_| r == 1) {
            shape.changed_in(
                &Api::<Secret>::namespaced(client.clone(), "t-0")
                    .get(NAME)
                    .await
                    .unwrap(),
            );
            println!(
                "{label}: the raw client writes a copy's labels {:?} and annotations {:?}, changing {:?}",
                shape.labels.keys().collect::<Vec<_>>(),
                shape.annotations.keys().collect::<Vec<_>>(),
                shape.changing
            );
        }
        if let Some(shape) = &shape {
            // In turn, the order swapped each rotation, so neither set always follows mimeo.
            let mut sets = [
                (RawSet::Created, &mut raw_latencies),
                (RawSet::Applied, &mut applied_latencies),
            ];
            if r % 2 == 0 {
                sets.reverse();
            }
            for (set, latencies) in sets {
                let started = Instant::now();
                raw_rotation(&client, set, namespaces, r, shape).await;
                latencies.push(all_seen(&mut seen, &raw_value(set, r), namespaces, started, wait).await);
                raw_requests += namespaces as f64;
                tokio::time::sleep(options.settle).await;
            }
        }
    }
    let machine = machine_cpu().since(&machine_before);
    let after_rotations = apiserver_requests(&client, RESOURCES).await;
    let mut rotation_requests = requests_since(&rotations_before, &after_rotations);
    let mut requests = requests_since(&requests_before, &after_rotations);
    // The raw client's own creates and updates are not the tool's.
    let less = |counted: &mut BTreeMap<(String, String), f64>, verb: &str, n: f64| {
        if let Some(writes) = counted.get_mut(&(verb.to_owned(), "secrets".to_owned())) {
            *writes -= n;
        }
    };
    less(&mut rotation_requests, "APPLY", raw_requests);
    less(&mut requests, "APPLY", raw_requests + raw_shape_requests);
    less(&mut requests, "POST", raw_shape_requests);
    let rotation_reconciles = match (reconciles_before, running.reconciles().await) {
        (Some(before), Some(after)) => Some(after - before),
        _ => None,
    };
    let process = running.process();
    let cpu_secs = process.cpu_secs() - cpu_before;

    let (idle_cpu_secs, idle_requests) = idle_cost(&client, process, idle).await;
    let peak_mib = process.peak_mib();
    let peaks = running.peaks();
    let process = running.process();
    observer.abort();
    process.stop();
    if let Ok(logs) = std::env::var("MIMEO_BENCH_LOG_DIR") {
        keep_logs(
            tool,
            dir.path(),
            std::path::Path::new(&logs),
            &format!("{}-run{k}", label.replace(' ', "-")),
        );
    }
    Run {
        label: label.to_owned(),
        fan_out,
        rotations: latencies,
        raw: raw_latencies,
        applied: applied_latencies,
        rotation_requests,
        rotation_reconciles,
        peak_mib,
        peaks,
        cpu_secs,
        requests,
        idle_cpu_secs,
        idle_requests,
        machine,
    }
}

/// CPU time of the tool and requests to the apiserver over `idle`, 5 s after the last rotation.
async fn idle_cost(client: &Client, process: &mut dyn Process, idle: Duration) -> (f64, f64) {
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = apiserver_requests(client, RESOURCES).await;
    let cpu_before = process.cpu_secs();
    tokio::time::sleep(idle).await;
    let cpu = process.cpu_secs() - cpu_before;
    let after = apiserver_requests(client, RESOURCES).await;
    (cpu, requests_since(&before, &after).values().sum())
}

/// The whole machine's CPU over a stretch, from /proc/stat: how busy it was (every process, the
/// control plane's included) and the time its hypervisor gave to others (steal). A rotation
/// slower than the run before it on the same build is read against these.
#[derive(Clone, Copy, Debug, Default)]
struct MachineCpu {
    busy_secs: f64,
    steal_secs: f64,
    /// Seconds of wall-clock time, times the number of CPUs.
    capacity_secs: f64,
}

impl MachineCpu {
    fn since(&self, before: &MachineCpu) -> MachineCpu {
        MachineCpu {
            busy_secs: self.busy_secs - before.busy_secs,
            steal_secs: self.steal_secs - before.steal_secs,
            capacity_secs: self.capacity_secs - before.capacity_secs,
        }
    }
}

fn machine_cpu() -> MachineCpu {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    // cpu  user nice system idle iowait irq softirq steal guest guest_nice, in clock ticks.
    let ticks: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    let at = |i: usize| ticks.get(i).copied().unwrap_or(0.0) / 100.0;
    MachineCpu {
        busy_secs: at(0) + at(1) + at(2) + at(5) + at(6),
        steal_secs: at(7),
        capacity_secs: (0..8).map(at).sum(),
    }
}

/// Every copy of `creds` outside the source's namespace, with its token, as seen by a watch.
fn observe(
    client: &Client,
    tx: tokio::sync::mpsc::UnboundedSender<(String, String, Instant)>,
) -> tokio::task::JoinHandle<()> {
    let api: Api<Secret> = Api::all(client.clone());
    tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={NAME}"));
        let mut stream = watcher(api, config).applied_objects().boxed();
        while let Some(Ok(copy)) = stream.next().await {
            let ns = copy.metadata.namespace.clone().unwrap_or_default();
            if ns == SOURCE_NS {
                continue;
            }
            let value = copy
                .data
                .as_ref()
                .and_then(|d| d.get("token"))
                .map(|b| String::from_utf8_lossy(&b.0).into_owned());
            if let Some(value) = value {
                let _ = tx.send((ns, value, Instant::now()));
            }
        }
    })
}

/// When the last of `n` copies showed `value`, counted from `started`; `None` past `wait`.
async fn all_seen(
    seen: &mut tokio::sync::mpsc::UnboundedReceiver<(String, String, Instant)>,
    value: &str,
    n: usize,
    started: Instant,
    wait: Duration,
) -> Option<Duration> {
    let mut at: HashMap<String, Instant> = HashMap::new();
    let deadline = tokio::time::Instant::from_std(started + wait);
    while at.len() < n {
        match tokio::time::timeout_at(deadline, seen.recv()).await {
            Ok(Some((ns, v, when))) if v == value => {
                at.insert(ns, when);
            }
            Ok(Some(_)) => {}
            _ => return None,
        }
    }
    at.into_values().max().map(|last| last - started)
}

fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    Some(
        sorted[((sorted.len() as f64 * p).ceil() as usize)
            .saturating_sub(1)
            .min(sorted.len() - 1)],
    )
}

fn converged(run: &Run) -> Vec<Duration> {
    let mut done: Vec<Duration> = run.rotations.iter().flatten().copied().collect();
    done.sort();
    done
}

fn show(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.2} s", d.as_secs_f64()))
        .unwrap_or_else(|| "not converged".into())
}

/// The raw client's rotations of the Secrets created as copies are, sorted.
fn raw_done(run: &Run) -> Vec<Duration> {
    sorted(&run.raw)
}

/// The raw client's rotations of the Secrets created by an apply, sorted.
fn applied_done(run: &Run) -> Vec<Duration> {
    sorted(&run.applied)
}

fn sorted(latencies: &[Option<Duration>]) -> Vec<Duration> {
    let mut done: Vec<Duration> = latencies.iter().flatten().copied().collect();
    done.sort();
    done
}

fn ratio(a: Option<Duration>, b: Option<Duration>) -> Option<f64> {
    Some(a?.as_secs_f64() / b?.as_secs_f64())
}

/// Event requests (all verbs) per rotation.
fn events_per_rotation(run: &Run) -> f64 {
    let events: f64 = run
        .rotation_requests
        .iter()
        .filter(|((_, resource), _)| resource == "events")
        .map(|(_, n)| n)
        .sum();
    // An empty float sum is -0.0, which would print as "-0.00".
    (events + 0.0) / run.rotations.len().max(1) as f64
}

fn report(run: &Run) {
    let done = converged(run);
    if !run.raw.is_empty() {
        let raw = raw_done(run);
        println!(
            "{}: raw client, same updates: p50 {}, p99 {}; rotation / raw, p50 {:.2}, p99 {:.2}",
            run.label,
            show(percentile(&raw, 0.5)),
            show(percentile(&raw, 0.99)),
            ratio(percentile(&done, 0.5), percentile(&raw, 0.5)).unwrap_or(f64::NAN),
            ratio(percentile(&done, 0.99), percentile(&raw, 0.99)).unwrap_or(f64::NAN),
        );
        let applied = applied_done(run);
        println!(
            "{}: raw client, same updates to apply-created Secrets: p50 {}, p99 {}; raw / these, p50 {:.2}",
            run.label,
            show(percentile(&applied, 0.5)),
            show(percentile(&applied, 0.99)),
            ratio(percentile(&raw, 0.5), percentile(&applied, 0.5)).unwrap_or(f64::NAN),
        );
    }
    println!(
        "{}: per rotation: {:.2} event requests, {} reconciles; requests over the rotations:",
        run.label,
        events_per_rotation(run),
        run.rotation_reconciles
            .map(|n| format!("{:.2}", n / run.rotations.len().max(1) as f64))
            .unwrap_or_else(|| "-".into()),
    );
    for ((verb, resource), n) in run.rotation_requests.iter().filter(|(_, n)| **n > 0.0) {
        println!("    {verb} {resource}: {n}");
    }
    let m = run.machine;
    println!(
        "{}: the machine over the rotations: {:.1} of {:.1} CPU-s busy ({:.0}%), {:.2} CPU-s stolen by the hypervisor",
        run.label,
        m.busy_secs,
        m.capacity_secs,
        100.0 * m.busy_secs / m.capacity_secs.max(0.01),
        m.steal_secs,
    );
    println!(
        "{}: fan-out {}; rotations {}/{} converged, p50 {}, p99 {}; peak {:.1} MiB{}; CPU {:.2} s; idle CPU {:.2} s, idle requests {}",
        run.label,
        show(run.fan_out),
        done.len(),
        run.rotations.len(),
        show(percentile(&done, 0.5)),
        show(percentile(&done, 0.99)),
        run.peak_mib,
        run.peaks,
        run.cpu_secs,
        run.idle_cpu_secs,
        run.idle_requests
    );
    for ((verb, resource), n) in run.requests.iter().filter(|(_, n)| **n > 0.0) {
        println!("    {verb} {resource}: {n}");
    }
}

/// Markdown cells, each closed by a bar.
fn cells(values: &[String]) -> String {
    values.iter().map(|c| format!(" {c} |")).collect()
}

/// The table's head: a column per tool, then one ratio column for each tool after the first.
fn table_header(labels: &[&str]) {
    let names: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
    let compared: Vec<String> = (labels[1..].iter())
        .map(|l| format!("{l} / {}", labels[0]))
        .collect();
    println!("| |{}{}", cells(&names), cells(&compared));
    println!("|---|{}", "---|".repeat(names.len() + compared.len()));
}

/// One row: each tool's runs, then each later tool's mean over the first's.
fn table_row(results: &[Run], labels: &[&str], what: &str, f: &dyn Fn(&Run) -> Option<f64>, unit: &str) {
    let values = |label: &str| {
        (results.iter().filter(|r| r.label == label))
            .map(f)
            .collect::<Vec<_>>()
    };
    let text = |v: &[Option<f64>]| {
        v.iter()
            .map(|x| x.map(|x| format!("{x:.2}{unit}")).unwrap_or_else(|| "-".into()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mean = |v: &[Option<f64>]| {
        let xs: Vec<f64> = v.iter().flatten().copied().collect();
        (!xs.is_empty() && xs.len() == v.len()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
    };
    let columns: Vec<Vec<Option<f64>>> = labels.iter().map(|l| values(l)).collect();
    let ratios: Vec<String> = (columns[1..].iter())
        .map(|other| match (mean(&columns[0]), mean(other)) {
            (Some(first), Some(other)) if first > 0.0 => format!("{:.2}x", other / first),
            _ => "-".into(),
        })
        .collect();
    let texts: Vec<String> = columns.iter().map(|c| text(c)).collect();
    println!("| {what} |{}{}", cells(&texts), cells(&ratios));
}

fn summary(results: &[Run], options: &Options) {
    let mut labels: Vec<&str> = Vec::new();
    for run in results {
        if !labels.contains(&run.label.as_str()) {
            labels.push(&run.label);
        }
    }
    let of = |label: &str| {
        let label = label.to_owned();
        results.iter().filter(move |r| r.label == label)
    };
    let total = |r: &Run| r.requests.values().sum::<f64>();
    println!(
        "\n{} namespaces, {} rotations, {} runs each",
        options.namespaces,
        options.rotations,
        of(labels[0]).count()
    );
    table_header(&labels);
    let row =
        |what: &str, f: &dyn Fn(&Run) -> Option<f64>, unit: &str| table_row(results, &labels, what, f, unit);
    let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
    row("fan-out", &|r| secs(r.fan_out), " s");
    row("rotation p50", &|r| secs(percentile(&converged(r), 0.5)), " s");
    row("rotation p99", &|r| secs(percentile(&converged(r), 0.99)), " s");
    if options.raw {
        row(
            "raw client, same updates, p50",
            &|r| secs(percentile(&raw_done(r), 0.5)),
            " s",
        );
        row(
            "raw client, same updates, p99",
            &|r| secs(percentile(&raw_done(r), 0.99)),
            " s",
        );
        row(
            "rotation / raw, p50",
            &|r| ratio(percentile(&converged(r), 0.5), percentile(&raw_done(r), 0.5)),
            "",
        );
        row(
            "rotation / raw, p99",
            &|r| ratio(percentile(&converged(r), 0.99), percentile(&raw_done(r), 0.99)),
            "",
        );
        row(
            "raw client, apply-created Secrets, p50",
            &|r| secs(percentile(&applied_done(r), 0.5)),
            " s",
        );
        row(
            "raw / raw on apply-created, p50",
            &|r| ratio(percentile(&raw_done(r), 0.5), percentile(&applied_done(r), 0.5)),
            "",
        );
    }
    row("rotations converged", &|r| Some(converged(r).len() as f64), "");
    row(
        "event requests per rotation",
        &|r| Some(events_per_rotation(r)),
        "",
    );
    row(
        "reconciles per rotation",
        &|r| Some(r.rotation_reconciles? / r.rotations.len().max(1) as f64),
        "",
    );
    row(
        "apiserver requests per rotation",
        &|r| Some(r.rotation_requests.values().sum::<f64>() / r.rotations.len().max(1) as f64),
        "",
    );
    row("peak resident memory", &|r| Some(r.peak_mib), " MiB");
    row("CPU time, fan-out and rotations", &|r| Some(r.cpu_secs), " s");
    row(
        "apiserver requests, fan-out and rotations",
        &|r| Some(total(r)),
        "",
    );
    row(
        "the machine over the rotations: busy",
        &|r| Some(100.0 * r.machine.busy_secs / r.machine.capacity_secs.max(0.01)),
        " %",
    );
    row(
        "the machine over the rotations: stolen",
        &|r| Some(r.machine.steal_secs),
        " CPU-s",
    );
    row("idle CPU time", &|r| Some(r.idle_cpu_secs), " s");
    row("idle apiserver requests", &|r| Some(r.idle_requests), "");
}
