//! Search results for the SERP zone: Google and Bing search URLs.
//!
//! With `brd_json=1` the answer is Bright Data's parsed JSON (`general`, `input`,
//! `organic`); without it, a small HTML results page. Results are a pure function of
//! (engine, normalized query, geo): one pool of products per query, ranked
//! differently per country, each linking to a `shop.example` product page.

use serde::Serialize;
use url::Url;

use crate::escape;
use crate::product::{FEATURES, SHOP_HOST};
use crate::seed;

/// Organic results per page, as on a real first page.
const PER_PAGE: usize = 10;
/// Candidates per query; each country ranks its own ten of them.
const POOL: usize = 15;

const VARIANTS: [&str; 10] = [
    "", "Pro", "Mini", "Max", "Lite", "Plus", "X2", "Go", "Air", "Duo",
];
const BRANDS: [&str; 12] = [
    "Nordwind", "Acme", "Kestrel", "Larkspur", "Orbit", "Pioneer", "Quill", "Redwood", "Summit",
    "Tideline", "Vantage", "Zephyr",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Engine {
    Google,
    Bing,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Google => "google",
            Engine::Bing => "bing",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Engine::Google => "Google Search",
            Engine::Bing => "Bing",
        }
    }
}

/// Why a URL sent to the SERP zone is not a search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SearchError {
    NotASearchEngine,
    NoQuery,
}

/// A search request read from its URL.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Search {
    pub engine: Engine,
    /// The query as given (decoded, trimmed).
    pub query: String,
    /// Lower case, single spaces: what determines the results.
    pub normalized: String,
    pub geo: String,
    pub language: String,
    /// `brd_json=1`: parsed JSON rather than HTML.
    pub parsed: bool,
}

impl Search {
    /// Reads a Google (`q`, `gl`, `hl`) or Bing (`q`, `cc`, `setlang`) search URL.
    /// `default_geo` applies when the URL names no country.
    pub fn parse(url: &Url, default_geo: &str) -> Result<Search, SearchError> {
        let host = url.host_str().unwrap_or("");
        let engine = if host == "google.com" || host.starts_with("www.google.") {
            Engine::Google
        } else if host == "bing.com" || host == "www.bing.com" {
            Engine::Bing
        } else {
            return Err(SearchError::NotASearchEngine);
        };
        if url.path() != "/search" {
            return Err(SearchError::NotASearchEngine);
        }
        let (geo_key, lang_key) = match engine {
            Engine::Google => ("gl", "hl"),
            Engine::Bing => ("cc", "setlang"),
        };
        let (mut query, mut geo, mut language, mut parsed) = (None, None, None, false);
        for (k, v) in url.query_pairs() {
            match k.as_ref() {
                "q" => query = Some(v.trim().to_owned()),
                "brd_json" => parsed = v == "1",
                k if k == geo_key => geo = Some(v.to_ascii_lowercase()),
                k if k == lang_key => language = Some(v.into_owned()),
                _ => {}
            }
        }
        let query = query
            .filter(|q| !q.is_empty())
            .ok_or(SearchError::NoQuery)?;
        let normalized = query
            .to_lowercase()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let geo = geo
            .filter(|g| g.len() == 2 && g.bytes().all(|b| b.is_ascii_lowercase()))
            .unwrap_or_else(|| default_geo.to_owned());
        Ok(Search {
            engine,
            query,
            normalized,
            geo,
            language: language.unwrap_or_else(|| "en".to_owned()),
            parsed,
        })
    }

    /// The organic results and the total result count.
    fn results(&self) -> (Vec<Organic>, u64) {
        let engine = self.engine.name();
        let mut pool_rng = seed::rng(&["serp-pool", engine, &self.normalized]);
        let topic = title_case(&self.normalized);
        let topic_slug = slugify(&self.normalized);
        let mut pool: Vec<(String, String, &str)> = (0..POOL)
            .map(|_| {
                let brand = BRANDS[pool_rng.usize(..BRANDS.len())];
                let variant = VARIANTS[pool_rng.usize(..VARIANTS.len())];
                let name = [brand, topic.as_str(), variant]
                    .iter()
                    .filter(|s| !s.is_empty())
                    .copied()
                    .collect::<Vec<_>>()
                    .join(" ");
                let slug = [
                    slugify(brand),
                    topic_slug.clone(),
                    slugify(variant),
                    hex::encode(pool_rng.u16(..).to_be_bytes()),
                ]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join("-");
                (name, slug, FEATURES[pool_rng.usize(..FEATURES.len())])
            })
            .collect();
        let base_count = pool_rng.u64(100_000..100_000_000);

        let mut geo_rng = seed::rng(&["serp-rank", engine, &self.normalized, &self.geo]);
        geo_rng.shuffle(&mut pool);
        let count = base_count / 100 * geo_rng.u64(80..=120);
        let organic = pool
            .into_iter()
            .take(PER_PAGE)
            .zip(1u32..)
            .map(|((name, slug, feature), rank)| Organic {
                title: format!("{name} | Shop Example"),
                link: format!("https://{SHOP_HOST}/p/{slug}"),
                display_link: format!("https://{SHOP_HOST} › p › {slug}"),
                description: format!(
                    "{name}: {feature}. Compare prices and buy online at Shop Example."
                ),
                rank,
                global_rank: rank,
            })
            .collect();
        (organic, count)
    }

    /// Bright Data's parsed JSON for this search; `original_url` is echoed as sent.
    pub fn json(&self, original_url: &str) -> Result<String, serde_json::Error> {
        let (organic, results_cnt) = self.results();
        let doc = SerpJson {
            general: General {
                search_engine: self.engine.name(),
                query: &self.query,
                results_cnt,
                search_type: "text",
                page_title: format!("{} - {}", self.query, self.engine.title()),
                language: &self.language,
                location: &self.geo,
                mobile: false,
                basic_view: false,
            },
            input: Input { original_url },
            organic,
        };
        serde_json::to_string(&doc)
    }

