#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::time::Duration;

use serde_json::json;
use tempfile::TempDir;
use trawl_core::geo::Geo;
use trawl_core::model::{
    CostEntry, Engine, ItemKind, SliceError, SliceKind, SliceStatus, TraceStep, Violation,
};

use super::rows::{rows_per_statement, values_sql};
use super::*;

// ---------------------------------------------------------------------------
// Harness

/// One store in a file of its own temporary directory and one in memory; each test
/// runs against both.
async fn stores() -> (TempDir, Vec<SqliteStore>) {
    let dir = tempfile::tempdir().unwrap();
    let file = SqliteStore::open(&dir.path().join("trawl.db"))
        .await
        .unwrap();
    let memory = SqliteStore::memory().await.unwrap();
    (dir, vec![file, memory])
}

fn geo(s: &str) -> Geo {
    Geo::parse(s).unwrap()
}

fn search(query: &str) -> SliceSpec {
    SliceSpec::new(
        SliceKind::Search {
            query: query.into(),
            geo: geo("us"),
            engine: Engine::Google,
            follow_top: 2,
        },
        None,
    )
}

fn page(url: &str, parent: &SliceSpec) -> SliceSpec {
    SliceSpec::new(
        SliceKind::Page {
            url: url.into(),
            geo: geo("de"),
        },
        Some(parent.id.clone()),
    )
}

fn job_record(n: u64) -> JobRecord {
    JobRecord {
        id: JobId::generate(1_700_000_000_000, 0xfeed_0000 + n),
        name: format!("job {n}"),
        spec: json!({"name": format!("job {n}"), "queries": ["a", "b"]}),
        status: JobStatus::Queued,
        reason: None,
        estimate: Micros(4_500),
        created_ms: 1_700_000_000_000,
    }
}

async fn new_job(store: &SqliteStore, n: u64, slices: &[SliceSpec]) -> JobId {
    let job = job_record(n);
    store.create_job(&job, slices).await.unwrap();
    job.id
}

fn item(slice: &SliceSpec, seq: u32) -> Item {
    Item {
        slice_id: slice.id.clone(),
        seq,
        kind: ItemKind::Page,
        url: format!("https://shop.example/p/{seq}"),
        geo: geo("de"),
        data: json!({"title": format!("thing {seq}"), "price": {"amount": 9.99, "currency": "EUR"}}),
    }
}

fn rejection(slice: &SliceSpec, seq: u32) -> Rejection {
    Rejection {
        slice_id: slice.id.clone(),
        seq,
        url: format!("https://shop.example/bad/{seq}"),
        geo: geo("de"),
        data: json!({"title": null}),
        errors: vec![Violation {
            path: "/title".into(),
            message: "null is not of type \"string\"".into(),
        }],
    }
}

fn step(slice: &SliceSpec, seq: u32, cache_hit: bool) -> TraceStep {
    TraceStep {
        slice_id: slice.id.clone(),
        seq,
        tool: "brightdata.fetch".into(),
        args_digest: format!("{seq:064x}"),
        cache_hit,
        attempt: u32::from(!cache_hit),
        status: "ok".into(),
        error: None,
        latency_us: 12_345,
        cost: Micros(if cache_hit { 0 } else { 1_500 }),
        at_ms: 1_700_000_000_123,
    }
}

fn cost(slice: &SliceSpec, seq: u32, amount: i64) -> CostEntry {
    CostEntry {
        slice_id: slice.id.clone(),
        seq,
        product: "unlocker".into(),
        amount: Micros(amount),
    }
}

fn failure(code: &str) -> SliceOutcome {
    SliceOutcome {
        error: Some(SliceError {
            code: code.into(),
            message: format!("{code} happened"),
        }),
        ..SliceOutcome::default()
    }
}

