//! Reconciling one rule: gather (caches) -> decide (`sync`, pure) -> write -> status and events.

use super::Context;
use super::chain_outputs::{Remembered, chain_input};
use super::error::{Error, short_message};
use super::fleet::{ClusterHandle, ClusterProblem};
use super::plugin_config_maps::config_maps_of;
use super::plugin_files::files_of;
use super::plugins::Chain;
use super::rule::RuleResource;
use super::status::{
    LastWritten, Readiness, bounded, known_copies, needs_write, plugins_not_refreshed, summarize, with_ready,
};
use super::watches::{Interest, NamespaceInterest, SourceInterest, SourceWatchKey};
use super::write;
use crate::api::{ConflictPolicy, CopyState, CopyStatus, RuleSpec, RuleStatus, SourceRef, Target};
use crate::clusters;
use crate::error_text::with_causes;
use crate::locks::lock;
use crate::plugin::{ChainError, ChainOutcome, TransformContext};
use crate::sync::consent::{accepts, not_accepted_message, not_shared_message, shares};
use crate::sync::desired::{CopyTarget, CopyTemplate, DesiredCopy};
use crate::sync::flap_guard::Churn;
use crate::sync::hash::digest;
use crate::sync::kinds::KindRef;
use crate::sync::ownership::{FIELD_MANAGER, FINALIZER, HASH_ANNOTATION, Owner, RuleKey, RuleKind, owner_of};
use crate::sync::plan::{Decision, Write, decide};
use crate::sync::protected::refused_copy;
use crate::sync::scope::{self, Scope};
use crate::sync::targets::{Placement, placements, selector, targets_by_cluster};
use crate::sync::validate;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, SelectorExt};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::finalizer::{Error as FinalizerError, Event as FinalizerEvent, finalizer};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a healthy rule is looked at again even without events: cheap, as it writes nothing.
const RESYNC: Duration = Duration::from_secs(600);
/// How soon a rule whose copies sit in a cluster that does not answer looks again on its own:
/// the cluster's prober and the kubeconfig Secret's watch wake it sooner, so this is only a
/// backstop. Failures of other kinds back off per rule (`retry`), from a second.
const RETRY_UNREACHABLE: Duration = Duration::from_secs(60);
/// How long one request to another cluster may take.
const REMOTE_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Writes in flight at once for one rule.
const WRITE_CONCURRENCY: usize = 16;
/// Per-copy events per reconcile; the rest are summed up in one.
const EVENTS_PER_RECONCILE: usize = 10;

/// The entry point the controller calls for every rule that needs a look.
pub async fn reconcile<R: RuleResource>(rule: Arc<R>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.in_flight.send_modify(|running| *running += 1);
    let _done = InFlight(&ctx);
    let started = Instant::now();
    let api = rule.api(ctx.client.clone());
    let result = finalizer(&api, FINALIZER, rule, |event| async {
        match event {
            FinalizerEvent::Apply(rule) => apply(rule, &ctx).await,
            FinalizerEvent::Cleanup(rule) => cleanup(rule, &ctx).await,
        }
    })
    .await;
    ctx.metrics.reconciled(R::KIND, started.elapsed());
    match result {
        Ok(action) => Ok(action),
        // The rule's own error, so that metrics and retries see its real cause.
        Err(FinalizerError::ApplyFailed(e) | FinalizerError::CleanupFailed(e)) => Err(e),
        // The rule was already gone when its finalizer was to be removed: the clean-up is done.
        Err(FinalizerError::RemoveFinalizer(kube::Error::Api(e))) if e.code == 404 => {
            Ok(Action::await_change())
        }
        Err(e) => Err(Error::Finalizer(Box::new(e))),
    }
}

/// Counts a reconcile out when it ends, however it ends (a cancelled future included).
struct InFlight<'a>(&'a Context);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.send_modify(|running| *running -= 1);
    }
}

/// Decides when a rule whose reconcile failed is tried again.
pub fn error_policy<R: RuleResource>(rule: Arc<R>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_failed(R::KIND, error.metric_label());
    tracing::warn!(rule = %rule.key(), error = %error, "reconcile failed");
    let asked = match error {
        Error::Kube(e) => super::retry::asked_for(e),
        _ => None,
    };
    Action::requeue(ctx.retries.failed(&rule.key(), asked))
}

/// One copy the rule wants, and what became of it.
struct Planned {
    target: CopyTarget,
    source: SourceRef,
    /// The source's resourceVersion, to measure propagation.
    source_version: Option<String>,
    state: CopyState,
    message: Option<String>,
    /// The digest of the copy as it should be, once it was made.
    hash: Option<String>,
    /// The copy as it should be, kept only while it is to be written: with thousands of copies
    /// in sync, holding them all would double the memory a reconcile needs.
    desired: Option<DesiredCopy>,
    /// The object in the copy's place, shared with the copies cache; kept only for a write.
    live: Option<Arc<DynamicObject>>,
    decision: Option<Decision>,
    /// Whatever copy is there now stays (a plugin failed: nothing is lost).
    keeps_previous: bool,
    /// What an Event may say about the copy when `message` quotes a plugin: plugin text goes
    /// into the rule's status and the log only, never into Events, which more people may read.
    event_note: Option<String>,
    /// Whether `Adopt`/`Overwrite` apply in the copy's place, for deciding again after a race.
    may_take_over: bool,
}

impl Planned {
    fn blocked(target: CopyTarget, source: SourceRef, state: CopyState, message: String) -> Self {
        Planned {
            target,
            source,
            source_version: None,
            state,
            message: Some(message),
            hash: None,
            desired: None,
            live: None,
            decision: None,
            keeps_previous: false,
            event_note: None,
            may_take_over: false,
        }
    }

    /// Like [`Planned::blocked`], with a message quoting a plugin and what Events say instead.
    fn quoting_plugin(
        target: CopyTarget,
        source: SourceRef,
        state: CopyState,
        message: String,
        event_note: String,
    ) -> Self {
        Planned {
            event_note: Some(event_note),
            ..Planned::blocked(target, source, state, message)
        }
    }

    /// Decides about the copy given what is in its place, keeping the desired copy and the live
    /// object only if they are to be written.
    fn decide(
        &mut self,
        rule: &RuleKey,
        desired: DesiredCopy,
        live: Option<Arc<DynamicObject>>,
        conflict: ConflictPolicy,
        may_take_over: bool,
    ) {
        let decision = decide(rule, &desired, live.as_deref(), conflict, may_take_over);
        self.may_take_over = may_take_over;
        if matches!(decision, Decision::Write(_)) {
            self.live = live;
            self.desired = Some(desired);
        }
        self.decision = Some(decision);
    }

    /// Whether the rule means to hold a copy here (so an owned copy here is not removed).
    fn holds_copy(&self) -> bool {
        self.keeps_previous
            || matches!(self.decision, Some(Decision::InSync | Decision::Write(_)))
            || (self.state == CopyState::Failed && self.decision.is_none() && self.hash.is_some())
    }
}

/// A planned copy whose place must be read from the apiserver before deciding.
struct Unread {
    /// Its index in the plan.
    index: usize,
    /// Its cluster, an index into the reachable ones.
    cluster: usize,
    desired: DesiredCopy,
    may_take_over: bool,
}

/// One cluster a rule writes copies to, or still holds copies in, and whether it can be used now.
struct TargetCluster {
    name: Option<String>,
    targets: Vec<Target>,
    /// The rule has targets here or copies it made earlier.
    holds: bool,
    /// The cluster and the copied kind's resource there, or why they cannot be used now.
    usable: Result<(ClusterHandle, ApiResource), ClusterProblem>,
}

