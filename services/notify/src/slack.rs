//! Slack: the Block Kit messages trawl posts, and the interactions Slack posts back.
//!
//! Messages are built as JSON (`serde_json::Value`) by pure functions, following
//! Slack's reference (<https://api.slack.com/reference/block-kit/blocks>,
//! `/block-elements#button`, `/composition-objects#confirm`):
//!
//! - [`request_message`]: a top-level `text` (the notification's fallback) and
//!   `blocks`: a `header` saying what is asked, a `section` with the summary, a
//!   `section` of `fields` (kind, job or tool, estimate, requested, expires), the
//!   diff (or the new tool, or the call's arguments) in a code block, a `context`
//!   with the approval id and links, and an `actions` block with **Approve**
//!   (`style: primary`, `action_id: "trawl_approve:<id>"`) and **Reject**
//!   (`style: danger`, `action_id: "trawl_reject:<id>"`, with a `confirm` dialog).
//! - [`decided_message`]: the same message without buttons and with who decided,
//!   sent to the click's `response_url` with `replace_original`.
//! - [`outcome_message`]: a new message when an approval expired or was decided
//!   outside Slack.
//! - [`ephemeral`]: an answer only the clicking user sees (a click on an approval
//!   already decided).
//!
//! Everything a tool's server wrote (descriptions, schemas, arguments) is shown
//! escaped (`&`, `<`, `>`), so it cannot mention `@channel` or hide a link, and
//! every text is cut to Slack's limits ([`limits`]).
//!
//! Interactions arrive form-encoded with one `payload` field; [`parse_interaction`]
//! reads a `block_actions` click after the signature was checked. A reply goes to
//! the payload's `response_url` only if [`ResponseHosts`] allows its host:
//! `hooks.slack.com` over https, or a host the operator added.

use serde_json::{Value, json};
use trawl_core::ports::ApprovalRecord;
use url::Url;

use crate::view::rfc3339;

/// Slack's limits on the texts trawl fills, in characters.
pub mod limits {
    /// A header block's text.
    pub const HEADER: usize = 150;
    /// A section block's text.
    pub const SECTION: usize = 3000;
    /// One of a section block's fields.
    pub const FIELD: usize = 2000;
    /// A button's text.
    pub const BUTTON: usize = 75;
    /// A confirmation dialog's title, text, and its two buttons.
    pub const CONFIRM_TITLE: usize = 100;
    pub const CONFIRM_TEXT: usize = 300;
    pub const CONFIRM_BUTTON: usize = 30;
    /// The top-level fallback text trawl sends (Slack allows more; a notification
    /// shows far less).
    pub const FALLBACK: usize = 3000;
    /// An `action_id` and a `block_id`.
    pub const ID: usize = 255;
}

/// The prefixes of the buttons' `action_id`s; the approval id follows.
pub const APPROVE_ACTION: &str = "trawl_approve:";
pub const REJECT_ACTION: &str = "trawl_reject:";

/// What a message may add to an approval's record.
#[derive(Clone, Copy, Debug, Default)]
pub struct MessageContext<'a> {
    /// The job's name, for `job_budget`.
    pub job_name: Option<&'a str>,
    /// Where the API is reachable, for links (`TRAWL_PUBLIC_URL`).
    pub public_url: Option<&'a Url>,
}

/// The message asking for a decision.
pub fn request_message(r: &ApprovalRecord, cx: &MessageContext<'_>) -> Value {
    let mut blocks = summary_blocks(r, cx);
    blocks.push(actions(r));
    json!({"text": fallback(&format!("{}: {}", title(r), one_line(r, cx))), "blocks": blocks})
}

/// The original message once decided by a click, without its buttons: the body
/// posted to the click's `response_url` (`replace_original`).
pub fn decided_message(r: &ApprovalRecord, cx: &MessageContext<'_>, who: &SlackUser) -> Value {
    let verb = if r.approved == Some(true) {
        "approved"
    } else {
        "rejected"
    };
    let mark = if r.approved == Some(true) {
        ":white_check_mark:"
    } else {
        ":x:"
    };
    let when = r.decided_ms.map(date).unwrap_or_default();
    let mut blocks = summary_blocks(r, cx);
    blocks.push(section(&format!(
        "{mark} *{}* by <@{}> {when}{}",
        capitalized(verb),
        who.id,
        consequence(r)
    )));
    json!({
        "replace_original": true,
        "text": fallback(&format!("Approval {} {verb} by {}", r.id, who.mention_text())),
        "blocks": blocks,
    })
}

