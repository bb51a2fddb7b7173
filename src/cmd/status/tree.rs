//! One rule as a tree (rule, clusters, namespaces, copies), built from what the rule's status
//! says and the copies a reader could list. Pure: [`super::read`] does the reading.
//!
//! The status counts every copy but names only the copies with a problem; the copies in sync are
//! found by listing them, which a reader may do only where its kubeconfig may read. Whatever is
//! counted but not listed is said, with why, never made up.

use crate::api::{ClusterCopies, CopyState, CopyStatus, RuleStatus, SourceRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;
use std::collections::BTreeMap;

/// What `mimeo status` shows of one rule.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RuleTree {
    /// `SyncRule` or `ClusterSyncRule`.
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    /// What the rule copies, in words (`Secret team-a/registry`).
    pub source: String,
    /// The `Ready` condition; none before the controller first looked at the rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<ReadyView>,
    /// Copies in sync out of copies wanted, as `synced/total`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copies: Option<String>,
    /// Copies by state.
    pub counts: BTreeMap<String, i64>,
    pub clusters: Vec<ClusterNode>,
    /// Copies not in sync beyond those the status names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub more_problems: Option<i64>,
    /// What the reader should know about what it is not shown.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The rule's recent Warning events, newest first ([`recent_warnings`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<WarningView>,
}

/// A Warning event about the rule, as `kubectl describe` would show it.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WarningView {
    pub reason: String,
    pub message: String,
    pub count: i32,
    pub last: Time,
}

/// How many warnings a tree shows, and from how far back.
pub const WARNINGS_SHOWN: usize = 5;
pub const WARNINGS_WITHIN: std::time::Duration = std::time::Duration::from_secs(3600);

/// The rule's Warning events seen within the last hour, newest first, at most five: what `cmctl
/// status certificate` shows beside a certificate's conditions.
pub fn recent_warnings(
    events: &[k8s_openapi::api::events::v1::Event],
    now: k8s_openapi::jiff::Timestamp,
) -> Vec<WarningView> {
    let mut warnings: Vec<WarningView> = events
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter_map(|e| {
            let last = e
                .series
                .as_ref()
                .map(|s| Time(s.last_observed_time.0))
                .or_else(|| e.deprecated_last_timestamp.clone())
                .or_else(|| e.event_time.as_ref().map(|t| Time(t.0)))
                .or_else(|| e.metadata.creation_timestamp.clone())?;
            let age = now.as_second() - last.0.as_second();
            (age <= WARNINGS_WITHIN.as_secs() as i64).then(|| WarningView {
                reason: e.reason.clone().unwrap_or_default(),
                message: e.note.clone().unwrap_or_default(),
                count: e
                    .series
                    .as_ref()
                    .map(|s| s.count)
                    .or(e.deprecated_count)
                    .unwrap_or(1)
                    .max(1),
                last,
            })
        })
        .collect();
    warnings.sort_by_key(|w| std::cmp::Reverse(w.last.0));
    warnings.truncate(WARNINGS_SHOWN);
    warnings
}

impl RuleTree {
    /// Whether the rule is `Ready=True`.
    pub fn is_ready(&self) -> bool {
        self.ready.as_ref().is_some_and(|r| r.status == "True")
    }
}

/// The rule's `Ready` condition.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReadyView {
    pub status: String,
    pub reason: String,
    pub message: String,
    pub since: Time,
    /// Whether the status describes the rule's current spec (`observedGeneration`).
    pub current: bool,
}

/// The rule's copies in one cluster.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNode {
    /// The `RemoteCluster`; none for the cluster the rule lives in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Copies wanted or held there, and of those in sync, as the status counts them.
    pub copies: i64,
    pub synced: i64,
    /// Why no copy there can be written now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<CopyState>,
    pub namespaces: Vec<NamespaceNode>,
    /// Copies counted there but not shown, and why.
    #[serde(skip_serializing_if = "is_zero")]
    pub not_listed: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_listed_why: Option<String>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// The copies in one namespace (none for a cluster-scoped kind).
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceNode {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub copies: Vec<CopyNode>,
}

