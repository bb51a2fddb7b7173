//! Two `mimeo run --leader-elect --shards=1` processes (one Lease) against one real apiserver:
//! exactly one writes; when it is killed (SIGKILL) the other takes over within the lease duration
//! plus 3 s (it looks every second and wakes when the Lease expires; the rest is starting up and
//! writing); a leader whose Lease is taken from it stops at once.

use crate::harness;

use harness::{Harness, eventually, secret_value};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LEASE_SECONDS: u64 = 6;

struct Replica {
    child: Child,
    log: std::path::PathBuf,
}

impl Replica {
    fn start(kubeconfig: &Path, dir: &Path, name: &str) -> Replica {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_mimeo"))
            .args([
                "run",
                "--http-addr=127.0.0.1:0",
                "--log-format=json",
                "--leader-elect",
                "--shards=1",
                "--leader-elect-namespace=default",
                &format!("--leader-elect-lease-seconds={LEASE_SECONDS}"),
                &format!("--plugin-cache-dir={}", dir.join(name).join("plugins").display()),
                &format!(
                    "--artifact-cache-dir={}",
                    dir.join(name).join("artifacts").display()
                ),
            ])
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAME", name)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        Replica { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wrote(&self) -> bool {
        self.log().contains("wrote a copy")
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn holder(h: &Harness) -> Option<String> {
    Api::<Lease>::namespaced(h.client.clone(), "default")
        .get_opt("mimeo")
        .await
        .ok()??
        .spec?
        .holder_identity
}

async fn copy_value(h: &Harness) -> Option<String> {
    let copy = h.secrets("tenant").get_opt("creds").await.ok()??;
    secret_value(&copy, "token")
}

#[tokio::test]
async fn one_replica_writes_and_a_standby_takes_over() {
    let h = Harness::without_controller().await;
    h.namespace("platform", &[], &[]).await;
    h.namespace("tenant", &[], &[("mimeo.dev/accept-from", "platform")])
        .await;
    h.put_secret("platform", "creds", &[("token", "t1")]).await;
    h.apply(json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "SyncRule",
        "metadata": {"name": "creds", "namespace": "platform"},
        "spec": {"source": {"kind": "Secret", "name": "creds"}, "targets": [{"namespace": "tenant"}]}}))
        .await;

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = h.plane.kubeconfig_path().to_owned();
    let mut a = Replica::start(&kubeconfig, dir.path(), "replica-a");
    let mut b = Replica::start(&kubeconfig, dir.path(), "replica-b");
    let started = Instant::now();
    while copy_value(&h).await.as_deref() != Some("t1") {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no first copy; replica-a:\n{}\nreplica-b:\n{}",
            a.log(),
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first = holder(&h).await.expect("a leader holds the Lease");
    h.put_secret("platform", "creds", &[("token", "t2")]).await;
    eventually("the copy follows the leader", || async {
        (copy_value(&h).await.as_deref() == Some("t2")).then_some(())
    })
    .await;
    let (leader, standby) = if first == "replica-a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    assert!(leader.wrote(), "the leader wrote:\n{}", leader.log());
    assert!(
        !standby.wrote() && standby.log().contains("standing by"),
        "the standby wrote nothing:\n{}",
        standby.log()
    );

    // The leader dies without a word; the standby takes over once the Lease expires.
    leader.child.kill().unwrap();
    leader.child.wait().unwrap();
    let killed = Instant::now();
    h.put_secret("platform", "creds", &[("token", "t3")]).await;
    eventually("the standby writes after the leader died", || async {
        (copy_value(&h).await.as_deref() == Some("t3")).then_some(())
    })
    .await;
    let failover = killed.elapsed();
    let second = holder(&h).await.unwrap();
    assert_ne!(second, first);
    eprintln!(
        "failover: leader killed, standby's copy written {failover:.2?} later (lease {LEASE_SECONDS} s)"
    );
    assert!(
        failover < Duration::from_secs(LEASE_SECONDS + 3),
        "failover took {failover:?}"
    );

    // Someone else takes the Lease: the new leader stops at once and writes nothing more.
    let leases: Api<Lease> = Api::namespaced(h.client.clone(), "default");
    let mut lease = leases.get("mimeo").await.unwrap();
    let spec = lease.spec.as_mut().unwrap();
    spec.holder_identity = Some("intruder".into());
    spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    spec.lease_duration_seconds = Some(3600);
    leases
        .replace("mimeo", &PostParams::default(), &lease)
        .await
        .unwrap();
    let taken = Instant::now();
    let exited = loop {
        if let Some(status) = standby.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            taken.elapsed() < Duration::from_secs(LEASE_SECONDS),
            "the leader kept going without its Lease:\n{}",
            standby.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!(
        "a leader without its Lease exited {:.2?} after losing it ({exited})",
        taken.elapsed()
    );
    assert!(standby.log().contains("lost leadership"));
}