/// A new message saying how an approval ended, when it did not end by a click
/// in Slack: it expired, or was decided over the API or the command line.
pub fn outcome_message(r: &ApprovalRecord, cx: &MessageContext<'_>) -> Value {
    let line = if r.expired {
        format!(
            ":hourglass: {}{}",
            escape(&r.expiry_reason()),
            consequence(r)
        )
    } else {
        format!(
            "{} Approval {} was *{}* by {}{}",
            if r.approved == Some(true) {
                ":white_check_mark:"
            } else {
                ":x:"
            },
            r.id,
            r.status(),
            escape(r.decided_by.as_deref().unwrap_or("someone")),
            consequence(r)
        )
    };
    let mut blocks = vec![section(&line)];
    blocks.push(context(r, cx));
    json!({"text": fallback(&strip_marks(&line)), "blocks": blocks})
}

/// An answer only the clicking user sees; the original message stays.
pub fn ephemeral(text: &str) -> Value {
    json!({"response_type": "ephemeral", "replace_original": false, "text": fallback(text)})
}

/// What a click on an approval that is no longer pending is told.
pub fn already_closed(r: &ApprovalRecord) -> String {
    if r.expired {
        format!("{}; it can no longer be decided.", r.expiry_reason())
    } else {
        format!(
            "Approval {} was already {} by {}; your click changed nothing.",
            r.id,
            r.status(),
            r.decided_by.as_deref().unwrap_or("someone")
        )
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// What a decision did, after a `: `.
fn consequence(r: &ApprovalRecord) -> &'static str {
    match (r.kind.as_str(), r.approved, r.expired) {
        ("job_budget", Some(true), _) => ": the job is queued.",
        ("job_budget", Some(false), _) => ": the job is cancelled.",
        ("tool_change" | "new_tool", Some(true), _) => ": the definition is pinned.",
        ("tool_review", Some(true), _) => ": the definition is pinned as reviewed.",
        ("tool_change" | "new_tool" | "tool_review", Some(false), _) => ": the tool stays out.",
        ("tool_call", Some(true), _) => ": the call may run.",
        ("tool_call", Some(false), _) => ": the call is refused.",
        _ => ".",
    }
}

/// The header: what is asked.
fn title(r: &ApprovalRecord) -> String {
    let what = match r.kind.as_str() {
        "job_budget" => "job budget",
        "tool_change" => "tool definition changed",
        "new_tool" => "new tool",
        "tool_review" => "tool held for review",
        "tool_call" => "tool call",
        other => other,
    };
    format!("Approval needed: {what}")
}

/// One line for the notification: who asks what.
fn one_line(r: &ApprovalRecord, cx: &MessageContext<'_>) -> String {
    match (&r.job_id, &r.tool) {
        (Some(job), _) => format!(
            "job {job}{} is estimated at {}: {}",
            cx.job_name.map(|n| format!(" ({n})")).unwrap_or_default(),
            r.amount,
            r.reason
        ),
        (None, Some(tool)) => format!("{tool}: {}", r.reason),
        (None, None) => r.reason.clone(),
    }
}

/// Header, summary, fields, detail and context: what every message about an
/// approval shows.
fn summary_blocks(r: &ApprovalRecord, cx: &MessageContext<'_>) -> Vec<Value> {
    let mut blocks = vec![json!({
        "type": "header",
        "text": {"type": "plain_text", "text": cut(&title(r), limits::HEADER), "emoji": true},
    })];
    let summary = match (r.kind.as_str(), &r.job_id, &r.tool) {
        (_, Some(job), _) => format!(
            "*Job* `{}`{} needs approval to spend up to *{}*.\n{}",
            escape(job.as_str()),
            cx.job_name
                .map(|n| format!(" ({})", escape(n)))
                .unwrap_or_default(),
            r.amount,
            escape(&r.reason)
        ),
        ("tool_change", _, Some(tool)) => format!(
            "*{}* changed its definition since it was pinned: it is quarantined (not listed, \
             not callable) until approved.\n{}",
            escape(tool),
            escape(&r.reason)
        ),
        ("tool_review", _, Some(tool)) => format!(
            "*{}* is held for review: the poisoning scanner found text that may instruct \
             the model. It is not listed or callable until approved; approving pins this \
             definition as reviewed.\n{}",
            escape(tool),
            escape(&r.reason)
        ),
        ("new_tool", _, Some(tool)) => format!(
            "*{}* is new on its server, whose policy asks for approval of new tools: it is \
             held until approved.\n{}",
            escape(tool),
            escape(&r.reason)
        ),
        (_, _, Some(tool)) => format!(
            "A call of *{}* needs approval.\n{}",
            escape(tool),
            escape(&r.reason)
        ),
        _ => escape(&r.reason),
    };
    blocks.push(section(&summary));
    blocks.push(json!({"type": "section", "fields": fields(r, cx)}));
    if let Some(detail) = detail_text(r) {
        blocks.push(section(&code_block(&detail, limits::SECTION)));
    }
    blocks.push(context(r, cx));
    blocks
}

fn fields(r: &ApprovalRecord, cx: &MessageContext<'_>) -> Vec<Value> {
    let mut f = vec![("Kind", format!("`{}`", escape(&r.kind)))];
    if let Some(job) = &r.job_id {
        let name = cx
            .job_name
            .map(|n| format!("\n{}", escape(n)))
            .unwrap_or_default();
        f.push(("Job", format!("`{}`{name}", escape(job.as_str()))));
        f.push(("Estimate", format!("{} (USD)", r.amount)));
    }
    if let Some(tool) = &r.tool {
        let server = r
            .detail
            .as_ref()
            .and_then(|d| d.get("server"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| tool.split_once('.').map(|(s, _)| s.to_owned()));
        if let Some(server) = server {
            f.push(("Server", format!("`{}`", escape(&server))));
        }
        f.push(("Tool", format!("`{}`", escape(tool))));
        if let Some(changes) = r
            .detail
            .as_ref()
            .and_then(|d| d.get("changes"))
            .and_then(Value::as_array)
        {
            f.push(("Changes", format!("{} path(s)", changes.len())));
        }
        if let Some(findings) = r
            .detail
            .as_ref()
            .and_then(|d| d.get("findings"))
            .and_then(Value::as_array)
        {
            let mut rules: Vec<&str> = findings
                .iter()
                .filter_map(|f| f.get("rule").and_then(Value::as_str))
                .collect();
            rules.sort_unstable();
            rules.dedup();
            let rules: Vec<String> = rules.iter().map(|r| format!("`{}`", escape(r))).collect();
            f.push((
                "Findings",
                format!("{}: {}", findings.len(), rules.join(", ")),
            ));
        }
    }
    f.push(("Requested", date(r.requested_ms)));
    f.push((
        "Expires",
        r.expires_ms
            .map(date)
            .unwrap_or_else(|| "no expiry set".to_owned()),
    ));
    f.into_iter()
        .map(|(k, v)| json!({"type": "mrkdwn", "text": cut(&format!("*{k}*\n{v}"), limits::FIELD)}))
        .collect()
}

/// The part of a tool approval's detail a human decides on: the diff of a
/// changed definition, a new tool's definition, a call's arguments.
fn detail_text(r: &ApprovalRecord) -> Option<String> {
    let d = r.detail.as_ref()?;
    match r.kind.as_str() {
        "tool_change" => d.get("diff").and_then(Value::as_str).map(str::to_owned),
        "new_tool" => d.get("new").map(pretty),
        "tool_review" => d.get("report").and_then(Value::as_str).map(|report| {
            match d.get("scores").filter(|s| !s.is_null()) {
                Some(scores) => format!("{report}\n\nscores: {scores}"),
                None => report.to_owned(),
            }
        }),
        "tool_call" => d.get("arguments").map(pretty),
        _ => None,
    }
    .filter(|t| !t.trim().is_empty())
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

fn context(r: &ApprovalRecord, cx: &MessageContext<'_>) -> Value {
    let mut parts = vec![format!("trawl approval {}", r.id)];
    if let Some(base) = cx.public_url {
        if let Ok(u) = base.join(&format!("v1/approvals/{}", r.id)) {
            parts.push(format!("<{}|API>", link(&u)));
        }
        if let Some(job) = &r.job_id
            && let Ok(u) = base.join(&format!("v1/jobs/{job}"))
        {
            parts.push(format!("<{}|job>", link(&u)));
        }
    }
    json!({
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": cut(&parts.join(" · "), limits::SECTION)}],
    })
}

/// A URL inside `<…|…>`: its own `|` and `>` would end the link early.
fn link(u: &Url) -> String {
    u.as_str().replace('|', "%7C").replace('>', "%3E")
}

fn actions(r: &ApprovalRecord) -> Value {
    let id = r.id.to_string();
    let consequence = match r.kind.as_str() {
        "job_budget" => format!(
            "The job {} will be cancelled. This cannot be undone.",
            r.job_id.as_ref().map(|j| j.as_str()).unwrap_or_default()
        ),
        "tool_call" => "The call will be refused. This cannot be undone.".to_owned(),
        _ => format!(
            "{} stays out of the catalog until its server changes it again.",
            r.tool.as_deref().unwrap_or("The tool")
        ),
    };
    json!({
        "type": "actions",
        "block_id": cut(&format!("trawl_approval:{id}"), limits::ID),
        "elements": [
            {
                "type": "button",
                "text": {"type": "plain_text", "text": cut("Approve", limits::BUTTON)},
                "style": "primary",
                "action_id": format!("{APPROVE_ACTION}{id}"),
                "value": id,
            },
            {
                "type": "button",
                "text": {"type": "plain_text", "text": cut("Reject", limits::BUTTON)},
                "style": "danger",
                "action_id": format!("{REJECT_ACTION}{id}"),
                "value": id,
                "confirm": {
                    "title": {"type": "plain_text", "text": cut(&format!("Reject approval {id}?"), limits::CONFIRM_TITLE)},
                    "text": {"type": "plain_text", "text": cut(&consequence, limits::CONFIRM_TEXT)},
                    "confirm": {"type": "plain_text", "text": cut("Reject", limits::CONFIRM_BUTTON)},
                    "deny": {"type": "plain_text", "text": cut("Keep it pending", limits::CONFIRM_BUTTON)},
                    "style": "danger",
                },
            },
        ],
    })
}

fn section(mrkdwn: &str) -> Value {
    json!({"type": "section", "text": {"type": "mrkdwn", "text": cut(mrkdwn, limits::SECTION)}})
}

/// `<!date^…>`: shown in the reader's time zone, RFC 3339 UTC where it cannot be.
fn date(ms: i64) -> String {
    format!(
        "<!date^{}^{{date_short_pretty}} {{time}}|{}>",
        ms.div_euclid(1000),
        rfc3339(ms)
    )
}

fn fallback(text: &str) -> String {
    cut(text, limits::FALLBACK)
}

/// The fallback of a mrkdwn line: without the emoji codes and stars.
fn strip_marks(s: &str) -> String {
    s.split(' ')
        .filter(|w| !(w.starts_with(':') && w.ends_with(':') && w.len() > 2))
        .collect::<Vec<_>>()
        .join(" ")
        .replace('*', "")
}

/// Text for mrkdwn: Slack's three control characters escaped, so nothing a tool
/// server wrote becomes a mention, a link or a broadcast.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` in a code block, escaped, at most `max` characters in all: cut at a
/// line where it can be, with a note of what was left out. Backticks inside are
/// shown as `ˋ` so the text cannot close the block.
fn code_block(text: &str, max: usize) -> String {
    const OPEN: &str = "```\n";
    const CLOSE: &str = "\n```";
    let budget = max.saturating_sub(OPEN.len() + CLOSE.len() + 40);
    let mut body = String::new();
    let mut used = 0;
    let mut left_out = 0;
    for line in text.lines() {
        let escaped = escape(&line.replace('`', "ˋ"));
        let n = escaped.chars().count() + 1;
        if left_out > 0 || used + n > budget {
            left_out += 1;
            continue;
        }
        body.push_str(&escaped);
        body.push('\n');
        used += n;
    }
    if body.is_empty() && left_out > 0 {
        // One huge line: cut inside it.
        body = cut(&escape(&text.replace('`', "ˋ")), budget);
        body.push('\n');
    } else if left_out > 0 {
        body.push_str(&format!("… {left_out} more line(s)\n"));
    }
    format!("{OPEN}{}{CLOSE}", body.trim_end_matches('\n'))
}

/// At most `max` characters, ending with `…` when cut; never inside an `&…;`
/// entity that [`escape`] wrote.
pub fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    if let Some(amp) = out.rfind('&')
        && !out[amp..].contains(';')
        && out.len() - amp <= 5
    {
        out.truncate(amp);
    }
    out.push('…');
    out
}

// ---------------------------------------------------------------------------
// Interactions

/// The Slack user who clicked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlackUser {
    /// `U…` or `W…`: letters and digits only.
    pub id: String,
    /// Their handle, when the payload names it (letters, digits, `._-` only).
    pub name: Option<String>,
}

impl SlackUser {
    /// What is recorded as who decided: `slack:U123 (alice)`.
    pub fn decided_by(&self) -> String {
        match &self.name {
            Some(n) => format!("slack:{} ({n})", self.id),
            None => format!("slack:{}", self.id),
        }
    }

    /// `@alice`, or the id when there is no name.
    pub fn mention_text(&self) -> String {
        format!("@{}", self.name.as_deref().unwrap_or(&self.id))
    }
}

/// A click on one of trawl's buttons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Click {
    pub approval: i64,
    pub approve: bool,
    pub user: SlackUser,
    /// Where to answer (replace the message, or say something ephemeral).
    pub response_url: Option<String>,
}

