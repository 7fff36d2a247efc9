//! The ports: what the roles need from the outside world, as traits.
//!
//! Each has an embedded adapter (in-process queue, SQLite cache and store, the
//! built-in simulator) and, in later stages, a distributed one (NATS JetStream,
//! Redis, Postgres). Roles hold `Arc<dyn Port>` and never name an adapter.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cost::Micros;
use crate::model::{
    AuditRecord, CostEntry, Item, JobCounts, JobId, JobStatus, Progress, Rejection, SliceError,
    SliceId, SliceOutcome, SliceSpec, TraceStep,
};
use crate::retry::ErrorClass;
use crate::workers::WorkerInfo;

/// A backend could not do what was asked.
#[derive(Clone, Debug, thiserror::Error)]
pub enum PortError {
    /// The backend is down or busy; the caller may try again.
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// What was stored or received cannot be read.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    #[error("not found: {0}")]
    NotFound(String),
    /// A unique key is already taken (an idempotency key, for one).
    #[error("conflict: {0}")]
    Conflict(String),
}

// ---------------------------------------------------------------------------
// Slice queue

/// A slice on the queue, with the job it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceMessage {
    pub job_id: JobId,
    pub slice: SliceSpec,
}

impl SliceMessage {
    /// The de-duplication key: publishing the same slice of the same job twice is a no-op.
    pub fn msg_id(&self) -> String {
        format!("{}.{}", self.job_id, self.slice.id)
    }
}

/// What a consumer says about a delivery.
#[async_trait]
pub trait Acker: Send + Sync {
    /// Done; never deliver again.
    async fn ack(&self) -> Result<(), PortError>;
    /// Not done; deliver again after `delay` (counts as a delivery).
    async fn nak(&self, delay: Duration) -> Result<(), PortError>;
    /// Still working; restart the ack timer.
    async fn in_progress(&self) -> Result<(), PortError>;
    /// Never deliver again, without success.
    async fn term(&self) -> Result<(), PortError>;
}

/// One delivery of a slice.
pub struct Delivery {
    pub message: SliceMessage,
    /// 1 for the first delivery.
    pub delivery: u32,
    /// The queue stops delivering after this many.
    pub max_deliver: u32,
    /// The W3C `traceparent` of the span that published the slice, when traces
    /// are exported: the slice's span continues that trace.
    pub traceparent: Option<String>,
    pub acker: Box<dyn Acker>,
}

impl Delivery {
    pub fn is_last(&self) -> bool {
        self.delivery >= self.max_deliver
    }
}

/// A slice the queue gave up on: delivered `max_deliver` times, never acked.
#[derive(Clone, Debug)]
pub struct DeadLetter {
    pub message: SliceMessage,
    pub deliveries: u32,
}

#[async_trait]
pub trait SliceQueue: Send + Sync {
    /// Enqueues a slice; a message id already seen is ignored.
    async fn publish(&self, msg: &SliceMessage) -> Result<(), PortError>;
    /// Enqueues many slices; returns once the queue has taken every one. An
    /// adapter may have them in flight together (one round trip for many).
    async fn publish_many(&self, msgs: &[SliceMessage]) -> Result<(), PortError> {
        for m in msgs {
            self.publish(m).await?;
        }
        Ok(())
    }
    /// Waits for the next delivery.
    async fn pull(&self) -> Result<Delivery, PortError>;
    /// Waits for the next slice that ran out of deliveries.
    async fn dead_letter(&self) -> Result<DeadLetter, PortError>;
    /// Slices waiting or in flight: what an autoscaler reads as lag.
    async fn lag(&self) -> Result<u64, PortError>;
    /// Whether the backend answers, for readiness probes.
    async fn ping(&self) -> Result<(), PortError> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Events

/// A slice reached a terminal state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SliceFinished {
    pub job_id: JobId,
    pub slice_id: SliceId,
    pub succeeded: bool,
    /// New slices it added to the job.
    pub children: u64,
    pub items_valid: u64,
    pub items_rejected: u64,
    pub upstream_calls: u64,
    pub cache_hits: u64,
    pub cost: Micros,
}

impl SliceFinished {
    /// The event of a slice whose `outcome` was just written, adding `children`
    /// new slices to the job.
    pub fn of(
        job_id: &JobId,
        slice_id: &SliceId,
        outcome: &SliceOutcome,
        children: u64,
    ) -> SliceFinished {
        let upstream = outcome.trace.iter().filter(|s| !s.cache_hit).count() as u64;
        SliceFinished {
            job_id: job_id.clone(),
            slice_id: slice_id.clone(),
            succeeded: outcome.error.is_none(),
            children,
            items_valid: outcome.items.len() as u64,
            items_rejected: outcome.rejections.len() as u64,
            upstream_calls: upstream,
            cache_hits: outcome.trace.len() as u64 - upstream,
            cost: outcome.costs.iter().map(|c| c.amount).sum(),
        }
    }
}

/// What happened to a job, for the scheduler (and anyone else listening). Events are
/// hints that make things happen sooner: the store stays the source of truth, so a
/// lost event delays a job by one reconcile period and loses nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// A job was stored `pending`; the scheduler plans it.
    JobCreated {
        job_id: JobId,
    },
    SliceFinished(SliceFinished),
    /// A human decided on an approval of this job.
    ApprovalDecided {
        job_id: JobId,
        approved: bool,
    },
    /// A job was cancelled; its open slices are skipped.
    JobCancelled {
        job_id: JobId,
    },
}

impl Event {
    pub fn job_id(&self) -> &JobId {
        match self {
            Event::JobCreated { job_id }
            | Event::ApprovalDecided { job_id, .. }
            | Event::JobCancelled { job_id } => job_id,
            Event::SliceFinished(f) => &f.job_id,
        }
    }
}

#[async_trait]
pub trait Events: Send + Sync {
    async fn emit(&self, ev: Event) -> Result<(), PortError>;

    async fn slice_finished(&self, ev: SliceFinished) -> Result<(), PortError> {
        self.emit(Event::SliceFinished(ev)).await
    }
}

// ---------------------------------------------------------------------------
// Content cache

/// The key of a cached tool answer: `trawl:v1:<tool>:<geo>:<sha256>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey(pub String);

impl CacheKey {
    /// `subject` is the normalized URL or query; `format` what was asked for.
    pub fn new(tool: &str, geo: &str, subject: &str, format: &str) -> CacheKey {
        CacheKey(format!(
            "trawl:v1:{tool}:{geo}:{}",
            crate::digest(&[subject, format])
        ))
    }
}

/// Where a cached lookup's answer came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// A stored answer younger than the max age.
    Hit,
    /// Another caller's load of the same key, running at the same time.
    Coalesced,
    /// This caller's own load.
    Loaded,
}

