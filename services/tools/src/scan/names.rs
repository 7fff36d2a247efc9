//! Catalog context: mentions of other servers' tools (`shadowing`), near-name
//! duplicates (`near-name`) and re-declared built-ins (`builtin-redeclared`).
//!
//! A word is a mention of another server's tool when it is that tool's namespaced
//! name (`mail.send_email`), or its bare name (`send_email`) unless the bare name
//! is this tool's own, one of this server's, shared by several servers
//! (`write_file`, `read_file`), a plain word (`search`, `fetch`), or shorter than 6
//! bytes. A mention is `shadowing` of high severity inside an instruction ("when you
//! call send_email, …", "instead of web_search", "X is deprecated"), else low.

use std::borrow::Cow;
use std::collections::HashSet;

use super::*;

/// Tools of the built-in server that are not listed under its name: the
/// meta-tools (see `layer::TOOL_SEARCH` and `layer::BROWSER_TOOL`).
const META_TOOLS: &[&str] = &["tool_search", "browser"];

/// Shortest bare name that counts as a mention.
const MIN_BARE: usize = 6;

/// The tool names of a catalog, indexed once for the scans of all its servers:
/// mention keys, the servers of each bare name, and the folded forms for near
/// names. Each server's scan ([`ToolIndex`]) leaves its own server's names out,
/// so one index serves every server of the catalog; building it per server made
/// a catalog of many servers cost servers × tools.
#[derive(Clone, Debug, Default)]
pub struct NameIndex {
    /// Namespaced names ("mail.send_email", or a bare name with no namespace),
    /// with the lower-case namespace.
    names: Vec<(String, String)>,
    /// Lower-case mention key → (index into `names`, whether the key is the bare part).
    keys: HashMap<String, Vec<(usize, bool)>>,
    /// Lower-case bare name → the lower-case namespaces that have it.
    servers: HashMap<String, HashSet<String>>,
    /// Digest of a folded name and of each of its one-character deletions →
    /// indexes into `names` (candidates; [`is_near`] decides). Built-ins are not here.
    near: HashMap<u64, Vec<usize>>,
    /// Folded bare names of the built-in tools, with the name shown.
    builtins: Vec<(String, String)>,
}

impl NameIndex {
    /// Indexes namespaced tool names (`server.tool`); a name without a namespace
    /// is of no server in particular.
    pub fn new<'n>(names: impl IntoIterator<Item = &'n str>) -> NameIndex {
        let mut index = NameIndex::default();
        for name in names {
            let i = index.names.len();
            let (ns, bare) = split_name(name);
            let ns = ns.to_ascii_lowercase();
            index
                .servers
                .entry(bare.to_ascii_lowercase())
                .or_default()
                .insert(ns.clone());
            if !ns.is_empty() {
                index
                    .keys
                    .entry(name.to_ascii_lowercase())
                    .or_default()
                    .push((i, false));
            }
            if bare.len() >= MIN_BARE {
                index
                    .keys
                    .entry(bare.to_ascii_lowercase())
                    .or_default()
                    .push((i, true));
            }
            let folded = fold_name(bare);
            if ns.eq_ignore_ascii_case(BUILTIN_SERVER) {
                index.builtins.push((folded, bare.to_owned()));
            } else {
                for key in deletion_digests(&folded) {
                    let at = index.near.entry(key).or_default();
                    if at.last() != Some(&i) {
                        at.push(i);
                    }
                }
            }
            index.names.push((name.to_owned(), ns));
        }
        for meta in META_TOOLS {
            index.builtins.push((fold_name(meta), (*meta).to_owned()));
        }
        index
    }
}

/// The catalog's names as one server's scan sees them: its own tools apart.
pub(super) struct ToolIndex<'c> {
    names: Cow<'c, NameIndex>,
    /// The server scanned, lower case.
    server: String,
    /// Lower-case bare names of this server's tools.
    own: HashSet<String>,
    /// Whether the server scanned is the built-in one.
    builtin_server: bool,
}

