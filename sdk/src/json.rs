//! JSON through the browser's own parser. `JSON.parse` is already in every page, so the
//! SDK reads JSON with it and walks the result, instead of shipping a second parser in
//! its wasm. Only the fingerprint needs a `serde_json::Value`, and `to_value` builds it
//! under the same I-JSON rules the server enforces (`onceclick_protocol::ijson`).

use crate::js;
use js_sys::{Array, Object, JSON};
use onceclick_protocol::ijson::{MAX_DEPTH, MAX_SAFE_INTEGER};
use serde_json::{Map, Number, Value};
use wasm_bindgen::{JsCast, JsValue};

/// `JSON.parse(text)`, or `None`.
pub(crate) fn parse(text: &str) -> Option<JsValue> {
    JSON::parse(text).ok()
}

/// `JSON.stringify(value)`, or `None` (a cycle, a BigInt…).
pub(crate) fn stringify(value: &JsValue) -> Option<String> {
    JSON::stringify(value).ok().and_then(|s| s.as_string())
}

/// The value exactly as it would be sent: through `JSON.stringify` and back (so
/// `toJSON`, dropped `undefined`s and the like apply), as a `serde_json::Value`.
pub(crate) fn to_value(input: &JsValue) -> Result<Value, String> {
    let text = stringify(input).ok_or("it is not JSON-serializable")?;
    let sent = parse(&text).ok_or("it is not JSON-serializable")?;
    walk(&sent, 0)
}

fn walk(v: &JsValue, depth: usize) -> Result<Value, String> {
    if v.is_null() {
        return Ok(Value::Null);
    }
    if let Some(b) = v.as_bool() {
        return Ok(Value::Bool(b));
    }
    if let Some(n) = v.as_f64() {
        return number(n);
    }
    if let Some(s) = v.as_string() {
        return Ok(Value::String(s));
    }
    if depth >= MAX_DEPTH {
        return Err(format!("nesting deeper than {MAX_DEPTH} levels"));
    }
    if let Some(array) = v.dyn_ref::<Array>() {
        return array.iter().map(|item| walk(&item, depth + 1)).collect();
    }
    let mut members = Map::new();
    let object: &Object = v.unchecked_ref();
    for name in Object::keys(object).iter() {
        let key = name.as_string().unwrap_or_default();
        let value = walk(&js::get(v, &key), depth + 1)?;
        members.insert(key, value);
    }
    Ok(Value::Object(members))
}

fn number(n: f64) -> Result<Value, String> {
    if n.fract() == 0.0 && n.abs() <= MAX_SAFE_INTEGER as f64 {
        return Ok(Value::Number(Number::from(n as i64)));
    }
    if n.fract() == 0.0 {
        return Err("an integer is beyond ±(2^53−1), where readers of JSON disagree".to_owned());
    }
    Number::from_f64(n)
        .map(Value::Number)
        .ok_or_else(|| "a number that is not finite".to_owned())
}
