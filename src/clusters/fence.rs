//! The write fence: a rule's writes leave this process only while this replica holds the rule's
//! shard, checked at the last step mimeo controls before a request goes out.
//!
//! A replica may hold a shard only until its Lease's deadline (`shards`). Checked once before a
//! write is sent, the fence leaves a gap: the request then waits for a permit behind up to 63
//! others (`in_flight`), and a replica frozen (SIGSTOP, a stopped node) or slowed in that wait
//! sends it when it resumes, after another replica took the shard over (seen once in 28 freezes:
//! a `PATCH` 18 ms after SIGCONT, before the replica's first Lease request). So a rule's pass runs
//! [`under`] its fence, and the [`CheckFence`] layer, inside the bound on requests in flight,
//! refuses a write whose fence does not hold at the moment it gets its permit. The fence travels
//! as a task-local, so every request the pass sends carries its rule without kube's `Api` knowing.
//!
//! What remains are the writes already past the check when the process froze, at most the
//! client's permits: those kube's layers and hyper's connection tasks had not written yet (26 in
//! six freezes, against 386 checked only before `write::write`; docs/design.md).

use crate::replicas::shards::Shards;
use crate::sync::ownership::RuleKey;
use crate::sync::shards::shard_of;
use http::{Method, Request};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

tokio::task_local! {
    static FENCE: Fence;
}

/// A rule's shard, as held by this replica.
#[derive(Clone)]
pub struct Fence {
    shards: Shards,
    shard: u32,
}

/// The refusal of a write whose shard is not held now.
#[derive(Debug, thiserror::Error)]
#[error("this replica does not hold the rule's shard now; another replica writes its copies")]
pub struct NotHeld;

impl Fence {
    pub fn for_rule(shards: &Shards, rule: &RuleKey) -> Fence {
        Fence {
            shards: shards.clone(),
            shard: shard_of(rule, shards.count()),
        }
    }

    /// Refuses at once when the shard is not held now: a write that would be refused by the
    /// layer should not wait for a permit first.
    pub fn check(&self) -> kube::Result<()> {
        self.holds()
            .map_err(|refused| kube::Error::Service(Box::new(refused)))
    }

    fn holds(&self) -> Result<(), NotHeld> {
        match self.shards.holds(self.shard) {
            true => Ok(()),
            false => Err(NotHeld),
        }
    }
}

/// Runs `work` with every write it sends checked against `fence` as it leaves.
pub async fn under<F: Future>(fence: Fence, work: F) -> F::Output {
    FENCE.scope(fence, work).await
}

/// Whether a request changes something: what the fence guards. Leases are never fenced (they
/// are how a shard is held), and reads are always allowed.
fn is_fenced<B>(request: &Request<B>) -> bool {
    let write = !matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    write && !request.uri().path().starts_with("/apis/coordination.k8s.io/")
}

/// The layer: built into every client inside the bound on requests in flight, so that its check
/// comes after the wait for a permit.
#[derive(Clone, Copy, Debug, Default)]
pub struct CheckFence;

impl<S> tower::Layer<S> for CheckFence {
    type Service = Checked<S>;

    fn layer(&self, inner: S) -> Checked<S> {
        Checked { inner }
    }
}

pub struct Checked<S> {
    inner: S,
}

