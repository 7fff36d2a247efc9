//! Product pages for the Web Unlocker zone.
//!
//! A page is a pure function of (normalized url, country): the product (name, SKU,
//! base price) comes from the url, the offer (price, currency) from the country. About
//! 5% of urls, chosen by the url alone so every country agrees, carry a defect in
//! their offer so that item validation has something to reject.
//!
//! Pages are built with `format!`: at thousands of requests a second a template
//! engine would be the most expensive part of the simulator.

use url::Url;

use crate::escape;
use crate::seed;

/// Host of the shop the SERP results link to; its `/p/<slug>` pages are named after
/// the slug, so a result's title and its page's `<h1>` agree.
pub(crate) const SHOP_HOST: &str = "shop.example";

const BRANDS: [&str; 16] = [
    "Nordwind", "Acme", "Kestrel", "Larkspur", "Orbit", "Pioneer", "Quill", "Redwood", "Summit",
    "Tideline", "Umbra", "Vantage", "Willow", "Yarrow", "Zephyr", "Harbor",
];
const ADJECTIVES: [&str; 12] = [
    "Compact",
    "Classic",
    "Cordless",
    "Foldable",
    "Insulated",
    "Modular",
    "Portable",
    "Quiet",
    "Rugged",
    "Slim",
    "Smart",
    "Wireless",
];
const NOUNS: [&str; 16] = [
    "Kettle",
    "Backpack",
    "Desk Lamp",
    "Espresso Grinder",
    "Headphones",
    "Blender",
    "Water Bottle",
    "Keyboard",
    "Running Shoes",
    "Toaster",
    "Camera Bag",
    "Air Purifier",
    "Chef Knife",
    "Office Chair",
    "Rice Cooker",
    "Bike Light",
];
pub(crate) const FEATURES: [&str; 10] = [
    "built to last with a two-year warranty",
    "rated 4.6 out of 5 by verified buyers",
    "lightweight and easy to clean",
    "energy efficient with an auto-off timer",
    "made from recycled materials",
    "includes a travel pouch",
    "tested for daily use",
    "available in three colours",
    "designed for small spaces",
    "ships in plastic-free packaging",
];

/// How a country is charged: its currency and a price factor, in thousandths of a
/// minor currency unit per US cent (so it folds exchange rate and regional pricing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Market {
    pub currency: &'static str,
    pub permille: u64,
    /// Digits after the decimal point: 2, or 0 for JPY.
    pub decimals: u8,
}

impl Market {
    pub fn of(country: &str) -> Market {
        let (currency, permille, decimals) = match country {
            "us" => ("USD", 1000, 2),
            "gb" => ("GBP", 820, 2),
            "de" => ("EUR", 960, 2),
            "fr" => ("EUR", 985, 2),
            "es" => ("EUR", 940, 2),
            "it" => ("EUR", 955, 2),
            "nl" => ("EUR", 990, 2),
            "jp" => ("JPY", 1520, 0),
            other => {
                // Everywhere else pays US dollars with its own regional factor, 0.92..=1.12.
                let b = other.as_bytes();
                let mix = b.iter().fold(0u64, |acc, &x| acc * 31 + u64::from(x));
                ("USD", 920 + mix % 201, 2)
            }
        };
        Market {
            currency,
            permille,
            decimals,
        }
    }

    /// The price, in minor units, of something that costs `base_cents` in the US:
    /// `.99` prices for two-decimal currencies, round tens for yen.
    pub fn price_minor(&self, base_cents: u64) -> u64 {
        let raw = (base_cents * self.permille + 500) / 1000;
        if self.decimals == 0 {
            ((raw + 5) / 10 * 10).max(10)
        } else {
            raw / 100 * 100 + 99
        }
    }

    /// `minor` written as a JSON number with this currency's decimals.
    pub fn format(&self, minor: u64) -> String {
        if self.decimals == 0 {
            minor.to_string()
        } else {
            format!("{}.{:02}", minor / 100, minor % 100)
        }
    }
}

/// A deliberate flaw in a page's offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Defect {
    MissingPrice,
    NegativePrice,
    LowercaseCurrency,
}

