//! Reconciling one rule: a pipeline whose middle is pure (`sync::plan`) and whose ends alone
//! touch clusters. Each step takes what the one before produced:
//!
//! ```text
//! gather   rule, chain, clusters, sources, namespaces, caches    -> Gathered  reads
//! place    every (source, cluster, place): scope, consent          -> Plan      pure
//! make     the namespaces to create, the transform chain           -> Plan      writes namespaces, runs plugins
//! decide   each copy against its place: ownership, conflict, hash  -> Plan      pure, after reading the
//!                                                                               places no cache holds
//!                                                                               that held a conflict,
//!                                                                               and the sources of
//!                                                                               copies made from a
//!                                                                               newer one
//! write    the decided writes, but those the flap guard holds      -> Outcome   writes
//! remove   owned copies no longer wanted                           -> Outcome   writes
//! record   status, events, metrics, when to look again             -> Action    writes status and events
//! ```
//!
//! A rule that cannot be acted on stops in `gather` with a `Refusal`, which `record` reports.
//! From `place` to `remove` a rule without plugins holds one of a few turns (`WRITE_TURNS`).

mod carry_out;
mod cleanup;
mod events;
pub(crate) mod gather;
mod holders;
pub(crate) mod inputs;
pub(crate) mod make;
mod operation;
mod orders;
pub(crate) mod places;
mod record;
mod requests;
pub(crate) mod stop;

use super::context::Context;
use super::error::Error;
use super::rule::RuleResource;
use crate::clusters::fence::{self, Fence};
use crate::locks::lock;
use crate::sync::operation::{Operation, requested};
use crate::sync::ownership::FINALIZER;
use crate::sync::plan::{Plan, place};
use cleanup::let_go;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Error as FinalizerError, Event as FinalizerEvent, finalizer};
pub(crate) use operation::clear_reconcile;
use places::flap_key;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stop::Stop;

/// Rules without plugins that make and write their copies at once, in one replica. Each holds
/// its desired copies until they are written; with every rule at once, 1,000 rules of 100 copies
/// held all 100,000 while their writes waited on the apiserver (a peak of 1.1 GiB). At 100,000
/// copies 32 and 64 turns held the same (450 and 455 MiB settled), and 64 wrote faster (944
/// copies/s against 718-835): a turn covers a rule's planning too, not only its writes, and
/// leaves room for rules whose other cluster is slow (docs/benchmarks.md).
pub(super) const WRITE_TURNS: usize = 64;

/// The entry point the controller calls for every rule that needs a look.
pub async fn reconcile<R: RuleResource>(rule: Arc<R>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = rule.key();
    if !ctx.shards.holds_rule(&key) {
        // Another replica holds the rule's shard: nothing of it is watched or written here.
        let_go(&ctx, &key);
        return Ok(Action::await_change());
    }
    let operation = requested(rule.meta().annotations.as_ref());
    if operation == Some(Operation::Ignore) {
        return operation::ignore(&*rule, &ctx).await;
    }
    if rule.rule_spec().suspend && rule.meta().deletion_timestamp.is_none() {
        // Forgotten here as under `ignore`: changing the rule wakes it.
        cleanup::let_go(&ctx, &key);
        return record::suspended(&*rule, &ctx).await;
    }
    ctx.in_flight.send_modify(|running| *running += 1);
    let _done = InFlight(&ctx);
    let started = Instant::now();
    let api = rule.api(ctx.client.clone());
    // Every write of the pass, to any cluster, is checked against the rule's shard as it leaves.
    let fence = Fence::for_rule(&ctx.shards, &key);
    let result = fence::under(
        fence,
        finalizer(&api, FINALIZER, rule.clone(), |event| async {
            match event {
                FinalizerEvent::Apply(rule) => apply(rule, &ctx).await,
                FinalizerEvent::Cleanup(rule) => cleanup::cleanup(rule, &ctx).await,
            }
        }),
    )
    .await;
    ctx.metrics.reconciled(R::KIND, started.elapsed());
    match result {
        Ok(action) if operation == Some(Operation::Reconcile) => {
            operation::reconciled(&*rule, &ctx).await?;
            Ok(action)
        }
        Ok(action) => Ok(action),
        // The rule's own error, so that metrics and retries see its real cause.
        Err(FinalizerError::ApplyFailed(e) | FinalizerError::CleanupFailed(e)) => Err(e),
        // The rule was already gone when its finalizer was to be removed: the clean-up is done.
        Err(FinalizerError::RemoveFinalizer(kube::Error::Api(e))) if e.code == 404 => {
            Ok(Action::await_change())
        }
        Err(e) => Err(Error::Finalizer(Box::new(e))),
    }
}

