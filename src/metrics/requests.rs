//! Requests to each apiserver, counted by a tower layer on the kube clients: by cluster, by the
//! apiserver's own verb names and by status code, and timed to the response's headers.
//!
//! mimeo exists to spare apiservers, so what it asks of each one is the first thing to look at
//! when one is slow or refuses. The layer sits outside kube's own stack (its retries, auth and
//! tracing): a request kube retried on its own counts once. It reads the method, the path and one
//! header; never a body, a query value other than `watch`, or a name in the path.

use http::{HeaderMap, Method, Request, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

/// A request to an apiserver: its cluster, verb and status code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub(crate) remote_cluster: String,
    pub(crate) verb: &'static str,
    pub(crate) code: String,
}

/// Requests to one apiserver with one verb, for their latency.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ClusterVerbLabels {
    pub(crate) remote_cluster: String,
    pub(crate) verb: &'static str,
}

/// The status label of a request that got no response (connection refused, reset, timed out),
/// as client-go's `rest_client_requests_total` writes it.
pub const NO_RESPONSE: &str = "<error>";

/// The verb as kube-apiserver's `apiserver_request_total` names it, so the two sides of a
/// request can be compared: `LIST` and `WATCH` apart from `GET`, `APPLY` apart from `PATCH`,
/// `DELETECOLLECTION` apart from `DELETE`. Non-resource paths (discovery, `/version`) are `GET`.
pub fn verb(method: &Method, path: &str, query: Option<&str>, headers: &HeaderMap) -> &'static str {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest: &[&str] = match segments.first() {
        Some(&"api") if segments.len() >= 2 => &segments[2..],
        Some(&"apis") if segments.len() >= 3 => &segments[3..],
        _ => &[],
    };
    let (watch_path, rest) = match rest.first() {
        Some(&"watch") => (true, &rest[1..]),
        _ => (false, rest),
    };
    // `namespaces/<ns>/<resource>...` is a namespaced resource; `namespaces/<ns>` alone is a
    // namespace by name.
    let rest = match rest {
        ["namespaces", _, resource @ ..] if !resource.is_empty() => resource,
        other => other,
    };
    let collection = rest.len() == 1;
    let watch_query = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .any(|pair| pair == "watch=true" || pair == "watch=1");
    match *method {
        Method::GET if rest.is_empty() => "GET",
        Method::GET if watch_path || watch_query => "WATCH",
        Method::GET if collection => "LIST",
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => {
            let apply = headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/apply-patch"));
            if apply { "APPLY" } else { "PATCH" }
        }
        Method::DELETE if collection => "DELETECOLLECTION",
        Method::DELETE => "DELETE",
        // kube sends none of these; a bounded label all the same.
        _ => "OTHER",
    }
}

/// The layer, for one cluster: made by [`super::Metrics::requests_layer`].
#[derive(Clone)]
pub struct CountRequests {
    pub(super) cluster: Arc<str>,
    pub(super) requests: Family<RequestLabels, Counter>,
    pub(super) durations: Family<ClusterVerbLabels, Histogram>,
}

impl<S> tower::Layer<S> for CountRequests {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            counts: self.clone(),
        }
    }
}

/// A kube client's service with its requests counted.
#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
    counts: CountRequests,
}

impl<S, B, R> tower::Service<Request<B>> for Counted<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let verb = verb(
            request.method(),
            request.uri().path(),
            request.uri().query(),
            request.headers(),
        );
        let counts = self.counts.clone();
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let code = match &result {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => NO_RESPONSE.to_owned(),
            };
            counts.record(verb, code, started.elapsed());
            result
        })
    }
}

