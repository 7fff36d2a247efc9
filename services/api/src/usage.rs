//! `GET /v1/usage` (and the MCP tool `research.usage`): what a tenant has spent
//! and planned, by UTC day, its limits and what is left of them.
//!
//! A caller sees its own tenant's ([`trawl_core::ports::JobOwner::tenant_key`]:
//! the token's tenant, the key's group, else the caller itself); an admin may
//! name another with `tenant`. Spend is the ledger's, summed over the jobs
//! created that day, so the days add up to the ledger.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use trawl_core::cost::Micros;
use trawl_core::model::now_ms;
use trawl_core::tenant::{self, DAY_MS, Limits, Remaining, UsageDay};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, Problem};
use crate::state::{ApiState, Caller};

/// The longest tenant name asked for.
pub const MAX_TENANT: usize = 255;

/// The most days one answer covers.
pub const MAX_DAYS: u32 = 366;

/// Which tenant and how many days.
#[derive(Debug, Default, Deserialize, IntoParams, ToSchema)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    /// Another tenant than the caller's own: admins only.
    #[param(min_length = 1, max_length = 255)]
    #[schema(min_length = 1, max_length = 255)]
    pub tenant: Option<String>,
    /// Days back from today (UTC) to list, today included: 1 to 366, default 31.
    /// The month's figures always count the whole month so far.
    #[param(minimum = 1, maximum = 366)]
    #[schema(minimum = 1, maximum = 366)]
    pub days: Option<u32>,
}

/// A tenant's usage.
#[derive(Debug, Serialize, ToSchema)]
pub struct UsageView {
    /// The tenant the figures are for.
    pub tenant: String,
    /// Its limits; `null`: no limit.
    pub limits: LimitsView,
    /// What is left of each limit that has one.
    #[schema(value_type = Object)]
    pub remaining: Remaining,
    /// Unfinished jobs (pending, awaiting approval, queued, running).
    pub active_jobs: u64,
    /// Their slices not yet done (a job not yet planned at its most).
    pub slices_in_flight: u64,
    /// Today (UTC) so far.
    pub today: DayView,
    /// This month (UTC) so far.
    pub this_month: DayView,
    /// Each day with a job, oldest first.
    pub days: Vec<DayView>,
}

/// Limits as the setting writes them (dollars for `usd_*`).
#[derive(Debug, Serialize, ToSchema)]
pub struct LimitsView {
    pub slices_per_job: Option<u64>,
    pub slices_in_flight: Option<u64>,
    pub concurrent_jobs: Option<u64>,
    pub jobs_per_day: Option<u64>,
    pub usd_per_day: Option<f64>,
    pub usd_per_month: Option<f64>,
    pub approve_above_usd: Option<f64>,
}

impl From<Limits> for LimitsView {
    fn from(l: Limits) -> LimitsView {
        let usd = |m: Option<Micros>| m.map(Micros::usd);
        LimitsView {
            slices_per_job: l.slices_per_job,
            slices_in_flight: l.slices_in_flight,
            concurrent_jobs: l.concurrent_jobs,
            jobs_per_day: l.jobs_per_day,
            usd_per_day: usd(l.spend_per_day),
            usd_per_month: usd(l.spend_per_month),
            approve_above_usd: usd(l.approve_above),
        }
    }
}

/// The jobs created in a day (or a month) and what they spent.
#[derive(Debug, Serialize, ToSchema)]
pub struct DayView {
    /// `YYYY-MM-DD` (UTC); for `this_month`, its first day.
    #[schema(example = "2026-12-07")]
    pub day: String,
    pub jobs: u64,
    /// Slices planned so far.
    pub slices: u64,
    /// Spent: the ledger's sum over these jobs.
    pub spent_usd: f64,
    /// Spent, unfinished jobs at their estimate when it is more: what limits
    /// count.
    pub committed_usd: f64,
}

impl DayView {
    fn of(d: &UsageDay) -> DayView {
        DayView {
            day: tenant::date_of(d.day_ms),
            jobs: d.jobs,
            slices: d.slices,
            spent_usd: d.spent.usd(),
            committed_usd: d.committed.usd(),
        }
    }
}

/// A tenant's spend and slices by day, its limits and what is left.
#[utoipa::path(
    get,
    path = "/v1/usage",
    operation_id = "usage",
    tag = "usage",
    params(UsageQuery),
    responses(
        (status = 200, description = "The tenant's usage.", body = UsageView),
        (status = 400, description = "A bad parameter.", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid API key.", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Another tenant's usage, asked by a caller who is not an admin.", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store is unavailable.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])),
)]
pub(crate) async fn usage(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<UsageQuery>, QueryRejection>,
) -> Result<Json<UsageView>, ApiError> {
    let Query(query) = query.map_err(|r| ApiError::BadRequest(r.body_text()))?;
    of(&state, &caller, query).await.map(Json)
}

/// The usage `caller` asks for (the REST route's and the MCP tool's).
pub(crate) async fn of(
    state: &ApiState,
    caller: &Caller,
    query: UsageQuery,
) -> Result<UsageView, ApiError> {
    let own = caller.owner();
    if query
        .tenant
        .as_ref()
        .is_some_and(|t| t.is_empty() || t.len() > MAX_TENANT)
    {
        return Err(ApiError::BadRequest(format!(
            "tenant must be 1 to {MAX_TENANT} bytes"
        )));
    }
    let tenant = match query.tenant {
        Some(t) if t != own.tenant_key() => {
            if !caller.admin {
                return Err(ApiError::Forbidden(
                    "only an admin may read another tenant's usage".to_owned(),
                ));
            }
            t
        }
        _ => own.tenant_key().to_owned(),
    };
    let days = query.days.unwrap_or(31);
    if !(1..=MAX_DAYS).contains(&days) {
        return Err(ApiError::BadRequest(format!(
            "days must be 1 to {MAX_DAYS}, not {days}"
        )));
    }
    let now = now_ms();
    let today = tenant::day_start(now);
    let month = tenant::month_bounds(now).0;
    let from = (today - i64::from(days - 1) * DAY_MS).min(month);
    let usage = state.store.tenant_usage(&tenant, from).await?;
    let limits = state.quotas.limits().of(&tenant);
    let listed_from = today - i64::from(days - 1) * DAY_MS;
    Ok(UsageView {
        remaining: tenant::remaining(&limits, &usage, now),
        limits: limits.into(),
        active_jobs: usage.active_jobs,
        slices_in_flight: usage.slices_in_flight,
        today: DayView::of(&usage.since(today)),
        this_month: DayView::of(&usage.since(month)),
        days: usage
            .days
            .iter()
            .filter(|d| d.day_ms >= listed_from)
            .map(DayView::of)
            .collect(),
        tenant,
    })
}
