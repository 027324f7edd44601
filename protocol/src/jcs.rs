//! RFC 8785 (JCS) canonical JSON of a `serde_json::Value`.
//!
//! Why not a crate: `serde_json_canonicalizer` (and `serde_jcs`) re-parse every object
//! key with serde_json's parser to sort it, which costs the browser SDK 54 KB gzip of
//! wasm — most of its budget. A `Value` already holds parsed keys, so the three rules
//! that remain fit here: keys sorted by UTF-16 code units, numbers in ECMAScript's
//! shortest form (ryu-js, the crate made for exactly that), strings with JSON's minimal
//! escapes. The crate stays as the oracle in this module's tests.

use serde_json::Value;

/// The canonical bytes of `value`.
pub fn to_vec(value: &Value) -> Vec<u8> {
    let mut out = String::new();
    write(value, &mut out);
    out.into_bytes()
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            // JCS serializes every number as an IEEE 754 double, as ECMAScript does.
            let f = n.as_f64().unwrap_or(0.0);
            if f == 0.0 {
                out.push('0'); // also -0, which ECMAScript prints as "0"
            } else {
                out.push_str(ryu_js::Buffer::new().format_finite(f));
            }
        }
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, out);
            }
            out.push(']');
        }
        Value::Object(members) => {
            let mut keys: Vec<&String> = members.keys().collect();
            // Keys are unique, so an unstable sort gives the one order (and is smaller code).
            keys.sort_unstable_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                if let Some(v) = members.get(key) {
                    write(v, out);
                }
            }
            out.push('}');
        }
    }
}

pub(crate) fn write_string(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                out.push_str("\\u00");
                out.push(HEX[(c as usize) >> 4] as char);
                out.push(HEX[(c as usize) & 0xf] as char);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each value canonicalizes exactly as the reference crate does.
    fn same_as_reference(value: &Value) {
        let ours = String::from_utf8(to_vec(value)).unwrap();
        let reference = serde_json_canonicalizer::to_string(value).unwrap();
        assert_eq!(ours, reference, "for {value}");
    }

    #[test]
    // The literals are the point: digits beyond a double's precision must round the
    // way ECMAScript rounds them.
    #[allow(clippy::approx_constant, clippy::excessive_precision)]
    fn matches_the_reference_implementation() {
        let cases = [
            json!(null),
            json!(true),
            json!([false, null, [], {}]),
            json!({"b": 1, "a": 2, "c": {"z": [3, 2, 1], "y": "x"}}),
            json!({"": 0, "a": 1, "A": 2, "aa": 3, "a\u{0}": 4}),
            // Key order by UTF-16 code units: U+E000 sorts after a surrogate pair's
            // lead unit (0xD83D), unlike UTF-8 byte order.
            json!({"\u{e000}": 1, "\u{1f600}": 2, "\u{ff}": 3, "é": 4, "z": 5}),
            json!([
                0,
                -0.0,
                1,
                -1,
                1.5,
                -2.25,
                0.1,
                1e-7,
                123456789.0,
                1e21,
                1e20,
                9007199254740991_i64,
                -9007199254740991_i64
            ]),
            json!([
                3.141592653589793,
                2.5e-324_f64.max(5e-324),
                1.7976931348623157e308,
                4.35,
                0.000001,
                1e-6,
                333333333.33333329
            ]),
            json!([
                "",
                "plain",
                "quote\" back\\slash",
                "\u{0}\u{1}\u{1f}\u{7f}",
                "\u{8}\u{c}\n\r\t",
                "\u{2028}\u{2029}",
                "é😀"
            ]),
            json!({"text": "The quarterly numbers came in.", "n": [1, 2.0, 3.5], "nested": {"deep": {"er": true}}}),
        ];
        for case in &cases {
            same_as_reference(case);
        }
    }

    #[test]
    #[allow(clippy::excessive_precision)]
    fn the_rfc_8785_example_is_reproduced() {
        // RFC 8785, section 3.2.2 (its numbers, strings and literals).
        let input = json!({
            "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u{20ac}$\u{f}\nA'B\"\\\\\"/",
            "literals": [null, true, false]
        });
        let expected = r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#;
        assert_eq!(String::from_utf8(to_vec(&input)).unwrap(), expected);
    }
}
