//! The command line: parses arguments, wires roles, maps outcomes to exit codes.
//! `main.rs` only calls [`main`], so the end-to-end tests can build the same
//! program as a binary of their own.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use trawl_core::ports::JobStore;

use crate::embedded::{Embedded, Options, Upstream};
use crate::models::DetectorArgs;
use crate::output::Summary;
use crate::progress::Progress;
use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use secrecy::SecretString;
use tokio_util::sync::CancellationToken;
use trawl_brightdata::BrightDataConfig;
use trawl_core::model::{JobId, JobStatus};
use trawl_core::plan::plan;
use trawl_core::spec::JobSpec;
use trawl_queue::QueueConfig;
use trawl_sim::{Faults, SimConfig, parse_latency};
use trawl_tools::guard::Judge;
use trawl_worker::WorkerConfig;
use trawl_worker::browse::Browsers;
use trawl_worker::models::Models;

/// Exit codes, documented in the README.
mod exit {
    pub const SUCCEEDED: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const INVALID: u8 = 2;
    pub const PARTIAL: u8 = 3;
    pub const FAILED: u8 = 4;
    pub const CANCELLED: u8 = 5;
    pub const AWAITING_APPROVAL: u8 = 6;
}

#[derive(Parser)]
#[command(
    name = "trawl",
    version,
    about = "Research jobs at scale: searches and pages through Bright Data, cached, retried, validated, costed."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The detail of exported traces (with an OTLP endpoint): `info`, a span per
    /// slice and per tool call; `debug` adds each upstream HTTP request and store
    /// call.
    #[arg(long, env = "TRAWL_TRACE_LEVEL", global = true, default_value_t = trawl_telemetry::DEFAULT_TRACE_LEVEL)]
    trace_level: tracing::Level,
}

