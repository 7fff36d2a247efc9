use super::*;

// ---------------------------------------------------------------------------------
// hidden-block

/// Tags that open a block of instructions meant for the model only.
pub(super) static OPEN_TAG: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)<\s*(important|system(?:[_-]?(?:prompt|message|instructions?|note|override))?|instructions?|hidden|secret|admin|information|directives?|override|critical|urgent|mandatory|attention|tool[_-]?(?:instructions?|notes?)|(?:ai|assistant|model|llm|agent)[_-]?(?:instructions?|notes?|only))\b[^<>]{0,200}>",
    )
});
pub(super) static CLOSE_TAG: LazyLock<Regex> =
    LazyLock::new(|| compile(r"<\s*/\s*([A-Za-z][\w-]*)\s*>"));
/// Closing tags that could end a section of the prompt the tool list sits in.
pub(super) static BREAK_TAG: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)<\s*/\s*(?:system(?:[_-]?prompt)?|instructions?|tool[_-]?(?:descriptions?|definitions?|results?|calls?|use|output)?|tools|functions?|function[_-]?(?:results?|calls?|descriptions?)|context|prompt|user|assistant|human|description|documents?|important|hidden|admin|secret|im_end)\s*>",
    )
});
/// Tags that are harmless as placeholders (`<note>`), but as a block around text
/// (`<note>…</note>`) set that text apart for the model: an authority marker.
pub(super) static WEAK_TAG: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)<\s*(context|notes?|message|prompt|task|info|policy|rules|warning|remember|reminder|extra|meta)\b[^<>]{0,200}>",
    )
});
/// A chat turn written as a tag block: `<user>…</user>`.
pub(super) static ROLE_TAG: LazyLock<Regex> =
    LazyLock::new(|| compile(r"(?i)<\s*(user|human|assistant)\s*>"));
/// An HTML comment, to its end if it has one.
pub(super) static COMMENT: LazyLock<Regex> = LazyLock::new(|| compile(r"(?s)<!--(?:.*?-->)?"));
/// In hidden text, what makes it an instruction rather than a note: words that
/// speak to the model, demand, or name what attacks ask for.
pub(super) static HIDDEN_ASKS: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\b(?:you|your|yours|assistant|ai|model|llm|agent|claude|gpt|chatgpt|gemini|ignore|disregard|forget|override|always|never|must|should|shall|do\s+not|don['’]?t|instead|send|read|call|invoke|use|run|execute|include|append|attach|forward|post|upload|tell|reveal|hide|conceal|secrets?|passwords?|tokens?|credentials?|keys?|system|instructions?|prompt|users?)\b|[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]",
    )
});
/// A markdown comment line: `[//]: # (…)`, `[comment]: <> (…)`.
pub(super) static MD_COMMENT: LazyLock<Regex> =
    LazyLock::new(|| compile(r"(?im)^[ \t]*\[(?://|comment|hidden)\]:[ \t]*(?:#|<>)[^\n]*"));
/// The head of a `[HIDDEN …]` / `[SYSTEM: …]` block.
pub(super) static BRACKET: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"\[\s*(?:(?:HIDDEN|SYSTEM|IMPORTANT|INSTRUCTIONS?|ADMIN)\b|(?i:hidden|system|instructions?|admin)\s*(?i:note|message|prompt)?\s*:)",
    )
});

/// The closing tag of `name` after `from`, as a range of `text`.
fn closing(text: &str, from: usize, name: &str) -> Option<Range<usize>> {
    CLOSE_TAG
        .captures_iter(&text[from..])
        .find(|c| {
            c.get(1)
                .is_some_and(|n| n.as_str().eq_ignore_ascii_case(name))
        })
        .and_then(|c| c.get(0))
        .map(|m| from + m.start()..from + m.end())
}

