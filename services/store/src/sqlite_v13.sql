-- trawl store, SQLite, schema version 13: retention. See the Postgres migration
-- 0013.
ALTER TABLE jobs ADD COLUMN retention_ms INTEGER;

CREATE INDEX jobs_ended ON jobs (updated_ms)
    WHERE status IN ('succeeded', 'partial', 'failed', 'cancelled');

CREATE TABLE cost_months (
    month    TEXT    NOT NULL,
    product  TEXT    NOT NULL,
    amount   INTEGER NOT NULL,
    PRIMARY KEY (month, product)
) WITHOUT ROWID;
