//! Which shard a rule belongs to, and how many shards a replica should hold: the pure half of
//! sharding (`crate::replicas::shards` holds the Leases).
//!
//! Every rule belongs to one shard, by a digest of its key, so that every replica agrees without
//! talking to the others. Each shard is a Lease; a replica holds its fair share of them (the
//! shards spread over the live replicas, rounded up) and takes free or expired ones up to it.

use super::ownership::RuleKey;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The shard of a rule among `shards`: the first eight bytes of the SHA-256 of its key, modulo.
pub fn shard_of(rule: &RuleKey, shards: u32) -> u32 {
    shard_of_name(&rule.to_string(), shards)
}

/// The shard of anything named (a `RemoteCluster`, whose status one replica writes).
pub fn shard_of_name(name: &str, shards: u32) -> u32 {
    let digest = Sha256::digest(name.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % u64::from(shards.max(1))) as u32
}

/// How many shards each of `replicas` live replicas holds at most: all of them spread evenly,
/// rounded up (so that every shard has room with a holder).
pub fn fair_share(shards: u32, replicas: usize) -> usize {
    let replicas = replicas.max(1);
    (shards as usize).div_ceil(replicas)
}

/// What a replica does with the shards this round.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Moves {
    /// Shards to give up (it holds more than its share): the highest first, so that a replica
    /// that joins finds the same ones free whoever gives them.
    pub release: Vec<u32>,
    /// Free shards to try to take, lowest first, up to its share.
    pub take: Vec<u32>,
}

/// Decides the round: `held`, the shards this replica holds; `free`, those no one holds (or whose
/// holder let them expire); `replicas`, the live replicas, this one included.
pub fn moves(shards: u32, held: &BTreeSet<u32>, free: &BTreeSet<u32>, replicas: usize) -> Moves {
    let share = fair_share(shards, replicas);
    if held.len() > share {
        return Moves {
            release: held.iter().rev().take(held.len() - share).copied().collect(),
            take: Vec::new(),
        };
    }
    Moves {
        release: Vec::new(),
        take: free
            .iter()
            .filter(|s| !held.contains(s))
            .take(share - held.len())
            .copied()
            .collect(),
    }
}

/// Whether this replica's link to the apiserver is quick enough for it to hold shards.
///
/// A replica whose renewal lands after the hold it renews ran out cannot write (its fence
/// refuses), yet its Lease keeps moving, so no other replica may take the shard over: on a slow
/// link (363 ms a chunk, issue 55) a shard went 18-22 s without a writer. Such a replica, when
/// the renewal itself took long on the wire (a late round with a quick renewal is a process
/// frozen or starved of CPU for a moment, which giving the shards away would only make worse), is
/// *slow*: it gives its shards back, stops counting itself among the live replicas, and takes
/// none until its rounds have been quick for a while, so that a replica that can write takes them
/// at once. It stays slow only while another replica is live: a lone replica, or one whose peers
/// are all slow as well, holds its shards late rather than leave them with no writer at all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pace {
    slow: Option<Slow>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slow {
    /// When its rounds became quick, if they are now.
    quick_since: Option<Instant>,
}

impl Pace {
    pub fn is_slow(&self) -> bool {
        self.slow.is_some()
    }

    /// A renewal landed after the hold it renewed had run out, while `others` other replicas are
    /// live. Says whether the replica became slow: it gives its shards back now.
    pub fn renewed_late(&mut self, others: usize) -> bool {
        if self.slow.is_some() || others == 0 {
            return false;
        }
        self.slow = Some(Slow { quick_since: None });
        true
    }

