//! The Postgres store against a real server: the conformance suite, and what is
//! Postgres's own (migrations, connecting, throughput).
//!
//! The server is `TRAWL_TEST_DATABASE_URL`, by default
//! `postgres://postgres@127.0.0.1:5432/postgres`. Each test creates a database of
//! its own (`trawl_test_<random hex>`) and drops it when done, so tests run in
//! parallel and never see each other's rows.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use async_trait::async_trait;
use serde_json::json;
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use trawl_core::model::{SliceError, SliceStatus};
use trawl_core::ports::Store;

use super::*;
use crate::conformance::{Fixture, cost, item, job_record, new_job, page, search, step, suite};

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// The server's URL, naming a database the tests may connect to for creating and
/// dropping their own.
fn admin_url() -> String {
    std::env::var("TRAWL_TEST_DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// A database of one test, dropped (connections and all) when this is dropped,
/// whether the test passed or panicked.
struct TestDb {
    admin: String,
    name: String,
    url: String,
}

impl TestDb {
    async fn create() -> TestDb {
        let admin = admin_url();
        let name = format!("trawl_test_{:016x}", fastrand::u64(..));
        let mut conn = PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("cannot reach the test server at {admin}: {e}"));
        // A name we made of hex digits, not input.
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
        let mut url = url::Url::parse(&admin).unwrap();
        url.set_path(&name);
        TestDb {
            admin,
            name,
            url: url.to_string(),
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // Drop cannot await, and may run inside the test's runtime: drop the
        // database from a thread with a runtime of its own.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut conn = PgConnection::connect(&admin).await?;
                sqlx::raw_sql(AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut conn)
                .await?;
                conn.close().await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("test database {} was not dropped: {dropped:?}", self.name);
        }
    }
}

/// A store on a database of its own.
struct PgFixture {
    store: PgStore,
    // Dropped after the store's fields: the pool is closed by then or killed.
    _db: TestDb,
}

async fn fixture() -> PgFixture {
    let db = TestDb::create().await;
    let store = PgStore::connect(&db.url, 8).await.unwrap();
    PgFixture { store, _db: db }
}

async fn fixtures() -> Vec<PgFixture> {
    vec![fixture().await]
}

#[async_trait]
impl Fixture for PgFixture {
    fn store(&self) -> Arc<dyn Store> {
        Arc::new(self.store.clone())
    }

    /// From the rows of every table, ignoring the tallies on the slice rows.
    async fn recount(&self, job: &JobId) -> JobCounts {
        let row = sqlx::query(
            "SELECT \
             (SELECT COUNT(*) FROM slices WHERE job_id = $1) AS slices_total, \
             (SELECT COUNT(*) FROM slices WHERE job_id = $1 AND status = 'succeeded') \
                AS slices_succeeded, \
             (SELECT COUNT(*) FROM slices WHERE job_id = $1 AND status = 'failed') \
                AS slices_failed, \
             (SELECT COUNT(*) FROM slices WHERE job_id = $1 AND status = 'failed' \
                AND error_code = 'budget_exhausted') AS budget_stops, \
             (SELECT COUNT(*) FROM items WHERE job_id = $1) AS items_valid, \
             (SELECT COUNT(*) FROM rejections WHERE job_id = $1) AS items_rejected, \
             (SELECT COUNT(*) FROM trace_steps WHERE job_id = $1 AND NOT cache_hit) \
                AS upstream_calls, \
             (SELECT COUNT(*) FROM trace_steps WHERE job_id = $1 AND cache_hit) AS cache_hits, \
             (SELECT COALESCE(SUM(amount), 0)::BIGINT FROM costs WHERE job_id = $1) AS cost",
        )
        .bind(job.as_str())
        .fetch_one(&self.store.pool)
        .await
        .unwrap();
        job_counts(&row).unwrap()
    }

    async fn slice_status(&self, job: &JobId, slice: &SliceId) -> SliceStatus {
        let s: String =
            sqlx::query_scalar("SELECT status FROM slices WHERE job_id = $1 AND slice_id = $2")
                .bind(job.as_str())
                .bind(slice.as_str())
                .fetch_one(&self.store.pool)
                .await
                .unwrap();
        SliceStatus::parse(&s).unwrap()
    }
}

suite!(fixtures);

// ---------------------------------------------------------------------------
// Migrations and connecting

#[test]
fn every_migration_file_is_embedded() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations");
    let mut files: Vec<(i64, String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .map(|p| {
            let stem = p.file_stem().unwrap().to_str().unwrap().to_owned();
            let (version, description) = stem.split_once('_').unwrap();
            (
                version.parse().unwrap(),
                description.to_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    files.sort();
    let embedded: Vec<(i64, String, String)> = MIGRATIONS
        .iter()
        .map(|&(v, d, sql)| (v, d.to_owned(), sql.to_owned()))
        .collect();
    assert_eq!(files, embedded, "migrations/ and MIGRATIONS differ");
}

async fn applied(url: &str) -> Vec<(i64, bool)> {
    let mut conn = PgConnection::connect(url).await.unwrap();
    let rows: Vec<(i64, bool)> =
        sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    conn.close().await.unwrap();
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_connecting_at_once_to_a_fresh_database_all_start() {
    let db = TestDb::create().await;
    let connects = (0..4).map(|_| {
        let url = db.url.clone();
        tokio::spawn(async move { PgStore::connect(&url, 2).await })
    });
    let mut stores = Vec::new();
    for c in connects {
        stores.push(c.await.unwrap().unwrap());
    }
    let want: Vec<(i64, bool)> = MIGRATIONS.iter().map(|m| (m.0, true)).collect();
    assert_eq!(applied(&db.url).await, want);
    // And they all work on the one schema.
    let job = new_job(&stores[0], 1, &[search("a")]).await;
    assert_eq!(stores[3].counts(&job).await.unwrap().slices_total, 1);
    for s in &stores {
        s.close().await;
    }

    // Migrating an up-to-date database does nothing.
    migrate(&db.url).await.unwrap();
    assert_eq!(applied(&db.url).await, want);
}

#[tokio::test]
async fn bad_urls_are_unavailable_with_a_clear_message() {
    let refused = PgStore::connect("postgres://postgres:hunter2@127.0.0.1:1/trawl", 1)
        .await
        .unwrap_err();
    let PortError::Unavailable(m) = &refused else {
        panic!("{refused:?}")
    };
    assert!(m.contains("cannot connect to Postgres at"), "{m}");
    assert!(m.contains("127.0.0.1:1"), "{m}");
    assert!(!m.contains("hunter2"), "the password leaked: {m}");

    let garbage = PgStore::connect("not a url at all", 1).await.unwrap_err();
    let PortError::Unavailable(m) = &garbage else {
        panic!("{garbage:?}")
    };
    assert!(m.contains("invalid Postgres URL"), "{m}");

    let mut missing = url::Url::parse(&admin_url()).unwrap();
    missing.set_path("trawl_test_no_such_database");
    let missing = PgStore::connect(missing.as_str(), 1).await.unwrap_err();
    assert!(
        matches!(&missing, PortError::Unavailable(m) if m.contains("trawl_test_no_such_database")),
        "{missing:?}"
    );

    assert!(matches!(
        migrate("postgres://postgres@127.0.0.1:1/trawl").await,
        Err(PortError::Unavailable(_))
    ));
}

#[tokio::test]
async fn a_database_migrated_by_a_newer_build_is_refused() {
    let db = TestDb::create().await;
    PgStore::connect(&db.url, 1).await.unwrap().close().await;
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from the future', true, '\\x00', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    let refused = PgStore::connect(&db.url, 1).await.unwrap_err();
    assert!(
        matches!(&refused, PortError::Corrupt(m) if m.contains("newer build")),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_closed_store_is_unavailable() {
    let f = fixture().await;
    let a = search("a");
    let job = new_job(&f.store, 1, std::slice::from_ref(&a)).await;
    f.store.close().await;
    assert!(matches!(
        f.store
            .record_outcome(&job, &a.id, &SliceOutcome::default())
            .await,
        Err(PortError::Unavailable(_))
    ));
    assert!(matches!(
        f.store.ping().await,
        Err(PortError::Unavailable(_))
    ));
}

// ---------------------------------------------------------------------------
// What Postgres refuses

#[tokio::test]
async fn nul_characters_are_stored_replaced() {
    let f = fixture().await;
    let store = &f.store;
    let s = search("nul");
    let job = JobRecord {
        name: "job\0name".into(),
        spec: json!({"q": "a\0b"}),
        ..job_record(1)
    };
    store
        .create_job(&job, std::slice::from_ref(&s))
        .await
        .unwrap();
    let back = store.job(&job.id).await.unwrap().unwrap();
    assert_eq!(back.name, "job\u{FFFD}name");
    assert_eq!(back.spec, json!({"q": "a\u{FFFD}b"}));

    let mut it = item(&s, 0);
    it.url = "https://shop.example/\0".into();
    it.data = json!({"title": "bad\0byte"});
    let mut st = step(&s, 0, false);
    st.error = Some("upstream said \0".into());
    let outcome = SliceOutcome {
        items: vec![it],
        trace: vec![st],
        error: Some(SliceError {
            code: "odd".into(),
            message: "with \0 inside".into(),
        }),
        ..SliceOutcome::default()
    };
    assert!(
        store
            .record_outcome(&job.id, &s.id, &outcome)
            .await
            .unwrap()
            .written
    );
    let items = store.items(&job.id).await.unwrap();
    assert_eq!(items[0].url, "https://shop.example/\u{FFFD}");
    assert_eq!(items[0].data, json!({"title": "bad\u{FFFD}byte"}));
    let trace = store.trace_page(&job.id, None, 10).await.unwrap();
    assert_eq!(trace[0].error.as_deref(), Some("upstream said \u{FFFD}"));
    let failed = store.failed_slices(&job.id, 10).await.unwrap();
    assert_eq!(failed[0].error.message, "with \u{FFFD} inside");
}

// ---------------------------------------------------------------------------
// Throughput

/// Two stores (two worker processes) with 32 writers each record the outcomes of
/// one job's slices, each like a page slice's (an item, two trace steps, a cost);
/// every outcome is written once. Prints the rate: the target is above 1,000
/// outcomes a second (a debug build on a loaded machine gets less).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_from_two_workers_of_32_writers() {
    const SLICES: usize = 3_000;
    const WRITERS: usize = 32;
    let f = fixture().await;
    let root = search("root");
    let slices: Vec<SliceSpec> = (0..SLICES)
        .map(|i| page(&format!("https://shop.example/p/{i}"), &root))
        .collect();
    let job = new_job(&f.store, 1, &slices).await;
    let second = PgStore::connect(&f._db.url, 16).await.unwrap();
    let workers = [f.store.clone(), second];
    let slices = Arc::new(slices);
    let next = Arc::new(AtomicUsize::new(0));

    let started = Instant::now();
    let mut tasks = Vec::new();
    for store in &workers {
        for _ in 0..WRITERS {
            let (store, job, slices, next) =
                (store.clone(), job.clone(), slices.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                let mut written = 0;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(s) = slices.get(i) else {
                        return written;
                    };
                    let outcome = SliceOutcome {
                        items: vec![item(s, 0)],
                        trace: vec![step(s, 0, false), step(s, 1, true)],
                        costs: vec![cost(s, 0, 1_500)],
                        ..SliceOutcome::default()
                    };
                    if store
                        .record_outcome(&job, &s.id, &outcome)
                        .await
                        .unwrap()
                        .written
                    {
                        written += 1;
                    }
                }
            }));
        }
    }
    let mut written = 0;
    for t in tasks {
        written += t.await.unwrap();
    }
    let elapsed = started.elapsed();
    eprintln!(
        "{SLICES} outcomes from 2 x {WRITERS} writers in {elapsed:?}: {:.0} outcomes/s",
        SLICES as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(written, SLICES);
    let counts = f.store.counts(&job).await.unwrap();
    assert_eq!(counts.slices_succeeded, SLICES as u64);
    assert_eq!(counts.items_valid, SLICES as u64);
    assert_eq!(counts.cost, Micros(1_500 * SLICES as i64));
    assert_eq!(counts, f.recount(&job).await);
    workers[1].close().await;
}

#[tokio::test]
async fn a_jobs_artifacts_are_deleted_with_it() {
    let f = fixture().await;
    let job = new_job(&f.store, 1, &[]).await;
    let shot = Artifact {
        job_id: job.clone(),
        slice_id: None,
        name: "page.png".into(),
        content_type: "image/png".into(),
        data: vec![1, 2, 3],
        at_ms: 1,
    };
    f.store.put_artifact(&shot).await.unwrap();
    // Nothing deletes jobs yet; whatever does gets the cascade.
    sqlx::query("DELETE FROM jobs WHERE id = $1")
        .bind(job.as_str())
        .execute(&f.store.pool)
        .await
        .unwrap();
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM artifacts")
        .fetch_one(&f.store.pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
}

// ---------------------------------------------------------------------------
// Job counters

/// The tables an `EXPLAIN` reads (`... on <table or its key> <alias>` in its
/// lines), each once, sorted.
fn relations_read(plan: &[String]) -> Vec<&str> {
    let mut read: Vec<&str> = plan
        .iter()
        .filter_map(|line| line.split(" on ").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(|r| r.trim_end_matches("_pkey"))
        .collect();
    read.sort_unstable();
    read.dedup();
    read
}

#[tokio::test]
async fn a_jobs_counts_are_read_from_its_counters_not_its_slices() {
    let f = fixture().await;
    let store = &f.store;
    let slices: Vec<SliceSpec> = (0..20_000).map(|i| search(&format!("q{i}"))).collect();
    let job = new_job(store, 1, &slices).await;
    for s in &slices[..100] {
        let outcome = SliceOutcome {
            items: vec![item(s, 0)],
            trace: vec![step(s, 0, false)],
            costs: vec![cost(s, 0, 7)],
            ..SliceOutcome::default()
        };
        store.record_outcome(&job, &s.id, &outcome).await.unwrap();
    }
    sqlx::query("ANALYZE").execute(&store.pool).await.unwrap();
    let plan: Vec<String> = sqlx::query_scalar(AssertSqlSafe(format!("EXPLAIN {COUNTS}")))
        .bind(job.as_str())
        .fetch_all(&store.pool)
        .await
        .unwrap();
    assert_eq!(relations_read(&plan), ["job_counters", "jobs"], "{plan:#?}");
    let c = store.counts(&job).await.unwrap();
    assert_eq!(c, f.recount(&job).await);
    assert_eq!(
        (c.slices_total, c.slices_succeeded, c.items_valid),
        (20_000, 100, 100)
    );
    assert_eq!(c.cost, Micros(700));
    assert_eq!(store.spent(&job).await.unwrap(), Micros(700));
    assert!(store.has_open_slices(&job).await.unwrap());
    // The batches spread over stripes: at most 16 rows, whatever the job's size.
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_counters WHERE job_id = $1")
        .bind(job.as_str())
        .fetch_one(&store.pool)
        .await
        .unwrap();
    assert!((1..=16).contains(&rows), "{rows} counter rows");
}

#[tokio::test]
async fn the_counters_migration_counts_the_jobs_stored_before_it() {
    let db = TestDb::create().await;
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    let at = MIGRATIONS
        .iter()
        .position(|m| m.1 == "job_counters")
        .unwrap();
    let (before, last) = (&MIGRATIONS[..at], &MIGRATIONS[at]);
    for (_, _, sql) in before {
        sqlx::raw_sql(AssertSqlSafe(*sql))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    sqlx::raw_sql(
        "INSERT INTO jobs (id, name, spec, status, estimate, created_ms, updated_ms) VALUES \
         ('j1', 'a', '{}', 'running', 0, 0, 0), ('j2', 'b', '{}', 'running', 0, 0, 0); \
         INSERT INTO slices (job_id, slice_id, kind, spec, status, error_code, created_ms, \
             items_valid, items_rejected, upstream_calls, cache_hits, cost) VALUES \
         ('j1', 's1', 'page', '{}', 'succeeded', NULL, 0, 3, 1, 2, 1, 500), \
         ('j1', 's2', 'page', '{}', 'failed', 'budget_exhausted', 0, 0, 0, 0, 0, 0), \
         ('j1', 's3', 'page', '{}', 'pending', NULL, 0, 0, 0, 0, 0, 0), \
         ('j2', 's1', 'page', '{}', 'succeeded', NULL, 0, 1, 0, 1, 0, 9);",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::raw_sql(AssertSqlSafe(last.2))
        .execute(&mut conn)
        .await
        .unwrap();
    let row = sqlx::query(COUNTS).bind("j1").fetch_one(&mut conn).await;
    let j1 = job_counts(&row.unwrap()).unwrap();
    assert_eq!(
        (
            j1.slices_total,
            j1.slices_succeeded,
            j1.slices_failed,
            j1.budget_stops
        ),
        (3, 1, 1, 1)
    );
    assert_eq!(
        (
            j1.items_valid,
            j1.items_rejected,
            j1.upstream_calls,
            j1.cache_hits,
            j1.cost
        ),
        (3, 1, 2, 1, Micros(500))
    );
    let row = sqlx::query(COUNTS).bind("j2").fetch_one(&mut conn).await;
    let j2 = job_counts(&row.unwrap()).unwrap();
    assert_eq!(
        (j2.slices_total, j2.items_valid, j2.cost),
        (1, 1, Micros(9))
    );
    conn.close().await.unwrap();
}

// ---------------------------------------------------------------------------
// Day partitions

/// The partition a job's rows of `table` are stored in.
async fn partition_of(pool: &PgPool, table: &str, job: &JobId) -> Vec<String> {
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT DISTINCT tableoid::regclass::TEXT FROM {table} WHERE job_id = $1"
    )))
    .bind(job.as_str())
    .fetch_all(pool)
    .await
    .unwrap()
}

/// `YYYYMMDD` of a time, UTC, as partitions are named.
async fn day_of(pool: &PgPool, ms: i64) -> String {
    sqlx::query_scalar("SELECT to_char(to_timestamp($1 / 1000.0) AT TIME ZONE 'UTC', 'YYYYMMDD')")
        .bind(ms)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn tables_named(pool: &PgPool, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = sqlx::query_scalar(
        "SELECT relname::TEXT FROM pg_class WHERE relkind = 'r' AND relname LIKE '%' || $1",
    )
    .bind(suffix)
    .fetch_all(pool)
    .await
    .unwrap();
    names.sort();
    names
}

/// A job created at `created_ms`, with one slice and its outcome: an item, a
/// trace step and a cost row.
async fn job_at(store: &PgStore, created_ms: i64, n: u64) -> JobId {
    let s = search(&format!("q{n}"));
    let mut job = job_record(n);
    job.id = JobId::generate(created_ms, n);
    job.created_ms = created_ms;
    store
        .create_job(&job, std::slice::from_ref(&s))
        .await
        .unwrap();
    let outcome = SliceOutcome {
        items: vec![item(&s, 0)],
        trace: vec![step(&s, 0, false)],
        costs: vec![cost(&s, 0, 7)],
        ..SliceOutcome::default()
    };
    store
        .record_outcome(&job.id, &s.id, &outcome)
        .await
        .unwrap();
    job.id
}

#[tokio::test]
async fn rows_go_to_their_days_partition_and_an_emptied_past_day_is_dropped() {
    const DAY: i64 = 86_400_000;
    let f = fixture().await;
    let store = &f.store;
    // Ten days from now, at 01:00 UTC: days no other row is in.
    let now = trawl_core::model::now_ms();
    let t0 = now - now % DAY + 10 * DAY + 3_600_000;
    let made = store.keep_partitions(t0).await.unwrap();
    assert_eq!(made.created, 4, "today and three days ahead");
    let (d0, d1) = (
        day_of(&store.pool, t0).await,
        day_of(&store.pool, t0 + DAY).await,
    );
    let a = job_at(store, t0, 1).await;
    let b = job_at(store, t0 + DAY, 2).await;
    for t in ["items", "rejections", "trace_steps", "costs"] {
        assert_eq!(tables_named(&store.pool, &d0).await.len(), 4);
        if t != "rejections" {
            assert_eq!(
                partition_of(&store.pool, t, &a).await,
                [format!("{t}_p{d0}")]
            );
            assert_eq!(
                partition_of(&store.pool, t, &b).await,
                [format!("{t}_p{d1}")]
            );
        }
    }
    // A read of one job's rows reads its day's partition and no other.
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT * FROM items WHERE job_id = $1 ORDER BY slice_id, seq LIMIT 100",
    )
    .bind(a.as_str())
    .fetch_all(&store.pool)
    .await
    .unwrap();
    assert_eq!(relations_read(&plan), [format!("items_p{d0}")], "{plan:#?}");
    // A day with no partition yet: its rows go to the default one and stay
    // readable; that day is then not made.
    let late = t0 + 30 * DAY;
    let c = job_at(store, late, 3).await;
    assert_eq!(
        partition_of(&store.pool, "items", &c).await,
        ["items_default"]
    );
    let made = store.keep_partitions(late).await.unwrap();
    assert_eq!(
        made.created, 3,
        "every day but the one with rows in the default"
    );
    let dl = day_of(&store.pool, late).await;
    let made_late = tables_named(&store.pool, &dl).await;
    for t in ["items", "trace_steps", "costs"] {
        assert!(!made_late.contains(&format!("{t}_p{dl}")), "{made_late:?}");
    }
    assert_eq!(store.items(&c).await.unwrap().len(), 1);
    // Retention deletes job a; its day is dropped once past, b's day stays.
    let ledger = store.cost_months().await.unwrap();
    while store.purge_job(&a, 1_000).await.unwrap() > 0 {}
    assert_eq!(store.cost_months().await.unwrap(), ledger);
    let kept = store.keep_partitions(t0 + 3 * DAY).await.unwrap();
    assert!(kept.dropped >= 1, "{kept:?}");
    assert!(tables_named(&store.pool, &d0).await.is_empty());
    assert_eq!(tables_named(&store.pool, &d1).await.len(), 4);
    assert_eq!(store.items(&b).await.unwrap().len(), 1);
    assert_eq!(store.counts(&b).await.unwrap().cost, Micros(7));
    // The ledger still counts a's cost, from the monthly totals.
    assert_eq!(store.cost_months().await.unwrap(), ledger);
}

#[tokio::test]
async fn the_partition_migration_keeps_the_rows_stored_before_it() {
    let db = TestDb::create().await;
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    let at = MIGRATIONS.iter().position(|m| m.1 == "partitions").unwrap();
    for (_, _, sql) in &MIGRATIONS[..at] {
        sqlx::raw_sql(AssertSqlSafe(*sql))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let old = JobId::generate(1_700_000_000_000, 1);
    let rows = "INSERT INTO jobs (id, name, spec, status, estimate, created_ms, updated_ms) \
                VALUES ($1, 'a', '{}', 'running', 0, 0, 0); \
                INSERT INTO slices (job_id, slice_id, kind, spec, created_ms) \
                VALUES ($1, 's1', 'page', '{}', 0); \
                INSERT INTO items (job_id, slice_id, seq, kind, url, geo, data) \
                VALUES ($1, 's1', 0, 'page', 'u', 'de', '{}'), ($1, 's1', 1, 'page', 'u', 'de', '{}'); \
                INSERT INTO costs (job_id, slice_id, seq, product, amount) \
                VALUES ($1, 's1', 0, 'unlocker', 11);";
    for stmt in rows.split(';').filter(|s| !s.trim().is_empty()) {
        sqlx::query(AssertSqlSafe(stmt.to_owned()))
            .bind(old.as_str())
            .execute(&mut conn)
            .await
            .unwrap();
    }
    sqlx::raw_sql(AssertSqlSafe(MIGRATIONS[at].2))
        .execute(&mut conn)
        .await
        .unwrap();
    let pool = PgPool::connect(&db.url).await.unwrap();
    assert_eq!(partition_of(&pool, "items", &old).await, ["items_p0"]);
    assert_eq!(partition_of(&pool, "costs", &old).await, ["costs_p0"]);
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM items WHERE job_id = $1")
        .bind(old.as_str())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 2);
    // The key holds across the old rows: the same row again is not stored.
    let again = sqlx::query(
        "INSERT INTO items (job_id, slice_id, seq, kind, url, geo, data) \
         VALUES ($1, 's1', 1, 'page', 'u', 'de', '{}') ON CONFLICT DO NOTHING",
    )
    .bind(old.as_str())
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(again.rows_affected(), 0);
    // So does the reference to the slice.
    let orphan = sqlx::query(
        "INSERT INTO items (job_id, slice_id, seq, kind, url, geo, data) \
         VALUES ($1, 'nope', 0, 'page', 'u', 'de', '{}')",
    )
    .bind(old.as_str())
    .execute(&pool)
    .await;
    assert!(orphan.is_err(), "an item of no slice was stored");
    // A job created now goes to today's partition.
    let new = JobId::generate(trawl_core::model::now_ms(), 2);
    for stmt in rows.split(';').filter(|s| !s.trim().is_empty()) {
        sqlx::query(AssertSqlSafe(stmt.to_owned()))
            .bind(new.as_str())
            .execute(&pool)
            .await
            .unwrap();
    }
    let today = partition_of(&pool, "items", &new).await;
    assert_eq!(
        today,
        [format!(
            "items_p{}",
            day_of(&pool, trawl_core::model::now_ms()).await
        )]
    );
    pool.close().await;
    conn.close().await.unwrap();
}
