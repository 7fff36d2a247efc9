//! Trains the semantic detector's head (`services/tools/src/guard_head.json`)
//! on the train split of the development corpus (`tests/guard/`).
//!
//! ```text
//! tests/models/fetch && tests/guard/collect
//! cargo run --release -p trawl-tools --example guard_train
//! ```
//!
//! Sentences are labelled from the corpus: a sentence of a poisoned definition
//! that overlaps its payload by half or more is of the payload's class; every
//! other sentence of a poisoned definition, every sentence of a benign server's
//! tool and of an `allow` look-alike is benign (`hold-ok` look-alikes are left
//! out: holding them is acceptable, so they teach nothing either way). Only the
//! sentences the detector reads are used ([`worth_scoring`]).
//!
//! Two parts are fitted, both with full-batch Adam and classes weighted to
//! balance:
//! - the score: a logistic regression over the sentence vector and its hashed
//!   character n-grams ([`ngrams`], 2^18 buckets), every attack class one label;
//! - the class names: a softmax regression over the vectors (the `encoded` class
//!   left out: its carriers are not language).
//!
//! Thresholds are calibrated out of fold: five folds by server or definition,
//! each scored by a regression trained on the other four; `hold_at` is the
//! lowest score that holds at most 0.5 % of the benign tools out of fold (and
//! at least 0.5), `doubt_at` the one that flags at most 3 %. Only the train
//! split is read. The model is multilingual-e5-small unless `TRAWL_EMBED_MODEL`
//! names another folder.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guard_corpus;

use std::collections::HashMap;
use std::path::PathBuf;

use guard_corpus::Corpus;
use trawl_tools::guard::{Binary, Head, chunks, ngrams, worth_scoring};

const CLASSES: [&str; 7] = [
    "benign",
    "act-outside",
    "change-arguments",
    "conceal",
    "override",
    "tool-choice",
    "context-request",
];

/// One labelled sentence: text, class, the group it belongs to (for folds) and
/// the tool it is part of (for tool-level calibration).
struct Sample {
    text: String,
    class: usize,
    group: String,
    tool: usize,
}

