//! The distributed content cache: one Redis shared by every worker pod, with
//! single-flight loads across pods and graceful degradation when Redis is away.
//!
//! # Entries
//!
//! A tool answer lives at `<prefix><key>` as an 8-byte big-endian write time (unix
//! ms) followed by the body, with `PX` set to the storing caller's `max_age`.
//! Freshness is judged at read time against the *reading* caller's `max_age`, so a
//! job with a shorter TTL never gets an older answer than it allows. Write times
//! come from the pods' clocks, which are assumed NTP-close (milliseconds of skew
//! against TTLs of minutes). A zero `max_age` loads and stores nothing.
//!
//! # Single flight
//!
//! On a miss a caller tries `SET <prefix><key>:lock <random token> NX PX <lock ttl>`
//! and reads the entry again in the same round trip (another pod may have stored
//! it meanwhile). The winner loads, then stores the entry and deletes the lock in
//! one Lua script that deletes only if the lock still holds its token; a failed
//! load only releases the lock (same compare-and-delete), so nothing is cached.
//! A winner that is cancelled mid-load releases its lock from a spawned task.
//!
//! The lock's lifetime is short (5 s by default) and the winner renews it every
//! third of that while its load runs (`PEXPIRE`, again only if the lock still
//! holds its token): the lock lives as long as the load, however long the call
//! takes, and a winner killed outright leaves a lock that lapses within one
//! lifetime. The deployed roles check at start that the lifetime is shorter than
//! the queue's ack wait, so a killed worker's locks are gone before its slices
//! are delivered again, and the waiters do not sit idle on them.
//!
//! Losers wait by **polling**: `MGET entry lock` after a jittered backoff that
//! grows from 10 ms to 250 ms. A fresh entry ends the wait ([`Served::Coalesced`]);
//! a lock gone without an entry (the loader failed or died) sends the waiter back
//! to take the lock itself; past the wait limit it loads on its own. Polling was
//! chosen over pub/sub because a waiter must watch for the lock *expiring* anyway
//! (a crashed loader publishes nothing), pub/sub needs a dedicated connection and
//! subscribe-before-check ordering to not lose wakeups, and the cost is small: in
//! one process concurrent lookups of a key share one flow (below), so a pod polls
//! a key about ten times in the first second of a wait and four times a second
//! after that, and a waiter learns of an answer at most ~375 ms after it is stored,
//! on loads that take seconds.
//!
//! Within a process, lookups of the same key *and* `max_age` share one flow
//! (the `inflight` module): 32 concurrent callers make one sequence of round trips
//! and at most one load. Lookups with different `max_age`s run separate flows,
//! which still coalesce through the Redis lock.
//!
//! # Degradation
//!
//! Every Redis command is bounded by the connect and response timeouts. Any Redis
//! error (down, refused, timeout, a server error) makes the call load upstream
//! without caching, increments [`RedisCache::degraded_calls`], and logs a warning
//! at most once per 10 s per process with the number suppressed meanwhile. After
//! an error, calls skip Redis altogether for [`RedisConfig::retry_after`] (so a
//! blackholed Redis does not add a connect timeout to every call), and the
//! connection is rebuilt so that the next call after that window connects afresh,
//! whatever state the old connection was left in: caching resumes by itself when
//! Redis comes back.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::{Client, RedisResult, Script};
use async_trait::async_trait;
use tokio::time::Instant;
use trawl_core::model::now_ms;
use trawl_core::ports::{CacheKey, ContentCache, LoadFuture, PortError, Served, ToolError};

use crate::inflight::Inflight;

/// Deletes `KEYS[1]` if it still holds the token `ARGV[1]`.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
";

/// Sets the lifetime of `KEYS[1]` to `ARGV[2]` ms if it still holds the token
/// `ARGV[1]`: 1 when renewed, 0 when the lock is gone or another's.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// Stores the entry `KEYS[1]` = `ARGV[1]` for `ARGV[2]` ms, then deletes the lock
/// `KEYS[2]` if it still holds the token `ARGV[3]`. The entry is stored even if
/// the lock was lost (it expired during a long load): the answer is fresh anyway.
const STORE_AND_RELEASE: &str = r"
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if redis.call('GET', KEYS[2]) == ARGV[3] then
    return redis.call('DEL', KEYS[2])
end
return 0
";

/// Bytes of write time in front of every stored body.
const HEADER: usize = 8;
/// The longest `PX` we send: Redis refuses expiry times that overflow.
const MAX_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// At most one "Redis is unavailable" warning per this long.
const WARN_EVERY: Duration = Duration::from_secs(10);
/// [`RedisConfig::lock_ttl`]'s default.
pub const DEFAULT_LOCK_TTL: Duration = Duration::from_secs(5);
/// [`RedisConfig::wait_limit`]'s default.
const DEFAULT_WAIT_LIMIT: Duration = Duration::from_secs(30);
/// A waiter's first and longest pause between polls (before jitter).
const POLL_FIRST: Duration = Duration::from_millis(10);
const POLL_MAX: Duration = Duration::from_millis(250);

/// How to reach Redis and how long to wait for it.
#[derive(Clone)]
#[non_exhaustive]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]`; `rediss://` is not compiled in.
    pub url: String,
    /// Put in front of every key, so deployments (or tests) sharing a Redis do not
    /// see each other's entries. Default: empty.
    pub key_prefix: String,
    /// How long a loader's lock lives without being renewed. The loader renews
    /// it every third of this while it loads, so this is how long a lock outlives
    /// a loader that died. Default: 5 s.
    pub lock_ttl: Duration,
    /// How long a caller waits for another pod's load before loading itself (the
    /// longest a load should take: the call timeout); `None` means 30 s.
    pub wait_limit: Option<Duration>,
    /// Bound on opening a connection. Default: 1 s.
    pub connect_timeout: Duration,
    /// Bound on each command's answer. Default: 2 s.
    pub response_timeout: Duration,
    /// After a Redis error, calls go straight to their loads for this long before
    /// Redis is tried again. Default: 1 s.
    pub retry_after: Duration,
}

