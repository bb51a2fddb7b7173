//! Making the placed copies: the namespaces a `ClusterSyncRule` creates for them, the transform
//! chain run on each (or what it made of the same input before), and the places whose object no
//! cache holds, read from their apiserver. What each copy then is to be, the plan decides.

use super::gather::{Gathered, Reachable};
use super::inputs::ReadInputs;
use super::requests::{WRITE_CONCURRENCY, failure, remote_call};
use crate::api::SourceRef;
use crate::clusters::fence::Fence;
use crate::controller::context::Context;
use crate::controller::error::short_message;
use crate::controller::fleet::ClusterHandle;
use crate::controller::plugins::Chain;
use crate::controller::plugins::chain_outputs::{Remembered, chain_input};
use crate::controller::write;
use crate::plugin::{ChainError, ChainOutcome, TransformContext};
use crate::sync::desired::{CopyTarget, DesiredCopy};
use crate::sync::live::LiveCopy;
use crate::sync::ownership::RuleKey;
use crate::sync::plan::{Made, Pending, Plan, Read, Source};
use futures::StreamExt;
use kube::core::ApiResource;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Creates the namespace of each placed copy that asks for it; a copy whose namespace cannot be
/// created is blocked with the reason. (Only a `ClusterSyncRule` target may say
/// `createNamespace`: the schema and `plan::place` both say so.)
pub(super) async fn create_namespaces(ctx: &Context, gathered: &Gathered<'_>, plan: &mut Plan) {
    for copy in &mut plan.copies {
        let (Some((_, c)), true, Pending::Make) = (copy.from, copy.create_namespace, &copy.pending) else {
            continue;
        };
        let cluster = &gathered.reachable[c];
        let namespace = copy.target.namespace.as_deref().unwrap_or_default();
        let created = async {
            Fence::for_rule(&ctx.shards, &gathered.key).check()?;
            write::create_namespace(&cluster.handle.client, namespace).await
        };
        match remote_call(&cluster.name, created).await {
            Ok(()) => {
                tracing::info!(rule = %gathered.key, namespace = %namespace, cluster = cluster.name.as_deref().unwrap_or_default(), "created a target namespace");
            }
            Err(e) => {
                let (state, why) = failure(ctx, &cluster.name, "creating the namespace", &e);
                copy.block(state, why);
            }
        }
    }
}

/// Runs the rule's chain on every placed copy. Only the copies it ran for (or was remembered
/// for) stay remembered.
pub(super) async fn run_chains(ctx: &Context, gathered: &Gathered<'_>, plan: &mut Plan) {
    let chain = &gathered.chain.chain;
    let mut chained = BTreeSet::new();
    if !chain.is_empty() {
        let chain_ids: Vec<(&str, &str)> = chain
            .iter()
            .map(|(plugin, config)| (plugin.digest.as_str(), config.as_str()))
            .collect();
        for copy in &mut plan.copies {
            let (Some((s, c)), Pending::Make) = (copy.from, &copy.pending) else {
                continue;
            };
            let source = &gathered.sources[s];
            chained.insert(copy.target.clone());
            debug_assert_eq!(copy.target.cluster, gathered.reachable[c].name);
            let plugin_ctx = plugin_context(
                &gathered.key,
                &gathered.resource,
                source,
                &gathered.source_cluster,
                &copy.target,
                &gathered.inputs,
            );
            let template = &source.template;
            let input = chain_input(
                template.hash(),
                template.source_hash(),
                &gathered.inputs.hash,
                &chain_ids,
                &plugin_ctx,
            );
            let desired = template.copy_for(copy.target.clone());
            let made = match transform(ctx, &gathered.key, chain, input, desired, plugin_ctx).await {
                Ok(made) => made,
                Err(e) => {
                    ctx.metrics.plugin_failed(&e.plugin, e.error.label());
                    Made::Failed {
                        message: short_message(&e.to_string()),
                        summary: e.summary(),
                    }
                }
            };
            copy.pending = Pending::Made(made);
        }
        // The copies kept as they are in a cluster that cannot be used now keep what the chain
        // made of them, for when it can: an outage is not a new input.
        chained.extend(
            plan.copies
                .iter()
                .filter(|copy| copy.keeps_previous)
                .map(|copy| copy.target.clone()),
        );
    }
    ctx.chain_outputs.keep_only(&gathered.key, &chained);
}

/// What the plugins are told about one copy.
pub(crate) fn plugin_context(
    key: &RuleKey,
    resource: &ApiResource,
    source: &Source,
    source_cluster: &Option<String>,
    target: &CopyTarget,
    inputs: &ReadInputs,
) -> TransformContext {
    TransformContext {
        rule: key.to_string(),
        source_api_version: resource.api_version.clone(),
        source_kind: resource.kind.clone(),
        source_namespace: source.reference.namespace.clone(),
        source_name: source.reference.name.clone(),
        source_cluster: source_cluster.clone().unwrap_or_default(),
        target_cluster: target.cluster.clone().unwrap_or_default(),
        target_namespace: target.namespace.clone(),
        target_name: target.name.clone(),
        inputs: inputs.inputs.clone(),
    }
}

