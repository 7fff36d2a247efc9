//! `/mcp` answers every invalid JSON-RPC message with the error the JSON-RPC 2.0
//! and MCP specifications name, and the right HTTP status: through the whole
//! router (guard, then rmcp's Streamable HTTP service), over the embedded
//! adapters, each test with its own store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use secrecy::SecretString;
use serde_json::{Value, json};
use tempfile::TempDir;
use tower::ServiceExt;
use trawl_api::testing::EmbeddedApi;
use trawl_api::{ApiKey, Auth, router};

const KEY: &str = "test-key-mcp-0123456789";

struct App {
    router: Router,
    _dir: TempDir,
}

struct Answer {
    status: StatusCode,
    content_type: Option<String>,
    session: Option<String>,
    body: String,
}

impl Answer {
    /// The one JSON-RPC message of the answer, as JSON or as the `data:` of
    /// its SSE event.
    fn message(&self) -> Value {
        let text = if self.content_type.as_deref() == Some("text/event-stream") {
            self.body
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim)
                .find(|d| !d.is_empty())
                .unwrap_or_default()
                .to_owned()
        } else {
            self.body.clone()
        };
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// Asserts a JSON-RPC error with `code` under `status`, answering `id`.
    fn rpc_error(&self, status: u16, code: i64, id: &Value) -> Value {
        assert_eq!(self.status.as_u16(), status, "{}", self.body);
        let m = self.message();
        assert_eq!(m["jsonrpc"], "2.0", "{m}");
        assert_eq!(m["error"]["code"], code, "{m}");
        assert_eq!(&m["id"], id, "{m}");
        assert!(
            m["error"]["message"]
                .as_str()
                .is_some_and(|t| !t.is_empty()),
            "{m}"
        );
        m
    }
}

async fn spawn_app() -> App {
    let api = EmbeddedApi::new(Auth::Keys(vec![
        ApiKey::from(SecretString::from(KEY)).admin(),
    ]))
    .await
    .unwrap();
    App {
        router: router(api.state),
        _dir: api.dir,
    }
}

impl App {
    async fn send(&self, method: Method, session: Option<&str>, body: Body) -> Answer {
        let mut req = Request::builder()
            .method(method)
            .uri("/mcp")
            .header(header::HOST, "127.0.0.1")
            .header(header::AUTHORIZATION, format!("Bearer {KEY}"))
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(s) = session {
            req = req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-11-25");
        }
        let res = self
            .router
            .clone()
            .oneshot(req.body(body).unwrap())
            .await
            .unwrap();
        let status = res.status();
        let header = |name| {
            res.headers()
                .get(name)
                .map(|v: &header::HeaderValue| v.to_str().unwrap().to_owned())
        };
        let content_type = header("content-type");
        let session = header("mcp-session-id");
        // An SSE answer to one request ends after its message.
        let body = tokio::time::timeout(
            Duration::from_secs(10),
            axum::body::to_bytes(res.into_body(), usize::MAX),
        )
        .await
        .expect("the answer ends")
        .unwrap();
        Answer {
            status,
            content_type: content_type
                .map(|c| c.split(';').next().unwrap_or_default().trim().to_owned()),
            session,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    async fn post(&self, session: Option<&str>, body: impl Into<Body>) -> Answer {
        self.send(Method::POST, session, body.into()).await
    }

    async fn rpc(&self, session: Option<&str>, msg: &Value) -> Answer {
        self.post(session, msg.to_string()).await
    }

    /// An initialized session's id.
    async fn session(&self) -> String {
        let a = self
            .rpc(
                None,
                &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"}}}),
            )
            .await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        assert!(
            a.message()["result"]["serverInfo"].is_object(),
            "{}",
            a.body
        );
        let id = a.session.expect("a session id");
        let n = self
            .rpc(
                Some(&id),
                &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await;
        assert_eq!(n.status, StatusCode::ACCEPTED, "{}", n.body);
        id
    }
}

#[tokio::test]
async fn unparseable_json_is_a_parse_error() {
    let app = spawn_app().await;
    let s = app.session().await;
    for body in ["{", "not json", "{\"jsonrpc\": \"2.0\", \"id\": 1,"] {
        app.post(Some(&s), body)
            .await
            .rpc_error(400, -32700, &Value::Null);
    }
}

#[tokio::test]
async fn messages_that_are_not_json_rpc_requests_are_invalid_requests() {
    let app = spawn_app().await;
    let s = app.session().await;
    for msg in [
        json!({"jsonrpc": "2.0", "id": null, "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": {"n": 1}, "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": [1], "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1, 2]}),
        json!({"jsonrpc": "2.0", "id": 1}),
        json!({"id": 1, "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": 1, "method": 5}),
        json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]),
        json!("ping"),
    ] {
        let a = app.rpc(Some(&s), &msg).await;
        assert_eq!(a.content_type.as_deref(), Some("application/json"), "{msg}");
        a.rpc_error(400, -32600, &Value::Null);
    }
    // Without a session, too, before anything else is looked at.
    app.rpc(
        None,
        &json!({"jsonrpc": "2.0", "id": null, "method": "initialize"}),
    )
    .await
    .rpc_error(400, -32600, &Value::Null);
    // The session is still usable.
    let ok = app
        .rpc(
            Some(&s),
            &json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}),
        )
        .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    assert_eq!(ok.message()["id"], 9);
}

#[tokio::test]
async fn an_unknown_method_is_method_not_found() {
    let app = spawn_app().await;
    let s = app.session().await;
    let a = app
        .rpc(
            Some(&s),
            &json!({"jsonrpc": "2.0", "id": "u", "method": "tools/teleport", "params": {}}),
        )
        .await;
    a.rpc_error(200, -32601, &json!("u"));
}

#[tokio::test]
async fn tools_call_with_params_that_do_not_fit_is_invalid_params() {
    let app = spawn_app().await;
    let s = app.session().await;
    for (i, params) in [
        json!({"name": "research.job_status", "arguments": 42}),
        json!({"arguments": {"job_id": "x"}}),
        json!({"name": 7, "arguments": {}}),
        json!({"name": ["research.job_status"]}),
    ]
    .into_iter()
    .enumerate()
    {
        let a = app
            .rpc(
                Some(&s),
                &json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params}),
            )
            .await;
        let m = a.rpc_error(200, -32602, &json!(i));
        assert!(
            m["error"]["message"]
                .as_str()
                .unwrap()
                .contains("tools/call"),
            "{m}"
        );
    }
    // `params` missing altogether.
    app.rpc(
        Some(&s),
        &json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call"}),
    )
    .await
    .rpc_error(200, -32602, &json!(99));
}

