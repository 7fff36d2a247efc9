//! Bright Data client: Web Unlocker and SERP API through the unified
//! `POST /request` endpoint, as a [`ToolProvider`] with four tools:
//! `brightdata.web_search` (SERP API), `brightdata.fetch_page` (Web Unlocker, raw
//! HTML or markdown), and a batch form of each that the tool layer runs as single
//! calls (each cached, retried and billed on its own).
//!
//! Follows Bright Data's documentation:
//! - request body (`zone`, `url`, `format`, `data_format`, `country`) and bearer
//!   auth: <https://docs.brightdata.com/api-reference/rest-api/unlocker/unlock-website>
//! - parsed SERP results with `brd_json=1`, `gl=` (Google) and `cc=` (Bing):
//!   <https://docs.brightdata.com/scraping-automation/serp-api/features>,
//!   <https://docs.brightdata.com/scraping-automation/serp-api/query-parameters/bing>
//! - errors (`x-brd-error`, `x-brd-error-code`, 401/400 before unlocking, 429
//!   `sr_rate_limit`, 502 unlock failures): <https://docs.brightdata.com/scraping-automation/web-unlocker/error-codes>
//! - billing: only successful requests are billed:
//!   <https://docs.brightdata.com/products/web-unlocker/introduction>
//!
//! Layout: [`config`] (environment, zones, prices), [`classify`] (status and
//! headers to retry class, pure), [`serp`] (SERP URLs and parsing), and the client
//! with its `ToolProvider` implementation here.

pub mod classify;
pub mod config;
pub mod serp;

use std::time::Duration;

use async_trait::async_trait;
use secrecy::ExposeSecret;
use serde::Serialize;
use serde_json::{Value, json};
use tracing::Instrument as _;
use trawl_core::cost::Micros;
use trawl_core::geo::Geo;
use trawl_core::model::{Engine, normalize_query, normalize_url};
use trawl_core::ports::{
    BatchOf, CacheKey, ToolAnswer, ToolDef, ToolError, ToolOffer, ToolProvider,
};

pub use config::BrightDataConfig;

/// Tool names.
pub const FETCH: &str = "brightdata.fetch_page";
pub const SEARCH: &str = "brightdata.web_search";
pub const FETCH_BATCH: &str = "brightdata.fetch_page_batch";
pub const SEARCH_BATCH: &str = "brightdata.web_search_batch";
/// The most calls one batch may hold.
pub const BATCH_MAX: usize = 20;

/// The body of `POST /request`.
#[derive(Serialize)]
struct RequestBody<'a> {
    zone: &'a str,
    url: &'a str,
    format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data_format: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    country: Option<&'a str>,
}

/// A Bright Data API client.
pub struct BrightData {
    http: reqwest::Client,
    config: BrightDataConfig,
}

/// Installs the process-wide TLS crypto provider (ring) once; later calls are
/// no-ops (`trawl_telemetry::http`, where every client is built).
pub use trawl_telemetry::http::ensure_tls as ensure_crypto_provider;

impl BrightData {
    pub fn new(config: BrightDataConfig) -> Result<BrightData, reqwest::Error> {
        let http = trawl_telemetry::http::client()
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(10)))
            .pool_max_idle_per_host(256)
            .user_agent(concat!("trawl/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(BrightData { http, config })
    }

    pub fn config(&self) -> &BrightDataConfig {
        &self.config
    }

    /// One request to `/request`; the body on success, a classified error
    /// otherwise. An OpenTelemetry client span whose `traceparent` the request
    /// carries, exported at `TRAWL_TRACE_LEVEL=debug`: at the default level the
    /// tool call's span is the request's parent and stands for it, which keeps a
    /// slice to two spans.
    async fn request(&self, body: &RequestBody<'_>) -> Result<Vec<u8>, ToolError> {
        let url = format!("{}/request", self.config.api_url.trim_end_matches('/'));
        let span = tracing::debug_span!(
            "http",
            otel.name = "POST /request",
            otel.kind = "client",
            http.request.method = "POST",
            url.full = %url,
            brightdata.zone = body.zone,
            http.response.status_code = tracing::field::Empty,
            http.response.body.size = tracing::field::Empty,
        );
        async {
            let mut traced = reqwest::header::HeaderMap::new();
            trawl_telemetry::propagation::inject_headers(&mut traced);
            let resp = self
                .http
                .post(url.as_str())
                .headers(traced)
                .bearer_auth(self.config.token.expose_secret())
                .json(body)
                .send()
                .await
                .map_err(classify::transport)?;
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let bytes = resp.bytes().await.map_err(classify::transport)?;
            let span = tracing::Span::current();
            span.record("http.response.status_code", status);
            span.record("http.response.body.size", bytes.len());
            match classify::response(status, &headers, &bytes) {
                Some(err) => Err(err),
                None => Ok(bytes.to_vec()),
            }
        }
        .instrument(span)
        .await
    }

    /// Fetches a page through Web Unlocker from `geo`.
    pub async fn unlock(&self, url: &str, geo: Geo, markdown: bool) -> Result<Vec<u8>, ToolError> {
        self.request(&RequestBody {
            zone: &self.config.unlocker_zone,
            url,
            format: "raw",
            data_format: markdown.then_some("markdown"),
            country: Some(geo.as_str()),
        })
        .await
    }

    /// Runs a search through the SERP API and parses its organic results.
    pub async fn search(
        &self,
        engine: Engine,
        query: &str,
        geo: Geo,
    ) -> Result<serp::SerpPage, ToolError> {
        let url = serp::search_url(engine, query, geo);
        let body = self
            .request(&RequestBody {
                zone: &self.config.serp_zone,
                url: &url,
                format: "raw",
                data_format: None,
                country: None,
            })
            .await?;
        serp::parse(&body)
    }
}

