//! The scheduler: submits jobs, waits for approval, drives them to their end.
//!
//! - [`Scheduler::submit`]: plan (pure), store the job and its slices in one
//!   transaction, and either queue it or park it in `awaiting_approval` when its
//!   estimate is above the job's `approve_above_usd`.
//! - [`Scheduler::decide`]: record a human's decision on a parked job.
//! - [`Scheduler::drive`]: publish the open slices, count `slice.finished` events
//!   (and children they add) until none is open, fail dead-lettered slices, and end
//!   the job `succeeded`, `partial`, `failed` or `cancelled` with its reason. The
//!   store is the source of truth: the count is checked against it before the job
//!   ends, and re-read on a timer when events go quiet, so no job hangs on a lost
//!   event.
//! - [`Service`] (`service`): the scheduler role of the deployed shape, every job
//!   of the deployment driven from the store: plans pending jobs, publishes,
//!   finishes, fails dead letters, reconciles.

mod service;

use std::time::Duration;

use serde::Serialize;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;
use trawl_core::cost::PriceTable;
use trawl_core::model::{JobCounts, JobId, JobStatus, SliceError, SliceOutcome, now_ms};
use trawl_core::plan::{Estimate, plan};
use trawl_core::ports::{
    Approval, Event, Events, JobRecord, PortError, SliceFinished, SliceMessage, SliceQueue, Store,
};
use trawl_core::spec::JobSpec;

pub use service::{Service, ServiceConfig};

/// Why a scheduler call failed.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error(transparent)]
    Port(#[from] PortError),
    #[error("no job {0}")]
    UnknownJob(JobId),
    #[error("job {0} is {1}, not awaiting approval")]
    NotAwaitingApproval(JobId, &'static str),
    /// The job waits, but its approval is no longer open: decided by someone
    /// else a moment ago, or expired.
    #[error("the approval of job {0} is no longer pending")]
    ApprovalClosed(JobId),
}

/// A job just stored.
#[derive(Clone, Debug, Serialize)]
pub struct Submitted {
    pub job_id: JobId,
    pub status: JobStatus,
    pub estimate: Estimate,
}

/// A job that ended (or stopped at an approval).
#[derive(Clone, Debug, Serialize)]
pub struct Finished {
    pub job_id: JobId,
    pub status: JobStatus,
    pub reason: Option<String>,
    pub counts: JobCounts,
}

pub struct Scheduler<'a> {
    pub store: &'a dyn Store,
    pub queue: &'a dyn SliceQueue,
    pub events: &'a dyn Events,
    pub prices: PriceTable,
    /// How often the store is re-read while no event arrives.
    pub reconcile_every: Duration,
}

