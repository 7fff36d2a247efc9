//! What a model submits, checked before it counts: a plan's sub-questions, a
//! sub-agent's findings (each on its own), a report's citations; and a tool
//! answer as the model is shown it.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use trawl_core::model::{
    Item, ItemKind, Rejection, SliceOutcome, SliceSpec, Violation, normalize_url,
};

use super::RESULT_CAP;

/// The plan's sub-questions, or what is wrong with it.
pub(super) fn check_plan(
    validator: &jsonschema::Validator,
    input: &Value,
) -> Result<Vec<String>, String> {
    let errors: Vec<String> = validator
        .iter_errors(input)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("{at}: {e}")
            }
        })
        .collect();
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    let mut out: Vec<String> = Vec::new();
    for q in input["sub_questions"].as_array().into_iter().flatten() {
        let q = q.as_str().unwrap_or_default().trim().to_owned();
        if out.iter().any(|o| o.eq_ignore_ascii_case(&q)) {
            return Err(format!("sub-question {q:?} is listed twice"));
        }
        out.push(q);
    }
    Ok(out)
}

/// The findings as items, each checked on its own: a finding citing a page this
/// sub-agent did not fetch is a rejection. Err: the submission itself is
/// malformed (sent back to the model to fix).
pub(super) fn findings(
    slice: &SliceSpec,
    question: &str,
    input: &Value,
    fetched: &BTreeSet<String>,
    out: &mut SliceOutcome,
) -> Result<(), String> {
    let list = input
        .get("findings")
        .and_then(Value::as_array)
        .filter(|l| !l.is_empty())
        .ok_or("findings must be a non-empty list of {claim, sources}")?;
    let geo = slice.kind.geo();
    let (mut items, mut rejections) = (Vec::new(), Vec::new());
    for (i, f) in list.iter().enumerate() {
        let claim = f.get("claim").and_then(Value::as_str).unwrap_or_default();
        let given: Vec<&str> = f
            .get("sources")
            .and_then(Value::as_array)
            .map(|s| s.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut errors = Vec::new();
        if claim.trim().is_empty() {
            errors.push(Violation {
                path: "/claim".into(),
                message: "the claim is empty".into(),
            });
        }
        if given.is_empty() {
            errors.push(Violation {
                path: "/sources".into(),
                message: "the finding cites no page".into(),
            });
        }
        let mut sources = Vec::new();
        for (j, s) in given.iter().enumerate() {
            match normalize_url(s) {
                Ok(u) if fetched.contains(&u) => sources.push(u),
                Ok(u) => errors.push(Violation {
                    path: format!("/sources/{j}"),
                    message: format!("{u} was not fetched by this sub-agent"),
                }),
                Err(e) => errors.push(Violation {
                    path: format!("/sources/{j}"),
                    message: e,
                }),
            }
        }
        let data = json!({"question": question, "claim": claim, "sources": if errors.is_empty() { json!(sources) } else { json!(given) }});
        let url = sources.first().cloned().unwrap_or_default();
        if errors.is_empty() {
            items.push(Item {
                slice_id: slice.id.clone(),
                seq: i as u32,
                kind: ItemKind::Finding,
                url,
                geo,
                data,
            });
        } else {
            rejections.push(Rejection {
                slice_id: slice.id.clone(),
                seq: i as u32,
                url,
                geo,
                data,
                errors,
            });
        }
    }
    out.items = items;
    out.rejections = rejections;
    Ok(())
}

/// A report may cite `[1]`..`[n]` and no URL at all (the list is appended).
pub(super) fn check_report(text: &str, n: usize) -> Result<(), String> {
    if text.trim().is_empty() {
        return Err("the report is empty".into());
    }
    if let Some(at) = text.find("http://").or_else(|| text.find("https://")) {
        let url: String = text[at..]
            .chars()
            .take_while(|c| !c.is_whitespace() && !matches!(c, ')' | '>' | ']'))
            .collect();
        return Err(format!(
            "it writes the URL {url}; cite sources only by their numbers"
        ));
    }
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(open) = text[i..].find('[') {
        let start = i + open + 1;
        let digits: String = text[start..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let end = start + digits.len();
        if !digits.is_empty() && bytes.get(end) == Some(&b']') {
            let k: usize = digits.parse().unwrap_or(0);
            if k == 0 || k > n {
                return Err(format!("it cites [{k}], but the sources are [1] to [{n}]"));
            }
        }
        i = start;
    }
    Ok(())
}

/// A tool's answer as the model reads it.
pub(super) fn render(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(super) fn cap(text: &str) -> String {
    if text.len() <= RESULT_CAP {
        return text.to_owned();
    }
    let mut end = RESULT_CAP;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[cut: {} of {} bytes shown]",
        &text[..end],
        end,
        text.len()
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::json;
    use trawl_core::model::{SliceKind, SliceOutcome, SliceSpec};

    use super::*;

    #[test]
    fn plans_are_checked() {
        let schema = json!({"type": "object", "required": ["sub_questions"], "properties": {"sub_questions": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string"}}}});
        let v = jsonschema::validator_for(&schema).unwrap();
        assert_eq!(
            check_plan(&v, &json!({"sub_questions": ["a b c", "d e f"]})).unwrap(),
            ["a b c", "d e f"]
        );
        assert!(check_plan(&v, &json!({"sub_questions": []})).is_err());
        assert!(check_plan(&v, &json!({"sub_questions": ["a", "b", "c"]})).is_err());
        assert!(
            check_plan(&v, &json!({"sub_questions": ["Same q", "same Q"]}))
                .unwrap_err()
                .contains("twice")
        );
        assert!(check_plan(&v, &json!({"plan": "x"})).is_err());
    }

    #[test]
    fn reports_cite_only_numbered_sources() {
        assert!(check_report("Shop A is cheapest [1], B returns in 30 days [2].", 2).is_ok());
        assert!(
            check_report("See [3].", 2)
                .unwrap_err()
                .contains("[1] to [2]")
        );
        assert!(
            check_report("See https://evil.example/x for more.", 2)
                .unwrap_err()
                .contains("https://evil.example/x")
        );
        assert!(check_report("  ", 2).is_err());
        // Brackets that are not citations are fine.
        assert!(check_report("a [note] and [1]", 1).is_ok());
    }

    #[test]
    fn findings_citing_unfetched_pages_are_rejected_one_by_one() {
        let slice = SliceSpec::new(
            SliceKind::Agent {
                question: "q".into(),
                index: 0,
                geo: trawl_core::geo::Geo::parse("de").unwrap(),
            },
            None,
        );
        let fetched: BTreeSet<String> = ["https://a.example/p".to_owned()].into();
        let mut out = SliceOutcome::default();
        findings(
            &slice,
            "q",
            &json!({"findings": [
                {"claim": "A sells it for 1,449 EUR", "sources": ["https://A.example/p#price"]},
                {"claim": "B sells it for 1,399 EUR", "sources": ["https://b.example/p"]}
            ]}),
            &fetched,
            &mut out,
        )
        .unwrap();
        assert_eq!(out.items.len(), 1);
        assert_eq!(out.items[0].data["sources"], json!(["https://a.example/p"]));
        assert_eq!(out.rejections.len(), 1);
        assert_eq!(out.rejections[0].seq, 1);
        assert!(out.rejections[0].errors[0].message.contains("not fetched"));
        let mut out = SliceOutcome::default();
        assert!(findings(&slice, "q", &json!({"findings": []}), &fetched, &mut out).is_err());
    }
}
