//! Three replicas with shards against one real apiserver, each reaching it through a
//! [`FaultProxy`] of its own and writing as a user of its own (the audit log tells them apart),
//! and the faults issue 55 was found with: a replica cut off (a blackhole: nothing moves, nothing
//! is lost) or frozen (SIGSTOP) in the middle of its burst of copy writes, the sources rotated
//! again meanwhile so that another replica writes newer values, then the link healed (SIGCONT)
//! after more than two Lease durations. Shared by tests/install/partitions.rs and
//! `benches/faults.rs`; what it measures is in [`crate::late_writes`].
#![allow(dead_code)]

use crate::late_writes::{Back, Late, ON_THE_WIRE, Versions, received};
use crate::processes::{Mimeo, apply};
use futures::future::join_all;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use mimeo_envtest::{ControlPlane, Fault, FaultProxy};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

pub const NAMES: [&str; 3] = ["replica-a", "replica-b", "replica-c"];
const SHARDS: u32 = 3;

/// How many rules and target namespaces, and the shard Leases' duration.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub rules: usize,
    pub targets: usize,
    pub lease: Duration,
}

pub struct Replica {
    pub name: &'static str,
    pub mimeo: Mimeo,
    pub link: FaultProxy,
    /// What its link does between faults: [`Fault::Pass`], or a delay the campaign runs with.
    pub usual: Fault,
}

/// What a round does to its victim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Its link blackholed, then healed.
    Partition,
    /// SIGSTOP, then SIGCONT.
    Freeze,
}

/// What one round saw.
#[derive(Debug)]
pub struct Round {
    pub victim: &'static str,
    pub cut: Cut,
    /// The victim's copy writes of the first rotation the apiserver had before the cut.
    pub before: usize,
    /// The victim's writes that reached the apiserver after the cut.
    pub late: Late,
    /// Copies seen going back during the round.
    pub back: Vec<Back>,
    /// How long each of the round's two rotations took to reach every copy.
    pub reach: Vec<Duration>,
}

pub struct Campaign {
    pub plane: ControlPlane,
    pub client: Client,
    pub replicas: Vec<Replica>,
    pub versions: Versions,
    pub shape: Shape,
    /// The version the sources hold now.
    pub version: u64,
    root: tempfile::TempDir,
}

