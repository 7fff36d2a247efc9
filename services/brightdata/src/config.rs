//! Where the API is, which zones to use, what requests cost.

use std::time::Duration;

use secrecy::SecretString;
use trawl_core::cost::PriceTable;

/// Bright Data client settings.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct BrightDataConfig {
    /// `BRIGHTDATA_API_URL`, default `https://api.brightdata.com`.
    pub api_url: String,
    /// `BRIGHTDATA_API_TOKEN`.
    pub token: SecretString,
    /// `BRIGHTDATA_UNLOCKER_ZONE`, default `web_unlocker1`.
    pub unlocker_zone: String,
    /// `BRIGHTDATA_SERP_ZONE`, default `serp_api1`.
    pub serp_zone: String,
    /// Whole-request timeout of one attempt (`BRIGHTDATA_TIMEOUT`, default 120s:
    /// an unlock may take a while).
    pub timeout: Duration,
    /// `TRAWL_PRICE_UNLOCKER_PER_1K` and `TRAWL_PRICE_SERP_PER_1K` in dollars,
    /// default 1.50 each; `TRAWL_PRICE_BROWSER_PER_GB`, default 8.40.
    pub prices: PriceTable,
}

pub const DEFAULT_API_URL: &str = "https://api.brightdata.com";

impl BrightDataConfig {
    pub fn new(api_url: impl Into<String>, token: impl Into<String>) -> BrightDataConfig {
        BrightDataConfig {
            api_url: api_url.into(),
            token: SecretString::from(token.into()),
            unlocker_zone: "web_unlocker1".into(),
            serp_zone: "serp_api1".into(),
            timeout: Duration::from_secs(120),
            prices: PriceTable::default(),
        }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn with_prices(mut self, prices: PriceTable) -> Self {
        self.prices = prices;
        self
    }

    pub fn with_zones(mut self, unlocker: impl Into<String>, serp: impl Into<String>) -> Self {
        self.unlocker_zone = unlocker.into();
        self.serp_zone = serp.into();
        self
    }

    /// Reads the settings from `lookup` (the process environment in production).
    /// `Ok(None)` when no token is set: the caller then uses the simulator.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<BrightDataConfig>, String> {
        let get = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let mut cfg = BrightDataConfig::new(
            get("BRIGHTDATA_API_URL").unwrap_or_else(|| DEFAULT_API_URL.into()),
            String::new(),
        );
        if let Some(z) = get("BRIGHTDATA_UNLOCKER_ZONE") {
            cfg.unlocker_zone = z;
        }
        if let Some(z) = get("BRIGHTDATA_SERP_ZONE") {
            cfg.serp_zone = z;
        }
        if let Some(t) = get("BRIGHTDATA_TIMEOUT") {
            cfg.timeout = humantime_like(&t)
                .ok_or_else(|| format!("BRIGHTDATA_TIMEOUT={t}: expected seconds, e.g. 60"))?;
        }
        cfg.prices = prices_from(&get)?;
        match get("BRIGHTDATA_API_TOKEN") {
            Some(t) => {
                cfg.token = SecretString::from(t);
                Ok(Some(cfg))
            }
            None => Ok(None),
        }
    }
}

/// The price table from `TRAWL_PRICE_*_PER_1K`, defaults where unset.
pub fn prices_from(get: &dyn Fn(&str) -> Option<String>) -> Result<PriceTable, String> {
    let read = |k: &str, default: f64| -> Result<f64, String> {
        match get(k) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| format!("{k}={v}: expected dollars per 1,000 requests, e.g. 1.50")),
        }
    };
    let browser = match get("TRAWL_PRICE_BROWSER_PER_GB") {
        None => None,
        Some(v) => Some(
            v.trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| {
                    format!("TRAWL_PRICE_BROWSER_PER_GB={v}: expected dollars per GB, e.g. 8.40")
                })?,
        ),
    };
    let table = PriceTable::per_thousand(
        read("TRAWL_PRICE_UNLOCKER_PER_1K", 1.5)?,
        read("TRAWL_PRICE_SERP_PER_1K", 1.5)?,
    );
    Ok(match browser {
        Some(usd) => table.with_browser_per_gb(usd),
        None => table,
    })
}

fn humantime_like(s: &str) -> Option<Duration> {
    s.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use secrecy::ExposeSecret;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn no_token_means_simulator() {
        assert!(BrightDataConfig::from_lookup(env(&[])).unwrap().is_none());
        assert!(
            BrightDataConfig::from_lookup(env(&[("BRIGHTDATA_API_TOKEN", " ")]))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn everything_is_configurable() {
        let c = BrightDataConfig::from_lookup(env(&[
            ("BRIGHTDATA_API_TOKEN", "t0k"),
            ("BRIGHTDATA_API_URL", "http://127.0.0.1:9"),
            ("BRIGHTDATA_UNLOCKER_ZONE", "u1"),
            ("BRIGHTDATA_SERP_ZONE", "s1"),
            ("TRAWL_PRICE_UNLOCKER_PER_1K", "3"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(c.token.expose_secret(), "t0k");
        assert_eq!(c.api_url, "http://127.0.0.1:9");
        assert_eq!(
            (c.unlocker_zone.as_str(), c.serp_zone.as_str()),
            ("u1", "s1")
        );
        assert_eq!(c.prices.unlocker.0, 3_000);
        assert_eq!(c.prices.serp.0, 1_500);
    }

    #[test]
    fn bad_prices_are_refused() {
        let e = BrightDataConfig::from_lookup(env(&[("TRAWL_PRICE_SERP_PER_1K", "cheap")]))
            .unwrap_err();
        assert!(e.contains("TRAWL_PRICE_SERP_PER_1K"), "{e}");
    }
}
