//! The tool layer: the one place every tool call of every sub-agent passes.
//!
//! It knows every tool, trusts none by default, and keeps a model's context small:
//!
//! - [`catalog`]: built-in tools (Bright Data) and the tools of upstream MCP
//!   servers ([`mcp`], over stdio or Streamable HTTP), namespaced by server
//!   ([`name`]), each checked at registration (schemas, `input_examples`).
//! - guard: [`canonical`] hashes pin each upstream definition (a change
//!   quarantines the tool and raises a `tool_change` approval with the diff);
//!   [`scan`] finds poisoned descriptions and sanitizes results; [`config`] holds
//!   the per-server and per-tool policies; every call is audited.
//! - [`embed`]: sentence embeddings of tool text (a local model, cached in the
//!   process and the store), for the guard's semantic detector and tool search;
//!   present only when `TRAWL_EMBED_MODEL` names a model folder.
//! - [`schema`]: the JSON Schemas of trawl's own tools, derived from their
//!   Rust types (the derive `/openapi.json` uses) and made portable.
//! - [`search`]: BM25 over the catalog behind the `tool_search` meta-tool;
//!   [`tokens`] counts what a model would be shown.
//! - the call itself, here: the content cache with coalescing, bounded retries
//!   with jittered exponential backoff (`backon`), `Retry-After`, the job's
//!   budget, one trace step per attempt or cache answer, and a cost entry per
//!   billed call.
//!
//! Layout: [`Budget`] (money reserved before a call, released if it fails),
//! [`Recorder`] (a slice's trace, costs and audit), [`ToolLayer`] (the catalog,
//! the guard and [`ToolLayer::call`]).

pub mod auth;
pub mod canonical;
pub mod catalog;
pub mod config;
pub mod embed;
pub mod forward;
pub mod guard;
mod layer;
pub mod mcp;
pub mod name;
pub mod scan;
pub mod schema;
pub mod search;
pub mod tokens;

pub use catalog::{Catalog, Entry, ToolState};
pub use layer::{BROWSER_TOOL, Listings, Pool, RefreshReport, TOOL_SEARCH, ToolLayer};

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::time::Duration;

use trawl_core::cost::Micros;
use trawl_core::model::{AuditRecord, CostEntry, JobId, Progress, SliceId, TraceStep, now_ms};
use trawl_core::ports::{PortError, Store, ToolError};
use trawl_core::retry::RetryPolicy;

/// A job's spending limit.
///
/// In one process ([`Budget::new`]) reservations are an atomic counter. When
/// several processes spend for one job ([`Budget::shared`]), they are kept in the
/// store (`Store::reserve_budget`), so that together they never pass the job's
/// maximum: each process takes a lease of several calls' worth at a time (or, near
/// the end, exactly one call's), and reserves its calls from it. A job without a
/// maximum reserves nothing anywhere.
pub struct Budget {
    max: Option<Micros>,
    reserved: AtomicI64,
    /// The job and the store holding its reservations, when shared.
    ledger: Option<(JobId, Arc<dyn Store>)>,
    /// Shared budgets: money this process took from the store and has not yet
    /// reserved for a call. Taken [`LEASE_CALLS`] calls' worth at a time, so that
    /// most calls reserve without a round trip; never given back, so a process
    /// that stops strands at most one lease (the ledger errs towards spending less).
    lease: AtomicI64,
    /// One refill of the lease at a time.
    refill: tokio::sync::Mutex<()>,
}

/// How many calls' worth of a shared budget a process takes at a time.
const LEASE_CALLS: i64 = 16;

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("max", &self.max)
            .field("reserved", &self.reserved)
            .field("shared", &self.ledger.is_some())
            .finish()
    }
}

impl Budget {
    /// A budget kept in this process; `spent` is what the ledger already holds.
    pub fn new(max: Option<Micros>, spent: Micros) -> Budget {
        Budget {
            max,
            reserved: AtomicI64::new(spent.0),
            ledger: None,
            lease: AtomicI64::new(0),
            refill: tokio::sync::Mutex::new(()),
        }
    }

