-- Browser slices: the files they produce, and the replay cache of their steps.
--
-- `artifacts` holds a job's files (screenshots), one row per (job, name): storing a
-- name again replaces the row. `slice_id` names the slice that produced one, or is
-- NULL for a file of the job as a whole; it is not a foreign key, so a file may be
-- stored before or apart from its slice's outcome. The bytes are at most 10 MiB
-- (`MAX_ARTIFACT_BYTES`, checked before the write; the CHECK is the backstop), kept
-- out of line uncompressed (`STORAGE EXTERNAL`): PNGs do not compress, and a
-- listing reads `octet_length` without fetching them.
--
-- `browse_replays` maps a browse step's key to what resolved it (a model step's
-- chosen action), so the next run replays it without asking the model.
CREATE TABLE artifacts (
    job_id        TEXT COLLATE "C" NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    slice_id      TEXT COLLATE "C",
    name          TEXT COLLATE "C" NOT NULL,
    content_type  TEXT   NOT NULL,
    data          BYTEA  NOT NULL CHECK (octet_length(data) <= 10485760),
    created_ms    BIGINT NOT NULL,
    PRIMARY KEY (job_id, name)
);
ALTER TABLE artifacts ALTER COLUMN data SET STORAGE EXTERNAL;

-- artifacts: a job's files by time produced, then name.
CREATE INDEX artifacts_listing ON artifacts (job_id, created_ms, name);

CREATE TABLE browse_replays (
    key         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    value       JSONB  NOT NULL,
    updated_ms  BIGINT NOT NULL
);
