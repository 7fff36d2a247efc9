//! The JSON Schemas of trawl's own tools, derived from their Rust types.
//!
//! A tool's `inputSchema` is the schema of the type its arguments are read into,
//! and its `outputSchema` the schema of the type its answer is written from. Both
//! come from the same `utoipa::ToSchema` derive that `/openapi.json` is built
//! from, so a tool and its REST route describe one type one way and cannot drift
//! apart.
//!
//! What the derive gives is an OpenAPI 3.1 schema: other types by reference
//! (`#/components/schemas/…`), an `Option` as a `type` array with `"null"` or as
//! a `oneOf` with a null branch. Not every client takes that: some accept only a
//! self-contained schema, others (function declarations of several model APIs)
//! only one `type` per schema and `anyOf` rather than `oneOf`. [`of`] makes the
//! schema portable and keeps its meaning:
//!
//! - references are inlined (the types are not recursive);
//! - an optional input is a single type, not required (absent is how a client
//!   says none);
//! - a nullable output is `anyOf` of single-typed branches, one of them
//!   `{"type": "null"}`: serde writes `null`, and a client that checks a
//!   result against its schema must accept it;
//! - a `oneOf` whose branches have pairwise different types is the equal `anyOf`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::Schema;

/// Whether a schema describes what a tool accepts or what it answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contract {
    /// Arguments: read by serde, so an `Option` may be left out.
    Input,
    /// A result: written by serde, so an `Option` is there, as `null`.
    Output,
}

const COMPONENTS: &str = "#/components/schemas/";

/// Deeper than any of trawl's types nest; a guard against a recursive one.
const MAX_DEPTH: usize = 64;

/// Keywords that say something of a schema, not of one type of it.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "example",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// The schema of `T` as a tool's `inputSchema` or `outputSchema`: the schema
/// `/openapi.json` gives of it, self-contained and portable (see the module).
/// The root's title and description (the Rust type's name and doc) are left out:
/// the tool's own description says what it is for.
pub fn of<T: ToSchema>(contract: Contract) -> Map<String, Value> {
    let mut deps: Vec<(String, RefOr<Schema>)> = Vec::new();
    T::schemas(&mut deps);
    let defs: BTreeMap<String, Value> = deps
        .into_iter()
        .filter_map(|(name, s)| Some((name, serde_json::to_value(s).ok()?)))
        .collect();
    let root = serde_json::to_value(T::schema()).unwrap_or(Value::Null);
    tool_side(root, &defs, contract)
}

/// `schema` (an OpenAPI component, as `/openapi.json` lists it) with the
/// references to `components` inlined and made portable for `contract`: what
/// [`of`] gives of the same type, from the document's side.
pub fn from_document(
    schema: &Value,
    components: &Map<String, Value>,
    contract: Contract,
) -> Map<String, Value> {
    let defs: BTreeMap<String, Value> = components
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    tool_side(schema.clone(), &defs, contract)
}

/// `root` inlined and made portable, without the root's title and description.
fn tool_side(
    mut root: Value,
    defs: &BTreeMap<String, Value>,
    contract: Contract,
) -> Map<String, Value> {
    inline(&mut root, defs, 0);
    portable(&mut root, contract);
    let Value::Object(mut root) = root else {
        return Map::new();
    };
    root.remove("title");
    root.remove("description");
    root
}

/// Replaces each reference to a component by the component, keeping the
/// keywords beside the reference (a field's own description), and a lone
/// `allOf` by its one member.
fn inline(v: &mut Value, defs: &BTreeMap<String, Value>, depth: usize) {
    match v {
        Value::Object(o) => {
            let target = o
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix(COMPONENTS))
                .and_then(|name| defs.get(name));
            if depth < MAX_DEPTH
                && let Some(Value::Object(def)) = target
            {
                let beside = std::mem::replace(o, def.clone());
                o.extend(beside.into_iter().filter(|(k, _)| k != "$ref"));
            }
            if let Some(Value::Array(all)) = o.get("allOf")
                && let [Value::Object(only)] = all.as_slice()
            {
                let only = only.clone();
                o.remove("allOf");
                for (k, x) in only {
                    o.entry(k).or_insert(x);
                }
            }
            for child in o.values_mut() {
                inline(child, defs, depth + 1);
            }
        }
        Value::Array(a) => {
            for x in a {
                inline(x, defs, depth + 1);
            }
        }
        _ => {}
    }
}