/// One copy, its state, since when and why.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CopyNode {
    pub name: String,
    /// The source object it is made from, where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceRef>,
    /// A [`CopyState`], or `Deleting` for a listed copy the apiserver is deleting.
    pub state: String,
    /// For a problem, when the controller first saw it; for a copy in sync, mimeo's last write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// A rule as read: its identity, source and status.
pub struct RuleFacts<'a> {
    pub kind: &'a str,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    pub generation: Option<i64>,
    pub source: String,
    pub status: Option<&'a RuleStatus>,
}

/// A copy of the rule found by listing the rule's cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct FoundCopy {
    pub namespace: Option<String>,
    pub name: String,
    pub source: Option<SourceRef>,
    /// When mimeo last wrote it (its field manager's newest entry).
    pub written: Option<Time>,
    pub deleting: bool,
}

/// What listing the rule's cluster for its copies gave.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Listing {
    pub found: Vec<FoundCopy>,
    /// Why some copies could not be listed (the reader may not list that kind everywhere, ...);
    /// none when every copy in the rule's cluster was listed.
    pub partial: Option<String>,
}

type Place = (Option<String>, Option<String>, String);

/// The tree of one rule.
pub fn build(rule: &RuleFacts<'_>, listing: &Listing) -> RuleTree {
    let empty = RuleStatus::default();
    let status = rule.status.unwrap_or(&empty);
    let mut notes = Vec::new();
    if rule.status.is_none() {
        notes.push(
            "the rule has no status yet: the controller has not looked at it (is mimeo running, and does it \
             watch this namespace?)"
                .to_owned(),
        );
    }
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| ReadyView {
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
            since: c.last_transition_time.clone(),
            current: status.observed_generation == rule.generation,
        });
    if ready.as_ref().is_some_and(|r| !r.current) {
        notes.push(
            "the status describes an earlier spec of the rule: the controller has not caught up yet"
                .to_owned(),
        );
    }

    let mut clusters: BTreeMap<Option<String>, ClusterNode> = status
        .clusters
        .iter()
        .map(|c| (c.cluster.clone(), cluster_node(c)))
        .collect();
    let mut copies: BTreeMap<Option<String>, BTreeMap<Place, CopyNode>> = BTreeMap::new();
    for problem in &status.problems {
        copies
            .entry(problem.cluster.clone())
            .or_default()
            .insert(place(problem), problem_node(problem));
    }
    let local = copies.entry(None).or_default();
    for found in &listing.found {
        let key = (None, found.namespace.clone(), found.name.clone());
        local.entry(key).or_insert_with(|| CopyNode {
            name: found.name.clone(),
            source: found.source.clone(),
            state: if found.deleting { "Deleting" } else { "Synced" }.to_owned(),
            since: found.written.clone(),
            why: found
                .deleting
                .then(|| "the apiserver is deleting it (a finalizer holds it)".to_owned()),
        });
    }
    copies.retain(|_, c| !c.is_empty());
    for (cluster, listed) in copies {
        let node = clusters.entry(cluster.clone()).or_insert_with(|| ClusterNode {
            cluster: cluster.clone(),
            copies: 0,
            synced: 0,
            problem: None,
            namespaces: Vec::new(),
            not_listed: 0,
            not_listed_why: None,
        });
        let mut namespaces: BTreeMap<Option<String>, Vec<CopyNode>> = BTreeMap::new();
        for ((_, namespace, _), copy) in listed {
            namespaces.entry(namespace).or_default().push(copy);
        }
        node.namespaces = namespaces
            .into_iter()
            .map(|(namespace, copies)| NamespaceNode { namespace, copies })
            .collect();
    }
    for node in clusters.values_mut() {
        count_not_listed(node, listing, status);
    }
    RuleTree {
        kind: rule.kind.to_owned(),
        namespace: rule.namespace.map(str::to_owned),
        name: rule.name.to_owned(),
        source: rule.source.clone(),
        ready,
        copies: status.copies.clone(),
        counts: status.counts.clone(),
        clusters: clusters.into_values().collect(),
        more_problems: status.more_problems,
        notes,
        warnings: Vec::new(),
    }
}

