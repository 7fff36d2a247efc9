-- trawl store, Postgres, migration 1: the whole schema of the deployed shape.
--
-- Applied by `PgStore::connect` and `trawl migrate` (sqlx's migrator, under its
-- advisory lock, in one transaction). Never edited once released: sqlx keeps a
-- checksum of every applied file and refuses a database whose files changed. A
-- later change is a new file, `0002_….sql`.
--
-- The tables have the shape of the SQLite store's (`services/store/src/sqlite.sql`
-- and `sqlite_v2.sql`), with these differences:
--
-- - ids are `TEXT COLLATE "C"`: compared byte by byte, as SQLite does, so pages
--   come in the same order from both stores, and faster than a locale's collation;
-- - documents (specs, item data, violations) are JSONB;
-- - there is no `job_counts` row kept by triggers: every outcome of a job would
--   update it, so concurrent outcomes of one job would wait for each other on its
--   row lock. Each slice row carries the tallies of its own outcome instead
--   (written by the same statement that claims the slice), and `counts` and
--   `spent` add up the job's slices.
--
-- Money is BIGINT micro-dollars (never floating point); times are BIGINT
-- milliseconds since the Unix epoch.

CREATE TABLE jobs (
    id               TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    name             TEXT   NOT NULL,
    spec             JSONB  NOT NULL,             -- the JobSpec document
    status           TEXT   NOT NULL,
    reason           TEXT,
    estimate         BIGINT NOT NULL,             -- micro-dollars
    created_ms       BIGINT NOT NULL,
    updated_ms       BIGINT NOT NULL,
    -- The client's `Idempotency-Key` and the sha256 of its request body; NULL for
    -- jobs stored without one (`trawl run`).
    idempotency_key  TEXT,
    request_digest   TEXT
);

-- A key names at most one job.
CREATE UNIQUE INDEX jobs_idempotency_key ON jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- jobs_with_status: the live jobs, oldest first.
CREATE INDEX jobs_status ON jobs (status, created_ms, id);

CREATE TABLE slices (
    job_id          TEXT COLLATE "C" NOT NULL REFERENCES jobs (id),
    slice_id        TEXT COLLATE "C" NOT NULL,
    parent_id       TEXT COLLATE "C",
    kind            TEXT   NOT NULL,              -- search | page
    spec            JSONB  NOT NULL,              -- the SliceSpec
    status          TEXT   NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'succeeded', 'failed')),
    error_code      TEXT,
    error_message   TEXT,
    created_ms      BIGINT NOT NULL,
    finished_ms     BIGINT,
    -- When the slice was last handed to the queue; NULL while it never was.
    published_ms    BIGINT,
    -- The tallies of the slice's outcome, written when it is claimed; zero while
    -- pending. They equal the rows stored under the slice below.
    items_valid     INTEGER NOT NULL DEFAULT 0,
    items_rejected  INTEGER NOT NULL DEFAULT 0,
    upstream_calls  INTEGER NOT NULL DEFAULT 0,   -- trace steps with cache_hit = false
    cache_hits      INTEGER NOT NULL DEFAULT 0,   -- trace steps with cache_hit = true
    cost            BIGINT  NOT NULL DEFAULT 0,   -- SUM(costs.amount), micro-dollars
    PRIMARY KEY (job_id, slice_id)
);

-- open_slices and failed_slices, in slice order. Partial, so an outcome only drops
-- an entry from slices_pending (and adds one to slices_failed when it failed).
-- `counts` and `spent` read a job's slices through the primary key.
CREATE INDEX slices_pending ON slices (job_id, slice_id) WHERE status = 'pending';
CREATE INDEX slices_failed ON slices (job_id, slice_id) WHERE status = 'failed';

-- slices_to_publish, without walking every pending slice already published: the
-- ones never published, in slice order, and the published ones by time (a
-- republication after a lost message is rare, so these are few and sorted).
CREATE INDEX slices_unpublished ON slices (job_id, slice_id)
    WHERE status = 'pending' AND published_ms IS NULL;
CREATE INDEX slices_published ON slices (job_id, published_ms)
    WHERE status = 'pending' AND published_ms IS NOT NULL;

-- The rows a slice produced, keyed by (job, slice, seq): a redelivered outcome
-- inserts nothing twice (ON CONFLICT DO NOTHING), and pages are read in key order.

CREATE TABLE items (
    job_id    TEXT COLLATE "C" NOT NULL,
    slice_id  TEXT COLLATE "C" NOT NULL,
    seq       BIGINT NOT NULL,
    kind      TEXT   NOT NULL,                    -- page | serp
    url       TEXT   NOT NULL,
    geo       TEXT   NOT NULL,
    data      JSONB  NOT NULL,
    PRIMARY KEY (job_id, slice_id, seq),
    FOREIGN KEY (job_id, slice_id) REFERENCES slices (job_id, slice_id)
);

CREATE TABLE rejections (
    job_id    TEXT COLLATE "C" NOT NULL,
    slice_id  TEXT COLLATE "C" NOT NULL,
    seq       BIGINT NOT NULL,
    url       TEXT   NOT NULL,
    geo       TEXT   NOT NULL,
    data      JSONB  NOT NULL,
    errors    JSONB  NOT NULL,                    -- array of violations
    PRIMARY KEY (job_id, slice_id, seq),
    FOREIGN KEY (job_id, slice_id) REFERENCES slices (job_id, slice_id)
);

CREATE TABLE trace_steps (
    job_id       TEXT COLLATE "C" NOT NULL,
    slice_id     TEXT COLLATE "C" NOT NULL,
    seq          BIGINT  NOT NULL,
    tool         TEXT    NOT NULL,
    args_digest  TEXT    NOT NULL,
    cache_hit    BOOLEAN NOT NULL,
    attempt      BIGINT  NOT NULL,
    status       TEXT    NOT NULL,
    error        TEXT,
    latency_us   BIGINT  NOT NULL,
    cost         BIGINT  NOT NULL,                -- micro-dollars
    at_ms        BIGINT  NOT NULL,
    PRIMARY KEY (job_id, slice_id, seq),
    FOREIGN KEY (job_id, slice_id) REFERENCES slices (job_id, slice_id)
);

CREATE TABLE costs (
    job_id    TEXT COLLATE "C" NOT NULL,
    slice_id  TEXT COLLATE "C" NOT NULL,
    seq       BIGINT NOT NULL,
    product   TEXT   NOT NULL,
    amount    BIGINT NOT NULL,                    -- micro-dollars
    PRIMARY KEY (job_id, slice_id, seq),
    FOREIGN KEY (job_id, slice_id) REFERENCES slices (job_id, slice_id)
);

CREATE TABLE approvals (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        TEXT COLLATE "C" NOT NULL REFERENCES jobs (id),
    kind          TEXT   NOT NULL DEFAULT 'job_budget',
    amount        BIGINT NOT NULL,                -- micro-dollars
    reason        TEXT   NOT NULL,
    approved      BOOLEAN,                        -- NULL while pending
    decided_by    TEXT,
    requested_ms  BIGINT NOT NULL,
    decided_ms    BIGINT
);

-- At most one pending approval per job; a new request replaces it (upsert).
CREATE UNIQUE INDEX approvals_pending ON approvals (job_id) WHERE approved IS NULL;

-- approvals: newest first, all or pending only.
CREATE INDEX approvals_requested ON approvals (requested_ms, id);
