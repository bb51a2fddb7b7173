//! SIGTERM and SIGINT, either of which asks `up` to stop its control plane, and `start` or
//! `spawn` to give up waiting and stop what they started. Installed before anything is started,
//! so that no signal finds the default action (dying at once, leaving a child behind).

use tokio::signal::unix::{Signal, SignalKind, signal};

pub struct Shutdown {
    term: Signal,
    int: Signal,
}

impl Shutdown {
    pub fn install() -> Result<Self, String> {
        let listen = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| format!("installing the {name} handler: {e}"))
        };
        Ok(Shutdown {
            term: listen(SignalKind::terminate(), "SIGTERM")?,
            int: listen(SignalKind::interrupt(), "SIGINT")?,
        })
    }

    /// Waits for the next signal and returns its name.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}
