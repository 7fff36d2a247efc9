//! Model-driven slices: the planner, the sub-agents and the report of a research
//! question.
//!
//! - **research** (the plan): the planner model is given the question and one
//!   tool, `submit_plan`, which it must call (`tool_choice`). Its sub-questions
//!   are checked (schema, count, distinct); an invalid plan is sent back as a
//!   tool error to fix, at most [`PLAN_TRIES`] times, then the slice (and so the
//!   job) fails with the reason. Each sub-question becomes an `agent` slice.
//! - **agent**: a sub-agent starts with `tool_search`, the two core Bright Data
//!   tools, `run_code` and `submit_findings`. Tools it finds join the next request
//!   (for Anthropic as `tool_reference` blocks with the found definitions sent
//!   `defer_loading: true`; for others as plain definitions), so its context never
//!   holds the whole catalog. Every tool call, including those a `run_code`
//!   script makes, passes the tool layer. After `max_tool_calls_per_agent` calls it
//!   must submit; it ends when it does, or fails when it will not. Findings are
//!   validated one by one: a finding citing a page this sub-agent did not fetch is
//!   a rejection.
//! - **report**: once every sub-agent is done (the scheduler adds this slice),
//!   the model writes Markdown from the findings, citing them as `[n]`; a report
//!   citing anything but the numbered, fetched sources is sent back to fix, then
//!   fails. The source list is appended by trawl, not by the model.
//!
//! Every model turn is a trace step (`model:<name>`) and, when the model is in the
//! price list, a cost entry; turns reserve from the job's budget like tool calls.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use trawl_core::model::{
    Item, ItemKind, SliceId, SliceKind, SliceOutcome, SliceSpec, normalize_url,
};
use trawl_core::plan::sub_agents;
use trawl_core::ports::{Store, ToolDef, ToolError};
use trawl_core::spec::{CodeExecution, Research, ToolSearchMode};
use trawl_model::{
    Block, Message, Provider, Request, Response, ResultPart, ServerTool, StopReason, Tool,
    ToolChoice,
};
use trawl_tools::{CallOptions, Recorder, TOOL_SEARCH, ToolLayer};

use crate::JobContext;
use crate::models::{Models, Resolved};

mod checks;
mod turn;
mod wire;

use checks::{cap, check_plan, check_report, findings, render};
pub(crate) use turn::model_turn;
pub use wire::WireNames;

/// Turns the planner gets to produce a valid plan.
pub const PLAN_TRIES: u32 = 3;
/// Turns the report writer gets to cite only its sources.
pub const REPORT_TRIES: u32 = 3;
/// Tool calls one `run_code` script may make.
pub const SCRIPT_TOOL_CALLS: u32 = 50;
/// Bytes of one tool result a sub-agent is shown; the rest is cut with a note.
pub const RESULT_CAP: usize = 12_000;
/// Times a sub-agent that stops without submitting is asked to submit.
const NUDGES: u32 = 2;

const SEARCH: &str = "brightdata.web_search";
const FETCH: &str = "brightdata.fetch_page";
const RUN_CODE: &str = "run_code";
const SUBMIT_PLAN: &str = "submit_plan";
const SUBMIT_FINDINGS: &str = "submit_findings";
/// Anthropic's hosted code execution tool, named in `allowed_callers`.
const CODE_EXECUTION: &str = "code_execution_20250825";

