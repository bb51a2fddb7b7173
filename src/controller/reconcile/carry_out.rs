//! Carrying out the plan: the writes it decided on, then the removal of what the rule owns but no
//! longer wants. These steps write and say what came of it (the [`Outcome`]); they decide only
//! what a write's own result forces (an object that appeared in the copy's place, the flap
//! guard tripping).

use super::events::EventLog;
use super::gather::{Gathered, Reachable};
use super::make::live_object;
use super::places::{flap_key, owned_copies, place_of};
use super::requests::{WRITE_CONCURRENCY, failure, remote_call};
use crate::api::{ConflictPolicy, CopyState, CopyStatus, RuleSpec};
use crate::clusters::fence::Fence;
use crate::controller::context::Context;
use crate::controller::fleet::ClusterHandle;
use crate::controller::watches::Watches;
use crate::controller::write;
use crate::locks::lock;
use crate::replicas::shards::Shards;
use crate::sync::decide::{Decision, Write, decide};
use crate::sync::desired::CopyTarget;
use crate::sync::flap_guard::{Change, Held};
use crate::sync::live::LiveCopy;
use crate::sync::ownership::{HASH_ANNOTATION, Owner, RuleKey, SealCheck, owner_of};
use crate::sync::plan::{OwnedCopy, Plan, PlannedCopy, PlannedWrite, unwanted};
use crate::sync::seal::{Place, SealKey};
use futures::StreamExt;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::events::EventType;
use kube::{Client, ResourceExt};
use std::sync::Arc;
use std::time::Instant;

/// What the writes and removals did: every copy of the plan with what became of it, the owned
/// copies that were not removed (and why), and the events to publish.
pub(super) struct Outcome {
    pub plan: Plan,
    pub leftovers: Vec<CopyStatus>,
    pub events: EventLog,
    /// Writes attempted.
    pub written: usize,
}

/// What became of one write.
enum WriteDone {
    /// The copy was written this way over `over` (the object that was there, if any).
    Stored {
        how: Write,
        over: Option<Arc<LiveCopy>>,
        stored: Box<DynamicObject>,
    },
    /// An object appeared in the copy's place after it was read, and the rule's conflict policy
    /// leaves it alone: the decision says how (a conflict, or a skip).
    LeftAlone(Decision),
    /// The create found the copy already there as it should be (ours, written by a look whose
    /// write the copies cache has not seen yet): nothing was written.
    InSync(Arc<LiveCopy>),
}

/// A write with what it needs to be made, owned: borrowed ones trip up the `Send` proof of the
/// reconcile future.
struct Job {
    write: PlannedWrite,
    client: Client,
    resource: ApiResource,
    cluster: Option<String>,
    watches: Arc<Watches>,
}

/// Writes every copy the plan decided to write, 16 at once, and records what came of each.
pub(super) async fn write_copies(
    ctx: &Context,
    gathered: &Gathered<'_>,
    mut plan: Plan,
    now: Instant,
) -> Outcome {
    let jobs: Vec<Job> = plan
        .take_writes()
        .map(|write| {
            let cluster = &gathered.reachable[write.cluster];
            Job {
                client: cluster.handle.client.clone(),
                resource: cluster.resource.clone(),
                cluster: cluster.name.clone(),
                watches: cluster.handle.watches.clone(),
                write,
            }
        })
        .collect();
    let (key, conflict) = (&gathered.key, gathered.spec.conflict);
    let written = jobs.len();
    let shards = &ctx.shards;
    let mut results = std::pin::pin!(
        futures::stream::iter(jobs)
            .map(move |job| async move {
                let target = &job.write.desired.target;
                let in_flight = job
                    .watches
                    .writing(&job.resource, target.namespace.as_deref(), &target.name);
                let done = remote_call(&job.cluster, write_copy(&job, key, conflict, shards)).await;
                (job.write.index, done, in_flight)
            })
            .buffer_unordered(WRITE_CONCURRENCY)
    );
    // Each write is recorded as it lands: what the apiserver returned (the whole copy) is kept
    // only as long as the copies cache may lag behind it, never for the whole pass.
    let mut events = EventLog::default();
    while let Some((i, done, in_flight)) = results.next().await {
        let copy = &mut plan.copies[i];
        let cluster = copy.from.map(|(_, c)| &gathered.reachable[c]);
        let stored = match &done {
            Ok(WriteDone::Stored { stored, .. }) => stored.resource_version(),
            _ => None,
        };
        record_write(ctx, gathered, cluster, copy, done, &mut events, now);
        in_flight.landed(stored.as_deref());
    }
    Outcome {
        plan,
        leftovers: Vec::new(),
        events,
        written,
    }
}

