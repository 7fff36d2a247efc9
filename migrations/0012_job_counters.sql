-- Per-job counters, so that a job's status is read from a few rows whatever the
-- job's size, instead of adding up its slices.
--
-- The statement that records a batch of outcomes adds the batch's tallies to one
-- row of each job it touches: the row of the batch's stripe (0–15, chosen per
-- batch), so that concurrent batches of one job seldom wait on one row's lock. Rows
-- are upserted in job order, so two batches never lock two jobs' rows in opposite
-- orders. Inserting slices (planning, added slices, a slice's new children) adds
-- to `slices_total` the same way. A job's counts are the sum of its rows (at most
-- 16). The slice rows keep their own tallies; the counters equal their sums.
CREATE TABLE job_counters (
    job_id            TEXT COLLATE "C" NOT NULL REFERENCES jobs (id),
    stripe            SMALLINT NOT NULL,
    slices_total      BIGINT NOT NULL DEFAULT 0,
    slices_succeeded  BIGINT NOT NULL DEFAULT 0,
    slices_failed     BIGINT NOT NULL DEFAULT 0,
    budget_stops      BIGINT NOT NULL DEFAULT 0,
    items_valid       BIGINT NOT NULL DEFAULT 0,
    items_rejected    BIGINT NOT NULL DEFAULT 0,
    upstream_calls    BIGINT NOT NULL DEFAULT 0,
    cache_hits        BIGINT NOT NULL DEFAULT 0,
    cost              BIGINT NOT NULL DEFAULT 0,   -- micro-dollars
    PRIMARY KEY (job_id, stripe)
);

-- The jobs stored before this migration: their counts, from their slices.
INSERT INTO job_counters (job_id, stripe, slices_total, slices_succeeded, slices_failed,
    budget_stops, items_valid, items_rejected, upstream_calls, cache_hits, cost)
SELECT job_id, 0, COUNT(*),
    COUNT(*) FILTER (WHERE status = 'succeeded'),
    COUNT(*) FILTER (WHERE status = 'failed'),
    COUNT(*) FILTER (WHERE status = 'failed' AND error_code = 'budget_exhausted'),
    SUM(items_valid), SUM(items_rejected), SUM(upstream_calls), SUM(cache_hits), SUM(cost)
FROM slices GROUP BY job_id;
