//! SERP URLs and the parsed-JSON results (`brd_json=1`).

use serde::{Deserialize, Serialize};
use trawl_core::geo::Geo;
use trawl_core::model::Engine;
use trawl_core::ports::ToolError;

/// One organic result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Organic {
    pub rank: u32,
    pub title: String,
    pub link: String,
    #[serde(default)]
    pub description: String,
}

/// The organic results of one search, in rank order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SerpPage {
    pub organic: Vec<Organic>,
}

/// The search URL Bright Data fetches: Google takes the country as `gl`, Bing as `cc`.
pub fn search_url(engine: Engine, query: &str, geo: Geo) -> String {
    let (base, geo_param) = match engine {
        Engine::Google => ("https://www.google.com/search", "gl"),
        Engine::Bing => ("https://www.bing.com/search", "cc"),
    };
    let mut u = url::Url::parse(base).unwrap_or_else(|_| unreachable_url());
    u.query_pairs_mut()
        .append_pair("q", query)
        .append_pair(geo_param, geo.as_str())
        .append_pair("hl", "en")
        .append_pair("brd_json", "1");
    u.into()
}

// Both bases above are constant, valid URLs.
#[allow(clippy::expect_used)]
fn unreachable_url() -> url::Url {
    url::Url::parse("https://www.google.com/").expect("constant URL")
}

/// Raw shape of the parsed JSON; unknown fields are ignored.
#[derive(Deserialize)]
struct Raw {
    #[serde(default)]
    organic: Vec<RawOrganic>,
}

#[derive(Deserialize)]
struct RawOrganic {
    rank: Option<u32>,
    title: Option<String>,
    link: Option<String>,
    description: Option<String>,
}

/// Parses the parsed-JSON SERP body. Entries without a link are skipped; missing
/// ranks follow the order given. A body that is not that JSON is a permanent error
/// (it was billed; asking again gives the same).
pub fn parse(body: &[u8]) -> Result<SerpPage, ToolError> {
    let raw: Raw = serde_json::from_slice(body).map_err(|e| {
        ToolError::permanent(
            "bad_serp_json",
            format!("the SERP answer is not parsed JSON (brd_json=1): {e}"),
        )
    })?;
    let mut organic: Vec<Organic> = raw
        .organic
        .into_iter()
        .enumerate()
        .filter_map(|(i, o)| {
            Some(Organic {
                rank: o.rank.unwrap_or(i as u32 + 1),
                link: o.link.filter(|l| !l.is_empty())?,
                title: o.title.unwrap_or_default(),
                description: o.description.unwrap_or_default(),
            })
        })
        .collect();
    organic.sort_by_key(|o| o.rank);
    Ok(SerpPage { organic })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_carry_the_geo_and_brd_json() {
        let us = Geo::parse("us").unwrap();
        assert_eq!(
            search_url(Engine::Google, "14 inch laptop", us),
            "https://www.google.com/search?q=14+inch+laptop&gl=us&hl=en&brd_json=1"
        );
        assert_eq!(
            search_url(Engine::Bing, "a&b", Geo::parse("de").unwrap()),
            "https://www.bing.com/search?q=a%26b&cc=de&hl=en&brd_json=1"
        );
    }

    #[test]
    fn parses_the_documented_shape() {
        let body = br#"{"general":{"search_engine":"google","query":"pizza"},"input":{"original_url":"x"},
          "organic":[{"link":"https://b.example/","title":"B","description":"d","rank":2,"global_rank":5,"display_link":"b"},
                     {"link":"https://a.example/","title":"A","rank":1,"global_rank":1},
                     {"title":"no link","rank":3}]}"#;
        let p = parse(body).unwrap();
        assert_eq!(p.organic.len(), 2);
        assert_eq!(
            p.organic[0],
            Organic {
                rank: 1,
                title: "A".into(),
                link: "https://a.example/".into(),
                description: String::new()
            }
        );
        assert_eq!(p.organic[1].rank, 2);
    }

    #[test]
    fn html_instead_of_json_is_a_clear_permanent_error() {
        let e = parse(b"<html>captcha</html>").unwrap_err();
        assert!(!e.is_transient());
        assert_eq!(e.code, "bad_serp_json");
    }
}
