//! The envtest support itself: control planes are isolated from each other and leave no process
//! behind, whether dropped, unwound by a panic, or abandoned by a killed test process; the static
//! admin token is the only one accepted; a stopped apiserver comes back with its data.

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
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

async fn token_client(plane: &ControlPlane, token: &str) -> kube::Client {
    let kubeconfig = Kubeconfig::from_yaml(&plane.token_kubeconfig_yaml(token)).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn the_admin_token_is_accepted_and_a_made_up_one_is_not() {
    let plane = start().await;
    let admin = token_client(&plane, plane.admin_token()).await;
    Api::<Namespace>::all(admin.clone())
        .list(&ListParams::default())
        .await
        .expect("the admin token lists namespaces");
    let review = Api::<SelfSubjectReview>::all(admin)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .unwrap();
    let user = review.status.and_then(|s| s.user_info).unwrap_or_default();
    assert_eq!(user.username.as_deref(), Some("envtest-token-admin"));
    assert!(
        user.groups
            .unwrap_or_default()
            .iter()
            .any(|g| g == "system:masters"),
        "the token's user is a cluster admin"
    );

    let made_up = token_client(&plane, "0123456789abcdef0123456789abcdef").await;
    match Api::<Namespace>::all(made_up).list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 401, "{status:?}"),
        other => panic!("a made-up token should get 401 Unauthorized, got {other:?}"),
    }
}

#[tokio::test]
async fn a_stopped_apiserver_comes_back_on_the_same_url_with_its_data() {
    let mut plane = start().await;
    plane
        .create_namespace("written-before-the-outage", &[])
        .await
        .unwrap();
    let server = plane.server().to_owned();
    // One client across the outage, as a controller holds one: it must reach the apiserver again.
    let namespaces: Api<Namespace> = Api::all(plane.client().await.unwrap());
    let [etcd, apiserver] = plane.pids();

    plane.stop_apiserver().await;
    assert_eq!(
        wait_gone(&[apiserver]).await,
        Vec::<u32>::new(),
        "kube-apiserver still runs"
    );
    assert_eq!(plane.pids(), [etcd, 0]);
    assert!(alive(etcd), "etcd runs on through the outage");
    match namespaces.get("written-before-the-outage").await {
        Err(kube::Error::Api(status)) => panic!("a stopped apiserver answered: {status:?}"),
        Err(_) => {}
        Ok(_) => panic!("a stopped apiserver served a request"),
    }

    let took = plane.start_apiserver().await.unwrap_or_else(|e| panic!("{e}"));
    println!("kube-apiserver ready again in {took:.2?}");
    assert_eq!(plane.server(), server, "the restarted apiserver has the same URL");
    let [_, restarted] = plane.pids();
    assert!(restarted != 0 && restarted != apiserver && alive(restarted));
    namespaces
        .get("written-before-the-outage")
        .await
        .expect("data written before the outage survives it");
    Api::<Namespace>::all(token_client(&plane, plane.admin_token()).await)
        .get("written-before-the-outage")
        .await
        .expect("the admin token is still accepted after the restart");
}
