//! The writes: every change mimeo makes to a copy goes through here, under one field manager.

use crate::api::DeletionPolicy;
use crate::sync::decide::Write;
use crate::sync::desired::DesiredCopy;
use crate::sync::live::LiveCopy;
use crate::sync::ownership::{
    FIELD_MANAGER, HASH_ANNOTATION, MANAGED_BY_LABEL, Marked, RULE_ANNOTATION, SOURCE_ANNOTATION,
    SOURCE_HASH_ANNOTATION, deletion_of,
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

/// What a write did: stored the copy, or found that an object appeared in its place since the
/// place was read (a create raced someone else's).
#[derive(Debug)]
pub enum Written {
    Stored(DynamicObject),
    /// The object now in the copy's place, to decide about again: it is never merged into.
    Raced(DynamicObject),
}

/// Writes `desired` over `live` the way `how` says; returns the copy as the apiserver stored it.
///
/// A copy where nothing was is created with a create-only request, never a server-side apply:
/// an apply would merge into an object someone created between mimeo's read and its write, and
/// stamp it as mimeo's. When that happens the object there is returned to decide about again.
pub async fn write(
    client: &Client,
    resource: &ApiResource,
    desired: &DesiredCopy,
    live: Option<&LiveCopy>,
    how: Write,
) -> kube::Result<Written> {
    let api = api(client, resource, desired.target.namespace.as_deref());
    let name = &desired.target.name;
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let mut stored = match (how, live) {
        (Write::Create, _) | (Write::Replace | Write::Recreate, None) => {
            return create(&api, desired).await;
        }
        (Write::Apply, _) => api.patch(name, &apply, &Patch::Apply(&desired.object)).await?,
        (Write::Replace, Some(live)) => {
            api.replace(
                name,
                &PostParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..Default::default()
                },
                &replaced(live, desired),
            )
            .await?
        }
        (Write::Recreate, Some(live)) => {
            delete_exact(&api, live).await?;
            return create(&api, desired).await;
        }
    };
    stored.metadata.managed_fields = None;
    Ok(Written::Stored(stored))
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

/// Deletes a copy, or strips mimeo's ownership from it, as `policy` says (or the copy's own
/// `mimeo.dev/deletion: Orphan`); returns what was done. Gone already is fine.
pub async fn remove(
    client: &Client,
    resource: &ApiResource,
    live: &(impl kube::Resource + Marked),
    policy: DeletionPolicy,
) -> kube::Result<DeletionPolicy> {
    let api = api(client, resource, live.namespace().as_deref());
    let policy = deletion_of(live, policy);
    match policy {
        DeletionPolicy::Delete => delete_exact(&api, live).await.map(|()| policy),
        DeletionPolicy::Orphan => {
            let mut annotations = serde_json::Map::new();
            for key in [
                RULE_ANNOTATION,
                SOURCE_ANNOTATION,
                SOURCE_HASH_ANNOTATION,
                HASH_ANNOTATION,
                SEAL_ANNOTATION,
            ] {
                annotations.insert(key.into(), Value::Null);
            }
            let patch = json!({"metadata": {"labels": {MANAGED_BY_LABEL: null}, "annotations": annotations}});
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            match api.patch(&live.name_any(), &params, &Patch::Merge(&patch)).await {
                Ok(_) => Ok(policy),
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(policy),
                Err(e) => Err(e),
            }
        }
    }
}

/// Deletes exactly this object (by uid), so a newer object of the same name is never hit.
async fn delete_exact(api: &Api<DynamicObject>, live: &impl kube::Resource) -> kube::Result<()> {
    let params = DeleteParams {
        preconditions: live.uid().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&live.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
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
