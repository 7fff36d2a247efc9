//! `/mcp`: trawl as an MCP server (Streamable HTTP, MCP 2025-11-25 and
//! 2026-07-28, through rmcp).
//!
//! An MCP host submits research jobs, follows them and reads their items, and
//! searches and calls the federated upstream tools, with a token valid for trawl
//! alone. The tools:
//!
//! - `research.submit_job`, `research.job_status`, `research.job_items`,
//!   `research.cancel_job`: the REST API's job routes, the same code behind them,
//!   with `structuredContent` described by an `outputSchema`;
//! - `tool_search`: BM25 over the catalog, so a host loads a few tools, not all;
//! - every upstream tool the policy lets this pool call (`deny` and `isolated`
//!   tools are not listed), through the tool layer: pins, scanner, policy,
//!   input schema, audit. The built-in Bright Data tools spend money and are
//!   reached through jobs, whose budget and ledger they belong to.
//!
//! In front of rmcp's service, [`guard`] authenticates every request on its own
//! (sessions are never credentials), refuses tokens in the query string, checks
//! the scope a `tools/call` needs before anything runs (403 with
//! `insufficient_scope`, so a host can step up), and binds each session to the
//! caller that opened it. rmcp checks `Host` and `Origin` (DNS rebinding: 403),
//! `MCP-Protocol-Version` (400 for an unknown one), `Accept` and `Content-Type`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use axum::Extension;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock,
    Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
// Logging: deprecated by 2026-07-28 (SEP-2577), part of 2025-11-25.
#[allow(deprecated)]
use rmcp::model::LoggingLevel;
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use trawl_core::ports::ToolError;
use trawl_core::retry::RetryPolicy;
use trawl_tools::config::{Access, Expose};
use trawl_tools::mcp::bounded;
use trawl_tools::schema::Contract;
use trawl_tools::{Budget, CallOptions, Recorder, TOOL_SEARCH, ToolLayer};

use crate::error::ApiError;
use crate::oauth::{SCOPE_READ, SCOPE_TOOLS, SCOPE_WRITE};
use crate::rows::PageQuery;
use crate::state::{ApiState, Caller, refuse_query_token};
use crate::{jobs, rows};

pub const SUBMIT_JOB: &str = "research.submit_job";
pub const JOB_STATUS: &str = "research.job_status";
pub const JOB_ITEMS: &str = "research.job_items";
pub const CANCEL_JOB: &str = "research.cancel_job";

/// Where `/mcp` may be reached from (DNS-rebinding protection), and how many
/// sessions it keeps.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct McpConfig {
    /// `Host` values accepted (a name or address, optionally with a port).
    /// Loopback names are always accepted.
    pub allowed_hosts: Vec<String>,
    /// `Origin` values accepted from browsers (`https://app.example.com:443`,
    /// `http://localhost:*`). A request with another `Origin` gets 403; one
    /// without `Origin` (not a browser) passes. Loopback origins on any port are
    /// always accepted.
    pub allowed_origins: Vec<String>,
    /// Sessions per caller and in all, and how long an idle one is kept.
    pub session_limits: SessionLimits,
}

impl McpConfig {
    pub fn new(allowed_hosts: Vec<String>, allowed_origins: Vec<String>) -> McpConfig {
        McpConfig {
            allowed_hosts,
            allowed_origins,
            session_limits: SessionLimits::default(),
        }
    }

    /// At most `per_caller` sessions for one caller and `total` in all; a
    /// session without a request for `idle` is closed. See [`SessionLimits`].
    pub fn with_session_limits(
        mut self,
        per_caller: usize,
        total: usize,
        idle: Duration,
    ) -> McpConfig {
        self.session_limits = SessionLimits::new(per_caller, total, idle);
        self
    }
}

/// How many MCP sessions `/mcp` keeps, and for how long.
///
/// - A caller (an API key, an OAuth subject) holds at most `per_caller`
///   sessions. An `initialize` beyond that closes the caller's least recently
///   used session that has no request in flight (it answers 404 from then on,
///   and a client starts a new one, as the spec says); when every one of them
///   is busy, the `initialize` is refused: 429, `Retry-After`, a JSON-RPC error.
/// - At most `total` sessions in all: an `initialize` beyond that is refused
///   the same way (one caller's sessions never close another's).
/// - A session without a request for `idle` is closed (rmcp's keep-alive), and
///   its memory given back.
///
/// Defaults: 64 per caller, 10,000 in all, 30 minutes idle. Each session also
/// has at most [`MAX_IN_FLIGHT`] requests in flight, and no two with one
/// JSON-RPC id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionLimits {
    pub per_caller: usize,
    pub total: usize,
    pub idle: Duration,
}

impl SessionLimits {
    pub const DEFAULT_PER_CALLER: usize = 64;
    pub const DEFAULT_TOTAL: usize = 10_000;
    pub const DEFAULT_IDLE: Duration = Duration::from_secs(30 * 60);

    /// Counts of at least 1, `idle` of at least 1 ms.
    pub fn new(per_caller: usize, total: usize, idle: Duration) -> SessionLimits {
        SessionLimits {
            per_caller: per_caller.max(1),
            total: total.max(1),
            idle: idle.max(Duration::from_millis(1)),
        }
    }
}

impl Default for SessionLimits {
    fn default() -> SessionLimits {
        SessionLimits {
            per_caller: Self::DEFAULT_PER_CALLER,
            total: Self::DEFAULT_TOTAL,
            idle: Self::DEFAULT_IDLE,
        }
    }
}

/// Requests in flight at once in one session; one more is refused (429).
pub const MAX_IN_FLIGHT: usize = 64;

const LOOPBACK_HOSTS: &[&str] = &["localhost", "127.0.0.1", "::1", "[::1]"];
const LOOPBACK_ORIGINS: &[&str] = &["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];

/// rmcp's Streamable HTTP service over `state`, stopped by `cancel`.
pub fn service(
    state: &ApiState,
    config: &McpConfig,
    cancel: CancellationToken,
) -> StreamableHttpService<Gateway, LocalSessionManager> {
    let mut hosts: Vec<String> = LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect();
    hosts.extend(config.allowed_hosts.iter().cloned());
    let mut origins: Vec<String> = LOOPBACK_ORIGINS.iter().map(|o| (*o).to_owned()).collect();
    origins.extend(config.allowed_origins.iter().cloned());
    if let Some(rs) = state.oauth() {
        origins.push(rs.resource().origin());
    }
    let cfg = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(state.body_limit)
        .with_cancellation_token(cancel);
    let manager = state.sessions.manager.clone();
    let state = state.clone();
    let parked = Parked::default();
    StreamableHttpService::new(
        move || {
            Ok(Gateway {
                state: state.clone(),
                #[allow(deprecated)] // Logging: part of 2025-11-25.
                log_level: Arc::new(std::sync::Mutex::new(LoggingLevel::Debug)),
                ended: Arc::new(CancellationToken::new().drop_guard()),
                parked: parked.clone(),
            })
        },
        manager,
        cfg,
    )
}

/// The MCP server handler: one per session, sharing the API's state.
#[derive(Clone)]
#[allow(deprecated)] // Logging: deprecated by 2026-07-28, part of 2025-11-25.
pub struct Gateway {
    state: ApiState,
    /// The session's `logging/setLevel` (2025-11-25): upstream log messages
    /// less severe are not passed on. Debug until set.
    log_level: Arc<std::sync::Mutex<LoggingLevel>>,
    /// Cancelled when the session's last handler is dropped: the session ended.
    ended: Arc<tokio_util::sync::DropGuard>,
    /// Calls waiting for a 2026-07-28 client's input, shared by all sessions.
    parked: Parked,
}

/// The scope a tool needs.
fn scope_of(tool: &str) -> &'static str {
    match tool {
        SUBMIT_JOB | CANCEL_JOB => SCOPE_WRITE,
        JOB_STATUS | JOB_ITEMS => SCOPE_READ,
        _ => SCOPE_TOOLS,
    }
}

fn schema(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(o) => Arc::new(o),
        _ => Arc::new(JsonObject::new()),
    }
}

/// `research.submit_job`'s arguments.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct SubmitJobArgs {
    /// The job spec, as an object or as YAML text: name, searches {queries, geos,
    /// engine, follow_top}, pages {urls, geos}, extract {fields}, schema, cache,
    /// retries, budget {max_usd, approve_above_usd}.
    spec: SpecArg,
    /// Makes a retried submission safe: the same key and spec answer with the
    /// first job.
    #[schema(min_length = 1, max_length = 200)]
    idempotency_key: Option<String>,
}

/// A job spec as an MCP client gives it.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(untagged, expecting = "spec is an object, or YAML text")]
enum SpecArg {
    Object(std::collections::BTreeMap<String, Value>),
    Yaml(String),
}

/// The arguments of `research.job_status` and `research.cancel_job`.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct JobIdArgs {
    /// The job id `research.submit_job` returned (`job_…`).
    job_id: String,
}

/// `research.job_items`' arguments.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct JobItemsArgs {
    /// The job id `research.submit_job` returned (`job_…`).
    job_id: String,
    /// Items per page (default 100).
    #[schema(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    cursor: Option<String>,
}

/// A research tool's arguments, read into their type: the type its
/// `inputSchema` is derived from.
fn research_args<T: serde::de::DeserializeOwned>(
    tool: &str,
    args: &JsonObject,
) -> Result<T, ApiError> {
    serde_json::from_value(Value::Object(args.clone()))
        .map_err(|e| ApiError::BadRequest(format!("arguments of {tool}: {e}")))
}

/// The schema of `T` as a tool shows it (see [`trawl_tools::schema`]).
fn derived<T: utoipa::ToSchema>(contract: Contract) -> Arc<JsonObject> {
    Arc::new(trawl_tools::schema::of::<T>(contract))
}

/// The research tools, as hosts see them. Their schemas are derived from the
/// argument types above and from the answers' types, which `/openapi.json`
/// describes with the same derive.
static RESEARCH_TOOLS: LazyLock<Vec<Tool>> = LazyLock::new(|| {
    vec![
        Tool::new(
            SUBMIT_JOB,
            "Submit a research job: searches (queries × countries, following the top results) and \
             pages (URLs × countries) fetched through Bright Data, each item extracted and checked \
             against the job's JSON Schema. Returns the job id and the cost estimate at once; the \
             job runs in the background (poll research.job_status). A job whose estimate is above \
             its budget's approve_above_usd waits for a human approval.",
            derived::<SubmitJobArgs>(Contract::Input),
        )
        .with_title("Submit a research job")
        .with_raw_output_schema(derived::<jobs::JobAccepted>(Contract::Output))
        .with_annotations(
            ToolAnnotations::new()
                .read_only(false)
                .destructive(false)
                .idempotent(false)
                .open_world(true),
        ),
        Tool::new(
            JOB_STATUS,
            "A research job's status (pending, awaiting_approval, queued, running, succeeded, \
             partial, failed, cancelled), why, its slice and item counts, and its cost so far.",
            derived::<JobIdArgs>(Contract::Input),
        )
        .with_title("Research job status")
        .with_raw_output_schema(derived::<jobs::JobView>(Contract::Output))
        .with_annotations(ToolAnnotations::new().read_only(true).open_world(false)),
        Tool::new(
            JOB_ITEMS,
            "A page of a research job's valid items (each: slice_id, seq, kind page|serp, url, geo, \
             data). Pass next_cursor back as cursor for the next page; it is null on the last one.",
            derived::<JobItemsArgs>(Contract::Input),
        )
        .with_title("Research job items")
        .with_raw_output_schema(derived::<rows::ItemsPage>(Contract::Output))
        .with_annotations(ToolAnnotations::new().read_only(true).open_world(false)),
        Tool::new(
            CANCEL_JOB,
            "Cancel a research job that has not ended; its open slices are skipped and what it \
             found so far stays readable.",
            derived::<JobIdArgs>(Contract::Input),
        )
        .with_title("Cancel a research job")
        .with_raw_output_schema(derived::<jobs::JobView>(Contract::Output))
        .with_annotations(
            ToolAnnotations::new()
                .read_only(false)
                .destructive(true)
                .idempotent(true)
                .open_world(false),
        ),
    ]
});

