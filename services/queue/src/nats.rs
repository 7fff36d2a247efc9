//! The distributed adapters: the slice queue and job events on NATS JetStream.
//!
//! One connection ([`Nats`]) serves both ports: [`NatsQueue`] implements
//! [`SliceQueue`](trawl_core::ports::SliceQueue) and [`NatsEvents`] implements
//! [`Events`](trawl_core::ports::Events). Payloads are the protobuf messages of
//! `trawl-proto`; nothing else is ever published.
//!
//! # Names
//!
//! With `prefix` = `trawl` (the default; `PREFIX` is its upper case):
//!
//! | stream | retention | subjects |
//! |---|---|---|
//! | `TRAWL_SLICES` | work queue, file | `trawl.slices.search`, `.page`, `.research`, `.agent`, `.report`, `.browse` (one per slice kind) |
//! | `TRAWL_EVENTS` | limits, file, 24 h | `trawl.jobs.created`, `trawl.jobs.cancelled`, `trawl.slices.finished`, `trawl.approvals.decided` |
//! | `TRAWL_ADVISORIES` | limits, file, 7 days | `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.TRAWL_SLICES.workers`, `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.TRAWL_SLICES.workers-isolated` |
//!
//! Durable pull consumers:
//!
//! | consumer | stream | filter | read by |
//! |---|---|---|---|
//! | `workers` | slices | every slice subject but `trawl.slices.browse` | the standard pool's workers |
//! | `workers-isolated` | slices | `trawl.slices.browse` | the isolated pool's workers |
//! | `dead_letters` | advisories | none | [`SliceQueue::dead_letter`](trawl_core::ports::SliceQueue::dead_letter), either pool |
//! | `scheduler` | events | none | the scheduler (created by [`NatsEvents::subscribe`]) |
//!
//! Slice kinds are listed one by one so that `trawl.slices.finished`, an event,
//! never lands in the work queue. Tests give each run its own prefix, so runs never
//! see each other's streams.
//!
//! # Pools
//!
//! A slice's subject says which pool takes it ([`SliceKind::pool`]): browser
//! sessions go to the isolated pool, everything else to the standard one. A work
//! queue stream wants its consumers' filters disjoint, so each pool has its own
//! consumer, and a browse slice published while only standard workers run waits
//! in the stream for an isolated worker. Opening a queue of either pool
//! ([`Nats::queue_for`]) creates or updates both consumers: `workers` first, since a
//! deployment from before the pools has it without a filter, which would overlap.
//!
//! More than one filter subject on a consumer needs nats-server 2.10 or later; an
//! older server ignores them. On such a server `workers` stays without a filter
//! (as it was before the pools), an isolated queue cannot be opened, and
//! publishing a browse slice fails with `Unavailable`: no standard worker may
//! receive one.
//!
//! # Failure
//!
//! async-nats reconnects by itself, forever. While the connection is down every
//! call returns [`PortError::Unavailable`] at once (and a call already waiting returns
//! it as soon as the connection drops); every request to the server has a timeout
//! ([`NatsConfig::request_timeout`]). Streams use file storage, so messages survive a
//! server restart.
//!
//! # Layout
//!
//! - this file: [`NatsConfig`], [`Nats`] (the connection and the streams), and the
//!   connection-state helpers the two ports share.
//! - [`queue`]: [`NatsQueue`], its demand-driven fetcher, the acker, dead letters.
//! - [`events`]: [`NatsEvents`] and its subscription.

pub mod events;
pub mod queue;

use std::fmt::{self, Display};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use async_nats::{ConnectOptions, connection::State};
use tokio::sync::watch;
use tracing::{debug, info, warn};
use trawl_core::model::{Pool, SliceKind};
use trawl_core::ports::{Event, PortError};

pub use events::NatsEvents;
pub use queue::{NatsQueue, QueueStats};

