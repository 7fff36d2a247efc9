//! Country codes (ISO 3166-1 alpha-2, lower case) as a validated newtype.

use std::fmt;

use serde::{Deserialize, Serialize};

/// All officially assigned ISO 3166-1 alpha-2 codes, lower case, sorted.
const CODES: &str = "ad ae af ag ai al am ao aq ar as at au aw ax az ba bb bd be bf bg bh bi bj bl bm bn bo bq br bs bt bv bw by bz ca cc cd cf cg ch ci ck cl cm cn co cr cu cv cw cx cy cz de dj dk dm do dz ec ee eg eh er es et fi fj fk fm fo fr ga gb gd ge gf gg gh gi gl gm gn gp gq gr gs gt gu gw gy hk hm hn hr ht hu id ie il im in io iq ir is it je jm jo jp ke kg kh ki km kn kp kr kw ky kz la lb lc li lk lr ls lt lu lv ly ma mc md me mf mg mh mk ml mm mn mo mp mq mr ms mt mu mv mw mx my mz na nc ne nf ng ni nl no np nr nu nz om pa pe pf pg ph pk pl pm pn pr ps pt pw py qa re ro rs ru rw sa sb sc sd se sg sh si sj sk sl sm sn so sr ss st sv sx sy sz tc td tf tg th tj tk tl tm tn to tr tt tv tw tz ua ug um us uy uz va vc ve vg vi vn vu wf ws ye yt za zm zw";

/// A country a request is made from.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Geo([u8; 2]);

impl Geo {
    /// Parses a lower-case ISO 3166-1 alpha-2 code.
    pub fn parse(s: &str) -> Result<Geo, String> {
        let b = s.as_bytes();
        if b.len() == 2 && CODES.split(' ').any(|c| c == s) {
            return Ok(Geo([b[0], b[1]]));
        }
        let lower = s.to_ascii_lowercase();
        if lower != s && CODES.split(' ').any(|c| c == lower) {
            return Err(format!(
                "\"{s}\" must be lower case ISO 3166-1 alpha-2 (\"{lower}\")"
            ));
        }
        Err(format!("\"{s}\" is not an ISO 3166-1 alpha-2 country code"))
    }

    /// Every assigned code, in order.
    pub fn all() -> impl Iterator<Item = Geo> {
        CODES.split(' ').filter_map(|c| Geo::parse(c).ok())
    }

    pub fn as_str(&self) -> &str {
        // Both bytes come from CODES, which is ASCII.
        std::str::from_utf8(&self.0).unwrap_or("??")
    }
}

impl TryFrom<String> for Geo {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Geo::parse(&s)
    }
}

impl From<Geo> for String {
    fn from(g: Geo) -> String {
        g.as_str().to_owned()
    }
}

impl fmt::Display for Geo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Geo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Geo({})", self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_assigned_lower_case_codes() {
        for c in ["us", "de", "jp", "gb", "zw"] {
            assert_eq!(Geo::parse(c).map(|g| g.to_string()), Ok(c.to_owned()));
        }
    }

    #[test]
    fn rejects_upper_case_unassigned_and_long_codes() {
        assert!(Geo::parse("US").unwrap_err().contains("lower case"));
        assert!(Geo::parse("xx").is_err());
        assert!(Geo::parse("usa").is_err());
        assert!(Geo::parse("").is_err());
        assert!(Geo::parse("uk").is_err(), "uk is not assigned; gb is");
    }
}
