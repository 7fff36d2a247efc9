//! The Anthropic Messages API: `POST {base}/v1/messages`.
//!
//! Wire format as documented at <https://docs.anthropic.com/en/api/messages>
//! (request: `model`, `max_tokens`, `system`, `messages` of content blocks, `tools`,
//! `tool_choice`, `container`; response: `content`, `stop_reason`, `usage`,
//! `container`). Beta features and their `anthropic-beta` names:
//!
//! * `advanced-tool-use-2025-11-20` — tool search (`defer_loading`,
//!   `tool_reference` results, the `tool_search_tool_bm25_20251119` server tool),
//!   tool use examples (`input_examples`) and programmatic tool calling
//!   (`allowed_callers`, `caller` on `tool_use`): "To use this feature, add the
//!   "advanced-tool-use-2025-11-20" beta header" in
//!   <https://platform.claude.com/docs/en/agents-and-tools/tool-use/programmatic-tool-calling>,
//!   and the same header for <https://platform.claude.com/docs/en/agents-and-tools/tool-use/tool-search-tool>.
//! * `code-execution-2025-08-25` — the `code_execution_20250825` server tool, per
//!   <https://platform.claude.com/docs/en/agents-and-tools/tool-use/code-execution-tool>.
//!
//! The header is sent only when the request uses one of these features.

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use secrecy::ExposeSecret;
use serde_json::{Map, Value, json};

use crate::http::{self, RetryPolicy};
use crate::{
    Block, ClientConfig, Message, ModelClient, ModelError, Provider, Request, Response, ResultPart,
    Role, ServerTool, StopReason, ToolChoice, Usage,
};

/// `anthropic-version` sent on every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// Beta for tool search, tool use examples and programmatic tool calling.
pub const BETA_ADVANCED_TOOL_USE: &str = "advanced-tool-use-2025-11-20";
/// Beta for the `code_execution_20250825` server tool.
pub const BETA_CODE_EXECUTION: &str = "code-execution-2025-08-25";

/// A [`ModelClient`] speaking the Anthropic Messages API.
#[derive(Clone, Debug)]
pub struct AnthropicClient {
    http: reqwest::Client,
    url: String,
    headers: HeaderMap,
    policy: RetryPolicy,
}

impl AnthropicClient {
    /// Fails when the API key is not a valid header value or no rustls crypto
    /// provider is installed.
    pub fn new(config: ClientConfig) -> Result<AnthropicClient, ModelError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        if let Some(key) = &config.api_key {
            let mut value = HeaderValue::from_str(key.expose_secret())
                .map_err(|_| ModelError::config("ANTHROPIC_API_KEY is not a valid header value"))?;
            value.set_sensitive(true);
            headers.insert(HeaderName::from_static("x-api-key"), value);
        }
        Ok(AnthropicClient {
            http: http::build_client(config.timeout)?,
            url: config.endpoint("/v1/messages"),
            headers,
            policy: config.retry_policy(),
        })
    }
}

#[async_trait]
impl ModelClient for AnthropicClient {
    fn provider(&self) -> Provider {
        Provider::Anthropic
    }

    #[tracing::instrument(name = "model.complete", skip_all, fields(provider = "anthropic", model = %req.model))]
    async fn complete(&self, req: &Request) -> Result<Response, ModelError> {
        let body = encode_request(req);
        let mut headers = self.headers.clone();
        let betas = betas(req);
        if !betas.is_empty() {
            let value = HeaderValue::from_str(&betas.join(","))
                .map_err(|_| ModelError::config("invalid anthropic-beta value"))?;
            headers.insert(HeaderName::from_static("anthropic-beta"), value);
        }
        let raw = http::post_json(&self.http, self.policy, &self.url, headers, &body).await?;
        let resp = decode_response(raw)?;
        tracing::debug!(
            stop_reason = ?resp.stop_reason,
            input_tokens = resp.usage.input_tokens,
            output_tokens = resp.usage.output_tokens,
            "model answered"
        );
        Ok(resp)
    }
}

/// The beta names a request needs, in a stable order.
pub fn betas(req: &Request) -> Vec<&'static str> {
    let tool_reference = req
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .any(|b| match b {
            Block::ToolResult { content, .. } => content
                .iter()
                .any(|p| matches!(p, ResultPart::ToolReference(_))),
            Block::ToolUse { caller, .. } => caller.is_some(),
            _ => false,
        });
    let advanced = tool_reference
        || req.server_tools.contains(&ServerTool::ToolSearchBm25)
        || req.tools.iter().any(|t| {
            t.defer_loading || !t.input_examples.is_empty() || !t.allowed_callers.is_empty()
        });
    let mut out = Vec::new();
    if advanced {
        out.push(BETA_ADVANCED_TOOL_USE);
    }
    if req.server_tools.contains(&ServerTool::CodeExecution) {
        out.push(BETA_CODE_EXECUTION);
    }
    out
}

