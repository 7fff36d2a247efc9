//! `record_outcome`, group-committed: outcomes that arrive within a few
//! milliseconds of each other are written together, in one statement (one
//! transaction, one round trip) per batch of up to [`BATCH`].
//!
//! Callers hand their outcome to [`Batcher`] and wait for their answer; a few
//! writer tasks ([`WRITERS`]) each take what is waiting, gather what arrives within
//! [`LINGER`], and write it. A statement's fixed cost (planning, seven subplans, the
//! commit's flush) is most of what Postgres spends on a small batch, so waiting a
//! little for a larger one halves Postgres's CPU per slice. A write goes on when
//! its caller is dropped (a worker stopping), so no outcome is half-taken.
//!
//! The statement is a chain of data-modifying CTEs over one array per column:
//!
//! 1. `locked` locks the batch's slices that are still `pending`, in (job, slice)
//!    order, so two batches claiming overlapping slices wait for each other in one
//!    order (never a deadlock); a slice another transaction ended meanwhile drops
//!    out when the lock is granted. `claim` then writes their status, error and
//!    tallies.
//! 2. items, rejections, trace steps and audit rows are inserted only for claimed
//!    slices, `ON CONFLICT DO NOTHING` on their (job, slice, seq) keys. Cost rows
//!    are inserted for every slice that exists, claimed or not, on their (job,
//!    slice, attempt, seq) keys: an attempt whose outcome comes second was billed
//!    all the same (an unclaimed outcome's upstream calls are counted when it
//!    brought new cost rows).
//! 3. children of claimed slices are inserted the same way, sorted by id,
//!    `RETURNING` the ids that were new.
//! 4. the claimed slices' tallies, the new cost rows and the new children are
//!    added to the jobs' counters (`job_counters`, the batch's stripe), in job
//!    order: a job's counted cost is the sum of its rows in the ledger.
//!
//! The answer says which slices were claimed, which exist at all (else
//! `NotFound`), and which children were new; each caller gets its own part. A batch
//! never holds one slice twice: a second outcome of a slice waits for the next one,
//! where it finds the slice terminal and writes nothing.
//!
//! Records are de-duplicated by seq (children by id) before they are sent, the
//! first of each kept, as the SQLite store's `ON CONFLICT DO NOTHING` keeps the
//! first: the tallies written on the slice row then equal the rows stored.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sqlx::postgres::PgPool;
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::time::Instant;
use trawl_core::model::{JobId, SliceId, SliceOutcome, SliceSpec, now_ms};
use trawl_core::ports::{PortError, Recorded};

use super::rows::{get, json, text, to_i64};
use crate::error::ResultExt;

/// Outcomes written by one statement, at most.
const BATCH: usize = 64;
/// Statements in flight at once, each on its own connection.
const WRITERS: usize = 2;
/// How long a writer gathers outcomes after the first of a batch: each statement
/// and commit costs Postgres about 0.4 ms of CPU whatever its size, against
/// 0.04 ms per outcome in it (`loadtest/outcome_bench.py`).
const LINGER: Duration = Duration::from_millis(5);
/// Counter rows per job (`job_counters`); each batch adds to one, in turn.
const STRIPES: usize = 16;