impl RedisConfig {
    pub fn new(url: impl Into<String>) -> RedisConfig {
        RedisConfig {
            url: url.into(),
            key_prefix: String::new(),
            lock_ttl: DEFAULT_LOCK_TTL,
            wait_limit: None,
            connect_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(2),
            retry_after: Duration::from_secs(1),
        }
    }

    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> RedisConfig {
        self.key_prefix = prefix.into();
        self
    }

    /// Rounded up to at least 1 ms.
    pub fn with_lock_ttl(mut self, ttl: Duration) -> RedisConfig {
        self.lock_ttl = ttl.max(Duration::from_millis(1));
        self
    }

    pub fn with_wait_limit(mut self, limit: Duration) -> RedisConfig {
        self.wait_limit = Some(limit);
        self
    }

    pub fn with_connect_timeout(mut self, timeout: Duration) -> RedisConfig {
        self.connect_timeout = timeout;
        self
    }

    pub fn with_response_timeout(mut self, timeout: Duration) -> RedisConfig {
        self.response_timeout = timeout;
        self
    }

    pub fn with_retry_after(mut self, pause: Duration) -> RedisConfig {
        self.retry_after = pause;
        self
    }

    /// The URL with its password masked, for logs.
    pub fn redacted_url(&self) -> String {
        match url::Url::parse(&self.url) {
            Ok(mut u) => {
                if u.password().is_some() {
                    // Only fails for URLs that cannot have a password at all.
                    let _ = u.set_password(Some("***"));
                }
                u.to_string()
            }
            Err(_) => "<unparseable url>".to_owned(),
        }
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &self.redacted_url())
            .field("key_prefix", &self.key_prefix)
            .field("lock_ttl", &self.lock_ttl)
            .field("wait_limit", &self.wait_limit)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("retry_after", &self.retry_after)
            .finish()
    }
}

/// A flow's answer, shared with the callers coalesced onto it.
type Shared = Result<(Arc<Vec<u8>>, Served), ToolError>;

/// The content cache in Redis. See the module docs for the protocol.
pub struct RedisCache {
    client: Client,
    manager_config: ConnectionManagerConfig,
    /// Cloned out for each command (a cheap `Arc` clone); replaced after an error.
    conn: Mutex<ConnectionManager>,
    prefix: String,
    lock_ttl: Duration,
    wait_limit: Duration,
    /// Bound on one command, connecting included.
    op_timeout: Duration,
    retry_after: Duration,
    release: Script,
    renew: Script,
    store_and_release: Script,
    inflight: Inflight<(CacheKey, Duration), Shared>,
    health: Health,
    /// Told each time a flow starts waiting for another loader.
    #[cfg(test)]
    waiting: Arc<tokio::sync::Notify>,
}

impl fmt::Debug for RedisCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCache")
            .field("prefix", &self.prefix)
            .field("degraded_calls", &self.degraded_calls())
            .finish_non_exhaustive()
    }
}

/// What a lookup in Redis found, before any load.
enum Lookup {
    /// A fresh entry: stored before ([`Served::Hit`]) or while waiting
    /// ([`Served::Coalesced`]).
    Found(Vec<u8>, Served),
    /// This caller holds the lock and must load.
    Lead(Held),
    /// Another loader did not finish within the wait limit.
    GaveUp,
}