/// Runs a research, agent or report slice. Never fails: an error becomes the
/// slice's; the second value says whether it was transient.
pub async fn run_slice(
    job: &Arc<JobContext>,
    tools: &Arc<ToolLayer>,
    models: Option<&Models>,
    store: &dyn Store,
    slice: &SliceSpec,
) -> (SliceOutcome, bool) {
    let mut out = SliceOutcome::default();
    // What an earlier delivery of this slice saved: its rows are this one's too,
    // and a sub-agent goes on from its last turn.
    let saved = match store.progress(&job.id, &slice.id).await {
        Ok(saved) => saved,
        Err(e) => {
            out.error =
                Some(ToolError::transient("store_unavailable", e.to_string()).to_slice_error());
            return (out, true);
        }
    };
    let (rec, state) = match saved {
        Some(mut saved) => {
            let state = saved.state.take();
            tracing::info!(
                turns = saved
                    .trace
                    .iter()
                    .filter(|t| t.tool.starts_with("model:"))
                    .count(),
                "resuming the slice where an earlier delivery left it"
            );
            (
                Recorder::resume(job.id.clone(), slice.id.clone(), saved),
                state,
            )
        }
        None => (Recorder::new(job.id.clone(), slice.id.clone()), None),
    };
    let rec = Arc::new(rec);
    let result = match prepare(job, models) {
        Err(e) => Err(e),
        Ok((research, model)) => {
            let cx = Cx {
                job: job.clone(),
                tools: tools.clone(),
                rec: rec.clone(),
                store,
                slice: slice.id.clone(),
                model,
                research,
            };
            match &slice.kind {
                SliceKind::Research { question, .. } => cx.plan(slice, question, &mut out).await,
                SliceKind::Agent { question, .. } => {
                    cx.agent(slice, question, state, &mut out).await
                }
                SliceKind::Report { question, .. } => cx.report(slice, question, &mut out).await,
                other => Err(ToolError::permanent(
                    "internal",
                    format!("a {} slice is not model-driven", other.name()),
                )),
            }
        }
    };
    let mut transient = false;
    if let Err(e) = result {
        transient = e.is_transient();
        out.error = Some(e.to_slice_error());
    }
    let records = rec.take();
    (out.trace, out.costs, out.audit) = (records.trace, records.costs, records.audit);
    (out, transient)
}

fn prepare(job: &JobContext, models: Option<&Models>) -> Result<(Research, Resolved), ToolError> {
    let research = job.spec.research.clone().ok_or_else(|| {
        ToolError::permanent("internal", "a research slice of a job without research")
    })?;
    let models = models.filter(|m| m.any()).ok_or_else(|| {
        ToolError::permanent(
            "no_model",
            "this worker has no model provider: set ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL) or OPENAI_BASE_URL",
        )
    })?;
    let model = models
        .resolve(research.model.as_deref())
        .map_err(|e| ToolError::permanent("no_model", e))?;
    Ok((research, model))
}

/// How a sub-agent finds tools and runs code, for its provider.
#[derive(Clone, Copy)]
struct Modes {
    /// Anthropic's BM25 tool search over the deferred catalog, not trawl's.
    server_search: bool,
    /// Anthropic's hosted code execution calling trawl's tools.
    hosted_code: bool,
    /// `run_code` in trawl's sandbox (also where hosted execution was asked of
    /// a provider without it).
    local_code: bool,
}

impl Modes {
    fn of(r: &Research, provider: Provider) -> Modes {
        let anthropic = provider == Provider::Anthropic;
        Modes {
            server_search: anthropic && r.tool_search == ToolSearchMode::Server,
            hosted_code: anthropic && r.code_execution == CodeExecution::Anthropic,
            local_code: r.code_execution == CodeExecution::Local
                || (r.code_execution == CodeExecution::Anthropic && !anthropic),
        }
    }
}

/// What a model-driven slice works with.
struct Cx<'a> {
    job: Arc<JobContext>,
    tools: Arc<ToolLayer>,
    rec: Arc<Recorder>,
    store: &'a dyn Store,
    slice: SliceId,
    model: Resolved,
    research: Research,
}

