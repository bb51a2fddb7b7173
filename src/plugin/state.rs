//! What a store holds for one call: an empty WASI context, the resource limiter, and the log
//! import's state.

use super::bindings::{v0_1, v0_2};
use super::guest_stderr::GuestStderr;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// Log lines one call may write; the rest are counted and dropped.
const MAX_LOG_LINES: u32 = 50;
/// Characters of one log line kept.
const MAX_LOG_LINE: usize = 1024;

pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub limiter: Limiter,
    /// What the guest wrote to stderr, for the message of a failure.
    pub stderr: GuestStderr,
    plugin: String,
    rule: String,
    log_lines: u32,
}

impl HostState {
    pub fn new(limiter: Limiter, plugin: &str, rule: &str) -> Self {
        // Nothing inherited: no arguments, environment, preopened directories or network; stdin
        // and stdout are empty, stderr is kept for the message of a failure.
        let stderr = GuestStderr::default();
        let wasi = WasiCtxBuilder::new()
            .stderr(stderr.clone())
            .allow_ip_name_lookup(false)
            .allow_tcp(false)
            .allow_udp(false)
            .build();
        HostState {
            wasi,
            table: ResourceTable::new(),
            limiter,
            stderr,
            plugin: plugin.to_owned(),
            rule: rule.to_owned(),
            log_lines: 0,
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// How bad a guest's log line is, whichever interface version it came through.
#[derive(Clone, Copy)]
enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl HostState {
    fn log(&mut self, level: Level, message: String) {
        self.log_lines += 1;
        if self.log_lines > MAX_LOG_LINES {
            if self.log_lines == MAX_LOG_LINES + 1 {
                tracing::warn!(plugin = %self.plugin, rule = %self.rule, "plugin log limit reached; dropping further lines of this call");
            }
            return;
        }
        let message = if message.len() > MAX_LOG_LINE {
            let mut end = MAX_LOG_LINE;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            &message[..end]
        } else {
            &message
        };
        let (plugin, rule) = (&self.plugin, &self.rule);
        match level {
            Level::Trace => tracing::trace!(plugin = %plugin, rule = %rule, "{message}"),
            Level::Debug => tracing::debug!(plugin = %plugin, rule = %rule, "{message}"),
            Level::Info => tracing::info!(plugin = %plugin, rule = %rule, "{message}"),
            Level::Warn => tracing::warn!(plugin = %plugin, rule = %rule, "{message}"),
            Level::Error => tracing::error!(plugin = %plugin, rule = %rule, "{message}"),
        }
    }
}

/// The `log` import, as each interface version declares it: the same function.
macro_rules! log_host {
    ($version:ident) => {
        impl $version::mimeo::transform::log::Host for HostState {
            fn log(&mut self, level: $version::mimeo::transform::log::Level, message: String) {
                use $version::mimeo::transform::log::Level as L;
                let level = match level {
                    L::Trace => Level::Trace,
                    L::Debug => Level::Debug,
                    L::Info => Level::Info,
                    L::Warn => Level::Warn,
                    L::Error => Level::Error,
                };
                HostState::log(self, level, message)
            }
        }
    };
}

log_host!(v0_1);
log_host!(v0_2);

/// Caps linear memory over all of a call's memories, and remembers when it said no, so that the
/// trap that follows is reported as what it is.
pub(crate) struct Limiter {
    max_memory: usize,
    used: usize,
    denied: bool,
}

impl Limiter {
    pub fn new(max_memory: usize) -> Self {
        Limiter {
            max_memory,
            used: 0,
            denied: false,
        }
    }

    pub fn denied_memory(&self) -> bool {
        self.denied
    }
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let after = self.used + (desired - current);
        if after > self.max_memory {
            self.denied = true;
            return Ok(false);
        }
        self.used = after;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}