/// What an interaction payload asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Interaction {
    Click(Click),
    /// Not for trawl's buttons (another type, another action); answered 200 and
    /// otherwise ignored, as Slack expects.
    Ignored(String),
}

/// Why an interaction body is refused (400): not what Slack sends.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InteractionError {
    #[error("the body has no single `payload` field")]
    NoPayload,
    #[error("`payload` is not JSON: {0}")]
    NotJson(String),
    #[error("the payload's {0} is missing or malformed")]
    Field(&'static str),
}

/// Reads an interaction body (`application/x-www-form-urlencoded`, one `payload`
/// field holding JSON). Only call this after [`crate::signature::verify_slack`].
pub fn parse_interaction(body: &[u8]) -> Result<Interaction, InteractionError> {
    let mut payloads = url::form_urlencoded::parse(body).filter(|(k, _)| k == "payload");
    let payload = payloads.next().ok_or(InteractionError::NoPayload)?.1;
    if payloads.next().is_some() {
        return Err(InteractionError::NoPayload);
    }
    let v: Value =
        serde_json::from_str(&payload).map_err(|e| InteractionError::NotJson(e.to_string()))?;
    let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
    if kind != "block_actions" {
        return Ok(Interaction::Ignored(format!(
            "interaction of type {kind:?}"
        )));
    }
    let actions = v
        .get("actions")
        .and_then(Value::as_array)
        .ok_or(InteractionError::Field("actions"))?;
    let Some((action, approve, rest)) = actions.iter().find_map(|a| {
        let id = a.get("action_id")?.as_str()?;
        if let Some(rest) = id.strip_prefix(APPROVE_ACTION) {
            Some((a, true, rest))
        } else {
            id.strip_prefix(REJECT_ACTION).map(|rest| (a, false, rest))
        }
    }) else {
        return Ok(Interaction::Ignored("no trawl action".to_owned()));
    };
    let approval: i64 = rest
        .parse()
        .ok()
        .filter(|id| *id > 0 && rest.bytes().all(|b| b.is_ascii_digit()))
        .ok_or(InteractionError::Field("actions[].action_id"))?;
    if let Some(value) = action.get("value").and_then(Value::as_str)
        && value != rest
    {
        return Err(InteractionError::Field("actions[].value"));
    }
    let user = v.get("user").ok_or(InteractionError::Field("user"))?;
    let id = user
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| {
            !id.is_empty() && id.len() <= 32 && id.bytes().all(|b| b.is_ascii_alphanumeric())
        })
        .ok_or(InteractionError::Field("user.id"))?;
    let name = ["username", "name"]
        .iter()
        .filter_map(|k| user.get(*k).and_then(Value::as_str))
        .map(|n| {
            n.chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | '-'))
                .take(80)
                .collect::<String>()
        })
        .find(|n| !n.is_empty());
    let response_url = v
        .get("response_url")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(Interaction::Click(Click {
        approval,
        approve,
        user: SlackUser {
            id: id.to_owned(),
            name,
        },
        response_url,
    }))
}

