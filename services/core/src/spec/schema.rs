//! The job spec as a JSON Schema (2020-12, the dialect of OpenAPI 3.1), built
//! from what the checker uses: its field lists ([`super::fields`]) and its
//! limits (the `MAX_*` constants), so the document and the checker cannot say
//! two things. The API puts these schemas in its OpenAPI document.
//!
//! The schema never refuses what the checker accepts. What JSON Schema cannot
//! say (a CSS selector's or a regular expression's syntax, a URL's host, a
//! valid JSON Schema in `schema`, a password never typed from the spec, the
//! slice limit) the checker alone refuses, with a field error.
//!
//! A member set to `null` is taken as absent, so every optional member also
//! allows `null`.

use serde_json::{Map, Value, json};

use super::browse::{
    MAX_INSTRUCTION_CHARS, MAX_PAGES, MAX_SCREENSHOT_NAME, MAX_SCROLL_TIMES, MAX_STEP_TIMEOUT,
    MAX_STEPS,
};
use super::{
    LINE_PATTERN, MAX_FOLLOW_TOP, MAX_MAX_TOKENS, MAX_MODEL_CHARS, MAX_NAME_CHARS, MAX_QUERY_CHARS,
    MAX_QUESTION_CHARS, MAX_SUBAGENTS, MAX_TOOL_CALLS_PER_AGENT, MAX_USD, MIN_MAX_TOKENS,
    MIN_RETENTION, TEXT_PATTERN, fields,
};
use crate::geo::Geo;
use crate::retry::MAX_ATTEMPTS_CEILING;

/// The name of the job spec's schema among [`components`].
pub const JOB_SPEC: &str = "JobSpec";

/// A URL the checker may accept: one line, `http` or `https` (any case).
const URL_PATTERN: &str = r"^\s*[Hh][Tt][Tt][Pp][Ss]?:";

/// A duration in words (`90s`, `30m`, `24h`, `7d`, `1h 30m`), as loose as the
/// parser: numbers followed by units.
const DURATION_PATTERN: &str =
    r"^\s*[0-9][0-9.]*(\s*[A-Za-zµ]+(\s*[0-9][0-9.]*\s*[A-Za-zµ]+)*)?\s*$";

/// A name of an extracted field.
const FIELD_NAME_PATTERN: &str = "^[A-Za-z0-9_-]+$";

/// The name of a secret in the worker's configuration.
const SECRET_PATTERN: &str = "^[A-Za-z0-9_]+$";

