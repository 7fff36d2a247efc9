//! `GET /v1/jobs/{id}/artifacts` and `GET /v1/jobs/{id}/artifacts/{name}`: the files
//! a job's slices produced (a browser slice's screenshots), listed and served.
//!
//! A listing is read whole (a job has a file or two per browser slice) and carries
//! no bytes: each entry links to its file. A file is served with the media type it
//! was stored with, and with headers that keep a browser from running it as a page
//! of this origin (`nosniff`, a sandboxing CSP): what a slice stored came from the
//! web.

use std::fmt::Write as _;

use axum::extract::{Path, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Serialize;
use tracing::instrument;
use trawl_core::model::{JobId, SliceId};
use trawl_core::ports::ArtifactInfo;
use utoipa::ToSchema;

use crate::error::{ApiError, Problem};
use crate::jobs::load_job;
use crate::state::{ApiState, Caller};

/// What a stored media type that is not a valid header value is served as.
const FALLBACK_TYPE: &str = "application/octet-stream";

/// A job's files.
#[derive(Debug, Serialize, ToSchema)]
pub struct ArtifactsList {
    /// By time produced, then name.
    pub artifacts: Vec<ArtifactView>,
}

/// One file of a job, without its bytes.
#[derive(Debug, Serialize, ToSchema)]
pub struct ArtifactView {
    #[schema(value_type = String, example = "job_0193b4c1a2f04e9d2c7a1b3e5f60")]
    pub job_id: JobId,
    /// The slice that produced it; null for a file of the job as a whole.
    #[schema(value_type = Option<String>)]
    pub slice_id: Option<SliceId>,
    /// Unique within the job.
    #[schema(example = "screenshot.png")]
    pub name: String,
    #[schema(example = "image/png")]
    pub content_type: String,
    /// Its length in bytes.
    pub size: u64,
    /// When it was produced, in milliseconds since the epoch.
    pub at_ms: i64,
    /// Where its bytes are: `/v1/jobs/{id}/artifacts/{name}`, the name
    /// percent-encoded.
    pub url: String,
}

impl From<ArtifactInfo> for ArtifactView {
    fn from(a: ArtifactInfo) -> ArtifactView {
        ArtifactView {
            url: artifact_url(&a.job_id, &a.name),
            job_id: a.job_id,
            slice_id: a.slice_id,
            name: a.name,
            content_type: a.content_type,
            size: a.size,
            at_ms: a.at_ms,
        }
    }
}

/// The path of an artifact, its name one percent-encoded segment.
pub fn artifact_url(job: &JobId, name: &str) -> String {
    format!("/v1/jobs/{job}/artifacts/{}", encode_segment(name))
}

/// `s` as one path segment: every byte but RFC 3986's unreserved ones
/// percent-encoded (a `/` too, so the name stays one segment).
fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A job's files, without their bytes.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/artifacts",
    operation_id = "list_artifacts",
    tag = "rows",
    params(("id" = String, Path, description = "The job id.")),
    responses(
        (status = 200, description = "The job's files (screenshots of its browser slices), by time produced then name, each with the `url` of its bytes.", body = ArtifactsList),
        (status = 401, description = "No valid API key.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])),
)]
#[instrument(skip_all, fields(job_id = %id))]
pub(crate) async fn list(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<ArtifactsList>, ApiError> {
    let job = load_job(&state, &caller, &id).await?;
    let artifacts = state.reads.artifacts(&job.id).await?;
    Ok(Json(ArtifactsList {
        artifacts: artifacts.into_iter().map(ArtifactView::from).collect(),
    }))
}

/// One file of a job, as stored.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/artifacts/{name}",
    operation_id = "get_artifact",
    tag = "rows",
    params(
        ("id" = String, Path, description = "The job id."),
        ("name" = String, Path, description = "The file's name, percent-encoded."),
    ),
    responses(
        (status = 200, description = "The file's bytes, with the media type it was stored with.", body = Vec<u8>, content_type = "application/octet-stream"),
        (status = 401, description = "No valid API key.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job, or no file of that name.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])),
)]
#[instrument(skip_all, fields(job_id = %id, name = %name))]
pub(crate) async fn get(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path((id, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let job = load_job(&state, &caller, &id).await?;
    let artifact = state
        .reads
        .artifact(&job.id, &name)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("artifact {name:?} of job {}", job.id)))?;
    let content_type = HeaderValue::from_str(&artifact.content_type)
        .unwrap_or_else(|_| HeaderValue::from_static(FALLBACK_TYPE));
    Ok((
        [
            (header::CONTENT_TYPE, content_type),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("default-src 'none'; sandbox"),
            ),
        ],
        artifact.data,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_encoded_segment() {
        let job = JobId::generate(1_700_000_000_000, 1);
        assert_eq!(
            artifact_url(&job, "shot-1_a.png"),
            format!("/v1/jobs/{job}/artifacts/shot-1_a.png")
        );
        assert_eq!(encode_segment("a b/c?d#e%"), "a%20b%2Fc%3Fd%23e%25");
        assert_eq!(encode_segment("größe"), "gr%C3%B6%C3%9Fe");
    }
}
