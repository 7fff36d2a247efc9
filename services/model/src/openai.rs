//! OpenAI-compatible chat completions: `POST {base}/chat/completions`, as served
//! by OpenAI, vLLM, Ollama and llama.cpp.
//!
//! Wire format per the OpenAI API reference, "Create chat completion"
//! (<https://platform.openai.com/docs/api-reference/chat/create>): `messages` with
//! `system` / `user` / `assistant` (`content`, `tool_calls` of
//! `{id, type: "function", function: {name, arguments}}` where `arguments` is a
//! JSON string) / `tool` (`tool_call_id`, `content`) roles; `tools` of
//! `{type: "function", function: {name, description, parameters}}`; `tool_choice`
//! `"auto" | "required" | "none" | {type: "function", function: {name}}`;
//! `max_tokens`. The answer's `choices[0].message`, `finish_reason` and `usage`
//! (`prompt_tokens` includes `prompt_tokens_details.cached_tokens`).
//!
//! What this wire cannot carry is dropped: [`Block::Other`], server tools,
//! `allowed_callers`, and tools with `defer_loading` (the caller adds the
//! definitions a search found itself).

use async_trait::async_trait;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use secrecy::ExposeSecret;
use serde_json::{Map, Value, json};

use crate::http::{self, RetryPolicy};
use crate::{
    Block, ClientConfig, ModelClient, ModelError, Provider, Request, Response, ResultPart, Role,
    StopReason, ToolChoice, Usage,
};

/// A [`ModelClient`] speaking OpenAI-compatible chat completions.
#[derive(Clone, Debug)]
pub struct OpenAiClient {
    http: reqwest::Client,
    url: String,
    headers: HeaderMap,
    policy: RetryPolicy,
}

impl OpenAiClient {
    /// Fails when the API key is not a valid header value or no rustls crypto
    /// provider is installed.
    pub fn new(config: ClientConfig) -> Result<OpenAiClient, ModelError> {
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.api_key {
            let mut value = HeaderValue::from_str(&format!("Bearer {}", key.expose_secret()))
                .map_err(|_| ModelError::config("OPENAI_API_KEY is not a valid header value"))?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        Ok(OpenAiClient {
            http: http::build_client(config.timeout)?,
            url: config.endpoint("/chat/completions"),
            headers,
            policy: config.retry_policy(),
        })
    }
}

#[async_trait]
impl ModelClient for OpenAiClient {
    fn provider(&self) -> Provider {
        Provider::OpenAi
    }

    #[tracing::instrument(name = "model.complete", skip_all, fields(provider = "openai", model = %req.model))]
    async fn complete(&self, req: &Request) -> Result<Response, ModelError> {
        let body = encode_request(req);
        let raw = http::post_json(
            &self.http,
            self.policy,
            &self.url,
            self.headers.clone(),
            &body,
        )
        .await?;
        let resp = decode_response(raw, &req.model)?;
        tracing::debug!(
            stop_reason = ?resp.stop_reason,
            input_tokens = resp.usage.input_tokens,
            output_tokens = resp.usage.output_tokens,
            "model answered"
        );
        Ok(resp)
    }
}

/// The JSON body of `POST /chat/completions`.
pub fn encode_request(req: &Request) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = &req.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    for m in &req.messages {
        let mut texts = Vec::new();
        let mut calls = Vec::new();
        let mut results = Vec::new();
        for b in &m.content {
            match b {
                Block::Text { text } => texts.push(text.as_str()),
                Block::ToolUse {
                    id, name, input, ..
                } => calls.push(json!({
                    "id": id,
                    "type": "function",
                    "function": {"name": name, "arguments": input.to_string()},
                })),
                Block::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } => results.push(json!({
                    "role": "tool",
                    "tool_call_id": tool_use_id,
                    "content": result_text(content, *is_error),
                })),
                Block::Other(_) => {}
            }
        }
        let text = texts.join("\n\n");
        match m.role {
            Role::User => {
                // Tool messages must directly follow the assistant's tool calls,
                // so they come before the user's own text.
                messages.extend(results);
                if !text.is_empty() {
                    messages.push(json!({"role": "user", "content": text}));
                }
            }
            Role::Assistant => {
                if text.is_empty() && calls.is_empty() {
                    continue;
                }
                let mut msg = Map::new();
                msg.insert("role".into(), json!("assistant"));
                msg.insert(
                    "content".into(),
                    if text.is_empty() {
                        Value::Null
                    } else {
                        json!(text)
                    },
                );
                if !calls.is_empty() {
                    msg.insert("tool_calls".into(), Value::Array(calls));
                }
                messages.push(Value::Object(msg));
                // Tool results in an assistant turn are not valid on either wire;
                // kept in order rather than lost.
                messages.extend(results);
            }
        }
    }

    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("messages".into(), Value::Array(messages));
    body.insert("max_tokens".into(), json!(req.max_tokens));
    let tools: Vec<Value> = req
        .tools
        .iter()
        .filter(|t| !t.defer_loading)
        .map(|t| {
            json!({
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": description_with_examples(&t.description, &t.input_examples),
                    "parameters": t.input_schema,
                },
            })
        })
        .collect();
    // Servers such as vLLM reject a tool_choice without tools.
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = &req.tool_choice {
            let choice = match choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::Any => json!("required"),
                ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
                ToolChoice::None => json!("none"),
            };
            body.insert("tool_choice".into(), choice);
        }
    }
    Value::Object(body)
}

