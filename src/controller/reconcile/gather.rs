//! The gather step: everything a rule's copies are decided from, read from the fleet, the caches
//! and (for kinds and clusters not known yet) the apiservers. It writes nothing: a rule that
//! cannot go on comes back as a [`Refusal`](super::stop::Refusal), which the record step reports.

use super::holders;
use super::inputs::{self, ReadInputs};
use super::orders;
use super::requests::{RETRY_UNREACHABLE, failure};
use super::stop::{Next, Refusal, Stop, refused};
use crate::api::{CopyState, CopyStatus, RuleSpec, RuleStatus, Target};
use crate::controller::context::Context;
use crate::controller::error::Error;
use crate::controller::fleet::{ClusterHandle, ClusterProblem};
use crate::controller::plugins::config_maps::config_maps_of;
use crate::controller::plugins::files::files_of;
use crate::controller::plugins::{ChainProblem, ResolvedChain};
use crate::controller::rule::RuleResource;
use crate::controller::rule_status::{KnownCopies, Readiness, known_copies};
use crate::controller::watches::{Interest, NamespaceInterest, SourceInterest, SourceWatchKey};
use crate::locks::lock;
use crate::sync::consent::shares;
use crate::sync::desired::CopyTarget;
use crate::sync::kinds::{AllowedKind, KindRef};
use crate::sync::live::LiveCopy;
use crate::sync::next_to::Holders;
use crate::sync::object_selector::selector;
use crate::sync::ownership::{PREFIX, RuleKey, RuleKind};
use crate::sync::plan::PlaceKey;
use crate::sync::plan::{ClusterPlaces, LiveCopies, Source, Unusable, Wants};
use crate::sync::registrations::{self, Registration, Role};
use crate::sync::rule_problem::RuleProblem;
use crate::sync::scope::Scope;
use crate::sync::targets::{placements, targets_by_cluster};
use crate::sync::{scope, validate};
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::core::{ApiResource, Selector, SelectorExt};
use kube::runtime::reflector::Store;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What a reconcile decides from: the rule, its chain, its clusters, sources and namespaces, and
/// the caches that hold its live copies.
pub(crate) struct Gathered<'r> {
    pub key: RuleKey,
    pub spec: &'r RuleSpec,
    pub previous: Option<&'r RuleStatus>,
    pub generation: Option<i64>,
    pub chain: ResolvedChain,
    pub source_cluster: Option<String>,
    pub source_side: ClusterHandle,
    /// The copied kind as the source's cluster serves it, and whether it is namespaced.
    pub resource: ApiResource,
    pub namespaced: bool,
    pub source_ns: String,
    /// Every cluster the rule writes copies to or still holds copies in.
    pub clusters: Vec<TargetCluster>,
    /// The usable ones, with the places their namespaces offer (`places`, in the same order).
    pub reachable: Vec<Reachable>,
    pub places: Vec<ClusterPlaces>,
    /// The sources the rule may read, sorted by name.
    pub sources: Vec<Source>,
    /// Sources in another cluster whose owner does not share them with the rule.
    pub unshared: usize,
    /// The copies the rule is known to hold before the caches are asked (`KnownCopies`).
    pub previous_copies: Vec<CopyStatus>,
    /// Places of copies made before seals, trusted as they are.
    pub unsealed: BTreeSet<PlaceKey>,
    /// The rule's inputs, read from the source's cluster, for the plugins.
    pub inputs: ReadInputs,
    /// Why a `nextTo` target's namespaces cannot be found now (the other targets go on).
    pub next_to_problem: Option<RuleProblem>,
    /// The `RemoteCluster`s `forEach` targets read their objects in: used, though nothing is
    /// written there.
    pub order_clusters: BTreeSet<String>,
}