/// A tool definition of the catalog as MCP shows it.
fn tool_of(def: &trawl_core::ports::ToolDef) -> Tool {
    let mut t = Tool::new(
        def.name.clone(),
        def.description.clone(),
        schema(def.input_schema.clone()),
    );
    if let Some(title) = &def.title {
        t = t.with_title(title.clone());
    }
    if let Some(out) = &def.output_schema {
        t = t.with_raw_output_schema(schema(out.clone()));
    }
    if let Ok(a) = serde_json::from_value::<ToolAnnotations>(def.annotations.clone()) {
        t = t.with_annotations(a);
    }
    t
}

impl Gateway {
    fn layer(&self) -> Option<&Arc<ToolLayer>> {
        self.state.tools.as_ref()
    }

    /// Every tool a host may call here.
    fn tools(&self) -> Vec<Tool> {
        let mut tools = RESEARCH_TOOLS.clone();
        if let Some(layer) = self.layer() {
            tools.push(tool_of(&trawl_tools::catalog::tool_search_def()));
            let bare = self.bare_names();
            let catalog = layer.catalog();
            for e in catalog.listed() {
                if !e.builtin && self.callable(e.name.as_str()) {
                    let mut t = tool_of(&e.def);
                    if let Some((b, _)) = bare.iter().find(|(_, full)| *full == e.name.as_str()) {
                        t.name = b.clone().into();
                    }
                    tools.push(t);
                }
            }
        }
        tools
    }

    /// A `tool_search` result with each tool under the name `/mcp` lists it by
    /// (bare, for a server exposed with `bare_names`), so that what a client
    /// finds is what it can call.
    fn as_listed(&self, mut found: Value) -> Value {
        let bare = self.bare_names();
        if let Some(tools) = found.get_mut("tools").and_then(Value::as_array_mut) {
            for t in tools {
                let full = t.get("name").and_then(Value::as_str).unwrap_or_default();
                if let Some((b, _)) = bare.iter().find(|(_, f)| f.as_str() == full) {
                    t["name"] = Value::String(b.clone());
                }
            }
        }
        found
    }

