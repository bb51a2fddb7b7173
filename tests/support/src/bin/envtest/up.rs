//! `envtest up`: one long-lived control plane for local use, such as the demo (`./demo.sh`), in
//! the foreground; `envtest start` runs it detached.
//!
//! ```text
//! envtest up --state-dir DIR [--crds FILE]...
//! ```
//!
//! Starts an etcd + kube-apiserver pair (a [`ControlPlane`]), installs the CRDs found in each
//! `--crds` file, then writes into `DIR`:
//!
//! - `kubeconfig`: the admin kubeconfig (credentials embedded, mode 0600);
//! - `envtest.pid`: this process's id, the one to send SIGTERM to;
//! - `ready`: an empty file, written last, so its presence means everything above is in place.
//!
//! It prints the kubeconfig path on stdout and runs until SIGTERM or SIGINT, then removes `ready`,
//! stops the control plane (its data directory goes with it) and removes `envtest.pid`. If etcd or
//! kube-apiserver dies on its own, it does the same, prints their log tails, and exits non-zero.
//! Progress and errors go to stderr.

use crate::args::Up;
use crate::pid_file::{UP_PID_FILE as PID_FILE, alive, is_envtest};
use crate::shutdown::Shutdown;
use mimeo_envtest::ControlPlane;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const KUBECONFIG: &str = "kubeconfig";
pub const READY: &str = "ready";

/// How often to check that etcd and kube-apiserver are still running.
const WATCHDOG_PERIOD: Duration = Duration::from_secs(2);

/// Refuses a `--crds` that names no file, before anything is started.
pub fn check_crds(crds: &[PathBuf]) -> Result<(), String> {
    match crds.iter().find(|path| !path.is_file()) {
        Some(path) => Err(format!("--crds {}: no such file", path.display())),
        None => Ok(()),
    }
}

pub async fn run(up: Up) -> Result<(), String> {
    check_crds(&up.crds)?;
    std::fs::create_dir_all(&up.state_dir)
        .map_err(|e| format!("creating the state directory {}: {e}", up.state_dir.display()))?;
    let state_dir = up
        .state_dir
        .canonicalize()
        .map_err(|e| format!("resolving {}: {e}", up.state_dir.display()))?;
    let files = StateFiles::new(&state_dir);
    files.claim()?;

    // Installed before start-up, so a signal during start-up stops it cleanly too: dropping the
    // start-up future drops whatever processes it had spawned.
    let mut shutdown = Shutdown::install()?;
    let plane = tokio::select! {
        plane = start(&up.crds) => plane?,
        name = shutdown.recv() => {
            eprintln!("envtest: {name} during start-up, stopping");
            files.release();
            return Ok(());
        }
    };

    if let Err(e) = files.publish(&plane) {
        files.release();
        return Err(e);
    }
    let kubeconfig = files.path(KUBECONFIG);
    eprintln!(
        "envtest: ready: apiserver {} (etcd pid {}, kube-apiserver pid {}); stop with: kill -TERM {}",
        plane.server(),
        plane.pids()[0],
        plane.pids()[1],
        std::process::id()
    );
    println!("{}", kubeconfig.display());

    let outcome = watch(&plane, &mut shutdown).await;
    // `ready` goes first, so nobody starts using a plane that is stopping.
    let _ = std::fs::remove_file(files.path(READY));
    if outcome.is_err() {
        eprint!("{}", log_tails(&plane));
    }
    drop(plane);
    files.release();
    match &outcome {
        Ok(name) => eprintln!("envtest: {name}: control plane stopped"),
        Err(_) => eprintln!("envtest: control plane stopped"),
    }
    outcome.map(|_| ())
}

