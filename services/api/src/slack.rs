//! `POST /v1/integrations/slack/interactions`: clicks on the Approve and Reject
//! buttons of trawl's Slack messages.
//!
//! Slack signs the request instead of sending a bearer token, so the route is
//! outside the `/v1` key check. Step by step:
//!
//! 1. the raw body is read, within the API's body limit;
//! 2. `X-Slack-Signature` is checked over `v0:{X-Slack-Request-Timestamp}:{raw
//!    body}` with the signing secret, in constant time, and a timestamp more than
//!    5 minutes off is refused: any failure is 401 problem+json, nothing parsed,
//!    nothing changed;
//! 3. only then the form's `payload` is parsed; a `block_actions` click on one of
//!    trawl's buttons is decided through the REST API's own path
//!    ([`crate::approvals::decide`]), as `slack:<user id> (<name>)`;
//! 4. Slack gets its 200 at once; the message is updated through the click's
//!    `response_url` afterwards (the decision, without buttons), or, when the
//!    approval was already decided or has expired, the user alone is told so
//!    (ephemeral) and nothing is applied.
//!
//! A `response_url` is only posted to at `https://hooks.slack.com` or a host in
//! `TRAWL_SLACK_RESPONSE_HOSTS` ([`ResponseHosts`]).
//!
//! Only approvers decide (`TRAWL_SLACK_APPROVERS`): user ids, and user group
//! ids whose members are read from Slack's Web API (`usergroups.users.list`,
//! with the bot token `TRAWL_SLACK_BOT_TOKEN`, remembered for a minute). A
//! click by anyone else, or one whose groups cannot be read, changes nothing,
//! is audited, and the user alone is told so. Without approvers every click is
//! refused.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use tracing::{debug, info, warn};
use trawl_core::model::now_ms;
use trawl_notify::ResponseHosts;
use trawl_notify::signature::{SLACK_SIGNATURE, SLACK_TIMESTAMP, verify_slack};
use trawl_notify::slack::{
    Click, Interaction, MessageContext, already_closed, decided_message, ephemeral,
    parse_interaction,
};
use url::Url;

use crate::approvals::{decide, refused};
use crate::error::{ApiError, Problem};
use crate::state::ApiState;

/// How long one reply to a `response_url` may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// Tries of one reply (Slack accepts up to five uses of a `response_url`).
const REPLY_ATTEMPTS: usize = 3;

/// What the interactions route needs: the signing secret, where replies may go,
/// and a client to send them with.
pub struct SlackConfig {
    secret: SecretString,
    hosts: ResponseHosts,
    public_url: Option<Url>,
    http: reqwest::Client,
    /// User ids (`U…`, `W…`) that may decide.
    approvers: HashSet<String>,
    /// User group ids (`S…`) whose members may decide.
    groups: Vec<String>,
    /// Slack's Web API, to read the groups' members.
    directory: Option<Directory>,
}

/// Slack's Web API as far as approvers need it: the members of a user group.
struct Directory {
    token: SecretString,
    /// `https://slack.com/api/` unless configured (a test server).
    base: Url,
    /// Members of each group and when they were read.
    members: Mutex<HashMap<String, (Instant, Members)>>,
}

/// The user ids of one user group.
type Members = Arc<HashSet<String>>;

/// How long the members of a user group are remembered.
const MEMBERS_TTL: Duration = Duration::from_secs(60);

impl std::fmt::Debug for SlackConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackConfig")
            .field("hosts", &self.hosts)
            .field("public_url", &self.public_url)
            .field("approvers", &self.approvers)
            .field("groups", &self.groups)
            .finish_non_exhaustive()
    }
}

impl SlackConfig {
    /// `secret`: the app's signing secret (Basic Information → Signing Secret).
    /// `hosts`: hosts besides `hooks.slack.com` a reply may go to. `public_url`:
    /// the API's own address, for links in the updated message.
    pub fn new(
        secret: SecretString,
        hosts: ResponseHosts,
        public_url: Option<Url>,
    ) -> Result<SlackConfig, reqwest::Error> {
        let http = trawl_telemetry::http::client()
            .timeout(REPLY_TIMEOUT)
            .connect_timeout(REPLY_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("trawl/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(SlackConfig {
            secret,
            hosts,
            public_url,
            http,
            approvers: HashSet::new(),
            groups: Vec::new(),
            directory: None,
        })
    }

