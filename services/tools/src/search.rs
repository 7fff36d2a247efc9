//! Tool search: BM25 over the catalog, so an agent can find the few tools it
//! needs among thousands without being shown them all.
//!
//! What is indexed, per tool, and how much each occurrence of a term counts:
//!
//! | field                                                        | weight |
//! |--------------------------------------------------------------|--------|
//! | name (`crm.get_contact_by_email`)                            | 3      |
//! | parameter names, anywhere in `input_schema`                  | 2      |
//! | title, description, parameter descriptions, example strings  | 1      |
//!
//! Parameters are found recursively through `properties`, `items`,
//! `anyOf`/`oneOf`/`allOf` and `$defs`/`definitions`; example strings are every
//! string value inside `input_examples`.
//!
//! Weighting is term-frequency boosting: a term's frequency in a tool is the
//! weighted sum of its occurrences, and the tool's length the weighted sum of all
//! its tokens. That is BM25F with one length normalisation (`b`) shared by every
//! field, which is all a tool (a few short fields) needs. Scores are BM25 with
//! `k1 = 1.2`, `b = 0.75` and Lucene's never-negative idf,
//! `ln(1 + (N - df + 0.5) / (df + 0.5))`.
//!
//! Tokenizer, the same for tools and queries:
//! - words are split on whitespace; a word made of letters, digits and `.`, `_`,
//!   `-` (an identifier such as `brightdata.web_search`) is also kept whole,
//!   lowercased, as is each of its dot-separated segments that has a `_` or `-`
//!   (`web_search`), so an exact name in a query finds its tool first;
//! - the rest is cut into runs of Unicode letters and digits, each run split at
//!   camelCase and PascalCase boundaries and between letters and digits
//!   (`getHTMLPage2` → `get html page 2`), with the whole run also kept when it
//!   was split (`gethtmlpage2`); scripts without case (CJK, ...) stay whole runs;
//! - parts are lowercased, English stopwords (`the`, `of`, `by`, ...) dropped, and
//!   ASCII words lightly stemmed (`stem`: plural `s`/`es`/`ies`, `ing`, `ed`, a
//!   final `e`), so `invoices`, `invoice` and `invoicing` meet.
//!
//! The index is inverted: each term has a postings list of `(tool, impact)`, where
//! the impact is the term's whole BM25 contribution for that tool, computed when
//! the index is built (the catalog does not change under an index). A query thus
//! only reads the postings of its own terms and adds numbers into a score array;
//! the best `limit` are picked with `select_nth_unstable_by`.
//!
//! Why hand-written rather than a search library (tantivy and the like): this is
//! ~400 lines without new dependencies, the catalog lives in memory and is small
//! (thousands of short documents), and the tokenizer is specific to tool names.
//!
//! # The dense half, and how the two are fused
//!
//! Lexical search misses paraphrases ("remember a fact about a person" shares no
//! word with a memory server's "create entities in the knowledge graph"). So each
//! listed tool also has a sentence vector ([`DenseIndex`]): the tool layer's
//! embedding model run over [`dense_text`] (its name in words, title and
//! description, or its parameters when it has no description), cached by that
//! text's hash like every vector of the layer.
//! A query is embedded once per search; its cosine with every tool's vector is
//! one dot product each (the vectors have length 1).
//!
//! [`fuse`] combines the two rankings ([`FUSION`]): over the candidates (the
//! best [`FUSE_DEPTH`] of each half), BM25 is scaled by the best BM25 score and
//! the cosine between the worst and best cosine, and the fused score is
//! `0.2 × bm25 + 0.8 × cosine`. Scores rather than ranks (reciprocal rank
//! fusion), because a query's words often match many tools weakly ("works" in
//! every "only works within allowed directories"): with ranks, those weak
//! matches outrank a tool the dense half puts first by far; with scores, a tool
//! near in meaning and near in words still wins. The weight was chosen on the
//! train split of `tests/search/` among rank fusions (`K` 10–60, dense weight
//! 1–3) and score weights 0.1–0.6; see docs/benchmarks.md for the dev split.
//! With no vector (no model configured, or the
//! query could not be embedded) the lexical ranking is the result, scored as BM25.

use std::collections::HashMap;

use serde_json::Value;
use trawl_core::ports::ToolDef;

const K1: f32 = 1.2;
const B: f32 = 0.75;

const NAME_WEIGHT: f32 = 3.0;
const PARAM_NAME_WEIGHT: f32 = 2.0;
const TEXT_WEIGHT: f32 = 1.0;

/// Schemas nested deeper than this are not searched further.
const MAX_SCHEMA_DEPTH: usize = 32;

/// A searchable catalog of tools, built once from their definitions.
#[derive(Clone, Default)]
pub struct SearchIndex {
    /// Term → its position in `postings`.
    terms: HashMap<String, u32>,
    /// Per term, the tools it occurs in, in increasing tool order.
    postings: Vec<Vec<Posting>>,
    /// How many tools were indexed.
    docs: usize,
}