/// Where the NATS server is and how the queue behaves.
///
/// Built with [`NatsConfig::new`] (or `default()`) and the `with_*` methods; checked
/// by [`NatsConfig::validate`], which [`Nats::connect`] calls too.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NatsConfig {
    /// `nats://host:port`; credentials, if any, in the URL.
    pub url: String,
    /// Prefix of every subject (`<prefix>.slices.search`) and, upper-cased, of every
    /// stream (`<PREFIX>_SLICES`). Lower-case ASCII letters, digits, `_` and `-`.
    pub prefix: String,
    /// How long a worker has to ack, nak, term or report progress on a delivery.
    pub ack_wait: Duration,
    /// Deliveries of a slice before it becomes a dead letter. At least 1.
    pub max_deliver: u32,
    /// Extra wait before a redelivery that follows an ack timeout: after delivery
    /// `n` times out, the slice comes back `ack_wait + backoff[n - 1]` after that
    /// delivery (the last entry repeating). Empty: `ack_wait` every time.
    ///
    /// JetStream has no pause between an ack timeout and the redelivery: it grants
    /// delivery `n` an ack deadline of `ack_wait + backoff[n - 1]` instead. A late
    /// ack within that grace therefore still counts. Shorter than `max_deliver`, as
    /// JetStream requires. A nak keeps the delay it asks for: JetStream would add the
    /// same extra to it, and the acker takes that off again.
    pub backoff: Vec<Duration>,
    /// Publishing a slice id again within this window is a no-op.
    pub duplicate_window: Duration,
    /// How long the events stream keeps events.
    pub events_max_age: Duration,
    /// Timeout of every request to the server (publish acks, stream and consumer
    /// calls, acks), and of connecting.
    pub request_timeout: Duration,
}

impl Default for NatsConfig {
    /// A local server, prefix `trawl`, 30 s to ack, 5 deliveries with redeliveries
    /// after timeouts delayed by 5 s, 30 s, 2 min, then 5 min; a 10 min duplicate
    /// window; events kept 24 h; 5 s request timeout.
    fn default() -> Self {
        NatsConfig {
            url: "nats://127.0.0.1:4222".to_owned(),
            prefix: "trawl".to_owned(),
            ack_wait: Duration::from_secs(30),
            max_deliver: 5,
            backoff: vec![
                Duration::from_secs(5),
                Duration::from_secs(30),
                Duration::from_secs(120),
                Duration::from_secs(300),
            ],
            duplicate_window: Duration::from_secs(600),
            events_max_age: Duration::from_secs(24 * 3600),
            request_timeout: Duration::from_secs(5),
        }
    }
}

impl NatsConfig {
    /// The defaults, with the server at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        NatsConfig::default().with_url(url)
    }

    pub fn with_url(mut self, url: impl Into<String>) -> Self {
        self.url = url.into();
        self
    }

    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    pub fn with_ack_wait(mut self, ack_wait: Duration) -> Self {
        self.ack_wait = ack_wait;
        self
    }

    pub fn with_max_deliver(mut self, max_deliver: u32) -> Self {
        self.max_deliver = max_deliver;
        self
    }

    pub fn with_backoff(mut self, backoff: impl Into<Vec<Duration>>) -> Self {
        self.backoff = backoff.into();
        self
    }

    pub fn with_duplicate_window(mut self, window: Duration) -> Self {
        self.duplicate_window = window;
        self
    }

    pub fn with_events_max_age(mut self, max_age: Duration) -> Self {
        self.events_max_age = max_age;
        self
    }

    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Checks what JetStream would refuse, or what would make no sense, up front.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        let bad = |field, rule: String| Err(InvalidConfig { field, rule });
        let p = &self.prefix;
        let prefix_ok = !p.is_empty()
            && p.len() <= 32
            && p.bytes()
                .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'));
        if !prefix_ok {
            return bad(
                "prefix",
                format!(
                    "\"{p}\" ({} characters) must be 1 to 32 lower-case ASCII letters, digits, _ or -",
                    p.chars().count()
                ),
            );
        }
        if self.ack_wait < Duration::from_millis(1) {
            return bad("ack_wait", "must be at least 1 ms".into());
        }
        if self.max_deliver == 0 {
            return bad("max_deliver", "must be at least 1".into());
        }
        if self.backoff.len() >= self.max_deliver as usize {
            return bad(
                "max_deliver",
                format!(
                    "({}) must be greater than the number of backoff entries ({})",
                    self.max_deliver,
                    self.backoff.len()
                ),
            );
        }
        if self.duplicate_window.is_zero() {
            return bad("duplicate_window", "must not be zero".into());
        }
        if self.events_max_age < Duration::from_secs(1) {
            return bad("events_max_age", "must be at least 1 s".into());
        }
        if self.request_timeout.is_zero() {
            return bad("request_timeout", "must not be zero".into());
        }
        Ok(())
    }

    /// The ack deadline of each delivery as JetStream sees it: the consumer's
    /// `backoff` list, or `[ack_wait]` without one.
    fn deadlines(&self) -> Vec<Duration> {
        if self.backoff.is_empty() {
            vec![self.ack_wait]
        } else {
            self.backoff.iter().map(|b| self.ack_wait + *b).collect()
        }
    }
}

