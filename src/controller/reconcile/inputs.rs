//! A rule's inputs in a reconcile: where each is read from (its kind resolved in the source's
//! cluster, its namespace by `sync::inputs`), the watch that wakes the rule when one changes, and
//! the objects read from those caches for the plugins. An input that is missing stops the rule
//! before anything is written: a copy made without it would be a different copy.

use super::stop::{Next, Refusal, Stop};
use crate::api::{RuleSpec, RuleStatus};
use crate::controller::rule_status::Readiness;
use crate::controller::watches::{SourceInterest, SourceWatchKey};
use crate::plugin::TransformInput;
use crate::sync::consent::shares;
use crate::sync::desired::strip_uncarried;
use crate::sync::hash::digest;
use crate::sync::inputs::namespace_of;
use crate::sync::kinds::KindRef;
use crate::sync::ownership::{RuleKey, SHARE_WITH_ANNOTATION};
use crate::sync::protected::refused_input;
use crate::sync::scope::Scope;
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::{Value, json};
use std::sync::Arc;

/// One input, placed: its resource and namespace, and the watch that serves it.
pub(crate) struct PlacedInput {
    pub name: String,
    pub resource: ApiResource,
    pub namespace: Option<String>,
    pub object_name: String,
    pub interest: SourceInterest,
}

/// The inputs as the plugins get them, and a digest over them for the chain's memory.
pub(crate) struct ReadInputs {
    pub inputs: Arc<[TransformInput]>,
    pub hash: String,
}

fn stop(previous: Option<&RuleStatus>, reason: &str, message: String, next: Next) -> Stop {
    Stop::Refused(Box::new(Refusal {
        ready: Readiness::not_ready(reason, message),
        note: None,
        kept: previous.cloned(),
        next,
    }))
}

/// Where each input is read from, in the source's cluster, given what its discovery said of each
/// input's kind (`resolved`, in the rule's order).
pub(crate) fn place(
    scope: &Scope,
    key: &RuleKey,
    spec: &RuleSpec,
    resolved: Vec<kube::Result<Option<(ApiResource, bool)>>>,
    source_namespace: Option<&str>,
    previous: Option<&RuleStatus>,
) -> Result<Vec<PlacedInput>, Stop> {
    let mut placed = Vec::with_capacity(spec.inputs.len());
    for (input, resolved) in spec.inputs.iter().zip(resolved) {
        let kind = KindRef::of_input(&input.from);
        let (resource, namespaced) = match resolved {
            Ok(Some(found)) => found,
            Ok(None) => {
                let message = format!(
                    "input {}: the source's cluster does not serve {kind}: no such kind, or its \
                     CustomResourceDefinition is not installed",
                    input.name
                );
                return Err(stop(previous, "KindNotServed", message, Next::Backoff));
            }
            Err(e) => return Err(Stop::Failed(e.into())),
        };
        let namespace = namespace_of(
            key.kind,
            key.namespace.as_deref(),
            source_namespace,
            input,
            namespaced,
        )
        .map_err(|p| stop(previous, p.reason, p.message, Next::AwaitChange))?;
        if let Some(why) = namespace.as_deref().and_then(|ns| scope.outside(ns)) {
            let message = format!("input {}: {why}", input.name);
            return Err(stop(previous, "InputNotWatched", message, Next::AwaitChange));
        }
        let interest = SourceInterest {
            watch: SourceWatchKey::new(&resource, namespace.as_deref().unwrap_or_default()),
            resource: resource.clone(),
            name: Some(input.from.name.clone()),
            selector: None,
            matched: Default::default(),
        };
        placed.push(PlacedInput {
            name: input.name.clone(),
            resource,
            namespace,
            object_name: input.from.name.clone(),
            interest,
        });
    }
    Ok(placed)
}

/// Each input as its cache holds it, in order.
pub(super) fn cached(
    placed: &[PlacedInput],
    stores: &[Store<DynamicObject>],
) -> Vec<Option<Arc<DynamicObject>>> {
    placed
        .iter()
        .zip(stores)
        .map(|(input, store)| {
            let mut reference = ObjectRef::new_with(&input.object_name, input.resource.clone());
            if let Some(ns) = &input.namespace {
                reference = reference.within(ns);
            }
            store.get(&reference)
        })
        .collect()
}

/// Checks the inputs as found (in order; `None` where one is missing): every one must be there,
/// and in another cluster shared with the rule as a source must be.
pub(crate) fn read(
    key: &RuleKey,
    placed: &[PlacedInput],
    found: Vec<Option<Arc<DynamicObject>>>,
    source_cluster: Option<&str>,
    previous: Option<&RuleStatus>,
) -> Result<ReadInputs, Stop> {
    let mut inputs = Vec::with_capacity(placed.len());
    let mut hashed = Vec::with_capacity(placed.len());
    for (input, object) in placed.iter().zip(found) {
        let described = describe(input, source_cluster);
        let Some(object) = object else {
            let message = format!(
                "input {described} does not exist; no copy is written until it does, and the \
                 copies are left as they are"
            );
            return Err(stop(previous, "InputNotFound", message, Next::AwaitChange));
        };
        if !shares(key, source_cluster.is_some(), object.annotations()) {
            let from = key.namespace.as_deref().unwrap_or_default();
            let message = format!(
                "input {described} is not shared with this rule: a SyncRule reads another \
                 cluster's objects only with their owner's consent; annotate it there with \
                 {SHARE_WITH_ANNOTATION}={from} (or \"*\"); no copy is written until it is"
            );
            return Err(stop(previous, "InputNotShared", message, Next::AwaitChange));
        }
        let json = handed_over(&object, &input.resource);
        if let Some(why) = refused_input(&json) {
            let message = format!("input {described}: {why}; no copy is written from it");
            return Err(stop(previous, "InputRefused", message, Next::AwaitChange));
        }
        let mut stable = json.clone();
        if let Some(meta) = stable["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
        }
        hashed.push(json!([input.name, stable]));
        inputs.push(TransformInput {
            name: input.name.clone(),
            api_version: input.resource.api_version.clone(),
            kind: input.resource.kind.clone(),
            namespace: input.namespace.clone(),
            object_name: input.object_name.clone(),
            cluster: source_cluster.unwrap_or_default().to_owned(),
            object: json.to_string(),
        });
    }
    Ok(ReadInputs {
        inputs: inputs.into(),
        hash: digest(&Value::Array(hashed)),
    })
}

/// The input as a plugin gets it: whole, less what describes the object's history rather than
/// what it holds (managedFields, kubectl's last-applied copy of it, status).
fn handed_over(object: &DynamicObject, resource: &ApiResource) -> Value {
    let mut object = object.clone();
    strip_uncarried(&mut object.metadata);
    let mut json = serde_json::to_value(&object).unwrap_or_default();
    json["apiVersion"] = json!(resource.api_version);
    json["kind"] = json!(resource.kind);
    if let Some(o) = json.as_object_mut() {
        o.remove("status");
    }
    json
}

/// `registry (ConfigMap team/registry-host in RemoteCluster east)`, for messages.
fn describe(input: &PlacedInput, cluster: Option<&str>) -> String {
    let place = match &input.namespace {
        Some(ns) => format!("{ns}/{}", input.object_name),
        None => input.object_name.clone(),
    };
    let cluster = cluster
        .map(|c| format!(" in RemoteCluster {c}"))
        .unwrap_or_default();
    format!("{} ({} {place}{cluster})", input.name, input.resource.kind)
}