fn split_name(name: &str) -> (&str, &str) {
    name.split_once('.').unwrap_or(("", name))
}

/// A plain lower-case word: never a mention by its bare form.
fn plain_word(bare: &str) -> bool {
    bare.bytes().all(|b| b.is_ascii_lowercase())
}

impl<'c> ToolIndex<'c> {
    /// `ctx.other_tools` indexed for this scan alone.
    pub(super) fn new(ctx: &ScanContext<'_>) -> ToolIndex<'c> {
        let names = NameIndex::new(ctx.other_tools.iter().map(String::as_str));
        ToolIndex::with(ctx, Cow::Owned(names))
    }

    /// The catalog's index, as `ctx.server` sees it.
    pub(super) fn with(ctx: &ScanContext<'_>, names: Cow<'c, NameIndex>) -> ToolIndex<'c> {
        ToolIndex {
            names,
            server: ctx.server.to_ascii_lowercase(),
            own: ctx
                .own_tools
                .iter()
                .map(|n| split_name(n).1.to_ascii_lowercase())
                .collect(),
            builtin_server: ctx.server.eq_ignore_ascii_case(BUILTIN_SERVER),
        }
    }

    /// The namespaced name at `i` of the index, unless it is of the server scanned.
    fn other(&self, i: usize) -> Option<&str> {
        let (name, ns) = self.names.names.get(i)?;
        (ns.is_empty() || *ns != self.server).then_some(name.as_str())
    }

    /// Whether several servers have a tool of this (lower-case) bare name, this
    /// one counted.
    fn shared(&self, bare: &str) -> bool {
        let mut servers: HashSet<&str> = self
            .names
            .servers
            .get(bare)
            .map(|s| s.iter().map(String::as_str).collect())
            .unwrap_or_default();
        if self.own.contains(bare) {
            servers.insert(&self.server);
        }
        servers.len() >= 2
    }

    /// Near-name duplicates and re-declared built-ins for a tool named `name`
    /// (bare), as findings of the field `name`.
    pub(super) fn name_findings(&self, name: &str) -> Vec<Finding> {
        let mut out = Vec::new();
        if name.is_empty() {
            return out;
        }
        let folded = fold_name(name);
        let span = 0..name.len();
        if !self.builtin_server
            && let Some((builtin_folded, builtin)) = self
                .names
                .builtins
                .iter()
                .find(|(b, _)| is_near(&folded, b))
        {
            // The same name is kept apart by the server's namespace, as two
            // servers' same-named tools are (a trawl behind a trawl gateway lists
            // `tool_search` too): flagged. A near copy passes for the built-in.
            let (severity, message) = if *builtin == name
                || (*builtin_folded == folded && !lookalike_digits(name))
            {
                (
                    Severity::Low,
                    format!(
                        "has the name of the built-in tool {builtin}; calls stay apart by namespace"
                    ),
                )
            } else {
                (
                    Severity::High,
                    format!(
                        "re-declares the built-in tool {builtin} under a near name: the model may call this one instead"
                    ),
                )
            };
            out.push(name_finding(BUILTIN, severity, name, span.clone(), message));
        }
        let mut candidates: Vec<&str> = deletion_digests(&folded)
            .filter_map(|k| self.names.near.get(&k))
            .flatten()
            .filter_map(|&i| self.other(i))
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        for other in candidates {
            let bare = split_name(other).1;
            let other_folded = fold_name(bare);
            // The same name in other case or separators (`list-databases`,
            // `list_databases`) is the same name, as two servers' same-named
            // tools are: not a copy. Look-alike digits (`send_emai1`) are.
            if bare == name
                || !is_near(&folded, &other_folded)
                || (other_folded == folded && !lookalike_digits(name))
            {
                continue;
            }
            // Of a pair that differs by look-alike digits (`send_emai1`), only the
            // one with the digits is the copy.
            if lookalike_digits(bare) && !lookalike_digits(name) {
                continue;
            }
            out.push(name_finding(
                NEAR_NAME,
                Severity::Medium,
                name,
                span.clone(),
                format!("name close to {other} of another server: a copy could take its calls"),
            ));
            break;
        }
        out
    }

