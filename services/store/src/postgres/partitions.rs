//! Upkeep of the day partitions of the big insert-only tables (migration 0014,
//! docs/scaling.md): each table of [`PARTITIONED`] is partitioned by job id, and
//! a day's partition holds the rows of the jobs created that day (UTC).
//!
//! - Ahead: today's partition and those of the next [`AHEAD_DAYS`] days are made
//!   before rows arrive, so rows never wait for DDL. A row whose day has no
//!   partition (the scheduler was down for days) goes to the default partition,
//!   and that day's partition is then not made (Postgres refuses a partition
//!   whose rows sit in the default one): the rows stay readable where they are.
//! - Behind: a past day's partitions are dropped once no job of the day is left,
//!   that is once retention has deleted them all (its rows deleted in batches,
//!   their costs folded into the monthly ledger). Dropping the emptied tables
//!   gives their space back at once instead of leaving it to vacuum. The drop
//!   waits at most [`LOCK_WAIT`] for its locks (it needs the parent tables' for
//!   a moment), under Postgres's deadlock timeout, so it never holds up the
//!   outcome path; a drop that could not get them is tried at the next pass.

use sqlx::postgres::PgPool;
use trawl_core::model::JobId;
use trawl_core::ports::{Partitions, PortError};

use crate::error::ResultExt;

/// The partitioned tables, all keyed by `(job_id, slice_id, seq)`.
pub(super) const PARTITIONED: [&str; 4] = ["items", "rejections", "trace_steps", "costs"];

/// Days of partitions made ahead of today.
pub(super) const AHEAD_DAYS: i64 = 3;

const DAY_MS: i64 = 86_400_000;

/// How long a drop waits for its locks before giving up until the next pass.
const LOCK_WAIT: &str = "500ms";

pub(super) async fn keep(pool: &PgPool, now_ms: i64) -> Result<Partitions, PortError> {
    let today = now_ms - now_ms.rem_euclid(DAY_MS);
    let existing = existing(pool).await?;
    let mut done = Partitions::default();
    let days: Vec<(String, i64)> = sqlx::query_as(
        "SELECT to_char(to_timestamp(d / 1000.0) AT TIME ZONE 'UTC', 'YYYYMMDD'), d \
         FROM generate_series($1::BIGINT, $2::BIGINT, $3::BIGINT) d",
    )
    .bind(today)
    .bind(today + AHEAD_DAYS * DAY_MS)
    .bind(DAY_MS)
    .fetch_all(pool)
    .await
    .port()?;
    for (day, start) in days {
        let suffix = format!("_p{day}");
        if existing.iter().any(|p| p.suffix == suffix) {
            continue;
        }
        let (lo, hi) = (JobId::bound(start), JobId::bound(start + DAY_MS));
        let mut made = true;
        for t in PARTITIONED {
            // Names and bounds made here from numbers, not input.
            let sql = format!(
                "CREATE TABLE IF NOT EXISTS {t}{suffix} PARTITION OF {t} \
                 FOR VALUES FROM ('{lo}') TO ('{hi}')"
            );
            if let Err(e) = sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(pool).await {
                made = false;
                tracing::warn!(table = t, day = %day, error = %e, "a day's partition was not made; its rows go to the default partition");
            }
        }
        done.created += u32::from(made);
    }
    let past = JobId::bound(today - DAY_MS);
    for p in existing {
        if p.hi.as_deref().is_none_or(|hi| hi > past.as_str()) {
            continue;
        }
        if drop_if_empty(pool, &p).await? {
            done.dropped += 1;
            tracing::info!(partition = %p.suffix, "a past day's partitions dropped: no job of it is left");
        }
    }
    Ok(done)
}

/// A partition of `items` (and so of every table of [`PARTITIONED`]).
struct Partition {
    /// `_pYYYYMMDD`, or `_p0` for the rows stored before partitioning.
    suffix: String,
    /// The range of job ids; `None`: unbounded (the default partition has neither).
    lo: Option<String>,
    hi: Option<String>,
}

async fn existing(pool: &PgPool) -> Result<Vec<Partition>, PortError> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT c.relname::TEXT, pg_get_expr(c.relpartbound, c.oid) \
         FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
         WHERE i.inhparent = 'items'::regclass",
    )
    .fetch_all(pool)
    .await
    .port()?;
    Ok(rows
        .into_iter()
        .filter_map(|(name, bound)| {
            let suffix = name.strip_prefix("items")?.to_owned();
            // `FOR VALUES FROM ('job_…') TO ('job_…')`, `FROM (MINVALUE) …`,
            // or `DEFAULT`, which has no range and is never dropped.
            let (from, to) = bound.split_once(" TO ")?;
            Some(Partition {
                suffix,
                lo: quoted(from),
                hi: quoted(to),
            })
        })
        .collect())
}

/// The string literal in a bound's `('…')`, if it has one.
fn quoted(bound: &str) -> Option<String> {
    let start = bound.find("('")? + 2;
    let len = bound[start..].find("')")?;
    Some(bound[start..start + len].to_owned())
}

/// Drops the partitions of `p` in every table when no job of its range is left;
/// `false` when one is, or the locks were not had in time.
async fn drop_if_empty(pool: &PgPool, p: &Partition) -> Result<bool, PortError> {
    let mut tx = pool.begin().await.port()?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "SET LOCAL lock_timeout = '{LOCK_WAIT}'"
    )))
    .execute(&mut *tx)
    .await
    .port()?;
    let left: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM jobs WHERE ($1::TEXT IS NULL OR id >= $1) AND id < $2)",
    )
    .bind(p.lo.as_deref())
    .bind(p.hi.as_deref())
    .fetch_one(&mut *tx)
    .await
    .port()?;
    if left {
        return Ok(false);
    }
    let tables = PARTITIONED.map(|t| format!("{t}{}", p.suffix)).join(", ");
    // Names read from the catalog, of partitions this module or the migration
    // made; not input.
    let dropped = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP TABLE IF EXISTS {tables}"
    )))
    .execute(&mut *tx)
    .await;
    match dropped {
        Ok(_) => {
            tx.commit().await.port()?;
            Ok(true)
        }
        Err(e) => {
            tracing::warn!(partition = %p.suffix, error = %e, "a past day's partitions were not dropped; tried again at the next pass");
            Ok(false)
        }
    }
}
