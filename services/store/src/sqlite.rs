//! The embedded store: one SQLite file (or an in-memory database for tests).
//!
//! Every call borrows the pool's single connection, so calls queue in the process
//! instead of contending for SQLite's write lock. Transactions that write begin with
//! `BEGIN IMMEDIATE`, so another process holding the file makes them wait (up to the
//! busy timeout) at the start rather than fail half-way.
//!
//! Rows are inserted many per statement (see [`values_sql`]), which is what keeps
//! `create_job` with 100,000 slices and `record_outcome` at thousands per second
//! cheap: the cost of a statement is mostly its round trip to the connection's
//! worker thread, not the rows it carries.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool,
    SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, Row, Sqlite};
use tracing::instrument;
use trawl_core::cost::Micros;
use trawl_core::geo::Geo;
use trawl_core::model::{
    CostEntry, Item, ItemKind, JobCounts, JobId, JobStatus, Rejection, SliceError, SliceId,
    SliceKind, SliceOutcome, SliceSpec, TraceStep, Violation, now_ms,
};
use trawl_core::ports::{Approval, FailedSlice, JobRecord, PortError, Recorded, Store};

use crate::error::ResultExt;

/// The schema, one script per version; `PRAGMA user_version` says how many are applied.
const MIGRATIONS: &[&str] = &[include_str!("sqlite.sql")];

/// Rows per multi-row `INSERT`, unless the bound-parameter limit says fewer.
const ROWS_PER_STATEMENT: usize = 500;
/// SQLite's limit on bound parameters per statement (`SQLITE_MAX_VARIABLE_NUMBER`).
const MAX_PARAMS: usize = 32_766;

/// How long a statement waits for another process's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

type Query<'q> = sqlx::query::Query<'q, Sqlite, SqliteArguments>;

/// The SQLite adapter of [`Store`]. Cheap to clone: clones share the connection.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `path` and brings its schema up
    /// to date. WAL journal, `synchronous = NORMAL` (a power loss may lose the last
    /// transactions, never consistency), foreign keys on, 5 s busy timeout.
    #[instrument(skip_all, fields(path = %path.display()))]
    pub async fn open(path: &Path) -> Result<SqliteStore, PortError> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        SqliteStore::connect(options).await
    }

    /// A private in-memory database, gone when the store is dropped. For tests.
    pub async fn memory() -> Result<SqliteStore, PortError> {
        let options = SqliteConnectOptions::new()
            .in_memory(true)
            .foreign_keys(true);
        SqliteStore::connect(options).await
    }

    async fn connect(options: SqliteConnectOptions) -> Result<SqliteStore, PortError> {
        // One connection, kept for the life of the store: SQLite has one writer, and
        // an in-memory database lives exactly as long as its connection.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .test_before_acquire(false)
            .connect_with(options)
            .await
            .port()?;
        migrate(&pool).await?;
        Ok(SqliteStore { pool })
    }

    /// Waits for the connection to be returned, then closes it.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Applies the scripts of [`MIGRATIONS`] the database has not seen, each in the same
/// transaction as the version bump. A database newer than this build is refused.
async fn migrate(pool: &SqlitePool) -> Result<(), PortError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.port()?;
    let version: i64 = sqlx::query_scalar("PRAGMA user_version")
        .fetch_one(&mut *tx)
        .await
        .port()?;
    let applied = usize::try_from(version)
        .ok()
        .filter(|v| *v <= MIGRATIONS.len())
        .ok_or_else(|| {
            PortError::Corrupt(format!(
                "store schema version {version} is not one this build knows (1..={})",
                MIGRATIONS.len()
            ))
        })?;
    for (i, script) in MIGRATIONS.iter().enumerate().skip(applied) {
        tracing::info!(version = i + 1, "applying store schema");
        sqlx::raw_sql(*script).execute(&mut *tx).await.port()?;
        // An integer we produce, not input.
        let bump = format!("PRAGMA user_version = {}", i + 1);
        sqlx::query(AssertSqlSafe(bump))
            .execute(&mut *tx)
            .await
            .port()?;
    }
    tx.commit().await.port()
}

