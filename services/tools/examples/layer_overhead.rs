//! What the tool layer adds to a call, in CPU time.
//!
//! An in-memory provider offers one built-in tool, `brightdata.echo` (an input
//! schema like `brightdata.fetch_page`'s), whose calls answer a ~20 KB HTML body at
//! once, with no I/O and no cache key. The bench times N calls (after a warm-up)
//! made two ways:
//!
//! - direct: `provider.call(tool, &args)`;
//! - layered: `ToolLayer::call` (catalog lookup and tool state, policy, input
//!   schema validation, budget, one trace step, one audit row, the result
//!   sanitizer), with a fresh [`Recorder`] per call as a worker has per slice and a
//!   retry policy of one attempt;
//!
//! and prints the latency percentiles of each and the difference of the medians:
//! the layer's overhead. One thread (`current_thread` runtime), so it measures
//! CPU cost, not scheduling.
//!
//! ```text
//! cargo run --release -p trawl-tools --example layer_overhead -- --calls 20000
//! ```
//!
//! Options: `--calls N` (20000), `--warmup W` (1000), `--body B` (20480: bytes of
//! the answer, at least).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Value, json};
use trawl_core::cost::Micros;
use trawl_core::model::{JobId, SliceId};
use trawl_core::ports::{
    CacheKey, ContentCache, LoadFuture, Served, ToolAnswer, ToolDef, ToolError, ToolOffer,
    ToolProvider,
};
use trawl_core::retry::RetryPolicy;
use trawl_tools::{Budget, CallOptions, Recorder, ToolLayer};

const TOOL: &str = "brightdata.echo";

/// Answers every call with the same page, at once.
struct Echo {
    body: Vec<u8>,
}

impl Echo {
    fn new(bytes: usize) -> Echo {
        let mut html = String::from(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>Product 42 | Shop</title></head><body><main>",
        );
        let mut i = 0;
        while html.len() < bytes {
            html.push_str(&format!(
                "<article class=\"product\" data-id=\"{i}\"><h2>Product {i}</h2>\
                 <p class=\"price\">EUR {}.99</p><p>A plain description of the product, \
                 with a <a href=\"https://shop.example/p/{i}\">link</a> to its page.</p>\
                 </article>\n",
                10 + i % 90
            ));
            i += 1;
        }
        html.push_str("</main></body></html>");
        Echo {
            body: html.into_bytes(),
        }
    }
}

#[async_trait]
impl ToolProvider for Echo {
    fn tools(&self) -> Vec<ToolOffer> {
        vec![ToolOffer {
            def: ToolDef {
                name: TOOL.into(),
                title: Some("Echo page".into()),
                description: "Answers a fixed HTML page, for measuring the layer.".into(),
                input_schema: json!({
                    "type": "object",
                    "required": ["url"],
                    "properties": {
                        "url": {"type": "string", "format": "uri", "pattern": "^https?://", "description": "The page to fetch (http or https)."},
                        "geo": {"type": "string", "pattern": "^[a-z]{2}$", "description": "Country to fetch from: ISO 3166-1 alpha-2, lower case."},
                        "format": {"enum": ["raw", "markdown"], "default": "raw", "description": "raw: the page's HTML; markdown: the page converted to markdown."}
                    },
                    "additionalProperties": false
                }),
                output_schema: None,
                annotations: json!({"readOnlyHint": true, "openWorldHint": true}),
                input_examples: vec![json!({"url": "https://shop.example/p/42", "geo": "fr"})],
            },
            cost_model: "free".into(),
            batch: None,
        }]
    }

    fn cache_key(&self, _: &str, _: &Value) -> Option<CacheKey> {
        None
    }

    fn price(&self, _: &str) -> Micros {
        Micros(1_500)
    }

    async fn call(&self, _: &str, _: &Value) -> Result<ToolAnswer, ToolError> {
        Ok(ToolAnswer {
            body: self.body.clone(),
            cost: Micros(1_500),
            product: "unlocker",
        })
    }
}

/// Never asked: the tool gives no cache key.
struct NoCache;

#[async_trait]
impl ContentCache for NoCache {
    async fn get_or_load(
        &self,
        _: &CacheKey,
        _: Duration,
        load: LoadFuture<'_>,
    ) -> Result<(Vec<u8>, Served), ToolError> {
        Ok((load.await?, Served::Loaded))
    }
}

struct Options {
    calls: usize,
    warmup: usize,
    body: usize,
}

fn options() -> Options {
    let mut o = Options {
        calls: 20_000,
        warmup: 1_000,
        body: 20 * 1024,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let v = args.next().unwrap_or_default();
        let n: usize = v.parse().unwrap_or_else(|_| {
            eprintln!("usage: layer_overhead [--calls N] [--warmup W] [--body B]");
            std::process::exit(2)
        });
        match flag.as_str() {
            "--calls" => o.calls = n.max(1),
            "--warmup" => o.warmup = n,
            "--body" => o.body = n,
            other => {
                eprintln!("layer_overhead: unknown argument {other:?}");
                std::process::exit(2)
            }
        }
    }
    o
}

fn us(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn line(what: &str, sorted: &[Duration]) -> f64 {
    let p50 = us(sorted, 0.50);
    println!(
        "{what:<8} µs: p50 {p50:>7.2}  p90 {:>7.2}  p99 {:>7.2}",
        us(sorted, 0.90),
        us(sorted, 0.99),
    );
    p50
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let o = options();
    let echo = Arc::new(Echo::new(o.body));
    let provider: Arc<dyn ToolProvider> = echo.clone();
    let layer = ToolLayer::new(provider.clone(), Arc::new(NoCache));
    let args = json!({"url": "https://shop.example/p/42", "geo": "fr", "format": "raw"});
    let budget = Budget::new(None, Micros::ZERO);
    let opts = CallOptions {
        retry: RetryPolicy::new(1),
        max_age: Duration::from_secs(3600),
        budget: &budget,
        offer_builtins: true,
    };
    let job = JobId::generate(1, 1);
    let slice = SliceId::from_stored("s_bench".into());

    // A check that the layered call is the one measured: allowed and whole.
    let rec = Recorder::new(job.clone(), slice.clone());
    let body = layer.call(TOOL, &args, &opts, &rec).await.unwrap();
    let records = rec.finish();
    assert_eq!(records.audit.len(), 1);
    assert_eq!(records.audit[0].decision, "allow");
    assert_eq!(records.trace.len(), 1);
    assert_eq!(body, echo.body);
    println!(
        "tool {TOOL}: body {} bytes; {} calls each way after {} warm-up calls; one thread",
        echo.body.len(),
        o.calls,
        o.warmup
    );

    // Interleaved, so that both see the same machine.
    let mut direct = Vec::with_capacity(o.calls);
    let mut layered = Vec::with_capacity(o.calls);
    for i in 0..o.warmup + o.calls {
        let t = Instant::now();
        let answer = provider.call(black_box(TOOL), black_box(&args)).await;
        let d = t.elapsed();
        black_box(answer.unwrap());

        let t = Instant::now();
        let rec = Recorder::new(job.clone(), slice.clone());
        let result = layer
            .call(black_box(TOOL), black_box(&args), &opts, &rec)
            .await;
        let records = rec.finish();
        let l = t.elapsed();
        black_box((result.unwrap(), records));

        if i >= o.warmup {
            direct.push(d);
            layered.push(l);
        }
    }
    direct.sort_unstable();
    layered.sort_unstable();
    let d = line("direct", &direct);
    let l = line("layered", &layered);
    println!(
        "overhead (p50 layered − p50 direct): {:.2} µs  (target: under 200 µs)",
        l - d
    );
}
