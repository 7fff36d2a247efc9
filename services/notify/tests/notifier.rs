//! The notifier against a real (SQLite) store and a Slack and webhook receiver of
//! the test's own on loopback: what is posted, when it is marked sent, what a
//! failing sink costs, and expiry. Each pass is driven by the test (`pass()`), so
//! nothing waits on a timer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use trawl_core::cost::Micros;
use trawl_core::model::{JobId, JobStatus, now_ms};
use trawl_core::ports::{Approval, ApprovalStore, JobRecord, JobStore, PinChange, ToolStore};
use trawl_notify::{Notifier, NotifyConfig, Webhook, verify_webhook};
use trawl_store::SqliteStore;
use url::Url;

/// One request a receiver got.
#[derive(Debug)]
struct Got {
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

impl Got {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

#[derive(Clone)]
struct Receiver {
    tx: mpsc::UnboundedSender<Got>,
    /// Statuses to answer with, in order; 200 once empty.
    answers: Arc<Mutex<VecDeque<u16>>>,
}

async fn receive(
    State(r): State<Receiver>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let _ = r.tx.send(Got {
        path: uri.path().to_owned(),
        headers,
        body,
    });
    let code = r.answers.lock().unwrap().pop_front().unwrap_or(200);
    StatusCode::from_u16(code).unwrap()
}

/// A receiver on a loopback port: `/slack` and `/hook`.
async fn receiver() -> (Url, mpsc::UnboundedReceiver<Got>, Arc<Mutex<VecDeque<u16>>>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let answers = Arc::new(Mutex::new(VecDeque::new()));
    let app = Router::new()
        .route("/slack", post(receive))
        .route("/hook", post(receive))
        .with_state(Receiver {
            tx,
            answers: answers.clone(),
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = Url::parse(&format!("http://{}/", listener.local_addr().unwrap())).unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, rx, answers)
}

/// Everything received so far (the pass that sent it has returned).
fn drain(rx: &mut mpsc::UnboundedReceiver<Got>) -> Vec<Got> {
    let mut out = Vec::new();
    while let Ok(g) = rx.try_recv() {
        out.push(g);
    }
    out
}

const SECRET: &str = "whsec_test";

fn config(base: &Url) -> NotifyConfig {
    NotifyConfig::default()
        .with_slack_webhook(Some(base.join("slack").unwrap()))
        .with_webhook(Some(Webhook {
            url: base.join("hook").unwrap(),
            secret: SECRET.to_owned().into(),
        }))
        .with_timeout(Duration::from_secs(5))
        .with_attempts(2)
}

async fn waiting_job(store: &SqliteStore, n: u64) -> JobId {
    let job = JobRecord {
        id: JobId::generate(1_700_000_000_000, n),
        name: format!("prices-{n}"),
        spec: json!({"name": format!("prices-{n}")}),
        status: JobStatus::AwaitingApproval,
        reason: None,
        estimate: Micros(2_500_000),
        created_ms: 1_700_000_000_000,
        idempotency: None,
        traceparent: None,
        owner: None,
        retention_ms: None,
        slices_max: 0,
        approve_above: None,
    };
    store.create_job(&job, &[]).await.unwrap();
    store
        .request_approval(&Approval {
            job_id: job.id.clone(),
            amount: Micros(2_500_000),
            reason: "estimated cost $2.5000 is above approve_above_usd $1.0000".into(),
            approved: None,
            decided_by: None,
        })
        .await
        .unwrap();
    job.id
}

fn signed_ok(g: &Got) -> bool {
    let ts = g.headers["x-trawl-timestamp"].to_str().unwrap();
    let sig = g.headers["x-trawl-signature"].to_str().unwrap();
    verify_webhook(SECRET.as_bytes(), ts, sig, &g.body, now_ms() / 1000).is_ok()
}

#[tokio::test]
async fn a_request_is_posted_once_to_slack_and_the_signed_webhook_then_its_outcome() {
    let (base, mut rx, _) = receiver().await;
    let store = Arc::new(SqliteStore::memory().await.unwrap());
    let job = waiting_job(&store, 1).await;
    let n = Notifier::new(store.clone(), config(&base)).unwrap();

    let report = n.pass().await.unwrap();
    assert_eq!(report.delivered.len(), 1, "{report:?}");
    let id = report.delivered[0];
    let mut got = drain(&mut rx);
    got.sort_by(|a, b| b.path.cmp(&a.path));
    assert_eq!(
        got.iter().map(|g| g.path.as_str()).collect::<Vec<_>>(),
        ["/slack", "/hook"]
    );

    let slack = got[0].json();
    assert_eq!(got[0].headers["content-type"], "application/json");
    assert!(slack["text"].as_str().unwrap().contains(job.as_str()));
    assert!(slack["text"].as_str().unwrap().contains("prices-1"));
    let blocks = slack["blocks"].as_array().unwrap();
    let actions = blocks.iter().find(|b| b["type"] == "actions").unwrap();
    assert_eq!(
        actions["elements"][0]["action_id"],
        format!("trawl_approve:{id}")
    );
    assert_eq!(
        actions["elements"][1]["action_id"],
        format!("trawl_reject:{id}")
    );
    let fields = blocks[2]["fields"].as_array().unwrap();
    assert!(
        fields.iter().any(|f| f["text"]
            .as_str()
            .unwrap()
            .starts_with("*Expires*\n<!date^")),
        "the TTL's expiry is shown: {fields:?}"
    );

    let hook = got[1].json();
    assert!(signed_ok(&got[1]), "the webhook is signed");
    assert_eq!(hook["type"], "approval.requested");
    assert_eq!(hook["approval"]["id"], id);
    assert_eq!(hook["approval"]["status"], "pending");
    assert_eq!(hook["approval"]["job_id"], job.as_str());
    assert!(hook["approval"]["expires"].is_string());
    assert!(
        hook["event_id"]
            .as_str()
            .unwrap()
            .starts_with(&format!("approval-{id}-requested-"))
    );
    assert!(
        store
            .approval(id)
            .await
            .unwrap()
            .unwrap()
            .notified_ms
            .is_some()
    );

    // Nothing new: nothing posted.
    let report = n.pass().await.unwrap();
    assert!(report.delivered.is_empty() && report.failed.is_empty());
    assert!(drain(&mut rx).is_empty());

    // Decided over the API: the outcome goes to both.
    store
        .decide_approval(&job, true, "key-1234abcd")
        .await
        .unwrap()
        .unwrap();
    let report = n.pass().await.unwrap();
    assert_eq!(report.delivered, vec![id]);
    let mut got = drain(&mut rx);
    got.sort_by(|a, b| b.path.cmp(&a.path));
    assert_eq!(got.len(), 2);
    let outcome = got[0].json();
    assert!(
        outcome["text"]
            .as_str()
            .unwrap()
            .contains("was approved by key-1234abcd"),
        "{outcome}"
    );
    assert!(
        outcome["blocks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["type"] != "actions")
    );
    let hook = got[1].json();
    assert!(signed_ok(&got[1]));
    assert_eq!(
        (hook["type"].as_str(), hook["approval"]["status"].as_str()),
        (Some("approval.decided"), Some("approved"))
    );
    assert!(n.pass().await.unwrap().delivered.is_empty());
    assert!(drain(&mut rx).is_empty());
}

#[tokio::test]
async fn a_failing_sink_loses_nothing_and_is_retried() {
    let (base, mut rx, answers) = receiver().await;
    let store = Arc::new(SqliteStore::memory().await.unwrap());
    waiting_job(&store, 1).await;
    let n = Notifier::new(
        store.clone(),
        config(&base)
            .with_webhook(None)
            .with_every(Duration::from_millis(10)),
    )
    .unwrap();

    // Two 503s: both attempts of this pass fail; the notice is released.
    answers.lock().unwrap().extend([503, 503]);
    let report = n.pass().await.unwrap();
    assert_eq!(
        (report.delivered.len(), report.failed.len()),
        (0, 1),
        "{report:?}"
    );
    assert_eq!(drain(&mut rx).len(), 2, "retried within the pass");
    let id = report.failed[0];
    assert_eq!(store.approval(id).await.unwrap().unwrap().notified_ms, None);

    // The next pass (after `every`) delivers it; a 503 then a 200 is one delivery.
    answers.lock().unwrap().push_back(503);
    let mut report = n.pass().await.unwrap();
    for _ in 0..100 {
        if !report.delivered.is_empty() {
            break;
        }
        // The release time is `every` ahead; the pass before it finds nothing.
        tokio::time::sleep(Duration::from_millis(10)).await;
        report = n.pass().await.unwrap();
    }
    assert_eq!(report.delivered, vec![id]);
    assert_eq!(drain(&mut rx).len(), 2);
    assert!(
        store
            .approval(id)
            .await
            .unwrap()
            .unwrap()
            .notified_ms
            .is_some()
    );

    // A refusal (404: channel gone) is not hammered every pass.
    let job = waiting_job(&store, 2).await;
    answers.lock().unwrap().push_back(404);
    let report = n.pass().await.unwrap();
    assert_eq!(report.failed.len(), 1);
    assert_eq!(
        drain(&mut rx).len(),
        1,
        "a 4xx is not retried within the pass"
    );
    assert!(n.pass().await.unwrap().failed.is_empty(), "nor next pass");
    assert!(drain(&mut rx).is_empty());
    let r = store.approvals(true, 10).await.unwrap();
    assert!(
        r.iter()
            .any(|a| a.job_id.as_ref() == Some(&job) && a.notified_ms.is_none())
    );
}

#[tokio::test]
async fn an_approval_nobody_decides_expires_and_says_so() {
    let (base, mut rx, _) = receiver().await;
    let store = Arc::new(SqliteStore::memory().await.unwrap());
    let job = waiting_job(&store, 1).await;
    // A tool change waiting too.
    store
        .save_pins(&[PinChange::Pin {
            tool: "up.echo".into(),
            server: "up".into(),
            hash: "h1".into(),
            definition: json!({"name": "echo"}),
            by: "first-sight".into(),
        }])
        .await
        .unwrap();
    store
        .save_pins(&[PinChange::Hold {
            tool: "up.echo".into(),
            server: "up".into(),
            kind: "tool_change",
            hash: "h2".into(),
            definition: json!({"name": "echo", "description": "now different"}),
            reason: "up.echo changed since it was pinned (description)".into(),
            detail: json!({"server": "up", "tool": "up.echo", "changes": [{"path": "description"}], "diff": "+ description: \"now different\"\n"}),
        }])
        .await
        .unwrap();
    // Announced by a notifier without a TTL, then seen by one whose TTL (1 ms)
    // is long over: it stamps and expires both in its first pass.
    let n = Notifier::new(store.clone(), config(&base).with_ttl(None)).unwrap();
    let first = n.pass().await.unwrap();
    assert_eq!(first.delivered.len(), 2, "{first:?}");
    let tool_msg = drain(&mut rx)
        .into_iter()
        .filter(|g| g.path == "/slack")
        .map(|g| g.json())
        .find(|m| m["text"].as_str().unwrap().contains("up.echo"))
        .unwrap();
    let code = tool_msg["blocks"][3]["text"]["text"].as_str().unwrap();
    assert!(code.contains("+ description: \"now different\""), "{code}");

    assert!(
        n.pass().await.unwrap().expired.is_empty(),
        "no TTL, no expiry"
    );
    let n = Notifier::new(
        store.clone(),
        config(&base).with_ttl(Some(Duration::from_millis(1))),
    )
    .unwrap();
    let report = n.pass().await.unwrap();
    assert_eq!(report.expired.len(), 2, "{report:?}");
    let j = store.job(&job).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Cancelled);
    let reason = j.reason.unwrap();
    assert!(
        reason.ends_with("expired after 1ms, nobody decided"),
        "{reason}"
    );
    // The outcome went out in the same pass.
    assert_eq!(report.delivered.len(), 2, "{report:?}");
    let got = drain(&mut rx);
    let hooks: Vec<Value> = got
        .iter()
        .filter(|g| g.path == "/hook")
        .map(Got::json)
        .collect();
    assert_eq!(hooks.len(), 2, "{hooks:?}");
    assert!(
        hooks
            .iter()
            .all(|h| h["type"] == "approval.expired" && h["approval"]["status"] == "expired")
    );
    let slack: Vec<Value> = got
        .iter()
        .filter(|g| g.path == "/slack")
        .map(Got::json)
        .collect();
    assert!(
        slack
            .iter()
            .any(|m| m["text"].as_str().unwrap().contains(&reason)),
        "{slack:?}"
    );
    // Nothing decides it now.
    assert_eq!(
        store.decide_approval(&job, true, "late").await.unwrap(),
        None
    );
    let pins = store.tool_pins().await.unwrap();
    assert_eq!(pins[0].status, trawl_core::ports::PinStatus::Quarantined);
}

#[tokio::test]
async fn without_a_sink_approvals_still_expire_and_wait_to_be_announced() {
    let store = Arc::new(SqliteStore::memory().await.unwrap());
    let job = waiting_job(&store, 1).await;
    let n = Notifier::new(store.clone(), NotifyConfig::default()).unwrap();
    let report = n.pass().await.unwrap();
    assert_eq!(report, Default::default());
    let pending = store.approvals(true, 10).await.unwrap();
    assert_eq!(pending.len(), 1);
    // Stamped with the default TTL of 24 h, not claimed by anyone.
    assert_eq!(
        pending[0].expires_ms,
        Some(pending[0].requested_ms + 24 * 3600 * 1000)
    );
    assert_eq!(pending[0].notified_ms, None);
    assert_eq!(
        store.job(&job).await.unwrap().unwrap().status,
        JobStatus::AwaitingApproval
    );
}
