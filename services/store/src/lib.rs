//! The store: where a job, its slices and everything they produce are kept.
//!
//! This crate holds the adapters of [`trawl_core::ports::Store`]. Roles hold an
//! `Arc<dyn Store>` and never name one.
//!
//! # Layout
//!
//! - [`sqlite`]: the embedded adapter, one SQLite file through sqlx. Its schema is
//!   `src/sqlite.sql`, applied once at open and versioned with `PRAGMA user_version`.
//!   Everything goes through a single connection: SQLite has one writer, and queueing
//!   in the process is cheaper than contending through busy handlers. Concurrent
//!   `record_outcome` calls are group-committed (`sqlite/outcomes.rs`).
//! - `error` (private): how a sqlx error becomes a [`trawl_core::ports::PortError`],
//!   by what the caller can do next; shared with the adapters to come (a `postgres`
//!   module can join `sqlite`).
//!
//! # Invariants
//!
//! - An outcome is written in one transaction, and only while its slice is pending:
//!   a redelivered slice writes nothing and reports no new children.
//! - Money is integer micro-dollars; times are milliseconds since the epoch.
//! - Per-job counters are kept by the database itself (triggers), so `counts` reads
//!   one row and always equals what is stored.

mod error;
pub mod sqlite;

pub use sqlite::SqliteStore;
