//! Model clients for model-driven sub-agents: one [`ModelClient`] trait, two wires.
//!
//! A sub-agent builds a provider-neutral [`Request`] (system text, messages of
//! content [`Block`]s, [`Tool`]s), calls [`ModelClient::complete`], executes the
//! [`Response::tool_uses`], appends the results and calls again. The clients
//! retry transient failures (overload, rate limits, 5xx, timeouts) themselves,
//! honouring `retry-after`, so an error that comes back is final for the call.
//!
//! # Layout
//!
//! * `types` — the conversation ([`Request`], [`Message`], [`Block`], [`Response`],
//!   [`Usage`]), the [`ModelClient`] trait and [`ModelError`]. Shaped after the
//!   Anthropic Messages API, the richer wire; nothing here does I/O.
//! * `http` (private) — one JSON POST with a per-attempt timeout, retries with
//!   jittered backoff (backon) and the mapping of HTTP failures to
//!   [`ModelError`]; shared by both clients so they fail the same way.
//! * [`config`] — [`ClientConfig`]: base URL, API key, timeout and retries,
//!   the same for both clients; defaults and environment variables per provider
//!   ([`ClientConfig::anthropic_from_lookup`], [`ClientConfig::openai_from_lookup`]).
//! * [`anthropic`] — [`AnthropicClient`]: `POST /v1/messages`, beta headers only
//!   when a beta feature is used (tool search, tool use examples, programmatic
//!   tool calling, code execution), provider blocks kept verbatim as
//!   [`Block::Other`] to be sent back unchanged.
//! * [`openai`] — [`OpenAiClient`]: OpenAI-compatible `POST /chat/completions`
//!   (OpenAI, vLLM, Ollama, llama.cpp); what that wire cannot carry is dropped.
//! * [`price`] — [`ModelPrice`] and [`PriceList`]: token prices in integer
//!   micro-dollars and the cost of a [`Usage`].
//! * `testing` (feature `testing`) — `ScriptedModel`, a loopback server speaking
//!   both wires from a script and recording every request, for tests here and in
//!   the crates that drive sub-agents.
//!
//! Building a client installs the process-wide rustls crypto provider (ring)
//! if none is: reqwest is built without one.

#![forbid(unsafe_code)]

pub mod anthropic;
pub mod config;
mod http;
pub mod openai;
pub mod price;
#[cfg(feature = "testing")]
pub mod testing;
mod types;

pub use anthropic::AnthropicClient;
pub use config::ClientConfig;
pub use openai::OpenAiClient;
pub use price::{ModelPrice, PriceError, PriceList};
pub use types::{
    Block, Message, ModelClient, ModelError, Provider, Request, Response, ResultPart, Role,
    ServerTool, StopReason, Tool, ToolChoice, Usage,
};