/// One cluster a rule writes copies to, or still holds copies in, and whether it can be used now.
pub(crate) struct TargetCluster {
    pub name: Option<String>,
    pub targets: Vec<Target>,
    /// The rule has targets here or copies it made earlier.
    pub holds: bool,
    /// The cluster and the copied kind's resource there, or why they cannot be used now.
    pub usable: Result<(ClusterHandle, ApiResource), ClusterProblem>,
}

/// A usable target cluster.
pub(crate) struct Reachable {
    pub name: Option<String>,
    pub handle: ClusterHandle,
    pub resource: ApiResource,
}

impl Gathered<'_> {
    /// What the pure placement of copies needs.
    pub fn wants<'a>(&'a self, ctx: &'a Context) -> Wants<'a> {
        let unusable = self
            .clusters
            .iter()
            .filter_map(|c| {
                let problem = c.usable.as_ref().err()?;
                Some(Unusable {
                    name: c.name.clone(),
                    targets: &c.targets,
                    state: problem.state,
                    message: problem.message.clone(),
                })
            })
            .collect();
        Wants {
            rule: &self.key,
            scope: &ctx.scope,
            source_cluster: &self.source_cluster,
            namespaced: self.namespaced,
            sources: &self.sources,
            clusters: &self.places,
            unusable,
            previous: &self.previous_copies,
            unsealed: &self.unsealed,
        }
    }
}

/// The copies caches of the usable clusters, as the decisions see them.
impl LiveCopies for [Reachable] {
    fn cached(&self, cluster: usize, target: &CopyTarget) -> Option<Arc<LiveCopy>> {
        let cluster = &self[cluster];
        cluster
            .handle
            .watches
            .cached_copy(&cluster.resource, target.namespace.as_deref(), &target.name)
    }
}

/// Gathers what the rule's copies are decided from, declaring what the rule watches in each
/// cluster on the way.
pub(crate) async fn gather<'r, R: RuleResource>(rule: &'r R, ctx: &Context) -> Result<Gathered<'r>, Stop> {
    let key = rule.key();
    let spec = rule.rule_spec();
    let previous = rule.rule_status();
    ctx.fleet.wait_ready().await?;
    let kind = checked_kind(ctx, &key, spec, previous)?;
    let chain = resolve_chain(rule, ctx, &key).await?;
    let source_cluster = spec.source.cluster.clone().filter(|c| !c.is_empty());
    let (targets, order_clusters) = orders::targets(ctx, &key, spec, previous).await?;
    let used = order_clusters.iter().chain(&source_cluster).cloned().collect();
    let (by_cluster, known) = choose_clusters(rule, ctx, &key, &targets, used);
    let KnownCopies {
        copies: mut previous_copies,
        clusters: held,
        unsealed,
    } = known;
    let source_side = source_side(ctx, &key, &source_cluster, previous).await?;
    let (resource, namespaced) =
        source_kind(ctx, &key, &kind, &source_side, &source_cluster, previous).await?;
    if let Err(problem) = validate::check_scope(key.kind, spec, &kind, namespaced) {
        ctx.fleet.forget(&key);
        ctx.next_to.forget(&key);
        let ready = Readiness::not_ready(problem.reason, problem.message);
        return Err(refused(previous, ready, Next::AwaitChange));
    }
    // A cluster-scoped kind's sources are in no namespace.
    let source_ns = rule.source_namespace().filter(|_| namespaced).unwrap_or_default();
    let placed_inputs = place_inputs(rule, ctx, &key, &source_side).await?;
    let mut clusters = target_clusters(ctx, &key, &kind, &resource, by_cluster, &held).await;
    one_registration_per_cluster(ctx, &mut clusters, &mut previous_copies);
    let source_interest = source_interest(spec, &resource, &source_ns, &previous_copies);
    let source_selector = source_interest.selector.clone();
    let declared = Declared {
        key: &key,
        source_cluster: &source_cluster,
        source_side: &source_side,
        previous,
    };
    let input_interests = placed_inputs.iter().map(|i| i.interest.clone()).collect();
    let (store, input_stores) = declared
        .declare(&mut clusters, source_interest, input_interests)
        .await?;
    let found_inputs = inputs::cached(&placed_inputs, &input_stores);
    let inputs = inputs::read(
        &key,
        &placed_inputs,
        found_inputs,
        source_cluster.as_deref(),
        previous,
    )?;
    let found = sources_in(
        &store,
        &source_ns,
        spec.source.name.as_deref(),
        source_selector.as_ref(),
    );
    source_side
        .watches
        .set_matched(&key, found.iter().map(|o| o.name_any()).collect());
    let (sources, unshared) = shared_sources(ctx, &key, spec, found, &resource, source_cluster.is_some());
    let (holders, next_to_problem) = holders::find(ctx, &key, spec, &previous_copies).await;
    let (reachable, places) = reachable(&clusters, namespaced, &holders);
    Ok(Gathered {
        key,
        spec,
        previous,
        generation: rule.meta().generation,
        chain,
        source_cluster,
        source_side,
        resource,
        namespaced,
        source_ns,
        clusters,
        reachable,
        places,
        sources,
        unshared,
        previous_copies,
        unsealed,
        inputs,
        next_to_problem,
        order_clusters,
    })
}

