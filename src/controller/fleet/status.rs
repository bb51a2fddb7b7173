//! `RemoteCluster` status: whether the cluster answers, as the replica holding its name's shard
//! probes it ([`super::liveness`]) and as the replicas holding the shards of the rules that use it
//! say they see it, with the server version and how many rules use it.

use super::liveness;
use crate::api::{RemoteCluster, RemoteClusterStatus};
use crate::controller::context::Context;
use crate::controller::error::{Error, short_message};
use crate::controller::rule_status::{Readiness, ready_conditions};
use crate::locks::lock;
use crate::sync::ownership::FIELD_MANAGER;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a replica that does not write a cluster's status looks at it, to write what its own
/// shards see: their rule counts (whether they reach it is written at once when that changes: the
/// fleet wakes this then).
const RECHECK: Duration = Duration::from_secs(60);

pub async fn reconcile(cluster: Arc<RemoteCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = cluster.name_any();
    let by_shard = write_shard_views(&cluster, &ctx).await?;
    if !ctx.shards.holds_name(&name) {
        // Another replica checks it, writes its status and exports its metrics.
        ctx.metrics.set_remote_cluster(&name, None);
        ctx.fleet.probes().forget(&name);
        return Ok(Action::requeue(RECHECK));
    }
    let own = match ctx.fleet.down_because(&name) {
        // This replica's own requests and watches do not reach it: no need to try a third way.
        Some(error) => Err(liveness::down(&error)),
        None => ctx.fleet.probe(&cluster).await,
    };
    let reports = cluster
        .status
        .as_ref()
        .map(|s| s.unreachable_by_shard.clone())
        .unwrap_or_default();
    let checked = liveness::reach(own, &reports, &ctx.shards.held_now(), ctx.shards.count());
    let (ready, version) = match checked {
        Ok(version) => (
            Readiness {
                ready: true,
                reason: "Connected".into(),
                message: connected_message(&version, &ctx.fleet.same_cluster_as(&name)),
            },
            Some(version),
        ),
        Err(problem) => (
            Readiness::not_ready(problem.reason, short_message(&problem.message)),
            None,
        ),
    };
    let previous = ctx.fleet.written().previous(&cluster);
    let previous = previous.as_ref();
    let generation = cluster.meta().generation;
    let rules = match &by_shard {
        Some(counts) => counts.values().sum(),
        None => ctx.fleet.rules_using(&name) as i32,
    };
    ctx.metrics
        .set_remote_cluster(&name, Some((ready.ready, i64::from(rules))));
    let status = RemoteClusterStatus {
        observed_generation: generation,
        conditions: ready_conditions(
            previous.map(|s| s.conditions.as_slice()),
            generation,
            ready.clone(),
        ),
        server_version: version.or_else(|| previous.and_then(|s| s.server_version.clone())),
        rules: Some(rules),
        // Written by each shard's holder under a field manager of its own, never here.
        rules_by_shard: Default::default(),
        unreachable_by_shard: Default::default(),
    };
    let previous_own = previous.map(|s| RemoteClusterStatus {
        rules_by_shard: Default::default(),
        unreachable_by_shard: Default::default(),
        ..s.clone()
    });
    if previous_own.as_ref() != Some(&status) {
        if !ready.ready {
            tracing::warn!(cluster = %name, reason = %ready.reason, why = %ready.message, "remote cluster not ready");
        }
        let patch = json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster", "status": status});
        Api::<RemoteCluster>::all(ctx.client.clone())
            .patch_status(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await?;
        ctx.fleet
            .written()
            .wrote(&name, cluster.resource_version(), status);
    }
    Ok(Action::requeue(liveness::next_look(&ready)))
}

/// With the rules split into shards: writes, for each shard this replica holds, how many of its
/// rules use the cluster and, while this replica does not reach the cluster, why
/// ([`liveness::report`]); each shard under its own field manager, so that the replicas' writes do
/// not undo each other, and only when that changed. Returns every shard's count as the status
/// will then say.
async fn write_shard_views(
    cluster: &RemoteCluster,
    ctx: &Context,
) -> Result<Option<BTreeMap<String, i32>>, Error> {
    let count = ctx.shards.count();
    if count == 1 {
        return Ok(None);
    }
    let name = cluster.name_any();
    let status = cluster.status.clone().unwrap_or_default();
    let mut counts = status.rules_by_shard;
    let down = ctx.fleet.down_because(&name).map(|why| short_message(&why));
    for shard in ctx.shards.held_now() {
        let key = shard.to_string();
        let n = ctx
            .fleet
            .rules_using_among(&name, |rule| crate::sync::shards::shard_of(rule, count) == shard)
            as i32;
        let report = liveness::report(n, down.clone());
        if counts.get(&key) == Some(&n) && status.unreachable_by_shard.get(&key) == report.as_ref() {
            continue;
        }
        // A report left out is removed: this field manager owned it.
        let mut view = json!({"rulesByShard": {&key: n}});
        if let Some(why) = &report {
            view["unreachableByShard"] = json!({&key: why});
        }
        let patch = json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster", "status": view});
        Api::<RemoteCluster>::all(ctx.client.clone())
            .patch_status(
                &name,
                &PatchParams::apply(&format!("{FIELD_MANAGER}-shard-{shard}")).force(),
                &Patch::Apply(&patch),
            )
            .await?;
        counts.insert(key, n);
    }
    Ok(Some(counts))
}

/// The status this replica last wrote to each `RemoteCluster`, and the version of the object it
/// was written over. For a moment after a write the cache still holds that version, and deciding
/// on it would write the same status again with a new transition time: seen twice within 50 ms,
/// as the probe that marked a cluster down woke its status a second time.
#[derive(Default)]
pub struct Written(Mutex<HashMap<String, (Option<String>, RemoteClusterStatus)>>);

impl Written {
    /// The status to decide on: what this replica wrote, while the cache still holds the version
    /// it was written over (with the shards' fields as cached: other field managers' own); else
    /// the cached one, whoever wrote it.
    fn previous(&self, cluster: &RemoteCluster) -> Option<RemoteClusterStatus> {
        let cached = cluster.status.clone();
        match lock(&self.0).get(&cluster.name_any()) {
            Some((over, written)) if *over == cluster.resource_version() => {
                let shards = cached.unwrap_or_default();
                Some(RemoteClusterStatus {
                    rules_by_shard: shards.rules_by_shard,
                    unreachable_by_shard: shards.unreachable_by_shard,
                    ..written.clone()
                })
            }
            _ => cached,
        }
    }

    fn wrote(&self, name: &str, over: Option<String>, status: RemoteClusterStatus) {
        lock(&self.0).insert(name.to_owned(), (over, status));
    }

    /// Forgets a deleted `RemoteCluster`.
    pub fn forget(&self, name: &str) {
        lock(&self.0).remove(name);
    }
}

pub fn error_policy(cluster: Arc<RemoteCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics
        .reconcile_failed("RemoteCluster", error.metric_label());
    tracing::warn!(cluster = %cluster.name_any(), error = %error, "reconcile failed");
    Action::requeue(error.retry_after())
}

/// What a reached cluster says, naming the other `RemoteCluster`s of the same cluster: each rule
/// writes through the one it names, so they are no fault, but worth knowing of.
fn connected_message(version: &str, same_cluster: &[String]) -> String {
    if same_cluster.is_empty() {
        return format!("reached; Kubernetes {version}");
    }
    format!(
        "reached; Kubernetes {version}; the same cluster as RemoteCluster {} (the uid of their \
         kube-system namespaces is the same): each rule writes through the one it names",
        same_cluster.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(version: &str, reason: &str, rules_by_shard: i32) -> RemoteCluster {
        serde_json::from_value(json!({
            "apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster",
            "metadata": {"name": "b", "resourceVersion": version},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "False", "reason": reason, "message": "",
                                       "lastTransitionTime": "2026-12-07T18:00:00Z"}],
                       "rulesByShard": {"1": rules_by_shard}},
        }))
        .unwrap()
    }

    #[test]
    fn what_this_replica_wrote_is_decided_on_until_the_cache_moves_past_it() {
        let written = Written::default();
        let before = cluster("7", "Connected", 1);
        assert_eq!(written.previous(&before), before.status);
        let wrote = cluster("8", "Unreachable", 0).status.unwrap();
        written.wrote("b", Some("7".into()), wrote.clone());
        // The cache still holds version 7: this replica's write, the shards' counts as cached.
        let decided = written.previous(&before).unwrap();
        assert_eq!(decided.conditions, wrote.conditions);
        assert_eq!(
            decided.rules_by_shard,
            before.status.clone().unwrap().rules_by_shard
        );
        // It moved on, by this write or another replica's: the cache.
        let after = cluster("9", "Connected", 2);
        assert_eq!(written.previous(&after), after.status);
        written.forget("b");
        assert_eq!(written.previous(&before), before.status);
    }
}
