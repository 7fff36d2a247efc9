//! A client for one upstream MCP server, built on the official SDK (`rmcp`).
//!
//! [`Upstream::connect`] starts the server and runs the MCP `initialize`
//! handshake; [`Upstream::list_tools`] and [`Upstream::call`] are the two
//! requests trawl makes; [`Upstream::close`] shuts it down.
//!
//! # Transports
//!
//! - **stdio**: the server is a child process speaking newline-delimited
//!   JSON-RPC on stdin/stdout. It runs in its own process group, so closing or
//!   dropping the [`Upstream`] also ends whatever it spawned (`npx`, `sh -c`,
//!   `uv run`). Its environment is *not* inherited: it gets `PATH`, `HOME`,
//!   `USER`, `LOGNAME`, `SHELL`, `TERM`, `TMPDIR` and `LANG` from ours (what
//!   the other MCP SDKs pass by default) plus the configured `env`, so trawl's
//!   own secrets never reach a third-party server. Its stderr is read line by
//!   line into `tracing` at `debug` (target `trawl_tools::mcp`), never into
//!   our stdout; the last line is quoted when the handshake fails.
//! - **Streamable HTTP**: a POST per request, with the configured headers on
//!   each (an `Authorization` header goes here). Redirects are not followed,
//!   so headers are never replayed to another host.
//!
//! The protocol version offered is the newest one that still has the
//! `initialize` handshake (2025-11-25); the server picks what it speaks.
//!
//! # Sessions
//!
//! An [`Upstream`] holds a main session, which lists the tools and runs the
//! calls that forward nothing, and a pool of at most
//! [`UpstreamConfig::sessions`] more, each leased to one call at a time by the
//! calls that forward (see [`crate::forward`]). For stdio, each session is a
//! process of its own.
//!
//! # Limits
//!
//! Every request (the handshake, each `tools/list` page, each `tools/call`) is
//! bounded by [`UpstreamConfig::timeout`]; a request that runs out is
//! cancelled upstream with `notifications/cancelled`. A listing follows at
//! most 1,000 pages. A message is at most 16 MiB (the SDK's line and body
//! limit). The SDK's response cache is turned off: every listing is fresh, so
//! a tool that changes between two listings is seen.
//!
//! # Errors
//!
//! Connecting and listing fail with [`UpstreamError`], whose variants say what
//! the caller does next: fix the config ([`UpstreamError::Start`]), give up
//! on a server that does not speak MCP ([`UpstreamError::Handshake`],
//! [`UpstreamError::Protocol`]), or try again later
//! ([`UpstreamError::Timeout`], [`UpstreamError::Closed`]).
//!
//! A call fails with a [`ToolError`], classified for the retry policy:
//!
//! | what happened                          | class     | code              |
//! |----------------------------------------|-----------|-------------------|
//! | `args` is not a JSON object            | permanent | `bad_arguments`   |
//! | the result has `isError: true`         | permanent | `tool_error`      |
//! | JSON-RPC error -32603 (internal error) | transient | `upstream_error`  |
//! | JSON-RPC error -32001 (request timeout)| transient | `upstream_error`  |
//! | any other JSON-RPC error               | permanent | `upstream_error`  |
//! | no answer within the timeout           | transient | `timeout`         |
//! | connection or child process gone       | transient | `upstream_closed` |
//! | HTTP 401/403                           | permanent | `upstream_auth`   |
//! | an answer that is not a tool result    | permanent | `upstream_protocol` |
//!
//! -32603 is what servers answer when their own backend fails, and -32001 is
//! the TypeScript SDK's "request timed out"; both may pass on a retry, which
//! the retry policy bounds. Errors in the client's request (-32602 invalid
//! params, -32601 unknown method, ...) will not.

// Logging (`logging/setLevel`) is deprecated by MCP 2026-07-28 (SEP-2577) but
// is part of 2025-11-25, which upstreams speak.
#![allow(deprecated)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use process_wrap::tokio::{ChildWrapper, CommandWrap, ProcessGroup};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, ClientRequest, ErrorCode,
    LoggingLevel, PaginatedRequestParams, ServerResult, SetLevelRequestParams,
};
use rmcp::service::PeerRequestOptions;

use crate::forward::{Holder, Routed, UpstreamHandler};
use rmcp::service::{ClientCacheConfig, ClientInitializeError, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::{RoleClient, ServiceError, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};
use tokio::task::JoinHandle;
use trawl_core::ports::ToolError;

/// An upstream request within the upstream's timeout; its JSON-RPC error passed
/// on as it is, anything else as an internal error naming the server.
pub async fn bounded<T>(
    up: &Upstream,
    fut: impl std::future::Future<Output = Result<T, ServiceError>>,
) -> Result<T, rmcp::ErrorData> {
    match tokio::time::timeout(up.timeout(), fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(ServiceError::McpError(e))) => Err(e),
        Ok(Err(e)) => Err(rmcp::ErrorData::internal_error(
            format!("upstream {}: {e}", up.server()),
            None,
        )),
        Err(_) => Err(rmcp::ErrorData::internal_error(
            format!(
                "upstream {} did not answer within {:?}",
                up.server(),
                up.timeout()
            ),
            None,
        )),
    }
}

/// A request about one of an upstream's tasks (SEP-2663), by the server's own
/// task id.
#[derive(Debug)]
pub enum TaskRequest {
    Get(String),
    Update(String, rmcp::model::InputResponses),
    Cancel(String),
}

/// At most this many `tools/list` pages are followed.
const MAX_PAGES: usize = 1_000;
/// The text of a failed tool result is cut to this many bytes.
const MAX_TOOL_ERROR_BYTES: usize = 2_048;
/// How much of a server's first output is kept to explain a failed handshake.
const SNIFF_BYTES: usize = 256;
/// A stderr line is cut to this many bytes before it is logged.
const MAX_STDERR_LINE: usize = 1_024;
/// How long a child gets to exit after its stdin closes, then after SIGTERM.
const EXIT_GRACE: Duration = Duration::from_secs(1);
/// The variables a stdio server inherits from us.
const INHERITED_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TMPDIR", "LANG",
];
const SIGTERM: i32 = 15;

