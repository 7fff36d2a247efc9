//! The scheduler role ([`Service`]) against the embedded adapters: a private
//! in-memory SQLite store and an in-process queue per test, so tests run in
//! parallel without seeing each other.
//!
//! Time: the SQLite store answers from a thread of its own, and a paused tokio
//! clock jumps to the next timer whenever every task waits on something outside
//! the runtime, so a reconcile tick an hour away would fire at once. These tests
//! run on the real clock instead: where only an event may explain a change,
//! `reconcile_every` is an hour (its first tick, at start, is accounted for), and
//! tests wait on observable state (store, queue, emitted events) with a deadline.
//! Where no loop is needed, a test calls [`Service::reconcile`] itself.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;
use trawl_core::cost::{Micros, PriceTable};
use trawl_core::model::{JobId, JobStatus, SliceError, SliceId, SliceOutcome, now_ms};
use trawl_core::plan::{follow_ups, plan};
use trawl_core::ports::{
    ApprovalRecord, ApprovalStore, DeadLetter, Delivery, Event, Events, JobRecord, JobStore,
    PortError, SliceFinished, SliceMessage, SliceQueue, SliceStore,
};
use trawl_core::spec::JobSpec;
use trawl_queue::{EmbeddedQueue, InProcessEvents, QueueConfig};
use trawl_scheduler::{ScheduleError, Service, ServiceConfig};
use trawl_store::testing::FaultyStore;

/// A reconcile period no test outlives: only its first tick, at start, runs.
const NEVER_AGAIN: Duration = Duration::from_secs(3600);
/// A reconcile period that makes reconciliation happen all the time.
const OFTEN: Duration = Duration::from_millis(20);
/// The longest a test waits for something that should happen at once.
const DEADLINE: Duration = Duration::from_secs(10);

const EXTRACT: &str = "extract: {fields: {t: {css: h1}}}\n";

fn spec(text: &str) -> JobSpec {
    JobSpec::parse(text).unwrap()
}

/// A job fetching `n` pages from the US.
fn pages(name: &str, n: usize, extra: &str) -> JobSpec {
    let urls: Vec<String> = (0..n)
        .map(|i| format!("\"https://shop.example/p/{name}-{i}\""))
        .collect();
    spec(&format!(
        "name: {name}\npages: {{urls: [{}], geos: [us]}}\n{EXTRACT}{extra}",
        urls.join(", ")
    ))
}

/// A job as the HTTP API stores it: `pending`, no slices.
fn pending_record(name: &str, document: Value, estimate: Micros) -> JobRecord {
    let created_ms = now_ms();
    JobRecord {
        id: JobId::generate(created_ms, fastrand::u64(..)),
        name: name.to_owned(),
        spec: document,
        status: JobStatus::Pending,
        reason: None,
        estimate,
        created_ms,
        idempotency: None,
        traceparent: None,
        owner: None,
        retention_ms: None,
        slices_max: 0,
        approve_above: None,
    }
}

/// The slice queue, with every publication counted (the queue itself drops
/// duplicates, so it cannot tell how often a slice was published).
struct Counting {
    inner: EmbeddedQueue,
    published: Mutex<Vec<SliceMessage>>,
    /// Reads of dead letters so far, and how many more are to fail (a queue
    /// that is away).
    dead_reads: AtomicU32,
    dead_fail: AtomicU32,
}

#[async_trait]
impl SliceQueue for Counting {
    async fn publish(&self, msg: &SliceMessage) -> Result<(), PortError> {
        self.published.lock().unwrap().push(msg.clone());
        self.inner.publish(msg).await
    }
    async fn pull(&self) -> Result<Delivery, PortError> {
        self.inner.pull().await
    }
    async fn dead_letter(&self) -> Result<DeadLetter, PortError> {
        self.dead_reads.fetch_add(1, Ordering::SeqCst);
        let failing = self
            .dead_fail
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Err(PortError::Unavailable(
                "NATS connection is down (test)".into(),
            ));
        }
        self.inner.dead_letter().await
    }
    async fn lag(&self) -> Result<u64, PortError> {
        self.inner.lag().await
    }
}

