//! The writes: every change mimeo makes to a copy goes through here, under one field manager.
//!
//! Every write to an object that is there is conditional on the version it was decided from (its
//! `resourceVersion` as read): a server-side apply (with the uid) and a merge patch carry it in
//! the object, a replace in its metadata, a delete as a precondition. The apiserver then refuses
//! a write that arrives after anyone else wrote or deleted the object ([`Written::Refused`]),
//! whenever it arrives: a write held by a partition, or sent by a replica frozen past its Lease,
//! cannot land over the newer copy another replica wrote meanwhile. The fence inside the process
//! (`clusters::fence`) cannot promise that, since between any check and the bytes leaving a
//! process can stop. A create needs no version: it is refused when anything is there.

use crate::api::DeletionPolicy;
use crate::sync::decide::Write;
use crate::sync::desired::DesiredCopy;
use crate::sync::live::LiveCopy;
use crate::sync::ownership::{
    FIELD_MANAGER, HASH_ANNOTATION, MANAGED_BY_LABEL, Marked, RULE_ANNOTATION, SOURCE_ANNOTATION,
    SOURCE_HASH_ANNOTATION, SOURCE_VERSION_ANNOTATION, deletion_of,
};
use crate::sync::seal::SEAL_ANNOTATION;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::core::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

fn api(client: &Client, resource: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

/// Looks up the object at a copy's place, whoever owns it.
pub async fn get(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
) -> kube::Result<Option<DynamicObject>> {
    let mut found = api(client, resource, namespace).get_opt(name).await?;
    if let Some(o) = found.as_mut() {
        o.metadata.managed_fields = None;
    }
    Ok(found)
}

/// What a write did: stored the copy, found that an object appeared in its place since the
/// place was read (a create raced someone else's), or was refused because the object there is no
/// longer the version it was decided from.
#[derive(Debug)]
pub enum Written {
    Stored(DynamicObject),
    /// The object now in the copy's place, to decide about again: it is never merged into.
    Raced(DynamicObject),
    /// Someone wrote or deleted the object since the version the write was decided from, and the
    /// apiserver refused it. Nothing was written; the copy is to be decided again from what is
    /// there now, never sent again as it was.
    Refused,
}

/// The error a refused write or removal becomes where it is reported as a copy's failure.
#[derive(Debug, thiserror::Error)]
#[error(
    "the copy changed after mimeo read it (another replica wrote it, or anyone changed or deleted it), \
     so the apiserver refused the write; it is decided again from what is there now"
)]
pub struct ChangedSinceRead;

impl ChangedSinceRead {
    pub fn error() -> kube::Error {
        kube::Error::Service(Box::new(ChangedSinceRead))
    }

    /// Whether `error` is this refusal.
    pub fn is(error: &kube::Error) -> bool {
        matches!(error, kube::Error::Service(e) if e.is::<ChangedSinceRead>())
    }
}

/// Whether the apiserver refused a conditional write because the object is not (or no longer) the
/// version it names: `409 Conflict` for a changed version or a failed precondition, `404` for an
/// object deleted meanwhile.
fn refused(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(e) if (e.code == 409 && e.reason == "Conflict") || e.code == 404)
}

/// `result` with a refusal of a conditional write as [`Written::Refused`].
fn stored_unless_refused(result: kube::Result<DynamicObject>) -> kube::Result<Written> {
    match result {
        Ok(mut stored) => {
            stored.metadata.managed_fields = None;
            Ok(Written::Stored(stored))
        }
        Err(e) if refused(&e) => Ok(Written::Refused),
        Err(e) => Err(e),
    }
}

/// The desired object as a server-side apply of it over `live` sends it: with the version it was
/// decided from, which the apiserver holds the write to, and its uid. An apply creates what is
/// not there and takes no version as a precondition for that: without the uid, a late apply over
/// a copy deleted since (by the replica that holds the rule now) would bring it back, older.
fn applied_over(desired: &DesiredCopy, live: &LiveCopy) -> Value {
    let mut object = desired.object.clone();
    if let (Some(version), Some(metadata)) = (live.resource_version(), object["metadata"].as_object_mut()) {
        metadata.insert("resourceVersion".into(), Value::String(version));
        if let Some(uid) = live.uid() {
            metadata.insert("uid".into(), Value::String(uid));
        }
    }
    object
}

/// Writes `desired` over `live` the way `how` says; returns the copy as the apiserver stored it.
///
/// A copy where nothing was is created with a create-only request, never a server-side apply:
/// an apply would merge into an object someone created between mimeo's read and its write, and
/// stamp it as mimeo's. When that happens the object there is returned to decide about again.
/// A write over `live` is refused by the apiserver unless `live` is still the version there.
pub async fn write(
    client: &Client,
    resource: &ApiResource,
    desired: &DesiredCopy,
    live: Option<&LiveCopy>,
    how: Write,
) -> kube::Result<Written> {
    let api = api(client, resource, desired.target.namespace.as_deref());
    let name = &desired.target.name;
    match (how, live) {
        (Write::Create, _) | (_, None) => create(&api, desired).await,
        (Write::Apply, Some(live)) => {
            let apply = PatchParams::apply(FIELD_MANAGER).force();
            let object = applied_over(desired, live);
            stored_unless_refused(api.patch(name, &apply, &Patch::Apply(&object)).await)
        }
        (Write::Replace, Some(live)) => {
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            stored_unless_refused(api.replace(name, &params, &replaced(live, desired)).await)
        }
        (Write::Recreate, Some(live)) => match delete_exact(&api, live).await? {
            Deleted::Refused => Ok(Written::Refused),
            Deleted::Gone => create(&api, desired).await,
        },
    }
}

