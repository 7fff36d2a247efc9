//! Cross-site and rebinding protection on a served API (a real listener on
//! loopback, raw HTTP/1.1 as a browser sends it): a cross-site form, a
//! `text/plain` post, a foreign `Host` and a rebound name are refused on every
//! route that changes state, with API keys and without, and nothing changes;
//! a same-origin request works.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;

use secrecy::SecretString;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use trawl_api::testing::EmbeddedApi;
use trawl_api::{ApiKey, Auth, router, serve};
use trawl_core::cost::PriceTable;
use trawl_core::model::{JobId, JobStatus};
use trawl_core::ports::{ApprovalStore, JobStore};
use trawl_core::spec::JobSpec;

const KEY: &str = "site-test-key-0123456789";

/// Over its default approval threshold ($1 of Web Unlocker pages at most
/// without one): 400 pages wait for an approval.
fn spec() -> String {
    let urls: Vec<String> = (0..400)
        .map(|i| format!("\"https://shop.example/p/{i}\""))
        .collect();
    format!(
        r#"{{"name": "site", "pages": {{"urls": [{}], "geos": ["us"]}}, "extract": {{"fields": {{"title": {{"css": "h1"}}}}}}, "budget": {{"approve_above_usd": 0.01}}}}"#,
        urls.join(",")
    )
}

struct Served {
    addr: SocketAddr,
    api: EmbeddedApi,
    stop: CancellationToken,
    key: Option<&'static str>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// Asserts a problem+json refusal of this status and slug.
    fn refused(&self, status: u16, slug: &str) {
        assert_eq!(self.status, status, "{}\n{}", self.head, self.body);
        assert!(
            self.head
                .to_ascii_lowercase()
                .contains("content-type: application/problem+json"),
            "{}",
            self.head
        );
        assert_eq!(
            self.json()["type"],
            format!("https://trawl.dev/problems/{slug}"),
            "{}",
            self.body
        );
    }
}

async fn serve_api(auth: Auth, key: Option<&'static str>) -> Served {
    let api = EmbeddedApi::new(auth).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(serve(listener, router(api.state.clone()), stop.clone()));
    Served {
        addr,
        api,
        stop,
        key,
    }
}

impl Served {
    /// One request as written, `Connection: close`; `host` is the `Host`
    /// header (`None`: the listener's address).
    async fn send(
        &self,
        method: &str,
        path: &str,
        host: Option<&str>,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Answer {
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            host.map_or_else(|| self.addr.to_string(), str::to_owned),
            body.len()
        );
        if let Some(key) = self.key {
            req.push_str(&format!("Authorization: Bearer {key}\r\n"));
        }
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(body);
        let mut tcp = TcpStream::connect(self.addr).await.unwrap();
        tcp.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        tcp.read_to_end(&mut raw).await.unwrap();
        let raw = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status line: {head}"));
        // The answers here are small: a chunked body is one chunk.
        let body = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            body.split_once("\r\n")
                .map_or("", |(_, rest)| rest)
                .rsplit_once("\r\n0\r\n")
                .map_or("", |(b, _)| b)
                .to_owned()
        } else {
            body.to_owned()
        };
        Answer {
            status,
            head: head.to_owned(),
            body,
        }
    }

    /// A job that waits for approval, and its pending approval's id.
    async fn job_awaiting_approval(&self) -> (JobId, i64) {
        let a = self
            .send(
                "POST",
                "/v1/jobs",
                None,
                &[("Content-Type", "application/json")],
                &spec(),
            )
            .await;
        assert_eq!(a.status, 202, "{}", a.body);
        let id = JobId::parse(a.json()["job_id"].as_str().unwrap()).unwrap();
        let store = &self.api.store;
        let job = store.job(&id).await.unwrap().unwrap();
        let spec = JobSpec::from_value(job.spec.clone()).unwrap();
        let p = trawl_core::plan::plan(&spec, &PriceTable::default());
        let approval = trawl_scheduler::approval_for(&job, &spec, &p.estimate).unwrap();
        assert!(
            store
                .plan_job(&id, &mut p.slices.into_iter(), JobStatus::AwaitingApproval)
                .await
                .unwrap()
        );
        store.request_approval(&approval).await.unwrap();
        let pending = store.approvals(true, 10).await.unwrap();
        let ours = pending
            .iter()
            .find(|a| a.job_id.as_ref() == Some(&id))
            .expect("the job's approval is pending");
        (id, ours.id)
    }

    async fn status(&self, id: &JobId) -> JobStatus {
        self.api.store.job(id).await.unwrap().unwrap().status
    }

    async fn pending(&self, approval: i64) -> bool {
        self.api
            .store
            .approval(approval)
            .await
            .unwrap()
            .is_some_and(|a| a.approved.is_none())
    }
}

