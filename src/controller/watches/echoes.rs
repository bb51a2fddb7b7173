//! Telling a copies watch event that is the echo of mimeo's own write from news. A rule woken by
//! the echoes of its own writes looks again at what it just wrote and finds nothing to do: at 500
//! copies that was one more full look behind every rotation.
//!
//! An echo can come back on the watch before the write's reply: the apiserver answers the
//! writer and tells its watchers at about the same time. While a write of ours to a copy is in
//! flight, the versions of that copy the watch brings are held back, not acted on; when the reply
//! comes, those that are not the version the write stored wake the rule, and the echo does not.
//! A write that fails, or never finishes, wakes the rule for whatever was held back.

use crate::locks::lock;
use crate::room::shrink_if_sparse;
use crate::sync::ownership::RuleKey;
use std::collections::HashMap;
use std::sync::Mutex;

/// A copy: kind (plural), namespace and name.
pub(super) type CopyId = (String, String, String);

/// The writes of ours in flight, per copy, and what the watch brought of each meanwhile.
#[derive(Default)]
pub(super) struct InFlight {
    writes: Mutex<HashMap<CopyId, Held>>,
}

/// What the watch brought of one copy while writes of ours to it were in flight.
#[derive(Default)]
struct Held {
    /// Writes in flight to this copy (two rules may race for one place).
    writes: usize,
    /// The rule the held events name, and the versions they carried.
    rule: Option<RuleKey>,
    versions: Vec<String>,
}

impl InFlight {
    /// A write of ours to `id` is on its way.
    pub fn start(&self, id: &CopyId) {
        lock(&self.writes).entry(id.clone()).or_default().writes += 1;
    }

    /// Holds back a watch event for `id` carrying `version` and naming `rule`, if a write of ours
    /// to it is in flight; says whether it did.
    pub fn hold(&self, id: &CopyId, rule: Option<RuleKey>, version: &str) -> bool {
        let mut writes = lock(&self.writes);
        let Some(held) = writes.get_mut(id) else {
            return false;
        };
        if rule.is_some() {
            held.rule = rule;
        }
        held.versions.push(version.to_owned());
        true
    }

    /// A write to `id` came back, having stored `stored` (`None`: it failed, or stored nothing).
    /// Returns the rule to wake: the one the held events name, if any of them was not this
    /// write's echo. With another write still in flight, all that was held stays held but this
    /// write's echo.
    pub fn finish(&self, id: &CopyId, stored: Option<&str>) -> Option<RuleKey> {
        let mut writes = lock(&self.writes);
        let held = writes.get_mut(id)?;
        held.writes = held.writes.saturating_sub(1);
        if let Some(stored) = stored {
            held.versions.retain(|v| v != stored);
        }
        if held.writes > 0 {
            return None;
        }
        let held = writes.remove(id)?;
        shrink_if_sparse(&mut writes);
        if held.versions.is_empty() { None } else { held.rule }
    }

    /// Writes in flight, for tests.
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.writes).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> CopyId {
        ("secrets".into(), "apps".into(), "creds".into())
    }

    fn rule() -> Option<RuleKey> {
        Some(RuleKey::sync_rule("platform", "creds"))
    }

    #[test]
    fn an_echo_before_the_reply_wakes_nobody() {
        let writes = InFlight::default();
        writes.start(&id());
        assert!(writes.hold(&id(), rule(), "12"));
        assert_eq!(writes.finish(&id(), Some("12")), None);
        assert_eq!(writes.len(), 0);
        assert!(!writes.hold(&id(), rule(), "13"), "nothing in flight: not held");
    }

    #[test]
    fn another_version_held_back_wakes_the_rule_when_the_write_is_back() {
        let writes = InFlight::default();
        writes.start(&id());
        assert!(writes.hold(&id(), rule(), "12"));
        assert!(writes.hold(&id(), rule(), "13"));
        assert_eq!(writes.finish(&id(), Some("12")), rule(), "13 was someone else's");
    }

    #[test]
    fn a_failed_write_wakes_the_rule_for_what_was_held() {
        let writes = InFlight::default();
        writes.start(&id());
        assert!(writes.hold(&id(), rule(), "12"));
        assert_eq!(writes.finish(&id(), None), rule());
        writes.start(&id());
        assert_eq!(writes.finish(&id(), None), None, "nothing held, nothing to wake");
    }

    #[test]
    fn two_writes_to_one_place_settle_when_both_are_back() {
        let writes = InFlight::default();
        writes.start(&id());
        writes.start(&id());
        assert!(writes.hold(&id(), rule(), "12"));
        assert!(writes.hold(&id(), rule(), "13"));
        assert_eq!(
            writes.finish(&id(), Some("12")),
            None,
            "the other is still in flight"
        );
        assert_eq!(writes.finish(&id(), Some("13")), None, "both were echoes");
        assert_eq!(writes.len(), 0);
    }
}
