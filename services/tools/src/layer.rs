//! [`ToolLayer`]: the catalog, the guard in front of every call, and the call.
//!
//! A call passes, in order: the catalog (an unknown tool is refused), the tool's
//! state (quarantined, awaiting approval, rejected or blocked tools are refused),
//! the policy (deny, approval per call, isolated pool only), the input schema,
//! then the cache, retries and budget, then the result sanitizer. Every call,
//! refused or made, leaves one audit row in the [`Recorder`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, LazyLock, RwLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use serde_json::{Value, json};
use tracing::Instrument as _;
use trawl_core::cost::Micros;
use trawl_core::model::now_ms;
use trawl_core::ports::{
    ContentCache, LoadFuture, PortError, Served, Store, ToolError, ToolListing, ToolProvider,
};

use crate::catalog::{Catalog, Entry, Listing, Offered, assemble, assemble_with, tool_search_def};
use crate::config::{Access, NewTools, Policy, ServerConfig, ToolsConfig};
use crate::embed::Embeddings;
use crate::guard::Guard;
use crate::mcp::{Transport, Upstream};
use crate::name::ServerName;
use crate::scan::{self, sanitize_result};
use crate::search::Query;
use crate::{CallOptions, Recorder};

/// The meta-tool that finds tools: an agent's context holds it and the few tools
/// it found, never the whole catalog.
pub const TOOL_SEARCH: &str = "tool_search";

/// The cap on a built-in tool's result: whole pages, for extraction.
const BUILTIN_RESULT_MAX_BYTES: usize = 16 * 1024 * 1024;

/// Where the layer runs: browser and computer-use tools (policy `isolated`) run
/// only in an isolated worker pool.
pub use trawl_core::model::Pool;

/// What a refresh found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RefreshReport {
    pub tools: usize,
    pub listed: usize,
    pub refused: usize,
    /// Pin changes stored: first sights, holds, restores.
    pub pin_changes: usize,
    /// Servers that could not be reached or listed, with why.
    pub server_errors: Vec<(String, String)>,
    /// Of those, the ones whose last good listing, from the store, is listed.
    pub stale: Vec<String>,
}

/// Where [`ToolLayer::refresh_from`] takes each server's tools from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listings {
    /// Every server is listed now.
    Live,
    /// A server listed before is taken from its stored listing, as it was
    /// then, without being started; only servers never listed are listed now
    /// (`trawl tools list|search` without `--refresh`).
    Stored,
}

/// Tools behind the guard, the cache, retries, budget, trace and audit.
pub struct ToolLayer {
    builtin: Arc<dyn ToolProvider>,
    cache: Arc<dyn ContentCache>,
    store: Option<Arc<dyn Store>>,
    config: ToolsConfig,
    pool: Pool,
    upstreams: RwLock<HashMap<String, Arc<Upstream>>>,
    catalog: RwLock<Arc<Catalog>>,
    /// The listed tools (name and definition hash of each), sent on whenever a
    /// swapped catalog lists other ones: what `tools/list_changed` follows.
    listing: tokio::sync::watch::Sender<Vec<(String, String)>>,
    refreshing: tokio::sync::Mutex<()>,
    /// Woken when an upstream says its tool list changed.
    upstream_changed: Arc<tokio::sync::Notify>,
}

impl ToolLayer {
    /// The built-in tools only, with the default policy and no pins.
    pub fn new(provider: Arc<dyn ToolProvider>, cache: Arc<dyn ContentCache>) -> ToolLayer {
        let layer = ToolLayer {
            builtin: provider,
            cache,
            store: None,
            config: ToolsConfig::default(),
            pool: Pool::Standard,
            upstreams: RwLock::new(HashMap::new()),
            catalog: RwLock::new(Arc::new(Catalog::default())),
            listing: tokio::sync::watch::Sender::new(Vec::new()),
            refreshing: tokio::sync::Mutex::new(()),
            upstream_changed: Arc::new(tokio::sync::Notify::new()),
        };
        let (catalog, _) = assemble(&[layer.builtin_listing()], None);
        layer.swap(catalog);
        layer
    }

    /// The built-in tools and the configured upstream servers, pinned in `store`
    /// (without a store nothing is pinned and no approval can be asked for: for
    /// looking at servers, not for running calls). Servers that cannot be reached
    /// are reported by the first refresh (and tried again by the next); they do
    /// not stop the others.
    pub async fn connect(
        provider: Arc<dyn ToolProvider>,
        cache: Arc<dyn ContentCache>,
        store: Option<Arc<dyn Store>>,
        config: ToolsConfig,
        pool: Pool,
    ) -> Result<(ToolLayer, RefreshReport), PortError> {
        ToolLayer::open(provider, cache, store, config, pool, Listings::Live).await
    }

