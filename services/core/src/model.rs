//! Ids, slices, statuses and the records a slice produces.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cost::Micros;
use crate::geo::Geo;

/// 64 bits from the operating system's random source (`getrandom`), for ids a
/// caller must not be able to guess from ids it has seen: jobs, approvals. A
/// process-local generator (`fastrand`) is predictable from its outputs.
pub fn unguessable_u64() -> Result<u64, UnguessableUnavailable> {
    getrandom::u64().map_err(|e| UnguessableUnavailable(e.to_string()))
}

/// The operating system's random source did not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the operating system's random source failed: {0}")]
pub struct UnguessableUnavailable(pub String);

/// The smallest approval id: every id has at least 33 bits, so none reads as
/// a small count.
pub const APPROVAL_ID_MIN: i64 = 1 << 32;

/// An approval's id from 64 random bits: 52 of them above [`APPROVAL_ID_MIN`],
/// so ids are below 2^53 (exact as JSON numbers in every client) and one
/// caller's cannot be guessed from another's.
pub fn approval_id(random: u64) -> i64 {
    APPROVAL_ID_MIN + (random & ((1 << 52) - 1)) as i64
}

/// A job run. Random: submitting the same spec twice makes two jobs.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(String);

impl JobId {
    /// A new id: milliseconds since the epoch and 64 random bits, so ids sort by age.
    pub fn generate(now_ms: i64, random: u64) -> JobId {
        JobId(format!("job_{now_ms:012x}{random:016x}"))
    }

    /// The ids of jobs created at `ms` or later sort at or after this string, and
    /// those created before it sort before: a bound of a range of jobs by age.
    pub fn bound(ms: i64) -> String {
        format!("job_{ms:012x}")
    }

