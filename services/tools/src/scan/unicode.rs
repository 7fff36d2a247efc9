use super::*;

// ---------------------------------------------------------------------------------
// invisible-unicode

/// The invisible and direction-changing characters of the `invisible-unicode` rule
/// and of [`sanitize_result`].
pub(super) fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{200B}'..='\u{200F}'       // zero-width space, non-joiner, joiner, LRM, RLM
        | '\u{202A}'..='\u{202E}'     // bidi embeddings and overrides
        | '\u{2060}'..='\u{2064}'     // word joiner, invisible math operators
        | '\u{2066}'..='\u{206F}'     // bidi isolates, deprecated format characters
        | '\u{180E}'                  // Mongolian vowel separator
        | '\u{FEFF}'                  // zero-width no-break space (BOM)
        | '\u{E0000}'..='\u{E007F}' // tag characters
    )
}

pub(super) fn is_emoji(c: char) -> bool {
    matches!(c,
        '\u{1F000}'..='\u{1FAFF}'
        | '\u{2300}'..='\u{23FF}'
        | '\u{2600}'..='\u{27BF}'
        | '\u{2B00}'..='\u{2BFF}'
        | '\u{FE0F}'
        | '\u{20E3}'
        | '\u{00A9}'
        | '\u{00AE}'
        | '\u{203C}'
        | '\u{2049}'
        | '\u{3030}'
        | '\u{303D}'
    )
}

/// Maximal runs of invisible characters, except those that are part of ordinary text.
pub(super) fn invisible_runs(text: &str) -> Vec<Range<usize>> {
    let bytes = text.as_bytes();
    let mut runs = Vec::new();
    let mut i = 0;
    // Every invisible character is encoded in UTF-8 with one of these lead bytes
    // (U+180E: E1; U+2000–U+2FFF: E2; U+FEFF: EF; tags U+E0000–: F3), so the text
    // is searched for them (memchr, vectorized) and decoded only there: pages are
    // mostly ASCII.
    let mut next_e1 = memchr::memchr(0xE1, bytes);
    loop {
        if next_e1.is_some_and(|p| p < i) {
            next_e1 = memchr::memchr(0xE1, &bytes[i..]).map(|o| i + o);
        }
        let other = memchr::memchr3(0xE2, 0xEF, 0xF3, &bytes[i..]).map(|o| i + o);
        let Some(start) = [other, next_e1].into_iter().flatten().min() else {
            break;
        };
        // A lead byte always starts a character.
        let Some(c) = text[start..].chars().next() else {
            break;
        };
        if !is_invisible(c) {
            i = start + c.len_utf8();
            continue;
        }
        let mut end = start + c.len_utf8();
        while let Some(d) = text[end..].chars().next().filter(|d| is_invisible(*d)) {
            end += d.len_utf8();
        }
        i = end;
        let prev = text[..start].chars().next_back();
        let next = text[end..].chars().next();
        let run = &text[start..end];
        // Left-to-right and right-to-left marks are how Hebrew and Arabic text
        // places punctuation.
        let bidi_mark = matches!(run, "\u{200E}" | "\u{200F}") && text.chars().any(is_rtl);
        if !bidi_mark && !is_ordinary_text(run, prev, next) {
            runs.push(start..end);
        }
    }
    runs
}

/// Hebrew, Arabic, Syriac, Thaana, N'Ko… letters and their presentation forms.
pub(super) fn is_rtl(c: char) -> bool {
    matches!(c, '\u{0590}'..='\u{08FF}' | '\u{FB1D}'..='\u{FDFF}' | '\u{FE70}'..='\u{FEFC}')
}

/// A joiner inside an emoji sequence (👩‍💻) or between letters of a script that
/// needs it (Persian, Indic), or the tag sequence of a subdivision flag (🏴 + tags +
/// cancel tag).
pub(super) fn is_ordinary_text(run: &str, prev: Option<char>, next: Option<char>) -> bool {
    if let (Some(p), Some(n)) = (prev, next) {
        if run == "\u{200D}" && is_emoji(p) && is_emoji(n) {
            return true;
        }
        let script_letter = |c: char| !c.is_ascii() && !c.is_whitespace() && !is_emoji(c);
        if (run == "\u{200C}" || run == "\u{200D}") && script_letter(p) && script_letter(n) {
            return true;
        }
    }
    prev == Some('\u{1F3F4}')
        && run.ends_with('\u{E007F}')
        && run.chars().count() <= 8
        && run.chars().all(|c| matches!(c, '\u{E0020}'..='\u{E007F}'))
}

