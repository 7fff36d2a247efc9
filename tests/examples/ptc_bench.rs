//! Context tokens of programmatic tool calling (`run_code`) against direct tool
//! calling, for one task of 20 tool calls: "compare the prices of 20 products".
//!
//! Both ways run the same embedded pipeline (Bright Data simulator, a research job
//! with `report: false`, one sub-agent, 25 tool calls at most) against a scripted
//! model server on the Anthropic Messages wire (`trawl_model::testing::ScriptedModel`):
//!
//! - **direct**: the sub-agent calls `fetch_page` for 20 product pages, one per
//!   turn, then `submit_findings` with the price it read on each page. Every page
//!   enters the conversation, so each later request carries all earlier pages.
//! - **programmatic**: the sub-agent makes one `run_code` call whose JavaScript
//!   fetches the 20 pages (`Promise.all` over `tools.fetch_page`), extracts each
//!   price with a regex and returns only `[{url, price}]`; then `submit_findings`.
//!
//! Measured from the request bodies the model server recorded, sub-agent requests
//! only (the planner's are the same both ways and left out): the tokens of each
//! whole body (system, messages, tools and the other fields) as compact JSON, with
//! tiktoken `o200k_base` (`trawl_tools::tokens::count`). Claude's tokenizer
//! differs and the API does not bill the JSON punctuation as such, so the counts
//! approximate what the model reads; the reduction, a ratio, depends less on it.
//! Per way: the requests, their total input tokens (what the model reads and is
//! billed over all turns) and the largest request (peak context). One JSON line per
//! way, then a summary line with `1 - programmatic / direct` for both.
//!
//! Both jobs must succeed with 20 findings citing 20 fetched pages and the same
//! prices, so the comparison is of equal work.
//!
//!     cargo run --release -p trawl-tests --example ptc_bench [-- --format raw]
//!
//! `--format raw` has the pages fetched as HTML instead of the sub-agent's default,
//! markdown.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use trawl_core::ports::SliceStore;

use serde_json::{Value, json};
use trawl::embedded::{Embedded, Options, Upstream};
use trawl_core::model::{ItemKind, JobId, JobStatus};
use trawl_model::testing::{Recorded, Reply, ScriptedModel, Wire};
use trawl_model::{AnthropicClient, ClientConfig, PriceList, Usage};
use trawl_sim::SimConfig;
use trawl_tools::tokens;
use trawl_worker::WorkerConfig;
use trawl_worker::models::Models;

const MODEL: &str = "claude-sonnet-4-5";
const USAGE: Usage = Usage {
    input_tokens: 1_000,
    output_tokens: 200,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
};
const QUESTION: &str = "Compare the prices of these 20 products at shop.example.";
const SUB_QUESTION: &str = "Prices of 20 products at shop.example";

/// The 20 products, as `https://shop.example/p/<slug>`.
const SLUGS: [&str; 20] = [
    "nordwind-compact-kettle",
    "acme-classic-backpack",
    "kestrel-cordless-desk-lamp",
    "larkspur-foldable-espresso-grinder",
    "orbit-insulated-headphones",
    "pioneer-modular-blender",
    "quill-portable-water-bottle",
    "redwood-quiet-keyboard",
    "summit-rugged-running-shoes",
    "tideline-slim-toaster",
    "umbra-smart-camera-bag",
    "vantage-wireless-air-purifier",
    "willow-compact-chef-knife",
    "yarrow-classic-office-chair",
    "zephyr-cordless-rice-cooker",
    "harbor-foldable-bike-light",
    "nordwind-insulated-water-bottle",
    "acme-smart-kettle",
    "kestrel-slim-keyboard",
    "larkspur-quiet-air-purifier",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    Direct,
    Programmatic,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Direct => "direct",
            Way::Programmatic => "programmatic",
        }
    }
}

fn urls() -> Vec<String> {
    SLUGS
        .iter()
        .map(|s| format!("https://shop.example/p/{s}"))
        .collect()
}

// ---------------------------------------------------------------------------
// The scripted model

