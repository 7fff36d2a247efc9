//! The distributed store: Postgres through a sqlx pool, shared by every API,
//! scheduler and worker process of a deployment.
//!
//! - this file: connecting, migrations, and the [`Store`] methods;
//! - `outcomes`: `record_outcome`, group-committed: one statement per batch of
//!   outcomes that arrive together;
//! - `rows`: multi-row inserts (`UNNEST` of arrays) and decoding rows back into
//!   records.
//! - `browse`: what browser slices keep, artifacts and the browse replay cache.
//! - `guard`: what the tool layer's guard keeps, embeddings and model verdicts.
//!
//! # Schema and migrations
//!
//! The schema is the top-level `migrations/` folder, one sqlx migration file per
//! version. The files are embedded with `include_str!` into a [`Migrator`] built
//! here, rather than with `sqlx::migrate!`: the macro needs sqlx's `macros` feature,
//! which compiles sqlx's drivers a second time for the proc-macro host and roughly
//! doubles the cost of building sqlx, for a list that changes a few times a year. A
//! unit test checks that every file of the folder is in [`MIGRATIONS`], so a file
//! added there and forgotten here fails the build's tests. The checksums are sqlx's
//! own, so `sqlx migrate run` over the same folder agrees with this.
//!
//! [`PgStore::connect`] and [`migrate`] apply what the database has not seen on a
//! connection of their own, under sqlx's `pg_advisory_lock` (keyed by the database
//! name): processes starting together apply each file once, the others wait and
//! then find nothing to do. The connection is then closed, which releases the lock
//! even if a migration failed half-way. A database with a migration this build does
//! not know (a newer build ran) is refused as [`PortError::Corrupt`], as the SQLite
//! store refuses a newer file.
//!
//! # Outcomes and counts
//!
//! An outcome is written by one statement, hence one transaction, keyed by its slice
//! (see `outcomes`): it claims the slice (`UPDATE … WHERE status = 'pending'`) and
//! inserts its rows only if the claim moved a row. Rows are keyed by
//! (job, slice, seq) and inserted with `ON CONFLICT DO NOTHING`, so a redelivered
//! slice, or two workers finishing the same slice at once, never duplicates one.
//!
//! Each slice row carries the tallies of its own outcome (items valid and
//! rejected, upstream calls, cache hits, cost), written by the statement that claims
//! it, and the same statement adds them to the job's counters (`job_counters`):
//! [`SliceStore::counts`], [`JobStore::spent`] and [`SliceStore::has_open_slices`]
//! read at most 16 counter rows, whatever the job's size. One counter row per job
//! would make concurrent outcomes of the job queue on its lock until each commits;
//! each batch adds to one of 16 stripes instead, so they seldom meet.
//!
//! # Text
//!
//! Postgres refuses the NUL character in `TEXT` and `JSONB`; SQLite stores it. Free
//! text written here (URLs, error messages, tool names, documents' strings) has any
//! NUL replaced by U+FFFD, so a page with a stray NUL byte still has its items stored
//! rather than failing its slice.

use std::borrow::Cow;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::SqlSafeStr;
use sqlx::migrate::{MigrateError, Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
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
use rows::{get, get_json, insert_slices, json, text, to_i64};

mod browse;
mod guard;
mod notices;
mod outcomes;
mod partitions;
mod retention;
mod rows;
mod tools;

/// The migrations of the top-level `migrations/` folder: version, description (the
/// file name after the version), and the file. Append only.
pub(crate) const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../../../migrations/0001_init.sql")),
    (
        2,
        "budget",
        include_str!("../../../migrations/0002_budget.sql"),
    ),
    (
        3,
        "tools",
        include_str!("../../../migrations/0003_tools.sql"),
    ),
    (
        4,
        "approval_notices",
        include_str!("../../../migrations/0004_approval_notices.sql"),
    ),
    (
        5,
        "trace_ids",
        include_str!("../../../migrations/0005_trace_ids.sql"),
    ),
    (
        6,
        "artifacts",
        include_str!("../../../migrations/0006_artifacts.sql"),
    ),
    (
        7,
        "job_owners",
        include_str!("../../../migrations/0007_job_owners.sql"),
    ),
    (
        8,
        "guard",
        include_str!("../../../migrations/0008_guard.sql"),
    ),
    (
        9,
        "tool_listings",
        include_str!("../../../migrations/0009_tool_listings.sql"),
    ),
    (
        10,
        "workers",
        include_str!("../../../migrations/0010_workers.sql"),
    ),
    (
        11,
        "slice_progress",
        include_str!("../../../migrations/0011_slice_progress.sql"),
    ),
    (
        12,
        "job_counters",
        include_str!("../../../migrations/0012_job_counters.sql"),
    ),
    (
        13,
        "retention",
        include_str!("../../../migrations/0013_retention.sql"),
    ),
    (
        14,
        "partitions",
        include_str!("../../../migrations/0014_partitions.sql"),
    ),
    (
        15,
        "cost_attempts",
        include_str!("../../../migrations/0015_cost_attempts.sql"),
    ),
    (
        16,
        "approval_ids",
        include_str!("../../../migrations/0016_approval_ids.sql"),
    ),
    (
        17,
        "tenants",
        include_str!("../../../migrations/0017_tenants.sql"),
    ),
];