#[derive(Subcommand)]
enum Command {
    /// Run a job file (YAML or JSON) to its end in this process.
    Run {
        /// The job spec.
        job_file: PathBuf,
        /// Output folder for items.jsonl, rejections.jsonl and summary.json
        /// [default: out/<job name>].
        #[arg(long)]
        out: Option<PathBuf>,
        /// Approve the job's spend without asking.
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Approve a job awaiting approval, then run it.
    Approve {
        job_id: String,
        #[arg(long)]
        out: Option<PathBuf>,
        /// Who approves, for the audit trail.
        #[arg(long, env = "USER", default_value = "cli")]
        by: String,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Decline a job awaiting approval; it ends cancelled.
    Reject {
        job_id: String,
        #[arg(long, env = "USER", default_value = "cli")]
        by: String,
        #[arg(long, env = "TRAWL_HOME", default_value = ".trawl")]
        state: PathBuf,
    },
    /// Check a job file and show its plan and cost estimate; runs nothing.
    Plan { job_file: PathBuf },
    /// Serve the HTTP API (deployed shape: Postgres, NATS JetStream, Redis).
    Api {
        #[command(flatten)]
        deploy: DeployArgs,
    },
    /// Run the scheduler: plans, publishes, finishes and reconciles every job.
    Scheduler {
        #[command(flatten)]
        deploy: DeployArgs,
    },
    /// Run a stateless worker; start as many as needed.
    Worker {
        #[command(flatten)]
        deploy: DeployArgs,
        /// The pool: `standard` takes every slice but browser sessions;
        /// `isolated` takes only browser sessions (run it in the sandboxed pool).
        #[arg(long, env = "TRAWL_WORKER_POOL", default_value = "standard", value_parser = parse_pool)]
        pool: trawl_core::model::Pool,
    },
    /// API, scheduler and a worker in one process on the embedded adapters.
    Dev {
        #[command(flatten)]
        deploy: DeployArgs,
        /// State folder: store and cache.
        #[arg(long, env = "TRAWL_HOME", default_value = ".trawl")]
        state: PathBuf,
    },
    /// Apply the Postgres migrations and exit.
    Migrate {
        #[command(flatten)]
        deploy: DeployArgs,
    },
    /// Submit a job file to a running API; with --wait, follow it to its end.
    Submit {
        job_file: PathBuf,
        /// The API's base URL.
        #[arg(long, env = "TRAWL_API", default_value = "http://127.0.0.1:8080")]
        api: String,
        /// Bearer key for the API.
        #[arg(long, env = "TRAWL_API_KEY", hide_env_values = true)]
        api_key: Option<String>,
        /// Follow the job until it ends.
        #[arg(long)]
        wait: bool,
        /// With --wait: write items.jsonl, rejections.jsonl and summary.json here.
        #[arg(long, requires = "wait")]
        out: Option<PathBuf>,
        /// Sent as Idempotency-Key: a retried submit does not create a second job.
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// The tool layer: catalog, search, scanner, pins and tool approvals.
    Tools(crate::tools_cli::ToolsArgs),
    /// The workers that reported to the store: pool, models, browser, last report.
    Workers(crate::workers_cli::WorkersArgs),
    /// The tool guard detector's model: `install` puts it where every role finds it.
    Models(crate::models::ModelsArgs),
    /// Delete the jobs past their retention (`--dry-run`: list them), and show the
    /// cost ledger by month.
    Gc(crate::gc_cli::GcArgs),
    /// Log trawl in to a protected upstream MCP server (`auth: login` in the
    /// tools file): OAuth authorization code with PKCE S256; the grant is sealed
    /// in the credential vault and refreshed before it expires.
    Login {
        /// The server's name in the tools file.
        server: String,
        /// The tools file.
        #[arg(long, env = "TRAWL_TOOLS_CONFIG")]
        config: PathBuf,
        /// State folder (the vault is `<state>/credentials` unless
        /// TRAWL_CREDENTIALS_DIR says otherwise).
        #[arg(long, env = "TRAWL_HOME", default_value = ".trawl")]
        state: PathBuf,
    },
    /// Request a health path of a running role and exit 0 when it answers 2xx,
    /// 1 otherwise: the container health check of images with no shell or curl
    /// (`trawl probe http://127.0.0.1:9090/readyz`).
    Probe {
        /// The URL to GET, e.g. http://127.0.0.1:8080/readyz.
        url: String,
        /// How long to wait for the answer.
        #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
    /// Serve the Bright Data simulator.
    Sim {
        #[arg(long, default_value_t = 8790)]
        port: u16,
        /// Address to bind.
        #[arg(long, default_value = "127.0.0.1")]
        bind: std::net::IpAddr,
        #[command(flatten)]
        sim: SimArgs,
    },
}

#[derive(Args, Clone)]
struct SimArgs {
    /// Injected fault shares, e.g. 429=0.05,502=0.05,timeout=0.02.
    #[arg(long, env = "TRAWL_SIM_FAULTS", default_value = "")]
    sim_faults: String,
    /// Latency added to every simulated answer, e.g. 20ms.
    #[arg(long, env = "TRAWL_SIM_LATENCY", default_value = "0s")]
    sim_latency: String,
}

impl SimArgs {
    fn config(&self) -> anyhow::Result<SimConfig> {
        Ok(SimConfig::default()
            .with_faults(Faults::parse(&self.sim_faults).context("--sim-faults")?)
            .with_latency(parse_latency(&self.sim_latency).context("--sim-latency")?))
    }
}

/// What jobs may ask, for `run` and the roles alike.
#[derive(Args, Clone)]
struct JobLimits {
    /// Jobs that can have more slices than this are refused (followed pages
    /// counted at their maximum).
    #[arg(long, env = "TRAWL_MAX_SLICES", default_value_t = trawl_core::spec::DEFAULT_MAX_SLICES)]
    max_slices: u64,
    /// What each tenant may submit through the API: `tenant:limit=value,…`
    /// entries separated by `;`, `*` for every tenant not named (limits
    /// slices_per_job, slices_in_flight, concurrent_jobs, jobs_per_day,
    /// usd_per_day, usd_per_month, approve_above_usd; a number or `off`). Unset:
    /// a job above $10 waits for approval, nothing else is limited.
    #[arg(long, env = "TRAWL_TENANT_LIMITS", default_value = "", value_parser = tenant_limits)]
    tenant_limits: trawl_core::tenant::TenantLimits,
    #[command(flatten)]
    keep: crate::gc_cli::Retention,
}

fn tenant_limits(raw: &str) -> Result<trawl_core::tenant::TenantLimits, String> {
    trawl_core::tenant::TenantLimits::parse(raw)
}

/// Settings of the deployed roles; `docs/configuration.md` is the reference.
#[derive(Args, Clone)]
struct DeployArgs {
    /// Postgres: jobs, slices, items, trace, costs, approvals.
    #[arg(
        long,
        env = "TRAWL_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/trawl"
    )]
    database_url: String,
    /// Postgres connections per process.
    #[arg(long, env = "TRAWL_DATABASE_POOL", default_value_t = 16)]
    database_pool: u32,
    /// A read replica of the database (a hot standby): the API reads jobs'
    /// items, rejections, trace and artifacts there. Unset: the primary.
    #[arg(long, env = "TRAWL_DATABASE_READ_URL")]
    database_read_url: Option<String>,
    /// NATS with JetStream: slices and events.
    #[arg(long, env = "TRAWL_NATS_URL", default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
    /// Prefix of NATS subjects and stream names.
    #[arg(long, env = "TRAWL_NATS_PREFIX", default_value = "trawl")]
    nats_prefix: String,
    /// How long a delivered slice may go without an ack or a heartbeat.
    #[arg(long, env = "TRAWL_ACK_WAIT", default_value = "30s", value_parser = humantime::parse_duration)]
    ack_wait: Duration,
    /// Deliveries of a slice before it is recorded failed.
    #[arg(long, env = "TRAWL_MAX_DELIVER", default_value_t = 5)]
    max_deliver: u32,
    /// Delays before a slice whose upstream failed transiently is delivered again.
    #[arg(long, env = "TRAWL_REDELIVER", default_value = "2s,10s,30s,60s", value_delimiter = ',', value_parser = humantime::parse_duration)]
    redeliver: Vec<Duration>,
    /// Redis: the content cache.
    #[arg(
        long,
        env = "TRAWL_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    redis_url: String,
    /// Prefix of the cache's Redis keys.
    #[arg(long, env = "TRAWL_REDIS_PREFIX", default_value = "")]
    redis_prefix: String,
    /// How long a worker's single-flight lock on a cache key lives without being
    /// renewed (its holder renews it while the call runs): how long a killed
    /// worker's locks stand. Must be shorter than TRAWL_ACK_WAIT. Default: 5s,
    /// or half the ack wait when that is shorter.
    #[arg(long, env = "TRAWL_CACHE_LOCK_TTL", value_parser = humantime::parse_duration)]
    cache_lock_ttl: Option<Duration>,
    /// Address the API listens on.
    #[arg(long, env = "TRAWL_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Address of the operations listener (`/healthz`, `/readyz`, `/metrics`)
    /// of `trawl scheduler`, `trawl worker` and `trawl api`; none when unset
    /// (the API then serves `/metrics` on its own port).
    #[arg(long, env = "TRAWL_OPS_LISTEN")]
    ops_listen: Option<SocketAddr>,
    /// Bearer keys the API accepts, comma-separated, each `name:secret` (shown
    /// as `key:name` in audits and as jobs' owner) or a bare secret. A key sees
    /// only the jobs it submitted.
    #[arg(
        long,
        env = "TRAWL_API_KEYS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    api_keys: Vec<String>,
    /// Admin keys, comma-separated, as TRAWL_API_KEYS: they see every job and
    /// decide approvals.
    #[arg(
        long,
        env = "TRAWL_ADMIN_KEYS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    admin_keys: Vec<String>,
    /// The access-token claim naming a caller's tenant (for example `org_id`):
    /// callers of one tenant share their jobs. Unset: every caller sees only
    /// its own.
    #[arg(long, env = "TRAWL_TENANT_CLAIM")]
    tenant_claim: Option<String>,
    /// This server's canonical URI (RFC 8707): OAuth access tokens must name it in
    /// `aud`. With --oauth-issuer, `/mcp` and the REST API require a valid token
    /// or API key.
    #[arg(long, env = "TRAWL_RESOURCE_URI", requires = "oauth_issuer")]
    resource_uri: Option<String>,
    /// The authorization server's issuer; its keys are found by RFC 8414 or
    /// OpenID Connect discovery from there.
    #[arg(long, env = "TRAWL_OAUTH_ISSUER", requires = "resource_uri")]
    oauth_issuer: Option<String>,
    /// `Host` values the API answers as besides loopback names and the address
    /// a client connected to, comma-separated (`trawl.example.com`,
    /// `proxy:8443`): the names a reverse proxy or a public URL reaches it by
    /// (DNS-rebinding protection, every route). The OAuth resource URI's and
    /// the Slack public URL's hosts are added.
    #[arg(long, env = "TRAWL_ALLOWED_HOSTS", value_delimiter = ',')]
    allowed_hosts: Vec<String>,
    /// Browser origins besides the server's own that may change state,
    /// comma-separated (`https://console.example.com`, `http://localhost:*`);
    /// `/mcp` also takes loopback origins on any port.
    #[arg(long, env = "TRAWL_ALLOWED_ORIGINS", value_delimiter = ',')]
    allowed_origins: Vec<String>,
    /// The API closes a connection whose request line and headers take longer.
    #[arg(long, env = "TRAWL_HTTP_HEADER_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    http_header_timeout: Duration,
    /// The API answers 408 and closes a connection whose request body takes longer.
    #[arg(long, env = "TRAWL_HTTP_BODY_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    http_body_timeout: Duration,
    /// Connections the API keeps open at once from one client address.
    #[arg(long, env = "TRAWL_HTTP_MAX_CONNECTIONS_PER_IP", default_value_t = 256)]
    http_max_connections_per_ip: usize,
    /// Job submissions a second per caller (`POST /v1/jobs`, `research.submit_job`).
    #[arg(long, env = "TRAWL_RATE_JOBS", default_value_t = 10)]
    rate_jobs: u32,
    /// Job submissions per caller at once after a quiet spell.
    #[arg(long, env = "TRAWL_RATE_JOBS_BURST", default_value_t = 50)]
    rate_jobs_burst: u32,
    /// `/mcp` requests a second per caller.
    #[arg(long, env = "TRAWL_RATE_MCP", default_value_t = 50)]
    rate_mcp: u32,
    /// `/mcp` requests per caller at once after a quiet spell.
    #[arg(long, env = "TRAWL_RATE_MCP_BURST", default_value_t = 200)]
    rate_mcp_burst: u32,
    /// MCP sessions one caller holds; a new one closes its least recently used idle one.
    #[arg(long, env = "TRAWL_MCP_SESSIONS_PER_CALLER", default_value_t = 64)]
    mcp_sessions_per_caller: usize,
    /// MCP sessions in all; a new one beyond is refused (429).
    #[arg(long, env = "TRAWL_MCP_SESSIONS_TOTAL", default_value_t = 10_000)]
    mcp_sessions_total: usize,
    /// An MCP session without a request for this long is closed.
    #[arg(long, env = "TRAWL_MCP_SESSION_IDLE", default_value = "30m", value_parser = humantime::parse_duration)]
    mcp_session_idle: Duration,
    /// Slices a worker runs at the same time.
    #[arg(long, env = "TRAWL_WORKER_CONCURRENCY", default_value_t = 32)]
    concurrency: usize,
    /// Timeout of one upstream attempt.
    #[arg(long, env = "TRAWL_CALL_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    call_timeout: Duration,
    /// After SIGTERM, how long a worker's slices in flight may take to finish.
    #[arg(long, env = "TRAWL_STOP_GRACE", default_value = "30s", value_parser = humantime::parse_duration)]
    stop_grace: Duration,
    /// How often the scheduler looks at every live job.
    #[arg(long, env = "TRAWL_RECONCILE_EVERY", default_value = "2s", value_parser = humantime::parse_duration)]
    reconcile_every: Duration,
    /// Upstream MCP servers and tool policies (YAML).
    #[arg(long, env = "TRAWL_TOOLS_CONFIG")]
    tools_config: Option<PathBuf>,
    #[command(flatten)]
    detector: DetectorArgs,
    /// How often workers list the upstream servers and read the tool pins again.
    #[arg(long, env = "TRAWL_TOOLS_REFRESH", default_value = "60s", value_parser = humantime::parse_duration)]
    tools_refresh: Duration,
    /// Slack's incoming webhook: the scheduler posts every approval there, with
    /// Approve and Reject buttons.
    #[arg(long, env = "TRAWL_SLACK_WEBHOOK_URL", hide_env_values = true)]
    slack_webhook_url: Option<String>,
    /// The Slack app's signing secret: the API takes clicks on the buttons at
    /// /v1/integrations/slack/interactions, checked with it.
    #[arg(long, env = "TRAWL_SLACK_SIGNING_SECRET", hide_env_values = true)]
    slack_signing_secret: Option<String>,
    /// Hosts besides hooks.slack.com a click's response_url may name,
    /// comma-separated (a proxy; tests).
    #[arg(long, env = "TRAWL_SLACK_RESPONSE_HOSTS", value_delimiter = ',')]
    slack_response_hosts: Vec<String>,
    /// Who may decide approvals in Slack, comma-separated: user ids (`U…`,
    /// `W…`) and user group ids (`S…`). Clicks of anyone else are refused and
    /// audited; without approvers every click is.
    #[arg(long, env = "TRAWL_SLACK_APPROVERS", value_delimiter = ',')]
    slack_approvers: Vec<String>,
    /// A Slack bot token with `usergroups:read`: reads the members of the user
    /// groups among TRAWL_SLACK_APPROVERS.
    #[arg(long, env = "TRAWL_SLACK_BOT_TOKEN", hide_env_values = true)]
    slack_bot_token: Option<String>,
    /// Slack's Web API (a proxy; tests).
    #[arg(
        long,
        env = "TRAWL_SLACK_API_URL",
        default_value = "https://slack.com/api/"
    )]
    slack_api_url: String,
    /// A generic outgoing webhook: every approval is POSTed there as signed JSON.
    #[arg(long, env = "TRAWL_WEBHOOK_URL", hide_env_values = true)]
    webhook_url: Option<String>,
    /// The secret the outgoing webhook's bodies are signed with (HMAC-SHA256).
    #[arg(long, env = "TRAWL_WEBHOOK_SECRET", hide_env_values = true)]
    webhook_secret: Option<String>,
    /// How long an approval waits for a decision before it expires (its job is
    /// cancelled, its tool stays out); 0: it waits forever.
    #[arg(long, env = "TRAWL_APPROVAL_TTL", default_value = "24h", value_parser = humantime::parse_duration)]
    approval_ttl: Duration,
    /// This API's public base URL, for links in Slack and webhook messages.
    #[arg(long, env = "TRAWL_PUBLIC_URL")]
    public_url: Option<String>,
    #[command(flatten)]
    sim: SimArgs,
    #[command(flatten)]
    limits: JobLimits,
}

