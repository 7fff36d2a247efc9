//! `GET /v1/jobs/{id}/items`, `/rejections` and `/trace`: a job's rows, a page at a
//! time.
//!
//! Pages follow the store's order (slice, then position in the slice) and resume
//! after a cursor: `<slice id in hex>.<seq>` of the last row
//! given. A page is asked for one row longer than it is, so the last page says so
//! (`next_cursor: null`, no `Link`) instead of sending the client for an empty one.
//! Asked for `application/x-ndjson` (or `application/jsonl`), a page is one JSON
//! object per line and the next cursor travels in `Link: <…>; rel="next"`.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use tracing::instrument;
use trawl_core::model::{Item, Rejection, SliceId, TraceStep};
use trawl_core::ports::RowCursor;
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, Problem};
use crate::jobs::load_job;
use crate::state::{ApiState, Caller};

/// Rows per page when the client does not say.
pub const DEFAULT_LIMIT: u32 = 100;
/// The most rows a page holds; a larger `limit` is refused.
pub const MAX_LIMIT: u32 = 1000;

/// Which page to read.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Rows per page: 1 to 1000, default 100.
    pub limit: Option<u32>,
    /// Where to resume: the `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

impl PageQuery {
    fn limit(&self) -> Result<u32, ApiError> {
        match self.limit {
            None => Ok(DEFAULT_LIMIT),
            Some(n @ 1..=MAX_LIMIT) => Ok(n),
            Some(_) => Err(ApiError::BadRequest(format!(
                "limit must be from 1 to {MAX_LIMIT}"
            ))),
        }
    }
}

/// What a cursor is: the slice id of the last row in lower-case hex (visible
/// ASCII, two digits a character), a dot, and its sequence number (a `u32`,
/// written without leading zeros). The OpenAPI document says so, and
/// [`decode_cursor`] takes exactly these.
pub const CURSOR_PATTERN: &str = "^(2[1-9a-f]|[3-6][0-9a-f]|7[0-9a-e])+\\.(0|[1-9][0-9]{0,8}|[1-3][0-9]{9}|4[01][0-9]{8}|42[0-8][0-9]{7}|429[0-3][0-9]{6}|4294[0-8][0-9]{5}|42949[0-5][0-9]{4}|429496[0-6][0-9]{3}|4294967[01][0-9]{2}|42949672[0-8][0-9]|429496729[0-5])$";

/// A cursor as the client sees it.
pub fn encode_cursor(c: &RowCursor) -> String {
    format!("{}.{}", hex::encode(c.0.as_str()), c.1)
}

/// A cursor the client sent back; `None` if it is not one of
/// [`CURSOR_PATTERN`]'s. A well-formed cursor naming no row resumes after
/// where that row would be.
pub fn decode_cursor(s: &str) -> Option<RowCursor> {
    let (slice, seq) = s.split_once('.')?;
    let bytes = hex::decode(slice).ok()?;
    if bytes.is_empty()
        || !bytes.iter().all(u8::is_ascii_graphic)
        || slice.bytes().any(|b| b.is_ascii_uppercase())
        || !seq.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let n: u32 = seq.parse().ok()?;
    if n.to_string() != seq {
        return None;
    }
    let slice = String::from_utf8(bytes).ok()?;
    Some((SliceId::from_stored(slice), n))
}

/// A page of valid items.
#[derive(Debug, Serialize, ToSchema)]
pub struct ItemsPage {
    /// Each: `slice_id`, `seq`, `kind` (`page` or `serp`), `url`, `geo`, `data`.
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<Item>,
    /// Where the next page starts; null on the last page.
    pub next_cursor: Option<String>,
}

/// A page of rejected items.
#[derive(Debug, Serialize, ToSchema)]
pub struct RejectionsPage {
    /// Each: `slice_id`, `seq`, `url`, `geo`, `data` and `errors` (`path`, `message`).
    #[schema(value_type = Vec<Object>)]
    pub rejections: Vec<Rejection>,
    /// Where the next page starts; null on the last page.
    pub next_cursor: Option<String>,
}

/// A page of trace steps.
#[derive(Debug, Serialize, ToSchema)]
pub struct TracePage {
    /// Each: `slice_id`, `seq`, `tool`, `args_digest`, `cache_hit`, `attempt`,
    /// `status`, `error`, `latency_us`, `cost`, `at_ms`.
    #[schema(value_type = Vec<Object>)]
    pub steps: Vec<TraceStep>,
    /// Where the next page starts; null on the last page.
    pub next_cursor: Option<String>,
}

/// A row of a page: where it is, for the cursor.
trait Row: Serialize {
    fn cursor(&self) -> RowCursor;
}

