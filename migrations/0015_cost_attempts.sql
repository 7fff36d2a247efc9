-- Every billed call in the ledger once: a cost row is keyed by the attempt that
-- made the call (one delivery's run of a slice, a random id the worker makes)
-- as well as by job, slice and seq. A slice delivered again after its first
-- outcome was lost has both attempts' costs stored, each once however often it
-- is written; before, the second attempt's rows took the first one's keys and
-- were dropped as duplicates. Rows stored before keep the empty attempt.
ALTER TABLE costs ADD COLUMN attempt TEXT COLLATE "C" NOT NULL DEFAULT '';

DO $$
DECLARE
    pk TEXT;
BEGIN
    SELECT conname INTO pk FROM pg_constraint
        WHERE conrelid = 'costs'::regclass AND contype = 'p';
    EXECUTE format('ALTER TABLE costs DROP CONSTRAINT %I', pk);
END $$;

ALTER TABLE costs ADD PRIMARY KEY (job_id, slice_id, attempt, seq);
