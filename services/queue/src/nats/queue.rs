//! [`NatsQueue`]: slices on a JetStream work-queue stream, pulled through one
//! durable consumer per worker pool, shared by every worker of that pool.
//!
//! # Pools
//!
//! A queue belongs to one [`Pool`]: its `pull` takes from that pool's consumer
//! (`workers` or `workers-isolated`), and so do [`NatsQueue::stats`] and
//! [`SliceQueue::lag`]. `publish` is the same for both: the subject of a slice's
//! kind decides which consumer sees it. Dead letters of both pools come through
//! either queue. The consumers and their filters are listed in the [parent
//! module](super).
//!
//! # Pulling
//!
//! A worker runs many loops, each calling [`SliceQueue::pull`]. They do not each
//! send pull requests: one background task (the *fetcher*) asks JetStream for as
//! many messages as there are callers waiting, minus those already fetched, and
//! puts what arrives into a bounded channel the callers take from in turn. So at
//! most a handful of messages sit fetched but not handed out, which matters because
//! a fetched message's ack timer is already running.
//!
//! `pull` is cancel-safe: a caller that gives up either took nothing, or took a
//! message without awaiting anything in between, so nothing fetched is lost. A
//! message fetched for a caller that gave up waits in the channel for the next one;
//! if it has waited more than half its ack deadline it is dropped instead, and
//! JetStream delivers it again when the deadline passes.
//!
//! While the connection is down, `pull` returns `Unavailable` at once, and a `pull`
//! already waiting returns it when the connection drops or a fetch fails.
//!
//! # Dead letters
//!
//! A message delivered `max_deliver` times without an ack stays in the work-queue
//! stream, and JetStream publishes a max-deliveries advisory, which the advisories
//! stream keeps. [`SliceQueue::dead_letter`] reads the next advisory, loads the
//! message it names from the slices stream, deletes it there, acks the advisory and
//! returns it. An advisory whose message is already gone is acked and skipped.
//!
//! JetStream notices a message ran out of deliveries when it next looks for one to
//! deliver, that is while some worker is pulling; a deployment always has one.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_nats::jetstream::consumer::{self, AckPolicy, DeliverPolicy, PullConsumer};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::{Acker as JsAcker, PublishMessage};
use async_nats::jetstream::stream::{self, LastRawMessageErrorKind};
use async_nats::jetstream::{AckKind, Message};
use async_trait::async_trait;
use futures_util::StreamExt;
use serde::Deserialize;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::{debug, error, warn};
use trawl_core::model::Pool;
use trawl_core::ports::{Acker, DeadLetter, Delivery, PortError, SliceMessage, SliceQueue};

use super::{DEAD_LETTERS, Link, Names, Nats, NatsConfig, NatsEvents, unavailable};

/// Fetched messages that may wait in the channel; also the largest pull request.
const BUFFER: usize = 64;
/// Publishes `publish_many` has in flight before it awaits their acknowledgements.
const PUBLISH_WINDOW: usize = 256;
/// How long one pull request waits at the server for messages.
const PULL_EXPIRES: Duration = Duration::from_secs(5);
/// How long the dead-letter reader's pull request waits at the server.
const DEAD_LETTER_EXPIRES: Duration = Duration::from_secs(10);
/// Pause after a failed fetch, doubling up to the maximum.
const RETRY_MIN: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// The JetStream [`SliceQueue`]. Cloning is cheap and shares the connection and
/// the fetcher, which stops when the last clone is dropped.
#[derive(Clone)]
pub struct NatsQueue {
    inner: Arc<Inner>,
}

struct Inner {
    nats: Nats,
    pool: Pool,
    /// Whether the server keeps the isolated pool apart (2.10 or later); if not,
    /// browse slices are refused.
    pools: bool,
    slices: stream::Stream,
    /// This queue's pool's consumer.
    workers: PullConsumer,
    dead_letters: PullConsumer,
    /// The consumer's ack deadline of each delivery (see `NatsConfig::deadlines`).
    deadlines: Arc<[Duration]>,
    pulling: Arc<Pulling>,
    /// Stops the fetcher when the queue is dropped.
    _stop: DropGuard,
}

