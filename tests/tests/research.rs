//! Research jobs end to end on the embedded pipeline: a planner, sub-agents with
//! tools and a report, driven by a scripted model server that speaks the Anthropic
//! Messages API (<https://docs.claude.com/en/api/messages>) or OpenAI chat
//! completions (<https://platform.openai.com/docs/api-reference/chat>) on loopback
//! (`trawl_model::testing::ScriptedModel`), against the Bright Data simulator and,
//! for tool search, a 200-tool MCP upstream (`trawl-test-upstream`).
//!
//! Each script answers from what the request holds (system prompt, the turn, the
//! last tool results), as a model would, so sub-agents running in parallel get
//! their own answers; the assertions read the recorded request bodies.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use trawl::embedded::{Embedded, Options, Upstream};
use trawl::output::Summary;
use trawl_core::model::{ItemKind, JobStatus};
use trawl_core::ports::{JobStore, SliceStore, ToolStore};
use trawl_core::spec::JobSpec;
use trawl_model::testing::{Recorded, Reply, ScriptedModel, Wire};
use trawl_model::{ClientConfig, OpenAiClient, PriceList, Usage};
use trawl_sim::SimConfig;
use trawl_tools::config::ToolsConfig;
use trawl_worker::WorkerConfig;
use trawl_worker::models::Models;

const UPSTREAM: &str = env!("CARGO_BIN_EXE_trawl-test-upstream");
const MODEL: &str = trawl_tests::SCRIPTED_MODEL;

/// What every scripted turn reports as used.
const USAGE: Usage = Usage {
    input_tokens: 1_000,
    output_tokens: 200,
    cache_creation_input_tokens: 100,
    cache_read_input_tokens: 500,
};

// ---------------------------------------------------------------------------
// Reading a request as the model would

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Planner,
    Agent,
    Report,
}

/// The parts of one request a script answers from.
#[derive(Debug)]
struct View {
    wire: Wire,
    step: Step,
    /// The first user text (the question).
    question: String,
    /// Assistant messages so far.
    turn: usize,
    /// The results of the last turn's tool calls: (text, is_error).
    results: Vec<(String, bool)>,
    /// Names of the tools sent.
    tools: Vec<String>,
}

