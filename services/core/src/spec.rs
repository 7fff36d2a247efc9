//! The job spec: YAML or JSON in, a checked [`JobSpec`] out, or every error at once.
//!
//! The document is first read into a generic JSON value, then walked field by field;
//! each problem is recorded with its path (`searches.geos[1]`) and the walk goes on,
//! so a user sees all that is wrong in one try. Field names are the public contract.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::cost::Micros;
use crate::extract::{FieldSpec, FieldType, Source};
use crate::geo::Geo;
use crate::model::{Engine, normalize_query, normalize_url};
use crate::retry::MAX_ATTEMPTS_CEILING;

mod browse;
pub mod schema;
mod yaml;

pub use browse::{
    Action, Browse, DEFAULT_STEP_TIMEOUT, FillValue, RowsExtract, ScrollUntil, Step, WaitFor,
};
pub use yaml::read_yaml;

/// No job plans more slices than this by default (followed pages counted at their
/// maximum); deployments set their own (`TRAWL_MAX_SLICES`).
pub const DEFAULT_MAX_SLICES: u64 = 1_000_000;

/// The shortest retention a job may ask for.
pub const MIN_RETENTION: Duration = Duration::from_secs(3600);

/// What a text field of a spec holds, as a regular expression (ECMA-262, as
/// JSON Schema's `pattern`): something other than white space, and no control
/// character but tab, newline and carriage return.
pub const TEXT_PATTERN: &str =
    r"^[^\x00-\x08\x0B\x0C\x0E-\x1F\x7F]*[^\s\x00-\x1F\x7F][^\x00-\x08\x0B\x0C\x0E-\x1F\x7F]*$";

/// What a one-line field (the name, a model) holds: [`TEXT_PATTERN`] without
/// tab, newline or carriage return.
pub const LINE_PATTERN: &str = r"^[^\x00-\x1F\x7F]*[^\s\x00-\x1F\x7F][^\x00-\x1F\x7F]*$";

/// The members of each mapping of a spec: the checker refuses any other, and
/// the spec's JSON Schema ([`schema`]) lists exactly these.
pub mod fields {
    pub const JOB: &[&str] = &[
        "name",
        "searches",
        "pages",
        "research",
        "browse",
        "extract",
        "schema",
        "cache",
        "retries",
        "budget",
        "retention",
    ];
    pub const CACHE: &[&str] = &["max_age"];
    pub const RETRIES: &[&str] = &["max_attempts"];
    pub const BUDGET: &[&str] = &["max_usd", "approve_above_usd"];
    pub const SEARCHES: &[&str] = &["queries", "geos", "engine", "follow_top"];
    pub const PAGES: &[&str] = &["urls", "geos"];
    pub const RESEARCH: &[&str] = &[
        "question",
        "geo",
        "max_subagents",
        "max_tool_calls_per_agent",
        "model",
        "max_tokens",
        "report",
        "tool_search",
        "code_execution",
    ];
    pub const EXTRACT: &[&str] = &["fields"];
    pub const FIELD: &[&str] = &["jsonld", "css", "regex", "attr", "type"];
    pub const BROWSE: &[&str] = &[
        "urls",
        "geos",
        "steps",
        "step_timeout",
        "model",
        "max_tokens",
    ];
    pub const FILL: &[&str] = &["selector", "value", "secret"];
    pub const SELECT: &[&str] = &["selector", "value"];
    pub const WAIT_FOR: &[&str] = &["selector", "text", "timeout"];
    pub const SCROLL: &[&str] = &["until", "times"];
    pub const ROWS_EXTRACT: &[&str] = &["rows", "fields", "next", "max_pages"];
    pub const SELECTOR: &[&str] = &["selector"];
    pub const SCREENSHOT: &[&str] = &["name"];
    /// What may stand next to a step's action.
    pub const STEP_EXTRA: &[&str] = &["timeout", "schema"];
}

/// A checked job spec.
#[derive(Clone, Debug)]
pub struct JobSpec {
    pub name: String,
    pub searches: Option<Searches>,
    pub pages: Option<Pages>,
    /// A free-text question for model-driven sub-agents.
    pub research: Option<Research>,
    /// Browser sessions run by written-down steps (and model steps).
    pub browse: Option<Browse>,
    pub extract: Option<ExtractSpec>,
    /// JSON Schema (2020-12) every extracted item must satisfy.
    pub schema: Option<Value>,
    /// Cached answers younger than this are used; zero bypasses the cache.
    pub max_age: Duration,
    /// Attempts per tool call, the first included.
    pub max_attempts: u32,
    pub budget: Budget,
    /// How long the job and what it yielded are kept after it ends; `None`: the
    /// deployment's `TRAWL_RETENTION`.
    pub retention: Option<Duration>,
    /// The document as parsed, stored with the job and parsed again by workers.
    pub document: Value,
}

#[derive(Clone, Debug)]
pub struct Searches {
    pub queries: Vec<String>,
    pub geos: Vec<Geo>,
    pub engine: Engine,
    pub follow_top: u32,
}

#[derive(Clone, Debug)]
pub struct Pages {
    /// Normalized absolute URLs.
    pub urls: Vec<String>,
    pub geos: Vec<Geo>,
}

