//! The rule's status: its copies counted (by state, by cluster, the problems named) and the
//! `Ready` condition, built deterministically so that an unchanged world writes no status and
//! wakes nobody.

use super::error::short_message;
use crate::api::{ClusterCopies, CopyState, CopyStatus, PluginPin, RuleStatus};
use crate::sync::decide::SKIPPED_FOR_CONFLICT;
use crate::sync::hash::digest_bytes;
use crate::sync::kstatus;
use crate::sync::plan::PlaceKey;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use std::collections::{BTreeMap, BTreeSet};

/// The `Ready` condition's status, reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readiness {
    pub ready: bool,
    pub reason: String,
    pub message: String,
}

impl Readiness {
    /// `Ready=False` for this reason, with this message.
    pub fn not_ready(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Readiness {
            ready: false,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// How many copies not in sync the status lists; the rest are counted in `moreProblems`. At
/// the longest message each, the list stays far below the 64 KiB a rule's status may take.
pub const PROBLEMS_LISTED: usize = 50;

/// What the status says about a rule's copies: counts, not a list of every copy.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CopiesSummary {
    pub copies: String,
    pub counts: BTreeMap<String, i64>,
    pub clusters: Vec<ClusterCopies>,
    pub problems: Vec<CopyStatus>,
    pub more_problems: Option<i64>,
}

/// A cluster none of whose copies can be written now, and why.
pub struct Unusable {
    pub cluster: Option<String>,
    pub state: CopyState,
}

/// Sums up a sorted inventory. A cluster in `unusable` whose copies the inventory does not list
/// one by one (mimeo restarted while it was down: only its count was kept) keeps the count the
/// status gave it before (`before`), all of them in the cluster's state.
pub fn summarize_copies(
    inventory: &[CopyStatus],
    unusable: &[Unusable],
    before: &[ClusterCopies],
) -> CopiesSummary {
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    let mut clusters: BTreeMap<Option<String>, ClusterCopies> = BTreeMap::new();
    for copy in inventory {
        *counts.entry(format!("{:?}", copy.state)).or_default() += 1;
        let cluster = clusters
            .entry(copy.cluster.clone())
            .or_insert_with(|| ClusterCopies {
                cluster: copy.cluster.clone(),
                ..Default::default()
            });
        cluster.copies += 1;
        cluster.synced += i64::from(copy.state == CopyState::Synced);
    }
    for down in unusable {
        let listed = clusters.get(&down.cluster).map_or(0, |c| c.copies);
        let counted = before
            .iter()
            .find(|c| c.cluster == down.cluster)
            .map_or(0, |c| c.copies);
        let cluster = clusters
            .entry(down.cluster.clone())
            .or_insert_with(|| ClusterCopies {
                cluster: down.cluster.clone(),
                ..Default::default()
            });
        cluster.problem = Some(down.state);
        if counted > listed {
            *counts.entry(format!("{:?}", down.state)).or_default() += counted - listed;
            cluster.copies = counted;
        }
    }
    let synced = counts.get("Synced").copied().unwrap_or_default();
    let total: i64 = counts.values().sum();
    let mut problems: Vec<&CopyStatus> = inventory
        .iter()
        .filter(|c| c.state != CopyState::Synced)
        .collect();
    problems.sort_by_key(|c| severity(c.state));
    let more = problems.len().saturating_sub(PROBLEMS_LISTED);
    CopiesSummary {
        copies: format!("{synced}/{total}"),
        counts,
        clusters: clusters.into_values().collect(),
        problems: problems.into_iter().take(PROBLEMS_LISTED).cloned().collect(),
        more_problems: (more > 0).then_some(more as i64),
    }
}

/// Dates each problem: a copy listed before in the same state keeps the time it was first seen
/// so (`previous`), one new to its state gets `now`. A copy out of sync for an hour says so at
/// every reconcile, and an unchanged world still writes an unchanged status.
pub fn date_problems(problems: &mut [CopyStatus], previous: &[CopyStatus], now: &Time) {
    let seen: BTreeMap<PlaceKey, (CopyState, Option<&Time>)> = previous
        .iter()
        .map(|p| (place_of(p), (p.state, p.since.as_ref())))
        .collect();
    for problem in problems {
        problem.since = match seen.get(&place_of(problem)) {
            Some((state, Some(since))) if *state == problem.state => Some((*since).clone()),
            _ => Some(now.clone()),
        };
    }
}

/// The order problems are listed in: what mimeo itself stopped doing first, then what failed,
/// then what waits on someone else, a plugin's decision last. Stable, so that an unchanged
/// world lists the same copies.
fn severity(state: CopyState) -> u8 {
    match state {
        CopyState::Flapping => 0,
        CopyState::Failed | CopyState::PluginFailed | CopyState::Unauthorized => 1,
        CopyState::Unreachable | CopyState::ClusterMissing => 2,
        CopyState::Conflict | CopyState::Refused => 3,
        CopyState::Skipped => 5,
        _ => 4,
    }
}

/// Summarises an inventory: every copy in sync, or which are not and why.
pub fn summarize(inventory: &[CopyStatus]) -> Readiness {
    let total = inventory.len();
    let synced = inventory.iter().filter(|c| c.state == CopyState::Synced).count();
    // A plugin's skip is a decision, not a fault, and so is `conflict: Skip`'s: neither makes
    // the rule unready.
    let skipped = inventory.iter().filter(|c| c.state == CopyState::Skipped).count();
    let for_conflict = inventory
        .iter()
        .filter(|c| c.state == CopyState::Skipped)
        .filter(|c| {
            c.message
                .as_deref()
                .is_some_and(|m| m.starts_with(SKIPPED_FOR_CONFLICT))
        })
        .count();
    let mut skipped_note = String::new();
    if skipped > for_conflict {
        skipped_note.push_str(&format!("; {} skipped by plugins", skipped - for_conflict));
    }
    if for_conflict > 0 {
        skipped_note.push_str(&format!(
            "; {for_conflict} skipped for an object in the way (conflict: Skip)"
        ));
    }
    if total == 0 {
        return Readiness {
            ready: true,
            reason: "NothingToCopy".into(),
            message: "no copy is wanted: no target matches".into(),
        };
    }
    if synced + skipped == total {
        return Readiness {
            ready: true,
            reason: "Synced".into(),
            message: format!("{synced}/{total} copies in sync{skipped_note}"),
        };
    }
    let mut problems: Vec<&CopyStatus> = inventory
        .iter()
        .filter(|c| !matches!(c.state, CopyState::Synced | CopyState::Skipped))
        .collect();
    // A copy the flap guard holds is named first, and gives the reason: it is the one problem
    // that means mimeo itself stopped.
    problems.sort_by_key(|c| c.state != CopyState::Flapping);
    let mut message = format!("{synced}/{total} copies in sync{skipped_note}");
    for copy in problems.iter().take(3) {
        let mut place = match &copy.namespace {
            Some(ns) => format!("{ns}/{}", copy.name),
            None => copy.name.clone(),
        };
        if let Some(cluster) = &copy.cluster {
            place = format!("{cluster}:{place}");
        }
        message.push_str(&format!("; {place}: {:?}", copy.state));
        if let Some(why) = &copy.message {
            message.push_str(&format!(" ({why})"));
        }
    }
    if problems.len() > 3 {
        message.push_str(&format!("; and {} more", problems.len() - 3));
    }
    Readiness {
        ready: false,
        reason: format!("{:?}", problems[0].state),
        message,
    }
}

/// A status with `Ready` set, keeping the previous transition time when the condition's status
/// did not change.
pub fn with_ready(
    mut status: RuleStatus,
    previous: Option<&RuleStatus>,
    generation: Option<i64>,
    ready: Readiness,
) -> RuleStatus {
    status.observed_generation = generation;
    status.conditions = ready_conditions(previous.map(|p| p.conditions.as_slice()), generation, ready);
    status
}

/// A rule's source as `kubectl get` shows it (the Source column): its name, or its selector in
/// the apiserver's query form.
pub fn source_shown(source: &crate::api::Source) -> Option<String> {
    if let Some(name) = &source.name {
        return Some(name.clone());
    }
    let selector = crate::sync::object_selector::selector(source.selector.as_ref()?).ok()?;
    match selector.to_string() {
        text if text.is_empty() => Some("selector: every object".into()),
        text => Some(format!("selector {text}")),
    }
}

/// The `PluginsRefreshed` condition, only while a tag due to be resolved again could not be,
/// because its registry does not answer: the rule stays `Ready` (its copies are in sync, made by
/// the digest pinned before) and this says the tag is not current. Keeps the previous transition
/// time, so that a rule retried during an outage does not get a new status each time.
pub fn plugins_not_refreshed(
    previous: Option<&[Condition]>,
    generation: Option<i64>,
    not_refreshed: &[String],
) -> Option<Condition> {
    if not_refreshed.is_empty() {
        return None;
    }
    let since = previous
        .and_then(|p| {
            p.iter()
                .find(|c| c.type_ == PLUGINS_REFRESHED && c.status == "False")
        })
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(k8s_openapi::jiff::Timestamp::now()));
    Some(Condition {
        type_: PLUGINS_REFRESHED.into(),
        status: "False".into(),
        reason: "RegistryUnreachable".into(),
        message: short_message(&not_refreshed.join("; ")),
        observed_generation: generation,
        last_transition_time: since,
    })
}

/// The condition type of [`plugins_not_refreshed`].
pub const PLUGINS_REFRESHED: &str = "PluginsRefreshed";

/// The `Ready` condition, keeping the previous transition time when its status did not change.
pub fn ready_condition(
    previous: Option<&[Condition]>,
    generation: Option<i64>,
    ready: Readiness,
) -> Condition {
    let state = if ready.ready { "True" } else { "False" };
    let last = previous.and_then(|p| p.iter().find(|c| c.type_ == "Ready"));
    let since = match last {
        Some(c) if c.status == state => c.last_transition_time.clone(),
        _ => Time(k8s_openapi::jiff::Timestamp::now()),
    };
    Condition {
        type_: "Ready".into(),
        status: state.into(),
        reason: ready.reason,
        message: ready.message,
        observed_generation: generation,
        last_transition_time: since,
    }
}

/// `Ready`, and beside `Ready=False` the `Reconciling` or `Stalled` condition kstatus reads
/// (`sync::kstatus`), with the same reason and message, each keeping its previous transition time
/// while its status holds.
pub fn ready_conditions(
    previous: Option<&[Condition]>,
    generation: Option<i64>,
    ready: Readiness,
) -> Vec<Condition> {
    let progress = kstatus::progress(ready.ready, &ready.reason);
    let ready = ready_condition(previous, generation, ready);
    let mut conditions = vec![ready.clone()];
    if let Some(type_) = progress.condition_type() {
        let since = previous
            .and_then(|p| p.iter().find(|c| c.type_ == type_ && c.status == "True"))
            .map(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| Time(k8s_openapi::jiff::Timestamp::now()));
        conditions.push(Condition {
            type_: type_.into(),
            status: "True".into(),
            last_transition_time: since,
            ..ready
        });
    }
    conditions
}

/// What mimeo last wrote to one rule's status, and the copies it knew of then. The rule in the
/// cache can predate that write (the rule's own watch event not in yet when a copy's event wakes
/// it again); deciding on the cached status alone would then write the same status once more,
/// with a new transition time.
#[derive(Clone, Debug, PartialEq)]
pub struct LastWritten {
    /// The rule's uid: a rule deleted and made again under the same name starts afresh.
    uid: String,
    ready: Option<(String, Time)>,
    /// Digest of the status without the conditions' transition times.
    digest: String,
    /// Every copy of the last reconcile, in memory only: copies the cache may not show yet must
    /// still be cleaned up, and a cluster that stops answering keeps its copies listed.
    copies: Vec<CopyStatus>,
    /// The generation and the plugin pins it recorded: the next pass may start before the cache
    /// shows this status, and a pin it does not see is resolved again (or, with the registry
    /// down, refused, and then lost from the status).
    observed_generation: Option<i64>,
    plugins: Vec<PluginPin>,
}

impl LastWritten {
    pub fn of(uid: &str, status: &RuleStatus, copies: Vec<CopyStatus>) -> Self {
        LastWritten {
            uid: uid.to_owned(),
            ready: ready_of(status).map(|c| (c.status.clone(), c.last_transition_time.clone())),
            digest: timeless_digest(status),
            copies,
            observed_generation: status.observed_generation,
            plugins: status.plugins.clone(),
        }
    }