pub type LoadFuture<'a> = Pin<Box<dyn Future<Output = Result<Vec<u8>, ToolError>> + Send + 'a>>;

#[async_trait]
pub trait ContentCache: Send + Sync {
    /// The stored answer for `key` if younger than `max_age`; otherwise runs `load`,
    /// stores its answer for `max_age`, and returns it. Concurrent calls for one key
    /// run one load. A zero `max_age` always loads. A cache backend that fails is
    /// logged and bypassed: the answer still comes from `load`.
    async fn get_or_load(
        &self,
        key: &CacheKey,
        max_age: Duration,
        load: LoadFuture<'_>,
    ) -> Result<(Vec<u8>, Served), ToolError>;
    /// Whether the backend answers, for readiness probes. A cache that is down
    /// degrades calls, it does not fail them; readiness reports it all the same.
    async fn ping(&self) -> Result<(), PortError> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Tools

/// A tool call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("{code}: {message}")]
pub struct ToolError {
    pub class: ErrorClass,
    /// Short and stable: `http_429`, `reject_block`, `timeout`, `budget_exhausted`.
    pub code: String,
    pub message: String,
    /// What the upstream asked for, if anything.
    #[serde(skip)]
    pub retry_after: Option<Duration>,
}

impl ToolError {
    pub fn transient(code: impl Into<String>, message: impl Into<String>) -> ToolError {
        ToolError {
            class: ErrorClass::Transient,
            code: code.into(),
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn permanent(code: impl Into<String>, message: impl Into<String>) -> ToolError {
        ToolError {
            class: ErrorClass::Permanent,
            code: code.into(),
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn is_transient(&self) -> bool {
        self.class == ErrorClass::Transient
    }

    pub fn to_slice_error(&self) -> SliceError {
        SliceError {
            code: self.code.clone(),
            message: self.message.clone(),
        }
    }
}

/// A tool as the catalog knows it: what a model is shown, and what is pinned.
///
/// Serialized the way MCP's `tools/list` carries a tool (`inputSchema`,
/// `outputSchema`, `annotations`), plus `input_examples`: example arguments, each
/// checked against the input schema when the tool is registered.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDef {
    /// Namespaced by its server: `brightdata.web_search`, `everything.echo`.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default)]
    pub description: String,
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// MCP tool annotations (`readOnlyHint`, `openWorldHint`, ...), an object or null.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub annotations: Value,
    #[serde(
        default,
        rename = "input_examples",
        alias = "inputExamples",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub input_examples: Vec<Value>,
}

/// Several calls of one tool made as one: a batch tool's argument `items_field`
/// is an array of arguments of `tool`, each called (and cached) on its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchOf {
    pub tool: String,
    pub items_field: &'static str,
}

/// What a provider offers: the tool, and how the layer calls it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOffer {
    pub def: ToolDef,
    /// How calls are billed, in words, for the catalog (`$1.50 per 1,000 successful requests`).
    pub cost_model: String,
    pub batch: Option<BatchOf>,
}

/// A successful call.
#[derive(Clone, Debug)]
pub struct ToolAnswer {
    pub body: Vec<u8>,
    /// What this call was billed; zero for failures.
    pub cost: Micros,
    /// The billed product, for the ledger.
    pub product: &'static str,
}

#[async_trait]
pub trait ToolProvider: Send + Sync {
    fn tools(&self) -> Vec<ToolOffer>;
    /// The cache key of a call, or `None` if its answers must not be cached.
    fn cache_key(&self, tool: &str, args: &Value) -> Option<CacheKey>;
    /// The price of one successful call, reserved against the budget before it runs.
    fn price(&self, tool: &str) -> Micros;
    /// One attempt, no retries.
    async fn call(&self, tool: &str, args: &Value) -> Result<ToolAnswer, ToolError>;
}

// ---------------------------------------------------------------------------
// Store

/// A job as stored.
#[derive(Clone, Debug)]
pub struct JobRecord {
    pub id: JobId,
    pub name: String,
    /// The spec document; parsed again with `JobSpec::from_value`.
    pub spec: Value,
    pub status: JobStatus,
    pub reason: Option<String>,
    pub estimate: Micros,
    pub created_ms: i64,
    /// The client's `Idempotency-Key` and a digest of its request, when given. The
    /// store keeps keys unique: a second job with one is refused with `Conflict`.
    pub idempotency: Option<Idempotency>,
    /// The W3C `traceparent` of the span that submitted the job, when traces
    /// are exported: planning and every slice continue that trace.
    pub traceparent: Option<String>,
    /// Who submitted the job, when it came over the API; `None` for a job of
    /// `trawl run` (the operator's own) or one stored before owners were kept.
    pub owner: Option<JobOwner>,
    /// How long the job is kept after it ends (its spec's `retention`); `None`:
    /// the deployment's retention.
    pub retention_ms: Option<i64>,
    /// The most slices the job can have (followed pages at their maximum), as
    /// submitted: what its tenant's slices in flight count before it is planned.
    pub slices_max: u64,
    /// The estimate above which the job waits for approval, as its submission set
    /// it (the lower of its spec's `approve_above_usd` and its tenant's); `None`:
    /// the spec's.
    pub approve_above: Option<Micros>,
}

/// Who a job belongs to: only its owner, the owner's tenant and admins may read
/// or cancel it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobOwner {
    /// The caller as the API names it: `key:<name>` (or `key-<digest>` for an
    /// unnamed key), `sub:<subject>` for an OAuth token, `api` on an open API.
    pub caller: String,
    /// The OAuth client the token was issued to, when it says.
    pub client: Option<String>,
    /// The caller's tenant (the configured tenant claim of its token): callers
    /// of one tenant share their jobs.
    pub tenant: Option<String>,
}

impl JobOwner {
    /// Who the job's quotas are counted for: its tenant, else the caller itself.
    pub fn tenant_key(&self) -> &str {
        self.tenant.as_deref().unwrap_or(&self.caller)
    }
}

/// An `Idempotency-Key` and what it was first used for. Keys are kept per
/// (tenant, caller, key), each its own column: one caller's key never names
/// another's job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Idempotency {
    pub key: String,
    /// sha256 of the request body, so a reuse with another body can be refused.
    pub request_digest: String,
}

