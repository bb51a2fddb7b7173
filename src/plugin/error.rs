//! Why a plugin could not be loaded or did not deliver, in mimeo's own words for Events and as a
//! label for metrics.

use super::bindings::TRANSFORMER_EXPORT;
use std::time::Duration;

/// Why a plugin could not be loaded or did not deliver.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("not a WebAssembly component{0}")]
    NotAComponent(String),
    #[error("the component does not export {TRANSFORMER_EXPORT}: it is not a mimeo plugin (exports: {0})")]
    NotAPlugin(String),
    #[error("the plugin implements mimeo:transform@{found}; this mimeo runs {known}")]
    UnsupportedInterface { found: String, known: String },
    #[error("compiling the plugin failed: {0}")]
    Compile(String),
    /// The same words every time, so that a rule's status does not change while it is refused.
    #[error(
        "compiling the plugin took longer than {0:?} (--plugin-compile-timeout-secs); mimeo does not try this component again until it restarts"
    )]
    CompileTimeout(Duration),
    #[error(
        "compiling the plugin needed more than {} MiB of memory (--plugin-compile-memory-mib); mimeo does not try this component again until it restarts", .0 >> 20
    )]
    CompileOutOfMemory(u64),
    #[error(
        "compiling the plugin used more than {} s of CPU time (--plugin-compile-cpu-secs); mimeo does not try this component again until it restarts", .0.as_secs()
    )]
    CompileCpuTime(Duration),
    #[error("the plugin needs imports this host does not provide: {0}")]
    Link(String),
    #[error("the plugin ran past its deadline of {0:?}")]
    Timeout(Duration),
    #[error("the plugin tried to use more than {0} bytes of memory")]
    OutOfMemory(usize),
    /// `cause` names what stopped the guest and what it said (on stderr) as it went; `frames`
    /// are wasmtime's raw backtrace, for `mimeo plugin test --verbose` and debug logs.
    #[error("the plugin trapped: {cause}")]
    Trap { cause: String, frames: String },
    #[error("the plugin returned {0} bytes, more than the {1} allowed")]
    OutputTooLarge(usize, usize),
    #[error("the plugin returned invalid JSON: {0}")]
    InvalidOutput(String),
    #[error("the plugin broke a rule: {0}")]
    Violation(String),
    #[error("the plugin reported an error: {0}")]
    Failed(String),
    #[error("the plugin refused its config: {0}")]
    InvalidConfig(String),
    #[error("plugin host: {0}")]
    Host(String),
}

impl PluginError {
    /// What went wrong in mimeo's own words, with none of the text the plugin (or the component
    /// it came in) chose: Events are readable by many who may not read a copy's source, and a
    /// plugin holds the source's data, so this is all an Event may say about a plugin's failure.
    pub fn summary(&self) -> String {
        match self {
            PluginError::NotAComponent(_) => "the plugin is not a WebAssembly component".into(),
            PluginError::NotAPlugin(_) => "the component is not a mimeo plugin".into(),
            PluginError::UnsupportedInterface { .. } => {
                "the plugin implements an interface version this mimeo does not run".into()
            }
            PluginError::Compile(_) => "compiling the plugin failed".into(),
            PluginError::Link(_) => "the plugin needs imports this host does not provide".into(),
            PluginError::Timeout(_)
            | PluginError::OutOfMemory(_)
            | PluginError::OutputTooLarge(..)
            | PluginError::CompileTimeout(_)
            | PluginError::CompileOutOfMemory(_)
            | PluginError::CompileCpuTime(_) => self.to_string(),
            PluginError::Trap { .. } => "the plugin trapped".into(),
            PluginError::InvalidOutput(_) => "the plugin returned invalid JSON".into(),
            PluginError::Violation(_) => "the plugin broke a rule of what it may change".into(),
            PluginError::Failed(_) => "the plugin reported an error".into(),
            PluginError::InvalidConfig(_) => "the plugin refused its config".into(),
            PluginError::Host(_) => "the plugin host failed".into(),
        }
    }

    /// A short label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            PluginError::NotAComponent(_) => "not_a_component",
            PluginError::NotAPlugin(_) => "not_a_plugin",
            PluginError::UnsupportedInterface { .. } => "unsupported_interface",
            PluginError::Compile(_) => "compile",
            PluginError::CompileTimeout(_) => "compile_timeout",
            PluginError::CompileOutOfMemory(_) => "compile_out_of_memory",
            PluginError::CompileCpuTime(_) => "compile_cpu_time",
            PluginError::Link(_) => "link",
            PluginError::Timeout(_) => "timeout",
            PluginError::OutOfMemory(_) => "out_of_memory",
            PluginError::Trap { .. } => "trap",
            PluginError::OutputTooLarge(..) => "output_too_large",
            PluginError::InvalidOutput(_) => "invalid_output",
            PluginError::Violation(_) => "violation",
            PluginError::Failed(_) => "failed",
            PluginError::InvalidConfig(_) => "invalid_config",
            PluginError::Host(_) => "host",
        }
    }
}