/// The JSON body of `POST /v1/messages`.
pub fn encode_request(req: &Request) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("max_tokens".into(), json!(req.max_tokens));
    if let Some(system) = &req.system {
        body.insert("system".into(), json!(system));
    }
    body.insert(
        "messages".into(),
        Value::Array(req.messages.iter().map(encode_message).collect()),
    );
    let mut tools: Vec<Value> = req.server_tools.iter().map(|t| server_tool(*t)).collect();
    for t in &req.tools {
        let mut tool = Map::new();
        tool.insert("name".into(), json!(t.name));
        tool.insert("description".into(), json!(t.description));
        tool.insert("input_schema".into(), t.input_schema.clone());
        if !t.input_examples.is_empty() {
            tool.insert("input_examples".into(), json!(t.input_examples));
        }
        if t.defer_loading {
            tool.insert("defer_loading".into(), json!(true));
        }
        if !t.allowed_callers.is_empty() {
            tool.insert("allowed_callers".into(), json!(t.allowed_callers));
        }
        tools.push(Value::Object(tool));
    }
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &req.tool_choice {
        let choice = match choice {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::Any => json!({"type": "any"}),
            ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
            ToolChoice::None => json!({"type": "none"}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if let Some(container) = &req.container {
        body.insert("container".into(), json!(container));
    }
    Value::Object(body)
}

fn server_tool(tool: ServerTool) -> Value {
    match tool {
        ServerTool::ToolSearchBm25 => {
            json!({"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"})
        }
        ServerTool::CodeExecution => {
            json!({"type": "code_execution_20250825", "name": "code_execution"})
        }
    }
}

fn encode_message(m: &Message) -> Value {
    let role = match m.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    json!({"role": role, "content": m.content.iter().map(encode_block).collect::<Vec<_>>()})
}

fn encode_block(b: &Block) -> Value {
    match b {
        Block::Text { text } => json!({"type": "text", "text": text}),
        Block::ToolUse {
            id,
            name,
            input,
            caller,
        } => {
            let mut v = json!({"type": "tool_use", "id": id, "name": name, "input": input});
            if let (Some(caller), Value::Object(map)) = (caller, &mut v) {
                map.insert("caller".into(), caller.clone());
            }
            v
        }
        Block::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => {
            let mut v = json!({"type": "tool_result", "tool_use_id": tool_use_id});
            if let Value::Object(map) = &mut v {
                // An empty result is sent without `content` (the field is optional).
                if !content.is_empty() {
                    let parts: Vec<Value> = content
                        .iter()
                        .map(|p| match p {
                            ResultPart::Text(text) => json!({"type": "text", "text": text}),
                            ResultPart::ToolReference(name) => {
                                json!({"type": "tool_reference", "tool_name": name})
                            }
                        })
                        .collect();
                    map.insert("content".into(), Value::Array(parts));
                }
                if *is_error {
                    map.insert("is_error".into(), json!(true));
                }
            }
            v
        }
        Block::Other(raw) => raw.clone(),
    }
}

/// A [`Response`] from the body of a 2xx answer.
pub fn decode_response(raw: Value) -> Result<Response, ModelError> {
    let Value::Object(mut map) = raw else {
        return Err(ModelError::bad_response("response is not a JSON object"));
    };
    let Some(Value::Array(blocks)) = map.remove("content") else {
        return Err(ModelError::bad_response("response has no content array"));
    };
    let content = blocks
        .into_iter()
        .map(decode_block)
        .collect::<Result<Vec<_>, _>>()?;
    let stop_reason = match map.get("stop_reason").and_then(Value::as_str) {
        Some("end_turn") => StopReason::EndTurn,
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens") => StopReason::MaxTokens,
        Some("stop_sequence") => StopReason::StopSequence,
        Some("pause_turn") => StopReason::PauseTurn,
        Some("refusal") => StopReason::Refusal,
        Some(other) => StopReason::Other(other.to_owned()),
        None => StopReason::Other(String::new()),
    };
    let count = |name: &str| {
        map.get("usage")
            .and_then(|u| u.get(name))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let usage = Usage {
        input_tokens: count("input_tokens"),
        output_tokens: count("output_tokens"),
        cache_creation_input_tokens: count("cache_creation_input_tokens"),
        cache_read_input_tokens: count("cache_read_input_tokens"),
    };
    let text = |name: &str| {
        map.get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Ok(Response {
        id: text("id"),
        model: text("model"),
        content,
        stop_reason,
        usage,
        container: map
            .get("container")
            .and_then(|c| c.get("id"))
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

fn decode_block(raw: Value) -> Result<Block, ModelError> {
    match raw.get("type").and_then(Value::as_str) {
        // Citations, when a text block has any, are not kept.
        Some("text") => match raw.get("text").and_then(Value::as_str) {
            Some(text) => Ok(Block::text(text)),
            None => Err(ModelError::bad_response("text block without text")),
        },
        Some("tool_use") => {
            let field = |name: &str| {
                raw.get(name)
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| {
                        ModelError::bad_response(format!("tool_use block without {name}"))
                    })
            };
            Ok(Block::ToolUse {
                id: field("id")?,
                name: field("name")?,
                input: raw.get("input").cloned().unwrap_or_else(|| json!({})),
                caller: raw.get("caller").filter(|c| !c.is_null()).cloned(),
            })
        }
        _ => Ok(Block::Other(raw)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tool;

    #[test]
    fn plain_request_has_no_beta_and_minimal_fields() {
        let mut req = Request::new("claude-sonnet-4-5", 1024);
        req.messages.push(Message::user_text("hi"));
        req.tools.push(Tool::new(
            "search",
            "Search the web",
            json!({"type": "object"}),
        ));
        assert!(betas(&req).is_empty());
        assert_eq!(
            encode_request(&req),
            json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": 1024,
                "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                "tools": [{"name": "search", "description": "Search the web", "input_schema": {"type": "object"}}],
            })
        );
    }

    #[test]
    fn each_beta_feature_asks_for_its_header() {
        let base = || {
            let mut r = Request::new("m", 1);
            r.tools.push(Tool::new("t", "d", json!({})));
            r
        };
        let mut r = base();
        r.tools[0].defer_loading = true;
        assert_eq!(betas(&r), vec![BETA_ADVANCED_TOOL_USE]);
        let mut r = base();
        r.tools[0].input_examples.push(json!({}));
        assert_eq!(betas(&r), vec![BETA_ADVANCED_TOOL_USE]);
        let mut r = base();
        r.tools[0]
            .allowed_callers
            .push("code_execution_20250825".into());
        r.server_tools.push(ServerTool::CodeExecution);
        assert_eq!(betas(&r), vec![BETA_ADVANCED_TOOL_USE, BETA_CODE_EXECUTION]);
        let mut r = base();
        r.server_tools.push(ServerTool::ToolSearchBm25);
        assert_eq!(betas(&r), vec![BETA_ADVANCED_TOOL_USE]);
        let mut r = base();
        r.messages.push(Message::user(vec![Block::ToolResult {
            tool_use_id: "x".into(),
            content: vec![ResultPart::ToolReference("t".into())],
            is_error: false,
        }]));
        assert_eq!(betas(&r), vec![BETA_ADVANCED_TOOL_USE]);
    }

    #[test]
    fn tool_choice_and_container() {
        let mut r = Request::new("m", 1);
        for (choice, wire) in [
            (ToolChoice::Auto, json!({"type": "auto"})),
            (ToolChoice::Any, json!({"type": "any"})),
            (
                ToolChoice::Tool("t".into()),
                json!({"type": "tool", "name": "t"}),
            ),
            (ToolChoice::None, json!({"type": "none"})),
        ] {
            r.tool_choice = Some(choice);
            assert_eq!(encode_request(&r)["tool_choice"], wire);
        }
        r.container = Some("container_1".into());
        r.server_tools.push(ServerTool::CodeExecution);
        let body = encode_request(&r);
        assert_eq!(body["container"], "container_1");
        assert_eq!(
            body["tools"],
            json!([{"type": "code_execution_20250825", "name": "code_execution"}])
        );
    }

    #[test]
    fn decodes_blocks_stop_reasons_usage_and_container() {
        let r = decode_response(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "tool_use", "id": "toolu_1", "name": "q", "input": {"a": 1},
                 "caller": {"type": "code_execution_20250825", "tool_id": "srvtoolu_1"}},
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "code_execution", "input": {}},
            ],
            "stop_reason": "pause_turn",
            "usage": {"input_tokens": 5, "output_tokens": 7, "cache_read_input_tokens": null},
            "container": {"id": "container_9", "expires_at": "2025-01-01T00:00:00Z"},
        }))
        .unwrap();
        assert_eq!(r.stop_reason, StopReason::PauseTurn);
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 5,
                output_tokens: 7,
                ..Usage::default()
            }
        );
        assert_eq!(r.container.as_deref(), Some("container_9"));
        assert_eq!(r.content.len(), 3);
        assert!(
            matches!(&r.content[1], Block::ToolUse { caller: Some(c), .. } if c["tool_id"] == "srvtoolu_1")
        );
        assert!(matches!(&r.content[2], Block::Other(v) if v["type"] == "server_tool_use"));
        // The tool_use goes back with its caller.
        assert_eq!(
            encode_block(&r.content[1])["caller"]["type"],
            "code_execution_20250825"
        );

        for (wire, reason) in [
            ("end_turn", StopReason::EndTurn),
            ("tool_use", StopReason::ToolUse),
            ("max_tokens", StopReason::MaxTokens),
            ("stop_sequence", StopReason::StopSequence),
            ("refusal", StopReason::Refusal),
            (
                "model_context_window_exceeded",
                StopReason::Other("model_context_window_exceeded".into()),
            ),
        ] {
            let r = decode_response(json!({"content": [], "stop_reason": wire})).unwrap();
            assert_eq!(r.stop_reason, reason);
        }
    }

    #[test]
    fn malformed_bodies_are_bad_responses() {
        for raw in [
            json!([]),
            json!({"id": "x"}),
            json!({"content": [{"type": "tool_use", "name": "x"}]}),
        ] {
            let e = decode_response(raw).unwrap_err();
            assert_eq!((e.code.as_str(), e.transient), ("bad_response", false));
        }
    }
}