impl RedisCache {
    /// Prepares the cache. Connecting is lazy: a Redis that is down at start is
    /// logged and the cache degrades until it answers; only an unparseable URL
    /// fails here.
    pub async fn connect(config: RedisConfig) -> Result<RedisCache, PortError> {
        let shown_url = config.redacted_url();
        let client = Client::open(config.url.as_str())
            .map_err(|e| PortError::Unavailable(format!("invalid redis url {shown_url}: {e}")))?;
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.response_timeout))
            // One attempt per connect: retrying is ours (after `retry_after`), so a
            // call never waits through a backoff schedule.
            .set_number_of_retries(0);
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), manager_config.clone())
            .map_err(|e| PortError::Unavailable(format!("redis connection manager: {e}")))?;
        let cache = RedisCache {
            client,
            manager_config,
            conn: Mutex::new(conn),
            prefix: config.key_prefix,
            lock_ttl: config.lock_ttl.max(Duration::from_millis(1)),
            wait_limit: config.wait_limit.unwrap_or(DEFAULT_WAIT_LIMIT),
            op_timeout: config.connect_timeout + config.response_timeout,
            retry_after: config.retry_after,
            release: Script::new(RELEASE),
            renew: Script::new(RENEW),
            store_and_release: Script::new(STORE_AND_RELEASE),
            inflight: Inflight::new(),
            health: Health::new(),
            #[cfg(test)]
            waiting: Arc::default(),
        };
        if let Err(e) = cache.ping().await {
            tracing::warn!(
                url = %shown_url,
                error = %e,
                "redis cache unreachable at start; loading upstream until it answers"
            );
            cache.skip_redis_for_a_while();
        }
        Ok(cache)
    }

    /// Calls that went to their load without the cache because Redis failed or
    /// had just failed: one per flow (callers coalesced in-process count once).
    pub fn degraded_calls(&self) -> u64 {
        self.health.degraded.load(Ordering::Relaxed)
    }

    fn conn(&self) -> ConnectionManager {
        self.conn.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Runs one Redis command (or pipeline, or script) within the op timeout.
    async fn op<T, F, Fut>(&self, f: F) -> Result<T, PortError>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        match tokio::time::timeout(self.op_timeout, f(self.conn())).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(PortError::Unavailable(format!("redis: {e}"))),
            Err(_) => Err(PortError::Unavailable(format!(
                "redis: no answer within {:?}",
                self.op_timeout
            ))),
        }
    }

    fn value_key(&self, key: &CacheKey) -> String {
        format!("{}{}", self.prefix, key.0)
    }

    fn lock_key(&self, key: &CacheKey) -> String {
        format!("{}{}:lock", self.prefix, key.0)
    }

    /// Skips Redis for `retry_after` and replaces the connection, so the next try
    /// starts from a fresh connect whatever state the old one was left in.
    fn skip_redis_for_a_while(&self) {
        if self.health.trip(self.retry_after) {
            self.reconnect();
        }
    }

    /// Replaces the connection by a new one, connected on its first command.
    fn reconnect(&self) {
        match ConnectionManager::new_lazy_with_config(
            self.client.clone(),
            self.manager_config.clone(),
        ) {
            Ok(fresh) => *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = fresh,
            Err(e) => tracing::debug!(error = %e, "could not rebuild the redis connection"),
        }
    }

    async fn ping_once(&self) -> Result<(), PortError> {
        self.op(|mut c| async move { ::redis::cmd("PING").query_async::<String>(&mut c).await })
            .await
            .map(drop)
    }

    /// Runs `load` while renewing the lock `held` every third of its lifetime:
    /// the lock lives as long as the load, and lapses within one lifetime of a
    /// holder that died. A lock found gone or taken over is no longer renewed
    /// (the load goes on; its answer is stored all the same).
    async fn load_holding(&self, held: &Held, load: LoadFuture<'_>) -> Result<Vec<u8>, ToolError> {
        let renew = async {
            let period = (self.lock_ttl / 3).max(Duration::from_millis(1));
            let ttl = millis(self.lock_ttl);
            let (script, lkey, token) = (&self.renew, &held.lock_key, &held.token);
            loop {
                tokio::time::sleep(period).await;
                let kept = self
                    .op(|mut c| async move {
                        script
                            .key(lkey)
                            .arg(token)
                            .arg(ttl)
                            .invoke_async::<i64>(&mut c)
                            .await
                    })
                    .await;
                match kept {
                    Ok(1) => {}
                    Ok(_) => {
                        tracing::debug!(lock = %lkey, "cache lock lost during its load");
                        break;
                    }
                    Err(e) => {
                        tracing::debug!(lock = %lkey, error = %e, "cache lock not renewed");
                        break;
                    }
                }
            }
            // Renewal has stopped; the load goes on alone.
            std::future::pending().await
        };
        tokio::select! {
            biased;
            loaded = load => loaded,
            never = renew => never,
        }
    }

    /// Counts and (rate-limited) logs a call that goes on without the cache.
    fn degrade(&self, step: &'static str, error: &PortError) {
        self.skip_redis_for_a_while();
        self.health.degraded(step, error);
    }

    /// One lookup of `key` for callers that accept answers up to `max_age` old:
    /// from Redis, from another pod's load, or from `load`.
    async fn flow(
        &self,
        key: &CacheKey,
        max_age: Duration,
        load: LoadFuture<'_>,
    ) -> Result<(Vec<u8>, Served), ToolError> {
        if self.health.skipping() {
            self.health.degraded(
                "skipped after a recent error",
                &PortError::Unavailable("redis failed moments ago".into()),
            );
            return load.await.map(|v| (v, Served::Loaded));
        }
        let held = match self.lookup(key, max_age).await {
            Ok(Lookup::Found(v, served)) => return Ok((v, served)),
            Ok(Lookup::Lead(held)) => Some(held),
            Ok(Lookup::GaveUp) => None,
            Err(e) => {
                self.degrade("lookup", &e);
                return load.await.map(|v| (v, Served::Loaded));
            }
        };
        let loaded = match &held {
            Some(held) => self.load_holding(held, load).await,
            None => load.await,
        };
        self.store(key, max_age, &loaded, held).await;
        loaded.map(|v| (v, Served::Loaded))
    }

    /// Reads, takes the lock or waits for its holder. Never loads.
    async fn lookup(&self, key: &CacheKey, max_age: Duration) -> Result<Lookup, PortError> {
        let (vkey, lkey) = (self.value_key(key), self.lock_key(key));
        let get = ::redis::Cmd::get(&vkey);
        let raw: Option<Vec<u8>> = self
            .op(|mut c| async move { get.query_async(&mut c).await })
            .await?;
        if let Some(v) = fresh(raw, max_age) {
            return Ok(Lookup::Found(v, Served::Hit));
        }
        let deadline = Instant::now() + self.wait_limit;
        let mut pause = POLL_FIRST;
        loop {
            // Take the lock and look again in one round trip: another pod may have
            // stored the entry and released its lock since the read above.
            let token = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
            let mut take = ::redis::pipe();
            take.cmd("SET")
                .arg(&lkey)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(millis(self.lock_ttl))
                .cmd("GET")
                .arg(&vkey);
            let (taken, raw): (Option<String>, Option<Vec<u8>>) = self
                .op(|mut c| async move { take.query_async(&mut c).await })
                .await?;
            let held = taken.map(|_| Held {
                lock_key: lkey.clone(),
                token,
                release: Some((self.conn(), self.release.clone(), self.op_timeout)),
            });
            if let Some(v) = fresh(raw, max_age) {
                if let Some(held) = held {
                    self.release(held).await;
                }
                return Ok(Lookup::Found(v, Served::Hit));
            }
            if let Some(held) = held {
                return Ok(Lookup::Lead(held));
            }
            // Another pod (or another flow here) loads: wait for its entry, or for
            // its lock to go.
            #[cfg(test)]
            self.waiting.notify_one();
            loop {
                let now = Instant::now();
                if now >= deadline {
                    return Ok(Lookup::GaveUp);
                }
                tokio::time::sleep(jitter(pause).min(deadline - now)).await;
                pause = (pause * 2).min(POLL_MAX);
                let (vkey, lkey) = (&vkey, &lkey);
                let (raw, lock): (Option<Vec<u8>>, Option<Vec<u8>>) = self
                    .op(|mut c| async move {
                        ::redis::cmd("MGET")
                            .arg(vkey)
                            .arg(lkey)
                            .query_async(&mut c)
                            .await
                    })
                    .await?;
                if let Some(v) = fresh(raw, max_age) {
                    return Ok(Lookup::Found(v, Served::Coalesced));
                }
                if lock.is_none() {
                    // The loader failed or died: try to take over.
                    break;
                }
            }
        }
    }

    /// Stores a loaded answer and releases the lock if held; a failed load only
    /// releases the lock. Redis errors degrade, they do not fail the call.
    async fn store(
        &self,
        key: &CacheKey,
        max_age: Duration,
        loaded: &Result<Vec<u8>, ToolError>,
        held: Option<Held>,
    ) {
        let vkey = self.value_key(key);
        let ttl = millis(max_age.min(MAX_TTL));
        let done = match (loaded, held) {
            (Ok(body), Some(mut held)) => {
                let entry = encode(now_ms(), body);
                let script = &self.store_and_release;
                let (lkey, token) = (&held.lock_key, &held.token);
                let done = self
                    .op(|mut c| async move {
                        script
                            .key(&vkey)
                            .key(lkey)
                            .arg(entry)
                            .arg(ttl)
                            .arg(token)
                            .invoke_async::<i64>(&mut c)
                            .await
                    })
                    .await;
                held.disarm();
                done.map(drop)
            }
            (Ok(body), None) => {
                let entry = encode(now_ms(), body);
                self.op(|mut c| async move {
                    ::redis::cmd("SET")
                        .arg(&vkey)
                        .arg(entry)
                        .arg("PX")
                        .arg(ttl)
                        .query_async::<()>(&mut c)
                        .await
                })
                .await
            }
            (Err(_), Some(held)) => {
                self.release(held).await;
                Ok(())
            }
            (Err(_), None) => Ok(()),
        };
        if let Err(e) = done {
            self.degrade("store", &e);
        }
    }

    /// Deletes the lock if it still holds our token.
    async fn release(&self, mut held: Held) {
        let script = &self.release;
        let (lkey, token) = (&held.lock_key, &held.token);
        let done = self
            .op(|mut c| async move {
                script
                    .key(lkey)
                    .arg(token)
                    .invoke_async::<i64>(&mut c)
                    .await
            })
            .await;
        held.disarm();
        if let Err(e) = done {
            self.degrade("release", &e);
        }
    }
}

