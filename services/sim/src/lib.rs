//! A simulator of Bright Data's unified API, `POST /request`, for demos, tests and
//! load tests: the project's real Bright Data client talks to it unchanged, only the
//! base URL differs.
//!
//! It follows Bright Data's documentation:
//! - request body and answers of the Unlocker API:
//!   <https://docs.brightdata.com/api-reference/rest-api/unlocker/unlock-website>
//! - SERP parsing (`brd_json=1`) and response formats:
//!   <https://docs.brightdata.com/scraping-automation/serp-api/features>
//! - SERP requests over the same endpoint:
//!   <https://docs.brightdata.com/api-reference/rest-api/serp/get-results>
//! - error statuses and the `x-brd-error` / `x-brd-error-code` headers:
//!   <https://docs.brightdata.com/scraping-automation/web-unlocker/error-codes>
//!
//! What it answers:
//! - **SERP zone** (default `serp_api1`), Google or Bing search URL: ten organic
//!   results linking to `https://shop.example/p/<slug>`; parsed JSON with
//!   `brd_json=1`, else HTML. Same engine, normalized query and geo, same body.
//! - **Unlocker zone** (default `web_unlocker1`), any http(s) URL: a product page
//!   with an `<h1>`, a `SKU:` line and a schema.org `Product` in JSON-LD whose price
//!   and currency depend on `country`. About 5% of urls (by url alone) are broken on
//!   purpose: no price, a negative price, or a lower-case currency.
//! - `data_format: "markdown"` converts the page; `format: "json"` wraps it as
//!   `{"status_code", "headers", "body"}` as the documentation describes.
//! - **Refusals**, before any work: 401 (plain text, no `x-brd-*` headers) for a
//!   missing or wrong bearer token, 400 with `x-brd-error` for a bad body, an unknown
//!   zone or an invalid URL, 413 above 64 KiB.
//! - **Faults**, drawn per authorized, well-formed request: 429 `sr_rate_limit` with
//!   `Retry-After`, 502 `reject_block`, or a request held unanswered for `hang`
//!   (the caller's timeout should end it; if not, it gets a 502
//!   `domcontentloaded_event_timeout`, and at shutdown a 503).
//!   The documented Direct API reports unlock failures as an outer 200 with the real
//!   status in `x-brd-status-code`; the simulator sends the real status as the outer
//!   status (and repeats it in `x-brd-status-code`), which is what a client's retry
//!   policy needs to see.
//! - **Down hosts**: a page on a host under [`DOWN_HOST_SUFFIX`] (`.down.test`)
//!   always gets the 502 `reject_block` answer, so a test can have a slice that
//!   never succeeds.
//! - `GET /__sim/stats`: the counters of [`SimStats`].
//!
//! Layout:
//! - `config`: [`SimConfig`], [`Faults`] and their parsers; checked once at startup.
//! - `api`: the axum routes; checks a request, draws a fault, renders, counts, and
//!   maps every outcome to its status and headers in one place.
//! - `serp`, `product`: the deterministic pages, built with `format!` (no template
//!   engine: page generation must stay far cheaper than the HTTP around it).
//! - `seed`, `escape`: SHA-256 seeds and HTML/JSON/Markdown escaping for them.
//! - `stats`: atomic counters, read without locks.
//! - `server`: [`serve`] on a bound listener with a shutdown future, and [`spawn`]
//!   for tests, whose [`SimHandle`] stops the server when dropped.

mod api;
mod config;
mod escape;
mod product;
mod seed;
mod serp;
mod server;
mod stats;

pub use api::{BODY_LIMIT, DOWN_HOST_SUFFIX};
pub use config::{ConfigError, FAULTS_VAR, Faults, LATENCY_VAR, SimConfig, parse_latency};
pub use server::{SimHandle, serve, spawn};
pub use stats::SimStats;
