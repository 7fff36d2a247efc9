//! Decoding stored rows, once for both adapters.
//!
//! A decoder reads columns through [`Columns`], which SQLite's and Postgres's
//! rows both implement, so each record type has one decoder whatever the
//! database. Columns are read by name; integers are 64-bit in both schemas, and
//! documents are text (Postgres selects them as `col::text AS col`).

use serde_json::Value;
use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use trawl_core::cost::Micros;
use trawl_core::geo::Geo;
use trawl_core::model::{
    AuditRecord, CostEntry, Item, ItemKind, JobCounts, JobId, JobStatus, Pool, Progress, Rejection,
    SliceError, SliceId, SliceSpec, TraceStep, Violation,
};
use trawl_core::ports::{
    ApprovalRecord, FailedSlice, Idempotency, JobOwner, JobRecord, PinStatus, PortError,
    ToolListing, ToolPin,
};
use trawl_core::tenant::{Usage, UsageDay};
use trawl_core::workers::WorkerInfo;

use crate::error::ResultExt;

/// A stored row, read column by column.
pub(crate) trait Columns {
    fn text(&self, col: &str) -> Result<String, PortError>;
    fn opt_text(&self, col: &str) -> Result<Option<String>, PortError>;
    fn int(&self, col: &str) -> Result<i64, PortError>;
    fn opt_int(&self, col: &str) -> Result<Option<i64>, PortError>;
    fn flag(&self, col: &str) -> Result<bool, PortError>;
    fn opt_flag(&self, col: &str) -> Result<Option<bool>, PortError>;
}

/// [`Columns`] for a sqlx row type, through its `try_get`.
macro_rules! columns {
    ($row:ty) => {
        impl Columns for $row {
            fn text(&self, col: &str) -> Result<String, PortError> {
                self.try_get(col).port()
            }
            fn opt_text(&self, col: &str) -> Result<Option<String>, PortError> {
                self.try_get(col).port()
            }
            fn int(&self, col: &str) -> Result<i64, PortError> {
                self.try_get(col).port()
            }
            fn opt_int(&self, col: &str) -> Result<Option<i64>, PortError> {
                self.try_get(col).port()
            }
            fn flag(&self, col: &str) -> Result<bool, PortError> {
                self.try_get(col).port()
            }
            fn opt_flag(&self, col: &str) -> Result<Option<bool>, PortError> {
                self.try_get(col).port()
            }
        }
    };
}

columns!(SqliteRow);
columns!(PgRow);

fn corrupt(what: &str, e: impl std::fmt::Display) -> PortError {
    PortError::Corrupt(format!("stored {what}: {e}"))
}

fn u32_of(row: &impl Columns, col: &str) -> Result<u32, PortError> {
    u32::try_from(row.int(col)?).map_err(|e| corrupt(col, e))
}

fn u64_of(row: &impl Columns, col: &str) -> Result<u64, PortError> {
    u64::try_from(row.int(col)?).map_err(|e| corrupt(col, e))
}

fn geo_of(row: &impl Columns) -> Result<Geo, PortError> {
    Geo::parse(&row.text("geo")?).map_err(|e| corrupt("geo", e))
}

pub(crate) fn job_id_of(s: &str) -> Result<JobId, PortError> {
    JobId::parse(s).map_err(|e| corrupt("job id", e))
}

/// A document column.
pub(crate) fn json_of<T: serde::de::DeserializeOwned>(
    row: &impl Columns,
    col: &str,
) -> Result<T, PortError> {
    serde_json::from_str(&row.text(col)?).map_err(|e| corrupt(col, e))
}

/// A document column that may be null.
fn opt_json_of(row: &impl Columns, col: &str) -> Result<Option<Value>, PortError> {
    row.opt_text(col)?
        .map(|s| serde_json::from_str(&s).map_err(|e| corrupt(col, e)))
        .transpose()
}

pub(crate) fn job_record(row: &impl Columns) -> Result<JobRecord, PortError> {
    let status = row.text("status")?;
    Ok(JobRecord {
        id: job_id_of(&row.text("id")?)?,
        name: row.text("name")?,
        spec: json_of(row, "spec")?,
        status: JobStatus::parse(&status)
            .ok_or_else(|| corrupt("job status", format!("\"{status}\" is unknown")))?,
        reason: row.opt_text("reason")?,
        estimate: Micros(row.int("estimate")?),
        created_ms: row.int("created_ms")?,
        idempotency: match row.opt_text("idempotency_key")? {
            Some(key) => Some(Idempotency {
                key,
                request_digest: row.opt_text("request_digest")?.unwrap_or_default(),
            }),
            None => None,
        },
        traceparent: row.opt_text("traceparent")?,
        retention_ms: row.opt_int("retention_ms")?,
        slices_max: u64::try_from(row.int("slices_max")?).unwrap_or(0),
        approve_above: row.opt_int("approve_above")?.map(Micros),
        owner: match row.opt_text("owner")? {
            Some(caller) => Some(JobOwner {
                caller,
                client: row.opt_text("owner_client")?,
                tenant: row.opt_text("tenant")?,
            }),
            None => None,
        },
    })
}

