//! The system in one process, on the embedded adapters: `trawl run` and, with
//! the HTTP API on top, `trawl dev`.
//!
//! It is the deployed shape with other adapters, not a second program: the same
//! store-driven scheduler ([`Service`]), the same workers (a standard one, and an
//! isolated one for browser sessions on a queue of its own), the same submit
//! ([`trawl_scheduler::submit`]). `trawl run` submits, then follows its job the
//! way `trawl submit --wait` does ([`crate::follow`]).
//!
//! State lives in a folder (`.trawl/` by default): `store.db` (jobs, slices, items,
//! trace, costs, approvals) and `cache.db` (tool answers), so a second run of the
//! same job is served from the cache. Without `BRIGHTDATA_API_TOKEN` the built-in
//! simulator is started on a loopback port and the real client talks to it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use trawl_api::JobView;
use trawl_brightdata::{BrightData, BrightDataConfig};
use trawl_cache::SqliteCache;
use trawl_core::cost::PriceTable;
use trawl_core::model::{JobId, JobStatus};
use trawl_core::ports::{ContentCache, Events, JobStore, SliceQueue, SliceStore, Store};
use trawl_core::spec::JobSpec;
use trawl_queue::{InProcessEvents, PooledQueue, QueueConfig};
use trawl_scheduler::{Service, ServiceConfig, Submission, SubmitConfig, Submitted};
use trawl_sim::{SimConfig, SimHandle};
use trawl_store::SqliteStore;
use trawl_tools::config::ToolsConfig;
use trawl_tools::embed::Embeddings;
use trawl_tools::guard::{Detector, Head, Judge};
use trawl_tools::{Listings, Pool, ToolLayer};
use trawl_worker::browse::Browsers;
use trawl_worker::models::Models;
use trawl_worker::{Worker, WorkerConfig};

use crate::models::{DetectorArgs, DetectorMode};
use crate::output::{self, FailedSliceOut, Summary};
use crate::progress::Progress;

/// How often `trawl run` reads its job while it waits: a read of the job row
/// and its counters, kept by triggers. (50 ms and 200 ms measured alike on a
/// 10,000-slice run: docs/benchmarks.md, "One system".)
const POLL: Duration = Duration::from_millis(50);

/// How long a stopping worker may take to finish its slices in flight.
const WORKER_STOP_DEADLINE: Duration = Duration::from_secs(60);

/// Where Bright Data is.
#[derive(Clone, Debug)]
pub enum Upstream {
    /// The real API.
    BrightData(BrightDataConfig),
    /// The built-in simulator, started in this process.
    Simulator(SimConfig),
}

/// What the roles (scheduler, workers, their tool layers) are configured with,
/// read and checked once at start-up (`cli.rs`): all of an embedded run's
/// settings, and the part of the deployed [`crate::deployed::Settings`] that is
/// not about its services and the API.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// `--state`, `TRAWL_HOME`, default `.trawl`.
    pub state_dir: PathBuf,
    pub upstream: Upstream,
    pub prices: PriceTable,
    /// Timeout of one upstream attempt.
    pub call_timeout: Duration,
    pub worker: WorkerConfig,
    pub queue: QueueConfig,
    pub scheduler: ServiceConfig,
    /// Upstream MCP servers and tool policies; `None`: the built-in tools under
    /// the default policy.
    pub tools: Option<ToolsConfig>,
    /// The models research jobs run on; `None`: research slices fail with
    /// `no_model`.
    pub models: Option<Arc<Models>>,
    /// Where browse slices open browsers (a local Chromium unless configured).
    pub browsers: Arc<Browsers>,
    /// The tool guard detector's model and whether it must run
    /// (`TRAWL_EMBED_MODEL`, `TRAWL_GUARD_DETECTOR`).
    pub detector: DetectorArgs,
    /// The tool guard's model judge (`TRAWL_GUARD_MODEL`); `None`: off.
    pub judge: Option<Arc<Judge>>,
    /// Jobs that can have more slices are refused (`TRAWL_MAX_SLICES`).
    pub max_slices: u64,
    /// What each tenant may submit through the API (`TRAWL_TENANT_LIMITS`).
    pub tenant_limits: trawl_core::tenant::TenantLimits,
}

