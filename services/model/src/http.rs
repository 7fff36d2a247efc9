//! One JSON POST with a timeout per attempt, retries of transient failures and the
//! mapping of HTTP failures to [`ModelError`]. Both wires share it.
//!
//! Transient (retried): 408, 429, 529, every 5xx, connection failures and
//! timeouts. Each retry waits what the server asked for in `retry-after-ms` /
//! `retry-after` (seconds), capped at the configured maximum delay, else a
//! jittered exponential backoff. This is the policy of Anthropic's and OpenAI's
//! own SDKs (both retry 408, 429 and 5xx and honour `retry-after`), described in
//! <https://docs.anthropic.com/en/api/errors> (429 `rate_limit_error`, 500
//! `api_error`, 529 `overloaded_error`) and the OpenAI error codes guide.
//! Everything else is permanent and returned at once.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::Value;

use crate::ModelError;

/// Largest response body read; a model answer is far smaller.
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
/// Longest provider error message kept.
const MAX_MESSAGE_CHARS: usize = 1000;

/// How often and how patiently to try one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RetryPolicy {
    /// Attempts in all, at least 1.
    pub max_attempts: u32,
    /// First backoff (before jitter).
    pub min_delay: Duration,
    /// Longest wait between attempts, `retry-after` included.
    pub max_delay: Duration,
}

/// A failed attempt, with what the server asked us to wait.
#[derive(Debug)]
struct Failure {
    error: ModelError,
    retry_after: Option<Duration>,
}

impl From<ModelError> for Failure {
    fn from(error: ModelError) -> Failure {
        Failure {
            error,
            retry_after: None,
        }
    }
}

/// A reqwest client whose per-request timeout is `timeout` (the whole attempt:
/// connect, send, and reading the answer).
pub(crate) fn build_client(timeout: Duration) -> Result<reqwest::Client, ModelError> {
    trawl_telemetry::http::client()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .user_agent(concat!("trawl/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| {
            ModelError::config(format!(
                "cannot build the HTTP client (is a rustls crypto provider installed?): {e}"
            ))
        })
}

/// POSTs `body` as JSON to `url` with `headers`, retrying per `policy`, and
/// returns the parsed 2xx body.
pub(crate) async fn post_json(
    http: &reqwest::Client,
    policy: RetryPolicy,
    url: &str,
    mut headers: HeaderMap,
    body: &Value,
) -> Result<Value, ModelError> {
    let payload = serde_json::to_vec(body).map_err(|e| {
        ModelError::new(
            "bad_request",
            format!("cannot encode the request: {e}"),
            None,
            false,
        )
    })?;
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));

    let backoff = ExponentialBuilder::default()
        .with_min_delay(policy.min_delay)
        .with_max_delay(policy.max_delay)
        .with_max_times(policy.max_attempts.max(1).saturating_sub(1) as usize)
        .with_jitter();

    (|| attempt(http, url, &headers, &payload))
        .retry(backoff)
        .when(|f: &Failure| f.error.transient)
        .adjust(|f: &Failure, next| retry_delay(f.retry_after, next, policy.max_delay))
        .notify(|f: &Failure, wait| {
            tracing::warn!(
                code = %f.error.code,
                status = ?f.error.status,
                wait_ms = wait.as_millis() as u64,
                message = %f.error.message,
                "model call failed, retrying"
            );
        })
        .await
        .map_err(|f| f.error)
}

/// The wait before the next attempt: `None` when the backoff is exhausted, else
/// the server's `retry-after` capped at `max`, else the backoff's own delay.
pub(crate) fn retry_delay(
    retry_after: Option<Duration>,
    backoff: Option<Duration>,
    max: Duration,
) -> Option<Duration> {
    let next = backoff?;
    Some(retry_after.map_or(next, |ra| ra.min(max)))
}

async fn attempt(
    http: &reqwest::Client,
    url: &str,
    headers: &HeaderMap,
    payload: &[u8],
) -> Result<Value, Failure> {
    let mut resp = http
        .post(url)
        .headers(headers.clone())
        .body(payload.to_vec())
        .send()
        .await
        .map_err(transport_error)?;
    let status = resp.status().as_u16();
    let retry_after = parse_retry_after(resp.headers());

    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(transport_error)? {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(ModelError::new(
                "bad_response",
                format!("response body over {MAX_RESPONSE_BYTES} bytes"),
                Some(status),
                false,
            )
            .into());
        }
        body.extend_from_slice(&chunk);
    }

    if (200..300).contains(&status) {
        return serde_json::from_slice(&body).map_err(|e| {
            ModelError::new(
                "bad_response",
                format!("response is not JSON: {e}: {}", snippet(&body)),
                Some(status),
                false,
            )
            .into()
        });
    }
    Err(Failure {
        error: status_error(status, &body),
        retry_after,
    })
}

