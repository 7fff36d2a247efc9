//! What the simulator has answered, counted with atomics so the hot path takes no lock.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Counts of `POST /request` outcomes since the simulator started.
///
/// Once every request has been answered (or has hung),
/// `requests == ok + rate_limited + bad_gateway + timeouts + rejected`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimStats {
    /// Every `POST /request` received, whatever its outcome.
    pub requests: u64,
    /// Answered `200`.
    pub ok: u64,
    /// Answered `429` by fault injection.
    pub rate_limited: u64,
    /// Answered `502` by fault injection.
    pub bad_gateway: u64,
    /// Held without an answer by fault injection.
    pub timeouts: u64,
    /// Refused before any work: `400`, `401`, `413`.
    pub rejected: u64,
}

/// The live counters behind [`SimStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub requests: AtomicU64,
    pub ok: AtomicU64,
    pub rate_limited: AtomicU64,
    pub bad_gateway: AtomicU64,
    pub timeouts: AtomicU64,
    pub rejected: AtomicU64,
}

/// Adds one. Counters are independent and only ever grow, so relaxed ordering is
/// enough: a reader sees each count at least as it was when the answer left.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    pub fn snapshot(&self) -> SimStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SimStats {
            requests: get(&self.requests),
            ok: get(&self.ok),
            rate_limited: get(&self.rate_limited),
            bad_gateway: get(&self.bad_gateway),
            timeouts: get(&self.timeouts),
            rejected: get(&self.rejected),
        }
    }
}
