//! Reading what migrating needs from a cluster, with the user's own identity: namespaces, the
//! metadata (never the content) of every Secret and ConfigMap, Kyverno's policies if it is
//! installed, openMCP HelmDeployer's configuration and the resource replicator's `Replica`s and
//! `ClusterReplica`s if they are served, openMCP's `Cluster`s where either is, and the metadata of
//! the replicator's copies of other kinds. Of an openMCP `Cluster` those tools copy onto, with
//! the kubeconfig the user gives for it: the namespaces they copy into by name and the metadata
//! of their Secrets.

use super::helmdeployer::HelmDeployer;
use super::model::{Inventory, Namespace, Object, ResourceReplicator};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace as KubeNamespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Why reading failed.
#[derive(Debug, thiserror::Error)]
#[error("reading {what}: {source}")]
pub struct ReadError {
    what: &'static str,
    #[source]
    source: kube::Error,
}

/// Why a target cluster could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The parser's own message may quote the file, which may hold a credential: not shown.
    #[error("Cluster {cluster}: {path} does not read as a kubeconfig")]
    Unreadable { cluster: String, path: String },
    #[error("Cluster {cluster}: the kubeconfig {path} cannot be used: {message}")]
    Unusable {
        cluster: String,
        path: String,
        message: String,
    },
    #[error("Cluster {cluster}: {source}")]
    Read {
        cluster: String,
        #[source]
        source: ReadError,
    },
}

/// A client for an openMCP `Cluster` from the kubeconfig file the user gave for it: its current
/// context, as kubectl would use it (this runs as the user, not inside mimeo's pod).
pub async fn cluster_client(cluster: &str, path: &Path) -> Result<Client, ClusterError> {
    let shown = path.display().to_string();
    let kubeconfig = Kubeconfig::read_from(path).map_err(|_| ClusterError::Unreadable {
        cluster: cluster.to_owned(),
        path: shown.clone(),
    })?;
    let unusable = |e: &(dyn std::error::Error + 'static)| ClusterError::Unusable {
        cluster: cluster.to_owned(),
        path: shown.clone(),
        message: crate::clusters::explain_client_error(e),
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| unusable(&e))?;
    Client::try_from(config).map_err(|e| unusable(&e))
}

/// What migrating needs of an openMCP `Cluster` that HelmDeployer or the resource replicator
/// copies onto: those of `namespaces` that exist there, those that `selectors` (label selectors
/// as JSON) choose, and the metadata of their Secrets. Only those: a kubeconfig for a workload
/// cluster may well grant no more (a selector needs `list` on namespaces, a name only `get`).
pub async fn target_cluster(
    cluster: &str,
    client: &Client,
    namespaces: &BTreeSet<String>,
    selectors: &[serde_json::Value],
) -> Result<Inventory, ClusterError> {
    let read = async {
        let mut inventory = Inventory::default();
        let namespace_error = |source| ReadError {
            what: "namespaces",
            source,
        };
        let mut found = Vec::new();
        for name in namespaces {
            let namespace = Api::<KubeNamespace>::all(client.clone())
                .get_opt(name)
                .await
                .map_err(namespace_error)?;
            found.extend(namespace);
        }
        for selector in selectors {
            let Some(selector) = label_selector(selector) else {
                continue;
            };
            let chosen = Api::<KubeNamespace>::all(client.clone())
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(namespace_error)?;
            found.extend(chosen.items);
        }
        found.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        found.dedup_by(|a, b| a.metadata.name == b.metadata.name);
        for namespace in found {
            let name = namespace.metadata.name.unwrap_or_default();
            inventory.namespaces.push(Namespace {
                name: name.clone(),
                labels: map(namespace.metadata.labels),
                annotations: map(namespace.metadata.annotations),
            });
            let secrets = Api::<Secret>::namespaced(client.clone(), &name)
                .list_metadata(&ListParams::default())
                .await
                .map_err(|source| ReadError {
                    what: "secrets",
                    source,
                })?;
            inventory
                .objects
                .extend(secrets.items.into_iter().map(|i| object("Secret", i.metadata)));
        }
        Ok(inventory)
    };
    read.await.map_err(|source| ClusterError::Read {
        cluster: cluster.to_owned(),
        source,
    })
}