impl Options {
    pub fn new(state_dir: impl Into<PathBuf>, upstream: Upstream) -> Options {
        Options {
            state_dir: state_dir.into(),
            upstream,
            prices: PriceTable::default(),
            call_timeout: Duration::from_secs(30),
            worker: WorkerConfig::default(),
            queue: QueueConfig::default(),
            scheduler: ServiceConfig::default(),
            tools: None,
            models: None,
            browsers: Arc::new(Browsers::local()),
            detector: DetectorArgs::default(),
            judge: None,
            max_slices: trawl_core::spec::DEFAULT_MAX_SLICES,
            tenant_limits: trawl_core::tenant::TenantLimits::default(),
        }
    }

    pub fn with_tenant_limits(mut self, l: trawl_core::tenant::TenantLimits) -> Self {
        self.tenant_limits = l;
        self
    }

    pub fn with_judge(mut self, j: Option<Arc<Judge>>) -> Self {
        self.judge = j;
        self
    }

    pub fn with_detector(mut self, detector: DetectorArgs) -> Self {
        self.detector = detector;
        self
    }

    pub fn with_browsers(mut self, b: Arc<Browsers>) -> Self {
        self.browsers = b;
        self
    }

    pub fn with_models(mut self, m: Option<Arc<Models>>) -> Self {
        self.models = m;
        self
    }

    pub fn with_tools(mut self, t: Option<ToolsConfig>) -> Self {
        self.tools = t;
        self
    }

    pub fn with_call_timeout(mut self, t: Duration) -> Self {
        self.call_timeout = t;
        self
    }

    pub fn with_worker(mut self, w: WorkerConfig) -> Self {
        self.worker = w;
        self
    }

    pub fn with_max_slices(mut self, n: u64) -> Self {
        self.max_slices = n;
        self
    }

    pub fn with_prices(mut self, p: PriceTable) -> Self {
        self.prices = p;
        self
    }

    pub fn with_queue(mut self, q: QueueConfig) -> Self {
        self.queue = q;
        self
    }

    pub fn with_scheduler(mut self, c: ServiceConfig) -> Self {
        self.scheduler = c;
        self
    }
}

/// The Bright Data client for `upstream`, and the simulator it talks to when that
/// plays Bright Data (started here, on a loopback port).
pub async fn provider(
    upstream: &Upstream,
    prices: PriceTable,
    call_timeout: Duration,
) -> anyhow::Result<(BrightData, Option<SimHandle>)> {
    let (config, sim) = match upstream {
        Upstream::BrightData(c) => (c.clone(), None),
        Upstream::Simulator(sim_config) => {
            let sim = trawl_sim::spawn(sim_config.clone())
                .await
                .context("starting the Bright Data simulator")?;
            let c = BrightDataConfig::new(sim.base_url(), "simulator").with_zones(
                sim_config.unlocker_zone.clone(),
                sim_config.serp_zone.clone(),
            );
            (c, Some(sim))
        }
    };
    let config = config.with_prices(prices).with_timeout(call_timeout);
    let provider = BrightData::new(config).context("building the HTTP client")?;
    Ok((provider, sim))
}

/// Records a decision on a job awaiting approval, touching only the store (no
/// cache, no tools, no simulator, no worker).
pub async fn decide(
    state_dir: &Path,
    job: &JobId,
    approved: bool,
    by: &str,
) -> anyhow::Result<JobStatus> {
    let path = state_dir.join("store.db");
    if !path.exists() {
        bail!(
            "no store at {}: nothing has run with this state folder",
            path.display()
        );
    }
    let store = SqliteStore::open(&path)
        .await
        .context("opening the store")?;
    // Nobody listens: the next `trawl run` or `trawl dev` reconciles the job.
    let (events, _rx) = InProcessEvents::channel();
    Ok(trawl_scheduler::decide(&store, &events, job, approved, by).await?)
}

