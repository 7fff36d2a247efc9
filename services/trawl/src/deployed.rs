//! The deployed shape: `trawl api`, `trawl scheduler`, `trawl worker` as separate
//! processes over Postgres, NATS JetStream and Redis, and `trawl dev`, the same
//! roles in one process on the embedded adapters.
//!
//! Every role applies the store's migrations at start (under an advisory lock,
//! so roles starting together do not race) and stops on the token it is given:
//! the API drains its connections, the scheduler ends its loops, workers stop
//! pulling and finish or hand back their slices within `stop_grace`.
//!
//! The settings are in [`Settings`]; `docs/configuration.md` is the reference.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use secrecy::SecretString;
use tokio_util::sync::CancellationToken;
use trawl_api::{ApiState, Auth, OpsBackends};
use trawl_cache::{RedisCache, RedisConfig};
use trawl_core::model::Pool;
use trawl_core::ports::{ContentCache, SliceQueue, Store};
use trawl_queue::nats::{NatsConfig, NatsQueue};
use trawl_scheduler::Service;
use trawl_sim::SimHandle;
use trawl_store::PgStore;
use trawl_tools::ToolLayer;
use trawl_worker::Worker;

use crate::embedded::{Embedded, Options};

/// Everything the roles are configured with (flags and environment, see
/// `docs/configuration.md`).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Settings {
    pub database_url: String,
    /// Connections per process.
    pub database_pool: u32,
    /// A read replica of the database the API reads jobs' rows from (items,
    /// rejections, trace, artifacts); `None`: the primary.
    pub database_read_url: Option<String>,
    pub nats: NatsConfig,
    pub redis: RedisConfig,
    /// Where the API listens.
    pub listen: SocketAddr,
    /// Where `/healthz`, `/readyz` and `/metrics` are served apart from the
    /// API (`TRAWL_OPS_LISTEN`): by the scheduler and the workers, and by the
    /// API, which then keeps `/metrics` off its own port.
    pub ops_listen: Option<SocketAddr>,
    /// Bearer keys the API accepts (`TRAWL_API_KEYS`, `TRAWL_ADMIN_KEYS`);
    /// without keys and OAuth the API is open.
    pub api_keys: Vec<trawl_api::ApiKey>,
    /// What the scheduler, the workers and their tool layers run with, as an
    /// embedded run does (`trawl dev` hands it to [`Embedded`] as it is).
    pub roles: Options,
    /// How often a worker lists the upstream servers and reads the pins again,
    /// so a decided tool approval reaches it.
    pub tools_refresh: Duration,
    /// Where browse sessions may connect (`TRAWL_BROWSE_ALLOW`); the API refuses
    /// browse URLs it refuses.
    pub browse_egress: trawl_core::egress::EgressPolicy,
    /// OAuth access tokens for `/mcp` and the REST API (`TRAWL_RESOURCE_URI`,
    /// `TRAWL_OAUTH_ISSUER`).
    pub oauth: Option<trawl_api::OAuthConfig>,
    /// The `Host`s the API answers as besides loopback names and the address
    /// a client connected to, and the browser origins besides its own that may
    /// change state (`TRAWL_ALLOWED_HOSTS`, `TRAWL_ALLOWED_ORIGINS`); the OAuth
    /// resource's and Slack's public host are added when those are set.
    pub site: trawl_api::SiteConfig,
    /// Approvals in Slack and the outgoing webhook, and their TTL: the notifier
    /// of `trawl scheduler` and `trawl dev`.
    pub notify: trawl_notify::NotifyConfig,
    /// Clicks from Slack, when a signing secret is set (`trawl api`, `trawl dev`).
    pub slack: Option<SlackInteractions>,
    /// Header and body read timeouts and connections per address of the API
    /// (`TRAWL_HTTP_*`).
    pub http_limits: trawl_api::HttpLimits,
    /// Job submissions and `/mcp` requests per caller (`TRAWL_RATE_*`).
    pub rate_limits: trawl_api::RateLimits,
    /// MCP sessions per caller and in all, and their idle expiry
    /// (`TRAWL_MCP_SESSIONS_*`, `TRAWL_MCP_SESSION_IDLE`).
    pub mcp_sessions: trawl_api::SessionLimits,
}

