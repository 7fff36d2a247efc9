//! What `tool_search` saves a model's context on a catalog of real tools.
//!
//! Connects a [`ToolLayer`] to the reference MCP servers installed from npm in
//! `tests/upstreams` (everything, filesystem, memory, sequential-thinking and
//! Playwright's, over stdio, with no network) next to the four built-in Bright
//! Data tools (pointed at a closed port: nothing is called). Then, for a set of
//! realistic task queries, compares the tokens of what a model is shown with
//! search (the `tool_search` definition and its top 5 results) against the tokens
//! of the whole catalog, and prints per query the loaded tokens, the catalog's
//! tokens and the reduction, then the minimum and median reduction.
//!
//! ```text
//! npm ci --prefix tests/upstreams
//! cargo run --release -p trawl-tools --example context_bench
//! ```
//!
//! Tokens are counted with tiktoken's `o200k_base` ([`trawl_tools::tokens`]); other
//! models' tokenizers (Claude's among them) differ, so the figures approximate what
//! they are shown. The reduction is a ratio, which depends less on the tokenizer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use trawl_brightdata::{BrightData, BrightDataConfig};
use trawl_core::ports::{CacheKey, ContentCache, LoadFuture, Served, ToolError};
use trawl_tools::catalog::tool_search_def;
use trawl_tools::config::ToolsConfig;
use trawl_tools::{Pool, ToolLayer};

/// How many results of `tool_search` a model loads.
const TOP: usize = 5;

/// Tasks an agent might be given, in its words.
const QUERIES: &[&str] = &[
    "read a file",
    "search the web from germany",
    "remember a fact about a person",
    "take a screenshot of a page",
    "fetch a page as markdown",
    "list the files in a directory",
    "click a button on a web page",
    "fill in a form",
    "think through a problem step by step",
    "add two numbers",
    "edit a line in a text file",
    "fetch many pages at once",
];

/// The loads go straight through: the bench calls no tool.
struct NoCache;

#[async_trait]
impl ContentCache for NoCache {
    async fn get_or_load(
        &self,
        _: &CacheKey,
        _: std::time::Duration,
        load: LoadFuture<'_>,
    ) -> Result<(Vec<u8>, Served), ToolError> {
        Ok((load.await?, Served::Loaded))
    }
}

fn upstreams() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/upstreams/node_modules")
}

/// The servers, as a tools configuration (YAML): `(name, script, args)`.
fn config_yaml(dir: &Path) -> String {
    let modules = upstreams();
    let dir = dir.display();
    let servers: [(&str, &str, Vec<String>); 5] = [
        (
            "everything",
            "@modelcontextprotocol/server-everything/dist/index.js",
            vec!["stdio".into()],
        ),
        (
            "filesystem",
            "@modelcontextprotocol/server-filesystem/dist/index.js",
            vec![format!("{dir}")],
        ),
        (
            "memory",
            "@modelcontextprotocol/server-memory/dist/index.js",
            vec![],
        ),
        (
            "thinking",
            "@modelcontextprotocol/server-sequential-thinking/dist/index.js",
            vec![],
        ),
        (
            "playwright",
            "@playwright/mcp/cli.js",
            vec!["--headless".into(), "--isolated".into()],
        ),
    ];
    let mut yaml = String::from("servers:\n");
    for (name, script, args) in servers {
        let script = modules.join(script);
        assert!(
            script.exists(),
            "{} is missing: run `npm ci --prefix tests/upstreams`",
            script.display()
        );
        let args: Vec<String> = std::iter::once(script.display().to_string())
            .chain(args)
            .map(|a| serde_json::to_string(&a).unwrap())
            .collect();
        yaml.push_str(&format!(
            "  {name}:\n    command: node\n    args: [{}]\n",
            args.join(", ")
        ));
        if name == "memory" {
            // Its knowledge graph goes to a file of its own, not into node_modules.
            yaml.push_str(&format!(
                "    env: {{MEMORY_FILE_PATH: \"{dir}/memory.jsonl\"}}\n"
            ));
        }
    }
    yaml
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let config = ToolsConfig::parse(&config_yaml(dir.path()), dir.path()).unwrap();
    let provider = BrightData::new(BrightDataConfig::new("http://127.0.0.1:9", "")).unwrap();
    let (layer, report) = ToolLayer::connect(
        Arc::new(provider),
        Arc::new(NoCache),
        None,
        config,
        Pool::Standard,
    )
    .await
    .unwrap();
    for (server, e) in &report.server_errors {
        eprintln!("warning: server {server} not listed: {e}");
    }
    let catalog = layer.catalog();

    println!("servers (tools offered / listed):");
    let mut per_server: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for e in catalog.entries() {
        let n = per_server.entry(e.name.server()).or_default();
        n.0 += 1;
        if e.state == trawl_tools::ToolState::Listed {
            n.1 += 1;
        }
    }
    for s in &catalog.servers {
        let (offered, listed) = per_server.get(s.name.as_str()).copied().unwrap_or_default();
        println!(
            "  {:<12} {:<8} {offered:>3} / {listed:>3}{}",
            s.name,
            s.transport,
            s.error
                .as_ref()
                .map_or(String::new(), |e| format!("  error: {e}"))
        );
    }
    for r in &catalog.refused {
        println!("  refused: {}.{}: {}", r.server, r.tool, r.error);
    }
    let listed = catalog.listed().count();
    println!(
        "catalog: {} tools, {listed} listed (a model can be shown these)",
        catalog.entries().len()
    );

    // The encoder's first use parses its vocabulary (tenths of a second).
    tokio::task::spawn_blocking(|| trawl_tools::tokens::count("warm up"))
        .await
        .unwrap();
    let mut sizes: Vec<(usize, &str)> = catalog
        .listed()
        .map(|e| (trawl_tools::tokens::def_tokens(&e.def), e.name.as_str()))
        .collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let largest: Vec<String> = sizes
        .iter()
        .take(3)
        .map(|(t, n)| format!("{n} {t}"))
        .collect();
    println!("largest definitions (tokens): {}", largest.join(", "));
    let search = tool_search_def();
    println!("\ntokens: tiktoken o200k_base (approximates other tokenizers, Claude's among them)");
    println!(
        "loaded = tool_search ({} tokens) + its top {TOP} results",
        trawl_tools::tokens::def_tokens(&search)
    );
    println!(
        "\n{:<40} {:>7} {:>8} {:>9}  top {TOP}",
        "query", "loaded", "catalog", "reduction"
    );
    let mut reductions = Vec::new();
    for q in QUERIES {
        let found = catalog.search(&trawl_tools::search::Query::words(*q), TOP);
        let (loaded, whole) = catalog
            .context_tokens(std::iter::once(&search).chain(found.iter().map(|f| &f.entry.def)));
        let reduction = 100.0 * (1.0 - loaded as f64 / whole as f64);
        reductions.push(reduction);
        let names: Vec<&str> = found.iter().map(|f| f.entry.name.as_str()).collect();
        println!(
            "{:<40} {loaded:>7} {whole:>8} {reduction:>8.1}%  {}",
            format!("{q:?}"),
            names.join(", ")
        );
    }
    reductions.sort_by(f64::total_cmp);
    println!(
        "\nreduction over {} queries: min {:.1}%  median {:.1}%  (target: at least 85%)",
        reductions.len(),
        reductions[0],
        median(&reductions)
    );
    layer.close().await;
}
