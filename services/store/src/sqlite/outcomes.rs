//! `record_outcome` with group commit.
//!
//! Workers finish slices concurrently, and with one connection each outcome would
//! wait for the one before it to commit. Instead every call queues its outcome and
//! then waits for the connection; whoever gets it takes everything queued so far and
//! writes it in one transaction: one claim per slice, one multi-row insert per table
//! for the whole batch, one commit. A lone caller gets a batch of one.
//!
//! The batch is written by a spawned task that owns the connection until it has
//! answered every caller, so cancelling one caller (dropping its future) cannot leave
//! the others with a half-written batch or without an answer. A caller cancelled
//! before its outcome is taken is left out (its slice stays pending and comes again);
//! one cancelled during the write is written all the same. An SQL error
//! rolls the batch back and its outcomes are written again one per transaction, so
//! one bad outcome fails only its own call.

use std::collections::HashSet;
use std::pin::pin;
use std::sync::{Arc, PoisonError};

use sqlx::Connection;
use sqlx::sqlite::SqliteConnection;
use tokio::sync::{Mutex, OwnedMutexGuard, oneshot};
use trawl_core::model::{CostEntry, JobId, Progress, SliceId, SliceOutcome, SliceSpec, now_ms};
use trawl_core::ports::{PortError, Recorded};

use super::rows::{
    Owned, insert_audit, insert_costs, insert_items, insert_new_slices, insert_rejections,
    insert_trace_steps,
};
use crate::error::ResultExt;

/// An outcome waiting to be written, and where its answer goes.
pub(super) struct Pending {
    job: JobId,
    slice: SliceId,
    outcome: SliceOutcome,
    done: oneshot::Sender<Result<Recorded, PortError>>,
}

/// Outcomes queued for the next writer.
pub(super) type Queue = std::sync::Mutex<Vec<Pending>>;

/// Queues an outcome and returns once it is written (by this call or another's).
pub(super) async fn record(
    conn: &Arc<Mutex<Option<SqliteConnection>>>,
    queue: &Queue,
    job: &JobId,
    slice: &SliceId,
    outcome: &SliceOutcome,
) -> Result<Recorded, PortError> {
    let (done, answer) = oneshot::channel();
    queue
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Pending {
            job: job.clone(),
            slice: slice.clone(),
            outcome: outcome.clone(),
            done,
        });
    let mut answer = pin!(answer);
    tokio::select! {
        biased;
        // Taken along by another caller's batch.
        done = &mut answer => return answered(done),
        guard = Arc::clone(conn).lock_owned() => {
            let batch = std::mem::take(&mut *queue.lock().unwrap_or_else(PoisonError::into_inner));
            // Empty: the batch that took this outcome has just answered.
            if !batch.is_empty() {
                tokio::spawn(write(guard, batch));
            }
        }
    }
    answered(answer.await)
}

fn answered(
    done: Result<Result<Recorded, PortError>, oneshot::error::RecvError>,
) -> Result<Recorded, PortError> {
    done.unwrap_or_else(|_| {
        Err(PortError::Unavailable(
            "the store's writer stopped before answering".into(),
        ))
    })
}

/// Writes a batch, answers every caller, then lets the connection go.
async fn write(mut guard: OwnedMutexGuard<Option<SqliteConnection>>, mut batch: Vec<Pending>) {
    // A caller cancelled while it waited gets no write: its slice stays pending and is
    // delivered again, and nobody is left holding children that were never published.
    batch.retain(|p| !p.done.is_closed());
    if batch.is_empty() {
        return;
    }
    let Some(conn) = guard.as_mut() else {
        for p in batch {
            let _ = p
                .done
                .send(Err(PortError::Unavailable("the store is closed".into())));
        }
        return;
    };
    let answers = match write_batch(conn, &batch).await {
        Ok(answers) => answers,
        Err(e) if batch.len() == 1 => vec![Err(e)],
        Err(e) => {
            tracing::warn!(error = %e, outcomes = batch.len(), "writing outcomes one by one");
            let mut answers = Vec::with_capacity(batch.len());
            for p in &batch {
                let one = write_batch(conn, std::slice::from_ref(p)).await;
                // A batch of one has one answer.
                answers.push(one.and_then(|mut a| {
                    a.pop()
                        .unwrap_or_else(|| Err(PortError::Unavailable("no answer".into())))
                }));
            }
            answers
        }
    };
    for (p, answer) in batch.into_iter().zip(answers) {
        // A caller that is gone was cancelled during the write.
        let _ = p.done.send(answer);
    }
    drop(guard);
}

