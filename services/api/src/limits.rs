//! Limits that keep one client from exhausting the server: what the connection
//! loop enforces ([`HttpLimits`]: header and body read timeouts, connections per
//! client address) and the request rates per caller ([`RateLimits`]: job
//! submissions and `/mcp`). `/mcp`'s session limits are [`crate::mcp::SessionLimits`].
//!
//! Each limit has a default generous enough for every well-behaved client and is
//! set by the `trawl` binary from its settings (`TRAWL_HTTP_*`, `TRAWL_RATE_*`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use governor::clock::Clock as _;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use http_body::{Body as HttpBody, Frame, SizeHint};

use crate::error::ApiError;

/// What the server loop enforces on every connection, before any route runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpLimits {
    /// A request's line and headers must arrive within this, counted from the
    /// first byte the server waits for (an idle keep-alive connection is closed
    /// after it too). Then the connection is closed without an answer.
    pub header_read_timeout: Duration,
    /// A request's whole body must arrive within this, counted from when its
    /// headers were read. Then the request is answered 408 and the connection
    /// closed.
    pub body_read_timeout: Duration,
    /// Connections open at once from one client address; one more is closed as
    /// soon as it is accepted.
    pub max_connections_per_ip: usize,
}

impl HttpLimits {
    /// 10 s.
    pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
    /// 30 s: a 1 MiB body at 35 KB/s.
    pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
    /// 256.
    pub const DEFAULT_MAX_CONNECTIONS_PER_IP: usize = 256;

    pub fn with_header_read_timeout(mut self, t: Duration) -> HttpLimits {
        self.header_read_timeout = t;
        self
    }

    pub fn with_body_read_timeout(mut self, t: Duration) -> HttpLimits {
        self.body_read_timeout = t;
        self
    }

    /// At least 1.
    pub fn with_max_connections_per_ip(mut self, n: usize) -> HttpLimits {
        self.max_connections_per_ip = n.max(1);
        self
    }
}

impl Default for HttpLimits {
    fn default() -> HttpLimits {
        HttpLimits {
            header_read_timeout: Self::DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: Self::DEFAULT_BODY_READ_TIMEOUT,
            max_connections_per_ip: Self::DEFAULT_MAX_CONNECTIONS_PER_IP,
        }
    }
}

/// Open connections per client address.
#[derive(Debug)]
pub(crate) struct ConnectionsPerIp {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection; its address's count goes down when it is dropped.
#[derive(Debug)]
pub(crate) struct ConnectionSlot {
    table: Arc<ConnectionsPerIp>,
    ip: IpAddr,
}

impl ConnectionsPerIp {
    pub(crate) fn new(max: usize) -> Arc<ConnectionsPerIp> {
        Arc::new(ConnectionsPerIp {
            max: max.max(1),
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for one more connection from `ip`, or `None` when it has `max`.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<ConnectionSlot> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(ip).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(ConnectionSlot {
            table: self.clone(),
            ip,
        })
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut open = self.table.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// A request body that must end before a deadline: past it, the next poll
/// fails and `timed_out` is set, so the server loop answers 408 whatever the
/// handler made of the error.
pub(crate) struct TimedBody<B> {
    inner: B,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timed_out: Arc<AtomicBool>,
}

impl<B> TimedBody<B> {
    pub(crate) fn new(inner: B, within: Duration, timed_out: Arc<AtomicBool>) -> TimedBody<B> {
        TimedBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(within)),
            timed_out,
        }
    }
}

impl<B> HttpBody for TimedBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.timed_out.load(Ordering::Relaxed) {
            return Poll::Ready(Some(Err(BodyTimeout.into())));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    this.timed_out.store(true, Ordering::Relaxed);
                    Poll::Ready(Some(Err(BodyTimeout.into())))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The error of a body that did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in time")]
pub(crate) struct BodyTimeout;

/// One request rate: a burst, refilled at a steady pace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// One request more is allowed after each of these.
    every: Duration,
    /// Requests allowed at once after a quiet spell.
    burst: NonZeroU32,
}

impl RateLimit {
    /// `per_second` requests a second, `burst` at once; both at least 1.
    pub fn per_second(per_second: u32, burst: u32) -> RateLimit {
        RateLimit::every(Duration::from_secs(1) / per_second.max(1), burst)
    }

    /// One request every `every` (at least 1 µs), `burst` (at least 1) at once.
    pub fn every(every: Duration, burst: u32) -> RateLimit {
        RateLimit {
            every: every.max(Duration::from_micros(1)),
            burst: NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN),
        }
    }

    fn quota(self) -> Quota {
        Quota::with_period(self.every)
            .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
            .allow_burst(self.burst)
    }
}

/// `n`, or 1 for 0.
const fn nonzero(n: u32) -> NonZeroU32 {
    match NonZeroU32::new(n) {
        Some(n) => n,
        None => NonZeroU32::MIN,
    }
}

/// The request rates allowed to each caller (by its label: an API key's, an
/// OAuth subject's). A caller over its rate gets 429 with `Retry-After`; other
/// callers are not affected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateLimits {
    /// `POST /v1/jobs` (and nothing else of `/v1`).
    pub jobs: RateLimit,
    /// Every request to `/mcp` (POST, GET and DELETE).
    pub mcp: RateLimit,
}

impl RateLimits {
    /// Job submissions: 10 a second, 50 at once.
    pub const DEFAULT_JOBS: RateLimit = RateLimit {
        every: Duration::from_millis(100),
        burst: nonzero(50),
    };
    /// `/mcp`: 50 requests a second, 200 at once.
    pub const DEFAULT_MCP: RateLimit = RateLimit {
        every: Duration::from_millis(20),
        burst: nonzero(200),
    };

