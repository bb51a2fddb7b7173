//! Watches of single namespaces by name, for mimeo limited to namespaces.
//!
//! A Role can grant nothing cluster-wide, and a namespace watch through
//! `/api/v1/namespaces?fieldSelector=metadata.name=<ns>` is a cluster-scoped request. The older
//! path `/api/v1/watch/namespaces/<ns>` names the namespace in the URL, so the apiserver
//! authorizes it against the Roles of `<ns>` itself, where `watch` on `namespaces` with
//! `resourceNames: [<ns>]` allows it. kube-runtime's watcher does not use that path, so this module
//! follows it by hand: read the namespace, then watch it from that version (metadata only), and
//! read it again whenever the watch cannot go on (its version expired, or an error).

use crate::controller::retry::CappedBackoff;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, GetParams};
use kube::core::{PartialObjectMeta, WatchEvent};
use kube::runtime::utils::Backoff;
use kube::{Client, ResourceExt};
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::task::AbortHandle;

/// What the watches learn, in the order they learn it for each namespace.
#[derive(Debug)]
pub enum NamespaceEvent {
    /// The namespace is there, as now (managedFields removed).
    Seen(Box<PartialObjectMeta<Namespace>>),
    /// It is not there (never was, or was deleted).
    Gone(String),
    /// A read or watch failed; it is tried again with backoff.
    Failed(kube::Error),
}

/// A watch request ends after this long and is made again from the last version seen, as
/// kube-runtime's watcher does, so a silently dropped connection does not go unnoticed forever.
const WATCH_TIMEOUT_SECS: u32 = 290;

/// Asks for metadata only: labels and annotations are all mimeo reads of a namespace.
const METADATA_ONLY: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// Starts one task per namespace in `names`; each first reads its namespace (`Seen` or `Gone`),
/// then sends every change. The tasks end when the receiver is dropped or they are aborted.
pub fn spawn(
    client: &Client,
    names: &BTreeSet<String>,
) -> (UnboundedReceiver<NamespaceEvent>, Vec<AbortHandle>) {
    let (tx, rx) = unbounded_channel();
    let tasks = names
        .iter()
        .map(|name| tokio::spawn(follow(client.clone(), name.clone(), tx.clone())).abort_handle())
        .collect();
    (rx, tasks)
}

/// How a watch request ended.
enum Ended {
    /// The server closed it (its timeout): watch again from the last version.
    Closed,
    /// The version to watch from is too old, or the request failed: read the namespace again.
    Reread,
}

async fn follow(client: Client, name: String, tx: UnboundedSender<NamespaceEvent>) {
    let api = Api::<Namespace>::all(client.clone());
    let mut backoff = CappedBackoff::new(Duration::from_secs(1), Duration::from_secs(30));
    loop {
        // resourceVersion=0: served from the apiserver's watch cache, not from etcd; the watch
        // below replays whatever came after the version read.
        let mut version = match api.get_metadata_opt_with(&name, &GetParams::any()).await {
            Ok(Some(mut ns)) => {
                ns.managed_fields_mut().clear();
                let version = ns.resource_version();
                if tx.send(NamespaceEvent::Seen(Box::new(ns))).is_err() {
                    return;
                }
                version
            }
            // Watched without a version, the namespace gets an ADDED event if it appears
            // between this read and the watch.
            Ok(None) => {
                if tx.send(NamespaceEvent::Gone(name.clone())).is_err() {
                    return;
                }
                None
            }
            Err(e) => {
                if tx.send(NamespaceEvent::Failed(e)).is_err() {
                    return;
                }
                pause(&mut backoff).await;
                continue;
            }
        };
        loop {
            match watch_once(&client, &name, &mut version, &tx, &mut backoff).await {
                Ok(Ended::Closed) => continue,
                Ok(Ended::Reread) => break,
                Err(Stop) => return,
            }
        }
    }
}

/// The receiver is gone: nobody listens any more.
struct Stop;

/// Waits before trying again after a failure: 1 s, doubling up to 30 s until something works.
async fn pause(backoff: &mut CappedBackoff) {
    tokio::time::sleep(backoff.next().unwrap_or(Duration::from_secs(30))).await;
}

