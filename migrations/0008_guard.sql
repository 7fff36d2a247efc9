-- The tool layer's guard: what it computed once and keeps.
--
-- `embeddings` caches sentence vectors by model (the first 16 hex digits of the
-- sha256 of the weights, so different weights never share a vector) and key
-- (sha256 of the text). A vector is its floats as little-endian f32 bytes
-- (384 × 4 bytes for all-MiniLM-L6-v2). Rows are only ever added: the same text
-- under the same weights always has the same vector.
--
-- `guard_verdicts` keeps a model judge's verdict on a definition (by the sha256 of
-- its canonical JSON), so the same definition is not judged twice by one model.
CREATE TABLE embeddings (
    model       TEXT COLLATE "C" NOT NULL,
    key         TEXT COLLATE "C" NOT NULL,
    vector      BYTEA  NOT NULL,
    created_ms  BIGINT NOT NULL,
    PRIMARY KEY (model, key)
);

CREATE TABLE guard_verdicts (
    model       TEXT COLLATE "C" NOT NULL,
    hash        TEXT COLLATE "C" NOT NULL,
    verdict     TEXT   NOT NULL,
    reason      TEXT   NOT NULL,
    decided_ms  BIGINT NOT NULL,
    PRIMARY KEY (model, hash)
);

-- A `tool_review` approval holds a definition the guard found suspect: like a
-- `tool_change`, at most one pending approval per tool, whatever its kind, and a
-- new hold replaces the pending one.
DROP INDEX approvals_pending_tool;
CREATE UNIQUE INDEX approvals_pending_tool ON approvals (tool)
    WHERE approved IS NULL AND kind IN ('tool_change', 'new_tool', 'tool_review');
