-- trawl store, SQLite, schema version 5: approvals in Slack (and an outgoing
-- webhook): expiry, and the outbox of their notices.
--
-- The row is the outbox (see the Postgres migration 0004 for the whole story): a
-- notifier leases a row (`notify_lease_ms`), posts, and writes `notified_ms` (the
-- request) or `decision_notified_ms` (the outcome) only after a 2xx, so a notice
-- is delivered at least once. `expires_ms` is stamped from the TTL; an approval
-- still pending then is closed with `approved = 0, expired = 1`.
ALTER TABLE approvals ADD COLUMN expires_ms INTEGER;
ALTER TABLE approvals ADD COLUMN expired INTEGER NOT NULL DEFAULT 0
    CHECK (expired IN (0, 1) AND (expired = 0 OR approved = 0));
ALTER TABLE approvals ADD COLUMN notified_ms INTEGER;
ALTER TABLE approvals ADD COLUMN decision_notified_ms INTEGER;
ALTER TABLE approvals ADD COLUMN notify_lease_ms INTEGER;

CREATE INDEX approvals_notice_request ON approvals (id)
    WHERE approved IS NULL AND notified_ms IS NULL;
CREATE INDEX approvals_notice_decision ON approvals (id)
    WHERE approved IS NOT NULL AND notified_ms IS NOT NULL AND decision_notified_ms IS NULL;
CREATE INDEX approvals_expiry ON approvals (expires_ms) WHERE approved IS NULL;
