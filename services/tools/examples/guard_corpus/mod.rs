#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

//! The development corpus of the poisoning defense (`tests/guard/`), as the
//! guard's examples read it: poisoned and look-alike definitions written for
//! the project, and benign listings of real servers (`tests/guard/collect`).

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;
use trawl_tools::scan::definition_texts;

/// Where a poisoned definition's payload stands: its field and byte range.
pub fn payload_range(def: &Value, payload: &str) -> Option<(String, Range<usize>)> {
    definition_texts(def)
        .into_iter()
        .find_map(|(field, text)| text.find(payload).map(|at| (field, at..at + payload.len())))
}

/// How many bytes two ranges share.
pub fn overlap(a: &Range<usize>, b: &Range<usize>) -> usize {
    a.end.min(b.end).saturating_sub(a.start.max(b.start))
}

#[derive(Clone, Debug, Deserialize)]
pub struct Poisoned {
    pub id: String,
    pub class: String,
    pub place: String,
    pub split: String,
    pub tool: Value,
    pub payload: String,
    #[serde(default)]
    pub context: Option<Context>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Context {
    pub server: String,
    #[serde(default)]
    pub others: std::collections::BTreeMap<String, Vec<String>>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Lookalike {
    pub id: String,
    pub split: String,
    pub tool: Value,
    pub expect: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Server {
    pub server: String,
    pub split: String,
    pub tools: Vec<Value>,
}

pub struct Corpus {
    pub poisoned: Vec<Poisoned>,
    pub lookalikes: Vec<Lookalike>,
    pub servers: Vec<Server>,
}

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/guard")
}

fn jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> Vec<T> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), i + 1))
        })
        .collect()
}

impl Corpus {
    pub fn load() -> Corpus {
        let root = root();
        let benign = root.join("benign");
        let mut servers: Vec<Server> = std::fs::read_dir(&benign)
            .unwrap_or_else(|e| panic!("{}: {e}; run tests/guard/collect first", benign.display()))
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .map(|e| {
                let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                serde_json::from_str(&text)
                    .unwrap_or_else(|err| panic!("{}: {err}", e.path().display()))
            })
            .collect();
        servers.sort_by(|a, b| a.server.cmp(&b.server));
        Corpus {
            poisoned: jsonl(&root.join("poisoned.jsonl")),
            lookalikes: jsonl(&root.join("lookalikes.jsonl")),
            servers,
        }
    }
}
