//! Browser egress end to end: browse jobs in Debian's Chromium (headless, started
//! by trawl) whose every request goes through the session's egress proxy. Names
//! are resolved by a test resolver and, where a public address is involved,
//! connected by a recording dialer that reaches a loopback fixture instead, so
//! nothing here leaves loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpStream;
use trawl::embedded::{Embedded, Options, Upstream};
use trawl::output::Summary;
use trawl_browser::egress::{Dial, Resolve};
use trawl_core::egress::EgressPolicy;
use trawl_core::model::{JobId, JobStatus, SliceError};
use trawl_core::ports::{ArtifactStore, SliceStore, ToolStore};
use trawl_sim::SimConfig;
use trawl_tests::site::{SECRET, serve_site};
use trawl_worker::WorkerConfig;
use trawl_worker::browse::Browsers;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Names to addresses. A name with two addresses answers the first on its first
/// lookup and the second on every later one (a rebinding name).
#[derive(Default)]
struct Names {
    names: HashMap<String, Vec<IpAddr>>,
    lookups: AtomicUsize,
}

impl Names {
    fn with(mut self, name: &str, ips: &[&str]) -> Self {
        self.names.insert(
            name.to_owned(),
            ips.iter().map(|i| i.parse().unwrap()).collect(),
        );
        self
    }
}

impl Resolve for Names {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        let ips = self.names.get(host).cloned().unwrap_or_default();
        let n = if ips.is_empty() {
            0
        } else {
            self.lookups.fetch_add(1, Ordering::SeqCst)
        };
        Box::pin(async move {
            match ips.len() {
                0 => Err(io::Error::other(format!("{host}: no such name (test)"))),
                _ => Ok(vec![SocketAddr::new(ips[n.min(ips.len() - 1)], port)]),
            }
        })
    }
}

/// Records every address the proxy dials and connects to a loopback fixture.
struct Recording {
    fixture: SocketAddr,
    asked: Mutex<Vec<SocketAddr>>,
}

impl Dial for Recording {
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        self.asked.lock().unwrap().push(addr);
        Box::pin(TcpStream::connect(self.fixture))
    }
}

async fn system(state: &Path, browsers: Browsers) -> Embedded {
    let opts = Options::new(state, Upstream::Simulator(SimConfig::default()))
        .with_worker(
            WorkerConfig::default()
                .with_concurrency(2)
                .with_retry_delays(Duration::from_millis(1), Duration::from_millis(20)),
        )
        .with_browsers(Arc::new(browsers));
    Embedded::start(opts).await.unwrap()
}

/// A job at `url` that would copy the page's heading into an item, tried up to
/// three times.
fn job(url: &str) -> String {
    format!(
        r##"name: egress
browse:
  urls: ["{url}"]
  geos: [us]
  steps:
    - extract: {{fields: {{title: {{css: h1}}}}}}
    - screenshot: page
retries: {{max_attempts: 3}}
"##
    )
}

/// Runs `yaml`; the job must fail with one slice refused for egress, tried once,
/// audited, and nothing of the page kept. Returns the slice's error.
async fn refused(sys: &Embedded, yaml: &str, dir: &Path) -> SliceError {
    let summary: Summary = trawl_tests::run_embedded(sys, yaml, &dir.join("out")).await;
    assert_eq!(summary.status, JobStatus::Failed, "{summary:?}");
    let job = JobId::parse(&summary.job_id).unwrap();
    let store = sys.store();
    let failed = store.failed_slices(&job, 10).await.unwrap();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let e = failed[0].error.clone();
    assert_eq!(e.code, "egress_refused", "{e:?}");
    // Permanent: at most one session (none when the URL as written is
    // refused), no retry.
    let trace = store.trace_page(&job, None, 1000).await.unwrap();
    let opens = trace.iter().filter(|s| s.tool == "browser:open").count();
    assert!(opens <= 1, "{trace:?}");
    // Audited as the layer audits its refusals.
    let audit = store.audit_page(None, 10_000).await.unwrap();
    let rows: Vec<_> = audit
        .iter()
        .map(|(_, a)| a)
        .filter(|a| a.job_id.as_ref() == Some(&job) && a.decision == "egress_refused")
        .collect();
    assert_eq!(rows.len(), 1, "{audit:?}");
    assert_eq!(rows[0].tool, "brightdata.browser");
    assert!(
        rows[0]
            .error
            .as_deref()
            .unwrap_or("")
            .contains("egress_refused")
    );
    // Nothing of the page: no item, no rejection, no artifact.
    assert!(store.items(&job).await.unwrap().is_empty());
    assert!(store.rejections(&job).await.unwrap().is_empty());
    assert!(store.artifacts(&job).await.unwrap().is_empty());
    for f in ["items.jsonl", "rejections.jsonl", "summary.json"] {
        let text = std::fs::read_to_string(dir.join("out").join(f)).unwrap_or_default();
        assert!(!text.contains(SECRET), "{f}: {text}");
    }
    e
}

