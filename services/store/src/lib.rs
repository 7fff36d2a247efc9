//! The store: where a job, its slices and everything they produce are kept.
//!
//! This crate holds the adapters of [`trawl_core::ports::Store`]. Roles hold an
//! `Arc<dyn Store>` and never name one.
//!
//! # Layout
//!
//! - [`sqlite`]: the embedded adapter, one SQLite file through sqlx. Its schema is
//!   `src/sqlite.sql`, applied once at open and versioned with `PRAGMA user_version`.
//!   All access goes through a single connection: SQLite has one writer, and queueing
//!   on a pool is cheaper than contending through busy handlers.
//! - `error` (private): how a sqlx error becomes a [`trawl_core::ports::PortError`],
//!   shared by every adapter (a `postgres` module can join `sqlite` later).
//!
//! # Invariants
//!
//! - An outcome is written in one transaction, and only while its slice is pending:
//!   a redelivered slice writes nothing.
//! - Money is integer micro-dollars; times are milliseconds since the epoch.
//! - Per-job counters are kept by the database itself (triggers), so `counts` reads
//!   one row and always equals what is stored.

mod error;
pub mod sqlite;

pub use sqlite::SqliteStore;
