//! The embedded content cache: a SQLite table that outlives the process, with
//! in-process coalescing of concurrent loads of one key.
//!
//! The table (`entries`: key, value, stored time) is read through a small
//! pool of readers and written through one writer connection (SQLite has a single
//! writer; WAL lets readers go on meanwhile). Freshness is decided at read time
//! against the caller's `max_age`, because each job sets its own; entries older
//! than [`SqliteCache::RETAIN`] are purged when the cache is opened. Concurrent
//! lookups of one key share one load (the `inflight` module).

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use tokio::sync::{mpsc, oneshot};
use trawl_core::model::now_ms;
use trawl_core::ports::{CacheKey, ContentCache, LoadFuture, PortError, Served, ToolError};

use crate::inflight::Inflight;

type Shared = Result<(Arc<Vec<u8>>, bool), ToolError>;

pub struct SqliteCache {
    readers: SqlitePool,
    #[cfg(test)]
    writer: SqlitePool,
    writes: mpsc::Sender<Write>,
    inflight: Inflight<CacheKey, Shared>,
}

/// One pending write and who waits for it.
struct Write {
    key: CacheKey,
    value: Vec<u8>,
    stored_ms: i64,
    done: oneshot::Sender<Result<(), PortError>>,
}

/// Rows per multi-row insert: 3 parameters each, far below SQLite's 32,766.
const BATCH: usize = 256;

/// Group commit: the one writer takes every write waiting, up to [`BATCH`], and
/// stores them with one statement, so concurrent loads share a commit. Ends when
/// the cache is dropped.
async fn write_loop(pool: SqlitePool, mut rx: mpsc::Receiver<Write>) {
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        // The last write of a key in a batch wins, as it would one at a time.
        let mut rows: Vec<&Write> = Vec::with_capacity(batch.len());
        for w in batch.iter().rev() {
            if !rows.iter().any(|r| r.key == w.key) {
                rows.push(w);
            }
        }
        let mut sql = String::from("INSERT INTO entries (key, value, stored_ms) VALUES ");
        for i in 0..rows.len() {
            sql.push_str(if i == 0 { "(?, ?, ?)" } else { ", (?, ?, ?)" });
        }
        sql.push_str(" ON CONFLICT (key) DO UPDATE SET value = excluded.value, stored_ms = excluded.stored_ms");
        // Built from constant fragments only; every value is a bound parameter.
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for r in &rows {
            q = q.bind(&r.key.0).bind(&r.value[..]).bind(r.stored_ms);
        }
        let result = q.execute(&pool).await.map(|_| ()).map_err(unavailable);
        for w in batch.drain(..) {
            let _ = w.done.send(result.clone());
        }
    }
}

fn unavailable(e: sqlx::Error) -> PortError {
    PortError::Unavailable(e.to_string())
}

impl SqliteCache {
    /// Entries older than this are deleted at open, whatever a job asks for.
    pub const RETAIN: Duration = Duration::from_secs(30 * 24 * 3600);