/// Creates the copy; if an object of that name exists by now, returns it instead.
async fn create(api: &Api<DynamicObject>, desired: &DesiredCopy) -> kube::Result<Written> {
    let object: DynamicObject =
        serde_json::from_value(desired.object.clone()).map_err(kube::Error::SerdeError)?;
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api.create(&params, &object).await {
        Ok(mut stored) => {
            stored.metadata.managed_fields = None;
            Ok(Written::Stored(stored))
        }
        Err(kube::Error::Api(e)) if e.code == 409 && e.reason == "AlreadyExists" => {
            match api.get_opt(&desired.target.name).await? {
                Some(mut there) => {
                    there.metadata.managed_fields = None;
                    Ok(Written::Raced(there))
                }
                // Gone again already: the error stands, and the next look writes the copy.
                None => Err(kube::Error::Api(e)),
            }
        }
        Err(e) => Err(e),
    }
}

/// What a removal did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removed {
    /// The copy was deleted or orphaned, as the policy said (or was gone already).
    Done(DeletionPolicy),
    /// Someone wrote the object since the version the removal was decided from, and the apiserver
    /// refused it: it is to be decided again from what is there now.
    Refused,
}

/// Deletes a copy, or strips mimeo's ownership from it, as `policy` says (or the copy's own
/// `mimeo.dev/deletion: Orphan`); returns what was done. Gone already is fine. Either is refused
/// unless `live` is still the version there.
pub async fn remove(
    client: &Client,
    resource: &ApiResource,
    live: &(impl kube::Resource + Marked),
    policy: DeletionPolicy,
) -> kube::Result<Removed> {
    let api = api(client, resource, live.namespace().as_deref());
    let policy = deletion_of(live, policy);
    match policy {
        DeletionPolicy::Delete => Ok(match delete_exact(&api, live).await? {
            Deleted::Gone => Removed::Done(policy),
            Deleted::Refused => Removed::Refused,
        }),
        DeletionPolicy::Orphan => {
            let mut annotations = serde_json::Map::new();
            for key in [
                RULE_ANNOTATION,
                SOURCE_ANNOTATION,
                SOURCE_HASH_ANNOTATION,
                SOURCE_VERSION_ANNOTATION,
                HASH_ANNOTATION,
                SEAL_ANNOTATION,
            ] {
                annotations.insert(key.into(), Value::Null);
            }
            let patch = json!({"metadata": {
                "labels": {MANAGED_BY_LABEL: null},
                "annotations": annotations,
                "resourceVersion": live.resource_version(),
            }});
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            match api.patch(&live.name_any(), &params, &Patch::Merge(&patch)).await {
                Ok(_) => Ok(Removed::Done(policy)),
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(Removed::Done(policy)),
                Err(e) if refused(&e) => Ok(Removed::Refused),
                Err(e) => Err(e),
            }
        }
    }
}

/// What a delete of exactly one version of an object did.
enum Deleted {
    /// Deleted, or gone already.
    Gone,
    /// The object there is another version than the one named: it was left alone.
    Refused,
}

/// Deletes exactly this version of this object (by uid and resourceVersion), so that neither a
/// newer object of the same name nor a newer version of this one is ever hit.
async fn delete_exact(api: &Api<DynamicObject>, live: &impl kube::Resource) -> kube::Result<Deleted> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: live.uid(),
            resource_version: live.resource_version(),
        }),
        ..Default::default()
    };
    match api.delete(&live.name_any(), &params).await {
        Ok(_) => Ok(Deleted::Gone),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Deleted::Gone),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(Deleted::Refused),
        Err(e) => Err(e),
    }
}

/// The live object with exactly the desired content and mimeo's labels and annotations set,
/// keeping its other metadata: what a replace (PUT) writes.
fn replaced(live: &LiveCopy, desired: &DesiredCopy) -> DynamicObject {
    let mut object = DynamicObject {
        types: Some(kube::api::TypeMeta {
            api_version: desired.object["apiVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            kind: desired.object["kind"].as_str().unwrap_or_default().to_owned(),
        }),
        metadata: live.object_meta(),
        data: Value::Object(crate::sync::desired::content(&desired.object)),
    };
    for (field, target) in [
        ("labels", object.metadata.labels.get_or_insert_default()),
        ("annotations", object.metadata.annotations.get_or_insert_default()),
    ] {
        if let Some(map) = desired.object["metadata"][field].as_object() {
            for (k, v) in map {
                target.insert(k.clone(), v.as_str().unwrap_or_default().to_owned());
            }
        }
    }
    object
}

/// Creates a namespace a `ClusterSyncRule` target asks for. One that appeared meanwhile is fine.
pub async fn create_namespace(client: &Client, name: &str) -> kube::Result<()> {
    let namespace = json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {MANAGED_BY_LABEL: crate::sync::ownership::MANAGED_BY_VALUE}},
    });
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    match api
        .create(
            &PostParams::default(),
            &serde_json::from_value(namespace).map_err(kube::Error::SerdeError)?,
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}