/// A [`NatsConfig`] JetStream would refuse: the field of [`NatsConfig`] and the
/// rule its value broke.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid NATS configuration: {field} {rule}")]
pub struct InvalidConfig {
    pub field: &'static str,
    pub rule: String,
}

/// Stream, consumer and subject names under one prefix.
#[derive(Clone, Debug)]
pub(crate) struct Names {
    prefix: String,
    upper: String,
}

/// Every slice kind's subject token and the pool that takes it. Adding a `SliceKind`
/// variant fails to compile in [`Names::kind_index`] until it is listed here too.
const SLICE_KINDS: [(&str, Pool); 6] = [
    ("search", Pool::Standard),
    ("page", Pool::Standard),
    ("research", Pool::Standard),
    ("agent", Pool::Standard),
    ("report", Pool::Standard),
    ("browse", Pool::Isolated),
];

/// The durable consumer the standard pool's workers pull from.
pub(crate) const WORKERS: &str = "workers";
/// The durable consumer the isolated pool's workers pull from.
pub(crate) const WORKERS_ISOLATED: &str = "workers-isolated";
/// The durable consumer that reads max-deliveries advisories.
pub(crate) const DEAD_LETTERS: &str = "dead_letters";
/// The durable consumer the scheduler reads events from.
pub(crate) const SCHEDULER: &str = "scheduler";

impl Names {
    fn new(prefix: &str) -> Names {
        Names {
            prefix: prefix.to_owned(),
            upper: prefix.to_ascii_uppercase(),
        }
    }

    pub(crate) fn slices_stream(&self) -> String {
        format!("{}_SLICES", self.upper)
    }

    pub(crate) fn events_stream(&self) -> String {
        format!("{}_EVENTS", self.upper)
    }

    pub(crate) fn advisories_stream(&self) -> String {
        format!("{}_ADVISORIES", self.upper)
    }

    fn kind_index(kind: &SliceKind) -> usize {
        match kind {
            SliceKind::Search { .. } => 0,
            SliceKind::Page { .. } => 1,
            SliceKind::Research { .. } => 2,
            SliceKind::Agent { .. } => 3,
            SliceKind::Report { .. } => 4,
            SliceKind::Browse { .. } => 5,
        }
    }

    pub(crate) fn slice_subject(&self, kind: &SliceKind) -> String {
        let (token, pool) = SLICE_KINDS[Names::kind_index(kind)];
        debug_assert_eq!(token, kind.name());
        debug_assert_eq!(pool, kind.pool());
        format!("{}.slices.{token}", self.prefix)
    }

    fn slice_subjects(&self) -> Vec<String> {
        SLICE_KINDS
            .iter()
            .map(|(k, _)| format!("{}.slices.{k}", self.prefix))
            .collect()
    }

    /// The subjects of the slices `pool` takes: its consumer's filter.
    pub(crate) fn pool_subjects(&self, pool: Pool) -> Vec<String> {
        SLICE_KINDS
            .iter()
            .filter(|(_, p)| *p == pool)
            .map(|(k, _)| format!("{}.slices.{k}", self.prefix))
            .collect()
    }

    /// The durable consumer `pool`'s workers pull from.
    pub(crate) fn consumer(pool: Pool) -> &'static str {
        match pool {
            Pool::Standard => WORKERS,
            Pool::Isolated => WORKERS_ISOLATED,
        }
    }

    pub(crate) fn event_subject(&self, ev: &Event) -> String {
        let tail = match ev {
            Event::JobCreated { .. } => "jobs.created",
            Event::JobCancelled { .. } => "jobs.cancelled",
            Event::SliceFinished(_) => "slices.finished",
            Event::ApprovalDecided { .. } => "approvals.decided",
        };
        format!("{}.{tail}", self.prefix)
    }

    fn event_subjects(&self) -> Vec<String> {
        [
            "jobs.created",
            "jobs.cancelled",
            "slices.finished",
            "approvals.decided",
        ]
        .iter()
        .map(|t| format!("{}.{t}", self.prefix))
        .collect()
    }

    /// The subject of the advisory JetStream publishes when a slice runs out of
    /// deliveries on `pool`'s consumer.
    fn max_deliveries_advisory(&self, pool: Pool) -> String {
        format!(
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{}.{}",
            self.slices_stream(),
            Names::consumer(pool)
        )
    }
}

