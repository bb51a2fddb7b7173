//! The kinds rules may sync and `nextTo` may follow, as they are now: set from the flags at the
//! start, and again whenever the configuration object changes them ([`super::configuration`]).
//! Every reconcile reads them afresh, and a change looks at every rule again.

use crate::config::Kinds;
use std::sync::Arc;

/// The kinds in effect, shared by every reconcile.
#[derive(Clone)]
pub struct LiveKinds {
    current: Arc<tokio::sync::watch::Sender<Arc<Kinds>>>,
}

impl LiveKinds {
    pub fn new(kinds: Kinds) -> Self {
        LiveKinds {
            current: Arc::new(tokio::sync::watch::Sender::new(Arc::new(kinds))),
        }
    }

    /// The kinds in effect now.
    pub fn get(&self) -> Arc<Kinds> {
        self.current.borrow().clone()
    }

    /// Puts `kinds` in effect; says whether that changed anything.
    pub fn set(&self, kinds: Kinds) -> bool {
        self.current.send_if_modified(|now| {
            let changed = **now != kinds;
            if changed {
                *now = Arc::new(kinds);
            }
            changed
        })
    }

    /// A tick at each change, for looking at every rule again.
    pub fn changes(&self) -> impl futures::Stream<Item = ()> + Send + 'static {
        futures::stream::unfold(self.current.subscribe(), |mut kinds| async move {
            kinds.changed().await.ok()?;
            Some(((), kinds))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn a_change_ticks_and_the_same_kinds_do_not() {
        let kinds = |allowed: &str| Kinds {
            allowed: vec![allowed.parse().unwrap()],
            next_to: vec![],
        };
        let live = LiveKinds::new(kinds("Secret"));
        let mut changes = Box::pin(live.changes());
        assert!(!live.set(kinds("Secret")));
        assert!(live.set(kinds("ConfigMap")));
        assert_eq!(changes.next().await, Some(()));
        assert_eq!(live.get().allowed[0].to_string(), "ConfigMap");
    }
}
