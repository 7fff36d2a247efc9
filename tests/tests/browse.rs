//! Browse jobs end to end on the embedded pipeline, in Debian's Chromium (headless,
//! started by trawl), against pages this test serves on loopback, with model steps
//! answered by a scripted model server speaking the Anthropic Messages API
//! (<https://docs.claude.com/en/api/messages>), `trawl_model::testing::ScriptedModel`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;
use trawl::embedded::{Embedded, Options, Upstream};
use trawl_browser::pool::PoolConfig;
use trawl_core::egress::EgressPolicy;
use trawl_core::model::JobStatus;
use trawl_core::ports::{ArtifactStore, SliceStore, ToolStore};
use trawl_model::testing::ScriptedModel;
use trawl_sim::SimConfig;
use trawl_tests::scripted_anthropic;
use trawl_tests::site::{PASSWORD, serve_site, shop_job, shop_model};
use trawl_worker::WorkerConfig;
use trawl_worker::browse::Browsers;
use trawl_worker::models::Models;

// ---------------------------------------------------------------------------
// The system

async fn system(state: &Path, models: Option<Models>) -> Embedded {
    // The site is on loopback, which sessions reach only when the operator
    // opens it.
    let browsers = Browsers::local()
        .with_secret("portal_password", PASSWORD)
        .with_egress(EgressPolicy::parse("loopback").unwrap());
    let opts = Options::new(state, Upstream::Simulator(SimConfig::default()))
        .with_worker(
            WorkerConfig::default()
                .with_concurrency(2)
                .with_retry_delays(Duration::from_millis(1), Duration::from_millis(20)),
        )
        .with_models(models.map(Arc::new))
        .with_browsers(Arc::new(browsers));
    Embedded::start(opts).await.unwrap()
}

// ---------------------------------------------------------------------------
// Tests

/// Deterministic steps log in with a secret from the worker's configuration, page
/// through a table rendered by script and extract every row; each row is validated
/// on its own (order 7 has no number and is rejected).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_then_a_paginated_table_yields_every_row() {
    let (addr, _) = serve_site().await;
    let dir = tempfile::tempdir().unwrap();
    let sys = system(&dir.path().join("state"), None).await;
    let yaml = format!(
        r##"name: orders
browse:
  urls: ["http://{addr}/login"]
  geos: [us]
  steps:
    - fill: {{selector: "#user", value: "ops@example.com"}}
    - fill: {{selector: "#password", secret: portal_password}}
    - click: "button[type=submit]"
    - wait_for: {{text: "Orders, page 1"}}
    - extract:
        rows: "#orders tbody tr"
        next: "a.next"
        fields:
          id: {{css: ".id", type: integer}}
          customer: {{css: ".customer"}}
          amount: {{css: ".amount", type: number}}
    - screenshot: last-page
schema:
  type: object
  required: [id, customer, amount]
  properties:
    amount: {{type: number}}
"##
    );
    let out = dir.path().join("out");
    let summary = trawl_tests::run_embedded(&sys, &yaml, &out).await;
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    let job = trawl_core::model::JobId::parse(&summary.job_id).unwrap();
    let items = sys.store().items(&job).await.unwrap();
    let mut ids: Vec<i64> = items
        .iter()
        .map(|i| i.data["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12]);
    let eleven = items.iter().find(|i| i.data["id"] == 11).unwrap();
    assert_eq!(
        eleven.data,
        json!({"id": 11, "customer": "Customer 11", "amount": 110.5})
    );
    assert!(eleven.url.ends_with("/dashboard?page=3"), "{}", eleven.url);
    assert_eq!(summary.items.rejected, 1);
    // The screenshot step left a PNG.
    let artifacts = sys.store().artifacts(&job).await.unwrap();
    assert_eq!(artifacts.len(), 1, "{artifacts:?}");
    let shot = sys
        .store()
        .artifact(&job, &artifacts[0].name)
        .await
        .unwrap()
        .unwrap();
    assert!(shot.data.starts_with(b"\x89PNG"));
    // Every step is a trace step, and the traffic is billed.
    let trace = sys.store().trace_page(&job, None, 1000).await.unwrap();
    let steps: Vec<&str> = trace.iter().map(|s| s.tool.as_str()).collect();
    for want in [
        "browser:open",
        "browser:goto",
        "browser:fill",
        "browser:click",
        "browser:wait_for",
        "browser:extract",
        "browser:screenshot",
        "browser:traffic",
    ] {
        assert!(steps.contains(&want), "{want} missing from {steps:?}");
    }
    let traffic = trace.iter().find(|s| s.tool == "browser:traffic").unwrap();
    assert!(traffic.cost.0 > 0, "traffic billed: {traffic:?}");
    assert_eq!(summary.cost_micros, traffic.cost.0);
    // The secret is nowhere in what was stored.
    let stored = format!("{:?}{:?}", trace, items);
    assert!(!stored.contains(PASSWORD));
    sys.shutdown().await;
}

/// A selector that never appears: the step times out on every attempt, each
/// attempt leaves a screenshot, and the slice fails naming the step, the error
/// and the URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_that_never_appears_fails_the_slice_with_a_screenshot() {
    let (addr, _) = serve_site().await;
    let dir = tempfile::tempdir().unwrap();
    let sys = system(&dir.path().join("state"), None).await;
    let yaml = format!(
        r##"name: never
browse:
  urls: ["http://{addr}/shop"]
  geos: [us]
  steps:
    - wait_for: {{selector: "#never-there", timeout: 1s}}
retries: {{max_attempts: 2}}
"##
    );
    let out = dir.path().join("out");
    let summary = trawl_tests::run_embedded(&sys, &yaml, &out).await;
    assert_eq!(summary.status, JobStatus::Failed, "{summary:?}");
    let job = trawl_core::model::JobId::parse(&summary.job_id).unwrap();
    let failed = sys.store().failed_slices(&job, 10).await.unwrap();
    assert_eq!(failed.len(), 1);
    let e = &failed[0].error;
    assert_eq!(e.code, "step_timeout", "{e:?}");
    assert!(e.message.contains("step 1 (wait_for)"), "{}", e.message);
    assert!(e.message.contains("#never-there"), "{}", e.message);
    assert!(
        e.message.contains(&format!("http://{addr}/shop")),
        "{}",
        e.message
    );
    let artifacts = sys.store().artifacts(&job).await.unwrap();
    let names: Vec<&str> = artifacts.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names.len(), 2, "one screenshot per attempt: {names:?}");
    assert!(
        names.iter().any(|n| n.contains("-a1-step1-wait_for")),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n.contains("-a2-step1-wait_for")),
        "{names:?}"
    );
    assert!(e.message.contains(names[1]) || e.message.contains(names[0]));
    for a in &artifacts {
        let png = sys.store().artifact(&job, &a.name).await.unwrap().unwrap();
        assert!(png.data.starts_with(b"\x89PNG"));
    }
    sys.shutdown().await;
}

