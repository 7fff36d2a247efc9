//! Sentences per second of the embedder on this machine, cold (nothing cached):
//!
//! ```text
//! tests/models/fetch
//! cargo run --release -p trawl-embed --example bench [-- MODEL_DIR]
//! ```
//!
//! Three sets of made-up but varied English texts: short (10–20 tokens), tool
//! descriptions (60–120 tokens), and a catalog of 500 tools as the guard would
//! see it (2,000 sentences, about 25 tokens on average). `RAYON_NUM_THREADS`
//! sets the threads of the matrix kernels (default: one per core). Last, 300
//! short queries one at a time, as a search embeds its query, through the f32
//! path and the int8 one ([`Embedder::embed_quick`]). The resident memory is
//! printed after the load.

use std::path::PathBuf;
use std::time::Instant;

use trawl_embed::Embedder;

const WORDS: &[&str] = &[
    "returns",
    "the",
    "list",
    "of",
    "files",
    "in",
    "a",
    "folder",
    "search",
    "web",
    "page",
    "for",
    "query",
    "results",
    "with",
    "title",
    "and",
    "url",
    "sends",
    "message",
    "to",
    "channel",
    "user",
    "reads",
    "issue",
    "repository",
    "creates",
    "pull",
    "request",
    "branch",
    "weather",
    "city",
    "forecast",
    "temperature",
    "price",
    "product",
    "order",
    "status",
    "calendar",
    "event",
    "meeting",
    "invite",
    "document",
    "text",
    "summary",
    "language",
    "translate",
    "image",
    "caption",
    "database",
    "table",
    "rows",
    "column",
    "filter",
    "sort",
    "limit",
    "page",
    "token",
    "account",
    "balance",
    "payment",
    "invoice",
    "customer",
    "email",
];

/// Deterministic texts of `min..=max` words.
fn texts(n: usize, min: usize, max: usize, seed: u64) -> Vec<String> {
    let mut state = seed;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as usize
    };
    (0..n)
        .map(|_| {
            let len = min + next() % (max - min + 1);
            let mut words: Vec<&str> = (0..len).map(|_| WORDS[next() % WORDS.len()]).collect();
            words.push(".");
            words.join(" ")
        })
        .collect()
}

/// This process's resident memory in MiB (`VmRSS` of `/proc/self/status` on
/// Linux); `None` elsewhere.
fn rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// CPU seconds this process has used (user and system, all threads), from
/// `/proc/self/stat` on Linux; `None` elsewhere.
fn cpu_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // USER_HZ is 100 on Linux.
    Some(ticks / 100.0)
}

fn run(model: &Embedder, name: &str, texts: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (started, cpu) = (Instant::now(), cpu_secs());
    let v = model.embed(&refs)?;
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(v.len(), texts.len());
    let cpu = cpu.zip(cpu_secs()).map(|(a, b)| b - a).unwrap_or(f64::NAN);
    println!(
        "{name}: {} texts in {secs:.2} s ({:.0} texts/s), {cpu:.2} CPU s ({:.0} texts per CPU s)",
        texts.len(),
        texts.len() as f64 / secs,
        texts.len() as f64 / cpu
    );
    Ok(())
}

/// One text at a time, as a search embeds its query: the f32 path against the
/// int8 one, p50 and p90 of each, and the lowest cosine between their vectors.
fn queries(model: &Embedder, texts: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let mut full = Vec::new();
    let mut quick = Vec::new();
    let mut lowest = f32::MAX;
    for t in texts {
        let started = Instant::now();
        let a = model.embed(&[t])?.remove(0);
        full.push(started.elapsed().as_secs_f64() * 1e3);
        let started = Instant::now();
        let b = model.embed_quick(t)?;
        quick.push(started.elapsed().as_secs_f64() * 1e3);
        lowest = lowest.min(trawl_embed::cosine(&a, &b));
    }
    for (name, ms) in [("f32", &mut full), ("int8", &mut quick)] {
        ms.sort_by(f64::total_cmp);
        println!(
            "one query of 4-11 tokens, {name}: p50 {:.2} ms, p90 {:.2} ms ({} queries)",
            ms[ms.len() / 2],
            ms[ms.len() * 9 / 10],
            ms.len()
        );
    }
    println!("lowest cosine between a query's f32 and int8 vectors: {lowest:.4}");
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/models/all-minilm-l6-v2"),
        PathBuf::from,
    );
    let started = Instant::now();
    let model = Embedder::load(&dir)?;
    println!(
        "load: {:.2} s (model {}), resident {:.0} MiB",
        started.elapsed().as_secs_f64(),
        model.model_id(),
        rss_mib().unwrap_or(f64::NAN)
    );
    // Warm the allocator and the kernels' dispatch once.
    model.embed(&["warm up"])?;
    // A word of these lists is one token; [CLS], [SEP] and the full stop add three.
    run(&model, "short, 10-20 tokens", &texts(500, 7, 17, 1))?;
    run(
        &model,
        "tool descriptions, 60-120 tokens",
        &texts(300, 57, 117, 2),
    )?;
    run(
        &model,
        "catalog of 500 tools, 2,000 sentences of 10-40 tokens",
        &texts(2_000, 7, 37, 3),
    )?;
    queries(&model, &texts(300, 2, 9, 4))?;
    Ok(())
}
