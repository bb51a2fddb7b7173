//! The watches an inventory reads through: one per entry kind (openMCP `Cluster`s, Cluster API
//! `Cluster`s, `ClusterProfile`s) and one of mimeo's own `AccessRequest`s, each started when the
//! first inventory needs it. A change wakes the inventories it concerns, so a new `Cluster` is
//! seen within the watch's latency, not a poll's.

use crate::api::ClusterInventory;
use crate::inventory::entry::{INVENTORY_LABEL, Kind};
use crate::inventory::openmcp;
use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// How long a first list may take before the inventory is looked at again.
const FIRST_LIST: Duration = Duration::from_secs(10);

/// What a watched kind is, for the inventories that read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Watched {
    Entries(Kind),
    AccessRequests,
}

/// Why entries cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum EntriesError {
    #[error(
        "{0} is not served by this cluster (none of the versions {1}): install its CRD, or delete this inventory"
    )]
    NotServed(String, String),
    #[error("reading {0}: {1}")]
    Read(String, kube::Error),
    #[error("the first list of {0} has not finished yet")]
    NotListed(String),
}

pub struct EntryWatches {
    client: Client,
    wake: UnboundedSender<ObjectRef<ClusterInventory>>,
    inventories: Store<ClusterInventory>,
    stores: Mutex<HashMap<Watched, Store<DynamicObject>>>,
}

impl EntryWatches {
    pub fn new(
        client: Client,
        wake: UnboundedSender<ObjectRef<ClusterInventory>>,
        inventories: Store<ClusterInventory>,
    ) -> Self {
        EntryWatches {
            client,
            wake,
            inventories,
            stores: Mutex::new(HashMap::new()),
        }
    }

    /// Every object of `watched`, from its cache, started and listed first if need be.
    pub async fn objects(
        &self,
        watched: Watched,
    ) -> Result<Vec<std::sync::Arc<DynamicObject>>, EntriesError> {
        let cached = lock(&self.stores).get(&watched).cloned();
        let store = match cached {
            Some(store) => store,
            None => self.start(watched).await?,
        };
        tokio::time::timeout(FIRST_LIST, store.wait_until_ready())
            .await
            .map_err(|_| EntriesError::NotListed(describe(watched)))?
            .map_err(|_| EntriesError::NotListed(describe(watched)))?;
        Ok(store.state())
    }

    async fn start(&self, watched: Watched) -> Result<Store<DynamicObject>, EntriesError> {
        let resource = self.served(watched).await?;
        let mut stores = lock(&self.stores);
        if let Some(store) = stores.get(&watched) {
            return Ok(store.clone());
        }
        let api = Api::<DynamicObject>::all_with(self.client.clone(), &resource);
        let config = match watched {
            Watched::AccessRequests => watcher::Config::default().labels(INVENTORY_LABEL),
            Watched::Entries(_) => watcher::Config::default(),
        };
        let writer = reflector::store::Writer::new(resource);
        let store = writer.as_reader();
        let stream = watcher(api, config)
            .default_backoff()
            .reflect(writer)
            .touched_objects();
        let (wake, inventories) = (self.wake.clone(), self.inventories.clone());
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(object) => wake_for(&wake, &inventories, watched, &object),
                    Err(e) => tracing::debug!(error = %e, watched = %describe(watched), "inventory watch"),
                }
            }
        });
        stores.insert(watched, store.clone());
        Ok(store)
    }

    /// The served version of a watched kind, preferred first.
    async fn served(&self, watched: Watched) -> Result<ApiResource, EntriesError> {
        let (group, kind, plural, versions): (&str, &str, &str, &[&str]) = match watched {
            Watched::Entries(k) => (k.group(), k.kind(), k.plural(), k.versions()),
            Watched::AccessRequests => (
                openmcp::GROUP,
                "AccessRequest",
                "accessrequests",
                &[openmcp::VERSION],
            ),
        };
        for version in versions {
            let resource =
                ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
            let api = Api::<DynamicObject>::all_with(self.client.clone(), &resource);
            match api.list_metadata(&ListParams::default().limit(1)).await {
                Ok(_) => return Ok(resource),
                Err(kube::Error::Api(e)) if e.code == 404 => continue,
                Err(e) => return Err(EntriesError::Read(describe(watched), e)),
            }
        }
        Err(EntriesError::NotServed(describe(watched), versions.join(", ")))
    }
}

/// Wakes the inventories an object concerns: for an entry, those of its kind that read its
/// namespace; for an `AccessRequest`, the inventory its label names.
fn wake_for(
    wake: &UnboundedSender<ObjectRef<ClusterInventory>>,
    inventories: &Store<ClusterInventory>,
    watched: Watched,
    object: &DynamicObject,
) {
    match watched {
        Watched::AccessRequests => {
            if let Some(name) = object.labels().get(INVENTORY_LABEL) {
                let _ = wake.unbounded_send(ObjectRef::new(name));
            }
        }
        Watched::Entries(kind) => {
            let namespace = object.namespace().unwrap_or_default();
            for inventory in inventories.state() {
                if Kind::of(&inventory.spec) == kind && inventory.spec.namespaces.contains(&namespace) {
                    let _ = wake.unbounded_send(ObjectRef::from_obj(&*inventory));
                }
            }
        }
    }
}

fn describe(watched: Watched) -> String {
    match watched {
        Watched::Entries(kind) => kind.qualified(),
        Watched::AccessRequests => format!("AccessRequest.{}", openmcp::GROUP),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
