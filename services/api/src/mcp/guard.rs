//! The HTTP guard in front of rmcp's service: authentication of every request,
//! scopes, session ownership and limits, and JSON-RPC errors for refusals.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::oauth::SCOPE_TOOLS;
use crate::state::{ApiState, Caller, refuse_query_token};

use super::*;

/// A response body that keeps its request marked in flight until it has been
/// sent to the end or dropped.
pub(super) struct Tracked {
    pub(super) inner: Body,
    pub(super) _in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// What a POST body to `/mcp` is, as far as the guard needs to know.
#[derive(Debug, PartialEq, Eq)]
pub enum Rpc {
    /// A JSON-RPC message (request, notification or response), with its method,
    /// for `tools/call` its tool, and its id as JSON text (`5`, `"a"`; `None`
    /// when absent or null).
    Message {
        method: Option<String>,
        tool: Option<String>,
        id: Option<String>,
    },
    /// A JSON array: batching was removed from MCP in 2025-06-18.
    Batch,
    /// Not JSON at all (JSON-RPC -32700).
    NotJson,
    /// JSON, but not a JSON-RPC 2.0 message (JSON-RPC -32600).
    Invalid,
}

/// Reads a POST body to `/mcp` without trusting it (public for the fuzz target).
pub fn read_rpc(body: &[u8]) -> Rpc {
    #[derive(serde::Deserialize)]
    struct Params {
        name: Option<Value>,
    }
    #[derive(serde::Deserialize)]
    struct Message {
        jsonrpc: Option<Value>,
        method: Option<Value>,
        params: Option<Params>,
        id: Option<Value>,
    }
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() {
            Rpc::Batch
        } else {
            Rpc::NotJson
        };
    }
    match serde_json::from_slice::<Message>(body) {
        Ok(m) if m.jsonrpc.as_ref().and_then(Value::as_str) == Some("2.0") => {
            let method = match m.method {
                None => None,
                Some(Value::String(s)) => Some(s),
                Some(_) => return Rpc::Invalid,
            };
            let tool = m
                .params
                .and_then(|p| p.name)
                .and_then(|n| n.as_str().map(str::to_owned));
            let id = m.id.filter(|v| !v.is_null()).map(|v| v.to_string());
            Rpc::Message { method, tool, id }
        }
        Ok(_) => Rpc::Invalid,
        Err(_) if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() => Rpc::Invalid,
        Err(_) => Rpc::NotJson,
    }
}

/// A JSON-RPC error with no id, as MCP's Streamable HTTP transport lets a server
/// answer input it cannot accept: HTTP 400 with the error as its body.
pub(super) fn rpc_error(code: i64, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    (
        axum::http::StatusCode::BAD_REQUEST,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.to_string(),
    )
        .into_response()
}

/// A JSON-RPC error the guard answers with itself, with an HTTP error status
/// (the spec's answer to input a server cannot accept), and `Retry-After` when
/// the client may try again.
pub(super) fn rpc_refusal(
    status: axum::http::StatusCode,
    code: i64,
    message: &str,
    data: Value,
    retry_after: Option<u64>,
) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": null,
        "error": {"code": code, "message": message, "data": data}});
    let mut res = (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.to_string(),
    )
        .into_response();
    if let Some(secs) = retry_after {
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    res
}

/// The middleware in front of `/mcp`: authentication, rate, scope step-up,
/// session ownership and limits, and duplicate request ids (see the module
/// documentation and [`SessionLimits`]).
pub(crate) async fn guard(State(state): State<ApiState>, req: Request, next: Next) -> Response {
    match guarded(&state, req, next).await {
        Ok(res) => res,
        Err(e) => state.challenge(e),
    }
}

