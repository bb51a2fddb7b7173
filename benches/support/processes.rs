//! The processes the scenario benchmarks run (`mimeo run`, a peer), applying objects, and the
//! apiserver's request counts, shared by `benches/scale.rs` and `benches/peers.rs`.
#![allow(dead_code)]

use kube::Client;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a benchmark reads of a tool's process.
pub trait Process {
    fn pid(&self) -> u32;
    /// Stops it the way a pod is stopped (SIGTERM), and waits.
    fn stop(&mut self);

    /// User plus system CPU time so far, from /proc.
    fn cpu_secs(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        // After the command name in parentheses: fields 14 and 15 (utime, stime) in clock ticks.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let ticks: f64 = [11, 12]
            .iter()
            .filter_map(|i| fields.get(*i)?.parse::<f64>().ok())
            .sum();
        ticks / 100.0
    }

    /// The peak resident set (VmHWM), from /proc.
    fn peak_mib(&self) -> f64 {
        status_kib(self.pid(), "VmHWM:") / 1024.0
    }
}

fn status_kib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0)
}

/// Any program as a child process, its output in a log file, killed when dropped.
pub struct Child(std::process::Child);

impl Child {
    pub fn start(command: &mut Command, log: &std::path::Path) -> Self {
        let log = std::fs::File::create(log).unwrap();
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting the peer");
        Child(child)
    }
}

impl Process for Child {
    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn stop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Process for Mimeo {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stop(&mut self) {
        Mimeo::stop(self)
    }
}

/// `mimeo run` as a child process, killed when dropped.
pub struct Mimeo {
    child: std::process::Child,
    port: u16,
}

impl Mimeo {
    pub fn start(kubeconfig: &std::path::Path, dir: &std::path::Path) -> Self {
        // MIMEO_BENCH_BIN runs another build (say, the one before a change) in its place.
        let bin = std::env::var("MIMEO_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mimeo").into());
        Self::start_bin(std::path::Path::new(&bin), kubeconfig, dir)
    }

    /// `mimeo run` from the binary `bin`. MIMEO_BENCH_LOG sets its log filter (`warn` when unset),
    /// its log going to `mimeo.log` in `dir`.
    pub fn start_bin(bin: &std::path::Path, kubeconfig: &std::path::Path, dir: &std::path::Path) -> Self {
        Self::start_with(bin, kubeconfig, dir, &[], &[])
    }

