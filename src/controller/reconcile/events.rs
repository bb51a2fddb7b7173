//! The events of one reconcile: gathered as copies are written and removed, published at its
//! end under a cap, the routine ones summed up.

use crate::controller::context::Context;
use crate::controller::error::short_message;
use crate::controller::rule::RuleResource;
use crate::sync::desired::CopyTarget;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::core::ApiResource;
use kube::runtime::events::{Event, EventType};

/// Per-copy events per reconcile; the rest are summed up in one.
const EVENTS_PER_RECONCILE: usize = 10;

/// Reasons of the events that say a copy was written or removed as the rule wants.
const ROUTINE: &[&str] = &["CopyCreated", "CopyUpdated", "CopyDeleted", "CopyOrphaned"];
/// Copies a summed-up event names.
const NAMED_IN_SUM: usize = 3;

type Noted = (EventType, String, String, Option<ObjectReference>);

/// The routine events about copies summed up into one per reason (`Updated 500 copies: t-0/creds,
/// t-1/creds, t-2/creds and 497 more`); the others as they are.
fn summed_up(events: Vec<Noted>) -> Vec<Noted> {
    let mut out = Vec::new();
    let mut sums: Vec<(String, Vec<String>)> = Vec::new();
    for event in events {
        let (type_, reason, _, related) = &event;
        if *type_ != EventType::Normal || !ROUTINE.contains(&reason.as_str()) {
            out.push(event);
            continue;
        }
        let place = related
            .as_ref()
            .map(|r| match &r.namespace {
                Some(ns) => format!("{ns}/{}", r.name.as_deref().unwrap_or_default()),
                None => r.name.clone().unwrap_or_default(),
            })
            .unwrap_or_default();
        match sums.iter_mut().find(|(r, _)| r == reason) {
            Some((_, places)) => places.push(place),
            None => sums.push((reason.clone(), vec![place])),
        }
    }
    for (reason, mut places) in sums {
        places.sort();
        let n = places.len();
        let verb = match reason.as_str() {
            "CopyCreated" => "Created",
            "CopyUpdated" => "Updated",
            "CopyDeleted" => "Deleted",
            _ => "Orphaned",
        };
        let named = places[..n.min(NAMED_IN_SUM)].join(", ");
        let more = match n.saturating_sub(NAMED_IN_SUM) {
            0 => String::new(),
            rest => format!(" and {rest} more"),
        };
        let copies = if n == 1 { "copy" } else { "copies" };
        let note = format!("{verb} {n} {copies}: {named}{more}");
        out.push((EventType::Normal, reason, note, None));
    }
    out
}

/// Events gathered during one reconcile, published at its end with a cap.
#[derive(Default)]
pub(super) struct EventLog {
    events: Vec<Noted>,
}

impl EventLog {
    pub fn note(&mut self, type_: EventType, reason: &str, note: String) {
        self.events.push((type_, reason.to_owned(), note, None));
    }

    /// An event about one copy, which it names as the related object (so that events about
    /// different copies are not merged into one).
    pub fn note_copy(
        &mut self,
        type_: EventType,
        reason: &str,
        note: String,
        resource: &ApiResource,
        target: &CopyTarget,
    ) {
        let related = ObjectReference {
            api_version: Some(resource.api_version.clone()),
            kind: Some(resource.kind.clone()),
            namespace: target.namespace.clone(),
            name: Some(target.name.clone()),
            ..Default::default()
        };
        self.events.push((type_, reason.to_owned(), note, Some(related)));
    }

    /// Publishes the events, at most `EVENTS_PER_RECONCILE` and a summary; returns how many.
    ///
    /// When there are more than the cap, the routine ones (a copy written or removed, Normal)
    /// are first summed up into one event per reason, naming a few of the copies: a rotation of
    /// a source with 500 copies said `Updated copy` of ten of them and `and 490 more changes`,
    /// eleven requests one after another (half a second on a busy apiserver, holding up the
    /// rule's next look) for what one says as well; the status lists every copy.
    pub async fn publish<R: RuleResource>(self, rule: &R, ctx: &Context) -> usize {
        if !ctx.shards.holds_rule(&rule.key()) {
            return 0;
        }
        let reference = rule.object_ref(&());
        let recorder = ctx.events.recorder();
        let mut events = self.events;
        if events.len() > EVENTS_PER_RECONCILE {
            events = summed_up(events);
        }
        let total = events.len();
        // Warnings first: when there are more events than the cap, the problems must get through.
        events.sort_by_key(|(type_, ..)| *type_ != EventType::Warning);
        for (type_, reason, note, secondary) in events.into_iter().take(EVENTS_PER_RECONCILE) {
            let event = Event {
                type_,
                reason: reason.clone(),
                note: Some(short_message(&note)),
                action: reason,
                secondary,
            };
            if let Err(e) = recorder.publish(&event, &reference).await {
                tracing::debug!(error = %e, "publishing an event failed");
            }
        }
        if total > EVENTS_PER_RECONCILE {
            let event = Event {
                type_: EventType::Normal,
                reason: "MoreChanges".into(),
                note: Some(format!(
                    "and {} more changes to copies; see status.problems",
                    total - EVENTS_PER_RECONCILE
                )),
                action: "Reconcile".into(),
                secondary: None,
            };
            let _ = recorder.publish(&event, &reference).await;
        }
        total.min(EVENTS_PER_RECONCILE + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn about(reason: &str, type_: EventType, ns: &str) -> Noted {
        let related = ObjectReference {
            namespace: Some(ns.into()),
            name: Some("creds".into()),
            ..Default::default()
        };
        (type_, reason.into(), format!("copy {ns}/creds"), Some(related))
    }

    #[test]
    fn routine_events_are_summed_up_and_problems_kept() {
        let mut events: Vec<Noted> = (0..12)
            .map(|i| about("CopyUpdated", EventType::Normal, &format!("t-{i:02}")))
            .collect();
        events.push(about("CopyCreated", EventType::Normal, "new"));
        events.push(about("Conflict", EventType::Warning, "taken"));
        let out = summed_up(events);
        let said: Vec<(&str, &str, bool)> = out
            .iter()
            .map(|(_, reason, note, related)| (reason.as_str(), note.as_str(), related.is_some()))
            .collect();
        assert_eq!(
            said,
            [
                ("Conflict", "copy taken/creds", true),
                (
                    "CopyUpdated",
                    "Updated 12 copies: t-00/creds, t-01/creds, t-02/creds and 9 more",
                    false
                ),
                ("CopyCreated", "Created 1 copy: new/creds", false),
            ]
        );
    }
}