/// How to reach an upstream server.
#[derive(Clone)]
pub enum Transport {
    /// A child process speaking JSON-RPC over stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Set on top of the few variables inherited (see the module doc).
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    /// MCP Streamable HTTP.
    Http {
        url: String,
        /// Sent with every request: `Authorization`, API keys.
        headers: BTreeMap<String, String>,
        /// trawl's own OAuth credential for this server (never a caller's).
        auth: crate::auth::UpstreamAuth,
    },
}

// Env and header values are often secrets: print their names only.
impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &env.keys().collect::<Vec<_>>())
                .field("cwd", cwd)
                .finish(),
            Transport::Http { url, headers, auth } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .field("auth", auth)
                .finish(),
        }
    }
}

/// One upstream server.
#[derive(Clone, Debug)]
pub struct UpstreamConfig {
    /// The server's name in trawl: the prefix of its tools, and in every error.
    pub server: String,
    pub transport: Transport,
    /// Bounds each request: the handshake, each page of a listing, each call.
    pub timeout: Duration,
    /// At most this many sessions run calls from MCP clients at once, one call
    /// each (see [`crate::forward`]); for stdio, a process each.
    pub sessions: usize,
    /// Whether a 2026-07-28 client's request goes to this server as a
    /// 2026-07-28 request, which the server may answer `InputRequiredResult`
    /// (see [`crate::forward::Relay`]); off (config `relay: false`), as a plain
    /// call, during which the server asks for input mid-call, as a 2025-11-25
    /// server does, and the gateway asks the client.
    pub relay: bool,
    /// Whether the server is given the calling client's roots (config `roots:
    /// forward`). Off by default: a client's roots name places in its own
    /// world, and a local server that takes them as its allowed directories
    /// (as the reference filesystem server does) would let any caller widen
    /// what it may touch on trawl's machine. Off, trawl declares no roots
    /// capability, refuses `roots/list`, and leaves roots out of the
    /// capabilities it relays.
    pub roots: bool,
    /// Where `auth: login` grants are kept (set by the binary).
    pub vault: Option<std::sync::Arc<crate::auth::Vault>>,
    /// Woken when the server says its tool list changed
    /// (`notifications/tools/list_changed`, on any of its sessions); set by the
    /// tool layer, which then lists the tools again.
    pub list_changed: Option<std::sync::Arc<tokio::sync::Notify>>,
}

impl UpstreamConfig {
    /// Whether a 2026-07-28 client's request goes to this server as one (see
    /// [`crate::forward::Relay`]): a stdio server configured `relay` (the
    /// default). Never a Streamable HTTP server: trawl's sessions with it are
    /// 2025-11-25 sessions (`Mcp-Session-Id`, the version `initialize`
    /// negotiated), in which a server refuses a request that says 2026-07-28
    /// (-32020: the version header against the request's `_meta`). It gets
    /// plain calls, and what it asks mid-call is bridged.
    pub fn relays(&self) -> bool {
        self.relay && matches!(self.transport, Transport::Stdio { .. })
    }
}

/// Connecting to or listing an upstream failed.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The process could not be spawned, or the URL or headers are unusable,
    /// or nothing listens there. Fix the config, or try later.
    #[error("upstream {server}: cannot start: {reason}")]
    Start { server: String, reason: String },
    /// `initialize` failed: the server exited, answered garbage or refused.
    /// It does not speak MCP as configured; retrying will not help.
    #[error("upstream {server}: initialize failed: {reason}")]
    Handshake { server: String, reason: String },
    /// An answer after the handshake that breaks the protocol: a malformed
    /// `tools/list`, a repeated cursor, a JSON-RPC error to a listing.
    #[error("upstream {server}: protocol error: {reason}")]
    Protocol { server: String, reason: String },
    /// No answer within the timeout; try again later.
    #[error("upstream {server}: no answer to {request} within {after:?}")]
    Timeout {
        server: String,
        request: &'static str,
        after: Duration,
    },
    /// The connection or the child process is gone; reconnect.
    #[error("upstream {server}: connection closed: {reason}")]
    Closed { server: String, reason: String },
}

/// The [`ToolError`] code of an upstream's MissingRequiredClientCapabilityError
/// (-32021) to a relayed request; the error's message is the JSON of the
/// capabilities it needs.
pub const MISSING_CLIENT_CAPABILITY: &str = "missing_client_capability";

/// A connected upstream MCP server: its main session, which lists the tools
/// and runs the calls that forward nothing, and a bounded pool of sessions
/// leased one call at a time to calls that forward (see [`crate::forward`]).
pub struct Upstream {
    cfg: UpstreamConfig,
    main: Session,
    pool: SessionPool,
    /// The server refused a 2026-07-28 request's version (-32022): calls are
    /// no longer [relayed](crate::forward::Relay) as such.
    no_relay: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("server", &self.cfg.server)
            .field("pid", &self.pid())
            .finish_non_exhaustive()
    }
}

/// One MCP session with the server: the SDK's service and, for stdio, the
/// process behind it.
struct Session {
    // Declared before `child`: on drop the service is cancelled first, then
    // the process group is killed.
    service: RunningService<RoleClient, UpstreamHandler>,
    child: Option<Child>,
    /// The level last asked of the server with `logging/setLevel`.
    level: Option<LoggingLevel>,
}

