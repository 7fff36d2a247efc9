-- Retention: how long a job is kept after it ends, and the cost ledger's monthly
-- totals, which outlive the cost rows they sum.
--
-- `retention_ms` is the job's own (its spec's `retention`); NULL: the
-- deployment's (TRAWL_RETENTION). The scheduler deletes an ended job whose
-- `updated_ms` (when it ended) plus its retention has passed, in batches of rows,
-- each batch its own statement: no long transaction, no lock beyond the rows.
-- The cost rows it deletes are added to `cost_months` by the same statement, by
-- the month the job was created in (UTC) and product.
ALTER TABLE jobs ADD COLUMN retention_ms BIGINT;

-- expired_jobs: the ended jobs, by when they ended.
CREATE INDEX jobs_ended ON jobs (updated_ms)
    WHERE status IN ('succeeded', 'partial', 'failed', 'cancelled');

CREATE TABLE cost_months (
    month    TEXT COLLATE "C" NOT NULL,   -- YYYY-MM, UTC
    product  TEXT COLLATE "C" NOT NULL,
    amount   BIGINT NOT NULL,             -- micro-dollars
    PRIMARY KEY (month, product)
);
