//! A rule deleted: its copies go (or stay, orphaned) in every cluster it holds them in, before
//! its finalizer lets it go. They are found in each cluster's copies cache, once it has listed
//! in full: a partial view would let the finalizer go with copies left behind.

use super::carry_out::remove_owned;
use super::places::{owned_copies, place_of};
use super::requests::{WRITE_CONCURRENCY, remote_call};
use crate::api::{CopyState, CopyStatus, RuleSpec};
use crate::controller::context::Context;
use crate::controller::error::{Error, short_message};
use crate::controller::fleet::ClusterHandle;
use crate::controller::rule::RuleResource;
use crate::controller::rule_status::{KnownCopies, known_copies};
use crate::controller::watches::Interest;
use crate::locks::lock;
use crate::sync::desired::CopyTarget;
use crate::sync::kinds::KindRef;
use crate::sync::ownership::RuleKey;
use crate::sync::plan::{OwnedCopy, source_of};
use crate::sync::validate;
use futures::StreamExt;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

/// Removes the rule's copies per its deletion policy and forgets the rule everywhere; a copy
/// that cannot be removed keeps the finalizer on, to be tried again.
pub(super) async fn cleanup<R: RuleResource>(rule: Arc<R>, ctx: &Context) -> Result<Action, Error> {
    let key = rule.key();
    let spec = rule.rule_spec();
    ctx.fleet.wait_ready().await?;
    let kind = validate::check(spec, &ctx.kinds.get().allowed).ok();
    if kind.is_none() {
        // Its kind is not one this installation copies (any more): mimeo watches no copies of it
        // and may lack the rights to remove them; only those a running watch holds are removed.
        tracing::warn!(rule = %key, "rule deleted; its kind is not one mimeo copies, so its copies mimeo does not watch are left as they are");
    }
    let uid = rule.meta().uid.clone().unwrap_or_default();
    let known = {
        let last = ctx.statuses.lock().unwrap_or_else(|p| p.into_inner());
        known_copies(rule.rule_status(), last.get(&key), &uid)
    };
    let remote: BTreeSet<String> = known.clusters.iter().flatten().cloned().collect();
    ctx.fleet.uses(&key, remote.clone(), false);
    let mut failures = Vec::new();
    let mut clusters = vec![ctx.fleet.local().clone()];
    for name in &remote {
        match ctx.fleet.cluster(&key, name, false).await {
            Ok(handle) => clusters.push(handle),
            Err(problem) if matches!(problem.state, CopyState::ClusterMissing | CopyState::NotAccepted) => {
                tracing::warn!(rule = %key, cluster = %name, reason = %problem.message, "rule deleted; its copies in this cluster are left as they are");
            }
            Err(problem) => failures.push(problem.message),
        }
    }
    let mut removed = 0;
    for handle in &clusters {
        removed += remove_in(handle, ctx, (&key, spec), kind.as_ref(), &known, &mut failures).await;
    }
    if !failures.is_empty() {
        return Err(Error::Cleanup(short_message(&failures.join("; "))));
    }
    let what = match spec.deletion {
        crate::api::DeletionPolicy::Delete => "deleted",
        crate::api::DeletionPolicy::Orphan => "orphaned",
    };
    tracing::info!(rule = %key, copies = removed, "rule deleted; its copies were {what} (but those annotated mimeo.dev/deletion: Orphan, kept)");
    for handle in &clusters {
        handle.watches.forget(&key);
    }
    forget(ctx, &key);
    Ok(Action::await_change())
}

