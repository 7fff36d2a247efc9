//! What every adapter of [`Store`] must do, as one suite of async tests over a
//! [`Fixture`]. `sqlite::tests` and `postgres::tests` each run the whole suite
//! against their store with [`suite!`], which names every test once, so a test
//! added here runs against every adapter.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use trawl_core::cost::Micros;
use trawl_core::geo::Geo;
use trawl_core::model::{
    AuditRecord, CostEntry, Engine, Item, ItemKind, JobCounts, JobId, JobStatus, Progress,
    Rejection, SliceError, SliceId, SliceKind, SliceOutcome, SliceSpec, SliceStatus, TraceStep,
    Violation,
};
use trawl_core::ports::{
    Approval, ApprovalNotice, ApprovalRecord, Artifact, CostMonth, EXPIRED_BY, GuardVerdict,
    Idempotency, JobOwner, JobRecord, MAX_ARTIFACT_BYTES, PLAN_BATCH, PinChange, PinStatus,
    PortError, RowCursor, Store, ToolListing, ToolPin,
};

/// A store under test, and ways to look at what it stored without its own methods.
#[async_trait]
pub(crate) trait Fixture: Send + Sync {
    fn store(&self) -> Arc<dyn Store>;
    /// The counts of a job computed from its stored rows themselves (slices, items,
    /// rejections, trace steps, costs), not from what the adapter keeps for
    /// `counts`.
    async fn recount(&self, job: &JobId) -> JobCounts;
    async fn slice_status(&self, job: &JobId, slice: &SliceId) -> SliceStatus;
}

/// Defines one `#[tokio::test]` per test of this suite, running it against every
/// fixture that `$fixtures().await` returns.
macro_rules! suite {
    ($fixtures:path) => {
        $crate::conformance::suite!(@tests $fixtures;
            a_created_job_reads_back_with_its_slices_pending,
            a_job_id_cannot_be_created_twice,
            an_outcome_is_written_once_and_a_redelivery_writes_nothing,
            costs_of_an_attempt_are_kept_once_whatever_the_slice_status,
            progress_is_kept_while_a_slice_runs_and_its_outcome_stores_it_once,
            one_slice_recorded_by_two_tasks_at_once_is_written_once,
            concurrent_outcomes_are_each_written_once,
            records_repeating_a_seq_are_stored_once,
            children_already_in_the_job_are_not_new,
            items_and_rejections_round_trip_in_slice_order,
            failed_slices_are_counted_and_listed,
            unknown_jobs_and_slices_are_not_found,
            a_job_moves_only_from_the_status_it_is_in,
            workers_report_and_are_listed_by_their_last_report,
            an_approval_is_replaced_while_pending_and_decided_once,
            approvals_are_listed_newest_first_and_read_by_id,
            a_job_of_100_000_slices_is_created,
            a_plan_of_many_batches_is_stored_in_one_go_and_paged_in_id_order,
            retention_deletes_what_is_past_in_batches_and_nothing_else,
            a_pending_job_is_planned_once,
            two_planners_of_one_job_plan_it_once,
            slices_to_publish_are_those_the_queue_has_not_got,
            jobs_with_status_are_listed_oldest_first,
            an_idempotency_key_names_one_job,
            a_plan_is_stored_in_batches_a_cancel_stops_and_a_replan_completes,
            a_tenants_usage_sums_its_jobs_by_day,
            pages_start_strictly_after_their_cursor,
            the_store_answers_a_ping,
            budget_reservations_are_shared_and_never_pass_the_maximum,
            a_job_ends_once,
            first_sight_pins_and_a_change_is_held_for_approval,
            a_rejected_change_stays_out_and_a_restore_closes_the_approval,
            a_new_tool_awaits_approval,
            audit_rows_are_written_with_outcomes_and_on_their_own,
            a_tool_call_is_approved_once_per_arguments,
            approvals_expire_and_their_jobs_are_cancelled_with_the_reason,
            an_approval_past_its_expiry_cannot_be_decided,
            approval_notices_are_claimed_once_and_kept_until_delivered,
            concurrent_claims_of_approval_notices_never_overlap,
            a_replaced_request_is_announced_again_only_when_it_changed,
            a_claimed_request_carries_its_expiry,
            slices_added_later_are_new_once_and_wait_to_be_published,
            artifacts_round_trip_and_are_listed_by_time_then_name_without_bytes,
            storing_an_artifact_name_again_replaces_it,
            an_artifact_over_the_limit_is_refused_and_nothing_is_stored,
            replays_are_stored_replaced_and_dropped,
            a_job_keeps_its_owner,
            embeddings_round_trip_bit_for_bit_by_model_and_key,
            saving_an_embedding_again_keeps_the_first,
            guard_verdicts_round_trip_and_are_replaced,
            a_tool_held_for_review_is_approved_or_rejected,
            a_server_listing_is_kept_byte_for_byte_and_replaced,
        );
    };
    (@tests $fixtures:path; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                for fixture in $fixtures().await {
                    $crate::conformance::$name(&fixture).await;
                }
            }
        )*
    };
}
pub(crate) use suite;

pub(crate) async fn a_plan_of_many_batches_is_stored_in_one_go_and_paged_in_id_order(
    f: &dyn Fixture,
) {
    let store = f.store();
    let job = JobRecord {
        status: JobStatus::Pending,
        ..job_record(1)
    };
    store.create_job(&job, &[]).await.unwrap();
    let n = 2 * PLAN_BATCH + 345;
    // Taken one at a time: the store never sees them all at once.
    let mut taken = 0;
    let mut plan = (0..n)
        .map(|i| search(&format!("query {i}")))
        .inspect(|_| taken += 1);
    assert!(
        store
            .plan_job(&job.id, &mut plan, JobStatus::Queued)
            .await
            .unwrap()
    );
    drop(plan);
    assert_eq!(taken, n);
    let counts = store.counts(&job.id).await.unwrap();
    assert_eq!(counts.slices_total, n as u64);
    assert_eq!(counts, f.recount(&job.id).await);
    // Pages of open slices: strictly after the cursor, in id order, all of them once.
    let mut seen: Vec<SliceId> = Vec::new();
    loop {
        let page = store
            .open_slices_page(&job.id, seen.last(), 1_000)
            .await
            .unwrap();
        assert!(page.len() <= 1_000);
        let done = page.len() < 1_000;
        seen.extend(page.into_iter().map(|s| s.id));
        if done {
            break;
        }
    }
    assert_eq!(seen.len(), n);
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "in id order, no repeats"
    );
    // A slice that ended is no longer open.
    let first = &seen[0];
    store
        .record_outcome(&job.id, first, &SliceOutcome::default())
        .await
        .unwrap();
    let page = store.open_slices_page(&job.id, None, 1).await.unwrap();
    assert_eq!(page[0].id, seen[1]);
}

// ---------------------------------------------------------------------------
// Records

pub(crate) fn geo(s: &str) -> Geo {
    Geo::parse(s).unwrap()
}

pub(crate) fn search(query: &str) -> SliceSpec {
    SliceSpec::new(
        SliceKind::Search {
            query: query.into(),
            geo: geo("us"),
            engine: Engine::Google,
            follow_top: 2,
        },
        None,
    )
}

pub(crate) fn page(url: &str, parent: &SliceSpec) -> SliceSpec {
    SliceSpec::new(
        SliceKind::Page {
            url: url.into(),
            geo: geo("de"),
        },
        Some(parent.id.clone()),
    )
}

pub(crate) fn job_record(n: u64) -> JobRecord {
    JobRecord {
        id: JobId::generate(1_700_000_000_000, 0xfeed_0000 + n),
        name: format!("job {n}"),
        spec: json!({"name": format!("job {n}"), "queries": ["a", "b"]}),
        status: JobStatus::Queued,
        reason: None,
        estimate: Micros(4_500),
        created_ms: 1_700_000_000_000,
        idempotency: None,
        traceparent: None,
        owner: None,
        retention_ms: None,
        slices_max: 0,
        approve_above: None,
    }
}

pub(crate) async fn new_job(store: &dyn Store, n: u64, slices: &[SliceSpec]) -> JobId {
    let job = job_record(n);
    store.create_job(&job, slices).await.unwrap();
    job.id
}

pub(crate) fn item(slice: &SliceSpec, seq: u32) -> Item {
    Item {
        slice_id: slice.id.clone(),
        seq,
        kind: ItemKind::Page,
        url: format!("https://shop.example/p/{seq}"),
        geo: geo("de"),
        data: json!({"title": format!("thing {seq}"), "price": {"amount": 9.99, "currency": "EUR"}}),
    }
}

pub(crate) fn rejection(slice: &SliceSpec, seq: u32) -> Rejection {
    Rejection {
        slice_id: slice.id.clone(),
        seq,
        url: format!("https://shop.example/bad/{seq}"),
        geo: geo("de"),
        data: json!({"title": null}),
        errors: vec![Violation {
            path: "/title".into(),
            message: "null is not of type \"string\"".into(),
        }],
    }
}

pub(crate) fn step(slice: &SliceSpec, seq: u32, cache_hit: bool) -> TraceStep {
    TraceStep {
        slice_id: slice.id.clone(),
        seq,
        tool: "brightdata.fetch".into(),
        args_digest: format!("{seq:064x}"),
        cache_hit,
        attempt: u32::from(!cache_hit),
        status: "ok".into(),
        error: None,
        latency_us: 12_345,
        cost: Micros(if cache_hit { 0 } else { 1_500 }),
        at_ms: 1_700_000_000_123,
        trace_id: None,
        span_id: None,
    }
}

/// A cost entry of the attempt `a`.
pub(crate) fn cost(slice: &SliceSpec, seq: u32, amount: i64) -> CostEntry {
    cost_of(slice, "a", seq, amount)
}

pub(crate) fn cost_of(slice: &SliceSpec, attempt: &str, seq: u32, amount: i64) -> CostEntry {
    CostEntry {
        slice_id: slice.id.clone(),
        attempt: attempt.into(),
        seq,
        product: "unlocker".into(),
        amount: Micros(amount),
    }
}

pub(crate) fn failure(code: &str) -> SliceOutcome {
    SliceOutcome {
        error: Some(SliceError {
            code: code.into(),
            message: format!("{code} happened"),
        }),
        ..SliceOutcome::default()
    }
}

fn sorted(mut slices: Vec<SliceSpec>) -> Vec<SliceSpec> {
    slices.sort_by(|a, b| a.id.cmp(&b.id));
    slices
}

fn ids(slices: &[SliceSpec]) -> Vec<SliceId> {
    slices.iter().map(|s| s.id.clone()).collect()
}

// ---------------------------------------------------------------------------
// Jobs and outcomes

pub(crate) async fn a_created_job_reads_back_with_its_slices_pending(f: &dyn Fixture) {
    let store = f.store();
    let slices = vec![search("laptop"), search("phone"), search("tablet")];
    let job = job_record(1);
    store.create_job(&job, &slices).await.unwrap();

    let back = store.job(&job.id).await.unwrap().unwrap();
    assert_eq!(back.id, job.id);
    assert_eq!(back.name, job.name);
    assert_eq!(back.spec, job.spec);
    assert_eq!(back.status, JobStatus::Queued);
    assert_eq!(back.reason, None);
    assert_eq!(back.estimate, Micros(4_500));
    assert_eq!(back.created_ms, job.created_ms);
    assert_eq!(back.idempotency, None);

    let counts = store.counts(&job.id).await.unwrap();
    assert_eq!(
        counts,
        JobCounts {
            slices_total: 3,
            ..JobCounts::default()
        }
    );
    assert_eq!(counts, f.recount(&job.id).await);
    assert_eq!(store.spent(&job.id).await.unwrap(), Micros::ZERO);
    assert_eq!(store.open_slices(&job.id).await.unwrap(), sorted(slices));

    let other = job_record(2).id;
    assert!(store.job(&other).await.unwrap().is_none());
    assert!(matches!(
        store.counts(&other).await,
        Err(PortError::NotFound(_))
    ));
    assert!(matches!(
        store.spent(&other).await,
        Err(PortError::NotFound(_))
    ));
}

pub(crate) async fn a_job_id_cannot_be_created_twice(f: &dyn Fixture) {
    let store = f.store();
    let id = new_job(&*store, 1, &[search("a")]).await;
    let again = store.create_job(&job_record(1), &[search("b")]).await;
    assert!(matches!(again, Err(PortError::Conflict(_))), "{again:?}");
    // All or nothing: the second call's slice is not there.
    assert_eq!(store.counts(&id).await.unwrap().slices_total, 1);
}

pub(crate) async fn an_outcome_is_written_once_and_a_redelivery_writes_nothing(f: &dyn Fixture) {
    let store = f.store();
    let root = search("laptop");
    let other = search("phone");
    let job = new_job(&*store, 1, &[root.clone(), other.clone()]).await;

    let children = vec![
        page("https://shop.example/p/0", &root),
        page("https://shop.example/p/1", &root),
    ];
    let outcome = SliceOutcome {
        audit: Vec::new(),
        items: vec![item(&root, 0), item(&root, 1)],
        rejections: vec![rejection(&root, 2)],
        trace: vec![
            step(&root, 0, false),
            step(&root, 1, false),
            step(&root, 2, true),
        ],
        costs: vec![cost(&root, 0, 1_500), cost(&root, 1, 2_500)],
        children: children.clone(),
        error: None,
    };
    let rec = store
        .record_outcome(&job, &root.id, &outcome)
        .await
        .unwrap();
    assert!(rec.written);
    assert_eq!(rec.new_children, children);

    let want = JobCounts {
        slices_total: 4,
        slices_succeeded: 1,
        slices_failed: 0,
        items_valid: 2,
        items_rejected: 1,
        upstream_calls: 2,
        cache_hits: 1,
        cost: Micros(4_000),
        budget_stops: 0,
    };
    assert_eq!(store.counts(&job).await.unwrap(), want);
    assert_eq!(f.recount(&job).await, want);
    assert_eq!(store.spent(&job).await.unwrap(), Micros(4_000));
    assert_eq!(f.slice_status(&job, &root.id).await, SliceStatus::Succeeded);
    let open = ids(&store.open_slices(&job).await.unwrap());
    assert_eq!(open.len(), 3);
    assert!(!open.contains(&root.id));

    // A redelivery with a different (failed, bigger) outcome writes nothing but
    // the costs of its attempt: those calls were billed too.
    let mut again = failure("timeout");
    again.items = vec![item(&root, 5)];
    again.trace = vec![step(&root, 0, false), step(&root, 1, true)];
    again.costs = vec![cost_of(&root, "b", 0, 99_000)];
    again.children = vec![page("https://shop.example/p/9", &root)];
    let rec = store.record_outcome(&job, &root.id, &again).await.unwrap();
    assert!(!rec.written);
    assert!(rec.new_children.is_empty());
    let billed = JobCounts {
        upstream_calls: want.upstream_calls + 1,
        cost: Micros(103_000),
        ..want
    };
    assert_eq!(store.counts(&job).await.unwrap(), billed);
    // Its trace is not stored: only its call is counted.
    assert_eq!(
        f.recount(&job).await,
        JobCounts {
            cost: billed.cost,
            ..want
        }
    );
    assert_eq!(store.spent(&job).await.unwrap(), Micros(103_000));
    assert_eq!(store.items(&job).await.unwrap(), outcome.items);
    assert_eq!(f.slice_status(&job, &root.id).await, SliceStatus::Succeeded);

    // Both outcomes written again (a write whose answer was lost) change nothing.
    for o in [&outcome, &again] {
        let rec = store.record_outcome(&job, &root.id, o).await.unwrap();
        assert!(!rec.written);
    }
    assert_eq!(store.counts(&job).await.unwrap(), billed);
    assert_eq!(store.spent(&job).await.unwrap(), Micros(103_000));
}

