//! `idempotentFetch`: the SDK's key discipline for any backend that speaks the IETF
//! Idempotency-Key header, without a `Client`.

use crate::error::OnceclickError;
use crate::http;
use crate::js;
use crate::js::future_to_promise;
use crate::keys::{Intent, Keys};
use crate::transport::Transport;
use crate::types::{option_string, policy, IdempotentFetchOptions};
use js_sys::Promise;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{Request, RequestInit};

/// `idempotentFetch`'s default: the server keeps a key bound for at least 24 hours.
const DEFAULT_RETENTION_HOURS: f64 = 24.0;

/// `fetch` with an `Idempotency-Key` per intent, for any backend that speaks the IETF
/// Idempotency-Key header. The key is stored before the first send and reused for the
/// same `intent` (across reloads and tabs) until it expires after `retentionHours`
/// (default 24: a generic backend has no job the SDK could watch); retries use it too.
/// Resolves to the final `Response`, whatever its status.
#[wasm_bindgen(js_name = idempotentFetch, unchecked_return_type = "Promise<Response>")]
pub fn idempotent_fetch(
    url: String,
    #[wasm_bindgen(unchecked_param_type = "RequestInit | undefined")] init: JsValue,
    options: IdempotentFetchOptions,
) -> Promise {
    let options: JsValue = options.into();
    future_to_promise(async move {
        let intent = option_string(&options, "intent")
            .filter(|i| !i.is_empty())
            .ok_or_else(|| OnceclickError::invalid("options.intent is required"))?;
        let retention = js::get(&options, "retentionHours")
            .as_f64()
            .unwrap_or(DEFAULT_RETENTION_HOURS);
        let keys = Keys::new(js::get(&options, "storage"), Some(retention));
        let entry = keys.get_or_create(&Intent::Fetch(&intent).name(), None);
        let init: RequestInit = if init.is_undefined() || init.is_null() {
            RequestInit::new()
        } else {
            init.unchecked_into()
        };
        let policy = policy(&options);
        if let Some(signal) = &policy.signal {
            init.set_signal(Some(signal));
        }
        let template =
            Request::new_with_str_and_init(&url, &init).map_err(OnceclickError::invalid_from)?;
        template
            .headers()
            .set("Idempotency-Key", &entry.key)
            .map_err(OnceclickError::invalid_from)?;
        let to = Transport::of(&options);
        let make = || template.clone();
        let answer = http::send(&make, &policy, &to, true).await?;
        Ok(answer.response.into())
    })
}
