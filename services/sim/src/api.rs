//! The HTTP surface: `POST /request` and `GET /__sim/stats`.
//!
//! A request goes through three steps, each in its own function:
//! 1. [`App::check`] turns headers and body into a [`Target`] or a [`Rejection`]
//!    (401 before anything else, then 400s, as the Direct API does before unlocking);
//! 2. a fault may replace the answer (only for authorized, well-formed requests);
//! 3. [`Target::render`] builds the page.
//!
//! Every outcome is counted and mapped to a response in one place, [`respond`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use url::Url;

use crate::config::{Fault, SimConfig};
use crate::product::ProductPage;
use crate::serp::{Search, SearchError};
use crate::stats::{Counters, SimStats, bump};

/// Largest request body accepted; a real body is a few hundred bytes.
pub const BODY_LIMIT: usize = 64 * 1024;

const X_BRD_ERROR: HeaderName = HeaderName::from_static("x-brd-error");
const X_BRD_ERROR_CODE: HeaderName = HeaderName::from_static("x-brd-error-code");
const X_BRD_STATUS_CODE: HeaderName = HeaderName::from_static("x-brd-status-code");

const HTML: &str = "text/html; charset=utf-8";
const MARKDOWN: &str = "text/markdown; charset=utf-8";
const JSON: &str = "application/json";
const TEXT: &str = "text/plain; charset=utf-8";

/// State shared by every request.
pub(crate) struct App {
    pub config: SimConfig,
    pub counters: Arc<Counters>,
    /// SHA-256 of the expected token, so the comparison takes the same time for
    /// every wrong token.
    token_digest: Option<[u8; 32]>,
    /// Fired at shutdown: ends held requests and latency waits early.
    pub shutdown: CancellationToken,
}

impl App {
    pub fn new(config: SimConfig, counters: Arc<Counters>, shutdown: CancellationToken) -> App {
        let token_digest = config
            .token
            .as_deref()
            .map(|t| Sha256::digest(t.as_bytes()).into());
        App {
            config,
            counters,
            token_digest,
            shutdown,
        }
    }
}

pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/request", post(request))
        .route("/__sim/stats", get(stats))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(app)
}

async fn stats(State(app): State<Arc<App>>) -> Json<SimStats> {
    Json(app.counters.snapshot())
}

/// The body of `POST /request`. Fields the simulator does not use (`method`,
/// `headers`, `body`, ...) are accepted and ignored: every page is a GET.
#[derive(Debug, Deserialize)]
struct RequestBody {
    zone: Option<String>,
    url: Option<String>,
    format: Option<String>,
    data_format: Option<String>,
    country: Option<String>,
}

/// `format`: the page itself, or a JSON envelope around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Raw,
    Json,
}

/// `data_format`: the page as served, or converted to Markdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DataFormat {
    AsIs,
    Markdown,
}

/// A checked request, ready to render.
#[derive(Debug)]
pub(crate) struct Target {
    kind: TargetKind,
    format: Format,
    data_format: DataFormat,
    /// The url as sent, echoed by the SERP JSON.
    original_url: String,
}

#[derive(Debug)]
enum TargetKind {
    Search(Search),
    Product { url: Url, country: String },
}

/// Hosts under this suffix are down: every request for them fails as an
/// unreachable target does (502 with `x-brd-error`), however often it is tried.
/// A simulator convention, for tests of slices that never succeed.
pub const DOWN_HOST_SUFFIX: &str = ".down.test";

impl Target {
    fn is_down(&self) -> bool {
        match &self.kind {
            TargetKind::Product { url, .. } => url
                .host_str()
                .is_some_and(|h| h.ends_with(DOWN_HOST_SUFFIX)),
            TargetKind::Search(_) => false,
        }
    }
}

/// A request refused before any unlocking.
#[derive(Debug, PartialEq)]
pub(crate) enum Rejection {
    /// No usable bearer token: 401, plain text, no `x-brd-*` headers.
    Unauthorized,
    /// 413: the body exceeds [`BODY_LIMIT`].
    TooLarge,
    /// 400 with `x-brd-error`.
    BadRequest {
        message: String,
        brd_error: &'static str,
    },
}

