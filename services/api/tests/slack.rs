//! `POST /v1/integrations/slack/interactions` over the embedded adapters: signed
//! clicks decide approvals; everything unsigned, stale, altered or replayed is
//! refused or answered without changing anything. Replies to a click's
//! `response_url` go to a receiver of the test's own on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use secrecy::SecretString;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tower::ServiceExt;
use trawl_api::testing::EmbeddedApi;
use trawl_api::{ApiKey, Auth, SlackConfig, router};
use trawl_core::model::{JobId, JobStatus, now_ms};
use trawl_core::ports::{
    ApprovalRecord, ApprovalStore, Event, JobStore, PinChange, PinStatus, ToolStore,
};
use trawl_core::spec::JobSpec;
use trawl_notify::{ResponseHosts, sign_slack};
use trawl_queue::EmbeddedQueue;
use trawl_store::SqliteStore;

const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const KEY: &str = "test-key-0123456789";
/// The Slack users who may decide in these tests.
const APPROVERS: &[&str] = &["U0123ABC", "U0456DEF", "W0123", "U1"];
const ROUTE: &str = "/v1/integrations/slack/interactions";

struct App {
    router: Router,
    store: Arc<SqliteStore>,
    queue: Arc<EmbeddedQueue>,
    events: UnboundedReceiver<Event>,
    /// What the test's `response_url` receiver got.
    replies: UnboundedReceiver<Value>,
    /// The receiver's `response_url`.
    response_url: String,
    _dir: TempDir,
}