pub(super) fn invisible_unicode(text: &str, hits: &mut Vec<Hit>) {
    for run in invisible_runs(text) {
        let s = &text[run.clone()];
        let count = s.chars().count();
        // Tag characters mirror ASCII: they can carry a whole hidden sentence.
        let hidden: String = s
            .chars()
            .filter_map(|c| match c {
                '\u{E0020}'..='\u{E007E}' => char::from_u32(u32::from(c) - 0xE0000),
                _ => None,
            })
            .collect();
        let message = if hidden.is_empty() {
            let mut kinds: Vec<String> = s
                .chars()
                .map(|c| format!("U+{:04X}", u32::from(c)))
                .collect();
            kinds.sort();
            kinds.dedup();
            kinds.truncate(4);
            format!("{count} invisible character(s) ({})", kinds.join(", "))
        } else {
            format!(
                "{count} invisible tag character(s) spelling \"{}\"",
                excerpt(&hidden)
            )
        };
        hits.push(Hit::new(INVISIBLE, Severity::High, run, message));
    }
}

/// Full-width ASCII (`ＩＧＮＯＲＥ`) and the Cyrillic and Greek letters that look like
/// Latin ones (`ignоre` with a Cyrillic `о`), as the ASCII letter they pass for.
/// Only the text the phrase rules read is folded, never the text shown or stripped.
pub(super) fn fold(c: char) -> char {
    match c {
        '\u{FF01}'..='\u{FF5E}' => char::from_u32(u32::from(c) - 0xFEE0).unwrap_or(c),
        '\u{3000}' => ' ',
        'а' | 'α' => 'a',
        'е' | 'ε' => 'e',
        'о' | 'ο' => 'o',
        'р' | 'ρ' => 'p',
        'с' => 'c',
        'у' => 'y',
        'х' => 'x',
        'і' | 'ι' => 'i',
        'ј' => 'j',
        'ѕ' => 's',
        'ԁ' => 'd',
        'һ' => 'h',
        'ν' => 'v',
        'υ' => 'u',
        'А' | 'Α' => 'A',
        'В' | 'Β' => 'B',
        'Е' | 'Ε' => 'E',
        'К' | 'Κ' => 'K',
        'М' | 'Μ' => 'M',
        'Н' | 'Η' => 'H',
        'О' | 'Ο' => 'O',
        'Р' | 'Ρ' => 'P',
        'С' => 'C',
        'Т' | 'Τ' => 'T',
        'Х' | 'Χ' => 'X',
        'І' | 'Ι' => 'I',
        'Ј' => 'J',
        'Ѕ' => 'S',
        'Ү' | 'Υ' => 'Y',
        'Ζ' => 'Z',
        'Ν' => 'N',
        _ => c,
    }
}

/// The text the phrase rules read: invisible characters removed and look-alike
/// letters folded ([`fold`]), with where each byte came from, so that
/// `ig\u{200b}nоre` (Cyrillic `о`) reads as `ignore` and its span is still one of
/// the original text.
pub(super) struct Folded<'a> {
    original: &'a str,
    pub(super) text: Cow<'a, str>,
    /// For each byte of `text`, the start of the char of `original` it comes from;
    /// empty when nothing was changed.
    origin: Vec<usize>,
}

impl<'a> Folded<'a> {
    pub(super) fn new(text: &'a str) -> Folded<'a> {
        if text.is_ascii() || !text.chars().any(|c| is_invisible(c) || fold(c) != c) {
            return Folded {
                original: text,
                text: Cow::Borrowed(text),
                origin: Vec::new(),
            };
        }
        let mut folded = String::with_capacity(text.len());
        let mut origin = Vec::with_capacity(text.len());
        for (i, c) in text.char_indices().filter(|&(_, c)| !is_invisible(c)) {
            let f = fold(c);
            folded.push(f);
            origin.extend(std::iter::repeat_n(i, f.len_utf8()));
        }
        Folded {
            original: text,
            text: Cow::Owned(folded),
            origin,
        }
    }

    /// A span of the folded text as a span of the original (char boundaries).
    pub(super) fn original(&self, span: Range<usize>) -> Range<usize> {
        if self.origin.is_empty() || span.start >= span.end {
            return span;
        }
        let start = self.origin.get(span.start).copied().unwrap_or(0);
        let end = self.origin.get(span.end - 1).map_or(start, |&last| {
            last + self.original[last..]
                .chars()
                .next()
                .map_or(0, char::len_utf8)
        });
        start..end
    }
}
