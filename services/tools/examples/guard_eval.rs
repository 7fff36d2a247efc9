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
use trawl_tools::name::ServerName;
use trawl_tools::{ToolState, scan};

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
    Full,
}

struct Eval {
    guard: Guard,
}

impl Eval {
    async fn assemble(&self, listings: &[Listing], stage: Stage) -> trawl_tools::Catalog {
        let assessment = if stage == Stage::Full {
            self.guard.assess(listings).await
        } else {
            Assessment::default()
        };
        assemble_with(listings, None, &assessment).0
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
    let mut table: BTreeMap<String, [usize; 4]> = BTreeMap::new();
    let mut by_language: BTreeMap<&str, [usize; 4]> = BTreeMap::new();
    let mut missed: Vec<String> = Vec::new();
    for p in &poisoned {
        let row = table.entry(p.class.clone()).or_default();
        row[3] += 1;
        by_language.entry(language(&p.payload)).or_default()[3] += 1;
        for (i, stage) in [Stage::Rules, Stage::Catalog, Stage::Full]
            .into_iter()
            .enumerate()
        {
            let (listings, name) = poisoned_listings(p, stage != Stage::Rules);
            let catalog = eval.assemble(&listings, stage).await;
            let hit = catalog.get(&name).is_none_or(|e| caught(&e.state));
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
    println!("| class | rules | rules + catalog | full pipeline |\n|---|---|---|---|");
    let mut total = [0usize; 4];
    for (class, row) in &table {
        println!(
            "| {class} | {} | {} | {} |",
            pct(row[0], row[3]),
            pct(row[1], row[3]),
            pct(row[2], row[3])
        );
        for i in 0..4 {
            total[i] += row[i];
        }
    }
    println!(
        "| **all** | {} | {} | {} |\n",
        pct(total[0], total[3]),
        pct(total[1], total[3]),
        pct(total[2], total[3])
    );
    println!(
        "| language of the payload | rules | rules + catalog | full pipeline |\n|---|---|---|---|"
    );
    for (language, row) in &by_language {
        println!(
            "| {language} | {} | {} | {} |",
            pct(row[0], row[3]),
            pct(row[1], row[3]),
            pct(row[2], row[3])
        );
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
    for stage in [Stage::Rules, Stage::Catalog, Stage::Full] {
        let catalogs: Vec<trawl_tools::Catalog> = if stage == Stage::Rules {
            let mut v = Vec::new();
            for l in all.iter().filter(|l| in_split.contains(l.server.as_str())) {
                v.push(eval.assemble(std::slice::from_ref(l), stage).await);
            }
            v
        } else {
            vec![eval.assemble(&all, stage).await]
        };
        let (mut n, mut fp) = (0, 0);
        for c in &catalogs {
            for e in c.entries() {
                if !in_split.contains(e.name.server()) {
                    continue;
                }
                n += 1;
                if caught(&e.state) {
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
        "| benign tools of {servers} real servers, blocked or held | {} | {} | {} |",
        fp_rows[0], fp_rows[1], fp_rows[2]
    );
    // Look-alikes.
    let mut la = [[0usize; 2]; 3];
    for l in corpus.lookalikes.iter().filter(|l| l.split == split) {
        for (i, stage) in [Stage::Rules, Stage::Catalog, Stage::Full]
            .into_iter()
            .enumerate()
        {
            let name = format!("srv.{}", l.tool["name"].as_str().unwrap_or_default());
            let catalog = eval
                .assemble(&[listing("srv", vec![l.tool.clone()])], stage)
                .await;
            let state = catalog.get(&name).map(|e| e.state.clone());
            let wrong = match (l.expect.as_str(), &state) {
                (_, None) => false,
                ("hold-ok", Some(s)) => matches!(s, ToolState::Blocked { .. }),
                (_, Some(s)) => caught(s),
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
        "| benign look-alikes wrongly held or blocked | {} | {} | {} |\n",
        pct(la[0][0], la[0][1]),
        pct(la[1][0], la[1][1]),
        pct(la[2][0], la[2][1])
    );

    // Cost: the whole catalog, cold (nothing embedded) and warm.
    let tools: usize = all.iter().map(|l| l.tools.len()).sum();
    let head = Head::builtin().expect("the guard head");
    let cold_guard = Guard::rules_only().with_detector(
        Detector::new(Arc::new(Embeddings::new(embedder.clone(), None)), head)
            .expect("head and model agree"),
    );
    let t = Instant::now();
    let a = cold_guard.assess(&all).await;
    let _ = assemble_with(&all, None, &a);
    let cold = t.elapsed();
    let t = Instant::now();
    let a = cold_guard.assess(&all).await;
    let _ = assemble_with(&all, None, &a);
    let warm = t.elapsed();
    let t = Instant::now();
    let _ = assemble_with(&all, None, &Assessment::default());
    let rules = t.elapsed();
    println!(
        "Catalog of {tools} tools from {} servers: rules {:.0} ms; full pipeline cold {:.2} s, warm {:.0} ms\n",
        all.len(),
        rules.as_secs_f64() * 1e3,
        cold.as_secs_f64(),
        warm.as_secs_f64() * 1e3
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
