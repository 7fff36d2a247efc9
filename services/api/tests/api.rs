//! The REST API over the embedded adapters: each test gets its own in-memory store,
//! queue, event channel and cache file, so tests run in parallel without seeing
//! each other.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use std::sync::Arc;
use std::time::Duration;
use trawl_core::ports::{
    ApprovalStore, ArtifactStore, JobStore, SliceStore, ToolStore, WorkerStore,
};

use async_trait::async_trait;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use secrecy::SecretString;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use trawl_api::testing::EmbeddedApi;
use trawl_api::{ApiKey, ApiState, Auth, router, serve};
use trawl_cache::SqliteCache;
use trawl_core::cost::{Micros, PriceTable};
use trawl_core::geo::Geo;
use trawl_core::model::{
    Item, ItemKind, JobId, JobStatus, Rejection, SliceId, SliceKind, SliceOutcome, SliceSpec,
    TraceStep, Violation,
};
use trawl_core::ports::{
    Artifact, CacheKey, ContentCache, Event, Events, JobRecord, LoadFuture, PortError, Served,
    ToolError,
};
use trawl_core::spec::JobSpec;
use trawl_queue::{EmbeddedQueue, QueueConfig};
use trawl_store::SqliteStore;

// ---------------------------------------------------------------------------
// Harness

const KEY: &str = "test-key-0123456789";

const SPEC_JSON: &str = r#"{"name": "prices", "pages": {"urls": ["https://shop.example/p/1", "https://shop.example/p/2"], "geos": ["us", "de"]}, "extract": {"fields": {"title": {"css": "h1"}}}}"#;

const SPEC_YAML: &str = "name: serps\nsearches: {queries: [laptops, phones], geos: [us], follow_top: 2}\nextract: {fields: {title: {css: h1}}}\n";