/// A usable target cluster with what its caches say, read once per reconcile.
struct Reachable<'a> {
    name: &'a Option<String>,
    handle: &'a ClusterHandle,
    resource: &'a ApiResource,
    /// Each namespace's annotations, for consent.
    annotations: HashMap<String, BTreeMap<String, String>>,
    places: Vec<Placement>,
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
        any: targets.iter().any(|t| t.namespace_selector.is_some()),
    }
}

async fn apply<R: RuleResource>(rule: Arc<R>, ctx: &Context) -> Result<Action, Error> {
    let key = rule.key();
    let spec = rule.rule_spec();
    let previous = rule.rule_status();
    ctx.fleet.wait_ready().await?;

    let kind = match validate::check(spec, &ctx.allowed_kinds)
        .and_then(|kind| validate::check_authority(key.kind, spec).map(|()| kind))
        .and_then(|kind| scope::check(&ctx.scope, spec).map(|()| kind))
    {
        Ok(kind) => kind,
        Err(problem) => {
            ctx.fleet.forget(&key);
            let ready = Readiness::not_ready(problem.reason, problem.message);
            refuse(&*rule, ctx, previous, ready).await?;
            return Ok(Action::await_change());
        }
    };

    // A ConfigMap a plugin comes from wakes the rule when it changes (or appears).
    ctx.plugin_config_maps
        .uses(&key, config_maps_of(&spec.transforms, key.namespace.as_deref()));
    ctx.plugin_files
        .uses(&key, files_of(&spec.transforms, ctx.plugin_dir.as_deref()));
    // The transform chain: every plugin loaded and its config accepted, or nothing changes.
    // Recorded pins stand while the rule is unchanged since they were recorded.
    let spec_changed = previous.and_then(|p| p.observed_generation) != rule.meta().generation;
    if spec_changed {
        // A changed rule is a new start for its copies' churn too.
        lock(&ctx.flaps).forget(|(rule, _, _)| *rule == key);
    }
    let resolved = match ctx
        .plugins
        .chain(
            &spec.transforms,
            key.namespace.as_deref(),
            &spec.plugin_pull_secrets,
            previous.map(|p| p.plugins.as_slice()).unwrap_or_default(),
            spec_changed,
        )
        .await
    {
        Ok(resolved) => resolved,
        Err(problem) => {
            // The message may quote the plugin (its refusal of the config, a trap): the Event
            // names only the reference and the reason.
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
            // The status is about to record this generation: pins of tags made for an earlier
            // one must not pass for this one's, or the next look would keep them.
            let mut kept = previous.cloned();
            if spec_changed && let Some(status) = kept.as_mut() {
                status.plugins.retain(|pin| pin.resolved_at.is_none());
            }
            // What the tag resolved to, and that it is refused, replaces the pin it had.
            if let Some(refused) = problem.refused.clone() {
                let status = kept.get_or_insert_with(RuleStatus::default);
                status.plugins.retain(|pin| pin.plugin != refused.plugin);
                status.plugins.push(refused);
            }
            refuse_with_note(&*rule, ctx, kept.as_ref(), ready, note).await?;
            // A plugin file, ConfigMap or artifact that appears later is noticed on the next look.
            return Ok(Action::requeue(ctx.retries.failed(&key, None)));
        }
    };
    let chain = resolved.chain;

    // Which clusters: the source's, every target's, and every one that still holds copies.
    let mut by_cluster =
        targets_by_cluster(&spec.targets, |labels| ctx.fleet.matching_clusters(labels)).unwrap_or_default();
    let source_cluster = spec.source.cluster.clone().filter(|c| !c.is_empty());
    let uid = rule.meta().uid.clone().unwrap_or_default();
    let previous_copies = {
        let last = ctx.statuses.lock().unwrap_or_else(|p| p.into_inner());
        known_copies(previous, last.get(&key), &uid)
    };
    for copy in &previous_copies {
        by_cluster.entry(copy.cluster.clone()).or_default();
    }
    by_cluster.entry(None).or_default();
    let mut remote_names: BTreeSet<String> = by_cluster.keys().flatten().cloned().collect();
    remote_names.extend(source_cluster.iter().cloned());
    let selects_clusters = spec.targets.iter().any(|t| t.cluster_selector.is_some());
    ctx.fleet.uses(&key, remote_names, selects_clusters);

    let source_side = match &source_cluster {
        None => ctx.fleet.local().clone(),
        Some(name) => match ctx.fleet.cluster(&key, name, false).await {
            Ok(handle) => handle,
            Err(problem) => {
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
                refuse(&*rule, ctx, previous, ready).await?;
                return Ok(Action::requeue(RETRY_UNREACHABLE));
            }
        },
    };
    // The kind, as the source's cluster serves it.
    let in_source_cluster = match &source_cluster {
        Some(cluster) => format!(" of RemoteCluster {cluster}"),
        None => String::new(),
    };
    let (resource, namespaced) = match source_side.watches.resolve(&kind).await {
        Ok(Some(found)) => found,
        Ok(None) => {
            // Registered here, so that the CRD appearing wakes the rule.
            source_side.watches.declare(&key, Interest::default()).await?;
            let ready = Readiness::not_ready(
                "KindNotServed",
                format!(
                    "the cluster{in_source_cluster} does not serve {kind}: no such kind, or its \
                     CustomResourceDefinition is not installed; copies follow once it is served"
                ),
            );
            refuse(&*rule, ctx, previous, ready).await?;
            return Ok(Action::requeue(ctx.retries.failed(&key, None)));
        }
        Err(e) => {
            if source_cluster.is_none() {
                return Err(e.into());
            }
            let (_, why) = failure(ctx, &source_cluster, "looking up the source kind", &e);
            let ready = Readiness::not_ready(
                "SourceClusterUnreachable",
                format!("the source cannot be read: {why}; copies are left as they are"),
            );
            refuse(&*rule, ctx, previous, ready).await?;
            return Ok(Action::requeue(RETRY_UNREACHABLE));
        }
    };
    if let Err(problem) = validate::check_scope(key.kind, spec, &kind, namespaced) {
        ctx.fleet.forget(&key);
        let ready = Readiness::not_ready(problem.reason, problem.message);
        refuse(&*rule, ctx, previous, ready).await?;
        return Ok(Action::await_change());
    }
    let source_ns = if namespaced {
        rule.source_namespace().unwrap_or_default()
    } else {
        String::new()
    };

    let mut clusters: Vec<TargetCluster> =
        futures::future::join_all(by_cluster.into_iter().map(|(name, targets)| async {
            let holds = !targets.is_empty() || previous_copies.iter().any(|c| c.cluster == name);
            let usable = match &name {
                None => Ok(ctx.fleet.local().clone()),
                Some(remote) => ctx.fleet.cluster(&key, remote, !targets.is_empty()).await,
            };
            let usable = match usable {
                Ok(handle) if holds => resolve_in(ctx, &key, &kind, handle, &name, &targets).await,
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
        .await;

    // Gather: declare what this rule watches in each cluster, then read the caches.
    let source_selector = spec.source.selector.as_ref().and_then(|s| selector(s).ok());
    let previously_matched: BTreeSet<String> =
        previous_copies.iter().map(|c| c.source.name.clone()).collect();
    let source_interest = SourceInterest {
        watch: SourceWatchKey::new(&resource, &source_ns),
        resource: resource.clone(),
        name: spec.source.name.clone(),
        selector: source_selector.clone(),
        matched: previously_matched,
    };
    let uses_remote_targets = clusters.iter().any(|c| c.name.is_some());
    let mut store = None;
    for cluster in clusters.iter_mut() {
        let Ok((handle, cluster_resource)) = &cluster.usable else {
            continue;
        };
        let is_source = cluster.name == source_cluster;
        let mut namespaces = namespace_interest(&cluster.targets);
        if cluster.name.is_none() && uses_remote_targets && key.kind == RuleKind::SyncRule {
            // Its namespace's labels decide which RemoteClusters it may use.
            namespaces.names.extend(key.namespace.clone());
        }
        let interest = Interest {
            source: is_source.then(|| source_interest.clone()),
            copies: cluster.holds.then(|| cluster_resource.clone()),
            namespaces,
        };
        match handle.watches.declare(&key, interest).await {
            Ok(declared) => {
                if is_source {
                    store = declared;
                }
            }
            // Another cluster's caches that do not fill mark its copies; the source's stop the rule.
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
            Err(e) if is_source && source_cluster.is_some() => {
                refuse(&*rule, ctx, previous, source_unreadable(&source_side, e)).await?;
                return Ok(Action::requeue(RETRY_UNREACHABLE));
            }
            Err(e) => return Err(e),
        }
    }
    if store.is_none() {
        // The source lives in a cluster that gets no copies of this rule.
        let interest = Interest {
            source: Some(source_interest.clone()),
            ..Default::default()
        };
        store = match source_side.watches.declare(&key, interest).await {
            Ok(store) => store,
            Err(e) if source_cluster.is_some() => {
                refuse(&*rule, ctx, previous, source_unreadable(&source_side, e)).await?;
                return Ok(Action::requeue(RETRY_UNREACHABLE));
            }
            Err(e) => return Err(e),
        };
    }
    let store = store.ok_or_else(|| Error::NotReady("no source cache".into()))?;
    let mut sources: Vec<Arc<DynamicObject>> = store
        .state()
        .into_iter()
        .filter(|o| o.namespace().unwrap_or_default() == source_ns)
        .filter(|o| match (&spec.source.name, &source_selector) {
            (Some(name), _) => o.name_any() == *name,
            (None, Some(sel)) => sel.matches(o.labels()),
            (None, None) => false,
        })
        .collect();
    sources.sort_by_key(|o| o.name_any());
    source_side
        .watches
        .set_matched(&key, sources.iter().map(|o| o.name_any()).collect());
    // Another cluster's objects are read only where their owner consents.
    let (sources, unshared): (Vec<_>, Vec<_>) = sources
        .into_iter()
        .partition(|o| shares(&key, source_cluster.is_some(), o.annotations()));
    let unshared = unshared.len();
    let reachable: Vec<Reachable> = clusters
        .iter()
        .filter_map(|c| {
            let (handle, resource) = c.usable.as_ref().ok()?;
            let namespaces = handle.watches.namespaces();
            let places = placements(&c.targets, &namespaces, namespaced).unwrap_or_default();
            let annotations = namespaces.into_iter().map(|n| (n.name, n.annotations)).collect();
            Some(Reachable {
                name: &c.name,
                handle,
                resource,
                annotations,
                places,
            })
        })
        .collect();

    // Decide: every (source, cluster, place) triple is one copy.
    let chain_ids: Vec<(&str, &str)> = chain
        .iter()
        .map(|(plugin, config)| (plugin.digest.as_str(), config.as_str()))
        .collect();
    // The copies the chain ran for (or was remembered for): only theirs stay remembered.
    let mut chained = BTreeSet::new();
    let mut planned = Vec::new();
    let mut unread = Vec::new();
    let mut taken = BTreeSet::new();
    let mut source_hashes: Vec<(String, String)> = Vec::with_capacity(sources.len());
    for source in &sources {
        let source_ref = SourceRef {
            namespace: source.namespace(),
            name: source.name_any(),
        };
        let mut source_json = serde_json::to_value(source.as_ref()).unwrap_or_default();
        // Items of a list carry no apiVersion and kind; the copy needs both.
        source_json["apiVersion"] = json!(resource.api_version);
        source_json["kind"] = json!(resource.kind);
        let template = CopyTemplate::new(&key, &spec.metadata, &source_json, &source_ref);
        source_hashes.push((source_ref.name.clone(), template.source_hash().to_owned()));
        for (cluster_index, cluster) in reachable.iter().enumerate() {
            for place in &cluster.places {
                let target = CopyTarget {
                    cluster: cluster.name.clone(),
                    namespace: place.namespace.clone(),
                    name: place.rename.clone().unwrap_or_else(|| source.name_any()),
                };
                if *cluster.name == source_cluster
                    && target.namespace == source_ref.namespace
                    && target.name == source_ref.name
                {
                    // A selector that matches the source's own namespace: the source is not its own copy.
                    continue;
                }
                if !taken.insert((
                    target.cluster.clone(),
                    target.namespace.clone(),
                    target.name.clone(),
                )) {
                    let why =
                        "another source of this rule maps to the same copy; give each target its own name"
                            .into();
                    planned.push(Planned::blocked(
                        target,
                        source_ref.clone(),
                        CopyState::Conflict,
                        why,
                    ));
                    continue;
                }
                let namespace = place.namespace.as_deref().unwrap_or_default();
                if let Some(why) = place
                    .namespace
                    .as_deref()
                    .filter(|_| cluster.name.is_none())
                    .and_then(|ns| ctx.scope.outside(ns))
                {
                    planned.push(Planned::blocked(
                        target,
                        source_ref.clone(),
                        CopyState::NotWatched,
                        why,
                    ));
                    continue;
                }
                // Only a ClusterSyncRule creates namespaces (checked above too: not left to the CRD).
                let create = place.create && key.kind == RuleKind::ClusterSyncRule;
                if !place.exists && !create {
                    let why = format!("namespace {namespace} does not exist or is being deleted");
                    planned.push(Planned::blocked(
                        target,
                        source_ref.clone(),
                        CopyState::NamespaceMissing,
                        why,
                    ));
                    continue;
                }
                // Consent is a namespace's; a cluster-scoped copy comes from a trusted ClusterSyncRule.
                if place.namespace.is_some()
                    && !accepts(
                        &key,
                        namespace,
                        cluster.name.is_none(),
                        cluster.annotations.get(namespace),
                    )
                {
                    let why = not_accepted_message(&key, namespace);
                    planned.push(Planned::blocked(
                        target,
                        source_ref.clone(),
                        CopyState::NotAccepted,
                        why,
                    ));
                    continue;
                }
                if !place.exists {
                    // Only a ClusterSyncRule target may say createNamespace (the schema says so).
                    match remote_call(
                        cluster.name,
                        write::create_namespace(&cluster.handle.client, namespace),
                    )
                    .await
                    {
                        Ok(()) => {
                            tracing::info!(rule = %key, namespace = %namespace, cluster = cluster.name.as_deref().unwrap_or_default(), "created a target namespace");
                        }
                        Err(e) => {
                            let (state, why) = failure(ctx, cluster.name, "creating the namespace", &e);
                            planned.push(Planned::blocked(target, source_ref.clone(), state, why));
                            continue;
                        }
                    }
                }
                let mut desired = template.copy_for(target.clone());
                if !chain.is_empty() {
                    chained.insert(target.clone());
                    let plugin_ctx = TransformContext {
                        rule: key.to_string(),
                        source_api_version: resource.api_version.clone(),
                        source_kind: resource.kind.clone(),
                        source_namespace: source_ref.namespace.clone(),
                        source_name: source_ref.name.clone(),
                        source_cluster: source_cluster.clone().unwrap_or_default(),
                        target_cluster: cluster.name.clone().unwrap_or_default(),
                        target_namespace: target.namespace.clone(),
                        target_name: target.name.clone(),
                    };
                    let input = chain_input(template.hash(), template.source_hash(), &chain_ids, &plugin_ctx);
                    let outcome = transform(ctx, &key, &chain, input, &mut desired, plugin_ctx).await;
                    match outcome {
                        Ok(None) => {}
                        Ok(Some((plugin, reason))) => {
                            let why = format!("skipped by plugin {plugin}: {reason}");
                            let note = format!(
                                "skipped by plugin {plugin}; its reason is in the rule's status.targets"
                            );
                            planned.push(Planned::quoting_plugin(
                                target,
                                source_ref.clone(),
                                CopyState::Skipped,
                                why,
                                note,
                            ));
                            continue;
                        }
                        Err(e) => {
                            ctx.metrics.plugin_failed(e.error.label());
                            let note = format!(
                                "{}; the previous copy stays; the plugin's message is in the rule's \
                                 status.targets",
                                e.summary()
                            );
                            let mut failed = Planned::quoting_plugin(
                                target,
                                source_ref.clone(),
                                CopyState::PluginFailed,
                                short_message(&e.to_string()),
                                note,
                            );
                            failed.keeps_previous = true;
                            planned.push(failed);
                            continue;
                        }
                    }
                }
                // Whatever the source or the chain made of it, some objects are never written.
                if let Some(why) = refused_copy(&desired.object) {
                    planned.push(Planned::blocked(
                        target,
                        source_ref.clone(),
                        CopyState::Refused,
                        why,
                    ));
                    continue;
                }
                let mut plan = Planned {
                    target,
                    source: source_ref.clone(),
                    source_version: source.resource_version(),
                    state: CopyState::Synced,
                    message: None,
                    hash: Some(desired.hash.clone()),
                    desired: None,
                    live: None,
                    decision: None,
                    keeps_previous: false,
                    event_note: None,
                    may_take_over: false,
                };
                let may_take_over = key.kind == RuleKind::ClusterSyncRule
                    || (cluster.name.is_none() && key.namespace == place.namespace);
                let cached = cluster.handle.watches.cached_copy(
                    cluster.resource,
                    place.namespace.as_deref(),
                    &desired.target.name,
                );
                match cached {
                    Some(live) => plan.decide(&key, desired, Some(live), spec.conflict, may_take_over),
                    // Not a copy in the cache: ask the apiserver what is there, below, with the
                    // other such places at once.
                    None => unread.push(Unread {
                        index: planned.len(),
                        cluster: cluster_index,
                        desired,
                        may_take_over,
                    }),
                }
                planned.push(plan);
            }
        }
    }
    ctx.chain_outputs.keep_only(&key, &chained);
    // Places with no copy of ours in the cache (first copies, or objects in the way): one GET
    // each, several in flight.
    let reads = futures::stream::iter(unread)
        .map(|place| {
            let cluster = &reachable[place.cluster];
            async move {
                let live = live_object(
                    cluster.handle,
                    cluster.resource,
                    place.desired.target.namespace.as_deref(),
                    &place.desired.target.name,
                )
                .await;
                (place, live)
            }
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    for (place, live) in reads {
        let plan = &mut planned[place.index];
        match live {
            Ok(live) => plan.decide(&key, place.desired, live, spec.conflict, place.may_take_over),
            Err(e) => {
                let cluster = reachable[place.cluster].name;
                let (state, why) = failure(ctx, cluster, "reading the current object", &e);
                plan.state = state;
                plan.message = Some(why);
                // Whatever is there stays: nothing was learnt about it.
                plan.keeps_previous = true;
            }
        }
    }
    // Clusters that cannot be used now: their copies stay as they are, marked with the reason.
    for cluster in &clusters {
        let Err(problem) = &cluster.usable else { continue };
        let mut marked = 0;
        for copy in previous_copies.iter().filter(|c| c.cluster == cluster.name) {
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
                let mut kept = Planned::blocked(
                    target,
                    copy.source.clone(),
                    problem.state,
                    problem.message.clone(),
                );
                kept.keeps_previous = true;
                planned.push(kept);
                marked += 1;
            }
        }
        for source in &sources {
            for target in &cluster.targets {
                let target = CopyTarget {
                    cluster: cluster.name.clone(),
                    namespace: target.namespace.clone(),
                    name: target.name.clone().unwrap_or_else(|| source.name_any()),
                };
                // Named namespaces are known without the cluster; selected ones are not (one entry
                // stands for them). A cluster-scoped copy needs no namespace.
                if namespaced && target.namespace.is_none() && marked > 0 {
                    continue;
                }
                if taken.insert((
                    target.cluster.clone(),
                    target.namespace.clone(),
                    target.name.clone(),
                )) {
                    let source_ref = SourceRef {
                        namespace: source.namespace(),
                        name: source.name_any(),
                    };
                    planned.push(Planned::blocked(
                        target,
                        source_ref,
                        problem.state,
                        problem.message.clone(),
                    ));
                    marked += 1;
                }
            }
        }
    }

    // Write, except copies the flap guard holds.
    let mut events = EventLog::default();
    let now = std::time::Instant::now();
    for plan in planned.iter_mut() {
        if !matches!(plan.decision, Some(Decision::Write(_))) {
            continue;
        }
        if let Some(held) = lock(&ctx.flaps).held(&flap_key(&key, &plan.target, &resource), now) {
            plan.decision = None;
            plan.desired = None;
            plan.state = CopyState::Flapping;
            plan.message = Some(held.describe(now));
            plan.keeps_previous = true;
        }
    }
    // Owned jobs: borrowed ones trip up the `Send` proof of the reconcile future.
    type Job = (
        usize,
        Write,
        DesiredCopy,
        Option<Arc<DynamicObject>>,
        (Client, ApiResource),
        Option<String>,
        bool,
    );
    let jobs: Vec<Job> = planned
        .iter_mut()
        .enumerate()
        .filter_map(|(i, p)| match (&p.decision, p.desired.take()) {
            (Some(Decision::Write(how)), Some(desired)) => {
                let cluster = reachable.iter().find(|c| *c.name == p.target.cluster)?;
                Some((
                    i,
                    *how,
                    desired,
                    p.live.clone(),
                    (cluster.handle.client.clone(), cluster.resource.clone()),
                    p.target.cluster.clone(),
                    p.may_take_over,
                ))
            }
            _ => None,
        })
        .collect();
    let (key_ref, conflict) = (&key, spec.conflict);
    let results: Vec<(usize, kube::Result<WriteDone>)> = futures::stream::iter(jobs)
        .map(
            move |(i, how, desired, live, (client, kind), cluster, may_take_over)| async move {
                let done = remote_call(&cluster, async {
                    write_copy(
                        &client,
                        &kind,
                        key_ref,
                        &desired,
                        (live, how),
                        conflict,
                        may_take_over,
                    )
                    .await
                })
                .await;
                (i, done)
            },
        )
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect()
        .await;
    for (i, done) in results {
        let plan = &mut planned[i];
        let place = place_of(&plan.target);
        match done {
            Ok(WriteDone::Conflict(why)) => {
                tracing::info!(rule = %key, copy = %place, "an object appeared in the copy's place before it was created; left alone");
                plan.decision = Some(Decision::Conflict(why));
            }
            Ok(WriteDone::Stored { how, over, stored }) => {
                let flap = flap_key(&key, &plan.target, &resource);
                let churn: &[Churn] = match how {
                    Write::Create => &[Churn::Created],
                    Write::Recreate => &[Churn::Deleted, Churn::Created],
                    // The content mimeo gave the copy last, written back: something changed it.
                    Write::Apply | Write::Replace
                        if plan.hash.is_some()
                            && plan
                                .live
                                .as_deref()
                                .and_then(|l| l.annotations().get(HASH_ANNOTATION))
                                == plan.hash.as_ref() =>
                    {
                        &[Churn::Repaired]
                    }
                    Write::Apply | Write::Replace => &[],
                };
                let tripped = churn
                    .iter()
                    .filter_map(|c| lock(&ctx.flaps).record(&flap, *c, now))
                    .last();
                if let Some(held) = tripped {
                    let why = report_flapping(ctx, &mut events, &key, &resource, &plan.target, &held, now);
                    plan.state = CopyState::Flapping;
                    plan.message = Some(why);
                }
                plan.live = over;
                if let Some(cluster) = reachable.iter().find(|c| *c.name == plan.target.cluster) {
                    cluster
                        .handle
                        .watches
                        .wrote(cluster.resource, plan.live.as_deref(), *stored);
                }
                ctx.metrics.wrote(verb(how));
                tracing::info!(rule = %key, copy = %place, verb = verb(how), "wrote a copy");
                events.note_copy(
                    EventType::Normal,
                    reason(how),
                    format!("{} copy {place}", past(how)),
                    &resource,
                    &plan.target,
                );
                if let Some(seen) = plan.source_version.as_deref().and_then(|rv| {
                    source_side.watches.seen_at(
                        &resource,
                        plan.source.namespace.as_deref().unwrap_or_default(),
                        &plan.source.name,
                        rv,
                    )
                }) {
                    ctx.metrics.propagated(seen.elapsed());
                }
            }
            Err(e) => {
                let (state, why) = failure(ctx, &plan.target.cluster, "writing the copy", &e);
                plan.state = state;
                plan.message = Some(why);
                plan.decision = None;
                // A copy whose write did not arrive stays until a write does.
                plan.keeps_previous = state != CopyState::Failed;
            }
        }
    }
    for plan in planned.iter_mut() {
        if let Some(Decision::Conflict(why)) = &plan.decision {
            plan.state = CopyState::Conflict;
            plan.message = Some(why.clone());
        }
    }

    // Remove what the rule owns but no longer wants, in every cluster that can be reached.
    let keep: BTreeSet<(Option<String>, Option<String>, String)> = planned
        .iter()
        .filter(|p| p.holds_copy())
        .map(|p| {
            (
                p.target.cluster.clone(),
                p.target.namespace.clone(),
                p.target.name.clone(),
            )
        })
        .collect();
    let mut leftovers = Vec::new();
    for cluster in &clusters {
        let Ok((handle, cluster_resource)) = &cluster.usable else {
            continue;
        };
        let recorded: Vec<&CopyStatus> = previous_copies
            .iter()
            .filter(|c| c.cluster == cluster.name)
            .collect();
        for (kind, namespace, name, source) in
            owned_copies(handle, &key, cluster_resource, namespaced, &recorded, &ctx.scope)
        {
            if same_resource(&kind, cluster_resource)
                && keep.contains(&(cluster.name.clone(), namespace.clone(), name.clone()))
            {
                continue;
            }
            let target = CopyTarget {
                cluster: cluster.name.clone(),
                namespace: namespace.clone(),
                name: name.clone(),
            };
            let flap = flap_key(&key, &target, &kind);
            if let Some(held) = lock(&ctx.flaps).held(&flap, now) {
                leftovers.push(CopyStatus {
                    source,
                    cluster: cluster.name.clone(),
                    namespace,
                    name,
                    state: CopyState::Flapping,
                    hash: None,
                    message: Some(held.describe(now)),
                });
                continue;
            }
            match remote_call(
                &cluster.name,
                remove_owned(handle, &key, &kind, namespace.as_deref(), &name, spec),
            )
            .await
            {
                Ok(Some(done)) => {
                    ctx.metrics.wrote(done);
                    if done == "delete"
                        && let Some(held) = lock(&ctx.flaps).record(&flap, Churn::Deleted, now)
                    {
                        let why = report_flapping(ctx, &mut events, &key, &kind, &target, &held, now);
                        leftovers.push(CopyStatus {
                            source: source.clone(),
                            cluster: cluster.name.clone(),
                            namespace: namespace.clone(),
                            name: name.clone(),
                            state: CopyState::Flapping,
                            hash: None,
                            message: Some(why),
                        });
                    }
                    let place = place_of(&target);
                    let what = if done == "delete" { "Deleted" } else { "Orphaned" };
                    tracing::info!(rule = %key, copy = %place, verb = done, "removed a copy that is no longer wanted");
                    events.note_copy(
                        EventType::Normal,
                        &format!("Copy{what}"),
                        format!(
                            "{what} copy {place}: no longer wanted there (its namespace or cluster no longer \
                             matches, accepts copies or exists, or the source is gone)"
                        ),
                        &kind,
                        &target,
                    );
                }
                Ok(None) => {}
                Err(e) => {
                    let (state, why) =
                        failure(ctx, &cluster.name, "removing a copy that is no longer wanted", &e);
                    leftovers.push(CopyStatus {
                        source,
                        cluster: cluster.name.clone(),
                        namespace,
                        name,
                        state,
                        hash: None,
                        message: Some(why),
                    });
                }
            }
        }
    }

    // Status.
    let event_notes: HashMap<CopyTarget, String> = planned
        .iter_mut()
        .filter_map(|p| Some((p.target.clone(), p.event_note.take()?)))
        .collect();
    let mut inventory: Vec<CopyStatus> = planned
        .iter()
        .map(|p| CopyStatus {
            source: p.source.clone(),
            cluster: p.target.cluster.clone(),
            namespace: p.target.namespace.clone(),
            name: p.target.name.clone(),
            state: p.state,
            hash: match p.state {
                CopyState::Synced => p.hash.clone(),
                _ => None,
            },
            message: p.message.clone(),
        })
        .chain(leftovers)
        .collect();
    inventory.sort_by(|a, b| {
        (&a.cluster, &a.namespace, &a.name, &a.source).cmp(&(&b.cluster, &b.namespace, &b.name, &b.source))
    });
    let source_hash = (!source_hashes.is_empty()).then(|| digest(&json!(source_hashes)));
    let in_cluster = match &source_cluster {
        Some(cluster) => format!(" of RemoteCluster {cluster}"),
        None => String::new(),
    };
    let ready = match (&spec.source.name, sources.is_empty()) {
        (Some(name), true) => Readiness::not_ready(
            "SourceNotFound",
            format!(
                "{} {source_ns}/{name}{in_cluster} does not exist; copies follow as soon as it does",
                spec.source.kind
            ),
        ),
        (None, true) => Readiness {
            ready: true,
            reason: "NothingToCopy".into(),
            message: format!(
                "no {} in {source_ns}{in_cluster} matches the selector",
                spec.source.kind
            ),
        },
        _ => summarize(&inventory),
    };
    let ready = match &source_cluster {
        Some(cluster) if unshared > 0 && (ready.ready || sources.is_empty()) => Readiness::not_ready(
            "SourceNotShared",
            not_shared_message(&key, cluster, spec.source.name.is_some(), unshared),
        ),
        _ => ready,
    };
    let synced = inventory.iter().filter(|c| c.state == CopyState::Synced).count();
    let mut by_state: HashMap<String, i64> = HashMap::new();
    for copy in &inventory {
        *by_state.entry(format!("{:?}", copy.state)).or_default() += 1;
    }
    ctx.metrics.set_copies(&key.to_string(), Some(by_state));
    for copy in &inventory {
        let was = previous_copies
            .iter()
            .find(|c| c.cluster == copy.cluster && c.namespace == copy.namespace && c.name == copy.name);
        // A copy counted rather than listed last time, in a state counted then, is no news.
        let counted_before = was.is_none()
            && previous.is_some_and(|p| p.not_listed.contains_key(&format!("{:?}", copy.state)));
        if copy.state != CopyState::Synced && !counted_before && was.is_none_or(|w| w.state != copy.state) {
            let target = CopyTarget {
                cluster: copy.cluster.clone(),
                namespace: copy.namespace.clone(),
                name: copy.name.clone(),
            };
            let place = place_of(&target);
            let said = event_notes.get(&target).or(copy.message.as_ref());
            let note = format!("copy {place}: {}", said.cloned().unwrap_or_default());
            tracing::warn!(rule = %key, copy = %place, state = ?copy.state, why = copy.message.as_deref().unwrap_or_default(), "copy not in sync");
            // A skip is the plugin's decision, reported as information rather than a warning.
            let type_ = if copy.state == CopyState::Skipped {
                EventType::Normal
            } else {
                EventType::Warning
            };
            events.note_copy(type_, &format!("{:?}", copy.state), note, &resource, &target);
        }
    }
    if ready.reason == "SourceNotFound" || ready.reason == "SourceNotShared" {
        publish_problem(&*rule, ctx, previous, &ready, ready.message.clone()).await;
    }
    events.publish(&*rule, ctx).await;

    let failing = inventory.iter().any(|c| {
        matches!(
            c.state,
            CopyState::Failed | CopyState::PluginFailed | CopyState::Unauthorized
        )
    });
    let unreachable = inventory.iter().any(|c| c.state == CopyState::Unreachable);
    let next_look = if failing {
        ctx.retries.failed(&key, None)
    } else {
        ctx.retries.succeeded(&key);
        // The cluster's prober wakes the rule when the cluster answers again.
        if unreachable { RETRY_UNREACHABLE } else { RESYNC }
    };
    let total = inventory.len();
    let (targets, not_listed) = bounded(inventory);
    let status = RuleStatus {
        source_hash,
        copies: Some(format!("{synced}/{total}")),
        targets,
        not_listed,
        plugins: resolved.pins,
        ..Default::default()
    };
    // A pinned tag due to be resolved again brings the next look forward.
    let next_look = resolved.refresh_in.map_or(next_look, |due| next_look.min(due));
    let mut status = with_ready(status, previous, rule.meta().generation, ready);
    status.conditions.extend(plugins_not_refreshed(
        previous.map(|p| p.conditions.as_slice()),
        rule.meta().generation,
        &resolved.not_refreshed,
    ));
    write_status(&*rule, ctx, status).await?;
    Ok(Action::requeue(next_look))
}

/// Why the sources in another cluster cannot be read: its watch does not list.
fn source_unreadable(cluster: &ClusterHandle, error: Error) -> Readiness {
    let failure = cluster.watches.failure();
    let reason = match failure.as_ref().map(|f| f.reason) {
        Some("Unauthorized") => "SourceClusterUnauthorized",
        _ => "SourceClusterUnreachable",
    };
    let why = failure.map(|f| f.message).unwrap_or_else(|| error.to_string());
    Readiness::not_ready(
        reason,
        format!(
            "the source cannot be read in RemoteCluster {}: {why}; copies are left as they are",
            cluster.name.as_deref().unwrap_or_default()
        ),
    )
}

/// Runs a request against a cluster; one to another cluster gets a deadline, so a cluster that
/// swallows packets cannot hold up the rule.
async fn remote_call<T>(
    cluster: &Option<String>,
    request: impl Future<Output = kube::Result<T>>,
) -> kube::Result<T> {
    if cluster.is_none() {
        return request.await;
    }
    match tokio::time::timeout(REMOTE_REQUEST_TIMEOUT, request).await {
        Ok(result) => result,
        Err(_) => Err(kube::Error::Service(
            format!("no answer within {} s", REMOTE_REQUEST_TIMEOUT.as_secs()).into(),
        )),
    }
}

/// The state and message for a failed request. In another cluster, rejected credentials give
/// `Unauthorized` and a request that did not get through gives `Unreachable` (and marks the
/// cluster down, so that its prober takes over).
fn failure(ctx: &Context, cluster: &Option<String>, doing: &str, error: &kube::Error) -> (CopyState, String) {
    let Some(name) = cluster else {
        return (CopyState::Failed, short_message(&format!("{doing}: {error}")));
    };
    match error {
        kube::Error::Api(e) if e.code == 401 || e.code == 403 => {
            let problem = clusters::classify(error);
            (
                CopyState::Unauthorized,
                short_message(&format!("RemoteCluster {name}: {doing}: {}", problem.message)),
            )
        }
        kube::Error::Api(_) => (
            CopyState::Failed,
            short_message(&format!("RemoteCluster {name}: {doing}: {error}")),
        ),
        _ => {
            let error = with_causes(error);
            ctx.fleet.report_unreachable(name, &error);
            (
                CopyState::Unreachable,
                short_message(&format!("RemoteCluster {name} does not answer: {doing}: {error}")),
            )
        }
    }
}

async fn cleanup<R: RuleResource>(rule: Arc<R>, ctx: &Context) -> Result<Action, Error> {
    let key = rule.key();
    let spec = rule.rule_spec();
    ctx.fleet.wait_ready().await?;
    let kind = validate::check(spec, &ctx.allowed_kinds).ok();
    let uid = rule.meta().uid.clone().unwrap_or_default();
    let recorded = {
        let last = ctx.statuses.lock().unwrap_or_else(|p| p.into_inner());
        known_copies(rule.rule_status(), last.get(&key), &uid)
    };
    let remote: BTreeSet<String> = recorded.iter().filter_map(|c| c.cluster.clone()).collect();
    ctx.fleet.uses(&key, remote.clone(), false);
    let mut failures = Vec::new();
    let mut clusters = vec![ctx.fleet.local().clone()];
    for name in &remote {
        match ctx.fleet.cluster(&key, name, false).await {
            Ok(handle) => clusters.push(handle),
            Err(problem) if matches!(problem.state, CopyState::ClusterMissing | CopyState::NotAccepted) => {
                tracing::warn!(rule = %key, cluster = %name, reason = %problem.message, "rule deleted; its copies in this cluster are left as they are");
            }
            Err(problem) => failures.push(problem.message),
        }
    }
    let mut removed = 0;
    for handle in &clusters {
        let here: Vec<&CopyStatus> = recorded.iter().filter(|c| c.cluster == handle.name).collect();
        let resolved = match &kind {
            Some(kind) => remote_call(&handle.name, handle.watches.resolve(kind))
                .await
                .ok()
                .flatten(),
            None => None,
        };
        let candidates = match &resolved {
            Some((resource, namespaced)) => {
                owned_copies(handle, &key, resource, *namespaced, &here, &ctx.scope)
            }
            None => handle
                .watches
                .copies_of(&key)
                .into_iter()
                .map(|(r, c)| (r, c.namespace(), c.name_any(), source_of(&c)))
                .collect(),
        };
        for (kind, namespace, name, _) in candidates {
            match remote_call(
                &handle.name,
                remove_owned(handle, &key, &kind, namespace.as_deref(), &name, spec),
            )
            .await
            {
                Ok(Some(done)) => {
                    ctx.metrics.wrote(done);
                    removed += 1;
                }
                Ok(None) => {}
                Err(e) => {
                    let target = CopyTarget {
                        cluster: handle.name.clone(),
                        namespace,
                        name,
                    };
                    failures.push(format!("{}: {e}", place_of(&target)));
                }
            }
        }
    }
    if !failures.is_empty() {
        return Err(Error::Cleanup(short_message(&failures.join("; "))));
    }
    let what = match spec.deletion {
        crate::api::DeletionPolicy::Delete => "deleted",
        crate::api::DeletionPolicy::Orphan => "orphaned",
    };
    tracing::info!(rule = %key, copies = removed, "rule deleted; its copies were {what}");
    ctx.fleet.forget(&key);
    ctx.plugin_config_maps.uses(&key, BTreeSet::new());
    ctx.plugin_files.uses(&key, BTreeSet::new());
    ctx.chain_outputs.keep_only(&key, &BTreeSet::new());
    ctx.statuses
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&key);
    ctx.metrics.set_copies(&key.to_string(), None);
    Ok(Action::await_change())
}

/// Runs the rule's chain on one copy, or reuses what it made of the same `input` before.
/// `Ok(None)`: `desired` is now what the chain made; `Ok(Some((plugin, reason)))`: a skip.
async fn transform(
    ctx: &Context,
    key: &RuleKey,
    chain: &Chain,
    input: String,
    desired: &mut DesiredCopy,
    plugin_ctx: TransformContext,
) -> Result<Option<(String, String)>, ChainError> {
    let target = &desired.target;
    if let Some(remembered) = ctx.chain_outputs.get(key, target, &input) {
        ctx.metrics.chain(true);
        return Ok(match remembered {
            Remembered::Write { object, hash } => {
                desired.object = (*object).clone();
                desired.hash = hash;
                None
            }
            Remembered::Skip { plugin, reason } => Some((plugin, reason)),
        });
    }
    ctx.metrics.chain(false);
    let (remembered, skip) = match ctx.plugins.run(chain, plugin_ctx, desired.object.clone()).await? {
        ChainOutcome::Write(object) => {
            desired.replace_object(object);
            let written = Remembered::Write {
                object: Arc::new(desired.object.clone()),
                hash: desired.hash.clone(),
            };
            (written, None)
        }
        ChainOutcome::Skip { plugin, reason } => (
            Remembered::Skip {
                plugin: plugin.clone(),
                reason: reason.clone(),
            },
            Some((plugin, reason)),
        ),
    };
    ctx.chain_outputs
        .put(key, desired.target.clone(), input, remembered);
    Ok(skip)
}

/// What became of one write.
enum WriteDone {
    /// The copy was written this way over `over` (the object that was there, if any).
    Stored {
        how: Write,
        over: Option<Arc<DynamicObject>>,
        stored: Box<DynamicObject>,
    },
    /// An object appeared in the copy's place after it was read, and the rule's conflict policy
    /// leaves it alone.
    Conflict(String),
}

/// Writes one copy. When its create finds an object that appeared since the place was read, the
/// copy is decided again against that object (once), as if it had been there all along: it is
/// taken over only as the rule's conflict policy says, never merged into.
async fn write_copy(
    client: &Client,
    resource: &ApiResource,
    key: &RuleKey,
    desired: &DesiredCopy,
    (live, how): (Option<Arc<DynamicObject>>, Write),
    conflict: ConflictPolicy,
    may_take_over: bool,
) -> kube::Result<WriteDone> {
    let there = match write::write(client, resource, desired, live.as_deref(), how).await? {
        write::Written::Stored(stored) => {
            return Ok(WriteDone::Stored {
                how,
                over: live,
                stored: Box::new(stored),
            });
        }
        write::Written::Raced(there) => Arc::new(there),
    };
    match decide(key, desired, Some(&there), conflict, may_take_over) {
        Decision::InSync => Ok(WriteDone::Stored {
            how,
            over: None,
            stored: Box::new((*there).clone()),
        }),
        Decision::Conflict(why) => Ok(WriteDone::Conflict(why)),
        Decision::Write(again) => match write::write(client, resource, desired, Some(&there), again).await? {
            write::Written::Stored(stored) => Ok(WriteDone::Stored {
                how: again,
                over: Some(there),
                stored: Box::new(stored),
            }),
            write::Written::Raced(_) => Err(kube::Error::Service(
                "objects keep appearing in the copy's place as it is written; trying again later".into(),
            )),
        },
    }
}

/// The object now at a copy's place: from the copies cache if it is a copy, else from the API.
async fn live_object(
    cluster: &ClusterHandle,
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
) -> kube::Result<Option<Arc<DynamicObject>>> {
    if let Some(cached) = cluster.watches.cached_copy(resource, namespace, name) {
        return Ok(Some(cached));
    }
    let fetched = remote_call(
        &cluster.name,
        write::get(&cluster.client, resource, namespace, name),
    )
    .await?;
    Ok(fetched.map(Arc::new))
}

/// Every copy the rule may own in one cluster: cached copies recording it, and the inventory's
/// written copies there.
/// Copies in namespaces outside `scope` (recorded before mimeo was limited to namespaces) are
/// not among them: mimeo may not touch them now.
/// A copy as the flap guard names it: its rule, its place, and its resource (group and plural,
/// not the version).
pub(super) type FlapKey = (RuleKey, CopyTarget, String);

/// Says that the flap guard just tripped for a copy (metric, log, Warning event); returns what
/// the copy's status says.
fn report_flapping(
    ctx: &Context,
    events: &mut EventLog,
    rule: &RuleKey,
    resource: &ApiResource,
    target: &CopyTarget,
    held: &crate::sync::flap_guard::Held,
    now: Instant,
) -> String {
    let why = held.describe(now);
    let place = place_of(target);
    ctx.metrics.copy_flapped();
    tracing::warn!(rule = %rule, copy = %place, "{why}");
    events.note_copy(
        EventType::Warning,
        "CopyFlapping",
        format!("copy {place}: {why}"),
        resource,
        target,
    );
    why
}

fn flap_key(rule: &RuleKey, target: &CopyTarget, resource: &ApiResource) -> FlapKey {
    (
        rule.clone(),
        target.clone(),
        format!("{}/{}", resource.group, resource.plural),
    )
}

/// One resource whatever the version it is served at: a copy's identity is its group, resource
/// (plural), namespace and name. The copies watches are per version, so one object is seen once
/// per version a rule of its kind names (`kyverno.io/v1` and `v2beta1` ClusterPolicies).
pub(super) fn same_resource(a: &ApiResource, b: &ApiResource) -> bool {
    a.group == b.group && a.plural == b.plural
}

/// What `key` owns in `cluster`, by identity: each copy once, under the rule's own `resource`
/// when that is its resource (whatever version's watch saw it), else under the version seen.
fn owned_copies(
    cluster: &ClusterHandle,
    key: &RuleKey,
    resource: &ApiResource,
    namespaced: bool,
    recorded: &[&CopyStatus],
    scope: &Scope,
) -> Vec<(ApiResource, Option<String>, String, SourceRef)> {
    type Identity = (String, String, Option<String>, String);
    let mut out: BTreeMap<Identity, (ApiResource, SourceRef)> = BTreeMap::new();
    for (kind, copy) in cluster.watches.copies_of(key) {
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
            (kind, source_of(&copy)),
        );
    }
    for copy in recorded {
        if matches!(
            copy.state,
            CopyState::Synced
                | CopyState::Failed
                | CopyState::PluginFailed
                | CopyState::Unreachable
                | CopyState::Unauthorized
                | CopyState::ClusterMissing
        ) && (copy.namespace.is_some() || !namespaced)
        {
            out.entry((
                resource.group.clone(),
                resource.plural.clone(),
                copy.namespace.clone(),
                copy.name.clone(),
            ))
            .or_insert_with(|| (resource.clone(), copy.source.clone()));
        }
    }
    let in_scope =
        |ns: &Option<String>| cluster.name.is_some() || ns.as_deref().is_none_or(|ns| scope.contains(ns));
    out.into_iter()
        .filter(|((_, _, ns, _), _)| in_scope(ns))
        .map(|((_, _, ns, name), (kind, source))| (kind, ns, name, source))
        .collect()
}

fn source_of(copy: &DynamicObject) -> SourceRef {
    // "Kind/namespace/name" or "Kind/name", as desired.rs records it.
    let recorded = copy
        .annotations()
        .get(crate::sync::ownership::SOURCE_ANNOTATION)
        .cloned()
        .unwrap_or_default();
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

/// Removes a copy per the rule's deletion policy if the object there is still this rule's.
/// Returns the verb done, or `None` when there was nothing of ours to remove.
async fn remove_owned(
    cluster: &ClusterHandle,
    key: &RuleKey,
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
    spec: &RuleSpec,
) -> kube::Result<Option<&'static str>> {
    let Some(live) = live_object(cluster, resource, namespace, name).await? else {
        return Ok(None);
    };
    if owner_of(&live.metadata, key) != Owner::ThisRule {
        return Ok(None);
    }
    write::remove(&cluster.client, resource, &live, spec.deletion).await?;
    Ok(Some(match spec.deletion {
        crate::api::DeletionPolicy::Delete => "delete",
        crate::api::DeletionPolicy::Orphan => "orphan",
    }))
}

/// Reports a rule that cannot be acted on: a warning event and `Ready=False`, keeping the
/// inventory as it was (its copies are left alone).
async fn refuse<R: RuleResource>(
    rule: &R,
    ctx: &Context,
    previous: Option<&RuleStatus>,
    ready: Readiness,
) -> Result<(), Error> {
    let note = ready.message.clone();
    refuse_with_note(rule, ctx, previous, ready, note).await
}

/// Like [`refuse`], with the Event saying `note` instead of the condition's message.
async fn refuse_with_note<R: RuleResource>(
    rule: &R,
    ctx: &Context,
    previous: Option<&RuleStatus>,
    ready: Readiness,
    note: String,
) -> Result<(), Error> {
    publish_problem(rule, ctx, previous, &ready, note).await;
    let keep = previous.cloned().unwrap_or_default();
    write_status(
        rule,
        ctx,
        with_ready(keep, previous, rule.meta().generation, ready),
    )
    .await
}

/// Writes the status with server-side apply, only when it differs from what is there.
async fn write_status<R: RuleResource>(rule: &R, ctx: &Context, mut status: RuleStatus) -> Result<(), Error> {
    let key = rule.key();
    let uid = rule.meta().uid.clone().unwrap_or_default();
    let last = ctx
        .statuses
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned();
    if !needs_write(&mut status, rule.rule_status(), last.as_ref(), &uid) {
        return Ok(());
    }
    let patch = json!({
        "apiVersion": R::api_version(&()),
        "kind": R::kind(&()),
        "status": status,
    });
    rule.api(ctx.client.clone())
        .patch_status(
            &rule.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    ctx.statuses
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, LastWritten::of(&uid, &status));
    Ok(())
}

/// A warning event for a rule-level problem, once per change of reason.
async fn publish_problem<R: RuleResource>(
    rule: &R,
    ctx: &Context,
    previous: Option<&RuleStatus>,
    ready: &Readiness,
    note: String,
) {
    tracing::warn!(rule = %rule.key(), reason = %ready.reason, why = %ready.message, "rule cannot be acted on");
    let before = previous
        .and_then(|p| p.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.reason.as_str());
    if before == Some(ready.reason.as_str()) {
        return;
    }
    let mut log = EventLog::default();
    log.note(EventType::Warning, &ready.reason, note);
    log.publish(rule, ctx).await;
}

/// Where a copy is, for messages: `namespace/name`, prefixed with `cluster:` in another cluster.
fn place_of(target: &CopyTarget) -> String {
    let local = match &target.namespace {
        Some(ns) => format!("{ns}/{}", target.name),
        None => target.name.clone(),
    };
    match &target.cluster {
        Some(cluster) => format!("{cluster}:{local}"),
        None => local,
    }
}

fn verb(how: Write) -> &'static str {
    match how {
        Write::Create => "create",
        Write::Apply => "apply",
        Write::Replace => "replace",
        Write::Recreate => "recreate",
    }
}

fn reason(how: Write) -> &'static str {
    match how {
        Write::Create => "CopyCreated",
        Write::Apply | Write::Replace | Write::Recreate => "CopyUpdated",
    }
}

fn past(how: Write) -> &'static str {
    match how {
        Write::Create => "Created",
        Write::Apply => "Updated",
        Write::Replace => "Replaced the content of",
        Write::Recreate => "Recreated",
    }
}

