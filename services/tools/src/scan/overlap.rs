//! Catalog context: a tool that does what another server's tool does under
//! another name (`function-overlap`).
//!
//! A copy of a popular tool (`web_search` offered again as `search_pages` with
//! the same description) draws the model's calls to a server that can read and
//! answer them; so does one that declares another server's function its own.
//! Two tools overlap when their descriptions share most of their words: the
//! Jaccard index of their word sets is at least [`MIN_JACCARD`], each set has at
//! least [`MIN_WORDS`] words, and their bare names differ after folding case and
//! separators (the same name on two servers is common, and the namespace keeps
//! them apart). Words are lower-cased runs of letters and digits of 3 or more
//! characters, minus a few function words; a run of Chinese or Japanese
//! characters counts each pair of neighbours as a word.

use std::collections::HashSet;

use super::*;

/// Share of words two descriptions must have in common.
pub const MIN_JACCARD: f64 = 0.7;
/// Descriptions with fewer words say too little to be a copy of anything.
pub const MIN_WORDS: usize = 5;
/// Words more tools than this share are not used to find candidates (they
/// still count in the index).
const COMMON: usize = 256;

/// Function words left out of a description's words.
const STOP: &[&str] = &[
    "the", "and", "for", "with", "from", "that", "this", "are", "was", "its", "into", "onto",
    "can", "any", "all", "per", "not", "you", "your", "use",
];

/// One tool as the overlap rule sees it.
pub struct Described<'a> {
    pub server: &'a str,
    /// The server's own name of the tool.
    pub name: &'a str,
    pub description: &'a str,
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF)
}

/// The words of a description, as hashes.
fn words(text: &str) -> HashSet<u64> {
    let mut out = HashSet::new();
    let lower = text.to_lowercase();
    for run in lower.split(|c: char| !c.is_alphanumeric()) {
        let chars: Vec<char> = run.chars().collect();
        if chars.iter().any(|&c| is_cjk(c)) {
            for pair in chars.windows(2) {
                out.insert(fnv(pair.iter().collect::<String>().as_bytes()));
            }
        } else if chars.len() >= 3 && !STOP.contains(&run) {
            out.insert(fnv(run.as_bytes()));
        }
    }
    out
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn folded(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// For each tool, the tools of other servers it overlaps with (indexes into
/// `tools`) and the share of words they have in common, best first.
pub fn function_overlaps(tools: &[Described]) -> Vec<Vec<(usize, f64)>> {
    let sets: Vec<HashSet<u64>> = tools.iter().map(|t| words(t.description)).collect();
    let names: Vec<String> = tools.iter().map(|t| folded(t.name)).collect();
    let mut postings: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, s) in sets.iter().enumerate() {
        if s.len() >= MIN_WORDS {
            for &w in s {
                postings.entry(w).or_default().push(i);
            }
        }
    }
    let mut out = vec![Vec::new(); tools.len()];
    for (i, s) in sets.iter().enumerate() {
        if s.len() < MIN_WORDS {
            continue;
        }
        let mut shared: HashMap<usize, usize> = HashMap::new();
        let mut common = 0;
        for w in s {
            let Some(p) = postings.get(w).filter(|p| p.len() <= COMMON) else {
                common += 1;
                continue;
            };
            for &j in p {
                if j != i {
                    *shared.entry(j).or_default() += 1;
                }
            }
        }
        // A pair at MIN_JACCARD shares at least that share of this set's
        // words; the common words were not counted, so they are granted.
        let need = (MIN_JACCARD * s.len() as f64).ceil() as usize;
        for (j, n) in shared {
            if n + common < need {
                continue;
            }
            let t = &sets[j];
            if tools[j].server == tools[i].server || names[j] == names[i] {
                continue;
            }
            let both = s.intersection(t).count();
            let jaccard = both as f64 / (s.len() + t.len() - both) as f64;
            if jaccard >= MIN_JACCARD {
                out[i].push((j, jaccard));
            }
        }
        out[i].sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    }
    out
}

/// The finding of a tool that overlaps `other` (its namespaced name).
pub fn overlap_finding(description: &str, other: &str, share: f64) -> Finding {
    Finding {
        rule: OVERLAP,
        severity: Severity::Medium,
        field: "description".to_owned(),
        span: 0..description.len(),
        excerpt: excerpt(description),
        message: format!(
            "does what {other} does under another name ({:.0} % of its description's words): \
             a copy draws calls away from it (allow with `overlaps: allow` on this server)",
            share * 100.0
        ),
    }
}
