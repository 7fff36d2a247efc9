//! The worker: pulls slices, runs a sub-agent per slice, writes what it produced.
//!
//! Stateless: everything it needs comes with the slice message or from the store
//! (the job's spec, loaded once per job and kept in [`JobContexts`]). Per delivery:
//!
//! 1. Pull a slice; skip it (term) if its job is already over.
//! 2. Run the sub-agent ([`agent`]): deterministic here: a search slice calls
//!    `brightdata.web_search` and yields its organic rows as `serp` items and page
//!    slices for its top results; a page slice calls `brightdata.fetch_page`, extracts
//!    one item and validates it on its own.
//! 3. Write the outcome in one store transaction keyed by the slice id (a
//!    redelivery writes only its costs), publish new child slices, emit
//!    `slice.finished`, ack. A store or queue failure naks with a delay; the
//!    queue's delivery cap then hands the slice to the scheduler as a dead letter.
//!    The costs of an attempt whose outcome is not written go into the ledger on
//!    their own, kept in [`ledger::Unwritten`] while the store is down.
//!
//! Concurrency is bounded: `concurrency` loops pull in parallel.

pub mod agent;
pub mod browse;
pub mod ledger;
pub mod models;
pub mod redact;
pub mod research;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use trawl_core::extract::Extractor;
use trawl_core::model::{JobId, JobStatus, SliceKind, SliceOutcome, now_ms};
use trawl_core::ports::{
    Delivery, Events, PortError, SliceFinished, SliceMessage, SliceQueue, Store,
};
use trawl_core::retry::RetryPolicy;
use trawl_core::spec::JobSpec;
use trawl_core::validate::ItemValidator;
use trawl_core::workers::{Capabilities, WorkerInfo};
use trawl_tools::{Budget, ToolLayer};

/// What a worker needs to run one job's slices.
pub struct JobContext {
    pub id: JobId,
    pub spec: JobSpec,
    pub extractor: Option<Extractor>,
    pub validator: ItemValidator,
    pub retry: RetryPolicy,
    pub budget: Budget,
}

/// Worker settings.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WorkerConfig {
    /// Slices run at the same time.
    pub concurrency: usize,
    /// First backoff delay of tool retries.
    pub retry_base_delay: Duration,
    /// Longest backoff delay, `Retry-After` included.
    pub retry_max_delay: Duration,
    /// Delay before a slice whose outcome could not be written is delivered again.
    pub nak_delay: Duration,
    /// How often a slice in progress tells the queue it is still being worked on,
    /// so a slice that waits out long retries is not redelivered meanwhile. Keep it
    /// well below the queue's ack wait.
    pub heartbeat: Duration,
    /// How often a job's status is read again, so slices of a job cancelled
    /// meanwhile are skipped.
    pub status_recheck: Duration,
    /// Delays before delivering again a slice whose tool calls failed transiently
    /// after their retries, by delivery (the last entry repeats). Empty: such a
    /// slice is recorded failed at once. Otherwise it is recorded failed, with its
    /// last error, only on its last delivery, so an upstream outage shorter than
    /// the schedule loses nothing.
    pub redeliver: Vec<Duration>,
    /// After a stop is asked for, how long slices in flight may take to finish;
    /// those still running then are handed back to the queue (nak).
    pub stop_grace: Duration,
    /// Keep the job's budget reservations in the store, shared by every worker
    /// process (the deployed shape). Off, they are counted in this process only,
    /// which is exact when it is the only one spending for the job.
    pub shared_budget: bool,
    /// How often the worker reports its pool and capabilities to the store
    /// (`trawl workers`, and what submissions are checked against).
    pub report_every: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            concurrency: 32,
            retry_base_delay: Duration::from_millis(100),
            retry_max_delay: Duration::from_secs(30),
            nak_delay: Duration::from_secs(1),
            heartbeat: Duration::from_secs(10),
            status_recheck: Duration::from_secs(2),
            redeliver: Vec::new(),
            stop_grace: Duration::from_secs(30),
            shared_budget: false,
            report_every: Duration::from_secs(30),
        }
    }
}