/// The counts computed from the rows themselves, to check the trigger-kept counters.
async fn recount(store: &SqliteStore, job: &JobId) -> JobCounts {
    let row = sqlx::query(
        "SELECT \
         (SELECT COUNT(*) FROM slices WHERE job_id = ?1) AS slices_total, \
         (SELECT COUNT(*) FROM slices WHERE job_id = ?1 AND status = 'succeeded') \
            AS slices_succeeded, \
         (SELECT COUNT(*) FROM slices WHERE job_id = ?1 AND status = 'failed') AS slices_failed, \
         (SELECT COUNT(*) FROM slices WHERE job_id = ?1 AND status = 'failed' \
            AND error_code = 'budget_exhausted') AS budget_stops, \
         (SELECT COUNT(*) FROM items WHERE job_id = ?1) AS items_valid, \
         (SELECT COUNT(*) FROM rejections WHERE job_id = ?1) AS items_rejected, \
         (SELECT COUNT(*) FROM trace_steps WHERE job_id = ?1 AND cache_hit = 0) \
            AS upstream_calls, \
         (SELECT COUNT(*) FROM trace_steps WHERE job_id = ?1 AND cache_hit = 1) AS cache_hits, \
         (SELECT COALESCE(SUM(amount), 0) FROM costs WHERE job_id = ?1) AS cost",
    )
    .bind(job.as_str())
    .fetch_one(&mut *store.conn().await.unwrap())
    .await
    .unwrap();
    job_counts(&row).unwrap()
}

async fn slice_status(store: &SqliteStore, job: &JobId, slice: &SliceId) -> SliceStatus {
    let s: String =
        sqlx::query_scalar("SELECT status FROM slices WHERE job_id = ? AND slice_id = ?")
            .bind(job.as_str())
            .bind(slice.as_str())
            .fetch_one(&mut *store.conn().await.unwrap())
            .await
            .unwrap();
    SliceStatus::parse(&s).unwrap()
}

// ---------------------------------------------------------------------------
// Tests

#[tokio::test]
async fn a_created_job_reads_back_with_its_slices_pending() {
    let (_dir, stores) = stores().await;
    for store in stores {
        let slices = vec![search("laptop"), search("phone"), search("tablet")];
        let job = job_record(1);
        store.create_job(&job, &slices).await.unwrap();

        let back = store.job(&job.id).await.unwrap().unwrap();
        assert_eq!(back.id, job.id);
        assert_eq!(back.name, job.name);
        assert_eq!(back.spec, job.spec);
        assert_eq!(back.status, JobStatus::Queued);
        assert_eq!(back.estimate, Micros(4_500));
        assert_eq!(back.created_ms, job.created_ms);

        let counts = store.counts(&job.id).await.unwrap();
        assert_eq!(
            counts,
            JobCounts {
                slices_total: 3,
                ..JobCounts::default()
            }
        );
        assert_eq!(counts, recount(&store, &job.id).await);
        assert_eq!(store.spent(&job.id).await.unwrap(), Micros::ZERO);

        let mut expected = slices.clone();
        expected.sort_by(|a, b| a.id.cmp(&b.id));
        assert_eq!(store.open_slices(&job.id).await.unwrap(), expected);

        let other = job_record(2).id;
        assert!(store.job(&other).await.unwrap().is_none());
        assert!(matches!(
            store.counts(&other).await,
            Err(PortError::NotFound(_))
        ));
    }
}

#[tokio::test]
async fn a_job_id_cannot_be_created_twice() {
    let (_dir, stores) = stores().await;
    for store in stores {
        let id = new_job(&store, 1, &[search("a")]).await;
        let again = store.create_job(&job_record(1), &[search("b")]).await;
        assert!(again.is_err(), "{again:?}");
        // All or nothing: the second call's slice is not there.
        assert_eq!(store.counts(&id).await.unwrap().slices_total, 1);
    }
}

