//! The wasmtime engine: configuration, the epoch ticker, compiling with an on-disk cache, and
//! fresh stores.
//!
//! The cache holds `<digest hex>-<compatibility>.cwasm` files, each written to a temp name
//! (`.partial-…`) and renamed into place, so a reader or an eviction in this or another process
//! sees a whole file or none. The directory is private (`private_dir`), and each file starts
//! with a MAC, made with the directory's key, over the component's digest, the engine's
//! compatibility hash and the compiled code: a file mimeo did not write for that digest, planted
//! or renamed, is never loaded as native code. A file's mtime is its last use; after a new artifact is stored, the
//! least recently used go until the rest fit in `cache_max_bytes`, never the one just stored.

use super::bindings::{SUPPORTED_INTERFACES, TRANSFORMER_EXPORT, v0_1, v0_2};
use super::error::PluginError;
use super::private_dir;
use super::settings::{CompilerProcess, HostSettings};
use super::state::{HostState, Limiter};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, InstanceAllocationStrategy, PoolingAllocationConfig};

/// A component linked for the interface version it implements.
pub(super) enum Pre {
    V0_1(v0_1::PluginPre<HostState>),
    V0_2(v0_2::PluginPre<HostState>),
}

/// The exports of one instance, of either version.
pub(super) enum Exports<'a> {
    V0_1(&'a v0_1::exports::mimeo::transform::transformer::Guest),
    V0_2(&'a v0_2::exports::mimeo::transform::transformer::Guest),
}

/// How often the epoch advances: the granularity of deadlines.
const TICK: Duration = Duration::from_millis(5);

/// The extension of a compiled artifact in the cache directory.
const ARTIFACT_EXTENSION: &str = "cwasm";
/// What a file being written carries in its name until it is renamed into place.
const PARTIAL_MARKER: &str = ".partial-";
/// The MAC at the start of each cached artifact.
const MAC_LEN: usize = 32;
/// A partial file older than this was left by a writer that died; eviction removes it.
const STALE_PARTIAL: Duration = Duration::from_secs(3600);

/// A component compiled for this engine, linked and ready to instantiate.
pub(super) struct Compiled {
    pub pre: Pre,
    pub interface_version: String,
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

pub(super) struct Engine {
    engine: wasmtime::Engine,
    linker: Linker<HostState>,
    /// Names this engine's compiled code: artifacts of another wasmtime build or configuration
    /// are never loaded.
    compatibility: String,
    cache_dir: PathBuf,
    /// Signs what this engine writes to the cache, so that only that is ever loaded.
    cache_key: [u8; 32],
    cache_max_bytes: u64,
    /// The settings a compiler process is started with, and its limits; `None` compiles here.
    compiler: Option<(HostSettings, CompilerProcess)>,
    ticker: Ticker,
    /// Drives the timers of calls: each call's deadline, and the clocks a guest waits on.
    timers: Timers,
}

/// A runtime of one worker thread that only drives timers. Calls are polled on the caller's
/// thread (a blocking one), so a busy guest never holds an async worker of the controller.
struct Timers(Option<tokio::runtime::Runtime>);

impl Timers {
    fn start() -> Result<Self, PluginError> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("plugin-timers")
            .enable_time()
            .build()
            .map(|rt| Timers(Some(rt)))
            .map_err(|e| PluginError::Host(format!("starting the plugin timers: {e}")))
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("present until dropped").handle()
    }
}

impl Drop for Timers {
    fn drop(&mut self) {
        // Without blocking: the host may be dropped on an async worker.
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// Advances the engine's epoch every [`TICK`] while a call runs, and sleeps otherwise: an idle
/// controller (no plugin running, or none at all) wakes for nothing.
struct Ticker {
    /// Calls running, and whether the engine is gone.
    state: Arc<(Mutex<TickerState>, Condvar)>,
}

#[derive(Default)]
struct TickerState {
    running: usize,
    stop: bool,
    /// Ticks so far, for tests.
    ticks: u64,
}

/// Holds the ticker awake while it lives.
struct Ticking<'a>(&'a Ticker);

impl Ticker {
    fn start(engine: wasmtime::Engine) -> Result<Self, PluginError> {
        let state: Arc<(Mutex<TickerState>, Condvar)> = Arc::default();
        let shared = state.clone();
        std::thread::Builder::new()
            .name("plugin-epoch".into())
            .spawn(move || {
                let (lock, wake) = &*shared;
                loop {
                    {
                        let mut state = crate::locks::lock(lock);
                        while state.running == 0 && !state.stop {
                            state = wake.wait(state).unwrap_or_else(|e| e.into_inner());
                        }
                        if state.stop {
                            return;
                        }
                    }
                    std::thread::sleep(TICK);
                    engine.increment_epoch();
                    crate::locks::lock(lock).ticks += 1;
                }
            })
            .map_err(|e| PluginError::Host(format!("starting the epoch ticker: {e}")))?;
        Ok(Ticker { state })
    }

    fn ticking(&self) -> Ticking<'_> {
        let (lock, wake) = &*self.state;
        crate::locks::lock(lock).running += 1;
        wake.notify_one();
        Ticking(self)
    }

    #[cfg(test)]
    fn ticks(&self) -> u64 {
        crate::locks::lock(&self.state.0).ticks
    }
}

impl Drop for Ticking<'_> {
    fn drop(&mut self) {
        crate::locks::lock(&self.0.state.0).running -= 1;
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        let (lock, wake) = &*self.state;
        crate::locks::lock(lock).stop = true;
        wake.notify_one();
    }
}

