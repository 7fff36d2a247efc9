#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

//! Recall of tool search on the development retrieval set (`tests/search/`):
//! BM25 alone, the dense half alone, and the two fused, as `tool_search` runs
//! them.
//!
//! The catalog is every benign listing of the guard corpus (real servers from
//! npm and PyPI, `tests/guard/collect`), assembled as the tool layer assembles
//! a catalog (registration, the scanner, no pins); a tool the rules keep out
//! is not searchable, as in production. Each task of `tests/search/tasks.jsonl`
//! is searched in that whole catalog; it counts as found at k when one of its
//! gold tools is among the first k.
//!
//! ```sh
//! tests/models/fetch && tests/guard/collect
//! cargo run --release -p trawl-tools --example search_eval -- --split dev
//! cargo run --release -p trawl-tools --example search_eval -- --split train --sweep
//! cargo run --release -p trawl-tools --example search_eval -- --split dev --misses
//! ```
//!
//! `--f32-queries` embeds the queries through the model's f32 path, as tools are
//! embedded, instead of the int8 path `tool_search` uses.
//!
//! `--sweep` also prints the recall of other fusion settings: for tuning, on
//! the train split only (see tests/search/README.md).

mod guard_corpus;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;
use trawl_tools::Catalog;
use trawl_tools::catalog::{Listing, assemble};
use trawl_tools::embed::Embeddings;
use trawl_tools::name::ServerName;
use trawl_tools::search::{Fusion, Method, Query};

#[derive(Debug, Deserialize)]
struct Task {
    id: String,
    query: String,
    gold: Vec<String>,
    split: String,
    kind: String,
}

fn listing(server: &str, tools: Vec<Value>) -> Listing {
    Listing::upstream(
        ServerName::parse(server).expect("a server name"),
        "file",
        tools,
    )
}