pub(crate) async fn costs_of_an_attempt_are_kept_once_whatever_the_slice_status(f: &dyn Fixture) {
    let store = f.store();
    let s = search("billed");
    let job = new_job(&*store, 1, std::slice::from_ref(&s)).await;

    // An attempt that failed transiently (delivered again): its costs alone.
    let first = vec![cost_of(&s, "x", 0, 1_500), cost_of(&s, "x", 1, 2_500)];
    assert_eq!(store.record_costs(&job, &s.id, &first, 3).await.unwrap(), 2);
    let after_first = JobCounts {
        slices_total: 1,
        upstream_calls: 3,
        cost: Micros(4_000),
        ..JobCounts::default()
    };
    assert_eq!(store.counts(&job).await.unwrap(), after_first);
    assert_eq!(f.slice_status(&job, &s.id).await, SliceStatus::Pending);
    // Written again (kept while the store was down, or an answer lost): nothing new.
    assert_eq!(store.record_costs(&job, &s.id, &first, 3).await.unwrap(), 0);
    assert_eq!(store.counts(&job).await.unwrap(), after_first);

    // The next attempt's outcome: its rows under its own key, the same seqs.
    let outcome = SliceOutcome {
        items: vec![item(&s, 0)],
        trace: vec![step(&s, 0, false)],
        costs: vec![cost_of(&s, "y", 0, 1_500)],
        ..SliceOutcome::default()
    };
    assert!(
        store
            .record_outcome(&job, &s.id, &outcome)
            .await
            .unwrap()
            .written
    );
    let done = JobCounts {
        slices_succeeded: 1,
        items_valid: 1,
        upstream_calls: 4,
        cost: Micros(5_500),
        ..after_first
    };
    assert_eq!(store.counts(&job).await.unwrap(), done);
    assert_eq!(store.spent(&job).await.unwrap(), Micros(5_500));
    assert_eq!(f.recount(&job).await.cost, Micros(5_500));

    // An attempt that ends after the slice did: its costs still go in.
    let late = vec![cost_of(&s, "z", 0, 500)];
    assert_eq!(store.record_costs(&job, &s.id, &late, 1).await.unwrap(), 1);
    assert_eq!(store.spent(&job).await.unwrap(), Micros(6_000));
    assert_eq!(store.counts(&job).await.unwrap().cost, Micros(6_000));
    assert_eq!(store.counts(&job).await.unwrap().upstream_calls, 5);

    // Nothing to write; an unknown slice.
    assert_eq!(store.record_costs(&job, &s.id, &[], 0).await.unwrap(), 0);
    let nowhere = search("nowhere");
    assert!(matches!(
        store
            .record_costs(&job, &nowhere.id, &[cost_of(&nowhere, "x", 0, 1)], 1)
            .await,
        Err(PortError::NotFound(_))
    ));
    assert_eq!(store.spent(&job).await.unwrap(), Micros(6_000));
}

pub(crate) async fn progress_is_kept_while_a_slice_runs_and_its_outcome_stores_it_once(
    f: &dyn Fixture,
) {
    let store = f.store();
    let s = search("turns");
    let job = new_job(&*store, 1, std::slice::from_ref(&s)).await;
    assert!(store.progress(&job, &s.id).await.unwrap().is_none());

    // Two saves, as after two turns: the second repeats a seq (kept as first
    // saved) and replaces the state.
    let first = Progress {
        trace: vec![step(&s, 0, false), step(&s, 1, true)],
        costs: vec![cost(&s, 0, 1_500)],
        audit: vec![audit(Some(&job), Some(&s.id), 0, "allow")],
        state: Some(json!({"turn": 1, "messages": ["q"]})),
    };
    store.save_progress(&job, &s.id, &first).await.unwrap();
    let mut changed = step(&s, 1, false);
    changed.tool = "changed".into();
    let second = Progress {
        trace: vec![changed, step(&s, 2, false)],
        costs: vec![cost(&s, 2, 2_500)],
        audit: Vec::new(),
        state: Some(json!({"turn": 2, "messages": ["q", "a"]})),
    };
    store.save_progress(&job, &s.id, &second).await.unwrap();
    // Rows alone keep the state saved last.
    let rows_only = Progress {
        audit: vec![audit(Some(&job), Some(&s.id), 1, "deny")],
        ..Progress::default()
    };
    store.save_progress(&job, &s.id, &rows_only).await.unwrap();
    let saved = store.progress(&job, &s.id).await.unwrap().unwrap();
    assert_eq!(
        saved.trace,
        vec![step(&s, 0, false), step(&s, 1, true), step(&s, 2, false)]
    );
    assert_eq!(saved.costs, vec![cost(&s, 0, 1_500), cost(&s, 2, 2_500)]);
    assert_eq!(
        saved.audit,
        vec![
            audit(Some(&job), Some(&s.id), 0, "allow"),
            audit(Some(&job), Some(&s.id), 1, "deny"),
        ]
    );
    assert_eq!(
        saved.state,
        Some(json!({"turn": 2, "messages": ["q", "a"]}))
    );
    assert_eq!(f.slice_status(&job, &s.id).await, SliceStatus::Pending);

    // The outcome carries the saved rows again, and one more turn's.
    let outcome = SliceOutcome {
        trace: [saved.trace.clone(), vec![step(&s, 3, false)]].concat(),
        costs: [saved.costs.clone(), vec![cost(&s, 3, 500)]].concat(),
        audit: saved.audit.clone(),
        ..SliceOutcome::default()
    };
    assert!(
        store
            .record_outcome(&job, &s.id, &outcome)
            .await
            .unwrap()
            .written
    );
    let want = JobCounts {
        slices_total: 1,
        slices_succeeded: 1,
        upstream_calls: 3,
        cache_hits: 1,
        cost: Micros(4_500),
        ..JobCounts::default()
    };
    assert_eq!(store.counts(&job).await.unwrap(), want);
    assert_eq!(f.recount(&job).await, want);
    let trace = store.trace_page(&job, None, 10).await.unwrap();
    assert_eq!(trace, outcome.trace);

    // A slice that has ended takes no more progress.
    let late = Progress {
        trace: vec![step(&s, 9, false)],
        costs: vec![cost(&s, 9, 99_000)],
        state: Some(json!({"turn": 9})),
        ..Progress::default()
    };
    store.save_progress(&job, &s.id, &late).await.unwrap();
    assert_eq!(store.counts(&job).await.unwrap(), want);
    let after = store.progress(&job, &s.id).await.unwrap().unwrap();
    assert_eq!(after.trace, outcome.trace);
    assert_eq!(
        after.state,
        Some(json!({"turn": 2, "messages": ["q", "a"]}))
    );
}

pub(crate) async fn one_slice_recorded_by_two_tasks_at_once_is_written_once(f: &dyn Fixture) {
    let store = f.store();
    let slices: Vec<SliceSpec> = (0..20).map(|i| search(&format!("race {i}"))).collect();
    let job = new_job(&*store, 1, &slices).await;
    for s in &slices {
        let a = SliceOutcome {
            items: vec![item(s, 0), item(s, 1)],
            trace: vec![step(s, 0, false)],
            costs: vec![cost(s, 0, 1_500)],
            children: vec![page(&format!("https://shop.example/{}", s.id), s)],
            ..SliceOutcome::default()
        };
        // The other task's outcome differs, to see whose was kept.
        let b = SliceOutcome {
            items: vec![item(s, 7)],
            ..failure("timeout")
        };
        let calls: Vec<_> = [a.clone(), b.clone()]
            .into_iter()
            .map(|outcome| {
                let (store, job, id) = (store.clone(), job.clone(), s.id.clone());
                tokio::spawn(async move { store.record_outcome(&job, &id, &outcome).await })
            })
            .collect();
        let mut answers = Vec::new();
        for call in calls {
            answers.push(call.await.unwrap().unwrap());
        }
        let written: Vec<usize> = (0..2).filter(|&i| answers[i].written).collect();
        assert_eq!(written.len(), 1, "exactly one of two writes: {answers:?}");
        let winner = if written[0] == 0 { &a } else { &b };
        assert_eq!(answers[written[0]].new_children, winner.children);
        assert!(answers[1 - written[0]].new_children.is_empty());
        let stored: Vec<Item> = store
            .items(&job)
            .await
            .unwrap()
            .into_iter()
            .filter(|i| i.slice_id == s.id)
            .collect();
        assert_eq!(stored, winner.items);
        assert_eq!(f.slice_status(&job, &s.id).await, winner.status());
    }
    let counts = store.counts(&job).await.unwrap();
    assert_eq!(counts.slices_open(), counts.slices_total - 20);
    // The call behind `a` was billed whichever outcome was kept: its cost and
    // its call are counted either way (its trace step only when it was kept).
    assert_eq!(counts.cost, Micros(20 * 1_500));
    assert_eq!(counts.upstream_calls, 20);
    let recount = f.recount(&job).await;
    assert_eq!(
        JobCounts {
            upstream_calls: counts.upstream_calls,
            ..recount
        },
        counts
    );
}

pub(crate) async fn concurrent_outcomes_are_each_written_once(f: &dyn Fixture) {
    let store = f.store();
    let slices: Vec<SliceSpec> = (0..100).map(|i| search(&format!("q{i}"))).collect();
    let job = new_job(&*store, 1, &slices).await;
    // Every slice is recorded twice at once; neighbours share a child.
    let mut calls = Vec::new();
    for (i, s) in slices.iter().enumerate() {
        let shared = page(&format!("https://shop.example/shared/{}", i / 2), s);
        let outcome = SliceOutcome {
            items: vec![item(s, 0)],
            trace: vec![step(s, 0, false), step(s, 1, true)],
            costs: vec![cost(s, 0, 1_500)],
            children: vec![shared],
            ..SliceOutcome::default()
        };
        for _ in 0..2 {
            let (store, job, id, outcome) =
                (store.clone(), job.clone(), s.id.clone(), outcome.clone());
            calls.push(tokio::spawn(async move {
                (
                    id.clone(),
                    store.record_outcome(&job, &id, &outcome).await.unwrap(),
                )
            }));
        }
    }
    let mut written = HashSet::new();
    let mut children = Vec::new();
    for call in calls {
        let (id, rec) = call.await.unwrap();
        if rec.written {
            assert!(written.insert(id), "a slice was written twice");
        } else {
            assert!(rec.new_children.is_empty());
        }
        children.extend(rec.new_children.into_iter().map(|c| c.id));
    }
    assert_eq!(written.len(), 100);
    let distinct: HashSet<_> = children.iter().cloned().collect();
    assert_eq!(children.len(), 50, "each shared child is new exactly once");
    assert_eq!(distinct.len(), 50);

    let want = JobCounts {
        slices_total: 150,
        slices_succeeded: 100,
        items_valid: 100,
        upstream_calls: 100,
        cache_hits: 100,
        cost: Micros(150_000),
        ..JobCounts::default()
    };
    assert_eq!(store.counts(&job).await.unwrap(), want);
    assert_eq!(f.recount(&job).await, want);
}

pub(crate) async fn records_repeating_a_seq_are_stored_once(f: &dyn Fixture) {
    let store = f.store();
    let s = search("repeats");
    let job = new_job(&*store, 1, std::slice::from_ref(&s)).await;
    let mut second = item(&s, 0);
    second.url = "https://shop.example/second".into();
    let child = page("https://shop.example/child", &s);
    let outcome = SliceOutcome {
        audit: Vec::new(),
        items: vec![item(&s, 0), second, item(&s, 1)],
        rejections: vec![rejection(&s, 0), rejection(&s, 0)],
        trace: vec![step(&s, 0, false), step(&s, 0, true), step(&s, 1, true)],
        costs: vec![cost(&s, 0, 1_500), cost(&s, 0, 99_999)],
        children: vec![child.clone(), child.clone()],
        error: None,
    };
    let rec = store.record_outcome(&job, &s.id, &outcome).await.unwrap();
    assert_eq!(rec.new_children, vec![child]);
    // The first record of each seq is kept.
    assert_eq!(
        store.items(&job).await.unwrap(),
        vec![item(&s, 0), item(&s, 1)]
    );
    let want = JobCounts {
        slices_total: 2,
        slices_succeeded: 1,
        items_valid: 2,
        items_rejected: 1,
        upstream_calls: 1,
        cache_hits: 1,
        cost: Micros(1_500),
        ..JobCounts::default()
    };
    assert_eq!(store.counts(&job).await.unwrap(), want);
    assert_eq!(f.recount(&job).await, want);
    assert_eq!(store.spent(&job).await.unwrap(), Micros(1_500));
}

pub(crate) async fn children_already_in_the_job_are_not_new(f: &dyn Fixture) {
    let store = f.store();
    let a = search("a");
    let b = search("b");
    let job = new_job(&*store, 1, &[a.clone(), b.clone()]).await;
    let c = page("https://shop.example/c", &a);
    let outcome = SliceOutcome {
        // b is planned already; c is listed twice.
        children: vec![b.clone(), c.clone(), c.clone()],
        ..SliceOutcome::default()
    };
    let rec = store.record_outcome(&job, &a.id, &outcome).await.unwrap();
    assert_eq!(rec.new_children, vec![c.clone()]);
    assert_eq!(store.counts(&job).await.unwrap().slices_total, 3);

    // A child that another slice added earlier is not new either.
    let d = page("https://shop.example/d", &b);
    let outcome = SliceOutcome {
        children: vec![c.clone(), d.clone()],
        ..SliceOutcome::default()
    };
    let rec = store.record_outcome(&job, &b.id, &outcome).await.unwrap();
    assert_eq!(rec.new_children, vec![d]);
    let counts = store.counts(&job).await.unwrap();
    assert_eq!(counts.slices_total, 4);
    assert_eq!(counts, f.recount(&job).await);
}