/// One tool a term occurs in, with the term's BM25 score for that tool.
#[derive(Clone, Copy, Debug)]
struct Posting {
    doc: u32,
    impact: f32,
}

/// A tool that matched a query.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit {
    /// Position of the tool in the slice given to [`SearchIndex::build`].
    pub index: usize,
    pub score: f32,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex")
            .field("docs", &self.docs)
            .field("terms", &self.terms.len())
            .finish()
    }
}

impl SearchIndex {
    /// Indexes `defs`; hits refer to tools by their position in it.
    pub fn build(defs: &[ToolDef]) -> SearchIndex {
        let mut terms: HashMap<String, u32> = HashMap::new();
        // Weighted term frequencies, per term: (tool, tf).
        let mut freqs: Vec<Vec<(u32, f32)>> = Vec::new();
        let mut lengths: Vec<f32> = Vec::with_capacity(defs.len());
        // One tool's (term, weight) occurrences, reused.
        let mut occurrences: Vec<(u32, f32)> = Vec::new();

        for (doc, def) in defs.iter().enumerate() {
            // Tools are numbered in u32 to halve the postings; a catalog of
            // four billion tools is not a case to serve.
            let doc = u32::try_from(doc).unwrap_or(u32::MAX);
            occurrences.clear();
            let mut add = |text: &str, weight: f32| {
                for_each_token(text, &mut |token| {
                    let id = match terms.get(token) {
                        Some(&id) => id,
                        None => {
                            let id = u32::try_from(freqs.len()).unwrap_or(u32::MAX);
                            terms.insert(token.to_owned(), id);
                            freqs.push(Vec::new());
                            id
                        }
                    };
                    occurrences.push((id, weight));
                });
            };
            add(&def.name, NAME_WEIGHT);
            if let Some(title) = &def.title {
                add(title, TEXT_WEIGHT);
            }
            add(&def.description, TEXT_WEIGHT);
            walk_schema(&def.input_schema, 0, &mut add);
            for example in &def.input_examples {
                walk_strings(example, 0, &mut |s| add(s, TEXT_WEIGHT));
            }

            // Sum the weights of each term's occurrences.
            occurrences.sort_unstable_by_key(|&(id, _)| id);
            let mut length = 0.0;
            let mut i = 0;
            while i < occurrences.len() {
                let id = occurrences[i].0;
                let mut tf = 0.0;
                while i < occurrences.len() && occurrences[i].0 == id {
                    tf += occurrences[i].1;
                    i += 1;
                }
                length += tf;
                freqs[id as usize].push((doc, tf));
            }
            lengths.push(length);
        }

        let docs = defs.len();
        let avg_length = if docs == 0 {
            1.0
        } else {
            (lengths.iter().sum::<f32>() / docs as f32).max(f32::MIN_POSITIVE)
        };
        let postings = freqs
            .into_iter()
            .map(|list| {
                let df = list.len() as f32;
                let idf = (1.0 + (docs as f32 - df + 0.5) / (df + 0.5)).ln();
                list.into_iter()
                    .map(|(doc, tf)| {
                        let norm = K1 * (1.0 - B + B * lengths[doc as usize] / avg_length);
                        Posting {
                            doc,
                            impact: idf * tf * (K1 + 1.0) / (tf + norm),
                        }
                    })
                    .collect()
            })
            .collect();

        SearchIndex {
            terms,
            postings,
            docs,
        }
    }

    /// Best matches first, at most `limit`; ties broken by index (deterministic).
    /// Empty or all-stopword query → empty.
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        if limit == 0 || self.docs == 0 {
            return Vec::new();
        }
        let mut ids: Vec<u32> = Vec::new();
        for_each_token(query, &mut |token| {
            if let Some(&id) = self.terms.get(token) {
                ids.push(id);
            }
        });
        ids.sort_unstable();
        ids.dedup();
        if ids.is_empty() {
            return Vec::new();
        }

        // Impacts are positive, so a score of 0 means "not yet touched".
        let mut scores = vec![0.0f32; self.docs];
        let postings: usize = ids.iter().map(|&id| self.postings[id as usize].len()).sum();
        let mut touched: Vec<u32> = Vec::with_capacity(postings.min(self.docs));
        for &id in &ids {
            for p in &self.postings[id as usize] {
                let score = &mut scores[p.doc as usize];
                if *score == 0.0 {
                    touched.push(p.doc);
                }
                *score += p.impact;
            }
        }

        let mut hits: Vec<Hit> = touched
            .into_iter()
            .map(|doc| Hit {
                index: doc as usize,
                score: scores[doc as usize],
            })
            .collect();
        top(&mut hits, limit);
        hits
    }

    /// How many tools are indexed.
    pub fn len(&self) -> usize {
        self.docs
    }

    pub fn is_empty(&self) -> bool {
        self.docs == 0
    }
}