const RECORD: &str = "\
WITH input AS (
    SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
            $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[])
        AS t (job_id, slice_id, status, error_code, error_message, items_valid,
            items_rejected, upstream_calls, cache_hits, cost)
), locked AS (
    SELECT s.job_id, s.slice_id FROM slices s
    JOIN input i ON s.job_id = i.job_id AND s.slice_id = i.slice_id
    WHERE s.status = 'pending'
    ORDER BY s.job_id, s.slice_id
    FOR UPDATE OF s
), claim AS (
    UPDATE slices s SET status = i.status, error_code = i.error_code,
        error_message = i.error_message, finished_ms = $11, items_valid = i.items_valid,
        items_rejected = i.items_rejected, upstream_calls = i.upstream_calls,
        cache_hits = i.cache_hits, cost = i.cost
    FROM input i, locked l
    WHERE s.job_id = l.job_id AND s.slice_id = l.slice_id
        AND i.job_id = l.job_id AND i.slice_id = l.slice_id
    RETURNING s.job_id, s.slice_id, s.status, s.error_code, s.items_valid, s.items_rejected,
        s.upstream_calls, s.cache_hits, s.cost
), new_items AS (
    INSERT INTO items (job_id, slice_id, seq, kind, url, geo, data)
    SELECT t.job_id, t.slice_id, t.seq, t.kind, t.url, t.geo, t.data::jsonb
    FROM UNNEST($12::text[], $13::text[], $14::bigint[], $15::text[], $16::text[],
            $17::text[], $18::text[])
        AS t (job_id, slice_id, seq, kind, url, geo, data)
    WHERE (t.job_id, t.slice_id) IN (SELECT job_id, slice_id FROM claim)
    ON CONFLICT DO NOTHING
), new_rejections AS (
    INSERT INTO rejections (job_id, slice_id, seq, url, geo, data, errors)
    SELECT t.job_id, t.slice_id, t.seq, t.url, t.geo, t.data::jsonb, t.errors::jsonb
    FROM UNNEST($19::text[], $20::text[], $21::bigint[], $22::text[], $23::text[],
            $24::text[], $25::text[])
        AS t (job_id, slice_id, seq, url, geo, data, errors)
    WHERE (t.job_id, t.slice_id) IN (SELECT job_id, slice_id FROM claim)
    ON CONFLICT DO NOTHING
), new_trace AS (
    INSERT INTO trace_steps (job_id, slice_id, seq, tool, args_digest, cache_hit, attempt,
        status, error, latency_us, cost, at_ms, trace_id, span_id)
    SELECT t.job_id, t.slice_id, t.seq, t.tool, t.args_digest, t.cache_hit, t.attempt,
        t.status, t.error, t.latency_us, t.cost, t.at_ms, t.trace_id, t.span_id
    FROM UNNEST($26::text[], $27::text[], $28::bigint[], $29::text[], $30::text[],
            $31::bool[], $32::bigint[], $33::text[], $34::text[], $35::bigint[],
            $36::bigint[], $37::bigint[], $61::text[], $62::text[])
        AS t (job_id, slice_id, seq, tool, args_digest, cache_hit, attempt, status, error,
            latency_us, cost, at_ms, trace_id, span_id)
    WHERE (t.job_id, t.slice_id) IN (SELECT job_id, slice_id FROM claim)
    ON CONFLICT DO NOTHING
), known AS (
    SELECT s.job_id, s.slice_id FROM slices s
    JOIN input i ON s.job_id = i.job_id AND s.slice_id = i.slice_id
), new_costs AS (
    INSERT INTO costs (job_id, slice_id, attempt, seq, product, amount)
    SELECT t.job_id, t.slice_id, t.attempt, t.seq, t.product, t.amount
    FROM UNNEST($38::text[], $39::text[], $64::text[], $40::bigint[], $41::text[],
            $42::bigint[])
        AS t (job_id, slice_id, attempt, seq, product, amount)
    WHERE (t.job_id, t.slice_id) IN (SELECT job_id, slice_id FROM known)
    ON CONFLICT DO NOTHING
    RETURNING job_id, slice_id, amount
), new_audit AS (
    INSERT INTO tool_audit (job_id, slice_id, seq, tool, args_digest, decision, reason,
        caller, latency_us, result_bytes, error, at_ms)
    SELECT t.job_id, t.slice_id, t.seq, t.tool, t.args_digest, t.decision, t.reason,
        t.caller, t.latency_us, t.result_bytes, t.error, t.at_ms
    FROM UNNEST($49::text[], $50::text[], $51::bigint[], $52::text[], $53::text[],
            $54::text[], $55::text[], $56::text[], $57::bigint[], $58::bigint[],
            $59::text[], $60::bigint[])
        AS t (job_id, slice_id, seq, tool, args_digest, decision, reason, caller,
            latency_us, result_bytes, error, at_ms)
    WHERE (t.job_id, t.slice_id) IN (SELECT job_id, slice_id FROM claim)
    ON CONFLICT DO NOTHING
), new_children AS (
    INSERT INTO slices (job_id, slice_id, parent_id, kind, spec, created_ms)
    SELECT t.job_id, t.slice_id, t.parent_id, t.kind, t.spec::jsonb, $11
    FROM UNNEST($43::text[], $44::text[], $45::text[], $46::text[], $47::text[],
            $48::text[])
        AS t (job_id, from_slice, slice_id, parent_id, kind, spec)
    WHERE (t.job_id, t.from_slice) IN (SELECT job_id, slice_id FROM claim)
    ORDER BY t.job_id COLLATE \"C\", t.slice_id COLLATE \"C\"
    ON CONFLICT DO NOTHING
    RETURNING job_id, slice_id
), born AS (
    SELECT job_id, COUNT(*) AS n FROM new_children GROUP BY job_id
), spent AS (
    SELECT job_id, slice_id, SUM(amount) AS amount FROM new_costs GROUP BY job_id, slice_id
), job_spent AS (
    SELECT job_id, SUM(amount) AS amount FROM spent GROUP BY job_id
), tally AS (
    SELECT c.job_id, c.status, c.error_code, c.items_valid, c.items_rejected,
        c.upstream_calls, c.cache_hits
    FROM claim c
    UNION ALL
    SELECT i.job_id, NULL, NULL, 0, 0, i.upstream_calls, 0
    FROM input i JOIN spent p ON p.job_id = i.job_id AND p.slice_id = i.slice_id
    WHERE NOT EXISTS (
        SELECT 1 FROM claim c WHERE c.job_id = i.job_id AND c.slice_id = i.slice_id)
), counted AS (
    INSERT INTO job_counters AS c (job_id, stripe, slices_total, slices_succeeded,
        slices_failed, budget_stops, items_valid, items_rejected, upstream_calls,
        cache_hits, cost)
    SELECT t.job_id, $63, COALESCE(MAX(b.n), 0),
        COUNT(*) FILTER (WHERE t.status = 'succeeded'),
        COUNT(*) FILTER (WHERE t.status = 'failed'),
        COUNT(*) FILTER (WHERE t.status = 'failed' AND t.error_code = 'budget_exhausted'),
        SUM(t.items_valid), SUM(t.items_rejected), SUM(t.upstream_calls),
        SUM(t.cache_hits), COALESCE(MAX(p.amount), 0)
    FROM tally t LEFT JOIN born b ON b.job_id = t.job_id
        LEFT JOIN job_spent p ON p.job_id = t.job_id
    GROUP BY t.job_id
    ORDER BY t.job_id
    ON CONFLICT (job_id, stripe) DO UPDATE SET
        slices_total = c.slices_total + EXCLUDED.slices_total,
        slices_succeeded = c.slices_succeeded + EXCLUDED.slices_succeeded,
        slices_failed = c.slices_failed + EXCLUDED.slices_failed,
        budget_stops = c.budget_stops + EXCLUDED.budget_stops,
        items_valid = c.items_valid + EXCLUDED.items_valid,
        items_rejected = c.items_rejected + EXCLUDED.items_rejected,
        upstream_calls = c.upstream_calls + EXCLUDED.upstream_calls,
        cache_hits = c.cache_hits + EXCLUDED.cache_hits,
        cost = c.cost + EXCLUDED.cost
)
SELECT ARRAY(SELECT job_id || ' ' || slice_id FROM claim) AS claimed,
    ARRAY(SELECT job_id || ' ' || slice_id FROM known) AS known,
    ARRAY(SELECT job_id || ' ' || slice_id FROM new_children) AS new_children";

