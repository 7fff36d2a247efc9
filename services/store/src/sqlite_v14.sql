-- trawl store, SQLite, schema version 14: cost rows keyed by the attempt that
-- made the call as well. See the Postgres migration 0015. SQLite cannot change
-- a primary key, so the table is made again; its counting trigger with it.
CREATE TABLE costs_v14 (
    job_id    TEXT    NOT NULL,
    slice_id  TEXT    NOT NULL,
    attempt   TEXT    NOT NULL DEFAULT '',
    seq       INTEGER NOT NULL,
    product   TEXT    NOT NULL,
    amount    INTEGER NOT NULL,                   -- micro-dollars
    PRIMARY KEY (job_id, slice_id, attempt, seq),
    FOREIGN KEY (job_id, slice_id) REFERENCES slices (job_id, slice_id)
) WITHOUT ROWID;

INSERT INTO costs_v14 (job_id, slice_id, attempt, seq, product, amount)
    SELECT job_id, slice_id, '', seq, product, amount FROM costs;
DROP TABLE costs;
ALTER TABLE costs_v14 RENAME TO costs;

CREATE TRIGGER costs_count AFTER INSERT ON costs BEGIN
    UPDATE job_counts SET cost = cost + NEW.amount WHERE job_id = NEW.job_id;
END;
