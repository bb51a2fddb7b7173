//! Several active replicas: the rules are split into shards, each a `coordination.k8s.io/v1`
//! Lease, and each replica holds its fair share of them (`sync::shards`). A replica reconciles,
//! watches and connects for the rules of the shards it holds, and nothing else.
//!
//! Every replica also keeps a Lease of its own, renewed like a shard's: the replicas whose Lease
//! moved within a Lease duration are the live ones, over which the shards are spread. A replica
//! that joins makes the others' share smaller, and they give their highest shards back; one that
//! dies stops renewing, and the others take its shards once they have seen them unchanged for a
//! whole duration ([`crate::replicas::lease::decide`], on their own monotonic clocks).
//!
//! A write is allowed only while its shard is held: until the instant the last successful renewal
//! *started*, plus two thirds of the duration. Another replica may take the shard over no sooner
//! than a whole duration after it saw that renewal, so the two never overlap. The monotonic clock
//! runs on while a process is frozen (SIGSTOP), so a frozen replica that resumes finds its
//! shards lapsed and writes nothing until a renewal has succeeded again.

use crate::replicas::lease::{
    Decision, Elector, LeaderError, Observed, decide, renew_deadline, renew_period,
};
use crate::sync::ownership::RuleKey;
use crate::sync::shards::{Pace, moves, shard_of, shard_of_name};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The label on every replica's own Lease, naming the shard set.
pub const MEMBER_LABEL: &str = "mimeo.dev/shards";
/// The annotation on every replica's own Lease: how many shards it splits the rules into.
pub const COUNT_ANNOTATION: &str = "mimeo.dev/shard-count";

/// How many shards the rules are split into when replicas are to find each other without being
/// told how many run (`--leader-elect` without `--shards`): up to this many replicas share the
/// work. Each shard is a Lease renewed every third of its duration by whoever holds it.
pub const DEFAULT_COUNT: u32 = 8;

/// How the shards are kept.
#[derive(Clone, Debug)]
pub struct ShardSettings {
    /// How many shards the rules are split into.
    pub count: u32,
    /// Where the Leases are.
    pub namespace: String,
    /// Shard `i` of `n` is Lease `<prefix>-<n>-<i>`; replica `r`'s own is `<prefix>-member-<r>`.
    pub prefix: String,
    /// This replica.
    pub identity: String,
    pub duration: Duration,
}

/// How long after taking a shard its first write may start: a replica that gave it back may
/// still have a write on the way, and its echo should reach this one's copies cache first.
pub const HANDOFF_GRACE: Duration = Duration::from_secs(1);

/// A shard held: from when, and until when, a write may start (`None`: for good, a lone replica).
#[derive(Clone, Copy, Debug)]
struct Hold {
    from: Instant,
    until: Option<Instant>,
}

/// The shards this replica holds, shared by everything that writes.
#[derive(Clone)]
pub struct Shards {
    count: u32,
    held: Arc<Mutex<BTreeMap<u32, Hold>>>,
    changed: Arc<tokio::sync::watch::Sender<BTreeSet<u32>>>,
    /// While this replica stands aside: the shard count of the replica that came before it.
    aside: Arc<Mutex<Option<u32>>>,
}

impl std::fmt::Debug for Shards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Shards({} of {})", self.held_now().len(), self.count)
    }
}

impl Default for Shards {
    /// One shard, held for good: a replica that does not share its work.
    fn default() -> Self {
        Shards {
            count: 1,
            held: Arc::new(Mutex::new(BTreeMap::from([(
                0,
                Hold {
                    from: Instant::now(),
                    until: None,
                },
            )]))),
            changed: Arc::new(tokio::sync::watch::Sender::new(BTreeSet::from([0]))),
            aside: Default::default(),
        }
    }
}

impl Shards {
    /// `count` shards, none held yet.
    pub fn new(count: u32) -> Self {
        Shards {
            count: count.max(1),
            held: Default::default(),
            changed: Arc::new(tokio::sync::watch::Sender::new(BTreeSet::new())),
            aside: Default::default(),
        }
    }

