//! Leader election with a `coordination.k8s.io/v1` Lease, so that of several replicas only one
//! writes.
//!
//! The holder renews the Lease every third of its duration. A candidate takes it over once it
//! has seen the Lease unchanged for a whole duration, timed by its own monotonic clock from when
//! it saw the last change, never by comparing the holder's `renewTime` with its own wall clock:
//! with clocks apart by more than the duration, that would let a standby take over from a live
//! leader, and two replicas would write. A standby looks every second and wakes when the Lease
//! would expire. A holder that cannot renew within two thirds
//! of the duration (the apiserver refused, or someone else took the Lease) gives leadership up at
//! once, before another candidate may take over: two writers never overlap. Every write to the
//! Lease is conditional on the version read, so two candidates cannot both win.
//!
//! The decision is pure ([`decide`]); [`Elector`] does the I/O.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use std::time::Duration;

/// Why the election could not go on.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("reading or writing Lease {namespace}/{name}: {source}")]
    Kube {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// What to do with the Lease, given what it says now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// There is no Lease: create it, held by us.
    Create,
    /// We hold it: renew it.
    Renew,
    /// Its holder let it expire (or released it): take it over.
    TakeOver,
    /// Someone else holds it, for this much longer at most.
    Wait(Duration),
}

/// What a candidate last saw of a Lease someone else holds: its version, and when (on this
/// replica's monotonic clock) that version was first seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub version: String,
    pub since: std::time::Instant,
}

/// Decides what a candidate named `me` does with `lease` (its spec and resourceVersion) at
/// `now`, given what it `observed` before, which it updates.
pub fn decide(
    lease: Option<(&LeaseSpec, &str)>,
    me: &str,
    observed: &mut Option<Observed>,
    now: std::time::Instant,
    duration: Duration,
) -> Decision {
    let Some((spec, version)) = lease else {
        *observed = None;
        return Decision::Create;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder == me {
        return Decision::Renew;
    }
    if holder.is_empty() {
        return Decision::TakeOver;
    }
    let lasts = spec
        .lease_duration_seconds
        .map(|s| Duration::from_secs(s.max(1) as u64))
        .unwrap_or(duration);
    let since = match observed {
        Some(seen) if seen.version == version => seen.since,
        _ => {
            *observed = Some(Observed {
                version: version.to_owned(),
                since: now,
            });
            now
        }
    };
    match lasts.checked_sub(now.duration_since(since)) {
        Some(left) if !left.is_zero() => Decision::Wait(left),
        _ => Decision::TakeOver,
    }
}

/// How often a standby looks at the Lease: a renewal is seen at most this late, so a takeover
/// comes at most this much after the Lease's duration from the last renewal.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// How often the holder renews, and a candidate looks again.
pub fn renew_period(duration: Duration) -> Duration {
    (duration / 3).max(Duration::from_millis(500))
}

/// How long the holder may go without a successful renewal before it gives up leadership: well
/// inside the duration, so it stops before anyone may take over.
pub fn renew_deadline(duration: Duration) -> Duration {
    duration * 2 / 3
}

/// One candidate for one Lease.
pub struct Elector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    duration: Duration,
    observed: std::sync::Mutex<Option<Observed>>,
}

