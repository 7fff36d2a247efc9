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
use trawl_core::model::{JobId, SliceId, SliceSpec};
use trawl_core::ports::PortError;

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

/// Inserts pending slices of a job, noted as published at `published_ms` if given,
/// and adds them to the job's `slices_total`; ids the job already has are skipped.
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
        let n: i64 = sqlx::query_scalar(
            "WITH new AS ( \
                 INSERT INTO slices (job_id, slice_id, parent_id, kind, spec, created_ms, \
                     published_ms) \
                 SELECT $1, t.slice_id, t.parent_id, t.kind, t.spec::jsonb, $2, $7 \
                 FROM UNNEST($3::text[], $4::text[], $5::text[], $6::text[]) \
                     AS t (slice_id, parent_id, kind, spec) \
                 ON CONFLICT DO NOTHING RETURNING 1 \
             ), n AS (SELECT COUNT(*) AS n FROM new), bump AS ( \
                 INSERT INTO job_counters AS c (job_id, stripe, slices_total) \
                 SELECT $1, 0, n FROM n WHERE n > 0 \
                 ON CONFLICT (job_id, stripe) \
                 DO UPDATE SET slices_total = c.slices_total + EXCLUDED.slices_total \
             ) SELECT n FROM n",
        )
        .bind(job.as_str())
        .bind(now)
        .bind(&columns.ids)
        .bind(&columns.parents)
        .bind(&columns.kinds)
        .bind(&columns.specs)
        .bind(published_ms)
        .fetch_one(&mut *conn)
        .await
        .port()?;
        inserted += u64::try_from(n).unwrap_or(0);
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

/// A document column, selected as `col::text AS col`.
pub(super) fn get_json<T: serde::de::DeserializeOwned>(
    row: &PgRow,
    col: &str,
) -> Result<T, PortError> {
    let s: String = get(row, col)?;
    serde_json::from_str(&s).map_err(|e| corrupt(col, e))
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
