//! Which failures are worth another attempt. Pure, so every rule is a table test.
//!
//! - Requests refused before unlocking get a real status: 401 (bad API key) and
//!   400 (unknown zone, invalid URL, parameter errors) are permanent.
//! - 429 (`sr_rate_limit`), 5xx and any `x-brd-error` of the peer or the unlock
//!   attempt are transient; `Retry-After` (seconds) is passed on.
//! - Codes that mean the account or zone cannot do this (`premium`,
//!   `feature_not_active`, `ub_bad_endpoint_robots`, `zone_not_found`,
//!   `client_10100`) are permanent whatever the status.
//! - A 200 whose `x-brd-status-code` reports the target's own 404/410 is
//!   permanent; the target's 429/5xx is transient.
//! - Connect and read timeouts and broken connections are transient.

use std::time::Duration;

use reqwest::header::HeaderMap;
use trawl_core::ports::ToolError;

const PERMANENT_CODES: &[&str] = &[
    "premium",
    "feature_not_active",
    "ub_bad_endpoint_robots",
    "zone_not_found",
    "client_10100",
];

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// `None` when the response is a success to hand back; the error otherwise.
pub fn response(status: u16, headers: &HeaderMap, body: &[u8]) -> Option<ToolError> {
    let brd_error = header(headers, "x-brd-error").or_else(|| header(headers, "x-luminati-error"));
    let brd_code = header(headers, "x-brd-error-code")
        .or_else(|| header(headers, "x-brd-err-code"))
        .or_else(|| header(headers, "x-luminati-error-code"));
    let snippet = || {
        let s = String::from_utf8_lossy(&body[..body.len().min(200)])
            .trim()
            .to_owned();
        brd_error.map(str::to_owned).unwrap_or(s)
    };
    let code = |fallback: String| brd_code.map(str::to_owned).unwrap_or(fallback);

    if brd_code.is_some_and(|c| PERMANENT_CODES.contains(&c)) {
        return Some(ToolError::permanent(code(String::new()), snippet()));
    }
    let mut err = match status {
        200..=299 => {
            if brd_error.is_some() {
                ToolError::transient(code("brd_error".into()), snippet())
            } else {
                match header(headers, "x-brd-status-code").and_then(|s| s.parse::<u16>().ok()) {
                    Some(t @ (429 | 500..=599)) => ToolError::transient(
                        format!("target_http_{t}"),
                        format!("the target answered {t}"),
                    ),
                    Some(t @ 400..=499) => ToolError::permanent(
                        format!("target_http_{t}"),
                        format!("the target answered {t}"),
                    ),
                    _ => return None,
                }
            }
        }
        401 | 403 | 407 => ToolError::permanent(
            code(format!("http_{status}")),
            format!("authentication failed: {}", snippet()),
        ),
        429 => ToolError::transient(code("http_429".into()), snippet()),
        408 | 500..=599 => ToolError::transient(code(format!("http_{status}")), snippet()),
        _ => ToolError::permanent(code(format!("http_{status}")), snippet()),
    };
    err.retry_after = header(headers, "retry-after")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs);
    Some(err)
}

/// A request that got no response.
pub fn transport(e: reqwest::Error) -> ToolError {
    if e.is_timeout() {
        ToolError::transient("timeout", "no answer within the timeout")
    } else if e.is_connect() {
        ToolError::transient("connect", format!("cannot connect: {e}"))
    } else if e.is_builder() {
        ToolError::permanent("bad_request", e.to_string())
    } else {
        ToolError::transient("transport", e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use reqwest::header::{HeaderName, HeaderValue};
    use trawl_core::retry::ErrorClass::{Permanent, Transient};

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    type Case<'a> = (
        u16,
        &'a [(&'a str, &'a str)],
        Option<(trawl_core::retry::ErrorClass, &'a str)>,
    );

    #[test]
    fn classification_table() {
        let cases: &[Case<'_>] = &[
            (200, &[], None),
            (200, &[("x-brd-status-code", "200")], None),
            (401, &[], Some((Permanent, "http_401"))),
            (403, &[], Some((Permanent, "http_403"))),
            (
                400,
                &[("x-brd-error", "zone not found")],
                Some((Permanent, "http_400")),
            ),
            (
                400,
                &[("x-brd-error-code", "premium")],
                Some((Permanent, "premium")),
            ),
            (404, &[], Some((Permanent, "http_404"))),
            (
                429,
                &[("x-brd-error-code", "sr_rate_limit")],
                Some((Transient, "sr_rate_limit")),
            ),
            (429, &[], Some((Transient, "http_429"))),
            (500, &[], Some((Transient, "http_500"))),
            (
                502,
                &[("x-brd-error", "Failed to establish connection with peer")],
                Some((Transient, "http_502")),
            ),
            (
                502,
                &[
                    ("x-brd-error", "blocked"),
                    ("x-brd-error-code", "reject_block"),
                ],
                Some((Transient, "reject_block")),
            ),
            (
                502,
                &[("x-brd-error-code", "feature_not_active")],
                Some((Permanent, "feature_not_active")),
            ),
            (503, &[], Some((Transient, "http_503"))),
            (
                200,
                &[
                    ("x-brd-error", "peer error"),
                    ("x-brd-err-code", "peer_timeout"),
                ],
                Some((Transient, "peer_timeout")),
            ),
            (
                200,
                &[("x-luminati-error", "Request rate too high")],
                Some((Transient, "brd_error")),
            ),
            (
                200,
                &[("x-brd-status-code", "404")],
                Some((Permanent, "target_http_404")),
            ),
            (
                200,
                &[("x-brd-status-code", "503")],
                Some((Transient, "target_http_503")),
            ),
        ];
        for (status, h, want) in cases {
            let got = response(*status, &headers(h), b"body").map(|e| (e.class, e.code));
            let want = want.map(|(c, code)| (c, code.to_owned()));
            assert_eq!(got, want, "status {status} headers {h:?}");
        }
    }

    #[test]
    fn retry_after_is_honored_in_seconds() {
        let e = response(429, &headers(&[("retry-after", "7")]), b"").unwrap();
        assert_eq!(e.retry_after, Some(Duration::from_secs(7)));
        let e = response(
            503,
            &headers(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]),
            b"",
        )
        .unwrap();
        assert_eq!(
            e.retry_after, None,
            "dates are not seconds; the backoff decides"
        );
    }

    #[test]
    fn the_message_carries_the_brd_error() {
        let e = response(
            502,
            &headers(&[("x-brd-error", "Failed to establish connection with peer")]),
            b"",
        )
        .unwrap();
        assert_eq!(e.message, "Failed to establish connection with peer");
    }
}