pub(crate) async fn items_and_rejections_round_trip_in_slice_order(f: &dyn Fixture) {
    let store = f.store();
    let slices = vec![search("one"), search("two"), search("three")];
    let job = new_job(&*store, 1, &slices).await;
    // Written in reverse slice order, seqs out of order within a slice.
    for s in slices.iter().rev() {
        let outcome = SliceOutcome {
            items: vec![item(s, 2), item(s, 0), item(s, 1)],
            rejections: vec![rejection(s, 4), rejection(s, 3)],
            ..SliceOutcome::default()
        };
        store.record_outcome(&job, &s.id, &outcome).await.unwrap();
    }
    let slices = sorted(slices);
    let want_items: Vec<Item> = slices
        .iter()
        .flat_map(|s| (0..3).map(|i| item(s, i)))
        .collect();
    let want_rejections: Vec<Rejection> = slices
        .iter()
        .flat_map(|s| (3..5).map(|i| rejection(s, i)))
        .collect();
    assert_eq!(store.items(&job).await.unwrap(), want_items);
    assert_eq!(store.rejections(&job).await.unwrap(), want_rejections);
}

pub(crate) async fn failed_slices_are_counted_and_listed(f: &dyn Fixture) {
    let store = f.store();
    let a = search("budget");
    let root = search("root");
    let b = page("https://shop.example/x", &root);
    let ok = search("fine");
    let job = new_job(&*store, 1, &[a.clone(), b.clone(), ok.clone()]).await;

    store
        .record_outcome(&job, &a.id, &failure("budget_exhausted"))
        .await
        .unwrap();
    store
        .record_outcome(&job, &b.id, &failure("http_429"))
        .await
        .unwrap();
    store
        .record_outcome(&job, &ok.id, &SliceOutcome::default())
        .await
        .unwrap();

    let counts = store.counts(&job).await.unwrap();
    assert_eq!(counts.slices_failed, 2);
    assert_eq!(counts.slices_succeeded, 1);
    assert_eq!(counts.budget_stops, 1);
    assert_eq!(counts.slices_open(), 0);
    assert_eq!(counts, f.recount(&job).await);

    let failed = store.failed_slices(&job, 10).await.unwrap();
    assert_eq!(failed.len(), 2);
    let fa = failed.iter().find(|f| f.slice_id == a.id).unwrap();
    assert_eq!(
        (fa.kind.as_str(), fa.subject.as_str(), fa.geo.as_str()),
        ("search", "budget", "us")
    );
    assert_eq!(fa.error.code, "budget_exhausted");
    assert_eq!(fa.error.message, "budget_exhausted happened");
    let fb = failed.iter().find(|f| f.slice_id == b.id).unwrap();
    assert_eq!(
        (fb.kind.as_str(), fb.subject.as_str(), fb.geo.as_str()),
        ("page", "https://shop.example/x", "de")
    );
    assert_eq!(fb.error.code, "http_429");
    assert_eq!(store.failed_slices(&job, 1).await.unwrap().len(), 1);
}

pub(crate) async fn unknown_jobs_and_slices_are_not_found(f: &dyn Fixture) {
    let store = f.store();
    let a = search("a");
    let job = new_job(&*store, 1, std::slice::from_ref(&a)).await;
    let stranger = search("never planned");
    assert!(matches!(
        store
            .record_outcome(&job, &stranger.id, &SliceOutcome::default())
            .await,
        Err(PortError::NotFound(_))
    ));
    let nobody = job_record(9).id;
    assert!(matches!(
        store
            .record_outcome(&nobody, &a.id, &SliceOutcome::default())
            .await,
        Err(PortError::NotFound(_))
    ));
    assert!(matches!(
        store
            .move_job(&nobody, JobStatus::Queued, JobStatus::Running)
            .await,
        Err(PortError::NotFound(_))
    ));
    assert!(matches!(
        store
            .request_approval(&Approval {
                job_id: nobody.clone(),
                amount: Micros(1),
                reason: "x".into(),
                approved: None,
                decided_by: None,
            })
            .await,
        Err(PortError::NotFound(_))
    ));
    assert!(matches!(
        store
            .plan_job(&nobody, &mut [search("b")].into_iter(), JobStatus::Queued)
            .await,
        Err(PortError::NotFound(_))
    ));
    assert_eq!(store.counts(&job).await.unwrap(), f.recount(&job).await);
    assert_eq!(store.counts(&job).await.unwrap().slices_total, 1);
}

pub(crate) async fn a_job_moves_only_from_the_status_it_is_in(f: &dyn Fixture) {
    let store = f.store();
    let job = new_job(&*store, 1, &[]).await;
    // It is queued, not pending: nothing moves.
    assert!(
        !store
            .move_job(&job, JobStatus::Pending, JobStatus::Running)
            .await
            .unwrap()
    );
    assert_eq!(
        store.job(&job).await.unwrap().unwrap().status,
        JobStatus::Queued
    );
    assert!(
        store
            .move_job(&job, JobStatus::Queued, JobStatus::Running)
            .await
            .unwrap()
    );
    assert_eq!(
        store.job(&job).await.unwrap().unwrap().status,
        JobStatus::Running
    );
    // A job ends only by end_job: a terminal status is refused and nothing moves.
    assert!(matches!(
        store
            .move_job(&job, JobStatus::Running, JobStatus::Succeeded)
            .await,
        Err(PortError::Corrupt(_))
    ));
    // A cancel is never overwritten by a move.
    assert!(
        store
            .end_job(&job, JobStatus::Cancelled, Some("asked to"))
            .await
            .unwrap()
    );
    assert!(
        !store
            .move_job(&job, JobStatus::Running, JobStatus::Queued)
            .await
            .unwrap()
    );
    let back = store.job(&job).await.unwrap().unwrap();
    assert_eq!(back.status, JobStatus::Cancelled);
    assert_eq!(back.reason.as_deref(), Some("asked to"));
}

pub(crate) async fn workers_report_and_are_listed_by_their_last_report(f: &dyn Fixture) {
    use trawl_core::model::Pool;
    use trawl_core::workers::{Capabilities, ModelProviders, WorkerInfo};
    let store = f.store();
    let report = |id: &str, pool, at| WorkerInfo {
        id: id.into(),
        pool,
        capabilities: Capabilities {
            models: ModelProviders {
                anthropic: pool == Pool::Standard,
                openai: false,
                default_model: Some("claude-x".into()),
            },
            browser: pool == Pool::Isolated,
        },
        concurrency: 8,
        started_ms: 1_000,
        heartbeat_ms: at,
    };
    let a = report("host-a/1/1000", Pool::Standard, 5_000);
    let b = report("host-b/2/1000", Pool::Isolated, 6_000);
    store.report_worker(&a).await.unwrap();
    store.report_worker(&b).await.unwrap();
    assert_eq!(store.workers(0).await.unwrap(), vec![b.clone(), a.clone()]);
    // A report replaces the worker's earlier one; its start stays.
    let a2 = WorkerInfo {
        heartbeat_ms: 9_000,
        concurrency: 2,
        started_ms: 4_000,
        ..a.clone()
    };
    store.report_worker(&a2).await.unwrap();
    let listed = store.workers(0).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].id, a.id);
    assert_eq!(listed[0].heartbeat_ms, 9_000);
    assert_eq!(listed[0].concurrency, 2);
    assert_eq!(listed[0].started_ms, 1_000);
    assert_eq!(listed[0].capabilities, a.capabilities);
    // Only those that reported since.
    assert_eq!(store.workers(6_001).await.unwrap().len(), 1);
    assert!(store.workers(9_001).await.unwrap().is_empty());
}

pub(crate) async fn a_job_of_100_000_slices_is_created(f: &dyn Fixture) {
    let store = f.store();
    let slices: Vec<SliceSpec> = (0..100_000)
        .map(|i| search(&format!("query {i}")))
        .collect();
    let job = new_job(&*store, 1, &slices).await;
    let counts = store.counts(&job).await.unwrap();
    assert_eq!(counts.slices_total, 100_000);
    assert_eq!(counts, f.recount(&job).await);
    assert_eq!(store.open_slices(&job).await.unwrap().len(), 100_000);
    let first = store.slices_to_publish(&job, 0, 1_000).await.unwrap();
    assert_eq!(first.len(), 1_000);
    assert!(first.windows(2).all(|w| w[0].id < w[1].id));
}

// ---------------------------------------------------------------------------
// Approvals

fn ask(job: &JobId, amount: i64, reason: &str) -> Approval {
    Approval {
        job_id: job.clone(),
        amount: Micros(amount),
        reason: reason.into(),
        approved: None,
        decided_by: None,
    }
}

pub(crate) async fn an_approval_is_replaced_while_pending_and_decided_once(f: &dyn Fixture) {
    let store = f.store();
    let job = new_job(&*store, 1, &[]).await;
    assert_eq!(
        store.decide_approval(&job, true, "alice").await.unwrap(),
        None
    );

    store
        .request_approval(&ask(&job, 5_000, "first"))
        .await
        .unwrap();
    store
        .request_approval(&ask(&job, 7_000, "second"))
        .await
        .unwrap();

    let decided = store.decide_approval(&job, true, "alice").await.unwrap();
    assert_eq!(
        decided,
        Some(Approval {
            approved: Some(true),
            decided_by: Some("alice".into()),
            ..ask(&job, 7_000, "second")
        })
    );
    assert_eq!(
        store.decide_approval(&job, false, "bob").await.unwrap(),
        None
    );

    // A new request after a decision is pending again.
    store
        .request_approval(&ask(&job, 9_000, "more"))
        .await
        .unwrap();
    let decided = store.decide_approval(&job, false, "bob").await.unwrap();
    assert_eq!(
        decided.map(|a| (a.amount, a.approved)),
        Some((Micros(9_000), Some(false)))
    );

    let all = store.approvals(false, 100).await.unwrap();
    assert_eq!(all.len(), 2, "the replaced request is not kept: {all:?}");
}