/// A pooled connection idle this long is pinged before it is used.
const PING_IF_IDLE: Duration = Duration::from_millis(50);

/// A job's counts: the sum of its counter rows (at most one per stripe), whatever
/// the job's size; no row of `slices` is read. No row: the job is unknown.
pub(crate) const COUNTS: &str = "\
SELECT COALESCE(SUM(c.slices_total), 0)::BIGINT AS slices_total,
    COALESCE(SUM(c.slices_succeeded), 0)::BIGINT AS slices_succeeded,
    COALESCE(SUM(c.slices_failed), 0)::BIGINT AS slices_failed,
    COALESCE(SUM(c.budget_stops), 0)::BIGINT AS budget_stops,
    COALESCE(SUM(c.items_valid), 0)::BIGINT AS items_valid,
    COALESCE(SUM(c.items_rejected), 0)::BIGINT AS items_rejected,
    COALESCE(SUM(c.upstream_calls), 0)::BIGINT AS upstream_calls,
    COALESCE(SUM(c.cache_hits), 0)::BIGINT AS cache_hits,
    COALESCE(SUM(c.cost), 0)::BIGINT AS cost
FROM jobs j LEFT JOIN job_counters c ON c.job_id = j.id
WHERE j.id = $1 GROUP BY j.id";

/// How long opening a connection may take before the database counts as down.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// `SELECT <the columns of a JobRecord> FROM jobs <tail>`.
macro_rules! select_jobs {
    ($tail:literal) => {
        concat!(
            "SELECT id, name, spec::text AS spec, status, reason, estimate, created_ms, \
             idempotency_key, request_digest, traceparent, owner, owner_client, tenant, \
             retention_ms, slices_max, approve_above FROM jobs ",
            $tail
        )
    };
}

/// `SELECT <the columns of an ApprovalRecord> FROM approvals <tail>`.
macro_rules! select_approvals {
    ($tail:literal) => {
        concat!(
            "SELECT id, kind, job_id, tool, amount, reason, detail::text AS detail, approved, \
             decided_by, requested_ms, decided_ms, expires_ms, expired, notified_ms FROM approvals ",
            $tail
        )
    };
}

/// The Postgres adapter of [`Store`]. Cheap to clone: clones share the pool.
#[derive(Clone, Debug)]
pub struct PgStore {
    pool: PgPool,
    /// Group commit of outcomes (see [`outcomes`]).
    outcomes: std::sync::Arc<outcomes::Batcher>,
}

impl PgStore {
    /// One page of a per-slice table (`sql` takes the job, the cursor's slice and
    /// seq, and the limit): rows after `after` in slice order, every row from the
    /// start when `None` (slice ids are never empty, seqs never negative).
    async fn page<T>(
        &self,
        sql: &'static str,
        id: &JobId,
        after: Option<&RowCursor>,
        limit: u32,
        decode: fn(&PgRow) -> Result<T, PortError>,
    ) -> Result<Vec<T>, PortError> {
        let (slice, seq) = after.map_or(("", -1), |(slice, seq)| (slice.as_str(), i64::from(*seq)));
        let rows = sqlx::query(sql)
            .bind(id.as_str())
            .bind(slice)
            .bind(seq)
            .bind(self::limit(limit))
            .fetch_all(&self.pool)
            .await
            .port()?;
        rows.iter().map(decode).collect()
    }

    /// Connects to the database at `url` (`postgres://user:password@host/db`),
    /// applies the migrations it has not seen (see the module doc), and keeps a pool
    /// of at most `max_connections` (at least one). A URL that does not parse, a
    /// server that cannot be reached or refuses the login are
    /// [`PortError::Unavailable`], with the URL (password hidden) in the message.
    #[instrument(skip_all, fields(url = %redact(url), max_connections = max_connections))]
    pub async fn connect(url: &str, max_connections: u32) -> Result<PgStore, PortError> {
        let options = options(url)?;
        migrate_with(&options, url).await?;
        Self::pool(url, options, max_connections).await
    }