struct App {
    router: Router,
    store: Arc<SqliteStore>,
    queue: Arc<EmbeddedQueue>,
    events: UnboundedReceiver<Event>,
    _dir: TempDir,
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

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// Asserts an RFC 9457 problem with this status and type slug; returns it.
    fn problem(&self, status: u16, slug: &str) -> Value {
        assert_eq!(
            self.status.as_u16(),
            status,
            "{}",
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        let p = self.json();
        assert_eq!(
            p["type"],
            format!("https://trawl.dev/problems/{slug}"),
            "{p}"
        );
        assert_eq!(p["status"], status, "{p}");
        assert!(p["title"].as_str().is_some_and(|t| !t.is_empty()), "{p}");
        assert!(p["detail"].as_str().is_some_and(|t| !t.is_empty()), "{p}");
        p
    }
}

async fn spawn_app_with(auth: Auth, cache: Option<Arc<dyn ContentCache>>) -> App {
    spawn_app_tweaked(auth, cache, |s| s).await
}

/// [`spawn_app_with`], its state changed by `tweak` first.
async fn spawn_app_tweaked(
    auth: Auth,
    cache: Option<Arc<dyn ContentCache>>,
    tweak: impl FnOnce(ApiState) -> ApiState,
) -> App {
    let EmbeddedApi {
        state,
        store,
        queue,
        events,
        dir,
    } = EmbeddedApi::with_cache(auth, cache).await.unwrap();
    App {
        router: router(tweak(state)),
        store,
        queue,
        events,
        _dir: dir,
    }
}

/// An API that wants [`KEY`], an admin key: it sees every job (also those the
/// tests store directly, which have no owner) and decides approvals. Ownership
/// has its own tests, with plain keys.
async fn spawn_app() -> App {
    spawn_app_with(
        Auth::Keys(vec![ApiKey::from(SecretString::from(KEY)).admin()]),
        None,
    )
    .await
}

fn request(method: Method, uri: &str) -> axum::http::request::Builder {
    Request::builder()
        .method(method)
        .uri(uri)
        .header(header::AUTHORIZATION, format!("Bearer {KEY}"))
}

impl App {
    async fn send(&self, req: Request<Body>) -> Answer {
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

    async fn get(&self, uri: &str) -> Answer {
        self.send(request(Method::GET, uri).body(Body::empty()).unwrap())
            .await
    }

    async fn get_accept(&self, uri: &str, accept: &str) -> Answer {
        self.send(
            request(Method::GET, uri)
                .header(header::ACCEPT, accept)
                .body(Body::empty())
                .unwrap(),
        )
        .await
    }

    async fn post(&self, uri: &str) -> Answer {
        self.send(request(Method::POST, uri).body(Body::empty()).unwrap())
            .await
    }

    async fn submit(&self, content_type: &str, body: impl Into<Body>) -> Answer {
        self.send(
            request(Method::POST, "/v1/jobs")
                .header(header::CONTENT_TYPE, content_type)
                .body(body.into())
                .unwrap(),
        )
        .await
    }

    async fn submit_with_key(&self, key: &str, body: &'static str) -> Answer {
        self.send(
            request(Method::POST, "/v1/jobs")
                .header(header::CONTENT_TYPE, "application/json")
                .header("idempotency-key", key)
                .body(Body::from(body))
                .unwrap(),
        )
        .await
    }

    async fn all_jobs(&self) -> Vec<JobRecord> {
        self.store
            .jobs_with_status(&JobStatus::ALL, 1000)
            .await
            .unwrap()
    }

    /// Submits a job through the one submit and plans it (`common`).
    async fn submit_planned(&self, spec: &JobSpec) -> trawl_scheduler::Submitted {
        common::submit_planned(self.store.clone(), self.queue.clone(), spec).await
    }

    /// The job id of a 202 answer, checked.
    fn accepted(&self, a: &Answer) -> JobId {
        assert_eq!(
            a.status,
            StatusCode::ACCEPTED,
            "{}",
            String::from_utf8_lossy(&a.body)
        );
        let body = a.json();
        let id = JobId::parse(body["job_id"].as_str().unwrap()).unwrap();
        assert_eq!(
            a.header("location"),
            Some(format!("/v1/jobs/{id}").as_str())
        );
        id
    }
}

// ---------------------------------------------------------------------------
// Submitting

#[tokio::test]
async fn a_json_spec_is_stored_pending_without_slices_and_announced() {
    let mut app = spawn_app().await;
    let a = app.submit("application/json", SPEC_JSON).await;
    let id = app.accepted(&a);
    let body = a.json();
    assert_eq!(body["status"], "pending");
    assert_eq!(body["estimate"]["slices"], 4);
    assert_eq!(body["estimate"]["page_slices"], 4);
    assert_eq!(body["estimate"]["cost_micros"], 4 * 1_500);
    assert_eq!(body["estimate"]["cost_usd"], 0.006);
    assert_eq!(body["links"]["self"], format!("/v1/jobs/{id}"));
    assert_eq!(body["links"]["items"], format!("/v1/jobs/{id}/items"));
    assert_eq!(body["links"]["cancel"], format!("/v1/jobs/{id}/cancel"));

    let job = app.store.job(&id).await.unwrap().unwrap();
    assert_eq!(job.status, JobStatus::Pending);
    assert_eq!(job.name, "prices");
    assert_eq!(job.estimate, Micros(6_000));
    assert!(job.idempotency.is_none());
    assert!(JobSpec::from_value(job.spec).is_ok());
    assert!(app.store.open_slices(&id).await.unwrap().is_empty());
    assert_eq!(app.store.counts(&id).await.unwrap().slices_total, 0);

    assert_eq!(
        app.events.try_recv().unwrap(),
        Event::JobCreated { job_id: id }
    );
    assert!(app.events.try_recv().is_err());
}

#[tokio::test]
async fn a_yaml_spec_is_accepted_under_each_yaml_media_type() {
    let mut app = spawn_app().await;
    for ct in [
        "application/yaml",
        "application/x-yaml",
        "text/yaml; charset=utf-8",
    ] {
        let a = app.submit(ct, SPEC_YAML).await;
        let id = app.accepted(&a);
        let body = a.json();
        assert_eq!(body["estimate"]["search_slices"], 2, "{ct}");
        assert_eq!(body["estimate"]["followed_pages_max"], 4, "{ct}");
        let job = app.store.job(&id).await.unwrap().unwrap();
        assert_eq!(job.status, JobStatus::Pending);
        assert_eq!(job.name, "serps");
        assert_eq!(
            app.events.try_recv().unwrap(),
            Event::JobCreated { job_id: id }
        );
    }
    assert_eq!(app.all_jobs().await.len(), 3);
}

#[tokio::test]
async fn a_body_that_starts_with_a_byte_order_mark_is_read_after_it() {
    let app = spawn_app().await;
    for (ct, spec, name) in [
        ("application/json", SPEC_JSON, "prices"),
        ("application/yaml", SPEC_YAML, "serps"),
    ] {
        let mut body = b"\xEF\xBB\xBF".to_vec();
        body.extend_from_slice(spec.as_bytes());
        let a = app.submit(ct, body).await;
        let id = app.accepted(&a);
        assert_eq!(
            app.store.job(&id).await.unwrap().unwrap().name,
            name,
            "{ct}"
        );
    }
}

#[tokio::test]
async fn control_characters_in_a_spec_are_refused_with_their_field() {
    let app = spawn_app().await;
    let nul = SPEC_JSON.replace(r#""name": "prices""#, r#""name": "pri\u0000ces""#);
    let a = app.submit("application/json", nul).await;
    let p = a.problem(422, "invalid-spec");
    assert_eq!(p["errors"][0]["path"], "name", "{p}");
    assert_eq!(p["errors"].as_array().unwrap().len(), 1, "{p}");
    let esc = "name: \"a\\x1bb\"\nresearch: {question: q}\n";
    let a = app.submit("application/yaml", esc).await;
    let p = a.problem(422, "invalid-spec");
    assert_eq!(p["errors"][0]["path"], "name", "{p}");
    assert!(app.all_jobs().await.is_empty(), "nothing is stored");
}

#[tokio::test]
async fn the_job_view_shows_status_estimate_and_counts() {
    let app = spawn_app().await;
    let id = app.accepted(&app.submit("application/json", SPEC_JSON).await);
    let a = app.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(a.status, StatusCode::OK);
    let v = a.json();
    assert_eq!(v["job_id"], id.as_str());
    assert_eq!(v["name"], "prices");
    assert_eq!(v["status"], "pending");
    assert_eq!(v["reason"], Value::Null);
    assert!(v["created"].as_str().unwrap().ends_with('Z'));
    assert!(v["created_ms"].as_i64().unwrap() > 0);
    assert_eq!(v["estimate"]["slices"], 4);
    assert_eq!(v["estimate"]["cost_micros"], 6_000);
    assert_eq!(
        v["counts"],
        json!({
            "slices": {"total": 0, "succeeded": 0, "failed": 0, "open": 0},
            "items": {"valid": 0, "rejected": 0},
            "upstream_calls": 0, "cache_hits": 0, "cost_usd": 0.0, "cost_micros": 0
        })
    );
    assert_eq!(v["links"]["trace"], format!("/v1/jobs/{id}/trace"));
}

#[tokio::test]
async fn an_event_port_that_fails_does_not_fail_the_submission() {
    struct Down;
    #[async_trait]
    impl Events for Down {
        async fn emit(&self, _: Event) -> Result<(), PortError> {
            Err(PortError::Unavailable("nats is down".into()))
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::memory().await.unwrap());
    let state = ApiState::new(
        store.clone(),
        Arc::new(Down),
        Arc::new(EmbeddedQueue::new(QueueConfig::default())),
        Arc::new(SqliteCache::open(&dir.path().join("c.db")).await.unwrap()),
        PriceTable::default(),
        Auth::Open,
    );
    let res = router(state)
        .oneshot(
            Request::post("/v1/jobs")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(SPEC_JSON))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::ACCEPTED);
    let jobs = store
        .jobs_with_status(&[JobStatus::Pending], 10)
        .await
        .unwrap();
    assert_eq!(jobs.len(), 1);
}

// ---------------------------------------------------------------------------
// Idempotency keys

#[tokio::test]
async fn the_same_key_and_body_answer_with_the_first_job() {
    let mut app = spawn_app().await;
    let first = app.submit_with_key("\"order-42\"", SPEC_JSON).await;
    let id = app.accepted(&first);
    assert_eq!(first.header("idempotent-replayed"), None);
    let again = app.submit_with_key("\"order-42\"", SPEC_JSON).await;
    assert_eq!(app.accepted(&again), id);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.json()["estimate"], first.json()["estimate"]);

    let jobs = app.all_jobs().await;
    assert_eq!(jobs.len(), 1);
    let stored = jobs[0].idempotency.clone().unwrap();
    // The key as sent: the caller is its own column, never joined to it.
    assert_eq!(stored.key, "order-42");
    assert!(jobs[0].owner.is_some());
    assert_eq!(stored.request_digest.len(), 64);
    // One job, one event.
    assert!(app.events.try_recv().is_ok());
    assert!(app.events.try_recv().is_err());
}

#[tokio::test]
async fn the_same_key_with_another_body_is_refused() {
    let app = spawn_app().await;
    app.accepted(&app.submit_with_key("k-1", SPEC_JSON).await);
    let other = r#"{"name": "other", "pages": {"urls": ["https://shop.example/p/9"], "geos": ["us"]}, "extract": {"fields": {"t": {"css": "h1"}}}}"#;
    app.submit_with_key("k-1", other)
        .await
        .problem(422, "idempotency-key-reuse");
    assert_eq!(app.all_jobs().await.len(), 1);
}

#[tokio::test]
async fn concurrent_requests_with_one_key_make_one_job() {
    let app = spawn_app().await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let router = app.router.clone();
        tasks.spawn(async move {
            router
                .oneshot(
                    request(Method::POST, "/v1/jobs")
                        .header(header::CONTENT_TYPE, "application/json")
                        .header("idempotency-key", "race")
                        .body(Body::from(SPEC_JSON))
                        .unwrap(),
                )
                .await
                .unwrap()
        });
    }
    let mut ids = Vec::new();
    while let Some(res) = tasks.join_next().await {
        let res = res.unwrap();
        assert_eq!(res.status(), StatusCode::ACCEPTED);
        let body = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        ids.push(v["job_id"].as_str().unwrap().to_owned());
    }
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    assert_eq!(app.all_jobs().await.len(), 1);
}

#[tokio::test]
async fn idempotency_keys_of_two_callers_do_not_meet() {
    let app = spawn_app_with(
        Auth::Keys(vec![
            SecretString::from(KEY).into(),
            SecretString::from("other-key").into(),
        ]),
        None,
    )
    .await;
    let a = app.accepted(&app.submit_with_key("shared", SPEC_JSON).await);
    let b = app
        .send(
            Request::post("/v1/jobs")
                .header(header::AUTHORIZATION, "Bearer other-key")
                .header(header::CONTENT_TYPE, "application/json")
                .header("idempotency-key", "shared")
                .body(Body::from(SPEC_JSON))
                .unwrap(),
        )
        .await;
    assert_ne!(app.accepted(&b), a);
    assert_eq!(app.all_jobs().await.len(), 2);
}

// ---------------------------------------------------------------------------
// Refusals: problem+json, and nothing stored

#[tokio::test]
async fn every_bad_request_answers_a_problem_and_stores_nothing() {
    let mut app = spawn_app().await;

    // Malformed JSON.
    let p = app
        .submit("application/json", r#"{"name": "x", "pages": "#)
        .await
        .problem(400, "malformed-body");
    assert!(p["detail"].as_str().unwrap().contains("JSON"), "{p}");

    // Malformed YAML.
    app.submit("application/yaml", "name: [unclosed\n  - : :")
        .await
        .problem(400, "malformed-body");

    // Valid JSON, invalid spec: every error, with its path.
    let bad = json!({
        "name": "x",
        "colour": "red",
        "pages": {"urls": ["ftp://a/b"], "geos": ["US", "xx"], "depth": 2},
        "extract": {"fields": {"t": {"css": "h1", "xpath": "//h1"}}},
        "retries": {"max_attempts": 99}
    });
    let p = app
        .submit("application/json", bad.to_string())
        .await
        .problem(422, "invalid-spec");
    let mut paths: Vec<&str> = p["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{e}");
            e["path"].as_str().unwrap()
        })
        .collect();
    paths.sort_unstable();
    assert_eq!(
        paths,
        [
            "colour",
            "extract.fields.t.xpath",
            "pages.depth",
            "pages.geos[0]",
            "pages.geos[1]",
            "pages.urls[0]",
            "retries.max_attempts",
        ]
    );