/// The connection, its JetStream context and whether it is up; shared by both ports.
#[derive(Clone)]
pub(crate) struct Link {
    pub(crate) client: async_nats::Client,
    pub(crate) js: jetstream::Context,
    up: watch::Receiver<bool>,
    pub(crate) config: Arc<NatsConfig>,
    pub(crate) names: Arc<Names>,
}

/// The wait before reconnect attempt `attempts`: none for the first, then
/// doubling from 50 ms up to [`RECONNECT_MAX`].
fn reconnect_delay(attempts: usize) -> Duration {
    if attempts <= 1 {
        return Duration::ZERO;
    }
    let doubled = 50u64 << attempts.min(8);
    Duration::from_millis(doubled).min(RECONNECT_MAX)
}

/// The longest wait between reconnect attempts.
const RECONNECT_MAX: Duration = Duration::from_millis(500);

impl Link {
    /// `Unavailable` at once while the connection is down, instead of buffering
    /// a request that can only time out.
    pub(crate) fn check_up(&self) -> Result<(), PortError> {
        if self.client.connection_state() == State::Connected {
            Ok(())
        } else {
            Err(PortError::Unavailable(
                "NATS connection is down; reconnecting".into(),
            ))
        }
    }

    /// Resolves once the connection is lost (at once if it is down now).
    pub(crate) async fn lost(&self) {
        let mut up = self.up.clone();
        // An error means the client is gone, which is lost as well.
        let _ = up.wait_for(|up| !*up).await;
    }

    /// Resolves once the connection is up again.
    pub(crate) async fn restored(&self) {
        let mut up = self.up.clone();
        if up.wait_for(|up| *up).await.is_err() {
            // The client is gone for good: never restored.
            std::future::pending::<()>().await;
        }
    }
}

/// `Unavailable`, saying what failed.
pub(crate) fn unavailable(what: &str, err: impl Display) -> PortError {
    PortError::Unavailable(format!("NATS {what}: {err}"))
}

/// A connection to NATS with the three streams in place; builds both ports.
/// Cloning is cheap and shares the connection.
#[derive(Clone)]
pub struct Nats {
    link: Link,
}

impl fmt::Debug for Nats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nats")
            .field("url", &self.link.config.url)
            .field("prefix", &self.link.config.prefix)
            .finish_non_exhaustive()
    }
}

impl Nats {
    /// Connects and creates or updates the slices, events and advisories streams.
    ///
    /// `Unavailable` if the server cannot be reached or refuses a stream; `Corrupt`
    /// if the configuration is invalid (see [`NatsConfig::validate`]).
    pub async fn connect(config: NatsConfig) -> Result<Nats, PortError> {
        config
            .validate()
            .map_err(|e| PortError::Corrupt(e.to_string()))?;
        let (up_tx, up_rx) = watch::channel(false);
        let up_tx = Arc::new(up_tx);
        let events_up = Arc::clone(&up_tx);
        let client = ConnectOptions::new()
            .name("trawl")
            .connection_timeout(config.request_timeout)
            .request_timeout(Some(config.request_timeout))
            // At most half a second between attempts (the client's default
            // grows to 4 s): a server back from an outage is in use again,
            // and the roles ready, within a probe's time.
            .reconnect_delay_callback(reconnect_delay)
            .event_callback(move |event| {
                let up = Arc::clone(&events_up);
                async move {
                    match event {
                        async_nats::Event::Connected => {
                            info!("NATS connected");
                            up.send_replace(true);
                        }
                        async_nats::Event::Disconnected | async_nats::Event::Closed => {
                            warn!(%event, "NATS connection lost");
                            up.send_replace(false);
                        }
                        other => debug!(event = %other, "NATS event"),
                    }
                }
            })
            .connect(config.url.as_str())
            .await
            .map_err(|e| unavailable("connect", e))?;
        up_tx.send_replace(client.connection_state() == State::Connected);

        let mut js = jetstream::new(client.clone());
        js.set_timeout(config.request_timeout);
        let names = Names::new(&config.prefix);
        let link = Link {
            client,
            js,
            up: up_rx,
            config: Arc::new(config),
            names: Arc::new(names),
        };
        let nats = Nats { link };
        nats.ensure_streams().await?;
        Ok(nats)
    }

