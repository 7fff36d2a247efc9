#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use trawl_core::cost::Micros;
use trawl_core::geo::Geo;
use trawl_core::model::*;
use trawl_core::ports::{JobRecord, Store};
use trawl_store::SqliteStore;

fn search(i: usize) -> SliceSpec {
    SliceSpec::new(
        SliceKind::Search { query: format!("query number {i}"), geo: Geo::parse("us").unwrap(), engine: Engine::Google, follow_top: 0 },
        None,
    )
}

fn outcome(s: &SliceSpec) -> SliceOutcome {
    SliceOutcome {
        items: vec![Item { slice_id: s.id.clone(), seq: 0, kind: ItemKind::Page, url: "https://shop.example/p/123".into(), geo: Geo::parse("us").unwrap(), data: json!({"title": "A thing", "price": {"amount": 19.99, "currency": "USD"}, "rating": 4.5, "availability": "in_stock"}) }],
        rejections: vec![],
        trace: (0..2).map(|seq| TraceStep { slice_id: s.id.clone(), seq, tool: "brightdata.fetch".into(), args_digest: "ab".repeat(32), cache_hit: seq == 1, attempt: 1, status: "ok".into(), error: None, latency_us: 1234, cost: Micros(1500), at_ms: 1 }).collect(),
        costs: vec![CostEntry { slice_id: s.id.clone(), seq: 0, product: "unlocker".into(), amount: Micros(1500) }],
        children: vec![],
        error: None,
    }
}

#[tokio::main]
async fn main() {
    let workers: usize = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(1);
    let n: usize = std::env::args().nth(2).map(|s| s.parse().unwrap()).unwrap_or(10_000);
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("b.db")).await.unwrap());

    let big: Vec<SliceSpec> = (0..100_000).map(search).collect();
    let t = Instant::now();
    let job0 = JobRecord { id: JobId::generate(1, 1), name: "big".into(), spec: json!({}), status: JobStatus::Queued, reason: None, estimate: Micros(0), created_ms: 0 };
    store.create_job(&job0, &big).await.unwrap();
    println!("create_job 100k slices: {:?}", t.elapsed());

    let slices: Vec<SliceSpec> = (0..n).map(|i| search(1_000_000 + i)).collect();
    let job = JobRecord { id: JobId::generate(2, 2), name: "run".into(), spec: json!({}), status: JobStatus::Running, reason: None, estimate: Micros(0), created_ms: 0 };
    store.create_job(&job, &slices).await.unwrap();
    let outcomes: Arc<Vec<(SliceSpec, SliceOutcome)>> = Arc::new(slices.iter().map(|s| (s.clone(), outcome(s))).collect());

    let t = Instant::now();
    let mut handles = vec![];
    for w in 0..workers {
        let store = store.clone();
        let outcomes = outcomes.clone();
        let id = job.id.clone();
        handles.push(tokio::spawn(async move {
            for (s, o) in outcomes.iter().skip(w).step_by(workers) {
                let r = store.record_outcome(&id, &s.id, o).await.unwrap();
                assert!(r.written);
            }
        }));
    }
    // a poller like the scheduler's, once every 100ms here
    let poller = {
        let store = store.clone();
        let id = job.id.clone();
        tokio::spawn(async move {
            let mut worst = std::time::Duration::ZERO;
            loop {
                let t = Instant::now();
                let c = store.counts(&id).await.unwrap();
                worst = worst.max(t.elapsed());
                if c.slices_open() == 0 { return worst; }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        })
    };
    for h in handles { h.await.unwrap(); }
    let el = t.elapsed();
    let worst = poller.await.unwrap();
    let c = store.counts(&job.id).await.unwrap();
    println!("workers={workers} n={n}: {:?}, {:.0} record_outcome/s; counts worst {:?}; {:?}", el, n as f64 / el.as_secs_f64(), worst, c);
}
