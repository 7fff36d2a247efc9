//! The adapters of the slice queue and of job events: embedded (in-process) and
//! distributed (NATS JetStream).
//!
//! The single-binary deployment runs the scheduler and the workers in one process,
//! so its queue lives in memory. The embedded queue's semantics follow a NATS
//! JetStream work-queue stream with a durable pull consumer, so that roles written
//! against [`trawl_core::ports::SliceQueue`] behave the same with either adapter:
//!
//! - publishing de-duplicates by [`SliceMessage::msg_id`](trawl_core::ports::SliceMessage::msg_id)
//!   for the life of the queue;
//! - a delivery must be acked, naked, termed or kept alive with `in_progress`
//!   within `ack_wait`, otherwise it is delivered again;
//! - after `max_deliver` deliveries the message becomes a dead letter;
//! - acks for a delivery that has since expired are ignored.
//!
//! # Layout
//!
//! - [`queue`]: [`EmbeddedQueue`], its [`QueueConfig`], and the acker handed out
//!   with each delivery. All state sits behind one `std` mutex that is never held
//!   across an `.await`; waiting is done with `tokio::sync::Notify` and timers, and
//!   expired deliveries are processed lazily by whoever looks at the queue next
//!   (a puller, a dead-letter reader, an acker or a metrics call), so the queue
//!   needs no background task.
//! - [`pooled`]: [`PooledQueue`], an [`EmbeddedQueue`] per worker pool, and its
//!   [`PoolView`]s, so that one process can run a standard and an isolated worker:
//!   slices go to the queue of their kind's pool, and each view pulls from its own.
//! - [`events`]: [`InProcessEvents`], which forwards every [`Event`](trawl_core::ports::Event) into
//!   an unbounded channel read by the scheduler.
//! - [`nats`]: the distributed adapters, [`NatsQueue`] and [`NatsEvents`] on one
//!   [`Nats`] connection, configured by [`NatsConfig`]; payloads are the protobuf
//!   messages of `trawl-proto`. A [`NatsQueue`] belongs to one worker pool
//!   ([`Nats::queue_for`]). The module doc lists subjects, streams and consumers.

pub mod events;
pub mod nats;
pub mod pooled;
pub mod queue;

pub use events::InProcessEvents;
pub use nats::{InvalidConfig, Nats, NatsConfig, NatsEvents, NatsQueue, QueueStats};
pub use pooled::{PoolView, PooledQueue};
pub use queue::{EmbeddedQueue, QueueConfig};
