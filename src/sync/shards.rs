//! Which shard a rule belongs to, and how many shards a replica should hold: the pure half of
//! sharding (`crate::replicas::shards` holds the Leases).
//!
//! Every rule belongs to one shard, by a digest of its key, so that every replica agrees without
//! talking to the others. Each shard is a Lease; a replica holds its fair share of them (the
//! shards spread over the live replicas, rounded up) and takes free or expired ones up to it.

use super::ownership::RuleKey;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;

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
}