/// A model step resolved once is replayed with no model call on the next run of
/// the same job; when the page changes so the remembered selectors break, the
/// model is asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_steps_are_resolved_once_then_replayed_until_the_page_changes() {
    let (addr, site) = serve_site().await;
    let server = ScriptedModel::start(shop_model).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sys = system(&dir.path().join("state"), Some(scripted_anthropic(&server))).await;
    let yaml = shop_job(addr);
    let price = async |n: usize| {
        let out = dir.path().join(format!("out{n}"));
        let summary = trawl_tests::run_embedded(&sys, &yaml, &out).await;
        assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
        let job = trawl_core::model::JobId::parse(&summary.job_id).unwrap();
        let items = sys.store().items(&job).await.unwrap();
        assert_eq!(items.len(), 1, "{items:?}");
        items[0].data.clone()
    };
    assert_eq!(price(1).await, json!({"price": 1299.0}));
    assert_eq!(
        server.requests().len(),
        2,
        "act and extract asked the model once each"
    );
    assert_eq!(price(2).await, json!({"price": 1299.0}));
    assert_eq!(
        server.requests().len(),
        2,
        "the second run replays without the model"
    );
    site.v2.store(true, Ordering::SeqCst);
    assert_eq!(price(3).await, json!({"price": 1299.0}));
    assert_eq!(
        server.requests().len(),
        4,
        "the changed page's steps went back to the model"
    );
    // The model only ever chose references; the snapshot named the option.
    let first = &server.requests()[0].body;
    let shown = first["messages"][0]["content"][0]["text"].as_str().unwrap();
    assert!(shown.contains("\"512 GB\""), "{shown}");
    assert!(
        !shown.contains("<script"),
        "no scripts in a snapshot: {shown}"
    );
    sys.shutdown().await;
}

/// Text on the page that reads as instructions reaches the model replaced by a
/// marker, and the audit flags it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_instructions_reach_the_model_sanitized_and_flagged() {
    let (addr, _) = serve_site().await;
    let server = ScriptedModel::start(shop_model).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sys = system(&dir.path().join("state"), Some(scripted_anthropic(&server))).await;
    let yaml = format!(
        r##"name: deals
browse:
  urls: ["http://{addr}/inject"]
  geos: [us]
  steps:
    - observe: "the page heading"
"##
    );
    let summary = trawl_tests::run_embedded(&sys, &yaml, &dir.path().join("out")).await;
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let shown = reqs[0].body["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(
        !shown
            .to_lowercase()
            .contains("ignore all previous instructions"),
        "{shown}"
    );
    assert!(
        shown.contains("[trawl removed text that reads as instructions"),
        "{shown}"
    );
    assert!(
        shown.contains("$5.00"),
        "the rest of the page is kept: {shown}"
    );
    let job = trawl_core::model::JobId::parse(&summary.job_id).unwrap();
    let audit: Vec<_> = sys
        .store()
        .audit_page(None, 10_000)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, a)| a)
        .filter(|a| a.job_id.as_ref() == Some(&job))
        .collect();
    let flagged: Vec<_> = audit.iter().filter(|a| a.decision == "flagged").collect();
    assert_eq!(flagged.len(), 1, "{audit:?}");
    assert_eq!(flagged[0].tool, "browser.snapshot");
    assert!(
        flagged[0].reason.contains("override-instructions"),
        "{}",
        flagged[0].reason
    );
    // The session itself was admitted by the tool layer, in the isolated pool.
    assert!(
        audit
            .iter()
            .any(|a| a.tool == "brightdata.browser" && a.decision == "allow"),
        "{audit:?}"
    );
    sys.shutdown().await;
}