impl WorkerConfig {
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    pub fn with_retry_delays(mut self, base: Duration, max: Duration) -> Self {
        self.retry_base_delay = base;
        self.retry_max_delay = max;
        self
    }

    pub fn with_heartbeat(mut self, d: Duration) -> Self {
        self.heartbeat = d.max(Duration::from_millis(1));
        self
    }

    pub fn with_nak_delay(mut self, d: Duration) -> Self {
        self.nak_delay = d;
        self
    }

    pub fn with_status_recheck(mut self, d: Duration) -> Self {
        self.status_recheck = d;
        self
    }

    pub fn with_redeliver(mut self, delays: Vec<Duration>) -> Self {
        self.redeliver = delays;
        self
    }

    pub fn with_stop_grace(mut self, d: Duration) -> Self {
        self.stop_grace = d;
        self
    }

    pub fn with_shared_budget(mut self, shared: bool) -> Self {
        self.shared_budget = shared;
        self
    }
}

/// Job contexts by id, loaded from the store on first sight. Concurrent first
/// sights of one job share one load; a job that is over is remembered as over.
/// The job's status is read again every `status_recheck`, so a job cancelled while
/// its slices run has the rest skipped.
#[derive(Default)]
pub struct JobContexts {
    /// Each job's entry and when a slice of it last came by.
    map: Mutex<HashMap<JobId, (Arc<ContextEntry>, Instant)>>,
}

/// A long-lived worker sees many jobs: above this many entries, those idle for
/// [`CONTEXT_IDLE`] are dropped (a job that comes back is loaded again).
const CONTEXT_SWEEP_ABOVE: usize = 64;
const CONTEXT_IDLE: Duration = Duration::from_secs(10 * 60);

#[derive(Default)]
struct ContextEntry {
    /// The context, loaded once; `None` when the job was over at load.
    cell: OnceCell<Option<Arc<JobContext>>>,
    /// When the status was last read; `None` until the first load.
    checked: Mutex<Option<Instant>>,
    /// Seen over (cancelled, finished) at a recheck.
    over: AtomicBool,
}

impl JobContexts {
    /// The job's context, or `None` when the job is over or unknown (its slices are
    /// skipped).
    async fn get(
        &self,
        store: &Arc<dyn Store>,
        id: &JobId,
        cfg: &WorkerConfig,
    ) -> Result<Option<Arc<JobContext>>, PortError> {
        let entry = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            if map.len() > CONTEXT_SWEEP_ABOVE {
                map.retain(|_, (_, used)| now.duration_since(*used) < CONTEXT_IDLE);
            }
            let slot = map
                .entry(id.clone())
                .or_insert_with(|| (Arc::default(), now));
            slot.1 = now;
            slot.0.clone()
        };
        let ctx = entry
            .cell
            .get_or_try_init(|| async {
                let ctx = load_context(store, id, cfg).await?;
                *entry.checked.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                Ok::<_, PortError>(ctx)
            })
            .await?
            .clone();
        let Some(ctx) = ctx else { return Ok(None) };
        if entry.over.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let due = {
            let mut checked = entry.checked.lock().unwrap_or_else(|p| p.into_inner());
            let due = checked.is_none_or(|at| at.elapsed() >= cfg.status_recheck);
            if due {
                *checked = Some(Instant::now());
            }
            due
        };
        if due {
            let live = store
                .job(id)
                .await?
                .is_some_and(|j| !j.status.is_terminal());
            if !live {
                entry.over.store(true, Ordering::Relaxed);
                return Ok(None);
            }
        }
        Ok(Some(ctx))
    }
}

