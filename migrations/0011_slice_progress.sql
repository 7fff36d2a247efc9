-- Where a model-driven slice's conversation stands, saved after each model turn
-- (with the turn's trace steps, cost entries and audit rows, written to their own
-- tables as they happen), so that a slice delivered again resumes at its next
-- turn and no paid turn is lost or billed twice. `state` is the slice's own JSON,
-- kept as text; one row per slice, replaced by each save.
CREATE TABLE slice_progress (
    job_id    TEXT COLLATE "C" NOT NULL,
    slice_id  TEXT COLLATE "C" NOT NULL,
    state     TEXT   NOT NULL,
    saved_ms  BIGINT NOT NULL,
    PRIMARY KEY (job_id, slice_id),
    FOREIGN KEY (job_id, slice_id) REFERENCES slices (job_id, slice_id)
);