impl DeployArgs {
    /// Every setting read and checked once: a bad one does not hide the next,
    /// every problem is listed, and the role does not start.
    fn settings(&self, state_dir: Option<&Path>) -> anyhow::Result<crate::deployed::Settings> {
        let mut problems = Problems::default();
        let (upstream, prices) = problems.upstream(&self.sim);
        let keys = problems.take(self.keys());
        let approvals = problems.take(self.approvals());
        let oauth = problems.take(self.oauth());
        let home = state_dir.map_or_else(
            || PathBuf::from(std::env::var("TRAWL_HOME").unwrap_or_else(|_| ".trawl".into())),
            Path::to_path_buf,
        );
        let tools = problems.take(tools_config(self.tools_config.as_deref(), &home));
        let (models, judge) = problems.models();
        let browse_egress = problems.take(
            Browsers::egress_from_lookup(|k| std::env::var(k).ok())
                .map(Option::unwrap_or_default)
                .map_err(anyhow::Error::msg),
        );
        let browsers = problems.take(
            Browsers::from_lookup(
                |k| std::env::var(k).ok(),
                std::env::vars(),
                prices.unwrap_or_default(),
            )
            .map_err(anyhow::Error::msg),
        );
        let (nats, redis, worker) = self.queue_and_cache();
        problems.take(self.check_timing(&nats));
        problems.check()?;
        let (
            Some(judge),
            Some(upstream),
            Some(prices),
            Some(keys),
            Some((notify, slack)),
            Some(oauth),
            Some(tools),
            Some(models),
            Some(browse_egress),
            Some(browsers),
        ) = (
            judge,
            upstream,
            prices,
            keys,
            approvals,
            oauth,
            tools,
            models,
            browse_egress,
            browsers,
        )
        else {
            anyhow::bail!("a setting was neither read nor reported");
        };
        Ok(crate::deployed::Settings {
            database_url: self.database_url.clone(),
            database_pool: self.database_pool,
            database_read_url: self.database_read_url.clone(),
            nats,
            redis,
            listen: self.listen,
            ops_listen: self.ops_listen,
            api_keys: keys,
            roles: Options::new(state_dir.unwrap_or(Path::new("")), upstream)
                .with_prices(prices)
                .with_call_timeout(self.call_timeout)
                .with_worker(worker)
                .with_scheduler(
                    trawl_scheduler::ServiceConfig::default()
                        .with_reconcile_every(self.reconcile_every)
                        .with_retention(self.limits.keep.retention),
                )
                .with_tools(tools)
                .with_models(Some(models))
                .with_browsers(Arc::new(browsers))
                .with_detector(self.detector.clone())
                .with_judge(judge)
                .with_max_slices(self.limits.max_slices)
                .with_tenant_limits(self.limits.tenant_limits.clone()),
            browse_egress,
            tools_refresh: self.tools_refresh,
            oauth,
            site: trawl_api::SiteConfig::new()
                .with_hosts(&self.allowed_hosts)
                .map_err(|e| anyhow::anyhow!("TRAWL_ALLOWED_HOSTS: {e}"))?
                .with_origins(&self.allowed_origins)
                .map_err(|e| anyhow::anyhow!("TRAWL_ALLOWED_ORIGINS: {e}"))?,
            notify,
            slack,
            http_limits: trawl_api::HttpLimits::default()
                .with_header_read_timeout(self.http_header_timeout)
                .with_body_read_timeout(self.http_body_timeout)
                .with_max_connections_per_ip(self.http_max_connections_per_ip),
            rate_limits: trawl_api::RateLimits::default()
                .with_jobs(trawl_api::RateLimit::per_second(
                    self.rate_jobs,
                    self.rate_jobs_burst,
                ))
                .with_mcp(trawl_api::RateLimit::per_second(
                    self.rate_mcp,
                    self.rate_mcp_burst,
                )),
            mcp_sessions: trawl_api::SessionLimits::new(
                self.mcp_sessions_per_caller,
                self.mcp_sessions_total,
                self.mcp_session_idle,
            ),
        })
    }

