//! Approvals in Slack, end to end in the deployed shape: `trawl api` and `trawl
//! scheduler` as processes over the real Postgres and NATS, a Slack (incoming
//! webhook and `response_url`) and a generic webhook receiver of the test's own on
//! loopback, and signed clicks posted to the API. Slack's own Python SDK checks
//! trawl's signatures, and trawl checks the SDK's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use trawl_core::model::now_ms;
use trawl_notify::{SignatureError, sign_slack, verify_slack, verify_webhook};
use trawl_sim::SimConfig;
use trawl_tests::{Api, Deployment, Role, upstreams};

const BIN: &str = env!("CARGO_BIN_EXE_trawl-e2e");
const SIGNING_SECRET: &str = "e2e-signing-secret-5f1c0a";
const WEBHOOK_SECRET: &str = "whsec_e2e_9b2d";
const ROUTE: &str = "/v1/integrations/slack/interactions";

/// A job whose estimate is above its `approve_above_usd`.
const COSTLY: &str = "name: costly\npages: {urls: [\"https://shop.example/p/1\", \"https://shop.example/p/2\"], geos: [us, de]}\nextract: {fields: {t: {css: h1}}}\nbudget: {max_usd: 5.0, approve_above_usd: 0.001}\n";

/// One request the receiver got: on which path, with which headers and body.
#[derive(Debug)]
struct Got {
    headers: HeaderMap,
    body: Bytes,
}

