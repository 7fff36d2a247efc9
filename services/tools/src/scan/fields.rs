//! The text fields of a tool definition the scanner reads: name, title,
//! description, and the schemas' descriptions, titles, defaults and examples,
//! each with the path findings name.

use super::*;

pub(super) struct TextField<'a> {
    /// The path findings name: `inputSchema.properties.q.description`.
    pub(super) field: String,
    /// RFC 6901 pointer to the same string, for [`strip_definition`].
    pub(super) pointer: String,
    pub(super) text: &'a str,
    /// When the string is (part of) a value the model may send rather than
    /// prose about one (an `enum` or `examples` item, a `default`, a `const`,
    /// an input example): the pointer of that whole value, which
    /// [`strip_definition`] removes rather than edits.
    pub(super) value: Option<String>,
}

fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Every text of a definition the model is shown, with the field path findings
/// name (the same fields [`scan_definition`] reads).
pub fn definition_texts(def: &Value) -> Vec<(String, &str)> {
    text_fields(def)
        .into_iter()
        .map(|f| (f.field, f.text))
        .collect()
}

/// A finding's excerpt of `s`: invisible and control characters escaped, cut
/// to about 80 chars.
pub fn excerpt_of(s: &str) -> String {
    excerpt(s)
}

pub(super) fn text_fields(def: &Value) -> Vec<TextField<'_>> {
    let mut out = Vec::new();
    for key in ["description", "title"] {
        if let Some(text) = def.get(key).and_then(Value::as_str) {
            out.push(TextField {
                field: key.to_owned(),
                pointer: format!("/{key}"),
                text,
                value: None,
            });
        }
    }
    for key in ["inputSchema", "outputSchema"] {
        if let Some(schema) = def.get(key) {
            schema_fields(schema, key.to_owned(), format!("/{key}"), &mut out);
        }
    }
    if let Some(text) = def.pointer("/annotations/title").and_then(Value::as_str) {
        out.push(TextField {
            field: "annotations.title".to_owned(),
            pointer: "/annotations/title".to_owned(),
            text,
            value: None,
        });
    }
    if let Some(examples) = def.get("input_examples").and_then(Value::as_array) {
        for (i, example) in examples.iter().enumerate() {
            let pointer = format!("/input_examples/{i}");
            all_strings(
                example,
                format!("input_examples[{i}]"),
                pointer.clone(),
                &pointer,
                &mut out,
            );
        }
    }
    out
}

/// Keys of a JSON schema whose string values the model reads.
fn is_schema_text_key(key: &str) -> bool {
    matches!(key, "description" | "title")
}

/// Keys of a JSON schema whose strings (or arrays of strings) are values shown to the
/// model as choices or examples.
fn is_schema_value_key(key: &str) -> bool {
    matches!(key, "enum" | "const" | "default" | "examples")
}

fn schema_fields<'a>(v: &'a Value, field: String, pointer: String, out: &mut Vec<TextField<'a>>) {
    match v {
        Value::Object(map) => {
            for (key, value) in map {
                let f = format!("{field}.{key}");
                let p = format!("{pointer}/{}", pointer_token(key));
                match value {
                    Value::String(text) if is_schema_text_key(key) || is_schema_value_key(key) => {
                        out.push(TextField {
                            field: f,
                            value: is_schema_value_key(key).then(|| p.clone()),
                            pointer: p,
                            text,
                        });
                    }
                    // An object given as a value (`"default": {"url": …}`), not
                    // a property of that name.
                    Value::Object(_)
                        if is_schema_value_key(key) && !field.ends_with(".properties") =>
                    {
                        all_strings(value, f, p.clone(), &p, out);
                    }
                    Value::Array(items) if is_schema_value_key(key) => {
                        for (i, item) in items.iter().enumerate() {
                            let p = format!("{p}/{i}");
                            all_strings(item, format!("{f}[{i}]"), p.clone(), &p, out);
                        }
                    }
                    _ => schema_fields(value, f, p, out),
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                schema_fields(item, format!("{field}[{i}]"), format!("{pointer}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Every string of the value at `root`, each naming `root` as its value.
fn all_strings<'a>(
    v: &'a Value,
    field: String,
    pointer: String,
    root: &str,
    out: &mut Vec<TextField<'a>>,
) {
    match v {
        Value::String(text) => out.push(TextField {
            field,
            pointer,
            text,
            value: Some(root.to_owned()),
        }),
        Value::Object(map) => {
            for (key, value) in map {
                all_strings(
                    value,
                    format!("{field}.{key}"),
                    format!("{pointer}/{}", pointer_token(key)),
                    root,
                    out,
                );
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                all_strings(
                    item,
                    format!("{field}[{i}]"),
                    format!("{pointer}/{i}"),
                    root,
                    out,
                );
            }
        }
        _ => {}
    }
}