impl fmt::Debug for NatsQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsQueue")
            .field("stream", &self.inner.slices.cached_info().config.name)
            .field("consumer", &Names::consumer(self.inner.pool))
            .finish_non_exhaustive()
    }
}

/// What a pool's consumer and the slices stream hold right now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueStats {
    /// Messages not yet delivered.
    pub num_pending: u64,
    /// Messages delivered and not yet acked, naked or termed.
    pub num_ack_pending: u64,
    /// Messages delivered more than once (and not yet settled).
    pub num_redelivered: u64,
    /// Pull requests waiting at the server.
    pub num_waiting: u64,
    /// Deliveries so far (the consumer's sequence).
    pub delivered: u64,
    /// Messages in the slices stream, of both pools, dead letters not yet read
    /// included.
    pub stream_messages: u64,
}

impl NatsQueue {
    /// The standard pool's queue: `connect_pool(config, Pool::Standard)`.
    pub async fn connect(config: NatsConfig) -> Result<NatsQueue, PortError> {
        NatsQueue::connect_pool(config, Pool::Standard).await
    }

    /// Connects, creates or updates the streams and both pools' consumers, and
    /// starts the fetcher of `pool`'s queue (see [`Nats::queue_for`]).
    pub async fn connect_pool(config: NatsConfig, pool: Pool) -> Result<NatsQueue, PortError> {
        Nats::connect(config).await?.queue_for(pool).await
    }

    /// The pool whose slices this queue's `pull` returns.
    pub fn pool(&self) -> Pool {
        self.inner.pool
    }

    /// The events port on this queue's connection.
    pub fn events(&self) -> NatsEvents {
        self.inner.nats.events()
    }

    /// The connection this queue uses.
    pub fn nats(&self) -> &Nats {
        &self.inner.nats
    }

    pub(super) async fn open(nats: Nats, pool: Pool) -> Result<NatsQueue, PortError> {
        let link = nats.link().clone();
        let config = Arc::clone(&link.config);
        let names = Arc::clone(&link.names);
        let slices = get_stream(&link, &names.slices_stream()).await?;
        let advisories = get_stream(&link, &names.advisories_stream()).await?;

        let deadlines: Arc<[Duration]> = config.deadlines().into();
        // The standard consumer first: one from before the pools has no filter and
        // would overlap the isolated one, which the work queue refuses.
        let standard = ensure_workers(&slices, &config, &names, &deadlines, Pool::Standard).await?;
        let pools = matches!(standard, Filtered::Yes(_));
        // Whichever pool opens first, both consumers exist from then on.
        let isolated = if pools {
            let isolated = ensure_workers(&slices, &config, &names, &deadlines, Pool::Isolated);
            Some(isolated.await?.consumer())
        } else {
            warn!(
                consumer = Names::consumer(Pool::Standard),
                "nats-server ignored the consumer's filter subjects: it is older than 2.10, \
                 so there is no isolated pool and browse slices are refused"
            );
            None
        };
        let workers = match pool {
            Pool::Standard => standard.consumer(),
            Pool::Isolated => isolated.ok_or_else(no_isolated_pool)?,
        };
        let dead_letters = advisories
            .create_consumer(consumer::pull::Config {
                durable_name: Some(DEAD_LETTERS.to_owned()),
                description: Some("trawl dead-letter reader".to_owned()),
                deliver_policy: DeliverPolicy::All,
                ack_policy: AckPolicy::Explicit,
                ack_wait: Duration::from_secs(30),
                ..Default::default()
            })
            .await
            .map_err(|e| unavailable(&format!("consumer {DEAD_LETTERS}"), e))?;

        let (tx, rx) = mpsc::channel(BUFFER);
        let pulling = Arc::new(Pulling {
            waiting: AtomicUsize::new(0),
            requested: AtomicUsize::new(0),
            demand: Notify::new(),
            failures: Notify::new(),
            last_failure: Mutex::new(String::new()),
            rx: tokio::sync::Mutex::new(rx),
        });
        let stop = CancellationToken::new();
        let fetcher = Fetcher {
            consumer: workers.clone(),
            link,
            pulling: Arc::clone(&pulling),
            tx,
            stop: stop.clone(),
        };
        tokio::spawn(fetcher.run());

        Ok(NatsQueue {
            inner: Arc::new(Inner {
                nats,
                pool,
                pools,
                slices,
                workers,
                dead_letters,
                deadlines,
                pulling,
                _stop: stop.drop_guard(),
            }),
        })
    }