/// Events gathered during one reconcile, published at its end with a cap.
#[derive(Default)]
struct EventLog {
    events: Vec<(EventType, String, String, Option<ObjectReference>)>,
}

impl EventLog {
    fn note(&mut self, type_: EventType, reason: &str, note: String) {
        self.events.push((type_, reason.to_owned(), note, None));
    }

    /// An event about one copy, which it names as the related object (so that events about
    /// different copies are not merged into one).
    fn note_copy(
        &mut self,
        type_: EventType,
        reason: &str,
        note: String,
        resource: &ApiResource,
        target: &CopyTarget,
    ) {
        let related = ObjectReference {
            api_version: Some(resource.api_version.clone()),
            kind: Some(resource.kind.clone()),
            namespace: target.namespace.clone(),
            name: Some(target.name.clone()),
            ..Default::default()
        };
        self.events.push((type_, reason.to_owned(), note, Some(related)));
    }

    async fn publish<R: RuleResource>(self, rule: &R, ctx: &Context) {
        let reference = rule.object_ref(&());
        let total = self.events.len();
        let mut events = self.events;
        // Warnings first: when there are more events than the cap, the problems must get through.
        events.sort_by_key(|(type_, ..)| *type_ != EventType::Warning);
        for (type_, reason, note, secondary) in events.into_iter().take(EVENTS_PER_RECONCILE) {
            let event = Event {
                type_,
                reason: reason.clone(),
                note: Some(short_message(&note)),
                action: reason,
                secondary,
            };
            if let Err(e) = ctx.recorder.publish(&event, &reference).await {
                tracing::debug!(error = %e, "publishing an event failed");
            }
        }
        if total > EVENTS_PER_RECONCILE {
            let event = Event {
                type_: EventType::Normal,
                reason: "MoreChanges".into(),
                note: Some(format!(
                    "and {} more changes to copies; see status.targets",
                    total - EVENTS_PER_RECONCILE
                )),
                action: "Reconcile".into(),
                secondary: None,
            };
            let _ = ctx.recorder.publish(&event, &reference).await;
        }
    }
}
