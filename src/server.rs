//! The HTTP endpoints for the platform: `/metrics`, `/healthz` and `/readyz`.

use crate::metrics::Metrics;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the controller's caches are filled and it is reconciling, and which shards it holds
/// when the rules are shared between replicas.
#[derive(Clone, Default)]
pub struct Readiness {
    ready: Arc<AtomicBool>,
    shards: Arc<std::sync::OnceLock<crate::replicas::shards::Shards>>,
}

impl Readiness {
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The shards `/readyz` names.
    pub fn set_shards(&self, shards: crate::replicas::shards::Shards) {
        let _ = self.shards.set(shards);
    }

    /// What `/readyz` says when ready: `ok`, and with shards, which this replica holds.
    fn said(&self) -> String {
        match self.shards.get() {
            None => "ok".to_owned(),
            Some(shards) => {
                let held: Vec<String> = shards.held_now().iter().map(u32::to_string).collect();
                let aside = match shards.standing_aside_for() {
                    Some(theirs) => format!(
                        " (standing aside: a replica that started first splits the rules into {theirs})"
                    ),
                    None => String::new(),
                };
                format!("ok: shards [{}] of {}{aside}", held.join(","), shards.count())
            }
        }
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    readiness: Readiness,
}

/// Binds `addr` and returns the bound address with the server future, which runs until
/// `shutdown` completes.
pub async fn bind(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, impl std::future::Future<Output = std::io::Result<()>>)> {
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .with_state(AppState { metrics, readiness });
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    Ok((bound, async move {
        axum::serve(listener, app).with_graceful_shutdown(shutdown).await
    }))
}

/// The metrics as `prometheus-client` writes them: OpenMetrics, so said. Served as the older
/// `text/plain; version=0.0.4`, Prometheus read each counter's `# TYPE mimeo_x counter` as naming
/// another family than its samples' `mimeo_x_total`, and took every counter for untyped.
async fn metrics_text(State(state): State<AppState>) -> ([(&'static str, &'static str); 1], String) {
    (
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}

async fn ready(State(state): State<AppState>) -> (StatusCode, String) {
    if state.readiness.is_ready() {
        (StatusCode::OK, state.readiness.said())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "caches not synced yet".to_owned(),
        )
    }
}