pub(crate) fn item(row: &impl Columns) -> Result<Item, PortError> {
    let kind = row.text("kind")?;
    Ok(Item {
        slice_id: SliceId::from_stored(row.text("slice_id")?),
        seq: u32_of(row, "seq")?,
        kind: ItemKind::parse(&kind)
            .ok_or_else(|| corrupt("item kind", format!("\"{kind}\" is unknown")))?,
        url: row.text("url")?,
        geo: geo_of(row)?,
        data: json_of(row, "data")?,
    })
}

pub(crate) fn rejection(row: &impl Columns) -> Result<Rejection, PortError> {
    Ok(Rejection {
        slice_id: SliceId::from_stored(row.text("slice_id")?),
        seq: u32_of(row, "seq")?,
        url: row.text("url")?,
        geo: geo_of(row)?,
        data: json_of(row, "data")?,
        errors: json_of::<Vec<Violation>>(row, "errors")?,
    })
}

pub(crate) fn trace_step(row: &impl Columns) -> Result<TraceStep, PortError> {
    Ok(TraceStep {
        slice_id: SliceId::from_stored(row.text("slice_id")?),
        seq: u32_of(row, "seq")?,
        tool: row.text("tool")?,
        args_digest: row.text("args_digest")?,
        cache_hit: row.flag("cache_hit")?,
        attempt: u32_of(row, "attempt")?,
        status: row.text("status")?,
        error: row.opt_text("error")?,
        latency_us: u64_of(row, "latency_us")?,
        cost: Micros(row.int("cost")?),
        at_ms: row.int("at_ms")?,
        trace_id: row.opt_text("trace_id")?,
        span_id: row.opt_text("span_id")?,
    })
}

pub(crate) fn cost_entry(row: &impl Columns) -> Result<CostEntry, PortError> {
    Ok(CostEntry {
        slice_id: SliceId::from_stored(row.text("slice_id")?),
        attempt: row.text("attempt")?,
        seq: u32_of(row, "seq")?,
        product: row.text("product")?,
        amount: Micros(row.int("amount")?),
    })
}

/// A slice's saved progress (`Store::progress`) from its trace steps, cost
/// entries and audit rows, each in seq order, and its state; `None` when there
/// is nothing.
pub(crate) fn progress<R: Columns>(
    trace: &[R],
    costs: &[R],
    audit: &[R],
    state: Option<String>,
) -> Result<Option<Progress>, PortError> {
    let progress = Progress {
        trace: trace.iter().map(trace_step).collect::<Result<_, _>>()?,
        costs: costs.iter().map(cost_entry).collect::<Result<_, _>>()?,
        audit: audit
            .iter()
            .map(|r| audit_record(r).map(|(_, a)| a))
            .collect::<Result<_, _>>()?,
        state: state
            .map(|s| serde_json::from_str(&s).map_err(|e| corrupt("slice progress", e)))
            .transpose()?,
    };
    Ok((!progress.is_empty()).then_some(progress))
}

pub(crate) fn approval_record(row: &impl Columns) -> Result<ApprovalRecord, PortError> {
    Ok(ApprovalRecord {
        id: row.int("id")?,
        kind: row.text("kind")?,
        job_id: row.opt_text("job_id")?.map(|j| job_id_of(&j)).transpose()?,
        tool: row.opt_text("tool")?,
        amount: Micros(row.int("amount")?),
        reason: row.text("reason")?,
        detail: opt_json_of(row, "detail")?,
        approved: row.opt_flag("approved")?,
        decided_by: row.opt_text("decided_by")?,
        requested_ms: row.int("requested_ms")?,
        decided_ms: row.opt_int("decided_ms")?,
        expires_ms: row.opt_int("expires_ms")?,
        expired: row.flag("expired")?,
        notified_ms: row.opt_int("notified_ms")?,
    })
}