#[tokio::test]
async fn an_outcome_is_written_once_and_a_redelivery_writes_nothing() {
    let (_dir, stores) = stores().await;
    for store in stores {
        let root = search("laptop");
        let other = search("phone");
        let job = new_job(&store, 1, &[root.clone(), other.clone()]).await;

        let children = vec![
            page("https://shop.example/p/0", &root),
            page("https://shop.example/p/1", &root),
        ];
        let outcome = SliceOutcome {
            items: vec![item(&root, 0), item(&root, 1)],
            rejections: vec![rejection(&root, 2)],
            trace: vec![
                step(&root, 0, false),
                step(&root, 1, false),
                step(&root, 2, true),
            ],
            costs: vec![cost(&root, 0, 1_500), cost(&root, 1, 2_500)],
            children: children.clone(),
            error: None,
        };
        let rec = store
            .record_outcome(&job, &root.id, &outcome)
            .await
            .unwrap();
        assert!(rec.written);
        assert_eq!(rec.new_children, children);

        let want = JobCounts {
            slices_total: 4,
            slices_succeeded: 1,
            slices_failed: 0,
            items_valid: 2,
            items_rejected: 1,
            upstream_calls: 2,
            cache_hits: 1,
            cost: Micros(4_000),
            budget_stops: 0,
        };
        assert_eq!(store.counts(&job).await.unwrap(), want);
        assert_eq!(recount(&store, &job).await, want);
        assert_eq!(store.spent(&job).await.unwrap(), Micros(4_000));
        assert_eq!(
            slice_status(&store, &job, &root.id).await,
            SliceStatus::Succeeded
        );
        let open: Vec<SliceId> = store
            .open_slices(&job)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(open.len(), 3);
        assert!(!open.contains(&root.id));

        // A redelivery with a different (failed, bigger) outcome changes nothing.
        let mut again = failure("timeout");
        again.items = vec![item(&root, 5)];
        again.costs = vec![cost(&root, 7, 99_000)];
        again.children = vec![page("https://shop.example/p/9", &root)];
        let rec = store.record_outcome(&job, &root.id, &again).await.unwrap();
        assert!(!rec.written);
        assert!(rec.new_children.is_empty());
        assert_eq!(store.counts(&job).await.unwrap(), want);
        assert_eq!(store.items(&job).await.unwrap(), outcome.items);
        assert_eq!(
            slice_status(&store, &job, &root.id).await,
            SliceStatus::Succeeded
        );
    }
}

#[tokio::test]
async fn children_already_in_the_job_are_not_new() {
    let (_dir, stores) = stores().await;
    for store in stores {
        let a = search("a");
        let b = search("b");
        let job = new_job(&store, 1, &[a.clone(), b.clone()]).await;
        let c = page("https://shop.example/c", &a);
        let outcome = SliceOutcome {
            // b is planned already; c is listed twice.
            children: vec![b.clone(), c.clone(), c.clone()],
            ..SliceOutcome::default()
        };
        let rec = store.record_outcome(&job, &a.id, &outcome).await.unwrap();
        assert_eq!(rec.new_children, vec![c.clone()]);
        assert_eq!(store.counts(&job).await.unwrap().slices_total, 3);

        // A child that another slice added earlier is not new either.
        let d = page("https://shop.example/d", &b);
        let outcome = SliceOutcome {
            children: vec![c.clone(), d.clone()],
            ..SliceOutcome::default()
        };
        let rec = store.record_outcome(&job, &b.id, &outcome).await.unwrap();
        assert_eq!(rec.new_children, vec![d]);
        let counts = store.counts(&job).await.unwrap();
        assert_eq!(counts.slices_total, 4);
        assert_eq!(counts, recount(&store, &job).await);
    }
}

