//! `GET /v1/approvals` and `POST /v1/approvals/{id}/approve` / `/reject`: a human's
//! say on jobs that cost more than their `approve_above_usd`.
//!
//! The decision itself is the scheduler's ([`Scheduler::decide`]): it records it and
//! moves the job to `queued` or `cancelled`; the API then emits
//! `approval.decided` so the scheduler acts on it at once.

use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use tracing::instrument;
use trawl_core::model::{JobId, JobStatus};
use trawl_core::ports::{ApprovalRecord, Event};
use trawl_scheduler::{ScheduleError, Scheduler};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, Problem};
use crate::jobs::{emit, rfc3339};
use crate::state::{ApiState, Caller};

/// The most approvals one list shows.
const LIST_LIMIT: u32 = 1000;

/// Which approvals to list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ApprovalsQuery {
    /// `pending` (the default) or `all`.
    pub status: Option<String>,
}

/// An approval as the API shows it.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ApprovalView {
    pub id: i64,
    /// What is asked: `job_budget` (the job's estimate is above its threshold),
    /// `tool_change` (a pinned tool's definition changed: the tool is quarantined)
    /// or `new_tool` (a server added a tool and its policy asks for approval).
    pub kind: String,
    /// The job, for `job_budget`.
    #[schema(value_type = Option<String>)]
    pub job_id: Option<JobId>,
    /// The namespaced tool, for `tool_change` and `new_tool`.
    pub tool: Option<String>,
    /// `pending`, `approved` or `rejected`.
    pub status: String,
    /// The amount at stake; for display.
    pub amount_usd: f64,
    /// The same in millionths of a dollar; exact.
    pub amount_micros: i64,
    pub reason: String,
    /// For tool approvals: the pinned and the new definition, and their differences.
    #[schema(value_type = Option<Object>)]
    pub detail: Option<serde_json::Value>,
    /// Who decided (`api`, or the API key's label `key-…`); null while pending.
    pub decided_by: Option<String>,
    /// RFC 3339, UTC.
    pub requested: String,
    /// RFC 3339, UTC; null while pending.
    pub decided: Option<String>,
    pub links: ApprovalLinks,
}

/// Where an approval's actions are.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ApprovalLinks {
    pub approve: String,
    pub reject: String,
    /// The job, for `job_budget`.
    pub job: Option<String>,
}

impl From<ApprovalRecord> for ApprovalView {
    fn from(r: ApprovalRecord) -> ApprovalView {
        let status = match r.approved {
            None => "pending",
            Some(true) => "approved",
            Some(false) => "rejected",
        };
        ApprovalView {
            links: ApprovalLinks {
                approve: format!("/v1/approvals/{}/approve", r.id),
                reject: format!("/v1/approvals/{}/reject", r.id),
                job: r.job_id.as_ref().map(|j| format!("/v1/jobs/{j}")),
            },
            id: r.id,
            kind: r.kind,
            job_id: r.job_id,
            tool: r.tool,
            status: status.to_owned(),
            amount_usd: r.amount.usd(),
            amount_micros: r.amount.0,
            reason: r.reason,
            detail: r.detail,
            decided_by: r.decided_by,
            requested: rfc3339(r.requested_ms),
            decided: r.decided_ms.map(rfc3339),
        }
    }
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
    query: Result<Query<ApprovalsQuery>, QueryRejection>,
) -> Result<Json<ApprovalsList>, ApiError> {
    let Query(query) = query.map_err(|r| ApiError::BadRequest(r.body_text()))?;
    let pending_only = match query.status.as_deref() {
        None | Some("pending") => true,
        Some("all") => false,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "status must be pending or all, not {other:?}"
            )));
        }
    };
    let approvals = state.store.approvals(pending_only, LIST_LIMIT).await?;
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
        (status = 404, description = "No such approval.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Already decided, or the job no longer waits.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])),
)]
pub(crate) async fn approve(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Decision>, ApiError> {
    decide(&state, &caller, &id, true).await.map(Json)
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
        (status = 404, description = "No such approval.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Already decided, or the job no longer waits.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])),
)]
pub(crate) async fn reject(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Decision>, ApiError> {
    decide(&state, &caller, &id, false).await.map(Json)
}

#[instrument(skip_all, fields(approval = %raw, approved, by = %caller.label))]
async fn decide(
    state: &ApiState,
    caller: &Caller,
    raw: &str,
    approved: bool,
) -> Result<Decision, ApiError> {
    let not_found = || ApiError::NotFound(format!("approval {raw}"));
    let id: i64 = raw.parse().map_err(|_| not_found())?;
    let record = state.store.approval(id).await?.ok_or_else(not_found)?;
    let already = |r: &ApprovalRecord| {
        ApiError::Conflict(format!(
            "approval {id} was already {} by {}",
            if r.approved == Some(true) {
                "approved"
            } else {
                "rejected"
            },
            r.decided_by.as_deref().unwrap_or("someone"),
        ))
    };
    if record.approved.is_some() {
        return Err(already(&record));
    }
    let Some(job_id) = record.job_id.clone() else {
        // A tool approval: the store applies it to the tool's pin; workers see it
        // when they next read the pins.
        return match state
            .store
            .decide_tool_approval(id, approved, &caller.label)
            .await?
        {
            Some(decided) => {
                tracing::info!(tool = ?decided.tool, approved, "tool approval decided");
                Ok(Decision {
                    approval: decided.into(),
                    job_status: None,
                })
            }
            // Decided by someone else meanwhile.
            None => {
                let now = state.store.approval(id).await?.ok_or_else(not_found)?;
                Err(already(&now))
            }
        };
    };
    let scheduler = Scheduler {
        store: state.store.as_ref(),
        queue: state.queue.as_ref(),
        events: state.events.as_ref(),
        prices: state.prices,
        // Only `drive` reads it; `decide` does not wait.
        reconcile_every: Duration::from_secs(1),
    };
    let job_status = match scheduler.decide(&job_id, approved, &caller.label).await {
        Ok(status) => status,
        Err(ScheduleError::UnknownJob(_)) => {
            return Err(ApiError::Internal(anyhow::anyhow!(
                "approval {id} names job {job_id}, which is not stored"
            )));
        }
        Err(ScheduleError::NotAwaitingApproval(_, status)) => {
            return Err(ApiError::Conflict(format!(
                "job {job_id} no longer waits for approval: it is {status}"
            )));
        }
        Err(ScheduleError::Port(e)) => return Err(e.into()),
    };
    tracing::info!(job_id = %job_id, status = job_status.as_str(), "approval decided");
    emit(
        state,
        Event::ApprovalDecided {
            job_id: job_id.clone(),
            approved,
        },
    )
    .await;
    let record = state.store.approval(id).await?.ok_or_else(not_found)?;
    Ok(Decision {
        approval: record.into(),
        job_status: Some(job_status),
    })
}