impl Rejection {
    fn bad(brd_error: &'static str, message: impl Into<String>) -> Rejection {
        Rejection::BadRequest {
            message: message.into(),
            brd_error,
        }
    }
}

/// A rendered answer.
pub(crate) struct Page {
    content_type: &'static str,
    body: String,
}

enum Outcome {
    Page(Page),
    Fault(Fault),
    Rejected(Rejection),
    /// Rendering failed; cannot happen with the types serialized here.
    Internal,
}

async fn request(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    bump(&app.counters.requests);
    let outcome = match app.check(&headers, body) {
        Err(rejection) => Outcome::Rejected(rejection),
        Ok(target) if target.is_down() => Outcome::Fault(Fault::BadGateway),
        Ok(target) => match app.roll_fault() {
            Some(fault) => Outcome::Fault(fault),
            None => match target.render() {
                Ok(page) => Outcome::Page(page),
                Err(e) => {
                    tracing::error!(error = %e, "rendering a page failed");
                    Outcome::Internal
                }
            },
        },
    };
    if let Outcome::Fault(Fault::Timeout) = outcome {
        bump(&app.counters.timeouts);
        return app.hang().await;
    }
    app.wait(app.config.latency).await;
    respond(&app, outcome)
}

/// Counts the outcome and turns it into the wire response.
fn respond(app: &App, outcome: Outcome) -> Response {
    let c = &app.counters;
    match outcome {
        Outcome::Page(page) => {
            bump(&c.ok);
            (
                StatusCode::OK,
                [
                    (CONTENT_TYPE, HeaderValue::from_static(page.content_type)),
                    (X_BRD_STATUS_CODE, HeaderValue::from_static("200")),
                ],
                page.body,
            )
                .into_response()
        }
        Outcome::Fault(Fault::RateLimited) => {
            bump(&c.rate_limited);
            (
                StatusCode::TOO_MANY_REQUESTS,
                [
                    (CONTENT_TYPE, HeaderValue::from_static(TEXT)),
                    (X_BRD_ERROR, HeaderValue::from_static("rate limit exceeded")),
                    (X_BRD_ERROR_CODE, HeaderValue::from_static("sr_rate_limit")),
                    (X_BRD_STATUS_CODE, HeaderValue::from_static("429")),
                    (RETRY_AFTER, HeaderValue::from(app.config.retry_after_secs)),
                ],
                "rate limit exceeded\n",
            )
                .into_response()
        }
        Outcome::Fault(Fault::BadGateway) => {
            bump(&c.bad_gateway);
            bad_gateway("Failed to establish connection with peer", "reject_block")
        }
        Outcome::Fault(Fault::Timeout) => {
            // Handled by `App::hang` before we get here; answered like an expired hang.
            bad_gateway("page load timed out", "domcontentloaded_event_timeout")
        }
        Outcome::Rejected(rejection) => {
            bump(&c.rejected);
            tracing::debug!(?rejection, "request rejected");
            match rejection {
                Rejection::Unauthorized => (
                    StatusCode::UNAUTHORIZED,
                    [(CONTENT_TYPE, HeaderValue::from_static(TEXT))],
                    "Unauthorized: send a valid API key as Authorization: Bearer <key>\n",
                )
                    .into_response(),
                Rejection::TooLarge => (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    [
                        (CONTENT_TYPE, HeaderValue::from_static(TEXT)),
                        (
                            X_BRD_ERROR,
                            HeaderValue::from_static("request body too large"),
                        ),
                    ],
                    format!("request body exceeds {BODY_LIMIT} bytes\n"),
                )
                    .into_response(),
                Rejection::BadRequest { message, brd_error } => (
                    StatusCode::BAD_REQUEST,
                    [
                        (CONTENT_TYPE, HeaderValue::from_static(TEXT)),
                        (X_BRD_ERROR, HeaderValue::from_static(brd_error)),
                    ],
                    message + "\n",
                )
                    .into_response(),
            }
        }
        Outcome::Internal => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(CONTENT_TYPE, HeaderValue::from_static(TEXT))],
            "internal simulator error\n",
        )
            .into_response(),
    }
}