pub(super) fn hidden_blocks(text: &str, hits: &mut Vec<Hit>, markers: &mut Vec<Range<usize>>) {
    for caps in WEAK_TAG.captures_iter(text) {
        if let (Some(tag), Some(name)) = (caps.get(0), caps.get(1))
            && closing(text, tag.end(), name.as_str()).is_some()
        {
            markers.push(tag.range());
        }
    }
    for caps in ROLE_TAG.captures_iter(text) {
        if let (Some(tag), Some(name)) = (caps.get(0), caps.get(1))
            && let Some(close) = closing(text, tag.end(), name.as_str())
        {
            hits.push(Hit::new(
                PROMPT_ROLE,
                Severity::High,
                tag.start()..close.end,
                format!("chat turn written as a <{}> block", name.as_str()),
            ));
        }
    }
    for caps in OPEN_TAG.captures_iter(text) {
        let (Some(tag), Some(name)) = (caps.get(0), caps.get(1)) else {
            continue;
        };
        let close = CLOSE_TAG
            .captures_iter(&text[tag.end()..])
            .find(|c| {
                c.get(1)
                    .is_some_and(|n| n.as_str().eq_ignore_ascii_case(name.as_str()))
            })
            .and_then(|c| c.get(0));
        let (span, message) = match close {
            Some(close) => (
                tag.start()..tag.end() + close.end(),
                format!(
                    "hidden instruction block <{}>…</{}>",
                    name.as_str(),
                    name.as_str()
                ),
            ),
            None => (
                tag.range(),
                format!("hidden instruction tag <{}>", name.as_str()),
            ),
        };
        hits.push(Hit::new(HIDDEN_BLOCK, Severity::High, span, message));
    }
    for m in BREAK_TAG.find_iter(text) {
        hits.push(Hit::new(
            HIDDEN_BLOCK,
            Severity::High,
            m.range(),
            "closing tag that could end a section of the prompt",
        ));
    }
    // (pattern, what it is, how it ends when closed: a markdown comment is a line)
    for (re, what, end) in [
        (&COMMENT, "HTML comment", Some("-->")),
        (&MD_COMMENT, "markdown comment", None),
    ] {
        for m in re.find_iter(text) {
            // Hidden text that speaks to the model or asks for something is a
            // hidden instruction; "<!-- The syntax is Jinja2. -->" is a note.
            // An unclosed comment hides the rest of the text, whatever it says.
            let unclosed = end.is_some_and(|e| !m.as_str().ends_with(e));
            let (severity, message) = if unclosed || HIDDEN_ASKS.is_match(m.as_str()) {
                (Severity::High, format!("{what}, hidden when rendered"))
            } else {
                (
                    Severity::Low,
                    format!("{what}, hidden when rendered (it asks for nothing)"),
                )
            };
            hits.push(Hit::new(HIDDEN_BLOCK, severity, m.range(), message));
        }
    }
    for m in BRACKET.find_iter(text) {
        let rest = &text[m.end()..];
        // `[SYSTEM, USER]`, `[SYSTEM|USER]`: an enumeration, not a block.
        if !m.as_str().ends_with(':') && rest.trim_start().starts_with([',', '|', '/']) {
            continue;
        }
        let end = match rest.find([']', '[']) {
            Some(i) if rest[i..].starts_with(']') && i <= 2000 => m.end() + i + 1,
            _ => m.end(),
        };
        hits.push(Hit::new(
            HIDDEN_BLOCK,
            Severity::High,
            m.start()..end,
            "bracketed hidden/system block",
        ));
    }
}

/// Builds every pattern of this module (for `tests::all_patterns_compile`).
#[cfg(test)]
pub(super) fn patterns() -> Vec<&'static Regex> {
    vec![
        &*OPEN_TAG,
        &*CLOSE_TAG,
        &*BREAK_TAG,
        &*WEAK_TAG,
        &*ROLE_TAG,
        &*COMMENT,
        &*MD_COMMENT,
        &*HIDDEN_ASKS,
        &*BRACKET,
    ]
}