/// What the API needs to take clicks from Slack.
#[derive(Clone, Debug)]
pub struct SlackInteractions {
    /// The Slack app's signing secret (`TRAWL_SLACK_SIGNING_SECRET`).
    pub signing_secret: SecretString,
    /// Hosts besides `hooks.slack.com` a click's `response_url` may name.
    pub response_hosts: Vec<String>,
    /// The API's public base URL, for links in updated messages.
    pub public_url: Option<url::Url>,
    /// Who may decide in Slack: user ids (`U…`, `W…`) and user group ids (`S…`)
    /// (`TRAWL_SLACK_APPROVERS`). Clicks of anyone else are refused.
    pub approvers: Vec<String>,
    /// The bot token and Web API that read user groups' members
    /// (`TRAWL_SLACK_BOT_TOKEN`, `TRAWL_SLACK_API_URL`).
    pub directory: Option<(SecretString, url::Url)>,
}

/// The tool layer over Bright Data (or the simulator) and `cache`, and the
/// configured upstream servers pinned in `store`.
async fn tools(
    s: &Settings,
    cache: Arc<dyn ContentCache>,
    store: Arc<dyn Store>,
) -> anyhow::Result<(Arc<ToolLayer>, Option<SimHandle>)> {
    let (mut layers, sim) = tool_layers(s, cache, store, &[Pool::Standard]).await?;
    Ok((layers.remove(0), sim))
}

/// One tool layer per pool in `pools`, listing the upstream servers live.
async fn tool_layers(
    s: &Settings,
    cache: Arc<dyn ContentCache>,
    store: Arc<dyn Store>,
    pools: &[Pool],
) -> anyhow::Result<(Vec<Arc<ToolLayer>>, Option<SimHandle>)> {
    let pools: Vec<_> = pools
        .iter()
        .map(|&p| (p, trawl_tools::Listings::Live))
        .collect();
    let (layers, sim) = crate::embedded::tool_layers(&s.roles, cache, store, &pools).await?;
    if let Some(sim) = &sim {
        eprintln!(
            "BRIGHTDATA_API_TOKEN is not set: using the built-in Bright Data simulator at {}",
            sim.base_url()
        );
    }
    Ok((layers, sim))
}

/// Refreshes the tool layer every `every`, and at once when an upstream says
/// its tools changed, until `cancel`, when it has upstream servers to list.
fn refresh_tools(
    tools: &Arc<ToolLayer>,
    s: &Settings,
    cancel: CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    s.roles.tools.as_ref().filter(|c| !c.servers.is_empty())?;
    let (tools, every) = (tools.clone(), s.tools_refresh);
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                _ = tick.tick() => {
                    if let Err(e) = tools.refresh().await {
                        tracing::warn!(error = %e, "tool layer not refreshed");
                    }
                }
                // An upstream's `notifications/tools/list_changed`: now, not
                // at the next tick.
                () = tools.upstream_list_changed() => {
                    if let Err(e) = tools.refresh().await {
                        tracing::warn!(error = %e, "tool layer not refreshed");
                    }
                }
            }
        }
        tools.close().await;
    }))
}

async fn postgres(s: &Settings) -> anyhow::Result<Arc<PgStore>> {
    let store = PgStore::connect(&s.database_url, s.database_pool)
        .await
        .context("connecting to Postgres (TRAWL_DATABASE_URL)")?;
    Ok(Arc::new(store))
}

async fn nats(s: &Settings) -> anyhow::Result<NatsQueue> {
    nats_pool(s, Pool::Standard).await
}

async fn nats_pool(s: &Settings, pool: Pool) -> anyhow::Result<NatsQueue> {
    NatsQueue::connect_pool(s.nats.clone(), pool)
        .await
        .context("connecting to NATS JetStream (TRAWL_NATS_URL)")
}

async fn redis(s: &Settings) -> anyhow::Result<Arc<RedisCache>> {
    let cache = RedisCache::connect(s.redis.clone())
        .await
        .context("connecting to Redis (TRAWL_REDIS_URL)")?;
    Ok(Arc::new(cache))
}

/// Binds the API's listener and says where, on stderr (tests read that line).
async fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr} (TRAWL_LISTEN)"))?;
    eprintln!("trawl api listening on http://{}", listener.local_addr()?);
    Ok(listener)
}

fn auth(s: &Settings) -> Auth {
    if s.api_keys.is_empty() && s.oauth.is_none() {
        Auth::Open
    } else {
        Auth::Keys(s.api_keys.clone())
    }
}

