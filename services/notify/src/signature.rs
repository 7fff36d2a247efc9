//! Request signatures: Slack's (inbound, on interactions) and trawl's own (outbound,
//! on the generic webhook). Pure functions over bytes; no clock of their own.
//!
//! **Slack** signs every request it sends with the app's signing secret:
//! `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:{timestamp}:{raw body}">`, and
//! `X-Slack-Request-Timestamp: <unix seconds>`. [`verify_slack`] checks both over
//! the raw body, before anything parses it; the MAC is compared in constant time
//! (`ring::hmac::verify`), and a timestamp more than [`MAX_SKEW_S`] away from now
//! is refused, so a captured request cannot be replayed later.
//!
//! **The outgoing webhook** is signed the way Stripe and Standard Webhooks sign:
//! `X-Trawl-Timestamp: <unix seconds>`, `X-Trawl-Signature: v1=<hex HMAC-SHA256 of
//! "{timestamp}.{raw body}">` with the configured secret ([`sign_webhook`]).

use ring::hmac;

/// How far a request's timestamp may be from now, in seconds (Slack's advice: 5 minutes).
pub const MAX_SKEW_S: i64 = 300;

/// Slack's header with the signature.
pub const SLACK_SIGNATURE: &str = "x-slack-signature";
/// Slack's header with the time of signing, in Unix seconds.
pub const SLACK_TIMESTAMP: &str = "x-slack-request-timestamp";
/// The outgoing webhook's headers.
pub const TRAWL_SIGNATURE: &str = "x-trawl-signature";
pub const TRAWL_TIMESTAMP: &str = "x-trawl-timestamp";

