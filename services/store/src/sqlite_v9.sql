-- trawl store, SQLite, schema version 9: the tool layer's guard keeps sentence
-- embeddings (little-endian f32 bytes) and model verdicts, and a `tool_review`
-- approval holds a suspect definition, one pending approval per tool as for
-- `tool_change`. See the Postgres migration 0008.
CREATE TABLE embeddings (
    model       TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    vector      BLOB    NOT NULL,
    created_ms  INTEGER NOT NULL,
    PRIMARY KEY (model, key)
) WITHOUT ROWID;

CREATE TABLE guard_verdicts (
    model       TEXT    NOT NULL,
    hash        TEXT    NOT NULL,
    verdict     TEXT    NOT NULL,
    reason      TEXT    NOT NULL,
    decided_ms  INTEGER NOT NULL,
    PRIMARY KEY (model, hash)
) WITHOUT ROWID;

DROP INDEX approvals_pending_tool;
CREATE UNIQUE INDEX approvals_pending_tool ON approvals (tool)
    WHERE approved IS NULL AND kind IN ('tool_change', 'new_tool', 'tool_review');
