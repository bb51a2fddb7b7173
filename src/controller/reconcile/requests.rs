//! Requests a rule's pass makes to clusters: how many at once, how long one to another cluster
//! may take, and what a failed one means for a copy (and for its cluster, marked down when it
//! does not answer).

use crate::api::CopyState;
use crate::clusters;
use crate::clusters::fence::NotHeld;
use crate::controller::context::Context;
use crate::controller::error::{short_message, without_values};
use crate::controller::write::ChangedSinceRead;
use crate::error_text::with_causes;
use std::future::Future;
use std::time::Duration;

/// How soon a rule whose copies sit in a cluster that does not answer looks again on its own:
/// the cluster's prober and the kubeconfig Secret's watch wake it sooner, so this is only a
/// backstop. Failures of other kinds back off per rule (`retry`), from a second.
pub(super) const RETRY_UNREACHABLE: Duration = Duration::from_secs(60);

/// How long one request to another cluster may take.
const REMOTE_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Requests in flight at once for one rule: reads of places, and writes.
pub(super) const WRITE_CONCURRENCY: usize = 16;

/// Runs a request against a cluster; one to another cluster gets a deadline, so a cluster that
/// swallows packets cannot hold up the rule.
pub(super) async fn remote_call<T>(
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
pub(super) fn failure(
    ctx: &Context,
    cluster: &Option<String>,
    doing: &str,
    error: &kube::Error,
) -> (CopyState, String) {
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
        // Refused by the apiserver, or by the fence before it left: the cluster answered (or
        // was not asked), so it is not marked down.
        kube::Error::Service(e) if e.is::<ChangedSinceRead>() || e.is::<NotHeld>() => (
            CopyState::Failed,
            format!("RemoteCluster {name}: {doing}: {error}"),
        ),
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