async fn load_context(
    store: &Arc<dyn Store>,
    id: &JobId,
    cfg: &WorkerConfig,
) -> Result<Option<Arc<JobContext>>, PortError> {
    let Some(job) = store.job(id).await? else {
        return Ok(None);
    };
    if job.status.is_terminal() || job.status == JobStatus::AwaitingApproval {
        return Ok(None);
    }
    let spec = JobSpec::from_value(job.spec)
        .map_err(|e| PortError::Corrupt(format!("stored spec of {id}: {e}")))?;
    let validator = match &spec.schema {
        Some(s) => ItemValidator::new(s).map_err(PortError::Corrupt)?,
        None => ItemValidator::accept_all(),
    };
    let budget = if cfg.shared_budget {
        Budget::shared(spec.budget.max, id.clone(), store.clone())
    } else {
        Budget::new(spec.budget.max, store.spent(id).await?)
    };
    Ok(Some(Arc::new(JobContext {
        id: id.clone(),
        extractor: spec.extract.as_ref().map(Extractor::new),
        validator,
        retry: RetryPolicy::new(spec.max_attempts)
            .with_delays(cfg.retry_base_delay, cfg.retry_max_delay),
        budget,
        spec,
    })))
}

/// A worker process's slice loop.
pub struct Worker {
    queue: Arc<dyn SliceQueue>,
    store: Arc<dyn Store>,
    events: Arc<dyn Events>,
    tools: Arc<ToolLayer>,
    jobs: JobContexts,
    config: WorkerConfig,
    /// The models research slices run on; `None`: such slices fail with
    /// `no_model`.
    models: Option<Arc<models::Models>>,
    /// Where browse slices open browsers; `None`: such slices fail with
    /// `no_browser`.
    browsers: Option<Arc<browse::Browsers>>,
    /// Its id in the store's list of workers, and when it was made.
    id: String,
    started_ms: i64,
    /// Costs of attempts whose outcome was not written, until the store takes them.
    unwritten: ledger::Unwritten,
}

impl Worker {
    pub fn new(
        queue: Arc<dyn SliceQueue>,
        store: Arc<dyn Store>,
        events: Arc<dyn Events>,
        tools: Arc<ToolLayer>,
        config: WorkerConfig,
    ) -> Worker {
        Worker {
            queue,
            store,
            events,
            tools,
            jobs: JobContexts::default(),
            config,
            models: None,
            browsers: None,
            id: worker_id(),
            unwritten: ledger::Unwritten::default(),
            started_ms: now_ms(),
        }
    }

    /// Where browse slices open their browsers (an isolated pool's workers).
    pub fn with_browsers(mut self, browsers: Arc<browse::Browsers>) -> Worker {
        self.browsers = Some(browsers);
        self
    }

    /// The models research, agent and report slices run on.
    /// The model providers research slices and browse steps run on; `None`:
    /// such slices fail with `no_model`.
    pub fn with_models(mut self, models: Option<Arc<models::Models>>) -> Worker {
        self.models = models;
        self
    }

    /// What this worker reports to the store: its pool, its model providers and
    /// whether it can open a browser.
    pub fn report(&self) -> WorkerInfo {
        WorkerInfo {
            id: self.id.clone(),
            pool: self.tools.pool(),
            capabilities: Capabilities {
                models: self
                    .models
                    .as_ref()
                    .map(|m| m.providers())
                    .unwrap_or_default(),
                browser: self.browsers.as_ref().is_some_and(|b| b.available()),
            },
            concurrency: u32::try_from(self.config.concurrency).unwrap_or(u32::MAX),
            started_ms: self.started_ms,
            heartbeat_ms: now_ms(),
        }
    }

    /// Stores [`Worker::report`]; `run` does it at once and every
    /// `report_every`.
    pub async fn report_to_store(&self) -> Result<(), PortError> {
        self.store.report_worker(&self.report()).await
    }