    /// The queue's, the cache's and the worker's settings, which depend on each
    /// other's timing (see [`DeployArgs::check_timing`]).
    fn queue_and_cache(
        &self,
    ) -> (
        trawl_queue::nats::NatsConfig,
        trawl_cache::RedisConfig,
        WorkerConfig,
    ) {
        // One schedule for both kinds of redelivery. A slice not acked in time
        // (its worker died) comes back after the ack wait plus the redelivery
        // delay of its delivery, as a transiently failing one does; JetStream then
        // also adds that step to a nak's delay, which the adapter takes off, so a
        // nak lands when the worker asks. JetStream wants fewer steps than
        // deliveries.
        let steps = self.max_deliver.saturating_sub(1) as usize;
        let backoff: Vec<Duration> = std::iter::once(Duration::ZERO)
            .chain(self.redeliver.iter().copied())
            .take(steps)
            .collect();
        let nats = trawl_queue::nats::NatsConfig::new(&self.nats_url)
            .with_prefix(&self.nats_prefix)
            .with_ack_wait(self.ack_wait)
            .with_max_deliver(self.max_deliver)
            .with_backoff(backoff);
        // A waiter gives up on another worker's load after one call's time.
        let redis = trawl_cache::RedisConfig::new(&self.redis_url)
            .with_key_prefix(&self.redis_prefix)
            .with_lock_ttl(self.lock_ttl())
            .with_wait_limit(self.call_timeout);
        let worker = WorkerConfig::default()
            .with_concurrency(self.concurrency)
            .with_redeliver(self.redeliver.clone())
            .with_stop_grace(self.stop_grace)
            .with_shared_budget(true)
            .with_heartbeat(heartbeat(self.ack_wait));
        (nats, redis, worker)
    }

    /// TRAWL_CACHE_LOCK_TTL, or its default: 5 s, or half the ack wait when
    /// that is shorter (at least [`MIN_LOCK_TTL`]).
    fn lock_ttl(&self) -> Duration {
        self.cache_lock_ttl.unwrap_or_else(|| {
            trawl_cache::DEFAULT_LOCK_TTL
                .min(self.ack_wait / 2)
                .max(MIN_LOCK_TTL)
        })
    }

    /// The queue's settings, and the timings that must agree with each other: a
    /// slice in progress tells the queue so every heartbeat (a third of the ack
    /// wait), and a killed worker's cache locks must lapse before the queue
    /// delivers its slices again (the lock lifetime below the ack wait), or the
    /// workers that get them wait on the dead worker's locks.
    fn check_timing(&self, nats: &trawl_queue::nats::NatsConfig) -> anyhow::Result<()> {
        if let Err(e) = nats.validate() {
            let setting = match e.field {
                "prefix" => "TRAWL_NATS_PREFIX",
                "ack_wait" => "TRAWL_ACK_WAIT",
                "max_deliver" => "TRAWL_MAX_DELIVER",
                other => other,
            };
            anyhow::bail!("{setting}: {}", e.rule);
        }
        let (ack_wait, lock, call) = (self.ack_wait, self.lock_ttl(), self.call_timeout);
        let shown = |d: Duration| humantime::format_duration(d).to_string();
        if heartbeat(ack_wait) >= ack_wait {
            anyhow::bail!(
                "TRAWL_ACK_WAIT ({}) must be longer than 100ms: a slice in progress \
                 tells the queue so every third of it, at least every 100ms",
                shown(ack_wait)
            );
        }
        if lock < MIN_LOCK_TTL {
            anyhow::bail!(
                "TRAWL_CACHE_LOCK_TTL ({}) must be at least {}: its holder renews it every third of it",
                shown(lock),
                shown(MIN_LOCK_TTL)
            );
        }
        if lock >= ack_wait {
            anyhow::bail!(
                "TRAWL_CACHE_LOCK_TTL ({}) must be shorter than TRAWL_ACK_WAIT ({}): a killed \
                 worker's cache locks would still stand when its slices are delivered again",
                shown(lock),
                shown(ack_wait)
            );
        }
        if call.is_zero() {
            anyhow::bail!("TRAWL_CALL_TIMEOUT must be longer than 0");
        }
        Ok(())
    }