    /// Reads user groups' members from Slack's Web API at `base` (normally
    /// `https://slack.com/api/`) with the bot token `token` (it needs the
    /// `usergroups:read` scope). Give it before [`SlackConfig::with_approvers`]
    /// names a group.
    pub fn with_directory(mut self, token: SecretString, base: Url) -> SlackConfig {
        let mut base = base;
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        self.directory = Some(Directory {
            token,
            base,
            members: Mutex::new(HashMap::new()),
        });
        self
    }

    /// Who may decide: user ids (`U…`, `W…`) and user group ids (`S…`). A group
    /// needs [`SlackConfig::with_directory`] first.
    pub fn with_approvers(
        mut self,
        ids: impl IntoIterator<Item = String>,
    ) -> Result<SlackConfig, String> {
        for id in ids {
            let id = id.trim().to_owned();
            let well_formed = id.len() >= 2
                && id.len() <= 32
                && id
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit());
            match id.as_bytes().first() {
                Some(b'U' | b'W') if well_formed => {
                    self.approvers.insert(id);
                }
                Some(b'S') if well_formed => {
                    if self.directory.is_none() {
                        return Err(format!(
                            "{id} is a user group: reading its members needs TRAWL_SLACK_BOT_TOKEN"
                        ));
                    }
                    self.groups.push(id);
                }
                _ => {
                    return Err(format!(
                        "{id:?} is neither a Slack user id (U…, W…) nor a user group id (S…)"
                    ));
                }
            }
        }
        Ok(self)
    }

    /// Whether `user` may decide: `Err` with why not.
    async fn approver(&self, user: &str) -> Result<(), String> {
        if self.approvers.contains(user) {
            return Ok(());
        }
        let Some(dir) = &self.directory else {
            return Err(format!("{user} is not one of the approvers"));
        };
        for group in &self.groups {
            let members = dir.members(&self.http, group).await.map_err(|e| {
                format!("the members of user group {group} could not be read ({e})")
            })?;
            if members.contains(user) {
                return Ok(());
            }
        }
        Err(format!("{user} is not one of the approvers"))
    }
}

impl Directory {
    /// The members of `group`, remembered for [`MEMBERS_TTL`]. Slack documents
    /// the call at api.slack.com/methods/usergroups.users.list: a GET with the
    /// bot token as a bearer credential, answering `{"ok": true, "users": [...]}`
    /// or `{"ok": false, "error": "..."}` (HTTP 200 either way).
    async fn members(&self, http: &reqwest::Client, group: &str) -> Result<Members, String> {
        if let Some((at, m)) = self
            .members
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(group)
            && at.elapsed() < MEMBERS_TTL
        {
            return Ok(m.clone());
        }
        let mut url = self
            .base
            .join("usergroups.users.list")
            .map_err(|e| e.to_string())?;
        url.query_pairs_mut().append_pair("usergroup", group);
        #[derive(serde::Deserialize)]
        struct Answer {
            ok: bool,
            error: Option<String>,
            #[serde(default)]
            users: Vec<String>,
        }
        let res = http
            .get(url)
            .bearer_auth(self.token.expose_secret())
            .send()
            .await
            .map_err(|e| e.without_url().to_string())?;
        if !res.status().is_success() {
            return Err(format!("HTTP {}", res.status().as_u16()));
        }
        let answer: Answer = res.json().await.map_err(|e| e.without_url().to_string())?;
        if !answer.ok {
            return Err(answer.error.unwrap_or_else(|| "not ok".to_owned()));
        }
        let m = Arc::new(answer.users.into_iter().collect::<HashSet<_>>());
        self.members
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(group.to_owned(), (Instant::now(), m.clone()));
        Ok(m)
    }
}

