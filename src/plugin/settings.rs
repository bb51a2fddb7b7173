//! The plugin host's limits and places, set when the controller starts, and how components are
//! compiled in a process of their own.

use super::private_dir;
use std::path::PathBuf;
use std::time::Duration;

/// Limits and places, set when the controller starts.
#[derive(Clone, Debug)]
pub struct HostSettings {
    /// Where compiled artifacts are kept between runs.
    pub cache_dir: PathBuf,
    /// Most disk the compiled artifacts may use; the least recently used go first. One artifact
    /// larger than this is still kept while it is the newest.
    pub cache_max_bytes: u64,
    /// How long one call may run.
    pub deadline: Duration,
    /// How much linear memory one call may use, over all its memories.
    pub max_memory_bytes: usize,
    /// How large a plugin's output may be.
    pub max_output_bytes: usize,
    /// How many calls may run at once (sizes the instance pool).
    pub concurrency: u32,
    /// How many plugins may be compiled at once; each compile also takes `compiler`'s memory.
    pub compile_concurrency: u32,
    /// Compile in a child process under a time and memory limit (the controller); `None`
    /// compiles in this process (the `plugin` commands, run by the plugin's own author).
    pub compiler: Option<CompilerProcess>,
}

impl Default for HostSettings {
    fn default() -> Self {
        HostSettings {
            cache_dir: private_dir::default_cache_dir("plugin-cache"),
            cache_max_bytes: 512 << 20,
            deadline: Duration::from_millis(100),
            max_memory_bytes: 64 << 20,
            max_output_bytes: 4 << 20,
            concurrency: 4,
            compile_concurrency: 1,
            compiler: None,
        }
    }
}

/// Where and under what limits components are compiled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompilerProcess {
    /// The mimeo binary to run (the controller's own).
    pub program: PathBuf,
    /// How long one compile may take.
    pub timeout: Duration,
    /// Most memory the compiling process may allocate.
    pub max_memory_bytes: u64,
    /// Most CPU time the compiling process may use, over all its threads (whole seconds, at
    /// least one: what `RLIMIT_CPU` counts in).
    pub max_cpu_time: Duration,
}
