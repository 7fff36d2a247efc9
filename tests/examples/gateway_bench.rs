//! The MCP gateway's cost: a `tools/call` of one upstream tool through `/mcp`
//! of `trawl dev`, against the same call made to that upstream directly.
//!
//! The upstream is the conformance fixture (`trawl-conformance-fixture`, its
//! `test_simple_text` tool: a constant text, no work), over stdio, and over
//! Streamable HTTP for the last two ways:
//!
//! - **direct**: this program spawns the fixture and speaks newline-delimited
//!   JSON-RPC to it, with up to `--clients` calls in flight on its one session
//!   (answers matched by id);
//! - **gateway, 2026-07-28**: `trawl dev` (`/mcp` open on loopback, the fixture
//!   behind it) called with stateless 2026-07-28 requests that ask for nothing
//!   back (no log level, no progress token): each call is relayed upstream as a
//!   2026-07-28 request on an upstream session it holds alone, leased from the
//!   pool (`sessions: --clients`, so none waits);
//! - **gateway, 2026-07-28 taking tasks**: the same requests declaring the
//!   tasks extension: they run on the upstream's main session, where its tasks
//!   live (the tool answers at once, so no task is made);
//! - **gateway, 2025-11-25**: 2025-11-25 sessions, one per client, which get
//!   the upstream's log messages: each call runs on a leased upstream session;
//! - **direct, HTTP** and **gateway, 2026-07-28, HTTP upstream**: the fixture
//!   serving Streamable HTTP on loopback, called with stateless 2026-07-28
//!   requests directly, and through a second `trawl dev` whose upstream it is.
//!
//! Each client makes `--calls` calls one after the other, each timed from the
//! request's write to its answer's end; every answer is checked (a text result,
//! not an error). A warm-up of 10 calls per client (not counted) comes first.
//! One JSON line per way and concurrency (1 and `--clients`): calls/s and
//! latency p50 / p99; then the gateway's overhead per call at concurrency 1 (its
//! p50 minus the direct p50 of the same transport).
//!
//!     cargo build --release -p trawl-tests --bin trawl-e2e --bin trawl-conformance-fixture
//!     cargo run --release -p trawl-tests --example gateway_bench [-- --calls 500 --clients 16]
//!
//! Needs the shared Postgres, Redis and NATS of the tests (`trawl dev` keeps its
//! state in them through the tests' deployment helper).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::oneshot;

const TOOL: &str = "test_simple_text";
const WARMUP: usize = 10;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

/// The release binaries beside this example (`target/release/`).
fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: cargo build --release -p trawl-tests --bin {name}",
        path.display()
    );
    path
}

/// An answer that is a text result, not an error.
fn check(answer: &Value) {
    let result = &answer["result"];
    assert_eq!(result["content"][0]["type"], "text", "{answer}");
    assert_ne!(result["isError"], true, "{answer}");
}

/// The fixture over stdio, spoken to directly.
struct Direct {
    stdin: tokio::sync::Mutex<ChildStdin>,
    waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>,
    next: std::sync::atomic::AtomicU64,
    _child: tokio::process::Child,
}

impl Direct {
    async fn start(fixture: &PathBuf) -> Direct {
        let mut child = Command::new(fixture)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>> = Arc::default();
        let routes = waiting.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Some(line) = lines.next_line().await.unwrap() {
                let Ok(message) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                let waiting = message["id"]
                    .as_u64()
                    .and_then(|id| routes.lock().unwrap().remove(&id));
                if let Some(tx) = waiting {
                    let _ = tx.send(message);
                }
            }
        });
        let direct = Direct {
            stdin: tokio::sync::Mutex::new(child.stdin.take().unwrap()),
            waiting,
            next: 1.into(),
            _child: child,
        };
        let init = direct
            .request(
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "gateway-bench", "version": "1"}}),
            )
            .await;
        assert!(init["result"].is_object(), "{init}");
        direct
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        direct
    }

    async fn send(&self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        let mut stdin = self.stdin.lock().await;
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    }

    async fn request(&self, method: &str, params: Value) -> Value {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().unwrap().insert(id, tx);
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        rx.await.unwrap()
    }

    async fn call(&self) {
        let answer = self
            .request("tools/call", json!({"name": TOOL, "arguments": {}}))
            .await;
        check(&answer);
    }
}

