//! Writes every sentence the guard's detector would read of the development
//! corpus (`tests/guard/`, every split) with its label and its vector, for
//! choosing the detector outside the build (model, head, thresholds):
//!
//! ```text
//! tests/models/fetch && tests/guard/collect
//! TRAWL_EMBED_MODEL=tests/models/multilingual-e5-small \
//!   cargo run --release -p trawl-tools --example guard_vectors -- /tmp/e5
//! ```
//!
//! writes `/tmp/e5.f32` (the vectors, f32 little-endian, one row per sentence)
//! and `/tmp/e5.json` (per sentence: text, class, field, tool, group, split;
//! per tool: kind, id, split, class, expect). Labels as `guard_train` gives
//! them: a sentence of a poisoned definition overlapping its payload by half or
//! more is of the payload's class, every other sentence is benign.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guard_corpus;

use std::path::PathBuf;

use guard_corpus::Corpus;
use serde_json::{Value, json};
use trawl_tools::guard::{chunks, worth_scoring};

fn main() {
    let out = PathBuf::from(std::env::args().nth(1).expect("an output path"));
    let dir = std::env::var_os("TRAWL_EMBED_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| guard_corpus::root().join("../models/multilingual-e5-small"));
    let corpus = Corpus::load();
    let mut tools: Vec<Value> = Vec::new();
    let mut sentences: Vec<Value> = Vec::new();
    let mut add =
        |tool: Value, def: &Value, group: String, split: &str, payload: Option<(&str, &str)>| {
            let t = tools.len();
            tools.push(tool);
            let range = payload.and_then(|(p, _)| guard_corpus::payload_range(def, p));
            for c in chunks(def) {
                let len = c.span.len().max(1);
                let class = match (&range, payload) {
                    (Some((field, r)), Some((_, class)))
                        if c.field == *field && guard_corpus::overlap(&c.span, r) * 2 >= len =>
                    {
                        class
                    }
                    _ => "benign",
                };
                sentences.push(json!({"text": c.text, "class": class, "field": c.field,
                                  "tool": t, "group": group, "split": split,
                                  "worth": worth_scoring(&c.text)}));
            }
        };
    for p in &corpus.poisoned {
        add(
            json!({"kind": "poisoned", "id": p.id, "split": p.split, "class": p.class, "place": p.place}),
            &p.tool,
            format!("poisoned:{}", p.id),
            &p.split,
            Some((&p.payload, &p.class)),
        );
    }
    for l in &corpus.lookalikes {
        add(
            json!({"kind": "lookalike", "id": l.id, "split": l.split, "expect": l.expect}),
            &l.tool,
            format!("lookalike:{}", l.id),
            &l.split,
            None,
        );
    }
    for s in &corpus.servers {
        for t in &s.tools {
            add(
                json!({"kind": "server", "id": format!("{}/{}", s.server, t["name"].as_str().unwrap_or("")),
                       "split": s.split}),
                t,
                format!("server:{}", s.server),
                &s.split,
                None,
            );
        }
    }
    let embedder = trawl_embed::Embedder::load(&dir).expect("the embedding model");
    let texts: Vec<&str> = sentences
        .iter()
        .map(|s| s["text"].as_str().unwrap())
        .collect();
    let mut unique: Vec<&str> = texts.clone();
    unique.sort_unstable();
    unique.dedup();
    let started = std::time::Instant::now();
    let vectors = embedder.embed(&unique).expect("embeddings");
    eprintln!(
        "{}: {} sentences ({} distinct) of {} tools embedded in {:.1} s",
        embedder.model_id(),
        texts.len(),
        unique.len(),
        tools.len(),
        started.elapsed().as_secs_f64()
    );
    let at: std::collections::HashMap<&str, usize> =
        unique.iter().enumerate().map(|(i, t)| (*t, i)).collect();
    let mut bytes = Vec::with_capacity(texts.len() * embedder.dims() * 4);
    for t in &texts {
        for f in &vectors[at[t]] {
            bytes.extend_from_slice(&f.to_le_bytes());
        }
    }
    std::fs::write(out.with_extension("f32"), bytes).unwrap();
    std::fs::write(
        out.with_extension("json"),
        json!({"model_id": embedder.model_id(), "dims": embedder.dims(),
               "sentences": sentences, "tools": tools})
        .to_string(),
    )
    .unwrap();
}
