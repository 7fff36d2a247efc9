-- trawl store, SQLite, schema version 7: browser slices. A job's files
-- (screenshots), one row per (job, name), and the replay cache of browse steps.
-- See the Postgres migration 0006 for the whole story; the 10 MiB CHECK equals
-- `MAX_ARTIFACT_BYTES`, checked before the write.
CREATE TABLE artifacts (
    job_id        TEXT    NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    slice_id      TEXT,
    name          TEXT    NOT NULL,
    content_type  TEXT    NOT NULL,
    data          BLOB    NOT NULL CHECK (length(data) <= 10485760),
    created_ms    INTEGER NOT NULL,
    PRIMARY KEY (job_id, name)
);

CREATE INDEX artifacts_listing ON artifacts (job_id, created_ms, name);

CREATE TABLE browse_replays (
    key         TEXT    NOT NULL PRIMARY KEY,
    value       TEXT    NOT NULL,                 -- JSON
    updated_ms  INTEGER NOT NULL
);
