-- trawl store, SQLite, schema version 15: tenants' quotas and idempotency keys
-- per (tenant, caller, key). See the Postgres migration 0017.
ALTER TABLE jobs ADD COLUMN slices_max INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN approve_above INTEGER;

CREATE INDEX jobs_tenant_created ON jobs (COALESCE(tenant, owner), created_ms)
    WHERE owner IS NOT NULL;
CREATE INDEX jobs_tenant_active ON jobs (COALESCE(tenant, owner))
    WHERE owner IS NOT NULL
      AND status IN ('pending', 'awaiting_approval', 'queued', 'running');

DROP INDEX jobs_idempotency_key;
UPDATE jobs SET idempotency_key = substr(idempotency_key, length(owner) + 2)
    WHERE idempotency_key IS NOT NULL AND owner IS NOT NULL
      AND substr(idempotency_key, 1, length(owner) + 1) = owner || '/';
CREATE UNIQUE INDEX jobs_idempotency_key
    ON jobs (COALESCE(tenant, ''), COALESCE(owner, ''), idempotency_key)
    WHERE idempotency_key IS NOT NULL;
