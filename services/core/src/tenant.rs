//! Tenants and their quotas: what one tenant may ask of a deployment.
//!
//! A tenant is who a quota is counted for: the OAuth tenant claim of a token, a
//! key's group (`group/name:secret`), or else the caller itself (a key's name, a
//! token's subject). The operator sets limits per tenant and a default for every
//! other one (`TRAWL_TENANT_LIMITS`, [`TenantLimits::parse`]); [`check`] decides
//! a submission against a tenant's [`Usage`] as the store counts it.
//!
//! Days and months are UTC; a job's spend counts on the day the job was created
//! (job ids carry that time), so a day's usage is a sum over that day's jobs and
//! adds up to the ledger.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::cost::Micros;

/// Milliseconds in a UTC day.
pub const DAY_MS: i64 = 86_400_000;

/// The spend above which a job waits for a person's approval when the operator
/// set none: on by default, so no single request can spend much unseen.
pub const DEFAULT_APPROVE_ABOVE: Micros = Micros(10_000_000);

/// One tenant's limits; `None` is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// Slices one job may plan (followed pages counted at their maximum).
    pub slices_per_job: Option<u64>,
    /// Slices of the tenant's unfinished jobs not yet done, this job's included.
    pub slices_in_flight: Option<u64>,
    /// Unfinished jobs (pending, awaiting approval, queued, running).
    pub concurrent_jobs: Option<u64>,
    /// Jobs submitted per UTC day.
    pub jobs_per_day: Option<u64>,
    /// Spend per UTC day: what the day's jobs spent, unfinished ones counted at
    /// their estimate when it is more.
    #[serde(rename = "usd_per_day")]
    pub spend_per_day: Option<Micros>,
    /// Spend per UTC month, counted as per day.
    #[serde(rename = "usd_per_month")]
    pub spend_per_month: Option<Micros>,
    /// A job whose estimate is above this waits for approval.
    #[serde(rename = "approve_above_usd")]
    pub approve_above: Option<Micros>,
}

/// The names of the limits, as the setting, the problem answers and the
/// metrics write them.
pub const LIMIT_NAMES: [&str; 7] = [
    "slices_per_job",
    "slices_in_flight",
    "concurrent_jobs",
    "jobs_per_day",
    "usd_per_day",
    "usd_per_month",
    "approve_above_usd",
];

/// Limits for every tenant: one set per named tenant, each laid over the
/// default (`*`); a limit a tenant's entry does not name is the default's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantLimits {
    default: Limits,
    tenants: BTreeMap<String, Limits>,
    /// Which limits each entry named, so `off` in a tenant's entry overrides the
    /// default rather than falling back to it.
    named: BTreeMap<String, [bool; 7]>,
}

impl Default for TenantLimits {
    /// No limit but the default approval threshold.
    fn default() -> TenantLimits {
        TenantLimits {
            default: Limits {
                approve_above: Some(DEFAULT_APPROVE_ABOVE),
                ..Limits::default()
            },
            tenants: BTreeMap::new(),
            named: BTreeMap::new(),
        }
    }
}

