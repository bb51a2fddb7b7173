//! The record step: the rule's status (the inventory of copies and `Ready`), its events and
//! metrics, and when to look at it again. It writes the status and events, nothing else.

use super::carry_out::Outcome;
use super::events::EventLog;
use super::gather::Gathered;
use super::places::place_of;
use super::requests::RETRY_UNREACHABLE;
use super::stop::{Next, Refusal};
use crate::api::{CopyState, CopyStatus, RuleStatus};
use crate::clusters::fence::Fence;
use crate::controller::context::Context;
use crate::controller::error::Error;
use crate::controller::rule::RuleResource;
use crate::controller::rule_status::{
    LastWritten, Readiness, Unusable, date_problems, needs_write, plugins_not_refreshed, source_shown,
    still_unsealed, summarize, summarize_copies, with_ready,
};
use crate::sync::consent::not_shared_message;
use crate::sync::desired::CopyTarget;
use crate::sync::hash::digest;
use crate::sync::operation::OPERATION_ANNOTATION;
use crate::sync::ownership::FIELD_MANAGER;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use serde_json::json;
use std::collections::HashMap;
use std::time::Duration;

/// How often a healthy rule is looked at again even without events: cheap, as it writes nothing.
const RESYNC: Duration = Duration::from_secs(600);

/// Records what the reconcile did: metrics, an event for each copy that went out of sync, the
/// rule's problem if it has one, and the status; returns when to look again.
pub(super) async fn record<R: RuleResource>(
    rule: &R,
    ctx: &Context,
    gathered: &Gathered<'_>,
    outcome: Outcome,
) -> Result<Action, Error> {
    let Outcome {
        plan,
        leftovers,
        mut events,
        ..
    } = outcome;
    let (inventory, event_notes) = plan.inventory(leftovers);
    // A cluster the rule no longer targets and now holds nothing in is let go at once, not at the
    // rule's next look: an inventory gives its access back when no rule uses a cluster.
    let still_used: std::collections::BTreeSet<String> = gathered
        .clusters
        .iter()
        .filter(|c| !c.targets.is_empty() || (c.holds && c.usable.is_err()))
        .filter_map(|c| c.name.clone())
        .chain(inventory.iter().filter_map(|c| c.cluster.clone()))
        .chain(gathered.source_cluster.iter().cloned())
        .chain(gathered.order_clusters.iter().cloned())
        .collect();
    let selects = gathered.spec.targets.iter().any(|t| t.cluster_selector.is_some());
    ctx.fleet.uses(&gathered.key, still_used, selects);
    let ready = readiness(gathered, &inventory);
    let mut counts = crate::metrics::CopyCounts::new();
    for copy in &inventory {
        *counts
            .entry((copy.cluster.clone(), format!("{:?}", copy.state)))
            .or_default() += 1;
    }
    ctx.metrics.set_copies(&gathered.key.to_string(), Some(counts));
    note_changes(&mut events, gathered, &inventory, &event_notes);
    if ready.reason == "SourceNotFound"
        || ready.reason == "SourceNotShared"
        || gathered.next_to_problem.is_some()
    {
        publish_problem(rule, ctx, gathered.previous, &ready, ready.message.clone()).await;
    }
    let publishing = std::time::Instant::now();
    let published = events.publish(rule, ctx).await;
    let published_in = publishing.elapsed();

    let failing = inventory.iter().any(|c| {
        matches!(
            c.state,
            CopyState::Failed | CopyState::PluginFailed | CopyState::Unauthorized
        )
    });
    let unreachable = inventory.iter().any(|c| c.state == CopyState::Unreachable);
    let next_look = if failing {
        ctx.retries.failed(&gathered.key, None)
    } else {
        ctx.retries.succeeded(&gathered.key);
        // The cluster's prober wakes the rule when the cluster answers again.
        if unreachable { RETRY_UNREACHABLE } else { RESYNC }
    };
    // A followed kind that cannot be read is looked at again soon, besides the wake-ups of its
    // watch listing or its CustomResourceDefinition appearing.
    let next_look = match gathered.next_to_problem {
        Some(_) => next_look.min(NEXT_TO_RETRY),
        None => next_look,
    };
    // A pinned tag due to be resolved again brings the next look forward.
    let next_look = gathered
        .chain
        .refresh_in
        .map_or(next_look, |due| next_look.min(due));
    let writing = std::time::Instant::now();
    let status = status(gathered, &inventory, ready);
    let wrote = write_status(rule, ctx, status, Some(inventory)).await?;
    tracing::debug!(
        rule = %gathered.key,
        events = published,
        events_ms = published_in.as_secs_f64() * 1000.0,
        status_written = wrote,
        status_ms = writing.elapsed().as_secs_f64() * 1000.0,
        "recorded"
    );
    Ok(Action::requeue(next_look))
}

/// How soon a rule whose `nextTo` cannot be followed is looked at again.
const NEXT_TO_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