    pub fn with_jobs(mut self, rate: RateLimit) -> RateLimits {
        self.jobs = rate;
        self
    }

    pub fn with_mcp(mut self, rate: RateLimit) -> RateLimits {
        self.mcp = rate;
        self
    }
}

impl Default for RateLimits {
    fn default() -> RateLimits {
        RateLimits {
            jobs: Self::DEFAULT_JOBS,
            mcp: Self::DEFAULT_MCP,
        }
    }
}

/// The limiters of [`RateLimits`], one bucket per caller.
pub(crate) struct Limiters {
    jobs: Keyed,
    mcp: Keyed,
}

impl Limiters {
    pub(crate) fn new(limits: RateLimits) -> Limiters {
        Limiters {
            jobs: Keyed::new(limits.jobs),
            mcp: Keyed::new(limits.mcp),
        }
    }

    /// Takes one job submission of `caller`'s rate, or says when to come back.
    pub(crate) fn job(&self, caller: &str) -> Result<(), ApiError> {
        self.jobs.check(caller)
    }

    /// Takes one `/mcp` request of `caller`'s rate, or says when to come back.
    pub(crate) fn mcp(&self, caller: &str) -> Result<(), ApiError> {
        self.mcp.check(caller)
    }
}

impl Default for Limiters {
    fn default() -> Limiters {
        Limiters::new(RateLimits::default())
    }
}

/// A keyed limiter whose table of callers is trimmed now and then.
struct Keyed {
    limiter: DefaultKeyedRateLimiter<String>,
    checks: AtomicUsize,
}

/// Callers' buckets are trimmed of the full ones every this many checks, so
/// callers that went away do not stay in the table.
const TRIM_EVERY: usize = 4096;

impl Keyed {
    fn new(rate: RateLimit) -> Keyed {
        Keyed {
            limiter: RateLimiter::keyed(rate.quota()),
            checks: AtomicUsize::new(0),
        }
    }

    fn check(&self, caller: &str) -> Result<(), ApiError> {
        if self.checks.fetch_add(1, Ordering::Relaxed) % TRIM_EVERY == TRIM_EVERY - 1 {
            self.limiter.retain_recent();
            self.limiter.shrink_to_fit();
        }
        self.limiter
            .check_key(&caller.to_owned())
            .map_err(|not_until| {
                let wait = not_until.wait_time_from(self.limiter.clock().now());
                ApiError::TooManyRequests {
                    retry_after: retry_after(wait),
                }
            })
    }
}

/// Whole seconds to wait, rounded up, at least 1 (`Retry-After` has no
/// fractions).
pub(crate) fn retry_after(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_counted_per_address_and_given_back() {
        let table = ConnectionsPerIp::new(2);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let first = table.admit(a).unwrap();
        let _second = table.admit(a).unwrap();
        assert!(table.admit(a).is_none(), "a third from one address");
        assert!(table.admit(b).is_some(), "another address is not affected");
        drop(first);
        assert!(table.admit(a).is_some(), "a slot is given back on drop");
    }

    #[test]
    fn a_caller_over_its_rate_is_told_when_to_come_back_and_others_are_not_affected() {
        let l = Limiters::new(
            RateLimits::default().with_jobs(RateLimit::every(Duration::from_secs(30), 3)),
        );
        for _ in 0..3 {
            l.job("key-aaaa").unwrap();
        }
        match l.job("key-aaaa") {
            Err(ApiError::TooManyRequests { retry_after }) => {
                assert!((1..=30).contains(&retry_after), "{retry_after}");
            }
            other => panic!("{other:?}"),
        }
        l.job("key-bbbb").unwrap();
        l.mcp("key-aaaa").unwrap();
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after(Duration::ZERO), 1);
        assert_eq!(retry_after(Duration::from_millis(1)), 1);
        assert_eq!(retry_after(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after(Duration::from_secs(7)), 7);
    }

    #[test]
    fn rates_are_at_least_one() {
        let r = RateLimit::per_second(0, 0);
        assert_eq!(r, RateLimit::every(Duration::from_secs(1), 1));
        assert_eq!(
            RateLimit::per_second(10, 50),
            RateLimits::DEFAULT_JOBS,
            "10/s is one every 100 ms"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stalls_fails_at_its_deadline_and_says_so() {
        /// Eight bytes, then nothing, ever.
        struct Stalled(bool);
        impl HttpBody for Stalled {
            type Data = Bytes;
            type Error = std::convert::Infallible;
            fn poll_frame(
                mut self: Pin<&mut Self>,
                _: &mut Context<'_>,
            ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
                if std::mem::replace(&mut self.0, true) {
                    Poll::Pending
                } else {
                    Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"12345678")))))
                }
            }
        }
        let flag = Arc::new(AtomicBool::new(false));
        let timed = TimedBody::new(Stalled(false), Duration::from_secs(1), flag.clone());
        let started = tokio::time::Instant::now();
        let read = axum::body::to_bytes(axum::body::Body::new(timed), 1024);
        assert!(read.await.is_err());
        assert!(flag.load(Ordering::Relaxed));
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(1),
            "failed at its deadline"
        );
    }
}