/// The rule's sources in the source watch's cache: the one named, or those its selector
/// chooses, in `namespace`, by name.
/// What the rule's source watch looks for: the source by name or selector, and the names its
/// copies were last made from (so that a source that went is noticed).
fn source_interest(
    spec: &RuleSpec,
    resource: &ApiResource,
    source_ns: &str,
    previous_copies: &[CopyStatus],
) -> SourceInterest {
    SourceInterest {
        watch: SourceWatchKey::new(resource, source_ns),
        resource: resource.clone(),
        name: spec.source.name.clone(),
        selector: spec.source.selector.as_ref().and_then(|s| selector(s).ok()),
        matched: previous_copies.iter().map(|c| c.source.name.clone()).collect(),
    }
}

/// The sources found, as copies are made from them, and how many were not: another cluster's
/// objects are read only where their owner consents.
fn shared_sources(
    ctx: &Context,
    key: &RuleKey,
    spec: &RuleSpec,
    found: Vec<Arc<DynamicObject>>,
    resource: &ApiResource,
    from_another_cluster: bool,
) -> (Vec<Source>, usize) {
    let (shared, unshared): (Vec<_>, Vec<_>) = found
        .into_iter()
        .partition(|o| shares(key, from_another_cluster, o.annotations()));
    let sources = shared
        .iter()
        .map(|o| {
            Source::new(key, &spec.metadata, spec.secret_type, o, resource)
                .sealed_by(Some(ctx.seal_key.clone()))
        })
        .collect();
    (sources, unshared.len())
}

fn sources_in(
    store: &Store<DynamicObject>,
    namespace: &str,
    name: Option<&str>,
    selector: Option<&Selector>,
) -> Vec<Arc<DynamicObject>> {
    let mut found: Vec<Arc<DynamicObject>> = store
        .state()
        .into_iter()
        .filter(|o| o.namespace().unwrap_or_default() == namespace)
        .filter(|o| match (name, selector) {
            (Some(name), _) => o.name_any() == name,
            (None, Some(sel)) => sel.matches(o.labels()),
            (None, None) => false,
        })
        .collect();
    found.sort_by_key(|o| o.name_any());
    found
}

/// The rule's inputs, each of a kind the source's cluster serves, placed as the scope allows.
async fn place_inputs<R: RuleResource>(
    rule: &R,
    ctx: &Context,
    key: &RuleKey,
    source_side: &ClusterHandle,
) -> Result<Vec<inputs::PlacedInput>, Stop> {
    let spec = rule.rule_spec();
    let mut resolved = Vec::with_capacity(spec.inputs.len());
    for input in &spec.inputs {
        resolved.push(source_side.watches.resolve(&KindRef::of_input(&input.from)).await);
    }
    inputs::place(
        &ctx.scope,
        key,
        spec,
        resolved,
        rule.source_namespace().as_deref(),
        rule.rule_status(),
    )
}