impl Elector {
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str, duration: Duration) -> Self {
        Elector {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            duration,
            observed: std::sync::Mutex::new(None),
        }
    }

    fn error(&self, source: kube::Error) -> LeaderError {
        LeaderError::Kube {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }

    /// Waits until this candidate holds the Lease.
    pub async fn acquire(&self) -> Result<(), LeaderError> {
        loop {
            let wait = match self.try_hold().await {
                Ok(Ok(())) => return Ok(()),
                // Look again at least every second, and when the Lease would expire.
                Ok(Err(left)) => left.min(LOOK_EVERY),
                // Conflicts (another candidate wrote first) and passing apiserver trouble: retry.
                Err(e) => {
                    tracing::debug!(error = %e, "leader election attempt failed; retrying");
                    LOOK_EVERY
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Renews the Lease until leadership is lost; returns when it is, having held it at most
    /// [`renew_deadline`] past the last successful renewal.
    pub async fn hold(&self) -> LeaderError {
        let mut renewed = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(renew_period(self.duration)).await;
            let attempt = tokio::time::timeout(
                renew_deadline(self.duration).saturating_sub(renewed.elapsed()),
                self.try_hold(),
            )
            .await;
            match attempt {
                Ok(Ok(Ok(()))) => renewed = tokio::time::Instant::now(),
                Ok(Ok(Err(_))) => {
                    return self.error(kube::Error::Service("another candidate holds the Lease".into()));
                }
                Ok(Err(e)) if renewed.elapsed() < renew_deadline(self.duration) => {
                    tracing::warn!(error = %e, "renewing the leader Lease failed; retrying");
                }
                Ok(Err(e)) => return e,
                Err(_) => {
                    return self.error(kube::Error::Service(
                        "the Lease could not be renewed within the renew deadline".into(),
                    ));
                }
            }
        }
    }

    /// Gives the Lease up (on a clean shutdown), so that a standby takes over at once.
    pub async fn release(&self) -> Result<(), LeaderError> {
        let Some(mut lease) = self.api.get_opt(&self.name).await.map_err(|e| self.error(e))? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// Whether the Lease is free to take: missing, released, seen unchanged for a whole duration,
    /// or still naming this candidate (which let it go after a failed renewal: no one else can
    /// have taken it). Writes nothing.
    pub(crate) async fn is_free(&self) -> Result<bool, LeaderError> {
        let current = self.api.get_opt(&self.name).await.map_err(|e| self.error(e))?;
        let version = current
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone())
            .unwrap_or_default();
        let decision = decide(
            current
                .as_ref()
                .and_then(|l| l.spec.as_ref())
                .map(|s| (s, version.as_str())),
            &self.identity,
            &mut self.observed.lock().unwrap_or_else(|p| p.into_inner()),
            std::time::Instant::now(),
            self.duration,
        );
        Ok(matches!(
            decision,
            Decision::Create | Decision::TakeOver | Decision::Renew
        ))
    }

    /// One round: reads the Lease and creates, renews or takes it over if [`decide`] says so.
    /// `Ok(Ok(()))` when this candidate holds it afterwards, `Ok(Err(left))` when another holds
    /// it for at most `left` more.
    pub(crate) async fn try_hold(&self) -> Result<Result<(), Duration>, LeaderError> {
        let current = self.api.get_opt(&self.name).await.map_err(|e| self.error(e))?;
        let now = Timestamp::now();
        let version = current
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone())
            .unwrap_or_default();
        let decision = decide(
            current
                .as_ref()
                .and_then(|l| l.spec.as_ref())
                .map(|s| (s, version.as_str())),
            &self.identity,
            &mut self.observed.lock().unwrap_or_else(|p| p.into_inner()),
            std::time::Instant::now(),
            self.duration,
        );
        let seconds = self.duration.as_secs().max(1) as i32;
        match (decision, current) {
            (Decision::Wait(left), _) => Ok(Err(left)),
            (Decision::Create, _) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        namespace: Some(self.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        lease_duration_seconds: Some(seconds),
                        acquire_time: Some(MicroTime(now)),
                        renew_time: Some(MicroTime(now)),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                self.api
                    .create(&PostParams::default(), &lease)
                    .await
                    .map_err(|e| self.error(e))?;
                tracing::info!(lease = %self.name, identity = %self.identity, "holds the Lease (created it)");
                Ok(Ok(()))
            }
            (decision, Some(mut lease)) => {
                let taking_over = decision == Decision::TakeOver;
                let spec = lease.spec.get_or_insert_default();
                if taking_over {
                    spec.holder_identity = Some(self.identity.clone());
                    spec.acquire_time = Some(MicroTime(now));
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                }
                spec.renew_time = Some(MicroTime(now));
                spec.lease_duration_seconds = Some(seconds);
                // `replace` carries the resourceVersion read: a concurrent writer makes it fail.
                self.api
                    .replace(&lease.name_any(), &PostParams::default(), &lease)
                    .await
                    .map_err(|e| self.error(e))?;
                if taking_over {
                    tracing::info!(lease = %self.name, identity = %self.identity, "holds the Lease (took it over)");
                }
                Ok(Ok(()))
            }
            (_, None) => Ok(Err(LOOK_EVERY)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            lease_duration_seconds: Some(15),
            ..Default::default()
        }
    }

    #[test]
    fn decisions() {
        let t0 = std::time::Instant::now();
        let d = Duration::from_secs(15);
        let mut seen = None;
        assert_eq!(decide(None, "a", &mut seen, t0, d), Decision::Create);
        assert_eq!(
            decide(Some((&spec(Some("a")), "1")), "a", &mut seen, t0, d),
            Decision::Renew
        );
        assert_eq!(
            decide(Some((&spec(None), "1")), "a", &mut seen, t0, d),
            Decision::TakeOver,
            "released"
        );
        // Held by b: a full duration from when a first saw this version.
        let b = spec(Some("b"));
        assert_eq!(decide(Some((&b, "2")), "a", &mut seen, t0, d), Decision::Wait(d));
        let later = t0 + Duration::from_secs(5);
        assert_eq!(
            decide(Some((&b, "2")), "a", &mut seen, later, d),
            Decision::Wait(Duration::from_secs(10))
        );
        // b renewed (a new version): the count starts again from when a saw it.
        assert_eq!(
            decide(Some((&b, "3")), "a", &mut seen, later, d),
            Decision::Wait(d)
        );
        assert_eq!(
            decide(Some((&b, "3")), "a", &mut seen, later + d, d),
            Decision::TakeOver,
            "expired"
        );
    }

    #[test]
    fn a_renew_time_from_a_clock_far_ahead_or_behind_changes_nothing() {
        let t0 = std::time::Instant::now();
        let d = Duration::from_secs(15);
        let mut lease = spec(Some("b"));
        // A renewTime an hour in the past by this replica's clock: a skewed holder, still live.
        lease.renew_time = Some(MicroTime(Timestamp::now() - Duration::from_secs(3600)));
        let mut seen = None;
        assert_eq!(
            decide(Some((&lease, "7")), "a", &mut seen, t0, d),
            Decision::Wait(d)
        );
    }

    #[test]
    fn a_holder_gives_up_before_anyone_may_take_over() {
        let d = Duration::from_secs(15);
        assert!(renew_period(d) < renew_deadline(d));
        assert!(renew_deadline(d) < d);
    }
}
