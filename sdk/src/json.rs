//! JSON through the browser's own parser and writer. `JSON.parse` and `JSON.stringify`
//! are already in every page, so the SDK uses them instead of shipping a JSON value
//! type, a number formatter and a canonicalizer in its wasm. The fingerprint needs the
//! input's RFC 8785 canonical text, and `canonical` writes it from the browser's JSON,
//! under the same I-JSON rules the server enforces (`onceclick_protocol::ijson`).

use js_sys::{Array, Object, JSON};
use onceclick_protocol::ijson::{MAX_DEPTH, MAX_SAFE_INTEGER};
use wasm_bindgen::{JsCast, JsValue};

/// `JSON.parse(text)`, or `None`.
pub(crate) fn parse(text: &str) -> Option<JsValue> {
    JSON::parse(text).ok()
}

/// `JSON.stringify(value)`, or `None` (a cycle, a BigInt…).
pub(crate) fn stringify(value: &JsValue) -> Option<String> {
    JSON::stringify(value).ok().and_then(|s| s.as_string())
}

/// The RFC 8785 (JCS) canonical text of the value exactly as it would be sent: through
/// `JSON.stringify` and back (so `toJSON`, dropped `undefined`s and the like apply).
///
/// JCS is ECMAScript's own JSON: numbers as `JSON.stringify` writes them, strings with
/// its escapes, and object keys sorted by UTF-16 code units, which is the order of
/// `Array.prototype.sort` with no comparator. So the browser writes every leaf, and the
/// walk here only sorts the keys and checks the I-JSON limits. The protocol's tests
/// check that this text, hashed, is the fingerprint of the same value.
pub(crate) fn canonical(input: &JsValue) -> Result<String, String> {
    let text = stringify(input).ok_or("it is not JSON-serializable")?;
    let sent = parse(&text).ok_or("it is not JSON-serializable")?;
    let mut out = String::new();
    write(&sent, 0, &mut out)?;
    Ok(out)
}

fn write(v: &JsValue, depth: usize, out: &mut String) -> Result<(), String> {
    if let Some(n) = v.as_f64() {
        check_number(n)?;
    }
    if !v.is_object() {
        // null, a boolean, a string or a number: written by the browser.
        out.push_str(&stringify(v).ok_or("it is not JSON-serializable")?);
        return Ok(());
    }
    if depth >= MAX_DEPTH {
        let max = crate::decimal::decimal(MAX_DEPTH as f64);
        return Err(format!("nesting deeper than {max} levels"));
    }
    if let Some(array) = v.dyn_ref::<Array>() {
        out.push('[');
        for (i, item) in array.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write(&item, depth + 1, out)?;
        }
        out.push(']');
        return Ok(());
    }
    let object: &Object = v.unchecked_ref();
    let keys = Object::keys(object);
    keys.sort();
    out.push('{');
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&stringify(&key).ok_or("it is not JSON-serializable")?);
        out.push(':');
        let value = js_sys::Reflect::get(v, &key).unwrap_or(JsValue::UNDEFINED);
        write(&value, depth + 1, out)?;
    }
    out.push('}');
    Ok(())
}

fn check_number(n: f64) -> Result<(), String> {
    if !n.is_finite() {
        return Err("a number that is not finite".to_owned());
    }
    if n.fract() == 0.0 && n.abs() > MAX_SAFE_INTEGER as f64 {
        return Err("an integer is beyond ±(2^53−1), where readers of JSON disagree".to_owned());
    }
    Ok(())
}
