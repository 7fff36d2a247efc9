//! The scheduler as a long-running role: every job of the deployment, driven from
//! the store, with events to react sooner.
//!
//! The store is the source of truth; events only say "look at this job now". So
//! every step is a pass over what the store says, safe to repeat:
//!
//! - **plan**: a `pending` job (stored by the API) is planned (pure), its slices
//!   stored, and it moves to `queued`, or `awaiting_approval` with an approval
//!   asked for;
//! - **publish**: every open slice of a `queued` job is published before it turns
//!   `running` (its planned slices need no marks); of a `running` job, slices
//!   never handed to the queue (children whose worker died before publishing
//!   them), and, when the queue is empty, slices published long ago without an
//!   outcome, are published and marked; the queue drops duplicates by message id,
//!   so publishing twice is harmless;
//! - **finish**: a `running` job with no open slice ends `succeeded`, `partial` or
//!   `failed` with its reason;
//! - **dead letters**: a slice the queue gave up on is recorded failed
//!   (`delivery_limit`) through the same path a worker uses.
//!
//! Reconciliation runs every `reconcile_every` over every live job: a job created
//! while the scheduler was down, a slice stored by a worker that died before
//! publishing it, or an event lost on the way are all picked up there. Events for a
//! job (`job.created`, `approval.decided`, `slice.finished`) make the same passes
//! run for that job at once.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, debug, info, instrument, warn};
use trawl_core::cost::PriceTable;
use trawl_core::model::{JobId, JobStatus, SliceError, SliceOutcome, SliceSpec, now_ms};
use trawl_core::plan::{estimate, slices};
use trawl_core::ports::{
    DeadLetter, Event, Events, JobRecord, PLAN_BATCH, PortError, SliceFinished, SliceMessage,
    SliceQueue, Store,
};
use trawl_core::spec::JobSpec;

use crate::{approval_for, reason_for, report_due, research_failure};

/// How many slices one publication pass reads from the store at a time.
const PUBLISH_BATCH: u32 = 1_000;
/// A plan of at most this many slices is published from memory; a larger one is
/// read back from the store a page at a time.
const PUBLISH_FROM_MEMORY: usize = 20_000;
/// Live jobs looked at per reconciliation pass.
const JOBS_PER_PASS: u32 = 10_000;

/// Settings of the scheduler role.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ServiceConfig {
    /// How often every live job is looked at, events or not.
    pub reconcile_every: Duration,
    /// An open slice published this long ago without an outcome, while the queue
    /// holds no message at all, is published again: its message was lost.
    pub republish_after: Duration,
    /// How long after a `slice.finished` the job's counts are read, so a burst of
    /// events costs one read.
    pub settle: Duration,
    /// How long an ended job and what it yielded are kept, unless its spec says
    /// (`retention`); zero keeps every job.
    pub retention: Duration,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            reconcile_every: Duration::from_secs(2),
            republish_after: Duration::from_secs(60),
            settle: Duration::from_millis(100),
            retention: DEFAULT_RETENTION,
        }
    }
}

impl ServiceConfig {
    pub fn with_reconcile_every(mut self, d: Duration) -> Self {
        self.reconcile_every = d.max(Duration::from_millis(10));
        self
    }

    /// How long after a `slice.finished` the job is looked at (see
    /// [`ServiceConfig::settle`]).
    pub fn with_settle(mut self, d: Duration) -> Self {
        self.settle = d.max(Duration::from_millis(1));
        self
    }

    pub fn with_republish_after(mut self, d: Duration) -> Self {
        self.republish_after = d;
        self
    }

    /// See [`ServiceConfig::retention`].
    pub fn with_retention(mut self, d: Duration) -> Self {
        self.retention = d;
        self
    }
}

/// How long ended jobs are kept by default: 30 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
/// Rows deleted per statement; a pass deletes at most GC_BATCHES_PER_PASS of them.
const GC_BATCH: u32 = 2_000;
const GC_BATCHES_PER_PASS: u32 = 25;

