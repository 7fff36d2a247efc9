//! The fault suite: the deployed shape (`trawl api`, `trawl scheduler`, three
//! `trawl worker`s) over a Postgres, a NATS JetStream and a Redis of its own, on
//! free loopback ports (never the machine's), running a job of page slices
//! against the simulator while one fault is injected:
//!
//! | scenario | fault |
//! |---|---|
//! | `clean` | none: the time the others are compared with |
//! | `workers_killed` | kill -9 of two workers, started again |
//! | `scheduler_killed` | kill -9 of the scheduler, started again |
//! | `api_killed` | kill -9 of the API while jobs are submitted with idempotency keys; the same submissions again after it is back |
//! | `nats_killed` | kill -9 of NATS, started again |
//! | `nats_stopped` | NATS stopped for the outage, started again |
//! | `redis_down` | Redis stopped for the outage, started again |
//! | `postgres_restarted` | an immediate stop of Postgres, started again at once |
//! | `postgres_down` | Postgres stopped (immediate) for the outage, started again |
//! | `upstream_faults` | the simulator answers 429, 502 and not at all, more often |
//!
//! In every scenario the simulator also answers a few requests with 429, 502 or
//! not at all, and the job's pages are cached: a slice delivered again after a
//! fault may find its page in the cache, filled by the attempt whose outcome was
//! lost, and takes over the single-flight lock of a worker that was killed.
//! Each checks: the job ends `succeeded`; every page is one item or one
//! rejection, none twice; no slice is open; the ledger (the cost rows in
//! Postgres, and the job's `cost_micros`) equals what the simulator billed (its
//! successful answers at the page price); and every role answers its first
//! readiness probe after the fault ends.
//!
//! Size: `TRAWL_FAULT_SLICES` pages per job (default 300),
//! `TRAWL_FAULT_OUTAGE` per outage (default 5s) and `TRAWL_FAULT_KILLS` rounds
//! of `workers_killed` (default 1), so the test command runs a CI-sized suite.
//! The benchmark is the same suite at full size (docs/benchmarks.md):
//! `TRAWL_FAULT_SLICES=6000 TRAWL_FAULT_OUTAGE=30s cargo test --release -p
//! trawl-tests --test faults -- --nocapture --test-threads 1`; each scenario
//! prints how long its job took.
//!
//! Scenarios run one at a time (a lock), each on servers of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use sqlx::{Connection, PgConnection};
use trawl_core::cost::Micros;
use trawl_sim::{Faults, SimConfig};
use trawl_tests::{
    Api, Deployment, EXTRACT, NatsServer, PostgresServer, RedisServer, Role, is_terminal,
    slices_done,
};

/// The `trawl` command line, built as this package's `trawl-e2e` binary.
const BIN: &str = env!("CARGO_BIN_EXE_trawl-e2e");

/// What the simulator bills for a page (its default price table).
const PAGE: Micros = Micros(1_500);

/// One scenario at a time: each starts three servers and five roles.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A size from the environment, `default` when unset or unreadable.
fn setting<T>(name: &str, parse: impl FnOnce(&str) -> Option<T>, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| parse(&v))
        .unwrap_or(default)
}

fn slices() -> usize {
    setting("TRAWL_FAULT_SLICES", |v| v.parse().ok(), 300)
}

/// Rounds of kills in `workers_killed`.
fn kills() -> u64 {
    setting("TRAWL_FAULT_KILLS", |v| v.parse().ok(), 1).max(1)
}

fn outage() -> Duration {
    setting(
        "TRAWL_FAULT_OUTAGE",
        |v| humantime::parse_duration(v).ok(),
        Duration::from_secs(5),
    )
}

/// A job of `n` distinct pages (US), cached: each page is fetched upstream once
/// unless an attempt is lost.
fn job_yaml(name: &str, n: usize) -> String {
    let urls: Vec<String> = (0..n)
        .map(|i| format!("\"https://shop.example/p/{name}-{i}\""))
        .collect();
    format!(
        "name: {name}\npages:\n  urls: [{}]\n  geos: [us]\n{EXTRACT}retries: {{max_attempts: 4}}\n",
        urls.join(", ")
    )
}