#[async_trait]
impl ContentCache for RedisCache {
    async fn get_or_load(
        &self,
        key: &CacheKey,
        max_age: Duration,
        load: LoadFuture<'_>,
    ) -> Result<(Vec<u8>, Served), ToolError> {
        if max_age.is_zero() {
            return load.await.map(|v| (v, Served::Loaded));
        }
        let (result, ran) = self
            .inflight
            .run(&(key.clone(), max_age), || async {
                self.flow(key, max_age, load)
                    .await
                    .map(|(v, served)| (Arc::new(v), served))
            })
            .await;
        let (value, served) = result?;
        let served = match (ran, served) {
            (true, served) | (false, served @ Served::Hit) => served,
            (false, Served::Loaded | Served::Coalesced) => Served::Coalesced,
        };
        Ok((Arc::unwrap_or_clone(value), served))
    }

    /// `PING`, bounded by the connect and response timeouts. A failed one is
    /// tried once more on a new connection: the pooled one may be left broken by
    /// a Redis restart (a broken pipe) while Redis itself answers.
    async fn ping(&self) -> Result<(), PortError> {
        if self.ping_once().await.is_ok() {
            return Ok(());
        }
        self.reconnect();
        self.ping_once().await
    }
}

/// A lock this caller took. Dropped while armed (the flow was cancelled mid-load),
/// it releases the lock from a spawned task, so other pods need not wait out the
/// lock TTL.
struct Held {
    lock_key: String,
    token: String,
    /// What the drop needs to release; `None` once released or stored.
    release: Option<(ConnectionManager, Script, Duration)>,
}

impl Held {
    fn disarm(&mut self) {
        self.release = None;
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some((mut conn, script, limit)) = self.release.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (lkey, token) = (
            std::mem::take(&mut self.lock_key),
            std::mem::take(&mut self.token),
        );
        runtime.spawn(async move {
            let mut invocation = script.key(&lkey);
            let release = invocation.arg(&token).invoke_async::<i64>(&mut conn);
            if let Ok(Err(e)) = tokio::time::timeout(limit, release).await {
                tracing::debug!(error = %e, "could not release an abandoned cache lock");
            }
        });
    }
}

/// The process-wide view of Redis health: the skip window, the degraded-call
/// count and the warning rate limit. Times are ms since `origin`.
struct Health {
    origin: Instant,
    skip_until: AtomicU64,
    degraded: AtomicU64,
    warn_from: AtomicU64,
    suppressed: AtomicU64,
}