/// The copied kind, if the rule is valid, the installation allows it and its namespaces are
/// within mimeo's reach.
fn checked_kind(
    ctx: &Context,
    key: &RuleKey,
    spec: &RuleSpec,
    previous: Option<&RuleStatus>,
) -> Result<KindRef, Stop> {
    let kinds = ctx.kinds.get();
    rule_problem(key, spec, &kinds.allowed, &kinds.next_to, &ctx.scope).map_err(|problem| {
        ctx.fleet.forget(key);
        ctx.next_to.forget(key);
        let ready = Readiness::not_ready(problem.reason, problem.message);
        refused(previous, ready, Next::AwaitChange)
    })
}

/// The checks a rule passes before anything is read: the copied kind (and the inputs' kinds)
/// allowed, what only a `ClusterSyncRule` may do, and the installation's scope. `mimeo diff`
/// makes the same ones.
pub(crate) fn rule_problem(
    key: &RuleKey,
    spec: &RuleSpec,
    allowed: &[AllowedKind],
    next_to_kinds: &[AllowedKind],
    scope: &Scope,
) -> Result<KindRef, RuleProblem> {
    validate::check(spec, allowed)
        .and_then(|kind| crate::sync::next_to::check_allowed(spec, next_to_kinds).map(|()| kind))
        .and_then(|kind| crate::sync::inputs::check_kinds(&spec.inputs, allowed).map(|()| kind))
        .and_then(|kind| validate::check_authority(key.kind, spec).map(|()| kind))
        .and_then(|kind| scope::check(scope, spec).map(|()| kind))
}

/// Why a rule's kind cannot be copied from a cluster that does not serve it.
pub(crate) fn kind_not_served(kind: &KindRef, source_cluster: &Option<String>) -> Readiness {
    let in_source_cluster = match source_cluster {
        Some(cluster) => format!(" of RemoteCluster {cluster}"),
        None => String::new(),
    };
    Readiness::not_ready(
        "KindNotServed",
        format!(
            "the cluster{in_source_cluster} does not serve {kind}: no such kind, or its \
             CustomResourceDefinition is not installed; copies follow once it is served"
        ),
    )
}

/// The transform chain: every plugin loaded and its config accepted, or nothing changes.
/// Recorded pins stand while the rule is unchanged since they were recorded.
async fn resolve_chain<R: RuleResource>(
    rule: &R,
    ctx: &Context,
    key: &RuleKey,
) -> Result<ResolvedChain, Stop> {
    let spec = rule.rule_spec();
    let previous = rule.rule_status();
    // A ConfigMap a plugin comes from wakes the rule when it changes (or appears).
    ctx.plugin_config_maps
        .uses(key, config_maps_of(&spec.transforms, key.namespace.as_deref()));
    ctx.plugin_files
        .uses(key, files_of(&spec.transforms, ctx.plugin_dir.as_deref()));
    // What this process last recorded for the rule, else its cached status: the cache may not
    // show the status the last pass wrote yet.
    let uid = rule.meta().uid.clone().unwrap_or_default();
    let written = lock(&ctx.statuses).get(key).and_then(|last| {
        last.pins_of(&uid)
            .map(|(generation, pins)| (generation, pins.to_vec()))
    });
    let (observed, pins) = written.unwrap_or_else(|| {
        (
            previous.and_then(|p| p.observed_generation),
            previous.map(|p| p.plugins.clone()).unwrap_or_default(),
        )
    });
    let spec_changed = observed != rule.meta().generation;
    if spec_changed {
        // A changed rule is a new start for its copies' churn too.
        lock(&ctx.flaps).forget(|(rule, _, _)| rule == key);
    }
    ctx.plugins
        .chain(
            key,
            rule.meta().generation,
            &spec.transforms,
            key.namespace.as_deref(),
            &spec.plugin_pull_secrets,
            &pins,
            spec_changed,
        )
        .await
        .map_err(|problem| chain_refused(problem, previous, spec_changed))
}

