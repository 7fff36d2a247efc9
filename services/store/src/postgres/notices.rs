//! Approval expiry and the outbox of approval notices (Slack, the outgoing
//! webhook): the approval row is the outbox, claimed with a lease.

use sqlx::postgres::PgPool;
use trawl_core::model::JobStatus;
use trawl_core::ports::{ApprovalNotice, ApprovalRecord, EXPIRED_BY, PortError};

use crate::decode::approval_record;
use crate::error::ResultExt;

/// The columns of an [`ApprovalRecord`], for `RETURNING` (qualified: the
/// statements join a CTE that has an `id` too).
macro_rules! approval_columns {
    () => {
        "approvals.id, approvals.kind, approvals.job_id, approvals.tool, approvals.amount, \
         approvals.reason, approvals.detail::text AS detail, approvals.approved, \
         approvals.decided_by, approvals.requested_ms, approvals.decided_ms, \
         approvals.expires_ms, approvals.expired, approvals.notified_ms"
    };
}

pub(super) async fn expire_approvals(
    pool: &PgPool,
    now_ms: i64,
    ttl_ms: Option<i64>,
    limit: u32,
) -> Result<Vec<ApprovalRecord>, PortError> {
    let mut tx = pool.begin().await.port()?;
    if let Some(ttl) = ttl_ms {
        sqlx::query(
            "UPDATE approvals SET expires_ms = requested_ms + $1 \
             WHERE approved IS NULL AND expires_ms IS NULL",
        )
        .bind(ttl)
        .execute(&mut *tx)
        .await
        .port()?;
    }
    // SKIP LOCKED: a row a decision is writing right now is the decision's; if it
    // commits first, `approved IS NULL` finds it decided. The rows are picked in a
    // materialized CTE: as `id IN (subquery … LIMIT)` the subquery may run more
    // than once, and with SKIP LOCKED pick other rows each time, passing `limit`.
    let rows = sqlx::query(concat!(
        "WITH due AS MATERIALIZED (SELECT id FROM approvals \
         WHERE approved IS NULL AND expires_ms <= $2 ORDER BY expires_ms, id LIMIT $3 \
         FOR UPDATE SKIP LOCKED) \
         UPDATE approvals SET approved = false, expired = true, decided_by = $1, \
         decided_ms = $2 FROM due WHERE approvals.id = due.id AND approvals.approved IS NULL \
         RETURNING ",
        approval_columns!()
    ))
    .bind(EXPIRED_BY)
    .bind(now_ms)
    .bind(i64::from(limit))
    .fetch_all(&mut *tx)
    .await
    .port()?;
    let mut expired = rows
        .iter()
        .map(approval_record)
        .collect::<Result<Vec<_>, _>>()?;
    expired.sort_by_key(|r| (r.requested_ms, r.id));
    for r in &expired {
        let Some(job) = &r.job_id else { continue };
        sqlx::query(
            "UPDATE jobs SET status = $1, reason = $2, updated_ms = $3 \
             WHERE id = $4 AND status = $5",
        )
        .bind(JobStatus::Cancelled.as_str())
        .bind(r.expiry_reason())
        .bind(now_ms)
        .bind(job.as_str())
        .bind(JobStatus::AwaitingApproval.as_str())
        .execute(&mut *tx)
        .await
        .port()?;
    }
    tx.commit().await.port()?;
    Ok(expired)
}

pub(super) async fn claim_approval_notices(
    pool: &PgPool,
    now_ms: i64,
    lease_ms: i64,
    ttl_ms: Option<i64>,
    limit: u32,
) -> Result<Vec<ApprovalRecord>, PortError> {
    let rows = sqlx::query(concat!(
        "WITH due AS MATERIALIZED (SELECT id FROM approvals \
         WHERE ((approved IS NULL AND notified_ms IS NULL) \
         OR (approved IS NOT NULL AND notified_ms IS NOT NULL AND decision_notified_ms IS NULL)) \
         AND (notify_lease_ms IS NULL OR notify_lease_ms <= $1) \
         ORDER BY requested_ms, id LIMIT $3 FOR UPDATE SKIP LOCKED) \
         UPDATE approvals SET notify_lease_ms = $1 + $2, \
         expires_ms = CASE WHEN approvals.approved IS NULL \
             THEN COALESCE(approvals.expires_ms, approvals.requested_ms + $4::bigint) \
             ELSE approvals.expires_ms END \
         FROM due WHERE approvals.id = due.id \
         AND (approvals.notify_lease_ms IS NULL OR approvals.notify_lease_ms <= $1) RETURNING ",
        approval_columns!()
    ))
    .bind(now_ms)
    .bind(lease_ms)
    .bind(i64::from(limit))
    .bind(ttl_ms)
    .fetch_all(pool)
    .await
    .port()?;
    let mut claimed = rows
        .iter()
        .map(approval_record)
        .collect::<Result<Vec<_>, _>>()?;
    // Oldest request first (ids are random, not an order).
    claimed.sort_by_key(|r| (r.requested_ms, r.id));
    Ok(claimed)
}

pub(super) async fn approval_notice_sent(
    pool: &PgPool,
    id: i64,
    notice: ApprovalNotice,
    at_ms: i64,
) -> Result<(), PortError> {
    let sql = match notice {
        ApprovalNotice::Requested => {
            "UPDATE approvals SET notified_ms = $2, notify_lease_ms = NULL WHERE id = $1"
        }
        ApprovalNotice::Decided => {
            "UPDATE approvals SET decision_notified_ms = $2, notify_lease_ms = NULL WHERE id = $1"
        }
    };
    sqlx::query(sql)
        .bind(id)
        .bind(at_ms)
        .execute(pool)
        .await
        .port()?;
    Ok(())
}

pub(super) async fn approval_notice_failed(
    pool: &PgPool,
    id: i64,
    retry_at_ms: i64,
) -> Result<(), PortError> {
    sqlx::query("UPDATE approvals SET notify_lease_ms = $2 WHERE id = $1")
        .bind(id)
        .bind(retry_at_ms)
        .execute(pool)
        .await
        .port()?;
    Ok(())
}