/// Writes one copy. When its create finds an object that appeared since the place was read, the
/// copy is decided again against that object (once), as if it had been there all along: it is
/// taken over only as the rule's conflict policy says, never merged into.
async fn write_copy(
    job: &Job,
    key: &RuleKey,
    conflict: ConflictPolicy,
    shards: &Shards,
) -> kube::Result<WriteDone> {
    let (client, resource, desired) = (&job.client, &job.resource, &job.write.desired);
    let (live, how) = (&job.write.live, job.write.how);
    Fence::for_rule(shards, key).check()?;
    let there = match write::write(client, resource, desired, live.as_deref(), how).await? {
        write::Written::Stored(stored) => {
            return Ok(WriteDone::Stored {
                how,
                over: live.clone(),
                stored: Box::new(stored),
            });
        }
        write::Written::Raced(there) => Arc::new(LiveCopy::summed_up(there)),
        write::Written::Refused => return Err(write::ChangedSinceRead::error()),
    };
    // What appeared since the place was read is no copy of an older mimeo's: its seal must hold.
    match decide(
        key,
        desired,
        Some(&there),
        conflict,
        job.write.may_take_over,
        false,
    ) {
        Decision::InSync => Ok(WriteDone::InSync(there)),
        Decision::Conflict(why) => Ok(WriteDone::LeftAlone(Decision::Conflict(why))),
        Decision::Skip(why) => Ok(WriteDone::LeftAlone(Decision::Skip(why))),
        // What appeared was made from a newer source than this write's: it is not written back.
        Decision::Behind { .. } => Err(write::ChangedSinceRead::error()),
        Decision::Write(again) => {
            Fence::for_rule(shards, key).check()?;
            let written = write::write(client, resource, desired, Some(&there), again).await?;
            match written {
                write::Written::Stored(stored) => Ok(WriteDone::Stored {
                    how: again,
                    over: Some(there),
                    stored: Box::new(stored),
                }),
                write::Written::Raced(_) => Err(kube::Error::Service(
                    "objects keep appearing in the copy's place as it is written; trying again later".into(),
                )),
                write::Written::Refused => Err(write::ChangedSinceRead::error()),
            }
        }
    }
}

