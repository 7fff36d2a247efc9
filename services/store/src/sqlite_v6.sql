-- trawl store, SQLite, schema version 6: trace context. A job keeps the W3C
-- traceparent of the span that submitted it; a trace step keeps the trace and
-- span of its tool call. NULL when traces are not exported.
ALTER TABLE jobs ADD COLUMN traceparent TEXT;
ALTER TABLE trace_steps ADD COLUMN trace_id TEXT;
ALTER TABLE trace_steps ADD COLUMN span_id TEXT;
