//! Retention in the embedded store: as the Postgres store's (see
//! `postgres/retention.rs`), each batch one transaction on the one connection; a
//! batch of cost rows is added to the monthly ledger and deleted in the same one.

use sqlx::{AssertSqlSafe, Connection, Row, SqliteConnection};
use trawl_core::cost::Micros;
use trawl_core::model::JobId;
use trawl_core::ports::{CostMonth, PURGED, PortError};

use crate::error::ResultExt;

/// The month (UTC, `YYYY-MM`) of a job's creation, in SQL.
const MONTH: &str = "strftime('%Y-%m', j.created_ms / 1000, 'unixepoch')";

/// Ended jobs past their retention. Every job keeps at least `MIN_RETENTION` (1 h)
/// or the default, so only jobs that ended before the smaller of the two are
/// looked at: a range of the `jobs_ended` index, not every ended job.
pub(super) async fn expired_jobs(
    conn: &mut SqliteConnection,
    now_ms: i64,
    default_ms: i64,
    limit: u32,
) -> Result<Vec<JobId>, PortError> {
    let ids: Vec<String> = sqlx::query_scalar(
        "SELECT id FROM jobs \
         WHERE status IN ('succeeded', 'partial', 'failed', 'cancelled') \
         AND updated_ms < ?1 - COALESCE(retention_ms, ?2) \
         AND updated_ms < ?1 - MIN(?2, 3600000) \
         ORDER BY updated_ms, id LIMIT ?3",
    )
    .bind(now_ms)
    .bind(default_ms)
    .bind(i64::from(limit))
    .fetch_all(&mut *conn)
    .await
    .port()?;
    ids.into_iter()
        .map(|id| crate::decode::job_id_of(&id))
        .collect()
}

pub(super) async fn purge_job(
    conn: &mut SqliteConnection,
    id: &JobId,
    batch: u32,
) -> Result<u64, PortError> {
    for &(table, key) in PURGED {
        // The same rows for the ledger and the delete: the first `batch` by key.
        let chosen = format!("SELECT {key} FROM {table} WHERE job_id = ?1 ORDER BY {key} LIMIT ?2");
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.port()?;
        if table == "costs" {
            sqlx::query(AssertSqlSafe(format!(
                "INSERT INTO cost_months (month, product, amount) \
                 SELECT {MONTH}, c.product, SUM(c.amount) FROM costs c, jobs j \
                 WHERE j.id = ?1 AND c.job_id = ?1 AND ({key}) IN ({chosen}) \
                 GROUP BY 1, 2 \
                 ON CONFLICT (month, product) DO UPDATE SET amount = amount + excluded.amount"
            )))
            .bind(id.as_str())
            .bind(i64::from(batch))
            .execute(&mut *tx)
            .await
            .port()?;
        }
        // Table and column names from PURGED, not input.
        let n = sqlx::query(AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE job_id = ?1 AND ({key}) IN ({chosen})"
        )))
        .bind(id.as_str())
        .bind(i64::from(batch))
        .execute(&mut *tx)
        .await
        .port()?
        .rows_affected();
        tx.commit().await.port()?;
        if n > 0 {
            return Ok(n);
        }
    }
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.port()?;
    sqlx::query("DELETE FROM job_counts WHERE job_id = ?")
        .bind(id.as_str())
        .execute(&mut *tx)
        .await
        .port()?;
    let gone = sqlx::query("DELETE FROM jobs WHERE id = ?")
        .bind(id.as_str())
        .execute(&mut *tx)
        .await
        .port()?
        .rows_affected();
    tx.commit().await.port()?;
    Ok(gone)
}

pub(super) async fn job_rows(
    conn: &mut SqliteConnection,
    id: &JobId,
) -> Result<Vec<(&'static str, u64)>, PortError> {
    let mut out = Vec::with_capacity(PURGED.len() + 1);
    for &(table, _) in PURGED {
        let n: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM {table} WHERE job_id = ?"
        )))
        .bind(id.as_str())
        .fetch_one(&mut *conn)
        .await
        .port()?;
        out.push((table, u64::try_from(n).unwrap_or(0)));
    }
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE id = ?")
        .bind(id.as_str())
        .fetch_one(&mut *conn)
        .await
        .port()?;
    out.push(("jobs", u64::try_from(n).unwrap_or(0)));
    Ok(out)
}

pub(super) async fn cost_months(conn: &mut SqliteConnection) -> Result<Vec<CostMonth>, PortError> {
    let rows = sqlx::query(AssertSqlSafe(format!(
        "SELECT month, product, SUM(amount) AS amount FROM ( \
             SELECT month, product, amount FROM cost_months \
             UNION ALL \
             SELECT {MONTH} AS month, c.product, c.amount FROM costs c JOIN jobs j ON j.id = c.job_id \
         ) GROUP BY month, product ORDER BY month, product"
    )))
    .fetch_all(&mut *conn)
    .await
    .port()?;
    rows.iter()
        .map(|r| {
            Ok(CostMonth {
                month: r.try_get("month").port()?,
                product: r.try_get("product").port()?,
                amount: Micros(r.try_get("amount").port()?),
            })
        })
        .collect()
}
