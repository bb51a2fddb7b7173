//! `mimeo migrate`'s output read back: the plan `--apply` carries out.

use serde_json::Value;

/// The kind of `mimeo migrate`'s output, and its API version.
pub const PLAN_KIND: &str = "Migration";
pub const PLAN_API_VERSION: &str = "mimeo.dev/v1alpha1";

/// One namespace's consent in a plan: the entries to add to its `mimeo.dev/accept-from`.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedConsent {
    /// The openMCP `Cluster` (`namespace/name`) the namespace is in; `None`: this cluster.
    #[serde(default)]
    pub cluster: Option<String>,
    pub namespace: String,
    pub accept_from: Vec<String>,
}

/// One existing copy in a plan: the rule to mark it for (`mimeo.dev/adopt-by`).
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedAdoption {
    /// The openMCP `Cluster` (`namespace/name`) the copy is in; `None`: this cluster.
    #[serde(default)]
    pub cluster: Option<String>,
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub rule: String,
}

impl PlannedConsent {
    /// `Namespace NAME[ on Cluster NS/NAME]`, for messages.
    pub fn what(&self) -> String {
        format!(
            "Namespace {}{}",
            self.namespace,
            on_cluster(self.cluster.as_deref())
        )
    }
}

impl PlannedAdoption {
    /// `KIND NS/NAME[ on Cluster NS/NAME]`, for messages.
    pub fn what(&self) -> String {
        let on = on_cluster(self.cluster.as_deref());
        format!("{} {}/{}{on}", self.kind, self.namespace, self.name)
    }
}

/// `mimeo migrate`'s output, read back.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct Plan {
    #[serde(default)]
    pub consent: Vec<PlannedConsent>,
    #[serde(default)]
    pub adopt: Vec<PlannedAdoption>,
    #[serde(default)]
    pub rules: Vec<Value>,
    /// `ClusterInventory` objects, created before the rules.
    #[serde(default, rename = "clusterInventories")]
    pub cluster_inventories: Vec<Value>,
}

impl Plan {
    /// A plan from a document of kind `Migration`; `None` for any other document.
    pub fn from_document(document: &Value) -> Option<Result<Plan, serde_json::Error>> {
        (document["kind"] == PLAN_KIND && document["apiVersion"] == PLAN_API_VERSION)
            .then(|| serde_json::from_value(document.clone()))
    }
}

/// `existing` (a `mimeo.dev/accept-from` value) with `entries` added, or `None` when it already
/// accepts them all (or accepts `*`). The entries already there stay, in their order.
pub fn accept_from_with(existing: Option<&str>, entries: &[String]) -> Option<String> {
    let mut accepted: Vec<String> = existing
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if accepted.iter().any(|e| e == "*") {
        return None;
    }
    let before = accepted.len();
    for entry in entries {
        if !accepted.contains(entry) {
            accepted.push(entry.clone());
        }
    }
    (accepted.len() > before).then(|| accepted.join(","))
}

/// ` on Cluster <namespace/name>` for an entry of a target cluster, else nothing: for messages.
pub fn on_cluster(cluster: Option<&str>) -> String {
    cluster.map(|c| format!(" on Cluster {c}")).unwrap_or_default()
}
