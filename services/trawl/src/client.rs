//! `trawl submit`: the command-line client of the HTTP API.
//!
//! Submits a job file, and with `--wait` follows the job (`GET /v1/jobs/{id}`
//! every half second) with the same progress display as `trawl run`, then
//! writes the same output files from the paginated NDJSON endpoints.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue, LINK};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use trawl_core::model::{JobCounts, JobStatus};

use crate::output::{ItemCounts, SliceCounts, Summary, write_raw_lines, write_summary};
use crate::progress::Progress;

/// How often a followed job is read.
const POLL: Duration = Duration::from_millis(500);
/// Rows per page when the output is downloaded.
const PAGE: u32 = 1_000;

/// A job the API accepted.
#[derive(Clone, Debug)]
pub struct Submitted {
    pub job_id: String,
    pub status: String,
}

pub struct Client {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
}

impl Client {
    pub fn new(base: &str, key: Option<String>) -> anyhow::Result<Client> {
        trawl_brightdata::ensure_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .context("building the HTTP client")?;
        Ok(Client {
            http,
            base: base.trim_end_matches('/').to_owned(),
            key: key.filter(|k| !k.is_empty()),
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let url = if path.starts_with("http://") || path.starts_with("https://") {
            path.to_owned()
        } else {
            format!("{}{path}", self.base)
        };
        let r = self.http.request(method, url);
        match &self.key {
            Some(k) => r.header(AUTHORIZATION, format!("Bearer {k}")),
            None => r,
        }
    }

    /// Submits the job file. `Ok(Err(text))` when the API refused the spec: the
    /// text lists its errors.
    pub async fn submit(
        &self,
        file: &Path,
        idempotency_key: Option<&str>,
    ) -> anyhow::Result<Result<Submitted, String>> {
        let body =
            std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
        let json = file
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        let mut req = self
            .request(reqwest::Method::POST, "/v1/jobs")
            .header(
                CONTENT_TYPE,
                if json {
                    "application/json"
                } else {
                    "application/yaml"
                },
            )
            .body(body);
        if let Some(k) = idempotency_key {
            req = req.header("Idempotency-Key", k);
        }
        let resp = req.send().await.context("submitting the job")?;
        let status = resp.status();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        if status == reqwest::StatusCode::UNPROCESSABLE_ENTITY
            || status == reqwest::StatusCode::BAD_REQUEST
        {
            return Ok(Err(problem_text(&v)));
        }
        if !status.is_success() {
            bail!("the API answered {status}: {}", problem_text(&v).trim_end());
        }
        Ok(Ok(Submitted {
            job_id: str_field(&v, "job_id")?,
            status: str_field(&v, "status")?,
        }))
    }

    async fn job(&self, id: &str) -> anyhow::Result<Value> {
        let resp = self
            .request(reqwest::Method::GET, &format!("/v1/jobs/{id}"))
            .send()
            .await
            .context("reading the job")?;
        let status = resp.status();
        let v: Value = resp.json().await.context("reading the job")?;
        if !status.is_success() {
            bail!("the API answered {status}: {}", problem_text(&v).trim_end());
        }
        Ok(v)
    }

    /// Follows the job to its end; `None` when `cancel` fired first.
    pub async fn wait(
        &self,
        id: &str,
        progress: &mut Progress,
        cancel: &CancellationToken,
    ) -> anyhow::Result<Option<Summary>> {
        let started = Instant::now();
        loop {
            let v = self.job(id).await?;
            let counts = counts_of(&v);
            progress.update(&counts);
            let status = JobStatus::parse(&str_field(&v, "status")?)
                .context("the API sent an unknown job status")?;
            if status.is_terminal() || status == JobStatus::AwaitingApproval {
                progress.finish(&counts);
                return Ok(Some(summary_of(&v, status, &counts, started)?));
            }
            tokio::select! {
                () = cancel.cancelled() => return Ok(None),
                () = tokio::time::sleep(POLL) => {}
            }
        }
    }

    /// Writes items.jsonl, rejections.jsonl and summary.json of a job.
    pub async fn write_output(
        &self,
        id: &str,
        dir: &Path,
        summary: &Summary,
    ) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating output folder {}", dir.display()))?;
        let items = self.all_lines(&format!("/v1/jobs/{id}/items")).await?;
        write_raw_lines(&dir.join("items.jsonl"), &items)?;
        let rejections = self.all_lines(&format!("/v1/jobs/{id}/rejections")).await?;
        write_raw_lines(&dir.join("rejections.jsonl"), &rejections)?;
        write_summary(dir, summary)
    }

    /// Every NDJSON line of a paginated endpoint, following `Link: rel="next"`.
    async fn all_lines(&self, path: &str) -> anyhow::Result<Vec<String>> {
        let mut lines = Vec::new();
        let mut next = Some(format!("{path}?limit={PAGE}"));
        while let Some(url) = next.take() {
            let resp = self
                .request(reqwest::Method::GET, &url)
                .header(ACCEPT, "application/x-ndjson")
                .send()
                .await
                .with_context(|| format!("reading {path}"))?;
            let status = resp.status();
            if !status.is_success() {
                bail!("the API answered {status} for {path}");
            }
            next = resp.headers().get(LINK).and_then(next_link);
            let text = resp
                .text()
                .await
                .with_context(|| format!("reading {path}"))?;
            lines.extend(text.lines().filter(|l| !l.is_empty()).map(str::to_owned));
        }
        Ok(lines)
    }
}

/// The target of `Link: <…>; rel="next"`.
fn next_link(h: &HeaderValue) -> Option<String> {
    let s = h.to_str().ok()?;
    s.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        params.contains("rel=\"next\"").then(|| {
            target
                .trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_owned()
        })
    })
}

