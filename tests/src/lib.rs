//! The harness of the end-to-end tests (the tests themselves are in `tests/`).
//!
//! [`Deployment`] gives a test its own slice of the real services: a fresh
//! Postgres database, a NATS subject and stream prefix, a Redis key prefix, and a
//! Bright Data simulator on a loopback port; it starts trawl's roles as separate
//! processes of the `trawl-e2e` binary (the `trawl` command line, built for these
//! tests) and stops them by pid. Tests that stop a service start their own
//! [`NatsServer`] or [`RedisServer`] on a free port and stop only that one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod site;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use sqlx::{Connection, Executor, PgConnection};
use tokio::sync::watch;
use trawl_sim::{SimConfig, SimHandle};

/// The extraction and schema of the tests' product-page jobs: JSON-LD name,
/// price and currency, a CSS title and a regex SKU; the simulator's deliberately
/// broken pages fail the schema.
pub const EXTRACT: &str = r#"
extract:
  fields:
    name:     {jsonld: "name"}
    price:    {jsonld: "offers.price", type: number}
    currency: {jsonld: "offers.priceCurrency"}
    title:    {css: "h1"}
    sku:      {regex: "SKU: ([A-Z0-9-]+)"}
schema:
  type: object
  required: [name, price, currency]
  properties:
    price: {type: number, exclusiveMinimum: 0}
    currency: {type: string, pattern: "^[A-Z]{3}$"}
"#;

/// Postgres with trust auth, as on the project's machines.
pub fn postgres_admin_url() -> String {
    std::env::var("TRAWL_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

pub fn shared_nats_url() -> String {
    std::env::var("TRAWL_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

pub fn shared_redis_url() -> String {
    std::env::var("TRAWL_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A name no other test run uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{:016x}", fastrand::u64(..))
}

/// A TCP port that was free a moment ago.
///
/// The port is below the kernel's ephemeral range (32768 and up here), so an
/// outgoing connection of any process cannot take it between this check and the
/// role's bind, as a port the kernel handed out for `:0` could be. Ports are
/// handed out in turn from a start that depends on the process, so tests running
/// at once in one binary never get the same one.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7_919) % SPAN,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let port = (LOW + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {LOW}..{}", LOW + SPAN);
}

/// Waits until something accepts connections on `port`.
pub async fn wait_for_port(port: u16, within: Duration) {
    let deadline = Instant::now() + within;
    let mut delay = Duration::from_millis(5);
    loop {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "nothing listens on {port} after {within:?}"
        );
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(200));
    }
}

// ---------------------------------------------------------------------------
// Postgres

/// A fresh database, dropped when this is dropped.
pub struct Database {
    pub name: String,
    pub url: String,
    /// The server's admin URL, to drop it.
    admin: String,
}

impl Database {
    pub async fn create() -> Database {
        Database::create_on(&postgres_admin_url()).await
    }

    /// A fresh database on the server of `admin` (a URL of a database there).
    pub async fn create_on(admin: &str) -> Database {
        let admin = admin.to_owned();
        let name = unique("trawl_e2e");
        let mut conn = PgConnection::connect(&admin)
            .await
            .expect("Postgres reachable");
        conn.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .unwrap();
        let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
        Database {
            url: format!("{base}/{name}"),
            name,
            admin,
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        // Drop has no runtime of its own: a short-lived one closes the database.
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(mut c) = PgConnection::connect(&admin).await {
                    let _ = c
                        .execute(sqlx::AssertSqlSafe(format!(
                            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                        )))
                        .await;
                }
            });
        })
        .join();
    }
}

// ---------------------------------------------------------------------------
// Servers a test controls

