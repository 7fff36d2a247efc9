//! The embedded store: one SQLite file (or an in-memory database for tests).
//!
//! - this file: opening, the schema version, and the [`Store`] methods;
//! - `outcomes`: `record_outcome`, with group commit;
//! - `rows`: multi-row inserts and decoding rows back into records.
//! - `browse`: what browser slices keep, artifacts and the browse replay cache.
//! - `guard`: what the tool layer's guard keeps, embeddings and model verdicts.
//!
//! Everything goes through one connection behind a fair async mutex, so calls queue
//! in the process instead of contending for SQLite's one write lock. Transactions
//! that write begin with `BEGIN IMMEDIATE`: another process holding the file makes
//! them wait (up to the busy timeout) at the start rather than fail half-way.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteRow, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};
use tracing::instrument;
use trawl_core::cost::Micros;
use trawl_core::model::{
    AuditRecord, Item, JobCounts, JobId, JobStatus, Progress, Rejection, SliceId, SliceOutcome,
    SliceSpec, TraceStep, now_ms,
};
use trawl_core::ports::{
    Approval, ApprovalNotice, ApprovalRecord, ApprovalStore, Artifact, ArtifactInfo, ArtifactStore,
    CostMonth, FailedSlice, GuardVerdict, JobOwner, JobRecord, JobStore, Partitions, PinChange,
    PlannedSlices, PortError, Recorded, RowCursor, SliceStore, ToolListing, ToolPin, ToolStore,
    WorkerStore, next_batch,
};
use trawl_core::tenant::Usage;
use trawl_core::workers::WorkerInfo;

use crate::decode;
use crate::decode::{
    approval_record, failed_slice, item, job_counts, job_record, rejection, trace_step,
};
use crate::error::ResultExt;
use rows::{get, get_json, insert_planned_slices, insert_slices, to_json};

mod browse;
mod guard;
mod notices;
mod outcomes;
mod retention;
mod rows;
pub(crate) mod tools;

/// The schema, one script per version; `PRAGMA user_version` says how many are applied.
const MIGRATIONS: &[&str] = &[
    include_str!("sqlite.sql"),
    include_str!("sqlite_v2.sql"),
    include_str!("sqlite_v3.sql"),
    include_str!("sqlite_v4.sql"),
    include_str!("sqlite_v5.sql"),
    include_str!("sqlite_v6.sql"),
    include_str!("sqlite_v7.sql"),
    include_str!("sqlite_v8.sql"),
    include_str!("sqlite_v9.sql"),
    include_str!("sqlite_v10.sql"),
    include_str!("sqlite_v11.sql"),
    include_str!("sqlite_v12.sql"),
    include_str!("sqlite_v13.sql"),
    include_str!("sqlite_v14.sql"),
    include_str!("sqlite_v15.sql"),
];

/// `SELECT <the columns of a JobRecord> FROM jobs <tail>`.
macro_rules! select_jobs {
    ($tail:literal) => {
        concat!(
            "SELECT id, name, spec, status, reason, estimate, created_ms, idempotency_key, \
             request_digest, traceparent, owner, owner_client, tenant, retention_ms, slices_max, \
             approve_above FROM jobs ",
            $tail
        )
    };
}

