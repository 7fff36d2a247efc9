//! The catalog: every tool the layer knows, checked, scanned and held against its
//! pin, and the search index over those that may be listed.
//!
//! [`assemble`] is a pure function from listings (what each server offered) and the
//! stored pins to a [`Catalog`] and the pin changes to store. For each tool, in
//! order:
//!
//! 1. **register**: the namespaced name follows the MCP rule; the input schema (and
//!    output schema) compiles as JSON Schema of the draft it declares or implies
//!    (see `compile`); every `input_examples` entry validates against the input
//!    schema. A tool failing any of these is refused with a [`Refusal`] naming
//!    it; the rest of the catalog is unaffected.
//! 2. **scan**: descriptions, parameter descriptions and examples go through the
//!    [`scan`](crate::scan) rules; the server's [`ScanPolicy`] turns each finding's
//!    severity into flag, strip or block.
//! 3. **pin** (upstream servers only; the built-in tools are part of trawl): the
//!    sha256 of the definition's canonical JSON is compared with the stored pin.
//!    First sight of a server pins all its tools; a changed definition is
//!    quarantined and a `tool_change` approval raised with the differences; a tool
//!    new to a known server is pinned or held per the server's `new_tools` policy.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use jsonschema::Draft;
use serde::Serialize;
use serde_json::{Value, json};
use trawl_core::ports::{BatchOf, PinChange, PinStatus, ToolDef, ToolPin};

use crate::canonical::{definition_hash, diff, render};
use crate::config::{NewTools, Overlaps, ScanAction, ScanPolicy};
use crate::name::{ServerName, ToolName};
use crate::scan::{
    Described, Finding, NameIndex, ScanContext, function_overlaps, overlap_finding, rules_of,
    scan_catalog_server, strip_definition,
};
use crate::search::{DenseIndex, Fusion, Query, Rank, SearchIndex, dense_text, fuse};

/// Where a tool stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ToolState {
    /// Listed and callable (policy permitting).
    Listed,
    /// Its definition changed since it was pinned; a `tool_change` approval decides.
    Quarantined { approval: Option<i64> },
    /// New on a server whose new tools need a `new_tool` approval.
    Awaiting { approval: Option<i64> },
    /// A change (or a new tool) that was rejected.
    Rejected,
    /// A scanner finding whose policy is `block`.
    Blocked { rules: Vec<&'static str> },
    /// A scanner finding whose policy is `hold`: out until a person approves the
    /// `tool_review` approval (`None`: not raised yet, or no store to raise it in).
    Held {
        approval: Option<i64>,
        rules: Vec<&'static str>,
    },
}

impl ToolState {
    /// The audit decision of a call to a tool in this state, when not listed.
    pub fn refusal(&self) -> Option<&'static str> {
        match self {
            ToolState::Listed => None,
            ToolState::Quarantined { .. } => Some("quarantined"),
            ToolState::Awaiting { .. } => Some("awaiting_approval"),
            ToolState::Rejected => Some("rejected"),
            ToolState::Blocked { .. } => Some("blocked"),
            ToolState::Held { .. } => Some("held_for_review"),
        }
    }
}

/// A tool of the catalog.
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: ToolName,
    pub builtin: bool,
    /// What a model is shown: namespaced, with stripped spans removed.
    pub def: ToolDef,
    /// sha256 of the server's own definition (before stripping).
    pub hash: String,
    pub state: ToolState,
    pub findings: Vec<Finding>,
    pub cost_model: String,
    pub batch: Option<BatchOf>,
    pub result_max_bytes: usize,
    pub(crate) validator: Arc<jsonschema::Validator>,
}

/// A tool refused at registration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Refusal {
    pub server: String,
    /// The tool's name as the server gave it (or a placeholder when it gave none).
    pub tool: String,
    pub error: String,
}

/// A server as the catalog last saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServerState {
    pub name: String,
    /// `builtin`, `stdio` or `http`.
    pub transport: &'static str,
    /// Why it could not be listed, if it could not.
    pub error: Option<String>,
    pub tools: usize,
    /// When its tools were listed, when they come from the store: listed
    /// earlier (the catalog was assembled without starting it), or stale (it
    /// could not be listed now, `error` says why). `None`: listed now.
    pub listed_ms: Option<i64>,
}

/// What one server offered.
#[derive(Clone, Debug)]
pub struct Listing {
    pub server: ServerName,
    pub transport: &'static str,
    pub builtin: bool,
    /// The `tools/list` entries, with the server's own names.
    pub tools: Vec<Offered>,
    pub scan: ScanPolicy,
    pub allow_hosts: Vec<String>,
    pub new_tools: NewTools,
    /// Whether its tools may do what other servers' tools do (`overlaps`).
    pub overlaps: Overlaps,
    pub result_max_bytes: usize,
    /// The server could not be listed. Without `listed_ms` none of its tools
    /// is listed; with it, `tools` are its last good listing, listed as stale.
    pub error: Option<String>,
    /// When `tools` were listed, when they come from the store rather than
    /// from the server now.
    pub listed_ms: Option<i64>,
}

impl Listing {
    /// What an upstream server offered, under the default policies: its scan
    /// policy, no allowed hosts, new tools pinned on sight, results up to
    /// [`RESULT_MAX_BYTES`](crate::config::RESULT_MAX_BYTES).
    pub fn upstream(server: ServerName, transport: &'static str, tools: Vec<Value>) -> Listing {
        Listing {
            server,
            transport,
            builtin: false,
            tools: tools.into_iter().map(Offered::upstream).collect(),
            scan: ScanPolicy::default(),
            allow_hosts: Vec::new(),
            new_tools: NewTools::Auto,
            overlaps: Overlaps::Hold,
            result_max_bytes: crate::config::RESULT_MAX_BYTES,
            error: None,
            listed_ms: None,
        }
    }
}

/// One tool a server offered.
#[derive(Clone, Debug)]
pub struct Offered {
    pub raw: Value,
    pub cost_model: String,
    pub batch: Option<BatchOf>,
}

impl Offered {
    /// A tool of an upstream server, as it listed it.
    pub fn upstream(raw: Value) -> Offered {
        Offered {
            raw,
            cost_model: "billed by the server's operator, not by trawl".into(),
            batch: None,
        }
    }
}

/// Every tool the layer knows.
#[derive(Debug, Default)]
pub struct Catalog {
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
    /// Entries that are listed, in name order; the search index covers these.
    listed: Vec<usize>,
    index: SearchIndex,
    /// The listed tools' sentence vectors, in the order of `listed`, once
    /// [`Catalog::set_vectors`] gave them.
    dense: Option<DenseIndex>,
    pub refused: Vec<Refusal>,
    pub servers: Vec<ServerState>,
}