impl Campaign {
    /// A control plane with an audit log, the namespaces, sources at `v0` and rules, and three
    /// replicas of `bin`, each behind its link, once each holds one shard and every copy is made.
    pub async fn start(bin: &Path, shape: Shape) -> Campaign {
        let plane = ControlPlane::start_with(mimeo_envtest::Options {
            users: NAMES.iter().map(|n| n.to_string()).collect(),
            audit_writes: true,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        plane
            .install_crds(&[PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crds/mimeo.yaml")])
            .await
            .unwrap();
        let client = plane.client().await.unwrap();
        let versions = Versions::watch(client.clone()).await;
        seed(&client, shape).await;
        let root = tempfile::tempdir().unwrap();
        let mut replicas: Vec<Replica> = NAMES
            .iter()
            .map(|&name| {
                let link = FaultProxy::start(plane.api_address()).unwrap();
                let dir = root.path().join(name);
                std::fs::create_dir_all(&dir).unwrap();
                let kubeconfig = dir.join("kubeconfig");
                let server = format!("https://{}", link.address());
                std::fs::write(
                    &kubeconfig,
                    plane.user_token_kubeconfig_yaml_via(name, &server).unwrap(),
                )
                .unwrap();
                let mimeo = Mimeo::start_with(
                    bin,
                    &kubeconfig,
                    &dir,
                    &[
                        format!("--shards={SHARDS}"),
                        "--leader-elect-namespace=default".into(),
                        format!("--leader-elect-lease-seconds={}", shape.lease.as_secs()),
                    ],
                    &[("POD_NAME", name)],
                );
                Replica {
                    name,
                    mimeo,
                    link,
                    usual: Fault::Pass,
                }
            })
            .collect();
        for replica in &mut replicas {
            replica.mimeo.wait_ready().await;
        }
        let campaign = Campaign {
            plane,
            client,
            replicas,
            versions,
            shape,
            version: 0,
            root,
        };
        campaign.one_shard_each(Duration::from_secs(60)).await;
        campaign.all_at(0, Duration::from_secs(180)).await;
        campaign
    }

    pub fn copies(&self) -> usize {
        self.shape.rules * self.shape.targets
    }

    /// Where a replica's log is, to look at after a failure.
    pub fn log_of(&self, name: &str) -> PathBuf {
        self.root.path().join(name).join("mimeo.log")
    }

    /// Sets what `replica`'s link does between faults, and now.
    pub fn set_usual(&mut self, replica: usize, fault: Fault) {
        self.replicas[replica].usual = fault;
        self.replicas[replica].link.set(fault);
    }

    /// Every source to the next version at once, so that each replica's rules write at once;
    /// returns the version and when it was sent.
    pub async fn rotate(&mut self) -> (u64, Instant) {
        self.version += 1;
        let value = format!("v{}", self.version);
        let sent = Instant::now();
        let secrets = Api::<Secret>::namespaced(self.client.clone(), "platform");
        join_all((0..self.shape.rules).map(|r| {
            let secret = json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("s{r:02}"), "namespace": "platform"},
                "stringData": {"v": value}});
            let secrets = &secrets;
            async move {
                secrets
                    .patch(
                        &format!("s{r:02}"),
                        &PatchParams::apply("test").force(),
                        &Patch::Apply(&secret),
                    )
                    .await
                    .unwrap()
            }
        }))
        .await;
        (self.version, sent)
    }

    /// A rotation with no fault: how long it took to reach every copy.
    pub async fn rotation(&mut self) -> Duration {
        let (version, sent) = self.rotate().await;
        self.all_at(version, Duration::from_secs(120)).await;
        self.reach(version, sent)
    }

    /// How long version `n`, sent at `sent`, took to reach every copy (itself or a later one).
    pub fn reach(&self, n: u64, sent: Instant) -> Duration {
        let reached = self.versions.reached(n);
        match reached.len() == self.copies() {
            true => reached
                .iter()
                .map(|at| at.duration_since(sent))
                .max()
                .unwrap_or_default(),
            false => Duration::MAX,
        }
    }

    /// Waits until every copy holds version `n`, as the watch sees them.
    pub async fn all_at(&self, n: u64, within: Duration) {
        let started = Instant::now();
        while self.versions.holding(n) != self.copies() {
            assert!(
                started.elapsed() < within,
                "{} of {} copies at v{n} after {within:?}",
                self.versions.holding(n),
                self.copies()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until each replica holds one shard.
    pub async fn one_shard_each(&self, within: Duration) {
        if let Err(held) = self.shards_shared(within).await {
            panic!("the shards were not one each after {within:?}: {held:?}");
        }
    }

    /// Waits until each replica holds one shard, at most `within`; else what each holds.
    async fn shards_shared(&self, within: Duration) -> Result<(), Vec<Vec<u32>>> {
        let started = Instant::now();
        loop {
            let mut held = Vec::new();
            for replica in &self.replicas {
                held.push(held_shards(&replica.mimeo).await);
            }
            let mut all: Vec<u32> = held.iter().flatten().copied().collect();
            all.sort();
            if all == (0..SHARDS).collect::<Vec<_>>() && held.iter().all(|h| h.len() == 1) {
                return Ok(());
            }
            if started.elapsed() > within {
                return Err(held);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// One round: a rotation; `victim` cut off or frozen `jitter` after the apiserver had its first
    /// copy write of it; a second rotation, which every copy reaches while the victim is away; the
    /// victim back past two Lease durations; what then arrived late, and what went back.
    ///
    /// A victim that holds no shard, or writes nothing of the rotation within 30 s, is not cut:
    /// the round ends there, saying why (a replica on a slow link gives its shards back).
    pub async fn round(&mut self, victim: usize, cut: Cut, jitter: Duration) -> Result<Round, String> {
        let name = self.replicas[victim].name;
        let holds = Instant::now();
        while held_shards(&self.replicas[victim].mimeo).await.is_empty() {
            if holds.elapsed() > Duration::from_secs(60) {
                return Err(format!("{name} held no shard"));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let log = self.plane.audit_log_path().unwrap().to_owned();
        let offset = std::fs::metadata(&log).map_or(0, |m| m.len());
        let back_before = self.versions.back().len();
        let started = SystemTime::now();
        let (first, first_sent) = self.rotate().await;
        let user = format!("\"username\":\"{name}\"");
        let waiting = Instant::now();
        while !String::from_utf8_lossy(&read_from(&log, offset)).contains(&user) {
            if waiting.elapsed() > Duration::from_secs(30) {
                self.all_at(first, Duration::from_secs(120)).await;
                return Err(format!(
                    "no write of v{first} by {name} within 30 s (holding {:?})",
                    held_shards(&self.replicas[victim].mimeo).await
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(jitter).await;
        let replica = &self.replicas[victim];
        match cut {
            Cut::Partition => replica.link.set(Fault::Blackhole),
            Cut::Freeze => replica.mimeo.signal("STOP"),
        }
        let cut_at = SystemTime::now();
        let away = Instant::now();

        // Newer values while it is away: the others take its shard once its Lease lapses.
        let newer_at = SystemTime::now();
        let (second, second_sent) = self.rotate().await;
        self.all_at(second, Duration::from_secs(120)).await;
        let lapsed = self.shape.lease * 2 + Duration::from_secs(1);
        tokio::time::sleep(lapsed.saturating_sub(away.elapsed())).await;
        let replica = &self.replicas[victim];
        match cut {
            Cut::Partition => replica.link.set(replica.usual),
            Cut::Freeze => replica.mimeo.signal("CONT"),
        }
        let back_at = SystemTime::now();
        // What was held lands now; a copy it rolled back is set right by its holder.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let events = events_from(&log, offset);
        let before = events
            .iter()
            .filter(|e| e["user"]["username"] == name)
            .filter(|e| (started..=cut_at).contains(&received(e)))
            .count();
        // A blackhole lets nothing through: what the apiserver takes up between the cut and the
        // heal was in its buffers already. A frozen process's connections still carry what it
        // had written, and a loaded apiserver took some of that up 0.3-2 s after the freeze:
        // before newer values, they were no harm.
        let late_from = match cut {
            Cut::Partition => back_at,
            Cut::Freeze => (cut_at + ON_THE_WIRE).max(newer_at),
        };
        let late = Late::of(&events, name, late_from, back_at);
        self.all_at(second, Duration::from_secs(60)).await;
        // The victim takes a share again (not on a link too slow to hold one: the next round
        // with it as victim says so).
        let _ = self.shards_shared(Duration::from_secs(60)).await;
        Ok(Round {
            victim: name,
            cut,
            before,
            late,
            back: self.versions.back().split_off(back_before),
            reach: vec![self.reach(first, first_sent), self.reach(second, second_sent)],
        })
    }
}

/// The namespaces, the sources at `v0`, and the rules, each from one source into every target.
async fn seed(client: &Client, shape: Shape) {
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "platform"}}),
    )
    .await;
    let targets: Vec<String> = (0..shape.targets).map(|t| format!("q{t:02}")).collect();
    for ns in &targets {
        apply(
            client,
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": ns, "annotations": {"mimeo.dev/accept-from": "platform"}}}),
        )
        .await;
    }
    for r in 0..shape.rules {
        apply(
            client,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": format!("s{r:02}"), "namespace": "platform"},
                   "stringData": {"v": "v0"}}),
        )
        .await;
        apply(
            client,
            json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
                   "metadata": {"name": format!("f{r:02}"), "namespace": "platform"},
                   "spec": {"source": {"kind": "Secret", "name": format!("s{r:02}")},
                            "targets": targets.iter().map(|t| json!({"namespace": t})).collect::<Vec<_>>()}}),
        )
        .await;
    }
}

/// The shards a replica's `/readyz` names (`ok: shards [0,2] of 3`).
async fn held_shards(replica: &Mimeo) -> Vec<u32> {
    let Some((200, text)) = replica.get("/readyz").await else {
        return Vec::new();
    };
    let Some(list) = text.split('[').nth(1).and_then(|rest| rest.split(']').next()) else {
        return Vec::new();
    };
    list.split(',').filter_map(|s| s.trim().parse().ok()).collect()
}

/// The audit log from byte `offset` on: a long campaign's log is too long to read whole each round.
fn read_from(log: &Path, offset: u64) -> Vec<u8> {
    use std::io::{Read as _, Seek as _};
    let mut text = Vec::new();
    if let Ok(mut file) = std::fs::File::open(log) {
        let _ = file.seek(std::io::SeekFrom::Start(offset));
        let _ = file.read_to_end(&mut text);
    }
    text
}

fn events_from(log: &Path, offset: u64) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&read_from(log, offset))
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}
