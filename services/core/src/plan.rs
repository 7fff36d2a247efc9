//! A spec turned into slices and a cost estimate. Pure: the same spec always gives
//! the same slices with the same ids, in the same order.

use serde::Serialize;

use crate::cost::{Micros, PriceTable};
use crate::geo::Geo;
use crate::model::{SliceKind, SliceSpec, normalize_url};
use crate::spec::{JobSpec, Research};

/// What a job will do.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The slices known before anything runs; searches may add page slices later.
    pub slices: Vec<SliceSpec>,
    pub estimate: Estimate,
}

/// The most a job can cost if every call goes upstream (no cache hits) and every
/// search yields its full `follow_top`. Failed calls cost nothing, so retries do not
/// add to it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Estimate {
    pub search_slices: u64,
    pub page_slices: u64,
    pub followed_pages_max: u64,
    pub cost: Micros,
}

/// The traffic a browser session is estimated at: a few pages of a modern site.
pub const BROWSE_ESTIMATE_BYTES: u64 = 5_000_000;

/// The job's slices and its estimate, the slices in memory: for specs known to be
/// small (the CLI's `plan`, tests). Planners of any size take [`slices`].
pub fn plan(spec: &JobSpec, prices: &PriceTable) -> Plan {
    Plan {
        slices: slices(spec).collect(),
        estimate: estimate(spec, prices),
    }
}

/// The slices known before anything runs, one at a time, so that a plan of a
/// million slices never has to be held at once: searches, pages, the research
/// question, browser sessions, each by its items then its geos.
pub fn slices(spec: &JobSpec) -> impl Iterator<Item = SliceSpec> + Send + '_ {
    let searches = spec.searches.iter().flat_map(|s| {
        each_in(&s.queries, &s.geos, move |query, geo| SliceKind::Search {
            query: query.clone(),
            geo,
            engine: s.engine,
            follow_top: s.follow_top,
        })
    });
    let pages = spec.pages.iter().flat_map(|p| {
        each_in(&p.urls, &p.geos, |url, geo| SliceKind::Page {
            url: url.clone(),
            geo,
        })
    });
    let research = spec
        .research
        .iter()
        .map(|r| SliceSpec::new(research_slice(r), None));
    let browse = spec.browse.iter().flat_map(|b| {
        each_in(&b.urls, &b.geos, |url, geo| SliceKind::Browse {
            url: url.clone(),
            geo,
        })
    });
    searches.chain(pages).chain(research).chain(browse)
}

/// One top-level slice per item and geo, by item then geo.
fn each_in<'a>(
    items: &'a [String],
    geos: &'a [Geo],
    kind: impl Fn(&'a String, Geo) -> SliceKind + Copy + Send + 'a,
) -> impl Iterator<Item = SliceSpec> + Send + 'a {
    items.iter().flat_map(move |item| {
        geos.iter()
            .map(move |geo| SliceSpec::new(kind(item, *geo), None))
    })
}

/// What the job may cost at most (see [`Estimate`]), from its counts alone.
pub fn estimate(spec: &JobSpec, prices: &PriceTable) -> Estimate {
    let (search_slices, page_slices) = spec.planned_slices();
    let followed_pages_max = spec.max_followed();
    // Research: every sub-agent's every tool call at the dearer of the two tools.
    // Model turns are priced by the model's price list when they happen; the job's
    // budget caps them with the rest.
    let research_calls = spec.research.as_ref().map_or(0, |r| {
        u64::from(r.max_subagents) * u64::from(r.max_tool_calls_per_agent)
    });
    // Browser sessions are billed by traffic, which is not known before they run:
    // each is estimated at BROWSE_ESTIMATE_BYTES, and the budget caps what they
    // actually spend.
    let browse_slices = spec.browse_slices();
    let cost = prices.serp.saturating_mul(search_slices)
        + prices
            .browser_bytes(BROWSE_ESTIMATE_BYTES)
            .saturating_mul(browse_slices)
        + prices
            .unlocker
            .saturating_mul(page_slices + followed_pages_max)
        + prices
            .serp
            .max(prices.unlocker)
            .saturating_mul(research_calls);
    Estimate {
        search_slices,
        page_slices,
        followed_pages_max,
        cost,
    }
}

/// The planning slice of a research question.
pub fn research_slice(r: &Research) -> SliceKind {
    SliceKind::Research {
        question: r.question.clone(),
        geo: r.geo,
    }
}

/// The report slice of a research question, added once its sub-agents are done.
pub fn report_slice(r: &Research) -> SliceSpec {
    let parent = SliceSpec::new(research_slice(r), None).id;
    SliceSpec::new(
        SliceKind::Report {
            question: r.question.clone(),
            geo: r.geo,
        },
        Some(parent),
    )
}

/// The sub-agent slices a research plan spawns, one per sub-question, in order.
pub fn sub_agents(parent: &SliceSpec, questions: &[String]) -> Vec<SliceSpec> {
    let geo = parent.kind.geo();
    let mut out: Vec<SliceSpec> = Vec::new();
    for (i, q) in questions.iter().enumerate() {
        let child = SliceSpec::new(
            SliceKind::Agent {
                question: q.clone(),
                index: i as u32,
                geo,
            },
            Some(parent.id.clone()),
        );
        if !out.iter().any(|c| c.id == child.id) {
            out.push(child);
        }
    }
    out
}