async fn start(crds: &[PathBuf]) -> Result<ControlPlane, String> {
    if std::env::var_os("MIMEO_ENVTEST_BIN_DIR").is_none() {
        eprintln!(
            "envtest: locating the control-plane binaries (the first use builds them: several minutes)"
        );
    }
    let binaries = mimeo_envtest::binaries().map_err(|e| e.to_string())?;
    for path in [binaries.etcd(), binaries.kube_apiserver()] {
        if !path.is_file() {
            return Err(format!(
                "{} does not exist: the control-plane binaries are expected in {}{}",
                path.display(),
                binaries.dir.display(),
                if std::env::var_os("MIMEO_ENVTEST_BIN_DIR").is_some() {
                    " (from MIMEO_ENVTEST_BIN_DIR)"
                } else {
                    ""
                }
            ));
        }
    }
    eprintln!("envtest: starting etcd and kube-apiserver");
    let plane = ControlPlane::start()
        .await
        .map_err(|e| format!("starting the control plane: {e}"))?;
    if !crds.is_empty() {
        let names = plane
            .install_crds(crds)
            .await
            .map_err(|e| format!("installing CRDs: {e}"))?;
        if names.is_empty() {
            return Err(format!(
                "no CustomResourceDefinition found in {}",
                crds.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        eprintln!("envtest: installed CRDs: {}", names.join(", "));
    }
    Ok(plane)
}

/// Runs until a signal arrives (returning its name) or a control-plane process dies (an error).
async fn watch(plane: &ControlPlane, shutdown: &mut Shutdown) -> Result<&'static str, String> {
    let mut tick = tokio::time::interval(WATCHDOG_PERIOD);
    loop {
        tokio::select! {
            name = shutdown.recv() => return Ok(name),
            _ = tick.tick() => {
                let [etcd, apiserver] = plane.pids();
                for (name, pid) in [("etcd", etcd), ("kube-apiserver", apiserver)] {
                    if !alive(pid) {
                        return Err(format!("{name} (pid {pid}) exited on its own; the control plane is gone"));
                    }
                }
            }
        }
    }
}

/// The last lines of the control plane's logs, read before its data directory is removed.
fn log_tails(plane: &ControlPlane) -> String {
    let Some(dir) = plane.kubeconfig_path().parent() else {
        return String::new();
    };
    let mut out = String::new();
    for name in ["kube-apiserver.log", "etcd.log"] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        out.push_str(&format!("--- {name} (last lines) ---\n"));
        for line in &lines[lines.len().saturating_sub(20)..] {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The files in the state directory.
struct StateFiles {
    dir: PathBuf,
}

impl StateFiles {
    fn new(dir: &Path) -> Self {
        StateFiles { dir: dir.to_owned() }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Refuses a directory another running envtest uses; clears what a dead one left behind.
    fn claim(&self) -> Result<(), String> {
        if let Ok(text) = std::fs::read_to_string(self.path(PID_FILE))
            && let Ok(pid) = text.trim().parse::<u32>()
            && pid != std::process::id()
            && alive(pid)
            && is_envtest(pid)
        {
            return Err(format!(
                "another envtest (pid {pid}) is running with state directory {}; stop it first (kill -TERM {pid})",
                self.dir.display()
            ));
        }
        for name in [READY, PID_FILE, KUBECONFIG] {
            match std::fs::remove_file(self.path(name)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("removing the stale {}: {e}", self.path(name).display())),
            }
        }
        Ok(())
    }

    /// Writes the kubeconfig, the pid file and, last, `ready`.
    fn publish(&self, plane: &ControlPlane) -> Result<(), String> {
        write_private(&self.path(KUBECONFIG), plane.kubeconfig_yaml())?;
        write(&self.path(PID_FILE), &format!("{}\n", std::process::id()))?;
        write(&self.path(READY), "")
    }

    /// Removes `ready` and the pid file. The kubeconfig stays: it is harmless once the plane is
    /// gone, and whoever started us may still want to read which server it named.
    fn release(&self) {
        for name in [READY, PID_FILE] {
            let _ = std::fs::remove_file(self.path(name));
        }
    }
}

fn write(path: &Path, contents: &str) -> Result<(), String> {
    std::fs::write(path, contents).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Writes a file only its owner can read: the kubeconfig holds the admin's private key.
fn write_private(path: &Path, contents: &str) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    file.write_all(contents.as_bytes())
        .map_err(|e| format!("writing {}: {e}", path.display()))
}
