//! `envtest up`: one long-lived control plane for local use, such as the demo (`./demo.sh`).
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

use mimeo_envtest::ControlPlane;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};

const USAGE: &str = "\
usage: envtest up --state-dir DIR [--crds FILE]...

Starts a local etcd + kube-apiserver and keeps it running until SIGTERM or SIGINT.

options:
  --state-dir DIR   where to write kubeconfig, envtest.pid and, last, ready (created if missing)
  --crds FILE       a YAML file whose CustomResourceDefinitions are installed before ready is
                    written; may be repeated
  -h, --help        print this help

The control-plane binaries come from MIMEO_ENVTEST_BIN_DIR, or are built on first use by
tests/support/build-control-plane.sh.";

const KUBECONFIG: &str = "kubeconfig";
const PID_FILE: &str = "envtest.pid";
const READY: &str = "ready";

/// How often to check that etcd and kube-apiserver are still running.
const WATCHDOG_PERIOD: Duration = Duration::from_secs(2);

#[derive(Debug, PartialEq)]
struct Up {
    state_dir: PathBuf,
    crds: Vec<PathBuf>,
}

#[derive(Debug, PartialEq)]
enum Invocation {
    Up(Up),
    Help,
}

fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Invocation, String> {
    let mut args = args.into_iter();
    match args.next() {
        None => return Err("missing command: the only command is `up`".into()),
        Some(command) if command == "up" => {}
        Some(flag) if flag == "-h" || flag == "--help" || flag == "help" => return Ok(Invocation::Help),
        Some(other) => {
            return Err(format!(
                "unknown command {:?}: the only command is `up`",
                other.to_string_lossy()
            ));
        }
    }
    let mut state_dir = None;
    let mut crds = Vec::new();
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy().into_owned();
        let (flag, inline) = match text.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_owned(), Some(OsString::from(value))),
            _ => (text.clone(), None),
        };
        let mut value = |name: &str| -> Result<PathBuf, String> {
            let value = inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs a value"))?;
            if value.is_empty() {
                return Err(format!("{name} needs a non-empty value"));
            }
            Ok(PathBuf::from(value))
        };
        match flag.as_str() {
            "--state-dir" => {
                if state_dir.is_some() {
                    return Err("--state-dir given twice".into());
                }
                state_dir = Some(value("--state-dir")?);
            }
            "--crds" => crds.push(value("--crds")?),
            "-h" | "--help" => return Ok(Invocation::Help),
            _ => return Err(format!("unknown argument {text:?}")),
        }
    }
    let state_dir = state_dir.ok_or("--state-dir DIR is required")?;
    Ok(Invocation::Up(Up { state_dir, crds }))
}

#[tokio::main]
async fn main() -> ExitCode {
    let up = match parse(std::env::args_os().skip(1)) {
        Ok(Invocation::Up(up)) => up,
        Ok(Invocation::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("envtest: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(up).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("envtest: error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// SIGTERM and SIGINT, either of which asks for a clean stop.
struct Shutdown {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Shutdown {
    fn install() -> Result<Self, String> {
        let listen = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| format!("installing the {name} handler: {e}"))
        };
        Ok(Shutdown {
            term: listen(SignalKind::terminate(), "SIGTERM")?,
            int: listen(SignalKind::interrupt(), "SIGINT")?,
        })
    }

    /// Waits for the next signal and returns its name.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

async fn run(up: Up) -> Result<(), String> {
    for path in &up.crds {
        if !path.is_file() {
            return Err(format!("--crds {}: no such file", path.display()));
        }
    }
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

/// Whether a process is running: it exists and is not a zombie. Our own children stay zombies
/// until the plane is dropped, so an exited etcd or kube-apiserver shows up as `Z`.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "pid (comm) S ...": the state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
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

/// Whether the process `pid` runs this binary (guards against a reused pid).
fn is_envtest(pid: u32) -> bool {
    let ours = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_owned()));
    let theirs = std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_owned()));
    match (ours, theirs) {
        (Some(ours), Some(theirs)) => ours == theirs,
        // Cannot tell: assume it is one, and refuse rather than share a directory.
        _ => true,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses_up_with_state_dir_and_repeated_crds() {
        assert_eq!(
            parse(args(&[
                "up",
                "--state-dir",
                ".demo",
                "--crds",
                "a.yaml",
                "--crds=b.yaml"
            ])),
            Ok(Invocation::Up(Up {
                state_dir: ".demo".into(),
                crds: vec!["a.yaml".into(), "b.yaml".into()],
            }))
        );
        assert_eq!(
            parse(args(&["up", "--state-dir=/tmp/x"])),
            Ok(Invocation::Up(Up {
                state_dir: "/tmp/x".into(),
                crds: vec![]
            }))
        );
    }

    #[test]
    fn help() {
        assert_eq!(parse(args(&["--help"])), Ok(Invocation::Help));
        assert_eq!(parse(args(&["up", "-h"])), Ok(Invocation::Help));
    }

    #[test]
    fn refuses_bad_invocations() {
        for (list, message) in [
            (&[][..], "missing command"),
            (&["down"][..], "unknown command"),
            (&["up"][..], "--state-dir DIR is required"),
            (&["up", "--state-dir"][..], "--state-dir needs a value"),
            (&["up", "--state-dir="][..], "non-empty"),
            (&["up", "--state-dir", "a", "--state-dir", "b"][..], "given twice"),
            (&["up", "--state-dir", "a", "--crds"][..], "--crds needs a value"),
            (&["up", "--state-dir", "a", "--verbose"][..], "unknown argument"),
        ] {
            let error = parse(args(list)).expect_err(&format!("{list:?} should be refused"));
            assert!(error.contains(message), "{list:?}: {error:?} lacks {message:?}");
        }
    }
}