/// A research question: a planner model splits it into sub-questions, a sub-agent
/// answers each with tools and cites the pages it fetched, a last step writes the
/// report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Research {
    pub question: String,
    /// The country searches and fetches run from.
    pub geo: Geo,
    pub max_subagents: u32,
    pub max_tool_calls_per_agent: u32,
    /// The model, `provider:name` or a bare name; `None`: the deployment's default.
    pub model: Option<String>,
    /// Output tokens per model turn.
    pub max_tokens: u32,
    /// Whether a report is written from the findings.
    pub report: bool,
    pub tool_search: ToolSearchMode,
    pub code_execution: CodeExecution,
}

/// How a sub-agent finds tools beyond the few it starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolSearchMode {
    /// trawl's own `tool_search` (BM25 over the catalog); found tools join the next
    /// request (for Anthropic as `tool_reference` blocks).
    Client,
    /// Anthropic's server-side BM25 tool search over the catalog sent deferred.
    Server,
}

/// Where `run_code` scripts run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeExecution {
    /// trawl's embedded sandbox.
    Local,
    /// Anthropic's hosted code execution tool, calling trawl's tools through
    /// `allowed_callers` (Anthropic models only).
    Anthropic,
    /// No programmatic tool calling.
    Off,
}

pub const MAX_SUBAGENTS: u64 = 20;
/// The longest name of a job, in characters.
pub const MAX_NAME_CHARS: usize = 200;
/// The longest search query, in characters.
pub const MAX_QUERY_CHARS: usize = 2048;
/// The most organic results a search follows.
pub const MAX_FOLLOW_TOP: u64 = 100;
/// The longest research question, in characters (white space around it aside).
pub const MAX_QUESTION_CHARS: usize = 4000;
/// The longest model name, in characters.
pub const MAX_MODEL_CHARS: usize = 200;
/// The fewest and most output tokens per model turn a spec may ask for.
pub const MIN_MAX_TOKENS: u64 = 256;
pub const MAX_MAX_TOKENS: u64 = 64_000;
/// Dollar amounts of a budget are below this.
pub const MAX_USD: f64 = 1e9;
pub const MAX_TOOL_CALLS_PER_AGENT: u64 = 100;

#[derive(Clone, Debug)]
pub struct ExtractSpec {
    /// Output field name to how it is found.
    pub fields: BTreeMap<String, FieldSpec>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Budget {
    /// Spend never passes this.
    pub max: Option<Micros>,
    /// A job whose estimate is above this waits for approval.
    pub approve_above: Option<Micros>,
}

/// One problem in a spec.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SpecError {
    /// Dotted path to the field (`extract.fields.price`), empty for the whole job.
    pub path: String,
    pub reason: String,
}

/// Every problem in a spec.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct SpecErrors(pub Vec<SpecError>);

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "the job spec has {} error(s):", self.0.len())?;
        for e in &self.0 {
            let path = if e.path.is_empty() { "(job)" } else { &e.path };
            writeln!(f, "  {path}: {}", e.reason)?;
        }
        Ok(())
    }
}

impl SpecErrors {
    pub fn paths(&self) -> Vec<&str> {
        self.0.iter().map(|e| e.path.as_str()).collect()
    }
}

impl JobSpec {
    /// Parses a YAML or JSON document (JSON is valid YAML).
    pub fn parse(text: &str) -> Result<JobSpec, SpecErrors> {
        let value = read_yaml(strip_bom(text).as_bytes()).map_err(|e| {
            SpecErrors(vec![SpecError {
                path: String::new(),
                reason: format!("not a valid YAML or JSON document: {e}"),
            }])
        })?;
        JobSpec::from_value(value)
    }

    /// Checks an already parsed document.
    pub fn from_value(document: Value) -> Result<JobSpec, SpecErrors> {
        let mut c = Checker::default();
        let spec = c.job(&document);
        match spec {
            Some(mut spec) if c.errors.is_empty() => {
                spec.document = document;
                Ok(spec)
            }
            _ => Err(SpecErrors(c.errors)),
        }
    }

    /// Slices the spec plans before any search has run.
    pub fn planned_slices(&self) -> (u64, u64) {
        let search = self
            .searches
            .as_ref()
            .map_or(0, |s| (s.queries.len() * s.geos.len()) as u64);
        let page = self
            .pages
            .as_ref()
            .map_or(0, |p| (p.urls.len() * p.geos.len()) as u64);
        (search, page)
    }

    /// The most page slices searches can spawn.
    pub fn max_followed(&self) -> u64 {
        let (search, _) = self.planned_slices();
        search * u64::from(self.searches.as_ref().map_or(0, |s| s.follow_top))
    }

    /// Browser sessions: one per (url, geo).
    pub fn browse_slices(&self) -> u64 {
        self.browse
            .as_ref()
            .map_or(0, |b| (b.urls.len() * b.geos.len()) as u64)
    }

    /// The most slices the job can have: planned, and followed pages at their
    /// maximum.
    pub fn slices_at_most(&self) -> u64 {
        let (search, page) = self.planned_slices();
        search + page + self.max_followed() + self.browse_slices()
    }

