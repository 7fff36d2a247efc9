//! In-process coalescing: concurrent lookups of one key share one run.
//!
//! One `OnceCell` per key in flight: the first caller runs its `init`, the others
//! wait for its result. The cell leaves the map as soon as a caller has its answer,
//! so a later lookup starts afresh. If the caller running `init` is cancelled, the
//! next waiter runs its own; a cell nobody waits on any more leaves the map too.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

pub(crate) struct Inflight<K, T> {
    cells: Mutex<HashMap<K, Arc<OnceCell<T>>>>,
}

impl<K: Hash + Eq + Clone, T: Clone> Inflight<K, T> {
    pub(crate) fn new() -> Self {
        Inflight {
            cells: Mutex::new(HashMap::new()),
        }
    }

    /// Runs `init` unless a run for `key` is in flight, whose result is shared
    /// instead. Returns the result and whether this caller ran `init`.
    pub(crate) async fn run<F, Fut>(&self, key: &K, init: F) -> (T, bool)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        let joined = Joined {
            inflight: self,
            key,
            cell: self.cell(key),
        };
        let mut ran = false;
        let result = joined
            .cell
            .get_or_init(|| {
                ran = true;
                init()
            })
            .await
            .clone();
        drop(joined);
        (result, ran)
    }

    fn cell(&self, key: &K) -> Arc<OnceCell<T>> {
        // Never held across an await; a panic elsewhere leaves the map usable.
        let mut map = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(key.clone()).or_default().clone()
    }

    /// Removes `cell` once it has an answer, or when its last caller leaves.
    fn release(&self, key: &K, cell: &Arc<OnceCell<T>>) {
        let mut map = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        // Counts only grow under this lock: 2 is the map's and ours.
        let last = Arc::strong_count(cell) <= 2;
        if map.get(key).is_some_and(|c| Arc::ptr_eq(c, cell)) && (cell.initialized() || last) {
            map.remove(key);
        }
    }

    /// How many callers share the run for `key` right now.
    #[cfg(test)]
    pub(crate) fn callers(&self, key: &K) -> usize {
        let map = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key).map_or(0, |c| Arc::strong_count(c) - 1)
    }
}

/// A caller's place in a run; leaving (answered or cancelled) releases the cell.
struct Joined<'a, K: Hash + Eq + Clone, T: Clone> {
    inflight: &'a Inflight<K, T>,
    key: &'a K,
    cell: Arc<OnceCell<T>>,
}

impl<K: Hash + Eq + Clone, T: Clone> Drop for Joined<'_, K, T> {
    fn drop(&mut self) {
        self.inflight.release(self.key, &self.cell);
    }
}
