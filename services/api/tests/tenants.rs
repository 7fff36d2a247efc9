//! Tenants and their quotas through the REST API (issue 42, part 4): two
//! tenants, one over each kind of limit while the other is unaffected; the
//! approval threshold; usage that adds up to the ledger; and a benchmark of a
//! million-slice plan while another caller reads and cancels, on the embedded
//! store and on Postgres.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use serde_json::{Value, json};
use tower::ServiceExt;
use trawl_api::testing::EmbeddedApi;
use trawl_api::{ApiKey, ApiState, Auth, router};
use trawl_core::cost::{Micros, PriceTable};
use trawl_core::model::{CostEntry, JobId, JobStatus, SliceId};
use trawl_core::ports::{JobStore, SliceStore, Store};
use trawl_core::spec::JobSpec;
use trawl_core::tenant::TenantLimits;

const ALICE: &str = "alice-secret-0001"; // acme/alice
const BOB: &str = "bob-secret-0002"; // acme/bob
const SOLO: &str = "solo-secret-0003"; // solo, no group: its own tenant
const ADMIN: &str = "admin-secret-0004";

struct App {
    router: Router,
    api: EmbeddedApi,
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    fn job_id(&self) -> JobId {
        assert_eq!(self.status, StatusCode::ACCEPTED, "{}", self.text());
        JobId::parse(self.json()["job_id"].as_str().unwrap()).unwrap()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The `over-limit` problem with this status; returns it.
    fn over(&self, status: u16, limit: &str) -> Value {
        assert_eq!(self.status.as_u16(), status, "{}", self.text());
        assert_eq!(
            self.headers[header::CONTENT_TYPE],
            "application/problem+json"
        );
        let p = self.json();
        assert_eq!(p["type"], "https://trawl.dev/problems/over-limit", "{p}");
        assert_eq!(p["limit"]["name"], limit, "{p}");
        assert!(p["detail"].as_str().unwrap().contains(limit), "{p}");
        p
    }

    fn retry_after(&self) -> Option<u64> {
        self.headers
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap().parse().unwrap())
    }
}

async fn spawn(limits: &str) -> App {
    app_with(limits, |s| s).await
}

fn keys() -> Auth {
    Auth::Keys(vec![
        ApiKey::parse(&format!("acme/alice:{ALICE}")).unwrap(),
        ApiKey::parse(&format!("acme/bob:{BOB}")).unwrap(),
        ApiKey::parse(&format!("solo:{SOLO}")).unwrap(),
        ApiKey::parse(&format!("ops:{ADMIN}")).unwrap().admin(),
    ])
}

async fn app_with(limits: &str, tweak: impl FnOnce(ApiState) -> ApiState) -> App {
    let api = EmbeddedApi::new(keys()).await.unwrap();
    let state = api
        .state
        .clone()
        .with_tenant_limits(TenantLimits::parse(limits).unwrap());
    App {
        router: router(tweak(state)),
        api,
    }
}

/// A job of `n` page slices (one URL in each of `n` countries… of URLs).
fn pages(n: usize) -> String {
    let urls: Vec<String> = (0..n)
        .map(|i| format!("https://shop.example/p/{i}"))
        .collect();
    json!({
        "name": "prices",
        "pages": {"urls": urls, "geos": ["us"]},
        "extract": {"fields": {"title": {"css": "h1"}}},
    })
    .to_string()
}

impl App {
    async fn send(&self, key: &str, method: Method, uri: &str, body: Option<String>) -> Answer {
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .header(header::AUTHORIZATION, format!("Bearer {key}"));
        if body.is_some() {
            req = req.header(header::CONTENT_TYPE, "application/json");
        }
        let req = req.body(body.map_or_else(Body::empty, Body::from)).unwrap();
        let res = self.router.clone().oneshot(req).await.unwrap();
        let status = res.status();
        let headers = res.headers().clone();
        let body = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap();
        Answer {
            status,
            headers,
            body,
        }
    }

