//! An approval as the REST API shows it, and as the outgoing webhook sends it.

use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;
use trawl_core::model::JobId;
use trawl_core::ports::ApprovalRecord;
use utoipa::ToSchema;

/// An approval as the API shows it.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ApprovalView {
    pub id: i64,
    /// What is asked: `job_budget` (the job's estimate is above its threshold),
    /// `tool_change` (a pinned tool's definition changed: the tool is quarantined),
    /// `new_tool` (a server added a tool and its policy asks for approval),
    /// `tool_review` (the poisoning scanner holds a tool for a person to review) or
    /// `tool_call` (a call of a tool whose policy asks for approval per call).
    pub kind: String,
    /// The job, for `job_budget`.
    #[schema(value_type = Option<String>)]
    pub job_id: Option<JobId>,
    /// The namespaced tool, for tool approvals.
    pub tool: Option<String>,
    /// `pending`, `approved`, `rejected` or `expired` (nobody decided in time).
    pub status: String,
    /// The amount at stake; for display.
    pub amount_usd: f64,
    /// The same in millionths of a dollar; exact.
    pub amount_micros: i64,
    pub reason: String,
    /// For tool approvals: the pinned and the new definition, and their differences.
    #[schema(value_type = Option<Object>)]
    pub detail: Option<serde_json::Value>,
    /// Who decided (`api`, the API key's label `key-…`, `sub:` and a token's
    /// subject, `slack:U…` and the Slack user's name); null while pending.
    pub decided_by: Option<String>,
    /// RFC 3339, UTC.
    pub requested: String,
    /// RFC 3339, UTC; null while pending.
    pub decided: Option<String>,
    /// RFC 3339, UTC: when it expires if nobody decides; null without an
    /// approval TTL, or until the notifier stamps it (within seconds).
    pub expires: Option<String>,
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
        ApprovalView {
            links: ApprovalLinks {
                approve: format!("/v1/approvals/{}/approve", r.id),
                reject: format!("/v1/approvals/{}/reject", r.id),
                job: r.job_id.as_ref().map(|j| format!("/v1/jobs/{j}")),
            },
            id: r.id,
            status: r.status().to_owned(),
            kind: r.kind,
            job_id: r.job_id,
            tool: r.tool,
            amount_usd: r.amount.usd(),
            amount_micros: r.amount.0,
            reason: r.reason,
            detail: r.detail,
            decided_by: r.decided_by,
            requested: rfc3339(r.requested_ms),
            decided: r.decided_ms.map(rfc3339),
            expires: r.expires_ms.map(rfc3339),
        }
    }
}

/// Milliseconds since the epoch as RFC 3339 UTC with milliseconds.
pub fn rfc3339(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(t).to_string()
}
