//! End-to-end runs of the embedded pipeline against the simulator, over real HTTP
//! on loopback, with real SQLite files. Each test has its own state folder and its
//! own simulator, so tests run in parallel without seeing each other.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use trawl::embedded::{Embedded, Options, Upstream};
use trawl::output::Summary;
use trawl::progress::Progress;
use trawl_core::model::{JobId, JobStatus};
use trawl_core::plan::plan;
use trawl_core::ports::{SliceStore, ToolStore};
use trawl_core::spec::JobSpec;
use trawl_sim::{Faults, SimConfig};
use trawl_tests::EXTRACT;
use trawl_worker::WorkerConfig;

const PRICE: i64 = 1_500;

fn sim(faults: &str) -> SimConfig {
    SimConfig::default()
        .with_faults(Faults::parse(faults).unwrap())
        // Tests do not wait out real Retry-After seconds or hung requests.
        .with_retry_after_secs(0)
        .with_hang(Duration::from_secs(5))
}

async fn system(state: &Path, sim: SimConfig) -> Embedded {
    let opts = Options::new(state, Upstream::Simulator(sim))
        .with_call_timeout(Duration::from_millis(300))
        .with_worker(
            WorkerConfig::default()
                .with_concurrency(16)
                .with_retry_delays(Duration::from_millis(1), Duration::from_millis(20)),
        );
    Embedded::start(opts).await.unwrap()
}

async fn run(sys: &Embedded, spec: &JobSpec, out: &Path) -> Summary {
    let submitted = sys.submit(spec, Some("test")).await.unwrap();
    drive(sys, &submitted.job_id, out).await
}

