//! Every way a request can fail, and the one place that turns it into an RFC 9457
//! `application/problem+json` answer.
//!
//! Handlers return [`ApiError`]; its variants follow what the client does next (fix
//! the request, authenticate, try again later). Causes that are ours, not the
//! client's (a store that fails, a task that panics), are logged here with their
//! whole cause chain, once, and answered without internals.

use std::error::Error as StdError;
use std::fmt::Write as _;

use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use trawl_core::ports::PortError;
use trawl_core::spec::SpecErrors;
use utoipa::ToSchema;

/// Where problem types live: `type` is this followed by the problem's slug
/// (`…/invalid-spec`). Clients match on it; it is an identifier, not something
/// they are meant to fetch (RFC 9457 §3.1.1).
pub const PROBLEM_BASE: &str = "https://trawl.dev/problems/";

/// The media type of every error answer.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request itself is wrong: a bad query parameter, cursor or header.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The body is not a JSON or YAML document.
    #[error("malformed body: {0}")]
    MalformedBody(String),
    /// The body is a document but not a valid job spec.
    #[error("invalid job spec ({} error(s))", .0.0.len())]
    InvalidSpec(SpecErrors),
    /// No worker of this deployment can run the job (a research job without a
    /// model worker); the text names what is missing.
    #[error("no worker can run the job: {0}")]
    Unrunnable(String),
    /// The `Idempotency-Key` was first used with another body.
    #[error("idempotency key reused with another request body")]
    IdempotencyKeyReuse,
    /// The body's media type is not one the route reads.
    #[error("unsupported media type {0:?}")]
    UnsupportedMediaType(Option<String>),
    /// A state-changing request with a media type a page may send cross-site
    /// without a preflight (`text/plain`, a form): refused on JSON routes.
    #[error("a form or text/plain body ({0}) on a JSON route")]
    FormContentType(String),
    /// The `Host` is not one this server answers as (DNS rebinding, or a
    /// reverse proxy's name not configured in `TRAWL_ALLOWED_HOSTS`).
    #[error("foreign Host {0:?}")]
    ForeignHost(String),
    /// A browser request from another site that would change state.
    #[error("cross-site request: {0}")]
    CrossSite(String),
    /// A refusal answered in plain text below the handlers (an extractor's,
    /// rmcp's), given its problem+json with the same status and words.
    #[error("refused ({status}): {detail}")]
    Refused { status: StatusCode, detail: String },
    /// The body is larger than the limit (in bytes).
    #[error("body larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// No bearer credential (`presented: false`), or one that is not accepted
    /// (`why` says which check failed, never anything of the credential).
    #[error("unauthorized")]
    Unauthorized {
        presented: bool,
        why: Option<String>,
    },
    /// The caller may not do this whatever its scopes (another tenant's usage).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// A valid credential without the scope this request needs (OAuth tokens).
    #[error("insufficient scope: {0} needed")]
    InsufficientScope(&'static str),
    /// A signed request (a Slack interaction) whose signature is missing, stale or
    /// wrong: 401 without a bearer challenge; the text says which check failed.
    #[error("bad signature: {0}")]
    BadSignature(String),
    /// An access token in the query string: refused wherever it is (OAuth 2.1
    /// §5.1.1, MCP `basic/authorization`), before anything else is looked at.
    #[error("access token in the query string")]
    TokenInQuery,
    #[error("not found: {0}")]
    NotFound(String),
    #[error("method not allowed")]
    MethodNotAllowed,
    /// The resource is not in a state that allows this (a finished job, a decided
    /// approval).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The caller sent more than its rate allows (job submissions, `/mcp`), or
    /// holds as many of something as it may: it may try again after
    /// `retry_after` seconds (`Retry-After`).
    #[error("too many requests; retry after {retry_after} s")]
    TooManyRequests { retry_after: u64 },
    /// The job is over one of its tenant's limits: 429 with `Retry-After` for a
    /// limit that frees itself in time (in flight, concurrent, per day or month),
    /// 422 for a job too big to ever fit; the body names the limit.
    #[error("{0}")]
    OverLimit(Box<trawl_core::tenant::OverLimit>),
    /// The request's body did not arrive within the server's body read timeout:
    /// answered 408 and the connection closed.
    #[error("the request body did not arrive in time")]
    RequestTimeout,
    /// A backend is down or busy: the client may try again.
    #[error("backend unavailable")]
    Unavailable(#[source] PortError),
    /// Readiness: the named dependencies do not answer.
    #[error("not ready: {}", .0.join(", "))]
    NotReady(Vec<&'static str>, serde_json::Value),
    /// Our fault: logged with its cause chain, answered 500 without details.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

/// One bad field of a job spec.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct FieldError {
    /// Dotted path to the field (`searches.geos[1]`); empty for the whole job.
    pub path: String,
    pub message: String,
}

/// An RFC 9457 problem details object.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Problem {
    /// Identifies the kind of problem: `https://trawl.dev/problems/<slug>`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Short summary of the kind of problem; the same for every occurrence.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong this time, for a human.
    pub detail: String,
    /// Every field error of an invalid job spec (`invalid-spec` only).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub errors: Vec<FieldError>,
    /// Readiness of each dependency (`not-ready` only): `ok`, `unavailable` or
    /// `timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub checks: Option<serde_json::Value>,
    /// The limit a job is over (`over-limit` only): its `name`, the `limit`
    /// (dollars for `usd_*`), what the tenant has `used` and what the job
    /// `requested`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub limit: Option<serde_json::Value>,
}

impl From<PortError> for ApiError {
    fn from(e: PortError) -> ApiError {
        match e {
            PortError::Unavailable(_) => ApiError::Unavailable(e),
            // A handler checks that what it names exists before it acts, so a
            // `NotFound` from deeper down is a broken invariant, and its text may
            // be a backend's: logged, not shown.
            PortError::NotFound(_) | PortError::Corrupt(_) | PortError::Conflict(_) => {
                ApiError::Internal(anyhow::Error::new(e))
            }
        }
    }
}

impl ApiError {
    /// The problem a body that could not be read becomes: too large, or broken off.
    pub fn from_body(rejection: &BytesRejection, limit: usize) -> ApiError {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge(limit)
        } else {
            ApiError::BadRequest(format!(
                "the body could not be read: {}",
                rejection.body_text()
            ))
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) | ApiError::MalformedBody(_) | ApiError::TokenInQuery => {
                StatusCode::BAD_REQUEST
            }
            ApiError::InsufficientScope(_)
            | ApiError::Forbidden(_)
            | ApiError::ForeignHost(_)
            | ApiError::CrossSite(_) => StatusCode::FORBIDDEN,
            ApiError::InvalidSpec(_) | ApiError::IdempotencyKeyReuse | ApiError::Unrunnable(_) => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ApiError::UnsupportedMediaType(_) | ApiError::FormContentType(_) => {
                StatusCode::UNSUPPORTED_MEDIA_TYPE
            }
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unauthorized { .. } | ApiError::BadSignature(_) => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::OverLimit(o) if o.retry_after.is_some() => StatusCode::TOO_MANY_REQUESTS,
            ApiError::OverLimit(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            ApiError::Unavailable(_) | ApiError::NotReady(..) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Refused { status, .. } => *status,
        }
    }

    /// The slug of the problem type and its title.
    fn kind(&self) -> (&'static str, &'static str) {
        match self {
            ApiError::BadRequest(_) => ("bad-request", "The request is not valid"),
            ApiError::MalformedBody(_) => {
                ("malformed-body", "The body is not a JSON or YAML document")
            }
            ApiError::InvalidSpec(_) => ("invalid-spec", "The job spec is not valid"),
            ApiError::Unrunnable(_) => ("no-capable-worker", "No worker can run the job"),
            ApiError::IdempotencyKeyReuse => (
                "idempotency-key-reuse",
                "The idempotency key was used for another request",
            ),
            ApiError::UnsupportedMediaType(_) | ApiError::FormContentType(_) => (
                "unsupported-media-type",
                "The body's media type is not supported",
            ),
            ApiError::ForeignHost(_) => (
                "foreign-host",
                "The request names a host this server does not answer as",
            ),
            ApiError::CrossSite(_) => (
                "cross-site",
                "A page of another site may not change anything here",
            ),
            ApiError::PayloadTooLarge(_) => ("payload-too-large", "The body is too large"),
            ApiError::Unauthorized { .. } => ("unauthorized", "Authentication is required"),
            ApiError::InsufficientScope(_) => ("insufficient-scope", "The token lacks a scope"),
            ApiError::Forbidden(_) => ("forbidden", "The caller may not do this"),
            ApiError::BadSignature(_) => ("bad-signature", "The request signature is not valid"),
            ApiError::TokenInQuery => (
                "token-in-query",
                "Access tokens are not accepted in the query string",
            ),
            ApiError::NotFound(_) => ("not-found", "Not found"),
            ApiError::MethodNotAllowed => ("method-not-allowed", "Method not allowed"),
            ApiError::Conflict(_) => (
                "conflict",
                "The request conflicts with the resource's state",
            ),
            ApiError::TooManyRequests { .. } => ("too-many-requests", "Too many requests"),
            ApiError::OverLimit(_) => ("over-limit", "The job is over a limit of its tenant"),
            ApiError::RequestTimeout => ("request-timeout", "The request was not sent in time"),
            ApiError::Unavailable(_) => ("unavailable", "A backend is unavailable"),
            ApiError::NotReady(..) => ("not-ready", "The service is not ready"),
            ApiError::Internal(_) => ("internal", "Internal server error"),
            ApiError::Refused { status, .. } => match status.as_u16() {
                // The kind of the variant a handler would have answered with.
                400 => ApiError::BadRequest(String::new()).kind(),
                404 => ApiError::NotFound(String::new()).kind(),
                405 => ApiError::MethodNotAllowed.kind(),
                415 => ApiError::UnsupportedMediaType(None).kind(),
                406 => ("not-acceptable", "No answer in an accepted media type"),
                422 => ("unprocessable", "The request cannot be processed"),
                _ => ("refused", "The request was refused"),
            },
        }
    }

    fn detail(&self) -> String {
        match self {
            ApiError::BadRequest(d)
            | ApiError::MalformedBody(d)
            | ApiError::Conflict(d)
            | ApiError::Forbidden(d) => d.clone(),
            ApiError::BadSignature(why) => format!("{why}; nothing was done"),
            ApiError::NotFound(what) => format!("no {what}"),
            ApiError::InvalidSpec(errs) => format!(
                "the job spec has {} error(s); see `errors`; nothing was stored",
                errs.0.len()
            ),
            ApiError::Unrunnable(why) => format!("{why}; nothing was stored"),
            ApiError::IdempotencyKeyReuse => "this Idempotency-Key was first sent with another \
                 request body; use a new key for a new request"
                .to_owned(),
            ApiError::UnsupportedMediaType(got) => format!(
                "send the job spec as application/json or application/yaml (got {})",
                got.as_deref().unwrap_or("no Content-Type")
            ),
            ApiError::PayloadTooLarge(limit) => {
                format!("the body is larger than the limit of {limit} bytes")
            }
            ApiError::FormContentType(got) => format!(
                "a request that changes state takes application/json (or a job spec as \
                 application/yaml), not {got}: a browser form or text/plain body is refused \
                 so that no other site can act here; nothing was done"
            ),
            ApiError::ForeignHost(host) => format!(
                "this server does not answer as {host:?}; if it is reached by that name \
                 (a reverse proxy, a public name), add it to TRAWL_ALLOWED_HOSTS; nothing was done"
            ),
            ApiError::CrossSite(why) => format!(
                "{why}; add the page's origin to TRAWL_ALLOWED_ORIGINS if it is yours; nothing was done"
            ),
            ApiError::Unauthorized {
                presented: false, ..
            } => "send an access token or API key as `Authorization: Bearer <token>`".to_owned(),
            ApiError::Unauthorized { why: Some(why), .. } => why.clone(),
            ApiError::Unauthorized { why: None, .. } => "the credential is not valid".to_owned(),
            ApiError::InsufficientScope(scope) => {
                format!("this request needs the scope {scope}")
            }
            ApiError::TokenInQuery => "send the token in the Authorization header, never in \
                 the URL; this request was not processed"
                .to_owned(),
            ApiError::MethodNotAllowed => "this route does not take that method".to_owned(),
            ApiError::TooManyRequests { retry_after } => format!(
                "this caller is over its limit; nothing was done; try again in {retry_after} s"
            ),
            ApiError::OverLimit(o) => match o.retry_after {
                Some(after) => format!(
                    "{o}; nothing was stored; try again in {} s",
                    after.as_secs().max(1)
                ),
                None => format!("{o}; nothing was stored; make the job smaller"),
            },
            ApiError::RequestTimeout => "the body did not arrive in time; nothing was done; \
                 the connection is closed"
                .to_owned(),
            ApiError::Unavailable(_) => {
                "a backend did not answer; try again in a few seconds".to_owned()
            }
            ApiError::NotReady(failed, _) => format!("not answering: {}", failed.join(", ")),
            ApiError::Internal(_) => {
                "something went wrong on our side; it has been logged".to_owned()
            }
            ApiError::Refused { detail, .. } => detail.clone(),
        }
    }

    /// The problem details of this error.
    pub fn problem(&self) -> Problem {
        let (slug, title) = self.kind();
        let errors = match self {
            ApiError::InvalidSpec(errs) => errs
                .0
                .iter()
                .map(|e| FieldError {
                    path: e.path.clone(),
                    message: e.reason.clone(),
                })
                .collect(),
            _ => Vec::new(),
        };
        let checks = match self {
            ApiError::NotReady(_, checks) => Some(checks.clone()),
            _ => None,
        };
        let limit = match self {
            ApiError::OverLimit(o) => Some(serde_json::json!({
                "name": o.limit,
                "limit": o.allowed,
                "used": o.used,
                "requested": o.requested,
            })),
            _ => None,
        };
        Problem {
            kind: format!("{PROBLEM_BASE}{slug}"),
            title: title.to_owned(),
            status: self.status().as_u16(),
            detail: self.detail(),
            errors,
            checks,
            limit,
        }
    }
}