    async fn submit(&self, key: &str, slices: usize) -> Answer {
        self.send(key, Method::POST, "/v1/jobs", Some(pages(slices)))
            .await
    }

    async fn cancel(&self, key: &str, id: &JobId) {
        let a = self
            .send(key, Method::POST, &format!("/v1/jobs/{id}/cancel"), None)
            .await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    }

    async fn usage(&self, key: &str, query: &str) -> Answer {
        self.send(key, Method::GET, &format!("/v1/usage{query}"), None)
            .await
    }

    async fn jobs_stored(&self) -> usize {
        let statuses = [
            JobStatus::Pending,
            JobStatus::AwaitingApproval,
            JobStatus::Queued,
            JobStatus::Running,
            JobStatus::Cancelled,
        ];
        self.api
            .store
            .jobs_with_status(&statuses, 10_000)
            .await
            .unwrap()
            .len()
    }

    /// Plans a job as the scheduler does and bills `micros` on its first slice,
    /// as a worker's outcome would.
    async fn plan_and_bill(&self, id: &JobId, micros: i64) -> SliceId {
        let job = self.api.store.job(id).await.unwrap().unwrap();
        let spec = JobSpec::from_value(job.spec.clone()).unwrap();
        let plan = trawl_core::plan::plan(&spec, &PriceTable::default());
        let first = plan.slices[0].id.clone();
        assert!(
            self.api
                .store
                .plan_job(id, &mut plan.slices.into_iter(), JobStatus::Queued)
                .await
                .unwrap()
        );
        let cost = CostEntry {
            slice_id: first.clone(),
            attempt: "a1".into(),
            seq: 0,
            product: "unlocker".into(),
            amount: Micros(micros),
        };
        self.api
            .store
            .record_costs(id, &first, &[cost], 1)
            .await
            .unwrap();
        first
    }
}

#[tokio::test]
async fn one_tenant_over_its_count_limits_leaves_the_other_unaffected() {
    let app = spawn("acme:concurrent_jobs=2,jobs_per_day=3,slices_per_job=10").await;
    // Alice and Bob share the tenant acme (their keys' group).
    let j1 = app.submit(ALICE, 4).await.job_id();
    let j2 = app.submit(BOB, 4).await.job_id();
    let refused = app.submit(ALICE, 4).await;
    let p = refused.over(429, "concurrent_jobs");
    assert_eq!(
        (p["limit"]["limit"].as_f64(), p["limit"]["used"].as_f64()),
        (Some(2.0), Some(2.0))
    );
    assert!(refused.retry_after().is_some_and(|s| s >= 1), "Retry-After");
    // Another tenant is not held by acme's jobs.
    for _ in 0..3 {
        app.submit(SOLO, 4).await.job_id();
    }
    assert_eq!(app.jobs_stored().await, 5, "the refused job was not stored");

    // A job ended frees its place; the day's count still holds.
    app.cancel(ALICE, &j1).await;
    let j3 = app.submit(ALICE, 4).await.job_id();
    app.cancel(BOB, &j2).await;
    app.cancel(ALICE, &j3).await;
    let refused = app.submit(BOB, 4).await;
    refused.over(429, "jobs_per_day");
    let wait = refused.retry_after().unwrap();
    assert!(
        (1..=86_400).contains(&wait),
        "until the next UTC day: {wait} s"
    );

    // Too big ever to fit: 422, no Retry-After.
    let app = spawn("acme:slices_per_job=10").await;
    let refused = app.submit(ALICE, 11).await;
    let p = refused.over(422, "slices_per_job");
    assert_eq!(p["limit"]["requested"].as_f64(), Some(11.0));
    assert_eq!(refused.retry_after(), None);
    app.submit(SOLO, 11).await.job_id();
    app.submit(ALICE, 10).await.job_id();
}