    /// `mimeo run` from `bin` with more arguments and environment, its log in `mimeo.log` of
    /// `dir` (one directory per replica).
    pub fn start_with(
        bin: &std::path::Path,
        kubeconfig: &std::path::Path,
        dir: &std::path::Path,
        extra: &[String],
        env: &[(&str, &str)],
    ) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // MIMEO_BENCH_WRAP runs it under a profiler, e.g. `heaptrack`.
        let mut command = match std::env::var("MIMEO_BENCH_WRAP") {
            Ok(wrapper) if !wrapper.is_empty() => {
                let mut command = Command::new(wrapper);
                command.arg(bin);
                command
            }
            _ => Command::new(bin),
        };
        // A `--log-level` among `extra` wins.
        let log_level = extra
            .iter()
            .find_map(|a| a.strip_prefix("--log-level=").map(str::to_owned))
            .or_else(|| std::env::var("MIMEO_BENCH_LOG").ok())
            .unwrap_or_else(|| "warn".into());
        let extra = extra.iter().filter(|a| !a.starts_with("--log-level="));
        let child = command
            .args([
                "run",
                &format!("--log-level={log_level}"),
                "--log-format=json",
                &format!("--http-addr=127.0.0.1:{port}"),
                &format!("--plugin-cache-dir={}", dir.join("plugins").display()),
                &format!("--artifact-cache-dir={}", dir.join("artifacts").display()),
            ])
            .args(extra)
            .envs(env.iter().copied())
            .env("KUBECONFIG", kubeconfig)
            .env_remove("MIMEO_WATCH_NAMESPACE")
            .env_remove("MIMEO_ALLOW_KINDS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("mimeo.log")).unwrap())
            .spawn()
            .expect("starting mimeo run");
        Mimeo { child, port }
    }

    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        let text = String::from_utf8_lossy(&response).into_owned();
        let code = text.get(9..12)?.parse().ok()?;
        Some((code, text))
    }

    pub async fn wait_ready(&mut self) {
        let started = Instant::now();
        while self.get("/readyz").await.map(|(code, _)| code) != Some(200) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("mimeo run exited: {status}");
            }
            assert!(started.elapsed() < Duration::from_secs(60), "mimeo is not ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn metrics(&self) -> String {
        self.get("/metrics")
            .await
            .map(|(_, text)| text)
            .unwrap_or_default()
    }

    /// Resident set size, from /proc.
    pub fn rss_mib(&self) -> f64 {
        self.proc_status_mib("VmRSS:")
    }

    /// The largest resident set so far (the kernel's high-water mark), from /proc.
    pub fn peak_rss_mib(&self) -> f64 {
        self.proc_status_mib("VmHWM:")
    }

    fn proc_status_mib(&self, field: &str) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} in /proc/<pid>/status"));
        kib / 1024.0
    }

    /// Waits until the controller reports `synced` copies in sync and has written nothing for
    /// `quiet`: the work is done, and what it holds then is what it needs.
    pub async fn wait_settled(&self, synced: usize, quiet: Duration) {
        let in_sync = format!("mimeo_copies{{state=\"Synced\"}} {synced}\n");
        let writes = |metrics: &str| -> f64 {
            metrics
                .lines()
                .filter(|l| l.starts_with("mimeo_writes_total"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        let started = Instant::now();
        let mut last = (f64::NAN, Instant::now());
        loop {
            let metrics = self.metrics().await;
            let now = writes(&metrics);
            if now != last.0 {
                last = (now, Instant::now());
            }
            if metrics.contains(&in_sync) && last.1.elapsed() >= quiet {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(1800),
                "mimeo did not settle at {synced} copies in sync"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Sends a signal (`KILL`, `STOP`, `CONT`, ...).
    pub fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status();
    }

    /// Waits for the process after a SIGKILL.
    pub fn reap(&mut self) {
        let _ = self.child.wait();
    }

    pub fn stop(&mut self) {
        // SIGTERM: the graceful path a pod takes.
        let _ = Command::new("kill").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

impl Drop for Mimeo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Requests the apiserver served, by verb and resource, on `resources` (WATCH excluded: those
/// are long-running).
pub async fn apiserver_requests(client: &Client, resources: &[&str]) -> BTreeMap<(String, String), f64> {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(request).await.unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let label = |name: &str| {
            let start = line.find(&format!("{name}=\""))? + name.len() + 2;
            let end = line[start..].find('"')? + start;
            Some(line[start..end].to_owned())
        };
        let (Some(verb), Some(resource)) = (label("verb"), label("resource")) else {
            continue;
        };
        if verb == "WATCH" || !resources.contains(&resource.as_str()) {
            continue;
        }
        let count: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|c| c.parse().ok())
            .unwrap_or(0.0);
        *out.entry((verb, resource)).or_insert(0.0) += count;
    }
    out
}

pub fn requests_since(
    before: &BTreeMap<(String, String), f64>,
    after: &BTreeMap<(String, String), f64>,
) -> BTreeMap<(String, String), f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .collect()
}

/// Server-side applies any object, finding its kind by discovery.
pub async fn apply(client: &Client, object: serde_json::Value) {
    let gvk: kube::core::GroupVersionKind = serde_json::from_value::<kube::core::TypeMeta>(object.clone())
        .unwrap()
        .try_into()
        .unwrap();
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let name = object["metadata"]["name"].as_str().unwrap().to_owned();
    let api: kube::api::Api<kube::api::DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) if caps.scope == kube::discovery::Scope::Namespaced => {
            kube::api::Api::namespaced_with(client.clone(), ns, &resource)
        }
        _ => kube::api::Api::all_with(client.clone(), &resource),
    };
    api.patch(
        &name,
        &kube::api::PatchParams::apply("bench").force(),
        &kube::api::Patch::Apply(&object),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {name}: {e}"));
}
