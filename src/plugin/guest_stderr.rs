//! What a guest writes to stderr, kept (the last [`KEPT`] bytes of one call) so that a failure
//! can say what the guest said: a Rust panic's message, a Python traceback, a JavaScript error.
//! Writes never fail and never block: a guest that floods stderr only pushes out its own older
//! words.

use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Bytes of stderr kept per call: the end, where a panic or traceback puts its message.
pub const KEPT: usize = 2048;

#[derive(Clone, Default)]
pub struct GuestStderr(Arc<Mutex<Vec<u8>>>);

impl GuestStderr {
    /// What the guest wrote last, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }

    fn push(&self, bytes: &[u8]) {
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        kept.extend_from_slice(bytes);
        if kept.len() > KEPT {
            let excess = kept.len() - KEPT;
            kept.drain(..excess);
        }
    }
}

impl IsTerminal for GuestStderr {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestStderr {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for GuestStderr {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(KEPT)
    }
}

impl Pollable for GuestStderr {
    // `async fn ready` as the trait's `async_trait` declares it: always ready.
    fn ready<'a, 'b>(&'a mut self) -> Pin<Box<dyn Future<Output = ()> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async {})
    }
}

impl tokio::io::AsyncWrite for GuestStderr {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.push(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// The guest's own words about why it stopped, from what it wrote to stderr: a Rust panic's
/// message (`panicked at <place>:` and what follows), else the last lines, without the hints
/// a runtime adds (`note: run with RUST_BACKTRACE=1 ...`). `None` when it said nothing.
pub fn last_words(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
        .collect();
    if let Some(at) = lines.iter().rposition(|l| l.contains("panicked at ")) {
        let place = lines[at].split("panicked at ").nth(1).unwrap_or_default();
        let message = lines[at + 1..].join(" ");
        return Some(format!(
            "panicked at {}: {}",
            place.trim_end_matches(':'),
            message.trim()
        ));
    }
    let tail = lines.len().saturating_sub(3);
    let said = lines[tail..].join(" ");
    (!said.is_empty()).then_some(said)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_words_of_each_kind_of_guest() {
        let rust = "thread '<unnamed>' panicked at src/lib.rs:109:20:\nasked to trap\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            last_words(rust).as_deref(),
            Some("panicked at src/lib.rs:109:20: asked to trap")
        );
        let python = "Traceback (most recent call last):\n  File \"app.py\", line 3, in transform\nValueError: no data\n";
        assert_eq!(
            last_words(python).as_deref(),
            Some(
                "Traceback (most recent call last):   File \"app.py\", line 3, in transform ValueError: no data"
            )
        );
        assert_eq!(last_words(""), None);
        assert_eq!(last_words("\n\n"), None);
    }

    #[test]
    fn only_the_end_is_kept() {
        let stderr = GuestStderr::default();
        stderr.push(&vec![b'a'; KEPT]);
        stderr.push(b"the end");
        let text = stderr.text();
        assert_eq!(text.len(), KEPT);
        assert!(text.ends_with("the end"));
    }
}