impl Catalog {
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.by_name.get(name).map(|&i| &self.entries[i])
    }

    /// Every entry, listed or not, in name order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The tools a model may be shown.
    pub fn listed(&self) -> impl Iterator<Item = &Entry> {
        self.listed.iter().map(|&i| &self.entries[i])
    }

    /// The best `limit` listed tools for `query`, best first: BM25 over names,
    /// descriptions, parameters and examples, fused with the dense half when the
    /// catalog has vectors and the query one (see [`crate::search`]).
    pub fn search(&self, query: &Query, limit: usize) -> Vec<Found<'_>> {
        self.search_with(query, limit, Fusion::default())
    }

    /// [`Catalog::search`] with other fusion settings (for measuring them).
    pub fn search_with(&self, query: &Query, limit: usize, fusion: Fusion) -> Vec<Found<'_>> {
        if limit == 0 {
            return Vec::new();
        }
        let depth = limit.max(fusion.depth);
        let lexical = self.index.search(&query.text, depth);
        let dense = match (&self.dense, &query.vector) {
            (Some(d), Some(v)) => d.search(v, depth),
            _ => Vec::new(),
        };
        let entry = |i: usize| &self.entries[self.listed[i]];
        if dense.is_empty() {
            return lexical
                .into_iter()
                .take(limit)
                .enumerate()
                .map(|(i, h)| Found {
                    entry: entry(h.index),
                    score: h.score,
                    lexical: Some(Rank {
                        rank: i + 1,
                        score: h.score,
                    }),
                    dense: None,
                })
                .collect();
        }
        let fusion = Fusion { depth, ..fusion };
        let cosine = |i: usize| match (&self.dense, &query.vector) {
            (Some(d), Some(v)) => d.cosine(i, v),
            _ => 0.0,
        };
        fuse(&lexical, &dense, limit, fusion, cosine)
            .into_iter()
            .map(|r| Found {
                entry: entry(r.index),
                score: r.score,
                lexical: r.lexical,
                dense: r.dense,
            })
            .collect()
    }

    /// The best `limit` matches of `query` among the listed tools that `keep`
    /// accepts, best first: tools `keep` refuses take no place in the limit.
    pub fn search_where(
        &self,
        query: &Query,
        limit: usize,
        keep: impl Fn(&Entry) -> bool,
    ) -> Vec<Found<'_>> {
        let mut want = limit;
        loop {
            let hits = self.search(query, want);
            let all = hits.len() < want;
            let kept: Vec<Found<'_>> = hits
                .into_iter()
                .filter(|f| keep(f.entry))
                .take(limit)
                .collect();
            if kept.len() == limit || all {
                return kept;
            }
            want = want.saturating_mul(4);
        }
    }

    /// What the dense half embeds of each listed tool, in order: give
    /// [`Catalog::set_vectors`] their vectors.
    pub fn dense_texts(&self) -> Vec<String> {
        self.listed().map(|e| dense_text(&e.def)).collect()
    }

    /// The sentence vectors of [`Catalog::dense_texts`], in order: searches
    /// with a query vector then use the dense half too. Vectors that are not
    /// one per listed tool, all of one length, are refused (`false`) and the
    /// search stays lexical.
    pub fn set_vectors<V: AsRef<[f32]>>(&mut self, vectors: &[V]) -> bool {
        self.dense = DenseIndex::build(vectors).filter(|d| d.len() == self.listed.len());
        self.dense.is_some()
    }

    /// Whether the dense half is on.
    pub fn has_vectors(&self) -> bool {
        self.dense.is_some()
    }

    /// Tokens (o200k_base) of the definitions of `loaded` (models are shown these)
    /// and of every listed tool.
    pub fn context_tokens<'a>(
        &self,
        loaded: impl IntoIterator<Item = &'a ToolDef>,
    ) -> (usize, usize) {
        let part = loaded.into_iter().map(crate::tokens::def_tokens).sum();
        let whole = self
            .listed()
            .map(|e| crate::tokens::def_tokens(&e.def))
            .sum();
        (part, whole)
    }
}

/// A tool a search found, with where each half of the search put it.
#[derive(Clone, Copy, Debug)]
pub struct Found<'a> {
    pub entry: &'a Entry,
    /// The fused score; BM25 when the search was lexical only.
    pub score: f32,
    pub lexical: Option<Rank>,
    pub dense: Option<Rank>,
}

/// The arguments of `tool_search`; its input schema is derived from them.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolSearchArgs {
    /// What the tool should do, in a few words.
    #[schema(min_length = 1, max_length = 1000)]
    pub query: String,
    /// How many tools to return.
    #[schema(minimum = 1, maximum = 20, default = 5)]
    pub limit: Option<usize>,
}

impl ToolSearchArgs {
    /// Tools returned when the caller does not say.
    pub const DEFAULT_LIMIT: usize = 5;
    /// The longest query, in characters (the schema's `maxLength`): a query
    /// is a few words, and each one is tokenized and embedded.
    pub const MAX_QUERY_CHARS: usize = 1000;
}

/// The definition of the `tool_search` meta-tool, the one tool an agent starts with.
pub fn tool_search_def() -> ToolDef {
    use crate::schema::{Contract, of};
    ToolDef {
        name: crate::TOOL_SEARCH.into(),
        title: Some("Search the tools".into()),
        description: "Find the tools for a task. Returns the definitions of the best matches; \
                      call the tools it returns by their names."
            .into(),
        input_schema: Value::Object(of::<ToolSearchArgs>(Contract::Input)),
        output_schema: None,
        annotations: json!({"readOnlyHint": true, "openWorldHint": false}),
        input_examples: vec![json!({"query": "fetch a web page as markdown", "limit": 3})],
    }
}

/// A definition for a model that takes no `input_examples` field: the examples
/// rendered into the description.
pub fn with_examples_in_description(def: &ToolDef) -> ToolDef {
    let mut out = def.clone();
    if !out.input_examples.is_empty() {
        out.description.push_str("\n\nExamples of arguments:");
        for ex in &out.input_examples {
            out.description.push_str("\n- ");
            out.description.push_str(&ex.to_string());
        }
        out.input_examples.clear();
    }
    out
}