    pub fn parse(s: &str) -> Result<JobId, String> {
        let ok = s.len() == 32
            && s.starts_with("job_")
            && s[4..]
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
        if ok {
            Ok(JobId(s.to_owned()))
        } else {
            Err(format!(
                "\"{s}\" is not a job id (job_ followed by 28 hex digits)"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A slice, named by its content: the same work always has the same id.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SliceId(String);

impl SliceId {
    /// `s_` and the first 20 hex digits of the sha256 of the slice's content.
    pub fn of(kind: &SliceKind) -> SliceId {
        let d = match kind {
            SliceKind::Search {
                query,
                geo,
                engine,
                follow_top,
            } => crate::digest(&[
                "search",
                engine.as_str(),
                &normalize_query(query),
                geo.as_str(),
                &follow_top.to_string(),
            ]),
            SliceKind::Page { url, geo } => crate::digest(&["page", url, geo.as_str()]),
            SliceKind::Research { question, geo } => {
                crate::digest(&["research", question, geo.as_str()])
            }
            SliceKind::Agent {
                question,
                index,
                geo,
            } => crate::digest(&["agent", question, &index.to_string(), geo.as_str()]),
            SliceKind::Report { question, geo } => {
                crate::digest(&["report", question, geo.as_str()])
            }
            SliceKind::Browse { url, geo } => crate::digest(&["browse", url, geo.as_str()]),
        };
        SliceId(format!("s_{}", &d[..20]))
    }

    /// Wraps an id read back from a store or a message.
    pub fn from_stored(s: String) -> SliceId {
        SliceId(s)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SliceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SliceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Search engines the SERP tool speaks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Google,
    Bing,
}

impl Engine {
    pub fn parse(s: &str) -> Result<Engine, String> {
        match s {
            "google" => Ok(Engine::Google),
            "bing" => Ok(Engine::Bing),
            other => Err(format!(
                "\"{other}\" is not an engine: expected google or bing"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Google => "google",
            Engine::Bing => "bing",
        }
    }
}

/// What a slice does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum SliceKind {
    /// One search for one query in one country; spawns page slices for its top results.
    Search {
        query: String,
        geo: Geo,
        engine: Engine,
        follow_top: u32,
    },
    /// One page fetched from one country and turned into one item.
    Page { url: String, geo: Geo },
    /// A research question a planner model splits into sub-questions; spawns one
    /// agent slice per sub-question.
    Research { question: String, geo: Geo },
    /// A sub-agent answering one sub-question with tools; yields `finding` items
    /// citing the pages it fetched.
    Agent {
        question: String,
        /// Position in the plan, so equal sub-questions stay two slices.
        index: u32,
        geo: Geo,
    },
    /// The report on a research question, written from its findings once every
    /// sub-agent is done; yields one `report` item.
    Report { question: String, geo: Geo },
    /// One browser session on one start URL from one country, running the job's
    /// browse steps; yields the rows its extract steps find. Only isolated workers
    /// take it.
    Browse { url: String, geo: Geo },
}

/// Which workers take a slice: browser sessions run only in the isolated pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pool {
    #[default]
    Standard,
    Isolated,
}

impl Pool {
    pub fn as_str(self) -> &'static str {
        match self {
            Pool::Standard => "standard",
            Pool::Isolated => "isolated",
        }
    }

    pub fn parse(s: &str) -> Result<Pool, String> {
        match s.trim() {
            "standard" | "" => Ok(Pool::Standard),
            "isolated" => Ok(Pool::Isolated),
            other => Err(format!(
                "\"{other}\" is not a worker pool: expected standard or isolated"
            )),
        }
    }
}

impl SliceKind {
    pub fn name(&self) -> &'static str {
        match self {
            SliceKind::Search { .. } => "search",
            SliceKind::Page { .. } => "page",
            SliceKind::Research { .. } => "research",
            SliceKind::Agent { .. } => "agent",
            SliceKind::Report { .. } => "report",
            SliceKind::Browse { .. } => "browse",
        }
    }

    /// The workers that take this slice.
    pub fn pool(&self) -> Pool {
        match self {
            SliceKind::Browse { .. } => Pool::Isolated,
            _ => Pool::Standard,
        }
    }

    pub fn geo(&self) -> Geo {
        match self {
            SliceKind::Search { geo, .. }
            | SliceKind::Page { geo, .. }
            | SliceKind::Research { geo, .. }
            | SliceKind::Agent { geo, .. }
            | SliceKind::Report { geo, .. }
            | SliceKind::Browse { geo, .. } => *geo,
        }
    }

    /// Whether a model runs the slice (research, agent, report), rather than a
    /// written-down plan.
    pub fn is_model_driven(&self) -> bool {
        matches!(
            self,
            SliceKind::Research { .. } | SliceKind::Agent { .. } | SliceKind::Report { .. }
        )
    }

    /// What the slice is about, for lists of slices: the query, URL or question.
    pub fn subject(&self) -> &str {
        match self {
            SliceKind::Search { query, .. } => query,
            SliceKind::Page { url, .. } | SliceKind::Browse { url, .. } => url,
            SliceKind::Research { question, .. }
            | SliceKind::Agent { question, .. }
            | SliceKind::Report { question, .. } => question,
        }
    }
}

/// A unit of work on the queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceSpec {
    pub id: SliceId,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub parent: Option<SliceId>,
    #[serde(flatten)]
    pub kind: SliceKind,
}

impl SliceSpec {
    pub fn new(kind: SliceKind, parent: Option<SliceId>) -> SliceSpec {
        SliceSpec {
            id: SliceId::of(&kind),
            parent,
            kind,
        }
    }
}

/// Collapses whitespace and lower-cases a search query, so that queries a search
/// engine treats alike share a slice id and a cache entry.
pub fn normalize_query(q: &str) -> String {
    q.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// Normalizes an absolute http(s) URL: lower-case scheme and host, no default port,
/// no fragment, resolved dot segments.
pub fn normalize_url(raw: &str) -> Result<String, String> {
    let mut u = url::Url::parse(raw.trim()).map_err(|e| format!("\"{raw}\" is not a URL: {e}"))?;
    if u.scheme() != "http" && u.scheme() != "https" {
        return Err(format!("\"{raw}\" is not an http or https URL"));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err(format!("\"{raw}\" has no host"));
    }
    u.set_fragment(None);
    if u.query() == Some("") {
        u.set_query(None);
    }
    Ok(u.into())
}

/// Where a slice is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SliceStatus {
    Pending,
    Succeeded,
    Failed,
}

impl SliceStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SliceStatus::Pending => "pending",
            SliceStatus::Succeeded => "succeeded",
            SliceStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<SliceStatus> {
        Some(match s {
            "pending" => SliceStatus::Pending,
            "succeeded" => SliceStatus::Succeeded,
            "failed" => SliceStatus::Failed,
            _ => return None,
        })
    }
}

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Stored, not yet planned: the scheduler plans it next.
    Pending,
    AwaitingApproval,
    Queued,
    Running,
    Succeeded,
    Partial,
    Failed,
    Cancelled,
}

impl JobStatus {
    /// Every status, in the order of the lifecycle.
    pub const ALL: [JobStatus; 8] = [
        JobStatus::Pending,
        JobStatus::AwaitingApproval,
        JobStatus::Queued,
        JobStatus::Running,
        JobStatus::Succeeded,
        JobStatus::Partial,
        JobStatus::Failed,
        JobStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "pending",
            JobStatus::AwaitingApproval => "awaiting_approval",
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Partial => "partial",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<JobStatus> {
        Some(match s {
            "pending" => JobStatus::Pending,
            "awaiting_approval" => JobStatus::AwaitingApproval,
            "queued" => JobStatus::Queued,
            "running" => JobStatus::Running,
            "succeeded" => JobStatus::Succeeded,
            "partial" => JobStatus::Partial,
            "failed" => JobStatus::Failed,
            "cancelled" => JobStatus::Cancelled,
            _ => return None,
        })
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Succeeded | JobStatus::Partial | JobStatus::Failed | JobStatus::Cancelled
        )
    }