/// Model steps need a model: without one the job is refused before it is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_step_without_a_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sys = system(&dir.path().join("state"), None).await;
    let spec = trawl_core::spec::JobSpec::parse(&shop_job("127.0.0.1:9".parse().unwrap())).unwrap();
    let e = sys
        .submit(&spec, Some("test"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("model steps"), "{e}");
    assert!(e.contains("ANTHROPIC_API_KEY"), "{e}");
    sys.shutdown().await;
}

// ---------------------------------------------------------------------------
// The deployed shape

const BIN: &str = env!("CARGO_BIN_EXE_trawl-e2e");

/// A browse slice published while only a standard worker runs waits on its own
/// consumer: the standard worker finishes a page job submitted after it and never
/// takes the browse slice; an isolated worker (`trawl worker` with
/// `TRAWL_WORKER_POOL=isolated`) started later runs it. Real Postgres, Redis and a
/// NATS server of the test's own (2.10+, for the pools' filtered consumers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browse_slice_waits_for_an_isolated_worker() {
    use trawl_tests::{Deployment, NatsServer, is_terminal, shared_redis_url};
    let (addr, _) = serve_site().await;
    let nats = NatsServer::start().await;
    // The site is on loopback: the API and the workers are told it may be reached.
    let d = Deployment::on(BIN, SimConfig::default(), nats.url(), shared_redis_url())
        .await
        .with_env("TRAWL_BROWSE_ALLOW", "loopback");
    let mut api = d.spawn("api", "api");
    let scheduler = d.spawn("scheduler", "scheduler");
    let standard = d.spawn("worker", "worker");
    let client = d.client(&api.api_url().await);
    let browse = client
        .submit_yaml(&format!(
            r##"name: heading
browse:
  urls: ["http://{addr}/shop"]
  geos: [us]
  steps:
    - extract: {{fields: {{title: {{css: h1}}}}}}
"##
        ))
        .await;
    let pages = client
        .submit_yaml(&format!(
            "name: pages\npages:\n  urls: [\"https://shop.example/p/one\"]\n  geos: [us]\n{}",
            trawl_tests::EXTRACT
        ))
        .await;
    let why = || format!("{}\n{}\n{}", api.log(), scheduler.log(), standard.log());
    let done = client
        .wait_job(&pages, Duration::from_secs(60), is_terminal, why)
        .await;
    assert_eq!(done["status"], "succeeded", "{done}");
    // The page job, submitted after the browse job, is done: the standard worker
    // has been pulling all along, and has not taken the browse slice.
    let waiting = client.job(&browse).await;
    assert_eq!(waiting["status"], "running", "{waiting}");
    assert_eq!(trawl_tests::slices_done(&waiting), 0, "{waiting}");
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let stream = format!("{}_SLICES", d.nats_prefix.to_ascii_uppercase());
    let mut isolated = js
        .get_consumer_from_stream::<async_nats::jetstream::consumer::pull::Config, _, _>(
            "workers-isolated",
            &stream,
        )
        .await
        .unwrap();
    let info = isolated.info().await.unwrap();
    assert_eq!(info.num_pending, 1, "{info:?}");
    assert_eq!(info.delivered.consumer_sequence, 0, "{info:?}");
    assert!(!standard.log().contains("browse"), "{}", standard.log());

    let mut worker = d.spawn_with(
        "worker",
        "worker-isolated",
        &[("TRAWL_WORKER_POOL", "isolated")],
    );
    let why = || format!("{}\n{}", scheduler.log(), worker.log());
    let done = client
        .wait_job(&browse, Duration::from_secs(60), is_terminal, why)
        .await;
    assert_eq!(done["status"], "succeeded", "{done}\n{}", worker.log());
    let items = client
        .all(&format!("/v1/jobs/{browse}/items"), "items")
        .await;
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0]["data"]["title"], "Laptop X");
    assert!(worker.log().contains("isolated pool"), "{}", worker.log());

    // The worker keeps its browser between slices; killed outright, it takes
    // the browser with it (nothing left running on the host).
    let browsers = children_named(worker.pid(), "chromium");
    assert_eq!(browsers.len(), 1, "the pooled browser: {browsers:?}");
    worker.kill();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while browsers.iter().any(|pid| running(*pid)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the killed worker's browser {browsers:?} is still running"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A process as /proc shows it now.
struct Proc {
    pid: u32,
    parent: u32,
    /// `Z`: exited, waiting to be reaped.
    state: char,
    args: Vec<String>,
}

/// Every process now.
fn processes() -> Vec<Proc> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            // pid (comm) state ppid ...
            let (_, rest) = stat.rsplit_once(") ")?;
            let mut fields = rest.split(' ');
            let state = fields.next()?.chars().next()?;
            let parent = fields.next()?.parse().ok()?;
            let args = cmdline
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            Some(Proc {
                pid,
                parent,
                state,
                args,
            })
        })
        .collect()
}

