//! openMCP's `Cluster`s as the openMCP tools `mimeo migrate` reads (HelmDeployer, the resource
//! replicator) select them, and the `ClusterInventory` their copies onto those clusters go
//! through. Pure: the `Cluster`s are read once, in [`super::read`], into
//! [`super::Inventory::openmcp_clusters`].

use super::model::Tool;
use crate::api::ObjectSelector;
use crate::sync::object_selector::{Matcher, ObjectFacts, purposes_of};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

pub(super) const CLUSTER_API_VERSION: &str = "clusters.openmcp.cloud/v1alpha1";
/// The label every `RemoteCluster` made by an inventory carries with the inventory's name.
pub(super) const INVENTORY_LABEL: &str = "mimeo.dev/inventory";

/// The `Cluster`s `selector` (openMCP's `IdentityLabelPurposeSelector`, as JSON) chooses, as
/// openMCP matches them: `(namespace, name)`.
pub(super) fn selected_clusters(
    clusters: &[Value],
    selector: &Value,
) -> Result<Vec<(String, String)>, String> {
    let parsed: ObjectSelector = serde_json::from_value(selector.clone()).map_err(|e| e.to_string())?;
    let matcher = Matcher::new(&parsed).map_err(|e| e.to_string())?;
    Ok(clusters
        .iter()
        .filter_map(|c| {
            let namespace = c["metadata"]["namespace"].as_str()?;
            let name = c["metadata"]["name"].as_str()?;
            let labels: BTreeMap<String, String> =
                serde_json::from_value(c["metadata"]["labels"].clone()).unwrap_or_default();
            let purposes = purposes_of(c);
            let facts = ObjectFacts {
                namespace,
                name,
                labels: &labels,
                purposes: &purposes,
            };
            matcher
                .matches(&facts)
                .then(|| (namespace.to_owned(), name.to_owned()))
        })
        .collect())
}

/// What a `ClusterInventory` is made of.
pub(super) struct InventorySpec<'a> {
    pub selector: &'a Value,
    /// The namespaces its `Cluster`s are in now: entries are read there only.
    pub namespaces: &'a BTreeSet<String>,
    /// The namespaces whose `SyncRule`s may use its `RemoteCluster`s; `None`: only
    /// `ClusterSyncRule`s may.
    pub rule_namespaces: Option<&'a BTreeSet<String>>,
    /// Whether its access requests ask for creating namespaces too (rules with `createNamespace`).
    pub create_namespaces: bool,
}

/// A `ClusterInventory` of the `Cluster`s a selector chooses, in the namespaces they are in now.
pub(super) fn cluster_inventory(tool: Tool, name: &str, spec: InventorySpec) -> Value {
    let mut open_mcp = json!({});
    if spec.create_namespaces {
        open_mcp["createNamespaces"] = json!(true);
    }
    let mut inventory = json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterInventory",
           "metadata": {"name": name, "labels": {"mimeo.dev/migrated-from": tool.name()}},
           "spec": {"namespaces": spec.namespaces, "selector": spec.selector, "openMCP": open_mcp}});
    if let Some(rule_namespaces) = spec.rule_namespaces {
        inventory["spec"]["remoteClusters"] = json!({"allowedNamespaces": {"matchExpressions": [
            {"key": super::selector::NAME_LABEL, "operator": "In", "values": rule_namespaces}]}});
    }
    inventory
}