    /// Reports to the store every `report_every` until `cancel`. A report that
    /// cannot be written is logged: slices run anyway.
    async fn keep_reporting(&self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(self.config.report_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = tick.tick() => {
                    if let Err(e) = self.report_to_store().await {
                        tracing::warn!(error = %e, worker = %self.id, "worker report not stored");
                    }
                }
            }
        }
    }

    /// Runs `concurrency` pull loops until `cancel` fires. Then no new slice is
    /// pulled; slices in flight get `stop_grace` to finish, and those still running
    /// after it are handed back to the queue, to be delivered again elsewhere.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        let tracker = TaskTracker::new();
        let abort = CancellationToken::new();
        {
            let (me, cancel) = (self.clone(), cancel.clone());
            tracker.spawn(async move { me.keep_reporting(cancel).await });
        }
        // Costs kept while the store was down are written when it answers; the
        // task outlives the slices (their last costs may be kept at the end).
        let ledger_stop = CancellationToken::new();
        let ledger = {
            let (me, stop) = (self.clone(), ledger_stop.clone());
            tokio::spawn(async move {
                me.unwritten
                    .run(me.store.as_ref(), UNWRITTEN_MAX_WAIT, stop)
                    .await;
            })
        };
        for _ in 0..self.config.concurrency {
            let (me, cancel, abort) = (self.clone(), cancel.clone(), abort.clone());
            tracker.spawn(async move {
                loop {
                    // Biased: once a stop is asked for, a loop whose slice just
                    // ended must not take another one that happens to be ready.
                    let delivery = tokio::select! {
                        biased;
                        () = cancel.cancelled() => break,
                        d = me.queue.pull() => d,
                    };
                    match delivery {
                        Ok(d) => me.handle(d, &abort).await,
                        Err(e) => {
                            tracing::warn!(error = %e, "pull failed");
                            tokio::select! {
                                () = cancel.cancelled() => break,
                                () = tokio::time::sleep(me.config.nak_delay) => {}
                            }
                        }
                    }
                }
            });
        }
        tracker.close();
        cancel.cancelled().await;
        if tokio::time::timeout(self.config.stop_grace, tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(grace = ?self.config.stop_grace, "slices still running at the end of the stop grace; handing them back");
            abort.cancel();
            tracker.wait().await;
        }
        ledger_stop.cancel();
        let _ = ledger.await;
        if !self.unwritten.is_empty() {
            let last = tokio::time::timeout(
                UNWRITTEN_LAST_TRY,
                self.unwritten.flush(self.store.as_ref()),
            )
            .await;
            if !matches!(last, Ok(Ok(()))) {
                tracing::error!(
                    rows = self.unwritten.len(),
                    "worker stopping with cost rows the store did not take; they are not in the ledger"
                );
            }
        }
    }

    /// Cost rows waiting for the store (see [`ledger`]).
    pub fn unwritten_costs(&self) -> usize {
        self.unwritten.len()
    }

    /// Runs one delivered slice: traced when its message carries a sampled trace,
    /// else without exporting a span (the job was left out by the sampler).
    async fn handle(&self, d: Delivery, abort: &CancellationToken) {
        let sampled = trawl_telemetry::propagation::is_sampled(d.traceparent.as_deref());
        let work = self.handle_in_span(d, abort);
        if sampled {
            return work.await;
        }
        match trawl_telemetry::untraced(work) {
            Ok(untraced) => untraced.await,
            Err(work) => work.await,
        }
    }

    async fn handle_in_span(&self, d: Delivery, abort: &CancellationToken) {
        let msg = d.message.clone();
        let span = tracing::info_span!(
            "slice",
            otel.name = %format_args!("slice {}", msg.slice.kind.name()),
            job_id = %msg.job_id,
            slice_id = %msg.slice.id,
            kind = msg.slice.kind.name(),
            delivery = d.delivery,
            outcome = tracing::field::Empty,
            items.valid = tracing::field::Empty,
            items.rejected = tracing::field::Empty,
        );
        // The span that published the slice (the scheduler's planning, or the
        // parent slice that found it) is this one's parent: one job, one trace.
        trawl_telemetry::propagation::set_parent(&span, d.traceparent.as_deref());
        async {
            let work = self.process(&d);
            tokio::pin!(work);
            let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + self.config.heartbeat, self.config.heartbeat);
            let result = loop {
                tokio::select! {
                    r = &mut work => break Some(r),
                    () = abort.cancelled() => break None,
                    _ = beat.tick() => {
                        if let Err(e) = d.acker.in_progress().await {
                            tracing::warn!(error = %e, "in_progress failed");
                        }
                    }
                }
            };
            let verdict = match result {
                Some(Ok(Processed::Done)) => d.acker.ack().await,
                Some(Ok(Processed::Again(delay))) => {
                    tracing::info!(?delay, "tool calls failed transiently; delivering the slice again later");
                    d.acker.nak(delay).await
                }
                Some(Err(e)) => {
                    let (job_id, slice_id) = (&msg.job_id, &msg.slice.id);
                    if e.recorded() {
                        tracing::warn!(%job_id, %slice_id, step = e.step(), error = %e, last = d.is_last(),
                            "slice recorded but not announced; delivering again later");
                    } else {
                        tracing::warn!(%job_id, %slice_id, step = e.step(), error = %e, last = d.is_last(),
                            "slice not recorded; delivering again later");
                    }
                    d.acker.nak(self.config.nak_delay).await
                }
                None => {
                    tracing::info!("worker stopping; slice handed back to the queue");
                    d.acker.nak(Duration::ZERO).await
                }
            };
            if let Err(e) = verdict {
                tracing::warn!(error = %e, "settling the delivery failed; the queue delivers it again after its ack wait");
            }
        }
        .instrument(span)
        .await
    }

    /// Runs one slice and records it, or asks for it to be delivered again. `Err`
    /// when its job could not be read, its outcome not written, or its children or
    /// end not announced.
    async fn process(&self, d: &Delivery) -> Result<Processed, FinishError> {
        let msg = &d.message;
        let Some(job) = self
            .jobs
            .get(&self.store, &msg.job_id, &self.config)
            .await
            .map_err(FinishError::Load)?
        else {
            tracing::debug!("job is over or unknown; skipping slice");
            return Ok(Processed::Done);
        };
        let (outcome, transient) = if matches!(msg.slice.kind, SliceKind::Browse { .. }) {
            browse::run_slice(
                &job,
                &self.tools,
                self.models.as_deref(),
                self.store.as_ref(),
                self.browsers.as_deref(),
                &msg.slice,
            )
            .await
        } else if msg.slice.kind.is_model_driven() {
            research::run_slice(
                &job,
                &self.tools,
                self.models.as_deref(),
                self.store.as_ref(),
                &msg.slice,
            )
            .await
        } else {
            agent::run_slice(&job, &self.tools, &msg.slice).await
        };
        if transient && !d.is_last() && !self.config.redeliver.is_empty() {
            // Not written: the calls this attempt was billed for go into the
            // ledger on their own.
            self.unwritten
                .write(
                    self.store.as_ref(),
                    &msg.job_id,
                    &msg.slice.id,
                    &outcome.costs,
                    upstream_calls(&outcome),
                )
                .await;
            let i = (d.delivery.max(1) as usize - 1).min(self.config.redeliver.len() - 1);
            return Ok(Processed::Again(self.config.redeliver[i]));
        }
        let written = match finish_slice(
            self.store.as_ref(),
            self.queue.as_ref(),
            self.events.as_ref(),
            &msg.job_id,
            &msg.slice.id,
            &outcome,
        )
        .await
        {
            Ok(written) => written,
            Err(e) => {
                if matches!(e, FinishError::Record(_)) {
                    // The next delivery is a new attempt: this one's costs are
                    // kept until the store takes them.
                    self.unwritten.keep(
                        &msg.job_id,
                        &msg.slice.id,
                        &outcome.costs,
                        upstream_calls(&outcome),
                    );
                }
                return Err(e);
            }
        };
        // Validation, on the slice's span: each item is checked on its own.
        let span = tracing::Span::current();
        span.record("outcome", outcome.status().as_str());
        span.record("items.valid", outcome.items.len());
        span.record("items.rejected", outcome.rejections.len());
        if written {
            record_metrics(msg.slice.kind.name(), &outcome);
        }
        Ok(Processed::Done)
    }
}