impl Defect {
    /// The defect of the page at `url` (normalized), if it has one: about one page in
    /// twenty, decided by the url alone.
    pub fn of(url: &str) -> Option<Defect> {
        let w = seed::word(&seed::digest(&["defect", url]), 0);
        if w % 1000 >= 50 {
            return None;
        }
        Some(match (w / 1000) % 3 {
            0 => Defect::MissingPrice,
            1 => Defect::NegativePrice,
            _ => Defect::LowercaseCurrency,
        })
    }
}

/// One product page, ready to render.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProductPage {
    pub url: String,
    pub name: String,
    pub sku: String,
    pub description: String,
    /// The price as a JSON number, `None` when the page has no price.
    pub price: Option<String>,
    pub currency: String,
    pub country: String,
}

impl ProductPage {
    /// The page at `url` as seen from `country` (lower-case ISO 3166-1 alpha-2).
    pub fn new(url: &Url, country: &str) -> ProductPage {
        let d = seed::digest(&["product", url.as_str()]);
        let (w0, w1, w2) = (seed::word(&d, 0), seed::word(&d, 1), seed::word(&d, 2));
        let name = name_from_slug(url).unwrap_or_else(|| {
            format!(
                "{} {} {}",
                BRANDS[(w0 % 16) as usize],
                ADJECTIVES[((w0 >> 8) % 12) as usize],
                NOUNS[((w0 >> 16) % 16) as usize]
            )
        });
        let letter = |n: u64| char::from(b'A' + (n % 26) as u8);
        let sku = format!(
            "{}{}-{:04}",
            letter(w1),
            letter(w1 >> 8),
            1000 + (w1 >> 16) % 9000
        );
        let description = format!(
            "{name}: {}. Ships within {} business days.",
            FEATURES[(w2 % FEATURES.len() as u64) as usize],
            1 + (w2 >> 8) % 5
        );
        let base_cents = 499 + (w2 >> 16) % 49_501;

        let market = Market::of(country);
        let minor = market.price_minor(base_cents);
        let (price, currency) = match Defect::of(url.as_str()) {
            None => (Some(market.format(minor)), market.currency.to_owned()),
            Some(Defect::MissingPrice) => (None, market.currency.to_owned()),
            Some(Defect::NegativePrice) => (
                Some(format!("-{}", market.format(minor))),
                market.currency.to_owned(),
            ),
            Some(Defect::LowercaseCurrency) => (
                Some(market.format(minor)),
                market.currency.to_ascii_lowercase(),
            ),
        };
        ProductPage {
            url: url.as_str().to_owned(),
            name,
            sku,
            description,
            price,
            currency,
            country: country.to_owned(),
        }
    }

    /// The schema.org `Product` as JSON-LD, safe inside a `<script>` element.
    pub fn json_ld(&self) -> String {
        let price = match &self.price {
            Some(p) => format!("\"price\":{p},"),
            None => String::new(),
        };
        format!(
            concat!(
                "{{\"@context\":\"https://schema.org\",\"@type\":\"Product\",",
                "\"name\":{name},\"sku\":{sku},\"description\":{desc},\"url\":{url},",
                "\"offers\":{{\"@type\":\"Offer\",{price}\"priceCurrency\":{cur},",
                "\"availability\":\"https://schema.org/InStock\"}}}}"
            ),
            name = escape::json(&self.name),
            sku = escape::json(&self.sku),
            desc = escape::json(&self.description),
            url = escape::json(&self.url),
            price = price,
            cur = escape::json(&self.currency),
        )
    }

    pub fn html(&self) -> String {
        let name = escape::html(&self.name);
        let price = match &self.price {
            Some(p) => format!(
                "<p class=\"price\"><span class=\"amount\">{p}</span> <span class=\"currency\">{}</span></p>\n",
                escape::html(&self.currency)
            ),
            None => String::new(),
        };
        format!(
            concat!(
                "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
                "<title>{name} | Shop Example</title>\n",
                "<link rel=\"canonical\" href=\"{url}\">\n",
                "<script type=\"application/ld+json\">{ld}</script>\n",
                "</head>\n<body>\n<main class=\"product\" data-country=\"{country}\">\n",
                "<h1>{name}</h1>\n<p>SKU: {sku}</p>\n{price}",
                "<p class=\"description\">{desc}</p>\n",
                "</main>\n</body>\n</html>\n"
            ),
            name = name,
            url = escape::html(&self.url),
            ld = self.json_ld(),
            country = escape::html(&self.country),
            sku = escape::html(&self.sku),
            price = price,
            desc = escape::html(&self.description),
        )
    }

