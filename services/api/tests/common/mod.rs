//! What the API's test files share.

use std::sync::Arc;

use trawl_core::cost::PriceTable;
use trawl_core::ports::{SliceQueue, Store};
use trawl_core::spec::JobSpec;
use trawl_queue::InProcessEvents;

/// Submits a job through the one submit and plans it, as the scheduler role
/// does next: the way `trawl run` parks a job that needs approval.
pub async fn submit_planned(
    store: Arc<dyn Store>,
    queue: Arc<dyn SliceQueue>,
    spec: &JobSpec,
) -> trawl_scheduler::Submitted {
    // Its announcement goes nowhere: the tests read what the API emits.
    let (quiet, _) = InProcessEvents::channel();
    let mut s = trawl_scheduler::submit(
        store.as_ref(),
        &quiet,
        &trawl_scheduler::SubmitConfig::default(),
        trawl_scheduler::Submission::new(spec.clone()),
    )
    .await
    .expect("submitted");
    let service = trawl_scheduler::Service {
        store: store.clone(),
        queue,
        events: Arc::new(quiet),
        prices: PriceTable::default(),
        config: trawl_scheduler::ServiceConfig::default(),
    };
    service.advance_id(&s.job_id).await.expect("planned");
    s.status = store
        .job(&s.job_id)
        .await
        .expect("read")
        .expect("stored")
        .status;
    s
}