    /// A budget whose reservations are kept in `store`, shared with every other
    /// process spending for `job`.
    pub fn shared(max: Option<Micros>, job: JobId, store: Arc<dyn Store>) -> Budget {
        Budget {
            max,
            reserved: AtomicI64::new(0),
            ledger: max.is_some().then_some((job, store)),
            lease: AtomicI64::new(0),
            refill: tokio::sync::Mutex::new(()),
        }
    }

    /// Reserves `amount` unless that would pass the maximum. `Err` when the shared
    /// ledger cannot be reached.
    pub async fn try_reserve(&self, amount: Micros) -> Result<bool, PortError> {
        if let (Some((job, store)), Some(max)) = (&self.ledger, self.max) {
            let ok = self.take_from_lease(amount) || {
                let _one = self.refill.lock().await;
                // Another caller may have refilled it meanwhile.
                self.take_from_lease(amount) || {
                    let chunk = Micros(amount.0.saturating_mul(LEASE_CALLS));
                    if store.reserve_budget(job, chunk, max).await? {
                        self.lease.fetch_add(chunk.0 - amount.0, Ordering::SeqCst);
                        true
                    } else {
                        // Near the end of the budget: exactly this call, or nothing.
                        store.reserve_budget(job, amount, max).await?
                    }
                }
            };
            if ok {
                self.reserved.fetch_add(amount.0, Ordering::SeqCst);
            }
            return Ok(ok);
        }
        let Some(max) = self.max else {
            self.reserved.fetch_add(amount.0, Ordering::SeqCst);
            return Ok(true);
        };
        Ok(self
            .reserved
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |cur| {
                (cur.saturating_add(amount.0) <= max.0).then_some(cur + amount.0)
            })
            .is_ok())
    }

    /// Reserves `amount` for `what` (this call, a model turn, a browser session),
    /// or the error that stops it: `budget_exhausted` (permanent) when it would
    /// pass the maximum, `budget_unavailable` (transient) when the shared ledger
    /// cannot be reached. Every paid call reserves here, and then either
    /// [`Self::settle`]s what it was billed or [`Self::release`]s the reservation.
    pub async fn reserve(&self, amount: Micros, what: &str) -> Result<(), ToolError> {
        match self.try_reserve(amount).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(ToolError::permanent(
                "budget_exhausted",
                format!(
                    "the job's budget of {} would be passed by {what}",
                    self.max().unwrap_or_default(),
                ),
            )),
            Err(e) => Err(ToolError::transient(
                "budget_unavailable",
                format!("the job's budget could not be checked: {e}"),
            )),
        }
    }

    /// Replaces a reservation by what was actually billed (which may pass the
    /// maximum: the money is spent).
    pub async fn settle(&self, reserved: Micros, billed: Micros) {
        self.adjust(billed.0 - reserved.0).await;
    }

    pub async fn release(&self, amount: Micros) {
        self.adjust(-amount.0).await;
    }

    /// Takes `amount` from this process's lease of a shared budget, if it holds that much.
    fn take_from_lease(&self, amount: Micros) -> bool {
        self.lease
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |l| {
                (l >= amount.0).then_some(l - amount.0)
            })
            .is_ok()
    }

    async fn adjust(&self, delta: i64) {
        if delta == 0 {
            return;
        }
        self.reserved.fetch_add(delta, Ordering::SeqCst);
        let Some((job, store)) = &self.ledger else {
            return;
        };
        if delta < 0 {
            // Unspent: back to this process's lease, for its next calls.
            self.lease.fetch_add(-delta, Ordering::SeqCst);
            return;
        }
        if let Err(e) = store.adjust_budget(job, Micros(delta)).await {
            // Left as reserved: the job may stop a call early, never overspend.
            tracing::warn!(job_id = %job, delta, error = %e, "budget adjustment not recorded");
        }
    }

    /// What this process reserved (with what was spent before it, for a budget
    /// kept in this process).
    pub fn reserved(&self) -> Micros {
        Micros(self.reserved.load(Ordering::SeqCst))
    }

    pub fn max(&self) -> Option<Micros> {
        self.max
    }
}

/// The cost product of browser traffic.
pub const BROWSER_PRODUCT: &str = "brightdata.browser";