pub(crate) async fn approvals_are_listed_newest_first_and_read_by_id(f: &dyn Fixture) {
    let store = f.store();
    let (a, b, c) = (
        new_job(&*store, 1, &[]).await,
        new_job(&*store, 2, &[]).await,
        new_job(&*store, 3, &[]).await,
    );
    assert!(store.approvals(false, 10).await.unwrap().is_empty());
    // Requests a few milliseconds apart, so their times differ.
    let before = trawl_core::model::now_ms();
    for (job, amount) in [(&a, 1_000), (&b, 2_000), (&c, 3_000)] {
        store
            .request_approval(&ask(job, amount, "over budget"))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    store.decide_approval(&b, true, "alice").await.unwrap();

    let all = store.approvals(false, 10).await.unwrap();
    let jobs: Vec<&JobId> = all.iter().map(|r| r.job_id.as_ref().unwrap()).collect();
    assert_eq!(jobs, vec![&c, &b, &a]);
    let pending = store.approvals(true, 10).await.unwrap();
    let jobs: Vec<&JobId> = pending.iter().map(|r| r.job_id.as_ref().unwrap()).collect();
    assert_eq!(jobs, vec![&c, &a]);
    assert_eq!(store.pending_approvals().await.unwrap(), 2);
    assert_eq!(store.approvals(false, 1).await.unwrap().len(), 1);
    assert!(store.approvals(false, 0).await.unwrap().is_empty());

    let rb = all.iter().find(|r| r.job_id.as_ref() == Some(&b)).unwrap();
    assert_eq!(rb.kind, "job_budget");
    assert_eq!(rb.amount, Micros(2_000));
    assert_eq!(rb.reason, "over budget");
    assert_eq!(rb.approved, Some(true));
    assert_eq!(rb.decided_by.as_deref(), Some("alice"));
    assert!(rb.requested_ms >= before);
    assert!(rb.decided_ms.is_some_and(|d| d >= rb.requested_ms));
    assert_eq!(store.approval(rb.id).await.unwrap().as_ref(), Some(rb));

    let ra = store.approval(all[2].id).await.unwrap().unwrap();
    assert_eq!(ra.job_id.as_ref(), Some(&a));
    assert_eq!(ra.approved, None);
    assert_eq!(ra.decided_by, None);
    assert_eq!(ra.decided_ms, None);
    let ids: HashSet<i64> = all.iter().map(|r| r.id).collect();
    assert_eq!(ids.len(), 3);
    // Random ids, not a count a caller could walk through.
    assert!(
        ids.iter()
            .all(|id| *id >= trawl_core::model::APPROVAL_ID_MIN && *id < 1 << 53),
        "{ids:?}"
    );
    let unknown = ids.iter().max().unwrap() + 1_000;
    assert_eq!(store.approval(unknown).await.unwrap(), None);

    // A pending request asked again is newest again.
    store
        .request_approval(&ask(&a, 1_500, "asked again"))
        .await
        .unwrap();
    let newest = &store.approvals(true, 1).await.unwrap()[0];
    assert_eq!(
        (newest.job_id.as_ref().unwrap(), newest.id, newest.amount),
        (&a, ra.id, Micros(1_500))
    );
}

pub(crate) async fn a_job_keeps_its_owner(f: &dyn Fixture) {
    let store = f.store();
    let owner = JobOwner {
        caller: "sub:alice".into(),
        client: Some("reporting-app".into()),
        tenant: Some("org-1".into()),
    };
    let owned = JobRecord {
        owner: Some(owner.clone()),
        ..job_record(1)
    };
    store.create_job(&owned, &[]).await.unwrap();
    let back = store.job(&owned.id).await.unwrap().unwrap();
    assert_eq!(back.owner, Some(owner));
    let bare = JobRecord {
        owner: Some(JobOwner {
            caller: "key:ci".into(),
            client: None,
            tenant: None,
        }),
        ..job_record(2)
    };
    store.create_job(&bare, &[]).await.unwrap();
    let back = store.job(&bare.id).await.unwrap().unwrap();
    assert_eq!(back.owner, bare.owner);
    // A job of `trawl run` has none.
    let none = job_record(3);
    store.create_job(&none, &[]).await.unwrap();
    assert_eq!(store.job(&none.id).await.unwrap().unwrap().owner, None);
}

// ---------------------------------------------------------------------------
// Planning, publication, listing

pub(crate) async fn a_pending_job_is_planned_once(f: &dyn Fixture) {
    let store = f.store();
    let job = JobRecord {
        status: JobStatus::Pending,
        ..job_record(1)
    };
    store.create_job(&job, &[]).await.unwrap();
    assert_eq!(store.counts(&job.id).await.unwrap().slices_total, 0);
    assert!(store.open_slices(&job.id).await.unwrap().is_empty());

    let slices = vec![search("a"), search("b")];
    assert!(
        store
            .plan_job(
                &job.id,
                &mut slices.clone().into_iter(),
                JobStatus::AwaitingApproval
            )
            .await
            .unwrap()
    );
    let back = store.job(&job.id).await.unwrap().unwrap();
    assert_eq!(back.status, JobStatus::AwaitingApproval);
    assert_eq!(
        store.open_slices(&job.id).await.unwrap(),
        sorted(slices.clone())
    );
    let counts = store.counts(&job.id).await.unwrap();
    assert_eq!(counts.slices_total, 2);
    assert_eq!(counts, f.recount(&job.id).await);
    // Planned slices count as published when planned: not "never published"...
    let planned_at = back.created_ms.max(0);
    assert!(
        store
            .slices_to_publish(&job.id, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // ...and stale once the bound passes their planning time.
    let later = trawl_core::model::now_ms() + 1;
    assert!(later > planned_at);
    assert_eq!(
        store.slices_to_publish(&job.id, later, 10).await.unwrap(),
        sorted(slices)
    );

    // No longer pending: planning again writes nothing.
    assert!(
        !store
            .plan_job(&job.id, &mut [search("c")].into_iter(), JobStatus::Queued)
            .await
            .unwrap()
    );
    let back = store.job(&job.id).await.unwrap().unwrap();
    assert_eq!(back.status, JobStatus::AwaitingApproval);
    assert_eq!(store.counts(&job.id).await.unwrap().slices_total, 2);

    // A job stored planned (`trawl run`) is not pending either.
    let queued = new_job(&*store, 2, &[search("x")]).await;
    assert!(
        !store
            .plan_job(&queued, &mut [search("y")].into_iter(), JobStatus::Running)
            .await
            .unwrap()
    );
    assert_eq!(
        store.job(&queued).await.unwrap().unwrap().status,
        JobStatus::Queued
    );
    assert_eq!(store.counts(&queued).await.unwrap().slices_total, 1);
}

pub(crate) async fn two_planners_of_one_job_plan_it_once(f: &dyn Fixture) {
    let store = f.store();
    for n in 0..5 {
        let job = JobRecord {
            status: JobStatus::Pending,
            ..job_record(n)
        };
        store.create_job(&job, &[]).await.unwrap();
        // Planners of one job plan the same slices (from one stored spec).
        let plan = vec![search("one"), search("two"), search("three")];
        let plans = [plan.clone(), plan];
        let calls: Vec<_> = plans
            .iter()
            .map(|slices| {
                let (store, id, slices) = (store.clone(), job.id.clone(), slices.clone());
                tokio::spawn(async move {
                    store
                        .plan_job(&id, &mut slices.into_iter(), JobStatus::Queued)
                        .await
                })
            })
            .collect();
        let mut planned = Vec::new();
        for call in calls {
            planned.push(call.await.unwrap().unwrap());
        }
        let winners: Vec<usize> = (0..2).filter(|&i| planned[i]).collect();
        assert_eq!(winners.len(), 1, "{planned:?}");
        assert_eq!(
            store.open_slices(&job.id).await.unwrap(),
            sorted(plans[winners[0]].clone())
        );
        // Each slice counted once, however the two planners' batches met.
        assert_eq!(store.counts(&job.id).await.unwrap().slices_total, 3);
        assert_eq!(
            store.counts(&job.id).await.unwrap(),
            f.recount(&job.id).await
        );
    }
}

pub(crate) async fn slices_added_later_are_new_once_and_wait_to_be_published(f: &dyn Fixture) {
    let store = f.store();
    let first = search("q0");
    let job = new_job(&*store, 1, std::slice::from_ref(&first)).await;
    store
        .mark_published(&job, &ids(std::slice::from_ref(&first)), 1_000)
        .await
        .unwrap();
    let report = SliceSpec::new(
        SliceKind::Report {
            question: "which shops?".into(),
            geo: geo("de"),
        },
        Some(first.id.clone()),
    );
    assert_eq!(
        store
            .add_slices(&job, std::slice::from_ref(&report))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .add_slices(&job, &[report.clone(), first.clone()])
            .await
            .unwrap(),
        0,
        "ids the job has are skipped"
    );
    // Pending and never published: the next publication pass takes it.
    assert_eq!(
        store.slices_to_publish(&job, 0, 10).await.unwrap(),
        std::slice::from_ref(&report)
    );
    let open = store.open_slices(&job).await.unwrap();
    assert!(open.contains(&report) && open.contains(&first));
    assert_eq!(store.counts(&job).await.unwrap().slices_total, 2);
}

pub(crate) async fn slices_to_publish_are_those_the_queue_has_not_got(f: &dyn Fixture) {
    let store = f.store();
    let slices = sorted((0..5).map(|i| search(&format!("q{i}"))).collect());
    let job = new_job(&*store, 1, &slices).await;
    let other_slice = search("another job's");
    let other = new_job(&*store, 2, std::slice::from_ref(&other_slice)).await;
    let to_publish = |stale_before: i64, limit: u32| {
        let (store, job) = (store.clone(), job.clone());
        async move {
            store
                .slices_to_publish(&job, stale_before, limit)
                .await
                .unwrap()
        }
    };

    // Never published: every open slice, in slice order, at most `limit`.
    assert_eq!(to_publish(0, 10).await, slices);
    assert_eq!(to_publish(0, 2).await, slices[..2]);
    assert!(to_publish(0, 0).await.is_empty());

    // Published at 1,000: not again, unless published before `stale_before`.
    store
        .mark_published(&job, &ids(&slices[..3]), 1_000)
        .await
        .unwrap();
    assert_eq!(to_publish(1_000, 10).await, slices[3..]);
    assert_eq!(to_publish(1_001, 10).await, slices, "stale and new, merged");
    assert_eq!(to_publish(1_001, 4).await, slices[..4]);
    store
        .mark_published(&job, &ids(&slices[..3]), 2_000)
        .await
        .unwrap();
    assert_eq!(to_publish(1_001, 10).await, slices[3..]);

    // Children of an outcome start unpublished; a terminal slice is never published.
    let children = vec![
        page("https://shop.example/c/1", &slices[0]),
        page("https://shop.example/c/2", &slices[0]),
    ];
    let outcome = SliceOutcome {
        children: children.clone(),
        ..SliceOutcome::default()
    };
    store
        .record_outcome(&job, &slices[0].id, &outcome)
        .await
        .unwrap();
    let mut want: Vec<SliceSpec> = slices[3..].to_vec();
    want.extend(children.iter().cloned());
    assert_eq!(to_publish(1_001, 10).await, sorted(want));
    assert_eq!(to_publish(i64::MAX, 10).await.len(), 6);

    let mut everything = ids(&slices);
    everything.extend(ids(&children));
    store
        .mark_published(&job, &everything, 3_000)
        .await
        .unwrap();
    assert!(to_publish(3_000, 10).await.is_empty());
    let mut open = slices[1..].to_vec();
    open.extend(children.iter().cloned());
    assert_eq!(to_publish(3_001, 10).await, sorted(open.clone()));

    // Marks stay within their job.
    store
        .mark_published(&other, &everything, 9_000)
        .await
        .unwrap();
    assert_eq!(to_publish(3_001, 10).await, sorted(open));
    assert_eq!(
        store.slices_to_publish(&other, 0, 10).await.unwrap(),
        vec![other_slice.clone()]
    );
    store
        .mark_published(&other, std::slice::from_ref(&other_slice.id), 9_000)
        .await
        .unwrap();
    assert!(
        store
            .slices_to_publish(&other, 9_000, 10)
            .await
            .unwrap()
            .is_empty()
    );
    store.mark_published(&job, &[], 10_000).await.unwrap();
}

pub(crate) async fn jobs_with_status_are_listed_oldest_first(f: &dyn Fixture) {
    let store = f.store();
    let at = |n: u64, status: JobStatus, created_ms: i64| JobRecord {
        status,
        created_ms,
        ..job_record(n)
    };
    let jobs = [
        at(1, JobStatus::Running, 3),
        at(2, JobStatus::Pending, 1),
        at(3, JobStatus::Queued, 2),
        at(4, JobStatus::Succeeded, 0),
        at(5, JobStatus::Pending, 2),
    ];
    for j in &jobs {
        store.create_job(j, &[]).await.unwrap();
    }
    let live = [JobStatus::Pending, JobStatus::Queued, JobStatus::Running];
    let listed = |statuses: Vec<JobStatus>, limit: u32| {
        let store = store.clone();
        async move {
            store
                .jobs_with_status(&statuses, limit)
                .await
                .unwrap()
                .into_iter()
                .map(|j| j.id)
                .collect::<Vec<_>>()
        }
    };
    // Oldest first; the same time in id order (job 3's id sorts before job 5's).
    let want = vec![
        jobs[1].id.clone(),
        jobs[2].id.clone(),
        jobs[4].id.clone(),
        jobs[0].id.clone(),
    ];
    assert_eq!(listed(live.to_vec(), 10).await, want);
    assert_eq!(listed(live.to_vec(), 2).await, want[..2]);
    assert_eq!(
        listed(vec![JobStatus::Succeeded], 10).await,
        vec![jobs[3].id.clone()]
    );
    assert!(listed(vec![JobStatus::Cancelled], 10).await.is_empty());
    assert!(listed(vec![], 10).await.is_empty());
    let full = store
        .jobs_with_status(&[JobStatus::Running], 1)
        .await
        .unwrap();
    assert_eq!(full[0].name, "job 1");
    assert_eq!(full[0].spec, jobs[0].spec);
}

fn owner(caller: &str, tenant: Option<&str>) -> JobOwner {
    JobOwner {
        caller: caller.into(),
        client: None,
        tenant: tenant.map(Into::into),
    }
}

pub(crate) async fn an_idempotency_key_names_one_job(f: &dyn Fixture) {
    let store = f.store();
    let p = owner("sub:p", None);
    let key = Idempotency {
        key: "req-7f3a".into(),
        request_digest: "ab".repeat(32),
    };
    let first = JobRecord {
        status: JobStatus::Pending,
        idempotency: Some(key.clone()),
        owner: Some(p.clone()),
        ..job_record(1)
    };
    store.create_job(&first, &[]).await.unwrap();
    let back = store
        .job_by_idempotency_key(&p, "req-7f3a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back.id, first.id);
    assert_eq!(back.idempotency.as_ref(), Some(&key));
    assert_eq!(
        store.job(&first.id).await.unwrap().unwrap().idempotency,
        Some(key)
    );

    // Another job of the caller with the same key is refused, whatever its body,
    // and not stored.
    let second = JobRecord {
        idempotency: Some(Idempotency {
            key: "req-7f3a".into(),
            request_digest: "cd".repeat(32),
        }),
        owner: Some(p.clone()),
        ..job_record(2)
    };
    let refused = store.create_job(&second, &[search("x")]).await;
    assert!(
        matches!(refused, Err(PortError::Conflict(_))),
        "{refused:?}"
    );
    assert!(store.job(&second.id).await.unwrap().is_none());

    assert!(
        store
            .job_by_idempotency_key(&p, "req-other")
            .await
            .unwrap()
            .is_none()
    );
    // Jobs without a key never collide.
    let (a, b) = (job_record(3), job_record(4));
    store.create_job(&a, &[]).await.unwrap();
    store.create_job(&b, &[]).await.unwrap();
    assert_eq!(store.job(&b.id).await.unwrap().unwrap().idempotency, None);

    // Caller, tenant and key are separate columns: caller `sub:p` with key
    // `x/k` and caller `sub:p/x` with key `k` are two keys (joined, both were
    // `sub:p/x/k`), and so are one caller's key in two tenants.
    let keyed = |n: u64, who: &JobOwner, key: &str| JobRecord {
        idempotency: Some(Idempotency {
            key: key.into(),
            request_digest: "ef".repeat(32),
        }),
        owner: Some(who.clone()),
        ..job_record(n)
    };
    let px = owner("sub:p/x", None);
    let (j5, j6) = (keyed(5, &p, "x/k"), keyed(6, &px, "k"));
    store.create_job(&j5, &[]).await.unwrap();
    store.create_job(&j6, &[]).await.unwrap();
    let found = |who: JobOwner, key: &'static str| {
        let store = f.store();
        async move {
            store
                .job_by_idempotency_key(&who, key)
                .await
                .unwrap()
                .map(|j| j.id)
        }
    };
    assert_eq!(found(p.clone(), "x/k").await, Some(j5.id.clone()));
    assert_eq!(found(px.clone(), "k").await, Some(j6.id.clone()));
    assert_eq!(found(px.clone(), "x/k").await, None);
    assert_eq!(found(p.clone(), "k").await, None);
    let in_a = owner("sub:q", Some("a"));
    let in_b = owner("sub:q", Some("b"));
    let (j7, j8) = (keyed(7, &in_a, "k"), keyed(8, &in_b, "k"));
    store.create_job(&j7, &[]).await.unwrap();
    store.create_job(&j8, &[]).await.unwrap();
    assert_eq!(found(in_b.clone(), "k").await, Some(j8.id.clone()));
    assert_eq!(found(owner("sub:q", None), "k").await, None);
}

pub(crate) async fn a_plan_is_stored_in_batches_a_cancel_stops_and_a_replan_completes(
    f: &dyn Fixture,
) {
    let store = f.store();
    let n = 2 * PLAN_BATCH + 7;
    let all: Vec<SliceSpec> = (0..n).map(|i| search(&format!("query {i}"))).collect();

    // A plan cut short (a planner that died): the job is still pending with part
    // of its slices; planning it again stores what is missing, once each.
    let cut = JobRecord {
        status: JobStatus::Pending,
        ..job_record(1)
    };
    store
        .create_job(&cut, &all[..PLAN_BATCH + 3])
        .await
        .unwrap();
    assert!(
        store
            .plan_job(&cut.id, &mut all.clone().into_iter(), JobStatus::Queued)
            .await
            .unwrap()
    );
    let counts = store.counts(&cut.id).await.unwrap();
    assert_eq!(counts.slices_total, n as u64);
    assert_eq!(counts, f.recount(&cut.id).await);
    let job = store.job(&cut.id).await.unwrap().unwrap();
    assert_eq!(job.status, JobStatus::Queued);

    // A cancel while the plan is stored: the planner stops at its next batch and
    // the job stays cancelled (a single transaction held the job until the end).
    let cancelled = JobRecord {
        status: JobStatus::Pending,
        ..job_record(2)
    };
    store.create_job(&cancelled, &[]).await.unwrap();
    let handle = tokio::runtime::Handle::current();
    let id = cancelled.id.clone();
    let mut plan = all.clone().into_iter().enumerate().map(|(i, s)| {
        if i == PLAN_BATCH + 1 {
            // Between batches no transaction is open: the cancel goes through.
            let ended = tokio::task::block_in_place(|| {
                handle.block_on(store.end_job(&id, JobStatus::Cancelled, Some("stop")))
            });
            assert!(ended.unwrap(), "the cancel waited for the whole plan");
        }
        s
    });
    assert!(
        !store
            .plan_job(&cancelled.id, &mut plan, JobStatus::Queued)
            .await
            .unwrap()
    );
    drop(plan);
    let job = store.job(&cancelled.id).await.unwrap().unwrap();
    assert_eq!(job.status, JobStatus::Cancelled);
    let stored = store.counts(&cancelled.id).await.unwrap().slices_total;
    assert!(stored < n as u64, "{stored} of {n} stored after the cancel");
}

pub(crate) async fn a_tenants_usage_sums_its_jobs_by_day(f: &dyn Fixture) {
    let store = f.store();
    let day = trawl_core::tenant::DAY_MS;
    let d1 = 1_700_006_400_000_i64 - 1_700_006_400_000 % day;
    let d2 = d1 + day;
    let acme_a = owner("sub:a", Some("acme"));
    let acme_b = owner("sub:b", Some("acme"));
    let solo = owner("key:solo", None);
    let job = |n: u64, who: &JobOwner, at: i64, status: JobStatus, estimate: i64| JobRecord {
        id: JobId::generate(at, 0xabc0 + n),
        status,
        created_ms: at,
        estimate: Micros(estimate),
        owner: Some(who.clone()),
        slices_max: 50,
        ..job_record(n)
    };
    // Day 1: one finished job of acme with two slices, one done, spent 300.
    let done = job(1, &acme_a, d1 + 5, JobStatus::Succeeded, 1_000);
    let (s1, s2) = (search("one"), search("two"));
    store
        .create_job(&done, &[s1.clone(), s2.clone()])
        .await
        .unwrap();
    assert_eq!(
        store
            .record_costs(&done.id, &s1.id, &[cost(&s1, 0, 100), cost(&s1, 1, 200)], 2)
            .await
            .unwrap(),
        2
    );
    // Day 2: a running job of acme (another caller) with three open slices and
    // an estimate above its spend, and a pending one not planned yet.
    let running = job(2, &acme_b, d2 + 10, JobStatus::Running, 5_000);
    let slices: Vec<_> = ["x", "y", "z"].iter().map(|q| search(q)).collect();
    store.create_job(&running, &slices).await.unwrap();
    store
        .record_costs(&running.id, &slices[0].id, &[cost(&slices[0], 0, 700)], 1)
        .await
        .unwrap();
    let pending = job(3, &acme_a, d2 + 20, JobStatus::Pending, 2_000);
    store.create_job(&pending, &[]).await.unwrap();
    // Another tenant's job and a job without an owner count for nobody here.
    store
        .create_job(
            &job(4, &solo, d2 + 30, JobStatus::Running, 9_000),
            &[search("s")],
        )
        .await
        .unwrap();
    store
        .create_job(
            &JobRecord {
                owner: None,
                ..job(5, &acme_a, d2 + 40, JobStatus::Running, 9_000)
            },
            &[search("t")],
        )
        .await
        .unwrap();

    let u = store.tenant_usage("acme", d1).await.unwrap();
    assert_eq!(u.active_jobs, 2);
    assert_eq!(
        u.slices_in_flight,
        3 + 50,
        "open slices, and the pending job's most"
    );
    assert_eq!(u.days.len(), 2, "{u:?}");
    let (a, b) = (u.days[0], u.days[1]);
    assert_eq!((a.day_ms, a.jobs, a.slices), (d1, 1, 2));
    assert_eq!((a.spent, a.committed), (Micros(300), Micros(300)));
    assert_eq!((b.day_ms, b.jobs, b.slices), (d2, 2, 3));
    assert_eq!(b.spent, Micros(700), "the ledger's sum");
    assert_eq!(
        b.committed,
        Micros(5_000 + 2_000),
        "unfinished jobs at their estimate"
    );
    // From the second day only; a caller without a tenant is its own.
    assert_eq!(store.tenant_usage("acme", d2).await.unwrap().days.len(), 1);
    let s = store.tenant_usage("key:solo", d1).await.unwrap();
    assert_eq!((s.active_jobs, s.slices_in_flight, s.days.len()), (1, 1, 1));
    let none = store.tenant_usage("nobody", d1).await.unwrap();
    assert_eq!(none, trawl_core::tenant::Usage::default());
}

pub(crate) async fn pages_start_strictly_after_their_cursor(f: &dyn Fixture) {
    let store = f.store();
    let slices = sorted(vec![search("p1"), search("p2"), search("p3")]);
    let (s1, s2, s3) = (&slices[0], &slices[1], &slices[2]);
    let job = new_job(&*store, 1, &slices).await;
    let other_slice = search("elsewhere");
    let other = new_job(&*store, 2, std::slice::from_ref(&other_slice)).await;

    let mut failed_step = step(s3, 1, false);
    failed_step.status = "http_429".into();
    failed_step.error = Some("too many requests".into());
    failed_step.cost = Micros::ZERO;
    for (s, n_items, n_rejections, trace) in [
        (s1, 3, 1, vec![step(s1, 0, false), step(s1, 1, true)]),
        (s2, 0, 2, vec![]),
        (s3, 2, 0, vec![step(s3, 0, true), failed_step.clone()]),
    ] {
        let outcome = SliceOutcome {
            items: (0..n_items).map(|i| item(s, i)).collect(),
            rejections: (0..n_rejections).map(|i| rejection(s, i)).collect(),
            trace,
            ..SliceOutcome::default()
        };
        store.record_outcome(&job, &s.id, &outcome).await.unwrap();
    }
    let elsewhere = SliceOutcome {
        items: vec![item(&other_slice, 0)],
        rejections: vec![rejection(&other_slice, 0)],
        trace: vec![step(&other_slice, 0, false)],
        ..SliceOutcome::default()
    };
    store
        .record_outcome(&other, &other_slice.id, &elsewhere)
        .await
        .unwrap();

    let all_items = store.items(&job).await.unwrap();
    assert_eq!(all_items.len(), 5);
    let page = |after: Option<RowCursor>, limit: u32| {
        let (store, job) = (store.clone(), job.clone());
        async move { store.items_page(&job, after.as_ref(), limit).await.unwrap() }
    };
    assert_eq!(page(None, 100).await, all_items);
    assert!(page(None, 0).await.is_empty());

    // Paging by two gives every item once, in order.
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let got = page(after.clone(), 2).await;
        assert!(got.len() <= 2);
        let Some(last) = got.last() else { break };
        after = Some((last.slice_id.clone(), last.seq));
        paged.extend(got);
    }
    assert_eq!(paged, all_items);

    // Strictly after: the cursor's own row is not repeated.
    assert_eq!(page(Some((s1.id.clone(), 0)), 1).await, vec![item(s1, 1)]);
    // The last row of a slice continues with the next slice that has rows.
    assert_eq!(page(Some((s1.id.clone(), 2)), 10).await, all_items[3..]);
    // A cursor need not name a stored row.
    assert_eq!(page(Some((s1.id.clone(), 99)), 10).await, all_items[3..]);
    assert_eq!(page(Some((s2.id.clone(), 0)), 10).await, all_items[3..]);
    assert!(page(Some((s3.id.clone(), 1)), 10).await.is_empty());
    assert!(page(Some((s3.id.clone(), u32::MAX)), 10).await.is_empty());

    let rejections = store.rejections(&job).await.unwrap();
    assert_eq!(rejections.len(), 3);
    assert_eq!(
        store.rejections_page(&job, None, 10).await.unwrap(),
        rejections
    );
    assert_eq!(
        store
            .rejections_page(&job, Some(&(s1.id.clone(), 0)), 10)
            .await
            .unwrap(),
        vec![rejection(s2, 0), rejection(s2, 1)]
    );
    assert_eq!(
        store
            .rejections_page(&job, Some(&(s2.id.clone(), 0)), 1)
            .await
            .unwrap(),
        vec![rejection(s2, 1)]
    );

    let trace = store.trace_page(&job, None, 10).await.unwrap();
    assert_eq!(
        trace,
        vec![
            step(s1, 0, false),
            step(s1, 1, true),
            step(s3, 0, true),
            failed_step.clone()
        ]
    );
    assert_eq!(
        store
            .trace_page(&job, Some(&(s1.id.clone(), 1)), 1)
            .await
            .unwrap(),
        vec![step(s3, 0, true)]
    );
    assert_eq!(
        store
            .trace_page(&job, Some(&(s3.id.clone(), 0)), 10)
            .await
            .unwrap(),
        vec![failed_step]
    );
    assert!(store.trace_page(&job, None, 0).await.unwrap().is_empty());
}

pub(crate) async fn the_store_answers_a_ping(f: &dyn Fixture) {
    f.store().ping().await.unwrap();
}

pub(crate) async fn budget_reservations_are_shared_and_never_pass_the_maximum(f: &dyn Fixture) {
    let store = f.store();
    let store = store.as_ref();
    let job = new_job(store, 1, &[]).await;
    let other = new_job(store, 2, &[]).await;
    let max = Micros(4_500);
    // Twelve concurrent reservations of 1,500 against 4,500: exactly three granted.
    let tries = (0..12).map(|_| store.reserve_budget(&job, Micros(1_500), max));
    let granted = futures_util::future::join_all(tries)
        .await
        .into_iter()
        .filter(|r| *r.as_ref().unwrap())
        .count();
    assert_eq!(granted, 3);
    assert!(!store.reserve_budget(&job, Micros(1), max).await.unwrap());
    // Another job's budget is its own.
    assert!(
        store
            .reserve_budget(&other, Micros(4_500), max)
            .await
            .unwrap()
    );
    // Released money can be reserved again; a reservation may be adjusted up too.
    store.adjust_budget(&job, Micros(-1_500)).await.unwrap();
    assert!(
        store
            .reserve_budget(&job, Micros(1_000), max)
            .await
            .unwrap()
    );
    store.adjust_budget(&job, Micros(500)).await.unwrap();
    assert!(!store.reserve_budget(&job, Micros(1), max).await.unwrap());
    // An unknown job reserves nothing.
    let nobody = JobId::generate(1, 99);
    assert!(!store.reserve_budget(&nobody, Micros(1), max).await.unwrap());
}

pub(crate) async fn a_job_ends_once(f: &dyn Fixture) {
    let store = f.store();
    let store = store.as_ref();
    let job = new_job(store, 1, &[search("a")]).await;
    assert!(
        store
            .end_job(&job, JobStatus::Cancelled, Some("by a test"))
            .await
            .unwrap()
    );
    // A finish racing the cancel writes nothing.
    assert!(
        !store
            .end_job(&job, JobStatus::Succeeded, None)
            .await
            .unwrap()
    );
    let back = store.job(&job).await.unwrap().unwrap();
    assert_eq!(back.status, JobStatus::Cancelled);
    assert_eq!(back.reason.as_deref(), Some("by a test"));
    // Not a terminal status: refused. Unknown job: not found.
    assert!(store.end_job(&job, JobStatus::Running, None).await.is_err());
    let nobody = JobId::generate(1, 98);
    assert!(matches!(
        store.end_job(&nobody, JobStatus::Failed, None).await,
        Err(PortError::NotFound(_))
    ));
}

// ---------------------------------------------------------------------------
// The tool layer: pins, tool approvals, audit

fn pin(tool: &str, hash: &str) -> PinChange {
    PinChange::Pin {
        tool: tool.into(),
        server: "up".into(),
        hash: hash.into(),
        definition: json!({"name": tool, "v": hash}),
        by: "first-sight".into(),
    }
}

fn hold(tool: &str, kind: &'static str, hash: &str) -> PinChange {
    PinChange::Hold {
        tool: tool.into(),
        server: "up".into(),
        kind,
        hash: hash.into(),
        definition: json!({"name": tool, "v": hash}),
        reason: format!("{tool} changed"),
        detail: json!({"changes": [hash]}),
    }
}

fn pin_of(pins: &[ToolPin], tool: &str) -> ToolPin {
    pins.iter().find(|p| p.tool == tool).cloned().unwrap()
}

pub(crate) async fn first_sight_pins_and_a_change_is_held_for_approval(f: &dyn Fixture) {
    let store = f.store();
    assert!(store.tool_pins().await.unwrap().is_empty());
    store
        .save_pins(&[pin("up.a", "h1"), pin("up.b", "h2")])
        .await
        .unwrap();
    // A second first sight (another worker) changes nothing.
    store.save_pins(&[pin("up.a", "other")]).await.unwrap();
    let pins = store.tool_pins().await.unwrap();
    assert_eq!(pins.len(), 2);
    let a = pin_of(&pins, "up.a");
    assert_eq!(a.status, PinStatus::Active);
    assert_eq!(a.hash.as_deref(), Some("h1"));
    assert_eq!(a.definition, Some(json!({"name": "up.a", "v": "h1"})));
    assert_eq!(a.approved_by.as_deref(), Some("first-sight"));

    store
        .save_pins(&[hold("up.a", "tool_change", "h1x")])
        .await
        .unwrap();
    // Seen again by another worker: the same approval, not a second one.
    store
        .save_pins(&[hold("up.a", "tool_change", "h1y")])
        .await
        .unwrap();
    let pending = store.approvals(true, 10).await.unwrap();
    assert_eq!(pending.len(), 1);
    let ap = &pending[0];
    assert_eq!(
        (ap.kind.as_str(), ap.tool.as_deref()),
        ("tool_change", Some("up.a"))
    );
    assert_eq!(ap.job_id, None);
    assert_eq!(ap.detail, Some(json!({"changes": ["h1y"]})));
    let a = pin_of(&store.tool_pins().await.unwrap(), "up.a");
    assert_eq!(a.status, PinStatus::Quarantined);
    assert_eq!(
        a.hash.as_deref(),
        Some("h1"),
        "the approved definition stays pinned"
    );
    assert_eq!(a.pending_hash.as_deref(), Some("h1y"));
    assert_eq!(a.approval_id, Some(ap.id));

    // A job approval cannot be decided as a tool approval.
    let job = new_job(&*store, 1, &[]).await;
    store
        .request_approval(&ask(&job, 10, "budget"))
        .await
        .unwrap();
    let job_ap = store.approvals(true, 10).await.unwrap();
    let job_ap = job_ap.iter().find(|r| r.job_id.is_some()).unwrap();
    assert_eq!(
        store
            .decide_tool_approval(job_ap.id, true, "x")
            .await
            .unwrap(),
        None
    );

    let decided = store
        .decide_tool_approval(ap.id, true, "alice")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (decided.approved, decided.decided_by.as_deref()),
        (Some(true), Some("alice"))
    );
    // Decided once.
    assert_eq!(
        store
            .decide_tool_approval(ap.id, false, "bob")
            .await
            .unwrap(),
        None
    );
    let a = pin_of(&store.tool_pins().await.unwrap(), "up.a");
    assert_eq!(a.status, PinStatus::Active);
    assert_eq!(a.hash.as_deref(), Some("h1y"));
    assert_eq!(a.definition, Some(json!({"name": "up.a", "v": "h1y"})));
    assert_eq!((a.pending_hash, a.approval_id), (None, None));
    assert_eq!(a.approved_by.as_deref(), Some("alice"));
}

pub(crate) async fn a_rejected_change_stays_out_and_a_restore_closes_the_approval(f: &dyn Fixture) {
    let store = f.store();
    store.save_pins(&[pin("up.a", "h1")]).await.unwrap();
    store
        .save_pins(&[hold("up.a", "tool_change", "h2")])
        .await
        .unwrap();
    let id = store.approvals(true, 1).await.unwrap()[0].id;
    store
        .decide_tool_approval(id, false, "bob")
        .await
        .unwrap()
        .unwrap();
    let a = pin_of(&store.tool_pins().await.unwrap(), "up.a");
    assert_eq!(a.status, PinStatus::Rejected);
    assert_eq!(
        (a.hash.as_deref(), a.pending_hash.as_deref()),
        (Some("h1"), Some("h2"))
    );

    // Another change: held again, with a new approval.
    store
        .save_pins(&[hold("up.a", "tool_change", "h3")])
        .await
        .unwrap();
    let again = store.approvals(true, 10).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_ne!(again[0].id, id);
    // The server goes back to the pinned definition: active, approval closed.
    store
        .save_pins(&[PinChange::Restore {
            tool: "up.a".into(),
        }])
        .await
        .unwrap();
    let a = pin_of(&store.tool_pins().await.unwrap(), "up.a");
    assert_eq!((a.status, a.pending_hash), (PinStatus::Active, None));
    assert!(store.approvals(true, 10).await.unwrap().is_empty());
    let closed = store.approval(again[0].id).await.unwrap().unwrap();
    assert_eq!(closed.approved, Some(false));
    assert!(
        closed
            .decided_by
            .unwrap()
            .contains("pinned definition again")
    );
}

pub(crate) async fn a_new_tool_awaits_approval(f: &dyn Fixture) {
    let store = f.store();
    store
        .save_pins(&[hold("up.n", "new_tool", "n1")])
        .await
        .unwrap();
    let n = pin_of(&store.tool_pins().await.unwrap(), "up.n");
    assert_eq!(n.status, PinStatus::Awaiting);
    assert_eq!((n.hash, n.definition), (None, None));
    // Restoring a tool never approved does not activate it.
    store
        .save_pins(&[PinChange::Restore {
            tool: "up.n".into(),
        }])
        .await
        .unwrap();
    let n = pin_of(&store.tool_pins().await.unwrap(), "up.n");
    assert_eq!(n.status, PinStatus::Awaiting);
    let ap = store.approvals(true, 1).await.unwrap();
    assert_eq!(ap[0].kind, "new_tool");
    store
        .decide_tool_approval(ap[0].id, true, "carol")
        .await
        .unwrap()
        .unwrap();
    let n = pin_of(&store.tool_pins().await.unwrap(), "up.n");
    assert_eq!(
        (n.status, n.hash.as_deref()),
        (PinStatus::Active, Some("n1"))
    );
}

fn audit(job: Option<&JobId>, slice: Option<&SliceId>, seq: u32, decision: &str) -> AuditRecord {
    AuditRecord {
        job_id: job.cloned(),
        slice_id: slice.cloned(),
        seq,
        tool: "brightdata.fetch_page".into(),
        args_digest: format!("d{seq}"),
        decision: decision.into(),
        reason: "policy".into(),
        caller: "worker".into(),
        latency_us: 120,
        result_bytes: 2048,
        error: (decision != "allow").then(|| "denied".into()),
        at_ms: 1_700_000_000_000 + i64::from(seq),
    }
}

pub(crate) async fn audit_rows_are_written_with_outcomes_and_on_their_own(f: &dyn Fixture) {
    let store = f.store();
    let s = search("q");
    let job = new_job(&*store, 1, std::slice::from_ref(&s)).await;
    let outcome = SliceOutcome {
        audit: vec![
            audit(Some(&job), Some(&s.id), 0, "allow"),
            audit(Some(&job), Some(&s.id), 1, "deny"),
        ],
        ..SliceOutcome::default()
    };
    store.record_outcome(&job, &s.id, &outcome).await.unwrap();
    // A redelivered outcome writes nothing more.
    store.record_outcome(&job, &s.id, &outcome).await.unwrap();
    store
        .record_audit(&[audit(None, None, 0, "quarantined")])
        .await
        .unwrap();
    store.record_audit(&[]).await.unwrap();
    let rows = store.audit_page(None, 10).await.unwrap();
    let got: Vec<_> = rows.iter().map(|(_, a)| a.clone()).collect();
    assert_eq!(
        got,
        vec![
            audit(Some(&job), Some(&s.id), 0, "allow"),
            audit(Some(&job), Some(&s.id), 1, "deny"),
            audit(None, None, 0, "quarantined"),
        ]
    );
    let after_first = store.audit_page(Some(rows[0].0), 10).await.unwrap();
    assert_eq!(after_first.len(), 2);
    assert_eq!(store.audit_page(None, 1).await.unwrap().len(), 1);
}

pub(crate) async fn a_tool_call_is_approved_once_per_arguments(f: &dyn Fixture) {
    let store = f.store();
    let detail = json!({"arguments": {"x": 1}});
    let (id, decided) = store
        .tool_call_approval("up.send", "d1", "needs approval", &detail)
        .await
        .unwrap();
    assert_eq!(decided, None);
    // Asked again: the same approval, still pending; other arguments: another one.
    assert_eq!(
        store
            .tool_call_approval("up.send", "d1", "again", &detail)
            .await
            .unwrap(),
        (id, None)
    );
    let (other, _) = store
        .tool_call_approval("up.send", "d2", "needs approval", &detail)
        .await
        .unwrap();
    assert_ne!(other, id);
    // A pending definition change of the same tool does not collide with them.
    store
        .save_pins(&[hold("up.send", "tool_change", "h")])
        .await
        .unwrap();
    assert_eq!(store.approvals(true, 10).await.unwrap().len(), 3);
    let r = store
        .decide_tool_approval(id, true, "dana")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((r.kind.as_str(), r.approved), ("tool_call", Some(true)));
    assert_eq!(
        store
            .tool_call_approval("up.send", "d1", "again", &detail)
            .await
            .unwrap(),
        (id, Some(true))
    );
    // The change is still pending: deciding a call does not touch the pin.
    let p = pin_of(&store.tool_pins().await.unwrap(), "up.send");
    assert_eq!(p.status, PinStatus::Quarantined);
}

// ---------------------------------------------------------------------------
// Approval expiry and the outbox of approval notices

/// A job waiting for a pending approval of `amount`; the approval's record.
async fn awaiting(store: &dyn Store, n: u64, amount: i64) -> (JobId, ApprovalRecord) {
    let job = JobRecord {
        status: JobStatus::AwaitingApproval,
        ..job_record(n)
    };
    store.create_job(&job, &[]).await.unwrap();
    store
        .request_approval(&ask(&job.id, amount, "over budget"))
        .await
        .unwrap();
    let record = store
        .approvals(true, 1000)
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.job_id.as_ref() == Some(&job.id))
        .unwrap();
    (job.id, record)
}

