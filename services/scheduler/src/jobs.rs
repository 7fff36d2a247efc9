//! Submitting a job, deciding on it, cancelling it: one path each, whoever asks
//! (the CLI, the REST API, the MCP tools, a click in Slack).

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tracing::{info, warn};
use trawl_core::cost::PriceTable;
use trawl_core::egress::EgressPolicy;
use trawl_core::model::{JobId, JobStatus, now_ms};
use trawl_core::plan::{Estimate, estimate};
use trawl_core::ports::{Event, Events, Idempotency, JobOwner, JobRecord, PortError, Store};
use trawl_core::spec::{DEFAULT_MAX_SLICES, JobSpec, SpecErrors};

/// How long a worker's last report counts toward what the deployment can run
/// (workers report every 30 s by default); a pool with no report this recent
/// is not held against a job.
pub const WORKER_REPORTS_COUNT_FOR: Duration = Duration::from_secs(3600);

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

/// Why a submission was refused; nothing was stored.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The spec asks for what this deployment refuses (a browse URL its egress
    /// policy closes), every such field named.
    #[error("{0}")]
    Invalid(SpecErrors),
    /// No reported worker can run the job (a research job without a model
    /// worker); the text says what is missing.
    #[error("{0}")]
    Unrunnable(String),
    #[error(transparent)]
    Port(#[from] PortError),
}

/// What submissions are checked and priced with.
#[derive(Clone, Debug)]
pub struct SubmitConfig {
    pub prices: PriceTable,
    /// Jobs that can have more slices than this are refused (followed pages
    /// counted at their maximum).
    pub max_slices: u64,
    /// Where local browse sessions may connect; start URLs it refuses are
    /// refused here. `None`: sessions run on a remote browser (Bright Data's
    /// Scraping Browser), which the policy does not bind.
    pub egress: Option<Arc<EgressPolicy>>,
}

impl Default for SubmitConfig {
    fn default() -> SubmitConfig {
        SubmitConfig {
            prices: PriceTable::default(),
            max_slices: DEFAULT_MAX_SLICES,
            egress: None,
        }
    }
}

/// A job to submit: a parsed spec and who asks.
#[derive(Clone, Debug)]
pub struct Submission {
    pub spec: JobSpec,
    pub owner: Option<JobOwner>,
    pub idempotency: Option<Idempotency>,
    /// The trace planning and the slices continue.
    pub traceparent: Option<String>,
}

impl Submission {
    pub fn new(spec: JobSpec) -> Submission {
        Submission {
            spec,
            owner: None,
            idempotency: None,
            traceparent: None,
        }
    }
}

/// A job just stored.
#[derive(Clone, Debug, Serialize)]
pub struct Submitted {
    pub job_id: JobId,
    pub status: JobStatus,
    pub estimate: Estimate,
    #[serde(skip)]
    pub record: JobRecord,
    #[serde(skip)]
    pub spec: JobSpec,
}

/// What this deployment refuses in a spec that parsed: more slices than
/// `max_slices`, browse URLs its egress policy closes.
fn spec_fits(spec: &JobSpec, config: &SubmitConfig) -> Result<(), SubmitError> {
    spec.check_size(config.max_slices)
        .map_err(SubmitError::Invalid)?;
    if let Some(egress) = &config.egress {
        egress.check_browse(spec).map_err(SubmitError::Invalid)?;
    }
    Ok(())
}

