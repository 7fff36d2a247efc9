//! What the simulator does: zones, token, latency and fault shares.
//!
//! Everything is checked once, here, so the request path never meets a share of 1.3
//! or a latency it cannot sleep.

use std::time::Duration;

/// Environment variable with the fault shares, e.g. `429=0.05,502=0.05,timeout=0.02`.
pub const FAULTS_VAR: &str = "TRAWL_SIM_FAULTS";
/// Environment variable with the latency added to every answer, e.g. `20ms`.
pub const LATENCY_VAR: &str = "TRAWL_SIM_LATENCY";

/// A configuration value that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("fault entry \"{0}\" is not KEY=SHARE (e.g. 429=0.05)")]
    MalformedFault(String),
    #[error("unknown fault \"{0}\": expected 429, 502 or timeout")]
    UnknownFault(String),
    #[error("fault {fault} is given twice")]
    DuplicateFault { fault: String },
    #[error("fault {fault}: \"{value}\" is not a number")]
    BadShare { fault: String, value: String },
    #[error("fault {fault}: share {share} is outside 0..=1")]
    ShareOutOfRange { fault: String, share: f64 },
    #[error("fault shares sum to {0}, above 1")]
    SharesAboveOne(f64),
    #[error("\"{value}\" is not a duration (e.g. 20ms, 1s): {reason}")]
    BadDuration { value: String, reason: String },
    #[error("{var} is not valid Unicode")]
    NotUnicode { var: String },
    #[error("{var}: {error}")]
    InVar {
        var: String,
        error: Box<ConfigError>,
    },
}

/// Shares of requests answered with a fault instead of a page, each in `0..=1`,
/// together at most 1. The default injects nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Faults {
    /// Share answered `429` with `Retry-After` (`sr_rate_limit`).
    pub rate_429: f64,
    /// Share answered `502` (`reject_block`).
    pub rate_502: f64,
    /// Share held without an answer for [`SimConfig::hang`].
    pub rate_timeout: f64,
}

impl Faults {
    /// No faults at all.
    pub const NONE: Faults = Faults {
        rate_429: 0.0,
        rate_502: 0.0,
        rate_timeout: 0.0,
    };

    /// Parses `429=0.05,502=0.05,timeout=0.02`. Keys may be left out (share 0), the
    /// empty string means no faults.
    pub fn parse(s: &str) -> Result<Faults, ConfigError> {
        let mut faults = Faults::NONE;
        let mut seen = [false; 3];
        for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (key, value) = entry
                .split_once('=')
                .ok_or_else(|| ConfigError::MalformedFault(entry.to_owned()))?;
            let (key, value) = (key.trim(), value.trim());
            let (slot, idx) = match key {
                "429" => (&mut faults.rate_429, 0),
                "502" => (&mut faults.rate_502, 1),
                "timeout" => (&mut faults.rate_timeout, 2),
                other => return Err(ConfigError::UnknownFault(other.to_owned())),
            };
            if std::mem::replace(&mut seen[idx], true) {
                return Err(ConfigError::DuplicateFault {
                    fault: key.to_owned(),
                });
            }
            let share: f64 = value.parse().map_err(|_| ConfigError::BadShare {
                fault: key.to_owned(),
                value: value.to_owned(),
            })?;
            if !(0.0..=1.0).contains(&share) {
                return Err(ConfigError::ShareOutOfRange {
                    fault: key.to_owned(),
                    share,
                });
            }
            *slot = share;
        }
        let sum = faults.total();
        // A little slack so that 0.1 + 0.2 + 0.7 is accepted.
        if sum > 1.0 + 1e-9 {
            return Err(ConfigError::SharesAboveOne(sum));
        }
        Ok(faults)
    }

    /// The share of requests that get any fault.
    pub fn total(&self) -> f64 {
        self.rate_429 + self.rate_502 + self.rate_timeout
    }

    /// The fault for a roll `r` drawn uniformly from `0..1`, if any.
    pub(crate) fn pick(&self, r: f64) -> Option<Fault> {
        if r < self.rate_429 {
            Some(Fault::RateLimited)
        } else if r < self.rate_429 + self.rate_502 {
            Some(Fault::BadGateway)
        } else if r < self.total() {
            Some(Fault::Timeout)
        } else {
            None
        }
    }
}

/// A fault injected in place of a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    RateLimited,
    BadGateway,
    Timeout,
}

/// Parses a latency such as `20ms`, `1s` or `0` (humantime syntax).
pub fn parse_latency(s: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(s.trim()).map_err(|e| ConfigError::BadDuration {
        value: s.to_owned(),
        reason: e.to_string(),
    })
}

/// How the simulator behaves. The default answers every well-formed request at once,
/// accepts any bearer token and knows the zones `web_unlocker1` and `serp_api1`.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Waited before every answer (not before a simulated timeout).
    pub latency: Duration,
    /// Shares of injected faults.
    pub faults: Faults,
    /// The `Retry-After` of a `429`, in seconds.
    pub retry_after_secs: u64,
    /// How long a simulated timeout holds the request before giving up on it.
    pub hang: Duration,
    /// The only bearer token accepted; `None` accepts any non-empty token.
    pub token: Option<String>,
    /// The Web Unlocker zone.
    pub unlocker_zone: String,
    /// The SERP API zone.
    pub serp_zone: String,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            latency: Duration::ZERO,
            faults: Faults::NONE,
            retry_after_secs: 1,
            hang: Duration::from_secs(60),
            token: None,
            unlocker_zone: "web_unlocker1".to_owned(),
            serp_zone: "serp_api1".to_owned(),
        }
    }
}