fn view(wire: Wire, body: &Value) -> View {
    let msgs = body["messages"].as_array().cloned().unwrap_or_default();
    let (system, question, turn, results) = match wire {
        Wire::Anthropic => {
            let system = body["system"].as_str().unwrap_or_default().to_owned();
            let question = msgs[0]["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let turn = msgs.iter().filter(|m| m["role"] == "assistant").count();
            let results = msgs
                .last()
                .and_then(|m| m["content"].as_array())
                .map(|blocks| {
                    blocks
                        .iter()
                        .filter(|b| b["type"] == "tool_result")
                        .map(|b| {
                            let text = b["content"]
                                .as_array()
                                .map(|parts| {
                                    parts
                                        .iter()
                                        .map(|p| {
                                            p["text"]
                                                .as_str()
                                                .or(p["tool_name"].as_str())
                                                .unwrap_or_default()
                                                .to_owned()
                                        })
                                        .collect::<Vec<_>>()
                                        .join("\n")
                                })
                                .unwrap_or_default();
                            (text, b["is_error"] == true)
                        })
                        .collect()
                })
                .unwrap_or_default();
            (system, question, turn, results)
        }
        Wire::OpenAi => {
            let system = msgs[0]["content"].as_str().unwrap_or_default().to_owned();
            let question = msgs[1]["content"].as_str().unwrap_or_default().to_owned();
            let turn = msgs.iter().filter(|m| m["role"] == "assistant").count();
            let results = msgs
                .iter()
                .rev()
                .take_while(|m| m["role"] == "tool")
                .map(|m| {
                    let text = m["content"].as_str().unwrap_or_default().to_owned();
                    let err = text.starts_with("error");
                    (text, err)
                })
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            (system, question, turn, results)
        }
    };
    let step = if system.contains("plan web research") {
        Step::Planner
    } else if system.contains("research sub-agent") {
        Step::Agent
    } else {
        Step::Report
    };
    View {
        wire,
        step,
        question,
        turn,
        results,
        tools: tool_names(wire, body),
    }
}

fn tool_names(wire: Wire, body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| match wire {
            Wire::Anthropic => t["name"].as_str().unwrap_or_default().to_owned(),
            Wire::OpenAi => t["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        })
        .collect()
}

/// A reply calling one tool.
fn call(v: &View, name: &str, input: Value) -> Reply {
    let id = format!("tu_{}_{name}", v.turn);
    match v.wire {
        Wire::Anthropic => Reply::anthropic_tool_use(&id, name, input, USAGE),
        Wire::OpenAi => Reply::openai_tool_calls(&[(&id, name, &input.to_string())], USAGE),
    }
}

fn text(v: &View, t: &str) -> Reply {
    match v.wire {
        Wire::Anthropic => Reply::anthropic_text(t, USAGE),
        Wire::OpenAi => Reply::openai_text(t, USAGE),
    }
}

/// The `n`th organic link of a SERP tool result.
fn link(serp: &str, n: usize) -> String {
    let v: Value = serde_json::from_str(serp).unwrap();
    v["organic"][n]["link"].as_str().unwrap().to_owned()
}

// ---------------------------------------------------------------------------
// The system under test

async fn system(state: &Path, models: Models, tools: Option<ToolsConfig>) -> Embedded {
    let opts = Options::new(state, Upstream::Simulator(SimConfig::default()))
        .with_call_timeout(Duration::from_secs(5))
        .with_worker(
            WorkerConfig::default()
                .with_concurrency(8)
                .with_retry_delays(Duration::from_millis(1), Duration::from_millis(20)),
        )
        .with_tools(tools)
        .with_models(Some(Arc::new(models)));
    Embedded::start(opts).await.unwrap()
}

fn openai(server: &ScriptedModel) -> Models {
    let cfg = ClientConfig::openai()
        .with_base_url(server.openai_url())
        .with_retry_base_delay(Duration::from_millis(1))
        .with_retry_max_delay(Duration::from_millis(20));
    Models::new(PriceList::claude())
        .with_openai(Arc::new(OpenAiClient::new(cfg).unwrap()))
        .with_default_model(Some("qwen2.5-72b".into()))
}

/// A sub-agent's `submit_findings` of one claim citing `urls`.
fn submit(v: &View, claim: &str, urls: &[&str]) -> Reply {
    call(
        v,
        "submit_findings",
        json!({"findings": [{"claim": claim, "sources": urls}]}),
    )
}

/// Runs `yaml` to its end on a fresh embedded system in `dir`.
async fn research_run(
    dir: &Path,
    models: Models,
    tools: Option<ToolsConfig>,
    yaml: &str,
) -> (Embedded, Summary) {
    let sys = system(&dir.join("state"), models, tools).await;
    let summary = trawl_tests::run_embedded(&sys, yaml, &dir.join("out")).await;
    (sys, summary)
}

fn agent_requests(reqs: &[Recorded]) -> Vec<&Recorded> {
    reqs.iter()
        .filter(|r| view(r.wire, &r.body).step == Step::Agent)
        .collect()
}

/// URLs the sub-agents asked `fetch_page` for, from the recorded requests.
fn fetched_urls(reqs: &[Recorded]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for r in reqs {
        for m in r.body["messages"].as_array().into_iter().flatten() {
            for b in m["content"].as_array().into_iter().flatten() {
                if b["type"] == "tool_use" && b["name"] == "fetch_page" {
                    out.insert(b["input"]["url"].as_str().unwrap().to_owned());
                }
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Tests

/// The model of the X1 Carbon question: the planner's first plan lists a
/// sub-question twice, its second has two; each sub-agent searches, fetches a
/// result of its own and submits (the return-policy one also cites a page it never
/// fetched); the report cites [1] and [2].
fn x1_model(wire: Wire, body: &Value) -> Reply {
    let v = view(wire, body);
    match v.step {
        Step::Planner if v.turn == 0 => call(
            &v,
            "submit_plan",
            json!({"sub_questions": ["X1 Carbon prices in Germany", "x1 carbon prices in germany"]}),
        ),
        Step::Planner => {
            assert!(v.results[0].1, "the invalid plan came back as an error");
            assert!(v.results[0].0.contains("twice"), "{}", v.results[0].0);
            call(
                &v,
                "submit_plan",
                json!({"sub_questions": ["X1 Carbon prices in Germany", "X1 Carbon return policies"]}),
            )
        }
        Step::Agent => match v.turn {
            0 => call(&v, "web_search", json!({"query": "thinkpad x1 carbon"})),
            // Each sub-agent reads another result.
            1 => {
                let n = usize::from(v.question.contains("return policies"));
                call(&v, "fetch_page", json!({"url": link(&v.results[0].0, n)}))
            }
            _ => {
                let fetched = fetched_urls(&[Recorded {
                    wire,
                    path: String::new(),
                    headers: Vec::new(),
                    body: body.clone(),
                }]);
                let url = fetched.first().unwrap().clone();
                let mut findings = vec![
                    json!({"claim": format!("{}: found on {url}", v.question), "sources": [url]}),
                ];
                if v.question.contains("return policies") {
                    findings.push(json!({"claim": "Returns within 14 days", "sources": ["https://shop.example/p/never-fetched"]}));
                }
                call(&v, "submit_findings", json!({"findings": findings}))
            }
        },
        Step::Report => text(
            &v,
            "# X1 Carbon in Germany\n\nPrices were found [1] and return terms too [2].",
        ),
    }
}

/// The planner's first plan lists a sub-question twice (sent back to fix), its
/// second has two; each sub-agent searches, fetches the first result and submits
/// findings (the second also cites a page it never fetched); the report cites the
/// numbered sources.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_research_job_plans_researches_and_reports_with_citations_of_fetched_pages() {
    let server = ScriptedModel::start(x1_model).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sys = system(
        &dir.path().join("state"),
        trawl_tests::scripted_anthropic(&server),
        None,
    )
    .await;
    let out = dir.path().join("out");
    let summary = trawl_tests::run_embedded(
        &sys,
        "name: x1\nresearch:\n  question: Which German shops sell the ThinkPad X1 Carbon, and how do their return policies differ?\n  geo: de\n  max_subagents: 3\n",
        &out,
    )
    .await;
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    // research + 2 agents + report
    assert_eq!(summary.slices.total, 4);

    let reqs = server.requests();
    let steps: Vec<Step> = reqs.iter().map(|r| view(r.wire, &r.body).step).collect();
    let count = |s: Step| steps.iter().filter(|x| **x == s).count();
    assert_eq!(count(Step::Planner), 2, "one invalid plan, one valid");
    assert_eq!(count(Step::Agent), 6, "two sub-agents, three turns each");
    assert_eq!(count(Step::Report), 1);
    for r in &reqs {
        assert_eq!(r.header("x-api-key"), Some("test-key"));
        assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    }

    let job = trawl_core::model::JobId::parse(&summary.job_id).unwrap();
    let items = sys.store().items(&job).await.unwrap();
    let findings: Vec<_> = items
        .iter()
        .filter(|i| i.kind == ItemKind::Finding)
        .collect();
    let reports: Vec<_> = items
        .iter()
        .filter(|i| i.kind == ItemKind::Report)
        .collect();
    assert_eq!(findings.len(), 2, "{items:#?}");
    assert_eq!(reports.len(), 1);
    let fetched = fetched_urls(&reqs);
    assert!(!fetched.is_empty());
    // Every citation, of every finding and of the report, is a fetched page.
    for f in &findings {
        for s in f.data["sources"].as_array().unwrap() {
            assert!(fetched.contains(s.as_str().unwrap()), "{s} not fetched");
        }
    }
    let report = &reports[0].data;
    let sources: Vec<&str> = report["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(!sources.is_empty());
    assert!(sources.iter().all(|s| fetched.contains(*s)), "{sources:?}");
    let md = report["markdown"].as_str().unwrap();
    assert!(md.contains("[1]") && md.contains("## Sources"), "{md}");
    for s in &sources {
        assert!(md.contains(s), "the source list names {s}");
    }
    assert!(!md.contains("never-fetched"));
    // The finding citing a page its sub-agent never fetched is a rejection.
    let rejections = sys.store().rejections(&job).await.unwrap();
    assert_eq!(rejections.len(), 1, "{rejections:#?}");
    assert!(
        rejections[0].errors[0]
            .message
            .contains("was not fetched by this sub-agent")
    );
    // The report is written next to the items.
    let written = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert_eq!(written, md);

    // Every model turn is a trace step and a cost at the scripted usage.
    let trace = sys.store().trace_page(&job, None, 1_000).await.unwrap();
    let turns: Vec<_> = trace
        .iter()
        .filter(|t| t.tool == format!("model:{MODEL}"))
        .collect();
    assert_eq!(turns.len(), reqs.len());
    let per_turn = PriceList::claude().cost(MODEL, &USAGE);
    assert!(per_turn.0 > 0);
    assert!(turns.iter().all(|t| t.cost == per_turn && t.status == "ok"));
    // 1,000 input at $3, 200 output at $15, 100 cache writes at $3.75 and 500
    // cache reads at $0.30 per million tokens: 6,525 micro-dollars a turn.
    assert_eq!(per_turn.0, 6_525);
    let tool_cost: i64 = trace
        .iter()
        .filter(|t| !t.tool.starts_with("model:"))
        .map(|t| t.cost.0)
        .sum();
    assert_eq!(
        summary.cost_micros,
        per_turn.0 * reqs.len() as i64 + tool_cost
    );
    sys.shutdown().await;
}

/// A planner that never gives a valid plan fails the job, with the reason, after
/// its bounded tries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_planner_output_fails_the_job_with_the_reason() {
    let server = ScriptedModel::start(|wire, body| {
        let v = view(wire, body);
        call(&v, "submit_plan", json!({"sub_questions": []}))
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (sys, summary) = research_run(
        dir.path(),
        trawl_tests::scripted_anthropic(&server),
        None,
        "name: bad\nresearch: {question: \"What is the best laptop?\"}\n",
    )
    .await;
    assert_eq!(summary.status, JobStatus::Failed);
    let reason = summary.reason.clone().unwrap_or_default();
    assert!(
        reason.contains("bad_plan") && reason.contains("3 tries"),
        "{reason}"
    );
    assert_eq!(server.requests().len(), 3, "PLAN_TRIES turns, no more");
    sys.shutdown().await;
}

/// A model that calls tools forever: the per-agent cap stops the calls, the
/// sub-agent is then asked to submit (only `submit_findings` offered), and when it
/// still will not, the slice fails. The first request meets a 529 overload,
/// which the client retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_call_cap_ends_a_sub_agent_that_never_stops_and_an_overload_is_retried() {
    let overloaded = Arc::new(AtomicBool::new(false));
    let once = overloaded.clone();
    let server = ScriptedModel::start(move |wire, body| {
        if !once.swap(true, Ordering::SeqCst) {
            return Reply::overloaded();
        }
        let v = view(wire, body);
        match v.step {
            Step::Planner => call(&v, "submit_plan", json!({"sub_questions": ["laptops?"]})),
            _ => call(
                &v,
                "web_search",
                json!({"query": format!("laptops {}", v.turn)}),
            ),
        }
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (sys, summary) = research_run(dir.path(), trawl_tests::scripted_anthropic(&server), None, "name: loop\nresearch: {question: \"laptops?\", max_tool_calls_per_agent: 3, report: false}\n").await;
    assert_eq!(summary.status, JobStatus::Partial, "{summary:?}");
    assert_eq!(summary.failed_slices.len(), 1);
    assert_eq!(summary.failed_slices[0].code, "agent_cap");
    let reqs = server.requests();
    assert_eq!(
        reqs[0].body, reqs[1].body,
        "the overloaded request was sent again"
    );
    // Only three searches reached the simulator: the cap held.
    assert_eq!(sys.simulator().unwrap().stats().requests, 3);
    let agents = agent_requests(&reqs);
    let forced: Vec<_> = agents
        .iter()
        .filter(|r| r.body["tool_choice"] == json!({"type": "tool", "name": "submit_findings"}))
        .collect();
    assert!(!forced.is_empty());
    for r in &forced {
        assert_eq!(tool_names(r.wire, &r.body), ["submit_findings"]);
    }
    sys.shutdown().await;
}

/// A tool error goes back to the model as an error result, and the model fixes
/// its call. OpenAI-compatible wire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_error_is_fed_back_and_fixed_on_the_openai_wire() {
    let server = ScriptedModel::start(|wire, body| {
        let v = view(wire, body);
        match (v.step, v.turn) {
            (Step::Planner, _) => call(
                &v,
                "submit_plan",
                json!({"sub_questions": ["laptop prices"]}),
            ),
            (Step::Agent, 0) => call(&v, "fetch_page", json!({"url": "not a url at all"})),
            (Step::Agent, 1) => {
                assert!(v.results[0].1, "{:?}", v.results);
                call(
                    &v,
                    "fetch_page",
                    json!({"url": "https://shop.example/p/thinkpad-x1"}),
                )
            }
            (Step::Agent, _) => submit(
                &v,
                "the page lists a price",
                &["https://shop.example/p/thinkpad-x1"],
            ),
            (Step::Report, _) => text(&v, "Prices were found [1]."),
        }
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (sys, summary) = research_run(
        dir.path(),
        openai(&server),
        None,
        "name: fix\nresearch: {question: \"laptop prices\"}\n",
    )
    .await;
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    assert_eq!(summary.items.valid, 2, "one finding and the report");
    let reqs = server.requests();
    assert!(reqs.iter().all(|r| r.wire == Wire::OpenAi));
    let fixed = agent_requests(&reqs)
        .into_iter()
        .find(|r| view(r.wire, &r.body).turn == 1)
        .unwrap();
    let tool_msg = fixed.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    let content = tool_msg["content"].as_str().unwrap();
    assert!(content.contains("bad_arguments"), "{content}");
    // A self-hosted model is not in the price list: its turns cost nothing.
    let job = trawl_core::model::JobId::parse(&summary.job_id).unwrap();
    let trace = sys.store().trace_page(&job, None, 1_000).await.unwrap();
    assert!(
        trace
            .iter()
            .filter(|t| t.tool.starts_with("model:"))
            .all(|t| t.cost.0 == 0)
    );
    sys.shutdown().await;
}

/// 200 upstream tools: the sub-agent is sent `tool_search` and the core tools,
/// then what it found, never the catalog. Anthropic gets `tool_reference`
/// blocks with the found definitions deferred; OpenAI gets the definitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_search_keeps_a_200_tool_catalog_out_of_the_requests() {
    for wire in [Wire::Anthropic, Wire::OpenAi] {
        let dir = tempfile::tempdir().unwrap();
        let tools: Vec<Value> = (0..200)
            .map(|i| {
                let topic = if i == 137 {
                    "currency exchange rate conversion".to_owned()
                } else if i == 199 {
                    "currency exchange rate conversion in a browser".to_owned()
                } else {
                    format!("inventory record number {i}")
                };
                // A browser tool: isolated by default, so never offered here.
                let name = if i == 199 {
                    "browser_rates".to_owned()
                } else {
                    format!("tool_{i}")
                };
                json!({
                    "name": name,
                    "description": format!("Looks up {topic}."),
                    "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}
                })
            })
            .collect();
        let file = dir.path().join("tools.json");
        std::fs::write(&file, json!({"tools": tools}).to_string()).unwrap();
        let config = ToolsConfig::parse(
            &format!(
                "servers:\n  catalog:\n    command: {UPSTREAM}\n    args: [--tools, {}, --page-size, \"50\"]\n",
                file.display()
            ),
            dir.path(),
        )
        .unwrap();
        let server = ScriptedModel::start(|wire, body| {
            let v = view(wire, body);
            match (v.step, v.turn) {
                (Step::Planner, _) => {
                    call(&v, "submit_plan", json!({"sub_questions": ["EUR to USD"]}))
                }
                (Step::Agent, 0) => call(
                    &v,
                    "tool_search",
                    json!({"query": "currency exchange rate", "limit": 2}),
                ),
                (Step::Agent, 1) => {
                    assert!(
                        v.tools.contains(&"catalog__tool_137".to_owned()),
                        "{:?}",
                        v.tools
                    );
                    call(&v, "catalog__tool_137", json!({"q": "EUR USD"}))
                }
                (Step::Agent, 2) => {
                    assert!(v.results[0].0.contains("EUR USD"), "{:?}", v.results);
                    call(
                        &v,
                        "fetch_page",
                        json!({"url": "https://shop.example/p/rates"}),
                    )
                }
                (Step::Agent, _) => submit(&v, "a rate", &["https://shop.example/p/rates"]),
                (Step::Report, _) => text(&v, "A rate [1]."),
            }
        })
        .await
        .unwrap();
        let models = match wire {
            Wire::Anthropic => trawl_tests::scripted_anthropic(&server),
            Wire::OpenAi => openai(&server),
        };
        let sys = system(&dir.path().join("state"), models, Some(config)).await;
        assert!(sys.tools().catalog().listed().count() >= 200);
        let summary = trawl_tests::run_embedded(
            &sys,
            "name: search\nresearch: {question: \"EUR to USD?\"}\n",
            &dir.path().join("out"),
        )
        .await;
        assert_eq!(
            summary.status,
            JobStatus::Succeeded,
            "{wire:?}: {summary:?}"
        );
        let reqs = server.requests();
        let agents = agent_requests(&reqs);
        assert_eq!(agents.len(), 4);
        let first = tool_names(wire, &agents[0].body);
        assert_eq!(
            first,
            [
                "tool_search",
                "fetch_page",
                "web_search",
                "run_code",
                "submit_findings"
            ],
            "{wire:?}"
        );
        for r in &agents {
            let names = tool_names(wire, &r.body);
            assert!(names.len() <= first.len() + 2, "{wire:?}: {names:?}");
            let catalog: Vec<_> = names
                .iter()
                .filter(|n| n.starts_with("catalog__"))
                .collect();
            assert!(catalog.len() <= 2, "at most the two found: {catalog:?}");
        }
        for r in &reqs {
            assert!(
                !r.body.to_string().contains("browser_rates"),
                "an isolated tool reached the model outside the isolated pool"
            );
        }
        let later = &agents[1].body;
        match wire {
            Wire::Anthropic => {
                // The search result holds tool references, and each referenced
                // tool is sent deferred.
                let last = later["messages"].as_array().unwrap().last().unwrap();
                let refs: Vec<&str> = last["content"][0]["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| {
                        assert_eq!(p["type"], "tool_reference");
                        p["tool_name"].as_str().unwrap()
                    })
                    .collect();
                assert!(refs.contains(&"catalog__tool_137"), "{refs:?}");
                for t in later["tools"].as_array().unwrap() {
                    let name = t["name"].as_str().unwrap();
                    assert_eq!(
                        t["defer_loading"] == true,
                        name.starts_with("catalog__"),
                        "{name}"
                    );
                }
                let betas = agents[1].header("anthropic-beta").unwrap_or_default();
                assert!(betas.contains("advanced-tool-use-2025-11-20"), "{betas}");
                // Built-in definitions carry their input_examples.
                let fetch = later["tools"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|t| t["name"] == "fetch_page")
                    .unwrap();
                assert!(!fetch["input_examples"].as_array().unwrap().is_empty());
            }
            Wire::OpenAi => {
                let defs = later["tools"].as_array().unwrap();
                assert!(
                    defs.iter()
                        .any(|t| t["function"]["name"] == "catalog__tool_137")
                );
                assert!(defs.iter().all(|t| t.get("defer_loading").is_none()));
            }
        }
        sys.shutdown().await;
    }
}

/// `run_code`: one script fetches three pages through the tool layer and
/// returns only the prices; the pages stay out of the model's context, and the
/// findings may cite them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_code_calls_tools_in_the_sandbox_and_returns_only_its_value() {
    const SCRIPT: &str = r#"
const urls = ["https://shop.example/p/a", "https://shop.example/p/b", "https://shop.example/p/c"];
const pages = await Promise.all(urls.map(url => tools.fetch_page({url})));
console.log("fetched", pages.length);
return urls.map((url, i) => ({url, bytes: String(pages[i]).length}));
"#;
    let server = ScriptedModel::start(|wire, body| {
        let v = view(wire, body);
        match (v.step, v.turn) {
            (Step::Planner, _) => call(
                &v,
                "submit_plan",
                json!({"sub_questions": ["three prices"]}),
            ),
            (Step::Agent, 0) => call(&v, "run_code", json!({"code": "return tools.nope()"})),
            (Step::Agent, 1) => {
                assert!(
                    v.results[0].1 && v.results[0].0.contains("the script failed"),
                    "{:?}",
                    v.results
                );
                call(&v, "run_code", json!({"code": SCRIPT}))
            }
            (Step::Agent, _) => submit(
                &v,
                "three pages read",
                &["https://shop.example/p/a", "https://shop.example/p/c"],
            ),
            (Step::Report, _) => text(&v, "Read [1] and [2]."),
        }
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (sys, summary) = research_run(
        dir.path(),
        trawl_tests::scripted_anthropic(&server),
        None,
        "name: code\nresearch: {question: \"three prices\"}\n",
    )
    .await;
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    assert_eq!(sys.simulator().unwrap().stats().requests, 3);
    let reqs = server.requests();
    let after = agent_requests(&reqs)
        .into_iter()
        .find(|r| view(r.wire, &r.body).turn == 2)
        .unwrap();
    let v = view(after.wire, &after.body);
    let result = &v.results[0].0;
    assert!(
        result.contains("\"bytes\"") && result.contains("fetched 3"),
        "{result}"
    );
    assert!(
        result.len() < 1_000,
        "only the value and the console: {result}"
    );
    assert!(!result.contains("<html"), "{result}");
    // Each call the script made was audited by the tool layer.
    let job = trawl_core::model::JobId::parse(&summary.job_id).unwrap();
    let audit = sys.store().audit_page(None, 1_000).await.unwrap();
    let fetches = audit
        .iter()
        .filter(|(_, a)| a.job_id.as_ref() == Some(&job) && a.tool == "brightdata.fetch_page")
        .count();
    assert_eq!(fetches, 3);
    sys.shutdown().await;
}

/// The deployed shape: `trawl api`, `scheduler` and two `worker`s over Postgres,
/// NATS and Redis, the model configured by the environment
/// (`ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`, `TRAWL_MODEL`). The research,
/// agent and report slices travel their own subjects, the scheduler adds the
/// report once the sub-agents are done, and the API serves findings, report and
/// every model turn in the trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_research_job_runs_in_the_deployed_shape() {
    const BIN: &str = env!("CARGO_BIN_EXE_trawl-e2e");
    let server = ScriptedModel::start(x1_model).await.unwrap();
    let d = trawl_tests::Deployment::new(BIN, SimConfig::default())
        .await
        .with_env("ANTHROPIC_BASE_URL", &server.url())
        .with_env("ANTHROPIC_API_KEY", "deployed-key")
        .with_env("TRAWL_MODEL", MODEL)
        .with_env("TRAWL_OPS_LISTEN", "127.0.0.1:0");
    let mut api = d.spawn("api", "api");
    let scheduler = d.spawn("scheduler", "scheduler");
    let mut workers: Vec<_> = (0..2)
        .map(|i| d.spawn("worker", &format!("worker-{i}")))
        .collect();
    let client = d.client(&api.api_url().await);
    let id = client
        .submit_yaml(
            "name: x1\nresearch:\n  question: Which German shops sell the ThinkPad X1 Carbon, and how do their return policies differ?\n  geo: de\n",
        )
        .await;
    let logs = || {
        let mut out = format!("{}\n{}", api.log(), scheduler.log());
        for w in &workers {
            out.push_str(&w.log());
        }
        out
    };
    let job = client
        .wait_job(&id, Duration::from_secs(60), trawl_tests::is_terminal, logs)
        .await;
    assert_eq!(job["status"], "succeeded", "{job}\n{}", logs());
    assert_eq!(job["counts"]["slices"]["total"], 4, "{job}");

    let items = client.all(&format!("/v1/jobs/{id}/items"), "items").await;
    let kinds: Vec<&str> = items.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "finding").count(),
        2,
        "{items:#?}"
    );
    let report = items.iter().find(|i| i["kind"] == "report").unwrap();
    let reqs = server.requests();
    assert!(
        reqs.iter()
            .all(|r| r.header("x-api-key") == Some("deployed-key"))
    );
    let fetched = fetched_urls(&reqs);
    let sources = report["data"]["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 2);
    assert!(
        sources
            .iter()
            .all(|s| fetched.contains(s.as_str().unwrap()))
    );
    let md = client
        .req(reqwest::Method::GET, &format!("/v1/jobs/{id}/report"))
        .send()
        .await
        .unwrap();
    assert_eq!(md.status(), 200);
    assert!(
        md.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/markdown")
    );
    assert_eq!(
        md.text().await.unwrap(),
        report["data"]["markdown"].as_str().unwrap()
    );
    // A job without a research question has no report: 404 with the reason.
    let plain = client
        .submit_yaml(&format!(
            "name: plain\npages: {{urls: [\"https://shop.example/p/1\"], geos: [us]}}\n{}",
            trawl_tests::EXTRACT
        ))
        .await;
    let none = client
        .req(reqwest::Method::GET, &format!("/v1/jobs/{plain}/report"))
        .send()
        .await
        .unwrap();
    assert_eq!(none.status(), 404);
    assert!(none.text().await.unwrap().contains("no research question"));
    let trace = client.all(&format!("/v1/jobs/{id}/trace"), "steps").await;
    let turns = trace
        .iter()
        .filter(|t| t["tool"] == format!("model:{MODEL}"))
        .count();
    assert_eq!(turns, reqs.len(), "one trace step per model turn");
    // The workers count the turns and their tokens in /metrics.
    let (mut counted, mut output) = (0.0, 0.0);
    for w in &mut workers {
        let text = reqwest::get(format!("{}/metrics", w.ops_url().await))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let value = |prefix: &str| -> f64 {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .and_then(|l| l.rsplit(' ').next())
                .map_or(0.0, |v| v.parse().unwrap())
        };
        counted += value(&format!(
            "trawl_model_turns_total{{model=\"{MODEL}\",outcome=\"ok\"}}"
        ));
        output += value(&format!(
            "trawl_model_tokens_total{{model=\"{MODEL}\",kind=\"output\"}}"
        ));
    }
    assert_eq!(counted, reqs.len() as f64);
    assert_eq!(output, (reqs.len() as u64 * USAGE.output_tokens) as f64);
}

/// A sub-agent's worker is killed (SIGKILL) while it waits for its third model
/// turn, after two paid ones. The slice is delivered again to another worker,
/// which goes on from the saved conversation: its first request is the third
/// turn, and the ledger holds every paid turn once, the killed delivery's two
/// included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_killed_after_two_paid_turns_resumes_at_its_third() {
    const BIN: &str = env!("CARGO_BIN_EXE_trawl-e2e");
    // The first request of the third turn is never answered in time: the
    // worker waiting for it is killed.
    let stalled = Arc::new(AtomicBool::new(false));
    let first = stalled.clone();
    let server = ScriptedModel::start(move |wire, body| {
        let v = view(wire, body);
        match (v.step, v.turn) {
            (Step::Planner, _) => call(
                &v,
                "submit_plan",
                json!({"sub_questions": ["X1 Carbon prices in Germany"]}),
            ),
            (Step::Agent, 0) => call(&v, "web_search", json!({"query": "thinkpad x1 carbon"})),
            (Step::Agent, 1) => call(&v, "fetch_page", json!({"url": link(&v.results[0].0, 0)})),
            (Step::Agent, _) => {
                let url = fetched_urls(&[Recorded {
                    wire,
                    path: String::new(),
                    headers: Vec::new(),
                    body: body.clone(),
                }])
                .pop_first()
                .unwrap();
                let reply = submit(&v, &format!("Listed on {url}"), &[&url]);
                if first.swap(true, Ordering::SeqCst) {
                    reply
                } else {
                    reply.with_delay(Duration::from_secs(600))
                }
            }
            (Step::Report, _) => text(&v, "# X1 Carbon\n\nListed [1]."),
        }
    })
    .await
    .unwrap();
    let d = trawl_tests::Deployment::new(BIN, SimConfig::default())
        .await
        .with_env("ANTHROPIC_BASE_URL", &server.url())
        .with_env("ANTHROPIC_API_KEY", "deployed-key")
        .with_env("TRAWL_MODEL", MODEL)
        .with_env("TRAWL_ACK_WAIT", "2s");
    let mut api = d.spawn("api", "api");
    let scheduler = d.spawn("scheduler", "scheduler");
    let mut victim = d.spawn("worker", "worker-killed");
    let client = d.client(&api.api_url().await);
    let id = client
        .submit_yaml(
            "name: resume\nresearch:\n  question: Where is the X1 Carbon sold?\n  geo: de\n",
        )
        .await;
    let agent_turns = || -> Vec<(usize, Value)> {
        server
            .requests()
            .iter()
            .map(|r| view(r.wire, &r.body))
            .zip(server.requests())
            .filter(|(v, _)| v.step == Step::Agent)
            .map(|(v, r)| (v.turn, r.body["messages"].clone()))
            .collect()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !stalled.load(Ordering::SeqCst) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sub-agent never asked for its third turn:\n{}\n{}",
            scheduler.log(),
            victim.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    victim.kill();
    // Before any other delivery: the two paid turns are in the ledger already.
    let model_steps = |trace: &[Value]| -> Vec<Value> {
        trace
            .iter()
            .filter(|t| t["tool"] == format!("model:{MODEL}"))
            .cloned()
            .collect()
    };
    let trace = client.all(&format!("/v1/jobs/{id}/trace"), "steps").await;
    let agent_slice = trace
        .iter()
        .find(|t| t["tool"] == "brightdata.web_search")
        .map(|t| t["slice_id"].clone())
        .unwrap_or_else(|| panic!("no search step saved: {trace:#?}"));
    let of_agent = |steps: Vec<Value>| -> Vec<Value> {
        steps
            .into_iter()
            .filter(|t| t["slice_id"] == agent_slice)
            .collect()
    };
    assert_eq!(of_agent(model_steps(&trace)).len(), 2, "{trace:#?}");

    let worker = d.spawn("worker", "worker-resumed");
    let job = client
        .wait_job(
            &id,
            Duration::from_secs(60),
            trawl_tests::is_terminal,
            || format!("{}\n{}\n{}", api.log(), scheduler.log(), worker.log()),
        )
        .await;
    assert_eq!(job["status"], "succeeded", "{job}\n{}", worker.log());
    assert!(
        worker.log().contains("goes on from its saved turn"),
        "{}",
        worker.log()
    );

    // The second delivery's first request is the third turn, with the
    // conversation the killed one sent: nothing was asked twice.
    let turns = agent_turns();
    let numbers: Vec<usize> = turns.iter().map(|(n, _)| *n).collect();
    assert_eq!(numbers, [0, 1, 2, 2], "agent turns asked, in order");
    assert_eq!(
        turns[2].1, turns[3].1,
        "the resumed turn sends the saved conversation"
    );

    // Every paid turn once: 1 plan, 3 sub-agent turns (2 before the kill, 1
    // after), 1 report; the stalled request was never paid.
    let trace = client.all(&format!("/v1/jobs/{id}/trace"), "steps").await;
    let model = model_steps(&trace);
    assert_eq!(model.len(), 5, "{trace:#?}");
    let agent = of_agent(model.clone());
    let seqs: BTreeSet<u64> = agent.iter().map(|t| t["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs.len(), 3, "{agent:#?}");
    for tool in ["brightdata.web_search", "brightdata.fetch_page"] {
        let calls = trace.iter().filter(|t| t["tool"] == tool).count();
        assert_eq!(calls, 1, "{tool} was called once: {trace:#?}");
    }
    let billed: i64 = trace.iter().map(|t| t["cost"].as_i64().unwrap()).sum();
    assert!(billed > 0);
    assert_eq!(
        job["counts"]["cost_micros"].as_i64().unwrap(),
        billed,
        "{job}"
    );
    let per_turn = model[0]["cost"].as_i64().unwrap();
    assert!(per_turn > 0, "{model:#?}");
    assert!(model.iter().all(|t| t["cost"].as_i64() == Some(per_turn)));
}

fn catalog_config(dir: &Path, n: usize) -> ToolsConfig {
    let tools: Vec<Value> = (0..n)
        .map(|i| {
            json!({
                "name": format!("tool_{i}"),
                "description": format!("Looks up inventory record number {i}."),
                "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}
            })
        })
        .collect();
    let file = dir.join("tools.json");
    std::fs::write(&file, json!({"tools": tools}).to_string()).unwrap();
    ToolsConfig::parse(
        &format!(
            "servers:\n  catalog:\n    command: {UPSTREAM}\n    args: [--tools, {}, --page-size, \"50\"]\n",
            file.display()
        ),
        dir,
    )
    .unwrap()
}

/// `tool_search: server`: Anthropic's BM25 tool search runs on its side, over the
/// catalog sent deferred; trawl's own `tool_search` is not offered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_tool_search_sends_the_catalog_deferred_with_the_bm25_tool() {
    let server = ScriptedModel::start(|wire, body| {
        let v = view(wire, body);
        match (v.step, v.turn) {
            (Step::Planner, _) => call(&v, "submit_plan", json!({"sub_questions": ["record 42"]})),
            // As if Anthropic's search had expanded the tool.
            (Step::Agent, 0) => call(&v, "catalog__tool_42", json!({"q": "42"})),
            (Step::Agent, 1) => call(
                &v,
                "fetch_page",
                json!({"url": "https://shop.example/p/r42"}),
            ),
            (Step::Agent, _) => submit(&v, "record 42", &["https://shop.example/p/r42"]),
            (Step::Report, _) => text(&v, "Record 42 [1]."),
        }
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = catalog_config(dir.path(), 30);
    let (sys, summary) = research_run(dir.path(), trawl_tests::scripted_anthropic(&server), Some(config), "name: bm25\nresearch: {question: \"record 42?\", tool_search: server, code_execution: off}\n").await;
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    let reqs = server.requests();
    let first = &agent_requests(&reqs)[0].body;
    let tools = first["tools"].as_array().unwrap();
    assert_eq!(
        tools[0],
        json!({"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"})
    );
    let deferred: Vec<&str> = tools
        .iter()
        .filter(|t| t["defer_loading"] == true)
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        deferred
            .iter()
            .filter(|n| n.starts_with("catalog__"))
            .count(),
        30,
        "the whole catalog, deferred"
    );
    assert!(!deferred.contains(&"fetch_page") && !deferred.contains(&"web_search"));
    assert!(
        tools
            .iter()
            .all(|t| t["name"] != "tool_search" && t["name"] != "run_code")
    );
    sys.shutdown().await;
}

/// `code_execution: anthropic`: Anthropic's hosted code execution calls trawl's
/// tools (`allowed_callers`); a `tool_use` with a `caller` runs through the tool
/// layer like any other, and the container goes back with the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosted_code_execution_calls_tools_through_the_layer_in_its_container() {
    let server = ScriptedModel::start(|wire, body| {
        let v = view(wire, body);
        match (v.step, v.turn) {
            (Step::Planner, _) => call(&v, "submit_plan", json!({"sub_questions": ["a page"]})),
            (Step::Agent, 0) => {
                let mut r = Reply::anthropic_message(
                json!([
                    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "code_execution",
                     "input": {"code": "r = await fetch_page({'url': 'https://shop.example/p/hosted'})"}},
                    {"type": "tool_use", "id": "toolu_1", "name": "fetch_page",
                     "input": {"url": "https://shop.example/p/hosted"},
                     "caller": {"type": "code_execution_20250825", "tool_id": "srvtoolu_1"}}
                ]),
                "tool_use",
                USAGE,
                );
                r.body["container"] = json!({"id": "container_1", "expires_at": "2026-12-03T15:00:00Z"});
                r
            }
            (Step::Agent, _) => submit(&v, "read it", &["https://shop.example/p/hosted"]),
            (Step::Report, _) => text(&v, "Read [1]."),
        }
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (sys, summary) = research_run(
        dir.path(),
        trawl_tests::scripted_anthropic(&server),
        None,
        "name: hosted\nresearch: {question: \"a page?\", code_execution: anthropic}\n",
    )
    .await;
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    assert_eq!(sys.simulator().unwrap().stats().requests, 1);
    let reqs = server.requests();
    let agents = agent_requests(&reqs);
    let first = &agents[0].body;
    let tools = first["tools"].as_array().unwrap();
    assert!(tools.contains(&json!({"type": "code_execution_20250825", "name": "code_execution"})));
    let fetch = tools.iter().find(|t| t["name"] == "fetch_page").unwrap();
    assert_eq!(fetch["allowed_callers"], json!(["code_execution_20250825"]));
    assert!(
        tools.iter().all(|t| t["name"] != "run_code"),
        "the local sandbox is not offered"
    );
    let second = &agents[1].body;
    assert_eq!(second["container"], "container_1");
    // The assistant turn went back verbatim, server block and caller included.
    let msgs = second["messages"].as_array().unwrap();
    let assistant = &msgs[msgs.len() - 2]["content"];
    assert_eq!(assistant[0]["type"], "server_tool_use");
    assert_eq!(assistant[1]["caller"]["tool_id"], "srvtoolu_1");
    let result = &msgs[msgs.len() - 1]["content"][0];
    assert_eq!(result["tool_use_id"], "toolu_1");
    assert!(result.get("is_error").is_none(), "{result}");
    sys.shutdown().await;
}

/// Model turns reserve from the job's budget before they are made: a budget
/// below one turn's worst case stops the planner before any request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_below_a_model_turn_stops_the_job_before_the_model_is_called() {
    let server = ScriptedModel::start(|wire, body| {
        let v = view(wire, body);
        call(&v, "submit_plan", json!({"sub_questions": ["a"]}))
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sys = system(
        &dir.path().join("state"),
        trawl_tests::scripted_anthropic(&server),
        None,
    )
    .await;
    // 4,096 output tokens at $15 per million alone are $0.061.
    let summary = trawl_tests::run_embedded(
        &sys,
        "name: poor\nresearch: {question: \"a?\"}\nbudget: {max_usd: 0.05}\n",
        &dir.path().join("out"),
    )
    .await;
    assert_eq!(summary.status, JobStatus::Failed);
    assert!(
        summary
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("budget_exhausted"),
        "{summary:?}"
    );
    assert!(server.requests().is_empty());
    assert_eq!(summary.cost_micros, 0);
    sys.shutdown().await;
}

/// `trawl run` refuses a research job no model could run, before storing it; the
/// example spec parses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_research_job_without_a_model_is_refused_with_what_to_set() {
    let spec = JobSpec::parse(include_str!("../../examples/research.yaml")).unwrap();
    assert!(spec.research.is_some());
    let dir = tempfile::tempdir().unwrap();
    let sys = system(
        &dir.path().join("state"),
        Models::new(PriceList::claude()),
        None,
    )
    .await;
    let err = sys
        .submit(&spec, Some("test"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ANTHROPIC_API_KEY") && err.contains("OPENAI_BASE_URL"),
        "{err}"
    );
    let stored = sys
        .store()
        .jobs_with_status(
            &[
                JobStatus::Pending,
                JobStatus::Queued,
                JobStatus::Running,
                JobStatus::Failed,
            ],
            10,
        )
        .await
        .unwrap();
    assert!(stored.is_empty(), "nothing stored: {stored:?}");
    sys.shutdown().await;
}