impl Session {
    /// Spawns/connects and runs the MCP initialize handshake, bounded by `cfg.timeout`.
    async fn open(cfg: &UpstreamConfig) -> Result<Session, UpstreamError> {
        let (service, child) = match &cfg.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let (service, child) = connect_stdio(cfg, command, args, env, cwd.as_ref()).await?;
                (service, Some(child))
            }
            Transport::Http { url, headers, auth } => {
                (connect_http(cfg, url, headers, auth).await?, None)
            }
        };
        // The SDK caches listings for their `ttlMs` and serves a stale copy when
        // a re-listing fails; trawl must see the server's current tools.
        service
            .peer()
            .set_response_cache_config(ClientCacheConfig::disabled())
            .await;
        if let Some(info) = service.peer_info() {
            tracing::debug!(
                protocol = %info.protocol_version,
                name = info.server_info.as_ref().map(|i| i.name.as_str()),
                "upstream initialized"
            );
        }
        Ok(Session {
            service,
            child,
            level: None,
        })
    }

    fn holder(&self) -> &Holder {
        &self.service.service().holder
    }

    /// Whether the session can still carry a call.
    fn alive(&self) -> bool {
        !self.service.is_closed() && !self.service.peer().is_transport_closed()
    }

    /// Asks the server for log messages of `level` and above on this session,
    /// when it declared logging and was last asked for another level. Best
    /// effort: the gateway filters by the client's level in any case.
    async fn set_level(&mut self, level: LoggingLevel, timeout: Duration) {
        let declared = self
            .service
            .peer_info()
            .is_some_and(|info| info.capabilities.logging.is_some());
        if !declared || self.level == Some(level) {
            return;
        }
        let asked = self
            .service
            .peer()
            .set_level(SetLevelRequestParams::new(level));
        match tokio::time::timeout(timeout, asked).await {
            Ok(Ok(())) => self.level = Some(level),
            Ok(Err(e)) => tracing::debug!(error = %e, "logging/setLevel refused"),
            Err(_) => tracing::debug!("logging/setLevel not answered in time"),
        }
    }

    /// Cancels the service and (for stdio) ends the child process: its stdin
    /// is closed, then it gets SIGTERM, then SIGKILL, a second apart; whatever
    /// it spawned is killed with it.
    async fn close(mut self, server: &str) {
        // Ends the service task, which closes the transport: the child's stdin.
        match tokio::time::timeout(EXIT_GRACE, self.service.close()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(server, "upstream task failed: {e}"),
            Err(_) => tracing::warn!(server, "upstream did not close in time"),
        }
        if let Some(child) = self.child.take() {
            child.shutdown().await;
        }
    }
}

/// The sessions of one server that calls that forward lease, at most
/// [`UpstreamConfig::sessions`] at once; idle ones are kept for the next call.
struct SessionPool {
    idle: Mutex<Vec<Session>>,
    slots: tokio::sync::Semaphore,
}

/// A session held by one call. Dropped without [`Lease::give_back`] (the call
/// got no answer: it timed out, failed in transport, or was dropped), the
/// session is closed rather than pooled: a late message from it must not reach
/// the next holder.
struct Lease<'a> {
    pool: &'a SessionPool,
    session: Option<Session>,
    _slot: tokio::sync::SemaphorePermit<'a>,
}

impl Lease<'_> {
    fn session(&mut self) -> Option<&mut Session> {
        self.session.as_mut()
    }

    /// Back to the pool, after its call got its answer.
    fn give_back(mut self) {
        if let Some(session) = self.session.take().filter(Session::alive) {
            self.pool
                .idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(session);
        }
    }
}

