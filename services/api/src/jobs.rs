//! `POST /v1/jobs`, `GET /v1/jobs/{id}` and `POST /v1/jobs/{id}/cancel`.
//!
//! A submitted spec is parsed and planned here only to check it and to answer with
//! an estimate: the job is stored `pending` with no slices, and the scheduler plans
//! it (the same pure function, the same slice ids).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::{Duration, UNIX_EPOCH};

use axum::Extension;
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tracing::{instrument, warn};
use trawl_core::cost::Micros;
use trawl_core::model::{JobCounts, JobId, JobStatus};
use trawl_core::ports::{Idempotency, JobRecord, PortError, Store};
use trawl_core::spec::{JobSpec, read_yaml};
use trawl_scheduler::{Submission, SubmitError};
use utoipa::ToSchema;

use crate::error::{ApiError, Problem};
use crate::state::{ApiState, Caller};

/// The reason a job cancelled over the API ends with.
pub const CANCEL_REASON: &str = "cancelled over the API";

/// The header that marks an answer replayed for a repeated `Idempotency-Key`.
pub const REPLAYED: &str = "idempotent-replayed";

/// What a job is expected to cost, at most.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct EstimateView {
    /// Slices planned before anything runs: searches plus pages.
    pub slices: u64,
    pub search_slices: u64,
    pub page_slices: u64,
    /// The most page slices the searches may add (their `follow_top` results).
    pub followed_pages_max: u64,
    /// The most the job can cost if no answer comes from the cache; for display.
    pub cost_usd: f64,
    /// The same in millionths of a dollar; exact.
    pub cost_micros: i64,
}

impl EstimateView {
    fn new(spec: Option<&JobSpec>, cost: Micros) -> EstimateView {
        let (search, page) = spec.map_or((0, 0), JobSpec::planned_slices);
        EstimateView {
            slices: search + page,
            search_slices: search,
            page_slices: page,
            followed_pages_max: spec.map_or(0, JobSpec::max_followed),
            cost_usd: cost.usd(),
            cost_micros: cost.0,
        }
    }

    /// The estimate of a stored job, its slice counts taken from its spec.
    /// Parsing a large spec takes a while (a job of 10,000 URLs: milliseconds),
    /// so it runs off the async threads, once per job and process: a job's spec
    /// and estimate never change, and a job followed to its end is read many
    /// times (`trawl run`, `trawl submit --wait`, clients polling the API).
    async fn of(job: &JobRecord) -> EstimateView {
        /// Estimates kept; all are dropped when it is full (each is one parse).
        const KEPT: usize = 1_024;
        static KNOWN: LazyLock<Mutex<HashMap<JobId, EstimateView>>> = LazyLock::new(Mutex::default);
        let known = |id: &JobId| {
            let map = KNOWN.lock().unwrap_or_else(PoisonError::into_inner);
            map.get(id).cloned()
        };
        if let Some(v) = known(&job.id) {
            return v;
        }
        let doc = job.spec.clone();
        let cost = job.estimate;
        let id = job.id.clone();
        let view = tokio::task::spawn_blocking(move || match JobSpec::from_value(doc) {
            Ok(spec) => Some(EstimateView::new(Some(&spec), cost)),
            Err(e) => {
                // Checked when it was submitted; only a change of the rules since
                // can make it fail now. The cost still stands.
                warn!(job_id = %id, error = %e, "stored spec no longer parses");
                None
            }
        })
        .await
        .ok()
        .flatten();
        let Some(view) = view else {
            return EstimateView::new(None, cost);
        };
        let mut map = KNOWN.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= KEPT {
            map.clear();
        }
        map.insert(job.id.clone(), view.clone());
        view
    }
}

/// Where a job's resources are.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct JobLinks {
    #[serde(rename = "self")]
    pub self_: String,
    pub items: String,
    pub rejections: String,
    pub trace: String,
    pub cancel: String,
}

impl JobLinks {
    pub fn of(id: &JobId) -> JobLinks {
        let base = format!("/v1/jobs/{id}");
        JobLinks {
            items: format!("{base}/items"),
            rejections: format!("{base}/rejections"),
            trace: format!("{base}/trace"),
            cancel: format!("{base}/cancel"),
            self_: base,
        }
    }
}

/// The answer to a submitted job.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct JobAccepted {
    #[schema(value_type = String, example = "job_0193b4c1a2f04e9d2c7a1b3e5f60")]
    pub job_id: JobId,
    /// `pending` when just stored; the current status when replayed.
    #[schema(value_type = String, example = "pending")]
    pub status: JobStatus,
    pub estimate: EstimateView,
    pub links: JobLinks,
}