impl Scheduler<'_> {
    /// Plans and stores a job. `approved_by` pre-approves it (`--yes`).
    pub async fn submit(
        &self,
        spec: &JobSpec,
        approved_by: Option<&str>,
    ) -> Result<Submitted, ScheduleError> {
        let p = plan(spec, &self.prices);
        let created_ms = now_ms();
        let job_id = JobId::generate(created_ms, fastrand::u64(..));
        let approval = approval_for(&job_id, spec, &p.estimate);
        let status = if approval.is_some() && approved_by.is_none() {
            JobStatus::AwaitingApproval
        } else {
            JobStatus::Queued
        };
        self.store
            .create_job(
                &JobRecord {
                    id: job_id.clone(),
                    name: spec.name.clone(),
                    spec: spec.document.clone(),
                    status,
                    reason: None,
                    estimate: p.estimate.cost,
                    created_ms,
                    idempotency: None,
                    traceparent: None,
                    owner: None,
                },
                &p.slices,
            )
            .await?;
        if let Some(approval) = approval {
            self.store.request_approval(&approval).await?;
            if let Some(by) = approved_by {
                self.store.decide_approval(&job_id, true, by).await?;
            }
        }
        Ok(Submitted {
            job_id,
            status,
            estimate: p.estimate,
        })
    }

    /// Records a decision on a job awaiting approval. The first decision wins:
    /// the store records one only while the approval is pending and unexpired,
    /// and the job moves only when this call recorded it.
    pub async fn decide(
        &self,
        id: &JobId,
        approved: bool,
        by: &str,
    ) -> Result<JobStatus, ScheduleError> {
        let job = self
            .store
            .job(id)
            .await?
            .ok_or_else(|| ScheduleError::UnknownJob(id.clone()))?;
        if job.status != JobStatus::AwaitingApproval {
            return Err(ScheduleError::NotAwaitingApproval(
                id.clone(),
                job.status.as_str(),
            ));
        }
        if self
            .store
            .decide_approval(id, approved, by)
            .await?
            .is_none()
        {
            return Err(ScheduleError::ApprovalClosed(id.clone()));
        }
        let (status, reason) = if approved {
            (JobStatus::Queued, None)
        } else {
            (
                JobStatus::Cancelled,
                Some(format!("approval declined by {by}")),
            )
        };
        self.store
            .set_job_status(id, status, reason.as_deref())
            .await?;
        Ok(status)
    }

    /// Runs a queued job to its end. `events` carries `slice.finished` of this job;
    /// `on_progress` sees the running totals after every change.
    pub async fn drive(
        &self,
        id: &JobId,
        events: &mut UnboundedReceiver<Event>,
        cancel: &CancellationToken,
        on_progress: &mut (dyn FnMut(&JobCounts) + Send),
    ) -> Result<Finished, ScheduleError> {
        let job = self
            .store
            .job(id)
            .await?
            .ok_or_else(|| ScheduleError::UnknownJob(id.clone()))?;
        if job.status == JobStatus::AwaitingApproval || job.status.is_terminal() {
            return Ok(Finished {
                job_id: id.clone(),
                status: job.status,
                reason: job.reason,
                counts: self.store.counts(id).await?,
            });
        }
        self.store
            .set_job_status(id, JobStatus::Running, None)
            .await?;
        let open_slices = self.store.open_slices(id).await?;
        let mut counts = self.store.counts(id).await?;
        on_progress(&counts);
        let mut open = open_slices.len() as u64;
        for slice in open_slices {
            self.queue
                .publish(&SliceMessage {
                    job_id: id.clone(),
                    slice,
                })
                .await?;
        }
        let mut tick = tokio::time::interval(self.reconcile_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut quiet = true;
        let spec = JobSpec::from_value(job.spec.clone()).ok();
        let cancelled = loop {
            if open == 0 {
                counts = self.store.counts(id).await?;
                if counts.slices_open() == 0 {
                    match report_due(self.store, id, spec.as_ref(), &counts).await? {
                        Some(report) => {
                            self.queue
                                .publish(&SliceMessage {
                                    job_id: id.clone(),
                                    slice: report,
                                })
                                .await?;
                            counts.slices_total += 1;
                            on_progress(&counts);
                        }
                        None => break false,
                    }
                }
                open = counts.slices_open();
            }
            tokio::select! {
                () = cancel.cancelled() => break true,
                ev = events.recv() => {
                    let Some(ev) = ev else { break true };
                    let Event::SliceFinished(ev) = ev else { continue };
                    if &ev.job_id != id { continue; }
                    quiet = false;
                    open = (open + ev.children).saturating_sub(1);
                    counts.slices_total += ev.children;
                    if ev.succeeded { counts.slices_succeeded += 1 } else { counts.slices_failed += 1 }
                    counts.items_valid += ev.items_valid;
                    counts.items_rejected += ev.items_rejected;
                    counts.upstream_calls += ev.upstream_calls;
                    counts.cache_hits += ev.cache_hits;
                    counts.cost = counts.cost + ev.cost;
                    on_progress(&counts);
                }
                dead = self.queue.dead_letter() => {
                    let dead = dead?;
                    if &dead.message.job_id != id { continue; }
                    let outcome = SliceOutcome {
                        error: Some(SliceError {
                            code: "delivery_limit".into(),
                            message: format!("not finished after {} deliveries", dead.deliveries),
                        }),
                        ..SliceOutcome::default()
                    };
                    fail_dead_letter(self, id, &dead.message.slice.id, &outcome).await?;
                }
                _ = tick.tick() => {
                    if quiet {
                        counts = self.store.counts(id).await?;
                        open = counts.slices_open();
                        on_progress(&counts);
                    }
                    quiet = true;
                }
            }
        };
        let counts = self.store.counts(id).await?;
        on_progress(&counts);
        let (status, reason) = if cancelled {
            (
                JobStatus::Cancelled,
                Some(format!(
                    "cancelled with {} slices open",
                    counts.slices_open()
                )),
            )
        } else {
            let status = JobStatus::from_slices(counts.slices_succeeded, counts.slices_failed);
            let reason = match research_failure(self.store, id, spec.as_ref(), status).await? {
                Some(r) => Some(r),
                None => reason_for(&counts, &spec),
            };
            (status, reason)
        };
        self.store
            .set_job_status(id, status, reason.as_deref())
            .await?;
        Ok(Finished {
            job_id: id.clone(),
            status,
            reason,
            counts,
        })
    }
}