    /// Connects to a read replica of the store at `url` (a hot standby, or any
    /// database that streams the primary's WAL), for reads only: nothing is
    /// migrated there, every transaction is read-only, and its schema must be
    /// the one this build knows (a replica still behind the primary's migration
    /// is refused as [`PortError::Unavailable`], so the caller tries again).
    #[instrument(skip_all, fields(url = %redact(url), max_connections = max_connections))]
    pub async fn connect_replica(url: &str, max_connections: u32) -> Result<PgStore, PortError> {
        let options = options(url)?.options([("default_transaction_read_only", "on")]);
        let store = Self::pool(url, options, max_connections).await?;
        let version: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations")
            .fetch_one(&store.pool)
            .await
            .map_err(|e| {
                PortError::Unavailable(format!(
                    "the read replica at {} has no trawl schema: {e}",
                    redact(url),
                ))
            })?;
        let known = MIGRATIONS.last().map(|m| m.0);
        if version != known {
            store.close().await;
            return Err(PortError::Unavailable(format!(
                "the read replica at {} has the store's schema at version {}, this build's is {}",
                redact(url),
                version.unwrap_or(0),
                known.unwrap_or(0)
            )));
        }
        Ok(store)
    }

    async fn pool(
        url: &str,
        options: PgConnectOptions,
        max_connections: u32,
    ) -> Result<PgStore, PortError> {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(CONNECT_TIMEOUT)
            // No ping before each use: it is a round trip per call. Only a
            // connection idle for a while is pinged first: one that broke while
            // idle (the database restarted) is replaced then, instead of failing
            // the first request after the restart. Busy connections are never
            // idle that long, so a loaded pool pays nothing.
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= PING_IF_IDLE {
                        use sqlx::Connection as _;
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(options)
            .await
            .map_err(|e| cannot_connect(url, e))?;
        let outcomes = std::sync::Arc::new(outcomes::Batcher::start(pool.clone()));
        Ok(PgStore { pool, outcomes })
    }

    /// Waits for the calls in progress to give their connections back, then closes
    /// the pool. Later calls, on this store or its clones, fail as unavailable.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Applies the migrations the database at `url` has not seen, as
/// [`PgStore::connect`] does, and returns: the `trawl migrate` command.
#[instrument(skip_all, fields(url = %redact(url)))]
pub async fn migrate(url: &str) -> Result<(), PortError> {
    migrate_with(&options(url)?, url).await
}

/// The migrations, as sqlx's migrator.
fn migrator() -> Migrator {
    Migrator::with_migrations(
        MIGRATIONS
            .iter()
            .map(|&(version, description, sql)| {
                Migration::new(
                    version,
                    Cow::Borrowed(description),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect(),
    )
}

/// Runs the migrator on a connection of its own (a pool of one, which `run` takes
/// without the lifetime trouble a bare connection has in a spawned task), closed
/// afterwards, which releases the advisory lock whatever happened.
async fn migrate_with(options: &PgConnectOptions, url: &str) -> Result<(), PortError> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect_with(options.clone())
        .await
        .map_err(|e| cannot_connect(url, e))?;
    let result = migrator().run(&pool).await;
    pool.close().await;
    result.map_err(migrate_error)
}

fn migrate_error(e: MigrateError) -> PortError {
    match e {
        MigrateError::Execute(e) => crate::error::port_error(e),
        MigrateError::ExecuteMigration(e, version) => match crate::error::port_error(e) {
            PortError::Unavailable(m) => {
                PortError::Unavailable(format!("applying migration {version}: {m}"))
            }
            other => PortError::Corrupt(format!("applying migration {version}: {other}")),
        },
        MigrateError::VersionMissing(version) => PortError::Corrupt(format!(
            "the database has migration {version}, which this build does not know: \
             it was migrated by a newer build"
        )),
        other => PortError::Corrupt(format!("database schema: {other}")),
    }
}

fn options(url: &str) -> Result<PgConnectOptions, PortError> {
    PgConnectOptions::from_str(url)
        .map(|o| o.application_name("trawl"))
        .map_err(|e| PortError::Unavailable(format!("invalid Postgres URL {}: {e}", redact(url))))
}

fn cannot_connect(url: &str, e: sqlx::Error) -> PortError {
    let detail = match crate::error::port_error(e) {
        PortError::Unavailable(m)
        | PortError::Corrupt(m)
        | PortError::NotFound(m)
        | PortError::Conflict(m) => m,
    };
    PortError::Unavailable(format!(
        "cannot connect to Postgres at {}: {detail}",
        redact(url)
    ))
}

/// The URL with its password replaced, for messages and logs.
fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            if u.password().is_some() {
                // Only fails for URLs that cannot have a password, which this has.
                let _ = u.set_password(Some("***"));
            }
            u.to_string()
        }
        Err(_) => "(a URL that does not parse)".to_owned(),
    }
}

fn no_job(id: &JobId) -> PortError {
    PortError::NotFound(format!("job {id}"))
}

/// A page limit as SQL wants it.
fn limit(n: u32) -> i64 {
    i64::from(n)
}

// ---------------------------------------------------------------------------
// The port

#[async_trait]
impl JobStore for PgStore {
    #[instrument(skip_all, fields(job_id = %job.id, slices = slices.len()))]
    async fn create_job(&self, job: &JobRecord, slices: &[SliceSpec]) -> Result<(), PortError> {
        let now = now_ms();
        let mut tx = self.pool.begin().await.port()?;
        sqlx::query(
            "INSERT INTO jobs (id, name, spec, status, reason, estimate, created_ms, updated_ms, \
             idempotency_key, request_digest, traceparent, owner, owner_client, tenant, \
             retention_ms, slices_max, approve_above) \
             VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, \
             $16, $17)",
        )
        .bind(job.id.as_str())
        .bind(text(&job.name))
        .bind(json(&job.spec)?)
        .bind(job.status.as_str())
        .bind(job.reason.as_deref().map(text))
        .bind(job.estimate.0)
        .bind(job.created_ms)
        .bind(now)
        .bind(job.idempotency.as_ref().map(|i| text(&i.key)))
        .bind(job.idempotency.as_ref().map(|i| text(&i.request_digest)))
        .bind(job.traceparent.as_deref().map(text))
        .bind(job.owner.as_ref().map(|o| text(&o.caller)))
        .bind(
            job.owner
                .as_ref()
                .and_then(|o| o.client.as_deref())
                .map(text),
        )
        .bind(
            job.owner
                .as_ref()
                .and_then(|o| o.tenant.as_deref())
                .map(text),
        )
        .bind(job.retention_ms)
        .bind(to_i64(job.slices_max))
        .bind(job.approve_above.map(|m| m.0))
        .execute(&mut *tx)
        .await
        .port()?;
        insert_slices(&mut tx, &job.id, slices, now, None).await?;
        tx.commit().await.port()
    }