#[tokio::test]
async fn items_and_rejections_round_trip_in_slice_order() {
    let (_dir, stores) = stores().await;
    for store in stores {
        let mut slices = vec![search("one"), search("two"), search("three")];
        let job = new_job(&store, 1, &slices).await;
        // Written in reverse slice order, seqs out of order within a slice.
        for s in slices.iter().rev() {
            let outcome = SliceOutcome {
                items: vec![item(s, 2), item(s, 0), item(s, 1)],
                rejections: vec![rejection(s, 4), rejection(s, 3)],
                ..SliceOutcome::default()
            };
            store.record_outcome(&job, &s.id, &outcome).await.unwrap();
        }
        slices.sort_by(|a, b| a.id.cmp(&b.id));
        let want_items: Vec<Item> = slices
            .iter()
            .flat_map(|s| (0..3).map(|i| item(s, i)))
            .collect();
        let want_rejections: Vec<Rejection> = slices
            .iter()
            .flat_map(|s| (3..5).map(|i| rejection(s, i)))
            .collect();
        assert_eq!(store.items(&job).await.unwrap(), want_items);
        assert_eq!(store.rejections(&job).await.unwrap(), want_rejections);
    }
}

#[tokio::test]
async fn failed_slices_are_counted_and_listed() {
    let (_dir, stores) = stores().await;
    for store in stores {
        let a = search("budget");
        let root = search("root");
        let b = page("https://shop.example/x", &root);
        let ok = search("fine");
        let job = new_job(&store, 1, &[a.clone(), b.clone(), ok.clone()]).await;

        store
            .record_outcome(&job, &a.id, &failure("budget_exhausted"))
            .await
            .unwrap();
        store
            .record_outcome(&job, &b.id, &failure("http_429"))
            .await
            .unwrap();
        store
            .record_outcome(&job, &ok.id, &SliceOutcome::default())
            .await
            .unwrap();

        let counts = store.counts(&job).await.unwrap();
        assert_eq!(counts.slices_failed, 2);
        assert_eq!(counts.slices_succeeded, 1);
        assert_eq!(counts.budget_stops, 1);
        assert_eq!(counts.slices_open(), 0);
        assert_eq!(counts, recount(&store, &job).await);

        let failed = store.failed_slices(&job, 10).await.unwrap();
        assert_eq!(failed.len(), 2);
        let fa = failed.iter().find(|f| f.slice_id == a.id).unwrap();
        assert_eq!(
            (fa.kind.as_str(), fa.subject.as_str(), fa.geo.as_str()),
            ("search", "budget", "us")
        );
        assert_eq!(fa.error.code, "budget_exhausted");
        assert_eq!(fa.error.message, "budget_exhausted happened");
        let fb = failed.iter().find(|f| f.slice_id == b.id).unwrap();
        assert_eq!(
            (fb.kind.as_str(), fb.subject.as_str(), fb.geo.as_str()),
            ("page", "https://shop.example/x", "de")
        );
        assert_eq!(fb.error.code, "http_429");
        assert_eq!(store.failed_slices(&job, 1).await.unwrap().len(), 1);
    }
}

#[tokio::test]
async fn unknown_jobs_and_slices_are_not_found() {
    let (_dir, stores) = stores().await;
    for store in stores {
        let a = search("a");
        let job = new_job(&store, 1, std::slice::from_ref(&a)).await;
        let stranger = search("never planned");
        assert!(matches!(
            store
                .record_outcome(&job, &stranger.id, &SliceOutcome::default())
                .await,
            Err(PortError::NotFound(_))
        ));
        let nobody = job_record(9).id;
        assert!(matches!(
            store
                .set_job_status(&nobody, JobStatus::Running, None)
                .await,
            Err(PortError::NotFound(_))
        ));
        assert!(matches!(
            store
                .request_approval(&Approval {
                    job_id: nobody.clone(),
                    amount: Micros(1),
                    reason: "x".into(),
                    approved: None,
                    decided_by: None,
                })
                .await,
            Err(PortError::NotFound(_))
        ));
        assert_eq!(
            store.counts(&job).await.unwrap(),
            recount(&store, &job).await
        );
    }
}

