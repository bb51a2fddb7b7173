//! Reading what migrating needs from a cluster, with the user's own identity: namespaces, the
//! metadata (never the content) of every Secret and ConfigMap, and Kyverno's policies if it is
//! installed.

use super::{Inventory, Namespace, Object};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace as KubeNamespace, Secret};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use std::collections::BTreeMap;

/// Why reading failed.
#[derive(Debug, thiserror::Error)]
#[error("reading {what}: {source}")]
pub struct ReadError {
    what: &'static str,
    #[source]
    source: kube::Error,
}

fn map(m: Option<BTreeMap<String, String>>) -> BTreeMap<String, String> {
    m.unwrap_or_default()
}

/// Everything migrating looks at. Kyverno's kinds are read only where they are served.
pub async fn inventory(client: &Client) -> Result<Inventory, ReadError> {
    let err = |what| move |source| ReadError { what, source };
    let namespaces = Api::<KubeNamespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(err("namespaces"))?
        .items
        .into_iter()
        .map(|n| Namespace {
            name: n.metadata.name.unwrap_or_default(),
            labels: map(n.metadata.labels),
            annotations: map(n.metadata.annotations),
        })
        .collect();
    let mut objects = Vec::new();
    let secrets = Api::<Secret>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await
        .map_err(err("secrets"))?;
    let config_maps = Api::<ConfigMap>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await
        .map_err(err("configmaps"))?;
    let metas = secrets.items.into_iter().map(|i| ("Secret", i.metadata));
    let metas = metas.chain(config_maps.items.into_iter().map(|i| ("ConfigMap", i.metadata)));
    for (kind, metadata) in metas {
        objects.push(Object {
            kind: kind.to_owned(),
            namespace: metadata.namespace.unwrap_or_default(),
            name: metadata.name.unwrap_or_default(),
            labels: map(metadata.labels),
            annotations: map(metadata.annotations),
        });
    }
    let mut policies = Vec::new();
    let mut kyverno_served = true;
    let cluster_policies = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kyverno.io", "v1", "ClusterPolicy"),
        "clusterpolicies",
    );
    match Api::<DynamicObject>::all_with(client.clone(), &cluster_policies)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => {
            for mut policy in list.items {
                policy.metadata.managed_fields = None;
                let mut value = serde_json::to_value(&policy).unwrap_or_default();
                value["apiVersion"] = "kyverno.io/v1".into();
                value["kind"] = "ClusterPolicy".into();
                policies.push(value);
            }
        }
        // Kyverno is not installed: nothing of it to migrate.
        Err(kube::Error::Api(status)) if status.code == 404 => kyverno_served = false,
        Err(source) => {
            return Err(ReadError {
                what: "clusterpolicies.kyverno.io",
                source,
            });
        }
    }
    Ok(Inventory {
        namespaces,
        objects,
        policies,
        kyverno_served,
    })
}