/// Where a sub-agent's conversation stands before one of its turns: saved with
/// the slice's progress, so that a slice delivered again goes on from here.
#[derive(Serialize, Deserialize)]
struct AgentState {
    /// The turn about to be taken, from 0.
    turn: u32,
    messages: Vec<Message>,
    container: Option<String>,
    /// Tools found by `tool_search`, offered from now on.
    loaded: BTreeSet<String>,
    /// Pages fetched, which findings may cite.
    fetched: BTreeSet<String>,
    calls: u32,
    nudges: u32,
}

impl Cx<'_> {
    fn provider(&self) -> Provider {
        self.model.client.provider()
    }

    /// One model turn: budget reserved, the call, a trace step and its cost;
    /// then what the slice recorded is saved, so a paid turn outlives the
    /// delivery.
    async fn turn(&self, req: &Request) -> Result<Response, ToolError> {
        let resp = model_turn(&self.job, &self.model, &self.rec, req).await;
        self.save(None).await;
        resp
    }

    /// Saves what the slice recorded since the last save and, when given, the
    /// state it resumes from. A save that fails is logged: the outcome carries
    /// the same rows, and a delivery that finds no state starts over.
    async fn save(&self, state: Option<Value>) {
        let mut progress = self.rec.unsaved();
        progress.state = state;
        if progress.is_empty() {
            return;
        }
        if let Err(e) = self
            .store
            .save_progress(&self.job.id, &self.slice, &progress)
            .await
        {
            tracing::warn!(error = %e, "the slice's progress was not saved");
        }
    }

    fn request(&self, system: String) -> Request {
        let mut req = Request::new(self.model.model.clone(), self.research.max_tokens);
        req.system = Some(system);
        req
    }

    // -----------------------------------------------------------------------
    // The plan

    async fn plan(
        &self,
        slice: &SliceSpec,
        question: &str,
        out: &mut SliceOutcome,
    ) -> Result<(), ToolError> {
        let max = self.research.max_subagents;
        let schema = json!({
            "type": "object",
            "required": ["sub_questions"],
            "properties": {
                "sub_questions": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": max,
                    "items": {"type": "string", "minLength": 3, "maxLength": 1000},
                    "description": "Self-contained questions, each answerable by one researcher with web search and page fetches."
                }
            },
            "additionalProperties": false
        });
        let validator = jsonschema::validator_for(&schema)
            .map_err(|e| ToolError::permanent("internal", e.to_string()))?;
        let mut req = self.request(format!(
            "You plan web research. Split the user's question into at most {max} \
             sub-questions that together answer it; each is researched on its own by \
             an agent that can search the web (country: {}) and fetch pages. Call \
             {SUBMIT_PLAN} with them.",
            self.research.geo
        ));
        let mut tool = Tool::new(
            SUBMIT_PLAN,
            "Submit the research plan: the sub-questions, in order.",
            schema,
        );
        tool.input_examples = vec![json!({"sub_questions": [
            "Which EU retailers list the ThinkPad X1 Carbon Gen 13 under 1,500 EUR?",
            "What are the return policies of those retailers?"
        ]})];
        req.tools = vec![tool];
        req.tool_choice = Some(ToolChoice::Tool(SUBMIT_PLAN.into()));
        req.messages.push(Message::user_text(question));
        let mut last = String::new();
        for _ in 0..PLAN_TRIES {
            let resp = self.turn(&req).await?;
            req.messages.push(Message::assistant(resp.content.clone()));
            let call = resp
                .tool_uses()
                .find(|(_, name, _)| *name == SUBMIT_PLAN)
                .map(|(id, _, input)| (id.to_owned(), input.clone()));
            let problem = match &call {
                None => format!("no {SUBMIT_PLAN} call in the answer"),
                Some((_, input)) => match check_plan(&validator, input) {
                    Ok(questions) => {
                        out.children = sub_agents(slice, &questions);
                        tracing::info!(sub_questions = questions.len(), "research planned");
                        return Ok(());
                    }
                    Err(p) => p,
                },
            };
            last = problem.clone();
            let fix = format!(
                "The plan is invalid: {problem}. Call {SUBMIT_PLAN} again with a valid plan."
            );
            req.messages.push(match &call {
                Some((id, _)) => Message::user(vec![Block::tool_error(id.clone(), fix)]),
                None => Message::user_text(fix),
            });
        }
        Err(ToolError::permanent(
            "bad_plan",
            format!("the planner gave no valid plan in {PLAN_TRIES} tries; last: {last}"),
        ))
    }

    // -----------------------------------------------------------------------
    // A sub-agent

    async fn agent(
        &self,
        slice: &SliceSpec,
        question: &str,
        resume: Option<Value>,
        out: &mut SliceOutcome,
    ) -> Result<(), ToolError> {
        let r = &self.research;
        let modes = Modes::of(r, self.provider());
        let catalog = self.tools.catalog();
        let mut names = WireNames::default();
        // The catalog tools this worker may call: listed, and not refused here by
        // policy (denied, or isolated while this is not the isolated pool).
        let usable: Vec<&ToolDef> = catalog
            .listed()
            .map(|e| &e.def)
            .filter(|d| self.usable(&d.name))
            .collect();
        for d in &usable {
            names.insert(&d.name);
        }
        let core: Vec<&ToolDef> = usable
            .iter()
            .copied()
            .filter(|d| d.name == SEARCH || d.name == FETCH)
            .collect();
        let mut loaded: BTreeSet<String> = BTreeSet::new();
        let fetched: Arc<Mutex<BTreeSet<String>>> = Arc::default();

        let mut req = self.request(agent_system(r, modes.local_code || modes.hosted_code));
        let max_calls = r.max_tool_calls_per_agent;
        let mut calls = 0u32;
        let mut nudges = 0u32;
        let mut first = 0u32;
        match resume.map(serde_json::from_value::<AgentState>) {
            Some(Ok(st)) => {
                tracing::info!(
                    turn = st.turn + 1,
                    "the sub-agent goes on from its saved turn"
                );
                (first, req.messages, req.container) = (st.turn, st.messages, st.container);
                (loaded, calls, nudges) = (st.loaded, st.calls, st.nudges);
                *fetched.lock().unwrap_or_else(|p| p.into_inner()) = st.fetched;
            }
            other => {
                if let Some(Err(e)) = other {
                    tracing::warn!(error = %e, "the saved conversation is unreadable; starting over");
                }
                req.messages.push(Message::user_text(format!(
                    "Research this question and submit your findings: {question}"
                )));
            }
        }
        // Tool calls, plus a turn to submit, plus nudges and findings fixes.
        let max_turns = max_calls + 2 + NUDGES + PLAN_TRIES;
        for turn in first..max_turns {
            if turn > first {
                // The conversation up to this turn, with the tool calls' rows.
                let state = AgentState {
                    turn,
                    messages: req.messages.clone(),
                    container: req.container.clone(),
                    loaded: loaded.clone(),
                    fetched: fetched.lock().unwrap_or_else(|p| p.into_inner()).clone(),
                    calls,
                    nudges,
                };
                self.save(serde_json::to_value(&state).ok()).await;
            }
            let capped = calls >= max_calls;
            req.tools = self.agent_tools(&names, &core, &usable, &loaded, capped, modes);
            req.server_tools.clear();
            if modes.server_search && !capped {
                req.server_tools.push(ServerTool::ToolSearchBm25);
            }
            if modes.hosted_code && !capped {
                req.server_tools.push(ServerTool::CodeExecution);
            }
            req.tool_choice = Some(if capped {
                ToolChoice::Tool(SUBMIT_FINDINGS.into())
            } else {
                ToolChoice::Auto
            });
            let resp = self.turn(&req).await?;
            if resp.container.is_some() {
                req.container = resp.container.clone();
            }
            req.messages.push(Message::assistant(resp.content.clone()));
            let uses: Vec<(String, String, Value)> = resp
                .tool_uses()
                .map(|(id, n, i)| (id.to_owned(), n.to_owned(), i.clone()))
                .collect();
            if uses.is_empty() {
                match resp.stop_reason {
                    // The server paused a long turn of its own tools: go on.
                    StopReason::PauseTurn => continue,
                    _ if nudges < NUDGES => {
                        nudges += 1;
                        req.messages.push(Message::user_text(format!(
                            "Call {SUBMIT_FINDINGS} with your findings now, each citing the pages you fetched."
                        )));
                        continue;
                    }
                    _ => {
                        return Err(ToolError::permanent(
                            "no_findings",
                            format!(
                                "the sub-agent stopped ({:?}) without submitting findings",
                                resp.stop_reason
                            ),
                        ));
                    }
                }
            }
            let mut results = Vec::new();
            for (id, name, input) in uses {
                if name == SUBMIT_FINDINGS {
                    let seen = fetched.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    match findings(slice, question, &input, &seen, out) {
                        Ok(()) => return Ok(()),
                        Err(problem) => {
                            results.push(Block::tool_error(id, problem));
                            continue;
                        }
                    }
                }
                if calls >= max_calls {
                    results.push(Block::tool_error(
                        id,
                        format!("tool call cap of {max_calls} reached; call {SUBMIT_FINDINGS}"),
                    ));
                    continue;
                }
                calls += 1;
                let block = if name == TOOL_SEARCH && !modes.server_search {
                    self.search_tools(&id, &input, &names, &mut loaded).await
                } else if name == RUN_CODE && modes.local_code {
                    self.run_code(&id, &input, &names, &fetched).await
                } else if let Some(tool) = names.catalog(&name) {
                    self.call_tool(&id, tool, &input, &fetched).await
                } else {
                    Block::tool_error(
                        id,
                        format!("there is no tool named {name}; use {TOOL_SEARCH} to find tools"),
                    )
                };
                results.push(block);
            }
            if calls >= max_calls {
                results.push(Block::text(format!(
                    "You have used all {max_calls} tool calls. Call {SUBMIT_FINDINGS} now with what you found."
                )));
            }
            req.messages.push(Message::user(results));
        }
        Err(ToolError::permanent(
            "agent_cap",
            format!(
                "the sub-agent used its {max_calls} tool calls and {max_turns} turns without submitting valid findings"
            ),
        ))
    }

    fn usable(&self, tool: &str) -> bool {
        self.tools.offers(tool)
    }

    /// The tools of the next request.
    fn agent_tools(
        &self,
        names: &WireNames,
        core: &[&ToolDef],
        usable: &[&ToolDef],
        loaded: &BTreeSet<String>,
        capped: bool,
        modes: Modes,
    ) -> Vec<Tool> {
        let submit = submit_findings_tool();
        if capped {
            return vec![submit];
        }
        let callers = if modes.hosted_code {
            vec![CODE_EXECUTION.to_owned()]
        } else {
            Vec::new()
        };
        let wire = |d: &ToolDef, defer: bool| {
            let mut t = Tool::new(
                names.wire(&d.name),
                d.description.clone(),
                d.input_schema.clone(),
            );
            t.input_examples = d.input_examples.clone();
            t.defer_loading = defer;
            t.allowed_callers = callers.clone();
            t
        };
        let mut out: Vec<Tool> = Vec::new();
        if !modes.server_search {
            let d = trawl_tools::catalog::tool_search_def();
            let mut t = Tool::new(TOOL_SEARCH, d.description, d.input_schema);
            t.input_examples = d.input_examples;
            out.push(t);
        }
        out.extend(core.iter().map(|d| wire(d, false)));
        if modes.local_code {
            out.push(run_code_tool());
        }
        out.push(submit);
        let anthropic = self.provider() == Provider::Anthropic;
        if modes.server_search {
            // Anthropic searches the deferred definitions itself.
            out.extend(
                usable
                    .iter()
                    .filter(|d| !core.iter().any(|c| c.name == d.name))
                    .map(|d| wire(d, true)),
            );
        } else {
            // Found tools only: deferred and expanded by their `tool_reference`
            // for Anthropic, plain definitions for the others.
            out.extend(
                usable
                    .iter()
                    .filter(|d| loaded.contains(&d.name))
                    .map(|d| wire(d, anthropic)),
            );
        }
        out
    }

    /// `tool_search` through the tool layer (audited); the usable tools it found
    /// join the sub-agent's tools.
    async fn search_tools(
        &self,
        id: &str,
        input: &Value,
        names: &WireNames,
        loaded: &mut BTreeSet<String>,
    ) -> Block {
        let body = match self
            .tools
            .call(TOOL_SEARCH, input, &opts(&self.job), &self.rec)
            .await
        {
            Ok(b) => b,
            Err(e) => return Block::tool_error(id, format!("{}: {}", e.code, e.message)),
        };
        let found: Vec<String> = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("tools").and_then(Value::as_array).cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|t| t.get("name").and_then(Value::as_str))
            .filter(|n| names.knows(n) && *n != SEARCH && *n != FETCH)
            .map(str::to_owned)
            .collect();
        if found.is_empty() {
            return Block::tool_result(id, "No tool matched; try other words.");
        }
        loaded.extend(found.iter().cloned());
        if self.provider() == Provider::Anthropic {
            Block::ToolResult {
                tool_use_id: id.to_owned(),
                content: found
                    .iter()
                    .map(|n| ResultPart::ToolReference(names.wire(n)))
                    .collect(),
                is_error: false,
            }
        } else {
            let list: Vec<String> = found.iter().map(|n| names.wire(n)).collect();
            Block::tool_result(
                id,
                format!(
                    "Found {}; their definitions are now in your tools.",
                    list.join(", ")
                ),
            )
        }
    }

    async fn call_tool(
        &self,
        id: &str,
        tool: &str,
        input: &Value,
        fetched: &Mutex<BTreeSet<String>>,
    ) -> Block {
        match call_through_layer(&self.tools, &self.job, &self.rec, tool, input, fetched).await {
            Ok(v) => Block::tool_result(id, cap(&render(&v))),
            Err(e) => Block::tool_error(id, format!("{}: {}", e.code, e.message)),
        }
    }

    async fn run_code(
        &self,
        id: &str,
        input: &Value,
        names: &WireNames,
        fetched: &Arc<Mutex<BTreeSet<String>>>,
    ) -> Block {
        let Some(code) = input.get("code").and_then(Value::as_str) else {
            return Block::tool_error(id, "run_code needs {\"code\": \"...\"}");
        };
        let map = Arc::new(names.clone());
        let (tools, job, rec, seen) = (
            self.tools.clone(),
            self.job.clone(),
            self.rec.clone(),
            fetched.clone(),
        );
        let wire_names: Vec<String> = map.wires().map(str::to_owned).collect();
        let invoke: trawl_sandbox::Invoke = Arc::new(move |name: String, args: Value| {
            let (tools, job, rec, seen, map) = (
                tools.clone(),
                job.clone(),
                rec.clone(),
                seen.clone(),
                map.clone(),
            );
            Box::pin(async move {
                let Some(tool) = map.catalog(&name) else {
                    return Err(format!("no tool named {name}"));
                };
                call_through_layer(&tools, &job, &rec, tool, &args, &seen)
                    .await
                    .map_err(|e| format!("{}: {}", e.code, e.message))
            })
        });
        let limits = trawl_sandbox::Limits::default().with_max_tool_calls(SCRIPT_TOOL_CALLS);
        match trawl_sandbox::run(code, &wire_names, invoke, &limits).await {
            Ok(o) => {
                let mut text = json!({"value": o.value}).to_string();
                if !o.console.is_empty() {
                    text.push_str("\nconsole:\n");
                    text.push_str(&o.console);
                }
                Block::tool_result(id, cap(&text))
            }
            Err(e) => Block::tool_error(id, format!("the script failed: {e}")),
        }
    }

    // -----------------------------------------------------------------------
    // The report

    async fn report(
        &self,
        slice: &SliceSpec,
        question: &str,
        out: &mut SliceOutcome,
    ) -> Result<(), ToolError> {
        let items = self
            .store
            .items(&self.job.id)
            .await
            .map_err(|e| ToolError::transient("store_unavailable", e.to_string()))?;
        let found: Vec<&Item> = items
            .iter()
            .filter(|i| i.kind == ItemKind::Finding)
            .collect();
        // Sources numbered in the order they are first cited.
        let mut sources: Vec<String> = Vec::new();
        let mut lines = Vec::new();
        for f in &found {
            let mut refs = Vec::new();
            for s in f.data["sources"].as_array().into_iter().flatten() {
                let Some(url) = s.as_str() else { continue };
                let n = match sources.iter().position(|u| u == url) {
                    Some(i) => i + 1,
                    None => {
                        sources.push(url.to_owned());
                        sources.len()
                    }
                };
                refs.push(format!("[{n}]"));
            }
            lines.push(format!(
                "- ({}) {} {}",
                f.data["question"].as_str().unwrap_or_default(),
                f.data["claim"].as_str().unwrap_or_default(),
                refs.join("")
            ));
        }
        let markdown = if found.is_empty() {
            format!(
                "# {question}\n\nThe sub-agents found nothing they could support with a fetched page.\n"
            )
        } else {
            let mut req = self.request(
                "You write research reports in Markdown. Use only the findings given. Cite them \
                 with the bracketed source numbers they carry, like [2]; never write a URL and \
                 never cite a number that is not listed. Do not add a source list: it is \
                 appended for you."
                    .to_owned(),
            );
            let list: Vec<String> = sources
                .iter()
                .enumerate()
                .map(|(i, u)| format!("[{}] {u}", i + 1))
                .collect();
            req.messages.push(Message::user_text(format!(
                "Question: {question}\n\nFindings:\n{}\n\nSources:\n{}",
                lines.join("\n"),
                list.join("\n")
            )));
            let mut text = None;
            let mut last = String::new();
            for _ in 0..REPORT_TRIES {
                let resp = self.turn(&req).await?;
                let body = resp.text();
                req.messages.push(Message::assistant(resp.content.clone()));
                match check_report(&body, sources.len()) {
                    Ok(()) => {
                        text = Some(body);
                        break;
                    }
                    Err(p) => {
                        last = p.clone();
                        req.messages.push(Message::user_text(format!(
                            "The report is not acceptable: {p}. Write it again."
                        )));
                    }
                }
            }
            let Some(body) = text else {
                return Err(ToolError::permanent(
                    "report_uncited",
                    format!(
                        "the report cited what was not fetched in {REPORT_TRIES} tries; last: {last}"
                    ),
                ));
            };
            let mut md = body.trim_end().to_owned();
            md.push_str("\n\n## Sources\n\n");
            for (i, u) in sources.iter().enumerate() {
                md.push_str(&format!("{}. <{u}>\n", i + 1));
            }
            md
        };
        out.items.push(Item {
            slice_id: slice.id.clone(),
            seq: 0,
            kind: ItemKind::Report,
            url: String::new(),
            geo: slice.kind.geo(),
            data: json!({
                "question": question,
                "markdown": markdown,
                "sources": sources,
                "findings": found.len(),
            }),
        });
        Ok(())
    }
}

