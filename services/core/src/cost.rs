//! Money: integer micro-dollars, never floats, and the price table.

use serde::{Deserialize, Serialize};

/// An amount of US dollars in millionths.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Micros(pub i64);

impl Micros {
    pub const ZERO: Micros = Micros(0);

    /// From a dollar amount as written by a user (rounded to the nearest micro-dollar).
    pub fn from_usd(usd: f64) -> Micros {
        Micros((usd * 1_000_000.0).round() as i64)
    }

    /// For display and JSON output only; sums are always taken in micros.
    pub fn usd(self) -> f64 {
        self.0 as f64 / 1_000_000.0
    }

    pub fn saturating_mul(self, n: u64) -> Micros {
        Micros(self.0.saturating_mul(i64::try_from(n).unwrap_or(i64::MAX)))
    }
}

impl std::ops::Add for Micros {
    type Output = Micros;
    fn add(self, o: Micros) -> Micros {
        Micros(self.0.saturating_add(o.0))
    }
}

impl std::iter::Sum for Micros {
    fn sum<I: Iterator<Item = Micros>>(iter: I) -> Micros {
        iter.fold(Micros::ZERO, |a, b| a + b)
    }
}

impl std::fmt::Display for Micros {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "${:.4}", self.usd())
    }
}

/// The billable products and what one successful request of each costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriceTable {
    /// Web Unlocker, per successful request.
    pub unlocker: Micros,
    /// SERP API, per successful request.
    pub serp: Micros,
    /// Scraping Browser, per GB transferred (1e9 bytes).
    #[serde(default = "default_browser_per_gb")]
    pub browser_per_gb: Micros,
}

/// $8.40 per GB, the Scraping Browser's pay-as-you-go price when this was written;
/// `TRAWL_PRICE_BROWSER_PER_GB` sets a contract's.
const BROWSER_PER_GB: Micros = Micros(8_400_000);

fn default_browser_per_gb() -> Micros {
    BROWSER_PER_GB
}

impl Default for PriceTable {
    /// Bright Data's pay-as-you-go list price: $1.50 per 1,000 successful requests.
    fn default() -> Self {
        PriceTable {
            unlocker: Micros(1_500),
            serp: Micros(1_500),
            browser_per_gb: BROWSER_PER_GB,
        }
    }
}

impl PriceTable {
    /// Price table from dollars per 1,000 requests.
    pub fn per_thousand(unlocker_usd: f64, serp_usd: f64) -> PriceTable {
        PriceTable {
            unlocker: Micros::from_usd(unlocker_usd / 1000.0),
            serp: Micros::from_usd(serp_usd / 1000.0),
            browser_per_gb: BROWSER_PER_GB,
        }
    }

    /// The browser price from dollars per GB.
    pub fn with_browser_per_gb(mut self, usd: f64) -> PriceTable {
        self.browser_per_gb = Micros::from_usd(usd);
        self
    }

    /// What `bytes` of browser traffic cost, rounded up to the micro-dollar.
    pub fn browser_bytes(&self, bytes: u64) -> Micros {
        let m = i128::from(self.browser_per_gb.0.max(0)) * i128::from(bytes);
        Micros(
            i64::try_from(m.div_euclid(1_000_000_000) + i128::from(m % 1_000_000_000 != 0))
                .unwrap_or(i64::MAX),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_price_is_one_fifty_per_thousand() {
        let p = PriceTable::default();
        assert_eq!(p.unlocker.saturating_mul(1000), Micros::from_usd(1.50));
        assert_eq!(PriceTable::per_thousand(1.5, 1.5), p);
    }

    #[test]
    fn browser_traffic_is_billed_per_gb_rounded_up() {
        let p = PriceTable::default();
        assert_eq!(p.browser_bytes(1_000_000_000), Micros::from_usd(8.40));
        assert_eq!(p.browser_bytes(0), Micros(0));
        // 1 byte at $8.40/GB is 0.0084 micro-dollars: billed as 1.
        assert_eq!(p.browser_bytes(1), Micros(1));
        assert_eq!(
            p.with_browser_per_gb(5.0).browser_bytes(2_000_000),
            Micros(10_000)
        );
    }

    #[test]
    fn sums_are_exact_in_micros() {
        let total: Micros = std::iter::repeat_n(Micros(1_500), 3333).sum();
        assert_eq!(total, Micros(4_999_500));
        assert_eq!(format!("{total}"), "$4.9995");
    }
}
