//! A bound on the requests one client has in flight to its apiserver at once.
//!
//! kube's client speaks HTTP/1.1: each request in flight holds a connection of its own, and the
//! connection pool keeps every connection it opened for 90 s after its last use, with buffers
//! (hyper's, rustls') of about 50 KiB each. Unbounded, 100 rules writing 16 copies each at once
//! opened about 1,800 connections to one apiserver, and the process held them (about 90 MB) until
//! the pool let them go. Bounded, a burst waits its turn instead, and the apiserver (whose own
//! limit is a few hundred requests in flight for all its clients) is asked for no more than it
//! can take.
//!
//! Watches are not counted: each lasts minutes and there is one per cache. Nor are Leases: a
//! renewal waiting behind a burst of writes would let a shard lapse and stop every write.

use crate::metrics::requests::verb;
use http::{Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Requests in flight to one apiserver at once, other than watches and Leases: four rules' worth
/// of writes at once, so that a rotation never waits on the bound. Measured at 32, 64 and 128
/// (docs/benchmarks.md): 64 copied as fast as 128 with no more memory than 32.
pub const REQUESTS_IN_FLIGHT: usize = 64;

/// The layer: one bound for every request of the client it is built into.
#[derive(Clone)]
pub struct BoundInFlight {
    permits: Arc<Semaphore>,
}

impl BoundInFlight {
    pub fn new(requests: usize) -> Self {
        BoundInFlight {
            permits: Arc::new(Semaphore::new(requests)),
        }
    }
}

impl<S> tower::Layer<S> for BoundInFlight {
    type Service = Bounded<S>;

    fn layer(&self, inner: S) -> Bounded<S> {
        Bounded {
            inner,
            permits: self.permits.clone(),
        }
    }
}

/// A client's service whose requests wait for a permit.
pub struct Bounded<S> {
    inner: S,
    permits: Arc<Semaphore>,
}

/// Whether a request waits for a permit: not a watch, and not a Lease.
fn is_bounded<B>(request: &Request<B>) -> bool {
    let path = request.uri().path();
    let watch = verb(request.method(), path, request.uri().query(), request.headers()) == "WATCH";
    !watch && !path.starts_with("/apis/coordination.k8s.io/")
}

impl<S, B, R> tower::Service<Request<B>> for Bounded<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = Response<WithPermit<R>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let permits = is_bounded(&request).then(|| self.permits.clone());
        // kube's stack does nothing with a request until its future is polled: taking the
        // permit before polling it keeps the connection from being checked out.
        let response = self.inner.call(request);
        Box::pin(async move {
            let permit = match permits {
                // The semaphore is never closed.
                Some(permits) => permits.acquire_owned().await.ok(),
                None => None,
            };
            let response = response.await?;
            // The connection is busy until its body is read: the permit goes with the body.
            Ok(response.map(|body| WithPermit { body, permit }))
        })
    }
}

/// A response body that holds its request's permit until it is read to the end or dropped.
pub struct WithPermit<B> {
    body: B,
    permit: Option<OwnedSemaphorePermit>,
}

impl<B> http_body::Body for WithPermit<B>
where
    B: http_body::Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            self.permit = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt as _, Full};
    use std::time::Duration;
    use tower::ServiceExt as _;

    type Answer = Result<Response<Full<bytes::Bytes>>, std::convert::Infallible>;

    /// An apiserver stand-in answering every request at once with a body of one frame.
    fn answering() -> impl tower::Service<
        Request<()>,
        Response = Response<Full<bytes::Bytes>>,
        Error = std::convert::Infallible,
        Future = std::future::Ready<Answer>,
    > + Clone {
        tower::service_fn(|_: Request<()>| {
            std::future::ready(Ok(Response::new(Full::new(bytes::Bytes::from_static(b"{}")))))
        })
    }

    /// A bound of `permits` in front of [`answering`].
    fn bounded(
        permits: usize,
    ) -> impl tower::Service<
        Request<()>,
        Response = Response<WithPermit<Full<bytes::Bytes>>>,
        Error = std::convert::Infallible,
    > {
        tower::Layer::layer(&BoundInFlight::new(permits), answering())
    }

    /// A GET of `path` sent once the service is ready; its answer, still to be awaited.
    async fn send<S: tower::Service<Request<()>>>(service: &mut S, path: &str) -> S::Future
    where
        S::Error: std::fmt::Debug,
    {
        let request = Request::get(path).body(()).unwrap();
        service.ready().await.unwrap().call(request)
    }

    #[tokio::test]
    async fn a_request_waits_until_an_earlier_body_is_read() {
        let mut service = bounded(1);
        let first = send(&mut service, "/api/v1/namespaces/a/secrets/s")
            .await
            .await
            .unwrap();
        let second = send(&mut service, "/api/v1/namespaces/a/secrets/t").await;
        tokio::pin!(second);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut second)
                .await
                .is_err(),
            "the second request went out while the first one's body was unread"
        );
        let read = first.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&read[..], b"{}");
        tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("the second request waits for the first body, no longer")
            .unwrap();
    }

    #[tokio::test]
    async fn a_dropped_body_lets_the_next_request_go() {
        let mut service = bounded(1);
        drop(send(&mut service, "/api/v1/secrets").await.await);
        tokio::time::timeout(
            Duration::from_secs(5),
            send(&mut service, "/api/v1/secrets").await,
        )
        .await
        .expect("a dropped response gives its permit back")
        .unwrap();
    }

    #[tokio::test]
    async fn watches_and_leases_do_not_wait() {
        let mut service = bounded(1);
        let _held = send(&mut service, "/api/v1/namespaces/a/secrets/s")
            .await
            .await
            .unwrap();
        for path in [
            "/api/v1/secrets?labelSelector=x&watch=true",
            "/apis/coordination.k8s.io/v1/namespaces/mimeo/leases/mimeo-shard-0",
        ] {
            tokio::time::timeout(Duration::from_secs(5), send(&mut service, path).await)
                .await
                .unwrap_or_else(|_| panic!("{path} waited for a permit"))
                .unwrap();
        }
    }
}
