//! The WebAssembly plugin host: runs a rule's transform chain on a copy, sandboxed.
//!
//! The face of this module is [`PluginHost`], [`Plugin`] and plain values in and out; nothing of
//! wasmtime leaks from it. One engine (component model, pooling allocator, epoch interruption)
//! compiles each component once per content digest, keeps the compiled artifact on disk, and
//! instantiates a fresh store for every call so no state survives from one object to the next.
//! A call has a deadline, a memory cap and an output cap; its output is validated before
//! anything is written. Guests get WASI with nothing behind it: no files, no network, no
//! environment, no arguments.

mod bindings;
mod compiler;
mod engine;
mod error;
mod guest_stderr;
pub mod oci;
mod output;
pub(crate) mod private_dir;
mod settings;
pub mod source;
mod state;

pub use bindings::SUPPORTED_INTERFACES;
pub use compiler::{SUBCOMMAND as COMPILE_SUBCOMMAND, compile_into_cache};
pub use error::PluginError;
pub use output::check_output;
pub use settings::{CompilerProcess, HostSettings};

use crate::locks::lock;
use crate::sync::hash::digest_bytes;
use engine::Compiled;
use state::HostState;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bindings::{v0_1, v0_2};
use engine::{Exports, Pre};

/// What a plugin says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginInfo {
    pub name: String,
    pub version: String,
    pub description: String,
    pub kinds: Vec<String>,
}

/// A loaded plugin, ready to run.
pub struct Plugin {
    /// The name it was loaded under (its reference), for logs and status.
    pub name: String,
    /// `sha256:<hex>` of the component's bytes.
    pub digest: String,
    pub size: usize,
    /// The `mimeo:transform` version it implements.
    pub interface_version: String,
    pub imports: Vec<String>,
    pub exports: Vec<String>,
    pub info: PluginInfo,
    compiled: Compiled,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("digest", &self.digest)
            .finish()
    }
}

/// The copy a plugin is transforming, and where it is going.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransformContext {
    pub rule: String,
    pub source_api_version: String,
    pub source_kind: String,
    pub source_namespace: Option<String>,
    pub source_name: String,
    pub source_cluster: String,
    pub target_cluster: String,
    pub target_namespace: Option<String>,
    pub target_name: String,
    /// The rule's inputs, in its order: what a `0.2.0` plugin gets beside the object.
    pub inputs: Arc<[TransformInput]>,
}

/// One of a rule's inputs, read for a copy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransformInput {
    /// The name the rule gives it.
    pub name: String,
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub object_name: String,
    /// The `RemoteCluster` it was read from; empty for the local cluster.
    pub cluster: String,
    /// The object, as JSON.
    pub object: String,
}

/// The context as each interface version has it: the same fields, and from `0.2.0` the inputs.
macro_rules! wit_context {
    ($ctx:expr, $config:expr, $version:ident $(, $field:ident: $value:expr)*) => {{
        use $version::mimeo::transform::types as wit;
        wit::Context {
            rule: $ctx.rule.clone(),
            source: wit::ObjectRef {
                api_version: $ctx.source_api_version.clone(),
                kind: $ctx.source_kind.clone(),
                namespace: $ctx.source_namespace.clone(),
                name: $ctx.source_name.clone(),
            },
            source_cluster: $ctx.source_cluster.clone(),
            target: wit::Target {
                cluster: $ctx.target_cluster.clone(),
                namespace: $ctx.target_namespace.clone(),
                name: $ctx.target_name.clone(),
            },
            config: $config.to_owned(),
            $($field: $value,)*
        }
    }};
}

impl TransformContext {
    fn for_v0_1(&self, config: &str) -> v0_1::mimeo::transform::types::Context {
        wit_context!(self, config, v0_1)
    }

    fn for_v0_2(&self, config: &str) -> v0_2::mimeo::transform::types::Context {
        use v0_2::mimeo::transform::types as wit;
        let inputs = self
            .inputs
            .iter()
            .map(|i| wit::Input {
                name: i.name.clone(),
                source: wit::ObjectRef {
                    api_version: i.api_version.clone(),
                    kind: i.kind.clone(),
                    namespace: i.namespace.clone(),
                    name: i.object_name.clone(),
                },
                cluster: i.cluster.clone(),
                object: i.object.clone(),
            })
            .collect();
        wit_context!(self, config, v0_2, inputs: inputs)
    }
}

/// What a plugin decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Unchanged,
    Write(String),
    Skip(String),
}