    /// While this replica stands aside because a replica that came before it splits the rules
    /// into another number of shards: that number.
    pub fn standing_aside_for(&self) -> Option<u32> {
        *self.aside.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records whether this replica stands aside; says whether that changed.
    fn stand_aside(&self, theirs: Option<u32>) -> bool {
        let mut aside = self.aside.lock().unwrap_or_else(|p| p.into_inner());
        let changed = *aside != theirs;
        *aside = theirs;
        changed
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    /// Shard `shard` held from now until `until`, for tests of what the fence refuses.
    #[cfg(test)]
    pub(crate) fn holding(shard: u32, until: Instant) -> Shards {
        let shards = Shards::new(shard + 1);
        shards.held.lock().unwrap().insert(
            shard,
            Hold {
                from: Instant::now(),
                until: Some(until),
            },
        );
        shards
    }

    /// Whether a write for `shard` may start now.
    pub fn holds(&self, shard: u32) -> bool {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        held.get(&shard)
            .is_some_and(|h| h.from <= now && h.until.is_none_or(|until| now < until))
    }

    /// Whether this replica works on `rule` now.
    pub fn holds_rule(&self, rule: &RuleKey) -> bool {
        self.holds(shard_of(rule, self.count))
    }

    /// Whether this replica looks after the named object (a `RemoteCluster`'s status).
    pub fn holds_name(&self, name: &str) -> bool {
        self.holds(shard_of_name(name, self.count))
    }

    /// The shards held now, as far as writes go.
    pub fn held_now(&self) -> BTreeSet<u32> {
        (0..self.count).filter(|s| self.holds(*s)).collect()
    }

    /// A tick each time the shards held change: every rule is looked at again, and those of
    /// shards no longer held are let go.
    pub fn changes(&self) -> impl futures::Stream<Item = ()> + Send + 'static {
        futures::stream::unfold(self.subscribe(), |mut held| async move {
            held.changed().await.ok()?;
            Some(((), held))
        })
    }

    /// Changes of the shards held, for waking the rules of a shard taken or given up.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<BTreeSet<u32>> {
        self.changed.subscribe()
    }

    /// Renewed (or taken) until `until`: a shard just taken is writable only after
    /// [`HANDOFF_GRACE`]. Says whether the hold had lapsed before this renewal: writes and looks
    /// were turned away meanwhile, though the shards held are the same before and after. A
    /// lapsed hold waits out the grace too: in the gap another replica may have taken the shard
    /// and given it back (a frozen replica that resumes while the others make room for it), and
    /// its last writes may still be on the way.
    fn set(&self, shard: u32, until: Instant) -> bool {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let before = held.get(&shard).copied();
        let lapsed = before.is_some_and(|h| h.until.is_some_and(|until| until <= now));
        let from = match before {
            Some(hold) if !lapsed => hold.from,
            _ => now + HANDOFF_GRACE,
        };
        held.insert(
            shard,
            Hold {
                from,
                until: Some(until),
            },
        );
        lapsed
    }

    fn drop_shard(&self, shard: u32) {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).remove(&shard);
    }

    /// Wakes every subscriber even when the shards held are what they were: a hold that lapsed
    /// and came back let rules go in between (their look found the shard not held), and only a
    /// look now brings them back.
    fn wake(&self) {
        let now = self.held_now();
        self.changed.send_modify(|was| *was = now);
    }

    fn publish(&self) {
        let now = self.held_now();
        self.changed.send_if_modified(|was| {
            let changed = *was != now;
            *was = now.clone();
            changed
        });
    }
}

/// Keeps this replica's Lease and its share of the shard Leases until `stopped`, then gives
/// them up so that the others take over at once.
pub async fn keep(
    client: Client,
    settings: ShardSettings,
    shards: Shards,
    stopped: impl Future<Output = ()>,
) {
    let electors: Vec<Elector> = (0..settings.count)
        .map(|i| {
            Elector::new(
                client.clone(),
                &settings.namespace,
                &format!("{}-{}-{i}", settings.prefix, settings.count),
                &settings.identity,
                settings.duration,
            )
        })
        .collect();
    let mut members = Members::new(client, &settings);
    let round = async {
        let mut pace = Pace::default();
        let mut others = 0;
        loop {
            // Rounds start a renewal period apart, however long one took (a slow link's round
            // is slow): a renewal is never later than its round makes it.
            let started = Instant::now();
            one_round(
                &settings,
                &shards,
                &electors,
                &mut members,
                &mut pace,
                &mut others,
            )
            .await;
            let period = renew_period(settings.duration);
            tokio::time::sleep(period.saturating_sub(started.elapsed())).await;
        }
    };
    tokio::select! {
        () = round => {}
        () = stopped => {}
    }
    let held: Vec<u32> = shards
        .held
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .keys()
        .copied()
        .collect();
    for shard in held {
        shards.drop_shard(shard);
        if let Err(e) = electors[shard as usize].release().await {
            tracing::warn!(error = %e, shard, "releasing a shard Lease failed; another replica takes it when it expires");
        }
    }
    shards.publish();
    members.leave().await;
}