/// `Ready`: a `nextTo` that cannot be followed, else whether the source is there (and shared
/// with the rule), else what the copies say.
fn readiness(gathered: &Gathered<'_>, inventory: &[CopyStatus]) -> Readiness {
    let ready = source_readiness(gathered, inventory);
    match &gathered.next_to_problem {
        Some(problem) => Readiness::not_ready(
            problem.reason,
            format!("{}; the rule's other targets: {}", problem.message, ready.message),
        ),
        None => ready,
    }
}

fn source_readiness(gathered: &Gathered<'_>, inventory: &[CopyStatus]) -> Readiness {
    let (spec, source_ns) = (gathered.spec, &gathered.source_ns);
    let in_cluster = match &gathered.source_cluster {
        Some(cluster) => format!(" of RemoteCluster {cluster}"),
        None => String::new(),
    };
    let no_sources = gathered.sources.is_empty();
    let ready = match (&spec.source.name, no_sources) {
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
        _ => summarize(inventory),
    };
    match &gathered.source_cluster {
        Some(cluster) if gathered.unshared > 0 && (ready.ready || no_sources) => Readiness::not_ready(
            "SourceNotShared",
            not_shared_message(
                &gathered.key,
                cluster,
                spec.source.name.is_some(),
                gathered.unshared,
            ),
        ),
        _ => ready,
    }
}

/// An event for each copy that is not in sync and was not in this state before.
fn note_changes(
    events: &mut EventLog,
    gathered: &Gathered<'_>,
    inventory: &[CopyStatus],
    event_notes: &HashMap<CopyTarget, String>,
) {
    for copy in inventory {
        let was = gathered
            .previous_copies
            .iter()
            .find(|c| c.cluster == copy.cluster && c.namespace == copy.namespace && c.name == copy.name);
        // A copy counted rather than listed last time, in a state counted then, is no news.
        let counted_before = was.is_none()
            && gathered.previous.is_some_and(|p| {
                p.more_problems.is_some() && p.counts.contains_key(&format!("{:?}", copy.state))
            });
        if copy.state == CopyState::Synced || counted_before || was.is_some_and(|w| w.state == copy.state) {
            continue;
        }
        let target = CopyTarget {
            cluster: copy.cluster.clone(),
            namespace: copy.namespace.clone(),
            name: copy.name.clone(),
        };
        let place = place_of(&target);
        let said = event_notes.get(&target).or(copy.message.as_ref());
        let note = format!("copy {place}: {}", said.cloned().unwrap_or_default());
        tracing::warn!(rule = %gathered.key, copy = %place, state = ?copy.state, why = copy.message.as_deref().unwrap_or_default(), "copy not in sync");
        // A skip is the plugin's decision, reported as information rather than a warning.
        let type_ = if copy.state == CopyState::Skipped {
            EventType::Normal
        } else {
            EventType::Warning
        };
        events.note_copy(
            type_,
            &format!("{:?}", copy.state),
            note,
            &gathered.resource,
            &target,
        );
    }
}

/// The status: the copies counted (with the problems named), the sources' digest, the chain's
/// pins and `Ready`.
fn status(gathered: &Gathered<'_>, inventory: &[CopyStatus], ready: Readiness) -> RuleStatus {
    let source_hashes: Vec<(String, String)> = gathered
        .sources
        .iter()
        .map(|s| (s.reference.name.clone(), s.template.source_hash().to_owned()))
        .collect();
    let source_hash = (!source_hashes.is_empty()).then(|| digest(&json!(source_hashes)));
    let unusable: Vec<Unusable> = gathered
        .clusters
        .iter()
        .filter(|c| c.holds)
        .filter_map(|c| {
            Some(Unusable {
                cluster: c.name.clone(),
                state: c.usable.as_ref().err()?.state,
            })
        })
        .collect();
    let before = gathered
        .previous
        .map(|p| p.clusters.as_slice())
        .unwrap_or_default();
    let mut summary = summarize_copies(inventory, &unusable, before);
    let problems_before = gathered
        .previous
        .map(|p| p.problems.as_slice())
        .unwrap_or_default();
    date_problems(
        &mut summary.problems,
        problems_before,
        &Time(k8s_openapi::jiff::Timestamp::now()),
    );
    let legacy = gathered
        .previous
        .map(|p| p.targets.as_slice())
        .unwrap_or_default();
    let status = RuleStatus {
        source_hash,
        copies: Some(summary.copies),
        counts: summary.counts,
        clusters: summary.clusters,
        problems: summary.problems,
        more_problems: summary.more_problems,
        targets: still_unsealed(legacy, inventory),
        plugins: gathered.chain.pins.clone(),
        ..Default::default()
    };
    let mut status = with_ready(status, gathered.previous, gathered.generation, ready);
    status.conditions.extend(plugins_not_refreshed(
        gathered.previous.map(|p| p.conditions.as_slice()),
        gathered.generation,
        &gathered.chain.not_refreshed,
    ));
    status
}

