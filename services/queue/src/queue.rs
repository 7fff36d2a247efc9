//! The in-process slice queue: a work queue with one durable pull consumer.
//!
//! Every message is in exactly one place: *waiting* (ready now, or delayed by a nak
//! or a past deadline until its `ready_at`), *in flight* (delivered, with an ack
//! deadline), or gone (acked, termed, or moved to the dead letters). Waiting
//! messages are handed out in order of `ready_at`, then of publication, so messages
//! published together come out first in, first out.
//!
//! Each delivery carries a token. An acker whose token is no longer the one in
//! flight (its delivery expired, or was already settled) does nothing.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until};
use tracing::{debug, warn};
use trawl_core::ports::{Acker, DeadLetter, Delivery, PortError, SliceMessage, SliceQueue};

/// How long the queue waits for a consumer, and how often it tries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueConfig {
    /// A delivery not acked, naked or termed within this time (restarted by
    /// `in_progress`) is delivered again. At least 1 ms.
    pub ack_wait: Duration,
    /// Deliveries before a message becomes a dead letter. At least 1.
    pub max_deliver: u32,
}

impl Default for QueueConfig {
    /// 30 seconds and 3 deliveries, as the JetStream consumer is configured.
    fn default() -> Self {
        QueueConfig {
            ack_wait: Duration::from_secs(30),
            max_deliver: 3,
        }
    }
}

impl QueueConfig {
    /// Sets `ack_wait`; values under 1 ms become 1 ms, so a delivery can be acked.
    pub fn with_ack_wait(mut self, ack_wait: Duration) -> Self {
        self.ack_wait = ack_wait.max(Duration::from_millis(1));
        self
    }

    /// Sets `max_deliver`; 0 becomes 1, since every message is delivered once.
    pub fn with_max_deliver(mut self, max_deliver: u32) -> Self {
        self.max_deliver = max_deliver.max(1);
        self
    }
}

/// The embedded [`SliceQueue`]. Cloning is cheap and shares the queue.
#[derive(Clone)]
pub struct EmbeddedQueue {
    inner: Arc<Inner>,
}

impl fmt::Debug for EmbeddedQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedQueue")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl EmbeddedQueue {
    pub fn new(config: QueueConfig) -> EmbeddedQueue {
        // Struct literals bypass the builders' clamping; apply it here too.
        let config = QueueConfig::default()
            .with_ack_wait(config.ack_wait)
            .with_max_deliver(config.max_deliver);
        EmbeddedQueue {
            inner: Arc::new(Inner {
                config,
                state: Mutex::new(State::default()),
                pullers: Notify::new(),
                dead_readers: Notify::new(),
            }),
        }
    }

    pub fn config(&self) -> QueueConfig {
        self.inner.config
    }

    /// Messages not yet done: ready, delayed, or in flight.
    pub fn pending(&self) -> usize {
        self.inner.observe(|st| st.entries.len())
    }

    /// Messages delivered and not yet acked, naked or termed.
    pub fn in_flight(&self) -> usize {
        self.inner.observe(|st| st.deadlines.len())
    }

    /// Dead letters not yet read with [`SliceQueue::dead_letter`].
    pub fn dead_letters(&self) -> usize {
        self.inner.observe(|st| st.dead.len())
    }
}

#[async_trait]
impl SliceQueue for EmbeddedQueue {
    async fn publish(&self, msg: &SliceMessage) -> Result<(), PortError> {
        let id = msg.msg_id();
        let traceparent = trawl_telemetry::propagation::current_traceparent();
        let published = {
            let mut st = self.inner.lock();
            st.publish(id.clone(), msg.clone(), traceparent, Instant::now())
        };
        if published {
            self.inner.wake(Wake {
                pullers: true,
                dead_readers: false,
            });
        } else {
            debug!(msg_id = %id, "duplicate message id; ignored");
        }
        Ok(())
    }