impl Upstream {
    /// Spawns/connects and runs the MCP initialize handshake, bounded by `cfg.timeout`.
    #[tracing::instrument(skip_all, fields(server = %cfg.server))]
    pub async fn connect(cfg: &UpstreamConfig) -> Result<Upstream, UpstreamError> {
        let main = Session::open(cfg).await?;
        Ok(Upstream {
            cfg: cfg.clone(),
            main,
            pool: SessionPool {
                idle: Mutex::new(Vec::new()),
                slots: tokio::sync::Semaphore::new(cfg.sessions.max(1)),
            },
            no_relay: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Every tool of the server as the JSON of its `tools/list` entry, following
    /// `nextCursor` to the end; each page is bounded by the timeout.
    ///
    /// Fields the SDK does not model are dropped. A server that did not declare
    /// the `tools` capability has no tools.
    #[tracing::instrument(skip_all, fields(server = %self.cfg.server))]
    pub async fn list_tools(&self) -> Result<Vec<Value>, UpstreamError> {
        let declared = self
            .main
            .service
            .peer_info()
            .is_none_or(|info| info.capabilities.tools.is_some());
        if !declared {
            return Ok(Vec::new());
        }
        let mut tools = Vec::new();
        let mut seen = HashSet::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = PaginatedRequestParams::default().with_cursor(cursor.clone());
            let page = tokio::time::timeout(
                self.cfg.timeout,
                self.main.service.peer().list_tools(Some(params)),
            )
            .await
            .map_err(|_| self.timed_out("tools/list"))?
            .map_err(|e| self.list_error(e))?;
            for tool in page.tools {
                let json = serde_json::to_value(&tool).map_err(|e| UpstreamError::Protocol {
                    server: self.cfg.server.clone(),
                    reason: format!("tool {} cannot be serialized: {e}", tool.name),
                })?;
                tools.push(json);
            }
            match page.next_cursor {
                None => return Ok(tools),
                Some(next) => {
                    if !seen.insert(next.clone()) {
                        return Err(UpstreamError::Protocol {
                            server: self.cfg.server.clone(),
                            reason: format!("tools/list repeated the cursor {next:?}"),
                        });
                    }
                    cursor = Some(next);
                }
            }
        }
        Err(UpstreamError::Protocol {
            server: self.cfg.server.clone(),
            reason: format!("tools/list did not end within {MAX_PAGES} pages"),
        })
    }

    /// Calls the tool by its bare (upstream) name; `args` must be a JSON object.
    /// Ok is the `CallToolResult` as JSON (`content`, `structuredContent`,
    /// `isError`); the errors are classified in the module doc.
    ///
    /// A caller that can answer sampling, elicitation and notifications (the
    /// /mcp gateway) has set a forwarder: the call then runs on a session it
    /// holds alone, leased from the pool (see [`crate::forward`]), which is
    /// asked first for the log level the caller's client wants. Other calls
    /// share the main session, and so do relayed calls of clients that take
    /// tasks (see [`Self::task`]).
    #[tracing::instrument(skip_all, fields(server = %self.cfg.server, tool = %tool))]
    pub async fn call(&self, tool: &str, args: &Value) -> Result<Value, ToolError> {
        let Some(arguments) = args.as_object() else {
            return Err(ToolError::permanent(
                "bad_arguments",
                format!("arguments of {tool} must be a JSON object"),
            ));
        };
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments.clone());
        let result = match crate::forward::current() {
            None => self.call_on(&self.main, tool, params).await?,
            Some(forwarder) => {
                let takes_tasks = forwarder
                    .relay
                    .as_ref()
                    .is_some_and(crate::forward::Relay::takes_tasks);
                let (params, relayed) = match forwarder.relay.and_then(|r| self.relayed(r)) {
                    Some((meta, responses, state)) => {
                        let mut p = params;
                        p.meta = Some(meta);
                        p.input_responses = responses;
                        p.request_state = state;
                        (p, true)
                    }
                    None => (params, false),
                };
                // A relayed call whose client takes tasks runs where the
                // server's tasks live (see [`Self::task`]).
                if relayed && takes_tasks {
                    self.call_on(&self.main, tool, params).await?
                } else {
                    let mut lease = self.lease().await?;
                    let Some(session) = lease.session() else {
                        return Err(self.closed(tool, "no session"));
                    };
                    let level = forwarder.logs.unwrap_or(LoggingLevel::Emergency);
                    session.set_level(level, self.cfg.timeout).await;
                    let hold = session.holder().hold(forwarder.to);
                    let result = self.call_on(session, tool, params).await;
                    drop(hold);
                    // A call that got an answer, a result or a JSON-RPC error,
                    // leaves its session clean; any other end closes it.
                    let answered = match &result {
                        Ok(_) => true,
                        Err(e) => e.code == "upstream_error" || e.code == MISSING_CLIENT_CAPABILITY,
                    };
                    if answered {
                        lease.give_back();
                    }
                    result?
                }
            }
        };
        let result = match result {
            CallToolResponse::Complete(r) => r,
            // Asked of the client by the gateway, as it is.
            CallToolResponse::InputRequired(r) => {
                let r = self
                    .relayed_input_request(r)
                    .map_err(|e| ToolError::permanent("roots_refused", e))?;
                return serde_json::to_value(&r).map_err(|e| {
                    ToolError::permanent(
                        "upstream_protocol",
                        format!(
                            "{}: {tool} asked for input unreadably: {e}",
                            self.cfg.server
                        ),
                    )
                });
            }
            // A task (SEP-2663), for a client that takes tasks: the gateway
            // gives it a handle of its own.
            CallToolResponse::Task(t) => {
                return serde_json::to_value(&t).map_err(|e| {
                    ToolError::permanent(
                        "upstream_protocol",
                        format!(
                            "{}: {tool} answered an unreadable task: {e}",
                            self.cfg.server
                        ),
                    )
                });
            }
            _ => {
                return Err(ToolError::permanent(
                    "upstream_protocol",
                    format!(
                        "{}: {tool} answered with a result of an unknown kind",
                        self.cfg.server
                    ),
                ));
            }
        };
        let failed = result.is_error == Some(true);
        let json = serde_json::to_value(&result).map_err(|e| {
            ToolError::permanent(
                "upstream_protocol",
                format!(
                    "{}: result of {tool} cannot be serialized: {e}",
                    self.cfg.server
                ),
            )
        })?;
        if failed {
            return Err(ToolError::permanent("tool_error", error_text(&json)));
        }
        Ok(json)
    }

    /// One `tools/call` on `session`, one round. An `InputRequiredResult`
    /// (SEP-2322) is an answer only to a [relayed](crate::forward::Relay)
    /// call, whose client can give the input. The request carries the
    /// timeout, so rmcp sends `notifications/cancelled` upstream when it runs
    /// out.
    async fn call_on(
        &self,
        session: &Session,
        tool: &str,
        params: CallToolRequestParams,
    ) -> Result<CallToolResponse, ToolError> {
        let relayed = params.meta.is_some();
        let send = |params: CallToolRequestParams| async move {
            let mut options = PeerRequestOptions::no_options();
            options.timeout = Some(self.cfg.timeout);
            let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
            let handle = session
                .service
                .peer()
                .send_request_with_option(request, options)
                .await?;
            match handle.await_response().await? {
                ServerResult::CallToolResult(r) => Ok(CallToolResponse::Complete(r)),
                ServerResult::InputRequiredResult(r) if relayed => {
                    Ok(CallToolResponse::InputRequired(r))
                }
                // Only a client that declared the tasks extension, which a
                // relayed call carries, can be answered a task.
                ServerResult::CreateTaskResult(r) if relayed => Ok(CallToolResponse::Task(r)),
                _ => Err(ServiceError::UnexpectedResponse),
            }
        };
        let made = async {
            match send(params.clone()).await {
                Err(ServiceError::McpError(e))
                    if relayed && e.code == ErrorCode::UNSUPPORTED_PROTOCOL_VERSION =>
                {
                    self.refuse_relay();
                    let mut plain = params;
                    plain.meta = None;
                    plain.input_responses = None;
                    plain.request_state = None;
                    send(plain).await
                }
                other => other,
            }
        };
        // A backstop: the request's own timeout ends it first.
        tokio::time::timeout(self.cfg.timeout + EXIT_GRACE, made)
            .await
            .map_err(|_| {
                ToolError::transient(
                    "timeout",
                    format!(
                        "{}: {tool} did not answer within {:?}",
                        self.cfg.server, self.cfg.timeout
                    ),
                )
            })?
            .map_err(|e| self.call_error(tool, e))
    }

    /// A session of the pool for one call: an idle one, else a new one while
    /// fewer than [`UpstreamConfig::sessions`] are leased, else the first one
    /// given back within the timeout.
    async fn lease(&self) -> Result<Lease<'_>, ToolError> {
        let slot = tokio::time::timeout(self.cfg.timeout, self.pool.slots.acquire())
            .await
            .map_err(|_| {
                ToolError::transient(
                    "upstream_busy",
                    format!(
                        "{}: all {} sessions for calls from MCP clients stayed busy for {:?}",
                        self.cfg.server, self.cfg.sessions, self.cfg.timeout
                    ),
                )
            })?
            .map_err(|_| self.closed("a call", "the server is closing"))?;
        let idle = loop {
            let next = self
                .pool
                .idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop();
            match next {
                Some(s) if !s.alive() => continue,
                other => break other,
            }
        };
        let session = match idle {
            Some(s) => s,
            None => Session::open(&self.cfg)
                .await
                .map_err(|e| ToolError::transient("upstream_closed", e.to_string()))?,
        };
        Ok(Lease {
            pool: &self.pool,
            session: Some(session),
            _slot: slot,
        })
    }

