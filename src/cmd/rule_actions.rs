//! `mimeo suspend`, `resume` and `reconcile`, as `flux suspend|resume|reconcile` do for Flux's
//! objects: a rule stopped without deleting its copies (`spec.suspend`), let go again, or asked
//! for a pass now (`openmcp.cloud/operation: reconcile`, which the controller removes once the
//! pass is done; `reconcile` waits for that and says how the rule stands).
//!
//! Each is a merge patch made on the version read, with the user's own kubeconfig and rights:
//! nothing here needs more than `patch` on the rule.

use crate::api::{ClusterSyncRule, SyncRule};
use crate::cmd::status::read::Selection;
use crate::sync::operation::{OPERATION_ANNOTATION, Operation, requested};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// What to do with the rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Suspend,
    Resume,
    Reconcile,
}

/// The field manager of these patches, as `managedFields` shows it.
pub const FIELD_MANAGER: &str = "mimeo-cli";

/// Why the action was not carried out.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    #[error("name one rule: NAME (a SyncRule), syncrule/NAME or clustersyncrule/NAME")]
    NotOne,
    #[error("{0} does not exist")]
    NotFound(String),
    #[error(
        "{0} is annotated {OPERATION_ANNOTATION}: ignore, so mimeo would not act on it; remove the annotation first (kubectl annotate ... {OPERATION_ANNOTATION}-)"
    )]
    Ignored(String),
    #[error(
        "{0} is suspended (spec.suspend): mimeo makes no pass until it is resumed; run mimeo resume first"
    )]
    Suspended(String),
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "{0}: mimeo did not take up the request for a pass within {1:?}; is the controller running, and does one of its replicas hold the rule's shard?"
    )]
    NotTakenUp(String, Duration),
}

/// One rule, as the user named it.
pub struct Rule {
    api: Api<DynamicObject>,
    /// `SyncRule platform/creds`, `ClusterSyncRule pull`.
    pub what: String,
    name: String,
}

impl Rule {
    /// The one rule `selection` names.
    pub fn named(client: &Client, selection: &Selection) -> Result<Rule, ActionError> {
        match selection {
            Selection::SyncRules {
                namespace,
                name: Some(name),
            } => Ok(Rule {
                api: Api::namespaced_with(client.clone(), namespace, &ApiResource::erase::<SyncRule>(&())),
                what: format!("SyncRule {namespace}/{name}"),
                name: name.clone(),
            }),
            Selection::ClusterSyncRules { name: Some(name) } => Ok(Rule {
                api: Api::all_with(client.clone(), &ApiResource::erase::<ClusterSyncRule>(&())),
                what: format!("ClusterSyncRule {name}"),
                name: name.clone(),
            }),
            _ => Err(ActionError::NotOne),
        }
    }

    async fn get(&self) -> Result<DynamicObject, ActionError> {
        self.api
            .get_opt(&self.name)
            .await
            .map_err(|source| self.error("reading it", source))?
            .ok_or_else(|| ActionError::NotFound(self.what.clone()))
    }

    fn error(&self, doing: &str, source: kube::Error) -> ActionError {
        ActionError::Kube {
            what: format!("{}: {doing}", self.what),
            source,
        }
    }
}

/// The merge patch that asks for `action` on `rule` as read, or why it is not asked for.
pub fn patch_for(action: Action, rule: &DynamicObject, what: &str) -> Result<Value, ActionError> {
    let suspended = rule.data["spec"]["suspend"] == json!(true);
    let ignored = requested(rule.metadata.annotations.as_ref()) == Some(Operation::Ignore);
    let version = rule.resource_version();
    match action {
        Action::Suspend => Ok(json!({"metadata": {"resourceVersion": version}, "spec": {"suspend": true}})),
        Action::Resume => Ok(json!({"metadata": {"resourceVersion": version}, "spec": {"suspend": null}})),
        Action::Reconcile if ignored => Err(ActionError::Ignored(what.to_owned())),
        Action::Reconcile if suspended => Err(ActionError::Suspended(what.to_owned())),
        Action::Reconcile => Ok(json!({"metadata": {"resourceVersion": version,
            "annotations": {OPERATION_ANNOTATION: "reconcile"}}})),
    }
}

