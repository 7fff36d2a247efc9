//! The provider-neutral conversation: what a sub-agent sends and gets back.
//!
//! The shapes follow the Anthropic Messages API (content blocks, `tool_use` /
//! `tool_result`, stop reasons, usage with cache counts) because it is the richer of
//! the two wires; the OpenAI-compatible client maps them onto chat completions and
//! drops what that wire cannot carry.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who wrote a message. System text is not a message: it is [`Request::system`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    User,
    Assistant,
}

/// One turn of the conversation. Serializable so that a sub-agent's conversation
/// can be saved after each turn and resumed (trawl's own form, not a provider's
/// wire).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Block>,
}

impl Message {
    /// A user turn holding one text block.
    pub fn user_text(text: impl Into<String>) -> Message {
        Message {
            role: Role::User,
            content: vec![Block::text(text)],
        }
    }

    /// A user turn (typically tool results, then any text).
    pub fn user(content: Vec<Block>) -> Message {
        Message {
            role: Role::User,
            content,
        }
    }

    /// An assistant turn, usually [`Response::content`] sent back unchanged.
    pub fn assistant(content: Vec<Block>) -> Message {
        Message {
            role: Role::Assistant,
            content,
        }
    }
}

/// A content block.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Block {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
        /// Anthropic programmatic tool calling: the `caller` of a `tool_use` made
        /// from code execution (`{"type":"code_execution_20250825","tool_id":...}`),
        /// sent back as received. `None` for direct calls and on other providers.
        caller: Option<Value>,
    },
    ToolResult {
        tool_use_id: String,
        content: Vec<ResultPart>,
        is_error: bool,
    },
    /// A provider block kept verbatim to be sent back unchanged (Anthropic
    /// `server_tool_use`, `tool_search_tool_result`, code execution results,
    /// `thinking`...). Never sent to other providers.
    Other(Value),
}

impl Block {
    pub fn text(text: impl Into<String>) -> Block {
        Block::Text { text: text.into() }
    }

    /// A successful tool result holding one text part.
    pub fn tool_result(tool_use_id: impl Into<String>, text: impl Into<String>) -> Block {
        Block::ToolResult {
            tool_use_id: tool_use_id.into(),
            content: vec![ResultPart::Text(text.into())],
            is_error: false,
        }
    }

    /// A failed tool result: the model sees the message and may try again.
    pub fn tool_error(tool_use_id: impl Into<String>, message: impl Into<String>) -> Block {
        Block::ToolResult {
            tool_use_id: tool_use_id.into(),
            content: vec![ResultPart::Text(message.into())],
            is_error: true,
        }
    }
}

/// One part of a tool result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResultPart {
    Text(String),
    /// Anthropic client-side tool search: `{"type":"tool_reference","tool_name":...}`
    /// names a deferred tool the search found, which the API then loads.
    ToolReference(String),
}

/// A tool the caller executes (a "custom" tool on the Anthropic wire, a
/// "function" on the OpenAI wire).
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: String,
    /// JSON Schema of the input object.
    pub input_schema: Value,
    /// Example inputs (Anthropic `input_examples`; folded into the description on
    /// the OpenAI wire, which has no such field).
    pub input_examples: Vec<Value>,
    /// Anthropic tool search: the definition is sent but not loaded into the
    /// context until a search finds it. Not sent at all on the OpenAI wire.
    pub defer_loading: bool,
    /// Anthropic programmatic tool calling, e.g. `["code_execution_20250825"]`.
    /// Empty means the default (direct calls only).
    pub allowed_callers: Vec<String>,
}

impl Tool {
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Tool {
        Tool {
            name: name.into(),
            description: description.into(),
            input_schema,
            input_examples: Vec::new(),
            defer_loading: false,
            allowed_callers: Vec::new(),
        }
    }
}

/// Tools Anthropic runs on its side. Dropped on the OpenAI wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServerTool {
    /// `{"type":"tool_search_tool_bm25_20251119","name":"tool_search_tool_bm25"}`.
    ToolSearchBm25,
    /// `{"type":"code_execution_20250825","name":"code_execution"}`.
    CodeExecution,
}

/// How the model must use tools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// The model must call some tool.
    Any,
    /// The model must call this tool.
    Tool(String),
    /// The model must not call tools.
    None,
}

/// One model call.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub model: String,
    pub system: Option<String>,
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
    pub server_tools: Vec<ServerTool>,
    /// `None` leaves the provider default (auto when tools are given).
    pub tool_choice: Option<ToolChoice>,
    pub max_tokens: u32,
    /// Anthropic code execution container to reuse (from [`Response::container`]).
    pub container: Option<String>,
}