/// A chain that cannot be set up: its message may quote the plugin (its refusal of the config, a
/// trap), so the Event names only the reference and the reason. A plugin file, ConfigMap or
/// artifact that appears later is noticed on the next look.
pub(crate) fn chain_refused(
    problem: ChainProblem,
    previous: Option<&RuleStatus>,
    spec_changed: bool,
) -> Stop {
    let note = format!(
        "the transform chain cannot be set up: plugin {}: {}; the message is in the rule's \
         Ready condition",
        problem.reference, problem.reason
    );
    let mut message = problem.to_string();
    if let Some(pin) = &problem.refused {
        let when = pin
            .resolved_at
            .as_ref()
            .map(|t| format!(" at {}", t.0))
            .unwrap_or_default();
        message.push_str(&format!(
            " (the tag resolved to {}{when}; see status.plugins)",
            pin.digest
        ));
    }
    let ready = Readiness::not_ready(problem.reason, message);
    // The status is about to record this generation: pins of tags made for an earlier one must
    // not pass for this one's, or the next look would keep them.
    let mut kept = previous.cloned();
    if spec_changed && let Some(status) = kept.as_mut() {
        status.plugins.retain(|pin| pin.resolved_at.is_none());
    }
    // What the tag resolved to, and that it is refused, replaces the pin it had.
    if let Some(refused) = problem.refused {
        let status = kept.get_or_insert_with(RuleStatus::default);
        status.plugins.retain(|pin| pin.plugin != refused.plugin);
        status.plugins.push(refused);
    }
    Stop::Refused(Box::new(Refusal {
        ready,
        note: Some(note),
        kept,
        next: Next::Backoff,
    }))
}

/// Which clusters: every target's (`targets`, with `forEach` expanded), those `also_used` (the
/// source's, `forEach`'s), and every one that still holds copies (with
/// what is known of those copies). The fleet learns which clusters the rule uses.
fn choose_clusters<R: RuleResource>(
    rule: &R,
    ctx: &Context,
    key: &RuleKey,
    targets: &[Target],
    also_used: BTreeSet<String>,
) -> (BTreeMap<Option<String>, Vec<Target>>, KnownCopies) {
    let spec = rule.rule_spec();
    let mut by_cluster =
        targets_by_cluster(targets, |labels| ctx.fleet.matching_clusters(labels)).unwrap_or_default();
    let uid = rule.meta().uid.clone().unwrap_or_default();
    let known = {
        let last = ctx.statuses.lock().unwrap_or_else(|p| p.into_inner());
        known_copies(rule.rule_status(), last.get(key), &uid)
    };
    for cluster in &known.clusters {
        by_cluster.entry(cluster.clone()).or_default();
    }
    by_cluster.entry(None).or_default();
    let mut remote_names: BTreeSet<String> = by_cluster.keys().flatten().cloned().collect();
    remote_names.extend(also_used);
    let selects_clusters = spec.targets.iter().any(|t| t.cluster_selector.is_some());
    ctx.fleet.uses(key, remote_names, selects_clusters);
    (by_cluster, known)
}

/// The cluster the sources are read from.
async fn source_side(
    ctx: &Context,
    key: &RuleKey,
    source_cluster: &Option<String>,
    previous: Option<&RuleStatus>,
) -> Result<ClusterHandle, Stop> {
    let Some(name) = source_cluster else {
        return Ok(ctx.fleet.local().clone());
    };
    ctx.fleet.cluster(key, name, false).await.map_err(|problem| {
        let reason = match problem.state {
            CopyState::ClusterMissing => "SourceClusterMissing".to_owned(),
            CopyState::NotAccepted => "SourceClusterNotAllowed".to_owned(),
            other => format!("SourceCluster{other:?}"),
        };
        let ready = Readiness::not_ready(
            reason,
            format!(
                "the source cannot be read: {}; copies are left as they are",
                problem.message
            ),
        );
        refused(previous, ready, Next::After(RETRY_UNREACHABLE))
    })
}

