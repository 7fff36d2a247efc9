-- The shared budget ledger: every reservation made for the job's upstream calls,
-- in micro-dollars (what was billed, plus calls in flight). Workers reserve before
-- a call and only while the total stays within the job's max_usd, so several
-- workers spending for one job never pass it together. A reservation of a worker
-- that died is never released: the ledger errs on the side of spending less.
ALTER TABLE jobs ADD COLUMN budget_reserved BIGINT NOT NULL DEFAULT 0;
