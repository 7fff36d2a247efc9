//! A session's traffic: counted as it passes, within an allowance.
//!
//! Bright Data bills browser and proxy traffic by "the sum of data transmitted
//! to and from the target site: request headers + request data (POST) +
//! response headers + response data"
//! (<https://docs.brightdata.com/general/usage-monitoring/bandwidth>), finished
//! responses or not. So a session's [`Traffic`] counts both directions, byte by
//! byte as they are relayed:
//!
//! - a local session's egress proxy wraps every upstream connection in a
//!   [`Metered`] stream (tunnels and plain requests alike), so what it counts is
//!   what crossed the proxy's upstream side, headers and TLS included;
//! - a remote session (Bright Data's Scraping Browser, no local proxy) adds what
//!   CDP's `Network.dataReceived` reports as it arrives ([`Traffic::add`]).
//!
//! The traffic may use its *allowance*: bytes the session's owner has paid for
//! (reserved from the job's budget), never more than the session's byte limit.
//! When what is left runs low the traffic asks for more ([`Traffic::wants_more`]);
//! the owner answers [`Traffic::allow`] or [`Traffic::deny`]. A metered stream
//! never reads or writes past the allowance: it waits for the answer, and once
//! the allowance is final (the limit reached, or the budget said no) the traffic
//! *stops*: every metered stream fails at once, the proxy drops its connections,
//! and [`Traffic::stopped`] says why ([`Stop`]).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, watch};

/// Why a session's traffic was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The session's byte limit was reached.
    Bytes { limit: u64, seen: u64 },
    /// The job's budget paid for no more.
    Budget { seen: u64 },
}

impl Stop {
    /// Bytes counted when it stopped.
    pub fn seen(&self) -> u64 {
        match *self {
            Stop::Bytes { seen, .. } | Stop::Budget { seen } => seen,
        }
    }
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Bytes { limit, seen } => write!(
                f,
                "the session's byte limit of {limit} bytes was reached ({seen} bytes seen)"
            ),
            Stop::Budget { seen } => write!(
                f,
                "the job's budget pays for no more browser traffic ({seen} bytes seen)"
            ),
        }
    }
}

/// One session's byte count and allowance (see the module doc).
pub struct Traffic {
    state: Mutex<State>,
    /// Told when more allowance is wanted.
    want: Notify,
    stopped: watch::Sender<Option<Stop>>,
}

impl std::fmt::Debug for Traffic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("Traffic")
            .field("sent", &s.sent)
            .field("received", &s.received)
            .field("allowance", &s.allowance)
            .field("max_bytes", &s.max_bytes)
            .finish_non_exhaustive()
    }
}

struct State {
    /// To the upstream (requests).
    sent: u64,
    /// From the upstream (responses).
    received: u64,
    /// Bytes the session may use in all, so far.
    allowance: u64,
    max_bytes: u64,
    /// The size of the last grant: more is asked for when less than half of it
    /// is left.
    last_grant: u64,
    /// The budget gives no more.
    denied: bool,
    /// A request for more is out.
    asked: bool,
    stop: Option<Stop>,
    /// Streams waiting for more allowance.
    waiting: Vec<Waker>,
}

impl State {
    fn total(&self) -> u64 {
        self.sent.saturating_add(self.received)
    }

    fn room(&self) -> u64 {
        self.allowance.saturating_sub(self.total())
    }

    /// No more allowance will come.
    fn is_final(&self) -> bool {
        self.denied || self.allowance >= self.max_bytes
    }

    fn should_ask(&self) -> bool {
        self.stop.is_none()
            && !self.asked
            && !self.is_final()
            && (self.room() <= self.last_grant / 2 || !self.waiting.is_empty())
    }

    /// Stops the traffic; the reason is the limit when it is reached.
    fn stop_now(&mut self) -> Stop {
        if let Some(s) = self.stop {
            return s;
        }
        let seen = self.total();
        let s = if self.allowance >= self.max_bytes {
            Stop::Bytes {
                limit: self.max_bytes,
                seen,
            }
        } else {
            Stop::Budget { seen }
        };
        self.stop = Some(s);
        s
    }
}

/// Which way bytes went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// To the upstream.
    Sent,
    /// From the upstream.
    Received,
}

impl Traffic {
    /// A count that may use `allowance` bytes now, and at most `max_bytes` ever.
    pub fn new(max_bytes: u64, allowance: u64) -> Arc<Traffic> {
        let allowance = allowance.min(max_bytes);
        Arc::new(Traffic {
            state: Mutex::new(State {
                sent: 0,
                received: 0,
                allowance,
                max_bytes,
                last_grant: allowance,
                denied: false,
                asked: false,
                stop: None,
                waiting: Vec::new(),
            }),
            want: Notify::new(),
            stopped: watch::Sender::new(None),
        })
    }