// ---------------------------------------------------------------------------
// Multi-row inserts

/// `head VALUES row, row, … tail` with `rows` copies of `row`, e.g.
/// `values_sql("INSERT INTO t (a, b)", "(?, ?)", 2, "")`.
fn values_sql(head: &str, row: &str, rows: usize, tail: &str) -> String {
    let mut sql = String::with_capacity(head.len() + tail.len() + 8 + rows * (row.len() + 2));
    sql.push_str(head);
    sql.push_str(" VALUES ");
    for i in 0..rows {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(row);
    }
    let _ = write!(sql, " {tail}");
    sql
}

/// How many rows of `params` parameters one statement may carry.
fn rows_per_statement(params: usize) -> usize {
    ROWS_PER_STATEMENT.min(MAX_PARAMS / params.max(1)).max(1)
}

/// A multi-row statement over `chunk`, each row bound by `bind`.
fn batch<'q, T>(
    head: &str,
    row: &str,
    tail: &str,
    chunk: &[T],
    mut bind: impl FnMut(Query<'q>, &T) -> Result<Query<'q>, PortError>,
) -> Result<Query<'q>, PortError> {
    // The text comes from constants in this file and a row count, never from input.
    let mut q = sqlx::query(AssertSqlSafe(values_sql(head, row, chunk.len(), tail)));
    for r in chunk {
        q = bind(q, r)?;
    }
    Ok(q)
}

const INSERT_SLICES: &str =
    "INSERT INTO slices (job_id, slice_id, parent_id, kind, spec, created_ms)";
const SLICE_ROW: &str = "(?, ?, ?, ?, ?, ?)";
const SLICE_PARAMS: usize = 6;

const INSERT_ITEMS: &str = "INSERT INTO items (job_id, slice_id, seq, kind, url, geo, data)";
const ITEM_ROW: &str = "(?, ?, ?, ?, ?, ?, ?)";
const ITEM_PARAMS: usize = 7;

const INSERT_REJECTIONS: &str =
    "INSERT INTO rejections (job_id, slice_id, seq, url, geo, data, errors)";
const REJECTION_ROW: &str = "(?, ?, ?, ?, ?, ?, ?)";
const REJECTION_PARAMS: usize = 7;

const INSERT_TRACE: &str = "INSERT INTO trace_steps (job_id, slice_id, seq, tool, args_digest, \
     cache_hit, attempt, status, error, latency_us, cost, at_ms)";
const TRACE_ROW: &str = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
const TRACE_PARAMS: usize = 12;

const INSERT_COSTS: &str = "INSERT INTO costs (job_id, slice_id, seq, product, amount)";
const COST_ROW: &str = "(?, ?, ?, ?, ?)";
const COST_PARAMS: usize = 5;

const ON_CONFLICT_SKIP: &str = "ON CONFLICT DO NOTHING";