/// How a slice's tool calls are made: the job's retries, cache age and budget;
/// its sub-agent calls the built-in tools, so its `tool_search` offers them.
pub(crate) fn opts(job: &JobContext) -> CallOptions<'_> {
    CallOptions {
        retry: job.retry,
        max_age: job.spec.max_age,
        budget: &job.budget,
        offer_builtins: true,
    }
}

/// One tool call through the layer, its answer as JSON (a body that is not JSON
/// as a string); a fetched page is noted for citations.
async fn call_through_layer(
    tools: &ToolLayer,
    job: &JobContext,
    rec: &Recorder,
    tool: &str,
    input: &Value,
    fetched: &Mutex<BTreeSet<String>>,
) -> Result<Value, ToolError> {
    let mut args = input.clone();
    // Sub-agents read pages as markdown unless they ask otherwise, and search
    // from the job's country.
    if tool == FETCH && args.get("format").is_none() {
        args["format"] = json!("markdown");
    }
    if (tool == FETCH || tool == SEARCH)
        && args.get("geo").is_none()
        && let Some(r) = &job.spec.research
    {
        args["geo"] = json!(r.geo);
    }
    let body = tools.call(tool, &args, &opts(job), rec).await?;
    if tool == FETCH
        && let Some(url) = args.get("url").and_then(Value::as_str)
        && let Ok(url) = normalize_url(url)
    {
        fetched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(url);
    }
    Ok(serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned())))
}