    /// A slow replica's request to the apiserver took `took`, and it saw `others` other live
    /// replicas: quick when within `quick`. Says whether the replica is no longer slow: its rounds have been quick for
    /// `settle`, or no other replica is live to write instead of it.
    pub fn round_took(
        &mut self,
        took: Duration,
        others: usize,
        now: Instant,
        quick: Duration,
        settle: Duration,
    ) -> bool {
        let Some(slow) = self.slow.as_mut() else {
            return false;
        };
        slow.quick_since = match took <= quick {
            true => Some(slow.quick_since.unwrap_or(now)),
            false => None,
        };
        let settled = slow
            .quick_since
            .is_some_and(|since| now.duration_since(since) >= settle);
        if settled || others == 0 {
            self.slow = None;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_spread_over_the_shards_and_stay_put() {
        let mut counts = [0usize; 3];
        for i in 0..3000 {
            let key = RuleKey::sync_rule(&format!("team-{}", i % 40), &format!("rule-{i}"));
            let shard = shard_of(&key, 3);
            assert_eq!(shard, shard_of(&key, 3), "the same rule, the same shard");
            counts[shard as usize] += 1;
        }
        for count in counts {
            assert!((800..1200).contains(&count), "{counts:?}");
        }
        assert_eq!(shard_of(&RuleKey::cluster_sync_rule("x"), 1), 0);
        assert_eq!(
            shard_of(&RuleKey::cluster_sync_rule("x"), 0),
            0,
            "no shards count as one"
        );
    }

    #[test]
    fn a_replica_takes_its_share_and_gives_back_what_is_beyond_it() {
        let set = |s: &[u32]| s.iter().copied().collect::<BTreeSet<u32>>();
        // Alone: all three.
        assert_eq!(
            moves(3, &set(&[]), &set(&[0, 1, 2]), 1),
            Moves {
                release: vec![],
                take: vec![0, 1, 2]
            }
        );
        // A second replica joins: the share is 2, the first gives one back.
        assert_eq!(
            moves(3, &set(&[0, 1, 2]), &set(&[]), 2),
            Moves {
                release: vec![2],
                take: vec![]
            }
        );
        // and the second takes what is free, up to its share.
        assert_eq!(
            moves(3, &set(&[]), &set(&[2]), 2),
            Moves {
                release: vec![],
                take: vec![2]
            }
        );
        // Three replicas: one each; one left: it takes the dead one's shards as they expire.
        assert_eq!(moves(3, &set(&[0, 1]), &set(&[]), 3).release, vec![1]);
        assert_eq!(moves(3, &set(&[1]), &set(&[0, 2]), 1).take, vec![0, 2]);
        assert_eq!(fair_share(3, 2), 2);
        assert_eq!(fair_share(3, 4), 1);
        assert_eq!(fair_share(3, 0), 3);
    }

    #[test]
    fn a_replica_that_renews_late_stands_by_until_its_rounds_are_quick_for_a_while() {
        let (quick, settle) = (Duration::from_secs(1), Duration::from_secs(12));
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut pace = Pace::default();
        assert!(!pace.is_slow());
        assert!(
            !pace.renewed_late(0),
            "a lone replica holds its shards late rather than not at all"
        );
        assert!(pace.renewed_late(2));
        assert!(pace.is_slow());
        assert!(!pace.renewed_late(2), "once: its shards are given back once");
        let slow_round = Duration::from_millis(1500);
        let quick_round = Duration::from_millis(20);
        assert!(!pace.round_took(slow_round, 2, at(2), quick, settle));
        assert!(!pace.round_took(quick_round, 2, at(4), quick, settle));
        assert!(
            !pace.round_took(slow_round, 2, at(6), quick, settle),
            "a slow round starts over"
        );
        assert!(!pace.round_took(quick_round, 2, at(8), quick, settle));
        assert!(!pace.round_took(quick_round, 2, at(19), quick, settle));
        assert!(
            pace.round_took(quick_round, 2, at(20), quick, settle),
            "quick for 12 s"
        );
        assert!(!pace.is_slow());
        // Slow again, and then the others go: it takes the shards, slow or not.
        assert!(pace.renewed_late(1));
        assert!(pace.round_took(slow_round, 0, at(30), quick, settle));
        assert!(!pace.is_slow());
    }
}