/// An approval as stored, with its id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ApprovalRecord {
    pub id: i64,
    /// What is asked: `job_budget`, `tool_change` (a pinned tool's definition
    /// changed), `new_tool` (a server added a tool and its policy is `approve`),
    /// `tool_review` (the guard found a definition suspect and holds it for a person) or
    /// `tool_call` (a call of a tool whose policy asks for approval per call).
    pub kind: String,
    /// The job, for `job_budget`.
    pub job_id: Option<JobId>,
    /// The namespaced tool, for `tool_change`, `new_tool`, `tool_review` and `tool_call`.
    pub tool: Option<String>,
    /// The money at stake, for `job_budget`.
    pub amount: Micros,
    pub reason: String,
    /// For tool approvals: the old and new definitions and their differences.
    pub detail: Option<Value>,
    /// `None` while pending.
    pub approved: Option<bool>,
    pub decided_by: Option<String>,
    pub requested_ms: i64,
    pub decided_ms: Option<i64>,
    /// When it stops being decidable: `requested_ms` plus the approval TTL,
    /// stamped by the notifier (`None` while unstamped, or with no TTL).
    pub expires_ms: Option<i64>,
    /// Closed because nobody decided before `expires_ms`; `approved` is then
    /// `Some(false)`.
    pub expired: bool,
    /// When its request was delivered (Slack, the outgoing webhook); `None` until then.
    pub notified_ms: Option<i64>,
}

impl ApprovalRecord {
    /// `pending`, `approved`, `rejected` or `expired`.
    pub fn status(&self) -> &'static str {
        match self.approved {
            None => "pending",
            Some(true) => "approved",
            Some(false) if self.expired => "expired",
            Some(false) => "rejected",
        }
    }

    /// The notice this record was claimed for by
    /// [`Store::claim_approval_notices`]: its request while undecided and never
    /// announced, its outcome once decided after its request was announced.
    pub fn notice(&self) -> Option<ApprovalNotice> {
        match (self.approved, self.notified_ms) {
            (None, None) => Some(ApprovalNotice::Requested),
            (Some(_), Some(_)) => Some(ApprovalNotice::Decided),
            _ => None,
        }
    }

    /// Why a job (or tool) stays blocked once this approval expired: "approval 12
    /// expired after 24h, nobody decided".
    pub fn expiry_reason(&self) -> String {
        let after = self
            .expires_ms
            .map(|e| short_duration(e.saturating_sub(self.requested_ms)))
            .unwrap_or_else(|| "its time".to_owned());
        format!("approval {} expired after {after}, nobody decided", self.id)
    }
}

/// `24h`, `1h 30m`, `45s`, `500ms`: whole hours, minutes and seconds (days count
/// as hours, as TTLs are usually written).
fn short_duration(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    let parts = [(s / 3600, "h"), (s % 3600 / 60, "m"), (s % 60, "s")];
    parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Who an expired approval counts as decided by.
pub const EXPIRED_BY: &str = "trawl: nobody decided in time";

/// A message about an approval that is due to go out (see
/// [`Store::claim_approval_notices`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalNotice {
    /// Someone is asked to decide.
    Requested,
    /// It was decided (or expired) after its request went out.
    Decided,
}

/// Where a page of rows starts: after this (slice, seq), in slice order.
pub type RowCursor = (SliceId, u32);

/// An approval asked for or decided.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Approval {
    pub job_id: JobId,
    pub amount: Micros,
    pub reason: String,
    /// `None` while pending.
    pub approved: Option<bool>,
    pub decided_by: Option<String>,
}

/// Where a tool stands with the tool layer's pins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PinStatus {
    /// The pinned definition is the one approved; the tool is listed and callable
    /// while the server offers exactly it.
    Active,
    /// The server changed the definition: neither listed nor callable until a
    /// `tool_change` approval re-pins it.
    Quarantined,
    /// A tool first seen on a server whose policy for new tools is `approve`: held
    /// until a `new_tool` approval.
    Awaiting,
    /// The pending definition was rejected; it stays out until the server offers
    /// the pinned definition again (or a new change is approved).
    Rejected,
}

impl PinStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PinStatus::Active => "active",
            PinStatus::Quarantined => "quarantined",
            PinStatus::Awaiting => "awaiting",
            PinStatus::Rejected => "rejected",
        }
    }

    pub fn parse(s: &str) -> Option<PinStatus> {
        Some(match s {
            "active" => PinStatus::Active,
            "quarantined" => PinStatus::Quarantined,
            "awaiting" => PinStatus::Awaiting,
            "rejected" => PinStatus::Rejected,
            _ => return None,
        })
    }
}

/// A tool's pin: the definition approved for it, and a change waiting for a decision.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolPin {
    /// Namespaced: `everything.echo`.
    pub tool: String,
    pub server: String,
    pub status: PinStatus,
    /// sha256 of the canonical JSON of the approved definition; `None` for a new
    /// tool not yet approved.
    pub hash: Option<String>,
    pub definition: Option<Value>,
    /// A definition seen since and not (yet) approved.
    pub pending_hash: Option<String>,
    pub pending_definition: Option<Value>,
    /// The approval deciding the pending definition.
    pub approval_id: Option<i64>,
    /// When the approved definition was pinned, and by whom (`first-sight`,
    /// `policy:auto`, or the person who approved a change).
    pub pinned_ms: i64,
    pub approved_by: Option<String>,
}

/// A change to the pins, decided by the tool layer from a listing.
#[derive(Clone, Debug, PartialEq)]
pub enum PinChange {
    /// Pin `definition` as approved (first sight of a server, or policy `auto`).
    /// A pin already stored for the tool is left as it is.
    Pin {
        tool: String,
        server: String,
        hash: String,
        definition: Value,
        by: String,
    },
    /// Hold `definition` back and raise an approval of `kind` (`tool_change`,
    /// `new_tool` or `tool_review`) with `detail`; a pending approval for the tool
    /// is replaced. A `new_tool` hold leaves the tool `awaiting`, the others
    /// `quarantined`.
    Hold {
        tool: String,
        server: String,
        kind: &'static str,
        hash: String,
        definition: Value,
        reason: String,
        detail: Value,
    },
    /// The server offers the pinned definition again: the tool is active, and a
    /// pending approval for it is closed as superseded.
    Restore { tool: String },
}

/// A model judge's verdict on a tool definition (the stage after the scanner's
/// rules and embeddings), kept so the same definition is never judged twice by
/// the same model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardVerdict {
    /// The judging model, as its client names it.
    pub model: String,
    /// sha256 of what was judged (a definition's canonical JSON).
    pub hash: String,
    /// What the judge decided (`allow`, `block`, …).
    pub verdict: String,
    /// Why, in the judge's words.
    pub reason: String,
    pub decided_ms: i64,
}

/// An upstream server's last good `tools/list`, as the tool layer keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolListing {
    pub server: String,
    /// The tools as the server listed them (its own names, every field kept).
    pub tools: Vec<Value>,
    /// When the server was listed.
    pub listed_ms: i64,
}

/// What writing an outcome did.
#[derive(Clone, Debug, Default)]
pub struct Recorded {
    /// False when the slice was already terminal: a redelivery wrote nothing.
    pub written: bool,
    /// Children not already part of the job; these must be published.
    pub new_children: Vec<SliceSpec>,
}

