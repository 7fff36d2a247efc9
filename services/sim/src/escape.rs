//! Escaping for the hand-written HTML, JSON and Markdown of the generated pages.

use std::borrow::Cow;

/// Text or attribute value safe inside HTML.
pub(crate) fn html(s: &str) -> Cow<'_, str> {
    if !s.contains(['&', '<', '>', '"', '\'']) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A JSON string literal (with quotes) that is also safe inside a `<script>` element.
pub(crate) fn json(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Text safe in Markdown link text and paragraphs.
pub(crate) fn markdown(s: &str) -> Cow<'_, str> {
    const SPECIAL: [char; 9] = ['\\', '[', ']', '*', '_', '`', '<', '>', '#'];
    if !s.contains(SPECIAL) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if SPECIAL.contains(&c) {
            out.push('\\');
        }
        out.push(c);
    }
    Cow::Owned(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn escapes_html() {
        assert_eq!(html("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        assert!(matches!(html("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn json_literals_round_trip_and_never_close_a_script() {
        for s in [
            "plain",
            "q\"uo\\te",
            "</script><b>",
            "tab\tnew\nline",
            "ünï €",
        ] {
            let lit = json(s);
            assert!(!lit.contains("</"), "{lit}");
            let back: String = serde_json::from_str(&lit).unwrap();
            assert_eq!(back, s);
        }
    }

    #[test]
    fn escapes_markdown() {
        assert_eq!(markdown("a [b] *c*"), "a \\[b\\] \\*c\\*");
    }
}
