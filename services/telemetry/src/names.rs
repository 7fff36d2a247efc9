//! The metrics every role records, by name, and the functions that record them,
//! so a name or a label set is written in one place.
//!
//! Counters end in `_total`, durations are seconds (`_seconds`, rendered as
//! histograms with the buckets of [`crate::install_metrics`]), money is
//! micro-dollars (millionths of a US dollar, exact).

use std::time::Duration;

use metrics::{Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge};

pub const SLICES: &str = "trawl_slices_total";
pub const ITEMS: &str = "trawl_items_total";
pub const COST: &str = "trawl_cost_microdollars_total";
pub const TOOL_CALL_DURATION: &str = "trawl_tool_call_duration_seconds";
pub const UPSTREAM_CALLS: &str = "trawl_upstream_calls_total";
pub const RETRIES: &str = "trawl_retries_total";
pub const CACHE_LOOKUPS: &str = "trawl_cache_lookups_total";
pub const APPROVALS_PENDING: &str = "trawl_approvals_pending";
pub const QUEUE_LAG: &str = "trawl_queue_lag";
pub const MODEL_TURNS: &str = "trawl_model_turns_total";
pub const MODEL_TOKENS: &str = "trawl_model_tokens_total";
pub const MODEL_TURN_DURATION: &str = "trawl_model_turn_duration_seconds";
pub const TENANT_SUBMISSIONS: &str = "trawl_tenant_submissions_total";
pub const TENANT_SPEND_TODAY: &str = "trawl_tenant_spend_today_microdollars";
pub const TENANT_SLICES_IN_FLIGHT: &str = "trawl_tenant_slices_in_flight";
pub const TENANT_LIMIT: &str = "trawl_tenant_limit";

/// Help texts, shown in `/metrics` as `# HELP`.
pub(crate) fn describe() {
    describe_counter!(
        SLICES,
        "Slices recorded, by kind (search, page, research, agent, report) and outcome (succeeded, failed)."
    );
    describe_counter!(
        ITEMS,
        "Items a slice yielded, by outcome: valid (kept) or rejected by the job's schema."
    );
    describe_counter!(
        COST,
        "Cost recorded in the ledger, in micro-dollars (1e-6 USD)."
    );
    describe_histogram!(
        TOOL_CALL_DURATION,
        Unit::Seconds,
        "Tool calls through the tool layer, from the policy check to the sanitized result, by tool and outcome."
    );
    describe_counter!(
        UPSTREAM_CALLS,
        "Attempts sent to a tool's provider (Bright Data, an upstream MCP server), by tool and status (ok or the error code)."
    );
    describe_counter!(
        RETRIES,
        "Attempts after the first of one tool call, by tool."
    );
    describe_counter!(
        CACHE_LOOKUPS,
        "Content cache lookups, by result: hit (served from the cache, or shared with a call in flight) or miss."
    );
    describe_counter!(
        MODEL_TURNS,
        "Model turns of research slices, by model and outcome (ok or the error code)."
    );
    describe_counter!(
        MODEL_TOKENS,
        "Tokens of model turns, by model and kind (input, output, cache_write, cache_read)."
    );
    describe_histogram!(
        MODEL_TURN_DURATION,
        Unit::Seconds,
        "Model turns, from request to response (client retries included), by model."
    );
    describe_counter!(
        TENANT_SUBMISSIONS,
        "Job submissions checked against their tenant's limits, by tenant (those the operator named, else other) and outcome (accepted, or the limit it was over)."
    );
    describe_gauge!(
        TENANT_SPEND_TODAY,
        "What a tenant's jobs of today have spent or may spend (unfinished at their estimate), at its last submission, by tenant (named, else other)."
    );
    describe_gauge!(
        TENANT_SLICES_IN_FLIGHT,
        "A tenant's slices not yet done, at its last submission, by tenant (named, else other)."
    );
    describe_gauge!(
        TENANT_LIMIT,
        "A tenant's limit, by tenant (named, or * for the default) and limit (usd_* in dollars)."
    );
    describe_gauge!(APPROVALS_PENDING, "Approvals waiting for a decision.");
    describe_gauge!(
        QUEUE_LAG,
        "Slices waiting on the queue or in flight (what the autoscaler reads)."
    );
}

/// A slice's outcome was written (once per slice, not per delivery).
pub fn slice_recorded(kind: &'static str, succeeded: bool, valid: u64, rejected: u64, cost: u64) {
    let outcome = if succeeded { "succeeded" } else { "failed" };
    counter!(SLICES, "kind" => kind, "outcome" => outcome).increment(1);
    counter!(ITEMS, "outcome" => "valid").increment(valid);
    counter!(ITEMS, "outcome" => "rejected").increment(rejected);
    counter!(COST).increment(cost);
}

/// One call through the tool layer ended: `outcome` is `ok`, `refused` or the
/// error code.
pub fn tool_call(tool: &str, outcome: &str, elapsed: Duration) {
    metrics::histogram!(TOOL_CALL_DURATION, "tool" => tool.to_owned(), "outcome" => outcome.to_owned())
        .record(elapsed.as_secs_f64());
}

/// One attempt at a provider ended; `attempt` is 1-based.
pub fn upstream_attempt(tool: &str, attempt: u32, status: &str) {
    counter!(UPSTREAM_CALLS, "tool" => tool.to_owned(), "status" => status.to_owned()).increment(1);
    if attempt > 1 {
        counter!(RETRIES, "tool" => tool.to_owned()).increment(1);
    }
}

/// One model turn ended; `tokens` are input, output, cache writes and cache
/// reads (zero when it failed).
pub fn model_turn(model: &str, outcome: &str, elapsed: Duration, tokens: [u64; 4]) {
    counter!(MODEL_TURNS, "model" => model.to_owned(), "outcome" => outcome.to_owned())
        .increment(1);
    metrics::histogram!(MODEL_TURN_DURATION, "model" => model.to_owned())
        .record(elapsed.as_secs_f64());
    for (kind, n) in ["input", "output", "cache_write", "cache_read"]
        .into_iter()
        .zip(tokens)
    {
        if n > 0 {
            counter!(MODEL_TOKENS, "model" => model.to_owned(), "kind" => kind).increment(n);
        }
    }
}

/// A cache lookup: served from the cache (or a call in flight) or not.
pub fn cache_lookup(hit: bool) {
    counter!(CACHE_LOOKUPS, "result" => if hit { "hit" } else { "miss" }).increment(1);
}

pub fn approvals_pending(n: u64) {
    gauge!(APPROVALS_PENDING).set(n as f64);
}

pub fn queue_lag(n: u64) {
    gauge!(QUEUE_LAG).set(n as f64);
}

/// A submission checked against its tenant's limits. `tenant` must be one of a
/// bounded set (the tenants the operator named, else `other`); `outcome` is
/// `accepted` or the name of the limit it was over.
pub fn tenant_submission(tenant: &str, outcome: &'static str, spend_today: i64, in_flight: u64) {
    counter!(TENANT_SUBMISSIONS, "tenant" => tenant.to_owned(), "outcome" => outcome).increment(1);
    gauge!(TENANT_SPEND_TODAY, "tenant" => tenant.to_owned()).set(spend_today as f64);
    gauge!(TENANT_SLICES_IN_FLIGHT, "tenant" => tenant.to_owned()).set(in_flight as f64);
}

/// A configured limit (`tenant` named, or `*`).
pub fn tenant_limit(tenant: &str, limit: &'static str, value: f64) {
    gauge!(TENANT_LIMIT, "tenant" => tenant.to_owned(), "limit" => limit).set(value);
}
