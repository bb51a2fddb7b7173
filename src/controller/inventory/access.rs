//! How mimeo gets a kubeconfig for one selected entry, per inventory: openMCP through an
//! `AccessRequest` it makes and deletes, Cluster API through the Cluster's own Secret once its
//! control plane is up, `ClusterProfile`s through the installation's provider plugin, whose
//! credential mimeo keeps in a Secret of its own namespace.

use crate::api::{ClusterInventory, KubeconfigSecretRef};
use crate::clusters::remote_rbac::{self, RbacOptions, Use};
use crate::inventory::InventorySettings;
use crate::inventory::cluster_profile::access_provider;
use crate::inventory::entry::Entry;
use crate::inventory::provider_file::{ProviderFile, invocation, kubeconfig, run};
use crate::inventory::{cluster_api, openmcp};
use crate::sync::kinds::AllowedKind;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The field manager of everything an inventory writes.
pub const FIELD_MANAGER: &str = "mimeo-inventory";
/// How long an openMCP cluster no rule uses keeps its access, so that a rule that is being
/// changed does not make mimeo give up and ask again.
const UNUSED_GRACE: Duration = Duration::from_secs(30);
/// A plugin's credential is renewed this long before it expires; one without an expiry is
/// renewed after [`NO_EXPIRY_RENEWAL`].
const RENEW_BEFORE: Duration = Duration::from_secs(120);
const NO_EXPIRY_RENEWAL: Duration = Duration::from_secs(600);

/// Where one entry's access stands.
#[derive(Clone, Debug, PartialEq)]
pub enum Access {
    /// The kubeconfig to connect with.
    Ready(KubeconfigSecretRef),
    /// Not (yet) usable, with a reason and a message for the inventory's status.
    Waiting { reason: &'static str, message: String },
    /// openMCP: no rule uses the cluster, so mimeo holds no access to it.
    Idle,
}

/// What an inventory's access keeps between reconciles.
#[derive(Default)]
pub struct AccessState {
    unused_since: Mutex<HashMap<String, Instant>>,
    /// openMCP clusters no rule uses whose access is kept through [`UNUSED_GRACE`]: when each is
    /// to be given back. Nothing else wakes the inventory then (issue 56: an AccessRequest stayed
    /// 90 s and more, until an unrelated change woke it).
    release_at: Mutex<HashMap<String, Instant>>,
    /// Per `RemoteCluster` of a `ClusterProfile`: when its credential must be renewed.
    renew_at: Mutex<HashMap<String, Instant>>,
    /// `RemoteCluster`s whose entry left, while rules still use them.
    leaving_since: Mutex<HashMap<String, Instant>>,
}

fn waiting(reason: &'static str, message: impl Into<String>) -> Access {
    Access::Waiting {
        reason,
        message: message.into(),
    }
}

/// The owner reference of what an inventory makes, so that the garbage collector removes it
/// with the inventory. `block_deletion`: the inventory's deletion waits for it (its
/// RemoteClusters, whose rules must let go of them first).
pub(super) fn owner_references(inventory: &ClusterInventory, block_deletion: bool) -> Value {
    let mut reference = json!({
        "apiVersion": "mimeo.dev/v1alpha1",
        "kind": "ClusterInventory",
        "name": inventory.name_any(),
        "uid": inventory.meta().uid,
        "controller": true,
    });
    if block_deletion {
        reference["blockOwnerDeletion"] = json!(true);
    }
    json!([reference])
}

pub fn access_request_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(openmcp::GROUP, openmcp::VERSION, "AccessRequest"),
        "accessrequests",
    )
}

/// The permissions mimeo asks openMCP for: what `mimeo remote rbac` grants for writing the
/// installation's allowed kinds, cluster-wide (and creating namespaces, if the inventory says so).
pub fn wanted_permissions(allowed: &[AllowedKind], create_namespaces: bool) -> Vec<Value> {
    let kinds: Vec<String> = allowed
        .iter()
        .map(|k| {
            if k.group.is_empty() {
                k.kind.clone()
            } else {
                format!("{}.{}", k.kind, k.group)
            }
        })
        .filter(|k| remote_rbac::resolve_kind(k).is_ok())
        .collect();
    let options = RbacOptions {
        kinds,
        usage: Use::Target,
        create_namespaces,
        ..Default::default()
    };
    remote_rbac::objects(&options)
        .map(|objects| openmcp::permissions(&objects))
        .unwrap_or_default()
}