/// A nats-server of the test's own, with JetStream on a file store in a temporary
/// folder, so it can be stopped and started again without touching the shared one.
pub struct NatsServer {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl NatsServer {
    pub async fn start() -> NatsServer {
        let mut s = NatsServer {
            port: free_port(),
            dir: tempfile::tempdir().unwrap(),
            child: None,
        };
        s.restart().await;
        s
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts it (again) on the same port and store.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "nats-server already running");
        let child = Command::new(nats_server_bin())
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        self.child = Some(child);
        wait_for_port(self.port, Duration::from_secs(10)).await;
    }

    /// Stops it (SIGTERM, as an orderly restart would) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            terminate(&c);
            let _ = c.wait();
        }
    }

    /// SIGKILL: it gets no chance to flush or close anything.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The nats-server the tests start: the one pinned in `tests/upstreams`
/// (`nats-server-bin`, 2.10+, which worker pools need), else Debian's.
fn nats_server_bin() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("upstreams/.venv/bin/nats-server");
    if venv.exists() {
        return venv;
    }
    let sbin = PathBuf::from("/usr/sbin/nats-server");
    if sbin.exists() {
        sbin
    } else {
        PathBuf::from("nats-server")
    }
}

/// A Postgres server of the test's own (Debian's PostgreSQL binaries, a
/// cluster made by `initdb` in a temporary folder, trust authentication, on a
/// free loopback port), so it can be stopped, crashed and started again without
/// touching the machine's. Run as the `postgres` user when the tests run as
/// root (Postgres refuses root).
pub struct PostgresServer {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl PostgresServer {
    pub async fn start() -> PostgresServer {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        as_postgres(&dir, Command::new(pg_bin("initdb")))
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| assert!(s.success(), "initdb failed"))
            .expect("initdb runs");
        let mut s = PostgresServer {
            port: free_port(),
            dir,
            child: None,
        };
        s.restart().await;
        s
    }

    /// The URL of a database on it (`postgres` exists from the start).
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Starts it (again) on the same port and data folder.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "postgres already running");
        let child = as_postgres(&self.dir, Command::new(pg_bin("postgres")))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(self.dir.path())
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "max_connections=200",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("postgres starts");
        self.child = Some(child);
        wait_for_port(self.port, Duration::from_secs(30)).await;
        // Listening is not answering: after a crash it recovers first ("the
        // database system is starting up").
        let deadline = Instant::now() + Duration::from_secs(30);
        while PgConnection::connect(&self.url("postgres")).await.is_err() {
            assert!(Instant::now() < deadline, "postgres does not answer");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// An immediate shutdown (SIGQUIT): every connection cut, no checkpoint,
    /// recovery at the next start, as after a crash.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-QUIT", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Debian's PostgreSQL program `name`, of the newest version installed.
fn pg_bin(name: &str) -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    versions.sort();
    versions
        .last()
        .map(|v| v.join("bin").join(name))
        .unwrap_or_else(|| PathBuf::from(name))
}

/// `cmd` as the `postgres` user when this process is root (its folder handed
/// to that user), else as it is.
fn as_postgres(dir: &tempfile::TempDir, cmd: Command) -> Command {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root {
        return cmd;
    }
    let _ = Command::new("chown")
        .args(["-R", "postgres:postgres"])
        .arg(dir.path())
        .status();
    let mut wrapped = Command::new("setpriv");
    wrapped
        .args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--",
        ])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    wrapped
}

/// A redis-server of the test's own, in memory only.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
}

impl RedisServer {
    pub async fn start() -> RedisServer {
        let mut s = RedisServer {
            port: free_port(),
            child: None,
        };
        s.restart().await;
        s
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "redis-server already running");
        let child = Command::new("redis-server")
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                &self.port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        wait_for_port(self.port, Duration::from_secs(10)).await;
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sends SIGTERM to a child.
pub fn terminate(c: &Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &c.id().to_string()])
        .status();
}

// ---------------------------------------------------------------------------
// Roles

/// A running role process; its stderr is kept for the test's failure messages.
pub struct Role {
    pub name: String,
    child: Option<Child>,
    log: Arc<Mutex<String>>,
    /// The API's address once it says where it listens.
    listening: watch::Receiver<Option<String>>,
    /// The ops listener's address (`TRAWL_OPS_LISTEN`) once it says.
    ops: watch::Receiver<Option<String>>,
}