/// The last JSON-RPC message of a response body (JSON or SSE).
fn last_message(text: &str) -> Value {
    trawl_tests::jsonrpc_messages(text)
        .pop()
        .unwrap_or_else(|| panic!("no JSON-RPC message in {text:?}"))
}

/// How a [`Client`] speaks.
#[derive(Clone, Copy)]
enum Mode {
    /// Stateless 2026-07-28 requests that declare nothing.
    Modern,
    /// Stateless 2026-07-28 requests that declare the tasks extension.
    ModernTasks,
    /// A 2025-11-25 session.
    Legacy,
}

/// A client of an MCP endpoint (`/mcp`, or the fixture's own).
struct Client {
    http: reqwest::Client,
    url: String,
    mode: Mode,
    legacy: bool,
    session: Option<String>,
}

impl Client {
    /// `pooled`: keep connections open between calls; off for the fixture's own
    /// endpoint, whose connections, kept idle, stall ~40 ms on Linux, as
    /// trawl's client of an HTTP upstream (no idle pool) avoids too.
    async fn new(url: &str, mode: Mode, pooled: bool) -> Client {
        let http = if pooled {
            reqwest::Client::new()
        } else {
            reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap()
        };
        let legacy = matches!(mode, Mode::Legacy);
        let mut client = Client {
            http,
            url: url.to_owned(),
            mode,
            legacy,
            session: None,
        };
        if legacy {
            let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "gateway-bench", "version": "1"}}});
            let res = client.post(init).send().await.unwrap();
            let id = res.headers()["mcp-session-id"].to_str().unwrap().to_owned();
            let _ = res.text().await.unwrap();
            client.session = Some(id);
            let res = client
                .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                .send()
                .await
                .unwrap();
            assert!(res.status().is_success());
        }
        client
    }

    fn post(&self, body: Value) -> reqwest::RequestBuilder {
        let req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        match (&self.session, self.legacy) {
            (Some(id), _) => req
                .header("mcp-session-id", id)
                .header("mcp-protocol-version", "2025-11-25"),
            // The 2025-11-25 handshake carries its version in the body.
            (None, true) => req,
            (None, false) => req.header("mcp-protocol-version", "2026-07-28"),
        }
        .body(body.to_string())
    }

    async fn call(&self) {
        let mut params = json!({"name": TOOL, "arguments": {}});
        let req = if self.legacy {
            self.post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}))
        } else {
            let declared = match self.mode {
                Mode::ModernTasks => json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
                Mode::Modern | Mode::Legacy => json!({}),
            };
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": declared});
            self.post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}))
                .header("mcp-method", "tools/call")
                .header("mcp-name", TOOL)
        };
        let text = req.send().await.unwrap().text().await.unwrap();
        check(&last_message(&text));
    }
}