/// `a: b: c` for an error and its sources.
pub fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let _ = write!(out, ": {s}");
        cur = s.source();
    }
    out
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match &self {
            ApiError::Internal(e) => tracing::error!(error = %format!("{e:#}"), "request failed"),
            ApiError::Unavailable(e) => tracing::warn!(error = %chain(e), "backend unavailable"),
            _ => tracing::debug!(error = %self, "request refused"),
        }
        let problem = self.problem();
        let body = serde_json::to_vec(&problem).unwrap_or_else(|_| b"{}".to_vec());
        let mut res = (self.status(), body).into_response();
        let headers = res.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        match self {
            ApiError::Unauthorized { presented, why } => {
                // RFC 6750 §3: no error code when no credential was sent.
                let challenge = match (presented, why) {
                    (false, _) => r#"Bearer realm="trawl""#.to_owned(),
                    (true, Some(why)) => format!(
                        r#"Bearer realm="trawl", error="invalid_token", error_description="{}""#,
                        quoted(&why)
                    ),
                    (true, None) => r#"Bearer realm="trawl", error="invalid_token""#.to_owned(),
                };
                if let Ok(v) = HeaderValue::from_str(&challenge) {
                    headers.insert(header::WWW_AUTHENTICATE, v);
                }
            }
            ApiError::InsufficientScope(scope) => {
                let challenge =
                    format!(r#"Bearer realm="trawl", error="insufficient_scope", scope="{scope}""#);
                if let Ok(v) = HeaderValue::from_str(&challenge) {
                    headers.insert(header::WWW_AUTHENTICATE, v);
                }
            }
            ApiError::TokenInQuery => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static(r#"Bearer realm="trawl", error="invalid_request""#),
                );
            }
            ApiError::Unavailable(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            }
            // The rest of the body is never read, so the connection cannot
            // carry another request: say so, or a client may reuse it and
            // see it drop (RFC 9110 §15.5.14, RFC 9112 §9.6).
            ApiError::PayloadTooLarge(_) | ApiError::RequestTimeout => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            ApiError::TooManyRequests { retry_after } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
            }
            ApiError::OverLimit(o) => {
                if let Some(after) = o.retry_after {
                    headers.insert(
                        header::RETRY_AFTER,
                        HeaderValue::from(after.as_secs().max(1)),
                    );
                }
            }
            _ => {}
        }
        res
    }
}