/// Records what came of one write on its copy: the churn it was (for the flap guard), the
/// copies cache's memory of our writes, metrics, an event, and the propagation time.
fn record_write(
    ctx: &Context,
    gathered: &Gathered<'_>,
    cluster: Option<&Reachable>,
    copy: &mut PlannedCopy,
    done: kube::Result<WriteDone>,
    events: &mut EventLog,
    now: Instant,
) {
    let (key, resource) = (&gathered.key, &gathered.resource);
    let place = place_of(&copy.target);
    let (how, over, stored) = match done {
        Ok(WriteDone::Stored { how, over, stored }) => (how, over, stored),
        Ok(WriteDone::LeftAlone(decision)) => {
            tracing::info!(rule = %key, copy = %place, "an object appeared in the copy's place before it was created; left alone");
            copy.decision = Some(decision);
            return;
        }
        Ok(WriteDone::InSync(there)) => {
            // Said, as the apiserver counts it (a create refused as AlreadyExists): a copies
            // cache that had not seen the copy decided the create.
            tracing::info!(rule = %key, copy = %place, "a create found the copy already there as it should be (the copies cache had not seen it); nothing written");
            copy.decision = Some(Decision::InSync);
            copy.live = Some(there);
            return;
        }
        Err(e) => {
            if write::ChangedSinceRead::is(&e) {
                // Not sent again as it was: the rule's next look decides from what is there then.
                ctx.metrics.copy_write_refused();
                tracing::info!(rule = %key, copy = %place, "the apiserver refused a write of the copy: it changed since the version the write was decided from");
            }
            let (state, why) = failure(ctx, &copy.target.cluster, "writing the copy", &e);
            copy.state = state;
            copy.message = Some(why);
            copy.decision = None;
            // A copy whose write did not arrive stays until a write does.
            copy.keeps_previous = state != CopyState::Failed;
            return;
        }
    };
    let flap = flap_key(key, &copy.target, resource);
    // A write of new content is a rotation, whichever way it went; the guard counts only writes
    // that undo each other.
    let content = copy.hash.as_deref().unwrap_or_default();
    let repaired = copy.hash.is_some()
        && over.as_deref().and_then(|l| l.annotations().get(HASH_ANNOTATION)) == copy.hash.as_deref();
    let change = match how {
        Write::Create => Change::Created(content),
        // The content mimeo gave the copy last, written back over the object that was there (as
        // read, or as a create found it): something changed it.
        Write::Apply | Write::Replace | Write::Recreate if repaired => Change::Repaired,
        Write::Apply | Write::Replace | Write::Recreate => Change::Written(content),
    };
    let tripped = lock(&ctx.flaps).record(&flap, change, now);
    if let Some(held) = tripped {
        let why = report_flapping(ctx, events, key, resource, &copy.target, &held, now);
        copy.state = CopyState::Flapping;
        copy.message = Some(why);
    }
    copy.live = over;
    if let Some(cluster) = cluster {
        cluster
            .handle
            .watches
            .wrote(&cluster.resource, copy.live.as_deref(), *stored);
    }
    ctx.metrics.wrote(verb(how));
    tracing::info!(rule = %key, copy = %place, verb = verb(how), "wrote a copy");
    events.note_copy(
        EventType::Normal,
        reason(how),
        format!("{} copy {place}", past(how)),
        resource,
        &copy.target,
    );
    if let Some(seen) = copy.source_version.as_deref().and_then(|rv| {
        gathered.source_side.watches.seen_at(
            resource,
            copy.source.namespace.as_deref().unwrap_or_default(),
            &copy.source.name,
            rv,
        )
    }) {
        ctx.metrics.propagated(seen.elapsed());
    }
}

/// Removes what the rule owns but no longer wants, in every cluster that can be used now; a copy
/// whose removal the flap guard holds (something else keeps putting it back), or whose removal
/// fails, stays and is listed with the reason.
pub(super) async fn remove_unwanted(
    ctx: &Context,
    gathered: &Gathered<'_>,
    outcome: &mut Outcome,
    now: Instant,
) {
    let kept = outcome.plan.kept();
    for cluster in &gathered.clusters {
        let Ok((handle, cluster_resource)) = &cluster.usable else {
            continue;
        };
        let recorded: Vec<&CopyStatus> = gathered
            .previous_copies
            .iter()
            .filter(|c| c.cluster == cluster.name)
            .collect();
        let owned = owned_copies(
            handle,
            &gathered.key,
            (cluster_resource, gathered.namespaced),
            &recorded,
            &gathered.unsealed,
            &ctx.scope,
        );
        for copy in unwanted(owned, &cluster.name, cluster_resource, &kept) {
            let left = remove_one(ctx, gathered, handle, copy, &mut outcome.events, now).await;
            outcome.leftovers.extend(left);
        }
    }
}