/// The report slice of a research job whose other slices are all done, added to
/// the job (`None`: no report is due, or it was added before). A report is
/// written only when something succeeded: a failed plan fails the job.
pub(crate) async fn report_due(
    store: &dyn Store,
    id: &JobId,
    spec: Option<&JobSpec>,
    counts: &JobCounts,
) -> Result<Option<trawl_core::model::SliceSpec>, PortError> {
    let Some(r) = spec.and_then(|s| s.research.as_ref()) else {
        return Ok(None);
    };
    if !r.report || counts.slices_succeeded == 0 {
        return Ok(None);
    }
    let report = trawl_core::plan::report_slice(r);
    Ok((store.add_slices(id, std::slice::from_ref(&report)).await? > 0).then_some(report))
}

/// Why a failed research job failed: its first failed slice's error (the plan's,
/// when the planner gave no valid plan).
pub(crate) async fn research_failure(
    store: &dyn Store,
    id: &JobId,
    spec: Option<&JobSpec>,
    status: JobStatus,
) -> Result<Option<String>, PortError> {
    if status != JobStatus::Failed || spec.is_none_or(|s| s.research.is_none()) {
        return Ok(None);
    }
    Ok(store.failed_slices(id, 1).await?.first().map(|f| {
        format!(
            "{} slice failed: {}: {}",
            f.kind, f.error.code, f.error.message
        )
    }))
}

/// Fails a dead-lettered slice through the same path a worker uses.
async fn fail_dead_letter(
    s: &Scheduler<'_>,
    id: &JobId,
    slice: &trawl_core::model::SliceId,
    outcome: &SliceOutcome,
) -> Result<(), PortError> {
    let recorded = s.store.record_outcome(id, slice, outcome).await?;
    if recorded.written {
        s.events
            .slice_finished(SliceFinished::of(id, slice, outcome, 0))
            .await?;
    }
    Ok(())
}

/// The approval a job needs before it runs: its estimate is above its
/// `approve_above_usd`.
pub fn approval_for(job_id: &JobId, spec: &JobSpec, estimate: &Estimate) -> Option<Approval> {
    let limit = spec.budget.approve_above?;
    (estimate.cost > limit).then(|| Approval {
        job_id: job_id.clone(),
        amount: estimate.cost,
        reason: format!(
            "estimated cost {} is above approve_above_usd {}",
            estimate.cost, limit
        ),
        approved: None,
        decided_by: None,
    })
}

fn reason_for(c: &JobCounts, spec: &Option<JobSpec>) -> Option<String> {
    if c.budget_stops > 0 {
        let max = spec.as_ref().and_then(|s| s.budget.max).unwrap_or_default();
        return Some(format!(
            "budget exhausted: spent {} of max_usd {}; {} slices were not run",
            c.cost, max, c.budget_stops
        ));
    }
    (c.slices_failed > 0).then(|| {
        format!(
            "{} of {} slices failed after their retries",
            c.slices_failed, c.slices_total
        )
    })
}
