//! Every copy a rule wants, and what to do about each: the decisions in the middle of a
//! reconcile, from plain values. The controller gathers what they need (sources, the places the
//! targets select, what sits there, what the rule owns) and carries out what they decide; nothing
//! here reads or writes a cluster or runs a plugin, so every case is a unit test.
//!
//! A copy goes through [`Plan`] in steps: [`place`] finds every (source, cluster, place) and
//! blocks those that scope, namespaces or consent forbid; the controller creates namespaces and
//! runs the chain ([`Pending::Made`]); [`Plan::decide`] weighs each copy against the object in its
//! place (ownership, the conflict policy, its content), or asks for that object to be read
//! ([`Pending::Read`], then [`Plan::decide_reads`]); after the writes, [`unwanted`] says which copies
//! the rule owns but no longer wants.

use super::consent::{accepts, not_accepted_message};
use super::copy_name::{InvalidName, NameOf, NameTemplate};
use super::decide::{Decision, SKIPPED_FOR_CONFLICT, Write, decide};
use super::desired::{CopyTarget, CopyTemplate, DesiredCopy};
use super::live::LiveCopy;
use super::ownership::{Marked, RuleKey, RuleKind, SOURCE_ANNOTATION, deletion_of};
use super::protected::refused_copy;
use super::scope::Scope;
use super::seal::SealKey;
use super::secret_types::missing_for_type;
use super::targets::Placement;
use crate::api::{
    ConflictPolicy, CopyState, CopyStatus, DeletionPolicy, MetadataPolicy, SecretType, SourceRef, Target,
};
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// A copy's place: cluster, namespace and name.
pub type PlaceKey = (Option<String>, Option<String>, String);

/// One source object, as its copies are made from it.
#[derive(Clone, Debug)]
pub struct Source {
    pub reference: SourceRef,
    /// Its resourceVersion, to measure propagation.
    pub version: Option<String>,
    pub template: CopyTemplate,
}

impl Source {
    /// Seals every copy made from this source with `key` ([`super::seal`]).
    pub fn sealed_by(mut self, key: Option<Arc<SealKey>>) -> Self {
        self.template = self.template.sealed_by(key);
        self
    }

    /// The source as a cache holds it. Items of a list carry no apiVersion and kind; the copy
    /// needs both, so they come from the resource. A Secret's copies take the rule's
    /// `secretType` when it has one.
    pub fn new(
        rule: &RuleKey,
        metadata: &MetadataPolicy,
        secret_type: Option<SecretType>,
        object: &DynamicObject,
        resource: &ApiResource,
    ) -> Self {
        let reference = SourceRef {
            namespace: object.namespace(),
            name: object.name_any(),
        };
        let mut json = serde_json::to_value(object).unwrap_or_default();
        json["apiVersion"] = json!(resource.api_version);
        json["kind"] = json!(resource.kind);
        if let Some(type_) = secret_type
            && resource.kind == "Secret"
            && resource.group.is_empty()
        {
            json["type"] = json!(type_.as_str());
        }
        let template = CopyTemplate::new(rule, metadata, &json, &reference);
        Source {
            reference,
            version: object.resource_version(),
            template,
        }
    }
}

/// A cluster the rule may write to now: the places its targets select there, and each
/// namespace's annotations (for consent).
#[derive(Clone, Debug, Default)]
pub struct ClusterPlaces {
    pub name: Option<String>,
    pub places: Vec<Placement>,
    pub annotations: HashMap<String, BTreeMap<String, String>>,
}

/// A cluster the rule has targets or copies in but cannot use now, and why.
#[derive(Clone, Debug)]
pub struct Unusable<'a> {
    pub name: Option<String>,
    pub targets: &'a [Target],
    pub state: CopyState,
    pub message: String,
}

/// What [`place`] needs.
pub struct Wants<'a> {
    pub rule: &'a RuleKey,
    pub scope: &'a Scope,
    pub source_cluster: &'a Option<String>,
    /// Whether the copied kind is namespaced.
    pub namespaced: bool,
    pub sources: &'a [Source],
    /// The usable clusters; a copy names its cluster by its index here.
    pub clusters: &'a [ClusterPlaces],
    pub unusable: Vec<Unusable<'a>>,
    /// The copies the rule is known to hold (`controller::rule_status::KnownCopies`).
    pub previous: &'a [CopyStatus],
    /// Places whose copy was made before seals: its marks are trusted as they are.
    pub unsealed: &'a BTreeSet<PlaceKey>,
}

/// What a copy still waits for.
#[derive(Debug, Default)]
pub enum Pending {
    /// Nothing: its state and decision are what the plan says of it.
    #[default]
    Nothing,
    /// To be made from its source; its namespace is to be created first if `create_namespace`.
    Make,
    /// What the transform chain made of it.
    Made(Made),
    /// The copy as it should be; no copy is cached in its place, so what is there must be read.
    Read(DesiredCopy),
    /// The copy as it should be, to be written: a desired copy is kept only while it is to be
    /// written (or its place read), since with thousands of copies in sync, holding them all
    /// would double the memory a reconcile needs.
    Write(DesiredCopy),
}

/// What the transform chain made of one copy.
#[derive(Debug)]
pub enum Made {
    /// Write this object (shared with the memory of chain outputs), with its digest.
    Write { object: Arc<Value>, hash: String },
    /// A plugin said not to write the copy.
    Skip { plugin: String, reason: String },
    /// A plugin failed: `message` may quote it (status only), `summary` does not (Events).
    Failed { message: String, summary: String },
}

/// One copy the rule wants, and what became of it.
#[derive(Debug)]
pub struct PlannedCopy {
    pub target: CopyTarget,
    pub source: SourceRef,
    /// The source's resourceVersion, to measure propagation.
    pub source_version: Option<String>,
    pub state: CopyState,
    pub message: Option<String>,
    /// The digest of the copy as it should be, once it was made.
    pub hash: Option<String>,
    /// The object in the copy's place, shared with the copies cache; kept only for a write.
    pub live: Option<Arc<LiveCopy>>,
    pub decision: Option<Decision>,
    /// Whatever copy is there now stays (a plugin failed: nothing is lost).
    pub keeps_previous: bool,
    /// What an Event may say about the copy when `message` quotes a plugin: plugin text goes
    /// into the rule's status and the log only, never into Events, which more people may read.
    pub event_note: Option<String>,
    /// Whether `Adopt`/`Overwrite` apply in the copy's place, for deciding again after a race.
    pub may_take_over: bool,
    /// Whether the copy here was made before seals (the deprecated `status.targets` lists it):
    /// its marks are then trusted as they are.
    pub recorded: bool,
    /// Its source and usable cluster, as indexes into [`Wants`]; `None` for a copy blocked
    /// before it could be made.
    pub from: Option<(usize, usize)>,
    /// Its namespace does not exist and the target asks for it to be created.
    pub create_namespace: bool,
    pub pending: Pending,
}

impl PlannedCopy {
    /// A copy that cannot be made, and why.
    pub fn blocked(target: CopyTarget, source: SourceRef, state: CopyState, message: String) -> Self {
        PlannedCopy {
            target,
            source,
            source_version: None,
            state,
            message: Some(message),
            hash: None,
            live: None,
            decision: None,
            keeps_previous: false,
            event_note: None,
            may_take_over: false,
            recorded: false,
            from: None,
            create_namespace: false,
            pending: Pending::Nothing,
        }
    }

    /// Blocks a copy that was placed, now that something stands in its way.
    pub fn block(&mut self, state: CopyState, message: String) {
        self.state = state;
        self.message = Some(message);
        self.pending = Pending::Nothing;
    }

    /// Decides about the copy given what is in its place, keeping the desired copy and the live
    /// object only if they are to be written.
    fn decide(
        &mut self,
        rule: &RuleKey,
        desired: DesiredCopy,
        live: Option<Arc<LiveCopy>>,
        conflict: ConflictPolicy,
    ) {
        let decision = decide(
            rule,
            &desired,
            live.as_deref(),
            conflict,
            self.may_take_over,
            self.recorded,
        );
        if matches!(decision, Decision::Write(_) | Decision::Behind { .. }) {
            self.live = live;
            self.pending = Pending::Write(desired);
        }
        self.decision = Some(decision);
    }

    /// Whether the rule means to hold a copy here (so an owned copy here is not removed).
    pub fn holds_copy(&self) -> bool {
        self.keeps_previous
            || matches!(
                self.decision,
                Some(Decision::InSync | Decision::Write(_) | Decision::Behind { .. })
            )
            || (self.state == CopyState::Failed && self.decision.is_none() && self.hash.is_some())
    }

    pub fn place(&self) -> PlaceKey {
        (
            self.target.cluster.clone(),
            self.target.namespace.clone(),
            self.target.name.clone(),
        )
    }
}