    /// Approvals in Slack and the outgoing webhook: the notifier's settings, and
    /// the API's Slack interactions when a signing secret is given. Every URL is
    /// checked here, so a typo stops the role at start, not at the first approval.
    fn approvals(
        &self,
    ) -> anyhow::Result<(
        trawl_notify::NotifyConfig,
        Option<crate::deployed::SlackInteractions>,
    )> {
        fn given(v: &Option<String>) -> Option<&str> {
            v.as_deref().map(str::trim).filter(|v| !v.is_empty())
        }
        let slack_webhook = given(&self.slack_webhook_url)
            .map(|u| outbound_url("TRAWL_SLACK_WEBHOOK_URL", u))
            .transpose()?;
        let webhook = match (given(&self.webhook_url), given(&self.webhook_secret)) {
            (Some(url), Some(secret)) => Some(trawl_notify::Webhook {
                url: outbound_url("TRAWL_WEBHOOK_URL", url)?,
                secret: SecretString::from(secret.to_owned()),
            }),
            (Some(_), None) => anyhow::bail!(
                "TRAWL_WEBHOOK_URL is set without TRAWL_WEBHOOK_SECRET: the webhook's bodies are signed with it"
            ),
            (None, Some(_)) => {
                anyhow::bail!("TRAWL_WEBHOOK_SECRET is set without TRAWL_WEBHOOK_URL")
            }
            (None, None) => None,
        };
        let public_url = given(&self.public_url)
            .map(|u| {
                let mut url = url::Url::parse(u)
                    .ok()
                    .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
                    .ok_or_else(|| {
                        anyhow::anyhow!("TRAWL_PUBLIC_URL: {u:?} is not an http(s) URL")
                    })?;
                if !url.path().ends_with('/') {
                    url.set_path(&format!("{}/", url.path()));
                }
                Ok::<_, anyhow::Error>(url)
            })
            .transpose()?;
        let mut hosts = Vec::new();
        for h in self.slack_response_hosts.iter().map(|h| h.trim()) {
            if h.is_empty() {
                continue;
            }
            if h.contains(['/', ' ', '@', '?', '#']) {
                anyhow::bail!(
                    "TRAWL_SLACK_RESPONSE_HOSTS: {h:?} is not a host name (no scheme, port or path)"
                );
            }
            hosts.push(h.to_owned());
        }
        let directory = match given(&self.slack_bot_token) {
            Some(token) => Some((
                SecretString::from(token.to_owned()),
                outbound_url("TRAWL_SLACK_API_URL", &self.slack_api_url)?,
            )),
            None => None,
        };
        let slack =
            given(&self.slack_signing_secret).map(|secret| crate::deployed::SlackInteractions {
                signing_secret: SecretString::from(secret.to_owned()),
                response_hosts: hosts,
                directory: directory.clone(),
                approvers: self
                    .slack_approvers
                    .iter()
                    .map(|a| a.trim().to_owned())
                    .filter(|a| !a.is_empty())
                    .collect(),
                public_url: public_url.clone(),
            });
        let ttl = (!self.approval_ttl.is_zero()).then_some(self.approval_ttl);
        let notify = trawl_notify::NotifyConfig::default()
            .with_slack_webhook(slack_webhook)
            .with_webhook(webhook)
            .with_ttl(ttl)
            .with_public_url(public_url)
            .with_every(self.reconcile_every);
        Ok((notify, slack))
    }

    /// The resource server's configuration, when both settings are given.
    fn oauth(&self) -> anyhow::Result<Option<trawl_api::OAuthConfig>> {
        let (Some(resource), Some(issuer)) = (&self.resource_uri, &self.oauth_issuer) else {
            if self.tenant_claim.is_some() {
                anyhow::bail!(
                    "TRAWL_TENANT_CLAIM is set without OAuth (TRAWL_RESOURCE_URI, TRAWL_OAUTH_ISSUER): tenants come from tokens"
                );
            }
            return Ok(None);
        };
        let resource = trawl_core::resource::ResourceUri::parse(resource)
            .map_err(|e| anyhow::anyhow!("TRAWL_RESOURCE_URI: {e}"))?;
        let mut config = trawl_api::OAuthConfig::new(resource, issuer)
            .map_err(|e| anyhow::anyhow!("TRAWL_OAUTH_ISSUER: {e}"))?;
        if let Some(claim) = self.tenant_claim.as_deref().map(str::trim) {
            config = config
                .with_tenant_claim(claim)
                .map_err(|e| anyhow::anyhow!("TRAWL_TENANT_CLAIM: {e}"))?;
        }
        Ok(Some(config))
    }

    /// The API keys (`TRAWL_API_KEYS`) and admin keys (`TRAWL_ADMIN_KEYS`); two
    /// keys of one name, or one secret twice, are refused.
    fn keys(&self) -> anyhow::Result<Vec<trawl_api::ApiKey>> {
        let given = |list: &[String], setting: &str, admin: bool| {
            list.iter()
                .filter(|k| !k.trim().is_empty())
                .map(|k| {
                    let key = trawl_api::ApiKey::parse(k)
                        .map_err(|e| anyhow::anyhow!("{setting}: {e}"))?;
                    Ok(if admin { key.admin() } else { key })
                })
                .collect::<anyhow::Result<Vec<_>>>()
        };
        let mut keys = given(&self.api_keys, "TRAWL_API_KEYS", false)?;
        keys.extend(given(&self.admin_keys, "TRAWL_ADMIN_KEYS", true)?);
        let mut names = std::collections::HashSet::new();
        for name in keys.iter().filter_map(trawl_api::ApiKey::name) {
            if !names.insert(name) {
                anyhow::bail!("TRAWL_API_KEYS / TRAWL_ADMIN_KEYS: two keys are named {name:?}");
            }
        }
        if !trawl_api::ApiKey::distinct(&keys) {
            anyhow::bail!("TRAWL_API_KEYS / TRAWL_ADMIN_KEYS: one secret is given twice");
        }
        Ok(keys)
    }
}

#[derive(Args, Clone)]
struct RunArgs {
    /// State folder: store and cache.
    #[arg(long, env = "TRAWL_HOME", default_value = ".trawl")]
    state: PathBuf,
    /// Slices run at the same time.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Timeout of one upstream attempt, e.g. 30s.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    call_timeout: Duration,
    /// Upstream MCP servers and tool policies (YAML).
    #[arg(long, env = "TRAWL_TOOLS_CONFIG")]
    tools_config: Option<PathBuf>,
    #[command(flatten)]
    detector: DetectorArgs,
    #[command(flatten)]
    sim: SimArgs,
    #[command(flatten)]
    limits: JobLimits,
}

