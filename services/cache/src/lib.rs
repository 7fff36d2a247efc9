//! Content caches: where tool answers are kept so identical calls, within a job
//! or across jobs, reach the upstream once.
//!
//! Both adapters implement [`trawl_core::ports::ContentCache`]: freshness is judged
//! when reading, against the caller's `max_age` (each job sets its own), and
//! concurrent lookups of one key share one load.
//!
//! Layout:
//! - [`sqlite`]: the embedded cache, one file per installation, coalescing loads
//!   within the process.
//! - [`redis`](mod@crate::redis): the distributed cache shared by worker pods,
//!   with single-flight loads across pods and graceful degradation when Redis is
//!   away.
//! - `inflight`: the in-process coalescing both use.

mod inflight;
pub mod redis;
pub mod sqlite;

pub use self::redis::{DEFAULT_LOCK_TTL, RedisCache, RedisConfig};
pub use self::sqlite::SqliteCache;
