//! Whether a remote cluster answers now, for its `RemoteCluster` status: an active probe by the
//! replica that writes that status, and what the other replicas say they see. Nothing here writes
//! a status; [`super::status`] does, and only when what it says changes.
//!
//! A silent peer (a link that accepts bytes and answers nothing: a blackholing proxy, a load
//! balancer whose backend froze, a partition past the first hop) gives no error anywhere by
//! itself. kube's client speaks HTTP/1.1, so there are no HTTP/2 pings to miss; TCP keepalive and
//! `TCP_USER_TIMEOUT` are answered by the nearest TCP peer, which is the proxy or the load
//! balancer, not the apiserver, and kube's connector sets neither; a watch that is sent nothing
//! (not even a bookmark, which the apiserver sends about once a minute) is dropped by kube's
//! watcher only after its timeout, 295 s; and the replica writing the status may have no rule
//! using the cluster, hence no request and no watch of its own there at all. So only a request
//! the apiserver itself must answer, with a deadline, tells: `GET /version`, every [`PROBE_EVERY`]
//! (every [`PROBE_EVERY_NOT_READY`] while it is not ready, so a heal is seen soon), given
//! [`PROBE_DEADLINE`]. A link that falls silent is `Ready=False` within [`NOT_READY_WITHIN`].
//!
//! The probe runs on a client kept between looks (its connection is reused, so a probe costs one
//! small request and no handshake) and made again from the kubeconfig Secret every
//! [`CHECK_EVERY`] (a rotated kubeconfig with no rule here to watch its Secret shows within that)
//! or after any problem other than no answer.
//!
//! Other replicas: each writes, for each shard it holds whose rules use the cluster, why it
//! cannot reach it, if it cannot (`status.unreachableByShard`, under that shard's field manager,
//! next to `rulesByShard`, only when that changes). The status writer reads those in its cache of
//! `RemoteCluster`s, whose watch wakes it at each change, and says `Ready=False` while any
//! replica holding a shard reports so. A shard's next holder writes its own view over a dead
//! replica's. This costs a write per change of view, not per probe, needs no channel between
//! replicas but the `RemoteCluster` they already share, and says in the object itself which
//! replica sees what.

use super::{kubeconfig_ref, read_kubeconfig};
use crate::api::{KubeconfigSecretRef, RemoteCluster};
use crate::clusters::{self, KubeconfigProblem};
use crate::controller::rule_status::Readiness;
use crate::locks::lock;
use crate::metrics::Metrics;
use kube::{Client, ResourceExt};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the status writer asks a ready cluster whether it answers.
pub const PROBE_EVERY: Duration = Duration::from_secs(5);
/// How often it asks a cluster that did not answer: a heal shows within this and a probe's
/// deadline (5 s; 0.07-3.2 s measured).
pub const PROBE_EVERY_NOT_READY: Duration = Duration::from_secs(2);
/// How long a probe waits for the answer. `GET /version` is served from the apiserver's memory;
/// an apiserver that takes this long to say its version is in no state to take copies either.
pub const PROBE_DEADLINE: Duration = Duration::from_secs(3);
/// How soon a link that falls silent shows as `Ready=False` at the latest: the probe before it
/// answered just before, the next one starts [`PROBE_EVERY`] later and gives up after
/// [`PROBE_DEADLINE`]; the status write itself goes to the cluster mimeo runs in. Documented in
/// docs/remote-clusters.md and asserted by tests/sync/remote_liveness.rs.
pub const NOT_READY_WITHIN: Duration = Duration::from_secs(10);
/// How often the probe's client is made again from the kubeconfig Secret.
pub const CHECK_EVERY: Duration = Duration::from_secs(60);
/// How often a cluster that is not ready for another reason than no answer is looked at again.
pub const RECHECK_NOT_READY: Duration = Duration::from_secs(10);

/// The reason of a cluster that does not answer.
pub const UNREACHABLE: &str = "Unreachable";

const _: () = assert!(PROBE_EVERY.as_secs() + PROBE_DEADLINE.as_secs() < NOT_READY_WITHIN.as_secs());