/// openMCP: asks for access while a rule uses the cluster, gives it back when none has for
/// [`UNUSED_GRACE`].
#[allow(clippy::too_many_arguments)]
pub async fn openmcp(
    client: &Client,
    state: &AccessState,
    inventory: &ClusterInventory,
    entry: &Entry,
    remote_cluster: &str,
    in_use: bool,
    requests: &[std::sync::Arc<DynamicObject>],
    permissions: &[Value],
    grant_timeout: Duration,
) -> Result<Access, kube::Error> {
    let name = openmcp::access_request_name(remote_cluster);
    let api =
        Api::<DynamicObject>::namespaced_with(client.clone(), &entry.namespace, &access_request_resource());
    let existing = requests
        .iter()
        .find(|r| r.name_any() == name && r.namespace().as_deref() == Some(&entry.namespace))
        .map(|r| serde_json::to_value(&**r).unwrap_or_default());
    if !in_use {
        return unused(client, state, remote_cluster, (&api, &name), existing.as_ref()).await;
    }
    lock(&state.unused_since).remove(remote_cluster);
    lock(&state.release_at).remove(remote_cluster);
    let Some(request) = existing else {
        let request = openmcp::access_request(
            &name,
            &entry.namespace,
            &entry.name,
            &inventory.name_any(),
            permissions.to_vec(),
        );
        let mut request: DynamicObject = serde_json::from_value(request).expect("a valid object");
        request.metadata.owner_references = serde_json::from_value(owner_references(inventory, false)).ok();
        match api.create(&PostParams::default(), &request).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
        tracing::info!(cluster = %remote_cluster, request = %name, "asked openMCP for access");
        return Ok(waiting(
            "AccessPending",
            format!("asked for access with AccessRequest {}/{name}", entry.namespace),
        ));
    };
    if !openmcp::asks_for(&request, &entry.name, &entry.namespace, permissions) {
        // The allowed kinds changed: ask again, for what is needed now.
        delete_quietly(&api, &name).await?;
        return Ok(waiting(
            "AccessPending",
            "asking again: the permissions mimeo needs changed",
        ));
    }
    Ok(match openmcp::grant(&request) {
        openmcp::Grant::Granted { secret } => Access::Ready(KubeconfigSecretRef {
            namespace: entry.namespace.clone(),
            name: secret,
            key: openmcp::KUBECONFIG_KEY.into(),
        }),
        openmcp::Grant::Denied(why) => waiting(
            "AccessDenied",
            format!("AccessRequest {}/{name} was denied: {why}", entry.namespace),
        ),
        openmcp::Grant::Pending(why) => {
            let age = request["metadata"]["creationTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<Timestamp>().ok())
                .map(|t| Timestamp::now().duration_since(t).unsigned_abs())
                .unwrap_or_default();
            if age > grant_timeout {
                waiting(
                    "AccessNotGranted",
                    format!(
                        "AccessRequest {}/{name} is not granted after {}s ({why}); is a cluster provider running for this Cluster's profile?",
                        entry.namespace,
                        age.as_secs()
                    ),
                )
            } else {
                waiting(
                    "AccessPending",
                    format!("AccessRequest {}/{name}: {why}", entry.namespace),
                )
            }
        }
    })
}

fn granted_ref(request: &Value) -> Option<KubeconfigSecretRef> {
    match openmcp::grant(request) {
        openmcp::Grant::Granted { secret } => Some(KubeconfigSecretRef {
            namespace: request["metadata"]["namespace"].as_str()?.to_owned(),
            name: secret,
            key: openmcp::KUBECONFIG_KEY.into(),
        }),
        _ => None,
    }
}

async fn delete_quietly(api: &Api<DynamicObject>, name: &str) -> Result<(), kube::Error> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Cluster API: the Cluster's own `<name>-kubeconfig`, once its control plane is up.
pub fn cluster_api(entry: &Entry) -> Access {
    if !cluster_api::control_plane_available(&entry.object) {
        return waiting(
            "ControlPlaneNotAvailable",
            format!(
                "Cluster {}/{} does not say its control plane is available yet",
                entry.namespace, entry.name
            ),
        );
    }
    Access::Ready(KubeconfigSecretRef {
        namespace: entry.namespace.clone(),
        name: cluster_api::kubeconfig_secret(&entry.name),
        key: cluster_api::KUBECONFIG_KEY.into(),
    })
}

/// A `ClusterProfile`: runs the provider's plugin when the credential is missing or due, and
/// keeps it as a kubeconfig in a Secret of mimeo's namespace.
pub async fn cluster_profile(
    client: &Client,
    state: &AccessState,
    settings: &InventorySettings,
    inventory: &ClusterInventory,
    entry: &Entry,
    remote_cluster: &str,
    provider_name: &str,
) -> Result<Access, kube::Error> {
    let reference = KubeconfigSecretRef {
        namespace: settings.namespace.clone(),
        name: format!("mimeo-inventory-{remote_cluster}"),
        key: "kubeconfig".into(),
    };
    let info = match access_provider(&entry.object, provider_name) {
        Ok(info) => info,
        Err(e) => return Ok(waiting("ProfileUnusable", e.to_string())),
    };
    if lock(&state.renew_at)
        .get(remote_cluster)
        .is_some_and(|at| Instant::now() < *at)
    {
        return Ok(Access::Ready(reference));
    }
    let Some(path) = &settings.providers_file else {
        return Ok(waiting(
            "ProviderMissing",
            "no provider file is configured (--cluster-profile-providers): mimeo cannot get credentials for ClusterProfiles",
        ));
    };
    let file = match ProviderFile::read(path) {
        Ok(file) => file,
        Err(e) => return Ok(waiting("ProviderMissing", e.to_string())),
    };
    let provider = match file.provider(provider_name) {
        Ok(provider) => provider,
        Err(e) => return Ok(waiting("ProviderMissing", e.to_string())),
    };
    let dir = path.parent().unwrap_or(std::path::Path::new("/"));
    let credential = match invocation(provider, &info) {
        Ok(invocation) => run(provider, &invocation, dir, settings.exec_timeout).await,
        Err(e) => Err(e),
    };
    let credential = match credential {
        Ok(credential) => credential,
        Err(e) => {
            lock(&state.renew_at).remove(remote_cluster);
            return Ok(waiting("ProviderFailed", e.to_string()));
        }
    };
    let renew_in = credential
        .expires
        .map(|at| {
            at.duration_since(Timestamp::now())
                .unsigned_abs()
                .saturating_sub(RENEW_BEFORE)
        })
        .unwrap_or(NO_EXPIRY_RENEWAL)
        .max(Duration::from_secs(10));
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": reference.name,
            "namespace": reference.namespace,
            "labels": {crate::inventory::entry::INVENTORY_LABEL: inventory.name_any()},
            "ownerReferences": owner_references(inventory, false),
        },
        "type": "Opaque",
        "stringData": {"kubeconfig": kubeconfig(&info, &credential)},
    });
    Api::<Secret>::namespaced(client.clone(), &reference.namespace)
        .patch(
            &reference.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await?;
    lock(&state.renew_at).insert(remote_cluster.to_owned(), Instant::now() + renew_in);
    Ok(Access::Ready(reference))
}

