//! The worker: pulls slices, runs a sub-agent per slice, writes what it produced.
//!
//! Stateless: everything it needs comes with the slice message or from the store
//! (the job's spec, loaded once per job and kept in [`JobContexts`]). Per delivery:
//!
//! 1. Pull a slice; skip it (term) if its job is already over.
//! 2. Run the sub-agent ([`agent`]): deterministic here: a search slice calls
//!    `brightdata.search` and yields its organic rows as `serp` items and page
//!    slices for its top results; a page slice calls `brightdata.fetch`, extracts
//!    one item and validates it on its own.
//! 3. Write the outcome in one store transaction keyed by the slice id (a
//!    redelivery writes nothing), publish new child slices, emit `slice.finished`,
//!    ack. A store or queue failure naks with a delay; the queue's delivery cap
//!    then hands the slice to the scheduler as a dead letter.
//!
//! Concurrency is bounded: `concurrency` loops pull in parallel.

pub mod agent;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use trawl_core::extract::Extractor;
use trawl_core::model::{JobId, JobStatus, SliceOutcome};
use trawl_core::ports::{
    Delivery, Events, PortError, SliceFinished, SliceMessage, SliceQueue, Store,
};
use trawl_core::retry::RetryPolicy;
use trawl_core::spec::JobSpec;
use trawl_core::validate::ItemValidator;
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
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            concurrency: 32,
            retry_base_delay: Duration::from_millis(100),
            retry_max_delay: Duration::from_secs(30),
            nak_delay: Duration::from_secs(1),
            heartbeat: Duration::from_secs(10),
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
}

/// Job contexts by id, loaded from the store on first sight. Concurrent first
/// sights of one job share one load; a job that is over is remembered as `None`.
#[derive(Default)]
pub struct JobContexts {
    map: Mutex<HashMap<JobId, Arc<ContextCell>>>,
}

/// One job's context, loaded once; `None` when the job is over.
type ContextCell = OnceCell<Option<Arc<JobContext>>>;

impl JobContexts {
    /// The job's context, or `None` when the job is over or unknown (its slices are
    /// skipped).
    async fn get(
        &self,
        store: &dyn Store,
        id: &JobId,
        cfg: &WorkerConfig,
    ) -> Result<Option<Arc<JobContext>>, PortError> {
        let cell = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            map.entry(id.clone()).or_default().clone()
        };
        cell.get_or_try_init(|| load_context(store, id, cfg))
            .await
            .cloned()
    }

    /// Forgets a job, so its next slice reloads it.
    pub fn forget(&self, id: &JobId) {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }
}

async fn load_context(
    store: &dyn Store,
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
    let spent = store.spent(id).await?;
    Ok(Some(Arc::new(JobContext {
        id: id.clone(),
        extractor: spec.extract.as_ref().map(Extractor::new),
        validator,
        retry: RetryPolicy::new(spec.max_attempts)
            .with_delays(cfg.retry_base_delay, cfg.retry_max_delay),
        budget: Budget::new(spec.budget.max, spent),
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
        }
    }

    /// Runs `concurrency` pull loops until `cancel` fires. A slice in flight when
    /// it fires is finished, not dropped.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        let tracker = TaskTracker::new();
        for _ in 0..self.config.concurrency {
            let (me, cancel) = (self.clone(), cancel.clone());
            tracker.spawn(async move {
                loop {
                    let delivery = tokio::select! {
                        () = cancel.cancelled() => break,
                        d = me.queue.pull() => d,
                    };
                    match delivery {
                        Ok(d) => me.handle(d).await,
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
        tracker.wait().await;
    }

    async fn handle(&self, d: Delivery) {
        let msg = d.message.clone();
        let span = tracing::info_span!("slice", job_id = %msg.job_id, slice_id = %msg.slice.id, kind = msg.slice.kind.name(), delivery = d.delivery);
        async {
            let work = self.process(&msg);
            tokio::pin!(work);
            let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + self.config.heartbeat, self.config.heartbeat);
            let result = loop {
                tokio::select! {
                    r = &mut work => break r,
                    _ = beat.tick() => {
                        if let Err(e) = d.acker.in_progress().await {
                            tracing::warn!(error = %e, "in_progress failed");
                        }
                    }
                }
            };
            match result {
                Ok(()) => {
                    if let Err(e) = d.acker.ack().await {
                        tracing::warn!(error = %e, "ack failed");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, last = d.is_last(), "slice not recorded; delivering again later");
                    if let Err(e) = d.acker.nak(self.config.nak_delay).await {
                        tracing::warn!(error = %e, "nak failed");
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Runs one slice and records it. `Err` only when its outcome could not be
    /// written or its children not published.
    async fn process(&self, msg: &SliceMessage) -> Result<(), PortError> {
        let Some(job) = self
            .jobs
            .get(self.store.as_ref(), &msg.job_id, &self.config)
            .await?
        else {
            tracing::debug!("job is over or unknown; skipping slice");
            return Ok(());
        };
        let outcome = agent::run_slice(&job, &self.tools, &msg.slice).await;
        finish_slice(
            self.store.as_ref(),
            self.queue.as_ref(),
            self.events.as_ref(),
            &msg.job_id,
            &msg.slice.id,
            &outcome,
        )
        .await
    }
}

/// Writes an outcome, publishes the new children and emits `slice.finished`.
/// Shared by workers and by the scheduler when it fails a dead letter.
pub async fn finish_slice(
    store: &dyn Store,
    queue: &dyn SliceQueue,
    events: &dyn Events,
    job_id: &JobId,
    slice_id: &trawl_core::model::SliceId,
    outcome: &SliceOutcome,
) -> Result<(), PortError> {
    let recorded = store.record_outcome(job_id, slice_id, outcome).await?;
    for child in &recorded.new_children {
        queue
            .publish(&SliceMessage {
                job_id: job_id.clone(),
                slice: child.clone(),
            })
            .await?;
    }
    if recorded.written {
        let children = recorded.new_children.len() as u64;
        events
            .slice_finished(SliceFinished::of(job_id, slice_id, outcome, children))
            .await?;
    }
    Ok(())
}