/// Deletes what retention says is past (see [`JobStore::expired_jobs`]): up to
/// `max_batches` statements of `batch` rows, oldest ended jobs first. `retention`
/// is the default; jobs with their own keep to theirs. Returns the jobs deleted
/// whole and the rows deleted. Shared by the scheduler's passes and `trawl gc`.
pub async fn collect_garbage(
    store: &dyn Store,
    retention: Duration,
    now_ms: i64,
    batch: u32,
    max_batches: u32,
) -> Result<(u64, u64), PortError> {
    let default_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    let (mut jobs, mut rows, mut batches) = (0, 0, 0);
    for id in store.expired_jobs(now_ms, default_ms, max_batches).await? {
        loop {
            if batches >= max_batches {
                return Ok((jobs, rows));
            }
            batches += 1;
            match store.purge_job(&id, batch).await? {
                0 => break,
                n => rows += n,
            }
        }
        jobs += 1;
        info!(job_id = %id, "job past its retention deleted");
    }
    Ok((jobs, rows))
}

/// The scheduler role.
pub struct Service {
    pub store: Arc<dyn Store>,
    pub queue: Arc<dyn SliceQueue>,
    pub events: Arc<dyn Events>,
    pub prices: PriceTable,
    pub config: ServiceConfig,
}

