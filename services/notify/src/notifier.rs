//! The notifier: expires approvals nobody decided, and delivers the notices of the
//! others to Slack and the outgoing webhook. It runs in the scheduler role (and in
//! `trawl dev`); any number may run against one store.
//!
//! Each pass, every [`NotifyConfig::every`]:
//!
//! 1. **expire**: pending approvals get an expiry (`requested + ttl`) if they have
//!    none; those past it are closed as expired, and their jobs cancelled with the
//!    reason, in one transaction of the store ([`Store::expire_approvals`]);
//! 2. **claim**: up to [`CLAIM_BATCH`] approvals whose notice is due are leased for
//!    [`NotifyConfig::lease`] ([`Store::claim_approval_notices`]): no other
//!    notifier takes them meanwhile;
//! 3. **deliver**: each notice goes to every configured sink, each request with a
//!    timeout and a few jittered retries ([`NotifyConfig::attempts`]); the batch is
//!    delivered concurrently, so a pass takes about one notice's worst case, well
//!    inside the lease;
//! 4. **record**: after a 2xx from every sink the notice is marked sent; otherwise
//!    it is released for the next pass (a sink that refuses the message itself,
//!    4xx, is tried again after [`REFUSED_RETRY`], not every pass), and the
//!    failure is logged.
//!
//! Delivery is **at least once**: marking after posting means a notifier that dies
//! (or a store that fails) between the two posts the notice again once the lease
//! runs out, and a notice that reached one sink but not the other is posted to
//! both again. Marking first would lose a notice instead; a duplicate Slack
//! message is the lesser harm, and the webhook's `event_id` lets a receiver drop
//! duplicates.

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use futures_util::future::join_all;
use reqwest::StatusCode;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, instrument, warn};
use trawl_core::model::now_ms;
use trawl_core::ports::{ApprovalNotice, ApprovalRecord, PortError, Store};
use url::Url;

use crate::signature::{TRAWL_SIGNATURE, TRAWL_TIMESTAMP, sign_webhook};
use crate::slack::{MessageContext, outcome_message, request_message};
use crate::view::ApprovalView;

/// How long a pass under way may take to finish once the notifier is stopped.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// Notices claimed (and delivered concurrently) per pass.
pub const CLAIM_BATCH: u32 = 16;
/// Approvals expired per pass.
const EXPIRE_BATCH: u32 = 1_000;
/// A notice a sink refused (4xx other than 408 and 429) waits this long before
/// it is tried again: the message or the configuration needs a human, and
/// trying every pass would only fill the log.
pub const REFUSED_RETRY: Duration = Duration::from_secs(300);

/// The outgoing webhook: where, and the secret it is signed with.
#[derive(Clone)]
pub struct Webhook {
    pub url: Url,
    pub secret: SecretString,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("url", &self.url.as_str())
            .finish_non_exhaustive()
    }
}

/// Settings of the notifier.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NotifyConfig {
    /// Slack's incoming webhook (`TRAWL_SLACK_WEBHOOK_URL`).
    pub slack_webhook: Option<Url>,
    /// The generic outgoing webhook (`TRAWL_WEBHOOK_URL`, `TRAWL_WEBHOOK_SECRET`).
    pub webhook: Option<Webhook>,
    /// How long an approval waits for a decision (`TRAWL_APPROVAL_TTL`); `None`:
    /// forever.
    pub ttl: Option<Duration>,
    /// The API's public base URL, for links in messages (`TRAWL_PUBLIC_URL`).
    pub public_url: Option<Url>,
    /// How often a pass runs.
    pub every: Duration,
    /// How long a claimed notice is left to its claimer.
    pub lease: Duration,
    /// Timeout of one request to a sink.
    pub timeout: Duration,
    /// Requests per notice and sink within a pass (the first and its retries).
    pub attempts: usize,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        NotifyConfig {
            slack_webhook: None,
            webhook: None,
            ttl: Some(Duration::from_secs(24 * 3600)),
            public_url: None,
            every: Duration::from_secs(2),
            lease: Duration::from_secs(300),
            timeout: Duration::from_secs(10),
            attempts: 3,
        }
    }
}

impl NotifyConfig {
    pub fn with_slack_webhook(mut self, url: Option<Url>) -> Self {
        self.slack_webhook = url;
        self
    }

    pub fn with_webhook(mut self, webhook: Option<Webhook>) -> Self {
        self.webhook = webhook;
        self
    }

    /// `None` or zero: approvals never expire.
    pub fn with_ttl(mut self, ttl: Option<Duration>) -> Self {
        self.ttl = ttl.filter(|t| !t.is_zero());
        self
    }

    pub fn with_public_url(mut self, url: Option<Url>) -> Self {
        self.public_url = url;
        self
    }

