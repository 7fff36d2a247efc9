//! The simulator over real HTTP on loopback: each test spawns its own simulator on
//! its own port, so tests run in parallel without seeing each other's counters.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use trawl_sim::{Faults, SimConfig, SimHandle, SimStats, spawn};

const TOKEN: &str = "test-token";

struct Sim {
    handle: SimHandle,
    client: reqwest::Client,
}

impl Sim {
    async fn start(config: SimConfig) -> Sim {
        Sim::start_with_client(config, reqwest::Client::builder()).await
    }

    async fn start_with_client(config: SimConfig, builder: reqwest::ClientBuilder) -> Sim {
        // reqwest is built without a default crypto provider; plain http never uses it,
        // but building a client needs one. A second install fails harmlessly.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let handle = spawn(config.with_token(TOKEN)).await.unwrap();
        Sim {
            handle,
            client: builder.build().unwrap(),
        }
    }

    fn url(&self) -> String {
        format!("{}/request", self.handle.base_url())
    }

    async fn post(&self, body: Value) -> reqwest::Response {
        self.client
            .post(self.url())
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    async fn text(&self, body: Value) -> (StatusCode, String) {
        let resp = self.post(body).await;
        (resp.status(), resp.text().await.unwrap())
    }

    async fn serp(&self, url: &str) -> Value {
        let resp = self
            .post(json!({"zone": "serp_api1", "url": url, "format": "raw"}))
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(header(&resp, "content-type"), "application/json");
        resp.json().await.unwrap()
    }

    async fn product(&self, url: &str, country: &str) -> String {
        let resp = self
            .post(json!({"zone": "web_unlocker1", "url": url, "format": "raw", "country": country}))
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(header(&resp, "x-brd-status-code"), "200");
        assert!(header(&resp, "content-type").starts_with("text/html"));
        resp.text().await.unwrap()
    }
}

fn header<'a>(resp: &'a reqwest::Response, name: &str) -> &'a str {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().unwrap())
        .unwrap_or("")
}

/// The schema.org Product in a page's JSON-LD.
fn json_ld(html: &str) -> Value {
    let open = "<script type=\"application/ld+json\">";
    let start = html.find(open).expect("a JSON-LD script") + open.len();
    let len = html[start..].find("</script>").expect("a closed script");
    serde_json::from_str(&html[start..start + len]).expect("JSON-LD is valid JSON")
}

/// What item validation would reject: no price, a negative price, or a currency
/// that is not three upper-case letters.
fn is_malformed(ld: &Value) -> bool {
    let offer = &ld["offers"];
    let price_ok = offer["price"].as_f64().is_some_and(|p| p > 0.0);
    let currency_ok = offer["priceCurrency"]
        .as_str()
        .is_some_and(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_uppercase()));
    !(price_ok && currency_ok)
}