/// The API's state with what every serving role adds: OAuth when configured,
/// `/mcp`'s hosts and origins, the tool layer, and the shutdown token.
async fn api_state(
    s: &Settings,
    state: ApiState,
    tools: Arc<ToolLayer>,
    cancel: &CancellationToken,
) -> anyhow::Result<ApiState> {
    let mut site = s.site.clone();
    let mut state = state
        .with_tools(tools)
        .with_shutdown(cancel.clone())
        .with_browse_egress(s.browse_egress.clone())
        .with_max_slices(s.roles.max_slices)
        .with_tenant_limits(s.roles.tenant_limits.clone());
    if let Some(config) = &s.oauth {
        let (host, origin) = public_host(config.resource.as_str());
        site = site
            .with_hosts(host)
            .and_then(|s| s.with_origins(origin))
            .map_err(|e| anyhow::anyhow!("TRAWL_RESOURCE_URI: {e}"))?;
        let rs = trawl_api::ResourceServer::new(config.clone())
            .context("building the OAuth resource server")?;
        match rs.warm_up().await {
            Ok(()) => eprintln!(
                "OAuth: tokens for {} from {} are accepted",
                config.resource, config.issuer
            ),
            Err(e) => eprintln!(
                "OAuth: the authorization server's keys are not available yet ({e}); tried again on the first token"
            ),
        }
        state = state.with_oauth(Arc::new(rs));
    }
    if let Some(slack) = &s.slack {
        let config = trawl_api::SlackConfig::new(
            slack.signing_secret.clone(),
            trawl_notify::ResponseHosts::new(slack.response_hosts.iter().cloned()),
            slack.public_url.clone(),
        )
        .context("building the Slack interactions client")?;
        let config = match &slack.directory {
            Some((token, base)) => config.with_directory(token.clone(), base.clone()),
            None => config,
        };
        if let Some(url) = &slack.public_url {
            site = site
                .with_hosts(public_host(url.as_str()).0)
                .map_err(|e| anyhow::anyhow!("the Slack public URL: {e}"))?;
        }
        let config = config
            .with_approvers(slack.approvers.iter().cloned())
            .map_err(|e| anyhow::anyhow!("TRAWL_SLACK_APPROVERS: {e}"))?;
        state = state.with_slack(config);
        if slack.approvers.is_empty() {
            eprintln!(
                "Slack: no TRAWL_SLACK_APPROVERS, so every click on an approval button is refused"
            );
        } else {
            eprintln!(
                "Slack: clicks on approval buttons by {} are taken at /v1/integrations/slack/interactions",
                slack.approvers.join(", ")
            );
        }
    }
    let sessions = s.mcp_sessions;
    Ok(state
        .with_rate_limits(s.rate_limits)
        .with_site(site)
        .with_mcp(trawl_api::McpConfig::default().with_session_limits(
            sessions.per_caller,
            sessions.total,
            sessions.idle,
        )))
}

/// The `Host` (`name` or `name:port`) and origin a public URL is reached by.
fn public_host(url: &str) -> (Option<String>, Option<String>) {
    let Ok(u) = url::Url::parse(url) else {
        return (None, None);
    };
    let Some(host) = u.host_str() else {
        return (None, None);
    };
    let authority = match u.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    };
    let origin = format!("{}://{authority}", u.scheme());
    (Some(authority), Some(origin))
}

