//! `mimeo migrate --apply FILE`: applies a plan exactly as it reads, with patches that add only
//! what it names. A server-side apply of a metadata-only object would take over every field an
//! earlier client-side `kubectl apply` recorded and drop those the file leaves out (a
//! Namespace's labels, a copy's data), and would create a copy that is gone as an empty object;
//! a JSON merge patch of one annotation changes that annotation alone, under its own field
//! manager, and fails on an object that is not there. The entries for an openMCP `Cluster`
//! are written through the client the user gave for it; without one they are not applied.

use super::plan::{Plan, PlannedAdoption, accept_from_with};
use crate::sync::ownership::{ACCEPT_FROM_ANNOTATION, ADOPT_BY_ANNOTATION};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "mimeo-migrate";

/// What applying did, one line each; `failed` is the count of lines that say something was
/// not applied. `unreached` are the entries for `Cluster`s no client was given for, which the
/// user must act on: for stderr.
#[derive(Debug, Default)]
pub struct Applied {
    pub lines: Vec<String>,
    pub unreached: Vec<String>,
    pub failed: usize,
    /// Told each line as it happens (the command prints it), so that a long plan shows its
    /// progress instead of everything at the end.
    echo: Option<fn(&str)>,
}

impl Applied {
    fn done(&mut self, line: String) {
        if let Some(echo) = self.echo {
            echo(&line);
        }
        self.lines.push(line);
    }

    fn failed(&mut self, line: String) {
        self.done(format!("! {line}"));
        self.failed += 1;
    }

    /// The client for an entry's cluster: `client` for this one, else the one given for it; none
    /// (said, and counted as not applied) when no kubeconfig was given for it.
    fn client_for<'a>(
        &mut self,
        client: &'a Client,
        clusters: &'a BTreeMap<String, Client>,
        cluster: Option<&str>,
        what: &str,
    ) -> Option<&'a Client> {
        let Some(cluster) = cluster else {
            return Some(client);
        };
        let found = clusters.get(cluster);
        if found.is_none() {
            self.unreached.push(format!(
                "! {what}: not applied: no kubeconfig for this Cluster; give --cluster-kubeconfig {cluster}=PATH"
            ));
            self.failed += 1;
        }
        found
    }
}

/// Consent first, then the adoption marks, then the `ClusterInventory`s, then the rules: a rule
/// sees its consent, marks and clusters from its first reconcile. `clusters` are the clients for
/// the openMCP `Cluster`s (`namespace/name`) the plan has entries on.
/// `echo`, if given, is told each line as it happens.
pub async fn apply(
    client: &Client,
    clusters: &BTreeMap<String, Client>,
    plan: &Plan,
    echo: Option<fn(&str)>,
) -> Applied {
    let mut applied = Applied {
        echo,
        ..Applied::default()
    };
    for consent in &plan.consent {
        let what = consent.what();
        let Some(client) = applied.client_for(client, clusters, consent.cluster.as_deref(), &what) else {
            continue;
        };
        match add_consent(client, &consent.namespace, &consent.accept_from).await {
            Ok(Some(value)) => applied.done(format!("{what}: {ACCEPT_FROM_ANNOTATION}={value}")),
            Ok(None) => applied.done(format!("{what}: accepts them already")),
            Err(e) => applied.failed(format!("{what}: {e}")),
        }
    }
    for adoption in &plan.adopt {
        let what = adoption.what();
        let Some(client) = applied.client_for(client, clusters, adoption.cluster.as_deref(), &what) else {
            continue;
        };
        match mark(client, adoption).await {
            Ok(()) => applied.done(format!("{what}: {ADOPT_BY_ANNOTATION}={}", adoption.rule)),
            Err(kube::Error::Api(s)) if s.code == 404 => applied.done(format!(
                "{what}: gone since the plan was made; not created (the rule makes it)"
            )),
            Err(e) => applied.failed(format!(
                "{what}: {}",
                crate::controller::error::without_values(&e.to_string())
            )),
        }
    }
    for rule in plan.cluster_inventories.iter().chain(&plan.rules) {
        let what = format!(
            "{} {}{}",
            rule["kind"].as_str().unwrap_or_default(),
            rule["metadata"]["namespace"]
                .as_str()
                .map(|n| format!("{n}/"))
                .unwrap_or_default(),
            rule["metadata"]["name"].as_str().unwrap_or_default()
        );
        match create_rule(client, rule).await {
            Ok(true) => applied.done(format!("{what}: created")),
            Ok(false) => applied.done(format!("{what}: exists with this spec already")),
            Err(e) => applied.failed(format!("{what}: {e}")),
        }
    }
    applied
}

