//! Browse sessions that must not overspend or hand a secret back, end to end on
//! the embedded pipeline, in Debian's Chromium (headless, started by trawl),
//! against pages this test serves on loopback.
//!
//! - A page that never finishes its response, under a small budget and under a
//!   small byte limit: the session is stopped at the limit, the slice fails with
//!   its code, and what the trace and the ledger say is what the session's egress
//!   proxy relayed. The proxy's count is read from [`Browsers::recent_traffic`]
//!   (what the worker kept of each session's proxy count); the server's own
//!   count of the body bytes it wrote is compared too, within the kernel's
//!   socket buffers (the server writes ahead of what the proxy reads) and the
//!   response's headers and chunk framing (which the proxy counts and the body
//!   count does not).
//! - A page that echoes a typed secret into its text and its URL: no item,
//!   rejection, artifact, trace step or audit row carries it, and no byte of the
//!   store's files (SQLite and its WAL), of the artifacts or of the output holds
//!   it raw, URL-encoded or HTML-escaped.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use trawl::embedded::{Embedded, Options, Upstream};
use trawl_core::cost::PriceTable;
use trawl_core::egress::EgressPolicy;
use trawl_core::model::{JobId, JobStatus};
use trawl_core::ports::{ArtifactStore, SliceStore, ToolStore};
use trawl_sim::SimConfig;
use trawl_worker::WorkerConfig;
use trawl_worker::browse::{BROWSE_BUDGET_EXCEEDED, BROWSE_BYTES_EXCEEDED, Browsers};

// ---------------------------------------------------------------------------
// The pages

/// What the pages counted.
#[derive(Default)]
struct Counts {
    /// Body bytes `/endless` wrote, over all its responses.
    endless_body: AtomicU64,
}

/// A page whose response never ends: a heading, then paragraphs forever
/// (chunked).
async fn endless(counts: Arc<Counts>) -> impl IntoResponse {
    let head = bytes_of("<!doctype html><title>Endless</title><h1>Endless</h1>");
    let para = bytes_of(&format!("<p>{}</p>\n", "x".repeat(8 * 1024)));
    let stream = futures_util::stream::unfold(Some(head), move |first| {
        let (counts, para) = (counts.clone(), para.clone());
        async move {
            let chunk = first.unwrap_or(para);
            counts
                .endless_body
                .fetch_add(chunk.len() as u64, Ordering::SeqCst);
            Some((Ok::<_, std::io::Error>(chunk), None))
        }
    });
    (
        [("content-type", "text/html; charset=utf-8")],
        Body::from_stream(stream),
    )
}

fn bytes_of(s: &str) -> axum::body::Bytes {
    axum::body::Bytes::from(s.to_owned())
}

/// Serves the pages on a loopback port.
async fn serve() -> (SocketAddr, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    let c = counts.clone();
    let app = Router::new()
        .route("/endless", get(move || endless(c.clone())))
        .route("/echo", get(echo_page));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, counts)
}

/// A "confirm your input" page: what is typed into `#code` is copied into the
/// page's text (`#echo`, and escaped into `#echo-html` as markup) and into the
/// URL's query.
async fn echo_page() -> Html<&'static str> {
    Html(
        r#"<!doctype html><title>Confirm</title>
<h1>Confirm your code</h1>
<label>Code <input id="code" name="code"></label>
<p id="echo"></p>
<div id="echo-html"></div>
<script>
document.getElementById('code').addEventListener('input', (e) => {
  const v = e.target.value;
  document.getElementById('echo').textContent = 'You typed: ' + v;
  document.getElementById('echo-html').innerHTML = '<span title="' + v.replace(/&/g,'&amp;').replace(/"/g,'&quot;') + '">' + v.replace(/&/g,'&amp;').replace(/</g,'&lt;') + '</span>';
  history.replaceState(null, '', '/echo?typed=' + encodeURIComponent(v));
});
</script>"#,
    )
}

// ---------------------------------------------------------------------------
// The system

async fn system(state: &Path, browsers: Arc<Browsers>) -> Embedded {
    let opts = Options::new(state, Upstream::Simulator(SimConfig::default()))
        .with_worker(
            WorkerConfig::default()
                .with_concurrency(2)
                .with_retry_delays(Duration::from_millis(1), Duration::from_millis(20)),
        )
        .with_browsers(browsers);
    Embedded::start(opts).await.unwrap()
}

