//! Retention: finding the jobs whose retention has passed and deleting them a
//! batch of rows at a time, each batch one statement (no long transaction, no
//! lock beyond the rows it deletes). A job's cost rows are added to the monthly
//! ledger (`cost_months`) by the statement that deletes them, so no cost is
//! counted twice or lost whatever stops the purge half-way.

use sqlx::postgres::PgPool;
use trawl_core::cost::Micros;
use trawl_core::model::JobId;
use trawl_core::ports::{CostMonth, PURGED, PortError};

use super::rows::get;
use crate::error::ResultExt;

/// The month (UTC, `YYYY-MM`) of a job's creation, in SQL.
const MONTH: &str = "to_char(to_timestamp(j.created_ms / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM')";

/// Ended jobs past their retention. Every job keeps at least `MIN_RETENTION` (1 h)
/// or the default, so only jobs that ended before the smaller of the two are
/// looked at: a range of the `jobs_ended` index, not every ended job.
pub(super) async fn expired_jobs(
    pool: &PgPool,
    now_ms: i64,
    default_ms: i64,
    limit: u32,
) -> Result<Vec<JobId>, PortError> {
    let ids: Vec<String> = sqlx::query_scalar(
        "SELECT id FROM jobs \
         WHERE status IN ('succeeded', 'partial', 'failed', 'cancelled') \
         AND updated_ms < $1 - COALESCE(retention_ms, $2) \
         AND updated_ms < $1 - LEAST($2, 3600000) \
         ORDER BY updated_ms, id LIMIT $3",
    )
    .bind(now_ms)
    .bind(default_ms)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
    .port()?;
    ids.into_iter()
        .map(|id| crate::decode::job_id_of(&id))
        .collect()
}

pub(super) async fn purge_job(pool: &PgPool, id: &JobId, batch: u32) -> Result<u64, PortError> {
    for &(table, key) in PURGED {
        let sql = if table == "costs" {
            format!(
                "WITH gone AS ( \
                     DELETE FROM costs WHERE job_id = $1 AND ({key}) IN \
                     (SELECT {key} FROM costs WHERE job_id = $1 LIMIT $2) \
                     RETURNING product, amount \
                 ), folded AS ( \
                     INSERT INTO cost_months AS c (month, product, amount) \
                     SELECT {MONTH}, g.product, SUM(g.amount) FROM gone g, jobs j \
                     WHERE j.id = $1 GROUP BY 1, 2 \
                     ON CONFLICT (month, product) DO UPDATE SET amount = c.amount + EXCLUDED.amount \
                 ) SELECT COUNT(*) FROM gone"
            )
        } else {
            format!(
                "WITH gone AS ( \
                     DELETE FROM {table} WHERE job_id = $1 AND ({key}) IN \
                     (SELECT {key} FROM {table} WHERE job_id = $1 LIMIT $2) RETURNING 1 \
                 ) SELECT COUNT(*) FROM gone"
            )
        };
        // Table and column names from PURGED, not input.
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(id.as_str())
            .bind(i64::from(batch))
            .fetch_one(pool)
            .await
            .port()?;
        if n > 0 {
            return Ok(u64::try_from(n).unwrap_or(0));
        }
    }
    let mut tx = pool.begin().await.port()?;
    sqlx::query("DELETE FROM job_counters WHERE job_id = $1")
        .bind(id.as_str())
        .execute(&mut *tx)
        .await
        .port()?;
    let gone = sqlx::query("DELETE FROM jobs WHERE id = $1")
        .bind(id.as_str())
        .execute(&mut *tx)
        .await
        .port()?
        .rows_affected();
    tx.commit().await.port()?;
    Ok(gone)
}

pub(super) async fn job_rows(
    pool: &PgPool,
    id: &JobId,
) -> Result<Vec<(&'static str, u64)>, PortError> {
    let mut out = Vec::with_capacity(PURGED.len() + 1);
    for &(table, _) in PURGED {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM {table} WHERE job_id = $1"
        )))
        .bind(id.as_str())
        .fetch_one(pool)
        .await
        .port()?;
        out.push((table, u64::try_from(n).unwrap_or(0)));
    }
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE id = $1")
        .bind(id.as_str())
        .fetch_one(pool)
        .await
        .port()?;
    out.push(("jobs", u64::try_from(n).unwrap_or(0)));
    Ok(out)
}

pub(super) async fn cost_months(pool: &PgPool) -> Result<Vec<CostMonth>, PortError> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT month, product, SUM(amount)::BIGINT AS amount FROM ( \
             SELECT month, product, amount FROM cost_months \
             UNION ALL \
             SELECT {MONTH} AS month, c.product, c.amount FROM costs c JOIN jobs j ON j.id = c.job_id \
         ) t GROUP BY month, product ORDER BY month, product"
    )))
    .fetch_all(pool)
    .await
    .port()?;
    rows.iter()
        .map(|r| {
            Ok(CostMonth {
                month: get(r, "month")?,
                product: get(r, "product")?,
                amount: Micros(get(r, "amount")?),
            })
        })
        .collect()
}