    /// Whether a bare word is a mention worth reporting: not this tool's own name,
    /// not this server's, not shared by several servers, not a plain word.
    fn counts(&self, key: &str, own_name: &str) -> bool {
        !key.eq_ignore_ascii_case(own_name)
            && !self.own.contains(key)
            && !self.shared(key)
            && !plain_word(key)
    }
}

fn name_finding(
    rule: &'static str,
    severity: Severity,
    name: &str,
    span: Range<usize>,
    message: String,
) -> Finding {
    Finding {
        rule,
        severity,
        field: "name".to_owned(),
        excerpt: excerpt(&name[span.clone()]),
        span,
        message,
    }
}

/// A tool name as compared for near names: lower case, separators removed,
/// digits that pass for letters read as those letters (`send_emai1` → `sendemail`).
fn fold_name(name: &str) -> String {
    name.chars()
        .filter(|c| !matches!(c, '_' | '-' | '.' | ' ' | ':' | '/'))
        .map(|c| match fold(c).to_ascii_lowercase() {
            '0' => 'o',
            '1' | '!' | '|' => 'l',
            '3' => 'e',
            '4' | '@' => 'a',
            '5' | '$' => 's',
            '7' => 't',
            c => c,
        })
        .collect()
}

/// Whether a name uses a digit where a letter belongs (`emai1`, `l0gin`).
fn lookalike_digits(name: &str) -> bool {
    let b = name.as_bytes();
    (0..b.len()).any(|i| {
        matches!(b[i], b'0' | b'1' | b'3' | b'4' | b'5' | b'7')
            && i > 0
            && b[i - 1].is_ascii_alphabetic()
            && b.get(i + 1)
                .is_none_or(|n| n.is_ascii_alphabetic() || *n == b'_')
    })
}

/// FNV-1a digests of `s` and of `s` with each one byte removed (ASCII; a
/// non-ASCII name gives its own digest only), without building the strings.
fn deletion_digests(s: &str) -> impl Iterator<Item = u64> + '_ {
    let b = s.as_bytes();
    let n = if s.is_ascii() { b.len() } else { 0 };
    let digest = move |skip: Option<usize>| {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for (i, &x) in b.iter().enumerate() {
            if Some(i) != skip {
                h = (h ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        h
    };
    std::iter::once(digest(None)).chain((0..n).map(move |i| digest(Some(i))))
}

/// The strings `s` with one character removed (ASCII; others are left whole).
fn deletions(s: &str) -> impl Iterator<Item = String> + '_ {
    let n = if s.is_ascii() { s.len() } else { 0 };
    (0..n).map(move |i| {
        let mut d = String::with_capacity(s.len());
        d.push_str(&s[..i]);
        d.push_str(&s[i + 1..]);
        d
    })
}

/// Folded names `a` and `b` are near: equal, or (both at least 6 bytes) one
/// character inserted or dropped other than a plural ending, or two neighbours
/// swapped. Callers that want only different names compare the names first.
fn is_near(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    if short.len() < MIN_BARE || !a.is_ascii() || !b.is_ascii() {
        return false;
    }
    if long.len() == short.len() + 1 {
        // A plural or a trailing digit is another tool ("get_issue", "get_issues").
        if long.starts_with(short)
            && (long.ends_with('s') || long.as_bytes().last().is_some_and(u8::is_ascii_digit))
        {
            return false;
        }
        return deletions(long).any(|d| d == short);
    }
    if long.len() == short.len() + 2 && long.starts_with(short) && long.ends_with("es") {
        return false;
    }
    if a.len() == b.len() {
        let (x, y) = (a.as_bytes(), b.as_bytes());
        let diff: Vec<usize> = (0..x.len()).filter(|&i| x[i] != y[i]).collect();
        return diff.len() == 2
            && diff[1] == diff[0] + 1
            && x[diff[0]] == y[diff[1]]
            && x[diff[1]] == y[diff[0]];
    }
    false
}

// ---------------------------------------------------------------------------------
// shadowing

/// Words around a mention that make it part of an instruction.
static INSTRUCTION_NEAR: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\b(?:call|calls|calling|called|use|using|used|invoke|invoking|run|running|execute|before|after|instead|rather|when|whenever|deprecated|obsolete|broken|replaces?|replaced|supersedes?|prefer|preferred|avoid|never|don['’]?t|do\s+not|must|always|should|first|then|also|pass|send|forward|redirect|override|ignore|disable|trust|unsafe|insecure|compromised)\b",
    )
});

