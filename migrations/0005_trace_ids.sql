-- Trace context (issue: operate it). A job keeps the W3C traceparent of the
-- span that submitted it, so planning and its slices continue that trace; each
-- trace step keeps the trace and span of its tool call, so a step links to its
-- span in Jaeger. Both are NULL when traces are not exported.
ALTER TABLE jobs ADD COLUMN traceparent TEXT;
ALTER TABLE trace_steps ADD COLUMN trace_id TEXT;
ALTER TABLE trace_steps ADD COLUMN span_id TEXT;
