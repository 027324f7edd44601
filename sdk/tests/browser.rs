//! The SDK in real headless Chromium against the real Worker (`wrangler dev`), through
//! the fault-injecting proxy on 127.0.0.1. `cargo xtask test` builds these with the
//! addresses and a token in the environment and runs them with `wasm-pack test`.
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
export function mapStorage() {
  const m = new Map();
  return {
    getItem: (k) => (m.has(k) ? m.get(k) : null),
    setItem: (k, v) => { m.set(k, String(v)); },
    removeItem: (k) => { m.delete(k); },
    key: (i) => Array.from(m.keys())[i] ?? null,
    get length() { return m.size; },
    entries: () => Array.from(m.entries()),
  };
}
export function fixedKeyStorage(key) {
  const entry = JSON.stringify({ key, created_at: Date.now(), job_id: null });
  return { getItem: () => entry, setItem: () => {}, removeItem: () => {}, key: () => null, length: 0 };
}
export function throwingStorage() {
  const no = () => { throw new DOMException("quota exceeded", "QuotaExceededError"); };
  return { getItem: no, setItem: no, removeItem: no, key: no, get length() { return no(); } };
}
export function nowMs() { return performance.now(); }
export function rejectsAt(promise) {
  return promise.then(() => { throw new Error("expected a rejection"); }, (e) => ({ error: e, at: performance.now() }));
}
"#)]
extern "C" {
    fn mapStorage() -> JsValue;
    fn fixedKeyStorage(key: &str) -> JsValue;
    fn throwingStorage() -> JsValue;
    fn nowMs() -> f64;
    fn rejectsAt(promise: &Promise) -> Promise;
}

fn env(name: &str, value: Option<&'static str>) -> &'static str {
    value.unwrap_or_else(|| panic!("{name} is not set at build time: run with `cargo xtask test`"))
}

fn proxy() -> &'static str {
    env("ONCECLICK_PROXY_URL", option_env!("ONCECLICK_PROXY_URL"))
}

fn token() -> &'static str {
    env("ONCECLICK_SDK_TOKEN", option_env!("ONCECLICK_SDK_TOKEN"))
}

/// A scenario id no other test or run uses.
fn scenario(name: &str) -> String {
    format!(
        "{name}-{}-{}",
        js_sys::Date::now() as u64,
        (js_sys::Math::random() * 1e9) as u64
    )
}

fn set(obj: &Object, key: &str, value: impl Into<JsValue>) {
    Reflect::set(obj, &key.into(), &value.into()).unwrap();
}

fn get(obj: &JsValue, key: &str) -> JsValue {
    Reflect::get(obj, &key.into()).unwrap()
}

fn client(base: &str, storage: Option<JsValue>) -> Client {
    let options = Object::new();
    set(&options, "baseUrl", base);
    set(&options, "token", token());
    if let Some(s) = storage {
        set(&options, "storage", s);
    }
    Client::new(options.unchecked_into()).unwrap()
}

fn input(text: &str) -> JsValue {
    let o = Object::new();
    set(&o, "text", text);
    o.into()
}

async fn ok(p: Promise) -> JsValue {
    JsFuture::from(p)
        .await
        .unwrap_or_else(|e| panic!("rejected: {:?}", js_sys::JSON::stringify(&e)))
}

/// What the proxy saw for `id` (non-preflight requests only).
async fn seen(id: &str) -> Vec<JsValue> {
    let url = format!("{}/_log/{id}", proxy());
    let response: web_sys::Response =
        JsFuture::from(web_sys::window().unwrap().fetch_with_str(&url))
            .await
            .unwrap()
            .unchecked_into();
    let body = JsFuture::from(response.json().unwrap()).await.unwrap();
    js_sys::Array::from(&body)
        .iter()
        .filter(|e| get(e, "method").as_string().as_deref() != Some("OPTIONS"))
        .collect()
}

fn posts(log: &[JsValue]) -> Vec<JsValue> {
    log.iter()
        .filter(|e| get(e, "method").as_string().as_deref() == Some("POST"))
        .cloned()
        .collect()
}

fn id_of(job: &JsValue) -> String {
    get(job, "id").as_string().unwrap()
}

#[wasm_bindgen_test]
async fn two_submits_in_one_tick_make_one_request_and_one_job() {
    let id = scenario("tick");
    let c = client(&format!("{}/pass/{id}", proxy()), Some(JsValue::NULL));
    let text = format!("{id}: two clicks, one tick.");
    let first = c.submit("summarize".into(), input(&text), None);
    let second = c.submit("summarize".into(), input(&text), None);
    let (a, b) = (ok(first).await, ok(second).await);
    assert_eq!(id_of(&a), id_of(&b));
    assert_eq!(posts(&seen(&id).await).len(), 1, "one request on the wire");
}

#[wasm_bindgen_test]
async fn a_reload_sends_the_same_key_and_gets_the_replay() {
    let id = scenario("reload");
    let base = format!("{}/pass/{id}", proxy());
    let text = format!("{id}: the page reloaded mid-flight.");
    let before = ok(client(&base, None).submit("summarize".into(), input(&text), None)).await;
    // A new Client on the same (default) storage is what a reload makes.
    let after = ok(client(&base, None).submit("summarize".into(), input(&text), None)).await;
    assert_eq!(id_of(&before), id_of(&after));
    let sent = posts(&seen(&id).await);
    assert_eq!(sent.len(), 2);
    assert_eq!(
        get(&sent[0], "idempotency_key"),
        get(&sent[1], "idempotency_key")
    );
    assert_eq!(get(&sent[0], "status"), 201);
    assert_eq!(get(&sent[1], "status"), 200, "the replay");
}