impl RunArgs {
    /// Every setting read and checked once, every problem listed.
    fn options(&self) -> anyhow::Result<Options> {
        let mut problems = Problems::default();
        let (upstream, prices) = problems.upstream(&self.sim);
        let tools = problems.take(tools_config(self.tools_config.as_deref(), &self.state));
        let (models, judge) = problems.models();
        let browsers = problems.take(run_browsers(prices.unwrap_or_default()));
        problems.check()?;
        let (Some(upstream), Some(prices), Some(tools), Some(models), Some(judge), Some(browsers)) =
            (upstream, prices, tools, models, judge, browsers)
        else {
            anyhow::bail!("a setting was neither read nor reported");
        };
        Ok(Options::new(&self.state, upstream)
            .with_prices(prices)
            .with_call_timeout(self.call_timeout)
            .with_worker(WorkerConfig::default().with_concurrency(self.concurrency))
            // One job, watched as it runs: the scheduler looks at it 10 ms after
            // slices finish (not the roles' 100 ms), so it ends as soon as its
            // last slice does. A look is one read of the job's counters.
            .with_scheduler(
                trawl_scheduler::ServiceConfig::default()
                    .with_settle(Duration::from_millis(10))
                    .with_retention(self.limits.keep.retention),
            )
            .with_queue(QueueConfig::default())
            .with_tools(tools)
            .with_detector(self.detector.clone())
            .with_models(Some(models))
            .with_judge(judge)
            .with_browsers(Arc::new(browsers))
            .with_max_slices(self.limits.max_slices)
            .with_tenant_limits(self.limits.tenant_limits.clone()))
    }
}

/// `trawl run`'s browsers: the operator's own machine, so private and loopback
/// destinations are open unless `TRAWL_BROWSE_ALLOW` says otherwise.
fn run_browsers(prices: trawl_core::cost::PriceTable) -> anyhow::Result<Browsers> {
    let (b, opened) = Browsers::from_lookup(|k| std::env::var(k).ok(), std::env::vars(), prices)
        .map_err(anyhow::Error::msg)?
        .open_private_unless_set();
    if opened {
        eprintln!(
            "TRAWL_BROWSE_ALLOW is not set: trawl run lets browser sessions reach private and loopback addresses (not cloud metadata)"
        );
    }
    Ok(b)
}

/// The tools file at `path`, with the credential vault attached when a server
/// logs in with `auth: login` (`TRAWL_CREDENTIALS_DIR`, default
/// `<home>/credentials`, sealed with `TRAWL_SECRET_KEY` or a key made there).
pub(crate) fn tools_config(
    path: Option<&Path>,
    home: &Path,
) -> anyhow::Result<Option<trawl_tools::config::ToolsConfig>> {
    let Some(p) = path else {
        return Ok(None);
    };
    let config = trawl_tools::config::ToolsConfig::load(p)?;
    let logs_in = config.servers.iter().any(|s| {
        matches!(
            &s.upstream.transport,
            trawl_tools::mcp::Transport::Http {
                auth: trawl_tools::auth::UpstreamAuth::Login { .. },
                ..
            }
        )
    });
    if !logs_in {
        return Ok(Some(config));
    }
    Ok(Some(config.with_vault(std::sync::Arc::new(vault(home)?))))
}

/// The credential vault of `trawl login` and of the servers that use its grants.
pub(crate) fn vault(home: &Path) -> anyhow::Result<trawl_tools::auth::Vault> {
    let dir = std::env::var_os("TRAWL_CREDENTIALS_DIR")
        .map_or_else(|| home.join("credentials"), PathBuf::from);
    let key = std::env::var("TRAWL_SECRET_KEY")
        .ok()
        .filter(|k| !k.is_empty())
        .map(SecretString::from);
    Ok(trawl_tools::auth::Vault::open_dir(&dir, key.as_ref())?)
}

/// `trawl login SERVER`: trawl's own grant for a protected upstream.
/// A URL trawl posts to (`setting` names it in errors): https, or http to a
/// loopback address only (a local relay, tests); no credentials in it except
/// in the path, as Slack's webhook URLs carry theirs.
fn outbound_url(setting: &str, raw: &str) -> anyhow::Result<url::Url> {
    let url = url::Url::parse(raw).map_err(|e| anyhow::anyhow!("{setting}: not a URL ({e})"))?;
    let loopback = match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d == "localhost",
        None => false,
    };
    match url.scheme() {
        "https" if url.host().is_some() => {}
        "http" if loopback => {}
        "http" => anyhow::bail!("{setting}: use https (http only to a loopback address)"),
        other => anyhow::bail!("{setting}: {other}: URLs are not supported; use https"),
    }
    if !url.username().is_empty() || url.password().is_some() {
        anyhow::bail!("{setting}: user and password in the URL are not supported");
    }
    Ok(url)
}

/// The models research slices run on, from the environment.
fn models_from_env() -> anyhow::Result<Arc<Models>> {
    let m = Models::from_lookup(|k| std::env::var(k).ok()).map_err(anyhow::Error::msg)?;
    if m.any() {
        eprintln!("trawl: model providers configured for research jobs");
    }
    Ok(Arc::new(m))
}

/// The tool guard's model judge (`TRAWL_GUARD_MODEL`), for the `trawl tools`
/// commands, which read their settings as they start.
pub(crate) fn guard_judge_from_env() -> anyhow::Result<Option<Arc<Judge>>> {
    let Some(model) = std::env::var("TRAWL_GUARD_MODEL").ok() else {
        return Ok(None);
    };
    crate::embedded::guard_judge(Some(&model), &*models_from_env()?)
}

/// How often a slice in progress tells the queue so: a third of the ack wait,
/// at least every 100 ms.
fn heartbeat(ack_wait: Duration) -> Duration {
    (ack_wait / 3).max(Duration::from_millis(100))
}

/// The shortest cache lock lifetime: renewed every third of it, a round trip
/// to Redis must fit.
const MIN_LOCK_TTL: Duration = Duration::from_millis(300);