#[tokio::test]
async fn spend_and_slices_in_flight_are_counted_per_tenant() {
    // Default prices: a page is $0.0015; 10 pages estimate $0.015.
    let app = spawn("acme:usd_per_day=0.04,slices_in_flight=30").await;
    let first = app.submit(ALICE, 10).await.job_id();
    app.submit(BOB, 10).await.job_id();
    // 20 slices in flight (not yet planned: counted at their most) + 11 > 30.
    let refused = app.submit(ALICE, 11).await;
    let p = refused.over(429, "slices_in_flight");
    assert_eq!(p["limit"]["used"].as_f64(), Some(20.0));
    app.submit(SOLO, 10).await.job_id();

    // Planned and half done: only open slices count.
    let billed = app.plan_and_bill(&first, 9_000).await;
    let done = trawl_core::model::SliceOutcome::default();
    app.api
        .store
        .record_outcome(&first, &billed, &done)
        .await
        .unwrap();
    let u = app.usage(ALICE, "").await.json();
    assert_eq!(u["slices_in_flight"], 19, "{u}");
    // 19 + 5 and then + 2 fit in flight; the day's spend: $0.015 (estimate above its $0.009
    // spend) + $0.015 + $0.0075 = $0.0375 ≤ $0.04.
    app.submit(ALICE, 5).await.job_id();
    let refused = app.submit(ALICE, 2).await;
    let p = refused.over(429, "usd_per_day");
    assert!(
        (p["limit"]["used"].as_f64().unwrap() - 0.0375).abs() < 1e-9,
        "{p}"
    );
    assert!(refused.retry_after().is_some());
    // A job whose estimate alone is over the day's limit never fits: 422.
    let app = spawn("acme:usd_per_day=0.01").await;
    app.submit(ALICE, 10).await.over(422, "usd_per_day");
    app.submit(SOLO, 10).await.job_id();
}

#[tokio::test]
async fn a_job_above_its_tenants_threshold_waits_for_approval() {
    // Default: above $10. The tenant acme: above $0.01; solo: off.
    let app = spawn("acme:approve_above_usd=0.01;solo:approve_above_usd=off").await;
    let planned = |id: JobId| {
        let store = app.api.store.clone();
        async move {
            let job = store.job(&id).await.unwrap().unwrap();
            let spec = JobSpec::from_value(job.spec.clone()).unwrap();
            let estimate = trawl_core::plan::estimate(&spec, &PriceTable::default());
            (
                job.clone(),
                trawl_scheduler::approval_for(&job, &spec, &estimate),
            )
        }
    };
    let (job, approval) = planned(app.submit(ALICE, 10).await.job_id()).await;
    assert_eq!(job.approve_above, Some(Micros::from_usd(0.01)));
    let approval = approval.expect("a $0.015 job of acme waits");
    assert!(
        approval.reason.contains("tenant's approve_above_usd"),
        "{}",
        approval.reason
    );
    let (_, approval) = planned(app.submit(SOLO, 10).await.job_id()).await;
    assert!(approval.is_none(), "solo's threshold is off");
    // Admins are a tenant like any other: the default $10.
    let (job, approval) = planned(app.submit(ADMIN, 10).await.job_id()).await;
    assert_eq!(job.approve_above, Some(Micros::from_usd(10.0)));
    assert!(approval.is_none());
    // A spec's own lower threshold still counts.
    let spec = json!({
        "name": "p", "pages": {"urls": ["https://shop.example/a"], "geos": ["us", "de"]},
        "extract": {"fields": {"t": {"css": "h1"}}}, "budget": {"approve_above_usd": 0.001},
    });
    let id = app
        .send(SOLO, Method::POST, "/v1/jobs", Some(spec.to_string()))
        .await
        .job_id();
    let (job, approval) = planned(id).await;
    assert_eq!(job.approve_above, Some(Micros::from_usd(0.001)));
    assert!(
        approval
            .unwrap()
            .reason
            .starts_with("estimated cost $0.0030 is above approve_above_usd")
    );
}