fn bad_gateway(message: &'static str, code: &'static str) -> Response {
    (
        StatusCode::BAD_GATEWAY,
        [
            (CONTENT_TYPE, HeaderValue::from_static(TEXT)),
            (X_BRD_ERROR, HeaderValue::from_static(message)),
            (X_BRD_ERROR_CODE, HeaderValue::from_static(code)),
            (X_BRD_STATUS_CODE, HeaderValue::from_static("502")),
        ],
        format!("{message}\n"),
    )
        .into_response()
}

impl App {
    /// Authorization first, then the body, as the Direct API does.
    pub fn check(
        &self,
        headers: &HeaderMap,
        body: Result<Bytes, BytesRejection>,
    ) -> Result<Target, Rejection> {
        self.authorize(headers)?;
        let body = body.map_err(|e| match e.status() {
            StatusCode::PAYLOAD_TOO_LARGE => Rejection::TooLarge,
            _ => Rejection::bad(
                "invalid request body",
                format!("cannot read the request body: {e}"),
            ),
        })?;
        let req: RequestBody = serde_json::from_slice(&body).map_err(|e| {
            Rejection::bad(
                "invalid request body",
                format!("request body is not a valid JSON request: {e}"),
            )
        })?;
        self.target(req)
    }

    fn authorize(&self, headers: &HeaderMap) -> Result<(), Rejection> {
        let token = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .filter(|token| !token.is_empty())
            .ok_or(Rejection::Unauthorized)?;
        match &self.token_digest {
            None => Ok(()),
            Some(expected) => {
                let got: [u8; 32] = Sha256::digest(token.as_bytes()).into();
                // Constant time over the digests: no early exit on the first difference.
                let diff = got
                    .iter()
                    .zip(expected)
                    .fold(0u8, |acc, (a, b)| acc | (a ^ b));
                if diff == 0 {
                    Ok(())
                } else {
                    Err(Rejection::Unauthorized)
                }
            }
        }
    }

    fn target(&self, req: RequestBody) -> Result<Target, Rejection> {
        let zone = req
            .zone
            .filter(|z| !z.is_empty())
            .ok_or_else(|| Rejection::bad("zone is required", "zone is required"))?;
        let raw_url = req
            .url
            .filter(|u| !u.is_empty())
            .ok_or_else(|| Rejection::bad("url is required", "url is required"))?;
        let is_serp = if zone == self.config.serp_zone {
            true
        } else if zone == self.config.unlocker_zone {
            false
        } else {
            return Err(Rejection::bad(
                "zone not found",
                format!("zone \"{zone}\" not found"),
            ));
        };
        let format = match req.format.as_deref() {
            None | Some("raw") => Format::Raw,
            Some("json") => Format::Json,
            Some(other) => {
                return Err(Rejection::bad(
                    "invalid format",
                    format!("format \"{other}\" is not one of raw, json"),
                ));
            }
        };
        let data_format = match req.data_format.as_deref() {
            None | Some("") => DataFormat::AsIs,
            Some("markdown") => DataFormat::Markdown,
            Some("screenshot") => {
                return Err(Rejection::bad(
                    "invalid data_format",
                    "data_format \"screenshot\" is not simulated",
                ));
            }
            Some(other) => {
                return Err(Rejection::bad(
                    "invalid data_format",
                    format!("data_format \"{other}\" is not one of markdown, screenshot"),
                ));
            }
        };
        let country = match req.country.as_deref() {
            None | Some("") => "us".to_owned(),
            Some(c) if c.len() == 2 && c.bytes().all(|b| b.is_ascii_alphabetic()) => {
                c.to_ascii_lowercase()
            }
            Some(other) => {
                return Err(Rejection::bad(
                    "invalid country",
                    format!("country \"{other}\" is not a two-letter ISO 3166-1 code"),
                ));
            }
        };
        let url = Url::parse(&raw_url)
            .ok()
            .filter(|u| {
                matches!(u.scheme(), "http" | "https")
                    && u.host_str().is_some_and(|h| !h.is_empty())
            })
            .ok_or_else(|| {
                Rejection::bad(
                    "invalid url",
                    format!("url \"{raw_url}\" is not an absolute http(s) URL"),
                )
            })?;
        let kind = if is_serp {
            match Search::parse(&url, &country) {
                Ok(search) => TargetKind::Search(search),
                Err(SearchError::NotASearchEngine) => {
                    return Err(Rejection::bad(
                        "url is not a supported search engine",
                        format!(
                            "zone \"{zone}\" is a SERP zone: url must be a Google or Bing search URL"
                        ),
                    ));
                }
                Err(SearchError::NoQuery) => {
                    return Err(Rejection::bad(
                        "search query is missing",
                        "search url has no q parameter",
                    ));
                }
            }
        } else {
            TargetKind::Product { url, country }
        };
        Ok(Target {
            kind,
            format,
            data_format,
            original_url: raw_url,
        })
    }

