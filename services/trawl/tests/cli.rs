//! The `trawl` binary as a user runs it: exit codes, messages, files.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn trawl(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trawl"))
        .args(args)
        .current_dir(dir)
        .env_remove("BRIGHTDATA_API_TOKEN")
        .env_remove("TRAWL_HOME")
        .env_remove("TRAWL_SIM_FAULTS")
        .env_remove("TRAWL_SIM_LATENCY")
        .output()
        .unwrap()
}

fn example() -> String {
    format!(
        "{}/../../examples/laptop-prices.yaml",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn summary(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn the_example_runs_offline_and_a_second_run_comes_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let o = trawl(dir.path(), &["run", &example(), "--out", "out"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o)
            .contains("BRIGHTDATA_API_TOKEN is not set: using the built-in Bright Data simulator")
    );
    let s = summary(&dir.path().join("out"));
    assert_eq!(s["status"], "succeeded");
    assert_eq!(s["simulator"], true);
    for key in [
        "job_id",
        "slices",
        "items",
        "upstream_calls",
        "cache_hits",
        "cost_usd",
    ] {
        assert!(s.get(key).is_some(), "summary lacks {key}");
    }
    let total = s["slices"]["total"].as_u64().unwrap();
    assert_eq!(s["upstream_calls"].as_u64(), Some(total));
    assert!(
        dir.path().join(".trawl/store.db").exists(),
        "state in .trawl by default"
    );

    std::fs::remove_dir_all(dir.path().join("out")).unwrap();
    let o = trawl(dir.path(), &["run", &example(), "--out", "out"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let s = summary(&dir.path().join("out"));
    assert_eq!(s["upstream_calls"], 0);
    assert_eq!(s["cache_hits"].as_u64(), Some(total));
    for f in ["items.jsonl", "rejections.jsonl", "summary.json"] {
        assert!(
            dir.path().join("out").join(f).exists(),
            "{f} written on a cached run"
        );
    }
}

#[test]
fn a_bad_spec_lists_every_error_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "name: bad\nsearches: {queries: [a], geos: [US, xx], engine: yahoo}\ncache: {max_age: soon}\ncolour: red\n",
    )
    .unwrap();
    let o = trawl(dir.path(), &["run", "bad.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    for path in [
        "searches.geos[0]",
        "searches.geos[1]",
        "searches.engine",
        "cache.max_age",
        "colour",
    ] {
        assert!(
            err.contains(&format!("  {path}: ")),
            "missing {path} in:\n{err}"
        );
    }
    assert!(
        !dir.path().join(".trawl").exists(),
        "nothing stored for a rejected spec"
    );
    assert!(!dir.path().join("out").exists());
}

#[test]
fn approval_parks_the_job_until_trawl_approve() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("job.yaml"),
        "name: pricey\npages: {urls: [\"https://shop.example/p/1\", \"https://shop.example/p/2\"], geos: [us]}\n\
         extract: {fields: {name: {jsonld: name}}}\nbudget: {approve_above_usd: 0.001}\n",
    )
    .unwrap();
    let o = trawl(dir.path(), &["run", "job.yaml", "--out", "wait"]);
    assert_eq!(o.status.code(), Some(6), "{}", stderr(&o));
    let s = summary(&dir.path().join("wait"));
    assert_eq!(s["status"], "awaiting_approval");
    assert_eq!(s["upstream_calls"], 0);
    let id = s["job_id"].as_str().unwrap().to_owned();
    assert!(stderr(&o).contains(&format!("trawl approve {id}")));

    let o = trawl(
        dir.path(),
        &["approve", &id, "--out", "done", "--by", "alice"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let s = summary(&dir.path().join("done"));
    assert_eq!(s["status"], "succeeded");
    assert_eq!(s["job_id"], id.as_str());
    assert_eq!(s["slices"]["succeeded"], 2);

    let o = trawl(dir.path(), &["approve", &id]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("not awaiting approval"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn yes_approves_up_front_and_bad_flags_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("job.yaml"),
        "name: pricey\npages: {urls: [\"https://shop.example/p/1\"], geos: [us]}\n\
         extract: {fields: {name: {jsonld: name}}}\nbudget: {approve_above_usd: 0}\n",
    )
    .unwrap();
    let o = trawl(dir.path(), &["run", "job.yaml", "--yes", "--out", "o"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let o = trawl(dir.path(), &["run", "job.yaml", "--sim-faults", "429=2"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--sim-faults"), "{}", stderr(&o));

    let o = trawl(dir.path(), &["approve", "not-a-job"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn failed_slices_make_a_partial_or_failed_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("job.yaml"),
        "name: doomed\npages: {urls: [\"https://shop.example/p/1\"], geos: [us]}\n\
         extract: {fields: {name: {jsonld: name}}}\nretries: {max_attempts: 2}\n",
    )
    .unwrap();
    let o = trawl(
        dir.path(),
        &["run", "job.yaml", "--out", "o", "--sim-faults", "502=1"],
    );
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    let s = summary(&dir.path().join("o"));
    assert_eq!(s["status"], "failed");
    assert_eq!(s["upstream_calls"], 2);
    assert_eq!(s["failed_slices"][0]["code"], "reject_block");
}

#[test]
fn trawl_sim_serves_the_simulator_standalone() {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut child = Command::new(env!("CARGO_BIN_EXE_trawl"))
        .args(["sim", "--port", "0", "--sim-latency", "1ms"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first.rsplit("http://").next().unwrap().trim().to_owned();
    let get = |path: &str| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body
    };
    let stats = get("/__sim/stats");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        first.starts_with("Bright Data simulator on http://127.0.0.1:"),
        "{first}"
    );
    assert!(stats.starts_with("HTTP/1.1 200"), "{stats}");
    assert!(stats.contains("\"requests\":0"), "{stats}");
}

#[test]
fn sigint_cancels_the_run_and_still_writes_the_summary() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("job.yaml"),
        "name: slow\npages: {urls: [\"https://shop.example/p/1\", \"https://shop.example/p/2\"], geos: [us]}\n\
         extract: {fields: {name: {jsonld: name}}}\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_trawl"))
        .args(["run", "job.yaml", "--out", "o", "--sim-latency", "3s"])
        .current_dir(dir.path())
        .env_remove("BRIGHTDATA_API_TOKEN")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    // The first progress line is printed once the slices are on the queue.
    for line in lines.by_ref() {
        if line.unwrap().starts_with("progress:") {
            break;
        }
    }
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(5), "{rest:?}");
    let s = summary(&dir.path().join("o"));
    assert_eq!(s["status"], "cancelled");
    assert!(
        s["reason"].as_str().unwrap().starts_with("cancelled with"),
        "{s}"
    );
}

#[test]
fn reject_declines_a_parked_job_for_good() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("job.yaml"),
        "name: pricey\npages: {urls: [\"https://shop.example/p/1\"], geos: [us]}\n\
         extract: {fields: {name: {jsonld: name}}}\nbudget: {approve_above_usd: 0}\n",
    )
    .unwrap();
    let o = trawl(dir.path(), &["run", "job.yaml", "--out", "wait"]);
    assert_eq!(o.status.code(), Some(6), "{}", stderr(&o));
    let id = summary(&dir.path().join("wait"))["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let o = trawl(dir.path(), &["reject", &id, "--by", "bob"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("declined by bob: cancelled"),
        "{}",
        stderr(&o)
    );
    let o = trawl(dir.path(), &["approve", &id]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "a declined job cannot be approved later"
    );

    let elsewhere = tempfile::tempdir().unwrap();
    let o = trawl(elsewhere.path(), &["reject", &id]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no store"), "{}", stderr(&o));
    assert!(!elsewhere.path().join(".trawl").exists());
}

/// `trawl dev` in the background, with the address it announced.
struct Dev {
    child: std::process::Child,
    url: String,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Dev {
    fn start(dir: &Path, key: &str) -> Dev {
        Dev::start_with(dir, key, &["--state", "dev-state"])
    }

    fn start_with(dir: &Path, key: &str, args: &[&str]) -> Dev {
        use std::io::{BufRead, BufReader};
        let mut child = Command::new(env!("CARGO_BIN_EXE_trawl"))
            .arg("dev")
            .args(args)
            .current_dir(dir)
            .env_remove("BRIGHTDATA_API_TOKEN")
            .env_remove("TRAWL_HOME")
            .env("TRAWL_LISTEN", "127.0.0.1:0")
            .env("TRAWL_API_KEYS", key)
            // Deciding approvals takes an admin key (or the approvals:decide scope).
            .env("TRAWL_ADMIN_KEYS", "approver:boss")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = log.clone();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(url) = line.split("listening on ").nth(1) {
                    let _ = tx.send(url.trim().to_owned());
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let url = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("trawl dev did not listen:\n{}", log.lock().unwrap()));
        Dev { child, url, log }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn submit(dir: &Path, args: &[&str], key: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trawl"))
        .arg("submit")
        .args(args)
        .current_dir(dir)
        .env("TRAWL_API_KEY", key)
        .output()
        .unwrap()
}

fn sorted_lines(path: &Path) -> Vec<String> {
    let mut lines: Vec<String> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

#[test]
fn dev_serves_the_api_and_submit_wait_writes_what_run_writes() {
    let dir = tempfile::tempdir().unwrap();
    let o = trawl(dir.path(), &["run", &example(), "--out", "by-run"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let dev = Dev::start(dir.path(), "dev-key");
    let o = submit(
        dir.path(),
        &[&example(), "--api", &dev.url, "--wait", "--out", "by-api"],
        "dev-key",
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}\n--- dev ---\n{}",
        stderr(&o),
        dev.log.lock().unwrap()
    );
    let job_id = String::from_utf8_lossy(&o.stdout).trim().to_owned();
    assert!(job_id.starts_with("job_"), "stdout is the job id: {job_id}");
    for f in ["items.jsonl", "rejections.jsonl"] {
        assert_eq!(
            sorted_lines(&dir.path().join("by-api").join(f)),
            sorted_lines(&dir.path().join("by-run").join(f)),
            "{f}"
        );
    }
    let (api, run) = (
        summary(&dir.path().join("by-api")),
        summary(&dir.path().join("by-run")),
    );
    assert_eq!(api["job_id"], job_id.as_str());
    for key in ["status", "slices", "items", "cost_micros"] {
        assert_eq!(api[key], run[key], "{key}");
    }

    // A bad spec is refused with every error, exit 2, and no job id.
    std::fs::write(dir.path().join("bad.yaml"), "name: x\npagez: {}\n").unwrap();
    let o = submit(dir.path(), &["bad.yaml", "--api", &dev.url], "dev-key");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("pagez"), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    // A wrong key is an error, not a silent success.
    let o = submit(dir.path(), &[&example(), "--api", &dev.url], "wrong");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("401"), "{}", stderr(&o));
}

#[test]
fn dev_stops_on_sigterm_with_exit_zero() {
    let dir = tempfile::tempdir().unwrap();
    let mut dev = Dev::start(dir.path(), "k");
    Command::new("kill")
        .args(["-TERM", &dev.child.id().to_string()])
        .status()
        .unwrap();
    let status = dev.child.wait().unwrap();
    assert!(status.success(), "{status}\n{}", dev.log.lock().unwrap());
}

/// One request to the API with `key`, over a plain connection: the status and
/// the JSON body (`Null` when there is none).
fn http(base: &str, method: &str, path: &str, key: &str) -> (u16, Value) {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://").trim_end_matches('/');
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    write!(
        conn,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// What must agree between `trawl run` and `trawl dev` + `trawl submit --wait`.
fn ending(s: &Value) -> Value {
    serde_json::json!({
        "status": s["status"],
        "reason": s["reason"],
        "slices": s["slices"],
        "items": s["items"],
        "upstream_calls": s["upstream_calls"],
        "cost_micros": s["cost_micros"],
    })
}

/// `trawl run` and `trawl dev` are one system: the same jobs end the same way,
/// with the same items, summaries and exit codes: a budget stop (partial), a job
/// parked for approval and then approved, and a cancel.
#[test]
fn run_and_dev_end_jobs_alike() {
    let dir = tempfile::tempdir().unwrap();
    // Pages of their own per job: which pages the budget stop paid for (and
    // so which are cached on each side) depends on the order slices ran in.
    let pages = |from: usize, n: usize| {
        (from..from + n)
            .map(|i| format!("\"https://shop.example/p/{i}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    std::fs::write(
        dir.path().join("budget.yaml"),
        format!(
            "name: capped\npages: {{urls: [{}], geos: [us]}}\n\
             extract: {{fields: {{name: {{jsonld: name}}}}}}\nbudget: {{max_usd: 0.0075}}\n",
            pages(1, 20)
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("pricey.yaml"),
        format!(
            "name: pricey\npages: {{urls: [{}], geos: [us]}}\n\
             extract: {{fields: {{name: {{jsonld: name}}}}}}\nbudget: {{approve_above_usd: 0.001}}\n",
            pages(101, 2)
        ),
    )
    .unwrap();
    let dev = Dev::start(dir.path(), "k");
    let log = || dev.log.lock().unwrap().clone();
    for (job, code) in [("budget.yaml", 3), ("pricey.yaml", 6)] {
        let by_run = format!("run-{job}");
        let by_api = format!("api-{job}");
        let run = trawl(dir.path(), &["run", job, "--out", &by_run]);
        let api = submit(
            dir.path(),
            &[job, "--api", &dev.url, "--wait", "--out", &by_api],
            "k",
        );
        assert_eq!(run.status.code(), Some(code), "{job}: {}", stderr(&run));
        assert_eq!(
            api.status.code(),
            Some(code),
            "{job}: {}\n{}",
            stderr(&api),
            log()
        );
        let (r, a) = (
            summary(&dir.path().join(&by_run)),
            summary(&dir.path().join(&by_api)),
        );
        if job == "pricey.yaml" {
            // The reason of a parked job says how to approve it, each its way.
            assert_eq!(r["status"], "awaiting_approval");
            assert_eq!(a["status"], "awaiting_approval");
            assert_eq!(
                (&r["slices"], &r["cost_micros"]),
                (&a["slices"], &a["cost_micros"])
            );
        } else {
            assert_eq!(ending(&r), ending(&a), "{job}");
            assert!(
                r["reason"]
                    .as_str()
                    .unwrap()
                    .starts_with("budget exhausted"),
                "{r}"
            );
        }
        // Which five pages the budget paid for depends on the order they ran
        // in; how many, and what they cost, does not (compared above).
        for f in ["items.jsonl", "rejections.jsonl"] {
            let (a, r) = (
                sorted_lines(&dir.path().join(&by_api).join(f)),
                sorted_lines(&dir.path().join(&by_run).join(f)),
            );
            if job == "budget.yaml" {
                assert_eq!(a.len(), r.len(), "{job}: {f}");
            } else {
                assert_eq!(a, r, "{job}: {f}");
            }
        }
    }

    // Approved: by `trawl approve` on one side, over the API on the other.
    let run_id = summary(&dir.path().join("run-pricey.yaml"))["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let api_id = summary(&dir.path().join("api-pricey.yaml"))["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let run = trawl(dir.path(), &["approve", &run_id, "--out", "run-approved"]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let (status, list) = http(&dev.url, "GET", "/v1/approvals", "k");
    assert_eq!(status, 200, "{list}");
    let approval = list["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["job_id"] == api_id.as_str())
        .unwrap_or_else(|| panic!("{list}"))["id"]
        .as_i64()
        .unwrap();
    let (status, decided) = http(
        &dev.url,
        "POST",
        &format!("/v1/approvals/{approval}/approve"),
        "boss",
    );
    assert_eq!(status, 200, "{decided}");
    // Followed as `submit --wait` follows a job, to its end.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let job = loop {
        let (_, job) = http(&dev.url, "GET", &format!("/v1/jobs/{api_id}"), "k");
        if ["succeeded", "partial", "failed", "cancelled"]
            .contains(&job["status"].as_str().unwrap_or(""))
        {
            break job;
        }
        assert!(std::time::Instant::now() < deadline, "{job}\n{}", log());
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let r = summary(&dir.path().join("run-approved"));
    assert_eq!(job["status"], r["status"]);
    assert_eq!(
        job["counts"]["slices"]["succeeded"],
        r["slices"]["succeeded"]
    );
    assert_eq!(job["counts"]["items"]["valid"], r["items"]["valid"]);
    assert_eq!(job["counts"]["cost_micros"], r["cost_micros"]);
    drop(dev);

    // Cancelled while its slices wait on a slow upstream: Ctrl-C for `trawl
    // run` (see `sigint_cancels_the_run_and_still_writes_the_summary`), a cancel
    // over the API for `trawl dev`; `submit --wait` then ends as `run` does.
    use std::io::{BufRead, BufReader};
    let slow = Dev::start_with(
        dir.path(),
        "k",
        &["--state", "slow-state", "--sim-latency", "3s"],
    );
    let mut waiting = Command::new(env!("CARGO_BIN_EXE_trawl"))
        .args([
            "submit",
            "budget.yaml",
            "--api",
            &slow.url,
            "--wait",
            "--out",
            "api-cancel",
        ])
        .current_dir(dir.path())
        .env("TRAWL_API_KEY", "k")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut id = String::new();
    BufReader::new(waiting.stdout.take().unwrap())
        .read_line(&mut id)
        .unwrap();
    let mut lines = BufReader::new(waiting.stderr.take().unwrap()).lines();
    for line in lines.by_ref() {
        if line.unwrap().starts_with("progress:") {
            break;
        }
    }
    let (status, cancelled) = http(
        &slow.url,
        "POST",
        &format!("/v1/jobs/{}/cancel", id.trim()),
        "k",
    );
    assert_eq!(status, 200, "{cancelled}");
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert_eq!(waiting.wait().unwrap().code(), Some(5), "{rest:?}");
    let a = summary(&dir.path().join("api-cancel"));
    assert_eq!(a["status"], "cancelled");
    assert_eq!(a["reason"], "cancelled over the API");
}

/// Bad settings stop a role before it starts, every problem listed at once.
#[test]
fn bad_settings_are_all_listed_and_nothing_starts() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_trawl"))
        .arg("api")
        .current_dir(dir.path())
        .env_remove("BRIGHTDATA_API_TOKEN")
        .env("TRAWL_DATABASE_URL", "postgres://127.0.0.1:1/none")
        .env("TRAWL_WEBHOOK_URL", "https://hooks.example/approvals")
        .env("TRAWL_RESOURCE_URI", "not a uri")
        .env("TRAWL_OAUTH_ISSUER", "https://issuer.example")
        .env("TRAWL_API_KEYS", "ci:one,ci:two")
        .env("TRAWL_MODEL_PRICES", dir.path().join("missing.yaml"))
        .env("TRAWL_PRICE_SERP_PER_1K", "cheap")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("5 problem(s) in the settings"), "{err}");
    for setting in [
        "TRAWL_WEBHOOK_SECRET",
        "TRAWL_RESOURCE_URI",
        "TRAWL_API_KEYS",
        "TRAWL_MODEL_PRICES",
        "TRAWL_PRICE_SERP_PER_1K",
    ] {
        assert!(err.contains(setting), "{setting} not named:\n{err}");
    }
    // Nothing was reached: the database URL points nowhere and is not named.
    assert!(!err.contains("Postgres"), "{err}");
}

/// Settings that depend on each other are checked together at start, and each
/// message names the setting and the rule it broke.
#[test]
fn timings_that_contradict_each_other_and_a_long_nats_prefix_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = "p".repeat(40);
    let o = Command::new(env!("CARGO_BIN_EXE_trawl"))
        .arg("worker")
        .current_dir(dir.path())
        .env_remove("BRIGHTDATA_API_TOKEN")
        .env("TRAWL_DATABASE_URL", "postgres://127.0.0.1:1/none")
        .env("TRAWL_NATS_PREFIX", &prefix)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "TRAWL_NATS_PREFIX: \"{prefix}\" (40 characters) must be 1 to 32"
        )),
        "{err}"
    );
    assert!(
        !err.contains("TRAWL_NATS_URL"),
        "the URL is not to blame:\n{err}"
    );

    for (ack_wait, lock, rule) in [
        (
            "4s",
            "5s",
            "TRAWL_CACHE_LOCK_TTL (5s) must be shorter than TRAWL_ACK_WAIT (4s)",
        ),
        (
            "30s",
            "100ms",
            "TRAWL_CACHE_LOCK_TTL (100ms) must be at least 300ms",
        ),
        (
            "50ms",
            "300ms",
            "TRAWL_ACK_WAIT (50ms) must be longer than 100ms",
        ),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_trawl"))
            .arg("worker")
            .current_dir(dir.path())
            .env_remove("BRIGHTDATA_API_TOKEN")
            .env("TRAWL_DATABASE_URL", "postgres://127.0.0.1:1/none")
            .env("TRAWL_ACK_WAIT", ack_wait)
            .env("TRAWL_CACHE_LOCK_TTL", lock)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(rule), "{rule} not said:\n{err}");
        assert!(!err.contains("Postgres"), "{err}");
    }
}
