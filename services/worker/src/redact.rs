//! Secrets a browse slice types, kept out of everything the slice hands back.
//!
//! A `fill` step may type a value from `secret: NAME`. A page can copy what was
//! typed into its own text (a "confirm your input" page, or a hostile one), its
//! markup or its URL, so anything read from the page may carry it. A slice's
//! [`Redactor`] knows the values its steps type and finds them in a string in
//! any of the forms a page shows them:
//!
//! - as typed;
//! - URL-encoded (form encoding, `+` for a space; percent-encoding, `%20`; as
//!   `encodeURIComponent` writes it), and any other percent-encoding, found by
//!   decoding the string;
//! - HTML-escaped (text, attribute and full escaping, named or numeric
//!   references), found by unescaping the string.
//!
//! What finds one: an item is rejected naming the field ([`SECRET_IN_ITEM`]),
//! with the value masked in the rejection; a trace step's, audit row's or the
//! slice's error has it masked; a page snapshot is masked before a model sees
//! it; a screenshot is taken with the page's fields and text that show it
//! covered ([`trawl_browser::Session::screenshot_masked`]).
//!
//! A secret shorter than [`MIN_SECRET_CHARS`] is refused
//! ([`SECRET_TOO_SHORT`]): masking a one to three character value would mangle
//! ordinary text.

use serde_json::Value;
use trawl_core::model::Violation;
use trawl_core::ports::ToolError;

/// The code of a slice error for a secret too short to be masked.
pub const SECRET_TOO_SHORT: &str = "secret_too_short";
/// The rejection message's code of an item that carried a typed secret.
pub const SECRET_IN_ITEM: &str = "secret_in_item";
/// A secret's fewest characters.
pub const MIN_SECRET_CHARS: usize = 4;
/// What a secret is replaced by.
pub const MASK: &str = "[secret]";

/// The secrets one slice types (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct Redactor {
    secrets: Vec<Secret>,
}

