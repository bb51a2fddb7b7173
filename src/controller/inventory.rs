//! The `ClusterInventory` controller: keeps one `RemoteCluster` per selected entry of a
//! platform's inventory, with the entry's labels and a kubeconfig got the inventory's way, and
//! removes the ones whose entry went or stopped matching. Everything else (rules choosing the
//! clusters, connecting, status) is the `RemoteCluster`'s ordinary path.

mod access;
mod entries;

use super::live_kinds::LiveKinds;
use super::rule_status::{Readiness, ready_conditions};
use crate::api::{ClusterInventory, ClusterInventoryStatus, EntryProblem, RemoteCluster};
use crate::inventory::InventorySettings;
use crate::inventory::entry::{self, Entry, EntryNamespaces, Kind};
use crate::sync::object_selector::Matcher;
use crate::sync::operation::{self, Operation};
use access::{Access, AccessState, FIELD_MANAGER};
use entries::{EntryWatches, Watched};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// How many problem entries an inventory's status lists; the rest are counted.
const LISTED_PROBLEMS: usize = 20;
/// How often an inventory is looked at again when nothing wakes it.
const RECHECK: Duration = Duration::from_secs(300);
/// How often while an entry waits for something no watch tells mimeo about.
const RECHECK_WAITING: Duration = Duration::from_secs(10);
const DEFAULT_GRANT_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a `RemoteCluster` whose entry left waits for the rules still using it to let go.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(120);

struct InventoryContext {
    client: Client,
    settings: InventorySettings,
    kinds: LiveKinds,
    watches: EntryWatches,
    remote_clusters: Store<RemoteCluster>,
    access: AccessState,
    /// An inventory is kept by the replica holding its shard.
    shards: crate::replicas::shards::Shards,
}

#[derive(Debug, thiserror::Error)]
enum InventoryError {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// Runs the controller until `stopped` resolves. Inventories are optional: when the CRD is not
/// installed (an upgrade that kept old CRDs), this says so once and waits for it.
///
/// `remote_clusters` is the fleet's `RemoteCluster` cache, and `remote_cluster_wakes` what its
/// watch wakes once that cache holds a change to a `RemoteCluster` an inventory made (when a rule
/// starts or stops using one above all: its status counts the rules).
pub async fn run(
    client: Client,
    settings: InventorySettings,
    kinds: LiveKinds,
    remote_clusters: Store<RemoteCluster>,
    remote_cluster_wakes: impl futures::Stream<Item = ObjectRef<ClusterInventory>> + Send + 'static,
    shards: crate::replicas::shards::Shards,
    stopped: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api = Api::<ClusterInventory>::all(client.clone());
    loop {
        match api.list_metadata(&ListParams::default().limit(1)).await {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 404 => {
                tracing::warn!(
                    "the ClusterInventory CRD is not installed: inventories are not read until it is"
                );
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            Err(e) => {
                tracing::debug!(error = %e, "listing ClusterInventories");
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
        }
    }
    let (wake, woken) = futures::channel::mpsc::unbounded();
    // No watch of its own on RemoteClusters (`owns`): woken by one, the reconcile would read the
    // fleet's cache, which may not have the change yet (a rule now using the cluster), and nothing
    // would wake it again when it has. The fleet's watch wakes it after filling that cache.
    let controller = Controller::new(api, watcher::Config::default());
    let ctx = Arc::new(InventoryContext {
        watches: EntryWatches::new(client.clone(), wake, controller.store()),
        client,
        settings,
        kinds: kinds.clone(),
        remote_clusters,
        access: AccessState::default(),
        shards: shards.clone(),
    });
    controller
        .reconcile_on(woken)
        .reconcile_on(remote_cluster_wakes)
        .reconcile_all_on(shards.changes())
        // The kinds decide the rights asked for in AccessRequests.
        .reconcile_all_on(kinds.changes())
        .graceful_shutdown_on(stopped)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "ClusterInventory controller");
            }
        })
        .await;
}

fn error_policy(
    inventory: Arc<ClusterInventory>,
    error: &InventoryError,
    _: Arc<InventoryContext>,
) -> Action {
    tracing::warn!(inventory = %inventory.name_any(), error = %error, "inventory reconcile failed");
    Action::requeue(Duration::from_secs(10))
}

/// One entry's outcome.
struct Outcome {
    remote_cluster: String,
    access: Access,
}

