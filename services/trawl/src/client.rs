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
use trawl_api::JobView;

use crate::output::{self, Summary};
use crate::progress::Progress;

/// How often a followed job is read.
const POLL: Duration = Duration::from_millis(500);
/// Rows per page when the output is downloaded.
const PAGE: u32 = 1_000;

/// `trawl probe`: one GET of `url`; `Ok` when it answers 2xx within `timeout`.
pub async fn probe(url: &str, timeout: Duration) -> anyhow::Result<()> {
    let http = trawl_telemetry::http::client()
        .timeout(timeout)
        .build()
        .context("building the HTTP client")?;
    let response = http.get(url).send().await.context("no answer")?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let body = response.text().await.unwrap_or_default();
    bail!("{status} {}", body.trim())
}

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
        let http = trawl_telemetry::http::client()
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

    /// The job as the API shows it.
    async fn job(&self, id: &str) -> anyhow::Result<JobView> {
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
        serde_json::from_value(v).context("the API's job is not one this client reads")
    }

    /// Follows the job to its end; `None` when `cancel` fired first.
    pub async fn wait(
        &self,
        id: &str,
        progress: &mut Progress,
        cancel: &CancellationToken,
    ) -> anyhow::Result<Option<Summary>> {
        let started = Instant::now();
        let view = crate::follow::follow(|| self.job(id), POLL, progress, cancel).await?;
        Ok(view.map(|v| Summary::of(&v, false, started.elapsed(), Vec::new())))
    }

    /// Writes the output files of a job, its rows read from the API.
    pub async fn write_output(
        &self,
        id: &str,
        dir: &Path,
        summary: &Summary,
    ) -> anyhow::Result<()> {
        let items = self.all_lines(&format!("/v1/jobs/{id}/items")).await?;
        let rejections = self.all_lines(&format!("/v1/jobs/{id}/rejections")).await?;
        output::write(dir, &items, &rejections, summary)
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