/// One `type` per schema: see the module.
fn portable(v: &mut Value, contract: Contract) {
    match v {
        Value::Array(a) => {
            for x in a {
                portable(x, contract);
            }
        }
        Value::Object(o) => {
            for child in o.values_mut() {
                portable(child, contract);
            }
            if let Some(Value::Array(types)) = o.get("type") {
                let types = types.clone();
                o.remove("type");
                let (annotations, keywords): (Map<String, Value>, Map<String, Value>) =
                    std::mem::take(o)
                        .into_iter()
                        .partition(|(k, _)| ANNOTATIONS.contains(&k.as_str()));
                let branches = types
                    .into_iter()
                    .map(|t| {
                        if t == "null" {
                            return single("null");
                        }
                        let mut b = keywords.clone();
                        b.insert("type".to_owned(), t);
                        Value::Object(b)
                    })
                    .collect();
                *o = annotations;
                choose(o, branches, contract);
            }
            for key in ["oneOf", "anyOf"] {
                let Some(Value::Array(branches)) = o.get(key) else {
                    continue;
                };
                if key == "oneOf" && !disjoint(branches) {
                    continue;
                }
                let branches = branches.clone();
                o.remove(key);
                choose(o, branches, contract);
            }
        }
        _ => {}
    }
}

/// Sets `o` to one of `branches`: the null one dropped for an input, a single
/// one merged into `o`, more as `anyOf`.
fn choose(o: &mut Map<String, Value>, mut branches: Vec<Value>, contract: Contract) {
    if contract == Contract::Input && branches.len() > 1 {
        branches.retain(|b| !is_null(b));
    }
    match <[Value; 1]>::try_from(branches) {
        Ok([Value::Object(only)]) => {
            for (k, x) in only {
                o.entry(k).or_insert(x);
            }
        }
        Ok([other]) => {
            o.insert("anyOf".to_owned(), Value::Array(vec![other]));
        }
        Err(mut branches) => {
            // A field's description given inside its one non-null branch (as
            // the derive writes an `Option` of another type) belongs to the
            // field.
            for key in ANNOTATIONS {
                let holders: Vec<usize> = (0..branches.len())
                    .filter(|&i| branches[i].get(*key).is_some())
                    .collect();
                if let [i] = holders.as_slice()
                    && !o.contains_key(*key)
                    && let Some(Value::Object(b)) = branches.get_mut(*i)
                    && let Some(x) = b.remove(*key)
                {
                    o.insert((*key).to_owned(), x);
                }
            }
            o.insert("anyOf".to_owned(), Value::Array(branches));
        }
    }
}

fn single(t: &str) -> Value {
    let mut b = Map::new();
    b.insert("type".to_owned(), Value::String(t.to_owned()));
    Value::Object(b)
}

fn is_null(b: &Value) -> bool {
    b.get("type").and_then(Value::as_str) == Some("null")
}

/// Whether no value can match two of `branches`: each has one `type` and no two
/// share it (`integer` is a `number` too).
fn disjoint(branches: &[Value]) -> bool {
    let mut seen: Vec<&str> = Vec::new();
    for b in branches {
        let Some(t) = b.get("type").and_then(Value::as_str) else {
            return false;
        };
        let clash =
            |s: &&str| *s == t || matches!((*s, t), ("integer", "number") | ("number", "integer"));
        if seen.iter().any(clash) {
            return false;
        }
        seen.push(t);
    }
    true
}

/// Every place in `schema` that is not portable: a `type` array, a `$ref`, a
/// `oneOf`, an `allOf`. Empty for what [`of`] gives.
pub fn unportable(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(schema, String::new(), &mut out);
    out
}

