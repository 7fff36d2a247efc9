-- Approvals in Slack (and an outgoing webhook): expiry, and the outbox of their
-- notices.
--
-- Whatever process raises an approval (the scheduler a job's budget, a worker or
-- `trawl tools` a tool's), the notifier of a scheduler posts it: the row itself is
-- the outbox. A notifier claims a row by leasing it (`notify_lease_ms`, a time
-- until which no other notifier takes it), posts, and only after a 2xx writes
-- `notified_ms` (the request) or `decision_notified_ms` (the outcome). A notifier
-- that dies between posting and writing leaves the lease to run out, and the
-- notice is posted again: at least once, never lost.
--
-- `expires_ms` is stamped by the notifier from its TTL (`requested_ms` + TTL); an
-- approval still pending then is closed with `approved = false, expired = true`,
-- and its job, if it still waits, is cancelled with the reason.
ALTER TABLE approvals ADD COLUMN expires_ms BIGINT;
ALTER TABLE approvals ADD COLUMN expired BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE approvals ADD COLUMN notified_ms BIGINT;
ALTER TABLE approvals ADD COLUMN decision_notified_ms BIGINT;
ALTER TABLE approvals ADD COLUMN notify_lease_ms BIGINT;
ALTER TABLE approvals ADD CONSTRAINT approvals_expired_rejected
    CHECK (NOT expired OR approved = false);

-- claim_approval_notices: requests never announced, and outcomes of announced
-- requests not yet announced. Rows leave both once their notices are out.
CREATE INDEX approvals_notice_request ON approvals (id)
    WHERE approved IS NULL AND notified_ms IS NULL;
CREATE INDEX approvals_notice_decision ON approvals (id)
    WHERE approved IS NOT NULL AND notified_ms IS NOT NULL AND decision_notified_ms IS NULL;
-- expire_approvals: pending approvals by expiry.
CREATE INDEX approvals_expiry ON approvals (expires_ms) WHERE approved IS NULL;