/// `SELECT <the columns of an ApprovalRecord> FROM approvals <tail>`.
macro_rules! select_approvals {
    ($tail:literal) => {
        concat!(
            "SELECT id, kind, job_id, tool, amount, reason, detail, approved, decided_by, \
             requested_ms, decided_ms, expires_ms, expired, notified_ms FROM approvals ",
            $tail
        )
    };
}

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
    /// One page of a per-slice table (`sql` takes the job, the cursor's slice and
    /// seq, and the limit): rows after `after` in slice order, every row from the
    /// start when `None` (slice ids are never empty, seqs never negative).
    async fn page<T>(
        &self,
        sql: &'static str,
        id: &JobId,
        after: Option<&RowCursor>,
        limit: u32,
        decode: fn(&SqliteRow) -> Result<T, PortError>,
    ) -> Result<Vec<T>, PortError> {
        let (slice, seq) = after.map_or(("", -1), |(slice, seq)| (slice.as_str(), i64::from(*seq)));
        let rows = sqlx::query(sql)
            .bind(id.as_str())
            .bind(slice)
            .bind(seq)
            .bind(limit)
            .fetch_all(&mut *self.conn().await?)
            .await
            .port()?;
        rows.iter().map(decode).collect()
    }

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
        let Some(conn) = self.conn.lock().await.take() else {
            return;
        };
        if let Err(e) = conn.close().await {
            tracing::warn!(error = %e, "closing the store");
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
impl JobStore for SqliteStore {
    #[instrument(skip_all, fields(job_id = %job.id, slices = slices.len()))]
    async fn create_job(&self, job: &JobRecord, slices: &[SliceSpec]) -> Result<(), PortError> {
        let now = now_ms();
        let mut conn = self.conn().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.port()?;
        sqlx::query(
            "INSERT INTO jobs (id, name, spec, status, reason, estimate, created_ms, updated_ms, \
             idempotency_key, request_digest, traceparent, owner, owner_client, tenant, \
             retention_ms, slices_max, approve_above) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(job.id.as_str())
        .bind(job.name.as_str())
        .bind(to_json(&job.spec)?)
        .bind(job.status.as_str())
        .bind(job.reason.as_deref())
        .bind(job.estimate.0)
        .bind(job.created_ms)
        .bind(now)
        .bind(job.idempotency.as_ref().map(|i| i.key.as_str()))
        .bind(job.idempotency.as_ref().map(|i| i.request_digest.as_str()))
        .bind(job.traceparent.as_deref())
        .bind(job.owner.as_ref().map(|o| o.caller.as_str()))
        .bind(job.owner.as_ref().and_then(|o| o.client.as_deref()))
        .bind(job.owner.as_ref().and_then(|o| o.tenant.as_deref()))
        .bind(job.retention_ms)
        .bind(i64::try_from(job.slices_max).unwrap_or(i64::MAX))
        .bind(job.approve_above.map(|m| m.0))
        .execute(&mut *tx)
        .await
        .port()?;
        let rows: Vec<(&JobId, &SliceSpec, i64)> =
            slices.iter().map(|s| (&job.id, s, now)).collect();
        insert_slices(&mut tx, &rows).await?;
        tx.commit().await.port()
    }

    async fn job(&self, id: &JobId) -> Result<Option<JobRecord>, PortError> {
        let row = sqlx::query(select_jobs!("WHERE id = ?"))
            .bind(id.as_str())
            .fetch_optional(&mut *self.conn().await?)
            .await
            .port()?;
        row.as_ref().map(job_record).transpose()
    }

    #[instrument(skip_all, fields(job_id = %id, from = from.as_str(), to = to.as_str()))]
    async fn move_job(
        &self,
        id: &JobId,
        from: JobStatus,
        to: JobStatus,
    ) -> Result<bool, PortError> {
        if to.is_terminal() {
            return Err(PortError::Corrupt(format!(
                "move_job of {id} to {}: a job ends only by end_job",
                to.as_str()
            )));
        }
        let done =
            sqlx::query("UPDATE jobs SET status = ?, updated_ms = ? WHERE id = ? AND status = ?")
                .bind(to.as_str())
                .bind(now_ms())
                .bind(id.as_str())
                .bind(from.as_str())
                .execute(&mut *self.conn().await?)
                .await
                .port()?;
        if done.rows_affected() == 0 && self.job(id).await?.is_none() {
            return Err(no_job(id));
        }
        Ok(done.rows_affected() == 1)
    }

    async fn reserve_budget(
        &self,
        id: &JobId,
        amount: Micros,
        max: Micros,
    ) -> Result<bool, PortError> {
        let done = sqlx::query(
            "UPDATE jobs SET budget_reserved = budget_reserved + ?1 \
             WHERE id = ?2 AND budget_reserved + ?1 <= ?3",
        )
        .bind(amount.0)
        .bind(id.as_str())
        .bind(max.0)
        .execute(&mut *self.conn().await?)
        .await
        .port()?;
        Ok(done.rows_affected() == 1)
    }

    async fn adjust_budget(&self, id: &JobId, delta: Micros) -> Result<(), PortError> {
        sqlx::query("UPDATE jobs SET budget_reserved = budget_reserved + ? WHERE id = ?")
            .bind(delta.0)
            .bind(id.as_str())
            .execute(&mut *self.conn().await?)
            .await
            .port()?;
        Ok(())
    }

    async fn end_job(
        &self,
        id: &JobId,
        status: JobStatus,
        reason: Option<&str>,
    ) -> Result<bool, PortError> {
        if !status.is_terminal() {
            return Err(PortError::Corrupt(format!(
                "end_job of {id} with {}, which is not a terminal status",
                status.as_str()
            )));
        }
        let done = sqlx::query(
            "UPDATE jobs SET status = ?, reason = ?, updated_ms = ? WHERE id = ? \
             AND status NOT IN ('succeeded', 'partial', 'failed', 'cancelled')",
        )
        .bind(status.as_str())
        .bind(reason)
        .bind(now_ms())
        .bind(id.as_str())
        .execute(&mut *self.conn().await?)
        .await
        .port()?;
        if done.rows_affected() == 0 && self.job(id).await?.is_none() {
            return Err(no_job(id));
        }
        Ok(done.rows_affected() == 1)
    }

    async fn spent(&self, id: &JobId) -> Result<Micros, PortError> {
        let cost: Option<i64> = sqlx::query_scalar("SELECT cost FROM job_counts WHERE job_id = ?")
            .bind(id.as_str())
            .fetch_optional(&mut *self.conn().await?)
            .await
            .port()?;
        cost.map(Micros).ok_or_else(|| no_job(id))
    }

    /// An unknown job is [`PortError::NotFound`], not `false`. Each batch is its
    /// own transaction and the connection is let go between them, so the calls
    /// queued behind a plan wait for one batch, not the plan.
    #[instrument(skip_all, fields(job_id = %id, status = status.as_str()))]
    async fn plan_job(
        &self,
        id: &JobId,
        slices: &mut PlannedSlices<'_>,
        status: JobStatus,
    ) -> Result<bool, PortError> {
        let now = now_ms();
        loop {
            // Made before the connection is taken: planning is CPU work.
            let batch = next_batch(slices);
            let mut conn = self.conn().await?;
            let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.port()?;
            let current: Option<String> =
                sqlx::query_scalar("SELECT status FROM jobs WHERE id = ?")
                    .bind(id.as_str())
                    .fetch_optional(&mut *tx)
                    .await
                    .port()?;
            match current.as_deref() {
                None => return Err(no_job(id)),
                Some("pending") => {}
                Some(_) => return Ok(false),
            }
            if batch.is_empty() {
                sqlx::query(
                    "UPDATE jobs SET status = ?, updated_ms = ? \
                     WHERE id = ? AND status = 'pending'",
                )
                .bind(status.as_str())
                .bind(now_ms())
                .bind(id.as_str())
                .execute(&mut *tx)
                .await
                .port()?;
                tx.commit().await.port()?;
                return Ok(true);
            }
            let rows: Vec<(&JobId, &SliceSpec, i64)> = batch.iter().map(|s| (id, s, now)).collect();
            insert_planned_slices(&mut tx, &rows).await?;
            tx.commit().await.port()?;
        }
    }

    async fn jobs_with_status(
        &self,
        statuses: &[JobStatus],
        limit: u32,
    ) -> Result<Vec<JobRecord>, PortError> {
        if statuses.is_empty() {
            return Ok(Vec::new());
        }
        let names: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
        let rows = sqlx::query(select_jobs!(
            "WHERE status IN (SELECT value FROM json_each(?)) ORDER BY created_ms, id LIMIT ?"
        ))
        .bind(to_json(&names)?)
        .bind(limit)
        .fetch_all(&mut *self.conn().await?)
        .await
        .port()?;
        rows.iter().map(job_record).collect()
    }

    async fn job_by_idempotency_key(
        &self,
        owner: &JobOwner,
        key: &str,
    ) -> Result<Option<JobRecord>, PortError> {
        let row = sqlx::query(select_jobs!(
            "WHERE COALESCE(tenant, '') = ? AND COALESCE(owner, '') = ? AND idempotency_key = ?"
        ))
        .bind(owner.tenant.as_deref().unwrap_or_default())
        .bind(owner.caller.as_str())
        .bind(key)
        .fetch_optional(&mut *self.conn().await?)
        .await
        .port()?;
        row.as_ref().map(job_record).transpose()
    }

    async fn tenant_usage(&self, tenant: &str, since_ms: i64) -> Result<Usage, PortError> {
        let mut conn = self.conn().await?;
        let active = sqlx::query(
            "SELECT COUNT(*) AS jobs, COALESCE(SUM(CASE WHEN j.status = 'pending' \
                 THEN j.slices_max \
                 ELSE MAX(COALESCE(c.slices_total - c.slices_succeeded - c.slices_failed, 0), 0) \
                 END), 0) AS open \
             FROM jobs j LEFT JOIN job_counts c ON c.job_id = j.id \
             WHERE COALESCE(tenant, owner) = ? AND owner IS NOT NULL \
               AND status IN ('pending', 'awaiting_approval', 'queued', 'running')",
        )
        .bind(tenant)
        .fetch_one(&mut *conn)
        .await
        .port()?;
        let days = sqlx::query(
            "SELECT j.created_ms - j.created_ms % 86400000 AS day, COUNT(*) AS jobs, \
                 COALESCE(SUM(c.slices_total), 0) AS slices, COALESCE(SUM(c.cost), 0) AS spent, \
                 COALESCE(SUM(CASE \
                     WHEN status IN ('pending', 'awaiting_approval', 'queued', 'running') \
                     THEN MAX(j.estimate, COALESCE(c.cost, 0)) ELSE COALESCE(c.cost, 0) END), 0) \
                     AS committed \
             FROM jobs j LEFT JOIN job_counts c ON c.job_id = j.id \
             WHERE COALESCE(tenant, owner) = ? AND owner IS NOT NULL AND created_ms >= ? \
             GROUP BY day ORDER BY day",
        )
        .bind(tenant)
        .bind(since_ms)
        .fetch_all(&mut *conn)
        .await
        .port()?;
        decode::usage(&active, &days)
    }

    async fn expired_jobs(
        &self,
        now_ms: i64,
        default_ms: i64,
        limit: u32,
    ) -> Result<Vec<JobId>, PortError> {
        retention::expired_jobs(&mut *self.conn().await?, now_ms, default_ms, limit).await
    }

    async fn purge_job(&self, id: &JobId, batch: u32) -> Result<u64, PortError> {
        retention::purge_job(&mut *self.conn().await?, id, batch).await
    }

    async fn job_rows(&self, id: &JobId) -> Result<Vec<(&'static str, u64)>, PortError> {
        retention::job_rows(&mut *self.conn().await?, id).await
    }

    async fn cost_months(&self) -> Result<Vec<CostMonth>, PortError> {
        retention::cost_months(&mut *self.conn().await?).await
    }

    /// One file, no partitions: nothing to keep.
    async fn keep_partitions(&self, _now_ms: i64) -> Result<Partitions, PortError> {
        Ok(Partitions::default())
    }

    async fn ping(&self) -> Result<(), PortError> {
        sqlx::query("SELECT 1")
            .execute(&mut *self.conn().await?)
            .await
            .port()?;
        Ok(())
    }
}

#[async_trait]
impl SliceStore for SqliteStore {
    async fn open_slices_page(
        &self,
        id: &JobId,
        after: Option<&SliceId>,
        limit: u32,
    ) -> Result<Vec<SliceSpec>, PortError> {
        let rows = sqlx::query(
            "SELECT spec FROM slices WHERE job_id = ? AND status = 'pending' AND slice_id > ? \
             ORDER BY slice_id LIMIT ?",
        )
        .bind(id.as_str())
        .bind(after.map_or("", SliceId::as_str))
        .bind(i64::from(limit))
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

    #[instrument(level = "debug", skip_all, fields(job_id = %job, slice_id = %slice))]
    async fn record_costs(
        &self,
        job: &JobId,
        slice: &SliceId,
        costs: &[trawl_core::model::CostEntry],
        calls: u64,
    ) -> Result<u64, PortError> {
        outcomes::record_costs(&mut *self.conn().await?, job, slice, costs, calls).await
    }

    async fn save_progress(
        &self,
        job: &JobId,
        slice: &SliceId,
        progress: &Progress,
    ) -> Result<(), PortError> {
        outcomes::save_progress(&mut *self.conn().await?, job, slice, progress).await
    }

    async fn progress(&self, job: &JobId, slice: &SliceId) -> Result<Option<Progress>, PortError> {
        outcomes::progress(&mut *self.conn().await?, job, slice).await
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

    async fn add_slices(&self, id: &JobId, slices: &[SliceSpec]) -> Result<u64, PortError> {
        let now = now_ms();
        let rows: Vec<(&JobId, &SliceSpec, i64)> = slices.iter().map(|s| (id, s, now)).collect();
        let mut conn = self.conn().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.port()?;
        let new = rows::insert_new_slices(&mut tx, &rows).await?;
        tx.commit().await.port()?;
        Ok(new.len() as u64)
    }

    async fn slices_to_publish(
        &self,
        id: &JobId,
        stale_before_ms: i64,
        limit: u32,
    ) -> Result<Vec<SliceSpec>, PortError> {
        // The first `limit` never published (in slice order, from their index) and
        // the first `limit` published before the bound (from theirs, sorted), merged.
        // The indexes are named: without statistics the planner prefers walking every
        // pending slice in slice order, published or not.
        let rows = sqlx::query(
            "SELECT spec FROM slices WHERE job_id = ?1 AND slice_id IN ( \
                 SELECT slice_id FROM ( \
                     SELECT slice_id FROM ( \
                         SELECT slice_id FROM slices INDEXED BY slices_unpublished \
                         WHERE job_id = ?1 AND status = 'pending' AND published_ms IS NULL \
                         ORDER BY slice_id LIMIT ?3) \
                     UNION ALL \
                     SELECT slice_id FROM ( \
                         SELECT slice_id FROM slices INDEXED BY slices_published \
                         WHERE job_id = ?1 AND status = 'pending' \
                         AND published_ms IS NOT NULL AND published_ms < ?2 \
                         ORDER BY slice_id LIMIT ?3) \
                 ) ORDER BY slice_id LIMIT ?3 \
             ) ORDER BY slice_id",
        )
        .bind(id.as_str())
        .bind(stale_before_ms)
        .bind(limit)
        .fetch_all(&mut *self.conn().await?)
        .await
        .port()?;
        rows.iter().map(|row| get_json(row, "spec")).collect()
    }

    /// Marks only slices still pending: a terminal one is never published again.
    #[instrument(level = "debug", skip_all, fields(job_id = %id, slices = slices.len()))]
    async fn mark_published(
        &self,
        id: &JobId,
        slices: &[SliceId],
        at_ms: i64,
    ) -> Result<(), PortError> {
        if slices.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = slices.iter().map(SliceId::as_str).collect();
        sqlx::query(
            "UPDATE slices SET published_ms = ? \
             WHERE job_id = ? AND status = 'pending' \
             AND slice_id IN (SELECT value FROM json_each(?))",
        )
        .bind(at_ms)
        .bind(id.as_str())
        .bind(to_json(&ids)?)
        .execute(&mut *self.conn().await?)
        .await
        .port()?;
        Ok(())
    }

    async fn items_page(
        &self,
        id: &JobId,
        after: Option<&RowCursor>,
        limit: u32,
    ) -> Result<Vec<Item>, PortError> {
        let sql = "SELECT slice_id, seq, kind, url, geo, data FROM items \
                 WHERE job_id = ? AND (slice_id, seq) > (?, ?) ORDER BY slice_id, seq LIMIT ?";
        self.page(sql, id, after, limit, item).await
    }

    async fn rejections_page(
        &self,
        id: &JobId,
        after: Option<&RowCursor>,
        limit: u32,
    ) -> Result<Vec<Rejection>, PortError> {
        let sql = "SELECT slice_id, seq, url, geo, data, errors FROM rejections \
                 WHERE job_id = ? AND (slice_id, seq) > (?, ?) ORDER BY slice_id, seq LIMIT ?";
        self.page(sql, id, after, limit, rejection).await
    }

    async fn trace_page(
        &self,
        id: &JobId,
        after: Option<&RowCursor>,
        limit: u32,
    ) -> Result<Vec<TraceStep>, PortError> {
        let sql = "SELECT slice_id, seq, tool, args_digest, cache_hit, attempt, status, error, \
                 latency_us, cost, at_ms, trace_id, span_id FROM trace_steps \
                 WHERE job_id = ? AND (slice_id, seq) > (?, ?) ORDER BY slice_id, seq LIMIT ?";
        self.page(sql, id, after, limit, trace_step).await
    }
}

#[async_trait]
impl ApprovalStore for SqliteStore {
    /// Stores `approval` as pending (its decision fields are ignored), replacing a
    /// pending one of the same job. A replacement that asks something else is
    /// announced again and gets a new expiry; one that asks the same keeps both.
    #[instrument(skip_all, fields(job_id = %approval.job_id))]
    async fn request_approval(&self, approval: &Approval) -> Result<(), PortError> {
        sqlx::query(
            "INSERT INTO approvals (job_id, amount, reason, requested_ms, id) VALUES (?, ?, ?, ?, ?) \
             ON CONFLICT (job_id) WHERE approved IS NULL DO UPDATE SET \
             amount = excluded.amount, reason = excluded.reason, \
             requested_ms = excluded.requested_ms, \
             expires_ms = CASE WHEN approvals.amount = excluded.amount \
                 AND approvals.reason = excluded.reason THEN approvals.expires_ms END, \
             notified_ms = CASE WHEN approvals.amount = excluded.amount \
                 AND approvals.reason = excluded.reason THEN approvals.notified_ms END",
        )
        .bind(approval.job_id.as_str())
        .bind(approval.amount.0)
        .bind(approval.reason.as_str())
        .bind(now_ms())
        .bind(crate::new_approval_id()?)
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
            "UPDATE approvals SET approved = ?1, decided_by = ?2, decided_ms = ?3 \
             WHERE job_id = ?4 AND approved IS NULL \
             AND (expires_ms IS NULL OR expires_ms > ?3) RETURNING amount, reason",
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

    /// Newest first by the time they were (last) requested, then by id.
    async fn approvals(
        &self,
        pending_only: bool,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>, PortError> {
        let sql = if pending_only {
            select_approvals!("WHERE approved IS NULL ORDER BY requested_ms DESC, id DESC LIMIT ?")
        } else {
            select_approvals!("ORDER BY requested_ms DESC, id DESC LIMIT ?")
        };
        let rows = sqlx::query(sql)
            .bind(limit)
            .fetch_all(&mut *self.conn().await?)
            .await
            .port()?;
        rows.iter().map(approval_record).collect()
    }

    async fn pending_approvals(&self) -> Result<u64, PortError> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM approvals WHERE approved IS NULL")
            .fetch_one(&mut *self.conn().await?)
            .await
            .port()?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn approval(&self, id: i64) -> Result<Option<ApprovalRecord>, PortError> {
        let row = sqlx::query(select_approvals!("WHERE id = ?"))
            .bind(id)
            .fetch_optional(&mut *self.conn().await?)
            .await
            .port()?;
        row.as_ref().map(approval_record).transpose()
    }

    #[instrument(skip_all)]
    async fn expire_approvals(
        &self,
        now_ms: i64,
        ttl_ms: Option<i64>,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>, PortError> {
        notices::expire_approvals(&mut *self.conn().await?, now_ms, ttl_ms, limit).await
    }

    #[instrument(skip_all)]
    async fn claim_approval_notices(
        &self,
        now_ms: i64,
        lease_ms: i64,
        ttl_ms: Option<i64>,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>, PortError> {
        notices::claim_approval_notices(&mut *self.conn().await?, now_ms, lease_ms, ttl_ms, limit)
            .await
    }

    async fn approval_notice_sent(
        &self,
        id: i64,
        notice: ApprovalNotice,
        at_ms: i64,
    ) -> Result<(), PortError> {
        notices::approval_notice_sent(&mut *self.conn().await?, id, notice, at_ms).await
    }

    async fn approval_notice_failed(&self, id: i64, retry_at_ms: i64) -> Result<(), PortError> {
        notices::approval_notice_failed(&mut *self.conn().await?, id, retry_at_ms).await
    }
}

#[async_trait]
impl ToolStore for SqliteStore {
    async fn tool_pins(&self) -> Result<Vec<ToolPin>, PortError> {
        tools::tool_pins(&mut *self.conn().await?).await
    }

    #[instrument(skip_all, fields(changes = changes.len()))]
    async fn save_pins(&self, changes: &[PinChange]) -> Result<(), PortError> {
        tools::save_pins(&mut *self.conn().await?, changes).await
    }

    #[instrument(skip_all, fields(approval = id, approved))]
    async fn decide_tool_approval(
        &self,
        id: i64,
        approved: bool,
        by: &str,
    ) -> Result<Option<ApprovalRecord>, PortError> {
        tools::decide_tool_approval(&mut *self.conn().await?, id, approved, by).await
    }

    async fn tool_call_approval(
        &self,
        tool: &str,
        args_digest: &str,
        reason: &str,
        detail: &serde_json::Value,
    ) -> Result<(i64, Option<bool>), PortError> {
        tools::tool_call_approval(&mut *self.conn().await?, tool, args_digest, reason, detail).await
    }

    async fn record_audit(&self, rows: &[AuditRecord]) -> Result<(), PortError> {
        if rows.is_empty() {
            return Ok(());
        }
        tools::record_audit(&mut *self.conn().await?, rows).await
    }

    async fn audit_page(
        &self,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(i64, AuditRecord)>, PortError> {
        tools::audit_page(&mut *self.conn().await?, after, limit).await
    }

    async fn tool_listings(&self) -> Result<Vec<ToolListing>, PortError> {
        tools::tool_listings(&mut *self.conn().await?).await
    }

    #[instrument(skip_all, fields(server = %listing.server, tools = listing.tools.len()))]
    async fn save_tool_listing(&self, listing: &ToolListing) -> Result<(), PortError> {
        tools::save_tool_listing(&mut *self.conn().await?, listing).await
    }

    async fn embeddings(
        &self,
        model: &str,
        keys: &[String],
    ) -> Result<Vec<(String, Vec<f32>)>, PortError> {
        guard::embeddings(&mut *self.conn().await?, model, keys).await
    }

    #[instrument(skip_all, fields(model = %model, rows = rows.len()))]
    async fn save_embeddings(
        &self,
        model: &str,
        rows: &[(String, Vec<f32>)],
    ) -> Result<(), PortError> {
        guard::save_embeddings(&mut *self.conn().await?, model, rows).await
    }

    async fn guard_verdict(
        &self,
        model: &str,
        hash: &str,
    ) -> Result<Option<GuardVerdict>, PortError> {
        guard::guard_verdict(&mut *self.conn().await?, model, hash).await
    }

    async fn save_guard_verdict(&self, v: &GuardVerdict) -> Result<(), PortError> {
        guard::save_guard_verdict(&mut *self.conn().await?, v).await
    }
}

#[async_trait]
impl ArtifactStore for SqliteStore {
    #[instrument(skip_all, fields(job_id = %a.job_id, name = %a.name, bytes = a.data.len()))]
    async fn put_artifact(&self, a: &Artifact) -> Result<(), PortError> {
        // Checked before waiting for the connection: nothing to queue for.
        a.check_size()?;
        browse::put_artifact(&mut *self.conn().await?, a).await
    }

    async fn artifacts(&self, job: &JobId) -> Result<Vec<ArtifactInfo>, PortError> {
        browse::artifacts(&mut *self.conn().await?, job).await
    }

    async fn artifact(&self, job: &JobId, name: &str) -> Result<Option<Artifact>, PortError> {
        browse::artifact(&mut *self.conn().await?, job, name).await
    }

    async fn replay(&self, key: &str) -> Result<Option<serde_json::Value>, PortError> {
        browse::replay(&mut *self.conn().await?, key).await
    }

    async fn put_replay(&self, key: &str, value: &serde_json::Value) -> Result<(), PortError> {
        browse::put_replay(&mut *self.conn().await?, key, value).await
    }

    async fn drop_replay(&self, key: &str) -> Result<(), PortError> {
        browse::drop_replay(&mut *self.conn().await?, key).await
    }
}

#[async_trait]
impl WorkerStore for SqliteStore {
    async fn report_worker(&self, w: &WorkerInfo) -> Result<(), PortError> {
        sqlx::query(
            "INSERT INTO workers (id, pool, capabilities, concurrency, started_ms, heartbeat_ms) \
             VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET pool = excluded.pool, \
             capabilities = excluded.capabilities, concurrency = excluded.concurrency, \
             heartbeat_ms = excluded.heartbeat_ms",
        )
        .bind(&w.id)
        .bind(w.pool.as_str())
        .bind(decode::capabilities_json(w)?)
        .bind(i64::from(w.concurrency))
        .bind(w.started_ms)
        .bind(w.heartbeat_ms)
        .execute(&mut *self.conn().await?)
        .await
        .port()?;
        Ok(())
    }

    async fn workers(&self, since_ms: i64) -> Result<Vec<WorkerInfo>, PortError> {
        let rows = sqlx::query(
            "SELECT id, pool, capabilities, concurrency, started_ms, heartbeat_ms FROM workers \
             WHERE heartbeat_ms >= ? ORDER BY heartbeat_ms DESC, id",
        )
        .bind(since_ms)
        .fetch_all(&mut *self.conn().await?)
        .await
        .port()?;
        rows.iter().map(decode::worker_info).collect()
    }
}

#[cfg(test)]
mod tests;