    /// [`ToolLayer::connect`], its first catalog assembled `from` there.
    pub async fn open(
        provider: Arc<dyn ToolProvider>,
        cache: Arc<dyn ContentCache>,
        store: Option<Arc<dyn Store>>,
        config: ToolsConfig,
        pool: Pool,
        from: Listings,
    ) -> Result<(ToolLayer, RefreshReport), PortError> {
        let mut layer = ToolLayer::new(provider, cache);
        layer.store = store;
        layer.config = config;
        for s in &mut layer.config.servers {
            s.upstream.list_changed = Some(layer.upstream_changed.clone());
        }
        layer.pool = pool;
        let report = layer.refresh_from(from).await?;
        Ok((layer, report))
    }

    /// Returns when an upstream server has said that its tool list changed
    /// since the last time this returned: the binary then [refreshes](Self::refresh)
    /// at once rather than at its next interval. Many notices before the
    /// wait count as one.
    pub async fn upstream_list_changed(&self) {
        self.upstream_changed.notified().await;
    }

    /// The catalog as last assembled.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The worker pool this layer serves.
    pub fn pool(&self) -> Pool {
        self.pool
    }

    pub fn policy(&self) -> &Policy {
        &self.config.policy
    }

    /// Whether the policy lets this layer's pool call `tool` at all (with or
    /// without an approval per call): what may be offered to a model or a
    /// client, listed or found by `tool_search`.
    pub fn offers(&self, tool: &str) -> bool {
        match self.config.policy.access(tool).0 {
            Access::Deny => false,
            Access::Isolated => self.pool == Pool::Isolated,
            Access::Allow | Access::Approve => true,
        }
    }

    /// Gives the guard sentence embeddings (a layer from [`ToolLayer::connect`]
    /// takes them from its config, [`ToolsConfig::with_embeddings`]).
    pub fn with_embeddings(mut self, embeddings: Option<Arc<Embeddings>>) -> ToolLayer {
        self.config.embeddings = embeddings;
        self
    }

    /// The guard's sentence embeddings, when `TRAWL_EMBED_MODEL` gave a model.
    pub fn embeddings(&self) -> Option<&Arc<Embeddings>> {
        self.config.embeddings.as_ref()
    }

    /// The configuration the layer was built with.
    pub fn config(&self) -> &ToolsConfig {
        &self.config
    }

    /// The connection to upstream `server`, while it is connected.
    pub fn connection(&self, server: &str) -> Option<Arc<Upstream>> {
        self.upstreams
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(server)
            .cloned()
    }

    /// `tasks/get`, `tasks/update` or `tasks/cancel` of a task that a call of
    /// `tool` created on its server (see [`Upstream::task`]), while the tool is
    /// still one this layer offers and lists: a tool quarantined, held or
    /// denied since gives nothing more. A task's inlined result is sanitized as
    /// the tool's results are.
    pub async fn task(
        &self,
        tool: &str,
        request: crate::mcp::TaskRequest,
        meta: rmcp::model::RequestMetaObject,
    ) -> Result<rmcp::model::ServerResult, rmcp::ErrorData> {
        use rmcp::model::{ServerResult, TaskPayload};
        let catalog = self.catalog();
        let entry = catalog
            .get(tool)
            .filter(|e| !e.builtin && e.state == crate::ToolState::Listed && self.offers(tool))
            .ok_or_else(|| {
                rmcp::ErrorData::invalid_params(
                    format!("{tool}, whose task this is, is no longer offered"),
                    None,
                )
            })?;
        let up = self.connection(entry.name.server()).ok_or_else(|| {
            rmcp::ErrorData::internal_error(
                format!("upstream {} is not connected", entry.name.server()),
                None,
            )
        })?;
        let answer = crate::mcp::bounded(&up, up.task(request, meta)).await?;
        Ok(match answer {
            ServerResult::GetTaskResult(mut r) => {
                if let TaskPayload::Completed { result } = &mut r.task.payload {
                    let body = serde_json::to_vec(&*result).unwrap_or_default();
                    // Sanitizing keeps a JSON object one; anything else is
                    // not passed on unsanitized.
                    let Ok(Value::Object(clean)) = serde_json::from_slice(&sanitize(entry, body))
                    else {
                        return Err(rmcp::ErrorData::internal_error(
                            format!("the result of a task of {tool} could not be sanitized"),
                            None,
                        ));
                    };
                    *result = clean;
                }
                ServerResult::GetTaskResult(r)
            }
            other => other,
        })
    }

    fn swap(&self, catalog: Catalog) {
        let listed: Vec<(String, String)> = catalog
            .listed()
            .map(|e| (e.name.to_string(), e.hash.clone()))
            .collect();
        *self.catalog.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(catalog);
        self.listing.send_if_modified(|was| {
            let changed = *was != listed;
            if changed {
                *was = listed;
            }
            changed
        });
    }

    /// Changes to the listed tools: the receiver sees a change whenever a
    /// refresh lists tools other than before (one added, removed, changed,
    /// quarantined or approved), not on a refresh that changes nothing.
    pub fn listing_changes(&self) -> tokio::sync::watch::Receiver<Vec<(String, String)>> {
        self.listing.subscribe()
    }

