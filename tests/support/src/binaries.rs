//! Finds the control-plane binaries, the ORAS and Helm CLIs, promtool and the kstatus reader,
//! building them with `build-control-plane.sh`, `build-oras.sh`, `build-helm.sh`,
//! `build-promtool.sh` and `build-kstatus.sh` on first use, so that `cargo test --workspace` passes on a fresh machine by itself.

use crate::Error;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// Where `kube-apiserver`, `etcd` and `kubectl` live.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub dir: PathBuf,
}

impl Binaries {
    pub fn kube_apiserver(&self) -> PathBuf {
        self.dir.join("kube-apiserver")
    }

    pub fn etcd(&self) -> PathBuf {
        self.dir.join("etcd")
    }

    pub fn kubectl(&self) -> PathBuf {
        self.dir.join("kubectl")
    }
}

/// The binaries, from `MIMEO_ENVTEST_BIN_DIR` when set, else from the build script's cache
/// (which builds them the first time: several minutes cold, instant warm).
pub fn binaries() -> Result<Binaries, Error> {
    static FOUND: OnceLock<Result<Binaries, String>> = OnceLock::new();
    FOUND.get_or_init(locate).clone().map_err(Error::Binaries)
}

fn locate() -> Result<Binaries, String> {
    if let Some(dir) = std::env::var_os("MIMEO_ENVTEST_BIN_DIR") {
        return Ok(Binaries { dir: dir.into() });
    }
    run_script("build-control-plane.sh", "directory").map(|dir| Binaries { dir })
}

/// The ORAS CLI, from `MIMEO_ORAS_BIN` when set and not empty, else from `build-oras.sh`'s cache
/// (which builds it from its Go module the first time: about a minute cold, instant warm). The
/// script runs once per test process, however many tests ask.
pub fn oras() -> Result<PathBuf, Error> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND
        .get_or_init(
            || match std::env::var_os("MIMEO_ORAS_BIN").filter(|bin| !bin.is_empty()) {
                Some(bin) => Ok(bin.into()),
                None => run_script("build-oras.sh", "path"),
            },
        )
        .clone()
        .map_err(Error::Oras)
}

/// The Helm CLI (v3), from `MIMEO_HELM_BIN` when set and not empty, else from `build-helm.sh`'s
/// cache (which builds it from its Go module the first time: about a minute and a half cold,
/// instant warm). The script runs once per test process, however many tests ask.
pub fn helm() -> Result<PathBuf, Error> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND
        .get_or_init(
            || match std::env::var_os("MIMEO_HELM_BIN").filter(|bin| !bin.is_empty()) {
                Some(bin) => Ok(bin.into()),
                None => run_script("build-helm.sh", "path"),
            },
        )
        .clone()
        .map_err(Error::Helm)
}

/// Prometheus's promtool, from `MIMEO_PROMTOOL_BIN` when set and not empty, else from
/// `build-promtool.sh`'s cache (which builds it from the Prometheus module the first time: about
/// ten minutes cold on two cores, instant warm). The script runs once per test process.
pub fn promtool() -> Result<PathBuf, Error> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND
        .get_or_init(
            || match std::env::var_os("MIMEO_PROMTOOL_BIN").filter(|bin| !bin.is_empty()) {
                Some(bin) => Ok(bin.into()),
                None => run_script("build-promtool.sh", "path"),
            },
        )
        .clone()
        .map_err(Error::Promtool)
}

/// The kstatus reader (`kstatus/`: objects as JSON on stdin, what Flux's kstatus library makes of
/// each on stdout), from `build-kstatus.sh`'s cache (built from the Go module proxy the first
/// time: about half a minute cold, instant warm). The script runs once per test process.
pub fn kstatus() -> Result<PathBuf, Error> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| run_script("build-kstatus.sh", "path"))
        .clone()
        .map_err(Error::Kstatus)
}

/// Runs one of this crate's build scripts and returns the last line it printed: the scripts log to
/// stderr and end with the path they built or found.
pub(crate) fn run_script(name: &str, what: &str) -> Result<PathBuf, String> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(name);
    let output = Command::new("bash")
        .arg(&script)
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} failed:\n{}",
            script.display(),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let path = stdout.lines().last().unwrap_or_default().trim();
    if path.is_empty() {
        return Err(format!("{} printed no {what}", script.display()));
    }
    Ok(path.into())
}
