//! A rule deleted: its copies go (or stay, orphaned) in every cluster it recorded them in,
//! before its finalizer lets it go.

use super::carry_out::remove_owned;
use super::{owned_copies, place_of, remote_call};
use crate::api::{CopyState, CopyStatus};
use crate::controller::Context;
use crate::controller::error::{Error, short_message};
use crate::controller::rule::RuleResource;
use crate::controller::status::known_copies;
use crate::sync::copies::{OwnedCopy, source_of};
use crate::sync::desired::CopyTarget;
use crate::sync::validate;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Removes the rule's copies per its deletion policy and forgets the rule everywhere; a copy
/// that cannot be removed keeps the finalizer on, to be tried again.
pub(super) async fn cleanup<R: RuleResource>(rule: Arc<R>, ctx: &Context) -> Result<Action, Error> {
    let key = rule.key();
    let spec = rule.rule_spec();
    ctx.fleet.wait_ready().await?;
    let kind = validate::check(spec, &ctx.allowed_kinds).ok();
    let uid = rule.meta().uid.clone().unwrap_or_default();
    let recorded = {
        let last = ctx.statuses.lock().unwrap_or_else(|p| p.into_inner());
        known_copies(rule.rule_status(), last.get(&key), &uid)
    };
    let remote: BTreeSet<String> = recorded.iter().filter_map(|c| c.cluster.clone()).collect();
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
        let here: Vec<&CopyStatus> = recorded.iter().filter(|c| c.cluster == handle.name).collect();
        let resolved = match &kind {
            Some(kind) => remote_call(&handle.name, handle.watches.resolve(kind))
                .await
                .ok()
                .flatten(),
            None => None,
        };
        let candidates = match &resolved {
            Some((resource, namespaced)) => {
                owned_copies(handle, &key, resource, *namespaced, &here, &ctx.scope)
            }
            None => handle
                .watches
                .copies_of(&key)
                .into_iter()
                .map(|(resource, c)| OwnedCopy {
                    resource,
                    namespace: c.namespace(),
                    name: c.name_any(),
                    source: source_of(&*c),
                    recorded: false,
                })
                .collect(),
        };
        for OwnedCopy {
            resource,
            namespace,
            name,
            recorded,
            ..
        } in candidates
        {
            let place = (namespace.as_deref(), name.as_str(), recorded);
            match remote_call(
                &handle.name,
                remove_owned(handle, &ctx.seal_key, &key, &resource, place, spec),
            )
            .await
            {
                Ok(Some(done)) => {
                    ctx.metrics.wrote(done);
                    removed += 1;
                }
                Ok(None) => {}
                Err(e) => {
                    let target = CopyTarget {
                        cluster: handle.name.clone(),
                        namespace,
                        name,
                    };
                    failures.push(format!("{}: {e}", place_of(&target)));
                }
            }
        }
    }
    if !failures.is_empty() {
        return Err(Error::Cleanup(short_message(&failures.join("; "))));
    }
    let what = match spec.deletion {
        crate::api::DeletionPolicy::Delete => "deleted",
        crate::api::DeletionPolicy::Orphan => "orphaned",
    };
    tracing::info!(rule = %key, copies = removed, "rule deleted; its copies were {what}");
    ctx.fleet.forget(&key);
    ctx.next_to.forget(&key);
    ctx.plugin_config_maps.uses(&key, BTreeSet::new());
    ctx.plugin_files.uses(&key, BTreeSet::new());
    ctx.chain_outputs.keep_only(&key, &BTreeSet::new());
    ctx.statuses
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&key);
    ctx.metrics.set_copies(&key.to_string(), None);
    Ok(Action::await_change())
}