/// The copies of a cluster the status counts but the tree does not show, and why.
fn count_not_listed(node: &mut ClusterNode, listing: &Listing, status: &RuleStatus) {
    let shown = node
        .namespaces
        .iter()
        .flat_map(|n| &n.copies)
        .filter(|c| c.state != "Deleting")
        .count() as i64;
    node.not_listed = (node.copies - shown).max(0);
    if node.not_listed > 0 {
        node.not_listed_why = Some(match (&node.cluster, &listing.partial) {
            (Some(cluster), _) => format!(
                "copies in sync in RemoteCluster {cluster} are counted by the rule's status, not listed: \
                 mimeo status reads only your kubeconfig's cluster"
            ),
            (None, Some(why)) => why.clone(),
            (None, None) if status.more_problems.is_some() => {
                "copies not in sync beyond those the status names".to_owned()
            }
            (None, None) => "counted by the status but not found by listing (being written now?)".to_owned(),
        });
    }
}

fn cluster_node(c: &ClusterCopies) -> ClusterNode {
    ClusterNode {
        cluster: c.cluster.clone(),
        copies: c.copies,
        synced: c.synced,
        problem: c.problem,
        namespaces: Vec::new(),
        not_listed: 0,
        not_listed_why: None,
    }
}

fn place(c: &CopyStatus) -> Place {
    (c.cluster.clone(), c.namespace.clone(), c.name.clone())
}