impl TenantLimits {
    /// `*:approve_above_usd=25,jobs_per_day=500;acme:usd_per_day=50`: entries
    /// separated by `;`, each a tenant (`*` for every tenant not named) and its
    /// limits as `name=value` separated by `,`. A value is a whole number (a
    /// dollar amount for `usd_*`), or `off`. The default keeps its approval
    /// threshold of [`DEFAULT_APPROVE_ABOVE`] unless `*` names another (or
    /// `off`). Tenant names may hold `:` (`key:alice`): the limits start after
    /// the last `:` before the first `=`.
    pub fn parse(raw: &str) -> Result<TenantLimits, String> {
        let mut out = TenantLimits::default();
        for entry in raw.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            let head_end = entry.find('=').unwrap_or(entry.len());
            let (tenant, limits) = entry[..head_end]
                .rfind(':')
                .map(|i| (&entry[..i], &entry[i + 1..]))
                .ok_or_else(|| {
                    format!("{entry:?}: write a tenant (or *), a ':', then name=value pairs")
                })?;
            let tenant = tenant.trim();
            if tenant.is_empty() {
                return Err(format!("{entry:?}: the tenant before ':' is empty"));
            }
            if out.named.contains_key(tenant) {
                return Err(format!("tenant {tenant:?} is given twice"));
            }
            let mut set = if tenant == "*" {
                out.default
            } else {
                Limits::default()
            };
            let mut named = [false; 7];
            for pair in limits.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let (name, value) = pair
                    .split_once('=')
                    .ok_or_else(|| format!("{tenant}: {pair:?} is not name=value"))?;
                let (name, value) = (name.trim(), value.trim());
                let i = LIMIT_NAMES.iter().position(|n| *n == name).ok_or_else(|| {
                    format!(
                        "{tenant}: no limit {name:?} (limits: {})",
                        LIMIT_NAMES.join(", ")
                    )
                })?;
                if named[i] {
                    return Err(format!("{tenant}: {name} is given twice"));
                }
                named[i] = true;
                set.set(i, value)
                    .map_err(|why| format!("{tenant}: {name}={value:?}: {why}"))?;
            }
            if tenant == "*" {
                out.default = set;
            } else {
                out.tenants.insert(tenant.to_owned(), set);
            }
            out.named.insert(tenant.to_owned(), named);
        }
        Ok(out)
    }

    /// The limits of `tenant`: its own entry's, the default's for what it does
    /// not name.
    pub fn of(&self, tenant: &str) -> Limits {
        let (Some(own), Some(named)) = (self.tenants.get(tenant), self.named.get(tenant)) else {
            return self.default;
        };
        let mut out = self.default;
        for (i, given) in named.iter().enumerate() {
            if *given {
                out.copy(i, own);
            }
        }
        out
    }

    /// The limits of every tenant without an entry of its own (`*`).
    pub fn default_limits(&self) -> Limits {
        self.default
    }

    /// The tenants with an entry of their own (bounded by the setting: the
    /// metrics label tenants by these, every other one as `other`).
    pub fn named(&self) -> impl Iterator<Item = &str> {
        self.tenants.keys().map(String::as_str)
    }
}

impl Limits {
    fn set(&mut self, i: usize, value: &str) -> Result<(), String> {
        let count = || -> Result<Option<u64>, String> {
            if value == "off" {
                return Ok(None);
            }
            value
                .parse::<u64>()
                .map(Some)
                .map_err(|_| "a whole number or off".to_owned())
        };
        let usd = || -> Result<Option<Micros>, String> {
            if value == "off" {
                return Ok(None);
            }
            match value.parse::<f64>() {
                Ok(v) if (0.0..=1e12).contains(&v) => Ok(Some(Micros::from_usd(v))),
                _ => Err("a dollar amount (0 or more) or off".to_owned()),
            }
        };
        match i {
            0 => self.slices_per_job = count()?,
            1 => self.slices_in_flight = count()?,
            2 => self.concurrent_jobs = count()?,
            3 => self.jobs_per_day = count()?,
            4 => self.spend_per_day = usd()?,
            5 => self.spend_per_month = usd()?,
            _ => self.approve_above = usd()?,
        }
        Ok(())
    }

    fn copy(&mut self, i: usize, from: &Limits) {
        match i {
            0 => self.slices_per_job = from.slices_per_job,
            1 => self.slices_in_flight = from.slices_in_flight,
            2 => self.concurrent_jobs = from.concurrent_jobs,
            3 => self.jobs_per_day = from.jobs_per_day,
            4 => self.spend_per_day = from.spend_per_day,
            5 => self.spend_per_month = from.spend_per_month,
            _ => self.approve_above = from.approve_above,
        }
    }
}

/// One UTC day of a tenant's jobs, as the store sums them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UsageDay {
    /// The day's first millisecond (UTC).
    pub day_ms: i64,
    /// Jobs created that day.
    pub jobs: u64,
    /// Their slices as planned so far.
    pub slices: u64,
    /// What they spent: the ledger's sum.
    pub spent: Micros,
    /// What they spent, unfinished jobs counted at their estimate when it is more:
    /// what a new job's spend is checked against.
    pub committed: Micros,
}

/// What a tenant has now, as the store counts it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Unfinished jobs.
    pub active_jobs: u64,
    /// Slices of unfinished jobs not yet done; a job not yet planned counts the
    /// most slices it can have.
    pub slices_in_flight: u64,
    /// The days asked for, oldest first; days without a job are left out.
    pub days: Vec<UsageDay>,
}

impl Usage {
    fn day(&self, day_ms: i64) -> UsageDay {
        self.days
            .iter()
            .find(|d| d.day_ms == day_ms)
            .copied()
            .unwrap_or_default()
    }

