//! The embedded store: one SQLite file (or an in-memory database for tests).
//!
//! - this file: opening, the schema version, and the [`Store`] methods;
//! - `outcomes`: `record_outcome`, with group commit;
//! - `rows`: multi-row inserts and decoding rows back into records.
//!
//! Everything goes through one connection behind a fair async mutex, so calls queue
//! in the process instead of contending for SQLite's one write lock. Transactions
//! that write begin with `BEGIN IMMEDIATE`: another process holding the file makes
//! them wait (up to the busy timeout) at the start rather than fail half-way.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteSynchronous};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};
use tracing::instrument;
use trawl_core::cost::Micros;
use trawl_core::model::{
    Item, JobCounts, JobId, JobStatus, Rejection, SliceId, SliceOutcome, SliceSpec, now_ms,
};
use trawl_core::ports::{Approval, FailedSlice, JobRecord, PortError, Recorded, Store};

use crate::error::ResultExt;
use rows::{
    failed_slice, get, get_json, insert_slices, item, job_counts, job_record, rejection, to_json,
};

mod outcomes;
mod rows;

/// The schema, one script per version; `PRAGMA user_version` says how many are applied.
const MIGRATIONS: &[&str] = &[include_str!("sqlite.sql")];

/// How long a statement waits for another process's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The SQLite adapter of [`Store`]. Cheap to clone: clones share the connection.
#[derive(Clone)]
pub struct SqliteStore {
    /// The one connection, `None` once closed. A fair async mutex rather than a sqlx
    /// pool of one: the pool checks every connection it takes back with a round trip
    /// to the connection's thread, from a task of its own, which measured as costly
    /// as four or five statements per call. A transaction dropped half-way is still
    /// rolled back: sqlx queues the rollback ahead of the next statement.
    conn: Arc<Mutex<Option<SqliteConnection>>>,
    /// Outcomes waiting for the connection (see [`outcomes`]).
    queue: Arc<outcomes::Queue>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
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
        let mut conn = options.connect().await.port()?;
        migrate(&mut conn).await?;
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(Some(conn))),
            queue: Arc::default(),
        })
    }

    /// Waits for the calls in progress, then closes the connection (checkpointing
    /// the WAL). Later calls, on this store or its clones, fail as unavailable.
    pub async fn close(&self) {
        let conn = self.conn.lock().await.take();
        if let Some(conn) = conn {
            if let Err(e) = conn.close().await {
                tracing::warn!(error = %e, "closing the store");
            }
        }
    }

    /// The connection, once the calls queued before this one are done.
    async fn conn(&self) -> Result<MappedMutexGuard<'_, SqliteConnection>, PortError> {
        MutexGuard::try_map(self.conn.lock().await, Option::as_mut)
            .map_err(|_| PortError::Unavailable("the store is closed".into()))
    }
}