impl<S, B> tower::Service<Request<B>> for Checked<S>
where
    S: tower::Service<Request<B>>,
    S::Error: Into<tower::BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = tower::BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, tower::BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), tower::BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let fenced = is_fenced(&request);
        // The stack below does nothing until its future is polled: refused, it is dropped unsent.
        let response = self.inner.call(request);
        Box::pin(async move {
            if fenced && let Ok(Err(refused)) = FENCE.try_with(Fence::holds) {
                return Err(Box::new(refused) as tower::BoxError);
            }
            response.await.map_err(Into::into)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clusters::in_flight::BoundInFlight;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};
    use tower::{Service as _, ServiceExt as _};

    /// An apiserver stand-in that counts the requests it got and answers each after `delay`.
    fn apiserver(
        delay: Duration,
    ) -> (
        Arc<AtomicUsize>,
        impl tower::Service<
            Request<()>,
            Response = http::Response<String>,
            Error = std::convert::Infallible,
            Future = impl Send + 'static,
        > + Clone,
    ) {
        let got = Arc::new(AtomicUsize::new(0));
        let counted = got.clone();
        let service = tower::service_fn(move |_: Request<()>| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                Ok(http::Response::new(String::new()))
            }
        });
        (got, service)
    }

    fn request(method: Method, path: &str) -> Request<()> {
        Request::builder().method(method).uri(path).body(()).unwrap()
    }

    const COPY: &str = "/api/v1/namespaces/team-a/secrets/registry";

    #[tokio::test]
    async fn a_write_leaves_only_while_its_shard_is_held_and_reads_always() {
        let held = Fence {
            shards: Shards::default(),
            shard: 0,
        };
        let lapsed = Fence {
            shards: Shards::new(1),
            shard: 0,
        };
        let (got, apiserver) = apiserver(Duration::ZERO);
        let mut client = tower::Layer::layer(&CheckFence, apiserver);
        let mut send = async |fence: Option<Fence>, method: Method, path: &'static str| {
            let call = client.ready().await.unwrap().call(request(method, path));
            match fence {
                Some(fence) => under(fence, call).await,
                None => call.await,
            }
        };
        let refused = send(Some(lapsed.clone()), Method::PATCH, COPY).await.unwrap_err();
        assert!(refused.is::<NotHeld>(), "{refused}");
        for method in [Method::POST, Method::PUT, Method::DELETE] {
            assert!(send(Some(lapsed.clone()), method, COPY).await.is_err());
        }
        assert_eq!(
            got.load(Ordering::SeqCst),
            0,
            "no write of a lapsed shard went out"
        );
        send(Some(lapsed.clone()), Method::GET, COPY).await.unwrap();
        let lease = "/apis/coordination.k8s.io/v1/namespaces/mimeo/leases/mimeo-shard-1-0";
        send(Some(lapsed), Method::PUT, lease).await.unwrap();
        send(Some(held), Method::PATCH, COPY).await.unwrap();
        send(None, Method::PATCH, COPY).await.unwrap();
        assert_eq!(
            got.load(Ordering::SeqCst),
            4,
            "reads, Leases, held and unfenced writes went"
        );
    }

    /// The case the fence before `write::write` missed: a write that passed it, then waited
    /// behind the bound while its shard lapsed, is not sent when its turn comes.
    #[tokio::test]
    async fn a_write_that_waited_for_a_permit_past_its_deadline_is_not_sent() {
        let deadline = Instant::now() + Duration::from_millis(150);
        let fence = Fence {
            shards: Shards::holding(0, deadline),
            shard: 0,
        };
        let (got, apiserver) = apiserver(Duration::from_millis(400));
        let bound = BoundInFlight::new(1);
        let mut client = tower::Layer::layer(&bound, tower::Layer::layer(&CheckFence, apiserver));
        // The first takes the only permit for 400 ms; the second passes the early check and
        // waits behind it past the shard's deadline.
        fence.check().unwrap();
        let first = client.ready().await.unwrap().call(request(Method::PATCH, COPY));
        let first = tokio::spawn(under(fence.clone(), async { first.await.map(drop) }));
        tokio::time::sleep(Duration::from_millis(20)).await;
        fence.check().unwrap();
        let second = client.ready().await.unwrap().call(request(
            Method::PATCH,
            "/api/v1/namespaces/team-b/secrets/registry",
        ));
        let refused = under(fence.clone(), second).await.map(drop).unwrap_err();
        assert!(Instant::now() > deadline);
        assert!(refused.is::<NotHeld>(), "{refused}");
        first.await.unwrap().unwrap();
        assert_eq!(
            got.load(Ordering::SeqCst),
            1,
            "only the write sent in time went out"
        );
        assert!(fence.check().is_err());
    }
}
