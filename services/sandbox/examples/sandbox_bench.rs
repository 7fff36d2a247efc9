//! Start-up time and per-tool-call overhead of `trawl_sandbox::run`.
//!
//! `cargo run --release -p trawl-sandbox --example sandbox_bench`
//!
//! 1. Start-up: wall time from calling `run` to its result for `return 1`, over
//!    1,000 runs (after 50 warm-up runs): median and p99.
//! 2. Per tool call: a script awaiting `tools.noop({i})` 10,000 times in sequence
//!    against an invoke that answers at once; (total − median start-up) / 10,000,
//!    median of 7 runs. The same with `Promise.all` batches of 100 calls, and both
//!    again with an invoke that yields once before answering, so every call takes
//!    the spawned path (a task on the runtime and a channel back to the engine).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use trawl_sandbox::{Invoke, Limits, run};

const STARTUP_RUNS: usize = 1_000;
const CALLS: u32 = 10_000;
const CALL_RUNS: usize = 7;
const BATCH: u32 = 100;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let ready: Invoke = Arc::new(|_, _| async { Ok(serde_json::Value::Null) }.boxed());
    let yielding: Invoke = Arc::new(|_, _| {
        async {
            tokio::task::yield_now().await;
            Ok(serde_json::Value::Null)
        }
        .boxed()
    });
    let tools = vec!["noop".to_owned()];
    let limits = Limits::default()
        .with_max_tool_calls(CALLS)
        .with_deadline(Duration::from_secs(120));

    let time = |code: String, invoke: &Invoke| {
        let invoke = Arc::clone(invoke);
        let tools = tools.clone();
        let limits = limits.clone();
        async move {
            let started = Instant::now();
            let out = run(&code, &tools, invoke, &limits).await;
            let elapsed = started.elapsed();
            if let Err(e) = out {
                eprintln!("run failed: {e}");
                std::process::exit(1);
            }
            elapsed
        }
    };

    for _ in 0..50 {
        time("return 1".to_owned(), &ready).await;
    }
    let mut startup = Vec::with_capacity(STARTUP_RUNS);
    for _ in 0..STARTUP_RUNS {
        startup.push(time("return 1".to_owned(), &ready).await);
    }
    startup.sort();
    let startup_median = startup[STARTUP_RUNS / 2];
    let startup_p99 = startup[STARTUP_RUNS * 99 / 100];
    println!(
        "start-up (return 1, {STARTUP_RUNS} runs): median {} µs, p99 {} µs, min {} µs, max {} µs (target < 5,000 µs)",
        startup_median.as_micros(),
        startup_p99.as_micros(),
        startup[0].as_micros(),
        startup[STARTUP_RUNS - 1].as_micros()
    );

    let sequential =
        format!("for (let i = 0; i < {CALLS}; i++) await tools.noop({{i}}); return 1;");
    let batched = format!(
        "for (let b = 0; b < {}; b++) await Promise.all(Array.from({{length: {BATCH}}}, (_, j) => tools.noop({{i: b * {BATCH} + j}}))); return 1;",
        CALLS / BATCH
    );
    for (label, code, invoke) in [
        ("sequential await, answered at once", &sequential, &ready),
        (
            "sequential await, answer after a yield",
            &sequential,
            &yielding,
        ),
        (
            "Promise.all batches of 100, answered at once",
            &batched,
            &ready,
        ),
        (
            "Promise.all batches of 100, answer after a yield",
            &batched,
            &yielding,
        ),
    ] {
        let mut per_call = Vec::with_capacity(CALL_RUNS);
        let mut totals = Vec::with_capacity(CALL_RUNS);
        for _ in 0..CALL_RUNS {
            let total = time(code.clone(), invoke).await;
            totals.push(total);
            per_call.push(total.saturating_sub(startup_median) / CALLS);
        }
        per_call.sort();
        totals.sort();
        println!(
            "per call, {label} ({CALLS} calls, {CALL_RUNS} runs): median {:.1} µs (runs {:.1}–{:.1} µs; total median {} ms) (target < 100 µs)",
            per_call[CALL_RUNS / 2].as_secs_f64() * 1e6,
            per_call[0].as_secs_f64() * 1e6,
            per_call[CALL_RUNS - 1].as_secs_f64() * 1e6,
            totals[CALL_RUNS / 2].as_millis()
        );
    }
}
