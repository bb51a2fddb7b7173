//! The event recorder, renewed once it has been quiet for as long as it remembers events.
//!
//! kube's `Recorder` remembers each event it published for six minutes, to count a repeat as a
//! series, and forgets the stale ones only when it publishes the next. After a burst (1,000 rules
//! making 100 copies each, ten events a rule) that was 10,000 events held, for good, by a process
//! with nothing more to say. A recorder that has published nothing for longer than that holds
//! only stale events, which its next publish would drop: a fresh one in its place writes the
//! same events, and holds none.

use crate::locks::lock;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long kube's recorder remembers an event (its `CACHE_TTL`), and a little more.
const REMEMBERED: Duration = Duration::from_secs(6 * 60 + 10);

pub struct Events {
    client: Client,
    reporter: Reporter,
    /// The recorder, and when it was last handed out to publish.
    current: Mutex<(Recorder, Instant)>,
}

impl Events {
    pub fn new(client: Client, reporter: Reporter) -> Events {
        Events {
            current: Mutex::new((Recorder::new(client.clone(), reporter.clone()), Instant::now())),
            client,
            reporter,
        }
    }

    /// The recorder to publish with (a clone shares what it remembers).
    pub fn recorder(&self) -> Recorder {
        let mut current = lock(&self.current);
        current.1 = Instant::now();
        current.0.clone()
    }

    /// Puts a fresh recorder in place of one that published nothing for [`REMEMBERED`]; says
    /// whether it did.
    pub fn renew_if_quiet(&self, now: Instant) -> bool {
        let mut current = lock(&self.current);
        if !quiet_since(current.1, now) {
            return false;
        }
        *current = (Recorder::new(self.client.clone(), self.reporter.clone()), now);
        true
    }
}

fn quiet_since(last: Instant, now: Instant) -> bool {
    now.saturating_duration_since(last) >= REMEMBERED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorder_is_renewed_only_once_all_it_remembers_is_stale() {
        let last = Instant::now();
        assert!(!quiet_since(last, last + Duration::from_secs(6 * 60)));
        assert!(quiet_since(last, last + REMEMBERED));
        assert!(
            !quiet_since(last + Duration::from_secs(1), last),
            "a clock read before is not quiet"
        );
    }
}