/// One round: the held shards renewed, the heartbeat, then shards given back or taken. A replica
/// whose renewal landed after its hold ran out, and took long on the wire, is slow ([`Pace`]): it
/// gives every shard back and leaves the live replicas until its rounds are quick again. `others` is how many other live
/// replicas the last count saw.
async fn one_round(
    settings: &ShardSettings,
    shards: &Shards,
    electors: &[Elector],
    members: &mut Members,
    pace: &mut Pace,
    others: &mut usize,
) {
    let (held, lapsed) = renew_held(settings, shards, electors).await;
    if lapsed == Some(Late::Link) && pace.renewed_late(*others) {
        tracing::warn!(
            shards = ?held,
            others = *others,
            "this replica's shard renewals reach the apiserver after their deadline, so it may not write; giving its shards back for another replica to take, and standing by until its link is quick again"
        );
        give_back(shards, electors, held.iter().copied()).await;
        members.leave().await;
        return;
    }
    if pace.is_slow() {
        let asked = Instant::now();
        let counted = members.count().await;
        let took = asked.elapsed();
        *others = match counted {
            Ok(Count::Live(live)) => live - 1,
            Ok(Count::Disagree(_)) | Err(_) => *others,
        };
        // A round of a replica that holds shards makes about eight requests one after another
        // (renewals, its own Lease, the count, the free shards, a take): each must take no more
        // than an eighth of the renewal deadline for the round to renew in time.
        let quick = renew_deadline(settings.duration) / 8;
        let settle = settings.duration * 2;
        if counted.is_err() || !pace.round_took(took, *others, Instant::now(), quick, settle) {
            return;
        }
        tracing::info!(
            others = *others,
            "this replica's link to the apiserver is quick again (or no other replica is live); taking a share of the shards"
        );
    }
    let live = match members.beat_and_count().await {
        Ok(Count::Live(live)) => live,
        Ok(Count::Disagree(theirs)) => {
            // A stray replica, or a rollout that changes the shard count: the same rule is in
            // another shard for the replicas that came first, so this one writes nothing until
            // they are gone, and they go on.
            if shards.stand_aside(Some(theirs)) {
                tracing::error!(
                    ours = settings.count,
                    theirs,
                    "a replica that started before this one splits the rules into another number of shards; standing aside (writing nothing) until it is gone"
                );
            }
            for shard in 0..settings.count {
                shards.drop_shard(shard);
            }
            shards.publish();
            return;
        }
        Err(e) => {
            tracing::warn!(error = %e, "renewing this replica's Lease failed; its shards are renewed all the same");
            1
        }
    };
    *others = live - 1;
    if shards.stand_aside(None) {
        tracing::info!(
            shards = settings.count,
            "no replica splits the rules otherwise any more; taking a share of the shards"
        );
    }
    let unheld = (0..settings.count).filter(|s| !held.contains(s));
    let free: BTreeSet<u32> = futures::future::join_all(
        unheld.map(|shard| async move { (shard, electors[shard as usize].is_free().await.unwrap_or(false)) }),
    )
    .await
    .into_iter()
    .filter_map(|(shard, free)| free.then_some(shard))
    .collect();
    let planned = moves(settings.count, &held, &free, live);
    let took = !planned.take.is_empty();
    for shard in &planned.release {
        tracing::info!(shard, live, "giving a shard back: more replicas share the work");
    }
    give_back(shards, electors, planned.release).await;
    for shard in planned.take {
        let started = Instant::now();
        if let Ok(Ok(())) = electors[shard as usize].try_hold().await {
            let _ = shards.set(shard, started + renew_deadline(settings.duration));
            tracing::info!(shard, live, "took a shard");
        }
    }
    shards.publish();
    let lapsed = lapsed.is_some();
    if took || lapsed {
        // Told once their writes may start, so that their rules are looked at then; a lapsed
        // hold's rules were let go meanwhile, with the shards held the same before and after.
        let shards = shards.clone();
        tokio::spawn(async move {
            tokio::time::sleep(HANDOFF_GRACE).await;
            match lapsed {
                true => shards.wake(),
                false => shards.publish(),
            }
        });
    }
}

