//! Carrying out what a rule's `openmcp.cloud/operation` annotation asks for
//! ([`crate::sync::operation`]): hands off under `ignore`, and the annotation removed after the
//! pass `reconcile` asked for.

use super::cleanup::let_go;
use super::events::EventLog;
use super::record;
use crate::controller::context::Context;
use crate::controller::error::Error;
use crate::controller::rule::RuleResource;
use crate::sync::operation::{OPERATION_ANNOTATION, Operation, requested};
use crate::sync::ownership::FINALIZER;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
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
    let api = rule.api(ctx.client.clone());
    Ok(clear_reconcile(&api, &rule.name_any(), rule.resource_version()).await?)
}

/// Removes `openmcp.cloud/operation: reconcile` from an object after the pass it asked for, each
/// try made on the version last read so that a user's `ignore` set meanwhile is never removed.
/// The pass itself often gives the object a new version (it wrote the status), and a status
/// write wakes no look: giving up on that conflict left the annotation in place (issue 56, 2 of
/// 3 tries), so a conflict reads the object again and tries once more while it still asks for a
/// pass.
pub(crate) async fn clear_reconcile<K>(
    api: &Api<K>,
    name: &str,
    mut version: Option<String>,
) -> kube::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for _ in 0..5 {
        let patch = json!({"metadata": {"resourceVersion": version,
                                        "annotations": {OPERATION_ANNOTATION: null}}});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
        let Some(now) = api.get_opt(name).await? else {
            return Ok(());
        };
        if requested(now.meta().annotations.as_ref()) != Some(Operation::Reconcile) {
            // Set to something else meanwhile, or removed: not this pass's to remove.
            return Ok(());
        }
        version = now.meta().resource_version.clone();
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response, StatusCode};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Client;
    use kube::client::Body;

    fn object(version: &str, operation: &str) -> Body {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "r", "namespace": "team", "resourceVersion": version,
                                         "annotations": {OPERATION_ANNOTATION: operation}}});
        Body::from(object.to_string().into_bytes())
    }

    fn conflict() -> Response<Body> {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "reason": "Conflict", "code": 409, "message": "the object has been modified"});
        Response::builder()
            .status(StatusCode::CONFLICT)
            .body(Body::from(status.to_string().into_bytes()))
            .unwrap()
    }

    /// Runs `clear_reconcile` from version 7 against an apiserver that refuses the first patch
    /// (the pass wrote the status) and then finds the annotation set to `now`; returns the
    /// requests made, with the versions their patches were made on.
    async fn clear_after_a_conflict(now: &'static str) -> Vec<String> {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let api = Api::<ConfigMap>::namespaced(Client::new(service, "default"), "team");
        let apiserver = tokio::spawn(async move {
            futures::pin_mut!(handle);
            let mut seen = Vec::new();
            while let Some((request, respond)) = handle.next_request().await {
                let method = request.method().to_string();
                let body = request.into_body().collect_bytes().await.unwrap();
                let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                match (method.as_str(), seen.len()) {
                    ("PATCH", 0) => respond.send_response(conflict()),
                    ("GET", _) => respond.send_response(Response::new(object("8", now))),
                    _ => respond.send_response(Response::new(object("9", "none"))),
                }
                let version = &body["metadata"]["resourceVersion"];
                seen.push(
                    format!("{method} {}", version.as_str().unwrap_or_default())
                        .trim()
                        .to_owned(),
                );
            }
            seen
        });
        clear_reconcile(&api, "r", Some("7".into())).await.unwrap();
        drop(api);
        apiserver.await.unwrap()
    }

    #[tokio::test]
    async fn a_conflict_after_the_pass_reads_again_and_removes_the_annotation_on_the_new_version() {
        assert_eq!(
            clear_after_a_conflict("reconcile").await,
            ["PATCH 7", "GET", "PATCH 8"]
        );
    }

    #[tokio::test]
    async fn an_operation_changed_meanwhile_is_left_as_it_is() {
        assert_eq!(clear_after_a_conflict("ignore").await, ["PATCH 7", "GET"]);
    }
}
