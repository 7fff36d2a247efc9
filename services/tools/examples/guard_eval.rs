//! Measures the poisoning defense on the dev split of the development corpus
//! (`tests/guard/`), which neither the rules nor the detector were tuned on:
//! detection (blocked or held) per intent class, false positives (blocked or
//! held) on the benign real servers' tools and on the benign look-alikes, side
//! by side for the rules alone, the rules with catalog context, and the full
//! pipeline (rules, catalog context, semantic detector); and what a scan costs.
//!
//! ```text
//! tests/models/fetch && tests/guard/collect
//! cargo run --release -p trawl-tools --example guard_eval [-- --split train]
//! cargo run --release -p trawl-tools --example guard_eval -- --cost   # the cost alone
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guard_corpus;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use guard_corpus::{Corpus, Poisoned};
use serde_json::{Value, json};
use trawl_tools::catalog::{Assessment, Listing, assemble_with};
use trawl_tools::config::RESULT_MAX_BYTES;
use trawl_tools::embed::Embeddings;
use trawl_tools::guard::{Detector, Guard, Head};
use trawl_tools::guard::{chunks, worth_scoring};
use trawl_tools::name::ServerName;
use trawl_tools::scan::Severity;
use trawl_tools::{ToolState, scan};

/// What a scan of the whole catalog costs: the rules alone, the full pipeline
/// cold (nothing embedded) and warm.
async fn cost(all: &[Listing], embedder: &Arc<trawl_embed::Embedder>) {
    let tools: usize = all.iter().map(|l| l.tools.len()).sum();
    let head = Head::builtin().expect("the guard head");
    let cold_guard = Guard::rules_only().with_detector(
        Detector::new(Arc::new(Embeddings::new(embedder.clone(), None)), head)
            .expect("head and model agree"),
    );
    let t = Instant::now();
    let a = cold_guard.assess(all).await;
    let _ = assemble_with(all, None, &a);
    let cold = t.elapsed();
    let t = Instant::now();
    let a = cold_guard.assess(all).await;
    let _ = assemble_with(all, None, &a);
    let warm = t.elapsed();
    let t = Instant::now();
    let _ = assemble_with(all, None, &Assessment::default());
    let rules = t.elapsed();
    println!(
        "Catalog of {tools} tools from {} servers: rules {:.0} ms; full pipeline cold {:.2} s, warm {:.0} ms\n",
        all.len(),
        rules.as_secs_f64() * 1e3,
        cold.as_secs_f64(),
        warm.as_secs_f64() * 1e3
    );
}

fn listing(server: &str, tools: Vec<Value>) -> Listing {
    Listing::upstream(
        ServerName::parse(server).expect("a server name"),
        "file",
        tools,
    )
}

fn server_name(s: &str) -> String {
    let cleaned: String = s
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if cleaned.is_empty() {
        "srv".into()
    } else {
        cleaned
    }
}

/// The listings a poisoned record is judged in: its own server, with the other
/// servers of its context when `catalog` is on.
fn poisoned_listings(p: &Poisoned, catalog: bool) -> (Vec<Listing>, String) {
    let server = server_name(p.context.as_ref().map_or("srv", |c| c.server.as_str()));
    let mut out = vec![listing(&server, vec![p.tool.clone()])];
    if catalog && let Some(c) = &p.context {
        for (other, names) in &c.others {
            let tools = names
                .iter()
                .map(|n| json!({"name": n, "description": format!("The {n} tool."), "inputSchema": {"type": "object"}}))
                .collect();
            out.push(listing(&server_name(other), tools));
        }
    }
    let name = p.tool["name"].as_str().unwrap_or_default();
    (out, format!("{server}.{name}"))
}