/// Writes every outcome of `batch` whose slice is still pending, in one transaction.
/// The outer error is an SQL error (nothing was written); the inner ones are answers
/// for single outcomes (an unknown slice).
async fn write_batch(
    conn: &mut SqliteConnection,
    batch: &[Pending],
) -> Result<Vec<Result<Recorded, PortError>>, PortError> {
    let now = now_ms();
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.port()?;

    // Claim each slice: only a pending one moves, so a redelivery after the first
    // write, in this batch or an earlier one, writes nothing.
    let mut answers = Vec::with_capacity(batch.len());
    let mut claimed: Vec<&Pending> = Vec::with_capacity(batch.len());
    // Outcomes of slices that ended already: only their costs are written.
    let mut late: Vec<&Pending> = Vec::new();
    for p in batch {
        let error = p.outcome.error.as_ref();
        let moved = sqlx::query(
            "UPDATE slices SET status = ?, error_code = ?, error_message = ?, finished_ms = ? \
             WHERE job_id = ? AND slice_id = ? AND status = 'pending'",
        )
        .bind(p.outcome.status().as_str())
        .bind(error.map(|e| e.code.as_str()))
        .bind(error.map(|e| e.message.as_str()))
        .bind(now)
        .bind(p.job.as_str())
        .bind(p.slice.as_str())
        .execute(&mut *tx)
        .await
        .port()?
        .rows_affected();
        if moved == 1 {
            claimed.push(p);
            answers.push(Ok(Recorded {
                written: true,
                new_children: Vec::new(),
            }));
            continue;
        }
        let exists = sqlx::query("SELECT 1 FROM slices WHERE job_id = ? AND slice_id = ?")
            .bind(p.job.as_str())
            .bind(p.slice.as_str())
            .fetch_optional(&mut *tx)
            .await
            .port()?;
        answers.push(match exists {
            Some(_) => {
                tracing::debug!(job_id = %p.job, slice_id = %p.slice, "slice already terminal; outcome not written");
                late.push(p);
                Ok(Recorded::default())
            }
            None => Err(PortError::NotFound(format!(
                "slice {} of job {}",
                p.slice, p.job
            ))),
        });
    }

    // Every record is stored under the slice it was recorded for: the outcome is that
    // slice's, whatever slice id its records name.
    for p in &claimed {
        let o = &p.outcome;
        let strays = o.items.iter().filter(|r| r.slice_id != p.slice).count()
            + o.rejections
                .iter()
                .filter(|r| r.slice_id != p.slice)
                .count()
            + o.trace.iter().filter(|r| r.slice_id != p.slice).count()
            + o.costs.iter().filter(|r| r.slice_id != p.slice).count();
        if strays > 0 {
            tracing::warn!(job_id = %p.job, slice_id = %p.slice, strays,
                "outcome records name another slice; stored under this one");
        }
    }
    fn rows<'a, T>(
        claimed: &[&'a Pending],
        of: impl Fn(&'a SliceOutcome) -> &'a [T],
    ) -> Vec<Owned<'a, T>> {
        claimed
            .iter()
            .flat_map(|p| of(&p.outcome).iter().map(move |r| (&p.job, &p.slice, r)))
            .collect()
    }
    insert_items(&mut tx, &rows(&claimed, |o| &o.items)).await?;
    insert_rejections(&mut tx, &rows(&claimed, |o| &o.rejections)).await?;
    insert_trace_steps(&mut tx, &rows(&claimed, |o| &o.trace)).await?;
    insert_costs(&mut tx, &rows(&claimed, |o| &o.costs)).await?;
    for p in late {
        let costs: Vec<Owned<'_, _>> = p
            .outcome
            .costs
            .iter()
            .map(|c| (&p.job, &p.slice, c))
            .collect();
        let calls = p.outcome.trace.iter().filter(|t| !t.cache_hit).count() as u64;
        if insert_costs(&mut tx, &costs).await? > 0 {
            count_calls(&mut tx, &p.job, calls).await?;
        }
    }
    let audit: Vec<_> = rows(&claimed, |o| &o.audit)
        .into_iter()
        .map(|(job, slice, a)| (Some(job), Some(slice), a))
        .collect();
    insert_audit(&mut tx, &audit).await?;

    let children: Vec<(&JobId, &SliceSpec, i64)> = claimed
        .iter()
        .flat_map(|p| p.outcome.children.iter().map(move |c| (&p.job, c, now)))
        .collect();
    let mut inserted = if children.is_empty() {
        HashSet::new()
    } else {
        insert_new_slices(&mut tx, &children).await?
    };
    tx.commit().await.port()?;

    // A new child belongs to the first outcome in the batch that lists it, as if the
    // outcomes had been written one after another.
    for (p, answer) in batch.iter().zip(answers.iter_mut()) {
        let Ok(recorded) = answer else { continue };
        if !recorded.written {
            continue;
        }
        recorded.new_children = p
            .outcome
            .children
            .iter()
            .filter(|c| inserted.remove(&(p.job.as_str().to_owned(), c.id.as_str().to_owned())))
            .cloned()
            .collect();
    }
    Ok(answers)
}