    /// Counts of this queue's pool's consumer (`workers` or `workers-isolated`) and
    /// of the slices stream, for metrics and tests.
    pub async fn stats(&self) -> Result<QueueStats, PortError> {
        self.link().check_up()?;
        let info = self
            .inner
            .workers
            .get_info()
            .await
            .map_err(|e| unavailable("consumer info", e))?;
        let stream = self
            .inner
            .slices
            .get_info()
            .await
            .map_err(|e| unavailable("stream info", e))?;
        Ok(QueueStats {
            num_pending: info.num_pending,
            num_ack_pending: info.num_ack_pending as u64,
            num_redelivered: info.num_redelivered as u64,
            num_waiting: info.num_waiting as u64,
            delivered: info.delivered.consumer_sequence,
            stream_messages: stream.state.messages,
        })
    }

    fn link(&self) -> &Link {
        self.inner.nats.link()
    }

    fn max_deliver(&self) -> u32 {
        self.link().config.max_deliver
    }

    /// `Unavailable` for a slice of the isolated pool on a server that cannot keep
    /// it from the standard workers.
    fn check_pool(&self, msg: &SliceMessage) -> Result<(), PortError> {
        if msg.slice.kind.pool() == Pool::Isolated && !self.inner.pools {
            Err(no_isolated_pool())
        } else {
            Ok(())
        }
    }

    /// A fetched message as a delivery, or `None` if it is not one to hand out.
    async fn delivery(&self, fetched: Fetched) -> Option<Delivery> {
        let Fetched { message, at } = fetched;
        let (seq, delivered) = match message.info() {
            Ok(info) => (
                info.stream_sequence,
                u32::try_from(info.delivered).unwrap_or(u32::MAX),
            ),
            Err(e) => {
                warn!(subject = %message.subject, error = %e, "message without JetStream metadata; dropped");
                return None;
            }
        };
        if at.elapsed() > deadline(&self.inner.deadlines, delivered) / 2 {
            // Its ack timer has mostly run out: JetStream will deliver it again.
            debug!(
                seq,
                delivered, "fetched message waited too long; left to redelivery"
            );
            return None;
        }
        let decoded = trawl_proto::decode_slice(&message.payload);
        let traceparent = message
            .headers
            .as_ref()
            .and_then(|h| h.get(TRACEPARENT))
            .map(|v| v.as_str().to_owned());
        let (message, acker) = message.split();
        match decoded {
            Ok(slice) => Some(Delivery {
                message: slice,
                delivery: delivered,
                max_deliver: self.max_deliver(),
                traceparent,
                acker: Box::new(NatsAcker {
                    acker,
                    link: self.link().clone(),
                    seq,
                    delivery: delivered,
                    deadlines: Arc::clone(&self.inner.deadlines),
                }),
            }),
            Err(e) => {
                // Never deliverable: terminate it rather than let it use up its
                // deliveries; the log says what it was.
                error!(subject = %message.subject, seq, error = %e, "undecodable slice message; terminated");
                if let Err(e) = acker.double_ack_with(AckKind::Term).await {
                    warn!(seq, error = %e, "could not terminate an undecodable slice message");
                }
                None
            }
        }
    }