/// One outcome waiting to be written, and where its answer goes.
struct Pending {
    job: JobId,
    slice: SliceId,
    outcome: SliceOutcome,
    answer: oneshot::Sender<Result<Recorded, PortError>>,
}

/// Hands outcomes to the writer tasks. The tasks end when the last clone of the
/// store (and so of the sender) is dropped.
#[derive(Debug)]
pub(super) struct Batcher {
    tx: mpsc::UnboundedSender<Pending>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("job", &self.job)
            .field("slice", &self.slice)
            .finish_non_exhaustive()
    }
}

impl Batcher {
    pub(super) fn start(pool: PgPool) -> Batcher {
        let (tx, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..WRITERS {
            tokio::spawn(writer(pool.clone(), Arc::clone(&rx)));
        }
        Batcher { tx }
    }

    /// Writes `outcome` for `slice` if the slice is still pending (see the module doc).
    pub(super) async fn record(
        &self,
        job: &JobId,
        slice: &SliceId,
        outcome: &SliceOutcome,
    ) -> Result<Recorded, PortError> {
        let (answer, rx) = oneshot::channel();
        self.tx
            .send(Pending {
                job: job.clone(),
                slice: slice.clone(),
                outcome: outcome.clone(),
                answer,
            })
            .map_err(|_| PortError::Unavailable("the store is closed".into()))?;
        rx.await
            .map_err(|_| PortError::Unavailable("the outcome writer stopped".into()))?
    }
}

/// Takes what is waiting (one slice once per batch), writes it, answers each caller.
async fn writer(pool: PgPool, rx: Arc<Mutex<mpsc::UnboundedReceiver<Pending>>>) {
    let mut deferred: Vec<Pending> = Vec::new();
    loop {
        let mut batch: Vec<Pending> = Vec::with_capacity(BATCH);
        let mut keys: HashSet<(JobId, SliceId)> = HashSet::new();
        let mut later: Vec<Pending> = Vec::new();
        let mut take = |p: Pending, batch: &mut Vec<Pending>, later: &mut Vec<Pending>| {
            if batch.len() < BATCH && keys.insert((p.job.clone(), p.slice.clone())) {
                batch.push(p);
            } else {
                later.push(p);
            }
        };
        for p in deferred.drain(..) {
            take(p, &mut batch, &mut later);
        }
        if batch.is_empty() {
            // An idle writer holds the receiver while it waits for the next
            // outcome, then gathers what arrives within LINGER of it.
            let mut rx = rx.lock().await;
            match rx.recv().await {
                Some(p) => take(p, &mut batch, &mut later),
                None => return,
            }
            let until = Instant::now() + LINGER;
            while batch.len() < BATCH {
                match tokio::time::timeout_at(until, rx.recv()).await {
                    Ok(Some(p)) => take(p, &mut batch, &mut later),
                    Ok(None) | Err(_) => break,
                }
            }
        } else if let Ok(mut rx) = rx.try_lock() {
            // One that has deferred outcomes to write only adds what it can get
            // without waiting.
            while batch.len() < BATCH {
                let Ok(p) = rx.try_recv() else { break };
                take(p, &mut batch, &mut later);
            }
        }
        deferred = later;
        write(&pool, batch).await;
    }
}

/// Writes one batch and answers every caller in it.
async fn write(pool: &PgPool, batch: Vec<Pending>) {
    match write_batch(pool, &batch).await {
        Ok(answers) => {
            for (p, a) in batch.into_iter().zip(answers) {
                let _ = p.answer.send(a);
            }
        }
        Err(e) => {
            for p in batch {
                let _ = p.answer.send(Err(e.clone()));
            }
        }
    }
}

/// One outcome's records, de-duplicated, as the statement wants them.
struct Prepared<'a> {
    items: Vec<&'a trawl_core::model::Item>,
    rejections: Vec<&'a trawl_core::model::Rejection>,
    trace: Vec<&'a trawl_core::model::TraceStep>,
    costs: Vec<&'a trawl_core::model::CostEntry>,
    audit: Vec<&'a trawl_core::model::AuditRecord>,
    children: Vec<&'a SliceSpec>,
}