/// The kind, as the source's cluster serves it, and whether it is namespaced.
async fn source_kind(
    ctx: &Context,
    key: &RuleKey,
    kind: &KindRef,
    source_side: &ClusterHandle,
    source_cluster: &Option<String>,
    previous: Option<&RuleStatus>,
) -> Result<(ApiResource, bool), Stop> {
    match source_side.watches.resolve(kind).await {
        Ok(Some(found)) => Ok(found),
        Ok(None) => {
            // Registered here, so that the CRD appearing wakes the rule.
            source_side.watches.declare(key, Interest::default()).await?;
            let ready = kind_not_served(kind, source_cluster);
            Err(refused(previous, ready, Next::Backoff))
        }
        Err(e) => {
            if source_cluster.is_none() {
                return Err(Stop::Failed(e.into()));
            }
            let (_, why) = failure(ctx, source_cluster, "looking up the source kind", &e);
            let ready = Readiness::not_ready(
                "SourceClusterUnreachable",
                format!("the source cannot be read: {why}; copies are left as they are"),
            );
            Err(refused(previous, ready, Next::After(RETRY_UNREACHABLE)))
        }
    }
}

/// Each cluster with the rule's targets there, and whether it can be used now.
async fn target_clusters(
    ctx: &Context,
    key: &RuleKey,
    kind: &KindRef,
    resource: &ApiResource,
    by_cluster: BTreeMap<Option<String>, Vec<Target>>,
    held: &BTreeSet<Option<String>>,
) -> Vec<TargetCluster> {
    futures::future::join_all(by_cluster.into_iter().map(|(name, targets)| async {
        let holds = !targets.is_empty() || held.contains(&name);
        let usable = match &name {
            None => Ok(ctx.fleet.local().clone()),
            Some(remote) => ctx.fleet.cluster(key, remote, !targets.is_empty()).await,
        };
        let usable = match usable {
            Ok(handle) if holds => resolve_in(ctx, key, kind, handle, &name, &targets).await,
            Ok(handle) => Ok((handle, resource.clone())),
            Err(problem) => Err(problem),
        };
        TargetCluster {
            name,
            targets,
            holds,
            usable,
        }
    }))
    .await
}

/// Registrations of one physical cluster, as this rule sees them (`sync::registrations`): the
/// targets through a duplicate get no copies, a registration folded into another is dropped, and
/// the copies recorded through either are the used one's, so that none is removed as unwanted
/// through one registration while wanted through the other.
fn one_registration_per_cluster(
    ctx: &Context,
    clusters: &mut Vec<TargetCluster>,
    previous_copies: &mut [CopyStatus],
) {
    let found: Vec<Registration> = clusters
        .iter()
        .filter_map(|c| {
            let name = c.name.clone()?;
            Some(Registration {
                identity: ctx.fleet.identity(&name),
                created: ctx.fleet.created(&name),
                targeted: !c.targets.is_empty(),
                usable: c.usable.is_ok(),
                name,
            })
        })
        .collect();
    let roles = registrations::roles(&found);
    let used_instead = |name: &Option<String>| match name.as_ref().and_then(|n| roles.get(n)) {
        Some(Role::Duplicate { of } | Role::Folded { into: of }) => Some(of.clone()),
        _ => None,
    };
    for copy in previous_copies.iter_mut() {
        if let Some(used) = used_instead(&copy.cluster) {
            copy.cluster = Some(used);
        }
    }
    clusters.retain(|c| {
        !matches!(
            c.name.as_ref().and_then(|n| roles.get(n)),
            Some(Role::Folded { .. })
        )
    });
    for cluster in clusters.iter_mut() {
        let Some(name) = &cluster.name else { continue };
        let problem = match roles.get(name) {
            Some(Role::Duplicate { of }) => ClusterProblem {
                state: CopyState::DuplicateCluster,
                message: registrations::duplicate_message(name, of),
            },
            // Looked at again when that cluster answers (its prober wakes the rule) or after
            // the rule's retry.
            Some(Role::Held { until }) => ClusterProblem {
                state: CopyState::Unreachable,
                message: registrations::held_message(name, until),
            },
            _ => continue,
        };
        cluster.usable = Err(problem);
    }
}

