//! Approval expiry and the outbox of approval notices (Slack, the outgoing
//! webhook): the approval row is the outbox, claimed with a lease. One
//! connection serves the store, so a claim is one statement and never races
//! another of this process; other processes on the file wait for its write lock.

use sqlx::Connection;
use sqlx::sqlite::SqliteConnection;
use trawl_core::model::JobStatus;
use trawl_core::ports::{ApprovalNotice, ApprovalRecord, EXPIRED_BY, PortError};

use crate::decode::approval_record;
use crate::error::ResultExt;

/// The columns of an [`ApprovalRecord`], for `RETURNING`.
macro_rules! approval_columns {
    () => {
        "id, kind, job_id, tool, amount, reason, detail, approved, decided_by, requested_ms, \
         decided_ms, expires_ms, expired, notified_ms"
    };
}

pub(super) async fn expire_approvals(
    conn: &mut SqliteConnection,
    now_ms: i64,
    ttl_ms: Option<i64>,
    limit: u32,
) -> Result<Vec<ApprovalRecord>, PortError> {
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.port()?;
    if let Some(ttl) = ttl_ms {
        sqlx::query(
            "UPDATE approvals SET expires_ms = requested_ms + ? \
             WHERE approved IS NULL AND expires_ms IS NULL",
        )
        .bind(ttl)
        .execute(&mut *tx)
        .await
        .port()?;
    }
    let rows = sqlx::query(concat!(
        "UPDATE approvals SET approved = 0, expired = 1, decided_by = ?1, decided_ms = ?2 \
         WHERE id IN (SELECT id FROM approvals WHERE approved IS NULL AND expires_ms <= ?2 \
         ORDER BY expires_ms, id LIMIT ?3) RETURNING ",
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
            "UPDATE jobs SET status = ?, reason = ?, updated_ms = ? WHERE id = ? AND status = ?",
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
    conn: &mut SqliteConnection,
    now_ms: i64,
    lease_ms: i64,
    ttl_ms: Option<i64>,
    limit: u32,
) -> Result<Vec<ApprovalRecord>, PortError> {
    let rows = sqlx::query(concat!(
        "UPDATE approvals SET notify_lease_ms = ?1 + ?2, \
         expires_ms = CASE WHEN approved IS NULL \
             THEN COALESCE(expires_ms, requested_ms + ?4) ELSE expires_ms END \
         WHERE id IN (SELECT id FROM approvals \
         WHERE ((approved IS NULL AND notified_ms IS NULL) \
         OR (approved IS NOT NULL AND notified_ms IS NOT NULL AND decision_notified_ms IS NULL)) \
         AND (notify_lease_ms IS NULL OR notify_lease_ms <= ?1) ORDER BY requested_ms, id LIMIT ?3) RETURNING ",
        approval_columns!()
    ))
    .bind(now_ms)
    .bind(lease_ms)
    .bind(i64::from(limit))
    .bind(ttl_ms)
    .fetch_all(&mut *conn)
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
    conn: &mut SqliteConnection,
    id: i64,
    notice: ApprovalNotice,
    at_ms: i64,
) -> Result<(), PortError> {
    let sql = match notice {
        ApprovalNotice::Requested => {
            "UPDATE approvals SET notified_ms = ?2, notify_lease_ms = NULL WHERE id = ?1"
        }
        ApprovalNotice::Decided => {
            "UPDATE approvals SET decision_notified_ms = ?2, notify_lease_ms = NULL WHERE id = ?1"
        }
    };
    sqlx::query(sql)
        .bind(id)
        .bind(at_ms)
        .execute(&mut *conn)
        .await
        .port()?;
    Ok(())
}

pub(super) async fn approval_notice_failed(
    conn: &mut SqliteConnection,
    id: i64,
    retry_at_ms: i64,
) -> Result<(), PortError> {
    sqlx::query("UPDATE approvals SET notify_lease_ms = ?2 WHERE id = ?1")
        .bind(id)
        .bind(retry_at_ms)
        .execute(&mut *conn)
        .await
        .port()?;
    Ok(())
}
