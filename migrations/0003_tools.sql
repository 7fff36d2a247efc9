-- The tool layer: approvals that name a tool instead of a job, tool pins, and the
-- audit of every call.
ALTER TABLE approvals ALTER COLUMN job_id DROP NOT NULL;
ALTER TABLE approvals ALTER COLUMN amount SET DEFAULT 0;
ALTER TABLE approvals ADD COLUMN tool TEXT COLLATE "C";
ALTER TABLE approvals ADD COLUMN detail JSONB;
ALTER TABLE approvals ADD COLUMN args_digest TEXT;
ALTER TABLE approvals ADD CONSTRAINT approvals_subject CHECK ((job_id IS NULL) <> (tool IS NULL));
-- At most one pending approval per tool's definition; one per tool call, ever.
CREATE UNIQUE INDEX approvals_pending_tool ON approvals (tool)
    WHERE approved IS NULL AND kind IN ('tool_change', 'new_tool');
CREATE UNIQUE INDEX approvals_tool_call ON approvals (tool, args_digest)
    WHERE kind = 'tool_call';

-- A tool's pin: the definition approved for it (sha256 of its canonical JSON),
-- and a definition seen since that waits for, or was refused, approval.
CREATE TABLE tool_pins (
    tool                TEXT COLLATE "C" PRIMARY KEY,
    server              TEXT   NOT NULL,
    status              TEXT   NOT NULL
        CHECK (status IN ('active', 'quarantined', 'awaiting', 'rejected')),
    hash                TEXT,
    definition          JSONB,
    pending_hash        TEXT,
    pending_definition  JSONB,
    approval_id         BIGINT REFERENCES approvals (id),
    pinned_ms           BIGINT NOT NULL,
    approved_by         TEXT
);

-- Every call asked of the tool layer, allowed or not. Rows of a slice are keyed by
-- (job, slice, seq) so that writing an outcome twice stores them once.
CREATE TABLE tool_audit (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        TEXT COLLATE "C",
    slice_id      TEXT COLLATE "C",
    seq           BIGINT NOT NULL,
    tool          TEXT   NOT NULL,
    args_digest   TEXT   NOT NULL,
    decision      TEXT   NOT NULL,
    reason        TEXT   NOT NULL,
    caller        TEXT   NOT NULL,
    latency_us    BIGINT NOT NULL,
    result_bytes  BIGINT NOT NULL,
    error         TEXT,
    at_ms         BIGINT NOT NULL
);
CREATE UNIQUE INDEX tool_audit_slice ON tool_audit (job_id, slice_id, seq)
    WHERE slice_id IS NOT NULL;