async fn reconcile(
    inventory: Arc<ClusterInventory>,
    ctx: Arc<InventoryContext>,
) -> Result<Action, InventoryError> {
    if inventory.meta().deletion_timestamp.is_some() {
        // Its RemoteClusters, AccessRequests and Secrets are owned by it: the garbage
        // collector removes them.
        return Ok(Action::await_change());
    }
    if !ctx.shards.holds_name(&inventory.name_any()) {
        // Another replica keeps it.
        return Ok(Action::await_change());
    }
    match operation::requested(inventory.meta().annotations.as_ref()) {
        Some(Operation::Ignore) => {
            let message = format!(
                "annotated {}: ignore: mimeo keeps the RemoteClusters, AccessRequests and credentials it made as they are; remove the annotation to go on",
                operation::OPERATION_ANNOTATION
            );
            // What it holds stays as last seen.
            let previous = inventory.status.clone().unwrap_or_default();
            let summary = Summary {
                selected: previous.selected.max(0) as usize,
                connected: previous.connected.max(0) as usize,
                problems: previous.problems,
                broken: Some(("Ignored".into(), message)),
            };
            write_status(&ctx, &inventory, summary).await?;
            return Ok(Action::await_change());
        }
        Some(Operation::Reconcile) => {
            let action = keep(&inventory, &ctx).await?;
            let api = Api::<ClusterInventory>::all(ctx.client.clone());
            crate::controller::reconcile::clear_reconcile(
                &api,
                &inventory.name_any(),
                inventory.resource_version(),
            )
            .await?;
            return Ok(action);
        }
        None => {}
    }
    keep(&inventory, &ctx).await
}

/// One look at an inventory: its entries selected, each one's `RemoteCluster` and access kept,
/// those no longer selected let go, and its status.
async fn keep(
    inventory: &Arc<ClusterInventory>,
    ctx: &Arc<InventoryContext>,
) -> Result<Action, InventoryError> {
    let (inventory, ctx) = (inventory.clone(), ctx.clone());
    let kind = Kind::of(&inventory.spec);
    let (selected, requests) = match read_entries(&ctx, &inventory, kind).await {
        Ok(read) => read,
        Err((summary, next)) => {
            write_status(&ctx, &inventory, summary).await?;
            return Ok(next);
        }
    };
    let create_namespaces = inventory
        .spec
        .open_mcp
        .as_ref()
        .is_some_and(|o| o.create_namespaces);
    let permissions = access::wanted_permissions(&ctx.kinds.get().allowed, create_namespaces);
    let mut outcomes = Vec::new();
    let mut problems = Vec::new();
    for entry in &selected {
        let asked = (requests.as_slice(), permissions.as_slice());
        match keep_entry(&ctx, &inventory, kind, entry, asked).await? {
            Ok(outcome) => {
                if let Access::Waiting { reason, message } = &outcome.access {
                    problems.push(problem(entry, reason, message.clone()));
                }
                outcomes.push(outcome);
            }
            Err(taken) => problems.push(taken),
        }
    }
    let keep: BTreeSet<String> = outcomes.iter().map(|o| o.remote_cluster.clone()).collect();
    let leaving = remove_unwanted(&ctx, &inventory, kind, &keep, &requests).await?;
    ctx.access.retain(&keep, &leaving);
    let connected = outcomes
        .iter()
        .filter(|o| matches!(o.access, Access::Ready(_)))
        .count();
    let waiting = !problems.is_empty();
    write_status(&ctx, &inventory, Summary::of(selected.len(), connected, problems)).await?;
    let mut next = if waiting { RECHECK_WAITING } else { RECHECK };
    if let Some(renewal) = ctx.access.next_renewal() {
        next = next.min(renewal.max(Duration::from_secs(1)));
    }
    if let Some(release) = ctx.access.next_release() {
        next = next.min(release.max(Duration::from_millis(100)));
    }
    if !leaving.is_empty() || outcomes.iter().any(|o| matches!(o.access, Access::Idle)) {
        // An idle cluster's grace ends without an event.
        next = next.min(RECHECK_WAITING);
    }
    Ok(Action::requeue(next))
}

