//! `trawl tools`: the tool layer's catalog, search, scanner, pins and approvals
//! from the command line.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use trawl_brightdata::{BrightData, BrightDataConfig};
use trawl_core::model::now_ms;
use trawl_core::ports::{ContentCache, Store};
use trawl_tools::catalog::{Listing, Offered, assemble_with};
use trawl_tools::config::ToolsConfig;
use trawl_tools::config::{NewTools, RESULT_MAX_BYTES, ScanPolicy};
use trawl_tools::embed::Embeddings;
use trawl_tools::guard::Guard;
use trawl_tools::name::ServerName;
use trawl_tools::{Catalog, Listings, Pool, ToolLayer, ToolState};

/// Where the tool layer's configuration and state are.
#[derive(Args, Clone)]
pub struct ToolsArgs {
    /// Upstream MCP servers and policies (YAML); without it, the built-in tools only.
    #[arg(long, env = "TRAWL_TOOLS_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// State folder of the embedded store (pins, approvals, audit).
    #[arg(long, env = "TRAWL_HOME", default_value = ".trawl", global = true)]
    state: PathBuf,
    /// Postgres instead of the embedded store, as the deployed roles use.
    #[arg(long, env = "TRAWL_DATABASE_URL", global = true)]
    database_url: Option<String>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(flatten)]
    detector: crate::models::DetectorArgs,
    #[command(subcommand)]
    command: ToolsCommand,
}

/// The guard's embeddings, when a model folder is given (cached in `store`).
async fn embeddings(
    args: &ToolsArgs,
    store: Option<Arc<dyn Store>>,
) -> anyhow::Result<Option<Arc<Embeddings>>> {
    crate::embedded::embeddings(&args.detector, store).await
}

#[derive(Subcommand, Clone)]
enum ToolsCommand {
    /// The catalog: listed tools; with --all, also quarantined, awaiting,
    /// rejected and blocked ones, and the tools refused at registration.
    List {
        #[arg(long)]
        all: bool,
        /// List every server now, rather than answer from their stored listings.
        #[arg(long)]
        refresh: bool,
    },
    /// The best tools for a task (BM25 fused with the dense half when a model is
    /// configured), and what loading only them saves.
    Search {
        query: String,
        #[arg(long, default_value_t = 5)]
        limit: usize,
        /// Show each hit's BM25 and dense ranks and scores beside the fused score.
        #[arg(long)]
        explain: bool,
        /// List every server now, rather than answer from their stored listings.
        #[arg(long)]
        refresh: bool,
    },
    /// Scan tool definitions for poisoning: a configured server's, or a file
    /// holding a `tools/list` result (`{"tools": [...]}`). Exits 0 when clean
    /// (flags only), 1 when a tool would be blocked, held for review or refused
    /// at registration, 2 when the scan fails (no such file, not JSON, not a
    /// `tools/list` result), so it can gate CI.
    Scan {
        /// A configured server.
        #[arg(long, conflicts_with = "file")]
        server: Option<String>,
        /// A `tools/list` result.
        file: Option<PathBuf>,
        /// Hosts the file's tools may send data to.
        #[arg(long, value_delimiter = ',')]
        allow_hosts: Vec<String>,
    },
    /// Every pinned tool: its hash, state, and who approved it.
    Pins,
    /// Approve a tool approval (`tool_change`, `new_tool`, `tool_call`).
    Approve {
        id: i64,
        #[arg(long, env = "USER", default_value = "cli")]
        by: String,
    },
    /// Reject a tool approval: the tool (or call) stays out.
    Reject {
        id: i64,
        #[arg(long, env = "USER", default_value = "cli")]
        by: String,
    },
}

/// A line on stdout; a closed pipe (`| head`) ends the output quietly.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

/// Exit codes of `trawl tools`.
const OK: u8 = 0;
const BLOCKING: u8 = 1;
const NOT_FOUND: u8 = 2;
const SCAN_ERROR: u8 = 2;

/// `trawl tools scan`: a configured server's tools, or a file's.
async fn scan(
    args: &ToolsArgs,
    server: Option<&str>,
    file: Option<&Path>,
    allow_hosts: &[String],
) -> anyhow::Result<u8> {
    match (server, file) {
        (None, Some(file)) => {
            let config = ToolsConfig::default()
                .with_embeddings(embeddings(args, None).await?)
                .with_judge(crate::cli::guard_judge_from_env()?);
            scan_file(
                file,
                allow_hosts,
                &Guard::from_config(&config, None),
                args.json,
            )
            .await
        }
        (None, None) => anyhow::bail!("trawl tools scan: give --server NAME or a FILE.json"),
        (Some(server), _) => {
            // Looking, not trusting: no store, so nothing is pinned.
            let layer = layer(args, None, Listings::Live).await?;
            let catalog = layer.catalog();
            let mode = Guard::from_config(
                &ToolsConfig::default().with_embeddings(layer.embeddings().cloned()),
                None,
            )
            .mode();
            layer.close().await;
            if !catalog.servers.iter().any(|s| s.name == server) {
                anyhow::bail!("no server named {server} in the configuration");
            }
            Ok(print_scan(&catalog, Some(server), mode, args.json))
        }
    }
}