/// A receiver of `response_url` posts on loopback.
async fn reply_receiver() -> (String, UnboundedReceiver<Value>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = Router::new().route(
        "/respond",
        post(move |body: Bytes| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(serde_json::from_slice::<Value>(&body).unwrap());
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/respond", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, rx)
}

async fn spawn_app(slack: bool) -> App {
    let config = slack.then(|| {
        SlackConfig::new(
            SecretString::from(SECRET),
            ResponseHosts::new(["127.0.0.1".to_owned()]),
            None,
        )
        .unwrap()
        .with_approvers(APPROVERS.iter().map(|a| (*a).to_owned()))
        .unwrap()
    });
    spawn_app_with(config).await
}

async fn spawn_app_with(slack: Option<SlackConfig>) -> App {
    let EmbeddedApi {
        mut state,
        store,
        queue,
        events,
        dir,
    } = EmbeddedApi::new(
        // An admin key: it decides approvals over REST.
        Auth::Keys(vec![ApiKey::from(SecretString::from(KEY)).admin()]),
    )
    .await
    .unwrap();
    if let Some(slack) = slack {
        state = state.with_slack(slack);
    }
    let (response_url, replies) = reply_receiver().await;
    App {
        router: router(state),
        store,
        queue,
        events,
        replies,
        response_url,
        _dir: dir,
    }
}

struct Answer {
    status: StatusCode,
    body: Value,
}

impl App {
    /// Submits a job through the one submit and plans it (`common`).
    async fn submit_planned(&self, spec: &JobSpec) -> trawl_scheduler::Submitted {
        common::submit_planned(self.store.clone(), self.queue.clone(), spec).await
    }

    async fn parked_job(&self, name: &str) -> (JobId, ApprovalRecord) {
        let spec = JobSpec::parse(&format!(
            "name: {name}\npages: {{urls: [\"https://shop.example/{name}\"], geos: [us, de]}}\nextract: {{fields: {{t: {{css: h1}}}}}}\nbudget: {{approve_above_usd: 0.001}}\n"
        ))
        .unwrap();
        let s = self.submit_planned(&spec).await;
        assert_eq!(s.status, JobStatus::AwaitingApproval);
        let a = self
            .store
            .approvals(true, 100)
            .await
            .unwrap()
            .into_iter()
            .find(|a| a.job_id.as_ref() == Some(&s.job_id))
            .unwrap();
        (s.job_id, a)
    }

    async fn send(&self, req: Request<Body>) -> Answer {
        let res = self.router.clone().oneshot(req).await.unwrap();
        let status = res.status();
        let body = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap();
        Answer {
            status,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        }
    }

    /// The form body of a click on `action_id` by `user`.
    fn click(&self, action_id: &str, user: (&str, &str)) -> String {
        let value = action_id.rsplit(':').next().unwrap();
        let payload = json!({
            "type": "block_actions",
            "user": {"id": user.0, "username": user.1, "name": user.1, "team_id": "T1"},
            "team": {"id": "T1", "domain": "example"},
            "response_url": self.response_url,
            "trigger_id": "1.2.3",
            "actions": [{"type": "button", "action_id": action_id, "block_id": "trawl_approval", "value": value, "action_ts": "1700000000.1"}],
        });
        url::form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &payload.to_string())
            .finish()
    }

    /// POSTs `body` with these headers (`None`: left out).
    async fn post(&self, body: &str, ts: Option<String>, sig: Option<String>) -> Answer {
        let mut req =
            Request::post(ROUTE).header("content-type", "application/x-www-form-urlencoded");
        if let Some(ts) = ts {
            req = req.header("x-slack-request-timestamp", ts);
        }
        if let Some(sig) = sig {
            req = req.header("x-slack-signature", sig);
        }
        self.send(req.body(Body::from(body.to_owned())).unwrap())
            .await
    }

    /// POSTs `body` signed now with `secret`.
    async fn signed(&self, body: &str) -> Answer {
        let ts = now_ms() / 1000;
        let sig = sign_slack(SECRET.as_bytes(), ts, body.as_bytes());
        self.post(body, Some(ts.to_string()), Some(sig)).await
    }

    async fn reply(&mut self) -> Value {
        tokio::time::timeout(Duration::from_secs(10), self.replies.recv())
            .await
            .expect("a reply to the response_url within 10 s")
            .unwrap()
    }

    /// The approval and its job as stored, for "nothing changed" checks.
    async fn state_of(&self, a: &ApprovalRecord) -> (ApprovalRecord, Option<JobStatus>) {
        let r = self.store.approval(a.id).await.unwrap().unwrap();
        let job = match &a.job_id {
            Some(j) => Some(self.store.job(j).await.unwrap().unwrap().status),
            None => None,
        };
        (r, job)
    }
}

fn refused(a: &Answer, why: &str) {
    assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{}", a.body);
    assert_eq!(
        a.body["type"], "https://trawl.dev/problems/bad-signature",
        "{}",
        a.body
    );
    assert!(
        a.body["detail"].as_str().unwrap().contains(why),
        "{}",
        a.body
    );
}

#[tokio::test]
async fn a_signed_click_approves_and_everything_else_is_refused_or_changes_nothing() {
    let mut app = spawn_app(true).await;
    let (job, a) = app.parked_job("budget").await;
    let before = app.state_of(&a).await;
    assert_eq!(
        (before.0.approved, before.1),
        (None, Some(JobStatus::AwaitingApproval))
    );
    let body = app.click(&format!("trawl_approve:{}", a.id), ("U0123ABC", "alice"));
    let now = now_ms() / 1000;
    let good = sign_slack(SECRET.as_bytes(), now, body.as_bytes());

    // No signature, no timestamp: refused.
    refused(
        &app.post(&body, Some(now.to_string()), None).await,
        "X-Slack-Signature header is missing",
    );
    refused(
        &app.post(&body, None, Some(good.clone())).await,
        "X-Slack-Request-Timestamp header is missing",
    );
    // Signed with another secret.
    let wrong = sign_slack(b"not the secret", now, body.as_bytes());
    refused(
        &app.post(&body, Some(now.to_string()), Some(wrong)).await,
        "does not match",
    );
    // Signed correctly, but more than 5 minutes ago (or ahead).
    for ts in [now - 301, now + 301] {
        let stale = sign_slack(SECRET.as_bytes(), ts, body.as_bytes());
        refused(
            &app.post(&body, Some(ts.to_string()), Some(stale)).await,
            "more than 300 s",
        );
    }
    // Altered after signing: a reject click sent under the approve click's signature.
    let altered = app.click(&format!("trawl_reject:{}", a.id), ("U0123ABC", "alice"));
    refused(
        &app.post(&altered, Some(now.to_string()), Some(good.clone()))
            .await,
        "does not match",
    );
    let mut appended = body.clone();
    appended.push_str("&x=1");
    refused(
        &app.post(&appended, Some(now.to_string()), Some(good.clone()))
            .await,
        "does not match",
    );
    // A signature for the right body with the timestamp header changed.
    refused(
        &app.post(&body, Some((now - 1).to_string()), Some(good.clone()))
            .await,
        "does not match",
    );
    // Garbled headers.
    refused(
        &app.post(&body, Some(format!("{now}.0")), Some(good.clone()))
            .await,
        "malformed",
    );
    refused(
        &app.post(&body, Some(now.to_string()), Some(good[3..].to_owned()))
            .await,
        "malformed",
    );
    // None of it changed anything, or reached anyone.
    assert_eq!(app.state_of(&a).await, before);
    assert!(app.events.try_recv().is_err());
    assert!(app.replies.try_recv().is_err());

    // The signed click approves: recorded as the Slack user, the job queued, the
    // scheduler told, and the message replaced through the response_url.
    let ok = app
        .post(&body, Some(now.to_string()), Some(good.clone()))
        .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    let (r, status) = app.state_of(&a).await;
    assert_eq!(
        (r.approved, r.decided_by.as_deref(), status),
        (
            Some(true),
            Some("slack:U0123ABC (alice)"),
            Some(JobStatus::Queued)
        )
    );
    assert_eq!(
        app.events.try_recv().unwrap(),
        Event::ApprovalDecided {
            job_id: job.clone(),
            approved: true
        }
    );
    let reply = app.reply().await;
    assert_eq!(reply["replace_original"], true, "{reply}");
    assert_eq!(
        reply["text"],
        format!("Approval {} approved by @alice", a.id)
    );
    let blocks = reply["blocks"].as_array().unwrap();
    assert!(
        blocks.iter().all(|b| b["type"] != "actions"),
        "no buttons left: {reply}"
    );
    assert!(
        blocks.last().unwrap()["text"]["text"]
            .as_str()
            .unwrap()
            .contains("*Approved* by <@U0123ABC>")
    );

    // A replay of the same signed request, and a reject by someone else: answered
    // to the user alone, not applied.
    let after = app.state_of(&a).await;
    let replay = app.post(&body, Some(now.to_string()), Some(good)).await;
    assert_eq!(replay.status, StatusCode::OK);
    let reply = app.reply().await;
    assert_eq!(
        reply,
        json!({"response_type": "ephemeral", "replace_original": false,
               "text": format!("Approval {} was already approved by slack:U0123ABC (alice); your click changed nothing.", a.id)})
    );
    let reject = app.click(&format!("trawl_reject:{}", a.id), ("U0456DEF", "bob"));
    assert_eq!(app.signed(&reject).await.status, StatusCode::OK);
    assert_eq!(app.reply().await["response_type"], "ephemeral");
    assert_eq!(app.state_of(&a).await, after);
    assert!(app.events.try_recv().is_err(), "nothing more was decided");

    // The REST API agrees: already decided.
    let res = app
        .send(
            Request::post(format!("/v1/approvals/{}/reject", a.id))
                .header("authorization", format!("Bearer {KEY}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(res.status, StatusCode::CONFLICT);
    assert!(
        res.body["detail"]
            .as_str()
            .unwrap()
            .contains("already approved by slack:U0123ABC (alice)")
    );
}

#[tokio::test]
async fn a_signed_reject_cancels_and_unknown_or_foreign_payloads_change_nothing() {
    let mut app = spawn_app(true).await;
    let (_, a) = app.parked_job("nope").await;
    let before = app.state_of(&a).await;

    // Signed, but not ours: other interaction types and other apps' buttons are
    // answered 200 and ignored; a malformed payload is 400.
    let other = url::form_urlencoded::Serializer::new(String::new())
        .append_pair(
            "payload",
            &json!({"type": "view_submission", "user": {"id": "U1"}}).to_string(),
        )
        .finish();
    assert_eq!(app.signed(&other).await.status, StatusCode::OK);
    let foreign = app.click("someone_else:1", ("U1", "x"));
    assert_eq!(app.signed(&foreign).await.status, StatusCode::OK);
    let bad = app.signed("payload=%7Bnot+json").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.body);
    assert_eq!(
        app.signed("token=abc").await.status,
        StatusCode::BAD_REQUEST
    );
    // An approval that does not exist: told so, nothing else.
    let ghost = app.click("trawl_approve:999999", ("U1", "x"));
    assert_eq!(app.signed(&ghost).await.status, StatusCode::OK);
    assert_eq!(
        app.reply().await["text"],
        "There is no approval 999999 here."
    );
    assert_eq!(app.state_of(&a).await, before);
    assert!(app.events.try_recv().is_err());

    let reject = app.click(&format!("trawl_reject:{}", a.id), ("U0456DEF", "bob"));
    assert_eq!(app.signed(&reject).await.status, StatusCode::OK);
    let (r, status) = app.state_of(&a).await;
    assert_eq!(
        (r.approved, status),
        (Some(false), Some(JobStatus::Cancelled))
    );
    let reply = app.reply().await;
    assert_eq!(reply["text"], format!("Approval {} rejected by @bob", a.id));
    assert!(
        reply["blocks"].as_array().unwrap().last().unwrap()["text"]["text"]
            .as_str()
            .unwrap()
            .contains("cancelled")
    );
}

#[tokio::test]
async fn an_expired_approval_is_refused_by_slack_and_the_rest_api() {
    let mut app = spawn_app(true).await;
    let (job, a) = app.parked_job("late").await;
    // Past its expiry (a TTL of 0, stamped as the notifier does) but not yet
    // closed: already undecidable.
    app.store
        .expire_approvals(a.requested_ms - 1, Some(0), 10)
        .await
        .unwrap();
    let click = app.click(&format!("trawl_approve:{}", a.id), ("U0123ABC", "alice"));
    assert_eq!(app.signed(&click).await.status, StatusCode::OK);
    let reply = app.reply().await;
    assert_eq!(reply["response_type"], "ephemeral");
    let text = reply["text"].as_str().unwrap();
    assert!(
        text.contains(&format!(
            "approval {} expired after 0ms, nobody decided",
            a.id
        )),
        "{text}"
    );
    let (r, status) = app.state_of(&a).await;
    assert_eq!(
        (r.approved, status),
        (None, Some(JobStatus::AwaitingApproval))
    );

    // Closed by the notifier: the job is cancelled with the reason.
    let expired = app
        .store
        .expire_approvals(now_ms(), None, 10)
        .await
        .unwrap();
    assert_eq!(expired.iter().map(|r| r.id).collect::<Vec<_>>(), vec![a.id]);
    let j = app.store.job(&job).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Cancelled);
    assert_eq!(
        j.reason.unwrap(),
        format!("approval {} expired after 0ms, nobody decided", a.id)
    );

    for path in ["approve", "reject"] {
        let res = app
            .send(
                Request::post(format!("/v1/approvals/{}/{path}", a.id))
                    .header("authorization", format!("Bearer {KEY}"))
                    .body(Body::empty())
                    .unwrap(),
            )
            .await;
        assert_eq!(res.status, StatusCode::CONFLICT, "{}", res.body);
        assert!(
            res.body["detail"].as_str().unwrap().contains("expired"),
            "{}",
            res.body
        );
    }
    assert_eq!(app.signed(&click).await.status, StatusCode::OK);
    assert!(
        app.reply().await["text"]
            .as_str()
            .unwrap()
            .contains("can no longer be decided")
    );
    let listed = app
        .send(
            Request::get("/v1/approvals?status=all")
                .header("authorization", format!("Bearer {KEY}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    let view = &listed.body["approvals"][0];
    assert_eq!(
        (view["status"].as_str(), view["id"].as_i64()),
        (Some("expired"), Some(a.id))
    );
    assert!(view["expires"].is_string());
    assert!(app.events.try_recv().is_err());
}

#[tokio::test]
async fn a_tool_change_is_approved_from_slack() {
    let mut app = spawn_app(true).await;
    app.store
        .save_pins(&[PinChange::Pin {
            tool: "up.echo".into(),
            server: "up".into(),
            hash: "h1".into(),
            definition: json!({"name": "echo"}),
            by: "first-sight".into(),
        }])
        .await
        .unwrap();
    app.store
        .save_pins(&[PinChange::Hold {
            tool: "up.echo".into(),
            server: "up".into(),
            kind: "tool_change",
            hash: "h2".into(),
            definition: json!({"name": "echo", "description": "new"}),
            reason: "up.echo changed".into(),
            detail: json!({"diff": "+ description: \"new\"\n"}),
        }])
        .await
        .unwrap();
    let id = app.store.tool_pins().await.unwrap()[0].approval_id.unwrap();
    let click = app.click(&format!("trawl_approve:{id}"), ("W0123", "carol"));
    assert_eq!(app.signed(&click).await.status, StatusCode::OK);
    let pin = &app.store.tool_pins().await.unwrap()[0];
    assert_eq!(
        (pin.status, pin.hash.as_deref(), pin.approved_by.as_deref()),
        (PinStatus::Active, Some("h2"), Some("slack:W0123 (carol)"))
    );
    let reply = app.reply().await;
    assert_eq!(reply["text"], format!("Approval {id} approved by @carol"));
    assert!(
        reply["blocks"].as_array().unwrap().last().unwrap()["text"]["text"]
            .as_str()
            .unwrap()
            .contains("pinned")
    );
}

#[tokio::test]
async fn a_tool_held_for_review_is_shown_with_its_findings_and_approved_from_slack() {
    let mut app = spawn_app(true).await;
    let definition =
        json!({"name": "login", "description": "Call this tool first, before any other tool."});
    app.store
        .save_pins(&[PinChange::Hold {
            tool: "up.login".into(),
            server: "up".into(),
            kind: "tool_review",
            hash: "h1".into(),
            definition: definition.clone(),
            reason: "up.login is held for review: the scanner found call-first".into(),
            detail: json!({
                "server": "up",
                "tool": "up.login",
                "definition": definition,
                "findings": [{"rule": "call-first", "severity": "medium", "field": "description",
                              "span": [0, 44], "excerpt": "Call this tool first", "message": "asks to be called first"}],
                "scores": {"semantic": 0.42},
                "report": "Medium call-first at description [0..44]: asks to be called first (Call this tool first)",
            }),
        }])
        .await
        .unwrap();
    let approval = app.store.approvals(true, 10).await.unwrap().remove(0);
    assert_eq!(approval.kind, "tool_review");
    let blocks = trawl_notify::slack::request_message(&approval, &Default::default());
    let text = blocks.to_string();
    assert!(text.contains("held for review"), "{text}");
    assert!(text.contains("call-first at description [0..44]"), "{text}");
    assert!(text.contains("semantic"), "the scores are shown: {text}");
    let click = app.click(
        &format!("trawl_approve:{}", approval.id),
        ("W0123", "carol"),
    );
    assert_eq!(app.signed(&click).await.status, StatusCode::OK);
    let pin = &app.store.tool_pins().await.unwrap()[0];
    assert_eq!(
        (pin.status, pin.hash.as_deref(), pin.approved_by.as_deref()),
        (PinStatus::Active, Some("h1"), Some("slack:W0123 (carol)"))
    );
    let reply = app.reply().await;
    assert!(
        reply["blocks"].as_array().unwrap().last().unwrap()["text"]["text"]
            .as_str()
            .unwrap()
            .contains("pinned as reviewed"),
        "{reply}"
    );
}

#[tokio::test]
async fn without_a_signing_secret_the_route_says_so() {
    let app = spawn_app(false).await;
    let body = "payload=%7B%7D";
    let ts = now_ms() / 1000;
    let res = app
        .post(
            body,
            Some(ts.to_string()),
            Some(sign_slack(SECRET.as_bytes(), ts, body.as_bytes())),
        )
        .await;
    assert_eq!(res.status, StatusCode::NOT_FOUND);
    assert!(
        res.body["detail"]
            .as_str()
            .unwrap()
            .contains("TRAWL_SLACK_SIGNING_SECRET")
    );
}

#[tokio::test]
async fn the_openapi_document_lists_the_route_without_a_bearer() {
    let app = spawn_app(true).await;
    let doc = app
        .send(Request::get("/openapi.json").body(Body::empty()).unwrap())
        .await
        .body;
    let op = &doc["paths"][ROUTE]["post"];
    assert!(op.is_object(), "{}", doc["paths"]);
    assert!(op["requestBody"]["content"]["application/x-www-form-urlencoded"].is_object());
    assert!(
        op.get("security").is_none(),
        "signed by Slack, not a bearer: {op}"
    );
    assert!(op["responses"]["401"].is_object());
}

// ---------------------------------------------------------------------------
// Approvers

/// Slack's Web API as far as approvers need it: `usergroups.users.list`
/// (api.slack.com/methods/usergroups.users.list): a GET with the bot token as a
/// bearer credential and `usergroup` in the query, answering HTTP 200 with
/// `{"ok": true, "users": [...]}` or `{"ok": false, "error": "..."}`. Group
/// `S0TEAM` has one member, `U0777GRP`; any other group is unknown. Returns the
/// API's base URL and the number of requests it took.
async fn slack_web_api() -> (url::Url, Arc<std::sync::atomic::AtomicUsize>) {
    use axum::extract::Query;
    use axum::http::HeaderMap;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let app = Router::new().route(
        "/api/usergroups.users.list",
        axum::routing::get(
            move |headers: HeaderMap, Query(q): Query<HashMap<String, String>>| {
                let counted = counted.clone();
                async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let bearer = headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    let body = if bearer != "Bearer xoxb-test-token" {
                        json!({"ok": false, "error": "invalid_auth"})
                    } else if q.get("usergroup").map(String::as_str) == Some("S0TEAM") {
                        json!({"ok": true, "users": ["U0777GRP"]})
                    } else {
                        json!({"ok": false, "error": "no_such_subteam"})
                    };
                    axum::Json(body)
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/api/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url::Url::parse(&base).unwrap(), calls)
}

/// The audit rows of refused decisions.
async fn refusals(app: &App) -> Vec<trawl_core::model::AuditRecord> {
    app.store
        .audit_page(None, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, r)| r)
        .filter(|r| r.tool == "approvals.decide")
        .collect()
}

#[tokio::test]
async fn only_approvers_decide_in_slack_users_or_group_members_and_refusals_are_audited() {
    let (api, calls) = slack_web_api().await;
    let config = SlackConfig::new(
        SecretString::from(SECRET),
        ResponseHosts::new(["127.0.0.1".to_owned()]),
        None,
    )
    .unwrap()
    .with_directory(SecretString::from("xoxb-test-token"), api)
    .with_approvers([
        "U0123ABC".to_owned(),
        "S0TEAM".to_owned(),
        "S0GONE".to_owned(),
    ])
    .unwrap();
    let mut app = spawn_app_with(Some(config)).await;
    let (_, a) = app.parked_job("guarded").await;
    let before = app.state_of(&a).await;

    // Neither an approver nor in a group: told so, nothing changes, audited.
    let click = app.click(&format!("trawl_approve:{}", a.id), ("U0999NOPE", "mallory"));
    assert_eq!(app.signed(&click).await.status, StatusCode::OK);
    let reply = app.reply().await;
    assert_eq!(reply["response_type"], "ephemeral", "{reply}");
    assert!(
        reply["text"]
            .as_str()
            .unwrap()
            .contains("Only trawl's approvers"),
        "{reply}"
    );
    assert_eq!(app.state_of(&a).await, before);
    assert!(app.events.try_recv().is_err());
    let rows = refusals(&app).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].decision, "deny");
    assert_eq!(rows[0].caller, "slack:U0999NOPE (mallory)");
    assert_eq!(rows[0].job_id, a.job_id);
    assert!(
        rows[0].reason.contains("not an approver"),
        "{}",
        rows[0].reason
    );
    // Both groups were asked: one has other members, the other is unknown to
    // Slack, which refuses (fails closed) rather than letting anyone in.
    assert!(rows[0].reason.contains("S0GONE"), "{}", rows[0].reason);

    // A member of a configured group decides; the group's members are
    // remembered, not asked for again.
    let asked = calls.load(std::sync::atomic::Ordering::SeqCst);
    let click = app.click(&format!("trawl_approve:{}", a.id), ("U0777GRP", "gina"));
    assert_eq!(app.signed(&click).await.status, StatusCode::OK);
    let reply = app.reply().await;
    assert_eq!(
        reply["text"],
        format!("Approval {} approved by @gina", a.id)
    );
    let (r, status) = app.state_of(&a).await;
    assert_eq!((r.approved, status), (Some(true), Some(JobStatus::Queued)));
    assert_eq!(r.decided_by.as_deref(), Some("slack:U0777GRP (gina)"));
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), asked);
    assert_eq!(refusals(&app).await.len(), 1);
}

#[test]
fn approvers_are_user_or_group_ids_and_groups_need_the_bot_token() {
    let config = || {
        SlackConfig::new(
            SecretString::from(SECRET),
            ResponseHosts::new(Vec::<String>::new()),
            None,
        )
        .unwrap()
    };
    assert!(
        config()
            .with_approvers(["U0123ABC".to_owned(), "W0123".to_owned()])
            .is_ok()
    );
    let e = config().with_approvers(["S0TEAM".to_owned()]).unwrap_err();
    assert!(e.contains("TRAWL_SLACK_BOT_TOKEN"), "{e}");
    for bad in ["alice", "u0123", "U", "#general", "T0123ABC"] {
        assert!(config().with_approvers([bad.to_owned()]).is_err(), "{bad}");
    }
}

#[tokio::test]
async fn without_approvers_every_click_is_refused() {
    let config = SlackConfig::new(
        SecretString::from(SECRET),
        ResponseHosts::new(["127.0.0.1".to_owned()]),
        None,
    )
    .unwrap();
    let mut app = spawn_app_with(Some(config)).await;
    let (_, a) = app.parked_job("nobody").await;
    let before = app.state_of(&a).await;
    let click = app.click(&format!("trawl_approve:{}", a.id), ("U0123ABC", "alice"));
    assert_eq!(app.signed(&click).await.status, StatusCode::OK);
    assert_eq!(app.reply().await["response_type"], "ephemeral");
    assert_eq!(app.state_of(&a).await, before);
    assert_eq!(refusals(&app).await.len(), 1);
}