fn to_json<T: serde::Serialize + ?Sized>(v: &T) -> Result<String, PortError> {
    serde_json::to_string(v).map_err(|e| PortError::Corrupt(format!("cannot encode: {e}")))
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Inserts slices as pending; ids already in the job are skipped. Returns the ids
/// actually inserted when `returning` is set (otherwise an empty set).
async fn insert_slices(
    conn: &mut SqliteConnection,
    job: &JobId,
    slices: &[SliceSpec],
    now: i64,
    returning: bool,
) -> Result<HashSet<String>, PortError> {
    let tail = if returning {
        "ON CONFLICT DO NOTHING RETURNING slice_id"
    } else {
        ON_CONFLICT_SKIP
    };
    let mut inserted = HashSet::new();
    for chunk in slices.chunks(rows_per_statement(SLICE_PARAMS)) {
        let q = batch(INSERT_SLICES, SLICE_ROW, tail, chunk, |q, s| {
            Ok(q.bind(job.as_str())
                .bind(s.id.as_str())
                .bind(s.parent.as_ref().map(|p| p.as_str()))
                .bind(s.kind.name())
                .bind(to_json(s)?)
                .bind(now))
        })?;
        if returning {
            for row in q.fetch_all(&mut *conn).await.port()? {
                inserted.insert(row.try_get::<String, _>(0).port()?);
            }
        } else {
            q.execute(&mut *conn).await.port()?;
        }
    }
    Ok(inserted)
}

/// Writes the rows an outcome carries, keyed by `slice`: the outcome is the slice's,
/// whatever slice id its records name.
async fn insert_outcome_rows(
    conn: &mut SqliteConnection,
    job: &JobId,
    slice: &SliceId,
    outcome: &SliceOutcome,
) -> Result<(), PortError> {
    let job = job.as_str();
    let slice_str = slice.as_str();
    let strays = outcome.items.iter().filter(|r| &r.slice_id != slice).count()
        + outcome
            .rejections
            .iter()
            .filter(|r| &r.slice_id != slice)
            .count()
        + outcome.trace.iter().filter(|r| &r.slice_id != slice).count()
        + outcome.costs.iter().filter(|r| &r.slice_id != slice).count();
    if strays > 0 {
        tracing::warn!(strays, "outcome records name another slice; stored under this one");
    }

    for chunk in outcome.items.chunks(rows_per_statement(ITEM_PARAMS)) {
        batch(INSERT_ITEMS, ITEM_ROW, ON_CONFLICT_SKIP, chunk, |q, it: &Item| {
            Ok(q.bind(job)
                .bind(slice_str)
                .bind(it.seq)
                .bind(it.kind.as_str())
                .bind(it.url.as_str())
                .bind(it.geo.as_str())
                .bind(to_json(&it.data)?))
        })?
        .execute(&mut *conn)
        .await
        .port()?;
    }
    for chunk in outcome.rejections.chunks(rows_per_statement(REJECTION_PARAMS)) {
        batch(
            INSERT_REJECTIONS,
            REJECTION_ROW,
            ON_CONFLICT_SKIP,
            chunk,
            |q, r: &Rejection| {
                Ok(q.bind(job)
                    .bind(slice_str)
                    .bind(r.seq)
                    .bind(r.url.as_str())
                    .bind(r.geo.as_str())
                    .bind(to_json(&r.data)?)
                    .bind(to_json(&r.errors)?))
            },
        )?
        .execute(&mut *conn)
        .await
        .port()?;
    }
    for chunk in outcome.trace.chunks(rows_per_statement(TRACE_PARAMS)) {
        batch(INSERT_TRACE, TRACE_ROW, ON_CONFLICT_SKIP, chunk, |q, t: &TraceStep| {
            Ok(q.bind(job)
                .bind(slice_str)
                .bind(t.seq)
                .bind(t.tool.as_str())
                .bind(t.args_digest.as_str())
                .bind(t.cache_hit)
                .bind(t.attempt)
                .bind(t.status.as_str())
                .bind(t.error.as_deref())
                .bind(to_i64(t.latency_us))
                .bind(t.cost.0)
                .bind(t.at_ms))
        })?
        .execute(&mut *conn)
        .await
        .port()?;
    }
    for chunk in outcome.costs.chunks(rows_per_statement(COST_PARAMS)) {
        batch(INSERT_COSTS, COST_ROW, ON_CONFLICT_SKIP, chunk, |q, c: &CostEntry| {
            Ok(q.bind(job)
                .bind(slice_str)
                .bind(c.seq)
                .bind(c.product.as_str())
                .bind(c.amount.0))
        })?
        .execute(&mut *conn)
        .await
        .port()?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Decoding

fn corrupt(what: &str, e: impl std::fmt::Display) -> PortError {
    PortError::Corrupt(format!("stored {what}: {e}"))
}

fn get<'r, T>(row: &'r SqliteRow, col: &str) -> Result<T, PortError>
where
    T: sqlx::Decode<'r, Sqlite> + sqlx::Type<Sqlite>,
{
    row.try_get(col).port()
}

fn get_u32(row: &SqliteRow, col: &str) -> Result<u32, PortError> {
    let v: i64 = get(row, col)?;
    u32::try_from(v).map_err(|e| corrupt(col, e))
}

fn get_u64(row: &SqliteRow, col: &str) -> Result<u64, PortError> {
    let v: i64 = get(row, col)?;
    u64::try_from(v).map_err(|e| corrupt(col, e))
}

fn get_geo(row: &SqliteRow) -> Result<Geo, PortError> {
    let s: String = get(row, "geo")?;
    Geo::parse(&s).map_err(|e| corrupt("geo", e))
}

fn get_json<T: serde::de::DeserializeOwned>(row: &SqliteRow, col: &str) -> Result<T, PortError> {
    let s: String = get(row, col)?;
    serde_json::from_str(&s).map_err(|e| corrupt(col, e))
}

fn job_record(row: &SqliteRow) -> Result<JobRecord, PortError> {
    let id: String = get(row, "id")?;
    let status: String = get(row, "status")?;
    Ok(JobRecord {
        id: JobId::parse(&id).map_err(|e| corrupt("job id", e))?,
        name: get(row, "name")?,
        spec: get_json(row, "spec")?,
        status: JobStatus::parse(&status)
            .ok_or_else(|| corrupt("job status", format!("\"{status}\" is unknown")))?,
        reason: get(row, "reason")?,
        estimate: Micros(get(row, "estimate")?),
        created_ms: get(row, "created_ms")?,
    })
}

fn item(row: &SqliteRow) -> Result<Item, PortError> {
    let kind: String = get(row, "kind")?;
    Ok(Item {
        slice_id: SliceId::from_stored(get(row, "slice_id")?),
        seq: get_u32(row, "seq")?,
        kind: ItemKind::parse(&kind)
            .ok_or_else(|| corrupt("item kind", format!("\"{kind}\" is unknown")))?,
        url: get(row, "url")?,
        geo: get_geo(row)?,
        data: get_json(row, "data")?,
    })
}

fn rejection(row: &SqliteRow) -> Result<Rejection, PortError> {
    Ok(Rejection {
        slice_id: SliceId::from_stored(get(row, "slice_id")?),
        seq: get_u32(row, "seq")?,
        url: get(row, "url")?,
        geo: get_geo(row)?,
        data: get_json(row, "data")?,
        errors: get_json::<Vec<Violation>>(row, "errors")?,
    })
}

fn failed_slice(row: &SqliteRow) -> Result<FailedSlice, PortError> {
    let spec: SliceSpec = get_json(row, "spec")?;
    let subject = match &spec.kind {
        SliceKind::Search { query, .. } => query.clone(),
        SliceKind::Page { url, .. } => url.clone(),
    };
    Ok(FailedSlice {
        slice_id: spec.id.clone(),
        kind: spec.kind.name().to_owned(),
        subject,
        geo: spec.kind.geo().as_str().to_owned(),
        error: SliceError {
            code: get::<Option<String>>(row, "error_code")?.unwrap_or_default(),
            message: get::<Option<String>>(row, "error_message")?.unwrap_or_default(),
        },
    })
}

fn job_counts(row: &SqliteRow) -> Result<JobCounts, PortError> {
    Ok(JobCounts {
        slices_total: get_u64(row, "slices_total")?,
        slices_succeeded: get_u64(row, "slices_succeeded")?,
        slices_failed: get_u64(row, "slices_failed")?,
        items_valid: get_u64(row, "items_valid")?,
        items_rejected: get_u64(row, "items_rejected")?,
        upstream_calls: get_u64(row, "upstream_calls")?,
        cache_hits: get_u64(row, "cache_hits")?,
        cost: Micros(get(row, "cost")?),
        budget_stops: get_u64(row, "budget_stops")?,
    })
}

fn no_job(id: &JobId) -> PortError {
    PortError::NotFound(format!("job {id}"))
}

// ---------------------------------------------------------------------------
// The port

#[async_trait]
impl Store for SqliteStore {
    #[instrument(skip_all, fields(job_id = %job.id, slices = slices.len()))]
    async fn create_job(&self, job: &JobRecord, slices: &[SliceSpec]) -> Result<(), PortError> {
        let now = now_ms();
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await.port()?;
        sqlx::query(
            "INSERT INTO jobs (id, name, spec, status, reason, estimate, created_ms, updated_ms) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(job.id.as_str())
        .bind(job.name.as_str())
        .bind(to_json(&job.spec)?)
        .bind(job.status.as_str())
        .bind(job.reason.as_deref())
        .bind(job.estimate.0)
        .bind(job.created_ms)
        .bind(now)
        .execute(&mut *tx)
        .await
        .port()?;
        insert_slices(&mut tx, &job.id, slices, now, false).await?;
        tx.commit().await.port()
    }

    async fn job(&self, id: &JobId) -> Result<Option<JobRecord>, PortError> {
        sqlx::query(
            "SELECT id, name, spec, status, reason, estimate, created_ms FROM jobs WHERE id = ?",
        )
        .bind(id.as_str())
        .fetch_optional(&self.pool)
        .await
        .port()?
        .as_ref()
        .map(job_record)
        .transpose()
    }

    #[instrument(skip_all, fields(job_id = %id, status = status.as_str()))]
    async fn set_job_status(
        &self,
        id: &JobId,
        status: JobStatus,
        reason: Option<&str>,
    ) -> Result<(), PortError> {
        let done = sqlx::query("UPDATE jobs SET status = ?, reason = ?, updated_ms = ? WHERE id = ?")
            .bind(status.as_str())
            .bind(reason)
            .bind(now_ms())
            .bind(id.as_str())
            .execute(&self.pool)
            .await
            .port()?;
        if done.rows_affected() == 0 {
            return Err(no_job(id));
        }
        Ok(())
    }

    async fn open_slices(&self, id: &JobId) -> Result<Vec<SliceSpec>, PortError> {
        sqlx::query(
            "SELECT spec FROM slices WHERE job_id = ? AND status = 'pending' ORDER BY slice_id",
        )
        .bind(id.as_str())
        .fetch_all(&self.pool)
        .await
        .port()?
        .iter()
        .map(|row| get_json(row, "spec"))
        .collect()
    }

    #[instrument(level = "debug", skip_all, fields(job_id = %job, slice_id = %slice))]
    async fn record_outcome(
        &self,
        job: &JobId,
        slice: &SliceId,
        outcome: &SliceOutcome,
    ) -> Result<Recorded, PortError> {
        let now = now_ms();
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await.port()?;

        // Claim the slice: only a pending one moves, so a redelivery after the first
        // write changes nothing.
        let claimed = sqlx::query(
            "UPDATE slices SET status = ?, error_code = ?, error_message = ?, finished_ms = ? \
             WHERE job_id = ? AND slice_id = ? AND status = 'pending'",
        )
        .bind(outcome.status().as_str())
        .bind(outcome.error.as_ref().map(|e| e.code.as_str()))
        .bind(outcome.error.as_ref().map(|e| e.message.as_str()))
        .bind(now)
        .bind(job.as_str())
        .bind(slice.as_str())
        .execute(&mut *tx)
        .await
        .port()?
        .rows_affected();
        if claimed == 0 {
            let exists = sqlx::query("SELECT 1 FROM slices WHERE job_id = ? AND slice_id = ?")
                .bind(job.as_str())
                .bind(slice.as_str())
                .fetch_optional(&mut *tx)
                .await
                .port()?;
            tx.rollback().await.port()?;
            return match exists {
                Some(_) => {
                    tracing::debug!("slice already terminal; outcome not written");
                    Ok(Recorded::default())
                }
                None => Err(PortError::NotFound(format!("slice {slice} of job {job}"))),
            };
        }

        insert_outcome_rows(&mut tx, job, slice, outcome).await?;
        let mut inserted = if outcome.children.is_empty() {
            HashSet::new()
        } else {
            insert_slices(&mut tx, job, &outcome.children, now, true).await?
        };
        tx.commit().await.port()?;

        // `remove` keeps the first of children listed twice.
        let new_children = outcome
            .children
            .iter()
            .filter(|c| inserted.remove(c.id.as_str()))
            .cloned()
            .collect();
        Ok(Recorded {
            written: true,
            new_children,
        })
    }

    async fn counts(&self, id: &JobId) -> Result<JobCounts, PortError> {
        let row = sqlx::query(
            "SELECT slices_total, slices_succeeded, slices_failed, budget_stops, items_valid, \
             items_rejected, upstream_calls, cache_hits, cost FROM job_counts WHERE job_id = ?",
        )
        .bind(id.as_str())
        .fetch_optional(&self.pool)
        .await
        .port()?
        .ok_or_else(|| no_job(id))?;
        job_counts(&row)
    }

    async fn spent(&self, id: &JobId) -> Result<Micros, PortError> {
        let cost: Option<i64> = sqlx::query_scalar("SELECT cost FROM job_counts WHERE job_id = ?")
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await
            .port()?;
        cost.map(Micros).ok_or_else(|| no_job(id))
    }

    async fn items(&self, id: &JobId) -> Result<Vec<Item>, PortError> {
        sqlx::query(
            "SELECT slice_id, seq, kind, url, geo, data FROM items WHERE job_id = ? \
             ORDER BY slice_id, seq",
        )
        .bind(id.as_str())
        .fetch_all(&self.pool)
        .await
        .port()?
        .iter()
        .map(item)
        .collect()
    }

    async fn rejections(&self, id: &JobId) -> Result<Vec<Rejection>, PortError> {
        sqlx::query(
            "SELECT slice_id, seq, url, geo, data, errors FROM rejections WHERE job_id = ? \
             ORDER BY slice_id, seq",
        )
        .bind(id.as_str())
        .fetch_all(&self.pool)
        .await
        .port()?
        .iter()
        .map(rejection)
        .collect()
    }

    async fn failed_slices(&self, id: &JobId, limit: u32) -> Result<Vec<FailedSlice>, PortError> {
        sqlx::query(
            "SELECT spec, error_code, error_message FROM slices \
             WHERE job_id = ? AND status = 'failed' ORDER BY slice_id LIMIT ?",
        )
        .bind(id.as_str())
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .port()?
        .iter()
        .map(failed_slice)
        .collect()
    }

    /// Stores `approval` as pending (its decision fields are ignored), replacing a
    /// pending one of the same job.
    #[instrument(skip_all, fields(job_id = %approval.job_id))]
    async fn request_approval(&self, approval: &Approval) -> Result<(), PortError> {
        sqlx::query(
            "INSERT INTO approvals (job_id, amount, reason, requested_ms) VALUES (?, ?, ?, ?) \
             ON CONFLICT (job_id) WHERE approved IS NULL DO UPDATE SET \
             amount = excluded.amount, reason = excluded.reason, \
             requested_ms = excluded.requested_ms",
        )
        .bind(approval.job_id.as_str())
        .bind(approval.amount.0)
        .bind(approval.reason.as_str())
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .port()?;
        Ok(())
    }

    #[instrument(skip_all, fields(job_id = %id, approved))]
    async fn decide_approval(
        &self,
        id: &JobId,
        approved: bool,
        by: &str,
    ) -> Result<Option<Approval>, PortError> {
        let row = sqlx::query(
            "UPDATE approvals SET approved = ?, decided_by = ?, decided_ms = ? \
             WHERE job_id = ? AND approved IS NULL RETURNING amount, reason",
        )
        .bind(approved)
        .bind(by)
        .bind(now_ms())
        .bind(id.as_str())
        .fetch_optional(&self.pool)
        .await
        .port()?;
        row.map(|row| {
            Ok(Approval {
                job_id: id.clone(),
                amount: Micros(get(&row, "amount")?),
                reason: get(&row, "reason")?,
                approved: Some(approved),
                decided_by: Some(by.to_owned()),
            })
        })
        .transpose()
    }
}

#[cfg(test)]
mod tests;
