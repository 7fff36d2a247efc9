//! End-to-end tests of the deployed shape: `trawl api`, `trawl scheduler` and
//! `trawl worker` as separate processes over the real Postgres, NATS JetStream
//! and Redis, with the Bright Data simulator upstream. Each test has its own
//! database, subject/stream prefix, cache key prefix and simulator; tests that stop
//! a service run their own server of it and stop only that one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::time::Duration;

use reqwest::Method;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use trawl::embedded::{Embedded, Options, Upstream};
use trawl::progress::Progress;
use trawl_core::model::JobStatus;
use trawl_core::ports::{JobStore, SliceMessage, SliceQueue, SliceStore};
use trawl_core::spec::JobSpec;
use trawl_queue::nats::{NatsConfig, NatsQueue};
use trawl_sim::SimConfig;
use trawl_store::PgStore;
use trawl_tests::{
    Deployment, EXTRACT, NatsServer, RedisServer, Role, is_terminal, item_keys, read_lines,
    slices_done,
};
use trawl_worker::WorkerConfig;

/// The `trawl` command line, built as this package's `trawl-e2e` binary.
const BIN: &str = env!("CARGO_BIN_EXE_trawl-e2e");

/// Searches that spawn page slices, plus direct pages: enough slices that some
/// pages are malformed on purpose (rejections) and a job takes a while.
fn research_job(name: &str, pages: usize) -> String {
    let urls: Vec<String> = (0..pages)
        .map(|i| format!("\"https://shop.example/p/{name}-{i}\""))
        .collect();
    format!(
        "name: {name}\nsearches:\n  queries: [laptop, tablet, monitor]\n  geos: [us, de]\n  follow_top: 3\n\
         pages:\n  urls: [{}]\n  geos: [us, jp]\n{EXTRACT}retries: {{max_attempts: 3}}\n",
        urls.join(", ")
    )
}

