//! The store: where a job, its slices and everything they produce are kept.
//!
//! This crate holds the adapters of [`trawl_core::ports::Store`]. Roles hold an
//! `Arc<dyn Store>` and never name one.
//!
//! # Layout
//!
//! - [`sqlite`]: the embedded adapter, one SQLite file through sqlx. Its schema is
//!   `src/sqlite.sql` (version 1) and `src/sqlite_v<N>.sql` (version N, up to 14),
//!   applied at open and versioned with `PRAGMA user_version`. Everything goes
//!   through a single connection: SQLite has one writer, and queueing in the
//!   process is cheaper than contending through busy handlers. Concurrent `record_outcome` calls are
//!   group-committed (`sqlite/outcomes.rs`).
//! - [`postgres`]: the distributed adapter, a sqlx pool shared by every process of
//!   a deployment. Its schema is the top-level `migrations/` folder, applied at
//!   connect (or by `trawl migrate`, through [`postgres::migrate`]) under an advisory
//!   lock. Each outcome is one statement that claims its slice and inserts its rows
//!   from arrays.
//! - `vector` (private): how both adapters store a vector of floats, as
//!   little-endian f32 bytes.
//! - `decode` (private): reading stored rows into records, once for both
//!   adapters (both row types implement its `Columns`).
//! - `error` (private): how a sqlx error becomes a [`trawl_core::ports::PortError`],
//!   by what the caller can do next; shared by both adapters.
//! - `conformance` (tests only): the behaviour every adapter must have, one suite
//!   run against each.
//! - `testing` (feature `testing`): a store with faults and hooks for the tests
//!   of the roles that use one.
//!
//! # Invariants
//!
//! - An outcome is written in one transaction, and only while its slice is pending:
//!   a redelivered slice writes nothing and reports no new children.
//! - The rows of a slice are keyed by (job, slice, seq); the first record of a seq
//!   is the one kept.
//! - Money is integer micro-dollars; times are milliseconds since the epoch.
//! - `counts` always equals what is stored: SQLite keeps per-job counters with
//!   triggers, Postgres keeps them in 16 stripes per job written by the outcome
//!   statement (one row per job would make concurrent writers of one job wait for
//!   each other).
//! - A job past its retention is deleted a batch of rows at a time, children
//!   before what they refer to, the job row last; its cost rows are added to the
//!   monthly ledger (`cost_months`) in the same statement or transaction that
//!   deletes them.
//! - An idempotency key names at most one job; a second is `PortError::Conflict`.
//! - An artifact is keyed by (job, name): storing a name again replaces it. Its
//!   data is at most `MAX_ARTIFACT_BYTES`; more is refused before anything is
//!   written.
//! - An approval's id is random (52 bits above 2^32, from the operating
//!   system's source), never a sequence.
//! - An approval is decided once, and only while pending and before its expiry;
//!   an expired one is closed `approved = false, expired`. Its notices (Slack, the
//!   outgoing webhook) go out through the row itself, claimed with a lease, and
//!   are marked sent only after delivery: at least once, never lost.
//! - A cached embedding is keyed by (model, key) and never replaced: the same text
//!   under the same weights has the same vector, stored bit for bit.

#[cfg(test)]
mod conformance;
mod decode;
mod error;
pub mod postgres;
pub mod sqlite;
#[cfg(feature = "testing")]
pub mod testing;
mod vector;

pub use postgres::PgStore;
pub use sqlite::SqliteStore;

/// The id of an approval about to be stored: random, from the operating
/// system's source ([`trawl_core::model::approval_id`]), so a page or a caller
/// cannot guess a pending approval's id from ids it has seen. An upsert onto a
/// pending approval keeps that one's id.
pub(crate) fn new_approval_id() -> Result<i64, trawl_core::ports::PortError> {
    trawl_core::model::unguessable_u64()
        .map(trawl_core::model::approval_id)
        .map_err(|e| trawl_core::ports::PortError::Unavailable(e.to_string()))
}