/// Checks a job, prices it, stores it `pending` and announces it; the scheduler
/// plans it. A [`PortError::Conflict`] means its idempotency key is taken.
pub async fn submit(
    store: &dyn Store,
    events: &dyn Events,
    config: &SubmitConfig,
    sub: Submission,
) -> Result<Submitted, SubmitError> {
    spec_fits(&sub.spec, config)?;
    let estimate = estimate(&sub.spec, &config.prices);
    let spec = sub.spec;
    if spec.research.is_some() || spec.browse.is_some() {
        let since = now_ms() - WORKER_REPORTS_COUNT_FOR.as_millis() as i64;
        let workers = store.workers(since).await?;
        trawl_core::workers::can_run(&spec, &workers).map_err(SubmitError::Unrunnable)?;
    }
    let created_ms = now_ms();
    // From the operating system's source: a caller who has seen its own job
    // ids cannot work out another's.
    let random =
        trawl_core::model::unguessable_u64().map_err(|e| PortError::Unavailable(e.to_string()))?;
    let record = JobRecord {
        id: JobId::generate(created_ms, random),
        name: spec.name.clone(),
        spec: spec.document.clone(),
        status: JobStatus::Pending,
        reason: None,
        estimate: estimate.cost,
        created_ms,
        idempotency: sub.idempotency,
        traceparent: sub.traceparent,
        owner: sub.owner,
        retention_ms: spec
            .retention
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
    };
    store.create_job(&record, &[]).await?;
    info!(job_id = %record.id, name = %record.name, estimate = %record.estimate, "job submitted");
    emit(
        events,
        Event::JobCreated {
            job_id: record.id.clone(),
        },
    )
    .await;
    Ok(Submitted {
        job_id: record.id.clone(),
        status: record.status,
        estimate,
        record,
        spec,
    })
}

/// Emits an event; a failure is logged, not fatal: the store already holds the
/// change and the scheduler's reconciliation finds it.
pub async fn emit(events: &dyn Events, ev: Event) {
    let job_id = ev.job_id().clone();
    if let Err(e) = events.emit(ev).await {
        warn!(%job_id, error = %e, "event not emitted; reconciliation will pick the change up");
    }
}

/// Records a decision on a job awaiting approval and announces it. The first
/// decision wins: the store records one only while the approval is pending and
/// unexpired, and the job moves only when this call recorded it.
pub async fn decide(
    store: &dyn Store,
    events: &dyn Events,
    id: &JobId,
    approved: bool,
    by: &str,
) -> Result<JobStatus, ScheduleError> {
    let job = store
        .job(id)
        .await?
        .ok_or_else(|| ScheduleError::UnknownJob(id.clone()))?;
    if job.status != JobStatus::AwaitingApproval {
        return Err(ScheduleError::NotAwaitingApproval(
            id.clone(),
            job.status.as_str(),
        ));
    }
    if store.decide_approval(id, approved, by).await?.is_none() {
        return Err(ScheduleError::ApprovalClosed(id.clone()));
    }
    let moved = if approved {
        store
            .move_job(id, JobStatus::AwaitingApproval, JobStatus::Queued)
            .await?
    } else {
        let reason = format!("approval declined by {by}");
        store
            .end_job(id, JobStatus::Cancelled, Some(&reason))
            .await?
    };
    let status = if moved {
        if approved {
            JobStatus::Queued
        } else {
            JobStatus::Cancelled
        }
    } else {
        // It left `awaiting_approval` in between (cancelled): it stays as it is.
        store.job(id).await?.map_or(job.status, |j| j.status)
    };
    info!(job_id = %id, status = status.as_str(), approved, %by, "approval decided");
    emit(
        events,
        Event::ApprovalDecided {
            job_id: id.clone(),
            approved,
        },
    )
    .await;
    Ok(status)
}

/// Ends a job `cancelled` with `reason`, unless it has ended already (`false`
/// then: nothing written); an approval it was waiting for is closed, and the
/// cancel is announced so workers skip its open slices.
pub async fn cancel(
    store: &dyn Store,
    events: &dyn Events,
    id: &JobId,
    reason: &str,
) -> Result<bool, PortError> {
    if !store
        .end_job(id, JobStatus::Cancelled, Some(reason))
        .await?
    {
        return Ok(false);
    }
    // A spend approval it was waiting for is moot now.
    store.decide_approval(id, false, reason).await?;
    info!(job_id = %id, %reason, "job cancelled");
    emit(events, Event::JobCancelled { job_id: id.clone() }).await;
    Ok(true)
}