    /// A count with no limit (a proxy no session pays for).
    pub fn unlimited() -> Arc<Traffic> {
        Traffic::new(u64::MAX, u64::MAX)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes in both directions so far.
    pub fn total(&self) -> u64 {
        self.lock().total()
    }

    pub fn sent(&self) -> u64 {
        self.lock().sent
    }

    pub fn received(&self) -> u64 {
        self.lock().received
    }

    /// Bytes the session may use in all, so far.
    pub fn allowance(&self) -> u64 {
        self.lock().allowance
    }

    /// Bytes the allowance may still grow by before the byte limit.
    pub fn headroom(&self) -> u64 {
        let s = self.lock();
        s.max_bytes.saturating_sub(s.allowance)
    }

    /// Why it stopped, if it did.
    pub fn stop(&self) -> Option<Stop> {
        self.lock().stop
    }

    /// Waits until it stops.
    pub async fn stopped(&self) -> Stop {
        let mut rx = self.stopped.subscribe();
        loop {
            if let Some(s) = *rx.borrow_and_update() {
                return s;
            }
            if rx.changed().await.is_err() {
                // The sender lives as long as `self`.
                return std::future::pending().await;
            }
        }
    }

    /// Waits until more allowance is wanted (little is left, or a stream waits
    /// for it); the caller then answers [`Traffic::allow`] or [`Traffic::deny`].
    /// Never returns once the allowance is final.
    pub async fn wants_more(&self) {
        loop {
            let notified = self.want.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut s = self.lock();
                if s.should_ask() {
                    s.asked = true;
                    return;
                }
            }
            notified.await;
        }
    }

    /// `more` bytes paid for (clipped to the byte limit).
    pub fn allow(&self, more: u64) {
        let mut s = self.lock();
        s.allowance = s.allowance.saturating_add(more).min(s.max_bytes);
        s.last_grant = more.max(1);
        s.asked = false;
        self.after_change(s);
    }

    /// No more will be paid for.
    pub fn deny(&self) {
        let mut s = self.lock();
        s.denied = true;
        s.asked = false;
        self.after_change(s);
    }

    /// Bytes counted elsewhere (CDP events of a remote browser): added, and the
    /// traffic stopped when they pass a final allowance.
    pub fn add(&self, direction: Direction, n: u64) {
        if n == 0 {
            return;
        }
        let mut s = self.lock();
        match direction {
            Direction::Sent => s.sent = s.sent.saturating_add(n),
            Direction::Received => s.received = s.received.saturating_add(n),
        }
        self.after_change(s);
    }

    /// Stops (an over-allowance that is final) or asks for more, and wakes the
    /// streams that wait.
    fn after_change(&self, mut s: MutexGuard<'_, State>) {
        let mut stopped = None;
        if s.stop.is_none() && s.is_final() && s.total() > s.allowance {
            stopped = Some(s.stop_now());
        }
        if s.stop.is_none() && s.is_final() && s.room() == 0 && !s.waiting.is_empty() {
            stopped = Some(s.stop_now());
        }
        let ask = s.should_ask();
        let waiting = std::mem::take(&mut s.waiting);
        drop(s);
        if let Some(stop) = stopped {
            self.stopped.send_replace(Some(stop));
        }
        if ask {
            self.want.notify_one();
        }
        for w in waiting {
            w.wake();
        }
    }

    /// How many bytes a stream may move now: `Ready(Ok(n > 0))`, or the error
    /// that stops it, or `Pending` until more is allowed.
    fn room(&self, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        let mut s = self.lock();
        if let Some(stop) = s.stop {
            return Poll::Ready(Err(stopped_error(stop)));
        }
        let room = s.room();
        if room > 0 {
            if s.should_ask() {
                drop(s);
                self.want.notify_one();
            }
            return Poll::Ready(Ok(room));
        }
        if s.is_final() {
            let stop = s.stop_now();
            drop(s);
            self.stopped.send_replace(Some(stop));
            return Poll::Ready(Err(stopped_error(stop)));
        }
        if !s.waiting.iter().any(|w| w.will_wake(cx.waker())) {
            s.waiting.push(cx.waker().clone());
        }
        let ask = s.should_ask();
        drop(s);
        if ask {
            self.want.notify_one();
        }
        Poll::Pending
    }

    fn counted(&self, direction: Direction, n: usize) {
        self.add(direction, n as u64);
    }
}

fn stopped_error(stop: Stop) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, stop.to_string())
}

/// A stream whose bytes both ways are counted into a [`Traffic`], and which
/// moves none past its allowance.
pub struct Metered<S> {
    inner: S,
    traffic: Arc<Traffic>,
}

