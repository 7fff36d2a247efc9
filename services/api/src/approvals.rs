//! `GET /v1/approvals` and `POST /v1/approvals/{id}/approve` / `/reject`: a human's
//! say on jobs that cost more than their `approve_above_usd`.
//!
//! The decision itself is the scheduler's ([`trawl_scheduler::decide`]): it records
//! it, moves the job to `queued` or `cancelled`, and emits `approval.decided` so
//! the scheduler acts on it at once. A click in Slack
//! (`crate::slack`) decides through the same [`decide`]. The first decision wins;
//! an approval decided, or past its expiry, answers 409 and changes nothing.
//!
//! Who: deciding needs `approvals:decide` (or an admin key); in Slack, a
//! configured approver. Every refusal is audited (`tool_audit`, tool
//! `approvals.decide`, decision `deny`). The list shows an approver every
//! approval, anyone else only the approvals of jobs they may see.

use std::collections::HashMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::instrument;
use trawl_core::model::{AuditRecord, JobId, JobStatus, now_ms};
use trawl_core::ports::ApprovalRecord;
use trawl_scheduler::ScheduleError;
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, Problem};
use crate::oauth::SCOPE_DECIDE;
use crate::state::{ApiState, Caller};

pub use trawl_notify::view::{ApprovalLinks, ApprovalView};

/// The most approvals one list shows.
const LIST_LIMIT: u32 = 1000;

/// Which approvals to list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ApprovalsQuery {
    /// `pending` (the default) or `all`.
    pub status: Option<StatusFilter>,
}

/// The approvals a list shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum StatusFilter {
    /// Those still waiting for a decision.
    #[default]
    Pending,
    /// Every one, decided or not.
    All,
}

/// A list of approvals.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalsList {
    /// Newest first.
    pub approvals: Vec<ApprovalView>,
}

/// A decision and where it left the job.
#[derive(Debug, Serialize, ToSchema)]
pub struct Decision {
    pub approval: ApprovalView,
    /// For `job_budget`: `queued` when approved, `cancelled` when rejected.
    #[schema(value_type = Option<String>, example = "queued")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_status: Option<JobStatus>,
}

/// Approvals, newest first.
#[utoipa::path(
    get,
    path = "/v1/approvals",
    operation_id = "list_approvals",
    tag = "approvals",
    params(ApprovalsQuery),
    responses(
        (status = 200, description = "The approvals.", body = ApprovalsList),
        (status = 400, description = "Unknown status filter.", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid API key.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])),
)]
pub(crate) async fn list(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<ApprovalsQuery>, QueryRejection>,
) -> Result<Json<ApprovalsList>, ApiError> {
    let Query(query) = query.map_err(|r| ApiError::BadRequest(r.body_text()))?;
    let pending_only = query.status.unwrap_or_default() == StatusFilter::Pending;
    let mut approvals = state.store.approvals(pending_only, LIST_LIMIT).await?;
    if !caller.decides() {
        // Only the approvals of jobs the caller may see; tool approvals are the
        // approvers'.
        let mut seen: HashMap<JobId, bool> = HashMap::new();
        let mut kept = Vec::with_capacity(approvals.len());
        for a in approvals {
            let Some(job) = &a.job_id else { continue };
            let sees = match seen.get(job) {
                Some(s) => *s,
                None => {
                    let s = state.store.job(job).await?.is_some_and(|j| caller.sees(&j));
                    seen.insert(job.clone(), s);
                    s
                }
            };
            if sees {
                kept.push(a);
            }
        }
        approvals = kept;
    }
    Ok(Json(ApprovalsList {
        approvals: approvals.into_iter().map(ApprovalView::from).collect(),
    }))
}

