//! How a client's requests go out, from its options: `retry` (how many tries, and the
//! backoff between them), `timeoutMs` (each try's time to answer), `fetch` (called
//! instead of the global one, by every request, the live stream's too) and `headers`
//! (added to every request, under the SDK's own). Read once, when the client is made;
//! `idempotentFetch` reads the same options from its own.

use crate::http::{BASE_MS, CAP_MS, MAX_TRIES};
use crate::js;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// The most tries a client may ask for.
const MOST_TRIES: f64 = 100.0;
/// The longest a timer waits (`setTimeout`'s limit).
const TIMER_MAX_MS: f64 = 2_147_483_647.0;

/// What [`Transport::of`] read: every default is the SDK's behaviour before the options.
#[derive(Clone)]
pub(crate) struct Transport {
    /// Tries in all, the first included: `retry.tries` (6), or 1 with `retry: false`.
    pub(crate) tries: u32,
    /// The full-jitter backoff's base and cap, in ms: `retry.baseMs` (250), `retry.capMs` (8,000).
    pub(crate) base_ms: f64,
    pub(crate) cap_ms: f64,
    /// Each try's time to answer before it is aborted and counted a failure
    /// (`timeoutMs`); none by default. Not the live stream's, which has `firstEventMs`.
    pub(crate) timeout_ms: Option<f64>,
    /// `fetch`, if the app gave one.
    pub(crate) fetch: Option<js_sys::Function>,
    /// `headers`, if given: set on every request before the SDK's own, which win.
    pub(crate) headers: JsValue,
}

impl Default for Transport {
    fn default() -> Self {
        Self::of(&JsValue::UNDEFINED)
    }
}

impl Transport {
    /// The transport `options` describe (`ClientOptions`, or `idempotentFetch`'s).
    pub(crate) fn of(options: &JsValue) -> Self {
        let retry = js::get(options, "retry");
        // A number the SDK can wait on: finite, from 0 to a timer's limit (2^31 - 1 ms);
        // anything else is the default.
        let number = |value: JsValue, default: f64| {
            value
                .as_f64()
                .filter(|n| n.is_finite() && *n >= 0.0)
                .map_or(default, |n| n.min(TIMER_MAX_MS))
        };
        let tries = match retry.as_bool() {
            Some(false) => 1,
            _ => number(js::get(&retry, "tries"), MAX_TRIES.into()).clamp(1.0, MOST_TRIES) as u32,
        };
        let headers = js::get(options, "headers");
        Self {
            tries,
            base_ms: number(js::get(&retry, "baseMs"), BASE_MS),
            cap_ms: number(js::get(&retry, "capMs"), CAP_MS),
            timeout_ms: Some(number(js::get(options, "timeoutMs"), 0.0)).filter(|ms| *ms >= 1.0),
            fetch: js::get(options, "fetch").dyn_into().ok(),
            headers: if headers.is_null() {
                JsValue::UNDEFINED
            } else {
                headers
            },
        }
    }

    /// New `Headers` holding `headers` (empty without them), for the SDK to add its own:
    /// `new Headers(headers)`, so a record, a list of pairs or a `Headers` alike. One it
    /// refuses makes the call fail with `invalid_argument`.
    pub(crate) fn headers(&self) -> Result<web_sys::Headers, JsValue> {
        match self.headers.is_undefined() {
            true => web_sys::Headers::new(),
            false => web_sys::Headers::new_with_str_sequence_sequence(&self.headers),
        }
    }
}