#[wasm_bindgen_test]
async fn a_swallowed_response_is_retried_with_the_same_key_and_one_job() {
    let id = scenario("swallowed");
    let c = client(&format!("{}/drop-once/{id}", proxy()), Some(mapStorage()));
    let job = ok(c.submit(
        "summarize".into(),
        input(&format!("{id}: the answer was lost.")),
        None,
    ))
    .await;
    let sent = posts(&seen(&id).await);
    assert_eq!(
        sent.len(),
        2,
        "the first answer was dropped, then one retry"
    );
    assert_eq!(get(&sent[0], "dropped"), true);
    assert_eq!(get(&sent[0], "status"), 201, "the Worker created the job");
    assert_eq!(
        get(&sent[1], "status"),
        200,
        "the retry was a replay: still one job"
    );
    assert_eq!(
        get(&sent[0], "idempotency_key"),
        get(&sent[1], "idempotency_key")
    );
    assert!(id_of(&job).starts_with("job_"));
}

#[wasm_bindgen_test]
async fn a_reused_key_is_a_typed_error_and_not_retried() {
    let id = scenario("reused");
    let storage = fixedKeyStorage(&scenario("fixed-key"));
    let c = client(&format!("{}/pass/{id}", proxy()), Some(storage));
    ok(c.submit("summarize".into(), input(&format!("{id}: first")), None)).await;
    let error = JsFuture::from(c.submit("summarize".into(), input(&format!("{id}: other")), None))
        .await
        .unwrap_err();
    assert_eq!(get(&error, "name"), "OnceclickError");
    assert_eq!(get(&error, "code"), "idempotency_key_reused");
    assert_eq!(get(&error, "status"), 409);
    assert_eq!(get(&error, "retryable"), false);
    assert!(get(&error, "jobId")
        .as_string()
        .unwrap()
        .starts_with("job_"));
    assert_eq!(posts(&seen(&id).await).len(), 2, "the 409 was not retried");
}

#[wasm_bindgen_test]
async fn an_abort_rejects_with_aborted_within_50_ms() {
    let id = scenario("abort");
    let c = client(&format!("{}/hang/{id}", proxy()), Some(JsValue::NULL));
    let controller = web_sys::AbortController::new().unwrap();
    let options = Object::new();
    set(&options, "signal", controller.signal());
    let pending = c.submit(
        "summarize".into(),
        input(&format!("{id}: stalls")),
        Some(options.unchecked_into()),
    );
    let outcome = rejectsAt(&pending);
    // Wait until the request is really on the wire and held.
    while posts(&seen(&id).await).is_empty() {
        JsFuture::from(Promise::new(&mut |r, _| {
            web_sys::window()
                .unwrap()
                .set_timeout_with_callback_and_timeout_and_arguments_0(&r, 10)
                .unwrap();
        }))
        .await
        .unwrap();
    }
    let aborted_at = nowMs();
    controller.abort();
    let outcome = JsFuture::from(outcome).await.unwrap();
    let elapsed = get(&outcome, "at").as_f64().unwrap() - aborted_at;
    assert_eq!(get(&get(&outcome, "error"), "code"), "aborted");
    assert!(elapsed < 50.0, "rejected {elapsed} ms after abort");
}

#[wasm_bindgen_test]
async fn storage_that_throws_falls_back_to_memory() {
    let id = scenario("throwing");
    let c = client(&format!("{}/pass/{id}", proxy()), Some(throwingStorage()));
    let text = format!("{id}: private mode");
    let a = ok(c.submit("summarize".into(), input(&text), None)).await;
    let b = ok(c.submit("summarize".into(), input(&text), None)).await;
    assert_eq!(id_of(&a), id_of(&b), "the key lived on in memory");
    let sent = posts(&seen(&id).await);
    assert_eq!(
        get(&sent[0], "idempotency_key"),
        get(&sent[1], "idempotency_key")
    );
}

#[wasm_bindgen_test]
async fn a_changed_input_gets_a_new_key_and_a_finished_job_frees_its_key() {
    let id = scenario("keys");
    let storage = mapStorage();
    let c = client(&format!("{}/pass/{id}", proxy()), Some(storage.clone()));
    let a = ok(c.submit("summarize".into(), input(&format!("{id}: one text")), None)).await;
    let b = ok(c.submit(
        "summarize".into(),
        input(&format!("{id}: another text")),
        None,
    ))
    .await;
    assert_ne!(id_of(&a), id_of(&b));
    let sent = posts(&seen(&id).await);
    assert_ne!(
        get(&sent[0], "idempotency_key"),
        get(&sent[1], "idempotency_key")
    );

    let updates = js_sys::Array::new();
    let record = {
        let updates = updates.clone();
        Closure::<dyn Fn(JsValue)>::new(move |job: JsValue| {
            updates.push(&job);
        })
    };
    let options = Object::new();
    set(&options, "onUpdate", record.as_ref().clone());
    let done = ok(c.wait(id_of(&a), Some(options.unchecked_into()))).await;
    assert_eq!(get(&done, "status"), "succeeded");
    assert!(updates.length() >= 1, "onUpdate saw the job");
    let again = ok(c.submit("summarize".into(), input(&format!("{id}: one text")), None)).await;
    assert_ne!(
        id_of(&again),
        id_of(&a),
        "the finished job freed its key: a new intent"
    );
    let sent = posts(&seen(&id).await);
    assert_ne!(
        get(&sent[2], "idempotency_key"),
        get(&sent[0], "idempotency_key")
    );
}