/// Runs `op` until it succeeds, fails permanently, or `policy` has no attempt
/// left: jittered exponential backoff (`backon`), each wait stretched to an
/// upstream's `Retry-After` and cut at the policy's maximum. The one retry loop of
/// what costs money: the layer's upstream calls and browser sessions.
pub async fn retrying<T, F, Fut>(policy: RetryPolicy, op: F) -> Result<T, ToolError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ToolError>>,
{
    use backon::{ExponentialBuilder, Retryable};
    let backoff = ExponentialBuilder::default()
        .with_min_delay(policy.base_delay)
        .with_max_delay(policy.max_delay)
        .with_max_times(policy.max_attempts.saturating_sub(1) as usize)
        .with_jitter();
    op.retry(backoff)
        .sleep(tokio::time::sleep)
        .when(|e: &ToolError| e.is_transient())
        .adjust(|e: &ToolError, next: Option<Duration>| next.map(|d| policy.wait(d, e.retry_after)))
        .notify(|e: &ToolError, after: Duration| {
            tracing::info!(error = %e.code, ?after, "retry");
        })
        .await
}

/// A slice's trace steps, cost entries and audit rows, numbered in order.
#[derive(Debug)]
pub struct Recorder {
    job_id: Option<JobId>,
    slice_id: SliceId,
    /// Whether the calls belong to a slice (else `slice_id` is a placeholder).
    in_slice: bool,
    caller: String,
    /// This run's attempt id, on its cost entries ([`CostEntry::attempt`]).
    attempt: String,
    inner: Mutex<(Vec<TraceStep>, Vec<CostEntry>, Vec<AuditRecord>)>,
    /// How many of each were handed out by [`Recorder::unsaved`] already.
    saved: Mutex<(usize, usize, usize)>,
    seq: AtomicU32,
    audit_seq: AtomicU32,
}

/// What a [`Recorder`] recorded.
#[derive(Debug, Default)]
pub struct Records {
    pub trace: Vec<TraceStep>,
    pub costs: Vec<CostEntry>,
    pub audit: Vec<AuditRecord>,
}

impl Recorder {
    /// The calls of a slice of a job, made by a worker.
    pub fn new(job_id: JobId, slice_id: SliceId) -> Recorder {
        Recorder::make(Some(job_id), slice_id, true, "worker".to_owned())
    }

    /// Calls made outside any job (the command line, an MCP client): their audit
    /// rows name no job or slice and are written with `Store::record_audit`.
    pub fn detached(caller: impl Into<String>) -> Recorder {
        Recorder::make(None, SliceId::from_stored("-".into()), false, caller.into())
    }

    /// The calls of a slice delivered again, after what an earlier delivery
    /// saved (`Store::progress`): those rows are kept, as already saved, and new
    /// ones are numbered after them, so the outcome carries every row once.
    pub fn resume(job_id: JobId, slice_id: SliceId, saved: Progress) -> Recorder {
        // Trace steps and cost entries share their seqs; audit rows have their own.
        let seq = (saved.trace.iter().map(|t| t.seq))
            .chain(saved.costs.iter().map(|c| c.seq))
            .max()
            .map_or(0, |s| s + 1);
        let audit_seq = saved.audit.iter().map(|a| a.seq).max().map_or(0, |s| s + 1);
        let counts = (saved.trace.len(), saved.costs.len(), saved.audit.len());
        let rec = Recorder::make(Some(job_id), slice_id, true, "worker".to_owned());
        *rec.inner.lock().unwrap_or_else(|p| p.into_inner()) =
            (saved.trace, saved.costs, saved.audit);
        *rec.saved.lock().unwrap_or_else(|p| p.into_inner()) = counts;
        rec.seq.store(seq, Ordering::Relaxed);
        rec.audit_seq.store(audit_seq, Ordering::Relaxed);
        rec
    }

    fn make(job_id: Option<JobId>, slice_id: SliceId, in_slice: bool, caller: String) -> Recorder {
        Recorder {
            job_id,
            slice_id,
            in_slice,
            caller,
            attempt: CostEntry::new_attempt(fastrand::u64(..)),
            inner: Mutex::new((Vec::new(), Vec::new(), Vec::new())),
            saved: Mutex::new((0, 0, 0)),
            seq: AtomicU32::new(0),
            audit_seq: AtomicU32::new(0),
        }
    }