/// Runs a submitted job to its end (or to its approval) without a progress display.
async fn drive(sys: &Embedded, job: &JobId, out: &Path) -> Summary {
    sys.run(job, out, &mut Progress::Quiet, &CancellationToken::new())
        .await
        .unwrap()
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn spec(text: &str) -> JobSpec {
    JobSpec::parse(text).unwrap()
}

fn pages_job(n: usize, geos: &str, extra: &str) -> JobSpec {
    let urls: Vec<String> = (0..n)
        .map(|i| format!("\"https://shop.example/p/item-{i}\""))
        .collect();
    spec(&format!(
        "name: pages\npages:\n  urls: [{}]\n  geos: [{geos}]\n{EXTRACT}{extra}",
        urls.join(", ")
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_injected_faults_keeps_every_invariant() {
    let dir = tempfile::tempdir().unwrap();
    let sys = system(
        &dir.path().join("state"),
        sim("429=0.1,502=0.1,timeout=0.03"),
    )
    .await;
    let job = spec(&format!(
        "name: faults\nsearches:\n  queries: [laptop, ultrabook, tablet]\n  geos: [us, de, jp]\n  follow_top: 4\n\
         pages:\n  urls: [{}]\n  geos: [us, gb]\n{EXTRACT}retries: {{max_attempts: 3}}\n",
        (0..30)
            .map(|i| format!("\"https://shop.example/p/x-{i}\""))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let out = dir.path().join("out");
    let s = run(&sys, &job, &out).await;
    let stats = sys.simulator().unwrap().stats();

    // Every slice is terminal, and the job's status follows from them.
    assert_eq!(s.slices.total, s.slices.succeeded + s.slices.failed);
    let counts = sys.store().counts(&s.job_id.parse_job()).await.unwrap();
    assert_eq!(counts.slices_open(), 0);
    let want = if s.slices.failed == 0 {
        JobStatus::Succeeded
    } else {
        JobStatus::Partial
    };
    assert_eq!(s.status, want, "{s:?}");

    // Faults really happened, and were retried.
    assert!(stats.rate_limited > 0 && stats.bad_gateway > 0, "{stats:?}");
    assert!(stats.requests > stats.ok, "{stats:?}");

    // Each fetched page yields exactly one item: valid or rejected.
    let searches = plan(&job, &Default::default()).estimate.search_slices;
    let failed = sys
        .store()
        .failed_slices(&s.job_id.parse_job(), 10_000)
        .await
        .unwrap();
    let failed_pages = failed.iter().filter(|f| f.kind == "page").count() as u64;
    let failed_searches = failed.len() as u64 - failed_pages;
    let pages_fetched = (s.slices.total - searches) - failed_pages;
    let items = lines(&out.join("items.jsonl"));
    let page_items = items.iter().filter(|i| i["kind"] == "page").count() as u64;
    let serp_items = items.iter().filter(|i| i["kind"] == "serp").count() as u64;
    let rejections = lines(&out.join("rejections.jsonl"));
    assert_eq!(page_items + rejections.len() as u64, pages_fetched);
    assert_eq!(s.items.valid, page_items + serp_items);
    assert_eq!(s.items.rejected, rejections.len() as u64);
    assert_eq!(
        serp_items,
        (searches - failed_searches) * 10,
        "ten organic rows per search"
    );

    // Upstream calls are bounded by slices × max_attempts, and all are accounted for.
    assert!(
        stats.requests <= s.slices.total * 3,
        "{stats:?} vs {}",
        s.slices.total
    );
    assert_eq!(s.upstream_calls, stats.requests);
    assert_eq!(s.cache_hits, 0);

    // Cost is exactly the successful calls at the unit price.
    assert_eq!(s.cost_micros, stats.ok as i64 * PRICE);

    // Failed slices carry their last error, a transient one after all attempts.
    for f in &failed {
        assert!(
            ["sr_rate_limit", "reject_block", "timeout"].contains(&f.error.code.as_str()),
            "{f:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_is_served_from_the_cache_with_the_same_items() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let job = spec(&format!(
        "name: again\nsearches:\n  queries: [laptop]\n  geos: [us, de]\n  follow_top: 3\npages:\n  urls: [\"https://shop.example/p/a\"]\n  geos: [jp]\n{EXTRACT}"
    ));
    let first = {
        let sys = system(&state, sim("")).await;
        let s = run(&sys, &job, &dir.path().join("one")).await;
        assert_eq!(sys.simulator().unwrap().stats().requests, s.slices.total);
        sys.shutdown().await;
        s
    };
    let sys = system(&state, sim("")).await;
    let second = run(&sys, &job, &dir.path().join("two")).await;
    assert_eq!(
        sys.simulator().unwrap().stats().requests,
        0,
        "nothing went upstream"
    );
    assert_eq!(second.upstream_calls, 0);
    assert_eq!(second.cache_hits, first.slices.total);
    assert_eq!(second.cost_micros, 0);
    assert_ne!(first.job_id, second.job_id);
    assert_eq!(second.status, JobStatus::Succeeded);
    for f in ["items.jsonl", "rejections.jsonl"] {
        let a = std::fs::read(dir.path().join("one").join(f)).unwrap();
        let b = std::fs::read(dir.path().join("two").join(f)).unwrap();
        assert!(!a.is_empty() || f == "rejections.jsonl");
        assert_eq!(a, b, "{f} differs");
    }
    assert!(dir.path().join("two/summary.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_age_zero_bypasses_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let job = pages_job(5, "us", "cache: {max_age: 0}\n");
    for round in 0..2 {
        let sys = system(&state, sim("")).await;
        let s = run(&sys, &job, &dir.path().join(format!("out{round}"))).await;
        assert_eq!(
            sys.simulator().unwrap().stats().requests,
            5,
            "round {round}"
        );
        assert_eq!(s.cache_hits, 0);
        sys.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_that_exhaust_their_retries_fail_with_their_last_error() {
    let dir = tempfile::tempdir().unwrap();
    let sys = system(&dir.path().join("state"), sim("502=1")).await;
    let job = pages_job(6, "us", "retries: {max_attempts: 4}\n");
    let s = run(&sys, &job, &dir.path().join("out")).await;
    assert_eq!(s.status, JobStatus::Failed);
    assert_eq!((s.slices.total, s.slices.failed), (6, 6));
    assert_eq!(
        sys.simulator().unwrap().stats().requests,
        6 * 4,
        "exactly max_attempts each"
    );
    assert_eq!(s.cost_micros, 0, "failed requests cost nothing");
    assert_eq!(s.failed_slices.len(), 6);
    assert!(
        s.failed_slices.iter().all(|f| f.code == "reject_block"),
        "{:?}",
        s.failed_slices
    );
    assert!(s.reason.unwrap().contains("6 of 6 slices failed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_bad_item_never_fails_its_slice() {
    let dir = tempfile::tempdir().unwrap();
    let sys = system(&dir.path().join("state"), sim("")).await;
    let job = pages_job(200, "us", "");
    let s = run(&sys, &job, &dir.path().join("out")).await;
    assert_eq!(s.status, JobStatus::Succeeded);
    assert_eq!(s.slices.succeeded, 200);
    assert_eq!(s.items.valid + s.items.rejected, 200);
    assert!(
        s.items.rejected > 0,
        "the simulator breaks some pages on purpose"
    );
    for r in lines(&dir.path().join("out/rejections.jsonl")) {
        let errors = r["errors"].as_array().unwrap();
        assert!(!errors.is_empty());
        assert!(
            errors
                .iter()
                .all(|e| e["message"].as_str().is_some_and(|m| !m.is_empty()))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_above_its_approval_threshold_waits_until_approved() {
    let dir = tempfile::tempdir().unwrap();
    let sys = system(&dir.path().join("state"), sim("")).await;
    let job = pages_job(
        10,
        "us",
        "budget: {max_usd: 1.0, approve_above_usd: 0.001}\n",
    );
    let submitted = sys.submit(&job, None).await.unwrap();
    assert_eq!(submitted.status, JobStatus::AwaitingApproval);
    // Driving it does nothing while it waits.
    let s = drive(&sys, &submitted.job_id, &dir.path().join("wait")).await;
    assert_eq!(s.status, JobStatus::AwaitingApproval);
    assert_eq!(sys.simulator().unwrap().stats().requests, 0);

    assert_eq!(
        sys.decide(&submitted.job_id, true, "alice").await.unwrap(),
        JobStatus::Queued
    );
    assert!(
        sys.decide(&submitted.job_id, true, "bob").await.is_err(),
        "decided once"
    );
    let s = drive(&sys, &submitted.job_id, &dir.path().join("out")).await;
    assert_eq!(s.status, JobStatus::Succeeded);
    assert_eq!(sys.simulator().unwrap().stats().requests, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_job_is_cancelled_and_never_runs() {
    let dir = tempfile::tempdir().unwrap();
    let sys = system(&dir.path().join("state"), sim("")).await;
    let job = pages_job(3, "us", "budget: {approve_above_usd: 0}\n");
    let submitted = sys.submit(&job, None).await.unwrap();
    assert_eq!(
        sys.decide(&submitted.job_id, false, "alice").await.unwrap(),
        JobStatus::Cancelled
    );
    let s = drive(&sys, &submitted.job_id, &dir.path().join("out")).await;
    assert_eq!(s.status, JobStatus::Cancelled);
    assert_eq!(sys.simulator().unwrap().stats().requests, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spend_stops_at_max_usd_and_the_job_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let sys = system(&dir.path().join("state"), sim("")).await;
    // Room for exactly five requests at $1.50 per 1,000.
    let job = pages_job(20, "us", "budget: {max_usd: 0.0075}\n");
    let s = run(&sys, &job, &dir.path().join("out")).await;
    assert_eq!(sys.simulator().unwrap().stats().requests, 5);
    assert_eq!(s.cost_micros, 5 * PRICE);
    assert_eq!((s.slices.succeeded, s.slices.failed), (5, 15));
    assert_eq!(s.status, JobStatus::Partial);
    assert!(
        s.reason.as_deref().unwrap().starts_with("budget exhausted"),
        "{:?}",
        s.reason
    );
    assert!(s.failed_slices.iter().all(|f| f.code == "budget_exhausted"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_identical_calls_across_slices_make_one_upstream_call() {
    // Two searches in one country whose results overlap would share pages; here two
    // jobs run at once over the same URLs and share one cache.
    let dir = tempfile::tempdir().unwrap();
    let sys = system(
        &dir.path().join("state"),
        sim("").with_latency(Duration::from_millis(50)),
    )
    .await;
    let job = pages_job(20, "us", "");
    let (out_a, out_b) = (dir.path().join("a"), dir.path().join("b"));
    let (a, b) = tokio::join!(run(&sys, &job, &out_a), run(&sys, &job, &out_b));
    assert_eq!(
        sys.simulator().unwrap().stats().requests,
        20,
        "each URL fetched once"
    );
    assert_eq!(a.upstream_calls + b.upstream_calls, 20);
    assert_eq!(a.cache_hits + b.cache_hits, 20);
    assert_eq!(a.items.valid + a.items.rejected, 20);
    assert_eq!(b.items.valid + b.items.rejected, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_slice_heartbeats_and_is_not_delivered_twice() {
    use trawl_queue::QueueConfig;
    let dir = tempfile::tempdir().unwrap();
    // Each answer takes longer than the queue's ack wait; the cache is bypassed so
    // a second delivery would show as a second upstream request.
    let job = pages_job(4, "us", "cache: {max_age: 0}\n");
    let slow = || sim("").with_latency(Duration::from_millis(500));
    let requests = |heartbeat: Duration, state: &str| {
        let state = dir.path().join(state);
        let job = job.clone();
        async move {
            let opts = Options::new(&state, Upstream::Simulator(slow()))
                .with_call_timeout(Duration::from_secs(5))
                .with_queue(QueueConfig::default().with_ack_wait(Duration::from_millis(200)))
                .with_worker(
                    WorkerConfig::default()
                        .with_concurrency(8)
                        .with_heartbeat(heartbeat),
                );
            let sys = Embedded::start(opts).await.unwrap();
            let s = run(&sys, &job, &state.join("out")).await;
            assert_eq!(s.status, JobStatus::Succeeded);
            assert_eq!(s.slices.total, 4);
            sys.simulator().unwrap().stats().requests
        }
    };
    assert_eq!(requests(Duration::from_millis(50), "beating").await, 4);
    // Control: without a heartbeat inside the ack wait, the queue redelivers.
    assert!(requests(Duration::from_secs(30), "silent").await > 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_never_acked_is_failed_at_the_delivery_cap() {
    use trawl_queue::QueueConfig;
    let dir = tempfile::tempdir().unwrap();
    // Every request hangs past the ack wait and no heartbeat is sent, so the queue
    // redelivers until its cap and hands the slice to the scheduler as a dead letter.
    let opts = Options::new(
        dir.path().join("state"),
        Upstream::Simulator(sim("timeout=1")),
    )
    .with_call_timeout(Duration::from_secs(1))
    .with_queue(
        QueueConfig::default()
            .with_ack_wait(Duration::from_millis(100))
            .with_max_deliver(2),
    )
    .with_worker(WorkerConfig::default().with_heartbeat(Duration::from_secs(60)));
    let sys = Embedded::start(opts).await.unwrap();
    let job = pages_job(2, "us", "retries: {max_attempts: 1}\ncache: {max_age: 0}\n");
    let s = run(&sys, &job, &dir.path().join("out")).await;
    assert_eq!(s.status, JobStatus::Failed);
    assert_eq!(s.slices.failed, 2);
    assert!(
        s.failed_slices.iter().all(|f| f.code == "delivery_limit"),
        "{:?}",
        s.failed_slices
    );
    assert!(s.failed_slices[0].message.contains("2 deliveries"));
}

trait ParseJob {
    fn parse_job(&self) -> trawl_core::model::JobId;
}

impl ParseJob for String {
    fn parse_job(&self) -> trawl_core::model::JobId {
        trawl_core::model::JobId::parse(self).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_of_a_job_passes_the_tool_layer_policy_and_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    // The default policy allows the built-ins: one audit row per call, with its slice.
    let sys = system(&dir.path().join("open"), sim("")).await;
    let s = run(&sys, &pages_job(3, "de", ""), &dir.path().join("out1")).await;
    assert_eq!(s.status, JobStatus::Succeeded);
    let audit = sys.store().audit_page(None, 100).await.unwrap();
    assert_eq!(audit.len(), 3);
    for (_, a) in &audit {
        assert_eq!(
            (a.tool.as_str(), a.decision.as_str()),
            ("brightdata.fetch_page", "allow")
        );
        assert_eq!(
            a.job_id.as_ref().map(|j| j.as_str()),
            Some(s.job_id.as_str())
        );
        assert!(a.slice_id.is_some() && a.result_bytes > 0 && a.error.is_none());
    }

    // A policy that denies fetching: no page reaches the simulator, every slice
    // fails with the reason, and the refusals are audited.
    let config = trawl_tools::config::ToolsConfig::parse(
        "policy:\n  tools:\n    brightdata.fetch_page: deny\n",
        dir.path(),
    )
    .unwrap();
    let opts = Options::new(dir.path().join("denied"), Upstream::Simulator(sim("")))
        .with_tools(Some(config));
    let sys = Embedded::start(opts).await.unwrap();
    let s = run(&sys, &pages_job(3, "de", ""), &dir.path().join("out2")).await;
    assert_eq!(s.status, JobStatus::Failed);
    assert!(
        s.failed_slices.iter().all(|f| f.code == "tool_denied"),
        "{:?}",
        s.failed_slices
    );
    assert_eq!(sys.simulator().unwrap().stats().requests, 0);
    let audit = sys.store().audit_page(None, 100).await.unwrap();
    assert_eq!(audit.len(), 3);
    assert!(audit.iter().all(|(_, a)| {
        a.decision == "deny"
            && a.reason.contains("brightdata.fetch_page")
            && a.error
                .as_deref()
                .is_some_and(|e| e.starts_with("tool_denied"))
    }));
}
