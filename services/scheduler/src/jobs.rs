//! Submitting a job, deciding on it, cancelling it: one path each, whoever asks
//! (the CLI, the REST API, the MCP tools, a click in Slack).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tracing::{info, warn};
use trawl_core::cost::PriceTable;
use trawl_core::egress::EgressPolicy;
use trawl_core::model::{JobId, JobStatus, now_ms};
use trawl_core::plan::{Estimate, estimate};
use trawl_core::ports::{Event, Events, Idempotency, JobOwner, JobRecord, PortError, Store};
use trawl_core::spec::{DEFAULT_MAX_SLICES, JobSpec, SpecErrors};
use trawl_core::tenant::{self, OverLimit, TenantLimits};

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
    /// The job is over one of its tenant's limits ([`trawl_core::tenant`]).
    #[error("{0}")]
    OverLimit(Box<OverLimit>),
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
    /// The tenants' limits, shared by every submission of the process.
    pub quotas: Arc<Quotas>,
}

impl Default for SubmitConfig {
    fn default() -> SubmitConfig {
        SubmitConfig {
            prices: PriceTable::default(),
            max_slices: DEFAULT_MAX_SLICES,
            egress: None,
            quotas: Arc::default(),
        }
    }
}

/// The tenants' limits, and one turn at a time per tenant: a tenant's
/// submissions are checked and stored one after the other in this process, so
/// requests sent at once cannot all pass a limit that only one of them fits.
/// (Replicas of the API each take their own turns: with N replicas, a burst can
/// pass a count limit by at most N − 1.)
#[derive(Debug, Default)]
pub struct Quotas {
    limits: TenantLimits,
    turns: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Quotas {
    pub fn new(limits: TenantLimits) -> Quotas {
        let quotas = Quotas {
            limits,
            turns: Mutex::default(),
        };
        quotas.publish_limits();
        quotas
    }

    pub fn limits(&self) -> &TenantLimits {
        &self.limits
    }

    /// The label a tenant is shown under in the metrics: its own name when the
    /// operator named it, else `other`, so callers cannot grow the series.
    pub fn label<'a>(&self, tenant: &'a str) -> &'a str {
        if self.limits.named().any(|t| t == tenant) {
            tenant
        } else {
            "other"
        }
    }

    /// The configured limits as gauges (`*` for the default).
    fn publish_limits(&self) {
        let tenants = std::iter::once("*").chain(self.limits.named());
        for t in tenants {
            let l = if t == "*" {
                self.limits.default_limits()
            } else {
                self.limits.of(t)
            };
            let counts = [
                ("slices_per_job", l.slices_per_job),
                ("slices_in_flight", l.slices_in_flight),
                ("concurrent_jobs", l.concurrent_jobs),
                ("jobs_per_day", l.jobs_per_day),
            ];
            for (name, v) in counts {
                if let Some(v) = v {
                    trawl_telemetry::names::tenant_limit(t, name, v as f64);
                }
            }
            let money = [
                ("usd_per_day", l.spend_per_day),
                ("usd_per_month", l.spend_per_month),
                ("approve_above_usd", l.approve_above),
            ];
            for (name, v) in money {
                if let Some(v) = v {
                    trawl_telemetry::names::tenant_limit(t, name, v.usd());
                }
            }
        }
    }

    async fn turn(&self, tenant: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
            // Drop the turns nobody holds or waits for, so the map stays as
            // small as the tenants submitting now.
            turns.retain(|_, l| Arc::strong_count(l) > 1);
            turns.entry(tenant.to_owned()).or_default().clone()
        };
        lock.lock_owned().await
    }
}

/// Checks a submission of `owner` against its tenant's limits; the approval
/// threshold the job is stored with when it fits (the lower of its spec's and
/// the tenant's).
async fn fits_quota(
    store: &dyn Store,
    quotas: &Quotas,
    owner: &trawl_core::ports::JobOwner,
    spec: &JobSpec,
    estimate: &Estimate,
) -> Result<Option<trawl_core::cost::Micros>, SubmitError> {
    let tenant = owner.tenant_key();
    let limits = quotas.limits().of(tenant);
    let now = now_ms();
    let usage = store
        .tenant_usage(tenant, tenant::month_bounds(now).0)
        .await?;
    let request = tenant::Request {
        slices: spec.slices_at_most(),
        estimate: estimate.cost,
    };
    let checked = tenant::check(&limits, &usage, request, now);
    let today = usage.since(tenant::day_start(now)).committed.0;
    let outcome = checked.as_ref().map_or_else(|o| o.limit, |()| "accepted");
    trawl_telemetry::names::tenant_submission(
        quotas.label(tenant),
        outcome,
        today,
        usage.slices_in_flight,
    );
    if let Err(over) = checked {
        info!(%tenant, limit = over.limit, "submission over its tenant's limit");
        return Err(SubmitError::OverLimit(over));
    }
    Ok(match (spec.budget.approve_above, limits.approve_above) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
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
    // A job of `trawl run` (no owner) is the operator's own: no tenant's quota.
    // Held until the job is stored, so the next submission of the tenant counts it.
    let (_turn, approve_above) = match &sub.owner {
        Some(owner) => {
            let turn = config.quotas.turn(owner.tenant_key()).await;
            let above = fits_quota(store, &config.quotas, owner, &spec, &estimate).await?;
            (Some(turn), above)
        }
        None => (None, spec.budget.approve_above),
    };
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
        slices_max: spec.slices_at_most(),
        approve_above,
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
