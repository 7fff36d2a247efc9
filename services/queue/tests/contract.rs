//! The slice queue's contract, one suite run against every adapter: the
//! embedded in-process queue (`trawl run`, `trawl dev`) and NATS JetStream (the
//! deployed shape). "Embedded behaves like deployed" is this file.
//!
//! NATS is at `TRAWL_TEST_NATS_URL` (default `nats://127.0.0.1:4222`, JetStream
//! on); each run uses streams of its own prefix and deletes them at the end.
//! Time is real for both adapters (JetStream's clock cannot be paused), so the
//! ack wait is short and every wait is bounded.

// A panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Cleanup;
use tokio::time::{Instant, timeout};
use trawl_core::geo::Geo;
use trawl_core::model::{Engine, JobId, SliceKind, SliceSpec, now_ms};
use trawl_core::ports::{Delivery, SliceMessage, SliceQueue};
use trawl_queue::{EmbeddedQueue, NatsConfig, NatsQueue, QueueConfig};

/// Long enough for anything that should happen; a failing test fails by then.
const PATIENCE: Duration = Duration::from_secs(15);
/// The ack wait of every queue here.
const ACK_WAIT: Duration = Duration::from_secs(2);
/// Deliveries before a dead letter.
const MAX_DELIVER: u32 = 2;

/// A queue under test, with what removes it.
struct Adapter {
    name: &'static str,
    queue: Arc<dyn SliceQueue>,
    _cleanup: Option<Cleanup>,
}

