//! What the tool layer's guard keeps: sentence embeddings and model verdicts.
//!
//! Models and keys go through [`text`] both when stored and when looked up, as
//! the browse replay keys do.

use sqlx::postgres::PgPool;
use trawl_core::model::now_ms;
use trawl_core::ports::{GuardVerdict, PortError};

use super::rows::{get, text};
use crate::error::ResultExt;
use crate::vector;

/// Vectors per insert statement: 2,000 vectors of 384 floats are 3 MB.
const ROWS_PER_STATEMENT: usize = 2_000;

pub(super) async fn embeddings(
    pool: &PgPool,
    model: &str,
    keys: &[String],
) -> Result<Vec<(String, Vec<f32>)>, PortError> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let keys: Vec<String> = keys.iter().map(|k| text(k).into_owned()).collect();
    let rows = sqlx::query(
        "SELECT key, vector FROM embeddings WHERE model = $1 AND key = ANY($2::text[])",
    )
    .bind(text(model))
    .bind(&keys)
    .fetch_all(pool)
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
    pool: &PgPool,
    model: &str,
    rows: &[(String, Vec<f32>)],
) -> Result<(), PortError> {
    let now = now_ms();
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let keys: Vec<String> = chunk.iter().map(|(k, _)| text(k).into_owned()).collect();
        let vectors: Vec<Vec<u8>> = chunk.iter().map(|(_, v)| vector::to_bytes(v)).collect();
        sqlx::query(
            "INSERT INTO embeddings (model, key, vector, created_ms) \
             SELECT $1, t.key, t.vector, $2 FROM UNNEST($3::text[], $4::bytea[]) AS t (key, vector) \
             ON CONFLICT DO NOTHING",
        )
        .bind(text(model))
        .bind(now)
        .bind(&keys)
        .bind(&vectors)
        .execute(pool)
        .await
        .port()?;
    }
    Ok(())
}

pub(super) async fn guard_verdict(
    pool: &PgPool,
    model: &str,
    hash: &str,
) -> Result<Option<GuardVerdict>, PortError> {
    let row = sqlx::query(
        "SELECT verdict, reason, decided_ms FROM guard_verdicts WHERE model = $1 AND hash = $2",
    )
    .bind(text(model))
    .bind(text(hash))
    .fetch_optional(pool)
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

pub(super) async fn save_guard_verdict(pool: &PgPool, v: &GuardVerdict) -> Result<(), PortError> {
    sqlx::query(
        "INSERT INTO guard_verdicts (model, hash, verdict, reason, decided_ms) \
         VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (model, hash) DO UPDATE SET verdict = EXCLUDED.verdict, \
         reason = EXCLUDED.reason, decided_ms = EXCLUDED.decided_ms",
    )
    .bind(text(&v.model))
    .bind(text(&v.hash))
    .bind(text(&v.verdict))
    .bind(text(&v.reason))
    .bind(v.decided_ms)
    .execute(pool)
    .await
    .port()?;
    Ok(())
}