/// How a rule stands, from its `Ready` condition: `Ready True (Synced): 2/2 copies in sync`.
pub fn standing(rule: &DynamicObject) -> String {
    let conditions = rule.data["status"]["conditions"].as_array();
    let ready = conditions.into_iter().flatten().find(|c| c["type"] == "Ready");
    match ready {
        Some(c) => format!(
            "Ready {} ({}): {}",
            c["status"].as_str().unwrap_or("Unknown"),
            c["reason"].as_str().unwrap_or_default(),
            c["message"].as_str().unwrap_or_default()
        ),
        None => "no status yet".into(),
    }
}

/// Carries out `action` on `rule`; for `reconcile`, waits up to `timeout` for the controller to
/// take the request up. Returns what to tell the user.
pub async fn act(rule: &Rule, action: Action, timeout: Duration) -> Result<String, ActionError> {
    let read = rule.get().await?;
    let patch = patch_for(action, &read, &rule.what)?;
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    let patched = rule
        .api
        .patch(&rule.name, &params, &Patch::Merge(&patch))
        .await
        .map_err(|source| rule.error("patching it", source))?;
    match action {
        Action::Suspend => Ok(format!(
            "{} suspended: mimeo writes and removes nothing for it until it is resumed; its copies stay",
            rule.what
        )),
        Action::Resume => Ok(format!("{} resumed", rule.what)),
        Action::Reconcile => {
            let done = wait_taken_up(rule, patched.resource_version(), timeout).await?;
            Ok(format!("{} reconciled: {}", rule.what, standing(&done)))
        }
    }
}

/// Waits until the controller removed the `reconcile` annotation (after its pass), and for the
/// status it wrote with that pass.
async fn wait_taken_up(
    rule: &Rule,
    asked_at: Option<String>,
    timeout: Duration,
) -> Result<DynamicObject, ActionError> {
    let deadline = Instant::now() + timeout;
    loop {
        let now = rule.get().await?;
        let taken_up = requested(now.metadata.annotations.as_ref()) != Some(Operation::Reconcile)
            && now.resource_version() != asked_at;
        if taken_up {
            return Ok(now);
        }
        if Instant::now() >= deadline {
            return Err(ActionError::NotTakenUp(rule.what.clone(), timeout));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(value: Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn each_action_is_a_patch_on_the_version_read() {
        let plain = rule(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
            "metadata": {"name": "a", "namespace": "p", "resourceVersion": "7"}, "spec": {}}));
        assert_eq!(
            patch_for(Action::Suspend, &plain, "r").unwrap(),
            json!({"metadata": {"resourceVersion": "7"}, "spec": {"suspend": true}})
        );
        assert_eq!(
            patch_for(Action::Resume, &plain, "r").unwrap(),
            json!({"metadata": {"resourceVersion": "7"}, "spec": {"suspend": null}})
        );
        assert_eq!(
            patch_for(Action::Reconcile, &plain, "r").unwrap(),
            json!({"metadata": {"resourceVersion": "7", "annotations": {OPERATION_ANNOTATION: "reconcile"}}})
        );
    }

    #[test]
    fn a_pass_is_not_asked_of_a_rule_mimeo_would_not_act_on() {
        let ignored = rule(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
            "metadata": {"name": "a", "annotations": {OPERATION_ANNOTATION: "ignore"}}, "spec": {}}));
        assert!(matches!(
            patch_for(Action::Reconcile, &ignored, "r"),
            Err(ActionError::Ignored(_))
        ));
        let suspended = rule(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
            "metadata": {"name": "a"}, "spec": {"suspend": true}}));
        let refused = patch_for(Action::Reconcile, &suspended, "SyncRule p/a").unwrap_err();
        assert!(refused.to_string().contains("mimeo resume"), "{refused}");
        assert!(patch_for(Action::Resume, &suspended, "r").is_ok());
    }

    #[test]
    fn the_standing_is_the_ready_condition() {
        let synced = rule(
            json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule", "metadata": {"name": "a"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Synced", "message": "1/1 copies in sync"}]}}),
        );
        assert_eq!(standing(&synced), "Ready True (Synced): 1/1 copies in sync");
    }
}