fn prepare<'a>(job: &JobId, slice: &SliceId, o: &'a SliceOutcome) -> Prepared<'a> {
    let strays = o.items.iter().filter(|r| &r.slice_id != slice).count()
        + o.rejections.iter().filter(|r| &r.slice_id != slice).count()
        + o.trace.iter().filter(|r| &r.slice_id != slice).count()
        + o.costs.iter().filter(|r| &r.slice_id != slice).count();
    if strays > 0 {
        // Every record is stored under the slice it was recorded for: the outcome is
        // that slice's, whatever slice id its records name.
        tracing::warn!(job_id = %job, slice_id = %slice, strays,
            "outcome records name another slice; stored under this one");
    }
    Prepared {
        items: first_of_each(&o.items, |r| r.seq),
        rejections: first_of_each(&o.rejections, |r| r.seq),
        trace: first_of_each(&o.trace, |r| r.seq),
        costs: first_of_each(&o.costs, |r| (&r.attempt, r.seq)),
        audit: first_of_each(&o.audit, |r| r.seq),
        children: first_of_each(&o.children, |c| &c.id),
    }
}

/// The columns of a batch, one vector per statement parameter.
#[derive(Default)]
struct Columns {
    // slices
    s_job: Vec<String>,
    s_slice: Vec<String>,
    s_status: Vec<&'static str>,
    s_code: Vec<Option<String>>,
    s_message: Vec<Option<String>>,
    s_valid: Vec<i64>,
    s_rejected: Vec<i64>,
    s_upstream: Vec<i64>,
    s_hits: Vec<i64>,
    s_cost: Vec<i64>,
    // items
    i_job: Vec<String>,
    i_slice: Vec<String>,
    i_seq: Vec<i64>,
    i_kind: Vec<&'static str>,
    i_url: Vec<String>,
    i_geo: Vec<String>,
    i_data: Vec<String>,
    // rejections
    r_job: Vec<String>,
    r_slice: Vec<String>,
    r_seq: Vec<i64>,
    r_url: Vec<String>,
    r_geo: Vec<String>,
    r_data: Vec<String>,
    r_errors: Vec<String>,
    // trace steps
    t_job: Vec<String>,
    t_slice: Vec<String>,
    t_seq: Vec<i64>,
    t_tool: Vec<String>,
    t_digest: Vec<String>,
    t_hit: Vec<bool>,
    t_attempt: Vec<i64>,
    t_status: Vec<String>,
    t_error: Vec<Option<String>>,
    t_latency: Vec<i64>,
    t_cost: Vec<i64>,
    t_at: Vec<i64>,
    t_trace: Vec<Option<String>>,
    t_span: Vec<Option<String>>,
    // costs
    c_job: Vec<String>,
    c_slice: Vec<String>,
    c_attempt: Vec<String>,
    c_seq: Vec<i64>,
    c_product: Vec<String>,
    c_amount: Vec<i64>,
    // audit
    a_job: Vec<String>,
    a_slice: Vec<String>,
    a_seq: Vec<i64>,
    a_tool: Vec<String>,
    a_digest: Vec<String>,
    a_decision: Vec<String>,
    a_reason: Vec<String>,
    a_caller: Vec<String>,
    a_latency: Vec<i64>,
    a_bytes: Vec<i64>,
    a_error: Vec<Option<String>>,
    a_at: Vec<i64>,
    // children
    k_job: Vec<String>,
    k_from: Vec<String>,
    k_slice: Vec<String>,
    k_parent: Vec<Option<String>>,
    k_kind: Vec<&'static str>,
    k_spec: Vec<String>,
}

