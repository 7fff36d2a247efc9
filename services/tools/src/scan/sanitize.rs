//! Removing what the scanner found: spans cut from a definition's text, and tool
//! results sanitized per call (invisible characters removed, length capped).

use super::*;

/// The text with the given spans removed. Spans may overlap; a span out of range,
/// reversed or not on char boundaries is ignored.
pub fn strip(text: &str, spans: &[Range<usize>]) -> String {
    let mut spans: Vec<Range<usize>> = spans
        .iter()
        .filter(|r| {
            r.start < r.end
                && r.end <= text.len()
                && text.is_char_boundary(r.start)
                && text.is_char_boundary(r.end)
        })
        .cloned()
        .collect();
    spans.sort_by_key(|r| (r.start, r.end));
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    for r in spans {
        if r.start > pos {
            out.push_str(&text[pos..r.start]);
        }
        pos = pos.max(r.end);
    }
    out.push_str(&text[pos.min(text.len())..]);
    out
}

/// Returns the definition with the findings' spans removed from the string fields
/// they name (the field paths [`scan_definition`] produces). Used for the "strip"
/// policy; the caller picks which findings (e.g. severity ≥ medium) to strip.
pub fn strip_definition(def: &Value, findings: &[Finding]) -> Value {
    let mut spans: BTreeMap<&str, Vec<Range<usize>>> = BTreeMap::new();
    for f in findings {
        spans
            .entry(f.field.as_str())
            .or_default()
            .push(f.span.clone());
    }
    let edits: Vec<(String, String)> = text_fields(def)
        .into_iter()
        .filter_map(|f| {
            let spans = spans.get(f.field.as_str())?;
            Some((f.pointer, strip(f.text, spans)))
        })
        .collect();
    let mut out = def.clone();
    for (pointer, text) in edits {
        if let Some(slot) = out.pointer_mut(&pointer) {
            *slot = Value::String(text);
        }
    }
    out
}

/// A tool result made safe to hand to the model.
pub struct Sanitized {
    pub text: String,
    /// How many invisible characters were removed.
    pub invisible_removed: usize,
    /// The original byte length, when the text was cut.
    pub truncated_from: Option<usize>,
}

/// Whether `text` holds a character [`sanitize_result`] would remove.
pub fn has_invisible(text: &str) -> bool {
    !invisible_runs(text).is_empty()
}

/// Tool results: removes invisible and direction-changing characters (the set of the
/// `invisible-unicode` rule: U+200B–U+200F, U+202A–U+202E, U+2060–U+2064,
/// U+2066–U+206F, U+180E, U+FEFF, tag characters U+E0000–U+E007F, with the same
/// exceptions for emoji and script joiners) and caps the size at `max_bytes`, cut on
/// a char boundary, appending `"\n[trawl: result cut at N of M bytes]"` (N kept,
/// M the original length). The note is added after the cut, so a cut text is up to
/// about 50 bytes longer than `max_bytes`.
pub fn sanitize_result(text: &str, max_bytes: usize) -> Sanitized {
    let runs = invisible_runs(text);
    let invisible_removed = runs.iter().map(|r| text[r.clone()].chars().count()).sum();
    let mut clean = if runs.is_empty() {
        text.to_owned()
    } else {
        strip(text, &runs)
    };
    let mut truncated_from = None;
    if clean.len() > max_bytes {
        let cut = floor_char_boundary(&clean, max_bytes);
        clean.truncate(cut);
        let _ = write!(
            clean,
            "\n[trawl: result cut at {cut} of {} bytes]",
            text.len()
        );
        truncated_from = Some(text.len());
    }
    Sanitized {
        text: clean,
        invisible_removed,
        truncated_from,
    }
}