    /// `method` is served only when a server exposes what it is about (and the
    /// capability is declared): otherwise -32601, as for any method not served.
    fn declared(&self, method: &str, what: fn(&Expose) -> bool) -> Result<(), ErrorData> {
        if self.exposing(what).is_empty() {
            return Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!("{method}: no server here exposes them"),
                None,
            ));
        }
        Ok(())
    }

    /// Servers configured with `expose` of `what`, in configuration order.
    fn exposing(&self, what: fn(&Expose) -> bool) -> Vec<String> {
        self.layer().map_or_else(Vec::new, |l| {
            l.config()
                .servers
                .iter()
                .filter(|s| what(&s.expose))
                .map(|s| s.name.as_str().to_owned())
                .collect()
        })
    }

    /// Tools shown under their own names (`expose.bare_names`): bare → namespaced.
    /// A bare name taken twice, or by trawl's own tools, stays namespaced.
    fn bare_names(&self) -> HashMap<String, String> {
        let servers = self.exposing(|e| e.bare_names);
        let Some(layer) = self.layer().filter(|_| !servers.is_empty()) else {
            return HashMap::new();
        };
        let mut seen: HashMap<String, Option<String>> = HashMap::new();
        for e in layer.catalog().listed() {
            if !e.builtin && servers.iter().any(|s| s == e.name.server()) {
                seen.entry(e.name.bare().to_owned())
                    .and_modify(|v| *v = None)
                    .or_insert_with(|| Some(e.name.as_str().to_owned()));
            }
        }
        seen.into_iter()
            .filter(|(b, _)| b != TOOL_SEARCH && !RESEARCH_TOOLS.iter().any(|t| t.name == *b))
            .filter_map(|(b, full)| full.map(|f| (b, f)))
            .collect()
    }

    /// The connection of `server`, or an error a client can read.
    fn connection(&self, server: &str) -> Result<Arc<trawl_tools::mcp::Upstream>, ErrorData> {
        self.layer()
            .and_then(|l| l.connection(server))
            .ok_or_else(|| {
                ErrorData::internal_error(format!("upstream {server} is not connected"), None)
            })
    }

    /// Which server a prompt name belongs to, and its name there.
    async fn prompt_owner(&self, name: &str) -> Result<(String, String), ErrorData> {
        let servers = self.exposing(|e| e.prompts);
        if let Some((server, bare)) = name.split_once('.')
            && servers.iter().any(|s| s == server)
        {
            return Ok((server.to_owned(), bare.to_owned()));
        }
        for server in self.exposing(|e| e.prompts && e.bare_names) {
            let up = self.connection(&server)?;
            let prompts = bounded(&up, up.peer().list_all_prompts()).await?;
            if prompts.iter().any(|p| p.name == name) {
                return Ok((server, name.to_owned()));
            }
        }
        Err(ErrorData::invalid_params(
            format!("no prompt named {name}"),
            None,
        ))
    }

    /// Which server a resource URI belongs to: the one that lists it, else the
    /// one with a template that matches it.
    async fn resource_owner(&self, uri: &str) -> Result<String, ErrorData> {
        let servers = self.exposing(|e| e.resources);
        for server in &servers {
            let up = self.connection(server)?;
            let listed = bounded(&up, up.peer().list_all_resources()).await?;
            if listed.iter().any(|r| r.uri == uri) {
                return Ok(server.clone());
            }
        }
        for server in &servers {
            let up = self.connection(server)?;
            let templates = bounded(&up, up.peer().list_all_resource_templates()).await?;
            if templates
                .iter()
                .any(|t| template_matches(&t.uri_template, uri))
            {
                return Ok(server.clone());
            }
        }
        // The URI in `data` (SEP-2164: SHOULD).
        Err(ErrorData::resource_not_found(
            format!("no resource {uri}"),
            Some(json!({"uri": uri})),
        ))
    }

    /// Audit row of a forwarded prompt or resource request.
    async fn audit_forwarded(
        &self,
        what: String,
        detail: &str,
        caller: &Caller,
        started: Instant,
        error: Option<String>,
    ) {
        let row = trawl_core::model::AuditRecord {
            job_id: None,
            slice_id: None,
            seq: 0,
            args_digest: trawl_core::digest(&[&what, detail]),
            tool: what,
            decision: "allow".to_owned(),
            reason: "forwarded (expose)".to_owned(),
            caller: format!("mcp:{}", caller.label),
            latency_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            result_bytes: 0,
            error,
            at_ms: trawl_core::model::now_ms(),
        };
        if let Err(e) = self.state.store.record_audit(&[row]).await {
            tracing::warn!(error = %e, "audit row of an MCP request not written");
        }
    }

    /// Whether the policy lets this (standard) pool call `tool` at all.
    fn callable(&self, tool: &str) -> bool {
        self.layer().is_some_and(|l| l.offers(tool))
    }

    async fn research(
        &self,
        tool: &str,
        args: &JsonObject,
        caller: Caller,
    ) -> Result<Value, ApiError> {
        let state = self.state.clone();
        let res: Response = match tool {
            SUBMIT_JOB => {
                let a: SubmitJobArgs = research_args(tool, args)?;
                let (ct, body) = match a.spec {
                    SpecArg::Yaml(yaml) => ("application/yaml", Bytes::from(yaml)),
                    SpecArg::Object(spec) => (
                        "application/json",
                        Bytes::from(serde_json::to_vec(&spec).unwrap_or_default()),
                    ),
                };
                let mut headers = HeaderMap::new();
                headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
                if let Some(key) = a.idempotency_key {
                    let v = HeaderValue::from_str(&key).map_err(|_| {
                        ApiError::BadRequest("idempotency_key must be visible ASCII".to_owned())
                    })?;
                    headers.insert("idempotency-key", v);
                }
                jobs::submit_job(State(state), Extension(caller), headers, Ok(body)).await?
            }
            // Reads and cancel answer only the job's owner (its tenant, an
            // admin): the REST routes' own check, with the session's caller.
            JOB_STATUS => {
                let a: JobIdArgs = research_args(tool, args)?;
                jobs::get_job(State(state), Extension(caller), Path(a.job_id))
                    .await?
                    .into_response()
            }
            CANCEL_JOB => {
                let a: JobIdArgs = research_args(tool, args)?;
                jobs::cancel_job(State(state), Extension(caller), Path(a.job_id))
                    .await?
                    .into_response()
            }
            JOB_ITEMS => {
                let a: JobItemsArgs = research_args(tool, args)?;
                rows::items(
                    State(state),
                    Extension(caller),
                    Path(a.job_id),
                    HeaderMap::new(),
                    Ok(Query(PageQuery {
                        limit: a.limit,
                        cursor: a.cursor,
                    })),
                )
                .await?
            }
            _ => return Err(ApiError::NotFound(format!("tool {tool}"))),
        };
        let body = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .map_err(|e| ApiError::Internal(anyhow::anyhow!("reading an answer: {e}")))?;
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::Internal(anyhow::anyhow!("an answer is not JSON: {e}")))
    }

    /// A call of `tool_search` or an upstream tool, through the tool layer, with
    /// one audit row.
    async fn through_layer(
        &self,
        layer: &ToolLayer,
        tool: &str,
        args: Value,
        caller: &Caller,
    ) -> Result<CallToolResponse, ErrorData> {
        let rec = Recorder::detached(format!("mcp:{}", caller.label));
        let budget = Budget::new(None, trawl_core::cost::Micros::ZERO);
        let opts = CallOptions {
            // Upstream MCP calls are not idempotent as a rule: one attempt.
            retry: RetryPolicy::new(1),
            max_age: Duration::ZERO,
            budget: &budget,
            // /mcp neither lists nor accepts the built-in tools.
            offer_builtins: false,
        };
        let result = layer.call(tool, &args, &opts, &rec).await;
        self.write_audit(rec).await;
        match result {
            Ok(body) => {
                let v: Value = serde_json::from_slice(&body)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
                if tool == TOOL_SEARCH {
                    return Ok(structured(self.as_listed(v)).into());
                }
                // A relayed call's upstream asks its client for input.
                if v.get("resultType").and_then(Value::as_str) == Some("input_required") {
                    return Ok(
                        match serde_json::from_value::<rmcp::model::InputRequiredResult>(v) {
                            Ok(r) => CallToolResponse::InputRequired(self.parked.relay_out(
                                r,
                                tool,
                                &caller.label,
                            )),
                            Err(e) => tool_error(&ToolError::permanent(
                                "upstream_protocol",
                                format!("{tool} asked for input unreadably: {e}"),
                            ))
                            .into(),
                        },
                    );
                }
                // A task (SEP-2663): the client polls it through this gateway.
                if v.get("resultType").and_then(Value::as_str) == Some("task") {
                    return Ok(
                        match serde_json::from_value::<rmcp::model::CreateTaskResult>(v) {
                            Ok(mut r) => {
                                self.parked.task_out(&mut r.task, tool, &caller.label);
                                CallToolResponse::Task(r)
                            }
                            Err(e) => tool_error(&ToolError::permanent(
                                "upstream_protocol",
                                format!("{tool} answered an unreadable task: {e}"),
                            ))
                            .into(),
                        },
                    );
                }
                // An upstream tool's result, as the upstream gave it (sanitized).
                let mut r =
                    serde_json::from_value::<CallToolResult>(v.clone()).unwrap_or_else(|_| {
                        CallToolResult::success(vec![ContentBlock::text(v.to_string())])
                    });
                complete(&mut r.result_type);
                Ok(r.into())
            }
            // The upstream needs what the client did not declare: the client
            // is told which, as the upstream said it.
            Err(e) if e.code == trawl_tools::mcp::MISSING_CLIENT_CAPABILITY => {
                let required = serde_json::from_str(&e.message).unwrap_or_default();
                Err(missing_capability(required))
            }
            Err(e) => Ok(tool_error(&e).into()),
        }
    }

    /// Runs `call`, answering what its upstream asks meanwhile (sampling,
    /// elicitation) through this request's client, and passing its progress (with
    /// this client's token) and log messages on: from this task, so rmcp sends
    /// them on this request's own stream.
    ///
    /// A request the client did not declare the capability for is refused
    /// without reaching it (2025-11-25: only negotiated capabilities are used).
    /// A 2025-11-25 client is asked on the call's stream; its answers are
    /// awaited alongside the call, never instead of it: a client that does not
    /// answer holds up neither the call, whose upstream timeout still ends it,
    /// nor what else the upstream sends; each answer is awaited at most
    /// [`FORWARDED_TIMEOUT`], and whatever is still unanswered when the call
    /// ends is dropped with it (the upstream gets an error). A 2026-07-28
    /// client, which cannot be asked mid-request, gets an `InputRequiredResult`
    /// instead, and the call waits for its retry (see [`Parked`]).
    async fn forwarding(
        &self,
        context: &RequestContext<RoleServer>,
        call: impl std::future::Future<Output = Result<CallToolResponse, ErrorData>> + Send + 'static,
        tool: &str,
        caller: &Caller,
        relay: Option<trawl_tools::forward::Relay>,
    ) -> Result<CallToolResponse, ErrorData> {
        use tracing::Instrument as _;
        use trawl_tools::forward::{FORWARD, Forwarder};
        let token = context.meta.get_progress_token();
        let logs = self.wanted_logs(context);
        let declared = context.client_capabilities().unwrap_or_default();
        // A 2025-11-25 client that can receive nothing an upstream sends
        // during a call needs no session of its own: its call shares the main
        // one. A 2026-07-28 request always gets one, so that an upstream
        // request it did not declare the capability for is seen and answered
        // with MissingRequiredClientCapabilityError.
        let receives = is_modern(context)
            || token.is_some()
            || logs.is_some()
            || declared.sampling.is_some()
            || declared.elicitation.is_some()
            || declared.roots.is_some();
        if !receives {
            return call.await;
        }
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let task = tokio::spawn(
            FORWARD
                .scope(
                    Forwarder {
                        to: tx,
                        logs,
                        relay,
                    },
                    call,
                )
                .in_current_span(),
        );
        let running = Running {
            task: tokio_util::task::AbortOnDropHandle::new(task),
            rx,
            tool: tool.to_owned(),
            caller: caller.label.clone(),
        };
        self.drive(context, running).await
    }

    /// Carries on a call started by [`Self::forwarding`] (or resumed from
    /// [`Parked`]) until it answers or, for a 2026-07-28 client, needs input.
    #[allow(deprecated)] // Sampling and logging: deprecated by 2026-07-28, part of 2025-11-25.
    async fn drive(
        &self,
        context: &RequestContext<RoleServer>,
        mut running: Running,
    ) -> Result<CallToolResponse, ErrorData> {
        use futures_util::StreamExt as _;
        use futures_util::future::BoxFuture;
        use futures_util::stream::FuturesUnordered;
        use rmcp::model::{ClientResult, ElicitRequest, ServerRequest};
        use trawl_tools::forward::Forwarded;
        let token = context.meta.get_progress_token();
        let logs = self.wanted_logs(context);
        let declared = context.client_capabilities().unwrap_or_default();
        let modern = is_modern(context);
        let mut answering: FuturesUnordered<BoxFuture<'static, ()>> = FuturesUnordered::new();
        loop {
            tokio::select! {
                // What the upstream sent before its answer is in `rx` before
                // the answer is (see `trawl_tools::forward`): pass it on first.
                biased;
                Some(msg) = running.rx.recv() => match msg {
                    Forwarded::Sampling { params, reply } => {
                        if declared.sampling.is_none() {
                            if modern {
                                return Err(missing_capability(ClientCapabilities::builder().enable_sampling().build()));
                            }
                            let _ = reply.send(Err(undeclared("sampling")));
                            continue;
                        }
                        if modern {
                            return Ok(self.parked.park(running, Awaited::Sampling(params, reply)));
                        }
                        let peer = context.peer.clone();
                        answering.push(Box::pin(async move {
                            let asked = peer.create_message(params);
                            let answer = match tokio::time::timeout(FORWARDED_TIMEOUT, asked).await {
                                Ok(answer) => answer.map_err(client_failed),
                                Err(_) => Err(unanswered("sampling/createMessage")),
                            };
                            let _ = reply.send(answer);
                        }));
                    }
                    Forwarded::Elicitation { params, reply } => {
                        if declared.elicitation.is_none() {
                            if modern {
                                return Err(missing_capability(ClientCapabilities::builder().enable_elicitation().build()));
                            }
                            let _ = reply.send(Err(undeclared("elicitation")));
                            continue;
                        }
                        if modern {
                            return Ok(self.parked.park(running, Awaited::Elicitation(params, reply)));
                        }
                        let peer = context.peer.clone();
                        answering.push(Box::pin(async move {
                            let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
                            let asked = peer.send_request(request);
                            let answer = match tokio::time::timeout(FORWARDED_TIMEOUT, asked).await {
                                Ok(Ok(ClientResult::ElicitResult(r))) => Ok(r),
                                Ok(Ok(_)) => Err(ErrorData::internal_error("elicitation/create: unexpected answer", None)),
                                Ok(Err(e)) => Err(client_failed(e)),
                                Err(_) => Err(unanswered("elicitation/create")),
                            };
                            let _ = reply.send(answer);
                        }));
                    }
                    Forwarded::Roots { reply } => {
                        if declared.roots.is_none() {
                            if modern {
                                return Err(missing_capability(ClientCapabilities::builder().enable_roots().build()));
                            }
                            let _ = reply.send(Err(undeclared("roots")));
                            continue;
                        }
                        if modern {
                            return Ok(self.parked.park(running, Awaited::Roots(reply)));
                        }
                        let peer = context.peer.clone();
                        answering.push(Box::pin(async move {
                            let asked = peer.list_roots();
                            let answer = match tokio::time::timeout(FORWARDED_TIMEOUT, asked).await {
                                Ok(answer) => answer.map_err(client_failed),
                                Err(_) => Err(unanswered("roots/list")),
                            };
                            let _ = reply.send(answer);
                        }));
                    }
                    other => notify(context, token.as_ref(), logs, other).await,
                },
                Some(()) = answering.next(), if !answering.is_empty() => {}
                result = &mut running.task => {
                    // Notifications read in the instant before the answer.
                    while let Ok(msg) = running.rx.try_recv() {
                        notify(context, token.as_ref(), logs, msg).await;
                    }
                    return match result {
                        Ok(result) => result,
                        Err(e) => Ok(tool_error(&ToolError::transient(
                            "internal",
                            format!("the call failed: {e}"),
                        ))
                        .into()),
                    };
                }
            }
        }
    }

    /// The least severe level of the upstream log messages this request's
    /// client gets; `None`: none. A 2026-07-28 request
    /// asks per request (`_meta["io.modelcontextprotocol/logLevel"]`; without
    /// it, no log message may be sent); a 2025-11-25 session, with
    /// `logging/setLevel`.
    #[allow(deprecated)] // Logging: deprecated by 2026-07-28, part of 2025-11-25.
    fn wanted_logs(&self, context: &RequestContext<RoleServer>) -> Option<LoggingLevel> {
        if is_modern(context) {
            context.meta.log_level()
        } else {
            Some(*self.log_level.lock().unwrap_or_else(|p| p.into_inner()))
        }
    }

    /// A request about the task behind `handle`, to the upstream of the tool
    /// whose call created it, with one audit row. Only the caller the handle
    /// was given to gets past it; to anyone else it names no task.
    async fn task_request(
        &self,
        handle: &str,
        context: &RequestContext<RoleServer>,
        request: impl FnOnce(String) -> trawl_tools::mcp::TaskRequest,
    ) -> Result<rmcp::model::ServerResult, ErrorData> {
        let caller = need(context, SCOPE_TOOLS)?;
        let (tool, upstream_id) = self.parked.task_in(handle, &caller.label)?;
        let layer = self
            .layer()
            .ok_or_else(|| ErrorData::invalid_params("no upstream tools here", None))?;
        let request = request(upstream_id);
        let method = match &request {
            trawl_tools::mcp::TaskRequest::Get(_) => "tasks/get",
            trawl_tools::mcp::TaskRequest::Update(..) => "tasks/update",
            trawl_tools::mcp::TaskRequest::Cancel(_) => "tasks/cancel",
        };
        let started = Instant::now();
        let answer = layer.task(&tool, request, relayed_meta(context)).await;
        self.audit_forwarded(
            format!("{tool}.{method}"),
            handle,
            &caller,
            started,
            answer.as_ref().err().map(|e| e.message.to_string()),
        )
        .await;
        answer
    }

    async fn write_audit(&self, rec: Recorder) {
        let rows = rec.finish().audit;
        if rows.is_empty() {
            return;
        }
        if let Err(e) = self.state.store.record_audit(&rows).await {
            tracing::warn!(error = %e, "audit rows of an MCP call not written");
        }
    }

    /// The audit row of a research tool call (the tool layer writes its own).
    async fn audit_research(
        &self,
        tool: &str,
        args: &JsonObject,
        caller: &Caller,
        started: Instant,
        outcome: Result<usize, String>,
        (decision, reason): (&str, &str),
    ) {
        let row = trawl_core::model::AuditRecord {
            job_id: None,
            slice_id: None,
            seq: 0,
            tool: tool.to_owned(),
            args_digest: trawl_core::digest(&[tool, &Value::Object(args.clone()).to_string()]),
            decision: decision.to_owned(),
            reason: reason.to_owned(),
            caller: format!("mcp:{}", caller.label),
            latency_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            result_bytes: *outcome.as_ref().unwrap_or(&0) as u64,
            error: outcome.err(),
            at_ms: trawl_core::model::now_ms(),
        };
        if let Err(e) = self.state.store.record_audit(&[row]).await {
            tracing::warn!(error = %e, "audit row of an MCP call not written");
        }
    }
}