pub async fn run(args: ToolsArgs) -> anyhow::Result<u8> {
    match &args.command {
        // A scan gates CI: 0 clean, 1 a tool would be blocked, held or refused,
        // 2 the scan itself failed.
        ToolsCommand::Scan {
            server,
            file,
            allow_hosts,
        } => Ok(
            match scan(&args, server.as_deref(), file.as_deref(), allow_hosts).await {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    SCAN_ERROR
                }
            },
        ),
        ToolsCommand::List { all, refresh } => {
            let store = store(&args).await?;
            let layer = layer(&args, Some(store), listings(*refresh)).await?;
            let catalog = layer.catalog();
            layer.close().await;
            print_list(&catalog, *all, args.json);
            Ok(OK)
        }
        ToolsCommand::Search {
            query,
            limit,
            explain,
            refresh,
        } => {
            let store = store(&args).await?;
            let layer = layer(&args, Some(store), listings(*refresh)).await?;
            let catalog = layer.catalog();
            let q = layer.query(&catalog, query).await;
            layer.close().await;
            let hits = catalog.search(&q, *limit);
            let search = trawl_tools::catalog::tool_search_def();
            let (loaded, whole) = catalog
                .context_tokens(std::iter::once(&search).chain(hits.iter().map(|f| &f.entry.def)));
            let mode = if q.vector.is_some() {
                "hybrid"
            } else {
                "lexical"
            };
            if args.json {
                let tools: Vec<Value> = hits
                    .iter()
                    .map(|f| {
                        let mut t = json!({"name": f.entry.name.as_str(), "score": f.score, "description": f.entry.def.description});
                        if *explain {
                            t["bm25"] = json!(f.lexical);
                            t["dense"] = json!(f.dense);
                        }
                        t
                    })
                    .collect();
                outln!(
                    "{}",
                    json!({"search": mode, "tools": tools, "tokens": {"loaded": loaded, "catalog": whole}})
                );
            } else {
                if *explain {
                    outln!(
                        "{:>8}  {:>14}  {:>14}  tool ({mode} search)",
                        "fused",
                        "bm25 rank/score",
                        "dense rank/cos"
                    );
                }
                let rank = |r: Option<trawl_tools::search::Rank>, digits: usize| {
                    r.map_or_else(
                        || "-".to_owned(),
                        |r| format!("{} / {:.*}", r.rank, digits, r.score),
                    )
                };
                for f in &hits {
                    if *explain {
                        outln!(
                            "{:>8.4}  {:>14}  {:>14}  {}  {}",
                            f.score,
                            rank(f.lexical, 2),
                            rank(f.dense, 3),
                            f.entry.name,
                            first_line(&f.entry.def.description)
                        );
                    } else {
                        outln!(
                            "{:>6.3}  {}  {}",
                            f.score,
                            f.entry.name,
                            first_line(&f.entry.def.description)
                        );
                    }
                }
                outln!(
                    "context: tool_search and these {} tools are {loaded} tokens; the whole catalog ({} tools) is {whole} (o200k_base)",
                    hits.len(),
                    catalog.listed().count()
                );
            }
            Ok(OK)
        }
        ToolsCommand::Pins => {
            let store = store(&args).await?;
            let pins = store.tool_pins().await?;
            if args.json {
                outln!("{}", serde_json::to_string(&pins)?);
            } else {
                for p in &pins {
                    outln!(
                        "{:<40} {:<11} {}  by {}{}",
                        p.tool,
                        p.status.as_str(),
                        p.hash.as_deref().map_or("-", |h| &h[..12.min(h.len())]),
                        p.approved_by.as_deref().unwrap_or("-"),
                        p.approval_id
                            .map(|a| format!("  (approval {a} pending)"))
                            .unwrap_or_default(),
                    );
                }
            }
            Ok(OK)
        }
        ToolsCommand::Approve { id, by } | ToolsCommand::Reject { id, by } => {
            let approved = matches!(args.command, ToolsCommand::Approve { .. });
            let store = store(&args).await?;
            match store.decide_tool_approval(*id, approved, by).await? {
                Some(r) => {
                    outln!(
                        "approval {id} ({}, {}) {} by {by}",
                        r.kind,
                        r.tool.as_deref().unwrap_or("-"),
                        if approved { "approved" } else { "rejected" }
                    );
                    Ok(OK)
                }
                None => {
                    // Say why: decided already, expired, or not a tool approval.
                    match store.approval(*id).await? {
                        Some(r) if r.expired || r.expires_ms.is_some_and(|e| e <= now_ms()) => {
                            eprintln!("error: {}; it can no longer be decided", r.expiry_reason())
                        }
                        Some(r) if r.approved.is_some() && r.tool.is_some() => eprintln!(
                            "error: approval {id} was already {} by {}",
                            r.status(),
                            r.decided_by.as_deref().unwrap_or("someone")
                        ),
                        _ => eprintln!("error: no pending tool approval {id}"),
                    }
                    Ok(NOT_FOUND)
                }
            }
        }
    }
}