/// Slices of a job by state.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct SliceCounts {
    pub total: u64,
    pub succeeded: u64,
    pub failed: u64,
    /// Not yet terminal.
    pub open: u64,
}

/// Items of a job by outcome.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ItemCounts {
    pub valid: u64,
    pub rejected: u64,
}

/// What a job has done so far.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct CountsView {
    pub slices: SliceCounts,
    pub items: ItemCounts,
    /// Tool calls that went upstream (and may have cost money).
    pub upstream_calls: u64,
    /// Tool calls answered by the content cache.
    pub cache_hits: u64,
    /// Money spent so far; for display.
    pub cost_usd: f64,
    /// The same in millionths of a dollar; exact.
    pub cost_micros: i64,
}

impl From<JobCounts> for CountsView {
    fn from(c: JobCounts) -> CountsView {
        CountsView {
            slices: SliceCounts {
                total: c.slices_total,
                succeeded: c.slices_succeeded,
                failed: c.slices_failed,
                open: c.slices_open(),
            },
            items: ItemCounts {
                valid: c.items_valid,
                rejected: c.items_rejected,
            },
            upstream_calls: c.upstream_calls,
            cache_hits: c.cache_hits,
            cost_usd: c.cost.usd(),
            cost_micros: c.cost.0,
        }
    }
}

/// A job as the API shows it.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct JobView {
    #[schema(value_type = String, example = "job_0193b4c1a2f04e9d2c7a1b3e5f60")]
    pub job_id: JobId,
    pub name: String,
    /// `pending`, `awaiting_approval`, `queued`, `running`, `succeeded`, `partial`,
    /// `failed` or `cancelled`.
    #[schema(value_type = String, example = "running")]
    pub status: JobStatus,
    /// Why the job is where it is, when that needs saying.
    pub reason: Option<String>,
    /// When the job was submitted (RFC 3339, UTC).
    pub created: String,
    /// The same in milliseconds since the Unix epoch.
    pub created_ms: i64,
    pub estimate: EstimateView,
    pub counts: CountsView,
    /// The OpenTelemetry trace of the job (32 hex digits): its submission,
    /// planning, every slice and tool call. Open it in Jaeger at
    /// `<jaeger>/trace/<trace_id>`. Null when traces are not exported, or the
    /// sampler left the job out (`OTEL_TRACES_SAMPLER_ARG`).
    #[schema(example = "4bf92f3577b34da6a3ce929d0e0e4736")]
    pub trace_id: Option<String>,
    pub links: JobLinks,
}

impl JobView {
    /// The view of a stored job, its counts read from `store`.
    pub async fn of(store: &dyn Store, job: JobRecord) -> Result<JobView, PortError> {
        let counts = store.counts(&job.id).await?;
        let estimate = EstimateView::of(&job).await;
        Ok(JobView {
            links: JobLinks::of(&job.id),
            created: rfc3339(job.created_ms),
            created_ms: job.created_ms,
            job_id: job.id,
            name: job.name,
            status: job.status,
            reason: job.reason,
            estimate,
            counts: counts.into(),
            // Only a sampled job has a trace to open.
            trace_id: job
                .traceparent
                .as_deref()
                .filter(|tp| trawl_telemetry::propagation::is_sampled(Some(tp)))
                .and_then(trawl_telemetry::propagation::trace_id_in)
                .map(str::to_owned),
        })
    }
}

pub(crate) fn rfc3339(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(t).to_string()
}

/// The job a path names, if `caller` may see it; else 404, the same answer as
/// for no such job, so that ids of other callers' jobs tell nothing. A malformed
/// id names no job.
pub(crate) async fn load_job(
    state: &ApiState,
    caller: &Caller,
    raw: &str,
) -> Result<JobRecord, ApiError> {
    let not_found = || ApiError::NotFound(format!("job {raw}"));
    let id = JobId::parse(raw).map_err(|_| not_found())?;
    let job = state.store.job(&id).await?.ok_or_else(not_found)?;
    if !caller.sees(&job) {
        tracing::info!(job_id = %id, caller = %caller.label, "a job of another caller was asked for: not found");
        return Err(not_found());
    }
    Ok(job)
}

/// The formats a job spec may come in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SpecFormat {
    Json,
    Yaml,
}