/// The entries an inventory selects, and (openMCP) the `AccessRequest`s there are, also with
/// nothing selected, so that those of entries that went are deleted; or the status that says why
/// they cannot be read, and when to look again.
async fn read_entries(
    ctx: &InventoryContext,
    inventory: &ClusterInventory,
    kind: Kind,
) -> Result<(Vec<Entry>, Vec<Arc<kube::api::DynamicObject>>), (Summary, Action)> {
    let broken = |reason: &str, message: String, next: Action| (Summary::broken(reason, message), next);
    let later = || Action::requeue(Duration::from_secs(30));
    let matcher = Matcher::new(&inventory.spec.selector.clone().unwrap_or_default())
        .map_err(|e| broken("InvalidSelector", e.to_string(), Action::await_change()))?;
    let read = EntryNamespaces::of(&inventory.spec).map_err(|e| {
        let message = format!("spec.namespaceSelector: {e}");
        broken("InvalidSelector", message, Action::await_change())
    })?;
    // Before the entries: their watch wakes inventories by the labels this one holds.
    let namespaces = (ctx.watches.namespaces().await)
        .map_err(|e| broken("NamespacesUnreadable", e.to_string(), later()))?;
    let entries = (ctx.watches.objects(Watched::Entries(kind)).await)
        .map_err(|e| broken("EntriesUnreadable", e.to_string(), later()))?;
    let selected = entries
        .iter()
        .filter_map(|o| Entry::from_json(serde_json::to_value(&**o).ok()?))
        .map(|e| {
            let namespace = namespaces.get(&ObjectRef::new(&e.namespace));
            e.in_namespace(namespace.as_ref().map(|n| n.labels()))
        })
        .filter(|e| entry::is_selected(&read, &matcher, e))
        .collect();
    let requests = match kind {
        Kind::OpenMcp => (ctx.watches.objects(Watched::AccessRequests).await)
            .map_err(|e| broken("AccessRequestsUnreadable", e.to_string(), later()))?,
        _ => Vec::new(),
    };
    Ok((selected, requests))
}

/// One selected entry's `RemoteCluster`, applied with the access mimeo has to its cluster; or
/// the problem that its name is taken by a `RemoteCluster` not this inventory's.
async fn keep_entry(
    ctx: &InventoryContext,
    inventory: &ClusterInventory,
    kind: Kind,
    entry: &Entry,
    asked: (&[Arc<kube::api::DynamicObject>], &[serde_json::Value]),
) -> Result<Result<Outcome, EntryProblem>, InventoryError> {
    let name = entry::remote_cluster_name(&inventory.name_any(), &entry.namespace, &entry.name);
    let existing = ctx.remote_clusters.get(&ObjectRef::new(&name));
    if let Some(rc) = &existing
        && !owned_by(rc, inventory)
    {
        return Ok(Err(problem(
            entry,
            "NameTaken",
            format!(
                "RemoteCluster {name} exists and is not this inventory's: mimeo leaves it alone; rename or delete it"
            ),
        )));
    }
    let in_use = existing
        .as_ref()
        .and_then(|rc| rc.status.as_ref()?.rules)
        .is_some_and(|rules| rules > 0);
    let access = access_for(ctx, inventory, kind, entry, &name, in_use, asked).await?;
    apply_remote_cluster(ctx, inventory, kind, entry, &name, &access).await?;
    Ok(Ok(Outcome {
        remote_cluster: name,
        access,
    }))
}

/// How mimeo gets at the cluster of one selected entry, by the inventory's kind. `in_use`: a rule
/// uses its RemoteCluster (openMCP access is asked for only then).
async fn access_for(
    ctx: &InventoryContext,
    inventory: &ClusterInventory,
    kind: Kind,
    entry: &Entry,
    name: &str,
    in_use: bool,
    (requests, permissions): (&[Arc<kube::api::DynamicObject>], &[serde_json::Value]),
) -> Result<Access, InventoryError> {
    Ok(match kind {
        Kind::OpenMcp => {
            let timeout = inventory
                .spec
                .open_mcp
                .as_ref()
                .and_then(|o| o.grant_timeout_seconds)
                .map(|s| Duration::from_secs(s.into()))
                .unwrap_or(DEFAULT_GRANT_TIMEOUT);
            access::openmcp(
                &ctx.client,
                &ctx.access,
                inventory,
                entry,
                name,
                in_use,
                requests,
                permissions,
                timeout,
            )
            .await?
        }
        Kind::ClusterApi => access::cluster_api(entry),
        Kind::ClusterProfile => {
            let provider = inventory
                .spec
                .cluster_profile
                .as_ref()
                .map(|p| p.provider.as_str())
                .unwrap_or_default();
            access::cluster_profile(
                &ctx.client,
                &ctx.access,
                &ctx.settings,
                inventory,
                entry,
                name,
                provider,
            )
            .await?
        }
    })
}

