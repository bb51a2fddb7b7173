//! Finds the control-plane binaries, building them with `build-control-plane.sh` on first use.

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
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("build-control-plane.sh");
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
    let dir = stdout.lines().last().unwrap_or_default().trim();
    if dir.is_empty() {
        return Err(format!("{} printed no directory", script.display()));
    }
    Ok(Binaries { dir: dir.into() })
}
