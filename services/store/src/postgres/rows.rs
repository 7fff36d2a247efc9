//! Rows in and out: slices inserted as arrays, text made storable, and decoding
//! what was stored.
//!
//! Many rows go in one statement as one array per column, unpacked by `UNNEST`: the
//! statement text is the same whatever the row count, so it is prepared once per
//! connection. Documents travel as JSON text, cast to `jsonb` in SQL and back to
//! `text` when read, so the crate needs no sqlx JSON support and decodes them the
//! way the SQLite store does.

use std::borrow::Cow;

use serde_json::Value;
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{Postgres, Row};
use trawl_core::cost::Micros;
use trawl_core::geo::Geo;
use trawl_core::model::{
    AuditRecord, Item, ItemKind, JobCounts, JobId, JobStatus, Rejection, SliceError, SliceId,
    SliceSpec, TraceStep, Violation,
};
use trawl_core::ports::{
    ApprovalRecord, FailedSlice, Idempotency, JobOwner, JobRecord, PinStatus, PortError,
    ToolListing, ToolPin,
};

use crate::error::ResultExt;

/// Slices per `INSERT`: large enough that a plan of 100,000 slices is twenty
/// statements, small enough to keep one message to the server a few megabytes.
const SLICES_PER_STATEMENT: usize = 5_000;

/// `s` with any NUL replaced by U+FFFD: Postgres refuses NUL in text.
pub(super) fn text(s: &str) -> Cow<'_, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// A document as JSON text for a `jsonb` column, with any NUL in its strings (and
/// keys) replaced by U+FFFD: Postgres refuses `\u0000` in `jsonb`.
pub(super) fn json<T: serde::Serialize + ?Sized>(v: &T) -> Result<String, PortError> {
    let encoded =
        serde_json::to_string(v).map_err(|e| PortError::Corrupt(format!("cannot encode: {e}")))?;
    // serde_json writes a NUL as `\u0000`; anything else containing that text (an
    // escaped backslash before "u0000") is rare, and only costs a scrub that finds
    // nothing.
    if !encoded.contains("\\u0000") {
        return Ok(encoded);
    }
    let mut value: Value = serde_json::from_str(&encoded)
        .map_err(|e| PortError::Corrupt(format!("cannot encode: {e}")))?;
    scrub(&mut value);
    serde_json::to_string(&value).map_err(|e| PortError::Corrupt(format!("cannot encode: {e}")))
}

