//! [`NatsEvents`]: job events on the events stream, read by the scheduler through
//! the durable consumer `scheduler`.
//!
//! Events are hints (the store is the source of truth), so the subscription is
//! simple: fetch a batch, forward each event into the channel, ack it. An event the
//! scheduler never saw (its process died between forwarding and handling) costs one
//! reconcile period, nothing more. With several schedulers, each event goes to one.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_nats::jetstream::consumer::{self, AckPolicy, DeliverPolicy, PullConsumer};
use async_trait::async_trait;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, error, warn};
use trawl_core::model::JobId;
use trawl_core::ports::{Event, Events, PortError};

use super::{Link, SCHEDULER, unavailable};

/// Events fetched per pull request.
const BATCH: usize = 64;
/// How long one pull request waits at the server.
const PULL_EXPIRES: Duration = Duration::from_secs(5);
/// Pause after a failed fetch, doubling up to the maximum.
const RETRY_MIN: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// How often, at most, `slice.finished` of one job is published.
const FINISHED_EVERY: Duration = Duration::from_millis(20);

/// The JetStream [`Events`] port. Cloning is cheap and shares the connection.
///
/// `slice.finished` events are hints that a job may be over, so one job's are
/// coalesced: the first is published at once and opens a window of
/// [`FINISHED_EVERY`]; the last that arrives within the window is published when it
/// closes (and opens the next one), the others are dropped. A job whose slices end
/// 2,000 times a second costs the stream 50 events a second, not 2,000, and the
/// scheduler still hears of the job's last slice within one window. An event lost
/// to a process exiting mid-window costs one reconciliation period, as any lost
/// event does.
#[derive(Clone)]
pub struct NatsEvents {
    link: Link,
    windows: Arc<Mutex<HashMap<JobId, Option<Event>>>>,
}

impl fmt::Debug for NatsEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsEvents")
            .field("stream", &self.link.names.events_stream())
            .finish_non_exhaustive()
    }
}

impl NatsEvents {
    pub(super) fn new(link: Link) -> NatsEvents {
        NatsEvents {
            link,
            windows: Arc::default(),
        }
    }

    async fn publish(&self, ev: &Event) -> Result<(), PortError> {
        self.link.check_up()?;
        let subject = self.link.names.event_subject(ev);
        let payload = trawl_proto::encode_event(ev);
        self.link
            .js
            .publish(subject, payload.into())
            .await
            .map_err(|e| unavailable("publish event", e))?
            .await
            .map_err(|e| unavailable("publish event ack", e))?;
        Ok(())
    }

    /// Publishes the last event held for `job` each [`FINISHED_EVERY`], until a
    /// window passes with none.
    async fn close_windows(self, job: JobId) {
        loop {
            tokio::time::sleep(FINISHED_EVERY).await;
            let held = {
                let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
                match windows.get_mut(&job).and_then(Option::take) {
                    Some(ev) => ev,
                    None => {
                        windows.remove(&job);
                        return;
                    }
                }
            };
            if let Err(e) = self.publish(&held).await {
                debug!(job_id = %job, error = %e, "coalesced slice.finished not published; reconciliation will see the job");
            }
        }
    }

    /// Events from now on (for a consumer created by this call; a consumer that
    /// already exists resumes where it stopped), in an unbounded channel.
    ///
    /// Creates or updates the durable consumer `scheduler`, then spawns a task that
    /// fetches events, forwards each into the channel and acks it. Undecodable events
    /// are terminated and logged. The task outlives outages (it waits for the
    /// connection to come back) and ends when the receiver is dropped.
    ///
    /// Unbounded is safe here: the task acks as it forwards, and the scheduler
    /// handles events faster than workers can finish slices.
    pub async fn subscribe(&self) -> Result<mpsc::UnboundedReceiver<Event>, PortError> {
        let (rx, _task) = self.subscribe_task().await?;
        Ok(rx)
    }