fn problem(entry: &Entry, reason: &str, message: String) -> EntryProblem {
    EntryProblem {
        namespace: entry.namespace.clone(),
        name: entry.name.clone(),
        reason: reason.into(),
        message,
    }
}

/// The inventory as the owner of a `RemoteCluster`: it goes with the inventory, and only the
/// inventory that owns one changes or deletes it.
fn owned_by(rc: &RemoteCluster, inventory: &ClusterInventory) -> bool {
    let uid = inventory.meta().uid.as_deref();
    rc.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
}

/// Writes an entry's `RemoteCluster`: labels, origin, `allowedNamespaces`, and the kubeconfig
/// reference when there is one (left out while there is none, so the cluster is not used).
async fn apply_remote_cluster(
    ctx: &InventoryContext,
    inventory: &ClusterInventory,
    kind: Kind,
    entry: &Entry,
    name: &str,
    access: &Access,
) -> Result<(), kube::Error> {
    let template = &inventory.spec.remote_clusters;
    let mut spec = json!({"origin": entry::origin(&inventory.name_any(), kind, entry)});
    if let Some(allowed) = &template.allowed_namespaces {
        spec["allowedNamespaces"] = serde_json::to_value(allowed).unwrap_or_default();
    }
    if let Access::Ready(reference) = access {
        spec["kubeconfigSecretRef"] = serde_json::to_value(reference).unwrap_or_default();
    }
    let labels: BTreeMap<String, String> = entry::labels(&inventory.name_any(), entry, &template.labels);
    let object = json!({
        "apiVersion": "mimeo.dev/v1alpha1",
        "kind": "RemoteCluster",
        "metadata": {
            "name": name,
            "labels": labels,
            "ownerReferences": access::owner_references(inventory, true),
        },
        "spec": spec,
    });
    let current = ctx.remote_clusters.get(&ObjectRef::new(name));
    let same = current.as_ref().is_some_and(|rc| {
        serde_json::to_value(&rc.spec).ok().as_ref() == Some(&object["spec"]) && rc.labels() == &labels
    });
    if same {
        return Ok(());
    }
    Api::<RemoteCluster>::all(ctx.client.clone())
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&object),
        )
        .await?;
    Ok(())
}

