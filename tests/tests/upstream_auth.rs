//! trawl's own credentials for protected upstream MCP servers: no caller's token
//! ever goes upstream.
//!
//! The protected upstream is another trawl (`trawl dev` with OAuth on: its `/mcp`
//! accepts only tokens minted for its own resource URI); the authorization server
//! is `oidc-provider` (npm); the gateway is a second `trawl dev` whose tools file
//! names the upstream with `auth: client_credentials` or `auth: login`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use trawl_sim::SimConfig;
use trawl_tests::{AuthServer, Deployment, Role, free_port, node_client, wait_for_port};

const BIN: &str = env!("CARGO_BIN_EXE_trawl-e2e");

/// The authorization server for `resources` (each with the lifetime of its
/// access tokens, in seconds), with a service account `gateway` (trawl's own), a
/// `caller` and a public client `app` for `trawl login`.
fn auth_server(resources: &[(&str, u64)], advertise_s256: bool) -> AuthServer {
    let scopes = ["research:read", "research:write", "tools:call"];
    AuthServer::start(json!({
        "resources": resources.iter()
            .map(|(r, ttl)| json!({"uri": r, "scopes": scopes, "ttl_seconds": ttl}))
            .collect::<Vec<_>>(),
        "clients": [
            {"client_id": "gateway", "client_secret": "gateway-secret",
             "grant_types": ["client_credentials"], "scope": "research:read tools:call"},
            {"client_id": "caller", "client_secret": "caller-secret",
             "grant_types": ["client_credentials"], "scope": "research:read research:write tools:call"},
            {"client_id": "app", "token_endpoint_auth_method": "none", "application_type": "native",
             "grant_types": ["authorization_code", "refresh_token"],
             "redirect_uris": ["http://127.0.0.1/callback"], "scope": "research:read tools:call"},
        ],
        "auto_approve_user": "alice",
        "advertise_s256": advertise_s256,
    }))
}

/// `trawl dev` on `port` with OAuth for `http://127.0.0.1:{port}/mcp`.
async fn trawl_dev(port: u16, issuer: &str, extra: &[(&str, &str)]) -> (Role, Deployment) {
    trawl_brightdata::ensure_crypto_provider();
    let mut dep = Deployment::new(BIN, SimConfig::default())
        .await
        .with_env("TRAWL_LISTEN", &format!("127.0.0.1:{port}"))
        .with_env(
            "TRAWL_RESOURCE_URI",
            &format!("http://127.0.0.1:{port}/mcp"),
        )
        .with_env("TRAWL_OAUTH_ISSUER", issuer);
    for (k, v) in extra {
        dep = dep.with_env(k, v);
    }
    let mut role = dep.spawn("dev", "dev");
    role.api_url().await;
    wait_for_port(port, Duration::from_secs(10)).await;
    (role, dep)
}

/// `trawl tools list --json` with this tools file and state folder.
/// `trawl tools list --refresh`: every server is listed now (reached with its
/// credential), not answered from its stored listing.
fn tools_list(config: &Path, state: &Path) -> (bool, Value, String) {
    let out = Command::new(BIN)
        .args(["tools", "list", "--refresh", "--json", "--config"])
        .arg(config)
        .arg("--state")
        .arg(state)
        .env_remove("TRAWL_SECRET_KEY")
        .env_remove("TRAWL_CREDENTIALS_DIR")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.success(), v, stderr)
}