    /// [`NatsEvents::subscribe`], and the task it spawned.
    async fn subscribe_task(
        &self,
    ) -> Result<(mpsc::UnboundedReceiver<Event>, JoinHandle<()>), PortError> {
        self.link.check_up()?;
        let stream_name = self.link.names.events_stream();
        let stream = self
            .link
            .js
            .get_stream(&stream_name)
            .await
            .map_err(|e| unavailable(&format!("stream {stream_name}"), e))?;
        let consumer = stream
            .create_consumer(consumer::pull::Config {
                durable_name: Some(SCHEDULER.to_owned()),
                description: Some("trawl scheduler".to_owned()),
                deliver_policy: DeliverPolicy::New,
                ack_policy: AckPolicy::Explicit,
                ack_wait: Duration::from_secs(30),
                max_deliver: 5,
                ..Default::default()
            })
            .await
            .map_err(|e| unavailable(&format!("consumer {SCHEDULER}"), e))?;
        let (tx, rx) = mpsc::unbounded_channel();
        let forwarder = Forwarder {
            consumer,
            link: self.link.clone(),
            tx,
        };
        let task = tokio::spawn(forwarder.run());
        Ok((rx, task))
    }
}

#[async_trait]
impl Events for NatsEvents {
    /// Publishes the event on its subject and waits for the stream's ack.
    async fn emit(&self, ev: Event) -> Result<(), PortError> {
        if let Event::SliceFinished(f) = &ev {
            let job = f.job_id.clone();
            {
                let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(held) = windows.get_mut(&job) {
                    *held = Some(ev);
                    return Ok(());
                }
                windows.insert(job.clone(), None);
            }
            let sent = self.publish(&ev).await;
            tokio::spawn(self.clone().close_windows(job));
            return sent;
        }
        self.publish(&ev).await
    }
}

/// The task behind [`NatsEvents::subscribe`].
struct Forwarder {
    consumer: PullConsumer,
    link: Link,
    tx: mpsc::UnboundedSender<Event>,
}

impl Forwarder {
    async fn run(self) {
        let mut pause = RETRY_MIN;
        loop {
            if self.link.check_up().is_err() {
                tokio::select! {
                    () = self.tx.closed() => return,
                    () = self.link.restored() => continue,
                }
            }
            let result = tokio::select! {
                () = self.tx.closed() => return,
                result = self.forward_batch() => result,
            };
            match result {
                Ok(true) => pause = RETRY_MIN,
                Ok(false) => return,
                Err(why) => {
                    warn!(error = %why, "fetching events failed");
                    tokio::select! {
                        () = self.tx.closed() => return,
                        () = tokio::time::sleep(pause) => {}
                    }
                    pause = (pause * 2).min(RETRY_MAX);
                }
            }
        }
    }

    /// Forwards one batch; `Ok(false)` once the receiver is gone.
    async fn forward_batch(&self) -> Result<bool, String> {
        let mut batch = self
            .consumer
            .batch()
            .max_messages(BATCH)
            .expires(PULL_EXPIRES)
            .messages()
            .await
            .map_err(|e| e.to_string())?;
        loop {
            let next = tokio::select! {
                () = self.link.lost() => return Err("connection lost".into()),
                next = batch.next() => next,
            };
            let message = match next {
                None => return Ok(true),
                Some(Err(e)) => return Err(e.to_string()),
                Some(Ok(message)) => message,
            };
            match trawl_proto::decode_event(&message.payload) {
                Ok(ev) => {
                    if self.tx.send(ev).is_err() {
                        // Not acked: another scheduler gets it after the ack wait.
                        return Ok(false);
                    }
                    if let Err(e) = message.ack().await {
                        debug!(error = %e, "event ack failed; it may come again");
                    }
                }
                Err(e) => {
                    error!(subject = %message.subject, error = %e, "undecodable event; terminated");
                    if let Err(e) = message.ack_with(AckKind::Term).await {
                        debug!(error = %e, "could not terminate an undecodable event");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use trawl_core::model::JobId;

    use super::*;
    use crate::nats::{Nats, NatsConfig};

    /// Against the test nats-server (`TRAWL_TEST_NATS_URL`), like `tests/nats.rs`.
    #[tokio::test]
    async fn the_subscription_task_ends_when_its_receiver_is_dropped() {
        let url =
            std::env::var("TRAWL_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
        let prefix = format!("u{:016x}", fastrand::u64(..));
        let nats = Nats::connect(NatsConfig::new(url).with_prefix(prefix))
            .await
            .unwrap();
        let events = nats.events();
        let (mut rx, task) = events.subscribe_task().await.unwrap();
        let ev = Event::JobCreated {
            job_id: JobId::generate(1, 2),
        };
        events.emit(ev.clone()).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(15), rx.recv()).await;
        assert_eq!(got.unwrap(), Some(ev));
        assert!(!task.is_finished());

        drop(rx);
        let ended = tokio::time::timeout(Duration::from_secs(2), task).await;
        nats.delete_streams().await.unwrap();
        assert!(ended.is_ok(), "the task outlived its receiver");
    }
}