/// Why a request's signature is refused. Every variant is answered the same way
/// (401, nothing done); the text is for the log and the problem's detail, and
/// never says anything about the secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the {0} header is missing")]
    Missing(&'static str),
    #[error("the {0} header is malformed")]
    Malformed(&'static str),
    #[error("the request timestamp is {0} s away from now, more than {MAX_SKEW_S} s")]
    Stale(i64),
    #[error("the signature does not match the body")]
    Mismatch,
}

/// `v0=` and the hex HMAC-SHA256 of `v0:{timestamp}:{body}` under `secret`: what
/// Slack sends in `X-Slack-Signature`.
pub fn sign_slack(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    format!(
        "v0={}",
        hex::encode(slack_mac(secret, timestamp, body).as_ref())
    )
}

fn slack_mac(secret: &[u8], timestamp: i64, body: &[u8]) -> hmac::Tag {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let mut ctx = hmac::Context::with_key(&key);
    ctx.update(format!("v0:{timestamp}:").as_bytes());
    ctx.update(body);
    ctx.sign()
}

/// Checks a request from Slack: `timestamp` and `signature` are the values of
/// [`SLACK_TIMESTAMP`] and [`SLACK_SIGNATURE`] (`None` when absent), `body` the
/// raw bytes as received, `now_s` the current Unix time.
pub fn verify_slack(
    secret: &[u8],
    timestamp: Option<&[u8]>,
    signature: Option<&[u8]>,
    body: &[u8],
    now_s: i64,
) -> Result<(), SignatureError> {
    let timestamp = timestamp.ok_or(SignatureError::Missing("X-Slack-Request-Timestamp"))?;
    let signature = signature.ok_or(SignatureError::Missing("X-Slack-Signature"))?;
    // Digits only: `+5`, ` 5` or `5.0` would be read by some parsers and not by
    // others, and the signed string must be exactly the header's text.
    let ts: i64 = std::str::from_utf8(timestamp)
        .ok()
        .filter(|t| !t.is_empty() && t.len() <= 12 && t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse().ok())
        .ok_or(SignatureError::Malformed("X-Slack-Request-Timestamp"))?;
    let skew = now_s.saturating_sub(ts).saturating_abs();
    if skew > MAX_SKEW_S {
        return Err(SignatureError::Stale(skew));
    }
    let tag = signature
        .strip_prefix(b"v0=")
        .filter(|hexed| hexed.len() == 64)
        .and_then(|hexed| hex::decode(hexed).ok())
        .ok_or(SignatureError::Malformed("X-Slack-Signature"))?;
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let mut signed = Vec::with_capacity(body.len() + 16);
    signed.extend_from_slice(b"v0:");
    signed.extend_from_slice(timestamp);
    signed.push(b':');
    signed.extend_from_slice(body);
    // Constant time in the tag.
    hmac::verify(&key, &signed, &tag).map_err(|_| SignatureError::Mismatch)
}

/// `v1=` and the hex HMAC-SHA256 of `{timestamp}.{body}` under `secret`: the
/// outgoing webhook's `X-Trawl-Signature`.
pub fn sign_webhook(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let mut ctx = hmac::Context::with_key(&key);
    ctx.update(format!("{timestamp}.").as_bytes());
    ctx.update(body);
    format!("v1={}", hex::encode(ctx.sign().as_ref()))
}

/// Checks an outgoing webhook's signature, as a receiver would (for tests and
/// for receivers written in Rust): same rules as [`verify_slack`].
pub fn verify_webhook(
    secret: &[u8],
    timestamp: &str,
    signature: &str,
    body: &[u8],
    now_s: i64,
) -> Result<(), SignatureError> {
    let ts: i64 = timestamp
        .parse()
        .map_err(|_| SignatureError::Malformed("X-Trawl-Timestamp"))?;
    let skew = now_s.saturating_sub(ts).saturating_abs();
    if skew > MAX_SKEW_S {
        return Err(SignatureError::Stale(skew));
    }
    let tag = signature
        .strip_prefix("v1=")
        .and_then(|h| hex::decode(h).ok())
        .ok_or(SignatureError::Malformed("X-Trawl-Signature"))?;
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let mut signed = format!("{ts}.").into_bytes();
    signed.extend_from_slice(body);
    hmac::verify(&key, &signed, &tag).map_err(|_| SignatureError::Mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"8f742231b10e8888abcd99yyyzzz85a5";
    const NOW: i64 = 1_531_420_618;
    const BODY: &[u8] = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";

    /// The sample secret, timestamp and body of Slack's guide "Verifying requests
    /// from Slack"; the expected value was computed apart, with Python's `hmac`.
    #[test]
    fn slacks_documented_example_signs_and_verifies() {
        let want = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        assert_eq!(sign_slack(SECRET, NOW, BODY), want);
        assert_eq!(
            verify_slack(
                SECRET,
                Some(b"1531420618"),
                Some(want.as_bytes()),
                BODY,
                NOW
            ),
            Ok(())
        );
    }

    fn check(
        ts: Option<&str>,
        sig: Option<&str>,
        body: &[u8],
        now: i64,
    ) -> Result<(), SignatureError> {
        verify_slack(
            SECRET,
            ts.map(str::as_bytes),
            sig.map(str::as_bytes),
            body,
            now,
        )
    }

    #[test]
    fn anything_altered_is_refused() {
        let sig = sign_slack(SECRET, NOW, BODY);
        let ts = NOW.to_string();
        assert_eq!(check(Some(&ts), Some(&sig), BODY, NOW), Ok(()));
        // The body, one byte changed or added.
        let mut altered = BODY.to_vec();
        altered[10] ^= 1;
        assert_eq!(
            check(Some(&ts), Some(&sig), &altered, NOW),
            Err(SignatureError::Mismatch)
        );
        let mut longer = BODY.to_vec();
        longer.push(b'&');
        assert_eq!(
            check(Some(&ts), Some(&sig), &longer, NOW),
            Err(SignatureError::Mismatch)
        );
        // Another timestamp (within the window) with the old signature.
        let later = (NOW + 1).to_string();
        assert_eq!(
            check(Some(&later), Some(&sig), BODY, NOW),
            Err(SignatureError::Mismatch)
        );
        // Another secret.
        let other = sign_slack(b"another secret", NOW, BODY);
        assert_eq!(
            check(Some(&ts), Some(&other), BODY, NOW),
            Err(SignatureError::Mismatch)
        );
        // One hex digit of the signature.
        let mut flipped = sig.clone().into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
        let flipped = String::from_utf8(flipped).unwrap();
        assert_eq!(
            check(Some(&ts), Some(&flipped), BODY, NOW),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn missing_and_garbled_headers_are_refused() {
        let sig = sign_slack(SECRET, NOW, BODY);
        let ts = NOW.to_string();
        assert_eq!(
            check(None, Some(&sig), BODY, NOW),
            Err(SignatureError::Missing("X-Slack-Request-Timestamp"))
        );
        assert_eq!(
            check(Some(&ts), None, BODY, NOW),
            Err(SignatureError::Missing("X-Slack-Signature"))
        );
        for bad_ts in [
            "",
            "+1531420618",
            " 1531420618",
            "1531420618.0",
            "-5",
            "x",
            "99999999999999",
        ] {
            assert_eq!(
                check(Some(bad_ts), Some(&sig), BODY, NOW),
                Err(SignatureError::Malformed("X-Slack-Request-Timestamp")),
                "{bad_ts:?}"
            );
        }
        let hexed = &sig[3..];
        for bad_sig in [
            hexed.to_owned(),
            format!("v1={hexed}"),
            format!("v0={}", &hexed[1..]),
            format!("v0={hexed}0"),
            "v0=zz".repeat(13),
            String::new(),
        ] {
            assert_eq!(
                check(Some(&ts), Some(&bad_sig), BODY, NOW),
                Err(SignatureError::Malformed("X-Slack-Signature")),
                "{bad_sig:?}"
            );
        }
    }

    #[test]
    fn timestamps_more_than_five_minutes_off_are_refused() {
        for (ts, ok) in [
            (NOW - MAX_SKEW_S, true),
            (NOW + MAX_SKEW_S, true),
            (NOW - MAX_SKEW_S - 1, false),
            (NOW + MAX_SKEW_S + 1, false),
            (0, false),
        ] {
            let sig = sign_slack(SECRET, ts, BODY);
            let got = check(Some(&ts.to_string()), Some(&sig), BODY, NOW);
            if ok {
                assert_eq!(got, Ok(()), "{ts}");
            } else {
                assert!(
                    matches!(got, Err(SignatureError::Stale(s)) if s == (NOW - ts).abs()),
                    "{ts}: {got:?}"
                );
            }
        }
    }

    #[test]
    fn webhook_signatures_cover_timestamp_and_body() {
        let body = br#"{"type":"approval.requested"}"#;
        let sig = sign_webhook(b"whsec", NOW, body);
        assert!(sig.starts_with("v1=") && sig.len() == 67, "{sig}");
        assert_eq!(
            verify_webhook(b"whsec", &NOW.to_string(), &sig, body, NOW),
            Ok(())
        );
        assert_eq!(
            verify_webhook(b"whsec", &(NOW + 1).to_string(), &sig, body, NOW),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify_webhook(b"whsec", &NOW.to_string(), &sig, b"{}", NOW),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify_webhook(b"other", &NOW.to_string(), &sig, body, NOW),
            Err(SignatureError::Mismatch)
        );
        // Not Slack's scheme: the same key over the same body signs differently.
        assert_ne!(sig[3..], sign_slack(b"whsec", NOW, body)[3..]);
    }
}