/// The result of a whole chain.
#[derive(Clone, Debug, PartialEq)]
pub enum ChainOutcome {
    /// Write this object.
    Write(serde_json::Value),
    /// Do not write this copy: which plugin said so and why.
    Skip { plugin: String, reason: String },
}

/// A chain step failed: which plugin, and why.
#[derive(Debug, thiserror::Error)]
#[error("plugin {plugin}: {error}")]
pub struct ChainError {
    pub plugin: String,
    #[source]
    pub error: PluginError,
}

impl ChainError {
    /// The failure for an Event: the plugin's reference (the rule's own words) and
    /// [`PluginError::summary`].
    pub fn summary(&self) -> String {
        format!("plugin {}: {}", self.plugin, self.error.summary())
    }
}

/// Plugins kept loaded by digest, at most; and components refused for their compile, at most.
const MAX_LOADED: usize = 128;

/// A component compiled and linked, not yet described: describing it is a call into it, which
/// the controller makes under a call's permit rather than a compile's.
pub struct Undescribed(Box<Plugin>);

/// What [`PluginHost::compile`] found.
pub enum Loading {
    /// Loaded before: ready to run.
    Loaded(Arc<Plugin>),
    Compiled(Undescribed),
}

/// One engine, its compiled plugins, and the limits every call runs under.
pub struct PluginHost {
    engine: engine::Engine,
    settings: HostSettings,
    loaded: Mutex<HashMap<String, Arc<Plugin>>>,
    /// Components whose compile ran out of time, CPU time or memory, by digest: compiling them again would
    /// only cost as much again, on every reconcile of every rule that names them.
    refused: Mutex<HashMap<String, CompileRefusal>>,
}

#[derive(Clone, Copy, Debug)]
enum CompileRefusal {
    Timeout(Duration),
    Memory(u64),
    CpuTime(Duration),
}

impl CompileRefusal {
    fn of(error: &PluginError) -> Option<Self> {
        match error {
            PluginError::CompileTimeout(limit) => Some(CompileRefusal::Timeout(*limit)),
            PluginError::CompileOutOfMemory(limit) => Some(CompileRefusal::Memory(*limit)),
            PluginError::CompileCpuTime(limit) => Some(CompileRefusal::CpuTime(*limit)),
            _ => None,
        }
    }

    fn error(self) -> PluginError {
        match self {
            CompileRefusal::Timeout(limit) => PluginError::CompileTimeout(limit),
            CompileRefusal::Memory(limit) => PluginError::CompileOutOfMemory(limit),
            CompileRefusal::CpuTime(limit) => PluginError::CompileCpuTime(limit),
        }
    }
}

/// Adds to a bounded map, starting afresh past the bound: each entry of `loaded` holds compiled
/// code, and plugins of rules long gone (or every version a ConfigMap plugin went through) would
/// stay otherwise.
fn keep<V>(map: &Mutex<HashMap<String, V>>, digest: String, value: V) {
    let mut map = lock(map);
    if map.len() >= MAX_LOADED {
        map.clear();
    }
    map.insert(digest, value);
}