impl Health {
    fn new() -> Health {
        Health {
            origin: Instant::now(),
            skip_until: AtomicU64::new(0),
            degraded: AtomicU64::new(0),
            warn_from: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        millis(self.origin.elapsed())
    }

    fn skipping(&self) -> bool {
        self.now() < self.skip_until.load(Ordering::Relaxed)
    }

    /// Opens (or extends) the skip window; true if it was closed.
    fn trip(&self, pause: Duration) -> bool {
        let now = self.now();
        let before = self
            .skip_until
            .fetch_max(now + millis(pause), Ordering::Relaxed);
        before <= now
    }

    fn degraded(&self, step: &'static str, error: &PortError) {
        self.degraded.fetch_add(1, Ordering::Relaxed);
        let now = self.now();
        let from = self.warn_from.load(Ordering::Relaxed);
        let due = now >= from
            && self
                .warn_from
                .compare_exchange(
                    from,
                    now + millis(WARN_EVERY),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok();
        if due {
            let suppressed = self.suppressed.swap(0, Ordering::Relaxed);
            tracing::warn!(
                step,
                %error,
                suppressed,
                "redis cache unavailable; loading upstream without caching"
            );
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// A pause of `d` give or take half, so waiters on many pods spread out.
fn jitter(d: Duration) -> Duration {
    d.mul_f64(0.5 + fastrand::f64())
}

fn encode(stored_ms: i64, body: &[u8]) -> Vec<u8> {
    let mut entry = Vec::with_capacity(HEADER + body.len());
    entry.extend_from_slice(&stored_ms.to_be_bytes());
    entry.extend_from_slice(body);
    entry
}

/// The body of a stored entry if it was written within `max_age`; an entry too
/// short to have a header counts as missing (and is overwritten by the next load).
fn fresh(raw: Option<Vec<u8>>, max_age: Duration) -> Option<Vec<u8>> {
    let mut raw = raw?;
    let header: [u8; HEADER] = raw.get(..HEADER)?.try_into().ok()?;
    let age = now_ms().saturating_sub(i64::from_be_bytes(header));
    // A write time ahead of ours (clock skew) counts as age zero.
    if age > i64::try_from(max_age.as_millis()).unwrap_or(i64::MAX) {
        return None;
    }
    raw.drain(..HEADER);
    Some(raw)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use ::redis::AsyncCommands;
    use ::redis::aio::MultiplexedConnection;
    use tokio::net::{TcpListener, TcpSocket, TcpStream};
    use tokio::sync::Notify;
    use tokio::task::{JoinHandle, JoinSet};

    use super::*;

    fn redis_url() -> String {
        std::env::var("TRAWL_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
    }

    /// One test's view of the shared Redis: a unique key prefix, and an admin
    /// connection to look behind the cache's back. `cleanup` deletes its keys
    /// (each also has a TTL, so a failed test leaves nothing for long).
    struct Harness {
        config: RedisConfig,
        admin: MultiplexedConnection,
    }

    impl Harness {
        async fn new(test: &str) -> Harness {
            let prefix = format!("trawl-test:{test}:{:016x}:", fastrand::u64(..));
            let config = RedisConfig::new(redis_url()).with_key_prefix(prefix);
            let admin = Client::open(redis_url())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .expect("a redis at TRAWL_TEST_REDIS_URL (default redis://127.0.0.1:6379)");
            Harness { config, admin }
        }

        async fn pod(&self) -> RedisCache {
            RedisCache::connect(self.config.clone()).await.unwrap()
        }

        fn vkey(&self, k: &CacheKey) -> String {
            format!("{}{}", self.config.key_prefix, k.0)
        }

        fn lkey(&self, k: &CacheKey) -> String {
            format!("{}:lock", self.vkey(k))
        }

        async fn raw(&self, key: &str) -> Option<Vec<u8>> {
            self.admin.clone().get(key).await.unwrap()
        }

        async fn cleanup(mut self) {
            let keys: Vec<String> = self
                .admin
                .keys(format!("{}*", self.config.key_prefix))
                .await
                .unwrap();
            if !keys.is_empty() {
                let _: () = self.admin.del(keys).await.unwrap();
            }
        }
    }

    fn key(s: &str) -> CacheKey {
        CacheKey::new("t", "us", s, "raw")
    }

    fn answer(body: &'static [u8]) -> LoadFuture<'static> {
        Box::pin(async move { Ok(body.to_vec()) })
    }

    const MINUTE: Duration = Duration::from_secs(60);

    /// A load that counts its runs, says when it started, and finishes (with
    /// `result`) only when `gate` is notified.
    fn gated(
        runs: &Arc<AtomicU32>,
        started: &Arc<Notify>,
        gate: &Arc<Notify>,
        result: Result<&'static [u8], &'static str>,
    ) -> LoadFuture<'static> {
        let (runs, started, gate) = (runs.clone(), started.clone(), gate.clone());
        Box::pin(async move {
            runs.fetch_add(1, Ordering::SeqCst);
            started.notify_one();
            gate.notified().await;
            result
                .map(<[u8]>::to_vec)
                .map_err(|code| ToolError::transient(code, "upstream failed"))
        })
    }

    /// What `get_or_load` answers, from a task.
    type LoadTask = JoinHandle<Result<(Vec<u8>, Served), ToolError>>;

    /// `pod`'s load of key "k", in a task, through a [`gated`] load: it has
    /// started (and holds the lock) when this returns, and finishes with
    /// `result` when `gate` is notified.
    struct GatedLoad {
        task: LoadTask,
        gate: Arc<Notify>,
    }

    async fn start_gated(
        pod: &Arc<RedisCache>,
        result: Result<&'static [u8], &'static str>,
    ) -> GatedLoad {
        let (runs, started, gate) = (Arc::default(), Arc::default(), Arc::default());
        let load = gated(&runs, &started, &gate, result);
        let pod = pod.clone();
        let task = tokio::spawn(async move { pod.get_or_load(&key("k"), MINUTE, load).await });
        started.notified().await;
        GatedLoad { task, gate }
    }

    /// `pod`'s get of key "k", in a task, with a load that counts its runs
    /// and answers `body`; returns once the pod waits on another's lock.
    async fn wait_behind(pod: &Arc<RedisCache>, body: &'static [u8]) -> (LoadTask, Arc<AtomicU32>) {
        let runs = Arc::new(AtomicU32::new(0));
        let load: LoadFuture<'static> = {
            let runs = runs.clone();
            Box::pin(async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(body.to_vec())
            })
        };
        let task = {
            let pod = pod.clone();
            tokio::spawn(async move { pod.get_or_load(&key("k"), MINUTE, load).await })
        };
        pod.waiting.notified().await;
        (task, runs)
    }

    #[tokio::test]
    async fn loads_once_then_hits() {
        let h = Harness::new("hit").await;
        let c = h.pod().await;
        let (v, s) = c
            .get_or_load(&key("a"), MINUTE, answer(b"1"))
            .await
            .unwrap();
        assert_eq!((v.as_slice(), s), (&b"1"[..], Served::Loaded));
        let (v, s) = c
            .get_or_load(&key("a"), MINUTE, answer(b"2"))
            .await
            .unwrap();
        assert_eq!((v.as_slice(), s), (&b"1"[..], Served::Hit));
        let (v, s) = c
            .get_or_load(&key("b"), MINUTE, answer(b"3"))
            .await
            .unwrap();
        assert_eq!((v.as_slice(), s), (&b"3"[..], Served::Loaded));

        // Stored as write time + body, expiring after the max age, lock released.
        let raw = h.raw(&h.vkey(&key("a"))).await.unwrap();
        assert_eq!(&raw[HEADER..], b"1");
        let written = i64::from_be_bytes(raw[..HEADER].try_into().unwrap());
        assert!((now_ms() - written).abs() < 60_000);
        let ttl: i64 = h.admin.clone().pttl(h.vkey(&key("a"))).await.unwrap();
        assert!(ttl > 0 && ttl <= 60_000, "ttl {ttl}");
        assert_eq!(h.raw(&h.lkey(&key("a"))).await, None);
        assert_eq!(c.degraded_calls(), 0);
        c.ping().await.unwrap();
        h.cleanup().await;
    }

    #[tokio::test]
    async fn an_entry_older_than_the_callers_max_age_is_reloaded() {
        let h = Harness::new("age").await;
        let c = h.pod().await;
        c.get_or_load(&key("a"), MINUTE, answer(b"old"))
            .await
            .unwrap();
        // Make the entry ten seconds old.
        let vkey = h.vkey(&key("a"));
        let aged = encode(now_ms() - 10_000, b"old");
        let _: () = h.admin.clone().pset_ex(&vkey, aged, 60_000).await.unwrap();

        let (v, s) = c
            .get_or_load(&key("a"), MINUTE, answer(b"new"))
            .await
            .unwrap();
        assert_eq!((v.as_slice(), s), (&b"old"[..], Served::Hit));
        let short = Duration::from_secs(5);
        let (v, s) = c
            .get_or_load(&key("a"), short, answer(b"new"))
            .await
            .unwrap();
        assert_eq!((v.as_slice(), s), (&b"new"[..], Served::Loaded));
        assert_eq!(&h.raw(&vkey).await.unwrap()[HEADER..], b"new");
        h.cleanup().await;
    }

    #[tokio::test]
    async fn zero_max_age_always_loads_and_stores_nothing() {
        let h = Harness::new("zero").await;
        let c = h.pod().await;
        for body in [&b"1"[..], b"2", b"3"] {
            let (v, s) = c
                .get_or_load(&key("z"), Duration::ZERO, answer(body))
                .await
                .unwrap();
            assert_eq!((v.as_slice(), s), (body, Served::Loaded));
        }
        assert_eq!(h.raw(&h.vkey(&key("z"))).await, None);
        assert_eq!(h.raw(&h.lkey(&key("z"))).await, None);
        h.cleanup().await;
    }

    #[tokio::test]
    async fn concurrent_callers_in_one_process_share_one_load() {
        let h = Harness::new("inproc").await;
        let c = Arc::new(h.pod().await);
        let (runs, started, gate) = (Arc::default(), Arc::default(), Arc::default());
        let n = 32;
        let mut tasks = Vec::new();
        for _ in 0..n {
            let (c, load) = (c.clone(), gated(&runs, &started, &gate, Ok(b"answer")));
            tasks.push(tokio::spawn(async move {
                c.get_or_load(&key("k"), MINUTE, load).await
            }));
        }
        // Every caller has joined the one flow and its load is running.
        started.notified().await;
        while c.inflight.callers(&(key("k"), MINUTE)) < n {
            tokio::task::yield_now().await;
        }
        gate.notify_one();
        let mut served = Vec::new();
        for t in tasks {
            let (v, s) = t.await.unwrap().unwrap();
            assert_eq!(v, b"answer");
            served.push(s);
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(served.iter().filter(|s| **s == Served::Loaded).count(), 1);
        assert_eq!(
            served.iter().filter(|s| **s == Served::Coalesced).count(),
            n - 1
        );
        h.cleanup().await;
    }

    #[tokio::test]
    async fn a_failed_load_reaches_every_coalesced_caller_and_is_not_cached() {
        let h = Harness::new("fail").await;
        let c = Arc::new(h.pod().await);
        let (runs, started, gate) = (Arc::default(), Arc::default(), Arc::default());
        let tasks: Vec<_> = (0..2)
            .map(|_| {
                let (c, load) = (c.clone(), gated(&runs, &started, &gate, Err("http_502")));
                tokio::spawn(async move { c.get_or_load(&key("f"), MINUTE, load).await })
            })
            .collect();
        started.notified().await;
        while c.inflight.callers(&(key("f"), MINUTE)) < 2 {
            tokio::task::yield_now().await;
        }
        gate.notify_one();
        for t in tasks {
            assert_eq!(t.await.unwrap().unwrap_err().code, "http_502");
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(h.raw(&h.vkey(&key("f"))).await, None);
        assert_eq!(h.raw(&h.lkey(&key("f"))).await, None, "lock released");
        let (_, s) = c
            .get_or_load(&key("f"), MINUTE, answer(b"ok"))
            .await
            .unwrap();
        assert_eq!(s, Served::Loaded);
        h.cleanup().await;
    }

    #[tokio::test]
    async fn two_pods_loading_one_key_run_one_load() {
        let h = Harness::new("pods").await;
        let (a, b) = (Arc::new(h.pod().await), Arc::new(h.pod().await));
        // A holds the lock and is loading.
        let load_a = start_gated(&a, Ok(b"from a")).await;
        // B found the lock taken and waits for A.
        let (task_b, runs_b) = wait_behind(&b, b"from b").await;
        load_a.gate.notify_one();
        let (va, sa) = load_a.task.await.unwrap().unwrap();
        let (vb, sb) = task_b.await.unwrap().unwrap();
        assert_eq!((va.as_slice(), sa), (&b"from a"[..], Served::Loaded));
        assert_eq!((vb.as_slice(), sb), (&b"from a"[..], Served::Coalesced));
        assert_eq!(runs_b.load(Ordering::SeqCst), 0);
        h.cleanup().await;
    }

    #[tokio::test]
    async fn when_the_loader_fails_a_waiting_pod_takes_over() {
        let h = Harness::new("takeover").await;
        let (a, b) = (Arc::new(h.pod().await), Arc::new(h.pod().await));
        let load_a = start_gated(&a, Err("http_503")).await;
        let (task_b, runs_b) = wait_behind(&b, b"from b").await;
        load_a.gate.notify_one();
        assert_eq!(load_a.task.await.unwrap().unwrap_err().code, "http_503");
        let (vb, sb) = task_b.await.unwrap().unwrap();
        assert_eq!((vb.as_slice(), sb), (&b"from b"[..], Served::Loaded));
        assert_eq!(runs_b.load(Ordering::SeqCst), 1);
        assert_eq!(
            &h.raw(&h.vkey(&key("k"))).await.unwrap()[HEADER..],
            b"from b"
        );
        assert_eq!(h.raw(&h.lkey(&key("k"))).await, None);
        h.cleanup().await;
    }

    #[tokio::test]
    async fn a_waiter_loads_itself_after_the_wait_limit() {
        let h = Harness::new("waitlimit").await;
        let a = Arc::new(h.pod().await);
        let b = RedisCache::connect(h.config.clone().with_wait_limit(Duration::from_millis(100)))
            .await
            .unwrap();
        let load_a = start_gated(&a, Ok(b"from a")).await;
        let (vb, sb) = b
            .get_or_load(&key("k"), MINUTE, answer(b"from b"))
            .await
            .unwrap();
        assert_eq!((vb.as_slice(), sb), (&b"from b"[..], Served::Loaded));
        load_a.gate.notify_one();
        let (va, sa) = load_a.task.await.unwrap().unwrap();
        assert_eq!((va.as_slice(), sa), (&b"from a"[..], Served::Loaded));
        assert_eq!(h.raw(&h.lkey(&key("k"))).await, None);
        h.cleanup().await;
    }

    #[tokio::test]
    async fn a_lock_is_released_only_by_its_holder() {
        let h = Harness::new("holder").await;
        let a = Arc::new(h.pod().await);
        let load = start_gated(&a, Ok(b"from a")).await;
        // A's lock "expired" during its load and another pod took it.
        let lkey = h.lkey(&key("k"));
        let _: () = h
            .admin
            .clone()
            .pset_ex(&lkey, "other", 60_000)
            .await
            .unwrap();
        load.gate.notify_one();
        let (v, s) = load.task.await.unwrap().unwrap();
        assert_eq!((v.as_slice(), s), (&b"from a"[..], Served::Loaded));
        assert_eq!(h.raw(&lkey).await.as_deref(), Some(&b"other"[..]));
        assert_eq!(
            &h.raw(&h.vkey(&key("k"))).await.unwrap()[HEADER..],
            b"from a"
        );

        // The release script on its own: a wrong token leaves the lock, the right one deletes it.
        for (token, left) in [("mine", Some(&b"other"[..])), ("other", None)] {
            let deleted: i64 = a
                .release
                .key(&lkey)
                .arg(token)
                .invoke_async(&mut h.admin.clone())
                .await
                .unwrap();
            assert_eq!(deleted, i64::from(left.is_none()));
            assert_eq!(h.raw(&lkey).await.as_deref(), left);
        }
        h.cleanup().await;
    }

    #[tokio::test]
    async fn a_cancelled_loader_releases_its_lock() {
        let h = Harness::new("cancel").await;
        // A lock that would stand a minute unreleased.
        let a = Arc::new(
            RedisCache::connect(h.config.clone().with_lock_ttl(MINUTE))
                .await
                .unwrap(),
        );
        let load = start_gated(&a, Ok(b"never")).await;
        load.task.abort();
        assert!(load.task.await.unwrap_err().is_cancelled());
        // Without the release B would wait out the minute's lock TTL.
        let b = h.pod().await;
        let (v, s) = tokio::time::timeout(
            Duration::from_secs(5),
            b.get_or_load(&key("k"), MINUTE, answer(b"from b")),
        )
        .await
        .expect("the abandoned lock was released")
        .unwrap();
        assert_eq!((v.as_slice(), s), (&b"from b"[..], Served::Loaded));
        h.cleanup().await;
    }

    #[tokio::test]
    async fn a_loader_keeps_its_lock_while_it_loads_past_the_lock_lifetime() {
        let h = Harness::new("renew").await;
        let short = h.config.clone().with_lock_ttl(Duration::from_millis(300));
        let a = Arc::new(RedisCache::connect(short.clone()).await.unwrap());
        let b = Arc::new(RedisCache::connect(short).await.unwrap());
        let load_a = start_gated(&a, Ok(b"from a")).await;
        let (task_b, runs_b) = wait_behind(&b, b"from b").await;
        // A loads for more than three lock lifetimes: unrenewed, its lock would
        // have lapsed and B would have loaded on its own.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            h.raw(&h.lkey(&key("k"))).await.is_some(),
            "the lock lapsed mid-load"
        );
        load_a.gate.notify_one();
        assert_eq!(load_a.task.await.unwrap().unwrap().1, Served::Loaded);
        let (vb, sb) = task_b.await.unwrap().unwrap();
        assert_eq!((vb.as_slice(), sb), (&b"from a"[..], Served::Coalesced));
        assert_eq!(runs_b.load(Ordering::SeqCst), 0);
        assert_eq!(h.raw(&h.lkey(&key("k"))).await, None);
        h.cleanup().await;
    }

    #[tokio::test]
    async fn the_lock_of_a_killed_loader_lapses_within_its_lifetime() {
        let h = Harness::new("killed").await;
        // What a loader killed outright leaves: its lock, renewed no more.
        let lkey = h.lkey(&key("k"));
        let _: () = h.admin.clone().pset_ex(&lkey, "dead", 300).await.unwrap();
        // The waiter would give up only after a minute: it gets the key as soon
        // as the lock lapses.
        let b = RedisCache::connect(
            h.config
                .clone()
                .with_lock_ttl(Duration::from_millis(300))
                .with_wait_limit(MINUTE),
        )
        .await
        .unwrap();
        let (v, s) = tokio::time::timeout(
            Duration::from_secs(5),
            b.get_or_load(&key("k"), MINUTE, answer(b"from b")),
        )
        .await
        .expect("the dead loader's lock lapsed")
        .unwrap();
        assert_eq!((v.as_slice(), s), (&b"from b"[..], Served::Loaded));
        h.cleanup().await;
    }

    #[tokio::test]
    async fn a_ping_after_a_redis_restart_answers_on_a_fresh_connection() {
        let h = Harness::new("ping").await;
        let mut proxy = Proxy::start().await;
        let mut config = h.config.clone();
        config.url = proxy.url();
        let c = RedisCache::connect(config).await.unwrap();
        c.ping().await.unwrap();
        // Redis restarts: the pooled connection is cut, a new one is accepted.
        proxy.pause().await;
        proxy.resume().await;
        c.ping()
            .await
            .expect("the first probe after the restart answers");
        proxy.pause().await;
        h.cleanup().await;
    }

    /// A loopback port with nothing listening.
    async fn closed_port() -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn an_unreachable_redis_degrades_calls_quickly() {
        let port = closed_port().await;
        let started = Instant::now();
        let c = RedisCache::connect(RedisConfig::new(format!("redis://127.0.0.1:{port}")))
            .await
            .unwrap();
        for i in 0..20u8 {
            let load: LoadFuture<'static> = Box::pin(async move { Ok(vec![i]) });
            let (v, s) = c.get_or_load(&key("d"), MINUTE, load).await.unwrap();
            assert_eq!((v, s), (vec![i], Served::Loaded));
        }
        let err = c
            .get_or_load(
                &key("d"),
                MINUTE,
                Box::pin(async { Err(ToolError::permanent("http_404", "gone")) }),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code, "http_404", "load errors still reach the caller");
        assert_eq!(c.degraded_calls(), 21);
        assert!(c.ping().await.is_err());
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }

    /// A TCP proxy to the test Redis on a port of its own, to take Redis away and
    /// bring it back without touching the shared server.
    struct Proxy {
        port: u16,
        task: Option<JoinHandle<()>>,
    }

    impl Proxy {
        async fn start() -> Proxy {
            let mut p = Proxy {
                port: 0,
                task: None,
            };
            p.resume().await;
            p
        }

        fn url(&self) -> String {
            let mut u = url::Url::parse(&redis_url()).unwrap();
            u.set_host(Some("127.0.0.1")).unwrap();
            u.set_port(Some(self.port)).unwrap();
            u.to_string()
        }

        /// Listens again on the same port (0 the first time).
        async fn resume(&mut self) {
            let upstream = url::Url::parse(&redis_url()).unwrap();
            let upstream = format!(
                "{}:{}",
                upstream.host_str().unwrap(),
                upstream.port().unwrap_or(6379)
            );
            let socket = TcpSocket::new_v4().unwrap();
            socket.set_reuseaddr(true).unwrap();
            socket.bind(([127, 0, 0, 1], self.port).into()).unwrap();
            let listener = socket.listen(64).unwrap();
            self.port = listener.local_addr().unwrap().port();
            self.task = Some(tokio::spawn(async move {
                // Dropped with the task on `pause`, closing every connection.
                let mut conns = JoinSet::new();
                while let Ok((mut down, _)) = listener.accept().await {
                    let upstream = upstream.clone();
                    conns.spawn(async move {
                        if let Ok(mut up) = TcpStream::connect(upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                        }
                    });
                }
            }));
        }

        /// Stops listening and cuts every connection.
        async fn pause(&mut self) {
            if let Some(task) = self.task.take() {
                task.abort();
                let _ = task.await;
            }
        }
    }

    #[tokio::test]
    async fn caching_resumes_when_redis_comes_back() {
        let h = Harness::new("recover").await;
        let mut proxy = Proxy::start().await;
        let mut config = h.config.clone().with_retry_after(Duration::from_millis(50));
        config.url = proxy.url();
        let c = RedisCache::connect(config).await.unwrap();
        c.get_or_load(&key("r"), MINUTE, answer(b"1"))
            .await
            .unwrap();
        let (_, s) = c
            .get_or_load(&key("r"), MINUTE, answer(b"2"))
            .await
            .unwrap();
        assert_eq!(s, Served::Hit);

        proxy.pause().await;
        let (v, s) = c
            .get_or_load(&key("r"), MINUTE, answer(b"3"))
            .await
            .unwrap();
        assert_eq!((v.as_slice(), s), (&b"3"[..], Served::Loaded));
        assert!(c.degraded_calls() >= 1);
        assert!(c.ping().await.is_err());

        proxy.resume().await;
        // Redis is back: within a few skip windows the stored entry is served again.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (v, s) = c
                .get_or_load(&key("r"), MINUTE, answer(b"4"))
                .await
                .unwrap();
            if s == Served::Hit {
                assert_eq!(v, b"1");
                break;
            }
            assert!(Instant::now() < deadline, "caching did not resume");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        c.ping().await.unwrap();
        proxy.pause().await;
        h.cleanup().await;
    }

    #[test]
    fn freshness_is_judged_against_the_readers_max_age() {
        let entry = encode(now_ms() - 10_000, b"body");
        assert_eq!(fresh(Some(entry.clone()), MINUTE), Some(b"body".to_vec()));
        assert_eq!(fresh(Some(entry), Duration::from_secs(5)), None);
        assert_eq!(fresh(Some(b"short".to_vec()), MINUTE), None);
        assert_eq!(fresh(None, MINUTE), None);
        // A write time slightly ahead (another pod's clock) is fresh.
        let ahead = encode(now_ms() + 500, b"x");
        assert_eq!(
            fresh(Some(ahead), Duration::from_secs(1)),
            Some(b"x".to_vec())
        );
    }

    #[test]
    fn the_config_debug_hides_the_password() {
        let c = RedisConfig::new("redis://user:hunter2@cache:6379/0");
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("cache:6379"), "{shown}");
        assert_eq!(c.wait_limit, None);
        assert_eq!(
            RedisConfig::new("x").with_lock_ttl(Duration::ZERO).lock_ttl,
            Duration::from_millis(1)
        );
    }
}