    /// The days from `from_ms` on, summed (as the day of `from_ms`).
    pub fn since(&self, from_ms: i64) -> UsageDay {
        self.days
            .iter()
            .filter(|d| d.day_ms >= from_ms)
            .fold(UsageDay::default(), |a, d| UsageDay {
                day_ms: from_ms,
                jobs: a.jobs + d.jobs,
                slices: a.slices + d.slices,
                spent: a.spent + d.spent,
                committed: a.committed + d.committed,
            })
    }
}

/// The first millisecond of the UTC day of `ms`.
pub fn day_start(ms: i64) -> i64 {
    ms - ms.rem_euclid(DAY_MS)
}

/// `YYYY-MM-DD`, the UTC date of `ms` (through humantime's RFC 3339 form).
pub fn date_of(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or_default());
    let mut text = humantime::format_rfc3339_seconds(at).to_string();
    text.truncate(10);
    text
}

/// The first millisecond of the UTC month of `ms`, and of the next month.
pub fn month_bounds(ms: i64) -> (i64, i64) {
    let date = date_of(ms);
    let year: i64 = date[..4].parse().unwrap_or(1970);
    let month: i64 = date[5..7].parse().unwrap_or(1);
    let first = |y: i64, m: i64| {
        humantime::parse_rfc3339(&format!("{y:04}-{m:02}-01T00:00:00Z"))
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as i64)
    };
    let next = if month == 12 {
        first(year + 1, 1)
    } else {
        first(year, month + 1)
    };
    (first(year, month), next)
}

/// A submission over one of its tenant's limits.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OverLimit {
    /// The limit's name ([`LIMIT_NAMES`]).
    pub limit: &'static str,
    /// The limit (a count, or dollars for `usd_*`).
    pub allowed: f64,
    /// What the tenant has now (before this job).
    pub used: f64,
    /// What this job asks for.
    pub requested: f64,
    /// For a limit that frees itself in time (in flight, concurrent, per day, per
    /// month): when to try again. `None` for a job too big to ever fit.
    #[serde(skip)]
    pub retry_after: Option<Duration>,
}

impl fmt::Display for OverLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = |v: f64| {
            if self.limit.starts_with("usd_") {
                format!("${v:.4}")
            } else {
                format!("{v}")
            }
        };
        write!(
            f,
            "the tenant's {} limit is {}: {} used, this job asks for {}",
            self.limit,
            unit(self.allowed),
            unit(self.used),
            unit(self.requested)
        )
    }
}

/// What a submission asks for, as quotas count it.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    /// The most slices the job can have.
    pub slices: u64,
    /// Its estimated cost.
    pub estimate: Micros,
}

/// Whether a job fits its tenant's limits at `now_ms`; the first limit it is
/// over otherwise. Sizes first (a job too big never fits), then rates.
pub fn check(
    limits: &Limits,
    usage: &Usage,
    job: Request,
    now_ms: i64,
) -> Result<(), Box<OverLimit>> {
    let over = |limit, allowed: f64, used: f64, requested: f64, retry: Option<Duration>| {
        Box::new(OverLimit {
            limit,
            allowed,
            used,
            requested,
            retry_after: retry,
        })
    };
    let usd = |m: Micros| m.usd();
    let today = day_start(now_ms);
    let (month, next_month) = month_bounds(now_ms);
    let until = |end: i64| Some(Duration::from_millis((end - now_ms).max(1000) as u64));
    if let Some(max) = limits.slices_per_job
        && job.slices > max
    {
        return Err(over(
            "slices_per_job",
            max as f64,
            0.0,
            job.slices as f64,
            None,
        ));
    }
    for (limit, max) in [
        ("usd_per_day", limits.spend_per_day),
        ("usd_per_month", limits.spend_per_month),
    ] {
        if let Some(max) = max
            && job.estimate > max
        {
            return Err(over(limit, usd(max), 0.0, usd(job.estimate), None));
        }
    }
    if let Some(max) = limits.slices_in_flight {
        if job.slices > max {
            return Err(over(
                "slices_in_flight",
                max as f64,
                usage.slices_in_flight as f64,
                job.slices as f64,
                None,
            ));
        }
        if usage.slices_in_flight.saturating_add(job.slices) > max {
            return Err(over(
                "slices_in_flight",
                max as f64,
                usage.slices_in_flight as f64,
                job.slices as f64,
                Some(Duration::from_secs(60)),
            ));
        }
    }
    if let Some(max) = limits.concurrent_jobs
        && usage.active_jobs >= max
    {
        return Err(over(
            "concurrent_jobs",
            max as f64,
            usage.active_jobs as f64,
            1.0,
            Some(Duration::from_secs(60)),
        ));
    }
    let day = usage.day(today);
    if let Some(max) = limits.jobs_per_day
        && day.jobs >= max
    {
        return Err(over(
            "jobs_per_day",
            max as f64,
            day.jobs as f64,
            1.0,
            until(today + DAY_MS),
        ));
    }
    if let Some(max) = limits.spend_per_day
        && day.committed + job.estimate > max
    {
        return Err(over(
            "usd_per_day",
            usd(max),
            usd(day.committed),
            usd(job.estimate),
            until(today + DAY_MS),
        ));
    }
    let this_month = usage.since(month);
    if let Some(max) = limits.spend_per_month
        && this_month.committed + job.estimate > max
    {
        return Err(over(
            "usd_per_month",
            usd(max),
            usd(this_month.committed),
            usd(job.estimate),
            until(next_month),
        ));
    }
    Ok(())
}

