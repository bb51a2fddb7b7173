//! The objects each `forEach` target of a rule is made once for: its cluster reached (this one,
//! or a `RemoteCluster`), its kind looked up there, followed by the shared watch of that kind, and
//! matched against the target's selector. While any of them cannot be read, the rule waits with
//! its copies left as they are: an onboarding cluster that does not answer must not read as every
//! tenant having cancelled its order.

use super::stop::{Next, Stop, refused};
use crate::api::{ForEach, RuleSpec, RuleStatus, Target};
use crate::controller::context::Context;
use crate::controller::rule_status::Readiness;
use crate::sync::for_each::{Orders, expand, kind_of};
use crate::sync::ownership::RuleKey;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How soon a rule whose orders cannot be read is looked at again (a watch that lists wakes it
/// sooner).
const RETRY: Duration = Duration::from_secs(30);

/// The rule's targets with each `forEach` target made once per object it found, and the
/// clusters those objects are read in.
pub(super) async fn targets(
    ctx: &Context,
    key: &RuleKey,
    spec: &RuleSpec,
    previous: Option<&RuleStatus>,
) -> Result<(Vec<Target>, BTreeSet<String>), Stop> {
    let (orders, clusters) = find(ctx, key, spec, previous).await?;
    let (targets, left_out) = expand(&spec.targets, &orders);
    if !left_out.is_empty() {
        tracing::warn!(rule = %key, objects = ?left_out, "forEach objects left out: what they fill in is no valid label value, namespace or name");
    }
    Ok((targets, clusters))
}

/// The objects of every `forEach` of the rule, and the clusters they are read in.
async fn find(
    ctx: &Context,
    key: &RuleKey,
    spec: &RuleSpec,
    previous: Option<&RuleStatus>,
) -> Result<(Orders, BTreeSet<String>), Stop> {
    let mut by_cluster: BTreeMap<Option<String>, Vec<&ForEach>> = BTreeMap::new();
    for for_each in spec.targets.iter().filter_map(|t| t.for_each.as_ref()) {
        let cluster = for_each.cluster.clone().filter(|c| !c.is_empty());
        let listed = by_cluster.entry(cluster).or_default();
        if !listed.contains(&for_each) {
            listed.push(for_each);
        }
    }
    ctx.orders
        .forget_except(key, &by_cluster.keys().cloned().collect());
    let unavailable = |message: String| {
        let ready = Readiness::not_ready(
            "ForEachUnavailable",
            format!(
                "{message}; the copies of every forEach target are left as they are until it can be read"
            ),
        );
        refused(previous, ready, Next::After(RETRY))
    };
    let mut orders = Orders::default();
    for (cluster, for_eaches) in &by_cluster {
        let handle = match cluster {
            None => ctx.fleet.local().clone(),
            Some(name) => ctx.fleet.cluster(key, name, false).await.map_err(|problem| {
                unavailable(format!("forEach in RemoteCluster {name}: {}", problem.message))
            })?,
        };
        let mut wanted = Vec::new();
        for for_each in for_eaches {
            let kind = kind_of(for_each);
            let place = cluster
                .as_deref()
                .map_or("this cluster".to_owned(), |c| format!("RemoteCluster {c}"));
            match handle.watches.resolve(&kind).await {
                Ok(Some((resource, true))) => wanted.push((resource, &for_each.selector)),
                Ok(Some((_, false))) => {
                    return Err(unavailable(format!(
                        "forEach {kind}: the kind is cluster-scoped in {place}: name a namespaced kind"
                    )));
                }
                Ok(None) => {
                    return Err(unavailable(format!(
                        "forEach {kind}: {place} does not serve it (no such kind, or its CustomResourceDefinition is not installed)"
                    )));
                }
                Err(e) => {
                    return Err(unavailable(format!(
                        "forEach {kind}: looking it up in {place}: {e}"
                    )));
                }
            }
        }
        let found = ctx.orders.of(&handle).follow(key, &wanted).await;
        for (for_each, result) in for_eaches.iter().zip(found) {
            match result {
                Ok(objects) => orders.insert((*for_each).clone(), objects),
                Err(why) => {
                    return Err(unavailable(format!(
                        "forEach {}: its objects cannot be read ({why}): mimeo needs get, list and watch on the kind there",
                        kind_of(for_each)
                    )));
                }
            }
        }
    }
    let clusters = by_cluster.into_keys().flatten().collect();
    Ok((orders, clusters))
}