/// With the default (closed) policy a job at the loopback site is refused,
/// whatever form its address is written in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_closed_policy_refuses_every_form_of_an_internal_address() {
    let (addr, _) = serve_site().await;
    let port = addr.port();
    let dir = tempfile::tempdir().unwrap();
    let sys = system(&dir.path().join("state"), Browsers::local()).await;
    for (i, (url, reason)) in [
        (format!("http://127.0.0.1:{port}/secret"), "loopback"),
        (format!("http://0x7f000001:{port}/secret"), "loopback"),
        (format!("http://2130706433:{port}/secret"), "loopback"),
        (format!("http://127.1:{port}/secret"), "loopback"),
        (format!("http://[::1]:{port}/secret"), "loopback"),
        (
            "http://169.254.169.254/latest/meta-data/".to_owned(),
            "metadata",
        ),
        ("http://10.0.0.1/".to_owned(), "private"),
        ("http://metadata.google.internal/".to_owned(), "metadata"),
    ]
    .into_iter()
    .enumerate()
    {
        let sub = dir.path().join(format!("run{i}"));
        let e = refused(&sys, &job(&url), &sub).await;
        assert!(e.message.contains("refused by the egress policy"), "{e:?}");
        assert!(e.message.contains(reason), "{url}: {e:?}");
    }
    sys.shutdown().await;
}

/// Local browsers that may reach only `shop.test`, a name the test resolver
/// maps to the loopback site.
fn shop_test_browsers() -> Browsers {
    let names = Arc::new(Names::default().with("shop.test", &["127.0.0.1"]));
    Browsers::local()
        .with_egress(EgressPolicy::parse("shop.test").unwrap())
        .with_egress_resolver(names)
}

/// A page on an allowed host (by name) that redirects to the loopback site's
/// internal page: the redirect is refused by the proxy and fails the slice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_to_a_refused_destination_fails_the_slice() {
    let (addr, _) = serve_site().await;
    let port = addr.port();
    let dir = tempfile::tempdir().unwrap();
    let browsers = shop_test_browsers();
    let sys = system(&dir.path().join("state"), browsers).await;
    let target = format!("http://127.0.0.1:{port}/secret");
    let url = format!("http://shop.test:{port}/redirect?to={target}");
    let e = refused(&sys, &job(&url), dir.path()).await;
    assert!(e.message.contains(&target), "{e:?}");
    assert!(e.message.contains("loopback"), "{e:?}");
    sys.shutdown().await;
}

/// A name the resolver maps to loopback is refused at connection time, though
/// its URL names no address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_to_loopback_is_refused() {
    let (addr, _) = serve_site().await;
    let port = addr.port();
    let dir = tempfile::tempdir().unwrap();
    let names = Arc::new(Names::default().with("inside.test", &["127.0.0.1"]));
    let sys = system(
        &dir.path().join("state"),
        Browsers::local().with_egress_resolver(names),
    )
    .await;
    let url = format!("http://inside.test:{port}/secret");
    let e = refused(&sys, &job(&url), dir.path()).await;
    assert!(e.message.contains("inside.test"), "{e:?}");
    assert!(e.message.contains("127.0.0.1"), "{e:?}");
    sys.shutdown().await;
}

/// An https start URL whose name resolves to loopback: the tunnel (`CONNECT`) is
/// refused, and the slice fails for egress, not as a page error to retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_tunnel_fails_the_slice() {
    let dir = tempfile::tempdir().unwrap();
    let names = Arc::new(Names::default().with("vault.test", &["127.0.0.1"]));
    let sys = system(
        &dir.path().join("state"),
        Browsers::local().with_egress_resolver(names),
    )
    .await;
    let e = refused(&sys, &job("https://vault.test/"), dir.path()).await;
    assert!(e.message.contains("vault.test:443"), "{e:?}");
    assert!(e.message.contains("loopback"), "{e:?}");
    sys.shutdown().await;
}

