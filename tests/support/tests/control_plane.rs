//! The envtest support itself: control planes are isolated from each other and leave no process
//! behind, whether dropped, unwound by a panic, or abandoned by a killed test process.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use mimeo_envtest::ControlPlane;
use std::io::BufRead;
use std::time::{Duration, Instant};

async fn start() -> ControlPlane {
    let plane = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    println!("control plane ready in {:.2?}", plane.startup_time());
    plane
}

/// Whether a process with this pid is alive and is not a zombie.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses: "pid (comm) S ...".
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

async fn wait_gone(pids: &[u32]) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn two_control_planes_are_independent() {
    let (a, b) = tokio::join!(start(), start());
    assert_ne!(a.server(), b.server());
    let in_a: Api<ConfigMap> = Api::namespaced(a.client().await.unwrap(), "default");
    let in_b: Api<ConfigMap> = Api::namespaced(b.client().await.unwrap(), "default");

    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("only-in-a".into());
    in_a.create(&PostParams::default(), &cm).await.unwrap();

    assert!(in_a.get_opt("only-in-a").await.unwrap().is_some());
    assert!(
        in_b.get_opt("only-in-a").await.unwrap().is_none(),
        "an object created in one plane leaked into the other"
    );
}

#[tokio::test]
async fn dropping_the_handle_stops_both_processes() {
    let plane = start().await;
    let pids = plane.pids();
    let data_dir = plane.kubeconfig_path().parent().unwrap().to_owned();
    assert!(
        pids.iter().all(|&p| alive(p)),
        "processes should run while the handle lives"
    );
    drop(plane);
    assert_eq!(wait_gone(&pids).await, Vec::<u32>::new(), "processes left behind");
    assert!(
        !data_dir.exists(),
        "data directory {} left behind",
        data_dir.display()
    );
}

#[tokio::test]
async fn a_panicking_test_stops_its_control_plane() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let plane = start().await;
        tx.send(plane.pids()).unwrap();
        panic!("a test failing while its control plane runs");
    });
    assert!(task.await.unwrap_err().is_panic());
    let pids = rx.await.unwrap();
    assert_eq!(
        wait_gone(&pids).await,
        Vec::<u32>::new(),
        "processes left behind after a panic"
    );
}

/// Runs this test binary again to start a control plane and abort without unwinding (as a
/// `kill -9` of `cargo test` would): the kernel must take the control plane down with it.
#[tokio::test]
async fn a_killed_test_process_takes_its_control_plane_along() {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "abandoning_helper", "--ignored", "--nocapture"])
        .env("MIMEO_ENVTEST_ABANDON", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let pids: Vec<u32> = stdout
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("PIDS ").map(str::to_owned))
        .expect("the helper reports its control plane's pids")
        .split(',')
        .map(|p| p.parse().unwrap())
        .collect();
    let status = child.wait().unwrap();
    assert!(!status.success(), "the helper aborts");
    assert_eq!(
        wait_gone(&pids).await,
        Vec::<u32>::new(),
        "processes outlived their test process"
    );
}

#[tokio::test]
#[ignore = "helper process for a_killed_test_process_takes_its_control_plane_along"]
async fn abandoning_helper() {
    if std::env::var_os("MIMEO_ENVTEST_ABANDON").is_none() {
        return;
    }
    let plane = start().await;
    let [etcd, apiserver] = plane.pids();
    println!("PIDS {etcd},{apiserver}");
    std::process::abort();
}