impl SimConfig {
    pub fn with_latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    pub fn with_retry_after_secs(mut self, secs: u64) -> Self {
        self.retry_after_secs = secs;
        self
    }

    pub fn with_hang(mut self, hang: Duration) -> Self {
        self.hang = hang;
        self
    }

    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    pub fn with_zones(mut self, unlocker: impl Into<String>, serp: impl Into<String>) -> Self {
        self.unlocker_zone = unlocker.into();
        self.serp_zone = serp.into();
        self
    }

    /// The default configuration with [`FAULTS_VAR`] and [`LATENCY_VAR`] applied.
    pub fn from_env() -> Result<SimConfig, ConfigError> {
        for var in [FAULTS_VAR, LATENCY_VAR] {
            if let Err(std::env::VarError::NotUnicode(_)) = std::env::var(var) {
                return Err(ConfigError::NotUnicode {
                    var: var.to_owned(),
                });
            }
        }
        SimConfig::from_lookup(|var| std::env::var(var).ok())
    }

    /// Like [`SimConfig::from_env`], reading variables through `get` (for tests and
    /// for callers with their own configuration source).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<SimConfig, ConfigError> {
        let in_var = |var: &str| {
            let var = var.to_owned();
            move |e| ConfigError::InVar {
                var,
                error: Box::new(e),
            }
        };
        let mut config = SimConfig::default();
        if let Some(v) = get(FAULTS_VAR) {
            config.faults = Faults::parse(&v).map_err(in_var(FAULTS_VAR))?;
        }
        if let Some(v) = get(LATENCY_VAR).filter(|v| !v.trim().is_empty()) {
            config.latency = parse_latency(&v).map_err(in_var(LATENCY_VAR))?;
        }
        Ok(config)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_keys_and_the_empty_string() {
        let f = Faults::parse("429=0.05, 502=0.05,timeout=0.02,").unwrap();
        assert_eq!(
            f,
            Faults {
                rate_429: 0.05,
                rate_502: 0.05,
                rate_timeout: 0.02
            }
        );
        assert_eq!(Faults::parse("").unwrap(), Faults::NONE);
        assert_eq!(Faults::parse("  ").unwrap(), Faults::NONE);
        assert_eq!(Faults::parse("502=1").unwrap().rate_502, 1.0);
        assert!(Faults::parse("429=0.1,502=0.2,timeout=0.7").is_ok());
    }

    #[test]
    fn refuses_bad_fault_specs_with_a_clear_error() {
        let err = |s: &str| Faults::parse(s).unwrap_err();
        assert_eq!(err("500=0.1"), ConfigError::UnknownFault("500".into()));
        assert!(
            err("500=0.1")
                .to_string()
                .contains("expected 429, 502 or timeout")
        );
        assert_eq!(err("429"), ConfigError::MalformedFault("429".into()));
        assert!(matches!(err("429=lots"), ConfigError::BadShare { .. }));
        assert!(matches!(
            err("429=1.5"),
            ConfigError::ShareOutOfRange { .. }
        ));
        assert!(matches!(
            err("429=-0.1"),
            ConfigError::ShareOutOfRange { .. }
        ));
        assert!(matches!(
            err("429=NaN"),
            ConfigError::ShareOutOfRange { .. }
        ));
        assert!(matches!(
            err("429=0.6,502=0.5"),
            ConfigError::SharesAboveOne(_)
        ));
        assert!(err("429=0.6,502=0.5").to_string().contains("above 1"));
        assert!(matches!(
            err("429=0.1,429=0.2"),
            ConfigError::DuplicateFault { .. }
        ));
    }

    #[test]
    fn picks_faults_by_share() {
        let f = Faults::parse("429=0.25,502=0.25,timeout=0.25").unwrap();
        assert_eq!(f.pick(0.0), Some(Fault::RateLimited));
        assert_eq!(f.pick(0.3), Some(Fault::BadGateway));
        assert_eq!(f.pick(0.6), Some(Fault::Timeout));
        assert_eq!(f.pick(0.9), None);
        assert_eq!(Faults::NONE.pick(0.0), None);
        assert_eq!(
            Faults::parse("timeout=1").unwrap().pick(0.999_999),
            Some(Fault::Timeout)
        );
    }

    #[test]
    fn parses_latencies() {
        assert_eq!(parse_latency("20ms").unwrap(), Duration::from_millis(20));
        assert_eq!(parse_latency("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_latency("0").unwrap(), Duration::ZERO);
        assert!(matches!(
            parse_latency("fast"),
            Err(ConfigError::BadDuration { .. })
        ));
    }

    #[test]
    fn reads_variables_and_names_the_bad_one() {
        let config = SimConfig::from_lookup(|var| match var {
            FAULTS_VAR => Some("429=0.5".into()),
            LATENCY_VAR => Some("5ms".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(config.faults.rate_429, 0.5);
        assert_eq!(config.latency, Duration::from_millis(5));

        assert_eq!(
            SimConfig::from_lookup(|_| None).unwrap(),
            SimConfig::default()
        );

        let err =
            SimConfig::from_lookup(|var| (var == LATENCY_VAR).then(|| "soon".into())).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("TRAWL_SIM_LATENCY: \"soon\" is not a duration"),
            "{err}"
        );
        let err =
            SimConfig::from_lookup(|var| (var == FAULTS_VAR).then(|| "418=1".into())).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("TRAWL_SIM_FAULTS: unknown fault"),
            "{err}"
        );
    }
}