/// Processes now whose parent is `parent` and whose program's name contains
/// `name`.
fn children_named(parent: u32, name: &str) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|p| p.parent == parent && p.args.first().is_some_and(|a| a.contains(name)))
        .map(|p| p.pid)
        .collect()
}

/// Whether `pid` is still running (not gone, not a zombie).
fn running(pid: u32) -> bool {
    processes().iter().any(|p| p.pid == pid && p.state != 'Z')
}

// ---------------------------------------------------------------------------
// Bright Data's Scraping Browser

/// Plays Bright Data's Scraping Browser as its documentation describes the
/// connection (<https://docs.brightdata.com/scraping-automation/scraping-browser/quickstart>):
/// a DevTools WebSocket whose handshake carries the zone's credentials, the user
/// `brd-customer-<id>-zone-<zone>[-country-<cc>]`, as HTTP basic authorization.
/// A handshake with other credentials is refused with 407; an accepted one is
/// relayed to a headless Chromium of the test's own.
struct ScrapingBrowser {
    addr: std::net::SocketAddr,
    /// The users of accepted handshakes.
    users: Arc<std::sync::Mutex<Vec<String>>>,
    chromium: std::process::Child,
    _profile: tempfile::TempDir,
}

impl Drop for ScrapingBrowser {
    fn drop(&mut self) {
        let _ = self.chromium.kill();
        let _ = self.chromium.wait();
    }
}

impl ScrapingBrowser {
    async fn start(password: &'static str) -> ScrapingBrowser {
        use std::io::BufRead;
        let profile = tempfile::tempdir().unwrap();
        let mut chromium = std::process::Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-port=0",
                &format!("--user-data-dir={}", profile.path().display()),
                "about:blank",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = chromium.stderr.take().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(url) = line.split("DevTools listening on ").nth(1)
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(url.trim().to_owned());
                }
            }
        });
        let devtools = tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .unwrap()
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let users = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = users.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (seen, devtools) = (seen.clone(), devtools.clone());
                tokio::spawn(async move {
                    use async_tungstenite::tungstenite::handshake::server::{
                        ErrorResponse, Request, Response,
                    };
                    use base64::Engine as _;
                    use futures_util::StreamExt;
                    // tungstenite's handshake callback type: its error is a response.
                    #[allow(clippy::result_large_err)]
                    let check = |req: &Request,
                                 resp: Response|
                     -> Result<Response, ErrorResponse> {
                        let creds = req
                            .headers()
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.strip_prefix("Basic "))
                            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                            .and_then(|b| String::from_utf8(b).ok())
                            .unwrap_or_default();
                        match creds.split_once(':') {
                            Some((user, pw))
                                if pw == password && user.starts_with("brd-customer-") =>
                            {
                                seen.lock().unwrap().push(user.to_owned());
                                Ok(resp)
                            }
                            _ => {
                                let mut e = ErrorResponse::new(Some("bad credentials".into()));
                                *e.status_mut() = async_tungstenite::tungstenite::http::StatusCode::PROXY_AUTHENTICATION_REQUIRED;
                                Err(e)
                            }
                        }
                    };
                    let Ok(down) = async_tungstenite::tokio::accept_hdr_async(tcp, check).await
                    else {
                        return;
                    };
                    let (up, _) = async_tungstenite::tokio::connect_async(devtools.as_str())
                        .await
                        .unwrap();
                    let (mut up_tx, mut up_rx) = up.split();
                    let (mut down_tx, mut down_rx) = down.split();
                    let a = async {
                        while let Some(Ok(m)) = down_rx.next().await {
                            if up_tx.send(m).await.is_err() {
                                break;
                            }
                        }
                    };
                    let b = async {
                        while let Some(Ok(m)) = up_rx.next().await {
                            if down_tx.send(m).await.is_err() {
                                break;
                            }
                        }
                    };
                    tokio::select! { () = a => {}, () = b => {} }
                });
            }
        });
        ScrapingBrowser {
            addr,
            users,
            chromium,
            _profile: profile,
        }
    }
}

