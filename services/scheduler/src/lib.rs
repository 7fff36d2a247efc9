//! The scheduler: the one way jobs enter, wait for a human, run and end.
//!
//! - [`submit`] (`jobs`): check a parsed spec (browse egress, whether any
//!   reported worker can run it), estimate it, store it `pending`, announce it.
//!   The CLI (`trawl run`), `POST /v1/jobs` and the MCP tool all call it.
//! - [`decide`] (`jobs`): record a human's decision on a parked job.
//! - [`cancel`] (`jobs`): end a job `cancelled`, never over another end.
//! - [`Service`] (`service`): the scheduler role, every job of the deployment
//!   driven from the store: plans pending jobs, publishes, finishes, fails dead
//!   letters, reconciles. `trawl run` runs it too, on the embedded adapters.
//!
//! A job ends only through [`trawl_core::ports::Store::end_job`], which writes
//! nothing once the job has ended; every other move names the status it moves
//! from, so a cancel is never overwritten.

mod jobs;
mod service;

pub use jobs::{
    Quotas, ScheduleError, Submission, SubmitConfig, SubmitError, Submitted, cancel, decide, submit,
};
pub use service::{DEFAULT_RETENTION, Service, ServiceConfig, collect_garbage};

use trawl_core::model::{JobCounts, JobId, JobStatus};
use trawl_core::plan::Estimate;
use trawl_core::ports::{Approval, JobRecord, PortError, Store};
use trawl_core::spec::JobSpec;

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

/// The approval a job needs before it runs: its estimate is above its
/// threshold, the one its submission recorded (the lower of its spec's
/// `approve_above_usd` and its tenant's) or, for a job stored before, its spec's.
pub fn approval_for(job: &JobRecord, spec: &JobSpec, estimate: &Estimate) -> Option<Approval> {
    let limit = job.approve_above.or(spec.budget.approve_above)?;
    let whose = if spec.budget.approve_above == Some(limit) {
        "approve_above_usd"
    } else {
        "the tenant's approve_above_usd"
    };
    (estimate.cost > limit).then(|| Approval {
        job_id: job.id.clone(),
        amount: estimate.cost,
        reason: format!(
            "estimated cost {} is above {whose} {}",
            estimate.cost, limit
        ),
        approved: None,
        decided_by: None,
    })
}

pub(crate) fn reason_for(c: &JobCounts, spec: &Option<JobSpec>) -> Option<String> {
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