/// Approve: the job is queued and runs.
#[utoipa::path(
    post,
    path = "/v1/approvals/{id}/approve",
    tag = "approvals",
    params(("id" = i64, Path, description = "The approval id.")),
    responses(
        (status = 200, description = "Approved; the job is queued.", body = Decision),
        (status = 401, description = "No valid API key.", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an approver: needs the `approvals:decide` scope or an admin key. Audited.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such approval.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Already decided, expired, or the job no longer waits.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])),
)]
pub(crate) async fn approve(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Decision>, ApiError> {
    decide_view(&state, &caller, &id, true).await.map(Json)
}

/// Reject: the job is cancelled.
#[utoipa::path(
    post,
    path = "/v1/approvals/{id}/reject",
    tag = "approvals",
    params(("id" = i64, Path, description = "The approval id.")),
    responses(
        (status = 200, description = "Rejected; the job is cancelled.", body = Decision),
        (status = 401, description = "No valid API key.", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an approver: needs the `approvals:decide` scope or an admin key. Audited.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such approval.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Already decided, expired, or the job no longer waits.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])),
)]
pub(crate) async fn reject(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Decision>, ApiError> {
    decide_view(&state, &caller, &id, false).await.map(Json)
}

async fn decide_view(
    state: &ApiState,
    caller: &Caller,
    raw: &str,
    approved: bool,
) -> Result<Decision, ApiError> {
    if !caller.decides() {
        refused(
            state,
            &format!("api:{}", caller.label),
            raw,
            approved,
            "not an approver: deciding needs the approvals:decide scope or an admin key",
        )
        .await;
        return Err(ApiError::InsufficientScope(SCOPE_DECIDE));
    }
    let (record, job_status) = decide(state, &caller.label, raw, approved).await?;
    Ok(Decision {
        approval: record.into(),
        job_status,
    })
}

/// Audits a refused decision on approval `raw` by `who` (`api:<caller>`,
/// `slack:<user>`). A failure to write is logged: the refusal stands either way.
pub(crate) async fn refused(state: &ApiState, who: &str, raw: &str, approved: bool, why: &str) {
    tracing::warn!(approval = %raw, %who, %why, "a decision was refused");
    let job_id = match raw.parse::<i64>() {
        Ok(id) => state
            .store
            .approval(id)
            .await
            .ok()
            .flatten()
            .and_then(|r| r.job_id),
        Err(_) => None,
    };
    let args = serde_json::json!({"approval": raw, "approve": approved});
    let row = AuditRecord {
        job_id,
        slice_id: None,
        seq: 0,
        tool: DECIDE_TOOL.to_owned(),
        args_digest: hex::encode(Sha256::digest(args.to_string().as_bytes())),
        decision: "deny".to_owned(),
        reason: why.to_owned(),
        caller: who.to_owned(),
        latency_us: 0,
        result_bytes: 0,
        error: None,
        at_ms: now_ms(),
    };
    if let Err(e) = state.store.record_audit(&[row]).await {
        tracing::warn!(error = %e, "the refused decision could not be audited");
    }
}

/// The audit's name for deciding an approval.
pub const DECIDE_TOOL: &str = "approvals.decide";

/// Why an approval that is no longer pending (or is past its expiry) cannot be
/// decided: 409.
pub(crate) fn closed(r: &ApprovalRecord) -> ApiError {
    if r.expired || (r.approved.is_none() && r.expires_ms.is_some_and(|e| e <= now_ms())) {
        return ApiError::Conflict(format!(
            "{}; it can no longer be decided",
            r.expiry_reason()
        ));
    }
    ApiError::Conflict(format!(
        "approval {} was already {} by {}",
        r.id,
        r.status(),
        r.decided_by.as_deref().unwrap_or("someone"),
    ))
}

/// Decides approval `raw` (its id as the path or the button carries it) for
/// `by`: the record as decided, and for `job_budget` where the job is now.
#[instrument(skip_all, fields(approval = %raw, approved, by = %by))]
pub(crate) async fn decide(
    state: &ApiState,
    by: &str,
    raw: &str,
    approved: bool,
) -> Result<(ApprovalRecord, Option<JobStatus>), ApiError> {
    let not_found = || ApiError::NotFound(format!("approval {raw}"));
    let id: i64 = raw.parse().map_err(|_| not_found())?;
    let record = state.store.approval(id).await?.ok_or_else(not_found)?;
    if record.approved.is_some() || record.expires_ms.is_some_and(|e| e <= now_ms()) {
        return Err(closed(&record));
    }
    // Decided (or expired) by someone else between the read and the write.
    let lost = || async {
        match state.store.approval(id).await {
            Ok(Some(now)) => closed(&now),
            Ok(None) => not_found(),
            Err(e) => e.into(),
        }
    };
    let Some(job_id) = record.job_id.clone() else {
        // A tool approval: the store applies it to the tool's pin; workers see it
        // when they next read the pins.
        return match state.store.decide_tool_approval(id, approved, by).await? {
            Some(decided) => {
                tracing::info!(tool = ?decided.tool, approved, "tool approval decided");
                Ok((decided, None))
            }
            None => Err(lost().await),
        };
    };
    let decided = trawl_scheduler::decide(
        state.store.as_ref(),
        state.events.as_ref(),
        &job_id,
        approved,
        by,
    )
    .await;
    let job_status = match decided {
        Ok(status) => status,
        Err(ScheduleError::UnknownJob(_)) => {
            return Err(ApiError::Internal(anyhow::anyhow!(
                "approval {id} names job {job_id}, which is not stored"
            )));
        }
        Err(ScheduleError::NotAwaitingApproval(_, status)) => {
            let now = state.store.approval(id).await?.ok_or_else(not_found)?;
            if now.approved.is_some() {
                return Err(closed(&now));
            }
            return Err(ApiError::Conflict(format!(
                "job {job_id} no longer waits for approval: it is {status}"
            )));
        }
        Err(ScheduleError::ApprovalClosed(_)) => return Err(lost().await),
        Err(ScheduleError::Port(e)) => return Err(e.into()),
    };
    let record = state.store.approval(id).await?.ok_or_else(not_found)?;
    Ok((record, Some(job_status)))
}
