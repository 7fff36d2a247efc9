//! The tool layer's tables: pins (with the approvals they raise) and the audit.

use sqlx::postgres::PgPool;
use trawl_core::model::{AuditRecord, now_ms};
use trawl_core::ports::{ApprovalRecord, PinChange, PortError, ToolListing, ToolPin};

use super::rows::{json, text, to_i64};
use crate::decode::{approval_record, audit_record, tool_listing, tool_pin};
use crate::error::ResultExt;
use crate::sqlite::tools::SUPERSEDED_BY;

pub(super) async fn tool_pins(pool: &PgPool) -> Result<Vec<ToolPin>, PortError> {
    let rows = sqlx::query(
        "SELECT tool, server, status, hash, definition::text AS definition, pending_hash, \
         pending_definition::text AS pending_definition, approval_id, pinned_ms, approved_by \
         FROM tool_pins ORDER BY tool",
    )
    .fetch_all(pool)
    .await
    .port()?;
    rows.iter().map(tool_pin).collect()
}

pub(super) async fn save_pins(pool: &PgPool, changes: &[PinChange]) -> Result<(), PortError> {
    if changes.is_empty() {
        return Ok(());
    }
    let now = now_ms();
    let mut tx = pool.begin().await.port()?;
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
                     approved_by) VALUES ($1, $2, 'active', $3, $4::jsonb, $5, $6) \
                     ON CONFLICT (tool) DO NOTHING",
                )
                .bind(text(tool))
                .bind(text(server))
                .bind(hash)
                .bind(json(definition)?)
                .bind(now)
                .bind(text(by))
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
                    "INSERT INTO approvals (id, kind, tool, reason, detail, requested_ms) \
                     VALUES ($6, $1, $2, $3, $4::jsonb, $5) \
                     ON CONFLICT (tool) WHERE approved IS NULL AND kind IN ('tool_change', 'new_tool', 'tool_review') \
                     DO UPDATE SET \
                     kind = EXCLUDED.kind, reason = EXCLUDED.reason, detail = EXCLUDED.detail, \
                     requested_ms = EXCLUDED.requested_ms, \
                     expires_ms = CASE WHEN approvals.kind = EXCLUDED.kind AND approvals.detail = EXCLUDED.detail \
                         THEN approvals.expires_ms END, \
                     notified_ms = CASE WHEN approvals.kind = EXCLUDED.kind AND approvals.detail = EXCLUDED.detail \
                         THEN approvals.notified_ms END \
                     RETURNING id",
                )
                .bind(*kind)
                .bind(text(tool))
                .bind(text(reason))
                .bind(json(detail)?)
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
                     pending_definition, approval_id, pinned_ms) \
                     VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7) \
                     ON CONFLICT (tool) DO UPDATE SET status = EXCLUDED.status, \
                     pending_hash = EXCLUDED.pending_hash, \
                     pending_definition = EXCLUDED.pending_definition, \
                     approval_id = EXCLUDED.approval_id",
                )
                .bind(text(tool))
                .bind(text(server))
                .bind(status)
                .bind(hash)
                .bind(json(definition)?)
                .bind(approval)
                .bind(now)
                .execute(&mut *tx)
                .await
                .port()?;
            }
            PinChange::Restore { tool } => {
                sqlx::query(
                    "UPDATE approvals SET approved = false, decided_by = $1, decided_ms = $2 \
                     WHERE tool = $3 AND approved IS NULL AND kind <> 'tool_call' AND EXISTS \
                     (SELECT 1 FROM tool_pins p WHERE p.tool = $3 AND p.hash IS NOT NULL)",
                )
                .bind(SUPERSEDED_BY)
                .bind(now)
                .bind(text(tool))
                .execute(&mut *tx)
                .await
                .port()?;
                sqlx::query(
                    "UPDATE tool_pins SET status = 'active', pending_hash = NULL, \
                     pending_definition = NULL, approval_id = NULL \
                     WHERE tool = $1 AND hash IS NOT NULL",
                )
                .bind(text(tool))
                .execute(&mut *tx)
                .await
                .port()?;
            }
        }
    }
    tx.commit().await.port()
}