fn transport_error(e: reqwest::Error) -> Failure {
    let error = if e.is_builder() {
        ModelError::config(format!("invalid request: {e}"))
    } else if e.is_timeout() {
        ModelError::new("timeout", format!("no answer in time: {e}"), None, true)
    } else {
        // Connect failures, resets, a body cut short: the server may be back soon.
        ModelError::new("connection", error_chain(&e), None, true)
    };
    error.into()
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The error of a non-2xx answer: code and transience from the status (and the
/// Anthropic error type when it says `overloaded_error`), message from the body.
pub(crate) fn status_error(status: u16, body: &[u8]) -> ModelError {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let error_type = parsed
        .as_ref()
        .and_then(|v| v.pointer("/error/type"))
        .and_then(Value::as_str);
    let (code, transient) = match status {
        _ if error_type == Some("overloaded_error") => ("overloaded", true),
        529 => ("overloaded", true),
        429 => ("rate_limited", true),
        408 => ("timeout", true),
        500..=599 => ("server_error", true),
        400 | 422 => ("bad_request", false),
        401 => ("auth", false),
        403 => ("permission_denied", false),
        404 => ("not_found", false),
        413 => ("request_too_large", false),
        _ => ("http_error", false),
    };
    let message = parsed
        .as_ref()
        .and_then(error_message)
        .unwrap_or_else(|| snippet(body));
    ModelError::new(code, truncate(message), Some(status), transient)
}

/// The message of an error body: Anthropic and OpenAI `{"error":{"message"}}`,
/// Ollama and llama.cpp `{"error":"..."}`, or a top-level `message`.
fn error_message(v: &Value) -> Option<String> {
    if let Some(m) = v.pointer("/error/message").and_then(Value::as_str) {
        return Some(m.to_owned());
    }
    if let Some(m) = v.get("error").and_then(Value::as_str) {
        return Some(m.to_owned());
    }
    v.get("message").and_then(Value::as_str).map(str::to_owned)
}

/// `retry-after-ms` (OpenAI) or `retry-after` in seconds, possibly fractional.
/// An HTTP date is ignored (the backoff applies).
pub(crate) fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| -> Option<f64> {
        let v: f64 = headers.get(name)?.to_str().ok()?.trim().parse().ok()?;
        (v.is_finite() && v >= 0.0).then_some(v)
    };
    if let Some(ms) = number("retry-after-ms") {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    number("retry-after").and_then(|s| Duration::try_from_secs_f64(s).ok())
}

fn snippet(body: &[u8]) -> String {
    truncate(String::from_utf8_lossy(body).into_owned())
}

fn truncate(mut s: String) -> String {
    if let Some((i, _)) = s.char_indices().nth(MAX_MESSAGE_CHARS) {
        s.truncate(i);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn retry_after_in_seconds_or_milliseconds() {
        assert_eq!(
            parse_retry_after(&headers(&[("retry-after", "7")])),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            parse_retry_after(&headers(&[("retry-after", "0.5")])),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            parse_retry_after(&headers(&[("retry-after", "7"), ("retry-after-ms", "250")])),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            parse_retry_after(&headers(&[(
                "retry-after",
                "Wed, 21 Oct 2015 07:28:00 GMT"
            )])),
            None
        );
        assert_eq!(parse_retry_after(&headers(&[("retry-after", "-3")])), None);
        assert_eq!(parse_retry_after(&HeaderMap::new()), None);
    }

    #[test]
    fn retry_after_is_capped_and_backoff_exhaustion_wins() {
        let max = Duration::from_secs(10);
        let backoff = Some(Duration::from_millis(300));
        assert_eq!(
            retry_delay(Some(Duration::from_secs(3600)), backoff, max),
            Some(max)
        );
        assert_eq!(
            retry_delay(Some(Duration::ZERO), backoff, max),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_delay(None, backoff, max), backoff);
        assert_eq!(retry_delay(Some(Duration::from_secs(1)), None, max), None);
    }

    #[test]
    fn statuses_map_to_codes() {
        let anthropic =
            |t: &str| format!(r#"{{"type":"error","error":{{"type":"{t}","message":"m {t}"}}}}"#);
        let e = status_error(529, anthropic("overloaded_error").as_bytes());
        assert_eq!(
            (e.code.as_str(), e.transient, e.status),
            ("overloaded", true, Some(529))
        );
        assert_eq!(e.message, "m overloaded_error");
        let e = status_error(429, anthropic("rate_limit_error").as_bytes());
        assert_eq!((e.code.as_str(), e.transient), ("rate_limited", true));
        let e = status_error(503, b"<html>bad gateway</html>");
        assert_eq!((e.code.as_str(), e.transient), ("server_error", true));
        assert_eq!(e.message, "<html>bad gateway</html>");
        let e = status_error(400, anthropic("invalid_request_error").as_bytes());
        assert_eq!((e.code.as_str(), e.transient), ("bad_request", false));
        let e = status_error(
            401,
            br#"{"error":{"message":"Incorrect API key","type":"invalid_request_error"}}"#,
        );
        assert_eq!((e.code.as_str(), e.transient), ("auth", false));
        assert_eq!(e.message, "Incorrect API key");
        let e = status_error(404, br#"{"error":"model 'x' not found"}"#);
        assert_eq!(
            (e.code.as_str(), e.message.as_str()),
            ("not_found", "model 'x' not found")
        );
        let e = status_error(418, b"");
        assert_eq!((e.code.as_str(), e.transient), ("http_error", false));
    }

    #[test]
    fn long_messages_are_truncated_on_a_char_boundary() {
        let long = "é".repeat(MAX_MESSAGE_CHARS + 10);
        let t = truncate(long);
        assert_eq!(t.chars().count(), MAX_MESSAGE_CHARS + 1);
        assert!(t.ends_with('…'));
    }
}
