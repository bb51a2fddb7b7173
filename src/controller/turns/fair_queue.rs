//! Turns at a few slots (compiles), shared fairly between keys (namespaces): pure bookkeeping, no
//! I/O and no async, so that the order is decided, and tested, from plain values.
//!
//! A slot that frees goes to the waiting key with the fewest turns running, then the one served
//! least recently (a key not served since it last had nothing running or waiting counts as never
//! served), then the one that came first; within a key, first come first served. So a key waiting
//! sees every other key served at most once before it: a tenant with twenty compiles waiting
//! delays another's by the one compile running, not twenty. It must never hold a turn for a key
//! with nothing waiting, nor keep anything for a key that has nothing running or waiting.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// One wait for a turn, from [`FairQueue::join`] to [`FairQueue::leave`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(u64);

/// What one key has: its tickets waiting, oldest first; its turns running; when it was last
/// served.
#[derive(Debug, Default)]
struct Key {
    waiting: VecDeque<Ticket>,
    running: usize,
    /// The grant count when this key was last served; 0: not since it was added.
    served: u64,
}

#[derive(Debug)]
pub struct FairQueue<K> {
    slots: usize,
    keys: HashMap<K, Key>,
    /// The key of each ticket waiting or running, and whether it is running.
    tickets: HashMap<Ticket, (K, bool)>,
    next_ticket: u64,
    grants: u64,
}

impl<K: Clone + Eq + Hash> FairQueue<K> {
    /// A queue for `slots` turns at once (at least one).
    pub fn new(slots: usize) -> Self {
        FairQueue {
            slots: slots.max(1),
            keys: HashMap::new(),
            tickets: HashMap::new(),
            next_ticket: 1,
            grants: 0,
        }
    }

    /// Waits for a turn for `key`: the ticket is running once [`FairQueue::admit`] returns it.
    pub fn join(&mut self, key: K) -> Ticket {
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        self.keys
            .entry(key.clone())
            .or_default()
            .waiting
            .push_back(ticket);
        self.tickets.insert(ticket, (key, false));
        ticket
    }

    /// Ends a ticket, waiting or running: its turn is done, or it is no longer wanted.
    pub fn leave(&mut self, ticket: Ticket) {
        let Some((key, running)) = self.tickets.remove(&ticket) else {
            return;
        };
        let Some(entry) = self.keys.get_mut(&key) else {
            return;
        };
        if running {
            entry.running -= 1;
        } else {
            entry.waiting.retain(|t| *t != ticket);
        }
        if entry.running == 0 && entry.waiting.is_empty() {
            self.keys.remove(&key);
        }
    }

    /// The tickets that get a turn now, in the order given, while slots are free.
    pub fn admit(&mut self) -> Vec<Ticket> {
        let mut admitted = Vec::new();
        while self.running() < self.slots {
            let Some(key) = self
                .keys
                .iter()
                .filter_map(|(key, entry)| {
                    let first = entry.waiting.front()?;
                    Some(((entry.running, entry.served, *first), key))
                })
                .min_by_key(|(order, _)| *order)
                .map(|(_, key)| key.clone())
            else {
                break;
            };
            self.grants += 1;
            let entry = self.keys.get_mut(&key).expect("found above");
            let ticket = entry.waiting.pop_front().expect("found above");
            entry.running += 1;
            entry.served = self.grants;
            self.tickets.insert(ticket, (key, true));
            admitted.push(ticket);
        }
        admitted
    }

