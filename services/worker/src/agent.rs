//! The sub-agent of a deterministic slice: a search or page slice's plan is
//! written down, so it runs without a model ([`crate::research`] runs the
//! model-driven kinds through the same tool layer).

use serde_json::{Value, json};
use trawl_core::model::{Item, ItemKind, Rejection, SliceKind, SliceOutcome, SliceSpec};
use trawl_core::plan::follow_ups;
use trawl_core::ports::ToolError;
use trawl_tools::{Recorder, ToolLayer};

use crate::JobContext;

/// Tool names this agent uses (the Bright Data provider's).
const SEARCH: &str = "brightdata.web_search";
const FETCH: &str = "brightdata.fetch_page";

/// Runs a slice to its outcome. Never fails: a failed tool call becomes the
/// slice's error, with the trace of every attempt. The second value says whether
/// that error was transient (a later attempt may succeed).
pub async fn run_slice(
    job: &JobContext,
    tools: &ToolLayer,
    slice: &SliceSpec,
) -> (SliceOutcome, bool) {
    let rec = Recorder::new(job.id.clone(), slice.id.clone());
    let opts = crate::research::opts(job);
    let mut out = SliceOutcome::default();
    let result = match &slice.kind {
        SliceKind::Search {
            query, geo, engine, ..
        } => {
            let args = json!({"query": query, "geo": geo, "engine": engine});
            match tools.call(SEARCH, &args, &opts, &rec).await {
                Ok(body) => search_items(slice, query, engine.as_str(), &body, &mut out),
                Err(e) => Err(e),
            }
        }
        SliceKind::Page { url, geo } => {
            let args = json!({"url": url, "geo": geo, "format": "raw"});
            match tools.call(FETCH, &args, &opts, &rec).await {
                Ok(body) => {
                    page_item(job, slice, url, &body, &mut out);
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
        other => Err(ToolError::permanent(
            "internal",
            format!(
                "a {} slice needs a model (research::run_slice)",
                other.name()
            ),
        )),
    };
    let mut transient = false;
    if let Err(e) = result {
        transient = e.is_transient();
        out.error = Some(e.to_slice_error());
    }
    let records = rec.finish();
    (out.trace, out.costs, out.audit) = (records.trace, records.costs, records.audit);
    (out, transient)
}

/// One `serp` item per organic row, and page slices for the top results.
fn search_items(
    slice: &SliceSpec,
    query: &str,
    engine: &str,
    body: &[u8],
    out: &mut SliceOutcome,
) -> Result<(), ToolError> {
    let page: Value = serde_json::from_slice(body).map_err(|e| {
        ToolError::permanent(
            "bad_serp_json",
            format!("cached SERP answer unreadable: {e}"),
        )
    })?;
    let rows = page
        .get("organic")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let geo = slice.kind.geo();
    let mut links = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let link = row
            .get("link")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        links.push(link.clone());
        out.items.push(Item {
            slice_id: slice.id.clone(),
            seq: i as u32,
            kind: ItemKind::Serp,
            url: link.clone(),
            geo,
            data: json!({
                "query": query,
                "engine": engine,
                "rank": row.get("rank"),
                "title": row.get("title"),
                "link": link,
                "description": row.get("description"),
            }),
        });
    }
    out.children = follow_ups(slice, links.iter().map(String::as_str));
    Ok(())
}

/// The page's one item, valid or rejected with the validator's messages.
fn page_item(job: &JobContext, slice: &SliceSpec, url: &str, body: &[u8], out: &mut SliceOutcome) {
    let html = String::from_utf8_lossy(body);
    let data = match &job.extractor {
        Some(x) => x.extract(&html),
        None => json!({}),
    };
    let violations = job.validator.check(&data);
    let geo = slice.kind.geo();
    if violations.is_empty() {
        out.items.push(Item {
            slice_id: slice.id.clone(),
            seq: 0,
            kind: ItemKind::Page,
            url: url.to_owned(),
            geo,
            data,
        });
    } else {
        out.rejections.push(Rejection {
            slice_id: slice.id.clone(),
            seq: 0,
            url: url.to_owned(),
            geo,
            data,
            errors: violations,
        });
    }
}
