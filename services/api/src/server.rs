//! The router and the server loop.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;
use tracing::Instrument;

use crate::error::ApiError;
use crate::limits::{ConnectionsPerIp, HttpLimits, TimedBody};
use crate::site::LocalAddr;
use crate::state::{ApiState, Caller, require_key};
use crate::{approvals, artifacts, health, jobs, openapi, rows, usage};

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
        .route(
            "/v1/jobs",
            post(jobs::submit_job)
                .route_layer(middleware::from_fn_with_state(state.clone(), limit_jobs)),
        )
        .route("/v1/jobs/{id}", get(jobs::get_job))
        .route("/v1/jobs/{id}/cancel", post(jobs::cancel_job))
        .route("/v1/jobs/{id}/items", get(rows::items))
        .route("/v1/jobs/{id}/rejections", get(rows::rejections))
        .route("/v1/jobs/{id}/trace", get(rows::trace))
        .route("/v1/jobs/{id}/report", get(rows::report))
        .route("/v1/jobs/{id}/artifacts", get(artifacts::list))
        .route("/v1/jobs/{id}/artifacts/{name}", get(artifacts::get))
        .route("/v1/usage", get(usage::usage))
        .route("/v1/approvals", get(approvals::list))
        .route("/v1/approvals/{id}/approve", post(approvals::approve))
        .route("/v1/approvals/{id}/reject", post(approvals::reject))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_key));
    let mcp = Router::new()
        .route_service(
            "/mcp",
            crate::mcp::service(&state, state.shutdown.child_token()),
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
        .route(crate::site::SLACK_ROUTE, post(crate::slack::interactions))
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
        .layer(middleware::from_fn(problem_for_every_refusal))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::site::guard,
        ))
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

/// Job submissions past the caller's rate are refused (429, `Retry-After`)
/// before their body is read. Runs after the key check, which put the caller there.
async fn limit_jobs(State(state): State<ApiState>, req: Request, next: Next) -> Response {
    let Some(caller) = req.extensions().get::<Caller>() else {
        return ApiError::Internal(anyhow::anyhow!("no caller behind the key check"))
            .into_response();
    };
    match state.limiters.job(&caller.label) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// Answers that are refusals (4xx) without a body of their own kind become
/// problem+json: what axum's extractors and rmcp answer in plain text (a
/// `Content-Type` that does not parse, a path that does not fit its route)
/// keeps its status and says the same in problem+json. JSON answers (`/mcp`'s
/// JSON-RPC errors) and problem+json ones pass as they are.
async fn problem_for_every_refusal(req: Request, next: Next) -> Response {
    let res = next.run(req).await;
    let status = res.status();
    if !status.is_client_error() {
        return res;
    }
    let json = res
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            let ct = ct.to_ascii_lowercase();
            ct.starts_with(crate::error::PROBLEM_JSON)
                || ct.starts_with("application/json")
                || ct.starts_with("text/event-stream")
        });
    if json {
        return res;
    }
    let (parts, body) = res.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let detail = String::from_utf8_lossy(&text)
        .trim()
        .chars()
        .take(500)
        .collect::<String>();
    let mut out = ApiError::Refused {
        status,
        detail: if detail.is_empty() {
            status.canonical_reason().unwrap_or("refused").to_owned()
        } else {
            detail
        },
    }
    .into_response();
    // Headers the refusal carried (`Retry-After`, `Allow`, a challenge) stay.
    for (name, value) in &parts.headers {
        if name != axum::http::header::CONTENT_TYPE && name != axum::http::header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
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

/// Serves `router` on `listener` until `shutdown` is cancelled, with the
/// default [`HttpLimits`].
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    serve_with(listener, router, shutdown, HttpLimits::default()).await
}

/// Serves `router` on `listener` until `shutdown` is cancelled, HTTP/1.1 only,
/// with these `limits`: a connection from an address that has
/// `max_connections_per_ip` open is closed at once; one whose request line and
/// headers take longer than `header_read_timeout` is closed (hyper's header
/// timeout); a request whose body takes longer than `body_read_timeout` is
/// answered 408 and its connection closed.
///
/// Shutdown, step by step: the listener stops accepting; idle connections are
/// closed; requests in flight are given [`DRAIN_DEADLINE`] to finish; whatever is
/// still running then is dropped, and `serve` returns.
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
    limits: HttpLimits,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, ?limits, "API listening");
    }
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let per_ip = ConnectionsPerIp::new(limits.max_connections_per_ip);
    let graceful = GracefulShutdown::new();
    // Every connection's task, so the ones left at the drain deadline are
    // dropped with the set.
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let (tcp, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of file descriptors, most likely: wait for some to be
                    // given back instead of spinning.
                    tracing::error!(error = %e, "accepting a connection failed");
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            },
        };
        let Some(slot) = per_ip.admit(peer.ip()) else {
            tracing::debug!(ip = %peer.ip(), max = limits.max_connections_per_ip, "too many connections from one address; closed");
            continue;
        };
        // Answers are often written in pieces (an SSE event after its headers);
        // without TCP_NODELAY each piece after the first waits for the client's
        // delayed ACK, about 40 ms on Linux.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set");
        }
        // A `Host` naming the address the client connected to is the server's own.
        let local = tcp.local_addr().ok();
        let svc = hyper::service::service_fn({
            let router = router.clone();
            let within = limits.body_read_timeout;
            move |req: hyper::Request<hyper::body::Incoming>| {
                let router = router.clone();
                async move {
                    let timed_out = Arc::new(AtomicBool::new(false));
                    let mut req =
                        req.map(|b| Body::new(TimedBody::new(b, within, timed_out.clone())));
                    if let Some(local) = local {
                        req.extensions_mut().insert(LocalAddr(local));
                    }
                    let res = match router.oneshot(req).await {
                        Ok(res) => res,
                        Err(never) => match never {},
                    };
                    if timed_out.load(Ordering::Relaxed) {
                        tracing::debug!(?within, "a request body did not arrive in time");
                        return Ok::<_, Infallible>(ApiError::RequestTimeout.into_response());
                    }
                    Ok(res)
                }
            }
        });
        let conn = graceful.watch(http.serve_connection(TokioIo::new(tcp), svc));
        conns.spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_DEADLINE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(deadline = ?DRAIN_DEADLINE, "requests still in flight at the drain deadline; dropped");
    }
    conns.shutdown().await;
    Ok(())
}

/// Errors of one connection being accepted, not of the listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}