async fn store(args: &ToolsArgs) -> anyhow::Result<Arc<dyn Store>> {
    open_store(&args.state, args.database_url.as_deref()).await
}

/// The store of a command that reads or decides: Postgres at `database_url`
/// (migrated first), else the embedded store in the state folder.
pub(crate) async fn open_store(
    state: &std::path::Path,
    database_url: Option<&str>,
) -> anyhow::Result<Arc<dyn Store>> {
    Ok(match database_url {
        Some(url) => {
            trawl_store::postgres::migrate(url).await?;
            Arc::new(trawl_store::PgStore::connect(url, 2).await?)
        }
        None => {
            std::fs::create_dir_all(state)
                .with_context(|| format!("creating {}", state.display()))?;
            Arc::new(trawl_store::SqliteStore::open(&state.join("store.db")).await?)
        }
    })
}

/// Where `list` and `search` take the servers' tools from: their stored
/// listings unless `--refresh` (a server never listed is listed either way).
fn listings(refresh: bool) -> Listings {
    if refresh {
        Listings::Live
    } else {
        Listings::Stored
    }
}

async fn layer(
    args: &ToolsArgs,
    store: Option<Arc<dyn Store>>,
    from: Listings,
) -> anyhow::Result<ToolLayer> {
    let config = crate::cli::tools_config(args.config.as_deref(), &args.state)?
        .unwrap_or_default()
        .with_embeddings(embeddings(args, store.clone()).await?)
        .with_judge(crate::cli::guard_judge_from_env()?);
    // These commands make no Bright Data call; the configuration only prices the
    // built-in tools.
    let bd = BrightDataConfig::from_lookup(|k| std::env::var(k).ok())
        .map_err(anyhow::Error::msg)?
        .unwrap_or_else(|| BrightDataConfig::new("http://127.0.0.1:9", ""));
    let provider = Arc::new(BrightData::new(bd)?);
    let (layer, report) = ToolLayer::open(
        provider,
        Arc::new(NoCache),
        store,
        config,
        Pool::Standard,
        from,
    )
    .await?;
    for (server, e) in &report.server_errors {
        if report.stale.contains(server) {
            eprintln!("warning: server {server}: {e}; its stored tools are shown, stale");
        } else {
            eprintln!("warning: server {server}: {e}");
        }
    }
    Ok(layer)
}

/// These commands call no tool, so nothing is cached.
struct NoCache;

