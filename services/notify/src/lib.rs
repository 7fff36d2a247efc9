//! Approvals where people are: Slack, and an outgoing webhook for teams without it.
//!
//! Every approval (a job's budget above its `approve_above_usd`, a tool's changed
//! definition, a new tool, a tool call) is posted as a Block Kit message with
//! Approve and Reject buttons; Slack posts the clicks back to the API
//! (`POST /v1/integrations/slack/interactions`), which checks Slack's signature
//! and decides through the same path as the REST API. Approvals nobody decides
//! expire after a TTL, and what they held stays held, with the reason.
//!
//! # Layout
//!
//! - [`signature`]: Slack's request signatures (verified over the raw body, in
//!   constant time, within 5 minutes) and the outgoing webhook's. Pure.
//! - [`slack`]: the Block Kit messages (request, decided, outcome, ephemeral),
//!   the interaction payload of a click, and the hosts a reply may go to. Pure.
//! - [`view`]: [`ApprovalView`], an approval as the REST API shows it and the
//!   webhook sends it.
//! - [`notifier`]: the loop of the scheduler role: expires approvals, claims
//!   their notices from the store (the approval row is the outbox, leased so
//!   several schedulers never post one notice at once), posts them with a
//!   timeout and bounded retries, and marks them sent only after a 2xx: at least
//!   once, never lost.

pub mod notifier;
pub mod signature;
pub mod slack;
pub mod view;

pub use notifier::{
    DeliveryError, Notifier, NotifyConfig, PassReport, Webhook, post_json, webhook_event,
};
pub use signature::{SignatureError, sign_slack, sign_webhook, verify_slack, verify_webhook};
pub use slack::{Click, Interaction, ResponseHosts, SlackUser};
pub use view::{ApprovalLinks, ApprovalView};