/// A probe's client, kept between looks at one cluster.
struct ProbeClient {
    reference: KubeconfigSecretRef,
    client: Client,
    made: Instant,
}

/// The probe clients of the clusters whose status this replica writes.
#[derive(Default)]
pub struct Probes {
    clients: Mutex<HashMap<String, ProbeClient>>,
}

impl Probes {
    /// Asks the cluster for its version within [`PROBE_DEADLINE`]: its version, or why not.
    pub async fn probe(
        &self,
        local: &Client,
        metrics: &Metrics,
        remote: &RemoteCluster,
    ) -> Result<String, KubeconfigProblem> {
        let name = remote.name_any();
        let reference = kubeconfig_ref(remote)?;
        let client = self.client(local, metrics, &name, reference).await?;
        let answer = tokio::time::timeout(PROBE_DEADLINE, client.apiserver_version())
            .await
            .map_err(|_| KubeconfigProblem {
                reason: UNREACHABLE,
                message: format!(
                    "the cluster did not answer within {} s (GET /version)",
                    PROBE_DEADLINE.as_secs()
                ),
            })
            .and_then(|answer| answer.map_err(|e| clusters::classify(&e)));
        match answer {
            Ok(version) => Ok(version.git_version),
            Err(problem) => {
                // No answer is no reason to read the Secret again; anything else may be fixed
                // there.
                if problem.reason != UNREACHABLE {
                    self.forget(&name);
                }
                Err(problem)
            }
        }
    }

    /// The kept client for the cluster, or a new one from its kubeconfig Secret when there is
    /// none, it was made from another Secret, or it is older than [`CHECK_EVERY`].
    async fn client(
        &self,
        local: &Client,
        metrics: &Metrics,
        name: &str,
        reference: &KubeconfigSecretRef,
    ) -> Result<Client, KubeconfigProblem> {
        if let Some(kept) = lock(&self.clients).get(name)
            && kept.reference == *reference
            && kept.made.elapsed() < CHECK_EVERY
        {
            return Ok(kept.client.clone());
        }
        let bytes = read_kubeconfig(local, reference).await;
        let made = match bytes {
            Ok(bytes) => clusters::client_from_bytes(bytes, &metrics.requests_layer(Some(name))).await,
            Err(problem) => Err(problem),
        };
        let client = made.inspect_err(|_| self.forget(name))?;
        lock(&self.clients).insert(
            name.to_owned(),
            ProbeClient {
                reference: reference.clone(),
                client: client.clone(),
                made: Instant::now(),
            },
        );
        Ok(client)
    }

    /// Drops the kept client: the next probe reads the kubeconfig Secret again.
    pub fn forget(&self, name: &str) {
        lock(&self.clients).remove(name);
    }
}

/// What the status says of the cluster's reach: this replica's view (its probe, or its own rules'
/// requests and watches), unless it is reached and a replica holding another shard says it is not
/// (`reports`: shard to why, as `status.unreachableByShard` holds them). Shards this replica holds
/// (`held`) are its own view, already in `own`; shards beyond `count` are left from an earlier
/// split and say nothing now.
pub fn reach(
    own: Result<String, KubeconfigProblem>,
    reports: &BTreeMap<String, String>,
    held: &BTreeSet<u32>,
    count: u32,
) -> Result<String, KubeconfigProblem> {
    let version = own?;
    let others: Vec<(u32, &String)> = reports
        .iter()
        .filter_map(|(shard, why)| Some((shard.parse::<u32>().ok()?, why)))
        .filter(|(shard, _)| *shard < count && !held.contains(shard))
        .collect();
    let Some((shard, why)) = others.first() else {
        return Ok(version);
    };
    let more = match others.len() {
        1 => String::new(),
        n => format!(" (and {} more shards)", n - 1),
    };
    Err(KubeconfigProblem {
        reason: UNREACHABLE,
        message: format!("the replica holding shard {shard}{more} does not reach it: {why}"),
    })
}