impl Service {
    /// Runs until `cancel` fires. `events` carries the deployment's events; when it
    /// closes the scheduler goes on with reconciliation alone.
    pub async fn run(
        self: Arc<Self>,
        mut events: UnboundedReceiver<Event>,
        cancel: CancellationToken,
    ) {
        let dead = tokio::spawn(self.clone().dead_letters(cancel.clone()));
        let mut tick = tokio::time::interval(self.config.reconcile_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut settle = tokio::time::interval(self.config.settle);
        settle.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut dirty: HashSet<JobId> = HashSet::new();
        let mut events_open = true;
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                _ = tick.tick() => {
                    if let Err(e) = self.reconcile().await {
                        warn!(error = %e, "reconciliation failed; trying again next tick");
                    }
                }
                ev = events.recv(), if events_open => match ev {
                    None => {
                        warn!("event stream closed; going on with reconciliation alone");
                        events_open = false;
                    }
                    Some(Event::JobCreated { job_id }) | Some(Event::ApprovalDecided { job_id, .. }) => {
                        if let Err(e) = self.advance_id(&job_id).await {
                            warn!(%job_id, error = %e, "could not advance job; reconciliation will");
                        }
                    }
                    Some(Event::SliceFinished(f)) => { dirty.insert(f.job_id); }
                    Some(Event::JobCancelled { .. }) => {}
                },
                _ = settle.tick(), if !dirty.is_empty() => {
                    // Slices finished: the job may be over. Workers publish the
                    // children they add; reconciliation catches what they could not.
                    for job_id in std::mem::take(&mut dirty) {
                        if let Err(e) = self.finish_id(&job_id).await {
                            warn!(%job_id, error = %e, "could not finish job; reconciliation will");
                        }
                    }
                }
            }
        }
        dead.abort();
        let _ = dead.await;
    }

    /// One pass over every live job. (Its span and `advance`'s are debug-level:
    /// at info they would be exported as a new trace every pass.)
    #[instrument(level = "debug", skip_all)]
    pub async fn reconcile(&self) -> Result<(), PortError> {
        // One read of the queue's lag a pass: for the gauge and for republishing.
        let lag = self.queue.lag().await;
        self.gauges(lag.as_ref().ok().copied()).await;
        let now = now_ms();
        if !self.config.retention.is_zero()
            && let Err(e) = collect_garbage(
                self.store.as_ref(),
                self.config.retention,
                now,
                GC_BATCH,
                GC_BATCHES_PER_PASS,
            )
            .await
        {
            warn!(error = %e, "deleting jobs past their retention failed; next pass goes on");
        }
        // After retention, so a day it emptied is dropped in the same pass.
        match self.store.keep_partitions(now).await {
            Ok(p) if p.created + p.dropped > 0 => {
                info!(
                    made = p.created,
                    dropped = p.dropped,
                    "days of partitions made or dropped"
                );
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "partition upkeep failed; next pass goes on"),
        }
        let live = [JobStatus::Pending, JobStatus::Queued, JobStatus::Running];
        let jobs = self.store.jobs_with_status(&live, JOBS_PER_PASS).await?;
        if jobs.is_empty() {
            return Ok(());
        }
        let stale_before = self.stale_before_lag(lag?);
        for job in jobs {
            let id = job.id.clone();
            if let Err(e) = self.advance(job, stale_before).await {
                warn!(job_id = %id, error = %e, "could not advance job");
            }
        }
        Ok(())
    }

    /// Moves one job as far as the store allows now (plan, publish, finish), as
    /// its events do; `trawl run` plans its job with it before it waits.
    pub async fn advance_id(&self, id: &JobId) -> Result<(), PortError> {
        match self.store.job(id).await? {
            Some(job) => self.advance(job, self.stale_before().await?).await,
            None => {
                debug!(job_id = %id, "event for an unknown job; ignored");
                Ok(())
            }
        }
    }

    async fn finish_id(&self, id: &JobId) -> Result<(), PortError> {
        match self.store.has_open_slices(id).await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => {
                // Whether it is done is unknown: nothing failed to finish.
                debug!(job_id = %id, error = %e, "open slices not counted; reconciliation checks the job later");
                return Ok(());
            }
        }
        match self.store.job(id).await? {
            Some(job) if job.status == JobStatus::Running => self.finish_if_done(&job).await,
            _ => Ok(()),
        }
    }

    /// The queue's lag (when it could be read) and the approvals waiting, for
    /// `/metrics`.
    async fn gauges(&self, lag: Option<u64>) {
        if let Some(lag) = lag {
            trawl_telemetry::names::queue_lag(lag);
        }
        match self.store.pending_approvals().await {
            Ok(n) => trawl_telemetry::names::approvals_pending(n),
            Err(e) => debug!(error = %e, "pending approvals unknown"),
        }
    }

    /// Moves a job as far as the store allows: plan, publish, finish.
    #[instrument(level = "debug", skip_all, fields(job_id = %job.id, status = job.status.as_str()))]
    async fn advance(&self, job: JobRecord, stale_before: i64) -> Result<(), PortError> {
        let mut status = job.status;
        if matches!(status, JobStatus::Pending | JobStatus::Queued) {
            // Planning and the first publication continue the trace the API
            // began when the job was submitted; the slices published here carry
            // this span's context to the workers.
            let span = tracing::info_span!(
                "plan",
                otel.name = "plan job",
                job_id = %job.id,
                slices = tracing::field::Empty,
                status = tracing::field::Empty,
            );
            trawl_telemetry::propagation::set_parent(&span, job.traceparent.as_deref());
            status = self.plan_and_publish(&job, status).instrument(span).await?;
        }
        if status == JobStatus::Running {
            self.publish_open(&job.id, stale_before).await?;
            self.finish_if_done(&job).await?;
        }
        Ok(())
    }

    /// Plans a pending job and publishes the slices of a queued one.
    async fn plan_and_publish(
        &self,
        job: &JobRecord,
        mut status: JobStatus,
    ) -> Result<JobStatus, PortError> {
        let mut planned = None;
        if status == JobStatus::Pending {
            (status, planned) = self.plan_pending(job).await?;
        }
        if status == JobStatus::Queued {
            // Every open slice, however often this runs again: a job leaves
            // `queued` only once the queue has all of its slices.
            self.publish_all(&job.id, planned).await?;
            if !self
                .store
                .move_job(&job.id, JobStatus::Queued, JobStatus::Running)
                .await?
            {
                // Cancelled (or started by another scheduler) meanwhile.
                return Ok(self
                    .store
                    .job(&job.id)
                    .await?
                    .map_or(JobStatus::Failed, |j| j.status));
            }
            status = JobStatus::Running;
        }
        tracing::Span::current().record("status", status.as_str());
        Ok(status)
    }

    /// Publishes every open slice of a job (the queue drops those it has), in
    /// slice id order (workers then write their outcomes' rows in key order, not
    /// scattered over the indexes): `planned`, when this pass has just stored them
    /// and they are few (reading them back would only delay the first), else as
    /// the store has them, a page at a time, so a job of a million slices is never
    /// held at once.
    async fn publish_all(
        &self,
        id: &JobId,
        planned: Option<Vec<SliceSpec>>,
    ) -> Result<(), PortError> {
        if let Some(mut slices) = planned {
            slices.sort_unstable_by(|a, b| a.id.cmp(&b.id));
            self.publish(id, &slices).await?;
            debug!(job_id = %id, slices = slices.len(), "published");
            return Ok(());
        }
        let (mut after, mut published) = (None, 0);
        loop {
            let page = self
                .store
                .open_slices_page(id, after.as_ref(), PLAN_BATCH as u32)
                .await?;
            self.publish(id, &page).await?;
            published += page.len();
            if page.len() < PLAN_BATCH {
                break;
            }
            after = page.last().map(|s| s.id.clone());
        }
        debug!(job_id = %id, slices = published, "published");
        Ok(())
    }

    async fn publish(&self, id: &JobId, slices: &[SliceSpec]) -> Result<(), PortError> {
        for chunk in slices.chunks(PUBLISH_BATCH as usize) {
            let msgs: Vec<SliceMessage> = chunk
                .iter()
                .map(|slice| SliceMessage {
                    job_id: id.clone(),
                    slice: slice.clone(),
                })
                .collect();
            self.queue.publish_many(&msgs).await?;
        }
        Ok(())
    }

    /// Plans a job the API stored; returns its new status, and the slices when
    /// this call stored them and they are at most [`PUBLISH_FROM_MEMORY`]. The
    /// slices go to the store as they are planned, a batch at a time.
    async fn plan_pending(
        &self,
        job: &JobRecord,
    ) -> Result<(JobStatus, Option<Vec<SliceSpec>>), PortError> {
        let spec = match JobSpec::from_value(job.spec.clone()) {
            Ok(s) => s,
            Err(e) => {
                // The API validated it; a spec that no longer parses (a newer
                // writer, a manual edit) fails its job rather than blocking the loop.
                let reason = format!("stored spec no longer valid: {e}");
                self.store
                    .end_job(&job.id, JobStatus::Failed, Some(&reason))
                    .await?;
                return Ok((JobStatus::Failed, None));
            }
        };
        let estimate = estimate(&spec, &self.prices);
        let status = match approval_for(job, &spec, &estimate) {
            Some(approval) => {
                // Asked before the slices are stored: a crash in between leaves the
                // job pending, and planning it again replaces the pending approval.
                self.store.request_approval(&approval).await?;
                JobStatus::AwaitingApproval
            }
            None => JobStatus::Queued,
        };
        let mut rest = slices(&spec).peekable();
        let first: Vec<SliceSpec> = rest.by_ref().take(PUBLISH_FROM_MEMORY).collect();
        let kept = rest.peek().is_none().then(|| first.clone());
        let mut count = 0_usize;
        let mut all = first.into_iter().chain(rest).inspect(|_| count += 1);
        if !self.store.plan_job(&job.id, &mut all, status).await? {
            // Another scheduler (or an earlier pass) planned it first.
            let now = self.store.job(&job.id).await?;
            return Ok((now.map_or(JobStatus::Failed, |j| j.status), None));
        }
        drop(all);
        tracing::Span::current().record("slices", count);
        info!(job_id = %job.id, slices = count, status = status.as_str(), "job planned");
        Ok((status, kept))
    }

    /// Slices published before this are republished: one read of the queue for a
    /// whole pass. Only while the queue holds no message at all (a slice may be
    /// waiting its turn otherwise); never, as `i64::MIN`, while it holds some.
    async fn stale_before(&self) -> Result<i64, PortError> {
        Ok(self.stale_before_lag(self.queue.lag().await?))
    }

    /// [`Self::stale_before`] for a lag already read.
    fn stale_before_lag(&self, lag: u64) -> i64 {
        if lag == 0 {
            now_ms() - self.config.republish_after.as_millis() as i64
        } else {
            i64::MIN
        }
    }

    /// Publishes the job's open slices that the queue has not got: those never
    /// published (children whose worker died before publishing them), and, when
    /// the queue holds nothing at all, those published long ago (their message
    /// was lost; while the queue has messages, they may just be waiting their turn).
    async fn publish_open(&self, id: &JobId, stale_before: i64) -> Result<(), PortError> {
        loop {
            let slices = self
                .store
                .slices_to_publish(id, stale_before, PUBLISH_BATCH)
                .await?;
            if slices.is_empty() {
                return Ok(());
            }
            let n = slices.len();
            let ids: Vec<_> = slices.iter().map(|s| s.id.clone()).collect();
            let msgs: Vec<SliceMessage> = slices
                .into_iter()
                .map(|slice| SliceMessage {
                    job_id: id.clone(),
                    slice,
                })
                .collect();
            self.queue.publish_many(&msgs).await?;
            self.store.mark_published(id, &ids, now_ms()).await?;
            debug!(job_id = %id, slices = n, "published");
            if n < PUBLISH_BATCH as usize {
                return Ok(());
            }
        }
    }

    /// Ends a running job whose slices are all terminal.
    async fn finish_if_done(&self, job: &JobRecord) -> Result<(), PortError> {
        if self.store.has_open_slices(&job.id).await? {
            return Ok(());
        }
        let counts = self.store.counts(&job.id).await?;
        if counts.slices_open() > 0 {
            return Ok(());
        }
        let spec = JobSpec::from_value(job.spec.clone()).ok();
        // A research job's report is written once its sub-agents are done, from
        // what they found: added here, then the job finishes when it has run.
        if report_due(self.store.as_ref(), &job.id, spec.as_ref(), &counts)
            .await?
            .is_some()
        {
            info!(job_id = %job.id, "sub-agents done; report slice added");
            return self.publish_open(&job.id, i64::MIN).await;
        }
        let status = JobStatus::from_slices(counts.slices_succeeded, counts.slices_failed);
        let reason =
            match research_failure(self.store.as_ref(), &job.id, spec.as_ref(), status).await? {
                Some(r) => Some(r),
                None => reason_for(&counts, &spec),
            };
        // Only if it has not ended meanwhile (a cancel over the API).
        if !self
            .store
            .end_job(&job.id, status, reason.as_deref())
            .await?
        {
            return Ok(());
        }
        info!(job_id = %job.id, status = status.as_str(), items = counts.items_valid, "job finished");
        Ok(())
    }

    /// Records every dead letter as a failed slice.
    async fn dead_letters(self: Arc<Self>, cancel: CancellationToken) {
        loop {
            let dead = tokio::select! {
                () = cancel.cancelled() => return,
                d = self.queue.dead_letter() => d,
            };
            let failed = match dead {
                Ok(dead) => match self.fail_dead_letter(&dead).await {
                    Ok(()) => false,
                    Err(e) => {
                        warn!(job_id = %dead.message.job_id, slice_id = %dead.message.slice.id, error = %e,
                            "dead letter not recorded; reconciliation republishes its slice later");
                        true
                    }
                },
                Err(e) => {
                    // No dead letter was read: the queue could not be asked.
                    info!(error = %e, "dead letters not read; asking again later");
                    true
                }
            };
            if failed {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(self.config.reconcile_every) => {}
                }
            }
        }
    }

    async fn fail_dead_letter(&self, dead: &DeadLetter) -> Result<(), PortError> {
        let job_id = &dead.message.job_id;
        let slice_id = &dead.message.slice.id;
        warn!(%job_id, %slice_id, deliveries = dead.deliveries, "slice ran out of deliveries");
        let outcome = SliceOutcome {
            error: Some(SliceError {
                code: "delivery_limit".into(),
                message: format!(
                    "not finished after {} deliveries (worker lost, or its outcome could not be written)",
                    dead.deliveries
                ),
            }),
            ..SliceOutcome::default()
        };
        let recorded = self
            .store
            .record_outcome(job_id, slice_id, &outcome)
            .await?;
        if recorded.written {
            trawl_telemetry::names::slice_recorded(dead.message.slice.kind.name(), false, 0, 0, 0);
            self.events
                .slice_finished(SliceFinished::of(job_id, slice_id, &outcome, 0))
                .await?;
        }
        Ok(())
    }
}
