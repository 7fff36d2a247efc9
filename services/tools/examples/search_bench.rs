//! Latency of tool search on a large synthetic catalog.
//!
//! Generates a deterministic catalog of N tools (`crm.get_contact_by_email`,
//! `billing.create_invoice`, ...: server × verb × noun, descriptions of 15–40
//! words, 1–6 parameters with descriptions), builds a [`SearchIndex`] over it,
//! then runs Q queries of 2–5 words from the same vocabulary and prints the build
//! time and the query latency percentiles.
//!
//! ```text
//! cargo run --release -p trawl-tools --example search_bench -- --tools 10000 --queries 2000
//! ```
//!
//! Options: `--tools N` (10000), `--queries Q` (2000), `--limit K` (10), `--seed S` (7).
//!
//! `--hybrid` measures the search as `tool_search` runs it with a model: each
//! query embedded by the sentence embedding model (`TRAWL_EMBED_MODEL`, or the
//! tests' `tests/models/all-minilm-l6-v2`), then BM25 and the dense half over a
//! [`Catalog`](trawl_tools::Catalog) of the N tools, fused. Every query is
//! distinct, so none is answered from the memo of query vectors. The tools'
//! vectors are random unit vectors (embedding 10,000 tools would take minutes,
//! and what a dot product costs does not depend on the values); the figure is
//! per search, embedding included. It also prints the process's peak RSS
//! before and after loading the model.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use trawl_core::ports::ToolDef;
use trawl_tools::search::SearchIndex;

const SERVERS: &str = "\
    crm billing github gitlab jira linear slack discord notion confluence drive dropbox \
    box gmail outlook calendar zoom teams stripe paypal shopify salesforce hubspot \
    zendesk intercom twilio sendgrid mailchimp airtable sheets postgres mysql redis \
    mongo elastic s3 gcs kubernetes docker aws azure gcp datadog sentry pagerduty figma \
    asana trello brightdata weather";

const VERBS: &str = "\
    get list create update delete search find fetch send cancel archive restore export \
    import sync merge assign approve reject publish schedule upload download share move \
    copy rename tag comment close open resolve retry refund charge invite remove lookup \
    count validate";

const NOUNS: &str = "\
    contact invoice customer order payment subscription refund charge product price \
    coupon discount cart checkout shipment address user team member role permission \
    group organization workspace project repository branch commit pull_request issue \
    label milestone release tag pipeline job build deployment environment secret \
    variable webhook event notification message channel thread reaction file folder \
    document page block database table row column record field view report dashboard \
    chart metric alert incident monitor log trace span error exception ticket comment \
    attachment task subtask sprint board card list calendar meeting attendee recording \
    transcript email draft mailbox folder_rule signature template campaign audience \
    segment lead opportunity deal account quote contract vendor supplier employee \
    timesheet expense budget forecast weather location city country region zone cluster \
    node pod container image volume bucket object key index query snapshot backup \
    certificate domain dns_record endpoint route policy rule schedule cron workflow step \
    run artifact package dependency license vulnerability scan audit session token \
    credential invitation preference";

/// Words that only appear in prose.
const FILLER: &str = "\
    the a an of for with by in to from and or returns given matching all current new \
    existing optional required recent paginated filtered sorted single multiple status \
    details metadata identifier name owner date time range limit offset cursor format \
    json csv markdown html url link id email phone amount currency total summary \
    description title priority state visibility public private archived active pending \
    failed successful latest first last default custom field value result response \
    request api account user access read write only permissions scope";

const PARAM_SUFFIXES: &str = "\
    id ids name email limit cursor status type since until query filter sort format \
    count url title body tags owner";

struct Options {
    tools: usize,
    queries: usize,
    limit: usize,
    seed: u64,
    hybrid: bool,
}

