//! The in-process queue of both worker pools: one [`EmbeddedQueue`] per [`Pool`].
//!
//! A process that runs a standard worker and an isolated worker gives each a
//! [`PoolView`] of one [`PooledQueue`]. Publishing through any view puts a slice in
//! the queue of its kind's pool ([`SliceKind::pool`](trawl_core::model::SliceKind::pool)),
//! and a view pulls only from its own pool's queue, as the two JetStream consumers
//! do: a browse slice waits until an isolated worker pulls, and a standard worker
//! never receives one.

use std::fmt;

use async_trait::async_trait;
use trawl_core::model::Pool;
use trawl_core::ports::{DeadLetter, Delivery, PortError, SliceMessage, SliceQueue};

use crate::queue::{EmbeddedQueue, QueueConfig};

/// Two embedded queues, one per pool, with the same configuration. Cloning is
/// cheap and shares both.
#[derive(Clone)]
pub struct PooledQueue {
    standard: EmbeddedQueue,
    isolated: EmbeddedQueue,
}

impl fmt::Debug for PooledQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledQueue")
            .field("config", &self.standard.config())
            .finish_non_exhaustive()
    }
}

impl PooledQueue {
    pub fn new(config: QueueConfig) -> PooledQueue {
        PooledQueue {
            standard: EmbeddedQueue::new(config),
            isolated: EmbeddedQueue::new(config),
        }
    }

    /// The [`SliceQueue`] of `pool`'s workers.
    pub fn view(&self, pool: Pool) -> PoolView {
        PoolView {
            queues: self.clone(),
            pool,
        }
    }

    /// `pool`'s own queue, for its counters (`pending`, `in_flight`, `dead_letters`).
    pub fn queue(&self, pool: Pool) -> &EmbeddedQueue {
        match pool {
            Pool::Standard => &self.standard,
            Pool::Isolated => &self.isolated,
        }
    }

    /// The queue that takes `msg`.
    fn route(&self, msg: &SliceMessage) -> &EmbeddedQueue {
        self.queue(msg.slice.kind.pool())
    }
}

/// One pool's side of a [`PooledQueue`]. Cloning is cheap and shares the queues.
#[derive(Clone, Debug)]
pub struct PoolView {
    queues: PooledQueue,
    pool: Pool,
}

impl PoolView {
    /// The pool this view pulls from.
    pub fn pool(&self) -> Pool {
        self.pool
    }
}

#[async_trait]
impl SliceQueue for PoolView {
    /// Into the queue of the slice's pool, whichever pool this view is of.
    async fn publish(&self, msg: &SliceMessage) -> Result<(), PortError> {
        self.queues.route(msg).publish(msg).await
    }

    /// From this view's pool only.
    async fn pull(&self) -> Result<Delivery, PortError> {
        self.queues.queue(self.pool).pull().await
    }

    /// The next dead letter of either pool, from whichever view. Cancel safe, as
    /// each queue's `dead_letter` is: the one that loses the race took nothing.
    async fn dead_letter(&self) -> Result<DeadLetter, PortError> {
        tokio::select! {
            dead = self.queues.standard.dead_letter() => dead,
            dead = self.queues.isolated.dead_letter() => dead,
        }
    }

