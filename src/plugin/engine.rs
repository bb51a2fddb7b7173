//! The wasmtime engine: configuration, the epoch ticker, compiling with an on-disk cache, and
//! fresh stores.

use super::bindings::PluginPre;
use super::state::{HostState, Limiter};
use super::{HostSettings, PluginError, SUPPORTED_INTERFACES, TRANSFORMER_EXPORT};
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances: the granularity of deadlines.
const TICK: Duration = Duration::from_millis(5);

/// A component compiled for this engine, linked and ready to instantiate.
pub(super) struct Compiled {
    pub pre: PluginPre<HostState>,
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
    stop_ticker: Arc<AtomicBool>,
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop_ticker.store(true, Ordering::Relaxed);
    }
}

impl Engine {
    pub fn new(settings: &HostSettings) -> Result<Self, PluginError> {
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
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| PluginError::Host(format!("{e:#}")))?;
        super::bindings::mimeo::transform::log::add_to_linker::<
            HostState,
            wasmtime::component::HasSelf<HostState>,
        >(&mut linker, |state| state)
        .map_err(|e| PluginError::Host(format!("{e:#}")))?;

        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let compatibility = format!("{:016x}", hasher.finish());

        let stop_ticker = Arc::new(AtomicBool::new(false));
        let (ticking, stop) = (engine.clone(), stop_ticker.clone());
        std::thread::Builder::new()
            .name("plugin-epoch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    ticking.increment_epoch();
                }
            })
            .map_err(|e| PluginError::Host(format!("starting the epoch ticker: {e}")))?;

        Ok(Engine {
            engine,
            linker,
            compatibility,
            cache_dir: settings.cache_dir.clone(),
            stop_ticker,
        })
    }

    /// Compiles `bytes` (or loads the compiled artifact cached under its digest), checks that it
    /// is a mimeo plugin of a known interface version, and links it.
    pub fn compile(&self, bytes: &[u8], digest: &str) -> Result<Compiled, PluginError> {
        check_header(bytes)?;
        let component = self.cached_or_compiled(bytes, digest)?;
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
        let pre = PluginPre::new(instance_pre).map_err(|e| PluginError::Link(format!("{e:#}")))?;
        Ok(Compiled {
            pre,
            interface_version: version,
            imports,
            exports,
        })
    }

    fn cached_or_compiled(&self, bytes: &[u8], digest: &str) -> Result<Component, PluginError> {
        let file = self.cache_dir.join(format!(
            "{}-{}.cwasm",
            digest.trim_start_matches("sha256:"),
            self.compatibility
        ));
        if file.exists() {
            #[allow(unsafe_code)]
            // SAFETY: the file was written by `Component::serialize` of an engine with this very
            // compatibility hash (it is in the name), into a directory only mimeo writes, and
            // wasmtime checks the artifact's header and engine settings again before using it.
            let loaded = unsafe { Component::deserialize_file(&self.engine, &file) };
            match loaded {
                Ok(component) => return Ok(component),
                Err(e) => {
                    tracing::warn!(file = %file.display(), error = %e, "ignoring an unusable compiled plugin")
                }
            }
        }
        let component =
            Component::new(&self.engine, bytes).map_err(|e| PluginError::Compile(format!("{e:#}")))?;
        if let Err(e) = self.store_artifact(&component, &file) {
            tracing::warn!(file = %file.display(), error = %e, "could not cache a compiled plugin");
        }
        Ok(component)
    }

    fn store_artifact(&self, component: &Component, file: &std::path::Path) -> std::io::Result<()> {
        let bytes = component
            .serialize()
            .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        std::fs::create_dir_all(&self.cache_dir)?;
        // Write then rename, so a concurrent reader never sees half a file.
        let partial = file.with_extension(format!("partial-{}", std::process::id()));
        std::fs::write(&partial, bytes)?;
        std::fs::rename(&partial, file)
    }

    /// A fresh store with the call's limits and deadline.
    pub fn store(&self, settings: &HostSettings, plugin: &str, rule: &str) -> wasmtime::Store<HostState> {
        let state = HostState::new(Limiter::new(settings.max_memory_bytes), plugin, rule);
        let mut store = wasmtime::Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limiter);
        let ticks = settings.deadline.as_millis().div_ceil(TICK.as_millis()).max(1) as u64;
        store.set_epoch_deadline(ticks);
        store.epoch_deadline_trap();
        store
    }
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
        let newer = interface_version(&exports(&["mimeo:transform/transformer@0.2.0"])).unwrap_err();
        assert_eq!(
            newer.to_string(),
            "the plugin implements mimeo:transform@0.2.0; this mimeo runs 0.1.0"
        );
        let other = interface_version(&exports(&["wasi:cli/run@0.2.0"])).unwrap_err();
        assert!(
            other
                .to_string()
                .contains("is not a mimeo plugin (exports: wasi:cli/run@0.2.0)"),
            "{other}"
        );
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
}