/// The stack of one scenario: its own servers, the roles, a client.
struct Stack {
    postgres: PostgresServer,
    nats: NatsServer,
    redis: RedisServer,
    d: Deployment,
    api: Role,
    scheduler: Role,
    workers: Vec<Role>,
    client: Api,
    /// The scenario's job, once submitted.
    job: String,
}

impl Stack {
    async fn start(sim: SimConfig) -> Stack {
        let postgres = PostgresServer::start().await;
        let nats = NatsServer::start().await;
        let redis = RedisServer::start().await;
        let d =
            Deployment::on_servers(BIN, sim, &postgres.url("postgres"), nats.url(), redis.url())
                .await
                .with_env("TRAWL_ACK_WAIT", "5s")
                .with_env("TRAWL_OPS_LISTEN", "127.0.0.1:0")
                .with_env("TRAWL_RATE_JOBS", "1000")
                .with_env("TRAWL_RATE_JOBS_BURST", "1000");
        let mut api = d.spawn("api", "api");
        let scheduler = d.spawn("scheduler", "scheduler");
        let workers = (1..=3)
            .map(|i| d.spawn("worker", &format!("worker-{i}")))
            .collect();
        let client = d.client(&api.api_url().await);
        Stack {
            postgres,
            nats,
            redis,
            d,
            api,
            scheduler,
            workers,
            client,
            job: String::new(),
        }
    }

    fn logs(&self) -> String {
        std::iter::once(&self.api)
            .chain(std::iter::once(&self.scheduler))
            .chain(&self.workers)
            .map(|r| format!("--- {} ---\n{}", r.name, r.log()))
            .collect()
    }

    /// Waits until `n` slices of the job are done, before a fault.
    async fn wait_done(&self, id: &str, n: u64) {
        let v = self
            .client
            .wait_job(
                id,
                Duration::from_secs(120),
                |v| slices_done(v) >= n,
                || self.logs(),
            )
            .await;
        assert!(!is_terminal(&v), "the job ended before the fault: {v}");
    }

    /// Every role answers its first readiness probe.
    async fn assert_ready(&mut self, after: &str) {
        let http = reqwest::Client::new();
        let mut urls = vec![(
            "api".to_owned(),
            format!("{}/readyz", self.api.api_url().await),
        )];
        for role in std::iter::once(&mut self.scheduler).chain(self.workers.iter_mut()) {
            urls.push((
                role.name.clone(),
                format!("{}/readyz", role.ops_url().await),
            ));
        }
        for (name, url) in urls {
            let r = http.get(&url).send().await.unwrap();
            let status = r.status().as_u16();
            let body = r.text().await.unwrap_or_default();
            assert_eq!(
                status,
                200,
                "{name} not ready at the first probe after {after}: {body}\n{}",
                self.logs()
            );
        }
    }