/// What is left of each limit that has one (`None`: no limit), for the usage
/// answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Remaining {
    pub slices_in_flight: Option<u64>,
    pub concurrent_jobs: Option<u64>,
    pub jobs_today: Option<u64>,
    pub usd_today: Option<f64>,
    pub usd_this_month: Option<f64>,
}

/// What is left of `limits` given `usage` at `now_ms`.
pub fn remaining(limits: &Limits, usage: &Usage, now_ms: i64) -> Remaining {
    let day = usage.day(day_start(now_ms));
    let month = usage.since(month_bounds(now_ms).0);
    let left = |max: Micros, used: Micros| Micros((max.0 - used.0).max(0)).usd();
    Remaining {
        slices_in_flight: limits
            .slices_in_flight
            .map(|m| m.saturating_sub(usage.slices_in_flight)),
        concurrent_jobs: limits
            .concurrent_jobs
            .map(|m| m.saturating_sub(usage.active_jobs)),
        jobs_today: limits.jobs_per_day.map(|m| m.saturating_sub(day.jobs)),
        usd_today: limits.spend_per_day.map(|m| left(m, day.committed)),
        usd_this_month: limits.spend_per_month.map(|m| left(m, month.committed)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_796_000_000_000; // 2026-11-30T..Z

    fn usage(active: u64, in_flight: u64, today_jobs: u64, today_committed: f64) -> Usage {
        Usage {
            active_jobs: active,
            slices_in_flight: in_flight,
            days: vec![UsageDay {
                day_ms: day_start(NOW),
                jobs: today_jobs,
                slices: 0,
                spent: Micros::ZERO,
                committed: Micros::from_usd(today_committed),
            }],
        }
    }

    fn job(slices: u64, usd: f64) -> Request {
        Request {
            slices,
            estimate: Micros::from_usd(usd),
        }
    }

    #[test]
    fn the_default_asks_approval_above_ten_dollars_and_limits_nothing_else() {
        let l = TenantLimits::default().of("anyone");
        assert_eq!(l.approve_above, Some(Micros::from_usd(10.0)));
        assert_eq!(
            l,
            Limits {
                approve_above: l.approve_above,
                ..Limits::default()
            }
        );
        assert!(check(&l, &usage(1000, 1 << 40, 1000, 1e9), job(1 << 30, 1e6), NOW).is_ok());
        let parsed = TenantLimits::parse("").unwrap();
        assert_eq!(parsed, TenantLimits::default());
    }

    #[test]
    fn a_tenant_entry_lays_over_the_default() {
        let t = TenantLimits::parse(
            "*:approve_above_usd=25,jobs_per_day=100; key:ci:slices_per_job=1000,approve_above_usd=off",
        )
        .unwrap();
        let other = t.of("acme");
        assert_eq!(other.approve_above, Some(Micros::from_usd(25.0)));
        assert_eq!(other.jobs_per_day, Some(100));
        assert_eq!(other.slices_per_job, None);
        let ci = t.of("key:ci");
        assert_eq!(ci.slices_per_job, Some(1000));
        assert_eq!(ci.jobs_per_day, Some(100), "not named: the default's");
        assert_eq!(ci.approve_above, None, "off overrides the default");
        assert_eq!(t.named().collect::<Vec<_>>(), ["key:ci"]);
    }

    #[test]
    fn bad_settings_are_refused_with_what_is_wrong() {
        for (raw, says) in [
            ("acme", "write a tenant"),
            (":jobs_per_day=1", "empty"),
            ("acme:jobs=1", "no limit \"jobs\""),
            ("acme:jobs_per_day=-1", "whole number"),
            ("acme:usd_per_day=ten", "dollar amount"),
            ("acme:jobs_per_day=1,jobs_per_day=2", "given twice"),
            ("acme:jobs_per_day=1;acme:concurrent_jobs=1", "given twice"),
            ("acme:jobs_per_day", "not name=value"),
        ] {
            let e = TenantLimits::parse(raw).unwrap_err();
            assert!(e.contains(says), "{raw}: {e}");
        }
    }

    #[test]
    fn sizes_are_refused_for_good_and_rates_until_they_free() {
        let l = Limits {
            slices_per_job: Some(100),
            slices_in_flight: Some(500),
            concurrent_jobs: Some(2),
            jobs_per_day: Some(10),
            spend_per_day: Some(Micros::from_usd(5.0)),
            spend_per_month: Some(Micros::from_usd(50.0)),
            approve_above: None,
        };
        let ok = usage(0, 0, 0, 0.0);
        assert!(check(&l, &ok, job(100, 1.0), NOW).is_ok());
        let e = check(&l, &ok, job(101, 1.0), NOW).unwrap_err();
        assert_eq!((e.limit, e.retry_after), ("slices_per_job", None));
        assert_eq!(e.requested, 101.0);
        let e = check(&l, &ok, job(1, 6.0), NOW).unwrap_err();
        assert_eq!((e.limit, e.retry_after), ("usd_per_day", None));

        let e = check(&l, &usage(0, 450, 0, 0.0), job(51, 0.1), NOW).unwrap_err();
        assert_eq!(e.limit, "slices_in_flight");
        assert!(e.retry_after.is_some());
        assert_eq!(e.used, 450.0);
        let e = check(&l, &usage(2, 0, 2, 0.0), job(1, 0.1), NOW).unwrap_err();
        assert_eq!(e.limit, "concurrent_jobs");
        let e = check(&l, &usage(0, 0, 10, 0.0), job(1, 0.1), NOW).unwrap_err();
        assert_eq!(e.limit, "jobs_per_day");
        let wait = e.retry_after.unwrap().as_millis() as i64;
        assert_eq!(
            NOW + wait,
            day_start(NOW) + DAY_MS,
            "until the next UTC day"
        );
        let e = check(&l, &usage(0, 0, 1, 4.5), job(1, 0.6), NOW).unwrap_err();
        assert_eq!(e.limit, "usd_per_day");
        assert!(
            e.to_string().contains("$5.0000") && e.to_string().contains("$4.5000"),
            "{e}"
        );
        assert!(check(&l, &usage(0, 0, 1, 4.5), job(1, 0.5), NOW).is_ok());
    }

    #[test]
    fn the_month_sums_its_days_only() {
        let l = Limits {
            spend_per_month: Some(Micros::from_usd(10.0)),
            ..Limits::default()
        };
        let (start, next) = month_bounds(NOW);
        let mut u = Usage::default();
        for (day_ms, usd) in [(start - DAY_MS, 100.0), (start, 4.0), (day_start(NOW), 5.0)] {
            u.days.push(UsageDay {
                day_ms,
                committed: Micros::from_usd(usd),
                ..UsageDay::default()
            });
        }
        assert!(check(&l, &u, job(1, 1.0), NOW).is_ok());
        let e = check(&l, &u, job(1, 1.01), NOW).unwrap_err();
        assert_eq!(e.limit, "usd_per_month");
        assert_eq!(NOW + e.retry_after.unwrap().as_millis() as i64, next);
        let r = remaining(&l, &u, NOW);
        assert_eq!(r.usd_this_month, Some(1.0));
    }

    #[test]
    fn months_are_calendar_months() {
        // 2024-02-29T12:00Z: a leap month, then March.
        let ms = 1_709_208_000_000;
        let (start, next) = month_bounds(ms);
        assert_eq!(start, 1_706_745_600_000); // 2024-02-01
        assert_eq!(next, 1_709_251_200_000); // 2024-03-01
        // December rolls over to January.
        let (start, next) = month_bounds(1_735_603_200_000); // 2024-12-31
        assert_eq!(start, 1_733_011_200_000); // 2024-12-01
        assert_eq!(next, 1_735_689_600_000); // 2025-01-01
        assert_eq!(day_start(1_709_208_000_000), 1_709_164_800_000);
        assert_eq!(date_of(1_709_208_000_000), "2024-02-29");
    }
}
