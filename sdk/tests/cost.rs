//! The SDK's own cost in real headless Chromium: the time from `submit()` to its request
//! leaving (the key stored first), over 200 new intents, with `fetch` stubbed so that no
//! network time is in it. `cargo xtask bench` runs this alone with `--nocapture` and
//! reports the p50 it prints; `cargo xtask test` runs it with the other browser tests,
//! where it proves the order (key stored, then the request) on every call.
#![cfg(target_arch = "wasm32")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use js_sys::{Object, Promise, Reflect};
use onceclick::Client;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen(inline_js = r#"
// A fetch that answers 201 with a job at once, and notes when each request left and
// whether an intent key was already in localStorage by then.
export function stubFetch() {
  const seen = [];
  const real = globalThis.fetch;
  globalThis.fetch = async (request) => {
    const at = performance.now();
    const key = request.headers.get("Idempotency-Key");
    let stored = false;
    for (let i = 0; i < localStorage.length; i++) {
      if ((localStorage.getItem(localStorage.key(i)) || "").includes(key)) stored = true;
    }
    seen.push({ at, stored });
    const job = { id: "job_" + seen.length, kind: "summarize", status: "queued", version: 1,
                  input: {}, provider: "primary", result: null, attempts: [],
                  created_at: new Date().toISOString(), updated_at: new Date().toISOString() };
    return new Response(JSON.stringify(job), { status: 201,
      headers: { "content-type": "application/json", etag: '"1"' } });
  };
  return { seen, restore: () => { globalThis.fetch = real; } };
}
export function nowMs() { return performance.now(); }
export function clearStorage() { localStorage.clear(); }
"#)]
extern "C" {
    fn stubFetch() -> JsValue;
    fn nowMs() -> f64;
    fn clearStorage();
}

const CALLS: usize = 200;

fn get(obj: &JsValue, key: &str) -> JsValue {
    Reflect::get(obj, &key.into()).unwrap()
}

#[wasm_bindgen_test]
async fn submit_stores_its_key_then_sends_and_reports_its_own_cost() {
    clearStorage();
    let stub = stubFetch();
    let options = Object::new();
    Reflect::set(
        &options,
        &"baseUrl".into(),
        &"https://onceclick.invalid".into(),
    )
    .unwrap();
    // A token whose `sub` scopes the keys (the SDK reads it without verifying).
    let token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjb3N0In0.c2ln";
    Reflect::set(&options, &"token".into(), &token.into()).unwrap();
    let client = Client::new(options.unchecked_into()).unwrap();

    let mut micros = Vec::with_capacity(CALLS);
    for n in 0..CALLS {
        let input = Object::new();
        let text = format!("Intent number {n}, a new one each time.");
        Reflect::set(&input, &"text".into(), &text.into()).unwrap();
        let started = nowMs();
        let submitted: Promise = client.submit("summarize".into(), input.into(), None);
        JsFuture::from(submitted).await.unwrap();
        let seen: js_sys::Array = get(&stub, "seen").unchecked_into();
        assert_eq!(seen.length() as usize, n + 1, "one request per new intent");
        let last = seen.get(n as u32);
        assert_eq!(
            get(&last, "stored"),
            JsValue::TRUE,
            "call {n}: the request left before its key was stored"
        );
        micros.push(((get(&last, "at").as_f64().unwrap() - started) * 1000.0) as u64);
    }
    let restore: js_sys::Function = get(&stub, "restore").unchecked_into();
    restore.call0(&JsValue::NULL).unwrap();
    clearStorage();

    micros.sort_unstable();
    let p50 = micros[CALLS / 2 - 1] as f64 / 1000.0;
    let p99 = micros[CALLS * 99 / 100 - 1] as f64 / 1000.0;
    // Read by `cargo xtask bench` (with --nocapture).
    web_sys::console::log_1(
        &format!("sdk_submit_ms p50={p50:.3} p99={p99:.3} calls={CALLS}").into(),
    );
}