    fn closed(&self, what: &str, why: &str) -> ToolError {
        ToolError::transient(
            "upstream_closed",
            format!("{}: {what}: {why}", self.cfg.server),
        )
    }

    pub fn server(&self) -> &str {
        &self.cfg.server
    }

    /// The main session with the server, for what the gateway forwards besides
    /// tool calls (prompts, resources, completions).
    pub fn peer(&self) -> rmcp::Peer<RoleClient> {
        self.main.service.peer().clone()
    }

    /// `prompts/get` on the main session, one round: as a 2026-07-28 request
    /// when `relay` is given and this server takes them (see
    /// [`crate::forward::Relay`]; plain again if it refuses the version), else
    /// plain. Bounded by the caller.
    pub async fn get_prompt(
        &self,
        mut request: rmcp::model::GetPromptRequestParams,
        relay: Option<crate::forward::Relay>,
    ) -> Result<rmcp::model::GetPromptResponse, ServiceError> {
        let plain = |mut r: rmcp::model::GetPromptRequestParams| {
            r.meta = None;
            r.input_responses = None;
            r.request_state = None;
            r
        };
        let peer = self.peer();
        let Some((meta, responses, state)) = relay.and_then(|r| self.relayed(r)) else {
            return peer.get_prompt_once(plain(request)).await;
        };
        request.meta = Some(meta);
        request.input_responses = responses;
        request.request_state = state;
        match peer.get_prompt_once(request.clone()).await {
            Err(ServiceError::McpError(e)) if e.code == ErrorCode::UNSUPPORTED_PROTOCOL_VERSION => {
                self.refuse_relay();
                peer.get_prompt_once(plain(request)).await
            }
            other => other,
        }
    }

    /// `tasks/get`, `tasks/update` or `tasks/cancel` (SEP-2663) of one of this
    /// server's tasks, as a 2026-07-28 request of the client's (`meta`, what it
    /// declared), on the main session: the one every call of a client that
    /// takes tasks runs on, so that a stdio server, which keeps its tasks in its
    /// process, is asked where the task is. Such a call sends nothing to its
    /// client mid-call (2026-07-28 asks with `InputRequiredResult`, a task with
    /// its `inputRequests`), so it needs no session of its own. Answers the
    /// task's input requests and takes its responses without roots unless the
    /// server is given roots. Bounded by the caller.
    pub async fn task(
        &self,
        request: TaskRequest,
        meta: rmcp::model::RequestMetaObject,
    ) -> Result<ServerResult, ServiceError> {
        use rmcp::model::{
            CancelTaskParams, CancelTaskRequest, GetTaskParams, GetTaskRequest, TaskPayload,
            UpdateTaskParams, UpdateTaskRequest,
        };
        if !self.relays() {
            return Err(ServiceError::McpError(rmcp::ErrorData::invalid_params(
                format!("{} takes no tasks", self.cfg.server),
                None,
            )));
        }
        let meta = Some(self.relayed_meta(meta));
        let request = match request {
            TaskRequest::Get(id) => {
                let mut p = GetTaskParams::new(id);
                p.meta = meta;
                ClientRequest::GetTaskRequest(GetTaskRequest::new(p))
            }
            TaskRequest::Update(id, responses) => {
                let responses = self.relayed_responses(Some(responses)).unwrap_or_default();
                let mut p = UpdateTaskParams::new(id, responses);
                p.meta = meta;
                ClientRequest::UpdateTaskRequest(UpdateTaskRequest::new(p))
            }
            TaskRequest::Cancel(id) => {
                let mut p = CancelTaskParams::new(id);
                p.meta = meta;
                ClientRequest::CancelTaskRequest(CancelTaskRequest::new(p))
            }
        };
        let mut answer = self.main.service.peer().send_request(request).await?;
        if let ServerResult::GetTaskResult(r) = &mut answer
            && let TaskPayload::InputRequired { input_requests } = &mut r.task.payload
            && !self.cfg.roots
        {
            input_requests.retain(|_, q| !matches!(q, rmcp::model::InputRequest::ListRoots(_)));
        }
        Ok(answer)
    }

    /// What a relayed request carries to this server (`_meta`,
    /// `inputResponses`, the server's own `requestState`); `None` when it
    /// takes no relayed requests.
    fn relayed(
        &self,
        relay: crate::forward::Relay,
    ) -> Option<(
        rmcp::model::RequestMetaObject,
        Option<rmcp::model::InputResponses>,
        Option<String>,
    )> {
        self.relays().then(|| {
            (
                self.relayed_meta(relay.meta),
                self.relayed_responses(relay.input_responses),
                relay.request_state,
            )
        })
    }

