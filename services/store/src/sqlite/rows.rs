//! Rows in and out: multi-row inserts and decoding what was stored.
//!
//! Rows go in many per statement: a statement's cost is mostly its round trip to the
//! connection's thread, not the rows it carries.

use std::collections::HashSet;

use sqlx::sqlite::{SqliteArguments, SqliteConnection, SqliteRow};
use sqlx::{AssertSqlSafe, Row, Sqlite};
use trawl_core::model::{
    AuditRecord, CostEntry, Item, JobId, Rejection, SliceId, SliceSpec, TraceStep,
};
use trawl_core::ports::PortError;

use crate::error::ResultExt;

/// Rows per multi-row `INSERT`, unless the bound-parameter limit says fewer.
const ROWS_PER_STATEMENT: usize = 500;
/// SQLite's limit on bound parameters per statement (`SQLITE_MAX_VARIABLE_NUMBER`).
const MAX_PARAMS: usize = 32_766;

type Query<'q> = sqlx::query::Query<'q, Sqlite, SqliteArguments>;

/// `head VALUES row, row, … tail` with `rows` copies of `row`, e.g.
/// `values_sql("INSERT INTO t (a, b)", "(?, ?)", 2, "")`.
pub(super) fn values_sql(head: &str, row: &str, rows: usize, tail: &str) -> String {
    let mut sql = String::with_capacity(head.len() + tail.len() + 9 + rows * (row.len() + 2));
    sql.push_str(head);
    sql.push_str(" VALUES ");
    for i in 0..rows {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(row);
    }
    sql.push(' ');
    sql.push_str(tail);
    sql
}

/// How many rows of `params` parameters one statement may carry.
pub(super) fn rows_per_statement(params: usize) -> usize {
    ROWS_PER_STATEMENT.min(MAX_PARAMS / params.max(1)).max(1)
}

/// The shape of one table's insert.
struct Insert {
    /// `INSERT INTO table (columns)`.
    head: &'static str,
    /// `(?, …)`, one `?` per parameter.
    row: &'static str,
    params: usize,
    tail: &'static str,
}

impl Insert {
    /// One statement per chunk of `rows`, each row bound by `bind`.
    fn statements<'a, 'q, T>(
        &'a self,
        rows: &'a [T],
        bind: impl Fn(Query<'q>, &T) -> Result<Query<'q>, PortError> + 'a,
    ) -> impl Iterator<Item = Result<Query<'q>, PortError>> + 'a {
        rows.chunks(rows_per_statement(self.params))
            .map(move |chunk| {
                // The text comes from constants and a row count, never from input.
                let sql = values_sql(self.head, self.row, chunk.len(), self.tail);
                chunk
                    .iter()
                    .try_fold(sqlx::query(AssertSqlSafe(sql)), &bind)
            })
    }
}

const SKIP: &str = "ON CONFLICT DO NOTHING";

const SLICES: Insert = Insert {
    head: "INSERT INTO slices (job_id, slice_id, parent_id, kind, spec, created_ms)",
    row: "(?, ?, ?, ?, ?, ?)",
    params: 6,
    tail: SKIP,
};

/// Planned slices: published as of their planning (see `JobStore::plan_job`).
const PLANNED_SLICES: Insert = Insert {
    head: "INSERT INTO slices (job_id, slice_id, parent_id, kind, spec, created_ms, published_ms)",
    row: "(?, ?, ?, ?, ?, ?, ?)",
    params: 7,
    tail: SKIP,
};

const CHILD_SLICES: Insert = Insert {
    tail: "ON CONFLICT DO NOTHING RETURNING job_id, slice_id",
    ..SLICES
};

const ITEMS: Insert = Insert {
    head: "INSERT INTO items (job_id, slice_id, seq, kind, url, geo, data)",
    row: "(?, ?, ?, ?, ?, ?, ?)",
    params: 7,
    tail: SKIP,
};

const REJECTIONS: Insert = Insert {
    head: "INSERT INTO rejections (job_id, slice_id, seq, url, geo, data, errors)",
    row: "(?, ?, ?, ?, ?, ?, ?)",
    params: 7,
    tail: SKIP,
};

const TRACE_STEPS: Insert = Insert {
    head: "INSERT INTO trace_steps (job_id, slice_id, seq, tool, args_digest, cache_hit, \
           attempt, status, error, latency_us, cost, at_ms, trace_id, span_id)",
    row: "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    params: 14,
    tail: SKIP,
};

const AUDIT: Insert = Insert {
    head: "INSERT INTO tool_audit (job_id, slice_id, seq, tool, args_digest, decision, reason, \
           caller, latency_us, result_bytes, error, at_ms)",
    row: "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    params: 12,
    tail: SKIP,
};

const COSTS: Insert = Insert {
    head: "INSERT INTO costs (job_id, slice_id, attempt, seq, product, amount)",
    row: "(?, ?, ?, ?, ?, ?)",
    params: 6,
    tail: SKIP,
};

const EMBEDDINGS: Insert = Insert {
    head: "INSERT INTO embeddings (model, key, vector, created_ms)",
    row: "(?, ?, ?, ?)",
    params: 4,
    tail: SKIP,
};

/// Inserts vectors of `model` by key; a key already stored keeps its vector.
pub(super) async fn insert_embeddings(
    conn: &mut SqliteConnection,
    model: &str,
    rows: &[(String, Vec<f32>)],
    now: i64,
) -> Result<(), PortError> {
    let bind = |q: Query<'static>, (key, v): &(String, Vec<f32>)| {
        Ok(q.bind(model.to_owned())
            .bind(key.clone())
            .bind(crate::vector::to_bytes(v))
            .bind(now))
    };
    for q in EMBEDDINGS.statements(rows, bind) {
        q?.execute(&mut *conn).await.port()?;
    }
    Ok(())
}