impl Columns {
    fn add(
        &mut self,
        job: &JobId,
        slice: &SliceId,
        o: &SliceOutcome,
        p: &Prepared<'_>,
    ) -> Result<(), PortError> {
        let (j, s) = (job.as_str(), slice.as_str());
        let upstream = p.trace.iter().filter(|t| !t.cache_hit).count();
        let cost: i64 = p
            .costs
            .iter()
            .map(|c| c.amount.0)
            .fold(0, i64::saturating_add);
        self.s_job.push(j.into());
        self.s_slice.push(s.into());
        self.s_status.push(o.status().as_str());
        self.s_code
            .push(o.error.as_ref().map(|e| text(&e.code).into_owned()));
        self.s_message
            .push(o.error.as_ref().map(|e| text(&e.message).into_owned()));
        self.s_valid.push(to_i64(p.items.len() as u64));
        self.s_rejected.push(to_i64(p.rejections.len() as u64));
        self.s_upstream.push(to_i64(upstream as u64));
        self.s_hits.push(to_i64((p.trace.len() - upstream) as u64));
        self.s_cost.push(cost);
        for r in &p.items {
            self.i_job.push(j.into());
            self.i_slice.push(s.into());
            self.i_seq.push(i64::from(r.seq));
            self.i_kind.push(r.kind.as_str());
            self.i_url.push(text(&r.url).into_owned());
            self.i_geo.push(r.geo.as_str().into());
            self.i_data.push(json(&r.data)?);
        }
        for r in &p.rejections {
            self.r_job.push(j.into());
            self.r_slice.push(s.into());
            self.r_seq.push(i64::from(r.seq));
            self.r_url.push(text(&r.url).into_owned());
            self.r_geo.push(r.geo.as_str().into());
            self.r_data.push(json(&r.data)?);
            self.r_errors.push(json(&r.errors)?);
        }
        for t in &p.trace {
            self.t_job.push(j.into());
            self.t_slice.push(s.into());
            self.t_seq.push(i64::from(t.seq));
            self.t_tool.push(text(&t.tool).into_owned());
            self.t_digest.push(text(&t.args_digest).into_owned());
            self.t_hit.push(t.cache_hit);
            self.t_attempt.push(i64::from(t.attempt));
            self.t_status.push(text(&t.status).into_owned());
            self.t_error
                .push(t.error.as_deref().map(|e| text(e).into_owned()));
            self.t_latency.push(to_i64(t.latency_us));
            self.t_cost.push(t.cost.0);
            self.t_at.push(t.at_ms);
            self.t_trace.push(t.trace_id.clone());
            self.t_span.push(t.span_id.clone());
        }
        for c in &p.costs {
            self.c_job.push(j.into());
            self.c_slice.push(s.into());
            self.c_attempt.push(text(&c.attempt).into_owned());
            self.c_seq.push(i64::from(c.seq));
            self.c_product.push(text(&c.product).into_owned());
            self.c_amount.push(c.amount.0);
        }
        for a in &p.audit {
            self.a_job.push(j.into());
            self.a_slice.push(s.into());
            self.a_seq.push(i64::from(a.seq));
            self.a_tool.push(text(&a.tool).into_owned());
            self.a_digest.push(text(&a.args_digest).into_owned());
            self.a_decision.push(text(&a.decision).into_owned());
            self.a_reason.push(text(&a.reason).into_owned());
            self.a_caller.push(text(&a.caller).into_owned());
            self.a_latency.push(to_i64(a.latency_us));
            self.a_bytes.push(to_i64(a.result_bytes));
            self.a_error
                .push(a.error.as_deref().map(|e| text(e).into_owned()));
            self.a_at.push(a.at_ms);
        }
        for c in &p.children {
            self.k_job.push(j.into());
            self.k_from.push(s.into());
            self.k_slice.push(c.id.as_str().into());
            self.k_parent
                .push(c.parent.as_ref().map(|p| p.as_str().to_owned()));
            self.k_kind.push(c.kind.name());
            self.k_spec.push(json(c)?);
        }
        Ok(())
    }
}

