//! The operations listener of the roles that serve no API (the scheduler and
//! the workers), and of the API when it is asked to keep these off its public
//! port: `GET /healthz`, `GET /readyz` and `GET /metrics`.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use trawl_core::ports::{ContentCache, SliceQueue, Store};

use crate::health;

/// What `/readyz` pings: the role's backends.
#[derive(Clone)]
pub struct OpsBackends {
    pub store: Arc<dyn Store>,
    pub queue: Arc<dyn SliceQueue>,
    /// The cache, for roles that use it (workers, the API).
    pub cache: Option<Arc<dyn ContentCache>>,
}

/// `/healthz`, `/readyz` over `backends`, and `/metrics`.
pub fn ops_router(backends: OpsBackends) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(backends)
}

/// `router` with `GET /metrics` added (the API's own port, when no ops
/// listener serves it), behind an admin credential (an admin key, a token with
/// `research:admin`; anyone on an open API, which is loopback only): the
/// metrics name tools, models and what was spent.
pub fn with_metrics(router: Router, state: &crate::ApiState) -> Router {
    router.route(
        "/metrics",
        get(metrics).route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::state::require_admin,
        )),
    )
}

async fn readyz(State(b): State<OpsBackends>) -> Response {
    health::ready(b.store.as_ref(), b.queue.as_ref(), b.cache.as_deref())
        .await
        .into_response()
}

/// `GET /metrics`: this process's metrics in the Prometheus text format.
pub async fn metrics() -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            trawl_telemetry::METRICS_CONTENT_TYPE,
        )],
        trawl_telemetry::metrics_text(),
    )
        .into_response()
}
