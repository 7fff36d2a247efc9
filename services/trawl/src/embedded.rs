//! `trawl run` in one process, on the embedded adapters.
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
use trawl_brightdata::{BrightData, BrightDataConfig};
use trawl_cache::SqliteCache;
use trawl_core::cost::PriceTable;
use trawl_core::model::{JobId, JobStatus};
use trawl_core::ports::{ContentCache, SliceQueue, Store};
use trawl_core::spec::JobSpec;
use trawl_queue::{EmbeddedQueue, InProcessEvents, PooledQueue, QueueConfig};
use trawl_scheduler::{Scheduler, Submitted};
use trawl_sim::{SimConfig, SimHandle};
use trawl_store::SqliteStore;
use trawl_tools::config::ToolsConfig;
use trawl_tools::embed::Embeddings;
use trawl_tools::guard::Judge;
use trawl_tools::{Pool, ToolLayer};
use trawl_worker::browse::Browsers;
use trawl_worker::models::Models;
use trawl_worker::{Worker, WorkerConfig};

use crate::output::{self, FailedSliceOut, ItemCounts, SliceCounts, Summary};
use crate::progress::Progress;

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

/// Everything an embedded run is configured with.
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
    /// Upstream MCP servers and tool policies; `None`: the built-in tools under
    /// the default policy.
    pub tools: Option<ToolsConfig>,
    /// The models research jobs run on; `None`: research slices fail with
    /// `no_model`.
    pub models: Option<Arc<Models>>,
    /// Where browse slices open browsers (a local Chromium unless configured).
    pub browsers: Arc<Browsers>,
    /// The sentence embedding model folder of the tool guard
    /// (`TRAWL_EMBED_MODEL`); `None`: its semantic detector is off.
    pub embed_model: Option<PathBuf>,
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
            tools: None,
            models: None,
            browsers: Arc::new(Browsers::local()),
            embed_model: None,
        }
    }

    pub fn with_embed_model(mut self, dir: Option<PathBuf>) -> Self {
        self.embed_model = dir;
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

    pub fn with_prices(mut self, p: PriceTable) -> Self {
        self.prices = p;
        self
    }

    pub fn with_queue(mut self, q: QueueConfig) -> Self {
        self.queue = q;
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
/// cache, no tools, no simulator).
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
    let queue = EmbeddedQueue::new(QueueConfig::default());
    let (events, _rx) = InProcessEvents::channel();
    let scheduler = Scheduler {
        store: &store,
        queue: &queue,
        events: &events,
        prices: PriceTable::default(),
        reconcile_every: Duration::from_secs(1),
    };
    Ok(scheduler.decide(job, approved, by).await?)
}

/// The tool layer: the built-in tools, and the upstream servers of `config`
/// pinned in `store`; servers that cannot be listed are reported, not fatal.
pub async fn tool_layer(
    provider: Arc<BrightData>,
    cache: Arc<dyn ContentCache>,
    store: Arc<dyn Store>,
    config: Option<&ToolsConfig>,
    embeddings: Option<Arc<Embeddings>>,
    pool: Pool,
) -> anyhow::Result<ToolLayer> {
    let config = match (config, pool) {
        (Some(c), _) => c.clone(),
        (None, Pool::Standard) => {
            return Ok(ToolLayer::new(provider, cache).with_embeddings(embeddings));
        }
        (None, Pool::Isolated) => ToolsConfig::default(),
    };
    let config = config
        .with_embeddings(embeddings)
        .with_judge(guard_judge()?);
    let (layer, report) = ToolLayer::connect(provider, cache, Some(store), config, pool)
        .await
        .context("reading the tool pins")?;
    for (server, e) in &report.server_errors {
        eprintln!("warning: tool server {server} not listed: {e}");
    }
    Ok(layer)
}

/// The tool guard's model judge, when `TRAWL_GUARD_MODEL` names a model (a
/// `provider:` prefix picks the provider, as for `TRAWL_MODEL`); off otherwise.
pub fn guard_judge() -> anyhow::Result<Option<Arc<Judge>>> {
    let Some(name) = std::env::var("TRAWL_GUARD_MODEL")
        .ok()
        .filter(|m| !m.trim().is_empty())
    else {
        return Ok(None);
    };
    let models = Models::from_env().map_err(anyhow::Error::msg)?;
    let resolved = models
        .resolve(Some(&name))
        .map_err(|e| anyhow::anyhow!("TRAWL_GUARD_MODEL: {e}"))?;
    Ok(Some(Arc::new(Judge::new(resolved.client, resolved.model))))
}

/// The tool guard's sentence embeddings from the model folder `dir`
/// (`TRAWL_EMBED_MODEL`), cached in `store`; `None`, said in a log line, when no
/// folder is set.
pub async fn embeddings(
    dir: Option<&Path>,
    store: Option<Arc<dyn Store>>,
) -> anyhow::Result<Option<Arc<Embeddings>>> {
    let Some(dir) = dir else {
        tracing::info!(
            "TRAWL_EMBED_MODEL is not set: no sentence embeddings, the tool guard's semantic detector is off"
        );
        return Ok(None);
    };
    let embeddings = Embeddings::load(dir, store).await.with_context(|| {
        format!(
            "loading the sentence embedding model in {} (TRAWL_EMBED_MODEL)",
            dir.display()
        )
    })?;
    tracing::info!(
        dir = %dir.display(),
        model_id = embeddings.embedder().model_id(),
        "sentence embeddings on: the tool guard's semantic detector can run"
    );
    Ok(Some(Arc::new(embeddings)))
}

/// The embedded system: store, cache, tools, and the simulator if used.
pub struct Embedded {
    store: Arc<SqliteStore>,
    tools: Arc<ToolLayer>,
    provider: Arc<BrightData>,
    cache: Arc<dyn ContentCache>,
    sim: Option<SimHandle>,
    options: Options,
}

impl Embedded {
    /// Opens the state folder and starts the simulator if there is no token.
    pub async fn start(options: Options) -> anyhow::Result<Embedded> {
        std::fs::create_dir_all(&options.state_dir)
            .with_context(|| format!("creating state folder {}", options.state_dir.display()))?;
        let store = SqliteStore::open(&options.state_dir.join("store.db"))
            .await
            .context("opening the store")?;
        let cache = SqliteCache::open(&options.state_dir.join("cache.db"))
            .await
            .context("opening the cache")?;
        let (provider, sim) =
            provider(&options.upstream, options.prices, options.call_timeout).await?;
        let store = Arc::new(store);
        let provider = Arc::new(provider);
        let cache: Arc<dyn ContentCache> = Arc::new(cache);
        let embeddings = embeddings(options.embed_model.as_deref(), Some(store.clone())).await?;
        let tools = tool_layer(
            provider.clone(),
            cache.clone(),
            store.clone(),
            options.tools.as_ref(),
            embeddings,
            Pool::Standard,
        )
        .await?;
        let tools = Arc::new(tools);
        Ok(Embedded {
            store,
            tools,
            provider,
            cache,
            sim,
            options,
        })
    }

    /// The tool layer the worker calls through.
    pub fn tools(&self) -> &Arc<ToolLayer> {
        &self.tools
    }

    pub fn store(&self) -> &Arc<SqliteStore> {
        &self.store
    }

    /// The simulator's base URL and counters, when it plays Bright Data.
    pub fn simulator(&self) -> Option<&SimHandle> {
        self.sim.as_ref()
    }

    /// Submits a job; it is queued, or parked awaiting approval.
    pub async fn submit(
        &self,
        spec: &JobSpec,
        approved_by: Option<&str>,
    ) -> anyhow::Result<Submitted> {
        // A research job that no model could run is refused before it is stored.
        if let Some(r) = &spec.research {
            let models = self.options.models.as_deref();
            if let Err(e) = models
                .filter(|m| m.any())
                .ok_or_else(|| "no model provider is configured: set ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL) or OPENAI_BASE_URL".to_owned())
                .and_then(|m| m.resolve(r.model.as_deref()))
            {
                anyhow::bail!("the job has a research question, but {e}");
            }
        }
        // So is a browse job with model steps.
        if let Some(b) = spec.browse.as_ref().filter(|b| b.has_model_steps()) {
            let models = self.options.models.as_deref();
            if let Err(e) = models
                .filter(|m| m.any())
                .ok_or_else(|| "no model provider is configured: set ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL) or OPENAI_BASE_URL".to_owned())
                .and_then(|m| m.resolve(b.model.as_deref()))
            {
                anyhow::bail!("the browse steps include model steps (act, extract by instruction, observe), but {e}");
            }
        }
        let (queue, events) = self.plumbing();
        let s = self.scheduler(queue.as_ref(), &events);
        Ok(s.submit(spec, approved_by).await?)
    }

    /// Records a decision on a job awaiting approval.
    pub async fn decide(&self, job: &JobId, approved: bool, by: &str) -> anyhow::Result<JobStatus> {
        let (queue, events) = self.plumbing();
        let s = self.scheduler(queue.as_ref(), &events);
        Ok(s.decide(job, approved, by).await?)
    }

    fn plumbing(&self) -> (Arc<EmbeddedQueue>, InProcessEvents) {
        let (events, _rx) = InProcessEvents::channel();
        (Arc::new(EmbeddedQueue::new(self.options.queue)), events)
    }

    fn scheduler<'a>(
        &'a self,
        queue: &'a dyn SliceQueue,
        events: &'a InProcessEvents,
    ) -> Scheduler<'a> {
        Scheduler {
            store: self.store.as_ref(),
            queue,
            events,
            prices: self.options.prices,
            reconcile_every: Duration::from_secs(1),
        }
    }

    /// Runs a queued job to its end with one in-process worker, then writes the
    /// output files. A job awaiting approval is not run; its summary says so.
    pub async fn run(
        &self,
        job: &JobId,
        out_dir: &Path,
        progress: &mut Progress,
        cancel: &CancellationToken,
    ) -> anyhow::Result<Summary> {
        let started = Instant::now();
        let queues = PooledQueue::new(self.options.queue);
        let (events, mut rx) = InProcessEvents::channel();
        let events = Arc::new(events);
        let stop_worker = cancel.child_token();
        let mut workers = vec![tokio::spawn(
            Arc::new(self.worker(
                Arc::new(queues.view(Pool::Standard)),
                &events,
                self.tools.clone(),
            ))
            .run(stop_worker.clone()),
        )];
        // Browse slices go to a second worker whose tool layer serves the
        // isolated pool, with its own queue: the standard one never sees them.
        let browses = self
            .store
            .job(job)
            .await?
            .is_some_and(|j| j.spec.get("browse").is_some_and(|b| !b.is_null()));
        if browses {
            let isolated = tool_layer(
                self.provider.clone(),
                self.cache.clone(),
                self.store.clone(),
                self.options.tools.as_ref(),
                self.tools.embeddings().cloned(),
                Pool::Isolated,
            )
            .await?;
            let worker = self
                .worker(
                    Arc::new(queues.view(Pool::Isolated)),
                    &events,
                    Arc::new(isolated),
                )
                .with_browsers(self.options.browsers.clone());
            workers.push(tokio::spawn(Arc::new(worker).run(stop_worker.clone())));
        }
        let queue = queues.view(Pool::Standard);
        let scheduler = self.scheduler(&queue, events.as_ref());
        let finished = scheduler
            .drive(job, &mut rx, cancel, &mut |c| progress.update(c))
            .await;
        stop_worker.cancel();
        // Slices in flight finish first; a worker that does not stop in time is
        // abandoned rather than holding the run open.
        for task in workers {
            match tokio::time::timeout(WORKER_STOP_DEADLINE, task).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "worker task ended abnormally"),
                Err(_) => tracing::error!("worker did not stop within {WORKER_STOP_DEADLINE:?}"),
            }
        }
        let finished = finished.context("driving the job")?;
        progress.finish(&finished.counts);
        let record = self
            .store
            .job(job)
            .await?
            .with_context(|| format!("job {job} vanished from the store"))?;
        let failed = self.store.failed_slices(job, output::FAILED_LISTED).await?;
        let c = finished.counts;
        let summary = Summary {
            job_id: job.to_string(),
            name: record.name,
            status: finished.status,
            reason: finished.reason,
            slices: SliceCounts::of(&c),
            items: ItemCounts {
                valid: c.items_valid,
                rejected: c.items_rejected,
            },
            upstream_calls: c.upstream_calls,
            cache_hits: c.cache_hits,
            cost_usd: c.cost.usd(),
            cost_micros: c.cost.0,
            estimate_usd: record.estimate.usd(),
            simulator: self.sim.is_some(),
            elapsed_s: started.elapsed().as_secs_f64(),
            failed_slices: failed.into_iter().map(FailedSliceOut::from).collect(),
        };
        output::write(out_dir, self.store.as_ref(), job, &summary).await?;
        Ok(summary)
    }

    fn worker(
        &self,
        queue: Arc<dyn SliceQueue>,
        events: &Arc<InProcessEvents>,
        tools: Arc<ToolLayer>,
    ) -> Worker {
        let worker = Worker::new(
            queue,
            self.store.clone(),
            events.clone(),
            tools,
            self.options.worker.clone(),
        );
        match &self.options.models {
            Some(m) => worker.with_models(m.clone()),
            None => worker,
        }
    }

    /// The summary of a job that did not run (awaiting approval), written out.
    pub async fn write_pending(&self, job: &JobId, out_dir: &Path) -> anyhow::Result<Summary> {
        let Some(record) = self.store.job(job).await? else {
            bail!("no job {job}");
        };
        let c = self.store.counts(job).await?;
        let summary = Summary {
            job_id: job.to_string(),
            name: record.name,
            status: record.status,
            reason: Some(format!(
                "estimated cost {} is above approve_above_usd: run `trawl approve {job}` (or pass --yes)",
                record.estimate
            )),
            slices: SliceCounts::of(&c),
            items: ItemCounts {
                valid: 0,
                rejected: 0,
            },
            upstream_calls: 0,
            cache_hits: 0,
            cost_usd: 0.0,
            cost_micros: 0,
            estimate_usd: record.estimate.usd(),
            simulator: self.sim.is_some(),
            elapsed_s: 0.0,
            failed_slices: Vec::new(),
        };
        output::write(out_dir, self.store.as_ref(), job, &summary).await?;
        Ok(summary)
    }

    /// Stops the simulator, if any.
    pub async fn shutdown(self) {
        if let Some(sim) = self.sim {
            let _ = sim.shutdown().await;
        }
    }
}