fn is_agent(body: &Value) -> bool {
    body["system"]
        .as_str()
        .is_some_and(|s| s.contains("research sub-agent"))
}

fn is_planner(body: &Value) -> bool {
    body["system"]
        .as_str()
        .is_some_and(|s| s.contains("plan web research"))
}

fn call(turn: usize, name: &str, input: Value) -> Reply {
    Reply::anthropic_tool_use(&format!("tu_{turn}_{name}"), name, input, USAGE)
}

/// The text of a `tool_result` block.
fn result_text(block: &Value) -> String {
    match &block["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// `(price, currency)` as written on a page, markdown (`**Price:** 12.99 USD`) or
/// HTML (its JSON-LD offer); `None` when the page shows no price.
fn price_of(page: &str) -> Option<String> {
    let number = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '-')
            .collect()
    };
    if let Some(at) = page.find("**Price:** ") {
        let rest = &page[at + "**Price:** ".len()..];
        let p = number(rest);
        let cur: String = rest[p.len()..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_alphabetic)
            .collect();
        return Some(format!("{p} {cur}"));
    }
    let at = page.find("\"price\":")?;
    let p = number(&page[at + "\"price\":".len()..]);
    let cur_at = page.find("\"priceCurrency\":\"")? + "\"priceCurrency\":\"".len();
    let cur: String = page[cur_at..]
        .chars()
        .take_while(char::is_ascii_alphabetic)
        .collect();
    Some(format!("{p} {cur}"))
}

/// The same extraction in the sandbox's JavaScript: one script, 20 fetches, only
/// `[{url, price}]` returned.
fn script(urls: &[String], raw: bool) -> String {
    let list = serde_json::to_string(urls).unwrap();
    let args = if raw {
        "{url, format: \"raw\"}"
    } else {
        "{url}"
    };
    format!(
        r#"const urls = {list};
const pages = await Promise.all(urls.map(url => tools.fetch_page({args})));
return pages.map((p, i) => {{
  const t = typeof p === "string" ? p : JSON.stringify(p);
  const m = t.match(/\*\*Price:\*\*\s*(-?[\d.]+)\s*([A-Za-z]+)/) || t.match(/"price":(-?[\d.]+),"priceCurrency":"([A-Za-z]+)"/);
  return {{url: urls[i], price: m ? m[1] + " " + m[2] : null}};
}});"#
    )
}

fn finding(url: &str, price: Option<&str>) -> Value {
    let claim = match price {
        Some(p) => format!("{url} sells the product for {p}."),
        None => format!("{url} shows no price for the product."),
    };
    json!({"claim": claim, "sources": [url]})
}

/// The model's answer to one request.
fn answer(way: Way, raw: bool, body: &Value) -> Reply {
    if is_planner(body) {
        return call(0, "submit_plan", json!({"sub_questions": [SUB_QUESTION]}));
    }
    assert!(is_agent(body), "only the planner and one sub-agent: {body}");
    let msgs = body["messages"].as_array().unwrap();
    let turn = msgs.iter().filter(|m| m["role"] == "assistant").count();
    let urls = urls();
    match way {
        Way::Direct if turn < urls.len() => {
            let mut input = json!({"url": urls[turn]});
            if raw {
                input["format"] = json!("raw");
            }
            call(turn, "fetch_page", input)
        }
        Way::Direct => {
            // Read every page in the conversation: tool_use id -> url, result -> price.
            let mut asked: BTreeMap<String, String> = BTreeMap::new();
            let mut prices: BTreeMap<String, Option<String>> = BTreeMap::new();
            for m in msgs {
                for b in m["content"].as_array().into_iter().flatten() {
                    if b["type"] == "tool_use" && b["name"] == "fetch_page" {
                        asked.insert(
                            b["id"].as_str().unwrap().to_owned(),
                            b["input"]["url"].as_str().unwrap().to_owned(),
                        );
                    }
                    if b["type"] == "tool_result" {
                        assert!(b["is_error"] != true, "{b}");
                        let url = asked[b["tool_use_id"].as_str().unwrap()].clone();
                        prices.insert(url, price_of(&result_text(b)));
                    }
                }
            }
            assert_eq!(prices.len(), urls.len(), "every page was read");
            let findings: Vec<Value> = urls
                .iter()
                .map(|u| finding(u, prices[u].as_deref()))
                .collect();
            call(turn, "submit_findings", json!({"findings": findings}))
        }
        Way::Programmatic if turn == 0 => {
            call(turn, "run_code", json!({"code": script(&urls, raw)}))
        }
        Way::Programmatic => {
            let last = msgs.last().unwrap()["content"].as_array().unwrap();
            let block = last.iter().find(|b| b["type"] == "tool_result").unwrap();
            assert!(block["is_error"] != true, "{block}");
            let text = result_text(block);
            let json_part = text.split("\nconsole:\n").next().unwrap();
            let value: Value = serde_json::from_str(json_part).unwrap();
            let findings: Vec<Value> = value["value"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| finding(r["url"].as_str().unwrap(), r["price"].as_str()))
                .collect();
            call(turn, "submit_findings", json!({"findings": findings}))
        }
    }
}