/// A label selector as JSON in the apiserver's query form; `None` when it does not read as one
/// (the translation notes that).
fn label_selector(selector: &serde_json::Value) -> Option<String> {
    let selector = serde_json::from_value(selector.clone()).ok()?;
    let selector = crate::sync::object_selector::selector(&selector).ok()?;
    Some(selector.to_string())
}

fn map(m: Option<BTreeMap<String, String>>) -> BTreeMap<String, String> {
    m.unwrap_or_default()
}

/// Everything migrating looks at. Kyverno's kinds are read only where they are served.
pub async fn inventory(client: &Client) -> Result<Inventory, ReadError> {
    let err = |what| move |source| ReadError { what, source };
    let namespaces = namespaces(client).await?;
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
    let mut objects: Vec<Object> = metas.map(|(kind, metadata)| object(kind, metadata)).collect();
    let (not_migrated, not_read) = replicated_rbac(client).await;
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
    let helm = helm(client).await?;
    let mut replicas = resource_replicator(client).await?;
    objects.extend(replicated_copies(client, &mut replicas).await);
    let openmcp_clusters = if helm.served || replicas.served {
        list_all(
            client,
            "clusters.clusters.openmcp.cloud",
            GroupVersionKind::gvk("clusters.openmcp.cloud", "v1alpha1", "Cluster"),
            "clusters",
        )
        .await?
        .unwrap_or_default()
    } else {
        Vec::new()
    };
    Ok(Inventory {
        namespaces,
        objects,
        not_migrated,
        not_read,
        policies,
        kyverno_served,
        helm,
        replicas,
        openmcp_clusters,
        clusters: BTreeMap::new(),
    })
}

/// The Roles, RoleBindings and ServiceAccounts kubernetes-replicator copies (those with any of
/// its annotations), and the kinds that could not be listed, each with why. A user who may not
/// list them still gets a plan, which says it could not look.
async fn replicated_rbac(client: &Client) -> (Vec<Object>, Vec<String>) {
    let (mut found, mut not_read) = (Vec::new(), Vec::new());
    let everywhere = ListParams::default();
    let lists: [(&str, kube::Result<Vec<ObjectMeta>>); 3] = [
        (
            "Role",
            Api::<Role>::all(client.clone())
                .list_metadata(&everywhere)
                .await
                .map(metas_of),
        ),
        (
            "RoleBinding",
            Api::<RoleBinding>::all(client.clone())
                .list_metadata(&everywhere)
                .await
                .map(metas_of),
        ),
        (
            "ServiceAccount",
            Api::<ServiceAccount>::all(client.clone())
                .list_metadata(&everywhere)
                .await
                .map(metas_of),
        ),
    ];
    for (kind, list) in lists {
        match list {
            Ok(list) => found.extend(
                list.into_iter()
                    .map(|metadata| object(kind, metadata))
                    .filter(super::replicator::annotated),
            ),
            Err(e) => not_read.push(format!("{kind}s: {}", crate::error_text::with_causes(&e))),
        }
    }
    (found, not_read)
}

fn metas_of<K: Clone>(list: kube::core::ObjectList<kube::core::PartialObjectMeta<K>>) -> Vec<ObjectMeta> {
    list.items.into_iter().map(|i| i.metadata).collect()
}

async fn namespaces(client: &Client) -> Result<Vec<Namespace>, ReadError> {
    Ok(Api::<KubeNamespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|source| ReadError {
            what: "namespaces",
            source,
        })?
        .items
        .into_iter()
        .map(|n| Namespace {
            name: n.metadata.name.unwrap_or_default(),
            labels: map(n.metadata.labels),
            annotations: map(n.metadata.annotations),
        })
        .collect())
}

fn object(kind: &str, metadata: ObjectMeta) -> Object {
    Object {
        kind: kind.to_owned(),
        namespace: metadata.namespace.unwrap_or_default(),
        name: metadata.name.unwrap_or_default(),
        labels: map(metadata.labels),
        annotations: map(metadata.annotations),
        label_managers: label_managers(metadata.managed_fields.as_deref().unwrap_or_default()),
    }
}

