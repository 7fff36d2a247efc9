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
    /// A JSON-RPC message (request, notification or response) that rmcp reads as
    /// what it says it is, with its method, for `tools/call` its tool, and its id
    /// as JSON text (`5`, `"a"`; `None` when absent).
    Message {
        method: Option<String>,
        tool: Option<String>,
        id: Option<String>,
    },
    /// A JSON array: batching was removed from MCP in 2025-06-18.
    Batch,
    /// Not JSON at all (JSON-RPC -32700).
    NotJson,
    /// JSON, but not a JSON-RPC 2.0 message as MCP has them (JSON-RPC -32600):
    /// the text says what is wrong.
    Invalid(String),
    /// A request for one of MCP's methods whose `params` do not fit it
    /// (JSON-RPC -32602), answered with the request's id (JSON text). rmcp would
    /// take it for an unknown custom request.
    InvalidParams {
        id: String,
        method: String,
        reason: String,
    },
}

/// The requests a client may send, by method: one that names a method here
/// but that rmcp cannot read as that request has invalid params.
const CLIENT_REQUESTS: &[&str] = &[
    "ping",
    "initialize",
    "server/discover",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "subscriptions/listen",
    "resources/subscribe",
    "resources/unsubscribe",
    "tools/call",
    "tools/list",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "skills/list",
    "skills/get",
    "resources/directory/read",
];

/// Why `params` do not fit `method`, in serde's words where trawl knows the
/// type rmcp reads them into.
#[allow(deprecated)] // `logging/setLevel`: part of 2025-11-25.
fn params_misfit(method: &str, params: Option<&Value>) -> String {
    use rmcp::model::{
        CallToolRequestParams, CompleteRequestParams, GetPromptRequestParams,
        InitializeRequestParams, ReadResourceRequestParams, SetLevelRequestParams,
        SubscribeRequestParams, UnsubscribeRequestParams,
    };
    fn fit<T: serde::de::DeserializeOwned>(params: Option<&Value>) -> Option<String> {
        let Some(p) = params else {
            return Some("params are required".to_owned());
        };
        serde_json::from_value::<T>(p.clone())
            .err()
            .map(|e| e.to_string())
    }
    let why = match method {
        "initialize" => fit::<InitializeRequestParams>(params),
        "tools/call" => fit::<CallToolRequestParams>(params),
        "logging/setLevel" => fit::<SetLevelRequestParams>(params).map(|e| {
            format!("{e} (levels: debug, info, notice, warning, error, critical, alert, emergency)")
        }),
        "prompts/get" => fit::<GetPromptRequestParams>(params),
        "resources/read" => fit::<ReadResourceRequestParams>(params),
        "resources/subscribe" => fit::<SubscribeRequestParams>(params),
        "resources/unsubscribe" => fit::<UnsubscribeRequestParams>(params),
        "completion/complete" => fit::<CompleteRequestParams>(params),
        _ => None,
    };
    why.unwrap_or_else(|| "they do not fit the method".to_owned())
}

/// Whether `id` is an id JSON-RPC and MCP allow: a string or an integer (MCP
/// forbids `null`; JSON-RPC discourages fractions, and rmcp reads none).
fn valid_id(id: &Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}

/// Reads a POST body to `/mcp` without trusting it (public for the fuzz target).
/// The one place a body is checked before rmcp sees it: the JSON-RPC 2.0 shape,
/// then the message as rmcp reads it, so that every body rmcp is handed is one
/// it reads as what it says it is.
pub fn read_rpc(body: &[u8]) -> Rpc {
    use rmcp::model::{ClientJsonRpcMessage, ClientRequest};
    let doc: Value = match serde_json::from_slice(body) {
        Ok(doc) => doc,
        Err(_) => return Rpc::NotJson,
    };
    let invalid = |why: &str| Rpc::Invalid(format!("Invalid Request: {why}"));
    let msg = match &doc {
        Value::Array(_) => return Rpc::Batch,
        Value::Object(m) => m,
        _ => return invalid("a JSON-RPC message is a JSON object"),
    };
    if msg.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("jsonrpc must be \"2.0\"");
    }
    let id = match msg.get("id") {
        None => None,
        Some(id) if valid_id(id) => Some(id.to_string()),
        Some(_) => return invalid("id must be a string or an integer (not null)"),
    };
    let method = match msg.get("method") {
        None => None,
        Some(Value::String(m)) => Some(m.clone()),
        Some(_) => return invalid("method must be a string"),
    };
    let params = msg.get("params");
    match (&method, params) {
        (Some(_), None | Some(Value::Object(_))) => {}
        (Some(_), Some(_)) => return invalid("params must be an object"),
        (None, _) if id.is_none() => {
            return invalid("a request or notification needs a method, a response an id");
        }
        (None, _) if msg.contains_key("result") == msg.contains_key("error") => {
            return invalid("a message without a method is a response: result or error");
        }
        (None, _) => {}
    }
    let parsed = match serde_json::from_value::<ClientJsonRpcMessage>(doc.clone()) {
        Ok(m) => m,
        Err(e) => return invalid(&format!("not a message of an MCP client: {e}")),
    };
    if let (ClientJsonRpcMessage::Request(r), Some(id), Some(m)) = (&parsed, &id, &method)
        && let ClientRequest::CustomRequest(_) = &r.request
        && CLIENT_REQUESTS.contains(&m.as_str())
    {
        return Rpc::InvalidParams {
            id: id.clone(),
            method: m.clone(),
            reason: params_misfit(m, params),
        };
    }
    let tool = match &parsed {
        ClientJsonRpcMessage::Request(r) => match &r.request {
            ClientRequest::CallToolRequest(call) => Some(call.params.name.to_string()),
            _ => None,
        },
        _ => None,
    };
    Rpc::Message { method, tool, id }
}

/// The JSON-RPC error answering the request `id` (JSON text) with `code`:
/// HTTP 200 with the error as its one JSON object, as Streamable HTTP answers a
/// request. The request never reached rmcp.
pub(super) fn rpc_answer(id: &str, code: i64, message: &str) -> Response {
    let id = serde_json::from_str::<Value>(id).unwrap_or(Value::Null);
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    (
        axum::http::StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.to_string(),
    )
        .into_response()
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
                Rpc::Invalid(why) => return Ok(rpc_error(-32600, &why)),
                Rpc::InvalidParams { id, method, reason } => {
                    // Outside a live session, rmcp's answer (400 or 404) comes first:
                    // a request naming its protocol version without a session is
                    // a stateless (2026-07-28) one, where `initialize` is a
                    // removed method (404, -32601), not one opening a session.
                    let live = match &session {
                        Some(s) => state.sessions.is_open(s).await,
                        None => {
                            method == "initialize" && !headers.contains_key("mcp-protocol-version")
                        }
                    };
                    if live {
                        return Ok(rpc_answer(
                            &id,
                            -32602,
                            &format!("Invalid params for {method}: {reason}"),
                        ));
                    }
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
            // rmcp answers 202 to closing a session it does not have.
            if !state.sessions.is_open(s).await {
                state.sessions.forget(s);
                return Err(ApiError::NotFound("such MCP session".to_owned()));
            }
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