impl AccessState {
    /// When the soonest credential is due, for the requeue.
    /// How long until the access of an openMCP cluster no rule uses is to be given back.
    pub fn next_release(&self) -> Option<Duration> {
        lock(&self.release_at)
            .values()
            .map(|at| at.saturating_duration_since(Instant::now()))
            .min()
    }

    pub fn next_renewal(&self) -> Option<Duration> {
        lock(&self.renew_at)
            .values()
            .map(|at| at.saturating_duration_since(Instant::now()))
            .min()
    }

    /// Forgets what it kept of `RemoteCluster`s that are gone, and since when the leaving ones
    /// have been leaving.
    pub fn retain(&self, keep: &BTreeSet<String>, leaving: &BTreeSet<String>) {
        lock(&self.renew_at).retain(|name, _| keep.contains(name) || leaving.contains(name));
        lock(&self.unused_since).retain(|name, _| keep.contains(name));
        lock(&self.release_at).retain(|name, _| keep.contains(name));
        lock(&self.leaving_since).retain(|name, _| leaving.contains(name));
    }

    /// How long a `RemoteCluster` has been leaving (zero the first time it is asked).
    pub fn leaving_for(&self, name: &str) -> Duration {
        lock(&self.leaving_since)
            .entry(name.to_owned())
            .or_insert_with(Instant::now)
            .elapsed()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// openMCP: the access of a cluster no rule uses, per the cache: kept through [`UNUSED_GRACE`],
/// then given back, unless the apiserver says a rule uses it now.
async fn unused(
    client: &Client,
    state: &AccessState,
    remote_cluster: &str,
    (api, name): (&Api<DynamicObject>, &str),
    existing: Option<&Value>,
) -> Result<Access, kube::Error> {
    let since = *lock(&state.unused_since)
        .entry(remote_cluster.to_owned())
        .or_insert_with(Instant::now);
    if since.elapsed() < UNUSED_GRACE
        && let Some(Some(request)) = existing.map(granted_ref)
    {
        lock(&state.release_at).insert(remote_cluster.to_owned(), since + UNUSED_GRACE);
        return Ok(Access::Ready(request));
    }
    lock(&state.release_at).remove(remote_cluster);
    if existing.is_some() {
        // Read again, not from the cache: a rule may have just begun to use the cluster (a new
        // order), and the access it is about to connect with must stay.
        if in_use_now(client, remote_cluster).await? {
            lock(&state.unused_since).remove(remote_cluster);
            if let Some(Some(request)) = existing.map(granted_ref) {
                return Ok(Access::Ready(request));
            }
        } else {
            tracing::info!(cluster = %remote_cluster, request = %name, "no rule uses the cluster; deleting mimeo's AccessRequest");
            delete_quietly(api, name).await?;
        }
    }
    Ok(Access::Idle)
}

/// Whether rules use the `RemoteCluster` by its status as the apiserver has it now.
async fn in_use_now(client: &Client, remote_cluster: &str) -> Result<bool, kube::Error> {
    let api = Api::<crate::api::RemoteCluster>::all(client.clone());
    Ok(api
        .get_opt(remote_cluster)
        .await?
        .and_then(|rc| rc.status?.rules)
        .is_some_and(|rules| rules > 0))
}