    /// Reads the slice an advisory names; `None` if there is nothing to return.
    async fn dead_letter_of(&self, advisory: Message) -> Result<Option<DeadLetter>, PortError> {
        #[derive(Deserialize)]
        struct MaxDeliveries {
            stream_seq: u64,
            deliveries: u64,
        }
        let parsed: MaxDeliveries = match serde_json::from_slice(&advisory.payload) {
            Ok(p) => p,
            Err(e) => {
                warn!(error = %e, "unreadable max-deliveries advisory; terminated");
                settle_quietly(&advisory, AckKind::Term).await;
                return Ok(None);
            }
        };
        let seq = parsed.stream_seq;
        let stored = match self.inner.slices.get_raw_message(seq).await {
            Ok(m) => Some(m),
            Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => None,
            Err(e) => {
                settle_quietly(&advisory, AckKind::Nak(None)).await;
                return Err(unavailable("get dead letter", e));
            }
        };
        let Some(stored) = stored else {
            debug!(seq, "dead letter already gone");
            settle_quietly(&advisory, AckKind::Ack).await;
            return Ok(None);
        };
        let decoded = trawl_proto::decode_slice(&stored.payload);
        if let Err(e) = self.inner.slices.delete_message(seq).await {
            use async_nats::jetstream::stream::DeleteMessageErrorKind;
            if matches!(e.kind(), DeleteMessageErrorKind::JetStream(_)) {
                // Deleted by another reader of the same advisory in the meantime.
                debug!(seq, error = %e, "dead letter already deleted");
            } else {
                settle_quietly(&advisory, AckKind::Nak(None)).await;
                return Err(unavailable("delete dead letter", e));
            }
        }
        // The message is gone from the stream: acking is best effort, since a
        // redelivered advisory finds nothing and is skipped.
        settle_quietly(&advisory, AckKind::Ack).await;
        match decoded {
            Ok(message) => Ok(Some(DeadLetter {
                message,
                deliveries: u32::try_from(parsed.deliveries).unwrap_or(u32::MAX),
            })),
            Err(e) => {
                error!(seq, error = %e, "undecodable dead letter; deleted");
                Ok(None)
            }
        }
    }
}

/// The header carrying the publishing span's W3C trace context.
const TRACEPARENT: &str = trawl_telemetry::propagation::TRACEPARENT;

/// `publish` with the current span's `traceparent` header, when it has one.
fn traced(publish: PublishMessage) -> PublishMessage {
    match trawl_telemetry::propagation::current_traceparent() {
        Some(tp) => publish.header(TRACEPARENT, tp.as_str()),
        None => publish,
    }
}

#[async_trait]
impl SliceQueue for NatsQueue {
    /// Publishes with `Nats-Msg-Id` = [`SliceMessage::msg_id`] and waits for the
    /// stream's ack; a duplicate within the duplicate window is acked and ignored.
    ///
    /// `Unavailable` for a browse slice on a server before 2.10 (see the [parent
    /// module](super#pools)).
    async fn publish(&self, msg: &SliceMessage) -> Result<(), PortError> {
        self.check_pool(msg)?;
        let link = self.link();
        link.check_up()?;
        let subject = link.names.slice_subject(&msg.slice.kind);
        let id = msg.msg_id();
        let publish = traced(
            PublishMessage::build()
                .payload(trawl_proto::encode_slice(msg).into())
                .message_id(&id),
        );
        let ack = link
            .js
            .send_publish(subject, publish)
            .await
            .map_err(|e| unavailable("publish", e))?
            .await
            .map_err(|e| match e.kind() {
                PublishErrorKind::StreamNotFound => {
                    unavailable("publish", "the slices stream is missing")
                }
                _ => unavailable("publish ack", e),
            })?;
        if ack.duplicate {
            debug!(msg_id = %id, "duplicate message id; ignored");
        }
        Ok(())
    }

    /// Sends every message before awaiting any acknowledgement, at most
    /// 256 (`PUBLISH_WINDOW`) unacknowledged at a time.
    async fn publish_many(&self, msgs: &[SliceMessage]) -> Result<(), PortError> {
        // All or none refused, before anything is sent.
        msgs.iter().try_for_each(|m| self.check_pool(m))?;
        let link = self.link();
        link.check_up()?;
        let traceparent = trawl_telemetry::propagation::current_traceparent();
        for chunk in msgs.chunks(PUBLISH_WINDOW) {
            let mut acks = Vec::with_capacity(chunk.len());
            for msg in chunk {
                let mut publish = PublishMessage::build()
                    .payload(trawl_proto::encode_slice(msg).into())
                    .message_id(msg.msg_id());
                if let Some(tp) = &traceparent {
                    publish = publish.header(TRACEPARENT, tp.as_str());
                }
                let ack = link
                    .js
                    .send_publish(link.names.slice_subject(&msg.slice.kind), publish)
                    .await
                    .map_err(|e| unavailable("publish", e))?;
                acks.push(ack);
            }
            for ack in acks {
                ack.await.map_err(|e| match e.kind() {
                    PublishErrorKind::StreamNotFound => {
                        unavailable("publish", "the slices stream is missing")
                    }
                    _ => unavailable("publish ack", e),
                })?;
            }
        }
        Ok(())
    }