/// The dense half of the search: one unit vector per tool, in the order of the
/// definitions the lexical index was built from.
#[derive(Clone, Default)]
pub struct DenseIndex {
    dims: usize,
    /// `docs × dims` floats, row by row.
    rows: Vec<f32>,
}

impl std::fmt::Debug for DenseIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DenseIndex")
            .field("docs", &self.len())
            .field("dims", &self.dims)
            .finish()
    }
}

impl DenseIndex {
    /// Over one vector per tool; `None` when they are not all of one non-zero length.
    pub fn build<V: AsRef<[f32]>>(vectors: &[V]) -> Option<DenseIndex> {
        let dims = vectors.first().map_or(0, |v| v.as_ref().len());
        if dims == 0 || vectors.iter().any(|v| v.as_ref().len() != dims) {
            return None;
        }
        let mut rows = Vec::with_capacity(vectors.len() * dims);
        for v in vectors {
            rows.extend_from_slice(v.as_ref());
        }
        Some(DenseIndex { dims, rows })
    }

    /// How many tools have a vector.
    pub fn len(&self) -> usize {
        self.rows.len().checked_div(self.dims).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The length of every vector.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// The cosine of `query` with tool `index` (0 for an index out of range or
    /// a query of another length).
    pub fn cosine(&self, index: usize, query: &[f32]) -> f32 {
        if query.len() != self.dims {
            return 0.0;
        }
        self.rows
            .chunks_exact(self.dims)
            .nth(index)
            .map_or(0.0, |row| dot(row, query))
    }

    /// The `limit` tools nearest to `query` (a unit vector of [`DenseIndex::dims`]
    /// floats), best first, scored by cosine; ties broken by index. A query of
    /// another length finds nothing.
    pub fn search(&self, query: &[f32], limit: usize) -> Vec<Hit> {
        if limit == 0 || query.len() != self.dims || self.dims == 0 {
            return Vec::new();
        }
        let mut hits: Vec<Hit> = self
            .rows
            .chunks_exact(self.dims)
            .enumerate()
            .map(|(index, row)| Hit {
                index,
                score: dot(row, query),
            })
            .collect();
        top(&mut hits, limit);
        hits
    }
}

/// The dot product, in eight lanes so that the compiler can keep them in
/// vector registers (a sum in one accumulator must be added in order).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8
        .remainder()
        .iter()
        .zip(b8.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a8.zip(b8) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// Keeps the best `limit` hits, best first; ties go by index.
fn top(hits: &mut Vec<Hit>, limit: usize) {
    let order = |a: &Hit, b: &Hit| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index));
    if hits.len() > limit {
        hits.select_nth_unstable_by(limit - 1, order);
        hits.truncate(limit);
    }
    hits.sort_unstable_by(order);
}

/// What a search is given: the words, and their vector when the dense half runs.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub text: String,
    pub vector: Option<std::sync::Arc<[f32]>>,
}

impl Query {
    /// Words alone: the lexical half only.
    pub fn words(text: impl Into<String>) -> Query {
        Query {
            text: text.into(),
            vector: None,
        }
    }
}

/// A tool's place in one of the two rankings.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Rank {
    /// From 1.
    pub rank: usize,
    /// BM25, or the cosine.
    pub score: f32,
}

/// A tool found by the hybrid search.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ranked {
    /// Position of the tool in the definitions the indexes were built from.
    pub index: usize,
    /// The fused score (BM25 when the search was lexical only).
    pub score: f32,
    /// Where BM25 put it, if it matched any word (within [`FUSE_DEPTH`]).
    pub lexical: Option<Rank>,
    /// Where the dense half put it (within [`FUSE_DEPTH`]), when it ran.
    pub dense: Option<Rank>,
}

/// How far down each ranking [`fuse`] looks.
pub const FUSE_DEPTH: usize = 100;

/// How [`fuse`] combines the two rankings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Method {
    /// Reciprocal rank fusion: `lexical / (k + rank)` plus `dense / (k + rank)`,
    /// from each ranking the tool is in.
    Ranks { k: f32, lexical: f32, dense: f32 },
    /// A convex combination of scores scaled to [0, 1] over the candidates:
    /// `alpha × bm25 / best bm25 + (1 − alpha) × (cos − worst) / (best − worst)`,
    /// a tool BM25 did not match counting 0 there.
    Scores { alpha: f32 },
}

/// The fusion [`Catalog::search`](crate::Catalog::search) uses (see the module doc).
pub const FUSION: Fusion = Fusion {
    method: Method::Scores { alpha: 0.2 },
    depth: FUSE_DEPTH,
};

/// How [`fuse`] weighs the rankings, and how far down it looks: [`FUSION`],
/// or others for measuring them on the train split.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fusion {
    pub method: Method,
    pub depth: usize,
}