/// What an attack is: its name, the `Host` it sends (`None`: the server's
/// own), its headers, and the refusal it gets (status, problem slug).
type Attack = (
    &'static str,
    Option<String>,
    Vec<(&'static str, String)>,
    u16,
    &'static str,
);

/// The attacks a page (or a rebound name) can make on a state-changing route.
fn attacks(port: u16) -> Vec<Attack> {
    vec![
        (
            "a cross-site form post",
            None,
            vec![
                ("Origin", "https://evil.example".to_owned()),
                (
                    "Content-Type",
                    "application/x-www-form-urlencoded".to_owned(),
                ),
                ("Sec-Fetch-Site", "cross-site".to_owned()),
            ],
            403,
            "cross-site",
        ),
        (
            "a text/plain post without Origin",
            None,
            vec![("Content-Type", "text/plain".to_owned())],
            415,
            "unsupported-media-type",
        ),
        (
            "a multipart form from a page marked cross-site",
            None,
            vec![
                ("Sec-Fetch-Site", "cross-site".to_owned()),
                ("Content-Type", "multipart/form-data; boundary=x".to_owned()),
            ],
            403,
            "cross-site",
        ),
        (
            "a post referred by another site",
            None,
            vec![("Referer", "https://evil.example/page".to_owned())],
            403,
            "cross-site",
        ),
        (
            "a foreign Host",
            Some("evil.example".to_owned()),
            vec![],
            403,
            "foreign-host",
        ),
        (
            "a rebound name (same-origin to the page, foreign to us)",
            Some(format!("rebind.evil.example:{port}")),
            vec![
                ("Origin", format!("http://rebind.evil.example:{port}")),
                ("Content-Type", "application/json".to_owned()),
            ],
            403,
            "foreign-host",
        ),
        (
            "an origin that only starts like localhost",
            None,
            vec![("Origin", format!("http://localhost:{port}.evil.example"))],
            403,
            "cross-site",
        ),
    ]
}

async fn every_state_changing_route_refuses_other_sites(served: Served) {
    let port = served.addr.port();
    let (job, approval) = served.job_awaiting_approval().await;
    let routes = [
        ("POST", "/v1/jobs".to_owned(), spec()),
        ("POST", format!("/v1/jobs/{job}/cancel"), String::new()),
        (
            "POST",
            format!("/v1/approvals/{approval}/approve"),
            String::new(),
        ),
        (
            "POST",
            format!("/v1/approvals/{approval}/reject"),
            String::new(),
        ),
        (
            "POST",
            "/mcp".to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.to_owned(),
        ),
        ("DELETE", "/mcp".to_owned(), String::new()),
    ];
    let jobs_before = served
        .api
        .store
        .jobs_with_status(&JobStatus::ALL, 1000)
        .await
        .unwrap()
        .len();
    for (method, path, body) in &routes {
        for (what, host, headers, status, slug) in attacks(port) {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let a = served
                .send(method, path, host.as_deref(), &headers, body)
                .await;
            assert_eq!(a.status, status, "{what} on {method} {path}: {}", a.body);
            if path != "/mcp" {
                a.refused(status, slug);
            }
        }
    }
    // Nothing changed: no job submitted, the job still waits, its approval
    // still pending.
    assert_eq!(
        served
            .api
            .store
            .jobs_with_status(&JobStatus::ALL, 1000)
            .await
            .unwrap()
            .len(),
        jobs_before
    );
    assert_eq!(served.status(&job).await, JobStatus::AwaitingApproval);
    assert!(served.pending(approval).await);

    // Reads from a foreign Host are refused too (a rebound page would read them).
    served
        .send(
            "GET",
            &format!("/v1/jobs/{job}"),
            Some("evil.example"),
            &[],
            "",
        )
        .await
        .refused(403, "foreign-host");

    // The server's own origin (a console it serves) and a client that is no
    // browser both act.
    let own = format!("http://{}", served.addr);
    let a = served
        .send(
            "POST",
            &format!("/v1/approvals/{approval}/approve"),
            None,
            &[
                ("Origin", own.as_str()),
                ("Sec-Fetch-Site", "same-origin"),
                ("Content-Type", "application/json"),
            ],
            "",
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(!served.pending(approval).await);
    let a = served
        .send(
            "POST",
            &format!("/v1/jobs/{job}/cancel"),
            Some(&format!("localhost:{port}")),
            &[],
            "",
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(served.status(&job).await, JobStatus::Cancelled);
}

#[tokio::test]
async fn an_open_api_refuses_other_sites() {
    let served = serve_api(Auth::Open, None).await;
    // It says it is open.
    let ready = served.send("GET", "/readyz", None, &[], "").await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    assert_eq!(ready.json()["auth"], "open");
    assert!(
        ready.json()["warning"]
            .as_str()
            .is_some_and(|w| w.contains("open deployment")),
        "{}",
        ready.body
    );
    every_state_changing_route_refuses_other_sites(served).await;
}

#[tokio::test]
async fn an_api_with_keys_refuses_other_sites() {
    let served = serve_api(
        Auth::Keys(vec![ApiKey::from(SecretString::from(KEY)).admin()]),
        Some(KEY),
    )
    .await;
    let ready = served.send("GET", "/readyz", None, &[], "").await;
    assert_eq!(ready.json()["auth"], "keys", "{}", ready.body);
    assert!(ready.json().get("warning").is_none(), "{}", ready.body);
    every_state_changing_route_refuses_other_sites(served).await;
}

#[tokio::test]
async fn configured_hosts_and_origins_are_accepted_and_only_they() {
    let api = EmbeddedApi::new(Auth::Open).await.unwrap();
    let site = trawl_api::SiteConfig::new()
        .with_hosts(["trawl.example.com"])
        .unwrap()
        .with_origins(["https://console.example.com"])
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(serve(
        listener,
        router(api.state.clone().with_site(site)),
        stop.clone(),
    ));
    let served = Served {
        addr,
        api,
        stop,
        key: None,
    };
    let submit = |host: &'static str, origin: &'static str| {
        let served = &served;
        async move {
            served
                .send(
                    "POST",
                    "/v1/jobs",
                    Some(host),
                    &[("Origin", origin), ("Content-Type", "application/json")],
                    &spec(),
                )
                .await
        }
    };
    assert_eq!(
        submit("trawl.example.com", "https://console.example.com")
            .await
            .status,
        202
    );
    assert_eq!(
        submit("trawl.example.com", "https://trawl.example.com")
            .await
            .status,
        202
    );
    submit("trawl.example.com", "https://console.example.com.evil")
        .await
        .refused(403, "cross-site");
    submit("trawl.example.com.evil", "https://console.example.com")
        .await
        .refused(403, "foreign-host");
}
