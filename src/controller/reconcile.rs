//! Reconciling one rule: a pipeline whose middle is pure (`sync::plan`) and whose ends alone
//! touch clusters. Each step takes what the one before produced:
//!
//! ```text
//! gather   rule, chain, clusters, sources, namespaces, caches    -> Gathered  reads
//! place    every (source, cluster, place): scope, consent          -> Plan      pure
//! make     the namespaces to create, the transform chain           -> Plan      writes namespaces, runs plugins
//! decide   each copy against its place: ownership, conflict, hash  -> Plan      pure, after reading the
//!                                                                               places no cache holds
//!                                                                               that held a conflict
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
mod record;
pub(crate) mod stop;

use super::Context;
use super::error::{Error, short_message, without_values};
use super::fleet::ClusterHandle;
use super::rule::RuleResource;
use crate::api::{CopyState, CopyStatus};
use crate::clusters;
use crate::clusters::fence::{self, Fence};
use crate::error_text::with_causes;
use crate::locks::lock;
use crate::sync::desired::CopyTarget;
use crate::sync::ownership::{FINALIZER, RuleKey};
use crate::sync::plan::{OwnedCopy, PlaceKey, Plan, owned, place};
use crate::sync::scope::Scope;
use kube::core::ApiResource;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Error as FinalizerError, Event as FinalizerEvent, finalizer};
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stop::Stop;

/// How soon a rule whose copies sit in a cluster that does not answer looks again on its own:
/// the cluster's prober and the kubeconfig Secret's watch wake it sooner, so this is only a
/// backstop. Failures of other kinds back off per rule (`retry`), from a second.
const RETRY_UNREACHABLE: Duration = Duration::from_secs(60);
/// How long one request to another cluster may take.
const REMOTE_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests in flight at once for one rule: reads of places, and writes.
const WRITE_CONCURRENCY: usize = 16;
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
    ctx.in_flight.send_modify(|running| *running += 1);
    let _done = InFlight(&ctx);
    let started = Instant::now();
    let api = rule.api(ctx.client.clone());
    // Every write of the pass, to any cluster, is checked against the rule's shard as it leaves.
    let fence = Fence::for_rule(&ctx.shards, &key);
    let result = fence::under(
        fence,
        finalizer(&api, FINALIZER, rule, |event| async {
            match event {
                FinalizerEvent::Apply(rule) => apply(rule, &ctx).await,
                FinalizerEvent::Cleanup(rule) => cleanup::cleanup(rule, &ctx).await,
            }
        }),
    )
    .await;
    ctx.metrics.reconciled(R::KIND, started.elapsed());
    match result {
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

/// Lets go of a rule whose shard this replica does not hold now: its watches and clusters, its
/// last status, its backoff and its metrics. What its chain made is kept a while
/// (`ChainOutputs::let_go`): a hold that lapsed is renewed within seconds, and the renewal looks
/// at every rule again, which would otherwise run every chain of the rules let go meanwhile
/// once more for every copy.
fn let_go(ctx: &Context, key: &RuleKey) {
    ctx.fleet.forget(key);
    ctx.next_to.forget(key);
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
fn forget(ctx: &Context, key: &RuleKey) {
    let_go(ctx, key);
    ctx.chain_outputs.forget(key);
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

/// Runs a request against a cluster; one to another cluster gets a deadline, so a cluster that
/// swallows packets cannot hold up the rule.
async fn remote_call<T>(
    cluster: &Option<String>,
    request: impl Future<Output = kube::Result<T>>,
) -> kube::Result<T> {
    if cluster.is_none() {
        return request.await;
    }
    match tokio::time::timeout(REMOTE_REQUEST_TIMEOUT, request).await {
        Ok(result) => result,
        Err(_) => Err(kube::Error::Service(
            format!("no answer within {} s", REMOTE_REQUEST_TIMEOUT.as_secs()).into(),
        )),
    }
}

/// The state and message for a failed request. In another cluster, rejected credentials give
/// `Unauthorized` and a request that did not get through gives `Unreachable` (and marks the
/// cluster down, so that its prober takes over).
fn failure(ctx: &Context, cluster: &Option<String>, doing: &str, error: &kube::Error) -> (CopyState, String) {
    let (state, message) = failure_as_said(ctx, cluster, doing, error);
    (state, short_message(&without_values(&message)))
}

/// [`failure`] before its message is cut and cleared of values.
fn failure_as_said(
    ctx: &Context,
    cluster: &Option<String>,
    doing: &str,
    error: &kube::Error,
) -> (CopyState, String) {
    let Some(name) = cluster else {
        return (CopyState::Failed, format!("{doing}: {error}"));
    };
    match error {
        kube::Error::Api(e) if e.code == 401 || e.code == 403 => {
            let problem = clusters::classify(error);
            (
                CopyState::Unauthorized,
                format!("RemoteCluster {name}: {doing}: {}", problem.message),
            )
        }
        kube::Error::Api(_) => (
            CopyState::Failed,
            format!("RemoteCluster {name}: {doing}: {error}"),
        ),
        _ => {
            let error = with_causes(error);
            ctx.fleet.report_unreachable(name, &error);
            (
                CopyState::Unreachable,
                format!("RemoteCluster {name} does not answer: {doing}: {error}"),
            )
        }
    }
}

/// A copy as the flap guard names it: its rule, its place, and its resource (group and plural,
/// not the version).
pub(super) type FlapKey = (RuleKey, CopyTarget, String);

fn flap_key(rule: &RuleKey, target: &CopyTarget, resource: &ApiResource) -> FlapKey {
    (
        rule.clone(),
        target.clone(),
        format!("{}/{}", resource.group, resource.plural),
    )
}

/// What `key` owns in `cluster`: its cached copies there and the `known` ones, by identity
/// (`plan::owned`); those in `unsealed` places were made before seals. Copies in namespaces
/// outside `scope` are not among them.
fn owned_copies(
    cluster: &ClusterHandle,
    key: &RuleKey,
    (resource, namespaced): (&ApiResource, bool),
    known: &[&CopyStatus],
    unsealed: &BTreeSet<PlaceKey>,
    scope: &Scope,
) -> Vec<OwnedCopy> {
    let in_scope =
        |ns: &Option<String>| cluster.name.is_some() || ns.as_deref().is_none_or(|ns| scope.contains(ns));
    let trusted = |ns: &Option<String>, name: &str| {
        unsealed.contains(&(cluster.name.clone(), ns.clone(), name.to_owned()))
    };
    owned(
        cluster.watches.copies_of(key),
        known,
        resource,
        namespaced,
        trusted,
        in_scope,
    )
}

/// Where a copy is, for messages: `namespace/name`, prefixed with `cluster:` in another cluster.
fn place_of(target: &CopyTarget) -> String {
    let local = match &target.namespace {
        Some(ns) => format!("{ns}/{}", target.name),
        None => target.name.clone(),
    };
    match &target.cluster {
        Some(cluster) => format!("{cluster}:{local}"),
        None => local,
    }
}