    /// The status a job ends with once every slice is terminal.
    pub fn from_slices(succeeded: u64, failed: u64) -> JobStatus {
        match (succeeded, failed) {
            (_, 0) => JobStatus::Succeeded,
            (0, _) => JobStatus::Failed,
            _ => JobStatus::Partial,
        }
    }
}

/// What an item came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ItemKind {
    /// Extracted from a fetched page.
    Page,
    /// One organic result of a search.
    Serp,
    /// One claim a research sub-agent found, with the fetched pages it cites.
    Finding,
    /// The Markdown report on a research question.
    Report,
}

impl ItemKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ItemKind::Page => "page",
            ItemKind::Serp => "serp",
            ItemKind::Finding => "finding",
            ItemKind::Report => "report",
        }
    }

    pub fn parse(s: &str) -> Option<ItemKind> {
        match s {
            "page" => Some(ItemKind::Page),
            "serp" => Some(ItemKind::Serp),
            "finding" => Some(ItemKind::Finding),
            "report" => Some(ItemKind::Report),
            _ => None,
        }
    }
}

/// A valid item. Serialized as one line of `items.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Item {
    pub slice_id: SliceId,
    /// Position within its slice.
    pub seq: u32,
    pub kind: ItemKind,
    pub url: String,
    pub geo: Geo,
    pub data: Value,
}

/// One reason the validator gave.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// JSON Pointer into the item.
    pub path: String,
    pub message: String,
}

/// An item that failed the job's schema. Serialized as one line of `rejections.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rejection {
    pub slice_id: SliceId,
    pub seq: u32,
    pub url: String,
    pub geo: Geo,
    pub data: Value,
    pub errors: Vec<Violation>,
}

/// One attempt at one tool call, or one answer served by the cache.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceStep {
    pub slice_id: SliceId,
    /// Order within the slice.
    pub seq: u32,
    pub tool: String,
    /// sha256 of the canonical arguments.
    pub args_digest: String,
    pub cache_hit: bool,
    /// 1-based attempt number; 0 when served by the cache.
    pub attempt: u32,
    /// `ok` or the error code.
    pub status: String,
    pub error: Option<String>,
    pub latency_us: u64,
    pub cost: Micros,
    pub at_ms: i64,
    /// The trace and span (hex) of the tool call, when traces are exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
}

/// What the tool layer decided about one call, and how the call went.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// The job and slice the call was made for; `None` for calls made outside a job
    /// (the command line, an MCP client).
    pub job_id: Option<JobId>,
    pub slice_id: Option<SliceId>,
    /// Order within the slice (or the caller's batch).
    pub seq: u32,
    pub tool: String,
    /// sha256 of the arguments.
    pub args_digest: String,
    /// `allow`, or why not: `deny`, `needs_approval`, `isolated_only`,
    /// `quarantined`, `blocked`, `unknown_tool`, `bad_arguments`.
    pub decision: String,
    pub reason: String,
    /// Who asked: `worker`, `cli`, `mcp:<client>`.
    pub caller: String,
    pub latency_us: u64,
    /// Bytes returned to the caller, after the result sanitizer.
    pub result_bytes: u64,
    /// The error code and message, when the call was made and failed.
    pub error: Option<String>,
    pub at_ms: i64,
}

/// Money spent by one billed call (an upstream call, a model turn, a browser
/// session).
///
/// Keyed in the ledger by job, slice, `attempt` and `seq`: every delivery of a
/// slice runs as an attempt of its own, so a slice delivered again after its
/// first outcome was lost has both attempts' calls in the ledger, each once,
/// however often either attempt's rows are written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CostEntry {
    pub slice_id: SliceId,
    /// The attempt (one delivery's run of the slice) that made the call: random,
    /// so attempts never share a key. Empty for rows stored before attempts were
    /// kept.
    #[serde(default)]
    pub attempt: String,
    pub seq: u32,
    pub product: String,
    pub amount: Micros,
}

