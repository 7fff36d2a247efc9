//! What browser slices keep: a job's artifacts (files such as screenshots) and the
//! replay cache of browse steps.

use serde_json::Value;
use sqlx::sqlite::{SqliteConnection, SqliteRow};
use trawl_core::model::{JobId, SliceId, now_ms};
use trawl_core::ports::{Artifact, ArtifactInfo, PortError};

use super::rows::{get, get_json, to_json};
use crate::error::ResultExt;

/// Stores `a`, replacing the job's artifact of the same name; its size is checked
/// by the caller.
pub(super) async fn put_artifact(
    conn: &mut SqliteConnection,
    a: &Artifact,
) -> Result<(), PortError> {
    sqlx::query(
        "INSERT INTO artifacts (job_id, slice_id, name, content_type, data, created_ms) \
         VALUES (?, ?, ?, ?, ?, ?) \
         ON CONFLICT (job_id, name) DO UPDATE SET slice_id = excluded.slice_id, \
         content_type = excluded.content_type, data = excluded.data, \
         created_ms = excluded.created_ms",
    )
    .bind(a.job_id.as_str())
    .bind(a.slice_id.as_ref().map(SliceId::as_str))
    .bind(a.name.as_str())
    .bind(a.content_type.as_str())
    .bind(a.data.as_slice())
    .bind(a.at_ms)
    .execute(&mut *conn)
    .await
    .port()?;
    Ok(())
}

pub(super) async fn artifacts(
    conn: &mut SqliteConnection,
    job: &JobId,
) -> Result<Vec<ArtifactInfo>, PortError> {
    // `length` of a blob is read from the record header: the bytes stay on disk.
    let rows = sqlx::query(
        "SELECT slice_id, name, content_type, length(data) AS size, created_ms \
         FROM artifacts WHERE job_id = ? ORDER BY created_ms, name",
    )
    .bind(job.as_str())
    .fetch_all(&mut *conn)
    .await
    .port()?;
    rows.iter().map(|r| artifact_info(job, r)).collect()
}

pub(super) async fn artifact(
    conn: &mut SqliteConnection,
    job: &JobId,
    name: &str,
) -> Result<Option<Artifact>, PortError> {
    let row = sqlx::query(
        "SELECT slice_id, name, content_type, data, created_ms \
         FROM artifacts WHERE job_id = ? AND name = ?",
    )
    .bind(job.as_str())
    .bind(name)
    .fetch_optional(&mut *conn)
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

fn artifact_info(job: &JobId, row: &SqliteRow) -> Result<ArtifactInfo, PortError> {
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

pub(super) async fn replay(
    conn: &mut SqliteConnection,
    key: &str,
) -> Result<Option<Value>, PortError> {
    let row = sqlx::query("SELECT value FROM browse_replays WHERE key = ?")
        .bind(key)
        .fetch_optional(&mut *conn)
        .await
        .port()?;
    row.as_ref().map(|r| get_json(r, "value")).transpose()
}

pub(super) async fn put_replay(
    conn: &mut SqliteConnection,
    key: &str,
    value: &Value,
) -> Result<(), PortError> {
    sqlx::query(
        "INSERT INTO browse_replays (key, value, updated_ms) VALUES (?, ?, ?) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value, \
         updated_ms = excluded.updated_ms",
    )
    .bind(key)
    .bind(to_json(value)?)
    .bind(now_ms())
    .execute(&mut *conn)
    .await
    .port()?;
    Ok(())
}

pub(super) async fn drop_replay(conn: &mut SqliteConnection, key: &str) -> Result<(), PortError> {
    sqlx::query("DELETE FROM browse_replays WHERE key = ?")
        .bind(key)
        .execute(&mut *conn)
        .await
        .port()?;
    Ok(())
}
