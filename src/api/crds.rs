//! The CustomResourceDefinitions, generated from the Rust types.

use super::config::MimeoConfig;
use super::inventory::ClusterInventory;
use super::remote_cluster::RemoteCluster;
use super::rule::{ClusterSyncRule, SyncRule};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Every CRD mimeo serves, in a stable order.
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    vec![
        SyncRule::crd(),
        ClusterSyncRule::crd(),
        RemoteCluster::crd(),
        ClusterInventory::crd(),
        MimeoConfig::crd(),
    ]
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed CRDs are what the code generates (CI also diffs `mimeo crds` against them).
    #[test]
    fn committed_crds_match_the_types() {
        let committed = include_str!("../../crds/mimeo.yaml");
        assert!(
            committed == crds_yaml().unwrap(),
            "crds/mimeo.yaml is out of date: run `cargo run -- crds > crds/mimeo.yaml`"
        );
    }

    #[test]
    fn every_crd_has_a_status_subresource_and_short_names() {
        for crd in all_crds() {
            let name = crd.metadata.name.clone().unwrap();
            let version = &crd.spec.versions[0];
            assert!(
                version
                    .subresources
                    .as_ref()
                    .and_then(|s| s.status.as_ref())
                    .is_some(),
                "{name}"
            );
            assert!(
                crd.spec.names.short_names.as_ref().is_some_and(|s| !s.is_empty()),
                "{name}"
            );
            assert!(
                crd.spec
                    .names
                    .categories
                    .as_ref()
                    .is_some_and(|c| c.contains(&"mimeo".to_owned())),
                "{name}"
            );
        }
    }

    /// `kubectl explain` says something of every field and kind: a field without a doc comment
    /// fails here, naming its path.
    #[test]
    fn every_field_and_kind_is_described() {
        fn walk(node: &serde_json::Value, path: &str, missing: &mut Vec<String>) {
            for (name, field) in node["properties"].as_object().into_iter().flatten() {
                let here = format!("{path}.{name}");
                if field["description"].as_str().is_none_or(str::is_empty) {
                    missing.push(here.clone());
                }
                walk(field, &here, missing);
            }
            walk_under(&node["items"], &format!("{path}[]"), missing);
            walk_under(&node["additionalProperties"], &format!("{path}{{}}"), missing);
        }
        fn walk_under(node: &serde_json::Value, path: &str, missing: &mut Vec<String>) {
            if node.is_object() {
                walk(node, path, missing);
            }
        }
        let mut missing = Vec::new();
        for crd in all_crds() {
            let kind = crd.spec.names.kind.clone();
            for version in &crd.spec.versions {
                let schema = serde_json::to_value(&version.schema).unwrap()["openAPIV3Schema"].clone();
                let top = schema["description"].as_str().unwrap_or_default();
                if top.is_empty() || top.starts_with("Auto-generated") {
                    missing.push(format!("{kind} (the kind itself)"));
                }
                walk(&schema, &kind, &mut missing);
            }
        }
        assert!(missing.is_empty(), "fields without a description: {missing:#?}");
    }
}