fn problem_node(c: &CopyStatus) -> CopyNode {
    CopyNode {
        name: c.name.clone(),
        source: Some(c.source.clone()),
        state: format!("{:?}", c.state),
        since: c.since.clone(),
        why: c.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_warnings_of_the_last_hour_are_shown() {
        let now: k8s_openapi::jiff::Timestamp = "2026-12-07T12:00:00Z".parse().unwrap();
        let event = |type_: &str, reason: &str, minutes_ago: i64| k8s_openapi::api::events::v1::Event {
            type_: Some(type_.into()),
            reason: Some(reason.into()),
            note: Some(format!("{reason} happened")),
            deprecated_last_timestamp: Some(Time(
                now - k8s_openapi::jiff::SignedDuration::from_mins(minutes_ago),
            )),
            ..Default::default()
        };
        let mut events = vec![
            event("Normal", "Updated", 1),
            event("Warning", "Old", 90),
            event("Warning", "NotAccepted", 5),
        ];
        for i in 0..6 {
            events.push(event("Warning", &format!("Conflict{i}"), 10 + i));
        }
        let shown = recent_warnings(&events, now);
        let reasons: Vec<&str> = shown.iter().map(|w| w.reason.as_str()).collect();
        assert_eq!(
            reasons,
            ["NotAccepted", "Conflict0", "Conflict1", "Conflict2", "Conflict3"]
        );
        assert_eq!(shown[0].count, 1);
    }
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    fn at(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    fn problem(cluster: Option<&str>, ns: &str, state: CopyState, why: &str) -> CopyStatus {
        CopyStatus {
            source: SourceRef {
                namespace: Some("team-a".into()),
                name: "creds".into(),
            },
            cluster: cluster.map(str::to_owned),
            namespace: Some(ns.into()),
            name: "creds".into(),
            state,
            hash: None,
            message: Some(why.into()),
            since: Some(at(100)),
        }
    }

    fn found(ns: &str, name: &str) -> FoundCopy {
        FoundCopy {
            namespace: Some(ns.into()),
            name: name.into(),
            source: None,
            written: Some(at(50)),
            deleting: false,
        }
    }

    fn status() -> RuleStatus {
        RuleStatus {
            observed_generation: Some(2),
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: "Conflict".into(),
                message: "creds in b: not mimeo's".into(),
                last_transition_time: at(90),
                observed_generation: Some(2),
            }],
            copies: Some("2/5".into()),
            counts: [
                ("Synced", 2),
                ("Conflict", 1),
                ("NotAccepted", 1),
                ("Unreachable", 1),
            ]
            .map(|(s, n)| (s.to_owned(), n))
            .into(),
            clusters: vec![
                ClusterCopies {
                    cluster: None,
                    copies: 4,
                    synced: 2,
                    problem: None,
                },
                ClusterCopies {
                    cluster: Some("east".into()),
                    copies: 1,
                    synced: 0,
                    problem: Some(CopyState::Unreachable),
                },
            ],
            problems: vec![
                problem(None, "b", CopyState::Conflict, "not mimeo's"),
                problem(None, "c", CopyState::NotAccepted, "no consent"),
                problem(Some("east"), "d", CopyState::Unreachable, "connection refused"),
            ],
            ..Default::default()
        }
    }

    fn facts(status: &RuleStatus) -> RuleFacts<'_> {
        RuleFacts {
            kind: "SyncRule",
            namespace: Some("team-a"),
            name: "creds",
            generation: Some(2),
            source: "Secret team-a/creds".into(),
            status: Some(status),
        }
    }

    #[test]
    fn problems_and_listed_copies_land_under_their_cluster_and_namespace() {
        let status = status();
        let listing = Listing {
            found: vec![found("team-a", "creds-copy"), found("x", "creds")],
            partial: None,
        };
        let tree = build(&facts(&status), &listing);
        let local = &tree.clusters[0];
        assert_eq!(local.cluster, None);
        let shown: Vec<(Option<&str>, &str, &str)> = local
            .namespaces
            .iter()
            .flat_map(|n| {
                n.copies
                    .iter()
                    .map(move |c| (n.namespace.as_deref(), c.name.as_str(), c.state.as_str()))
            })
            .collect();
        assert_eq!(
            shown,
            [
                (Some("b"), "creds", "Conflict"),
                (Some("c"), "creds", "NotAccepted"),
                (Some("team-a"), "creds-copy", "Synced"),
                (Some("x"), "creds", "Synced"),
            ]
        );
        assert_eq!(local.not_listed, 0);
        let east = &tree.clusters[1];
        assert_eq!(east.problem, Some(CopyState::Unreachable));
        assert_eq!(
            east.namespaces[0].copies[0].why.as_deref(),
            Some("connection refused")
        );
        assert_eq!(east.namespaces[0].copies[0].since, Some(at(100)));
        assert!(tree.ready.as_ref().unwrap().current);
        assert!(tree.notes.is_empty());
    }

    #[test]
    fn what_is_counted_but_not_listed_is_said_with_why() {
        let status = status();
        let listing = Listing {
            found: vec![found("team-a", "creds-copy")],
            partial: Some("you may not list Secrets in: x".into()),
        };
        let tree = build(&facts(&status), &listing);
        assert_eq!(tree.clusters[0].not_listed, 1);
        assert_eq!(
            tree.clusters[0].not_listed_why.as_deref(),
            Some("you may not list Secrets in: x")
        );
        assert_eq!(
            tree.clusters[1].not_listed, 0,
            "the one copy there is a named problem"
        );
    }

    #[test]
    fn a_copy_being_deleted_is_not_synced() {
        let status = status();
        let mut gone = found("x", "creds");
        gone.deleting = true;
        let tree = build(
            &facts(&status),
            &Listing {
                found: vec![found("team-a", "creds-copy"), gone],
                partial: None,
            },
        );
        let x = tree.clusters[0]
            .namespaces
            .iter()
            .find(|n| n.namespace.as_deref() == Some("x"))
            .unwrap();
        assert_eq!(x.copies[0].state, "Deleting");
        assert_eq!(
            tree.clusters[0].not_listed, 1,
            "the copy being deleted does not stand for a counted one"
        );
    }

    #[test]
    fn a_rule_not_yet_looked_at_or_behind_its_spec_says_so() {
        let empty = RuleStatus::default();
        let none = RuleFacts {
            status: None,
            ..facts(&empty)
        };
        let tree = build(&none, &Listing::default());
        assert!(tree.ready.is_none());
        assert!(tree.notes[0].contains("no status yet"), "{:?}", tree.notes);

        let status = status();
        let behind = RuleFacts {
            generation: Some(3),
            ..facts(&status)
        };
        let tree = build(&behind, &Listing::default());
        assert!(!tree.ready.unwrap().current);
        assert!(tree.notes[0].contains("earlier spec"));
    }
}