impl Default for Fusion {
    fn default() -> Fusion {
        FUSION
    }
}

/// The best `limit` tools of both rankings (see the module doc), best first;
/// ties broken by index. `lexical` and `dense` are each best first;
/// `cosine(index)` is the query's cosine with a tool that `dense` may have cut.
pub fn fuse(
    lexical: &[Hit],
    dense: &[Hit],
    limit: usize,
    fusion: Fusion,
    cosine: impl Fn(usize) -> f32,
) -> Vec<Ranked> {
    let mut by_index: HashMap<usize, (Ranked, f32, f32)> = HashMap::new();
    let blank = |index| {
        (
            Ranked {
                index,
                score: 0.0,
                lexical: None,
                dense: None,
            },
            0.0,
            f32::NAN,
        )
    };
    for (i, h) in lexical.iter().take(fusion.depth).enumerate() {
        let r = by_index.entry(h.index).or_insert_with(|| blank(h.index));
        r.0.lexical = Some(Rank {
            rank: i + 1,
            score: h.score,
        });
        r.1 = h.score;
    }
    for (i, h) in dense.iter().take(fusion.depth).enumerate() {
        let r = by_index.entry(h.index).or_insert_with(|| blank(h.index));
        r.0.dense = Some(Rank {
            rank: i + 1,
            score: h.score,
        });
        r.2 = h.score;
    }
    match fusion.method {
        Method::Ranks { k, lexical, dense } => {
            for (r, _, _) in by_index.values_mut() {
                let credit =
                    |rank: Option<Rank>, w: f32| rank.map_or(0.0, |r| w / (k + r.rank as f32));
                r.score = credit(r.lexical, lexical) + credit(r.dense, dense);
            }
        }
        Method::Scores { alpha } => {
            for (r, _, cos) in by_index.values_mut() {
                if cos.is_nan() {
                    *cos = cosine(r.index);
                }
            }
            let best_bm25 = by_index.values().map(|v| v.1).fold(0.0, f32::max);
            let (worst, best) = by_index
                .values()
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), v| {
                    (lo.min(v.2), hi.max(v.2))
                });
            let spread = best - worst;
            for (r, bm25, cos) in by_index.values_mut() {
                let lexical = if best_bm25 > 0.0 {
                    *bm25 / best_bm25
                } else {
                    0.0
                };
                let dense = if spread > 0.0 {
                    (*cos - worst) / spread
                } else {
                    0.0
                };
                r.score = alpha * lexical + (1.0 - alpha) * dense;
            }
        }
    }
    let mut out: Vec<Ranked> = by_index.into_values().map(|v| v.0).collect();
    out.sort_unstable_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
    out.truncate(limit);
    out
}

/// What the dense half embeds of a tool: its name in words (`memory.create_entities`
/// → `memory: create entities`), title and description; when it has no
/// description, each parameter's name and description instead, on lines. The
/// model reads at most 256 tokens of it.
pub fn dense_text(def: &ToolDef) -> String {
    let mut out = String::new();
    let (server, tool) = def.name.split_once('.').unwrap_or(("", &def.name));
    let words = |s: &str| {
        let mut parts = Vec::new();
        let mut w = String::new();
        for run in s
            .split(|c: char| !c.is_alphanumeric())
            .filter(|r| !r.is_empty())
        {
            split_case(run, &mut parts);
            for p in &parts {
                if !w.is_empty() {
                    w.push(' ');
                }
                w.push_str(&p.to_lowercase());
            }
        }
        w
    };
    if !server.is_empty() {
        out.push_str(&words(server));
        out.push_str(": ");
    }
    out.push_str(&words(tool));
    if let Some(title) = def.title.as_deref().filter(|t| !t.trim().is_empty()) {
        out.push_str(". ");
        out.push_str(title.trim());
    }
    let description = def.description.trim();
    if !description.is_empty() {
        out.push_str(". ");
        out.push_str(description);
    } else if let Some(Value::Object(props)) = def.input_schema.get("properties") {
        // Parameters only stand in for a missing description: averaged into the
        // vector with one, they pull it away from what the tool is for (dense R@5
        // on the train split of tests/search: 73.3 % with them, 75.6 % without).
        for (name, p) in props {
            out.push('\n');
            out.push_str(&words(name));
            if let Some(Value::String(d)) = p.get("description") {
                out.push_str(": ");
                out.push_str(d.trim());
            }
        }
    }
    out
}