    /// The generation and the pins it recorded, if it is about the rule `uid`.
    pub fn pins_of(&self, uid: &str) -> Option<(Option<i64>, &[PluginPin])> {
        (self.uid == uid).then_some((self.observed_generation, self.plugins.as_slice()))
    }

    /// The copies it knew of, if it is about the rule `uid`.
    pub fn copies_of(&self, uid: &str) -> Option<&[CopyStatus]> {
        (self.uid == uid).then_some(self.copies.as_slice())
    }
}

/// What mimeo knows of a rule's copies before it looks at the caches.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KnownCopies {
    /// The copies of its last reconcile in this process, else those the status names (its
    /// problems and the deprecated `targets`), with any of those the other does not name.
    pub copies: Vec<CopyStatus>,
    /// Every cluster it holds copies in, as far as it knows: the status's per-cluster summary
    /// survives a restart, so a cluster that left the rule's selector meanwhile is still
    /// cleaned.
    pub clusters: BTreeSet<Option<String>>,
    /// Places the deprecated `targets` lists: copies of a mimeo from before seals, whose marks
    /// are trusted there until their next write seals them.
    pub unsealed: BTreeSet<PlaceKey>,
}

fn place_of(c: &CopyStatus) -> PlaceKey {
    (c.cluster.clone(), c.namespace.clone(), c.name.clone())
}

