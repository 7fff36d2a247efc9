//! `GET /healthz` (the process answers) and `GET /readyz` (its backends answer).

use std::future::Future;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use trawl_core::ports::{ContentCache, PortError, SliceQueue, Store};
use utoipa::ToSchema;

use crate::error::{ApiError, Problem, chain};
use crate::state::ApiState;

/// How long each backend has to answer a readiness ping.
pub const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// The process is up.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: &'static str,
}

/// Every backend answered.
#[derive(Debug, Serialize, ToSchema)]
pub struct Ready {
    /// Always `ok`.
    pub status: &'static str,
    /// Each backend (`store`, `queue`, `cache`) and `ok`.
    #[schema(value_type = Object)]
    pub checks: serde_json::Value,
    /// How callers are let in (the API's `/readyz` only): `open` (no
    /// credential asked for, loopback only), `keys`, or `oauth`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<&'static str>,
    /// What an operator should know about how the API is served: an open API
    /// says so here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<&'static str>,
}

/// What `/readyz` of an open API says.
pub const OPEN_WARNING: &str = "open deployment: no API key or OAuth is configured, so any program that can reach this loopback address can submit jobs and approve spend (browser pages cannot: Host and Origin are checked); set TRAWL_API_KEYS or OAuth";

/// Liveness: the process answers. No backend is asked.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    responses((status = 200, description = "Alive.", body = Health)),
)]
pub(crate) async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Readiness: the store, the queue and the cache each answer a ping within 2 s.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    responses(
        (status = 200, description = "Every backend answered.", body = Ready),
        (status = 503, description = "A backend did not answer; `checks` says which.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn readyz(State(state): State<ApiState>) -> Result<Json<Ready>, ApiError> {
    let mut ready = ready(
        state.store.as_ref(),
        state.queue.as_ref(),
        Some(state.cache.as_ref()),
    )
    .await?;
    ready.auth = Some(if state.is_open() {
        "open"
    } else if state.oauth().is_some() {
        "oauth"
    } else {
        "keys"
    });
    if state.is_open() {
        ready.warning = Some(OPEN_WARNING);
    }
    Ok(ready)
}

/// Pings the store, the queue and, when the role uses it, the cache, together.
pub(crate) async fn ready(
    store: &dyn Store,
    queue: &dyn SliceQueue,
    cache: Option<&dyn ContentCache>,
) -> Result<Json<Ready>, ApiError> {
    let (store, queue, cache) = tokio::join!(
        check("store", store.ping()),
        check("queue", queue.ping()),
        async {
            match cache {
                Some(c) => Some(check("cache", c.ping()).await),
                None => None,
            }
        },
    );
    let mut results = vec![("store", store), ("queue", queue)];
    results.extend(cache.map(|c| ("cache", c)));
    let checks: serde_json::Map<String, serde_json::Value> = results
        .iter()
        .map(|(name, r)| ((*name).to_owned(), (*r).into()))
        .collect();
    let failed: Vec<&'static str> = results
        .iter()
        .filter(|(_, r)| *r != "ok")
        .map(|(name, _)| *name)
        .collect();
    if failed.is_empty() {
        Ok(Json(Ready {
            status: "ok",
            checks: checks.into(),
            auth: None,
            warning: None,
        }))
    } else {
        Err(ApiError::NotReady(failed, checks.into()))
    }
}

/// `ok`, `unavailable` or `timeout`; the cause is logged, not answered.
async fn check(name: &str, ping: impl Future<Output = Result<(), PortError>>) -> &'static str {
    match tokio::time::timeout(PING_TIMEOUT, ping).await {
        Ok(Ok(())) => "ok",
        Ok(Err(e)) => {
            tracing::warn!(backend = name, error = %chain(&e), "readiness ping failed");
            "unavailable"
        }
        Err(_) => {
            tracing::warn!(backend = name, timeout = ?PING_TIMEOUT, "readiness ping timed out");
            "timeout"
        }
    }
}