impl Got {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// Slack's side, played on loopback: `/slack` (the incoming webhook), `/respond`
/// (a click's `response_url`), and `/hook` (the generic webhook).
struct Receiver {
    base: String,
    slack: UnboundedReceiver<Got>,
    respond: UnboundedReceiver<Got>,
    hook: UnboundedReceiver<Got>,
}

async fn record(
    State(tx): State<UnboundedSender<Got>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let _ = tx.send(Got { headers, body });
    StatusCode::OK
}

impl Receiver {
    async fn start() -> Receiver {
        let (slack_tx, slack) = mpsc::unbounded_channel();
        let (respond_tx, respond) = mpsc::unbounded_channel();
        let (hook_tx, hook) = mpsc::unbounded_channel();
        let app = Router::new()
            .route("/slack", post(record).with_state(slack_tx))
            .route("/respond", post(record).with_state(respond_tx))
            .route("/hook", post(record).with_state(hook_tx));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver {
            base,
            slack,
            respond,
            hook,
        }
    }
}

/// The next request on `rx`, within `within`; the roles' logs if none comes.
async fn next(
    rx: &mut UnboundedReceiver<Got>,
    within: Duration,
    what: &str,
    roles: &[&Role],
) -> Got {
    match tokio::time::timeout(within, rx.recv()).await {
        Ok(Some(g)) => g,
        _ => panic!(
            "no {what} within {within:?}\n{}",
            roles
                .iter()
                .map(|r| format!("--- {}:\n{}", r.name, r.log()))
                .collect::<String>()
        ),
    }
}

/// A deployment whose scheduler posts to `rx` and whose API takes clicks.
async fn deployment(rx: &Receiver, ttl: &str) -> Deployment {
    Deployment::new(BIN, SimConfig::default())
        .await
        .with_env("TRAWL_SLACK_WEBHOOK_URL", &format!("{}/slack", rx.base))
        .with_env("TRAWL_SLACK_SIGNING_SECRET", SIGNING_SECRET)
        .with_env("TRAWL_SLACK_RESPONSE_HOSTS", "127.0.0.1")
        .with_env("TRAWL_SLACK_APPROVERS", "U0E2EALICE,U0E2EBOB")
        .with_env("TRAWL_WEBHOOK_URL", &format!("{}/hook", rx.base))
        .with_env("TRAWL_WEBHOOK_SECRET", WEBHOOK_SECRET)
        .with_env("TRAWL_PUBLIC_URL", "https://trawl.example.com")
        .with_env("TRAWL_APPROVAL_TTL", ttl)
}

/// The form body of a click, as Slack sends it.
fn click(action_id: &str, user: (&str, &str), response_url: &str) -> String {
    let value = action_id.rsplit(':').next().unwrap();
    let payload = json!({
        "type": "block_actions",
        "user": {"id": user.0, "username": user.1, "name": user.1, "team_id": "T0E2E"},
        "api_app_id": "A0E2E",
        "team": {"id": "T0E2E", "domain": "e2e"},
        "container": {"type": "message", "message_ts": "1700000000.000100", "channel_id": "C0E2E", "is_ephemeral": false},
        "channel": {"id": "C0E2E", "name": "approvals"},
        "response_url": response_url,
        "trigger_id": "1.2.3",
        "actions": [{"type": "button", "action_id": action_id, "block_id": "trawl_approval", "value": value, "action_ts": "1700000000.1"}],
    });
    url::form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish()
}

/// POSTs `body` to the interactions route with these headers (`None`: left out).
async fn post_click(
    api: &Api,
    body: &str,
    ts: Option<String>,
    sig: Option<String>,
) -> (u16, Value) {
    let mut req = api
        .http
        .post(format!("{}{ROUTE}", api.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.to_owned());
    if let Some(ts) = ts {
        req = req.header("X-Slack-Request-Timestamp", ts);
    }
    if let Some(sig) = sig {
        req = req.header("X-Slack-Signature", sig);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    let text = res.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn signed(api: &Api, body: &str) -> (u16, Value) {
    let ts = now_ms() / 1000;
    post_click(
        api,
        body,
        Some(ts.to_string()),
        Some(sign_slack(SIGNING_SECRET.as_bytes(), ts, body.as_bytes())),
    )
    .await
}

async fn approval(api: &Api, id: i64) -> Value {
    let all: Value = api
        .req(Method::GET, "/v1/approvals?status=all")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    all["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no approval {id}: {all}"))
}

/// Slack's documented limits on the texts of a message.
fn assert_block_kit(m: &Value, id: i64) {
    let text = m["text"].as_str().expect("a top-level fallback text");
    assert!(!text.is_empty() && text.chars().count() <= 3000);
    let blocks = m["blocks"].as_array().expect("blocks");
    assert!(!blocks.is_empty() && blocks.len() <= 50);
    let types: Vec<&str> = blocks.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(types.first(), Some(&"header"), "{types:?}");
    assert_eq!(types.last(), Some(&"actions"), "{types:?}");
    assert!(
        types
            .iter()
            .all(|t| ["header", "section", "context", "actions"].contains(t)),
        "{types:?}"
    );
    for b in blocks {
        match b["type"].as_str().unwrap() {
            "header" => {
                assert_eq!(b["text"]["type"], "plain_text");
                let t = b["text"]["text"].as_str().unwrap();
                assert!(!t.is_empty() && t.chars().count() <= 150, "{t}");
            }
            "section" => {
                let has_text = b.get("text").is_some();
                let fields = b.get("fields").and_then(Value::as_array);
                assert!(
                    has_text || fields.is_some(),
                    "a section has text or fields: {b}"
                );
                if has_text {
                    assert!(matches!(
                        b["text"]["type"].as_str(),
                        Some("mrkdwn" | "plain_text")
                    ));
                    assert!(b["text"]["text"].as_str().unwrap().chars().count() <= 3000);
                }
                if let Some(fields) = fields {
                    assert!(!fields.is_empty() && fields.len() <= 10);
                    for f in fields {
                        assert_eq!(f["type"], "mrkdwn");
                        assert!(f["text"].as_str().unwrap().chars().count() <= 2000);
                    }
                }
            }
            "context" => {
                let els = b["elements"].as_array().unwrap();
                assert!(!els.is_empty() && els.len() <= 10);
            }
            "actions" => {
                assert!(b["block_id"].as_str().unwrap().len() <= 255);
                let els = b["elements"].as_array().unwrap();
                assert_eq!(els.len(), 2, "{b}");
                for (e, (label, style, prefix)) in els.iter().zip([
                    ("Approve", "primary", "trawl_approve:"),
                    ("Reject", "danger", "trawl_reject:"),
                ]) {
                    assert_eq!(e["type"], "button");
                    assert_eq!(e["text"], json!({"type": "plain_text", "text": label}));
                    assert_eq!(e["style"], style);
                    assert_eq!(
                        e["action_id"],
                        format!("{prefix}{id}"),
                        "the action carries the approval id"
                    );
                    assert_eq!(e["value"], id.to_string());
                }
                assert!(els[0].get("confirm").is_none());
                let c = &els[1]["confirm"];
                for (k, max) in [("title", 100), ("text", 300), ("confirm", 30), ("deny", 30)] {
                    assert_eq!(c[k]["type"], "plain_text", "{c}");
                    let t = c[k]["text"].as_str().unwrap();
                    assert!(!t.is_empty() && t.chars().count() <= max, "{k}: {t}");
                }
            }
            other => panic!("unexpected block {other}"),
        }
    }
}

/// The approval id a Slack message's buttons carry.
fn approval_id(m: &Value) -> i64 {
    let actions = m["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "actions")
        .unwrap();
    actions["elements"][0]["value"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn webhook_signed(g: &Got) -> bool {
    let ts = g.headers["x-trawl-timestamp"].to_str().unwrap();
    let sig = g.headers["x-trawl-signature"].to_str().unwrap();
    verify_webhook(WEBHOOK_SECRET.as_bytes(), ts, sig, &g.body, now_ms() / 1000).is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_posted_to_slack_and_decided_by_one_signed_click() {
    let mut rx = Receiver::start().await;
    let d = deployment(&rx, "24h").await;
    let mut api_role = d.spawn("api", "api");
    // Two schedulers, two notifiers: each notice is still posted once.
    let scheduler = d.spawn("scheduler", "scheduler");
    let scheduler2 = d.spawn("scheduler", "scheduler-2");
    let api = d.client(&api_role.api_url().await);
    let job = api.submit_yaml(COSTLY).await;
    let roles = [&api_role, &scheduler, &scheduler2];

    // The scheduler plans it, parks it and posts the approval: Block Kit to
    // Slack, signed JSON to the webhook.
    let posted = next(
        &mut rx.slack,
        Duration::from_secs(30),
        "Slack message",
        &roles,
    )
    .await;
    assert_eq!(posted.headers["content-type"], "application/json");
    let m = posted.json();
    let id = approval_id(&m);
    assert_block_kit(&m, id);
    assert!(m["text"].as_str().unwrap().contains(&job), "{}", m["text"]);
    let hook = next(&mut rx.hook, Duration::from_secs(10), "webhook", &roles).await;
    assert!(webhook_signed(&hook), "the webhook's signature verifies");
    let h = hook.json();
    assert_eq!(
        (h["type"].as_str(), h["approval"]["id"].as_i64()),
        (Some("approval.requested"), Some(id))
    );
    assert_eq!(h["approval"]["job_id"], job.as_str());
    let view = approval(&api, id).await;
    assert_eq!(view["status"], "pending");
    assert!(view["expires"].is_string(), "{view}");
    assert_eq!(api.job(&job).await["status"], "awaiting_approval");

    // Refused, each one, and nothing changes.
    let response_url = format!("{}/respond", rx.base);
    let body = click(
        &format!("trawl_approve:{id}"),
        ("U0E2EALICE", "alice"),
        &response_url,
    );
    let now = now_ms() / 1000;
    let good = sign_slack(SIGNING_SECRET.as_bytes(), now, body.as_bytes());
    let altered = click(
        &format!("trawl_approve:{id}"),
        ("U0E2EMALLORY", "mallory"),
        &response_url,
    );
    let stale_ts = now - 6 * 60;
    let refusals: Vec<(&str, String, Option<String>, Option<String>)> = vec![
        (
            "bad signature",
            body.clone(),
            Some(now.to_string()),
            Some(sign_slack(b"not-the-secret", now, body.as_bytes())),
        ),
        (
            "stale timestamp",
            body.clone(),
            Some(stale_ts.to_string()),
            Some(sign_slack(
                SIGNING_SECRET.as_bytes(),
                stale_ts,
                body.as_bytes(),
            )),
        ),
        (
            "body altered after signing",
            altered.clone(),
            Some(now.to_string()),
            Some(good.clone()),
        ),
        (
            "missing signature",
            body.clone(),
            Some(now.to_string()),
            None,
        ),
        ("missing timestamp", body.clone(), None, Some(good.clone())),
    ];
    for (what, b, ts, sig) in refusals {
        let (status, problem) = post_click(&api, &b, ts, sig).await;
        assert_eq!(status, 401, "{what}: {problem}");
        assert_eq!(
            problem["type"], "https://trawl.dev/problems/bad-signature",
            "{what}"
        );
        let v = approval(&api, id).await;
        assert_eq!(
            (v["status"].as_str(), &v["decided_by"]),
            (Some("pending"), &Value::Null),
            "{what}"
        );
        assert_eq!(api.job(&job).await["status"], "awaiting_approval", "{what}");
    }
    assert!(
        rx.respond.try_recv().is_err(),
        "no reply to a refused click"
    );

    // A well-signed click by someone who is not an approver: told so, privately,
    // and nothing changes.
    let stranger = sign_slack(SIGNING_SECRET.as_bytes(), now, altered.as_bytes());
    let (status, _) = post_click(&api, &altered, Some(now.to_string()), Some(stranger)).await;
    assert_eq!(status, 200);
    let reply = next(
        &mut rx.respond,
        Duration::from_secs(10),
        "reply to a non-approver",
        &roles,
    )
    .await
    .json();
    assert_eq!(reply["response_type"], "ephemeral", "{reply}");
    let v = approval(&api, id).await;
    assert_eq!(v["status"], "pending");
    assert_eq!(api.job(&job).await["status"], "awaiting_approval");

    // The signed click approves: as the Slack user, the job goes on, and the
    // message is replaced through the response_url.
    let (status, _) = post_click(&api, &body, Some(now.to_string()), Some(good.clone())).await;
    assert_eq!(status, 200);
    let v = approval(&api, id).await;
    assert_eq!(
        (v["status"].as_str(), v["decided_by"].as_str()),
        (Some("approved"), Some("slack:U0E2EALICE (alice)"))
    );
    let reply = next(
        &mut rx.respond,
        Duration::from_secs(10),
        "reply to the response_url",
        &roles,
    )
    .await
    .json();
    assert_eq!(reply["replace_original"], true, "{reply}");
    assert!(
        reply["blocks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["type"] != "actions")
    );
    assert!(
        reply["text"]
            .as_str()
            .unwrap()
            .contains("approved by @alice"),
        "{reply}"
    );
    let moved = api
        .wait_job(
            &job,
            Duration::from_secs(30),
            |j| j["status"] != "awaiting_approval",
            || scheduler.log(),
        )
        .await;
    assert!(
        matches!(moved["status"].as_str(), Some("queued" | "running")),
        "{moved}"
    );

    // A replay of that very request (still within 5 minutes): answered, not applied.
    let (status, _) = post_click(&api, &body, Some(now.to_string()), Some(good)).await;
    assert_eq!(status, 200);
    let reply = next(
        &mut rx.respond,
        Duration::from_secs(10),
        "reply to the replay",
        &roles,
    )
    .await
    .json();
    assert_eq!(reply["response_type"], "ephemeral", "{reply}");
    assert_eq!(reply["replace_original"], false);
    assert!(
        reply["text"]
            .as_str()
            .unwrap()
            .contains("already approved by slack:U0E2EALICE (alice)"),
        "{reply}"
    );
    // And a reject by someone else: the same.
    let reject = click(
        &format!("trawl_reject:{id}"),
        ("U0E2EBOB", "bob"),
        &response_url,
    );
    assert_eq!(signed(&api, &reject).await.0, 200);
    assert_eq!(
        next(&mut rx.respond, Duration::from_secs(10), "reply", &roles)
            .await
            .json()["response_type"],
        "ephemeral"
    );
    let v = approval(&api, id).await;
    assert_eq!(
        (v["status"].as_str(), v["decided_by"].as_str()),
        (Some("approved"), Some("slack:U0E2EALICE (alice)"))
    );
    assert_ne!(api.job(&job).await["status"], "cancelled");

    // The webhook hears the decision; Slack, which showed it already, gets no
    // second message (the notifier posts Slack first, so it would be there).
    let decided = next(
        &mut rx.hook,
        Duration::from_secs(10),
        "approval.decided",
        &roles,
    )
    .await;
    assert!(webhook_signed(&decided));
    let h = decided.json();
    assert_eq!(
        (h["type"].as_str(), h["approval"]["status"].as_str()),
        (Some("approval.decided"), Some("approved"))
    );
    assert!(
        rx.slack.try_recv().is_err(),
        "a click's decision is not posted again, nor the request twice"
    );
    let more = rx.hook.try_recv().map(|g| g.json());
    assert!(more.is_err(), "each notice once: {more:?}");
    assert!(api_role.stop(Duration::from_secs(15)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_nobody_decides_expires_and_clicks_and_the_api_are_refused() {
    let mut rx = Receiver::start().await;
    let d = deployment(&rx, "3s").await;
    let mut api_role = d.spawn("api", "api");
    let scheduler = d.spawn("scheduler", "scheduler");
    let api = d.client(&api_role.api_url().await);
    let job = api.submit_yaml(COSTLY).await;
    let roles = [&api_role, &scheduler];
    let m = next(
        &mut rx.slack,
        Duration::from_secs(30),
        "Slack message",
        &roles,
    )
    .await
    .json();
    let id = approval_id(&m);
    assert!(
        m["blocks"][2]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["text"]
                .as_str()
                .unwrap()
                .starts_with("*Expires*\n<!date^")),
        "{m}"
    );
    next(
        &mut rx.hook,
        Duration::from_secs(10),
        "approval.requested",
        &roles,
    )
    .await;

    // Nobody decides: the job ends cancelled with the reason, and both sinks hear it.
    let ended = api
        .wait_job(
            &job,
            Duration::from_secs(30),
            |j| j["status"] == "cancelled",
            || scheduler.log(),
        )
        .await;
    assert_eq!(
        ended["reason"],
        format!("approval {id} expired after 3s, nobody decided"),
        "{ended}"
    );
    let outcome = next(
        &mut rx.slack,
        Duration::from_secs(10),
        "expiry message",
        &roles,
    )
    .await
    .json();
    assert!(
        outcome["text"]
            .as_str()
            .unwrap()
            .contains("expired after 3s"),
        "{outcome}"
    );
    let hook = next(
        &mut rx.hook,
        Duration::from_secs(10),
        "approval.expired",
        &roles,
    )
    .await;
    assert!(webhook_signed(&hook));
    let h = hook.json();
    assert_eq!(
        (h["type"].as_str(), h["approval"]["status"].as_str()),
        (Some("approval.expired"), Some("expired"))
    );

    // A late click is answered, not applied; the REST API says 409.
    let body = click(
        &format!("trawl_approve:{id}"),
        ("U0E2EALICE", "alice"),
        &format!("{}/respond", rx.base),
    );
    assert_eq!(signed(&api, &body).await.0, 200);
    let reply = next(&mut rx.respond, Duration::from_secs(10), "reply", &roles)
        .await
        .json();
    assert_eq!(reply["response_type"], "ephemeral");
    assert!(
        reply["text"].as_str().unwrap().contains("expired"),
        "{reply}"
    );
    let res = d
        .admin_client(&api.base)
        .req(Method::POST, &format!("/v1/approvals/{id}/approve"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 409);
    let problem: Value = res.json().await.unwrap();
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("expired after 3s"),
        "{problem}"
    );
    assert_eq!(approval(&api, id).await["status"], "expired");
    assert_eq!(api.job(&job).await["status"], "cancelled");
    assert!(api_role.stop(Duration::from_secs(15)).await.success());
}

/// Runs `tests/upstreams/slack_signatures.py` (slack_sdk's `SignatureVerifier`)
/// over `cases`.
fn slack_sdk(cases: &Value) -> Vec<Value> {
    let python = upstreams().join(".venv/bin/python");
    let mut child = Command::new(&python)
        .arg(upstreams().join("slack_signatures.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{} runs ({e}); see README for the test prerequisites",
                python.display()
            )
        });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(cases.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "slack_signatures.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn slack_sdk_and_trawl_agree_on_request_signatures() {
    let payload = json!({"type": "block_actions", "user": {"id": "U1", "username": "zoë"}, "actions": [{"action_id": "trawl_approve:12", "value": "12"}]});
    let form = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish();
    let inputs = [
        (
            "8f742231b10e8888abcd99yyyzzz85a5",
            1_531_420_618_i64,
            "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&user_name=roadrunner&command=%2Fwebhook-collect&text=",
        ),
        ("e2e-signing-secret-5f1c0a", 1_700_000_000, form.as_str()),
        ("s", 1_234_567_890, ""),
        (
            "ünïcödé secret",
            2_000_000_000,
            "payload=%7B%22a%22%3A%22%E2%9C%93%22%7D&x=\u{e9}",
        ),
    ];
    let cases: Vec<Value> = inputs
        .iter()
        .map(|(secret, ts, body)| {
            json!({"secret": secret, "timestamp": ts, "body": body,
                   "signature": sign_slack(secret.as_bytes(), *ts, body.as_bytes())})
        })
        .collect();
    let answers = slack_sdk(&Value::Array(cases.clone()));
    assert_eq!(answers.len(), inputs.len());
    for ((case, (secret, ts, body)), a) in cases.iter().zip(inputs).zip(&answers) {
        // trawl signs as slack_sdk does, and slack_sdk accepts trawl's signature...
        assert_eq!(a["generated"], case["signature"], "{case}");
        assert_eq!(a["accepts_trawl"], true, "{case}");
        // ...and refuses it for anything altered, as trawl does.
        for k in [
            "accepts_altered_body",
            "accepts_other_timestamp",
            "accepts_other_secret",
            "accepts_at_301s",
        ] {
            assert_eq!(a[k], false, "{k}: {case}");
        }
        assert_eq!(a["accepts_at_300s"], true, "{case}");
        // trawl accepts what slack_sdk generated, within the same window...
        let theirs = a["generated"].as_str().unwrap();
        let ts_s = ts.to_string();
        let verify = |b: &[u8], t: &str, now: i64, key: &[u8]| {
            verify_slack(key, Some(t.as_bytes()), Some(theirs.as_bytes()), b, now)
        };
        assert_eq!(
            verify(body.as_bytes(), &ts_s, ts, secret.as_bytes()),
            Ok(())
        );
        assert_eq!(
            verify(body.as_bytes(), &ts_s, ts + 300, secret.as_bytes()),
            Ok(())
        );
        // ...and refuses it altered, stale or under another secret, as slack_sdk does.
        let mut longer = body.as_bytes().to_vec();
        longer.push(b'x');
        assert_eq!(
            verify(&longer, &ts_s, ts, secret.as_bytes()),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(
                body.as_bytes(),
                &(ts + 1).to_string(),
                ts,
                secret.as_bytes()
            ),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(body.as_bytes(), &ts_s, ts, b"another"),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(body.as_bytes(), &ts_s, ts + 301, secret.as_bytes()),
            Err(SignatureError::Stale(301))
        );
    }
}

#[test]
fn bad_approval_settings_stop_a_role_at_start_with_the_reason() {
    for (env, why) in [
        (
            vec![(
                "TRAWL_SLACK_WEBHOOK_URL",
                "http://hooks.slack.com/services/T/B/x",
            )],
            "TRAWL_SLACK_WEBHOOK_URL: use https",
        ),
        (
            vec![("TRAWL_SLACK_WEBHOOK_URL", "hooks.slack.com/services/T/B/x")],
            "TRAWL_SLACK_WEBHOOK_URL: not a URL",
        ),
        (
            vec![("TRAWL_WEBHOOK_URL", "https://hooks.example.com/trawl")],
            "TRAWL_WEBHOOK_URL is set without TRAWL_WEBHOOK_SECRET",
        ),
        (
            vec![("TRAWL_WEBHOOK_SECRET", "x")],
            "TRAWL_WEBHOOK_SECRET is set without TRAWL_WEBHOOK_URL",
        ),
        (vec![("TRAWL_PUBLIC_URL", "ftp://x")], "TRAWL_PUBLIC_URL"),
        (
            vec![("TRAWL_SLACK_RESPONSE_HOSTS", "https://127.0.0.1/")],
            "TRAWL_SLACK_RESPONSE_HOSTS",
        ),
        (vec![("TRAWL_APPROVAL_TTL", "soon")], "approval-ttl"),
    ] {
        let out = Command::new(BIN)
            .arg("scheduler")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            // Nothing listens here: a role that got past its settings would fail
            // differently (and later).
            .env("TRAWL_DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{env:?}");
        assert!(stderr.contains(why), "{env:?}: {stderr}");
        assert!(
            !stderr.contains("Postgres"),
            "refused before connecting: {stderr}"
        );
    }
}