impl Row for Item {
    fn cursor(&self) -> RowCursor {
        (self.slice_id.clone(), self.seq)
    }
}

impl Row for Rejection {
    fn cursor(&self) -> RowCursor {
        (self.slice_id.clone(), self.seq)
    }
}

impl Row for TraceStep {
    fn cursor(&self) -> RowCursor {
        (self.slice_id.clone(), self.seq)
    }
}

/// The NDJSON media type the client asked for, if it asked for one.
fn wants_ndjson(headers: &HeaderMap) -> Option<&'static str> {
    let accept = headers.get(header::ACCEPT)?.to_str().ok()?;
    accept.split(',').find_map(|range| {
        let essence = range.split(';').next().unwrap_or_default().trim();
        if essence.eq_ignore_ascii_case("application/x-ndjson") {
            Some("application/x-ndjson")
        } else if essence.eq_ignore_ascii_case("application/jsonl") {
            Some("application/jsonl")
        } else {
            None
        }
    })
}

/// What a page request asked for, checked.
struct PageRequest {
    after: Option<RowCursor>,
    limit: u32,
    ndjson: Option<&'static str>,
}

impl PageRequest {
    fn new(
        query: Result<Query<PageQuery>, QueryRejection>,
        headers: &HeaderMap,
    ) -> Result<PageRequest, ApiError> {
        let Query(query) = query.map_err(|r| ApiError::BadRequest(r.body_text()))?;
        let after = match query.cursor.as_deref() {
            None => None,
            Some(c) => Some(decode_cursor(c).ok_or_else(|| {
                ApiError::BadRequest(
                    "cursor is not one this API gave out: pass next_cursor as it is".to_owned(),
                )
            })?),
        };
        Ok(PageRequest {
            after,
            limit: query.limit()?,
            ndjson: wants_ndjson(headers),
        })
    }

    /// One more row than the page holds, so the last page knows it is the last.
    fn fetch_limit(&self) -> u32 {
        self.limit + 1
    }

    /// The answer: the rows and where the next page starts, as JSON built by
    /// `page`, or as NDJSON.
    fn respond<T: Row, P: Serialize>(
        &self,
        mut rows: Vec<T>,
        path: &str,
        page: impl FnOnce(Vec<T>, Option<String>) -> P,
    ) -> Result<Response, ApiError> {
        let next = if rows.len() > self.limit as usize {
            rows.truncate(self.limit as usize);
            rows.last().map(|r| encode_cursor(&r.cursor()))
        } else {
            None
        };
        let Some(media) = self.ndjson else {
            return Ok(Json(page(rows, next)).into_response());
        };
        let mut body = Vec::new();
        for row in &rows {
            serde_json::to_writer(&mut body, row)
                .map_err(|e| ApiError::Internal(anyhow::Error::new(e).context("writing NDJSON")))?;
            body.push(b'\n');
        }
        let mut res = body.into_response();
        let headers = res.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
        if let Some(next) = next {
            let link = format!("<{path}?limit={}&cursor={next}>; rel=\"next\"", self.limit);
            if let Ok(v) = HeaderValue::from_str(&link) {
                headers.insert(header::LINK, v);
            }
        }
        Ok(res)
    }
}

/// A job's valid items, a page at a time.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/items",
    tag = "rows",
    params(("id" = String, Path, description = "The job id."), PageQuery),
    responses(
        (status = 200, description = "A page of items; as NDJSON (one item a line, next page in `Link`) when `Accept: application/x-ndjson`.",
            content(
                (ItemsPage = "application/json"),
                (String = "application/x-ndjson"),
            ),
            headers(("Link" = String, description = "NDJSON only: `<…>; rel=\"next\"` unless this is the last page."))),
        (status = 400, description = "Bad cursor or limit.", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid API key.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])),
)]
#[instrument(skip_all, fields(job_id = %id))]
pub(crate) async fn items(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let req = PageRequest::new(query, &headers)?;
    let job = load_job(&state, &caller, &id).await?;
    let rows = state
        .reads
        .items_page(&job.id, req.after.as_ref(), req.fetch_limit())
        .await?;
    req.respond(
        rows,
        &format!("/v1/jobs/{}/items", job.id),
        |items, next_cursor| ItemsPage { items, next_cursor },
    )
}