pub(super) fn to_json<T: serde::Serialize + ?Sized>(v: &T) -> Result<String, PortError> {
    serde_json::to_string(v).map_err(|e| PortError::Corrupt(format!("cannot encode: {e}")))
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A row of a slice's output: the job and slice it is stored under, and the record.
pub(super) type Owned<'a, T> = (&'a JobId, &'a SliceId, &'a T);

fn bind_slice<'q>(
    q: Query<'q>,
    (job, s, now): &(&JobId, &SliceSpec, i64),
) -> Result<Query<'q>, PortError> {
    Ok(q.bind(job.as_str())
        .bind(s.id.as_str())
        .bind(s.parent.as_ref().map(SliceId::as_str))
        .bind(s.kind.name())
        .bind(to_json(s)?)
        .bind(*now))
}

/// Inserts pending slices; ids a job already has are skipped.
pub(super) async fn insert_slices(
    conn: &mut SqliteConnection,
    rows: &[(&JobId, &SliceSpec, i64)],
) -> Result<(), PortError> {
    for q in SLICES.statements(rows, bind_slice) {
        q?.execute(&mut *conn).await.port()?;
    }
    Ok(())
}

/// Inserts a plan's slices, published at their creation time; ids the job
/// already has are skipped (a plan stored again after a crash).
pub(super) async fn insert_planned_slices(
    conn: &mut SqliteConnection,
    rows: &[(&JobId, &SliceSpec, i64)],
) -> Result<(), PortError> {
    let bind = |q, row: &(&JobId, &SliceSpec, i64)| Ok(bind_slice(q, row)?.bind(row.2));
    for q in PLANNED_SLICES.statements(rows, bind) {
        q?.execute(&mut *conn).await.port()?;
    }
    Ok(())
}

/// Inserts pending slices like [`insert_slices`] and returns the (job id, slice id)
/// pairs that were new.
pub(super) async fn insert_new_slices(
    conn: &mut SqliteConnection,
    rows: &[(&JobId, &SliceSpec, i64)],
) -> Result<HashSet<(String, String)>, PortError> {
    let mut inserted = HashSet::new();
    for q in CHILD_SLICES.statements(rows, bind_slice) {
        for row in q?.fetch_all(&mut *conn).await.port()? {
            inserted.insert((
                row.try_get::<String, _>(0).port()?,
                row.try_get::<String, _>(1).port()?,
            ));
        }
    }
    Ok(inserted)
}