fn loopback_browsers() -> Browsers {
    Browsers::local().with_egress(EgressPolicy::parse("loopback").unwrap())
}

fn endless_job(addr: SocketAddr, budget: &str) -> String {
    format!(
        r##"name: endless
browse:
  urls: ["http://{addr}/endless"]
  geos: [us]
  steps:
    - extract: {{fields: {{title: {{css: h1}}}}}}
retries: {{max_attempts: 3}}
{budget}
"##
    )
}

/// What one stopped session left: its slice's error, its traffic step and
/// the proxy's count. Checks what every stopped session must: the slice failed
/// permanently with `code` after one session, the trace's traffic step is the
/// proxy's count and its cost is the job's whole ledger.
async fn stopped_session(
    sys: &Embedded,
    browsers: &Browsers,
    yaml: &str,
    dir: &Path,
    code: &str,
) -> (
    trawl_core::model::SliceError,
    trawl_worker::browse::SessionTraffic,
    i64,
) {
    let summary = trawl_tests::run_embedded(sys, yaml, &dir.join("out")).await;
    assert_eq!(summary.status, JobStatus::Failed, "{summary:?}");
    let job = JobId::parse(&summary.job_id).unwrap();
    let store = sys.store();
    let failed = store.failed_slices(&job, 10).await.unwrap();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let e = failed[0].error.clone();
    assert_eq!(e.code, code, "{e:?}");
    let trace = store.trace_page(&job, None, 1000).await.unwrap();
    let opens = trace.iter().filter(|s| s.tool == "browser:open").count();
    assert_eq!(opens, 1, "stopped for good, not tried again: {trace:?}");
    let traffic: Vec<_> = trace
        .iter()
        .filter(|s| s.tool == "browser:traffic")
        .collect();
    assert_eq!(traffic.len(), 1, "{trace:?}");
    let step = traffic[0];
    assert_eq!(step.status, code);
    // The proxy's count of this session.
    let counted: Vec<_> = browsers
        .recent_traffic()
        .into_iter()
        .filter(|t| t.slice_id == failed[0].slice_id)
        .collect();
    assert_eq!(counted.len(), 1, "{counted:?}");
    let relayed = counted[0].clone();
    let bytes = relayed.sent + relayed.received;
    assert!(relayed.sent > 0, "requests are counted: {relayed:?}");
    // The trace's step is those bytes (its digest is of the count), billed at
    // the price table's rate, and that is what the ledger holds.
    assert_eq!(
        step.args_digest,
        trawl_core::digest(&[&bytes.to_string()]),
        "the traffic step is of {bytes} bytes"
    );
    assert_eq!(step.cost, PriceTable::default().browser_bytes(bytes));
    assert_eq!(step.cost, relayed.cost);
    assert!(step.cost.0 > 0);
    assert_eq!(
        summary.cost_micros, step.cost.0,
        "the ledger is the traffic"
    );
    // The error names the bytes seen.
    assert!(
        e.message.contains(&format!("{bytes} bytes seen")),
        "{}",
        e.message
    );
    (e, relayed, summary.cost_micros)
}

// ---------------------------------------------------------------------------
// Tests

/// A page streaming forever under `max_usd: 0.05`: the session takes the
/// budget's worth of traffic and is stopped there, billed for every byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_never_ending_page_stops_at_the_budget_with_every_byte_billed() {
    let (addr, counts) = serve().await;
    let dir = tempfile::tempdir().unwrap();
    let browsers = Arc::new(loopback_browsers());
    let sys = system(&dir.path().join("state"), browsers.clone()).await;
    let yaml = endless_job(addr, "budget: {max_usd: 0.05}");
    let (e, relayed, billed) =
        stopped_session(&sys, &browsers, &yaml, dir.path(), BROWSE_BUDGET_EXCEEDED).await;
    assert!(
        e.message.contains("$0.05"),
        "names the budget: {}",
        e.message
    );
    let bytes = relayed.sent + relayed.received;
    // The budget held, and was spent: $0.05 at $8.40/GB is 5,952,380 bytes;
    // grants stop when less than 64 KiB's worth is left.
    assert!(billed <= 50_000, "billed {billed} micro-dollars");
    assert!(bytes > 5_800_000 && bytes <= 5_952_380, "{bytes} bytes");
    // The server wrote at least what the proxy received, less the headers and
    // chunk framing the proxy counts and the body count does not; it wrote
    // ahead by at most what the sockets between them buffer.
    let written = counts.endless_body.load(Ordering::SeqCst);
    eprintln!(
        "budget: proxy relayed {bytes} bytes ({} sent, {} received), billed {billed} µ$; server wrote {written} body bytes",
        relayed.sent, relayed.received
    );
    assert!(written * 101 / 100 + 4096 >= relayed.received, "{written}");
    assert!(written <= relayed.received + 16 * 1024 * 1024, "{written}");
    sys.shutdown().await;
}

