//! The rule's status: the inventory of copies and the `Ready` condition, built deterministically
//! so that an unchanged world writes no status and wakes nobody.

use super::error::short_message;
use crate::api::{CopyState, CopyStatus, RuleStatus};
use crate::sync::hash::digest_bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

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

/// How many copies in states that hold no copy the status lists; the rest are counted.
pub const LISTED_WITHOUT_COPY: usize = 200;

/// Whether a copy in this state may be left out of the listed inventory: no object of the
/// rule's is there, so clean-up does not need it.
fn holds_no_copy(state: CopyState) -> bool {
    matches!(
        state,
        CopyState::NotAccepted
            | CopyState::NamespaceMissing
            | CopyState::NotWatched
            | CopyState::Skipped
            | CopyState::Conflict
            | CopyState::KindNotServed
            | CopyState::Refused
    )
}

/// Splits a sorted inventory into what the status lists and what it counts by state: every copy
/// in a state that may hold a copy, and the first [`LISTED_WITHOUT_COPY`] of the others.
pub fn bounded(inventory: Vec<CopyStatus>) -> (Vec<CopyStatus>, std::collections::BTreeMap<String, i64>) {
    let mut listed = Vec::with_capacity(inventory.len().min(4 * LISTED_WITHOUT_COPY));
    let mut counted = std::collections::BTreeMap::new();
    let mut without = 0;
    for copy in inventory {
        if holds_no_copy(copy.state) {
            without += 1;
            if without > LISTED_WITHOUT_COPY {
                *counted.entry(format!("{:?}", copy.state)).or_insert(0) += 1;
                continue;
            }
        }
        listed.push(copy);
    }
    (listed, counted)
}

/// Summarises an inventory: every copy in sync, or which are not and why.
pub fn summarize(inventory: &[CopyStatus]) -> Readiness {
    let total = inventory.len();
    let synced = inventory.iter().filter(|c| c.state == CopyState::Synced).count();
    // A plugin's skip is a decision, not a fault: it does not make the rule unready.
    let skipped = inventory.iter().filter(|c| c.state == CopyState::Skipped).count();
    let skipped_note = if skipped > 0 {
        format!("; {skipped} skipped by plugins")
    } else {
        String::new()
    };
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
    status.conditions = vec![ready_condition(
        previous.map(|p| p.conditions.as_slice()),
        generation,
        ready,
    )];
    status
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

/// What mimeo last wrote to one rule's status. The rule in the cache can predate that write (the
/// rule's own watch event not in yet when a copy's event wakes it again); deciding on the cached
/// status alone would then write the same status once more, with a new transition time.
#[derive(Clone, Debug, PartialEq)]
pub struct LastWritten {
    /// The rule's uid: a rule deleted and made again under the same name starts afresh.
    uid: String,
    ready: Option<(String, Time)>,
    /// Digest of the status without the `Ready` transition time.
    digest: String,
    /// The inventory written: copies the cache may not show yet must still be cleaned up.
    targets: Vec<CopyStatus>,
}

impl LastWritten {
    pub fn of(uid: &str, status: &RuleStatus) -> Self {
        LastWritten {
            uid: uid.to_owned(),
            ready: ready_of(status).map(|c| (c.status.clone(), c.last_transition_time.clone())),
            digest: timeless_digest(status),
            targets: status.targets.clone(),
        }
    }
}

/// The copies a rule holds, as far as mimeo knows: the inventory it last wrote for this rule
/// (`uid`), and any other in the cached status. A reconcile woken before the rule's cache shows
/// mimeo's last status write would otherwise miss the copies that write added, and a copy no
/// longer wanted there would stay behind for good. Where both name a copy, the last written wins.
pub fn known_copies(cached: Option<&RuleStatus>, last: Option<&LastWritten>, uid: &str) -> Vec<CopyStatus> {
    let mut copies: Vec<CopyStatus> = last
        .filter(|l| l.uid == uid)
        .map(|l| l.targets.clone())
        .unwrap_or_default();
    let place = |c: &CopyStatus| (c.cluster.clone(), c.namespace.clone(), c.name.clone());
    let known: std::collections::BTreeSet<_> = copies.iter().map(place).collect();
    copies.extend(
        cached
            .into_iter()
            .flat_map(|s| s.targets.iter())
            .filter(|c| !known.contains(&place(c)))
            .cloned(),
    );
    copies
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
    if let Some(ready) = ready_mut(&mut status) {
        ready.last_transition_time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    }
    digest_bytes(&serde_json::to_vec(&status).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_that_hold_nothing_are_counted_past_the_first_few_hundred() {
        let copy = |i: usize, state| CopyStatus {
            source: crate::api::SourceRef {
                namespace: None,
                name: format!("s{i}"),
            },
            cluster: None,
            namespace: Some(format!("ns{i:05}")),
            name: "c".into(),
            state,
            hash: None,
            message: None,
        };
        let mut inventory: Vec<CopyStatus> = (0..1000).map(|i| copy(i, CopyState::NotAccepted)).collect();
        inventory.extend((1000..1300).map(|i| copy(i, CopyState::Synced)));
        inventory.push(copy(1300, CopyState::NamespaceMissing));
        let (listed, counted) = bounded(inventory);
        assert_eq!(
            listed.len(),
            LISTED_WITHOUT_COPY + 300,
            "every copy that may hold one is listed"
        );
        assert_eq!(
            listed.iter().filter(|c| c.state == CopyState::Synced).count(),
            300
        );
        assert_eq!(counted.get("NotAccepted"), Some(&800));
        assert_eq!(counted.get("NamespaceMissing"), Some(&1));
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
        }
    }

    #[test]
    fn known_copies_add_what_was_last_written_to_what_the_cache_shows() {
        let with = |targets: Vec<CopyStatus>| RuleStatus {
            targets,
            ..Default::default()
        };
        let cached = with(vec![copy("a", CopyState::Synced, None)]);
        let written = LastWritten::of(
            "uid-1",
            &with(vec![
                copy("a", CopyState::Failed, Some("newer")),
                copy("c", CopyState::Synced, None),
            ]),
        );
        let known = known_copies(Some(&cached), Some(&written), "uid-1");
        let places: Vec<(&str, CopyState)> = known
            .iter()
            .map(|c| (c.namespace.as_deref().unwrap(), c.state))
            .collect();
        assert_eq!(places, [("a", CopyState::Failed), ("c", CopyState::Synced)]);
        // Another rule of the same name (a new uid) starts from the cache alone.
        assert_eq!(
            known_copies(Some(&cached), Some(&written), "uid-2"),
            cached.targets
        );
        assert_eq!(known_copies(None, None, "uid-1"), vec![]);
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
        let last = LastWritten::of("u1", &first);
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