/// For each label, the managers whose `managedFields` entry owns it.
fn label_managers(entries: &[ManagedFieldsEntry]) -> BTreeMap<String, Vec<String>> {
    let mut owners: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in entries {
        let (Some(manager), Some(fields)) = (&entry.manager, &entry.fields_v1) else {
            continue;
        };
        let labels = fields.0["f:metadata"]["f:labels"].as_object();
        for key in labels.into_iter().flatten().map(|(k, _)| k) {
            if let Some(label) = key.strip_prefix("f:") {
                owners.entry(label.to_owned()).or_default().push(manager.clone());
            }
        }
    }
    owners
}

/// Every object of a kind, as JSON without `managedFields`; `None` when the kind is not served.
async fn list_all(
    client: &Client,
    what: &'static str,
    gvk: GroupVersionKind,
    plural: &str,
) -> Result<Option<Vec<serde_json::Value>>, ReadError> {
    let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
    match Api::<DynamicObject>::all_with(client.clone(), &resource)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => Ok(Some(
            list.items
                .into_iter()
                .map(|mut object| {
                    object.metadata.managed_fields = None;
                    let mut value = serde_json::to_value(&object).unwrap_or_default();
                    value["apiVersion"] = resource.api_version.clone().into();
                    value["kind"] = resource.kind.clone().into();
                    value
                })
                .collect(),
        )),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(source) => Err(ReadError { what, source }),
    }
}

/// HelmDeployer's `HelmDeployment`s and `HelmDeployerConfig`s.
async fn helm(client: &Client) -> Result<HelmDeployer, ReadError> {
    let helm = |kind| GroupVersionKind::gvk("helm.open-control-plane.io", "v1alpha1", kind);
    let Some(deployments) = list_all(
        client,
        "helmdeployments.helm.open-control-plane.io",
        helm("HelmDeployment"),
        "helmdeployments",
    )
    .await?
    else {
        return Ok(HelmDeployer::default());
    };
    let configs = list_all(
        client,
        "helmdeployerconfigs.helm.open-control-plane.io",
        helm("HelmDeployerConfig"),
        "helmdeployerconfigs",
    )
    .await?;
    Ok(HelmDeployer {
        served: true,
        configs: configs.unwrap_or_default(),
        deployments,
    })
}

/// The resource replicator's `Replica`s and `ClusterReplica`s.
async fn resource_replicator(client: &Client) -> Result<ResourceReplicator, ReadError> {
    let core = |kind| GroupVersionKind::gvk("core.open-control-plane.io", "v1alpha1", kind);
    let Some(replicas) = list_all(
        client,
        "replicas.core.open-control-plane.io",
        core("Replica"),
        "replicas",
    )
    .await?
    else {
        return Ok(ResourceReplicator::default());
    };
    let cluster_replicas = list_all(
        client,
        "clusterreplicas.core.open-control-plane.io",
        core("ClusterReplica"),
        "clusterreplicas",
    )
    .await?;
    Ok(ResourceReplicator {
        served: true,
        replicas,
        cluster_replicas: cluster_replicas.unwrap_or_default(),
        not_read: Vec::new(),
    })
}

/// The metadata of the replicator's copies of the kinds other than Secret and ConfigMap (read
/// already) that its `Replica`s copy: only objects that carry its kind label, in every namespace.
/// A kind that cannot be listed is said in `replicas.not_read`.
async fn replicated_copies(client: &Client, replicas: &mut ResourceReplicator) -> Vec<Object> {
    let mut found = Vec::new();
    let params = ListParams::default().labels(super::resource_replicator::KIND_LABEL);
    for (api_version, kind) in super::resource_replicator::copy_kinds(replicas) {
        let listed = async {
            let api = super::apply::dynamic_api(client, &api_version, &kind, None).await?;
            api.list_metadata(&params).await
        };
        match listed.await {
            Ok(list) => found.extend(list.items.into_iter().map(|i| object(&kind, i.metadata))),
            Err(e) => replicas.not_read.push(format!(
                "{kind} ({api_version}): {}",
                crate::error_text::with_causes(&e)
            )),
        }
    }
    found
}
