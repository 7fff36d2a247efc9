//! `trawl`: research jobs at scale. Thin: parses arguments, wires roles, maps
//! outcomes to exit codes.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;
use trawl::embedded::{Embedded, Options, Upstream};
use trawl::output::Summary;
use trawl::progress::Progress;
use trawl_brightdata::BrightDataConfig;
use trawl_core::model::{JobId, JobStatus};
use trawl_core::plan::plan;
use trawl_core::ports::Store;
use trawl_core::spec::JobSpec;
use trawl_queue::QueueConfig;
use trawl_sim::{Faults, SimConfig, parse_latency};
use trawl_worker::WorkerConfig;

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
    #[command(flatten)]
    sim: SimArgs,
}

impl RunArgs {
    fn options(&self) -> anyhow::Result<Options> {
        let bd =
            BrightDataConfig::from_lookup(|k| std::env::var(k).ok()).map_err(anyhow::Error::msg)?;
        let prices = trawl_brightdata::config::prices_from(&|k| std::env::var(k).ok())
            .map_err(anyhow::Error::msg)?;
        let upstream = match bd {
            Some(c) => Upstream::BrightData(c),
            None => Upstream::Simulator(self.sim.config()?),
        };
        Ok(Options::new(&self.state, upstream)
            .with_prices(prices)
            .with_call_timeout(self.call_timeout)
            .with_worker(WorkerConfig::default().with_concurrency(self.concurrency))
            .with_queue(QueueConfig::default()))
    }
}

fn main() -> ExitCode {
    trawl::telemetry::init();
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
    match rt.block_on(dispatch(cli.command)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit::ERROR)
        }
    }
}

/// One root token, fired by SIGINT or SIGTERM.
fn shutdown_token() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            _ = ctrl_c => {}
            () = term => {}
        }
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
            let status = trawl::embedded::decide(&state, &id, false, &by).await?;
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
    eprintln!(
        "wrote {}/{{items.jsonl,rejections.jsonl,summary.json}}",
        out.display()
    );
    match s.status {
        JobStatus::Succeeded => exit::SUCCEEDED,
        JobStatus::Partial => exit::PARTIAL,
        JobStatus::Failed => exit::FAILED,
        JobStatus::Cancelled => exit::CANCELLED,
        JobStatus::AwaitingApproval => exit::AWAITING_APPROVAL,
        JobStatus::Queued | JobStatus::Running => exit::ERROR,
    }
}