/// The caller, if it holds `scope`.
fn need(ctx: &RequestContext<RoleServer>, scope: &'static str) -> Result<Caller, ErrorData> {
    let caller =
        caller_of(ctx).ok_or_else(|| ErrorData::internal_error("no authenticated caller", None))?;
    if caller.allows(scope) {
        Ok(caller)
    } else {
        Err(ErrorData::invalid_request(
            format!("this request needs the scope {scope}"),
            None,
        ))
    }
}

/// Whether `uri` matches an RFC 6570 level-1 template (`test://items/{id}/data`):
/// each `{var}` stands for one or more characters other than `/`.
fn template_matches(template: &str, uri: &str) -> bool {
    let mut rest = uri;
    let mut parts = template.split('{');
    let Some(first) = parts.next() else {
        return false;
    };
    let Some(after) = rest.strip_prefix(first) else {
        return false;
    };
    rest = after;
    for part in parts {
        let Some((_, literal)) = part.split_once('}') else {
            return false;
        };
        // The variable takes up to the next literal (or the next `/`, or the end).
        let stop = if literal.is_empty() {
            rest.find('/').unwrap_or(rest.len())
        } else {
            match rest.find(literal) {
                Some(i) => i,
                None => return false,
            }
        };
        let value = &rest[..stop];
        if value.is_empty() || value.contains('/') {
            return false;
        }
        rest = &rest[stop + literal.len()..];
    }
    rest.is_empty()
}

/// How long a client gets to answer a sampling or elicitation request that an
/// upstream sent during a call. The call's own upstream timeout usually ends
/// it first.
const FORWARDED_TIMEOUT: Duration = Duration::from_secs(120);

/// Whether the request speaks 2026-07-28 or later (stateless, `_meta` per request).
fn is_modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .meta
        .protocol_version()
        .is_some_and(|v| v.to_string().as_str() >= "2026-07-28")
}

/// An upstream tool call of a `/mcp` client, running in a task of its own
/// (aborted when dropped: its upstream session is then closed), with what its
/// upstream sends meanwhile.
struct Running {
    task: tokio_util::task::AbortOnDropHandle<Result<CallToolResponse, ErrorData>>,
    rx: tokio::sync::mpsc::Receiver<trawl_tools::forward::Forwarded>,
    tool: String,
    caller: String,
}

/// What a parked call waits for: the answer to its upstream's request.
#[allow(deprecated)] // Sampling: deprecated by 2026-07-28, part of 2025-11-25.
enum Awaited {
    Sampling(
        rmcp::model::CreateMessageRequestParams,
        tokio::sync::oneshot::Sender<Result<rmcp::model::CreateMessageResult, ErrorData>>,
    ),
    Elicitation(
        rmcp::model::ElicitRequestParams,
        tokio::sync::oneshot::Sender<Result<rmcp::model::ElicitResult, ErrorData>>,
    ),
    Roots(tokio::sync::oneshot::Sender<Result<rmcp::model::ListRootsResult, ErrorData>>),
}

/// The key of the one input request of an `InputRequiredResult`.
const INPUT_KEY: &str = "upstream";

/// Calls whose upstream asked for input that a 2026-07-28 client gives by
/// retrying its `tools/call` (SEP-2322: `InputRequiredResult`, then
/// `inputResponses` with the echoed `requestState`). The call keeps running
/// (its upstream session held, its timeout running) while it waits here; the
/// `requestState` is a random handle to it, honoured only for the caller that
/// started the call and the same tool. A call not resumed within
/// [`FORWARDED_TIMEOUT`] is dropped (its upstream gets no answer, its session
/// is closed). Kept in this process: a client behind a load balancer needs
/// affinity for its retry.
#[derive(Clone)]
struct Parked {
    calls: Arc<Mutex<HashMap<String, Waiting>>>,
    /// Seals the `requestState` of relayed calls (see [`Parked::relay_out`]).
    sealer: Arc<rmcp::model::RequestStateCodec>,
}

impl Default for Parked {
    fn default() -> Parked {
        use ring::rand::SecureRandom as _;
        let mut key = [0u8; 32];
        if ring::rand::SystemRandom::new().fill(&mut key).is_err() {
            tracing::error!("no system randomness: requestState keys are weaker");
            for chunk in key.chunks_mut(8) {
                chunk.copy_from_slice(&fastrand::u64(..).to_le_bytes());
            }
        }
        let sealer = match rmcp::model::RequestStateCodec::try_new(key.to_vec()) {
            Ok(s) => s,
            Err(_) => unreachable!("the codec refuses only keys shorter than 32 bytes"),
        };
        Parked {
            calls: Arc::default(),
            sealer: Arc::new(sealer),
        }
    }
}

/// 128 bits from the system's random source, as hex: a parked call's handle.
fn random_handle() -> String {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 16];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        tracing::error!("no system randomness: a parked call's handle is weaker");
        bytes[..8].copy_from_slice(&fastrand::u64(..).to_le_bytes());
        bytes[8..].copy_from_slice(&fastrand::u64(..).to_le_bytes());
    }
    hex::encode(bytes)
}

/// What a relayed call's sealed `requestState` is bound to: the caller and the
/// tool (lengths first, so that no two pairs read the same).
fn binding(tool: &str, caller: &str) -> Vec<u8> {
    format!("{}:{}:{caller}{tool}", caller.len(), tool.len()).into_bytes()
}

/// The `_meta` of a relayed call upstream: the client's protocol version,
/// declared capabilities, name and log level, nothing else of its request (its
/// progress token is the gateway's to map). Each upstream then takes out what
/// it is not given (`Upstream::relayed_meta`).
fn relayed_meta(context: &RequestContext<RoleServer>) -> rmcp::model::RequestMetaObject {
    let mut meta = rmcp::model::RequestMetaObject::default();
    meta.set_protocol_version(
        context
            .meta
            .protocol_version()
            .unwrap_or(rmcp::model::ProtocolVersion::V_2026_07_28),
    );
    meta.set_client_capabilities(context.client_capabilities().unwrap_or_default());
    if let Some(info) = context.meta.client_info() {
        meta.set_client_info(info);
    }
    if let Some(level) = context.meta.log_level() {
        meta.set_log_level(level);
    }
    meta
}

/// What a task handle is bound to besides its caller (a name no tool has).
const TASK_BINDING: &str = "tasks/";

/// The longest a task handle is good for.
const TASK_HANDLE_TTL: Duration = Duration::from_secs(24 * 3600);

/// A parked call: since when, the call, what it waits for.
type Waiting = (Instant, Running, Awaited);