/// One tool layer per pool (and where it takes the upstream servers'
/// listings from), all over one Bright Data client, or the one simulator it
/// talks to when there is no token; the same for both shapes.
pub async fn tool_layers(
    o: &Options,
    cache: Arc<dyn ContentCache>,
    store: Arc<dyn Store>,
    pools: &[(Pool, Listings)],
) -> anyhow::Result<(Vec<Arc<ToolLayer>>, Option<SimHandle>)> {
    let (provider, sim) = provider(&o.upstream, o.prices, o.call_timeout).await?;
    let provider = Arc::new(provider);
    let embeddings = embeddings(&o.detector, Some(store.clone())).await?;
    let mut layers = Vec::new();
    for &(pool, from) in pools {
        let config = match (&o.tools, pool) {
            (Some(c), _) => c.clone(),
            (None, Pool::Standard) => {
                let layer = ToolLayer::new(provider.clone(), cache.clone())
                    .with_embeddings(embeddings.clone());
                layers.push(Arc::new(layer));
                continue;
            }
            (None, Pool::Isolated) => ToolsConfig::default(),
        };
        let config = config
            .with_embeddings(embeddings.clone())
            .with_judge(o.judge.clone());
        let (layer, report) = ToolLayer::open(
            provider.clone(),
            cache.clone(),
            Some(store.clone()),
            config,
            pool,
            from,
        )
        .await
        .context("reading the tool pins")?;
        for (server, e) in &report.server_errors {
            eprintln!("warning: tool server {server} not listed: {e}");
        }
        layers.push(Arc::new(layer));
    }
    Ok((layers, sim))
}

/// The tool guard's model judge, when `model` (`TRAWL_GUARD_MODEL`) names one
/// of `models` (a `provider:` prefix picks the provider, as for `TRAWL_MODEL`).
pub fn guard_judge(model: Option<&str>, models: &Models) -> anyhow::Result<Option<Arc<Judge>>> {
    let Some(name) = model.filter(|m| !m.trim().is_empty()) else {
        return Ok(None);
    };
    let resolved = models
        .resolve(Some(name))
        .map_err(|e| anyhow::anyhow!("TRAWL_GUARD_MODEL: {e}"))?;
    Ok(Some(Arc::new(Judge::new(resolved.client, resolved.model))))
}

/// The tool guard's sentence embeddings: from `TRAWL_EMBED_MODEL`, else from
/// the model `trawl models install` put in place, cached in `store`. `None`,
/// said at WARN, when there is none or the detector is off; an error when the
/// detector is required and cannot run.
pub async fn embeddings(
    detector: &DetectorArgs,
    store: Option<Arc<dyn Store>>,
) -> anyhow::Result<Option<Arc<Embeddings>>> {
    let Some(dir) = detector.model_dir() else {
        let why = if detector.guard_detector == DetectorMode::Off {
            "TRAWL_GUARD_DETECTOR is off"
        } else {
            "no model is installed and TRAWL_EMBED_MODEL is not set (`trawl models install` \
             puts multilingual-e5-small, the model its head is trained on, in place)"
        };
        if detector.guard_detector == DetectorMode::Required {
            anyhow::bail!(
                "TRAWL_GUARD_DETECTOR is required, but the tool guard's semantic detector \
                 cannot run: {why}"
            );
        }
        tracing::warn!("the tool guard judges by its rules only: {why}");
        return Ok(None);
    };
    let embeddings = Embeddings::load(&dir, store).await.with_context(|| {
        format!(
            "loading the sentence embedding model in {} (TRAWL_EMBED_MODEL)",
            dir.display()
        )
    })?;
    let embeddings = Arc::new(embeddings);
    if detector.guard_detector == DetectorMode::Required {
        // The head must take these weights, or the guard would fall back to
        // its rules.
        Head::builtin()
            .and_then(|h| Detector::new(embeddings.clone(), h))
            .map_err(|e| {
                anyhow::anyhow!(
                    "TRAWL_GUARD_DETECTOR is required, but the model in {} cannot serve \
                     the tool guard's semantic detector: {e}",
                    dir.display()
                )
            })?;
    }
    tracing::info!(
        dir = %dir.display(),
        model_id = embeddings.embedder().model_id(),
        "sentence embeddings on: the tool guard's semantic detector can run"
    );
    Ok(Some(embeddings))
}

