//! A link to another cluster that falls silent (bytes accepted, nothing answered) against two real
//! control planes, B reached through a [`FaultProxy`] that blackholes it: the `RemoteCluster`
//! turns `Ready=False` within the documented bound each time, whether rules use the cluster or
//! not, and `Ready=True` again after the heal; at idle its status is not written at all
//! (docs/remote-clusters.md, "What `Ready` means").

use crate::harness;

use harness::{Harness, apiserver_writes, eventually};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, PostParams};
use mimeo::api::RemoteCluster;
use mimeo_envtest::{ControlPlane, Fault, FaultProxy};
use serde_json::json;
use std::time::{Duration, Instant};

/// The bound docs/remote-clusters.md gives: a silent link is `Ready=False` within it.
const NOT_READY_WITHIN: Duration = Duration::from_secs(10);
/// How soon after the heal the test expects `Ready=True` again (documented: about 5 s).
const READY_AGAIN_WITHIN: Duration = Duration::from_secs(10);
const BLACKHOLES: usize = 5;

/// The Ready condition's status and reason, if the status has one.
async fn ready_of(api: &Api<RemoteCluster>, name: &str) -> Option<(String, String)> {
    let rc = api.get_opt(name).await.unwrap()?;
    let ready = rc.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
    Some((ready.status, ready.reason))
}