/// With a Scraping Browser zone configured, a session connects there with the
/// zone's credentials as basic authorization and the slice's country in the user;
/// wrong credentials fail the slice at the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_reach_the_scraping_browser_with_the_zone_and_country() {
    let (addr, _) = serve_site().await;
    let sb = ScrapingBrowser::start("zone-pass").await;
    let endpoint = format!("ws://{}", sb.addr);
    let run = async |password: &str| {
        let env = [
            ("BRIGHTDATA_CUSTOMER_ID", "c_test"),
            ("BRIGHTDATA_BROWSER_ZONE", "sb1"),
            ("BRIGHTDATA_BROWSER_PASSWORD", password),
            ("BRIGHTDATA_BROWSER_ENDPOINT", endpoint.as_str()),
        ];
        let browsers = Browsers::from_lookup(
            |k| {
                env.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            },
            std::iter::empty(),
            trawl_core::cost::PriceTable::default(),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let opts = Options::new(
            dir.path().join("state"),
            Upstream::Simulator(SimConfig::default()),
        )
        .with_worker(
            WorkerConfig::default()
                .with_retry_delays(Duration::from_millis(1), Duration::from_millis(5)),
        )
        .with_browsers(Arc::new(browsers));
        let sys = Embedded::start(opts).await.unwrap();
        let yaml = format!(
            "name: sb\nbrowse:\n  urls: [\"http://{addr}/shop\"]\n  geos: [de]\n  steps:\n    - extract: {{fields: {{title: {{css: h1}}}}}}\nretries: {{max_attempts: 1}}\n"
        );
        let summary = trawl_tests::run_embedded(&sys, &yaml, &dir.path().join("out")).await;
        let job = trawl_core::model::JobId::parse(&summary.job_id).unwrap();
        let items = sys.store().items(&job).await.unwrap();
        sys.shutdown().await;
        (summary, items)
    };
    let (summary, items) = run("zone-pass").await;
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    assert_eq!(items[0].data, json!({"title": "Laptop X"}));
    assert_eq!(
        *sb.users.lock().unwrap(),
        vec!["brd-customer-c_test-zone-sb1-country-de".to_owned()]
    );
    let (summary, _) = run("wrong").await;
    assert_eq!(summary.status, JobStatus::Failed, "{summary:?}");
    let failed = &summary.failed_slices[0];
    assert_eq!(failed.code, "browser_launch", "{failed:?}");
    assert_eq!(sb.users.lock().unwrap().len(), 1);
}

// ---------------------------------------------------------------------------
// The browser pool

/// An embedded system whose worker runs `concurrency` slices at once in a pool
/// configured as `pool`; the pool is shared with the returned `Browsers`, which
/// reads its figures.
async fn pooled(state: &Path, pool: PoolConfig, concurrency: usize) -> (Embedded, Browsers) {
    let browsers = Browsers::pooled(pool).with_egress(EgressPolicy::parse("loopback").unwrap());
    let opts = Options::new(state, Upstream::Simulator(SimConfig::default()))
        .with_worker(
            WorkerConfig::default()
                .with_concurrency(concurrency)
                .with_retry_delays(Duration::from_millis(1), Duration::from_millis(20)),
        )
        .with_browsers(Arc::new(browsers.clone()));
    (Embedded::start(opts).await.unwrap(), browsers)
}

/// A pool of one browser.
fn one_browser() -> PoolConfig {
    PoolConfig {
        max_browsers: 1,
        ..PoolConfig::default()
    }
}

/// Slices that run one after another in the same pooled browser find nothing
/// the one before left: each page load reports the cookie, localStorage value
/// and service worker it finds, then leaves all three. Loading the page again
/// within a slice finds them (the check can see them), the next slice does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_slice_runs_in_a_fresh_context_that_sees_nothing_of_the_one_before() {
    let (addr, _) = serve_site().await;
    let dir = tempfile::tempdir().unwrap();
    let (sys, browsers) = pooled(&dir.path().join("state"), one_browser(), 1).await;
    let yaml = format!(
        r##"name: isolation
browse:
  urls: ["http://{addr}/state?n=1", "http://{addr}/state?n=2", "http://{addr}/state?n=3"]
  geos: [us]
  steps:
    - wait_for: "#status:not(:empty)"
    - extract: {{fields: {{cookie: {{css: "#cookie"}}, storage: {{css: "#storage"}}, workers: {{css: "#workers"}}, visit: {{css: "#status"}}}}}}
    - goto: "http://{addr}/state?again=1"
    - wait_for: "#status:not(:empty)"
    - extract: {{fields: {{cookie: {{css: "#cookie"}}, storage: {{css: "#storage"}}, workers: {{css: "#workers"}}, visit: {{css: "#status"}}}}}}
"##
    );
    let summary = trawl_tests::run_embedded(&sys, &yaml, &dir.path().join("out")).await;
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    let job = trawl_core::model::JobId::parse(&summary.job_id).unwrap();
    let items = sys.store().items(&job).await.unwrap();
    assert_eq!(items.len(), 6, "{items:?}");
    let fresh = json!({"cookie": "no", "storage": "no", "workers": "0", "visit": "done"});
    let seen = json!({"cookie": "yes", "storage": "yes", "workers": "1", "visit": "done"});
    for slice in ["n=1", "n=2", "n=3"] {
        let mut of: Vec<_> = items
            .iter()
            .filter(|i| {
                i.slice_id
                    == items
                        .iter()
                        .find(|j| j.url.contains(slice))
                        .unwrap()
                        .slice_id
            })
            .collect();
        of.sort_by_key(|i| i.seq);
        assert_eq!(of.len(), 2, "{slice}: {of:?}");
        assert_eq!(of[0].data, fresh, "{slice}: the first load found state");
        assert_eq!(of[1].data, seen, "{slice}: the second load found none");
    }
    // One browser ran all three, one after another.
    let stats = browsers.pool_stats().unwrap();
    assert_eq!(stats.launched, 1, "{stats:?}");
    assert_eq!(stats.active, 0, "{stats:?}");
    sys.shutdown().await;
}