/// Every copy of a rule, in the order they were found.
#[derive(Debug, Default)]
pub struct Plan {
    pub copies: Vec<PlannedCopy>,
}

/// What a read of a copy's place found: the object there, or the state and message of a read
/// that failed.
pub type Read = Result<Option<Arc<LiveCopy>>, (CopyState, String)>;

/// A write the plan decided on, for the controller to carry out.
#[derive(Debug)]
pub struct PlannedWrite {
    /// The copy's index in the plan.
    pub index: usize,
    /// Its usable cluster's index.
    pub cluster: usize,
    pub how: Write,
    pub desired: DesiredCopy,
    pub live: Option<Arc<LiveCopy>>,
    pub may_take_over: bool,
}

/// Every copy the rule wants: one per (source, usable cluster, place), each placed to be made or
/// blocked with the reason; then the copies in clusters that cannot be used now, kept as they
/// are and marked with the reason.
pub fn place(wants: &Wants) -> Plan {
    let mut taken = BTreeSet::new();
    let mut copies = Vec::new();
    for (s, source) in wants.sources.iter().enumerate() {
        for (c, cluster) in wants.clusters.iter().enumerate() {
            for place in &cluster.places {
                let mut copy = place_one(wants, (s, source), (c, cluster), place, &mut taken);
                if let Some(copy) = &mut copy {
                    copy.recorded = wants.unsealed.contains(&copy.place());
                }
                copies.extend(copy);
            }
        }
    }
    for cluster in &wants.unusable {
        copies.extend(kept_in(wants, cluster, &mut taken));
    }
    Plan { copies }
}

/// Whether a copy in this state is there (or may be): the inventory's copies the rule owns.
fn holds_a_copy(state: CopyState) -> bool {
    matches!(
        state,
        CopyState::Synced
            | CopyState::Failed
            | CopyState::PluginFailed
            | CopyState::Unreachable
            | CopyState::Unauthorized
            | CopyState::ClusterMissing
    )
}

/// The name of the copy of `from` at a place: the source's, or the target's `name` with its
/// placeholders filled in.
fn copy_name(
    template: Option<&str>,
    from: &SourceRef,
    cluster: Option<&str>,
    namespace: Option<&str>,
) -> Result<String, InvalidName> {
    let Some(template) = template else {
        return Ok(from.name.clone());
    };
    if !template.contains("{{") {
        // A fixed name, checked with the rule.
        return Ok(template.to_owned());
    }
    NameTemplate::parse(template)?.render(
        template,
        &NameOf {
            source_name: &from.name,
            source_namespace: from.namespace.as_deref(),
            target_namespace: namespace,
            target_cluster: cluster,
        },
    )
}

/// The copy of one source in one place, unless the place is the source itself.
fn place_one(
    wants: &Wants,
    (s, source): (usize, &Source),
    (c, cluster): (usize, &ClusterPlaces),
    place: &Placement,
    taken: &mut BTreeSet<PlaceKey>,
) -> Option<PlannedCopy> {
    let rule = wants.rule;
    let from = &source.reference;
    let blocked = |target, state, why| Some(PlannedCopy::blocked(target, from.clone(), state, why));
    let named = copy_name(
        place.rename.as_deref(),
        from,
        cluster.name.as_deref(),
        place.namespace.as_deref(),
    );
    let target = CopyTarget {
        cluster: cluster.name.clone(),
        namespace: place.namespace.clone(),
        name: match &named {
            Ok(name) => name.clone(),
            Err(InvalidName::Rendered { name, .. }) => name.clone(),
            Err(InvalidName::Template { template, .. }) => template.clone(),
        },
    };
    if let Err(why) = named {
        // Checked with the rule, so only a name too long or with an empty part gets here.
        return blocked(target, CopyState::Refused, why.to_string());
    }
    if cluster.name == *wants.source_cluster && target.namespace == from.namespace && target.name == from.name
    {
        // A selector that matches the source's own namespace: the source is not its own copy.
        return None;
    }
    if !taken.insert((
        target.cluster.clone(),
        target.namespace.clone(),
        target.name.clone(),
    )) {
        let why = "another source of this rule maps to the same copy; give each target its own name".into();
        return blocked(target, CopyState::Conflict, why);
    }
    let namespace = place.namespace.as_deref().unwrap_or_default();
    if let Some(why) = place
        .namespace
        .as_deref()
        .filter(|_| cluster.name.is_none())
        .and_then(|ns| wants.scope.outside(ns))
    {
        return blocked(target, CopyState::NotWatched, why);
    }
    // Only a ClusterSyncRule creates namespaces (the schema says so too: not left to the CRD).
    let create = place.create && rule.kind == RuleKind::ClusterSyncRule;
    if !place.exists && !create {
        let why = format!("namespace {namespace} does not exist or is being deleted");
        return blocked(target, CopyState::NamespaceMissing, why);
    }
    // Consent is a namespace's; a cluster-scoped copy comes from a trusted ClusterSyncRule.
    if place.namespace.is_some()
        && !accepts(
            rule,
            namespace,
            cluster.name.is_none(),
            cluster.annotations.get(namespace),
        )
    {
        return blocked(
            target,
            CopyState::NotAccepted,
            not_accepted_message(rule, namespace),
        );
    }
    let may_take_over = rule.kind == RuleKind::ClusterSyncRule
        || (cluster.name.is_none() && rule.namespace == place.namespace);
    Some(PlannedCopy {
        state: CopyState::Synced,
        message: None,
        may_take_over,
        from: Some((s, c)),
        create_namespace: !place.exists,
        pending: Pending::Make,
        ..PlannedCopy::blocked(target, from.clone(), CopyState::Synced, String::new())
    })
}

/// The copies in a cluster that cannot be used now: those of the inventory, kept as they are,
/// and those the targets name there (selected namespaces are not known without the cluster: one
/// entry stands for them, unless a copy there is already listed).
fn kept_in(wants: &Wants, cluster: &Unusable, taken: &mut BTreeSet<PlaceKey>) -> Vec<PlannedCopy> {
    let mut out = Vec::new();
    for copy in wants.previous.iter().filter(|c| c.cluster == cluster.name) {
        let target = CopyTarget {
            cluster: cluster.name.clone(),
            namespace: copy.namespace.clone(),
            name: copy.name.clone(),
        };
        if taken.insert((
            target.cluster.clone(),
            target.namespace.clone(),
            target.name.clone(),
        )) {
            let mut kept = PlannedCopy::blocked(
                target,
                copy.source.clone(),
                cluster.state,
                cluster.message.clone(),
            );
            kept.keeps_previous = true;
            out.push(kept);
        }
    }
    for source in wants.sources {
        for target in cluster.targets {
            let target = CopyTarget {
                cluster: cluster.name.clone(),
                namespace: target.namespace.clone(),
                name: target
                    .name
                    .clone()
                    .unwrap_or_else(|| source.reference.name.clone()),
            };
            // Named namespaces are known without the cluster; selected ones are not. A
            // cluster-scoped copy needs no namespace.
            if wants.namespaced && target.namespace.is_none() && !out.is_empty() {
                continue;
            }
            if taken.insert((
                target.cluster.clone(),
                target.namespace.clone(),
                target.name.clone(),
            )) {
                let copy = PlannedCopy::blocked(
                    target,
                    source.reference.clone(),
                    cluster.state,
                    cluster.message.clone(),
                );
                out.push(copy);
            }
        }
    }
    out
}

/// The copies of the rule's kind that caches hold, by place: the gather step's view of what sits
/// where, without asking any apiserver.
pub trait LiveCopies {
    /// The copy cached at `target`'s place in usable cluster `cluster`, if there is one.
    fn cached(&self, cluster: usize, target: &CopyTarget) -> Option<Arc<LiveCopy>>;
}

