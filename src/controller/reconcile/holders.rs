//! The namespaces each `nextTo` target of a rule selects: its kind looked up in this cluster,
//! followed by the shared watch of that kind, and matched against the target's selector.

use crate::api::{CopyStatus, NextTo, RuleSpec};
use crate::controller::context::Context;
use crate::sync::next_to::{Holders, cluster_scoped, kept_namespaces, kind_of, not_served, unreadable};
use crate::sync::ownership::RuleKey;
use crate::sync::rule_problem::RuleProblem;

/// The namespaces of every `nextTo` of the rule, and the first problem met on the way. A
/// `nextTo` that cannot be followed now keeps the namespaces its copies are in.
pub(super) async fn find(
    ctx: &Context,
    key: &RuleKey,
    spec: &RuleSpec,
    previous: &[CopyStatus],
) -> (Holders, Option<RuleProblem>) {
    let mut next_tos: Vec<&NextTo> = Vec::new();
    for next_to in spec.targets.iter().filter_map(|t| t.next_to.as_ref()) {
        if !next_tos.contains(&next_to) {
            next_tos.push(next_to);
        }
    }
    let mut holders = Holders::default();
    if next_tos.is_empty() {
        ctx.next_to.forget(key);
        return (holders, None);
    }
    let mut problem = None;
    let mut fail = |holders: &mut Holders, next_to: &NextTo, why: RuleProblem| {
        holders.insert(next_to.clone(), kept_namespaces(next_to, &spec.targets, previous));
        problem.get_or_insert(why);
    };
    let local = ctx.fleet.local();
    let mut wanted = Vec::new();
    for next_to in next_tos {
        match local.watches.resolve(&kind_of(next_to)).await {
            Ok(Some((resource, true))) => wanted.push((resource, next_to)),
            Ok(Some((_, false))) => fail(&mut holders, next_to, cluster_scoped(next_to)),
            Ok(None) => fail(&mut holders, next_to, not_served(next_to)),
            Err(e) => fail(&mut holders, next_to, unreadable(next_to, &e.to_string())),
        }
    }
    let selectors: Vec<_> = wanted.iter().map(|(r, n)| (r.clone(), &n.selector)).collect();
    let found = ctx.next_to.follow(key, &selectors).await;
    for ((_, next_to), result) in wanted.iter().zip(found) {
        match result {
            Ok(objects) => holders.insert(
                (*next_to).clone(),
                objects.into_iter().map(|(ns, _)| ns).collect(),
            ),
            Err(why) => fail(&mut holders, next_to, unreadable(next_to, &why)),
        }
    }
    (holders, problem)
}