#[tokio::test]
async fn usage_adds_up_to_the_ledger_and_is_the_tenants_own() {
    let app = spawn("acme:usd_per_month=100,jobs_per_day=50").await;
    let (a, b, s) = (
        app.submit(ALICE, 3).await.job_id(),
        app.submit(BOB, 2).await.job_id(),
        app.submit(SOLO, 4).await.job_id(),
    );
    app.plan_and_bill(&a, 1_234).await;
    app.plan_and_bill(&b, 4_321).await;
    app.plan_and_bill(&s, 999).await;
    app.cancel(BOB, &b).await;

    let answer = app.usage(BOB, "").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    let u = answer.json();
    assert_eq!(u["tenant"], "acme");
    let mut ledger = 0;
    for id in [&a, &b] {
        ledger += app.api.store.spent(id).await.unwrap().0;
    }
    assert_eq!(ledger, 1_234 + 4_321);
    let today = &u["today"];
    assert_eq!(today["jobs"], 2);
    assert_eq!(today["slices"], 5);
    assert!(
        (today["spent_usd"].as_f64().unwrap() - ledger as f64 / 1e6).abs() < 1e-12,
        "{u}"
    );
    assert_eq!(u["days"].as_array().unwrap().len(), 1);
    assert_eq!(
        u["days"][0]["day"],
        trawl_core::tenant::date_of(trawl_core::model::now_ms())
    );
    assert_eq!(u["active_jobs"], 1);
    assert_eq!(u["limits"]["usd_per_month"], 100.0);
    assert_eq!(u["limits"]["approve_above_usd"], 10.0, "the default's");
    assert_eq!(u["limits"]["slices_per_job"], Value::Null);
    assert_eq!(u["remaining"]["jobs_today"], 48);
    // Alice reads the same tenant; solo only its own.
    assert_eq!(app.usage(ALICE, "").await.json()["today"], u["today"]);
    let solo = app.usage(SOLO, "").await.json();
    assert_eq!(
        (solo["tenant"].as_str(), solo["today"]["jobs"].as_u64()),
        (Some("key:solo"), Some(1))
    );
    assert!((solo["today"]["spent_usd"].as_f64().unwrap() - 0.000999).abs() < 1e-12);
    // Another tenant's usage: admins only.
    let refused = app.usage(SOLO, "?tenant=acme").await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.text());
    assert_eq!(
        refused.json()["type"],
        "https://trawl.dev/problems/forbidden"
    );
    let admin = app.usage(ADMIN, "?tenant=acme").await.json();
    assert_eq!(admin["today"], u["today"]);
    // Bad parameters are refused, not lowered.
    for q in ["?days=0", "?days=367", "?day=3"] {
        assert_eq!(
            app.usage(ALICE, q).await.status,
            StatusCode::BAD_REQUEST,
            "{q}"
        );
    }
}

