//! Leader election with a `coordination.k8s.io/v1` Lease, so that of several replicas only one
//! writes.
//!
//! The holder renews the Lease every third of its duration. A candidate takes it over once the
//! holder has not renewed it for a whole duration. A holder that cannot renew within two thirds
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

/// Decides what a candidate named `me` does with `lease` at `now`.
pub fn decide(lease: Option<&LeaseSpec>, me: &str, now: Timestamp, duration: Duration) -> Decision {
    let Some(spec) = lease else {
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
    let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
        return Decision::TakeOver;
    };
    let age = now.duration_since(renewed.0);
    let age = Duration::try_from(age).unwrap_or_default();
    match lasts.checked_sub(age) {
        Some(left) if !left.is_zero() => Decision::Wait(left),
        _ => Decision::TakeOver,
    }
}

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
}

impl Elector {
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str, duration: Duration) -> Self {
        Elector {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            duration,
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
            match self.try_hold().await {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                // Conflicts (another candidate wrote first) and passing apiserver trouble: retry.
                Err(e) => tracing::debug!(error = %e, "leader election attempt failed; retrying"),
            }
            tokio::time::sleep(renew_period(self.duration)).await;
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
                Ok(Ok(true)) => renewed = tokio::time::Instant::now(),
                Ok(Ok(false)) => {
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

    /// One round: reads the Lease and creates, renews or takes it over if [`decide`] says so.
    /// Returns whether this candidate holds it afterwards.
    async fn try_hold(&self) -> Result<bool, LeaderError> {
        let current = self.api.get_opt(&self.name).await.map_err(|e| self.error(e))?;
        let now = Timestamp::now();
        let decision = decide(
            current.as_ref().and_then(|l| l.spec.as_ref()),
            &self.identity,
            now,
            self.duration,
        );
        let seconds = self.duration.as_secs().max(1) as i32;
        match (decision, current) {
            (Decision::Wait(_), _) => Ok(false),
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
                tracing::info!(lease = %self.name, identity = %self.identity, "became the leader (created the Lease)");
                Ok(true)
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
                    tracing::info!(lease = %self.name, identity = %self.identity, "became the leader (took the Lease over)");
                }
                Ok(true)
            }
            (_, None) => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>, renewed_ago: Option<u64>, now: Timestamp) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            lease_duration_seconds: Some(15),
            renew_time: renewed_ago.map(|s| MicroTime(now - Duration::from_secs(s))),
            ..Default::default()
        }
    }

    #[test]
    fn decisions() {
        let now = Timestamp::now();
        let d = Duration::from_secs(15);
        assert_eq!(decide(None, "a", now, d), Decision::Create);
        assert_eq!(
            decide(Some(&spec(Some("a"), Some(3), now)), "a", now, d),
            Decision::Renew
        );
        assert_eq!(
            decide(Some(&spec(Some("b"), Some(5), now)), "a", now, d),
            Decision::Wait(Duration::from_secs(10))
        );
        assert_eq!(
            decide(Some(&spec(Some("b"), Some(16), now)), "a", now, d),
            Decision::TakeOver,
            "expired"
        );
        assert_eq!(
            decide(Some(&spec(None, None, now)), "a", now, d),
            Decision::TakeOver,
            "released"
        );
        assert_eq!(
            decide(Some(&spec(Some("b"), None, now)), "a", now, d),
            Decision::TakeOver,
            "never renewed"
        );
    }

    #[test]
    fn a_holder_gives_up_before_anyone_may_take_over() {
        let d = Duration::from_secs(15);
        assert!(renew_period(d) < renew_deadline(d));
        assert!(renew_deadline(d) < d);
    }
}