/// A tool result as the text of a `tool` message.
fn result_text(content: &[ResultPart], is_error: bool) -> String {
    let parts: Vec<String> = content
        .iter()
        .map(|p| match p {
            ResultPart::Text(text) => text.clone(),
            ResultPart::ToolReference(name) => format!("tool available: {name}"),
        })
        .collect();
    let text = parts.join("\n");
    if is_error {
        format!("error: {text}")
    } else {
        text
    }
}

/// Chat completions has no `input_examples`: they go at the end of the description.
fn description_with_examples(description: &str, examples: &[Value]) -> String {
    if examples.is_empty() {
        return description.to_owned();
    }
    let mut out = description.to_owned();
    out.push_str("\n\nExample inputs:");
    for e in examples {
        out.push('\n');
        out.push_str(&e.to_string());
    }
    out
}

/// A [`Response`] from the body of a 2xx answer; `model` stands in when the
/// server does not echo one.
pub fn decode_response(raw: Value, model: &str) -> Result<Response, ModelError> {
    let choice = raw
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| ModelError::bad_response("response has no choices"))?;
    let message = choice
        .get("message")
        .ok_or_else(|| ModelError::bad_response("first choice has no message"))?;

    let mut content = Vec::new();
    if let Some(text) = message.get("content").and_then(Value::as_str)
        && !text.is_empty()
    {
        content.push(Block::text(text));
    }
    let calls = match message.get("tool_calls") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(calls)) => calls.as_slice(),
        Some(_) => return Err(ModelError::bad_response("tool_calls is not an array")),
    };
    for (i, call) in calls.iter().enumerate() {
        let function = call
            .get("function")
            .ok_or_else(|| ModelError::bad_response("tool call without function"))?;
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| ModelError::bad_response("tool call without a name"))?;
        // Some servers omit ids; the result must still name its call.
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .map_or_else(|| format!("call_{i}"), str::to_owned);
        content.push(Block::ToolUse {
            id,
            name: name.to_owned(),
            input: parse_arguments(function.get("arguments")),
            caller: None,
        });
    }

    let has_calls = !calls.is_empty();
    let stop_reason = match choice.get("finish_reason").and_then(Value::as_str) {
        // Some servers (older Ollama, llama.cpp) say "stop" with tool calls:
        // the calls are what the agent must act on.
        _ if has_calls => StopReason::ToolUse,
        Some("stop") => StopReason::EndTurn,
        Some("tool_calls" | "function_call") => StopReason::ToolUse,
        Some("length") => StopReason::MaxTokens,
        Some("content_filter") => StopReason::Refusal,
        Some(other) => StopReason::Other(other.to_owned()),
        None => StopReason::Other(String::new()),
    };

    let usage = raw.get("usage");
    let count = |path: &str| {
        usage
            .and_then(|u| u.pointer(path))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let cached = count("/prompt_tokens_details/cached_tokens");
    let usage = Usage {
        input_tokens: count("/prompt_tokens").saturating_sub(cached),
        output_tokens: count("/completion_tokens"),
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: cached,
    };

    Ok(Response {
        id: raw
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        model: raw
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or(model)
            .to_owned(),
        content,
        stop_reason,
        usage,
        container: None,
    })
}