impl<S> Metered<S> {
    pub fn new(inner: S, traffic: Arc<Traffic>) -> Metered<S> {
        Metered { inner, traffic }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let room = match this.traffic.room(cx) {
            Poll::Ready(Ok(r)) => r,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        };
        // Never more than the allowance lets in. The part read into is
        // initialized first (safe code cannot mark bytes another buffer wrote
        // as initialized), then read into and marked filled.
        let take = usize::try_from(room)
            .unwrap_or(usize::MAX)
            .min(buf.remaining());
        let part = buf.initialize_unfilled_to(take);
        let mut limited = ReadBuf::new(part);
        match Pin::new(&mut this.inner).poll_read(cx, &mut limited) {
            Poll::Ready(Ok(())) => {
                let n = limited.filled().len();
                buf.advance(n);
                this.traffic.counted(Direction::Received, n);
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if data.is_empty() {
            return Pin::new(&mut this.inner).poll_write(cx, data);
        }
        let room = match this.traffic.room(cx) {
            Poll::Ready(Ok(r)) => r,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        };
        let take = usize::try_from(room).unwrap_or(usize::MAX).min(data.len());
        match Pin::new(&mut this.inner).poll_write(cx, &data[..take]) {
            Poll::Ready(Ok(n)) => {
                this.traffic.counted(Direction::Sent, n);
                Poll::Ready(Ok(n))
            }
            other => other,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Reads `stream` to its end or error; the bytes read and the error.
    async fn drain<S: AsyncRead + Unpin>(stream: &mut S) -> (u64, Option<io::Error>) {
        let mut buf = vec![0u8; 16 * 1024];
        let mut n = 0u64;
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => return (n, None),
                Ok(k) => n += k as u64,
                Err(e) => return (n, Some(e)),
            }
        }
    }

    /// A peer that writes `chunk`-byte blocks forever (until the pipe closes).
    fn endless(mut w: tokio::io::DuplexStream) {
        tokio::spawn(async move {
            let block = vec![b'x'; 4096];
            while w.write_all(&block).await.is_ok() {}
        });
    }

    #[tokio::test]
    async fn a_stream_stops_at_the_byte_limit_exactly() {
        let (a, b) = tokio::io::duplex(64 * 1024);
        endless(b);
        let traffic = Traffic::new(50_000, 50_000);
        let mut m = Metered::new(a, traffic.clone());
        let (n, e) = drain(&mut m).await;
        assert_eq!(n, 50_000);
        let e = e.expect("stopped with an error");
        assert_eq!(e.kind(), io::ErrorKind::ConnectionAborted);
        assert!(e.to_string().contains("50000"), "{e}");
        assert_eq!(
            traffic.stop(),
            Some(Stop::Bytes {
                limit: 50_000,
                seen: 50_000
            })
        );
        assert_eq!(traffic.stopped().await, traffic.stop().unwrap());
        // Every later read or write fails at once.
        assert!(m.read(&mut [0u8; 8]).await.is_err());
        assert!(m.write(b"more").await.is_err());
    }

    #[tokio::test]
    async fn more_is_asked_for_and_granted_until_the_budget_says_no() {
        let (a, b) = tokio::io::duplex(64 * 1024);
        endless(b);
        let traffic = Traffic::new(10_000_000, 100_000);
        let grants = {
            let t = traffic.clone();
            tokio::spawn(async move {
                // Two grants of 100 kB, then no more.
                for _ in 0..2 {
                    t.wants_more().await;
                    t.allow(100_000);
                }
                t.wants_more().await;
                t.deny();
            })
        };
        let mut m = Metered::new(a, traffic.clone());
        let (n, e) = drain(&mut m).await;
        grants.await.unwrap();
        assert!(e.is_some());
        assert_eq!(
            n, 300_000,
            "the first allowance and two grants, not a byte more"
        );
        assert_eq!(traffic.received(), 300_000);
        assert_eq!(traffic.stop(), Some(Stop::Budget { seen: 300_000 }));
    }

    #[tokio::test]
    async fn writes_count_and_are_held_to_the_allowance_too() {
        let (a, mut b) = tokio::io::duplex(64 * 1024);
        let reader = tokio::spawn(async move { drain(&mut b).await.0 });
        let traffic = Traffic::new(1_000, 1_000);
        let mut m = Metered::new(a, traffic.clone());
        m.write_all(&[1u8; 600]).await.unwrap();
        assert!(m.write_all(&[1u8; 600]).await.is_err());
        drop(m);
        assert_eq!(reader.await.unwrap(), 1_000);
        assert_eq!(traffic.sent(), 1_000);
        assert_eq!(
            traffic.stop(),
            Some(Stop::Bytes {
                limit: 1_000,
                seen: 1_000
            })
        );
    }

    #[tokio::test]
    async fn counted_bytes_past_a_final_allowance_stop_the_traffic() {
        // A remote session's CDP counts: added after the fact.
        let traffic = Traffic::new(1_000_000, 100_000);
        traffic.add(Direction::Received, 60_000);
        assert_eq!(traffic.stop(), None);
        // Past the allowance while more may come: asked, not stopped.
        traffic.add(Direction::Received, 60_000);
        assert_eq!(traffic.stop(), None);
        tokio::time::timeout(Duration::from_secs(1), traffic.wants_more())
            .await
            .expect("asked for more");
        traffic.deny();
        assert_eq!(traffic.stop(), Some(Stop::Budget { seen: 120_000 }));
        // The limit: reached and passed.
        let traffic = Traffic::new(100_000, 100_000);
        traffic.add(Direction::Received, 100_000);
        assert_eq!(traffic.stop(), None, "at the limit, not past it");
        traffic.add(Direction::Received, 1);
        assert_eq!(
            traffic.stop(),
            Some(Stop::Bytes {
                limit: 100_000,
                seen: 100_001
            })
        );
    }

    use std::time::Duration;
}
