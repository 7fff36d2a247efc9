//! Cost rows the store could not take when their attempt ended.
//!
//! Every billed call of an attempt goes into the ledger once
//! ([`trawl_core::model::CostEntry`] is keyed by attempt). Most reach it with
//! the slice's outcome. Two kinds do not:
//!
//! - an attempt that ends in a transient failure and is delivered again: its
//!   outcome is not written, but the calls it made before failing were billed;
//! - an attempt whose outcome could not be written (the store was down): the
//!   slice is delivered again and runs as a new attempt, so its rows would be
//!   forgotten with it.
//!
//! [`Unwritten::write`] writes such rows at once with `Store::record_costs`;
//! when the store is down they are kept here and written by [`Unwritten::run`]
//! once it answers again. Writing rows twice changes nothing (the store keeps
//! the first of each key), so a write whose answer was lost is simply tried
//! again. What is kept is held in memory: a worker killed outright loses it.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use trawl_core::model::{CostEntry, JobId, SliceId};
use trawl_core::ports::{PortError, Store};

/// Rows kept at most; past it the oldest are given up (with an error logged),
/// so a store away for hours cannot exhaust the worker's memory.
const KEPT_AT_MOST: usize = 1_000_000;

/// One attempt's rows not yet in the ledger.
#[derive(Debug)]
struct Attempt {
    job: JobId,
    slice: SliceId,
    costs: Vec<CostEntry>,
    /// The attempt's upstream calls, counted with its rows.
    calls: u64,
}

/// Cost rows waiting for the store (see the module doc).
#[derive(Debug, Default)]
pub struct Unwritten {
    kept: Mutex<VecDeque<Attempt>>,
    /// Rows in `kept`.
    rows: std::sync::atomic::AtomicUsize,
    added: Notify,
}

impl Unwritten {
    /// Writes one attempt's rows now; keeps them for later when the store cannot
    /// take them.
    pub async fn write(
        &self,
        store: &dyn Store,
        job: &JobId,
        slice: &SliceId,
        costs: &[CostEntry],
        calls: u64,
    ) {
        if costs.is_empty() {
            return;
        }
        match store.record_costs(job, slice, costs, calls).await {
            Ok(_) => {}
            Err(PortError::NotFound(e)) => {
                tracing::warn!(job_id = %job, slice_id = %slice, error = %e, "costs of an unknown slice not recorded");
            }
            Err(e) => {
                tracing::warn!(job_id = %job, slice_id = %slice, rows = costs.len(), error = %e,
                    "costs not recorded; kept to write when the store answers");
                self.keep(job, slice, costs, calls);
            }
        }
    }

    /// Keeps one attempt's rows to write later.
    pub fn keep(&self, job: &JobId, slice: &SliceId, costs: &[CostEntry], calls: u64) {
        if costs.is_empty() {
            return;
        }
        use std::sync::atomic::Ordering;
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.push_back(Attempt {
            job: job.clone(),
            slice: slice.clone(),
            costs: costs.to_vec(),
            calls,
        });
        let mut rows = self.rows.fetch_add(costs.len(), Ordering::SeqCst) + costs.len();
        while rows > KEPT_AT_MOST {
            let Some(gone) = kept.pop_front() else { break };
            tracing::error!(job_id = %gone.job, slice_id = %gone.slice, rows = gone.costs.len(),
                "too many cost rows waiting for the store; the oldest are given up");
            rows = self.rows.fetch_sub(gone.costs.len(), Ordering::SeqCst) - gone.costs.len();
        }
        drop(kept);
        self.added.notify_one();
    }

    /// Rows waiting for the store.
    pub fn len(&self) -> usize {
        self.rows.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes what is kept, oldest first, until nothing is left or the store
    /// fails; `Err` with the store's error then (what was not written stays).
    pub async fn flush(&self, store: &dyn Store) -> Result<(), PortError> {
        use std::sync::atomic::Ordering;
        loop {
            let Some(next) = self
                .kept
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front()
            else {
                return Ok(());
            };
            match store
                .record_costs(&next.job, &next.slice, &next.costs, next.calls)
                .await
            {
                Ok(new) => {
                    self.rows.fetch_sub(next.costs.len(), Ordering::SeqCst);
                    tracing::info!(job_id = %next.job, slice_id = %next.slice, rows = next.costs.len(), new,
                        "kept costs recorded");
                }
                Err(PortError::NotFound(e)) => {
                    self.rows.fetch_sub(next.costs.len(), Ordering::SeqCst);
                    tracing::warn!(job_id = %next.job, slice_id = %next.slice, error = %e,
                        "kept costs of an unknown slice given up");
                }
                Err(e) => {
                    self.kept
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push_front(next);
                    return Err(e);
                }
            }
        }
    }

    /// Writes what is kept whenever there is some, waiting longer after each
    /// failure (up to `max_wait`), until `cancel` fires.
    pub async fn run(&self, store: &dyn Store, max_wait: Duration, cancel: CancellationToken) {
        loop {
            if self.is_empty() {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = self.added.notified() => {}
                }
            }
            let mut waits = ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(200))
                .with_max_delay(max_wait)
                .without_max_times()
                .with_jitter()
                .build();
            while let Err(e) = self.flush(store).await {
                let wait = waits.next().unwrap_or(max_wait);
                tracing::debug!(error = %e, rows = self.len(), ?wait, "kept costs not written yet");
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}