/// The embedded system: store, cache, queue, tools, the scheduler and the
/// workers running, and the simulator if used.
pub struct Embedded {
    store: Arc<SqliteStore>,
    cache: Arc<dyn ContentCache>,
    tools: Arc<ToolLayer>,
    queue: Arc<dyn SliceQueue>,
    events: Arc<InProcessEvents>,
    service: Arc<Service>,
    sim: Option<SimHandle>,
    options: Options,
    /// Stops the scheduler and the workers.
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Embedded {
    /// Opens the state folder, starts the simulator if there is no token, and
    /// starts the scheduler and the workers. The workers have reported what they
    /// can run before this returns, so a submission is checked against them.
    pub async fn start(options: Options) -> anyhow::Result<Embedded> {
        std::fs::create_dir_all(&options.state_dir)
            .with_context(|| format!("creating state folder {}", options.state_dir.display()))?;
        let store = SqliteStore::open(&options.state_dir.join("store.db"))
            .await
            .context("opening the store")?;
        let cache = SqliteCache::open(&options.state_dir.join("cache.db"))
            .await
            .context("opening the cache")?;
        let store = Arc::new(store);
        let cache: Arc<dyn ContentCache> = Arc::new(cache);
        // The standard layer lists every server; the isolated one takes the
        // listings just stored rather than starting each server a second time.
        let (layers, sim) = tool_layers(
            &options,
            cache.clone(),
            store.clone(),
            &[
                (Pool::Standard, Listings::Live),
                (Pool::Isolated, Listings::Stored),
            ],
        )
        .await?;
        let (tools, isolated_tools) = (layers[0].clone(), layers[1].clone());

        let queues = PooledQueue::new(options.queue);
        let queue: Arc<dyn SliceQueue> = Arc::new(queues.view(Pool::Standard));
        let (events, rx) = InProcessEvents::channel();
        let events = Arc::new(events);
        let worker = |queue: Arc<dyn SliceQueue>, tools: Arc<ToolLayer>| {
            Worker::new(
                queue,
                store.clone(),
                events.clone(),
                tools,
                options.worker.clone(),
            )
            .with_models(options.models.clone())
        };
        // Browse slices go to a worker whose tool layer serves the isolated
        // pool, with its own queue: the standard one never sees them.
        let workers = [
            worker(queue.clone(), tools.clone()),
            worker(Arc::new(queues.view(Pool::Isolated)), isolated_tools)
                .with_browsers(options.browsers.clone()),
        ];
        let service = Arc::new(Service {
            store: store.clone(),
            queue: queue.clone(),
            events: events.clone(),
            prices: options.prices,
            config: options.scheduler.clone(),
        });
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        for w in workers {
            w.report_to_store()
                .await
                .context("reporting the workers to the store")?;
            tasks.spawn(Arc::new(w).run(stop.clone()));
        }
        tasks.spawn(service.clone().run(rx, stop.clone()));
        Ok(Embedded {
            store,
            cache,
            tools,
            queue,
            events,
            service,
            sim,
            options,
            stop,
            tasks,
        })
    }

    /// The tool layer the standard worker calls through.
    pub fn tools(&self) -> &Arc<ToolLayer> {
        &self.tools
    }

    pub fn store(&self) -> &Arc<SqliteStore> {
        &self.store
    }

    pub fn cache(&self) -> &Arc<dyn ContentCache> {
        &self.cache
    }

    /// The standard pool's queue (the scheduler publishes every slice to it;
    /// browse slices reach the isolated worker).
    pub fn queue(&self) -> &Arc<dyn SliceQueue> {
        &self.queue
    }

    pub fn events(&self) -> Arc<dyn Events> {
        self.events.clone()
    }

    /// The simulator's base URL and counters, when it plays Bright Data.
    pub fn simulator(&self) -> Option<&SimHandle> {
        self.sim.as_ref()
    }

    /// What submissions are checked and priced with.
    pub fn submit_config(&self) -> SubmitConfig {
        SubmitConfig {
            prices: self.options.prices,
            max_slices: self.options.max_slices,
            // `trawl run` checks browse URLs where the session connects (its
            // egress proxy), as it always has; the API also checks them early.
            egress: None,
            // Its jobs have no owner: the operator's own, under no tenant's quota.
            quotas: Default::default(),
        }
    }

    /// Submits a job through the one submit, and plans it at once: it is
    /// running, or parked awaiting approval. `approved_by` approves it then
    /// (`--yes`).
    pub async fn submit(
        &self,
        spec: &JobSpec,
        approved_by: Option<&str>,
    ) -> anyhow::Result<Submitted> {
        let mut submitted = trawl_scheduler::submit(
            self.store.as_ref(),
            self.events.as_ref(),
            &self.submit_config(),
            Submission::new(spec.clone()),
        )
        .await?;
        let id = submitted.job_id.clone();
        self.service
            .advance_id(&id)
            .await
            .context("planning the job")?;
        let mut status = self.job(&id).await?.status;
        if status == JobStatus::AwaitingApproval
            && let Some(by) = approved_by
        {
            status = self.decide(&id, true, by).await?;
        }
        submitted.status = status;
        Ok(submitted)
    }

    async fn job(&self, id: &JobId) -> anyhow::Result<trawl_core::ports::JobRecord> {
        self.store
            .job(id)
            .await?
            .with_context(|| format!("no job {id}"))
    }

    /// Records a decision on a job awaiting approval.
    pub async fn decide(&self, job: &JobId, approved: bool, by: &str) -> anyhow::Result<JobStatus> {
        Ok(
            trawl_scheduler::decide(self.store.as_ref(), self.events.as_ref(), job, approved, by)
                .await?,
        )
    }

    /// The job as the API shows it.
    pub async fn view(&self, id: &JobId) -> anyhow::Result<JobView> {
        let job = self.job(id).await?;
        Ok(JobView::of(self.store.as_ref(), job).await?)
    }

    /// Follows a job to its end (or to its approval), then writes the output
    /// files. `cancel` cancels the job, as a cancel over the API does.
    pub async fn run(
        &self,
        job: &JobId,
        out_dir: &Path,
        progress: &mut Progress,
        cancel: &CancellationToken,
    ) -> anyhow::Result<Summary> {
        let started = Instant::now();
        let followed = crate::follow::follow(|| self.view(job), POLL, progress, cancel).await?;
        let view = match followed {
            Some(v) => v,
            None => {
                let open = self.store.counts(job).await?.slices_open();
                let reason = format!("cancelled with {open} slices open");
                trawl_scheduler::cancel(self.store.as_ref(), self.events.as_ref(), job, &reason)
                    .await?;
                self.view(job).await?
            }
        };
        self.write(job, &view, started.elapsed(), out_dir).await
    }

    /// The summary of a job that did not run (awaiting approval), written out.
    pub async fn write_pending(&self, job: &JobId, out_dir: &Path) -> anyhow::Result<Summary> {
        let mut view = self.view(job).await?;
        view.reason = Some(format!(
            "estimated cost ${:.4} is above approve_above_usd: run `trawl approve {job}` (or pass --yes)",
            view.estimate.cost_usd
        ));
        self.write(job, &view, Duration::ZERO, out_dir).await
    }

    /// Writes the output files of a job from the store.
    async fn write(
        &self,
        job: &JobId,
        view: &JobView,
        elapsed: Duration,
        out_dir: &Path,
    ) -> anyhow::Result<Summary> {
        let failed = self.store.failed_slices(job, output::FAILED_LISTED).await?;
        let summary = Summary::of(
            view,
            self.sim.is_some(),
            elapsed,
            failed.into_iter().map(FailedSliceOut::from).collect(),
        );
        let items = self.store.items(job).await.context("reading items")?;
        let rejections = self
            .store
            .rejections(job)
            .await
            .context("reading rejections")?;
        output::write(
            out_dir,
            &output::json_lines(&items)?,
            &output::json_lines(&rejections)?,
            &summary,
        )?;
        Ok(summary)
    }

    /// Stops the scheduler and the workers (slices in flight finish within the
    /// workers' stop grace), then the simulator, if any.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        self.tasks.close();
        // A worker that does not stop in time is abandoned rather than holding
        // the process open.
        if tokio::time::timeout(WORKER_STOP_DEADLINE, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::error!("workers did not stop within {WORKER_STOP_DEADLINE:?}");
        }
        if let Some(sim) = self.sim.take() {
            let _ = sim.shutdown().await;
        }
    }
}

impl Drop for Embedded {
    /// An embedded system dropped without [`Embedded::shutdown`] stops its tasks.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