/// Writes a batch; one answer per outcome, in order.
async fn write_batch(
    pool: &PgPool,
    batch: &[Pending],
) -> Result<Vec<Result<Recorded, PortError>>, PortError> {
    let prepared: Vec<Prepared<'_>> = batch
        .iter()
        .map(|p| prepare(&p.job, &p.slice, &p.outcome))
        .collect();
    let stripe = stripe();
    let mut c = Columns::default();
    for (p, pr) in batch.iter().zip(&prepared) {
        c.add(&p.job, &p.slice, &p.outcome, pr)?;
    }
    let row = sqlx::query(RECORD)
        .bind(&c.s_job)
        .bind(&c.s_slice)
        .bind(&c.s_status)
        .bind(&c.s_code)
        .bind(&c.s_message)
        .bind(&c.s_valid)
        .bind(&c.s_rejected)
        .bind(&c.s_upstream)
        .bind(&c.s_hits)
        .bind(&c.s_cost)
        .bind(now_ms())
        .bind(&c.i_job)
        .bind(&c.i_slice)
        .bind(&c.i_seq)
        .bind(&c.i_kind)
        .bind(&c.i_url)
        .bind(&c.i_geo)
        .bind(&c.i_data)
        .bind(&c.r_job)
        .bind(&c.r_slice)
        .bind(&c.r_seq)
        .bind(&c.r_url)
        .bind(&c.r_geo)
        .bind(&c.r_data)
        .bind(&c.r_errors)
        .bind(&c.t_job)
        .bind(&c.t_slice)
        .bind(&c.t_seq)
        .bind(&c.t_tool)
        .bind(&c.t_digest)
        .bind(&c.t_hit)
        .bind(&c.t_attempt)
        .bind(&c.t_status)
        .bind(&c.t_error)
        .bind(&c.t_latency)
        .bind(&c.t_cost)
        .bind(&c.t_at)
        .bind(&c.c_job)
        .bind(&c.c_slice)
        .bind(&c.c_seq)
        .bind(&c.c_product)
        .bind(&c.c_amount)
        .bind(&c.k_job)
        .bind(&c.k_from)
        .bind(&c.k_slice)
        .bind(&c.k_parent)
        .bind(&c.k_kind)
        .bind(&c.k_spec)
        .bind(&c.a_job)
        .bind(&c.a_slice)
        .bind(&c.a_seq)
        .bind(&c.a_tool)
        .bind(&c.a_digest)
        .bind(&c.a_decision)
        .bind(&c.a_reason)
        .bind(&c.a_caller)
        .bind(&c.a_latency)
        .bind(&c.a_bytes)
        .bind(&c.a_error)
        .bind(&c.a_at)
        .bind(&c.t_trace)
        .bind(&c.t_span)
        .bind(stripe)
        .bind(&c.c_attempt)
        .fetch_one(pool)
        .await
        .port()?;
    let claimed: HashSet<String> = get::<Vec<String>>(&row, "claimed")?.into_iter().collect();
    let known: HashSet<String> = get::<Vec<String>>(&row, "known")?.into_iter().collect();
    let mut new_children: HashSet<String> = get::<Vec<String>>(&row, "new_children")?
        .into_iter()
        .collect();
    let mut answers = Vec::with_capacity(batch.len());
    // A new child goes to the first claimed outcome of the batch that lists it.
    for (p, pr) in batch.iter().zip(&prepared) {
        let key = format!("{} {}", p.job.as_str(), p.slice.as_str());
        if !claimed.contains(&key) {
            if !known.contains(&key) {
                answers.push(Err(PortError::NotFound(format!(
                    "slice {} of job {}",
                    p.slice, p.job
                ))));
            } else {
                tracing::debug!(job_id = %p.job, slice_id = %p.slice, "slice already terminal; outcome not written");
                answers.push(Ok(Recorded::default()));
            }
            continue;
        }
        let mut mine = Vec::new();
        for child in &pr.children {
            let ck = format!("{} {}", p.job.as_str(), child.id.as_str());
            if new_children.remove(&ck) {
                mine.push((*child).clone());
            }
        }
        answers.push(Ok(Recorded {
            written: true,
            new_children: mine,
        }));
    }
    Ok(answers)
}

/// The records of `of`, first of each key kept, in their order.
fn first_of_each<'a, T, K: std::hash::Hash + Eq>(
    records: &'a [T],
    key: impl Fn(&'a T) -> K,
) -> Vec<&'a T> {
    let mut seen = HashSet::with_capacity(records.len());
    records.iter().filter(|r| seen.insert(key(r))).collect()
}

