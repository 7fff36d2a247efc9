//! `trawl workers`: the workers that reported to the store, with what they can
//! run and when they last reported.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use trawl_core::model::now_ms;
use trawl_core::workers::WorkerInfo;

/// Which store to read.
#[derive(Args, Clone)]
pub struct WorkersArgs {
    /// State folder of the embedded store.
    #[arg(long, env = "TRAWL_HOME", default_value = ".trawl")]
    state: PathBuf,
    /// Postgres instead of the embedded store, as the deployed roles use.
    #[arg(long, env = "TRAWL_DATABASE_URL")]
    database_url: Option<String>,
    /// Only workers that reported within this long, e.g. 10m.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    within: Duration,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: WorkersArgs) -> anyhow::Result<u8> {
    let store = crate::tools_cli::open_store(&args.state, args.database_url.as_deref()).await?;
    let since = now_ms() - i64::try_from(args.within.as_millis()).unwrap_or(i64::MAX);
    let workers = store.workers(since).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&workers)?);
    } else if workers.is_empty() {
        eprintln!(
            "no worker reported within {}",
            humantime::format_duration(args.within)
        );
    } else {
        let now = now_ms();
        for w in &workers {
            println!("{}", line(w, now));
        }
    }
    Ok(0)
}

/// One worker as a line of text.
fn line(w: &WorkerInfo, now: i64) -> String {
    let m = &w.capabilities.models;
    let mut providers: Vec<&str> = Vec::new();
    if m.anthropic {
        providers.push("anthropic");
    }
    if m.openai {
        providers.push("openai");
    }
    let models = if providers.is_empty() {
        "no models".to_owned()
    } else {
        let default = m
            .default_model
            .as_deref()
            .map(|d| format!(", default {d}"))
            .unwrap_or_default();
        format!("models: {}{default}", providers.join("+"))
    };
    let ago = Duration::from_millis(u64::try_from(now - w.heartbeat_ms).unwrap_or(0) / 1000 * 1000);
    format!(
        "{}\t{}\t{} at a time\t{}\t{}\tlast report {} ago",
        w.id,
        w.pool.as_str(),
        w.concurrency,
        models,
        if w.capabilities.browser {
            "browser"
        } else {
            "no browser"
        },
        humantime::format_duration(ago)
    )
}