/// A click on Approve or Reject in Slack.
#[utoipa::path(
    post,
    path = "/v1/integrations/slack/interactions",
    tag = "approvals",
    request_body(
        content = String,
        content_type = "application/x-www-form-urlencoded",
        description = "Slack's interaction payload: one `payload` field holding the JSON of a \
            `block_actions` click. Signed by Slack: `X-Slack-Signature: v0=<hex HMAC-SHA256 of \
            \"v0:{X-Slack-Request-Timestamp}:{raw body}\">` with the app's signing secret; the \
            timestamp must be within 5 minutes of the server's clock.",
    ),
    params(
        ("X-Slack-Signature" = String, Header, description = "`v0=` and the hex HMAC-SHA256 of the signed string."),
        ("X-Slack-Request-Timestamp" = i64, Header, description = "When Slack signed it, in Unix seconds."),
    ),
    responses(
        (status = 200, description = "Taken: the decision is applied (or, for an approval already decided or expired, the user is told so) and the message is updated through the payload's `response_url`."),
        (status = 400, description = "Signed, but not an interaction payload.", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Signature missing, stale (more than 5 minutes off) or wrong; nothing was done.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Slack is not configured (no `TRAWL_SLACK_SIGNING_SECRET`).", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn interactions(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let Some(slack) = state.slack.clone() else {
        // An unsigned request is refused as such (as it is when Slack is
        // configured), before being told there is no integration.
        for name in [SLACK_TIMESTAMP, SLACK_SIGNATURE] {
            if headers.get(name).is_none_or(|v| v.is_empty()) {
                return Err(ApiError::BadSignature(format!("no {name} header")));
            }
        }
        return Err(ApiError::NotFound(
            "Slack integration: TRAWL_SLACK_SIGNING_SECRET is not set".to_owned(),
        ));
    };
    let body = body.map_err(|r| ApiError::from_body(&r, state.body_limit))?;
    verify_slack(
        slack.secret.expose_secret().as_bytes(),
        headers.get(SLACK_TIMESTAMP).map(|v| v.as_bytes()),
        headers.get(SLACK_SIGNATURE).map(|v| v.as_bytes()),
        &body,
        now_ms().div_euclid(1000),
    )
    .map_err(|e| {
        warn!(error = %e, "Slack interaction refused");
        ApiError::BadSignature(e.to_string())
    })?;
    let click = match parse_interaction(&body).map_err(|e| ApiError::BadRequest(e.to_string()))? {
        Interaction::Click(click) => click,
        Interaction::Ignored(why) => {
            debug!(%why, "Slack interaction ignored");
            return Ok(StatusCode::OK);
        }
    };
    let reply = answer(&state, &slack, &click).await?;
    match (reply, click.response_url.as_deref()) {
        (Some(reply), Some(url)) => match slack.hosts.check(url) {
            Ok(url) => {
                let http = slack.http.clone();
                tokio::spawn(post_reply(http, url, reply, REPLY_ATTEMPTS));
            }
            Err(why) => warn!(%why, "Slack interaction: not answering at its response_url"),
        },
        (Some(_), None) => debug!("Slack interaction without a response_url"),
        (None, _) => {}
    }
    Ok(StatusCode::OK)
}

/// Decides the click; what to post to its `response_url`. Errors other than "no
/// longer pending" (the store is down) are the route's: Slack shows them, and
/// the user can click again.
async fn answer(
    state: &ApiState,
    slack: &Arc<SlackConfig>,
    click: &Click,
) -> Result<Option<Value>, ApiError> {
    let by = click.user.decided_by();
    if let Err(why) = slack.approver(&click.user.id).await {
        refused(
            state,
            &by,
            &click.approval.to_string(),
            click.approve,
            &format!("not an approver in Slack: {why}"),
        )
        .await;
        return Ok(Some(ephemeral(
            "Only trawl's approvers can decide approvals; nothing was changed.",
        )));
    }
    match decide(state, &by, &click.approval.to_string(), click.approve).await {
        Ok((record, _)) => {
            info!(approval = record.id, status = record.status(), %by, "decided in Slack");
            let job_name = match &record.job_id {
                Some(job) => state.store.job(job).await.ok().flatten().map(|j| j.name),
                None => None,
            };
            let cx = MessageContext {
                job_name: job_name.as_deref(),
                public_url: slack.public_url.as_ref(),
            };
            Ok(Some(decided_message(&record, &cx, &click.user)))
        }
        Err(ApiError::Conflict(why)) => {
            info!(approval = click.approval, %by, %why, "Slack click on a closed approval: not applied");
            let text = match state.store.approval(click.approval).await? {
                Some(r) if r.approved.is_some() => already_closed(&r),
                _ => format!("{why}."),
            };
            Ok(Some(ephemeral(&text)))
        }
        Err(ApiError::NotFound(_)) => Ok(Some(ephemeral(&format!(
            "There is no approval {} here.",
            click.approval
        )))),
        Err(e) => Err(e),
    }
}

/// Posts a reply to a click's `response_url`, through the notifier's one way
/// of posting to Slack (jittered retries while the failure is transient). A
/// failure is logged; the decision stands either way.
async fn post_reply(http: reqwest::Client, url: Url, reply: Value, attempts: usize) {
    let body = serde_json::to_vec(&reply).unwrap_or_default();
    match trawl_notify::post_json(&http, &url, body, None, attempts).await {
        Ok(()) => debug!(
            host = url.host_str().unwrap_or_default(),
            "Slack message updated"
        ),
        Err(e) => warn!(error = %e, "Slack reply not delivered"),
    }
}
