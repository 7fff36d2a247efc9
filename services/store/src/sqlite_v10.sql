-- trawl store, SQLite, schema version 10: each upstream server's last good
-- `tools/list` (a JSON array, as text) and when it was listed. See the Postgres
-- migration 0009.
CREATE TABLE tool_listings (
    server      TEXT    PRIMARY KEY,
    tools       TEXT    NOT NULL,
    listed_ms   INTEGER NOT NULL
) WITHOUT ROWID;
