//! `trawl gc`: deletes the jobs past their retention (what the scheduler does a
//! little of on every pass), or with `--dry-run` lists them and the rows each
//! would lose; and the cost ledger by month, which outlives them.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use trawl_core::model::now_ms;

/// Which store, and how long ended jobs are kept.
#[derive(Args, Clone)]
pub struct GcArgs {
    /// State folder of the embedded store.
    #[arg(long, env = "TRAWL_HOME", default_value = ".trawl")]
    state: PathBuf,
    /// Postgres instead of the embedded store, as the deployed roles use.
    #[arg(long, env = "TRAWL_DATABASE_URL")]
    database_url: Option<String>,
    #[command(flatten)]
    keep: Retention,
    /// List what would be deleted; delete nothing.
    #[arg(long)]
    dry_run: bool,
}

/// How long ended jobs are kept: the setting of `trawl gc`, `trawl run` and the
/// roles alike.
#[derive(Args, Clone)]
pub struct Retention {
    /// How long ended jobs and what they yielded are kept, unless their spec says
    /// (`retention`); the scheduler deletes them after. 0: kept forever.
    #[arg(long, env = "TRAWL_RETENTION", default_value = "30d", value_parser = humantime::parse_duration)]
    pub retention: Duration,
}

/// Jobs listed or deleted per call, at most.
const JOBS: u32 = 1_000;
/// Rows per delete statement.
const BATCH: u32 = 2_000;

pub async fn run(args: GcArgs) -> anyhow::Result<u8> {
    if args.keep.retention.is_zero() {
        anyhow::bail!("--retention 0 keeps every job: nothing to do");
    }
    let store = crate::tools_cli::open_store(&args.state, args.database_url.as_deref()).await?;
    let now = now_ms();
    let default_ms = i64::try_from(args.keep.retention.as_millis()).unwrap_or(i64::MAX);
    if args.dry_run {
        let expired = store.expired_jobs(now, default_ms, JOBS).await?;
        for id in &expired {
            let rows = store.job_rows(id).await?;
            let rows: Vec<String> = rows
                .iter()
                .filter(|(_, n)| *n > 0)
                .map(|(t, n)| format!("{t} {n}"))
                .collect();
            println!("{id}\t{}", rows.join(", "));
        }
        eprintln!(
            "{} job(s) past their retention (default {}); nothing deleted (--dry-run)",
            expired.len(),
            humantime::format_duration(args.keep.retention)
        );
    } else {
        let (mut jobs, mut rows) = (0, 0);
        loop {
            let (j, r) = trawl_scheduler::collect_garbage(
                store.as_ref(),
                args.keep.retention,
                now,
                BATCH,
                JOBS,
            )
            .await?;
            jobs += j;
            rows += r;
            if r == 0 {
                break;
            }
        }
        eprintln!("{jobs} job(s) past their retention deleted, {rows} row(s)");
        let p = store.keep_partitions(now).await?;
        if p.dropped > 0 {
            eprintln!("{} emptied day(s) of partitions dropped", p.dropped);
        }
    }
    println!("cost ledger by month:");
    for m in store.cost_months().await? {
        println!("{}\t{}\t{}", m.month, m.product, m.amount);
    }
    Ok(0)
}