/// A research job's report, as Markdown.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/report",
    tag = "rows",
    params(("id" = String, Path, description = "The job id.")),
    responses(
        (status = 200, description = "The report, citing its numbered sources (the pages the sub-agents fetched).", body = String, content_type = "text/markdown"),
        (status = 401, description = "No valid API key.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job, not a research job, or no report yet.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])),
)]
#[instrument(skip_all, fields(job_id = %id))]
pub(crate) async fn report(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let job = load_job(&state, &caller, &id).await?;
    if job.spec.get("research").is_none() {
        return Err(ApiError::NotFound(format!(
            "report of job {}: it has no research question",
            job.id
        )));
    }
    // A research job has a few findings and one report: read them whole.
    let items = state.reads.items(&job.id).await?;
    let md = items
        .iter()
        .find(|i| i.kind == trawl_core::model::ItemKind::Report)
        .and_then(|i| i.data["markdown"].as_str())
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "report of job {} yet (status {})",
                job.id,
                job.status.as_str()
            ))
        })?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/markdown; charset=utf-8",
        )],
        md.to_owned(),
    )
        .into_response())
}

/// A job's rejected items (failed its schema), a page at a time.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/rejections",
    tag = "rows",
    params(("id" = String, Path, description = "The job id."), PageQuery),
    responses(
        (status = 200, description = "A page of rejections; as NDJSON when `Accept: application/x-ndjson`.",
            content(
                (RejectionsPage = "application/json"),
                (String = "application/x-ndjson"),
            ),
            headers(("Link" = String, description = "NDJSON only: `<…>; rel=\"next\"` unless this is the last page."))),
        (status = 400, description = "Bad cursor or limit.", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid API key.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])),
)]
#[instrument(skip_all, fields(job_id = %id))]
pub(crate) async fn rejections(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let req = PageRequest::new(query, &headers)?;
    let job = load_job(&state, &caller, &id).await?;
    let rows = state
        .reads
        .rejections_page(&job.id, req.after.as_ref(), req.fetch_limit())
        .await?;
    req.respond(
        rows,
        &format!("/v1/jobs/{}/rejections", job.id),
        |rejections, next_cursor| RejectionsPage {
            rejections,
            next_cursor,
        },
    )
}

/// A job's trace: every tool call attempt and cache answer, a page at a time.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/trace",
    tag = "rows",
    params(("id" = String, Path, description = "The job id."), PageQuery),
    responses(
        (status = 200, description = "A page of trace steps; as NDJSON when `Accept: application/x-ndjson`.",
            content(
                (TracePage = "application/json"),
                (String = "application/x-ndjson"),
            ),
            headers(("Link" = String, description = "NDJSON only: `<…>; rel=\"next\"` unless this is the last page."))),
        (status = 400, description = "Bad cursor or limit.", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid API key.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])),
)]
#[instrument(skip_all, fields(job_id = %id))]
pub(crate) async fn trace(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let req = PageRequest::new(query, &headers)?;
    let job = load_job(&state, &caller, &id).await?;
    let rows = state
        .reads
        .trace_page(&job.id, req.after.as_ref(), req.fetch_limit())
        .await?;
    req.respond(
        rows,
        &format!("/v1/jobs/{}/trace", job.id),
        |steps, next_cursor| TracePage { steps, next_cursor },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let c = (SliceId::from_stored("s_0123456789abcdef0123".into()), 42);
        let s = encode_cursor(&c);
        assert_eq!(decode_cursor(&s), Some(c));
        let pattern = regex::Regex::new(CURSOR_PATTERN).unwrap();
        assert!(pattern.is_match(&s), "{s}");
        // The pattern and the decoder agree.
        for (text, ok) in [
            (s.as_str(), true),
            ("733a.0", true),
            ("7e.4294967295", true),
            ("7e.4294967296", false),
            ("7e.007", false),
            ("", false),
            ("!!!", false),
            ("czpfMA", false),
            ("733A.1", false),
            ("20.1", false),
            ("7f.1", false),
            ("73.", false),
            (".1", false),
            ("73.x", false),
            ("73.-1", false),
            ("733.1", false),
            ("73.12345678901", false),
        ] {
            assert_eq!(decode_cursor(text).is_some(), ok, "{text}");
            assert_eq!(pattern.is_match(text), ok, "{text}");
        }
    }

    #[test]
    fn ndjson_is_chosen_by_accept() {
        let accept = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
            wants_ndjson(&h)
        };
        assert_eq!(accept("application/x-ndjson"), Some("application/x-ndjson"));
        assert_eq!(
            accept("application/json;q=0.5, application/jsonl"),
            Some("application/jsonl")
        );
        assert_eq!(accept("application/json"), None);
        assert_eq!(accept("*/*"), None);
    }

    #[test]
    fn limits_default_cap_and_refuse_zero() {
        let q = |limit| PageQuery {
            limit,
            cursor: None,
        };
        assert_eq!(q(None).limit().unwrap(), DEFAULT_LIMIT);
        assert_eq!(q(Some(MAX_LIMIT)).limit().unwrap(), MAX_LIMIT);
        assert!(q(Some(MAX_LIMIT + 1)).limit().is_err());
        assert!(q(Some(0)).limit().is_err());
    }
}