/// The benchmark of issue 42: one caller submits a job of 1,000,000 page
/// slices and the scheduler's planner stores it, while another caller reads its
/// own job and cancels jobs through the API; every read and cancel is timed.
/// Run with:
/// `cargo test --release -p trawl-api --test tenants -- --ignored --nocapture plan_benchmark`
/// (Postgres at `TRAWL_TEST_DATABASE_URL`, default the machine's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run with --ignored --nocapture"]
async fn plan_benchmark() {
    let slices = std::env::var("TRAWL_PLAN_SLICES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(999_000_usize);
    // The other caller submits a job to cancel after every tenth read, far
    // above the default submission rate: the benchmark measures the store,
    // not the rate limit, so its submissions are not limited.
    let unlimited = || {
        trawl_api::RateLimits::default()
            .with_jobs(trawl_api::RateLimit::per_second(100_000, 100_000))
    };
    let sqlite = app_with("*:approve_above_usd=off", |s| {
        s.with_rate_limits(unlimited())
    })
    .await;
    let store: Arc<dyn Store> = sqlite.api.store.clone();
    bench("embedded (SQLite)", &sqlite, store, slices).await;

    let admin = std::env::var("TRAWL_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let name = format!("trawl_plan_bench_{}", std::process::id());
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin)
        .await
        .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .unwrap();
    let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
    let pg: Arc<dyn Store> = Arc::new(trawl_store::PgStore::connect(&url, 16).await.unwrap());
    let on_pg = {
        let api = EmbeddedApi::new(keys()).await.unwrap();
        let (events, _) = trawl_queue::InProcessEvents::channel();
        let state = ApiState::new(
            pg.clone(),
            Arc::new(events),
            api.queue.clone(),
            Arc::new(
                trawl_cache::SqliteCache::open(&api.dir.path().join("pg-cache.db"))
                    .await
                    .unwrap(),
            ),
            PriceTable::default(),
            keys(),
        )
        .with_tenant_limits(TenantLimits::parse("*:approve_above_usd=off").unwrap())
        .with_rate_limits(unlimited());
        App {
            router: router(state),
            api,
        }
    };
    bench("Postgres", &on_pg, pg, slices).await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
}

async fn bench(label: &str, app: &App, store: Arc<dyn Store>, slices: usize) {
    // As the request did: a small body whose cross product is big,
    // here URLs × every country.
    let geos: Vec<String> = trawl_core::geo::Geo::all()
        .map(|g| g.as_str().to_owned())
        .collect();
    let urls: Vec<String> = (0..slices.div_ceil(geos.len()))
        .map(|i| format!("https://shop.example/p/{i}"))
        .collect();
    let slices = urls.len() * geos.len();
    let big = json!({"name": "big", "pages": {"urls": urls, "geos": geos},
                     "extract": {"fields": {"t": {"css": "h1"}}}})
    .to_string();
    let body_bytes = big.len();
    let started = Instant::now();
    let submitted = app.send(ALICE, Method::POST, "/v1/jobs", Some(big)).await;
    let submit_time = started.elapsed();
    let big_id = submitted.job_id();
    let mine = app.submit(SOLO, 2).await.job_id();

    // The scheduler's plan, as `plan_pending` stores it.
    let job = store.job(&big_id).await.unwrap().unwrap();
    let spec = JobSpec::from_value(job.spec.clone()).unwrap();
    let planner = {
        let store = store.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            let mut all = trawl_core::plan::slices(&spec);
            let ok = store
                .plan_job(&big_id, &mut all, JobStatus::Queued)
                .await
                .unwrap();
            (ok, t.elapsed())
        })
    };
    let (mut reads, mut cancels) = (Vec::new(), Vec::new());
    while !planner.is_finished() {
        let t = Instant::now();
        let a = app
            .send(SOLO, Method::GET, &format!("/v1/jobs/{mine}"), None)
            .await;
        assert_eq!(a.status, StatusCode::OK);
        reads.push(t.elapsed());
        if reads.len() % 10 == 0 {
            let other = app.submit(SOLO, 2).await.job_id();
            let t = Instant::now();
            app.cancel(SOLO, &other).await;
            cancels.push(t.elapsed());
        }
    }
    let (planned, plan_time) = planner.await.unwrap();
    assert!(planned);
    assert_eq!(
        store.counts(&job.id).await.unwrap().slices_total,
        slices as u64
    );
    let max = |v: &[Duration]| v.iter().max().copied().unwrap_or_default();
    let p50 = |v: &mut Vec<Duration>| {
        v.sort();
        v.get(v.len() / 2).copied().unwrap_or_default()
    };
    let (read_max, cancel_max) = (max(&reads), max(&cancels));
    println!(
        "{label}: submit ({body_bytes} bytes) {:.2} s; plan of {slices} slices {:.1} s; {} reads p50 {:.1} ms max {:.1} ms; {} cancels p50 {:.1} ms max {:.1} ms",
        submit_time.as_secs_f64(),
        plan_time.as_secs_f64(),
        reads.len(),
        p50(&mut reads).as_secs_f64() * 1e3,
        read_max.as_secs_f64() * 1e3,
        cancels.len(),
        p50(&mut cancels).as_secs_f64() * 1e3,
        cancel_max.as_secs_f64() * 1e3,
    );
    assert!(
        read_max < Duration::from_secs(1),
        "{label}: a read took {read_max:?}"
    );
    assert!(
        cancel_max < Duration::from_secs(1),
        "{label}: a cancel took {cancel_max:?}"
    );
}
