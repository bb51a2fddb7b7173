//! How many registry downloads run at once: a global limit, and a share of it per namespace, so
//! that one tenant's many rules (or one slow registry a tenant runs) cannot take every slot and
//! hold everyone else's plugins back. A download waits for its namespace's share first, then for a
//! global slot, so a tenant's queue never holds global slots while it waits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub(super) struct DownloadSlots {
    global: Arc<Semaphore>,
    per_share: usize,
    /// The share of each namespace with a download waiting or running; dropped when idle.
    shares: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// A download's right to run; the slots go back when it is dropped.
pub(super) struct Slot {
    _global: OwnedSemaphorePermit,
    share: Option<(String, OwnedSemaphorePermit)>,
    slots: Arc<DownloadSlots>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Some((name, permit)) = self.share.take() else {
            return;
        };
        drop(permit);
        let mut shares = self.slots.shares.lock().unwrap_or_else(|p| p.into_inner());
        // Idle and held by nobody else (the map's own reference only): forget it, so that the map
        // holds only namespaces downloading now.
        if shares
            .get(&name)
            .is_some_and(|s| Arc::strong_count(s) == 1 && s.available_permits() == self.slots.per_share)
        {
            shares.remove(&name);
        }
    }
}

impl DownloadSlots {
    /// `global` downloads at once, `per_share` of them for any one namespace (both at least 1; a
    /// share larger than the global limit is the global limit).
    pub fn new(global: usize, per_share: usize) -> Arc<DownloadSlots> {
        let global = global.max(1);
        Arc::new(DownloadSlots {
            global: Arc::new(Semaphore::new(global)),
            per_share: per_share.clamp(1, global),
            shares: Mutex::new(HashMap::new()),
        })
    }

    /// Waits for a slot: first one of `share`'s (a rule's namespace; `None` for the platform's
    /// own rules and the command line, which only the global limit bounds), then a global one.
    pub async fn acquire(self: &Arc<Self>, share: Option<&str>) -> Slot {
        let share = match share {
            Some(name) => {
                let semaphore = self
                    .shares
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(name.to_owned())
                    .or_insert_with(|| Arc::new(Semaphore::new(self.per_share)))
                    .clone();
                let permit = semaphore.acquire_owned().await.expect("never closed");
                Some((name.to_owned(), permit))
            }
            None => None,
        };
        let global = self.global.clone().acquire_owned().await.expect("never closed");
        Slot {
            _global: global,
            share,
            slots: self.clone(),
        }
    }

    #[cfg(test)]
    fn namespaces_known(&self) -> usize {
        self.shares.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn acquired_within(slots: &Arc<DownloadSlots>, share: Option<&str>) -> Option<Slot> {
        tokio::time::timeout(Duration::from_millis(50), slots.acquire(share))
            .await
            .ok()
    }

    #[tokio::test]
    async fn a_namespace_takes_its_share_and_others_still_get_slots() {
        let slots = DownloadSlots::new(4, 2);
        let a1 = acquired_within(&slots, Some("a")).await.expect("a's first");
        let _a2 = acquired_within(&slots, Some("a")).await.expect("a's second");
        assert!(
            acquired_within(&slots, Some("a")).await.is_none(),
            "a's third waits"
        );
        let _b1 = acquired_within(&slots, Some("b"))
            .await
            .expect("b is not held back by a");
        let _platform = acquired_within(&slots, None)
            .await
            .expect("a global slot is left");
        assert!(
            acquired_within(&slots, Some("c")).await.is_none(),
            "all four are taken"
        );
        drop(a1);
        let _c1 = acquired_within(&slots, Some("c"))
            .await
            .expect("a's slot went back");
    }

    #[tokio::test]
    async fn idle_namespaces_are_forgotten() {
        let slots = DownloadSlots::new(2, 1);
        for name in ["a", "b", "c"] {
            drop(acquired_within(&slots, Some(name)).await.unwrap());
        }
        assert_eq!(slots.namespaces_known(), 0);
        let held = acquired_within(&slots, Some("a")).await.unwrap();
        assert_eq!(slots.namespaces_known(), 1);
        drop(held);
        assert_eq!(slots.namespaces_known(), 0);
    }

    #[test]
    fn limits_are_at_least_one_and_a_share_at_most_the_whole() {
        let slots = DownloadSlots::new(0, 0);
        assert_eq!((slots.global.available_permits(), slots.per_share), (1, 1));
        assert_eq!(DownloadSlots::new(3, 10).per_share, 3);
    }
}
