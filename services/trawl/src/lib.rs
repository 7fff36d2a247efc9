//! The `trawl` binary's library: wiring of roles and adapters, nothing else.
//!
//! - [`cli`]: the command line (`main.rs` only calls it).
//! - [`client`]: `trawl submit`, the HTTP API's command-line client.
//! - [`deployed`]: `trawl api | scheduler | worker | migrate` over Postgres, NATS
//!   and Redis, and `trawl dev` (the same roles in one process, embedded).
//! - [`embedded`]: `trawl run` in one process: SQLite store and cache in a state
//!   folder, the in-process queue, one worker, the scheduler, and Bright Data or
//!   the built-in simulator when no token is set.
//! - [`output`]: `items.jsonl`, `rejections.jsonl` and `summary.json`.
//! - [`progress`]: a progress bar on a terminal, log lines otherwise.
//! - [`tools_cli`]: `trawl tools`: the tool layer's catalog, search, scanner,
//!   pins and approvals.

pub mod cli;
pub mod client;
pub mod deployed;
pub mod embedded;
pub mod output;
pub mod progress;
pub mod tools_cli;