    /// Refuses a job that can have more than `max` slices.
    pub fn check_size(&self, max: u64) -> Result<(), SpecErrors> {
        let total = self.slices_at_most();
        if total <= max {
            return Ok(());
        }
        let (search, page) = self.planned_slices();
        Err(SpecErrors(vec![SpecError {
            path: String::new(),
            reason: format!(
                "the job plans {total} slices ({search} searches, {page} pages, up to {} followed pages, {} browser sessions); the limit is {max}",
                self.max_followed(),
                self.browse_slices()
            ),
        }]))
    }

    /// Whether the job fetches pages and so needs an extract section.
    pub fn fetches_pages(&self) -> bool {
        self.planned_slices().1 > 0 || self.max_followed() > 0
    }
}

/// Walks a document, collecting errors.
#[derive(Default)]
struct Checker {
    errors: Vec<SpecError>,
}

/// The fields of one object, with the keys that were read.
struct Fields<'a> {
    map: &'a Map<String, Value>,
    path: String,
    known: &'static [&'static str],
}

impl<'a> Fields<'a> {
    /// The value of `key`, `None` when absent or null.
    fn get(&self, key: &str) -> Option<&'a Value> {
        debug_assert!(self.known.contains(&key), "{key} is not declared");
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn path(&self, key: &str) -> String {
        join(&self.path, key)
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

impl Checker {
    fn err(&mut self, path: impl Into<String>, reason: impl Into<String>) {
        self.errors.push(SpecError {
            path: path.into(),
            reason: reason.into(),
        });
    }

    /// Opens an object and reports keys outside `known`.
    fn object<'a>(
        &mut self,
        v: &'a Value,
        path: &str,
        known: &'static [&'static str],
    ) -> Option<Fields<'a>> {
        let Some(map) = v.as_object() else {
            self.err(path, format!("must be a mapping, not {}", kind(v)));
            return None;
        };
        for k in map.keys() {
            if !known.contains(&k.as_str()) {
                self.err(
                    join(path, k),
                    format!("unknown field; expected one of: {}", known.join(", ")),
                );
            }
        }
        Some(Fields {
            map,
            path: path.to_owned(),
            known,
        })
    }

    /// A non-blank string without control characters other than tab, newline
    /// and carriage return: those are refused, never altered.
    fn string(&mut self, v: &Value, path: &str) -> Option<String> {
        match v.as_str() {
            Some(s) if s.chars().any(is_refused_control) => {
                self.err(
                    path,
                    "must not contain control characters (U+0000 to U+001F other than tab, newline and carriage return, or U+007F)",
                );
                None
            }
            Some(s) if !s.trim().is_empty() => Some(s.to_owned()),
            Some(_) => {
                self.err(path, "must not be empty");
                None
            }
            None => {
                self.err(path, format!("must be a string, not {}", kind(v)));
                None
            }
        }
    }

    /// A [`Checker::string`] on one line: no tab, newline or carriage return
    /// either.
    fn line(&mut self, v: &Value, path: &str) -> Option<String> {
        let s = self.string(v, path)?;
        if s.contains(['\t', '\n', '\r']) {
            self.err(path, "must be one line: no tab, newline or carriage return");
            return None;
        }
        Some(s)
    }

    fn list<'a>(&mut self, v: &'a Value, path: &str) -> Option<&'a Vec<Value>> {
        match v.as_array() {
            Some(a) => Some(a),
            None => {
                self.err(path, format!("must be a list, not {}", kind(v)));
                None
            }
        }
    }

    fn uint(&mut self, v: &Value, path: &str, min: u64, max: u64) -> Option<u64> {
        match v.as_u64() {
            Some(n) if (min..=max).contains(&n) => Some(n),
            _ if v.is_number() => {
                self.err(
                    path,
                    format!("must be a whole number from {min} to {max}, not {v}"),
                );
                None
            }
            _ => {
                self.err(path, format!("must be a whole number, not {}", kind(v)));
                None
            }
        }
    }

    fn usd(&mut self, v: &Value, path: &str) -> Option<Micros> {
        match v.as_f64() {
            Some(x) if (0.0..MAX_USD).contains(&x) => Some(Micros::from_usd(x)),
            Some(x) => {
                self.err(path, format!("must be a dollar amount from 0 up, not {x}"));
                None
            }
            None => {
                self.err(
                    path,
                    format!("must be a number of US dollars, not {}", kind(v)),
                );
                None
            }
        }
    }

    fn duration(&mut self, v: &Value, path: &str) -> Option<Duration> {
        if let Some(n) = v.as_u64() {
            return Some(Duration::from_secs(n));
        }
        let bad = |s: &str| {
            format!(
                "\"{s}\" is not a duration: expected a number of seconds or e.g. 0, 90s, 30m, 24h, 7d"
            )
        };
        match v.as_str() {
            Some(s) => match humantime::parse_duration(s.trim()) {
                Ok(d) => Some(d),
                Err(_) => {
                    self.err(path, bad(s));
                    None
                }
            },
            None => {
                self.err(path, bad(&v.to_string()));
                None
            }
        }
    }

    fn geos(&mut self, v: Option<&Value>, path: &str) -> Vec<Geo> {
        let Some(v) = v else {
            self.err(path, "required: the countries to run from, e.g. [us, de]");
            return Vec::new();
        };
        let Some(items) = self.list(v, path) else {
            return Vec::new();
        };
        if items.is_empty() {
            self.err(path, "must list at least one country");
        }
        let mut out = Vec::new();
        for (i, g) in items.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let Some(s) = g.as_str() else {
                self.err(p, format!("must be a country code, not {}", kind(g)));
                continue;
            };
            match Geo::parse(s) {
                Ok(geo) if !out.contains(&geo) => out.push(geo),
                Ok(_) => {}
                Err(e) => self.err(p, e),
            }
        }
        out
    }

    fn job(&mut self, v: &Value) -> Option<JobSpec> {
        let f = self.object(v, "", fields::JOB)?;
        let name = match f.get("name") {
            Some(v) => self.line(v, "name").unwrap_or_default(),
            None => {
                self.err("name", "required");
                String::new()
            }
        };
        if name.chars().count() > MAX_NAME_CHARS {
            self.err(
                "name",
                format!("must be at most {MAX_NAME_CHARS} characters"),
            );
        }
        let searches = f.get("searches").and_then(|v| self.searches(v));
        let pages = f.get("pages").and_then(|v| self.pages(v));
        let research = f.get("research").and_then(|v| self.research(v));
        let browse = f.get("browse").and_then(|v| self.browse(v));
        let extract = f.get("extract").and_then(|v| self.extract(v));
        let schema = f.get("schema").and_then(|v| self.schema(v));
        let max_age = f
            .get("cache")
            .map_or(Some(Duration::from_secs(24 * 3600)), |v| {
                let c = self.object(v, "cache", fields::CACHE)?;
                match c.get("max_age") {
                    Some(m) => self.duration(m, "cache.max_age"),
                    None => Some(Duration::from_secs(24 * 3600)),
                }
            });
        let max_attempts = f.get("retries").map_or(Some(3), |v| {
            let r = self.object(v, "retries", fields::RETRIES)?;
            match r.get("max_attempts") {
                Some(m) => self
                    .uint(
                        m,
                        "retries.max_attempts",
                        1,
                        u64::from(MAX_ATTEMPTS_CEILING),
                    )
                    .map(|n| n as u32),
                None => Some(3),
            }
        });
        let budget = f.get("budget").map_or(Some(Budget::default()), |v| {
            let b = self.object(v, "budget", fields::BUDGET)?;
            let max = b.get("max_usd").and_then(|m| self.usd(m, "budget.max_usd"));
            let approve_above = b
                .get("approve_above_usd")
                .and_then(|m| self.usd(m, "budget.approve_above_usd"));
            Some(Budget { max, approve_above })
        });
        let retention = match f.get("retention") {
            None => None,
            Some(v) => match self.duration(v, "retention") {
                Some(d) if d < MIN_RETENTION => {
                    self.err("retention", "must be at least 1h");
                    None
                }
                d => d,
            },
        };

        let spec = JobSpec {
            name,
            searches,
            pages,
            research,
            browse,
            extract,
            schema,
            max_age: max_age.unwrap_or_default(),
            max_attempts: max_attempts.unwrap_or(3),
            budget: budget.unwrap_or_default(),
            retention,
            document: Value::Null,
        };
        self.whole_job(&spec, &f);
        Some(spec)
    }

    /// Rules that look at more than one field.
    fn whole_job(&mut self, spec: &JobSpec, f: &Fields<'_>) {
        let (search, page) = spec.planned_slices();
        let sections_ok = !self.errors.iter().any(|e| {
            e.path.starts_with("searches")
                || e.path.starts_with("pages")
                || e.path.starts_with("research")
                || e.path.starts_with("browse")
        });
        if sections_ok && search + page == 0 && spec.research.is_none() && spec.browse.is_none() {
            self.err(
                "",
                "the job has no slices: give searches (queries and geos), pages (urls and geos), research (a question) or browse (urls, geos and steps)",
            );
        }
        if spec.fetches_pages() && spec.extract.is_none() && f.get("extract").is_none() {
            self.err("extract", "required when the job fetches pages");
        }
    }

    fn searches(&mut self, v: &Value) -> Option<Searches> {
        let f = self.object(v, "searches", fields::SEARCHES)?;
        let mut queries: Vec<String> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        match f.get("queries") {
            None => self.err(f.path("queries"), "required"),
            Some(q) => {
                if let Some(list) = self.list(q, "searches.queries") {
                    if list.is_empty() {
                        self.err("searches.queries", "must list at least one query");
                    }
                    for (i, q) in list.iter().enumerate() {
                        let p = format!("searches.queries[{i}]");
                        if let Some(s) = self.string(q, &p) {
                            if s.chars().count() > MAX_QUERY_CHARS {
                                self.err(
                                    p,
                                    format!("must be at most {MAX_QUERY_CHARS} characters"),
                                );
                            } else if seen.insert(normalize_query(&s)) {
                                queries.push(s.trim().to_owned());
                            }
                        }
                    }
                }
            }
        }
        let geos = self.geos(f.get("geos"), "searches.geos");
        let engine = match f.get("engine") {
            None => Engine::Google,
            Some(e) => match e.as_str().map(Engine::parse) {
                Some(Ok(e)) => e,
                Some(Err(msg)) => {
                    self.err("searches.engine", msg);
                    Engine::Google
                }
                None => {
                    self.err(
                        "searches.engine",
                        format!("must be google or bing, not {}", kind(e)),
                    );
                    Engine::Google
                }
            },
        };
        let follow_top = f
            .get("follow_top")
            .map_or(Some(0), |n| {
                self.uint(n, "searches.follow_top", 0, MAX_FOLLOW_TOP)
            })
            .unwrap_or(0) as u32;
        Some(Searches {
            queries,
            geos,
            engine,
            follow_top,
        })
    }

    fn research(&mut self, v: &Value) -> Option<Research> {
        let f = self.object(v, "research", fields::RESEARCH)?;
        let question = match f.get("question") {
            None => {
                self.err("research.question", "required: the question to research");
                String::new()
            }
            Some(q) => {
                let q = self
                    .string(q, "research.question")
                    .unwrap_or_default()
                    .trim()
                    .to_owned();
                if q.chars().count() > MAX_QUESTION_CHARS {
                    self.err(
                        "research.question",
                        format!("must be at most {MAX_QUESTION_CHARS} characters"),
                    );
                }
                q
            }
        };
        let geo = match f.get("geo") {
            None => Geo::parse("us").ok(),
            Some(g) => match g.as_str().map(Geo::parse) {
                Some(Ok(g)) => Some(g),
                Some(Err(e)) => {
                    self.err("research.geo", e);
                    None
                }
                None => {
                    self.err(
                        "research.geo",
                        format!("must be a country code, not {}", kind(g)),
                    );
                    None
                }
            },
        };
        let max_subagents = f.get("max_subagents").map_or(Some(5), |n| {
            self.uint(n, "research.max_subagents", 1, MAX_SUBAGENTS)
        });
        let max_calls = f.get("max_tool_calls_per_agent").map_or(Some(15), |n| {
            self.uint(
                n,
                "research.max_tool_calls_per_agent",
                1,
                MAX_TOOL_CALLS_PER_AGENT,
            )
        });
        let model = f.get("model").and_then(|m| {
            let m = self.line(m, "research.model")?;
            if m.trim().is_empty() || m.chars().count() > MAX_MODEL_CHARS {
                self.err(
                    "research.model",
                    format!("must be a model name of 1 to {MAX_MODEL_CHARS} characters"),
                );
                return None;
            }
            Some(m.trim().to_owned())
        });
        let max_tokens = f.get("max_tokens").map_or(Some(4096), |n| {
            self.uint(n, "research.max_tokens", MIN_MAX_TOKENS, MAX_MAX_TOKENS)
        });
        let report = match f.get("report") {
            None => true,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                self.err(
                    "research.report",
                    format!("must be true or false, not {}", kind(other)),
                );
                true
            }
        };
        let tool_search = match f.get("tool_search").map(|v| (v, v.as_str())) {
            None | Some((_, Some("client"))) => ToolSearchMode::Client,
            Some((_, Some("server"))) => ToolSearchMode::Server,
            Some((v, _)) => {
                self.err(
                    "research.tool_search",
                    format!("must be client or server, not {v}"),
                );
                ToolSearchMode::Client
            }
        };
        let code_execution = match f.get("code_execution").map(|v| (v, v.as_str())) {
            None | Some((_, Some("local"))) => CodeExecution::Local,
            Some((_, Some("anthropic"))) => CodeExecution::Anthropic,
            Some((_, Some("off"))) => CodeExecution::Off,
            Some((v, _)) => {
                self.err(
                    "research.code_execution",
                    format!("must be local, anthropic or off, not {v}"),
                );
                CodeExecution::Local
            }
        };
        Some(Research {
            question,
            geo: geo?,
            max_subagents: max_subagents? as u32,
            max_tool_calls_per_agent: max_calls? as u32,
            model,
            max_tokens: max_tokens? as u32,
            report,
            tool_search,
            code_execution,
        })
    }

    fn pages(&mut self, v: &Value) -> Option<Pages> {
        let f = self.object(v, "pages", fields::PAGES)?;
        let mut urls: Vec<String> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        match f.get("urls") {
            None => self.err("pages.urls", "required"),
            Some(u) => {
                if let Some(list) = self.list(u, "pages.urls") {
                    if list.is_empty() {
                        self.err("pages.urls", "must list at least one URL");
                    }
                    for (i, u) in list.iter().enumerate() {
                        let p = format!("pages.urls[{i}]");
                        if let Some(s) = self.line(u, &p) {
                            match normalize_url(&s) {
                                Ok(n) => {
                                    if seen.insert(n.clone()) {
                                        urls.push(n);
                                    }
                                }
                                Err(e) => self.err(p, e),
                            }
                        }
                    }
                }
            }
        }
        let geos = self.geos(f.get("geos"), "pages.geos");
        Some(Pages { urls, geos })
    }

    fn extract(&mut self, v: &Value) -> Option<ExtractSpec> {
        let f = self.object(v, "extract", fields::EXTRACT)?;
        self.extract_fields(f.get("fields"), "extract.fields")
    }

    /// An `extract`'s `fields` mapping, found at `path`.
    fn extract_fields(&mut self, fields_v: Option<&Value>, path: &str) -> Option<ExtractSpec> {
        let Some(fields_v) = fields_v else {
            self.err(path, "required: the fields each item has");
            return None;
        };
        let Some(map) = fields_v.as_object() else {
            self.err(path, format!("must be a mapping, not {}", kind(fields_v)));
            return None;
        };
        if map.is_empty() {
            self.err(path, "must name at least one field");
        }
        let mut fields = BTreeMap::new();
        for (name, spec) in map {
            let path = format!("{path}.{name}");
            let name_ok = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !name_ok {
                self.err(&path, "a field name uses only letters, digits, _ and -");
            }
            if let Some(fs) = self.field(spec, &path) {
                fields.insert(name.clone(), fs);
            }
        }
        Some(ExtractSpec { fields })
    }

    fn field(&mut self, v: &Value, path: &str) -> Option<FieldSpec> {
        let f = self.object(v, path, fields::FIELD)?;
        let sources: Vec<&str> = ["jsonld", "css", "regex"]
            .into_iter()
            .filter(|k| f.get(k).is_some())
            .collect();
        let ty = match f.get("type") {
            None => Some(FieldType::String),
            Some(t) => match t.as_str().and_then(FieldType::parse) {
                Some(t) => Some(t),
                None => {
                    self.err(
                        f.path("type"),
                        format!("{t} is not a type: expected string, number, integer or boolean"),
                    );
                    None
                }
            },
        };
        let attr = f.get("attr").and_then(|a| self.line(a, &f.path("attr")));
        if f.get("attr").is_some() && !sources.contains(&"css") {
            self.err(f.path("attr"), "attr only goes with a css source");
        }
        let source = match sources.as_slice() {
            [] => {
                self.err(
                    path,
                    "the field has no source: give one of jsonld, css or regex",
                );
                None
            }
            [one] => {
                let p = f.path(one);
                let raw = f.get(one).and_then(|v| self.string(v, &p));
                raw.and_then(|raw| match Source::compile(one, &raw, attr.as_deref()) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        self.err(p, e);
                        None
                    }
                })
            }
            many => {
                self.err(
                    path,
                    format!(
                        "the field has {} sources ({}); give exactly one",
                        many.len(),
                        many.join(", ")
                    ),
                );
                None
            }
        };
        Some(FieldSpec {
            source: source?,
            ty: ty?,
        })
    }

    fn schema(&mut self, v: &Value) -> Option<Value> {
        if !v.is_object() && !v.is_boolean() {
            self.err(
                "schema",
                format!("must be a JSON Schema object, not {}", kind(v)),
            );
            return None;
        }
        match crate::validate::ItemValidator::new(v) {
            Ok(_) => Some(v.clone()),
            Err(e) => {
                self.err("schema", e);
                None
            }
        }
    }
}

