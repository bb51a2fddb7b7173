//! Turns at something only a few may do at once (compile a plugin, make and write a rule's
//! copies), shared between the namespaces of the rules waiting ([`FairQueue`] decides the
//! order): the async side, a wake-up per ticket and a guard that ends the turn however the work
//! ends.

mod fair_queue;

use crate::locks::lock;
use fair_queue::{FairQueue, Ticket};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// A rule's namespace; `None` for a `ClusterSyncRule`, whose turns are shared among them.
type Namespace = Option<String>;

pub struct Turns {
    state: Mutex<State>,
}

struct State {
    queue: FairQueue<Namespace>,
    /// The tickets waiting, each with what wakes its waiter.
    wake: HashMap<Ticket, oneshot::Sender<()>>,
}

impl State {
    fn admit(&mut self) {
        for ticket in self.queue.admit() {
            if let Some(waiter) = self.wake.remove(&ticket) {
                // A waiter gone has dropped its `Turn`, which leaves the queue.
                let _ = waiter.send(());
            }
        }
    }
}

/// A turn, from the moment it is asked for: dropped, it is given up (waiting) or done
/// (running), and the next turn goes to whom the queue says.
pub struct Turn {
    queue: Arc<Turns>,
    ticket: Ticket,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut state = lock(&self.queue.state);
        state.wake.remove(&self.ticket);
        state.queue.leave(self.ticket);
        state.admit();
    }
}

impl Turns {
    /// A queue for `slots` turns at once.
    pub fn new(slots: usize) -> Arc<Self> {
        Arc::new(Turns {
            state: Mutex::new(State {
                queue: FairQueue::new(slots),
                wake: HashMap::new(),
            }),
        })
    }

    /// Waits for a turn for a rule of `namespace`.
    pub async fn turn(self: &Arc<Self>, namespace: Option<&str>) -> Turn {
        let (waker, woken) = oneshot::channel();
        let ticket = {
            let mut state = lock(&self.state);
            let ticket = state.queue.join(namespace.map(str::to_owned));
            state.wake.insert(ticket, waker);
            state.admit();
            ticket
        };
        let turn = Turn {
            queue: self.clone(),
            ticket,
        };
        // The waker is only dropped unsent by this turn's own drop.
        let _ = woken.await;
        turn
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_turn_given_up_while_waiting_passes_to_the_next() {
        let queue = Turns::new(1);
        let running = queue.turn(Some("a")).await;
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move { queue.turn(Some("a")).await }
        });
        let gives_up = tokio::spawn({
            let queue = queue.clone();
            async move { queue.turn(Some("b")).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        gives_up.abort();
        let _ = gives_up.await;
        drop(running);
        let next = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the turn b gave up went to a")
            .unwrap();
        drop(next);
        let _again = tokio::time::timeout(Duration::from_secs(5), queue.turn(Some("c")))
            .await
            .expect("nothing holds the slot");
    }
}
