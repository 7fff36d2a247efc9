//! The content cache's contract, one suite run against every adapter: SQLite
//! (`trawl run`, `trawl dev`) and Redis (the deployed shape).
//!
//! Redis is at `TRAWL_TEST_REDIS_URL` (default `redis://127.0.0.1:6379`); each
//! run uses keys of its own prefix.

// A panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use trawl_cache::{RedisCache, RedisConfig, SqliteCache};
use trawl_core::ports::{CacheKey, ContentCache, LoadFuture, Served, ToolError};

const MINUTE: Duration = Duration::from_secs(60);

struct Adapter {
    name: &'static str,
    cache: Arc<dyn ContentCache>,
    _dir: Option<tempfile::TempDir>,
}

async fn adapters() -> Vec<Adapter> {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteCache::open(&dir.path().join("cache.db"))
        .await
        .unwrap();
    let url =
        std::env::var("TRAWL_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let redis = RedisCache::connect(
        RedisConfig::new(url).with_key_prefix(format!("contract{:016x}", fastrand::u64(..))),
    )
    .await
    .expect("a redis at TRAWL_TEST_REDIS_URL (default redis://127.0.0.1:6379)");
    vec![
        Adapter {
            name: "sqlite",
            cache: Arc::new(sqlite),
            _dir: Some(dir),
        },
        Adapter {
            name: "redis",
            cache: Arc::new(redis),
            _dir: None,
        },
    ]
}

fn key(s: &str) -> CacheKey {
    CacheKey::new(
        "brightdata.fetch",
        "us",
        &format!("https://shop.example/{s}"),
        "raw",
    )
}

/// A load that counts its runs and answers `body`.
fn answer(runs: &Arc<AtomicUsize>, body: &'static [u8]) -> LoadFuture<'static> {
    let runs = runs.clone();
    Box::pin(async move {
        runs.fetch_add(1, Ordering::SeqCst);
        Ok(body.to_vec())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_loaded_once_then_served_until_older_than_max_age() {
    for a in adapters().await {
        let runs = Arc::new(AtomicUsize::new(0));
        let (v, s) = a
            .cache
            .get_or_load(&key("a"), MINUTE, answer(&runs, b"1"))
            .await
            .unwrap();
        assert_eq!((v.as_slice(), s), (&b"1"[..], Served::Loaded), "{}", a.name);
        let (v, s) = a
            .cache
            .get_or_load(&key("a"), MINUTE, answer(&runs, b"2"))
            .await
            .unwrap();
        assert_eq!((v.as_slice(), s), (&b"1"[..], Served::Hit), "{}", a.name);
        // Another key is another answer.
        let (v, _) = a
            .cache
            .get_or_load(&key("b"), MINUTE, answer(&runs, b"3"))
            .await
            .unwrap();
        assert_eq!(v, b"3", "{}", a.name);
        // A caller whose max age the stored answer is past loads again.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (v, s) = a
            .cache
            .get_or_load(&key("a"), Duration::from_millis(10), answer(&runs, b"4"))
            .await
            .unwrap();
        assert_eq!((v.as_slice(), s), (&b"4"[..], Served::Loaded), "{}", a.name);
        assert_eq!(runs.load(Ordering::SeqCst), 3, "{}", a.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_max_age_always_loads() {
    for a in adapters().await {
        let runs = Arc::new(AtomicUsize::new(0));
        for body in [&b"1"[..], b"2"] {
            let body: &'static [u8] = body;
            let (v, s) = a
                .cache
                .get_or_load(&key("z"), Duration::ZERO, answer(&runs, body))
                .await
                .unwrap();
            assert_eq!((v.as_slice(), s), (body, Served::Loaded), "{}", a.name);
        }
        assert_eq!(runs.load(Ordering::SeqCst), 2, "{}", a.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_load_reaches_its_callers_and_is_not_cached() {
    for a in adapters().await {
        let failed = a
            .cache
            .get_or_load(
                &key("f"),
                MINUTE,
                Box::pin(async { Err(ToolError::transient("upstream_502", "bad gateway")) }),
            )
            .await
            .unwrap_err();
        assert_eq!(failed.code, "upstream_502", "{}", a.name);
        let runs = Arc::new(AtomicUsize::new(0));
        let (v, s) = a
            .cache
            .get_or_load(&key("f"), MINUTE, answer(&runs, b"ok"))
            .await
            .unwrap();
        assert_eq!(
            (v.as_slice(), s),
            (&b"ok"[..], Served::Loaded),
            "{}",
            a.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_of_one_key_share_one_load() {
    for a in adapters().await {
        let runs = Arc::new(AtomicUsize::new(0));
        let (started, gate) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let slow: LoadFuture<'static> = {
            let (runs, started, gate) = (runs.clone(), started.clone(), gate.clone());
            Box::pin(async move {
                runs.fetch_add(1, Ordering::SeqCst);
                started.notify_one();
                gate.notified().await;
                Ok(b"shared".to_vec())
            })
        };
        let first = {
            let cache = a.cache.clone();
            tokio::spawn(async move { cache.get_or_load(&key("c"), MINUTE, slow).await })
        };
        // The first load is running; the second caller waits for it.
        started.notified().await;
        let second = {
            let (cache, runs) = (a.cache.clone(), runs.clone());
            tokio::spawn(async move {
                cache
                    .get_or_load(&key("c"), MINUTE, answer(&runs, b"own"))
                    .await
            })
        };
        // Released only once the second caller is waiting on it (or has
        // found the stored answer): either way it must not load.
        tokio::task::yield_now().await;
        gate.notify_one();
        let (v1, s1) = first.await.unwrap().unwrap();
        let (v2, s2) = second.await.unwrap().unwrap();
        assert_eq!(
            (v1.as_slice(), s1),
            (&b"shared"[..], Served::Loaded),
            "{}",
            a.name
        );
        assert_eq!(v2, b"shared", "{}", a.name);
        assert!(
            matches!(s2, Served::Coalesced | Served::Hit),
            "{}: {s2:?}",
            a.name
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{}", a.name);
    }
}
