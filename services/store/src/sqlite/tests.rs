#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use async_trait::async_trait;
use tempfile::TempDir;
use trawl_core::model::SliceStatus;
use trawl_core::ports::Store;

use super::rows::{rows_per_statement, values_sql};
use super::*;
use crate::conformance::{Fixture, cost, item, job_record, new_job, page, search, step, suite};

// ---------------------------------------------------------------------------
// Harness

/// A store and the directory its file lives in (none for an in-memory one).
struct SqliteFixture {
    store: SqliteStore,
    _dir: Option<TempDir>,
}

/// One store in a file of its own temporary directory and one in memory; each
/// conformance test runs against both.
async fn fixtures() -> Vec<SqliteFixture> {
    let dir = tempfile::tempdir().unwrap();
    let file = SqliteStore::open(&dir.path().join("trawl.db"))
        .await
        .unwrap();
    let memory = SqliteStore::memory().await.unwrap();
    vec![
        SqliteFixture {
            store: file,
            _dir: Some(dir),
        },
        SqliteFixture {
            store: memory,
            _dir: None,
        },
    ]
}

#[async_trait]
impl Fixture for SqliteFixture {
    fn store(&self) -> Arc<dyn Store> {
        Arc::new(self.store.clone())
    }

    async fn recount(&self, job: &JobId) -> JobCounts {
        recount(&self.store, job).await
    }

    async fn slice_status(&self, job: &JobId, slice: &SliceId) -> SliceStatus {
        slice_status(&self.store, job, slice).await
    }
}

suite!(fixtures);

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

async fn stores() -> (Vec<SqliteFixture>, Vec<SqliteStore>) {
    let fixtures = fixtures().await;
    let stores = fixtures.iter().map(|f| f.store.clone()).collect();
    (fixtures, stores)
}

// ---------------------------------------------------------------------------
// The file and its schema

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
async fn a_version_1_file_is_brought_up_to_date() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trawl.db");
    let a = search("from v1");
    let job = job_record(1);
    {
        // A file as the first release left it: schema 1 and a job with a slice.
        let mut conn = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .connect()
            .await
            .unwrap();
        sqlx::raw_sql(MIGRATIONS[0])
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query("PRAGMA user_version = 1")
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO jobs (id, name, spec, status, estimate, created_ms, updated_ms) \
             VALUES (?, 'old', '{}', 'running', 0, 1, 1)",
        )
        .bind(job.id.as_str())
        .execute(&mut conn)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO slices (job_id, slice_id, kind, spec, created_ms) VALUES (?, ?, ?, ?, 1)",
        )
        .bind(job.id.as_str())
        .bind(a.id.as_str())
        .bind(a.kind.name())
        .bind(serde_json::to_string(&a).unwrap())
        .execute(&mut conn)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO approvals (job_id, amount, reason, requested_ms) VALUES (?, 5, 'x', 1)",
        )
        .bind(job.id.as_str())
        .execute(&mut conn)
        .await
        .unwrap();
        conn.close().await.unwrap();
    }

    let store = SqliteStore::open(&path).await.unwrap();
    let back = store.job(&job.id).await.unwrap().unwrap();
    assert_eq!((back.name.as_str(), back.idempotency), ("old", None));
    assert_eq!(
        store.slices_to_publish(&job.id, 0, 10).await.unwrap(),
        vec![a.clone()],
        "a slice of version 1 was never marked published"
    );
    let approvals = store.approvals(true, 10).await.unwrap();
    assert_eq!(approvals.len(), 1);
    assert_eq!(approvals[0].kind, "job_budget");
    assert_eq!(store.counts(&job.id).await.unwrap().slices_total, 1);
    let version: i64 = sqlx::query_scalar("PRAGMA user_version")
        .fetch_one(&mut *store.conn().await.unwrap())
        .await
        .unwrap();
    assert_eq!(version, i64::try_from(MIGRATIONS.len()).unwrap());
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

#[tokio::test]
async fn a_jobs_artifacts_are_deleted_with_it() {
    let store = SqliteStore::memory().await.unwrap();
    let job = new_job(&store, 1, &[]).await;
    let shot = Artifact {
        job_id: job.clone(),
        slice_id: None,
        name: "page.png".into(),
        content_type: "image/png".into(),
        data: vec![1, 2, 3],
        at_ms: 1,
    };
    store.put_artifact(&shot).await.unwrap();
    // Nothing deletes jobs yet; whatever does gets the cascade. The counters row
    // goes first: it has no cascade of its own.
    let mut conn = store.conn().await.unwrap();
    sqlx::query("DELETE FROM job_counts WHERE job_id = ?")
        .bind(job.as_str())
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query("DELETE FROM jobs WHERE id = ?")
        .bind(job.as_str())
        .execute(&mut *conn)
        .await
        .unwrap();
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM artifacts")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(left, 0);
}