/// The page slices a finished search spawns: its first `follow_top` distinct,
/// valid http(s) links, fetched from the search's country.
pub fn follow_ups<'a>(
    parent: &SliceSpec,
    links: impl IntoIterator<Item = &'a str>,
) -> Vec<SliceSpec> {
    let SliceKind::Search {
        geo, follow_top, ..
    } = &parent.kind
    else {
        return Vec::new();
    };
    let mut out: Vec<SliceSpec> = Vec::new();
    for link in links {
        if out.len() as u64 >= u64::from(*follow_top) {
            break;
        }
        let Ok(url) = normalize_url(link) else {
            continue;
        };
        let child = SliceSpec::new(SliceKind::Page { url, geo: *geo }, Some(parent.id.clone()));
        if !out.iter().any(|c| c.id == child.id) {
            out.push(child);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = "name: t\nsearches: {queries: [a, b], geos: [us, de], follow_top: 2}\npages: {urls: [\"https://x.example/1\", \"https://x.example/2\"], geos: [jp]}\nextract: {fields: {t: {css: h1}}}\n";

    #[test]
    fn the_same_spec_yields_the_same_ids_in_the_same_order() {
        let a = plan(&JobSpec::parse(SPEC).unwrap(), &PriceTable::default());
        let b = plan(&JobSpec::parse(SPEC).unwrap(), &PriceTable::default());
        let ids = |p: &Plan| p.slices.iter().map(|s| s.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&a), ids(&b));
        assert_eq!(a.slices.len(), 6);
        let mut unique = ids(&a);
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 6, "ids are distinct");
    }

    #[test]
    fn reformatting_the_spec_keeps_the_ids() {
        let json = r#"{"name":"t","searches":{"queries":["a","b"],"geos":["us","de"],"follow_top":2},
            "pages":{"urls":["HTTPS://X.example/1#top","https://x.example/2"],"geos":["jp"]},
            "extract":{"fields":{"t":{"css":"h1"}}}}"#;
        let a = plan(&JobSpec::parse(SPEC).unwrap(), &PriceTable::default());
        let b = plan(&JobSpec::parse(json).unwrap(), &PriceTable::default());
        assert_eq!(a.slices, b.slices);
    }

    #[test]
    fn estimate_counts_followed_pages_at_their_maximum() {
        let p = plan(&JobSpec::parse(SPEC).unwrap(), &PriceTable::default());
        assert_eq!(p.estimate.search_slices, 4);
        assert_eq!(p.estimate.page_slices, 2);
        assert_eq!(p.estimate.followed_pages_max, 8);
        assert_eq!(p.estimate.cost, Micros(14 * 1_500));
    }

    #[test]
    fn follow_ups_take_the_top_distinct_valid_links() {
        let p = plan(&JobSpec::parse(SPEC).unwrap(), &PriceTable::default());
        let search = &p.slices[0];
        let kids = follow_ups(
            search,
            [
                "mailto:x@y",
                "https://s.example/a#r",
                "https://s.example/a",
                "https://s.example/b",
                "https://s.example/c",
            ],
        );
        let urls: Vec<_> = kids
            .iter()
            .map(|k| match &k.kind {
                SliceKind::Page { url, .. } => url.as_str(),
                _ => "",
            })
            .collect();
        assert_eq!(urls, ["https://s.example/a", "https://s.example/b"]);
        assert!(kids.iter().all(|k| k.parent.as_ref() == Some(&search.id)));
        assert!(kids.iter().all(|k| k.kind.geo() == search.kind.geo()));
    }

    #[test]
    fn a_research_question_plans_one_slice_and_its_sub_agents_and_report_follow() {
        let spec = JobSpec::parse(
            "name: r\nresearch: {question: \"Which EU shops sell the X1 Carbon?\", geo: de, max_subagents: 3, max_tool_calls_per_agent: 4}\n",
        )
        .unwrap();
        let prices = PriceTable::default();
        let p = plan(&spec, &prices);
        assert_eq!(p.slices.len(), 1);
        let research = &p.slices[0];
        assert_eq!(research.kind.name(), "research");
        assert!(research.kind.is_model_driven());
        // Every tool call of every sub-agent at the dearer tool.
        assert_eq!(
            p.estimate.cost,
            prices.serp.max(prices.unlocker).saturating_mul(12)
        );
        let kids = sub_agents(research, &["a?".into(), "b?".into(), "a?".into()]);
        assert_eq!(
            kids.len(),
            3,
            "equal sub-questions at two positions stay two slices"
        );
        assert!(kids.iter().all(|k| k.parent.as_ref() == Some(&research.id)));
        assert!(kids.iter().all(|k| k.kind.geo().as_str() == "de"));
        let r = spec.research.as_ref().unwrap();
        let report = report_slice(r);
        assert_eq!(report.kind.name(), "report");
        assert_eq!(report.parent.as_ref(), Some(&research.id));
        assert_eq!(report_slice(r).id, report.id, "one report per question");
    }
}