/// Why a cluster this replica marked down is not ready: its own rules' requests or watches, or its
/// probe, got no answer, and the fleet's prober asks it now ([`super::Fleet::report_unreachable`]).
/// One wording whichever found it first, so that the status is written once for it.
pub fn down(error: &str) -> KubeconfigProblem {
    KubeconfigProblem {
        reason: UNREACHABLE,
        message: format!("does not answer (retrying with backoff): {error}"),
    }
}

/// What a shard's holder reports of the cluster: why it cannot reach it (`down`, from its own
/// requests, watches and probes) while rules of the shard use it; nothing otherwise.
pub fn report(rules: i32, down: Option<String>) -> Option<String> {
    down.filter(|_| rules > 0)
}

/// When the status writer looks at the cluster again.
pub fn next_look(ready: &Readiness) -> Duration {
    match (ready.ready, ready.reason.as_str()) {
        (true, _) => PROBE_EVERY,
        (false, UNREACHABLE) => PROBE_EVERY_NOT_READY,
        (false, _) => RECHECK_NOT_READY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reports(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(s, why)| (s.to_string(), why.to_string()))
            .collect()
    }

    fn unreachable(message: &str) -> KubeconfigProblem {
        KubeconfigProblem {
            reason: UNREACHABLE,
            message: message.into(),
        }
    }

    /// This replica's own view, the reports, and what the status says.
    type Case = (
        Result<String, KubeconfigProblem>,
        BTreeMap<String, String>,
        Result<&'static str, &'static str>,
    );

    #[test]
    fn what_other_replicas_see_counts_but_not_over_this_replicas_own_view() {
        let held = BTreeSet::from([0]);
        let reached = || Ok::<_, KubeconfigProblem>("v1.36.3".to_owned());
        let cases: [Case; 6] = [
            (reached(), reports(&[]), Ok("v1.36.3")),
            (
                reached(),
                reports(&[("2", "no answer within 10 s")]),
                Err("the replica holding shard 2 does not reach it: no answer within 10 s"),
            ),
            (
                reached(),
                reports(&[("1", "a"), ("2", "b")]),
                Err("the replica holding shard 1 (and 1 more shards) does not reach it: a"),
            ),
            // Its own shard is its own view, which the probe just had answered.
            (reached(), reports(&[("0", "stale")]), Ok("v1.36.3")),
            // From a split into more shards than now, or not a shard at all.
            (reached(), reports(&[("7", "old"), ("x", "?")]), Ok("v1.36.3")),
            (
                Err(unreachable(
                    "the cluster did not answer within 3 s (GET /version)",
                )),
                reports(&[("2", "b")]),
                Err("the cluster did not answer within 3 s (GET /version)"),
            ),
        ];
        for (own, reports, expected) in cases {
            let said = reach(own, &reports, &held, 4);
            match (said, expected) {
                (Ok(version), Ok(expected)) => assert_eq!(version, expected),
                (Err(problem), Err(expected)) => {
                    assert_eq!(problem.reason, UNREACHABLE);
                    assert_eq!(problem.message, expected);
                }
                (said, expected) => panic!("{reports:?}: {said:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn a_shard_reports_only_while_its_rules_use_the_cluster() {
        assert_eq!(report(2, Some("no answer".into())), Some("no answer".into()));
        assert_eq!(report(0, Some("no answer".into())), None);
        assert_eq!(report(2, None), None);
    }

    #[test]
    fn a_cluster_that_does_not_answer_is_asked_more_often_than_one_that_does() {
        let ready = Readiness {
            ready: true,
            reason: "Connected".into(),
            message: String::new(),
        };
        assert_eq!(next_look(&ready), PROBE_EVERY);
        assert_eq!(
            next_look(&Readiness::not_ready(UNREACHABLE, "")),
            PROBE_EVERY_NOT_READY
        );
        assert_eq!(
            next_look(&Readiness::not_ready("SecretNotFound", "")),
            RECHECK_NOT_READY
        );
        assert!(PROBE_EVERY_NOT_READY < PROBE_EVERY);
    }
}