/// The hosts trawl answers a click's `response_url` at: Slack's
/// (`https://hooks.slack.com/…`), and those an operator adds
/// (`TRAWL_SLACK_RESPONSE_HOSTS`, over http or https: a proxy, or a test's
/// receiver on 127.0.0.1). A signed payload names Slack's URL; the check keeps a
/// leaked signing secret from turning trawl into a client of any URL.
#[derive(Clone, Debug, Default)]
pub struct ResponseHosts {
    extra: Vec<String>,
}

/// Slack's host for `response_url`s.
pub const SLACK_HOOKS_HOST: &str = "hooks.slack.com";

impl ResponseHosts {
    pub fn new(extra: impl IntoIterator<Item = String>) -> ResponseHosts {
        ResponseHosts {
            extra: extra
                .into_iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
        }
    }

    /// The URL, if trawl may post to it.
    pub fn check(&self, raw: &str) -> Result<Url, String> {
        let u = Url::parse(raw).map_err(|e| format!("not a URL: {e}"))?;
        if !u.username().is_empty() || u.password().is_some() {
            return Err("a response_url with credentials".to_owned());
        }
        let host = u.host_str().unwrap_or_default().to_ascii_lowercase();
        let slack = host == SLACK_HOOKS_HOST && u.scheme() == "https" && u.port().is_none();
        let extra = self.extra.contains(&host) && matches!(u.scheme(), "http" | "https");
        if slack || extra {
            Ok(u)
        } else {
            Err(format!(
                "{}://{host} is neither https://{SLACK_HOOKS_HOST} nor in TRAWL_SLACK_RESPONSE_HOSTS",
                u.scheme()
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use trawl_core::cost::Micros;
    use trawl_core::model::JobId;

    use super::*;

    fn budget(id: i64) -> ApprovalRecord {
        ApprovalRecord {
            id,
            kind: "job_budget".into(),
            job_id: Some(JobId::parse("job_000000000001000000000000002a").unwrap()),
            tool: None,
            amount: Micros(1_234_500),
            reason: "estimated cost $1.2345 is above approve_above_usd $1.0000".into(),
            detail: None,
            approved: None,
            decided_by: None,
            requested_ms: 1_700_000_000_000,
            decided_ms: None,
            expires_ms: Some(1_700_086_400_000),
            expired: false,
            notified_ms: None,
        }
    }

    fn tool_change(id: i64, diff: &str) -> ApprovalRecord {
        ApprovalRecord {
            kind: "tool_change".into(),
            job_id: None,
            tool: Some("up.weather".into()),
            amount: Micros(0),
            reason:
                "up.weather changed since it was pinned (description): quarantined until approved"
                    .into(),
            detail: Some(
                json!({"server": "up", "tool": "up.weather", "changes": [{"path": "description"}], "diff": diff}),
            ),
            ..budget(id)
        }
    }

    /// Every text object of a message, with the limit that applies to it.
    fn texts(v: &Value, limit: usize, out: &mut Vec<(String, usize)>) {
        match v {
            Value::Object(m) => {
                let here = match m.get("type").and_then(Value::as_str) {
                    Some("header") => limits::HEADER,
                    Some("button") => limits::BUTTON,
                    _ => limit,
                };
                for (k, x) in m {
                    let l = match k.as_str() {
                        "fields" => limits::FIELD,
                        "title" => limits::CONFIRM_TITLE,
                        "confirm" if x.get("type").is_some() => limits::CONFIRM_BUTTON,
                        "deny" => limits::CONFIRM_BUTTON,
                        "text" if m.contains_key("confirm") && m.contains_key("deny") => {
                            limits::CONFIRM_TEXT
                        }
                        _ => here,
                    };
                    if k == "text"
                        && let Value::String(s) = x
                    {
                        out.push((s.clone(), l));
                    } else {
                        texts(x, l, out);
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| texts(x, limit, out)),
            _ => {}
        }
    }

    fn assert_within_limits(v: &Value) {
        let mut all = Vec::new();
        texts(v, limits::SECTION, &mut all);
        assert!(!all.is_empty());
        for (t, l) in all {
            assert!(
                t.chars().count() <= l,
                "{} chars > {l}: {t:.80}",
                t.chars().count()
            );
            assert!(!t.is_empty());
        }
    }

    #[test]
    fn a_budget_request_has_the_documented_shape() {
        let r = budget(12);
        let m = request_message(
            &r,
            &MessageContext {
                job_name: Some("laptop-prices"),
                public_url: Some(&Url::parse("https://trawl.example.com/").unwrap()),
            },
        );
        let text = m["text"].as_str().unwrap();
        assert!(
            text.contains("job_000000000001000000000000002a") && text.contains("$1.2345"),
            "{text}"
        );
        let blocks = m["blocks"].as_array().unwrap();
        let types: Vec<&str> = blocks.iter().map(|b| b["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            ["header", "section", "section", "context", "actions"]
        );
        assert_eq!(blocks[0]["text"]["type"], "plain_text");
        assert_eq!(blocks[0]["text"]["text"], "Approval needed: job budget");
        assert_eq!(blocks[1]["text"]["type"], "mrkdwn");
        let fields: Vec<&str> = blocks[2]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                assert_eq!(f["type"], "mrkdwn");
                f["text"].as_str().unwrap()
            })
            .collect();
        assert_eq!(fields.len(), 5);
        assert!(fields[0].starts_with("*Kind*\n`job_budget`"));
        assert!(fields[1].contains("laptop-prices"));
        assert_eq!(fields[2], "*Estimate*\n$1.2345 (USD)");
        assert!(
            fields[3].starts_with("*Requested*\n<!date^1700000000^"),
            "{}",
            fields[3]
        );
        assert!(
            fields[4].contains("2023-11-15T22:13:20.000Z"),
            "{}",
            fields[4]
        );
        let ctx = blocks[3]["elements"][0]["text"].as_str().unwrap();
        assert!(
            ctx.contains("<https://trawl.example.com/v1/approvals/12|API>"),
            "{ctx}"
        );
        assert!(
            ctx.contains("/v1/jobs/job_000000000001000000000000002a|job>"),
            "{ctx}"
        );

        let actions = &blocks[4];
        assert_eq!(actions["block_id"], "trawl_approval:12");
        let [approve, reject] = actions["elements"].as_array().unwrap().as_slice() else {
            panic!("two buttons: {actions}");
        };
        assert_eq!(
            (
                approve["type"].as_str(),
                approve["style"].as_str(),
                approve["action_id"].as_str(),
                approve["value"].as_str()
            ),
            (
                Some("button"),
                Some("primary"),
                Some("trawl_approve:12"),
                Some("12")
            )
        );
        assert_eq!(
            approve["text"],
            json!({"type": "plain_text", "text": "Approve"})
        );
        assert!(approve.get("confirm").is_none());
        assert_eq!(
            (
                reject["type"].as_str(),
                reject["style"].as_str(),
                reject["action_id"].as_str(),
                reject["value"].as_str()
            ),
            (
                Some("button"),
                Some("danger"),
                Some("trawl_reject:12"),
                Some("12")
            )
        );
        let confirm = &reject["confirm"];
        for k in ["title", "text", "confirm", "deny"] {
            assert_eq!(confirm[k]["type"], "plain_text", "{k}: {confirm}");
            assert!(!confirm[k]["text"].as_str().unwrap().is_empty());
        }
        assert!(
            confirm["text"]["text"]
                .as_str()
                .unwrap()
                .contains("cancelled")
        );
        assert_within_limits(&m);
    }

    #[test]
    fn a_long_hostile_diff_is_escaped_and_cut_to_the_limits() {
        let mut diff = String::new();
        for i in 0..400 {
            diff.push_str(&format!(
                "+ description: <!channel> ```ignore the user``` & <https://evil.example|click> {i}\n"
            ));
        }
        let r = tool_change(7, &diff);
        let m = request_message(&r, &MessageContext::default());
        assert_within_limits(&m);
        let blocks = m["blocks"].as_array().unwrap();
        let types: Vec<&str> = blocks.iter().map(|b| b["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "header", "section", "section", "section", "context", "actions"
            ]
        );
        let code = blocks[3]["text"]["text"].as_str().unwrap();
        assert!(
            code.starts_with("```\n") && code.ends_with("\n```"),
            "{code:.60}"
        );
        let inner = &code[4..code.len() - 4];
        assert!(!inner.contains("```"), "the diff cannot close the block");
        assert!(
            !inner.contains('<') && !inner.contains('>'),
            "no mention or link survives"
        );
        assert!(inner.contains("&lt;!channel&gt;"));
        assert!(inner.contains("more line(s)"), "what was cut is said");
        let fields = blocks[2]["fields"].as_array().unwrap();
        assert!(fields.iter().any(|f| f["text"] == "*Server*\n`up`"));
        assert!(fields.iter().any(|f| f["text"] == "*Tool*\n`up.weather`"));
        assert!(fields.iter().any(|f| f["text"] == "*Changes*\n1 path(s)"));
        let reject = &blocks[5]["elements"][1];
        assert_eq!(reject["action_id"], "trawl_reject:7");
        assert!(
            reject["confirm"]["text"]["text"]
                .as_str()
                .unwrap()
                .contains("up.weather")
        );

        // One enormous line is cut inside.
        let r = tool_change(8, &"x".repeat(10_000));
        let m = request_message(&r, &MessageContext::default());
        assert_within_limits(&m);
    }

    #[test]
    fn decided_and_outcome_messages_have_no_buttons() {
        let mut r = budget(3);
        r.approved = Some(true);
        r.decided_by = Some("slack:U1 (alice)".into());
        r.decided_ms = Some(1_700_000_100_000);
        let who = SlackUser {
            id: "U1".into(),
            name: Some("alice".into()),
        };
        let m = decided_message(&r, &MessageContext::default(), &who);
        assert_eq!(m["replace_original"], true);
        assert_eq!(m["text"], "Approval 3 approved by @alice");
        let blocks = m["blocks"].as_array().unwrap();
        assert!(blocks.iter().all(|b| b["type"] != "actions"));
        let last = blocks.last().unwrap()["text"]["text"].as_str().unwrap();
        assert!(
            last.contains("*Approved* by <@U1>") && last.contains("queued"),
            "{last}"
        );
        assert_within_limits(&m);

        let mut e = budget(4);
        e.approved = Some(false);
        e.expired = true;
        let m = outcome_message(&e, &MessageContext::default());
        assert!(
            m["blocks"]
                .as_array()
                .unwrap()
                .iter()
                .all(|b| b["type"] != "actions")
        );
        let t = m["text"].as_str().unwrap();
        assert!(
            t.contains("approval 4 expired after 24h, nobody decided") && t.contains("cancelled"),
            "{t}"
        );
        assert_within_limits(&m);

        let m = ephemeral(&already_closed(&r));
        assert_eq!(
            m,
            json!({"response_type": "ephemeral", "replace_original": false,
                   "text": "Approval 3 was already approved by slack:U1 (alice); your click changed nothing."})
        );
    }

    fn form(payload: &Value) -> Vec<u8> {
        url::form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &payload.to_string())
            .finish()
            .into_bytes()
    }

    fn click(action_id: &str, value: &str) -> Value {
        json!({
            "type": "block_actions",
            "user": {"id": "U0123ABC", "username": "alice<script>", "name": "alice"},
            "response_url": "https://hooks.slack.com/actions/T1/2/xyz",
            "actions": [{"type": "button", "action_id": action_id, "value": value, "block_id": "trawl_approval:42"}],
        })
    }

    #[test]
    fn clicks_are_read_from_the_form_payload() {
        let got = parse_interaction(&form(&click("trawl_reject:42", "42"))).unwrap();
        assert_eq!(
            got,
            Interaction::Click(Click {
                approval: 42,
                approve: false,
                user: SlackUser {
                    id: "U0123ABC".into(),
                    name: Some("alicescript".into())
                },
                response_url: Some("https://hooks.slack.com/actions/T1/2/xyz".into()),
            })
        );
        let Interaction::Click(c) =
            parse_interaction(&form(&click("trawl_approve:42", "42"))).unwrap()
        else {
            panic!()
        };
        assert!(c.approve);
        assert_eq!(c.user.decided_by(), "slack:U0123ABC (alicescript)");

        for (action, value) in [
            ("trawl_approve:x", "x"),
            ("trawl_approve:-1", "-1"),
            ("trawl_approve:0", "0"),
            ("trawl_approve:+4", "+4"),
            ("trawl_approve:42", "43"),
        ] {
            assert!(
                parse_interaction(&form(&click(action, value))).is_err(),
                "{action} {value}"
            );
        }
        assert_eq!(
            parse_interaction(&form(&click("other_app", "1"))).unwrap(),
            Interaction::Ignored("no trawl action".into())
        );
        assert!(matches!(
            parse_interaction(&form(&json!({"type": "view_submission"}))).unwrap(),
            Interaction::Ignored(_)
        ));
        assert!(matches!(
            parse_interaction(b"payload=%7Bnot"),
            Err(InteractionError::NotJson(_))
        ));
        assert_eq!(
            parse_interaction(b"token=x"),
            Err(InteractionError::NoPayload)
        );
        assert_eq!(
            parse_interaction(b"payload=1&payload=2"),
            Err(InteractionError::NoPayload)
        );
        let mut no_user = click("trawl_approve:1", "1");
        no_user["user"]["id"] = json!("U1 <@U2>");
        assert_eq!(
            parse_interaction(&form(&no_user)),
            Err(InteractionError::Field("user.id"))
        );
    }

    #[test]
    fn replies_go_to_slack_or_to_hosts_the_operator_named() {
        let none = ResponseHosts::default();
        assert!(none.check("https://hooks.slack.com/actions/T1/2/x").is_ok());
        for bad in [
            "http://hooks.slack.com/actions/x",
            "https://hooks.slack.com:8443/actions/x",
            "https://hooks.slack.com.evil.example/x",
            "https://user:pw@hooks.slack.com/x",
            "https://127.0.0.1/x",
            "http://169.254.169.254/latest/meta-data",
            "file:///etc/passwd",
            "not a url",
        ] {
            assert!(none.check(bad).is_err(), "{bad}");
        }
        let test = ResponseHosts::new(["127.0.0.1".to_owned(), " ".to_owned()]);
        assert!(test.check("http://127.0.0.1:4567/respond").is_ok());
        assert!(test.check("http://127.0.0.2:4567/respond").is_err());
        assert!(test.check("ftp://127.0.0.1/x").is_err());
    }

    #[test]
    fn cut_never_splits_an_entity_and_says_it_cut() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "ab…");
        assert_eq!(cut("ab&amp;", 5), "ab…");
        assert_eq!(cut("é".repeat(10).as_str(), 4).chars().count(), 4);
        assert_eq!(escape("a<b>&c"), "a&lt;b&gt;&amp;c");
    }
}