    async fn pull(&self) -> Result<Delivery, PortError> {
        let pulling = &self.inner.pulling;
        let link = self.link();
        let _waiting = pulling.enter();
        loop {
            let failed = pulling.failures.notified();
            link.check_up()?;
            let fetched = tokio::select! {
                biased;
                fetched = async { pulling.rx.lock().await.recv().await } => fetched,
                () = failed => return Err(pulling.failure()),
                () = link.lost() => return Err(PortError::Unavailable("NATS connection lost".into())),
            };
            // The fetcher may be waiting for room or for a new count of callers.
            pulling.demand.notify_one();
            let Some(fetched) = fetched else {
                return Err(PortError::Unavailable("the queue is shut down".into()));
            };
            if let Some(delivery) = self.delivery(fetched).await {
                return Ok(delivery);
            }
        }
    }

    /// The next dead letter of either pool, whichever pool this queue is of.
    ///
    /// Cancel-safe in effect: an advisory fetched for a caller that gave up is not
    /// acked, so JetStream delivers it again after 30 s.
    async fn dead_letter(&self) -> Result<DeadLetter, PortError> {
        let link = self.link();
        loop {
            link.check_up()?;
            let mut batch = self
                .inner
                .dead_letters
                .batch()
                .max_messages(1)
                .expires(DEAD_LETTER_EXPIRES)
                .messages()
                .await
                .map_err(|e| unavailable("fetch advisory", e))?;
            let next = tokio::select! {
                next = batch.next() => next,
                () = link.lost() => return Err(PortError::Unavailable("NATS connection lost".into())),
            };
            match next {
                None => continue,
                Some(Err(e)) => return Err(unavailable("fetch advisory", e)),
                Some(Ok(advisory)) => {
                    if let Some(dead) = self.dead_letter_of(advisory).await? {
                        return Ok(dead);
                    }
                }
            }
        }
    }

    /// This queue's pool's consumer's `num_pending + num_ack_pending`: slices the
    /// pool has yet to finish.
    async fn lag(&self) -> Result<u64, PortError> {
        let stats = self.stats().await?;
        Ok(stats.num_pending + stats.num_ack_pending)
    }

    /// A round trip to the server within the request timeout.
    /// A flush of the connection; when that fails, once more after the client
    /// has had a moment to reconnect (it tries at least every half second):
    /// after a server restart the first flush may meet the old, dead
    /// connection while the server answers. Within 2 s in all, a probe's time.
    async fn ping(&self) -> Result<(), PortError> {
        const FLUSH: Duration = Duration::from_millis(500);
        const RECONNECT: Duration = Duration::from_millis(750);
        let link = self.link();
        let flush = || async {
            link.check_up()?;
            match tokio::time::timeout(FLUSH.min(link.config.request_timeout), link.client.flush())
                .await
            {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(unavailable("ping", e)),
                Err(_) => Err(unavailable("ping", "timed out")),
            }
        };
        if flush().await.is_ok() {
            return Ok(());
        }
        let _ = tokio::time::timeout(RECONNECT, link.restored()).await;
        flush().await
    }
}

/// What creating a pool's consumer gave.
enum Filtered {
    /// The consumer, filtered as asked.
    Yes(PullConsumer),
    /// The consumer, without the filter: the server ignores `filter_subjects`.
    Ignored(PullConsumer),
}

impl Filtered {
    fn consumer(self) -> PullConsumer {
        match self {
            Filtered::Yes(c) | Filtered::Ignored(c) => c,
        }
    }
}

/// The error of an isolated pool asked of a server that cannot keep it apart.
fn no_isolated_pool() -> PortError {
    PortError::Unavailable(
        "the isolated worker pool needs nats-server 2.10 or later (consumers with \
         several filter subjects)"
            .into(),
    )
}

/// A consumer's filter subjects, sorted, whichever field holds them.
fn filters(config: &consumer::Config) -> Vec<String> {
    let mut subjects = config.filter_subjects.clone();
    if !config.filter_subject.is_empty() {
        subjects.push(config.filter_subject.clone());
    }
    subjects.sort();
    subjects
}

