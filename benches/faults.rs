//! Seeded fault campaign against real replicas (issue 55): three `mimeo run --shards=3` processes,
//! each reaching one real apiserver through a fault proxy of its own and writing as a user of its
//! own, put through N partitions (a replica's link blackholed in the middle of its burst of copy
//! writes, nothing lost, healed past two Lease durations) and M freezes (SIGSTOP right after a
//! rotation, SIGCONT past two Lease durations), in a seeded order, with seeded victims and timing.
//! In each, the sources rotate again while the victim is away, so that another replica writes
//! newer values than those the victim still has on its way (`benches/support/fault_rounds.rs`).
//!
//! Printed: copies seen going back to an older value (a watch of every version of every copy),
//! the victims' writes that reached the apiserver late, accepted or refused (its audit log), and
//! how long each rotation took to reach every copy (p50, max), for R rotations with no fault first
//! and then for the rotations of the fault rounds. Every link delays each chunk by `--latency-ms`
//! each way, as a network does: cut off, a replica then has requests on their way and not only
//! answers (with none, most of its requests in flight had reached the apiserver at the cut, and
//! half the partitions held none). `--delay-ms D` delays one replica's link (chosen by the seed)
//! by D instead, for the whole campaign.
//!
//! `cargo bench --bench faults -- [--partitions N] [--freezes M] [--seed S] [--lease-seconds L]
//! [--latency-ms A] [--delay-ms D] [--rotations R] [--rules K] [--targets T]` (defaults 100, 30,
//! 1, 6, 25, none, 5, 30, 40: a rotation gives each replica about 400 writes, far more than the 64
//! its client has in flight). A round takes about 20 s. `MIMEO_BENCH_BIN` runs another build of
//! mimeo; the audit log of a full campaign is some hundreds of MB in the temporary directory.

#[path = "support/fault_rounds.rs"]
mod fault_rounds;
#[path = "support/late_writes.rs"]
mod late_writes;
#[path = "support/processes.rs"]
mod processes;

use fault_rounds::{Campaign, Cut, NAMES, Round, Shape};
use late_writes::p50_max;
use mimeo_envtest::Fault;
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

fn arg(name: &str, default: u64) -> u64 {
    std::env::args()
        .skip_while(|a| a != name)
        .nth(1)
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name} takes a number")))
        .unwrap_or(default)
}