fn str_arg<'a>(args: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    args.get(key).and_then(Value::as_str).ok_or_else(|| {
        ToolError::permanent("bad_arguments", format!("missing string argument {key}"))
    })
}

fn geo_arg(args: &Value) -> Result<Geo, ToolError> {
    Geo::parse(str_arg(args, "geo")?).map_err(|e| ToolError::permanent("bad_arguments", e))
}

fn engine_arg(args: &Value) -> Result<Engine, ToolError> {
    match args.get("engine").and_then(Value::as_str) {
        None => Ok(Engine::Google),
        Some(e) => Engine::parse(e).map_err(|e| ToolError::permanent("bad_arguments", e)),
    }
}

fn markdown_arg(args: &Value) -> Result<bool, ToolError> {
    match args.get("format").and_then(Value::as_str) {
        None | Some("raw") => Ok(false),
        Some("markdown") => Ok(true),
        Some(other) => Err(ToolError::permanent(
            "bad_arguments",
            format!("format {other}: expected raw or markdown"),
        )),
    }
}

#[async_trait]
impl ToolProvider for BrightData {
    fn tools(&self) -> Vec<ToolOffer> {
        let per_1k = |m: Micros| {
            format!(
                "{} per 1,000 successful requests; failed requests are free",
                Micros(m.0.saturating_mul(1_000))
            )
        };
        let annotations = |title: &str| {
            json!({
                "title": title,
                "readOnlyHint": true,
                "destructiveHint": false,
                "idempotentHint": true,
                "openWorldHint": true
            })
        };
        let search_args = json!({
            "type": "object",
            "required": ["query", "geo"],
            "properties": {
                "query": {"type": "string", "minLength": 1, "description": "What to search for, as typed into the engine."},
                "geo": {"type": "string", "pattern": "^[a-z]{2}$", "description": "Country to search from: ISO 3166-1 alpha-2, lower case (de, us, jp)."},
                "engine": {"enum": ["google", "bing"], "default": "google", "description": "Search engine."}
            },
            "additionalProperties": false
        });
        let fetch_args = json!({
            "type": "object",
            "required": ["url", "geo"],
            "properties": {
                "url": {"type": "string", "format": "uri", "pattern": "^https?://", "description": "The page to fetch (http or https)."},
                "geo": {"type": "string", "pattern": "^[a-z]{2}$", "description": "Country to fetch from: ISO 3166-1 alpha-2, lower case."},
                "format": {"enum": ["raw", "markdown"], "default": "raw", "description": "raw: the page's HTML; markdown: the page converted to markdown."}
            },
            "additionalProperties": false
        });
        let organic = json!({
            "type": "object",
            "required": ["organic"],
            "properties": {
                "organic": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "rank": {"type": "integer"},
                            "title": {"type": "string"},
                            "link": {"type": "string"},
                            "description": {"type": ["string", "null"]}
                        }
                    }
                }
            }
        });
        let batch_of = |items: &str, one: &Value| {
            json!({
                "type": "object",
                "required": [items],
                "properties": {
                    items: {"type": "array", "minItems": 1, "maxItems": BATCH_MAX, "items": one}
                },
                "additionalProperties": false
            })
        };
        let batch_out = |one: Value| {
            json!({
                "type": "object",
                "required": ["results"],
                "properties": {
                    "results": {
                        "type": "array",
                        "description": "One per call, in order: its result, or its error.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "result": one,
                                "error": {"type": "object", "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}
                            }
                        }
                    }
                }
            })
        };
        let prices = &self.config.prices;
        vec![
            ToolOffer {
                def: ToolDef {
                    name: SEARCH.into(),
                    title: Some("Web search".into()),
                    description: "Search Google or Bing from a country through Bright Data's SERP API. Returns the organic results as JSON: rank, title, link and description of each.".into(),
                    input_schema: search_args.clone(),
                    output_schema: Some(organic.clone()),
                    annotations: annotations("Web search (Bright Data SERP API)"),
                    input_examples: vec![
                        json!({"query": "thinkpad x1 carbon price", "geo": "de", "engine": "google"}),
                        json!({"query": "best running shoes 2026", "geo": "us"}),
                    ],
                },
                cost_model: per_1k(prices.serp),
                batch: None,
            },
            ToolOffer {
                def: ToolDef {
                    name: FETCH.into(),
                    title: Some("Fetch page".into()),
                    description: "Fetch a web page from a country through Bright Data's Web Unlocker, which handles blocks and CAPTCHAs. Returns the page's HTML (format raw) or the page as markdown.".into(),
                    input_schema: fetch_args.clone(),
                    output_schema: None,
                    annotations: annotations("Fetch page (Bright Data Web Unlocker)"),
                    input_examples: vec![
                        json!({"url": "https://shop.example/p/42", "geo": "fr", "format": "raw"}),
                        json!({"url": "https://news.example/article", "geo": "us", "format": "markdown"}),
                    ],
                },
                cost_model: per_1k(prices.unlocker),
                batch: None,
            },
            ToolOffer {
                def: ToolDef {
                    name: SEARCH_BATCH.into(),
                    title: Some("Web search, batch".into()),
                    description: format!("Run up to {BATCH_MAX} web searches (Google or Bing, from a country) in one call. Each search is cached, retried and billed on its own; returns one result or error per search, in order."),
                    input_schema: batch_of("searches", &search_args),
                    output_schema: Some(batch_out(organic)),
                    annotations: annotations("Web search batch (Bright Data SERP API)"),
                    input_examples: vec![json!({"searches": [
                        {"query": "espresso machine", "geo": "it"},
                        {"query": "espresso machine", "geo": "de", "engine": "bing"}
                    ]})],
                },
                cost_model: format!("each search: {}", per_1k(prices.serp)),
                batch: Some(BatchOf { tool: SEARCH.into(), items_field: "searches" }),
            },
            ToolOffer {
                def: ToolDef {
                    name: FETCH_BATCH.into(),
                    title: Some("Fetch pages, batch".into()),
                    description: format!("Fetch up to {BATCH_MAX} web pages (each from a country, as HTML or markdown) in one call. Each page is cached, retried and billed on its own; returns one result or error per page, in order."),
                    input_schema: batch_of("pages", &fetch_args),
                    output_schema: Some(batch_out(json!({"type": "string"}))),
                    annotations: annotations("Fetch pages batch (Bright Data Web Unlocker)"),
                    input_examples: vec![json!({"pages": [
                        {"url": "https://shop.example/p/1", "geo": "gb"},
                        {"url": "https://shop.example/p/2", "geo": "gb", "format": "markdown"}
                    ]})],
                },
                cost_model: format!("each page: {}", per_1k(prices.unlocker)),
                batch: Some(BatchOf { tool: FETCH.into(), items_field: "pages" }),
            },
        ]
    }

    fn cache_key(&self, tool: &str, args: &Value) -> Option<CacheKey> {
        let geo = geo_arg(args).ok()?;
        match tool {
            SEARCH => {
                let engine = engine_arg(args).ok()?;
                let q = normalize_query(str_arg(args, "query").ok()?);
                Some(CacheKey::new(
                    tool,
                    geo.as_str(),
                    &format!("{}:{q}", engine.as_str()),
                    "serp-json",
                ))
            }
            FETCH => {
                let url = normalize_url(str_arg(args, "url").ok()?).ok()?;
                let format = if markdown_arg(args).ok()? {
                    "markdown"
                } else {
                    "raw"
                };
                Some(CacheKey::new(tool, geo.as_str(), &url, format))
            }
            _ => None,
        }
    }

    fn price(&self, tool: &str) -> Micros {
        match tool {
            SEARCH => self.config.prices.serp,
            FETCH => self.config.prices.unlocker,
            _ => Micros::ZERO,
        }
    }

    async fn call(&self, tool: &str, args: &Value) -> Result<ToolAnswer, ToolError> {
        match tool {
            SEARCH => {
                let page = self
                    .search(engine_arg(args)?, str_arg(args, "query")?, geo_arg(args)?)
                    .await?;
                let body = serde_json::to_vec(&page)
                    .map_err(|e| ToolError::permanent("encode", e.to_string()))?;
                Ok(ToolAnswer {
                    body,
                    cost: self.config.prices.serp,
                    product: "serp",
                })
            }
            FETCH => {
                let url = normalize_url(str_arg(args, "url")?)
                    .map_err(|e| ToolError::permanent("bad_arguments", e))?;
                let body = self
                    .unlock(&url, geo_arg(args)?, markdown_arg(args)?)
                    .await?;
                Ok(ToolAnswer {
                    body,
                    cost: self.config.prices.unlocker,
                    product: "unlocker",
                })
            }
            other => Err(ToolError::permanent(
                "unknown_tool",
                format!("no tool named {other}"),
            )),
        }
    }
}