/// Feeds the parameter names (weight 2) and descriptions (weight 1) of a JSON
/// Schema to `add`, recursively.
fn walk_schema(schema: &Value, depth: usize, add: &mut impl FnMut(&str, f32)) {
    if depth > MAX_SCHEMA_DEPTH {
        return;
    }
    let Value::Object(map) = schema else {
        return;
    };
    if let Some(Value::Object(properties)) = map.get("properties") {
        for (name, property) in properties {
            add(name, PARAM_NAME_WEIGHT);
            if let Some(Value::String(description)) = property.get("description") {
                add(description, TEXT_WEIGHT);
            }
            walk_schema(property, depth + 1, add);
        }
    }
    match map.get("items") {
        Some(Value::Array(items)) => {
            for item in items {
                walk_schema(item, depth + 1, add);
            }
        }
        Some(item) => walk_schema(item, depth + 1, add),
        None => {}
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(variants)) = map.get(key) {
            for variant in variants {
                walk_schema(variant, depth + 1, add);
            }
        }
    }
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = map.get(key) {
            for def in defs.values() {
                walk_schema(def, depth + 1, add);
            }
        }
    }
}

/// Calls `f` with every string value inside `value` (not object keys).
fn walk_strings(value: &Value, depth: usize, f: &mut impl FnMut(&str)) {
    if depth > MAX_SCHEMA_DEPTH {
        return;
    }
    match value {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter().for_each(|v| walk_strings(v, depth + 1, f)),
        Value::Object(map) => map.values().for_each(|v| walk_strings(v, depth + 1, f)),
        _ => {}
    }
}

/// Calls `emit` with each search term of `text` (see the module doc).
fn for_each_token(text: &str, emit: &mut impl FnMut(&str)) {
    let is_joiner = |c: char| matches!(c, '.' | '_' | '-');
    let mut buf = String::new();
    let mut parts: Vec<&str> = Vec::new();
    for word in text.split_whitespace() {
        let word = word.trim_matches(|c: char| !c.is_alphanumeric());
        if word.is_empty() {
            continue;
        }
        // An identifier: kept whole, and its dotted segments that are compounds.
        if word.contains(is_joiner) && word.chars().all(|c| c.is_alphanumeric() || is_joiner(c)) {
            lowercase_into(word, &mut buf);
            emit(&buf);
            if word.contains('.') {
                for segment in word.split('.') {
                    if segment.contains(['_', '-']) {
                        lowercase_into(segment, &mut buf);
                        emit(&buf);
                    }
                }
            }
        }
        for run in word.split(|c: char| !c.is_alphanumeric()) {
            if run.is_empty() {
                continue;
            }
            split_case(run, &mut parts);
            if parts.len() > 1 {
                lowercase_into(run, &mut buf);
                emit(&buf);
            }
            for part in &parts {
                lowercase_into(part, &mut buf);
                if is_stopword(&buf) {
                    continue;
                }
                stem(&mut buf);
                emit(&buf);
            }
        }
    }
}

fn lowercase_into(s: &str, buf: &mut String) {
    buf.clear();
    if s.is_ascii() {
        buf.push_str(s);
        buf.make_ascii_lowercase();
    } else {
        buf.extend(s.chars().flat_map(char::to_lowercase));
    }
}

/// Splits a run of letters and digits at camelCase and PascalCase boundaries and
/// between letters and digits: `getHTMLPage2` → `get`, `HTML`, `Page`, `2`.
fn split_case<'a>(run: &'a str, parts: &mut Vec<&'a str>) {
    parts.clear();
    let mut start = 0;
    let mut chars = run.char_indices().peekable();
    let mut prev: Option<char> = None;
    while let Some((i, c)) = chars.next() {
        if let Some(p) = prev {
            let next = chars.peek().map(|&(_, n)| n);
            let boundary = (p.is_lowercase() && c.is_uppercase())
                || (p.is_uppercase() && c.is_uppercase() && next.is_some_and(char::is_lowercase))
                || (p.is_numeric() != c.is_numeric());
            if boundary {
                parts.push(&run[start..i]);
                start = i;
            }
        }
        prev = Some(c);
    }
    parts.push(&run[start..]);
}

/// A small English stopword list, lowercase and sorted.
const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "for", "from", "has", "have", "how",
    "i", "if", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "our", "so", "such",
    "than", "that", "the", "their", "then", "there", "these", "this", "those", "to", "via", "was",
    "we", "were", "what", "when", "where", "which", "while", "who", "will", "with", "you", "your",
];

fn is_stopword(word: &str) -> bool {
    // None is longer than five letters.
    word.len() <= 5 && STOPWORDS.binary_search(&word).is_ok()
}