/// Checks one offered tool: name, schemas, examples.
fn register(
    server: &ServerName,
    raw: &Value,
) -> Result<(ToolName, ToolDef, jsonschema::Validator), Refusal> {
    let given = raw.get("name").and_then(Value::as_str);
    let refuse = |error: String| Refusal {
        server: server.to_string(),
        tool: given.map_or_else(|| "(no name)".to_owned(), |n| n.chars().take(160).collect()),
        error,
    };
    let bare = given.ok_or_else(|| refuse("the tool has no name".into()))?;
    let name = ToolName::namespaced(server, bare).map_err(|e| refuse(e.to_string()))?;
    let mut def: ToolDef = serde_json::from_value(raw.clone())
        .map_err(|e| refuse(format!("not a tool definition: {e}")))?;
    def.name = name.to_string();
    // SDKs that model tools strictly drop unknown top-level fields; examples may
    // then travel in `_meta`.
    if def.input_examples.is_empty()
        && let Some(ex) = raw
            .pointer("/_meta/input_examples")
            .and_then(Value::as_array)
    {
        def.input_examples = ex.clone();
    }
    if def.input_schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(refuse(
            "inputSchema must be a JSON Schema object with \"type\": \"object\"".into(),
        ));
    }
    let validator =
        compile(&def.input_schema).map_err(|e| refuse(format!("invalid inputSchema: {e}")))?;
    if let Some(out) = &def.output_schema {
        compile(out).map_err(|e| refuse(format!("invalid outputSchema: {e}")))?;
    }
    for (i, ex) in def.input_examples.iter().enumerate() {
        if let Some(e) = validator.iter_errors(ex).next() {
            let at = e.instance_path().to_string();
            return Err(refuse(format!(
                "input_examples[{i}] {ex} does not match the input schema: {}{e}",
                if at.is_empty() {
                    String::new()
                } else {
                    format!("at {at}: ")
                },
            )));
        }
    }
    Ok((name, def, validator))
}

/// What the stages after the rules found, per definition hash: the semantic
/// detector's and the model judge's findings, and the scores a reviewer is shown.
#[derive(Clone, Debug, Default)]
pub struct Assessment {
    pub findings: HashMap<String, Vec<Finding>>,
    pub scores: HashMap<String, Value>,
}

impl Assessment {
    fn scores(&self, hash: &str) -> Value {
        self.scores.get(hash).cloned().unwrap_or(Value::Null)
    }
}

/// The drafts of JSON Schema, newest first.
const DRAFTS: [Draft; 5] = [
    Draft::Draft202012,
    Draft::Draft201909,
    Draft::Draft7,
    Draft::Draft6,
    Draft::Draft4,
];

fn draft_name(d: Draft) -> &'static str {
    match d {
        Draft::Draft4 => "draft-04",
        Draft::Draft6 => "draft-06",
        Draft::Draft7 => "draft-07",
        Draft::Draft201909 => "2019-09",
        _ => "2020-12",
    }
}

/// Why a schema cannot be compiled, with the draft it was read as.
#[derive(Debug)]
struct SchemaError {
    draft: Draft,
    /// The draft is the one `$schema` names; otherwise no draft allows it.
    declared: bool,
    /// Where in the schema, as a JSON pointer (empty: the schema itself).
    at: String,
    reason: String,
}

impl std::fmt::Display for SchemaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.at.is_empty() {
            write!(f, "at {}: ", self.at)?;
        }
        write!(f, "{} (", self.reason)?;
        if self.declared {
            write!(
                f,
                "JSON Schema {}, as its $schema says)",
                draft_name(self.draft)
            )
        } else {
            write!(
                f,
                "no JSON Schema draft allows it; as {}, the draft it implies)",
                draft_name(self.draft)
            )
        }
    }
}