#[tokio::test]
async fn logging_levels_are_checked() {
    let app = spawn_app().await;
    let s = app.session().await;
    let set = |id: i64, level: Value| json!({"jsonrpc": "2.0", "id": id, "method": "logging/setLevel", "params": {"level": level}});
    for (id, level) in [(1, json!("loud")), (2, json!(3)), (3, json!("ERROR"))] {
        app.rpc(Some(&s), &set(id, level))
            .await
            .rpc_error(200, -32602, &json!(id));
    }
    let ok = app.rpc(Some(&s), &set(4, json!("warning"))).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    let m = ok.message();
    assert_eq!(m["id"], 4, "{m}");
    assert!(m.get("error").is_none(), "{m}");
    assert!(m["result"].is_object(), "{m}");
}

#[tokio::test]
async fn initialize_without_params_is_invalid_params() {
    let app = spawn_app().await;
    let a = app
        .rpc(
            None,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize"}),
        )
        .await;
    let m = a.rpc_error(200, -32602, &json!(1));
    assert!(
        m["error"]["message"]
            .as_str()
            .unwrap()
            .contains("params are required"),
        "{m}"
    );
    assert!(a.session.is_none(), "no session is opened");
    let a = app
        .rpc(
            None,
            &json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"capabilities": {}}}),
        )
        .await;
    a.rpc_error(200, -32602, &json!(2));
}

#[tokio::test]
async fn deleting_a_session_never_issued_or_already_deleted_is_not_found() {
    let app = spawn_app().await;
    let never = app
        .send(
            Method::DELETE,
            Some("0b7c2a5e-0000-4000-8000-000000000000"),
            Body::empty(),
        )
        .await;
    assert_eq!(never.status, StatusCode::NOT_FOUND, "{}", never.body);

    let s = app.session().await;
    let first = app.send(Method::DELETE, Some(&s), Body::empty()).await;
    assert!(
        first.status.is_success(),
        "{}: {}",
        first.status,
        first.body
    );
    let again = app.send(Method::DELETE, Some(&s), Body::empty()).await;
    assert_eq!(again.status, StatusCode::NOT_FOUND, "{}", again.body);
    // And the session is gone for other requests too.
    let after = app
        .rpc(
            Some(&s),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        )
        .await;
    assert_eq!(after.status, StatusCode::NOT_FOUND, "{}", after.body);
}
