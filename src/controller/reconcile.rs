//! Reconciling one rule: gather (caches) -> decide (`sync`, pure) -> write -> status and events.

use super::Context;
use super::error::{Error, short_message};
use super::rule::RuleResource;
use super::status::{Readiness, summarize, with_ready};
use super::watches::{Interest, NamespaceInterest, SourceInterest, SourceWatchKey};
use super::write;
use crate::api::{CopyState, CopyStatus, RuleSpec, RuleStatus, SourceRef};
use crate::plugin::{ChainOutcome, TransformContext};
use crate::sync::consent::{accepts, not_accepted_message};
use crate::sync::desired::{CopyTarget, DesiredCopy, desired_copy};
use crate::sync::hash::digest;
use crate::sync::ownership::{FIELD_MANAGER, FINALIZER, Owner, RuleKey, RuleKind, owner_of};
use crate::sync::plan::{Decision, Write, decide};
use crate::sync::targets::{placements, selector};
use crate::sync::validate;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, SelectorExt};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::finalizer::{Error as FinalizerError, Event as FinalizerEvent, finalizer};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a healthy rule is looked at again even without events: cheap, as it writes nothing.
const RESYNC: Duration = Duration::from_secs(600);
/// How soon a rule with failed copies is retried.
const RETRY_FAILED: Duration = Duration::from_secs(15);
/// Writes in flight at once for one rule.
const WRITE_CONCURRENCY: usize = 16;
/// Per-copy events per reconcile; the rest are summed up in one.
const EVENTS_PER_RECONCILE: usize = 10;

