//! What the tool layer's guard keeps: sentence embeddings and model verdicts.

use sqlx::Connection;
use sqlx::sqlite::SqliteConnection;
use trawl_core::model::now_ms;
use trawl_core::ports::{GuardVerdict, PortError};

use super::rows::{get, insert_embeddings, to_json};
use crate::error::ResultExt;
use crate::vector;

pub(super) async fn embeddings(
    conn: &mut SqliteConnection,
    model: &str,
    keys: &[String],
) -> Result<Vec<(String, Vec<f32>)>, PortError> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    // The keys as one JSON array: one statement, however many.
    let rows = sqlx::query(
        "SELECT key, vector FROM embeddings \
         WHERE model = ? AND key IN (SELECT value FROM json_each(?))",
    )
    .bind(model)
    .bind(to_json(keys)?)
    .fetch_all(&mut *conn)
    .await
    .port()?;
    rows.iter()
        .map(|r| {
            let bytes: Vec<u8> = get(r, "vector")?;
            Ok((get(r, "key")?, vector::from_bytes(&bytes)?))
        })
        .collect()
}

pub(super) async fn save_embeddings(
    conn: &mut SqliteConnection,
    model: &str,
    rows: &[(String, Vec<f32>)],
) -> Result<(), PortError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.port()?;
    insert_embeddings(&mut tx, model, rows, now_ms()).await?;
    tx.commit().await.port()
}

pub(super) async fn guard_verdict(
    conn: &mut SqliteConnection,
    model: &str,
    hash: &str,
) -> Result<Option<GuardVerdict>, PortError> {
    let row = sqlx::query(
        "SELECT verdict, reason, decided_ms FROM guard_verdicts WHERE model = ? AND hash = ?",
    )
    .bind(model)
    .bind(hash)
    .fetch_optional(&mut *conn)
    .await
    .port()?;
    row.map(|r| {
        Ok(GuardVerdict {
            model: model.to_owned(),
            hash: hash.to_owned(),
            verdict: get(&r, "verdict")?,
            reason: get(&r, "reason")?,
            decided_ms: get(&r, "decided_ms")?,
        })
    })
    .transpose()
}

pub(super) async fn save_guard_verdict(
    conn: &mut SqliteConnection,
    v: &GuardVerdict,
) -> Result<(), PortError> {
    sqlx::query(
        "INSERT INTO guard_verdicts (model, hash, verdict, reason, decided_ms) \
         VALUES (?, ?, ?, ?, ?) \
         ON CONFLICT (model, hash) DO UPDATE SET verdict = excluded.verdict, \
         reason = excluded.reason, decided_ms = excluded.decided_ms",
    )
    .bind(&v.model)
    .bind(&v.hash)
    .bind(&v.verdict)
    .bind(&v.reason)
    .bind(v.decided_ms)
    .execute(&mut *conn)
    .await
    .port()?;
    Ok(())
}