/// The control characters no string field of a spec may hold: C0 but tab,
/// newline and carriage return, and DEL. [`TEXT_PATTERN`] says the same.
fn is_refused_control(c: char) -> bool {
    (c.is_ascii_control() && !matches!(c, '\t' | '\n' | '\r')) || c == '\u{7f}'
}

/// The byte-order mark a UTF-8 document may start with.
const BOM: char = '\u{feff}';

/// `text` without the UTF-8 byte-order mark it may start with (editors on some
/// systems write one); a spec is read from what follows it.
pub fn strip_bom(text: &str) -> &str {
    text.strip_prefix(BOM).unwrap_or(text)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
name: laptop-prices
searches:
  queries: ["14 inch laptop", "ultrabook"]
  geos: [us, de, jp]
  engine: google
  follow_top: 3
pages:
  urls: ["https://shop.example/p/1"]
  geos: [us]
extract:
  fields:
    name:     {jsonld: "name"}
    price:    {jsonld: "offers.price", type: number}
    currency: {jsonld: "offers.priceCurrency"}
    title:    {css: "h1"}
    sku:      {regex: "SKU: ([A-Z0-9-]+)"}
schema:
  type: object
  required: [name, price, currency]
  properties:
    price: {type: number, exclusiveMinimum: 0}
    currency: {type: string, pattern: "^[A-Z]{3}$"}
cache: {max_age: 24h}
retries: {max_attempts: 3}
budget: {max_usd: 5.00, approve_above_usd: 1.00}
"#;

    #[test]
    fn the_issue_example_parses() {
        let s = JobSpec::parse(EXAMPLE).unwrap();
        assert_eq!(s.name, "laptop-prices");
        assert_eq!(s.planned_slices(), (6, 1));
        assert_eq!(s.max_followed(), 18);
        assert_eq!(s.max_age, Duration::from_secs(86_400));
        assert_eq!(s.max_attempts, 3);
        assert_eq!(s.budget.max, Some(Micros(5_000_000)));
        assert_eq!(s.budget.approve_above, Some(Micros(1_000_000)));
        assert_eq!(s.extract.unwrap().fields.len(), 5);
    }

    #[test]
    fn json_is_accepted_too() {
        let json = r#"{"name":"j","pages":{"urls":["https://a.example/x"],"geos":["us"]},
            "extract":{"fields":{"t":{"css":"title"}}},"cache":{"max_age":0}}"#;
        let s = JobSpec::parse(json).unwrap();
        assert_eq!(s.max_age, Duration::ZERO);
    }

    /// Each bad spec with the exact set of paths it must report.
    #[test]
    fn bad_specs_list_every_error_with_its_path() {
        let base_extract = "extract: {fields: {t: {css: h1}}}\n";
        let cases: Vec<(&str, String, Vec<&str>)> = vec![
            (
                "unknown fields at three depths",
                "name: x\ncolour: red\npages: {urls: [\"https://a.example/\"], geos: [us], depth: 2}\nextract: {fields: {t: {css: h1, xpath: //h1}}}\n".to_owned(),
                vec!["colour", "pages.depth", "extract.fields.t.xpath"],
            ),
            (
                "bad geos",
                format!("name: x\npages: {{urls: [\"https://a.example/\"], geos: [US, xx, 7]}}\n{base_extract}"),
                vec!["pages.geos[0]", "pages.geos[1]", "pages.geos[2]"],
            ),
            (
                "bad durations",
                format!("name: x\npages: {{urls: [\"https://a.example/\"], geos: [us]}}\ncache: {{max_age: tomorrow}}\n{base_extract}"),
                vec!["cache.max_age"],
            ),
            (
                "invalid JSON Schema",
                format!("name: x\npages: {{urls: [\"https://a.example/\"], geos: [us]}}\n{base_extract}schema: {{type: objekt}}\n"),
                vec!["schema"],
            ),
            (
                "extract field with no source, and one with two",
                "name: x\npages: {urls: [\"https://a.example/\"], geos: [us]}\nextract: {fields: {a: {type: number}, b: {css: h1, regex: \"(x)\"}}}\n".to_owned(),
                vec!["extract.fields.a", "extract.fields.b"],
            ),
            (
                "no slices",
                "name: x\n".to_owned(),
                vec![""],
            ),
            (
                "many at once: missing name, bad engine, bad url, bad regex, bad selector, retries over the ceiling, negative budget",
                "searches: {queries: [laptops], geos: [us], engine: yahoo, follow_top: 2}\npages: {urls: [\"ftp://a/b\"], geos: [us]}\nextract: {fields: {a: {regex: \"([\"}, b: {css: \"h1[\"}}}\nretries: {max_attempts: 11}\nbudget: {max_usd: -1}\n".to_owned(),
                vec!["name", "searches.engine", "pages.urls[0]", "extract.fields.a.regex", "extract.fields.b.css", "retries.max_attempts", "budget.max_usd"],
            ),
            (
                "pages without extract",
                "name: x\npages: {urls: [\"https://a.example/\"], geos: [us]}\n".to_owned(),
                vec!["extract"],
            ),
            (
                "not a mapping",
                "- just\n- a list\n".to_owned(),
                vec![""],
            ),
            (
                "broken YAML",
                "name: [unclosed\n".to_owned(),
                vec![""],
            ),
        ];
        for (what, text, want) in cases {
            let errs = JobSpec::parse(&text).expect_err(what);
            let mut got = errs.paths();
            got.sort_unstable();
            let mut want = want.clone();
            want.sort_unstable();
            assert_eq!(got, want, "{what}: {errs}");
            assert!(errs.0.iter().all(|e| !e.reason.is_empty()), "{what}");
        }
    }

    #[test]
    fn a_job_may_keep_itself_longer_or_shorter_but_at_least_an_hour() {
        let with = |r: &str| {
            JobSpec::parse(&format!(
                "name: x\npages: {{urls: [\"https://a.example/\"], geos: [us]}}\nextract: {{fields: {{t: {{css: h1}}}}}}\nretention: {r}\n"
            ))
        };
        assert_eq!(
            with("7d").unwrap().retention,
            Some(Duration::from_secs(7 * 24 * 3600))
        );
        assert_eq!(with("1h").unwrap().retention, Some(MIN_RETENTION));
        assert_eq!(with("10m").unwrap_err().paths(), vec!["retention"]);
        assert_eq!(with("soon").unwrap_err().paths(), vec!["retention"]);
        let none = JobSpec::parse(
            "name: x\npages: {urls: [\"https://a.example/\"], geos: [us]}\nextract: {fields: {t: {css: h1}}}\n",
        )
        .unwrap();
        assert_eq!(none.retention, None);
    }

    #[test]
    fn the_slice_limit_counts_followed_pages_at_their_most() {
        let spec = JobSpec::parse(
            "name: x\nsearches: {queries: [a, b], geos: [us], follow_top: 3}\npages: {urls: [\"https://a.example/1\", \"https://a.example/2\"], geos: [us, de]}\nextract: {fields: {t: {css: h1}}}\n",
        )
        .unwrap();
        // 2 searches, 4 pages, up to 6 followed pages.
        assert_eq!(spec.slices_at_most(), 12);
        assert!(spec.check_size(12).is_ok());
        let errs = spec.check_size(11).unwrap_err();
        assert_eq!(errs.paths(), vec![""]);
        assert_eq!(
            errs.0[0].reason,
            "the job plans 12 slices (2 searches, 4 pages, up to 6 followed pages, 0 browser sessions); the limit is 11"
        );
        assert_eq!(DEFAULT_MAX_SLICES, 1_000_000);
    }

    #[test]
    fn error_messages_say_what_to_do() {
        let errs = JobSpec::parse("name: x\npages: {urls: [\"https://a.example/\"], geos: [US]}\nextract: {fields: {t: {css: h1}}}\n").unwrap_err();
        assert!(
            errs.to_string()
                .contains("pages.geos[0]: \"US\" must be lower case ISO 3166-1 alpha-2 (\"us\")"),
            "{errs}"
        );
    }

    #[test]
    fn a_byte_order_mark_is_skipped() {
        let yaml = "\u{feff}name: x\npages: {urls: [\"https://a.example/\"], geos: [us]}\nextract: {fields: {t: {css: h1}}}\n";
        assert_eq!(JobSpec::parse(yaml).unwrap().name, "x");
        let json = "\u{feff}{\"name\": \"j\", \"research\": {\"question\": \"q?\"}}";
        assert_eq!(JobSpec::parse(json).unwrap().name, "j");
        // Only one, and only at the start.
        assert!(JobSpec::parse(&format!("\u{feff}{yaml}")).is_err());
    }

    #[test]
    fn control_characters_are_refused_not_altered() {
        let with_name = |name: &str| {
            JobSpec::from_value(serde_json::json!({
                "name": name, "research": {"question": "what?"}}))
        };
        for bad in [
            "a\u{0}b",
            "a\u{1b}[31m",
            "tab\there",
            "two\nlines",
            "del\u{7f}",
        ] {
            let e = with_name(bad).unwrap_err();
            assert_eq!(e.paths(), vec!["name"], "{bad:?}: {e}");
        }
        assert_eq!(
            with_name("caf\u{e9} \u{2014} ok").unwrap().name,
            "caf\u{e9} \u{2014} ok"
        );
        // A multi-line field keeps its newlines and tabs, but not a NUL.
        let q = |question: &str| {
            JobSpec::from_value(
                serde_json::json!({"name": "r", "research": {"question": question}}),
            )
        };
        assert_eq!(
            q("line one\n\tline two")
                .unwrap()
                .research
                .unwrap()
                .question,
            "line one\n\tline two"
        );
        assert_eq!(q("a\u{0}").unwrap_err().paths(), vec!["research.question"]);
        let e = JobSpec::from_value(serde_json::json!({"name": "x",
            "searches": {"queries": ["ok", "nul\u{0}"], "geos": ["us"]}}))
        .unwrap_err();
        assert_eq!(e.paths(), vec!["searches.queries[1]"], "{e}");
    }

    #[test]
    fn the_text_patterns_say_what_the_checker_does() {
        let text = regex::Regex::new(TEXT_PATTERN).unwrap();
        let line = regex::Regex::new(LINE_PATTERN).unwrap();
        for (s, in_text, in_line) in [
            ("x", true, true),
            ("  x  ", true, true),
            ("", false, false),
            ("   ", false, false),
            ("\t", false, false),
            ("a\nb", true, false),
            ("a\tb\r", true, false),
            ("a\u{0}", false, false),
            ("a\u{1f}", false, false),
            ("a\u{7f}", false, false),
            ("\u{a0}", false, false),
            ("\u{e9}", true, true),
        ] {
            assert_eq!(text.is_match(s), in_text, "{s:?}");
            assert_eq!(line.is_match(s), in_line, "{s:?}");
            let checked =
                JobSpec::from_value(serde_json::json!({"name": "n", "research": {"question": s}}));
            assert_eq!(checked.is_ok(), in_text, "{s:?}");
            let named =
                JobSpec::from_value(serde_json::json!({"name": s, "research": {"question": "q"}}));
            assert_eq!(named.is_ok(), in_line, "{s:?}");
        }
    }

    #[test]
    fn duplicates_collapse() {
        let s = JobSpec::parse("name: x\npages: {urls: [\"https://A.example/p\", \"https://a.example/p#frag\"], geos: [us, us]}\nextract: {fields: {t: {css: h1}}}\n").unwrap();
        assert_eq!(s.planned_slices(), (0, 1));
    }

    #[test]
    fn research_has_defaults_and_checked_bounds() {
        let spec = JobSpec::parse("name: r\nresearch: {question: \"  what?  \"}\n").unwrap();
        let r = spec.research.unwrap();
        assert_eq!(r.question, "what?");
        assert_eq!(r.geo.as_str(), "us");
        assert_eq!((r.max_subagents, r.max_tool_calls_per_agent), (5, 15));
        assert_eq!((r.max_tokens, r.report, r.model), (4096, true, None));
        assert_eq!(r.tool_search, ToolSearchMode::Client);
        assert_eq!(r.code_execution, CodeExecution::Local);
        assert!(
            spec.extract.is_none(),
            "a research job needs no extract section"
        );

        let err = JobSpec::parse(
            "name: r\nresearch: {question: \"\", geo: xx, max_subagents: 0, max_tool_calls_per_agent: 1000, report: maybe, tool_search: magic, code_execution: remote, model: \"\", colour: red}\n",
        )
        .unwrap_err();
        let mut paths = err.paths();
        paths.sort_unstable();
        assert_eq!(
            paths,
            [
                "research.code_execution",
                "research.colour",
                "research.geo",
                "research.max_subagents",
                "research.max_tool_calls_per_agent",
                "research.model",
                "research.question",
                "research.report",
                "research.tool_search",
            ],
            "{err}"
        );
    }
}