/// `s` made safe inside a quoted-string of a header: no quotes, backslashes or
/// control characters.
fn quoted(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii() && !c.is_ascii_control())
        .map(|c| if c == '"' || c == '\\' { '\'' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use trawl_core::spec::SpecError;

    #[test]
    fn internal_errors_keep_their_cause_out_of_the_answer() {
        let e = ApiError::Internal(anyhow::anyhow!("secret table jobs is locked"));
        let p = e.problem();
        assert_eq!(p.status, 500);
        assert!(!p.detail.contains("secret"), "{}", p.detail);
    }

    #[test]
    fn spec_errors_are_all_listed() {
        let e = ApiError::InvalidSpec(SpecErrors(vec![
            SpecError {
                path: "name".into(),
                reason: "required".into(),
            },
            SpecError {
                path: "pages.geos[0]".into(),
                reason: "bad".into(),
            },
        ]));
        let p = e.problem();
        assert_eq!(p.status, 422);
        assert_eq!(p.kind, "https://trawl.dev/problems/invalid-spec");
        assert_eq!(p.errors.len(), 2);
        assert_eq!(p.errors[1].path, "pages.geos[0]");
    }

    #[test]
    fn limits_say_when_to_come_back_and_a_late_body_closes_the_connection() {
        let res = ApiError::TooManyRequests { retry_after: 3 }.into_response();
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(res.headers()[header::RETRY_AFTER], "3");
        assert_eq!(res.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        let res = ApiError::RequestTimeout.into_response();
        assert_eq!(res.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(res.headers()[header::CONNECTION], "close");
    }

    #[test]
    fn port_errors_map_by_what_the_client_can_do() {
        assert_eq!(
            ApiError::from(PortError::Unavailable("down".into())).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            ApiError::from(PortError::Corrupt("bad row".into())).status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