/// Why a renewal landed after the hold it renewed had run out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Late {
    /// The renewal itself was quick: the round came late (the process was frozen, or starved of
    /// CPU). The link is fine; the shards are kept, their rules looked at again.
    Round,
    /// The renewal took more than a quarter of the renewal deadline on the wire: the link is slow.
    Link,
}

/// Renews every shard held, all at once, first thing in a round: on a slow link one after
/// another, the last renewal of a round came seconds after its round began. Returns the shards
/// still held, and whether (and why) a renewal landed after the hold it renewed had run out.
async fn renew_held(
    settings: &ShardSettings,
    shards: &Shards,
    electors: &[Elector],
) -> (BTreeSet<u32>, Option<Late>) {
    let was_held: Vec<u32> = shards
        .held
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .keys()
        .copied()
        .collect();
    let renewals = futures::future::join_all(was_held.into_iter().map(|shard| async move {
        let started = Instant::now();
        let renewal = electors[shard as usize].try_hold().await;
        (shard, started, started.elapsed(), renewal)
    }))
    .await;
    let slow = renew_deadline(settings.duration) / 4;
    let mut held = BTreeSet::new();
    let mut lapsed = None;
    for (shard, started, took, renewal) in renewals {
        match renewal {
            Ok(Ok(())) => {
                if shards.set(shard, started + renew_deadline(settings.duration)) {
                    tracing::warn!(
                        shard,
                        took_ms = took.as_millis() as u64,
                        "a shard Lease was renewed after its deadline"
                    );
                    let why = if took > slow { Late::Link } else { Late::Round };
                    lapsed = lapsed.max(Some(why));
                }
                held.insert(shard);
            }
            Ok(Err(_)) | Err(_) => {
                tracing::warn!(
                    shard,
                    "a shard Lease could not be renewed; its rules are left to another replica"
                );
                shards.drop_shard(shard);
            }
        }
    }
    (held, lapsed)
}

/// Gives shards back: no write of theirs starts here from now on, and their Leases are released
/// (all at once: on a slow link one after another would keep the last waiting) so that another
/// replica may take them at once.
async fn give_back(shards: &Shards, electors: &[Elector], release: impl IntoIterator<Item = u32>) {
    let release: Vec<u32> = release.into_iter().collect();
    for shard in &release {
        shards.drop_shard(*shard);
    }
    shards.publish();
    futures::future::join_all(release.into_iter().map(|shard| async move {
        if let Err(e) = electors[shard as usize].release().await {
            tracing::warn!(error = %e, shard, "giving a shard back failed; another replica takes it when it expires");
        }
    }))
    .await;
}

/// What the other replicas' Leases say.
enum Count {
    /// This many replicas are live, this one included.
    Live(usize),
    /// A live replica splits the rules into this other number of shards.
    Disagree(u32),
}

/// This replica's own Lease, and what it saw of the others'.
struct Members {
    api: Api<Lease>,
    name: String,
    settings: ShardSettings,
    seen: HashMap<String, Option<Observed>>,
    /// When this replica's own Lease was made: of two replicas that split the rules differently,
    /// the one that came later stands aside.
    joined: Option<Timestamp>,
}

impl Members {
    fn new(client: Client, settings: &ShardSettings) -> Self {
        Members {
            api: Api::namespaced(client, &settings.namespace),
            name: member_name(&settings.prefix, &settings.identity),
            settings: settings.clone(),
            seen: HashMap::new(),
            joined: None,
        }
    }

