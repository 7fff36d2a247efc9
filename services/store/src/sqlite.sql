-- trawl store, SQLite, schema version 1.
--
-- Applied once by `SqliteStore::open`, inside one transaction, which then sets
-- `PRAGMA user_version = 1`. A later change goes into a new file applied after this
-- one (version 2), never into this one.
--
-- Conventions: ids are TEXT; money is INTEGER micro-dollars (never REAL); times are
-- INTEGER milliseconds since the Unix epoch; documents (specs, item data,
-- violations) are JSON text.

CREATE TABLE jobs (
    id          TEXT    NOT NULL PRIMARY KEY,
    name        TEXT    NOT NULL,
    spec        TEXT    NOT NULL,                 -- the JobSpec document, JSON
    status      TEXT    NOT NULL,
    reason      TEXT,
    estimate    INTEGER NOT NULL,                 -- micro-dollars
    created_ms  INTEGER NOT NULL,
    updated_ms  INTEGER NOT NULL
);

-- Per-job counters, kept equal to the rows below by the triggers at the end of this
-- file, so that `counts` and `spent` read one row however large the job is. Rows are
-- never deleted or their counted columns updated outside these triggers; a path that
-- does must add the matching triggers.
CREATE TABLE job_counts (
    job_id            TEXT    NOT NULL PRIMARY KEY REFERENCES jobs (id),
    slices_total      INTEGER NOT NULL DEFAULT 0,
    slices_succeeded  INTEGER NOT NULL DEFAULT 0,
    slices_failed     INTEGER NOT NULL DEFAULT 0,
    budget_stops      INTEGER NOT NULL DEFAULT 0, -- failed with error_code 'budget_exhausted'
    items_valid       INTEGER NOT NULL DEFAULT 0,
    items_rejected    INTEGER NOT NULL DEFAULT 0,
    upstream_calls    INTEGER NOT NULL DEFAULT 0, -- trace steps with cache_hit = 0
    cache_hits        INTEGER NOT NULL DEFAULT 0, -- trace steps with cache_hit = 1
    cost              INTEGER NOT NULL DEFAULT 0  -- SUM(costs.amount), micro-dollars
) WITHOUT ROWID;

CREATE TABLE slices (
    job_id         TEXT    NOT NULL REFERENCES jobs (id),
    slice_id       TEXT    NOT NULL,
    parent_id      TEXT,
    kind           TEXT    NOT NULL,              -- search | page
    spec           TEXT    NOT NULL,              -- the SliceSpec, JSON
    status         TEXT    NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'succeeded', 'failed')),
    error_code     TEXT,
    error_message  TEXT,
    created_ms     INTEGER NOT NULL,
    finished_ms    INTEGER,
    PRIMARY KEY (job_id, slice_id)
);
-- A rowid table, not WITHOUT ROWID: rows carry their spec (a few hundred bytes) and
-- slice ids are random, so keying the rows themselves by id would scatter 100,000
-- inserts over the whole table. Rows are appended; only the key index is random.

-- open_slices and failed_slices, in slice order. Partial indexes rather than one on
-- (job_id, status): an outcome then moves no index entry, it only drops one from
-- slices_pending (and adds one to slices_failed when it failed).
CREATE INDEX slices_pending ON slices (job_id, slice_id) WHERE status = 'pending';
CREATE INDEX slices_failed ON slices (job_id, slice_id) WHERE status = 'failed';

CREATE TABLE items (
    job_id    TEXT    NOT NULL,
    slice_id  TEXT    NOT NULL,
    seq       INTEGER NOT NULL,
    kind      TEXT    NOT NULL,                   -- page | serp
    url       TEXT    NOT NULL,
    geo       TEXT    NOT NULL,
    data      TEXT    NOT NULL,                   -- JSON
    PRIMARY KEY (job_id, slice_id, seq),
    FOREIGN KEY (job_id, slice_id) REFERENCES slices (job_id, slice_id)
);

CREATE TABLE rejections (
    job_id    TEXT    NOT NULL,
    slice_id  TEXT    NOT NULL,
    seq       INTEGER NOT NULL,
    url       TEXT    NOT NULL,
    geo       TEXT    NOT NULL,
    data      TEXT    NOT NULL,                   -- JSON
    errors    TEXT    NOT NULL,                   -- JSON array of violations
    PRIMARY KEY (job_id, slice_id, seq),
    FOREIGN KEY (job_id, slice_id) REFERENCES slices (job_id, slice_id)
);

