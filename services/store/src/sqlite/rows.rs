//! Rows in and out: multi-row inserts and decoding what was stored.
//!
//! Rows go in many per statement: a statement's cost is mostly its round trip to the
//! connection's thread, not the rows it carries.

use std::collections::HashSet;

use sqlx::sqlite::{SqliteArguments, SqliteConnection, SqliteRow};
use sqlx::{AssertSqlSafe, Row, Sqlite};
use trawl_core::cost::Micros;
use trawl_core::geo::Geo;
use trawl_core::model::{
    AuditRecord, CostEntry, Item, ItemKind, JobCounts, JobId, JobStatus, Rejection, SliceError,
    SliceId, SliceSpec, TraceStep, Violation,
};
use trawl_core::ports::{
    ApprovalRecord, FailedSlice, Idempotency, JobOwner, JobRecord, PinStatus, PortError,
    ToolListing, ToolPin,
};

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
    head: "INSERT INTO costs (job_id, slice_id, seq, product, amount)",
    row: "(?, ?, ?, ?, ?)",
    params: 5,
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

pub(super) fn audit_record(row: &SqliteRow) -> Result<(i64, AuditRecord), PortError> {
    let job: Option<String> = get(row, "job_id")?;
    let slice: Option<String> = get(row, "slice_id")?;
    Ok((
        get(row, "id")?,
        AuditRecord {
            job_id: job
                .map(|j| JobId::parse(&j).map_err(|e| corrupt("job id", e)))
                .transpose()?,
            slice_id: slice.map(SliceId::from_stored),
            seq: get_u32(row, "seq")?,
            tool: get(row, "tool")?,
            args_digest: get(row, "args_digest")?,
            decision: get(row, "decision")?,
            reason: get(row, "reason")?,
            caller: get(row, "caller")?,
            latency_us: get_u64(row, "latency_us")?,
            result_bytes: get_u64(row, "result_bytes")?,
            error: get(row, "error")?,
            at_ms: get(row, "at_ms")?,
        },
    ))
}

pub(super) fn tool_pin(row: &SqliteRow) -> Result<ToolPin, PortError> {
    let status: String = get(row, "status")?;
    let json = |col: &str| -> Result<Option<serde_json::Value>, PortError> {
        let s: Option<String> = get(row, col)?;
        s.map(|s| serde_json::from_str(&s).map_err(|e| corrupt(col, e)))
            .transpose()
    };
    Ok(ToolPin {
        tool: get(row, "tool")?,
        server: get(row, "server")?,
        status: PinStatus::parse(&status).ok_or_else(|| corrupt("pin status", &status))?,
        hash: get(row, "hash")?,
        definition: json("definition")?,
        pending_hash: get(row, "pending_hash")?,
        pending_definition: json("pending_definition")?,
        approval_id: get(row, "approval_id")?,
        pinned_ms: get(row, "pinned_ms")?,
        approved_by: get(row, "approved_by")?,
    })
}

pub(super) async fn insert_costs(
    conn: &mut SqliteConnection,
    rows: &[Owned<'_, CostEntry>],
) -> Result<(), PortError> {
    let statements = COSTS.statements(rows, |q, (job, slice, c)| {
        Ok(q.bind(job.as_str())
            .bind(slice.as_str())
            .bind(c.seq)
            .bind(c.product.as_str())
            .bind(c.amount.0))
    });
    for q in statements {
        q?.execute(&mut *conn).await.port()?;
    }
    Ok(())
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

pub(super) fn get_json<T: serde::de::DeserializeOwned>(
    row: &SqliteRow,
    col: &str,
) -> Result<T, PortError> {
    let s: String = get(row, col)?;
    serde_json::from_str(&s).map_err(|e| corrupt(col, e))
}

pub(super) fn job_record(row: &SqliteRow) -> Result<JobRecord, PortError> {
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
        idempotency: match get::<Option<String>>(row, "idempotency_key")? {
            Some(key) => Some(Idempotency {
                key,
                request_digest: get::<Option<String>>(row, "request_digest")?.unwrap_or_default(),
            }),
            None => None,
        },
        traceparent: get(row, "traceparent")?,
        owner: match get::<Option<String>>(row, "owner")? {
            Some(caller) => Some(JobOwner {
                caller,
                client: get(row, "owner_client")?,
                tenant: get(row, "tenant")?,
            }),
            None => None,
        },
    })
}

