//! Browse slices: throughput and memory of local browser sessions, and model calls
//! of model steps on a first and a second run.
//!
//! Runs the embedded pipeline (`trawl run`'s) against the loopback site of
//! `trawl_tests::site`, with Debian's Chromium in the worker's browser pool
//! (`--pool N` browsers, default 2; a fresh browser context per session).
//!
//! - **throughput**: one job of `--slices` browse slices (default 20), each a
//!   5-step deterministic script on its own start URL: fill the user, fill the
//!   password (a secret), click sign-in, wait for the dashboard, extract its 4
//!   rows. Run with 1, 2 and 4 slices at a time (`--at-once 1,2,4`); slices per
//!   minute is slices / wall time of the run (the pool's browser start-up
//!   included: each run starts a new pool). p50 and p95 slice time: each
//!   session's time from opening its context to closing it (the
//!   `browser:traffic` trace step's latency).
//! - **memory**: while each run goes, a sampler reads every 20 ms the memory of
//!   this process's descendants (the Chromium processes: browser, renderer, GPU
//!   and utility): the sum of their RSS (`VmRSS`, counts shared pages once per
//!   process) and of their PSS (`/proc/PID/smaps_rollup`, shared pages divided
//!   among their users). Peak per concurrent session = peak sum / sessions.
//! - **model calls**: a one-slice job with two model steps (`act`, `extract` by
//!   instruction) run twice on the same state folder against a scripted model
//!   server (`trawl_model::testing::ScriptedModel`, Anthropic wire): the requests
//!   each run made.
//!
//!     cargo run --release -p trawl-tests --example browse_bench [-- --slices 20 --pool 2 --at-once 1,2,4]

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use trawl::embedded::{Embedded, Options, Upstream};
use trawl_browser::pool::PoolConfig;
use trawl_core::model::JobStatus;
use trawl_core::ports::SliceStore;
use trawl_model::testing::ScriptedModel;
use trawl_model::{AnthropicClient, ClientConfig, PriceList};
use trawl_sim::SimConfig;
use trawl_tests::site::{PASSWORD, serve_site, shop_job, shop_model};
use trawl_worker::WorkerConfig;
use trawl_worker::browse::Browsers;
use trawl_worker::models::Models;

async fn system(
    state: &Path,
    concurrency: usize,
    pool: usize,
    models: Option<Models>,
) -> (Embedded, Browsers) {
    // The site is on loopback, which sessions reach only when opened.
    let browsers = Browsers::pooled(PoolConfig {
        max_browsers: pool,
        ..PoolConfig::default()
    })
    .with_secret("portal_password", PASSWORD)
    .with_egress(trawl_core::egress::EgressPolicy::private_networks());
    let opts = Options::new(state, Upstream::Simulator(SimConfig::default()))
        .with_worker(WorkerConfig::default().with_concurrency(concurrency))
        .with_models(models.map(Arc::new))
        .with_browsers(Arc::new(browsers.clone()));
    (Embedded::start(opts).await.unwrap(), browsers)
}

/// The memory of this process's descendants now: (RSS sum, PSS sum), bytes.
fn descendants_memory() -> (u64, u64) {
    let me = std::process::id();
    let mut parent = std::collections::HashMap::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The fields after the command's closing parenthesis: state, ppid, ...
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        if let Some(ppid) = rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok())
        {
            parent.insert(pid, ppid);
        }
    }
    let is_descendant = |mut pid: u32| {
        while let Some(&pp) = parent.get(&pid) {
            if pp == me {
                return true;
            }
            if pp <= 1 {
                return false;
            }
            pid = pp;
        }
        false
    };
    let kb = |text: &str, key: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    let (mut rss, mut pss) = (0, 0);
    for &pid in parent.keys() {
        if !is_descendant(pid) {
            continue;
        }
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            rss += kb(&s, "VmRSS:");
        }
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) {
            pss += kb(&s, "Pss:");
        }
    }
    (rss, pss)
}

fn login_job(addr: std::net::SocketAddr, slices: usize) -> String {
    let urls: Vec<String> = (0..slices)
        .map(|i| format!("\"http://{addr}/login?run={i}\""))
        .collect();
    format!(
        r##"name: bench
browse:
  urls: [{}]
  geos: [us]
  steps:
    - fill: {{selector: "#user", value: "ops@example.com"}}
    - fill: {{selector: "#password", secret: portal_password}}
    - click: "button[type=submit]"
    - wait_for: {{text: "Orders, page 1"}}
    - extract:
        rows: "#orders tbody tr"
        fields:
          id: {{css: ".id", type: integer}}
          amount: {{css: ".amount"}}
"##,
        urls.join(", ")
    )
}