impl PluginHost {
    pub fn new(settings: HostSettings) -> Result<Self, PluginError> {
        let engine = engine::Engine::new(&settings)?;
        Ok(PluginHost {
            engine,
            settings,
            loaded: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashMap::new()),
        })
    }

    pub fn settings(&self) -> &HostSettings {
        &self.settings
    }

    /// Loads a plugin from its bytes: compiled once per digest (or read from the on-disk cache),
    /// checked for the interface version, and described. Blocking: call it off the async runtime.
    pub fn load(&self, name: &str, bytes: &[u8]) -> Result<Arc<Plugin>, PluginError> {
        match self.compile(name, bytes, digest_bytes(bytes))? {
            Loading::Loaded(plugin) => Ok(plugin),
            Loading::Compiled(undescribed) => self.describe_and_keep(undescribed),
        }
    }

    /// The plugin of this digest (`sha256:<hex>` of its bytes) if it is loaded under `name`.
    pub fn loaded(&self, name: &str, digest: &str) -> Option<Arc<Plugin>> {
        lock(&self.loaded).get(digest).filter(|p| p.name == name).cloned()
    }

    /// The first half of [`PluginHost::load`]: compiles (or finds) the component, checks its
    /// interface version and links it. `digest` is that of `bytes`, hashed once by the caller.
    /// Blocking.
    pub fn compile(&self, name: &str, bytes: &[u8], digest: String) -> Result<Loading, PluginError> {
        if let Some(plugin) = self.loaded(name, &digest) {
            return Ok(Loading::Loaded(plugin));
        }
        if let Some(refusal) = lock(&self.refused).get(&digest) {
            return Err(refusal.error());
        }
        let compiled = match self.engine.compile(bytes, &digest) {
            Ok(compiled) => compiled,
            Err(e) => {
                if let Some(refusal) = CompileRefusal::of(&e) {
                    keep(&self.refused, digest, refusal);
                }
                return Err(e);
            }
        };
        Ok(Loading::Compiled(Undescribed(Box::new(Plugin {
            name: name.to_owned(),
            digest,
            size: bytes.len(),
            interface_version: compiled.interface_version.clone(),
            imports: compiled.imports.clone(),
            exports: compiled.exports.clone(),
            info: PluginInfo {
                name: String::new(),
                version: String::new(),
                description: String::new(),
                kinds: vec![],
            },
            compiled,
        }))))
    }

    /// The second half of [`PluginHost::load`]: asks the plugin to describe itself (a call,
    /// under the call's limits) and keeps it loaded. Blocking.
    pub fn describe_and_keep(&self, undescribed: Undescribed) -> Result<Arc<Plugin>, PluginError> {
        let mut plugin = *undescribed.0;
        plugin.info = self.describe(&plugin)?;
        let plugin = Arc::new(plugin);
        keep(&self.loaded, plugin.digest.clone(), plugin.clone());
        Ok(plugin)
    }

    fn describe(&self, plugin: &Plugin) -> Result<PluginInfo, PluginError> {
        macro_rules! info {
            ($info:expr) => {
                $info.map(|info| PluginInfo {
                    name: info.name,
                    version: info.version,
                    description: info.description,
                    kinds: info.kinds,
                })
            };
        }
        self.call(plugin, "", async |store, exports| match exports {
            Exports::V0_1(t) => info!(t.call_describe(store).await),
            Exports::V0_2(t) => info!(t.call_describe(store).await),
        })
    }

    /// Asks the plugin whether a rule's config for it is acceptable.
    pub fn validate_config(&self, plugin: &Plugin, config: &str) -> Result<(), PluginError> {
        self.call(plugin, "", async |store, exports| match exports {
            Exports::V0_1(t) => t.call_validate_config(store, config).await,
            Exports::V0_2(t) => t.call_validate_config(store, config).await,
        })?
        .map_err(PluginError::InvalidConfig)
    }

    /// Runs one plugin on one object, with the host's limits. Blocking.
    pub fn transform(
        &self,
        plugin: &Plugin,
        ctx: &TransformContext,
        config: &str,
        object: &str,
    ) -> Result<Outcome, PluginError> {
        let result = self.call(plugin, &ctx.rule, async |store, exports| match exports {
            Exports::V0_1(t) => {
                let outcome = t.call_transform(store, &ctx.for_v0_1(config), object).await?;
                Ok(outcome.map(|o| match o {
                    v0_1::mimeo::transform::types::Outcome::Unchanged => Outcome::Unchanged,
                    v0_1::mimeo::transform::types::Outcome::Write(out) => Outcome::Write(out),
                    v0_1::mimeo::transform::types::Outcome::Skip(why) => Outcome::Skip(why),
                }))
            }
            Exports::V0_2(t) => {
                let outcome = t.call_transform(store, &ctx.for_v0_2(config), object).await?;
                Ok(outcome.map(|o| match o {
                    v0_2::mimeo::transform::types::Outcome::Unchanged => Outcome::Unchanged,
                    v0_2::mimeo::transform::types::Outcome::Write(out) => Outcome::Write(out),
                    v0_2::mimeo::transform::types::Outcome::Skip(why) => Outcome::Skip(why),
                }))
            }
        })?;
        match result {
            Ok(Outcome::Write(out)) if out.len() > self.settings.max_output_bytes => Err(
                PluginError::OutputTooLarge(out.len(), self.settings.max_output_bytes),
            ),
            Ok(Outcome::Skip(reason)) => Ok(Outcome::Skip(truncate(&reason, 512))),
            Ok(outcome) => Ok(outcome),
            Err(message) => Err(PluginError::Failed(truncate(&message, 512))),
        }
    }

    /// Runs a chain in order on `object`; each step sees the previous step's output, and every
    /// output is checked against the input before the next step. Blocking.
    pub fn run_chain(
        &self,
        chain: &[(Arc<Plugin>, String)],
        ctx: &TransformContext,
        object: serde_json::Value,
    ) -> Result<ChainOutcome, ChainError> {
        self.run_chain_observed(chain, ctx, object, &mut |_, _| {})
    }

    /// [`PluginHost::run_chain`], telling `called` of each transform call made, with how long
    /// it took (instantiation included), whatever it returned: the controller's metrics per
    /// plugin, without the host knowing of metrics. Blocking.
    pub fn run_chain_observed(
        &self,
        chain: &[(Arc<Plugin>, String)],
        ctx: &TransformContext,
        object: serde_json::Value,
        called: &mut dyn FnMut(&Plugin, Duration),
    ) -> Result<ChainOutcome, ChainError> {
        let mut current = object;
        for (plugin, config) in chain {
            let fail = |error| ChainError {
                plugin: plugin.name.clone(),
                error,
            };
            let input =
                serde_json::to_string(&current).map_err(|e| fail(PluginError::Host(e.to_string())))?;
            let started = std::time::Instant::now();
            let transformed = self.transform(plugin, ctx, config, &input);
            called(plugin, started.elapsed());
            match transformed.map_err(fail)? {
                Outcome::Unchanged => {}
                Outcome::Skip(reason) => {
                    return Ok(ChainOutcome::Skip {
                        plugin: plugin.name.clone(),
                        reason,
                    });
                }
                Outcome::Write(out) => {
                    let next: serde_json::Value = serde_json::from_str(&out)
                        .map_err(|e| fail(PluginError::InvalidOutput(e.to_string())))?;
                    check_output(&current, &next).map_err(|e| fail(PluginError::Violation(e)))?;
                    current = next;
                }
            }
        }
        Ok(ChainOutcome::Write(current))
    }

    /// Instantiates the plugin in a fresh store and runs `f` on its exports, within the deadline
    /// whatever the guest does (computing, or waiting in a WASI call), mapping traps to the limit
    /// that caused them. Blocking.
    fn call<R>(
        &self,
        plugin: &Plugin,
        rule: &str,
        f: impl AsyncFnOnce(&mut wasmtime::Store<HostState>, Exports<'_>) -> wasmtime::Result<R>,
    ) -> Result<R, PluginError> {
        let mut store = self.engine.store(&self.settings, &plugin.name, rule);
        let deadline = self.settings.deadline;
        let outcome = self.engine.run_until(deadline, async {
            match &plugin.compiled.pre {
                Pre::V0_1(pre) => {
                    let instance = pre.instantiate_async(&mut store).await?;
                    f(&mut store, Exports::V0_1(instance.mimeo_transform_transformer())).await
                }
                Pre::V0_2(pre) => {
                    let instance = pre.instantiate_async(&mut store).await?;
                    f(&mut store, Exports::V0_2(instance.mimeo_transform_transformer())).await
                }
            }
        });
        let Some(outcome) = outcome else {
            return Err(PluginError::Timeout(deadline));
        };
        outcome.map_err(|e| {
            if store.data().limiter.denied_memory() {
                PluginError::OutOfMemory(self.settings.max_memory_bytes)
            } else if e.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt) {
                PluginError::Timeout(deadline)
            } else {
                let said = guest_stderr::last_words(&store.data().stderr.text());
                PluginError::Trap {
                    cause: truncate(&trap_cause(&e, said.as_deref()), 512),
                    frames: format!("{e:?}"),
                }
            }
        })
    }
}