/// Tool call arguments: a JSON string on the wire (an object from some servers).
/// Unparseable text becomes `{"_unparsed": "<raw>"}` so the agent can tell the
/// model its call was malformed.
fn parse_arguments(arguments: Option<&Value>) -> Value {
    match arguments {
        None | Some(Value::Null) => json!({}),
        Some(Value::String(s)) if s.trim().is_empty() => json!({}),
        Some(Value::String(s)) => {
            serde_json::from_str(s).unwrap_or_else(|_| json!({"_unparsed": s}))
        }
        Some(other) => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Message, Tool};

    #[test]
    fn arguments_parse_or_are_kept_raw() {
        assert_eq!(
            parse_arguments(Some(&json!(r#"{"q":"x"}"#))),
            json!({"q": "x"})
        );
        assert_eq!(parse_arguments(Some(&json!(""))), json!({}));
        assert_eq!(parse_arguments(None), json!({}));
        assert_eq!(parse_arguments(Some(&json!({"q": 1}))), json!({"q": 1}));
        assert_eq!(
            parse_arguments(Some(&json!(r#"{"q": "x""#))),
            json!({"_unparsed": r#"{"q": "x""#})
        );
    }

    #[test]
    fn tool_choice_needs_tools() {
        let mut r = Request::new("m", 5);
        r.tool_choice = Some(ToolChoice::Any);
        let body = encode_request(&r);
        assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
        r.tools.push(Tool::new("t", "d", json!({"type": "object"})));
        for (choice, wire) in [
            (ToolChoice::Auto, json!("auto")),
            (ToolChoice::Any, json!("required")),
            (
                ToolChoice::Tool("t".into()),
                json!({"type": "function", "function": {"name": "t"}}),
            ),
            (ToolChoice::None, json!("none")),
        ] {
            r.tool_choice = Some(choice);
            assert_eq!(encode_request(&r)["tool_choice"], wire);
        }
    }

    #[test]
    fn only_other_blocks_make_no_message() {
        let mut r = Request::new("m", 5);
        r.messages.push(Message::user_text("q"));
        r.messages.push(Message::assistant(vec![Block::Other(
            json!({"type": "thinking"}),
        )]));
        assert_eq!(
            encode_request(&r)["messages"],
            json!([{"role": "user", "content": "q"}])
        );
    }

    #[test]
    fn finish_reasons_and_missing_ids() {
        let answer = |finish: &str, calls: Value| json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": calls}, "finish_reason": finish}]});
        for (finish, reason) in [
            ("stop", StopReason::EndTurn),
            ("tool_calls", StopReason::ToolUse),
            ("length", StopReason::MaxTokens),
            ("content_filter", StopReason::Refusal),
            ("abort", StopReason::Other("abort".into())),
        ] {
            let r = decode_response(answer(finish, Value::Null), "m").unwrap();
            assert_eq!(r.stop_reason, reason);
            assert!(r.content.is_empty());
            assert_eq!(r.model, "m");
        }
        let r = decode_response(
            answer(
                "stop",
                json!([{"type": "function", "function": {"name": "f", "arguments": "{}"}}]),
            ),
            "m",
        )
        .unwrap();
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(r.tool_uses().next(), Some(("call_0", "f", &json!({}))));
        let e = decode_response(json!({"choices": []}), "m").unwrap_err();
        assert_eq!(e.code, "bad_response");
    }
}