#[tokio::test]
async fn job_status_and_reason_are_set() {
    let (_dir, stores) = stores().await;
    for store in stores {
        let job = new_job(&store, 1, &[]).await;
        store
            .set_job_status(&job, JobStatus::Cancelled, Some("asked to"))
            .await
            .unwrap();
        let back = store.job(&job).await.unwrap().unwrap();
        assert_eq!(back.status, JobStatus::Cancelled);
        assert_eq!(back.reason.as_deref(), Some("asked to"));
        store
            .set_job_status(&job, JobStatus::Running, None)
            .await
            .unwrap();
        let back = store.job(&job).await.unwrap().unwrap();
        assert_eq!(back.status, JobStatus::Running);
        assert_eq!(back.reason, None);
    }
}

#[tokio::test]
async fn an_approval_is_replaced_while_pending_and_decided_once() {
    let (_dir, stores) = stores().await;
    for store in stores {
        let job = new_job(&store, 1, &[]).await;
        assert_eq!(
            store.decide_approval(&job, true, "alice").await.unwrap(),
            None
        );

        let ask = |amount: i64, reason: &str| Approval {
            job_id: job.clone(),
            amount: Micros(amount),
            reason: reason.into(),
            approved: None,
            decided_by: None,
        };
        store.request_approval(&ask(5_000, "first")).await.unwrap();
        store.request_approval(&ask(7_000, "second")).await.unwrap();

        let decided = store.decide_approval(&job, true, "alice").await.unwrap();
        assert_eq!(
            decided,
            Some(Approval {
                approved: Some(true),
                decided_by: Some("alice".into()),
                ..ask(7_000, "second")
            })
        );
        assert_eq!(
            store.decide_approval(&job, false, "bob").await.unwrap(),
            None
        );

        // A new request after a decision is pending again.
        store.request_approval(&ask(9_000, "more")).await.unwrap();
        let decided = store.decide_approval(&job, false, "bob").await.unwrap();
        assert_eq!(
            decided.map(|a| (a.amount, a.approved)),
            Some((Micros(9_000), Some(false)))
        );

        let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM approvals WHERE job_id = ?")
            .bind(job.as_str())
            .fetch_one(&mut *store.conn().await.unwrap())
            .await
            .unwrap();
        assert_eq!(rows, 2, "the replaced request is not kept");
    }
}

#[tokio::test]
async fn a_job_survives_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trawl.db");
    let a = search("persist");
    let outcome = SliceOutcome {
        items: vec![item(&a, 0)],
        trace: vec![step(&a, 0, false)],
        costs: vec![cost(&a, 0, 1_500)],
        ..SliceOutcome::default()
    };

    let store = SqliteStore::open(&path).await.unwrap();
    let job = new_job(&store, 1, &[a.clone(), search("still open")]).await;
    store.record_outcome(&job, &a.id, &outcome).await.unwrap();
    let counts = store.counts(&job).await.unwrap();
    store.close().await;
    drop(store);

    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.job(&job).await.unwrap().unwrap().name, "job 1");
    assert_eq!(store.counts(&job).await.unwrap(), counts);
    assert_eq!(counts.items_valid, 1);
    assert_eq!(store.items(&job).await.unwrap(), outcome.items);
    assert_eq!(store.open_slices(&job).await.unwrap().len(), 1);
    let version: i64 = sqlx::query_scalar("PRAGMA user_version")
        .fetch_one(&mut *store.conn().await.unwrap())
        .await
        .unwrap();
    assert_eq!(version, i64::try_from(MIGRATIONS.len()).unwrap());
    let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut *store.conn().await.unwrap())
        .await
        .unwrap();
    assert_eq!(journal, "wal");
}

