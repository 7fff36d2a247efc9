-- trawl store, SQLite, schema version 12: where a model-driven slice's
-- conversation stands. See the Postgres migration 0011.
CREATE TABLE slice_progress (
    job_id    TEXT    NOT NULL,
    slice_id  TEXT    NOT NULL,
    state     TEXT    NOT NULL,
    saved_ms  INTEGER NOT NULL,
    PRIMARY KEY (job_id, slice_id),
    FOREIGN KEY (job_id, slice_id) REFERENCES slices (job_id, slice_id)
) WITHOUT ROWID;