/// Progress rows of a slice still pending, and its state when given, in one
/// statement: nothing is written once the slice has ended.
const PROGRESS: &str = "\
WITH live AS (
    SELECT job_id, slice_id FROM slices
    WHERE job_id = $1 AND slice_id = $2 AND status = 'pending'
    FOR UPDATE
), new_trace AS (
    INSERT INTO trace_steps (job_id, slice_id, seq, tool, args_digest, cache_hit, attempt,
        status, error, latency_us, cost, at_ms, trace_id, span_id)
    SELECT $1, $2, t.seq, t.tool, t.args_digest, t.cache_hit, t.attempt,
        t.status, t.error, t.latency_us, t.cost, t.at_ms, t.trace_id, t.span_id
    FROM UNNEST($5::bigint[], $6::text[], $7::text[], $8::bool[], $9::bigint[],
            $10::text[], $11::text[], $12::bigint[], $13::bigint[], $14::bigint[],
            $15::text[], $16::text[])
        AS t (seq, tool, args_digest, cache_hit, attempt, status, error, latency_us,
            cost, at_ms, trace_id, span_id)
    WHERE EXISTS (SELECT 1 FROM live)
    ON CONFLICT DO NOTHING
), new_costs AS (
    INSERT INTO costs (job_id, slice_id, attempt, seq, product, amount)
    SELECT $1, $2, t.attempt, t.seq, t.product, t.amount
    FROM UNNEST($30::text[], $17::bigint[], $18::text[], $19::bigint[])
        AS t (attempt, seq, product, amount)
    WHERE EXISTS (SELECT 1 FROM live)
    ON CONFLICT DO NOTHING
    RETURNING amount
), counted AS (
    INSERT INTO job_counters AS c (job_id, stripe, cost)
    SELECT $1, $31, SUM(amount) FROM new_costs HAVING COUNT(*) > 0
    ON CONFLICT (job_id, stripe) DO UPDATE SET cost = c.cost + EXCLUDED.cost
), new_audit AS (
    INSERT INTO tool_audit (job_id, slice_id, seq, tool, args_digest, decision, reason,
        caller, latency_us, result_bytes, error, at_ms)
    SELECT $1, $2, t.seq, t.tool, t.args_digest, t.decision, t.reason,
        t.caller, t.latency_us, t.result_bytes, t.error, t.at_ms
    FROM UNNEST($20::bigint[], $21::text[], $22::text[], $23::text[], $24::text[],
            $25::text[], $26::bigint[], $27::bigint[], $28::text[], $29::bigint[])
        AS t (seq, tool, args_digest, decision, reason, caller, latency_us, result_bytes,
            error, at_ms)
    WHERE EXISTS (SELECT 1 FROM live)
    ON CONFLICT DO NOTHING
)
INSERT INTO slice_progress (job_id, slice_id, state, saved_ms)
SELECT $1, $2, $3, $4 FROM live WHERE $3::text IS NOT NULL
ON CONFLICT (job_id, slice_id) DO UPDATE SET state = EXCLUDED.state,
    saved_ms = EXCLUDED.saved_ms";

/// `Store::save_progress`: the rows through the same column preparation as an
/// outcome's (de-duplicated by seq, text made storable).
pub(super) async fn save_progress(
    pool: &PgPool,
    job: &JobId,
    slice: &SliceId,
    progress: &trawl_core::model::Progress,
) -> Result<(), PortError> {
    let rows = SliceOutcome {
        trace: progress.trace.clone(),
        costs: progress.costs.clone(),
        audit: progress.audit.clone(),
        ..SliceOutcome::default()
    };
    let mut c = Columns::default();
    c.add(job, slice, &rows, &prepare(job, slice, &rows))?;
    let state = progress.state.as_ref().map(json).transpose()?;
    sqlx::query(PROGRESS)
        .bind(job.as_str())
        .bind(slice.as_str())
        .bind(state)
        .bind(now_ms())
        .bind(&c.t_seq)
        .bind(&c.t_tool)
        .bind(&c.t_digest)
        .bind(&c.t_hit)
        .bind(&c.t_attempt)
        .bind(&c.t_status)
        .bind(&c.t_error)
        .bind(&c.t_latency)
        .bind(&c.t_cost)
        .bind(&c.t_at)
        .bind(&c.t_trace)
        .bind(&c.t_span)
        .bind(&c.c_seq)
        .bind(&c.c_product)
        .bind(&c.c_amount)
        .bind(&c.a_seq)
        .bind(&c.a_tool)
        .bind(&c.a_digest)
        .bind(&c.a_decision)
        .bind(&c.a_reason)
        .bind(&c.a_caller)
        .bind(&c.a_latency)
        .bind(&c.a_bytes)
        .bind(&c.a_error)
        .bind(&c.a_at)
        .bind(&c.c_attempt)
        .bind(stripe())
        .execute(pool)
        .await
        .port()?;
    Ok(())
}