impl Parked {
    fn calls(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiting>> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A relayed call's upstream `InputRequiredResult` as its client gets it:
    /// the upstream's own `requestState` sealed (HMAC) with the caller and the
    /// tool, so that no other caller and no other tool can retry with it, and
    /// good for [`FORWARDED_TIMEOUT`]. Nothing is kept here between rounds.
    fn relay_out(
        &self,
        mut r: rmcp::model::InputRequiredResult,
        tool: &str,
        caller: &str,
    ) -> rmcp::model::InputRequiredResult {
        let payload = match &r.request_state {
            Some(s) => format!("1{s}"),
            None => "0".to_owned(),
        };
        let bound = binding(tool, caller);
        let options = rmcp::model::SealOptions::new()
            .associated_data(&bound)
            .ttl(FORWARDED_TIMEOUT);
        r.request_state = Some(self.sealer.seal_with(payload.as_bytes(), &options));
        r
    }

    /// The upstream's `requestState` in a state [`Self::relay_out`] sealed for
    /// this caller and tool (`Some(None)`: the upstream gave none); `None`: not
    /// such a state (another's, expired, tampered with, or a parked call's).
    #[allow(clippy::option_option)]
    fn relay_in(&self, state: &str, tool: &str, caller: &str) -> Option<Option<String>> {
        let opened = self.sealer.open_with(state, &binding(tool, caller)).ok()?;
        let text = String::from_utf8(opened).ok()?;
        match text.split_at_checked(1)? {
            ("1", upstream) => Some(Some(upstream.to_owned())),
            ("0", "") => Some(None),
            _ => None,
        }
    }

    /// An upstream task's id as its client gets it: the tool and the
    /// upstream's own id, sealed (HMAC; signed, not encrypted) with the
    /// caller, so that no other caller can get, answer or cancel the task,
    /// and good for the task's `ttlMs` (a day when the upstream sets none).
    /// Nothing is kept here: the upstream keeps the task.
    fn task_out(&self, task: &mut rmcp::model::Task, tool: &str, caller: &str) {
        let ttl = task
            .ttl_ms
            .map_or(TASK_HANDLE_TTL, Duration::from_millis)
            .min(TASK_HANDLE_TTL);
        let bound = binding(TASK_BINDING, caller);
        let options = rmcp::model::SealOptions::new()
            .associated_data(&bound)
            .ttl(ttl);
        let payload = format!("{tool}\n{}", task.task_id);
        task.task_id = self.sealer.seal_with(payload.as_bytes(), &options);
    }

    /// The tool and the upstream's task id in a handle [`Self::task_out`]
    /// sealed for this caller; an error for any other (unknown, another
    /// caller's, expired, tampered with), as for an unknown task.
    fn task_in(&self, handle: &str, caller: &str) -> Result<(String, String), ErrorData> {
        let unknown = || {
            ErrorData::invalid_params(
                format!("no task {handle} of this caller (unknown, expired or tampered with)"),
                None,
            )
        };
        let opened = self
            .sealer
            .open_with(handle, &binding(TASK_BINDING, caller))
            .map_err(|_| unknown())?;
        let text = String::from_utf8(opened).map_err(|_| unknown())?;
        let (tool, id) = text.split_once('\n').ok_or_else(unknown)?;
        Ok((tool.to_owned(), id.to_owned()))
    }

    /// Parks `running` until its client answers `awaited`: the client's
    /// `InputRequiredResult`.
    #[allow(deprecated)] // Sampling: deprecated by 2026-07-28, part of 2025-11-25.
    fn park(&self, running: Running, awaited: Awaited) -> CallToolResponse {
        use rmcp::model::{CreateMessageRequest, ElicitRequest, InputRequest};
        let request = match &awaited {
            Awaited::Sampling(params, _) => {
                InputRequest::CreateMessage(CreateMessageRequest::new(params.clone()))
            }
            Awaited::Elicitation(params, _) => {
                InputRequest::Elicitation(ElicitRequest::new(params.clone()))
            }
            Awaited::Roots(_) => InputRequest::ListRoots(rmcp::model::ListRootsRequest::default()),
        };
        let handle = random_handle();
        let mut calls = self.calls();
        calls.retain(|_, (at, ..)| at.elapsed() < FORWARDED_TIMEOUT);
        calls.insert(handle.clone(), (Instant::now(), running, awaited));
        let requests = std::iter::once((INPUT_KEY.to_owned(), request)).collect();
        CallToolResponse::InputRequired(rmcp::model::InputRequiredResult::new(
            Some(requests),
            Some(handle),
        ))
    }

    /// The parked call `handle` names, with the client's answer delivered to
    /// its upstream (`Ok(Ok)`), or, when the retry carries no answer, the call
    /// and what it still waits for, to be asked again (`Ok(Err)`, SEP-2322:
    /// re-request what is missing); an error (and the call left parked) for a
    /// handle that is unknown, expired or another caller's or tool's, or for an
    /// answer of the wrong shape.
    fn resume(
        &self,
        handle: &str,
        tool: &str,
        caller: &str,
        responses: Option<&rmcp::model::InputResponses>,
    ) -> Result<Result<Running, (Running, Awaited)>, ErrorData> {
        let mut calls = self.calls();
        calls.retain(|_, (at, ..)| at.elapsed() < FORWARDED_TIMEOUT);
        let unknown = || {
            ErrorData::invalid_params(
                "requestState names no call waiting for input (unknown, expired, or not this \
                 caller's or this tool's)",
                None,
            )
        };
        let Some((at, running, awaited)) = calls.remove(handle) else {
            return Err(unknown());
        };
        if running.caller != caller || running.tool != tool {
            calls.insert(handle.to_owned(), (at, running, awaited));
            return Err(unknown());
        }
        let answer = responses.and_then(|r| r.get(INPUT_KEY)).cloned();
        let bad = |what: &str, e: String| {
            ErrorData::invalid_params(
                format!("inputResponses.{INPUT_KEY} is not {what}: {e}"),
                None,
            )
        };
        let delivered = match (answer, awaited) {
            (None, awaited) => return Ok(Err((running, awaited))),
            (Some(v), Awaited::Sampling(params, reply)) => match serde_json::from_value(v) {
                Ok(result) => {
                    let _ = reply.send(Ok(result));
                    Ok(())
                }
                Err(e) => Err((
                    bad("a sampling result", e.to_string()),
                    Awaited::Sampling(params, reply),
                )),
            },
            (Some(v), Awaited::Elicitation(params, reply)) => match serde_json::from_value(v) {
                Ok(result) => {
                    let _ = reply.send(Ok(result));
                    Ok(())
                }
                Err(e) => Err((
                    bad("an elicitation result", e.to_string()),
                    Awaited::Elicitation(params, reply),
                )),
            },
            (Some(v), Awaited::Roots(reply)) => match serde_json::from_value(v) {
                Ok(result) => {
                    let _ = reply.send(Ok(result));
                    Ok(())
                }
                Err(e) => Err((bad("a roots result", e.to_string()), Awaited::Roots(reply))),
            },
        };
        match delivered {
            Ok(()) => Ok(Ok(running)),
            Err((error, awaited)) => {
                calls.insert(handle.to_owned(), (at, running, awaited));
                Err(error)
            }
        }
    }
}

/// A 2026-07-28 request's answer when its call needs a capability the request
/// did not declare (an upstream asked for sampling or elicitation): the call is
/// ended (its upstream session closed) and the client told what to declare;
/// over HTTP, a 400.
fn missing_capability(required: ClientCapabilities) -> ErrorData {
    ErrorData::missing_required_client_capability(required)
}

/// The error a 2025-11-25 client's upstream gets for a request the client did
/// not declare the capability for.
fn undeclared(capability: &str) -> ErrorData {
    ErrorData::invalid_request(
        format!("the client did not declare the {capability} capability"),
        None,
    )
}

/// The error an upstream gets when the client's answer failed.
fn client_failed(e: rmcp::ServiceError) -> ErrorData {
    match e {
        rmcp::ServiceError::McpError(e) => e,
        other => ErrorData::internal_error(format!("the client did not answer: {other}"), None),
    }
}

/// The error an upstream gets when the client did not answer in time.
fn unanswered(method: &str) -> ErrorData {
    ErrorData::internal_error(
        format!("{method}: the client did not answer within {FORWARDED_TIMEOUT:?}"),
        None,
    )
}

/// Marks an upstream's result `complete` when it has no `resultType`. An
/// upstream speaks 2025-11-25, whose results have none; 2026-07-28 requires it
/// on every result (clients reject one without it), and rmcp strips `complete`
/// again for clients of earlier versions.
fn complete(result_type: &mut Option<rmcp::model::ResultType>) {
    result_type.get_or_insert(rmcp::model::ResultType::COMPLETE);
}

/// A result with `structuredContent` (and the same JSON as text, for hosts that
/// read only `content`).
fn structured(v: Value) -> CallToolResult {
    CallToolResult::structured(v)
}

fn tool_error(e: &ToolError) -> CallToolResult {
    let mut r = CallToolResult::structured_error(json!({"code": e.code, "message": e.message}));
    r.content = vec![ContentBlock::text(format!("{}: {}", e.code, e.message))];
    r
}

fn api_error_result(e: &ApiError) -> CallToolResult {
    let p = e.problem();
    let mut r = CallToolResult::structured_error(json!({
        "status": p.status, "type": p.kind, "title": p.title, "detail": p.detail, "errors": p.errors,
    }));
    let mut text = format!("{} ({}): {}", p.title, p.status, p.detail);
    for fe in &p.errors {
        text.push_str(&format!("\n- {}: {}", fe.path, fe.message));
    }
    r.content = vec![ContentBlock::text(text)];
    r
}

/// The caller of the HTTP request behind a JSON-RPC request.
fn caller_of(ctx: &RequestContext<RoleServer>) -> Option<Caller> {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<Caller>())
        .cloned()
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        // Logging is accepted (`logging/setLevel`) though trawl sends no log
        // messages yet; completions answer with no values (no prompts or resource
        // templates to complete).
        #[allow(deprecated)]
        let mut caps = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_completions()
            .enable_logging()
            .build();
        // Prompts and resources of the servers that expose them.
        if !self.exposing(|e| e.prompts).is_empty() {
            caps.prompts = Some(rmcp::model::PromptsCapability::default());
        }
        if !self.exposing(|e| e.resources).is_empty() {
            let mut resources = rmcp::model::ResourcesCapability::default();
            resources.subscribe = Some(true);
            caps.resources = Some(resources);
        }
        // Tasks (SEP-2663) of upstream servers, passed through: a client that
        // declares the extension may be answered a task by an upstream that
        // makes one, and polls it here. Only relayed calls can be (trawl's own
        // tools answer at once).
        if self
            .layer()
            .is_some_and(|l| l.config().servers.iter().any(|s| s.upstream.relays()))
        {
            caps.extensions.get_or_insert_with(Default::default).insert(
                rmcp::model::TASKS_EXTENSION_ID.to_owned(),
                JsonObject::new(),
            );
        }
        ServerConfig::new(caps)
        .with_server_info(
            Implementation::new("trawl", env!("CARGO_PKG_VERSION"))
                .with_title("trawl research jobs"),
        )
        .with_instructions(
            "trawl runs research jobs (searches and pages across countries, items checked one by \
             one). Submit with research.submit_job, poll research.job_status, read \
             research.job_items. To find other tools, call tool_search with what you need.",
        )
    }

    /// 2026-07-28 discovery: what [`Self::get_info`] declares, but
    /// `resources.subscribe`, which 2026-07-28 serves through
    /// `subscriptions/listen` (`resourceSubscriptions`): trawl does not forward
    /// those, so it does not declare them. (2025-11-25 sessions do get it:
    /// `resources/subscribe` is forwarded to the resource's server.)
    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::DiscoverResult, ErrorData> {
        let mut info = self.get_info();
        if let Some(resources) = &mut info.capabilities.resources {
            resources.subscribe = None;
        }
        Ok(rmcp::model::DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            info,
        ))
    }

    /// `subscriptions/listen` (2026-07-28): changes to the tool list, which
    /// trawl declares (`tools.listChanged`) and follows (a refresh that lists
    /// other tools). Nothing else is honoured, and the acknowledgment says so.
    fn accepted_subscription_filter(
        &self,
        _requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(
            rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .build(),
        )
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        let Some(layer) = self.layer() else {
            context.cancelled().await;
            return Ok(());
        };
        if context.accepted().tools_list_changed != Some(true) {
            context.cancelled().await;
            return Ok(());
        }
        let changes = layer.listing_changes();
        let sink = context.sink();
        tell_listing_changes(changes, context.cancelled(), || async {
            sink.notify_tool_list_changed().await.is_ok()
        })
        .await;
        Ok(())
    }

    /// A 2025-11-25 session hears `notifications/tools/list_changed` (on its
    /// standalone stream) whenever a refresh lists other tools, until it ends.
    /// (A 2026-07-28 client asks with `subscriptions/listen`.)
    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        let Some(layer) = self.layer() else {
            return;
        };
        let changes = layer.listing_changes();
        let ended = self.ended.token().clone();
        tokio::spawn(async move {
            let peer = context.peer;
            tell_listing_changes(changes, ended.cancelled(), || async {
                peer.notify_tool_list_changed().await.is_ok()
            })
            .await;
        });
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, ErrorData> {
        need(&context, SCOPE_TOOLS)?;
        self.declared("prompts/list", |e| e.prompts)?;
        let bare = self.exposing(|e| e.bare_names);
        let mut all = Vec::new();
        for server in self.exposing(|e| e.prompts) {
            let up = self.connection(&server)?;
            for mut p in bounded(&up, up.peer().list_all_prompts()).await? {
                if !bare.contains(&server) {
                    p.name = format!("{server}.{}", p.name);
                }
                all.push(p);
            }
        }
        Ok(rmcp::model::ListPromptsResult::with_all_items(all))
    }

    async fn get_prompt(
        &self,
        mut request: rmcp::model::GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, ErrorData> {
        let caller = need(&context, SCOPE_TOOLS)?;
        self.declared("prompts/get", |e| e.prompts)?;
        let started = Instant::now();
        let listed = request.name.clone();
        let (server, name) = self.prompt_owner(&request.name).await?;
        let up = self.connection(&server)?;
        request.name = name;
        let what = format!("{server}.prompts/get:{}", request.name);
        // A 2026-07-28 client's request goes upstream as one, so that the
        // upstream may ask for input (see `trawl_tools::forward::Relay`); a
        // retry's sealed requestState is opened first.
        let relay = if is_modern(&context) {
            let upstream_state = match &request.request_state {
                Some(handle) => self
                    .parked
                    .relay_in(handle, &listed, &caller.label)
                    .ok_or_else(|| {
                        ErrorData::invalid_params(
                            "requestState is not one this gateway gave this caller for this \
                             prompt (unknown, expired or tampered with)",
                            None,
                        )
                    })?,
                None => None,
            };
            Some(trawl_tools::forward::Relay {
                meta: relayed_meta(&context),
                input_responses: request.input_responses.take(),
                request_state: upstream_state,
            })
        } else {
            None
        };
        let result = bounded(&up, up.get_prompt(request, relay)).await;
        self.audit_forwarded(
            what,
            "",
            &caller,
            started,
            result.as_ref().err().map(|e| e.message.to_string()),
        )
        .await;
        Ok(match result? {
            rmcp::model::GetPromptResponse::Complete(mut r) => {
                complete(&mut r.result_type);
                r.into()
            }
            rmcp::model::GetPromptResponse::InputRequired(r) => {
                let r = up
                    .relayed_input_request(r)
                    .map_err(|e| ErrorData::invalid_request(e, None))?;
                rmcp::model::GetPromptResponse::InputRequired(self.parked.relay_out(
                    r,
                    &listed,
                    &caller.label,
                ))
            }
            _ => {
                return Err(ErrorData::internal_error(
                    format!("upstream {server}: an answer to prompts/get of an unknown kind"),
                    None,
                ));
            }
        })
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, ErrorData> {
        need(&context, SCOPE_TOOLS)?;
        self.declared("resources/list", |e| e.resources)?;
        let mut all = Vec::new();
        for server in self.exposing(|e| e.resources) {
            let up = self.connection(&server)?;
            all.extend(bounded(&up, up.peer().list_all_resources()).await?);
        }
        Ok(rmcp::model::ListResourcesResult::with_all_items(all))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, ErrorData> {
        need(&context, SCOPE_TOOLS)?;
        self.declared("resources/templates/list", |e| e.resources)?;
        let mut all = Vec::new();
        for server in self.exposing(|e| e.resources) {
            let up = self.connection(&server)?;
            all.extend(bounded(&up, up.peer().list_all_resource_templates()).await?);
        }
        Ok(rmcp::model::ListResourceTemplatesResult::with_all_items(
            all,
        ))
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        let caller = need(&context, SCOPE_TOOLS)?;
        self.declared("resources/read", |e| e.resources)?;
        let started = Instant::now();
        let server = self.resource_owner(&request.uri).await?;
        let up = self.connection(&server)?;
        let what = format!("{server}.resources/read");
        let uri = request.uri.clone();
        let result = bounded(&up, up.peer().read_resource(request)).await;
        self.audit_forwarded(
            what,
            &uri,
            &caller,
            started,
            result.as_ref().err().map(|e| e.message.to_string()),
        )
        .await;
        let mut result = result?;
        complete(&mut result.result_type);
        Ok(result.into())
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        need(&context, SCOPE_TOOLS)?;
        self.declared("resources/subscribe", |e| e.resources)?;
        let server = self.resource_owner(&request.uri).await?;
        let up = self.connection(&server)?;
        bounded(&up, up.peer().subscribe(request)).await
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        need(&context, SCOPE_TOOLS)?;
        self.declared("resources/unsubscribe", |e| e.resources)?;
        let server = self.resource_owner(&request.uri).await?;
        let up = self.connection(&server)?;
        bounded(&up, up.peer().unsubscribe(request)).await
    }

    async fn complete(
        &self,
        mut request: rmcp::model::CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, ErrorData> {
        need(&context, SCOPE_TOOLS)?;
        // Completions of an exposed server's prompts and resource templates are
        // its own; there is nothing of trawl's to complete.
        let server = match &mut request.r#ref {
            rmcp::model::Reference::Prompt(p) => match self.prompt_owner(&p.name).await {
                Ok((server, name)) => {
                    p.name = name;
                    Some(server)
                }
                Err(_) => None,
            },
            rmcp::model::Reference::Resource(r) => self.resource_owner(&r.uri).await.ok(),
            _ => None,
        };
        let Some(server) = server else {
            return Ok(rmcp::model::CompleteResult::default());
        };
        let up = self.connection(&server)?;
        let mut result = bounded(&up, up.peer().complete(request)).await?;
        complete(&mut result.result_type);
        Ok(result)
    }

    /// The session's level for the upstream log messages passed on to it:
    /// applied here, and asked of the upstream session each call runs on.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        *self.log_level.lock().unwrap_or_else(|p| p.into_inner()) = request.level;
        Ok(())
    }

    /// `tasks/get` of an upstream task this caller's call created: the
    /// upstream's answer under the caller's handle, its inlined result
    /// sanitized. rmcp has refused it already when the request did not declare
    /// the tasks extension (-32021).
    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        let handle = request.task_id.clone();
        let answer = self
            .task_request(&handle, &context, trawl_tools::mcp::TaskRequest::Get)
            .await?;
        match answer {
            rmcp::model::ServerResult::GetTaskResult(mut r) => {
                r.task.task.task_id = handle;
                r.result_type = rmcp::model::ResultType::COMPLETE;
                Ok(r)
            }
            _ => Err(ErrorData::internal_error(
                "an upstream answered tasks/get with something else",
                None,
            )),
        }
    }

    /// `tasks/update`: the client's answers to the task's input requests,
    /// passed to its upstream.
    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let responses = request.input_responses;
        self.task_request(&request.task_id, &context, |id| {
            trawl_tools::mcp::TaskRequest::Update(id, responses)
        })
        .await
        .map(|_| ())
    }

    /// `tasks/cancel`: passed to the task's upstream, whose answer for a task
    /// that has ended already is the same acknowledgment.
    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.task_request(
            &request.task_id,
            &context,
            trawl_tools::mcp::TaskRequest::Cancel,
        )
        .await
        .map(|_| ())
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools().into_iter().find(|t| t.name == name)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let started = Instant::now();
        let tool = request.name.to_string();
        let args = request.arguments.unwrap_or_default();
        // The guard put the caller there; without it (no HTTP request behind the
        // call) nothing is allowed.
        let caller = caller_of(&context)
            .ok_or_else(|| ErrorData::internal_error("no authenticated caller", None))?;
        let need = scope_of(&tool);
        if !caller.allows(need) {
            return Ok(tool_error(&ToolError::permanent(
                "insufficient_scope",
                format!("{tool} needs the scope {need}"),
            ))
            .into());
        }
        if RESEARCH_TOOLS.iter().any(|t| t.name == tool) {
            if let Some(layer) = self.layer()
                && let (Access::Deny, rule) = layer.policy().access(&tool)
            {
                self.audit_research(
                    &tool,
                    &args,
                    &caller,
                    started,
                    Err(format!("tool_denied: {rule}")),
                    ("deny", &rule),
                )
                .await;
                return Ok(tool_error(&ToolError::permanent(
                    "tool_denied",
                    format!("{tool} is denied by {rule}"),
                ))
                .into());
            }
            let outcome = self.research(&tool, &args, caller.clone()).await;
            let (result, audited) = match outcome {
                Ok(v) => {
                    let n = v.to_string().len();
                    (structured(v), Ok(n))
                }
                Err(e) => {
                    let r = api_error_result(&e);
                    (r, Err(e.to_string()))
                }
            };
            self.audit_research(
                &tool,
                &args,
                &caller,
                started,
                audited,
                ("allow", "research tool"),
            )
            .await;
            return Ok(result.into());
        }
        let Some(layer) = self.layer() else {
            return Err(ErrorData::invalid_params(
                format!("no tool named {tool}"),
                None,
            ));
        };
        let tool = self.bare_names().remove(&tool).unwrap_or(tool);
        // An upstream tool the policy refuses, or one quarantined or blocked, is
        // not listed; a call naming it still goes to the layer, which refuses it
        // and audits the attempt.
        let known = tool == TOOL_SEARCH || layer.catalog().get(&tool).is_some_and(|e| !e.builtin);
        if !known {
            return Err(ErrorData::invalid_params(
                format!("no tool named {tool}"),
                None,
            ));
        }
        // A 2026-07-28 client's retry with the input its call asked for: of a
        // relayed call (its upstream asked), a new call carrying the answer;
        // of a parked one (asked mid-call), the call resumed.
        let mut upstream_state = None;
        if let Some(handle) = &request.request_state
            && let Some(state) = self.parked.relay_in(handle, &tool, &caller.label)
        {
            upstream_state = state;
        } else if let Some(handle) = &request.request_state {
            let resumed = self.parked.resume(
                handle,
                &tool,
                &caller.label,
                request.input_responses.as_ref(),
            )?;
            return match resumed {
                Ok(running) => self.drive(&context, running).await,
                Err((running, awaited)) => Ok(self.parked.park(running, awaited)),
            };
        }
        let relay = is_modern(&context).then(|| trawl_tools::forward::Relay {
            meta: relayed_meta(&context),
            input_responses: request.input_responses.clone(),
            request_state: upstream_state,
        });
        let call = {
            let (gateway, layer, tool, caller) =
                (self.clone(), layer.clone(), tool.clone(), caller.clone());
            async move {
                gateway
                    .through_layer(&layer, &tool, Value::Object(args), &caller)
                    .await
            }
        };
        self.forwarding(&context, call, &tool, &caller, relay).await
    }
}

