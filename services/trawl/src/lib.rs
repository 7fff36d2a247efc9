//! The `trawl` binary's library: wiring of roles and adapters, nothing else.
//!
//! - [`cli`]: the command line (`main.rs` only calls it).
//! - [`client`]: `trawl submit`, the HTTP API's command-line client.
//! - [`deployed`]: `trawl api | scheduler | worker | migrate` over Postgres, NATS
//!   and Redis, and `trawl dev` (the same roles in one process, embedded).
//! - [`embedded`]: the system in one process (`trawl run`, and `trawl dev` under
//!   the API): SQLite store and cache in a state folder, the in-process queue,
//!   the scheduler role, a standard and an isolated worker, and Bright Data or
//!   the built-in simulator when no token is set.
//! - [`follow`]: the one loop that waits for a job (`trawl run`, `trawl submit
//!   --wait`).
//! - [`output`]: `items.jsonl`, `rejections.jsonl` and `summary.json`.
//! - [`progress`]: a progress bar on a terminal, log lines otherwise.
//! - [`tools_cli`]: `trawl tools`: the tool layer's catalog, search, scanner,
//!   pins and approvals.
//! - [`workers_cli`]: `trawl workers`: the workers that reported to the store.

pub mod cli;
pub mod client;
pub mod deployed;
pub mod embedded;
pub mod follow;
pub mod gc_cli;
pub mod models;
pub mod output;
pub mod progress;
pub mod tools_cli;
pub mod workers_cli;
