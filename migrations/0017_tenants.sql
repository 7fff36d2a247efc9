-- Tenants and their quotas (issue 42), and idempotency keys per caller.
--
-- `slices_max`: the most slices a job can have, as submitted; a tenant's slices in
-- flight count it for a job not yet planned.
ALTER TABLE jobs ADD COLUMN slices_max BIGINT NOT NULL DEFAULT 0;
-- `approve_above`: the estimate above which the job waits for approval, as its
-- submission set it (the lower of its spec's and its tenant's), micro-dollars;
-- NULL: the spec's.
ALTER TABLE jobs ADD COLUMN approve_above BIGINT;

-- A tenant's jobs, by the key quotas count them for (the tenant, else the
-- caller): by day for usage, and the unfinished ones for what is in flight.
CREATE INDEX jobs_tenant_created ON jobs ((COALESCE(tenant, owner)), created_ms)
    WHERE owner IS NOT NULL;
CREATE INDEX jobs_tenant_active ON jobs ((COALESCE(tenant, owner)))
    WHERE owner IS NOT NULL
      AND status IN ('pending', 'awaiting_approval', 'queued', 'running');

-- An idempotency key is unique per (tenant, caller, key), each its own column.
-- Keys were stored as `<caller>/<key>` in one column, so that caller `p` with key
-- `x/k` and caller `p/x` with key `k` took one key; the caller's part is taken
-- off the keys stored before.
DROP INDEX jobs_idempotency_key;
UPDATE jobs SET idempotency_key = substr(idempotency_key, length(owner) + 2)
    WHERE idempotency_key IS NOT NULL AND owner IS NOT NULL
      AND left(idempotency_key, length(owner) + 1) = owner || '/';
CREATE UNIQUE INDEX jobs_idempotency_key
    ON jobs ((COALESCE(tenant, '')), (COALESCE(owner, '')), idempotency_key)
    WHERE idempotency_key IS NOT NULL;