    /// Slices waiting or in flight in both pools together, whichever view: the
    /// one process works off both.
    async fn lag(&self) -> Result<u64, PortError> {
        Ok(self.queues.standard.lag().await? + self.queues.isolated.lag().await?)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use tokio::time::timeout;
    use trawl_core::geo::Geo;
    use trawl_core::model::{JobId, SliceKind, SliceSpec};

    use super::*;

    fn job() -> JobId {
        JobId::generate(1_700_000_000_000, 7)
    }

    fn page(n: u32) -> SliceMessage {
        SliceMessage {
            job_id: job(),
            slice: SliceSpec::new(
                SliceKind::Page {
                    url: format!("https://shop.example/p/{n}"),
                    geo: Geo::parse("us").unwrap(),
                },
                None,
            ),
        }
    }

    fn browse(n: u32) -> SliceMessage {
        SliceMessage {
            job_id: job(),
            slice: SliceSpec::new(
                SliceKind::Browse {
                    url: format!("https://shop.example/b/{n}"),
                    geo: Geo::parse("de").unwrap(),
                },
                None,
            ),
        }
    }

    /// A delivery ready at this very instant (paused time does not move).
    async fn pull_now(q: &PoolView) -> Delivery {
        timeout(Duration::ZERO, q.pull())
            .await
            .expect("a message is ready now")
            .unwrap()
    }

    async fn nothing_ready(q: &PoolView) -> bool {
        timeout(Duration::ZERO, q.pull()).await.is_err()
    }

    #[tokio::test(start_paused = true)]
    async fn each_view_pulls_only_its_pools_slices() {
        let queues = PooledQueue::new(QueueConfig::default());
        let standard = queues.view(Pool::Standard);
        let isolated = queues.view(Pool::Isolated);
        assert_eq!(
            (standard.pool(), isolated.pool()),
            (Pool::Standard, Pool::Isolated)
        );

        // Published through either view, in this order: a standard worker that
        // could take browse slices would be handed the first one first.
        standard.publish(&browse(1)).await.unwrap();
        isolated.publish(&page(1)).await.unwrap();
        standard.publish(&page(2)).await.unwrap();
        assert_eq!(queues.queue(Pool::Standard).pending(), 2);
        assert_eq!(queues.queue(Pool::Isolated).pending(), 1);
        assert_eq!(standard.lag().await.unwrap(), 3);
        assert_eq!(isolated.lag().await.unwrap(), 3);

        for expected in [page(1), page(2)] {
            let d = pull_now(&standard).await;
            assert_eq!(d.message, expected);
            d.acker.ack().await.unwrap();
        }
        assert!(
            nothing_ready(&standard).await,
            "a browse slice reached the standard pool"
        );
        assert_eq!(queues.queue(Pool::Isolated).pending(), 1);

        let d = pull_now(&isolated).await;
        assert_eq!(d.message, browse(1));
        d.acker.ack().await.unwrap();
        assert!(nothing_ready(&isolated).await);
        assert_eq!(isolated.lag().await.unwrap(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_isolated_slice_out_of_deliveries_is_a_dead_letter_of_either_view() {
        let queues = PooledQueue::new(QueueConfig::default().with_max_deliver(2));
        let standard = queues.view(Pool::Standard);
        let isolated = queues.view(Pool::Isolated);
        for n in [1, 2] {
            isolated.publish(&browse(n)).await.unwrap();
            for delivery in 1..=2 {
                let d = pull_now(&isolated).await;
                assert_eq!((d.message.clone(), d.delivery), (browse(n), delivery));
                d.acker.nak(Duration::ZERO).await.unwrap();
            }
        }
        assert_eq!(queues.queue(Pool::Isolated).dead_letters(), 2);

        for (view, n) in [(&isolated, 1), (&standard, 2)] {
            let dead = timeout(Duration::ZERO, view.dead_letter())
                .await
                .expect("a dead letter now")
                .unwrap();
            assert_eq!((dead.message, dead.deliveries), (browse(n), 2));
        }
        assert!(
            timeout(Duration::from_secs(60), isolated.dead_letter())
                .await
                .is_err()
        );
        assert!(nothing_ready(&isolated).await);
        assert!(nothing_ready(&standard).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dead_letter_wakes_a_reader_waiting_on_both_pools() {
        let queues = PooledQueue::new(QueueConfig::default().with_max_deliver(1));
        let standard = queues.view(Pool::Standard);
        let reader = tokio::spawn({
            let view = standard.clone();
            async move { view.dead_letter().await }
        });
        tokio::task::yield_now().await;
        assert!(!reader.is_finished());

        let isolated = queues.view(Pool::Isolated);
        isolated.publish(&browse(1)).await.unwrap();
        pull_now(&isolated)
            .await
            .acker
            .nak(Duration::ZERO)
            .await
            .unwrap();
        let dead = timeout(Duration::from_secs(1), reader)
            .await
            .expect("the waiting reader woke")
            .unwrap()
            .unwrap();
        assert_eq!((dead.message, dead.deliveries), (browse(1), 1));
    }
}