    /// The fault replacing this answer, drawn afresh for every request.
    fn roll_fault(&self) -> Option<Fault> {
        let faults = &self.config.faults;
        if faults.total() <= 0.0 {
            return None;
        }
        faults.pick(fastrand::f64())
    }

    /// Holds a request without answering, as an unlocker stuck on a slow peer. The
    /// caller's own timeout normally ends it first; at shutdown it ends at once.
    async fn hang(&self) -> Response {
        tokio::select! {
            () = tokio::time::sleep(self.config.hang) => {
                bad_gateway("page load timed out", "domcontentloaded_event_timeout")
            }
            () = self.shutdown.cancelled() => {
                (StatusCode::SERVICE_UNAVAILABLE, [(CONTENT_TYPE, HeaderValue::from_static(TEXT))], "simulator shutting down\n")
                    .into_response()
            }
        }
    }

    /// Sleeps `d`, or less if the simulator is shutting down.
    async fn wait(&self, d: Duration) {
        if d.is_zero() {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(d) => {}
            () = self.shutdown.cancelled() => {}
        }
    }
}

impl Target {
    fn render(&self) -> Result<Page, serde_json::Error> {
        let page = match (&self.kind, self.data_format) {
            (TargetKind::Search(s), _) if s.parsed => Page {
                content_type: JSON,
                body: s.json(&self.original_url)?,
            },
            (TargetKind::Search(s), DataFormat::AsIs) => Page {
                content_type: HTML,
                body: s.html(),
            },
            (TargetKind::Search(s), DataFormat::Markdown) => Page {
                content_type: MARKDOWN,
                body: s.markdown(),
            },
            (TargetKind::Product { url, country }, df) => {
                let p = ProductPage::new(url, country);
                match df {
                    DataFormat::AsIs => Page {
                        content_type: HTML,
                        body: p.html(),
                    },
                    DataFormat::Markdown => Page {
                        content_type: MARKDOWN,
                        body: p.markdown(),
                    },
                }
            }
        };
        match self.format {
            Format::Raw => Ok(page),
            Format::Json => envelope(page),
        }
    }
}

/// `format: "json"`: the target's answer wrapped as `{status_code, headers, body}`.
fn envelope(page: Page) -> Result<Page, serde_json::Error> {
    #[derive(Serialize)]
    struct Envelope<'a> {
        status_code: u16,
        headers: BTreeMap<&'static str, &'a str>,
        body: &'a str,
    }
    let body = serde_json::to_string(&Envelope {
        status_code: 200,
        headers: BTreeMap::from([("content-type", page.content_type)]),
        body: &page.body,
    })?;
    Ok(Page {
        content_type: JSON,
        body,
    })
}