/// Reports a rule that cannot be acted on: a warning event and `Ready=False`, keeping the rest
/// of the status as it was (its copies are left alone); returns when to look again.
pub(super) async fn refusal<R: RuleResource>(
    rule: &R,
    ctx: &Context,
    refusal: Refusal,
) -> Result<Action, Error> {
    let Refusal {
        ready,
        note,
        kept,
        next,
    } = refusal;
    let note = note.unwrap_or_else(|| ready.message.clone());
    publish_problem(rule, ctx, kept.as_ref(), &ready, note).await;
    let status = with_ready(
        kept.clone().unwrap_or_default(),
        kept.as_ref(),
        rule.meta().generation,
        ready,
    );
    write_status(rule, ctx, status, None).await?;
    Ok(match next {
        Next::AwaitChange => {
            ctx.retries.waits(&rule.key());
            Action::await_change()
        }
        Next::Backoff => Action::requeue(ctx.retries.failed(&rule.key(), None)),
        Next::After(after) => {
            ctx.retries.waits(&rule.key());
            Action::requeue(after)
        }
    })
}

/// Reports a rule its `openmcp.cloud/operation: ignore` annotation keeps mimeo's hands off.
pub(super) async fn ignored<R: RuleResource>(rule: &R, ctx: &Context) -> Result<Action, Error> {
    let message = format!(
        "annotated {OPERATION_ANNOTATION}: ignore: mimeo writes and removes nothing for this rule, not even when it is deleted (its copies then stay where they are); remove the annotation to go on"
    );
    held_back(rule, ctx, Readiness::not_ready("Ignored", message)).await
}

/// Reports a rule its `spec.suspend` stops.
pub(super) async fn suspended<R: RuleResource>(rule: &R, ctx: &Context) -> Result<Action, Error> {
    let message = "spec.suspend is true: mimeo writes and removes nothing for this rule and its copies stay as they are; set it to false (mimeo resume) to go on. Deleting the rule still removes its copies per deletion".to_owned();
    held_back(rule, ctx, Readiness::not_ready("Suspended", message)).await
}

/// A rule mimeo is told to leave alone: `Ready=False` with why, the rest of the status (its
/// copies as last seen) as it was, and one Normal event when it starts. Nothing else is written
/// until it is let go.
async fn held_back<R: RuleResource>(rule: &R, ctx: &Context, ready: Readiness) -> Result<Action, Error> {
    let kept = rule.rule_status();
    let before = kept
        .and_then(|k| k.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.reason.as_str());
    if before != Some(ready.reason.as_str()) {
        let mut log = EventLog::default();
        log.note(EventType::Normal, &ready.reason, ready.message.clone());
        log.publish(rule, ctx).await;
    }
    let status = with_ready(
        kept.cloned().unwrap_or_default(),
        kept,
        rule.meta().generation,
        ready,
    );
    write_status(rule, ctx, status, None).await?;
    Ok(Action::await_change())
}

/// Writes the status with server-side apply, only when it differs from what is there; says
/// whether it wrote.
/// `copies` is every copy the reconcile found, remembered in memory whether or not the status
/// changed (`None`: as last remembered).
async fn write_status<R: RuleResource>(
    rule: &R,
    ctx: &Context,
    mut status: RuleStatus,
    copies: Option<Vec<CopyStatus>>,
) -> Result<bool, Error> {
    let key = rule.key();
    let uid = rule.meta().uid.clone().unwrap_or_default();
    let last = ctx
        .statuses
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned();
    let copies = copies.unwrap_or_else(|| {
        last.as_ref()
            .and_then(|l| l.copies_of(&uid))
            .map(<[CopyStatus]>::to_vec)
            .unwrap_or_default()
    });
    Fence::for_rule(&ctx.shards, &key).check()?;
    status.source = source_shown(&rule.rule_spec().source);
    if !needs_write(&mut status, rule.rule_status(), last.as_ref(), &uid) {
        ctx.statuses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, LastWritten::of(&uid, &status, copies));
        return Ok(false);
    }
    // Serialized straight from the status, and the reply read past: at 10,000 copies a JSON
    // tree of the inventory, or the rule the apiserver sends back, is megabytes held for nothing.
    let patch = StatusApply {
        api_version: R::api_version(&()),
        kind: R::kind(&()),
        status: &status,
    };
    let mut request = kube::core::Request::new(R::url_path(&(), rule.namespace().as_deref()))
        .patch_subresource(
            "status",
            &rule.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert("patch_status");
    ctx.client.request::<serde::de::IgnoredAny>(request).await?;
    ctx.statuses
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, LastWritten::of(&uid, &status, copies));
    Ok(true)
}

/// The body of a status apply.
#[derive(serde::Serialize)]
struct StatusApply<'a> {
    #[serde(rename = "apiVersion")]
    api_version: std::borrow::Cow<'a, str>,
    kind: std::borrow::Cow<'a, str>,
    status: &'a RuleStatus,
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