/// Every schema of the job spec, by name; `ref_prefix` is where they are put
/// (`#/components/schemas/` in an OpenAPI document, `#/$defs/` in a JSON
/// Schema), for their references to one another.
pub fn components(ref_prefix: &str) -> Map<String, Value> {
    let r = |name: &str| json!({"$ref": format!("{ref_prefix}{name}")});
    let nullable = |s: Value| json!({"anyOf": [s, {"type": "null"}]});
    let nullable_ref = |name: &str| nullable(r(name));
    let text = |max: Option<usize>| {
        let mut s = json!({"type": "string", "minLength": 1, "pattern": TEXT_PATTERN});
        if let Some(max) = max {
            s["maxLength"] = json!(max);
        }
        s
    };
    let line = |max: usize| json!({"type": "string", "minLength": 1, "maxLength": max, "pattern": LINE_PATTERN});
    let int = |min: u64, max: u64| json!({"type": "integer", "minimum": min, "maximum": max});
    let object = |known: &[&str], properties: Value, required: &[&str]| {
        let props = properties.as_object().cloned().unwrap_or_default();
        let _ = known; // The tests hold the members to the checker's.
        json!({
            "type": "object",
            "properties": props,
            "required": required,
            "additionalProperties": false,
        })
    };
    let geos: Vec<String> = Geo::all().map(|g| g.as_str().to_owned()).collect();
    let step_timeout_secs = MAX_STEP_TIMEOUT.as_secs();

    let mut c = Map::new();
    let mut put = |name: &str, schema: Value| {
        c.insert(name.to_owned(), schema);
    };

    put(
        "Geo",
        json!({"type": "string", "enum": geos,
               "description": "A country: ISO 3166-1 alpha-2, lower case."}),
    );
    put(
        "Geos",
        json!({"type": "array", "minItems": 1, "items": r("Geo"),
               "description": "The countries to run from; duplicates collapse."}),
    );
    put(
        "Url",
        json!({"type": "string", "minLength": 1,
               "allOf": [{"pattern": LINE_PATTERN}, {"pattern": URL_PATTERN}],
               "description": "An absolute http or https URL, normalized; duplicates collapse."}),
    );
    put(
        "Urls",
        json!({"type": "array", "minItems": 1, "items": r("Url")}),
    );
    put(
        "Duration",
        json!({
            "description": "A number of seconds, or words: 0, 90s, 30m, 24h, 7d.",
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": u64::MAX},
                {"type": "string", "pattern": DURATION_PATTERN},
            ],
        }),
    );
    put(
        "StepTimeout",
        json!({
            "description": format!("How long a step may take: more than 0, at most {step_timeout_secs} s."),
            "anyOf": [
                {"type": "integer", "minimum": 1, "maximum": step_timeout_secs},
                {"type": "string", "pattern": DURATION_PATTERN},
            ],
        }),
    );
    put(
        "Selector",
        json!({"allOf": [text(None)], "description": "A CSS selector."}),
    );
    put(
        "Usd",
        json!({"type": "number", "minimum": 0, "exclusiveMaximum": MAX_USD}),
    );

    put(
        "Searches",
        object(
            fields::SEARCHES,
            json!({
                "queries": {"type": "array", "minItems": 1, "items": text(Some(MAX_QUERY_CHARS)),
                            "description": "One search slice per (query, geo); duplicates (case and spacing aside) collapse."},
                "geos": r("Geos"),
                "engine": nullable(json!({"type": "string", "enum": ["google", "bing"], "default": "google"})),
                "follow_top": nullable(json!({"type": "integer", "minimum": 0, "maximum": MAX_FOLLOW_TOP, "default": 0,
                    "description": "Each search spawns page slices for its top N organic results."})),
            }),
            &["queries", "geos"],
        ),
    );
    put(
        "Pages",
        object(
            fields::PAGES,
            json!({"urls": r("Urls"), "geos": r("Geos")}),
            &["urls", "geos"],
        ),
    );
    put(
        "Research",
        object(
            fields::RESEARCH,
            json!({
                "question": text(None).as_object().cloned().map(|mut q| {
                    q.insert("maxLength".into(), json!(MAX_QUESTION_CHARS));
                    q.insert("description".into(), json!("The question; white space around it is dropped, and it is at most this long without it."));
                    Value::Object(q)
                }),
                "geo": nullable_ref("Geo"),
                "max_subagents": nullable(int(1, MAX_SUBAGENTS)),
                "max_tool_calls_per_agent": nullable(int(1, MAX_TOOL_CALLS_PER_AGENT)),
                "model": nullable(line(MAX_MODEL_CHARS)),
                "max_tokens": nullable(int(MIN_MAX_TOKENS, MAX_MAX_TOKENS)),
                "report": nullable(json!({"type": "boolean", "default": true})),
                "tool_search": nullable(json!({"type": "string", "enum": ["client", "server"], "default": "client"})),
                "code_execution": nullable(json!({"type": "string", "enum": ["local", "anthropic", "off"], "default": "local"})),
            }),
            &["question"],
        ),
    );
    put(
        "Field",
        json!({
            "type": "object",
            "description": "How a field is found: exactly one of jsonld, css or regex.",
            "properties": {
                "jsonld": nullable(text(None)),
                "css": nullable_ref("Selector"),
                "regex": nullable(text(None)),
                "attr": nullable(json!({"type": "string", "minLength": 1, "pattern": LINE_PATTERN,
                                        "description": "The attribute read instead of the text (css only)."})),
                "type": nullable(json!({"type": "string", "enum": ["string", "number", "integer", "boolean"], "default": "string"})),
            },
            "additionalProperties": false,
            "oneOf": [
                {"required": ["jsonld"], "properties": {"jsonld": {"type": "string"}}},
                {"required": ["css"], "properties": {"css": {"type": "string"}}},
                {"required": ["regex"], "properties": {"regex": {"type": "string"}}},
            ],
            "if": {"required": ["attr"], "properties": {"attr": {"type": "string"}}},
            "then": {"required": ["css"], "properties": {"css": {"type": "string"}}},
        }),
    );
    put(
        "Fields",
        json!({
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": FIELD_NAME_PATTERN},
            "additionalProperties": r("Field"),
            "description": "Output field name to how it is found.",
        }),
    );
    put(
        "Extract",
        object(fields::EXTRACT, json!({"fields": r("Fields")}), &["fields"]),
    );
    put("Browse", browse(&r, &nullable, &text, &line, &int));
    for (name, schema) in steps(&r, &nullable, &text, &int) {
        put(&name, schema);
    }

    let present =
        |member: &str| json!({"required": [member], "properties": {member: {"type": "object"}}});
    put(
        JOB_SPEC,
        json!({
            "type": "object",
            "description": "A job spec, the same document `trawl run` reads. It needs one of searches, pages, research or browse; extract when it fetches pages.",
            "properties": {
                "name": line(MAX_NAME_CHARS),
                "searches": nullable_ref("Searches"),
                "pages": nullable_ref("Pages"),
                "research": nullable_ref("Research"),
                "browse": nullable_ref("Browse"),
                "extract": nullable_ref("Extract"),
                "schema": {"type": ["object", "boolean", "null"],
                           "description": "JSON Schema (2020-12) every extracted item must satisfy."},
                "cache": nullable(object(fields::CACHE, json!({"max_age": nullable_ref("Duration")}), &[])),
                "retries": nullable(object(fields::RETRIES, json!({"max_attempts": nullable(int(1, u64::from(MAX_ATTEMPTS_CEILING)))}), &[])),
                "budget": nullable(object(fields::BUDGET, json!({"max_usd": nullable_ref("Usd"), "approve_above_usd": nullable_ref("Usd")}), &[])),
                "retention": nullable(json!({
                    "description": format!("How long the job is kept after it ends, at least {} s.", MIN_RETENTION.as_secs()),
                    "anyOf": [
                        {"type": "integer", "minimum": MIN_RETENTION.as_secs(), "maximum": u64::MAX},
                        {"type": "string", "pattern": DURATION_PATTERN},
                    ],
                })),
            },
            "required": ["name"],
            "additionalProperties": false,
            "anyOf": [present("searches"), present("pages"), present("research"), present("browse")],
            "allOf": [
                {"if": present("pages"), "then": present("extract")},
                {"if": {"required": ["searches"], "properties": {"searches": {
                    "type": "object", "required": ["follow_top"],
                    "properties": {"follow_top": {"type": "integer", "minimum": 1}}}}},
                 "then": present("extract")},
            ],
        }),
    );
    c
}

