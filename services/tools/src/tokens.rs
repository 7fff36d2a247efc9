//! Token counts of tool definitions, with tiktoken's `o200k_base` encoding
//! (`tiktoken-rs`).
//!
//! `o200k_base` is OpenAI's (GPT-4o and later). Other models' tokenizers differ
//! (Claude's among them), so these numbers approximate what a model is shown:
//! they are for comparing catalogs and tools with each other (what search saves
//! over listing every tool), never for billing.
//!
//! The vocabulary is embedded in the crate and parsed once, on first use: that
//! call takes a few tenths of a second (0.2–0.3 s in a release build), later ones
//! microseconds, so async callers should make the first count off the runtime
//! (`spawn_blocking`). Should parsing ever fail, counts fall back to one token per
//! four bytes of UTF-8 and a warning is logged once: counting must not take a
//! catalog down.

use std::sync::OnceLock;

use serde_json::{Map, Value};
use tiktoken_rs::CoreBPE;
use trawl_core::ports::ToolDef;

/// Tokens of `text` in `o200k_base`, special tokens counted as ordinary text.
pub fn count(text: &str) -> usize {
    match bpe() {
        Some(bpe) => bpe.encode_ordinary(text).len(),
        None => text.len().div_ceil(4),
    }
}

/// Tokens of a tool as a model is shown it: the compact JSON of `{name,
/// description, input_schema, input_examples}`, the last only when there are any.
pub fn def_tokens(def: &ToolDef) -> usize {
    let mut shown = Map::new();
    shown.insert("name".to_owned(), Value::String(def.name.clone()));
    shown.insert(
        "description".to_owned(),
        Value::String(def.description.clone()),
    );
    shown.insert("input_schema".to_owned(), def.input_schema.clone());
    if !def.input_examples.is_empty() {
        shown.insert(
            "input_examples".to_owned(),
            Value::Array(def.input_examples.clone()),
        );
    }
    count(&Value::Object(shown).to_string())
}

/// The encoder, loaded on first use; `None` if it could not be (logged once).
fn bpe() -> Option<&'static CoreBPE> {
    static BPE: OnceLock<Option<CoreBPE>> = OnceLock::new();
    BPE.get_or_init(|| match tiktoken_rs::o200k_base() {
        Ok(bpe) => Some(bpe),
        Err(error) => {
            tracing::warn!(%error, "cannot load the o200k_base encoding; counting 4 bytes a token");
            None
        }
    })
    .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(description: &str) -> ToolDef {
        ToolDef {
            name: "weather.forecast".to_owned(),
            title: Some("Forecast".to_owned()),
            description: description.to_owned(),
            input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
            output_schema: None,
            annotations: Value::Null,
            input_examples: Vec::new(),
        }
    }

    #[test]
    fn counts_with_o200k_base() {
        assert!(bpe().is_some());
        assert_eq!(count("hello world"), 2);
        assert_eq!(count(""), 0);
        // Special tokens are plain text here.
        assert!(count("<|endoftext|>") > 1);
    }

    #[test]
    fn a_longer_description_costs_more() {
        let short = def_tokens(&def("Forecast for a city."));
        let long = def_tokens(&def(
            "Forecast for a city, day by day, with temperatures, rain and wind.",
        ));
        assert!(short > 10, "{short}");
        assert!(long > short, "{long} <= {short}");
    }

    #[test]
    fn examples_count_when_present() {
        let mut with = def("Forecast for a city.");
        let without = def_tokens(&with);
        with.input_examples = vec![json!({"city": "Lyon"})];
        assert!(def_tokens(&with) > without);
    }
}