#[derive(Clone)]
struct Secret {
    name: String,
    raw: String,
    /// Every form it is replaced in, longest first.
    forms: Vec<String>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Whether `value` may be typed as a secret: `Err(secret_too_short)` when it is
/// shorter than [`MIN_SECRET_CHARS`].
pub fn check_secret(name: &str, value: &str) -> Result<(), ToolError> {
    let n = value.chars().count();
    if n < MIN_SECRET_CHARS {
        return Err(ToolError::permanent(
            SECRET_TOO_SHORT,
            format!(
                "the secret {name} has {n} character(s): a secret a browse step types must have at least {MIN_SECRET_CHARS}, so it can be masked in what the slice hands back without mangling ordinary text"
            ),
        ));
    }
    Ok(())
}

impl Redactor {
    /// Adds the secret `name`'s `value`; refused when it is too short.
    pub fn add(&mut self, name: &str, value: &str) -> Result<(), ToolError> {
        check_secret(name, value)?;
        if self.secrets.iter().any(|s| s.raw == value) {
            return Ok(());
        }
        let mut forms = forms(value);
        forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
        forms.dedup();
        self.secrets.push(Secret {
            name: name.to_owned(),
            raw: value.to_owned(),
            forms,
        });
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// The values as typed (for masking them in the page).
    pub fn values(&self) -> Vec<String> {
        self.secrets.iter().map(|s| s.raw.clone()).collect()
    }

    /// The name of the first secret `text` carries, in any form.
    pub fn find(&self, text: &str) -> Option<&str> {
        if self.secrets.is_empty() || text.is_empty() {
            return None;
        }
        let decoded = decodings(text);
        self.secrets
            .iter()
            .find(|s| {
                s.forms.iter().any(|f| text.contains(f.as_str()))
                    || decoded.iter().any(|d| d.contains(s.raw.as_str()))
            })
            .map(|s| s.name.as_str())
    }

    /// `text` with every secret masked: each form found replaced by [`MASK`];
    /// one still found after that (an encoding no form spells) masks the whole
    /// text.
    pub fn redact(&self, text: &str) -> String {
        if self.find(text).is_none() {
            return text.to_owned();
        }
        let mut out = text.to_owned();
        for s in &self.secrets {
            for f in &s.forms {
                if out.contains(f.as_str()) {
                    out = out.replace(f.as_str(), MASK);
                }
            }
        }
        if self.find(&out).is_some() {
            return MASK.to_owned();
        }
        out
    }

    /// Masks in place every string of `v` (object keys too); the JSON Pointers
    /// of what was masked, with the secret's name.
    pub fn redact_value(&self, v: &mut Value) -> Vec<(String, String)> {
        let mut found = Vec::new();
        if !self.is_empty() {
            self.walk(v, String::new(), &mut found);
        }
        found
    }

    fn walk(&self, v: &mut Value, path: String, found: &mut Vec<(String, String)>) {
        match v {
            Value::String(s) => {
                if let Some(name) = self.find(s) {
                    found.push((path, name.to_owned()));
                    *s = self.redact(s);
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter_mut().enumerate() {
                    self.walk(x, format!("{path}/{i}"), found);
                }
            }
            Value::Object(m) => {
                let old = std::mem::take(m);
                for (k, mut x) in old {
                    let key = match self.find(&k) {
                        Some(name) => {
                            found.push((format!("{path}/{}", pointer_escape(&k)), name.to_owned()));
                            self.redact(&k)
                        }
                        None => k,
                    };
                    self.walk(&mut x, format!("{path}/{}", pointer_escape(&key)), found);
                    m.insert(key, x);
                }
            }
            _ => {}
        }
    }

    /// An item's data and URL checked: `None` when neither carries a secret;
    /// else the data and URL masked and one violation per field that carried
    /// one, naming the field and the secret, never the value.
    pub fn screen_item(&self, url: &str, data: &Value) -> Option<(String, Value, Vec<Violation>)> {
        if self.is_empty() {
            return None;
        }
        let mut data = data.clone();
        let found = self.redact_value(&mut data);
        let url_secret = self.find(url).map(str::to_owned);
        if found.is_empty() && url_secret.is_none() {
            return None;
        }
        let mut errors: Vec<Violation> = found
            .into_iter()
            .map(|(path, name)| Violation {
                message: format!(
                    "{SECRET_IN_ITEM}: the field {} holds the value a step typed from the secret {name}",
                    if path.is_empty() { "(the item)" } else { path.as_str() }
                ),
                path,
            })
            .collect();
        if let Some(name) = url_secret {
            errors.push(Violation {
                path: String::new(),
                message: format!(
                    "{SECRET_IN_ITEM}: the page's URL holds the value a step typed from the secret {name}"
                ),
            });
        }
        Some((self.redact(url), data, errors))
    }
}

fn pointer_escape(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

/// The forms of `v` that are replaced (see the module doc).
fn forms(v: &str) -> Vec<String> {
    let form: String = url::form_urlencoded::byte_serialize(v.as_bytes()).collect();
    let mut out = vec![
        v.to_owned(),
        form.clone(),
        form.replace('+', "%20"),
        encode_uri_component(v),
        html_escape(v, HtmlEscape::Full),
        html_escape(v, HtmlEscape::Text),
        html_escape(v, HtmlEscape::Attribute),
        html_escape(v, HtmlEscape::FullHex),
    ];
    // Lower-case hex digits.
    let lower: Vec<String> = out
        .iter()
        .filter(|f| f.contains('%'))
        .map(|f| lower_hex(f))
        .collect();
    out.extend(lower);
    out
}

/// What JavaScript's `encodeURIComponent` gives.
fn encode_uri_component(v: &str) -> String {
    let mut out = String::new();
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn lower_hex(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        out.push(c);
        if c == '%' {
            for _ in 0..2 {
                if let Some(h) = it.next() {
                    out.push(h.to_ascii_lowercase());
                }
            }
        }
    }
    out
}

#[derive(Clone, Copy)]
enum HtmlEscape {
    /// `& < > " '` (`&#39;`).
    Full,
    /// `& < > " '` (`&#x27;`).
    FullHex,
    /// A text node as a browser serializes it: `& < >`.
    Text,
    /// An attribute value as a browser serializes it: `& "`.
    Attribute,
}

fn html_escape(v: &str, how: HtmlEscape) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        let esc = match (c, how) {
            ('&', _) => "&amp;",
            ('<', HtmlEscape::Full | HtmlEscape::FullHex | HtmlEscape::Text) => "&lt;",
            ('>', HtmlEscape::Full | HtmlEscape::FullHex | HtmlEscape::Text) => "&gt;",
            ('"', HtmlEscape::Full | HtmlEscape::FullHex | HtmlEscape::Attribute) => "&quot;",
            ('\'', HtmlEscape::Full) => "&#39;",
            ('\'', HtmlEscape::FullHex) => "&#x27;",
            ('\u{a0}', _) => "&nbsp;",
            _ => {
                out.push(c);
                continue;
            }
        };
        out.push_str(esc);
    }
    out
}

/// `text` decoded every way a page may have encoded a secret in it.
fn decodings(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let has_pct = text.contains('%') || text.contains('+');
    let has_amp = text.contains('&');
    if has_pct {
        out.push(percent_decode(text, false));
        out.push(percent_decode(text, true));
    }
    if has_amp {
        let h = html_unescape(text);
        if has_pct || h.contains('%') {
            out.push(percent_decode(&h, false));
            out.push(percent_decode(&h, true));
        }
        out.push(h);
    }
    if has_pct {
        let p = percent_decode(text, true);
        if p.contains('&') {
            out.push(html_unescape(&p));
        }
    }
    out
}

fn percent_decode(s: &str, plus_is_space: bool) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(x) => {
                        out.push(x);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' if plus_is_space => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn html_unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let end = tail
            .char_indices()
            .take(12)
            .find(|(_, c)| *c == ';')
            .map(|(i, _)| i);
        let decoded = end.and_then(|e| {
            let name = &tail[1..e];
            let c = match name {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                "nbsp" => Some('\u{a0}'),
                _ => name
                    .strip_prefix("#x")
                    .or_else(|| name.strip_prefix("#X"))
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                    .or_else(|| name.strip_prefix('#').and_then(|d| d.parse().ok()))
                    .and_then(char::from_u32),
            };
            c.map(|c| (c, e))
        });
        match decoded {
            Some((c, e)) => {
                out.push(c);
                rest = &tail[e + 1..];
            }
            None => {
                out.push('&');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const SECRET: &str = "Pa55 w&rd<x>'y";

    fn redactor() -> Redactor {
        let mut r = Redactor::default();
        r.add("portal_code", SECRET).unwrap();
        r
    }

    #[test]
    fn every_form_a_page_shows_is_found_and_masked() {
        let r = redactor();
        for shown in [
            "Pa55 w&rd<x>'y",
            "Pa55+w%26rd%3Cx%3E%27y",
            "Pa55%20w%26rd%3Cx%3E%27y",
            "Pa55%20w%26rd%3Cx%3E'y",
            "pa55%20w%26rd%3cx%3e'y".replace("pa55", "Pa55").as_str(),
            "Pa55 w&amp;rd&lt;x&gt;&#39;y",
            "Pa55 w&amp;rd&lt;x&gt;'y",
            "Pa55 w&amp;rd<x>'y",
            "Pa55 w&#38;rd&#60;x&#62;&#x27;y",
            "Pa55 w&amp;rd&lt;x&gt;&apos;y",
            // Escaped markup inside a URL, and a URL inside markup.
            "Pa55%20w%26amp%3Brd%26lt%3Bx%26gt%3B'y",
        ] {
            let text = format!("You typed: {shown}!");
            assert_eq!(r.find(&text), Some("portal_code"), "{shown}");
            let masked = r.redact(&text);
            assert!(r.find(&masked).is_none(), "{shown}: {masked}");
            assert!(!masked.contains("Pa55"), "{shown}: {masked}");
        }
        // The common forms are masked in place, the rest of the text kept.
        assert_eq!(
            r.redact("http://shop.test/echo?typed=Pa55%20w%26rd%3Cx%3E'y&x=1"),
            "http://shop.test/echo?typed=[secret]&x=1"
        );
        assert_eq!(r.redact("You typed: Pa55 w&rd<x>'y"), "You typed: [secret]");
        // Ordinary text is left alone.
        assert_eq!(r.redact("Pa55 w&rd"), "Pa55 w&rd");
        assert_eq!(r.find("nothing here & 100%"), None);
    }

    #[test]
    fn an_item_with_a_secret_is_screened_naming_the_field_not_the_value() {
        let r = redactor();
        let data = json!({"title": "Confirm", "echo": {"text": format!("You typed: {SECRET}")}, "list": ["a", "Pa55+w%26rd%3Cx%3E%27y"]});
        let (url, masked, errors) = r
            .screen_item("http://h/echo?typed=Pa55%20w%26rd%3Cx%3E%27y", &data)
            .unwrap();
        assert_eq!(url, "http://h/echo?typed=[secret]");
        assert_eq!(masked["title"], "Confirm");
        assert_eq!(masked["echo"]["text"], "You typed: [secret]");
        assert_eq!(masked["list"][1], "[secret]");
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, vec!["/echo/text", "/list/1", ""]);
        for e in &errors {
            assert!(e.message.starts_with(SECRET_IN_ITEM), "{}", e.message);
            assert!(e.message.contains("portal_code"));
            assert!(r.find(&e.message).is_none());
        }
        let all = serde_json::to_string(&(
            url,
            masked,
            errors.iter().map(|e| &e.message).collect::<Vec<_>>(),
        ))
        .unwrap();
        assert!(r.find(&all).is_none(), "{all}");
        // An item without one passes.
        assert!(r.screen_item("http://h/", &json!({"a": "b"})).is_none());
        // A key that is the secret is masked too.
        let mut v = json!({SECRET: 1});
        assert_eq!(r.redact_value(&mut v).len(), 1);
        assert_eq!(v, json!({"[secret]": 1}));
    }

    #[test]
    fn secrets_shorter_than_four_characters_are_refused() {
        let mut r = Redactor::default();
        for short in ["", "a", "ab", "é€!"] {
            let e = r.add("pin", short).unwrap_err();
            assert_eq!(e.code, SECRET_TOO_SHORT);
            assert!(e.message.contains("the secret pin has"), "{}", e.message);
        }
        assert!(r.add("pin", "1234").is_ok());
        assert!(r.add("pin2", "ééé€").is_ok(), "characters, not bytes");
    }
}
