//! Following a job to its end: the one wait loop of `trawl run` (over the
//! embedded store) and `trawl submit --wait` (over the HTTP API).
//!
//! Both read the job as the API shows it ([`JobView`]) every `poll`, show its
//! counts, and stop when it has ended or waits for an approval.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use trawl_api::JobView;
use trawl_core::cost::Micros;
use trawl_core::model::{JobCounts, JobStatus};

use crate::progress::Progress;

/// Reads the job with `read` until it has ended or waits for an approval;
/// `None` when `cancel` fired first.
pub async fn follow<F, Fut>(
    mut read: F,
    poll: Duration,
    progress: &mut Progress,
    cancel: &CancellationToken,
) -> anyhow::Result<Option<JobView>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<JobView>>,
{
    loop {
        let view = read().await?;
        let counts = counts_of(&view);
        progress.update(&counts);
        if view.status.is_terminal() || view.status == JobStatus::AwaitingApproval {
            progress.finish(&counts);
            return Ok(Some(view));
        }
        tokio::select! {
            () = cancel.cancelled() => return Ok(None),
            () = tokio::time::sleep(poll) => {}
        }
    }
}

/// The counters of a job view.
pub fn counts_of(v: &JobView) -> JobCounts {
    let c = &v.counts;
    JobCounts {
        slices_total: c.slices.total,
        slices_succeeded: c.slices.succeeded,
        slices_failed: c.slices.failed,
        items_valid: c.items.valid,
        items_rejected: c.items.rejected,
        upstream_calls: c.upstream_calls,
        cache_hits: c.cache_hits,
        cost: Micros(c.cost_micros),
        ..JobCounts::default()
    }
}