    pub fn with_every(mut self, every: Duration) -> Self {
        self.every = every.max(Duration::from_millis(10));
        self
    }

    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn with_attempts(mut self, attempts: usize) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// Whether any sink is configured.
    pub fn has_sinks(&self) -> bool {
        self.slack_webhook.is_some() || self.webhook.is_some()
    }
}

/// What a pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Approvals expired.
    pub expired: Vec<i64>,
    /// Notices delivered (approval ids).
    pub delivered: Vec<i64>,
    /// Notices that could not be, released for a later pass.
    pub failed: Vec<i64>,
}

/// Why a delivery failed.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// Timeouts, broken connections, 408, 429, 5xx: worth another try.
    #[error("{0}")]
    Transient(String),
    /// The sink refused the request itself.
    #[error("{0}")]
    Refused(String),
}

/// The notifier over a store.
pub struct Notifier {
    store: Arc<dyn Store>,
    config: NotifyConfig,
    http: reqwest::Client,
}

impl Notifier {
    pub fn new(store: Arc<dyn Store>, config: NotifyConfig) -> Result<Notifier, reqwest::Error> {
        let http = trawl_telemetry::http::client()
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            // A webhook URL is the operator's; a redirect is somebody else's.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("trawl/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Notifier {
            store,
            config,
            http,
        })
    }

    pub fn config(&self) -> &NotifyConfig {
        &self.config
    }

    /// Runs a pass every [`NotifyConfig::every`] until `cancel` fires. A pass that
    /// fails (the store is down) is logged and the next one tries again.
    ///
    /// On `cancel`, a pass under way gets [`STOP_GRACE`] to finish what it
    /// claimed (dropping it would leave posted notices unmarked until their lease
    /// runs out, and then post them again); after that it is dropped all the same,
    /// so a sink that hangs cannot hold the process.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(self.config.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let pass = self.pass();
            tokio::pin!(pass);
            let result = tokio::select! {
                r = &mut pass => r,
                () = cancel.cancelled() => match tokio::time::timeout(STOP_GRACE, pass).await {
                    Ok(r) => r,
                    Err(_) => {
                        warn!(grace = ?STOP_GRACE, "approval notices: pass dropped at shutdown; its claimed notices go out again when their lease ends");
                        return;
                    }
                },
            };
            if let Err(e) = result {
                warn!(error = %e, "approval notices: pass failed; trying again next pass");
            }
        }
    }

    /// One pass: expire, claim, deliver, record.
    #[instrument(skip_all)]
    pub async fn pass(&self) -> Result<PassReport, PortError> {
        let mut report = PassReport::default();
        let ttl_ms = self
            .config
            .ttl
            .map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX));
        for r in self
            .store
            .expire_approvals(now_ms(), ttl_ms, EXPIRE_BATCH)
            .await?
        {
            info!(approval = r.id, kind = %r.kind, job_id = ?r.job_id, tool = ?r.tool, "{}", r.expiry_reason());
            report.expired.push(r.id);
        }
        if !self.config.has_sinks() {
            return Ok(report);
        }
        let lease_ms = i64::try_from(self.config.lease.as_millis()).unwrap_or(i64::MAX);
        let claimed = self
            .store
            .claim_approval_notices(now_ms(), lease_ms, ttl_ms, CLAIM_BATCH)
            .await?;
        let outcomes = join_all(claimed.iter().map(|r| self.deliver(r))).await;
        for (r, outcome) in claimed.iter().zip(outcomes) {
            let Some(notice) = r.notice() else { continue };
            match outcome {
                Ok(()) => {
                    self.store
                        .approval_notice_sent(r.id, notice, now_ms())
                        .await?;
                    debug!(approval = r.id, ?notice, "approval notice delivered");
                    report.delivered.push(r.id);
                }
                Err(e) => {
                    let wait = match e {
                        DeliveryError::Transient(_) => self.config.every,
                        DeliveryError::Refused(_) => REFUSED_RETRY,
                    };
                    warn!(approval = r.id, ?notice, error = %e, retry_in = ?wait, "approval notice not delivered");
                    let retry_at =
                        now_ms() + i64::try_from(wait.as_millis()).unwrap_or(i64::MAX / 2);
                    self.store.approval_notice_failed(r.id, retry_at).await?;
                    report.failed.push(r.id);
                }
            }
        }
        Ok(report)
    }

    /// Sends one notice to every sink; `Ok` only if every sink took it.
    async fn deliver(&self, r: &ApprovalRecord) -> Result<(), DeliveryError> {
        let Some(notice) = r.notice() else {
            return Ok(());
        };
        let job_name = match (&r.job_id, notice) {
            (Some(job), ApprovalNotice::Requested) => {
                self.store.job(job).await.ok().flatten().map(|j| j.name)
            }
            _ => None,
        };
        let cx = MessageContext {
            job_name: job_name.as_deref(),
            public_url: self.config.public_url.as_ref(),
        };
        if let Some(url) = &self.config.slack_webhook {
            let message = match notice {
                ApprovalNotice::Requested => Some(request_message(r, &cx)),
                // A click in Slack already replaced the message there.
                ApprovalNotice::Decided if decided_in_slack(r) => None,
                ApprovalNotice::Decided => Some(outcome_message(r, &cx)),
            };
            if let Some(message) = message {
                let body = serde_json::to_vec(&message).unwrap_or_default();
                self.post(url, body, None).await?;
            }
        }
        if let Some(hook) = &self.config.webhook {
            let body = serde_json::to_vec(&webhook_event(r, notice)).unwrap_or_default();
            self.post(&hook.url, body, Some(&hook.secret)).await?;
        }
        Ok(())
    }

    /// POSTs a JSON body through [`post_json`] with this notifier's client and
    /// attempts.
    async fn post(
        &self,
        url: &Url,
        body: Vec<u8>,
        secret: Option<&SecretString>,
    ) -> Result<(), DeliveryError> {
        post_json(&self.http, url, body, secret, self.config.attempts).await
    }
}