/// Polls the clusters' Ready until each has been `want`; returns how long each took from `since`.
async fn times_to(
    api: &Api<RemoteCluster>,
    names: &[&str],
    want: &str,
    since: Instant,
    limit: Duration,
) -> Vec<Duration> {
    let mut seen: Vec<Option<Duration>> = vec![None; names.len()];
    while seen.iter().any(Option::is_none) {
        for (name, at) in names.iter().zip(seen.iter_mut()) {
            if at.is_none()
                && ready_of(api, name)
                    .await
                    .is_some_and(|(status, _)| status == want)
            {
                *at = Some(since.elapsed());
            }
        }
        if since.elapsed() > limit + Duration::from_secs(20) {
            panic!("after {:?}: Ready={want} of {names:?}: {seen:?}", since.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    seen.into_iter().flatten().collect()
}

#[tokio::test]
async fn a_silent_link_is_not_ready_within_the_bound_every_time_and_ready_after_the_heal() {
    let h = Harness::start().await;
    let b = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let b_client = b.client().await.unwrap();
    h.namespace("mimeo-system", &[], &[]).await;
    h.namespace("platform", &[], &[]).await;
    let apps: Namespace = serde_json::from_value(json!({"metadata": {"name": "apps"}})).unwrap();
    Api::<Namespace>::all(b_client.clone())
        .create(&PostParams::default(), &apps)
        .await
        .unwrap();
    // Two registrations of B, each through a proxy of its own: `quiet`, which no rule uses (the
    // status writer has no traffic there of its own, as in issue 55), and `busy`, which a rule
    // copies into (its watches hang on the silent link, and give no error).
    let names = ["quiet", "busy"];
    let mut proxies = Vec::new();
    for name in names {
        let proxy = FaultProxy::start(b.api_address()).unwrap();
        let kubeconfig = b
            .token_kubeconfig_yaml(b.admin_token())
            .replace(b.server(), &format!("https://{}", proxy.address()));
        h.register_cluster(name, &kubeconfig, json!({})).await;
        proxies.push(proxy);
    }
    h.put_secret("platform", "pull", &[("value", "v0")]).await;
    h.apply(
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule",
                   "metadata": {"name": "pull"},
                   "spec": {"source": {"kind": "Secret", "name": "pull", "namespace": "platform"},
                            "targets": [{"cluster": "busy", "namespace": "apps"}]}}),
    )
    .await;
    eventually("the copy in B", || async {
        Api::<Secret>::namespaced(b_client.clone(), "apps")
            .get_opt("pull")
            .await
            .unwrap()
    })
    .await;
    let api: Api<RemoteCluster> = Api::all(h.client.clone());
    times_to(&api, &names, "True", Instant::now(), harness::WAIT).await;

    let mut not_ready = Vec::new();
    let mut ready_again = Vec::new();
    let writes_before = apiserver_writes(&h.client, &["remoteclusters"]).await;
    for round in 1..=BLACKHOLES {
        // Let the last probe before the blackhole land anywhere in the probe interval.
        tokio::time::sleep(Duration::from_millis(1_300 * round as u64)).await;
        let cut = Instant::now();
        for proxy in &proxies {
            proxy.set(Fault::Blackhole);
        }
        let took = times_to(&api, &names, "False", cut, NOT_READY_WITHIN).await;
        for (name, took) in names.iter().zip(&took) {
            let reason = ready_of(&api, name).await.map(|(_, reason)| reason);
            eprintln!("blackhole {round}: {name} Ready=False {took:.2?} after the cut ({reason:?})");
        }
        // Held on a while, as an outage is: the watches and the prober wait meanwhile; the last
        // time for longer than the blackhole of issue 55 (31 s).
        let hold = if round == BLACKHOLES { 33 } else { 3 };
        tokio::time::sleep(Duration::from_secs(hold)).await;
        let healed = Instant::now();
        for proxy in &proxies {
            proxy.set(Fault::Pass);
        }
        let back = times_to(&api, &names, "True", healed, READY_AGAIN_WITHIN).await;
        for (name, back) in names.iter().zip(&back) {
            eprintln!("blackhole {round}: {name} Ready=True {back:.2?} after the heal");
        }
        not_ready.extend(names.iter().zip(took).map(|(n, t)| (round, *n, t)));
        ready_again.extend(names.iter().zip(back).map(|(n, t)| (round, *n, t)));
    }
    // Each goes down and comes back once a round: a write each way, not one per probe.
    let writes = apiserver_writes(&h.client, &["remoteclusters"]).await - writes_before;
    eprintln!(
        "RemoteCluster writes over {BLACKHOLES} blackholes of {} clusters: {writes}",
        names.len()
    );
    assert!(
        writes <= (2 * BLACKHOLES * names.len()) as u64,
        "{writes} RemoteCluster writes over {BLACKHOLES} blackholes"
    );
    let worst = |times: &[(usize, &str, Duration)]| times.iter().map(|t| t.2).max().unwrap();
    eprintln!(
        "{BLACKHOLES} blackholes: Ready=False after {:.2?} at worst (bound {NOT_READY_WITHIN:?}), \
         Ready=True after {:.2?} at worst",
        worst(&not_ready),
        worst(&ready_again)
    );
    let late: Vec<_> = not_ready.iter().filter(|t| t.2 >= NOT_READY_WITHIN).collect();
    assert!(
        late.is_empty(),
        "Ready=False later than {NOT_READY_WITHIN:?}: {late:?}"
    );
    let slow: Vec<_> = ready_again.iter().filter(|t| t.2 >= READY_AGAIN_WITHIN).collect();
    assert!(
        slow.is_empty(),
        "Ready=True later than {READY_AGAIN_WITHIN:?}: {slow:?}"
    );

    // At idle, each probe answered, nothing is written: the status says what it said.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = apiserver_writes(&h.client, &["remoteclusters"]).await;
    let versions: Vec<Option<String>> = futures::future::join_all(
        names
            .iter()
            .map(|n| async { api.get(n).await.unwrap().metadata.resource_version }),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let writes = apiserver_writes(&h.client, &["remoteclusters"]).await - before;
    eprintln!("RemoteCluster writes over 20 s at idle (4 probes each): {writes}");
    assert_eq!(writes, 0, "the status is written at idle");
    for (name, version) in names.iter().zip(versions) {
        assert_eq!(
            api.get(name).await.unwrap().metadata.resource_version,
            version,
            "{name}"
        );
    }
}

/// Two replicas splitting the rules into two shards: this test's controller (`a`), and another
/// that only holds its shard's Lease (`other`), as whose holder the test writes what it sees. The
/// `RemoteCluster`'s status is written by `a`, which reaches the cluster; it still says
/// `Ready=False` while the holder of the other shard reports that it does not, and `True` once
/// that report is withdrawn. And `a` reports for its own shard, whose rule uses the cluster,
/// while the link is blackholed, and withdraws it after the heal.
#[tokio::test]
async fn what_a_replica_holding_another_shard_sees_counts() {
    use mimeo::controller::ControllerConfig;
    use mimeo::replicas::shards::{ShardSettings, Shards, keep};
    use mimeo::sync::ownership::RuleKey;
    use mimeo::sync::shards::{shard_of, shard_of_name};

    const COUNT: u32 = 2;
    let shards = Shards::new(COUNT);
    let h = Harness::start_with(ControllerConfig {
        shards: shards.clone(),
        ..Default::default()
    })
    .await;
    h.namespace("mimeo-system", &[], &[]).await;
    h.namespace("platform", &[], &[]).await;
    let settings = |identity: &str| ShardSettings {
        count: COUNT,
        namespace: "mimeo-system".into(),
        prefix: "mimeo".into(),
        identity: identity.into(),
        duration: Duration::from_secs(6),
    };
    let other = Shards::new(COUNT);
    let keepers = [
        tokio::spawn(keep(
            h.client.clone(),
            settings("a"),
            shards.clone(),
            std::future::pending(),
        )),
        tokio::spawn(keep(
            h.client.clone(),
            settings("other"),
            other.clone(),
            std::future::pending(),
        )),
    ];
    let (mine, theirs) = eventually("one shard each", || async {
        let (mine, theirs) = (shards.held_now(), other.held_now());
        (mine.len() == 1 && theirs.len() == 1).then(|| (*mine.first().unwrap(), *theirs.first().unwrap()))
    })
    .await;
    eprintln!("a holds shard {mine}, the other replica shard {theirs}");
    // A cluster whose status `a` writes, and a rule of `a`'s shard that copies into it.
    let name = (0..)
        .map(|i| format!("watched-{i}"))
        .find(|n| shard_of_name(n, COUNT) == mine)
        .unwrap();
    let rule = (0..)
        .map(|i| format!("pull-{i}"))
        .find(|r| shard_of(&RuleKey::cluster_sync_rule(r), COUNT) == mine)
        .unwrap();

    let b = ControlPlane::start().await.unwrap_or_else(|e| panic!("{e}"));
    let b_client = b.client().await.unwrap();
    let apps: Namespace = serde_json::from_value(json!({"metadata": {"name": "apps"}})).unwrap();
    Api::<Namespace>::all(b_client.clone())
        .create(&PostParams::default(), &apps)
        .await
        .unwrap();
    let proxy = FaultProxy::start(b.api_address()).unwrap();
    let kubeconfig = b
        .token_kubeconfig_yaml(b.admin_token())
        .replace(b.server(), &format!("https://{}", proxy.address()));
    h.register_cluster(&name, &kubeconfig, json!({})).await;
    h.put_secret("platform", "pull", &[("value", "v0")]).await;
    h.apply(
        json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "ClusterSyncRule",
                   "metadata": {"name": rule},
                   "spec": {"source": {"kind": "Secret", "name": "pull", "namespace": "platform"},
                            "targets": [{"cluster": &name, "namespace": "apps"}]}}),
    )
    .await;
    eventually("the copy in B", || async {
        Api::<Secret>::namespaced(b_client.clone(), "apps")
            .get_opt("pull")
            .await
            .unwrap()
    })
    .await;
    let api: Api<RemoteCluster> = Api::all(h.client.clone());
    times_to(&api, &[&name], "True", Instant::now(), harness::WAIT).await;

    // What the other replica would write, as the holder of its shard, when its rules there got
    // no answer; and then, reaching the cluster again, its count alone.
    let write_as_other = |view: serde_json::Value| {
        let api = api.clone();
        let name = name.clone();
        async move {
            let patch = json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster", "status": view});
            api.patch_status(
                &name,
                &kube::api::PatchParams::apply(&format!("mimeo-shard-{theirs}")).force(),
                &kube::api::Patch::Apply(&patch),
            )
            .await
            .unwrap();
        }
    };
    let reported = Instant::now();
    write_as_other(json!({"rulesByShard": {theirs.to_string(): 1},
                          "unreachableByShard": {theirs.to_string(): "no answer within 10 s"}}))
    .await;
    let took = times_to(&api, &[&name], "False", reported, Duration::from_secs(3)).await[0];
    let message = api.get(&name).await.unwrap().status.unwrap().conditions[0]
        .message
        .clone();
    eprintln!("Ready=False {took:.2?} after the other replica's report: {message}");
    assert!(
        message.contains(&format!("the replica holding shard {theirs} does not reach it")),
        "{message}"
    );
    assert!(took < Duration::from_secs(3), "{took:?}");
    let withdrawn = Instant::now();
    write_as_other(json!({"rulesByShard": {theirs.to_string(): 1}})).await;
    let took = times_to(&api, &[&name], "True", withdrawn, Duration::from_secs(3)).await[0];
    eprintln!("Ready=True {took:.2?} after the report was withdrawn");
    assert!(took < Duration::from_secs(3), "{took:?}");

    // `a`'s own shard: reported while `a` does not reach the cluster, withdrawn after.
    let report_of_mine = || async {
        api.get(&name)
            .await
            .unwrap()
            .status
            .unwrap()
            .unreachable_by_shard
            .get(&mine.to_string())
            .cloned()
    };
    let cut = Instant::now();
    proxy.set(Fault::Blackhole);
    let took = times_to(&api, &[&name], "False", cut, NOT_READY_WITHIN).await[0];
    let report = eventually("a's report for its shard", || async { report_of_mine().await }).await;
    eprintln!(
        "blackholed: Ready=False {took:.2?} after the cut; a reports for shard {mine} after {:.2?}: {report}",
        cut.elapsed()
    );
    assert!(took < NOT_READY_WITHIN, "{took:?}");
    let healed = Instant::now();
    proxy.set(Fault::Pass);
    let took = times_to(&api, &[&name], "True", healed, READY_AGAIN_WITHIN).await[0];
    eventually("a's report withdrawn", || async {
        report_of_mine().await.is_none().then_some(())
    })
    .await;
    eprintln!(
        "healed: Ready=True {took:.2?} after the heal, a's report withdrawn after {:.2?}",
        healed.elapsed()
    );
    for keeper in keepers {
        keeper.abort();
    }
}