impl CountRequests {
    fn record(&self, verb: &'static str, code: String, took: std::time::Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                remote_cluster: self.cluster.to_string(),
                verb,
                code,
            })
            .inc();
        self.durations
            .get_or_create(&ClusterVerbLabels {
                remote_cluster: self.cluster.to_string(),
                verb,
            })
            .observe(took.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_are_named_as_the_apiserver_names_them() {
        let apply = {
            let mut h = HeaderMap::new();
            h.insert(
                http::header::CONTENT_TYPE,
                "application/apply-patch+yaml".parse().unwrap(),
            );
            h
        };
        let merge = {
            let mut h = HeaderMap::new();
            h.insert(
                http::header::CONTENT_TYPE,
                "application/merge-patch+json".parse().unwrap(),
            );
            h
        };
        let none = HeaderMap::new();
        // (method, path, query, headers, verb)
        let cases: &[(Method, &str, Option<&str>, &HeaderMap, &str)] = &[
            (Method::GET, "/version", None, &none, "GET"),
            (Method::GET, "/apis", None, &none, "GET"),
            (Method::GET, "/apis/mimeo.dev/v1alpha1", None, &none, "GET"),
            (Method::GET, "/api/v1", None, &none, "GET"),
            (Method::GET, "/api/v1/namespaces", None, &none, "LIST"),
            (Method::GET, "/api/v1/namespaces/kube-system", None, &none, "GET"),
            (Method::GET, "/api/v1/namespaces/a/secrets", None, &none, "LIST"),
            (Method::GET, "/api/v1/namespaces/a/secrets/s", None, &none, "GET"),
            (
                Method::GET,
                "/api/v1/namespaces/a/secrets",
                Some("labelSelector=x&watch=true&resourceVersion=1"),
                &none,
                "WATCH",
            ),
            (Method::GET, "/api/v1/secrets", Some("watch=1"), &none, "WATCH"),
            // The older path a Role can grant a namespace's own watch on.
            (Method::GET, "/api/v1/watch/namespaces/a", None, &none, "WATCH"),
            (
                Method::GET,
                "/apis/coordination.k8s.io/v1/namespaces/m/leases/mimeo",
                None,
                &none,
                "GET",
            ),
            (
                Method::GET,
                "/apis/mimeo.dev/v1alpha1/syncrules",
                Some("watch=false"),
                &none,
                "LIST",
            ),
            (Method::POST, "/api/v1/namespaces/a/secrets", None, &none, "POST"),
            (Method::PUT, "/api/v1/namespaces/a/secrets/s", None, &none, "PUT"),
            (
                Method::PATCH,
                "/apis/mimeo.dev/v1alpha1/namespaces/a/syncrules/r/status",
                None,
                &apply,
                "APPLY",
            ),
            (
                Method::PATCH,
                "/api/v1/namespaces/a/secrets/s",
                None,
                &merge,
                "PATCH",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/a/secrets/s",
                None,
                &none,
                "DELETE",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/a/secrets",
                None,
                &none,
                "DELETECOLLECTION",
            ),
            (
                Method::OPTIONS,
                "/api/v1/namespaces/a/secrets",
                None,
                &none,
                "OTHER",
            ),
        ];
        for (method, path, query, headers, expected) in cases {
            assert_eq!(
                verb(method, path, *query, headers),
                *expected,
                "{method} {path}?{query:?}"
            );
        }
    }

    /// The layer on a scripted service: each request counted once under its cluster, verb and
    /// code, a failed one under `<error>`.
    #[tokio::test]
    async fn the_layer_counts_each_request_with_its_answer() {
        use tower::{Layer as _, Service as _};
        let metrics = super::super::Metrics::new();
        let layer = metrics.requests_layer(Some("eu1"));
        let (mock, mut handle) = tower_test::mock::pair::<Request<()>, Response<()>>();
        let mut service = layer.layer(mock);
        std::future::poll_fn(|cx| service.poll_ready(cx)).await.unwrap();
        let list = service.call(
            Request::get("/api/v1/namespaces/a/secrets?limit=500")
                .body(())
                .unwrap(),
        );
        let (_, send) = handle.next_request().await.unwrap();
        send.send_response(Response::builder().status(200).body(()).unwrap());
        list.await.unwrap();
        std::future::poll_fn(|cx| service.poll_ready(cx)).await.unwrap();
        let create = service.call(Request::post("/api/v1/namespaces/a/secrets").body(()).unwrap());
        let (_, send) = handle.next_request().await.unwrap();
        send.send_error(std::io::Error::other("connection reset"));
        assert!(create.await.is_err());
        let text = metrics.encode();
        for expected in [
            r#"mimeo_apiserver_requests_total{remote_cluster="eu1",verb="LIST",code="200"} 1"#,
            r#"mimeo_apiserver_requests_total{remote_cluster="eu1",verb="POST",code="<error>"} 1"#,
            r#"mimeo_apiserver_request_duration_seconds_count{remote_cluster="eu1",verb="LIST"} 1"#,
        ] {
            assert!(text.contains(expected), "missing {expected} in\n{text}");
        }
    }
}
