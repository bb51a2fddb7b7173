//! Compiling a component in a process of its own, under limits of time, CPU time and memory.
//!
//! Cranelift cannot be stopped part way, and what it needs grows with the shape of the code, not
//! its size: a 0.5 MB component of one function with thousands of locals live across a loop
//! takes 39 s and 1.1 GB to compile. In the controller's process that would hold a core and push
//! the pod past its memory limit, for every rule of every tenant. So the controller runs its own
//! binary (`mimeo plugin compile-into-cache`, hidden) on the component: the child limits its own
//! data segment (`RLIMIT_DATA`) and CPU time (`RLIMIT_CPU`), compiles, and writes the signed
//! artifact into the cache, where the controller loads it as it loads any cached artifact; past
//! the time limit the child is killed. The CPU limit is apart from the time limit because
//! Cranelift compiles functions in parallel: within its time a child could keep every core busy.

use super::error::PluginError;
use super::settings::{CompilerProcess, HostSettings};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The hidden subcommand the child runs, under `mimeo plugin`.
pub const SUBCOMMAND: &str = "compile-into-cache";
/// How much of the child's stderr is kept for the error message.
const STDERR_TAIL: usize = 2048;
/// The environment variable that overrides the binary's jemalloc settings.
const ALLOCATOR_SETTINGS: &str = "_RJEM_MALLOC_CONF";
/// How often the parent looks whether the child has ended.
const POLL: Duration = Duration::from_millis(10);

impl CompilerProcess {
    /// Runs the child on `bytes`; on success the signed artifact for `digest` is in the cache.
    /// Blocking: waits for the child, at most `timeout`.
    pub fn compile(&self, settings: &HostSettings, digest: &str, bytes: &[u8]) -> Result<(), PluginError> {
        let host =
            |what: &str, e: std::io::Error| PluginError::Host(format!("{what} the compiler process: {e}"));
        let mut child = Command::new(&self.program)
            .args(["plugin", SUBCOMMAND, "--digest", digest])
            .arg("--cache-dir")
            .arg(&settings.cache_dir)
            .args([
                format!("--cache-mib={}", settings.cache_max_bytes >> 20),
                format!("--memory-mib={}", settings.max_memory_bytes >> 20),
                format!("--concurrency={}", settings.concurrency),
                format!("--max-compile-mib={}", self.max_memory_bytes >> 20),
                format!("--max-compile-cpu-secs={}", cpu_secs(self.max_cpu_time)),
            ])
            .env_remove("RUST_BACKTRACE")
            // The binary's jemalloc runs the controller without thread caches (what they keep
            // after a burst stays resident); a compile is one burst that ends with its child,
            // faster with them. A setting of the user's own goes through as it is.
            .env(
                ALLOCATOR_SETTINGS,
                std::env::var_os(ALLOCATOR_SETTINGS).unwrap_or_else(|| "tcache:true".into()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| host("starting", e))?;
        let started = Instant::now();
        // Fed and drained on threads of their own: a child that stops reading, or writes much,
        // must not hold this thread past the deadline.
        let mut stdin = child.stdin.take().expect("piped");
        let input = bytes.to_vec();
        let feeder = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let mut stderr = child.stderr.take().expect("piped");
        let drainer = std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = stderr.read_to_end(&mut text);
            tail(&String::from_utf8_lossy(&text))
        });
        let status = loop {
            if let Some(status) = child.try_wait().map_err(|e| host("waiting for", e))? {
                break status;
            }
            if started.elapsed() >= self.timeout {
                let _ = child.kill();
                let _ = child.wait();
                let _ = feeder.join();
                return Err(PluginError::CompileTimeout(self.timeout));
            }
            std::thread::sleep(POLL);
        };
        let _ = feeder.join();
        let said = drainer.join().unwrap_or_default();
        if status.success() {
            return Ok(());
        }
        // The kernel signals a process past its soft CPU limit (and kills it at the hard one).
        use std::os::unix::process::ExitStatusExt;
        let xcpu = rustix::process::Signal::XCPU.as_raw();
        if status.signal() == Some(xcpu) {
            return Err(PluginError::CompileCpuTime(Duration::from_secs(cpu_secs(
                self.max_cpu_time,
            ))));
        }
        if said.contains("memory allocation of") || said.contains("out of memory") {
            return Err(PluginError::CompileOutOfMemory(self.max_memory_bytes));
        }
        let why = if said.trim().is_empty() {
            format!("the compiler process ended with {status}")
        } else {
            said.trim().trim_start_matches("Error: ").to_owned()
        };
        Err(PluginError::Compile(why))
    }
}

/// A CPU time limit in the whole seconds `RLIMIT_CPU` counts, rounded up, at least one.
fn cpu_secs(limit: Duration) -> u64 {
    limit.as_secs() + u64::from(limit.subsec_nanos() > 0).max(u64::from(limit.as_secs() == 0))
}

fn tail(text: &str) -> String {
    let mut start = text.len().saturating_sub(STDERR_TAIL);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_owned()
}

/// The child's side: limits this process's data segment to `max_memory_bytes` and its CPU time
/// to `max_cpu_secs`, compiles the component read from stdin and stores its signed artifact in
/// the cache of `settings`.
pub fn compile_into_cache(
    settings: &HostSettings,
    digest: &str,
    max_memory_bytes: u64,
    max_cpu_secs: u64,
) -> Result<(), PluginError> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    let limit = Rlimit {
        current: Some(max_memory_bytes),
        maximum: Some(max_memory_bytes),
    };
    setrlimit(Resource::Data, limit)
        .map_err(|e| PluginError::Host(format!("limiting the compiler's memory: {e}")))?;
    // SIGXCPU at the soft limit ends the process (the parent reads it as the limit reached);
    // SIGKILL a second later, should anything in it catch SIGXCPU.
    let max_cpu_secs = max_cpu_secs.max(1);
    let limit = Rlimit {
        current: Some(max_cpu_secs),
        maximum: Some(max_cpu_secs + 1),
    };
    setrlimit(Resource::Cpu, limit)
        .map_err(|e| PluginError::Host(format!("limiting the compiler's CPU time: {e}")))?;
    let mut bytes = Vec::new();
    std::io::stdin()
        .read_to_end(&mut bytes)
        .map_err(|e| PluginError::Host(format!("reading the component: {e}")))?;
    if crate::sync::hash::digest_bytes(&bytes) != digest {
        return Err(PluginError::Host(
            "the component read does not have the digest given".into(),
        ));
    }
    let settings = HostSettings {
        compiler: None,
        ..settings.clone()
    };
    super::engine::Engine::new(&settings)?.compile_to_cache(&bytes, digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_limits_are_whole_seconds_rounded_up() {
        for (limit, secs) in [
            (Duration::ZERO, 1),
            (Duration::from_millis(300), 1),
            (Duration::from_secs(1), 1),
            (Duration::from_millis(1500), 2),
            (Duration::from_secs(120), 120),
        ] {
            assert_eq!(cpu_secs(limit), secs, "{limit:?}");
        }
    }

    #[test]
    fn the_tail_of_stderr_is_kept_on_a_character_boundary() {
        let text = format!("é{}", "x".repeat(STDERR_TAIL - 1));
        assert_eq!(tail(&text), "x".repeat(STDERR_TAIL - 1));
        assert_eq!(tail("short"), "short");
    }
}