/// `slices` slices on the gated page (the first held until its browser is
/// gone), each waiting for `#ready` up to `step_timeout`, two attempts.
fn gated_job(addr: std::net::SocketAddr, slices: usize, step_timeout: &str) -> String {
    let urls: Vec<String> = (1..=slices)
        .map(|n| format!("\"http://{addr}/gated?n={n}\""))
        .collect();
    format!(
        r##"name: gated
browse:
  urls: [{}]
  geos: [us]
  step_timeout: {step_timeout}
  steps:
    - wait_for: "#ready"
    - extract: {{fields: {{gate: {{css: "#ready"}}}}}}
retries: {{max_attempts: 2}}
"##,
        urls.join(", ")
    )
}

/// Once the site holds the first gated request, sends `signal` to the pool's
/// one browser; its pid.
async fn signal_the_browser(
    site: &trawl_tests::site::Site,
    browsers: &Browsers,
    signal: &str,
) -> u32 {
    site.gate_held.notified().await;
    let pids = browsers.pool_stats().unwrap().pids;
    assert_eq!(pids.len(), 1, "{pids:?}");
    let sent = std::process::Command::new("kill")
        .args([signal, &pids[0].to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    pids[0]
}

/// The pooled browser killed (SIGKILL) while a slice waits on its page: that
/// slice's attempt fails at once as the browser's end (not at its step
/// timeout), the slice runs again in a new browser and succeeds, and the
/// slices after it run in the new one undisturbed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_browser_fails_only_its_slice_which_runs_again_in_a_new_one() {
    let (addr, site) = serve_site().await;
    let dir = tempfile::tempdir().unwrap();
    let (sys, browsers) = pooled(&dir.path().join("state"), one_browser(), 1).await;
    let yaml = gated_job(addr, 3, "60s");
    let kill = signal_the_browser(&site, &browsers, "-KILL");
    let started = std::time::Instant::now();
    let out = dir.path().join("out");
    let (summary, killed) = tokio::join!(trawl_tests::run_embedded(&sys, &yaml, &out), kill);
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    let job = trawl_core::model::JobId::parse(&summary.job_id).unwrap();
    let items = sys.store().items(&job).await.unwrap();
    assert_eq!(items.len(), 3, "{items:?}");
    assert!(
        items.iter().all(|i| i.data == json!({"gate": "open"})),
        "{items:?}"
    );
    // The first attempt ended as the browser's end, well before its 60 s step
    // timeout could have.
    let trace = sys.store().trace_page(&job, None, 1000).await.unwrap();
    let failed: Vec<_> = trace.iter().filter(|s| s.error.is_some()).collect();
    assert_eq!(failed.len(), 1, "one failed step: {failed:?}");
    let error = failed[0].error.as_ref().unwrap();
    assert!(error.contains("the browser went away"), "{error:?}");
    assert!(started.elapsed() < Duration::from_secs(60));
    let stats = browsers.pool_stats().unwrap();
    assert_eq!(stats.launched, 2, "{stats:?}");
    assert!(!stats.pids.contains(&killed), "{stats:?}");
    assert_eq!(site.gate_calls.load(Ordering::SeqCst), 4);
    sys.shutdown().await;
}

/// The pooled browser stopped (SIGSTOP: alive, answering nothing) while a slice
/// waits on its page: the step ends at its timeout, the browser that no longer
/// answers is killed and replaced, and the slice runs again in the new one and
/// succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_browser_is_killed_and_its_slice_runs_again_in_a_new_one() {
    let (addr, site) = serve_site().await;
    let dir = tempfile::tempdir().unwrap();
    let (sys, browsers) = pooled(&dir.path().join("state"), one_browser(), 1).await;
    let yaml = gated_job(addr, 2, "3s");
    let stop = signal_the_browser(&site, &browsers, "-STOP");
    let out = dir.path().join("out");
    let (summary, stopped) = tokio::join!(trawl_tests::run_embedded(&sys, &yaml, &out), stop);
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    assert_eq!(summary.items.valid, 2, "{summary:?}");
    let stats = browsers.pool_stats().unwrap();
    assert_eq!(stats.launched, 2, "{stats:?}");
    assert!(!stats.pids.contains(&stopped), "{stats:?}");
    // Killed, not left stopped: the process is gone (or a zombie until reaped).
    assert!(!running(stopped), "the stopped browser is still there");
    sys.shutdown().await;
}

/// A browser that has run its `sessions_per_browser` sessions is replaced: five
/// slices one after another with two sessions per browser start three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_is_replaced_after_its_sessions() {
    let (addr, _) = serve_site().await;
    let dir = tempfile::tempdir().unwrap();
    let pool = PoolConfig {
        max_browsers: 1,
        sessions_per_browser: 2,
        ..PoolConfig::default()
    };
    let (sys, browsers) = pooled(&dir.path().join("state"), pool, 1).await;
    let urls: Vec<String> = (0..5)
        .map(|n| format!("\"http://{addr}/shop?n={n}\""))
        .collect();
    let yaml = format!(
        "name: recycle\nbrowse:\n  urls: [{}]\n  geos: [us]\n  steps:\n    - extract: {{fields: {{title: {{css: h1}}}}}}\n",
        urls.join(", ")
    );
    let summary = trawl_tests::run_embedded(&sys, &yaml, &dir.path().join("out")).await;
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    let stats = browsers.pool_stats().unwrap();
    assert_eq!(stats.launched, 3, "{stats:?}");
    assert_eq!(stats.peak, 1, "{stats:?}");
    sys.shutdown().await;
}