/// The same page with a 1 MB session limit and no budget: stopped at exactly
/// the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_never_ending_page_stops_at_the_sessions_byte_limit() {
    let (addr, counts) = serve().await;
    let dir = tempfile::tempdir().unwrap();
    let browsers = Arc::new(loopback_browsers().with_max_bytes(1_000_000));
    let sys = system(&dir.path().join("state"), browsers.clone()).await;
    let yaml = endless_job(addr, "");
    let (e, relayed, billed) =
        stopped_session(&sys, &browsers, &yaml, dir.path(), BROWSE_BYTES_EXCEEDED).await;
    let bytes = relayed.sent + relayed.received;
    assert_eq!(bytes, 1_000_000, "the proxy moves no byte past the limit");
    assert!(
        e.message.contains("byte limit of 1000000 bytes"),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("TRAWL_BROWSER_MAX_BYTES"),
        "{}",
        e.message
    );
    let written = counts.endless_body.load(Ordering::SeqCst);
    eprintln!(
        "limit: proxy relayed {bytes} bytes ({} sent, {} received), billed {billed} µ$; server wrote {written} body bytes",
        relayed.sent, relayed.received
    );
    assert!(written * 101 / 100 + 4096 >= relayed.received, "{written}");
    sys.shutdown().await;
}

/// The secret the echo page is typed: a space, `&`, `<`, `>` and `'` make its
/// raw, URL-encoded and HTML-escaped forms differ (and JSON escapes none of
/// them, so the raw form is what a stored JSON string would hold).
const CODE: &str = "Pa55 w&rd<x>'y";

/// Every form of [`CODE`] a scan of stored bytes looks for.
fn code_forms() -> Vec<String> {
    let form: String = url::form_urlencoded::byte_serialize(CODE.as_bytes()).collect();
    vec![
        CODE.to_owned(),
        form.clone(),
        form.replace('+', "%20"),
        // encodeURIComponent, what the page puts in its URL.
        "Pa55%20w%26rd%3Cx%3E'y".to_owned(),
        "Pa55 w&amp;rd&lt;x&gt;&#39;y".to_owned(),
        "Pa55 w&amp;rd&lt;x&gt;'y".to_owned(),
        "Pa55 w&amp;rd<x>'y".to_owned(),
    ]
}