    fn builtin_listing(&self) -> Listing {
        Listing {
            server: ServerName::builtin(),
            transport: "builtin",
            builtin: true,
            tools: self
                .builtin
                .tools()
                .into_iter()
                .map(|o| Offered {
                    // The built-in names are namespaced already; the catalog adds
                    // the server to a tool's own name.
                    raw: {
                        let mut raw = serde_json::to_value(&o.def).unwrap_or(Value::Null);
                        let bare = o
                            .def
                            .name
                            .split_once('.')
                            .map_or(o.def.name.as_str(), |(_, b)| b);
                        raw["name"] = json!(bare);
                        raw
                    },
                    cost_model: o.cost_model,
                    batch: o.batch,
                })
                .collect(),
            scan: self.config.builtin_scan,
            // Their examples use the reserved `.example` domain (RFC 2606).
            allow_hosts: vec!["example".to_owned()],
            new_tools: NewTools::Auto,
            overlaps: crate::config::Overlaps::Hold,
            result_max_bytes: BUILTIN_RESULT_MAX_BYTES,
            error: None,
            listed_ms: None,
        }
    }

    /// Lists every server again (connecting those not connected), scans, holds
    /// the tools against their pins, stores the pin changes, and swaps the catalog.
    pub async fn refresh(&self) -> Result<RefreshReport, PortError> {
        self.refresh_from(Listings::Live).await
    }

    /// [`ToolLayer::refresh`], taking each server's tools from where `from` says.
    ///
    /// Servers are listed [`ToolsConfig::list_concurrency`] at a time, each
    /// within its `list_timeout`, so one that hangs holds up no other. A good
    /// listing is kept in the store with its time; a server that cannot be
    /// listed keeps its last good listing, listed as stale (its calls fail as
    /// transient until it is back), rather than losing its tools.
    pub async fn refresh_from(&self, from: Listings) -> Result<RefreshReport, PortError> {
        let _one = self.refreshing.lock().await;
        let mut stored = self.stored_listings().await;
        let live: Vec<&ServerConfig> = self
            .config
            .servers
            .iter()
            .filter(|s| from == Listings::Live || !stored.contains_key(s.name.as_str()))
            .collect();
        // The futures are made first: a stream mapped by a closure here would
        // not be `Send` for every lifetime, as a spawned refresh needs.
        let listings: Vec<_> = live.into_iter().map(|s| self.list_server(s)).collect();
        let mut listed: HashMap<String, Listing> = futures_util::stream::iter(listings)
            .buffer_unordered(self.config.list_concurrency.max(1))
            .map(|l| (l.server.to_string(), l))
            .collect()
            .await;

        let mut listings = vec![self.builtin_listing()];
        let mut report = RefreshReport::default();
        for s in &self.config.servers {
            let name = s.name.to_string();
            let kept = stored.remove(&name);
            let listing = match (listed.remove(&name), kept) {
                (Some(mut l), kept) => {
                    if let Some(e) = &l.error {
                        tracing::warn!(server = %s.name, error = %e, "upstream server not listed");
                        report.server_errors.push((name.clone(), e.clone()));
                        if let Some(k) = kept {
                            l.tools = k.tools.into_iter().map(Offered::upstream).collect();
                            l.listed_ms = Some(k.listed_ms);
                            report.stale.push(name);
                        }
                    } else {
                        self.keep_listing(&l).await;
                    }
                    l
                }
                (None, Some(k)) => {
                    let mut l = self.empty_listing(s);
                    l.tools = k.tools.into_iter().map(Offered::upstream).collect();
                    l.listed_ms = Some(k.listed_ms);
                    l
                }
                // Every server is either listed now or stored.
                (None, None) => continue,
            };
            listings.push(listing);
        }
        let pins = match &self.store {
            Some(store) => Some(store.tool_pins().await?),
            None => None,
        };
        let guard = Guard::from_config(&self.config, self.store.clone());
        let assessment = guard.assess(&listings).await;
        let (mut catalog, changes) = assemble_with(&listings, pins.as_deref(), &assessment);
        if let (Some(store), false) = (&self.store, changes.is_empty()) {
            store.save_pins(&changes).await?;
            // Again with what was stored, so held tools name their approvals.
            let pins = store.tool_pins().await?;
            catalog = assemble_with(&listings, Some(&pins), &assessment).0;
        }
        for r in &catalog.refused {
            tracing::warn!(server = %r.server, tool = %r.tool, error = %r.error, "tool refused");
        }
        report.tools = catalog.entries().len();
        report.listed = catalog.listed().count();
        report.refused = catalog.refused.len();
        report.pin_changes = changes.len();
        self.embed(&mut catalog).await;
        self.swap(catalog);
        Ok(report)
    }

    /// Gives the catalog the sentence vectors of its listed tools, when the
    /// layer has embeddings: tool search then uses its dense half. Vectors are
    /// cached by text, so a refresh that changed nothing runs no model. When
    /// they cannot be had, search stays lexical, with a warning.
    async fn embed(&self, catalog: &mut Catalog) {
        let Some(embeddings) = &self.config.embeddings else {
            return;
        };
        let texts = catalog.dense_texts();
        if texts.is_empty() {
            return;
        }
        match embeddings.vectors(&texts).await {
            Ok(vectors) => {
                if !catalog.set_vectors(&vectors) {
                    tracing::warn!("tool vectors of mixed lengths; tool search stays lexical");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "tools not embedded; tool search stays lexical");
            }
        }
    }