/// `Store::record_costs`: the rows of one attempt and the job's counters, in
/// one statement.
const COSTS: &str = "\
WITH known AS (
    SELECT 1 FROM slices WHERE job_id = $1 AND slice_id = $2
), new_costs AS (
    INSERT INTO costs (job_id, slice_id, attempt, seq, product, amount)
    SELECT $1, $2, t.attempt, t.seq, t.product, t.amount
    FROM UNNEST($3::text[], $4::bigint[], $5::text[], $6::bigint[])
        AS t (attempt, seq, product, amount)
    WHERE EXISTS (SELECT 1 FROM known)
    ON CONFLICT DO NOTHING
    RETURNING amount
), counted AS (
    INSERT INTO job_counters AS c (job_id, stripe, upstream_calls, cost)
    SELECT $1, $7, $8, SUM(amount) FROM new_costs HAVING COUNT(*) > 0
    ON CONFLICT (job_id, stripe) DO UPDATE SET
        upstream_calls = c.upstream_calls + EXCLUDED.upstream_calls,
        cost = c.cost + EXCLUDED.cost
)
SELECT EXISTS (SELECT 1 FROM known) AS known, (SELECT COUNT(*) FROM new_costs) AS new";

pub(super) async fn record_costs(
    pool: &PgPool,
    job: &JobId,
    slice: &SliceId,
    costs: &[trawl_core::model::CostEntry],
    calls: u64,
) -> Result<u64, PortError> {
    let rows = SliceOutcome {
        costs: costs.to_vec(),
        ..SliceOutcome::default()
    };
    let mut c = Columns::default();
    c.add(job, slice, &rows, &prepare(job, slice, &rows))?;
    let row = sqlx::query(COSTS)
        .bind(job.as_str())
        .bind(slice.as_str())
        .bind(&c.c_attempt)
        .bind(&c.c_seq)
        .bind(&c.c_product)
        .bind(&c.c_amount)
        .bind(stripe())
        .bind(to_i64(calls))
        .fetch_one(pool)
        .await
        .port()?;
    if !get::<bool>(&row, "known")? {
        return Err(PortError::NotFound(format!("slice {slice} of job {job}")));
    }
    Ok(u64::try_from(get::<i64>(&row, "new")?).unwrap_or(0))
}

/// The counter row (`job_counters`) a statement adds to: statements take the
/// stripes in turn, from a place that differs between processes.
fn stripe() -> i16 {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let turn = NEXT.fetch_add(1, Ordering::Relaxed) + std::process::id() as usize;
    i16::try_from(turn % STRIPES).unwrap_or(0)
}

/// `Store::progress`: the slice's stored rows and last state, in one transaction.
pub(super) async fn progress(
    pool: &PgPool,
    job: &JobId,
    slice: &SliceId,
) -> Result<Option<trawl_core::model::Progress>, PortError> {
    let (j, s) = (job.as_str(), slice.as_str());
    let mut tx = pool.begin().await.port()?;
    let trace = sqlx::query(
        "SELECT slice_id, seq, tool, args_digest, cache_hit, attempt, status, error, \
         latency_us, cost, at_ms, trace_id, span_id FROM trace_steps \
         WHERE job_id = $1 AND slice_id = $2 ORDER BY seq",
    )
    .bind(j)
    .bind(s)
    .fetch_all(&mut *tx)
    .await
    .port()?;
    let costs = sqlx::query(
        "SELECT slice_id, attempt, seq, product, amount FROM costs \
         WHERE job_id = $1 AND slice_id = $2 ORDER BY seq",
    )
    .bind(j)
    .bind(s)
    .fetch_all(&mut *tx)
    .await
    .port()?;
    let audit = sqlx::query(
        "SELECT id, job_id, slice_id, seq, tool, args_digest, decision, reason, caller, \
         latency_us, result_bytes, error, at_ms FROM tool_audit \
         WHERE job_id = $1 AND slice_id = $2 ORDER BY seq",
    )
    .bind(j)
    .bind(s)
    .fetch_all(&mut *tx)
    .await
    .port()?;
    let state: Option<String> =
        sqlx::query_scalar("SELECT state FROM slice_progress WHERE job_id = $1 AND slice_id = $2")
            .bind(j)
            .bind(s)
            .fetch_optional(&mut *tx)
            .await
            .port()?;
    tx.commit().await.port()?;
    crate::decode::progress(&trace, &costs, &audit, state)
}
