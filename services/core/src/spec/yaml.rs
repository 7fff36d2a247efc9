//! A YAML document read into the JSON value the checker walks.
//!
//! `serde_json::Value`'s own `Deserialize` refuses an integer that fits
//! neither `i64` nor `u64` ("JSON number out of range"), which YAML hands over
//! as an `i128`/`u128`. A JSON body with such an integer is read by
//! `serde_json`, which (without `arbitrary_precision`) makes it an `f64`; this
//! reader does the same, so a document means one thing in either format and
//! what it holds is judged by the checker (a field that wants a whole number
//! refuses the float with a field error), not by the parser. Everything else
//! is as `serde_json::Value` reads it: a non-finite float is `null`, keys are
//! strings.

use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// The JSON value of a YAML (or JSON, which is YAML) document.
pub fn read_yaml(bytes: &[u8]) -> Result<Value, serde_yaml_ng::Error> {
    Json::deserialize(serde_yaml_ng::Deserializer::from_slice(bytes)).map(|json| json.0)
}

/// A JSON value, read as described in the module doc.
struct Json(Value);

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Json, D::Error> {
        deserializer.deserialize_any(JsonVisitor).map(Json)
    }
}

struct JsonVisitor;

fn float(x: f64) -> Value {
    Number::from_f64(x).map_or(Value::Null, Value::Number)
}

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a value JSON can hold")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_i128<E>(self, v: i128) -> Result<Value, E> {
        Ok(match (i64::try_from(v), u64::try_from(v)) {
            (Ok(i), _) => Value::from(i),
            (_, Ok(u)) => Value::from(u),
            _ => float(v as f64),
        })
    }

    fn visit_u128<E>(self, v: u128) -> Result<Value, E> {
        Ok(u64::try_from(v).map_or_else(|_| float(v as f64), Value::from))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(float(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        Json::deserialize(deserializer).map(|json| json.0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(Json(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some((key, Json(value))) = map.next_entry::<String, Json>()? {
            members.insert(key, value);
        }
        Ok(Value::Object(members))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::read_yaml;

    fn read(text: &str) -> serde_json::Value {
        read_yaml(text.as_bytes()).unwrap()
    }

    /// The ST202 finding: an integer of 65 to 128 bits was "JSON number out of
    /// range" (400) where the same document in JSON was read.
    #[test]
    fn integers_beyond_64_bits_are_floats_as_in_json() {
        let yaml = "a: -43966217626396508160\nb: 18446744073709551616\nc: 170141183460469231731687303715884105728\n";
        let json_text = r#"{"a": -43966217626396508160, "b": 18446744073709551616, "c": 170141183460469231731687303715884105728}"#;
        let from_json: serde_json::Value = serde_json::from_str(json_text).unwrap();
        let from_yaml = read(yaml);
        assert_eq!(from_yaml, from_json);
        assert_eq!(from_yaml["a"].as_f64(), Some(-43966217626396508160.0));
        assert!(from_yaml["b"].is_f64());
        // And `serde_json::Value`'s own reading of YAML refuses them, which is
        // why this reader exists.
        assert!(serde_yaml_ng::from_str::<serde_json::Value>(yaml).is_err());
    }

    #[test]
    fn integers_within_64_bits_stay_integers() {
        let v = read("min: -9223372036854775808\nmax: 18446744073709551615\nzero: 0\n");
        assert_eq!(v["min"].as_i64(), Some(i64::MIN));
        assert_eq!(v["max"].as_u64(), Some(u64::MAX));
        assert_eq!(v["zero"].as_u64(), Some(0));
    }

    #[test]
    fn everything_else_reads_as_serde_json_reads_it() {
        let yaml = "s: text\nq: \"1\"\nn: ~\ne:\nt: true\nf: 1.5\ninf: .inf\nl: [1, -2, x]\nm: {k: {}}\n1: one\n";
        let ours = read(yaml);
        let theirs: serde_json::Value = serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(
            ours,
            json!({"s": "text", "q": "1", "n": null, "e": null, "t": true, "f": 1.5,
                   "inf": null, "l": [1, -2, "x"], "m": {"k": {}}, "1": "one"})
        );
    }

    #[test]
    fn what_serde_json_refuses_is_refused() {
        for bad in [&b"a: [1, 2"[..], b"a: !tagged 1", b"\xff\xfe"] {
            assert!(read_yaml(bad).is_err(), "{bad:?}");
            assert!(serde_yaml_ng::from_slice::<serde_json::Value>(bad).is_err());
        }
    }
}