/// Removes the rule's copies in one cluster, several at a time; how many went. What could not
/// be done is added to `failures`.
async fn remove_in(
    handle: &ClusterHandle,
    ctx: &Context,
    (key, spec): (&RuleKey, &RuleSpec),
    kind: Option<&KindRef>,
    known: &KnownCopies,
    failures: &mut Vec<String>,
) -> usize {
    let mut removed = 0;
    let here: Vec<&CopyStatus> = known.copies.iter().filter(|c| c.cluster == handle.name).collect();
    let resolved = match kind {
        Some(kind) => match remote_call(&handle.name, handle.watches.resolve(kind)).await {
            Ok(resolved) => resolved,
            Err(e) => {
                failures.push(format!("{}: looking up the kind: {e}", cluster_name(handle)));
                return 0;
            }
        },
        None => None,
    };
    if let Some((resource, _)) = &resolved {
        let interest = Interest {
            copies: Some(resource.clone()),
            ..Default::default()
        };
        if let Err(e) = handle.watches.declare(key, interest).await {
            failures.push(format!("{}: {e}", cluster_name(handle)));
            return 0;
        }
    }
    let candidates = match &resolved {
        Some((resource, namespaced)) => owned_copies(
            handle,
            key,
            (resource, *namespaced),
            &here,
            &known.unsealed,
            &ctx.scope,
        ),
        None => handle
            .watches
            .copies_of(key)
            .into_iter()
            .map(|(resource, c)| OwnedCopy {
                resource,
                namespace: c.namespace(),
                name: c.name_any(),
                source: source_of(&*c),
                recorded: false,
                orphan: false,
            })
            .collect(),
    };
    // Several removals in flight at once, as writes are: 50,000 copies one after another
    // would hold the rule for minutes.
    let removals = candidates.into_iter().map(|copy| {
        let key = &key;
        async move {
            let place = (copy.namespace.as_deref(), copy.name.as_str(), copy.recorded);
            let removal = remove_owned(
                handle,
                &ctx.shards,
                &ctx.seal_key,
                key,
                &copy.resource,
                place,
                spec,
            );
            (remote_call(&handle.name, removal).await, copy)
        }
    });
    let mut done = futures::stream::iter(removals).buffer_unordered(WRITE_CONCURRENCY);
    while let Some((result, copy)) = done.next().await {
        match result {
            Ok(Some(verb)) => {
                ctx.metrics.wrote(verb);
                removed += 1;
            }
            Ok(None) => {}
            Err(e) => {
                if crate::controller::write::ChangedSinceRead::is(&e) {
                    ctx.metrics.copy_write_refused();
                }
                let target = CopyTarget {
                    cluster: handle.name.clone(),
                    namespace: copy.namespace,
                    name: copy.name,
                };
                failures.push(format!("{}: {e}", place_of(&target)));
            }
        }
    }
    removed
}

/// A cluster as failures name it.
fn cluster_name(handle: &ClusterHandle) -> String {
    match &handle.name {
        Some(name) => format!("RemoteCluster {name}"),
        None => "this cluster".to_owned(),
    }
}

/// Lets go of a rule whose shard this replica does not hold now: its watches and clusters, its
/// last status, its backoff and its metrics. What its chain made is kept a while
/// (`ChainOutputs::let_go`): a hold that lapsed is renewed within seconds, and the renewal looks
/// at every rule again, which would otherwise run every chain of the rules let go meanwhile
/// once more for every copy.
pub(super) fn let_go(ctx: &Context, key: &RuleKey) {
    ctx.fleet.forget(key);
    ctx.next_to.forget(key);
    ctx.orders.forget(key);
    ctx.plugin_config_maps
        .uses(key, std::collections::BTreeSet::new());
    ctx.plugin_files.uses(key, std::collections::BTreeSet::new());
    ctx.chain_outputs.let_go(key, Instant::now());
    lock(&ctx.statuses).remove(key);
    ctx.retries.succeeded(key);
    ctx.metrics.set_copies(&key.to_string(), None);
}

/// Forgets everything this replica keeps for a rule that is gone: what [`let_go`] lets go, and
/// what its chain made.
pub(super) fn forget(ctx: &Context, key: &RuleKey) {
    let_go(ctx, key);
    ctx.chain_outputs.forget(key);
}
