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
    Item, JobCounts, JobId, JobStatus, Rejection, SliceError, SliceId, SliceOutcome, SliceSpec,
    TraceStep,
};
use crate::retry::ErrorClass;

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

/// What a provider offers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDescriptor {
    /// Namespaced: `brightdata.search`.
    pub name: String,
    pub description: String,
    pub input_schema: Value,
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
    fn tools(&self) -> Vec<ToolDescriptor>;
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
}

/// An `Idempotency-Key` and what it was first used for.
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
    /// What is asked: `job_budget` for now.
    pub kind: String,
    #[serde(flatten)]
    pub approval: Approval,
    pub requested_ms: i64,
    pub decided_ms: Option<i64>,
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

#[async_trait]
pub trait Store: Send + Sync {
    /// Stores a job and its planned slices, all or nothing.
    async fn create_job(&self, job: &JobRecord, slices: &[SliceSpec]) -> Result<(), PortError>;
    async fn job(&self, id: &JobId) -> Result<Option<JobRecord>, PortError>;
    async fn set_job_status(
        &self,
        id: &JobId,
        status: JobStatus,
        reason: Option<&str>,
    ) -> Result<(), PortError>;
    /// Ends a job with a terminal `status`, unless it has already ended: `false`
    /// (nothing written) then, so a cancel and a finish racing each other cannot
    /// overwrite one another.
    async fn end_job(
        &self,
        id: &JobId,
        status: JobStatus,
        reason: Option<&str>,
    ) -> Result<bool, PortError>;
    /// Slices not yet terminal.
    async fn open_slices(&self, id: &JobId) -> Result<Vec<SliceSpec>, PortError>;
    /// Writes a slice's items, rejections, trace, costs, children and status in one
    /// transaction; does nothing if the slice is already terminal.
    async fn record_outcome(
        &self,
        job: &JobId,
        slice: &SliceId,
        outcome: &SliceOutcome,
    ) -> Result<Recorded, PortError>;
    async fn counts(&self, id: &JobId) -> Result<JobCounts, PortError>;
    /// Whether any slice of the job is not yet terminal. Called after every burst
    /// of finished slices, so an adapter whose `counts` is costly answers it
    /// without counting.
    async fn has_open_slices(&self, id: &JobId) -> Result<bool, PortError> {
        Ok(self.counts(id).await?.slices_open() > 0)
    }
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
    /// Valid items in slice order.
    async fn items(&self, id: &JobId) -> Result<Vec<Item>, PortError>;
    async fn rejections(&self, id: &JobId) -> Result<Vec<Rejection>, PortError>;
    async fn failed_slices(&self, id: &JobId, limit: u32) -> Result<Vec<FailedSlice>, PortError>;
    async fn request_approval(&self, approval: &Approval) -> Result<(), PortError>;
    /// Records a decision on a pending approval; `None` if there was none pending.
    async fn decide_approval(
        &self,
        id: &JobId,
        approved: bool,
        by: &str,
    ) -> Result<Option<Approval>, PortError>;

    // --- the deployed shape: planning by the scheduler, publication, reading pages

    /// Stores the planned slices of a `pending` job and moves it to `status`, in one
    /// transaction. `false` (and nothing written) when the job is not `pending`.
    /// The slices count as published now: the scheduler publishes every open slice
    /// of a `queued` job before the job leaves `queued`, so no slice needs a mark.
    async fn plan_job(
        &self,
        id: &JobId,
        slices: &[SliceSpec],
        status: JobStatus,
    ) -> Result<bool, PortError>;
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
    /// Jobs in any of these statuses, oldest first, at most `limit`.
    async fn jobs_with_status(
        &self,
        statuses: &[JobStatus],
        limit: u32,
    ) -> Result<Vec<JobRecord>, PortError>;
    /// The job first stored with this idempotency key.
    async fn job_by_idempotency_key(&self, key: &str) -> Result<Option<JobRecord>, PortError>;
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
    /// Approvals, newest first; only pending ones when `pending_only`.
    async fn approvals(
        &self,
        pending_only: bool,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>, PortError>;
    async fn approval(&self, id: i64) -> Result<Option<ApprovalRecord>, PortError>;
    /// Whether the backend answers, for readiness probes.
    async fn ping(&self) -> Result<(), PortError>;
}