impl SpecFormat {
    fn of(headers: &HeaderMap) -> Result<SpecFormat, ApiError> {
        let raw = headers
            .get(header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let essence = raw
            .as_deref()
            .and_then(|ct| ct.split(';').next())
            .map(|e| e.trim().to_ascii_lowercase());
        match essence.as_deref() {
            Some("application/json") => Ok(SpecFormat::Json),
            Some(e) if e.starts_with("application/") && e.ends_with("+json") => {
                Ok(SpecFormat::Json)
            }
            Some("application/yaml" | "application/x-yaml" | "text/yaml" | "text/x-yaml") => {
                Ok(SpecFormat::Yaml)
            }
            _ => Err(ApiError::UnsupportedMediaType(raw)),
        }
    }

    /// The document in a body, then the spec in the document. A UTF-8
    /// byte-order mark at the start is skipped.
    fn read(self, body: &[u8]) -> Result<JobSpec, ApiError> {
        let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
        let doc: Value = match self {
            SpecFormat::Json => serde_json::from_slice(body)
                .map_err(|e| ApiError::MalformedBody(format!("not a JSON document: {e}")))?,
            SpecFormat::Yaml => read_yaml(body)
                .map_err(|e| ApiError::MalformedBody(format!("not a YAML document: {e}")))?,
        };
        JobSpec::from_value(doc).map_err(ApiError::InvalidSpec)
    }
}

/// The longest `Idempotency-Key` accepted.
pub(crate) const MAX_IDEMPOTENCY_KEY: usize = 255;

/// What an `Idempotency-Key` is: visible ASCII characters (1 to
/// [`MAX_IDEMPOTENCY_KEY`] of them), as the OpenAPI document says.
pub(crate) const IDEMPOTENCY_KEY_PATTERN: &str = r"^[\x21-\x7E]+$";

/// The request's `Idempotency-Key` (kept per tenant and caller, each its own
/// column, by the store): 1 to
/// [`MAX_IDEMPOTENCY_KEY`] visible ASCII characters. The draft makes the value a
/// Structured Fields string (`"…"`), whose quotes are not part of the key; a
/// bare value is taken as it is.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all("idempotency-key").iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let bad = || {
        ApiError::BadRequest(format!(
            "Idempotency-Key must be one string of 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters"
        ))
    };
    if values.next().is_some() {
        return Err(bad());
    }
    let raw = value.as_bytes();
    if raw.is_empty()
        || raw.len() > MAX_IDEMPOTENCY_KEY
        || !raw.iter().all(|b| (0x21..=0x7e).contains(b))
    {
        return Err(bad());
    }
    let raw = value.to_str().map_err(|_| bad())?;
    let key = raw
        .strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .filter(|k| !k.is_empty())
        .unwrap_or(raw);
    Ok(Some(key.to_owned()))
}

fn accepted(job: &JobRecord, estimate: EstimateView, replayed: bool) -> Response {
    let links = JobLinks::of(&job.id);
    let location = HeaderValue::from_str(&links.self_).ok();
    let body = JobAccepted {
        job_id: job.id.clone(),
        status: job.status,
        estimate,
        links,
    };
    let mut res = (StatusCode::ACCEPTED, Json(body)).into_response();
    if let Some(location) = location {
        res.headers_mut().insert(header::LOCATION, location);
    }
    if replayed {
        res.headers_mut()
            .insert(REPLAYED, HeaderValue::from_static("true"));
    }
    res
}

/// The answer to a request whose idempotency key is already taken by `job`: the
/// first answer again if the body is the same, 422 otherwise.
async fn replay(job: &JobRecord, digest: &str) -> Result<Response, ApiError> {
    match &job.idempotency {
        Some(i) if i.request_digest == digest => {
            Ok(accepted(job, EstimateView::of(job).await, true))
        }
        _ => Err(ApiError::IdempotencyKeyReuse),
    }
}