    /// A query to search `catalog` with: its words, and its vector when the
    /// catalog has vectors to compare it with (embedded once, here). A query
    /// that cannot be embedded is searched by its words alone, with a warning.
    pub async fn query(&self, catalog: &Catalog, text: &str) -> Query {
        let mut query = Query::words(text);
        if let Some(embeddings) = &self.config.embeddings
            && catalog.has_vectors()
        {
            match embeddings.query(text).await {
                Ok(v) => query.vector = Some(v),
                Err(e) => {
                    tracing::warn!(error = %e, "query not embedded; searching its words alone")
                }
            }
        }
        query
    }

    /// The stored listings by server; none without a store, or when it cannot
    /// be read (a warning: the servers are then listed).
    async fn stored_listings(&self) -> HashMap<String, ToolListing> {
        let Some(store) = &self.store else {
            return HashMap::new();
        };
        match store.tool_listings().await {
            Ok(all) => all.into_iter().map(|l| (l.server.clone(), l)).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "stored tool listings not read; listing every server");
                HashMap::new()
            }
        }
    }

    /// Keeps a good listing in the store, with its time; a store that cannot
    /// take it costs only the fallback (a warning).
    async fn keep_listing(&self, l: &Listing) {
        let Some(store) = &self.store else {
            return;
        };
        let kept = ToolListing {
            server: l.server.to_string(),
            tools: l.tools.iter().map(|o| o.raw.clone()).collect(),
            listed_ms: now_ms(),
        };
        if let Err(e) = store.save_tool_listing(&kept).await {
            tracing::warn!(server = %l.server, error = %e, "tool listing not kept in the store");
        }
    }

    fn empty_listing(&self, s: &ServerConfig) -> Listing {
        let transport = match s.upstream.transport {
            Transport::Stdio { .. } => "stdio",
            Transport::Http { .. } => "http",
        };
        Listing {
            scan: s.scan,
            allow_hosts: s.allow_hosts.clone(),
            new_tools: s.new_tools,
            overlaps: s.overlaps,
            result_max_bytes: s.result_max_bytes,
            ..Listing::upstream(s.name.clone(), transport, Vec::new())
        }
    }

    /// Lists one server now, within its `list_timeout`.
    async fn list_server(&self, s: &ServerConfig) -> Listing {
        let mut listing = self.empty_listing(s);
        match tokio::time::timeout(s.list_timeout, self.server_tools(s)).await {
            Ok(Ok(tools)) => listing.tools = tools.into_iter().map(Offered::upstream).collect(),
            Ok(Err(e)) => listing.error = Some(e),
            Err(_) => {
                // A connection made before the time ran out is dropped too:
                // the server is tried afresh next time.
                self.disconnect(s.name.as_str());
                listing.error = Some(format!(
                    "not listed within {:?} (its list_timeout)",
                    s.list_timeout
                ));
            }
        }
        listing
    }

    /// The server's `tools/list`, connecting first if it is not connected.
    async fn server_tools(&self, s: &ServerConfig) -> Result<Vec<Value>, String> {
        let name = s.name.to_string();
        let upstream = match self.connection(&name) {
            Some(u) => u,
            None => {
                let u = Arc::new(
                    Upstream::connect(&s.upstream)
                        .await
                        .map_err(|e| e.to_string())?,
                );
                self.upstreams
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name.clone(), u.clone());
                u
            }
        };
        upstream.list_tools().await.map_err(|e| {
            // Connected again on the next refresh.
            self.disconnect(&name);
            e.to_string()
        })
    }

    fn disconnect(&self, server: &str) {
        self.upstreams
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(server);
    }

    /// Ends the upstream servers' connections (and child processes).
    pub async fn close(&self) {
        let all: Vec<Arc<Upstream>> = self
            .upstreams
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, u)| u)
            .collect();
        for u in all {
            // The last reference closes gracefully; one still held by a call in
            // flight ends its process when that call drops it.
            if let Ok(u) = Arc::try_unwrap(u) {
                u.close().await;
            }
        }
    }

    /// Whether this layer may run a browser session (the tool [`BROWSER_TOOL`]):
    /// its policy must allow it, and a browser (policy `isolated` by default) runs
    /// only in an isolated pool. The decision is audited either way.
    pub fn admit_browser(&self, rec: &Recorder) -> Result<(), ToolError> {
        let (access, rule) = self.config.policy.access(BROWSER_TOOL);
        let refusal = match access {
            Access::Deny => Some((
                "deny",
                ToolError::permanent("tool_denied", format!("{BROWSER_TOOL} is denied by {rule}")),
            )),
            Access::Approve => Some((
                "needs_approval",
                ToolError::permanent(
                    "needs_approval",
                    format!(
                        "{BROWSER_TOOL} needs an approval per call ({rule}); browser sessions cannot wait for one"
                    ),
                ),
            )),
            Access::Allow | Access::Isolated if self.pool != Pool::Isolated => Some((
                "isolated_only",
                ToolError::permanent(
                    "isolated_only",
                    format!("{BROWSER_TOOL} runs only in an isolated worker pool ({rule})"),
                ),
            )),
            Access::Allow | Access::Isolated => None,
        };
        let digest = trawl_core::digest(&[BROWSER_TOOL]);
        match refusal {
            Some((decision, e)) => {
                rec.audit(
                    BROWSER_TOOL,
                    &digest,
                    decision,
                    &rule,
                    Duration::ZERO,
                    0,
                    Some(&e),
                );
                Err(e)
            }
            None => {
                rec.audit(
                    BROWSER_TOOL,
                    &digest,
                    "allow",
                    &rule,
                    Duration::ZERO,
                    0,
                    None,
                );
                Ok(())
            }
        }
    }

    /// Page text on its way to a model, made safe: invisible characters removed,
    /// cut to `max_bytes`, and every span the poisoning scanner reads as
    /// instructions to the model (override, concealment, hidden blocks, chat-role
    /// tokens) replaced by a marker. A text with findings is audited as `flagged`
    /// under `source`, with the rules that fired.
    pub fn screen_page_text(
        &self,
        source: &str,
        text: &str,
        max_bytes: usize,
        rec: &Recorder,
    ) -> String {
        let clean = sanitize_result(text, max_bytes);
        let ctx = scan::ScanContext {
            server: "page",
            allow_hosts: &[],
            other_tools: &[],
            own_tools: &[],
        };
        let findings: Vec<scan::Finding> = scan::scan_text("page", &clean.text, &ctx)
            .into_iter()
            .filter(|f| INSTRUCTION_RULES.contains(&f.rule))
            .collect();
        if findings.is_empty() && clean.invisible_removed == 0 {
            return clean.text;
        }
        let mut rules = scan::rules_of(&findings, |_| true);
        if clean.invisible_removed > 0 && !rules.contains(&"invisible-unicode") {
            rules.push("invisible-unicode");
        }
        let out = replace_spans(&clean.text, &findings);
        let digest = trawl_core::digest(&[source, text]);
        let reason = format!(
            "page text sanitized before the model: {} ({} span(s) removed, {} invisible character(s))",
            rules.join(", "),
            findings.len(),
            clean.invisible_removed
        );
        rec.audit(
            source,
            &digest,
            "flagged",
            &reason,
            Duration::ZERO,
            out.len(),
            None,
        );
        out
    }

    /// Calls `tool` with `args` through the guard: refused calls are audited with
    /// why; allowed ones come from the cache when fresh, else upstream with
    /// bounded retries, every attempt and cache answer traced, the result
    /// sanitized.
    pub async fn call(
        &self,
        tool: &str,
        args: &Value,
        opts: &CallOptions<'_>,
        rec: &Recorder,
    ) -> Result<Vec<u8>, ToolError> {
        let span = tracing::info_span!(
            "tool_call",
            otel.name = %format_args!("tool {tool}"),
            tool,
            decision = tracing::field::Empty,
            cache = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        async {
            let started = Instant::now();
            let args_digest = trawl_core::digest(&[tool, &args.to_string()]);
            let catalog = self.catalog();
            let (decision, reason, result) = self
                .guarded(&catalog, tool, args, &args_digest, opts, rec)
                .await;
            let bytes = result.as_ref().map_or(0, Vec::len);
            let elapsed = started.elapsed();
            rec.audit(
                tool,
                &args_digest,
                decision,
                &reason,
                elapsed,
                bytes,
                result.as_ref().err(),
            );
            let outcome = match &result {
                Ok(_) => "ok",
                Err(e) if decision == "allow" => e.code.as_str(),
                Err(_) => "refused",
            };
            let span = tracing::Span::current();
            span.record("decision", decision);
            span.record("outcome", outcome);
            trawl_telemetry::names::tool_call(tool, outcome, elapsed);
            result
        }
        .instrument(span)
        .await
    }

    /// The decision, its reason, and the call's result.
    async fn guarded(
        &self,
        catalog: &Catalog,
        tool: &str,
        args: &Value,
        args_digest: &str,
        opts: &CallOptions<'_>,
        rec: &Recorder,
    ) -> (&'static str, String, Result<Vec<u8>, ToolError>) {
        if tool == TOOL_SEARCH {
            let found = match tool_search_args(args) {
                Ok(parsed) => {
                    let query = self.query(catalog, &parsed.query).await;
                    Ok(tool_search(catalog, &query, parsed.limit, |e| {
                        self.offers(e.name.as_str()) && (opts.offer_builtins || !e.builtin)
                    }))
                }
                Err(e) => Err(e),
            };
            return ("allow", "meta-tool".into(), found);
        }
        let Some(entry) = catalog.get(tool) else {
            let e = ToolError::permanent("unknown_tool", format!("no tool named {tool}"));
            return ("unknown_tool", "not in the catalog".into(), Err(e));
        };
        if let Some(decision) = entry.state.refusal() {
            let why = match &entry.state {
                crate::ToolState::Blocked { rules } => {
                    format!("blocked by the description scanner: {}", rules.join(", "))
                }
                crate::ToolState::Quarantined { approval } => format!(
                    "its definition changed since it was pinned; approval {} decides",
                    approval.map_or("pending".into(), |a| a.to_string())
                ),
                crate::ToolState::Awaiting { approval } => format!(
                    "new tool awaiting approval {}",
                    approval.map_or("pending".into(), |a| a.to_string())
                ),
                crate::ToolState::Held { approval, rules } => format!(
                    "held for review ({}); approval {} decides",
                    rules.join(", "),
                    approval.map_or("pending".into(), |a| a.to_string())
                ),
                _ => "its pending definition was rejected".into(),
            };
            let e = ToolError::permanent(format!("tool_{decision}"), format!("{tool}: {why}"));
            return (decision, why, Err(e));
        }
        let (access, rule) = self.config.policy.access(tool);
        match access {
            Access::Allow => {}
            Access::Deny => {
                let e = ToolError::permanent("tool_denied", format!("{tool} is denied by {rule}"));
                return ("deny", rule, Err(e));
            }
            Access::Isolated if self.pool != Pool::Isolated => {
                let e = ToolError::permanent(
                    "isolated_only",
                    format!("{tool} runs only in an isolated worker pool ({rule})"),
                );
                return ("isolated_only", rule, Err(e));
            }
            Access::Isolated => {}
            Access::Approve => {
                let Some(store) = &self.store else {
                    let e = ToolError::permanent(
                        "needs_approval",
                        format!("{tool} needs an approval per call and no store keeps approvals"),
                    );
                    return ("needs_approval", rule, Err(e));
                };
                let detail = json!({"tool": tool, "arguments": args, "args_digest": args_digest});
                let reason = format!("a call of {tool} ({rule})");
                match store
                    .tool_call_approval(tool, args_digest, &reason, &detail)
                    .await
                {
                    Ok((_, Some(true))) => {}
                    Ok((id, Some(false))) => {
                        let e = ToolError::permanent(
                            "call_rejected",
                            format!("this call of {tool} was rejected (approval {id})"),
                        );
                        return ("deny", format!("approval {id} rejected"), Err(e));
                    }
                    Ok((id, None)) => {
                        let e = ToolError::permanent(
                            "needs_approval",
                            format!("this call of {tool} waits for approval {id}"),
                        );
                        return ("needs_approval", format!("approval {id} pending"), Err(e));
                    }
                    Err(e) => {
                        let e = ToolError::transient(
                            "approval_unavailable",
                            format!("approvals could not be read: {e}"),
                        );
                        return ("needs_approval", rule, Err(e));
                    }
                }
            }
        }
        if let Some(e) = entry.validator.iter_errors(args).next() {
            let at = e.instance_path().to_string();
            let e = ToolError::permanent(
                "bad_arguments",
                format!(
                    "arguments of {tool} do not match its input schema: {}{e}",
                    if at.is_empty() {
                        String::new()
                    } else {
                        format!("at {at}: ")
                    }
                ),
            );
            return ("bad_arguments", "input schema".into(), Err(e));
        }
        let result = match &entry.batch {
            Some(batch) => Ok(self.batch(batch, args, opts, rec).await),
            None => self.made(entry, args, args_digest, opts, rec).await,
        };
        ("allow", rule, result.map(|body| sanitize(entry, body)))
    }

    /// A batch tool's calls, each through [`ToolLayer::call`] (and so audited,
    /// cached and billed on its own), at most a few at a time.
    async fn batch(
        &self,
        batch: &trawl_core::ports::BatchOf,
        args: &Value,
        opts: &CallOptions<'_>,
        rec: &Recorder,
    ) -> Vec<u8> {
        use futures_util::StreamExt;
        let items = args
            .get(batch.items_field)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let results: Vec<Value> = futures_util::stream::iter(items)
            .map(|item| async move {
                match Box::pin(self.call(&batch.tool, &item, opts, rec)).await {
                    Ok(body) => json!({"result": serde_json::from_slice::<Value>(&body)
                        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()))}),
                    Err(e) => json!({"error": {"code": e.code, "message": e.message}}),
                }
            })
            .buffered(4)
            .collect()
            .await;
        json!({"results": results}).to_string().into_bytes()
    }

    /// The call itself: the cache when the tool has a cache key, else upstream.
    async fn made(
        &self,
        entry: &Entry,
        args: &Value,
        args_digest: &str,
        opts: &CallOptions<'_>,
        rec: &Recorder,
    ) -> Result<Vec<u8>, ToolError> {
        let tool = entry.name.as_str();
        let started = Instant::now();
        let ran = AtomicBool::new(false);
        let upstream = self.upstream(entry, args, args_digest, opts, rec, &ran);
        let key = if entry.builtin {
            self.builtin.cache_key(tool, args)
        } else {
            None
        };
        let Some(key) = key else {
            return upstream.await;
        };
        let load: LoadFuture<'_> = Box::pin(upstream);
        let result = self.cache.get_or_load(&key, opts.max_age, load).await;
        let served_here = |r: Result<(), &ToolError>| {
            rec.step(
                tool,
                args_digest,
                true,
                0,
                r,
                started.elapsed(),
                Micros::ZERO,
                "",
            );
        };
        // "shared": served by another call's load of the same key (its answer
        // or its failure), counted as a hit, as the slice's trace does.
        let cache = match &result {
            Ok((_, Served::Hit)) => "hit",
            Ok((_, Served::Coalesced)) => "shared",
            Ok((_, Served::Loaded)) => "miss",
            Err(_) if ran.load(Ordering::Relaxed) => "miss",
            Err(_) => "shared",
        };
        tracing::Span::current().record("cache", cache);
        trawl_telemetry::names::cache_lookup(cache != "miss");
        match result {
            Ok((body, Served::Loaded)) => Ok(body),
            Ok((body, Served::Hit | Served::Coalesced)) => {
                served_here(Ok(()));
                Ok(body)
            }
            Err(e) => {
                // Our own attempts are already recorded; a waiter that got the
                // leader's failure records that it got it, without a call.
                if !ran.load(Ordering::Relaxed) {
                    served_here(Err(&e));
                }
                Err(e)
            }
        }
    }

    /// One attempt at the provider of `entry`.
    async fn attempt(
        &self,
        entry: &Entry,
        args: &Value,
    ) -> Result<trawl_core::ports::ToolAnswer, ToolError> {
        if entry.builtin {
            return self.builtin.call(entry.name.as_str(), args).await;
        }
        let upstream = self
            .upstreams
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(entry.name.server())
            .cloned()
            .ok_or_else(|| {
                ToolError::transient(
                    "upstream_closed",
                    format!("{} is not connected", entry.name.server()),
                )
            })?;
        // Boxed: the call's future (a leased session, its handshake) would
        // otherwise be nested in every caller's, past the compiler's query depth.
        let result = Box::pin(upstream.call(entry.name.bare(), args)).await?;
        Ok(trawl_core::ports::ToolAnswer {
            body: serde_json::to_vec(&result)
                .map_err(|e| ToolError::permanent("encode", e.to_string()))?,
            cost: Micros::ZERO,
            product: "",
        })
    }

    /// The call with retries, as a future the cache runs at most once per key.
    async fn upstream(
        &self,
        entry: &Entry,
        args: &Value,
        args_digest: &str,
        opts: &CallOptions<'_>,
        rec: &Recorder,
        ran: &AtomicBool,
    ) -> Result<Vec<u8>, ToolError> {
        ran.store(true, Ordering::Relaxed);
        let tool = entry.name.as_str();
        let attempt = AtomicU32::new(0);
        let price = if entry.builtin {
            self.builtin.price(tool)
        } else {
            Micros::ZERO
        };
        let once = || async {
            let n = attempt.fetch_add(1, Ordering::Relaxed) + 1;
            opts.budget.reserve(price, "this call").await?;
            let t = Instant::now();
            // No span of its own: each attempt's request is a span under the
            // call (Bright Data's `POST /request`, an upstream server's `call`),
            // and a retry is an event on the call.
            let answer = self.attempt(entry, args).await;
            let status = answer.as_ref().map_or_else(|e| e.code.as_str(), |_| "ok");
            trawl_telemetry::names::upstream_attempt(tool, n, status);
            match answer {
                Ok(answer) => {
                    opts.budget.settle(price, answer.cost).await;
                    rec.step(
                        tool,
                        args_digest,
                        false,
                        n,
                        Ok(()),
                        t.elapsed(),
                        answer.cost,
                        answer.product,
                    );
                    Ok(answer.body)
                }
                Err(e) => {
                    opts.budget.release(price).await;
                    rec.step(
                        tool,
                        args_digest,
                        false,
                        n,
                        Err(&e),
                        t.elapsed(),
                        Micros::ZERO,
                        "",
                    );
                    Err(e)
                }
            }
        };
        crate::retrying(opts.retry, once).await
    }
}

