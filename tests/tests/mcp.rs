//! `/mcp` and the OAuth resource server against real outside components:
//!
//! - the authorization server is `oidc-provider` (npm, `tests/upstreams/oauth-server.mjs`),
//!   issuing RFC 9068 JWT access tokens by client credentials with RFC 8707
//!   resource indicators, for trawl's resource and for another one;
//! - the MCP clients are the official TypeScript SDK (`tests/upstreams/mcp-client.mjs`)
//!   and the official Python SDK v2 (`tests/upstreams/mcp_client.py`, in
//!   `tests/upstreams/.venv`).
//!
//! trawl runs as `trawl dev` (API, scheduler and worker in one process, with the
//! Bright Data simulator) on a port chosen before it starts, because its canonical
//! resource URI, which tokens must name, contains the port.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::StatusCode;
use serde_json::{Value, json};
use trawl_sim::SimConfig;
use trawl_tests::{Deployment, Role, free_port, terminate, wait_for_port};

const BIN: &str = env!("CARGO_BIN_EXE_trawl-e2e");

fn upstreams() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("upstreams")
}

/// The `oidc-provider` fixture, stopped (SIGTERM) when dropped.
struct AuthServer {
    child: Child,
    issuer: String,
    dir: tempfile::TempDir,
    http: reqwest::Client,
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        terminate(&self.child);
        let _ = self.child.wait();
    }
}

impl AuthServer {
    /// An authorization server for `resource` (every trawl scope) and `other`
    /// (its own scope), with a client `svc` that may have everything and a
    /// client `reader` that may only read.
    fn start(resource: &str, other: &str) -> AuthServer {
        let dir = tempfile::tempdir().unwrap();
        let config = json!({
            "port": 0,
            "resources": [
                {"uri": resource, "scopes": ["research:read", "research:write", "tools:call"]},
                {"uri": other, "scopes": ["other:read"]},
            ],
            "clients": [
                {"client_id": "svc", "client_secret": "svc-secret", "grant_types": ["client_credentials"],
                 "scope": "research:read research:write tools:call other:read"},
                {"client_id": "reader", "client_secret": "reader-secret", "grant_types": ["client_credentials"],
                 "scope": "research:read"},
            ],
            "key_file": dir.path().join("signing.jwk"),
            "key_pem_file": dir.path().join("signing.pem"),
        });
        let path = dir.path().join("config.json");
        std::fs::write(&path, config.to_string()).unwrap();
        let mut child = Command::new("node")
            .arg(upstreams().join("oauth-server.mjs"))
            .arg(&path)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node runs the authorization server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let ready: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("authorization server did not start ({e}): {line:?}"));
        trawl_brightdata::ensure_crypto_provider();
        AuthServer {
            child,
            issuer: ready["issuer"].as_str().unwrap().to_owned(),
            dir,
            http: reqwest::Client::new(),
        }
    }

    /// A client-credentials access token for `resource`.
    async fn token(&self, client: &str, resource: &str, scope: &str) -> String {
        let body: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "client_credentials")
            .append_pair("resource", resource)
            .append_pair("scope", scope)
            .finish();
        let res = self
            .http
            .post(format!("{}/token", self.issuer))
            .basic_auth(client, Some(format!("{client}-secret")))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = res.status();
        let v: Value = res.json().await.unwrap();
        assert_eq!(status, StatusCode::OK, "token request refused: {v}");
        v["access_token"].as_str().unwrap().to_owned()
    }

    /// The authorization server's own signing key and its `kid`.
    fn signing_key(&self) -> (jsonwebtoken::EncodingKey, String) {
        let pem = std::fs::read(self.dir.path().join("signing.pem")).unwrap();
        let jwk: Value =
            serde_json::from_slice(&std::fs::read(self.dir.path().join("signing.jwk")).unwrap())
                .unwrap();
        (
            jsonwebtoken::EncodingKey::from_rsa_pem(&pem).unwrap(),
            jwk["kid"].as_str().unwrap().to_owned(),
        )
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A token signed by `key` with `kid` and these claims.
fn mint(key: &jsonwebtoken::EncodingKey, kid: &str, claims: &Value) -> String {
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some(kid.to_owned());
    header.typ = Some("at+jwt".to_owned());
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

/// An RSA key no authorization server knows (generated by node's crypto).
fn rogue_key() -> jsonwebtoken::EncodingKey {
    let out = Command::new("node")
        .args([
            "-e",
            "const {generateKeyPairSync} = require('node:crypto');\
             process.stdout.write(generateKeyPairSync('rsa', {modulusLength: 2048})\
             .privateKey.export({type: 'pkcs8', format: 'pem'}))",
        ])
        .output()
        .unwrap();
    jsonwebtoken::EncodingKey::from_rsa_pem(&out.stdout).unwrap()
}

fn b64(v: &Value) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
}

/// `trawl dev` with OAuth on, on a port fixed before it starts.
struct Trawl {
    role: Role,
    base: String,
    resource: String,
    _dep: Deployment,
}

async fn trawl_with_oauth(issuer: Option<&str>, port: u16) -> Trawl {
    let base = format!("http://127.0.0.1:{port}");
    let resource = format!("{base}/mcp");
    let mut dep = Deployment::new(BIN, SimConfig::default())
        .await
        .with_env("TRAWL_LISTEN", &format!("127.0.0.1:{port}"));
    if let Some(issuer) = issuer {
        dep = dep
            .with_env("TRAWL_RESOURCE_URI", &resource)
            .with_env("TRAWL_OAUTH_ISSUER", issuer);
    } else {
        dep = dep.with_env("TRAWL_API_KEYS", "");
    }
    let mut role = dep.spawn("dev", "dev");
    role.api_url().await;
    wait_for_port(port, Duration::from_secs(10)).await;
    Trawl {
        role,
        base,
        resource,
        _dep: dep,
    }
}

/// What a request to `/mcp` looks like from a well-behaved client.
fn mcp_post(http: &reqwest::Client, t: &Trawl, token: Option<&str>) -> reqwest::RequestBuilder {
    let r = http
        .post(format!("{}/mcp", t.base))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    match token {
        Some(tok) => r.bearer_auth(tok),
        None => r,
    }
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "trawl-tests", "version": "1"}}})
}