    /// The job's end, checked: succeeded, each page once, nothing open, the
    /// ledger equal to the simulator's billing. Returns the job's view.
    async fn assert_job(&self, id: &str, pages: usize) -> Value {
        let job = self
            .client
            .wait_job(id, Duration::from_secs(600), is_terminal, || self.logs())
            .await;
        assert_eq!(job["status"], "succeeded", "{job}\n{}", self.logs());
        let counts = &job["counts"];
        assert_eq!(counts["slices"]["total"], pages, "{job}");
        assert_eq!(counts["slices"]["open"], 0, "{job}");
        let mut seen: HashMap<String, u32> = HashMap::new();
        for path in ["items", "rejections"] {
            for row in self
                .client
                .all(&format!("/v1/jobs/{id}/{path}"), path)
                .await
            {
                *seen
                    .entry(row["url"].as_str().unwrap().to_owned())
                    .or_default() += 1;
            }
        }
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "pages found twice: {twice:?}");
        assert_eq!(seen.len(), pages, "pages with no item or rejection");
        job
    }

    /// The ledger of every job of the deployment against the simulator's
    /// billing: equal, but for at most `lost_to_kills` calls a worker killed
    /// outright was answered for and could no longer record (the few
    /// milliseconds between an answer and its outcome's write). Returns the
    /// calls missing.
    async fn assert_ledger(&self, jobs: &[&Value], lost_to_kills: u64) -> u64 {
        let billed_calls = self.d.sim.stats().ok;
        let billed = PAGE.saturating_mul(billed_calls);
        let mut db = PgConnection::connect(&self.d.db.url).await.unwrap();
        let rows: i64 = sqlx::query_scalar("SELECT COALESCE(SUM(amount), 0)::BIGINT FROM costs")
            .fetch_one(&mut db)
            .await
            .unwrap();
        let counted: i64 = jobs
            .iter()
            .map(|j| j["counts"]["cost_micros"].as_i64().unwrap())
            .sum();
        assert_eq!(rows, counted, "the jobs' counts against the ledger's rows");
        let missing = billed.0 - rows;
        assert!(
            missing >= 0 && missing % PAGE.0 == 0,
            "the ledger ({rows}) against the simulator's billing ({billed:?})"
        );
        let missing = (missing / PAGE.0) as u64;
        assert!(
            missing <= lost_to_kills,
            "{missing} billed calls missing from the ledger ({:?}, {lost_to_kills} may be lost to kills)",
            self.d.sim.stats()
        );
        missing
    }
}

/// Runs one scenario: the job, `fault` once a quarter of it is done, the checks.
/// `lost_to_kills`: billed calls the fault may keep from the ledger (workers
/// killed outright: their answers in flight).
async fn scenario_with(
    name: &str,
    sim: SimConfig,
    lost_to_kills: u64,
    fault: impl AsyncFnOnce(&mut Stack),
) {
    let _one = ONE_AT_A_TIME.lock().await;
    let n = slices();
    let mut s = Stack::start(sim).await;
    let started = Instant::now();
    let id = s.client.submit_yaml(&job_yaml(name, n)).await;
    s.job = id.clone();
    s.wait_done(&id, (n / 4) as u64).await;
    let fault_at = started.elapsed();
    fault(&mut s).await;
    s.assert_ready(name).await;
    let job = s.assert_job(&id, n).await;
    let missing = s.assert_ledger(&[&job], lost_to_kills).await;
    println!(
        "fault suite: {name}: {n} slices in {:.1} s (fault at {:.1} s); {} billed calls, {missing} not in the ledger",
        started.elapsed().as_secs_f64(),
        fault_at.as_secs_f64(),
        s.d.sim.stats().ok,
    );
}

/// A scenario whose fault keeps no billed call from the ledger.
async fn scenario(name: &str, sim: SimConfig, fault: impl AsyncFnOnce(&mut Stack)) {
    scenario_with(name, sim, 0, fault).await;
}