    async fn job(&self, id: &JobId) -> Result<Option<JobRecord>, PortError> {
        let row = sqlx::query(select_jobs!("WHERE id = $1"))
            .bind(id.as_str())
            .fetch_optional(&self.pool)
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
        let done = sqlx::query(
            "UPDATE jobs SET status = $1, updated_ms = $2 WHERE id = $3 AND status = $4",
        )
        .bind(to.as_str())
        .bind(now_ms())
        .bind(id.as_str())
        .bind(from.as_str())
        .execute(&self.pool)
        .await
        .port()?;
        if done.rows_affected() == 0 && self.job(id).await?.is_none() {
            return Err(no_job(id));
        }
        Ok(done.rows_affected() == 1)
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
            "UPDATE jobs SET status = $1, reason = $2, updated_ms = $3 WHERE id = $4 \
             AND status NOT IN ('succeeded', 'partial', 'failed', 'cancelled')",
        )
        .bind(status.as_str())
        .bind(reason)
        .bind(now_ms())
        .bind(id.as_str())
        .execute(&self.pool)
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
            "UPDATE jobs SET budget_reserved = budget_reserved + $1 \
             WHERE id = $2 AND budget_reserved + $1 <= $3",
        )
        .bind(amount.0)
        .bind(id.as_str())
        .bind(max.0)
        .execute(&self.pool)
        .await
        .port()?;
        Ok(done.rows_affected() == 1)
    }

    async fn adjust_budget(&self, id: &JobId, delta: Micros) -> Result<(), PortError> {
        sqlx::query("UPDATE jobs SET budget_reserved = budget_reserved + $1 WHERE id = $2")
            .bind(delta.0)
            .bind(id.as_str())
            .execute(&self.pool)
            .await
            .port()?;
        Ok(())
    }

    async fn spent(&self, id: &JobId) -> Result<Micros, PortError> {
        Ok(self.counts(id).await?.cost)
    }

    /// An unknown job is [`PortError::NotFound`], not `false`. Each batch is its
    /// own transaction and takes no lock on the job's row that a cancel waits
    /// for; two planners of one job store each slice once (ids from content,
    /// conflicts skipped) and only one moves the job.
    #[instrument(skip_all, fields(job_id = %id, status = status.as_str()))]
    async fn plan_job(
        &self,
        id: &JobId,
        slices: &mut PlannedSlices<'_>,
        status: JobStatus,
    ) -> Result<bool, PortError> {
        let now = now_ms();
        loop {
            let batch = next_batch(slices);
            let mut tx = self.pool.begin().await.port()?;
            let current: Option<String> =
                sqlx::query_scalar("SELECT status FROM jobs WHERE id = $1")
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
                let moved = sqlx::query(
                    "UPDATE jobs SET status = $1, updated_ms = $2 \
                     WHERE id = $3 AND status = 'pending'",
                )
                .bind(status.as_str())
                .bind(now_ms())
                .bind(id.as_str())
                .execute(&mut *tx)
                .await
                .port()?
                .rows_affected();
                tx.commit().await.port()?;
                return Ok(moved > 0);
            }
            insert_slices(&mut tx, id, &batch, now, Some(now)).await?;
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
            "WHERE status = ANY($1) ORDER BY created_ms, id LIMIT $2"
        ))
        .bind(&names)
        .bind(self::limit(limit))
        .fetch_all(&self.pool)
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
            "WHERE COALESCE(tenant, '') = $1 AND COALESCE(owner, '') = $2 \
             AND idempotency_key = $3"
        ))
        .bind(text(owner.tenant.as_deref().unwrap_or_default()))
        .bind(text(&owner.caller))
        .bind(text(key))
        .fetch_optional(&self.pool)
        .await
        .port()?;
        row.as_ref().map(job_record).transpose()
    }

    async fn tenant_usage(&self, tenant: &str, since_ms: i64) -> Result<Usage, PortError> {
        let active = sqlx::query(
            "SELECT COUNT(*)::BIGINT AS jobs, COALESCE(SUM(CASE WHEN j.status = 'pending' \
                 THEN j.slices_max ELSE GREATEST(c.total - c.ended, 0) END), 0)::BIGINT AS open \
             FROM jobs j, LATERAL ( \
                 SELECT COALESCE(SUM(slices_total), 0) AS total, \
                     COALESCE(SUM(slices_succeeded + slices_failed), 0) AS ended \
                 FROM job_counters WHERE job_id = j.id) c \
             WHERE COALESCE(tenant, owner) = $1 AND owner IS NOT NULL \
               AND status IN ('pending', 'awaiting_approval', 'queued', 'running')",
        )
        .bind(text(tenant))
        .fetch_one(&self.pool)
        .await
        .port()?;
        let days = sqlx::query(
            "SELECT (j.created_ms - j.created_ms % 86400000)::BIGINT AS day, \
                 COUNT(*)::BIGINT AS jobs, COALESCE(SUM(c.total), 0)::BIGINT AS slices, \
                 COALESCE(SUM(c.cost), 0)::BIGINT AS spent, \
                 COALESCE(SUM(CASE \
                     WHEN status IN ('pending', 'awaiting_approval', 'queued', 'running') \
                     THEN GREATEST(j.estimate, c.cost) ELSE c.cost END), 0)::BIGINT AS committed \
             FROM jobs j, LATERAL ( \
                 SELECT COALESCE(SUM(slices_total), 0) AS total, COALESCE(SUM(cost), 0) AS cost \
                 FROM job_counters WHERE job_id = j.id) c \
             WHERE COALESCE(tenant, owner) = $1 AND owner IS NOT NULL AND created_ms >= $2 \
             GROUP BY 1 ORDER BY 1",
        )
        .bind(text(tenant))
        .bind(since_ms)
        .fetch_all(&self.pool)
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
        retention::expired_jobs(&self.pool, now_ms, default_ms, limit).await
    }

    async fn purge_job(&self, id: &JobId, batch: u32) -> Result<u64, PortError> {
        retention::purge_job(&self.pool, id, batch).await
    }

    async fn job_rows(&self, id: &JobId) -> Result<Vec<(&'static str, u64)>, PortError> {
        retention::job_rows(&self.pool, id).await
    }

    async fn cost_months(&self) -> Result<Vec<CostMonth>, PortError> {
        retention::cost_months(&self.pool).await
    }

    async fn keep_partitions(&self, now_ms: i64) -> Result<Partitions, PortError> {
        partitions::keep(&self.pool, now_ms).await
    }

    /// `SELECT 1` on a pooled connection; when that fails, once more on a new
    /// connection: pooled ones may be left broken by a database restart while
    /// the database itself answers.
    async fn ping(&self) -> Result<(), PortError> {
        let pooled = sqlx::query("SELECT 1").execute(&self.pool).await;
        if pooled.is_ok() || self.pool.is_closed() {
            return pooled.map(drop).port();
        }
        use sqlx::Connection as _;
        let options = self.pool.connect_options();
        let mut fresh = sqlx::postgres::PgConnection::connect_with(&options)
            .await
            .port()?;
        sqlx::query("SELECT 1").execute(&mut fresh).await.port()?;
        // The answer is in; how the connection closes does not change it.
        let _ = fresh.close().await;
        Ok(())
    }
}