/// Adds `entries` to a namespace's `mimeo.dev/accept-from`, keeping what is there: a merge
/// patch that names the resourceVersion it read, so that a write in between is retried on
/// what it wrote rather than overwritten. `None` when nothing needed adding.
async fn add_consent(client: &Client, namespace: &str, entries: &[String]) -> Result<Option<String>, String> {
    let api: Api<Namespace> = Api::all(client.clone());
    for _ in 0..5 {
        let found = api.get(namespace).await.map_err(|e| e.to_string())?;
        let existing = found
            .annotations()
            .get(ACCEPT_FROM_ANNOTATION)
            .map(String::as_str);
        let Some(value) = accept_from_with(existing, entries) else {
            return Ok(None);
        };
        let patch = json!({"metadata": {"resourceVersion": found.resource_version(),
                                        "annotations": {ACCEPT_FROM_ANNOTATION: value}}});
        match api
            .patch(
                namespace,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..Default::default()
                },
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => return Ok(Some(value)),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err("changed by someone else on every try; run again".into())
}

/// Adds the adoption mark to an existing copy (a merge patch fails on one that is gone, where a
/// server-side apply would create it empty).
async fn mark(client: &Client, adoption: &PlannedAdoption) -> kube::Result<()> {
    let api = dynamic_api(
        client,
        &adoption.api_version,
        &adoption.kind,
        Some(&adoption.namespace),
    )
    .await?;
    let patch = json!({"metadata": {"annotations": {ADOPT_BY_ANNOTATION: adoption.rule}}});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch(&adoption.name, &params, &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// The API of objects of `api_version` and `kind` (found by discovery) in `namespace`, or of
/// the cluster's when `None`: for entries that name their kind as a document does.
pub async fn dynamic_api(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
) -> kube::Result<Api<DynamicObject>> {
    let gvk = GroupVersionKind::try_from(&kube::core::TypeMeta {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
    })
    .map_err(|e| kube::Error::Discovery(kube::error::DiscoveryError::MissingResource(e.to_string())))?;
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk).await?;
    Ok(match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    })
}

/// Whether `found` holds everything `wanted` says: the apiserver adds defaults to what was
/// created (`conflict: Fail`, `deletion: Delete`), so equality would call a rule created by the
/// same plan someone else's.
fn holds(found: &Value, wanted: &Value) -> bool {
    match (found, wanted) {
        (Value::Object(found), Value::Object(wanted)) => wanted
            .iter()
            .all(|(k, v)| found.get(k).is_some_and(|f| holds(f, v))),
        (Value::Array(found), Value::Array(wanted)) => {
            found.len() == wanted.len() && found.iter().zip(wanted).all(|(f, w)| holds(f, w))
        }
        _ => found == wanted,
    }
}

/// Creates a rule or a `ClusterInventory` (any mimeo kind); `false` when it exists with the same
/// spec. One of that name with another spec is someone else's: it is left alone, and said.
async fn create_rule(client: &Client, rule: &Value) -> Result<bool, String> {
    let kind = rule["kind"].as_str().unwrap_or_default();
    if rule["apiVersion"]
        .as_str()
        .is_some_and(|v| v != "mimeo.dev/v1alpha1")
    {
        return Err("is not of mimeo.dev/v1alpha1; a plan creates only mimeo's kinds".into());
    }
    let gvk = GroupVersionKind::gvk("mimeo.dev", "v1alpha1", kind);
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|e| format!("{kind} is not served: install mimeo's CRDs first ({e})"))?;
    let name = rule["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = match rule["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let object: DynamicObject = serde_json::from_value(rule.clone()).map_err(|e| e.to_string())?;
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api.create(&params, &object).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let found = api.get(name).await.map_err(|e| e.to_string())?;
            if holds(&found.data["spec"], &rule["spec"]) {
                Ok(false)
            } else {
                Err(
                    "exists with another spec; left as it is (delete it or rename the rule in the file)"
                        .into(),
                )
            }
        }
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::holds;
    use serde_json::json;

    #[test]
    fn defaults_the_apiserver_added_are_not_another_spec() {
        let wanted = json!({"targets": [{"namespace": "a"}]});
        assert!(holds(
            &json!({"targets": [{"namespace": "a", "createNamespace": false}]}),
            &wanted
        ));
        assert!(!holds(&json!({"targets": [{"namespace": "b"}]}), &wanted));
        assert!(!holds(
            &json!({"targets": [{"namespace": "a"}, {"namespace": "b"}]}),
            &wanted
        ));
        assert!(!holds(&json!({}), &wanted));
    }
}