/// The arguments of a `tool_search` call, checked against its schema.
fn tool_search_args(args: &Value) -> Result<crate::catalog::ToolSearchArgs, ToolError> {
    static VALIDATOR: LazyLock<Result<jsonschema::Validator, String>> = LazyLock::new(|| {
        jsonschema::validator_for(&tool_search_def().input_schema).map_err(|e| e.to_string())
    });
    let validator = VALIDATOR
        .as_ref()
        .map_err(|e| ToolError::permanent("internal", e.clone()))?;
    if let Some(e) = validator.iter_errors(args).next() {
        // Masked: the message names the rule, not the (maybe huge) value.
        return Err(ToolError::permanent(
            "bad_arguments",
            format!(
                "arguments of tool_search: {} at {}",
                e.masked(),
                e.instance_path()
            ),
        ));
    }
    serde_json::from_value(args.clone()).map_err(|e| {
        ToolError::permanent("bad_arguments", format!("arguments of tool_search: {e}"))
    })
}

/// `tool_search`: the definitions of the best matches among the listed tools
/// that `offered` keeps.
fn tool_search(
    catalog: &Catalog,
    query: &Query,
    limit: Option<usize>,
    offered: impl Fn(&Entry) -> bool,
) -> Vec<u8> {
    let limit = limit.unwrap_or(crate::catalog::ToolSearchArgs::DEFAULT_LIMIT);
    let tools: Vec<Value> = catalog
        .search_where(query, limit, offered)
        .into_iter()
        .map(|f| {
            let mut v = serde_json::to_value(&f.entry.def).unwrap_or(Value::Null);
            v["score"] = json!(f.score);
            v
        })
        .collect();
    json!({"tools": tools}).to_string().into_bytes()
}

