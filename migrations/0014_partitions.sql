-- The big insert-only tables of a job's rows (items, rejections, trace_steps,
-- costs) partitioned by time, one partition a day (docs/scaling.md).
--
-- The partition key is the job id: ids are `job_` followed by the job's creation
-- time in milliseconds as 12 hex digits (then random bits), and the ids are
-- compared byte by byte (COLLATE "C"), so a day of jobs is a range of ids. Every
-- primary key already starts with the job id and every read names one job, so
-- reads and the outcome statement touch one partition and nothing else changes.
--
-- This migration renames each table to `<table>_p0` and attaches it as the
-- partition of every id before this migration ran (Postgres checks its rows
-- once: a scan, no copy), adds the partition of the rest of today, and a default
-- partition that takes a row whose day has no partition yet. The scheduler keeps
-- the next days' partitions made ahead and drops a past day's once retention has
-- deleted every job of it (`PgStore::keep_partitions`). Partitions are named
-- `<table>_pYYYYMMDD` (UTC).
DO $$
DECLARE
    t      TEXT;
    now_ms BIGINT := (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT;
    cut    TEXT := 'job_' || lpad(to_hex(now_ms), 12, '0');
    next   TEXT := 'job_' || lpad(to_hex(now_ms - now_ms % 86400000 + 86400000), 12, '0');
    today  TEXT := to_char(to_timestamp(now_ms / 1000.0) AT TIME ZONE 'UTC', 'YYYYMMDD');
BEGIN
    FOREACH t IN ARRAY ARRAY['items', 'rejections', 'trace_steps', 'costs'] LOOP
        EXECUTE format('ALTER TABLE %I RENAME TO %I', t, t || '_p0');
        EXECUTE format(
            'CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS, '
            'PRIMARY KEY (job_id, slice_id, seq), '
            'FOREIGN KEY (job_id, slice_id) REFERENCES slices (job_id, slice_id)) '
            'PARTITION BY RANGE (job_id)',
            t, t || '_p0');
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)',
            t, t || '_p0', cut);
        EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
            t || '_p' || today, t, cut, next);
        EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', t || '_default', t);
    END LOOP;
END $$;
