//! What browser slices keep: a job's artifacts (files such as screenshots) and the
//! replay cache of browse steps.
//!
//! Names and keys go through [`text`] both when stored and when looked up, so one
//! with a NUL (which Postgres refuses in `TEXT`) finds what was stored under it.

use serde_json::Value;
use sqlx::postgres::{PgPool, PgRow};
use trawl_core::model::{JobId, SliceId, now_ms};
use trawl_core::ports::{Artifact, ArtifactInfo, PortError};

use super::rows::{get, get_json, json, text};
use crate::error::ResultExt;

pub(super) async fn put_artifact(pool: &PgPool, a: &Artifact) -> Result<(), PortError> {
    a.check_size()?;
    sqlx::query(
        "INSERT INTO artifacts (job_id, slice_id, name, content_type, data, created_ms) \
         VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (job_id, name) DO UPDATE SET slice_id = excluded.slice_id, \
         content_type = excluded.content_type, data = excluded.data, \
         created_ms = excluded.created_ms",
    )
    .bind(a.job_id.as_str())
    .bind(a.slice_id.as_ref().map(|s| text(s.as_str())))
    .bind(text(&a.name))
    .bind(text(&a.content_type))
    .bind(a.data.as_slice())
    .bind(a.at_ms)
    .execute(pool)
    .await
    .port()?;
    Ok(())
}

pub(super) async fn artifacts(pool: &PgPool, job: &JobId) -> Result<Vec<ArtifactInfo>, PortError> {
    // `octet_length` of an out-of-line value reads its TOAST header, not its bytes.
    let rows = sqlx::query(
        "SELECT slice_id, name, content_type, octet_length(data)::BIGINT AS size, created_ms \
         FROM artifacts WHERE job_id = $1 ORDER BY created_ms, name",
    )
    .bind(job.as_str())
    .fetch_all(pool)
    .await
    .port()?;
    rows.iter().map(|r| artifact_info(job, r)).collect()
}

pub(super) async fn artifact(
    pool: &PgPool,
    job: &JobId,
    name: &str,
) -> Result<Option<Artifact>, PortError> {
    let row = sqlx::query(
        "SELECT slice_id, name, content_type, data, created_ms \
         FROM artifacts WHERE job_id = $1 AND name = $2",
    )
    .bind(job.as_str())
    .bind(text(name))
    .fetch_optional(pool)
    .await
    .port()?;
    let Some(row) = row else {
        return Ok(None);
    };
    Ok(Some(Artifact {
        job_id: job.clone(),
        slice_id: get::<Option<String>>(&row, "slice_id")?.map(SliceId::from_stored),
        name: get(&row, "name")?,
        content_type: get(&row, "content_type")?,
        data: get(&row, "data")?,
        at_ms: get(&row, "created_ms")?,
    }))
}

fn artifact_info(job: &JobId, row: &PgRow) -> Result<ArtifactInfo, PortError> {
    let size: i64 = get(row, "size")?;
    Ok(ArtifactInfo {
        job_id: job.clone(),
        slice_id: get::<Option<String>>(row, "slice_id")?.map(SliceId::from_stored),
        name: get(row, "name")?,
        content_type: get(row, "content_type")?,
        size: u64::try_from(size)
            .map_err(|e| PortError::Corrupt(format!("stored artifact size: {e}")))?,
        at_ms: get(row, "created_ms")?,
    })
}

pub(super) async fn replay(pool: &PgPool, key: &str) -> Result<Option<Value>, PortError> {
    let row = sqlx::query("SELECT value::text AS value FROM browse_replays WHERE key = $1")
        .bind(text(key))
        .fetch_optional(pool)
        .await
        .port()?;
    row.as_ref().map(|r| get_json(r, "value")).transpose()
}

pub(super) async fn put_replay(pool: &PgPool, key: &str, value: &Value) -> Result<(), PortError> {
    sqlx::query(
        "INSERT INTO browse_replays (key, value, updated_ms) VALUES ($1, $2::jsonb, $3) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value, \
         updated_ms = excluded.updated_ms",
    )
    .bind(text(key))
    .bind(json(value)?)
    .bind(now_ms())
    .execute(pool)
    .await
    .port()?;
    Ok(())
}

pub(super) async fn drop_replay(pool: &PgPool, key: &str) -> Result<(), PortError> {
    sqlx::query("DELETE FROM browse_replays WHERE key = $1")
        .bind(text(key))
        .execute(pool)
        .await
        .port()?;
    Ok(())
}
