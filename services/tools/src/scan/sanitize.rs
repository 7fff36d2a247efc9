//! Removing what the scanner found: spans cut from a definition's text, and tool
//! results sanitized per call (invisible characters removed, length capped).

use super::*;
use intent::Sentences;

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

/// The definition as a model may be shown it without what the findings found.
/// In prose (descriptions, titles) each finding's span is widened to the whole
/// sentences it touches, and those are removed: the rest of a sentence that
/// carried an instruction is no safer than the part that matched. A value the
/// model could send (an `enum` or `examples` item, a `default`, a `const`, an
/// input example) is removed whole, not edited into a value the server never
/// offered. Names and schema keys are left alone (a key cannot be stripped).
/// The caller picks which findings; the field paths are those
/// [`scan_definition`] produces.
pub fn strip_definition(def: &Value, findings: &[Finding]) -> Value {
    let mut spans: BTreeMap<&str, Vec<Range<usize>>> = BTreeMap::new();
    for f in findings {
        spans
            .entry(f.field.as_str())
            .or_default()
            .push(f.span.clone());
    }
    let mut edits: Vec<(String, String)> = Vec::new();
    let mut removals: Vec<String> = Vec::new();
    for f in text_fields(def) {
        let Some(spans) = spans.get(f.field.as_str()) else {
            continue;
        };
        match f.value {
            Some(root) => removals.push(root),
            None => {
                let sentences = Sentences::new(f.text);
                let whole: Vec<Range<usize>> = spans
                    .iter()
                    .filter(|r| r.start < r.end && r.end <= f.text.len())
                    .map(|r| sentences.around(r.start).start..sentences.around(r.end - 1).end)
                    .collect();
                edits.push((f.pointer, strip(f.text, &whole).trim().to_owned()));
            }
        }
    }
    let mut out = def.clone();
    for (pointer, text) in edits {
        if let Some(slot) = out.pointer_mut(&pointer) {
            *slot = Value::String(text);
        }
    }
    remove_values(&mut out, removals);
    out
}

/// Removes the values at `pointers` (array items and object members), the
/// later items of an array first so that each index still names its item; a
/// pointer inside another one goes with it.
fn remove_values(def: &mut Value, mut pointers: Vec<String>) {
    pointers.sort();
    pointers.dedup();
    let outer: Vec<String> = pointers
        .iter()
        .filter(|p| {
            !pointers
                .iter()
                .any(|q| q != *p && p.starts_with(&format!("{q}/")))
        })
        .cloned()
        .collect();
    let mut split: Vec<(&str, &str)> = outer.iter().filter_map(|p| p.rsplit_once('/')).collect();
    // Per parent, array indices from the highest down.
    split.sort_by(|a, b| {
        a.0.cmp(b.0)
            .then_with(|| match (a.1.parse::<usize>(), b.1.parse::<usize>()) {
                (Ok(x), Ok(y)) => y.cmp(&x),
                _ => a.1.cmp(b.1),
            })
    });
    for (parent, token) in split {
        match def.pointer_mut(parent) {
            Some(Value::Array(items)) => {
                if let Ok(i) = token.parse::<usize>()
                    && i < items.len()
                {
                    items.remove(i);
                }
            }
            Some(Value::Object(map)) => {
                map.remove(&token.replace("~1", "/").replace("~0", "~"));
            }
            _ => {}
        }
    }
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