/// Lets go of what this inventory made for entries it no longer selects (gone, relabelled, out
/// of its namespaces). A `RemoteCluster` that rules still use first loses its labels, so that
/// their selectors let go of it and they clean up their copies there with its access still in
/// place; it is deleted, with its `AccessRequest` or credentials, once no rule uses it (or after
/// [`LEAVE_TIMEOUT`], for a rule that names it). Returns the ones still leaving.
async fn remove_unwanted(
    ctx: &InventoryContext,
    inventory: &ClusterInventory,
    kind: Kind,
    keep: &BTreeSet<String>,
    requests: &[Arc<kube::api::DynamicObject>],
) -> Result<BTreeSet<String>, kube::Error> {
    let rcs = Api::<RemoteCluster>::all(ctx.client.clone());
    let mut leaving = BTreeSet::new();
    for rc in ctx.remote_clusters.state() {
        let name = rc.name_any();
        if !owned_by(&rc, inventory) || keep.contains(&name) {
            continue;
        }
        let used = rc
            .status
            .as_ref()
            .and_then(|s| s.rules)
            .is_some_and(|rules| rules > 0);
        if used && ctx.access.leaving_for(&name) < LEAVE_TIMEOUT {
            if !rc.labels().is_empty() {
                tracing::info!(cluster = %name, inventory = %inventory.name_any(), "the entry is gone or no longer selected; unlabelling its RemoteCluster so rules let go of it");
                let object = json!({
                    "apiVersion": "mimeo.dev/v1alpha1",
                    "kind": "RemoteCluster",
                    "metadata": {"name": name, "labels": {}, "ownerReferences": access::owner_references(inventory, true)},
                    "spec": rc.spec,
                });
                rcs.patch(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&object),
                )
                .await?;
            }
            leaving.insert(name);
            continue;
        }
        tracing::info!(cluster = %name, inventory = %inventory.name_any(), "removing the RemoteCluster of an entry that is gone or no longer selected");
        ignore_missing(rcs.delete(&name, &DeleteParams::default()).await.map(|_| ()))?;
    }
    let held: BTreeSet<String> = keep.union(&leaving).cloned().collect();
    if kind == Kind::OpenMcp {
        let wanted: BTreeSet<String> = held
            .iter()
            .map(|rc| crate::inventory::openmcp::access_request_name(rc))
            .collect();
        for request in requests {
            let mine = request.labels().get(entry::INVENTORY_LABEL) == Some(&inventory.name_any());
            if mine && !wanted.contains(&request.name_any()) {
                let api = Api::<kube::api::DynamicObject>::namespaced_with(
                    ctx.client.clone(),
                    &request.namespace().unwrap_or_default(),
                    &access::access_request_resource(),
                );
                tracing::info!(request = %request.name_any(), "the Cluster is gone or no longer selected; deleting mimeo's AccessRequest");
                ignore_missing(
                    api.delete(&request.name_any(), &DeleteParams::default())
                        .await
                        .map(|_| ()),
                )?;
            }
        }
    }
    if kind == Kind::ClusterProfile {
        let secrets = Api::<Secret>::namespaced(ctx.client.clone(), &ctx.settings.namespace);
        let listed = secrets
            .list_metadata(&ListParams::default().labels(&format!(
                "{}={}",
                entry::INVENTORY_LABEL,
                inventory.name_any()
            )))
            .await?;
        for secret in listed {
            let rc = secret
                .name_any()
                .strip_prefix("mimeo-inventory-")
                .map(str::to_owned);
            if rc.is_some_and(|rc| !held.contains(&rc)) {
                ignore_missing(
                    secrets
                        .delete(&secret.name_any(), &DeleteParams::default())
                        .await
                        .map(|_| ()),
                )?;
            }
        }
    }
    Ok(leaving)
}

fn ignore_missing(result: Result<(), kube::Error>) -> Result<(), kube::Error> {
    match result {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        other => other,
    }
}

/// The status an inventory gets.
struct Summary {
    selected: usize,
    connected: usize,
    problems: Vec<EntryProblem>,
    broken: Option<(String, String)>,
}

impl Summary {
    fn of(selected: usize, connected: usize, problems: Vec<EntryProblem>) -> Self {
        Summary {
            selected,
            connected,
            problems,
            broken: None,
        }
    }

    fn broken(reason: &str, message: String) -> Self {
        Summary {
            selected: 0,
            connected: 0,
            problems: Vec::new(),
            broken: Some((reason.into(), message)),
        }
    }

    fn readiness(&self) -> Readiness {
        if let Some((reason, message)) = &self.broken {
            return Readiness::not_ready(reason.clone(), message.clone());
        }
        match self.problems.first() {
            None => Readiness {
                ready: true,
                reason: "EntriesConnected".into(),
                message: format!(
                    "{} entries selected, {} with access (openMCP clusters get access when a rule uses them)",
                    self.selected, self.connected
                ),
            },
            Some(first) => Readiness::not_ready(
                first.reason.clone(),
                format!(
                    "{} of {} selected entries are not usable; first: {}/{}: {}",
                    self.problems.len(),
                    self.selected,
                    first.namespace,
                    first.name,
                    first.message
                ),
            ),
        }
    }
}

async fn write_status(
    ctx: &InventoryContext,
    inventory: &ClusterInventory,
    summary: Summary,
) -> Result<(), kube::Error> {
    let previous = inventory.status.as_ref();
    let mut problems = summary.problems.clone();
    problems.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let more = problems.len().saturating_sub(LISTED_PROBLEMS);
    problems.truncate(LISTED_PROBLEMS);
    let status = ClusterInventoryStatus {
        observed_generation: inventory.meta().generation,
        conditions: ready_conditions(
            previous.map(|s| s.conditions.as_slice()),
            inventory.meta().generation,
            summary.readiness(),
        ),
        selected: summary.selected as i32,
        connected: summary.connected as i32,
        problems,
        more_problems: (more > 0).then_some(more as i32),
    };
    if previous == Some(&status) {
        return Ok(());
    }
    let patch = json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterInventory", "status": status});
    Api::<ClusterInventory>::all(ctx.client.clone())
        .patch_status(
            &inventory.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    Ok(())
}