    /// What was recorded since the last call, for `Store::save_progress`; the
    /// rows stay in the recorder, for the outcome.
    pub fn unsaved(&self) -> Progress {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut saved = self.saved.lock().unwrap_or_else(|p| p.into_inner());
        let from = *saved;
        *saved = (g.0.len(), g.1.len(), g.2.len());
        Progress {
            trace: g.0.get(from.0..).unwrap_or_default().to_vec(),
            costs: g.1.get(from.1..).unwrap_or_default().to_vec(),
            audit: g.2.get(from.2..).unwrap_or_default().to_vec(),
            state: None,
        }
    }

    /// One audit row for a call asked of the layer.
    #[allow(clippy::too_many_arguments)]
    fn audit(
        &self,
        tool: &str,
        args_digest: &str,
        decision: &str,
        reason: &str,
        latency: Duration,
        result_bytes: usize,
        error: Option<&ToolError>,
    ) {
        let row = AuditRecord {
            job_id: self.job_id.clone(),
            slice_id: self.in_slice.then(|| self.slice_id.clone()),
            seq: self.audit_seq.fetch_add(1, Ordering::Relaxed),
            tool: tool.to_owned(),
            args_digest: args_digest.to_owned(),
            decision: decision.to_owned(),
            reason: reason.to_owned(),
            caller: self.caller.clone(),
            latency_us: u64::try_from(latency.as_micros()).unwrap_or(u64::MAX),
            result_bytes: result_bytes as u64,
            error: error.map(|e| format!("{}: {}", e.code, e.message)),
            at_ms: now_ms(),
        };
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .2
            .push(row);
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn step(
        &self,
        tool: &str,
        args_digest: &str,
        cache_hit: bool,
        attempt: u32,
        result: Result<(), &ToolError>,
        latency: Duration,
        cost: Micros,
        product: &str,
    ) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let (trace_id, span_id) = trawl_telemetry::propagation::current_ids().unzip();
        let step = TraceStep {
            slice_id: self.slice_id.clone(),
            seq,
            tool: tool.to_owned(),
            args_digest: args_digest.to_owned(),
            cache_hit,
            attempt,
            status: result.map_or_else(|e| e.code.clone(), |()| "ok".to_owned()),
            error: result.err().map(|e| e.message.clone()),
            latency_us: u64::try_from(latency.as_micros()).unwrap_or(u64::MAX),
            cost,
            at_ms: now_ms(),
            trace_id,
            span_id,
        };
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if cost > Micros::ZERO {
            g.1.push(CostEntry {
                slice_id: self.slice_id.clone(),
                attempt: self.attempt.clone(),
                seq,
                product: product.to_owned(),
                amount: cost,
            });
        }
        g.0.push(step);
    }

    /// One model turn of a model-driven sub-agent: a trace step named
    /// `model:<model>` and, when it cost anything, a cost entry of that product.
    pub fn model_turn(
        &self,
        model: &str,
        request_digest: &str,
        result: Result<(), &ToolError>,
        latency: Duration,
        cost: Micros,
    ) {
        let name = format!("model:{model}");
        self.step(
            &name,
            request_digest,
            false,
            1,
            result,
            latency,
            cost,
            &name,
        );
    }

    /// One step of a browser session: a trace step named `browser:<action>` and,
    /// when it cost anything, a cost entry of the browser product.
    pub fn browser_step(
        &self,
        action: &str,
        detail_digest: &str,
        result: Result<(), &ToolError>,
        latency: Duration,
        cost: Micros,
    ) {
        self.step(
            &format!("browser:{action}"),
            detail_digest,
            false,
            1,
            result,
            latency,
            cost,
            BROWSER_PRODUCT,
        );
    }