/// SplitMix64: a few lines, and the same campaign for the same seed on every machine.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[tokio::main]
async fn main() {
    let partitions = arg("--partitions", 100) as usize;
    let freezes = arg("--freezes", 30) as usize;
    let seed = arg("--seed", 1);
    let delay = std::env::args()
        .any(|a| a == "--delay-ms")
        .then(|| Duration::from_millis(arg("--delay-ms", 0)));
    let shape = Shape {
        rules: arg("--rules", 30) as usize,
        targets: arg("--targets", 40) as usize,
        lease: Duration::from_secs(arg("--lease-seconds", 6)),
    };
    let latency = Duration::from_millis(arg("--latency-ms", 25));
    let mut random = Seeded(seed);
    let bin = std::env::var("MIMEO_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mimeo").into());
    let mut campaign = Campaign::start(Path::new(&bin), shape).await;
    println!(
        "faults: seed {seed}, {partitions} partitions and {freezes} freezes of {} copies, Leases of \
         {:?}, {:?} each way on every link, mimeo {bin}",
        campaign.copies(),
        shape.lease,
        latency,
    );
    for replica in 0..NAMES.len() {
        campaign.set_usual(replica, Fault::Delay(latency));
    }
    if let Some(delay) = delay {
        let slow = random.below(NAMES.len() as u64) as usize;
        campaign.set_usual(slow, Fault::Delay(delay));
        println!("{} has each chunk delayed {delay:?} each way", NAMES[slow]);
    }

    let mut quiet = Vec::new();
    for _ in 0..arg("--rotations", 5) {
        quiet.push(campaign.rotation().await);
    }

    // Partitions and freezes in a seeded order (Fisher-Yates).
    let mut cuts: Vec<Cut> = std::iter::repeat_n(Cut::Partition, partitions)
        .chain(std::iter::repeat_n(Cut::Freeze, freezes))
        .collect();
    for i in (1..cuts.len()).rev() {
        cuts.swap(i, random.below(i as u64 + 1) as usize);
    }
    let mut rounds = Vec::new();
    let mut skipped_rounds = 0;
    for (n, cut) in cuts.iter().enumerate() {
        let victim = random.below(NAMES.len() as u64) as usize;
        // A partition anywhere in the victim's burst; a freeze right after the rotation.
        let jitter = Duration::from_millis(match cut {
            Cut::Partition => random.below(400),
            Cut::Freeze => random.below(30),
        });
        let round = match campaign.round(victim, *cut, jitter).await {
            Ok(round) => round,
            Err(skipped) => {
                println!("{n:>4} {:<9} skipped: {skipped}", format!("{cut:?}"));
                skipped_rounds += 1;
                continue;
            }
        };
        println!(
            "{n:>4} {:<9} {} +{jitter:>5?}: {:>3} writes before; late {:>2} accepted, {:>2} \
             refused, {} other; {} copies back; reach {:?}",
            format!("{cut:?}"),
            round.victim,
            round.before,
            round.late.accepted.len(),
            round.late.refused.len(),
            round.late.other.len(),
            round.back.len(),
            round.reach,
        );
        // Each accepted late write, with when the apiserver took it up against the victim's
        // return: what tells a write held up before the freeze from a write of a shard held again.
        for said in &round.late.accepted {
            println!("       accepted: {said}");
        }
        let _ = std::io::stdout().flush();
        rounds.push(round);
    }
    summary(&campaign, &quiet, &rounds);
    println!("rounds skipped (the victim held no shard or wrote nothing): {skipped_rounds}");
    for replica in &mut campaign.replicas {
        replica.mimeo.stop();
    }
}

fn summary(campaign: &Campaign, quiet: &[Duration], rounds: &[Round]) {
    println!(
        "\nfaults: {} versions of copies seen",
        campaign.versions.versions_seen()
    );
    for cut in [Cut::Partition, Cut::Freeze] {
        let of: Vec<&Round> = rounds.iter().filter(|r| r.cut == cut).collect();
        if of.is_empty() {
            continue;
        }
        let sum = |f: fn(&Round) -> usize| of.iter().copied().map(f).sum::<usize>();
        println!(
            "{cut:?}: {} rounds; copies seen going back {} (in {} rounds); late writes {} accepted, \
             {} refused, {} otherwise answered (in {} rounds)",
            of.len(),
            sum(|r| r.back.len()),
            of.iter().filter(|r| !r.back.is_empty()).count(),
            sum(|r| r.late.accepted.len()),
            sum(|r| r.late.refused.len()),
            sum(|r| r.late.other.len()),
            of.iter().filter(|r| r.late.len() > 0).count(),
        );
    }
    let (p50, max) = p50_max(quiet);
    println!(
        "rotations reaching every copy, no fault: p50 {p50:?}, max {max:?} ({} rotations)",
        quiet.len()
    );
    let faulted: Vec<Duration> = rounds.iter().flat_map(|r| r.reach.iter().copied()).collect();
    let (p50, max) = p50_max(&faulted);
    println!(
        "rotations reaching every copy, in fault rounds: p50 {p50:?}, max {max:?} ({} rotations)",
        faulted.len()
    );
    let back: Vec<_> = rounds.iter().flat_map(|r| r.back.iter()).take(20).collect();
    if !back.is_empty() {
        println!("the first copies seen going back: {back:#?}");
    }
    let other: Vec<_> = rounds.iter().flat_map(|r| r.late.other.iter()).take(20).collect();
    if !other.is_empty() {
        println!("late writes otherwise answered: {other:#?}");
    }
}