/// Sessions and the caller that opened each: a session id is not a credential,
/// and a request that names another caller's session is answered as if the
/// session did not exist. Also the one place that enforces [`SessionLimits`]
/// (with rmcp's session manager, which it holds, so a session it closes is
/// closed there too) and knows the JSON-RPC ids in flight in each session.
pub(crate) struct SessionOwners {
    /// rmcp's sessions: the transport and handler of each.
    pub(crate) manager: Arc<LocalSessionManager>,
    limits: SessionLimits,
    inner: Mutex<Sessions>,
}

#[derive(Default)]
struct Sessions {
    by_id: HashMap<String, Session>,
    /// Sessions of each caller, counting those being opened.
    per_caller: HashMap<String, usize>,
    /// Sessions being opened (an `initialize` admitted, not answered yet).
    opening: usize,
    /// When the whole table was last checked against rmcp's.
    swept: Option<Instant>,
}

struct Session {
    owner: String,
    seen: Instant,
    /// The JSON-RPC ids (as JSON text) of the requests in flight.
    in_flight: HashSet<String>,
}

/// Why an `initialize` is refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `total` sessions are open: come back when one may have expired.
    Full { retry_after: u64 },
    /// The caller holds `per_caller` sessions and every one has a request in
    /// flight.
    CallerBusy { retry_after: u64 },
}

/// Why a request may not start in a session.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NotStarted {
    /// A request with this id is in flight in the session.
    Duplicate(String),
    /// [`MAX_IN_FLIGHT`] requests are.
    TooMany,
}

/// The whole table is checked against rmcp's at most this often.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

impl Default for SessionOwners {
    fn default() -> SessionOwners {
        SessionOwners::new(SessionLimits::default())
    }
}

