use super::*;

// ---------------------------------------------------------------------------------
// base64-blob

pub(super) static BASE64_RUN: LazyLock<Regex> =
    LazyLock::new(|| compile(r"[A-Za-z0-9+/_-]{20,}={0,2}"));

pub(super) fn base64_blobs(text: &str, ctx: &ScanContext, profile: &Profile, hits: &mut Vec<Hit>) {
    let mut urls = None;
    for m in BASE64_RUN.find_iter(text) {
        let run = m.as_str().trim_end_matches('=');
        let len = run.len();
        let symbols = run
            .bytes()
            .filter(|b| matches!(b, b'+' | b'/' | b'_' | b'-'))
            .count();
        // Paths, slugs and identifiers are full of separators; base64 rarely is.
        // Hex only: a digest (sha256) or an id, not a payload.
        if symbols * 8 > len || run.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let decoded = decode_base64(run)
            .and_then(|b| String::from_utf8(b).ok())
            .filter(|s| is_mostly_text(s));
        if let Some(decoded) = decoded {
            let (inner, _) = scan_hits(&decoded, ctx, profile, 1);
            if let Some(worst) = inner
                .iter()
                .filter(|h| h.severity >= Severity::Medium)
                .max_by_key(|h| h.severity)
            {
                hits.push(Hit::new(
                    BASE64,
                    Severity::High,
                    m.range(),
                    format!("base64 text \"{}\" ({})", excerpt(&decoded), worst.rule),
                ));
                continue;
            }
        }
        let mixed = run.bytes().any(|b| b.is_ascii_uppercase())
            && run.bytes().any(|b| b.is_ascii_lowercase())
            && run.bytes().any(|b| b.is_ascii_digit());
        if len >= 64 && mixed {
            // A long URL path is reported as a URL, not as base64.
            let urls = urls
                .get_or_insert_with(|| URL.find_iter(text).map(|u| u.range()).collect::<Vec<_>>());
            if urls.iter().any(|u| u.start < m.end() && m.start() < u.end) {
                continue;
            }
            hits.push(Hit::new(
                BASE64,
                Severity::Medium,
                m.range(),
                format!("{len} characters of base64"),
            ));
        }
    }
}

/// Standard or URL-safe base64, padding already trimmed.
pub(super) fn decode_base64(s: &str) -> Option<Vec<u8>> {
    if s.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for b in s.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((acc >> bits) & 0xff) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

pub(super) fn is_mostly_text(s: &str) -> bool {
    let total = s.chars().count();
    let printable = s
        .chars()
        .filter(|c| !c.is_control() || c.is_whitespace())
        .count();
    total > 0 && printable * 10 >= total * 9 && s.chars().any(char::is_alphabetic)
}

/// Builds every pattern of this module (for `tests::all_patterns_compile`).
#[cfg(test)]
pub(super) fn patterns() -> Vec<&'static Regex> {
    vec![&*BASE64_RUN]
}