/// A worker's id, unique among the processes of a deployment and the workers
/// of one process: host name, process id, and a count within the process.
fn worker_id() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}/{}/{n}", std::process::id())
}

/// How long the ledger's writer waits between tries at most while the store is down.
const UNWRITTEN_MAX_WAIT: Duration = Duration::from_secs(5);
/// How long a stopping worker tries to write the costs it still keeps.
const UNWRITTEN_LAST_TRY: Duration = Duration::from_secs(5);

/// The upstream calls of an attempt: its trace steps that were not cache answers.
fn upstream_calls(outcome: &SliceOutcome) -> u64 {
    outcome.trace.iter().filter(|t| !t.cache_hit).count() as u64
}

/// The step of running and finishing a slice that failed.
#[derive(Debug, thiserror::Error)]
pub enum FinishError {
    /// The job's context could not be read; nothing ran.
    #[error("the job could not be read: {0}")]
    Load(PortError),
    /// The outcome was not written.
    #[error("the outcome was not written: {0}")]
    Record(PortError),
    /// The outcome was written; its new slices were not published.
    #[error("the outcome was written; its {children} new slices were not published: {error}")]
    Publish { children: usize, error: PortError },
    /// The outcome was written and its new slices published; they were not
    /// marked published (the scheduler's reconciliation publishes them again,
    /// and the queue drops the duplicates).
    #[error("the outcome was written and its new slices published; marking them failed: {0}")]
    Mark(PortError),
    /// The outcome was written; `slice.finished` was not emitted.
    #[error("the outcome was written; slice.finished was not emitted: {0}")]
    Announce(PortError),
}