impl SessionOwners {
    pub(crate) fn new(limits: SessionLimits) -> SessionOwners {
        let mut config = SessionConfig::default();
        config.keep_alive = Some(limits.idle);
        let mut manager = LocalSessionManager::default();
        manager.session_config = config;
        SessionOwners {
            manager: Arc::new(manager),
            limits,
            inner: Mutex::new(Sessions::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn owner_matches(&self, session: &str, label: &str) -> bool {
        let mut g = self.lock();
        match g.by_id.get_mut(session) {
            Some(s) if s.owner == label => {
                s.seen = Instant::now();
                true
            }
            Some(_) => false,
            // Unknown here: rmcp answers 404 for it.
            None => true,
        }
    }

    /// Room for one more session of `label`: given at once when there is
    /// some; otherwise after forgetting the sessions rmcp no longer has, and
    /// closing the caller's least recently used idle one (see [`SessionLimits`]).
    pub(crate) async fn admit(self: &Arc<Self>, label: &str) -> Result<Opening, Refusal> {
        if let Some(o) = self.try_reserve(label) {
            return Ok(o);
        }
        let sweep_all = {
            let mut g = self.lock();
            let due = g.swept.is_none_or(|t| t.elapsed() >= SWEEP_EVERY);
            if due && g.by_id.len() + g.opening >= self.limits.total {
                g.swept = Some(Instant::now());
                true
            } else {
                false
            }
        };
        self.forget_closed(if sweep_all { None } else { Some(label) })
            .await;
        if let Some(o) = self.try_reserve(label) {
            return Ok(o);
        }
        let victim = {
            let mut g = self.lock();
            if g.by_id.len() + g.opening >= self.limits.total {
                let oldest = g.by_id.values().map(|s| s.seen).min();
                let wait = oldest.map_or(self.limits.idle, |t| {
                    self.limits.idle.saturating_sub(t.elapsed())
                });
                return Err(Refusal::Full {
                    retry_after: crate::limits::retry_after(wait.min(Duration::from_secs(60))),
                });
            }
            let victim = g
                .by_id
                .iter()
                .filter(|(_, s)| s.owner == label && s.in_flight.is_empty())
                .min_by_key(|(_, s)| s.seen)
                .map(|(id, _)| id.clone());
            let Some(victim) = victim else {
                return Err(Refusal::CallerBusy { retry_after: 1 });
            };
            g.by_id.remove(&victim);
            // The caller's count stays: the victim's place goes to the new one.
            g.opening += 1;
            victim
        };
        tracing::info!(caller = label, session = %victim, "MCP session limit of the caller reached; its least recently used session is closed");
        if let Err(e) = self.manager.close_session(&victim.clone().into()).await {
            tracing::warn!(error = %e, session = %victim, "closing an evicted MCP session");
        }
        Ok(Opening {
            owners: self.clone(),
            label: label.to_owned(),
            done: false,
        })
    }

    fn try_reserve(self: &Arc<Self>, label: &str) -> Option<Opening> {
        let mut g = self.lock();
        let mine = g.per_caller.get(label).copied().unwrap_or(0);
        if mine >= self.limits.per_caller || g.by_id.len() + g.opening >= self.limits.total {
            return None;
        }
        *g.per_caller.entry(label.to_owned()).or_insert(0) += 1;
        g.opening += 1;
        Some(Opening {
            owners: self.clone(),
            label: label.to_owned(),
            done: false,
        })
    }

    /// Forgets the sessions (of `label`, or all) that rmcp has closed (idle,
    /// deleted, failed), and closes in rmcp those idle past the limit here.
    async fn forget_closed(&self, label: Option<&str>) {
        let mine: Vec<String> = {
            let g = self.lock();
            g.by_id
                .iter()
                .filter(|(_, s)| label.is_none_or(|l| s.owner == l))
                .map(|(id, _)| id.clone())
                .collect()
        };
        let (closed, expired): (Vec<String>, Vec<String>) = {
            let live = self.manager.sessions.read().await;
            let g = self.lock();
            let closed = mine
                .iter()
                .filter(|id| !live.contains_key(id.as_str()))
                .cloned()
                .collect();
            let expired = mine
                .iter()
                .filter(|id| {
                    g.by_id.get(id.as_str()).is_some_and(|s| {
                        s.in_flight.is_empty() && s.seen.elapsed() >= self.limits.idle
                    })
                })
                .cloned()
                .collect();
            (closed, expired)
        };
        for id in closed.iter().chain(&expired) {
            self.forget(id);
        }
        for id in expired {
            let _ = self.manager.close_session(&id.into()).await;
        }
    }

    /// Forgets `session` (deleted, closed, expired).
    pub(crate) fn forget(&self, session: &str) {
        let mut g = self.lock();
        if let Some(s) = g.by_id.remove(session) {
            release(&mut g.per_caller, &s.owner);
        }
    }

    /// Marks the request `id` in flight in `session` until the returned guard
    /// is dropped. `None` for a session not known here (rmcp answers 404).
    pub(crate) fn start(
        self: &Arc<Self>,
        session: &str,
        id: &str,
    ) -> Result<Option<InFlight>, NotStarted> {
        let mut g = self.lock();
        let Some(s) = g.by_id.get_mut(session) else {
            return Ok(None);
        };
        if s.in_flight.contains(id) {
            return Err(NotStarted::Duplicate(id.to_owned()));
        }
        if s.in_flight.len() >= MAX_IN_FLIGHT {
            return Err(NotStarted::TooMany);
        }
        s.in_flight.insert(id.to_owned());
        Ok(Some(InFlight {
            owners: self.clone(),
            session: session.to_owned(),
            id: id.to_owned(),
        }))
    }

    /// Sessions known here (open, and being opened).
    pub(crate) fn owned(&self) -> usize {
        let g = self.lock();
        g.by_id.len() + g.opening
    }
}

fn release(per_caller: &mut HashMap<String, usize>, label: &str) {
    if let Some(n) = per_caller.get_mut(label) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            per_caller.remove(label);
        }
    }
}

/// A session being opened: counted against the limits until it is recorded
/// with [`Opening::opened`] or dropped (the `initialize` failed).
pub(crate) struct Opening {
    owners: Arc<SessionOwners>,
    label: String,
    done: bool,
}

impl Opening {
    /// rmcp answered the `initialize` with `session`.
    pub(crate) fn opened(mut self, session: &str) {
        let mut g = self.owners.lock();
        g.opening = g.opening.saturating_sub(1);
        let old = g.by_id.insert(
            session.to_owned(),
            Session {
                owner: self.label.clone(),
                seen: Instant::now(),
                in_flight: HashSet::new(),
            },
        );
        if let Some(old) = old {
            // A session id rmcp gave twice: never, but the count stays right.
            release(&mut g.per_caller, &old.owner);
        }
        self.done = true;
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        if !self.done {
            let mut g = self.owners.lock();
            g.opening = g.opening.saturating_sub(1);
            release(&mut g.per_caller, &self.label);
        }
    }
}

/// A request in flight in a session; dropped when its answer has been sent
/// (or given up).
pub(crate) struct InFlight {
    owners: Arc<SessionOwners>,
    session: String,
    id: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut g = self.owners.lock();
        if let Some(s) = g.by_id.get_mut(&self.session) {
            s.in_flight.remove(&self.id);
            s.seen = Instant::now();
        }
    }
}

/// How many MCP sessions there are, for operators and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct McpSessions {
    /// Sessions rmcp holds (each with its handler and buffers).
    pub live: usize,
    /// Sessions the guard knows an owner of, and those being opened.
    pub owned: usize,
}

impl ApiState {
    /// How many MCP sessions there are now.
    pub async fn mcp_sessions(&self) -> McpSessions {
        McpSessions {
            live: self.sessions.manager.sessions.read().await.len(),
            owned: self.sessions.owned(),
        }
    }
}

/// A response body that keeps its request marked in flight until it has been
/// sent to the end or dropped.
struct Tracked {
    inner: Body,
    _in_flight: InFlight,
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
    /// A JSON-RPC message (request, notification or response), with its method,
    /// for `tools/call` its tool, and its id as JSON text (`5`, `"a"`; `None`
    /// when absent or null).
    Message {
        method: Option<String>,
        tool: Option<String>,
        id: Option<String>,
    },
    /// A JSON array: batching was removed from MCP in 2025-06-18.
    Batch,
    /// Not JSON at all (JSON-RPC -32700).
    NotJson,
    /// JSON, but not a JSON-RPC 2.0 message (JSON-RPC -32600).
    Invalid,
}

/// Reads a POST body to `/mcp` without trusting it (public for the fuzz target).
pub fn read_rpc(body: &[u8]) -> Rpc {
    #[derive(serde::Deserialize)]
    struct Params {
        name: Option<Value>,
    }
    #[derive(serde::Deserialize)]
    struct Message {
        jsonrpc: Option<Value>,
        method: Option<Value>,
        params: Option<Params>,
        id: Option<Value>,
    }
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() {
            Rpc::Batch
        } else {
            Rpc::NotJson
        };
    }
    match serde_json::from_slice::<Message>(body) {
        Ok(m) if m.jsonrpc.as_ref().and_then(Value::as_str) == Some("2.0") => {
            let method = match m.method {
                None => None,
                Some(Value::String(s)) => Some(s),
                Some(_) => return Rpc::Invalid,
            };
            let tool = m
                .params
                .and_then(|p| p.name)
                .and_then(|n| n.as_str().map(str::to_owned));
            let id = m.id.filter(|v| !v.is_null()).map(|v| v.to_string());
            Rpc::Message { method, tool, id }
        }
        Ok(_) => Rpc::Invalid,
        Err(_) if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() => Rpc::Invalid,
        Err(_) => Rpc::NotJson,
    }
}