    /// A relayed request's `inputResponses` as this server gets them: without
    /// an answer that carries roots unless it is given roots (see
    /// [`UpstreamConfig::roots`]), whoever asked.
    fn relayed_responses(
        &self,
        responses: Option<rmcp::model::InputResponses>,
    ) -> Option<rmcp::model::InputResponses> {
        if self.cfg.roots {
            return responses;
        }
        responses.map(|mut r| {
            r.retain(|_, v| v.get("roots").is_none());
            r
        })
    }

    /// This server's `InputRequiredResult` as its client sees it: without its
    /// requests for the client's roots unless it is given roots. An error when
    /// it asked for nothing else.
    pub fn relayed_input_request(
        &self,
        mut r: rmcp::model::InputRequiredResult,
    ) -> Result<rmcp::model::InputRequiredResult, String> {
        if self.cfg.roots {
            return Ok(r);
        }
        if let Some(requests) = r.input_requests.as_mut() {
            requests.retain(|_, q| !matches!(q, rmcp::model::InputRequest::ListRoots(_)));
            if requests.is_empty() {
                return Err(format!(
                    "{} asked for the client's roots, which trawl does not give it (roots: \
                     forward in its configuration would)",
                    self.cfg.server
                ));
            }
        }
        Ok(r)
    }

    /// A relayed request's `_meta` as this server gets it: without the
    /// client's roots capability unless it is given roots (see
    /// [`UpstreamConfig::roots`]).
    fn relayed_meta(
        &self,
        mut meta: rmcp::model::RequestMetaObject,
    ) -> rmcp::model::RequestMetaObject {
        if !self.cfg.roots
            && let Some(mut declared) = meta.client_capabilities()
            && declared.roots.is_some()
        {
            declared.roots = None;
            meta.set_client_capabilities(declared);
        }
        meta
    }

    /// Whether a 2026-07-28 client's request is passed to this server as one
    /// (see [`UpstreamConfig::relays`]): until it refuses the version.
    fn relays(&self) -> bool {
        self.cfg.relays() && !self.no_relay.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The server refused a relayed request's version (-32022): requests are
    /// passed plain from now on.
    fn refuse_relay(&self) {
        self.no_relay
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The per-request timeout of this server.
    pub fn timeout(&self) -> Duration {
        self.cfg.timeout
    }

    /// The main session's process id (stdio only), while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.main.child.as_ref().and_then(|c| c.process.id())
    }

    /// Closes every session (see [`Session::close`]): the main one and the
    /// pooled idle ones; a leased one is closed when its call drops it.
    pub async fn close(self) {
        self.pool.slots.close();
        let idle = std::mem::take(&mut *self.pool.idle.lock().unwrap_or_else(|p| p.into_inner()));
        for session in idle {
            session.close(&self.cfg.server).await;
        }
        self.main.close(&self.cfg.server).await;
    }

    fn timed_out(&self, request: &'static str) -> UpstreamError {
        UpstreamError::Timeout {
            server: self.cfg.server.clone(),
            request,
            after: self.cfg.timeout,
        }
    }

    fn list_error(&self, e: ServiceError) -> UpstreamError {
        let server = self.cfg.server.clone();
        match e {
            ServiceError::TransportClosed | ServiceError::Cancelled { .. } => {
                UpstreamError::Closed {
                    server,
                    reason: e.to_string(),
                }
            }
            ServiceError::TransportSend(_) => UpstreamError::Closed {
                server,
                reason: chain(&e),
            },
            ServiceError::Timeout { .. } => self.timed_out("tools/list"),
            ServiceError::McpError(err) => UpstreamError::Protocol {
                server,
                reason: format!("tools/list refused: {}: {}", err.code.0, err.message),
            },
            ServiceError::UnexpectedResponse => UpstreamError::Protocol {
                server,
                reason: "the answer to tools/list is not a tool list".into(),
            },
            other => UpstreamError::Protocol {
                server,
                reason: chain(&other),
            },
        }
    }

    fn call_error(&self, tool: &str, e: ServiceError) -> ToolError {
        let server = &self.cfg.server;
        match e {
            // A relayed request that needs what its client did not declare:
            // the message is the JSON of the capabilities it needs, for the
            // gateway to tell the client.
            ServiceError::McpError(err)
                if err.code == ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY =>
            {
                let required = err
                    .data
                    .as_ref()
                    .and_then(|d| d.get("requiredCapabilities"))
                    .cloned()
                    .unwrap_or_else(|| serde_json::json!({}));
                ToolError::permanent(MISSING_CLIENT_CAPABILITY, required.to_string())
            }
            ServiceError::McpError(err) => {
                let message = format!("{}: {}", err.code.0, err.message);
                if err.code == ErrorCode::INTERNAL_ERROR || err.code == ErrorCode(-32001) {
                    ToolError::transient("upstream_error", message)
                } else {
                    ToolError::permanent("upstream_error", message)
                }
            }
            ServiceError::Timeout { timeout } => ToolError::transient(
                "timeout",
                format!("{server}: {tool} did not answer within {timeout:?}"),
            ),
            ServiceError::TransportSend(_) if e.is_authorization_required() => {
                ToolError::permanent("upstream_auth", format!("{server}: {}", chain(&e)))
            }
            ServiceError::TransportClosed
            | ServiceError::Cancelled { .. }
            | ServiceError::TransportSend(_) => {
                ToolError::transient("upstream_closed", format!("{server}: {}", chain(&e)))
            }
            other => ToolError::permanent(
                "upstream_protocol",
                format!("{server}: {tool}: {}", chain(&other)),
            ),
        }
    }
}

/// trawl's client side towards one upstream, over `transport` (see
/// [`crate::forward`]).
async fn serve<T: rmcp::transport::Transport<RoleClient> + 'static>(
    cfg: &UpstreamConfig,
    transport: T,
) -> Result<RunningService<RoleClient, UpstreamHandler>, rmcp::service::ClientInitializeError> {
    let holder = Holder::default();
    let transport = Routed {
        inner: transport,
        holder: holder.clone(),
    };
    let list_changed = cfg.list_changed.clone();
    UpstreamHandler {
        holder,
        list_changed,
        roots: cfg.roots,
    }
    .serve(transport)
    .await
}