pub(crate) async fn approvals_expire_and_their_jobs_are_cancelled_with_the_reason(f: &dyn Fixture) {
    let store = f.store();
    let (job, a) = awaiting(&*store, 1, 5_000).await;
    let (decided_job, d) = awaiting(&*store, 2, 6_000).await;
    store
        .decide_approval(&decided_job, true, "alice")
        .await
        .unwrap()
        .unwrap();
    store.save_pins(&[pin("up.t", "h1")]).await.unwrap();
    store
        .save_pins(&[hold("up.t", "tool_change", "h2")])
        .await
        .unwrap();
    let tool = store.tool_pins().await.unwrap()[0].approval_id.unwrap();
    assert_eq!(a.expires_ms, None);
    assert!(!a.expired);

    // Stamped with the TTL, not yet due.
    let ttl = 60_000;
    let now = trawl_core::model::now_ms();
    assert!(
        store
            .expire_approvals(now, Some(ttl), 10)
            .await
            .unwrap()
            .is_empty()
    );
    let a = store.approval(a.id).await.unwrap().unwrap();
    assert_eq!(a.expires_ms, Some(a.requested_ms + ttl));
    assert_eq!(
        store.approval(d.id).await.unwrap().unwrap().expires_ms,
        None,
        "a decided approval gets no expiry"
    );
    let tool_expiry = store.approval(tool).await.unwrap().unwrap().expires_ms;
    assert!(tool_expiry.is_some());
    let due = a.expires_ms.unwrap().max(tool_expiry.unwrap());
    // A later TTL does not move an expiry already stamped.
    assert!(
        store
            .expire_approvals(due - 1, Some(1), 10)
            .await
            .unwrap()
            .iter()
            .all(|r| r.expires_ms.unwrap() < due)
    );

    let expired = store.expire_approvals(due, None, 10).await.unwrap();
    let ids: Vec<i64> = expired.iter().map(|r| r.id).collect();
    let mut want = vec![a.id, tool];
    want.sort_unstable();
    // Some may have gone in the call above when both expire at once; read them back.
    for id in &want {
        let r = store.approval(*id).await.unwrap().unwrap();
        assert_eq!(
            (r.approved, r.expired, r.status(), r.decided_by.as_deref()),
            (Some(false), true, "expired", Some(EXPIRED_BY)),
            "{r:?}"
        );
    }
    assert!(ids.iter().all(|id| want.contains(id)), "{ids:?}");
    let a = store.approval(a.id).await.unwrap().unwrap();
    let j = store.job(&job).await.unwrap().unwrap();
    assert_eq!(j.status, JobStatus::Cancelled);
    assert_eq!(
        j.reason.as_deref(),
        Some(format!("approval {} expired after 1m, nobody decided", a.id).as_str())
    );
    assert_eq!(a.expiry_reason(), j.reason.clone().unwrap());
    // The decided one and its job are untouched.
    let d2 = store.approval(d.id).await.unwrap().unwrap();
    assert_eq!((d2.approved, d2.expired), (Some(true), false));
    assert_eq!(
        store.job(&decided_job).await.unwrap().unwrap().status,
        JobStatus::AwaitingApproval,
        "the store leaves moving an approved job to the scheduler"
    );
    // The tool stays out, held by the approval that expired.
    let p = pin_of(&store.tool_pins().await.unwrap(), "up.t");
    assert_eq!(
        (p.status, p.approval_id, p.hash.as_deref()),
        (PinStatus::Quarantined, Some(tool), Some("h1"))
    );
    // Closed: nothing decides it, and nothing expires twice.
    assert_eq!(
        store.decide_approval(&job, true, "late").await.unwrap(),
        None
    );
    assert_eq!(
        store
            .decide_tool_approval(tool, true, "late")
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .expire_approvals(due + 1_000_000, Some(1), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.job(&job).await.unwrap().unwrap().status,
        JobStatus::Cancelled
    );

    // A job that no longer waits keeps its own status and reason.
    let (gone, g) = awaiting(&*store, 3, 7_000).await;
    store
        .end_job(&gone, JobStatus::Cancelled, Some("cancelled over the API"))
        .await
        .unwrap();
    store
        .expire_approvals(trawl_core::model::now_ms(), Some(0), 10)
        .await
        .unwrap();
    assert!(store.approval(g.id).await.unwrap().unwrap().expired);
    assert_eq!(
        store.job(&gone).await.unwrap().unwrap().reason.as_deref(),
        Some("cancelled over the API")
    );

    // At most `limit` at a time.
    for n in 10..13 {
        awaiting(&*store, n, 1_000).await;
    }
    let now = trawl_core::model::now_ms();
    assert_eq!(
        store.expire_approvals(now, Some(0), 2).await.unwrap().len(),
        2
    );
    assert_eq!(
        store.expire_approvals(now, Some(0), 2).await.unwrap().len(),
        1
    );
}

pub(crate) async fn an_approval_past_its_expiry_cannot_be_decided(f: &dyn Fixture) {
    let store = f.store();
    let (job, a) = awaiting(&*store, 1, 5_000).await;
    // Stamped with a TTL of 0 but not yet closed (its expiry is in the future
    // of this call, so nothing expires now).
    store
        .expire_approvals(a.requested_ms - 1, Some(0), 10)
        .await
        .unwrap();
    let a = store.approval(a.id).await.unwrap().unwrap();
    assert_eq!((a.approved, a.expires_ms), (None, Some(a.requested_ms)));
    assert_eq!(
        store.decide_approval(&job, true, "alice").await.unwrap(),
        None,
        "its time is over, whether or not a notifier closed it yet"
    );
    let a = store.approval(a.id).await.unwrap().unwrap();
    assert_eq!(a.approved, None);

    store.save_pins(&[pin("up.t", "h1")]).await.unwrap();
    store
        .save_pins(&[hold("up.t", "tool_change", "h2")])
        .await
        .unwrap();
    let tool = store.tool_pins().await.unwrap()[0].approval_id.unwrap();
    let requested = store.approval(tool).await.unwrap().unwrap().requested_ms;
    store
        .expire_approvals(requested - 1, Some(0), 10)
        .await
        .unwrap();
    assert_eq!(
        store
            .decide_tool_approval(tool, true, "alice")
            .await
            .unwrap(),
        None
    );
    // Without a TTL, decisions work as ever.
    let (job2, _) = awaiting(&*store, 2, 5_000).await;
    assert!(
        store
            .decide_approval(&job2, true, "alice")
            .await
            .unwrap()
            .is_some()
    );
}

pub(crate) async fn approval_notices_are_claimed_once_and_kept_until_delivered(f: &dyn Fixture) {
    let store = f.store();
    let (job_a, a) = awaiting(&*store, 1, 5_000).await;
    let (job_b, b) = awaiting(&*store, 2, 6_000).await;
    let now = trawl_core::model::now_ms();
    let lease = 1_000;
    // As a set: two requests in one millisecond have no order (ids are random).
    let ids = |v: &[ApprovalRecord]| v.iter().map(|r| r.id).collect::<HashSet<_>>();

    let claimed = store
        .claim_approval_notices(now, lease, None, 10)
        .await
        .unwrap();
    assert_eq!(ids(&claimed), HashSet::from([a.id, b.id]));
    assert!(
        claimed
            .iter()
            .all(|r| r.notice() == Some(ApprovalNotice::Requested))
    );
    // Leased: nobody else gets them, until the lease runs out (the claimer died).
    assert!(
        store
            .claim_approval_notices(now, lease, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .claim_approval_notices(now + lease - 1, lease, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let again = store
        .claim_approval_notices(now + lease, lease, None, 10)
        .await
        .unwrap();
    assert_eq!(
        ids(&again),
        HashSet::from([a.id, b.id]),
        "not lost with its claimer"
    );

    // Delivered: never claimed again for its request.
    store
        .approval_notice_sent(a.id, ApprovalNotice::Requested, now + 1)
        .await
        .unwrap();
    assert_eq!(
        store.approval(a.id).await.unwrap().unwrap().notified_ms,
        Some(now + 1)
    );
    // Not delivered: claimable again from the time given.
    store
        .approval_notice_failed(b.id, now + 5_000)
        .await
        .unwrap();
    assert!(
        store
            .claim_approval_notices(now + 4_999, lease, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let retried = store
        .claim_approval_notices(now + 5_000, lease, None, 10)
        .await
        .unwrap();
    assert_eq!(ids(&retried), HashSet::from([b.id]));
    store.approval_notice_failed(b.id, now).await.unwrap();

    // Decided after its request went out: the outcome is due, once.
    store
        .decide_approval(&job_a, true, "alice")
        .await
        .unwrap()
        .unwrap();
    // Decided before its request went out: nothing more to announce.
    store
        .decide_approval(&job_b, false, "bob")
        .await
        .unwrap()
        .unwrap();
    let decided = store
        .claim_approval_notices(now, lease, None, 10)
        .await
        .unwrap();
    assert_eq!(ids(&decided), HashSet::from([a.id]));
    assert_eq!(decided[0].notice(), Some(ApprovalNotice::Decided));
    assert_eq!(decided[0].status(), "approved");
    store
        .approval_notice_sent(a.id, ApprovalNotice::Decided, now + 2)
        .await
        .unwrap();
    assert!(
        store
            .claim_approval_notices(now + 10 * lease, lease, None, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // An expiry of an announced request is an outcome to announce too.
    let (_, c) = awaiting(&*store, 3, 7_000).await;
    let got = store
        .claim_approval_notices(now, lease, None, 10)
        .await
        .unwrap();
    assert_eq!(ids(&got), HashSet::from([c.id]));
    store
        .approval_notice_sent(c.id, ApprovalNotice::Requested, now)
        .await
        .unwrap();
    store
        .expire_approvals(trawl_core::model::now_ms(), Some(0), 10)
        .await
        .unwrap();
    let got = store
        .claim_approval_notices(now + lease, lease, None, 10)
        .await
        .unwrap();
    assert_eq!(ids(&got), HashSet::from([c.id]));
    assert_eq!(
        (got[0].notice(), got[0].status()),
        (Some(ApprovalNotice::Decided), "expired")
    );

    // At most `limit`, oldest first.
    for n in 10..14 {
        awaiting(&*store, n, 1_000).await;
    }
    let first = store
        .claim_approval_notices(now, lease, None, 3)
        .await
        .unwrap();
    let rest = store
        .claim_approval_notices(now, lease, None, 3)
        .await
        .unwrap();
    assert_eq!((first.len(), rest.len()), (3, 1));
    // Oldest by request time; ids (random) break ties.
    let age = |r: &ApprovalRecord| (r.requested_ms, r.id);
    assert!(first.iter().all(|r| age(r) < age(&rest[0])));
}

pub(crate) async fn concurrent_claims_of_approval_notices_never_overlap(f: &dyn Fixture) {
    let store = f.store();
    for n in 0..40 {
        awaiting(&*store, n, 1_000 + n as i64).await;
    }
    let now = trawl_core::model::now_ms();
    let claims: Vec<_> = (0..4)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.claim_approval_notices(now, 60_000, None, 15).await })
        })
        .collect();
    let mut seen = HashSet::new();
    let mut total = 0;
    for c in claims {
        for r in c.await.unwrap().unwrap() {
            total += 1;
            assert!(seen.insert(r.id), "approval {} claimed twice", r.id);
        }
    }
    assert_eq!((total, seen.len()), (40, 40));
}

pub(crate) async fn a_replaced_request_is_announced_again_only_when_it_changed(f: &dyn Fixture) {
    let store = f.store();
    let (job, a) = awaiting(&*store, 1, 5_000).await;
    let now = trawl_core::model::now_ms();
    store.expire_approvals(now, Some(60_000), 10).await.unwrap();
    store
        .claim_approval_notices(now, 1_000, None, 10)
        .await
        .unwrap();
    store
        .approval_notice_sent(a.id, ApprovalNotice::Requested, now)
        .await
        .unwrap();

    // Asked the same again (a scheduler planning it again): nothing new to say.
    store
        .request_approval(&ask(&job, 5_000, "over budget"))
        .await
        .unwrap();
    let same = store.approval(a.id).await.unwrap().unwrap();
    assert_eq!(same.notified_ms, Some(now));
    assert!(same.expires_ms.is_some());
    // Asked for more: announced again, with a new expiry.
    store
        .request_approval(&ask(&job, 9_000, "over budget"))
        .await
        .unwrap();
    let changed = store.approval(a.id).await.unwrap().unwrap();
    assert_eq!((changed.notified_ms, changed.expires_ms), (None, None));
    let got = store
        .claim_approval_notices(now, 1_000, None, 10)
        .await
        .unwrap();
    assert_eq!(got.iter().map(|r| r.id).collect::<Vec<_>>(), vec![a.id]);

    // The same for a tool's change: the same change held again keeps its notice,
    // another change is announced again.
    store.save_pins(&[pin("up.t", "h1")]).await.unwrap();
    store
        .save_pins(&[hold("up.t", "tool_change", "h2")])
        .await
        .unwrap();
    let tool = store.tool_pins().await.unwrap()[0].approval_id.unwrap();
    store
        .approval_notice_sent(tool, ApprovalNotice::Requested, now)
        .await
        .unwrap();
    store
        .save_pins(&[hold("up.t", "tool_change", "h2")])
        .await
        .unwrap();
    assert_eq!(
        store.approval(tool).await.unwrap().unwrap().notified_ms,
        Some(now)
    );
    store
        .save_pins(&[hold("up.t", "tool_change", "h3")])
        .await
        .unwrap();
    let t = store.approval(tool).await.unwrap().unwrap();
    assert_eq!((t.id, t.notified_ms), (tool, None));
}

pub(crate) async fn a_claimed_request_carries_its_expiry(f: &dyn Fixture) {
    let store = f.store();
    // Stored after the notifier's expiry pass: the claim stamps it.
    let (_, a) = awaiting(&*store, 1, 5_000).await;
    let now = trawl_core::model::now_ms();
    let got = store
        .claim_approval_notices(now, 1_000, Some(60_000), 10)
        .await
        .unwrap();
    assert_eq!(
        got.iter().map(|r| (r.id, r.expires_ms)).collect::<Vec<_>>(),
        vec![(a.id, Some(a.requested_ms + 60_000))]
    );
    assert_eq!(
        store.approval(a.id).await.unwrap().unwrap().expires_ms,
        Some(a.requested_ms + 60_000)
    );
    store
        .approval_notice_sent(a.id, ApprovalNotice::Requested, now)
        .await
        .unwrap();

    // An expiry already stamped stays as it is.
    let (_, b) = awaiting(&*store, 2, 5_000).await;
    store
        .expire_approvals(b.requested_ms - 10_000_000, Some(5_000_000), 10)
        .await
        .unwrap();
    let got = store
        .claim_approval_notices(now, 1_000, Some(60_000), 10)
        .await
        .unwrap();
    assert_eq!(
        got.iter().map(|r| (r.id, r.expires_ms)).collect::<Vec<_>>(),
        vec![(b.id, Some(b.requested_ms + 5_000_000))]
    );
    store
        .approval_notice_sent(b.id, ApprovalNotice::Requested, now)
        .await
        .unwrap();

    // A decided approval's outcome is claimed without an expiry stamped on it.
    let (job_c, c) = awaiting(&*store, 3, 5_000).await;
    store
        .claim_approval_notices(now, 1_000, None, 10)
        .await
        .unwrap();
    store
        .approval_notice_sent(c.id, ApprovalNotice::Requested, now)
        .await
        .unwrap();
    store
        .decide_approval(&job_c, true, "x")
        .await
        .unwrap()
        .unwrap();
    let got = store
        .claim_approval_notices(now, 1_000, Some(60_000), 10)
        .await
        .unwrap();
    assert_eq!(
        got.iter()
            .map(|r| (r.id, r.notice(), r.expires_ms))
            .collect::<Vec<_>>(),
        vec![(c.id, Some(ApprovalNotice::Decided), None)]
    );
}

// ---------------------------------------------------------------------------
// Browser slices: artifacts and the replay cache

/// A job with `n` slices, each with an item, a trace step, a cost and an audit
/// row written by its outcome, an artifact and a pending approval; `ended`: the
/// job has ended.
async fn job_with_rows(store: &dyn Store, k: u64, n: usize, retention_ms: Option<i64>) -> JobId {
    let slices: Vec<SliceSpec> = (0..n).map(|i| search(&format!("job {k} q{i}"))).collect();
    let job = JobRecord {
        retention_ms,
        ..job_record(k)
    };
    store.create_job(&job, &slices).await.unwrap();
    for s in &slices {
        let outcome = SliceOutcome {
            items: vec![item(s, 0)],
            trace: vec![step(s, 0, false)],
            costs: vec![cost(s, 0, 1_500)],
            audit: vec![audit(Some(&job.id), Some(&s.id), 0, "allowed")],
            ..SliceOutcome::default()
        };
        store
            .record_outcome(&job.id, &s.id, &outcome)
            .await
            .unwrap();
    }
    store
        .put_artifact(&artifact(&job.id, None, "shot.png", vec![1, 2, 3], 1))
        .await
        .unwrap();
    store
        .request_approval(&Approval {
            job_id: job.id.clone(),
            amount: Micros(10),
            reason: "over".into(),
            approved: None,
            decided_by: None,
        })
        .await
        .unwrap();
    job.id
}

pub(crate) async fn retention_deletes_what_is_past_in_batches_and_nothing_else(f: &dyn Fixture) {
    let store = f.store();
    const HOUR: i64 = 3_600_000;
    // a ends now and is kept for the default; b ends now and keeps itself 3 h;
    // c runs on.
    let a = job_with_rows(&*store, 1, 5, None).await;
    let b = job_with_rows(&*store, 2, 3, Some(3 * HOUR)).await;
    let c = job_with_rows(&*store, 3, 3, None).await;
    for id in [&a, &b] {
        assert!(store.end_job(id, JobStatus::Succeeded, None).await.unwrap());
    }
    let ledger = store.cost_months().await.unwrap();
    let total = |l: &[CostMonth]| l.iter().map(|m| m.amount.0).sum::<i64>();
    assert_eq!(total(&ledger), 11 * 1_500);
    let now = trawl_core::model::now_ms();
    // Within the default (1 h) nothing is past; 2 h on, a is (b keeps 3 h; c runs).
    assert!(store.expired_jobs(now, HOUR, 10).await.unwrap().is_empty());
    assert_eq!(
        store.expired_jobs(now + 2 * HOUR, HOUR, 10).await.unwrap(),
        vec![a.clone()]
    );
    assert_eq!(
        store.expired_jobs(now + 4 * HOUR, HOUR, 10).await.unwrap(),
        vec![a.clone(), b.clone()]
    );
    let rows = store.job_rows(&a).await.unwrap();
    let row = |t: &str| rows.iter().find(|(n, _)| *n == t).unwrap().1;
    assert_eq!(
        (
            row("items"),
            row("trace_steps"),
            row("costs"),
            row("tool_audit")
        ),
        (5, 5, 5, 5)
    );
    assert_eq!(
        (
            row("artifacts"),
            row("approvals"),
            row("slices"),
            row("jobs")
        ),
        (1, 1, 5, 1)
    );
    let (b_counts, c_counts) = (
        store.counts(&b).await.unwrap(),
        store.counts(&c).await.unwrap(),
    );

    // Batches of two rows; c's slices keep ending meanwhile.
    let c_more = search("job 3 late");
    store
        .add_slices(&c, std::slice::from_ref(&c_more))
        .await
        .unwrap();
    let (mut calls, mut deleted) = (0, 0);
    loop {
        let n = store.purge_job(&a, 2).await.unwrap();
        assert!(n <= 2, "a batch of {n}");
        if calls == 3 {
            let outcome = SliceOutcome {
                items: vec![item(&c_more, 0)],
                ..SliceOutcome::default()
            };
            store
                .record_outcome(&c, &c_more.id, &outcome)
                .await
                .unwrap();
        }
        calls += 1;
        if n == 0 {
            break;
        }
        deleted += n;
    }
    // 5 items, 5 steps, 5 costs, 5 audit rows, 1 artifact, 1 approval, 5
    // slices, then the job: in batches of at most two.
    assert_eq!(deleted, 28);
    assert!(calls >= 14, "{calls} calls");
    assert!(store.job(&a).await.unwrap().is_none());
    assert!(
        store
            .job_rows(&a)
            .await
            .unwrap()
            .iter()
            .all(|(_, n)| *n == 0)
    );
    assert!(
        store
            .expired_jobs(now + 2 * HOUR, HOUR, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Nothing else went: b and c as they were (c with its late slice).
    assert_eq!(store.counts(&b).await.unwrap(), b_counts);
    assert_eq!(store.counts(&b).await.unwrap(), f.recount(&b).await);
    let c_now = store.counts(&c).await.unwrap();
    assert_eq!(c_now, f.recount(&c).await);
    assert_eq!(
        (c_now.slices_total, c_now.items_valid),
        (c_counts.slices_total + 1, c_counts.items_valid + 1)
    );
    assert_eq!(store.items(&b).await.unwrap().len(), 3);
    assert_eq!(store.artifacts(&b).await.unwrap().len(), 1);
    // The ledger by month is what it was: a's costs are kept as a total.
    assert_eq!(store.cost_months().await.unwrap(), ledger);
    // Purging what is gone deletes nothing.
    assert_eq!(store.purge_job(&a, 2).await.unwrap(), 0);
}

fn artifact(
    job: &JobId,
    slice: Option<&SliceSpec>,
    name: &str,
    data: Vec<u8>,
    at_ms: i64,
) -> Artifact {
    Artifact {
        job_id: job.clone(),
        slice_id: slice.map(|s| s.id.clone()),
        name: name.to_owned(),
        content_type: "image/png".to_owned(),
        data,
        at_ms,
    }
}

/// Every byte value, NUL and invalid UTF-8 included, `n` times over.
fn binary(n: usize) -> Vec<u8> {
    (0..=255u8).cycle().take(256 * n).collect()
}

pub(crate) async fn artifacts_round_trip_and_are_listed_by_time_then_name_without_bytes(
    f: &dyn Fixture,
) {
    let store = f.store();
    let s = search("shots");
    let job = new_job(&*store, 1, std::slice::from_ref(&s)).await;
    let other = new_job(&*store, 2, &[]).await;
    assert!(store.artifacts(&job).await.unwrap().is_empty());

    // Stored out of order: the listing is by time, then name (byte order).
    let late = artifact(&job, Some(&s), "a-late.png", binary(3), 3_000);
    let mut b = artifact(&job, None, "b.json", b"{}".to_vec(), 2_000);
    b.content_type = "application/json".to_owned();
    let a = artifact(&job, Some(&s), "a.png", binary(1), 2_000);
    let upper = artifact(&job, Some(&s), "Z.png", Vec::new(), 2_000);
    let elsewhere = artifact(&other, None, "a.png", vec![7; 10], 1_000);
    for x in [&late, &b, &a, &upper, &elsewhere] {
        store.put_artifact(x).await.unwrap();
    }

    let listed = store.artifacts(&job).await.unwrap();
    assert_eq!(
        listed,
        vec![upper.info(), a.info(), b.info(), late.info()],
        "by time, then name"
    );
    assert_eq!(
        listed.iter().map(|i| i.size).collect::<Vec<_>>(),
        vec![0, 256, 2, 768]
    );
    assert_eq!(
        store.artifacts(&other).await.unwrap(),
        vec![elsewhere.info()]
    );

    // Read back whole, bytes and all; each job has its own names.
    for x in [&late, &b, &a, &upper] {
        assert_eq!(
            store.artifact(&job, &x.name).await.unwrap().as_ref(),
            Some(x)
        );
    }
    assert_eq!(
        store.artifact(&other, "a.png").await.unwrap(),
        Some(elsewhere.clone())
    );
    assert_eq!(store.artifact(&job, "missing.png").await.unwrap(), None);
    assert_eq!(
        store.artifact(&job, "A.PNG").await.unwrap(),
        None,
        "names are exact"
    );
    assert_eq!(store.artifact(&other, "b.json").await.unwrap(), None);

    // An artifact of a job that was never stored is refused.
    let ghost = JobId::generate(1_700_000_000_000, 0xdead);
    assert!(
        matches!(
            store
                .put_artifact(&artifact(&ghost, None, "x.png", vec![1], 1))
                .await,
            Err(PortError::NotFound(_))
        ),
        "an unknown job"
    );
    assert!(store.artifacts(&ghost).await.unwrap().is_empty());
}

pub(crate) async fn storing_an_artifact_name_again_replaces_it(f: &dyn Fixture) {
    let store = f.store();
    let s = search("shots");
    let job = new_job(&*store, 1, std::slice::from_ref(&s)).await;
    let first = artifact(&job, Some(&s), "page.png", binary(4), 1_000);
    let kept = artifact(&job, None, "kept.png", vec![1, 2, 3], 2_000);
    store.put_artifact(&first).await.unwrap();
    store.put_artifact(&kept).await.unwrap();

    // Every field is replaced, and the listing follows its new time.
    let second = Artifact {
        slice_id: None,
        content_type: "image/jpeg".to_owned(),
        data: vec![0xff, 0xd8, 0xff],
        at_ms: 3_000,
        ..first.clone()
    };
    store.put_artifact(&second).await.unwrap();
    assert_eq!(
        store.artifact(&job, "page.png").await.unwrap(),
        Some(second.clone())
    );
    assert_eq!(
        store.artifacts(&job).await.unwrap(),
        vec![kept.info(), second.info()]
    );

    // The same artifact stored twice is one.
    store.put_artifact(&second).await.unwrap();
    assert_eq!(store.artifacts(&job).await.unwrap().len(), 2);
}

pub(crate) async fn an_artifact_over_the_limit_is_refused_and_nothing_is_stored(f: &dyn Fixture) {
    let store = f.store();
    let job = new_job(&*store, 1, &[]).await;

    let full = artifact(
        &job,
        None,
        "full.png",
        vec![0xab; MAX_ARTIFACT_BYTES],
        1_000,
    );
    store.put_artifact(&full).await.unwrap();
    assert_eq!(
        store
            .artifact(&job, "full.png")
            .await
            .unwrap()
            .map(|a| a.data.len()),
        Some(MAX_ARTIFACT_BYTES),
        "exactly the limit is kept"
    );

    let over = artifact(
        &job,
        None,
        "over.png",
        vec![0xcd; MAX_ARTIFACT_BYTES + 1],
        2_000,
    );
    let refused = store.put_artifact(&over).await;
    assert!(matches!(refused, Err(PortError::Corrupt(_))), "{refused:?}");
    assert_eq!(store.artifact(&job, "over.png").await.unwrap(), None);

    // Nor does a refused replacement touch what was stored.
    let replacing = Artifact {
        data: vec![0; MAX_ARTIFACT_BYTES + 1],
        at_ms: 3_000,
        ..full.clone()
    };
    let refused = store.put_artifact(&replacing).await;
    assert!(matches!(refused, Err(PortError::Corrupt(_))), "{refused:?}");
    assert_eq!(
        store.artifact(&job, "full.png").await.unwrap(),
        Some(full.clone())
    );
    assert_eq!(store.artifacts(&job).await.unwrap(), vec![full.info()]);
}

pub(crate) async fn replays_are_stored_replaced_and_dropped(f: &dyn Fixture) {
    let store = f.store();
    let key = "browse:v1:https://shop.example/p/1:us:step-2";
    assert_eq!(store.replay(key).await.unwrap(), None);
    // Dropping what was never stored is not an error.
    store.drop_replay(key).await.unwrap();

    let first = json!({
        "action": "click",
        "selector": "button#buy > span:nth-child(2)",
        "at": {"x": 12.5, "y": -3},
        "text": "Größe wählen — ✓",
        "alternatives": [null, true, 1_700_000_000_000_i64, "a\"b"],
    });
    store.put_replay(key, &first).await.unwrap();
    store.put_replay("other", &json!("kept")).await.unwrap();
    assert_eq!(store.replay(key).await.unwrap(), Some(first));

    let second = json!({"action": "type", "selector": "input[name=q]", "text": "laptops"});
    store.put_replay(key, &second).await.unwrap();
    assert_eq!(store.replay(key).await.unwrap(), Some(second));

    store.drop_replay(key).await.unwrap();
    assert_eq!(store.replay(key).await.unwrap(), None);
    assert_eq!(store.replay("other").await.unwrap(), Some(json!("kept")));
    assert_eq!(store.replay("Other").await.unwrap(), None, "keys are exact");
}

// ---------------------------------------------------------------------------
// The tool layer's guard: cached embeddings, model verdicts, held definitions

/// A vector of 384 floats made from `seed`, with values whose bits a lossy
/// round trip would change: negative zero, subnormals, the extremes.
fn vector(seed: u32) -> Vec<f32> {
    let mut v: Vec<f32> = (0..384u32)
        .map(|i| {
            f32::from_bits(seed.wrapping_mul(2_654_435_761).wrapping_add(i * 7_919) & 0xbf7f_ffff)
        })
        .collect();
    v[0] = -0.0;
    v[1] = f32::MIN_POSITIVE / 3.0;
    v[2] = f32::MAX;
    v[3] = -f32::MIN_POSITIVE;
    v
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn by_key(mut rows: Vec<(String, Vec<f32>)>) -> Vec<(String, Vec<u32>)> {
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows.into_iter().map(|(k, v)| (k, bits(&v))).collect()
}

pub(crate) async fn embeddings_round_trip_bit_for_bit_by_model_and_key(f: &dyn Fixture) {
    let store = f.store();
    let keys: Vec<String> = (0..3).map(|i| format!("{i:064x}")).collect();
    assert!(store.embeddings("m1", &keys).await.unwrap().is_empty());
    assert!(store.embeddings("m1", &[]).await.unwrap().is_empty());
    store.save_embeddings("m1", &[]).await.unwrap();

    let rows: Vec<(String, Vec<f32>)> = keys[..2]
        .iter()
        .enumerate()
        .map(|(i, k)| (k.clone(), vector(i as u32)))
        .collect();
    store.save_embeddings("m1", &rows).await.unwrap();
    // Of three keys asked for, the two stored come back, bit for bit.
    let found = store.embeddings("m1", &keys).await.unwrap();
    assert_eq!(by_key(found), by_key(rows.clone()));
    // Another model's cache is another cache.
    assert!(store.embeddings("m2", &keys).await.unwrap().is_empty());
    store
        .save_embeddings("m2", &[(keys[0].clone(), vector(9))])
        .await
        .unwrap();
    let m2 = store.embeddings("m2", &keys).await.unwrap();
    assert_eq!(by_key(m2), vec![(keys[0].clone(), bits(&vector(9)))]);
    let m1 = store.embeddings("m1", &keys[..1]).await.unwrap();
    assert_eq!(by_key(m1), vec![(keys[0].clone(), bits(&vector(0)))]);

    // Many at once, more than one statement's worth.
    let many: Vec<(String, Vec<f32>)> = (0..2_500u32)
        .map(|i| (format!("k{i}"), vector(100 + i)))
        .collect();
    store.save_embeddings("m3", &many).await.unwrap();
    let asked: Vec<String> = many.iter().map(|(k, _)| k.clone()).collect();
    let back = store.embeddings("m3", &asked).await.unwrap();
    assert_eq!(by_key(back), by_key(many));
}

pub(crate) async fn saving_an_embedding_again_keeps_the_first(f: &dyn Fixture) {
    let store = f.store();
    let key = "ab".repeat(32);
    store
        .save_embeddings("m", &[(key.clone(), vector(1))])
        .await
        .unwrap();
    // Saved again (another worker computed it too), alone and in a batch with a
    // new key, and twice in one batch: no error, the first vector stays.
    store
        .save_embeddings("m", &[(key.clone(), vector(2))])
        .await
        .unwrap();
    store
        .save_embeddings(
            "m",
            &[
                ("new".into(), vector(3)),
                (key.clone(), vector(4)),
                ("new".into(), vector(5)),
            ],
        )
        .await
        .unwrap();
    let back = store
        .embeddings("m", &[key.clone(), "new".into()])
        .await
        .unwrap();
    assert_eq!(
        by_key(back),
        vec![(key, bits(&vector(1))), ("new".into(), bits(&vector(3)))]
    );
}

pub(crate) async fn guard_verdicts_round_trip_and_are_replaced(f: &dyn Fixture) {
    let store = f.store();
    let v = GuardVerdict {
        model: "judge-1".into(),
        hash: "h1".into(),
        verdict: "block".into(),
        reason: "asks the agent to read ~/.ssh".into(),
        decided_ms: 1_700_000_000_123,
    };
    assert_eq!(store.guard_verdict("judge-1", "h1").await.unwrap(), None);
    store.save_guard_verdict(&v).await.unwrap();
    assert_eq!(
        store.guard_verdict("judge-1", "h1").await.unwrap(),
        Some(v.clone())
    );
    // Kept apart by model and by hash.
    assert_eq!(store.guard_verdict("judge-2", "h1").await.unwrap(), None);
    assert_eq!(store.guard_verdict("judge-1", "h2").await.unwrap(), None);
    let again = GuardVerdict {
        verdict: "allow".into(),
        reason: "re-judged".into(),
        decided_ms: v.decided_ms + 1,
        ..v.clone()
    };
    store.save_guard_verdict(&again).await.unwrap();
    assert_eq!(
        store.guard_verdict("judge-1", "h1").await.unwrap(),
        Some(again)
    );
}

pub(crate) async fn a_tool_held_for_review_is_approved_or_rejected(f: &dyn Fixture) {
    let store = f.store();
    store
        .save_pins(&[pin("up.a", "a1"), pin("up.b", "b1")])
        .await
        .unwrap();
    // A change of up.a is pending; the guard then holds the definition for review:
    // one pending approval for the tool, now a review.
    store
        .save_pins(&[hold("up.a", "tool_change", "a2")])
        .await
        .unwrap();
    store
        .save_pins(&[
            hold("up.a", "tool_review", "a2"),
            hold("up.b", "tool_review", "b2"),
        ])
        .await
        .unwrap();
    let pending = store.approvals(true, 10).await.unwrap();
    assert_eq!(pending.len(), 2, "{pending:?}");
    assert!(pending.iter().all(|a| a.kind == "tool_review"));
    let id_of = |tool: &str| {
        pending
            .iter()
            .find(|a| a.tool.as_deref() == Some(tool))
            .unwrap()
            .id
    };
    let pins = store.tool_pins().await.unwrap();
    for (tool, pinned, held) in [("up.a", "a1", "a2"), ("up.b", "b1", "b2")] {
        let p = pin_of(&pins, tool);
        assert_eq!(p.status, PinStatus::Quarantined, "{tool}");
        assert_eq!(
            (p.hash.as_deref(), p.pending_hash.as_deref()),
            (Some(pinned), Some(held))
        );
        assert_eq!(p.approval_id, Some(id_of(tool)));
    }

    let approved = store
        .decide_tool_approval(id_of("up.a"), true, "dana")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(approved.kind, "tool_review");
    let a = pin_of(&store.tool_pins().await.unwrap(), "up.a");
    assert_eq!(
        (a.status, a.hash.as_deref(), a.approved_by.as_deref()),
        (PinStatus::Active, Some("a2"), Some("dana"))
    );
    assert_eq!(a.definition, Some(json!({"name": "up.a", "v": "a2"})));
    assert_eq!((a.pending_hash, a.approval_id), (None, None));

    store
        .decide_tool_approval(id_of("up.b"), false, "erin")
        .await
        .unwrap()
        .unwrap();
    let b = pin_of(&store.tool_pins().await.unwrap(), "up.b");
    assert_eq!(b.status, PinStatus::Rejected);
    assert_eq!(
        (b.hash.as_deref(), b.pending_hash.as_deref()),
        (Some("b1"), Some("b2"))
    );
    assert!(store.approvals(true, 10).await.unwrap().is_empty());
}

pub(crate) async fn a_server_listing_is_kept_byte_for_byte_and_replaced(f: &dyn Fixture) {
    let store = f.store();
    assert!(store.tool_listings().await.unwrap().is_empty());
    // A NUL and other control characters, non-ASCII text and a large integer
    // come back as they were sent.
    let tools = vec![
        json!({"name": "b", "inputSchema": {"type": "object"}, "description": "nul \u{0} tab \t 天気"}),
        json!({"description": "first", "name": "a", "annotations": {"n": 18_446_744_073_709_551_615_u64}}),
    ];
    let up = ToolListing {
        server: "up".into(),
        tools: tools.clone(),
        listed_ms: 1_000,
    };
    let other = ToolListing {
        server: "another".into(),
        tools: Vec::new(),
        listed_ms: 2_000,
    };
    store.save_tool_listing(&up).await.unwrap();
    store.save_tool_listing(&other).await.unwrap();
    let got = store.tool_listings().await.unwrap();
    assert_eq!(got, vec![other.clone(), up.clone()]);
    assert_eq!(
        serde_json::to_string(&got[1].tools).unwrap(),
        serde_json::to_string(&tools).unwrap()
    );

    // A later listing replaces the server's row, and only that one.
    let later = ToolListing {
        tools: vec![json!({"name": "c"})],
        listed_ms: 3_000,
        ..up
    };
    store.save_tool_listing(&later).await.unwrap();
    assert_eq!(store.tool_listings().await.unwrap(), vec![other, later]);
}
