//! Checks on a rule that the CRD schema cannot make: what this build supports.
//!
//! A rule that fails them copies nothing new and leaves existing copies as they are; its `Ready`
//! condition carries the reason and says what to change.

use super::kinds::KindRef;
use super::targets::selector;
use crate::api::RuleSpec;
use kube::core::ApiResource;

/// Why a rule cannot be acted on, as a condition reason and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleProblem {
    pub reason: &'static str,
    pub message: String,
}

/// The API resource the rule copies, or the problem that stops it.
pub fn check(spec: &RuleSpec) -> Result<ApiResource, RuleProblem> {
    let kind = KindRef::of_source(&spec.source);
    let resource = kind.supported_resource().ok_or_else(|| RuleProblem {
        reason: "KindNotSupported",
        message: format!("this version of mimeo copies Secrets and ConfigMaps; {kind} is not supported yet"),
    })?;
    let selectors = spec
        .source
        .selector
        .iter()
        .chain(spec.targets.iter().filter_map(|t| t.namespace_selector.as_ref()))
        .chain(spec.targets.iter().filter_map(|t| t.cluster_selector.as_ref()));
    for s in selectors {
        selector(s).map_err(|e| RuleProblem {
            reason: "InvalidSelector",
            message: e.to_string(),
        })?;
    }
    Ok(resource)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Source, Target, Transform};

    fn spec() -> RuleSpec {
        serde_json::from_value(serde_json::json!({
            "source": {"kind": "Secret", "name": "a"},
            "targets": [{"namespace": "b"}],
        }))
        .unwrap()
    }

    #[test]
    fn checks() {
        assert_eq!(check(&spec()).unwrap().plural, "secrets");

        let mut policy = spec();
        policy.source = Source {
            kind: "Policy".into(),
            ..policy.source
        };
        assert_eq!(check(&policy).unwrap_err().reason, "KindNotSupported");

        let mut remote = spec();
        remote.targets.push(Target {
            cluster: Some("eu1".into()),
            namespace: Some("b".into()),
            ..Default::default()
        });
        assert!(check(&remote).is_ok());

        let mut bad_cluster_selector = spec();
        bad_cluster_selector.targets[0].cluster_selector = Some(
            serde_json::from_value(serde_json::json!({
                "matchExpressions": [{"key": "region", "operator": "Near"}]
            }))
            .unwrap(),
        );
        assert_eq!(
            check(&bad_cluster_selector).unwrap_err().reason,
            "InvalidSelector"
        );

        let mut transformed = spec();
        transformed.transforms.push(Transform {
            plugin: "file://x.wasm".into(),
            config: None,
        });
        assert!(
            check(&transformed).is_ok(),
            "transforms are checked when their plugins load"
        );

        let mut bad_selector = spec();
        bad_selector.targets = vec![
            serde_json::from_value(serde_json::json!({
                "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Sometimes"}]}
            }))
            .unwrap(),
        ];
        assert_eq!(check(&bad_selector).unwrap_err().reason, "InvalidSelector");
    }
}