/// Removes one copy no longer wanted, unless the flap guard holds its removal; returns its status
/// if it stays (held, failed) or the removal tripped the guard.
async fn remove_one(
    ctx: &Context,
    gathered: &Gathered<'_>,
    handle: &ClusterHandle,
    copy: OwnedCopy,
    events: &mut EventLog,
    now: Instant,
) -> Option<CopyStatus> {
    let key = &gathered.key;
    let target = CopyTarget {
        cluster: handle.name.clone(),
        namespace: copy.namespace.clone(),
        name: copy.name.clone(),
    };
    let left = |state, message| CopyStatus {
        source: copy.source.clone(),
        cluster: handle.name.clone(),
        namespace: copy.namespace.clone(),
        name: copy.name.clone(),
        state,
        hash: None,
        message: Some(message),
        since: None,
    };
    let flap = flap_key(key, &target, &copy.resource);
    // Only a removal that is itself the fight waits on the guard: a copy the rule no longer
    // wants goes at once, held or not (a cancelled order's credentials must not stay).
    if let Some(held) = lock(&ctx.flaps).removal_held(&flap, now) {
        return Some(left(CopyState::Flapping, held.describe(now)));
    }
    let removal = remove_owned(
        handle,
        &ctx.shards,
        &ctx.seal_key,
        key,
        &copy.resource,
        (copy.namespace.as_deref(), &copy.name, copy.recorded),
        gathered.spec,
    );
    match remote_call(&handle.name, removal).await {
        Ok(Some(done)) => {
            ctx.metrics.wrote(done);
            let mut stays = None;
            if done == "delete"
                && let Some(held) = lock(&ctx.flaps).record(&flap, Change::Deleted, now)
            {
                let why = report_flapping(ctx, events, key, &copy.resource, &target, &held, now);
                stays = Some(left(CopyState::Flapping, why));
            }
            let place = place_of(&target);
            let what = if done == "delete" { "Deleted" } else { "Orphaned" };
            tracing::info!(rule = %key, copy = %place, verb = done, "removed a copy that is no longer wanted");
            events.note_copy(
                EventType::Normal,
                &format!("Copy{what}"),
                format!(
                    "{what} copy {place}: no longer wanted there (its namespace or cluster no longer \
                     matches, accepts copies or exists, or the source is gone)"
                ),
                &copy.resource,
                &target,
            );
            stays
        }
        Ok(None) => None,
        Err(e) => {
            if write::ChangedSinceRead::is(&e) {
                ctx.metrics.copy_write_refused();
            }
            let (state, why) = failure(ctx, &handle.name, "removing a copy that is no longer wanted", &e);
            Some(left(state, why))
        }
    }
}

/// Removes a copy per the rule's deletion policy (or the copy's own `mimeo.dev/deletion`) if the
/// object there is still this rule's.
/// Returns the verb done, or `None` when there was nothing of ours to remove.
/// `place` is the copy's namespace, name and whether the rule's inventory lists it. An object
/// found only by its marks whose seal is not the rule's copy's there is not the rule's.
pub(super) async fn remove_owned(
    cluster: &ClusterHandle,
    shards: &Shards,
    seal_key: &SealKey,
    key: &RuleKey,
    resource: &ApiResource,
    (namespace, name, recorded): (Option<&str>, &str, bool),
    spec: &RuleSpec,
) -> kube::Result<Option<&'static str>> {
    let Some(live) = live_object(cluster, resource, namespace, name).await? else {
        return Ok(None);
    };
    let place = Place {
        group: &resource.group,
        kind: &resource.kind,
        namespace,
        name,
    };
    let (seal, retired) = (seal_key.seal(key, &place), seal_key.retired_seals(key, &place));
    let check = match recorded {
        true => SealCheck::Trusted,
        false => SealCheck::Expect(&seal, &retired),
    };
    if owner_of(&*live, key, check) != Owner::ThisRule {
        return Ok(None);
    }
    Fence::for_rule(shards, key).check()?;
    match write::remove(&cluster.client, resource, &*live, spec.deletion).await? {
        write::Removed::Done(crate::api::DeletionPolicy::Delete) => Ok(Some("delete")),
        write::Removed::Done(crate::api::DeletionPolicy::Orphan) => Ok(Some("orphan")),
        write::Removed::Refused => Err(write::ChangedSinceRead::error()),
    }
}

/// Says that the flap guard just tripped for a copy (metric, log, Warning event); returns what
/// the copy's status says.
fn report_flapping(
    ctx: &Context,
    events: &mut EventLog,
    rule: &RuleKey,
    resource: &ApiResource,
    target: &CopyTarget,
    held: &Held,
    now: Instant,
) -> String {
    let why = held.describe(now);
    let place = place_of(target);
    ctx.metrics.copy_flapped();
    tracing::warn!(rule = %rule, copy = %place, "{why}");
    events.note_copy(
        EventType::Warning,
        "CopyFlapping",
        format!("copy {place}: {why}"),
        resource,
        target,
    );
    why
}

fn verb(how: Write) -> &'static str {
    match how {
        Write::Create => "create",
        Write::Apply => "apply",
        Write::Replace => "replace",
        Write::Recreate => "recreate",
    }
}

fn reason(how: Write) -> &'static str {
    match how {
        Write::Create => "CopyCreated",
        Write::Apply | Write::Replace | Write::Recreate => "CopyUpdated",
    }
}

fn past(how: Write) -> &'static str {
    match how {
        Write::Create => "Created",
        Write::Apply => "Updated",
        Write::Replace => "Replaced the content of",
        Write::Recreate => "Recreated",
    }
}