/// Under more slices at once than browsers, the pool starts no more Chromium
/// processes than its bound (counted from the system's process table, not
/// the pool's word), and every slice succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_keeps_to_its_bound_under_load() {
    use std::os::unix::fs::PermissionsExt as _;
    let (addr, _) = serve_site().await;
    let dir = tempfile::tempdir().unwrap();
    // Chromium started through a script that marks its command line, so this
    // test's browsers are told from other tests' in the same process.
    let marker = format!("--trawl-test-pool={}", std::process::id());
    let exe = dir.path().join("chromium-marked");
    let chromium = trawl_browser::find_chromium().unwrap();
    std::fs::write(
        &exe,
        format!("#!/bin/sh\nexec {} {marker} \"$@\"\n", chromium.display()),
    )
    .unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let two = PoolConfig {
        executable: Some(exe),
        max_browsers: 2,
        ..PoolConfig::default()
    };
    let (sys, browsers) = pooled(&dir.path().join("state"), two, 6).await;
    let urls: Vec<String> = (0..12)
        .map(|n| format!("\"http://{addr}/shop?n={n}\""))
        .collect();
    let yaml = format!(
        "name: load\nbrowse:\n  urls: [{}]\n  geos: [us]\n  steps:\n    - extract: {{fields: {{title: {{css: h1}}}}}}\n",
        urls.join(", ")
    );
    let done = std::sync::atomic::AtomicBool::new(false);
    let sample = async {
        let mut most = 0;
        while !done.load(Ordering::SeqCst) {
            most = most.max(chromium_children(&marker));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        most
    };
    let run = async {
        let s = trawl_tests::run_embedded(&sys, &yaml, &dir.path().join("out")).await;
        done.store(true, Ordering::SeqCst);
        s
    };
    let (summary, most) = tokio::join!(run, sample);
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    assert_eq!(summary.items.valid, 12, "{summary:?}");
    let stats = browsers.pool_stats().unwrap();
    assert_eq!(stats.launched, 2, "{stats:?}");
    assert_eq!(stats.peak, 2, "{stats:?}");
    assert!(
        (1..=2).contains(&most),
        "{most} Chromium processes of this test at once"
    );
    sys.shutdown().await;
}

/// Browser processes now that are this process's children with `marker` on
/// their command line (their renderers are the browsers' children, not
/// counted).
fn chromium_children(marker: &str) -> usize {
    processes()
        .iter()
        .filter(|p| p.parent == std::process::id() && p.args.iter().any(|a| a == marker))
        .count()
}

/// With Bright Data's proxy configured, each local session reaches the web
/// through it with the slice's country in the user name: a loopback proxy
/// that answers every tunnel with a page naming the country of its
/// credentials shows each slice its own country, while two slices of two
/// countries run at once in one browser. Without the proxy, the slice's trace
/// says its geo was not honoured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_sessions_go_through_the_geo_proxy_of_their_country() {
    let proxy = GeoProxyFixture::start().await;
    let dir = tempfile::tempdir().unwrap();
    let endpoint = proxy.addr.to_string();
    let env = [
        ("BRIGHTDATA_CUSTOMER_ID", "c_test"),
        ("BRIGHTDATA_PROXY_ZONE", "residential1"),
        ("BRIGHTDATA_PROXY_PASSWORD", "zone-pass"),
        ("BRIGHTDATA_PROXY_ENDPOINT", endpoint.as_str()),
        ("TRAWL_BROWSE_ALLOW", "loopback"),
        ("TRAWL_BROWSER_POOL", "1"),
    ];
    let browsers = Browsers::from_lookup(
        |k| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        },
        std::iter::empty(),
        trawl_core::cost::PriceTable::default(),
    )
    .unwrap();
    let opts = Options::new(
        dir.path().join("state"),
        Upstream::Simulator(SimConfig::default()),
    )
    .with_worker(WorkerConfig::default().with_concurrency(2))
    .with_browsers(Arc::new(browsers.clone()));
    let sys = Embedded::start(opts).await.unwrap();
    // Nothing answers at the start URL's address (a listener that never
    // accepts): only the proxy does.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = silent.local_addr().unwrap().to_string();
    let yaml = format!(
        "name: geo\nbrowse:\n  urls: [\"http://{target}/where\"]\n  geos: [us, de]\n  steps:\n    - extract: {{fields: {{country: {{css: \"#country\"}}}}}}\n"
    );
    let summary = trawl_tests::run_embedded(&sys, &yaml, &dir.path().join("out")).await;
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    let job = trawl_core::model::JobId::parse(&summary.job_id).unwrap();
    let items = sys.store().items(&job).await.unwrap();
    assert_eq!(items.len(), 2, "{items:?}");
    for item in &items {
        assert_eq!(item.data["country"], item.geo.to_string(), "{item:?}");
    }
    let tunnels = proxy.tunnels.lock().unwrap().clone();
    let mut users: Vec<&str> = tunnels.iter().map(|t| t.0.as_str()).collect();
    users.sort_unstable();
    users.dedup();
    assert_eq!(
        users,
        vec![
            "brd-customer-c_test-zone-residential1-country-de:zone-pass",
            "brd-customer-c_test-zone-residential1-country-us:zone-pass",
        ]
    );
    assert!(tunnels.iter().all(|t| t.1 == target), "{tunnels:?}");
    drop(silent);
    assert_eq!(browsers.pool_stats().unwrap().launched, 1);
    let trace = sys.store().trace_page(&job, None, 1000).await.unwrap();
    assert!(!trace.iter().any(|s| s.tool == "browser:geo_not_honoured"));
    sys.shutdown().await;

    // No proxy: the same job runs from this machine and says so.
    let (addr, _) = serve_site().await;
    let dir = tempfile::tempdir().unwrap();
    let (sys, _) = pooled(&dir.path().join("state"), PoolConfig::default(), 2).await;
    let yaml = format!(
        "name: geo\nbrowse:\n  urls: [\"http://{addr}/shop\"]\n  geos: [us, de]\n  steps:\n    - extract: {{fields: {{title: {{css: h1}}}}}}\n"
    );
    let summary = trawl_tests::run_embedded(&sys, &yaml, &dir.path().join("out")).await;
    assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
    let job = trawl_core::model::JobId::parse(&summary.job_id).unwrap();
    let trace = sys.store().trace_page(&job, None, 1000).await.unwrap();
    let not_honoured = trace
        .iter()
        .filter(|s| s.tool == "browser:geo_not_honoured")
        .count();
    assert_eq!(not_honoured, 2, "one per slice");
    sys.shutdown().await;
}