/// Creates `pool`'s consumer, or updates it to this configuration (its filter
/// included), and checks the filter the server reports.
async fn ensure_workers(
    slices: &stream::Stream,
    config: &NatsConfig,
    names: &Names,
    deadlines: &[Duration],
    pool: Pool,
) -> Result<Filtered, PortError> {
    let name = Names::consumer(pool);
    let mut wanted = names.pool_subjects(pool);
    let (filter_subject, filter_subjects) = match wanted.as_slice() {
        [one] => (one.clone(), Vec::new()),
        _ => (String::new(), wanted.clone()),
    };
    let description = match pool {
        Pool::Standard => "trawl workers",
        Pool::Isolated => "trawl workers of the isolated pool (browser sessions)",
    };
    let consumer = slices
        .create_consumer(consumer::pull::Config {
            durable_name: Some(name.to_owned()),
            description: Some(description.to_owned()),
            deliver_policy: DeliverPolicy::All,
            ack_policy: AckPolicy::Explicit,
            ack_wait: config.ack_wait,
            max_deliver: i64::from(config.max_deliver),
            // JetStream takes the first entry as the ack wait when a list is set.
            backoff: if config.backoff.is_empty() {
                Vec::new()
            } else {
                deadlines.to_vec()
            },
            filter_subject,
            filter_subjects,
            ..Default::default()
        })
        .await
        .map_err(|e| unavailable(&format!("consumer {name}"), e))?;
    let got = filters(&consumer.cached_info().config);
    wanted.sort();
    if got == wanted {
        Ok(Filtered::Yes(consumer))
    } else if got.is_empty() && pool == Pool::Standard {
        // Several filter subjects, and an older server leaves them all out.
        Ok(Filtered::Ignored(consumer))
    } else {
        Err(PortError::Unavailable(format!(
            "NATS consumer {name}: filtered by {got:?} instead of {wanted:?}"
        )))
    }
}

async fn get_stream(link: &Link, name: &str) -> Result<stream::Stream, PortError> {
    link.js
        .get_stream(name)
        .await
        .map_err(|e| unavailable(&format!("stream {name}"), e))
}

/// Acks, naks or terms a message, logging a failure instead of returning it.
async fn settle_quietly(message: &Message, kind: AckKind) {
    if let Err(e) = message.double_ack_with(kind).await {
        warn!(subject = %message.subject, ?kind, error = %e, "could not settle a message");
    }
}

/// The ack deadline JetStream gives delivery `n` (1-based).
fn deadline(deadlines: &[Duration], delivery: u32) -> Duration {
    let i = (delivery.max(1) as usize - 1).min(deadlines.len().saturating_sub(1));
    deadlines.get(i).copied().unwrap_or(Duration::ZERO)
}

/// The nak that redelivers delivery `n` after `delay`.
///
/// With a backoff list, JetStream redelivers a nak with delay `d` of delivery `n`
/// after `d + deadline(n) - deadline(1)`, not after `d`. This takes the difference
/// off, so the redelivery comes after `delay`, or as soon as JetStream allows when
/// the difference is larger.
fn nak_kind(deadlines: &[Duration], delivery: u32, delay: Duration) -> AckKind {
    if delay.is_zero() {
        return AckKind::Nak(None);
    }
    let first = deadline(deadlines, 1);
    let this = deadline(deadlines, delivery);
    let sent = if this >= first {
        delay.saturating_sub(this - first)
    } else {
        delay + (first - this)
    };
    // A zero delay in a nak means "use the consumer's schedule"; ask for the least.
    AckKind::Nak(Some(sent.max(Duration::from_millis(1))))
}

/// Settles one delivery. A nak, term or progress waits for the server's
/// confirmation; an ack does not (see [`Acker::ack`] below).
struct NatsAcker {
    acker: JsAcker,
    link: Link,
    seq: u64,
    delivery: u32,
    deadlines: Arc<[Duration]>,
}

impl NatsAcker {
    async fn settle(&self, kind: AckKind) -> Result<(), PortError> {
        self.link.check_up()?;
        self.acker
            .double_ack_with(kind)
            .await
            .map_err(|e| unavailable(&format!("{kind:?} of message {}", self.seq), e))
    }
}

