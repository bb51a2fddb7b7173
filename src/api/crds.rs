//! The CustomResourceDefinitions, generated from the Rust types.

use super::{ClusterSyncRule, RemoteCluster, SyncRule};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Every CRD mimeo serves, in a stable order.
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    vec![SyncRule::crd(), ClusterSyncRule::crd(), RemoteCluster::crd()]
}

/// The CRDs as one multi-document YAML stream: what `mimeo crds` prints and `crds/` holds.
pub fn crds_yaml() -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::new();
    for crd in all_crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&crd)?);
    }
    Ok(out)
}