pub(super) async fn insert_items(
    conn: &mut SqliteConnection,
    rows: &[Owned<'_, Item>],
) -> Result<(), PortError> {
    let statements = ITEMS.statements(rows, |q, (job, slice, it)| {
        Ok(q.bind(job.as_str())
            .bind(slice.as_str())
            .bind(it.seq)
            .bind(it.kind.as_str())
            .bind(it.url.as_str())
            .bind(it.geo.as_str())
            .bind(to_json(&it.data)?))
    });
    for q in statements {
        q?.execute(&mut *conn).await.port()?;
    }
    Ok(())
}

pub(super) async fn insert_rejections(
    conn: &mut SqliteConnection,
    rows: &[Owned<'_, Rejection>],
) -> Result<(), PortError> {
    let statements = REJECTIONS.statements(rows, |q, (job, slice, r)| {
        Ok(q.bind(job.as_str())
            .bind(slice.as_str())
            .bind(r.seq)
            .bind(r.url.as_str())
            .bind(r.geo.as_str())
            .bind(to_json(&r.data)?)
            .bind(to_json(&r.errors)?))
    });
    for q in statements {
        q?.execute(&mut *conn).await.port()?;
    }
    Ok(())
}

pub(super) async fn insert_trace_steps(
    conn: &mut SqliteConnection,
    rows: &[Owned<'_, TraceStep>],
) -> Result<(), PortError> {
    let statements = TRACE_STEPS.statements(rows, |q, (job, slice, t)| {
        Ok(q.bind(job.as_str())
            .bind(slice.as_str())
            .bind(t.seq)
            .bind(t.tool.as_str())
            .bind(t.args_digest.as_str())
            .bind(t.cache_hit)
            .bind(t.attempt)
            .bind(t.status.as_str())
            .bind(t.error.as_deref())
            .bind(to_i64(t.latency_us))
            .bind(t.cost.0)
            .bind(t.at_ms)
            .bind(t.trace_id.as_deref())
            .bind(t.span_id.as_deref()))
    });
    for q in statements {
        q?.execute(&mut *conn).await.port()?;
    }
    Ok(())
}

/// Audit rows; a slice's rows are stored under that slice whatever they name.
pub(super) async fn insert_audit(
    conn: &mut SqliteConnection,
    rows: &[(Option<&JobId>, Option<&SliceId>, &AuditRecord)],
) -> Result<(), PortError> {
    let statements = AUDIT.statements(rows, |q, (job, slice, a)| {
        Ok(q.bind(job.map(JobId::as_str))
            .bind(slice.map(SliceId::as_str))
            .bind(a.seq)
            .bind(a.tool.as_str())
            .bind(a.args_digest.as_str())
            .bind(a.decision.as_str())
            .bind(a.reason.as_str())
            .bind(a.caller.as_str())
            .bind(to_i64(a.latency_us))
            .bind(to_i64(a.result_bytes))
            .bind(a.error.as_deref())
            .bind(a.at_ms))
    });
    for q in statements {
        q?.execute(&mut *conn).await.port()?;
    }
    Ok(())
}

/// Inserts cost rows; a row whose (job, slice, attempt, seq) is stored already
/// is kept as it is. Returns how many rows were new.
pub(super) async fn insert_costs(
    conn: &mut SqliteConnection,
    rows: &[Owned<'_, CostEntry>],
) -> Result<u64, PortError> {
    let statements = COSTS.statements(rows, |q, (job, slice, c)| {
        Ok(q.bind(job.as_str())
            .bind(slice.as_str())
            .bind(c.attempt.as_str())
            .bind(c.seq)
            .bind(c.product.as_str())
            .bind(c.amount.0))
    });
    let mut new = 0;
    for q in statements {
        new += q?.execute(&mut *conn).await.port()?.rows_affected();
    }
    Ok(new)
}

// ---------------------------------------------------------------------------
// Decoding

fn corrupt(what: &str, e: impl std::fmt::Display) -> PortError {
    PortError::Corrupt(format!("stored {what}: {e}"))
}

pub(super) fn get<'r, T>(row: &'r SqliteRow, col: &str) -> Result<T, PortError>
where
    T: sqlx::Decode<'r, Sqlite> + sqlx::Type<Sqlite>,
{
    row.try_get(col).port()
}

pub(super) fn get_json<T: serde::de::DeserializeOwned>(
    row: &SqliteRow,
    col: &str,
) -> Result<T, PortError> {
    let s: String = get(row, col)?;
    serde_json::from_str(&s).map_err(|e| corrupt(col, e))
}
