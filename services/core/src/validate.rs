//! Each item checked on its own against the job's JSON Schema (draft 2020-12).

use jsonschema::{Draft, Validator};
use serde_json::Value;

use crate::model::Violation;

/// A compiled schema. Compiled once per job, used for every item.
pub struct ItemValidator {
    schema: Option<Validator>,
}

impl ItemValidator {
    /// Compiles a schema, checking it against the 2020-12 meta-schema first.
    /// Remote `$ref`s are not fetched: a schema must be self-contained.
    pub fn new(schema: &Value) -> Result<ItemValidator, String> {
        let v = jsonschema::options()
            .with_draft(Draft::Draft202012)
            .build(schema)
            .map_err(|e| {
                format!(
                    "invalid JSON Schema: {e} (at {})",
                    pointer_or_root(e.instance_path().as_str())
                )
            })?;
        Ok(ItemValidator { schema: Some(v) })
    }

    /// A validator that accepts every item (a job with no schema).
    pub fn accept_all() -> ItemValidator {
        ItemValidator { schema: None }
    }

    /// Every violation of the schema by `item`; empty when it is valid.
    pub fn check(&self, item: &Value) -> Vec<Violation> {
        let Some(v) = &self.schema else {
            return Vec::new();
        };
        v.iter_errors(item)
            .map(|e| Violation {
                path: e.instance_path().as_str().to_owned(),
                message: e.to_string(),
            })
            .collect()
    }
}

fn pointer_or_root(p: &str) -> &str {
    if p.is_empty() { "/" } else { p }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "required": ["name", "price", "currency"],
            "properties": {
                "price": {"type": "number", "exclusiveMinimum": 0},
                "currency": {"type": "string", "pattern": "^[A-Z]{3}$"}
            }
        })
    }

    #[test]
    fn valid_items_have_no_violations() {
        let v = ItemValidator::new(&schema()).unwrap();
        assert!(
            v.check(&json!({"name": "x", "price": 9.5, "currency": "USD"}))
                .is_empty()
        );
    }

    #[test]
    fn every_violation_is_reported_with_its_path() {
        let v = ItemValidator::new(&schema()).unwrap();
        let errs = v.check(&json!({"price": -1, "currency": "usd"}));
        let mut paths: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
        paths.sort_unstable();
        assert_eq!(paths, ["", "/currency", "/price"], "{errs:?}");
        assert!(
            errs.iter()
                .any(|e| e.message.contains("\"name\" is a required property")),
            "{errs:?}"
        );
    }

    #[test]
    fn invalid_schemas_are_refused() {
        assert!(ItemValidator::new(&json!({"type": "objekt"})).is_err());
        assert!(ItemValidator::new(&json!({"pattern": "(["})).is_err());
        assert!(ItemValidator::new(&json!({"$ref": "https://example.com/s.json"})).is_err());
    }
}
