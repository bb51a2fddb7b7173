//! Cluster API: a `Cluster`'s kubeconfig is the Secret `<name>-kubeconfig` beside it (key
//! `value`), usable once the Cluster says its control plane takes requests. v1beta1 and v1beta2
//! say it differently; both are read.

use serde_json::Value;

/// The key of the kubeconfig in Cluster API's Secret.
pub const KUBECONFIG_KEY: &str = "value";

/// The Secret Cluster API writes a Cluster's kubeconfig to.
pub fn kubeconfig_secret(cluster: &str) -> String {
    format!("{cluster}-kubeconfig")
}

/// Whether the Cluster says its control plane can take requests: in v1beta2 the condition
/// `ControlPlaneAvailable` or `status.initialization.controlPlaneInitialized`; in v1beta1
/// `status.controlPlaneReady`, the condition `ControlPlaneReady`, or the v1beta2 conditions it
/// carries under `status.v1beta2`.
pub fn control_plane_available(cluster: &Value) -> bool {
    let status = &cluster["status"];
    status["initialization"]["controlPlaneInitialized"] == Value::Bool(true)
        || status["controlPlaneReady"] == Value::Bool(true)
        || condition_true(&status["conditions"], "ControlPlaneAvailable")
        || condition_true(&status["conditions"], "ControlPlaneReady")
        || condition_true(&status["v1beta2"]["conditions"], "ControlPlaneAvailable")
}

fn condition_true(conditions: &Value, kind: &str) -> bool {
    conditions
        .as_array()
        .is_some_and(|list| list.iter().any(|c| c["type"] == kind && c["status"] == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn either_version_says_the_control_plane_is_up() {
        assert!(control_plane_available(
            &json!({"status": {"initialization": {"controlPlaneInitialized": true}}})
        ));
        assert!(control_plane_available(
            &json!({"status": {"conditions": [{"type": "ControlPlaneAvailable", "status": "True"}]}})
        ));
        assert!(control_plane_available(
            &json!({"status": {"controlPlaneReady": true}})
        ));
        assert!(control_plane_available(
            &json!({"status": {"conditions": [{"type": "ControlPlaneReady", "status": "True"}]}})
        ));
        assert!(control_plane_available(
            &json!({"status": {"v1beta2": {"conditions": [{"type": "ControlPlaneAvailable", "status": "True"}]}}})
        ));
    }

    #[test]
    fn a_cluster_still_provisioning_is_not_up() {
        assert!(!control_plane_available(&json!({})));
        assert!(!control_plane_available(
            &json!({"status": {"phase": "Provisioning", "controlPlaneReady": false}})
        ));
        assert!(!control_plane_available(
            &json!({"status": {"conditions": [{"type": "ControlPlaneAvailable", "status": "False"}]}})
        ));
        assert!(!control_plane_available(
            &json!({"status": {"controlPlaneReady": "true"}})
        ));
    }
}