pub(super) async fn guarded(
    state: &ApiState,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    refuse_query_token(req.uri())?;
    // The body is not `Sync`: the headers are looked at from a copy.
    let headers = req.headers().clone();
    let caller = state.authenticate(&headers).await?;
    state.limiters.mcp(&caller.label)?;
    let session = req
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(s) = &session
        && !state.sessions.owner_matches(s, &caller.label)
    {
        return Err(ApiError::NotFound("such MCP session".to_owned()));
    }
    let (mut parts, body) = req.into_parts();
    let mut initialize = false;
    let mut request_id = None;
    let body = if parts.method == Method::POST {
        let bytes = axum::body::to_bytes(body, state.body_limit)
            .await
            .map_err(|_| ApiError::PayloadTooLarge(state.body_limit))?;
        let json = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| {
                ct.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("application/json")
            });
        // Other media types are refused by rmcp (415).
        if json {
            match read_rpc(&bytes) {
                Rpc::Message { method, tool, id } => {
                    initialize = method.as_deref() == Some("initialize");
                    if method.is_some() {
                        request_id = id;
                    }
                    if method.as_deref() == Some("tools/call")
                        && tool.as_deref() == Some(SUBMIT_JOB)
                    {
                        state.limiters.job(&caller.label)?;
                    }
                    let need = match (method.as_deref(), tool) {
                        (Some("tools/call"), Some(tool)) => Some(scope_of(&tool)),
                        (Some(m), _)
                            if m.starts_with("prompts/") || m.starts_with("resources/") =>
                        {
                            Some(SCOPE_TOOLS)
                        }
                        _ => None,
                    };
                    if let Some(need) = need
                        && !caller.allows(need)
                    {
                        return Err(ApiError::InsufficientScope(need));
                    }
                }
                Rpc::Batch => {
                    return Ok(rpc_error(
                        -32600,
                        "Invalid Request: JSON-RPC batches are not supported (MCP 2025-06-18 and later)",
                    ));
                }
                Rpc::NotJson => return Ok(rpc_error(-32700, "Parse error: the body is not JSON")),
                Rpc::Invalid => {
                    return Ok(rpc_error(
                        -32600,
                        "Invalid Request: not a JSON-RPC 2.0 message",
                    ));
                }
            }
        }
        Body::from(bytes)
    } else {
        body
    };
    let delete = parts.method == Method::DELETE;
    parts.extensions.insert(caller.clone());
    let req = Request::from_parts(parts, body);
    match (&session, initialize) {
        (None, true) => return open_session(state, &caller, req, next).await,
        (Some(s), _) if delete => {
            let res = next.run(req).await;
            if res.status().is_success() {
                state.sessions.forget(s);
            }
            return Ok(res);
        }
        _ => {}
    }
    // A request in a session: one id in flight once (rmcp routes answers by
    // id, so a second one would never be answered).
    let in_flight = match (&session, &request_id) {
        (Some(s), Some(id)) => match state.sessions.start(s, id) {
            Ok(guard) => guard,
            Err(NotStarted::Duplicate(id)) => {
                return Ok(rpc_refusal(
                    axum::http::StatusCode::BAD_REQUEST,
                    -32600,
                    &format!(
                        "Invalid Request: a request with id {id} is already in flight in this session"
                    ),
                    json!({"duplicate_id": serde_json::from_str::<Value>(&id).unwrap_or(Value::Null)}),
                    None,
                ));
            }
            Err(NotStarted::TooMany) => {
                return Ok(rpc_refusal(
                    axum::http::StatusCode::TOO_MANY_REQUESTS,
                    -32000,
                    &format!(
                        "Too many requests in flight in this session (at most {MAX_IN_FLIGHT})"
                    ),
                    json!({"max_in_flight": MAX_IN_FLIGHT}),
                    Some(1),
                ));
            }
        },
        _ => None,
    };
    let res = next.run(req).await;
    Ok(match in_flight {
        Some(guard) => res.map(|inner| {
            Body::new(Tracked {
                inner,
                _in_flight: guard,
            })
        }),
        None => res,
    })
}

/// An `initialize` without a session: admitted within the caller's and the
/// server's session limits (see [`SessionLimits`]), or refused with 429. The
/// request runs in its own task so the session rmcp opens for it is recorded
/// even if the client goes away before the answer.
pub(super) async fn open_session(
    state: &ApiState,
    caller: &Caller,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let opening = match state.sessions.admit(&caller.label).await {
        Ok(o) => o,
        Err(refusal) => {
            let (why, retry_after) = match refusal {
                Refusal::Full { retry_after } => (
                    format!(
                        "Too many MCP sessions are open on this server (at most {}); try again later",
                        state.mcp.session_limits.total
                    ),
                    retry_after,
                ),
                Refusal::CallerBusy { retry_after } => (
                    format!(
                        "This caller holds {} MCP sessions, each with a request in flight; end one (DELETE) or try again later",
                        state.mcp.session_limits.per_caller
                    ),
                    retry_after,
                ),
            };
            return Ok(rpc_refusal(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                -32000,
                &why,
                json!({"per_caller": state.mcp.session_limits.per_caller,
                       "total": state.mcp.session_limits.total}),
                Some(retry_after),
            ));
        }
    };
    let task = tokio::spawn(async move {
        let res = next.run(req).await;
        match res
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            Some(id) => opening.opened(id),
            None => drop(opening),
        }
        res
    });
    task.await
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("opening an MCP session: {e}")))
}