    /// A browser navigation the session's egress policy refused: an audit row
    /// under [`BROWSER_TOOL`] with the decision `egress_refused`, the refused
    /// URL's digest and the reason, as the layer audits its other refusals.
    pub fn browser_egress_refused(&self, target: &str, reason: &str, error: &ToolError) {
        self.audit(
            BROWSER_TOOL,
            &trawl_core::digest(&[target]),
            "egress_refused",
            reason,
            Duration::ZERO,
            0,
            Some(error),
        );
    }

    /// Everything recorded so far, taken out (for a recorder shared with tasks
    /// that may still hold it).
    pub fn take(&self) -> Records {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (trace, costs, audit) = std::mem::take(&mut *g);
        *self.saved.lock().unwrap_or_else(|p| p.into_inner()) = (0, 0, 0);
        Records {
            trace,
            costs,
            audit,
        }
    }

    /// Everything recorded.
    pub fn finish(self) -> Records {
        let (trace, costs, audit) = self.inner.into_inner().unwrap_or_else(|p| p.into_inner());
        Records {
            trace,
            costs,
            audit,
        }
    }
}

/// How one call is made.
pub struct CallOptions<'a> {
    pub retry: RetryPolicy,
    /// Cached answers younger than this are used; zero bypasses the cache.
    pub max_age: Duration,
    pub budget: &'a Budget,
    /// Whether `tool_search` offers the built-in tools. A job's sub-agent calls
    /// them; the `/mcp` gateway neither lists nor accepts them (they spend a
    /// job's budget), so what it searches must leave them out too.
    pub offer_builtins: bool,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::VecDeque;

    use async_trait::async_trait;
    use serde_json::{Value, json};
    use trawl_core::ports::{
        CacheKey, ContentCache, JobStore, LoadFuture, Served, ToolAnswer, ToolDef, ToolOffer,
        ToolProvider,
    };

    use super::*;

    /// A provider that plays back scripted answers and counts calls.
    struct Scripted {
        answers: Mutex<VecDeque<Result<ToolAnswer, ToolError>>>,
        calls: AtomicU32,
    }

    impl Scripted {
        fn new(answers: Vec<Result<ToolAnswer, ToolError>>) -> Arc<Scripted> {
            Arc::new(Scripted {
                answers: Mutex::new(answers.into()),
                calls: AtomicU32::new(0),
            })
        }
    }

    fn ok() -> Result<ToolAnswer, ToolError> {
        Ok(ToolAnswer {
            body: b"ok".to_vec(),
            cost: Micros(1_500),
            product: "unlocker",
        })
    }

    #[async_trait]
    impl ToolProvider for Scripted {
        fn tools(&self) -> Vec<ToolOffer> {
            vec![ToolOffer {
                def: ToolDef {
                    name: "brightdata.t".into(),
                    input_schema: json!({"type": "object"}),
                    ..ToolDef::default()
                },
                cost_model: String::new(),
                batch: None,
            }]
        }
        fn cache_key(&self, _: &str, _: &Value) -> Option<CacheKey> {
            None
        }
        fn price(&self, _: &str) -> Micros {
            Micros(1_500)
        }
        async fn call(&self, _: &str, _: &Value) -> Result<ToolAnswer, ToolError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.answers.lock().unwrap().pop_front().unwrap_or_else(ok)
        }
    }

    /// Never used: these providers give no cache key.
    struct NoCache;

    #[async_trait]
    impl ContentCache for NoCache {
        async fn get_or_load(
            &self,
            _: &CacheKey,
            _: Duration,
            _: LoadFuture<'_>,
        ) -> Result<(Vec<u8>, Served), ToolError> {
            unreachable!("no cache key, no cache")
        }
    }

    async fn run(
        p: &Arc<Scripted>,
        max_attempts: u32,
        budget: &Budget,
    ) -> (Result<Vec<u8>, ToolError>, Vec<TraceStep>, Vec<CostEntry>) {
        let layer = ToolLayer::new(p.clone(), Arc::new(NoCache));
        let rec = Recorder::new(JobId::generate(1, 1), SliceId::from_stored("s_1".into()));
        let opts = CallOptions {
            retry: RetryPolicy::new(max_attempts),
            max_age: Duration::from_secs(60),
            budget,
            offer_builtins: true,
        };
        let r = layer
            .call("brightdata.t", &json!({"a": 1}), &opts, &rec)
            .await;
        let records = rec.finish();
        assert_eq!(records.audit.len(), 1, "one audit row per call");
        (r, records.trace, records.costs)
    }

    #[tokio::test(start_paused = true)]
    async fn transient_errors_retry_up_to_max_attempts_then_fail_with_the_last_error() {
        let p = Scripted::new(vec![
            Err(ToolError::transient("http_502", "a")),
            Err(ToolError::transient("timeout", "b")),
            Err(ToolError::transient("http_429", "c")),
            ok(),
        ]);
        let budget = Budget::new(None, Micros::ZERO);
        let (r, trace, costs) = run(&p, 3, &budget).await;
        assert_eq!(r.unwrap_err().code, "http_429");
        assert_eq!(p.calls.load(Ordering::SeqCst), 3);
        let attempts: Vec<_> = trace
            .iter()
            .map(|s| (s.attempt, s.status.as_str()))
            .collect();
        assert_eq!(attempts, [(1, "http_502"), (2, "timeout"), (3, "http_429")]);
        assert!(costs.is_empty(), "failed calls cost nothing");
        assert_eq!(budget.reserved(), Micros::ZERO);
    }

    #[tokio::test]
    async fn a_resumed_recorder_keeps_what_was_saved_and_numbers_after_it() {
        let (job, slice) = (JobId::generate(1, 1), SliceId::from_stored("s_1".into()));
        let first = Recorder::new(job.clone(), slice.clone());
        first.model_turn("m", "d0", Ok(()), Duration::ZERO, Micros(10));
        first.model_turn("m", "d1", Ok(()), Duration::ZERO, Micros(20));
        let saved = first.unsaved();
        assert_eq!((saved.trace.len(), saved.costs.len()), (2, 2));
        assert!(first.unsaved().is_empty(), "each row is handed out once");

        let again = Recorder::resume(job, slice, saved.clone());
        assert!(
            again.unsaved().is_empty(),
            "the saved rows are not saved again"
        );
        again.model_turn("m", "d2", Ok(()), Duration::ZERO, Micros(30));
        let new = again.unsaved();
        assert_eq!(new.trace.iter().map(|t| t.seq).collect::<Vec<_>>(), [2]);
        assert_eq!(new.costs.iter().map(|c| c.seq).collect::<Vec<_>>(), [2]);
        let all = again.finish();
        assert_eq!(
            all.trace.iter().map(|t| t.seq).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(
            all.costs.iter().map(|c| c.amount).collect::<Vec<_>>(),
            [Micros(10), Micros(20), Micros(30)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_errors_are_not_retried() {
        let p = Scripted::new(vec![Err(ToolError::permanent("http_401", "bad token"))]);
        let (r, trace, _) = run(&p, 5, &Budget::new(None, Micros::ZERO)).await;
        assert_eq!(r.unwrap_err().code, "http_401");
        assert_eq!((p.calls.load(Ordering::SeqCst), trace.len()), (1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_is_honored() {
        let mut limited = ToolError::transient("http_429", "slow down");
        limited.retry_after = Some(Duration::from_secs(7));
        let p = Scripted::new(vec![Err(limited), ok()]);
        let t0 = tokio::time::Instant::now();
        let (r, trace, costs) = run(&p, 3, &Budget::new(None, Micros::ZERO)).await;
        assert_eq!(r.unwrap(), b"ok");
        let waited = t0.elapsed();
        assert!(
            waited >= Duration::from_secs(7) && waited < Duration::from_secs(8),
            "{waited:?}"
        );
        assert_eq!(trace.len(), 2);
        assert_eq!(costs.len(), 1);
        assert_eq!(costs[0].amount, Micros(1_500));
        assert_eq!(costs[0].seq, trace[1].seq);
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_stops_calls_before_they_are_made() {
        let p = Scripted::new(vec![]);
        let budget = Budget::new(Some(Micros(3_000)), Micros::ZERO);
        for _ in 0..2 {
            assert!(run(&p, 3, &budget).await.0.is_ok());
        }
        let (r, trace, _) = run(&p, 3, &budget).await;
        assert_eq!(r.unwrap_err().code, "budget_exhausted");
        assert!(trace.is_empty(), "no call was made");
        assert_eq!(p.calls.load(Ordering::SeqCst), 2);
        assert_eq!(budget.reserved(), Micros(3_000));
    }

    #[tokio::test]
    async fn budget_already_spent_counts() {
        let b = Budget::new(Some(Micros(3_000)), Micros(2_000));
        assert!(!b.try_reserve(Micros(1_500)).await.unwrap());
        assert!(b.try_reserve(Micros(1_000)).await.unwrap());
    }

    /// A job in a fresh store, for shared budgets.
    async fn store_with_job() -> (Arc<dyn Store>, JobId) {
        let store = trawl_store::SqliteStore::memory().await.unwrap();
        let id = JobId::generate(now_ms(), 1);
        let job = trawl_core::ports::JobRecord {
            id: id.clone(),
            name: "b".into(),
            spec: serde_json::json!({}),
            status: trawl_core::model::JobStatus::Running,
            reason: None,
            estimate: Micros::ZERO,
            created_ms: now_ms(),
            idempotency: None,
            traceparent: None,
            owner: None,
            retention_ms: None,
            slices_max: 0,
            approve_above: None,
        };
        store.create_job(&job, &[]).await.unwrap();
        (Arc::new(store), id)
    }

    #[tokio::test]
    async fn processes_sharing_a_budget_never_pass_it_together() {
        let (store, id) = store_with_job().await;
        // Two "processes", each with its own Budget over the same store. The
        // budget is smaller than a lease: every call is reserved in the store.
        let a = Budget::shared(Some(Micros(4_500)), id.clone(), store.clone());
        let b = Budget::shared(Some(Micros(4_500)), id.clone(), store.clone());
        let mut granted = 0;
        for _ in 0..3 {
            granted += u32::from(a.try_reserve(Micros(1_500)).await.unwrap());
            granted += u32::from(b.try_reserve(Micros(1_500)).await.unwrap());
        }
        assert_eq!(granted, 3, "4,500 of budget is three calls of 1,500");
        // A failed call's money stays with the process that reserved it.
        b.release(Micros(1_500)).await;
        assert!(!a.try_reserve(Micros(1_500)).await.unwrap());
        assert!(b.try_reserve(Micros(1_500)).await.unwrap());
        // A call billed less than reserved leaves the difference to its process.
        b.settle(Micros(1_500), Micros(500)).await;
        assert!(b.try_reserve(Micros(1_000)).await.unwrap());
        assert!(!b.try_reserve(Micros(1)).await.unwrap());
        // Billed more than reserved: the store is told, the money is spent.
        b.settle(Micros(1_000), Micros(1_600)).await;
        let c = Budget::shared(Some(Micros(5_100)), id, store);
        assert!(!c.try_reserve(Micros(1)).await.unwrap());
    }

    #[tokio::test]
    async fn a_process_leases_many_calls_at_once_and_others_get_the_rest() {
        let (store, id) = store_with_job().await;
        let max = Some(Micros(100 * 1_500));
        let a = Budget::shared(max, id.clone(), store.clone());
        let b = Budget::shared(max, id.clone(), store.clone());
        for _ in 0..LEASE_CALLS {
            assert!(a.try_reserve(Micros(1_500)).await.unwrap());
        }
        // One lease: the store holds 16 calls' worth for `a`, the rest for others.
        let mut rest = 0;
        while b.try_reserve(Micros(1_500)).await.unwrap() {
            rest += 1;
        }
        assert_eq!(rest, 100 - LEASE_CALLS);
        assert!(!a.try_reserve(Micros(1_500)).await.unwrap());
    }

    #[tokio::test]
    async fn a_shared_budget_without_a_maximum_reserves_nothing_in_the_store() {
        let (store, id) = store_with_job().await;
        let a = Budget::shared(None, id.clone(), store.clone());
        assert!(a.try_reserve(Micros(1_000_000)).await.unwrap());
        // The store holds no reservation: a budget with a maximum still has all of it.
        let b = Budget::shared(Some(Micros(1_500)), id, store);
        assert!(b.try_reserve(Micros(1_500)).await.unwrap());
    }
}