/// Submit a job.
///
/// The spec is checked and priced, the job is stored `pending`, and the scheduler
/// plans and runs it. Nothing is stored when the request is refused.
#[utoipa::path(
    post,
    path = "/v1/jobs",
    tag = "jobs",
    request_body(
        description = "A job spec, as JSON or YAML (the same document `trawl run` reads).",
        content(
            (Object = "application/json"),
            (String = "application/yaml"),
            (String = "application/x-yaml"),
            (String = "text/yaml"),
        ),
    ),
    params(
        ("Idempotency-Key" = Option<String>, Header,
            description = "Makes retries safe: the same key with the same body answers with the first job; with another body, 422."),
    ),
    responses(
        // The operations that apply to every job, so a client (and
        // schemathesis's stateful phase) can follow them from here. Not the
        // report: only a research job has one (404 for any other).
        (status = 202, description = "Stored; the scheduler plans it next.", body = JobAccepted,
            headers(("Location" = String, description = "The job's URL.")),
            links(
                ("get_job" = (operation_id = "get_job", parameters(("id" = "$response.body#/job_id")),
                    description = "The job: its status, counts and spend.")),
                ("cancel_job" = (operation_id = "cancel_job", parameters(("id" = "$response.body#/job_id")),
                    description = "Cancel the job.")),
                ("items" = (operation_id = "items", parameters(("id" = "$response.body#/job_id")),
                    description = "The items the job found.")),
                ("rejections" = (operation_id = "rejections", parameters(("id" = "$response.body#/job_id")),
                    description = "The items the job rejected.")),
                ("trace" = (operation_id = "trace", parameters(("id" = "$response.body#/job_id")),
                    description = "What the job did.")),
                ("list_artifacts" = (operation_id = "list_artifacts", parameters(("id" = "$response.body#/job_id")),
                    description = "The files the job produced.")),
            )),
        (status = 400, description = "The body is not JSON or YAML, or a header is malformed.", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid API key.", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over the limit.", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Neither JSON nor YAML.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The spec is invalid (every error listed), the idempotency key was used with another body, or the job is too big for a limit of its tenant (`over-limit`).", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store is unavailable.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])),
)]
#[instrument(skip_all, fields(caller = %caller.label))]
pub(crate) async fn submit_job(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let format = SpecFormat::of(&headers)?;
    let body = body.map_err(|r| ApiError::from_body(&r, state.body_limit))?;
    let key = idempotency_key(&headers)?;
    let digest = hex::encode(Sha256::digest(&body));
    let owner = caller.owner();
    if let Some(key) = &key
        && let Some(job) = state.store.job_by_idempotency_key(&owner, key).await?
    {
        return replay(&job, &digest).await;
    }

    // Parsing a large spec is CPU work: keep it off the async threads.
    let spec = tokio::task::spawn_blocking(move || format.read(&body))
        .await
        .map_err(|e| ApiError::Internal(anyhow::Error::new(e).context("reading a job spec")))??;
    let submission = Submission {
        spec,
        owner: Some(owner.clone()),
        idempotency: key.clone().map(|key| Idempotency {
            key,
            request_digest: digest.clone(),
        }),
        // Planning and the slices continue this request's trace.
        traceparent: trawl_telemetry::propagation::current_traceparent(),
    };
    let submitted = match trawl_scheduler::submit(
        state.store.as_ref(),
        state.events.as_ref(),
        &state.submit_config(),
        submission,
    )
    .await
    {
        Ok(s) => s,
        Err(SubmitError::Invalid(errors)) => return Err(ApiError::InvalidSpec(errors)),
        Err(SubmitError::Unrunnable(why)) => return Err(ApiError::Unrunnable(why)),
        Err(SubmitError::OverLimit(over)) => return Err(ApiError::OverLimit(over)),
        // Another request with the same key won the race: answer as if this one
        // had come second.
        Err(SubmitError::Port(PortError::Conflict(_))) if key.is_some() => {
            let key = key.as_deref().unwrap_or_default();
            let first = state
                .store
                .job_by_idempotency_key(&owner, key)
                .await?
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "the store refused idempotency key {key:?} but has no job with it"
                    )
                })?;
            return replay(&first, &digest).await;
        }
        Err(SubmitError::Port(e)) => return Err(e.into()),
    };
    Ok(accepted(
        &submitted.record,
        EstimateView::new(Some(&submitted.spec), submitted.estimate.cost),
        false,
    ))
}

/// A job: status, estimate and counts so far.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    params(("id" = String, Path, description = "The job id.")),
    responses(
        (status = 200, description = "The job.", body = JobView),
        (status = 401, description = "No valid API key.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])),
)]
#[instrument(skip_all, fields(job_id = %id))]
pub(crate) async fn get_job(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    let job = load_job(&state, &caller, &id).await?;
    Ok(Json(JobView::of(state.store.as_ref(), job).await?))
}