    /// Opens (or creates) the cache file.
    pub async fn open(path: &Path) -> Result<SqliteCache, PortError> {
        let opts = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
            .map_err(unavailable)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(5));
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts.clone())
            .await
            .map_err(unavailable)?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS entries (
                key TEXT PRIMARY KEY,
                value BLOB NOT NULL,
                stored_ms INTEGER NOT NULL
            ) WITHOUT ROWID",
        )
        .execute(&writer)
        .await
        .map_err(unavailable)?;
        let horizon = now_ms() - Self::RETAIN.as_millis() as i64;
        sqlx::query("DELETE FROM entries WHERE stored_ms < ?")
            .bind(horizon)
            .execute(&writer)
            .await
            .map_err(unavailable)?;
        let readers = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts.read_only(true))
            .await
            .map_err(unavailable)?;
        let (writes, rx) = mpsc::channel(4 * BATCH);
        #[cfg(test)]
        let test_writer = writer.clone();
        tokio::spawn(write_loop(writer, rx));
        Ok(SqliteCache {
            readers,
            #[cfg(test)]
            writer: test_writer,
            writes,
            inflight: Inflight::new(),
        })
    }

    /// The stored value if stored within `max_age`.
    pub async fn read(
        &self,
        key: &CacheKey,
        max_age: Duration,
    ) -> Result<Option<Vec<u8>>, PortError> {
        let oldest =
            now_ms().saturating_sub(i64::try_from(max_age.as_millis()).unwrap_or(i64::MAX));
        sqlx::query_scalar::<_, Vec<u8>>(
            "SELECT value FROM entries WHERE key = ? AND stored_ms >= ?",
        )
        .bind(&key.0)
        .bind(oldest)
        .fetch_optional(&self.readers)
        .await
        .map_err(unavailable)
    }

    /// Stores `value` under `key`, committed when this returns.
    pub async fn write(&self, key: &CacheKey, value: &[u8]) -> Result<(), PortError> {
        let (done, wait) = oneshot::channel();
        let w = Write {
            key: key.clone(),
            value: value.to_vec(),
            stored_ms: now_ms(),
            done,
        };
        let gone = || PortError::Unavailable("the cache writer stopped".into());
        self.writes.send(w).await.map_err(|_| gone())?;
        wait.await.map_err(|_| gone())?
    }

    /// Loads and stores; a failed store is logged, the answer still returned.
    async fn load_and_store(
        &self,
        key: &CacheKey,
        load: LoadFuture<'_>,
    ) -> Result<Vec<u8>, ToolError> {
        let value = load.await?;
        if let Err(e) = self.write(key, &value).await {
            tracing::warn!(error = %e, "cache write failed; continuing without caching");
        }
        Ok(value)
    }
}