/// Light suffix stripping for lowercase ASCII words; other words are left alone.
///
/// In order: one suffix of `ies` → `y`; `es` after `s`, `x`, `z`, `ch`, `sh`; `s`
/// (not after `s`, `u`, `i`); `ing` and `ed` (not `eed`) when at least three
/// letters with a vowel remain, then a doubled final consonant is undone
/// (`stopped` → `stop`, but `called` → `call` and `added` → `add`). Finally a
/// trailing `e` is dropped from words of four letters or more, so `create`,
/// `created` and `creating` all become `creat`.
fn stem(word: &mut String) {
    if word.len() < 4 || !word.bytes().all(|b| b.is_ascii_lowercase()) {
        return;
    }
    let has_vowel = |s: &str| s.bytes().any(|b| b"aeiouy".contains(&b));
    if word.ends_with("ies") {
        word.truncate(word.len() - 3);
        word.push('y');
    } else if word.ends_with("es")
        && [b"ses".as_slice(), b"xes", b"zes", b"ches", b"shes"]
            .iter()
            .any(|s| word.as_bytes().ends_with(s))
    {
        word.truncate(word.len() - 2);
    } else if word.ends_with('s')
        && !word.ends_with("ss")
        && !word.ends_with("us")
        && !word.ends_with("is")
    {
        word.truncate(word.len() - 1);
    } else {
        let suffix = if word.ends_with("ing") {
            3
        } else if word.ends_with("ed") && !word.ends_with("eed") {
            2
        } else {
            0
        };
        let base = &word[..word.len() - suffix];
        if suffix > 0 && base.len() >= 3 && has_vowel(base) {
            word.truncate(base.len());
            let b = word.as_bytes();
            let n = b.len();
            if n > 3 && b[n - 1] == b[n - 2] && !b"aeioulsz".contains(&b[n - 1]) {
                word.truncate(n - 1);
            }
        }
    }
    if word.len() >= 4 && word.ends_with('e') {
        word.truncate(word.len() - 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tokens(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for_each_token(text, &mut |t| out.push(t.to_owned()));
        out
    }

    fn def(name: &str, description: &str, schema: Value) -> ToolDef {
        ToolDef {
            name: name.to_owned(),
            title: None,
            description: description.to_owned(),
            input_schema: schema,
            output_schema: None,
            annotations: Value::Null,
            input_examples: Vec::new(),
        }
    }

    fn catalog() -> Vec<ToolDef> {
        vec![
            def(
                "brightdata.web_search",
                "Search the web with a search engine and return the results.",
                json!({"type": "object", "properties": {
                    "query": {"type": "string", "description": "What to look for"},
                    "country": {"type": "string", "description": "Two-letter code"}
                }}),
            ),
            def(
                "brightdata.scrape_as_markdown",
                "Fetch a page and convert it to Markdown.",
                json!({"type": "object", "properties": {
                    "url": {"type": "string", "description": "The page address"}
                }}),
            ),
            def(
                "weather.getWeatherForecast",
                "Forecast for a city over the next days.",
                json!({"type": "object", "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer", "description": "How far ahead"}
                }}),
            ),
            def(
                "everything.echo",
                "Echoes back the input; also useful to test the weather of the wire.",
                json!({"type": "object", "properties": {
                    "message": {"type": "string", "description": "Text to echo"}
                }}),
            ),
            def(
                "crm.get_contact_by_email",
                "Look up a person in the address book.",
                json!({"type": "object", "properties": {
                    "filters": {"type": "array", "items": {"type": "object", "properties": {
                        "postalCode": {"type": "string", "description": "A zip, in any format"}
                    }}},
                    "mode": {"anyOf": [
                        {"type": "object", "properties": {"strictness": {"type": "number"}}}
                    ]}
                }}),
            ),
        ]
    }

    #[test]
    fn names_are_split_on_separators_case_and_digits() {
        assert_eq!(
            tokens("getWeatherForecast"),
            ["getweatherforecast", "get", "weather", "forecast"]
        );
        assert_eq!(
            tokens("brightdata.web_search"),
            [
                "brightdata.web_search",
                "web_search",
                "brightdata",
                "web",
                "search"
            ]
        );
        assert_eq!(
            tokens("getHTMLPage2"),
            ["gethtmlpage2", "get", "html", "pag", "2"]
        );
        assert_eq!(tokens("api-v2"), ["api-v2", "api", "v2", "v", "2"]);
        assert_eq!(tokens("the CSV of it"), ["csv"]);
    }

    #[test]
    fn non_ascii_scripts_are_kept() {
        assert_eq!(tokens("天気予報 Äpfel"), ["天気予報", "äpfel"]);
    }

    #[test]
    fn stopwords_are_sorted_and_short() {
        assert!(STOPWORDS.windows(2).all(|w| w[0] < w[1]));
        assert!(STOPWORDS.iter().all(|w| w.len() <= 5));
    }

    #[test]
    fn suffixes_meet() {
        for group in [
            &["invoice", "invoices", "invoicing", "invoiced"][..],
            &["create", "created", "creating", "creates"],
            &["search", "searches", "searching", "searched"],
            &["query", "queries"],
            &["stop", "stopped", "stopping", "stops"],
            &["box", "boxes"],
        ] {
            let stems: Vec<_> = group.iter().map(|w| tokens(w)).collect();
            assert!(stems.iter().all(|s| *s == stems[0]), "{group:?}: {stems:?}");
        }
        assert_eq!(
            tokens("string status address call called"),
            ["string", "status", "address", "call", "call"]
        );
    }

    #[test]
    fn exact_name_ranks_first() {
        let defs = catalog();
        let index = SearchIndex::build(&defs);
        for (i, d) in defs.iter().enumerate() {
            let hits = index.search(&d.name, 3);
            assert_eq!(hits[0].index, i, "{}: {hits:?}", d.name);
        }
    }

    #[test]
    fn description_only_term_finds_the_tool() {
        let index = SearchIndex::build(&catalog());
        let hits = index.search("fetch", 5);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].index, 1);
        let hits = index.search("address book", 5);
        assert_eq!(hits[0].index, 4);
    }

    #[test]
    fn parameter_names_and_nested_ones_find_the_tool() {
        let index = SearchIndex::build(&catalog());
        assert_eq!(index.search("country", 5)[0].index, 0);
        // Inside `items`, and inside `anyOf`.
        assert_eq!(index.search("postal code", 5)[0].index, 4);
        assert_eq!(index.search("strictness", 5)[0].index, 4);
        // A parameter description, nested.
        assert_eq!(index.search("zip", 5)[0].index, 4);
    }

    #[test]
    fn examples_are_indexed() {
        let mut defs = catalog();
        defs[2].input_examples = vec![json!({"city": "Reykjavik", "days": 3})];
        let index = SearchIndex::build(&defs);
        assert_eq!(index.search("reykjavik", 5)[0].index, 2);
    }

    #[test]
    fn name_matches_beat_description_matches() {
        let index = SearchIndex::build(&catalog());
        let hits = index.search("weather", 5);
        assert_eq!(hits.len(), 2);
        assert_eq!(hits[0].index, 2);
        assert_eq!(hits[1].index, 3);
        assert!(hits[0].score > hits[1].score);
    }

    #[test]
    fn a_name_match_beats_an_equal_description_match() {
        let defs = [
            def("b.list", "Creates an invoice.", json!({})),
            def("a.invoice", "Lists things.", json!({})),
        ];
        let index = SearchIndex::build(&defs);
        let hits = index.search("invoices", 5);
        assert_eq!(hits.len(), 2);
        assert_eq!(hits[0].index, 1);
        assert!(hits[0].score > hits[1].score);
    }

    #[test]
    fn results_are_deterministic_and_ties_go_by_index() {
        let defs: Vec<_> = (0..50)
            .map(|i| def(&format!("s{i}.same_tool"), "identical words", json!({})))
            .collect();
        let index = SearchIndex::build(&defs);
        let first = index.search("identical words", 10);
        let indexes: Vec<_> = first.iter().map(|h| h.index).collect();
        assert_eq!(indexes, (0..10).collect::<Vec<_>>());
        for _ in 0..5 {
            assert_eq!(index.search("identical words", 10), first);
            assert_eq!(
                SearchIndex::build(&defs).search("identical words", 10),
                first
            );
        }
    }

    #[test]
    fn limit_is_respected() {
        let index = SearchIndex::build(&catalog());
        assert_eq!(index.search("search weather echo contact page", 2).len(), 2);
        assert!(index.search("weather", 0).is_empty());
        assert_eq!(index.search("weather", 100).len(), 2);
    }

    #[test]
    fn empty_and_stopword_queries_find_nothing() {
        let index = SearchIndex::build(&catalog());
        assert!(index.search("", 5).is_empty());
        assert!(index.search("  \t ", 5).is_empty());
        assert!(index.search("the of and", 5).is_empty());
        assert!(index.search("xylophone", 5).is_empty());
        assert_eq!(index.len(), 5);
        assert!(!index.is_empty());
        assert!(SearchIndex::build(&[]).is_empty());
        assert!(SearchIndex::build(&[]).search("weather", 5).is_empty());
    }

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn the_dense_half_ranks_by_cosine_and_breaks_ties_by_index() {
        let vectors = [
            unit(&[1.0, 0.0, 0.0]),
            unit(&[0.0, 1.0, 0.0]),
            unit(&[1.0, 1.0, 0.0]),
            unit(&[0.0, 1.0, 0.0]),
        ];
        let dense = DenseIndex::build(&vectors).unwrap();
        assert_eq!((dense.len(), dense.dims()), (4, 3));
        let hits = dense.search(&unit(&[0.0, 1.0, 0.1]), 3);
        let order: Vec<usize> = hits.iter().map(|h| h.index).collect();
        assert_eq!(order, [1, 3, 2]);
        assert!(hits[0].score > hits[2].score);
        assert_eq!(hits[0].score, hits[1].score);
        // A query of another length, a zero limit, mixed lengths: nothing.
        assert!(dense.search(&[1.0, 0.0], 3).is_empty());
        assert!(dense.search(&unit(&[1.0, 0.0, 0.0]), 0).is_empty());
        assert!(DenseIndex::build(&[vec![1.0, 0.0], vec![1.0]]).is_none());
        assert!(DenseIndex::build::<Vec<f32>>(&[]).is_none());
    }

    #[test]
    fn the_dot_product_has_every_lane_and_the_tail() {
        let a: Vec<f32> = (0..19).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..19).map(|i| (i % 3) as f32).collect();
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert_eq!(dot(&a, &b), plain);
    }

    fn hits(indexes: &[usize]) -> Vec<Hit> {
        indexes
            .iter()
            .enumerate()
            .map(|(i, &index)| Hit {
                index,
                score: 10.0 - i as f32,
            })
            .collect()
    }

    fn ranks(k: f32, lexical: f32, dense: f32, depth: usize) -> Fusion {
        Fusion {
            method: Method::Ranks { k, lexical, dense },
            depth,
        }
    }

    fn order(fused: &[Ranked]) -> Vec<usize> {
        fused.iter().map(|r| r.index).collect()
    }

    #[test]
    fn rank_fusion_adds_the_reciprocal_ranks_of_both_halves() {
        let f = ranks(60.0, 1.0, 1.0, 100);
        let no_cosine = |_| unreachable!("rank fusion needs no cosine");
        // 7 is second in both: it beats 1 and 2, each first in one only.
        let fused = fuse(&hits(&[1, 7]), &hits(&[2, 7]), 3, f, no_cosine);
        assert_eq!(order(&fused), [7, 1, 2]);
        assert_eq!(fused[0].lexical.map(|r| r.rank), Some(2));
        assert_eq!(fused[0].dense.map(|r| r.rank), Some(2));
        assert!((fused[0].score - 2.0 / 62.0).abs() < 1e-6);
        assert_eq!(fused[1].dense, None);
        assert_eq!(fused[2].lexical, None);
        // Equal scores go by index.
        assert_eq!(fused[1].score, fused[2].score);
        // A weight scales its half; depth cuts each ranking.
        let dense_heavy = ranks(60.0, 1.0, 2.0, 100);
        assert_eq!(
            order(&fuse(
                &hits(&[1, 7]),
                &hits(&[2, 7]),
                3,
                dense_heavy,
                no_cosine
            )),
            [7, 2, 1]
        );
        let shallow = ranks(60.0, 1.0, 1.0, 1);
        assert_eq!(
            order(&fuse(&hits(&[1, 7]), &hits(&[2, 7]), 3, shallow, no_cosine)),
            [1, 2]
        );
    }

    #[test]
    fn score_fusion_scales_both_halves_and_asks_for_missing_cosines() {
        let f = Fusion {
            method: Method::Scores { alpha: 0.5 },
            depth: 2,
        };
        // BM25: 1 (10), 7 (5). Dense, cut at 2: 2 (1.0), 7 (0.5); 1's cosine
        // (0.0) is asked for.
        let lexical = [
            Hit {
                index: 1,
                score: 10.0,
            },
            Hit {
                index: 7,
                score: 5.0,
            },
        ];
        let dense = [
            Hit {
                index: 2,
                score: 1.0,
            },
            Hit {
                index: 7,
                score: 0.5,
            },
        ];
        let asked = std::cell::RefCell::new(Vec::new());
        let fused = fuse(&lexical, &dense, 3, f, |i| {
            asked.borrow_mut().push(i);
            0.0
        });
        assert_eq!(*asked.borrow(), [1]);
        // 1: (1 + 0) / 2; 7: (0.5 + 0.5) / 2; 2: (0 + 1) / 2.
        assert_eq!(order(&fused), [1, 2, 7]);
        assert!(fused.iter().all(|r| r.score == 0.5), "{fused:?}");
        let dense_only = Fusion {
            method: Method::Scores { alpha: 0.0 },
            depth: 2,
        };
        assert_eq!(
            order(&fuse(&lexical, &dense, 3, dense_only, |_| 0.0)),
            [2, 7, 1]
        );
    }

    #[test]
    fn the_dense_text_names_the_tool_in_words_and_says_what_it_does() {
        let schema = json!({"type": "object", "properties": {
            "email_address": {"type": "string", "description": "Their address"},
            "limit": {"type": "integer"}
        }});
        let mut d = def(
            "crm.getContactByEmail",
            "  Look up a person.  ",
            schema.clone(),
        );
        d.title = Some("Contact lookup".into());
        assert_eq!(
            dense_text(&d),
            "crm: get contact by email. Contact lookup. Look up a person."
        );
        // Without a description, the parameters say what it takes.
        let mut d = def("crm.getContactByEmail", " ", schema);
        d.title = Some("Contact lookup".into());
        assert_eq!(
            dense_text(&d),
            "crm: get contact by email. Contact lookup\nemail address: Their address\nlimit"
        );
    }
}