#[tokio::test]
async fn a_database_from_a_newer_build_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trawl.db");
    let store = SqliteStore::open(&path).await.unwrap();
    sqlx::query("PRAGMA user_version = 99")
        .execute(&mut *store.conn().await.unwrap())
        .await
        .unwrap();
    store.close().await;
    drop(store);
    assert!(matches!(
        SqliteStore::open(&path).await,
        Err(PortError::Corrupt(_))
    ));
}

#[tokio::test]
async fn a_job_of_100_000_slices_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("trawl.db"))
        .await
        .unwrap();
    let slices: Vec<SliceSpec> = (0..100_000)
        .map(|i| search(&format!("query {i}")))
        .collect();
    let job = new_job(&store, 1, &slices).await;
    let counts = store.counts(&job).await.unwrap();
    assert_eq!(counts.slices_total, 100_000);
    assert_eq!(counts, recount(&store, &job).await);
    assert_eq!(store.open_slices(&job).await.unwrap().len(), 100_000);
}

#[test]
fn statements_stay_under_the_parameter_limit() {
    assert_eq!(rows_per_statement(7), 500);
    assert_eq!(rows_per_statement(100), 327);
    assert!(rows_per_statement(40_000) >= 1);
    assert_eq!(
        values_sql(
            "INSERT INTO t (a, b)",
            "(?, ?)",
            3,
            "ON CONFLICT DO NOTHING"
        ),
        "INSERT INTO t (a, b) VALUES (?, ?), (?, ?), (?, ?) ON CONFLICT DO NOTHING"
    );
}

// ---------------------------------------------------------------------------
// Group commit