    async fn ensure_streams(&self) -> Result<(), PortError> {
        let names = &self.link.names;
        let config = &self.link.config;
        let slices = stream::Config {
            name: names.slices_stream(),
            description: Some("trawl slices: a work queue for the workers".into()),
            subjects: names.slice_subjects(),
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            discard: stream::DiscardPolicy::Old,
            duplicate_window: config.duplicate_window,
            ..Default::default()
        };
        let events = stream::Config {
            name: names.events_stream(),
            description: Some("trawl job events, for the scheduler".into()),
            subjects: names.event_subjects(),
            retention: stream::RetentionPolicy::Limits,
            storage: stream::StorageType::File,
            discard: stream::DiscardPolicy::Old,
            max_age: config.events_max_age,
            // JetStream wants the window no longer than the max age.
            duplicate_window: config.events_max_age.min(Duration::from_secs(120)),
            ..Default::default()
        };
        let advisories = stream::Config {
            name: names.advisories_stream(),
            description: Some("trawl slices that ran out of deliveries".into()),
            subjects: vec![
                names.max_deliveries_advisory(Pool::Standard),
                names.max_deliveries_advisory(Pool::Isolated),
            ],
            retention: stream::RetentionPolicy::Limits,
            storage: stream::StorageType::File,
            discard: stream::DiscardPolicy::Old,
            max_age: Duration::from_secs(7 * 24 * 3600),
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        };
        for stream in [slices, events, advisories] {
            let name = stream.name.clone();
            // Roles starting together race to create a stream: the losers are
            // told its name or subjects are taken, and by then it exists, so
            // updating it succeeds. A stream of another name that really holds
            // these subjects still fails after the last try.
            let mut tries = 1;
            loop {
                match self.link.js.create_or_update_stream(stream.clone()).await {
                    Ok(_) => break,
                    Err(e) if tries < CREATE_TRIES && lost_create_race(&e) => tries += 1,
                    Err(e) => return Err(unavailable(&format!("stream {name}"), e)),
                }
            }
        }
        Ok(())
    }

    /// The standard pool's slice queue on this connection: `queue_for(Pool::Standard)`.
    pub async fn queue(&self) -> Result<NatsQueue, PortError> {
        self.queue_for(Pool::Standard).await
    }

    /// The slice queue `pool`'s workers pull from, on this connection; creates or
    /// updates the consumers of both pools (see [Pools](self#pools)).
    ///
    /// `Unavailable` if the server refuses a consumer, or for [`Pool::Isolated`] on
    /// a server before 2.10.
    pub async fn queue_for(&self, pool: Pool) -> Result<NatsQueue, PortError> {
        NatsQueue::open(self.clone(), pool).await
    }

    /// The events port on this connection.
    pub fn events(&self) -> NatsEvents {
        NatsEvents::new(self.link.clone())
    }

    pub fn config(&self) -> &NatsConfig {
        &self.link.config
    }

    /// Deletes this prefix's streams, with every message and consumer in them:
    /// for tests and for tearing a deployment down, never for normal operation.
    pub async fn delete_streams(&self) -> Result<(), PortError> {
        let names = &self.link.names;
        for name in [
            names.slices_stream(),
            names.events_stream(),
            names.advisories_stream(),
        ] {
            match self.link.js.delete_stream(&name).await {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        jetstream::context::DeleteStreamErrorKind::JetStream(ref js)
                            if js.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
                    ) => {}
                Err(e) => return Err(unavailable(&format!("delete stream {name}"), e)),
            }
        }
        Ok(())
    }

    pub(crate) fn link(&self) -> &Link {
        &self.link
    }
}

/// How often a stream is asked for when another process creates it at once.
const CREATE_TRIES: u32 = 3;