/// POSTs a JSON body (to Slack, a click's `response_url`, the outgoing
/// webhook: every message trawl sends), at most `attempts` times with jittered
/// backoff while the failure is transient; signed when `secret` is given. Only
/// the URL's scheme and host appear in errors: Slack's URLs are credentials.
pub async fn post_json(
    http: &reqwest::Client,
    url: &Url,
    body: Vec<u8>,
    secret: Option<&SecretString>,
    attempts: usize,
) -> Result<(), DeliveryError> {
    let once = || async {
        let mut req = http
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        if let Some(secret) = secret {
            // Signed per attempt: a retry carries a fresh timestamp.
            let ts = now_ms() / 1000;
            req = req.header(TRAWL_TIMESTAMP, ts.to_string()).header(
                TRAWL_SIGNATURE,
                sign_webhook(secret.expose_secret().as_bytes(), ts, &body),
            );
        }
        let res = req.body(body.clone()).send().await.map_err(|e| {
            DeliveryError::Transient(format!("{}: {}", redact(url), without_url(&e)))
        })?;
        let status = res.status();
        if status.is_success() {
            return Ok(());
        }
        let text: String = res
            .text()
            .await
            .unwrap_or_default()
            .chars()
            .take(200)
            .collect();
        let why = format!("{} answered {status}: {text}", redact(url));
        if status.is_server_error()
            || status == StatusCode::TOO_MANY_REQUESTS
            || status == StatusCode::REQUEST_TIMEOUT
        {
            Err(DeliveryError::Transient(why))
        } else {
            Err(DeliveryError::Refused(why))
        }
    };
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(5))
        .with_max_times(attempts.saturating_sub(1))
        .with_jitter();
    once.retry(backoff)
        .sleep(tokio::time::sleep)
        .when(|e: &DeliveryError| matches!(e, DeliveryError::Transient(_)))
        .await
}

/// Whether a click in Slack decided it (then the message there says so already).
fn decided_in_slack(r: &ApprovalRecord) -> bool {
    r.decided_by
        .as_deref()
        .is_some_and(|b| b.starts_with("slack:"))
}

/// Slack's webhook URLs are credentials: only scheme and host go to the log.
fn redact(url: &Url) -> String {
    format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default())
}

/// A reqwest error without the URL it carries (a secret, for Slack's webhooks).
fn without_url(e: &reqwest::Error) -> String {
    let mut out = if e.is_timeout() {
        "timed out".to_owned()
    } else if e.is_connect() {
        "could not connect".to_owned()
    } else {
        "request failed".to_owned()
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The outgoing webhook's body for a notice: `type` (`approval.requested`,
/// `approval.decided` or `approval.expired`), `event_id` (the same for every
/// delivery of one notice, so a receiver can drop duplicates) and `approval` (as
/// the REST API shows it).
pub fn webhook_event(r: &ApprovalRecord, notice: ApprovalNotice) -> Value {
    let kind = match notice {
        ApprovalNotice::Requested => "approval.requested",
        ApprovalNotice::Decided if r.expired => "approval.expired",
        ApprovalNotice::Decided => "approval.decided",
    };
    let event_id = match notice {
        ApprovalNotice::Requested => format!("approval-{}-requested-{}", r.id, r.requested_ms),
        ApprovalNotice::Decided => format!("approval-{}-{}", r.id, r.status()),
    };
    json!({
        "type": kind,
        "event_id": event_id,
        "approval": ApprovalView::from(r.clone()),
    })
}
