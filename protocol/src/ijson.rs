//! Strict parsing of request bodies as I-JSON (RFC 7493).
//!
//! A fingerprint is only stable if every parser reads the body the same way. Plain JSON
//! leaves three things to the parser: which of two duplicate member names wins, what a
//! huge integer means, and how deep nesting may go. I-JSON forbids the first two; we
//! bound the third. `serde_json` alone silently keeps the last duplicate, so this module
//! drives it with a visitor that refuses all three.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;
use thiserror::Error;

/// The deepest nesting accepted: the top-level object or array counts as 1.
pub const MAX_DEPTH: usize = 32;

/// The largest integer magnitude that every IEEE 754 double reader agrees on: 2^53 − 1.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Why a body is not I-JSON. The message names the place and the rule.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct IJsonError(String);

/// Parses `bytes` as one I-JSON value.
pub fn parse(bytes: &[u8]) -> Result<Value, IJsonError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = ValueSeed { depth: 0 }
        .deserialize(&mut de)
        .map_err(|e| IJsonError(e.to_string()))?;
    de.end().map_err(|e| IJsonError(e.to_string()))?;
    Ok(value)
}

struct ValueSeed {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for ValueSeed {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl ValueSeed {
    fn nested<E: de::Error>(&self) -> Result<ValueSeed, E> {
        let depth = self.depth + 1;
        if depth > MAX_DEPTH {
            return Err(E::custom(format_args!(
                "nesting deeper than {MAX_DEPTH} levels"
            )));
        }
        Ok(ValueSeed { depth })
    }
}

fn unsafe_integer<E: de::Error>(shown: impl fmt::Display) -> E {
    E::custom(format_args!(
        "integer {shown} is beyond ±(2^53−1), where readers of JSON disagree"
    ))
}

impl<'de> Visitor<'de> for ValueSeed {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an I-JSON value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        if v.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(unsafe_integer(v));
        }
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        if v > MAX_SAFE_INTEGER {
            return Err(unsafe_integer(v));
        }
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        // serde_json hands integers too large for u64 over as f64; an integral value
        // that large has already lost precision somewhere, so it is refused as well.
        if v.fract() == 0.0 && v.abs() > MAX_SAFE_INTEGER as f64 {
            return Err(unsafe_integer(v));
        }
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number that is not finite"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let inner = self.nested()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(ValueSeed { depth: inner.depth })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let inner = self.nested()?;
        let mut members = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            if members.contains_key(&name) {
                return Err(de::Error::custom(format_args!(
                    "duplicate member name {name:?}"
                )));
            }
            let value = map.next_value_seed(ValueSeed { depth: inner.depth })?;
            members.insert(name, value);
        }
        Ok(Value::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(s: &str) -> String {
        parse(s.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn parses_ordinary_json() {
        assert_eq!(
            parse(br#"{"a": [1, -2.5, "x", null, true, {"b": {}}]}"#).unwrap(),
            json!({"a": [1, -2.5, "x", null, true, {"b": {}}]})
        );
    }

    #[test]
    fn refuses_duplicate_member_names_at_any_depth() {
        assert!(err(r#"{"a":1,"a":2}"#).contains("duplicate member name \"a\""));
        assert!(err(r#"{"x":{"b":1,"b":1}}"#).contains("duplicate"));
        assert!(err(r#"[{"k":1,"k":1}]"#).contains("duplicate"));
    }

    #[test]
    fn refuses_integers_beyond_two_to_the_53() {
        assert!(parse(b"9007199254740991").is_ok());
        assert!(parse(b"-9007199254740991").is_ok());
        assert!(err("9007199254740992").contains("2^53"));
        assert!(err("-9007199254740992").contains("2^53"));
        assert!(err("100000000000000000000000").contains("2^53"));
        assert!(err("1e300").contains("2^53"));
        // Fractions lose nothing to the integer rule.
        assert!(parse(b"0.5").is_ok());
        assert!(parse(b"1.5e3").is_ok());
    }

    #[test]
    fn refuses_nesting_beyond_32() {
        let ok = format!("{}{}", "[".repeat(32), "]".repeat(32));
        assert!(parse(ok.as_bytes()).is_ok());
        let deep = format!("{}{}", "[".repeat(33), "]".repeat(33));
        assert!(err(&deep).contains("deeper than 32"));
        let objects = format!("{}1{}", r#"{"a":"#.repeat(33), "}".repeat(33));
        assert!(err(&objects).contains("deeper than 32"));
    }

    #[test]
    fn refuses_what_plain_json_refuses() {
        assert!(parse(b"").is_err());
        assert!(parse(b"{").is_err());
        assert!(parse(b"{} {}").is_err());
        assert!(parse(b"\"\\ud800\"").is_err(), "lone surrogate");
        assert!(parse(b"\"\xff\"").is_err(), "invalid UTF-8");
        assert!(parse(b"1e400").is_err());
        assert!(parse(b"NaN").is_err());
    }
}
