//! `RemoteCluster`: another cluster that rules may copy to and from.

// kube-derive's repeated `printcolumn(...)`/`validation = ...` arguments look like duplicated
// attributes to clippy; they are distinct columns and rules.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Another cluster, reached with a kubeconfig held in a Secret. Its labels are what
/// `targets[].clusterSelector` selects on.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "mimeo.dev",
    version = "v1alpha1",
    kind = "RemoteCluster",
    doc = "Another cluster mimeo copies into or from, reached with the kubeconfig in a Secret; rules choose it by name or by its labels.",
    status = "RemoteClusterStatus",
    shortname = "mrc",
    category = "mimeo",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason"),
    printcolumn(name = "Version", type_ = "string", json_path = ".status.serverVersion"),
    printcolumn(name = "Rules", type_ = "integer", json_path = ".status.rules"),
    printcolumn(name = "Inventory", type_ = "string", json_path = ".spec.origin.inventory"),
    printcolumn(name = "Entry", type_ = "string", json_path = ".spec.origin.entry"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Message", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].message", priority = "1"),
    validation = Rule::new("has(self.spec.kubeconfigSecretRef) || has(self.spec.origin)")
        .message("spec.kubeconfigSecretRef is required: name the Secret holding the cluster's kubeconfig")
)]
#[serde(rename_all = "camelCase")]
pub struct RemoteClusterSpec {
    /// The Secret holding the kubeconfig used to reach the cluster. Only a `RemoteCluster` kept
    /// by a `ClusterInventory` may be without one, while its inventory has no access yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret_ref: Option<KubeconfigSecretRef>,
    /// The namespaces whose `SyncRule`s may use this cluster. Unset: none, only
    /// `ClusterSyncRule`s. An empty selector (`{}`) allows every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_namespaces: Option<LabelSelector>,
    /// Set by mimeo on the `RemoteCluster`s a `ClusterInventory` keeps: the entry it stands for.
    /// mimeo changes and deletes only the ones it made (it owns them), never hand-made ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
}

/// The inventory entry a `RemoteCluster` was made from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Origin {
    /// The `ClusterInventory`.
    pub inventory: String,
    /// The entry's kind and group, as `Cluster.clusters.openmcp.cloud`.
    pub kind: String,
    /// The entry as `namespace/name`.
    pub entry: String,
}

/// A key of a Secret in a given namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeconfigSecretRef {
    /// The Secret's namespace.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key holding the kubeconfig. Cluster API writes it under `value`.
    #[serde(default = "default_kubeconfig_key")]
    #[schemars(length(min = 1))]
    pub key: String,
}

fn default_kubeconfig_key() -> String {
    "value".to_owned()
}

/// What the controller last observed of a remote cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemoteClusterStatus {
    /// The generation of the spec this status was written for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` says whether the cluster can be reached with the given credentials.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The Kubernetes version the cluster's apiserver reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_version: Option<String>,
    /// How many rules use this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<i32>,
    /// With the rules split into shards between replicas: how many rules of each shard use this
    /// cluster, each written by the replica holding that shard; `rules` is their sum.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub rules_by_shard: std::collections::BTreeMap<String, i32>,
    /// With the rules split into shards between replicas: why the replica holding a shard whose
    /// rules use this cluster does not reach it, while it does not; written by that replica.
    /// `Ready` is `False` while any shard is listed here.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub unreachable_by_shard: std::collections::BTreeMap<String, String>,
}