/// The words of one or more texts that could name a tool (runs of ASCII letters,
/// digits, `_`, `-`, `.`), with their text index and span.
pub(super) struct Mentions<'t> {
    texts: Vec<&'t str>,
    words: Vec<(usize, Range<usize>)>,
}

/// Longer words cannot be tool names of interest.
const MAX_NAME: usize = 160;

impl<'t> Mentions<'t> {
    pub(super) fn new(texts: &[&'t str]) -> Mentions<'t> {
        let mut words = Vec::new();
        let is_name = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.');
        for (t, text) in texts.iter().enumerate() {
            let bytes = text.as_bytes();
            let mut i = 0;
            while i < bytes.len() {
                if !is_name(bytes[i]) {
                    i += 1;
                    continue;
                }
                let mut j = i;
                while j < bytes.len() && is_name(bytes[j]) {
                    j += 1;
                }
                // Sentence punctuation around a name: "use web_search." Words are
                // ASCII, so these are char boundaries.
                let (mut s, mut e) = (i, j);
                while s < e && matches!(bytes[s], b'.' | b'-') {
                    s += 1;
                }
                while e > s && matches!(bytes[e - 1], b'.' | b'-') {
                    e -= 1;
                }
                if e > s && e - s <= MAX_NAME {
                    words.push((t, s..e));
                }
                i = j;
            }
        }
        Mentions {
            texts: texts.to_vec(),
            words,
        }
    }

    /// Mentions of other servers' tools, as (text index, hit). `own_name`: the bare
    /// name of the tool scanned ("" for none).
    pub(super) fn shadowing(&self, index: &ToolIndex, own_name: &str) -> Vec<(usize, Hit)> {
        let mut out = Vec::new();
        let mut key = String::new();
        for (t, r) in &self.words {
            let Some(text) = self.texts.get(*t) else {
                continue;
            };
            key.clear();
            key.push_str(&text[r.clone()]);
            key.make_ascii_lowercase();
            let Some(names) = index.names.keys.get(&key) else {
                continue;
            };
            let Some(name) = names
                .iter()
                .filter(|&&(_, bare)| !bare || index.counts(&key, own_name))
                .find_map(|&(i, _)| index.other(i))
            else {
                continue;
            };
            let sentence = Sentences::new(text).around(r.start);
            let instruction = INSTRUCTION_NEAR.is_match(&text[sentence]);
            let written = &text[r.clone()];
            let shown = if written.eq_ignore_ascii_case(name) {
                format!("tool {name} of another server")
            } else {
                format!("tool {written} ({name} of another server)")
            };
            let hit = if instruction {
                Hit::new(
                    SHADOWING,
                    Severity::High,
                    r.clone(),
                    format!("names {shown} in an instruction"),
                )
            } else {
                Hit::new(
                    SHADOWING,
                    Severity::Low,
                    r.clone(),
                    format!("mentions {shown}"),
                )
            };
            out.push((*t, hit));
        }
        out
    }
}

/// Builds every pattern of this module (for `tests::all_patterns_compile`).
#[cfg(test)]
pub(super) fn patterns() -> Vec<&'static Regex> {
    vec![&*INSTRUCTION_NEAR]
}
