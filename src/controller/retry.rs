//! When a rule that failed is tried again: exponential backoff from a second, capped, with
//! jitter, and never sooner than an apiserver's `Retry-After`.
//!
//! A fixed retry period turns an apiserver's 429s and 500s into steady load from every failing
//! rule at once, and makes a fixed problem (a permission restored) wait out the whole period.
//! Backoff starts small, so a passing problem is retried at once, and grows per rule while it
//! lasts; a reconcile that succeeds starts it over.

use crate::sync::ownership::RuleKey;
use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;
use std::time::Duration;

/// The first retry comes after about this long.
pub const FIRST: Duration = Duration::from_secs(1);
/// Retries never wait longer than this.
pub const CAP: Duration = Duration::from_secs(60);
/// How far a delay may be moved either way, so that rules failing together spread out.
const JITTER: f64 = 0.2;

/// The delay before try number `attempt` (0 for the first retry): `FIRST` doubled per attempt,
/// capped (backon's exponential backoff), moved by `spread` (in -1..=1) times [`JITTER`], and at
/// least `at_least`. The jitter is mimeo's own: backon's adds up to a whole delay on top, which
/// would put every retry later than the documented doubling; this one spreads rules that failed
/// together both ways around it.
pub fn delay(attempt: u32, spread: f64, at_least: Option<Duration>) -> Duration {
    use backon::BackoffBuilder;
    let doubled = backon::ExponentialBuilder::new()
        .with_min_delay(FIRST)
        .with_max_delay(CAP)
        .with_factor(2.0)
        .without_max_times()
        .build()
        .nth(attempt.min(16) as usize)
        .unwrap_or(CAP);
    let jittered = doubled.mul_f64(1.0 + JITTER * spread.clamp(-1.0, 1.0)).min(CAP);
    at_least.map_or(jittered, |floor| jittered.max(floor))
}

/// A number in -1..=1 that differs from call to call (std's randomly keyed hasher; no
/// dependency for something this small).
fn spread() -> f64 {
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (random as f64 / u64::MAX as f64) * 2.0 - 1.0
}

/// What an apiserver asked for: `Retry-After` as its Status carries it (`details.retryAfterSeconds`,
/// which it sets with the header on 429s and some 5xx).
pub fn asked_for(error: &kube::Error) -> Option<Duration> {
    match error {
        kube::Error::Api(status) => status
            .details
            .as_ref()
            .map(|d| d.retry_after_seconds)
            .filter(|s| *s > 0)
            .map(|s| Duration::from_secs(s.into())),
        _ => None,
    }
}

/// A rule's failed tries in a row, and whether it is waiting out its backoff now.
#[derive(Clone, Copy, Debug, Default)]
struct Tries {
    failed: u32,
    backing_off: bool,
}

/// Failed tries in a row, per rule, and the gauge of rules backing off
/// (`mimeo_rules_retrying`), kept with them so that it cannot drift.
#[derive(Default)]
pub struct Retries {
    tries: Mutex<HashMap<RuleKey, Tries>>,
    backing_off: prometheus_client::metrics::gauge::Gauge,
}

impl Retries {
    /// Retries that keep `backing_off` at the number of rules waiting out a backoff.
    pub fn counted(backing_off: prometheus_client::metrics::gauge::Gauge) -> Self {
        Retries {
            tries: Default::default(),
            backing_off,
        }
    }

    /// The delay before the rule's next try, counting this failure.
    pub fn failed(&self, rule: &RuleKey, at_least: Option<Duration>) -> Duration {
        self.update(|tries| {
            let entry = tries.entry(rule.clone()).or_default();
            let wait = delay(entry.failed, spread(), at_least);
            entry.failed = entry.failed.saturating_add(1);
            entry.backing_off = true;
            wait
        })
    }

    /// The rule got through (or is gone): its next failure waits a second again.
    pub fn succeeded(&self, rule: &RuleKey) {
        self.update(|tries| tries.remove(rule));
    }

    /// The rule did not get through but is not tried again on a backoff: it waits for a change
    /// (or a fixed time). Its failures in a row still count towards its next backoff.
    pub fn waits(&self, rule: &RuleKey) {
        self.update(|tries| {
            if let Some(entry) = tries.get_mut(rule) {
                entry.backing_off = false;
            }
        });
    }

    fn update<T>(&self, change: impl FnOnce(&mut HashMap<RuleKey, Tries>) -> T) -> T {
        let mut tries = self.tries.lock().unwrap_or_else(|p| p.into_inner());
        let result = change(&mut tries);
        self.backing_off
            .set(tries.values().filter(|t| t.backing_off).count() as i64);
        result
    }
}

/// Exponential backoff that doubles from `first` up to `cap`, and starts over on reset.
#[derive(Clone, Debug)]
pub struct CappedBackoff {
    first: Duration,
    next: Duration,
    cap: Duration,
}

impl CappedBackoff {
    pub fn new(first: Duration, cap: Duration) -> Self {
        CappedBackoff {
            first,
            next: first,
            cap,
        }
    }
}

impl Iterator for CappedBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let now = self.next;
        self.next = (self.next * 2).min(self.cap);
        Some(now)
    }
}

impl kube::runtime::utils::Backoff for CappedBackoff {
    fn reset(&mut self) {
        self.next = self.first;
    }
}