/// Waits until `n` outcomes are queued behind a held connection.
async fn queued(store: &SqliteStore, n: usize) {
    for _ in 0..1_000 {
        if store.queue.lock().unwrap().len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("{n} outcomes were never queued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_outcomes_are_each_written_once() {
    let (_dir, stores) = stores().await;
    for store in stores {
        let slices: Vec<SliceSpec> = (0..100).map(|i| search(&format!("q{i}"))).collect();
        let job = new_job(&store, 1, &slices).await;
        // Every slice is recorded twice at once; neighbours share a child.
        let mut calls = Vec::new();
        for (i, s) in slices.iter().enumerate() {
            let shared = page(&format!("https://shop.example/shared/{}", i / 2), s);
            let outcome = SliceOutcome {
                items: vec![item(s, 0)],
                trace: vec![step(s, 0, false), step(s, 1, true)],
                costs: vec![cost(s, 0, 1_500)],
                children: vec![shared],
                ..SliceOutcome::default()
            };
            for _ in 0..2 {
                let (store, job, id, outcome) =
                    (store.clone(), job.clone(), s.id.clone(), outcome.clone());
                calls.push(tokio::spawn(async move {
                    (
                        id.clone(),
                        store.record_outcome(&job, &id, &outcome).await.unwrap(),
                    )
                }));
            }
        }
        let mut written = HashSet::new();
        let mut children = Vec::new();
        for call in calls {
            let (id, rec) = call.await.unwrap();
            if rec.written {
                assert!(written.insert(id), "a slice was written twice");
            } else {
                assert!(rec.new_children.is_empty());
            }
            children.extend(rec.new_children.into_iter().map(|c| c.id));
        }
        assert_eq!(written.len(), 100);
        let distinct: HashSet<_> = children.iter().cloned().collect();
        assert_eq!(children.len(), 50, "each shared child is new exactly once");
        assert_eq!(distinct.len(), 50);

        let want = JobCounts {
            slices_total: 150,
            slices_succeeded: 100,
            items_valid: 100,
            upstream_calls: 100,
            cache_hits: 100,
            cost: Micros(150_000),
            ..JobCounts::default()
        };
        assert_eq!(store.counts(&job).await.unwrap(), want);
        assert_eq!(recount(&store, &job).await, want);
    }
}

#[tokio::test]
async fn a_failing_outcome_in_a_batch_fails_alone() {
    let (_dir, stores) = stores().await;
    for store in stores {
        let (a, b, c) = (search("a"), search("b"), search("c"));
        let job = new_job(&store, 1, &[a.clone(), b.clone(), c.clone()]).await;
        // A trigger of this connection only, standing in for any SQL error.
        sqlx::query(
            "CREATE TEMP TRIGGER poison BEFORE INSERT ON items WHEN NEW.url = 'poison' \
             BEGIN SELECT RAISE(ABORT, 'poisoned item'); END",
        )
        .execute(&mut *store.conn().await.unwrap())
        .await
        .unwrap();

        let held = store.conn.lock().await;
        let mut calls = Vec::new();
        for s in [&a, &b, &c] {
            let mut it = item(s, 0);
            if s.id == b.id {
                it.url = "poison".into();
            }
            let outcome = SliceOutcome {
                items: vec![it],
                costs: vec![cost(s, 0, 1_000)],
                children: vec![page(&format!("https://shop.example/{}", s.id), s)],
                ..SliceOutcome::default()
            };
            let (store, job, id) = (store.clone(), job.clone(), s.id.clone());
            calls.push(tokio::spawn(async move {
                store.record_outcome(&job, &id, &outcome).await
            }));
        }
        queued(&store, 3).await;
        drop(held);

        let mut answers = Vec::new();
        for call in calls {
            answers.push(call.await.unwrap());
        }
        assert!(answers[0].as_ref().unwrap().written);
        assert!(
            matches!(&answers[1], Err(e) if e.to_string().contains("poisoned item")),
            "{:?}",
            answers[1]
        );
        assert!(answers[2].as_ref().unwrap().written);
        assert_eq!(answers[2].as_ref().unwrap().new_children.len(), 1);
        assert_eq!(
            slice_status(&store, &job, &b.id).await,
            SliceStatus::Pending
        );
        let counts = store.counts(&job).await.unwrap();
        assert_eq!(
            (
                counts.slices_total,
                counts.slices_succeeded,
                counts.items_valid
            ),
            (5, 2, 2)
        );
        assert_eq!(counts.cost, Micros(2_000));
        assert_eq!(counts, recount(&store, &job).await);
    }
}

#[tokio::test]
async fn a_caller_cancelled_while_queued_writes_nothing() {
    let (_dir, stores) = stores().await;
    for store in stores {
        let (a, b) = (search("a"), search("b"));
        let job = new_job(&store, 1, &[a.clone(), b.clone()]).await;
        let outcome_of = |s: &SliceSpec| SliceOutcome {
            items: vec![item(s, 0)],
            ..SliceOutcome::default()
        };

        let held = store.conn.lock().await;
        let cancelled = {
            let (store, job, id, outcome) =
                (store.clone(), job.clone(), a.id.clone(), outcome_of(&a));
            tokio::spawn(async move { store.record_outcome(&job, &id, &outcome).await })
        };
        queued(&store, 1).await;
        cancelled.abort();
        assert!(cancelled.await.unwrap_err().is_cancelled());
        drop(held);

        let rec = store
            .record_outcome(&job, &b.id, &outcome_of(&b))
            .await
            .unwrap();
        assert!(rec.written);
        assert_eq!(
            slice_status(&store, &job, &a.id).await,
            SliceStatus::Pending
        );
        assert_eq!(store.counts(&job).await.unwrap().items_valid, 1);
        assert!(store.queue.lock().unwrap().is_empty());
    }
}

#[tokio::test]
async fn a_closed_store_is_unavailable() {
    let (_dir, stores) = stores().await;
    for store in stores {
        let a = search("a");
        let job = new_job(&store, 1, std::slice::from_ref(&a)).await;
        store.close().await;
        assert!(matches!(
            store
                .record_outcome(&job, &a.id, &SliceOutcome::default())
                .await,
            Err(PortError::Unavailable(_))
        ));
        assert!(matches!(
            store.counts(&job).await,
            Err(PortError::Unavailable(_))
        ));
    }
}