/// The same job run by `trawl run`'s embedded pipeline: what a deployment must match.
async fn embedded_items(yaml: &str) -> (trawl::output::Summary, Vec<Value>, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let sys = Embedded::start(
        Options::new(
            dir.path().join("state"),
            Upstream::Simulator(SimConfig::default()),
        )
        .with_worker(WorkerConfig::default().with_concurrency(16)),
    )
    .await
    .unwrap();
    let spec = JobSpec::parse(yaml).unwrap();
    let submitted = sys.submit(&spec, Some("test")).await.unwrap();
    let out = dir.path().join("out");
    let summary = sys
        .run(
            &submitted.job_id,
            &out,
            &mut Progress::Quiet,
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    sys.shutdown().await;
    (
        summary,
        read_lines(&out.join("items.jsonl")),
        read_lines(&out.join("rejections.jsonl")),
    )
}

fn logs(roles: &[&Role]) -> String {
    roles
        .iter()
        .map(|r| format!("--- {} ---\n{}", r.name, r.log()))
        .collect()
}

async fn finished(api: &trawl_tests::Api, id: &str, roles: &[&Role]) -> Value {
    api.wait_job(id, Duration::from_secs(120), is_terminal, || logs(roles))
        .await
}

fn pg_store_url(d: &Deployment) -> String {
    d.db.url.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_job_runs_through_api_scheduler_and_three_workers_like_the_embedded_run() {
    let yaml = research_job("three", 24);
    let (want, want_items, want_rejections) = embedded_items(&yaml).await;
    assert_eq!(want.status, JobStatus::Succeeded);
    assert!(
        want.items.rejected > 0,
        "the spec should yield rejections: {want:?}"
    );

    let d = Deployment::new(BIN, SimConfig::default()).await;
    let mut api = d.spawn("api", "api");
    let scheduler = d.spawn("scheduler", "scheduler");
    let workers: Vec<Role> = (0..3)
        .map(|i| d.spawn("worker", &format!("worker-{i}")))
        .collect();
    let client = d.client(&api.api_url().await);

    let id = client.submit_yaml(&yaml).await;
    let mut roles = vec![&api, &scheduler];
    roles.extend(workers.iter());
    let job = finished(&client, &id, &roles).await;

    assert_eq!(job["status"], "succeeded", "{job}\n{}", logs(&roles));
    assert_eq!(job["counts"]["items"]["valid"], want.items.valid);
    assert_eq!(job["counts"]["items"]["rejected"], want.items.rejected);
    assert_eq!(job["counts"]["slices"]["total"], want.slices.total);
    let items = client.all(&format!("/v1/jobs/{id}/items"), "items").await;
    let rejections = client
        .all(&format!("/v1/jobs/{id}/rejections"), "rejections")
        .await;
    assert_eq!(item_keys(&items), item_keys(&want_items));
    assert_eq!(item_keys(&rejections), item_keys(&want_rejections));
    // Every slice ran on some worker, and the work was shared.
    let busy = workers.iter().filter(|w| w.log().contains("slice")).count();
    assert!(busy >= 2, "slices ran on {busy} of 3 workers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_job_loses_nothing_and_duplicates_nothing() {
    let yaml = research_job("kill", 40);
    let (want, want_items, _) = embedded_items(&yaml).await;

    // Slow answers keep slices in flight when the worker dies; a short ack wait
    // brings its unacked slices back soon.
    let sim = SimConfig::default().with_latency(Duration::from_millis(40));
    let d = Deployment::new(BIN, sim)
        .await
        .with_env("TRAWL_ACK_WAIT", "2s");
    let mut api = d.spawn("api", "api");
    let scheduler = d.spawn("scheduler", "scheduler");
    let mut victim = d.spawn("worker", "victim");
    let survivor = d.spawn("worker", "survivor");
    let client = d.client(&api.api_url().await);

    let id = client.submit_yaml(&yaml).await;
    let before = client
        .wait_job(
            &id,
            Duration::from_secs(60),
            |v| slices_done(v) >= 10,
            || logs(&[&api, &scheduler, &victim, &survivor]),
        )
        .await;
    assert!(
        !is_terminal(&before),
        "the job ended before the kill: {before}"
    );
    victim.kill();

    let job = finished(&client, &id, &[&api, &scheduler, &survivor]).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["counts"]["items"]["valid"], want.items.valid);
    assert_eq!(job["counts"]["items"]["rejected"], want.items.rejected);
    let items = client.all(&format!("/v1/jobs/{id}/items"), "items").await;
    assert_eq!(item_keys(&items), item_keys(&want_items));
    let unique: HashSet<String> = item_keys(&items).into_iter().collect();
    assert_eq!(unique.len(), items.len(), "duplicate items");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_restarted_and_redis_stopped_mid_job_lose_nothing() {
    let yaml = research_job("outage", 40);
    let (want, want_items, _) = embedded_items(&yaml).await;

    let mut nats = NatsServer::start().await;
    let mut redis = RedisServer::start().await;
    let sim = SimConfig::default().with_latency(Duration::from_millis(30));
    let d = Deployment::on(BIN, sim, nats.url(), redis.url())
        .await
        .with_env("TRAWL_ACK_WAIT", "3s");
    let mut api = d.spawn("api", "api");
    let scheduler = d.spawn("scheduler", "scheduler");
    let w1 = d.spawn("worker", "worker-1");
    let w2 = d.spawn("worker", "worker-2");
    let client = d.client(&api.api_url().await);
    let roles = || logs(&[&api, &scheduler, &w1, &w2]);

    let id = client.submit_yaml(&yaml).await;
    let before = client
        .wait_job(&id, Duration::from_secs(60), |v| slices_done(v) >= 8, roles)
        .await;
    assert!(
        !is_terminal(&before),
        "the job ended before the outage: {before}"
    );
    nats.stop();
    redis.stop();
    nats.restart().await;
    let job = finished(&client, &id, &[&api, &scheduler, &w1, &w2]).await;
    // Redis stays down until the job is over: the cache degraded, nothing failed.
    assert_eq!(job["status"], "succeeded", "{job}\n{}", roles());
    assert_eq!(job["counts"]["items"]["valid"], want.items.valid);
    assert_eq!(job["counts"]["items"]["rejected"], want.items.rejected);
    let items = client.all(&format!("/v1/jobs/{id}/items"), "items").await;
    assert_eq!(item_keys(&items), item_keys(&want_items));
    let seen = |needle: &str| w1.log().contains(needle) || w2.log().contains(needle);
    assert!(
        seen("redis cache unavailable"),
        "workers never noticed Redis was gone:\n{}",
        roles()
    );
    assert!(
        seen("disconnected"),
        "workers never noticed NATS was gone:\n{}",
        roles()
    );
    redis.restart().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_published_twice_yields_one_set_of_items() {
    let d = Deployment::new(BIN, SimConfig::default()).await;
    let mut api = d.spawn("api", "api");
    let scheduler = d.spawn("scheduler", "scheduler");
    let client = d.client(&api.api_url().await);
    let id = client
        .submit_yaml(&format!(
            "name: twice\npages:\n  urls: [\"https://shop.example/p/twice\"]\n  geos: [us, de]\n{EXTRACT}"
        ))
        .await;
    // No worker yet: the scheduler publishes, nothing is consumed.
    client
        .wait_job(
            &id,
            Duration::from_secs(30),
            |v| v["status"] == "running",
            || logs(&[&api, &scheduler]),
        )
        .await;
    let store = PgStore::connect(&pg_store_url(&d), 2).await.unwrap();
    let job_id = trawl_core::model::JobId::parse(&id).unwrap();
    let open = store.open_slices(&job_id).await.unwrap();
    assert_eq!(open.len(), 2);
    let queue = NatsQueue::connect(NatsConfig::new(&d.nats_url).with_prefix(&d.nats_prefix))
        .await
        .unwrap();
    assert_eq!(queue.lag().await.unwrap(), 2);
    for slice in &open {
        queue
            .publish(&SliceMessage {
                job_id: job_id.clone(),
                slice: slice.clone(),
            })
            .await
            .unwrap();
    }
    assert_eq!(queue.lag().await.unwrap(), 2, "a republish must be a no-op");

    let worker = d.spawn("worker", "worker");
    let job = finished(&client, &id, &[&api, &scheduler, &worker]).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let items = client.all(&format!("/v1/jobs/{id}/items"), "items").await;
    let rejections = client
        .all(&format!("/v1/jobs/{id}/rejections"), "rejections")
        .await;
    assert_eq!(
        items.len() + rejections.len(),
        2,
        "{items:?} {rejections:?}"
    );

    // Once done, publishing the slices again changes nothing either.
    for slice in &open {
        queue
            .publish(&SliceMessage {
                job_id: job_id.clone(),
                slice: slice.clone(),
            })
            .await
            .unwrap();
    }
    let counts = store.counts(&job_id).await.unwrap();
    assert_eq!(counts.items_valid + counts.items_rejected, 2);
    assert_eq!(queue.lag().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_whose_upstream_always_fails_is_recorded_failed_and_the_stream_drains() {
    let d = Deployment::new(BIN, SimConfig::default())
        .await
        .with_env("TRAWL_MAX_DELIVER", "3")
        .with_env("TRAWL_REDELIVER", "50ms");
    let mut api = d.spawn("api", "api");
    let scheduler = d.spawn("scheduler", "scheduler");
    let worker = d.spawn("worker", "worker");
    let client = d.client(&api.api_url().await);
    let id = client
        .submit_yaml(&format!(
            "name: down\npages:\n  urls: [\"https://shop.example/p/fine\", \"https://shop{}/p/never\"]\n  geos: [us]\n{EXTRACT}retries: {{max_attempts: 2}}\n",
            trawl_sim::DOWN_HOST_SUFFIX
        ))
        .await;
    let job = finished(&client, &id, &[&api, &scheduler, &worker]).await;
    assert_eq!(job["status"], "partial", "{job}");
    assert_eq!(job["counts"]["slices"]["failed"], 1);
    assert_eq!(job["counts"]["slices"]["succeeded"], 1);

    // Its last error is kept, after every delivery tried it: 3 deliveries of 2
    // attempts each reached the upstream.
    let store = PgStore::connect(&pg_store_url(&d), 2).await.unwrap();
    let job_id = trawl_core::model::JobId::parse(&id).unwrap();
    let failed = store.failed_slices(&job_id, 10).await.unwrap();
    assert_eq!(failed.len(), 1);
    assert!(failed[0].subject.contains("never"), "{failed:?}");
    assert_eq!(failed[0].error.code, "reject_block", "{failed:?}");
    let stats = d.sim.stats();
    assert_eq!(stats.bad_gateway, 3 * 2, "{stats:?}");

    let queue = NatsQueue::connect(NatsConfig::new(&d.nats_url).with_prefix(&d.nats_prefix))
        .await
        .unwrap();
    assert_eq!(queue.lag().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_problem_details_and_store_nothing() {
    let d = Deployment::new(BIN, SimConfig::default()).await;
    let mut api = d.spawn("api", "api");
    let client = d.client(&api.api_url().await);
    let post = |body: &str, ct: &str| {
        client
            .req(Method::POST, "/v1/jobs")
            .header("content-type", ct)
            .body(body.to_owned())
    };
    async fn problem(r: reqwest::RequestBuilder, want: u16) -> Value {
        let resp = r.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), want);
        let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(ct.starts_with("application/problem+json"), "{ct}");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["status"], want, "{v}");
        v
    }

    problem(post("{\"name\": ", "application/json"), 400).await;
    problem(post("name: [unclosed", "application/yaml"), 400).await;
    let v = problem(
        post(
            r#"{"name": "x", "pagez": {}, "pages": {"urls": ["nope"], "geos": ["usa"]}}"#,
            "application/json",
        ),
        422,
    )
    .await;
    let paths: Vec<&str> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert!(paths.len() >= 3, "every field error listed: {v}");
    let big = format!(
        "name: big\npages:\n  urls: [{}]\n  geos: [us]\n",
        (0..40_000)
            .map(|i| format!("\"https://shop.example/p/{i}\""))
            .collect::<Vec<_>>()
            .join(",")
    );
    problem(post(&big, "application/yaml"), 413).await;

    let ok = &format!(
        "name: once\npages:\n  urls: [\"https://shop.example/p/1\"]\n  geos: [us]\n{EXTRACT}"
    );
    let keyed = |body: &str| post(body, "application/yaml").header("Idempotency-Key", "same-key");
    let first = keyed(ok).send().await.unwrap();
    assert_eq!(first.status(), 202);
    let first: Value = first.json().await.unwrap();
    let again: Value = keyed(ok).send().await.unwrap().json().await.unwrap();
    assert_eq!(
        again["job_id"], first["job_id"],
        "same key, same body: same job"
    );
    problem(keyed(&ok.replace("once", "other")), 422).await;

    problem(
        client.req(Method::GET, "/v1/jobs/job_0000000000000000000000000000"),
        404,
    )
    .await;
    problem(client.req(Method::GET, "/v1/jobs/not-a-job"), 404).await;
    let anonymous = trawl_tests::Api {
        key: None,
        ..client.clone()
    };
    problem(anonymous.req(Method::GET, "/v1/approvals"), 401).await;
    let wrong = trawl_tests::Api {
        key: Some("wrong".into()),
        ..client.clone()
    };
    problem(wrong.req(Method::POST, "/v1/jobs").body(ok.to_owned()), 401).await;

    // Only the one good job was stored.
    let store = PgStore::connect(&pg_store_url(&d), 2).await.unwrap();
    let jobs = store.jobs_with_status(&JobStatus::ALL, 100).await.unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].id.as_str(), first["job_id"].as_str().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_role_exits_zero_on_sigterm_and_a_stopped_workers_slices_run_elsewhere() {
    let sim = SimConfig::default().with_latency(Duration::from_millis(50));
    let d = Deployment::new(BIN, sim)
        .await
        .with_env("TRAWL_STOP_GRACE", "5s");
    let mut api = d.spawn("api", "api");
    let scheduler = d.spawn("scheduler", "scheduler");
    let mut first = d.spawn("worker", "first");
    let client = d.client(&api.api_url().await);
    let id = client.submit_yaml(&research_job("term", 30)).await;
    client
        .wait_job(
            &id,
            Duration::from_secs(60),
            |v| slices_done(v) >= 5,
            || logs(&[&api, &scheduler, &first]),
        )
        .await;
    let status = first.stop(Duration::from_secs(20)).await;
    assert!(status.success(), "worker exit: {status}\n{}", first.log());
    let mut second = d.spawn("worker", "second");
    let job = finished(&client, &id, &[&api, &scheduler, &second]).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    // Every role stops on SIGTERM with exit 0.
    let mut scheduler = scheduler;
    for role in [&mut second, &mut scheduler, &mut api] {
        let status = role.stop(Duration::from_secs(20)).await;
        assert!(
            status.success(),
            "{} exit: {status}\n{}",
            role.name,
            role.log()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trawl_migrate_applies_the_schema_once_and_says_why_it_cannot() {
    let db = trawl_tests::Database::create().await;
    let migrate = |url: &str| {
        std::process::Command::new(BIN)
            .arg("migrate")
            .env("TRAWL_DATABASE_URL", url)
            .env_remove("BRIGHTDATA_API_TOKEN")
            .output()
            .unwrap()
    };
    for _ in 0..2 {
        let o = migrate(&db.url);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let store = PgStore::connect(&db.url, 1).await.unwrap();
    store.ping().await.unwrap();
    assert!(
        store
            .jobs_with_status(&[JobStatus::Pending], 1)
            .await
            .unwrap()
            .is_empty()
    );
    let port = trawl_tests::free_port();
    let o = migrate(&format!("postgres://postgres@127.0.0.1:{port}/nowhere"));
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("applying migrations"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_together_never_spend_past_the_jobs_budget() {
    let d = Deployment::new(BIN, SimConfig::default()).await;
    let mut api = d.spawn("api", "api");
    let scheduler = d.spawn("scheduler", "scheduler");
    let workers: Vec<Role> = (0..3)
        .map(|i| d.spawn("worker", &format!("worker-{i}")))
        .collect();
    let client = d.client(&api.api_url().await);
    // 30 pages at $0.0015 each against $0.009: six calls' worth, whichever worker
    // makes them.
    let urls: Vec<String> = (0..30)
        .map(|i| format!("\"https://shop.example/p/budget-{i}\""))
        .collect();
    let id = client
        .submit_yaml(&format!(
            "name: budget\npages:\n  urls: [{}]\n  geos: [us]\n{EXTRACT}budget: {{max_usd: 0.009}}\n",
            urls.join(", ")
        ))
        .await;
    let mut roles = vec![&api, &scheduler];
    roles.extend(workers.iter());
    let job = finished(&client, &id, &roles).await;
    assert_eq!(job["status"], "partial", "{job}");
    assert_eq!(job["counts"]["cost_micros"], 9_000, "{job}");
    assert_eq!(job["counts"]["upstream_calls"], 6, "{job}");
    assert_eq!(job["counts"]["slices"]["succeeded"], 6, "{job}");
    assert!(
        job["reason"].as_str().unwrap().contains("budget exhausted"),
        "{job}"
    );
    assert_eq!(d.sim.stats().ok, 6);
}

/// A job of `n` page slices or a few fewer (`urls` x every country), through api,
/// scheduler and two workers: it completes with every slice once and every item
/// once, and its status is read from its counters while it runs. CI runs it at
/// 100,000 slices; the benchmark at 1,000,000 (`--ignored`, release build).
async fn a_job_of_many_page_slices(n: usize, within: Duration) {
    let geos: Vec<String> = trawl_core::geo::Geo::all()
        .map(|g| g.as_str().to_owned())
        .collect();
    let urls: Vec<String> = (0..n / geos.len())
        .map(|i| format!("\"https://shop.example/p/big-{i}\""))
        .collect();
    let total = urls.len() * geos.len();
    let yaml = format!(
        "name: big\npages:\n  urls: [{}]\n  geos: [{}]\n{EXTRACT}cache: {{max_age: 0}}\n",
        urls.join(", "),
        geos.join(", ")
    );
    let d = Deployment::new(BIN, SimConfig::default()).await;
    // Estimated far above the default approval threshold ($10): the operator
    // turns it off, so the job runs without a person (its waiting is tested in
    // trawl-api's tenants tests).
    let mut api = d.spawn_with(
        "api",
        "api",
        &[("TRAWL_TENANT_LIMITS", "*:approve_above_usd=off")],
    );
    let scheduler = d.spawn("scheduler", "scheduler");
    let workers: Vec<Role> = (0..2)
        .map(|i| d.spawn("worker", &format!("worker-{i}")))
        .collect();
    let client = d.client(&api.api_url().await);
    let id = client.submit_yaml(&yaml).await;
    let mut roles = vec![&api, &scheduler];
    roles.extend(workers.iter());
    // Read while it runs: the counts only ever grow, up to the total.
    let mut last = 0;
    let job = client
        .wait_job(
            &id,
            within,
            |v| {
                let done = slices_done(v);
                assert!(done >= last, "slices done went back: {v}");
                last = done;
                is_terminal(v)
            },
            || logs(&roles),
        )
        .await;
    assert_eq!(job["status"], "succeeded", "{job}\n{}", logs(&roles));
    let counts = &job["counts"];
    assert_eq!(counts["slices"]["total"], total);
    assert_eq!(counts["slices"]["succeeded"], total);
    let valid = counts["items"]["valid"].as_u64().unwrap();
    let rejected = counts["items"]["rejected"].as_u64().unwrap();
    assert_eq!(
        valid + rejected,
        total as u64,
        "one item or rejection per page: {job}"
    );
    // Every item once, read back by cursor.
    let items = client.all(&format!("/v1/jobs/{id}/items"), "items").await;
    assert_eq!(items.len() as u64, valid);
    let unique: HashSet<String> = item_keys(&items).into_iter().collect();
    assert_eq!(unique.len(), items.len(), "duplicate items");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_100_000_page_slices_completes_with_every_item_once() {
    a_job_of_many_page_slices(100_000, Duration::from_secs(1_200)).await;
}

/// The benchmark's size: `cargo test --release -p trawl-tests --test deployed --
/// --ignored a_job_of_1_000_000`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: a million slices take minutes even in a release build"]
async fn a_job_of_1_000_000_page_slices_completes_with_every_item_once() {
    a_job_of_many_page_slices(1_000_000, Duration::from_secs(3_600)).await;
}

/// A database with the store's schema: what a replica of the primary has.
async fn migrated_database() -> trawl_tests::Database {
    let db = trawl_tests::Database::create().await;
    PgStore::connect(&db.url, 1).await.unwrap().close().await;
    db
}

/// Copies a job's rows from the primary to the replica database, table by table
/// (what streaming replication does once it has caught up).
async fn replicate(from: &str, to: &str, job: &str) {
    let (src, dst) = (
        sqlx::PgPool::connect(from).await.unwrap(),
        sqlx::PgPool::connect(to).await.unwrap(),
    );
    for (table, key) in [
        ("jobs", "id"),
        ("slices", "job_id"),
        ("items", "job_id"),
        ("rejections", "job_id"),
        ("trace_steps", "job_id"),
    ] {
        // Table and column names from this list, not input.
        let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT to_jsonb(t)::TEXT FROM {table} t WHERE {key} = $1"
        )))
        .bind(job)
        .fetch_all(&src)
        .await
        .unwrap();
        for r in rows {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {table} SELECT * FROM jsonb_populate_record(NULL::{table}, $1::JSONB)"
            )))
            .bind(r)
            .execute(&dst)
            .await
            .unwrap();
        }
    }
    src.close().await;
    dst.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_reads_a_jobs_rows_from_the_read_replica_and_the_job_from_the_primary() {
    let d = Deployment::new(BIN, SimConfig::default()).await;
    let replica = migrated_database().await;
    let mut api = d.spawn_with(
        "api",
        "api",
        &[("TRAWL_DATABASE_READ_URL", replica.url.as_str())],
    );
    let scheduler = d.spawn("scheduler", "scheduler");
    let worker = d.spawn("worker", "worker");
    let client = d.client(&api.api_url().await);
    let yaml = format!(
        "name: replica\npages:\n  urls: [\"https://shop.example/p/r-1\", \"https://shop.example/p/r-2\"]\n  geos: [us]\n{EXTRACT}"
    );
    let id = client.submit_yaml(&yaml).await;
    let job = finished(&client, &id, &[&api, &scheduler, &worker]).await;
    // The job, its status and counts: from the primary, at once.
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["counts"]["items"]["valid"], 2);
    // The scheduler made the partitions of the days ahead on its passes.
    let pool = sqlx::PgPool::connect(&d.db.url).await.unwrap();
    let ahead: bool = sqlx::query_scalar(
        "SELECT to_regclass('items_p' || to_char(now() AT TIME ZONE 'UTC' + interval '3 days', 'YYYYMMDD')) IS NOT NULL",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(ahead, "no partition three days ahead");
    pool.close().await;
    // Its rows: from the replica, which has not caught up yet.
    let items = client.all(&format!("/v1/jobs/{id}/items"), "items").await;
    assert!(items.is_empty(), "items read from the primary: {items:?}");
    let trace = client.all(&format!("/v1/jobs/{id}/trace"), "steps").await;
    assert!(trace.is_empty(), "trace read from the primary: {trace:?}");
    // Caught up, the replica answers with the primary's rows.
    replicate(&d.db.url, &replica.url, &id).await;
    let items = client.all(&format!("/v1/jobs/{id}/items"), "items").await;
    assert_eq!(items.len(), 2);
    assert!(
        !client
            .all(&format!("/v1/jobs/{id}/trace"), "steps")
            .await
            .is_empty()
    );
    // Cancelling and submitting still write to the primary.
    let id2 = client
        .submit_yaml(&yaml.replace("replica", "replica-2"))
        .await;
    let cancelled = client
        .req(Method::POST, &format!("/v1/jobs/{id2}/cancel"))
        .send()
        .await
        .unwrap();
    assert!(
        cancelled.status().is_success(),
        "{}",
        cancelled.text().await.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_replica_behind_the_primarys_schema_is_refused_and_writes_through_it_fail() {
    let bare = trawl_tests::Database::create().await;
    let err = PgStore::connect_replica(&bare.url, 1).await.unwrap_err();
    assert!(err.to_string().contains("read replica"), "{err}");
    let replica = migrated_database().await;
    let reads = PgStore::connect_replica(&replica.url, 1).await.unwrap();
    assert!(
        reads
            .jobs_with_status(&[JobStatus::Pending], 1)
            .await
            .unwrap()
            .is_empty()
    );
    let job = trawl_core::ports::JobRecord {
        id: trawl_core::model::JobId::generate(trawl_core::model::now_ms(), 7),
        name: "w".into(),
        spec: serde_json::json!({}),
        status: JobStatus::Queued,
        reason: None,
        estimate: trawl_core::cost::Micros(0),
        created_ms: trawl_core::model::now_ms(),
        idempotency: None,
        traceparent: None,
        owner: None,
        retention_ms: None,
        slices_max: 0,
        approve_above: None,
    };
    let wrote = reads.create_job(&job, &[]).await;
    assert!(
        wrote.is_err(),
        "a write through the replica's pool was taken"
    );
    reads.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_answers_at_the_first_probe_after_redis_and_nats_restart() {
    let mut nats = NatsServer::start().await;
    let mut redis = RedisServer::start().await;
    let d = Deployment::on(BIN, SimConfig::default(), nats.url(), redis.url())
        .await
        .with_env("TRAWL_OPS_LISTEN", "127.0.0.1:0");
    let mut worker = d.spawn("worker", "worker");
    let ops = worker.ops_url().await;
    trawl_brightdata::ensure_crypto_provider();
    let http = reqwest::Client::new();
    let ready = || async {
        let r = http.get(format!("{ops}/readyz")).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    assert_eq!(ready().await.0, 200, "{}", worker.log());

    // Each dependency restarts; once it listens again, the first probe passes:
    // the connection the restart broke is not taken for the dependency.
    redis.stop();
    redis.restart().await;
    let (status, body) = ready().await;
    assert_eq!(
        status,
        200,
        "after the Redis restart: {body}\n{}",
        worker.log()
    );
    nats.stop();
    nats.restart().await;
    let (status, body) = ready().await;
    assert_eq!(
        status,
        200,
        "after the NATS restart: {body}\n{}",
        worker.log()
    );
}
