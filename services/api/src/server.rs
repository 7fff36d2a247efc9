//! The router and the server loop.

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::error::ApiError;
use crate::state::{ApiState, require_key};
use crate::{approvals, artifacts, health, jobs, openapi, rows};

/// How long [`serve`] lets requests in flight finish after shutdown is asked for.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(10);

/// Every route of the API over `state`.
///
/// `/healthz`, `/readyz` and `/openapi.json` are open; Slack's interactions are
/// checked by their signature; the other `/v1` routes go through the key check
/// first. Bodies are capped at the state's limit. Unknown routes and
/// methods answer problem+json like every other error.
pub fn router(state: ApiState) -> Router {
    let v1 = Router::new()
        .route("/v1/jobs", post(jobs::submit_job))
        .route("/v1/jobs/{id}", get(jobs::get_job))
        .route("/v1/jobs/{id}/cancel", post(jobs::cancel_job))
        .route("/v1/jobs/{id}/items", get(rows::items))
        .route("/v1/jobs/{id}/rejections", get(rows::rejections))
        .route("/v1/jobs/{id}/trace", get(rows::trace))
        .route("/v1/jobs/{id}/report", get(rows::report))
        .route("/v1/jobs/{id}/artifacts", get(artifacts::list))
        .route("/v1/jobs/{id}/artifacts/{name}", get(artifacts::get))
        .route("/v1/approvals", get(approvals::list))
        .route("/v1/approvals/{id}/approve", post(approvals::approve))
        .route("/v1/approvals/{id}/reject", post(approvals::reject))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_key));
    let mcp = Router::new()
        .route_service(
            "/mcp",
            crate::mcp::service(&state, &state.mcp, state.shutdown.child_token()),
        )
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            crate::mcp::guard,
        ));
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/openapi.json", get(openapi::openapi_json))
        // Signed by Slack instead of a bearer credential (see `slack`).
        .route(
            "/v1/integrations/slack/interactions",
            post(crate::slack::interactions),
        )
        .route(
            "/.well-known/oauth-protected-resource",
            get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource/{*path}",
            get(resource_metadata),
        )
        .merge(v1)
        .merge(mcp)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(state.body_limit))
        .layer(middleware::from_fn(log_request))
        .with_state(state)
}

/// RFC 9728 protected resource metadata, at the well-known root and at its
/// path-inserted forms (`…/oauth-protected-resource/mcp` for `/mcp`): one
/// document, since `/mcp` and the REST API are one resource. Not found when OAuth
/// is not configured.
async fn resource_metadata(State(state): State<ApiState>) -> Result<Response, ApiError> {
    let rs = state.oauth().ok_or_else(|| {
        ApiError::NotFound("protected resource metadata: OAuth is not configured".to_owned())
    })?;
    let mut res = axum::Json(rs.metadata()).into_response();
    res.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("max-age=300"),
    );
    Ok(res)
}

async fn not_found() -> ApiError {
    ApiError::NotFound("such route".to_owned())
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// One span per request, and one line when it is answered. The span is an
/// OpenTelemetry server span named by the route (`POST /v1/jobs`), the child of
/// the caller's span when the request carries a `traceparent`.
async fn log_request(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| req.uri().path().to_owned(), |m| m.as_str().to_owned());
    let span = tracing::info_span!(
        "request",
        otel.name = %format_args!("{} {route}", req.method()),
        otel.kind = "server",
        http.request.method = %req.method(),
        http.route = %route,
        url.path = %req.uri().path(),
        http.response.status_code = tracing::field::Empty,
    );
    trawl_telemetry::propagation::set_parent_from_headers(&span, req.headers());
    async move {
        let started = Instant::now();
        let res = next.run(req).await;
        let status = res.status().as_u16();
        tracing::Span::current().record("http.response.status_code", status);
        tracing::debug!(status, elapsed = ?started.elapsed(), "answered");
        res
    }
    .instrument(span)
    .await
}

/// Serves `router` on `listener` until `shutdown` is cancelled.
///
/// Shutdown, step by step: the listener stops accepting; idle connections are
/// closed; requests in flight are given [`DRAIN_DEADLINE`] to finish; whatever is
/// still running then is dropped, and `serve` returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "API listening");
    }
    // Answers are often written in pieces (an SSE event after its headers);
    // without TCP_NODELAY each piece after the first waits for the client's
    // delayed ACK, about 40 ms on Linux.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set");
        }
    });
    let server = axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.clone().cancelled_owned())
        .into_future();
    let deadline = async {
        shutdown.cancelled().await;
        tokio::time::sleep(DRAIN_DEADLINE).await;
    };
    tokio::select! {
        res = server => res,
        () = deadline => {
            tracing::warn!(deadline = ?DRAIN_DEADLINE, "requests still in flight at the drain deadline; dropped");
            Ok(())
        }
    }
}
