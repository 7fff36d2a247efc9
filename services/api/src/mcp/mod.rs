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

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
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
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
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
use crate::state::{ApiState, Caller};
use crate::{jobs, rows};

mod guard;
mod relay;
mod sessions;

pub(crate) use guard::guard;
pub use guard::{Rpc, read_rpc};
use relay::*;
pub use sessions::McpSessions;
pub(crate) use sessions::SessionOwners;
use sessions::*;

pub const SUBMIT_JOB: &str = "research.submit_job";
pub const JOB_STATUS: &str = "research.job_status";
pub const JOB_ITEMS: &str = "research.job_items";
pub const CANCEL_JOB: &str = "research.cancel_job";
pub const USAGE: &str = "research.usage";

/// How many sessions `/mcp` keeps. Where it may be reached from (its `Host`
/// and browser origins) is the site check's, as for every route
/// ([`crate::site`]).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct McpConfig {
    /// Sessions per caller and in all, and how long an idle one is kept.
    pub session_limits: SessionLimits,
}

impl McpConfig {
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

/// rmcp's Streamable HTTP service over `state`, stopped by `cancel`.
pub fn service(
    state: &ApiState,
    cancel: CancellationToken,
) -> StreamableHttpService<Gateway, LocalSessionManager> {
    // `Host` and `Origin` are checked in front of every route, `/mcp`
    // included ([`crate::site`]): rmcp's own checks would be a second list.
    let cfg = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .disable_allowed_origins()
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
        JOB_STATUS | JOB_ITEMS | USAGE => SCOPE_READ,
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
             its budget's approve_above_usd, or its tenant's threshold ($10 unless the operator \
             set another), waits for a human approval; one over a limit of the tenant is refused \
             naming the limit (see research.usage).",
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
        Tool::new(
            USAGE,
            "What your tenant has spent and planned by UTC day (jobs, slices, spend from the \
             ledger), its limits (slices per job and in flight, concurrent jobs, jobs per day, \
             spend per day and month, the approval threshold) and what is left of each.",
            derived::<crate::usage::UsageQuery>(Contract::Input),
        )
        .with_title("Tenant usage and limits")
        .with_raw_output_schema(derived::<crate::usage::UsageView>(Contract::Output))
        .with_annotations(ToolAnnotations::new().read_only(true).open_world(false)),
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
            USAGE => {
                let q: crate::usage::UsageQuery = research_args(tool, args)?;
                axum::Json(crate::usage::of(&state, &caller, q).await?).into_response()
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use rmcp::transport::streamable_http_server::SessionManager as _;

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
            (USAGE, "UsageView"),
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
        assert_eq!(read_rpc(b" [1,2]"), Rpc::Batch);
        assert_eq!(read_rpc(b"[1,"), Rpc::NotJson);
        assert_eq!(read_rpc(b"not json"), Rpc::NotJson);
        let invalid = |body: &[u8]| matches!(read_rpc(body), Rpc::Invalid(why) if why.starts_with("Invalid Request: "));
        for body in [
            &br#"{"method":"ping"}"#[..],
            br#"{"jsonrpc":"2.0","method":7}"#,
            b"42",
            br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
            br#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
            br#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[]}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":"x"}"#,
            br#"{"jsonrpc":"2.0","id":1}"#,
            br#"{"jsonrpc":"2.0","params":{}}"#,
            br#"{"id":1,"method":"ping"}"#,
            br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
        ] {
            assert!(
                invalid(body),
                "{}: {:?}",
                String::from_utf8_lossy(body),
                read_rpc(body)
            );
        }
        let bad_params = |body: &[u8], want: &str| match read_rpc(body) {
            Rpc::InvalidParams { id, method, reason } => {
                assert_eq!((id.as_str(), method.as_str()), ("7", want), "{reason}");
                assert!(!reason.is_empty());
            }
            other => panic!("{}: {other:?}", String::from_utf8_lossy(body)),
        };
        bad_params(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":42}}"#, "tools/call");
        bad_params(
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{}}}"#,
            "tools/call",
        );
        bad_params(
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":5}}"#,
            "tools/call",
        );
        bad_params(
            br#"{"jsonrpc":"2.0","id":7,"method":"logging/setLevel","params":{"level":"loud"}}"#,
            "logging/setLevel",
        );
        bad_params(
            br#"{"jsonrpc":"2.0","id":7,"method":"initialize"}"#,
            "initialize",
        );
        // Fitting params, and a method MCP does not have (rmcp answers -32601).
        assert!(matches!(
            read_rpc(br#"{"jsonrpc":"2.0","id":7,"method":"logging/setLevel","params":{"level":"error"}}"#),
            Rpc::Message { .. }
        ));
        assert_eq!(
            read_rpc(br#"{"jsonrpc":"2.0","id":"q","method":"no/such"}"#),
            Rpc::Message {
                method: Some("no/such".to_owned()),
                tool: None,
                id: Some(r#""q""#.to_owned()),
            }
        );
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