fn model_dir() -> PathBuf {
    std::env::var_os("TRAWL_EMBED_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| guard_corpus::root().join("../models/all-minilm-l6-v2"))
}

fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

const KS: [usize; 3] = [1, 5, 10];

/// Tasks found at 1, 5 and 10.
fn recall(
    catalog: &Catalog,
    tasks: &[(&Task, Query)],
    fusion: Fusion,
    lexical_only: bool,
) -> [usize; 3] {
    let mut found = [0; 3];
    for (task, q) in tasks {
        let words;
        let q = if lexical_only {
            words = Query::words(q.text.clone());
            &words
        } else {
            q
        };
        let hits = catalog.search_with(q, 10, fusion);
        let first = hits
            .iter()
            .position(|f| task.gold.iter().any(|g| g == f.entry.name.as_str()));
        for (i, k) in KS.iter().enumerate() {
            if first.is_some_and(|p| p < *k) {
                found[i] += 1;
            }
        }
    }
    found
}

fn row(name: &str, found: [usize; 3], n: usize) {
    let pct = |x: usize| 100.0 * x as f64 / n.max(1) as f64;
    println!(
        "{name:<34} {:>6.1} % {:>6.1} % {:>6.1} %",
        pct(found[0]),
        pct(found[1]),
        pct(found[2])
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let split = arg("--split").unwrap_or_else(|| "dev".into());
    let sweep = flag("--sweep");
    let misses = flag("--misses");
    let tasks_path = arg("--tasks")
        .map(PathBuf::from)
        .unwrap_or_else(|| guard_corpus::root().join("../search/tasks.jsonl"));
    let text = std::fs::read_to_string(&tasks_path)
        .unwrap_or_else(|e| panic!("{}: {e}", tasks_path.display()));
    let all: Vec<Task> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}:{}: {e}", tasks_path.display(), i + 1))
        })
        .collect();

    let corpus = guard_corpus::Corpus::load();
    let listings: Vec<Listing> = corpus
        .servers
        .iter()
        .map(|s| listing(&s.server, s.tools.clone()))
        .collect();
    let (mut catalog, _) = assemble(&listings, None);
    let listed = catalog.listed().count();

    // Every gold tool must name a tool of the corpus; one the rules keep out
    // is reported (it cannot be found, and counts as a miss).
    let mut unknown = Vec::new();
    let mut unlisted = 0;
    for t in &all {
        for g in &t.gold {
            match catalog.get(g) {
                None => unknown.push(format!("{}: {g}", t.id)),
                Some(e) if e.state != trawl_tools::ToolState::Listed => unlisted += 1,
                Some(_) => {}
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "gold tools not in the corpus: {unknown:#?}"
    );

    let embeddings = Embeddings::load(&model_dir(), None).await.unwrap();
    let started = std::time::Instant::now();
    let vectors = embeddings.vectors(&catalog.dense_texts()).await.unwrap();
    let embed_time = started.elapsed();
    assert!(catalog.set_vectors(&vectors));

    let tasks: Vec<&Task> = all
        .iter()
        .filter(|t| split == "all" || t.split == split)
        .collect();
    let mut queries = Vec::new();
    for t in &tasks {
        // The int8 query path, as tool_search embeds a query; `--f32-queries`
        // embeds queries as tools are embedded, to compare.
        let vector = if flag("--f32-queries") {
            embeddings
                .vectors(std::slice::from_ref(&t.query))
                .await
                .unwrap()
                .remove(0)
        } else {
            embeddings.query(&t.query).await.unwrap()
        };
        queries.push((
            *t,
            Query {
                text: t.query.clone(),
                vector: Some(vector),
            },
        ));
    }
    let n = queries.len();
    println!(
        "catalog: {} servers, {listed} listed tools (embedded in {:.1} s); split {split}: {n} tasks; {unlisted} gold tools not listed\n",
        listings.len(),
        embed_time.as_secs_f64()
    );
    println!("{:<34} {:>8} {:>8} {:>8}", "", "R@1", "R@5", "R@10");
    let lexical = recall(&catalog, &queries, Fusion::default(), true);
    let dense_only = Fusion {
        method: Method::Scores { alpha: 0.0 },
        ..Fusion::default()
    };
    let dense = recall(&catalog, &queries, dense_only, false);
    let fused = recall(&catalog, &queries, Fusion::default(), false);
    row("BM25 alone", lexical, n);
    row("dense alone", dense, n);
    row("fused (the default)", fused, n);
    println!(
        "\nfused R@5 / BM25 R@5: {:.2}",
        fused[1] as f64 / lexical[1].max(1) as f64
    );

    println!("\nR@5 by kind of task:");
    for kind in ["paraphrase", "plain", "name"] {
        let of_kind: Vec<(&Task, Query)> = queries
            .iter()
            .filter(|(t, _)| t.kind == kind)
            .map(|(t, q)| (*t, q.clone()))
            .collect();
        let m = of_kind.len();
        let pct = |x: [usize; 3]| 100.0 * x[1] as f64 / m.max(1) as f64;
        println!(
            "{kind:<11} {m:>4} tasks: BM25 {:>5.1} %  dense {:>5.1} %  fused {:>5.1} %",
            pct(recall(&catalog, &of_kind, Fusion::default(), true)),
            pct(recall(&catalog, &of_kind, dense_only, false)),
            pct(recall(&catalog, &of_kind, Fusion::default(), false)),
        );
    }

    if sweep {
        println!("\nfusion settings (tune on train only):");
        let mut results: BTreeMap<String, [usize; 3]> = BTreeMap::new();
        for k in [10.0, 30.0, 60.0] {
            for (wl, wd) in [(1.0, 1.0), (1.0, 1.5), (1.0, 2.0), (1.0, 3.0)] {
                let f = Fusion {
                    method: Method::Ranks {
                        k,
                        lexical: wl,
                        dense: wd,
                    },
                    ..Fusion::default()
                };
                results.insert(
                    format!("ranks k {k:>3} lexical {wl:.1} dense {wd:.1}"),
                    recall(&catalog, &queries, f, false),
                );
            }
        }
        for alpha in [0.1, 0.2, 0.3, 0.4, 0.5, 0.6] {
            let f = Fusion {
                method: Method::Scores { alpha },
                ..Fusion::default()
            };
            results.insert(
                format!("scores alpha {alpha:.1}"),
                recall(&catalog, &queries, f, false),
            );
        }
        for (name, found) in results {
            row(&name, found, n);
        }
    }

    if misses {
        println!("\nnot in the fused top 5:");
        for (task, q) in &queries {
            let hits = catalog.search(q, 5);
            if hits
                .iter()
                .any(|f| task.gold.iter().any(|g| g == f.entry.name.as_str()))
            {
                continue;
            }
            let got: Vec<&str> = hits.iter().map(|f| f.entry.name.as_str()).collect();
            println!(
                "{} {:?}\n    gold {:?}\n    got  {:?}",
                task.id, task.query, task.gold, got
            );
        }
    }
}