/// The copied kind as a target cluster serves it. A cluster that does not serve it (its CRD is
/// not installed) gets no copies; the rule stays registered there, so that the CRD appearing
/// wakes it.
async fn resolve_in(
    ctx: &Context,
    key: &RuleKey,
    kind: &KindRef,
    handle: ClusterHandle,
    name: &Option<String>,
    targets: &[Target],
) -> Result<(ClusterHandle, ApiResource), ClusterProblem> {
    match handle.watches.resolve(kind).await {
        Ok(Some((resource, _))) => Ok((handle, resource)),
        Ok(None) => {
            let interest = Interest {
                namespaces: namespace_interest(targets),
                ..Default::default()
            };
            let _ = handle.watches.declare(key, interest).await;
            let cluster = match name {
                Some(name) => format!("RemoteCluster {name}"),
                None => "this cluster".to_owned(),
            };
            Err(ClusterProblem {
                state: CopyState::KindNotServed,
                message: format!(
                    "{cluster} does not serve {kind}: install the CustomResourceDefinition of {} \
                     there; the copy is written once it is served",
                    kind.as_allowed()
                ),
            })
        }
        Err(e) => {
            let (state, message) = failure(ctx, name, "looking up the kind", &e);
            Err(ClusterProblem { state, message })
        }
    }
}

fn namespace_interest(targets: &[Target]) -> NamespaceInterest {
    NamespaceInterest {
        names: targets.iter().filter_map(|t| t.namespace.clone()).collect(),
        // A pattern, like a selector, may match namespaces created later; a namespace next to
        // a followed object may come to consent.
        any: targets
            .iter()
            .any(|t| t.namespace_selector.is_some() || t.namespace_pattern.is_some() || t.next_to.is_some()),
    }
}

/// What declaring the rule's watches needs to know of it.
struct Declared<'a> {
    key: &'a RuleKey,
    source_cluster: &'a Option<String>,
    source_side: &'a ClusterHandle,
    previous: Option<&'a RuleStatus>,
}