/// Adds upstream calls of an attempt whose trace is not stored (its outcome was
/// not the slice's) to the job's count.
async fn count_calls(
    conn: &mut SqliteConnection,
    job: &JobId,
    calls: u64,
) -> Result<(), PortError> {
    if calls == 0 {
        return Ok(());
    }
    sqlx::query("UPDATE job_counts SET upstream_calls = upstream_calls + ? WHERE job_id = ?")
        .bind(i64::try_from(calls).unwrap_or(i64::MAX))
        .bind(job.as_str())
        .execute(&mut *conn)
        .await
        .port()?;
    Ok(())
}

/// `Store::record_costs`: the rows of one attempt, in one transaction.
pub(super) async fn record_costs(
    conn: &mut SqliteConnection,
    job: &JobId,
    slice: &SliceId,
    costs: &[CostEntry],
    calls: u64,
) -> Result<u64, PortError> {
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.port()?;
    let known = sqlx::query("SELECT 1 FROM slices WHERE job_id = ? AND slice_id = ?")
        .bind(job.as_str())
        .bind(slice.as_str())
        .fetch_optional(&mut *tx)
        .await
        .port()?;
    if known.is_none() {
        return Err(PortError::NotFound(format!("slice {slice} of job {job}")));
    }
    let rows: Vec<Owned<'_, _>> = costs.iter().map(|c| (job, slice, c)).collect();
    let new = insert_costs(&mut tx, &rows).await?;
    if new > 0 {
        count_calls(&mut tx, job, calls).await?;
    }
    tx.commit().await.port()?;
    Ok(new)
}

/// `Store::save_progress`: the rows and the state, in one transaction, only while
/// the slice is pending. Rows already stored under a seq are kept as they are.
pub(super) async fn save_progress(
    conn: &mut SqliteConnection,
    job: &JobId,
    slice: &SliceId,
    progress: &Progress,
) -> Result<(), PortError> {
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.port()?;
    let live = sqlx::query(
        "SELECT 1 FROM slices WHERE job_id = ? AND slice_id = ? AND status = 'pending'",
    )
    .bind(job.as_str())
    .bind(slice.as_str())
    .fetch_optional(&mut *tx)
    .await
    .port()?;
    if live.is_none() {
        return Ok(());
    }
    let trace: Vec<Owned<'_, _>> = progress.trace.iter().map(|t| (job, slice, t)).collect();
    insert_trace_steps(&mut tx, &trace).await?;
    let costs: Vec<Owned<'_, _>> = progress.costs.iter().map(|c| (job, slice, c)).collect();
    insert_costs(&mut tx, &costs).await?;
    let audit: Vec<_> = progress
        .audit
        .iter()
        .map(|a| (Some(job), Some(slice), a))
        .collect();
    insert_audit(&mut tx, &audit).await?;
    if let Some(state) = &progress.state {
        sqlx::query(
            "INSERT INTO slice_progress (job_id, slice_id, state, saved_ms) VALUES (?, ?, ?, ?) \
             ON CONFLICT (job_id, slice_id) DO UPDATE SET state = excluded.state, \
             saved_ms = excluded.saved_ms",
        )
        .bind(job.as_str())
        .bind(slice.as_str())
        .bind(state.to_string())
        .bind(now_ms())
        .execute(&mut *tx)
        .await
        .port()?;
    }
    tx.commit().await.port()
}

/// `Store::progress`: the slice's stored rows and last state.
pub(super) async fn progress(
    conn: &mut SqliteConnection,
    job: &JobId,
    slice: &SliceId,
) -> Result<Option<Progress>, PortError> {
    let (j, s) = (job.as_str(), slice.as_str());
    let trace = sqlx::query(
        "SELECT slice_id, seq, tool, args_digest, cache_hit, attempt, status, error, \
         latency_us, cost, at_ms, trace_id, span_id FROM trace_steps \
         WHERE job_id = ? AND slice_id = ? ORDER BY seq",
    )
    .bind(j)
    .bind(s)
    .fetch_all(&mut *conn)
    .await
    .port()?;
    let costs = sqlx::query(
        "SELECT slice_id, attempt, seq, product, amount FROM costs \
         WHERE job_id = ? AND slice_id = ? ORDER BY seq",
    )
    .bind(j)
    .bind(s)
    .fetch_all(&mut *conn)
    .await
    .port()?;
    let audit = sqlx::query(
        "SELECT id, job_id, slice_id, seq, tool, args_digest, decision, reason, caller, \
         latency_us, result_bytes, error, at_ms FROM tool_audit \
         WHERE job_id = ? AND slice_id = ? ORDER BY seq",
    )
    .bind(j)
    .bind(s)
    .fetch_all(&mut *conn)
    .await
    .port()?;
    let state: Option<String> =
        sqlx::query_scalar("SELECT state FROM slice_progress WHERE job_id = ? AND slice_id = ?")
            .bind(j)
            .bind(s)
            .fetch_optional(&mut *conn)
            .await
            .port()?;
    crate::decode::progress(&trace, &costs, &audit, state)
}