    // The same through YAML.
    let p = app
        .submit("application/yaml", "name: x\ncolour: red\n")
        .await
        .problem(422, "invalid-spec");
    assert!(p["errors"].as_array().unwrap().len() >= 2, "{p}");

    // Unsupported media type, and none at all.
    app.submit("text/plain", SPEC_JSON)
        .await
        .problem(415, "unsupported-media-type");
    app.send(
        request(Method::POST, "/v1/jobs")
            .body(Body::from(SPEC_JSON))
            .unwrap(),
    )
    .await
    .problem(415, "unsupported-media-type");

    // Over the default 1 MiB.
    let huge = format!(
        r#"{{"name": "x", "pad": "{}"}}"#,
        "a".repeat(ApiState::DEFAULT_BODY_LIMIT)
    );
    app.submit("application/json", huge)
        .await
        .problem(413, "payload-too-large");

    // A malformed Idempotency-Key (a space is not visible ASCII; `""` is a
    // key of two characters, as the document's pattern says).
    app.submit_with_key("a b", SPEC_JSON)
        .await
        .problem(400, "bad-request");

    // Unknown and malformed job ids.
    let unknown = JobId::generate(1_700_000_000_000, 1);
    app.get(&format!("/v1/jobs/{unknown}"))
        .await
        .problem(404, "not-found");
    app.get("/v1/jobs/not-a-job")
        .await
        .problem(404, "not-found");
    app.post(&format!("/v1/jobs/{unknown}/cancel"))
        .await
        .problem(404, "not-found");
    app.get(&format!("/v1/jobs/{unknown}/items"))
        .await
        .problem(404, "not-found");

    // Bad cursors and limits.
    app.get(&format!("/v1/jobs/{unknown}/items?cursor=%%%"))
        .await
        .problem(400, "bad-request");
    app.get(&format!("/v1/jobs/{unknown}/trace?cursor=bm9wZQ"))
        .await
        .problem(400, "bad-request");
    app.get(&format!("/v1/jobs/{unknown}/rejections?limit=0"))
        .await
        .problem(400, "bad-request");
    app.get(&format!("/v1/jobs/{unknown}/items?limit=many"))
        .await
        .problem(400, "bad-request");

