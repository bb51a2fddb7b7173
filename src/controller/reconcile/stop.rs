//! Why a reconcile stops before deciding anything, and when the rule is looked at again: what
//! the gather step (and the inputs it reads) hands the record step instead of copies.

use crate::api::RuleStatus;
use crate::controller::error::Error;
use crate::controller::rule_status::Readiness;
use std::time::Duration;

/// Why a reconcile stops before deciding anything.
pub(crate) enum Stop {
    /// The rule cannot be acted on: say so in its status; its copies are left as they are.
    Refused(Box<Refusal>),
    Failed(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Failed(e)
    }
}

/// A rule that cannot be acted on now, and when to look again.
pub(crate) struct Refusal {
    pub ready: Readiness,
    /// What the Event says, when it must not quote the condition's message (a plugin's words).
    pub note: Option<String>,
    /// The status to keep, `Ready` aside.
    pub kept: Option<RuleStatus>,
    pub next: Next,
}

/// When a refused rule is looked at again.
pub(crate) enum Next {
    AwaitChange,
    /// After the rule's backoff.
    Backoff,
    After(Duration),
}

pub(super) fn refused(previous: Option<&RuleStatus>, ready: Readiness, next: Next) -> Stop {
    Stop::Refused(Box::new(Refusal {
        ready,
        note: None,
        kept: previous.cloned(),
        next,
    }))
}
