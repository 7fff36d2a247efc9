//! The worker against the simulator over loopback HTTP, with a private in-memory
//! store, an in-process queue and a cache in its own temporary folder per test.
//!
//! The queue and the events port are wrapped so every pull, verdict (ack, nak,
//! term) and `slice.finished` lands in one log, in the order the worker did them:
//! tests assert on that log and on the store, and wait on them with a deadline.
//!
//! Time: real. The worker's calls go over real sockets to a simulator on the same
//! runtime, and a paused tokio clock would jump to the next timer (a call timeout)
//! whenever the runtime waits on a socket.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;
use trawl_brightdata::{BrightData, BrightDataConfig};
use trawl_cache::SqliteCache;
use trawl_core::cost::{Micros, PriceTable};
use trawl_core::model::{JobId, JobStatus, SliceId, SliceSpec, now_ms};
use trawl_core::plan::plan;
use trawl_core::ports::{
    Acker, DeadLetter, Delivery, Event, Events, JobRecord, JobStore, PortError, SliceMessage,
    SliceQueue, SliceStore,
};
use trawl_core::spec::JobSpec;
use trawl_queue::{EmbeddedQueue, QueueConfig};
use trawl_sim::{DOWN_HOST_SUFFIX, SimConfig, SimHandle};
use trawl_store::testing::FaultyStore;
use trawl_telemetry::testing::CapturedLogs;
use trawl_tools::ToolLayer;
use trawl_worker::{Worker, WorkerConfig};

/// The longest a test waits for something that should happen soon.
const DEADLINE: Duration = Duration::from_secs(10);

const EXTRACT: &str =
    "extract:\n  fields:\n    name: {jsonld: \"name\"}\n    title: {css: \"h1\"}\n";

/// A job fetching these pages from the US, every call upstream (no cache).
fn pages(urls: &[String], extra: &str) -> JobSpec {
    cached_pages(urls, "0", extra)
}

/// A job fetching these pages from the US, cached for `max_age`.
fn cached_pages(urls: &[String], max_age: &str, extra: &str) -> JobSpec {
    let urls: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
    let text = format!(
        "name: pages\npages: {{urls: [{}], geos: [us]}}\n{EXTRACT}cache: {{max_age: {max_age}}}\n{extra}",
        urls.join(", ")
    );
    JobSpec::parse(&text).unwrap()
}

fn shop_urls(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("https://shop.example/p/item-{i}"))
        .collect()
}

/// What the worker did, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Pulled(SliceId, u32),
    Finished(SliceId, bool),
    Acked(SliceId, u32),
    Naked(SliceId, u32, Duration),
    Termed(SliceId, u32),
    /// The test asked the worker to stop.
    Stop,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// The embedded queue, with every delivery and verdict logged.
struct Recording {
    inner: EmbeddedQueue,
    log: Log,
}

#[async_trait]
impl SliceQueue for Recording {
    async fn publish(&self, msg: &SliceMessage) -> Result<(), PortError> {
        self.inner.publish(msg).await
    }
    async fn pull(&self) -> Result<Delivery, PortError> {
        let d = self.inner.pull().await?;
        let slice = d.message.slice.id.clone();
        self.log
            .lock()
            .unwrap()
            .push(Seen::Pulled(slice.clone(), d.delivery));
        Ok(Delivery {
            acker: Box::new(RecordingAcker {
                inner: d.acker,
                log: self.log.clone(),
                slice,
                delivery: d.delivery,
            }),
            ..d
        })
    }
    async fn dead_letter(&self) -> Result<DeadLetter, PortError> {
        self.inner.dead_letter().await
    }
    async fn lag(&self) -> Result<u64, PortError> {
        self.inner.lag().await
    }
}

struct RecordingAcker {
    inner: Box<dyn Acker>,
    log: Log,
    slice: SliceId,
    delivery: u32,
}

impl RecordingAcker {
    fn note(&self, seen: Seen) {
        self.log.lock().unwrap().push(seen);
    }
}

