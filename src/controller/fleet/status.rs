//! `RemoteCluster` status: reads the kubeconfig Secret, reaches the cluster, and reports
//! `Ready` with the server version and how many rules use it, or why it cannot be reached.

use super::{kubeconfig_ref, read_kubeconfig};
use crate::api::{RemoteCluster, RemoteClusterStatus};
use crate::clusters::{self, KubeconfigProblem};
use crate::controller::context::Context;
use crate::controller::error::{Error, short_message};
use crate::controller::rule_status::{Readiness, ready_conditions};
use crate::sync::ownership::FIELD_MANAGER;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// How often a cluster is checked again: a rotated kubeconfig shows up within this time. A
/// cluster that stops answering shows up sooner: the fleet marks it down and wakes this.
const RECHECK: Duration = Duration::from_secs(60);
/// How often a cluster that is not ready is checked again.
const RECHECK_NOT_READY: Duration = Duration::from_secs(10);

pub async fn reconcile(cluster: Arc<RemoteCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let by_shard = count_by_shard(&cluster, &ctx).await?;
    if !ctx.shards.holds_name(&cluster.name_any()) {
        // Another replica checks it, writes its status and exports its metrics.
        ctx.metrics.set_remote_cluster(&cluster.name_any(), None);
        return Ok(Action::requeue(RECHECK));
    }
    let down = ctx.fleet.down_because(&cluster.name_any());
    let checked = match down {
        // The fleet's own requests and watches do not reach it: no need to try a third way.
        Some(error) => Err(KubeconfigProblem {
            reason: "Unreachable",
            message: format!("does not answer (retrying with backoff): {error}"),
        }),
        None => check(&cluster, &ctx).await,
    };
    let (ready, version) = match checked {
        Ok(version) => (
            Readiness {
                ready: true,
                reason: "Connected".into(),
                message: connected_message(&version, &ctx.fleet.same_cluster_as(&cluster.name_any())),
            },
            Some(version),
        ),
        Err(problem) => (
            Readiness::not_ready(problem.reason, short_message(&problem.message)),
            None,
        ),
    };
    let previous = cluster.status.as_ref();
    let generation = cluster.meta().generation;
    let rules = match &by_shard {
        Some(counts) => counts.values().sum(),
        None => ctx.fleet.rules_using(&cluster.name_any()) as i32,
    };
    ctx.metrics
        .set_remote_cluster(&cluster.name_any(), Some((ready.ready, i64::from(rules))));
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
    };
    let previous_own = previous.map(|s| RemoteClusterStatus {
        rules_by_shard: Default::default(),
        ..s.clone()
    });
    if previous_own.as_ref() != Some(&status) {
        if !ready.ready {
            tracing::warn!(cluster = %cluster.name_any(), reason = %ready.reason, why = %ready.message, "remote cluster not ready");
        }
        let patch = json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster", "status": status});
        Api::<RemoteCluster>::all(ctx.client.clone())
            .patch_status(
                &cluster.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await?;
    }
    Ok(Action::requeue(if ready.ready {
        RECHECK
    } else {
        RECHECK_NOT_READY
    }))
}

/// With the rules split into shards: writes how many rules of each shard this replica holds use
/// the cluster (each shard under its own field manager, so that the replicas' writes do not
/// undo each other), and returns every shard's count as the status will then say.
async fn count_by_shard(
    cluster: &RemoteCluster,
    ctx: &Context,
) -> Result<Option<std::collections::BTreeMap<String, i32>>, Error> {
    let count = ctx.shards.count();
    if count == 1 {
        return Ok(None);
    }
    let name = cluster.name_any();
    let mut counts = cluster
        .status
        .as_ref()
        .map(|s| s.rules_by_shard.clone())
        .unwrap_or_default();
    for shard in ctx.shards.held_now() {
        let n = ctx
            .fleet
            .rules_using_among(&name, |key| crate::sync::shards::shard_of(key, count) == shard)
            as i32;
        if counts.get(&shard.to_string()) == Some(&n) {
            continue;
        }
        let patch = json!({"apiVersion": "mimeo.dev/v1alpha1", "kind": "RemoteCluster",
                           "status": {"rulesByShard": {shard.to_string(): n}}});
        Api::<RemoteCluster>::all(ctx.client.clone())
            .patch_status(
                &name,
                &PatchParams::apply(&format!("{FIELD_MANAGER}-shard-{shard}")).force(),
                &Patch::Apply(&patch),
            )
            .await?;
        counts.insert(shard.to_string(), n);
    }
    Ok(Some(counts))
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

/// Reads the kubeconfig and asks the cluster for its version.
async fn check(cluster: &RemoteCluster, ctx: &Context) -> Result<String, KubeconfigProblem> {
    let bytes = read_kubeconfig(&ctx.client, kubeconfig_ref(cluster)?).await?;
    let requests = ctx.metrics.requests_layer(Some(&cluster.name_any()));
    let client = clusters::client_from_bytes(bytes, &requests).await?;
    let version = tokio::time::timeout(Duration::from_secs(10), client.apiserver_version())
        .await
        .map_err(|_| KubeconfigProblem {
            reason: "Unreachable",
            message: "the cluster did not answer within 10 s".into(),
        })?
        .map_err(|e| clusters::classify(&e))?;
    Ok(version.git_version)
}