/// A model step that follows a planted link to an internal page: the navigation
/// is refused and fails the slice; the model is never shown the internal page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_step_led_to_an_internal_page_fails_the_slice() {
    let (addr, _) = serve_site().await;
    let port = addr.port();
    let server = trawl_model::testing::ScriptedModel::start(|_, body| {
        let text = body["messages"][0]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        let id = format!("tu_{}", body["messages"].as_array().map_or(0, Vec::len));
        let r = trawl_tests::site::find_ref(text, &["Open the admin console"]).expect(text);
        trawl_model::testing::Reply::anthropic_tool_use(
            &id,
            "act",
            serde_json::json!({"ref": r, "action": "click"}),
            trawl_tests::site::SHOP_USAGE,
        )
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let browsers = shop_test_browsers();
    let opts = Options::new(
        dir.path().join("state"),
        Upstream::Simulator(SimConfig::default()),
    )
    .with_models(Some(Arc::new(trawl_tests::scripted_anthropic(&server))))
    .with_browsers(Arc::new(browsers));
    let sys = Embedded::start(opts).await.unwrap();
    let target = format!("http://127.0.0.1:{port}/secret");
    let yaml = format!(
        r##"name: planted
browse:
  urls: ["http://shop.test:{port}/planted?to={target}"]
  geos: [us]
  steps:
    - act: "find the deal's price"
    # Waits for the next page (here the proxy's refusal), so the check after
    # the step sees the navigation whatever the timing.
    - wait_for: {{text: "refused"}}
    - extract: {{fields: {{title: {{css: h1}}}}}}
    - screenshot: after
retries: {{max_attempts: 3}}
"##
    );
    let e = refused(&sys, &yaml, dir.path()).await;
    assert!(e.message.contains(&target), "{e:?}");
    for req in server.requests() {
        assert!(
            !req.body.to_string().contains(SECRET),
            "the model saw the internal page"
        );
    }
    sys.shutdown().await;
}

/// An image and a `fetch()` to refused destinations are trace steps; the page
/// itself, on an allowed host, is browsed and its item kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_subresources_are_traced_and_the_slice_goes_on() {
    let (addr, _) = serve_site().await;
    let port = addr.port();
    let dir = tempfile::tempdir().unwrap();
    let browsers = shop_test_browsers();
    let sys = system(&dir.path().join("state"), browsers).await;
    let to = format!("http://127.0.0.1:{port}/secret?");
    let yaml = format!(
        r##"name: gallery
browse:
  urls: ["http://shop.test:{port}/gallery?to={to}"]
  geos: [us]
  steps:
    - wait_for: {{text: "done:"}}
    - extract: {{fields: {{title: {{css: "#title"}}, fetched: {{css: "#fetched"}}}}}}
"##
    );
    let summary = trawl_tests::run_embedded(&sys, &yaml, &dir.path().join("out")).await;
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    let job = JobId::parse(&summary.job_id).unwrap();
    let items = sys.store().items(&job).await.unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].data["title"], "Gallery");
    assert!(!items[0].data.to_string().contains(SECRET), "{items:?}");
    let trace = sys.store().trace_page(&job, None, 1000).await.unwrap();
    let refused: Vec<String> = trace
        .iter()
        .filter(|s| s.tool == "browser:egress_refused")
        .map(|s| s.error.clone().unwrap_or_default())
        .collect();
    // The image and the fetch, each refused and recorded with its URL.
    assert!(
        refused.iter().any(|e| e.contains(&format!("{to}fetched"))),
        "{refused:?}"
    );
    assert!(
        refused
            .iter()
            .any(|e| e.contains(&format!("http://127.0.0.1:{port}/secret?"))
                && !e.contains("fetched")),
        "{refused:?}"
    );
    sys.shutdown().await;
}

/// A name that answers a public address first and loopback next: the proxy
/// connects to the public address it checked, never to loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebinding_name_is_connected_at_the_address_that_was_checked() {
    let (site, _) = serve_site().await;
    let dir = tempfile::tempdir().unwrap();
    let names = Arc::new(Names::default().with("rebind.test", &["93.184.215.14", "127.0.0.1"]));
    let dialer = Arc::new(Recording {
        fixture: site,
        asked: Mutex::new(Vec::new()),
    });
    let sys = system(
        &dir.path().join("state"),
        Browsers::local()
            .with_egress_resolver(names.clone())
            .with_egress_dialer(dialer.clone()),
    )
    .await;
    let summary = trawl_tests::run_embedded(
        &sys,
        &job("http://rebind.test/shop"),
        &dir.path().join("out"),
    )
    .await;
    let asked = dialer.asked.lock().unwrap().clone();
    assert!(!asked.is_empty());
    let public: SocketAddr = "93.184.215.14:80".parse().unwrap();
    assert!(asked.iter().all(|a| *a == public), "{asked:?}");
    assert!(names.lookups.load(Ordering::SeqCst) >= 1);
    // The page came through the checked address.
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    let job = JobId::parse(&summary.job_id).unwrap();
    let items = sys.store().items(&job).await.unwrap();
    assert_eq!(items[0].data["title"], "Laptop X");
    sys.shutdown().await;
}

