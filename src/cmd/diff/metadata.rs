//! The part of `mimeo diff` that is not a rule's copies: the annotations a `mimeo migrate` plan
//! adds (as `mimeo migrate --apply` would add them), and for a plain document (a `Namespace`, a
//! metadata-only object) the fields that a `kubectl apply --server-side` of it would delete.
//! A plan's entries on an openMCP `Cluster` are read through the client given for it, or said
//! to be not read.

use super::Documents;
use super::field_loss::dropped_by_server_side_apply;
use crate::cmd::migrate::accept_from_with;
use crate::cmd::migrate::apply::dynamic_api;
use crate::sync::ownership::{ACCEPT_FROM_ANNOTATION, ADOPT_BY_ANNOTATION};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject};
use kube::{Client, ResourceExt};
use std::collections::BTreeMap;

/// The lines to print, and the exit code they call for: 1 for a change, 2 for an object that
/// could not be read or a document that would delete another manager's fields. `clusters` are
/// the clients for the openMCP `Cluster`s (`namespace/name`) the user gave a kubeconfig for; an
/// entry on another one is a note, since nothing there is known.
pub async fn metadata_changes(
    client: &Client,
    clusters: &BTreeMap<String, Client>,
    documents: &Documents,
) -> (String, u8) {
    let mut out = String::new();
    let mut code = 0;
    if let Some(plan) = &documents.plan {
        code = consents(client, clusters, plan, &mut out).await;
        code = code.max(adoptions(client, clusters, plan, &mut out).await);
    }
    code = code.max(others(client, documents, &mut out).await);
    (out, code)
}

/// The client for an entry on `cluster` (`None`: this one); without one, a note in `out`.
fn client_for<'a>(
    client: &'a Client,
    clusters: &'a BTreeMap<String, Client>,
    cluster: Option<&String>,
    what: &str,
    out: &mut String,
) -> Option<&'a Client> {
    let Some(cluster) = cluster else {
        return Some(client);
    };
    let found = clusters.get(cluster);
    if found.is_none() {
        out.push_str(&format!(
            "  note: {what}: not read, so not shown: give --cluster-kubeconfig {cluster}=PATH\n"
        ));
    }
    found
}

/// The plan's consents: each namespace's `accept-from` as it would change. The exit code.
async fn consents(
    client: &Client,
    clusters: &BTreeMap<String, Client>,
    plan: &crate::cmd::migrate::Plan,
    out: &mut String,
) -> u8 {
    let mut code = 0;
    for consent in &plan.consent {
        let what = consent.what();
        let Some(client) = client_for(client, clusters, consent.cluster.as_ref(), &what, out) else {
            continue;
        };
        match Api::<Namespace>::all(client.clone())
            .get(&consent.namespace)
            .await
        {
            Ok(ns) => {
                let existing = ns.annotations().get(ACCEPT_FROM_ANNOTATION).map(String::as_str);
                match accept_from_with(existing, &consent.accept_from) {
                    Some(value) => {
                        out.push_str(&format!(
                            "~ annotate {what}: {ACCEPT_FROM_ANNOTATION}: {:?} -> {value:?}\n",
                            existing.unwrap_or_default()
                        ));
                        code = code.max(1);
                    }
                    None => out.push_str(&format!("  {what} accepts them already\n")),
                }
            }
            Err(e) => {
                out.push_str(&format!("! Failed {what}: {e}\n"));
                code = 2;
            }
        }
    }
    code
}

/// The plan's adoptions: each object that would be marked for its rule. The exit code.
async fn adoptions(
    client: &Client,
    clusters: &BTreeMap<String, Client>,
    plan: &crate::cmd::migrate::Plan,
    out: &mut String,
) -> u8 {
    let mut code = 0;
    for adoption in &plan.adopt {
        let what = adoption.what();
        let Some(client) = client_for(client, clusters, adoption.cluster.as_ref(), &what, out) else {
            continue;
        };
        match get(
            client,
            &adoption.api_version,
            &adoption.kind,
            Some(&adoption.namespace),
            &adoption.name,
        )
        .await
        {
            Ok(Some(_)) => {
                out.push_str(&format!(
                    "~ annotate {what}: {ADOPT_BY_ANNOTATION}={}\n",
                    adoption.rule
                ));
                code = code.max(1);
            }
            Ok(None) => out.push_str(&format!("  {what} is gone: not marked (its rule makes it)\n")),
            Err(e) => {
                out.push_str(&format!("! Failed {what}: {e}\n"));
                code = 2;
            }
        }
    }
    code
}

/// The file's other documents: any whose server-side apply would delete another manager's
/// fields. The exit code.
async fn others(client: &Client, documents: &Documents, out: &mut String) -> u8 {
    let mut code = 0;
    for document in &documents.others {
        let kind = document["kind"].as_str().unwrap_or_default();
        let api_version = document["apiVersion"].as_str().unwrap_or("v1");
        let name = document["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = document["metadata"]["namespace"].as_str();
        let what = match namespace {
            Some(ns) => format!("{kind} {ns}/{name}"),
            None => format!("{kind} {name}"),
        };
        match get(client, api_version, kind, namespace, name).await {
            Ok(Some(live)) => {
                let dropped =
                    dropped_by_server_side_apply(&serde_json::to_value(&live).unwrap_or_default(), document);
                if !dropped.is_empty() {
                    out.push_str(&format!(
                        "! {what}: `kubectl apply --server-side` of this document would delete {} (set by kubectl, which it takes over); add only its annotations with a patch, as `mimeo migrate --apply` does\n",
                        dropped.join(", ")
                    ));
                    code = 2;
                }
            }
            Ok(None) => {}
            Err(e) => {
                out.push_str(&format!("! Failed {what}: {e}\n"));
                code = 2;
            }
        }
    }
    code
}

/// An object with its managed fields, `None` when it does not exist.
async fn get(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<DynamicObject>, String> {
    let api = dynamic_api(client, api_version, kind, namespace)
        .await
        .map_err(|e| e.to_string())?;
    api.get_opt(name)
        .await
        .map_err(|e| crate::controller::error::without_values(&e.to_string()))
}