#[async_trait]
impl SliceStore for PgStore {
    async fn open_slices_page(
        &self,
        id: &JobId,
        after: Option<&SliceId>,
        limit: u32,
    ) -> Result<Vec<SliceSpec>, PortError> {
        let rows = sqlx::query(
            "SELECT spec::text AS spec FROM slices \
             WHERE job_id = $1 AND status = 'pending' AND slice_id > $2 \
             ORDER BY slice_id LIMIT $3",
        )
        .bind(id.as_str())
        .bind(after.map_or("", SliceId::as_str))
        .bind(self::limit(limit))
        .fetch_all(&self.pool)
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
        self.outcomes.record(job, slice, outcome).await
    }

    #[instrument(level = "debug", skip_all, fields(job_id = %job, slice_id = %slice))]
    async fn record_costs(
        &self,
        job: &JobId,
        slice: &SliceId,
        costs: &[trawl_core::model::CostEntry],
        calls: u64,
    ) -> Result<u64, PortError> {
        outcomes::record_costs(&self.pool, job, slice, costs, calls).await
    }

    async fn save_progress(
        &self,
        job: &JobId,
        slice: &SliceId,
        progress: &Progress,
    ) -> Result<(), PortError> {
        outcomes::save_progress(&self.pool, job, slice, progress).await
    }

