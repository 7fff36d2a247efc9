-- trawl store, SQLite, schema version 11: workers as they report themselves.
-- See the Postgres migration 0010.
CREATE TABLE workers (
    id            TEXT    PRIMARY KEY,
    pool          TEXT    NOT NULL,
    capabilities  TEXT    NOT NULL,
    concurrency   INTEGER NOT NULL,
    started_ms    INTEGER NOT NULL,
    heartbeat_ms  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX workers_by_heartbeat ON workers (heartbeat_ms);