/// One watch request from `version`, sending what it brings and moving `version` along.
async fn watch_once(
    client: &Client,
    name: &str,
    version: &mut Option<String>,
    tx: &UnboundedSender<NamespaceEvent>,
    backoff: &mut CappedBackoff,
) -> Result<Ended, Stop> {
    let send = |event| tx.send(event).map_err(|_| Stop);
    let mut url = format!(
        "/api/v1/watch/namespaces/{name}?allowWatchBookmarks=true&timeoutSeconds={WATCH_TIMEOUT_SECS}"
    );
    if let Some(version) = version.as_deref() {
        url.push_str("&resourceVersion=");
        url.push_str(version);
    }
    let request = match http::Request::get(url)
        .header(http::header::ACCEPT, METADATA_ONLY)
        .body(Vec::new())
    {
        Ok(request) => request,
        Err(e) => {
            send(NamespaceEvent::Failed(kube::Error::HttpError(e)))?;
            return Ok(Ended::Reread);
        }
    };
    let events = match client
        .request_events::<PartialObjectMeta<Namespace>>(request)
        .await
    {
        Ok(events) => events,
        Err(e) => {
            send(NamespaceEvent::Failed(e))?;
            pause(backoff).await;
            return Ok(Ended::Reread);
        }
    };
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        if event.is_ok() {
            backoff.reset();
        }
        match event {
            Ok(WatchEvent::Added(mut ns)) | Ok(WatchEvent::Modified(mut ns)) => {
                ns.managed_fields_mut().clear();
                *version = ns.resource_version();
                send(NamespaceEvent::Seen(Box::new(ns)))?;
            }
            Ok(WatchEvent::Deleted(ns)) => {
                *version = ns.resource_version();
                send(NamespaceEvent::Gone(name.to_owned()))?;
            }
            Ok(WatchEvent::Bookmark(bookmark)) => {
                *version = Some(bookmark.metadata.resource_version);
            }
            // 410 Gone: the version is older than the apiserver keeps; anything else is a
            // failure worth showing. Either way, read the namespace afresh.
            Ok(WatchEvent::Error(status)) => {
                if status.code != 410 {
                    send(NamespaceEvent::Failed(kube::Error::Api(status)))?;
                }
                pause(backoff).await;
                return Ok(Ended::Reread);
            }
            Err(e) => {
                send(NamespaceEvent::Failed(e))?;
                pause(backoff).await;
                return Ok(Ended::Reread);
            }
        }
    }
    Ok(Ended::Closed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response, StatusCode};
    use kube::client::Body;
    use serde_json::json;

    fn namespace(version: &str, label: &str) -> serde_json::Value {
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
               "metadata": {"name": "team-a", "resourceVersion": version, "labels": {"l": label},
                            "managedFields": [{"manager": "kubectl"}]}})
    }

    fn watch_events(events: &[serde_json::Value]) -> Body {
        let lines: Vec<String> = events.iter().map(|e| e.to_string() + "\n").collect();
        Body::from(lines.concat().into_bytes())
    }

    /// Seen events as (resourceVersion, label), Gone as ("gone", "").
    fn seen(event: NamespaceEvent) -> (String, String) {
        match event {
            NamespaceEvent::Seen(ns) => {
                assert!(ns.metadata.managed_fields.is_none_or(|m| m.is_empty()));
                (
                    ns.metadata.resource_version.unwrap_or_default(),
                    ns.metadata.labels.unwrap_or_default()["l"].clone(),
                )
            }
            NamespaceEvent::Gone(name) => ("gone".into(), name),
            NamespaceEvent::Failed(e) => panic!("failed: {e}"),
        }
    }

    /// Read, watch from that version, follow a change; an expired version (410) means reading
    /// again; a namespace that is gone is watched without a version, and a closed watch is made
    /// again from the last version seen. Every watch asks for metadata only.
    #[tokio::test]
    async fn a_namespace_is_read_then_watched_and_read_again_when_its_version_expires() {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let (mut events, tasks) = spawn(&client, &BTreeSet::from(["team-a".to_owned()]));
        let apiserver = tokio::spawn(async move {
            futures::pin_mut!(handle);
            let mut next = async || {
                let (request, respond) = handle.next_request().await.expect("a request");
                (request.uri().to_string(), request.headers().clone(), respond)
            };
            let ok = |body: Body| Response::builder().body(body).unwrap();

            let (uri, _, respond) = next().await;
            assert_eq!(uri, "/api/v1/namespaces/team-a?&resourceVersion=0");
            respond.send_response(ok(Body::from(namespace("5", "a").to_string().into_bytes())));

            let (uri, headers, respond) = next().await;
            assert!(uri.starts_with("/api/v1/watch/namespaces/team-a?"), "{uri}");
            assert!(
                uri.contains("allowWatchBookmarks=true") && uri.ends_with("&resourceVersion=5"),
                "{uri}"
            );
            assert_eq!(headers[http::header::ACCEPT], METADATA_ONLY);
            respond.send_response(ok(watch_events(&[
                json!({"type": "MODIFIED", "object": namespace("6", "b")}),
                json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                   "reason": "Expired", "code": 410, "message": "too old"}}),
            ])));

            let (uri, _, respond) = next().await;
            assert_eq!(uri, "/api/v1/namespaces/team-a?&resourceVersion=0");
            let missing = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                 "reason": "NotFound", "code": 404, "message": "not found"});
            respond.send_response(
                Response::builder()
                    .status(StatusCode::NOT_FOUND)
                    .body(Body::from(missing.to_string().into_bytes()))
                    .unwrap(),
            );

            let (uri, _, respond) = next().await;
            assert!(
                !uri.contains("resourceVersion"),
                "a namespace that is gone: {uri}"
            );
            respond.send_response(ok(watch_events(&[
                json!({"type": "ADDED", "object": namespace("9", "c")}),
                json!({"type": "BOOKMARK", "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                                      "metadata": {"resourceVersion": "12"}}}),
            ])));

            let (uri, _, _) = next().await;
            assert!(
                uri.ends_with("&resourceVersion=12"),
                "again from the bookmark: {uri}"
            );
        });

        let mut got = Vec::new();
        for _ in 0..4 {
            got.push(seen(events.recv().await.expect("an event")));
        }
        let got: Vec<(&str, &str)> = got.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert_eq!(got, [("5", "a"), ("6", "b"), ("gone", "team-a"), ("9", "c")]);
        apiserver.await.unwrap();
        for task in tasks {
            task.abort();
        }
    }
}
