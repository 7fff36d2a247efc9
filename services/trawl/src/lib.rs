//! The `trawl` binary's library: wiring of roles and adapters, nothing else.
//!
//! - [`embedded`]: `trawl run` in one process: SQLite store and cache in a state
//!   folder, the in-process queue, one worker, the scheduler, and Bright Data or
//!   the built-in simulator when no token is set.
//! - [`output`]: `items.jsonl`, `rejections.jsonl` and `summary.json`.
//! - [`progress`]: a progress bar on a terminal, log lines otherwise.
//! - [`telemetry`]: the tracing setup every role shares.

pub mod embedded;
pub mod output;
pub mod progress;
pub mod telemetry;
