//! Operating trawl: one job is one trace across the API, the scheduler and a
//! worker (exported over OTLP gRPC to a receiver this test runs), and every
//! role's `/metrics` parses as Prometheus text with counters that match the
//! job's summary.
//!
//! The receiver is the OTLP trace service generated from the OpenTelemetry
//! protocol definitions (`opentelemetry-proto`, served by tonic): the wire
//! format a collector or Jaeger speaks. The Prometheus text is parsed by the
//! Prometheus project's Python client (`prometheus_client.parser`), an outside
//! implementation of the format.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use serde_json::Value;
use tokio::sync::watch;
use trawl_sim::SimConfig;
use trawl_tests::{Deployment, EXTRACT, Role, is_terminal, upstreams};

/// The `trawl` command line, built as this package's `trawl-e2e` binary.
const BIN: &str = env!("CARGO_BIN_EXE_trawl-e2e");

/// One search that follows its top result, and one direct page: a search slice,
/// its child page slice (published by the worker), and a page slice.
fn small_job(name: &str) -> String {
    format!(
        "name: {name}\nsearches:\n  queries: [laptop]\n  geos: [us]\n  follow_top: 1\n\
         pages:\n  urls: [\"https://shop.example/p/{name}\"]\n  geos: [de]\n{EXTRACT}"
    )
}

/// A span as received, flattened.
#[derive(Clone, Debug)]
struct Span {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: HashMap<String, String>,
}

