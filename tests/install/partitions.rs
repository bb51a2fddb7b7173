//! Replicas cut off from the apiserver (issue 55): three replicas with shards, each through a link
//! of its own that can be blackholed as a real partition is (nothing moves, nothing is lost), the
//! holder of a shard cut off in the middle of its burst of copy writes while the sources rotate
//! again, healed after more than two Lease durations. What it had sent lands then: a copy must
//! never go back to an older value, whatever the apiserver is handed late.

use crate::fault_rounds::{Campaign, Cut, NAMES, Shape};
use crate::late_writes::{Late, p50_max};
use mimeo_envtest::Fault;
use std::path::Path;
use std::time::Duration;

/// Enough rules and targets that a rotation gives each replica about 400 writes at once, far more
/// than its client sends at a time (64), as in the freeze test of shards.rs.
const SHAPE: Shape = Shape {
    rules: 30,
    targets: 40,
    lease: Duration::from_secs(6),
};
const PARTITIONS: usize = 4;
/// Each link's delay, each way.
const LATENCY: Duration = Duration::from_millis(25);

#[tokio::test]
async fn a_replica_cut_off_mid_burst_sets_no_copy_back_to_an_older_value_when_its_link_heals() {
    let mut campaign = Campaign::start(Path::new(env!("CARGO_BIN_EXE_mimeo")), SHAPE).await;
    // Some time on the wire, as a network has: cut off, a replica then has requests on their way,
    // and not only answers (with none, its 64 requests in flight had mostly reached the apiserver,
    // and half the partitions held none of them).
    for replica in 0..NAMES.len() {
        campaign.set_usual(replica, Fault::Delay(LATENCY));
    }
    let mut late = Late::default();
    let mut reach = Vec::new();
    for round in 0..PARTITIONS {
        let victim = round % NAMES.len();
        let seen = campaign
            .round(victim, Cut::Partition, Duration::from_millis(5 * round as u64))
            .await
            .unwrap_or_else(|skipped| panic!("partition {round}: {skipped}"));
        println!(
            "partition {round}: {} cut off after {} copy writes of the rotation; after the heal {} \
             of its writes accepted, {} refused, {} otherwise answered; {} copies seen going back; \
             rotations reached every copy in {:?}",
            seen.victim,
            seen.before,
            seen.late.accepted.len(),
            seen.late.refused.len(),
            seen.late.other.len(),
            seen.back.len(),
            seen.reach,
        );
        late.add(seen.late);
        reach.extend(seen.reach);
    }
    let back = campaign.versions.back();
    let (p50, max) = p50_max(&reach);
    println!(
        "{PARTITIONS} partitions of {} copies: {} versions seen, {} copies seen going back; late \
         writes {} accepted, {} refused, {} otherwise answered; rotations reached every copy in \
         {p50:?} (p50), {max:?} (max)\nlate: {late:#?}\ngoing back: {back:#?}",
        campaign.copies(),
        campaign.versions.versions_seen(),
        back.len(),
        late.accepted.len(),
        late.refused.len(),
        late.other.len(),
    );
    assert!(
        back.is_empty(),
        "{} copies went back to an older value after a partition healed: {:#?}",
        back.len(),
        back.iter().take(10).collect::<Vec<_>>()
    );
    for replica in &mut campaign.replicas {
        replica.mimeo.stop();
    }
}