    async fn progress(&self, job: &JobId, slice: &SliceId) -> Result<Option<Progress>, PortError> {
        outcomes::progress(&self.pool, job, slice).await
    }

    async fn counts(&self, id: &JobId) -> Result<JobCounts, PortError> {
        let row = sqlx::query(COUNTS)
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await
            .port()?
            .ok_or_else(|| no_job(id))?;
        job_counts(&row)
    }

    /// From the job's counters: open while fewer slices ended than were stored.
    async fn has_open_slices(&self, id: &JobId) -> Result<bool, PortError> {
        let c = self.counts(id).await?;
        Ok(c.slices_succeeded + c.slices_failed < c.slices_total)
    }

    async fn items(&self, id: &JobId) -> Result<Vec<Item>, PortError> {
        let rows = sqlx::query(
            "SELECT slice_id, seq, kind, url, geo, data::text AS data FROM items \
             WHERE job_id = $1 ORDER BY slice_id, seq",
        )
        .bind(id.as_str())
        .fetch_all(&self.pool)
        .await
        .port()?;
        rows.iter().map(item).collect()
    }

    async fn rejections(&self, id: &JobId) -> Result<Vec<Rejection>, PortError> {
        let rows = sqlx::query(
            "SELECT slice_id, seq, url, geo, data::text AS data, errors::text AS errors \
             FROM rejections WHERE job_id = $1 ORDER BY slice_id, seq",
        )
        .bind(id.as_str())
        .fetch_all(&self.pool)
        .await
        .port()?;
        rows.iter().map(rejection).collect()
    }

    async fn failed_slices(&self, id: &JobId, limit: u32) -> Result<Vec<FailedSlice>, PortError> {
        let rows = sqlx::query(
            "SELECT spec::text AS spec, error_code, error_message FROM slices \
             WHERE job_id = $1 AND status = 'failed' ORDER BY slice_id LIMIT $2",
        )
        .bind(id.as_str())
        .bind(self::limit(limit))
        .fetch_all(&self.pool)
        .await
        .port()?;
        rows.iter().map(failed_slice).collect()
    }

    async fn add_slices(&self, id: &JobId, slices: &[SliceSpec]) -> Result<u64, PortError> {
        let mut conn = self.pool.acquire().await.port()?;
        insert_slices(&mut conn, id, slices, now_ms(), None).await
    }

    async fn slices_to_publish(
        &self,
        id: &JobId,
        stale_before_ms: i64,
        limit: u32,
    ) -> Result<Vec<SliceSpec>, PortError> {
        // The first `limit` never published, walked in slice order on their own
        // index, and the first `limit` published before the bound, found by time on
        // theirs and then sorted (materialized, so that the planner cannot turn it
        // into a walk over every pending slice in slice order); then the first
        // `limit` of both.
        let rows = sqlx::query(
            "WITH stale AS MATERIALIZED ( \
                 SELECT slice_id FROM slices \
                 WHERE job_id = $1 AND status = 'pending' AND published_ms < $2 \
             ), due AS ( \
                 (SELECT slice_id FROM slices \
                  WHERE job_id = $1 AND status = 'pending' AND published_ms IS NULL \
                  ORDER BY slice_id LIMIT $3) \
                 UNION ALL \
                 (SELECT slice_id FROM stale ORDER BY slice_id LIMIT $3) \
             ) \
             SELECT spec::text AS spec FROM slices \
             WHERE job_id = $1 \
             AND slice_id IN (SELECT slice_id FROM due ORDER BY slice_id LIMIT $3) \
             ORDER BY slice_id",
        )
        .bind(id.as_str())
        .bind(stale_before_ms)
        .bind(self::limit(limit))
        .fetch_all(&self.pool)
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
        // Sorted, so that two schedulers marking the same slices lock them in the
        // same order.
        let mut ids: Vec<&str> = slices.iter().map(SliceId::as_str).collect();
        ids.sort_unstable();
        ids.dedup();
        sqlx::query(
            "UPDATE slices SET published_ms = $1 \
             WHERE job_id = $2 AND status = 'pending' AND slice_id = ANY($3)",
        )
        .bind(at_ms)
        .bind(id.as_str())
        .bind(&ids)
        .execute(&self.pool)
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
        let sql = "SELECT slice_id, seq, kind, url, geo, data::text AS data FROM items \
                 WHERE job_id = $1 AND (slice_id, seq) > ($2, $3) \
                 ORDER BY slice_id, seq LIMIT $4";
        self.page(sql, id, after, limit, item).await
    }