/// The problems found while reading settings, listed together.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    /// The value, or `None` with its problem noted (once: two readers of one
    /// setting report it once).
    fn take<T>(&mut self, r: anyhow::Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                let problem = format!("{e:#}");
                if !self.0.contains(&problem) {
                    self.0.push(problem);
                }
                None
            }
        }
    }

    /// Where Bright Data is (the API with `BRIGHTDATA_API_TOKEN`, else the
    /// simulator of `sim`) and the price table, each `None` with its problem noted.
    fn upstream(
        &mut self,
        sim: &SimArgs,
    ) -> (Option<Upstream>, Option<trawl_core::cost::PriceTable>) {
        let bd = self.take(
            BrightDataConfig::from_lookup(|k| std::env::var(k).ok()).map_err(anyhow::Error::msg),
        );
        let prices = self.take(
            trawl_brightdata::config::prices_from(&|k| std::env::var(k).ok())
                .map_err(anyhow::Error::msg),
        );
        let sim = self.take(sim.config());
        let upstream = match (bd, sim) {
            (Some(Some(c)), _) => Some(Upstream::BrightData(c)),
            (Some(None), Some(sim)) => Some(Upstream::Simulator(sim)),
            _ => None,
        };
        (upstream, prices)
    }

    /// The model providers (`ANTHROPIC_*`, `OPENAI_*`, `TRAWL_MODEL`,
    /// `TRAWL_MODEL_PRICES`) and the tool guard's judge on them
    /// (`TRAWL_GUARD_MODEL`), each `None` with its problem noted.
    fn models(&mut self) -> (Option<Arc<Models>>, Option<Option<Arc<Judge>>>) {
        let models = self.take(models_from_env());
        let judge = models.as_ref().and_then(|m| {
            self.take(crate::embedded::guard_judge(
                std::env::var("TRAWL_GUARD_MODEL").ok().as_deref(),
                m,
            ))
        });
        (models, judge)
    }

    /// `Err` listing every problem, when there is one.
    fn check(&self) -> anyhow::Result<()> {
        if self.0.is_empty() {
            return Ok(());
        }
        let mut text = format!(
            "{} problem(s) in the settings; nothing was started:",
            self.0.len()
        );
        for p in &self.0 {
            text.push_str("\n  - ");
            text.push_str(p);
        }
        anyhow::bail!(text)
    }
}

async fn login(server: &str, config: &Path, home: &Path) -> anyhow::Result<()> {
    let tools = trawl_tools::config::ToolsConfig::load(config)?;
    let s = tools
        .server(server)
        .ok_or_else(|| anyhow::anyhow!("no server named {server} in {}", config.display()))?;
    let trawl_tools::mcp::Transport::Http { url, auth, .. } = &s.upstream.transport else {
        anyhow::bail!("{server} is a stdio server: nothing to log in to");
    };
    let vault = std::sync::Arc::new(vault(home)?);
    let scopes = trawl_tools::auth::login(server, url, auth, vault, |u| {
        eprintln!("Open this URL in a browser to let trawl reach {server}:\n\n  {u}\n");
        eprintln!("waiting for the redirect…");
    })
    .await?;
    eprintln!(
        "logged in to {server}; granted scopes: {}; the grant is sealed in the credential vault",
        if scopes.is_empty() {
            "(none named)".to_owned()
        } else {
            scopes.join(" ")
        }
    );
    Ok(())
}

/// The program: parses the arguments, runs the command, returns its exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(exit::ERROR);
        }
    };
    let telemetry = {
        let _in_runtime = rt.enter();
        trawl_telemetry::init(cli.command.service_name(), cli.trace_level)
    };
    let code = match rt.block_on(dispatch(cli.command)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit::ERROR)
        }
    };
    // Outside the runtime: the exporter flushes on its own thread.
    telemetry.shutdown();
    code
}

impl Command {
    /// The OpenTelemetry service name of the process (`OTEL_SERVICE_NAME`
    /// overrides it).
    fn service_name(&self) -> &'static str {
        match self {
            Command::Api { .. } => "trawl-api",
            Command::Scheduler { .. } => "trawl-scheduler",
            Command::Worker { .. } => "trawl-worker",
            Command::Dev { .. } => "trawl-dev",
            Command::Sim { .. } => "trawl-sim",
            _ => "trawl",
        }
    }
}

/// One root token, fired by SIGINT or SIGTERM. The handlers are installed
/// before this returns (not when a spawned task first runs), so a signal that
/// comes right after, as soon as the first progress line is out, is not taken
/// by the default disposition and kill the process without a summary.
fn shutdown_token() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    #[cfg(unix)]
    let wait = {
        use tokio::signal::unix::{SignalKind, signal};
        let mut int = signal(SignalKind::interrupt()).ok();
        let mut term = signal(SignalKind::terminate()).ok();
        async move {
            let one = |s: &mut Option<tokio::signal::unix::Signal>| {
                let s = s.take();
                async move {
                    match s {
                        Some(mut s) => {
                            s.recv().await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                }
            };
            tokio::select! {
                () = one(&mut int) => {}
                () = one(&mut term) => {}
            }
        }
    };
    #[cfg(not(unix))]
    let wait = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    tokio::spawn(async move {
        wait.await;
        eprintln!("stopping: finishing slices in flight");
        t.cancel();
    });
    token
}

fn read_spec(path: &Path) -> Result<JobSpec, u8> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", path.display());
            return Err(exit::INVALID);
        }
    };
    JobSpec::parse(&text).map_err(|errs| {
        eprint!("error: {}: {errs}", path.display());
        exit::INVALID
    })
}

fn parse_job_id(s: &str) -> Result<JobId, u8> {
    JobId::parse(s).map_err(|e| {
        eprintln!("error: {e}");
        exit::INVALID
    })
}

fn default_out(name: &str) -> PathBuf {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    Path::new("out").join(safe)
}

