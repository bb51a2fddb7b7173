//! Which kinds a cluster serves, found by discovery and remembered until a
//! CustomResourceDefinition comes, changes or goes (or, where mimeo may not watch CRDs, for a
//! while).

use crate::controller::retry::init_when_listed;
use crate::locks::lock;
use crate::sync::kinds::KindRef;
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PartialObjectMeta};
use kube::core::ApiResource;
use kube::runtime::utils::Backoff;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::AbortHandle;

/// After a CustomResourceDefinition changes, how long to wait before each further wake-up of the
/// rules here: discovery catches up within a second or two on a quiet apiserver, and more under
/// load.
const DISCOVERY_CATCH_UP: [Duration; 4] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
];

/// How long a kind found by discovery is trusted when no CRD watch is there to say it changed
/// (mimeo limited to namespaces, or an identity that may not list CustomResourceDefinitions, such
/// as the one the docs give for openMCP's onboarding cluster, which may read the order kinds
/// only).
const DISCOVERY_TTL: Duration = Duration::from_secs(60);

/// A kind found by discovery: its resource, whether it is namespaced, and when it was found.
type Discovered = (ApiResource, bool, Instant);

/// The kinds found by discovery, and the CRD watch that says when to look again.
#[derive(Default)]
pub(super) struct Discovery {
    /// Keyed by apiVersion and kind. Cleared whenever a CustomResourceDefinition comes, changes
    /// or goes; without a CRD watch, an entry is trusted for [`DISCOVERY_TTL`].
    found: Arc<Mutex<HashMap<(String, String), Discovered>>>,
    crd_watch: Mutex<Option<AbortHandle>>,
    /// The cluster refused the CRD watch (403): discovery is trusted for [`DISCOVERY_TTL`]
    /// instead, and the watch is not asked for again (issue 56: retried for ever).
    crds_refused: Arc<AtomicBool>,
}

impl Drop for Discovery {
    fn drop(&mut self) {
        if let Some(task) = self.crd_watch.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
    }
}

impl Discovery {
    /// The API resource of a kind and whether it is namespaced, or `None` when the cluster does
    /// not serve it. Secrets and ConfigMaps are known; other kinds are looked up by discovery.
    /// With `watches_crds`, what was found is trusted until a CRD changes ([`Self::watch_crds`]
    /// must run); otherwise for [`DISCOVERY_TTL`].
    pub async fn resolve(
        &self,
        client: &Client,
        kind: &KindRef,
        watches_crds: bool,
    ) -> kube::Result<Option<(ApiResource, bool)>> {
        if let Some(resource) = kind.builtin_resource() {
            return Ok(Some((resource, true)));
        }
        let key = (kind.api_version.clone(), kind.kind.clone());
        let watches_crds = watches_crds && !self.crds_refused.load(Ordering::Relaxed);
        if let Some((resource, namespaced, at)) = lock(&self.found).get(&key)
            && (watches_crds || at.elapsed() < DISCOVERY_TTL)
        {
            return Ok(Some((resource.clone(), *namespaced)));
        }
        match kube::discovery::pinned_kind(client, &kind.gvk()).await {
            Ok((resource, capabilities)) => {
                let namespaced = capabilities.scope == kube::discovery::Scope::Namespaced;
                lock(&self.found).insert(key, (resource.clone(), namespaced, Instant::now()));
                Ok(Some((resource, namespaced)))
            }
            Err(kube::Error::Discovery(_)) => Ok(None),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Watches CustomResourceDefinitions (metadata only), once: a kind that appears or goes
    /// forgets what was found and calls `wake` (for every rule of this cluster), so that a copy
    /// waiting for its CRD is written without a restart.
    pub fn watch_crds(
        &self,
        client: &Client,
        backoff: Box<dyn Backoff>,
        wake: impl Fn() + Send + Sync + 'static,
    ) {
        let mut slot = lock(&self.crd_watch);
        if slot.is_some() {
            return;
        }
        let api = Api::<PartialObjectMeta<CustomResourceDefinition>>::all(client.clone());
        let stream = init_when_listed(watcher(api, watcher::Config::default())).backoff(backoff);
        let found = Arc::downgrade(&self.found);
        let refused = self.crds_refused.clone();
        let wake = Arc::new(wake);
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                let Some(known) = found.upgrade() else { break };
                match event {
                    Ok(watcher::Event::Apply(crd) | watcher::Event::Delete(crd)) => {
                        tracing::debug!(crd = %crd.name_any(), "a CustomResourceDefinition changed; rediscovering");
                        lock(&known).clear();
                        wake();
                        // Discovery serves a new kind a moment after its CRD is written (once it
                        // is Established and the discovery documents are rebuilt): a rule woken
                        // before then finds it not served yet, and its retries back off up to a
                        // minute. So the rules are woken again while discovery catches up.
                        let (found, wake) = (found.clone(), wake.clone());
                        tokio::spawn(async move {
                            for wait in DISCOVERY_CATCH_UP {
                                tokio::time::sleep(wait).await;
                                let Some(known) = found.upgrade() else { break };
                                lock(&known).clear();
                                wake();
                            }
                        });
                    }
                    Ok(_) => {}
                    Err(e) if forbidden(&e) => {
                        tracing::info!(error = %e, "may not watch CustomResourceDefinitions in this cluster (not needed): a kind found by discovery is looked up again after a minute instead");
                        refused.store(true, Ordering::Relaxed);
                        break;
                    }
                    Err(e) => tracing::debug!(error = %e, "CustomResourceDefinition watch failed; retrying"),
                }
            }
        });
        *slot = Some(task.abort_handle());
    }
}

/// Whether a watch failed because the identity may not list or watch the kind.
fn forbidden(error: &watcher::Error) -> bool {
    matches!(
        error,
        watcher::Error::InitialListFailed(kube::Error::Api(e)) | watcher::Error::WatchStartFailed(kube::Error::Api(e))
            if e.code == 403
    )
}