/// The tool names of a `trawl tools list --json` listing, or of a client's
/// `tools` array.
fn names(listing: &Value) -> Vec<String> {
    let tools = listing
        .as_array()
        .or_else(|| listing["tools"].as_array())
        .cloned()
        .unwrap_or_default();
    tools
        .iter()
        .filter_map(|t| {
            t["name"]
                .as_str()
                .or_else(|| t["tool"]["name"].as_str())
                .map(str::to_owned)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_calls_a_protected_upstream_with_its_own_token() {
    let (inner_port, front_port) = (free_port(), free_port());
    let inner = format!("http://127.0.0.1:{inner_port}/mcp");
    let front = format!("http://127.0.0.1:{front_port}/mcp");
    // The gateway's tokens for the upstream live 2 s, so they must be renewed
    // while the test runs; the caller's live an hour.
    let auth = auth_server(&[(&inner, 2), (&front, 3600)], true);
    let (_inner_role, _inner_dep) = trawl_dev(inner_port, &auth.issuer, &[]).await;

    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools.yaml");
    std::fs::write(
        &tools,
        format!(
            "servers:\n  inner:\n    url: {inner}\n    auth:\n      client_credentials:\n        \
             client_id: gateway\n        client_secret_env: INNER_SECRET\n        \
             scopes: [research:read, tools:call]\n"
        ),
    )
    .unwrap();
    let (front_role, _front_dep) = trawl_dev(
        front_port,
        &auth.issuer,
        &[
            ("TRAWL_TOOLS_CONFIG", tools.to_str().unwrap()),
            ("INNER_SECRET", "gateway-secret"),
        ],
    )
    .await;

    // The caller's token is for the gateway alone: the upstream refuses it.
    let caller = auth
        .token("caller", &front, "research:read research:write tools:call")
        .await;
    let res = reqwest::Client::new()
        .post(&inner)
        .bearer_auth(&caller)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);

    // Through the gateway, the same caller reaches the upstream's tools: the
    // gateway used a token of its own, minted for the upstream.
    let (code, out, err) = node_client(&front, Some(&caller), &["list"]);
    assert_eq!(code, 0, "{err}\n{}", front_role.log());
    let listed: Value = serde_json::from_str(out.trim()).unwrap();
    let listed = names(&listed["tools"]);
    assert!(
        listed.contains(&"inner.tool_search".to_owned()),
        "{listed:?}\n{}",
        front_role.log()
    );
    let call_inner = || {
        node_client(
            &front,
            Some(&caller),
            &[
                "call",
                "inner.tool_search",
                r#"{"query": "search the web", "limit": 1}"#,
            ],
        )
    };
    let (code, out, err) = call_inner();
    assert_eq!(code, 0, "{err}\n{out}\n{}", front_role.log());
    // The inner trawl's own answer (its /mcp offers no built-in tool to find,
    // and lists no upstream of its own: an empty list, not an error).
    let answer: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(answer["isError"], false, "{out}");
    assert!(answer["structuredContent"]["tools"].is_array(), "{out}");

    // The gateway's token is renewed before it expires (half its 2 s life
    // early): calls go on succeeding while the authorization server issues the
    // gateway new tokens. An expired token would be refused by the upstream.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let issued = auth.grants("gateway").await;
        assert!(
            issued.iter().all(|g| g == "client_credentials"),
            "{issued:?}"
        );
        if issued.len() >= 3 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no renewal: {issued:?}\n{}",
            front_role.log()
        );
        let (code, out, err) = call_inner();
        assert_eq!(
            code,
            0,
            "a call while renewing: {err}\n{out}\n{}",
            front_role.log()
        );
    }
    // The caller's one token is the test's own: every renewal was the gateway's
    // grant, and the upstream refuses the caller's token anyway (above).
    assert_eq!(auth.grants("caller").await.len(), 1);

    // Without its credential, the gateway cannot reach the upstream at all.
    let bare = dir.path().join("bare.yaml");
    std::fs::write(&bare, format!("servers:\n  inner:\n    url: {inner}\n")).unwrap();
    let (_, listing, stderr) = tools_list(&bare, &dir.path().join("state-bare"));
    assert!(
        !names(&listing).iter().any(|n| n.starts_with("inner.")),
        "{listing}"
    );
    assert!(stderr.contains("inner"), "{stderr}");
    // A wrong secret is named as the reason.
    let (_, _, stderr) = {
        let out = Command::new(BIN)
            .args(["tools", "list", "--config"])
            .arg(&tools)
            .arg("--state")
            .arg(dir.path().join("state-wrong"))
            .env("INNER_SECRET", "not-the-secret")
            .output()
            .unwrap();
        (
            out.status.success(),
            (),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert!(stderr.contains("no credential"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trawl_login_gets_a_grant_with_pkce_and_seals_it() {
    let inner_port = free_port();
    let inner = format!("http://127.0.0.1:{inner_port}/mcp");
    // Access tokens live 2 s: the stored grant must be refreshed as it is used.
    let auth = auth_server(&[(&inner, 2)], true);
    let (_inner_role, _inner_dep) = trawl_dev(inner_port, &auth.issuer, &[]).await;

    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let tools = dir.path().join("tools.yaml");
    std::fs::write(
        &tools,
        format!(
            "servers:\n  inner:\n    url: {inner}\n    auth:\n      login:\n        \
             client_id: app\n        scopes: [research:read, tools:call]\n"
        ),
    )
    .unwrap();

    // Before the login, the server cannot be reached and says why.
    let (_, listing, stderr) = tools_list(&tools, &state);
    assert!(
        !names(&listing).iter().any(|n| n.starts_with("inner.")),
        "{listing}"
    );
    assert!(stderr.contains("trawl login inner"), "{stderr}");

    let mut login = Command::new(BIN)
        .args(["login", "inner", "--config"])
        .arg(&tools)
        .arg("--state")
        .arg(&state)
        .env_remove("TRAWL_SECRET_KEY")
        .env_remove("TRAWL_CREDENTIALS_DIR")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(login.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("trawl login prints a URL").unwrap();
        if let Some(u) = line.trim().strip_prefix("http") {
            break format!("http{u}");
        }
    };
    // The authorization request asks for PKCE S256 and names the resource.
    let parsed = url::Url::parse(&url).unwrap();
    let q: std::collections::HashMap<String, String> = parsed.query_pairs().into_owned().collect();
    assert_eq!(
        q.get("code_challenge_method").map(String::as_str),
        Some("S256"),
        "{url}"
    );
    assert_eq!(q.get("resource"), Some(&inner), "{url}");
    // The browser: follows the redirects to trawl's loopback callback.
    let res = reqwest::Client::new().get(&url).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(res.text().await.unwrap().contains("login complete"));
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = login.wait().unwrap();
    assert!(status.success(), "{rest:?}");

    // The grant is sealed: no token in clear on disk.
    let sealed = std::fs::read(state.join("credentials/inner.sealed")).unwrap();
    assert!(!sealed.windows(3).any(|w| w == b"eyJ"), "a JWT in clear");
    assert!(!sealed.windows(13).any(|w| w == b"refresh_token"));

    // Now the server is reached with the stored grant, and keeps being reached
    // as its access tokens near their end: each `trawl tools list` refreshes the
    // grant when under half of the token's life is left and seals what it got.
    // The authorization server rotates refresh tokens and revokes the grant if a
    // used one comes back, so two refreshes in a row prove each new refresh
    // token was stored.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut seals = vec![sealed];
    loop {
        let (ok, listing, stderr) = tools_list(&tools, &state);
        assert!(ok, "{stderr}");
        assert!(
            names(&listing).contains(&"inner.tool_search".to_owned()),
            "{listing}\n{stderr}"
        );
        let now_sealed = std::fs::read(state.join("credentials/inner.sealed")).unwrap();
        if seals.last() != Some(&now_sealed) {
            seals.push(now_sealed);
        }
        let issued = auth.grants("app").await;
        if issued.iter().filter(|g| *g == "refresh_token").count() >= 2 {
            assert_eq!(issued[0], "authorization_code", "{issued:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no refresh: {issued:?}\n{stderr}"
        );
    }
    assert!(seals.len() >= 3, "the refreshed grant was not sealed again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authorization_server_without_s256_is_refused() {
    let inner_port = free_port();
    let inner = format!("http://127.0.0.1:{inner_port}/mcp");
    let auth = auth_server(&[(&inner, 3600)], false);
    let (_inner_role, _inner_dep) = trawl_dev(inner_port, &auth.issuer, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools.yaml");
    std::fs::write(
        &tools,
        format!(
            "servers:\n  inner:\n    url: {inner}\n    auth:\n      login: {{client_id: app}}\n"
        ),
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["login", "inner", "--config"])
        .arg(&tools)
        .arg("--state")
        .arg(dir.path().join("state"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("S256"), "{stderr}");
    assert!(!dir.path().join("state/credentials/inner.sealed").exists());
}