fn challenge(res: &reqwest::Response) -> String {
    res.headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// Runs a client script; returns (exit code, stdout, stderr).
fn node_client(url: &str, token: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new("node");
    cmd.arg(upstreams().join("mcp-client.mjs"))
        .args(args)
        .env("MCP_URL", url);
    if let Some(t) = token {
        cmd.env("MCP_TOKEN", t);
    }
    let out = cmd.output().expect("node runs the MCP client");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn python_client(url: &str, token: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let python = upstreams().join(".venv/bin/python");
    assert!(
        python.exists(),
        "the Python SDK's venv is missing: python3 -m venv tests/upstreams/.venv && \
         tests/upstreams/.venv/bin/pip install -r tests/upstreams/requirements.txt"
    );
    let mut cmd = Command::new(python);
    cmd.arg(upstreams().join("mcp_client.py"))
        .args(args)
        .env("MCP_URL", url);
    if let Some(t) = token {
        cmd.env("MCP_TOKEN", t);
    }
    let out = cmd.output().expect("python runs the MCP client");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_for_trawl_pass_and_every_other_token_is_refused() {
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let other = "http://127.0.0.1:1/other";
    let auth = AuthServer::start(&resource, other);
    let t = trawl_with_oauth(Some(&auth.issuer), port).await;
    let http = reqwest::Client::new();
    let metadata_url = format!("{}/.well-known/oauth-protected-resource/mcp", t.base);

    // RFC 9728 metadata, at the path-inserted form and the root.
    for url in [
        metadata_url.clone(),
        format!("{}/.well-known/oauth-protected-resource", t.base),
    ] {
        let m: Value = http.get(&url).send().await.unwrap().json().await.unwrap();
        assert_eq!(m["resource"], json!(t.resource), "{url}");
        assert_eq!(m["authorization_servers"], json!([auth.issuer]), "{url}");
        assert_eq!(
            m["scopes_supported"],
            json!(["research:read", "research:write", "tools:call"])
        );
    }

    // No token: 401 pointing at the metadata, on the REST API and on /mcp.
    let res = http
        .get(format!("{}/v1/approvals", t.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    let c = challenge(&res);
    assert!(c.starts_with("Bearer "), "{c}");
    assert!(
        c.contains(&format!("resource_metadata=\"{metadata_url}\"")),
        "{c}"
    );
    let res = mcp_post(&http, &t, None)
        .body(initialize().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    assert!(challenge(&res).contains("resource_metadata="));

    // A token for trawl passes.
    let good = auth
        .token("svc", &resource, "research:read research:write tools:call")
        .await;
    let res = http
        .get(format!("{}/v1/approvals", t.base))
        .bearer_auth(&good)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK, "{}", t.role.log());
    let res = mcp_post(&http, &t, Some(&good))
        .body(initialize().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let session = res.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    // A session id is not a credential: another caller's valid token naming this
    // session finds no such session, and no token at all is refused.
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}).to_string();
    let other_caller = auth.token("reader", &resource, "research:read").await;
    let res = mcp_post(&http, &t, Some(&other_caller))
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .body(ping.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    let res = mcp_post(&http, &t, None)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .body(ping.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    let res = mcp_post(&http, &t, Some(&good))
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .body(ping)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);

    // Every other token is refused with 401 and `invalid_token`, saying why.
    let (key, kid) = auth.signing_key();
    let claims = |aud: &str, exp: u64| {
        json!({"iss": auth.issuer, "aud": aud, "sub": "svc", "client_id": "svc",
               "scope": "research:read research:write tools:call", "iat": now(), "exp": exp})
    };
    let for_other = auth.token("svc", other, "other:read").await;
    let expired = mint(&key, &kid, &claims(&resource, now() - 3600));
    let rogue = rogue_key();
    let unknown_kid = mint(&rogue, "rogue-key", &claims(&resource, now() + 600));
    let wrong_key_same_kid = mint(&rogue, &kid, &claims(&resource, now() + 600));
    let other_issuer = mint(
        &key,
        &kid,
        &json!({"iss": "http://127.0.0.1:9/", "aud": resource, "sub": "svc", "exp": now() + 600}),
    );
    let none = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT"})),
        b64(&claims(&resource, now() + 600))
    );
    // The HMAC confusion: the public key used as a shared secret.
    let jwk: Value =
        serde_json::from_slice(&std::fs::read(auth.dir.path().join("signing.jwk")).unwrap())
            .unwrap();
    let mut hs_header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    hs_header.kid = Some(kid.clone());
    let hs256 = jsonwebtoken::encode(
        &hs_header,
        &claims(&resource, now() + 600),
        &jsonwebtoken::EncodingKey::from_secret(jwk["n"].as_str().unwrap().as_bytes()).unwrap(),
    )
    .unwrap();
    for (what, token, why) in [
        (
            "a token for another resource",
            for_other.as_str(),
            "another resource",
        ),
        ("an expired token", &expired, "expired"),
        (
            "a token of an unknown key",
            &unknown_kid,
            "does not publish",
        ),
        ("a token of another key", &wrong_key_same_kid, "signature"),
        ("a token of another issuer", &other_issuer, "another issuer"),
        ("an alg none token", &none, "none"),
        ("an HS256 token", &hs256, "HS256"),
        ("garbage", "not-a-token-at-all.x.y", "not a well-formed"),
    ] {
        for (route, res) in [
            (
                "REST",
                http.get(format!("{}/v1/approvals", t.base))
                    .bearer_auth(token)
                    .send()
                    .await
                    .unwrap(),
            ),
            (
                "/mcp",
                mcp_post(&http, &t, Some(token))
                    .body(initialize().to_string())
                    .send()
                    .await
                    .unwrap(),
            ),
        ] {
            assert_eq!(res.status(), StatusCode::UNAUTHORIZED, "{what} on {route}");
            let c = challenge(&res);
            assert!(c.contains("error=\"invalid_token\""), "{what}: {c}");
            assert!(c.contains(why), "{what}: {c}");
            assert!(c.contains("resource_metadata="), "{what}: {c}");
        }
    }
    // Not a bearer credential at all.
    let res = http
        .get(format!("{}/v1/approvals", t.base))
        .header("authorization", "Basic c3ZjOnN2Yy1zZWNyZXQ=")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);

    // A token in the query string is refused even when it is valid.
    let res = http
        .get(format!("{}/v1/approvals?access_token={good}", t.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    assert!(challenge(&res).contains("invalid_request"));

    // A token without the scope: 403 naming the scope (step-up), REST and /mcp.
    let reader = auth.token("reader", &resource, "research:read").await;
    let res = http
        .get(format!("{}/v1/approvals", t.base))
        .bearer_auth(&reader)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let res = http
        .post(format!("{}/v1/jobs", t.base))
        .bearer_auth(&reader)
        .header("content-type", "application/json")
        .body(r#"{"name":"x","pages":{"urls":["https://shop.example/p/1"],"geos":["us"]}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    let c = challenge(&res);
    assert!(c.contains("error=\"insufficient_scope\""), "{c}");
    assert!(c.contains("scope=\"research:write\""), "{c}");
    assert!(c.contains("resource_metadata="), "{c}");
    let (code, _, err) = node_client(
        &t.resource,
        Some(&reader),
        &[
            "call",
            "research.submit_job",
            r#"{"spec":{"name":"x","pages":{"urls":["https://shop.example/p/1"],"geos":["us"]}}}"#,
        ],
    );
    assert_eq!(code, 4, "a read-only token submitting over /mcp: {err}");
    assert!(err.contains("insufficient_scope"), "{err}");
    // …while reading works with it.
    let (code, out, err) = node_client(&t.resource, Some(&reader), &["list"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("research.job_status"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_clients_run_a_job_with_a_token() {
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let auth = AuthServer::start(&resource, "http://127.0.0.1:1/other");
    let t = trawl_with_oauth(Some(&auth.issuer), port).await;
    let token = auth
        .token("svc", &resource, "research:read research:write tools:call")
        .await;

    // The TypeScript SDK: list, submit against the simulator, poll, read items.
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.json");
    std::fs::write(
        &spec,
        json!({
            "name": "mcp-e2e",
            "searches": {"queries": ["ultrabook"], "geos": ["us", "de"], "follow_top": 2},
            "extract": {"fields": {
                "name": {"jsonld": "name"},
                "price": {"jsonld": "offers.price", "type": "number"},
                "currency": {"jsonld": "offers.priceCurrency"}}},
            "schema": {"type": "object", "required": ["name", "price", "currency"]},
        })
        .to_string(),
    )
    .unwrap();
    let (code, out, err) = node_client(&t.resource, Some(&token), &["job", spec.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}\n{}", t.role.log());
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["status"], "succeeded", "{v}");
    // 2 searches of 10 organic results (serp items) and 2 followed pages each.
    assert!(v["items"].as_u64().unwrap() >= 20, "{v}");
    for tool in [
        "research.submit_job",
        "research.job_status",
        "research.job_items",
        "research.cancel_job",
        "tool_search",
    ] {
        assert!(v["tools"].as_array().unwrap().contains(&json!(tool)), "{v}");
    }
    // The TS SDK validates structuredContent against each tool's outputSchema,
    // so a mismatch between them would have failed the job command above.
    let (code, out, err) = node_client(&t.resource, Some(&token), &["list"]);
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(out.trim()).unwrap();
    for tool in listed["tools"].as_array().unwrap() {
        assert!(
            !tool["description"].as_str().unwrap_or("").is_empty(),
            "{tool}"
        );
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
    }

    // The Python SDK v2 (which first probes `server/discover`, 2026-07-28).
    let (code, out, err) = python_client(&t.resource, Some(&token), &["list"]);
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(out.trim()).unwrap();
    let version = listed["protocolVersion"].as_str().unwrap();
    assert!(
        ["2026-07-28", "2025-11-25"].contains(&version),
        "negotiated {version}"
    );
    let (code, out, err) = python_client(
        &t.resource,
        Some(&token),
        &[
            "call",
            "tool_search",
            r#"{"query": "fetch a web page", "limit": 2}"#,
        ],
    );
    assert_eq!(code, 0, "{err}");
    let result: Value = serde_json::from_str(out.trim()).unwrap();
    let found = result["structuredContent"]["tools"].as_array().unwrap();
    assert!(!found.is_empty(), "{result}");
    assert!(
        found[0]["name"]
            .as_str()
            .unwrap()
            .starts_with("brightdata."),
        "{result}"
    );
    // Without a token the Python client gets 401.
    let (code, _, err) = python_client(&t.resource, None, &["list"]);
    assert_eq!(code, 3, "{err}");
}

/// The deployed shape serves `/mcp` too: `trawl api` with OAuth, a scheduler and
/// a worker over Postgres, NATS and Redis, driven by the TypeScript SDK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trawl_api_serves_mcp_behind_oauth() {
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let auth = AuthServer::start(&resource, "http://127.0.0.1:1/other");
    let dep = Deployment::new(BIN, SimConfig::default())
        .await
        .with_env("TRAWL_LISTEN", &format!("127.0.0.1:{port}"))
        .with_env("TRAWL_RESOURCE_URI", &resource)
        .with_env("TRAWL_OAUTH_ISSUER", &auth.issuer);
    let mut api = dep.spawn("api", "api");
    let _scheduler = dep.spawn("scheduler", "scheduler");
    let _worker = dep.spawn("worker", "worker");
    api.api_url().await;
    let token = auth
        .token("svc", &resource, "research:read research:write tools:call")
        .await;
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.json");
    std::fs::write(
        &spec,
        json!({"name": "mcp-deployed", "pages": {"urls": ["https://shop.example/p/1", "https://shop.example/p/2"], "geos": ["us"]},
               "extract": {"fields": {"name": {"jsonld": "name"}}},
               "schema": {"type": "object", "required": ["name"]}})
        .to_string(),
    )
    .unwrap();
    let (code, out, err) = node_client(&resource, Some(&token), &["job", spec.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}\n{}", api.log());
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert!(
        ["succeeded", "partial"].contains(&v["status"].as_str().unwrap()),
        "{v}"
    );
    assert!(v["items"].as_u64().unwrap() >= 1, "{v}");
    // Without a token: 401 with the metadata pointer, from the api role too.
    let (code, _, err) = node_client(&resource, None, &["list"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("resource_metadata="), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_the_answer_the_spec_requires() {
    let port = free_port();
    let t = trawl_with_oauth(None, port).await;
    trawl_brightdata::ensure_crypto_provider();
    let http = reqwest::Client::new();
    let post = |body: &str| mcp_post(&http, &t, None).body(body.to_owned());

    let rpc_error = |v: &Value| v["error"]["code"].as_i64();
    // Malformed JSON: 400 with a JSON-RPC parse error (-32700).
    let res = post("{\"jsonrpc\": \"2.0\", ").send().await.unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    assert_eq!(rpc_error(&res.json().await.unwrap()), Some(-32700));
    // Batches are not part of MCP since 2025-06-18: 400, -32600.
    let batch = json!([initialize(), {"jsonrpc": "2.0", "id": 2, "method": "ping"}]).to_string();
    let res = post(&batch).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    assert_eq!(rpc_error(&res.json().await.unwrap()), Some(-32600));
    // JSON that is not JSON-RPC 2.0.
    let res = post(r#"{"method": "ping"}"#).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    assert_eq!(rpc_error(&res.json().await.unwrap()), Some(-32600));
    // A wrong Accept or Content-Type.
    let res = http
        .post(format!("{}/mcp", t.base))
        .header("content-type", "application/json")
        .header("accept", "text/html")
        .body(initialize().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::NOT_ACCEPTABLE);
    let res = http
        .post(format!("{}/mcp", t.base))
        .header("content-type", "text/plain")
        .header("accept", "application/json, text/event-stream")
        .body(initialize().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // A body over the limit (1 MiB).
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"x":"{}"}}}}"#,
        "a".repeat(2 * 1024 * 1024)
    );
    let res = post(&huge).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // An unsupported protocol version: 400.
    let res = post(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string())
        .header("mcp-protocol-version", "1999-01-01")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    // DNS rebinding: a foreign Host, or a foreign Origin, gets 403.
    let res = post(&initialize().to_string())
        .header("host", "evil.example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    let res = post(&initialize().to_string())
        .header("origin", "http://evil.example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    let res = post(&initialize().to_string())
        .header("origin", format!("http://127.0.0.1:{port}"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let session = res.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    // An unknown method gets a JSON-RPC error (-32601), in the session.
    let res = post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string())
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::ACCEPTED);
    let res = post(&json!({"jsonrpc": "2.0", "id": 7, "method": "no/such_method"}).to_string())
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let text = res.text().await.unwrap();
    assert!(text.contains("-32601"), "{text}");
    // An unknown tool: a JSON-RPC error, not a result.
    let res = post(
        &json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                "params": {"name": "nope.nothing", "arguments": {}}})
        .to_string(),
    )
    .header("mcp-session-id", &session)
    .header("mcp-protocol-version", "2025-11-25")
    .send()
    .await
    .unwrap();
    let text = res.text().await.unwrap();
    assert!(text.contains("-32602"), "{text}");
    // A bad job spec: a tool result with isError listing every field error.
    let (code, out, _) = node_client(
        &t.resource,
        None,
        &[
            "call",
            "research.submit_job",
            r#"{"spec":{"name":"bad","pages":{"urls":["not a url"],"geos":["usa"]}}}"#,
        ],
    );
    assert_eq!(code, 1);
    let result: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(result["structuredContent"]["status"], 422, "{result}");
    let errors = result["structuredContent"]["errors"].as_array().unwrap();
    assert!(errors.len() >= 2, "{result}");
    // Still alive after all of it.
    let (code, _, err) = node_client(&t.resource, None, &["list"]);
    assert_eq!(code, 0, "{err}");
}