/// Counts a reconcile out when it ends, however it ends (a cancelled future included).
struct InFlight<'a>(&'a Context);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.send_modify(|running| *running -= 1);
    }
}

/// Decides when a rule whose reconcile failed is tried again.
pub fn error_policy<R: RuleResource>(rule: Arc<R>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_failed(R::KIND, error.metric_label());
    tracing::warn!(rule = %rule.key(), error = %error, "reconcile failed");
    let asked = match error {
        Error::Kube(e) => super::retry::asked_for(e),
        _ => None,
    };
    Action::requeue(ctx.retries.failed(&rule.key(), asked))
}

/// The pipeline, step by step (see the module's doc).
async fn apply<R: RuleResource>(rule: Arc<R>, ctx: &Context) -> Result<Action, Error> {
    let gathered = match gather::gather(&*rule, ctx).await {
        Ok(gathered) => gathered,
        Err(Stop::Refused(refusal)) => return record::refusal(&*rule, ctx, *refusal).await,
        Err(Stop::Failed(e)) => return Err(e),
    };
    // Taken before the copies are made, so that a rule waiting holds none. A rule with plugins
    // makes its copies at the plugins' pace (`--plugin-concurrency`) and takes no turn: slow
    // plugins must not hold the turns of rules without any.
    let mut steps = Steps::start();
    let turn = match gathered.chain.chain.is_empty() {
        true => Some(ctx.write_turns.turn(gathered.key.namespace.as_deref()).await),
        false => None,
    };
    steps.done("turn");
    let (key, conflict) = (&gathered.key, gathered.spec.conflict);
    let mut plan = place(&gathered.wants(ctx));
    steps.done("place");
    make::create_namespaces(ctx, &gathered, &mut plan).await;
    make::run_chains(ctx, &gathered, &mut plan).await;
    steps.done("make");
    plan.decide(&gathered.sources, key, conflict, gathered.reachable.as_slice());
    plan.assume_unread_empty(&gathered.previous_copies, key, conflict);
    steps.done("decide");
    let reads = make::read_places(ctx, &gathered, &plan).await;
    plan.decide_reads(reads, key, conflict);
    make::settle_behind(ctx, &gathered, &mut plan).await;
    steps.done("reads");
    let now = Instant::now();
    hold_flapping(ctx, &gathered, &mut plan, now);
    let mut outcome = carry_out::write_copies(ctx, &gathered, plan, now).await;
    steps.done("write");
    let written = outcome.written;
    outcome.plan.settle_conflicts();
    carry_out::remove_unwanted(ctx, &gathered, &mut outcome, now).await;
    steps.done("remove");
    drop(turn);
    let action = record::record(&*rule, ctx, &gathered, outcome).await;
    steps.done("record");
    tracing::debug!(rule = %key, written, steps = %steps, "reconciled");
    action
}

/// How long each step of one reconcile took, for the debug log: where a slow rotation spends
/// its time.
struct Steps {
    last: Instant,
    took: Vec<(&'static str, Duration)>,
}

impl Steps {
    fn start() -> Self {
        Steps {
            last: Instant::now(),
            took: Vec::new(),
        }
    }

    fn done(&mut self, step: &'static str) {
        let now = Instant::now();
        self.took.push((step, now - self.last));
        self.last = now;
    }
}

impl std::fmt::Display for Steps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (step, took)) in self.took.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            write!(f, "{sep}{step}={:.1}ms", took.as_secs_f64() * 1000.0)?;
        }
        Ok(())
    }
}

/// Leaves alone the copies to be written that the flap guard holds.
fn hold_flapping(ctx: &Context, gathered: &gather::Gathered<'_>, plan: &mut Plan, now: Instant) {
    let mut flaps = lock(&ctx.flaps);
    plan.hold_flapping(|target| {
        let held = flaps.held(&flap_key(&gathered.key, target, &gathered.resource), now)?;
        Some(held.describe(now))
    });
}
