//! The conditions GitOps tools read beside `Ready`. kstatus (the library behind Flux's health
//! checks, kpt and `kubectl`-style waiters; Argo CD's checks read the same conditions) takes an
//! object with `Stalled=True` as failed and one with `Reconciling=True` as in progress. With
//! `Ready=False` alone, a rule that can never succeed reads as "in progress" until a deploy times
//! out.
//!
//! So beside every `Ready=False` mimeo sets one of the two: `Stalled` where only a change by
//! someone lets it go on (the rule's spec, a namespace's consent, credentials, an object in the
//! way, the installation's settings), `Reconciling` where it goes on by itself (a source or
//! namespace still to come, a cluster that does not answer yet, a write to retry). A rule held
//! back on purpose (`spec.suspend`, `openmcp.cloud/operation: ignore`) gets neither: it is at
//! rest as its owner asked.

use crate::api::CopyState;

pub const RECONCILING: &str = "Reconciling";
pub const STALLED: &str = "Stalled";

/// Where an object stands, as kstatus reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Ready, or at rest on purpose: neither condition.
    Done,
    Reconciling,
    Stalled,
}

impl Progress {
    /// The condition that says so, if any.
    pub fn condition_type(self) -> Option<&'static str> {
        match self {
            Progress::Done => None,
            Progress::Reconciling => Some(RECONCILING),
            Progress::Stalled => Some(STALLED),
        }
    }
}

/// Reasons of `Ready=False` that wait for someone to change something, other than those of a
/// copy's state and those named `Invalid…`, `…Invalid` or `…NotAllowed…`.
const WAITS_FOR_A_CHANGE: &[&str] = &[
    // Rules.
    "NextToKindClusterScoped",
    "SourceNotShared",
    "PluginDigestRequired",
    // RemoteClusters and inventories.
    "AccessDenied",
    "NameTaken",
    "UnsupportedCertVersion",
    "ProfileUnusable",
    "ProviderMissing",
];

/// Reasons of `Ready=False` that are a choice, not a fault.
const AT_REST: &[&str] = &["Suspended", "Ignored"];

/// Where an object with this `Ready` status and reason stands.
pub fn progress(ready: bool, reason: &str) -> Progress {
    if ready || AT_REST.contains(&reason) {
        return Progress::Done;
    }
    if let Some(state) = CopyState::ALL.iter().find(|s| format!("{s:?}") == reason) {
        return of_copy_state(*state);
    }
    let needs_a_change = reason.starts_with("Invalid")
        || reason.ends_with("Invalid")
        || reason.contains("NotAllowed")
        || WAITS_FOR_A_CHANGE.contains(&reason);
    match needs_a_change {
        true => Progress::Stalled,
        false => Progress::Reconciling,
    }
}

/// A rule's reason is its worst copy's state: whether that copy gets written without anyone
/// changing anything.
fn of_copy_state(state: CopyState) -> Progress {
    match state {
        CopyState::Synced | CopyState::Skipped => Progress::Done,
        // An object in the way, a namespace that does not consent, a copy mimeo never writes,
        // something that keeps changing it back, credentials or a cluster to fix, a plugin that
        // fails on this input, a namespace outside the installation's reach.
        CopyState::Conflict
        | CopyState::NotAccepted
        | CopyState::Refused
        | CopyState::Flapping
        | CopyState::Unauthorized
        | CopyState::ClusterMissing
        | CopyState::DuplicateCluster
        | CopyState::NotWatched
        | CopyState::PluginFailed => Progress::Stalled,
        // Written once the namespace, the cluster or the kind is there, or at the next try.
        CopyState::NamespaceMissing
        | CopyState::Unreachable
        | CopyState::KindNotServed
        | CopyState::Failed => Progress::Reconciling,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_or_at_rest_is_done() {
        assert_eq!(progress(true, "Synced"), Progress::Done);
        assert_eq!(progress(true, "Connected"), Progress::Done);
        assert_eq!(progress(false, "Suspended"), Progress::Done);
        assert_eq!(progress(false, "Ignored"), Progress::Done);
    }

    #[test]
    fn what_someone_must_change_stalls_and_what_comes_by_itself_reconciles() {
        for reason in [
            "Conflict",
            "NotAccepted",
            "Flapping",
            "Unauthorized",
            "KindNotAllowed",
            "NotAllowedInSyncRule",
            "InvalidTarget",
            "InvalidKubeconfig",
            "PluginPullSecretInvalid",
            "PluginRegistryNotAllowed",
            "ExecNotAllowed",
            "AccessDenied",
            "SourceNotShared",
        ] {
            assert_eq!(progress(false, reason), Progress::Stalled, "{reason}");
        }
        for reason in [
            "SourceNotFound",
            "NamespaceMissing",
            "Unreachable",
            "KindNotServed",
            "Failed",
            "RegistryUnreachable",
            "NoAccessYet",
            "AccessPending",
            "SecretNotFound",
            "NextToUnavailable",
        ] {
            assert_eq!(progress(false, reason), Progress::Reconciling, "{reason}");
        }
    }

    #[test]
    fn every_copy_state_is_read_by_its_name() {
        for state in CopyState::ALL {
            assert_eq!(progress(false, &format!("{state:?}")), of_copy_state(state));
        }
    }
}
