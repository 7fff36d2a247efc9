//! A fetched page turned into an item.
//!
//! Three sources: a dotted path into the page's schema.org JSON-LD, a CSS selector
//! (text content, or an attribute), and a regular expression's first capture group
//! over the raw page. A field that is not found is left out of the item, so the
//! job's schema decides whether that is acceptable. A value that does not convert
//! to the field's type is kept as found, so the schema's message names it.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;
use scraper::{Html, Selector};
use serde_json::{Map, Number, Value};

use crate::spec::ExtractSpec;

/// Where a field's value comes from.
#[derive(Clone, Debug)]
pub enum Source {
    JsonLd(Vec<String>),
    Css {
        selector: Box<Selector>,
        attr: Option<String>,
    },
    Regex(Regex),
}

impl Source {
    /// Compiles a source of the given kind (`jsonld`, `css` or `regex`).
    pub fn compile(kind: &str, raw: &str, attr: Option<&str>) -> Result<Source, String> {
        match kind {
            "jsonld" => {
                let segs: Vec<String> = raw.split('.').map(str::trim).map(str::to_owned).collect();
                if segs.iter().any(String::is_empty) {
                    return Err(format!(
                        "\"{raw}\" is not a JSON-LD path: expected names joined by dots, e.g. offers.price"
                    ));
                }
                Ok(Source::JsonLd(segs))
            }
            "css" => {
                let selector = Selector::parse(raw)
                    .map_err(|e| format!("\"{raw}\" is not a CSS selector: {e}"))?;
                Ok(Source::Css {
                    selector: Box::new(selector),
                    attr: attr.map(str::to_owned),
                })
            }
            "regex" => {
                let re = Regex::new(raw).map_err(|e| format!("not a regular expression: {e}"))?;
                if re.captures_len() < 2 {
                    return Err(format!(
                        "\"{raw}\" has no capture group: the first group is the value"
                    ));
                }
                Ok(Source::Regex(re))
            }
            other => Err(format!("unknown source {other}")),
        }
    }
}

/// The JSON type a field is converted to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldType {
    String,
    Number,
    Integer,
    Boolean,
}