async fn connect_stdio(
    cfg: &UpstreamConfig,
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    cwd: Option<&PathBuf>,
) -> Result<(RunningService<RoleClient, UpstreamHandler>, Child), UpstreamError> {
    let server = &cfg.server;
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(args)
        .env_clear()
        .envs(
            INHERITED_ENV
                .iter()
                .filter_map(|k| Some((k, std::env::var_os(k)?))),
        )
        .envs(env)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    let mut process = CommandWrap::from(cmd)
        .wrap(ProcessGroup::leader())
        .spawn()
        .map_err(|e| UpstreamError::Start {
            server: server.clone(),
            reason: format!("cannot run {command}: {e}"),
        })?;
    let stdin = process.stdin().take();
    let stdout = process.stdout().take();
    let stderr = process.stderr().take();
    let last_stderr = Arc::new(Mutex::new(String::new()));
    let stderr_task =
        stderr.map(|s| tokio::spawn(log_stderr(server.clone(), s, last_stderr.clone())));
    let mut child = Child {
        process,
        stderr_task,
        last_stderr,
        done: false,
    };
    let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
        return Err(UpstreamError::Start {
            server: server.clone(),
            reason: "the child's stdin or stdout is not a pipe".into(),
        });
    };
    let head = Arc::new(Mutex::new(Vec::new()));
    let stdout = Sniffed {
        inner: stdout,
        head: head.clone(),
    };
    let outcome = tokio::time::timeout(
        cfg.timeout,
        serve(
            cfg,
            rmcp::transport::async_rw::AsyncRwTransport::new_client(stdout, stdin),
        ),
    )
    .await;
    let error = match outcome {
        Ok(Ok(service)) => return Ok((service, child)),
        Ok(Err(e)) => handshake_error(server, &e),
        Err(_) => {
            let head = head.lock().map(|h| h.clone()).unwrap_or_default();
            if head.is_empty() {
                UpstreamError::Timeout {
                    server: server.clone(),
                    request: "initialize",
                    after: cfg.timeout,
                }
            } else {
                let text = String::from_utf8_lossy(&head);
                let first = text.lines().next().unwrap_or_default();
                UpstreamError::Handshake {
                    server: server.clone(),
                    reason: format!(
                        "no valid answer to initialize within {:?}; the server wrote {first:?}, \
                         which is not a JSON-RPC response",
                        cfg.timeout
                    ),
                }
            }
        }
    };
    // Quote the child's last words: usually why it failed.
    let stderr = child.kill_and_last_stderr().await;
    Err(match (error, stderr) {
        (UpstreamError::Handshake { server, reason }, Some(line)) => UpstreamError::Handshake {
            server,
            reason: format!("{reason} (stderr: {line})"),
        },
        (error, _) => error,
    })
}

async fn connect_http(
    cfg: &UpstreamConfig,
    url: &str,
    headers: &BTreeMap<String, String>,
    auth: &crate::auth::UpstreamAuth,
) -> Result<RunningService<RoleClient, UpstreamHandler>, UpstreamError> {
    let server = &cfg.server;
    let start = |reason: String| UpstreamError::Start {
        server: server.clone(),
        reason,
    };
    let mut custom = HashMap::new();
    for (name, value) in headers {
        let name = reqwest::header::HeaderName::try_from(name.as_str())
            .map_err(|e| start(format!("bad header name {name:?}: {e}")))?;
        let mut value = reqwest::header::HeaderValue::try_from(value.as_str())
            .map_err(|e| start(format!("bad value for header {name}: {e}")))?;
        value.set_sensitive(true);
        custom.insert(name, value);
    }
    // Like the SDK's own client, but never follow a redirect (it would carry
    // our headers elsewhere); no idle pool, which stalls ~40 ms on Linux when
    // the previous body was not read to the end.
    let client = trawl_telemetry::http::client()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(0)
        .connect_timeout(cfg.timeout)
        .build()
        .map_err(|e| start(format!("cannot build an HTTP client: {}", chain(&e))))?;
    let config = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(custom);
    let manager = tokio::time::timeout(
        cfg.timeout,
        crate::auth::manager(server, url, auth, cfg.vault.as_ref()),
    )
    .await
    .map_err(|_| UpstreamError::Timeout {
        server: server.clone(),
        request: "authorization",
        after: cfg.timeout,
    })?
    .map_err(|e| start(format!("no credential: {e}")))?;
    let served = match manager {
        // The token is trawl's own for this server, attached by rmcp's auth
        // client (and renewed before it expires); nothing of the caller's.
        Some(manager) => {
            let client = rmcp::transport::auth::AuthClient::new(client, manager);
            let transport = StreamableHttpClientTransport::with_client(client, config);
            tokio::time::timeout(cfg.timeout, serve(cfg, transport)).await
        }
        None => {
            let transport = StreamableHttpClientTransport::with_client(client, config);
            tokio::time::timeout(cfg.timeout, serve(cfg, transport)).await
        }
    };
    match served {
        Ok(Ok(service)) => Ok(service),
        Ok(Err(e)) if is_connect_error(&e) => Err(start(format!(
            "nothing answers at {url}: {}",
            init_reason(&e)
        ))),
        Ok(Err(e)) => Err(handshake_error(server, &e)),
        Err(_) => Err(UpstreamError::Timeout {
            server: server.clone(),
            request: "initialize",
            after: cfg.timeout,
        }),
    }
}

fn handshake_error(server: &str, e: &ClientInitializeError) -> UpstreamError {
    UpstreamError::Handshake {
        server: server.to_owned(),
        reason: init_reason(e),
    }
}

