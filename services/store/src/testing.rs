//! What tests of the roles need of a store: a real one ([`SqliteStore`] in
//! memory) with faults and hooks the test turns on.
//!
//! [`FaultyStore`] changes a few `SliceStore` methods and forwards everything
//! else, so a worker or scheduler test sees the behaviour of a real store except
//! where it asked for a fault.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use async_trait::async_trait;
use trawl_core::model::{
    CostEntry, Item, JobCounts, JobId, JobStatus, Progress, Rejection, SliceId, SliceOutcome,
    SliceSpec, TraceStep,
};
use trawl_core::ports::{
    ApprovalStore, ArtifactStore, FailedSlice, Forward, JobStore, PortError, Recorded, RowCursor,
    SliceStore, ToolStore, WorkerStore,
};

use crate::SqliteStore;

/// A store with faults the test turns on: outcomes lost (not written, or written
/// with the answer lost, as when the connection drops after the commit), writes
/// refused while it is "down", and a job ended under the caller's feet. Reads
/// always work. Each switch starts off.
pub struct FaultyStore {
    /// The real store underneath.
    pub inner: SqliteStore,
    /// The next this many `record_outcome` calls fail without writing.
    pub lose_outcomes: AtomicU32,
    /// The next this many `record_outcome` calls write, then fail.
    pub lose_answers: AtomicU32,
    /// Every outcome, progress and cost write fails.
    pub down: AtomicBool,
    /// The first `counts` of this job ends it first with this status and
    /// reason, as a cancel over the API landing while the caller reads would.
    pub end_on_counts: Mutex<Option<(JobId, JobStatus, String)>>,
}

impl FaultyStore {
    /// An empty store in memory, every switch off.
    pub async fn memory() -> Result<FaultyStore, PortError> {
        Ok(FaultyStore {
            inner: SqliteStore::memory().await?,
            lose_outcomes: AtomicU32::new(0),
            lose_answers: AtomicU32::new(0),
            down: AtomicBool::new(false),
            end_on_counts: Mutex::new(None),
        })
    }

    fn refuse(&self) -> Result<(), PortError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(PortError::Unavailable("the store is down (test)".into()));
        }
        Ok(())
    }
}

/// Takes one from `n` if it is above 0.
fn take_one(n: &AtomicU32) -> bool {
    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
        .is_ok()
}

#[async_trait]
impl SliceStore for FaultyStore {
    async fn open_slices_page(
        &self,
        id: &JobId,
        after: Option<&SliceId>,
        limit: u32,
    ) -> Result<Vec<SliceSpec>, PortError> {
        self.inner.open_slices_page(id, after, limit).await
    }
    async fn record_outcome(
        &self,
        job: &JobId,
        slice: &SliceId,
        outcome: &SliceOutcome,
    ) -> Result<Recorded, PortError> {
        self.refuse()?;
        if take_one(&self.lose_outcomes) {
            return Err(PortError::Unavailable("connection reset (test)".into()));
        }
        let recorded = self.inner.record_outcome(job, slice, outcome).await?;
        if take_one(&self.lose_answers) {
            return Err(PortError::Unavailable(
                "connection reset after commit (test)".into(),
            ));
        }
        Ok(recorded)
    }
    async fn record_costs(
        &self,
        job: &JobId,
        slice: &SliceId,
        costs: &[CostEntry],
        calls: u64,
    ) -> Result<u64, PortError> {
        self.refuse()?;
        self.inner.record_costs(job, slice, costs, calls).await
    }
    async fn save_progress(
        &self,
        job: &JobId,
        slice: &SliceId,
        progress: &Progress,
    ) -> Result<(), PortError> {
        self.refuse()?;
        self.inner.save_progress(job, slice, progress).await
    }
    async fn progress(&self, job: &JobId, slice: &SliceId) -> Result<Option<Progress>, PortError> {
        self.inner.progress(job, slice).await
    }
    async fn counts(&self, id: &JobId) -> Result<JobCounts, PortError> {
        let armed = self
            .end_on_counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take_if(|(j, _, _)| j == id);
        if let Some((_, status, reason)) = armed {
            self.inner.end_job(id, status, Some(&reason)).await?;
        }
        self.inner.counts(id).await
    }
    async fn items(&self, id: &JobId) -> Result<Vec<Item>, PortError> {
        self.inner.items(id).await
    }
    async fn rejections(&self, id: &JobId) -> Result<Vec<Rejection>, PortError> {
        self.inner.rejections(id).await
    }
    async fn failed_slices(&self, id: &JobId, limit: u32) -> Result<Vec<FailedSlice>, PortError> {
        self.inner.failed_slices(id, limit).await
    }
    async fn add_slices(&self, id: &JobId, slices: &[SliceSpec]) -> Result<u64, PortError> {
        self.inner.add_slices(id, slices).await
    }
    async fn slices_to_publish(
        &self,
        id: &JobId,
        stale_before_ms: i64,
        limit: u32,
    ) -> Result<Vec<SliceSpec>, PortError> {
        self.inner
            .slices_to_publish(id, stale_before_ms, limit)
            .await
    }
    async fn mark_published(
        &self,
        id: &JobId,
        slices: &[SliceId],
        at_ms: i64,
    ) -> Result<(), PortError> {
        self.inner.mark_published(id, slices, at_ms).await
    }
    async fn items_page(
        &self,
        id: &JobId,
        after: Option<&RowCursor>,
        limit: u32,
    ) -> Result<Vec<Item>, PortError> {
        self.inner.items_page(id, after, limit).await
    }
    async fn rejections_page(
        &self,
        id: &JobId,
        after: Option<&RowCursor>,
        limit: u32,
    ) -> Result<Vec<Rejection>, PortError> {
        self.inner.rejections_page(id, after, limit).await
    }
    async fn trace_page(
        &self,
        id: &JobId,
        after: Option<&RowCursor>,
        limit: u32,
    ) -> Result<Vec<TraceStep>, PortError> {
        self.inner.trace_page(id, after, limit).await
    }
}

impl Forward<dyn JobStore> for FaultyStore {
    fn to(&self) -> &(dyn JobStore + 'static) {
        &self.inner
    }
}

impl Forward<dyn ApprovalStore> for FaultyStore {
    fn to(&self) -> &(dyn ApprovalStore + 'static) {
        &self.inner
    }
}

impl Forward<dyn ToolStore> for FaultyStore {
    fn to(&self) -> &(dyn ToolStore + 'static) {
        &self.inner
    }
}

impl Forward<dyn ArtifactStore> for FaultyStore {
    fn to(&self) -> &(dyn ArtifactStore + 'static) {
        &self.inner
    }
}

impl Forward<dyn WorkerStore> for FaultyStore {
    fn to(&self) -> &(dyn WorkerStore + 'static) {
        &self.inner
    }
}