impl FieldType {
    pub fn parse(s: &str) -> Option<FieldType> {
        Some(match s {
            "string" => FieldType::String,
            "number" => FieldType::Number,
            "integer" => FieldType::Integer,
            "boolean" => FieldType::Boolean,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug)]
pub struct FieldSpec {
    pub source: Source,
    pub ty: FieldType,
}

/// Turns pages into items for one job.
pub struct Extractor {
    fields: BTreeMap<String, FieldSpec>,
    needs_dom: bool,
    needs_jsonld: bool,
}

static JSONLD: LazyLock<Regex> = LazyLock::new(|| {
    // A constant pattern: a failure here is a programming error caught by every test.
    #[allow(clippy::expect_used)]
    Regex::new(
        r#"(?is)<script\b[^>]*\btype\s*=\s*["']?application/ld\+json["']?[^>]*>(.*?)</script\s*>"#,
    )
    .expect("valid JSON-LD pattern")
});

impl Extractor {
    pub fn new(spec: &ExtractSpec) -> Extractor {
        let needs_dom = spec
            .fields
            .values()
            .any(|f| matches!(f.source, Source::Css { .. }));
        let needs_jsonld = spec
            .fields
            .values()
            .any(|f| matches!(f.source, Source::JsonLd(_)));
        Extractor {
            fields: spec.fields.clone(),
            needs_dom,
            needs_jsonld,
        }
    }

    /// The item a page yields: an object with the fields that were found.
    pub fn extract(&self, page: &str) -> Value {
        let dom = self.needs_dom.then(|| Html::parse_document(page));
        let ld = if self.needs_jsonld {
            jsonld_nodes(page)
        } else {
            Vec::new()
        };
        let mut out = Map::new();
        for (name, f) in &self.fields {
            let found = match &f.source {
                Source::JsonLd(path) => ld.iter().find_map(|n| resolve(n, path)).cloned(),
                Source::Css { selector, attr } => dom
                    .as_ref()
                    .and_then(|d| css_value(d.select(selector).next()?, attr.as_deref())),
                Source::Regex(re) => re
                    .captures(page)
                    .and_then(|c| c.get(1))
                    .map(|m| Value::String(m.as_str().to_owned())),
            };
            if let Some(v) = found {
                out.insert(name.clone(), convert(v, f.ty));
            }
        }
        Value::Object(out)
    }
}

impl Extractor {
    /// One item per element `rows` matches: CSS fields are looked for inside the
    /// row, regular expressions over the row's HTML, JSON-LD paths over the page.
    pub fn extract_rows(&self, page: &str, rows: &str) -> Result<Vec<Value>, String> {
        let rows =
            Selector::parse(rows).map_err(|e| format!("\"{rows}\" is not a CSS selector: {e}"))?;
        let dom = Html::parse_document(page);
        let ld = if self.needs_jsonld {
            jsonld_nodes(page)
        } else {
            Vec::new()
        };
        let mut items = Vec::new();
        for row in dom.select(&rows) {
            let html = self
                .fields
                .values()
                .any(|f| matches!(f.source, Source::Regex(_)))
                .then(|| row.html());
            let mut out = Map::new();
            for (name, f) in &self.fields {
                let found = match &f.source {
                    Source::JsonLd(path) => ld.iter().find_map(|n| resolve(n, path)).cloned(),
                    Source::Css { selector, attr } => row
                        .select(selector)
                        .next()
                        .and_then(|el| css_value(el, attr.as_deref())),
                    Source::Regex(re) => html
                        .as_deref()
                        .and_then(|h| re.captures(h))
                        .and_then(|c| c.get(1))
                        .map(|m| Value::String(m.as_str().to_owned())),
                };
                if let Some(v) = found {
                    out.insert(name.clone(), convert(v, f.ty));
                }
            }
            items.push(Value::Object(out));
        }
        Ok(items)
    }
}

/// A CSS source's value: the attribute, or the element's text with whitespace
/// collapsed (`None` when empty).
fn css_value(el: scraper::ElementRef<'_>, attr: Option<&str>) -> Option<Value> {
    match attr {
        Some(a) => el
            .value()
            .attr(a)
            .map(|s| Value::String(s.trim().to_owned())),
        None => {
            let text = el.text().collect::<Vec<_>>().join(" ");
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            (!text.is_empty()).then_some(Value::String(text))
        }
    }
}

/// Every JSON-LD node of a page: top-level objects, members of top-level lists and
/// of `@graph`. Blocks that are not valid JSON are skipped.
fn jsonld_nodes(page: &str) -> Vec<Value> {
    let mut nodes = Vec::new();
    for cap in JSONLD.captures_iter(page) {
        let Some(body) = cap.get(1) else { continue };
        let Ok(v) = serde_json::from_str::<Value>(body.as_str().trim()) else {
            continue;
        };
        push_nodes(v, &mut nodes);
    }
    nodes
}

fn push_nodes(v: Value, nodes: &mut Vec<Value>) {
    match v {
        Value::Array(items) => items.into_iter().for_each(|i| push_nodes(i, nodes)),
        Value::Object(mut m) => {
            let graph = m.remove("@graph");
            nodes.push(Value::Object(m));
            if let Some(g) = graph {
                push_nodes(g, nodes);
            }
        }
        _ => {}
    }
}

/// Follows a dotted path; a list on the way stands for its first element.
fn resolve<'a>(node: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = node;
    for seg in path {
        cur = first(cur).get(seg)?;
    }
    let v = first(cur);
    (!v.is_null()).then_some(v)
}

fn first(v: &Value) -> &Value {
    match v {
        Value::Array(a) => a.first().unwrap_or(&Value::Null),
        other => other,
    }
}

fn convert(v: Value, ty: FieldType) -> Value {
    match (ty, v) {
        (FieldType::String, Value::String(s)) => Value::String(s.trim().to_owned()),
        (FieldType::String, v @ (Value::Number(_) | Value::Bool(_))) => {
            Value::String(v.to_string())
        }
        (FieldType::Number, Value::String(s)) => parse_number(&s)
            .and_then(Number::from_f64)
            .map_or(Value::String(s), Value::Number),
        (FieldType::Integer, Value::String(s)) => match parse_number(&s) {
            Some(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => Value::from(x as i64),
            _ => Value::String(s),
        },
        (FieldType::Integer, Value::Number(n)) => match n.as_f64() {
            Some(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => Value::from(x as i64),
            _ => Value::Number(n),
        },
        (FieldType::Boolean, Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "1" | "instock" | "https://schema.org/instock" => Value::Bool(true),
            "false" | "no" | "0" | "outofstock" | "https://schema.org/outofstock" => {
                Value::Bool(false)
            }
            _ => Value::String(s),
        },
        (_, v) => v,
    }
}

/// Reads a number as shops write it: `1299`, `1,299.00`, `1.299,00`, `$ 12.50`.
fn parse_number(s: &str) -> Option<f64> {
    let t = s.trim();
    if let Ok(x) = t.parse::<f64>() {
        return x.is_finite().then_some(x);
    }
    let kept: String = t
        .chars()
        .filter(|c| c.is_ascii_digit() || matches!(c, '.' | ',' | '-'))
        .collect();
    if !kept.chars().any(|c| c.is_ascii_digit()) {
        return None;
    }
    let normalized = match (kept.rfind('.'), kept.rfind(',')) {
        (Some(d), Some(c)) if c > d => kept.replace('.', "").replace(',', "."),
        (Some(_), Some(_)) => kept.replace(',', ""),
        (None, Some(c)) if kept.len() - c - 1 != 3 => kept.replace(',', "."),
        (None, Some(_)) => kept.replace(',', ""),
        _ => kept,
    };
    normalized.parse::<f64>().ok().filter(|x| x.is_finite())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::spec::JobSpec;

    fn extractor(fields: &str) -> Extractor {
        let spec = JobSpec::parse(&format!(
            "name: t\npages: {{urls: [\"https://a.example/\"], geos: [us]}}\nextract: {{fields: {fields}}}\n"
        ))
        .unwrap();
        Extractor::new(spec.extract.as_ref().unwrap())
    }

    const PAGE: &str = r#"<html><head><title>T</title>
<script type="application/ld+json">{"@context":"https://schema.org","@graph":[
  {"@type":"BreadcrumbList"},
  {"@type":"Product","name":"Aero 14","sku":"AR-14",
   "offers":[{"@type":"Offer","price":"1,299.00","priceCurrency":"EUR","availability":"https://schema.org/InStock"}]}]}
</script>
<script type="application/ld+json">{ not json </script>
</head><body><h1>  Aero
  14 laptop </h1><a class="buy" href="/cart?id=1">Buy</a><p>SKU: AR-14-X</p><span class="n">42 units</span></body></html>"#;

    #[test]
    fn all_three_sources_and_type_conversion() {
        let e = extractor(
            "{name: {jsonld: name}, price: {jsonld: offers.price, type: number}, currency: {jsonld: offers.priceCurrency}, \
             stock: {jsonld: offers.availability, type: boolean}, title: {css: h1}, buy: {css: a.buy, attr: href}, \
             sku: {regex: \"SKU: ([A-Z0-9-]+)\"}, units: {css: span.n, type: integer}}",
        );
        assert_eq!(
            e.extract(PAGE),
            json!({"name": "Aero 14", "price": 1299.0, "currency": "EUR", "stock": true,
                   "title": "Aero 14 laptop", "buy": "/cart?id=1", "sku": "AR-14-X", "units": 42})
        );
    }

    #[test]
    fn missing_fields_are_left_out() {
        let e = extractor(
            "{name: {jsonld: name}, gtin: {jsonld: gtin13}, h2: {css: h2}, x: {regex: \"X=(\\\\d+)\"}}",
        );
        assert_eq!(e.extract(PAGE), json!({"name": "Aero 14"}));
        assert_eq!(e.extract("<html>nothing</html>"), json!({}));
    }

    #[test]
    fn numbers_as_shops_write_them() {
        assert_eq!(parse_number("1299"), Some(1299.0));
        assert_eq!(parse_number("1,299.00"), Some(1299.0));
        assert_eq!(parse_number("1.299,00"), Some(1299.0));
        assert_eq!(parse_number("$ 12.50"), Some(12.5));
        assert_eq!(parse_number("12,5"), Some(12.5));
        assert_eq!(parse_number("1,299"), Some(1299.0));
        assert_eq!(parse_number("12,50"), Some(12.5));
        assert_eq!(parse_number("n/a"), None);
    }
}