/// A destination `TRAWL_BROWSE_ALLOW` names is browsed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_destination_is_browsed() {
    let (addr, _) = serve_site().await;
    let dir = tempfile::tempdir().unwrap();
    let allow = format!("{}/32", addr.ip());
    let browsers = Browsers::from_lookup(
        |k| (k == "TRAWL_BROWSE_ALLOW").then(|| allow.clone()),
        std::iter::empty(),
        Default::default(),
    )
    .unwrap();
    let sys = system(&dir.path().join("state"), browsers).await;
    let summary = trawl_tests::run_embedded(
        &sys,
        &job(&format!("http://{addr}/secret")),
        &dir.path().join("out"),
    )
    .await;
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    let job = JobId::parse(&summary.job_id).unwrap();
    let items = sys.store().items(&job).await.unwrap();
    assert_eq!(items[0].data["title"], SECRET);
    sys.shutdown().await;
}

/// The API refuses browse URLs written as internal addresses or metadata names
/// with 422, naming the field; a public one is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_refuses_internal_browse_urls_at_submission() {
    let api = trawl_api::testing::EmbeddedApi::new(trawl_api::Auth::Keys(vec![
        secrecy::SecretString::from("k").into(),
    ]))
    .await
    .unwrap();
    let state = api.state.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(listener, trawl_api::router(state))
            .await
            .unwrap();
    });
    let http = reqwest::Client::new();
    for url in [
        "http://127.0.0.1:8080/",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://[::1]:4222/",
        "http://0x7f000001/",
        "http://2130706433/",
        "http://127.1/",
        "http://metadata.google.internal/",
    ] {
        let spec = serde_json::json!({
            "name": "b",
            "browse": {"urls": ["https://shop.example/", url], "geos": ["us"],
                       "steps": [{"wait_for": {"text": "x"}}]}
        });
        let res = http
            .post(format!("{base}/v1/jobs"))
            .bearer_auth("k")
            .json(&spec)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 422, "{url}");
        let p: serde_json::Value = res.json().await.unwrap();
        assert_eq!(p["errors"][0]["path"], "browse.urls[1]", "{url}: {p}");
        let why = p["errors"][0]["message"].as_str().unwrap();
        assert!(why.contains("browser sessions may not reach"), "{why}");
        assert_eq!(p["errors"].as_array().unwrap().len(), 1, "{p}");
    }
    let ok = serde_json::json!({
        "name": "b",
        "browse": {"urls": ["https://shop.example/"], "geos": ["us"],
                   "steps": [{"wait_for": {"text": "x"}}]}
    });
    let res = http
        .post(format!("{base}/v1/jobs"))
        .bearer_auth("k")
        .json(&ok)
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.status());
}

const BIN: &str = env!("CARGO_BIN_EXE_trawl-e2e");

/// `trawl run` on the operator's machine opens loopback and private
/// destinations by default and says so; `TRAWL_BROWSE_ALLOW` given closes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trawl_run_reaches_a_loopback_site_by_default() {
    let (addr, _) = serve_site().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("job.yaml");
    std::fs::write(&file, job(&format!("http://{addr}/shop"))).unwrap();
    let run = |allow: Option<&str>, out: &str| {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.current_dir(dir.path())
            .args(["run", "job.yaml", "--yes", "--out", out])
            .env("TRAWL_HOME", dir.path().join("home"))
            .env_remove("BRIGHTDATA_API_TOKEN")
            .env_remove("TRAWL_BROWSE_ALLOW")
            .env_remove("TRAWL_BROWSER_WS")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_BASE_URL");
        if let Some(a) = allow {
            cmd.env("TRAWL_BROWSE_ALLOW", a);
        }
        cmd.output()
    };
    let o = run(None, "open").await.unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains("trawl run lets browser sessions reach private and loopback addresses"),
        "{stderr}"
    );
    let items = std::fs::read_to_string(dir.path().join("open/items.jsonl")).unwrap();
    assert!(items.contains("Laptop X"), "{items}");

    let o = run(Some("shop.example"), "closed").await.unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{stderr}");
    assert!(!stderr.contains("lets browser sessions reach"), "{stderr}");
    let items = std::fs::read_to_string(dir.path().join("closed/items.jsonl")).unwrap_or_default();
    assert!(!items.contains("Laptop X"), "{items}");
}