/// Runs the rule's chain on one copy, or reuses what it made of the same `input` before.
async fn transform(
    ctx: &Context,
    key: &RuleKey,
    chain: &Chain,
    input: String,
    mut desired: DesiredCopy,
    plugin_ctx: TransformContext,
) -> Result<Made, ChainError> {
    if let Some(remembered) = ctx.chain_outputs.get(key, &desired.target, &input) {
        ctx.metrics.chain(true);
        return Ok(match remembered {
            Remembered::Write { object, hash } => Made::Write { object, hash },
            Remembered::Skip { plugin, reason } => Made::Skip { plugin, reason },
        });
    }
    ctx.metrics.chain(false);
    let object = std::mem::take(&mut desired.object);
    let target = desired.target.clone();
    let metrics = ctx.metrics.clone();
    let called = move |plugin: &crate::plugin::Plugin, took| metrics.plugin_called(&plugin.name, took);
    let made = made_of(ctx.plugins.run(chain, plugin_ctx, object, called).await?, desired);
    let remembered = match &made {
        Made::Write { object, hash } => Remembered::Write {
            object: object.clone(),
            hash: hash.clone(),
        },
        Made::Skip { plugin, reason } => Remembered::Skip {
            plugin: plugin.clone(),
            reason: reason.clone(),
        },
        Made::Failed { .. } => return Ok(made),
    };
    ctx.chain_outputs.put(key, target, input, remembered);
    Ok(made)
}

/// What a chain's outcome makes of the copy it ran on (`desired`, its object taken for the run).
pub(crate) fn made_of(outcome: ChainOutcome, mut desired: DesiredCopy) -> Made {
    match outcome {
        ChainOutcome::Write(object) => {
            desired.replace_object(object);
            Made::Write {
                object: Arc::new(desired.object),
                hash: desired.hash,
            }
        }
        ChainOutcome::Skip { plugin, reason } => Made::Skip { plugin, reason },
    }
}

/// Reads the places with no copy of ours in the cache (first copies, or objects in the way): one
/// GET each, several in flight.
pub(super) async fn read_places(ctx: &Context, gathered: &Gathered<'_>, plan: &Plan) -> Vec<(usize, Read)> {
    let reads = futures::stream::iter(plan.unread())
        .map(|(index, cluster)| {
            let reachable = &gathered.reachable[cluster];
            let target = plan.copies[index].target.clone();
            async move { (index, reachable, read_place(reachable, &target).await) }
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    reads
        .into_iter()
        .map(|(index, reachable, read)| {
            let read = read.map_err(|e| failure(ctx, &reachable.name, "reading the current object", &e));
            (index, read)
        })
        .collect()
}

async fn read_place(cluster: &Reachable, target: &CopyTarget) -> kube::Result<Option<Arc<LiveCopy>>> {
    live_object(
        &cluster.handle,
        &cluster.resource,
        target.namespace.as_deref(),
        &target.name,
    )
    .await
}

/// Settles the copies decided `Behind` (made from a newer version of their source than this
/// replica's cache holds) by reading each of their sources once from the source's apiserver.
pub(super) async fn settle_behind(ctx: &Context, gathered: &Gathered<'_>, plan: &mut Plan) {
    let behind = plan.behind();
    if behind.is_empty() {
        return;
    }
    let mut read: std::collections::HashMap<SourceRef, Result<Option<String>, String>> = Default::default();
    for (index, source, claimed) in behind {
        if !read.contains_key(&source) {
            let got = remote_call(
                &gathered.source_cluster,
                write::get(
                    &gathered.source_side.client,
                    &gathered.resource,
                    source.namespace.as_deref(),
                    &source.name,
                ),
            )
            .await;
            let version = got
                .map(|o| o.and_then(|o| o.metadata.resource_version))
                .map_err(|e| failure(ctx, &gathered.source_cluster, "reading the source", &e).1);
            read.insert(source.clone(), version);
        }
        let fresh = read[&source].clone();
        if let Ok(Some(version)) = &fresh {
            tracing::info!(rule = %gathered.key, source = %source.name, claimed, now = %version, "a copy says it was made from a newer source than this replica's cache holds; the source read again");
        }
        plan.settle_behind(index, fresh);
    }
}

/// The object now at a copy's place: from the copies cache if it is a copy, else from the API.
pub(super) async fn live_object(
    cluster: &ClusterHandle,
    resource: &ApiResource,
    namespace: Option<&str>,
    name: &str,
) -> kube::Result<Option<Arc<LiveCopy>>> {
    if let Some(cached) = cluster.watches.cached_copy(resource, namespace, name) {
        return Ok(Some(cached));
    }
    let fetched = remote_call(
        &cluster.name,
        write::get(&cluster.client, resource, namespace, name),
    )
    .await?;
    Ok(fetched.map(|o| Arc::new(LiveCopy::summed_up(o))))
}