    fn running(&self) -> usize {
        self.keys.values().map(|entry| entry.running).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What happens to a queue, in order.
    #[derive(Clone, Copy, Debug)]
    enum Step {
        /// A ticket for this key joins (tickets are numbered in the order they join, from 0).
        Join(&'static str),
        /// The turn admitted first of those running ends.
        Finish,
        /// The nth ticket to join leaves while it waits (no longer wanted).
        Cancel(usize),
    }
    use Step::*;

    /// Runs `steps`, admitting after each; returns the keys in the order they were admitted, each
    /// with the number of its ticket, and how many entries the queue still keeps.
    fn run(slots: usize, steps: &[Step]) -> (Vec<(&'static str, usize)>, usize) {
        let mut queue = FairQueue::new(slots);
        let mut joined: Vec<(&'static str, Ticket)> = Vec::new();
        let mut running: VecDeque<Ticket> = VecDeque::new();
        let mut order = Vec::new();
        for step in steps {
            match *step {
                Join(key) => joined.push((key, queue.join(key))),
                Finish => queue.leave(running.pop_front().expect("a turn is running")),
                Cancel(n) => queue.leave(joined[n].1),
            }
            for ticket in queue.admit() {
                let n = joined.iter().position(|(_, t)| *t == ticket).unwrap();
                order.push((joined[n].0, n));
                running.push_back(ticket);
            }
        }
        (order, queue.keys.len() + queue.tickets.len())
    }

    /// A case's name, its slots, its steps, and the turns expected: each key with its ticket.
    type Case = (&'static str, usize, Vec<Step>, Vec<(&'static str, usize)>);

    #[test]
    fn turns_go_round_the_namespaces_waiting() {
        let finish = |n: usize| std::iter::repeat_n(Finish, n);
        let joins = |key: &'static str, n: usize| std::iter::repeat_n(Join(key), n);
        let cases: Vec<Case> = vec![
            (
                "one key is first come first served",
                1,
                joins("a", 3).chain(finish(3)).collect(),
                vec![("a", 0), ("a", 1), ("a", 2)],
            ),
            (
                "a key that came later goes next, after the one running",
                1,
                joins("a", 3).chain([Join("b")]).chain(finish(4)).collect(),
                vec![("a", 0), ("b", 3), ("a", 1), ("a", 2)],
            ),
            (
                "twenty of one key delay another by the one running",
                1,
                joins("a", 20).chain([Join("b")]).chain(finish(21)).collect(),
                [("a", 0), ("b", 20)]
                    .into_iter()
                    .chain((1..20).map(|n| ("a", n)))
                    .collect(),
            ),
            (
                "three keys take turns",
                1,
                joins("a", 3)
                    .chain(joins("b", 2))
                    .chain([Join("c")])
                    .chain(finish(6))
                    .collect(),
                vec![("a", 0), ("b", 3), ("c", 5), ("a", 1), ("b", 4), ("a", 2)],
            ),
            (
                "the key served least recently goes first",
                1,
                vec![
                    Join("a"),
                    Join("b"),
                    Join("a"),
                    Join("b"),
                    Finish,
                    Finish,
                    Finish,
                    Finish,
                ],
                vec![("a", 0), ("b", 1), ("a", 2), ("b", 3)],
            ),
            (
                "a key that joins again after the others waited goes after them",
                1,
                vec![
                    Join("a"),
                    Join("b"),
                    Join("c"),
                    Finish,
                    Join("a"),
                    Finish,
                    Finish,
                    Finish,
                ],
                vec![("a", 0), ("b", 1), ("c", 2), ("a", 3)],
            ),
            (
                "with two slots, a key with none running goes before one with a turn running",
                2,
                joins("a", 3).chain([Join("b")]).chain(finish(4)).collect(),
                vec![("a", 0), ("a", 1), ("b", 3), ("a", 2)],
            ),
            (
                "a ticket that leaves while waiting gets no turn, and holds none",
                1,
                vec![Join("a"), Join("b"), Join("a"), Cancel(1), Finish, Finish],
                vec![("a", 0), ("a", 2)],
            ),
            (
                "a slot with nobody waiting stays free for the next to come",
                1,
                vec![Join("a"), Finish, Join("b"), Finish, Join("a"), Finish],
                vec![("a", 0), ("b", 1), ("a", 2)],
            ),
        ];
        for (name, slots, steps, expected) in cases {
            let (order, kept) = run(slots, &steps);
            assert_eq!(order, expected, "{name}");
            assert_eq!(kept, 0, "{name}: nothing kept once every ticket left");
        }
    }

    #[test]
    fn a_key_that_goes_on_joining_does_not_starve_another() {
        // "a" joins again each time its turn ends; "b" waits throughout.
        let mut queue = FairQueue::new(1);
        let mut running = queue.join("a");
        assert_eq!(queue.admit(), vec![running]);
        let b = queue.join("b");
        let again = queue.join("a");
        queue.leave(running);
        assert_eq!(queue.admit(), vec![b], "b before a's next");
        running = b;
        queue.leave(running);
        assert_eq!(queue.admit(), vec![again]);
    }

    #[test]
    fn leaving_twice_or_unknown_is_nothing() {
        let mut queue = FairQueue::new(1);
        let a = queue.join("a");
        assert_eq!(queue.admit(), vec![a]);
        queue.leave(a);
        queue.leave(a);
        queue.leave(Ticket(99));
        let b = queue.join("b");
        assert_eq!(queue.admit(), vec![b], "the slot was freed once, and is free");
        assert_eq!(queue.admit(), vec![]);
    }
}