async fn dispatch(cmd: Command) -> anyhow::Result<u8> {
    match cmd {
        Command::Run {
            job_file,
            out,
            yes,
            run,
        } => {
            let spec = match read_spec(&job_file) {
                Ok(s) => s,
                Err(code) => return Ok(code),
            };
            let out = out.unwrap_or_else(|| default_out(&spec.name));
            let sys = start(&run).await?;
            let submitted = sys.submit(&spec, yes.then_some("--yes")).await?;
            eprintln!(
                "job {} ({}): {} slices planned, up to {} followed pages, estimate {}",
                submitted.job_id,
                spec.name,
                submitted.estimate.search_slices + submitted.estimate.page_slices,
                submitted.estimate.followed_pages_max,
                submitted.estimate.cost
            );
            let summary = if submitted.status == JobStatus::AwaitingApproval {
                let s = sys.write_pending(&submitted.job_id, &out).await?;
                eprintln!(
                    "awaiting approval: the estimate {} is above approve_above_usd. Approve with: trawl approve {}",
                    submitted.estimate.cost, submitted.job_id
                );
                s
            } else {
                run_to_end(&sys, &submitted.job_id, &out).await?
            };
            sys.shutdown().await;
            Ok(report(&summary, &out))
        }
        Command::Approve {
            job_id,
            out,
            by,
            run,
        } => {
            let id = match parse_job_id(&job_id) {
                Ok(id) => id,
                Err(code) => return Ok(code),
            };
            let sys = start(&run).await?;
            let status = sys.decide(&id, true, &by).await?;
            eprintln!("job {id} approved by {by}: {}", status.as_str());
            let name = sys
                .store()
                .job(&id)
                .await
                .ok()
                .flatten()
                .map(|j| j.name)
                .unwrap_or_default();
            let out = out.unwrap_or_else(|| default_out(&name));
            let summary = run_to_end(&sys, &id, &out).await?;
            sys.shutdown().await;
            Ok(report(&summary, &out))
        }
        Command::Reject { job_id, by, state } => {
            let id = match parse_job_id(&job_id) {
                Ok(id) => id,
                Err(code) => return Ok(code),
            };
            let status = crate::embedded::decide(&state, &id, false, &by).await?;
            eprintln!("job {id} declined by {by}: {}", status.as_str());
            Ok(exit::SUCCEEDED)
        }
        Command::Plan { job_file } => {
            let spec = match read_spec(&job_file) {
                Ok(s) => s,
                Err(code) => return Ok(code),
            };
            let prices = trawl_brightdata::config::prices_from(&|k| std::env::var(k).ok())
                .map_err(anyhow::Error::msg)?;
            let p = plan(&spec, &prices);
            let out = serde_json::json!({
                "name": spec.name,
                "slices": p.slices.len(),
                "estimate": p.estimate,
                "estimate_usd": p.estimate.cost.usd(),
                "needs_approval": spec.budget.approve_above.is_some_and(|a| p.estimate.cost > a),
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
            Ok(exit::SUCCEEDED)
        }
        Command::Api { deploy } => {
            crate::deployed::api(&deploy.settings(None)?, shutdown_token()).await?;
            Ok(exit::SUCCEEDED)
        }
        Command::Scheduler { deploy } => {
            crate::deployed::scheduler(&deploy.settings(None)?, shutdown_token()).await?;
            Ok(exit::SUCCEEDED)
        }
        Command::Worker { deploy, pool } => {
            crate::deployed::worker(&deploy.settings(None)?, pool, shutdown_token()).await?;
            Ok(exit::SUCCEEDED)
        }
        Command::Dev { deploy, state } => {
            crate::deployed::dev(&deploy.settings(Some(&state))?, shutdown_token()).await?;
            Ok(exit::SUCCEEDED)
        }
        Command::Migrate { deploy } => {
            crate::deployed::migrate(&deploy.settings(None)?).await?;
            eprintln!("migrations applied");
            Ok(exit::SUCCEEDED)
        }
        Command::Probe { url, timeout } => Ok(match crate::client::probe(&url, timeout).await {
            Ok(()) => exit::SUCCEEDED,
            Err(e) => {
                eprintln!("{url}: {e:#}");
                exit::ERROR
            }
        }),
        Command::Submit {
            job_file,
            api,
            api_key,
            wait,
            out,
            idempotency_key,
        } => {
            let client = crate::client::Client::new(&api, api_key)?;
            let submitted = match client.submit(&job_file, idempotency_key.as_deref()).await? {
                Ok(s) => s,
                Err(problem) => {
                    eprint!("error: {}: {problem}", job_file.display());
                    return Ok(exit::INVALID);
                }
            };
            println!("{}", submitted.job_id);
            if !wait {
                eprintln!("job {} submitted: {}", submitted.job_id, submitted.status);
                return Ok(exit::SUCCEEDED);
            }
            let cancel = shutdown_token();
            let mut progress = Progress::for_stderr();
            let Some(summary) = client
                .wait(&submitted.job_id, &mut progress, &cancel)
                .await?
            else {
                eprintln!("stopped waiting; job {} goes on", submitted.job_id);
                return Ok(exit::CANCELLED);
            };
            match out {
                Some(out) => {
                    client
                        .write_output(&submitted.job_id, &out, &summary)
                        .await?;
                    Ok(report(&summary, &out))
                }
                None => Ok(report_status(&summary)),
            }
        }
        Command::Tools(args) => crate::tools_cli::run(args).await,
        Command::Workers(args) => crate::workers_cli::run(args).await,
        Command::Models(args) => crate::models::run(args).await,
        Command::Gc(args) => crate::gc_cli::run(args).await,
        Command::Login {
            server,
            config,
            state,
        } => login(&server, &config, &state).await.map(|()| 0),
        Command::Sim { port, bind, sim } => {
            let config = sim.config()?;
            let listener = tokio::net::TcpListener::bind(SocketAddr::new(bind, port))
                .await
                .with_context(|| format!("binding {bind}:{port}"))?;
            eprintln!("Bright Data simulator on http://{}", listener.local_addr()?);
            let token = shutdown_token();
            trawl_sim::serve(listener, config, token.cancelled_owned()).await?;
            Ok(exit::SUCCEEDED)
        }
    }
}

async fn start(run: &RunArgs) -> anyhow::Result<Embedded> {
    let options = run.options()?;
    let sys = Embedded::start(options).await?;
    if let Some(sim) = sys.simulator() {
        eprintln!(
            "BRIGHTDATA_API_TOKEN is not set: using the built-in Bright Data simulator at {}",
            sim.base_url()
        );
    }
    Ok(sys)
}

async fn run_to_end(sys: &Embedded, id: &JobId, out: &Path) -> anyhow::Result<Summary> {
    let cancel = shutdown_token();
    let mut progress = Progress::for_stderr();
    sys.run(id, out, &mut progress, &cancel).await
}

fn report(s: &Summary, out: &Path) -> u8 {
    let code = report_status(s);
    eprintln!(
        "wrote {}/{{items.jsonl,rejections.jsonl,summary.json}}",
        out.display()
    );
    code
}

fn report_status(s: &Summary) -> u8 {
    eprintln!(
        "job {} {}: {}/{} slices succeeded, {} failed; items {} valid, {} rejected; {} upstream calls, {} cache hits; cost ${:.4}{}",
        s.job_id,
        s.status.as_str(),
        s.slices.succeeded,
        s.slices.total,
        s.slices.failed,
        s.items.valid,
        s.items.rejected,
        s.upstream_calls,
        s.cache_hits,
        s.cost_usd,
        s.reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    );
    match s.status {
        JobStatus::Succeeded => exit::SUCCEEDED,
        JobStatus::Partial => exit::PARTIAL,
        JobStatus::Failed => exit::FAILED,
        JobStatus::Cancelled => exit::CANCELLED,
        JobStatus::AwaitingApproval => exit::AWAITING_APPROVAL,
        JobStatus::Pending | JobStatus::Queued | JobStatus::Running => exit::ERROR,
    }
}

fn parse_pool(s: &str) -> Result<trawl_core::model::Pool, String> {
    trawl_core::model::Pool::parse(s)
}