fn walk(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            if o.get("type").is_some_and(Value::is_array) {
                out.push(format!("{at}/type"));
            }
            for key in ["$ref", "oneOf", "allOf"] {
                if o.contains_key(key) {
                    out.push(format!("{at}/{key}"));
                }
            }
            for (k, x) in o {
                // Examples and defaults are values, not schemas.
                if !matches!(
                    k.as_str(),
                    "example" | "examples" | "default" | "enum" | "const"
                ) {
                    walk(x, format!("{at}/{k}"), out);
                }
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                walk(x, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use super::*;

    /// Where something is.
    #[derive(Serialize, Deserialize, ToSchema)]
    struct Place {
        /// The town.
        town: String,
        zip: Option<String>,
    }

    /// A thing, with a place.
    #[derive(Serialize, Deserialize, ToSchema)]
    struct Thing {
        name: String,
        /// Where it is.
        place: Place,
        /// Where it was, if anywhere.
        was: Option<Place>,
        #[schema(minimum = 1, maximum = 9)]
        count: Option<u32>,
        either: Either,
    }

    #[derive(Serialize, Deserialize, ToSchema)]
    #[serde(untagged)]
    enum Either {
        Text(String),
        Number(i64),
    }

    fn validator(schema: &Map<String, Value>) -> jsonschema::Validator {
        jsonschema::draft202012::new(&Value::Object(schema.clone())).unwrap()
    }

    #[test]
    fn a_derived_schema_is_self_contained_and_single_typed() {
        for contract in [Contract::Input, Contract::Output] {
            let s = of::<Thing>(contract);
            let v = Value::Object(s.clone());
            assert_eq!(unportable(&v), Vec::<String>::new(), "{v}");
            assert_eq!(s["type"], "object");
            assert!(!s.contains_key("description"), "{v}");
            // The referenced type is inlined with the field's own description.
            assert_eq!(s["properties"]["place"]["description"], "Where it is.");
            assert_eq!(
                s["properties"]["place"]["properties"]["town"]["type"],
                "string"
            );
            // Keywords stay with their type.
            let count = &s["properties"]["count"];
            let count_int = match contract {
                Contract::Input => count.clone(),
                Contract::Output => count["anyOf"][0].clone(),
            };
            assert_eq!(count_int["minimum"], 1, "{v}");
            assert_eq!(count_int["type"], "integer", "{v}");
            // The untagged enum of two types is an anyOf of them.
            let either: Vec<&str> = s["properties"]["either"]["anyOf"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["type"].as_str().unwrap())
                .collect();
            assert_eq!(either, ["string", "integer"], "{v}");
        }
    }

    #[test]
    fn an_optional_input_is_one_type_and_a_nullable_output_takes_null() {
        let input = of::<Thing>(Contract::Input);
        assert_eq!(input["properties"]["zip"], json!(null));
        assert_eq!(input["properties"]["count"]["type"], "integer");
        assert_eq!(input["properties"]["was"]["type"], "object");
        let output = of::<Thing>(Contract::Output);
        let types = |p: &Value| -> Vec<String> {
            p["anyOf"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["type"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(types(&output["properties"]["count"]), ["integer", "null"]);
        assert_eq!(types(&output["properties"]["was"]), ["object", "null"]);
        let raw = serde_json::to_value(<Thing as utoipa::PartialSchema>::schema()).unwrap();
        assert_eq!(
            output["properties"]["was"]["description"],
            "Where it was, if anywhere.",
            "{raw}\n{}",
            Value::Object(output.clone())
        );

        // What serde writes is what the output schema accepts, nulls included;
        // what a client sends without the optional fields, the input one.
        let written = serde_json::to_value(Thing {
            name: "a".into(),
            place: Place {
                town: "b".into(),
                zip: None,
            },
            was: None,
            count: None,
            either: Either::Number(3),
        })
        .unwrap();
        assert!(validator(&output).is_valid(&written), "{written}");
        let sent = json!({"name": "a", "place": {"town": "b"}, "either": "x", "count": 2});
        assert!(validator(&input).is_valid(&sent));
        assert!(
            !validator(&input)
                .is_valid(&json!({"name": "a", "place": {"town": "b"}, "either": "x", "count": 0}))
        );
        assert!(!validator(&output).is_valid(&json!({"name": "a", "place": {"town": "b"}, "either": true, "was": null, "count": null})));
    }

    #[test]
    fn overlapping_one_of_branches_stay_one_of() {
        let mut v = json!({"oneOf": [{"type": "integer"}, {"type": "number"}]});
        portable(&mut v, Contract::Output);
        assert!(v.get("oneOf").is_some(), "{v}");
        assert_eq!(unportable(&v), ["/oneOf"]);
    }
}
