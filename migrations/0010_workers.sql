-- Workers as they report themselves: pool, capabilities (model providers and
-- default model, browser) and concurrency, at start and on a heartbeat. The API
-- refuses a job no reported worker can run (a research job with no model
-- worker), and `trawl workers` lists them with their last report.
--
-- One row per worker process, replaced by each report; `capabilities` is JSON
-- kept as text (trawl_core::workers::Capabilities).
CREATE TABLE workers (
    id            TEXT COLLATE "C" PRIMARY KEY,
    pool          TEXT    NOT NULL,
    capabilities  TEXT    NOT NULL,
    concurrency   BIGINT  NOT NULL,
    started_ms    BIGINT  NOT NULL,
    heartbeat_ms  BIGINT  NOT NULL
);
CREATE INDEX workers_by_heartbeat ON workers (heartbeat_ms);