CREATE TABLE trace_steps (
    job_id       TEXT    NOT NULL,
    slice_id     TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    tool         TEXT    NOT NULL,
    args_digest  TEXT    NOT NULL,
    cache_hit    INTEGER NOT NULL CHECK (cache_hit IN (0, 1)),
    attempt      INTEGER NOT NULL,
    status       TEXT    NOT NULL,
    error        TEXT,
    latency_us   INTEGER NOT NULL,
    cost         INTEGER NOT NULL,                -- micro-dollars
    at_ms        INTEGER NOT NULL,
    PRIMARY KEY (job_id, slice_id, seq),
    FOREIGN KEY (job_id, slice_id) REFERENCES slices (job_id, slice_id)
) WITHOUT ROWID;

CREATE TABLE costs (
    job_id    TEXT    NOT NULL,
    slice_id  TEXT    NOT NULL,
    seq       INTEGER NOT NULL,
    product   TEXT    NOT NULL,
    amount    INTEGER NOT NULL,                   -- micro-dollars
    PRIMARY KEY (job_id, slice_id, seq),
    FOREIGN KEY (job_id, slice_id) REFERENCES slices (job_id, slice_id)
) WITHOUT ROWID;

CREATE TABLE approvals (
    id            INTEGER PRIMARY KEY,
    job_id        TEXT    NOT NULL REFERENCES jobs (id),
    amount        INTEGER NOT NULL,               -- micro-dollars
    reason        TEXT    NOT NULL,
    approved      INTEGER CHECK (approved IN (0, 1)), -- NULL while pending
    decided_by    TEXT,
    requested_ms  INTEGER NOT NULL,
    decided_ms    INTEGER
);

-- At most one pending approval per job; a new request replaces it (upsert).
CREATE UNIQUE INDEX approvals_pending ON approvals (job_id) WHERE approved IS NULL;

-- Counters. A row skipped by ON CONFLICT DO NOTHING fires no INSERT trigger, so
-- only what is stored is counted.

CREATE TRIGGER jobs_count AFTER INSERT ON jobs BEGIN
    INSERT INTO job_counts (job_id) VALUES (NEW.id);
END;

CREATE TRIGGER slices_count_insert AFTER INSERT ON slices BEGIN
    UPDATE job_counts SET
        slices_total     = slices_total + 1,
        slices_succeeded = slices_succeeded + (NEW.status = 'succeeded'),
        slices_failed    = slices_failed + (NEW.status = 'failed'),
        budget_stops     = budget_stops
                         + (NEW.status = 'failed' AND NEW.error_code IS 'budget_exhausted')
    WHERE job_id = NEW.job_id;
END;

CREATE TRIGGER slices_count_update AFTER UPDATE OF status, error_code ON slices BEGIN
    UPDATE job_counts SET
        slices_succeeded = slices_succeeded
                         + (NEW.status = 'succeeded') - (OLD.status = 'succeeded'),
        slices_failed    = slices_failed
                         + (NEW.status = 'failed') - (OLD.status = 'failed'),
        budget_stops     = budget_stops
                         + (NEW.status = 'failed' AND NEW.error_code IS 'budget_exhausted')
                         - (OLD.status = 'failed' AND OLD.error_code IS 'budget_exhausted')
    WHERE job_id = NEW.job_id;
END;

CREATE TRIGGER items_count AFTER INSERT ON items BEGIN
    UPDATE job_counts SET items_valid = items_valid + 1 WHERE job_id = NEW.job_id;
END;

CREATE TRIGGER rejections_count AFTER INSERT ON rejections BEGIN
    UPDATE job_counts SET items_rejected = items_rejected + 1 WHERE job_id = NEW.job_id;
END;

CREATE TRIGGER trace_steps_count AFTER INSERT ON trace_steps BEGIN
    UPDATE job_counts SET
        upstream_calls = upstream_calls + (NEW.cache_hit = 0),
        cache_hits     = cache_hits + (NEW.cache_hit = 1)
    WHERE job_id = NEW.job_id;
END;

CREATE TRIGGER costs_count AFTER INSERT ON costs BEGIN
    UPDATE job_counts SET cost = cost + NEW.amount WHERE job_id = NEW.job_id;
END;