/// Compiles a tool's schema with the semantics of the JSON Schema draft it
/// declares or implies, as MCP servers send schemas of every draft (draft-04 from
/// older SDKs, draft-07 from zod-to-json-schema, 2020-12 from the spec's own
/// examples).
///
/// - A `$schema` naming a draft picks it, and the schema must be valid against
///   that draft's meta-schema.
/// - Otherwise (no `$schema`, or one naming no draft the `jsonschema` crate knows:
///   trawl never fetches a meta-schema a server points at), the schema is read as
///   the newest draft whose meta-schema accepts it, starting from the newest draft
///   its keywords allow: `definitions` or `dependencies` mean draft-07 or older,
///   `$recursiveRef` or `$recursiveAnchor` 2019-09 or older. The meta-schemas
///   settle the rest: a boolean `exclusiveMinimum` is draft-04, an array of
///   `items` 2019-09 or older. It is refused only when no draft accepts it, with
///   the reason the draft it implies gives.
///
/// Arguments are then checked with that draft's semantics as the crate has them:
/// up to draft-07, `format` asserts and keywords beside a `$ref` are ignored.
fn compile(schema: &Value) -> Result<jsonschema::Validator, SchemaError> {
    let build = |draft: Draft| {
        jsonschema::options()
            .with_draft(draft)
            .build(schema)
            .map_err(|e| SchemaError {
                draft,
                declared: false,
                at: e.instance_path().to_string(),
                reason: e.to_string(),
            })
    };
    if let Some(draft) = declared_draft(schema) {
        return build(draft).map_err(|e| SchemaError {
            declared: true,
            ..e
        });
    }
    let newest = implied_newest(schema);
    let order = DRAFTS
        .iter()
        .skip_while(|d| **d != newest)
        .chain(DRAFTS.iter().take_while(|d| **d != newest));
    let mut first = None;
    for &draft in order {
        match build(draft) {
            Ok(v) => return Ok(v),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    Err(first.unwrap_or(SchemaError {
        draft: newest,
        declared: false,
        at: String::new(),
        reason: "no draft to compile it with".into(),
    }))
}

/// The draft a schema's `$schema` names, when it names one.
fn declared_draft(schema: &Value) -> Option<Draft> {
    let uri = schema.get("$schema")?.as_str()?;
    DRAFTS
        .into_iter()
        .find(|d| *d == Draft::from_schema_uri(uri))
}

/// The newest draft in which every keyword a schema uses is still defined.
fn implied_newest(schema: &Value) -> Draft {
    let mut newest = Draft::Draft202012;
    keywords(schema, &mut |k| {
        let cap = match k {
            "definitions" | "dependencies" => Draft::Draft7,
            "$recursiveRef" | "$recursiveAnchor" => Draft::Draft201909,
            _ => return,
        };
        newest = newest.min(cap);
    });
    newest
}

/// Calls `f` with every keyword of `schema` and of its subschemas: the keys of
/// schema objects, not the property names of `properties` and the like, nor
/// anything inside values (`enum`, `const`, `default`, `examples`).
fn keywords(schema: &Value, f: &mut impl FnMut(&str)) {
    let Some(obj) = schema.as_object() else {
        return;
    };
    for (k, v) in obj {
        f(k);
        match k.as_str() {
            "enum" | "const" | "default" | "examples" | "example" => {}
            "properties" | "patternProperties" | "definitions" | "$defs" | "dependentSchemas"
            | "dependencies" => {
                for sub in v.as_object().into_iter().flat_map(|m| m.values()) {
                    keywords(sub, f);
                }
            }
            _ => match v {
                Value::Object(_) => keywords(v, f),
                Value::Array(items) => items.iter().for_each(|i| keywords(i, f)),
                _ => {}
            },
        }
    }
}

/// Builds the catalog from what the servers offered and the stored pins (`None`:
/// nothing is pinned, as for a layer without a store), and the pin changes to
/// store; the rules alone judge the definitions.
pub fn assemble(listings: &[Listing], pins: Option<&[ToolPin]>) -> (Catalog, Vec<PinChange>) {
    assemble_with(listings, pins, &Assessment::default())
}

/// A server's tools that registered: (index in its listing, name, definition,
/// input validator).
type Registered = Vec<(usize, ToolName, ToolDef, jsonschema::Validator)>;

/// The scanner's findings for every registered tool of every server, in order.
/// The servers are scanned on as many threads as the machine has cores: the
/// scan is pure, and it is most of a large catalog's assembly.
fn scan_servers(
    listings: &[Listing],
    registered: &[Registered],
    names: &NameIndex,
) -> Vec<Vec<Vec<Finding>>> {
    let scan = |i: usize| {
        let (Some(l), Some(tools)) = (listings.get(i), registered.get(i)) else {
            return Vec::new();
        };
        let own_tools: Vec<String> = tools.iter().map(|(_, n, ..)| n.to_string()).collect();
        let ctx = ScanContext {
            server: l.server.as_str(),
            allow_hosts: &l.allow_hosts,
            // The catalog's index takes their place (`scan_catalog_server`).
            other_tools: &[],
            own_tools: &own_tools,
        };
        let raws: Vec<Value> = tools
            .iter()
            .map(|(i, ..)| l.tools[*i].raw.clone())
            .collect();
        scan_catalog_server(&raws, &ctx, names)
    };
    let servers = registered.len();
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(servers);
    if threads <= 1 {
        return (0..servers).map(scan).collect();
    }
    // Each thread takes the next server not yet taken, so one large server
    // does not leave the other threads idle.
    let next = AtomicUsize::new(0);
    let mut done: Vec<(usize, Vec<Vec<Finding>>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= servers {
                            return out;
                        }
                        out.push((i, scan(i)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, f)| f).collect()
}

/// Adds `function-overlap` findings: a tool that does what another server's
/// tool does under another name. Built-in tools and servers with `overlaps:
/// allow` get none, and a pinned server's tool gets none for resembling a tool
/// of a server new to the catalog (the newcomer is the one to review).
fn overlaps(
    listings: &[Listing],
    registered: &[Registered],
    known_servers: &HashSet<&str>,
    scanned: &mut [Vec<Vec<Finding>>],
) {
    let mut described = Vec::new();
    let mut at = Vec::new();
    for (si, (l, tools)) in listings.iter().zip(registered).enumerate() {
        for (ti, (_, name, def, _)) in tools.iter().enumerate() {
            described.push(Described {
                server: l.server.as_str(),
                name: name.bare(),
                description: &def.description,
            });
            at.push((si, ti));
        }
    }
    let found = function_overlaps(&described);
    for (k, others) in found.iter().enumerate() {
        let (si, ti) = at[k];
        let l = &listings[si];
        if l.builtin || l.overlaps == Overlaps::Allow {
            continue;
        }
        let known = known_servers.contains(l.server.as_str());
        let partner = others.iter().find(|&&(j, _)| {
            let other = &listings[at[j].0];
            other.builtin || !known || known_servers.contains(other.server.as_str())
        });
        let Some(&(j, share)) = partner else {
            continue;
        };
        let (osi, oti) = at[j];
        let other = registered[osi][oti].1.to_string();
        if let Some(f) = scanned.get_mut(si).and_then(|s| s.get_mut(ti)) {
            f.push(overlap_finding(described[k].description, &other, share));
        }
    }
}

/// [`assemble`], with what the later stages of the guard found.
pub fn assemble_with(
    listings: &[Listing],
    pins: Option<&[ToolPin]>,
    assessment: &Assessment,
) -> (Catalog, Vec<PinChange>) {
    let mut catalog = Catalog::default();
    let mut changes = Vec::new();
    let pinning = pins.is_some();
    let pins: HashMap<&str, &ToolPin> = pins
        .unwrap_or_default()
        .iter()
        .map(|p| (p.tool.as_str(), p))
        .collect();
    let known_servers: HashSet<&str> = pins.values().map(|p| p.server.as_str()).collect();

    // Register first: shadowing is judged against every other server's tools.
    let mut registered: Vec<Registered> = Vec::new();
    for l in listings {
        let mut ok = Vec::new();
        let mut seen = HashSet::new();
        for (i, o) in l.tools.iter().enumerate() {
            match register(&l.server, &o.raw) {
                Ok((name, def, v)) if seen.insert(name.clone()) => ok.push((i, name, def, v)),
                Ok((name, ..)) => catalog.refused.push(Refusal {
                    server: l.server.to_string(),
                    tool: name.bare().to_owned(),
                    error: "listed twice by its server; the first is kept".into(),
                }),
                Err(r) => catalog.refused.push(r),
            }
        }
        registered.push(ok);
    }
    let all_names: Vec<String> = registered
        .iter()
        .flat_map(|r| r.iter().map(|(_, n, ..)| n.to_string()))
        .collect();
    let names = NameIndex::new(all_names.iter().map(String::as_str));

    let mut scanned = scan_servers(listings, &registered, &names);
    overlaps(listings, &registered, &known_servers, &mut scanned);

    for ((l, tools), findings) in listings.iter().zip(registered).zip(scanned) {
        catalog.servers.push(ServerState {
            name: l.server.to_string(),
            transport: l.transport,
            error: l.error.clone(),
            tools: tools.len(),
            listed_ms: l.listed_ms,
        });
        let server_known = known_servers.contains(l.server.as_str());
        for ((i, name, mut def, validator), mut found) in tools.into_iter().zip(findings) {
            let offered = &l.tools[i];
            let hash = definition_hash(&offered.raw);
            if let Some(more) = assessment.findings.get(&hash) {
                found.extend(more.iter().cloned());
            }
            let rules_at =
                |action: ScanAction| rules_of(&found, |f| l.scan.action(f.severity) == action);
            let worst = found.iter().map(|f| l.scan.action(f.severity)).max();
            // What a model is shown of a tool that is not blocked: without the
            // sentences and values of what was flagged or stripped (a held
            // tool's held findings are for the reviewer to see).
            if worst < Some(ScanAction::Block) {
                let strip: Vec<Finding> = found
                    .iter()
                    .filter(|f| l.scan.action(f.severity) <= ScanAction::Strip)
                    .cloned()
                    .collect();
                if !strip.is_empty() {
                    let cleaned = strip_definition(&offered.raw, &strip);
                    if let Ok(mut d) = serde_json::from_value::<ToolDef>(cleaned) {
                        d.name = name.to_string();
                        def = d;
                    }
                }
            }
            let stored = pins.get(name.as_str()).copied();
            let state = if worst == Some(ScanAction::Block) {
                ToolState::Blocked {
                    rules: rules_at(ScanAction::Block),
                }
            } else if worst == Some(ScanAction::Hold) {
                let review = Review {
                    rules: rules_at(ScanAction::Hold),
                    findings: &found,
                    scores: assessment.scores(&hash),
                };
                hold_for_review(
                    &name,
                    l,
                    &offered.raw,
                    &hash,
                    stored,
                    pinning,
                    review,
                    &mut changes,
                )
            } else if pinning && !l.builtin {
                pin(
                    &name,
                    l,
                    &offered.raw,
                    &hash,
                    stored,
                    server_known,
                    &mut changes,
                )
                .unwrap_or(ToolState::Listed)
            } else {
                ToolState::Listed
            };
            catalog.entries.push(Entry {
                name,
                builtin: l.builtin,
                def,
                hash,
                state,
                findings: found,
                cost_model: offered.cost_model.clone(),
                batch: offered.batch.clone(),
                result_max_bytes: l.result_max_bytes,
                validator: Arc::new(validator),
            });
        }
    }
    catalog.entries.sort_by(|a, b| a.name.cmp(&b.name));
    for (i, e) in catalog.entries.iter().enumerate() {
        catalog.by_name.insert(e.name.to_string(), i);
    }
    let failed: HashSet<&str> = listings
        .iter()
        .filter(|l| l.error.is_some() && l.listed_ms.is_none())
        .map(|l| l.server.as_str())
        .collect();
    catalog.listed = (0..catalog.entries.len())
        .filter(|&i| {
            let e = &catalog.entries[i];
            e.state == ToolState::Listed && !failed.contains(e.name.server())
        })
        .collect();
    let defs: Vec<ToolDef> = catalog
        .listed
        .iter()
        .map(|&i| catalog.entries[i].def.clone())
        .collect();
    catalog.index = SearchIndex::build(&defs);
    (catalog, changes)
}

/// Why a tool is held for review: what a reviewer is shown.
struct Review<'a> {
    rules: Vec<&'static str>,
    findings: &'a [Finding],
    scores: Value,
}

/// Whether a person approved this pin (rather than first sight or policy).
fn reviewed(p: &ToolPin) -> bool {
    p.status == PinStatus::Active
        && p.approved_by
            .as_deref()
            .is_some_and(|by| by != "first-sight" && by != "policy:auto")
}

/// Holds a tool the scanner wants reviewed: listed when a person approved this
/// very definition, otherwise out, with a `tool_review` approval raised (once
/// per definition) carrying the findings, their spans and the scores. Without a
/// store nothing can be raised: the tool stays out.
#[allow(clippy::too_many_arguments)]
fn hold_for_review(
    name: &ToolName,
    l: &Listing,
    raw: &Value,
    hash: &str,
    stored: Option<&ToolPin>,
    pinning: bool,
    review: Review<'_>,
    changes: &mut Vec<PinChange>,
) -> ToolState {
    let rules = review.rules;
    if !pinning {
        return ToolState::Held {
            approval: None,
            rules,
        };
    }
    if let Some(p) = stored {
        if p.hash.as_deref() == Some(hash) && reviewed(p) {
            return ToolState::Listed;
        }
        if p.pending_hash.as_deref() == Some(hash) {
            match p.status {
                PinStatus::Rejected => return ToolState::Rejected,
                PinStatus::Quarantined => {
                    return ToolState::Held {
                        approval: p.approval_id,
                        rules,
                    };
                }
                _ => {}
            }
        }
    }
    let tool = name.to_string();
    let server = l.server.to_string();
    let findings: Vec<Value> = review
        .findings
        .iter()
        .map(|f| {
            json!({
                "rule": f.rule,
                "severity": f.severity,
                "field": f.field,
                "span": [f.span.start, f.span.end],
                "excerpt": f.excerpt,
                "message": f.message,
            })
        })
        .collect();
    let report: Vec<String> = review
        .findings
        .iter()
        .map(|f| {
            format!(
                "{:?} {} at {} [{}..{}]: {} ({})",
                f.severity, f.rule, f.field, f.span.start, f.span.end, f.message, f.excerpt
            )
        })
        .collect();
    changes.push(PinChange::Hold {
        reason: format!(
            "{tool} is held for review: the scanner found {}",
            rules.join(", ")
        ),
        detail: json!({
            "server": server,
            "tool": tool,
            "hash": hash,
            "definition": raw,
            "findings": findings,
            "scores": review.scores,
            "report": report.join("\n"),
            "pinned_hash": stored.and_then(|p| p.hash.clone()),
        }),
        tool,
        server,
        kind: "tool_review",
        hash: hash.to_owned(),
        definition: raw.clone(),
    });
    ToolState::Held {
        approval: None,
        rules,
    }
}

/// A new tool held for a `new_tool` approval.
fn hold_new(tool: String, server: String, hash: &str, raw: &Value) -> PinChange {
    PinChange::Hold {
        reason: format!("{server} offers a new tool, {tool}; its policy for new tools is approve"),
        detail: json!({"server": server, "tool": tool, "new": raw}),
        tool,
        server,
        kind: "new_tool",
        hash: hash.to_owned(),
        definition: raw.clone(),
    }
}

/// Holds one upstream tool against its pin: the state it is held in (`None`:
/// listed), with the change to store, if any, added to `changes`.
fn pin(
    name: &ToolName,
    l: &Listing,
    raw: &Value,
    hash: &str,
    stored: Option<&ToolPin>,
    server_known: bool,
    changes: &mut Vec<PinChange>,
) -> Option<ToolState> {
    let tool = name.to_string();
    let server = l.server.to_string();
    let Some(p) = stored else {
        if !server_known || l.new_tools == NewTools::Auto {
            changes.push(PinChange::Pin {
                tool,
                server,
                hash: hash.to_owned(),
                definition: raw.clone(),
                by: if server_known {
                    "policy:auto"
                } else {
                    "first-sight"
                }
                .into(),
            });
            return None;
        }
        changes.push(hold_new(tool, server, hash, raw));
        return Some(ToolState::Awaiting { approval: None });
    };
    if p.hash.as_deref() == Some(hash) {
        if p.status != PinStatus::Active {
            changes.push(PinChange::Restore { tool });
        }
        return None;
    }
    if p.pending_hash.as_deref() == Some(hash) {
        // Seen before: its approval is pending, or it was rejected.
        return Some(match p.status {
            PinStatus::Awaiting => ToolState::Awaiting {
                approval: p.approval_id,
            },
            PinStatus::Rejected => ToolState::Rejected,
            _ => ToolState::Quarantined {
                approval: p.approval_id,
            },
        });
    }
    let Some(old) = &p.definition else {
        // A new tool held for approval changed again before a decision.
        changes.push(hold_new(tool, server, hash, raw));
        return Some(ToolState::Awaiting { approval: None });
    };
    let changed = diff(old, raw);
    let fields: Vec<&str> = {
        let mut f: Vec<&str> = changed
            .iter()
            .map(|c| c.path.split(['.', '[']).next().unwrap_or_default())
            .collect();
        f.dedup();
        f
    };
    changes.push(PinChange::Hold {
        reason: format!(
            "{tool} changed since it was pinned ({}): quarantined until approved",
            fields.join(", ")
        ),
        detail: json!({
            "server": server,
            "tool": tool,
            "old_hash": p.hash,
            "new_hash": hash,
            "old": old,
            "new": raw,
            "changes": changed,
            "diff": render(&changed),
        }),
        tool,
        server,
        kind: "tool_change",
        hash: hash.to_owned(),
        definition: raw.clone(),
    });
    Some(ToolState::Quarantined { approval: None })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn listing(server: &str, tools: Vec<Value>, builtin: bool) -> Listing {
        Listing {
            builtin,
            result_max_bytes: 1024,
            ..Listing::upstream(ServerName::parse(server).unwrap(), "stdio", tools)
        }
    }

    fn tool(name: &str) -> Value {
        json!({"name": name, "description": "Looks things up.", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}, "input_examples": [{"q": "tea"}]})
    }

    #[test]
    fn a_filtered_search_fills_its_limit_from_further_down() {
        let tools: Vec<Value> = (0..40).map(|i| tool(&format!("find_{i}"))).collect();
        let (c, _) = assemble(&[listing("up", tools, false)], None);
        let all: Vec<&str> = c
            .search(&Query::words("looks things up"), 40)
            .iter()
            .map(|f| f.entry.name.as_str())
            .collect();
        assert_eq!(all.len(), 40);
        // Only every tenth tool is kept: the limit of 3 is still filled, in the
        // unfiltered order.
        let q = Query::words("looks things up");
        let keep = |e: &Entry| all.iter().position(|n| *n == e.name.as_str()).unwrap() % 10 == 9;
        let kept: Vec<&str> = c
            .search_where(&q, 3, keep)
            .iter()
            .map(|f| f.entry.name.as_str())
            .collect();
        assert_eq!(kept, [all[9], all[19], all[29]]);
        // Fewer matches than the limit: all of them, and no endless widening.
        assert_eq!(c.search_where(&q, 10, keep).len(), 4);
        assert!(c.search_where(&q, 5, |_| false).is_empty());
        assert!(c.search_where(&q, 0, |_| true).is_empty());
    }

    #[test]
    fn examples_go_to_models_that_take_them_and_into_the_description_for_others() {
        let (c, _) = assemble(&[listing("up", vec![tool("find")], false)], None);
        let def = &c.get("up.find").unwrap().def;
        assert_eq!(def.input_examples, vec![json!({"q": "tea"})]);
        let rendered = with_examples_in_description(def);
        assert!(rendered.input_examples.is_empty());
        assert_eq!(
            rendered.description,
            "Looks things up.\n\nExamples of arguments:\n- {\"q\":\"tea\"}"
        );
    }

    #[test]
    fn a_listed_tool_reaches_models_without_its_flagged_sentences_and_values() {
        use crate::scan::Severity;
        let t = json!({
            "name": "find",
            "description": "Looks things up. Full docs at https://docs.elsewhere.example/find today. Fast.",
            "inputSchema": {"type": "object", "properties": {"q": {
                "type": "string",
                "enum": ["tea", "see https://collect.elsewhere.example/x"]
            }}}
        });
        let (c, _) = assemble(&[listing("up", vec![t.clone()], false)], None);
        let e = c.get("up.find").unwrap();
        // Low findings (unlisted URLs) flag the tool: it is listed ...
        assert_eq!(e.state, ToolState::Listed);
        assert!(
            e.findings.iter().all(|f| f.severity == Severity::Low),
            "{:?}",
            e.findings
        );
        assert_eq!(e.findings.len(), 2, "{:?}", e.findings);
        // ... without the sentence and the enum value they were found in.
        assert_eq!(e.def.description, "Looks things up. Fast.");
        assert_eq!(
            e.def.input_schema["properties"]["q"]["enum"],
            json!(["tea"])
        );
        // The hash is the server's own definition's, as the pin is.
        assert_eq!(e.hash, definition_hash(&t));
    }

    fn described(name: &str, description: &str) -> Value {
        json!({"name": name, "description": description, "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}})
    }

    #[test]
    fn a_copy_of_another_servers_tool_under_a_new_name_is_held_unless_allowed() {
        let search = "Search the web for pages matching a query and return their titles, links and snippets.";
        let copy = "Search the web for pages matching a query and return titles, links and short snippets.";
        let a = listing(
            "a",
            vec![
                described("web_search", search),
                described(
                    "weather",
                    "Current weather for a city, in metric units, with wind and rain.",
                ),
            ],
            false,
        );
        let b = listing("b", vec![described("search_pages", copy)], false);
        let state = |c: &Catalog, n: &str| c.get(n).unwrap().state.clone();
        let held = |c: &Catalog, n: &str| matches!(state(c, n), ToolState::Held { .. });
        // Both new to the catalog: both are held, each naming the other.
        let (c, _) = assemble(&[a.clone(), b.clone()], None);
        assert!(held(&c, "b.search_pages") && held(&c, "a.web_search"));
        let f = &c.get("b.search_pages").unwrap().findings;
        assert!(
            f.iter()
                .any(|f| f.rule == "function-overlap" && f.message.contains("a.web_search")),
            "{f:?}"
        );
        assert_eq!(state(&c, "a.weather"), ToolState::Listed);
        // The same name on two servers is not a copy.
        let same = listing("b", vec![described("web_search", copy)], false);
        let (c, _) = assemble(&[a.clone(), same], None);
        assert_eq!(state(&c, "b.web_search"), ToolState::Listed);
        // A server whose overlaps are intended.
        let mut allowed = b.clone();
        allowed.overlaps = Overlaps::Allow;
        let (c, _) = assemble(&[a.clone(), allowed], None);
        assert_eq!(state(&c, "b.search_pages"), ToolState::Listed);
        assert!(held(&c, "a.web_search"));
        // A pinned server is not held for a newcomer's copy of its tool.
        let (_, changes) = assemble(std::slice::from_ref(&a), Some(&[]));
        let pins: Vec<ToolPin> = changes
            .iter()
            .filter_map(|ch| match ch {
                PinChange::Pin {
                    tool,
                    server,
                    hash,
                    definition,
                    ..
                } => Some(ToolPin {
                    tool: tool.clone(),
                    server: server.clone(),
                    status: PinStatus::Active,
                    hash: Some(hash.clone()),
                    definition: Some(definition.clone()),
                    pending_hash: None,
                    pending_definition: None,
                    approval_id: None,
                    pinned_ms: 0,
                    approved_by: None,
                }),
                _ => None,
            })
            .collect();
        let (c, _) = assemble(&[a, b], Some(&pins));
        assert!(!held(&c, "a.web_search"), "{:?}", state(&c, "a.web_search"));
        assert!(held(&c, "b.search_pages"));
        // Descriptions that share a few words do not overlap.
        let other = listing(
            "c",
            vec![described(
                "find_news",
                "Search news articles by topic and date, newest first.",
            )],
            false,
        );
        let (c, _) = assemble(
            &[
                other,
                listing("d", vec![described("lookup", search)], false),
            ],
            None,
        );
        assert_eq!(state(&c, "c.find_news"), ToolState::Listed);
    }

    #[test]
    fn each_server_has_its_namespace_and_a_failed_listing_lists_nothing() {
        let mut down = listing("down", vec![tool("find")], false);
        down.error = Some("refused".into());
        let (c, _) = assemble(
            &[
                listing("a", vec![tool("find"), tool("find")], false),
                listing("b", vec![tool("find")], false),
                down,
            ],
            None,
        );
        let listed: Vec<&str> = c.listed().map(|e| e.name.as_str()).collect();
        assert_eq!(listed, ["a.find", "b.find"]);
        assert_eq!(c.refused.len(), 1, "a name listed twice by one server");
        assert_eq!(c.servers[2].error.as_deref(), Some("refused"));
    }

    #[test]
    fn without_a_store_nothing_is_pinned_and_with_one_first_sight_pins() {
        let l = [listing("up", vec![tool("find")], false)];
        assert!(assemble(&l, None).1.is_empty());
        let (_, changes) = assemble(&l, Some(&[]));
        assert!(matches!(&changes[..], [PinChange::Pin { by, .. }] if by == "first-sight"));
        // Built-ins are never pinned.
        assert!(
            assemble(
                &[listing("brightdata", vec![tool("find")], true)],
                Some(&[])
            )
            .1
            .is_empty()
        );
    }

    /// A tool of `schema`, registered alone: its entry, or why it was refused.
    fn registered(schema: Value) -> Result<Entry, String> {
        let raw = json!({"name": "t", "description": "A tool.", "inputSchema": schema});
        let (c, _) = assemble(&[listing("up", vec![raw], false)], None);
        match c.refused.first() {
            Some(r) => Err(r.error.clone()),
            None => Ok(c.get("up.t").unwrap().clone()),
        }
    }

    fn accepts(e: &Entry, args: Value) -> bool {
        e.validator.is_valid(&args)
    }

    /// `n` must be above 0, in the draft-04 way.
    fn draft4_n(schema: &mut Value) {
        schema["properties"]["n"] =
            json!({"type": "integer", "minimum": 0, "exclusiveMinimum": true});
    }

    #[test]
    fn a_declared_draft_04_schema_is_accepted_and_enforced_as_draft_04() {
        let mut schema = json!({
            "$schema": "http://json-schema.org/draft-04/schema#",
            "id": "urn:example:draft4",
            "type": "object",
            "properties": {"kind": {"$ref": "#/definitions/kind"}},
            "definitions": {"kind": {"enum": ["a", "b"]}},
            "required": ["n"]
        });
        draft4_n(&mut schema);
        let e = registered(schema.clone()).unwrap();
        assert!(!accepts(&e, json!({"n": 0})), "0 is not above 0");
        assert!(accepts(&e, json!({"n": 1})));
        assert!(accepts(&e, json!({"n": 1, "kind": "a"})));
        assert!(
            !accepts(&e, json!({"n": 1, "kind": "c"})),
            "the $ref is followed"
        );
        // What a model is shown is the schema as the server gave it.
        assert_eq!(e.def.input_schema, schema);
    }

    #[test]
    fn an_undeclared_schema_with_a_boolean_exclusive_minimum_is_draft_04() {
        let mut schema = json!({"type": "object", "properties": {}});
        draft4_n(&mut schema);
        let e = registered(schema.clone()).unwrap();
        assert!(!accepts(&e, json!({"n": 0})));
        assert!(accepts(&e, json!({"n": 1})));
        // exclusiveMaximum likewise, and the examples are checked the same way.
        let raw = json!({"name": "t", "description": "A tool.", "inputSchema": {
            "type": "object",
            "properties": {"p": {"type": "number", "maximum": 1, "exclusiveMaximum": true}}
        }, "input_examples": [{"p": 1}]});
        let (c, _) = assemble(&[listing("up", vec![raw], false)], None);
        assert!(
            c.refused[0].error.contains("input_examples[0]"),
            "{:?}",
            c.refused
        );
        // A $schema naming no draft trawl knows is not fetched: the schema's own
        // keywords decide, as when it declares none.
        schema["$schema"] = json!("https://example.com/dialects/ours");
        let e = registered(schema).unwrap();
        assert!(!accepts(&e, json!({"n": 0})));
        assert!(accepts(&e, json!({"n": 1})));
    }

    #[test]
    fn draft_07_dependencies_and_tuple_items_are_enforced_declared_or_not() {
        let schema = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": false},
                "card": {"type": "string"},
                "billing": {"$ref": "#/definitions/address"},
                "email": {"type": "string", "format": "email"},
                "note": {"$ref": "#/definitions/address", "maxLength": 5}
            },
            "definitions": {"address": {"type": "string", "minLength": 3}},
            "dependencies": {"card": ["billing"]}
        });
        for schema in [schema.clone(), {
            let mut s = schema;
            s.as_object_mut().unwrap().remove("$schema");
            s
        }] {
            let e = registered(schema.clone()).unwrap();
            assert!(accepts(&e, json!({"pair": ["a", 1]})), "{schema}");
            assert!(!accepts(&e, json!({"pair": [1, "a"]})), "{schema}");
            assert!(!accepts(&e, json!({"pair": ["a", 1, 2]})), "{schema}");
            assert!(!accepts(&e, json!({"card": "4111"})), "{schema}");
            assert!(accepts(&e, json!({"card": "4111", "billing": "Oslo"})));
            assert!(!accepts(&e, json!({"card": "4111", "billing": "O"})));
            // Draft-07, not 2020-12: formats are assertions, and keywords beside a
            // $ref are ignored.
            assert!(!accepts(&e, json!({"email": "nope"})), "{schema}");
            assert!(accepts(&e, json!({"email": "a@example.com"})));
            assert!(accepts(&e, json!({"note": "longer than five"})), "{schema}");
            assert!(!accepts(&e, json!({"note": "no"})));
        }
        // `dependencies` alone (no array items, no `definitions`) means draft-07 too.
        let e = registered(json!({"type": "object", "dependencies": {"a": ["b"]},
            "properties": {"email": {"type": "string", "format": "email"}}}))
        .unwrap();
        assert!(!accepts(&e, json!({"a": 1})));
        assert!(accepts(&e, json!({"a": 1, "b": 2})));
        assert!(!accepts(&e, json!({"email": "nope"})));
        // Without them, the same schema is 2020-12, where formats only annotate.
        let e = registered(json!({"type": "object",
            "properties": {"email": {"type": "string", "format": "email"}}}))
        .unwrap();
        assert!(accepts(&e, json!({"email": "nope"})));
    }

    #[test]
    fn a_2019_09_schema_with_recursive_refs_is_accepted_and_enforced() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2019-09/schema",
            "$recursiveAnchor": true,
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "email": {"type": "string"},
                "children": {"type": "array", "items": {"$recursiveRef": "#"}}
            },
            "dependentRequired": {"email": ["name"]},
            "unevaluatedProperties": false
        });
        for schema in [schema.clone(), {
            let mut s = schema;
            s.as_object_mut().unwrap().remove("$schema");
            s
        }] {
            let e = registered(schema.clone()).unwrap();
            assert!(accepts(
                &e,
                json!({"name": "a", "children": [{"name": "b", "children": []}]})
            ));
            assert!(
                !accepts(&e, json!({"name": "a", "children": [{"children": []}]})),
                "a child is checked against the whole schema: {schema}"
            );
            assert!(!accepts(&e, json!({"name": "a", "other": 1})), "{schema}");
        }
    }

    #[test]
    fn a_schema_no_draft_allows_is_refused_with_the_field_and_reason() {
        let e =
            registered(json!({"type": "object", "properties": {"a": {"type": 12}}})).unwrap_err();
        assert!(
            e.starts_with("invalid inputSchema: at /properties/a/type: "),
            "{e}"
        );
        assert!(e.contains("no JSON Schema draft allows it"), "{e}");
        let e = registered(json!({"type": "object", "properties": {"a": {"minimum": "zero"}}}))
            .unwrap_err();
        assert!(e.contains("at /properties/a/minimum: "), "{e}");
        assert!(e.contains("\"zero\""), "{e}");
        // A declared draft is held to: draft-07 has no boolean exclusiveMinimum.
        let mut schema = json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": {}});
        draft4_n(&mut schema);
        let e = registered(schema).unwrap_err();
        assert!(e.contains("at /properties/n/exclusiveMinimum: "), "{e}");
        assert!(
            e.contains("JSON Schema draft-07, as its $schema says"),
            "{e}"
        );
        // An output schema is held to the same rules.
        let raw = json!({"name": "t", "description": "A tool.",
            "inputSchema": {"type": "object"},
            "outputSchema": {"type": "object", "properties": {"r": {"type": "strin"}}}});
        let (c, _) = assemble(&[listing("up", vec![raw], false)], None);
        assert!(
            c.refused[0]
                .error
                .starts_with("invalid outputSchema: at /properties/r/type"),
            "{:?}",
            c.refused
        );
        let raw = json!({"name": "t", "description": "A tool.",
            "inputSchema": {"type": "object"},
            "outputSchema": {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
                "properties": {"r": {"type": "number", "minimum": 0, "exclusiveMinimum": true}}}});
        let (c, _) = assemble(&[listing("up", vec![raw], false)], None);
        assert!(c.refused.is_empty(), "{:?}", c.refused);
    }

    #[test]
    fn an_undeclared_schema_is_still_read_as_2020_12_when_it_can_be() {
        let schema = json!({
            "type": "object",
            "properties": {
                "t": {"type": "array", "prefixItems": [{"type": "string"}], "items": false},
                "m": {"type": "number", "exclusiveMinimum": 0},
                "ref": {"$ref": "#/$defs/short", "minLength": 2}
            },
            "$defs": {"short": {"type": "string", "maxLength": 3}}
        });
        let e = registered(schema.clone()).unwrap();
        assert!(accepts(&e, json!({"t": ["a"]})));
        assert!(
            !accepts(&e, json!({"t": ["a", 1]})),
            "items: false after prefixItems"
        );
        assert!(!accepts(&e, json!({"m": 0})));
        assert!(accepts(&e, json!({"m": 0.5})));
        // Beside a $ref, other keywords apply (they did not before 2019-09).
        assert!(!accepts(&e, json!({"ref": "a"})));
        assert!(accepts(&e, json!({"ref": "ab"})));
        assert!(!accepts(&e, json!({"ref": "abcd"})));
        assert_eq!(e.def.input_schema, schema);
        // Property names are not keywords: a property called `definitions` changes nothing.
        let e = registered(json!({"type": "object", "properties": {
            "definitions": {"type": "array", "prefixItems": [{"type": "string"}], "items": false}
        }}))
        .unwrap();
        assert!(!accepts(&e, json!({"definitions": ["a", 1]})));
    }
}
