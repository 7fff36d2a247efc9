//! The Anthropic client against a scripted server on loopback.

// Helpers outside #[test] fns panic on purpose too: a panic is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use secrecy::SecretString;
use serde_json::{Value, json};
use trawl_model::anthropic::{BETA_ADVANCED_TOOL_USE, BETA_CODE_EXECUTION};
use trawl_model::testing::{Reply, ScriptedModel, Wire};
use trawl_model::{
    AnthropicClient, Block, ClientConfig, Message, ModelClient, Provider, Request, ResultPart,
    ServerTool, StopReason, Tool, ToolChoice, Usage,
};

/// Fails the test instead of hanging when a wait is not what it should be.
const GUARD: Duration = Duration::from_secs(20);

fn config(server: &ScriptedModel) -> ClientConfig {
    let _ = rustls::crypto::ring::default_provider().install_default();
    ClientConfig::anthropic()
        .with_base_url(server.url())
        .with_api_key(SecretString::from("sk-ant-test"))
        .with_retry_base_delay(Duration::from_millis(1))
        .with_retry_max_delay(Duration::from_millis(20))
}

fn client(config: ClientConfig) -> AnthropicClient {
    AnthropicClient::new(config).unwrap()
}

fn hello() -> Request {
    let mut req = Request::new("claude-sonnet-4-5", 512);
    req.messages.push(Message::user_text("hello"));
    req
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

async fn complete(
    client: &AnthropicClient,
    req: &Request,
) -> Result<trawl_model::Response, trawl_model::ModelError> {
    tokio::time::timeout(GUARD, client.complete(req))
        .await
        .expect("the call finished within the guard")
}

#[tokio::test]
async fn request_body_and_headers_follow_the_wire() {
    let server = ScriptedModel::start(|_, _| Reply::anthropic_text("ok", usage(1, 1)))
        .await
        .unwrap();
    let client = client(config(&server));
    assert_eq!(client.provider(), Provider::Anthropic);

    let mut search = Tool::new(
        "web_search",
        "Search the web",
        json!({"type": "object", "properties": {"q": {"type": "string"}}}),
    );
    search.input_examples = vec![json!({"q": "rust async"})];
    let mut fetch = Tool::new("fetch", "Fetch a page", json!({"type": "object"}));
    fetch.defer_loading = true;
    fetch.allowed_callers = vec!["code_execution_20250825".into()];

    let mut req = Request::new("claude-sonnet-4-5", 1024);
    req.system = Some("You research.".into());
    req.tools = vec![search, fetch];
    req.server_tools = vec![ServerTool::ToolSearchBm25, ServerTool::CodeExecution];
    req.tool_choice = Some(ToolChoice::Any);
    req.container = Some("container_7".into());
    req.messages = vec![
        Message::user_text("find tools"),
        Message::assistant(vec![Block::ToolUse {
            id: "toolu_1".into(),
            name: "find_tools".into(),
            input: json!({"query": "fetch"}),
            caller: None,
        }]),
        Message::user(vec![
            Block::ToolResult {
                tool_use_id: "toolu_1".into(),
                content: vec![ResultPart::ToolReference("fetch".into())],
                is_error: false,
            },
            Block::ToolResult {
                tool_use_id: "toolu_2".into(),
                content: vec![ResultPart::Text("boom".into())],
                is_error: true,
            },
        ]),
    ];
    let resp = complete(&client, &req).await.unwrap();
    assert_eq!(resp.text(), "ok");

    let recorded = server.requests();
    assert_eq!(recorded.len(), 1);
    let r = &recorded[0];
    assert_eq!((r.wire, r.path.as_str()), (Wire::Anthropic, "/v1/messages"));
    assert_eq!(r.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.header("anthropic-beta"),
        Some(format!("{BETA_ADVANCED_TOOL_USE},{BETA_CODE_EXECUTION}").as_str())
    );
    assert_eq!(
        r.body,
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": "You research.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "find tools"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "find_tools", "input": {"query": "fetch"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1",
                     "content": [{"type": "tool_reference", "tool_name": "fetch"}]},
                    {"type": "tool_result", "tool_use_id": "toolu_2",
                     "content": [{"type": "text", "text": "boom"}], "is_error": true},
                ]},
            ],
            "tools": [
                {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"},
                {"type": "code_execution_20250825", "name": "code_execution"},
                {"name": "web_search", "description": "Search the web",
                 "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
                 "input_examples": [{"q": "rust async"}]},
                {"name": "fetch", "description": "Fetch a page", "input_schema": {"type": "object"},
                 "defer_loading": true, "allowed_callers": ["code_execution_20250825"]},
            ],
            "tool_choice": {"type": "any"},
            "container": "container_7",
        })
    );
}