impl Plan {
    /// Decides each copy that was made (or that the chain skipped, or failed on) against what
    /// the cache holds in its place; a copy with nothing cached there waits to be read
    /// ([`Pending::Read`]). `sources` are those [`place`] was given.
    pub fn decide(
        &mut self,
        sources: &[Source],
        rule: &RuleKey,
        conflict: ConflictPolicy,
        live: &(impl LiveCopies + ?Sized),
    ) {
        for copy in &mut self.copies {
            let Some((s, c)) = copy.from else { continue };
            let source = &sources[s];
            let pending = std::mem::take(&mut copy.pending);
            let chained = matches!(pending, Pending::Made(_));
            let desired = match pending {
                Pending::Make => source.template.copy_for(copy.target.clone()),
                Pending::Made(Made::Write { object, hash }) => DesiredCopy {
                    target: copy.target.clone(),
                    source: copy.source.clone(),
                    object: (*object).clone(),
                    hash,
                    source_hash: source.template.source_hash().to_owned(),
                    retired_seals: source.template.retired_seals(&copy.target),
                },
                Pending::Made(Made::Skip { plugin, reason }) => {
                    copy.block(
                        CopyState::Skipped,
                        format!("skipped by plugin {plugin}: {reason}"),
                    );
                    copy.event_note = Some(format!(
                        "skipped by plugin {plugin}; its reason is in the rule's status.problems"
                    ));
                    continue;
                }
                Pending::Made(Made::Failed { message, summary }) => {
                    copy.block(CopyState::PluginFailed, message);
                    copy.event_note = Some(format!(
                        "{summary}; the previous copy stays; the plugin's message is in the rule's \
                         status.problems"
                    ));
                    copy.keeps_previous = true;
                    continue;
                }
                other => {
                    copy.pending = other;
                    continue;
                }
            };
            // Whatever the source or the chain made of it, some objects are never written.
            if let Some(why) = refused_copy(&desired.object) {
                copy.block(CopyState::Refused, why);
                continue;
            }
            // A Secret its type cannot hold is not written; the previous copy stays.
            if let Some(why) = missing_for_type(&desired.object) {
                let (state, note) = if chained {
                    (
                        CopyState::PluginFailed,
                        "the transform chain did not make what the Secret's type needs",
                    )
                } else {
                    (
                        CopyState::Failed,
                        "the copy does not hold what the Secret's type needs",
                    )
                };
                copy.block(state, format!("{why}; the previous copy stays"));
                copy.event_note = Some(format!(
                    "{note}; the previous copy stays; the missing keys are in the rule's status.problems"
                ));
                copy.keeps_previous = true;
                continue;
            }
            copy.source_version = source.version.clone();
            copy.state = CopyState::Synced;
            copy.hash = Some(desired.hash.clone());
            match live.cached(c, &copy.target) {
                Some(there) => copy.decide(rule, desired, Some(there), conflict),
                None => copy.pending = Pending::Read(desired),
            }
        }
    }

    /// The copies whose place must be read before deciding: (index, usable cluster).
    pub fn unread(&self) -> Vec<(usize, usize)> {
        self.copies
            .iter()
            .enumerate()
            .filter(|(_, copy)| matches!(copy.pending, Pending::Read(_)))
            .filter_map(|(i, copy)| Some((i, copy.from?.1)))
            .collect()
    }

    /// Decides the copies whose place no cache holds as if their place were empty, so that they
    /// are created without a read first; but places the inventory `previous` says held an object
    /// in the way (`Conflict`) are still read, so a conflict that stays costs one read a look and
    /// not a refused create and a read. A first copy is written with a create-only request, and an
    /// object there after all comes back from it to be decided about then (once), under the
    /// rule's conflict policy: a read before every first copy bought nothing but a request.
    pub fn assume_unread_empty(&mut self, previous: &[CopyStatus], rule: &RuleKey, conflict: ConflictPolicy) {
        let in_the_way: BTreeSet<PlaceKey> = previous
            .iter()
            .filter(|c| {
                c.state == CopyState::Conflict
                    || (c.state == CopyState::Skipped
                        && c.message
                            .as_deref()
                            .is_some_and(|m| m.starts_with(SKIPPED_FOR_CONFLICT)))
            })
            .map(|c| (c.cluster.clone(), c.namespace.clone(), c.name.clone()))
            .collect();
        let empty: Vec<(usize, Read)> = self
            .unread()
            .into_iter()
            .filter(|(i, _)| !in_the_way.contains(&self.copies[*i].place()))
            .map(|(i, _)| (i, Ok(None)))
            .collect();
        self.decide_reads(empty, rule, conflict);
    }

    /// Decides about the copies whose places were read: for each (index, read), the object
    /// there, or the state and message of a read that failed (whatever is there then stays:
    /// nothing was learnt about it).
    pub fn decide_reads(&mut self, reads: Vec<(usize, Read)>, rule: &RuleKey, conflict: ConflictPolicy) {
        for (index, read) in reads {
            let copy = &mut self.copies[index];
            let Pending::Read(desired) = std::mem::take(&mut copy.pending) else {
                continue;
            };
            match read {
                Ok(live) => copy.decide(rule, desired, live, conflict),
                Err((state, why)) => {
                    copy.state = state;
                    copy.message = Some(why);
                    copy.keeps_previous = true;
                }
            }
        }
    }

    /// Leaves alone the copies to be written that `held` says the flap guard holds (it returns
    /// what their status says).
    pub fn hold_flapping(&mut self, mut held: impl FnMut(&CopyTarget) -> Option<String>) {
        for copy in &mut self.copies {
            if !matches!(copy.decision, Some(Decision::Write(_))) {
                continue;
            }
            if let Some(why) = held(&copy.target) {
                copy.decision = None;
                copy.pending = Pending::Nothing;
                copy.state = CopyState::Flapping;
                copy.message = Some(why);
                copy.keeps_previous = true;
            }
        }
    }

    /// The copies decided [`Decision::Behind`]: each one's index, source, and the source version
    /// it claims to be made from.
    pub fn behind(&self) -> Vec<(usize, SourceRef, String)> {
        self.copies
            .iter()
            .enumerate()
            .filter_map(|(i, copy)| match &copy.decision {
                Some(Decision::Behind { claimed, .. }) => Some((i, copy.source.clone(), claimed.clone())),
                _ => None,
            })
            .collect()
    }

    /// Settles copy `index`, decided [`Decision::Behind`], by its source's version as read now
    /// from the apiserver (`Ok(None)`: the source is gone; `Err`: why it could not be read).
    /// A source at least as new as the copy claims means this replica's cache lags: the copy is
    /// left as it is, and the source's watch wakes the rule when it brings that version. A source
    /// older than the claim means the claim is false (an annotation written by hand, an etcd
    /// restored from a backup): the copy is written as decided, so that no annotation can stop
    /// its repair.
    pub fn settle_behind(&mut self, index: usize, fresh: Result<Option<String>, String>) {
        let copy = &mut self.copies[index];
        let Some(Decision::Behind { write, claimed }) = copy.decision.clone() else {
            return;
        };
        let newer = |version: &str| version.parse::<u64>().ok().zip(claimed.parse::<u64>().ok());
        let why = match fresh {
            Ok(Some(version)) if newer(&version).is_some_and(|(now, claimed)| now < claimed) => {
                copy.decision = Some(Decision::Write(write));
                return;
            }
            Ok(Some(_)) => format!(
                "this copy was made from version {claimed} of its source, newer than the version \
                 {} this replica's cache holds (another replica held the rule until now): it is \
                 left as it is until the cache has that version",
                copy.source_version.as_deref().unwrap_or("?")
            ),
            Ok(None) => format!(
                "this copy was made from version {claimed} of its source, which is gone now: it is \
                 left as it is until this replica's cache sees that"
            ),
            Err(e) => format!(
                "this copy was made from version {claimed} of its source, newer than this replica's \
                 cache holds, and the source could not be read to check it: {e}"
            ),
        };
        copy.decision = None;
        copy.pending = Pending::Nothing;
        copy.live = None;
        copy.keeps_previous = true;
        copy.state = CopyState::Failed;
        copy.message = Some(why);
    }

    /// The writes decided on, each taking its desired copy out of the plan.
    pub fn take_writes(&mut self) -> impl Iterator<Item = PlannedWrite> + '_ {
        self.copies.iter_mut().enumerate().filter_map(|(index, copy)| {
            let (Some(Decision::Write(how)), Pending::Write(_)) = (&copy.decision, &copy.pending) else {
                return None;
            };
            let Pending::Write(desired) = std::mem::take(&mut copy.pending) else {
                return None;
            };
            Some(PlannedWrite {
                index,
                cluster: copy.from?.1,
                how: *how,
                desired,
                live: copy.live.clone(),
                may_take_over: copy.may_take_over,
            })
        })
    }

    /// Gives each copy left alone for a conflict its state and reason: `Conflict`, or `Skipped`
    /// under `conflict: Skip`.
    pub fn settle_conflicts(&mut self) {
        for copy in &mut self.copies {
            let (state, why) = match &copy.decision {
                Some(Decision::Conflict(why)) => (CopyState::Conflict, why),
                Some(Decision::Skip(why)) => (CopyState::Skipped, why),
                _ => continue,
            };
            copy.state = state;
            copy.message = Some(why.clone());
        }
    }

    /// The places where the rule means to hold a copy: no owned copy there is removed.
    pub fn kept(&self) -> BTreeSet<PlaceKey> {
        self.copies
            .iter()
            .filter(|c| c.holds_copy())
            .map(PlannedCopy::place)
            .collect()
    }

    /// The inventory (sorted), with `leftovers` (owned copies not removed), and what Events may
    /// say instead of a copy's message.
    pub fn inventory(self, leftovers: Vec<CopyStatus>) -> (Vec<CopyStatus>, HashMap<CopyTarget, String>) {
        let mut notes = HashMap::new();
        let mut inventory: Vec<CopyStatus> = self
            .copies
            .into_iter()
            .map(|p| {
                if let Some(note) = p.event_note {
                    notes.insert(p.target.clone(), note);
                }
                CopyStatus {
                    hash: match p.state {
                        CopyState::Synced => p.hash,
                        _ => None,
                    },
                    source: p.source,
                    cluster: p.target.cluster,
                    namespace: p.target.namespace,
                    name: p.target.name,
                    state: p.state,
                    message: p.message,
                    since: None,
                }
            })
            .chain(leftovers)
            .collect();
        inventory.sort_by(|a, b| {
            (&a.cluster, &a.namespace, &a.name, &a.source).cmp(&(
                &b.cluster,
                &b.namespace,
                &b.name,
                &b.source,
            ))
        });
        (inventory, notes)
    }
}