fn caught(state: &ToolState) -> bool {
    matches!(state, ToolState::Blocked { .. } | ToolState::Held { .. })
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stage {
    Rules,
    Catalog,
    /// The detector's findings alone (held at `hold_at`), in catalog context.
    Detector,
    Full,
}

const STAGES: [Stage; 4] = [Stage::Rules, Stage::Catalog, Stage::Detector, Stage::Full];

struct Eval {
    guard: Guard,
}

/// A catalog as a stage judged it: whether each tool is kept from callers.
struct Judged {
    catalog: trawl_tools::Catalog,
    assessment: Assessment,
    stage: Stage,
}

impl Judged {
    /// Whether the tool is blocked or held by this stage; `None` when it did
    /// not register (refused: kept from callers by every stage but the
    /// detector alone).
    fn caught(&self, name: &str) -> Option<bool> {
        let e = self.catalog.get(name)?;
        Some(match self.stage {
            Stage::Detector => self
                .assessment
                .findings
                .get(&e.hash)
                .is_some_and(|f| f.iter().any(|f| f.severity >= Severity::Medium)),
            _ => caught(&e.state),
        })
    }

    fn kept(&self, name: &str) -> bool {
        self.caught(name).unwrap_or(self.stage != Stage::Detector)
    }
}

impl Eval {
    async fn judge(&self, listings: &[Listing], stage: Stage) -> Judged {
        let assessment = if matches!(stage, Stage::Full | Stage::Detector) {
            self.guard.assess(listings).await
        } else {
            Assessment::default()
        };
        let none = Assessment::default();
        let with = if stage == Stage::Full {
            &assessment
        } else {
            &none
        };
        let catalog = assemble_with(listings, None, with).0;
        Judged {
            catalog,
            assessment,
            stage,
        }
    }
}

fn model_dir() -> PathBuf {
    std::env::var_os("TRAWL_EMBED_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| guard_corpus::root().join("../models/multilingual-e5-small"))
}

/// The language of a payload, by its script: Japanese (kana), Korean
/// (Hangul), Chinese (Han without kana), Cyrillic, Arabic, Devanagari, another
/// language in Latin letters (letters outside ASCII), else English. Look-alike
/// letters inside English words count as English (they are an encoding).
fn language(payload: &str) -> &'static str {
    let has = |f: fn(char) -> bool| payload.chars().any(f);
    if has(|c| matches!(c, '\u{3040}'..='\u{30ff}')) {
        "Japanese"
    } else if has(|c| matches!(c, '\u{ac00}'..='\u{d7af}' | '\u{1100}'..='\u{11ff}')) {
        "Korean"
    } else if has(|c| matches!(c, '\u{4e00}'..='\u{9fff}')) {
        "Chinese"
    } else if has(|c| matches!(c, '\u{0600}'..='\u{06ff}')) {
        "Arabic"
    } else if has(|c| matches!(c, '\u{0900}'..='\u{097f}')) {
        "Hindi"
    } else if payload
        .split_whitespace()
        .filter(|w| w.chars().any(|c| matches!(c, '\u{0400}'..='\u{04ff}')))
        .any(|w| w.chars().all(|c| !c.is_ascii_alphabetic()))
    {
        "Russian"
    } else if payload
        .split_whitespace()
        .any(|w| w.chars().any(|c| c.is_alphabetic() && !c.is_ascii()) && w.chars().all(|c| !matches!(c, '\u{0400}'..='\u{04ff}' | '\u{0370}'..='\u{03ff}' | '\u{ff00}'..='\u{ffef}')))
    {
        "other Latin-script"
    } else {
        "English"
    }
}

fn pct(a: usize, b: usize) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{:.1} % ({a}/{b})", 100.0 * a as f64 / b as f64)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let split = std::env::args()
        .skip_while(|a| a != "--split")
        .nth(1)
        .unwrap_or_else(|| "dev".into());
    let corpus = Corpus::load();
    let embedder =
        Arc::new(trawl_embed::Embedder::load(&model_dir()).expect("the embedding model"));
    if std::env::args().any(|a| a == "--cost") {
        let all: Vec<Listing> = corpus
            .servers
            .iter()
            .map(|s| listing(&server_name(&s.server), s.tools.clone()))
            .collect();
        cost(&all, &embedder).await;
        return;
    }
    let head = Head::builtin().expect("the guard head");
    let detector = Detector::new(Arc::new(Embeddings::new(embedder.clone(), None)), head)
        .expect("head and model agree");
    let eval = Eval {
        guard: Guard::rules_only().with_detector(detector),
    };

    println!("## Split `{split}`\n");
    // Detection per class.
    let poisoned: Vec<&Poisoned> = corpus
        .poisoned
        .iter()
        .filter(|p| p.split == split)
        .collect();
    let mut table: BTreeMap<String, [usize; 5]> = BTreeMap::new();
    let mut by_language: BTreeMap<&str, [usize; 5]> = BTreeMap::new();
    let mut missed: Vec<String> = Vec::new();
    for p in &poisoned {
        let row = table.entry(p.class.clone()).or_default();
        row[4] += 1;
        by_language.entry(language(&p.payload)).or_default()[4] += 1;
        for (i, stage) in STAGES.into_iter().enumerate() {
            let (listings, name) = poisoned_listings(p, stage != Stage::Rules);
            let hit = eval.judge(&listings, stage).await.kept(&name);
            if hit {
                row[i] += 1;
                by_language.entry(language(&p.payload)).or_default()[i] += 1;
            } else if stage == Stage::Full {
                missed.push(format!(
                    "{} ({}, {}): {}",
                    p.id, p.class, p.place, p.payload
                ));
            }
        }
    }
    let cells = |row: &[usize; 5]| -> String {
        (0..4)
            .map(|i| pct(row[i], row[4]))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    println!(
        "| class | rules | rules + catalog | detector only | full pipeline |\n|---|---|---|---|---|"
    );
    let mut total = [0usize; 5];
    for (class, row) in &table {
        println!("| {class} | {} |", cells(row));
        for i in 0..5 {
            total[i] += row[i];
        }
    }
    println!("| **all** | {} |\n", cells(&total));
    println!(
        "| language of the payload | rules | rules + catalog | detector only | full pipeline |\n|---|---|---|---|---|"
    );
    for (language, row) in &by_language {
        println!("| {language} | {} |", cells(row));
    }
    println!();

    // False positives on the benign servers of the split, judged in the whole
    // catalog of every collected server (as a deployment would see them).
    let all: Vec<Listing> = corpus
        .servers
        .iter()
        .map(|s| listing(&server_name(&s.server), s.tools.clone()))
        .collect();
    let in_split: HashSet<String> = corpus
        .servers
        .iter()
        .filter(|s| s.split == split)
        .map(|s| server_name(&s.server))
        .collect();
    let mut fp_rows = Vec::new();
    let mut flagged: Vec<String> = Vec::new();
    for stage in STAGES {
        let judged: Vec<Judged> = if stage == Stage::Rules {
            let mut v = Vec::new();
            for l in all.iter().filter(|l| in_split.contains(l.server.as_str())) {
                v.push(eval.judge(std::slice::from_ref(l), stage).await);
            }
            v
        } else {
            vec![eval.judge(&all, stage).await]
        };
        let (mut n, mut fp) = (0, 0);
        for j in &judged {
            for e in j.catalog.entries() {
                if !in_split.contains(e.name.server()) {
                    continue;
                }
                n += 1;
                if j.caught(e.name.as_str()) == Some(true) {
                    fp += 1;
                    if stage == Stage::Full {
                        flagged.push(format!("{} {:?}", e.name, e.state));
                    }
                }
            }
        }
        fp_rows.push(pct(fp, n));
    }
    let servers = in_split.len();
    println!(
        "| | rules | rules + catalog | detector only | full pipeline |\n|---|---|---|---|---|"
    );
    println!(
        "| benign tools of {servers} real servers, blocked or held | {} |",
        fp_rows.join(" | ")
    );
    // Look-alikes.
    let mut la = [[0usize; 2]; 4];
    for l in corpus.lookalikes.iter().filter(|l| l.split == split) {
        for (i, stage) in STAGES.into_iter().enumerate() {
            let name = format!("srv.{}", l.tool["name"].as_str().unwrap_or_default());
            let judged = eval
                .judge(&[listing("srv", vec![l.tool.clone()])], stage)
                .await;
            let state = judged.catalog.get(&name).map(|e| e.state.clone());
            let wrong = match (l.expect.as_str(), &state) {
                (_, None) => false,
                // The detector alone holds, never blocks.
                ("hold-ok", Some(s)) => {
                    stage != Stage::Detector && matches!(s, ToolState::Blocked { .. })
                }
                (_, Some(_)) => judged.caught(&name) == Some(true),
            };
            la[i][1] += 1;
            if wrong {
                la[i][0] += 1;
                if stage == Stage::Full {
                    flagged.push(format!("look-alike {} {:?}", l.id, state));
                }
            }
        }
    }
    println!(
        "| benign look-alikes wrongly held or blocked | {} |\n",
        la.iter()
            .map(|r| pct(r[0], r[1]))
            .collect::<Vec<_>>()
            .join(" | ")
    );

    cost(&all, &embedder).await;
    // The cascade: sentences whose characters keep them below the doubt band
    // whatever their vector are not embedded. Checked here by embedding them
    // anyway: how many would have reached the band with their vector.
    let head = Head::builtin().expect("the guard head");
    let mut seen = HashSet::new();
    let (mut bounded, mut embedded) = (Vec::new(), 0usize);
    for l in &all {
        for o in &l.tools {
            for c in chunks(&o.raw) {
                if !worth_scoring(&c.text) || !seen.insert(c.text.clone()) {
                    continue;
                }
                match head.score_bound(&c.text) {
                    Some(_) => bounded.push(c.text),
                    None => embedded += 1,
                }
            }
        }
    }
    let texts: Vec<&str> = bounded.iter().map(String::as_str).collect();
    let vectors = embedder.embed(&texts).expect("embeddings");
    let reached = texts
        .iter()
        .zip(&vectors)
        .filter(|(t, v)| head.score(v, t).0 >= head.doubt_at)
        .count();
    println!(
        "Sentences of that catalog worth scoring: {}; embedded {embedded}, judged by their characters alone {} ({:.1} %); of these, {reached} would have reached the doubt band ({:.3}) with their vector\n",
        embedded + bounded.len(),
        bounded.len(),
        100.0 * bounded.len() as f64 / (embedded + bounded.len()).max(1) as f64,
        head.doubt_at
    );
    // The per-call result sanitizer on a 20 KB body.
    let body: String = "Prices for today: widget 12.50 EUR, gadget 7.25 EUR. "
        .repeat(20_000 / 52)
        .chars()
        .take(20_000)
        .collect();
    let mut times: Vec<f64> = (0..2_000)
        .map(|_| {
            let t = Instant::now();
            let s = scan::sanitize_result(&body, RESULT_MAX_BYTES);
            std::hint::black_box(s);
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    println!(
        "sanitize_result, 20 KB body: p50 {:.1} µs, p99 {:.1} µs\n",
        times[times.len() / 2],
        times[times.len() * 99 / 100]
    );
    if std::env::args().any(|a| a == "--verbose") {
        println!("### Missed ({})\n", missed.len());
        for m in &missed {
            println!("- {m}");
        }
        println!("\n### Benign held or blocked ({})\n", flagged.len());
        for f in &flagged {
            println!("- {f}");
        }
    }
}