#[async_trait]
impl Acker for NatsAcker {
    /// Sent without waiting for the server's confirmation. A confirmed ack
    /// subscribes to an inbox, publishes and unsubscribes: three protocol
    /// messages and a round trip per slice, about a third of NATS's CPU in the
    /// deployed benchmark and 9 % of its throughput (docs/benchmarks.md). An ack
    /// follows the outcome written in the store, so one that is lost (the
    /// connection broke before it left) costs a redelivery after the ack wait,
    /// whose outcome writes nothing: no item is lost or stored twice.
    async fn ack(&self) -> Result<(), PortError> {
        self.link.check_up()?;
        self.acker
            .ack_with(AckKind::Ack)
            .await
            .map_err(|e| unavailable(&format!("Ack of message {}", self.seq), e))
    }

    async fn nak(&self, delay: Duration) -> Result<(), PortError> {
        self.settle(nak_kind(&self.deadlines, self.delivery, delay))
            .await
    }

    async fn in_progress(&self) -> Result<(), PortError> {
        self.settle(AckKind::Progress).await
    }

    async fn term(&self) -> Result<(), PortError> {
        self.settle(AckKind::Term).await
    }
}

/// A message from the fetcher, and when it arrived.
struct Fetched {
    message: Message,
    at: Instant,
}

/// What `pull` callers and the fetcher share.
struct Pulling {
    /// `pull` calls under way.
    waiting: AtomicUsize,
    /// Messages asked of the server by pull requests under way, not yet arrived.
    requested: AtomicUsize,
    /// Woken when callers arrive or take a message.
    demand: Notify,
    /// Woken (all waiters) when a fetch fails.
    failures: Notify,
    last_failure: Mutex<String>,
    rx: tokio::sync::Mutex<mpsc::Receiver<Fetched>>,
}

impl Pulling {
    fn enter(&self) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        self.demand.notify_one();
        Waiting(self)
    }

    fn fail(&self, why: String) {
        *self
            .last_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = why;
        self.failures.notify_waiters();
    }

    fn failure(&self) -> PortError {
        let why = self
            .last_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        PortError::Unavailable(why)
    }

    /// How many messages to ask for: callers waiting, less messages already
    /// fetched, within the room left in the channel. Waits until that is not zero.
    async fn unmet_demand(&self, tx: &mpsc::Sender<Fetched>) -> usize {
        loop {
            let notified = self.demand.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let requested = self.requested.load(Ordering::SeqCst);
            let room = tx.capacity().saturating_sub(requested);
            let buffered = tx.max_capacity() - tx.capacity();
            let waiting = self.waiting.load(Ordering::SeqCst);
            let want = waiting.saturating_sub(buffered + requested).min(room);
            if want > 0 {
                return want;
            }
            notified.await;
        }
    }
}

/// One `pull` call under way; counted while it lives.
struct Waiting<'a>(&'a Pulling);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The background task that fetches what the `pull` callers ask for.
///
/// Pull requests are pipelined: a new one goes out as soon as callers wait for
/// more than is buffered or already asked for, without waiting for the earlier
/// ones to complete, so a round trip to the server is not paid per message. The
/// sum of buffered and asked-for messages never exceeds the callers waiting, so
/// messages do not sit prefetched burning their ack wait.
struct Fetcher {
    consumer: PullConsumer,
    link: Link,
    pulling: Arc<Pulling>,
    tx: mpsc::Sender<Fetched>,
    stop: CancellationToken,
}

enum FetchEnd {
    Stopped,
    Failed(String),
}