#[async_trait]
impl Acker for RecordingAcker {
    async fn ack(&self) -> Result<(), PortError> {
        self.note(Seen::Acked(self.slice.clone(), self.delivery));
        self.inner.ack().await
    }
    async fn nak(&self, delay: Duration) -> Result<(), PortError> {
        self.note(Seen::Naked(self.slice.clone(), self.delivery, delay));
        self.inner.nak(delay).await
    }
    async fn in_progress(&self) -> Result<(), PortError> {
        self.inner.in_progress().await
    }
    async fn term(&self) -> Result<(), PortError> {
        self.note(Seen::Termed(self.slice.clone(), self.delivery));
        self.inner.term().await
    }
}

/// `slice.finished` events, into the same log; the next `fail` of them are
/// refused, as by a queue that is away.
struct RecordingEvents {
    log: Log,
    fail: Arc<AtomicU32>,
}

#[async_trait]
impl Events for RecordingEvents {
    async fn emit(&self, ev: Event) -> Result<(), PortError> {
        if take_one(&self.fail) {
            return Err(PortError::Unavailable("no responders (test)".into()));
        }
        if let Event::SliceFinished(f) = ev {
            self.log
                .lock()
                .unwrap()
                .push(Seen::Finished(f.slice_id, f.succeeded));
        }
        Ok(())
    }
}

/// Takes one from `n` if it is above 0.
fn take_one(n: &AtomicU32) -> bool {
    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
        .is_ok()
}

/// One worker with its own simulator, store, queue and cache.
struct Rig {
    sim: SimHandle,
    store: Arc<FaultyStore>,
    queue: Arc<Recording>,
    log: Log,
    /// `slice.finished` events to refuse.
    events_fail: Arc<AtomicU32>,
    worker: Arc<Worker>,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Rig {
    async fn new(sim: SimConfig, queue: QueueConfig, worker: WorkerConfig) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let sim = trawl_sim::spawn(sim).await.unwrap();
        let provider = BrightData::new(
            BrightDataConfig::new(sim.base_url(), "simulator")
                .with_timeout(Duration::from_secs(30)),
        )
        .unwrap();
        let cache = SqliteCache::open(&dir.path().join("cache.db"))
            .await
            .unwrap();
        let tools = Arc::new(ToolLayer::new(Arc::new(provider), Arc::new(cache)));
        let store = Arc::new(FaultyStore::memory().await.unwrap());
        let log = Log::default();
        let queue = Arc::new(Recording {
            inner: EmbeddedQueue::new(queue),
            log: log.clone(),
        });
        let events_fail = Arc::new(AtomicU32::new(0));
        let events = Arc::new(RecordingEvents {
            log: log.clone(),
            fail: events_fail.clone(),
        });
        let worker = Arc::new(Worker::new(
            queue.clone(),
            store.clone(),
            events,
            tools,
            worker,
        ));
        Rig {
            sim,
            store,
            queue,
            log,
            events_fail,
            worker,
            cancel: CancellationToken::new(),
            task: None,
            _dir: dir,
        }
    }

    /// Stores a running job with its planned slices; nothing is published yet.
    async fn job(&self, spec: &JobSpec) -> (JobId, Vec<SliceSpec>) {
        let p = plan(spec, &PriceTable::default());
        let created_ms = now_ms();
        let job = JobRecord {
            // One job per store: any id will do.
            id: JobId::generate(created_ms, 1),
            name: spec.name.clone(),
            spec: spec.document.clone(),
            status: JobStatus::Running,
            reason: None,
            estimate: p.estimate.cost,
            created_ms,
            idempotency: None,
            traceparent: None,
            owner: None,
            retention_ms: None,
            slices_max: 0,
            approve_above: None,
        };
        self.store.create_job(&job, &p.slices).await.unwrap();
        (job.id, p.slices)
    }

    async fn publish(&self, job_id: &JobId, slice: &SliceSpec) {
        let msg = SliceMessage {
            job_id: job_id.clone(),
            slice: slice.clone(),
        };
        self.queue.publish(&msg).await.unwrap();
    }

