//! The tool layer's tables: pins (with the approvals they raise) and the audit.

use sqlx::Connection;
use sqlx::sqlite::SqliteConnection;
use trawl_core::model::{AuditRecord, now_ms};
use trawl_core::ports::{ApprovalRecord, PinChange, PortError, ToolListing, ToolPin};

use super::rows::{insert_audit, to_json};
use crate::decode::{approval_record, audit_record, tool_listing, tool_pin};
use crate::error::ResultExt;

/// Who closes a pending approval the server made moot.
pub(crate) const SUPERSEDED_BY: &str = "trawl: the server offers the pinned definition again";

pub(super) async fn tool_pins(conn: &mut SqliteConnection) -> Result<Vec<ToolPin>, PortError> {
    let rows = sqlx::query(
        "SELECT tool, server, status, hash, definition, pending_hash, pending_definition, \
         approval_id, pinned_ms, approved_by FROM tool_pins ORDER BY tool",
    )
    .fetch_all(&mut *conn)
    .await
    .port()?;
    rows.iter().map(tool_pin).collect()
}

pub(super) async fn save_pins(
    conn: &mut SqliteConnection,
    changes: &[PinChange],
) -> Result<(), PortError> {
    if changes.is_empty() {
        return Ok(());
    }
    let now = now_ms();
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.port()?;
    for change in changes {
        match change {
            PinChange::Pin {
                tool,
                server,
                hash,
                definition,
                by,
            } => {
                sqlx::query(
                    "INSERT INTO tool_pins (tool, server, status, hash, definition, pinned_ms, \
                     approved_by) VALUES (?, ?, 'active', ?, ?, ?, ?) ON CONFLICT (tool) DO NOTHING",
                )
                .bind(tool)
                .bind(server)
                .bind(hash)
                .bind(to_json(definition)?)
                .bind(now)
                .bind(by)
                .execute(&mut *tx)
                .await
                .port()?;
            }
            PinChange::Hold {
                tool,
                server,
                kind,
                hash,
                definition,
                reason,
                detail,
            } => {
                let approval: i64 = sqlx::query_scalar(
                    "INSERT INTO approvals (kind, tool, reason, detail, requested_ms, id) \
                     VALUES (?, ?, ?, ?, ?, ?) \
                     ON CONFLICT (tool) WHERE approved IS NULL AND kind IN ('tool_change', 'new_tool', 'tool_review') \
                     DO UPDATE SET \
                     kind = excluded.kind, reason = excluded.reason, detail = excluded.detail, \
                     requested_ms = excluded.requested_ms, \
                     expires_ms = CASE WHEN approvals.kind = excluded.kind AND approvals.detail IS excluded.detail \
                         THEN approvals.expires_ms END, \
                     notified_ms = CASE WHEN approvals.kind = excluded.kind AND approvals.detail IS excluded.detail \
                         THEN approvals.notified_ms END \
                     RETURNING id",
                )
                .bind(*kind)
                .bind(tool)
                .bind(reason)
                .bind(to_json(detail)?)
                .bind(now)
                .bind(crate::new_approval_id()?)
                .fetch_one(&mut *tx)
                .await
                .port()?;
                let status = if *kind == "new_tool" {
                    "awaiting"
                } else {
                    "quarantined"
                };
                sqlx::query(
                    "INSERT INTO tool_pins (tool, server, status, pending_hash, \
                     pending_definition, approval_id, pinned_ms) VALUES (?, ?, ?, ?, ?, ?, ?) \
                     ON CONFLICT (tool) DO UPDATE SET status = excluded.status, \
                     pending_hash = excluded.pending_hash, \
                     pending_definition = excluded.pending_definition, \
                     approval_id = excluded.approval_id",
                )
                .bind(tool)
                .bind(server)
                .bind(status)
                .bind(hash)
                .bind(to_json(definition)?)
                .bind(approval)
                .bind(now)
                .execute(&mut *tx)
                .await
                .port()?;
            }
            PinChange::Restore { tool } => {
                sqlx::query(
                    "UPDATE approvals SET approved = 0, decided_by = ?2, decided_ms = ?3 \
                     WHERE tool = ?1 AND approved IS NULL AND kind <> 'tool_call' AND EXISTS \
                     (SELECT 1 FROM tool_pins p WHERE p.tool = ?1 AND p.hash IS NOT NULL)",
                )
                .bind(tool)
                .bind(SUPERSEDED_BY)
                .bind(now)
                .execute(&mut *tx)
                .await
                .port()?;
                sqlx::query(
                    "UPDATE tool_pins SET status = 'active', pending_hash = NULL, \
                     pending_definition = NULL, approval_id = NULL \
                     WHERE tool = ? AND hash IS NOT NULL",
                )
                .bind(tool)
                .execute(&mut *tx)
                .await
                .port()?;
            }
        }
    }
    tx.commit().await.port()
}