    /// Cancel safe: a message is taken and returned without an `.await` between,
    /// so dropping the future never loses one.
    async fn pull(&self) -> Result<Delivery, PortError> {
        let inner = &self.inner;
        let ack_wait = inner.config.ack_wait;
        let taken = inner
            .wait(&inner.pullers, |st, now, wake| {
                match st.take(now, ack_wait) {
                    Some(taken) => {
                        // A new ack deadline: dead-letter readers may need to wake sooner.
                        wake.dead_readers = true;
                        Ok(taken)
                    }
                    None => Err(st.next_event()),
                }
            })
            .await;
        debug!(msg_id = %taken.message.msg_id(), delivery = taken.delivery, "delivered");
        Ok(Delivery {
            message: taken.message,
            delivery: taken.delivery,
            max_deliver: inner.config.max_deliver,
            traceparent: taken.traceparent,
            acker: Box::new(EmbeddedAcker {
                inner: Arc::clone(inner),
                seq: taken.seq,
                token: taken.token,
            }),
        })
    }

    async fn dead_letter(&self) -> Result<DeadLetter, PortError> {
        let inner = &self.inner;
        let letter = inner
            .wait(&inner.dead_readers, |st, _now, _wake| {
                st.dead
                    .pop_front()
                    .ok_or_else(|| st.deadlines.first().map(|&(at, _)| at))
            })
            .await;
        Ok(letter)
    }

    async fn lag(&self) -> Result<u64, PortError> {
        Ok(self.pending() as u64)
    }
}

/// What a consumer decided about one delivery.
#[derive(Clone, Copy, Debug)]
enum Verdict {
    Ack,
    Nak(Duration),
    InProgress,
    Term,
}

/// Settles one delivery; ignored once that delivery is no longer in flight.
struct EmbeddedAcker {
    inner: Arc<Inner>,
    seq: u64,
    token: u64,
}

#[async_trait]
impl Acker for EmbeddedAcker {
    async fn ack(&self) -> Result<(), PortError> {
        self.inner.settle(self.seq, self.token, Verdict::Ack);
        Ok(())
    }

    async fn nak(&self, delay: Duration) -> Result<(), PortError> {
        self.inner.settle(self.seq, self.token, Verdict::Nak(delay));
        Ok(())
    }

    async fn in_progress(&self) -> Result<(), PortError> {
        self.inner.settle(self.seq, self.token, Verdict::InProgress);
        Ok(())
    }

    async fn term(&self) -> Result<(), PortError> {
        self.inner.settle(self.seq, self.token, Verdict::Term);
        Ok(())
    }
}

struct Inner {
    config: QueueConfig,
    state: Mutex<State>,
    /// Woken when a message may have become ready.
    pullers: Notify,
    /// Woken when a dead letter was added or a new ack deadline was set.
    dead_readers: Notify,
}

/// Which waiters a change concerns.
#[derive(Clone, Copy, Debug, Default)]
struct Wake {
    pullers: bool,
    dead_readers: bool,
}

