//! Writes that arrive late, seen from outside the replicas (issue 55): every version of every copy
//! as a watch sees it, so that a copy going back to an older value is caught however briefly it
//! stayed there, and a replica's copy writes the apiserver's audit log shows after the replica was
//! frozen or cut off, accepted or refused. Shared by tests/install and `benches/faults.rs`.
//!
//! Copies hold their version in `data.v` as `v<N>`, so versions compare by N; a copy is any
//! Secret mimeo labels as its own.
#![allow(dead_code)]

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, watcher};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// A copy seen going back: from version `from` (the newest it had held) to `to`.
#[derive(Clone, Debug)]
pub struct Back {
    pub copy: String,
    pub from: u64,
    pub to: u64,
    pub at: Instant,
}

#[derive(Default)]
struct Seen {
    /// Each copy's version now and the newest it ever held.
    copies: HashMap<String, (u64, u64)>,
    /// When each copy first held each version or a later one: (copy, version) -> when.
    reached: HashMap<(String, u64), Instant>,
    back: Vec<Back>,
    versions: usize,
}

/// Every version of every copy, from a watch of the test's own (not through any replica's link).
pub struct Versions {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Versions {
    /// Starts the watch, and returns once it has listed the copies there are.
    pub async fn watch(client: Client) -> Versions {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let api = Api::<Secret>::all(client);
        let config = watcher::Config::default().labels("mimeo.dev/managed-by=mimeo");
        let (listed, on_listed) = tokio::sync::oneshot::channel();
        let recorded = seen.clone();
        let task = tokio::spawn(async move {
            let mut listed = Some(listed);
            let mut events = watcher(api, config).default_backoff().boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(secret) | watcher::Event::InitApply(secret)) => {
                        recorded.lock().unwrap().record(&secret);
                    }
                    Ok(watcher::Event::InitDone) => {
                        if let Some(listed) = listed.take() {
                            let _ = listed.send(());
                        }
                    }
                    _ => {}
                }
            }
        });
        let _ = tokio::time::timeout(Duration::from_secs(30), on_listed).await;
        Versions { seen, task }
    }

    /// Every time a copy was seen going back, in order.
    pub fn back(&self) -> Vec<Back> {
        self.seen.lock().unwrap().back.clone()
    }

    /// How many versions of copies the watch has seen.
    pub fn versions_seen(&self) -> usize {
        self.seen.lock().unwrap().versions
    }

    /// How many copies hold version `n` now.
    pub fn holding(&self, n: u64) -> usize {
        let seen = self.seen.lock().unwrap();
        seen.copies.values().filter(|(now, _)| *now == n).count()
    }

    /// When each copy first held version `n` or a later one, for those that did.
    pub fn reached(&self, n: u64) -> Vec<Instant> {
        let seen = self.seen.lock().unwrap();
        seen.copies
            .keys()
            .filter_map(|copy| seen.reached.get(&(copy.clone(), n)).copied())
            .collect()
    }
}

impl Drop for Versions {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Seen {
    fn record(&mut self, secret: &Secret) {
        let Some(version) = version_of(secret) else {
            return;
        };
        let copy = format!(
            "{}/{}",
            secret.metadata.namespace.as_deref().unwrap_or_default(),
            secret.metadata.name.as_deref().unwrap_or_default()
        );
        let at = Instant::now();
        self.versions += 1;
        let (now, newest) = self.copies.entry(copy.clone()).or_insert((version, version));
        if version < *newest {
            self.back.push(Back {
                copy: copy.clone(),
                from: *newest,
                to: version,
                at,
            });
        }
        // Versions it skipped count as reached now, as it holds a later one.
        for n in (*newest + 1).min(version)..=version {
            self.reached.entry((copy.clone(), n)).or_insert(at);
        }
        *now = version;
        *newest = (*newest).max(version);
    }
}

/// The N of a copy's `data.v` of `v<N>`.
fn version_of(secret: &Secret) -> Option<u64> {
    let value = secret.data.as_ref()?.get("v")?;
    std::str::from_utf8(&value.0)
        .ok()?
        .strip_prefix('v')?
        .parse()
        .ok()
}

/// A replica's copy writes that reached the apiserver late, by the apiserver's answer.
#[derive(Debug, Default)]
pub struct Late {
    /// Answered 2xx: written over whatever the copy held then.
    pub accepted: Vec<String>,
    /// Answered 409 Conflict: refused, the copy having changed since the replica read it.
    pub refused: Vec<String>,
    /// Any other answer.
    pub other: Vec<String>,
}

/// How long after a freeze a write may still reach the apiserver having been on the wire
/// already: such a write left in time.
pub const ON_THE_WIRE: Duration = Duration::from_millis(300);

impl Late {
    /// `user`'s writes the audit log shows received after `after` (a freeze or a cut, and what
    /// was on the wire then) and before a second after `back` (SIGCONT, the heal): sent before
    /// the cut, or by a replica that could not know it had lost its shard, and carried out once it
    /// came back. A replica holds no shard before a renewal and a second's hand-over grace, so
    /// none of these is a write of a shard held again.
    pub fn of(events: &[serde_json::Value], user: &str, after: SystemTime, back: SystemTime) -> Late {
        let mut late = Late::default();
        for event in events.iter().filter(|e| e["user"]["username"] == user) {
            let at = received(event);
            if at <= after || at >= back + Duration::from_secs(1) {
                continue;
            }
            let code = event["responseStatus"]["code"].as_u64().unwrap_or(0);
            let after = match at.duration_since(back) {
                Ok(late) => format!("{late:?} after"),
                Err(early) => format!("{:?} before", early.duration()),
            };
            let said = format!(
                "{} {}/{} {code} {after} the return",
                event["verb"].as_str().unwrap_or_default(),
                event["objectRef"]["namespace"].as_str().unwrap_or_default(),
                event["objectRef"]["name"].as_str().unwrap_or_default(),
            );
            match code {
                200..=299 => late.accepted.push(said),
                409 => late.refused.push(said),
                _ => late.other.push(said),
            }
        }
        late
    }

    pub fn add(&mut self, other: Late) {
        self.accepted.extend(other.accepted);
        self.refused.extend(other.refused);
        self.other.extend(other.other);
    }

    pub fn len(&self) -> usize {
        self.accepted.len() + self.refused.len() + self.other.len()
    }
}

/// The time of an audit event's `requestReceivedTimestamp`.
pub fn received(event: &serde_json::Value) -> SystemTime {
    let at: k8s_openapi::jiff::Timestamp = event["requestReceivedTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    SystemTime::from(at)
}

/// The median and the largest of `durations` (zero when there are none).
pub fn p50_max(durations: &[Duration]) -> (Duration, Duration) {
    let mut sorted = durations.to_vec();
    sorted.sort();
    match sorted.last() {
        Some(max) => (sorted[sorted.len() / 2], *max),
        None => (Duration::ZERO, Duration::ZERO),
    }
}