// ---------------------------------------------------------------------------
// One job, measured

/// Tokens of one recorded request body, whole and by part.
#[derive(Debug, Default, Clone, Copy)]
struct Tokens {
    total: usize,
    system: usize,
    tools: usize,
    messages: usize,
    /// Of the messages: `tool_use` blocks, `tool_result` blocks, everything else.
    tool_use: usize,
    tool_result: usize,
}

fn tokens_of(body: &Value) -> Tokens {
    let part = |k: &str| body.get(k).map_or(0, |v| tokens::count(&v.to_string()));
    let blocks = |kind: &str| -> usize {
        body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .filter(|b| b["type"] == kind)
            .map(|b| tokens::count(&b.to_string()))
            .sum()
    };
    Tokens {
        tool_use: blocks("tool_use"),
        tool_result: blocks("tool_result"),
        total: tokens::count(&body.to_string()),
        system: part("system"),
        tools: part("tools"),
        messages: part("messages"),
    }
}

struct Outcome {
    per_request: Vec<Tokens>,
    fetched: usize,
    findings: BTreeSet<String>,
    claims: Vec<String>,
    /// Bytes of the tool results in the last request, and how many there are.
    result_bytes: (usize, usize),
    wall: Duration,
}

async fn run_way(way: Way, raw: bool) -> Outcome {
    let server = ScriptedModel::start(move |_wire, body| answer(way, raw, body))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = ClientConfig::anthropic()
        .with_base_url(server.url())
        .with_api_key("bench-key".to_owned().into())
        .with_retry_base_delay(Duration::from_millis(1))
        .with_retry_max_delay(Duration::from_millis(20));
    let models = Models::new(PriceList::claude())
        .with_anthropic(Arc::new(AnthropicClient::new(cfg).unwrap()))
        .with_default_model(Some(MODEL.into()));
    let opts = Options::new(
        dir.path().join("state"),
        Upstream::Simulator(SimConfig::default()),
    )
    .with_call_timeout(Duration::from_secs(10))
    .with_worker(WorkerConfig::default().with_concurrency(8))
    .with_models(Some(Arc::new(models)));
    let sys = Embedded::start(opts).await.unwrap();

    let yaml = format!(
        "name: ptc-{}\nresearch:\n  question: {QUESTION:?}\n  report: false\n  max_subagents: 1\n  max_tool_calls_per_agent: 25\n",
        way.name()
    );
    let started = Instant::now();
    let summary = trawl_tests::run_embedded(&sys, &yaml, &dir.path().join("out")).await;
    let wall = started.elapsed();
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");

    let job = JobId::parse(&summary.job_id).unwrap();
    let items = sys.store().items(&job).await.unwrap();
    let found: Vec<_> = items
        .iter()
        .filter(|i| i.kind == ItemKind::Finding)
        .collect();
    let rejections = sys.store().rejections(&job).await.unwrap();
    assert!(rejections.is_empty(), "{rejections:#?}");
    let findings: BTreeSet<String> = found
        .iter()
        .flat_map(|f| f.data["sources"].as_array().unwrap().iter())
        .map(|s| s.as_str().unwrap().to_owned())
        .collect();
    let mut claims: Vec<String> = found
        .iter()
        .map(|f| f.data["claim"].as_str().unwrap().to_owned())
        .collect();
    claims.sort();
    let fetched = sys.simulator().unwrap().stats().requests as usize;
    sys.shutdown().await;

    let reqs: Vec<Recorded> = server.requests();
    assert!(reqs.iter().all(|r| r.wire == Wire::Anthropic));
    let agent: Vec<&Value> = reqs
        .iter()
        .filter(|r| is_agent(&r.body))
        .map(|r| &r.body)
        .collect();
    let per_request = agent.iter().map(|b| tokens_of(b)).collect();
    let results: Vec<usize> = agent
        .last()
        .and_then(|b| b["messages"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| result_text(b).len())
        .collect();
    Outcome {
        per_request,
        fetched,
        findings,
        claims,
        result_bytes: (results.iter().sum(), results.len()),
        wall,
    }
}

fn report(way: Way, format: &str, o: &Outcome) -> (usize, usize) {
    let total: usize = o.per_request.iter().map(|t| t.total).sum();
    let peak = o.per_request.iter().max_by_key(|t| t.total).unwrap();
    let first = o.per_request[0];
    let sum = |f: fn(&Tokens) -> usize| o.per_request.iter().map(f).sum::<usize>();
    println!(
        "{}",
        json!({
            "way": way.name(),
            "format": format,
            "requests": o.per_request.len(),
            "input_tokens_total": total,
            "peak_request_tokens": peak.total,
            "first_request_tokens": first.total,
            "total_by_part": {
                "system": sum(|t| t.system),
                "tools": sum(|t| t.tools),
                "messages": sum(|t| t.messages),
                "other": total - sum(|t| t.system) - sum(|t| t.tools) - sum(|t| t.messages),
            },
            "peak_by_part": {
                "system": peak.system,
                "tools": peak.tools,
                "messages": peak.messages,
                "of_which_tool_use": peak.tool_use,
                "of_which_tool_result": peak.tool_result,
            },
            "per_request": o.per_request.iter().map(|t| t.total).collect::<Vec<_>>(),
            "tool_results_in_peak": {"count": o.result_bytes.1, "bytes": o.result_bytes.0},
            "pages_fetched": o.fetched,
            "findings_citing": o.findings.len(),
            "wall_ms": o.wall.as_millis(),
        })
    );
    (total, peak.total)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let format = args
        .iter()
        .position(|a| a == "--format")
        .and_then(|i| args.get(i + 1))
        .map_or("markdown", String::as_str)
        .to_owned();
    assert!(
        format == "markdown" || format == "raw",
        "--format markdown|raw"
    );
    let raw = format == "raw";

    let direct = run_way(Way::Direct, raw).await;
    let programmatic = run_way(Way::Programmatic, raw).await;

    // Equal work: 20 pages fetched and cited both ways, the same prices read.
    let want: BTreeSet<String> = urls().into_iter().collect();
    for o in [&direct, &programmatic] {
        assert_eq!(o.fetched, 20, "pages fetched from the simulator");
        assert_eq!(o.findings, want, "the findings cite the 20 fetched pages");
        assert_eq!(o.claims.len(), 20);
    }
    assert_eq!(direct.claims, programmatic.claims, "the same prices");

    let (d_total, d_peak) = report(Way::Direct, &format, &direct);
    let (p_total, p_peak) = report(Way::Programmatic, &format, &programmatic);
    let reduction = |p: usize, d: usize| 1.0 - p as f64 / d as f64;
    println!(
        "{}",
        json!({
            "summary": "programmatic vs direct",
            "format": format,
            "total_reduction": (reduction(p_total, d_total) * 1000.0).round() / 1000.0,
            "peak_reduction": (reduction(p_peak, d_peak) * 1000.0).round() / 1000.0,
            "target_total_reduction": 0.8,
            "prices_found": direct.claims.iter().filter(|c| c.contains("sells")).count(),
        })
    );
}
