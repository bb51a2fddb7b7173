//! The copies written here whose write the copies cache may not have seen yet. Deciding on the
//! stale cached copy would write the same content twice; the written copy is the truer one until
//! the cache moves past the version the write replaced.

use super::echoes::CopyId;
use crate::locks::lock;
use crate::room::shrink_if_sparse;
use crate::sync::live::LiveCopy;
use kube::ResourceExt;
use kube::core::ApiResource;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Past this many remembered writes, those the copies cache has caught up with are forgotten.
const WRITTEN_SWEEP: usize = 1024;

/// A write remembered: the kind, the version it replaced, and the copy the apiserver returned.
type Write = (ApiResource, String, Arc<LiveCopy>);

/// What the copies cache holds at a place (kind, namespace, name), as its watch last saw it.
pub(super) type InCache<'a> = &'a dyn Fn(&ApiResource, Option<&str>, &str) -> Option<Arc<LiveCopy>>;

/// The writes remembered. Swept past [`WRITTEN_SWEEP`] entries, so that copies never looked at
/// again (their rule gone) do not stay, Secret data and all.
pub(super) struct Written {
    writes: Mutex<HashMap<CopyId, Write>>,
    /// The number of entries at which the writes are swept next.
    sweep_at: AtomicUsize,
}

impl Default for Written {
    fn default() -> Self {
        Written {
            writes: Mutex::default(),
            sweep_at: AtomicUsize::new(WRITTEN_SWEEP),
        }
    }
}

impl Written {
    /// The truer of the cached copy at `id` and a write of ours there: the write while the cache
    /// still holds the version it replaced, the cached copy once the cache caught up (or someone
    /// changed the copy since), and then the write is forgotten.
    pub fn truer(&self, id: &CopyId, cached: Arc<LiveCopy>) -> Arc<LiveCopy> {
        let mut writes = lock(&self.writes);
        match writes.get(id) {
            Some((_, replaced, stored)) if cache_lags(cached.resource_version().as_deref(), replaced) => {
                return stored.clone();
            }
            Some(_) => {
                writes.remove(id);
                shrink_if_sparse(&mut writes);
            }
            None => {}
        }
        cached
    }

    /// Remembers a write at `id` over version `replaced`, sweeping now and then.
    pub fn record(
        &self,
        id: CopyId,
        resource: &ApiResource,
        replaced: String,
        stored: LiveCopy,
        in_cache: InCache,
    ) {
        let entries = {
            let mut writes = lock(&self.writes);
            writes.insert(id, (resource.clone(), replaced, Arc::new(stored)));
            writes.len()
        };
        // Amortised: after a sweep the next comes only once the map has doubled, so a fan-out
        // of thousands of copies the cache has yet to see is not swept at every write.
        if entries > self.sweep_at.load(Ordering::Relaxed) {
            let left = self.sweep(in_cache);
            self.sweep_at
                .store((2 * left).max(WRITTEN_SWEEP), Ordering::Relaxed);
        }
    }

    /// Whether `version` of the copy at `id` is the very one a write of ours stored; if so, the
    /// cache now holds that write, and it is forgotten.
    pub fn is_echo(&self, id: &CopyId, version: &str) -> bool {
        let mut writes = lock(&self.writes);
        let stored = writes
            .get(id)
            .is_some_and(|(_, _, stored)| stored.resource_version().as_deref() == Some(version));
        if stored {
            writes.remove(id);
            shrink_if_sparse(&mut writes);
        }
        stored
    }

    /// Forgets the writes the copies cache has caught up with (or whose copy it no longer holds);
    /// returns how many are left.
    fn sweep(&self, in_cache: InCache) -> usize {
        let entries: Vec<(CopyId, ApiResource, String)> = lock(&self.writes)
            .iter()
            .map(|(id, (resource, replaced, _))| (id.clone(), resource.clone(), replaced.clone()))
            .collect();
        let settled: Vec<CopyId> = entries
            .into_iter()
            .filter(|((_, namespace, name), resource, replaced)| {
                let namespace = (!namespace.is_empty()).then_some(namespace.as_str());
                let cached = in_cache(resource, namespace, name);
                !cache_lags(cached.and_then(|c| c.resource_version()).as_deref(), replaced)
            })
            .map(|(id, ..)| id)
            .collect();
        let mut writes = lock(&self.writes);
        for id in &settled {
            writes.remove(id);
        }
        shrink_if_sparse(&mut writes);
        writes.len()
    }
}

/// Whether the copies cache still holds the version a write of ours replaced (so the written copy
/// is the truer one): the cache holds that very version. A cache that moved on, or lost the
/// object, has caught up.
fn cache_lags(cached_version: Option<&str>, replaced: &str) -> bool {
    cached_version == Some(replaced)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_copy_is_kept_only_while_the_cache_lags() {
        assert!(
            cache_lags(Some("7"), "7"),
            "the cache still holds what the write replaced"
        );
        assert!(
            !cache_lags(Some("8"), "7"),
            "the cache has the write, or a later change"
        );
        assert!(!cache_lags(None, "7"), "the copy is gone from the cache");
    }
}