#[async_trait::async_trait]
impl ContentCache for NoCache {
    async fn get_or_load(
        &self,
        _: &trawl_core::ports::CacheKey,
        _: std::time::Duration,
        load: trawl_core::ports::LoadFuture<'_>,
    ) -> Result<(Vec<u8>, trawl_core::ports::Served), trawl_core::ports::ToolError> {
        Ok((load.await?, trawl_core::ports::Served::Loaded))
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}

fn state_text(s: &ToolState) -> String {
    match s {
        ToolState::Listed => "listed".into(),
        ToolState::Quarantined { approval } => format!(
            "quarantined (approval {})",
            approval.map_or("-".into(), |a| a.to_string())
        ),
        ToolState::Awaiting { approval } => format!(
            "awaiting (approval {})",
            approval.map_or("-".into(), |a| a.to_string())
        ),
        ToolState::Rejected => "rejected".into(),
        ToolState::Blocked { rules } => format!("blocked ({})", rules.join(", ")),
        ToolState::Held { approval, rules } => format!(
            "held for review ({}; approval {})",
            rules.join(", "),
            approval.map_or("-".into(), |a| a.to_string())
        ),
    }
}

fn print_list(catalog: &Catalog, all: bool, as_json: bool) {
    let entries: Vec<_> = catalog
        .entries()
        .iter()
        .filter(|e| all || e.state == ToolState::Listed)
        .collect();
    if as_json {
        let tools: Vec<Value> = entries
            .iter()
            .map(|e| {
                json!({
                    "tool": e.def,
                    "server": e.name.server(),
                    "state": e.state,
                    "hash": e.hash,
                    "cost_model": e.cost_model,
                    "findings": e.findings,
                })
            })
            .collect();
        outln!(
            "{}",
            json!({"tools": tools, "servers": catalog.servers, "refused": catalog.refused})
        );
        return;
    }
    let now = now_ms();
    for s in &catalog.servers {
        let age = |at: i64| {
            humantime::format_duration(std::time::Duration::from_secs(
                u64::try_from((now - at) / 1000).unwrap_or(0),
            ))
            .to_string()
        };
        match (&s.error, s.listed_ms) {
            (Some(e), Some(at)) => outln!(
                "server {} ({}): {} tools, stale: listed {} ago; not listed now: {e}",
                s.name,
                s.transport,
                s.tools,
                age(at)
            ),
            (Some(e), None) => outln!("server {} ({}): not listed: {e}", s.name, s.transport),
            (None, Some(at)) => outln!(
                "server {} ({}): {} tools, listed {} ago (--refresh to list it now)",
                s.name,
                s.transport,
                s.tools,
                age(at)
            ),
            (None, None) => outln!("server {} ({}): {} tools", s.name, s.transport, s.tools),
        }
    }
    for e in entries {
        let flags = if e.findings.is_empty() {
            String::new()
        } else {
            format!("  [{} findings]", e.findings.len())
        };
        outln!(
            "{:<44} {:<14} {}{flags}",
            e.name.as_str(),
            state_text(&e.state),
            first_line(&e.def.description)
        );
    }
    if all {
        for r in &catalog.refused {
            outln!("refused {}.{}: {}", r.server, r.tool, r.error);
        }
    }
}

/// Prints findings per tool and what judged them (`mode`, [`Guard::mode`]);
/// the exit code says whether one blocks a tool.
fn print_scan(catalog: &Catalog, server: Option<&str>, mode: &str, as_json: bool) -> u8 {
    let entries: Vec<_> = catalog
        .entries()
        .iter()
        .filter(|e| server.is_none_or(|s| e.name.server() == s))
        .collect();
    let refused: Vec<_> = catalog
        .refused
        .iter()
        .filter(|r| server.is_none_or(|s| r.server == s))
        .collect();
    let blocking = !refused.is_empty()
        || entries
            .iter()
            .any(|e| matches!(e.state, ToolState::Blocked { .. } | ToolState::Held { .. }));
    if as_json {
        let tools: Vec<Value> = entries
            .iter()
            .map(|e| json!({"tool": e.name.as_str(), "state": e.state, "findings": e.findings}))
            .collect();
        outln!(
            "{}",
            json!({"guard": mode, "tools": tools, "refused": refused, "blocking": blocking})
        );
    } else {
        outln!("guard: {mode}");
        for e in &entries {
            if e.findings.is_empty() {
                outln!("{}: clean", e.name);
                continue;
            }
            outln!("{}: {}", e.name, state_text(&e.state));
            for f in &e.findings {
                outln!(
                    "  {:?} {} at {} [{}..{}]: {} ({:?})",
                    f.severity,
                    f.rule,
                    f.field,
                    f.span.start,
                    f.span.end,
                    f.message,
                    f.excerpt
                );
            }
        }
        for r in &refused {
            outln!("{}: refused: {}", r.tool, r.error);
        }
    }
    if blocking { BLOCKING } else { OK }
}

async fn scan_file(
    path: &Path,
    allow_hosts: &[String],
    guard: &Guard,
    as_json: bool,
) -> anyhow::Result<u8> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let doc: Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let tools = doc
        .get("tools")
        .and_then(Value::as_array)
        .with_context(|| {
            format!(
                "{}: expected a tools/list result, {{\"tools\": [...]}}",
                path.display()
            )
        })?;
    let server = ServerName::parse("file").map_err(anyhow::Error::msg)?;
    let listing = Listing {
        server,
        transport: "file",
        builtin: false,
        tools: tools
            .iter()
            .map(|raw| Offered {
                raw: raw.clone(),
                cost_model: String::new(),
                batch: None,
            })
            .collect(),
        scan: ScanPolicy::default(),
        allow_hosts: allow_hosts.to_vec(),
        new_tools: NewTools::Auto,
        overlaps: trawl_tools::config::Overlaps::Hold,
        result_max_bytes: RESULT_MAX_BYTES,
        error: None,
        listed_ms: None,
    };
    let listings = [listing];
    let assessment = guard.assess(&listings).await;
    let (catalog, _) = assemble_with(&listings, None, &assessment);
    Ok(print_scan(&catalog, None, guard.mode(), as_json))
}
