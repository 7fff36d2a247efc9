//! What model calls cost: prices per million tokens in integer micro-dollars.

use std::collections::BTreeMap;

use serde::Deserialize;
use trawl_core::cost::Micros;

use crate::Usage;

/// Prices of one model, each in [`Micros`] per million tokens (so $3 / MTok is
/// `Micros(3_000_000)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelPrice {
    pub input: Micros,
    pub output: Micros,
    /// Writing the prompt cache (Anthropic's 5-minute cache write).
    pub cache_write: Micros,
    /// Reading the prompt cache.
    pub cache_read: Micros,
}

impl ModelPrice {
    /// From dollars per million tokens.
    pub fn from_usd_per_mtok(
        input: f64,
        output: f64,
        cache_write: f64,
        cache_read: f64,
    ) -> ModelPrice {
        ModelPrice {
            input: Micros::from_usd(input),
            output: Micros::from_usd(output),
            cache_write: Micros::from_usd(cache_write),
            cache_read: Micros::from_usd(cache_read),
        }
    }

    /// The cost of `usage`, rounded up to the next micro-dollar. Integer
    /// arithmetic throughout (i128, so no overflow for any u64 count).
    pub fn cost(&self, usage: &Usage) -> Micros {
        let term = |tokens: u64, price: Micros| i128::from(tokens) * i128::from(price.0);
        let total = term(usage.input_tokens, self.input)
            + term(usage.output_tokens, self.output)
            + term(usage.cache_creation_input_tokens, self.cache_write)
            + term(usage.cache_read_input_tokens, self.cache_read);
        let micros = ceil_div(total, 1_000_000);
        Micros(i64::try_from(micros).unwrap_or(if micros < 0 { i64::MIN } else { i64::MAX }))
    }
}

fn ceil_div(n: i128, d: i128) -> i128 {
    let q = n.div_euclid(d);
    if n.rem_euclid(d) == 0 { q } else { q + 1 }
}

/// Model name → price. Lookup by exact name, then by the longest listed prefix,
/// so `claude-sonnet-4-5-20250929` finds `claude-sonnet-4-5`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PriceList {
    prices: BTreeMap<String, ModelPrice>,
}

