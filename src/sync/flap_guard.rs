//! The flap guard: a copy that mimeo keeps deleting and creating again, or keeps writing back to
//! content it already wrote, stops being touched for a while.
//!
//! Whatever the cause (two rules or two controllers fighting over one object, a bug in how
//! mimeo tells its copies apart), churn is the worst failure a copier can have: objects vanish
//! and come back in production, and the apiserver takes the load. This is the safety net. It
//! counts only what a healthy copy never does often: creating a copy that was there before,
//! deleting one, and writing one back to content it was already given (a repair). A rotation is
//! a write of new content and is not counted, however often it comes.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// What happened to a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Churn {
    Created,
    Deleted,
    /// Written back to the content mimeo wrote last: something else had changed it.
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

    /// Records what happened to a copy; returns the hold when this trips the guard.
    pub fn record(&mut self, copy: &K, churn: Churn, now: Instant) -> Option<Held> {
        if self.copies.len() >= SWEEP_AT && !self.copies.contains_key(copy) {
            self.copies.retain(|_, h| {
                h.held.as_ref().is_some_and(|held| held.until > now)
                    || h.churn
                        .back()
                        .is_some_and(|(at, _)| now.duration_since(*at) < WINDOW)
            });
        }
        let history = self.copies.entry(copy.clone()).or_default();
        if history.held.is_some() {
            return None;
        }
        history.churn.push_back((now, churn));
        while let Some((at, _)) = history.churn.front()
            && now.duration_since(*at) > WINDOW
        {
            history.churn.pop_front();
        }
        // The first creation of a copy is what a rule is for.
        let counted =
            history.churn.len() - usize::from(history.churn.front().map(|(_, c)| *c) == Some(Churn::Created));
        if counted <= LIMIT {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delete_and_create_again_trips_the_guard_and_holds_the_copy() {
        let mut guard = FlapGuard::default();
        let start = Instant::now();
        let mut tripped = None;
        for i in 0..20u64 {
            let churn = if i % 2 == 0 {
                Churn::Created
            } else {
                Churn::Deleted
            };
            if let Some(held) = guard.record(&"copy", churn, start + Duration::from_secs(i)) {
                tripped = Some((i, held));
                break;
            }
        }
        let (at, held) = tripped.expect("the guard trips");
        assert_eq!(
            at, 7,
            "created 4 times and deleted 4 times: the first creation is free"
        );
        assert_eq!((held.created, held.deleted, held.repaired), (4, 4, 0));
        let now = start + Duration::from_secs(8);
        assert_eq!(guard.held(&"copy", now), Some(held.clone()));
        assert!(
            held.describe(now).starts_with(
                "mimeo stopped touching this copy: it was created 4 times, deleted 4 times within 7 s"
            ),
            "{}",
            held.describe(now)
        );
        assert_eq!(guard.held(&"other", now), None);
        // Once the hold is over the copy is written again, counting from nothing.
        let later = start + HOLD + Duration::from_secs(8);
        assert_eq!(guard.held(&"copy", later), None);
        assert_eq!(guard.record(&"copy", Churn::Created, later), None);
    }

    #[test]
    fn rotations_never_trip_it_and_old_churn_is_forgotten() {
        let mut guard = FlapGuard::default();
        let start = Instant::now();
        // A rotation is not churn: nothing is recorded for it. A repair now and then is normal.
        for i in 0..100u64 {
            let at = start + WINDOW / 2 * i as u32;
            assert_eq!(guard.record(&"copy", Churn::Repaired, at), None, "repair {i}");
        }
        // Six repairs in a window are allowed, the seventh trips it.
        let mut guard = FlapGuard::default();
        for i in 0..6u64 {
            assert_eq!(
                guard.record(&"copy", Churn::Repaired, start + Duration::from_secs(i)),
                None
            );
        }
        let held = guard.record(&"copy", Churn::Repaired, start + Duration::from_secs(6));
        assert_eq!(held.map(|h| h.repaired), Some(7));
    }

    #[test]
    fn forgetting_a_rule_starts_it_afresh() {
        let mut guard = FlapGuard::default();
        let now = Instant::now();
        for _ in 0..=LIMIT + 1 {
            guard.record(&("rule", "copy"), Churn::Deleted, now);
        }
        assert!(guard.held(&("rule", "copy"), now).is_some());
        guard.forget(|(rule, _)| *rule == "rule");
        assert_eq!(guard.held(&("rule", "copy"), now), None);
    }
}
