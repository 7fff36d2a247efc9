//! The REST API of trawl: submit jobs, read what they found, cancel them, decide
//! approvals. Served by `trawl api` and `trawl dev`.
//!
//! Layout:
//!
//! - [`state`]: [`ApiState`] (the ports, prices, keys, body limit) and the bearer
//!   key check, in constant time.
//! - [`error`]: [`ApiError`], the one place errors become RFC 9457 problem+json.
//! - `jobs`: `POST /v1/jobs` (JSON or YAML, idempotency keys), `GET /v1/jobs/{id}`,
//!   `POST /v1/jobs/{id}/cancel`.
//! - `rows`: `GET /v1/jobs/{id}/items|rejections|trace`, cursor pages as JSON or
//!   NDJSON.
//! - `artifacts`: `GET /v1/jobs/{id}/artifacts` and `/artifacts/{name}`, the files
//!   a job's slices produced (screenshots), listed and served as stored.
//! - `approvals`: `GET /v1/approvals`, `POST /v1/approvals/{id}/approve|reject`.
//! - [`slack`]: `POST /v1/integrations/slack/interactions`, clicks on approval
//!   buttons in Slack, checked by Slack's signature instead of a bearer token.
//! - `usage`: `GET /v1/usage`, a tenant's spend and slices by day, its limits
//!   (`TRAWL_TENANT_LIMITS`) and what is left of them.
//! - `health`: `GET /healthz`, `GET /readyz`.
//! - [`ops`]: the operations listener (`/healthz`, `/readyz`, `/metrics`) the
//!   scheduler and the workers serve, and the API when `TRAWL_OPS_LISTEN` is set.
//! - [`openapi`]: `GET /openapi.json`, generated from the handlers.
//! - [`oauth`]: the OAuth 2.1 resource server (RFC 9728 metadata, JWT access
//!   tokens checked against the authorization server's keys, RFC 8707 audience,
//!   scopes) in front of `/v1` and `/mcp`.
//! - [`mcp`]: `/mcp`, trawl as an MCP server (rmcp, Streamable HTTP): the
//!   research tools, `tool_search` and the federated upstream tools.
//! - [`server`]: [`router`] and [`serve`] (graceful shutdown with a deadline).
//! - [`site`]: the `Host` and `Origin` check in front of every route (DNS
//!   rebinding, cross-site forms and `text/plain` posts), in every mode.
//! - [`limits`]: what keeps one client from exhausting the server: header and
//!   body read timeouts and connections per address ([`HttpLimits`], enforced by
//!   [`serve_with`]), request rates per caller ([`RateLimits`]); `/mcp`'s
//!   session limits are [`mcp::SessionLimits`].
//! - `testing` (feature `testing`): the state over the embedded adapters, for
//!   tests.
//!
//! The API only stores and reads: a submitted job is stored `pending` and the
//! scheduler plans it; every change is followed by an event, and a lost event only
//! delays the scheduler until its next reconcile.

mod approvals;
mod artifacts;
pub mod error;
mod health;
mod jobs;
pub mod limits;
pub mod mcp;
pub mod oauth;
pub mod openapi;
pub mod ops;
mod rows;
pub mod server;
pub mod site;
pub mod slack;
pub mod state;
#[cfg(feature = "testing")]
pub mod testing;
pub(crate) mod usage;

pub use approvals::{ApprovalLinks, ApprovalView, ApprovalsList, Decision};
pub use artifacts::{ArtifactView, ArtifactsList, artifact_url};
pub use axum::Router;
pub use error::{ApiError, FieldError, PROBLEM_BASE, PROBLEM_JSON, Problem};
pub use health::{Health, PING_TIMEOUT, Ready};
pub use jobs::{
    CANCEL_REASON, CountsView, EstimateView, ItemCounts, JobAccepted, JobLinks, JobView,
    SliceCounts,
};
pub use limits::{HttpLimits, RateLimit, RateLimits};
pub use mcp::{McpConfig, McpSessions, SessionLimits};
pub use oauth::{OAuthConfig, ResourceServer};
pub use openapi::ApiDoc;
pub use ops::{OpsBackends, metrics, ops_router, with_metrics};
pub use rows::{DEFAULT_LIMIT, ItemsPage, MAX_LIMIT, RejectionsPage, TracePage};
pub use server::{DRAIN_DEADLINE, router, serve, serve_with};
pub use site::{LocalAddr, SiteConfig};
pub use slack::SlackConfig;
pub use state::{ApiKey, ApiState, Auth};