/// An OTLP trace receiver: every span exported to it, and a signal on each.
#[derive(Clone)]
struct Receiver {
    spans: Arc<Mutex<Vec<Span>>>,
    changed: watch::Sender<usize>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut got = Vec::new();
        for rs in request.into_inner().resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| text(kv.value.as_ref()?.value.as_ref()?))
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    got.push(Span {
                        service: service.clone(),
                        name: s.name,
                        trace_id: hex(&s.trace_id),
                        span_id: hex(&s.span_id),
                        parent: hex(&s.parent_span_id),
                        attributes: s
                            .attributes
                            .into_iter()
                            .filter_map(|kv| {
                                Some((kv.key, text(kv.value.as_ref()?.value.as_ref()?)?))
                            })
                            .collect(),
                    });
                }
            }
        }
        let n = {
            let mut spans = self.spans.lock().unwrap();
            spans.extend(got);
            spans.len()
        };
        self.changed.send_replace(n);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn text(v: &AnyValue) -> Option<String> {
    Some(match v {
        AnyValue::StringValue(s) => s.clone(),
        AnyValue::IntValue(i) => i.to_string(),
        AnyValue::BoolValue(b) => b.to_string(),
        AnyValue::DoubleValue(d) => d.to_string(),
        _ => return None,
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Receiver {
    /// Starts the receiver on a loopback port; its `http://` endpoint.
    async fn start() -> (Receiver, String) {
        let (changed, _) = watch::channel(0);
        let receiver = Receiver {
            spans: Arc::default(),
            changed,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = TraceServiceServer::new(receiver.clone());
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await
                .unwrap();
        });
        (receiver, format!("http://{addr}"))
    }

    /// Waits until `done` holds for the spans received (or fails with them).
    async fn wait(&self, within: Duration, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let mut rx = self.changed.subscribe();
        let reached = tokio::time::timeout(within, async {
            loop {
                if done(&self.spans.lock().unwrap()) {
                    return;
                }
                rx.changed().await.unwrap();
            }
        })
        .await;
        let spans = self.spans.lock().unwrap().clone();
        assert!(
            reached.is_ok(),
            "the expected spans did not arrive within {within:?}; got:\n{}",
            spans
                .iter()
                .map(|s| format!("{} {} {} <- {}", s.service, s.name, s.span_id, s.parent))
                .collect::<Vec<_>>()
                .join("\n")
        );
        spans
    }
}

fn logs(roles: &[&Role]) -> String {
    roles
        .iter()
        .map(|r| format!("--- {} ---\n{}", r.name, r.log()))
        .collect()
}

fn named<'a>(spans: &'a [Span], service: &str, name: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.service == service && s.name == name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_job_is_one_trace_from_the_api_through_nats_to_the_worker() {
    let (receiver, endpoint) = Receiver::start().await;
    let d = Deployment::new(BIN, SimConfig::default())
        .await
        .with_env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        // Export every 100 ms instead of every 5 s.
        .with_env("OTEL_BSP_SCHEDULE_DELAY", "100")
        // Every upstream HTTP request as a span of its own too.
        .with_env("TRAWL_TRACE_LEVEL", "debug");
    let mut api = d.spawn("api", "api");
    let scheduler = d.spawn("scheduler", "scheduler");
    let worker = d.spawn("worker", "worker");
    let base = api.api_url().await;
    let client = d.client(&base);

    // The caller's own trace: the job joins it.
    let caller_trace = "0af7651916cd43dd8448eb211c80319c";
    let caller_span = "b7ad6b7169203331";
    let res = client
        .req(reqwest::Method::POST, "/v1/jobs")
        .header("content-type", "application/yaml")
        .header("traceparent", format!("00-{caller_trace}-{caller_span}-01"))
        .body(small_job("traced"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());
    let id = res.json::<Value>().await.unwrap()["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let job = client
        .wait_job(&id, Duration::from_secs(60), is_terminal, || {
            logs(&[&api, &scheduler, &worker])
        })
        .await;
    assert_eq!(job["status"], "succeeded", "{job}");
    // The API returns the trace id, so a user can open the trace in Jaeger.
    assert_eq!(job["trace_id"], caller_trace, "{job}");

    // Every span of the job: the submission, the planning, three slices (the
    // search, the page it found, the direct page), their tool calls and the
    // upstream HTTP requests.
    let spans = receiver
        .wait(Duration::from_secs(30), |spans| {
            let n = |svc: &str, name: &str| {
                spans
                    .iter()
                    .filter(|s| s.service == svc && s.name == name)
                    .count()
            };
            n("trawl-api", "POST /v1/jobs") == 1
                && n("trawl-scheduler", "plan job") == 1
                && n("trawl-worker", "slice search") == 1
                && n("trawl-worker", "slice page") == 2
                && n("trawl-worker", "POST /request") >= 3
        })
        .await;
    let ours: Vec<&Span> = spans
        .iter()
        .filter(|s| s.trace_id == caller_trace)
        .collect();
    let request = named(&spans, "trawl-api", "POST /v1/jobs")[0];
    assert_eq!(request.trace_id, caller_trace);
    assert_eq!(
        request.parent, caller_span,
        "the caller's span is the parent"
    );
    assert_eq!(request.attributes["http.response.status_code"], "202");

    // Planning continues the trace stored with the job (its parent is the
    // submission's handler span, inside the request span).
    let plan = named(&spans, "trawl-scheduler", "plan job")[0];
    assert_eq!(plan.trace_id, caller_trace);
    let submit = ours
        .iter()
        .find(|s| s.span_id == plan.parent)
        .unwrap_or_else(|| panic!("plan's parent {} was not exported", plan.parent));
    assert_eq!(submit.service, "trawl-api");
    assert_eq!(
        submit.parent, request.span_id,
        "the handler span is the request's child"
    );

    // Across the NATS hop: slices the scheduler published are children of the
    // planning span; the page the search found is a child of the search slice,
    // whose worker published it.
    let search = named(&spans, "trawl-worker", "slice search")[0];
    assert_eq!(search.trace_id, caller_trace);
    assert_eq!(search.attributes["outcome"], "succeeded");
    // Validation on every slice's span (a search yields its results as items).
    let items_valid: u64 = spans
        .iter()
        .filter(|s| s.name.starts_with("slice "))
        .map(|s| s.attributes["items.valid"].parse::<u64>().unwrap())
        .sum();
    assert_eq!(
        items_valid,
        job["counts"]["items"]["valid"].as_u64().unwrap()
    );
    assert_eq!(search.parent, plan.span_id);
    let pages = named(&spans, "trawl-worker", "slice page");
    let parents: Vec<&str> = {
        let mut p: Vec<&str> = pages.iter().map(|s| s.parent.as_str()).collect();
        p.sort_unstable();
        p
    };
    let mut expected = vec![plan.span_id.as_str(), search.span_id.as_str()];
    expected.sort_unstable();
    assert_eq!(parents, expected);
    assert!(pages.iter().all(|s| s.trace_id == caller_trace));

    // Each tool call is a span under its slice, with the cache's answer, and
    // each attempt's HTTP request to Bright Data a span under the call.
    let slice_ids: Vec<&str> = std::iter::once(search)
        .chain(pages.iter().copied())
        .map(|s| s.span_id.as_str())
        .collect();
    let calls: Vec<&&Span> = ours
        .iter()
        .filter(|s| s.name.starts_with("tool ") && slice_ids.contains(&s.parent.as_str()))
        .collect();
    assert_eq!(calls.len(), 3, "one tool call per slice");
    for call in &calls {
        assert_eq!(call.attributes["cache"], "miss", "{call:?}");
        assert_eq!(call.attributes["outcome"], "ok", "{call:?}");
        let http: Vec<&&Span> = ours
            .iter()
            .filter(|s| s.parent == call.span_id && s.name == "POST /request")
            .collect();
        assert_eq!(http.len(), 1, "one HTTP request (no retry) under {call:?}");
        let http = http[0];
        assert_eq!(http.attributes["http.response.status_code"], "200");
    }

    // The trace steps stored with the job name the trace and their tool call.
    let steps = client.all(&format!("/v1/jobs/{id}/trace"), "steps").await;
    assert_eq!(steps.len(), 3, "{steps:?}");
    for step in &steps {
        assert_eq!(step["trace_id"], caller_trace, "{step}");
        let span = step["span_id"].as_str().unwrap();
        assert!(
            calls.iter().any(|c| c.span_id == span),
            "step {step} names no exported tool call span"
        );
    }
    // Only trawl's spans: nothing of h2, tonic, hyper or sqlx.
    let services: Vec<&str> = ours.iter().map(|s| s.service.as_str()).collect();
    assert!(
        services
            .iter()
            .all(|s| ["trawl-api", "trawl-scheduler", "trawl-worker"].contains(s)),
        "{services:?}"
    );
}

/// With jobs sampled at one in two, each job is traced whole or not at all: a
/// sampled job's submission, planning and every slice arrive under its trace id;
/// no scheduler or worker span arrives for a job left out; every job keeps its
/// trace steps in the store either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_keeps_or_leaves_out_whole_jobs() {
    let (receiver, endpoint) = Receiver::start().await;
    let d = Deployment::new(BIN, SimConfig::default())
        .await
        .with_env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .with_env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .with_env("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
        .with_env("OTEL_TRACES_SAMPLER_ARG", "0.5");
    let mut api = d.spawn("api", "api");
    let scheduler = d.spawn("scheduler", "scheduler");
    let worker = d.spawn("worker", "worker");
    let client = d.client(&api.api_url().await);
    // 16 jobs: all of them in or all out would happen twice in 65,536 runs.
    let mut ids = Vec::new();
    for i in 0..16 {
        ids.push(
            client
                .submit_yaml(&small_job(&format!("sampled-{i}")))
                .await,
        );
    }
    let mut sampled: Vec<String> = Vec::new();
    for id in &ids {
        let job = client
            .wait_job(id, Duration::from_secs(60), is_terminal, || {
                logs(&[&api, &scheduler, &worker])
            })
            .await;
        assert_eq!(job["status"], "succeeded", "{job}");
        if let Some(t) = job["trace_id"].as_str() {
            sampled.push(t.to_owned());
        }
        // Sampled or not, the store keeps the job's trace steps.
        let steps = client.all(&format!("/v1/jobs/{id}/trace"), "steps").await;
        assert_eq!(steps.len(), 3, "{job}");
    }
    assert!(
        !sampled.is_empty() && sampled.len() < ids.len(),
        "{} of {} jobs sampled",
        sampled.len(),
        ids.len()
    );
    let whole = |spans: &[Span], t: &str| {
        let n = |svc: &str, name: &str| {
            spans
                .iter()
                .filter(|s| s.trace_id == t && s.service == svc && s.name == name)
                .count()
        };
        n("trawl-api", "POST /v1/jobs") == 1
            && n("trawl-scheduler", "plan job") == 1
            && n("trawl-worker", "slice search") == 1
            && n("trawl-worker", "slice page") == 2
    };
    let spans = receiver
        .wait(Duration::from_secs(30), |spans| {
            sampled.iter().all(|t| whole(spans, t))
        })
        .await;
    // Nothing of the jobs left out: every submission, planning and worker span
    // (but the worker's start-up, `connect`) is in a sampled job's trace. The
    // roles' own passes (approval expiry, notices) are traces of their own.
    let stray: Vec<&Span> = spans
        .iter()
        .filter(|s| {
            (s.service == "trawl-worker" && s.name != "connect")
                || s.name == "plan job"
                || s.name == "POST /v1/jobs"
        })
        .filter(|s| !sampled.contains(&s.trace_id))
        .collect();
    assert!(stray.is_empty(), "spans of jobs left out: {stray:#?}");
    // At the default detail a slice is two spans: itself and its tool call,
    // whose span the HTTP request to Bright Data carries.
    assert_eq!(
        spans.iter().filter(|s| s.name.starts_with("tool ")).count(),
        3 * sampled.len()
    );
    assert!(
        named(&spans, "trawl-worker", "POST /request").is_empty(),
        "HTTP request spans at the default detail"
    );
    assert_eq!(
        named(&spans, "trawl-api", "POST /v1/jobs").len(),
        sampled.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_otlp_endpoint_no_trace_is_kept() {
    let d = Deployment::new(BIN, SimConfig::default()).await;
    let mut api = d.spawn("api", "api");
    let scheduler = d.spawn("scheduler", "scheduler");
    let worker = d.spawn("worker", "worker");
    let client = d.client(&api.api_url().await);
    let res = client
        .req(reqwest::Method::POST, "/v1/jobs")
        .header("content-type", "application/yaml")
        .header(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        .body(small_job("untraced"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    let id = res.json::<Value>().await.unwrap()["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let job = client
        .wait_job(&id, Duration::from_secs(60), is_terminal, || {
            logs(&[&api, &scheduler, &worker])
        })
        .await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert!(job["trace_id"].is_null(), "{job}");
    let steps = client.all(&format!("/v1/jobs/{id}/trace"), "steps").await;
    assert_eq!(steps.len(), 3);
    assert!(
        steps.iter().all(|s| s.get("trace_id").is_none()),
        "{steps:?}"
    );
}

/// Samples by metric name: each sample's labels and value.
type Samples = HashMap<String, Vec<(HashMap<String, String>, f64)>>;

/// `/metrics` parsed by `prometheus_client.parser`: `{name: [[labels, value]]}`
/// per sample, or the parser's error.
async fn parse_metrics(
    text: &str,
) -> Result<HashMap<String, Vec<(HashMap<String, String>, f64)>>, String> {
    let script = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        out.setdefault(s.name, []).append([s.labels, s.value])
print(json.dumps(out))
"#;
    let python = upstreams().join(".venv/bin/python");
    let mut child = tokio::process::Command::new(python)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the tests' Python venv (see README) runs");
    use tokio::io::AsyncWriteExt as _;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(text.as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(serde_json::from_slice(&out.stdout).unwrap())
}

/// The sum of a metric's samples whose labels include `with`.
fn sum(m: &Samples, name: &str, with: &[(&str, &str)]) -> f64 {
    m.get(name)
        .into_iter()
        .flatten()
        .filter(|(labels, _)| {
            with.iter()
                .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| v)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_role_serves_prometheus_metrics_that_match_the_job() {
    let d = Deployment::new(BIN, SimConfig::default())
        .await
        .with_env("TRAWL_OPS_LISTEN", "127.0.0.1:0");
    let mut api = d.spawn("api", "api");
    let mut scheduler = d.spawn("scheduler", "scheduler");
    let mut worker = d.spawn("worker", "worker");
    let client = d.client(&api.api_url().await);
    let http = reqwest::Client::new();
    let get = |url: String| {
        let http = http.clone();
        async move {
            let res = http.get(&url).send().await.unwrap();
            let status = res.status();
            let ctype = res
                .headers()
                .get("content-type")
                .map(|v| v.to_str().unwrap().to_owned());
            (status, ctype, res.text().await.unwrap())
        }
    };
    let (api_ops, scheduler_ops, worker_ops) = (
        api.ops_url().await,
        scheduler.ops_url().await,
        worker.ops_url().await,
    );
    // Probes on every ops listener.
    for ops in [&api_ops, &scheduler_ops, &worker_ops] {
        let (status, _, body) = get(format!("{ops}/healthz")).await;
        assert_eq!(status, 200, "{ops}: {body}");
        let (status, _, body) = get(format!("{ops}/readyz")).await;
        assert_eq!(status, 200, "{ops}: {body}");
    }
    // `trawl probe`, the containers' health check: 0 on 2xx, 1 with the answer
    // on anything else or no answer.
    // (The roles are processes of their own: blocking this thread stalls nothing.)
    let probe = |url: String| {
        let out = std::process::Command::new(BIN)
            .args(["probe", &url, "--timeout", "5s"])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for ops in [&api_ops, &scheduler_ops, &worker_ops] {
        assert_eq!(probe(format!("{ops}/readyz")), (Some(0), String::new()));
    }
    let (code, err) = probe(format!("{worker_ops}/no-such-path"));
    assert_eq!(code, Some(1));
    assert!(err.contains("404"), "{err}");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_url = format!("http://{}/readyz", closed.local_addr().unwrap());
    drop(closed);
    let (code, err) = probe(closed_url);
    assert_eq!(code, Some(1));
    assert!(err.contains("no answer"), "{err}");
    // With an ops listener, the API keeps /metrics off its public port.
    let base = api.api_url().await;
    let (status, _, _) = get(format!("{base}/metrics")).await;
    assert_eq!(status, 404);

    // Twice the same job: the second is served from the cache.
    let mut jobs = Vec::new();
    for name in ["metered", "metered-again"] {
        let id = client
            .submit_yaml(&small_job("metered").replacen("metered", name, 1))
            .await;
        let job = client
            .wait_job(&id, Duration::from_secs(60), is_terminal, || {
                logs(&[&api, &scheduler, &worker])
            })
            .await;
        assert_eq!(job["status"], "succeeded", "{job}");
        jobs.push(job);
    }
    let total = |f: &dyn Fn(&Value) -> f64| jobs.iter().map(f).sum::<f64>();

    let (status, ctype, text) = get(format!("{worker_ops}/metrics")).await;
    assert_eq!(status, 200);
    assert!(ctype.unwrap().starts_with("text/plain; version=0.0.4"));
    let m = parse_metrics(&text)
        .await
        .unwrap_or_else(|e| panic!("worker /metrics is not Prometheus text: {e}\n{text}"));
    let counts = |j: &Value, path: &[&str]| {
        path.iter()
            .fold(&j["counts"], |v, k| &v[*k])
            .as_f64()
            .unwrap()
    };
    assert_eq!(
        sum(&m, "trawl_slices_total", &[("outcome", "succeeded")]),
        total(&|j| counts(j, &["slices", "succeeded"]))
    );
    assert_eq!(sum(&m, "trawl_slices_total", &[("kind", "search")]), 2.0);
    assert_eq!(sum(&m, "trawl_slices_total", &[("outcome", "failed")]), 0.0);
    assert_eq!(
        sum(&m, "trawl_items_total", &[("outcome", "valid")]),
        total(&|j| counts(j, &["items", "valid"]))
    );
    assert_eq!(
        sum(&m, "trawl_items_total", &[("outcome", "rejected")]),
        total(&|j| counts(j, &["items", "rejected"]))
    );
    assert_eq!(
        sum(&m, "trawl_cost_microdollars_total", &[]),
        total(&|j| counts(j, &["cost_micros"]))
    );
    assert_eq!(
        sum(&m, "trawl_upstream_calls_total", &[]),
        total(&|j| counts(j, &["upstream_calls"]))
    );
    assert_eq!(
        sum(&m, "trawl_cache_lookups_total", &[("result", "hit")]),
        total(&|j| counts(j, &["cache_hits"]))
    );
    let hits = sum(&m, "trawl_cache_lookups_total", &[("result", "hit")]);
    assert!(hits >= 3.0, "the second job comes from the cache: {hits}");
    assert_eq!(
        sum(&m, "trawl_cache_lookups_total", &[("result", "miss")]),
        total(&|j| counts(j, &["upstream_calls"]))
    );
    assert_eq!(sum(&m, "trawl_retries_total", &[]), 0.0);
    // A latency histogram per tool: its count is the calls made.
    let calls = sum(&m, "trawl_tool_call_duration_seconds_count", &[]);
    assert_eq!(calls, total(&|j| counts(j, &["slices", "total"])));
    assert_eq!(
        sum(
            &m,
            "trawl_tool_call_duration_seconds_bucket",
            &[("le", "+Inf")]
        ),
        calls
    );

    // The scheduler reports the queue's lag and the approvals waiting. Both
    // gauges are set by its reconcile pass (every 200 ms, TRAWL_RECONCILE_EVERY),
    // so a reading follows the queue and the store on the next pass, not at
    // once: the jobs above are over, so the lag falls to 0; a job over its
    // approval threshold then makes one approval wait.
    let gauges_reach = |want: &'static [(&'static str, f64)]| {
        let url = format!("{scheduler_ops}/metrics");
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                let (_, _, text) = get(url.clone()).await;
                let m = parse_metrics(&text).await.unwrap_or_else(|e| {
                    panic!("scheduler /metrics is not Prometheus text: {e}\n{text}")
                });
                if want.iter().all(|(name, v)| sum(&m, name, &[]) == *v) {
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the scheduler's gauges never read {want:?}:\n{text}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    gauges_reach(&[("trawl_queue_lag", 0.0), ("trawl_approvals_pending", 0.0)]).await;
    let id = client
        .submit_yaml(&format!(
            "{}budget: {{approve_above_usd: 0.000001}}\n",
            small_job("costly")
        ))
        .await;
    client
        .wait_job(
            &id,
            Duration::from_secs(30),
            |j| j["status"] == "awaiting_approval",
            || logs(&[&api, &scheduler, &worker]),
        )
        .await;
    gauges_reach(&[("trawl_approvals_pending", 1.0)]).await;
    // The API's own, on its ops listener.
    let (status, _, text) = get(format!("{api_ops}/metrics")).await;
    assert_eq!(status, 200);
    parse_metrics(&text)
        .await
        .unwrap_or_else(|e| panic!("api /metrics is not Prometheus text: {e}\n{text}"));
}

#[tokio::test]
async fn the_parser_refuses_what_is_not_prometheus_text() {
    // The check above is only as good as the parser: it must fail on garbage.
    assert!(parse_metrics("trawl_x{le=\"1\" 3\n").await.is_err());
    assert!(parse_metrics("# TYPE a counter\na_total 1\n").await.is_ok());
}