#[tokio::test]
async fn beta_header_only_when_a_beta_feature_is_used() {
    let server = ScriptedModel::start(|_, _| Reply::anthropic_text("ok", usage(1, 1)))
        .await
        .unwrap();
    let client = client(config(&server));

    let mut plain = hello();
    plain
        .tools
        .push(Tool::new("t", "d", json!({"type": "object"})));
    plain.tool_choice = Some(ToolChoice::None);
    complete(&client, &plain).await.unwrap();

    let mut examples = plain.clone();
    examples.tools[0].input_examples.push(json!({"x": 1}));
    complete(&client, &examples).await.unwrap();

    let recorded = server.requests();
    assert_eq!(recorded.len(), 2);
    assert_eq!(recorded[0].header("anthropic-beta"), None);
    assert_eq!(recorded[0].body["tool_choice"], json!({"type": "none"}));
    assert!(recorded[0].body.get("system").is_none());
    assert_eq!(
        recorded[1].header("anthropic-beta"),
        Some(BETA_ADVANCED_TOOL_USE)
    );
}

#[tokio::test]
async fn response_blocks_usage_and_unknown_blocks_round_trip() {
    let server_tool_use = json!({
        "type": "server_tool_use", "id": "srvtoolu_1", "name": "tool_search_tool_bm25",
        "input": {"query": "weather"}
    });
    let search_result = json!({
        "type": "tool_search_tool_result", "tool_use_id": "srvtoolu_1",
        "content": {"type": "tool_search_tool_search_result",
                    "tool_references": [{"type": "tool_reference", "tool_name": "get_weather"}]}
    });
    let caller = json!({"type": "code_execution_20250825", "tool_id": "srvtoolu_2"});
    let content = json!([
        {"type": "text", "text": "Let me look. "},
        server_tool_use,
        search_result,
        {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Oslo"}, "caller": caller},
    ]);
    let first = Reply::anthropic_message(
        content,
        "tool_use",
        Usage {
            input_tokens: 12,
            output_tokens: 34,
            cache_creation_input_tokens: 56,
            cache_read_input_tokens: 78,
        },
    );
    let mut first_body = first.body.clone();
    first_body["container"] = json!({"id": "container_1", "expires_at": "2030-01-01T00:00:00Z"});
    let first = Reply::json(200, first_body);
    let server = ScriptedModel::sequence(vec![first, Reply::anthropic_text("Sunny.", usage(1, 2))])
        .await
        .unwrap();
    let client = client(config(&server));

    let mut req = hello();
    let resp = complete(&client, &req).await.unwrap();
    assert_eq!(resp.id, "msg_scripted");
    assert_eq!(resp.stop_reason, StopReason::ToolUse);
    assert_eq!(
        resp.usage,
        Usage {
            input_tokens: 12,
            output_tokens: 34,
            cache_creation_input_tokens: 56,
            cache_read_input_tokens: 78,
        }
    );
    assert_eq!(resp.container.as_deref(), Some("container_1"));
    assert_eq!(resp.text(), "Let me look. ");
    assert_eq!(resp.content[1], Block::Other(server_tool_use.clone()));
    assert_eq!(resp.content[2], Block::Other(search_result.clone()));
    assert_eq!(
        resp.tool_uses().collect::<Vec<_>>(),
        vec![("toolu_9", "get_weather", &json!({"city": "Oslo"}))]
    );

    // Next turn: the assistant content goes back unchanged, with the result.
    req.messages.push(Message::assistant(resp.content.clone()));
    req.messages.push(Message::user(vec![Block::tool_result(
        "toolu_9",
        "12 °C, sunny",
    )]));
    req.container = resp.container.clone();
    let resp = complete(&client, &req).await.unwrap();
    assert_eq!(resp.text(), "Sunny.");
    assert_eq!(resp.stop_reason, StopReason::EndTurn);

    let recorded = server.requests();
    assert_eq!(recorded.len(), 2);
    let sent = &recorded[1].body;
    assert_eq!(
        sent["messages"][1],
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "Let me look. "},
            server_tool_use,
            search_result,
            {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Oslo"}, "caller": caller},
        ]})
    );
    assert_eq!(
        sent["messages"][2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_9", "content": [{"type": "text", "text": "12 °C, sunny"}]}
        ]})
    );
    assert_eq!(sent["container"], "container_1");
    // A tool_use with a caller is programmatic tool calling: the beta goes along.
    assert_eq!(
        recorded[1].header("anthropic-beta"),
        Some(BETA_ADVANCED_TOOL_USE)
    );
}

#[tokio::test]
async fn overloaded_then_success_is_retried() {
    let server = ScriptedModel::sequence(vec![
        Reply::overloaded(),
        Reply::anthropic_text("ok", usage(3, 4)),
    ])
    .await
    .unwrap();
    let client = client(config(&server));
    let resp = complete(&client, &hello()).await.unwrap();
    assert_eq!(resp.text(), "ok");
    assert_eq!(resp.usage, usage(3, 4));
    let recorded = server.requests();
    assert_eq!(recorded.len(), 2);
    assert_eq!(recorded[0].body, recorded[1].body);
}

