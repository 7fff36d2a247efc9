-- trawl store, SQLite, schema version 4: the tool layer.
--
-- Approvals are no longer only about jobs: a `tool_change` or `new_tool` approval
-- names a tool instead, and carries the definitions it decides on. SQLite cannot
-- drop a NOT NULL constraint, so the table is rebuilt with `job_id` optional.
CREATE TABLE approvals_v4 (
    id            INTEGER PRIMARY KEY,
    kind          TEXT    NOT NULL DEFAULT 'job_budget',
    job_id        TEXT    REFERENCES jobs (id),  -- job_budget
    tool          TEXT,                          -- tool_change, new_tool, tool_call
    args_digest   TEXT,                          -- tool_call: the call's arguments
    amount        INTEGER NOT NULL DEFAULT 0,    -- micro-dollars
    reason        TEXT    NOT NULL,
    detail        TEXT,                          -- JSON: old and new definition, diff
    approved      INTEGER CHECK (approved IN (0, 1)), -- NULL while pending
    decided_by    TEXT,
    requested_ms  INTEGER NOT NULL,
    decided_ms    INTEGER,
    CHECK ((job_id IS NULL) <> (tool IS NULL))
);
INSERT INTO approvals_v4 (id, kind, job_id, amount, reason, approved, decided_by,
    requested_ms, decided_ms)
SELECT id, kind, job_id, amount, reason, approved, decided_by, requested_ms, decided_ms
FROM approvals;
DROP TABLE approvals;
ALTER TABLE approvals_v4 RENAME TO approvals;

-- At most one pending approval per job, and per tool's definition; a new request
-- replaces it. One approval per tool call (tool and arguments), ever.
CREATE UNIQUE INDEX approvals_pending ON approvals (job_id) WHERE approved IS NULL;
CREATE UNIQUE INDEX approvals_pending_tool ON approvals (tool)
    WHERE approved IS NULL AND kind IN ('tool_change', 'new_tool');
CREATE UNIQUE INDEX approvals_tool_call ON approvals (tool, args_digest)
    WHERE kind = 'tool_call';
CREATE INDEX approvals_requested ON approvals (requested_ms, id);

-- A tool's pin: the definition approved for it (sha256 of its canonical JSON),
-- and a definition seen since that waits for, or was refused, approval.
CREATE TABLE tool_pins (
    tool                TEXT PRIMARY KEY,
    server              TEXT    NOT NULL,
    status              TEXT    NOT NULL
        CHECK (status IN ('active', 'quarantined', 'awaiting', 'rejected')),
    hash                TEXT,
    definition          TEXT,   -- JSON
    pending_hash        TEXT,
    pending_definition  TEXT,   -- JSON
    approval_id         INTEGER REFERENCES approvals (id),
    pinned_ms           INTEGER NOT NULL,
    approved_by         TEXT
);

-- Every call asked of the tool layer, allowed or not. Rows of a slice are keyed by
-- (job, slice, seq) so that writing an outcome twice stores them once.
CREATE TABLE tool_audit (
    id            INTEGER PRIMARY KEY,
    job_id        TEXT,
    slice_id      TEXT,
    seq           INTEGER NOT NULL,
    tool          TEXT    NOT NULL,
    args_digest   TEXT    NOT NULL,
    decision      TEXT    NOT NULL,
    reason        TEXT    NOT NULL,
    caller        TEXT    NOT NULL,
    latency_us    INTEGER NOT NULL,
    result_bytes  INTEGER NOT NULL,
    error         TEXT,
    at_ms         INTEGER NOT NULL
);
CREATE UNIQUE INDEX tool_audit_slice ON tool_audit (job_id, slice_id, seq)
    WHERE slice_id IS NOT NULL;
