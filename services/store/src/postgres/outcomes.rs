//! `record_outcome`: one statement, hence one transaction and one round trip, per
//! outcome.
//!
//! The statement is a chain of data-modifying CTEs:
//!
//! 1. `claim` moves the slice out of `pending` and writes its status, error and
//!    tallies: `UPDATE slices … WHERE job_id = $1 AND slice_id = $2 AND status =
//!    'pending'`. Two transactions claiming one slice queue on its row lock; the
//!    second then sees it terminal and claims nothing.
//! 2. items, rejections, trace steps and costs are inserted from one array per
//!    column, each `WHERE EXISTS (SELECT 1 FROM claim)` and `ON CONFLICT DO NOTHING`
//!    on their (job, slice, seq) keys: no claim, no row.
//! 3. children are inserted the same way, sorted by id so that two outcomes adding
//!    the same children wait for each other in one order (never a deadlock), and
//!    `RETURNING` the ids that were new.
//!
//! The main query says whether the claim moved a row, whether the slice exists at
//! all (else the answer is `NotFound`), and which children were new.
//!
//! Records are de-duplicated by seq (children by id) before they are sent, the
//! first of each kept, as the SQLite store's `ON CONFLICT DO NOTHING` keeps the
//! first: the tallies written on the slice row then equal the rows stored.

use std::collections::HashSet;

use sqlx::postgres::PgPool;
use trawl_core::model::{JobId, SliceId, SliceOutcome, SliceSpec, now_ms};
use trawl_core::ports::{PortError, Recorded};

use super::rows::{SliceColumns, get, json, text, to_i64};
use crate::error::ResultExt;

const RECORD: &str = "\
WITH claim AS (
    UPDATE slices SET status = $3, error_code = $4, error_message = $5, finished_ms = $6,
        items_valid = $7, items_rejected = $8, upstream_calls = $9, cache_hits = $10,
        cost = $11
    WHERE job_id = $1 AND slice_id = $2 AND status = 'pending'
    RETURNING 1
), new_items AS (
    INSERT INTO items (job_id, slice_id, seq, kind, url, geo, data)
    SELECT $1, $2, t.seq, t.kind, t.url, t.geo, t.data::jsonb
    FROM UNNEST($12::bigint[], $13::text[], $14::text[], $15::text[], $16::text[])
        AS t (seq, kind, url, geo, data)
    WHERE EXISTS (SELECT 1 FROM claim)
    ON CONFLICT DO NOTHING
), new_rejections AS (
    INSERT INTO rejections (job_id, slice_id, seq, url, geo, data, errors)
    SELECT $1, $2, t.seq, t.url, t.geo, t.data::jsonb, t.errors::jsonb
    FROM UNNEST($17::bigint[], $18::text[], $19::text[], $20::text[], $21::text[])
        AS t (seq, url, geo, data, errors)
    WHERE EXISTS (SELECT 1 FROM claim)
    ON CONFLICT DO NOTHING
), new_trace AS (
    INSERT INTO trace_steps (job_id, slice_id, seq, tool, args_digest, cache_hit, attempt,
        status, error, latency_us, cost, at_ms)
    SELECT $1, $2, t.seq, t.tool, t.args_digest, t.cache_hit, t.attempt, t.status, t.error,
        t.latency_us, t.cost, t.at_ms
    FROM UNNEST($22::bigint[], $23::text[], $24::text[], $25::bool[], $26::bigint[],
            $27::text[], $28::text[], $29::bigint[], $30::bigint[], $31::bigint[])
        AS t (seq, tool, args_digest, cache_hit, attempt, status, error, latency_us, cost,
            at_ms)
    WHERE EXISTS (SELECT 1 FROM claim)
    ON CONFLICT DO NOTHING
), new_costs AS (
    INSERT INTO costs (job_id, slice_id, seq, product, amount)
    SELECT $1, $2, t.seq, t.product, t.amount
    FROM UNNEST($32::bigint[], $33::text[], $34::bigint[]) AS t (seq, product, amount)
    WHERE EXISTS (SELECT 1 FROM claim)
    ON CONFLICT DO NOTHING
), new_children AS (
    INSERT INTO slices (job_id, slice_id, parent_id, kind, spec, created_ms)
    SELECT $1, t.slice_id, t.parent_id, t.kind, t.spec::jsonb, $6
    FROM UNNEST($35::text[], $36::text[], $37::text[], $38::text[])
        AS t (slice_id, parent_id, kind, spec)
    WHERE EXISTS (SELECT 1 FROM claim)
    ORDER BY t.slice_id COLLATE \"C\"
    ON CONFLICT DO NOTHING
    RETURNING slice_id
)
SELECT EXISTS (SELECT 1 FROM claim) AS claimed,
    EXISTS (SELECT 1 FROM slices WHERE job_id = $1 AND slice_id = $2) AS known,
    ARRAY(SELECT slice_id FROM new_children) AS new_children";

