//! The domain of trawl, with no I/O.
//!
//! Everything here is a pure function or a plain type, so it is tested without a
//! runtime, a database or a network:
//!
//! - [`spec`]: the job spec (YAML or JSON) parsed into a checked [`spec::JobSpec`],
//!   with every error listed by field path.
//! - [`plan`]: a spec turned into slices whose ids derive from their content, and a
//!   cost estimate.
//! - [`extract`]: a fetched page turned into an item (JSON-LD paths, CSS selectors,
//!   regular expressions).
//! - [`validate`]: each item checked on its own against the job's JSON Schema.
//! - [`retry`]: how errors are classified and how often a call is tried.
//! - [`cost`]: money in integer micro-dollars and the price table.
//! - [`model`]: ids, slices, statuses and the records a slice produces.
//! - [`ports`]: the traits the adapters implement (queue, cache, store, tools, events).
//! - [`geo`]: ISO 3166-1 alpha-2 country codes.
//! - [`resource`]: canonical resource URIs (RFC 8707), the audience of tokens.
//! - [`egress`]: where a browser session may connect (public destinations unless
//!   an allow list opens more), checked by the egress proxy and at submission.
//! - [`tenant`]: tenants' limits (slices, jobs, spend, approval) and the check
//!   of a submission against what a tenant has.
//! - [`workers`]: what a worker reports it can run, model routing, and whether
//!   the reported workers can run a job.

pub mod cost;
pub mod egress;
pub mod extract;
pub mod geo;
pub mod model;
pub mod plan;
pub mod ports;
pub mod resource;
pub mod retry;
pub mod spec;
pub mod tenant;
pub mod validate;
pub mod workers;

use sha2::{Digest, Sha256};

/// Hex sha256 of the given parts, each terminated by a zero byte so that
/// `("ab", "c")` and `("a", "bc")` differ.
pub fn digest(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    hex::encode(h.finalize())
}
