//! Schemathesis (pinned in `tests/upstreams/requirements.txt`, installed in
//! `tests/upstreams/.venv` by `.ci/run`) against the API as served: it reads
//! `/openapi.json` and sends what the document allows and what it forbids, with
//! every check it has, and the test passes only if it finds nothing.
//!
//! The API runs in this process over the embedded adapters (an in-memory SQLite
//! store), on a loopback port of its own, with an admin key.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Stdio;

use secrecy::SecretString;
use tokio_util::sync::CancellationToken;
use trawl_api::testing::EmbeddedApi;
use trawl_api::{ApiKey, Auth, RateLimit, RateLimits, router, serve};

const KEY: &str = "schemathesis-key-0123456789";

/// The seed of every run, so a failure can be run again as it was.
const SEED: &str = "20260728";

/// Test cases per operation and phase: enough to reach every response, few
/// enough for a couple of minutes on two cores.
const MAX_EXAMPLES: &str = "40";

fn upstreams() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/upstreams")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing_wrong_with_the_api_or_its_document() {
    let bin = upstreams().join(".venv/bin/schemathesis");
    assert!(
        bin.exists(),
        "schemathesis is not installed at {}: create the venv as .ci/run does \
         (python3 -m venv tests/upstreams/.venv && tests/upstreams/.venv/bin/pip install \
         -r tests/upstreams/requirements.txt)",
        bin.display()
    );

    let api = EmbeddedApi::new(Auth::Keys(vec![
        ApiKey::from(SecretString::from(KEY)).admin(),
    ]))
    .await
    .unwrap();
    let state = api
        .state
        .clone()
        // Submissions at schemathesis's pace: at the default rate most would be
        // 429 and the checks of the spec behind it would go untested.
        .with_rate_limits(RateLimits::default().with_jobs(RateLimit::per_second(100_000, 100_000)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(serve(listener, router(state), shutdown.clone()));

    let out = tokio::process::Command::new(&bin)
        .arg("--config-file")
        .arg(upstreams().join("schemathesis.toml"))
        .args([
            "run",
            &format!("http://{addr}/openapi.json"),
            "--checks",
            "all",
            "--mode",
            "all",
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--seed",
            SEED,
            "--max-examples",
            MAX_EXAMPLES,
            // One worker: the order of the cases is then the seed's alone, and
            // CPython 3.11's `ast.parse` (Hypothesis calls it to describe a
            // strategy) is not safe in two threads at once ("AST constructor
            // recursion depth mismatch", CPython gh-106905: a runtime error
            // of the run).
            "--workers",
            "1",
            "--header",
            &format!("Authorization: Bearer {KEY}"),
            "--no-shrink",
        ])
        .arg("--report-dir")
        .arg(api.dir.path().join("report"))
        .env("NO_COLOR", "1")
        .env("SCHEMATHESIS_TELEMETRY", "false")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    shutdown.cancel();
    server.await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "schemathesis found problems ({}):\n{stdout}\n{stderr}",
        out.status
    );
    println!("{stdout}");
}
