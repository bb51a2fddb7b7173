//! openMCP: mimeo asks for access to a `Cluster` with an `AccessRequest` in the Cluster's
//! namespace, for exactly the permissions `mimeo remote rbac` computes for the kinds this
//! installation copies, and connects with the kubeconfig the cluster provider writes to the
//! Secret in `status.secretRef` (key `kubeconfig`) once the request is `Granted`.

use super::entry::INVENTORY_LABEL;
use serde_json::{Value, json};

pub const GROUP: &str = "clusters.openmcp.cloud";
pub const VERSION: &str = "v1alpha1";
/// The key of the kubeconfig in the Secret a cluster provider writes.
pub const KUBECONFIG_KEY: &str = "kubeconfig";

/// The name of mimeo's `AccessRequest` for a `RemoteCluster`.
pub fn access_request_name(remote_cluster: &str) -> String {
    format!("mimeo-{remote_cluster}")
}

/// The `AccessRequest` mimeo asks for: token access to the Cluster, with `permissions`.
pub fn access_request(
    name: &str,
    namespace: &str,
    cluster: &str,
    inventory: &str,
    permissions: Vec<Value>,
) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "AccessRequest",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {INVENTORY_LABEL: inventory},
        },
        "spec": {
            "clusterRef": {"name": cluster, "namespace": namespace},
            "token": {"permissions": permissions},
        },
    })
}

/// The permissions of an `AccessRequest` from the RBAC objects `mimeo remote rbac` makes: a
/// ClusterRole's rules are asked for cluster-wide, a Role's in its namespace.
pub fn permissions(rbac_objects: &[Value]) -> Vec<Value> {
    rbac_objects
        .iter()
        .filter_map(|object| match object["kind"].as_str()? {
            "ClusterRole" => Some(json!({"rules": object["rules"]})),
            "Role" => Some(json!({"namespace": object["metadata"]["namespace"], "rules": object["rules"]})),
            _ => None,
        })
        .collect()
}

/// Where an `AccessRequest` stands, as its status says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Grant {
    /// Granted, with the Secret holding the kubeconfig.
    Granted { secret: String },
    /// Not answered yet (or answered with a phase mimeo does not know), with what it says.
    Pending(String),
    /// Refused by the cluster provider, with its reason.
    Denied(String),
}

pub fn grant(request: &Value) -> Grant {
    let status = &request["status"];
    let phase = status["phase"].as_str().unwrap_or_default();
    let said = || {
        status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["status"] != "True")
            .filter_map(|c| {
                let message = c["message"].as_str().filter(|m| !m.is_empty());
                let reason = c["reason"].as_str().unwrap_or_default();
                Some(match message {
                    Some(m) => format!("{}: {m}", c["type"].as_str()?),
                    None => format!("{}: {reason}", c["type"].as_str()?),
                })
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let secret = status["secretRef"]["name"].as_str().filter(|s| !s.is_empty());
    match (phase, secret) {
        ("Granted", Some(secret)) => Grant::Granted {
            secret: secret.into(),
        },
        ("Denied", _) => Grant::Denied(match said() {
            s if s.is_empty() => "the cluster provider denied it and said no more".into(),
            s => s,
        }),
        ("", _) => Grant::Pending("no cluster provider has answered yet".into()),
        (phase, _) => Grant::Pending(match said() {
            s if s.is_empty() => format!("phase {phase}"),
            s => format!("phase {phase}: {s}"),
        }),
    }
}

/// Whether an existing request asks for `permissions` for `cluster` (otherwise mimeo replaces
/// it: the cluster reference cannot change, and a provider need not follow a changed spec).
pub fn asks_for(request: &Value, cluster: &str, namespace: &str, permissions: &[Value]) -> bool {
    let spec = &request["spec"];
    spec["clusterRef"]["name"] == cluster
        && spec["clusterRef"]["namespace"] == namespace
        && spec["token"]["permissions"].as_array().map(Vec::as_slice) == Some(permissions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_roles_ask_cluster_wide_and_roles_in_their_namespace() {
        let objects = [
            json!({"kind": "ServiceAccount"}),
            json!({"kind": "ClusterRole", "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}),
            json!({"kind": "Role", "metadata": {"namespace": "apps"}, "rules": [{"verbs": ["list"]}]}),
            json!({"kind": "RoleBinding"}),
        ];
        let p = permissions(&objects);
        assert_eq!(p.len(), 2);
        assert!(p[0].get("namespace").is_none());
        assert_eq!(p[1]["namespace"], "apps");
        let request = access_request("mimeo-x", "platform", "x", "fleet", p.clone());
        assert!(asks_for(&request, "x", "platform", &p));
        assert!(!asks_for(&request, "x", "platform", &p[..1]));
        assert!(!asks_for(&request, "y", "platform", &p));
    }

    #[test]
    fn only_granted_with_a_secret_is_granted() {
        let granted = json!({"status": {"phase": "Granted", "secretRef": {"name": "access-1"}}});
        assert_eq!(
            grant(&granted),
            Grant::Granted {
                secret: "access-1".into()
            }
        );
        let no_secret = json!({"status": {"phase": "Granted"}});
        assert!(matches!(grant(&no_secret), Grant::Pending(_)));
        assert!(matches!(grant(&json!({})), Grant::Pending(_)));
        let denied = json!({"status": {"phase": "Denied", "conditions": [
            {"type": "Granted", "status": "False", "reason": "NotAllowed", "message": "secrets may not be written"}]}});
        assert_eq!(
            grant(&denied),
            Grant::Denied("Granted: secrets may not be written".into())
        );
        let pending = json!({"status": {"phase": "Pending"}});
        assert_eq!(grant(&pending), Grant::Pending("phase Pending".into()));
    }
}