/// A watch whose `Init` is held back until its list has answered, and dropped when the list
/// failed. kube's watcher says `Init` as it starts a list, before it knows whether the list will
/// succeed, and its `StreamBackoff` starts over on any `Ok`: a watch whose list is refused (a
/// 403, a cluster down) was asked again at the first backoff step for ever (issue 56: a CRD
/// watch refused four times a second). Put it between `watcher(...)` and `.backoff(...)`.
pub fn init_when_listed<K: Send + 'static>(
    stream: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static {
    let ahead: Option<Result<watcher::Event<K>, watcher::Error>> = None;
    futures::stream::unfold((stream.boxed(), ahead), |(mut stream, ahead)| async move {
        if let Some(event) = ahead {
            return Some((event, (stream, None)));
        }
        match stream.next().await? {
            Ok(watcher::Event::Init) => match stream.next().await {
                Some(Err(e)) => Some((Err(e), (stream, None))),
                next => Some((Ok(watcher::Event::Init), (stream, next))),
            },
            event => Some((event, (stream, None))),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_from_a_second_to_the_cap_with_jitter_and_a_floor() {
        let exact: Vec<u64> = (0..12).map(|a| delay(a, 0.0, None).as_secs()).collect();
        assert_eq!(exact, [1, 2, 4, 8, 16, 32, 60, 60, 60, 60, 60, 60]);
        assert_eq!(delay(3, 1.0, None), Duration::from_millis(9600));
        assert_eq!(delay(3, -1.0, None), Duration::from_millis(6400));
        assert_eq!(delay(40, 1.0, None), CAP, "never past the cap");
        assert_eq!(
            delay(0, 0.0, Some(Duration::from_secs(30))),
            Duration::from_secs(30),
            "Retry-After is a floor"
        );
        for _ in 0..100 {
            let s = spread();
            assert!((-1.0..=1.0).contains(&s), "{s}");
        }
    }

    #[test]
    fn each_rule_backs_off_on_its_own_and_starts_over_after_a_success() {
        let retries = Retries::default();
        let a = "SyncRule/ns/a".parse::<RuleKey>().unwrap();
        let b = "SyncRule/ns/b".parse::<RuleKey>().unwrap();
        let first = retries.failed(&a, None);
        assert!(first <= Duration::from_millis(1200), "{first:?}");
        retries.failed(&a, None);
        let third = retries.failed(&a, None);
        assert!(third >= Duration::from_millis(3200), "{third:?}");
        assert!(
            retries.failed(&b, None) <= Duration::from_millis(1200),
            "b is on its own"
        );
        retries.succeeded(&a);
        assert!(retries.failed(&a, None) <= Duration::from_millis(1200));
    }

    #[test]
    fn the_gauge_counts_the_rules_backing_off_now() {
        let gauge = prometheus_client::metrics::gauge::Gauge::default();
        let retries = Retries::counted(gauge.clone());
        let a = "SyncRule/ns/a".parse::<RuleKey>().unwrap();
        let b = "ClusterSyncRule/b".parse::<RuleKey>().unwrap();
        retries.failed(&a, None);
        retries.failed(&a, None);
        retries.failed(&b, None);
        assert_eq!(gauge.get(), 2);
        retries.waits(&b);
        assert_eq!(gauge.get(), 1, "b waits for a change, not a backoff");
        let again = retries.failed(&b, None);
        assert!(
            again >= Duration::from_millis(1600),
            "b's failures still count: {again:?}"
        );
        assert_eq!(gauge.get(), 2);
        retries.succeeded(&a);
        retries.succeeded(&b);
        assert_eq!(gauge.get(), 0);
    }

    #[test]
    fn retry_after_is_read_from_the_status_details() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 429, "reason": "TooManyRequests", "message": "slow down",
            "details": {"retryAfterSeconds": 7}
        }))
        .unwrap();
        let error = kube::Error::Api(Box::new(status));
        assert_eq!(asked_for(&error), Some(Duration::from_secs(7)));
    }
    #[test]
    fn backoff_doubles_up_to_its_cap_and_starts_over_on_reset() {
        let mut backoff = CappedBackoff::new(Duration::from_millis(250), Duration::from_secs(4));
        let first: Vec<u64> = backoff.by_ref().take(7).map(|d| d.as_millis() as u64).collect();
        assert_eq!(first, [250, 500, 1000, 2000, 4000, 4000, 4000]);
        kube::runtime::utils::Backoff::reset(&mut backoff);
        assert_eq!(backoff.next(), Some(Duration::from_millis(250)));
    }

    /// A list refused twice, then granted: each refusal is only an error (so the backoff grows),
    /// and the start that lists says `Init` before what it found.
    #[tokio::test]
    async fn a_start_whose_list_fails_says_only_that_it_failed() {
        use watcher::Event::{Init, InitApply, InitDone};
        let refused = || Err(watcher::Error::NoResourceVersion);
        let events = futures::stream::iter(vec![
            Ok(Init),
            refused(),
            Ok(Init),
            refused(),
            Ok(Init),
            Ok(InitApply("a")),
            Ok(InitDone),
        ]);
        let seen: Vec<String> = init_when_listed(events)
            .map(|e| match e {
                Ok(Init) => "init".to_owned(),
                Ok(InitApply(o)) => o.to_owned(),
                Ok(InitDone) => "done".to_owned(),
                Ok(_) => "other".to_owned(),
                Err(_) => "error".to_owned(),
            })
            .collect()
            .await;
        assert_eq!(seen, ["error", "error", "init", "a", "done"]);
    }
}