/// The simulator of every scenario: slow enough that a fault lands mid-job,
/// and failing now and then, as an upstream does.
fn sim() -> SimConfig {
    SimConfig::default()
        .with_latency(Duration::from_millis(100))
        .with_faults(Faults::parse("429=0.01,502=0.01,timeout=0.005").unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean() {
    scenario("clean", sim(), async |_: &mut Stack| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_killed() {
    // Each killed worker runs 8 slices at a time: an answer it got in the last
    // milliseconds, before its outcome was written, is billed and unrecorded.
    // Rounds after the first come evenly over the middle half of the job.
    let rounds = kills();
    let step = slices() as u64 / 2 / rounds;
    scenario_with(
        "workers_killed",
        sim(),
        rounds * 2 * 8,
        async |s: &mut Stack| {
            let first = slices() as u64 / 4;
            for round in 0..rounds {
                s.wait_done(&s.job.clone(), first + round * step).await;
                for i in [0, 1] {
                    s.workers[i].kill();
                    s.workers[i] = s.d.spawn("worker", &format!("worker-{}", i + 1));
                }
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_killed() {
    scenario("scheduler_killed", sim(), async |s: &mut Stack| {
        s.scheduler.kill();
        s.scheduler = s.d.spawn("scheduler", "scheduler");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_killed() {
    scenario("nats_killed", sim(), async |s: &mut Stack| {
        s.nats.kill();
        s.nats.restart().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_stopped() {
    scenario("nats_stopped", sim(), async |s: &mut Stack| {
        s.nats.stop();
        tokio::time::sleep(outage()).await;
        s.nats.restart().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down() {
    scenario("redis_down", sim(), async |s: &mut Stack| {
        s.redis.stop();
        tokio::time::sleep(outage()).await;
        s.redis.restart().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted() {
    scenario("postgres_restarted", sim(), async |s: &mut Stack| {
        s.postgres.stop();
        s.postgres.restart().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down() {
    scenario("postgres_down", sim(), async |s: &mut Stack| {
        s.postgres.stop();
        tokio::time::sleep(outage()).await;
        s.postgres.restart().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_faults() {
    let faults = Faults::parse("429=0.05,502=0.05,timeout=0.02").unwrap();
    scenario(
        "upstream_faults",
        sim().with_faults(faults),
        async |_: &mut Stack| {},
    )
    .await;
}

/// Jobs submitted with idempotency keys while the API is killed, then the same
/// submissions again once it is back: one job per key, each run once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_killed() {
    let _one = ONE_AT_A_TIME.lock().await;
    let jobs = 6;
    let per_job = (slices() / jobs).max(1);
    let mut s = Stack::start(sim()).await;
    let started = Instant::now();
    let submit = |client: Api, k: usize| async move {
        let key = format!("fault-suite-{k}");
        let r = client
            .req(reqwest::Method::POST, "/v1/jobs")
            .header("content-type", "application/yaml")
            .header("idempotency-key", &key)
            .body(job_yaml(&format!("api_killed_{k}"), per_job))
            .send()
            .await;
        let Ok(r) = r else { return None };
        let status = r.status().as_u16();
        let body: Value = r.json().await.ok()?;
        assert!(matches!(status, 200 | 202), "{status}: {body}");
        body["job_id"].as_str().map(str::to_owned)
    };
    // Half go in before the kill; the rest race it.
    let mut first: Vec<Option<String>> = Vec::new();
    for k in 0..jobs / 2 {
        first.push(submit(s.client.clone(), k).await);
    }
    let racing: Vec<_> = (jobs / 2..jobs)
        .map(|k| tokio::spawn(submit(s.client.clone(), k)))
        .collect();
    s.api.kill();
    for r in racing {
        first.push(r.await.unwrap());
    }
    s.api = s.d.spawn("api", "api");
    s.client = s.d.client(&s.api.api_url().await);
    s.assert_ready("api_killed").await;
    // Every key again: the jobs that were answered keep their ids.
    let mut ids = Vec::new();
    for (k, before) in first.iter().enumerate() {
        let id = submit(s.client.clone(), k).await.expect("the API answers");
        if let Some(before) = before {
            assert_eq!(&id, before, "key {k} named another job after the restart");
        }
        ids.push(id);
    }
    let mut views = Vec::new();
    for id in &ids {
        views.push(s.assert_job(id, per_job).await);
    }
    let mut db = PgConnection::connect(&s.d.db.url).await.unwrap();
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(stored, jobs as i64, "one job per idempotency key");
    s.assert_ledger(&views.iter().collect::<Vec<_>>(), 0).await;
    println!(
        "fault suite: api_killed: {jobs} jobs of {per_job} slices in {:.1} s; {} billed calls",
        started.elapsed().as_secs_f64(),
        s.d.sim.stats().ok,
    );
}