impl FinishError {
    /// The failed step's name, for logs.
    pub fn step(&self) -> &'static str {
        match self {
            FinishError::Load(_) => "load job",
            FinishError::Record(_) => "write outcome",
            FinishError::Publish { .. } => "publish new slices",
            FinishError::Mark(_) => "mark new slices published",
            FinishError::Announce(_) => "emit slice.finished",
        }
    }

    /// Whether the outcome is in the store.
    pub fn recorded(&self) -> bool {
        !matches!(self, FinishError::Load(_) | FinishError::Record(_))
    }
}

/// What became of a delivery that did not fail.
enum Processed {
    /// Recorded (or skipped): ack.
    Done,
    /// Failed transiently: deliver again after this delay.
    Again(Duration),
}

/// Counts a slice whose outcome was written into the process's metrics.
pub fn record_metrics(kind: &'static str, outcome: &SliceOutcome) {
    trawl_telemetry::names::slice_recorded(
        kind,
        outcome.error.is_none(),
        outcome.items.len() as u64,
        outcome.rejections.len() as u64,
        outcome.costs.iter().map(|c| c.amount.0.max(0) as u64).sum(),
    );
}

/// Writes an outcome, publishes the new children and emits `slice.finished`.
/// True when this call wrote the outcome (false: a redelivery found it written,
/// and only its costs were added); the error names the step that failed.
pub async fn finish_slice(
    store: &dyn Store,
    queue: &dyn SliceQueue,
    events: &dyn Events,
    job_id: &JobId,
    slice_id: &trawl_core::model::SliceId,
    outcome: &SliceOutcome,
) -> Result<bool, FinishError> {
    let recorded = store
        .record_outcome(job_id, slice_id, outcome)
        .await
        .map_err(FinishError::Record)?;
    let children: Vec<SliceMessage> = recorded
        .new_children
        .iter()
        .map(|c| SliceMessage {
            job_id: job_id.clone(),
            slice: c.clone(),
        })
        .collect();
    queue
        .publish_many(&children)
        .await
        .map_err(|error| FinishError::Publish {
            children: children.len(),
            error,
        })?;
    if !recorded.new_children.is_empty() {
        // Unmarked children (this worker died before here) are published by the
        // scheduler's reconciliation; the queue drops the duplicate if both did.
        let ids: Vec<_> = recorded.new_children.iter().map(|c| c.id.clone()).collect();
        store
            .mark_published(job_id, &ids, now_ms())
            .await
            .map_err(FinishError::Mark)?;
    }
    if recorded.written {
        let children = recorded.new_children.len() as u64;
        events
            .slice_finished(SliceFinished::of(job_id, slice_id, outcome, children))
            .await
            .map_err(FinishError::Announce)?;
    }
    Ok(recorded.written)
}