impl Engine {
    pub fn new(settings: &HostSettings) -> Result<Self, PluginError> {
        let cache_problem = |e: private_dir::PrivateDirError| {
            PluginError::Host(format!("the compiled-plugin cache (--plugin-cache-dir) {e}"))
        };
        private_dir::ensure(&settings.cache_dir).map_err(cache_problem)?;
        let cache_key = private_dir::key(&settings.cache_dir).map_err(cache_problem)?;
        let mut pool = PoolingAllocationConfig::default();
        let slots = settings.concurrency.max(1);
        // Interpreted-language plugins (componentize-py, componentize-js) hold many core
        // instances, memories and tables in one component; size the per-component limits for them.
        pool.total_component_instances(slots * 2)
            .max_core_instances_per_component(64)
            .max_memories_per_component(16)
            .max_tables_per_component(64)
            .total_core_instances(slots * 64)
            .total_memories(slots * 16)
            .total_tables(slots * 64)
            .total_stacks(slots * 2)
            .max_memory_size(settings.max_memory_bytes)
            .max_component_instance_size(1 << 20)
            .max_core_instance_size(1 << 20)
            .table_elements(100_000);
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
            .memory_reservation(settings.max_memory_bytes as u64)
            .memory_guard_size(64 << 10)
            .memory_may_move(false);
        let engine = wasmtime::Engine::new(&config).map_err(|e| PluginError::Host(format!("{e:#}")))?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| PluginError::Host(format!("{e:#}")))?;
        // Both versions' `log`: a chain may hold components of either.
        v0_1::mimeo::transform::log::add_to_linker::<HostState, wasmtime::component::HasSelf<HostState>>(
            &mut linker,
            |state| state,
        )
        .map_err(|e| PluginError::Host(format!("{e:#}")))?;
        v0_2::mimeo::transform::log::add_to_linker::<HostState, wasmtime::component::HasSelf<HostState>>(
            &mut linker,
            |state| state,
        )
        .map_err(|e| PluginError::Host(format!("{e:#}")))?;

        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let compatibility = format!("{:016x}", hasher.finish());

        let ticker = Ticker::start(engine.clone())?;