impl Wake {
    fn or(self, other: Wake) -> Wake {
        Wake {
            pullers: self.pullers || other.pullers,
            dead_readers: self.dead_readers || other.dead_readers,
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while the state is half updated, so a poisoned lock still
        // guards consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes every waiter a change concerns; each re-checks the state itself.
    fn wake(&self, wake: Wake) {
        if wake.pullers {
            self.pullers.notify_waiters();
        }
        if wake.dead_readers {
            self.dead_readers.notify_waiters();
        }
    }

    /// Reads the state after processing expired deliveries.
    fn observe<T>(&self, read: impl FnOnce(&State) -> T) -> T {
        let (value, wake) = {
            let mut st = self.lock();
            let wake = st.expire(Instant::now(), self.config.max_deliver);
            (read(&st), wake)
        };
        self.wake(wake);
        value
    }

    /// Runs `step` until it yields a value. Between tries it sleeps until `notify`
    /// fires or until the instant `step` returned, when a timer may change things.
    async fn wait<T>(
        &self,
        notify: &Notify,
        mut step: impl FnMut(&mut State, Instant, &mut Wake) -> Result<T, Option<Instant>>,
    ) -> T {
        loop {
            // Registered before the state is read, so a change made after the read
            // still wakes this waiter.
            let notified = notify.notified();
            let now = Instant::now();
            let (found, wake) = {
                let mut st = self.lock();
                let mut wake = st.expire(now, self.config.max_deliver);
                let found = step(&mut st, now, &mut wake);
                (found, wake)
            };
            self.wake(wake);
            match found {
                Ok(value) => return value,
                Err(Some(at)) => {
                    tokio::select! {
                        () = notified => {}
                        () = sleep_until(at) => {}
                    }
                }
                Err(None) => notified.await,
            }
        }
    }

    fn settle(&self, seq: u64, token: u64, verdict: Verdict) {
        let now = Instant::now();
        let wake = {
            let mut st = self.lock();
            let wake = st.expire(now, self.config.max_deliver);
            wake.or(st.settle(seq, token, verdict, now, &self.config))
        };
        self.wake(wake);
    }
}

/// A message the queue holds.
struct Entry {
    message: SliceMessage,
    /// Of the span that published it.
    traceparent: Option<String>,
    /// Deliveries made so far; the one in flight included.
    deliveries: u32,
    flight: Option<Flight>,
}

/// The delivery in flight.
#[derive(Clone, Copy, Debug)]
struct Flight {
    token: u64,
    deadline: Instant,
}

/// A delivery just taken off the queue.
struct Taken {
    message: SliceMessage,
    traceparent: Option<String>,
    delivery: u32,
    seq: u64,
    token: u64,
}

#[derive(Default)]
struct State {
    /// Publication order; breaks ties between messages ready at the same instant.
    next_seq: u64,
    next_token: u64,
    /// Every message id ever published.
    seen: HashSet<String>,
    /// Messages waiting or in flight, by sequence number.
    entries: HashMap<u64, Entry>,
    /// `(ready_at, seq)` of waiting messages.
    waiting: BTreeSet<(Instant, u64)>,
    /// `(deadline, seq)` of messages in flight.
    deadlines: BTreeSet<(Instant, u64)>,
    /// Dead letters not yet read.
    dead: VecDeque<DeadLetter>,
}

impl State {
    /// False if the id was seen before.
    fn publish(
        &mut self,
        id: String,
        message: SliceMessage,
        traceparent: Option<String>,
        now: Instant,
    ) -> bool {
        if !self.seen.insert(id) {
            return false;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.entries.insert(
            seq,
            Entry {
                message,
                traceparent,
                deliveries: 0,
                flight: None,
            },
        );
        self.waiting.insert((now, seq));
        true
    }

    /// Takes the first message ready at `now` and puts it in flight.
    fn take(&mut self, now: Instant, ack_wait: Duration) -> Option<Taken> {
        while let Some(&(ready_at, seq)) = self.waiting.first() {
            if ready_at > now {
                return None;
            }
            self.waiting.pop_first();
            let Some(entry) = self.entries.get_mut(&seq) else {
                continue;
            };
            let token = self.next_token;
            self.next_token += 1;
            let deadline = later(now, ack_wait);
            entry.deliveries += 1;
            entry.flight = Some(Flight { token, deadline });
            self.deadlines.insert((deadline, seq));
            return Some(Taken {
                message: entry.message.clone(),
                traceparent: entry.traceparent.clone(),
                delivery: entry.deliveries,
                seq,
                token,
            });
        }
        None
    }

    /// When a waiting message becomes ready or a delivery expires, whichever is first.
    fn next_event(&self) -> Option<Instant> {
        let ready = self.waiting.first().map(|&(at, _)| at);
        let expiry = self.deadlines.first().map(|&(at, _)| at);
        match (ready, expiry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Releases every delivery whose deadline is not after `now`.
    fn expire(&mut self, now: Instant, max_deliver: u32) -> Wake {
        let mut wake = Wake::default();
        while let Some(&(deadline, seq)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_first();
            debug!(seq, "ack wait expired");
            wake = wake.or(self.release(seq, deadline, max_deliver));
        }
        wake
    }

    /// Ends the flight of `seq` (its deadline already removed): waiting again from
    /// `ready_at`, or a dead letter if it had all its deliveries.
    fn release(&mut self, seq: u64, ready_at: Instant, max_deliver: u32) -> Wake {
        let Some(entry) = self.entries.get_mut(&seq) else {
            return Wake::default();
        };
        entry.flight = None;
        if entry.deliveries < max_deliver {
            self.waiting.insert((ready_at, seq));
            return Wake {
                pullers: true,
                dead_readers: false,
            };
        }
        let Some(entry) = self.entries.remove(&seq) else {
            return Wake::default();
        };
        warn!(
            msg_id = %entry.message.msg_id(),
            deliveries = entry.deliveries,
            "message ran out of deliveries; dead letter"
        );
        self.dead.push_back(DeadLetter {
            message: entry.message,
            deliveries: entry.deliveries,
        });
        Wake {
            pullers: false,
            dead_readers: true,
        }
    }

    fn settle(
        &mut self,
        seq: u64,
        token: u64,
        verdict: Verdict,
        now: Instant,
        config: &QueueConfig,
    ) -> Wake {
        let flight = self
            .entries
            .get(&seq)
            .and_then(|e| e.flight)
            .filter(|f| f.token == token);
        let Some(flight) = flight else {
            debug!(seq, ?verdict, "stale delivery; ignored");
            return Wake::default();
        };
        self.deadlines.remove(&(flight.deadline, seq));
        match verdict {
            Verdict::Ack | Verdict::Term => {
                if let Some(entry) = self.entries.remove(&seq) {
                    debug!(msg_id = %entry.message.msg_id(), ?verdict, "settled");
                }
                Wake::default()
            }
            Verdict::Nak(delay) => self.release(seq, later(now, delay), config.max_deliver),
            Verdict::InProgress => {
                let deadline = later(now, config.ack_wait);
                if let Some(entry) = self.entries.get_mut(&seq) {
                    entry.flight = Some(Flight { token, deadline });
                }
                self.deadlines.insert((deadline, seq));
                // Only later than before: waiters wake at the old deadline and
                // find nothing, which is harmless.
                Wake::default()
            }
        }
    }
}

/// `now + d`, saturating at about 30 years ahead (as tokio does for sleeps).
fn later(now: Instant, d: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);
    now.checked_add(d.min(FAR)).unwrap_or(now)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::HashSet;

    use tokio::sync::mpsc;
    use tokio::time::{advance, timeout};
    use trawl_core::geo::Geo;
    use trawl_core::model::{JobId, SliceKind, SliceSpec};

    use super::*;

    fn msg(n: u32) -> SliceMessage {
        let kind = SliceKind::Page {
            url: format!("https://shop.example/p/{n}"),
            geo: Geo::parse("us").unwrap(),
        };
        SliceMessage {
            job_id: JobId::generate(1_700_000_000_000, 42),
            slice: SliceSpec::new(kind, None),
        }
    }

    fn queue(ack_wait_secs: u64, max_deliver: u32) -> EmbeddedQueue {
        EmbeddedQueue::new(
            QueueConfig::default()
                .with_ack_wait(Duration::from_secs(ack_wait_secs))
                .with_max_deliver(max_deliver),
        )
    }

    /// A delivery ready at this very instant. `timeout` polls `pull` once before
    /// looking at its zero deadline, so time does not move.
    async fn pull_now(q: &EmbeddedQueue) -> Delivery {
        timeout(Duration::ZERO, q.pull())
            .await
            .expect("a message is ready now")
            .unwrap()
    }

    async fn nothing_ready(q: &EmbeddedQueue) -> bool {
        timeout(Duration::ZERO, q.pull()).await.is_err()
    }

    async fn pull_now_dead(q: &EmbeddedQueue) -> DeadLetter {
        timeout(Duration::ZERO, q.dead_letter())
            .await
            .expect("a dead letter is ready now")
            .unwrap()
    }

    async fn no_dead_letter(q: &EmbeddedQueue) -> bool {
        timeout(Duration::ZERO, q.dead_letter()).await.is_err()
    }

    #[tokio::test(start_paused = true)]
    async fn messages_come_out_in_publication_order() {
        let q = queue(30, 3);
        for n in 0..5 {
            q.publish(&msg(n)).await.unwrap();
        }
        for n in 0..5 {
            let d = pull_now(&q).await;
            assert_eq!(d.message, msg(n));
            assert_eq!(d.delivery, 1);
            assert_eq!(d.max_deliver, 3);
        }
        assert!(nothing_ready(&q).await);
        assert_eq!(q.in_flight(), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn a_naked_message_does_not_hold_up_ready_ones() {
        let q = queue(30, 3);
        q.publish(&msg(1)).await.unwrap();
        q.publish(&msg(2)).await.unwrap();
        let first = pull_now(&q).await;
        first.acker.nak(Duration::from_secs(5)).await.unwrap();
        assert_eq!(pull_now(&q).await.message, msg(2));
    }

    #[tokio::test(start_paused = true)]
    async fn publishing_an_id_seen_before_is_ignored() {
        let q = queue(30, 3);
        q.publish(&msg(1)).await.unwrap();
        q.publish(&msg(1)).await.unwrap();
        q.publish(&msg(2)).await.unwrap();
        assert_eq!(q.pending(), 2);

        // Still ignored once in flight, and once acked.
        let d = pull_now(&q).await;
        assert_eq!(d.message, msg(1));
        q.publish(&msg(1)).await.unwrap();
        d.acker.ack().await.unwrap();
        q.publish(&msg(1)).await.unwrap();

        assert_eq!(pull_now(&q).await.message, msg(2));
        assert!(nothing_ready(&q).await);
        assert_eq!(q.pending(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_acked_message_is_gone() {
        let q = queue(10, 3);
        q.publish(&msg(1)).await.unwrap();
        let d = pull_now(&q).await;
        assert_eq!(q.pending(), 1);
        d.acker.ack().await.unwrap();
        assert_eq!(q.pending(), 0);
        assert_eq!(q.in_flight(), 0);

        advance(Duration::from_secs(60)).await;
        assert!(nothing_ready(&q).await);
        assert!(no_dead_letter(&q).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_nak_redelivers_after_its_delay() {
        let q = queue(30, 3);
        q.publish(&msg(1)).await.unwrap();
        let d = pull_now(&q).await;
        d.acker.nak(Duration::from_secs(10)).await.unwrap();
        assert_eq!(q.pending(), 1);
        assert_eq!(q.in_flight(), 0);

        assert!(nothing_ready(&q).await);
        advance(Duration::from_millis(9_999)).await;
        assert!(nothing_ready(&q).await);
        advance(Duration::from_millis(1)).await;
        let again = pull_now(&q).await;
        assert_eq!(again.message, msg(1));
        assert_eq!(again.delivery, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_puller_wakes_when_the_nak_delay_ends() {
        let q = queue(30, 3);
        q.publish(&msg(1)).await.unwrap();
        pull_now(&q)
            .await
            .acker
            .nak(Duration::from_secs(7))
            .await
            .unwrap();
        let start = Instant::now();
        // Paused time jumps to the puller's timer, and to nothing earlier.
        let d = timeout(Duration::from_secs(60), q.pull())
            .await
            .expect("redelivered within 60 s")
            .unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(7));
        assert_eq!(d.delivery, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn in_progress_restarts_the_ack_wait() {
        let q = queue(10, 3);
        q.publish(&msg(1)).await.unwrap();
        let d = pull_now(&q).await;

        advance(Duration::from_secs(8)).await;
        d.acker.in_progress().await.unwrap();
        advance(Duration::from_secs(8)).await;
        // 16 s since delivery, 8 s since in_progress: still in flight.
        assert!(nothing_ready(&q).await);
        assert_eq!(q.in_flight(), 1);

        advance(Duration::from_secs(2)).await;
        let again = pull_now(&q).await;
        assert_eq!(again.delivery, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unacked_delivery_is_redelivered_after_the_ack_wait() {
        let q = queue(10, 3);
        q.publish(&msg(1)).await.unwrap();
        let _first = pull_now(&q).await;

        advance(Duration::from_millis(9_999)).await;
        assert!(nothing_ready(&q).await);
        advance(Duration::from_millis(1)).await;
        let second = pull_now(&q).await;
        assert_eq!(second.message, msg(1));
        assert_eq!(second.delivery, 2);
        assert!(!second.is_last());
    }

    #[tokio::test(start_paused = true)]
    async fn after_max_deliver_a_message_is_a_dead_letter() {
        let q = queue(10, 2);
        q.publish(&msg(1)).await.unwrap();

        // msg 1 runs out by expiry; dead_letter() waits for the timer itself.
        let first = pull_now(&q).await;
        assert_eq!(first.message, msg(1));
        advance(Duration::from_secs(10)).await;
        let second = pull_now(&q).await;
        assert_eq!((second.message.clone(), second.delivery), (msg(1), 2));
        assert!(second.is_last());
        let start = Instant::now();
        let dead = timeout(Duration::from_secs(60), q.dead_letter())
            .await
            .expect("a dead letter within 60 s")
            .unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        assert_eq!(dead.message, msg(1));
        assert_eq!(dead.deliveries, 2);

        // msg 2 runs out by a nak on its last delivery.
        q.publish(&msg(2)).await.unwrap();
        let d = pull_now(&q).await;
        assert_eq!(d.message, msg(2));
        d.acker.nak(Duration::ZERO).await.unwrap();
        let d = pull_now(&q).await;
        assert_eq!(d.delivery, 2);
        d.acker.nak(Duration::ZERO).await.unwrap();
        let dead = pull_now_dead(&q).await;
        assert_eq!((dead.message, dead.deliveries), (msg(2), 2));

        // Neither comes back.
        assert_eq!(q.pending(), 0);
        advance(Duration::from_secs(60)).await;
        assert!(nothing_ready(&q).await);
        assert!(no_dead_letter(&q).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_termed_message_never_comes_back_and_is_not_a_dead_letter() {
        let q = queue(10, 3);
        q.publish(&msg(1)).await.unwrap();
        let d = pull_now(&q).await;
        d.acker.term().await.unwrap();
        assert_eq!(q.pending(), 0);

        advance(Duration::from_secs(60)).await;
        assert!(nothing_ready(&q).await);
        assert!(no_dead_letter(&q).await);
        assert_eq!(q.dead_letters(), 0);
        // Its id stays taken.
        q.publish(&msg(1)).await.unwrap();
        assert_eq!(q.pending(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn settling_an_expired_delivery_does_nothing() {
        let q = queue(10, 3);
        q.publish(&msg(1)).await.unwrap();
        let first = pull_now(&q).await;
        advance(Duration::from_secs(10)).await;

        // Expired but not yet redelivered: already stale.
        first.acker.ack().await.unwrap();
        assert_eq!(q.pending(), 1);
        let second = pull_now(&q).await;
        assert_eq!(second.delivery, 2);

        // Stale after redelivery: none of these touch the second delivery.
        first.acker.ack().await.unwrap();
        first.acker.term().await.unwrap();
        first.acker.nak(Duration::ZERO).await.unwrap();
        first.acker.in_progress().await.unwrap();
        assert_eq!(q.pending(), 1);
        assert_eq!(q.in_flight(), 1);
        assert!(nothing_ready(&q).await);

        // The second delivery keeps its own deadline, and its ack counts once.
        advance(Duration::from_secs(10)).await;
        let third = pull_now(&q).await;
        assert_eq!(third.delivery, 3);
        third.acker.ack().await.unwrap();
        third.acker.ack().await.unwrap();
        third.acker.nak(Duration::ZERO).await.unwrap();
        second.acker.ack().await.unwrap();
        assert_eq!(q.pending(), 0);
        assert!(nothing_ready(&q).await);
        assert!(no_dead_letter(&q).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_puller_wakes_on_publish() {
        let q = queue(30, 3);
        let puller = tokio::spawn({
            let q = q.clone();
            async move { q.pull().await.map(|d| d.message) }
        });
        tokio::task::yield_now().await;
        assert!(!puller.is_finished());

        q.publish(&msg(1)).await.unwrap();
        // Paused time: a lost wake-up would leave only this timeout to fire.
        let got = timeout(Duration::from_secs(1), puller).await;
        assert_eq!(got.unwrap().unwrap().unwrap(), msg(1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_pullers_each_get_distinct_messages() {
        const MESSAGES: u32 = 1000;
        let q = EmbeddedQueue::new(QueueConfig::default());
        let (tx, mut rx) = mpsc::unbounded_channel();
        let pullers: Vec<_> = (0..4)
            .map(|_| {
                let (q, tx) = (q.clone(), tx.clone());
                tokio::spawn(async move {
                    loop {
                        let d = q.pull().await.unwrap();
                        d.acker.ack().await.unwrap();
                        if tx.send((d.message.msg_id(), d.delivery)).is_err() {
                            return;
                        }
                    }
                })
            })
            .collect();
        // Publish while the pullers already wait, so wake-ups are exercised too.
        let publisher = tokio::spawn({
            let q = q.clone();
            async move {
                for n in 0..MESSAGES {
                    q.publish(&msg(n)).await.unwrap();
                }
            }
        });

        let mut seen = HashSet::new();
        for _ in 0..MESSAGES {
            let (id, delivery) = timeout(Duration::from_secs(30), rx.recv())
                .await
                .expect("pullers stalled")
                .unwrap();
            assert_eq!(delivery, 1, "{id} was redelivered");
            assert!(seen.insert(id.clone()), "{id} was delivered twice");
        }
        publisher.await.unwrap();
        let expected: HashSet<_> = (0..MESSAGES).map(|n| msg(n).msg_id()).collect();
        assert_eq!(seen, expected);
        assert_eq!(q.pending(), 0);
        for p in pullers {
            p.abort();
        }
    }
}