/// Applies the scripts of [`MIGRATIONS`] the database has not seen, each in the same
/// transaction as the version bump. A database newer than this build is refused.
async fn migrate(conn: &mut SqliteConnection) -> Result<(), PortError> {
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.port()?;
    let version: i64 = sqlx::query_scalar("PRAGMA user_version")
        .fetch_one(&mut *tx)
        .await
        .port()?;
    let applied = usize::try_from(version)
        .ok()
        .filter(|v| *v <= MIGRATIONS.len())
        .ok_or_else(|| {
            PortError::Corrupt(format!(
                "store schema version {version} is newer than this build's ({})",
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
        let mut conn = self.conn().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.port()?;
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
        let rows: Vec<(&JobId, &SliceSpec, i64)> =
            slices.iter().map(|s| (&job.id, s, now)).collect();
        insert_slices(&mut tx, &rows).await?;
        tx.commit().await.port()
    }

    async fn job(&self, id: &JobId) -> Result<Option<JobRecord>, PortError> {
        let row = sqlx::query(
            "SELECT id, name, spec, status, reason, estimate, created_ms FROM jobs WHERE id = ?",
        )
        .bind(id.as_str())
        .fetch_optional(&mut *self.conn().await?)
        .await
        .port()?;
        row.as_ref().map(job_record).transpose()
    }

    #[instrument(skip_all, fields(job_id = %id, status = status.as_str()))]
    async fn set_job_status(
        &self,
        id: &JobId,
        status: JobStatus,
        reason: Option<&str>,
    ) -> Result<(), PortError> {
        let done =
            sqlx::query("UPDATE jobs SET status = ?, reason = ?, updated_ms = ? WHERE id = ?")
                .bind(status.as_str())
                .bind(reason)
                .bind(now_ms())
                .bind(id.as_str())
                .execute(&mut *self.conn().await?)
                .await
                .port()?;
        if done.rows_affected() == 0 {
            return Err(no_job(id));
        }
        Ok(())
    }

    async fn open_slices(&self, id: &JobId) -> Result<Vec<SliceSpec>, PortError> {
        let rows = sqlx::query(
            "SELECT spec FROM slices WHERE job_id = ? AND status = 'pending' ORDER BY slice_id",
        )
        .bind(id.as_str())
        .fetch_all(&mut *self.conn().await?)
        .await
        .port()?;
        rows.iter().map(|row| get_json(row, "spec")).collect()
    }

    #[instrument(level = "debug", skip_all, fields(job_id = %job, slice_id = %slice))]
    async fn record_outcome(
        &self,
        job: &JobId,
        slice: &SliceId,
        outcome: &SliceOutcome,
    ) -> Result<Recorded, PortError> {
        outcomes::record(&self.conn, &self.queue, job, slice, outcome).await
    }

    async fn counts(&self, id: &JobId) -> Result<JobCounts, PortError> {
        let row = sqlx::query(
            "SELECT slices_total, slices_succeeded, slices_failed, budget_stops, items_valid, \
             items_rejected, upstream_calls, cache_hits, cost FROM job_counts WHERE job_id = ?",
        )
        .bind(id.as_str())
        .fetch_optional(&mut *self.conn().await?)
        .await
        .port()?
        .ok_or_else(|| no_job(id))?;
        job_counts(&row)
    }

    async fn spent(&self, id: &JobId) -> Result<Micros, PortError> {
        let cost: Option<i64> = sqlx::query_scalar("SELECT cost FROM job_counts WHERE job_id = ?")
            .bind(id.as_str())
            .fetch_optional(&mut *self.conn().await?)
            .await
            .port()?;
        cost.map(Micros).ok_or_else(|| no_job(id))
    }

    async fn items(&self, id: &JobId) -> Result<Vec<Item>, PortError> {
        let rows = sqlx::query(
            "SELECT slice_id, seq, kind, url, geo, data FROM items WHERE job_id = ? \
             ORDER BY slice_id, seq",
        )
        .bind(id.as_str())
        .fetch_all(&mut *self.conn().await?)
        .await
        .port()?;
        rows.iter().map(item).collect()
    }

    async fn rejections(&self, id: &JobId) -> Result<Vec<Rejection>, PortError> {
        let rows = sqlx::query(
            "SELECT slice_id, seq, url, geo, data, errors FROM rejections WHERE job_id = ? \
             ORDER BY slice_id, seq",
        )
        .bind(id.as_str())
        .fetch_all(&mut *self.conn().await?)
        .await
        .port()?;
        rows.iter().map(rejection).collect()
    }

    async fn failed_slices(&self, id: &JobId, limit: u32) -> Result<Vec<FailedSlice>, PortError> {
        let rows = sqlx::query(
            "SELECT spec, error_code, error_message FROM slices \
             WHERE job_id = ? AND status = 'failed' ORDER BY slice_id LIMIT ?",
        )
        .bind(id.as_str())
        .bind(limit)
        .fetch_all(&mut *self.conn().await?)
        .await
        .port()?;
        rows.iter().map(failed_slice).collect()
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
        .execute(&mut *self.conn().await?)
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
        .fetch_optional(&mut *self.conn().await?)
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