/// The approvals notifier of the scheduler role and `trawl dev`: expires
/// approvals after the TTL and posts them to Slack and the outgoing webhook.
fn notifier(s: &Settings, store: Arc<dyn Store>) -> anyhow::Result<Arc<trawl_notify::Notifier>> {
    let n = &s.notify;
    let sinks: Vec<&str> = [
        n.slack_webhook.as_ref().map(|_| "Slack"),
        n.webhook.as_ref().map(|_| "the outgoing webhook"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !sinks.is_empty() {
        eprintln!("approvals: posted to {}", sinks.join(" and "));
    }
    let notifier = trawl_notify::Notifier::new(store, n.clone())
        .context("building the approvals notifier's HTTP client")?;
    Ok(Arc::new(notifier))
}

/// Refuses to serve an open API anywhere but on loopback.
fn check_open(s: &Settings) -> anyhow::Result<()> {
    if s.api_keys.is_empty() && s.oauth.is_none() && !s.listen.ip().is_loopback() {
        anyhow::bail!(
            "refusing to serve the API on {} without TRAWL_API_KEYS or OAuth (TRAWL_RESOURCE_URI, TRAWL_OAUTH_ISSUER): configure one, or listen on a loopback address",
            s.listen
        );
    }
    Ok(())
}

/// `trawl migrate`: applies the Postgres migrations and exits.
pub async fn migrate(s: &Settings) -> anyhow::Result<()> {
    trawl_store::postgres::migrate(&s.database_url)
        .await
        .context("applying migrations")
}

/// `trawl api`: the HTTP API over Postgres, NATS and Redis.
pub async fn api(s: &Settings, cancel: CancellationToken) -> anyhow::Result<()> {
    check_open(s)?;
    let store = postgres(s).await?;
    let queue = nats(s).await?;
    let events = queue.events();
    let cache = redis(s).await?;
    let (tools, sim) = tools(s, cache.clone(), store.clone()).await?;
    let refresh = refresh_tools(&tools, s, cancel.clone());
    let queue: Arc<dyn SliceQueue> = Arc::new(queue);
    let (state_store, state_queue, state_cache): (Arc<dyn Store>, _, Arc<dyn ContentCache>) =
        (store.clone(), queue.clone(), cache.clone());
    let mut state = ApiState::new(
        store,
        Arc::new(events),
        queue,
        cache,
        s.roles.prices,
        auth(s),
    );
    if let Some(url) = &s.database_read_url {
        let reads = PgStore::connect_replica(url, s.database_pool)
            .await
            .context("connecting to the read replica (TRAWL_DATABASE_READ_URL)")?;
        state = state.with_reads(Arc::new(reads));
    }
    let state = api_state(s, state, tools, &cancel).await?;
    if s.api_keys.is_empty() && s.oauth.is_none() {
        eprintln!(
            "WARNING trawl api: no TRAWL_API_KEYS and no OAuth: the API is open (loopback only): any program on this machine can submit jobs and approve spend; pages in a browser cannot (Host and Origin are checked, docs/security.md)"
        );
    }
    let backends = OpsBackends {
        store: state_store,
        queue: state_queue,
        cache: Some(state_cache),
    };
    let ops = ops(s, backends, &cancel).await?;
    let router = serve_router(state, ops.is_none());
    let listener = bind(s.listen).await?;
    let served = trawl_api::serve_with(listener, router, cancel.clone(), s.http_limits).await;
    cancel.cancel();
    if let Some(refresh) = refresh {
        let _ = refresh.await;
    }
    if let Some(sim) = sim {
        let _ = sim.shutdown().await;
    }
    if let Some(ops) = ops {
        let _ = ops.await;
    }
    served.context("serving the API")
}

/// The API's router, with `/metrics` on it unless an ops listener serves it.
fn serve_router(state: ApiState, on_api_port: bool) -> trawl_api::Router {
    let router = trawl_api::router(state.clone());
    if on_api_port {
        trawl_api::with_metrics(router, &state)
    } else {
        router
    }
}

/// Serves `/healthz`, `/readyz` over `backends` and `/metrics` on
/// `TRAWL_OPS_LISTEN`, when it is set, until `cancel` fires.
async fn ops(
    s: &Settings,
    backends: OpsBackends,
    cancel: &CancellationToken,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(addr) = s.ops_listen else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr} (TRAWL_OPS_LISTEN)"))?;
    eprintln!("trawl ops listening on http://{}", listener.local_addr()?);
    let cancel = cancel.clone();
    Ok(Some(tokio::spawn(async move {
        if let Err(e) = trawl_api::serve(listener, trawl_api::ops_router(backends), cancel).await {
            tracing::warn!(error = %e, "the ops listener stopped");
        }
    })))
}

/// `trawl scheduler`: plans, publishes, finishes and reconciles every job.
pub async fn scheduler(s: &Settings, cancel: CancellationToken) -> anyhow::Result<()> {
    let store = postgres(s).await?;
    let queue = nats(s).await?;
    let events = queue.events();
    let rx = events.subscribe().await.context("subscribing to events")?;
    let queue: Arc<dyn SliceQueue> = Arc::new(queue);
    let ops = ops(
        s,
        OpsBackends {
            store: store.clone(),
            queue: queue.clone(),
            cache: None,
        },
        &cancel,
    )
    .await?;
    let notifier = notifier(s, store.clone())?;
    let service = Arc::new(Service {
        store,
        queue,
        events: Arc::new(events),
        prices: s.roles.prices,
        config: s.roles.scheduler.clone(),
    });
    eprintln!("trawl scheduler running");
    let notifying = tokio::spawn(notifier.run(cancel.clone()));
    service.run(rx, cancel.clone()).await;
    cancel.cancel();
    let _ = notifying.await;
    if let Some(ops) = ops {
        let _ = ops.await;
    }
    Ok(())
}

/// `trawl worker`: pulls slices and runs them until stopped.
pub async fn worker(s: &Settings, pool: Pool, cancel: CancellationToken) -> anyhow::Result<()> {
    let store = postgres(s).await?;
    let queue = nats_pool(s, pool).await?;
    let events = queue.events();
    let cache = redis(s).await?;
    let (mut layers, sim) = tool_layers(s, cache.clone(), store.clone(), &[pool]).await?;
    let tools = layers.remove(0);
    let refresh = refresh_tools(&tools, s, cancel.clone());
    let queue: Arc<dyn SliceQueue> = Arc::new(queue);
    let ops = ops(
        s,
        OpsBackends {
            store: store.clone(),
            queue: queue.clone(),
            cache: Some(cache),
        },
        &cancel,
    )
    .await?;
    let mut worker = Worker::new(
        queue,
        store,
        Arc::new(events),
        tools,
        s.roles.worker.clone(),
    )
    .with_models(s.roles.models.clone());
    if pool == Pool::Isolated {
        worker = worker.with_browsers(s.roles.browsers.clone());
    }
    // Reported before the line that says it runs: a submission from then on is
    // checked against what it can run.
    if let Err(e) = worker.report_to_store().await {
        tracing::warn!(error = %e, "worker report not stored; trying again on the next report");
    }
    let worker = Arc::new(worker);
    eprintln!(
        "trawl worker running in the {} pool ({} slices at a time)",
        pool.as_str(),
        s.roles.worker.concurrency
    );
    worker.run(cancel.clone()).await;
    cancel.cancel();
    if let Some(refresh) = refresh {
        let _ = refresh.await;
    }
    if let Some(sim) = sim {
        let _ = sim.shutdown().await;
    }
    if let Some(ops) = ops {
        let _ = ops.await;
    }
    Ok(())
}

/// `trawl dev`: the embedded system ([`Embedded`]: scheduler and workers on the
/// embedded adapters, in the state folder) under the API, with the approvals
/// notifier.
pub async fn dev(s: &Settings, cancel: CancellationToken) -> anyhow::Result<()> {
    check_open(s)?;
    let sys = Embedded::start(s.roles.clone()).await?;
    if let Some(sim) = sys.simulator() {
        eprintln!(
            "BRIGHTDATA_API_TOKEN is not set: using the built-in Bright Data simulator at {}",
            sim.base_url()
        );
    }
    let refresh = refresh_tools(sys.tools(), s, cancel.clone());
    if s.api_keys.is_empty() && s.oauth.is_none() {
        eprintln!(
            "WARNING trawl dev: no TRAWL_API_KEYS and no OAuth (TRAWL_RESOURCE_URI, TRAWL_OAUTH_ISSUER): the API and /mcp are open (loopback only): any program on this machine can submit jobs and approve spend; pages in a browser cannot (Host and Origin are checked, docs/security.md)"
        );
    }
    let store: Arc<dyn Store> = sys.store().clone();
    let state = ApiState::new(
        store.clone(),
        sys.events(),
        sys.queue().clone(),
        sys.cache().clone(),
        s.roles.prices,
        auth(s),
    );
    let state = api_state(s, state, sys.tools().clone(), &cancel).await?;
    let listener = bind(s.listen).await?;
    let notifying = tokio::spawn(notifier(s, store)?.run(cancel.clone()));
    // One process on loopback: `/metrics` is on the API's port.
    let router = serve_router(state, true);
    let served = trawl_api::serve_with(listener, router, cancel.clone(), s.http_limits).await;
    cancel.cancel();
    let _ = notifying.await;
    if let Some(refresh) = refresh {
        let _ = refresh.await;
    }
    sys.shutdown().await;
    served.context("serving the API")
}