impl Declared<'_> {
    /// Declares what the rule watches in each cluster and waits for those caches; returns the
    /// cache of its sources. Another cluster's caches that do not fill mark its copies (the
    /// cluster is then unusable); the source's stop the rule.
    async fn declare(
        &self,
        clusters: &mut [TargetCluster],
        source_interest: SourceInterest,
        input_interests: Vec<SourceInterest>,
    ) -> Result<(Store<DynamicObject>, Vec<Store<DynamicObject>>), Stop> {
        let key = self.key;
        let uses_remote_targets = clusters.iter().any(|c| c.name.is_some());
        let mut store = None;
        let mut inputs = Vec::new();
        for cluster in clusters.iter_mut() {
            let Ok((handle, cluster_resource)) = &cluster.usable else {
                continue;
            };
            let is_source = cluster.name == *self.source_cluster;
            let mut namespaces = namespace_interest(&cluster.targets);
            if cluster.name.is_none() && uses_remote_targets && key.kind == RuleKind::SyncRule {
                // Its namespace's labels decide which RemoteClusters it may use.
                namespaces.names.extend(key.namespace.clone());
            }
            let interest = Interest {
                source: is_source.then(|| source_interest.clone()),
                inputs: if is_source {
                    input_interests.clone()
                } else {
                    Vec::new()
                },
                copies: cluster.holds.then(|| cluster_resource.clone()),
                namespaces,
            };
            match handle.watches.declare(key, interest).await {
                Ok(declared) => {
                    if is_source {
                        store = declared.source;
                        inputs = declared.inputs;
                    }
                }
                Err(e) if cluster.name.is_some() && !is_source => {
                    let failure = handle.watches.failure();
                    let state = match failure.as_ref().map(|f| f.reason) {
                        Some("Unauthorized") => CopyState::Unauthorized,
                        _ => CopyState::Unreachable,
                    };
                    let why = failure.map(|f| f.message).unwrap_or_else(|| e.to_string());
                    let name = cluster.name.clone().unwrap_or_default();
                    cluster.usable = Err(ClusterProblem {
                        state,
                        message: format!("RemoteCluster {name}: {why}"),
                    });
                }
                Err(e) if is_source => return Err(self.unreadable(e)),
                Err(e) => return Err(e.into()),
            }
        }
        if store.is_none() {
            // The source lives in a cluster that gets no copies of this rule.
            let interest = Interest {
                source: Some(source_interest),
                inputs: input_interests,
                ..Default::default()
            };
            let declared = self
                .source_side
                .watches
                .declare(key, interest)
                .await
                .map_err(|e| self.unreadable(e))?;
            store = declared.source;
            inputs = declared.inputs;
        }
        let store = store.ok_or_else(|| Stop::Failed(Error::NotReady("no source cache".into())))?;
        Ok((store, inputs))
    }

    /// The source's caches do not fill: in another cluster that is why the sources cannot be
    /// read (its watch does not list); in this one, an error.
    fn unreadable(&self, error: Error) -> Stop {
        if self.source_cluster.is_none() {
            return Stop::Failed(error);
        }
        let failure = self.source_side.watches.failure();
        let reason = match failure.as_ref().map(|f| f.reason) {
            Some("Unauthorized") => "SourceClusterUnauthorized",
            _ => "SourceClusterUnreachable",
        };
        let why = failure.map(|f| f.message).unwrap_or_else(|| error.to_string());
        let ready = Readiness::not_ready(
            reason,
            format!(
                "the source cannot be read in RemoteCluster {}: {why}; copies are left as they are",
                self.source_side.name.as_deref().unwrap_or_default()
            ),
        );
        refused(self.previous, ready, Next::After(RETRY_UNREACHABLE))
    }
}

/// The usable clusters, and the places their namespaces offer the rule's targets.
/// `nextTo` targets are in this cluster only: `holders` are its namespaces.
fn reachable(
    clusters: &[TargetCluster],
    namespaced: bool,
    holders: &Holders,
) -> (Vec<Reachable>, Vec<ClusterPlaces>) {
    let elsewhere = Holders::default();
    clusters
        .iter()
        .filter_map(|c| {
            let (handle, resource) = c.usable.as_ref().ok()?;
            let namespaces = handle.watches.namespaces();
            let holders = if c.name.is_none() { holders } else { &elsewhere };
            let places = placements(&c.targets, &namespaces, holders, namespaced).unwrap_or_default();
            // Consent is all the annotations are for: only mimeo's are kept for the pass.
            let annotations = namespaces
                .into_iter()
                .map(|n| {
                    let ours = n.annotations.into_iter().filter(|(k, _)| k.starts_with(PREFIX));
                    (n.name, ours.collect())
                })
                .collect();
            let reachable = Reachable {
                name: c.name.clone(),
                handle: handle.clone(),
                resource: resource.clone(),
            };
            let places = ClusterPlaces {
                name: c.name.clone(),
                places,
                annotations,
            };
            Some((reachable, places))
        })
        .unzip()
}