fn links(serp: &Value) -> Vec<String> {
    serp["organic"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["link"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn serp_json_has_the_documented_shape() {
    let sim = Sim::start(SimConfig::default()).await;
    let url = "https://www.google.com/search?q=espresso+grinder&gl=de&brd_json=1";
    let v = sim.serp(url).await;
    assert_eq!(v["general"]["search_engine"], "google");
    assert_eq!(v["general"]["query"], "espresso grinder");
    assert_eq!(v["general"]["location"], "de");
    assert_eq!(v["general"]["language"], "en");
    assert!(v["general"]["results_cnt"].as_u64().unwrap() > 0);
    assert_eq!(v["input"]["original_url"], url);
    let organic = v["organic"].as_array().unwrap();
    assert_eq!(organic.len(), 10);
    for (i, r) in organic.iter().enumerate() {
        assert_eq!(r["rank"], i + 1);
        assert_eq!(r["global_rank"], i + 1);
        for field in ["title", "display_link", "description"] {
            assert!(!r[field].as_str().unwrap().is_empty(), "{field} in {r}");
        }
        assert!(
            r["link"]
                .as_str()
                .unwrap()
                .starts_with("https://shop.example/p/"),
            "{r}"
        );
    }

    let bing = sim
        .serp("https://www.bing.com/search?q=kettle&cc=JP&brd_json=1")
        .await;
    assert_eq!(bing["general"]["search_engine"], "bing");
    assert_eq!(bing["general"]["location"], "jp");
    assert_eq!(bing["organic"].as_array().unwrap().len(), 10);
}

#[tokio::test]
async fn serp_is_deterministic_and_differs_by_geo() {
    let sim = Sim::start(SimConfig::default()).await;
    let req = |gl: &str| json!({"zone": "serp_api1", "url": format!("https://www.google.com/search?q=running+shoes&gl={gl}&brd_json=1"), "format": "raw"});
    let (s1, a) = sim.text(req("us")).await;
    let (s2, b) = sim.text(req("us")).await;
    assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK));
    assert_eq!(a, b, "the same request gives the same body");

    let us: Value = serde_json::from_str(&a).unwrap();
    let de = sim
        .serp("https://www.google.com/search?q=running+shoes&gl=de&brd_json=1")
        .await;
    assert_ne!(
        links(&us),
        links(&de),
        "another country ranks other results"
    );

    let other_query = sim
        .serp("https://www.google.com/search?q=rice+cooker&gl=us&brd_json=1")
        .await;
    assert_ne!(links(&us), links(&other_query));
    let same_query_other_case = sim
        .serp("https://www.google.com/search?q=Running++Shoes&gl=us&brd_json=1")
        .await;
    assert_eq!(
        links(&us),
        links(&same_query_other_case),
        "queries are normalized"
    );
}

#[tokio::test]
async fn serp_without_brd_json_is_html() {
    let sim = Sim::start(SimConfig::default()).await;
    let resp = sim
        .post(json!({"zone": "serp_api1", "url": "https://www.google.com/search?q=desk+lamp", "format": "raw"}))
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(header(&resp, "content-type").starts_with("text/html"));
    let html = resp.text().await.unwrap();
    assert!(
        html.contains("<title>desk lamp - Google Search</title>"),
        "{html}"
    );
    assert_eq!(html.matches("href=\"https://shop.example/p/").count(), 10);
}

#[tokio::test]
async fn serp_links_lead_to_matching_product_pages() {
    let sim = Sim::start(SimConfig::default()).await;
    let serp = sim
        .serp("https://www.google.com/search?q=espresso+grinder&brd_json=1")
        .await;
    let first = &serp["organic"][0];
    let page = sim.product(first["link"].as_str().unwrap(), "us").await;
    let ld = json_ld(&page);
    let name = ld["name"].as_str().unwrap();
    assert!(
        first["title"].as_str().unwrap().starts_with(name),
        "{first} vs {name}"
    );
    assert!(page.contains(&format!("<h1>{name}</h1>")));
}

#[tokio::test]
async fn product_pages_differ_by_country_and_carry_valid_json_ld() {
    let sim = Sim::start(SimConfig::default()).await;
    // A url whose page is well formed in every country.
    let mut url = String::new();
    for i in 0.. {
        url = format!("https://shop.example/p/item-{i}");
        if !is_malformed(&json_ld(&sim.product(&url, "us").await)) {
            break;
        }
    }
    let mut offers = Vec::new();
    for (country, currency) in [
        ("us", "USD"),
        ("de", "EUR"),
        ("fr", "EUR"),
        ("gb", "GBP"),
        ("jp", "JPY"),
        ("br", "USD"),
    ] {
        let page = sim.product(&url, country).await;
        assert!(page.contains("<h1>"), "{page}");
        let sku_line = page
            .lines()
            .find(|l| l.starts_with("<p>SKU: "))
            .expect("a SKU line");
        let sku = sku_line
            .trim_start_matches("<p>SKU: ")
            .trim_end_matches("</p>");
        assert!(sku.len() == 7 && sku.as_bytes()[2] == b'-', "{sku}");

        let ld = json_ld(&page);
        assert_eq!(ld["@context"], "https://schema.org");
        assert_eq!(ld["@type"], "Product");
        assert_eq!(ld["sku"], sku);
        assert!(!ld["name"].as_str().unwrap().is_empty());
        assert_eq!(ld["offers"]["@type"], "Offer");
        assert_eq!(ld["offers"]["priceCurrency"], currency, "{country}");
        let price = ld["offers"]["price"].as_f64().unwrap();
        assert!(price > 0.0);
        if currency == "JPY" {
            assert!(
                ld["offers"]["price"].is_u64(),
                "yen are whole: {}",
                ld["offers"]["price"]
            );
        }
        assert_eq!(
            sim.product(&url, country).await,
            page,
            "deterministic per (url, country)"
        );
        offers.push((price.to_string(), currency));
    }
    let (us, de, fr) = (&offers[0], &offers[1], &offers[2]);
    assert_ne!(us, de);
    assert_ne!(
        de.0, fr.0,
        "a per-country factor, not only a currency: {de:?} {fr:?}"
    );
}

#[tokio::test]
async fn a_small_share_of_pages_is_malformed_in_every_country() {
    let sim = Sim::start(SimConfig::default()).await;
    let mut malformed = 0;
    let mut kinds = [0; 3];
    for i in 0..400 {
        let url = format!("https://shop.example/p/widget-{i}");
        let us = json_ld(&sim.product(&url, "us").await);
        if !is_malformed(&us) {
            continue;
        }
        malformed += 1;
        let offer = &us["offers"];
        match (&offer["price"], offer["priceCurrency"].as_str().unwrap()) {
            (Value::Null, _) => kinds[0] += 1,
            (p, _) if p.as_f64().unwrap() < 0.0 => kinds[1] += 1,
            (_, c) => {
                assert_eq!(c, "usd");
                kinds[2] += 1;
            }
        }
        let jp = json_ld(&sim.product(&url, "jp").await);
        assert!(is_malformed(&jp), "every country agrees on {url}");
    }
    assert!(
        (8..=40).contains(&malformed),
        "{malformed} of 400 malformed"
    );
    assert!(
        kinds.iter().filter(|&&n| n > 0).count() >= 2,
        "defects vary: {kinds:?}"
    );
}

#[tokio::test]
async fn markdown_renders_the_same_product() {
    let sim = Sim::start(SimConfig::default()).await;
    let url = "https://shop.example/p/nordwind-kettle-00aa";
    let ld = json_ld(&sim.product(url, "us").await);
    let resp = sim
        .post(json!({"zone": "web_unlocker1", "url": url, "format": "raw", "data_format": "markdown"}))
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(header(&resp, "content-type").starts_with("text/markdown"));
    let md = resp.text().await.unwrap();
    assert!(md.starts_with("# Nordwind Kettle\n"), "{md}");
    assert!(
        md.contains(&format!("SKU: {}", ld["sku"].as_str().unwrap())),
        "{md}"
    );
    assert!(!md.contains("<script"));
}

#[tokio::test]
async fn format_json_wraps_the_page() {
    let sim = Sim::start(SimConfig::default()).await;
    let url = "https://shop.example/p/acme-toaster-0b1c";
    let raw = sim.product(url, "us").await;
    let resp = sim
        .post(json!({"zone": "web_unlocker1", "url": url, "format": "json"}))
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["status_code"], 200);
    assert!(
        v["headers"]["content-type"]
            .as_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert_eq!(v["body"], raw.as_str());
}

#[tokio::test]
async fn missing_or_wrong_token_is_401_without_brd_headers() {
    let sim = Sim::start(SimConfig::default()).await;
    let body = json!({"zone": "web_unlocker1", "url": "https://example.com/", "format": "raw"});
    let requests = [
        sim.client.post(sim.url()).json(&body),
        sim.client.post(sim.url()).bearer_auth("").json(&body),
        sim.client
            .post(sim.url())
            .bearer_auth("wrong-token")
            .json(&body),
        sim.client
            .post(sim.url())
            .basic_auth("user", Some(TOKEN))
            .json(&body),
    ];
    for req in requests {
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        assert!(
            resp.headers()
                .keys()
                .all(|k| !k.as_str().starts_with("x-brd")),
            "{:?}",
            resp.headers()
        );
        assert!(header(&resp, "content-type").starts_with("text/plain"));
        assert!(!resp.text().await.unwrap().is_empty());
    }
    assert_eq!(sim.handle.stats().rejected, 4);
}

#[tokio::test]
async fn any_token_is_accepted_when_none_is_configured() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let handle = spawn(SimConfig::default()).await.unwrap();
    let resp = reqwest::Client::new()
        .post(format!("{}/request", handle.base_url()))
        .bearer_auth("whatever")
        .json(&json!({"zone": "web_unlocker1", "url": "https://example.com/", "format": "raw"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test]
async fn unknown_zone_is_400_with_x_brd_error() {
    let sim = Sim::start(SimConfig::default()).await;
    let resp = sim
        .post(json!({"zone": "nope", "url": "https://example.com/", "format": "raw"}))
        .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(header(&resp, "x-brd-error"), "zone not found");
    assert_eq!(resp.text().await.unwrap().trim(), "zone \"nope\" not found");
}

#[tokio::test]
async fn malformed_requests_are_400() {
    let sim = Sim::start(SimConfig::default()).await;
    let not_json = sim
        .client
        .post(sim.url())
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(not_json.status(), StatusCode::BAD_REQUEST);
    let bodies = [
        json!({"url": "https://example.com/", "format": "raw"}),
        json!({"zone": "web_unlocker1", "format": "raw"}),
        json!({"zone": "", "url": "https://example.com/"}),
        json!({"zone": "web_unlocker1", "url": "not a url"}),
        json!({"zone": "web_unlocker1", "url": "ftp://example.com/file"}),
        json!({"zone": "web_unlocker1", "url": "https://example.com/", "format": "xml"}),
        json!({"zone": "web_unlocker1", "url": "https://example.com/", "country": "usa"}),
        json!({"zone": "serp_api1", "url": "https://example.com/", "format": "raw"}),
        json!({"zone": "serp_api1", "url": "https://www.google.com/search?gl=us", "format": "raw"}),
        json!(["zone", "url"]),
    ];
    for body in bodies {
        let resp = sim.post(body.clone()).await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{body}");
        assert!(!header(&resp, "x-brd-error").is_empty(), "{body}");
    }
    assert_eq!(sim.handle.stats().rejected, 11);
}

#[tokio::test]
async fn oversized_bodies_are_refused() {
    let sim = Sim::start(SimConfig::default()).await;
    let huge = "x".repeat(trawl_sim::BODY_LIMIT + 1);
    let resp = sim
        .post(json!({"zone": "web_unlocker1", "url": "https://example.com/", "pad": huge}))
        .await;
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        sim.handle.stats(),
        SimStats {
            requests: 1,
            rejected: 1,
            ..SimStats::default()
        }
    );
}

#[tokio::test]
async fn rate_limit_fault_gives_429_with_retry_after() {
    let faults = Faults::parse("429=1.0").unwrap();
    let sim = Sim::start(
        SimConfig::default()
            .with_faults(faults)
            .with_retry_after_secs(7),
    )
    .await;
    let resp = sim
        .post(json!({"zone": "web_unlocker1", "url": "https://example.com/", "format": "raw"}))
        .await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "7");
    assert_eq!(header(&resp, "x-brd-error-code"), "sr_rate_limit");
    assert_eq!(header(&resp, "x-brd-error"), "rate limit exceeded");
}

#[tokio::test]
async fn bad_gateway_fault_gives_502() {
    let sim = Sim::start(SimConfig::default().with_faults(Faults::parse("502=1").unwrap())).await;
    let resp = sim
        .post(json!({"zone": "serp_api1", "url": "https://www.google.com/search?q=x&brd_json=1", "format": "raw"}))
        .await;
    assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(
        header(&resp, "x-brd-error"),
        "Failed to establish connection with peer"
    );
    assert_eq!(header(&resp, "x-brd-error-code"), "reject_block");
}

#[tokio::test]
async fn faults_spare_requests_that_are_refused_anyway() {
    let sim = Sim::start(SimConfig::default().with_faults(Faults::parse("429=1").unwrap())).await;
    let unauthorized = sim
        .client
        .post(sim.url())
        .json(&json!({"zone": "web_unlocker1", "url": "https://example.com/"}))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);
    let bad_zone = sim
        .post(json!({"zone": "nope", "url": "https://example.com/"}))
        .await;
    assert_eq!(bad_zone.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn timeout_fault_outlasts_the_client_timeout() {
    let config = SimConfig::default()
        .with_faults(Faults::parse("timeout=1").unwrap())
        .with_hang(Duration::from_secs(30));
    let sim = Sim::start_with_client(
        config,
        reqwest::Client::builder().timeout(Duration::from_millis(200)),
    )
    .await;
    let started = tokio::time::Instant::now();
    let err = sim
        .client
        .post(sim.url())
        .bearer_auth(TOKEN)
        .json(&json!({"zone": "web_unlocker1", "url": "https://example.com/", "format": "raw"}))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(sim.handle.stats().timeouts, 1);
    assert_eq!(sim.handle.stats().ok, 0);
}

#[tokio::test]
async fn shutdown_answers_held_requests_and_drains() {
    let config = SimConfig::default()
        .with_faults(Faults::parse("timeout=1").unwrap())
        .with_hang(Duration::from_secs(600));
    let sim = Sim::start(config).await;
    let held = {
        let req = sim
            .client
            .post(sim.url())
            .bearer_auth(TOKEN)
            .json(&json!({"zone": "web_unlocker1", "url": "https://example.com/"}));
        tokio::spawn(req.send())
    };
    // Wait until the simulator holds the request, then shut it down.
    tokio::time::timeout(Duration::from_secs(10), async {
        while sim.handle.stats().timeouts == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the request reaches the simulator");
    let Sim { handle, client } = sim;
    tokio::time::timeout(Duration::from_secs(10), handle.shutdown())
        .await
        .expect("shutdown does not wait for the hang")
        .unwrap();
    let resp = held.await.unwrap().unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    drop(client);
}

#[tokio::test]
async fn dropping_the_handle_stops_the_server() {
    let sim = Sim::start(SimConfig::default()).await;
    let addr = sim.handle.addr();
    assert!(tokio::net::TcpStream::connect(addr).await.is_ok());
    drop(sim);
    tokio::time::timeout(Duration::from_secs(10), async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the listener closes after the handle is dropped");
}

#[tokio::test]
async fn latency_delays_every_answer() {
    let sim = Sim::start(SimConfig::default().with_latency(Duration::from_millis(150))).await;
    for body in [
        json!({"zone": "web_unlocker1", "url": "https://example.com/"}),
        json!({"zone": "nope", "url": "https://example.com/"}),
    ] {
        let started = tokio::time::Instant::now();
        sim.post(body).await;
        assert!(started.elapsed() >= Duration::from_millis(150));
    }
}

#[tokio::test]
async fn stats_count_every_outcome_exactly() {
    let faults = Faults::parse("429=0.3,502=0.3").unwrap();
    let sim = Sim::start(SimConfig::default().with_faults(faults)).await;
    let mut expected = SimStats::default();
    for i in 0..60 {
        let resp = sim
            .post(json!({"zone": "web_unlocker1", "url": format!("https://example.com/{i}"), "format": "raw"}))
            .await;
        match resp.status() {
            StatusCode::OK => expected.ok += 1,
            StatusCode::TOO_MANY_REQUESTS => expected.rate_limited += 1,
            StatusCode::BAD_GATEWAY => expected.bad_gateway += 1,
            other => panic!("unexpected {other}"),
        }
        expected.requests += 1;
    }
    for _ in 0..3 {
        let resp = sim.client.post(sim.url()).body("{}").send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        expected.requests += 1;
        expected.rejected += 1;
    }
    assert!(
        expected.ok > 0 && expected.rate_limited > 0 && expected.bad_gateway > 0,
        "{expected:?}"
    );
    assert_eq!(sim.handle.stats(), expected);

    let over_http: SimStats = sim
        .client
        .get(format!("{}/__sim/stats", sim.handle.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(over_http, expected);
}

/// A rough throughput check. Run it in release mode:
/// `cargo test --release -p trawl-sim --test http -- --ignored --nocapture throughput`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "timing-dependent; run in release mode"]
async fn throughput() {
    let sim = Sim::start(SimConfig::default()).await;
    let total = 20_000;
    let concurrency = 64;
    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for w in 0..concurrency {
        let client = sim.client.clone();
        let url = sim.url();
        tasks.push(tokio::spawn(async move {
            for i in (w..total).step_by(concurrency) {
                let body = if i % 2 == 0 {
                    json!({"zone": "web_unlocker1", "url": format!("https://shop.example/p/item-{i}"), "format": "raw", "country": "de"})
                } else {
                    json!({"zone": "serp_api1", "url": format!("https://www.google.com/search?q=item+{i}&brd_json=1"), "format": "raw"})
                };
                let resp = client.post(&url).bearer_auth(TOKEN).json(&body).send().await.unwrap();
                assert_eq!(resp.status(), StatusCode::OK);
                resp.bytes().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let rate = total as f64 / started.elapsed().as_secs_f64();
    println!("{rate:.0} requests/s (client and server sharing 2 worker threads)");
    assert_eq!(sim.handle.stats().ok, total as u64);
    assert!(rate > 3000.0, "{rate:.0} requests/s");
}