    async fn rejections_page(
        &self,
        id: &JobId,
        after: Option<&RowCursor>,
        limit: u32,
    ) -> Result<Vec<Rejection>, PortError> {
        let sql = "SELECT slice_id, seq, url, geo, data::text AS data, errors::text AS errors \
                 FROM rejections WHERE job_id = $1 AND (slice_id, seq) > ($2, $3) \
                 ORDER BY slice_id, seq LIMIT $4";
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
                 WHERE job_id = $1 AND (slice_id, seq) > ($2, $3) \
                 ORDER BY slice_id, seq LIMIT $4";
        self.page(sql, id, after, limit, trace_step).await
    }
}

#[async_trait]
impl ApprovalStore for PgStore {
    /// Stores `approval` as pending (its decision fields are ignored), replacing a
    /// pending one of the same job. A replacement that asks something else is
    /// announced again and gets a new expiry; one that asks the same keeps both.
    #[instrument(skip_all, fields(job_id = %approval.job_id))]
    async fn request_approval(&self, approval: &Approval) -> Result<(), PortError> {
        sqlx::query(
            "INSERT INTO approvals (id, job_id, amount, reason, requested_ms) \
             VALUES ($5, $1, $2, $3, $4) \
             ON CONFLICT (job_id) WHERE approved IS NULL DO UPDATE SET \
             amount = EXCLUDED.amount, reason = EXCLUDED.reason, \
             requested_ms = EXCLUDED.requested_ms, \
             expires_ms = CASE WHEN approvals.amount = EXCLUDED.amount \
                 AND approvals.reason = EXCLUDED.reason THEN approvals.expires_ms END, \
             notified_ms = CASE WHEN approvals.amount = EXCLUDED.amount \
                 AND approvals.reason = EXCLUDED.reason THEN approvals.notified_ms END",
        )
        .bind(approval.job_id.as_str())
        .bind(approval.amount.0)
        .bind(text(&approval.reason))
        .bind(now_ms())
        .bind(crate::new_approval_id()?)
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
        let by = text(by);
        let row = sqlx::query(
            "UPDATE approvals SET approved = $1, decided_by = $2, decided_ms = $3 \
             WHERE job_id = $4 AND approved IS NULL \
             AND (expires_ms IS NULL OR expires_ms > $3) RETURNING amount, reason",
        )
        .bind(approved)
        .bind(&*by)
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
                decided_by: Some(by.into_owned()),
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
            select_approvals!("WHERE approved IS NULL ORDER BY requested_ms DESC, id DESC LIMIT $1")
        } else {
            select_approvals!("ORDER BY requested_ms DESC, id DESC LIMIT $1")
        };
        let rows = sqlx::query(sql)
            .bind(self::limit(limit))
            .fetch_all(&self.pool)
            .await
            .port()?;
        rows.iter().map(approval_record).collect()
    }

    async fn pending_approvals(&self) -> Result<u64, PortError> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM approvals WHERE approved IS NULL")
            .fetch_one(&self.pool)
            .await
            .port()?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn approval(&self, id: i64) -> Result<Option<ApprovalRecord>, PortError> {
        let row = sqlx::query(select_approvals!("WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
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
        notices::expire_approvals(&self.pool, now_ms, ttl_ms, limit).await
    }

    #[instrument(skip_all)]
    async fn claim_approval_notices(
        &self,
        now_ms: i64,
        lease_ms: i64,
        ttl_ms: Option<i64>,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>, PortError> {
        notices::claim_approval_notices(&self.pool, now_ms, lease_ms, ttl_ms, limit).await
    }

    async fn approval_notice_sent(
        &self,
        id: i64,
        notice: ApprovalNotice,
        at_ms: i64,
    ) -> Result<(), PortError> {
        notices::approval_notice_sent(&self.pool, id, notice, at_ms).await
    }

    async fn approval_notice_failed(&self, id: i64, retry_at_ms: i64) -> Result<(), PortError> {
        notices::approval_notice_failed(&self.pool, id, retry_at_ms).await
    }
}

#[async_trait]
impl ToolStore for PgStore {
    async fn tool_pins(&self) -> Result<Vec<ToolPin>, PortError> {
        tools::tool_pins(&self.pool).await
    }

    #[instrument(skip_all, fields(changes = changes.len()))]
    async fn save_pins(&self, changes: &[PinChange]) -> Result<(), PortError> {
        tools::save_pins(&self.pool, changes).await
    }

    #[instrument(skip_all, fields(approval = id, approved))]
    async fn decide_tool_approval(
        &self,
        id: i64,
        approved: bool,
        by: &str,
    ) -> Result<Option<ApprovalRecord>, PortError> {
        tools::decide_tool_approval(&self.pool, id, approved, by).await
    }

    async fn tool_call_approval(
        &self,
        tool: &str,
        args_digest: &str,
        reason: &str,
        detail: &serde_json::Value,
    ) -> Result<(i64, Option<bool>), PortError> {
        tools::tool_call_approval(&self.pool, tool, args_digest, reason, detail).await
    }

    async fn record_audit(&self, rows: &[AuditRecord]) -> Result<(), PortError> {
        if rows.is_empty() {
            return Ok(());
        }
        tools::record_audit(&self.pool, rows).await
    }

    async fn audit_page(
        &self,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<(i64, AuditRecord)>, PortError> {
        tools::audit_page(&self.pool, after, limit).await
    }

    async fn tool_listings(&self) -> Result<Vec<ToolListing>, PortError> {
        tools::tool_listings(&self.pool).await
    }

    #[instrument(skip_all, fields(server = %listing.server, tools = listing.tools.len()))]
    async fn save_tool_listing(&self, listing: &ToolListing) -> Result<(), PortError> {
        tools::save_tool_listing(&self.pool, listing).await
    }

    async fn embeddings(
        &self,
        model: &str,
        keys: &[String],
    ) -> Result<Vec<(String, Vec<f32>)>, PortError> {
        guard::embeddings(&self.pool, model, keys).await
    }

    #[instrument(skip_all, fields(model = %model, rows = rows.len()))]
    async fn save_embeddings(
        &self,
        model: &str,
        rows: &[(String, Vec<f32>)],
    ) -> Result<(), PortError> {
        guard::save_embeddings(&self.pool, model, rows).await
    }

    async fn guard_verdict(
        &self,
        model: &str,
        hash: &str,
    ) -> Result<Option<GuardVerdict>, PortError> {
        guard::guard_verdict(&self.pool, model, hash).await
    }

    async fn save_guard_verdict(&self, v: &GuardVerdict) -> Result<(), PortError> {
        guard::save_guard_verdict(&self.pool, v).await
    }
}

#[async_trait]
impl ArtifactStore for PgStore {
    #[instrument(skip_all, fields(job_id = %a.job_id, name = %a.name, bytes = a.data.len()))]
    async fn put_artifact(&self, a: &Artifact) -> Result<(), PortError> {
        browse::put_artifact(&self.pool, a).await
    }

    async fn artifacts(&self, job: &JobId) -> Result<Vec<ArtifactInfo>, PortError> {
        browse::artifacts(&self.pool, job).await
    }

    async fn artifact(&self, job: &JobId, name: &str) -> Result<Option<Artifact>, PortError> {
        browse::artifact(&self.pool, job, name).await
    }

    async fn replay(&self, key: &str) -> Result<Option<serde_json::Value>, PortError> {
        browse::replay(&self.pool, key).await
    }

    async fn put_replay(&self, key: &str, value: &serde_json::Value) -> Result<(), PortError> {
        browse::put_replay(&self.pool, key, value).await
    }

    async fn drop_replay(&self, key: &str) -> Result<(), PortError> {
        browse::drop_replay(&self.pool, key).await
    }
}

#[async_trait]
impl WorkerStore for PgStore {
    async fn report_worker(&self, w: &WorkerInfo) -> Result<(), PortError> {
        sqlx::query(
            "INSERT INTO workers (id, pool, capabilities, concurrency, started_ms, heartbeat_ms) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO UPDATE SET pool = excluded.pool, \
             capabilities = excluded.capabilities, concurrency = excluded.concurrency, \
             heartbeat_ms = excluded.heartbeat_ms",
        )
        .bind(&w.id)
        .bind(w.pool.as_str())
        .bind(decode::capabilities_json(w)?)
        .bind(i64::from(w.concurrency))
        .bind(w.started_ms)
        .bind(w.heartbeat_ms)
        .execute(&self.pool)
        .await
        .port()?;
        Ok(())
    }

    async fn workers(&self, since_ms: i64) -> Result<Vec<WorkerInfo>, PortError> {
        let rows = sqlx::query(
            "SELECT id, pool, capabilities, concurrency, started_ms, heartbeat_ms FROM workers \
             WHERE heartbeat_ms >= $1 ORDER BY heartbeat_ms DESC, id",
        )
        .bind(since_ms)
        .fetch_all(&self.pool)
        .await
        .port()?;
        rows.iter().map(decode::worker_info).collect()
    }
}

#[cfg(test)]
mod tests;