impl Request {
    /// A request with no system prompt, messages or tools yet.
    pub fn new(model: impl Into<String>, max_tokens: u32) -> Request {
        Request {
            model: model.into(),
            system: None,
            messages: Vec::new(),
            tools: Vec::new(),
            server_tools: Vec::new(),
            tool_choice: None,
            max_tokens,
            container: None,
        }
    }
}

/// What the model answered.
#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    pub id: String,
    pub model: String,
    pub content: Vec<Block>,
    pub stop_reason: StopReason,
    pub usage: Usage,
    /// Anthropic code execution container id, to pass in the next request.
    pub container: Option<String>,
}

impl Response {
    /// The text blocks joined (no separator: blocks are consecutive parts of one
    /// answer).
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let Block::Text { text } = block {
                out.push_str(text);
            }
        }
        out
    }

    /// The tool calls to execute: `(id, name, input)`. Calls made by Anthropic's
    /// code execution (`caller` set) are included: the caller runs them all.
    pub fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &Value)> {
        self.content.iter().filter_map(|block| match block {
            Block::ToolUse {
                id, name, input, ..
            } => Some((id.as_str(), name.as_str(), input)),
            _ => None,
        })
    }
}

/// Why the model stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    StopSequence,
    /// Anthropic paused a long server-tool turn: send the response back as is to
    /// let it continue.
    PauseTurn,
    Refusal,
    /// Anything else, as the provider spelled it (empty when absent).
    Other(String),
}

/// Token counts of one call. `input_tokens` excludes cached tokens on both wires.
#[derive(Default, Clone, Copy, PartialEq, Eq, Debug)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
}

impl std::ops::Add for Usage {
    type Output = Usage;
    fn add(self, o: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_add(o.input_tokens),
            output_tokens: self.output_tokens.saturating_add(o.output_tokens),
            cache_creation_input_tokens: self
                .cache_creation_input_tokens
                .saturating_add(o.cache_creation_input_tokens),
            cache_read_input_tokens: self
                .cache_read_input_tokens
                .saturating_add(o.cache_read_input_tokens),
        }
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, o: Usage) {
        *self = *self + o;
    }
}

/// Which wire a client speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Provider {
    Anthropic,
    OpenAi,
}

/// A model behind some wire. Implementations retry transient failures
/// themselves; an error returned is final for this call.
#[async_trait]
pub trait ModelClient: Send + Sync {
    fn provider(&self) -> Provider;
    async fn complete(&self, req: &Request) -> Result<Response, ModelError>;
}

/// A failed model call, after any retries.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("model call failed ({code}{}): {message}", status.map(|s| format!(", HTTP {s}")).unwrap_or_default())]
pub struct ModelError {
    /// What went wrong, for callers to branch on: `overloaded`, `rate_limited`,
    /// `server_error`, `timeout`, `connection`, `bad_request`, `auth`,
    /// `permission_denied`, `not_found`, `request_too_large`, `http_error`,
    /// `bad_response`, `config`.
    pub code: String,
    /// The provider's message when it gave one.
    pub message: String,
    /// HTTP status when a response arrived.
    pub status: Option<u16>,
    /// Whether trying again later may succeed (the client already retried).
    pub transient: bool,
}

impl ModelError {
    pub fn new(
        code: impl Into<String>,
        message: impl Into<String>,
        status: Option<u16>,
        transient: bool,
    ) -> ModelError {
        ModelError {
            code: code.into(),
            message: message.into(),
            status,
            transient,
        }
    }

    /// A permanent error about the client's own configuration.
    pub(crate) fn config(message: impl Into<String>) -> ModelError {
        ModelError::new("config", message, None, false)
    }

    /// A 2xx whose body is not what the wire promises.
    pub(crate) fn bad_response(message: impl Into<String>) -> ModelError {
        ModelError::new("bad_response", message, None, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_and_tool_uses_read_the_content() {
        let r = Response {
            id: "m".into(),
            model: "x".into(),
            content: vec![
                Block::text("a"),
                Block::Other(json!({"type": "thinking"})),
                Block::ToolUse {
                    id: "t1".into(),
                    name: "search".into(),
                    input: json!({"q": 1}),
                    caller: None,
                },
                Block::text("b"),
            ],
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
            container: None,
        };
        assert_eq!(r.text(), "ab");
        let uses: Vec<_> = r.tool_uses().collect();
        assert_eq!(uses, vec![("t1", "search", &json!({"q": 1}))]);
    }

    #[test]
    fn error_display_names_code_and_status() {
        let e = ModelError::new("overloaded", "Overloaded", Some(529), true);
        assert_eq!(
            e.to_string(),
            "model call failed (overloaded, HTTP 529): Overloaded"
        );
        let e = ModelError::new("timeout", "no answer in 1s", None, true);
        assert_eq!(
            e.to_string(),
            "model call failed (timeout): no answer in 1s"
        );
    }
}