pub(crate) fn failed_slice(row: &impl Columns) -> Result<FailedSlice, PortError> {
    let spec: SliceSpec = json_of(row, "spec")?;
    let subject = spec.kind.subject().to_owned();
    Ok(FailedSlice {
        kind: spec.kind.name().to_owned(),
        geo: spec.kind.geo().as_str().to_owned(),
        slice_id: spec.id,
        subject,
        error: SliceError {
            code: row.opt_text("error_code")?.unwrap_or_default(),
            message: row.opt_text("error_message")?.unwrap_or_default(),
        },
    })
}

pub(crate) fn job_counts(row: &impl Columns) -> Result<JobCounts, PortError> {
    Ok(JobCounts {
        slices_total: u64_of(row, "slices_total")?,
        slices_succeeded: u64_of(row, "slices_succeeded")?,
        slices_failed: u64_of(row, "slices_failed")?,
        items_valid: u64_of(row, "items_valid")?,
        items_rejected: u64_of(row, "items_rejected")?,
        upstream_calls: u64_of(row, "upstream_calls")?,
        cache_hits: u64_of(row, "cache_hits")?,
        cost: Micros(row.int("cost")?),
        budget_stops: u64_of(row, "budget_stops")?,
    })
}

/// A tenant's usage from its two queries: the unfinished jobs (`jobs`, `open`)
/// and one row per day (`day`, `jobs`, `slices`, `spent`, `committed`).
pub(crate) fn usage<R: Columns>(active: &R, days: &[R]) -> Result<Usage, PortError> {
    Ok(Usage {
        active_jobs: u64_of(active, "jobs")?,
        slices_in_flight: u64_of(active, "open")?,
        days: days
            .iter()
            .map(|d| {
                Ok(UsageDay {
                    day_ms: d.int("day")?,
                    jobs: u64_of(d, "jobs")?,
                    slices: u64_of(d, "slices")?,
                    spent: Micros(d.int("spent")?),
                    committed: Micros(d.int("committed")?),
                })
            })
            .collect::<Result<_, PortError>>()?,
    })
}

pub(crate) fn tool_listing(row: &impl Columns) -> Result<ToolListing, PortError> {
    Ok(ToolListing {
        server: row.text("server")?,
        tools: serde_json::from_str(&row.text("tools")?).map_err(|e| corrupt("tool listing", e))?,
        listed_ms: row.int("listed_ms")?,
    })
}

pub(crate) fn tool_pin(row: &impl Columns) -> Result<ToolPin, PortError> {
    let status = row.text("status")?;
    Ok(ToolPin {
        tool: row.text("tool")?,
        server: row.text("server")?,
        status: PinStatus::parse(&status).ok_or_else(|| corrupt("pin status", &status))?,
        hash: row.opt_text("hash")?,
        definition: opt_json_of(row, "definition")?,
        pending_hash: row.opt_text("pending_hash")?,
        pending_definition: opt_json_of(row, "pending_definition")?,
        approval_id: row.opt_int("approval_id")?,
        pinned_ms: row.int("pinned_ms")?,
        approved_by: row.opt_text("approved_by")?,
    })
}

pub(crate) fn audit_record(row: &impl Columns) -> Result<(i64, AuditRecord), PortError> {
    Ok((
        row.int("id")?,
        AuditRecord {
            job_id: row.opt_text("job_id")?.map(|j| job_id_of(&j)).transpose()?,
            slice_id: row.opt_text("slice_id")?.map(SliceId::from_stored),
            seq: u32_of(row, "seq")?,
            tool: row.text("tool")?,
            args_digest: row.text("args_digest")?,
            decision: row.text("decision")?,
            reason: row.text("reason")?,
            caller: row.text("caller")?,
            latency_us: u64_of(row, "latency_us")?,
            result_bytes: u64_of(row, "result_bytes")?,
            error: row.opt_text("error")?,
            at_ms: row.int("at_ms")?,
        },
    ))
}

pub(crate) fn worker_info(row: &impl Columns) -> Result<WorkerInfo, PortError> {
    let pool = row.text("pool")?;
    Ok(WorkerInfo {
        id: row.text("id")?,
        pool: Pool::parse(&pool).map_err(|e| corrupt("pool", e))?,
        capabilities: json_of(row, "capabilities")?,
        concurrency: u32_of(row, "concurrency")?,
        started_ms: row.int("started_ms")?,
        heartbeat_ms: row.int("heartbeat_ms")?,
    })
}

/// The capabilities column of a report.
pub(crate) fn capabilities_json(w: &WorkerInfo) -> Result<String, PortError> {
    serde_json::to_string(&w.capabilities).map_err(|e| PortError::Corrupt(e.to_string()))
}