#[async_trait]
impl ContentCache for SqliteCache {
    async fn get_or_load(
        &self,
        key: &CacheKey,
        max_age: Duration,
        load: LoadFuture<'_>,
    ) -> Result<(Vec<u8>, Served), ToolError> {
        if max_age.is_zero() {
            return self
                .load_and_store(key, load)
                .await
                .map(|v| (v, Served::Loaded));
        }
        let (result, ran) = self
            .inflight
            .run(key, || async {
                match self.read(key, max_age).await {
                    Ok(Some(v)) => return Ok((Arc::new(v), true)),
                    Ok(None) => {}
                    Err(e) => tracing::warn!(error = %e, "cache read failed; loading upstream"),
                }
                self.load_and_store(key, load)
                    .await
                    .map(|v| (Arc::new(v), false))
            })
            .await;
        let (value, from_store) = result?;
        let served = match (from_store, ran) {
            (true, _) => Served::Hit,
            (false, true) => Served::Loaded,
            (false, false) => Served::Coalesced,
        };
        Ok((Arc::unwrap_or_clone(value), served))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use tokio::sync::Notify;

    use super::*;

    async fn cache() -> (tempfile::TempDir, SqliteCache) {
        let dir = tempfile::tempdir().unwrap();
        let c = SqliteCache::open(&dir.path().join("cache.db"))
            .await
            .unwrap();
        (dir, c)
    }

    fn key(s: &str) -> CacheKey {
        CacheKey::new("t", "us", s, "raw")
    }

    #[tokio::test]
    async fn concurrent_identical_calls_make_one_load() {
        let (_d, c) = cache().await;
        let c = Arc::new(c);
        let loads = Arc::new(AtomicU32::new(0));
        let gate = Arc::new(Notify::new());
        let n = 50;
        let mut tasks = Vec::new();
        for _ in 0..n {
            let (c, loads, gate) = (c.clone(), loads.clone(), gate.clone());
            tasks.push(tokio::spawn(async move {
                let load: LoadFuture<'_> = Box::pin(async move {
                    loads.fetch_add(1, Ordering::SeqCst);
                    // Hold the load open until every caller has joined it.
                    gate.notified().await;
                    Ok(b"answer".to_vec())
                });
                c.get_or_load(&key("k"), Duration::from_secs(60), load)
                    .await
            }));
        }
        // Wait until all callers share the one in-flight cell, then let the load finish.
        while c.inflight.callers(&key("k")) < n {
            tokio::task::yield_now().await;
        }
        gate.notify_one();
        let mut served = Vec::new();
        for t in tasks {
            let (v, s) = t.await.unwrap().unwrap();
            assert_eq!(v, b"answer");
            served.push(s);
        }
        assert_eq!(loads.load(Ordering::SeqCst), 1, "one upstream load");
        assert_eq!(served.iter().filter(|s| **s == Served::Loaded).count(), 1);
        assert_eq!(
            served.iter().filter(|s| **s == Served::Coalesced).count(),
            n - 1
        );
    }

    #[tokio::test]
    async fn a_stored_answer_is_a_hit_until_it_is_older_than_max_age() {
        let (_d, c) = cache().await;
        let (_, s) = c
            .get_or_load(
                &key("a"),
                Duration::from_secs(60),
                Box::pin(async { Ok(b"1".to_vec()) }),
            )
            .await
            .unwrap();
        assert_eq!(s, Served::Loaded);
        let (v, s) = c
            .get_or_load(
                &key("a"),
                Duration::from_secs(60),
                Box::pin(async { Ok(b"2".to_vec()) }),
            )
            .await
            .unwrap();
        assert_eq!((v.as_slice(), s), (&b"1"[..], Served::Hit));
        // Make the entry look old, then a short max age misses and reloads.
        sqlx::query("UPDATE entries SET stored_ms = stored_ms - 10000")
            .execute(&c.writer)
            .await
            .unwrap();
        let (v, s) = c
            .get_or_load(
                &key("a"),
                Duration::from_secs(5),
                Box::pin(async { Ok(b"3".to_vec()) }),
            )
            .await
            .unwrap();
        assert_eq!((v.as_slice(), s), (&b"3"[..], Served::Loaded));
    }

    #[tokio::test]
    async fn zero_max_age_always_loads() {
        let (_d, c) = cache().await;
        for i in 0..3u8 {
            let (v, s) = c
                .get_or_load(
                    &key("z"),
                    Duration::ZERO,
                    Box::pin(async move { Ok(vec![i]) }),
                )
                .await
                .unwrap();
            assert_eq!((v, s), (vec![i], Served::Loaded));
        }
    }

    #[tokio::test]
    async fn failed_loads_are_not_cached() {
        let (_d, c) = cache().await;
        let err = c
            .get_or_load(
                &key("f"),
                Duration::from_secs(60),
                Box::pin(async { Err(ToolError::transient("http_502", "x")) }),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code, "http_502");
        let (_, s) = c
            .get_or_load(
                &key("f"),
                Duration::from_secs(60),
                Box::pin(async { Ok(b"ok".to_vec()) }),
            )
            .await
            .unwrap();
        assert_eq!(s, Served::Loaded);
    }

    #[tokio::test]
    async fn concurrent_writes_are_all_committed_and_the_last_of_a_key_wins() {
        let (_d, c) = cache().await;
        let c = Arc::new(c);
        let tasks: Vec<_> = (0..600)
            .map(|i| {
                let c = c.clone();
                tokio::spawn(async move {
                    c.write(&key(&format!("w{i}")), format!("v{i}").as_bytes())
                        .await
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        for i in 0..600 {
            let v = c
                .read(&key(&format!("w{i}")), Duration::from_secs(60))
                .await
                .unwrap();
            assert_eq!(v, Some(format!("v{i}").into_bytes()));
        }
        c.write(&key("same"), b"1").await.unwrap();
        c.write(&key("same"), b"2").await.unwrap();
        assert_eq!(
            c.read(&key("same"), Duration::from_secs(60)).await.unwrap(),
            Some(b"2".to_vec())
        );
    }

    #[tokio::test]
    async fn entries_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache.db");
        {
            let c = SqliteCache::open(&path).await.unwrap();
            c.write(&key("p"), b"kept").await.unwrap();
        }
        let c = SqliteCache::open(&path).await.unwrap();
        assert_eq!(
            c.read(&key("p"), Duration::from_secs(60)).await.unwrap(),
            Some(b"kept".to_vec())
        );
    }
}