impl Fetcher {
    async fn run(self) {
        let mut pause = RETRY_MIN;
        let mut fetches = tokio::task::JoinSet::new();
        loop {
            let want = tokio::select! {
                () = self.stop.cancelled() => break,
                Some(ended) = fetches.join_next(), if !fetches.is_empty() => {
                    match ended {
                        Ok(Ok(())) => pause = RETRY_MIN,
                        Ok(Err(FetchEnd::Stopped)) => break,
                        Ok(Err(FetchEnd::Failed(why))) => {
                            warn!(error = %why, "fetching slices failed");
                            self.pulling.fail(format!("NATS fetch: {why}"));
                            tokio::select! {
                                () = self.stop.cancelled() => break,
                                () = tokio::time::sleep(pause) => {}
                            }
                            pause = (pause * 2).min(RETRY_MAX);
                        }
                        Err(e) => error!(error = %e, "a fetch task ended abnormally"),
                    }
                    continue;
                }
                want = self.pulling.unmet_demand(&self.tx) => want,
            };
            if let Err(e) = self.link.check_up() {
                self.pulling.fail(e.to_string());
                tokio::select! {
                    () = self.stop.cancelled() => break,
                    () = self.link.restored() => continue,
                }
            }
            self.pulling.requested.fetch_add(want, Ordering::SeqCst);
            let fetch = Fetch {
                consumer: self.consumer.clone(),
                link: self.link.clone(),
                pulling: Arc::clone(&self.pulling),
                tx: self.tx.clone(),
                stop: self.stop.clone(),
            };
            fetches.spawn(fetch.run(want));
        }
        fetches.shutdown().await;
    }
}

/// One pull request, forwarding its messages as they arrive.
struct Fetch {
    consumer: PullConsumer,
    link: Link,
    pulling: Arc<Pulling>,
    tx: mpsc::Sender<Fetched>,
    stop: CancellationToken,
}

impl Fetch {
    /// Asks for `want` messages. The channel has room for all of them: room is
    /// counted for every message asked for before it is asked.
    async fn run(self, want: usize) -> Result<(), FetchEnd> {
        let mut left = want;
        let result = self.forward(&mut left, want).await;
        // What did not come is no longer asked for; maybe ask again.
        self.pulling.requested.fetch_sub(left, Ordering::SeqCst);
        self.pulling.demand.notify_one();
        result
    }

    async fn forward(&self, left: &mut usize, want: usize) -> Result<(), FetchEnd> {
        let mut batch = self
            .consumer
            .batch()
            .max_messages(want)
            .expires(PULL_EXPIRES)
            .messages()
            .await
            .map_err(|e| FetchEnd::Failed(e.to_string()))?;
        loop {
            tokio::select! {
                () = self.stop.cancelled() => return Err(FetchEnd::Stopped),
                () = self.link.lost() => return Err(FetchEnd::Failed("connection lost".into())),
                next = batch.next() => match next {
                    None => return Ok(()),
                    Some(Ok(message)) => {
                        let fetched = Fetched { message, at: Instant::now() };
                        if self.tx.send(fetched).await.is_err() {
                            return Err(FetchEnd::Stopped);
                        }
                        *left = left.saturating_sub(1);
                        self.pulling.requested.fetch_sub(1, Ordering::SeqCst);
                    }
                    Some(Err(e)) => return Err(FetchEnd::Failed(e.to_string())),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn deadlines_repeat_the_last_entry() {
        let d = [S(30), S(35), S(60)];
        assert_eq!(deadline(&d, 1), S(30));
        assert_eq!(deadline(&d, 3), S(60));
        assert_eq!(deadline(&d, 9), S(60));
        assert_eq!(deadline(&[S(30)], 4), S(30));
    }

    fn delay_of(kind: AckKind) -> Option<Duration> {
        match kind {
            AckKind::Nak(d) => d,
            other => panic!("not a nak: {other:?}"),
        }
    }

    #[test]
    fn naks_take_off_what_the_backoff_adds() {
        let d = [S(35), S(60), S(150)];
        // First delivery: nothing is added.
        assert_eq!(delay_of(nak_kind(&d, 1, S(10))), Some(S(10)));
        // Third: JetStream adds 150 - 35 s, so asking for 200 s sends 85 s.
        assert_eq!(delay_of(nak_kind(&d, 3, S(200))), Some(S(85)));
        // Less than what is added: the least delay JetStream allows.
        assert_eq!(
            delay_of(nak_kind(&d, 2, S(5))),
            Some(Duration::from_millis(1))
        );
        // Zero is a plain nak, redelivered at once.
        assert_eq!(delay_of(nak_kind(&d, 2, Duration::ZERO)), None);
        // Without a backoff list nothing changes.
        assert_eq!(delay_of(nak_kind(&[S(30)], 4, S(7))), Some(S(7)));
    }
}