/// The records of `of`, first of each key kept, in their order.
fn first_of_each<'a, T, K: std::hash::Hash + Eq>(
    records: &'a [T],
    key: impl Fn(&'a T) -> K,
) -> Vec<&'a T> {
    let mut seen = HashSet::with_capacity(records.len());
    records.iter().filter(|r| seen.insert(key(r))).collect()
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Writes `outcome` for `slice` if the slice is still pending (see the module doc).
pub(super) async fn record(
    pool: &PgPool,
    job: &JobId,
    slice: &SliceId,
    outcome: &SliceOutcome,
) -> Result<Recorded, PortError> {
    let o = outcome;
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
    let items = first_of_each(&o.items, |r| r.seq);
    let rejections = first_of_each(&o.rejections, |r| r.seq);
    let trace = first_of_each(&o.trace, |r| r.seq);
    let costs = first_of_each(&o.costs, |r| r.seq);
    let children: Vec<&SliceSpec> = first_of_each(&o.children, |c| &c.id);
    let upstream = trace.iter().filter(|t| !t.cache_hit).count();
    let cost: i64 = costs
        .iter()
        .map(|c| c.amount.0)
        .fold(0, i64::saturating_add);
    let error = o.error.as_ref();

    let mut data = Vec::with_capacity(items.len());
    for it in &items {
        data.push(json(&it.data)?);
    }
    let mut rejected_data = Vec::with_capacity(rejections.len());
    let mut violations = Vec::with_capacity(rejections.len());
    for r in &rejections {
        rejected_data.push(json(&r.data)?);
        violations.push(json(&r.errors)?);
    }
    let child_columns = SliceColumns::of(children.iter().copied())?;

    let row = sqlx::query(RECORD)
        .bind(job.as_str())
        .bind(slice.as_str())
        .bind(o.status().as_str())
        .bind(error.map(|e| text(&e.code)))
        .bind(error.map(|e| text(&e.message)))
        .bind(now_ms())
        .bind(count(items.len()))
        .bind(count(rejections.len()))
        .bind(count(upstream))
        .bind(count(trace.len() - upstream))
        .bind(cost)
        // items
        .bind(items.iter().map(|r| i64::from(r.seq)).collect::<Vec<_>>())
        .bind(items.iter().map(|r| r.kind.as_str()).collect::<Vec<_>>())
        .bind(items.iter().map(|r| text(&r.url)).collect::<Vec<_>>())
        .bind(items.iter().map(|r| r.geo.as_str()).collect::<Vec<_>>())
        .bind(&data)
        // rejections
        .bind(
            rejections
                .iter()
                .map(|r| i64::from(r.seq))
                .collect::<Vec<_>>(),
        )
        .bind(rejections.iter().map(|r| text(&r.url)).collect::<Vec<_>>())
        .bind(
            rejections
                .iter()
                .map(|r| r.geo.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(&rejected_data)
        .bind(&violations)
        // trace steps
        .bind(trace.iter().map(|t| i64::from(t.seq)).collect::<Vec<_>>())
        .bind(trace.iter().map(|t| text(&t.tool)).collect::<Vec<_>>())
        .bind(
            trace
                .iter()
                .map(|t| text(&t.args_digest))
                .collect::<Vec<_>>(),
        )
        .bind(trace.iter().map(|t| t.cache_hit).collect::<Vec<_>>())
        .bind(
            trace
                .iter()
                .map(|t| i64::from(t.attempt))
                .collect::<Vec<_>>(),
        )
        .bind(trace.iter().map(|t| text(&t.status)).collect::<Vec<_>>())
        .bind(
            trace
                .iter()
                .map(|t| t.error.as_deref().map(text))
                .collect::<Vec<_>>(),
        )
        .bind(
            trace
                .iter()
                .map(|t| to_i64(t.latency_us))
                .collect::<Vec<_>>(),
        )
        .bind(trace.iter().map(|t| t.cost.0).collect::<Vec<_>>())
        .bind(trace.iter().map(|t| t.at_ms).collect::<Vec<_>>())
        // costs
        .bind(costs.iter().map(|c| i64::from(c.seq)).collect::<Vec<_>>())
        .bind(costs.iter().map(|c| text(&c.product)).collect::<Vec<_>>())
        .bind(costs.iter().map(|c| c.amount.0).collect::<Vec<_>>())
        // children
        .bind(&child_columns.ids)
        .bind(&child_columns.parents)
        .bind(&child_columns.kinds)
        .bind(&child_columns.specs)
        .fetch_one(pool)
        .await
        .port()?;

    let claimed: bool = get(&row, "claimed")?;
    if !claimed {
        let known: bool = get(&row, "known")?;
        if !known {
            return Err(PortError::NotFound(format!("slice {slice} of job {job}")));
        }
        tracing::debug!(job_id = %job, slice_id = %slice, "slice already terminal; outcome not written");
        return Ok(Recorded::default());
    }
    let inserted: HashSet<String> = get::<Vec<String>>(&row, "new_children")?
        .into_iter()
        .collect();
    Ok(Recorded {
        written: true,
        new_children: children
            .into_iter()
            .filter(|c| inserted.contains(c.id.as_str()))
            .cloned()
            .collect(),
    })
}