    /// Renews this replica's Lease and counts the live replicas, this one included. A replica
    /// Lease seen unchanged for a whole duration is a dead replica's, and is deleted. A live
    /// replica that splits the rules into another number of shards is not counted: if it came
    /// first, this one stands aside ([`Count::Disagree`]); if it came later, it stands aside, and
    /// this one goes on as if it were not there, so that a stray replica or a rollout that
    /// changes the count never stops the replicas already writing.
    async fn beat_and_count(&mut self) -> Result<Count, LeaderError> {
        self.joined = self.beat().await?.or(self.joined);
        self.count().await
    }

    /// Counts the live replicas, this one included whether or not its own Lease is there (see
    /// [`Members::beat_and_count`]).
    async fn count(&mut self) -> Result<Count, LeaderError> {
        let listed = self
            .api
            .list(&ListParams::default().labels(&format!("{MEMBER_LABEL}={}", self.settings.prefix)))
            .await
            .map_err(|e| self.error(e))?;
        let now = Instant::now();
        let mut live = 1;
        let mut disagree = None;
        let mut names = BTreeSet::new();
        for lease in &listed.items {
            let name = lease.name_any();
            if name == self.name {
                continue;
            }
            names.insert(name.clone());
            let version = lease.resource_version().unwrap_or_default();
            let Some(spec) = lease.spec.as_ref() else { continue };
            let observed = self.seen.entry(name.clone()).or_default();
            match decide(Some((spec, &version)), "", observed, now, self.settings.duration) {
                Decision::Wait(_) => {
                    let theirs = lease
                        .annotations()
                        .get(COUNT_ANNOTATION)
                        .and_then(|c| c.parse::<u32>().ok());
                    match theirs.filter(|c| *c != self.settings.count) {
                        None => live += 1,
                        Some(theirs) => {
                            let their_joining = lease.metadata.creation_timestamp.as_ref().map(|t| t.0);
                            if came_first((their_joining, &name), (self.joined, &self.name)) {
                                disagree = Some(theirs);
                            }
                        }
                    }
                }
                _ => {
                    let params = DeleteParams {
                        preconditions: Some(Preconditions {
                            resource_version: Some(version.clone()),
                            uid: None,
                        }),
                        ..Default::default()
                    };
                    if self.api.delete(&name, &params).await.is_ok() {
                        tracing::info!(replica = %name, "a replica stopped renewing its Lease; its shards go to the others");
                    }
                }
            }
        }
        self.seen.retain(|name, _| names.contains(name));
        Ok(match disagree {
            Some(theirs) => Count::Disagree(theirs),
            None => Count::Live(live),
        })
    }

    /// Renews this replica's Lease (made when missing); returns when it was made.
    async fn beat(&self) -> Result<Option<Timestamp>, LeaderError> {
        let now = MicroTime(Timestamp::now());
        let seconds = self.settings.duration.as_secs().max(1) as i32;
        let current = self.api.get_opt(&self.name).await.map_err(|e| self.error(e))?;
        let result = match current {
            Some(mut lease) => {
                let spec = lease.spec.get_or_insert_default();
                spec.renew_time = Some(now);
                spec.lease_duration_seconds = Some(seconds);
                self.api.replace(&self.name, &PostParams::default(), &lease).await
            }
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        namespace: Some(self.settings.namespace.clone()),
                        labels: Some(BTreeMap::from([(
                            MEMBER_LABEL.to_owned(),
                            self.settings.prefix.clone(),
                        )])),
                        annotations: Some(BTreeMap::from([(
                            COUNT_ANNOTATION.to_owned(),
                            self.settings.count.to_string(),
                        )])),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.settings.identity.clone()),
                        lease_duration_seconds: Some(seconds),
                        renew_time: Some(now),
                        ..Default::default()
                    }),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
        };
        result
            .map(|lease| lease.metadata.creation_timestamp.map(|t| t.0))
            .map_err(|e| self.error(e))
    }

    /// Deletes this replica's Lease on a clean shutdown, so that the others' share grows at once.
    async fn leave(&self) {
        let _ = self.api.delete(&self.name, &DeleteParams::default()).await;
    }

    fn error(&self, source: kube::Error) -> LeaderError {
        LeaderError::Kube {
            namespace: self.settings.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }
}