/// A slice that failed, for the summary.
#[derive(Clone, Debug, Serialize)]
pub struct FailedSlice {
    pub slice_id: SliceId,
    pub kind: String,
    pub subject: String,
    pub geo: String,
    pub error: SliceError,
}

/// The most bytes an artifact may hold: a full-page screenshot fits, a video does not.
pub const MAX_ARTIFACT_BYTES: usize = 10 * 1024 * 1024;

/// A file a slice produced (a browser slice's screenshot), stored with its job and
/// named uniquely within it.
#[derive(Clone, PartialEq, Eq)]
pub struct Artifact {
    pub job_id: JobId,
    /// The slice that produced it; `None` for a file of the job as a whole.
    pub slice_id: Option<SliceId>,
    /// Unique within the job: storing a name again replaces the file.
    pub name: String,
    /// Its media type (`image/png`), served with it.
    pub content_type: String,
    /// At most [`MAX_ARTIFACT_BYTES`].
    pub data: Vec<u8>,
    /// When it was produced, in milliseconds since the epoch.
    pub at_ms: i64,
}

impl Artifact {
    /// What a listing shows of it.
    pub fn info(&self) -> ArtifactInfo {
        ArtifactInfo {
            job_id: self.job_id.clone(),
            slice_id: self.slice_id.clone(),
            name: self.name.clone(),
            content_type: self.content_type.clone(),
            size: self.data.len() as u64,
            at_ms: self.at_ms,
        }
    }

    /// Refuses data larger than [`MAX_ARTIFACT_BYTES`] as [`PortError::Corrupt`]:
    /// the input is wrong, and storing it again cannot help.
    pub fn check_size(&self) -> Result<(), PortError> {
        if self.data.len() > MAX_ARTIFACT_BYTES {
            return Err(PortError::Corrupt(format!(
                "artifact {:?} of job {}: {} bytes, more than the {MAX_ARTIFACT_BYTES} stored",
                self.name,
                self.job_id,
                self.data.len()
            )));
        }
        Ok(())
    }
}

impl std::fmt::Debug for Artifact {
    /// Everything but the bytes, which are only counted.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Artifact")
            .field("job_id", &self.job_id)
            .field("slice_id", &self.slice_id)
            .field("name", &self.name)
            .field("content_type", &self.content_type)
            .field("data", &format_args!("<{} bytes>", self.data.len()))
            .field("at_ms", &self.at_ms)
            .finish()
    }
}

/// An artifact as a listing shows it: everything but its bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactInfo {
    pub job_id: JobId,
    pub slice_id: Option<SliceId>,
    pub name: String,
    pub content_type: String,
    /// The length of its data, in bytes.
    pub size: u64,
    pub at_ms: i64,
}

/// Jobs: created, planned, moved and ended, found by status or idempotency key; their budget; and whether the backend answers.
#[async_trait]
pub trait JobStore: Send + Sync {
    /// Stores a job and its planned slices, all or nothing.
    async fn create_job(&self, job: &JobRecord, slices: &[SliceSpec]) -> Result<(), PortError>;
    async fn job(&self, id: &JobId) -> Result<Option<JobRecord>, PortError>;
    /// Moves a job from `from` to the status `to` that is not terminal (jobs end
    /// only by [`Self::end_job`]); `false` (nothing written) when the job is no
    /// longer `from`, so a move never overwrites a cancel or another move.
    async fn move_job(&self, id: &JobId, from: JobStatus, to: JobStatus)
    -> Result<bool, PortError>;
    /// Ends a job with a terminal `status`, unless it has already ended: `false`
    /// (nothing written) then, so a cancel and a finish racing each other cannot
    /// overwrite one another.
    async fn end_job(
        &self,
        id: &JobId,
        status: JobStatus,
        reason: Option<&str>,
    ) -> Result<bool, PortError>;
    /// Reserves `amount` of the job's budget unless its reservations would pass
    /// `max`; `false` (and nothing reserved) if they would. Reservations are kept
    /// in the store so that every process spending for the job shares them.
    async fn reserve_budget(
        &self,
        id: &JobId,
        amount: Micros,
        max: Micros,
    ) -> Result<bool, PortError>;
    /// Changes the job's reservations by `delta`: negative to release what a
    /// failed call did not spend, the difference when a call was billed otherwise.
    async fn adjust_budget(&self, id: &JobId, delta: Micros) -> Result<(), PortError>;
    /// Money spent so far, from the ledger.
    async fn spent(&self, id: &JobId) -> Result<Micros, PortError>;
    /// Stores the planned slices of a `pending` job, then moves it to `status`.
    /// `false` when the job is not `pending` (another planner moved it, or it was
    /// cancelled while planning: the batches stored until then stay, unrun).
    /// The slices count as published now: the scheduler publishes every open slice
    /// of a `queued` job before the job leaves `queued`, so no slice needs a mark.
    /// They are taken from `slices` and stored in transactions of at most
    /// [`PLAN_BATCH`], so a plan of a million slices is never held at once and
    /// never holds the store: other callers' reads and writes go between the
    /// batches. Slice ids come from their content, so planning again after a
    /// crash stores only what is missing; the job moves once all are stored.
    async fn plan_job(
        &self,
        id: &JobId,
        slices: &mut PlannedSlices<'_>,
        status: JobStatus,
    ) -> Result<bool, PortError>;
    /// Jobs in any of these statuses, oldest first, at most `limit`.
    async fn jobs_with_status(
        &self,
        statuses: &[JobStatus],
        limit: u32,
    ) -> Result<Vec<JobRecord>, PortError>;
    /// The job `owner` first stored with this idempotency key (another caller's
    /// job with the same key is not it).
    async fn job_by_idempotency_key(
        &self,
        owner: &JobOwner,
        key: &str,
    ) -> Result<Option<JobRecord>, PortError>;
    /// What the tenant (its jobs' [`JobOwner::tenant_key`]) has: unfinished jobs,
    /// their slices not yet done, and per UTC day from `since_ms` on, the jobs
    /// created, their slices and spend ([`crate::tenant::Usage`]).
    async fn tenant_usage(
        &self,
        tenant: &str,
        since_ms: i64,
    ) -> Result<crate::tenant::Usage, PortError>;
    /// Ended jobs whose retention has passed at `now_ms`: they ended more than
    /// their own retention (`retention_ms`), or `default_ms`, ago. Longest ended
    /// first, at most `limit`.
    async fn expired_jobs(
        &self,
        now_ms: i64,
        default_ms: i64,
        limit: u32,
    ) -> Result<Vec<JobId>, PortError>;
    /// Deletes at most `batch` rows of a job, table by table ([`PURGED`]); its
    /// cost rows are added to the monthly ledger ([`JobStore::cost_months`]) as
    /// they go. Once none is left, the job itself. Returns the rows deleted: 0 once
    /// nothing of the job is left (or it never was).
    async fn purge_job(&self, id: &JobId, batch: u32) -> Result<u64, PortError>;
    /// The job's rows in each table of [`PURGED`], as `purge_job` would delete them.
    async fn job_rows(&self, id: &JobId) -> Result<Vec<(&'static str, u64)>, PortError>;
    /// The cost ledger by the month its jobs were created in (UTC) and product: the
    /// jobs stored and those deleted by retention alike.
    async fn cost_months(&self) -> Result<Vec<CostMonth>, PortError>;
    /// Upkeep of a store whose big tables are partitioned by day (Postgres):
    /// makes the partitions of the next days before rows arrive, and drops those
    /// of past days once no job of the day is left (retention deleted them). A
    /// store without partitions does nothing.
    async fn keep_partitions(&self, now_ms: i64) -> Result<Partitions, PortError>;
    /// Whether the backend answers, for readiness probes.
    async fn ping(&self) -> Result<(), PortError>;
}

/// The tables a job's rows are deleted from when its retention has passed, in
/// the order they are deleted (rows before what they refer to), each with the
/// columns that key a job's rows in it.
pub const PURGED: &[(&str, &str)] = &[
    ("items", "slice_id, seq"),
    ("rejections", "slice_id, seq"),
    ("trace_steps", "slice_id, seq"),
    ("costs", "slice_id, attempt, seq"),
    ("tool_audit", "id"),
    ("artifacts", "name"),
    ("slice_progress", "slice_id"),
    ("approvals", "id"),
    ("slices", "slice_id"),
];

/// What [`JobStore::keep_partitions`] did: the days made and dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Partitions {
    pub created: u32,
    pub dropped: u32,
}

