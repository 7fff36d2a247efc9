//! No authenticated client can exhaust the API: MCP sessions are capped per
//! caller and in all and expire when idle; stalled headers and bodies are closed
//! at their read timeouts; connections per address are capped; a JSON-RPC id
//! already in flight in a session is answered at once; job submissions and
//! `/mcp` are rate-limited per caller.
//!
//! Each test serves the API in process (embedded store, queue, cache) on its own
//! port on 127.0.0.1, with limits small enough to reach quickly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use secrecy::SecretString;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use trawl_api::testing::EmbeddedApi;
use trawl_api::{ApiState, Auth, HttpLimits, McpConfig, RateLimit, RateLimits};

const KEY_A: &str = "limits-key-a-0123456789";
const KEY_B: &str = "limits-key-b-0123456789";

const SPEC: &str = r#"{"name": "prices", "pages": {"urls": ["https://shop.example/p/1"], "geos": ["us"]}, "extract": {"fields": {"title": {"css": "h1"}}}}"#;

/// Rates no test reaches unless it means to.
fn unlimited() -> RateLimits {
    RateLimits::default()
        .with_jobs(RateLimit::per_second(1_000_000, 1_000_000))
        .with_mcp(RateLimit::per_second(1_000_000, 1_000_000))
}

/// The API served in process until dropped.
struct Served {
    addr: SocketAddr,
    state: ApiState,
    shutdown: CancellationToken,
    server: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    _events: tokio::sync::mpsc::UnboundedReceiver<trawl_core::ports::Event>,
    _dir: TempDir,
}

impl Served {
    #[allow(clippy::useless_conversion)] // See `Auth::Keys` below.
    async fn start(mcp: McpConfig, rates: RateLimits, http: HttpLimits) -> Served {
        trawl_brightdata::ensure_crypto_provider();
        // `.into()`: the key type of `Auth::Keys` may grow (names, admin).
        let api = EmbeddedApi::new(Auth::Keys(vec![
            SecretString::from(KEY_A).into(),
            SecretString::from(KEY_B).into(),
        ]))
        .await
        .unwrap();
        let shutdown = CancellationToken::new();
        let state = api
            .state
            .with_mcp(mcp)
            .with_rate_limits(rates)
            .with_shutdown(shutdown.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(trawl_api::serve_with(
            listener,
            trawl_api::router(state.clone()),
            shutdown.clone(),
            http,
        ));
        Served {
            addr,
            state,
            shutdown,
            server: Some(server),
            _events: api.events,
            _dir: api.dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn mcp(&self, http: &reqwest::Client, key: &str) -> reqwest::RequestBuilder {
        http.post(self.url("/mcp"))
            .bearer_auth(key)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
    }

    /// Opens a session of `key` (initialize, then initialized); its id.
    async fn session(&self, http: &reqwest::Client, key: &str) -> String {
        let res = self
            .mcp(http, key)
            .body(initialize().to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let id = res.headers()["mcp-session-id"].to_str().unwrap().to_owned();
        res.text().await.unwrap();
        let res = self
            .mcp(http, key)
            .header("mcp-session-id", &id)
            .header("mcp-protocol-version", "2025-11-25")
            .body(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::ACCEPTED);
        id
    }

    async fn ping(
        &self,
        http: &reqwest::Client,
        key: &str,
        session: &str,
        id: u64,
    ) -> (StatusCode, String) {
        let res = self
            .mcp(http, key)
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25")
            .body(json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string())
            .send()
            .await
            .unwrap();
        let status = res.status();
        (status, res.text().await.unwrap())
    }

    async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(server) = self.server.take() {
            tokio::time::timeout(Duration::from_secs(15), server)
                .await
                .expect("serve returns after cancel")
                .unwrap()
                .unwrap();
        }
    }
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "trawl-tests", "version": "1"}}})
}

/// Waits for `cond` to hold, up to `within`; whether it did.
async fn eventually<F, Fut>(within: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// This process's resident memory in MB (Linux), for the report.
fn rss_mb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024)
}

