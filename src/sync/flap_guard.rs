//! The flap guard: a copy that mimeo and something else keep undoing each other's writes on
//! stops being touched for a while.
//!
//! Whatever the cause (another controller or a second copier fighting over one object), churn is
//! the worst failure a copier can have: objects vanish and come back in production, and the
//! apiserver takes the load. This is the safety net. It counts only mimeo undoing what something
//! else did: a copy created again after something else deleted it, deleted again after something
//! else put it back, and written back to content it was already given (a repair). Nothing mimeo
//! decides from its rule's inputs counts: a rotation is new content, in place or by delete and
//! create (an immutable source is rotated so), and a copy removed because its rule no longer
//! wants it (an order cancelled, a namespace unlabelled) and made again when it wants it back is
//! the rule doing its job however often it comes (issue 56: five orders and cancels in a row held
//! a cancelled tenant's credentials for ten minutes). Holding either would leave a rotated
//! credential missing or a revoked one in place. For the same reason a held copy is still removed
//! when its rule no longer wants it, unless the removal is itself the fight
//! ([`FlapGuard::removal_held`]).

use crate::room::shrink_if_sparse;
use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

/// What mimeo did to a copy, as the guard is told it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change<'a> {
    /// Created, with this content (the copy's digest).
    Created(&'a str),
    /// Deleted.
    Deleted,
    /// Written with this content, in place or by delete and create: a rotation when it is new.
    Written(&'a str),
    /// Written back to the content mimeo wrote last: something else had changed it.
    Repaired,
}

/// What counts as churn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Churn {
    Created,
    Deleted,
    Repaired,
}

/// More churn than this within [`WINDOW`] trips the guard: a copy created, deleted and created
/// again three times over, or repaired seven times.
pub const LIMIT: usize = 6;
/// How far back churn counts.
pub const WINDOW: Duration = Duration::from_secs(120);
/// How long a tripped copy is left alone; then it is written (and watched) again.
pub const HOLD: Duration = Duration::from_secs(600);
/// Past this many copies tracked, those with nothing recent are dropped.
const SWEEP_AT: usize = 4096;

/// Why a copy is held, for its status and event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub created: usize,
    pub deleted: usize,
    pub repaired: usize,
    /// Over how long the churn was counted.
    pub over: Duration,
    pub until: Instant,
}

impl Held {
    /// What the status says: what alternated, over how long, and for how long mimeo leaves it.
    pub fn describe(&self, now: Instant) -> String {
        let mut what = Vec::new();
        for (n, verb) in [
            (self.created, "created"),
            (self.deleted, "deleted"),
            (self.repaired, "written back after something else changed it"),
        ] {
            if n > 0 {
                what.push(format!("{verb} {n} times"));
            }
        }
        format!(
            "mimeo stopped touching this copy: it was {} within {} s, which a copy in sync never \
             is (another rule or controller may be fighting over it); it is left as it is for \
             another {} s, or until the rule changes",
            what.join(", "),
            self.over.as_secs().max(1),
            self.until.saturating_duration_since(now).as_secs()
        )
    }
}

#[derive(Default)]
struct History {
    churn: VecDeque<(Instant, Churn)>,
    held: Option<Held>,
    /// What mimeo last did to the copy: whether it left one there, a digest of the content it
    /// gave it, and when it deleted it (while it is gone).
    last: Option<Last>,
}

#[derive(Clone, Copy)]
struct Last {
    content: Option<u64>,
    deleted_at: Option<Instant>,
}

impl History {
    /// Whether the history still counts: the copy is held, or it churned within the window.
    fn counts(&self, now: Instant) -> bool {
        self.held.as_ref().is_some_and(|held| held.until > now)
            || self
                .churn
                .back()
                .is_some_and(|(at, _)| now.duration_since(*at) < WINDOW)
    }
}

fn content_key(content: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    content.hash(&mut hasher);
    hasher.finish()
}

/// Churn per copy, keyed by whatever names a copy (rule, cluster, resource, namespace, name).
pub struct FlapGuard<K> {
    copies: HashMap<K, History>,
}