/// `clients` tasks making `calls` calls each with `call(client)`: calls/s and
/// every latency.
async fn run<C: Send + Sync + 'static, F>(
    clients: Vec<Arc<C>>,
    calls: usize,
    call: F,
) -> (f64, Vec<Duration>)
where
    F: Fn(Arc<C>) -> futures_util::future::BoxFuture<'static, ()> + Send + Sync + Copy + 'static,
{
    for c in &clients {
        for _ in 0..WARMUP {
            call(c.clone()).await;
        }
    }
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|c| {
            tokio::spawn(async move {
                let mut took = Vec::with_capacity(calls);
                for _ in 0..calls {
                    let t = Instant::now();
                    call(c.clone()).await;
                    took.push(t.elapsed());
                }
                took
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let rate = all.len() as f64 / started.elapsed().as_secs_f64();
    all.sort();
    (rate, all)
}

fn at(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

fn report(way: &str, concurrency: usize, (rate, took): &(f64, Vec<Duration>)) -> f64 {
    let p50 = at(took, 0.5);
    println!(
        "{}",
        json!({"way": way, "clients": concurrency, "calls": took.len(),
            "calls_per_s": (rate * 10.0).round() / 10.0,
            "p50_ms": (p50 * 1000.0).round() / 1000.0,
            "p99_ms": (at(took, 0.99) * 1000.0).round() / 1000.0})
    );
    p50
}

/// The fixture serving Streamable HTTP on a free loopback port: its URL.
async fn http_fixture(fixture: &PathBuf) -> (String, tokio::process::Child) {
    let mut child = Command::new(fixture)
        .args(["--http", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().unwrap();
    let url = first.strip_prefix("listening on ").unwrap().to_owned();
    (url, child)
}

/// `trawl dev` with the fixture as its upstream `fixture` (`upstream`: its
/// command or URL line).
async fn gateway(
    trawl: &std::path::Path,
    upstream: &str,
    clients: usize,
) -> trawl_tests::OpenGateway {
    trawl_tests::open_gateway(
        trawl.to_str().unwrap(),
        &format!(
            "servers:\n  fixture:\n    {upstream}\n    sessions: {clients}\n    expose: {{bare_names: true}}\n"
        ),
        // Far above what the benchmark sends: the per-caller limit is not measured.
        &[
            ("TRAWL_RATE_MCP", "1000000"),
            ("TRAWL_RATE_MCP_BURST", "1000000"),
        ],
    )
    .await
}

/// `concurrency` clients of `url` speaking `mode`: one line of figures, the p50.
async fn clients_of(url: &str, mode: Mode, way: &str, concurrency: usize, calls: usize) -> f64 {
    let pooled = way != "direct, HTTP";
    let mut all = Vec::new();
    for _ in 0..concurrency {
        all.push(Arc::new(Client::new(url, mode, pooled).await));
    }
    let got = run(all, calls, |c: Arc<Client>| {
        Box::pin(async move { c.call().await })
    })
    .await;
    report(way, concurrency, &got)
}

#[tokio::main]
async fn main() {
    trawl_brightdata::ensure_crypto_provider();
    let calls = arg("--calls", 500);
    let clients = arg("--clients", 16);
    let fixture = binary("trawl-conformance-fixture");
    let trawl = binary("trawl-e2e");

    let stdio = gateway(&trawl, &format!("command: {}", fixture.display()), clients).await;
    let url = format!("http://127.0.0.1:{}/mcp", stdio.port);
    let (fixture_url, _fixture_http) = http_fixture(&fixture).await;
    let over_http = gateway(&trawl, &format!("url: {fixture_url}"), clients).await;
    let http_url = format!("http://127.0.0.1:{}/mcp", over_http.port);

    let direct = Arc::new(Direct::start(&fixture).await);
    let ways = [
        ("gateway, 2026-07-28", url.as_str(), Mode::Modern),
        (
            "gateway, 2026-07-28 taking tasks",
            url.as_str(),
            Mode::ModernTasks,
        ),
        ("gateway, 2025-11-25", url.as_str(), Mode::Legacy),
        ("direct, HTTP", fixture_url.as_str(), Mode::Modern),
        (
            "gateway, 2026-07-28, HTTP upstream",
            http_url.as_str(),
            Mode::Modern,
        ),
    ];
    let mut p50 = HashMap::new();
    for concurrency in [1, clients] {
        let all = vec![direct.clone(); concurrency];
        let got = run(all, calls, |d: Arc<Direct>| {
            Box::pin(async move { d.call().await })
        })
        .await;
        p50.insert(("direct", concurrency), report("direct", concurrency, &got));
        for (way, url, mode) in ways {
            let got = clients_of(url, mode, way, concurrency, calls).await;
            p50.insert((way, concurrency), got);
        }
    }
    for (way, _, _) in ways {
        let base = if way.contains("HTTP") {
            "direct, HTTP"
        } else {
            "direct"
        };
        if way == base {
            continue;
        }
        println!(
            "{}",
            json!({"overhead_p50_ms_at_1_client": way, "against": base,
                "ms": ((p50[&(way, 1)] - p50[&(base, 1)]) * 1000.0).round() / 1000.0})
        );
    }
    drop((stdio, over_http));
}
