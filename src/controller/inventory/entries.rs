//! The watches an inventory reads through: one per entry kind (openMCP `Cluster`s, Cluster API
//! `Cluster`s, `ClusterProfile`s), one of mimeo's own `AccessRequest`s and one of namespaces'
//! metadata (their labels choose namespaces and label `RemoteCluster`s), each started when the
//! first inventory needs it. A change wakes the inventories it concerns, so a new `Cluster` or
//! MCP namespace is seen within the watch's latency, not a poll's. One watch per kind, whatever
//! the number of namespaces: thousands of tenant namespaces cost no watch each.

use crate::api::ClusterInventory;
use crate::controller::retry::init_when_listed;
use crate::inventory::entry::{EntryNamespaces, INVENTORY_LABEL, Kind};
use crate::inventory::openmcp;
use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::core::PartialObjectMeta;
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

/// The namespaces' metadata, by name.
pub type Namespaces = Store<PartialObjectMeta<Namespace>>;

pub struct EntryWatches {
    client: Client,
    wake: UnboundedSender<ObjectRef<ClusterInventory>>,
    inventories: Store<ClusterInventory>,
    stores: Mutex<HashMap<Watched, Store<DynamicObject>>>,
    namespaces: Mutex<Option<Namespaces>>,
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
            namespaces: Mutex::new(None),
        }
    }

    /// Every namespace's metadata, from its cache, started and listed first if need be.
    pub async fn namespaces(&self) -> Result<Namespaces, EntriesError> {
        let store = lock(&self.namespaces)
            .get_or_insert_with(|| self.start_namespaces())
            .clone();
        let not_listed = || EntriesError::NotListed("namespaces".into());
        tokio::time::timeout(FIRST_LIST, store.wait_until_ready())
            .await
            .map_err(|_| not_listed())?
            .map_err(|_| not_listed())?;
        Ok(store)
    }

    /// A metadata-only watch of every namespace, waking the inventories that read one when it
    /// comes, goes or is relabelled.
    fn start_namespaces(&self) -> Namespaces {
        let writer = reflector::store::Writer::default();
        let store = writer.as_reader();
        let api = Api::<PartialObjectMeta<Namespace>>::all(self.client.clone());
        let stream = init_when_listed(watcher(api, watcher::Config::default()))
            .default_backoff()
            .reflect(writer)
            .touched_objects();
        let (wake, inventories) = (self.wake.clone(), self.inventories.clone());
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(namespace) => {
                        for inventory in inventories.state() {
                            let names = inventory.spec.namespaces.contains(&namespace.name_any());
                            if names || inventory.spec.namespace_selector.is_some() {
                                let _ = wake.unbounded_send(ObjectRef::from_obj(&*inventory));
                            }
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "inventory namespace watch"),
                }
            }
        });
        store
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
        let stream = init_when_listed(watcher(api, config))
            .default_backoff()
            .reflect(writer)
            .touched_objects();
        let (wake, inventories) = (self.wake.clone(), self.inventories.clone());
        let namespaces = lock(&self.namespaces).clone();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(object) => wake_for(&wake, &inventories, namespaces.as_ref(), watched, &object),
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
/// namespace (by name, or by the labels in `namespaces`; any with a `namespaceSelector` while
/// those are not known); for an `AccessRequest`, the inventory its label names.
fn wake_for(
    wake: &UnboundedSender<ObjectRef<ClusterInventory>>,
    inventories: &Store<ClusterInventory>,
    namespaces: Option<&Namespaces>,
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
            let labels = namespaces
                .and_then(|n| n.get(&ObjectRef::new(&namespace)))
                .map(|n| n.labels().clone());
            for inventory in inventories.state() {
                if Kind::of(&inventory.spec) != kind {
                    continue;
                }
                let reads = match (EntryNamespaces::of(&inventory.spec), &labels) {
                    (Ok(read), Some(labels)) => read.reads(&namespace, labels),
                    (Ok(read), None) => read.by_labels() || inventory.spec.namespaces.contains(&namespace),
                    // Woken, it says what is wrong with its selector.
                    (Err(_), _) => true,
                };
                if reads {
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
