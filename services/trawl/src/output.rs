//! What a run leaves in its output folder.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::time::Duration;

use trawl_api::JobView;
use trawl_core::model::{Item, ItemKind, JobCounts, JobStatus};
use trawl_core::ports::FailedSlice;

/// `summary.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub job_id: String,
    pub name: String,
    pub status: JobStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub slices: SliceCounts,
    pub items: ItemCounts,
    /// Attempts that reached the upstream (Bright Data or the simulator).
    pub upstream_calls: u64,
    /// Tool answers served by the cache (or by a concurrent identical call).
    pub cache_hits: u64,
    pub cost_usd: f64,
    /// The same, exact, in micro-dollars.
    pub cost_micros: i64,
    pub estimate_usd: f64,
    /// Whether the built-in simulator played Bright Data.
    pub simulator: bool,
    pub elapsed_s: f64,
    /// The first failed slices with their last error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_slices: Vec<FailedSliceOut>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SliceCounts {
    pub total: u64,
    pub succeeded: u64,
    pub failed: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ItemCounts {
    pub valid: u64,
    pub rejected: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FailedSliceOut {
    pub slice_id: String,
    pub kind: String,
    pub subject: String,
    pub geo: String,
    pub code: String,
    pub message: String,
}

impl From<FailedSlice> for FailedSliceOut {
    fn from(f: FailedSlice) -> Self {
        FailedSliceOut {
            slice_id: f.slice_id.to_string(),
            kind: f.kind,
            subject: f.subject,
            geo: f.geo,
            code: f.error.code,
            message: f.error.message,
        }
    }
}

impl SliceCounts {
    pub fn of(c: &JobCounts) -> Self {
        SliceCounts {
            total: c.slices_total,
            succeeded: c.slices_succeeded,
            failed: c.slices_failed,
        }
    }
}

impl Summary {
    /// `summary.json` of a job as the API shows it ([`JobView`], the one job
    /// summary), with what only the command line knows.
    pub fn of(
        view: &JobView,
        simulator: bool,
        elapsed: Duration,
        failed_slices: Vec<FailedSliceOut>,
    ) -> Summary {
        let c = &view.counts;
        Summary {
            job_id: view.job_id.to_string(),
            name: view.name.clone(),
            status: view.status,
            reason: view.reason.clone(),
            slices: SliceCounts {
                total: c.slices.total,
                succeeded: c.slices.succeeded,
                failed: c.slices.failed,
            },
            items: ItemCounts {
                valid: c.items.valid,
                rejected: c.items.rejected,
            },
            upstream_calls: c.upstream_calls,
            cache_hits: c.cache_hits,
            cost_usd: c.cost_usd,
            cost_micros: c.cost_micros,
            estimate_usd: view.estimate.cost_usd,
            simulator,
            elapsed_s: elapsed.as_secs_f64(),
            failed_slices,
        }
    }
}

/// How many failed slices the summary lists.
pub const FAILED_LISTED: u32 = 20;

/// Writes `items.jsonl`, `rejections.jsonl` (rows already JSON, one a line),
/// a research job's `report.md`, and `summary.json`; each goes to a temporary
/// name first, then is renamed, so a reader never sees half a file. The one
/// writer of a run's output, whether the rows came from the store or the API.
pub fn write(
    dir: &Path,
    items: &[String],
    rejections: &[String],
    summary: &Summary,
) -> anyhow::Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating output folder {}", dir.display()))?;
    write_raw_lines(&dir.join("items.jsonl"), items)?;
    // A research job's report, as Markdown next to its items.
    if let Some(md) = items
        .iter()
        .filter(|l| l.contains("\"report\""))
        .filter_map(|l| serde_json::from_str::<Item>(l).ok())
        .find(|i| i.kind == ItemKind::Report)
        .and_then(|i| i.data["markdown"].as_str().map(str::to_owned))
    {
        write_atomic(&dir.join("report.md"), |w| w.write_all(md.as_bytes()))?;
    }
    write_raw_lines(&dir.join("rejections.jsonl"), rejections)?;
    let json = serde_json::to_vec_pretty(summary).context("encoding summary")?;
    write_atomic(&dir.join("summary.json"), |w| {
        w.write_all(&json)?;
        w.write_all(b"\n")
    })
}

/// Rows as JSON lines.
pub fn json_lines<T: Serialize>(rows: &[T]) -> anyhow::Result<Vec<String>> {
    rows.iter()
        .map(|r| serde_json::to_string(r).context("encoding a row"))
        .collect()
}

/// Writes lines that are already JSON, one per line.
fn write_raw_lines(path: &Path, lines: &[String]) -> anyhow::Result<()> {
    write_atomic(path, |w| {
        for l in lines {
            w.write_all(l.as_bytes())?;
            w.write_all(b"\n")?;
        }
        Ok(())
    })
}

fn write_atomic(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<fs::File>) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    let file = fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let mut w = BufWriter::new(file);
    fill(&mut w).with_context(|| format!("writing {}", tmp.display()))?;
    w.flush()
        .with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
}