/// Whether replica `a` joined before replica `b`, each by when its Lease was made and then by
/// its Lease's name, so that the two agree on it. A time not known yet counts as latest.
fn came_first(a: (Option<Timestamp>, &str), b: (Option<Timestamp>, &str)) -> bool {
    let key = |(at, name): (Option<Timestamp>, &str)| (at.is_none(), at, name.to_owned());
    key(a) < key(b)
}

/// A replica's own Lease: `<prefix>-member-<identity>`, cut to a valid name.
fn member_name(prefix: &str, identity: &str) -> String {
    let mut name: String = format!("{prefix}-member-{identity}")
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    name.truncate(253);
    name.trim_end_matches(['-', '.']).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_may_start_only_while_the_shard_is_held() {
        let shards = Shards::new(3);
        assert!(!shards.holds(0));
        shards.set(1, Instant::now() + Duration::from_secs(60));
        assert!(!shards.holds(1), "a shard just taken waits for the handoff");
        shards.held.lock().unwrap().get_mut(&1).unwrap().from = Instant::now();
        shards.set(2, Instant::now() - Duration::from_millis(1));
        assert_eq!(
            shards.held_now(),
            BTreeSet::from([1]),
            "a lapsed renewal holds nothing"
        );
        shards.drop_shard(1);
        assert!(!shards.holds(1));
        let lone = Shards::default();
        assert!(lone.holds_rule(&RuleKey::cluster_sync_rule("any")));
    }

    /// A hold that lapsed and was renewed holds the same shards as before, yet the rules turned
    /// away in between must be looked at again: the renewal says it lapsed, and waking tells
    /// every subscriber even with nothing changed. (A lone replica under load renewed late once,
    /// and 48 rules stayed let go until their next change.)
    #[test]
    fn a_lapsed_hold_renewed_wakes_the_rules_it_turned_away() {
        let shards = Shards::new(3);
        assert!(
            !shards.set(0, Instant::now() + Duration::from_secs(60)),
            "taken, not lapsed"
        );
        shards.held.lock().unwrap().get_mut(&0).unwrap().from = Instant::now();
        let mut changes = shards.subscribe();
        shards.publish();
        assert!(changes.has_changed().unwrap());
        changes.borrow_and_update();
        assert!(
            !shards.set(0, Instant::now() + Duration::from_secs(60)),
            "renewed in time"
        );
        shards.publish();
        assert!(
            !changes.has_changed().unwrap(),
            "nothing changed, nobody is woken"
        );
        shards.held.lock().unwrap().get_mut(&0).unwrap().until =
            Some(Instant::now() - Duration::from_millis(1));
        assert!(!shards.holds(0));
        assert!(
            shards.set(0, Instant::now() + Duration::from_secs(60)),
            "renewed late"
        );
        assert!(
            !shards.holds(0),
            "renewed late, it waits for the handoff: another replica may have held it meanwhile"
        );
        shards.held.lock().unwrap().get_mut(&0).unwrap().from = Instant::now();
        shards.wake();
        assert!(
            changes.has_changed().unwrap(),
            "the same shards, and every rule looked at again"
        );
        assert_eq!(*changes.borrow_and_update(), BTreeSet::from([0]));
    }

    /// Of two replicas that split the rules differently, both agree which came first: the later
    /// one stands aside, and the first goes on.
    #[test]
    fn the_replica_that_came_later_stands_aside() {
        let early: Timestamp = "2026-12-06T10:00:00Z".parse().unwrap();
        let late: Timestamp = "2026-12-06T10:05:00Z".parse().unwrap();
        assert!(came_first((Some(early), "b"), (Some(late), "a")));
        assert!(!came_first((Some(late), "a"), (Some(early), "b")));
        assert!(
            came_first((Some(early), "a"), (Some(early), "b")),
            "the same second: by name"
        );
        assert!(!came_first((Some(early), "b"), (Some(early), "a")));
        assert!(came_first((Some(late), "z"), (None, "a")), "not made yet: last");
    }

    #[test]
    fn member_names_are_valid_lease_names() {
        assert_eq!(member_name("mimeo-shard", "Pod_1"), "mimeo-shard-member-pod-1");
    }
}