        Ok(Engine {
            engine,
            linker,
            compatibility,
            cache_dir: settings.cache_dir.clone(),
            cache_key,
            cache_max_bytes: settings.cache_max_bytes,
            compiler: settings.compiler.clone().map(|c| (settings.clone(), c)),
            ticker,
            timers: Timers::start()?,
        })
    }

    /// Compiles `bytes` (or loads the compiled artifact cached under its digest), checks that it
    /// is a mimeo plugin of a known interface version, and links it.
    pub fn compile(&self, bytes: &[u8], digest: &str) -> Result<Compiled, PluginError> {
        check_header(bytes)?;
        let component = self.cached_or_compiled(bytes, digest)?;
        prepare_memory_image(&component)?;
        let ty = component.component_type();
        let imports: Vec<String> = ty
            .imports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let exports: Vec<String> = ty
            .exports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let version = interface_version(&exports)?;
        let instance_pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| PluginError::Link(format!("{e:#}")))?;
        let link = |e: wasmtime::Error| PluginError::Link(format!("{e:#}"));
        let pre = match version.as_str() {
            "0.1.0" => Pre::V0_1(v0_1::PluginPre::new(instance_pre).map_err(link)?),
            _ => Pre::V0_2(v0_2::PluginPre::new(instance_pre).map_err(link)?),
        };
        Ok(Compiled {
            pre,
            interface_version: version,
            imports,
            exports,
        })
    }

    fn artifact_file(&self, digest: &str) -> PathBuf {
        self.cache_dir.join(format!(
            "{}-{}.{ARTIFACT_EXTENSION}",
            digest.trim_start_matches("sha256:"),
            self.compatibility
        ))
    }

    fn cached_or_compiled(&self, bytes: &[u8], digest: &str) -> Result<Component, PluginError> {
        let file = self.artifact_file(digest);
        if let Some(component) = self.load_signed(&file, digest) {
            return Ok(component);
        }
        let Some((settings, compiler)) = &self.compiler else {
            return self.compile_and_store(bytes, digest, &file);
        };
        compiler.compile(settings, digest, bytes)?;
        self.load_signed(&file, digest).ok_or_else(|| {
            PluginError::Host("the compiler process left no artifact this cache signed".into())
        })
    }

    /// Compiles here and stores the signed artifact: what the compiler process does.
    pub fn compile_to_cache(&self, bytes: &[u8], digest: &str) -> Result<(), PluginError> {
        check_header(bytes)?;
        self.compile_and_store(bytes, digest, &self.artifact_file(digest))
            .map(drop)
    }

    fn compile_and_store(&self, bytes: &[u8], digest: &str, file: &Path) -> Result<Component, PluginError> {
        let component =
            Component::new(&self.engine, bytes).map_err(|e| PluginError::Compile(format!("{e:#}")))?;
        match self.store_artifact(&component, file, digest) {
            Ok(()) => self.evict(file),
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "could not cache a compiled plugin")
            }
        }
        Ok(component)
    }

    /// The component cached in `file`, if this cache signed it for `digest` and it loads.
    fn load_signed(&self, file: &Path, digest: &str) -> Option<Component> {
        let code = self.signed_artifact(file, digest)?;
        #[allow(unsafe_code)]
        // SAFETY: `code` carries a MAC made with this cache's private key over this digest,
        // this engine's compatibility hash and these very bytes, which only
        // `store_artifact` makes, from `Component::serialize` of an engine like this one;
        // the bytes were read into memory before the MAC was checked, so nothing can swap
        // them after. wasmtime checks the artifact's header and engine settings again.
        let loaded = unsafe { Component::deserialize(&self.engine, code.as_slice()) };
        match loaded {
            Ok(component) => {
                touch(file);
                Some(component)
            }
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "ignoring an unusable compiled plugin");
                None
            }
        }
    }

    /// The compiled code in `file` if its MAC shows this cache wrote it for `digest`; `None`
    /// for a miss, and for anything else, which is logged (and will be overwritten).
    fn signed_artifact(&self, file: &Path, digest: &str) -> Option<Vec<u8>> {
        let mut bytes = match std::fs::read(file) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "cannot read a compiled plugin");
                return None;
            }
        };
        let signed = bytes.len() > MAC_LEN && {
            let (mac, code) = bytes.split_at(MAC_LEN);
            private_dir::same_mac(mac, &self.artifact_mac(digest, code))
        };
        if !signed {
            tracing::warn!(file = %file.display(), "ignoring a compiled plugin this cache did not sign for its digest");
            return None;
        }
        bytes.drain(..MAC_LEN);
        Some(bytes)
    }

    fn artifact_mac(&self, digest: &str, code: &[u8]) -> [u8; 32] {
        private_dir::mac(
            &self.cache_key,
            &[
                digest.as_bytes(),
                b"\0",
                self.compatibility.as_bytes(),
                b"\0",
                code,
            ],
        )
    }

    fn store_artifact(&self, component: &Component, file: &Path, digest: &str) -> std::io::Result<()> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let code = component
            .serialize()
            .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        let mut bytes = Vec::with_capacity(MAC_LEN + code.len());
        bytes.extend_from_slice(&self.artifact_mac(digest, &code));
        bytes.extend_from_slice(&code);
        private_dir::ensure(&self.cache_dir).map_err(std::io::Error::other)?;
        // Write then rename, so a concurrent reader or eviction never sees half a file. The name
        // is unique to this process and call: two threads compiling the same plugin at once each
        // write their own, and the second rename replaces the first with identical bytes.
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("artifact");
        let partial = self.cache_dir.join(format!(
            "{name}{PARTIAL_MARKER}{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = std::fs::write(&partial, bytes).and_then(|()| std::fs::rename(&partial, file));
        if written.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
        written
    }

    /// Deletes the least recently used artifacts until the rest fit, keeping `keep`; and partial
    /// files that a dead writer left behind. Failures only leave the cache larger.
    fn evict(&self, keep: &Path) {
        let Ok(listing) = std::fs::read_dir(&self.cache_dir) else {
            return;
        };
        let now = SystemTime::now();
        let mut artifacts = Vec::new();
        for item in listing.flatten() {
            let path = item.path();
            let Ok(meta) = item.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            let name = item.file_name();
            let name = name.to_string_lossy();
            if name.contains(PARTIAL_MARKER) {
                if now.duration_since(modified).is_ok_and(|age| age > STALE_PARTIAL) {
                    let _ = std::fs::remove_file(&path);
                }
            } else if path.extension().is_some_and(|e| e == ARTIFACT_EXTENSION) {
                artifacts.push(CachedArtifact {
                    path,
                    size: meta.len(),
                    last_used: modified,
                });
            }
        }
        for path in plan_eviction(artifacts, self.cache_max_bytes, keep) {
            tracing::debug!(file = %path.display(), "evicting a compiled plugin");
            // Already gone (another process evicted it) is as good as removed.
            let _ = std::fs::remove_file(&path);
        }
    }

    /// A fresh store with the call's limits. A running guest yields at every epoch tick, so
    /// that [`Engine::run_until`] can end it at its deadline.
    pub fn store(&self, settings: &HostSettings, plugin: &str, rule: &str) -> wasmtime::Store<HostState> {
        let state = HostState::new(Limiter::new(settings.max_memory_bytes), plugin, rule);
        let mut store = wasmtime::Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limiter);
        store.set_epoch_deadline(1);
        store.epoch_deadline_async_yield_and_update(1);
        store
    }

    /// Runs a call on this thread until it ends or `deadline` passes (`None`); the call's
    /// future, the guest's instance with it, is dropped then, wherever the guest was: in its own
    /// code, which yields at every tick, or waiting in a WASI call, which is a timer here.
    pub fn run_until<T>(&self, deadline: Duration, call: impl std::future::Future<Output = T>) -> Option<T> {
        let _ticking = self.ticker.ticking();
        let _timers = self.timers.handle().enter();
        futures::executor::block_on(tokio::time::timeout(deadline, call)).ok()
    }
}