    fn start(&mut self) {
        let run = self.worker.clone().run(self.cancel.clone());
        self.task = Some(tokio::spawn(run));
    }

    /// Asks the worker to stop (noted in the log) and returns how long `run` took
    /// to return.
    async fn stop(&mut self) -> Duration {
        let asked = Instant::now();
        self.log.lock().unwrap().push(Seen::Stop);
        self.cancel.cancel();
        let task = self.task.take().expect("started");
        timeout(DEADLINE, task)
            .await
            .expect("the worker stops")
            .unwrap();
        asked.elapsed()
    }

    fn log(&self) -> Vec<Seen> {
        self.log.lock().unwrap().clone()
    }

    async fn wait_for(&self, what: &str, done: impl Fn(&[Seen]) -> bool) {
        let until = Instant::now() + DEADLINE;
        while !done(&self.log()) {
            assert!(
                Instant::now() < until,
                "timed out waiting for {what}; the worker did {:#?}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until the simulator has received `n` requests.
    async fn wait_for_requests(&self, n: u64) {
        let until = Instant::now() + DEADLINE;
        while self.sim.stats().requests < n {
            assert!(
                Instant::now() < until,
                "the simulator got {:?}, not {n} requests",
                self.sim.stats()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Test settings: one slice at a time, tool retries without real waits.
fn worker_config() -> WorkerConfig {
    WorkerConfig::default()
        .with_concurrency(1)
        .with_retry_delays(Duration::from_millis(1), Duration::from_millis(5))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_of_a_job_cancelled_after_the_worker_saw_it_are_skipped_at_the_recheck() {
    let recheck = Duration::from_millis(200);
    let mut rig = Rig::new(
        SimConfig::default(),
        QueueConfig::default(),
        worker_config().with_status_recheck(recheck),
    )
    .await;
    let (id, slices) = rig.job(&pages(&shop_urls(4), "")).await;
    rig.start();

    // The worker loads the job, reads its status, and runs the first slice.
    rig.publish(&id, &slices[0]).await;
    let first = slices[0].id.clone();
    rig.wait_for("the first slice", |log| {
        log.contains(&Seen::Acked(first.clone(), 1))
    })
    .await;
    assert_eq!(rig.sim.stats().requests, 1);
    assert!(rig.log().contains(&Seen::Finished(first.clone(), true)));

    rig.store
        .end_job(&id, JobStatus::Cancelled, Some("cancelled over the API"))
        .await
        .unwrap();
    // The worker last read the status before the cancel; it reads it again once
    // `recheck` has passed since. That is wall-clock time (the worker measures it
    // with `std::time::Instant`), so the test lets it pass before going on: the
    // precondition of what is tested, not a wait for another task.
    tokio::time::sleep_until(Instant::now() + recheck).await;

    for slice in &slices[1..] {
        rig.publish(&id, slice).await;
    }
    rig.wait_for("the other slices to be settled", |log| {
        slices[1..]
            .iter()
            .all(|s| log.contains(&Seen::Acked(s.id.clone(), 1)))
    })
    .await;

    // Acked without running: no upstream call, nothing recorded, no event.
    assert_eq!(rig.sim.stats().requests, 1, "no upstream call for them");
    let log = rig.log();
    for s in &slices[1..] {
        assert!(
            !log.iter()
                .any(|e| matches!(e, Seen::Finished(f, _) if *f == s.id)),
            "{log:#?}"
        );
    }
    let counts = rig.store.counts(&id).await.unwrap();
    assert_eq!((counts.slices_succeeded, counts.slices_failed), (1, 0));
    assert_eq!(rig.store.open_slices(&id).await.unwrap().len(), 3);
    assert_eq!(rig.queue.inner.pending(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_failing_transiently_is_handed_back_until_its_last_delivery() {
    let mut rig = Rig::new(
        SimConfig::default(),
        QueueConfig::default().with_max_deliver(4),
        worker_config().with_redeliver(vec![Duration::from_millis(10), Duration::from_millis(20)]),
    )
    .await;
    let url = format!("https://shop{DOWN_HOST_SUFFIX}/p/1");
    let job = pages(&[url], "retries: {max_attempts: 2}\n");
    let (id, slices) = rig.job(&job).await;
    let s = slices[0].id.clone();
    rig.publish(&id, &slices[0]).await;
    rig.start();

    rig.wait_for("the slice to be settled", |log| {
        log.iter().any(|e| matches!(e, Seen::Acked(..)))
    })
    .await;
    // Naked with the schedule (its last entry repeating) and recorded on the last
    // delivery only: no `slice.finished` before it, so nothing written before it.
    let ms = Duration::from_millis;
    assert_eq!(
        rig.log(),
        [
            Seen::Pulled(s.clone(), 1),
            Seen::Naked(s.clone(), 1, ms(10)),
            Seen::Pulled(s.clone(), 2),
            Seen::Naked(s.clone(), 2, ms(20)),
            Seen::Pulled(s.clone(), 3),
            Seen::Naked(s.clone(), 3, ms(20)),
            Seen::Pulled(s.clone(), 4),
            Seen::Finished(s.clone(), false),
            Seen::Acked(s.clone(), 4),
        ]
    );
    // Every delivery made its tool attempts.
    assert_eq!(rig.sim.stats().requests, 4 * 2);
    let failed = rig.store.failed_slices(&id, 10).await.unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].error.code, "reject_block");
    assert_eq!(rig.queue.inner.pending(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redeliver_a_slice_failing_transiently_is_recorded_at_once() {
    let mut rig = Rig::new(
        SimConfig::default(),
        QueueConfig::default().with_max_deliver(4),
        worker_config().with_redeliver(Vec::new()),
    )
    .await;
    let url = format!("https://shop{DOWN_HOST_SUFFIX}/p/1");
    let job = pages(&[url], "retries: {max_attempts: 2}\n");
    let (id, slices) = rig.job(&job).await;
    let s = slices[0].id.clone();
    rig.publish(&id, &slices[0]).await;
    rig.start();

    rig.wait_for("the slice to be settled", |log| {
        log.iter().any(|e| matches!(e, Seen::Acked(..)))
    })
    .await;
    assert_eq!(
        rig.log(),
        [
            Seen::Pulled(s.clone(), 1),
            Seen::Finished(s.clone(), false),
            Seen::Acked(s.clone(), 1),
        ]
    );
    assert_eq!(rig.sim.stats().requests, 2);
    let failed = rig.store.failed_slices(&id, 10).await.unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].error.code, "reject_block");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redeliver_successes_and_permanent_failures_are_recorded_at_once() {
    let mut rig = Rig::new(
        SimConfig::default(),
        QueueConfig::default().with_max_deliver(4),
        worker_config().with_redeliver(vec![Duration::from_millis(10)]),
    )
    .await;
    // Room for one call: the first page is fetched, the second is refused by the
    // budget, which no later delivery can change.
    let job = pages(&shop_urls(2), "budget: {max_usd: 0.0015}\n");
    let (id, slices) = rig.job(&job).await;
    let (a, b) = (slices[0].id.clone(), slices[1].id.clone());
    for slice in &slices {
        rig.publish(&id, slice).await;
    }
    rig.start();

    rig.wait_for("both slices to be settled", |log| {
        log.iter().filter(|e| matches!(e, Seen::Acked(..))).count() == 2
    })
    .await;
    assert_eq!(
        rig.log(),
        [
            Seen::Pulled(a.clone(), 1),
            Seen::Finished(a.clone(), true),
            Seen::Acked(a.clone(), 1),
            Seen::Pulled(b.clone(), 1),
            Seen::Finished(b.clone(), false),
            Seen::Acked(b.clone(), 1),
        ]
    );
    assert_eq!(rig.sim.stats().requests, 1);
    let failed = rig.store.failed_slices(&id, 10).await.unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].error.code, "budget_exhausted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_still_running_at_the_end_of_the_stop_grace_is_handed_back() {
    let grace = Duration::from_millis(300);
    let latency = Duration::from_secs(10);
    let mut rig = Rig::new(
        SimConfig::default().with_latency(latency),
        QueueConfig::default(),
        worker_config().with_stop_grace(grace),
    )
    .await;
    let (id, slices) = rig.job(&pages(&shop_urls(1), "")).await;
    let s = slices[0].id.clone();
    rig.publish(&id, &slices[0]).await;
    rig.start();
    // The simulator counts a request when it arrives, before its latency.
    rig.wait_for_requests(1).await;

    let took = rig.stop().await;
    assert!(took >= grace, "stopped after {took:?}, before the grace");
    assert!(
        took < grace + Duration::from_secs(3),
        "stopped after {took:?}, long after the grace of {grace:?}"
    );
    assert_eq!(
        rig.log(),
        [
            Seen::Pulled(s.clone(), 1),
            Seen::Stop,
            Seen::Naked(s.clone(), 1, Duration::ZERO),
        ]
    );
    let counts = rig.store.counts(&id).await.unwrap();
    assert_eq!((counts.slices_succeeded, counts.slices_failed), (0, 0));

    // Back on the queue: the next puller gets it at once.
    let again = timeout(DEADLINE, rig.queue.pull())
        .await
        .expect("the slice is back on the queue")
        .unwrap();
    assert_eq!(again.message.slice.id, s);
    assert_eq!(again.delivery, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_in_flight_finish_within_the_stop_grace_and_no_new_one_is_pulled() {
    const LOOPS: usize = 4;
    let mut rig = Rig::new(
        // Long enough that no slice ends before the stop is asked for.
        SimConfig::default().with_latency(Duration::from_secs(1)),
        QueueConfig::default(),
        worker_config()
            .with_concurrency(LOOPS)
            .with_stop_grace(Duration::from_secs(30)),
    )
    .await;
    let (id, slices) = rig.job(&pages(&shop_urls(4 * LOOPS), "")).await;
    for slice in &slices {
        rig.publish(&id, slice).await;
    }
    rig.start();
    rig.wait_for_requests(LOOPS as u64).await;

    let took = rig.stop().await;
    assert!(took < Duration::from_secs(10), "the grace was waited out");
    let log = rig.log();
    let stop = log.iter().position(|e| *e == Seen::Stop).unwrap();
    assert!(
        !log[stop..].iter().any(|e| matches!(e, Seen::Pulled(..))),
        "a slice was pulled after the stop: {log:#?}"
    );
    // Every slice pulled was run, recorded and acked; the others wait untouched.
    let pulled: Vec<SliceId> = log
        .iter()
        .filter_map(|e| match e {
            Seen::Pulled(s, 1) => Some(s.clone()),
            _ => None,
        })
        .collect();
    assert!(pulled.len() >= LOOPS, "{log:#?}");
    for s in &pulled {
        assert!(log.contains(&Seen::Finished(s.clone(), true)), "{log:#?}");
        assert!(log.contains(&Seen::Acked(s.clone(), 1)), "{log:#?}");
    }
    let counts = rig.store.counts(&id).await.unwrap();
    assert_eq!(counts.slices_succeeded, pulled.len() as u64);
    assert_eq!(rig.queue.inner.pending(), slices.len() - pulled.len());
    assert_eq!(rig.queue.inner.in_flight(), 0);
    assert_eq!(counts.cost, Micros(1_500 * pulled.len() as i64));
}

// ---------------------------------------------------------------------------
// The ledger under lost outcomes: every billed call once.

/// The price of one page fetch (the simulator's default price table).
const PAGE: Micros = Micros(1_500);

/// Waits until the slice's outcome is recorded and the worker keeps no cost
/// row for the store.
async fn wait_settled(rig: &Rig, id: &JobId) {
    let until = Instant::now() + DEADLINE;
    loop {
        let open = rig.store.open_slices(id).await.unwrap().len();
        if open == 0 && rig.worker.unwritten_costs() == 0 {
            return;
        }
        assert!(
            Instant::now() < until,
            "timed out: {open} open slices, {} cost rows kept; the worker did {:#?}",
            rig.worker.unwritten_costs(),
            rig.log()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The ledger of the job against what the simulator billed: every successful
/// answer once, in `spent` (the ledger's rows) and in the job's counts alike.
async fn assert_ledger_matches_billing(rig: &Rig, id: &JobId) -> u64 {
    let billed = rig.sim.stats().ok;
    let spent = rig.store.spent(id).await.unwrap();
    assert_eq!(
        spent,
        PAGE.saturating_mul(billed),
        "ledger against {billed} billed calls"
    );
    let counts = rig.store.counts(id).await.unwrap();
    assert_eq!(counts.cost, spent);
    billed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_outcome_and_its_redelivery_are_both_in_the_ledger_with_one_set_of_items() {
    for lose_answer in [false, true] {
        let mut rig = Rig::new(
            SimConfig::default(),
            QueueConfig::default().with_max_deliver(4),
            worker_config().with_nak_delay(Duration::from_millis(10)),
        )
        .await;
        // No cache: the redelivery fetches the page again, and is billed again.
        let job = pages(&shop_urls(1), "budget: {max_usd: 0.003}\n");
        let (id, slices) = rig.job(&job).await;
        if lose_answer {
            // Written, then the answer lost: the redelivery finds it written.
            rig.store.lose_answers.store(1, Ordering::SeqCst);
        } else {
            rig.store.lose_outcomes.store(1, Ordering::SeqCst);
        }
        rig.publish(&id, &slices[0]).await;
        rig.start();
        wait_settled(&rig, &id).await;
        rig.wait_for("the redelivery to be acked", |log| {
            log.iter().any(|e| matches!(e, Seen::Acked(_, 2)))
        })
        .await;
        rig.stop().await;

        assert_eq!(rig.sim.stats().ok, 2, "lose_answer={lose_answer}");
        assert_eq!(assert_ledger_matches_billing(&rig, &id).await, 2);
        let counts = rig.store.counts(&id).await.unwrap();
        assert_eq!(counts.upstream_calls, 2);
        assert_eq!(counts.items_valid, 1);
        assert_eq!(rig.store.items(&id).await.unwrap().len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_counts_the_billed_call_of_a_lost_outcome() {
    let mut rig = Rig::new(
        SimConfig::default(),
        QueueConfig::default().with_max_deliver(4),
        worker_config().with_nak_delay(Duration::from_millis(10)),
    )
    .await;
    // Room for one fetch and a half: the lost attempt's fetch was billed, so the
    // redelivery may not fetch again.
    let job = pages(&shop_urls(1), "budget: {max_usd: 0.00225}\n");
    let (id, slices) = rig.job(&job).await;
    rig.store.lose_outcomes.store(1, Ordering::SeqCst);
    rig.publish(&id, &slices[0]).await;
    rig.start();
    wait_settled(&rig, &id).await;
    rig.stop().await;

    assert_eq!(assert_ledger_matches_billing(&rig, &id).await, 1);
    let failed = rig.store.failed_slices(&id, 10).await.unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].error.code, "budget_exhausted");
    assert!(rig.store.items(&id).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_filled_by_a_lost_attempt_does_not_hide_its_billed_fetch() {
    let mut rig = Rig::new(
        SimConfig::default(),
        QueueConfig::default().with_max_deliver(4),
        worker_config().with_nak_delay(Duration::from_millis(10)),
    )
    .await;
    // Cached: the first attempt's fetch fills the cache, the redelivery reads it.
    let job = cached_pages(&shop_urls(1), "1h", "");
    let (id, slices) = rig.job(&job).await;
    rig.store.lose_outcomes.store(1, Ordering::SeqCst);
    rig.publish(&id, &slices[0]).await;
    rig.start();
    wait_settled(&rig, &id).await;
    rig.stop().await;

    assert_eq!(rig.sim.stats().ok, 1);
    assert_eq!(assert_ledger_matches_billing(&rig, &id).await, 1);
    let counts = rig.store.counts(&id).await.unwrap();
    assert_eq!((counts.items_valid, counts.cache_hits), (1, 1));
    let trace = rig.store.trace_page(&id, None, 10).await.unwrap();
    assert_eq!(trace.len(), 1);
    assert!(trace[0].cache_hit, "the recorded attempt read the cache");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costs_kept_while_the_store_is_down_are_written_when_it_returns() {
    let mut rig = Rig::new(
        SimConfig::default(),
        QueueConfig::default().with_max_deliver(10),
        worker_config().with_nak_delay(Duration::from_millis(10)),
    )
    .await;
    let job = pages(&shop_urls(1), "");
    let (id, slices) = rig.job(&job).await;
    rig.store.down.store(true, Ordering::SeqCst);
    rig.publish(&id, &slices[0]).await;
    rig.start();
    // Two attempts fetched and could not write: their costs are kept.
    rig.wait_for("two deliveries naked", |log| {
        log.iter().filter(|e| matches!(e, Seen::Naked(..))).count() >= 2
    })
    .await;
    assert!(rig.worker.unwritten_costs() >= 2);
    assert_eq!(rig.store.spent(&id).await.unwrap(), Micros(0));
    rig.store.down.store(false, Ordering::SeqCst);
    wait_settled(&rig, &id).await;
    rig.stop().await;

    let billed = assert_ledger_matches_billing(&rig, &id).await;
    assert!(billed >= 3, "{billed} billed calls");
    assert_eq!(rig.store.items(&id).await.unwrap().len(), 1);
}

// ---------------------------------------------------------------------------
// What the worker says under faults

/// The captured line that mentions `slice` and says `what`.
fn line_about(logs: &CapturedLogs, slice: &SliceId, what: &str) -> String {
    logs.lines_with(&[slice.as_str(), what])
        .pop()
        .unwrap_or_else(|| panic!("no line saying {what:?} about {slice}:\n{}", logs.text()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warnings_name_the_job_the_slice_and_the_step_that_failed() {
    let logs = CapturedLogs::install();
    let mut rig = Rig::new(
        SimConfig::default(),
        QueueConfig::default().with_max_deliver(4),
        worker_config().with_nak_delay(Duration::from_millis(10)),
    )
    .await;
    let (id, slices) = rig.job(&pages(&shop_urls(2), "")).await;
    let (lost, unannounced) = (slices[0].id.clone(), slices[1].id.clone());
    // The first slice's outcome is not written; the second's is written, but its
    // slice.finished cannot be emitted.
    rig.store.lose_outcomes.store(1, Ordering::SeqCst);
    rig.publish(&id, &slices[0]).await;
    rig.start();
    rig.wait_for("the first slice redelivered and acked", |log| {
        log.contains(&Seen::Acked(lost.clone(), 2))
    })
    .await;
    rig.events_fail.store(1, Ordering::SeqCst);
    rig.publish(&id, &slices[1]).await;
    rig.wait_for("the second slice redelivered and acked", |log| {
        log.contains(&Seen::Acked(unannounced.clone(), 2))
    })
    .await;
    rig.stop().await;

    let line = line_about(&logs, &lost, "delivering again later");
    assert!(line.contains("WARN"), "{line}");
    assert!(
        line.contains("slice not recorded; delivering again later"),
        "{line}"
    );
    assert!(line.contains(&format!("job_id={id}")), "{line}");
    assert!(line.contains("step=\"write outcome\""), "{line}");

    let line = line_about(&logs, &unannounced, "delivering again later");
    assert!(
        line.contains("slice recorded but not announced; delivering again later"),
        "{line}"
    );
    assert!(!line.contains("not recorded"), "{line}");
    assert!(line.contains(&format!("job_id={id}")), "{line}");
    assert!(line.contains("step=\"emit slice.finished\""), "{line}");
    // Each slice's items once.
    assert_eq!(rig.store.items(&id).await.unwrap().len(), 2);
}