/// Whether creating a stream failed because another process created it first.
fn lost_create_race(e: &jetstream::context::CreateStreamError) -> bool {
    matches!(
        e.kind(),
        jetstream::context::CreateStreamErrorKind::JetStream(ref js)
            if js.error_code() == jetstream::ErrorCode::STREAM_NAME_EXIST
                || js.error_code() == jetstream::ErrorCode::STREAM_SUBJECT_OVERLAP
    )
}

#[cfg(test)]
mod tests {
    use trawl_core::geo::Geo;
    use trawl_core::model::{Engine, JobId};

    use super::*;

    #[test]
    fn the_defaults_are_valid() {
        assert_eq!(NatsConfig::default().validate(), Ok(()));
    }

    #[test]
    fn max_deliver_must_exceed_the_backoff_length() {
        let c = NatsConfig::default()
            .with_max_deliver(2)
            .with_backoff([Duration::from_secs(1), Duration::from_secs(2)]);
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("max_deliver (2)")
        );
        assert!(c.with_max_deliver(3).validate().is_ok());
    }

    #[test]
    fn prefixes_are_subject_and_stream_safe() {
        for bad in ["", "a.b", "A", "x*", "a>b", "with space", &"x".repeat(33)] {
            let c = NatsConfig::default().with_prefix(bad);
            assert!(c.validate().is_err(), "{bad:?} accepted");
        }
        for good in ["trawl", "t_0123abcd", "dev-1"] {
            assert!(NatsConfig::default().with_prefix(good).validate().is_ok());
        }
    }

    #[test]
    fn deadlines_add_the_backoff_to_the_ack_wait() {
        let c = NatsConfig::default()
            .with_ack_wait(Duration::from_secs(30))
            .with_backoff([Duration::from_secs(5), Duration::from_secs(60)]);
        assert_eq!(
            c.deadlines(),
            [Duration::from_secs(35), Duration::from_secs(90)]
        );
        let c = c.with_backoff(Vec::new());
        assert_eq!(c.deadlines(), [Duration::from_secs(30)]);
    }

    #[test]
    fn every_slice_kind_has_its_own_subject_and_none_is_an_event_subject() {
        let n = Names::new("trawl");
        let geo = Geo::parse("us").unwrap();
        let kinds = [
            SliceKind::Search {
                query: "q".into(),
                geo,
                engine: Engine::Google,
                follow_top: 1,
            },
            SliceKind::Page {
                url: "https://x.example/".into(),
                geo,
            },
            SliceKind::Research {
                question: "q".into(),
                geo,
            },
            SliceKind::Agent {
                question: "q".into(),
                index: 0,
                geo,
            },
            SliceKind::Report {
                question: "q".into(),
                geo,
            },
            SliceKind::Browse {
                url: "https://x.example/".into(),
                geo,
            },
        ];
        let subjects: Vec<String> = kinds.iter().map(|k| n.slice_subject(k)).collect();
        assert_eq!(
            subjects,
            [
                "trawl.slices.search",
                "trawl.slices.page",
                "trawl.slices.research",
                "trawl.slices.agent",
                "trawl.slices.report",
                "trawl.slices.browse"
            ]
        );
        assert_eq!(n.slice_subjects(), subjects);
        // Each pool's filter holds exactly the subjects of its kinds, so the two
        // consumers never overlap and together cover the stream.
        for pool in [Pool::Standard, Pool::Isolated] {
            let expected: Vec<&String> = kinds
                .iter()
                .zip(&subjects)
                .filter(|(k, _)| k.pool() == pool)
                .map(|(_, s)| s)
                .collect();
            assert_eq!(n.pool_subjects(pool).iter().collect::<Vec<_>>(), expected);
        }
        assert_eq!(n.pool_subjects(Pool::Isolated), ["trawl.slices.browse"]);
        assert_eq!(n.slices_stream(), "TRAWL_SLICES");
        let job = JobId::generate(1, 2);
        assert_eq!(
            n.event_subject(&Event::JobCreated { job_id: job }),
            "trawl.jobs.created"
        );
        for s in n.event_subjects() {
            assert!(
                !subjects.contains(&s),
                "{s} is both a slice and an event subject"
            );
        }
        assert_eq!(
            n.max_deliveries_advisory(Pool::Standard),
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.TRAWL_SLICES.workers"
        );
        assert_eq!(
            n.max_deliveries_advisory(Pool::Isolated),
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.TRAWL_SLICES.workers-isolated"
        );
    }
}