/// A month of the cost ledger for one product.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CostMonth {
    /// `YYYY-MM`, UTC, of when the jobs were created.
    pub month: String,
    pub product: String,
    pub amount: Micros,
}

/// Slices to plan, taken one at a time.
pub type PlannedSlices<'a> = dyn Iterator<Item = SliceSpec> + Send + 'a;

/// Slices a store takes from a plan at once: one statement's worth.
pub const PLAN_BATCH: usize = 5_000;

/// The next batch of at most [`PLAN_BATCH`] slices of a plan; empty at its end.
pub fn next_batch(slices: &mut PlannedSlices<'_>) -> Vec<SliceSpec> {
    slices.take(PLAN_BATCH).collect()
}

/// Slices and what they yield: outcomes, progress of slices still running, publication to the queue, counts, and the items, rejections and trace read back.
#[async_trait]
pub trait SliceStore: Send + Sync {
    /// Slices not yet terminal, in slice id order: at most `limit` after `after`.
    async fn open_slices_page(
        &self,
        id: &JobId,
        after: Option<&SliceId>,
        limit: u32,
    ) -> Result<Vec<SliceSpec>, PortError>;
    /// Every slice not yet terminal, in slice id order (for jobs known to be small).
    async fn open_slices(&self, id: &JobId) -> Result<Vec<SliceSpec>, PortError> {
        let mut all: Vec<SliceSpec> = Vec::new();
        loop {
            let page = self
                .open_slices_page(id, all.last().map(|s| &s.id), PLAN_BATCH as u32)
                .await?;
            let last = page.len() < PLAN_BATCH;
            all.extend(page);
            if last {
                return Ok(all);
            }
        }
    }
    /// Writes a slice's items, rejections, trace, costs, children and status in one
    /// transaction. If the slice is already terminal, only the outcome's cost rows
    /// are written (see [`Self::record_costs`]): the calls of an attempt whose
    /// outcome comes second were billed all the same.
    async fn record_outcome(
        &self,
        job: &JobId,
        slice: &SliceId,
        outcome: &SliceOutcome,
    ) -> Result<Recorded, PortError>;
    /// Writes cost rows of one attempt of a slice into the ledger, whatever the
    /// slice's status: the costs of an attempt whose outcome was not written (the
    /// store was down when it ended, or it is delivered again after a transient
    /// failure). A row whose key (slice, attempt, seq) is stored already is kept
    /// as it is, so writing the same rows again changes nothing. The job's cost
    /// grows by the new rows, and its upstream calls by `calls` when any row was
    /// new. Returns how many rows were new; `NotFound` for an unknown slice.
    async fn record_costs(
        &self,
        job: &JobId,
        slice: &SliceId,
        costs: &[CostEntry],
        calls: u64,
    ) -> Result<u64, PortError>;
    /// Stores what a slice still running recorded (rows already stored under
    /// the same seq are kept as they are) and, when `progress.state` is given,
    /// the state it resumes from. Writes nothing for a slice that is no longer
    /// pending.
    async fn save_progress(
        &self,
        job: &JobId,
        slice: &SliceId,
        progress: &Progress,
    ) -> Result<(), PortError>;
    /// What [`Self::save_progress`] kept for a slice: every trace step, cost
    /// entry and audit row stored under it, in seq order, and its last state.
    /// `None` when nothing is stored.
    async fn progress(&self, job: &JobId, slice: &SliceId) -> Result<Option<Progress>, PortError>;
    async fn counts(&self, id: &JobId) -> Result<JobCounts, PortError>;
    /// Whether any slice of the job is not yet terminal. Called after every burst
    /// of finished slices, so an adapter whose `counts` is costly answers it
    /// without counting.
    async fn has_open_slices(&self, id: &JobId) -> Result<bool, PortError> {
        Ok(self.counts(id).await?.slices_open() > 0)
    }
    /// Valid items in slice order.
    async fn items(&self, id: &JobId) -> Result<Vec<Item>, PortError>;
    async fn rejections(&self, id: &JobId) -> Result<Vec<Rejection>, PortError>;
    async fn failed_slices(&self, id: &JobId, limit: u32) -> Result<Vec<FailedSlice>, PortError>;
    /// Adds pending slices to a job, not yet published (the scheduler publishes
    /// them); ids the job already has are skipped. Returns how many were new.
    async fn add_slices(&self, id: &JobId, slices: &[SliceSpec]) -> Result<u64, PortError>;
    /// Open slices of a job to (re)publish: never published, or last published
    /// before `stale_before_ms`; at most `limit`, in slice order.
    async fn slices_to_publish(
        &self,
        id: &JobId,
        stale_before_ms: i64,
        limit: u32,
    ) -> Result<Vec<SliceSpec>, PortError>;
    /// Notes that these slices were handed to the queue at `at_ms`.
    async fn mark_published(
        &self,
        id: &JobId,
        slices: &[SliceId],
        at_ms: i64,
    ) -> Result<(), PortError>;
    /// Valid items after `after`, in slice order, at most `limit`.
    async fn items_page(
        &self,
        id: &JobId,
        after: Option<&RowCursor>,
        limit: u32,
    ) -> Result<Vec<Item>, PortError>;
    async fn rejections_page(
        &self,
        id: &JobId,
        after: Option<&RowCursor>,
        limit: u32,
    ) -> Result<Vec<Rejection>, PortError>;
    /// Trace steps after `after`, in slice order, at most `limit`.
    async fn trace_page(
        &self,
        id: &JobId,
        after: Option<&RowCursor>,
        limit: u32,
    ) -> Result<Vec<TraceStep>, PortError>;
}