fn model_dir() -> PathBuf {
    std::env::var_os("TRAWL_EMBED_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| guard_corpus::root().join("../models/multilingual-e5-small"))
}

/// The n-gram buckets of the score: 2^18.
const BITS: u32 = 18;

/// A sample's label in the score: an attack of any class (`encoded` included).
fn attack(class: &str) -> bool {
    class != "benign"
}

fn main() {
    let corpus = Corpus::load();
    let mut samples: Vec<Sample> = Vec::new();
    // Per sample: whether it is an attack (the score's label).
    let mut positive: Vec<bool> = Vec::new();
    let mut tools = 0usize;
    // Whether each tool is benign (for calibration), by tool index.
    let mut tool_benign: Vec<bool> = Vec::new();
    let mut missing = 0;
    let mut push = |samples: &mut Vec<Sample>,
                    text: String,
                    class: usize,
                    attack: bool,
                    group: String,
                    tool: usize| {
        if worth_scoring(&text) {
            samples.push(Sample {
                text,
                class,
                group,
                tool,
            });
            positive.push(attack);
        }
    };
    for p in corpus.poisoned.iter().filter(|p| p.split == "train") {
        // `encoded` has no class of the softmax: its payload sentences are
        // attacks of the score and left out of the softmax (class usize::MAX).
        let class = CLASSES
            .iter()
            .position(|c| *c == p.class)
            .unwrap_or(usize::MAX);
        let Some((field, range)) = guard_corpus::payload_range(&p.tool, &p.payload) else {
            missing += 1;
            continue;
        };
        for c in chunks(&p.tool) {
            let len = c.span.len().max(1);
            let hit = c.field == field && guard_corpus::overlap(&c.span, &range) * 2 >= len;
            push(
                &mut samples,
                c.text,
                if hit { class } else { 0 },
                hit && attack(&p.class),
                format!("poisoned:{}", p.id),
                tools,
            );
        }
        tool_benign.push(false);
        tools += 1;
    }
    for l in corpus
        .lookalikes
        .iter()
        .filter(|l| l.split == "train" && l.expect == "allow")
    {
        for c in chunks(&l.tool) {
            push(
                &mut samples,
                c.text,
                0,
                false,
                format!("lookalike:{}", l.id),
                tools,
            );
        }
        tool_benign.push(true);
        tools += 1;
    }
    for s in corpus.servers.iter().filter(|s| s.split == "train") {
        for t in &s.tools {
            for c in chunks(t) {
                push(
                    &mut samples,
                    c.text,
                    0,
                    false,
                    format!("server:{}", s.server),
                    tools,
                );
            }
            tool_benign.push(true);
            tools += 1;
        }
    }
    let positives = positive.iter().filter(|p| **p).count();
    eprintln!(
        "{} sentences of {tools} tools, {positives} of them attacks; {missing} payloads not found in their tool",
        samples.len()
    );

    let embedder = trawl_embed::Embedder::load(&model_dir()).expect("the embedding model");
    let mut unique: Vec<&str> = samples.iter().map(|s| s.text.as_str()).collect();
    unique.sort_unstable();
    unique.dedup();
    let started = std::time::Instant::now();
    let vectors = embedder.embed(&unique).expect("embeddings");
    eprintln!(
        "embedded {} sentences in {:.1} s",
        unique.len(),
        started.elapsed().as_secs_f64()
    );
    let at: HashMap<&str, usize> = unique.iter().enumerate().map(|(i, t)| (*t, i)).collect();
    let x: Vec<&[f32]> = samples
        .iter()
        .map(|s| vectors[at[s.text.as_str()]].as_slice())
        .collect();
    let grams: Vec<Vec<(u32, f32)>> = samples.iter().map(|s| ngrams(&s.text, BITS)).collect();

    // Out-of-fold scores per tool, five folds by group.
    let fold_of = |g: &str| {
        let h = g.bytes().fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
        });
        (h % 5) as usize
    };
    let l2 = std::env::var("GUARD_L2")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1e-5f32);
    let mut oof = vec![0f32; tools];
    for fold in 0..5 {
        let train: Vec<usize> = (0..samples.len())
            .filter(|&i| fold_of(&samples[i].group) != fold)
            .collect();
        let binary = fit_binary(&x, &grams, &positive, &train, l2);
        for (i, s) in samples.iter().enumerate() {
            if fold_of(&s.group) == fold {
                let p = 1.0 / (1.0 + (-logit(&binary, x[i], &grams[i])).exp());
                oof[s.tool] = oof[s.tool].max(p);
            }
        }
    }
    let mut benign: Vec<f32> = (0..tools)
        .filter(|&t| tool_benign[t])
        .map(|t| oof[t])
        .collect();
    benign.sort_by(f32::total_cmp);
    let quantile =
        |q: f64| benign[((benign.len() as f64 * q).ceil() as usize).min(benign.len() - 1)];
    let hold_at = (quantile(0.995) + 1e-4).max(0.5);
    let doubt_at = (quantile(0.97) + 1e-4).min(hold_at - 0.05).max(0.2);
    let poisoned = tool_benign.iter().filter(|b| !**b).count();
    let held = |at: f32| {
        (0..tools)
            .filter(|&t| !tool_benign[t] && oof[t] >= at)
            .count()
    };
    eprintln!(
        "out of fold (l2 {l2}): hold_at {hold_at:.3}, doubt_at {doubt_at:.3}; poisoned tools held by the detector alone {}/{poisoned}, doubtful or held {}/{poisoned}; benign tools {}",
        held(hold_at),
        held(doubt_at),
        benign.len()
    );

    let all: Vec<usize> = (0..samples.len()).collect();
    let named: Vec<usize> = all
        .iter()
        .copied()
        .filter(|&i| samples[i].class != usize::MAX)
        .collect();
    let y: Vec<usize> = samples
        .iter()
        .map(|s| s.class.min(CLASSES.len() - 1))
        .collect();
    let mut head = fit(&x, &y, &named, embedder.model_id());
    head.hold_at = hold_at;
    head.doubt_at = doubt_at;
    head.binary = Some(fit_binary(&x, &grams, &positive, &all, l2));
    let mut head = round(head);
    // The most a vector adds to a logit, as the corpus shows it, with a tenth
    // of the range as margin: sentences whose characters cannot reach the
    // doubt band even with it are not embedded (`Head::score_bound`).
    if let Some(b) = &mut head.binary {
        let dense: Vec<f32> = x.iter().map(|v| b.dense(v)).collect();
        let hi = dense.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let lo = dense.iter().copied().fold(f32::INFINITY, f32::min);
        b.dense_max = Some(hi + 0.1 * (hi - lo));
        let doubt_logit = (head.doubt_at / (1.0 - head.doubt_at)).ln();
        let skipped = samples
            .iter()
            .filter(|s| b.sparse(&s.text) + hi + 0.1 * (hi - lo) < doubt_logit)
            .count();
        eprintln!(
            "vector part of the logit over {} sentences: {lo:.2} to {hi:.2}; dense_max {:.2}; {skipped} of the sentences need no vector",
            dense.len(),
            hi + 0.1 * (hi - lo)
        );
    }
    let mut text = serde_json::to_string(&head).expect("head as JSON");
    text.push('\n');
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/guard_head.json");
    std::fs::write(&out, text).expect("writing the head");
    eprintln!("wrote {}", out.display());
}