fn str_field(v: &Value, name: &str) -> anyhow::Result<String> {
    v.get(name)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .with_context(|| format!("the API's answer has no \"{name}\""))
}

fn u64_at(v: &Value, pointer: &str) -> u64 {
    v.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

/// The counters of a job view.
fn counts_of(v: &Value) -> JobCounts {
    JobCounts {
        slices_total: u64_at(v, "/counts/slices/total"),
        slices_succeeded: u64_at(v, "/counts/slices/succeeded"),
        slices_failed: u64_at(v, "/counts/slices/failed"),
        items_valid: u64_at(v, "/counts/items/valid"),
        items_rejected: u64_at(v, "/counts/items/rejected"),
        upstream_calls: u64_at(v, "/counts/upstream_calls"),
        cache_hits: u64_at(v, "/counts/cache_hits"),
        cost: trawl_core::cost::Micros(
            v.pointer("/counts/cost_micros")
                .and_then(Value::as_i64)
                .unwrap_or(0),
        ),
        ..JobCounts::default()
    }
}

fn summary_of(
    v: &Value,
    status: JobStatus,
    c: &JobCounts,
    started: Instant,
) -> anyhow::Result<Summary> {
    Ok(Summary {
        job_id: str_field(v, "job_id")?,
        name: str_field(v, "name")?,
        status,
        reason: v.get("reason").and_then(Value::as_str).map(str::to_owned),
        slices: SliceCounts::of(c),
        items: ItemCounts {
            valid: c.items_valid,
            rejected: c.items_rejected,
        },
        upstream_calls: c.upstream_calls,
        cache_hits: c.cache_hits,
        cost_usd: c.cost.usd(),
        cost_micros: c.cost.0,
        estimate_usd: v
            .pointer("/estimate/cost_usd")
            .and_then(Value::as_f64)
            .unwrap_or(0.0),
        simulator: false,
        elapsed_s: started.elapsed().as_secs_f64(),
        failed_slices: Vec::new(),
    })
}

/// A problem+json body as lines for a terminal.
fn problem_text(v: &Value) -> String {
    let mut s = String::new();
    if let Some(t) = v.get("title").and_then(Value::as_str) {
        s.push_str(t);
    }
    if let Some(d) = v.get("detail").and_then(Value::as_str) {
        s.push_str(": ");
        s.push_str(d);
    }
    s.push('\n');
    for e in v
        .get("errors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let path = e.get("path").and_then(Value::as_str).unwrap_or("");
        let msg = e.get("message").and_then(Value::as_str).unwrap_or("");
        s.push_str(&format!("  {path}: {msg}\n"));
    }
    s
}