pub(super) fn item(row: &SqliteRow) -> Result<Item, PortError> {
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

pub(super) fn rejection(row: &SqliteRow) -> Result<Rejection, PortError> {
    Ok(Rejection {
        slice_id: SliceId::from_stored(get(row, "slice_id")?),
        seq: get_u32(row, "seq")?,
        url: get(row, "url")?,
        geo: get_geo(row)?,
        data: get_json(row, "data")?,
        errors: get_json::<Vec<Violation>>(row, "errors")?,
    })
}

pub(super) fn trace_step(row: &SqliteRow) -> Result<TraceStep, PortError> {
    Ok(TraceStep {
        slice_id: SliceId::from_stored(get(row, "slice_id")?),
        seq: get_u32(row, "seq")?,
        tool: get(row, "tool")?,
        args_digest: get(row, "args_digest")?,
        cache_hit: get(row, "cache_hit")?,
        attempt: get_u32(row, "attempt")?,
        status: get(row, "status")?,
        error: get(row, "error")?,
        latency_us: get_u64(row, "latency_us")?,
        cost: Micros(get(row, "cost")?),
        at_ms: get(row, "at_ms")?,
        trace_id: get(row, "trace_id")?,
        span_id: get(row, "span_id")?,
    })
}

pub(super) fn approval_record(row: &SqliteRow) -> Result<ApprovalRecord, PortError> {
    let job_id: Option<String> = get(row, "job_id")?;
    let detail: Option<String> = get(row, "detail")?;
    Ok(ApprovalRecord {
        id: get(row, "id")?,
        kind: get(row, "kind")?,
        job_id: job_id
            .map(|j| JobId::parse(&j).map_err(|e| corrupt("job id", e)))
            .transpose()?,
        tool: get(row, "tool")?,
        amount: Micros(get(row, "amount")?),
        reason: get(row, "reason")?,
        detail: detail
            .map(|d| serde_json::from_str(&d).map_err(|e| corrupt("approval detail", e)))
            .transpose()?,
        approved: get(row, "approved")?,
        decided_by: get(row, "decided_by")?,
        requested_ms: get(row, "requested_ms")?,
        decided_ms: get(row, "decided_ms")?,
        expires_ms: get(row, "expires_ms")?,
        expired: get(row, "expired")?,
        notified_ms: get(row, "notified_ms")?,
    })
}

pub(super) fn failed_slice(row: &SqliteRow) -> Result<FailedSlice, PortError> {
    let spec: SliceSpec = get_json(row, "spec")?;
    let subject = spec.kind.subject().to_owned();
    Ok(FailedSlice {
        kind: spec.kind.name().to_owned(),
        geo: spec.kind.geo().as_str().to_owned(),
        slice_id: spec.id,
        subject,
        error: SliceError {
            code: get::<Option<String>>(row, "error_code")?.unwrap_or_default(),
            message: get::<Option<String>>(row, "error_message")?.unwrap_or_default(),
        },
    })
}

pub(super) fn job_counts(row: &SqliteRow) -> Result<JobCounts, PortError> {
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

pub(super) fn tool_listing(row: &SqliteRow) -> Result<ToolListing, PortError> {
    let tools: String = get(row, "tools")?;
    Ok(ToolListing {
        server: get(row, "server")?,
        tools: serde_json::from_str(&tools).map_err(|e| corrupt("tool listing", e))?,
        listed_ms: get(row, "listed_ms")?,
    })
}