fn agent_system(r: &Research, code: bool) -> String {
    let mut s = format!(
        "You are a research sub-agent. Answer the user's question with evidence from the web \
         (country: {geo}). Use web_search to find pages and fetch_page to read them; only \
         pages you fetched may be cited. {TOOL_SEARCH} finds more tools when you need them. \
         You have at most {calls} tool calls. When done, call {SUBMIT_FINDINGS} with your \
         findings, each a claim with the URLs of the fetched pages that support it.",
        geo = r.geo,
        calls = r.max_tool_calls_per_agent,
    );
    if code {
        s.push_str(
            " For many similar calls (compare 20 prices, read 10 pages), write one run_code \
             script that calls the tools and returns only what you need: their raw results \
             stay out of your context.",
        );
    }
    s
}

fn submit_findings_tool() -> Tool {
    let mut t = Tool::new(
        SUBMIT_FINDINGS,
        "Submit what you found: each finding is one claim with the URLs of the fetched pages that support it. Ends your work.",
        json!({
            "type": "object",
            "required": ["findings"],
            "properties": {
                "findings": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["claim", "sources"],
                        "properties": {
                            "claim": {"type": "string", "minLength": 1, "maxLength": 4000},
                            "sources": {"type": "array", "minItems": 1, "items": {"type": "string"}}
                        },
                        "additionalProperties": false
                    }
                }
            },
            "additionalProperties": false
        }),
    );
    t.input_examples = vec![json!({"findings": [{
        "claim": "Shop A sells the X1 Carbon Gen 13 for 1,449 EUR.",
        "sources": ["https://shop-a.example/x1-carbon"]
    }]})];
    t
}

fn run_code_tool() -> Tool {
    let mut t = Tool::new(
        RUN_CODE,
        "Run JavaScript that calls your tools as async functions: `const r = await tools.web_search({query: \"...\"})`, `await tools.fetch_page({url})`. The code is the body of an async function: `return` what you need. Only the return value and console output come back to you, not the tools' raw results. No network, files or environment beyond the tools; limited time, memory and tool calls.",
        json!({
            "type": "object",
            "required": ["code"],
            "properties": {"code": {"type": "string", "minLength": 1, "maxLength": 20000}},
            "additionalProperties": false
        }),
    );
    t.input_examples = vec![
        json!({"code": "const urls = [\"https://a.example/p\", \"https://b.example/p\"];\nconst pages = await Promise.all(urls.map(url => tools.fetch_page({url})));\nreturn pages.map((p, i) => ({url: urls[i], price: (String(p).match(/\\d+[.,]\\d{2}/) || [null])[0]}));"}),
    ];
    t
}