    // Missing and wrong keys.
    let a = app
        .send(
            Request::post("/v1/jobs")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(SPEC_JSON))
                .unwrap(),
        )
        .await;
    a.problem(401, "unauthorized");
    assert_eq!(
        a.header("www-authenticate"),
        Some(r#"Bearer realm="trawl""#)
    );
    let a = app
        .send(
            Request::post("/v1/jobs")
                .header(header::AUTHORIZATION, "Bearer not-the-key")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(SPEC_JSON))
                .unwrap(),
        )
        .await;
    a.problem(401, "unauthorized");
    assert!(a.header("www-authenticate").unwrap().starts_with("Bearer"));
    let a = app
        .send(
            Request::get(format!("/v1/jobs/{unknown}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    a.problem(401, "unauthorized");

    // Unknown routes and methods.
    app.get("/v2/nothing").await.problem(404, "not-found");
    app.send(
        request(Method::DELETE, "/v1/jobs")
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .problem(405, "method-not-allowed");

    assert!(app.all_jobs().await.is_empty());
    assert!(app.events.try_recv().is_err(), "no event for a refusal");
}

#[tokio::test]
async fn a_smaller_body_limit_is_kept() {
    let api = EmbeddedApi::new(Auth::Open).await.unwrap();
    let store = api.store.clone();
    let state = api.state.clone().with_body_limit(64);
    let res = router(state)
        .oneshot(
            Request::post("/v1/jobs")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(SPEC_JSON))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        res.headers()[header::CONTENT_TYPE],
        "application/problem+json"
    );
    assert!(
        store
            .jobs_with_status(&JobStatus::ALL, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

// ---------------------------------------------------------------------------
// Pages

fn geo(s: &str) -> Geo {
    Geo::parse(s).unwrap()
}

/// A job with `slices` page slices whose outcomes were recorded through the store:
/// slice `i` has `i % 4` items, `i % 3` rejections and `i % 5 + 1` trace steps.
async fn job_with_rows(app: &App, slices: usize) -> (JobId, usize, usize, usize) {
    let specs: Vec<SliceSpec> = (0..slices)
        .map(|i| {
            SliceSpec::new(
                SliceKind::Page {
                    url: format!("https://shop.example/p/{i}"),
                    geo: geo("us"),
                },
                None,
            )
        })
        .collect();
    let id = JobId::generate(1_700_000_000_000, 99);
    app.store
        .create_job(
            &JobRecord {
                id: id.clone(),
                name: "rows".into(),
                spec: json!({"name": "rows"}),
                status: JobStatus::Running,
                reason: None,
                estimate: Micros(1_500),
                created_ms: 1_700_000_000_000,
                idempotency: None,
                traceparent: None,
                owner: None,
                retention_ms: None,
                slices_max: 0,
                approve_above: None,
            },
            &specs,
        )
        .await
        .unwrap();
    let (mut items, mut rejections, mut steps) = (0, 0, 0);
    for (i, s) in specs.iter().enumerate() {
        let outcome = SliceOutcome {
            items: (0..i % 4)
                .map(|seq| Item {
                    slice_id: s.id.clone(),
                    seq: seq as u32,
                    kind: ItemKind::Page,
                    url: format!("https://shop.example/p/{i}"),
                    geo: geo("us"),
                    data: json!({"title": format!("item {i}.{seq}")}),
                })
                .collect(),
            rejections: (0..i % 3)
                .map(|seq| Rejection {
                    slice_id: s.id.clone(),
                    seq: (10 + seq) as u32,
                    url: format!("https://shop.example/p/{i}"),
                    geo: geo("us"),
                    data: json!({"title": null}),
                    errors: vec![Violation {
                        path: "/title".into(),
                        message: "null is not a string".into(),
                    }],
                })
                .collect(),
            trace: (0..i % 5 + 1)
                .map(|seq| TraceStep {
                    slice_id: s.id.clone(),
                    seq: seq as u32,
                    tool: "brightdata.fetch".into(),
                    args_digest: "ab".repeat(32),
                    cache_hit: seq % 2 == 1,
                    attempt: 1,
                    status: "ok".into(),
                    error: None,
                    latency_us: 1_000,
                    cost: Micros(0),
                    at_ms: 1_700_000_000_000,
                    trace_id: None,
                    span_id: None,
                })
                .collect(),
            ..SliceOutcome::default()
        };
        items += outcome.items.len();
        rejections += outcome.rejections.len();
        steps += outcome.trace.len();
        app.store
            .record_outcome(&id, &s.id, &outcome)
            .await
            .unwrap();
    }
    (id, items, rejections, steps)
}

/// Walks a listing with JSON pages; returns (slice_id, seq) of every row.
async fn walk_json(app: &App, path: &str, key: &str, limit: u32) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let uri = match &cursor {
            None => format!("{path}?limit={limit}"),
            Some(c) => format!("{path}?limit={limit}&cursor={c}"),
        };
        let a = app.get(&uri).await;
        assert_eq!(
            a.status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&a.body)
        );
        assert_eq!(a.header("content-type"), Some("application/json"));
        let page = a.json();
        let rows = page[key].as_array().unwrap();
        assert!(rows.len() <= limit as usize);
        for r in rows {
            out.push((
                r["slice_id"].as_str().unwrap().to_owned(),
                r["seq"].as_u64().unwrap(),
            ));
        }
        pages += 1;
        assert!(pages < 1000, "the walk does not end");
        match page["next_cursor"].as_str() {
            Some(c) => {
                assert_eq!(rows.len(), limit as usize, "only the last page is short");
                cursor = Some(c.to_owned());
            }
            None => {
                assert!(page["next_cursor"].is_null());
                break;
            }
        }
    }
    out
}

/// Walks a listing as NDJSON, following `Link: rel="next"`.
async fn walk_ndjson(app: &App, path: &str, limit: u32, accept: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut uri = format!("{path}?limit={limit}");
    loop {
        let a = app.get_accept(&uri, accept).await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(a.header("content-type"), Some(accept));
        let text = std::str::from_utf8(&a.body).unwrap();
        assert!(text.is_empty() || text.ends_with('\n'));
        for line in text.lines() {
            let r: Value = serde_json::from_str(line).unwrap();
            out.push((
                r["slice_id"].as_str().unwrap().to_owned(),
                r["seq"].as_u64().unwrap(),
            ));
        }
        let Some(link) = a.header("link") else { break };
        let target = link
            .strip_prefix('<')
            .and_then(|l| l.split_once(">; rel=\"next\""))
            .map(|(t, _)| t.to_owned())
            .unwrap_or_else(|| panic!("bad Link: {link}"));
        assert!(target.starts_with(path), "{target}");
        uri = target;
    }
    out
}

fn assert_each_once(rows: &[(String, u64)], want: usize) {
    assert_eq!(rows.len(), want);
    let mut sorted = rows.to_vec();
    sorted.sort();
    assert_eq!(sorted, rows, "rows come in (slice, seq) order");
    sorted.dedup();
    assert_eq!(sorted.len(), want, "no row twice");
}

#[tokio::test]
async fn pages_walk_every_row_exactly_once_as_json_and_ndjson() {
    let app = spawn_app().await;
    let (id, items, rejections, steps) = job_with_rows(&app, 23).await;
    assert!(items > 20 && rejections > 10 && steps > 40);
    let base = format!("/v1/jobs/{id}");

    for limit in [1, 7, 1000] {
        let got = walk_json(&app, &format!("{base}/items"), "items", limit).await;
        assert_each_once(&got, items);
        let got = walk_json(&app, &format!("{base}/rejections"), "rejections", limit).await;
        assert_each_once(&got, rejections);
        let got = walk_json(&app, &format!("{base}/trace"), "steps", limit).await;
        assert_each_once(&got, steps);

        for accept in ["application/x-ndjson", "application/jsonl"] {
            let got = walk_ndjson(&app, &format!("{base}/items"), limit, accept).await;
            assert_each_once(&got, items);
            let got = walk_ndjson(&app, &format!("{base}/rejections"), limit, accept).await;
            assert_each_once(&got, rejections);
            let got = walk_ndjson(&app, &format!("{base}/trace"), limit, accept).await;
            assert_each_once(&got, steps);
        }
    }

    // A whole page of exactly `limit` rows at the end still says it is the last.
    let a = app.get(&format!("{base}/items?limit={items}")).await;
    assert_eq!(a.json()["next_cursor"], Value::Null);

    // Without a limit, a page is up to 100 rows; the job view counts what the
    // store holds.
    let a = app.get(&format!("{base}/trace")).await.json();
    assert_eq!(a["steps"].as_array().unwrap().len(), steps.min(100));
    let v = app.get(&base).await.json();
    assert_eq!(v["counts"]["items"]["valid"], items);
    assert_eq!(v["counts"]["items"]["rejected"], rejections);
    assert_eq!(v["counts"]["slices"]["succeeded"], 23);
}

#[tokio::test]
async fn a_job_without_rows_has_one_empty_last_page() {
    let app = spawn_app().await;
    let id = app.accepted(&app.submit("application/json", SPEC_JSON).await);
    let a = app.get(&format!("/v1/jobs/{id}/items")).await;
    assert_eq!(a.json(), json!({"items": [], "next_cursor": null}));
    let a = app
        .get_accept(&format!("/v1/jobs/{id}/rejections"), "application/x-ndjson")
        .await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.body.is_empty());
    assert_eq!(a.header("link"), None);
}

// ---------------------------------------------------------------------------
// Artifacts

fn artifact(job: &JobId, name: &str, content_type: &str, data: &[u8], at_ms: i64) -> Artifact {
    Artifact {
        job_id: job.clone(),
        slice_id: None,
        name: name.to_owned(),
        content_type: content_type.to_owned(),
        data: data.to_vec(),
        at_ms,
    }
}

#[tokio::test]
async fn artifacts_are_listed_with_urls_and_served_as_stored() {
    let app = spawn_app().await;
    let id = app.accepted(&app.submit("application/json", SPEC_JSON).await);
    let list = format!("/v1/jobs/{id}/artifacts");
    let a = app.get(&list).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.json(), json!({"artifacts": []}));

    let png = Artifact {
        slice_id: Some(SliceId::from_stored("s_0123456789abcdef0123".into())),
        ..artifact(
            &id,
            "page 1/top.png",
            "image/png",
            b"\x89PNG\r\n\x1a\n\0\xff",
            2_000,
        )
    };
    let notes = artifact(&id, "notes.json", "application/json", br#"{"a":1}"#, 1_000);
    app.store.put_artifact(&png).await.unwrap();
    app.store.put_artifact(&notes).await.unwrap();

    // Listed by time, with no bytes, each with the URL of its bytes.
    let a = app.get(&list).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.header("content-type"), Some("application/json"));
    assert_eq!(
        a.json(),
        json!({"artifacts": [
            {
                "job_id": id.to_string(),
                "slice_id": null,
                "name": "notes.json",
                "content_type": "application/json",
                "size": 7,
                "at_ms": 1_000,
                "url": format!("/v1/jobs/{id}/artifacts/notes.json"),
            },
            {
                "job_id": id.to_string(),
                "slice_id": "s_0123456789abcdef0123",
                "name": "page 1/top.png",
                "content_type": "image/png",
                "size": 10,
                "at_ms": 2_000,
                "url": format!("/v1/jobs/{id}/artifacts/page%201%2Ftop.png"),
            },
        ]})
    );

    // Each URL serves the bytes with their media type, never to be sniffed or
    // run as a page of this origin.
    let listed = a.json();
    for (entry, stored) in listed["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .zip([&notes, &png])
    {
        let a = app.get(entry["url"].as_str().unwrap()).await;
        assert_eq!(a.status, StatusCode::OK, "{entry}");
        assert_eq!(a.body.as_ref(), stored.data.as_slice());
        assert_eq!(a.header("content-type"), Some(stored.content_type.as_str()));
        assert_eq!(a.header("x-content-type-options"), Some("nosniff"));
        assert!(
            a.header("content-security-policy")
                .unwrap()
                .contains("sandbox")
        );
    }

    // A stored media type that is no header value is served as plain bytes.
    let odd = artifact(&id, "odd.bin", "text/html\r\nx-injected: 1", b"<p>", 3_000);
    app.store.put_artifact(&odd).await.unwrap();
    let a = app.get(&format!("/v1/jobs/{id}/artifacts/odd.bin")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.header("content-type"), Some("application/octet-stream"));
    assert_eq!(a.header("x-injected"), None);
}

#[tokio::test]
async fn unknown_artifacts_and_jobs_are_not_found_and_a_key_is_needed() {
    let app = spawn_app().await;
    let id = app.accepted(&app.submit("application/json", SPEC_JSON).await);
    app.store
        .put_artifact(&artifact(&id, "shot.png", "image/png", b"png", 1))
        .await
        .unwrap();

    let p = app
        .get(&format!("/v1/jobs/{id}/artifacts/missing.png"))
        .await
        .problem(404, "not-found");
    assert!(p["detail"].as_str().unwrap().contains("missing.png"), "{p}");
    app.get(&format!("/v1/jobs/{id}/artifacts/SHOT.png"))
        .await
        .problem(404, "not-found");

    let unknown = JobId::generate(1_700_000_000_000, 7);
    for path in [
        format!("/v1/jobs/{unknown}/artifacts"),
        format!("/v1/jobs/{unknown}/artifacts/shot.png"),
        "/v1/jobs/not-a-job/artifacts".to_owned(),
        "/v1/jobs/not-a-job/artifacts/shot.png".to_owned(),
    ] {
        app.get(&path).await.problem(404, "not-found");
    }

    for path in [
        format!("/v1/jobs/{id}/artifacts"),
        format!("/v1/jobs/{id}/artifacts/shot.png"),
    ] {
        let a = app
            .send(Request::get(&path).body(Body::empty()).unwrap())
            .await;
        a.problem(401, "unauthorized");
        assert!(
            !a.body.windows(3).any(|w| w == b"png"),
            "no bytes without a key"
        );
    }
}

// ---------------------------------------------------------------------------
// Cancelling

#[tokio::test]
async fn a_running_job_is_cancelled_once() {
    let mut app = spawn_app().await;
    let id = app.accepted(&app.submit("application/json", SPEC_JSON).await);
    let _ = app.events.try_recv();

    let a = app.post(&format!("/v1/jobs/{id}/cancel")).await;
    assert_eq!(
        a.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&a.body)
    );
    let v = a.json();
    assert_eq!(v["status"], "cancelled");
    assert_eq!(v["reason"], "cancelled over the API");
    let job = app.store.job(&id).await.unwrap().unwrap();
    assert_eq!(job.status, JobStatus::Cancelled);
    assert_eq!(job.reason.as_deref(), Some("cancelled over the API"));
    assert_eq!(
        app.events.try_recv().unwrap(),
        Event::JobCancelled { job_id: id.clone() }
    );

    app.post(&format!("/v1/jobs/{id}/cancel"))
        .await
        .problem(409, "conflict");
    assert!(app.events.try_recv().is_err());
}