/// What a cancel over the API writes.
const API_CANCEL: &str = "cancelled over the API";

/// One scheduler with its own store, queue and event channels.
struct Sys {
    store: Arc<FaultyStore>,
    queue: Arc<Counting>,
    /// Where the test sends events, as the API and workers do.
    events: InProcessEvents,
    /// The other end of `events`, handed to the service when it starts.
    inbox: Option<UnboundedReceiver<Event>>,
    /// What the service itself emitted.
    emitted: UnboundedReceiver<Event>,
    service: Arc<Service>,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Sys {
    async fn new(reconcile_every: Duration, queue: QueueConfig) -> Sys {
        let store = Arc::new(FaultyStore::memory().await.unwrap());
        let queue = Arc::new(Counting {
            inner: EmbeddedQueue::new(queue),
            published: Mutex::new(Vec::new()),
            dead_reads: AtomicU32::new(0),
            dead_fail: AtomicU32::new(0),
        });
        let (events, inbox) = InProcessEvents::channel();
        let (outbox, emitted) = InProcessEvents::channel();
        let service = Arc::new(Service {
            store: store.clone(),
            queue: queue.clone(),
            events: Arc::new(outbox),
            prices: PriceTable::default(),
            config: ServiceConfig::default().with_reconcile_every(reconcile_every),
        });
        Sys {
            store,
            queue,
            events,
            inbox: Some(inbox),
            emitted,
            service,
            cancel: CancellationToken::new(),
            task: None,
        }
    }

    async fn with_reconcile_every(reconcile_every: Duration) -> Sys {
        Sys::new(reconcile_every, QueueConfig::default()).await
    }

    /// Starts `Service::run`; its first reconcile tick runs at once.
    fn start(&mut self) {
        let inbox = self.inbox.take().expect("started once");
        let run = self.service.clone().run(inbox, self.cancel.clone());
        self.task = Some(tokio::spawn(run));
    }

    /// Stops `Service::run` and waits for it to return.
    async fn stop(&mut self) {
        self.cancel.cancel();
        let task = self.task.take().expect("started");
        timeout(DEADLINE, task)
            .await
            .expect("the service stops when cancelled")
            .unwrap();
    }

    /// Stores a job `pending` with no slices, as the API does, and sends no event.
    async fn store_pending(&self, spec: &JobSpec) -> JobId {
        let estimate = plan(spec, &PriceTable::default()).estimate.cost;
        let job = pending_record(&spec.name, spec.document.clone(), estimate);
        self.store.create_job(&job, &[]).await.unwrap();
        job.id
    }

    async fn job(&self, id: &JobId) -> JobRecord {
        self.store.job(id).await.unwrap().expect("the job exists")
    }

    async fn wait_for_status(&self, id: &JobId, status: JobStatus) -> JobRecord {
        let until = Instant::now() + DEADLINE;
        loop {
            let job = self.job(id).await;
            if job.status == status {
                return job;
            }
            assert!(
                Instant::now() < until,
                "job {id} is still {:?} ({:?}), not {status:?}",
                job.status,
                job.reason
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// How often each slice of the job was published.
    fn publications(&self, id: &JobId) -> HashMap<SliceId, usize> {
        let mut n = HashMap::new();
        for m in self.queue.published.lock().unwrap().iter() {
            if &m.job_id == id {
                *n.entry(m.slice.id.clone()).or_default() += 1;
            }
        }
        n
    }

    /// Every slice of the job, as stored.
    async fn slice_ids(&self, id: &JobId) -> BTreeSet<SliceId> {
        self.store
            .open_slices(id)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect()
    }

    async fn record(&self, id: &JobId, slice: &SliceId, error: Option<&str>) {
        let outcome = SliceOutcome {
            error: error.map(|code| SliceError {
                code: code.to_owned(),
                message: format!("{code} on every attempt"),
            }),
            ..SliceOutcome::default()
        };
        let recorded = self
            .store
            .record_outcome(id, slice, &outcome)
            .await
            .unwrap();
        assert!(recorded.written, "{slice} was open");
    }

    /// Decides on a job awaiting approval, as the API does.
    async fn decide(
        &self,
        id: &JobId,
        approved: bool,
        by: &str,
    ) -> Result<JobStatus, ScheduleError> {
        trawl_scheduler::decide(self.store.as_ref(), &self.events, id, approved, by).await
    }
}

impl Drop for Sys {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Asserts every stored slice of the job was published exactly once.
async fn assert_published_once(sys: &Sys, id: &JobId, slices: usize) {
    let stored = sys.slice_ids(id).await;
    assert_eq!(stored.len(), slices);
    let published = sys.publications(id);
    assert_eq!(
        published.keys().cloned().collect::<BTreeSet<_>>(),
        stored,
        "every stored slice is published"
    );
    assert!(
        published.values().all(|&n| n == 1),
        "published more than once: {published:?}"
    );
}

#[tokio::test]
async fn a_pending_job_is_planned_and_published_by_reconciliation_alone() {
    let mut sys = Sys::with_reconcile_every(OFTEN).await;
    let job = pages("plain", 5, "");
    let id = sys.store_pending(&job).await;
    // No event is ever sent; the sender stays open, so the loop does not fall back
    // to reconciliation for want of events either.
    sys.start();

    sys.wait_for_status(&id, JobStatus::Running).await;
    let counts = sys.store.counts(&id).await.unwrap();
    assert_eq!(counts.slices_total, 5);
    let planned: BTreeSet<SliceId> = plan(&job, &PriceTable::default())
        .slices
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(
        sys.slice_ids(&id).await,
        planned,
        "the planned slices are stored"
    );

    // Ticks went on while the test watched; two more passes make sure.
    sys.stop().await;
    sys.service.reconcile().await.unwrap();
    sys.service.reconcile().await.unwrap();
    assert_published_once(&sys, &id, 5).await;

    // And the queue holds exactly those, once each.
    assert_eq!(sys.queue.inner.pending(), 5);
    let mut pulled = BTreeSet::new();
    for _ in 0..5 {
        let d = timeout(Duration::ZERO, sys.queue.pull())
            .await
            .expect("a slice is ready")
            .unwrap();
        assert_eq!(d.message.job_id, id);
        assert_eq!(d.delivery, 1);
        pulled.insert(d.message.slice.id.clone());
    }
    assert_eq!(pulled, planned);
    assert!(timeout(Duration::ZERO, sys.queue.pull()).await.is_err());
}

#[tokio::test]
async fn a_job_created_event_plans_the_job_without_waiting_for_the_tick() {
    let mut sys = Sys::with_reconcile_every(NEVER_AGAIN).await;
    // The first tick runs at start; a job only it can plan shows it has run.
    let first = sys.store_pending(&pages("first", 1, "")).await;
    sys.start();
    sys.wait_for_status(&first, JobStatus::Running).await;

    // The next tick is an hour away: only the event can plan this one.
    let id = sys.store_pending(&pages("evented", 3, "")).await;
    sys.events
        .emit(Event::JobCreated { job_id: id.clone() })
        .await
        .unwrap();
    sys.wait_for_status(&id, JobStatus::Running).await;
    assert_published_once(&sys, &id, 3).await;
}

#[tokio::test]
async fn a_job_above_its_approval_threshold_waits_and_runs_once_approved() {
    let mut sys = Sys::with_reconcile_every(NEVER_AGAIN).await;
    let job = pages(
        "costly",
        10,
        "budget: {max_usd: 1.0, approve_above_usd: 0.001}\n",
    );
    let estimate = plan(&job, &PriceTable::default()).estimate.cost;
    assert!(estimate > Micros::from_usd(0.001));
    let id = sys.store_pending(&job).await;
    sys.start();

    let parked = sys.wait_for_status(&id, JobStatus::AwaitingApproval).await;
    assert_eq!(parked.reason, None);
    assert!(sys.publications(&id).is_empty(), "nothing is published");
    assert_eq!(sys.queue.inner.pending(), 0);
    // Planned: its slices are stored, waiting.
    assert_eq!(sys.store.counts(&id).await.unwrap().slices_total, 10);
    let pending: Vec<ApprovalRecord> = sys
        .store
        .approvals(true, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.job_id.as_ref() == Some(&id))
        .collect();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].amount, estimate);
    assert_eq!(pending[0].approved, None);

    // Decided as the API does it, then announced; the next tick is an hour away.
    let status = sys.decide(&id, true, "alice").await.unwrap();
    assert_eq!(status, JobStatus::Queued);
    sys.events
        .emit(Event::ApprovalDecided {
            job_id: id.clone(),
            approved: true,
        })
        .await
        .unwrap();
    sys.wait_for_status(&id, JobStatus::Running).await;
    assert_published_once(&sys, &id, 10).await;
    assert!(
        sys.store
            .approvals(true, 100)
            .await
            .unwrap()
            .iter()
            .all(|a| a.job_id.as_ref() != Some(&id)),
        "no approval left pending"
    );
}

/// The threshold a submission recorded (its tenant's, lower than the spec's or
/// where the spec has none) parks the job as the spec's own does.
#[tokio::test]
async fn a_job_above_the_threshold_its_submission_recorded_waits() {
    let sys = Sys::with_reconcile_every(NEVER_AGAIN).await;
    let spec = pages("tenant", 3, "");
    let estimate = plan(&spec, &PriceTable::default()).estimate.cost;
    let store = |above: Option<Micros>| {
        let job = JobRecord {
            approve_above: above,
            ..pending_record(&spec.name, spec.document.clone(), estimate)
        };
        let store = sys.store.clone();
        async move {
            store.create_job(&job, &[]).await.unwrap();
            job.id
        }
    };
    let over = store(Some(Micros(estimate.0 - 1))).await;
    let at = store(Some(estimate)).await;
    let none = store(None).await;
    sys.service.reconcile().await.unwrap();
    assert_eq!(sys.job(&over).await.status, JobStatus::AwaitingApproval);
    assert_eq!(sys.job(&at).await.status, JobStatus::Running);
    assert_eq!(sys.job(&none).await.status, JobStatus::Running);
    let approvals = sys.store.approvals(true, 100).await.unwrap();
    let mine: Vec<_> = approvals
        .iter()
        .filter(|a| a.job_id.as_ref() == Some(&over))
        .collect();
    assert_eq!(mine.len(), 1);
    assert!(
        mine[0].reason.contains("the tenant's approve_above_usd"),
        "{}",
        mine[0].reason
    );
}

#[tokio::test]
async fn a_second_decision_and_a_decision_after_expiry_change_nothing() {
    let sys = Sys::with_reconcile_every(NEVER_AGAIN).await;
    let costly = "budget: {max_usd: 1.0, approve_above_usd: 0.001}\n";
    let first = sys.store_pending(&pages("first", 3, costly)).await;
    let late = sys.store_pending(&pages("late", 3, costly)).await;
    sys.service.reconcile().await.unwrap();
    assert_eq!(sys.job(&first).await.status, JobStatus::AwaitingApproval);
    assert_eq!(sys.job(&late).await.status, JobStatus::AwaitingApproval);

    // The first decision wins; a second is refused and moves nothing.
    let status = sys.decide(&first, false, "bob").await.unwrap();
    assert_eq!(status, JobStatus::Cancelled);
    let again = sys.decide(&first, true, "alice").await;
    assert!(
        matches!(again, Err(ScheduleError::NotAwaitingApproval(..))),
        "{again:?}"
    );
    assert_eq!(sys.job(&first).await.status, JobStatus::Cancelled);

    // Past its expiry (a TTL of 0), not yet closed by a notifier: the job still
    // waits, and a decision is refused rather than queueing it.
    let requested = sys
        .store
        .approvals(true, 10)
        .await
        .unwrap()
        .into_iter()
        .find(|a| a.job_id.as_ref() == Some(&late))
        .unwrap()
        .requested_ms;
    sys.store
        .expire_approvals(requested - 1, Some(0), 10)
        .await
        .unwrap();
    let refused = sys.decide(&late, true, "alice").await;
    assert!(
        matches!(refused, Err(ScheduleError::ApprovalClosed(ref j)) if *j == late),
        "{refused:?}"
    );
    let job = sys.job(&late).await;
    assert_eq!(job.status, JobStatus::AwaitingApproval);
    assert!(sys.publications(&late).is_empty());
}

#[tokio::test]
async fn a_slice_stored_but_never_published_is_published_once_by_reconciliation() {
    let sys = Sys::with_reconcile_every(NEVER_AGAIN).await;
    let job = spec(&format!(
        "name: search\nsearches: {{queries: [laptop], geos: [us], follow_top: 3}}\n{EXTRACT}"
    ));
    let id = sys.store_pending(&job).await;
    sys.service.reconcile().await.unwrap();
    assert_eq!(sys.job(&id).await.status, JobStatus::Running);
    assert_published_once(&sys, &id, 1).await;

    // The search's outcome adds three page slices; whoever wrote it died before
    // publishing them.
    let search = sys.store.open_slices(&id).await.unwrap().remove(0);
    let children = follow_ups(
        &search,
        [
            "https://shop.example/p/a",
            "https://shop.example/p/b",
            "https://shop.example/p/c",
        ],
    );
    let outcome = SliceOutcome {
        children: children.clone(),
        ..SliceOutcome::default()
    };
    let recorded = sys
        .store
        .record_outcome(&id, &search.id, &outcome)
        .await
        .unwrap();
    assert_eq!(recorded.new_children.len(), 3);
    let unpublished = sys.store.slices_to_publish(&id, i64::MIN, 100).await;
    assert_eq!(unpublished.unwrap().len(), 3);

    sys.service.reconcile().await.unwrap();
    let published = sys.publications(&id);
    assert_eq!(published.len(), 4);
    for child in &children {
        assert_eq!(
            published.get(&child.id),
            Some(&1),
            "{} published once",
            child.id
        );
    }
    // Marked: nothing is left never published, and another pass publishes nothing.
    let unpublished = sys.store.slices_to_publish(&id, i64::MIN, 100).await;
    assert!(unpublished.unwrap().is_empty());
    sys.service.reconcile().await.unwrap();
    assert_eq!(sys.publications(&id), published);
    assert_eq!(sys.queue.published.lock().unwrap().len(), 4);
    assert_eq!(sys.job(&id).await.status, JobStatus::Running);
}

#[tokio::test]
async fn a_job_whose_slices_all_succeed_ends_succeeded_on_their_events() {
    let mut sys = Sys::with_reconcile_every(NEVER_AGAIN).await;
    let id = sys.store_pending(&pages("fine", 3, "")).await;
    sys.start();
    sys.wait_for_status(&id, JobStatus::Running).await;

    // Workers record the slices and announce them; the next tick is an hour away.
    for slice in sys.slice_ids(&id).await {
        sys.record(&id, &slice, None).await;
        let ev = SliceFinished::of(&id, &slice, &SliceOutcome::default(), 0);
        sys.events.slice_finished(ev).await.unwrap();
    }
    let done = sys.wait_for_status(&id, JobStatus::Succeeded).await;
    assert_eq!(done.reason, None);
}

#[tokio::test]
async fn a_job_with_a_failed_slice_ends_partial_with_the_reason() {
    let sys = Sys::with_reconcile_every(NEVER_AGAIN).await;
    let id = sys.store_pending(&pages("mixed", 3, "")).await;
    sys.service.reconcile().await.unwrap();
    let slices: Vec<SliceId> = sys.slice_ids(&id).await.into_iter().collect();

    sys.record(&id, &slices[0], None).await;
    sys.record(&id, &slices[1], Some("reject_block")).await;
    // One slice open: the job is not finished early.
    sys.service.reconcile().await.unwrap();
    assert_eq!(sys.job(&id).await.status, JobStatus::Running);

    sys.record(&id, &slices[2], None).await;
    sys.service.reconcile().await.unwrap();
    let job = sys.job(&id).await;
    assert_eq!(job.status, JobStatus::Partial);
    assert_eq!(
        job.reason.as_deref(),
        Some("1 of 3 slices failed after their retries")
    );
}

#[tokio::test]
async fn a_job_cancelled_while_running_stays_cancelled_when_its_slices_finish() {
    let mut sys = Sys::with_reconcile_every(NEVER_AGAIN).await;
    let id = sys.store_pending(&pages("stopped", 2, "")).await;
    sys.start();
    sys.wait_for_status(&id, JobStatus::Running).await;

    sys.store
        .end_job(&id, JobStatus::Cancelled, Some(API_CANCEL))
        .await
        .unwrap();
    for slice in sys.slice_ids(&id).await {
        sys.record(&id, &slice, None).await;
        let ev = SliceFinished::of(&id, &slice, &SliceOutcome::default(), 0);
        sys.events.slice_finished(ev).await.unwrap();
    }
    // Whatever the loop made of those events, it is done once it stops.
    sys.stop().await;
    sys.service.reconcile().await.unwrap();
    let job = sys.job(&id).await;
    assert_eq!(job.status, JobStatus::Cancelled);
    assert_eq!(job.reason.as_deref(), Some(API_CANCEL));
}

#[tokio::test]
async fn a_cancel_landing_while_the_job_is_finished_is_not_overwritten() {
    let sys = Sys::with_reconcile_every(NEVER_AGAIN).await;
    let id = sys.store_pending(&pages("raced", 2, "")).await;
    sys.service.reconcile().await.unwrap();
    for slice in sys.slice_ids(&id).await {
        sys.record(&id, &slice, None).await;
    }
    // The pass reads the job as running, then the cancel lands before it ends it.
    *sys.store.end_on_counts.lock().unwrap() =
        Some((id.clone(), JobStatus::Cancelled, API_CANCEL.to_owned()));
    sys.service.reconcile().await.unwrap();
    assert!(
        sys.store.end_on_counts.lock().unwrap().is_none(),
        "the hook fired"
    );
    let job = sys.job(&id).await;
    assert_eq!(job.status, JobStatus::Cancelled);
    assert_eq!(job.reason.as_deref(), Some(API_CANCEL));
}

#[tokio::test]
async fn a_dead_letter_is_recorded_failed_with_delivery_limit_and_announced() {
    let queue = QueueConfig::default()
        .with_max_deliver(1)
        .with_ack_wait(Duration::from_millis(100));
    let mut sys = Sys::new(OFTEN, queue).await;
    let id = sys.store_pending(&pages("lost", 1, "")).await;
    sys.start();
    sys.wait_for_status(&id, JobStatus::Running).await;

    // A worker takes the slice and is never heard of again.
    let delivery = timeout(DEADLINE, sys.queue.pull())
        .await
        .expect("the slice is published")
        .unwrap();
    assert_eq!(delivery.message.job_id, id);
    let slice = delivery.message.slice.id.clone();

    let ev = timeout(DEADLINE, sys.emitted.recv())
        .await
        .expect("the dead letter is announced")
        .expect("the service is running");
    let Event::SliceFinished(f) = ev else {
        panic!("expected slice.finished, got {ev:?}");
    };
    assert_eq!((&f.job_id, &f.slice_id, f.succeeded), (&id, &slice, false));

    let failed = sys.store.failed_slices(&id, 10).await.unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].slice_id, slice);
    assert_eq!(failed[0].error.code, "delivery_limit");
    assert!(
        failed[0].error.message.contains("after 1 deliveries"),
        "{:?}",
        failed[0].error
    );
    let job = sys.wait_for_status(&id, JobStatus::Failed).await;
    assert_eq!(
        job.reason.as_deref(),
        Some("1 of 1 slices failed after their retries")
    );
    // Its late ack changes nothing.
    delivery.acker.ack().await.unwrap();
    assert_eq!(sys.store.counts(&id).await.unwrap().slices_failed, 1);
}

#[tokio::test]
async fn a_pending_job_whose_spec_no_longer_parses_fails_and_others_go_on() {
    let mut sys = Sys::with_reconcile_every(OFTEN).await;
    let broken = pending_record(
        "broken",
        json!({"name": "broken", "pages": {"urls": "not a list", "geos": ["us"]}}),
        Micros::ZERO,
    );
    sys.store.create_job(&broken, &[]).await.unwrap();
    let fine = sys.store_pending(&pages("fine", 2, "")).await;
    sys.start();

    let job = sys.wait_for_status(&broken.id, JobStatus::Failed).await;
    let reason = job.reason.unwrap_or_default();
    assert!(
        reason.starts_with("stored spec no longer valid") && reason.contains("pages.urls"),
        "{reason}"
    );
    assert_eq!(sys.store.counts(&broken.id).await.unwrap().slices_total, 0);
    assert!(sys.publications(&broken.id).is_empty());

    sys.wait_for_status(&fine, JobStatus::Running).await;
    sys.stop().await;
    assert_published_once(&sys, &fine, 2).await;
    assert_eq!(sys.job(&broken.id).await.status, JobStatus::Failed);
}

/// A pass deletes the ended jobs past their retention, a batch at a time, and
/// nothing of the jobs still running or still kept.
#[tokio::test]
async fn a_pass_deletes_ended_jobs_past_their_retention_and_nothing_else() {
    let sys = Sys::with_reconcile_every(NEVER_AGAIN).await;
    let (events, _inbox) = InProcessEvents::channel();
    let service = |retention: Duration| Service {
        store: sys.store.clone(),
        queue: sys.queue.clone(),
        events: Arc::new(events.clone()),
        prices: PriceTable::default(),
        config: ServiceConfig::default().with_retention(retention),
    };
    // Keeps everything for an hour: plans both jobs, and ends the first.
    let keep = service(Duration::from_secs(3600));
    let done = sys.store_pending(&pages("done", 3, "")).await;
    let running = sys.store_pending(&pages("running", 2, "")).await;
    keep.reconcile().await.unwrap();
    for s in sys.store.open_slices(&done).await.unwrap() {
        sys.store
            .record_outcome(&done, &s.id, &SliceOutcome::default())
            .await
            .unwrap();
    }
    keep.reconcile().await.unwrap();
    assert_eq!(sys.job(&done).await.status, JobStatus::Succeeded);
    keep.reconcile().await.unwrap();
    assert!(
        sys.store.job(&done).await.unwrap().is_some(),
        "kept for an hour"
    );

    // Kept for a millisecond: the next passes delete it, once it is a
    // millisecond old, and leave the running job alone.
    let short = service(Duration::from_millis(1));
    let deadline = std::time::Instant::now() + DEADLINE;
    while sys.store.job(&done).await.unwrap().is_some() {
        assert!(std::time::Instant::now() < deadline, "not deleted");
        short.reconcile().await.unwrap();
    }
    assert!(
        sys.store
            .job_rows(&done)
            .await
            .unwrap()
            .iter()
            .all(|(_, n)| *n == 0)
    );
    assert_eq!(sys.job(&running).await.status, JobStatus::Running);
    assert_eq!(sys.store.open_slices(&running).await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_that_cannot_be_asked_for_dead_letters_is_not_a_dead_letter_lost() {
    let logs = trawl_telemetry::testing::CapturedLogs::install();
    let mut sys = Sys::with_reconcile_every(OFTEN).await;
    sys.queue.dead_fail.store(3, Ordering::SeqCst);
    sys.start();
    let until = Instant::now() + DEADLINE;
    while sys.queue.dead_reads.load(Ordering::SeqCst) < 4 {
        assert!(Instant::now() < until, "dead letters were not read again");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    sys.stop().await;
    // Three failed reads said so; none claims a dead letter went unrecorded.
    let said = logs.lines_with(&["dead letters not read; asking again later"]);
    assert!(said.len() >= 3, "{}", logs.text());
    assert!(
        logs.lines_with(&["dead letter not recorded"]).is_empty(),
        "{}",
        logs.text()
    );
}