type Make<'a> = &'a dyn Fn(&str) -> Value;
type Wrap<'a> = &'a dyn Fn(Value) -> Value;

fn browse(
    r: Make<'_>,
    nullable: Wrap<'_>,
    _text: &dyn Fn(Option<usize>) -> Value,
    line: &dyn Fn(usize) -> Value,
    int: &dyn Fn(u64, u64) -> Value,
) -> Value {
    json!({
        "type": "object",
        "description": "Browser sessions: one slice per (url, geo), each running the steps.",
        "properties": {
            "urls": r("Urls"),
            "geos": r("Geos"),
            "steps": {"type": "array", "minItems": 1, "maxItems": MAX_STEPS, "items": r("Step")},
            "step_timeout": nullable(r("StepTimeout")),
            "model": nullable(line(MAX_MODEL_CHARS)),
            "max_tokens": nullable(int(MIN_MAX_TOKENS, MAX_MAX_TOKENS)),
        },
        "required": ["urls", "geos", "steps"],
        "additionalProperties": false,
    })
}

/// `Step` (one of the actions) and the schema of each action's body.
fn steps(
    r: Make<'_>,
    nullable: Wrap<'_>,
    text: &dyn Fn(Option<usize>) -> Value,
    int: &dyn Fn(u64, u64) -> Value,
) -> Vec<(String, Value)> {
    let instruction = || {
        let mut s = text(Some(MAX_INSTRUCTION_CHARS));
        s["description"] = json!("What a model is asked to do or find.");
        s
    };
    let selector_or_object = json!({"anyOf": [
        r("Selector"),
        {"type": "object", "properties": {"selector": r("Selector")},
         "required": ["selector"], "additionalProperties": false},
    ]});
    // A step: one action, and a timeout; `schema` only with an extract given as
    // an instruction.
    let step = |action: &str, body: Value| {
        json!({
            "type": "object",
            "properties": {action: body, "timeout": r("StepTimeout")},
            "required": [action],
            "additionalProperties": false,
        })
    };
    let screenshot_name = json!({"type": "string", "minLength": 1, "maxLength": MAX_SCREENSHOT_NAME,
                                 "pattern": "^[A-Za-z0-9_-]+$"});
    let actions = vec![
        step("goto", r("Url")),
        step(
            "fill",
            json!({
                "type": "object",
                "properties": {
                    "selector": r("Selector"),
                    "value": nullable(json!({"type": "string", "pattern": "^[^\\x00-\\x08\\x0B\\x0C\\x0E-\\x1F\\x7F]*$",
                              "description": "Text to type (never a password: name a secret)."})),
                    "secret": nullable(json!({"type": "string", "minLength": 1, "pattern": SECRET_PATTERN})),
                },
                "required": ["selector"],
                "additionalProperties": false,
                "oneOf": [
                    {"required": ["value"], "properties": {"value": {"type": "string"}, "secret": {"type": "null"}}},
                    {"required": ["secret"], "properties": {"secret": {"type": "string"}, "value": {"type": "null"}}},
                ],
            }),
        ),
        step("click", selector_or_object),
        step(
            "select",
            json!({
                "type": "object",
                "properties": {"selector": r("Selector"), "value": text(None)},
                "required": ["selector", "value"],
                "additionalProperties": false,
            }),
        ),
        step(
            "wait_for",
            json!({"anyOf": [
                r("Selector"),
                {
                    "type": "object",
                    "properties": {
                        "selector": nullable(r("Selector")),
                        "text": nullable(text(None)),
                        "timeout": nullable(r("StepTimeout")),
                    },
                    "additionalProperties": false,
                    "oneOf": [
                        {"required": ["selector"], "properties": {"selector": {"type": "string"}, "text": {"type": "null"}}},
                        {"required": ["text"], "properties": {"text": {"type": "string"}, "selector": {"type": "null"}}},
                    ],
                },
            ]}),
        ),
        step(
            "scroll",
            json!({
                "type": "object",
                "properties": {
                    "until": nullable(r("Selector")),
                    "times": nullable(int(1, MAX_SCROLL_TIMES)),
                },
                "additionalProperties": false,
                "oneOf": [
                    {"required": ["until"], "properties": {"until": {"type": "string"}, "times": {"type": "null"}}},
                    {"required": ["times"], "properties": {"times": {"type": "integer"}, "until": {"type": "null"}}},
                ],
            }),
        ),
        step(
            "extract",
            json!({
                "type": "object",
                "description": "Items from the live page: one per element of rows (or one for the page), on every page reached through next.",
                "properties": {
                    "rows": nullable(r("Selector")),
                    "fields": r("Fields"),
                    "next": nullable(r("Selector")),
                    "max_pages": nullable(int(1, MAX_PAGES)),
                },
                "required": ["fields"],
                "additionalProperties": false,
            }),
        ),
        json!({
            "type": "object",
            "description": "A model picks, per property of schema, the element holding its value.",
            "properties": {
                "extract": instruction(),
                "schema": {"type": "object", "required": ["properties"], "properties": {
                    "properties": {"type": "object", "minProperties": 1, "additionalProperties": {
                        "type": "object", "required": ["type"],
                        "properties": {"type": {"enum": ["string", "number", "integer", "boolean"]}}}}}},
                "timeout": r("StepTimeout"),
            },
            "required": ["extract", "schema"],
            "additionalProperties": false,
        }),
        step(
            "screenshot",
            json!({"anyOf": [
                {"type": "null"},
                screenshot_name.clone(),
                {"type": "object", "properties": {"name": nullable(screenshot_name)},
                 "additionalProperties": false},
            ]}),
        ),
        step("act", instruction()),
        step("observe", instruction()),
    ];
    let mut one_of = vec![json!({"const": "screenshot"})];
    one_of.extend(actions);
    vec![(
        "Step".to_owned(),
        json!({"description": "One step: a mapping with one action (and a timeout), or `screenshot` alone.",
               "oneOf": one_of}),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::JobSpec;

    /// The spec's JSON Schema on its own.
    fn root() -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$defs": components("#/$defs/"),
            "$ref": format!("#/$defs/{JOB_SPEC}"),
        })
    }

    fn validator() -> jsonschema::Validator {
        jsonschema::options()
            .should_validate_formats(true)
            .build(&root())
            .unwrap()
    }

    /// A spec with every member of every mapping given.
    fn full() -> Value {
        json!({
            "name": "every field",
            "searches": {"queries": ["laptops"], "geos": ["us", "de"], "engine": "bing", "follow_top": 2},
            "pages": {"urls": ["https://shop.example/p/1"], "geos": ["jp"]},
            "research": {"question": "what?", "geo": "fr", "max_subagents": 2,
                "max_tool_calls_per_agent": 3, "model": "claude", "max_tokens": 512,
                "report": false, "tool_search": "server", "code_execution": "off"},
            "browse": {
                "urls": ["https://portal.example/login"], "geos": ["us"], "step_timeout": "5s",
                "model": "claude", "max_tokens": 1024,
                "steps": [
                    {"goto": "https://portal.example/a", "timeout": 3},
                    {"fill": {"selector": "#user", "value": "ops"}},
                    {"fill": {"selector": "#pw", "secret": "portal_pw"}},
                    {"click": "button"},
                    {"click": {"selector": "a.go"}},
                    {"select": {"selector": "#size", "value": "512 GB"}},
                    {"wait_for": "table"},
                    {"wait_for": {"text": "Orders", "timeout": "20s"}},
                    {"scroll": {"times": 3}},
                    {"scroll": {"until": ".row"}},
                    {"extract": {"rows": "tr", "next": "a.next", "max_pages": 5,
                                 "fields": {"id": {"css": ".id", "attr": "data-id", "type": "integer"}}}},
                    {"extract": "the price", "schema": {"type": "object", "properties": {"price": {"type": "number"}}}},
                    "screenshot",
                    {"screenshot": "after"},
                    {"screenshot": {"name": "end"}},
                    {"act": "choose the 512 GB option"},
                    {"observe": "the buttons"},
                ],
            },
            "extract": {"fields": {
                "name": {"jsonld": "name"},
                "price": {"jsonld": "offers.price", "type": "number"},
                "title": {"css": "h1"},
                "link": {"css": "a.buy", "attr": "href"},
                "sku": {"regex": "SKU: ([A-Z0-9-]+)"},
            }},
            "schema": {"type": "object"},
            "cache": {"max_age": "24h"},
            "retries": {"max_attempts": 3},
            "budget": {"max_usd": 5.0, "approve_above_usd": 1.0},
            "retention": "7d",
        })
    }

    /// Every mapping of the spec with the schema that describes it and the
    /// members the checker knows there.
    fn mappings() -> Vec<(&'static str, Value, &'static [&'static str])> {
        let c = components("#/$defs/");
        let unwrap_nullable = |v: &Value| -> Value {
            v.get("anyOf")
                .and_then(|a| a.get(0))
                .cloned()
                .unwrap_or_else(|| v.clone())
        };
        let job = &c[JOB_SPEC];
        let step_bodies = |action: &str| -> Value {
            c["Step"]["oneOf"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["properties"].get(action).is_some() && s["required"][0] == action)
                .map(|s| s["properties"][action].clone())
                .unwrap()
        };
        let object_in = |v: Value| -> Value {
            match v.get("anyOf") {
                Some(a) => a
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|s| s["type"] == "object")
                    .cloned()
                    .unwrap(),
                None => v,
            }
        };
        vec![
            ("JobSpec", job.clone(), fields::JOB),
            (
                "cache",
                unwrap_nullable(&job["properties"]["cache"]),
                fields::CACHE,
            ),
            (
                "retries",
                unwrap_nullable(&job["properties"]["retries"]),
                fields::RETRIES,
            ),
            (
                "budget",
                unwrap_nullable(&job["properties"]["budget"]),
                fields::BUDGET,
            ),
            ("Searches", c["Searches"].clone(), fields::SEARCHES),
            ("Pages", c["Pages"].clone(), fields::PAGES),
            ("Research", c["Research"].clone(), fields::RESEARCH),
            ("Extract", c["Extract"].clone(), fields::EXTRACT),
            ("Field", c["Field"].clone(), fields::FIELD),
            ("Browse", c["Browse"].clone(), fields::BROWSE),
            ("fill", step_bodies("fill"), fields::FILL),
            ("select", step_bodies("select"), fields::SELECT),
            (
                "wait_for",
                object_in(step_bodies("wait_for")),
                fields::WAIT_FOR,
            ),
            ("scroll", step_bodies("scroll"), fields::SCROLL),
            ("extract step", step_bodies("extract"), fields::ROWS_EXTRACT),
            ("click", object_in(step_bodies("click")), fields::SELECTOR),
        ]
    }

    #[test]
    fn every_member_the_checker_knows_is_in_the_schema_and_no_other() {
        for (name, schema, known) in mappings() {
            let mut props: Vec<&str> = schema["properties"]
                .as_object()
                .unwrap_or_else(|| panic!("{name}: {schema}"))
                .keys()
                .map(String::as_str)
                .collect();
            props.sort_unstable();
            let mut known = known.to_vec();
            known.sort_unstable();
            assert_eq!(props, known, "{name}");
            assert_eq!(schema["additionalProperties"], false, "{name}");
        }
    }

    #[test]
    fn a_spec_with_every_field_is_valid_for_both() {
        let doc = full();
        let v = validator();
        let errors: Vec<String> = v.iter_errors(&doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:?}");
        JobSpec::from_value(doc.clone()).unwrap();
        // And every member of every mapping is in it.
        let job = doc.as_object().unwrap();
        for k in fields::JOB {
            assert!(job.contains_key(*k), "{k}");
        }
    }

    /// Each required member is required by both; each optional one may be left
    /// out, or null, for both.
    #[test]
    fn required_members_are_required_by_both() {
        let v = validator();
        // (where, member, required): the paths are JSON pointers into full().
        let cases: &[(&str, &str, bool)] = &[
            ("", "name", true),
            ("", "schema", false),
            ("", "cache", false),
            ("", "retries", false),
            ("", "budget", false),
            ("", "retention", false),
            ("", "research", false),
            ("/searches", "queries", true),
            ("/searches", "geos", true),
            ("/searches", "engine", false),
            ("/pages", "urls", true),
            ("/pages", "geos", true),
            ("/research", "question", true),
            ("/research", "geo", false),
            ("/research", "model", false),
            ("/research", "report", false),
            ("/research", "max_tokens", false),
            ("/browse", "urls", true),
            ("/browse", "geos", true),
            ("/browse", "steps", true),
            ("/browse", "step_timeout", false),
            ("/browse", "model", false),
            ("/extract", "fields", true),
            ("/extract/fields/price", "type", false),
            ("/browse/steps/10/extract", "fields", true),
            ("/browse/steps/10/extract", "rows", false),
            ("/browse/steps/10/extract", "max_pages", false),
            ("/browse/steps/5/select", "value", true),
            ("/browse/steps/5/select", "selector", true),
            ("/browse/steps/1/fill", "selector", true),
            ("/cache", "max_age", false),
            ("/budget", "max_usd", false),
        ];
        for (at, member, required) in cases {
            let mut doc = full();
            let parent = doc.pointer_mut(at).unwrap().as_object_mut().unwrap();
            assert!(parent.remove(*member).is_some(), "{at}/{member}");
            assert_eq!(
                v.is_valid(&doc),
                !required,
                "schema, {at}/{member} left out"
            );
            assert_eq!(
                JobSpec::from_value(doc).is_ok(),
                !required,
                "checker, {at}/{member} left out"
            );
            if !required {
                let mut doc = full();
                doc.pointer_mut(at).unwrap()[*member] = Value::Null;
                assert!(v.is_valid(&doc), "schema, {at}/{member} null");
                assert!(
                    JobSpec::from_value(doc).is_ok(),
                    "checker, {at}/{member} null"
                );
            }
        }
    }

    /// Documents the checker refuses for a reason the schema states, refused
    /// by the schema too; and the edges both accept.
    #[test]
    fn limits_are_the_checkers() {
        let v = validator();
        let with = |pointer: &str, value: Value| {
            let mut doc = full();
            let (parent, key) = pointer.rsplit_once('/').unwrap();
            match doc.pointer_mut(parent).unwrap() {
                Value::Object(m) => {
                    m.insert(key.to_owned(), value);
                }
                Value::Array(a) => a[key.parse::<usize>().unwrap()] = value,
                other => panic!("{parent}: {other}"),
            }
            doc
        };
        let cases = [
            ("/name", json!("x".repeat(MAX_NAME_CHARS)), true),
            ("/name", json!("x".repeat(MAX_NAME_CHARS + 1)), false),
            ("/name", json!("a\u{0}b"), false),
            ("/name", json!("two\nlines"), false),
            ("/name", json!("  "), false),
            ("/name", json!(""), false),
            (
                "/searches/queries/0",
                json!("q".repeat(MAX_QUERY_CHARS)),
                true,
            ),
            (
                "/searches/queries/0",
                json!("q".repeat(MAX_QUERY_CHARS + 1)),
                false,
            ),
            ("/searches/queries", json!([]), false),
            ("/searches/follow_top", json!(MAX_FOLLOW_TOP), true),
            ("/searches/follow_top", json!(MAX_FOLLOW_TOP + 1), false),
            ("/searches/follow_top", json!(-1), false),
            ("/searches/engine", json!("yahoo"), false),
            ("/searches/geos/0", json!("US"), false),
            ("/searches/geos/0", json!("xx"), false),
            ("/searches/geos", json!([]), false),
            ("/pages/urls/0", json!("ftp://a.example/"), false),
            ("/pages/urls/0", json!("HTTPS://a.example/"), true),
            (
                "/research/question",
                json!("q".repeat(MAX_QUESTION_CHARS)),
                true,
            ),
            (
                "/research/question",
                json!("q".repeat(MAX_QUESTION_CHARS + 1)),
                false,
            ),
            ("/research/max_subagents", json!(MAX_SUBAGENTS), true),
            ("/research/max_subagents", json!(MAX_SUBAGENTS + 1), false),
            ("/research/max_subagents", json!(0), false),
            (
                "/research/max_tool_calls_per_agent",
                json!(MAX_TOOL_CALLS_PER_AGENT + 1),
                false,
            ),
            ("/research/max_tokens", json!(MIN_MAX_TOKENS), true),
            ("/research/max_tokens", json!(MIN_MAX_TOKENS - 1), false),
            ("/research/max_tokens", json!(MAX_MAX_TOKENS + 1), false),
            ("/research/model", json!("m".repeat(MAX_MODEL_CHARS)), true),
            (
                "/research/model",
                json!("m".repeat(MAX_MODEL_CHARS + 1)),
                false,
            ),
            ("/research/report", json!("maybe"), false),
            ("/research/tool_search", json!("magic"), false),
            ("/research/code_execution", json!("remote"), false),
            ("/retries/max_attempts", json!(MAX_ATTEMPTS_CEILING), true),
            (
                "/retries/max_attempts",
                json!(MAX_ATTEMPTS_CEILING + 1),
                false,
            ),
            ("/retries/max_attempts", json!(0), false),
            ("/budget/max_usd", json!(0), true),
            ("/budget/max_usd", json!(-0.01), false),
            ("/budget/max_usd", json!(MAX_USD), false),
            ("/retention", json!(MIN_RETENTION.as_secs()), true),
            ("/retention", json!(MIN_RETENTION.as_secs() - 1), false),
            ("/cache/max_age", json!(0), true),
            ("/cache/max_age", json!("tomorrow"), false),
            ("/cache/max_age", json!(-5), false),
            ("/extract/fields", json!({}), false),
            ("/extract/fields", json!({"bad name": {"css": "h1"}}), false),
            ("/extract/fields/title", json!({"type": "number"}), false),
            (
                "/extract/fields/title",
                json!({"css": "h1", "regex": "(x)"}),
                false,
            ),
            (
                "/extract/fields/title",
                json!({"jsonld": "a", "attr": "href"}),
                false,
            ),
            (
                "/extract/fields/title",
                json!({"css": "h1", "colour": "red"}),
                false,
            ),
            ("/extract/fields/title/type", json!("date"), false),
            ("/browse/steps", json!([]), false),
            (
                "/browse/steps",
                json!(vec![json!("screenshot"); MAX_STEPS]),
                true,
            ),
            (
                "/browse/steps",
                json!(vec![json!("screenshot"); MAX_STEPS + 1]),
                false,
            ),
            ("/browse/steps/0", json!({"teleport": "#x"}), false),
            ("/browse/steps/0", json!({"click": "#a", "act": "b"}), false),
            (
                "/browse/steps/0",
                json!({"click": "#a", "schema": {}}),
                false,
            ),
            ("/browse/steps/0", json!({"extract": "the price"}), false),
            ("/browse/steps/0", json!({"scroll": {}}), false),
            (
                "/browse/steps/0",
                json!({"scroll": {"times": MAX_SCROLL_TIMES + 1}}),
                false,
            ),
            (
                "/browse/steps/0",
                json!({"wait_for": {"selector": "#a", "text": "b"}}),
                false,
            ),
            (
                "/browse/steps/0",
                json!({"fill": {"selector": "#a"}}),
                false,
            ),
            (
                "/browse/steps/0",
                json!({"fill": {"selector": "#a", "value": "v", "secret": "s"}}),
                false,
            ),
            (
                "/browse/steps/0",
                json!({"fill": {"selector": "#a", "secret": "not ok"}}),
                false,
            ),
            (
                "/browse/steps/0",
                json!({"screenshot": "x".repeat(MAX_SCREENSHOT_NAME + 1)}),
                false,
            ),
            (
                "/browse/steps/0",
                json!({"act": "a".repeat(MAX_INSTRUCTION_CHARS + 1)}),
                false,
            ),
            (
                "/browse/steps/0",
                json!({"act": "a".repeat(MAX_INSTRUCTION_CHARS)}),
                true,
            ),
            (
                "/browse/steps/0",
                json!({"goto": "https://a.example/", "timeout": 0}),
                false,
            ),
            (
                "/browse/steps/0",
                json!({"goto": "https://a.example/", "timeout": MAX_STEP_TIMEOUT.as_secs() + 1}),
                false,
            ),
            (
                "/browse/steps/0",
                json!({"goto": "https://a.example/", "timeout": MAX_STEP_TIMEOUT.as_secs()}),
                true,
            ),
            ("/browse/steps/0", json!(5), false),
            ("/browse/max_tokens", json!(MAX_MAX_TOKENS + 1), false),
            ("/colour", json!("red"), false),
        ];
        for (pointer, value, ok) in cases {
            let doc = with(pointer, value.clone());
            let short = value.to_string().chars().take(40).collect::<String>();
            assert_eq!(v.is_valid(&doc), ok, "schema: {pointer} = {short}");
            assert_eq!(
                JobSpec::from_value(doc).is_ok(),
                ok,
                "checker: {pointer} = {short}"
            );
        }
    }

    #[test]
    fn whole_job_rules_are_in_the_schema() {
        let v = validator();
        let only = |doc: Value| (v.is_valid(&doc), JobSpec::from_value(doc).is_ok());
        // No slices at all.
        assert_eq!(only(json!({"name": "x"})), (false, false));
        assert_eq!(only(json!({"name": "x", "searches": null})), (false, false));
        // Pages need extract; searches need it only when they follow results.
        let pages = json!({"urls": ["https://a.example/"], "geos": ["us"]});
        assert_eq!(only(json!({"name": "x", "pages": pages})), (false, false));
        assert_eq!(
            only(json!({"name": "x", "pages": pages, "extract": {"fields": {"t": {"css": "h1"}}}})),
            (true, true)
        );
        let searches = |n: u64| json!({"queries": ["a"], "geos": ["us"], "follow_top": n});
        assert_eq!(
            only(json!({"name": "x", "searches": searches(0)})),
            (true, true)
        );
        assert_eq!(
            only(json!({"name": "x", "searches": searches(1)})),
            (false, false)
        );
        assert_eq!(
            only(json!({"name": "x", "research": {"question": "q"}})),
            (true, true)
        );
    }
}