/// The number of slices a job may have is the deployment's: 1,000,000 unless
/// set; a job that can have more is refused, nothing stored.
#[tokio::test]
async fn a_job_with_more_slices_than_the_limit_is_refused() {
    let pages = |urls: usize, geos: &str| {
        let urls: Vec<String> = (0..urls)
            .map(|i| format!("\"https://shop.example/p/{i}\""))
            .collect();
        format!(
            "name: big\npages:\n  urls: [{}]\n  geos: [{geos}]\nextract: {{fields: {{t: {{css: h1}}}}}}\n",
            urls.join(", ")
        )
    };
    let all_geos = trawl_core::geo::Geo::all()
        .map(|g| g.as_str().to_owned())
        .collect::<Vec<_>>()
        .join(", ");
    let geos = all_geos.split(", ").count();
    let app = spawn_app().await;
    // Just under a million, then just over.
    let under = 1_000_000 / geos;
    let a = app
        .submit("application/yaml", pages(under, &all_geos))
        .await;
    app.accepted(&a);
    let p = app
        .submit("application/yaml", pages(under + 1, &all_geos))
        .await
        .problem(422, "invalid-spec");
    let reason = p["errors"][0]["message"].as_str().unwrap();
    let total = (under + 1) * geos;
    assert!(
        reason.contains(&format!("plans {total} slices"))
            && reason.contains("the limit is 1000000"),
        "{p}"
    );
    assert_eq!(app.all_jobs().await.len(), 1);

    // A deployment's own limit.
    let small = spawn_app_tweaked(
        Auth::Keys(vec![ApiKey::from(SecretString::from(KEY)).admin()]),
        None,
        |s| s.with_max_slices(10),
    )
    .await;
    let a = small.submit("application/yaml", pages(5, "us, de")).await;
    small.accepted(&a);
    let p = small
        .submit("application/yaml", pages(11, "us"))
        .await
        .problem(422, "invalid-spec");
    assert!(
        p["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("plans 11 slices (0 searches, 11 pages, up to 0 followed pages, 0 browser sessions); the limit is 10"),
        "{p}"
    );
    assert_eq!(small.all_jobs().await.len(), 1);
}

/// A research job no reported worker can run is refused with 422 naming why,
/// and nothing is stored; once a worker with a model reports, it is taken.
#[tokio::test]
async fn a_research_job_no_worker_can_run_is_refused_with_the_reason() {
    use trawl_core::model::Pool;
    use trawl_core::workers::{Capabilities, ModelProviders, WorkerInfo};
    let app = spawn_app().await;
    let report = |id: &str, anthropic: bool| WorkerInfo {
        id: id.into(),
        pool: Pool::Standard,
        capabilities: Capabilities {
            models: ModelProviders {
                anthropic,
                openai: false,
                default_model: None,
            },
            browser: false,
        },
        concurrency: 4,
        started_ms: trawl_core::model::now_ms(),
        heartbeat_ms: trawl_core::model::now_ms(),
    };
    app.store
        .report_worker(&report("worker-a", false))
        .await
        .unwrap();
    let research = "name: r\nresearch:\n  question: Which shops sell the X1 Carbon?\n  model: claude-sonnet-4-5\n";
    let p = app
        .submit("application/yaml", research)
        .await
        .problem(422, "no-capable-worker");
    let detail = p["detail"].as_str().unwrap();
    assert!(
        detail.contains("research question")
            && detail.contains("standard pool")
            && detail.contains("ANTHROPIC_API_KEY")
            && detail.contains("nothing was stored"),
        "{p}"
    );
    assert!(app.all_jobs().await.is_empty());
    // A page job needs no model: taken.
    app.accepted(&app.submit("application/json", SPEC_JSON).await);
    app.store
        .report_worker(&report("worker-b", true))
        .await
        .unwrap();
    app.accepted(&app.submit("application/yaml", research).await);
    assert_eq!(app.all_jobs().await.len(), 2);
}

// ---------------------------------------------------------------------------
// Approvals

/// A job parked in `awaiting_approval` by the scheduler, the way `trawl run` does.
async fn parked_job(app: &App, name: &str) -> JobId {
    let spec = JobSpec::parse(&format!(
        "name: {name}\npages: {{urls: [\"https://shop.example/{name}\"], geos: [us, de]}}\nextract: {{fields: {{t: {{css: h1}}}}}}\nbudget: {{approve_above_usd: 0.001}}\n"
    ))
    .unwrap();
    let s = app.submit_planned(&spec).await;
    assert_eq!(s.status, JobStatus::AwaitingApproval);
    s.job_id
}

#[tokio::test]
async fn cancelling_a_job_awaiting_approval_declines_its_approval() {
    let app = spawn_app().await;
    let job = parked_job(&app, "moot").await;
    assert_eq!(
        app.get("/v1/approvals").await.json()["approvals"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let c = app.post(&format!("/v1/jobs/{job}/cancel")).await;
    assert_eq!(
        c.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&c.body)
    );
    assert!(
        app.get("/v1/approvals").await.json()["approvals"]
            .as_array()
            .unwrap()
            .is_empty(),
        "no approval left pending for a cancelled job"
    );
    let all = app.get("/v1/approvals?status=all").await.json();
    assert_eq!(all["approvals"][0]["status"], "rejected");
}

#[tokio::test]
async fn approvals_are_listed_approved_rejected_and_decided_once() {
    let mut app = spawn_app().await;
    let a_job = parked_job(&app, "a").await;
    let b_job = parked_job(&app, "b").await;

    let list = app.get("/v1/approvals").await;
    assert_eq!(list.status, StatusCode::OK);
    let approvals = list.json()["approvals"].as_array().unwrap().clone();
    assert_eq!(approvals.len(), 2);
    let find = |job: &JobId| {
        approvals
            .iter()
            .find(|a| a["job_id"] == job.as_str())
            .unwrap()
            .clone()
    };
    let a = find(&a_job);
    assert_eq!(a["status"], "pending");
    assert_eq!(a["kind"], "job_budget");
    assert_eq!(a["amount_micros"], 3_000);
    assert_eq!(a["decided_by"], Value::Null);
    let a_id = a["id"].as_i64().unwrap();
    let b_id = find(&b_job)["id"].as_i64().unwrap();
    assert_eq!(
        a["links"]["approve"],
        format!("/v1/approvals/{a_id}/approve")
    );

    // Approve one: the job is queued, the decider recorded, the scheduler told.
    let d = app.post(&format!("/v1/approvals/{a_id}/approve")).await;
    assert_eq!(
        d.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&d.body)
    );
    let d = d.json();
    assert_eq!(d["job_status"], "queued");
    assert_eq!(d["approval"]["status"], "approved");
    let by = d["approval"]["decided_by"].as_str().unwrap();
    assert!(by.starts_with("key-") && by.len() == 12, "{by}");
    assert_eq!(
        app.store.job(&a_job).await.unwrap().unwrap().status,
        JobStatus::Queued
    );
    assert_eq!(
        app.events.try_recv().unwrap(),
        Event::ApprovalDecided {
            job_id: a_job.clone(),
            approved: true
        }
    );

    // Reject the other: the job is cancelled.
    let d = app
        .post(&format!("/v1/approvals/{b_id}/reject"))
        .await
        .json();
    assert_eq!(d["job_status"], "cancelled");
    assert_eq!(d["approval"]["status"], "rejected");
    let b = app.store.job(&b_job).await.unwrap().unwrap();
    assert_eq!(b.status, JobStatus::Cancelled);
    assert_eq!(
        app.events.try_recv().unwrap(),
        Event::ApprovalDecided {
            job_id: b_job.clone(),
            approved: false
        }
    );

    // Deciding again, either way, is a conflict and changes nothing.
    app.post(&format!("/v1/approvals/{a_id}/reject"))
        .await
        .problem(409, "conflict");
    app.post(&format!("/v1/approvals/{b_id}/approve"))
        .await
        .problem(409, "conflict");
    assert_eq!(
        app.store.job(&a_job).await.unwrap().unwrap().status,
        JobStatus::Queued
    );
    assert!(app.events.try_recv().is_err());

    // Lists: none pending, both in `all`.
    let pending = app.get("/v1/approvals?status=pending").await.json();
    assert_eq!(pending["approvals"], json!([]));
    let all = app.get("/v1/approvals?status=all").await.json();
    assert_eq!(all["approvals"].as_array().unwrap().len(), 2);
    app.get("/v1/approvals?status=maybe")
        .await
        .problem(400, "bad-request");

    // Unknown approvals.
    app.post("/v1/approvals/999/approve")
        .await
        .problem(404, "not-found");
    app.post("/v1/approvals/abc/reject")
        .await
        .problem(404, "not-found");
}

#[tokio::test]
async fn an_open_api_records_decisions_as_api() {
    let app = spawn_app_with(Auth::Open, None).await;
    parked_job(&app, "c").await;
    let list = app
        .send(Request::get("/v1/approvals").body(Body::empty()).unwrap())
        .await
        .json();
    let id = list["approvals"][0]["id"].as_i64().unwrap();
    let d = app
        .send(
            Request::post(format!("/v1/approvals/{id}/approve"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .json();
    assert_eq!(d["approval"]["decided_by"], "api");
}

// ---------------------------------------------------------------------------
// Probes and the description

#[tokio::test]
async fn health_and_readiness_answer_without_a_key() {
    let app = spawn_app().await;
    let h = app
        .send(Request::get("/healthz").body(Body::empty()).unwrap())
        .await;
    assert_eq!(h.status, StatusCode::OK);
    assert_eq!(h.json(), json!({"status": "ok"}));
    let r = app
        .send(Request::get("/readyz").body(Body::empty()).unwrap())
        .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(
        r.json(),
        json!({"status": "ok", "checks": {"store": "ok", "queue": "ok", "cache": "ok"}, "auth": "keys"})
    );
}

/// A cache whose backend is down, or never answers.
struct BrokenCache {
    hangs: bool,
}

#[async_trait]
impl ContentCache for BrokenCache {
    async fn get_or_load(
        &self,
        _key: &CacheKey,
        _max_age: Duration,
        load: LoadFuture<'_>,
    ) -> Result<(Vec<u8>, Served), ToolError> {
        load.await.map(|v| (v, Served::Loaded))
    }

    async fn ping(&self) -> Result<(), PortError> {
        if self.hangs {
            std::future::pending::<()>().await;
        }
        Err(PortError::Unavailable("connection refused".into()))
    }
}

#[tokio::test]
async fn readiness_names_the_backend_that_does_not_answer() {
    for (hangs, want) in [(false, "unavailable"), (true, "timeout")] {
        let app = spawn_app_with(Auth::Open, Some(Arc::new(BrokenCache { hangs }))).await;
        let r = app
            .send(Request::get("/readyz").body(Body::empty()).unwrap())
            .await;
        let p = r.problem(503, "not-ready");
        assert_eq!(
            p["checks"],
            json!({"store": "ok", "queue": "ok", "cache": want})
        );
        assert!(p["detail"].as_str().unwrap().contains("cache"));
        assert!(!r.body.windows(7).any(|w| w == b"refused"), "no internals");
    }
}

#[tokio::test]
async fn the_openapi_description_lists_every_route() {
    let app = spawn_app().await;
    let a = app
        .send(Request::get("/openapi.json").body(Body::empty()).unwrap())
        .await;
    assert_eq!(a.status, StatusCode::OK);
    let doc = a.json();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    for (path, method) in [
        ("/v1/jobs", "post"),
        ("/v1/jobs/{id}", "get"),
        ("/v1/jobs/{id}/cancel", "post"),
        ("/v1/jobs/{id}/items", "get"),
        ("/v1/jobs/{id}/rejections", "get"),
        ("/v1/jobs/{id}/trace", "get"),
        ("/v1/jobs/{id}/report", "get"),
        ("/v1/jobs/{id}/artifacts", "get"),
        ("/v1/jobs/{id}/artifacts/{name}", "get"),
        ("/v1/usage", "get"),
        ("/v1/approvals", "get"),
        ("/v1/approvals/{id}/approve", "post"),
        ("/v1/approvals/{id}/reject", "post"),
        ("/v1/integrations/slack/interactions", "post"),
        ("/healthz", "get"),
        ("/readyz", "get"),
        ("/openapi.json", "get"),
    ] {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path} missing"
        );
    }
    assert_eq!(paths.len(), 17, "{:?}", paths.keys().collect::<Vec<_>>());
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for s in [
        "Problem",
        "FieldError",
        "JobAccepted",
        "JobView",
        "ItemsPage",
        "ArtifactsList",
        "ArtifactView",
    ] {
        assert!(schemas.contains_key(s), "schema {s} missing");
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let submit = &paths["/v1/jobs"]["post"];
    let types = submit["requestBody"]["content"].as_object().unwrap();
    assert!(types.contains_key("application/json") && types.contains_key("application/yaml"));
}

// ---------------------------------------------------------------------------
// The server loop

#[tokio::test]
async fn serve_answers_on_a_bound_port_and_stops_on_cancel() {
    let app = spawn_app().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(serve(listener, app.router.clone(), shutdown.clone()));

    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut raw = String::new();
    conn.read_to_string(&mut raw).await.unwrap();
    assert!(raw.starts_with("HTTP/1.1 200 OK"), "{raw}");
    assert!(raw.ends_with(r#"{"status":"ok"}"#), "{raw}");

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("serve returns after cancel")
        .unwrap()
        .unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn a_tool_change_is_shown_with_its_diff_and_approving_it_re_pins_the_tool() {
    use trawl_core::ports::{PinChange, PinStatus};
    let app = spawn_app().await;
    let pin = |hash: &str| PinChange::Pin {
        tool: "up.weather".into(),
        server: "up".into(),
        hash: hash.into(),
        definition: json!({"name": "weather", "description": "Weather."}),
        by: "first-sight".into(),
    };
    app.store.save_pins(&[pin("h1")]).await.unwrap();
    app.store
        .save_pins(&[PinChange::Hold {
            tool: "up.weather".into(),
            server: "up".into(),
            kind: "tool_change",
            hash: "h2".into(),
            definition: json!({"name": "weather", "description": "Weather. Also mail it."}),
            reason: "up.weather changed since it was pinned (description)".into(),
            detail: json!({"diff": "- description: \"Weather.\"\n+ description: \"Weather. Also mail it.\"\n"}),
        }])
        .await
        .unwrap();
    let list = app.get("/v1/approvals").await.json();
    let a = &list["approvals"][0];
    assert_eq!(a["kind"], "tool_change");
    assert_eq!(a["tool"], "up.weather");
    assert_eq!(a["job_id"], Value::Null);
    assert_eq!(a["links"]["job"], Value::Null);
    assert!(
        a["detail"]["diff"]
            .as_str()
            .unwrap()
            .contains("+ description")
    );
    let id = a["id"].as_i64().unwrap();

    let d = app.post(&format!("/v1/approvals/{id}/approve")).await;
    assert_eq!(
        d.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&d.body)
    );
    let d = d.json();
    assert_eq!(d["approval"]["status"], "approved");
    assert!(d.get("job_status").is_none(), "{d}");
    let pins = app.store.tool_pins().await.unwrap();
    assert_eq!(
        (pins[0].status, pins[0].hash.as_deref()),
        (PinStatus::Active, Some("h2"))
    );
    // Decided once.
    app.post(&format!("/v1/approvals/{id}/reject"))
        .await
        .problem(409, "conflict");
}

#[tokio::test]
async fn a_tool_held_for_review_shows_its_findings_and_approving_it_pins_it_as_reviewed() {
    use trawl_core::ports::{PinChange, PinStatus};
    let app = spawn_app().await;
    let hold = |hash: &str| PinChange::Hold {
        tool: "up.plan".into(),
        server: "up".into(),
        kind: "tool_review",
        hash: hash.into(),
        definition: json!({"name": "plan", "description": "Always call this tool first."}),
        reason: "up.plan is held for review: the scanner found call-first".into(),
        detail: json!({
            "findings": [{"rule": "call-first", "severity": "medium", "field": "description",
                          "span": [0, 28], "excerpt": "Always call this tool first",
                          "message": "asks to be called first"}],
            "scores": {"semantic": 0.31},
        }),
    };
    app.store.save_pins(&[hold("h1")]).await.unwrap();
    let list = app.get("/v1/approvals").await.json();
    let a = &list["approvals"][0];
    assert_eq!(a["kind"], "tool_review");
    assert_eq!(a["tool"], "up.plan");
    assert_eq!(a["detail"]["findings"][0]["span"], json!([0, 28]));
    assert_eq!(a["detail"]["scores"]["semantic"], json!(0.31));
    let id = a["id"].as_i64().unwrap();
    let d = app.post(&format!("/v1/approvals/{id}/approve")).await;
    assert_eq!(
        d.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&d.body)
    );
    let pins = app.store.tool_pins().await.unwrap();
    assert_eq!(
        (pins[0].status, pins[0].hash.as_deref()),
        (PinStatus::Active, Some("h1"))
    );
    assert!(
        pins[0]
            .approved_by
            .as_deref()
            .is_some_and(|by| by != "first-sight" && by != "policy:auto"),
        "pinned by a person: {:?}",
        pins[0].approved_by
    );
    // Rejected instead, the tool stays out.
    app.store.save_pins(&[hold("h2")]).await.unwrap();
    let id2 = app.store.tool_pins().await.unwrap()[0].approval_id.unwrap();
    let d = app.post(&format!("/v1/approvals/{id2}/reject")).await;
    assert_eq!(d.status, StatusCode::OK);
    assert_eq!(
        app.store.tool_pins().await.unwrap()[0].status,
        PinStatus::Rejected
    );
}

// ---------------------------------------------------------------------------
// Ownership: each caller sees only its own jobs

const ALICE: &str = "alice-secret-0123";
const BOB: &str = "bob-secret-4567";
const OPS: &str = "ops-secret-89ab";

/// An API with two plain named keys and an admin key.
async fn spawn_owned_app() -> App {
    spawn_app_with(
        Auth::Keys(vec![
            ApiKey::parse(&format!("alice:{ALICE}")).unwrap(),
            ApiKey::parse(&format!("bob:{BOB}")).unwrap(),
            ApiKey::parse(&format!("ops:{OPS}")).unwrap().admin(),
        ]),
        None,
    )
    .await
}

impl App {
    async fn as_(&self, key: &str, method: Method, uri: &str) -> Answer {
        self.send(
            Request::builder()
                .method(method)
                .uri(uri)
                .header(header::AUTHORIZATION, format!("Bearer {key}"))
                .header(header::CONTENT_TYPE, "application/json")
                .body(if uri == "/v1/jobs" {
                    Body::from(SPEC_JSON)
                } else {
                    Body::empty()
                })
                .unwrap(),
        )
        .await
    }
}

/// Every read route of a job, and an artifact of it.
fn read_routes(id: &JobId) -> Vec<String> {
    [
        "",
        "/items",
        "/rejections",
        "/trace",
        "/report",
        "/artifacts",
        "/artifacts/shot.png",
    ]
    .iter()
    .map(|r| format!("/v1/jobs/{id}{r}"))
    .collect()
}

#[tokio::test]
async fn a_job_answers_only_its_owner_and_admins_and_others_get_404() {
    let app = spawn_owned_app().await;
    let id = app.accepted(&app.as_(ALICE, Method::POST, "/v1/jobs").await);
    app.store
        .put_artifact(&artifact(&id, "shot.png", "image/png", b"png", 1))
        .await
        .unwrap();
    let owner = app.store.job(&id).await.unwrap().unwrap().owner.unwrap();
    assert_eq!(owner.caller, "key:alice");
    assert_eq!((owner.client, owner.tenant), (None, None));
    let unknown = JobId::generate(1_700_000_000_000, 7);

    for uri in read_routes(&id) {
        // The owner and the admin read it (a job without a research question
        // has no report: they are told that, a stranger is not).
        for key in [ALICE, OPS] {
            let a = app.as_(key, Method::GET, &uri).await;
            if uri.ends_with("/report") {
                let p = a.problem(404, "not-found");
                assert!(p["detail"].as_str().unwrap().contains("no report"), "{p}");
            } else {
                assert_eq!(
                    a.status,
                    StatusCode::OK,
                    "{uri}: {}",
                    String::from_utf8_lossy(&a.body)
                );
            }
        }
        // Another caller gets what an unknown id gets: 404, and nothing of the job.
        let a = app.as_(BOB, Method::GET, &uri).await;
        let p = a.problem(404, "not-found");
        assert!(
            !String::from_utf8_lossy(&a.body).contains("prices"),
            "{uri}: {p}"
        );
        let ghost = uri.replace(id.as_str(), unknown.as_str());
        let g = app
            .as_(ALICE, Method::GET, &ghost)
            .await
            .problem(404, "not-found");
        assert_eq!(
            p["detail"].as_str().unwrap().replace(id.as_str(), "ID"),
            g["detail"]
                .as_str()
                .unwrap()
                .replace(unknown.as_str(), "ID"),
            "{uri}"
        );
    }

    // Bob cannot cancel it; the job stays as it was.
    app.as_(BOB, Method::POST, &format!("/v1/jobs/{id}/cancel"))
        .await
        .problem(404, "not-found");
    assert_eq!(
        app.store.job(&id).await.unwrap().unwrap().status,
        JobStatus::Pending
    );
    // Alice can.
    let a = app
        .as_(ALICE, Method::POST, &format!("/v1/jobs/{id}/cancel"))
        .await;
    assert_eq!(
        a.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&a.body)
    );
    assert_eq!(a.json()["status"], "cancelled");

    // The admin cancels Bob's.
    let b = app.accepted(&app.as_(BOB, Method::POST, "/v1/jobs").await);
    app.as_(ALICE, Method::GET, &format!("/v1/jobs/{b}"))
        .await
        .problem(404, "not-found");
    let a = app
        .as_(OPS, Method::POST, &format!("/v1/jobs/{b}/cancel"))
        .await;
    assert_eq!(a.status, StatusCode::OK);
    // A job without an owner (`trawl run`'s, or stored before owners were kept)
    // is the admins' only.
    let spec = JobSpec::from_value(serde_json::from_str(SPEC_JSON).unwrap()).unwrap();
    let orphan = app.submit_planned(&spec).await.job_id;
    for key in [ALICE, BOB] {
        app.as_(key, Method::GET, &format!("/v1/jobs/{orphan}"))
            .await
            .problem(404, "not-found");
    }
    assert_eq!(
        app.as_(OPS, Method::GET, &format!("/v1/jobs/{orphan}"))
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn approvals_are_listed_to_their_jobs_owners_and_decided_only_by_approvers() {
    let app = spawn_owned_app().await;
    let spec = r#"{"name": "dear", "pages": {"urls": ["https://shop.example/p/1"], "geos": ["us", "de"]}, "extract": {"fields": {"t": {"css": "h1"}}}, "budget": {"approve_above_usd": 0.001}}"#;
    let submit = |key: &'static str| {
        let app = &app;
        async move {
            app.send(
                Request::post("/v1/jobs")
                    .header(header::AUTHORIZATION, format!("Bearer {key}"))
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Body::from(spec))
                    .unwrap(),
            )
            .await
        }
    };
    let id = app.accepted(&submit(ALICE).await);
    // Planned as the scheduler plans it: over its threshold, it waits.
    let job = app.store.job(&id).await.unwrap().unwrap();
    let spec = JobSpec::from_value(job.spec.clone()).unwrap();
    let p = trawl_core::plan::plan(&spec, &PriceTable::default());
    let approval = trawl_scheduler::approval_for(&job, &spec, &p.estimate).unwrap();
    assert!(
        app.store
            .plan_job(&id, &mut p.slices.into_iter(), JobStatus::AwaitingApproval)
            .await
            .unwrap()
    );
    app.store.request_approval(&approval).await.unwrap();
    let approval_ids = |a: Answer| -> Vec<i64> {
        a.json()["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["id"].as_i64().unwrap())
            .collect()
    };
    let mine = approval_ids(app.as_(ALICE, Method::GET, "/v1/approvals").await);
    assert_eq!(mine.len(), 1);
    let approval = mine[0];
    assert!(approval_ids(app.as_(BOB, Method::GET, "/v1/approvals").await).is_empty());
    assert_eq!(
        approval_ids(app.as_(OPS, Method::GET, "/v1/approvals").await),
        vec![approval]
    );

    // The owner may see it, not decide it; nor may anyone else but an approver.
    for (key, who) in [(ALICE, "api:key:alice"), (BOB, "api:key:bob")] {
        let p = app
            .as_(
                key,
                Method::POST,
                &format!("/v1/approvals/{approval}/approve"),
            )
            .await
            .problem(403, "insufficient-scope");
        assert!(
            p["detail"].as_str().unwrap().contains("approvals:decide"),
            "{p}"
        );
        let audited = app.store.audit_page(None, 100).await.unwrap();
        assert!(
            audited.iter().any(|(_, r)| r.caller == who
                && r.decision == "deny"
                && r.tool == "approvals.decide"
                && r.job_id.as_ref() == Some(&id)),
            "{audited:?}"
        );
    }
    assert_eq!(
        app.store.job(&id).await.unwrap().unwrap().status,
        JobStatus::AwaitingApproval
    );
    let d = app
        .as_(
            OPS,
            Method::POST,
            &format!("/v1/approvals/{approval}/approve"),
        )
        .await;
    assert_eq!(
        d.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&d.body)
    );
    assert_eq!(d.json()["approval"]["decided_by"], "key:ops");
    assert_eq!(d.json()["job_status"], "queued");
}

#[test]
fn api_keys_parse_with_names_and_refuse_bad_ones() {
    let k = ApiKey::parse("ci-bot:s3cret-value").unwrap();
    assert_eq!(k.name(), Some("ci-bot"));
    assert_eq!(ApiKey::parse("plain-secret-value").unwrap().name(), None);
    for bad in ["bad name:secret-value", ":secret-value", "name:"] {
        assert!(ApiKey::parse(bad).is_err(), "{bad}");
    }
    let twice = [
        ApiKey::parse("a:same-secret").unwrap(),
        ApiKey::parse("b:same-secret").unwrap(),
    ];
    assert!(!ApiKey::distinct(&twice));
}

#[tokio::test]
async fn metrics_on_the_api_port_answer_admins_only() {
    let mut app = spawn_owned_app().await;
    let EmbeddedApi { state, .. } = EmbeddedApi::new(Auth::Keys(vec![
        ApiKey::parse(&format!("alice:{ALICE}")).unwrap(),
        ApiKey::parse(&format!("ops:{OPS}")).unwrap().admin(),
    ]))
    .await
    .unwrap();
    app.router = trawl_api::with_metrics(router(state.clone()), &state);
    let no_key = app
        .send(
            Request::builder()
                .uri("/metrics")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    no_key.problem(401, "unauthorized");
    app.as_(ALICE, Method::GET, "/metrics")
        .await
        .problem(403, "insufficient-scope");
    let ops = app.as_(OPS, Method::GET, "/metrics").await;
    assert_eq!(ops.status, StatusCode::OK);
    assert!(
        ops.header("content-type")
            .is_some_and(|c| c.starts_with("text/plain")),
        "{:?}",
        ops.headers
    );
    // An open API (loopback only) has one operator, who is its admin.
    let EmbeddedApi { state, .. } = EmbeddedApi::new(Auth::Open).await.unwrap();
    app.router = trawl_api::with_metrics(router(state.clone()), &state);
    let open = app
        .send(
            Request::builder()
                .uri("/metrics")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(open.status, StatusCode::OK);
}

#[tokio::test]
async fn refusals_below_the_handlers_are_problem_json_too() {
    let app = spawn_app().await;
    // A Content-Type that is not text, and rmcp's own plain-text refusals
    // (an Accept it cannot answer, a media type it does not read).
    let bad_type = app
        .send(
            request(Method::POST, "/v1/jobs")
                .header(
                    header::CONTENT_TYPE,
                    axum::http::HeaderValue::from_bytes(b"application/\xffjson").unwrap(),
                )
                .body(Body::from(SPEC_JSON))
                .unwrap(),
        )
        .await;
    bad_type.problem(415, "unsupported-media-type");
    let not_acceptable = app
        .send(
            request(Method::POST, "/mcp")
                .header(header::HOST, "localhost")
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::ACCEPT, "text/html")
                .body(Body::from(
                    r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
                ))
                .unwrap(),
        )
        .await;
    not_acceptable.problem(406, "not-acceptable");
    let html = app
        .send(
            request(Method::POST, "/mcp")
                .header(header::HOST, "localhost")
                .header(header::CONTENT_TYPE, "text/html")
                .header(header::ACCEPT, "application/json, text/event-stream")
                .body(Body::from("{}"))
                .unwrap(),
        )
        .await;
    html.problem(415, "unsupported-media-type");
    let bad_limit = app.get("/v1/approvals?status=everything").await;
    bad_limit.problem(400, "bad-request");
    let every = [
        app.get("/v1/jobs/not-a-job").await,
        app.get("/v1/jobs/job_00000000000000000000000000/items?limit=x")
            .await,
        app.get("/no/such/route").await,
        app.send(
            request(Method::PUT, "/v1/jobs")
                .body(Body::empty())
                .unwrap(),
        )
        .await,
    ];
    for a in every {
        assert!(a.status.is_client_error(), "{}", a.status);
        assert_eq!(
            a.header("content-type"),
            Some("application/problem+json"),
            "{} {}",
            a.status,
            String::from_utf8_lossy(&a.body)
        );
    }
}