impl Role {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The base URL the API announced.
    pub async fn api_url(&mut self) -> String {
        let name = self.name.clone();
        let log = self.log.clone();
        announced(&mut self.listening, &name, &log).await
    }

    /// The base URL of the ops listener (`/healthz`, `/readyz`, `/metrics`).
    pub async fn ops_url(&mut self) -> String {
        let name = self.name.clone();
        let log = self.log.clone();
        announced(&mut self.ops, &name, &log).await
    }

    /// SIGKILL: the process gets no chance to clean up.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits for the process to exit on its own (no signal); panics after `within`.
    pub async fn exited(&mut self, within: Duration) -> ExitStatus {
        self.wait_exit(within, "exit").await
    }

    /// SIGTERM, then waits for the exit.
    pub async fn stop(&mut self, within: Duration) -> ExitStatus {
        terminate(self.child.as_ref().expect("running"));
        self.wait_exit(within, "stop").await
    }

    async fn wait_exit(&mut self, within: Duration, what: &str) -> ExitStatus {
        let mut c = self.child.take().expect("running");
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = c.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!(
                    "{} did not {what} within {within:?}:\n{}",
                    self.name,
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn announced(
    rx: &mut watch::Receiver<Option<String>>,
    name: &str,
    log: &Mutex<String>,
) -> String {
    let r = tokio::time::timeout(Duration::from_secs(30), rx.wait_for(Option::is_some))
        .await
        .ok()
        .and_then(|r| r.ok().map(|v| v.clone()));
    match r {
        Some(Some(url)) => url,
        _ => panic!("{name} did not start listening:\n{}", log.lock().unwrap()),
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One test's deployment: its database, prefixes, simulator, settings and roles.
pub struct Deployment {
    /// The `trawl` command line built for the tests (`src/bin/trawl-e2e.rs`); an
    /// integration test passes `env!("CARGO_BIN_EXE_trawl-e2e")`.
    pub bin: PathBuf,
    pub db: Database,
    pub nats_url: String,
    pub nats_prefix: String,
    pub redis_url: String,
    pub redis_prefix: String,
    pub sim: SimHandle,
    /// A plain key (`TRAWL_API_KEYS`): it sees the jobs it submitted.
    pub api_key: String,
    /// An admin key (`TRAWL_ADMIN_KEYS`): every job, and approvals to decide.
    pub admin_key: String,
    /// Extra environment for every role (`TRAWL_ACK_WAIT`, ...).
    pub env: Vec<(String, String)>,
    pub state: tempfile::TempDir,
}

impl Deployment {
    /// A deployment on the shared NATS and Redis, with its own database and
    /// prefixes, and a simulator configured by `sim`.
    pub async fn new(bin: &str, sim: SimConfig) -> Deployment {
        Deployment::on(bin, sim, shared_nats_url(), shared_redis_url()).await
    }

    pub async fn on(bin: &str, sim: SimConfig, nats_url: String, redis_url: String) -> Deployment {
        Deployment::on_servers(bin, sim, &postgres_admin_url(), nats_url, redis_url).await
    }

    /// A deployment whose database is on the Postgres server of `postgres_admin`.
    pub async fn on_servers(
        bin: &str,
        sim: SimConfig,
        postgres_admin: &str,
        nats_url: String,
        redis_url: String,
    ) -> Deployment {
        Deployment {
            bin: PathBuf::from(bin),
            db: Database::create_on(postgres_admin).await,
            nats_url,
            nats_prefix: unique("e2e"),
            redis_url,
            redis_prefix: format!("{}:", unique("e2e")),
            sim: trawl_sim::spawn(sim).await.unwrap(),
            api_key: unique("key"),
            admin_key: unique("admin"),
            env: Vec::new(),
            state: tempfile::tempdir().unwrap(),
        }
    }

    pub fn with_env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    /// Starts `trawl <role>` with this deployment's settings.
    pub fn spawn(&self, role: &str, name: &str) -> Role {
        self.spawn_with(role, name, &[])
    }

    /// Starts `trawl <role>` with this deployment's settings and `env` on top.
    pub fn spawn_with(&self, role: &str, name: &str, env: &[(&str, &str)]) -> Role {
        let mut cmd = Command::new(&self.bin);
        cmd.arg(role)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "info")
            .env("TRAWL_DATABASE_URL", &self.db.url)
            .env("TRAWL_DATABASE_POOL", "8")
            .env("TRAWL_NATS_URL", &self.nats_url)
            .env("TRAWL_NATS_PREFIX", &self.nats_prefix)
            .env("TRAWL_REDIS_URL", &self.redis_url)
            .env("TRAWL_REDIS_PREFIX", &self.redis_prefix)
            .env("TRAWL_LISTEN", "127.0.0.1:0")
            .env("TRAWL_API_KEYS", &self.api_key)
            .env("TRAWL_ADMIN_KEYS", &self.admin_key)
            .env("TRAWL_HOME", self.state.path())
            .env("TRAWL_RECONCILE_EVERY", "200ms")
            .env("TRAWL_CALL_TIMEOUT", "2s")
            .env("TRAWL_WORKER_CONCURRENCY", "8")
            .env("BRIGHTDATA_API_URL", self.sim.base_url())
            .env("BRIGHTDATA_API_TOKEN", "e2e-token")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("trawl-e2e starts");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = watch::channel(None);
        let (ops_tx, ops_rx) = watch::channel(None);
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("ops listening on ").nth(1) {
                    let _ = ops_tx.send(Some(rest.trim().to_owned()));
                } else if let Some(rest) = line.split("listening on ").nth(1) {
                    let _ = tx.send(Some(rest.trim().to_owned()));
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        Role {
            name: name.to_owned(),
            child: Some(child),
            log,
            listening: rx,
            ops: ops_rx,
        }
    }

    pub fn client(&self, api: &str) -> Api {
        trawl_brightdata::ensure_crypto_provider();
        Api {
            http: reqwest::Client::new(),
            base: api.to_owned(),
            key: Some(self.api_key.clone()),
        }
    }

    /// A client with the admin key: it decides approvals.
    pub fn admin_client(&self, api: &str) -> Api {
        Api {
            key: Some(self.admin_key.clone()),
            ..self.client(api)
        }
    }
}

/// How long [`Api::wait_job`] keeps polling a job whose API answers 503 in a row.
pub const UNAVAILABLE_FOR: Duration = Duration::from_secs(30);

/// A small client of the HTTP API for tests.
#[derive(Clone)]
pub struct Api {
    pub http: reqwest::Client,
    pub base: String,
    pub key: Option<String>,
}

impl Api {
    pub fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, format!("{}{path}", self.base));
        match &self.key {
            Some(k) => r.bearer_auth(k),
            None => r,
        }
    }

    /// Submits a YAML spec; returns the job id.
    pub async fn submit_yaml(&self, yaml: &str) -> String {
        let resp = self
            .req(reqwest::Method::POST, "/v1/jobs")
            .header("content-type", "application/yaml")
            .body(yaml.to_owned())
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let body: Value = resp.json().await.unwrap();
        assert_eq!(status, 202, "submit answered {status}: {body}");
        body["job_id"].as_str().unwrap().to_owned()
    }

    pub async fn job(&self, id: &str) -> Value {
        let (status, body) = self.job_answer(id).await;
        assert_eq!(status, 200, "GET /v1/jobs/{id}: {body}");
        body
    }

    /// `GET /v1/jobs/{id}`'s status and body, whatever they are.
    async fn job_answer(&self, id: &str) -> (reqwest::StatusCode, Value) {
        let resp = self
            .req(reqwest::Method::GET, &format!("/v1/jobs/{id}"))
            .send()
            .await
            .unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap())
    }

    /// Polls the job until `done` says so, or panics after `within` with `why()`.
    ///
    /// A 503 is what the API answers when its database did not answer in time
    /// ("try again in a few seconds"): polled again, as a client would, but never
    /// for longer than [`UNAVAILABLE_FOR`] in a row. Any other answer but 200
    /// fails at once, with `why()`.
    pub async fn wait_job(
        &self,
        id: &str,
        within: Duration,
        mut done: impl FnMut(&Value) -> bool,
        why: impl Fn() -> String,
    ) -> Value {
        let deadline = Instant::now() + within;
        let mut unavailable_since: Option<Instant> = None;
        loop {
            let (status, v) = self.job_answer(id).await;
            if status == reqwest::StatusCode::SERVICE_UNAVAILABLE {
                let since = *unavailable_since.get_or_insert_with(Instant::now);
                eprintln!("GET /v1/jobs/{id} answered 503, polled again: {v}");
                assert!(
                    since.elapsed() < UNAVAILABLE_FOR && Instant::now() < deadline,
                    "GET /v1/jobs/{id} answered 503 for {:?}: {v}\n{}",
                    since.elapsed(),
                    why()
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            unavailable_since = None;
            assert_eq!(status, 200, "GET /v1/jobs/{id}: {v}\n{}", why());
            if done(&v) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "job {id} not there after {within:?}: {v}\n{}",
                why()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every row of a paginated endpoint, following `next_cursor`.
    pub async fn all(&self, path: &str, field: &str) -> Vec<Value> {
        let mut rows = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let url = match &cursor {
                Some(c) => format!("{path}?limit=500&cursor={c}"),
                None => format!("{path}?limit=500"),
            };
            let v: Value = self
                .req(reqwest::Method::GET, &url)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            rows.extend(v[field].as_array().unwrap().iter().cloned());
            match v["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => return rows,
            }
        }
    }
}

/// Whether a job view is in a terminal status.
pub fn is_terminal(v: &Value) -> bool {
    matches!(
        v["status"].as_str(),
        Some("succeeded" | "partial" | "failed" | "cancelled")
    )
}

/// Slices done (succeeded or failed) in a job view.
pub fn slices_done(v: &Value) -> u64 {
    v["counts"]["slices"]["succeeded"].as_u64().unwrap_or(0)
        + v["counts"]["slices"]["failed"].as_u64().unwrap_or(0)
}

/// Items as comparable keys: (url, geo, data) sorted; slice ids and positions are
/// content-derived too, but the data is what a user compares.
pub fn item_keys(items: &[Value]) -> Vec<String> {
    let mut keys: Vec<String> = items
        .iter()
        .map(|i| {
            format!(
                "{}|{}|{}|{}|{}",
                i["slice_id"], i["seq"], i["url"], i["geo"], i["data"]
            )
        })
        .collect();
    keys.sort();
    keys
}

/// Reads a JSON Lines file.
pub fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

// ---------------------------------------------------------------------------
// OAuth and MCP clients from npm and PyPI

/// `tests/upstreams`: the npm and PyPI parts the tests drive.
pub fn upstreams() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("upstreams")
}

/// The `oidc-provider` authorization server (`upstreams/oauth-server.mjs`) on a
/// loopback port, stopped (SIGTERM) when dropped. Its signing key is written to
/// `signing.jwk` and `signing.pem` in [`AuthServer::dir`].
pub struct AuthServer {
    child: Child,
    pub issuer: String,
    dir: tempfile::TempDir,
    http: reqwest::Client,
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        terminate(&self.child);
        let _ = self.child.wait();
    }
}

impl AuthServer {
    /// Starts it with `config` (the script's format: `resources`, `clients`, …;
    /// the key files are filled in, and `port` when not given). A client's secret
    /// is expected to be `<client_id>-secret` by [`AuthServer::token`].
    pub fn start(mut config: Value) -> AuthServer {
        let dir = tempfile::tempdir().unwrap();
        if config.get("port").is_none() {
            config["port"] = 0.into();
        }
        config["key_file"] = dir.path().join("signing.jwk").to_string_lossy().into();
        config["key_pem_file"] = dir.path().join("signing.pem").to_string_lossy().into();
        let path = dir.path().join("config.json");
        std::fs::write(&path, config.to_string()).unwrap();
        // Its first line says it is ready. Node has been seen, rarely, to start
        // and never say so: such a server is stopped and another started, rather
        // than the test waiting on it for ever.
        let (child, line) = (1..=3)
            .find_map(|_| {
                let mut child = Command::new("node")
                    .arg(upstreams().join("oauth-server.mjs"))
                    .arg(&path)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("node runs the authorization server");
                let stdout = child.stdout.take().unwrap();
                let (tx, rx) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let mut line = String::new();
                    let _ = BufReader::new(stdout).read_line(&mut line);
                    let _ = tx.send(line);
                });
                match rx.recv_timeout(Duration::from_secs(30)) {
                    Ok(line) if !line.is_empty() => Some((child, line)),
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        None
                    }
                }
            })
            .expect("the authorization server said it was ready within 30 s, in 3 tries");
        let ready: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("authorization server did not start ({e}): {line:?}"));
        trawl_brightdata::ensure_crypto_provider();
        AuthServer {
            child,
            issuer: ready["issuer"].as_str().unwrap().to_owned(),
            dir,
            http: reqwest::Client::new(),
        }
    }

    /// Where its signing key was written.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The port it listens on (the issuer's).
    pub fn port(&self) -> u16 {
        self.issuer
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("the issuer names its port")
    }

    /// The grant types of the tokens it has issued to `client`, in order.
    pub async fn grants(&self, client: &str) -> Vec<String> {
        self.log().await["grants"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["client_id"] == client)
            .map(|g| g["grant_type"].as_str().unwrap_or("").to_owned())
            .collect()
    }

    /// How many requests for `path` it has had.
    pub async fn requests_for(&self, path: &str) -> usize {
        self.log().await["requests"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["path"] == path)
            .count()
    }

    /// The fixture's record of requests and grants (`GET /_test/log`).
    async fn log(&self) -> Value {
        self.http
            .get(format!("{}/_test/log", self.issuer))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// A client-credentials access token of `client` for `resource`.
    pub async fn token(&self, client: &str, resource: &str, scope: &str) -> String {
        let body: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "client_credentials")
            .append_pair("resource", resource)
            .append_pair("scope", scope)
            .finish();
        let res = self
            .http
            .post(format!("{}/token", self.issuer))
            .basic_auth(client, Some(format!("{client}-secret")))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = res.status();
        let v: Value = res.json().await.unwrap();
        assert!(status.is_success(), "token request refused: {v}");
        v["access_token"].as_str().unwrap().to_owned()
    }
}

