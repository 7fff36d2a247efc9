//! The embedded, in-process adapters of the slice queue and of job events.
//!
//! The single-binary deployment runs the scheduler and the workers in one process,
//! so the queue lives in memory. Its semantics follow a NATS JetStream work-queue
//! stream with a durable pull consumer, so that roles written against
//! [`trawl_core::ports::SliceQueue`] behave the same once the distributed adapter
//! replaces this one:
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
//! - [`events`]: [`InProcessEvents`], which forwards `SliceFinished` events into
//!   an unbounded channel read by the scheduler.

pub mod events;
pub mod queue;

pub use events::InProcessEvents;
pub use queue::{EmbeddedQueue, QueueConfig};