/// A loopback HTTP proxy standing for Bright Data's (RFC 9110 `CONNECT`, basic
/// `Proxy-Authorization` as Bright Data's proxy takes it): it records each
/// tunnel's credentials and target, and answers the plain HTTP request sent
/// through the tunnel itself, with a page naming the country in the user name.
struct GeoProxyFixture {
    addr: std::net::SocketAddr,
    /// (user:password, target) of every tunnel.
    tunnels: Arc<std::sync::Mutex<Vec<(String, String)>>>,
}

impl GeoProxyFixture {
    async fn start() -> GeoProxyFixture {
        use base64::Engine as _;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        async fn head(s: &mut tokio::net::TcpStream) -> Option<String> {
            let mut buf = Vec::new();
            let mut b = [0u8; 1];
            while !buf.ends_with(b"\r\n\r\n") {
                if s.read(&mut b).await.ok()? == 0 {
                    return None;
                }
                buf.push(b[0]);
            }
            String::from_utf8(buf).ok()
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tunnels = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = tunnels.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let Some(connect) = head(&mut s).await else {
                        return;
                    };
                    let target = connect
                        .strip_prefix("CONNECT ")
                        .and_then(|r| r.split(' ').next())
                        .unwrap_or_default()
                        .to_owned();
                    let user = connect
                        .lines()
                        .find_map(|l| l.strip_prefix("Proxy-Authorization: Basic "))
                        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                        .and_then(|b| String::from_utf8(b).ok())
                        .unwrap_or_default();
                    seen.lock().unwrap().push((user.clone(), target));
                    let country = user
                        .split_once("-country-")
                        .map(|(_, c)| c.split(':').next().unwrap_or_default().to_owned())
                        .unwrap_or_default();
                    s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await
                        .unwrap();
                    // The browser's request through the tunnel, answered here.
                    if head(&mut s).await.is_none() {
                        return;
                    }
                    let body = format!(
                        "<!doctype html><title>Where</title><h1 id=\"country\">{country}</h1>"
                    );
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = s.write_all(answer.as_bytes()).await;
                });
            }
        });
        GeoProxyFixture { addr, tunnels }
    }
}

/// Model answers are kept per start URL pattern: two products of one pattern
/// (`/shop/*`) share one answer, the site's other page (`/shop`) gets its own;
/// a second run asks the model nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_answers_are_kept_per_url_pattern() {
    let (addr, _) = serve_site().await;
    let server = ScriptedModel::start(shop_model).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let browsers = Browsers::local().with_egress(EgressPolicy::parse("loopback").unwrap());
    let opts = Options::new(
        dir.path().join("state"),
        Upstream::Simulator(SimConfig::default()),
    )
    .with_worker(WorkerConfig::default().with_concurrency(1))
    .with_models(Some(Arc::new(scripted_anthropic(&server))))
    .with_browsers(Arc::new(browsers));
    let sys = Embedded::start(opts).await.unwrap();
    let yaml = shop_job(addr).replace(
        &format!("[\"http://{addr}/shop\"]"),
        &format!(
            "[\"http://{addr}/shop/100\", \"http://{addr}/shop/200\", \"http://{addr}/shop\"]"
        ),
    );
    for run in 1..=2 {
        let summary =
            trawl_tests::run_embedded(&sys, &yaml, &dir.path().join(format!("out{run}"))).await;
        assert_eq!(summary.status, JobStatus::Succeeded, "{summary:?}");
        assert_eq!(summary.items.valid, 3, "{summary:?}");
        assert_eq!(
            server.requests().len(),
            4,
            "run {run}: act and extract asked once for /shop/* and once for /shop"
        );
    }
    sys.shutdown().await;
}