fn logit(b: &Binary, v: &[f32], grams: &[(u32, f32)]) -> f32 {
    // As `Binary::logit` computes it, from the n-grams already made.
    let dense: f32 = b.vector.iter().zip(v).map(|(a, x)| a * x).sum();
    let sparse: f32 = grams
        .iter()
        .map(|&(i, x)| {
            b.ngrams
                .binary_search_by_key(&i, |&(j, _)| j)
                .map_or(0.0, |k| b.ngrams[k].1 * x)
        })
        .sum();
    dense + sparse + b.bias
}

/// Logistic regression over the vector and the n-grams, attacks and benign
/// sentences weighted to balance, L2, full-batch Adam.
fn fit_binary(
    x: &[&[f32]],
    grams: &[Vec<(u32, f32)>],
    positive: &[bool],
    rows: &[usize],
    l2: f32,
) -> Binary {
    let d = x[0].len();
    let buckets = 1usize << BITS;
    let pos = rows.iter().filter(|&&i| positive[i]).count().max(1) as f32;
    let neg = (rows.len() as f32 - pos).max(1.0);
    let n = rows.len() as f32;
    let (wp, wn) = (0.5 * n / pos, 0.5 * n / neg);
    let mut w = vec![0f32; d + buckets];
    let mut b = 0f32;
    let (mut m, mut v) = (vec![0f32; d + buckets], vec![0f32; d + buckets]);
    let (mut mb, mut vb) = (0f32, 0f32);
    let (lr, b1, b2, eps) = (0.05f32, 0.9f32, 0.999f32, 1e-8f32);
    let mut g = vec![0f32; d + buckets];
    for step in 1..=300 {
        g.iter_mut().for_each(|x| *x = 0.0);
        let mut gb = 0f32;
        for &i in rows {
            let z: f32 = w[..d].iter().zip(x[i]).map(|(a, v)| a * v).sum::<f32>()
                + grams[i]
                    .iter()
                    .map(|&(j, v)| w[d + j as usize] * v)
                    .sum::<f32>()
                + b;
            let p = 1.0 / (1.0 + (-z).exp());
            let (target, weight) = if positive[i] { (1.0, wp) } else { (0.0, wn) };
            let e = (p - target) * weight / n;
            gb += e;
            for (gj, v) in g[..d].iter_mut().zip(x[i]) {
                *gj += e * v;
            }
            for &(j, v) in &grams[i] {
                g[d + j as usize] += e * v;
            }
        }
        let t = step;
        for j in 0..d + buckets {
            let gj = g[j] + l2 * w[j];
            if gj == 0.0 && m[j] == 0.0 {
                continue;
            }
            m[j] = b1 * m[j] + (1.0 - b1) * gj;
            v[j] = b2 * v[j] + (1.0 - b2) * gj * gj;
            let mh = m[j] / (1.0 - b1.powi(t));
            let vh = v[j] / (1.0 - b2.powi(t));
            w[j] -= lr * mh / (vh.sqrt() + eps);
        }
        mb = b1 * mb + (1.0 - b1) * gb;
        vb = b2 * vb + (1.0 - b2) * gb * gb;
        b -= lr * (mb / (1.0 - b1.powi(t))) / ((vb / (1.0 - b2.powi(t))).sqrt() + eps);
    }
    let r = |v: f32| (v * 1e5).round() / 1e5;
    let ngrams: Vec<(u32, f32)> = w[d..]
        .iter()
        .enumerate()
        .map(|(j, &x)| (j as u32, r(x)))
        .filter(|&(_, x)| x != 0.0)
        .collect();
    Binary::new(w[..d].iter().map(|&x| r(x)).collect(), BITS, ngrams, r(b))
}