async fn throughput(
    addr: std::net::SocketAddr,
    slices: usize,
    concurrency: usize,
    pool: usize,
    sample_ms: u64,
) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let (sys, browsers) = system(&dir.path().join("state"), concurrency, pool, None).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (peak_rss, peak_pss) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let sample_every = Duration::from_millis(sample_ms);
    let sampler = {
        let (stop, peak_rss, peak_pss) = (stop.clone(), peak_rss.clone(), peak_pss.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let (rss, pss) = descendants_memory();
                peak_rss.fetch_max(rss, Ordering::Relaxed);
                peak_pss.fetch_max(pss, Ordering::Relaxed);
                std::thread::sleep(sample_every);
            }
        })
    };
    let started = Instant::now();
    let summary =
        trawl_tests::run_embedded(&sys, &login_job(addr, slices), &dir.path().join("out")).await;
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    assert_eq!(summary.items.valid as usize, slices * 4, "{summary:?}");
    let job = trawl_core::model::JobId::parse(&summary.job_id).unwrap();
    let trace = sys.store().trace_page(&job, None, 100_000).await.unwrap();
    let mut times: Vec<u64> = trace
        .iter()
        .filter(|s| s.tool == "browser:traffic")
        .map(|s| s.latency_us)
        .collect();
    // Mean time of each kind of step, ms.
    let mut by_step: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for s in trace.iter().filter(|s| s.tool.starts_with("browser:")) {
        let e = by_step.entry(s.tool.clone()).or_default();
        e.0 += s.latency_us;
        e.1 += 1;
    }
    let step_ms: serde_json::Map<String, Value> = by_step
        .into_iter()
        .map(|(k, (us, n))| (k, json!((us as f64 / n as f64 / 100.0).round() / 10.0)))
        .collect();
    times.sort_unstable();
    let at = |q: f64| {
        let i = ((times.len() as f64 * q).ceil() as usize).clamp(1, times.len()) - 1;
        (times[i] as f64 / 1000.0).round()
    };
    let stats = browsers.pool_stats().unwrap();
    sys.shutdown().await;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let (rss, pss) = (
        peak_rss.load(Ordering::Relaxed),
        peak_pss.load(Ordering::Relaxed),
    );
    json!({
        "bench": "throughput",
        "slices": slices,
        "sessions_at_once": concurrency,
        "memory_sampled_every_ms": sample_ms,
        "pool": pool,
        "browsers_started": stats.launched,
        "slice_ms_p50": at(0.5),
        "slice_ms_p95": at(0.95),
        "step_ms_mean": step_ms,
        "elapsed_s": (elapsed.as_secs_f64() * 100.0).round() / 100.0,
        "slices_per_min": (slices as f64 / elapsed.as_secs_f64() * 60.0 * 10.0).round() / 10.0,
        "peak_rss_mib": mib(rss).round(),
        "peak_pss_mib": mib(pss).round(),
        "peak_rss_mib_per_session": (mib(rss) / concurrency as f64).round(),
        "peak_pss_mib_per_session": (mib(pss) / concurrency as f64).round(),
        "traffic_cost_micros": summary.cost_micros,
    })
}

async fn model_calls(addr: std::net::SocketAddr) -> Value {
    let server = ScriptedModel::start(shop_model).await.unwrap();
    let cfg = ClientConfig::anthropic()
        .with_base_url(server.url())
        .with_api_key("bench-key".to_owned().into());
    let models = Models::new(PriceList::claude())
        .with_anthropic(Arc::new(AnthropicClient::new(cfg).unwrap()))
        .with_default_model(Some("claude-sonnet-4-5".into()));
    let dir = tempfile::tempdir().unwrap();
    let (sys, _) = system(&dir.path().join("state"), 1, 2, Some(models)).await;
    let yaml = shop_job(addr);
    let mut calls = Vec::new();
    for run in 1..=2 {
        let before = server.requests().len();
        let summary =
            trawl_tests::run_embedded(&sys, &yaml, &dir.path().join(format!("out{run}"))).await;
        assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
        assert_eq!(summary.items.valid, 1);
        calls.push(server.requests().len() - before);
    }
    sys.shutdown().await;
    json!({
        "bench": "model_calls",
        "model_steps": 2,
        "slices": 1,
        "first_run_calls_per_slice": calls[0],
        "second_run_calls_per_slice": calls[1],
    })
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let slices = arg("--slices").map_or(20, |s| s.parse().unwrap());
    let pool = arg("--pool").map_or(2, |s| s.parse().unwrap());
    let sample_ms = arg("--sample-ms").map_or(100, |s| s.parse().unwrap());
    let at_once: Vec<usize> = arg("--at-once").map_or(vec![1, 2, 4], |s| {
        s.split(',').map(|n| n.parse().unwrap()).collect()
    });
    let (addr, _site) = serve_site().await;
    for concurrency in at_once {
        println!(
            "{}",
            throughput(addr, slices, concurrency, pool, sample_ms).await
        );
    }
    println!("{}", model_calls(addr).await);
}