/// Approvals of spend and tool changes: requested, decided, expired, and the outbox of their notices (Slack, webhooks).
#[async_trait]
pub trait ApprovalStore: Send + Sync {
    async fn request_approval(&self, approval: &Approval) -> Result<(), PortError>;
    /// Records a decision on a pending approval; `None` if there was none pending.
    async fn decide_approval(
        &self,
        id: &JobId,
        approved: bool,
        by: &str,
    ) -> Result<Option<Approval>, PortError>;
    /// Approvals, newest first; only pending ones when `pending_only`.
    async fn approvals(
        &self,
        pending_only: bool,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>, PortError>;
    async fn approval(&self, id: i64) -> Result<Option<ApprovalRecord>, PortError>;
    /// How many approvals are pending (the `trawl_approvals_pending` gauge).
    async fn pending_approvals(&self) -> Result<u64, PortError>;
    /// Expires what nobody decided in time, in one transaction: first every
    /// pending approval without an expiry gets one, `ttl_ms` after it was
    /// requested (none when `ttl_ms` is `None`); then up to `limit` pending
    /// approvals whose expiry is at or before `now_ms` are closed as expired
    /// (`approved = false`, `expired`, decided at `now_ms`), and each one's job,
    /// while it still awaits approval, ends `cancelled` with
    /// [`ApprovalRecord::expiry_reason`]. A tool's pin is left as it is: the
    /// tool stays out. Returns the approvals it expired.
    async fn expire_approvals(
        &self,
        now_ms: i64,
        ttl_ms: Option<i64>,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>, PortError>;
    /// Claims up to `limit` approvals whose notice is due (see
    /// [`ApprovalRecord::notice`]) and not claimed by anyone else until
    /// `now_ms`: each is leased until `now_ms + lease_ms`, so several notifiers
    /// never send one notice at once. Oldest first. A pending one without an
    /// expiry gets one, `ttl_ms` after it was requested, in the same statement,
    /// so the request announces it (a request stored after this notifier's
    /// [`Self::expire_approvals`] would otherwise go out without).
    async fn claim_approval_notices(
        &self,
        now_ms: i64,
        lease_ms: i64,
        ttl_ms: Option<i64>,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>, PortError>;
    /// The `notice` of approval `id` was delivered at `at_ms`; its lease ends.
    async fn approval_notice_sent(
        &self,
        id: i64,
        notice: ApprovalNotice,
        at_ms: i64,
    ) -> Result<(), PortError>;
    /// A claimed notice could not be delivered: it may be claimed again from
    /// `retry_at_ms`.
    async fn approval_notice_failed(&self, id: i64, retry_at_ms: i64) -> Result<(), PortError>;
}

/// The tool layer's state: pins of upstream definitions and their approvals, per-call approvals, the audit log, the guard's cached embeddings and verdicts, and each upstream server's last good listing.
#[async_trait]
pub trait ToolStore: Send + Sync {
    /// Every tool's pin, by tool name.
    async fn tool_pins(&self) -> Result<Vec<ToolPin>, PortError>;
    /// Applies pin changes in one transaction, raising approvals as they ask.
    async fn save_pins(&self, changes: &[PinChange]) -> Result<(), PortError>;
    /// Decides a pending `tool_change`, `new_tool`, `tool_review` or `tool_call` approval; a
    /// decision on a definition is applied to the tool's pin in the same transaction: approving pins the pending definition, rejecting
    /// marks it rejected. `None` when there is no such pending tool approval.
    async fn decide_tool_approval(
        &self,
        id: i64,
        approved: bool,
        by: &str,
    ) -> Result<Option<ApprovalRecord>, PortError>;
    /// The decision on calling `tool` with the arguments of `args_digest` (a tool
    /// whose policy asks for approval per call): the first time, a pending
    /// `tool_call` approval with `detail` is stored. Its id and decision.
    async fn tool_call_approval(
        &self,
        tool: &str,
        args_digest: &str,
        reason: &str,
        detail: &Value,
    ) -> Result<(i64, Option<bool>), PortError>;
    /// Audit rows of calls made outside a slice (a slice's rows are written with
    /// its outcome).
    async fn record_audit(&self, rows: &[AuditRecord]) -> Result<(), PortError>;
    /// Audit rows after row `after` (by id, oldest first), at most `limit`, with their ids.
    async fn audit_page(
        &self,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(i64, AuditRecord)>, PortError>;
    /// The vectors stored for `model` (an embedder's `model_id`) under any of
    /// `keys` (sha256 of the embedded text), as (key, vector); keys without one
    /// are left out, in no particular order.
    async fn embeddings(
        &self,
        model: &str,
        keys: &[String],
    ) -> Result<Vec<(String, Vec<f32>)>, PortError>;
    /// Stores vectors of `model` by key. A key already stored for the model keeps
    /// its vector: the same text under the same weights has the same vector.
    async fn save_embeddings(
        &self,
        model: &str,
        rows: &[(String, Vec<f32>)],
    ) -> Result<(), PortError>;
    /// The verdict of judge `model` on the definition of `hash`, if it judged it.
    async fn guard_verdict(
        &self,
        model: &str,
        hash: &str,
    ) -> Result<Option<GuardVerdict>, PortError>;
    /// Stores a verdict, replacing the one of the same model and hash.
    async fn save_guard_verdict(&self, v: &GuardVerdict) -> Result<(), PortError>;
    /// Every stored listing, by server name.
    async fn tool_listings(&self) -> Result<Vec<ToolListing>, PortError>;
    /// Stores a server's listing, replacing the one stored before.
    async fn save_tool_listing(&self, listing: &ToolListing) -> Result<(), PortError>;
}

/// Browser slices' artifacts (screenshots, files) and the browse replay cache.
#[async_trait]
pub trait ArtifactStore: Send + Sync {
    /// Stores an artifact, replacing one of the same job and name. Data over
    /// [`MAX_ARTIFACT_BYTES`] is refused as [`PortError::Corrupt`] and nothing is
    /// stored; an unknown job is [`PortError::NotFound`].
    async fn put_artifact(&self, a: &Artifact) -> Result<(), PortError>;
    /// The artifacts of a job, without their bytes, by time produced then name.
    async fn artifacts(&self, job: &JobId) -> Result<Vec<ArtifactInfo>, PortError>;
    /// One artifact of a job, bytes and all; `None` when the job has none so named.
    async fn artifact(&self, job: &JobId, name: &str) -> Result<Option<Artifact>, PortError>;
    /// The replay of a browse step stored under `key`: a model step resolved once
    /// is replayed from it on the next run.
    async fn replay(&self, key: &str) -> Result<Option<Value>, PortError>;
    /// Stores (or replaces) the replay under `key`.
    async fn put_replay(&self, key: &str, value: &Value) -> Result<(), PortError>;
    /// Forgets the replay under `key` (a replay that no longer works); nothing
    /// stored under it is not an error.
    async fn drop_replay(&self, key: &str) -> Result<(), PortError>;
}

/// Workers as they report themselves: pool, capabilities, heartbeat.
#[async_trait]
pub trait WorkerStore: Send + Sync {
    /// Stores a worker's report, replacing its earlier one.
    async fn report_worker(&self, w: &WorkerInfo) -> Result<(), PortError>;
    /// Workers whose last report is at or after `since_ms`, the latest report
    /// first.
    async fn workers(&self, since_ms: i64) -> Result<Vec<WorkerInfo>, PortError>;
}

/// Every concern of the store: what the adapters (SQLite, Postgres) implement
/// and what the roles are handed. Any type that implements each concern is one.
pub trait Store:
    JobStore + SliceStore + ApprovalStore + ToolStore + ArtifactStore + WorkerStore
{
}

impl<T> Store for T where
    T: JobStore + SliceStore + ApprovalStore + ToolStore + ArtifactStore + WorkerStore + ?Sized
{
}

/// A store that hands one concern `C` (`dyn JobStore`, `dyn ToolStore`...) to
/// another: a test double that changes a few methods of one concern implements
/// that concern and forwards the others to a real store, one line each.
pub trait Forward<C: ?Sized> {
    fn to(&self) -> &C;
}

#[async_trait]
impl<T: Forward<dyn JobStore> + Send + Sync> JobStore for T {
    async fn create_job(&self, job: &JobRecord, slices: &[SliceSpec]) -> Result<(), PortError> {
        self.to().create_job(job, slices).await
    }
    async fn job(&self, id: &JobId) -> Result<Option<JobRecord>, PortError> {
        self.to().job(id).await
    }
    async fn move_job(
        &self,
        id: &JobId,
        from: JobStatus,
        to: JobStatus,
    ) -> Result<bool, PortError> {
        self.to().move_job(id, from, to).await
    }
    async fn end_job(
        &self,
        id: &JobId,
        status: JobStatus,
        reason: Option<&str>,
    ) -> Result<bool, PortError> {
        self.to().end_job(id, status, reason).await
    }
    async fn reserve_budget(
        &self,
        id: &JobId,
        amount: Micros,
        max: Micros,
    ) -> Result<bool, PortError> {
        self.to().reserve_budget(id, amount, max).await
    }
    async fn adjust_budget(&self, id: &JobId, delta: Micros) -> Result<(), PortError> {
        self.to().adjust_budget(id, delta).await
    }
    async fn spent(&self, id: &JobId) -> Result<Micros, PortError> {
        self.to().spent(id).await
    }
    async fn plan_job(
        &self,
        id: &JobId,
        slices: &mut PlannedSlices<'_>,
        status: JobStatus,
    ) -> Result<bool, PortError> {
        self.to().plan_job(id, slices, status).await
    }
    async fn jobs_with_status(
        &self,
        statuses: &[JobStatus],
        limit: u32,
    ) -> Result<Vec<JobRecord>, PortError> {
        self.to().jobs_with_status(statuses, limit).await
    }
    async fn job_by_idempotency_key(
        &self,
        owner: &JobOwner,
        key: &str,
    ) -> Result<Option<JobRecord>, PortError> {
        self.to().job_by_idempotency_key(owner, key).await
    }
    async fn tenant_usage(
        &self,
        tenant: &str,
        since_ms: i64,
    ) -> Result<crate::tenant::Usage, PortError> {
        self.to().tenant_usage(tenant, since_ms).await
    }
    async fn expired_jobs(
        &self,
        now_ms: i64,
        default_ms: i64,
        limit: u32,
    ) -> Result<Vec<JobId>, PortError> {
        self.to().expired_jobs(now_ms, default_ms, limit).await
    }
    async fn purge_job(&self, id: &JobId, batch: u32) -> Result<u64, PortError> {
        self.to().purge_job(id, batch).await
    }
    async fn job_rows(&self, id: &JobId) -> Result<Vec<(&'static str, u64)>, PortError> {
        self.to().job_rows(id).await
    }
    async fn cost_months(&self) -> Result<Vec<CostMonth>, PortError> {
        self.to().cost_months().await
    }
    async fn keep_partitions(&self, now_ms: i64) -> Result<Partitions, PortError> {
        self.to().keep_partitions(now_ms).await
    }
    async fn ping(&self) -> Result<(), PortError> {
        self.to().ping().await
    }
}

#[async_trait]
impl<T: Forward<dyn SliceStore> + Send + Sync> SliceStore for T {
    async fn open_slices_page(
        &self,
        id: &JobId,
        after: Option<&SliceId>,
        limit: u32,
    ) -> Result<Vec<SliceSpec>, PortError> {
        self.to().open_slices_page(id, after, limit).await
    }
    async fn record_outcome(
        &self,
        job: &JobId,
        slice: &SliceId,
        outcome: &SliceOutcome,
    ) -> Result<Recorded, PortError> {
        self.to().record_outcome(job, slice, outcome).await
    }
    async fn record_costs(
        &self,
        job: &JobId,
        slice: &SliceId,
        costs: &[CostEntry],
        calls: u64,
    ) -> Result<u64, PortError> {
        self.to().record_costs(job, slice, costs, calls).await
    }
    async fn save_progress(
        &self,
        job: &JobId,
        slice: &SliceId,
        progress: &Progress,
    ) -> Result<(), PortError> {
        self.to().save_progress(job, slice, progress).await
    }
    async fn progress(&self, job: &JobId, slice: &SliceId) -> Result<Option<Progress>, PortError> {
        self.to().progress(job, slice).await
    }
    async fn counts(&self, id: &JobId) -> Result<JobCounts, PortError> {
        self.to().counts(id).await
    }
    async fn has_open_slices(&self, id: &JobId) -> Result<bool, PortError> {
        self.to().has_open_slices(id).await
    }
    async fn items(&self, id: &JobId) -> Result<Vec<Item>, PortError> {
        self.to().items(id).await
    }
    async fn rejections(&self, id: &JobId) -> Result<Vec<Rejection>, PortError> {
        self.to().rejections(id).await
    }
    async fn failed_slices(&self, id: &JobId, limit: u32) -> Result<Vec<FailedSlice>, PortError> {
        self.to().failed_slices(id, limit).await
    }
    async fn add_slices(&self, id: &JobId, slices: &[SliceSpec]) -> Result<u64, PortError> {
        self.to().add_slices(id, slices).await
    }
    async fn slices_to_publish(
        &self,
        id: &JobId,
        stale_before_ms: i64,
        limit: u32,
    ) -> Result<Vec<SliceSpec>, PortError> {
        self.to()
            .slices_to_publish(id, stale_before_ms, limit)
            .await
    }
    async fn mark_published(
        &self,
        id: &JobId,
        slices: &[SliceId],
        at_ms: i64,
    ) -> Result<(), PortError> {
        self.to().mark_published(id, slices, at_ms).await
    }
    async fn items_page(
        &self,
        id: &JobId,
        after: Option<&RowCursor>,
        limit: u32,
    ) -> Result<Vec<Item>, PortError> {
        self.to().items_page(id, after, limit).await
    }
    async fn rejections_page(
        &self,
        id: &JobId,
        after: Option<&RowCursor>,
        limit: u32,
    ) -> Result<Vec<Rejection>, PortError> {
        self.to().rejections_page(id, after, limit).await
    }
    async fn trace_page(
        &self,
        id: &JobId,
        after: Option<&RowCursor>,
        limit: u32,
    ) -> Result<Vec<TraceStep>, PortError> {
        self.to().trace_page(id, after, limit).await
    }
}

#[async_trait]
impl<T: Forward<dyn ApprovalStore> + Send + Sync> ApprovalStore for T {
    async fn request_approval(&self, approval: &Approval) -> Result<(), PortError> {
        self.to().request_approval(approval).await
    }
    async fn decide_approval(
        &self,
        id: &JobId,
        approved: bool,
        by: &str,
    ) -> Result<Option<Approval>, PortError> {
        self.to().decide_approval(id, approved, by).await
    }
    async fn approvals(
        &self,
        pending_only: bool,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>, PortError> {
        self.to().approvals(pending_only, limit).await
    }
    async fn approval(&self, id: i64) -> Result<Option<ApprovalRecord>, PortError> {
        self.to().approval(id).await
    }
    async fn pending_approvals(&self) -> Result<u64, PortError> {
        self.to().pending_approvals().await
    }
    async fn expire_approvals(
        &self,
        now_ms: i64,
        ttl_ms: Option<i64>,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>, PortError> {
        self.to().expire_approvals(now_ms, ttl_ms, limit).await
    }
    async fn claim_approval_notices(
        &self,
        now_ms: i64,
        lease_ms: i64,
        ttl_ms: Option<i64>,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>, PortError> {
        self.to()
            .claim_approval_notices(now_ms, lease_ms, ttl_ms, limit)
            .await
    }
    async fn approval_notice_sent(
        &self,
        id: i64,
        notice: ApprovalNotice,
        at_ms: i64,
    ) -> Result<(), PortError> {
        self.to().approval_notice_sent(id, notice, at_ms).await
    }
    async fn approval_notice_failed(&self, id: i64, retry_at_ms: i64) -> Result<(), PortError> {
        self.to().approval_notice_failed(id, retry_at_ms).await
    }
}

#[async_trait]
impl<T: Forward<dyn ToolStore> + Send + Sync> ToolStore for T {
    async fn tool_pins(&self) -> Result<Vec<ToolPin>, PortError> {
        self.to().tool_pins().await
    }
    async fn save_pins(&self, changes: &[PinChange]) -> Result<(), PortError> {
        self.to().save_pins(changes).await
    }
    async fn decide_tool_approval(
        &self,
        id: i64,
        approved: bool,
        by: &str,
    ) -> Result<Option<ApprovalRecord>, PortError> {
        self.to().decide_tool_approval(id, approved, by).await
    }
    async fn tool_call_approval(
        &self,
        tool: &str,
        args_digest: &str,
        reason: &str,
        detail: &Value,
    ) -> Result<(i64, Option<bool>), PortError> {
        self.to()
            .tool_call_approval(tool, args_digest, reason, detail)
            .await
    }
    async fn record_audit(&self, rows: &[AuditRecord]) -> Result<(), PortError> {
        self.to().record_audit(rows).await
    }
    async fn audit_page(
        &self,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(i64, AuditRecord)>, PortError> {
        self.to().audit_page(after, limit).await
    }
    async fn embeddings(
        &self,
        model: &str,
        keys: &[String],
    ) -> Result<Vec<(String, Vec<f32>)>, PortError> {
        self.to().embeddings(model, keys).await
    }
    async fn save_embeddings(
        &self,
        model: &str,
        rows: &[(String, Vec<f32>)],
    ) -> Result<(), PortError> {
        self.to().save_embeddings(model, rows).await
    }
    async fn guard_verdict(
        &self,
        model: &str,
        hash: &str,
    ) -> Result<Option<GuardVerdict>, PortError> {
        self.to().guard_verdict(model, hash).await
    }
    async fn save_guard_verdict(&self, v: &GuardVerdict) -> Result<(), PortError> {
        self.to().save_guard_verdict(v).await
    }
    async fn tool_listings(&self) -> Result<Vec<ToolListing>, PortError> {
        self.to().tool_listings().await
    }
    async fn save_tool_listing(&self, listing: &ToolListing) -> Result<(), PortError> {
        self.to().save_tool_listing(listing).await
    }
}

#[async_trait]
impl<T: Forward<dyn ArtifactStore> + Send + Sync> ArtifactStore for T {
    async fn put_artifact(&self, a: &Artifact) -> Result<(), PortError> {
        self.to().put_artifact(a).await
    }
    async fn artifacts(&self, job: &JobId) -> Result<Vec<ArtifactInfo>, PortError> {
        self.to().artifacts(job).await
    }
    async fn artifact(&self, job: &JobId, name: &str) -> Result<Option<Artifact>, PortError> {
        self.to().artifact(job, name).await
    }
    async fn replay(&self, key: &str) -> Result<Option<Value>, PortError> {
        self.to().replay(key).await
    }
    async fn put_replay(&self, key: &str, value: &Value) -> Result<(), PortError> {
        self.to().put_replay(key, value).await
    }
    async fn drop_replay(&self, key: &str) -> Result<(), PortError> {
        self.to().drop_replay(key).await
    }
}

#[async_trait]
impl<T: Forward<dyn WorkerStore> + Send + Sync> WorkerStore for T {
    async fn report_worker(&self, w: &WorkerInfo) -> Result<(), PortError> {
        self.to().report_worker(w).await
    }
    async fn workers(&self, since_ms: i64) -> Result<Vec<WorkerInfo>, PortError> {
        self.to().workers(since_ms).await
    }
}
