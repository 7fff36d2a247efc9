//! Job events delivered over an in-process channel.

use async_trait::async_trait;
use tokio::sync::mpsc;
use tracing::debug;
use trawl_core::ports::{Event, Events, PortError};

/// Sends every [`Event`] into an unbounded channel.
///
/// Unbounded is safe here: each event answers one delivered slice, so the number
/// in the channel is bounded by the slices in flight, not by an outside caller.
#[derive(Clone, Debug)]
pub struct InProcessEvents {
    tx: mpsc::UnboundedSender<Event>,
}

impl InProcessEvents {
    /// The events port and the receiving end the scheduler reads.
    pub fn channel() -> (InProcessEvents, mpsc::UnboundedReceiver<Event>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (InProcessEvents { tx }, rx)
    }
}

#[async_trait]
impl Events for InProcessEvents {
    async fn emit(&self, ev: Event) -> Result<(), PortError> {
        if let Err(mpsc::error::SendError(ev)) = self.tx.send(ev) {
            // The receiver is gone only while the process shuts down; the store
            // already holds what the event tells, so it is not needed.
            debug!(job_id = %ev.job_id(), "no event receiver; event dropped");
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use trawl_core::cost::Micros;
    use trawl_core::model::{JobId, SliceId};
    use trawl_core::ports::SliceFinished;

    use super::*;

    fn event(n: u64) -> SliceFinished {
        SliceFinished {
            job_id: JobId::generate(1_700_000_000_000, 7),
            slice_id: SliceId::from_stored(format!("s_{n}")),
            succeeded: n & 1 == 0,
            children: n,
            items_valid: 1,
            items_rejected: 0,
            upstream_calls: 2,
            cache_hits: 0,
            cost: Micros(1_500),
        }
    }

    #[tokio::test]
    async fn events_arrive_in_order_on_the_receiver() {
        let (events, mut rx) = InProcessEvents::channel();
        events.slice_finished(event(1)).await.unwrap();
        events.slice_finished(event(2)).await.unwrap();
        assert_eq!(rx.recv().await, Some(Event::SliceFinished(event(1))));
        assert_eq!(rx.recv().await, Some(Event::SliceFinished(event(2))));
        assert!(rx.try_recv().is_err());
    }

    #[tokio::test]
    async fn sending_without_a_receiver_is_ok() {
        let (events, rx) = InProcessEvents::channel();
        drop(rx);
        assert!(events.slice_finished(event(1)).await.is_ok());
    }
}