pub(super) async fn decide_tool_approval(
    pool: &PgPool,
    id: i64,
    approved: bool,
    by: &str,
) -> Result<Option<ApprovalRecord>, PortError> {
    let now = now_ms();
    let by = text(by);
    let mut tx = pool.begin().await.port()?;
    let tool: Option<String> = sqlx::query_scalar(
        "UPDATE approvals SET approved = $1, decided_by = $2, decided_ms = $3 \
         WHERE id = $4 AND approved IS NULL AND tool IS NOT NULL \
         AND (expires_ms IS NULL OR expires_ms > $3) RETURNING tool",
    )
    .bind(approved)
    .bind(&by)
    .bind(now)
    .bind(id)
    .fetch_optional(&mut *tx)
    .await
    .port()?;
    let Some(tool) = tool else {
        return Ok(None);
    };
    if approved {
        sqlx::query(
            "UPDATE tool_pins SET status = 'active', hash = pending_hash, \
             definition = pending_definition, pending_hash = NULL, pending_definition = NULL, \
             approval_id = NULL, pinned_ms = $1, approved_by = $2 \
             WHERE tool = $3 AND approval_id = $4",
        )
        .bind(now)
        .bind(&by)
        .bind(&tool)
        .bind(id)
        .execute(&mut *tx)
        .await
        .port()?;
    } else {
        sqlx::query(
            "UPDATE tool_pins SET status = 'rejected' WHERE tool = $1 AND approval_id = $2",
        )
        .bind(&tool)
        .bind(id)
        .execute(&mut *tx)
        .await
        .port()?;
    }
    let row = sqlx::query(
        "SELECT id, kind, job_id, tool, amount, reason, detail::text AS detail, approved, \
         decided_by, requested_ms, decided_ms, expires_ms, expired, notified_ms FROM approvals \
         WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&mut *tx)
    .await
    .port()?;
    let record = approval_record(&row)?;
    tx.commit().await.port()?;
    Ok(Some(record))
}

pub(super) async fn record_audit(pool: &PgPool, rows: &[AuditRecord]) -> Result<(), PortError> {
    let col = |f: fn(&AuditRecord) -> String| rows.iter().map(f).collect::<Vec<_>>();
    sqlx::query(
        "INSERT INTO tool_audit (job_id, slice_id, seq, tool, args_digest, decision, reason, \
         caller, latency_us, result_bytes, error, at_ms) \
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], \
         $6::text[], $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::text[], \
         $12::bigint[]) ON CONFLICT DO NOTHING",
    )
    .bind(
        rows.iter()
            .map(|a| a.job_id.as_ref().map(|j| j.as_str().to_owned()))
            .collect::<Vec<_>>(),
    )
    .bind(
        rows.iter()
            .map(|a| a.slice_id.as_ref().map(|s| s.as_str().to_owned()))
            .collect::<Vec<_>>(),
    )
    .bind(rows.iter().map(|a| i64::from(a.seq)).collect::<Vec<_>>())
    .bind(col(|a| text(&a.tool).into_owned()))
    .bind(col(|a| text(&a.args_digest).into_owned()))
    .bind(col(|a| text(&a.decision).into_owned()))
    .bind(col(|a| text(&a.reason).into_owned()))
    .bind(col(|a| text(&a.caller).into_owned()))
    .bind(
        rows.iter()
            .map(|a| to_i64(a.latency_us))
            .collect::<Vec<_>>(),
    )
    .bind(
        rows.iter()
            .map(|a| to_i64(a.result_bytes))
            .collect::<Vec<_>>(),
    )
    .bind(
        rows.iter()
            .map(|a| a.error.as_deref().map(|e| text(e).into_owned()))
            .collect::<Vec<_>>(),
    )
    .bind(rows.iter().map(|a| a.at_ms).collect::<Vec<_>>())
    .execute(pool)
    .await
    .port()?;
    Ok(())
}

pub(super) async fn audit_page(
    pool: &PgPool,
    after: Option<i64>,
    limit: u32,
) -> Result<Vec<(i64, AuditRecord)>, PortError> {
    let rows = sqlx::query(
        "SELECT id, job_id, slice_id, seq, tool, args_digest, decision, reason, caller, \
         latency_us, result_bytes, error, at_ms FROM tool_audit WHERE id > $1 \
         ORDER BY id LIMIT $2",
    )
    .bind(after.unwrap_or(0))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
    .port()?;
    rows.iter().map(audit_record).collect()
}

pub(super) async fn tool_call_approval(
    pool: &PgPool,
    tool: &str,
    args_digest: &str,
    reason: &str,
    detail: &serde_json::Value,
) -> Result<(i64, Option<bool>), PortError> {
    // The no-op update makes RETURNING answer for an approval asked for before.
    let row: (i64, Option<bool>) = sqlx::query_as(
        "INSERT INTO approvals (id, kind, tool, args_digest, reason, detail, requested_ms) \
         VALUES ($6, 'tool_call', $1, $2, $3, $4::jsonb, $5) \
         ON CONFLICT (tool, args_digest) WHERE kind = 'tool_call' \
         DO UPDATE SET tool = approvals.tool RETURNING id, approved",
    )
    .bind(text(tool))
    .bind(args_digest)
    .bind(text(reason))
    .bind(json(detail)?)
    .bind(now_ms())
    .bind(crate::new_approval_id()?)
    .fetch_one(pool)
    .await
    .port()?;
    Ok(row)
}

pub(super) async fn tool_listings(pool: &PgPool) -> Result<Vec<ToolListing>, PortError> {
    let rows = sqlx::query("SELECT server, tools, listed_ms FROM tool_listings ORDER BY server")
        .fetch_all(pool)
        .await
        .port()?;
    rows.iter().map(tool_listing).collect()
}

pub(super) async fn save_tool_listing(pool: &PgPool, l: &ToolListing) -> Result<(), PortError> {
    sqlx::query(
        "INSERT INTO tool_listings (server, tools, listed_ms) VALUES ($1, $2, $3) \
         ON CONFLICT (server) DO UPDATE SET tools = excluded.tools, listed_ms = excluded.listed_ms",
    )
    .bind(text(&l.server))
    // JSON text escapes every control character, NUL included: it is stored
    // as it is.
    .bind(
        serde_json::to_string(&l.tools)
            .map_err(|e| PortError::Corrupt(format!("cannot encode: {e}")))?,
    )
    .bind(l.listed_ms)
    .execute(pool)
    .await
    .port()?;
    Ok(())
}