#[tokio::test]
async fn overloaded_every_time_gives_up_after_max_attempts() {
    let server = ScriptedModel::start(|_, _| Reply::overloaded())
        .await
        .unwrap();
    let client = client(config(&server).with_max_attempts(3));
    let e = complete(&client, &hello()).await.unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.status, e.transient, e.message.as_str()),
        ("overloaded", Some(529), true, "Overloaded")
    );
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn rate_limit_retry_after_is_honoured() {
    // The backoff alone would wait at least 60 s before the retry; the server
    // says retry-after: 0, so the retry comes at once (well within the guard).
    let server = ScriptedModel::sequence(vec![
        Reply::rate_limited(0),
        Reply::anthropic_text("ok", usage(1, 1)),
    ])
    .await
    .unwrap();
    let client = client(
        config(&server)
            .with_retry_base_delay(Duration::from_secs(60))
            .with_retry_max_delay(Duration::from_secs(120)),
    );
    let resp = complete(&client, &hello()).await.unwrap();
    assert_eq!(resp.text(), "ok");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn rate_limit_retry_after_is_capped_at_the_max_delay() {
    // retry-after: 3600 would outlast the guard; the 20 ms cap applies instead.
    let server = ScriptedModel::sequence(vec![
        Reply::rate_limited(3600),
        Reply::anthropic_text("ok", usage(1, 1)),
    ])
    .await
    .unwrap();
    let client = client(config(&server));
    let resp = complete(&client, &hello()).await.unwrap();
    assert_eq!(resp.text(), "ok");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn bad_request_is_permanent_and_not_retried() {
    let server = ScriptedModel::start(|_, _| {
        Reply::anthropic_error(
            400,
            "invalid_request_error",
            "max_tokens: must be at least 1",
        )
    })
    .await
    .unwrap();
    let client = client(config(&server));
    let e = complete(&client, &hello()).await.unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.status, e.transient, e.message.as_str()),
        (
            "bad_request",
            Some(400),
            false,
            "max_tokens: must be at least 1"
        )
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn auth_error_is_permanent() {
    let server = ScriptedModel::start(|_, _| {
        Reply::anthropic_error(401, "authentication_error", "invalid x-api-key")
    })
    .await
    .unwrap();
    let client = client(config(&server));
    let e = complete(&client, &hello()).await.unwrap_err();
    assert_eq!((e.code.as_str(), e.transient), ("auth", false));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn unparseable_success_body_is_a_permanent_bad_response() {
    let server = ScriptedModel::start(|_, _| {
        Reply::json(200, json!({"type": "message", "content": "nope"}))
    })
    .await
    .unwrap();
    let client = client(config(&server));
    let e = complete(&client, &hello()).await.unwrap_err();
    assert_eq!((e.code.as_str(), e.transient), ("bad_response", false));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn slow_answers_time_out_as_transient_after_every_attempt() {
    let server = ScriptedModel::start(|_, _| {
        Reply::anthropic_text("too late", usage(1, 1)).with_delay(Duration::from_secs(30))
    })
    .await
    .unwrap();
    let client = client(
        config(&server)
            .with_timeout(Duration::from_millis(200))
            .with_max_attempts(2),
    );
    let e = complete(&client, &hello()).await.unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.status, e.transient),
        ("timeout", None, true)
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn concurrent_calls_share_one_client_and_server() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let server = ScriptedModel::start(move |_, body: &Value| {
        seen.fetch_add(1, Ordering::SeqCst);
        let question = body["messages"][0]["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        Reply::anthropic_text(&format!("re: {question}"), usage(1, 1))
            .with_delay(Duration::from_millis(50))
    })
    .await
    .unwrap();
    let client = Arc::new(client(config(&server)));
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut req = Request::new("m", 10);
                req.messages.push(Message::user_text(format!("q{i}")));
                client.complete(&req).await.map(|r| r.text())
            })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        let text = tokio::time::timeout(GUARD, t)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(text, format!("re: q{i}"));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 8);
    assert_eq!(server.requests().len(), 8);
}

#[tokio::test]
async fn no_key_sends_no_x_api_key() {
    let server = ScriptedModel::start(|_, _| Reply::anthropic_text("ok", usage(1, 1)))
        .await
        .unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client =
        AnthropicClient::new(ClientConfig::anthropic().with_base_url(format!("{}/", server.url())))
            .unwrap();
    complete(&client, &hello()).await.unwrap();
    let recorded = server.requests();
    assert_eq!(recorded[0].path, "/v1/messages");
    assert_eq!(recorded[0].header("x-api-key"), None);
}
