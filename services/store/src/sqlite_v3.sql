-- trawl store, SQLite, schema version 3: the shared budget ledger.
--
-- `budget_reserved` is every reservation made for the job's upstream calls, in
-- micro-dollars: what was billed, plus calls in flight. Workers reserve before a
-- call and only while the total stays within the job's max_usd, so several
-- processes spending for one job never pass it together. A reservation of a
-- process that died is never released: the ledger errs on the side of spending
-- less.
ALTER TABLE jobs ADD COLUMN budget_reserved INTEGER NOT NULL DEFAULT 0;