    /// A small results page, for requests without `brd_json=1`.
    pub fn html(&self) -> String {
        let (organic, count) = self.results();
        let mut out = format!(
            concat!(
                "<!doctype html>\n<html lang=\"{lang}\">\n<head>\n<meta charset=\"utf-8\">\n",
                "<title>{q} - {engine}</title>\n</head>\n<body>\n",
                "<div id=\"result-stats\">About {count} results</div>\n<div id=\"search\">\n"
            ),
            lang = escape::html(&self.language),
            q = escape::html(&self.query),
            engine = self.engine.title(),
            count = count,
        );
        for r in &organic {
            out.push_str(&format!(
                "<div class=\"g\"><a href=\"{link}\"><h3>{title}</h3></a><cite>{display}</cite><div class=\"snippet\">{desc}</div></div>\n",
                link = escape::html(&r.link),
                title = escape::html(&r.title),
                display = escape::html(&r.display_link),
                desc = escape::html(&r.description),
            ));
        }
        out.push_str("</div>\n</body>\n</html>\n");
        out
    }

    /// The results page as Markdown (`data_format: "markdown"`).
    pub fn markdown(&self) -> String {
        let (organic, _) = self.results();
        let mut out = format!(
            "# {} - {}\n\n",
            escape::markdown(&self.query),
            self.engine.title()
        );
        for r in &organic {
            out.push_str(&format!(
                "{}. [{}]({})\n   {}\n\n",
                r.rank,
                escape::markdown(&r.title),
                r.link,
                escape::markdown(&r.description)
            ));
        }
        out
    }
}

#[derive(Serialize)]
struct SerpJson<'a> {
    general: General<'a>,
    input: Input<'a>,
    organic: Vec<Organic>,
}

#[derive(Serialize)]
struct General<'a> {
    search_engine: &'static str,
    query: &'a str,
    results_cnt: u64,
    search_type: &'static str,
    page_title: String,
    language: &'a str,
    location: &'a str,
    mobile: bool,
    basic_view: bool,
}

#[derive(Serialize)]
struct Input<'a> {
    original_url: &'a str,
}

#[derive(Serialize)]
struct Organic {
    link: String,
    display_link: String,
    title: String,
    description: String,
    rank: u32,
    global_rank: u32,
}

/// `"espresso grinder"` → `"Espresso Grinder"`.
fn title_case(s: &str) -> String {
    s.split(' ')
        .map(|w| {
            let mut cs = w.chars();
            match cs.next() {
                Some(c) => c.to_uppercase().collect::<String>() + cs.as_str(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Lower-case ASCII letters and digits joined by single dashes, at most 60 bytes.
fn slugify(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(60));
    for w in s
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        if out.len() + w.len() + 1 > 60 {
            break;
        }
        if !out.is_empty() {
            out.push('-');
        }
        out.push_str(&w.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn search(url: &str) -> Result<Search, SearchError> {
        Search::parse(&Url::parse(url).unwrap(), "us")
    }

    #[test]
    fn reads_google_and_bing_urls() {
        let g = search("https://www.google.com/search?q=Espresso++Grinder&gl=DE&hl=de&brd_json=1")
            .unwrap();
        assert_eq!(
            (
                g.engine,
                g.normalized.as_str(),
                g.geo.as_str(),
                g.language.as_str(),
                g.parsed
            ),
            (Engine::Google, "espresso grinder", "de", "de", true)
        );
        let b = search("https://www.bing.com/search?q=kettle&cc=jp").unwrap();
        assert_eq!(
            (b.engine, b.geo.as_str(), b.parsed),
            (Engine::Bing, "jp", false)
        );
        assert_eq!(
            search("https://www.google.com/search?q=x").unwrap().geo,
            "us"
        );
        assert_eq!(
            search("https://example.com/search?q=x"),
            Err(SearchError::NotASearchEngine)
        );
        assert_eq!(
            search("https://www.google.com/maps?q=x"),
            Err(SearchError::NotASearchEngine)
        );
        assert_eq!(
            search("https://www.google.com/search?q=+"),
            Err(SearchError::NoQuery)
        );
    }

    #[test]
    fn result_links_name_the_product_page() {
        let s = search("https://www.google.com/search?q=espresso%20grinder&brd_json=1").unwrap();
        let (organic, _) = s.results();
        assert_eq!(organic.len(), PER_PAGE);
        for r in &organic {
            let url = Url::parse(&r.link).unwrap();
            let page = crate::product::ProductPage::new(&url, "us");
            assert!(
                r.title.starts_with(&page.name),
                "{} vs {}",
                r.title,
                page.name
            );
            assert!(page.name.contains("Espresso Grinder"));
        }
    }

    #[test]
    fn normalized_queries_share_results() {
        let a = search("https://www.google.com/search?q=Espresso+Grinder").unwrap();
        let b = search("https://www.google.com/search?q=espresso%20%20grinder").unwrap();
        assert_eq!(
            a.results().0.iter().map(|r| &r.link).collect::<Vec<_>>(),
            b.results().0.iter().map(|r| &r.link).collect::<Vec<_>>()
        );
    }

    #[test]
    fn slugs_are_tame() {
        assert_eq!(slugify("Espresso grinder, 58mm!"), "espresso-grinder-58mm");
        assert_eq!(slugify("珈琲"), "");
        assert!(slugify(&"word ".repeat(40)).len() <= 60);
    }
}