/// Reads `conn` until the server closes it; what it sent, or `None` if it was
/// still open after `within`.
async fn read_until_closed(conn: &mut TcpStream, within: Duration) -> Option<String> {
    let mut got = Vec::new();
    let read = tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    read.ok()
        .map(|()| String::from_utf8_lossy(&got).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_initializes_keep_the_sessions_of_one_caller_under_the_cap() {
    const CAP: usize = 16;
    const CALLS: usize = 10_000;
    const CONCURRENCY: usize = 8;
    let served = Served::start(
        McpConfig::default().with_session_limits(CAP, 10_000, Duration::from_secs(3600)),
        unlimited(),
        HttpLimits::default(),
    )
    .await;
    let http = reqwest::Client::new();
    let first = served.session(&http, KEY_A).await;
    let rss_before = rss_mb();
    let started = Instant::now();
    let mut most = 0;
    let mut opened = 1;
    for round in 0..(CALLS - 1).div_ceil(CONCURRENCY) {
        let n = CONCURRENCY.min(CALLS - 1 - round * CONCURRENCY);
        let calls = (0..n).map(|_| {
            let req = served.mcp(&http, KEY_A).body(initialize().to_string());
            async move {
                let res = req.send().await.unwrap();
                let ok =
                    res.status() == StatusCode::OK && res.headers().contains_key("mcp-session-id");
                res.bytes().await.unwrap();
                ok
            }
        });
        let results = futures_util::future::join_all(calls).await;
        assert!(
            results.iter().all(|ok| *ok),
            "every initialize is answered with a session (round {round})"
        );
        opened += n;
        let now = served.state.mcp_sessions().await;
        assert!(
            now.live <= CAP && now.owned <= CAP,
            "{now:?} after {opened}"
        );
        most = most.max(now.live);
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "bounded in time"
        );
    }
    assert_eq!(opened, CALLS);
    // Reported, not asserted: the process holds the test's client too.
    eprintln!(
        "{CALLS} initializes in {:?}; at most {most} live sessions (cap {CAP}); RSS {rss_before:?} MB -> {:?} MB",
        started.elapsed(),
        rss_mb()
    );
    // The oldest was closed in rmcp too: its id is unknown now.
    let (status, _) = served.ping(&http, KEY_A, &first, 2).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Another caller still gets sessions.
    served.session(&http, KEY_B).await;
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_beyond_the_total_are_refused_with_retry_after() {
    let served = Served::start(
        McpConfig::default().with_session_limits(2, 3, Duration::from_secs(3600)),
        unlimited(),
        HttpLimits::default(),
    )
    .await;
    let http = reqwest::Client::new();
    served.session(&http, KEY_A).await;
    served.session(&http, KEY_A).await;
    served.session(&http, KEY_B).await;
    // KEY_B's second would need room no one of its own can give.
    let res = served
        .mcp(&http, KEY_B)
        .body(initialize().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(res.headers().contains_key("retry-after"));
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["jsonrpc"], "2.0");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Too many MCP sessions"),
        "{body}"
    );
    assert_eq!(served.state.mcp_sessions().await.live, 3);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_expire_and_give_back_their_memory() {
    let idle = Duration::from_millis(500);
    let served = Served::start(
        McpConfig::default().with_session_limits(4, 100, idle),
        unlimited(),
        HttpLimits::default(),
    )
    .await;
    let http = reqwest::Client::new();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(served.session(&http, KEY_A).await);
    }
    assert_eq!(served.state.mcp_sessions().await.live, 3);
    let expired = eventually(Duration::from_secs(10), || async {
        served.state.mcp_sessions().await.live == 0
    })
    .await;
    assert!(expired, "{:?}", served.state.mcp_sessions().await);
    for id in &ids {
        assert_eq!(
            served.ping(&http, KEY_A, id, 2).await.0,
            StatusCode::NOT_FOUND
        );
    }
    // The caller opens as many again: the expired ones are not counted.
    for _ in 0..4 {
        served.session(&http, KEY_A).await;
    }
    assert!(served.state.mcp_sessions().await.owned <= 4);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_headers_and_bodies_are_closed_while_others_are_served() {
    let timeout = Duration::from_secs(1);
    let served = Served::start(
        McpConfig::default(),
        unlimited(),
        HttpLimits::default()
            .with_header_read_timeout(timeout)
            .with_body_read_timeout(timeout),
    )
    .await;
    let started = Instant::now();
    let mut header = TcpStream::connect(served.addr).await.unwrap();
    header
        .write_all(b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        .await
        .unwrap();
    let mut body = TcpStream::connect(served.addr).await.unwrap();
    body.write_all(
        format!(
            "POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY_A}\r\n\
             Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"name\":"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    // Meanwhile another client is served.
    let http = reqwest::Client::new();
    let res = http
        .post(served.url("/v1/jobs"))
        .bearer_auth(KEY_B)
        .header("content-type", "application/json")
        .body(SPEC)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::ACCEPTED);

    let (h, b) = tokio::join!(
        read_until_closed(&mut header, Duration::from_secs(10)),
        read_until_closed(&mut body, Duration::from_secs(10)),
    );
    let elapsed = started.elapsed();
    let h = h.expect("a stalled header is closed");
    let b = b.expect("a stalled body is closed");
    assert!(!h.contains("202"), "{h}");
    assert!(b.starts_with("HTTP/1.1 408"), "{b}");
    assert!(b.to_ascii_lowercase().contains("connection: close"), "{b}");
    assert!(b.contains("request-timeout"), "{b}");
    assert!(
        elapsed >= timeout,
        "closed by the timeout, not before: {elapsed:?}"
    );
    eprintln!("stalled header and body closed after {elapsed:?} (timeout {timeout:?})");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_per_address_are_closed() {
    const CAP: usize = 3;
    let served = Served::start(
        McpConfig::default(),
        unlimited(),
        HttpLimits::default().with_max_connections_per_ip(CAP),
    )
    .await;
    let mut open = Vec::new();
    for _ in 0..CAP {
        open.push(TcpStream::connect(served.addr).await.unwrap());
    }
    let mut extra = TcpStream::connect(served.addr).await.unwrap();
    let closed = read_until_closed(&mut extra, Duration::from_secs(5)).await;
    assert_eq!(
        closed.as_deref(),
        Some(""),
        "the extra one is closed without an answer"
    );
    // The ones within the cap are served.
    for conn in &mut open {
        conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let answer = read_until_closed(conn, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    // Once they are gone, there is room again.
    drop(open);
    let served_again = eventually(Duration::from_secs(5), || async {
        let Ok(mut c) = TcpStream::connect(served.addr).await else {
            return false;
        };
        if c.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await
            .is_err()
        {
            return false;
        }
        read_until_closed(&mut c, Duration::from_secs(5))
            .await
            .is_some_and(|a| a.starts_with("HTTP/1.1 200"))
    })
    .await;
    assert!(served_again);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_with_one_id_are_all_answered() {
    let served = Served::start(McpConfig::default(), unlimited(), HttpLimits::default()).await;
    let http = reqwest::Client::new();
    let session = served.session(&http, KEY_A).await;
    let pings = (0..16).map(|_| served.ping(&http, KEY_A, &session, 5));
    let answers = tokio::time::timeout(
        Duration::from_secs(20),
        futures_util::future::join_all(pings),
    )
    .await
    .expect("every ping is answered in full");
    let mut ok = 0;
    let mut duplicate = 0;
    for (status, body) in &answers {
        if *status == StatusCode::OK && body.contains(r#""result""#) && body.contains(r#""id":5"#) {
            ok += 1;
        } else if *status == StatusCode::BAD_REQUEST {
            let v: Value = serde_json::from_str(body).unwrap();
            assert_eq!(v["error"]["code"], -32600, "{body}");
            assert!(
                v["error"]["message"].as_str().unwrap().contains("id 5"),
                "{body}"
            );
            assert_eq!(v["error"]["data"]["duplicate_id"], 5, "{body}");
            duplicate += 1;
        } else {
            panic!("neither an answer nor a duplicate: {status} {body}");
        }
    }
    assert!(ok >= 1, "{answers:?}");
    assert_eq!(ok + duplicate, 16);
    eprintln!("16 pings with id 5: {ok} answered, {duplicate} refused as duplicates");
    // The id is free again once answered.
    let (status, body) = served.ping(&http, KEY_A, &session, 5).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_over_their_rate_get_429_and_others_do_not() {
    let served = Served::start(
        McpConfig::default(),
        RateLimits::default()
            .with_jobs(RateLimit::every(Duration::from_secs(60), 3))
            .with_mcp(RateLimit::every(Duration::from_secs(60), 4)),
        HttpLimits::default(),
    )
    .await;
    let http = reqwest::Client::new();
    let submit = |key: &'static str| {
        http.post(served.url("/v1/jobs"))
            .bearer_auth(key)
            .header("content-type", "application/json")
            .body(SPEC)
            .send()
    };
    for _ in 0..3 {
        assert_eq!(submit(KEY_A).await.unwrap().status(), StatusCode::ACCEPTED);
    }
    let res = submit(KEY_A).await.unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = res.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    assert_eq!(res.headers()["content-type"], "application/problem+json");
    let p: Value = res.json().await.unwrap();
    assert_eq!(p["type"], "https://trawl.dev/problems/too-many-requests");
    assert_eq!(submit(KEY_B).await.unwrap().status(), StatusCode::ACCEPTED);
    // Reads are not limited.
    let res = http
        .get(served.url("/v1/approvals"))
        .bearer_auth(KEY_A)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);

    for _ in 0..4 {
        let res = served
            .mcp(&http, KEY_A)
            .body(initialize().to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        res.bytes().await.unwrap();
    }
    let res = served
        .mcp(&http, KEY_A)
        .body(initialize().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(res.headers().contains_key("retry-after"));
    let res = served
        .mcp(&http, KEY_B)
        .body(initialize().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    served.stop().await;
}
