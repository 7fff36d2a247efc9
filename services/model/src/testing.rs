//! A scripted model server on loopback for tests (feature `testing`).
//!
//! [`ScriptedModel`] binds `127.0.0.1:0` and serves both wires:
//! `POST /v1/messages` (Anthropic) and `POST /v1/chat/completions` or
//! `POST /chat/completions` (OpenAI). A script decides each reply from the wire
//! and the request body; every request is recorded in arrival order. The server
//! stops when the `ScriptedModel` is dropped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::Usage;

/// Which wire a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wire {
    Anthropic,
    OpenAi,
}

/// What the server answers to one request.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Value,
    /// Wait this long before answering (to exercise client timeouts).
    pub delay: Option<Duration>,
}

impl Reply {
    /// Any status and JSON body.
    pub fn json(status: u16, body: Value) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body,
            delay: None,
        }
    }

    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn with_delay(mut self, delay: Duration) -> Reply {
        self.delay = Some(delay);
        self
    }

    /// An Anthropic message with these content blocks (a JSON array).
    pub fn anthropic_message(content: Value, stop_reason: &str, usage: Usage) -> Reply {
        Reply::json(
            200,
            json!({
                "id": "msg_scripted",
                "type": "message",
                "role": "assistant",
                "model": "scripted",
                "content": content,
                "stop_reason": stop_reason,
                "stop_sequence": null,
                "usage": {
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                    "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                    "cache_read_input_tokens": usage.cache_read_input_tokens,
                },
            }),
        )
    }

    /// An Anthropic message calling one tool.
    pub fn anthropic_tool_use(id: &str, name: &str, input: Value, usage: Usage) -> Reply {
        Reply::anthropic_message(
            json!([{"type": "tool_use", "id": id, "name": name, "input": input}]),
            "tool_use",
            usage,
        )
    }

    /// An Anthropic message with one text block, ending the turn.
    pub fn anthropic_text(text: &str, usage: Usage) -> Reply {
        Reply::anthropic_message(json!([{"type": "text", "text": text}]), "end_turn", usage)
    }

    /// An Anthropic error body with this status and error type.
    pub fn anthropic_error(status: u16, error_type: &str, message: &str) -> Reply {
        Reply::json(
            status,
            json!({"type": "error", "error": {"type": error_type, "message": message}}),
        )
    }

    /// 529 `overloaded_error`, as documented at <https://docs.anthropic.com/en/api/errors>.
    pub fn overloaded() -> Reply {
        Reply::anthropic_error(529, "overloaded_error", "Overloaded")
    }

    /// 429 `rate_limit_error` with `retry-after` in seconds.
    pub fn rate_limited(retry_after_secs: u64) -> Reply {
        Reply::anthropic_error(
            429,
            "rate_limit_error",
            "Number of requests has exceeded your rate limit",
        )
        .with_header("retry-after", retry_after_secs.to_string())
    }

    /// A chat completion whose first choice is `message`.
    pub fn openai_message(message: Value, finish_reason: &str, usage: Usage) -> Reply {
        let prompt = usage.input_tokens + usage.cache_read_input_tokens;
        Reply::json(
            200,
            json!({
                "id": "chatcmpl-scripted",
                "object": "chat.completion",
                "created": 0,
                "model": "scripted",
                "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": usage.output_tokens,
                    "total_tokens": prompt + usage.output_tokens,
                    "prompt_tokens_details": {"cached_tokens": usage.cache_read_input_tokens},
                },
            }),
        )
    }

    /// A chat completion answering with text.
    pub fn openai_text(text: &str, usage: Usage) -> Reply {
        Reply::openai_message(json!({"role": "assistant", "content": text}), "stop", usage)
    }

    /// A chat completion calling tools: `(id, name, arguments)` where
    /// `arguments` is the raw JSON string the server sends.
    pub fn openai_tool_calls(calls: &[(&str, &str, &str)], usage: Usage) -> Reply {
        let calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, arguments)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
            })
            .collect();
        Reply::openai_message(
            json!({"role": "assistant", "content": null, "tool_calls": calls}),
            "tool_calls",
            usage,
        )
    }

    /// An OpenAI error body.
    pub fn openai_error(status: u16, message: &str) -> Reply {
        Reply::json(
            status,
            json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}}),
        )
    }
}

/// One request the server received.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    pub wire: Wire,
    pub path: String,
    /// Header names in lower case, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The JSON body (`Value::Null` when it was not JSON).
    pub body: Value,
}

impl Recorded {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

type Script = dyn Fn(Wire, &Value) -> Reply + Send + Sync;

struct Shared {
    script: Box<Script>,
    requests: Mutex<Vec<Recorded>>,
}

/// A loopback model server answering from a script. See the module doc.
pub struct ScriptedModel {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl ScriptedModel {
    /// Starts a server whose replies come from `script`. The script may be called
    /// concurrently.
    pub async fn start<F>(script: F) -> std::io::Result<ScriptedModel>
    where
        F: Fn(Wire, &Value) -> Reply + Send + Sync + 'static,
    {
        let shared = Arc::new(Shared {
            script: Box::new(script),
            requests: Mutex::new(Vec::new()),
        });
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let app = Router::new()
            .route("/v1/messages", post(anthropic))
            .route("/v1/chat/completions", post(openai))
            .route("/chat/completions", post(openai))
            .layer(DefaultBodyLimit::max(64 * 1024 * 1024))
            .with_state(shared.clone());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = rx.await;
            });
            if let Err(e) = serve.await {
                tracing::warn!(error = %e, "scripted model server failed");
            }
        });
        Ok(ScriptedModel {
            addr,
            shared,
            shutdown: Some(tx),
            task,
        })
    }

    /// Replies in this order, repeating the last one (an empty list answers 500).
    pub async fn sequence(replies: Vec<Reply>) -> std::io::Result<ScriptedModel> {
        let next = AtomicUsize::new(0);
        ScriptedModel::start(move |_, _| {
            let i = next.fetch_add(1, Ordering::SeqCst);
            replies
                .get(i)
                .or(replies.last())
                .cloned()
                .unwrap_or_else(|| Reply::json(500, json!({"error": "no scripted reply"})))
        })
        .await
    }

    /// `http://127.0.0.1:<port>`: the Anthropic base URL (and an OpenAI base
    /// for clients that append `/chat/completions` to a bare host).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:<port>/v1`: the OpenAI base URL, SDK style.
    pub fn openai_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        // Stop accepting, then drop the server task with any delayed replies.
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.task.abort();
    }
}

async fn anthropic(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    handle(shared, Wire::Anthropic, "/v1/messages", headers, body).await
}

async fn openai(
    State(shared): State<Arc<Shared>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(shared, Wire::OpenAi, uri.path(), headers, body).await
}

async fn handle(
    shared: Arc<Shared>,
    wire: Wire,
    path: &str,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    shared
        .requests
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Recorded {
            wire,
            path: path.to_owned(),
            headers: headers
                .iter()
                .map(|(n, v)| {
                    (
                        n.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: json.clone(),
        });
    let reply = if json.is_null() {
        Reply::json(400, json!({"error": {"message": "body is not JSON"}}))
    } else {
        (shared.script)(wire, &json)
    };
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut out_headers = HeaderMap::new();
    for (name, value) in &reply.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            out_headers.append(n, v);
        }
    }
    (status, out_headers, axum::Json(reply.body)).into_response()
}