/// The model the scripted-model tests name.
pub const SCRIPTED_MODEL: &str = "claude-sonnet-4-5";

/// Sub-agent models served by `server` on the Anthropic wire, as
/// [`SCRIPTED_MODEL`], with retries a few milliseconds apart.
pub fn scripted_anthropic(
    server: &trawl_model::testing::ScriptedModel,
) -> trawl_worker::models::Models {
    let cfg = trawl_model::ClientConfig::anthropic()
        .with_base_url(server.url())
        .with_api_key("test-key".to_owned().into())
        .with_retry_base_delay(Duration::from_millis(1))
        .with_retry_max_delay(Duration::from_millis(20));
    trawl_worker::models::Models::new(trawl_model::PriceList::claude())
        .with_anthropic(Arc::new(trawl_model::AnthropicClient::new(cfg).unwrap()))
        .with_default_model(Some(SCRIPTED_MODEL.into()))
}

/// Runs the TypeScript SDK client (`upstreams/mcp-client.mjs`) against `url`;
/// returns its exit code, stdout and stderr.
pub fn node_client(url: &str, token: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new("node");
    cmd.arg(upstreams().join("mcp-client.mjs"))
        .args(args)
        .env("MCP_URL", url);
    if let Some(t) = token {
        cmd.env("MCP_TOKEN", t);
    }
    let out = cmd.output().expect("node runs the MCP client");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Submits `yaml` to an embedded system and runs the job to its end, quietly.
pub async fn run_embedded(
    sys: &trawl::embedded::Embedded,
    yaml: &str,
    out: &Path,
) -> trawl::output::Summary {
    let spec = trawl_core::spec::JobSpec::parse(yaml).unwrap();
    let submitted = sys.submit(&spec, Some("test")).await.unwrap();
    sys.run(
        &submitted.job_id,
        out,
        &mut trawl::progress::Progress::Quiet,
        &tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap()
}

/// One stateless 2026-07-28 request on `/mcp` (SEP-2575): `method` with
/// `params`, its `_meta` the protocol version, no client capabilities and a
/// client name, with `meta`'s entries over them (capabilities, log level,
/// progress token); sent with `Mcp-Method` and, when the request names
/// something (`name`, `uri`, `taskId`), `Mcp-Name`, as `bearer` when given.
/// Every JSON-RPC message of the answer (plain JSON or SSE), the final one
/// last.
pub async fn mcp_modern(
    http: &reqwest::Client,
    url: &str,
    bearer: Option<&str>,
    method: &str,
    mut params: Value,
    meta: Value,
) -> Vec<Value> {
    let named = ["name", "uri", "taskId"]
        .iter()
        .find_map(|k| params.get(*k).and_then(Value::as_str))
        .map(str::to_owned);
    let mut m = serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "trawl-tests", "version": "1"}});
    if let (Some(m), Some(meta)) = (m.as_object_mut(), meta.as_object()) {
        m.extend(meta.clone());
    }
    params["_meta"] = m;
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut req = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = named {
        req = req.header("mcp-name", name);
    }
    if let Some(token) = bearer {
        req = req.bearer_auth(token);
    }
    let text = req
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let messages = jsonrpc_messages(&text);
    assert!(!messages.is_empty(), "no JSON-RPC message in {text:?}");
    messages
}