/// A JSON-RPC error with no id, as MCP's Streamable HTTP transport lets a server
/// answer input it cannot accept: HTTP 400 with the error as its body.
fn rpc_error(code: i64, message: &str) -> Response {
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
fn rpc_refusal(
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

async fn guarded(state: &ApiState, req: Request, next: Next) -> Result<Response, ApiError> {
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
                Rpc::Invalid => {
                    return Ok(rpc_error(
                        -32600,
                        "Invalid Request: not a JSON-RPC 2.0 message",
                    ));
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
async fn open_session(
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

/// Calls `tell` for every change to the listed tools from now on, until `stop`
/// ends, the layer goes, or `tell` fails (the client is gone).
async fn tell_listing_changes<F: Future<Output = bool>>(
    mut changes: tokio::sync::watch::Receiver<Vec<(String, String)>>,
    stop: impl Future<Output = ()>,
    mut tell: impl FnMut() -> F,
) {
    changes.mark_unchanged();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            changed = changes.changed() => {
                if changed.is_err() || !tell().await {
                    return;
                }
            }
        }
    }
}

/// Passes a forwarded progress (with the client's own token, when it gave one)
/// or log notification (when its level is at least `logs`; none when `None`)
/// on to the client of the call. A request cannot be pending once the call has
/// answered; one that is gets dropped, which its upstream sees as no answer.
#[allow(deprecated)] // Logging: deprecated by 2026-07-28, part of 2025-11-25.
async fn notify(
    context: &RequestContext<RoleServer>,
    token: Option<&rmcp::model::ProgressToken>,
    logs: Option<LoggingLevel>,
    msg: trawl_tools::forward::Forwarded,
) {
    use trawl_tools::forward::Forwarded;
    match msg {
        Forwarded::Progress(mut p) => {
            if let Some(t) = token {
                p.progress_token = t.clone();
                let _ = context.peer.notify_progress(p).await;
            }
        }
        Forwarded::Log(p) => {
            if logs.is_some_and(|least| p.level as u8 >= least as u8) {
                let _ = context.peer.notify_logging_message(p).await;
            }
        }
        Forwarded::Sampling { .. } | Forwarded::Elicitation { .. } | Forwarded::Roots { .. } => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn scopes_follow_what_a_tool_does() {
        assert_eq!(scope_of(SUBMIT_JOB), SCOPE_WRITE);
        assert_eq!(scope_of(CANCEL_JOB), SCOPE_WRITE);
        assert_eq!(scope_of(JOB_STATUS), SCOPE_READ);
        assert_eq!(scope_of(JOB_ITEMS), SCOPE_READ);
        assert_eq!(scope_of(TOOL_SEARCH), SCOPE_TOOLS);
        assert_eq!(scope_of("everything.echo"), SCOPE_TOOLS);
    }

    #[test]
    fn research_tools_have_descriptions_object_schemas_and_output_schemas() {
        for t in RESEARCH_TOOLS.iter() {
            assert!(
                t.description.as_deref().is_some_and(|d| !d.is_empty()),
                "{}",
                t.name
            );
            assert_eq!(
                t.input_schema.get("type"),
                Some(&json!("object")),
                "{}",
                t.name
            );
            assert!(t.output_schema.is_some(), "{}", t.name);
        }
    }

    /// Each research tool's output schema is the OpenAPI document's schema of
    /// the same answer (inlined and made portable), and no schema has a `type`
    /// array, a reference or a `oneOf`.
    #[test]
    fn research_tool_schemas_are_portable_and_the_ones_openapi_gives() {
        use utoipa::OpenApi as _;
        let doc = serde_json::to_value(crate::openapi::ApiDoc::openapi()).unwrap();
        let components = doc["components"]["schemas"].as_object().unwrap();
        let answers = [
            (SUBMIT_JOB, "JobAccepted"),
            (JOB_STATUS, "JobView"),
            (JOB_ITEMS, "ItemsPage"),
            (CANCEL_JOB, "JobView"),
        ];
        assert_eq!(answers.len(), RESEARCH_TOOLS.len());
        for (tool, component) in answers {
            let t = RESEARCH_TOOLS.iter().find(|t| t.name == tool).unwrap();
            let output = Value::Object(t.output_schema.as_deref().unwrap().clone());
            let documented = trawl_tools::schema::from_document(
                &components[component],
                components,
                Contract::Output,
            );
            assert_eq!(output, Value::Object(documented), "{tool}");
            let input = Value::Object(t.input_schema.as_ref().clone());
            for s in [&input, &output] {
                assert_eq!(
                    trawl_tools::schema::unportable(s),
                    Vec::<String>::new(),
                    "{tool}: {s}"
                );
                assert!(jsonschema::draft202012::new(s).is_ok(), "{tool}: {s}");
            }
        }
        // Nullable answers say so the portable way.
        let view = RESEARCH_TOOLS[1].output_schema.as_deref().unwrap();
        assert_eq!(
            view["properties"]["reason"]["anyOf"],
            json!([{"type": "string"}, {"type": "null"}])
        );
        // The spec is an object or YAML text, each its own branch.
        let submit = &RESEARCH_TOOLS[0].input_schema;
        let spec: Vec<&Value> = submit["properties"]["spec"]["anyOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| &b["type"])
            .collect();
        assert_eq!(spec, [&json!("object"), &json!("string")], "{submit:?}");
        assert_eq!(submit["required"], json!(["spec"]));
        assert_eq!(submit["additionalProperties"], json!(false));
        assert_eq!(submit["properties"]["idempotency_key"]["maxLength"], 200);
    }

    #[test]
    fn research_arguments_that_do_not_fit_their_type_are_refused_clearly() {
        let args = |v: Value| v.as_object().unwrap().clone();
        let msg = |e: ApiError| match e {
            ApiError::BadRequest(m) => m,
            other => panic!("{other:?}"),
        };
        let e = research_args::<SubmitJobArgs>(SUBMIT_JOB, &args(json!({"spec": 5}))).unwrap_err();
        assert!(msg(e).contains("spec is an object, or YAML text"));
        let e = research_args::<SubmitJobArgs>(SUBMIT_JOB, &args(json!({"spec": {}, "x": 1})))
            .unwrap_err();
        assert!(msg(e).contains("unknown field `x`"));
        let e = research_args::<JobIdArgs>(JOB_STATUS, &args(json!({}))).unwrap_err();
        assert_eq!(
            msg(e),
            "arguments of research.job_status: missing field `job_id`"
        );
        let e =
            research_args::<JobItemsArgs>(JOB_ITEMS, &args(json!({"job_id": "j", "limit": "x"})))
                .unwrap_err();
        assert!(msg(e).contains("invalid type: string \"x\""));
        let ok: JobItemsArgs = research_args(
            JOB_ITEMS,
            &args(json!({"job_id": "j", "limit": 5, "cursor": null})),
        )
        .unwrap();
        assert_eq!((ok.limit, ok.cursor), (Some(5), None));
        let ok: SubmitJobArgs =
            research_args(SUBMIT_JOB, &args(json!({"spec": "name: a"}))).unwrap();
        assert!(matches!(ok.spec, SpecArg::Yaml(y) if y == "name: a"));
    }

    #[test]
    fn rpc_bodies_are_read_without_trusting_them() {
        assert_eq!(
            read_rpc(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#),
            Rpc::Message {
                method: Some("tools/call".to_owned()),
                tool: Some("x".to_owned()),
                id: Some("1".to_owned()),
            }
        );
        assert_eq!(
            read_rpc(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#),
            Rpc::Message {
                method: None,
                tool: None,
                id: Some(r#""a""#.to_owned()),
            }
        );
        assert_eq!(
            read_rpc(br#"{"jsonrpc":"2.0","id":null,"method":"x","params":{"name":7}}"#),
            Rpc::Message {
                method: Some("x".to_owned()),
                tool: None,
                id: None,
            }
        );
        assert_eq!(read_rpc(b" [1,2]"), Rpc::Batch);
        assert_eq!(read_rpc(b"[1,"), Rpc::NotJson);
        assert_eq!(read_rpc(b"not json"), Rpc::NotJson);
        assert_eq!(read_rpc(br#"{"method":"ping"}"#), Rpc::Invalid);
        assert_eq!(read_rpc(br#"{"jsonrpc":"2.0","method":7}"#), Rpc::Invalid);
        assert_eq!(read_rpc(b"42"), Rpc::Invalid);
    }

    #[test]
    fn uri_templates_match_one_segment_per_variable() {
        assert!(template_matches(
            "test://template/{id}/data",
            "test://template/123/data"
        ));
        assert!(!template_matches(
            "test://template/{id}/data",
            "test://template//data"
        ));
        assert!(!template_matches(
            "test://template/{id}/data",
            "test://template/1/2/data"
        ));
        assert!(!template_matches(
            "test://template/{id}/data",
            "test://template/123/datum"
        ));
        assert!(template_matches("file:///{path}", "file:///a.txt"));
        assert!(!template_matches("file:///{path}", "file:///a/b.txt"));
        assert!(template_matches("test://static", "test://static"));
        assert!(!template_matches("test://static", "test://static2"));
    }

    /// A session of `label` opened in rmcp's manager as an `initialize` would.
    async fn open(owners: &Arc<SessionOwners>, label: &str) -> Result<String, Refusal> {
        let opening = owners.admit(label).await?;
        let (id, _transport) = owners.manager.create_session().await.unwrap();
        opening.opened(&id);
        Ok(id.to_string())
    }

    async fn live(owners: &SessionOwners, id: &str) -> bool {
        owners.manager.sessions.read().await.contains_key(id)
    }

    #[tokio::test]
    async fn sessions_belong_to_who_opened_them() {
        let s = Arc::new(SessionOwners::default());
        let id = open(&s, "sub:alice").await.unwrap();
        assert!(s.owner_matches(&id, "sub:alice"));
        assert!(!s.owner_matches(&id, "sub:mallory"));
        assert!(s.owner_matches("unknown", "sub:mallory"));
    }

    #[tokio::test]
    async fn a_caller_over_its_cap_loses_its_least_recently_used_idle_session() {
        let s = Arc::new(SessionOwners::new(
            McpConfig::default()
                .with_session_limits(2, 3, Duration::from_secs(3600))
                .session_limits,
        ));
        let a1 = open(&s, "key-a").await.unwrap();
        let a2 = open(&s, "key-a").await.unwrap();
        let busy = s.start(&a1, "7").unwrap().unwrap();
        // a1 is the older, but busy: a2 goes.
        let a3 = open(&s, "key-a").await.unwrap();
        assert!(live(&s, &a1).await && !live(&s, &a2).await && live(&s, &a3).await);
        assert_eq!(s.owned(), 2);
        let busy3 = s.start(&a3, "1").unwrap().unwrap();
        assert_eq!(
            open(&s, "key-a").await,
            Err(Refusal::CallerBusy { retry_after: 1 })
        );
        // Another caller is not affected, up to the total.
        let _b1 = open(&s, "key-b").await.unwrap();
        assert!(matches!(open(&s, "key-b").await, Err(Refusal::Full { .. })));
        assert!(matches!(open(&s, "key-a").await, Err(Refusal::Full { .. })));
        assert_eq!(s.owned(), 3, "refusals give their place back");
        drop((busy, busy3));
        // A session rmcp closed (idle, deleted) is forgotten when room is needed.
        s.manager.close_session(&a1.clone().into()).await.unwrap();
        let _a4 = open(&s, "key-a").await.unwrap();
        assert!(live(&s, &a3).await, "the closed one made room, not a3");
        assert_eq!(s.manager.sessions.read().await.len(), 3);
    }

    #[tokio::test]
    async fn one_id_is_in_flight_once_per_session() {
        let s = Arc::new(SessionOwners::default());
        let a = open(&s, "key-a").await.unwrap();
        let b = open(&s, "key-a").await.unwrap();
        let first = s.start(&a, "5").unwrap().unwrap();
        assert_eq!(
            s.start(&a, "5").err(),
            Some(NotStarted::Duplicate("5".to_owned()))
        );
        let _other_id = s.start(&a, r#""5""#).unwrap().unwrap();
        let _other_session = s.start(&b, "5").unwrap().unwrap();
        assert!(s.start("unknown", "5").unwrap().is_none());
        drop(first);
        let _again = s.start(&a, "5").unwrap().unwrap();
        let held: Vec<_> = (0..MAX_IN_FLIGHT - 2)
            .map(|i| s.start(&a, &format!("{}", 100 + i)).unwrap().unwrap())
            .collect();
        assert_eq!(s.start(&a, "99").err(), Some(NotStarted::TooMany));
        drop(held);
    }
}