fn scrub(v: &mut Value) {
    match v {
        Value::String(s) => {
            if let Cow::Owned(clean) = text(s) {
                *s = clean;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(scrub),
        Value::Object(map) => {
            let entries = std::mem::take(map);
            for (key, mut value) in entries {
                scrub(&mut value);
                map.insert(text(&key).into_owned(), value);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

pub(super) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Inserts pending slices of a job, noted as published at `published_ms` if given;
/// ids the job already has are skipped.
pub(super) async fn insert_slices(
    conn: &mut PgConnection,
    job: &JobId,
    slices: &[SliceSpec],
    now: i64,
    published_ms: Option<i64>,
) -> Result<u64, PortError> {
    let mut inserted = 0;
    for chunk in slices.chunks(SLICES_PER_STATEMENT) {
        let columns = SliceColumns::of(chunk.iter())?;
        inserted += sqlx::query(
            "INSERT INTO slices (job_id, slice_id, parent_id, kind, spec, created_ms, \
                 published_ms) \
             SELECT $1, t.slice_id, t.parent_id, t.kind, t.spec::jsonb, $2, $7 \
             FROM UNNEST($3::text[], $4::text[], $5::text[], $6::text[]) \
                 AS t (slice_id, parent_id, kind, spec) \
             ON CONFLICT DO NOTHING",
        )
        .bind(job.as_str())
        .bind(now)
        .bind(&columns.ids)
        .bind(&columns.parents)
        .bind(&columns.kinds)
        .bind(&columns.specs)
        .bind(published_ms)
        .execute(&mut *conn)
        .await
        .port()?
        .rows_affected();
    }
    Ok(inserted)
}

/// Slices as one array per column.
#[derive(Default)]
pub(super) struct SliceColumns<'a> {
    pub ids: Vec<&'a str>,
    pub parents: Vec<Option<&'a str>>,
    pub kinds: Vec<&'static str>,
    pub specs: Vec<String>,
}

impl<'a> SliceColumns<'a> {
    pub fn of(slices: impl Iterator<Item = &'a SliceSpec>) -> Result<Self, PortError> {
        let mut c = SliceColumns::default();
        for s in slices {
            c.ids.push(s.id.as_str());
            c.parents.push(s.parent.as_ref().map(SliceId::as_str));
            c.kinds.push(s.kind.name());
            c.specs.push(json(s)?);
        }
        Ok(c)
    }
}

// ---------------------------------------------------------------------------
// Decoding

fn corrupt(what: &str, e: impl std::fmt::Display) -> PortError {
    PortError::Corrupt(format!("stored {what}: {e}"))
}

pub(super) fn get<'r, T>(row: &'r PgRow, col: &str) -> Result<T, PortError>
where
    T: sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
{
    row.try_get(col).port()
}

fn get_u32(row: &PgRow, col: &str) -> Result<u32, PortError> {
    let v: i64 = get(row, col)?;
    u32::try_from(v).map_err(|e| corrupt(col, e))
}

fn get_u64(row: &PgRow, col: &str) -> Result<u64, PortError> {
    let v: i64 = get(row, col)?;
    u64::try_from(v).map_err(|e| corrupt(col, e))
}

fn get_geo(row: &PgRow) -> Result<Geo, PortError> {
    let s: String = get(row, "geo")?;
    Geo::parse(&s).map_err(|e| corrupt("geo", e))
}

/// A document column, selected as `col::text AS col`.
pub(super) fn get_json<T: serde::de::DeserializeOwned>(
    row: &PgRow,
    col: &str,
) -> Result<T, PortError> {
    let s: String = get(row, col)?;
    serde_json::from_str(&s).map_err(|e| corrupt(col, e))
}

fn job_id(row: &PgRow, col: &str) -> Result<JobId, PortError> {
    let id: String = get(row, col)?;
    JobId::parse(&id).map_err(|e| corrupt("job id", e))
}

pub(super) fn job_record(row: &PgRow) -> Result<JobRecord, PortError> {
    let status: String = get(row, "status")?;
    Ok(JobRecord {
        id: job_id(row, "id")?,
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

pub(super) fn item(row: &PgRow) -> Result<Item, PortError> {
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

pub(super) fn rejection(row: &PgRow) -> Result<Rejection, PortError> {
    Ok(Rejection {
        slice_id: SliceId::from_stored(get(row, "slice_id")?),
        seq: get_u32(row, "seq")?,
        url: get(row, "url")?,
        geo: get_geo(row)?,
        data: get_json(row, "data")?,
        errors: get_json::<Vec<Violation>>(row, "errors")?,
    })
}

pub(super) fn trace_step(row: &PgRow) -> Result<TraceStep, PortError> {
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

pub(super) fn approval_record(row: &PgRow) -> Result<ApprovalRecord, PortError> {
    let job: Option<String> = get(row, "job_id")?;
    let detail: Option<String> = get(row, "detail")?;
    Ok(ApprovalRecord {
        id: get(row, "id")?,
        kind: get(row, "kind")?,
        job_id: job
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

pub(super) fn tool_pin(row: &PgRow) -> Result<ToolPin, PortError> {
    let status: String = get(row, "status")?;
    let doc = |col: &str| -> Result<Option<Value>, PortError> {
        let s: Option<String> = get(row, col)?;
        s.map(|s| serde_json::from_str(&s).map_err(|e| corrupt(col, e)))
            .transpose()
    };
    Ok(ToolPin {
        tool: get(row, "tool")?,
        server: get(row, "server")?,
        status: PinStatus::parse(&status).ok_or_else(|| corrupt("pin status", &status))?,
        hash: get(row, "hash")?,
        definition: doc("definition")?,
        pending_hash: get(row, "pending_hash")?,
        pending_definition: doc("pending_definition")?,
        approval_id: get(row, "approval_id")?,
        pinned_ms: get(row, "pinned_ms")?,
        approved_by: get(row, "approved_by")?,
    })
}

pub(super) fn audit_record(row: &PgRow) -> Result<(i64, AuditRecord), PortError> {
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

pub(super) fn failed_slice(row: &PgRow) -> Result<FailedSlice, PortError> {
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

pub(super) fn job_counts(row: &PgRow) -> Result<JobCounts, PortError> {
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

pub(super) fn tool_listing(row: &PgRow) -> Result<ToolListing, PortError> {
    let tools: String = get(row, "tools")?;
    Ok(ToolListing {
        server: get(row, "server")?,
        tools: serde_json::from_str(&tools).map_err(|e| corrupt("tool listing", e))?,
        listed_ms: get(row, "listed_ms")?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn nul_is_replaced_in_text_and_documents() {
        assert_eq!(text("plain"), Cow::Borrowed("plain"));
        assert_eq!(text("a\0b"), "a\u{FFFD}b");
        let doc = json!({"t\0": ["x\0y", {"k": "\0"}], "n": 1, "esc": "\\u0000"});
        let stored: Value = serde_json::from_str(&json(&doc).unwrap()).unwrap();
        assert_eq!(
            stored,
            json!({"t\u{FFFD}": ["x\u{FFFD}y", {"k": "\u{FFFD}"}], "n": 1, "esc": "\\u0000"})
        );
        let clean = json!({"a": "b"});
        assert_eq!(json(&clean).unwrap(), r#"{"a":"b"}"#);
    }
}
