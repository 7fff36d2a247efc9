//! The OpenAI-compatible client against a scripted server on loopback.

// Helpers outside #[test] fns panic on purpose too: a panic is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use secrecy::SecretString;
use serde_json::json;
use trawl_model::testing::{Reply, ScriptedModel, Wire};
use trawl_model::{
    Block, ClientConfig, Message, ModelClient, OpenAiClient, Provider, Request, ResultPart,
    ServerTool, StopReason, Tool, ToolChoice, Usage,
};

const GUARD: Duration = Duration::from_secs(20);

fn config(server: &ScriptedModel) -> ClientConfig {
    let _ = rustls::crypto::ring::default_provider().install_default();
    ClientConfig::openai()
        .with_base_url(server.openai_url())
        .with_retry_base_delay(Duration::from_millis(1))
        .with_retry_max_delay(Duration::from_millis(20))
}

async fn complete(
    client: &OpenAiClient,
    req: &Request,
) -> Result<trawl_model::Response, trawl_model::ModelError> {
    tokio::time::timeout(GUARD, client.complete(req))
        .await
        .expect("the call finished within the guard")
}

fn hello() -> Request {
    let mut req = Request::new("qwen3-32b", 256);
    req.messages.push(Message::user_text("hello"));
    req
}

#[tokio::test]
async fn conversation_with_tool_calls_and_results_maps_to_chat_messages() {
    let server = ScriptedModel::start(|_, _| Reply::openai_text("done", Usage::default()))
        .await
        .unwrap();
    let client = OpenAiClient::new(config(&server)).unwrap();
    assert_eq!(client.provider(), Provider::OpenAi);

    let mut search = Tool::new("search", "Search the web.", json!({"type": "object"}));
    search.input_examples = vec![json!({"q": "rust"}), json!({"q": "tokio", "limit": 3})];
    search.allowed_callers = vec!["code_execution_20250825".into()];
    let mut deferred = Tool::new("fetch", "Fetch a page.", json!({"type": "object"}));
    deferred.defer_loading = true;

    let mut req = Request::new("qwen3-32b", 700);
    req.system = Some("Be brief.".into());
    req.tools = vec![search, deferred];
    req.server_tools = vec![ServerTool::CodeExecution];
    req.tool_choice = Some(ToolChoice::Tool("search".into()));
    req.messages = vec![
        Message::user_text("What is new in Rust?"),
        Message::assistant(vec![
            Block::Other(json!({"type": "thinking", "thinking": "hmm", "signature": "x"})),
            Block::text("Searching."),
            Block::ToolUse {
                id: "call_1".into(),
                name: "search".into(),
                input: json!({"q": "rust 1.95"}),
                caller: None,
            },
            Block::ToolUse {
                id: "call_2".into(),
                name: "find_tools".into(),
                input: json!({}),
                caller: None,
            },
        ]),
        Message::user(vec![
            Block::ToolResult {
                tool_use_id: "call_1".into(),
                content: vec![ResultPart::Text("rate limited".into())],
                is_error: true,
            },
            Block::ToolResult {
                tool_use_id: "call_2".into(),
                content: vec![
                    ResultPart::Text("found:".into()),
                    ResultPart::ToolReference("fetch".into()),
                ],
                is_error: false,
            },
            Block::text("Try again."),
        ]),
    ];
    let resp = complete(&client, &req).await.unwrap();
    assert_eq!(resp.text(), "done");
    assert_eq!(resp.stop_reason, StopReason::EndTurn);

    let recorded = server.requests();
    assert_eq!(recorded.len(), 1);
    assert_eq!(
        (recorded[0].wire, recorded[0].path.as_str()),
        (Wire::OpenAi, "/v1/chat/completions")
    );
    assert_eq!(
        recorded[0].body,
        json!({
            "model": "qwen3-32b",
            "max_tokens": 700,
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is new in Rust?"},
                {"role": "assistant", "content": "Searching.", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{\"q\":\"rust 1.95\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "find_tools", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "error: rate limited"},
                {"role": "tool", "tool_call_id": "call_2", "content": "found:\ntool available: fetch"},
                {"role": "user", "content": "Try again."},
            ],
            "tools": [
                {"type": "function", "function": {
                    "name": "search",
                    "description": "Search the web.\n\nExample inputs:\n{\"q\":\"rust\"}\n{\"limit\":3,\"q\":\"tokio\"}",
                    "parameters": {"type": "object"},
                }},
            ],
            "tool_choice": {"type": "function", "function": {"name": "search"}},
        })
    );
}

#[tokio::test]
async fn tool_calls_unparseable_arguments_and_usage_are_decoded() {
    let usage = Usage {
        input_tokens: 100,
        output_tokens: 20,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 40,
    };
    let server = ScriptedModel::start(move |_, _| {
        Reply::openai_tool_calls(
            &[
                ("call_a", "search", r#"{"q": "rust"}"#),
                ("call_b", "fetch", r#"{"url": "http://x"#),
            ],
            usage,
        )
    })
    .await
    .unwrap();
    let client = OpenAiClient::new(config(&server)).unwrap();
    let resp = complete(&client, &hello()).await.unwrap();

    // The wire said prompt_tokens 140 of which 40 cached.
    let sent = &server.requests()[0];
    assert_eq!(
        sent.body["messages"],
        json!([{"role": "user", "content": "hello"}])
    );
    assert_eq!(resp.usage, usage);
    assert_eq!(resp.stop_reason, StopReason::ToolUse);
    assert_eq!(resp.id, "chatcmpl-scripted");
    assert_eq!(resp.container, None);
    assert_eq!(
        resp.tool_uses().collect::<Vec<_>>(),
        vec![
            ("call_a", "search", &json!({"q": "rust"})),
            (
                "call_b",
                "fetch",
                &json!({"_unparsed": r#"{"url": "http://x"#})
            ),
        ]
    );
    assert!(
        resp.content
            .iter()
            .all(|b| matches!(b, Block::ToolUse { caller: None, .. }))
    );
}

#[tokio::test]
async fn authorization_only_with_a_key() {
    let server = ScriptedModel::start(|_, _| Reply::openai_text("ok", Usage::default()))
        .await
        .unwrap();
    let keyless = OpenAiClient::new(config(&server)).unwrap();
    complete(&keyless, &hello()).await.unwrap();
    let keyed =
        OpenAiClient::new(config(&server).with_api_key(SecretString::from("sk-test"))).unwrap();
    complete(&keyed, &hello()).await.unwrap();

    let recorded = server.requests();
    assert_eq!(recorded.len(), 2);
    assert_eq!(recorded[0].header("authorization"), None);
    assert_eq!(recorded[1].header("authorization"), Some("Bearer sk-test"));
    assert_eq!(recorded[1].header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn bare_host_base_url_reaches_chat_completions() {
    let server = ScriptedModel::start(|_, _| Reply::openai_text("ok", Usage::default()))
        .await
        .unwrap();
    let client = OpenAiClient::new(config(&server).with_base_url(server.url())).unwrap();
    complete(&client, &hello()).await.unwrap();
    assert_eq!(server.requests()[0].path, "/chat/completions");
}

#[tokio::test]
async fn rate_limit_then_success_honours_retry_after() {
    // Backoff alone would wait at least 60 s; retry-after: 0 makes it immediate.
    let server = ScriptedModel::sequence(vec![
        Reply::openai_error(429, "Rate limit reached").with_header("retry-after", "0"),
        Reply::openai_text("ok", Usage::default()),
    ])
    .await
    .unwrap();
    let client = OpenAiClient::new(
        config(&server)
            .with_retry_base_delay(Duration::from_secs(60))
            .with_retry_max_delay(Duration::from_secs(120)),
    )
    .unwrap();
    assert_eq!(complete(&client, &hello()).await.unwrap().text(), "ok");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn server_errors_are_retried_and_client_errors_are_not() {
    let server = ScriptedModel::sequence(vec![
        Reply::openai_error(503, "loading model"),
        Reply::openai_error(404, "model 'nope' not found"),
        Reply::openai_text("unreachable", Usage::default()),
    ])
    .await
    .unwrap();
    let client = OpenAiClient::new(config(&server)).unwrap();
    let e = complete(&client, &hello()).await.unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.status, e.transient, e.message.as_str()),
        ("not_found", Some(404), false, "model 'nope' not found")
    );
    assert_eq!(server.requests().len(), 2);
}