/// Every adapter, each on a fresh queue.
async fn adapters() -> Vec<Adapter> {
    let embedded = EmbeddedQueue::new(
        QueueConfig::default()
            .with_ack_wait(ACK_WAIT)
            .with_max_deliver(MAX_DELIVER),
    );
    let url =
        std::env::var("TRAWL_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let config = NatsConfig::new(url)
        .with_prefix(format!("c{:016x}", fastrand::u64(..)))
        .with_ack_wait(ACK_WAIT)
        .with_max_deliver(MAX_DELIVER)
        .with_backoff(Vec::new());
    let cleanup = Cleanup(config.clone());
    let nats = NatsQueue::connect(config)
        .await
        .expect("connect to the test nats-server (is it running with JetStream?)");
    vec![
        Adapter {
            name: "embedded",
            queue: Arc::new(embedded),
            _cleanup: None,
        },
        Adapter {
            name: "nats",
            queue: Arc::new(nats),
            _cleanup: Some(cleanup),
        },
    ]
}

fn message(job: &JobId, n: u32) -> SliceMessage {
    SliceMessage {
        job_id: job.clone(),
        slice: SliceSpec::new(
            SliceKind::Search {
                query: format!("query {n}"),
                geo: Geo::parse("de").unwrap(),
                engine: Engine::Google,
                follow_top: 0,
            },
            None,
        ),
    }
}

fn job() -> JobId {
    JobId::generate(now_ms(), fastrand::u64(..))
}

async fn pull(a: &Adapter) -> Delivery {
    timeout(PATIENCE, a.queue.pull())
        .await
        .unwrap_or_else(|_| panic!("{}: a delivery in time", a.name))
        .unwrap()
}

/// Nothing is delivered within `within`.
async fn nothing_within(a: &Adapter, within: Duration) -> bool {
    timeout(within, a.queue.pull()).await.is_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_slices_are_delivered_once_each_and_a_republish_is_ignored() {
    for a in adapters().await {
        let job = job();
        let msgs: Vec<_> = (0..3).map(|n| message(&job, n)).collect();
        a.queue.publish_many(&msgs).await.unwrap();
        a.queue.publish(&msgs[1]).await.unwrap();
        assert_eq!(a.queue.lag().await.unwrap(), 3, "{}", a.name);
        let mut got = Vec::new();
        for _ in 0..3 {
            let d = pull(&a).await;
            assert_eq!(d.delivery, 1, "{}", a.name);
            assert_eq!(d.max_deliver, MAX_DELIVER, "{}", a.name);
            d.acker.ack().await.unwrap();
            got.push(d.message);
        }
        got.sort_by(|x, y| x.slice.id.cmp(&y.slice.id));
        let mut want = msgs.clone();
        want.sort_by(|x, y| x.slice.id.cmp(&y.slice.id));
        assert_eq!(got, want, "{}", a.name);
        assert!(
            nothing_within(&a, ACK_WAIT * 2).await,
            "{}: acked is gone",
            a.name
        );
        // Published again after its ack: still the same message id, ignored.
        a.queue.publish(&msgs[0]).await.unwrap();
        assert!(
            nothing_within(&a, Duration::from_millis(500)).await,
            "{}",
            a.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nak_delivers_again_after_its_delay_as_the_next_delivery() {
    for a in adapters().await {
        let job = job();
        a.queue.publish(&message(&job, 0)).await.unwrap();
        let first = pull(&a).await;
        let naked = Instant::now();
        first.acker.nak(Duration::from_millis(700)).await.unwrap();
        let again = pull(&a).await;
        assert!(
            naked.elapsed() >= Duration::from_millis(600),
            "{}: {:?}",
            a.name,
            naked.elapsed()
        );
        assert_eq!(again.message, first.message, "{}", a.name);
        assert_eq!(again.delivery, 2, "{}", a.name);
        assert!(again.is_last(), "{}", a.name);
        again.acker.ack().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_progress_holds_off_redelivery_and_an_unacked_delivery_comes_back() {
    for a in adapters().await {
        let job = job();
        a.queue.publish(&message(&job, 0)).await.unwrap();
        let d = pull(&a).await;
        // Kept alive past two ack waits: not delivered meanwhile.
        for _ in 0..4 {
            assert!(nothing_within(&a, ACK_WAIT / 2).await, "{}", a.name);
            d.acker.in_progress().await.unwrap();
        }
        // Then left alone: delivered again after the ack wait.
        let again = pull(&a).await;
        assert_eq!(again.message, d.message, "{}", a.name);
        assert_eq!(again.delivery, 2, "{}", a.name);
        again.acker.ack().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_termed_slice_never_comes_back_and_is_no_dead_letter() {
    for a in adapters().await {
        let job = job();
        a.queue.publish(&message(&job, 0)).await.unwrap();
        pull(&a).await.acker.term().await.unwrap();
        assert!(nothing_within(&a, ACK_WAIT * 2).await, "{}", a.name);
        assert!(
            timeout(Duration::from_millis(500), a.queue.dead_letter())
                .await
                .is_err(),
            "{}",
            a.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_out_of_deliveries_is_a_dead_letter_once() {
    for a in adapters().await {
        let job = job();
        let msg = message(&job, 0);
        a.queue.publish(&msg).await.unwrap();
        for n in 1..=MAX_DELIVER {
            let d = pull(&a).await;
            assert_eq!(d.delivery, n, "{}", a.name);
            d.acker.nak(Duration::ZERO).await.unwrap();
        }
        // A worker waits for its next slice meanwhile, as workers always do
        // (JetStream notices an exhausted message when it looks for one to
        // deliver): it must not get the dead one.
        let worker = {
            let q = a.queue.clone();
            tokio::spawn(async move { q.pull().await.map(|d| d.message) })
        };
        let dead = timeout(PATIENCE, a.queue.dead_letter())
            .await
            .unwrap_or_else(|_| panic!("{}: a dead letter in time", a.name))
            .unwrap();
        assert_eq!(dead.message, msg, "{}", a.name);
        assert_eq!(dead.deliveries, MAX_DELIVER, "{}", a.name);
        assert!(nothing_within(&a, ACK_WAIT * 2).await, "{}", a.name);
        assert!(
            !worker.is_finished(),
            "{}: a dead letter was delivered again",
            a.name
        );
        worker.abort();
        assert!(
            timeout(Duration::from_millis(500), a.queue.dead_letter())
                .await
                .is_err(),
            "{}: one dead letter",
            a.name
        );
    }
}