pub(super) async fn decide_tool_approval(
    conn: &mut SqliteConnection,
    id: i64,
    approved: bool,
    by: &str,
) -> Result<Option<ApprovalRecord>, PortError> {
    let now = now_ms();
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.port()?;
    let tool: Option<String> = sqlx::query_scalar(
        "UPDATE approvals SET approved = ?1, decided_by = ?2, decided_ms = ?3 \
         WHERE id = ?4 AND approved IS NULL AND tool IS NOT NULL \
         AND (expires_ms IS NULL OR expires_ms > ?3) RETURNING tool",
    )
    .bind(approved)
    .bind(by)
    .bind(now)
    .bind(id)
    .fetch_optional(&mut *tx)
    .await
    .port()?;
    let Some(tool) = tool else {
        return Ok(None);
    };
    let update = if approved {
        sqlx::query(
            "UPDATE tool_pins SET status = 'active', hash = pending_hash, \
             definition = pending_definition, pending_hash = NULL, pending_definition = NULL, \
             approval_id = NULL, pinned_ms = ?, approved_by = ? \
             WHERE tool = ? AND approval_id = ?",
        )
        .bind(now)
        .bind(by)
    } else {
        sqlx::query("UPDATE tool_pins SET status = 'rejected' WHERE tool = ? AND approval_id = ?")
    };
    update.bind(&tool).bind(id).execute(&mut *tx).await.port()?;
    let row = sqlx::query(
        "SELECT id, kind, job_id, tool, amount, reason, detail, approved, decided_by, \
         requested_ms, decided_ms, expires_ms, expired, notified_ms FROM approvals WHERE id = ?",
    )
    .bind(id)
    .fetch_one(&mut *tx)
    .await
    .port()?;
    let record = approval_record(&row)?;
    tx.commit().await.port()?;
    Ok(Some(record))
}

pub(super) async fn record_audit(
    conn: &mut SqliteConnection,
    rows: &[AuditRecord],
) -> Result<(), PortError> {
    let owned: Vec<_> = rows
        .iter()
        .map(|a| (a.job_id.as_ref(), a.slice_id.as_ref(), a))
        .collect();
    let mut tx = conn.begin().await.port()?;
    insert_audit(&mut tx, &owned).await?;
    tx.commit().await.port()
}

pub(super) async fn audit_page(
    conn: &mut SqliteConnection,
    after: Option<i64>,
    limit: u32,
) -> Result<Vec<(i64, AuditRecord)>, PortError> {
    let rows = sqlx::query(
        "SELECT id, job_id, slice_id, seq, tool, args_digest, decision, reason, caller, \
         latency_us, result_bytes, error, at_ms FROM tool_audit WHERE id > ? ORDER BY id LIMIT ?",
    )
    .bind(after.unwrap_or(0))
    .bind(limit)
    .fetch_all(&mut *conn)
    .await
    .port()?;
    rows.iter().map(audit_record).collect()
}

pub(super) async fn tool_call_approval(
    conn: &mut SqliteConnection,
    tool: &str,
    args_digest: &str,
    reason: &str,
    detail: &serde_json::Value,
) -> Result<(i64, Option<bool>), PortError> {
    // The no-op update makes RETURNING answer for an approval asked for before.
    let row: (i64, Option<bool>) = sqlx::query_as(
        "INSERT INTO approvals (kind, tool, args_digest, reason, detail, requested_ms, id) \
         VALUES ('tool_call', ?, ?, ?, ?, ?, ?) \
         ON CONFLICT (tool, args_digest) WHERE kind = 'tool_call' DO UPDATE SET tool = tool \
         RETURNING id, approved",
    )
    .bind(tool)
    .bind(args_digest)
    .bind(reason)
    .bind(to_json(detail)?)
    .bind(now_ms())
    .bind(crate::new_approval_id()?)
    .fetch_one(&mut *conn)
    .await
    .port()?;
    Ok(row)
}

pub(super) async fn tool_listings(
    conn: &mut SqliteConnection,
) -> Result<Vec<ToolListing>, PortError> {
    let rows = sqlx::query("SELECT server, tools, listed_ms FROM tool_listings ORDER BY server")
        .fetch_all(&mut *conn)
        .await
        .port()?;
    rows.iter().map(tool_listing).collect()
}

pub(super) async fn save_tool_listing(
    conn: &mut SqliteConnection,
    l: &ToolListing,
) -> Result<(), PortError> {
    sqlx::query(
        "INSERT INTO tool_listings (server, tools, listed_ms) VALUES (?, ?, ?) \
         ON CONFLICT (server) DO UPDATE SET tools = excluded.tools, listed_ms = excluded.listed_ms",
    )
    .bind(&l.server)
    .bind(to_json(&l.tools)?)
    .bind(l.listed_ms)
    .execute(&mut *conn)
    .await
    .port()?;
    Ok(())
}