/// A copy the rule may own in one cluster, by identity.
#[derive(Clone, Debug, PartialEq)]
pub struct OwnedCopy {
    /// Its resource: the rule's own when that is the copy's, whatever version's watch saw it.
    pub resource: ApiResource,
    pub namespace: Option<String>,
    pub name: String,
    pub source: SourceRef,
    /// The rule's inventory lists it: its marks are trusted (a copy of a mimeo from before seals
    /// has no seal).
    pub recorded: bool,
    /// It says `mimeo.dev/deletion: Orphan` (as far as the cache shows): removing it leaves it.
    pub orphan: bool,
}

/// One resource whatever the version it is served at: a copy's identity is its group, resource
/// (plural), namespace and name. The copies watches are per version, so one object is seen once
/// per version a rule of its kind names (`kyverno.io/v1` and `v2beta1` ClusterPolicies).
pub fn same_resource(a: &ApiResource, b: &ApiResource) -> bool {
    a.group == b.group && a.plural == b.plural
}

/// Every copy the rule may own in one cluster, each once: the `cached` copies recording it (with
/// the resource whose watch saw each), and the `known` copies there in a state that holds one
/// (written by this process, the cache may not show them yet). Those in a place `trusted` names
/// (made before seals) are marked `recorded`. Copies outside `in_scope` (made before mimeo was
/// limited to namespaces) are not among them: mimeo may not touch them now.
pub fn owned(
    cached: Vec<(ApiResource, Arc<LiveCopy>)>,
    known: &[&CopyStatus],
    resource: &ApiResource,
    namespaced: bool,
    trusted: impl Fn(&Option<String>, &str) -> bool,
    in_scope: impl Fn(&Option<String>) -> bool,
) -> Vec<OwnedCopy> {
    type Identity = (String, String, Option<String>, String);
    let mut out: BTreeMap<Identity, (ApiResource, SourceRef, bool)> = BTreeMap::new();
    for (kind, copy) in cached {
        let kind = if same_resource(&kind, resource) {
            resource.clone()
        } else {
            kind
        };
        out.insert(
            (
                kind.group.clone(),
                kind.plural.clone(),
                copy.namespace(),
                copy.name_any(),
            ),
            (kind, source_of(&*copy), keeps_itself(&copy)),
        );
    }
    for copy in known {
        if holds_a_copy(copy.state) && (copy.namespace.is_some() || !namespaced) {
            out.entry((
                resource.group.clone(),
                resource.plural.clone(),
                copy.namespace.clone(),
                copy.name.clone(),
            ))
            .or_insert_with(|| (resource.clone(), copy.source.clone(), false));
        }
    }
    out.into_iter()
        .filter(|((_, _, ns, _), _)| in_scope(ns))
        .map(|((_, _, namespace, name), (kind, source, orphan))| OwnedCopy {
            recorded: same_resource(&kind, resource) && trusted(&namespace, &name),
            resource: kind,
            namespace,
            name,
            source,
            orphan,
        })
        .collect()
}

/// Whether a cached copy says it stays when mimeo removes it (`mimeo.dev/deletion: Orphan`).
fn keeps_itself(copy: &LiveCopy) -> bool {
    deletion_of(copy, DeletionPolicy::Delete) == DeletionPolicy::Orphan
}

/// The copies of `owned` (in `cluster`) the rule no longer wants: not of its resource, or not in
/// a place it `kept`.
pub fn unwanted(
    owned: Vec<OwnedCopy>,
    cluster: &Option<String>,
    resource: &ApiResource,
    kept: &BTreeSet<PlaceKey>,
) -> Vec<OwnedCopy> {
    owned
        .into_iter()
        .filter(|copy| {
            !(same_resource(&copy.resource, resource)
                && kept.contains(&(cluster.clone(), copy.namespace.clone(), copy.name.clone())))
        })
        .collect()
}