/// Every file under `dir`, with its bytes.
fn files(dir: &Path, out: &mut Vec<(std::path::PathBuf, Vec<u8>)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if let Ok(b) = std::fs::read(&p) {
            out.push((p, b));
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Scans every byte under `dir`: the files that hold any of `needles`, and
/// how many files and bytes were read.
fn scan(dir: &Path, needles: &[String]) -> (Vec<String>, usize, usize) {
    let mut all = Vec::new();
    files(dir, &mut all);
    let bytes = all.iter().map(|(_, b)| b.len()).sum();
    let hits = all
        .iter()
        .flat_map(|(p, b)| {
            needles
                .iter()
                .filter(|n| contains(b, n.as_bytes()))
                .map(move |n| format!("{} holds {n:?}", p.display()))
        })
        .collect();
    (hits, all.len(), bytes)
}

/// A page that copies the typed secret into its text, its markup and its URL:
/// the item that would carry it is rejected naming the fields, and no stored
/// byte (store files with their WAL, artifacts, output, trace, audit) holds it
/// in any form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_that_echoes_a_typed_secret_hands_none_of_it_back() {
    let (addr, _) = serve().await;
    let dir = tempfile::tempdir().unwrap();
    let browsers = Arc::new(loopback_browsers().with_secret("portal_code", CODE));
    let sys = system(&dir.path().join("state"), browsers.clone()).await;
    let store = sys.store();
    // 1. Typed, echoed, extracted (as text, as an attribute, as raw markup) and
    //    screenshotted.
    let yaml = format!(
        r##"name: echo
browse:
  urls: ["http://{addr}/echo"]
  geos: [us]
  steps:
    - fill: {{selector: "#code", secret: portal_code}}
    - wait_for: {{text: "You typed"}}
    - extract:
        fields:
          title: {{css: h1}}
          echo: {{css: "#echo"}}
          attribute: {{css: "#echo-html span", attr: title}}
          markup: {{regex: "echo-html\">(.*?)</div>"}}
    - screenshot: confirm
"##
    );
    let summary = trawl_tests::run_embedded(&sys, &yaml, &dir.path().join("out1")).await;
    let job = JobId::parse(&summary.job_id).unwrap();
    assert_eq!(summary.items.valid, 0, "{summary:?}");
    assert_eq!(summary.items.rejected, 1, "{summary:?}");
    assert!(store.items(&job).await.unwrap().is_empty());
    let rejections = store.rejections(&job).await.unwrap();
    assert_eq!(rejections.len(), 1);
    let r = &rejections[0];
    let mut paths: Vec<&str> = r.errors.iter().map(|v| v.path.as_str()).collect();
    paths.sort_unstable();
    assert_eq!(paths, vec!["", "/attribute", "/echo", "/markup"], "{r:?}");
    for v in &r.errors {
        assert!(v.message.starts_with("secret_in_item"), "{v:?}");
        assert!(v.message.contains("portal_code"), "{v:?}");
    }
    assert_eq!(r.data["title"], "Confirm your code", "the rest is kept");
    assert_eq!(r.data["echo"], "You typed: [secret]");
    assert!(r.url.contains("/echo?typed=[secret]"), "{}", r.url);
    let artifacts = store.artifacts(&job).await.unwrap();
    assert_eq!(artifacts.len(), 1, "the screenshot was taken (masked)");
    // 2. A step that fails on the echoing page: its error names the page's URL,
    //    and a screenshot of the failure is kept.
    let yaml = format!(
        r##"name: echo-fails
browse:
  urls: ["http://{addr}/echo"]
  geos: [us]
  steps:
    - fill: {{selector: "#code", secret: portal_code}}
    - wait_for: {{text: "You typed"}}
    - wait_for: {{selector: "#never-there", timeout: 1s}}
retries: {{max_attempts: 1}}
"##
    );
    let summary = trawl_tests::run_embedded(&sys, &yaml, &dir.path().join("out2")).await;
    assert_eq!(summary.status, JobStatus::Failed, "{summary:?}");
    let job2 = JobId::parse(&summary.job_id).unwrap();
    let failed = store.failed_slices(&job2, 10).await.unwrap();
    assert_eq!(failed.len(), 1);
    let e = &failed[0].error;
    assert!(
        e.message.contains("/echo?typed=[secret]"),
        "the URL is named, the secret masked: {}",
        e.message
    );
    assert_eq!(store.artifacts(&job2).await.unwrap().len(), 1);
    // What the store answers: trace and audit of both jobs.
    let forms = code_forms();
    let mut answered = String::new();
    for j in [&job, &job2] {
        answered.push_str(&format!(
            "{:?}",
            store.trace_page(j, None, 10_000).await.unwrap()
        ));
        answered.push_str(&format!("{:?}", store.rejections(j).await.unwrap()));
        answered.push_str(&format!("{:?}", store.failed_slices(j, 10).await.unwrap()));
    }
    answered.push_str(&format!(
        "{:?}",
        store.audit_page(None, 10_000).await.unwrap()
    ));
    for f in &forms {
        assert!(!answered.contains(f.as_str()), "the store answers {f:?}");
    }
    // Every stored byte, while the store runs (its WAL) and after it stopped.
    let (hits, n, bytes) = scan(dir.path(), &forms);
    assert!(hits.is_empty(), "{hits:#?}");
    // The scan does find what was stored (the page's title, in the rejection).
    let (control, _, _) = scan(dir.path(), &["Confirm your code".to_owned()]);
    assert!(!control.is_empty(), "the scan reads the stored data");
    eprintln!("secret scan (store running): {n} files, {bytes} bytes, no form of the secret");
    sys.shutdown().await;
    let (hits, n, bytes) = scan(dir.path(), &forms);
    assert!(hits.is_empty(), "{hits:#?}");
    eprintln!("secret scan (store stopped): {n} files, {bytes} bytes, no form of the secret");
}