impl<K> Default for FlapGuard<K> {
    fn default() -> Self {
        FlapGuard {
            copies: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> FlapGuard<K> {
    /// Whether the copy is held now, and why.
    pub fn held(&mut self, copy: &K, now: Instant) -> Option<Held> {
        let history = self.copies.get_mut(copy)?;
        match &history.held {
            Some(held) if held.until > now => Some(held.clone()),
            Some(_) => {
                // The hold is over: start counting afresh.
                *history = History::default();
                None
            }
            None => None,
        }
    }

    /// Whether a copy its rule no longer wants must be left as it is: only when the guard holds it
    /// for being deleted again and again after something else put it back. A hold for anything
    /// else (repairs, something else deleting it) does not keep a copy the rule no longer wants:
    /// removing it ends that fight, and its history with it.
    pub fn removal_held(&mut self, copy: &K, now: Instant) -> Option<Held> {
        let held = self.held(copy, now)?;
        if held.deleted > 0 {
            return Some(held);
        }
        self.copies.remove(copy);
        None
    }

    /// Records what mimeo did to a copy; returns the hold when this trips the guard.
    pub fn record(&mut self, copy: &K, change: Change<'_>, now: Instant) -> Option<Held> {
        if self.copies.len() >= SWEEP_AT && !self.copies.contains_key(copy) {
            self.sweep(now);
        }
        let history = self.copies.entry(copy.clone()).or_default();
        if history.held.is_some() {
            return None;
        }
        let last = history.last;
        let gone = last.and_then(|l| l.deleted_at);
        let mut churn = Vec::new();
        history.last = Some(match change {
            Change::Created(content) => {
                let content = Some(content_key(content));
                let again = last.is_some_and(|l| l.content == content);
                // Something else deleted it, and mimeo puts back what was there. After mimeo's own
                // removal, the rule wants it again: the first copy, or new content, is what a rule
                // is for, and so is a copy made again.
                if gone.is_none() && again {
                    churn.push((now, Churn::Created));
                }
                Last {
                    content,
                    deleted_at: None,
                }
            }
            Change::Deleted => {
                if gone.is_some() {
                    // Deleted again: something else had put it back.
                    churn.push((now, Churn::Deleted));
                }
                Last {
                    content: last.and_then(|l| l.content),
                    deleted_at: Some(now),
                }
            }
            Change::Written(content) => Last {
                content: Some(content_key(content)),
                deleted_at: None,
            },
            Change::Repaired => {
                churn.push((now, Churn::Repaired));
                Last {
                    content: last.and_then(|l| l.content),
                    deleted_at: None,
                }
            }
        });
        history.churn.extend(churn);
        while let Some((at, _)) = history.churn.front()
            && now.duration_since(*at) > WINDOW
        {
            history.churn.pop_front();
        }
        if history.churn.len() <= LIMIT {
            return None;
        }
        let count = |kind| history.churn.iter().filter(|(_, c)| *c == kind).count();
        let held = Held {
            created: count(Churn::Created),
            deleted: count(Churn::Deleted),
            repaired: count(Churn::Repaired),
            over: now.duration_since(history.churn.front().map_or(now, |(at, _)| *at)),
            until: now + HOLD,
        };
        history.held = Some(held.clone());
        Some(held)
    }

    /// Forgets the copies `forget` says yes to: a rule that changed starts afresh.
    pub fn forget(&mut self, mut forget: impl FnMut(&K) -> bool) {
        self.copies.retain(|k, _| !forget(k));
        shrink_if_sparse(&mut self.copies);
    }

    /// Forgets the copies whose history no longer counts (as a record past [`SWEEP_AT`] copies
    /// does), and gives back the room a burst of writes took: a fan-out of 100,000 copies left a
    /// table of 100,000 entries behind until the next write.
    pub fn sweep(&mut self, now: Instant) {
        self.copies.retain(|_, h| h.counts(now));
        shrink_if_sparse(&mut self.copies);
    }

    /// The copies remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.copies.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_forgets_what_no_longer_counts_and_gives_the_room_back() {
        let mut guard = FlapGuard::default();
        let start = Instant::now();
        for i in 0..3_000u32 {
            guard.record(&i, Change::Created("h1"), start);
        }
        // Copy 0 is deleted by someone else and put back: churn, which counts for the window.
        guard.record(&0, Change::Created("h1"), start);
        let room = guard.copies.capacity();
        guard.sweep(start + WINDOW / 2);
        assert_eq!(guard.len(), 1, "only the copy that churned is left");
        assert!(
            guard.copies.capacity() < room / 100,
            "{} of {room}",
            guard.copies.capacity()
        );
        guard.sweep(start + WINDOW + Duration::from_secs(1));
        assert_eq!(guard.len(), 0);
    }

    #[test]
    fn removing_and_making_again_as_the_rule_says_never_trips_it() {
        let mut guard = FlapGuard::default();
        let start = Instant::now();
        for i in 0..200u64 {
            let change = if i % 2 == 0 {
                Change::Created("h1")
            } else {
                Change::Deleted
            };
            assert_eq!(
                guard.record(&"copy", change, start + Duration::from_millis(100 * i)),
                None,
                "an order made and cancelled, the same content each time, change {i}"
            );
        }
    }

    #[test]
    fn a_copy_put_back_again_and_again_is_held_and_then_written_afresh() {
        let mut guard = FlapGuard::default();
        let start = Instant::now();
        guard.record(&"copy", Change::Created("h1"), start);
        let tripped = (1..20u64).find_map(|i| {
            guard
                .record(&"copy", Change::Created("h1"), start + Duration::from_secs(i))
                .map(|held| (i, held))
        });
        let (at, held) = tripped.expect("the guard trips");
        assert_eq!(at, 7, "the first creation is free, the seventh put back trips it");
        assert_eq!((held.created, held.deleted, held.repaired), (7, 0, 0));
        let now = start + Duration::from_secs(8);
        assert_eq!(guard.held(&"copy", now), Some(held.clone()));
        assert!(
            held.describe(now)
                .starts_with("mimeo stopped touching this copy: it was created 7 times within 6 s"),
            "{}",
            held.describe(now)
        );
        assert_eq!(guard.held(&"other", now), None);
        // Once the hold is over the copy is written again, counting from nothing.
        let later = start + HOLD + Duration::from_secs(9);
        assert_eq!(guard.held(&"copy", later), None);
        assert_eq!(guard.record(&"copy", Change::Created("h1"), later), None);
    }

    #[test]
    fn a_held_copy_is_removed_unless_the_removal_is_the_fight() {
        let start = Instant::now();
        let at = |i: u64| start + Duration::from_secs(i);
        // Held for being put back after something else deleted it: the rule no longer wants it,
        // so it goes, and its history with it.
        let mut guard = FlapGuard::default();
        guard.record(&"copy", Change::Created("h"), at(0));
        (1..=7).for_each(|i| _ = guard.record(&"copy", Change::Created("h"), at(i)));
        assert!(guard.held(&"copy", at(8)).is_some());
        assert_eq!(guard.removal_held(&"copy", at(8)), None);
        assert_eq!(guard.held(&"copy", at(8)), None, "forgotten once removed");
        // Held for being deleted again after something else kept putting it back: left.
        let mut guard = FlapGuard::default();
        guard.record(&"copy", Change::Created("h"), at(0));
        (1..=8).for_each(|i| _ = guard.record(&"copy", Change::Deleted, at(i)));
        assert!(guard.removal_held(&"copy", at(9)).is_some());
    }

    #[test]
    fn rotations_never_trip_it_and_old_churn_is_forgotten() {
        let start = Instant::now();
        let at = |i: u64| start + Duration::from_millis(100 * i);
        let contents: Vec<String> = (0..200).map(|i| format!("h{i}")).collect();
        // In place, by delete and create (an immutable source), and by recreate: new content
        // each time, many times a second.
        let mut guard = FlapGuard::default();
        for (i, content) in contents.iter().enumerate() {
            let i = i as u64;
            assert_eq!(guard.record(&"in place", Change::Written(content), at(i)), None);
            assert_eq!(
                guard.record(&"delete and create", Change::Deleted, at(2 * i)),
                None
            );
            assert_eq!(
                guard.record(&"delete and create", Change::Created(content), at(2 * i + 1)),
                None,
                "rotation {i}"
            );
        }
        // Something else deleting the copy now and then, and mimeo putting it back, is normal.
        let mut guard = FlapGuard::default();
        guard.record(&"copy", Change::Created("h"), start);
        for i in 1..100u64 {
            let at = start + WINDOW / 2 * i as u32;
            assert_eq!(
                guard.record(&"copy", Change::Created("h"), at),
                None,
                "put back {i}"
            );
        }
        // Six repairs in a window are allowed, the seventh trips it.
        let mut guard = FlapGuard::default();
        for i in 0..6u64 {
            assert_eq!(
                guard.record(&"copy", Change::Repaired, start + Duration::from_secs(i)),
                None
            );
        }
        let held = guard.record(&"copy", Change::Repaired, start + Duration::from_secs(6));
        assert_eq!(held.map(|h| h.repaired), Some(7));
    }

    #[test]
    fn a_copy_put_back_or_taken_away_again_and_again_trips_it() {
        let start = Instant::now();
        let at = |i: u64| start + Duration::from_secs(i);
        // Something else keeps deleting it; mimeo keeps creating it with the same content.
        let mut guard = FlapGuard::default();
        guard.record(&"copy", Change::Created("h"), at(0));
        let trips = (1..20u64).find(|i| guard.record(&"copy", Change::Created("h"), at(*i)).is_some());
        assert_eq!(trips, Some(7));
        // Something else keeps putting it back; mimeo keeps deleting it.
        let mut guard = FlapGuard::default();
        guard.record(&"copy", Change::Created("h"), at(0));
        let trips = (1..20u64).find(|i| guard.record(&"copy", Change::Deleted, at(*i)).is_some());
        assert_eq!(trips, Some(8), "the first deletion is what a rule does");
    }

    #[test]
    fn forgetting_a_rule_starts_it_afresh() {
        let mut guard = FlapGuard::default();
        let now = Instant::now();
        for _ in 0..=LIMIT + 1 {
            guard.record(&("rule", "copy"), Change::Deleted, now);
        }
        assert!(guard.held(&("rule", "copy"), now).is_some());
        guard.forget(|(rule, _)| *rule == "rule");
        assert_eq!(guard.held(&("rule", "copy"), now), None);
    }
}