/// Why a price list did not parse.
#[derive(Debug, thiserror::Error)]
pub enum PriceError {
    #[error("price list is not a map of model name to prices: {0}")]
    Syntax(String),
    #[error("price list: empty model name")]
    EmptyName,
    #[error("price list: {model}: {field} must be a finite number >= 0, got {value}")]
    Invalid {
        model: String,
        field: &'static str,
        value: f64,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceEntry {
    input_usd_per_mtok: f64,
    output_usd_per_mtok: f64,
    /// Default: the input price.
    cache_write_usd_per_mtok: Option<f64>,
    /// Default: the input price (never cheaper than what was billed).
    cache_read_usd_per_mtok: Option<f64>,
}

impl Default for PriceList {
    /// The Claude list prices, see [`PriceList::claude`].
    fn default() -> Self {
        PriceList::claude()
    }
}

impl PriceList {
    /// No prices: every model is free (self-hosted).
    pub fn empty() -> PriceList {
        PriceList {
            prices: BTreeMap::new(),
        }
    }

    /// Anthropic list prices in USD per million tokens, from the pricing page
    /// (<https://docs.anthropic.com/en/docs/about-claude/pricing>, as found in
    /// 2026-03 through 2026-04 copies of it and of price tables quoting it):
    /// cache write is the 5-minute write (1.25 × input), cache read is a cache
    /// hit (0.1 × input). Long-context (> 200K input) surcharges and batch
    /// discounts are not modelled.
    pub fn claude() -> PriceList {
        let mut list = PriceList::empty();
        let opus_new = ModelPrice::from_usd_per_mtok(5.0, 25.0, 6.25, 0.50);
        let opus_old = ModelPrice::from_usd_per_mtok(15.0, 75.0, 18.75, 1.50);
        let sonnet = ModelPrice::from_usd_per_mtok(3.0, 15.0, 3.75, 0.30);
        for name in ["claude-opus-4-7", "claude-opus-4-6", "claude-opus-4-5"] {
            list.insert(name, opus_new);
        }
        for name in ["claude-opus-4-1", "claude-opus-4", "claude-3-opus"] {
            list.insert(name, opus_old);
        }
        for name in [
            "claude-sonnet-4-6",
            "claude-sonnet-4-5",
            "claude-sonnet-4",
            "claude-3-7-sonnet",
            "claude-3-5-sonnet",
        ] {
            list.insert(name, sonnet);
        }
        list.insert(
            "claude-haiku-4-5",
            ModelPrice::from_usd_per_mtok(1.0, 5.0, 1.25, 0.10),
        );
        list.insert(
            "claude-3-5-haiku",
            ModelPrice::from_usd_per_mtok(0.80, 4.0, 1.0, 0.08),
        );
        list.insert(
            "claude-3-haiku",
            ModelPrice::from_usd_per_mtok(0.25, 1.25, 0.30, 0.03),
        );
        list
    }

    /// Parses a YAML or JSON map
    /// `{model: {input_usd_per_mtok, output_usd_per_mtok, cache_write_usd_per_mtok?, cache_read_usd_per_mtok?}}`.
    /// Missing cache prices default to the input price.
    pub fn parse(text: &str) -> Result<PriceList, PriceError> {
        let entries: BTreeMap<String, PriceEntry> =
            serde_yaml_ng::from_str(text).map_err(|e| PriceError::Syntax(e.to_string()))?;
        let mut list = PriceList::empty();
        for (model, e) in entries {
            if model.trim().is_empty() {
                return Err(PriceError::EmptyName);
            }
            let check = |field: &'static str, value: f64| {
                if value.is_finite() && value >= 0.0 {
                    Ok(value)
                } else {
                    Err(PriceError::Invalid {
                        model: model.clone(),
                        field,
                        value,
                    })
                }
            };
            let input = check("input_usd_per_mtok", e.input_usd_per_mtok)?;
            let output = check("output_usd_per_mtok", e.output_usd_per_mtok)?;
            let cache_write = check(
                "cache_write_usd_per_mtok",
                e.cache_write_usd_per_mtok.unwrap_or(input),
            )?;
            let cache_read = check(
                "cache_read_usd_per_mtok",
                e.cache_read_usd_per_mtok.unwrap_or(input),
            )?;
            list.insert(
                model,
                ModelPrice::from_usd_per_mtok(input, output, cache_write, cache_read),
            );
        }
        Ok(list)
    }

    pub fn insert(&mut self, model: impl Into<String>, price: ModelPrice) {
        self.prices.insert(model.into(), price);
    }

    /// Adds or replaces every price of `other`.
    pub fn extend(&mut self, other: PriceList) {
        self.prices.extend(other.prices);
    }

    /// The price of `model`: exact name, else the longest listed prefix, else
    /// `None` (an unknown, presumably self-hosted model).
    pub fn get(&self, model: &str) -> Option<&ModelPrice> {
        self.listed(model).map(|(_, p)| p)
    }

    /// The name the list knows `model` by (`claude-sonnet-4-5` for
    /// `claude-sonnet-4-5-20250929`), if it lists it: one of a bounded set of
    /// names, fit for a metric label.
    pub fn listed_name(&self, model: &str) -> Option<&str> {
        self.listed(model).map(|(name, _)| name)
    }

    /// The entry of `model`: exact name, else the longest listed prefix.
    fn listed(&self, model: &str) -> Option<(&str, &ModelPrice)> {
        if let Some((name, p)) = self.prices.get_key_value(model) {
            return Some((name.as_str(), p));
        }
        self.prices
            .iter()
            .filter(|(name, _)| model.starts_with(name.as_str()))
            .max_by_key(|(name, _)| name.len())
            .map(|(name, p)| (name.as_str(), p))
    }

    /// The cost of `usage` on `model`; zero for unknown models.
    pub fn cost(&self, model: &str, usage: &Usage) -> Micros {
        self.get(model).map_or(Micros::ZERO, |p| p.cost(usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_is_exact_and_rounds_up() {
        let sonnet = ModelPrice::from_usd_per_mtok(3.0, 15.0, 3.75, 0.30);
        let usage = Usage {
            input_tokens: 1_000,
            output_tokens: 500,
            cache_creation_input_tokens: 2_000,
            cache_read_input_tokens: 10_000,
        };
        // 1000*3 + 500*15 + 2000*3.75 + 10000*0.30 = 3000 + 7500 + 7500 + 3000 micro$.
        assert_eq!(sonnet.cost(&usage), Micros(21_000));
        let one = Usage {
            input_tokens: 1,
            ..Usage::default()
        };
        // 3 micro$ per token exactly; 0.3 micro$ rounds up to 1.
        assert_eq!(sonnet.cost(&one), Micros(3));
        let cached = Usage {
            cache_read_input_tokens: 1,
            ..Usage::default()
        };
        assert_eq!(sonnet.cost(&cached), Micros(1));
        assert_eq!(sonnet.cost(&Usage::default()), Micros::ZERO);
        let huge = Usage {
            output_tokens: u64::MAX,
            ..Usage::default()
        };
        assert_eq!(sonnet.cost(&huge), Micros(i64::MAX));
    }

    #[test]
    fn lookup_is_exact_then_longest_prefix() {
        let list = PriceList::claude();
        let sonnet45 = *list.get("claude-sonnet-4-5").unwrap();
        assert_eq!(list.get("claude-sonnet-4-5-20250929"), Some(&sonnet45));
        // claude-opus-4-5-… must not take claude-opus-4's older price.
        assert_eq!(
            list.get("claude-opus-4-5-20251101").unwrap().input,
            Micros(5_000_000)
        );
        assert_eq!(
            list.get("claude-opus-4-20250514").unwrap().input,
            Micros(15_000_000)
        );
        assert_eq!(
            list.get("claude-haiku-4-5-20251001").unwrap().output,
            Micros(5_000_000)
        );
        assert_eq!(list.get("qwen3-32b"), None);
        assert_eq!(
            list.cost(
                "qwen3-32b",
                &Usage {
                    input_tokens: 9,
                    ..Usage::default()
                }
            ),
            Micros::ZERO
        );
    }

    #[test]
    fn parses_yaml_and_json() {
        let yaml = "claude-sonnet-4-5:\n  input_usd_per_mtok: 3.0\n  output_usd_per_mtok: 15.0\n  cache_write_usd_per_mtok: 3.75\n  cache_read_usd_per_mtok: 0.30\nlocal:\n  input_usd_per_mtok: 0\n  output_usd_per_mtok: 0.5\n";
        let list = PriceList::parse(yaml).unwrap();
        assert_eq!(
            list.get("claude-sonnet-4-5-20250929"),
            PriceList::claude().get("claude-sonnet-4-5")
        );
        assert_eq!(
            list.get("local"),
            Some(&ModelPrice::from_usd_per_mtok(0.0, 0.5, 0.0, 0.0))
        );
        let json = r#"{"gpt-x": {"input_usd_per_mtok": 2, "output_usd_per_mtok": 8}}"#;
        let list = PriceList::parse(json).unwrap();
        assert_eq!(list.get("gpt-x").unwrap().cache_read, Micros(2_000_000));
    }

    #[test]
    fn parse_errors_say_what_is_wrong() {
        let e = PriceList::parse("m:\n  input_usd_per_mtok: 1\n").unwrap_err();
        assert!(e.to_string().contains("output_usd_per_mtok"), "{e}");
        let e = PriceList::parse(
            "m:\n  input_usd_per_mtok: 1\n  output_usd_per_mtok: 1\n  output_usd: 2\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("output_usd"), "{e}");
        let e = PriceList::parse("m:\n  input_usd_per_mtok: -1\n  output_usd_per_mtok: 1\n")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "price list: m: input_usd_per_mtok must be a finite number >= 0, got -1"
        );
        let e = PriceList::parse("- a\n- b\n").unwrap_err();
        assert!(matches!(e, PriceError::Syntax(_)));
        let e = PriceList::parse("'':\n  input_usd_per_mtok: 1\n  output_usd_per_mtok: 1\n")
            .unwrap_err();
        assert!(matches!(e, PriceError::EmptyName));
    }
}