/// The copies a rule holds, as far as mimeo knows: what it last wrote for this rule (`uid`), and
/// what the cached status names. Where both name a copy, the last written wins.
pub fn known_copies(cached: Option<&RuleStatus>, last: Option<&LastWritten>, uid: &str) -> KnownCopies {
    let mut copies: Vec<CopyStatus> = last
        .and_then(|l| l.copies_of(uid))
        .map(<[CopyStatus]>::to_vec)
        .unwrap_or_default();
    let known: BTreeSet<PlaceKey> = copies.iter().map(place_of).collect();
    let named = cached
        .into_iter()
        .flat_map(|s| s.problems.iter().chain(&s.targets));
    copies.extend(named.filter(|c| !known.contains(&place_of(c))).cloned());
    let mut clusters: BTreeSet<Option<String>> = copies.iter().map(|c| c.cluster.clone()).collect();
    clusters.extend(
        cached
            .into_iter()
            .flat_map(|s| &s.clusters)
            .filter(|c| c.copies > 0)
            .map(|c| c.cluster.clone()),
    );
    let unsealed = cached
        .into_iter()
        .flat_map(|s| &s.targets)
        .map(place_of)
        .collect();
    KnownCopies {
        copies,
        clusters,
        unsealed,
    }
}

/// The deprecated `targets` to keep: those whose copy is neither in sync now (so sealed: a copy
/// without its seal is written) nor gone from the inventory (removed).
pub fn still_unsealed(previous: &[CopyStatus], inventory: &[CopyStatus]) -> Vec<CopyStatus> {
    if previous.is_empty() {
        return Vec::new();
    }
    let now: BTreeMap<PlaceKey, CopyState> = inventory.iter().map(|c| (place_of(c), c.state)).collect();
    previous
        .iter()
        .filter(|c| now.get(&place_of(c)).is_some_and(|s| *s != CopyState::Synced))
        .cloned()
        .collect()
}

