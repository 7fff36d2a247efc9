-- trawl store, SQLite, schema version 2: the deployed shape.
--
-- Applied after `sqlite.sql` (version 1), in one transaction with
-- `PRAGMA user_version = 2`. Never edited once released; a later change is a new file.
--
-- - jobs stored `pending` by the HTTP API carry the client's idempotency key;
-- - slices remember when they were last handed to the queue, so a scheduler
--   publishes what was never published and republishes what was lost;
-- - approvals say what they ask for;
-- - indexes for the scheduler's passes and for reading results page by page.

-- The client's `Idempotency-Key` and the sha256 of its request body; NULL for jobs
-- stored without one (`trawl run`). A key names at most one job.
ALTER TABLE jobs ADD COLUMN idempotency_key TEXT;
ALTER TABLE jobs ADD COLUMN request_digest TEXT;
CREATE UNIQUE INDEX jobs_idempotency_key ON jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- jobs_with_status: the live jobs, oldest first.
CREATE INDEX jobs_status ON jobs (status, created_ms, id);

-- When the slice was last handed to the queue; NULL while it never was. Children
-- added by an outcome start NULL like planned slices.
ALTER TABLE slices ADD COLUMN published_ms INTEGER;

-- slices_to_publish, without walking every pending slice already published: the
-- ones never published, in slice order, and the published ones by time (a
-- republication after a lost message is rare, so these are few and sorted).
CREATE INDEX slices_unpublished ON slices (job_id, slice_id)
    WHERE status = 'pending' AND published_ms IS NULL;
CREATE INDEX slices_published ON slices (job_id, published_ms)
    WHERE status = 'pending' AND published_ms IS NOT NULL;

-- What an approval asks for.
ALTER TABLE approvals ADD COLUMN kind TEXT NOT NULL DEFAULT 'job_budget';

-- approvals: newest first, all or pending only.
CREATE INDEX approvals_requested ON approvals (requested_ms, id);

-- Pages of items, rejections and trace steps are read by their primary keys
-- (job_id, slice_id, seq): no index to add.
