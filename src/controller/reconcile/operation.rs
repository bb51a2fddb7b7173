//! Carrying out what a rule's `openmcp.cloud/operation` annotation asks for
//! ([`crate::sync::operation`]): hands off under `ignore`, and the annotation removed after the
//! pass `reconcile` asked for.

use super::cleanup::let_go;
use super::events::EventLog;
use super::record;
use crate::controller::context::Context;
use crate::controller::error::Error;
use crate::controller::rule::RuleResource;
use crate::sync::operation::OPERATION_ANNOTATION;
use crate::sync::ownership::FINALIZER;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use serde_json::json;

/// A rule under `ignore`: this replica forgets it (watches, caches, metrics) and writes only its
/// status. Deleted, it lets go of its finalizer without touching its copies, which stay where
/// they are.
pub(super) async fn ignore<R: RuleResource>(rule: &R, ctx: &Context) -> Result<Action, Error> {
    let_go(ctx, &rule.key());
    if rule.meta().deletion_timestamp.is_none() {
        return record::ignored(rule, ctx).await;
    }
    if !rule.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let mut log = EventLog::default();
    log.note(
        EventType::Normal,
        "Ignored",
        format!(
            "deleted while annotated {OPERATION_ANNOTATION}: ignore: its copies were left where they are"
        ),
    );
    log.publish(rule, ctx).await;
    let others: Vec<&String> = rule.finalizers().iter().filter(|f| *f != FINALIZER).collect();
    patch_metadata(rule, ctx, json!({"finalizers": others})).await?;
    Ok(Action::await_change())
}

/// After the pass `reconcile` asked for: removes the annotation, unless it changed meanwhile.
pub(super) async fn reconciled<R: RuleResource>(rule: &R, ctx: &Context) -> Result<(), Error> {
    patch_metadata(rule, ctx, json!({"annotations": {OPERATION_ANNOTATION: null}})).await
}

/// A merge patch of the rule's metadata, made only on the version this pass read: if the rule
/// changed meanwhile (a conflict) or went, the change wakes the next look, which decides again.
async fn patch_metadata<R: RuleResource>(
    rule: &R,
    ctx: &Context,
    mut metadata: serde_json::Value,
) -> Result<(), Error> {
    metadata["resourceVersion"] = json!(rule.resource_version());
    let patch = json!({"metadata": metadata});
    match rule
        .api(ctx.client.clone())
        .patch(&rule.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