/// The entry point the controller calls for every rule that needs a look.
pub async fn reconcile<R: RuleResource>(rule: Arc<R>, ctx: Arc<Context>) -> Result<Action, Error> {
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

/// Decides when a rule whose reconcile failed is tried again.
pub fn error_policy<R: RuleResource>(rule: Arc<R>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_failed(R::KIND, error.metric_label());
    tracing::warn!(rule = %rule.key(), error = %error, "reconcile failed");
    Action::requeue(error.retry_after())
}

/// One copy the rule wants, and what became of it.
struct Planned {
    target: CopyTarget,
    source: SourceRef,
    /// The source's resourceVersion, to measure propagation.
    source_version: Option<String>,
    state: CopyState,
    message: Option<String>,
    desired: Option<DesiredCopy>,
    live: Option<DynamicObject>,
    decision: Option<Decision>,
    /// Whatever copy is there now stays (a plugin failed: nothing is lost).
    keeps_previous: bool,
}

impl Planned {
    fn blocked(target: CopyTarget, source: SourceRef, state: CopyState, message: String) -> Self {
        Planned {
            target,
            source,
            source_version: None,
            state,
            message: Some(message),
            desired: None,
            live: None,
            decision: None,
            keeps_previous: false,
        }
    }

    /// Whether the rule means to hold a copy here (so an owned copy here is not removed).
    fn holds_copy(&self) -> bool {
        self.keeps_previous
            || matches!(self.decision, Some(Decision::InSync | Decision::Write(_)))
            || (self.state == CopyState::Failed && self.decision.is_none() && self.desired.is_some())
    }
}

async fn apply<R: RuleResource>(rule: Arc<R>, ctx: &Context) -> Result<Action, Error> {
    let key = rule.key();
    let spec = rule.rule_spec();
    let previous = rule.rule_status();
    ctx.watches.wait_ready().await?;

    let resource = match validate::check(spec) {
        Ok(resource) => resource,
        Err(problem) => {
            ctx.watches.forget(&key);
            let ready = Readiness {
                ready: false,
                reason: problem.reason.into(),
                message: problem.message,
            };
            refuse(&*rule, ctx, previous, ready).await?;
            return Ok(Action::await_change());
        }
    };
    let source_ns = rule.source_namespace().unwrap_or_default();

    // The transform chain: every plugin loaded and its config accepted, or nothing changes.
    let chain = match ctx
        .plugins
        .chain(&spec.transforms, key.namespace.as_deref())
        .await
    {
        Ok(chain) => chain,
        Err(problem) => {
            let ready = Readiness {
                ready: false,
                reason: "PluginUnavailable".into(),
                message: problem.to_string(),
            };
            refuse(&*rule, ctx, previous, ready).await?;
            // A plugin file or ConfigMap that appears later is noticed on the next look.
            return Ok(Action::requeue(RETRY_FAILED));
        }
    };

    // Gather: declare what this rule watches, then read the caches.
    let source_selector = spec.source.selector.as_ref().and_then(|s| selector(s).ok());
    let previously_matched: BTreeSet<String> = previous
        .map(|p| p.targets.iter().map(|c| c.source.name.clone()).collect())
        .unwrap_or_default();
    let interest = Interest {
        source: Some(SourceInterest {
            watch: SourceWatchKey::new(&resource, &source_ns),
            resource: resource.clone(),
            name: spec.source.name.clone(),
            selector: source_selector.clone(),
            matched: previously_matched,
        }),
        namespaces: NamespaceInterest {
            names: spec.targets.iter().filter_map(|t| t.namespace.clone()).collect(),
            any: spec.targets.iter().any(|t| t.namespace_selector.is_some()),
        },
    };
    let store = ctx
        .watches
        .declare(&key, interest)
        .await?
        .ok_or_else(|| Error::NotReady("no source cache".into()))?;
    let mut sources: Vec<Arc<DynamicObject>> = store
        .state()
        .into_iter()
        .filter(|o| o.namespace().as_deref() == Some(source_ns.as_str()))
        .filter(|o| match (&spec.source.name, &source_selector) {
            (Some(name), _) => o.name_any() == *name,
            (None, Some(sel)) => sel.matches(o.labels()),
            (None, None) => false,
        })
        .collect();
    sources.sort_by_key(|o| o.name_any());
    ctx.watches
        .set_matched(&key, sources.iter().map(|o| o.name_any()).collect());
    let namespaces = ctx.watches.namespaces();
    let annotations: HashMap<&str, &BTreeMap<String, String>> = namespaces
        .iter()
        .map(|n| (n.name.as_str(), &n.annotations))
        .collect();
    let places = placements(&spec.targets, &namespaces).unwrap_or_default();

    // Decide: every (source, place) pair is one copy.
    let mut planned = Vec::new();
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
        source_hashes.push((
            source_ref.name.clone(),
            crate::sync::desired::source_hash(&source_json),
        ));
        for place in &places {
            let target = CopyTarget {
                cluster: None,
                namespace: Some(place.namespace.clone()),
                name: place.rename.clone().unwrap_or_else(|| source.name_any()),
            };
            if target.namespace == source_ref.namespace && target.name == source_ref.name {
                // A selector that matches the source's own namespace: the source is not its own copy.
                continue;
            }
            if !taken.insert((target.namespace.clone(), target.name.clone())) {
                let why =
                    "another source of this rule maps to the same copy; give each target its own name".into();
                planned.push(Planned::blocked(
                    target,
                    source_ref.clone(),
                    CopyState::Conflict,
                    why,
                ));
                continue;
            }
            if !place.exists {
                let why = format!("namespace {} does not exist or is being deleted", place.namespace);
                planned.push(Planned::blocked(
                    target,
                    source_ref.clone(),
                    CopyState::NamespaceMissing,
                    why,
                ));
                continue;
            }
            if !accepts(
                &key,
                &place.namespace,
                annotations.get(place.namespace.as_str()).copied(),
            ) {
                let why = not_accepted_message(&key, &place.namespace);
                planned.push(Planned::blocked(
                    target,
                    source_ref.clone(),
                    CopyState::NotAccepted,
                    why,
                ));
                continue;
            }
            let mut desired = desired_copy(&key, &spec.metadata, &source_json, &source_ref, target.clone());
            if !chain.is_empty() {
                let plugin_ctx = TransformContext {
                    rule: key.to_string(),
                    source_api_version: resource.api_version.clone(),
                    source_kind: resource.kind.clone(),
                    source_namespace: source_ref.namespace.clone(),
                    source_name: source_ref.name.clone(),
                    source_cluster: String::new(),
                    target_cluster: String::new(),
                    target_namespace: target.namespace.clone(),
                    target_name: target.name.clone(),
                };
                match ctx.plugins.run(&chain, plugin_ctx, desired.object.clone()).await {
                    Ok(ChainOutcome::Write(object)) => desired.replace_object(object),
                    Ok(ChainOutcome::Skip { plugin, reason }) => {
                        let why = format!("skipped by plugin {plugin}: {reason}");
                        planned.push(Planned::blocked(
                            target,
                            source_ref.clone(),
                            CopyState::Skipped,
                            why,
                        ));
                        continue;
                    }
                    Err(e) => {
                        ctx.metrics.plugin_failed(e.error.label());
                        let mut failed = Planned::blocked(
                            target,
                            source_ref.clone(),
                            CopyState::PluginFailed,
                            short_message(&e.to_string()),
                        );
                        failed.keeps_previous = true;
                        planned.push(failed);
                        continue;
                    }
                }
            }
            let mut plan = Planned {
                target,
                source: source_ref.clone(),
                source_version: source.resource_version(),
                state: CopyState::Synced,
                message: None,
                desired: None,
                live: None,
                decision: None,
                keeps_previous: false,
            };
            match live_object(ctx, &resource, &place.namespace, &desired.target.name).await {
                Ok(live) => {
                    let may_take_over = key.kind == RuleKind::ClusterSyncRule
                        || key.namespace.as_deref() == Some(&place.namespace);
                    plan.decision = Some(decide(
                        &key,
                        &desired,
                        live.as_ref(),
                        spec.conflict,
                        may_take_over,
                    ));
                    plan.live = live;
                }
                Err(e) => {
                    plan.state = CopyState::Failed;
                    plan.message = Some(short_message(&format!("reading the current object: {e}")));
                }
            }
            plan.desired = Some(desired);
            planned.push(plan);
        }
    }

    // Write.
    let mut events = EventLog::default();
    // Owned jobs: borrowed ones trip up the `Send` proof of the reconcile future.
    let jobs: Vec<(usize, Write, DesiredCopy, Option<DynamicObject>)> = planned
        .iter()
        .enumerate()
        .filter_map(|(i, p)| match (&p.decision, &p.desired) {
            (Some(Decision::Write(how)), Some(desired)) => Some((i, *how, desired.clone(), p.live.clone())),
            _ => None,
        })
        .collect();
    let (client, kind) = (ctx.client.clone(), resource.clone());
    let results: Vec<(usize, Write, kube::Result<()>)> = futures::stream::iter(jobs)
        .map(move |(i, how, desired, live)| {
            let (client, kind) = (client.clone(), kind.clone());
            async move {
                (
                    i,
                    how,
                    write::write(&client, &kind, &desired, live.as_ref(), how).await,
                )
            }
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect()
        .await;
    for (i, how, result) in results {
        let plan = &mut planned[i];
        let place = place_of(&plan.target);
        match result {
            Ok(()) => {
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
                    ctx.watches.seen_at(
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
                plan.state = CopyState::Failed;
                plan.message = Some(short_message(&format!("writing the copy: {e}")));
                plan.decision = None;
            }
        }
    }
    for plan in planned.iter_mut() {
        if let Some(Decision::Conflict(why)) = &plan.decision {
            plan.state = CopyState::Conflict;
            plan.message = Some(why.clone());
        }
    }

    // Remove what the rule owns but no longer wants.
    let keep: BTreeSet<(Option<String>, String)> = planned
        .iter()
        .filter(|p| p.holds_copy())
        .map(|p| (p.target.namespace.clone(), p.target.name.clone()))
        .collect();
    let mut leftovers = Vec::new();
    for (kind, namespace, name, source) in owned_copies(ctx, &key, &resource, previous) {
        if kind == resource && keep.contains(&(namespace.clone(), name.clone())) {
            continue;
        }
        match remove_owned(ctx, &key, &kind, namespace.as_deref(), &name, spec).await {
            Ok(Some(done)) => {
                ctx.metrics.wrote(done);
                let target = CopyTarget {
                    cluster: None,
                    namespace: namespace.clone(),
                    name: name.clone(),
                };
                let place = place_of(&target);
                let what = if done == "delete" { "Deleted" } else { "Orphaned" };
                tracing::info!(rule = %key, copy = %place, verb = done, "removed a copy that is no longer wanted");
                events.note_copy(
                    EventType::Normal,
                    &format!("Copy{what}"),
                    format!(
                        "{what} copy {place}: no longer wanted there (its namespace no longer matches, \
                         accepts copies or exists, or the source is gone)"
                    ),
                    &kind,
                    &target,
                );
            }
            Ok(None) => {}
            Err(e) => leftovers.push(CopyStatus {
                source,
                cluster: None,
                namespace,
                name,
                state: CopyState::Failed,
                hash: None,
                message: Some(short_message(&format!(
                    "removing a copy that is no longer wanted: {e}"
                ))),
            }),
        }
    }

    // Status.
    let mut inventory: Vec<CopyStatus> = planned
        .iter()
        .map(|p| CopyStatus {
            source: p.source.clone(),
            cluster: None,
            namespace: p.target.namespace.clone(),
            name: p.target.name.clone(),
            state: p.state,
            hash: match p.state {
                CopyState::Synced => p.desired.as_ref().map(|d| d.hash.clone()),
                _ => None,
            },
            message: p.message.clone(),
        })
        .chain(leftovers)
        .collect();
    inventory.sort_by(|a, b| (&a.namespace, &a.name, &a.source).cmp(&(&b.namespace, &b.name, &b.source)));
    let source_hash = (!source_hashes.is_empty()).then(|| digest(&json!(source_hashes)));
    let ready = match (&spec.source.name, sources.is_empty()) {
        (Some(name), true) => Readiness {
            ready: false,
            reason: "SourceNotFound".into(),
            message: format!(
                "{} {source_ns}/{name} does not exist; copies follow as soon as it does",
                spec.source.kind
            ),
        },
        (None, true) => Readiness {
            ready: true,
            reason: "NothingToCopy".into(),
            message: format!("no {} in {source_ns} matches the selector", spec.source.kind),
        },
        _ => summarize(&inventory),
    };
    let synced = inventory.iter().filter(|c| c.state == CopyState::Synced).count();
    let mut by_state: HashMap<String, i64> = HashMap::new();
    for copy in &inventory {
        *by_state.entry(format!("{:?}", copy.state)).or_default() += 1;
    }
    ctx.metrics.set_copies(&key.to_string(), Some(by_state));
    for copy in &inventory {
        let was = previous.and_then(|p| {
            p.targets
                .iter()
                .find(|c| c.namespace == copy.namespace && c.name == copy.name)
        });
        if copy.state != CopyState::Synced && was.is_none_or(|w| w.state != copy.state) {
            let target = CopyTarget {
                cluster: None,
                namespace: copy.namespace.clone(),
                name: copy.name.clone(),
            };
            let place = place_of(&target);
            let note = format!("copy {place}: {}", copy.message.clone().unwrap_or_default());
            tracing::warn!(rule = %key, copy = %place, state = ?copy.state, message = copy.message.as_deref().unwrap_or_default(), "copy not in sync");
            // A skip is the plugin's decision, reported as information rather than a warning.
            let type_ = if copy.state == CopyState::Skipped {
                EventType::Normal
            } else {
                EventType::Warning
            };
            events.note_copy(type_, &format!("{:?}", copy.state), note, &resource, &target);
        }
    }
    if ready.reason == "SourceNotFound" {
        publish_problem(&*rule, ctx, previous, &ready).await;
    }
    events.publish(&*rule, ctx).await;

    let any_failed = inventory
        .iter()
        .any(|c| matches!(c.state, CopyState::Failed | CopyState::PluginFailed));
    let status = RuleStatus {
        source_hash,
        copies: Some(format!("{synced}/{}", inventory.len())),
        targets: inventory,
        ..Default::default()
    };
    write_status(
        &*rule,
        ctx,
        with_ready(status, previous, rule.meta().generation, ready),
    )
    .await?;
    Ok(Action::requeue(if any_failed { RETRY_FAILED } else { RESYNC }))
}

async fn cleanup<R: RuleResource>(rule: Arc<R>, ctx: &Context) -> Result<Action, Error> {
    let key = rule.key();
    let spec = rule.rule_spec();
    ctx.watches.wait_ready().await?;
    let resource = validate::check(spec).ok();
    let mut failures = Vec::new();
    let mut removed = 0;
    let candidates = match &resource {
        Some(resource) => owned_copies(ctx, &key, resource, rule.rule_status()),
        None => ctx
            .watches
            .copies_of(&key)
            .into_iter()
            .map(|(r, c)| (r, c.namespace(), c.name_any(), source_of(&c)))
            .collect(),
    };
    for (kind, namespace, name, _) in candidates {
        match remove_owned(ctx, &key, &kind, namespace.as_deref(), &name, spec).await {
            Ok(Some(done)) => {
                ctx.metrics.wrote(done);
                removed += 1;
            }
            Ok(None) => {}
            Err(e) => failures.push(format!("{}/{name}: {e}", namespace.unwrap_or_default())),
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
    ctx.watches.forget(&key);
    ctx.metrics.set_copies(&key.to_string(), None);
    Ok(Action::await_change())
}

/// The object now at a copy's place: from the copies cache if it is a copy, else from the API.
async fn live_object(
    ctx: &Context,
    resource: &ApiResource,
    namespace: &str,
    name: &str,
) -> kube::Result<Option<DynamicObject>> {
    if let Some(cached) = ctx.watches.cached_copy(resource, namespace, name) {
        return Ok(Some((*cached).clone()));
    }
    write::get(&ctx.client, resource, Some(namespace), name).await
}

/// Every copy the rule may own: cached copies recording it, and the inventory's written copies.
fn owned_copies(
    ctx: &Context,
    key: &RuleKey,
    resource: &ApiResource,
    previous: Option<&RuleStatus>,
) -> Vec<(ApiResource, Option<String>, String, SourceRef)> {
    let mut out: BTreeMap<(String, Option<String>, String), (ApiResource, SourceRef)> = BTreeMap::new();
    for (kind, copy) in ctx.watches.copies_of(key) {
        out.insert(
            (kind.plural.clone(), copy.namespace(), copy.name_any()),
            (kind, source_of(&copy)),
        );
    }
    for copy in previous.map(|p| p.targets.as_slice()).unwrap_or_default() {
        if matches!(
            copy.state,
            CopyState::Synced | CopyState::Failed | CopyState::PluginFailed
        ) {
            out.entry((resource.plural.clone(), copy.namespace.clone(), copy.name.clone()))
                .or_insert_with(|| (resource.clone(), copy.source.clone()));
        }
    }
    out.into_iter()
        .map(|((_, ns, name), (kind, source))| (kind, ns, name, source))
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
    ctx: &Context,
    key: &RuleKey,
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
    spec: &RuleSpec,
) -> kube::Result<Option<&'static str>> {
    let live = match namespace.and_then(|ns| ctx.watches.cached_copy(resource, ns, name)) {
        Some(cached) => Some((*cached).clone()),
        None => write::get(&ctx.client, resource, namespace, name).await?,
    };
    let Some(live) = live else { return Ok(None) };
    if owner_of(&live.metadata, key) != Owner::ThisRule {
        return Ok(None);
    }
    write::remove(&ctx.client, resource, &live, spec.deletion).await?;
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
    publish_problem(rule, ctx, previous, &ready).await;
    let keep = previous.cloned().unwrap_or_default();
    write_status(
        rule,
        ctx,
        with_ready(keep, previous, rule.meta().generation, ready),
    )
    .await
}

/// Writes the status with server-side apply, only when it differs from what is there.
async fn write_status<R: RuleResource>(rule: &R, ctx: &Context, status: RuleStatus) -> Result<(), Error> {
    if rule.rule_status() == Some(&status) {
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
    Ok(())
}

/// A warning event for a rule-level problem, once per change of reason.
async fn publish_problem<R: RuleResource>(
    rule: &R,
    ctx: &Context,
    previous: Option<&RuleStatus>,
    ready: &Readiness,
) {
    tracing::warn!(rule = %rule.key(), reason = %ready.reason, message = %ready.message, "rule cannot be acted on");
    let before = previous
        .and_then(|p| p.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.reason.as_str());
    if before == Some(ready.reason.as_str()) {
        return;
    }
    let mut log = EventLog::default();
    log.note(EventType::Warning, &ready.reason, ready.message.clone());
    log.publish(rule, ctx).await;
}

fn place_of(target: &CopyTarget) -> String {
    match &target.namespace {
        Some(ns) => format!("{ns}/{}", target.name),
        None => target.name.clone(),
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