/// Weights rounded to 6 decimals, so the file is small and stable.
fn round(mut head: Head) -> Head {
    let r = |v: f32| (v * 1e6).round() / 1e6;
    for row in &mut head.weights {
        for w in row.iter_mut() {
            *w = r(*w);
        }
    }
    for b in &mut head.bias {
        *b = r(*b);
    }
    head
}

/// Softmax regression with class weights and L2, full-batch Adam.
fn fit(x: &[&[f32]], y: &[usize], rows: &[usize], model_id: &str) -> Head {
    let k = CLASSES.len();
    let d = x[0].len();
    let mut count = vec![0f32; k];
    for &i in rows {
        count[y[i]] += 1.0;
    }
    let present = count.iter().filter(|c| **c > 0.0).count() as f32;
    let n = rows.len() as f32;
    // Benign weighs half, the attack classes share the other half.
    let weight: Vec<f32> = count
        .iter()
        .enumerate()
        .map(|(c, &m)| {
            if m == 0.0 {
                0.0
            } else if c == 0 {
                0.5 * n / m
            } else {
                0.5 * n / ((present - 1.0).max(1.0) * m)
            }
        })
        .collect();
    let mut w = vec![vec![0f32; d]; k];
    let mut b = vec![0f32; k];
    let (mut mw, mut vw) = (vec![vec![0f32; d]; k], vec![vec![0f32; d]; k]);
    let (mut mb, mut vb) = (vec![0f32; k], vec![0f32; k]);
    let (lr, b1, b2, eps, l2) = (0.05f32, 0.9f32, 0.999f32, 1e-8f32, 1e-4f32);
    for step in 1..=400 {
        let mut gw = vec![vec![0f32; d]; k];
        let mut gb = vec![0f32; k];
        for &i in rows {
            let xi = x[i];
            let logits: Vec<f32> = (0..k)
                .map(|c| w[c].iter().zip(xi).map(|(a, v)| a * v).sum::<f32>() + b[c])
                .collect();
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
            let s: f32 = e.iter().sum();
            let sw = weight[y[i]] / n;
            for c in 0..k {
                let g = (e[c] / s - if c == y[i] { 1.0 } else { 0.0 }) * sw;
                gb[c] += g;
                for (gj, v) in gw[c].iter_mut().zip(xi) {
                    *gj += g * v;
                }
            }
        }
        let t = step;
        for c in 0..k {
            for j in 0..d {
                let g = gw[c][j] + l2 * w[c][j];
                mw[c][j] = b1 * mw[c][j] + (1.0 - b1) * g;
                vw[c][j] = b2 * vw[c][j] + (1.0 - b2) * g * g;
                let mh = mw[c][j] / (1.0 - b1.powi(t));
                let vh = vw[c][j] / (1.0 - b2.powi(t));
                w[c][j] -= lr * mh / (vh.sqrt() + eps);
            }
            mb[c] = b1 * mb[c] + (1.0 - b1) * gb[c];
            vb[c] = b2 * vb[c] + (1.0 - b2) * gb[c] * gb[c];
            let mh = mb[c] / (1.0 - b1.powi(t));
            let vh = vb[c] / (1.0 - b2.powi(t));
            b[c] -= lr * mh / (vh.sqrt() + eps);
        }
    }
    Head {
        model_id: model_id.to_owned(),
        classes: CLASSES.iter().map(|c| (*c).to_owned()).collect(),
        weights: w,
        bias: b,
        hold_at: 0.5,
        doubt_at: 0.3,
        binary: None,
    }
}