/// Whether `status` has to be written, given the status in the cache and what was last written
/// for this rule (`uid`). When the last write had the same `Ready` status, its transition time
/// is kept: the cache's may be older than that write.
pub fn needs_write(
    status: &mut RuleStatus,
    cached: Option<&RuleStatus>,
    last: Option<&LastWritten>,
    uid: &str,
) -> bool {
    let last = last.filter(|l| l.uid == uid);
    if let (Some((state, since)), Some(ready)) = (last.and_then(|l| l.ready.as_ref()), ready_mut(status))
        && ready.status == *state
    {
        ready.last_transition_time = since.clone();
    }
    if cached == Some(status) {
        return false;
    }
    last.is_none_or(|l| l.digest != timeless_digest(status))
}

fn ready_of(status: &RuleStatus) -> Option<&Condition> {
    status.conditions.iter().find(|c| c.type_ == "Ready")
}

fn ready_mut(status: &mut RuleStatus) -> Option<&mut Condition> {
    status.conditions.iter_mut().find(|c| c.type_ == "Ready")
}

fn timeless_digest(status: &RuleStatus) -> String {
    let mut status = status.clone();
    for condition in &mut status.conditions {
        condition.last_transition_time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    }
    // A problem dated anew from a stale cache is the same problem: no write for that alone.
    for problem in &mut status.problems {
        problem.since = None;
    }
    digest_bytes(&serde_json::to_vec(&status).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_counts_copies_and_lists_only_the_worst_problems() {
        let copy = |i: usize, cluster: Option<&str>, state| CopyStatus {
            source: crate::api::SourceRef {
                namespace: None,
                name: format!("s{i}"),
            },
            cluster: cluster.map(str::to_owned),
            namespace: Some(format!("ns{i:05}")),
            name: "c".into(),
            state,
            hash: None,
            message: None,
            since: None,
        };
        let mut inventory: Vec<CopyStatus> = (0..50_000).map(|i| copy(i, None, CopyState::Synced)).collect();
        inventory.extend((0..100).map(|i| copy(i, None, CopyState::NotAccepted)));
        inventory.push(copy(7, Some("b"), CopyState::Failed));
        inventory.push(copy(8, Some("b"), CopyState::Synced));
        let summary = summarize_copies(&inventory, &[], &[]);
        assert_eq!(summary.copies, "50001/50102");
        assert_eq!(summary.counts.get("Synced"), Some(&50_001));
        assert_eq!(summary.counts.get("NotAccepted"), Some(&100));
        assert_eq!(summary.problems.len(), PROBLEMS_LISTED);
        assert_eq!(summary.problems[0].state, CopyState::Failed, "the worst first");
        assert_eq!(summary.more_problems, Some(101 - PROBLEMS_LISTED as i64));
        let per_cluster: Vec<(Option<&str>, i64, i64)> = summary
            .clusters
            .iter()
            .map(|c| (c.cluster.as_deref(), c.copies, c.synced))
            .collect();
        assert_eq!(per_cluster, [(None, 50_100, 50_000), (Some("b"), 2, 1)]);
        let status = RuleStatus {
            copies: Some(summary.copies),
            counts: summary.counts,
            clusters: summary.clusters,
            problems: summary.problems,
            more_problems: summary.more_problems,
            ..Default::default()
        };
        let size = serde_json::to_vec(&status).unwrap().len();
        assert!(size < 16 * 1024, "50,000 copies in a {size}-byte status");
    }

    #[test]
    fn a_cluster_down_since_a_restart_keeps_the_count_it_had() {
        let before = [ClusterCopies {
            cluster: Some("far".into()),
            copies: 40,
            synced: 40,
            problem: None,
        }];
        let down = [Unusable {
            cluster: Some("far".into()),
            state: CopyState::Unreachable,
        }];
        let summary = summarize_copies(&[], &down, &before);
        assert_eq!(summary.copies, "0/40");
        assert_eq!(summary.counts.get("Unreachable"), Some(&40));
        assert_eq!(summary.clusters[0].problem, Some(CopyState::Unreachable));
        assert_eq!(summary.clusters[0].copies, 40);
    }

    use crate::api::SourceRef;

    fn copy(ns: &str, state: CopyState, message: Option<&str>) -> CopyStatus {
        CopyStatus {
            source: SourceRef {
                namespace: Some("platform".into()),
                name: "creds".into(),
            },
            cluster: None,
            namespace: Some(ns.into()),
            name: "creds".into(),
            state,
            hash: None,
            message: message.map(str::to_owned),
            since: None,
        }
    }

    #[test]
    fn known_copies_add_what_was_last_written_to_what_the_status_names() {
        let cached = RuleStatus {
            problems: vec![copy("a", CopyState::Conflict, None)],
            targets: vec![copy("old", CopyState::Synced, None)],
            clusters: vec![ClusterCopies {
                cluster: Some("far".into()),
                copies: 3,
                synced: 3,
                problem: None,
            }],
            ..Default::default()
        };
        let written = LastWritten::of(
            "uid-1",
            &RuleStatus::default(),
            vec![
                copy("a", CopyState::Failed, Some("newer")),
                copy("c", CopyState::Synced, None),
            ],
        );
        let known = known_copies(Some(&cached), Some(&written), "uid-1");
        let places: Vec<(&str, CopyState)> = known
            .copies
            .iter()
            .map(|c| (c.namespace.as_deref().unwrap(), c.state))
            .collect();
        assert_eq!(
            places,
            [
                ("a", CopyState::Failed),
                ("c", CopyState::Synced),
                ("old", CopyState::Synced)
            ]
        );
        assert_eq!(known.clusters, BTreeSet::from([None, Some("far".to_owned())]));
        assert_eq!(
            known.unsealed,
            BTreeSet::from([(None, Some("old".to_owned()), "creds".to_owned())]),
            "only the deprecated inventory's places are trusted without a seal"
        );
        // Another rule of the same name (a new uid) starts from the status alone.
        let other = known_copies(Some(&cached), Some(&written), "uid-2");
        assert_eq!(
            other.copies,
            [cached.problems.clone(), cached.targets.clone()].concat()
        );
        assert_eq!(known_copies(None, None, "uid-1"), KnownCopies::default());
    }

    #[test]
    fn the_deprecated_inventory_shrinks_as_its_copies_are_sealed() {
        let legacy = [
            copy("sealed-now", CopyState::Synced, None),
            copy("down", CopyState::Synced, None),
            copy("removed", CopyState::Synced, None),
        ];
        let inventory = [
            copy("sealed-now", CopyState::Synced, None),
            copy("down", CopyState::Unreachable, None),
        ];
        let kept = still_unsealed(&legacy, &inventory);
        assert_eq!(kept, [legacy[1].clone()]);
        assert!(still_unsealed(&[], &inventory).is_empty());
    }

    #[test]
    fn summaries() {
        let all_good = summarize(&[
            copy("a", CopyState::Synced, None),
            copy("b", CopyState::Synced, None),
        ]);
        assert_eq!(
            all_good,
            Readiness {
                ready: true,
                reason: "Synced".into(),
                message: "2/2 copies in sync".into()
            }
        );

        let one_refused = summarize(&[
            copy("a", CopyState::Synced, None),
            copy("tenant-b", CopyState::NotAccepted, Some("annotate it")),
        ]);
        assert!(!one_refused.ready);
        assert_eq!(one_refused.reason, "NotAccepted");
        assert_eq!(
            one_refused.message,
            "1/2 copies in sync; tenant-b/creds: NotAccepted (annotate it)"
        );

        assert_eq!(summarize(&[]).reason, "NothingToCopy");

        let one_skipped = summarize(&[
            copy("a", CopyState::Synced, None),
            copy("b", CopyState::Skipped, Some("why")),
        ]);
        assert!(one_skipped.ready, "a plugin's skip is not a fault");
        assert_eq!(one_skipped.message, "1/2 copies in sync; 1 skipped by plugins");

        let in_the_way = format!("{SKIPPED_FOR_CONFLICT}an object not managed by mimeo has this name");
        let both = summarize(&[
            copy("a", CopyState::Synced, None),
            copy("b", CopyState::Skipped, Some("why")),
            copy("c", CopyState::Skipped, Some(&in_the_way)),
        ]);
        assert!(both.ready, "conflict: Skip's skip is not a fault either");
        assert_eq!(
            both.message,
            "1/3 copies in sync; 1 skipped by plugins; 1 skipped for an object in the way (conflict: Skip)"
        );
    }

    #[test]
    fn a_problem_keeps_its_date_while_its_state_stays() {
        let at = |secs| Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap());
        let mut before = vec![
            copy("a", CopyState::Conflict, None),
            copy("b", CopyState::NotAccepted, None),
        ];
        date_problems(&mut before, &[], &at(100));
        assert!(before.iter().all(|p| p.since == Some(at(100))));
        let mut now = vec![
            copy("a", CopyState::Conflict, Some("still")),
            copy("b", CopyState::Failed, None),
            copy("c", CopyState::Conflict, None),
        ];
        date_problems(&mut now, &before, &at(200));
        let since: Vec<_> = now.iter().map(|p| p.since.clone()).collect();
        assert_eq!(
            since,
            [Some(at(100)), Some(at(200)), Some(at(200))],
            "kept, new state, new copy"
        );
    }

    #[test]
    fn transition_time_moves_only_on_transitions() {
        let ready = |r: bool| Readiness {
            ready: r,
            reason: "X".into(),
            message: "m".into(),
        };
        let first = with_ready(RuleStatus::default(), None, Some(1), ready(true));
        let since = first.conditions[0].last_transition_time.clone();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let again = with_ready(RuleStatus::default(), Some(&first), Some(2), ready(true));
        assert_eq!(again.conditions[0].last_transition_time, since);
        assert_eq!(again.observed_generation, Some(2));
        let flipped = with_ready(RuleStatus::default(), Some(&first), Some(2), ready(false));
        assert_ne!(flipped.conditions[0].last_transition_time, since);
    }

    #[test]
    fn a_status_already_written_is_not_written_again_from_a_stale_cache() {
        let ready = |r: bool| Readiness {
            ready: r,
            reason: "Synced".into(),
            message: "1/1".into(),
        };
        let built = |cached: Option<&RuleStatus>, r: bool| {
            let mut status = RuleStatus {
                copies: Some("1/1".into()),
                ..Default::default()
            };
            status = with_ready(status, cached, Some(1), ready(r));
            status
        };
        // The first reconcile writes it.
        let mut first = built(None, true);
        assert!(needs_write(&mut first, None, None, "u1"));
        let last = LastWritten::of("u1", &first, Vec::new());
        std::thread::sleep(std::time::Duration::from_millis(5));

        // The next one still sees no status in the cache: same content, a newer transition time.
        let mut again = built(None, true);
        assert_ne!(again, first);
        assert!(!needs_write(&mut again, None, Some(&last), "u1"));
        assert_eq!(again, first, "the transition time of the last write is kept");

        // Once the cache has caught up, it decides alone.
        let mut caught_up = built(Some(&first), true);
        assert!(!needs_write(&mut caught_up, Some(&first), Some(&last), "u1"));

        // Something that did change is written, keeping the transition time while Ready holds.
        let mut changed = built(None, true);
        changed.copies = Some("2/2".into());
        assert!(needs_write(&mut changed, None, Some(&last), "u1"));
        assert_eq!(
            changed.conditions[0].last_transition_time,
            first.conditions[0].last_transition_time
        );
        // A flip of Ready gets its own time.
        let mut flipped = built(None, false);
        assert!(needs_write(&mut flipped, None, Some(&last), "u1"));
        assert_ne!(
            flipped.conditions[0].last_transition_time,
            first.conditions[0].last_transition_time
        );
        // A rule made again under the same name starts afresh.
        let mut other = built(None, true);
        assert!(needs_write(&mut other, None, Some(&last), "u2"));
    }
}