/// What stopped a guest, in words a plugin's author can act on, and what it said as it went.
fn trap_cause(error: &wasmtime::Error, said: Option<&str>) -> String {
    let named = match error.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::StackOverflow) => {
            "stack overflow: the plugin's call stack is exhausted (deep or endless recursion)".to_owned()
        }
        Some(wasmtime::Trap::UnreachableCodeReached) => {
            "it reached `unreachable` (a panic, an abort or an exception it did not catch)".to_owned()
        }
        // A guest compiled from Rust or C keeps its stack in its linear memory, at the bottom:
        // deep recursion runs it below address 0, an access out of bounds, long before the
        // host's stack limit is reached. That is what most such traps are.
        Some(wasmtime::Trap::MemoryOutOfBounds) => "it accessed memory out of bounds, most often a stack \
             overflow (deep or endless recursion, or large locals, exhausting the stack a Rust or C \
             guest keeps in its linear memory)"
            .to_owned(),
        Some(wasmtime::Trap::IntegerDivisionByZero) => "it divided an integer by zero".to_owned(),
        Some(wasmtime::Trap::IntegerOverflow) => "an integer overflowed".to_owned(),
        Some(other) => other.to_string(),
        // Not a wasm trap (a host function failed): its first line, without the backtrace.
        None => error.to_string().lines().next().unwrap_or_default().to_owned(),
    };
    match said {
        Some(words) => format!("{named}; it wrote to stderr: {words}"),
        None => named,
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
