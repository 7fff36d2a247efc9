-- trawl store, SQLite, schema version 8: jobs belong to their caller. See the
-- Postgres migration 0007.
ALTER TABLE jobs ADD COLUMN owner TEXT;
ALTER TABLE jobs ADD COLUMN owner_client TEXT;
ALTER TABLE jobs ADD COLUMN tenant TEXT;