fn options() -> Options {
    let mut o = Options {
        tools: 10_000,
        queries: 2_000,
        limit: 10,
        seed: 7,
        hybrid: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = |args: &mut dyn Iterator<Item = String>| -> u64 {
            let v = args.next().unwrap_or_default();
            v.parse()
                .unwrap_or_else(|_| usage(&format!("{flag} needs a number, not {v:?}")))
        };
        match flag.as_str() {
            "--tools" => o.tools = value(&mut args) as usize,
            "--queries" => o.queries = value(&mut args) as usize,
            "--limit" => o.limit = value(&mut args) as usize,
            "--seed" => o.seed = value(&mut args),
            "--hybrid" => o.hybrid = true,
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    o
}

fn usage(problem: &str) -> ! {
    if !problem.is_empty() {
        eprintln!("search_bench: {problem}");
    }
    eprintln!("usage: search_bench [--tools N] [--queries Q] [--limit K] [--seed S] [--hybrid]");
    std::process::exit(if problem.is_empty() { 0 } else { 2 })
}

/// Draws names, prose and queries from the word lists, deterministically.
struct Generator {
    rng: fastrand::Rng,
    servers: Vec<&'static str>,
    verbs: Vec<&'static str>,
    nouns: Vec<&'static str>,
    filler: Vec<&'static str>,
    suffixes: Vec<&'static str>,
}

impl Generator {
    fn new(seed: u64) -> Generator {
        let words = |list: &'static str| list.split_whitespace().collect();
        Generator {
            rng: fastrand::Rng::with_seed(seed),
            servers: words(SERVERS),
            verbs: words(VERBS),
            nouns: words(NOUNS),
            filler: words(FILLER),
            suffixes: words(PARAM_SUFFIXES),
        }
    }

    fn pick(rng: &mut fastrand::Rng, words: &[&'static str]) -> &'static str {
        words[rng.usize(..words.len())]
    }

    fn verb(&mut self) -> &'static str {
        Self::pick(&mut self.rng, &self.verbs)
    }

    fn noun(&mut self) -> &'static str {
        Self::pick(&mut self.rng, &self.nouns)
    }

    /// A word of prose: skewed towards the front of each list, as real text is.
    fn prose_word(&mut self) -> &'static str {
        let list = match self.rng.u8(..10) {
            0..=3 => &self.filler,
            4..=7 => &self.nouns,
            _ => &self.verbs,
        };
        let r = self.rng.f64();
        list[((r * r) * list.len() as f64) as usize]
    }

    fn sentence(&mut self, min: usize, max: usize) -> String {
        let n = self.rng.usize(min..=max);
        let words: Vec<&str> = (0..n).map(|_| self.prose_word()).collect();
        format!("{}.", words.join(" "))
    }

    fn tool(&mut self) -> ToolDef {
        let server = Self::pick(&mut self.rng, &self.servers);
        let (verb, noun) = (self.verb(), self.noun());
        let name = match self.rng.u8(..4) {
            0 => format!("{server}.{verb}_{noun}_by_{}", self.noun()),
            1 => format!("{server}.{}", camel(&format!("{verb}_{noun}"))),
            _ => format!("{server}.{verb}_{noun}"),
        };
        let mut properties = Map::new();
        for _ in 0..self.rng.usize(1..=6) {
            let suffix = Self::pick(&mut self.rng, &self.suffixes);
            let param = format!("{}_{suffix}", self.noun());
            let param = if self.rng.bool() {
                camel(&param)
            } else {
                param
            };
            let description = self.sentence(4, 12);
            properties.insert(param, json!({"type": "string", "description": description}));
        }
        ToolDef {
            name,
            title: None,
            description: format!("Tool to {verb} {noun}: {}", self.sentence(15, 40)),
            input_schema: json!({"type": "object", "properties": Value::Object(properties)}),
            output_schema: None,
            annotations: Value::Null,
            input_examples: Vec::new(),
        }
    }

    /// 2–5 words, each a verb, a noun or a prose word, uniformly.
    fn query(&mut self) -> String {
        let n = self.rng.usize(2..=5);
        let words: Vec<&str> = (0..n)
            .map(|_| match self.rng.u8(..3) {
                0 => self.verb(),
                1 => self.noun(),
                _ => Self::pick(&mut self.rng, &self.filler),
            })
            .collect();
        words.join(" ")
    }
}

fn camel(snake: &str) -> String {
    let mut out = String::new();
    for (i, part) in snake.split('_').enumerate() {
        let mut chars = part.chars();
        match chars.next() {
            Some(first) if i > 0 => out.extend(first.to_uppercase()),
            Some(first) => out.push(first),
            None => {}
        }
        out.push_str(chars.as_str());
    }
    out
}

fn print_latency(sorted: &[Duration]) {
    println!(
        "latency µs: p50 {:.1}  p90 {:.1}  p99 {:.1}  max {:.1}",
        percentile(sorted, 0.50),
        percentile(sorted, 0.90),
        percentile(sorted, 0.99),
        percentile(sorted, 1.0),
    );
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn main() {
    let o = options();
    let mut generator = Generator::new(o.seed);
    let defs: Vec<ToolDef> = (0..o.tools).map(|_| generator.tool()).collect();
    if o.hybrid {
        hybrid(&o, &mut generator, defs);
        return;
    }

    let started = Instant::now();
    let index = SearchIndex::build(&defs);
    let build = started.elapsed();
    println!(
        "catalog: {} tools; index built in {:.1} ms",
        index.len(),
        build.as_secs_f64() * 1e3
    );
    if o.queries == 0 {
        return;
    }

    let queries: Vec<String> = (0..o.queries).map(|_| generator.query()).collect();
    // Warm up caches and the allocator.
    for q in queries.iter().take(100) {
        black_box(index.search(q, o.limit));
    }

    let mut latencies = Vec::with_capacity(queries.len());
    let mut hits = 0usize;
    let started = Instant::now();
    for q in &queries {
        let t = Instant::now();
        let found = black_box(index.search(black_box(q), o.limit));
        latencies.push(t.elapsed());
        hits += found.len();
    }
    let total = started.elapsed();
    latencies.sort_unstable();

    println!(
        "queries: {} (limit {}), {:.1} hits each on average",
        queries.len(),
        o.limit,
        hits as f64 / queries.len() as f64
    );
    print_latency(&latencies);
    println!(
        "throughput: {:.0} queries/s (one thread)",
        queries.len() as f64 / total.as_secs_f64()
    );
    if let Some(q) = queries.first() {
        let top: Vec<&str> = index
            .search(q, 3)
            .iter()
            .map(|h| defs[h.index].name.as_str())
            .collect();
        println!("example: {q:?} → {top:?}");
    }
}

/// The peak resident set of this process, from `/proc/self/status` (`VmHWM`), in MiB.
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// `--hybrid`: the query embedded, then both halves and their fusion.
fn hybrid(o: &Options, generator: &mut Generator, defs: Vec<ToolDef>) {
    use trawl_tools::catalog::{Listing, assemble};
    use trawl_tools::name::ServerName;

    // One listing per server of the generated names, as a catalog holds them.
    let mut by_server: std::collections::BTreeMap<String, Vec<Value>> = Default::default();
    for d in &defs {
        let (server, bare) = d.name.split_once('.').unwrap();
        let mut raw = serde_json::to_value(d).unwrap();
        raw["name"] = json!(bare);
        by_server.entry(server.to_owned()).or_default().push(raw);
    }
    let listings: Vec<Listing> = by_server
        .into_iter()
        .map(|(server, tools)| {
            Listing::upstream(ServerName::parse(&server).unwrap(), "stdio", tools)
        })
        .collect();
    let (mut catalog, _) = assemble(&listings, None);
    let n = catalog.listed().count();
    let mut rng = fastrand::Rng::with_seed(o.seed);
    let vectors: Vec<Vec<f32>> = (0..n)
        .map(|_| {
            let v: Vec<f32> = (0..384).map(|_| rng.f32() - 0.5).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / norm).collect()
        })
        .collect();
    assert!(catalog.set_vectors(&vectors));
    let before = peak_rss_mib();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = std::env::var_os("TRAWL_EMBED_MODEL").map_or_else(
        || {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/models/all-minilm-l6-v2")
        },
        std::path::PathBuf::from,
    );
    let embeddings = runtime
        .block_on(trawl_tools::embed::Embeddings::load(&dir, None))
        .unwrap();
    let loaded = peak_rss_mib();

    let mut seen = std::collections::HashSet::new();
    let queries: Vec<String> = std::iter::repeat_with(|| generator.query())
        .filter(|q| seen.insert(q.clone()))
        .take(o.queries + 20)
        .collect();
    let embedding = std::cell::Cell::new(Duration::ZERO);
    let search = |q: &str| {
        let t = Instant::now();
        let vector = runtime.block_on(embeddings.query(q)).unwrap();
        embedding.set(embedding.get() + t.elapsed());
        let query = trawl_tools::search::Query {
            text: q.to_owned(),
            vector: Some(vector),
        };
        black_box(catalog.search(&query, o.limit).len())
    };
    // Warm up on queries not measured.
    for q in queries.iter().take(20) {
        search(q);
    }
    let mut latencies = Vec::with_capacity(o.queries);
    embedding.set(Duration::ZERO);
    let started = Instant::now();
    for q in queries.iter().skip(20) {
        let t = Instant::now();
        search(q);
        latencies.push(t.elapsed());
    }
    let total = started.elapsed();
    latencies.sort_unstable();
    println!(
        "hybrid: {n} tools with vectors; {} distinct queries embedded and searched (limit {})",
        latencies.len(),
        o.limit
    );
    print_latency(&latencies);
    println!(
        "of which embedding the query: {:.1} µs on average",
        embedding.get().as_secs_f64() * 1e6 / latencies.len().max(1) as f64
    );
    println!(
        "throughput: {:.0} searches/s; peak RSS {before:.0} MiB with the catalog, {loaded:.0} MiB with the model loaded ({:.0} MiB for the model), {:.0} MiB at the end",
        latencies.len() as f64 / total.as_secs_f64(),
        loaded - before,
        peak_rss_mib()
    );
}