/// Cancel a job that has not ended.
///
/// Its open slices are skipped; what it found so far stays readable.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/cancel",
    tag = "jobs",
    params(("id" = String, Path, description = "The job id.")),
    responses(
        (status = 200, description = "Cancelled.", body = JobView),
        (status = 401, description = "No valid API key.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The job has already ended.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])),
)]
#[instrument(skip_all, fields(job_id = %id))]
pub(crate) async fn cancel_job(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    let job = load_job(&state, &caller, &id).await?;
    if job.status.is_terminal() {
        return Err(ApiError::Conflict(format!(
            "job {} has already ended: it is {}",
            job.id,
            job.status.as_str()
        )));
    }
    let ended = trawl_scheduler::cancel(
        state.store.as_ref(),
        state.events.as_ref(),
        &job.id,
        CANCEL_REASON,
    )
    .await?;
    if !ended {
        // It ended between the read above and the write: say how.
        let job = load_job(&state, &caller, job.id.as_str()).await?;
        return Err(ApiError::Conflict(format!(
            "job {} has already ended: it is {}",
            job.id,
            job.status.as_str()
        )));
    }
    let job = load_job(&state, &caller, job.id.as_str()).await?;
    Ok(Json(JobView::of(state.store.as_ref(), job).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: &'static str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn media_types_are_read_by_their_essence() {
        let ct = |v| SpecFormat::of(&with("content-type", v));
        assert_eq!(ct("application/json").unwrap(), SpecFormat::Json);
        assert_eq!(
            ct("Application/JSON; charset=utf-8").unwrap(),
            SpecFormat::Json
        );
        assert_eq!(ct("application/vnd.trawl+json").unwrap(), SpecFormat::Json);
        assert_eq!(ct("application/yaml").unwrap(), SpecFormat::Yaml);
        assert_eq!(ct("application/x-yaml").unwrap(), SpecFormat::Yaml);
        assert_eq!(ct("text/yaml").unwrap(), SpecFormat::Yaml);
        assert!(matches!(
            ct("text/plain"),
            Err(ApiError::UnsupportedMediaType(Some(_)))
        ));
        assert!(matches!(
            SpecFormat::of(&HeaderMap::new()),
            Err(ApiError::UnsupportedMediaType(None))
        ));
    }

    #[test]
    fn idempotency_keys_are_read_as_sent_and_checked() {
        let (k255, k256) = ("x".repeat(255), "x".repeat(256));
        let key = |v| idempotency_key(&with("idempotency-key", v));
        assert_eq!(
            key("\"8e03978e-40d5\"").unwrap().as_deref(),
            Some("8e03978e-40d5")
        );
        // Never joined with the caller: the store keeps the two apart.
        assert_eq!(key("x/k").unwrap().as_deref(), Some("x/k"));
        // Two quotes are a key of two characters, not an empty one.
        assert_eq!(key("\"\"").unwrap().as_deref(), Some("\"\""));
        assert!(key(&k255).is_ok());
        assert!(key(&k256).is_err());
        assert!(key("a b").is_err(), "a space is not visible");
        assert!(key("caf\u{e9}").is_err());
        let pattern = regex::Regex::new(IDEMPOTENCY_KEY_PATTERN).unwrap();
        for k in ["abc", "\"q\"", "\"\"", "~!", "a b", "\t", "x\u{7f}"] {
            let ok = HeaderValue::from_str(k).is_ok_and(|_| key(k).is_ok());
            assert_eq!(pattern.is_match(k), ok, "{k:?}");
        }
        assert_eq!(idempotency_key(&HeaderMap::new()).unwrap(), None);
    }

    /// Schemathesis's ST202: a YAML body with an integer beyond 64 bits was a
    /// 400 `malformed-body`; it is read as JSON reads it (a float), so the spec
    /// is judged by the checker, the same in either format.
    #[test]
    fn integers_beyond_64_bits_are_read_alike_in_yaml_and_json() {
        let spec = |schema: &str, follow_top: &str| {
            format!(
                r#"{{"name": "x", "searches": {{"queries": ["q"], "geos": ["us"], "follow_top": {follow_top}}},
                    "extract": {{"fields": {{"t": {{"css": "h1"}}}}}}, "schema": {schema}}}"#
            )
        };
        let big = "-43966217626396508160";
        let inside_schema = spec(&format!(r#"{{"type": "object", "maximum": {big}}}"#), "1");
        let in_a_count = spec(r#"{"type": "object"}"#, big);
        for format in [SpecFormat::Json, SpecFormat::Yaml] {
            let read = format.read(inside_schema.as_bytes());
            assert!(read.is_ok(), "{format:?}: {read:?}");
            match format.read(in_a_count.as_bytes()) {
                Err(ApiError::InvalidSpec(errors)) => {
                    assert_eq!(errors.paths(), ["searches.follow_top"], "{format:?}");
                }
                other => panic!("{format:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }
}