/// Why `initialize` failed, in a sentence.
fn init_reason(e: &ClientInitializeError) -> String {
    match e {
        ClientInitializeError::JsonRpcError(err) => {
            format!("initialize refused: {}: {}", err.code.0, err.message)
        }
        ClientInitializeError::ConnectionClosed(_) => {
            "the server closed the connection before answering".into()
        }
        // The SDK's message names the transport's Rust type; say what failed instead.
        ClientInitializeError::TransportError { error, context } => {
            format!("{context}: {}", cut(&chain(error.error.as_ref()), 500))
        }
        other => cut(&chain(other), 500).to_owned(),
    }
}

/// Whether the handshake failed because nothing answered at the address.
fn is_connect_error(e: &ClientInitializeError) -> bool {
    // Neither the SDK's handshake error nor its HTTP error names its cause as
    // `source()`: unwrap them by hand.
    let ClientInitializeError::TransportError { error, .. } = e else {
        return false;
    };
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error.error.as_ref());
    while let Some(err) = source {
        let reqwest = match err.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            Some(StreamableHttpError::Client(r)) => Some(r),
            _ => err.downcast_ref::<reqwest::Error>(),
        };
        if reqwest.is_some_and(reqwest::Error::is_connect) {
            return true;
        }
        source = err.source();
    }
    false
}

/// An error and its causes, `: `-separated.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = cause.source();
    }
    text
}

/// The text content of a failed tool result, joined and cut to 2 KB.
fn error_text(result: &Value) -> String {
    let texts: Vec<&str> = result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|c| c.get("text").and_then(Value::as_str))
        .collect();
    if texts.is_empty() {
        return "the tool failed without saying why".into();
    }
    cut(&texts.join("\n"), MAX_TOOL_ERROR_BYTES).to_owned()
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A stdio server's process group, killed when dropped.
struct Child {
    process: Box<dyn ChildWrapper>,
    stderr_task: Option<JoinHandle<()>>,
    last_stderr: Arc<Mutex<String>>,
    /// The group was ended by `shutdown`.
    done: bool,
}

impl Child {
    /// Waits for the leader to exit after its stdin closed, then SIGTERM, then
    /// SIGKILL; and kills what is left of its group.
    async fn shutdown(mut self) {
        let exited = tokio::time::timeout(EXIT_GRACE, self.process.wait()).await;
        if !matches!(exited, Ok(Ok(_))) {
            let _ = self.process.signal(SIGTERM);
            let exited = tokio::time::timeout(EXIT_GRACE, self.process.wait()).await;
            if !matches!(exited, Ok(Ok(_))) {
                let _ = self.process.start_kill();
                let _ = tokio::time::timeout(EXIT_GRACE, self.process.wait()).await;
            }
        }
        // Grandchildren that outlived the leader.
        let _ = self.process.start_kill();
        self.done = true;
    }

    /// Kills the group and returns its last stderr line, once stderr is drained.
    async fn kill_and_last_stderr(&mut self) -> Option<String> {
        let _ = self.process.start_kill();
        let _ = tokio::time::timeout(EXIT_GRACE, self.process.wait()).await;
        self.done = true;
        if let Some(task) = self.stderr_task.as_mut() {
            let _ = tokio::time::timeout(Duration::from_millis(200), task).await;
        }
        let line = self
            .last_stderr
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default();
        (!line.is_empty()).then_some(line)
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.done {
            // SIGKILL to the group, synchronously: works outside a runtime too.
            // The SDK-less tokio child is reaped by tokio in the background.
            let _ = self.process.start_kill();
        }
        if let Some(task) = &self.stderr_task {
            task.abort();
        }
    }
}

/// Logs a child's stderr line by line, keeping the last non-empty line.
async fn log_stderr(server: String, mut stderr: impl AsyncRead + Unpin, last: Arc<Mutex<String>>) {
    let mut chunk = [0u8; 4096];
    let mut line = Vec::new();
    loop {
        let n = match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &chunk[..n] {
            if b == b'\n' {
                emit_stderr(&server, &line, &last);
                line.clear();
            } else if line.len() < MAX_STDERR_LINE {
                line.push(b);
            }
        }
    }
    emit_stderr(&server, &line, &last);
}

fn emit_stderr(server: &str, line: &[u8], last: &Mutex<String>) {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end();
    if text.is_empty() {
        return;
    }
    tracing::debug!(server, stderr = %text, "upstream stderr");
    if let Ok(mut last) = last.lock() {
        text.clone_into(&mut last);
    }
}

/// A reader that keeps a copy of the first bytes read through it, to say what
/// a server wrote when the SDK (which skips lines that are not JSON) never got
/// an answer to `initialize`.
struct Sniffed<R> {
    inner: R,
    head: Arc<Mutex<Vec<u8>>>,
}

impl<R: AsyncRead + Unpin> AsyncRead for Sniffed<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = poll
            && let Ok(mut head) = self.head.lock()
            && head.len() < SNIFF_BYTES
        {
            let new = &buf.filled()[before..];
            let take = new.len().min(SNIFF_BYTES - head.len());
            head.extend_from_slice(&new[..take]);
        }
        poll
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_char_boundaries() {
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(cut("héllo", 3), "hé");
        assert_eq!(cut("abc", 10), "abc");
    }

    #[test]
    fn error_text_joins_text_content() {
        let result = serde_json::json!({
            "content": [
                {"type": "text", "text": "one"},
                {"type": "image", "data": "", "mimeType": "image/png"},
                {"type": "text", "text": "two"}
            ],
            "isError": true
        });
        assert_eq!(error_text(&result), "one\ntwo");
        let long = serde_json::json!({"content": [{"type": "text", "text": "x".repeat(5000)}]});
        assert_eq!(error_text(&long).len(), MAX_TOOL_ERROR_BYTES);
        assert_eq!(
            error_text(&serde_json::json!({"content": []})),
            "the tool failed without saying why"
        );
    }
}