/// The tool name browser sessions are admitted under (policy rules match it; the
/// default `*browser*` rule makes it `isolated`).
pub const BROWSER_TOOL: &str = "brightdata.browser";

/// Scanner rules whose spans, in page text, read as instructions to the model.
const INSTRUCTION_RULES: &[&str] = &[
    "override-instructions",
    "conceal-from-user",
    "hidden-block",
    "prompt-role",
    "secret-request",
    "exfil-url",
];

/// `text` with each finding's span replaced by a visible marker.
fn replace_spans(text: &str, findings: &[scan::Finding]) -> String {
    let mut spans: Vec<(std::ops::Range<usize>, &str)> =
        findings.iter().map(|f| (f.span.clone(), f.rule)).collect();
    spans.sort_by_key(|(r, _)| (r.start, r.end));
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    for (r, rule) in spans {
        if r.start < pos
            || r.end > text.len()
            || !text.is_char_boundary(r.start)
            || !text.is_char_boundary(r.end)
        {
            continue;
        }
        out.push_str(&text[pos..r.start]);
        out.push_str(&format!(
            "[trawl removed text that reads as instructions: {rule}]"
        ));
        pos = r.end;
    }
    out.push_str(&text[pos..]);
    out
}

/// A result as the caller gets it: invisible characters stripped, size capped.
/// An upstream result's text blocks are sanitized one by one (so the JSON stays
/// whole); a structured result over the cap is dropped with a note.
fn sanitize(entry: &Entry, body: Vec<u8>) -> Vec<u8> {
    let cap = entry.result_max_bytes;
    if entry.builtin {
        return match std::str::from_utf8(&body) {
            // Nothing to strip or cut: the body as it is, without a copy.
            Ok(text) if text.len() <= cap && !scan::has_invisible(text) => body,
            Ok(text) => {
                let s = sanitize_result(text, cap);
                if s.invisible_removed == 0 && s.truncated_from.is_none() {
                    body
                } else {
                    s.text.into_bytes()
                }
            }
            // Not text: passed as it is, capped.
            Err(_) => body.into_iter().take(cap).collect(),
        };
    }
    let Ok(mut v) = serde_json::from_slice::<Value>(&body) else {
        return sanitize_result(&String::from_utf8_lossy(&body), cap)
            .text
            .into_bytes();
    };
    if let Some(blocks) = v.get_mut("content").and_then(Value::as_array_mut) {
        for b in blocks {
            if let Some(Value::String(t)) = b.get_mut("text") {
                *t = sanitize_result(t, cap).text;
            }
        }
    }
    if let Some(sc) = v.get_mut("structuredContent") {
        strip_strings(sc);
        if sc.to_string().len() > cap {
            *sc = Value::Null;
            let note = format!("[trawl: structured result over {cap} bytes dropped]");
            if let Some(c) = v["content"].as_array_mut() {
                c.push(json!({"type": "text", "text": note}));
            }
        }
    }
    v.to_string().into_bytes()
}

fn strip_strings(v: &mut Value) {
    match v {
        Value::String(s) => {
            let clean = sanitize_result(s, usize::MAX);
            if clean.invisible_removed > 0 {
                *s = clean.text;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strip_strings),
        Value::Object(m) => m.values_mut().for_each(strip_strings),
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn tool_search_queries_are_bounded() {
        let max = crate::catalog::ToolSearchArgs::MAX_QUERY_CHARS;
        let at = tool_search_args(&json!({"query": "é".repeat(max)})).unwrap();
        assert_eq!(at.query.chars().count(), max);
        let e = tool_search_args(&json!({"query": "a".repeat(200_000)})).unwrap_err();
        assert_eq!(e.code, "bad_arguments");
        assert!(
            e.message.contains("longer than 1000 characters"),
            "{}",
            e.message
        );
        assert!(
            e.message.len() < 300,
            "the value is not echoed: {}",
            e.message
        );
        let e = tool_search_args(&json!({"query": ""})).unwrap_err();
        assert_eq!(e.code, "bad_arguments");
    }
}