impl CostEntry {
    /// A new attempt's id: 16 hex digits.
    pub fn new_attempt(random: u64) -> String {
        format!("{random:016x}")
    }
}

/// Everything a slice produced, written in one transaction keyed by the slice id.
#[derive(Clone, Debug, Default)]
pub struct SliceOutcome {
    pub items: Vec<Item>,
    pub rejections: Vec<Rejection>,
    pub trace: Vec<TraceStep>,
    pub costs: Vec<CostEntry>,
    pub children: Vec<SliceSpec>,
    /// One row per tool call the slice asked the tool layer for, allowed or not.
    pub audit: Vec<AuditRecord>,
    /// `None` when the slice succeeded.
    pub error: Option<SliceError>,
}

/// What a slice still running has recorded, and where a model-driven slice's
/// conversation stands. Saved after each model turn (`Store::save_progress`), so
/// that a slice delivered again resumes at its next turn and every turn that was
/// paid for is in the ledger once: its outcome carries these rows again, and
/// rows already stored are kept as they are.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    pub trace: Vec<TraceStep>,
    pub costs: Vec<CostEntry>,
    pub audit: Vec<AuditRecord>,
    /// The slice's own state to resume from; `None` keeps the last one saved.
    pub state: Option<Value>,
}

impl Progress {
    pub fn is_empty(&self) -> bool {
        self.trace.is_empty()
            && self.costs.is_empty()
            && self.audit.is_empty()
            && self.state.is_none()
    }
}

/// Why a slice failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceError {
    pub code: String,
    pub message: String,
}

impl SliceOutcome {
    pub fn status(&self) -> SliceStatus {
        if self.error.is_some() {
            SliceStatus::Failed
        } else {
            SliceStatus::Succeeded
        }
    }
}

/// Counts over a job, read from the store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobCounts {
    pub slices_total: u64,
    pub slices_succeeded: u64,
    pub slices_failed: u64,
    pub items_valid: u64,
    pub items_rejected: u64,
    pub upstream_calls: u64,
    pub cache_hits: u64,
    pub cost: Micros,
    /// Failed slices whose error is an exhausted budget.
    pub budget_stops: u64,
}

impl JobCounts {
    pub fn slices_open(&self) -> u64 {
        self.slices_total
            .saturating_sub(self.slices_succeeded + self.slices_failed)
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approval_ids_are_large_distinct_and_exact_in_json() {
        assert_eq!(approval_id(0), APPROVAL_ID_MIN);
        assert!(approval_id(u64::MAX) < 1 << 53);
        let ids: std::collections::HashSet<i64> = (0..1000)
            .map(|_| approval_id(unguessable_u64().unwrap()))
            .collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| (APPROVAL_ID_MIN..1 << 53).contains(id)));
        // Not in sequence: no two of a thousand are neighbours.
        let mut sorted: Vec<i64> = ids.into_iter().collect();
        sorted.sort_unstable();
        assert!(sorted.windows(2).all(|w| w[1] - w[0] > 1));
    }

    #[test]
    fn job_ids_round_trip_and_reject_garbage() {
        let id = JobId::generate(1_700_000_000_000, 0xdead_beef);
        assert_eq!(JobId::parse(id.as_str()), Ok(id.clone()));
        assert!(JobId::parse("job_xyz").is_err());
        assert!(JobId::parse("../../etc/passwd").is_err());
    }

    #[test]
    fn urls_normalize_host_port_and_fragment() {
        assert_eq!(
            normalize_url("HTTPS://Shop.Example:443/p/1?#top").as_deref(),
            Ok("https://shop.example/p/1")
        );
        assert!(normalize_url("ftp://x/y").is_err());
        assert!(normalize_url("not a url").is_err());
    }

    #[test]
    fn queries_that_differ_in_case_and_spacing_share_a_slice() {
        let geo = Geo::parse("us").unwrap();
        let a = SliceKind::Search {
            query: "14 inch  Laptop".into(),
            geo,
            engine: Engine::Google,
            follow_top: 3,
        };
        let b = SliceKind::Search {
            query: " 14 inch laptop".into(),
            geo,
            engine: Engine::Google,
            follow_top: 3,
        };
        assert_eq!(SliceId::of(&a), SliceId::of(&b));
    }
}