/// The source a copy records: "Kind/namespace/name" or "Kind/name", as `desired` writes it.
pub fn source_of(copy: &impl Marked) -> SourceRef {
    let recorded = copy.annotation(SOURCE_ANNOTATION).unwrap_or_default();
    let mut parts = recorded.splitn(3, '/').skip(1);
    match (parts.next(), parts.next()) {
        (Some(ns), Some(name)) => SourceRef {
            namespace: Some(ns.to_owned()),
            name: name.to_owned(),
        },
        (Some(name), None) => SourceRef {
            namespace: None,
            name: name.to_owned(),
        },
        _ => SourceRef {
            namespace: None,
            name: String::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::seal::SEAL_ANNOTATION;
    use k8s_openapi::api::core::v1::Secret;

    fn app_rule() -> RuleKey {
        RuleKey::sync_rule("app", "creds")
    }

    fn fleet_rule() -> RuleKey {
        RuleKey::cluster_sync_rule("fleet")
    }

    fn secrets() -> ApiResource {
        ApiResource::erase::<Secret>(&())
    }

    fn secret(namespace: &str, name: &str, data: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": "7"},
            "type": "Opaque", "data": {"k": data},
        }))
        .unwrap()
    }

    /// A source in namespace `app` holding `data`.
    fn source(rule: &RuleKey, name: &str, data: &str) -> Source {
        Source::new(
            rule,
            &MetadataPolicy::default(),
            None,
            &secret("app", name, data),
            &secrets(),
        )
    }

    fn target(cluster: Option<&str>, namespace: &str, name: &str) -> CopyTarget {
        CopyTarget {
            cluster: cluster.map(str::to_owned),
            namespace: Some(namespace.to_owned()),
            name: name.to_owned(),
        }
    }

    /// The copy `rule` makes of `source` at `target`, as the apiserver returns it.
    fn copy_of(source: &Source, target: CopyTarget) -> Arc<LiveCopy> {
        let mut object = source.template.copy_for(target).object;
        object["metadata"]["resourceVersion"] = json!("9");
        Arc::new(LiveCopy::summed_up(serde_json::from_value(object).unwrap()))
    }

    fn place_in(namespace: &str) -> Placement {
        Placement {
            namespace: Some(namespace.to_owned()),
            rename: None,
            exists: true,
            create: false,
        }
    }

    fn renamed(namespace: &str, name: &str) -> Placement {
        Placement {
            rename: Some(name.to_owned()),
            ..place_in(namespace)
        }
    }

    fn cluster(name: Option<&str>, places: Vec<Placement>) -> ClusterPlaces {
        ClusterPlaces {
            name: name.map(str::to_owned),
            places,
            annotations: HashMap::new(),
        }
    }

    fn accepting(mut cluster: ClusterPlaces, namespace: &str, from: &str) -> ClusterPlaces {
        let annotations = BTreeMap::from([("mimeo.dev/accept-from".to_owned(), from.to_owned())]);
        cluster.annotations.insert(namespace.to_owned(), annotations);
        cluster
    }

    fn recorded(cluster: Option<&str>, namespace: &str, name: &str, state: CopyState) -> CopyStatus {
        CopyStatus {
            source: SourceRef {
                namespace: Some("app".into()),
                name: "creds".into(),
            },
            cluster: cluster.map(str::to_owned),
            namespace: Some(namespace.to_owned()),
            name: name.to_owned(),
            state,
            hash: None,
            message: None,
            since: None,
        }
    }

    /// What sits in each place: the copies caches (what `decide` sees), and objects only a read
    /// of the apiserver finds (an object that is not a copy is not in any copies cache).
    #[derive(Default)]
    struct World {
        cached: BTreeMap<CopyTarget, Arc<LiveCopy>>,
        apiserver: BTreeMap<CopyTarget, Arc<LiveCopy>>,
        /// Places whose read fails.
        unreachable: BTreeSet<CopyTarget>,
    }

    /// The caches by place, each usable cluster known by its index in `clusters`.
    struct Caches<'a>(&'a World, &'a [ClusterPlaces]);

    impl LiveCopies for Caches<'_> {
        fn cached(&self, cluster: usize, target: &CopyTarget) -> Option<Arc<LiveCopy>> {
            assert_eq!(self.1[cluster].name, target.cluster, "the copy's cluster index");
            self.0.cached.get(target).cloned()
        }
    }

    /// The pipeline's decisions, with `made` standing in for the chain where it returns
    /// something for a place.
    fn plan(
        wants: &Wants,
        world: &World,
        conflict: ConflictPolicy,
        made: impl Fn(&CopyTarget) -> Option<Made>,
    ) -> Plan {
        let mut plan = place(wants);
        for copy in &mut plan.copies {
            if matches!(copy.pending, Pending::Make)
                && let Some(made) = made(&copy.target)
            {
                copy.pending = Pending::Made(made);
            }
        }
        plan.decide(
            wants.sources,
            wants.rule,
            conflict,
            &Caches(world, wants.clusters),
        );
        let reads = plan
            .unread()
            .into_iter()
            .map(|(i, _)| {
                let target = &plan.copies[i].target;
                let read = match world.unreachable.contains(target) {
                    true => Err((CopyState::Unreachable, "no answer".to_owned())),
                    false => Ok(world.apiserver.get(target).cloned()),
                };
                (i, read)
            })
            .collect();
        plan.decide_reads(reads, wants.rule, conflict);
        plan.settle_conflicts();
        plan
    }

    fn wants<'a>(
        rule: &'a RuleKey,
        sources: &'a [Source],
        clusters: &'a [ClusterPlaces],
        previous: &'a [CopyStatus],
    ) -> Wants<'a> {
        static CLUSTER: Scope = Scope::Cluster;
        static NONE_UNSEALED: BTreeSet<PlaceKey> = BTreeSet::new();
        Wants {
            rule,
            scope: &CLUSTER,
            source_cluster: &None,
            namespaced: true,
            sources,
            clusters,
            unusable: Vec::new(),
            previous,
            unsealed: &NONE_UNSEALED,
        }
    }

    fn at<'a>(plan: &'a Plan, target: &CopyTarget) -> &'a PlannedCopy {
        plan.copies
            .iter()
            .find(|c| c.target == *target)
            .unwrap_or_else(|| panic!("no copy at {target:?} in {:?}", plan.copies))
    }

    /// Which namespaces' copies the rule owns in one cluster but no longer wants.
    fn removed(plan: &Plan, cluster: Option<&str>, owned: Vec<OwnedCopy>) -> Vec<String> {
        unwanted(owned, &cluster.map(str::to_owned), &secrets(), &plan.kept())
            .into_iter()
            .map(|c| format!("{}/{}", c.namespace.unwrap_or_default(), c.name))
            .collect()
    }

    fn unmanaged(namespace: &str, name: &str) -> Arc<LiveCopy> {
        Arc::new(LiveCopy::summed_up(secret(namespace, name, "dGhlaXJz")))
    }

    /// Sealed sources: a copy sealed for its place is the rule's; the same marks without the
    /// seal, or with a seal moved from another place, are not, unless the rule's inventory lists
    /// the place (a copy of a mimeo from before seals), which is then written to get its seal.
    #[test]
    fn only_a_sealed_copy_is_the_rules() {
        let rule = app_rule();
        let key = Arc::new(SealKey::new(vec![3; 32]).unwrap());
        let sources = [source(&rule, "creds", "djE=").sealed_by(Some(key.clone()))];
        let clusters = [accepting(cluster(None, vec![place_in("t1")]), "t1", "app")];
        let here = target(None, "t1", "creds");
        let sealed = copy_of(&sources[0], here.clone());
        let with_annotations = |f: &dyn Fn(&mut BTreeMap<String, String>)| {
            Arc::new(sealed.with_meta(|m| f(m.annotations.get_or_insert_default())))
        };
        let unsealed = with_annotations(&|a| {
            a.remove(SEAL_ANNOTATION);
        });
        let elsewhere = copy_of(&sources[0], target(None, "t1", "other"));
        let moved_seal = elsewhere.annotation(SEAL_ANNOTATION).unwrap().to_owned();
        let moved = with_annotations(&|a| {
            a.insert(SEAL_ANNOTATION.to_owned(), moved_seal.clone());
        });
        let inventory = [recorded(None, "t1", "creds", CopyState::Synced)];
        // (case, the object there, the copies known, whether the deprecated inventory lists
        // the place, the decision)
        type Case<'a> = (
            &'a str,
            &'a Arc<LiveCopy>,
            &'a [CopyStatus],
            bool,
            Option<Decision>,
        );
        let cases: [Case; 6] = [
            ("sealed", &sealed, &[], false, Some(Decision::InSync)),
            ("unsealed", &unsealed, &[], false, None),
            ("a seal of another place", &moved, &[], false, None),
            (
                "unsealed, in the deprecated inventory",
                &unsealed,
                &inventory,
                true,
                Some(Decision::Write(Write::Apply)),
            ),
            (
                "unsealed, known from this process",
                &unsealed,
                &inventory,
                false,
                None,
            ),
            (
                "sealed, in the deprecated inventory",
                &sealed,
                &inventory,
                true,
                Some(Decision::InSync),
            ),
        ];
        for (case, there, previous, legacy, want) in cases {
            let world = World {
                cached: BTreeMap::from([(here.clone(), there.clone())]),
                ..Default::default()
            };
            let unsealed_places: BTreeSet<PlaceKey> = match legacy {
                true => previous
                    .iter()
                    .map(|c| (c.cluster.clone(), c.namespace.clone(), c.name.clone()))
                    .collect(),
                false => BTreeSet::new(),
            };
            let mut wanted = wants(&rule, &sources, &clusters, previous);
            wanted.unsealed = &unsealed_places;
            let plan = plan(&wanted, &world, ConflictPolicy::Fail, |_| None);
            let copy = at(&plan, &here);
            match want {
                Some(decision) => assert_eq!(copy.decision.as_ref(), Some(&decision), "{case}"),
                None => {
                    assert_eq!(copy.state, CopyState::Conflict, "{case}");
                    assert!(
                        copy.message.as_deref().unwrap().contains("not the seal"),
                        "{case}: {:?}",
                        copy.message
                    );
                }
            }
        }
    }

    #[test]
    fn consent_and_conflict() {
        enum There {
            Nothing,
            NotACopy,
            OtherRulesCopy,
            OwnCopy,
            OwnStaleCopy,
        }
        use ConflictPolicy::{Adopt, Fail, Overwrite};
        use CopyState::{Conflict, NotAccepted, Synced};
        use Decision::InSync;
        use Write::{Apply, Create, Recreate, Replace};
        // A conflict's decision, whatever its words (the message says them).
        let left_alone = || Some(Decision::Conflict(String::new()));
        type Row = (
            &'static str,
            RuleKey,
            Option<&'static str>,
            Placement,
            Option<&'static str>,
            There,
            ConflictPolicy,
            CopyState,
            Option<Decision>,
            &'static str,
        );
        // (case, rule, cluster, place, the namespace's accept-from, what is there, policy,
        //  state, decision, words in the message)
        #[rustfmt::skip]
        let cases: Vec<Row> = vec![
            ("its own namespace needs no consent", app_rule(), None, renamed("app", "other"), None, There::Nothing, Fail, Synced, Some(Decision::Write(Create)), ""),
            ("another namespace without consent", app_rule(), None, place_in("t1"), None, There::Nothing, Fail, NotAccepted, None, "annotate it with mimeo.dev/accept-from=app"),
            ("accept-from names the rule's namespace", app_rule(), None, place_in("t1"), Some("x, app"), There::Nothing, Fail, Synced, Some(Decision::Write(Create)), ""),
            ("accept-from *", app_rule(), None, place_in("t1"), Some("*"), There::Nothing, Fail, Synced, Some(Decision::Write(Create)), ""),
            ("accept-from another namespace", app_rule(), None, place_in("t1"), Some("other"), There::Nothing, Fail, NotAccepted, None, ""),
            ("a namespace of the same name in another cluster is someone else's", app_rule(), Some("b"), place_in("app"), None, There::Nothing, Fail, NotAccepted, None, ""),
            ("which accepts by its annotation", app_rule(), Some("b"), place_in("app"), Some("app"), There::Nothing, Fail, Synced, Some(Decision::Write(Create)), ""),
            ("a ClusterSyncRule needs no consent", fleet_rule(), Some("b"), place_in("t1"), None, There::Nothing, Fail, Synced, Some(Decision::Write(Create)), ""),
            ("consent does not take over an object that is not a copy", app_rule(), None, place_in("t1"), Some("app"), There::NotACopy, Fail, Conflict, left_alone(), "set conflict: Adopt or Overwrite"),
            ("a SyncRule adopts only in its own namespace", app_rule(), None, place_in("t1"), Some("app"), There::NotACopy, Adopt, Conflict, left_alone(), "only in its own namespace"),
            ("nor overwrites elsewhere", app_rule(), None, place_in("t1"), Some("app"), There::NotACopy, Overwrite, Conflict, left_alone(), "only in its own namespace"),
            ("nor in its namespace's namesake in another cluster", app_rule(), Some("b"), renamed("app", "other"), Some("app"), There::NotACopy, Adopt, Conflict, left_alone(), "only in its own namespace"),
            ("a SyncRule adopts in its own namespace", app_rule(), None, renamed("app", "other"), None, There::NotACopy, Adopt, Synced, Some(Decision::Write(Replace)), ""),
            ("and overwrites there", app_rule(), None, renamed("app", "other"), None, There::NotACopy, Overwrite, Synced, Some(Decision::Write(Recreate)), ""),
            ("a ClusterSyncRule adopts anywhere", fleet_rule(), Some("b"), place_in("t1"), None, There::NotACopy, Adopt, Synced, Some(Decision::Write(Replace)), ""),
            ("another rule's copy is never taken", fleet_rule(), None, place_in("t1"), None, There::OtherRulesCopy, Overwrite, Conflict, left_alone(), "a copy made by SyncRule/app/creds"),
            ("its own copy in sync is not written", app_rule(), None, place_in("t1"), Some("app"), There::OwnCopy, Fail, Synced, Some(InSync), ""),
            ("its own stale copy is updated, whatever the policy", app_rule(), None, place_in("t1"), Some("app"), There::OwnStaleCopy, Fail, Synced, Some(Decision::Write(Apply)), ""),
            ("consent withdrawn: its own copy is not written either", app_rule(), None, place_in("t1"), None, There::OwnStaleCopy, Fail, NotAccepted, None, ""),
        ];
        for (case, rule, name, place, accept, there, conflict, state, decision, words) in cases {
            let sources = [source(&rule, "creds", "djI=")];
            let mut places = cluster(name, vec![place.clone()]);
            if let Some(from) = accept {
                places = accepting(places, place.namespace.as_deref().unwrap(), from);
            }
            let clusters = [places];
            let copy_at = target(
                name,
                place.namespace.as_deref().unwrap(),
                place.rename.as_deref().unwrap_or("creds"),
            );
            let mut world = World::default();
            match there {
                There::Nothing => {}
                There::NotACopy => {
                    world
                        .apiserver
                        .insert(copy_at.clone(), unmanaged("t1", &copy_at.name));
                }
                There::OtherRulesCopy => {
                    let other = source(&app_rule(), "creds", "djI=");
                    world
                        .cached
                        .insert(copy_at.clone(), copy_of(&other, copy_at.clone()));
                }
                There::OwnCopy => {
                    world
                        .cached
                        .insert(copy_at.clone(), copy_of(&sources[0], copy_at.clone()));
                }
                There::OwnStaleCopy => {
                    let before = source(&rule, "creds", "djE=");
                    world
                        .cached
                        .insert(copy_at.clone(), copy_of(&before, copy_at.clone()));
                }
            }
            let plan = plan(&wants(&rule, &sources, &clusters, &[]), &world, conflict, |_| {
                None
            });
            assert_eq!(plan.copies.len(), 1, "{case}");
            let copy = &plan.copies[0];
            let decided = match &copy.decision {
                Some(Decision::Conflict(_)) => left_alone(),
                other => other.clone(),
            };
            assert_eq!(
                (copy.state, decided),
                (state, decision.clone()),
                "{case}: {:?}",
                copy.message
            );
            let message = copy.message.clone().unwrap_or_default();
            assert!(message.contains(words), "{case}: {message}");
            // Only a write keeps the copy as it should be; a copy in sync is held without it.
            let writes = matches!(decision, Some(Decision::Write(_)));
            assert_eq!(matches!(copy.pending, Pending::Write(_)), writes, "{case}");
            assert_eq!(
                copy.hash.is_some(),
                state != NotAccepted,
                "{case}: made unless consent stops it"
            );
        }
    }

    #[test]
    fn copies_in_several_clusters_are_owned_each_in_its_own() {
        let rule = fleet_rule();
        let sources = [source(&rule, "creds", "djI=")];
        let clusters = [
            cluster(None, vec![place_in("t1")]),
            cluster(Some("b"), vec![place_in("t1")]),
            cluster(Some("c"), vec![place_in("t1")]),
        ];
        let previous = [
            recorded(None, "t1", "creds", CopyState::Synced),
            recorded(Some("b"), "t1", "creds", CopyState::Synced),
            recorded(Some("d"), "t1", "creds", CopyState::Synced),
        ];
        let mut world = World::default();
        // This cluster holds the copy in sync; b holds the same place's copy of another rule
        // (b's copy of ours went); c holds nothing; d cannot be reached.
        world.cached.insert(
            target(None, "t1", "creds"),
            copy_of(&sources[0], target(None, "t1", "creds")),
        );
        let others = source(&app_rule(), "creds", "djI=");
        world.cached.insert(
            target(Some("b"), "t1", "creds"),
            copy_of(&others, target(Some("b"), "t1", "creds")),
        );
        let no_targets: [Target; 0] = [];
        let mut wants = wants(&rule, &sources, &clusters, &previous);
        wants.unusable.push(Unusable {
            name: Some("d".into()),
            targets: &no_targets,
            state: CopyState::Unreachable,
            message: "RemoteCluster d does not answer".into(),
        });
        let plan = plan(&wants, &world, ConflictPolicy::Overwrite, |_| None);

        let here = at(&plan, &target(None, "t1", "creds"));
        assert_eq!(
            (here.state, &here.decision),
            (CopyState::Synced, &Some(Decision::InSync))
        );
        let b = at(&plan, &target(Some("b"), "t1", "creds"));
        assert_eq!(b.state, CopyState::Conflict);
        assert!(
            b.message
                .as_deref()
                .unwrap()
                .contains("made by SyncRule/app/creds"),
            "{:?}",
            b.message
        );
        let c = at(&plan, &target(Some("c"), "t1", "creds"));
        assert_eq!(c.decision, Some(Decision::Write(Write::Create)));
        let d = at(&plan, &target(Some("d"), "t1", "creds"));
        assert_eq!((d.state, d.keeps_previous), (CopyState::Unreachable, true));
        let kept: Vec<Option<String>> = plan.kept().into_iter().map(|(c, ..)| c).collect();
        assert_eq!(
            kept,
            [None, Some("c".into()), Some("d".into())],
            "b's place holds another rule's copy"
        );
        // In b, ours is no longer wanted where another rule's copy stands (the removal finds
        // that object is not ours, and leaves it).
        let b_recorded = [&previous[1]];
        let owned_in_b = owned(Vec::new(), &b_recorded, &secrets(), true, |_, _| false, |_| true);
        assert_eq!(removed(&plan, Some("b"), owned_in_b), ["t1/creds"]);
        let here_recorded = [&previous[0]];
        let owned_here = owned(
            Vec::new(),
            &here_recorded,
            &secrets(),
            true,
            |_, _| false,
            |_| true,
        );
        assert!(removed(&plan, None, owned_here).is_empty());
    }

    #[test]
    fn clean_up_after_a_selector_change() {
        let rule = app_rule();
        let sources = [source(&rule, "creds", "djI=")];
        let cached_copy = |ns: &str| (secrets(), copy_of(&sources[0], target(None, ns, "creds")));
        type Row = (
            &'static str,
            Vec<&'static str>,
            Vec<&'static str>,
            Vec<(&'static str, CopyState)>,
            Vec<&'static str>,
        );
        // (case, namespaces the selector matches now, copies cached, inventory, removed)
        #[rustfmt::skip]
        let cases: Vec<Row> = vec![
            ("a namespace stops matching", vec!["t1"], vec!["t1", "t2"], vec![("t1", CopyState::Synced), ("t2", CopyState::Synced)], vec!["t2/creds"]),
            ("a copy the cache has not seen yet, but the inventory has", vec!["t1"], vec!["t1"], vec![("t1", CopyState::Synced), ("t3", CopyState::Synced)], vec!["t3/creds"]),
            ("a copy the inventory forgot, but the cache holds", vec!["t1"], vec!["t1", "t4"], vec![("t1", CopyState::Synced)], vec!["t4/creds"]),
            ("a place that never held a copy is not ours", vec!["t1"], vec!["t1"], vec![("t5", CopyState::NotAccepted), ("t6", CopyState::Conflict)], vec![]),
            ("a copy whose write failed may be there", vec![], vec![], vec![("t7", CopyState::Failed)], vec!["t7/creds"]),
            ("nothing matches any more", vec![], vec!["t1", "t2"], vec![("t1", CopyState::Synced)], vec!["t1/creds", "t2/creds"]),
            ("a namespace that starts matching loses nothing", vec!["t1", "t2"], vec!["t1"], vec![("t1", CopyState::Synced)], vec![]),
        ];
        for (case, matching, cached, inventory, expected) in cases {
            let mut places = cluster(None, matching.iter().map(|ns| place_in(ns)).collect());
            for ns in &matching {
                places = accepting(places, ns, "app");
            }
            let clusters = [places];
            let previous: Vec<CopyStatus> = inventory
                .iter()
                .map(|(ns, state)| recorded(None, ns, "creds", *state))
                .collect();
            let mut world = World::default();
            for ns in &cached {
                world.cached.insert(target(None, ns, "creds"), cached_copy(ns).1);
            }
            let plan = plan(
                &wants(&rule, &sources, &clusters, &previous),
                &world,
                ConflictPolicy::Fail,
                |_| None,
            );
            let recorded: Vec<&CopyStatus> = previous.iter().collect();
            let owned = owned(
                cached.iter().map(|ns| cached_copy(ns)).collect(),
                &recorded,
                &secrets(),
                true,
                |_, _| false,
                |_| true,
            );
            assert_eq!(removed(&plan, None, owned), expected, "{case}");
        }
    }

    #[test]
    fn owned_copies_are_known_by_identity_and_scope() {
        let rule = app_rule();
        let source = source(&rule, "creds", "djI=");
        let mut beta = secrets();
        beta.version = "v1beta1".into();
        beta.api_version = "v1beta1".into();
        let config_maps = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let copy = |ns: &str| copy_of(&source, target(None, ns, "creds"));
        let cached = vec![
            (beta.clone(), copy("t1")),
            (secrets(), copy("t1")),
            (config_maps.clone(), copy("t2")),
            (secrets(), copy("outside")),
        ];
        let inventory = [recorded(None, "t1", "creds", CopyState::Synced)];
        let recorded: Vec<&CopyStatus> = inventory.iter().collect();
        let owned = owned(
            cached,
            &recorded,
            &secrets(),
            true,
            |_, _| false,
            |ns| ns.as_deref() != Some("outside"),
        );
        let found: Vec<(String, Option<String>, SourceRef)> = owned
            .iter()
            .map(|c| {
                (
                    c.resource.kind.clone() + "/" + &c.resource.version,
                    c.namespace.clone(),
                    c.source.clone(),
                )
            })
            .collect();
        let from = SourceRef {
            namespace: Some("app".into()),
            name: "creds".into(),
        };
        // One Secret seen through two versions is one copy, under the rule's own version; a copy
        // of another kind (the rule's kind changed) is its own; one outside the scope is not ours.
        assert_eq!(
            found,
            [
                ("ConfigMap/v1".to_owned(), Some("t2".to_owned()), from.clone()),
                ("Secret/v1".to_owned(), Some("t1".to_owned()), from.clone()),
            ]
        );
        // A ConfigMap copy where the rule now keeps a Secret is no longer wanted.
        let clusters = [accepting(
            accepting(cluster(None, vec![place_in("t1"), place_in("t2")]), "t1", "app"),
            "t2",
            "app",
        )];
        let sources = [source.clone()];
        let plan = plan(
            &wants(&rule, &sources, &clusters, &[]),
            &World::default(),
            ConflictPolicy::Fail,
            |_| None,
        );
        assert_eq!(removed(&plan, None, owned), ["t2/creds"]);
    }

    #[test]
    fn what_the_chain_made() {
        let rule = app_rule();
        let sources = [source(&rule, "creds", "djI=")];
        let token = {
            let mut object = sources[0].template.copy_for(target(None, "t1", "creds")).object;
            object["type"] = json!("kubernetes.io/service-account-token");
            object
        };
        let filtered = {
            let mut desired = sources[0].template.copy_for(target(None, "t1", "creds"));
            desired.replace_object(json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": desired.object["metadata"].clone(), "data": {}}));
            desired
        };
        type MakeIt = Box<dyn Fn() -> Made>;
        type Row = (
            &'static str,
            MakeIt,
            CopyState,
            Option<Decision>,
            bool,
            &'static str,
            &'static str,
        );
        // (case, what the chain made, state, decision, holds the copy, message, event note)
        #[rustfmt::skip]
        let cases: Vec<Row> = vec![
            ("a skip leaves no copy: the one there goes", Box::new(|| Made::Skip { plugin: "p".into(), reason: "not for t1".into() }),
                CopyState::Skipped, None, false, "skipped by plugin p: not for t1", "its reason is in the rule's status.problems"),
            ("a failure keeps the copy there", Box::new(|| Made::Failed { message: "plugin p: trapped: secret words".into(), summary: "plugin p: the plugin trapped".into() }),
                CopyState::PluginFailed, None, true, "secret words", "plugin p: the plugin trapped; the previous copy stays"),
            ("what the chain wrote is weighed against the copy there", Box::new({ let f = filtered.clone(); move || Made::Write { object: Arc::new(f.object.clone()), hash: f.hash.clone() } }),
                CopyState::Synced, Some(Decision::Write(Write::Replace)), true, "", ""),
            ("a chain's output of a refused type is never written", Box::new({ let t = token.clone(); move || Made::Write { object: Arc::new(t.clone()), hash: "h".into() } }),
                CopyState::Refused, None, false, "mimeo never writes a Secret of type kubernetes.io/service-account-token", ""),
        ];
        for (case, made, state, decision, holds, words, note) in cases {
            let clusters = [accepting(cluster(None, vec![place_in("t1")]), "t1", "app")];
            let mut world = World::default();
            let there = target(None, "t1", "creds");
            world
                .cached
                .insert(there.clone(), copy_of(&sources[0], there.clone()));
            let plan = plan(
                &wants(&rule, &sources, &clusters, &[]),
                &world,
                ConflictPolicy::Fail,
                |_| Some(made()),
            );
            let copy = at(&plan, &there);
            assert_eq!(
                (copy.state, &copy.decision, copy.holds_copy()),
                (state, &decision, holds),
                "{case}"
            );
            assert!(
                copy.message.as_deref().unwrap_or_default().contains(words),
                "{case}: {:?}",
                copy.message
            );
            let event_note = copy.event_note.clone().unwrap_or_default();
            assert!(event_note.contains(note), "{case}: {event_note}");
            assert!(
                !event_note.contains("not for t1") && !event_note.contains("secret words"),
                "{case}: Events never quote a plugin"
            );
            if decision.is_some() {
                assert_eq!(
                    match &copy.pending {
                        Pending::Write(desired) => Some(&desired.hash),
                        _ => None,
                    },
                    Some(&filtered.hash),
                    "{case}"
                );
            }
            let owned = owned(
                vec![(secrets(), world.cached[&there].clone())],
                &[],
                &secrets(),
                true,
                |_, _| false,
                |_| true,
            );
            let expected: &[&str] = if holds { &[] } else { &["t1/creds"] };
            assert_eq!(removed(&plan, None, owned), expected, "{case}");
        }
    }

    #[test]
    fn places_that_get_no_copy() {
        let scope = Scope::from_namespaces(["app", "t1"]).unwrap();
        let missing = Placement {
            exists: false,
            create: true,
            ..place_in("new")
        };
        type Row = (
            &'static str,
            RuleKey,
            Scope,
            Vec<Placement>,
            Vec<(&'static str, &'static str, CopyState)>,
        );
        // (case, rule, scope, places, (namespace, name, state) of each copy, in order)
        #[rustfmt::skip]
        let cases: Vec<Row> = vec![
            ("the source's own place is not its copy", app_rule(), Scope::Cluster, vec![place_in("app")], vec![]),
            ("outside the namespaces mimeo is limited to", fleet_rule(), scope.clone(), vec![place_in("t1"), place_in("t2")],
                vec![("t1", "creds", CopyState::Synced), ("t2", "creds", CopyState::NotWatched)]),
            ("a namespace that does not exist", fleet_rule(), Scope::Cluster, vec![Placement { create: false, ..missing.clone() }],
                vec![("new", "creds", CopyState::NamespaceMissing)]),
            ("a SyncRule does not create namespaces", app_rule(), Scope::Cluster, vec![missing.clone()],
                vec![("new", "creds", CopyState::NamespaceMissing)]),
            ("two targets naming one copy", fleet_rule(), Scope::Cluster, vec![renamed("t1", "one"), renamed("t1", "one")],
                vec![("t1", "one", CopyState::Synced), ("t1", "one", CopyState::Conflict)]),
        ];
        for (case, rule, scope, places, expected) in cases {
            let sources = [source(&rule, "creds", "djI=")];
            let clusters = [cluster(None, places)];
            let mut wants = wants(&rule, &sources, &clusters, &[]);
            wants.scope = &scope;
            let plan = plan(&wants, &World::default(), ConflictPolicy::Fail, |_| None);
            let found: Vec<(&str, &str, CopyState)> = plan
                .copies
                .iter()
                .map(|c| {
                    (
                        c.target.namespace.as_deref().unwrap(),
                        c.target.name.as_str(),
                        c.state,
                    )
                })
                .collect();
            assert_eq!(found, expected, "{case}");
        }
        // A ClusterSyncRule's copy waits for its namespace to be created, then is made.
        let rule = fleet_rule();
        let sources = [source(&rule, "creds", "djI=")];
        let clusters = [cluster(None, vec![missing])];
        let placed = place(&wants(&rule, &sources, &clusters, &[]));
        let copy = &placed.copies[0];
        assert!(
            copy.create_namespace && matches!(copy.pending, Pending::Make),
            "{copy:?}"
        );
    }

    #[test]
    fn two_sources_mapping_to_one_copy() {
        let rule = fleet_rule();
        let sources = [source(&rule, "a", "djI="), source(&rule, "b", "djI=")];
        let clusters = [cluster(None, vec![renamed("t1", "one")])];
        let plan = plan(
            &wants(&rule, &sources, &clusters, &[]),
            &World::default(),
            ConflictPolicy::Fail,
            |_| None,
        );
        let found: Vec<(&str, CopyState)> = plan
            .copies
            .iter()
            .map(|c| (c.source.name.as_str(), c.state))
            .collect();
        assert_eq!(found, [("a", CopyState::Synced), ("b", CopyState::Conflict)]);
        assert!(
            plan.copies[1]
                .message
                .as_deref()
                .unwrap()
                .contains("give each target its own name")
        );
    }

    #[test]
    fn clusters_that_cannot_be_used_keep_their_copies() {
        let rule = fleet_rule();
        let sources = [source(&rule, "creds", "djI=")];
        let named = Target {
            namespace: Some("t1".into()),
            ..Default::default()
        };
        let selecting = Target {
            namespace_selector: Some(Default::default()),
            ..Default::default()
        };
        type Row = (
            &'static str,
            Vec<Target>,
            Vec<&'static str>,
            Vec<(Option<&'static str>, bool)>,
        );
        // (case, targets there, inventory there, copies listed there: namespace, kept as it is)
        #[rustfmt::skip]
        let cases: Vec<Row> = vec![
            ("copies recorded there stay, and the named target is listed", vec![named.clone()], vec!["t2"],
                vec![(Some("t2"), true), (Some("t1"), false)]),
            ("a selector's namespaces are unknown: one entry stands for them", vec![selecting.clone()], vec![],
                vec![(None, false)]),
            ("unless a copy there is listed", vec![named, selecting], vec![],
                vec![(Some("t1"), false)]),
        ];
        for (case, targets, inventory, expected) in cases {
            let previous: Vec<CopyStatus> = inventory
                .iter()
                .map(|ns| recorded(Some("b"), ns, "creds", CopyState::Synced))
                .collect();
            let mut wants = wants(&rule, &sources, &[], &previous);
            wants.unusable.push(Unusable {
                name: Some("b".into()),
                targets: &targets,
                state: CopyState::Unauthorized,
                message: "RemoteCluster b: forbidden".into(),
            });
            let plan = plan(&wants, &World::default(), ConflictPolicy::Fail, |_| None);
            let found: Vec<(Option<&str>, bool)> = plan
                .copies
                .iter()
                .map(|c| (c.target.namespace.as_deref(), c.keeps_previous))
                .collect();
            assert_eq!(found, expected, "{case}");
            assert!(
                plan.copies.iter().all(|c| c.state == CopyState::Unauthorized),
                "{case}"
            );
        }
    }

    #[test]
    fn reads_and_the_flap_guard() {
        let rule = app_rule();
        let sources = [source(&rule, "creds", "djI=")];
        let clusters = [accepting(
            accepting(
                cluster(Some("b"), vec![place_in("t1"), place_in("t2")]),
                "t1",
                "app",
            ),
            "t2",
            "app",
        )];
        let mut world = World::default();
        world.unreachable.insert(target(Some("b"), "t2", "creds"));
        let mut plan = plan(
            &wants(&rule, &sources, &clusters, &[]),
            &world,
            ConflictPolicy::Fail,
            |_| None,
        );
        // Nothing there: created. A read that failed: whatever is there stays.
        let t1 = at(&plan, &target(Some("b"), "t1", "creds"));
        assert_eq!(t1.decision, Some(Decision::Write(Write::Create)));
        let t2 = at(&plan, &target(Some("b"), "t2", "creds"));
        assert_eq!(
            (t2.state, &t2.decision, t2.holds_copy()),
            (CopyState::Unreachable, &None, true)
        );
        // The flap guard holds t1: not written, and kept.
        plan.hold_flapping(|t| (t.namespace.as_deref() == Some("t1")).then(|| "held".to_owned()));
        assert_eq!(plan.take_writes().count(), 0);
        let t1 = at(&plan, &target(Some("b"), "t1", "creds"));
        assert_eq!((t1.state, t1.holds_copy()), (CopyState::Flapping, true));
    }

    #[test]
    fn empty_places_are_created_without_a_read_but_one_that_held_a_conflict_is_read() {
        let rule = app_rule();
        let sources = [source(&rule, "creds", "djI=")];
        let mut clusters = [cluster(
            None,
            vec![place_in("t1"), place_in("t2"), place_in("t3")],
        )];
        for ns in ["t1", "t2", "t3"] {
            clusters[0] = accepting(clusters[0].clone(), ns, "app");
        }
        let mut world = World::default();
        let t3 = target(None, "t3", "creds");
        world.cached.insert(t3.clone(), copy_of(&sources[0], t3.clone()));
        let previous = [recorded(None, "t2", "creds", CopyState::Conflict)];
        let wants = wants(&rule, &sources, &clusters, &previous);
        let mut plan = place(&wants);
        plan.decide(&sources, &rule, ConflictPolicy::Fail, &Caches(&world, &clusters));
        assert_eq!(plan.unread().len(), 2, "t1 and t2: no copy cached there");
        plan.assume_unread_empty(&previous, &rule, ConflictPolicy::Fail);
        let unread: Vec<&CopyTarget> = plan
            .unread()
            .iter()
            .map(|(i, _)| &plan.copies[*i].target)
            .collect();
        assert_eq!(
            unread,
            [&target(None, "t2", "creds")],
            "only where an object was in the way"
        );
        let t1 = at(&plan, &target(None, "t1", "creds"));
        assert_eq!(t1.decision, Some(Decision::Write(Write::Create)));
        assert!(t1.live.is_none());
        assert_eq!(at(&plan, &t3).decision, Some(Decision::InSync));
    }

    #[test]
    fn the_inventory_is_sorted_and_hashes_only_copies_in_sync() {
        let rule = fleet_rule();
        let sources = [source(&rule, "creds", "djI=")];
        let clusters = [cluster(None, vec![place_in("t2"), place_in("t1")])];
        let mut world = World::default();
        world
            .apiserver
            .insert(target(None, "t2", "creds"), unmanaged("t2", "creds"));
        let plan = plan(
            &wants(&rule, &sources, &clusters, &[]),
            &world,
            ConflictPolicy::Fail,
            |_| None,
        );
        let leftover = recorded(None, "t0", "creds", CopyState::Flapping);
        let (inventory, _) = plan.inventory(vec![leftover]);
        let found: Vec<(&str, CopyState, bool)> = inventory
            .iter()
            .map(|c| (c.namespace.as_deref().unwrap(), c.state, c.hash.is_some()))
            .collect();
        assert_eq!(
            found,
            [
                ("t0", CopyState::Flapping, false),
                ("t1", CopyState::Synced, true),
                ("t2", CopyState::Conflict, false)
            ]
        );
    }

    #[test]
    fn a_copy_names_its_source() {
        let copy = |annotation: &str| -> DynamicObject {
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "c", "annotations": {"mimeo.dev/source": annotation}}}))
            .unwrap()
        };
        let named = |namespace: Option<&str>, name: &str| SourceRef {
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        };
        assert_eq!(
            source_of(&copy("Secret/app/creds").metadata),
            named(Some("app"), "creds")
        );
        assert_eq!(source_of(&copy("ClusterPolicy/p").metadata), named(None, "p"));
        assert_eq!(source_of(&copy("").metadata), named(None, ""));
    }
}