/// One compiled artifact as eviction sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct CachedArtifact {
    path: PathBuf,
    size: u64,
    last_used: SystemTime,
}

/// Which artifacts to delete so the rest fit in `max_bytes`: least recently used first, never
/// `keep` (which may be larger than the bound on its own). Pure, so the policy is tested without
/// a file system.
fn plan_eviction(mut artifacts: Vec<CachedArtifact>, max_bytes: u64, keep: &Path) -> Vec<PathBuf> {
    let mut total: u64 = artifacts.iter().map(|a| a.size).sum();
    artifacts.sort_by(|a, b| a.last_used.cmp(&b.last_used).then_with(|| a.path.cmp(&b.path)));
    let mut evict = Vec::new();
    for artifact in artifacts {
        if total <= max_bytes {
            break;
        }
        if artifact.path == keep {
            continue;
        }
        total -= artifact.size;
        evict.push(artifact.path);
    }
    evict
}

/// Marks a file used now; a failure only makes its eviction come sooner.
fn touch(path: &Path) {
    if let Ok(file) = std::fs::File::options().write(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// Builds the component's copy-on-write memory image now, at load, rather than at its first call.
/// On Linux wasmtime writes the image into a memfd and seals it; the kernel refuses the seal
/// (`EBUSY`) while any page of it is still held elsewhere, as pages briefly are in another CPU's
/// page-cache batch after the writing thread moved. A fresh memfd then succeeds, so this tries
/// three times, and what still fails is the host's problem, not something the plugin did.
fn prepare_memory_image(component: &Component) -> Result<(), PluginError> {
    let mut last = None;
    for pause in [
        Duration::ZERO,
        Duration::from_millis(50),
        Duration::from_millis(250),
    ] {
        std::thread::sleep(pause);
        match component.initialize_copy_on_write_image() {
            Ok(()) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    let e = last.map(|e| format!("{e:#}")).unwrap_or_default();
    Err(PluginError::Host(format!(
        "preparing the plugin's memory image: {e}"
    )))
}

/// Tells a core module, or something that is not WebAssembly at all, from a component.
fn check_header(bytes: &[u8]) -> Result<(), PluginError> {
    const MAGIC: &[u8] = b"\0asm";
    match bytes.get(..8) {
        Some(h) if &h[..4] == MAGIC && h[4..8] == [0x0d, 0x00, 0x01, 0x00] => Ok(()),
        Some(h) if &h[..4] == MAGIC && h[4..8] == [0x01, 0x00, 0x00, 0x00] => {
            Err(PluginError::NotAComponent(
                ": this is a core WebAssembly module; build a component (for example with \
             `cargo build --target wasm32-wasip2` or `wasm-tools component new`)"
                    .into(),
            ))
        }
        _ => Err(PluginError::NotAComponent(
            " (the file does not start with the WebAssembly header)".into(),
        )),
    }
}

/// The `mimeo:transform` version a component's exports implement, if this host runs it.
pub(super) fn interface_version(exports: &[String]) -> Result<String, PluginError> {
    let version = exports
        .iter()
        .find_map(|e| e.strip_prefix(TRANSFORMER_EXPORT)?.strip_prefix('@'))
        .map(str::to_owned)
        .ok_or_else(|| PluginError::NotAPlugin(exports.join(", ")))?;
    if !SUPPORTED_INTERFACES.contains(&version.as_str()) {
        return Err(PluginError::UnsupportedInterface {
            found: version,
            known: SUPPORTED_INTERFACES.join(", "),
        });
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_versions() {
        let exports = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(
            interface_version(&exports(&["exports", "mimeo:transform/transformer@0.1.0"])).unwrap(),
            "0.1.0"
        );
        assert_eq!(
            interface_version(&exports(&["mimeo:transform/transformer@0.2.0"])).unwrap(),
            "0.2.0"
        );
        let newer = interface_version(&exports(&["mimeo:transform/transformer@0.3.0"])).unwrap_err();
        assert_eq!(
            newer.to_string(),
            "the plugin implements mimeo:transform@0.3.0; this mimeo runs 0.1.0, 0.2.0"
        );
        let other = interface_version(&exports(&["wasi:cli/run@0.2.0"])).unwrap_err();
        assert!(
            other
                .to_string()
                .contains("is not a mimeo plugin (exports: wasi:cli/run@0.2.0)"),
            "{other}"
        );
    }

    fn artifact(name: &str, size: u64, age_s: u64) -> CachedArtifact {
        CachedArtifact {
            path: PathBuf::from(format!("/cache/{name}.cwasm")),
            size,
            last_used: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 - age_s),
        }
    }

    fn names(paths: Vec<PathBuf>) -> Vec<String> {
        paths
            .iter()
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn eviction_takes_the_least_recently_used_first() {
        let all = vec![
            artifact("new", 40, 1),
            artifact("old", 40, 100),
            artifact("mid", 40, 50),
        ];
        let keep = Path::new("/cache/new.cwasm");
        let plan = |bound| names(plan_eviction(all.clone(), bound, keep));
        assert_eq!(plan(120), Vec::<String>::new(), "all fit");
        assert_eq!(plan(u64::MAX), Vec::<String>::new());
        assert_eq!(plan(119), vec!["old"]);
        assert_eq!(plan(80), vec!["old"]);
        assert_eq!(plan(79), vec!["old", "mid"]);
        assert_eq!(plan(0), vec!["old", "mid"], "never the one just stored");
        assert_eq!(
            names(plan_eviction(all, 40, Path::new("/cache/old.cwasm"))),
            vec!["mid", "new"],
            "even when it is the oldest"
        );
        let big = vec![artifact("big", 500, 0)];
        assert!(plan_eviction(big, 100, Path::new("/cache/big.cwasm")).is_empty());
        assert!(plan_eviction(vec![], 0, keep).is_empty());
        // Equal mtimes (a coarse clock) are ordered by name, so the plan is deterministic.
        let tied = vec![artifact("b", 10, 5), artifact("a", 10, 5), artifact("c", 10, 5)];
        assert_eq!(
            names(plan_eviction(tied, 10, Path::new("/cache/c.cwasm"))),
            vec!["a", "b"]
        );
    }

    #[test]
    fn eviction_on_disk_spares_partial_and_foreign_files() {
        let dir = tempfile::tempdir().unwrap();
        let settings = HostSettings {
            cache_dir: dir.path().to_owned(),
            cache_max_bytes: 25,
            concurrency: 1,
            ..Default::default()
        };
        let engine = Engine::new(&settings).unwrap();
        let write = |name: &str, size: usize| {
            let path = dir.path().join(name);
            std::fs::write(&path, vec![0u8; size]).unwrap();
            path
        };
        let old = write("old-x.cwasm", 10);
        std::thread::sleep(Duration::from_millis(20));
        let mid = write("mid-x.cwasm", 10);
        std::thread::sleep(Duration::from_millis(20));
        let new = write("new-x.cwasm", 10);
        let partial = write("other-x.cwasm.partial-1-0", 100);
        let foreign = write("README", 100);
        let abandoned = write("gone-x.cwasm.partial-2-0", 100);
        std::fs::File::options()
            .write(true)
            .open(&abandoned)
            .unwrap()
            .set_modified(SystemTime::now() - 2 * STALE_PARTIAL)
            .unwrap();
        // Reading `old` makes `mid` the least recently used.
        std::thread::sleep(Duration::from_millis(20));
        touch(&old);
        engine.evict(&new);
        assert!(!mid.exists(), "the least recently used went");
        assert!(old.exists() && new.exists());
        assert!(partial.exists(), "a file being written is not an artifact");
        assert!(foreign.exists(), "nor is anything else");
        assert!(!abandoned.exists(), "a dead writer's leftover is cleared");
        // Vanished files and a missing directory are no error.
        std::fs::remove_file(&old).unwrap();
        engine.evict(&new);
        drop(dir);
        engine.evict(&new);
    }

    #[test]
    fn headers() {
        assert!(check_header(b"\0asm\x0d\0\x01\0rest").is_ok());
        assert!(
            check_header(b"\0asm\x01\0\0\0")
                .unwrap_err()
                .to_string()
                .contains("core WebAssembly module")
        );
        assert!(check_header(b"PK").is_err());
    }

    /// The epoch advances while a call runs, and the ticker sleeps while none does.
    #[test]
    fn the_ticker_sleeps_while_no_call_runs() {
        let ticker = Ticker::start(wasmtime::Engine::default()).unwrap();
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(ticker.ticks(), 0, "ticking with no call");
        let during = {
            let _call = ticker.ticking();
            std::thread::sleep(Duration::from_millis(60));
            ticker.ticks()
        };
        assert!(during >= 3, "{during} ticks in 60 ms of a call");
        std::thread::sleep(Duration::from_millis(20));
        let after = ticker.ticks();
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(ticker.ticks(), after, "ticking after the call ended");
    }
}