/// The JSON-RPC messages of an MCP response body, plain JSON or SSE (`data:`
/// lines), in order.
pub fn jsonrpc_messages(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `trawl dev` with `/mcp` open on loopback (no keys, no OAuth) and the
/// upstream servers of `tools_yaml` behind it (see [`open_gateway`]).
pub struct OpenGateway {
    pub dev: Role,
    pub port: u16,
    _dep: Deployment,
    _config: tempfile::TempDir,
}

/// Starts `bin dev` with `/mcp` open on `127.0.0.1:<port>`, the tools config
/// `tools_yaml` and `env` on top; returns once it listens.
pub async fn open_gateway(bin: &str, tools_yaml: &str, env: &[(&str, &str)]) -> OpenGateway {
    let port = free_port();
    let config = tempfile::tempdir().unwrap();
    let tools = config.path().join("tools.yaml");
    std::fs::write(&tools, tools_yaml).unwrap();
    let dep = Deployment::new(bin, SimConfig::default())
        .await
        .with_env("TRAWL_LISTEN", &format!("127.0.0.1:{port}"))
        .with_env("TRAWL_API_KEYS", "")
        .with_env("TRAWL_ADMIN_KEYS", "")
        .with_env("TRAWL_TOOLS_CONFIG", tools.to_str().unwrap());
    let mut dev = dep.spawn_with("dev", "dev", env);
    dev.api_url().await;
    wait_for_port(port, Duration::from_secs(10)).await;
    OpenGateway {
        dev,
        port,
        _dep: dep,
        _config: config,
    }
}