    /// The page as Bright Data's `data_format: "markdown"` would render it: text only,
    /// no script.
    pub fn markdown(&self) -> String {
        let price = match &self.price {
            Some(p) => format!("**Price:** {p} {}\n\n", escape::markdown(&self.currency)),
            None => String::new(),
        };
        format!(
            "# {name}\n\nSKU: {sku}\n\n{price}{desc}\n",
            name = escape::markdown(&self.name),
            sku = escape::markdown(&self.sku),
            desc = escape::markdown(&self.description),
        )
    }
}

/// `https://shop.example/p/nordwind-espresso-grinder-3f2a` is named "Nordwind
/// Espresso Grinder" (the trailing 4-hex-digit id is dropped).
fn name_from_slug(url: &Url) -> Option<String> {
    if url.host_str() != Some(SHOP_HOST) {
        return None;
    }
    let mut segs = url.path_segments()?;
    let (Some("p"), Some(slug), None) = (segs.next(), segs.next(), segs.next()) else {
        return None;
    };
    if slug.is_empty()
        || slug.len() > 120
        || !slug
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return None;
    }
    let mut words: Vec<&str> = slug.split('-').filter(|w| !w.is_empty()).collect();
    if words.len() > 1
        && words
            .last()
            .is_some_and(|w| w.len() == 4 && w.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        words.pop();
    }
    if words.is_empty() {
        return None;
    }
    let titled: Vec<String> = words
        .iter()
        .map(|w| {
            let mut cs = w.chars();
            cs.next()
                .map(|c| c.to_ascii_uppercase().to_string() + cs.as_str())
                .unwrap_or_default()
        })
        .collect();
    Some(titled.join(" "))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn page(url: &str, country: &str) -> ProductPage {
        ProductPage::new(&Url::parse(url).unwrap(), country)
    }

    #[test]
    fn prices_follow_the_market() {
        let us = Market::of("us");
        assert_eq!(us.price_minor(1234), 1299);
        assert_eq!(us.format(1299), "12.99");
        let jp = Market::of("jp");
        assert_eq!(jp.price_minor(1234), 1880);
        assert_eq!(jp.format(1880), "1880");
        assert_eq!(Market::of("fr").currency, "EUR");
        assert_eq!(Market::of("gb").currency, "GBP");
        let br = Market::of("br");
        assert_eq!(br.currency, "USD");
        assert!((920..=1120).contains(&br.permille));
    }

    #[test]
    fn pages_are_deterministic_and_named_after_shop_slugs() {
        let a = page(
            "https://shop.example/p/nordwind-espresso-grinder-3f2a",
            "de",
        );
        assert_eq!(
            a,
            page(
                "https://shop.example/p/nordwind-espresso-grinder-3f2a",
                "de"
            )
        );
        assert_eq!(a.name, "Nordwind Espresso Grinder");
        let other = page("https://example.org/item?id=7", "us");
        assert!(!other.name.is_empty());
        assert!(
            other.sku.len() == 7 && other.sku.as_bytes()[2] == b'-',
            "{}",
            other.sku
        );
    }

    #[test]
    fn every_defect_occurs_and_every_country_agrees() {
        let mut seen = [0; 3];
        for i in 0..2000 {
            let url = format!("https://shop.example/p/item-{i}");
            let Some(d) = Defect::of(&url) else { continue };
            seen[d as usize] += 1;
            let (us, jp) = (page(&url, "us"), page(&url, "jp"));
            match d {
                Defect::MissingPrice => assert!(us.price.is_none() && jp.price.is_none()),
                Defect::NegativePrice => assert!(
                    us.price.as_deref().unwrap().starts_with('-')
                        && jp.price.as_deref().unwrap().starts_with('-')
                ),
                Defect::LowercaseCurrency => {
                    assert_eq!((us.currency.as_str(), jp.currency.as_str()), ("usd", "jpy"))
                }
            }
        }
        assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    }

    #[test]
    fn json_ld_parses_with_and_without_price() {
        for i in 0..200 {
            let p = page(&format!("https://shop.example/p/x-{i}?q=\"</script>"), "us");
            let v: serde_json::Value = serde_json::from_str(&p.json_ld()).unwrap();
            assert_eq!(v["@type"], "Product");
            assert_eq!(v["offers"]["price"].is_number(), p.price.is_some());
            assert!(!p.html().contains("\"</script>"));
        }
    }
}
