-- Jobs belong to their caller (the security issue: each caller sees only its own
-- jobs). `owner` is the caller as the API names it (`key:<name>`,
-- `key-<digest>`, `sub:<subject>`, `api`), `owner_client` the OAuth client of
-- its token, `tenant` the configured tenant claim: callers of one tenant share
-- their jobs. All NULL for jobs of `trawl run` and jobs stored before this
-- migration: those are visible to admins only. Reads go by job id, so no index.
ALTER TABLE jobs ADD COLUMN owner TEXT COLLATE "C";
ALTER TABLE jobs ADD COLUMN owner_client TEXT COLLATE "C";
ALTER TABLE jobs ADD COLUMN tenant TEXT COLLATE "C";
