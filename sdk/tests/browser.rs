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
export function copyStorage(from, keepJobIds, ageMs) {
  const to = mapStorage();
  for (const [k, v] of from.entries()) {
    const entry = JSON.parse(v);
    if (!keepJobIds) entry.job_id = null;
    entry.created_at = Date.now() - ageMs;
    to.setItem(k, JSON.stringify(entry));
  }
  return to;
}
export async function postJson(url, body) {
  const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body });
  if (!r.ok) throw new Error(`${url} answered ${r.status}`);
}
export function nowMs() { return performance.now(); }
export async function certify(url, token) {
  const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${token}` }, body: "{}" });
  const body = await r.json();
  if (!r.ok || !body.reports.every((report) => report.passed)) throw new Error(`certification: ${r.status} ${JSON.stringify(body)}`);
}
export function wantHeard(base, token, jobId, ms) {
  const sub = JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/"))).sub;
  const channel = new BroadcastChannel(`onceclick-stream/2:${base}:${sub}`);
  return new Promise((resolve) => {
    const done = (heard) => { clearTimeout(timer); channel.close(); resolve(heard); };
    const timer = setTimeout(() => done(false), ms);
    channel.onmessage = (e) => { if (e.data.t === "want" && e.data.jobs.includes(jobId)) done(true); };
  });
}
export function announcedOnPageshow(base, token, jobId, ms) {
  const heard = wantHeard(base, token, jobId, ms);
  window.dispatchEvent(new PageTransitionEvent("pageshow", { persisted: true }));
  return heard;
}
export function recorder() {
  const r = { texts: [], attempts: [], deltas: [], partials: [], updates: [], waiting: [] };
  const heard = () => { r.waiting = r.waiting.filter(([enough, resolve]) => !(enough() && (resolve(), true))); };
  r.options = {
    onText: (text, info) => { r.texts.push(text); r.attempts.push(info.attemptId); heard(); },
    onDelta: (delta) => { r.deltas.push(delta); heard(); },
    onPartial: (partial) => { r.partials.push(partial); },
    onUpdate: (job) => { r.updates.push([job.status, r.deltas.length]); },
  };
  r.deltasAtLeast = (n) => new Promise((resolve) => { r.waiting.push([() => r.deltas.length >= n, resolve]); heard(); });
  return r;
}
export function textProblems(r, attempt, content) {
  const problems = [];
  let at = 0, joined = "";
  for (const d of r.deltas.filter((d) => d.attemptId === attempt)) {
    if (d.offset !== at) problems.push(`a delta at ${d.offset} where the text had ${at} code points`);
    if (d.text.length === 0) problems.push("an empty delta");
    joined += d.text;
    at += [...d.text].length;
  }
  if (joined !== content) problems.push(`the deltas joined are ${JSON.stringify(joined)}, not ${JSON.stringify(content)}`);
  const texts = r.texts.filter((_, i) => r.attempts[i] === attempt);
  for (let i = 1; i < texts.length; i++) {
    if (!texts[i].startsWith(texts[i - 1]) || texts[i] === texts[i - 1]) problems.push(`onText ${i} does not grow the one before it`);
  }
  if (r.texts.at(-1) !== content) problems.push(`the last onText is ${JSON.stringify(r.texts.at(-1))}`);
  if (r.attempts.at(-1) !== attempt) problems.push(`the last onText follows ${r.attempts.at(-1)}, not ${attempt}`);
  return problems.join("; ");
}
export function countingFetch() {
  const calls = [];
  const fetchIt = (request) => { calls.push(`${request.method} ${new URL(request.url).pathname}`); return fetch(request); };
  return { fetch: fetchIt, calls };
}
export function rejectsAt(promise) {
  return promise.then(() => { throw new Error("expected a rejection"); }, (e) => ({ error: e, at: performance.now() }));
}
"#)]
extern "C" {
    fn mapStorage() -> JsValue;
    fn fixedKeyStorage(key: &str) -> JsValue;
    fn throwingStorage() -> JsValue;
    fn copyStorage(from: &JsValue, keep_job_ids: bool, age_ms: f64) -> JsValue;
    fn postJson(url: &str, body: &str) -> Promise;
    fn nowMs() -> f64;
    fn certify(url: &str, token: &str) -> Promise;
    #[wasm_bindgen(js_name = announcedOnPageshow)]
    fn announced_on_pageshow(base: &str, token: &str, job_id: &str, ms: u32) -> Promise;
    #[wasm_bindgen(js_name = wantHeard)]
    fn want_heard(base: &str, token: &str, job_id: &str, ms: u32) -> Promise;
    fn rejectsAt(promise: &Promise) -> Promise;
    #[wasm_bindgen(js_name = countingFetch)]
    fn counting_fetch() -> JsValue;
    fn recorder() -> JsValue;
    #[wasm_bindgen(js_name = textProblems)]
    fn text_problems(recorder: &JsValue, attempt: &str, content: &str) -> String;
}

fn env(name: &str, value: Option<&'static str>) -> &'static str {
    value.unwrap_or_else(|| panic!("{name} is not set at build time: run with `cargo xtask test`"))
}

fn proxy() -> &'static str {
    env("ONCECLICK_PROXY_URL", option_env!("ONCECLICK_PROXY_URL"))
}

fn mock() -> &'static str {
    env("ONCECLICK_MOCK_URL", option_env!("ONCECLICK_MOCK_URL"))
}

/// Scripts the mock: calls of `provider` whose prompt contains `marker` follow `steps`
/// (a JSON array of the mock's steps), the last one repeating.
async fn script(provider: &str, marker: &str, steps: &str) {
    let body = format!(
        r#"{{"provider":{},"contains":{},"steps":{steps}}}"#,
        js_sys::JSON::stringify(&provider.into()).unwrap(),
        js_sys::JSON::stringify(&marker.into()).unwrap(),
    );
    ok(postJson(&format!("{}/_script", mock()), &body)).await;
}

/// Lets every mock call held at `gate` answer.
async fn release(gate: &str) {
    let body = format!(
        r#"{{"gate":{}}}"#,
        js_sys::JSON::stringify(&gate.into()).unwrap()
    );
    ok(postJson(&format!("{}/_release", mock()), &body)).await;
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

/// `error` is what every rejection of the SDK must be: an `OnceclickError`, which is a
/// real `Error` (with a stack), with `code`.
fn rejected_with(error: &JsValue, code: &str) {
    assert!(
        error.is_instance_of::<js_sys::Error>(),
        "{error:?} is not an Error"
    );
    assert!(
        error.is_instance_of::<onceclick::JsOnceclickError>(),
        "{error:?} is not an OnceclickError"
    );
    assert_eq!(get(error, "name"), "OnceclickError");
    assert_eq!(get(error, "code"), code);
    assert!(
        get(error, "stack")
            .as_string()
            .is_some_and(|s| !s.is_empty()),
        "it has a stack"
    );
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

/// A new scenario named `name`, a client through the proxy's `mode`, and the job it
/// submitted for the text `"{id}: {about}"`.
async fn one_job(name: &str, mode: &str, about: &str) -> (String, Client, JsValue) {
    let id = scenario(name);
    let c = client(&format!("{}/{mode}/{id}", proxy()), Some(mapStorage()));
    let text = format!("{id}: {about}");
    let job = ok(c.submit("summarize".into(), input(&text), None)).await;
    (id, c, job)
}

async fn ok(p: Promise) -> JsValue {
    JsFuture::from(p)
        .await
        .unwrap_or_else(|e| panic!("rejected: {:?}", js_sys::JSON::stringify(&e)))
}

/// What the proxy saw for `id`, CORS preflights (`OPTIONS`) included: the test page's
/// origin is not the proxy's.
async fn seen_all(id: &str) -> Vec<JsValue> {
    let url = format!("{}/_log/{id}", proxy());
    let response: web_sys::Response =
        JsFuture::from(web_sys::window().unwrap().fetch_with_str(&url))
            .await
            .unwrap()
            .unchecked_into();
    let body = JsFuture::from(response.json().unwrap()).await.unwrap();
    js_sys::Array::from(&body).iter().collect()
}

/// What the proxy saw for `id` (non-preflight requests only).
async fn seen(id: &str) -> Vec<JsValue> {
    seen_all(id)
        .await
        .into_iter()
        .filter(|e| get(e, "method").as_string().as_deref() != Some("OPTIONS"))
        .collect()
}

/// A pause in the page's event loop.
async fn pause(ms: i32) {
    JsFuture::from(Promise::new(&mut |r, _| {
        web_sys::window()
            .unwrap()
            .set_timeout_with_callback_and_timeout_and_arguments_0(&r, ms)
            .unwrap();
    }))
    .await
    .unwrap();
}

/// What the proxy saw for `id` once `done` holds of it: the proxy's log is read every
/// 10 ms, for at most 10 s.
async fn seen_until(id: &str, done: impl Fn(&[JsValue]) -> bool) -> Vec<JsValue> {
    for _ in 0..1_000 {
        let log = seen(id).await;
        if done(&log) {
            return log;
        }
        pause(10).await;
    }
    panic!(
        "the proxy never saw what {id} waited for: {:?}",
        seen(id).await
    )
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

/// The requests in `log` to a path that ends with `suffix`.
fn to_path(log: &[JsValue], suffix: &str) -> Vec<JsValue> {
    log.iter()
        .filter(|e| get(e, "path").as_string().unwrap().ends_with(suffix))
        .cloned()
        .collect()
}

fn statuses(log: &[JsValue]) -> Vec<JsValue> {
    log.iter().map(|e| get(e, "status")).collect()
}

fn options(members: &[(&str, JsValue)]) -> JsValue {
    let o = Object::new();
    for (k, v) in members {
        set(&o, k, v.clone());
    }
    o.into()
}

/// An event a test can await: a promise, and the function that resolves it (a second
/// call does nothing).
fn latch() -> (Promise, js_sys::Function) {
    let mut resolve = None;
    let promise = Promise::new(&mut |r, _| resolve = Some(r));
    (promise, resolve.unwrap())
}

type Calls = std::rc::Rc<std::cell::Cell<u32>>;

/// A callback that counts its calls.
fn counter() -> (Closure<dyn Fn(JsValue)>, Calls) {
    let calls = std::rc::Rc::new(std::cell::Cell::new(0));
    let count = calls.clone();
    let callback = Closure::<dyn Fn(JsValue)>::new(move |_| count.set(count.get() + 1));
    (callback, calls)
}

const DAY_MS: f64 = 24.0 * 3_600_000.0;

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
    rejected_with(&error, "idempotency_key_reused");
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
    seen_until(&id, |log| !posts(log).is_empty()).await;
    let aborted_at = nowMs();
    controller.abort();
    let outcome = JsFuture::from(outcome).await.unwrap();
    let elapsed = get(&outcome, "at").as_f64().unwrap() - aborted_at;
    rejected_with(&get(&outcome, "error"), "aborted");
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

// Issue 8, item 1: the fallback button survives a lost answer.
#[wasm_bindgen_test]
async fn a_retry_whose_answer_was_lost_resolves_to_its_one_new_attempt() {
    let id = scenario("retry-lost");
    let gate = format!("{id}-gate");
    // The first attempt fails for good; the second is held running while the SDK
    // resends, so a resend that is not recognised as ours meets `attempt_in_flight`.
    script(
        "primary",
        &id,
        &format!(r#"[{{"status":400}},{{"gate":"{gate}"}}]"#),
    )
    .await;
    let c = client(
        &format!("{}/drop-attempts-once/{id}", proxy()),
        Some(mapStorage()),
    );
    let job = ok(c.submit(
        "summarize".into(),
        input(&format!(
            "{id}: the provider refuses, then the user clicks fallback."
        )),
        None,
    ))
    .await;
    let failed = ok(c.wait(id_of(&job), None)).await;
    assert_eq!(get(&failed, "status"), "failed");
    // Why, without reading the attempts: the one that decided it, with its error.
    let failure = get(&failed, "failure");
    let attempt = js_sys::Array::from(&get(&failed, "attempts")).get(0);
    assert_eq!(get(&failure, "attempt_id"), get(&attempt, "id"));
    assert_eq!(get(&failure, "code"), get(&get(&attempt, "error"), "code"));
    assert_eq!(
        get(&failure, "message"),
        get(&get(&attempt, "error"), "message")
    );
    assert!(
        get(&failure, "code")
            .as_string()
            .is_some_and(|c| c.starts_with("provider_")),
        "{failure:?}"
    );
    assert!(
        get(&job, "failure").is_null(),
        "a queued job did not end badly"
    );

    let retry = options(&[("provider", "primary".into())]);
    let outcome = JsFuture::from(c.retry(id_of(&job), Some(retry.unchecked_into()))).await;
    release(&gate).await;
    let attempt =
        outcome.unwrap_or_else(|e| panic!("retry rejected: {:?}", js_sys::JSON::stringify(&e)));
    assert_eq!(get(&attempt, "n"), 2);

    let sent = to_path(&posts(&seen(&id).await), "/attempts");
    assert_eq!(sent.len(), 2, "the lost answer, then one resend");
    assert_eq!(get(&sent[0], "dropped"), true);
    assert_eq!(statuses(&sent), [JsValue::from(201), JsValue::from(200)]);
    assert!(get(&sent[0], "idempotency_key").is_string());
    assert_eq!(
        get(&sent[0], "idempotency_key"),
        get(&sent[1], "idempotency_key"),
        "the resend carries the same key"
    );
    let after = ok(c.wait(id_of(&job), None)).await;
    let attempts = js_sys::Array::from(&get(&after, "attempts"));
    assert_eq!(attempts.length(), 2, "one new attempt, not two");
    assert_eq!(get(&attempts.get(1), "id"), get(&attempt, "id"));
}

// Issue 8, item 2: every submit keeps its own signal and callbacks.
#[wasm_bindgen_test]
async fn a_submit_aborted_at_once_does_not_reject_its_twin() {
    let id = scenario("abort-twin");
    let c = client(&format!("{}/pass/{id}", proxy()), Some(JsValue::NULL));
    let text = format!("{id}: one click is taken back, the other stays.");
    let controller = web_sys::AbortController::new().unwrap();
    let with_signal = options(&[("signal", controller.signal().into())]);
    let first = c.submit(
        "summarize".into(),
        input(&text),
        Some(with_signal.unchecked_into()),
    );
    let second = c.submit("summarize".into(), input(&text), None);
    controller.abort();
    let error = JsFuture::from(first).await.unwrap_err();
    rejected_with(&error, "aborted");
    let job = ok(second).await;
    assert!(id_of(&job).starts_with("job_"));
    assert_eq!(posts(&seen(&id).await).len(), 1, "one request on the wire");
}

#[wasm_bindgen_test]
async fn a_submit_aborted_mid_flight_leaves_the_shared_request_to_its_twin() {
    let id = scenario("abort-mid-flight");
    let c = client(&format!("{}/drop-once/{id}", proxy()), Some(JsValue::NULL));
    let text = format!("{id}: taken back while the request is retried.");
    let controller = web_sys::AbortController::new().unwrap();
    // Aborted when the shared request is lost and about to be retried: by then both
    // submits wait on it.
    let abort = {
        let controller = controller.clone();
        Closure::<dyn Fn(JsValue)>::new(move |_| controller.abort())
    };
    let first_options = options(&[
        ("signal", controller.signal().into()),
        ("onRetry", abort.as_ref().clone()),
    ]);
    let first = c.submit(
        "summarize".into(),
        input(&text),
        Some(first_options.unchecked_into()),
    );
    let second = c.submit("summarize".into(), input(&text), None);
    let error = JsFuture::from(first).await.unwrap_err();
    rejected_with(&error, "aborted");
    let job = ok(second).await;
    assert!(id_of(&job).starts_with("job_"));
    let sent = posts(&seen(&id).await);
    assert_eq!(
        sent.len(),
        2,
        "the lost answer, then the retry for the twin"
    );
    assert_eq!(statuses(&sent), [JsValue::from(201), JsValue::from(200)]);
    assert_eq!(
        get(&sent[0], "idempotency_key"),
        get(&sent[1], "idempotency_key")
    );
}

#[wasm_bindgen_test]
async fn each_of_two_shared_submits_hears_of_the_retry() {
    let id = scenario("on-retry-twins");
    let c = client(&format!("{}/drop-once/{id}", proxy()), Some(JsValue::NULL));
    let text = format!("{id}: two clicks, one lost answer.");
    let (first_callback, first_calls) = counter();
    let (second_callback, second_calls) = counter();
    let first = c.submit(
        "summarize".into(),
        input(&text),
        Some(options(&[("onRetry", first_callback.as_ref().clone())]).unchecked_into()),
    );
    let second = c.submit(
        "summarize".into(),
        input(&text),
        Some(options(&[("onRetry", second_callback.as_ref().clone())]).unchecked_into()),
    );
    let (a, b) = (ok(first).await, ok(second).await);
    assert_eq!(id_of(&a), id_of(&b));
    assert_eq!(
        posts(&seen(&id).await).len(),
        2,
        "one shared request, retried once"
    );
    assert_eq!(first_calls.get(), 1, "the first submit's onRetry");
    assert_eq!(second_calls.get(), 1, "the second submit's onRetry");
}

// Issue 8, item 3: a key is released whenever its job is seen final.
#[wasm_bindgen_test]
async fn a_key_is_freed_when_the_first_answer_seen_for_it_is_already_succeeded() {
    let id = scenario("final-first");
    let base = format!("{}/pass/{id}", proxy());
    let text = format!("{id}: the other tab only knows the key.");
    let first_tab = mapStorage();
    let a =
        ok(client(&base, Some(first_tab.clone())).submit("summarize".into(), input(&text), None))
            .await;
    // What a reload mid-request leaves behind: the key, stored before the send, and
    // no job id yet.
    let second_tab = copyStorage(&first_tab, false, 0.0);
    let done = ok(client(&base, Some(first_tab)).wait(id_of(&a), None)).await;
    assert_eq!(get(&done, "status"), "succeeded");

    let c = client(&base, Some(second_tab.clone()));
    let replay = ok(c.submit("summarize".into(), input(&text), None)).await;
    assert_eq!(id_of(&replay), id_of(&a), "the replay of the finished job");
    assert_eq!(get(&replay, "status"), "succeeded");
    assert_eq!(get(&second_tab, "length"), 0, "its key was freed");
    let again = ok(c.submit("summarize".into(), input(&text), None)).await;
    assert_ne!(id_of(&again), id_of(&a), "a new intent, a new job");
    let sent = posts(&seen(&id).await);
    assert_eq!(
        statuses(&sent),
        [JsValue::from(201), JsValue::from(200), JsValue::from(201)]
    );
    assert_ne!(
        get(&sent[2], "idempotency_key"),
        get(&sent[1], "idempotency_key")
    );
}

// Issue 8, item 4: a key lives as long as its job, not 24 hours from its birth.
#[wasm_bindgen_test]
async fn a_key_thirty_days_old_still_names_its_unfinished_job() {
    let id = scenario("old-key");
    script("primary", &id, r#"[{"status":400}]"#).await;
    let base = format!("{}/pass/{id}", proxy());
    let text = format!("{id}: the provider refused, the user came back a month later.");
    let storage = mapStorage();
    let c = client(&base, Some(storage.clone()));
    let job = ok(c.submit("summarize".into(), input(&text), None)).await;
    let failed = ok(c.wait(id_of(&job), None)).await;
    assert_eq!(get(&failed, "status"), "failed", "not final: the key stays");

    let month_old = copyStorage(&storage, true, 30.0 * DAY_MS);
    let later = client(&base, Some(month_old.clone()));
    let again = ok(later.submit("summarize".into(), input(&text), None)).await;
    assert_eq!(id_of(&again), id_of(&job), "the same job, not a second one");
    let sent = posts(&seen(&id).await);
    assert_eq!(statuses(&sent), [JsValue::from(201), JsValue::from(200)]);
    assert_eq!(
        get(&sent[0], "idempotency_key"),
        get(&sent[1], "idempotency_key")
    );
    assert_eq!(get(&month_old, "length"), 1, "the key is still kept");
}

// Issue 8, item 5: the intent does not depend on how the provider is spelled.
#[wasm_bindgen_test]
async fn naming_the_kinds_primary_provider_is_the_same_intent_as_naming_none() {
    let id = scenario("spelled");
    let c = client(&format!("{}/pass/{id}", proxy()), Some(mapStorage()));
    let text = format!("{id}: the provider named or not.");
    let unnamed = ok(c.submit("summarize".into(), input(&text), None)).await;
    let primary = options(&[("provider", "primary".into())]);
    let named = ok(c.submit(
        "summarize".into(),
        input(&text),
        Some(primary.unchecked_into()),
    ))
    .await;
    assert_eq!(id_of(&named), id_of(&unnamed));
    let created: Vec<JsValue> = to_path(&posts(&seen(&id).await), "/v1/jobs")
        .into_iter()
        .filter(|e| get(e, "status") == 201)
        .collect();
    assert_eq!(created.len(), 1, "one job created");

    // Another provider is another intent.
    let fallback = options(&[("provider", "fallback".into())]);
    let other = ok(c.submit(
        "summarize".into(),
        input(&text),
        Some(fallback.unchecked_into()),
    ))
    .await;
    assert_ne!(id_of(&other), id_of(&unnamed));
}

// Issue 8, item 6: a D1 error is a 503 that the SDK retries with the same key.
#[wasm_bindgen_test]
async fn a_d1_write_whose_reply_was_lost_is_retried_with_the_same_key_into_one_job() {
    let (id, _, job) = one_job(
        "d1-after",
        "d1-fault-once",
        "D1 committed, its reply was lost.",
    )
    .await;
    assert!(id_of(&job).starts_with("job_"));
    let sent = posts(&seen(&id).await);
    assert_eq!(sent.len(), 2, "the 503, then one retry");
    assert_eq!(
        statuses(&sent),
        [JsValue::from(503), JsValue::from(200)],
        "the retry is the replay of the job the failed write made"
    );
    assert_eq!(
        get(&sent[0], "idempotency_key"),
        get(&sent[1], "idempotency_key")
    );
}

// Issue 11: the SDK writes the canonical text from the browser's own JSON; the name it
// stores a key under must stay what the protocol's fingerprint makes of the same input,
// or an upgrade would lose every stored key.
#[wasm_bindgen_test]
async fn a_key_is_stored_under_the_protocols_fingerprint_of_the_input() {
    let id = scenario("fingerprint");
    let storage = mapStorage();
    let c = client(&format!("{}/pass/{id}", proxy()), Some(storage.clone()));
    let text = format!(
        r#"{{"z":[1,2.5,-0.75,1e-7,0.1,{{"b":null,"a":true}}],"é":"x\n\u0001\"\\","{id}":"","\ue000":1,"😀":2,"A":{{}},"":[]}}"#
    );
    // An unknown kind: the server refuses it at once, after the key was stored.
    let kind = "fingerprint_probe";
    let input = js_sys::JSON::parse(&text).unwrap();
    let _ = JsFuture::from(c.submit(kind.into(), input, None)).await;
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let expected = format!(
        "onceclick:v1:intent:sdk-browser:{kind}:{}",
        onceclick_protocol::fingerprint(kind, &value, "")
    );
    let entries: js_sys::Array = get(&storage, "entries")
        .unchecked_into::<js_sys::Function>()
        .call0(&storage)
        .unwrap()
        .unchecked_into();
    let names: Vec<JsValue> = entries
        .iter()
        .map(|e| Reflect::get_u32(&e, 0).unwrap())
        .collect();
    assert_eq!(names, [JsValue::from(expected)]);
}

/// The `POST /v1/jobs` the proxy saw for scenario `id`: (status, Idempotency-Key).
async fn creates(id: &str) -> Vec<(JsValue, JsValue)> {
    to_path(&posts(&seen(id).await), "/v1/jobs")
        .iter()
        .map(|e| (get(e, "status"), get(e, "idempotency_key")))
        .collect()
}

// Issue 21, item 7: a failed provider lookup never changes an intent's name.
#[wasm_bindgen_test]
async fn a_provider_lookup_that_failed_once_makes_no_second_key_after_a_reload() {
    let id = scenario("lookup-once");
    // The job stays open (its provider call waits at a gate), so its key stays stored.
    script("primary", &id, &format!(r#"[{{"gate":"{id}"}}]"#)).await;
    let storage = mapStorage();
    let text = format!("{id}: the provider list failed once.");
    let primary = || Some(options(&[("provider", "primary".into())]).unchecked_into());
    let first = client(
        &format!("{}/providers-fail-once/{id}", proxy()),
        Some(storage.clone()),
    );
    let job = ok(first.submit("summarize".into(), input(&text), primary())).await;
    // A reload: a new client, the same storage, a lookup that works.
    let reloaded = client(&format!("{}/pass/{id}", proxy()), Some(storage.clone()));
    let again = ok(reloaded.submit("summarize".into(), input(&text), primary())).await;
    let stored = get(&storage, "length");
    release(&id).await;
    assert_eq!(id_of(&again), id_of(&job), "one job");
    let sent = creates(&id).await;
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[0].0, 201);
    assert_eq!(sent[1].1, sent[0].1, "one key");
    assert_eq!(stored, 1, "one stored key");
    let lookups = to_path(&seen(&id).await, "/v1/providers");
    assert_eq!(statuses(&lookups)[0], 500, "the first lookup failed");
}

#[wasm_bindgen_test]
async fn a_provider_lookup_that_keeps_failing_fails_the_submit_retryably_and_sends_nothing() {
    let id = scenario("lookup-down");
    let storage = mapStorage();
    let c = client(
        &format!("{}/providers-fail/{id}", proxy()),
        Some(storage.clone()),
    );
    let primary = options(&[("provider", "primary".into())]);
    let refused = JsFuture::from(c.submit(
        "summarize".into(),
        input(&format!("{id}: no provider list at all.")),
        Some(primary.unchecked_into()),
    ))
    .await
    .expect_err("a submit whose intent cannot be named");
    // The lookup's own error (the proxy's 500, `internal`), marked retryable.
    rejected_with(&refused, "internal");
    assert_eq!(get(&refused, "retryable"), true);
    let message = get(&refused, "message").as_string().unwrap();
    assert!(message.contains("/v1/providers"), "{message}");
    assert!(creates(&id).await.is_empty(), "no create was sent");
    assert_eq!(get(&storage, "length"), 0, "no key was made");
    // A submit that names no provider needs no lookup.
    let plain = ok(c.submit(
        "summarize".into(),
        input(&format!("{id}: no provider named.")),
        None,
    ))
    .await;
    assert!(id_of(&plain).starts_with("job_"));
}

// A deploy that changes the kind's primary between two submits of an open job, either way.
#[wasm_bindgen_test]
async fn a_primary_that_changes_between_two_submits_of_an_open_job_keeps_one_job() {
    // (the first client's proxy, whether the first submit names `primary`, the second's)
    for (before, named_first, after) in [
        ("pass", true, "primary-is-fallback"),
        ("primary-is-fallback", true, "pass"),
        // A submit that named no provider made the job, on the primary of its day.
        ("pass", false, "primary-is-fallback"),
    ] {
        let id = scenario(&format!("primary-moves-{before}-{named_first}"));
        // The job stays open: its provider call waits at a gate until the end.
        script("primary", &id, &format!(r#"[{{"gate":"{id}"}}]"#)).await;
        let storage = mapStorage();
        let text = format!("{id}: the primary changed while the job ran.");
        let primary = || Some(options(&[("provider", "primary".into())]).unchecked_into());
        let first = client(&format!("{}/{before}/{id}", proxy()), Some(storage.clone()));
        let first_options = if named_first { primary() } else { None };
        let job = ok(first.submit("summarize".into(), input(&text), first_options)).await;
        let later = client(&format!("{}/{after}/{id}", proxy()), Some(storage.clone()));
        let again = ok(later.submit("summarize".into(), input(&text), primary())).await;
        release(&id).await;
        assert_eq!(id_of(&again), id_of(&job), "{before} then {after}: one job");
        let sent = creates(&id).await;
        assert_eq!(
            statuses_of(&sent),
            [201, 200],
            "{before} then {after}: {sent:?}"
        );
        assert_eq!(sent[1].1, sent[0].1, "{before} then {after}: one key");
    }
}

fn statuses_of(sent: &[(JsValue, JsValue)]) -> Vec<u32> {
    sent.iter()
        .filter_map(|(s, _)| s.as_f64())
        .map(|s| s as u32)
        .collect()
}

/// Submits a job whose provider call waits at a gate, opened once `wait` reports the job
/// `running`, and follows it with `wait` through the proxy's `mode`. Checks what every
/// live wait must: it ends `succeeded`, `onUpdate` saw each version once and in order,
/// and no `GET /v1/jobs/{id}` (a poll) was sent. Returns the scenario's id and the
/// streams the proxy saw.
async fn follow_live(mode: &str) -> (String, Vec<JsValue>) {
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;
    let id = scenario(mode);
    let gate = format!("{id}-gate");
    script("primary", &id, &format!(r#"[{{"gate":"{gate}"}}]"#)).await;
    let c = client(&format!("{}/{mode}/{id}", proxy()), Some(mapStorage()));
    let job = ok(c.submit(
        "summarize".into(),
        input(&format!("{id}: followed live.")),
        None,
    ))
    .await;
    let updates: Rc<RefCell<Vec<JsValue>>> = Rc::default();
    let released = Rc::new(Cell::new(false));
    let on_update = {
        let (updates, released, gate) = (updates.clone(), released.clone(), gate.clone());
        Closure::<dyn Fn(JsValue)>::new(move |job: JsValue| {
            if get(&job, "status") == "running" && !released.replace(true) {
                let gate = gate.clone();
                wasm_bindgen_futures::spawn_local(async move { release(&gate).await });
            }
            updates.borrow_mut().push(job);
        })
    };
    let wait = options(&[("onUpdate", on_update.as_ref().clone())]);
    let done = ok(c.wait(id_of(&job), Some(wait.unchecked_into()))).await;
    assert_eq!(get(&done, "status"), "succeeded");
    let updates = updates.borrow().clone();
    let versions: Vec<f64> = updates
        .iter()
        .map(|j| get(j, "version").as_f64().unwrap())
        .collect();
    assert!(
        versions.windows(2).all(|w| w[0] <= w[1]),
        "in order: {versions:?}"
    );
    let texts: Vec<String> = updates
        .iter()
        .map(|j| js_sys::JSON::stringify(j).unwrap().as_string().unwrap())
        .collect();
    assert!(
        texts.windows(2).all(|w| w[0] != w[1]),
        "each change once: {texts:?}"
    );
    assert!(released.get(), "the stream showed the job running");
    assert_eq!(
        updates.last().map(|j| get(j, "version")),
        Some(get(&done, "version"))
    );
    let log = seen(&id).await;
    let job_path = format!("/v1/jobs/{}", id_of(&job));
    let polls = log
        .iter()
        .filter(|e| {
            get(e, "method") == "GET" && get(e, "path").as_string() == Some(job_path.clone())
        })
        .count();
    assert_eq!(polls, 0, "no poll while the stream is healthy");
    let streams = live_streams(&log);
    assert!(!streams.is_empty());
    (id, streams)
}

/// The live connections in a proxy log (`GET /v1/stream?job=…`).
fn live_streams(log: &[JsValue]) -> Vec<JsValue> {
    log.iter()
        .filter(|e| {
            get(e, "path")
                .as_string()
                .is_some_and(|p| p.starts_with("/v1/stream?"))
        })
        .cloned()
        .collect()
}

/// The `job` parameters of a live connection's path: each job's id and the position
/// the SDK resumed it from.
fn followed(stream: &JsValue) -> Vec<(String, Option<String>)> {
    let path = get(stream, "path").as_string().unwrap();
    let query = path.split_once('?').unwrap().1;
    query
        .split('&')
        .map(|pair| {
            let value = pair.strip_prefix("job=").expect("only job parameters");
            match value.split_once(':') {
                Some((id, at)) => (id.to_owned(), Some(at.to_owned())),
                None => (value.to_owned(), None),
            }
        })
        .collect()
}

// Issue 24: `wait` follows the job's live stream: one connection, no poll. The test
// page is on another origin than the proxy, so this is also the cross-origin case: the
// stream's `Authorization` header makes Chromium send a CORS preflight first.
#[wasm_bindgen_test]
async fn wait_follows_the_live_stream_and_sends_no_poll() {
    let (id, streams) = follow_live("pass").await;
    assert_eq!(streams.len(), 1, "one connection for the whole job");
    assert_eq!(followed(&streams[0]).len(), 1);
    assert_eq!(
        followed(&streams[0])[0].1,
        None,
        "no position on the first connection"
    );
    let all = seen_all(&id).await;
    let preflights: Vec<&JsValue> = all
        .iter()
        .filter(|e| get(e, "method") == "OPTIONS")
        .collect();
    assert!(
        preflights.iter().any(|e| get(e, "path")
            .as_string()
            .is_some_and(|p| p.starts_with("/v1/stream?"))),
        "the stream was preflighted, as a cross-origin fetch with Authorization is: {preflights:?}"
    );
    assert!(
        preflights.iter().all(|e| get(e, "status") == 204),
        "every preflight was allowed"
    );
}

// Issue 24: a connection dropped in mid-job is reopened from its position, and nothing
// is shown twice or lost.
#[wasm_bindgen_test]
async fn a_stream_cut_in_mid_job_resumes_from_its_position_with_nothing_lost() {
    let (_, streams) = follow_live("cut-stream-once").await;
    assert!(
        streams.len() >= 2,
        "the cut stream was reopened: {streams:?}"
    );
    let resumed = followed(&streams[1]);
    assert!(
        resumed.len() == 1
            && resumed[0]
                .1
                .as_ref()
                .is_some_and(|p| p.parse::<u64>().is_ok()),
        "the reconnect names its position: {resumed:?}"
    );
}

// Issue 24: every job a page waits on is followed on one connection (Chrome opens at
// most 6 per host over HTTP/1.1), and a job that joins reopens it with each job's
// position.
#[wasm_bindgen_test]
async fn waits_on_many_jobs_share_one_live_connection() {
    const JOBS: usize = 8;
    let id = scenario("pass");
    let gate = format!("{id}-gate");
    let c = client(&format!("{}/pass/{id}", proxy()), Some(mapStorage()));
    let mut jobs = Vec::new();
    // The first job's call waits at the gate (within the provider's timeout); the rest
    // answer at once, or queue behind it.
    for n in 0..=JOBS {
        let marker = format!("{id}-job{n}x");
        if n == 0 {
            script("primary", &marker, &format!(r#"[{{"gate":"{gate}"}}]"#)).await;
        }
        let job = ok(c.submit(
            "summarize".into(),
            input(&format!("{marker}: one of many.")),
            None,
        ))
        .await;
        jobs.push(id_of(&job));
    }
    let held = jobs[0].clone();
    // Once the held job shows `running` and each of the first eight has had a document
    // (so that each has a position to resume from: the stream may bring the held job's
    // change before another job's first document).
    let (held_running, shown_running) = latch();
    let on_update = {
        let held = held.clone();
        let seen = std::cell::RefCell::new(std::collections::HashSet::new());
        let running = std::cell::Cell::new(false);
        Closure::<dyn Fn(JsValue)>::new(move |job: JsValue| {
            seen.borrow_mut().insert(id_of(&job));
            if get(&job, "status") == "running" && id_of(&job) == held {
                running.set(true);
            }
            if running.get() && seen.borrow().len() >= JOBS {
                let _ = shown_running.call0(&JsValue::NULL);
            }
        })
    };
    let wait_on = |job: &str| {
        JsFuture::from(c.wait(
            job.to_owned(),
            Some(options(&[("onUpdate", on_update.as_ref().clone())]).unchecked_into()),
        ))
    };
    // The first eight, started together.
    let first: Vec<JsFuture> = jobs[..JOBS].iter().map(|j| wait_on(j)).collect();
    let first = futures_util::future::join_all(first);
    futures_util::pin_mut!(first);
    // Until the held job shows `running` on the stream.
    let first = match futures_util::future::select(first, JsFuture::from(held_running)).await {
        futures_util::future::Either::Right((_, first)) => first,
        futures_util::future::Either::Left(_) => panic!("every wait ended before the held job ran"),
    };
    // A ninth job joins: the connection reopens with it, and with each job's position.
    let ninth = wait_on(&jobs[JOBS]);
    release(&gate).await;
    let mut done = first.await;
    done.push(ninth.await);
    for (job, done) in jobs.iter().zip(&done) {
        let done = done.as_ref().unwrap_or_else(|e| panic!("{job}: {e:?}"));
        assert_eq!(get(done, "status"), "succeeded", "{job}");
    }
    let log = seen(&id).await;
    let polls = log
        .iter()
        .filter(|e| {
            get(e, "method") == "GET"
                && get(e, "path")
                    .as_string()
                    .is_some_and(|p| p.starts_with("/v1/jobs/"))
        })
        .count();
    assert_eq!(polls, 0, "no poll while the stream is healthy");
    let streams = live_streams(&log);
    assert!(
        streams.len() >= 2,
        "the ninth job reopened the connection: {streams:?}"
    );
    let opened = followed(&streams[0]);
    assert_eq!(
        opened.iter().map(|(j, _)| j.clone()).collect::<Vec<_>>(),
        jobs[..JOBS].to_vec(),
        "the eight waits started together opened one connection"
    );
    // The reopened connection: the jobs still waited on (the held one at least), each
    // from its position, and the ninth from its start.
    let joined = followed(&streams[1]);
    assert_eq!(
        joined.last(),
        Some(&(jobs[JOBS].clone(), None)),
        "{joined:?}"
    );
    assert!(joined.iter().any(|(j, _)| *j == held), "{joined:?}");
    for (job, at) in &joined[..joined.len() - 1] {
        assert!(
            at.as_ref().is_some_and(|p| p.parse::<u64>().is_ok()),
            "{job} resumed from its position: {joined:?}"
        );
    }
}

// Issue 24: a job the shared stream refuses (one that does not exist) is polled and
// reported on its own wait; the job already on the stream stays live.
#[wasm_bindgen_test]
async fn a_wait_on_a_missing_job_leaves_the_others_live() {
    missing_beside_live(false).await;
}

// Issue 24: the same through a second client of the same API, which stands for another
// tab: its wait goes on the first client's connection (the tabs share one), the
// refusal comes back to it as word to poll, and its poll reports the missing job.
#[wasm_bindgen_test]
async fn a_wait_in_another_tab_on_a_missing_job_is_polled_there_and_the_others_stay_live() {
    missing_beside_live(true).await;
}

/// A wait on a missing job beside a live one, on the same client or (`other_tab`) on a
/// second client of the same API.
async fn missing_beside_live(other_tab: bool) {
    let id = scenario("pass");
    let gate = format!("{id}-gate");
    script("primary", &id, &format!(r#"[{{"gate":"{gate}"}}]"#)).await;
    let base = format!("{}/pass/{id}", proxy());
    let c = client(&base, Some(mapStorage()));
    let tab = if other_tab {
        client(&base, Some(mapStorage()))
    } else {
        c.clone()
    };
    let job = ok(c.submit(
        "summarize".into(),
        input(&format!("{id}: kept live.")),
        None,
    ))
    .await;
    let (running, shown_running) = latch();
    let on_update = Closure::<dyn Fn(JsValue)>::new(move |job: JsValue| {
        if get(&job, "status") == "running" {
            let _ = shown_running.call0(&JsValue::NULL);
        }
    });
    let live = JsFuture::from(c.wait(
        id_of(&job),
        Some(options(&[("onUpdate", on_update.as_ref().clone())]).unchecked_into()),
    ));
    futures_util::pin_mut!(live);
    let live = match futures_util::future::select(live, JsFuture::from(running)).await {
        futures_util::future::Either::Right((_, live)) => live,
        futures_util::future::Either::Left(_) => panic!("the wait ended before its job ran"),
    };
    let missing = "job_00000000-0000-7000-8000-000000000000";
    let error = JsFuture::from(tab.wait(missing.into(), None))
        .await
        .unwrap_err();
    rejected_with(&error, "not_found");
    release(&gate).await;
    let done = live.await.unwrap();
    assert_eq!(get(&done, "status"), "succeeded");
    let log = seen(&id).await;
    let polled = |path: &str| {
        log.iter()
            .filter(|e| {
                get(e, "method") == "GET" && get(e, "path").as_string().as_deref() == Some(path)
            })
            .count()
    };
    assert_eq!(
        polled(&format!("/v1/jobs/{}", id_of(&job))),
        0,
        "the live job was never polled"
    );
    assert!(
        polled(&format!("/v1/jobs/{missing}")) >= 1,
        "the missing job was polled"
    );
    assert!(
        live_streams(&log)
            .iter()
            .any(|s| followed(s).iter().any(|(j, _)| j == missing)),
        "the missing job was asked for on the one connection"
    );
    let last = live_streams(&log).last().cloned().unwrap();
    assert_eq!(
        followed(&last),
        vec![(id_of(&job), followed(&last)[0].1.clone())],
        "the stream went on with the live job alone"
    );
}

// Issue 42, 6: a stream of two jobs whose first job's hub does not answer serves the
// other and names that one (`event: unserved`): the SDK polls it, and the other stays
// live. (Before, the named job waited, unserved, until the stream's next connection.)
#[wasm_bindgen_test]
async fn a_job_the_stream_cannot_serve_is_polled_and_the_other_stays_live() {
    let id = scenario("unserve-stream-once");
    let gate = format!("{id}-gate");
    script("primary", &id, &format!(r#"[{{"gate":"{gate}"}}]"#)).await;
    let c = client(
        &format!("{}/unserve-stream-once/{id}", proxy()),
        Some(mapStorage()),
    );
    let mut jobs = Vec::new();
    for n in 0..2 {
        let text = format!("{id}: job {n} of two, on one stream.");
        jobs.push(ok(c.submit("summarize".into(), input(&text), None)).await);
    }
    let waits: Vec<_> = jobs
        .iter()
        .map(|job| JsFuture::from(c.wait(id_of(job), None)))
        .collect();
    // The connection that follows both, which the proxy marks for the fault.
    let log = seen_until(&id, |log| {
        live_streams(log).iter().any(|s| followed(s).len() == 2)
    })
    .await;
    let both = live_streams(&log)
        .into_iter()
        .find(|s| followed(s).len() == 2)
        .unwrap();
    let unserved = followed(&both)[0].0.clone();
    let polls = |log: &[JsValue], job: &str| {
        let path = format!("/v1/jobs/{job}");
        log.iter()
            .filter(|e| {
                get(e, "method") == "GET" && get(e, "path").as_string() == Some(path.clone())
            })
            .count()
    };
    // The named job is polled while the other stays on the stream.
    seen_until(&id, |log| polls(log, &unserved) >= 1).await;
    release(&gate).await;
    for wait in waits {
        let done = wait.await.unwrap();
        assert_eq!(get(&done, "status"), "succeeded");
    }
    let log = seen(&id).await;
    let live = jobs.iter().map(id_of).find(|j| *j != unserved).unwrap();
    assert_eq!(polls(&log, &live), 0, "the other job was never polled");
}

/// Waits on `job` (through `client`) that must end `succeeded` within 20 s.
async fn succeeds(client: &Client, job: &JsValue, first_event_ms: u32) {
    let wait = options(&[
        ("firstEventMs", first_event_ms.into()),
        ("timeoutMs", 20_000.into()),
    ]);
    let done = ok(client.wait(id_of(job), Some(wait.unchecked_into()))).await;
    assert_eq!(get(&done, "status"), "succeeded");
}

// Issue 24: a stream whose answer never comes (a proxy that holds it back whole) is
// given `firstEventMs`, as one that says nothing after its head is; then the wait polls.
#[wasm_bindgen_test]
async fn a_stream_whose_answer_never_comes_falls_back_to_polling() {
    let (id, c, job) = one_job("hang-streams", "hang-streams", "its stream never answers.").await;
    succeeds(&c, &job, 300).await;
    let log = seen_until(&id, |log| {
        live_streams(log)
            .iter()
            .all(|s| get(s, "client_closed") == true)
    })
    .await;
    assert_eq!(live_streams(&log).len(), 1, "one stream, closed: {log:?}");
    assert!(
        !to_path(&log, &format!("/v1/jobs/{}", id_of(&job))).is_empty(),
        "the job was polled"
    );
}

// Issue 24: when the stream fails in a way every tab would meet (here, it never
// answers), the tab that leads tells the others to poll, instead of letting each tab
// in turn lead into the same failure.
#[wasm_bindgen_test]
async fn a_stream_that_fails_for_every_tab_makes_the_other_tabs_poll_too() {
    let id = scenario("hang-streams");
    let base = format!("{}/hang-streams/{id}", proxy());
    let (leader, other) = (
        client(&base, Some(mapStorage())),
        client(&base, Some(mapStorage())),
    );
    let mut jobs = Vec::new();
    for (n, c) in [&leader, &other].into_iter().enumerate() {
        let text = format!("{id}: the tabs' stream never answers, job {n}.");
        jobs.push(ok(c.submit("summarize".into(), input(&text), None)).await);
    }
    const FIRST_EVENT_MS: u32 = 2_000;
    let first = succeeds(&leader, &jobs[0], FIRST_EVENT_MS);
    futures_util::pin_mut!(first);
    // The leader's connection is asked for before the other tab waits.
    let started = seen_until(&id, |log| !live_streams(log).is_empty());
    futures_util::pin_mut!(started);
    let first = match futures_util::future::select(first, started).await {
        futures_util::future::Either::Right((_, first)) => first,
        futures_util::future::Either::Left(_) => {
            panic!("the wait ended before its stream was asked for")
        }
    };
    futures_util::future::join(first, succeeds(&other, &jobs[1], FIRST_EVENT_MS)).await;
    let log = seen(&id).await;
    let (one, two) = (id_of(&jobs[0]), id_of(&jobs[1]));
    let polls = to_path(&log, &format!("/v1/jobs/{two}"));
    assert!(!polls.is_empty(), "the other tab's job was polled");
    let first_poll = get(&polls[0], "at_ms").as_f64().unwrap();
    // The other tab may take the lock before it hears the word to poll, and open its
    // stream with its job; it then drops it as the word comes, and polls at once,
    // instead of leading into the same failure for `firstEventMs`.
    for stream in live_streams(&log) {
        let named: Vec<String> = followed(&stream).into_iter().map(|(j, _)| j).collect();
        if named.contains(&two) && !named.contains(&one) {
            let led = first_poll - get(&stream, "at_ms").as_f64().unwrap();
            assert!(
                led < f64::from(FIRST_EVENT_MS) / 2.0,
                "the other tab led into the same failure for {led} ms: {log:?}"
            );
        }
    }
}

// Issue 24: a tab restored from the back/forward cache announces its jobs again, since
// it said it followed none on `pagehide`.
#[wasm_bindgen_test]
async fn a_tab_back_from_the_page_cache_announces_its_jobs_again() {
    let id = scenario("pass");
    let gate = format!("{id}-gate");
    script("primary", &id, &format!(r#"[{{"gate":"{gate}"}}]"#)).await;
    let base = format!("{}/pass/{id}", proxy());
    let (leader, other) = (
        client(&base, Some(mapStorage())),
        client(&base, Some(mapStorage())),
    );
    let mut jobs = Vec::new();
    for (n, c) in [&leader, &other].into_iter().enumerate() {
        let text = format!("{id}: back from the page cache, job {n}.");
        jobs.push(ok(c.submit("summarize".into(), input(&text), None)).await);
    }
    let (one, two) = (id_of(&jobs[0]), id_of(&jobs[1]));
    let first = JsFuture::from(leader.wait(one.clone(), None));
    seen_until(&id, |log| !live_streams(log).is_empty()).await;
    let second = JsFuture::from(other.wait(two.clone(), None));
    // The leader follows the other tab's job: the other tab's announce came through.
    seen_until(&id, |log| {
        live_streams(log)
            .iter()
            .any(|s| followed(s).iter().any(|(j, _)| *j == two))
    })
    .await;
    let heard = JsFuture::from(announced_on_pageshow(&base, token(), &two, 5_000))
        .await
        .unwrap();
    assert_eq!(heard, true, "a want for the other tab's job after pageshow");
    release(&gate).await;
    for done in [first.await.unwrap(), second.await.unwrap()] {
        assert_eq!(get(&done, "status"), "succeeded");
    }
}

// Issue 24: one stream follows at most 20 jobs (`MAX_STREAM_JOBS`); a wait on a job
// beyond them polls that job at once, and the stream carries the twenty unchanged.
#[wasm_bindgen_test]
async fn a_wait_past_the_streams_twenty_jobs_polls_that_job_alone() {
    const MAX: usize = 20;
    let id = scenario("pass");
    let c = client(&format!("{}/pass/{id}", proxy()), Some(mapStorage()));
    let mut jobs = Vec::new();
    for n in 0..=MAX {
        let job = ok(c.submit(
            "summarize".into(),
            input(&format!("{id}-job{n}x: one past twenty.")),
            None,
        ))
        .await;
        jobs.push(id_of(&job));
    }
    // All 21 waits begin in one tick, so the first connection has its fill at once.
    let waits: Vec<JsFuture> = jobs
        .iter()
        .map(|job| JsFuture::from(c.wait(job.clone(), None)))
        .collect();
    for (job, done) in jobs.iter().zip(futures_util::future::join_all(waits).await) {
        let done = done.unwrap_or_else(|e| panic!("{job}: {e:?}"));
        assert_eq!(get(&done, "status"), "succeeded", "{job}");
    }
    let log = seen(&id).await;
    let polled = |job: &str| {
        let path = format!("/v1/jobs/{job}");
        log.iter()
            .filter(|e| {
                get(e, "method") == "GET" && get(e, "path").as_string() == Some(path.clone())
            })
            .count()
    };
    let streams = live_streams(&log);
    assert!(!streams.is_empty(), "the waits opened a stream");
    let first: Vec<String> = followed(&streams[0]).into_iter().map(|(j, _)| j).collect();
    assert_eq!(
        first,
        jobs[..MAX].to_vec(),
        "the stream carried the first twenty"
    );
    assert!(
        streams
            .iter()
            .all(|s| followed(s).iter().all(|(j, _)| *j != jobs[MAX])),
        "no stream carried the twenty-first: {streams:?}"
    );
    assert!(polled(&jobs[MAX]) >= 1, "the twenty-first was polled");
    for job in &jobs[..MAX] {
        assert_eq!(polled(job), 0, "{job} stayed live");
    }
}

// Issue 24: the last wait leaving takes the connection with it, also while its answer
// has not come: the interrupt aborts the fetch, so no request outlives its waits (the
// proxy holds the stream unanswered for 30 s unless the browser closes it).
#[wasm_bindgen_test]
async fn an_aborted_wait_closes_a_stream_whose_answer_has_not_come() {
    let (id, c, job) = one_job("hang-streams", "hang-streams", "its stream never answers.").await;
    let controller = web_sys::AbortController::new().unwrap();
    let wait = JsFuture::from(
        c.wait(
            id_of(&job),
            Some(
                options(&[
                    ("signal", controller.signal().into()),
                    // Longer than the test: the fall-back to polling must not end the fetch.
                    ("firstEventMs", 60_000.into()),
                ])
                .unchecked_into(),
            ),
        ),
    );
    seen_until(&id, |log| !live_streams(log).is_empty()).await;
    controller.abort();
    let error = wait.await.unwrap_err();
    rejected_with(&error, "aborted");
    let log = seen_until(&id, |log| {
        live_streams(log)
            .iter()
            .all(|s| get(s, "client_closed") == true)
    })
    .await;
    assert_eq!(
        live_streams(&log).len(),
        1,
        "one connection, closed: {log:?}"
    );
}

// Issue 25: streamed text through the SDK. The test Worker's `fallback` streams.

/// The summary the streamed tests' provider writes: accents, CJK and an emoji.
const STREAMED: &str =
    "Café, 会议 and 😀: the meeting ran long, and the numbers came in above the forecast";

/// The content the mock streams for a summary (`tests/src/mock.rs`, `content_of`): its
/// JSON object, keys in order.
fn streamed_content(summary: &str) -> String {
    let o = Object::new();
    set(&o, "sentiment", "neutral");
    set(&o, "summary", summary);
    js_sys::JSON::stringify(&o).unwrap().into()
}

/// A new scenario whose `fallback` calls stream [`STREAMED`] in pieces of `chunk_chars`
/// code points `chunk_ms` apart; a client through the proxy (storage `storage`), and the
/// input (longer than the summary, as the kind's contract wants).
async fn streamed_scenario(
    name: &str,
    chunk_chars: u32,
    chunk_ms: u32,
) -> (String, String, JsValue) {
    let id = scenario(name);
    let step = format!(
        r#"[{{"summary":{},"chunk_chars":{chunk_chars},"chunk_ms":{chunk_ms}}}]"#,
        String::from(js_sys::JSON::stringify(&STREAMED.into()).unwrap())
    );
    script("fallback", &id, &step).await;
    let base = format!("{}/pass/{id}", proxy());
    let text = input(&format!(
        "{id}: {STREAMED}, as everyone who was there will tell you."
    ));
    (id, base, text)
}

fn on_fallback() -> JsValue {
    options(&[("provider", "fallback".into())])
}

/// The id of `job`'s attempt number `n` (from 1).
fn attempt_id(job: &JsValue, n: u32) -> String {
    let attempts = js_sys::Array::from(&get(job, "attempts"));
    attempts
        .iter()
        .find(|a| get(a, "n").as_f64() == Some(f64::from(n)))
        .map(|a| get(&a, "id").as_string().unwrap())
        .unwrap_or_else(|| panic!("no attempt {n}: {:?}", js_sys::JSON::stringify(job)))
}

/// Resolves once recorder `r` heard at least `n` deltas.
fn deltas_at_least(r: &JsValue, n: u32) -> Promise {
    let wait: js_sys::Function = get(r, "deltasAtLeast").unchecked_into();
    wait.call1(r, &n.into()).unwrap().unchecked_into()
}

fn recorded(r: &JsValue, name: &str) -> Vec<JsValue> {
    js_sys::Array::from(&get(r, name)).iter().collect()
}

#[wasm_bindgen_test]
async fn streamed_text_reaches_on_text_whole_in_order_and_as_a_partial_object() {
    let (_, base, text) = streamed_scenario("text", 3, 20).await;
    let c = client(&base, Some(mapStorage()));
    let job = ok(c.submit(
        "summarize".into(),
        text,
        Some(on_fallback().unchecked_into()),
    ))
    .await;
    let r = recorder();
    let done = ok(c.wait(id_of(&job), Some(get(&r, "options").unchecked_into()))).await;
    assert_eq!(get(&done, "status"), "succeeded");
    let attempt = attempt_id(&done, 1);
    let content = streamed_content(STREAMED);
    assert_eq!(text_problems(&r, &attempt, &content), "");
    assert!(
        recorded(&r, "texts").len() > 3,
        "the text came in pieces, each shown as it came"
    );
    // The partial objects: the summary grows through them, and ends whole.
    let summaries: Vec<String> = recorded(&r, "partials")
        .iter()
        .filter_map(|p| get(p, "summary").as_string())
        .collect();
    assert!(
        summaries.iter().all(|s| STREAMED.starts_with(s.as_str())),
        "{summaries:?}"
    );
    assert!(
        summaries.iter().any(|s| s.len() < STREAMED.len()),
        "a partial summary was shown before the end: {summaries:?}"
    );
    assert_eq!(summaries.last().map(String::as_str), Some(STREAMED));
    assert_eq!(get(&get(&done, "result"), "summary"), STREAMED);
    assert_eq!(get(&done, "completed_by"), attempt.as_str());
}

// A reload in mid-stream: the page's wait goes, a new client with the same storage
// submits the same intent, gets the same job, and its text continues from where it was.
#[wasm_bindgen_test]
async fn a_reload_mid_stream_continues_the_same_jobs_text() {
    let (_, base, text) = streamed_scenario("reload", 3, 60).await;
    let storage = mapStorage();
    let before = client(&base, Some(storage.clone()));
    let job = ok(before.submit(
        "summarize".into(),
        text.clone(),
        Some(on_fallback().unchecked_into()),
    ))
    .await;
    let controller = web_sys::AbortController::new().unwrap();
    let r1 = recorder();
    set(
        get(&r1, "options").unchecked_ref(),
        "signal",
        controller.signal(),
    );
    let first = before.wait(id_of(&job), Some(get(&r1, "options").unchecked_into()));
    ok(deltas_at_least(&r1, 4)).await;
    controller.abort();
    let error = JsFuture::from(first).await.unwrap_err();
    rejected_with(&error, "aborted");
    let shown = recorded(&r1, "texts").last().unwrap().as_string().unwrap();

    let after = client(&base, Some(storage));
    let again = ok(after.submit(
        "summarize".into(),
        text,
        Some(on_fallback().unchecked_into()),
    ))
    .await;
    assert_eq!(id_of(&again), id_of(&job), "the reload found the same job");
    let r2 = recorder();
    let done = ok(after.wait(id_of(&again), Some(get(&r2, "options").unchecked_into()))).await;
    assert_eq!(get(&done, "status"), "succeeded");
    let attempt = attempt_id(&done, 1);
    let content = streamed_content(STREAMED);
    assert_eq!(text_problems(&r2, &attempt, &content), "");
    let first_text = recorded(&r2, "texts")[0].as_string().unwrap();
    assert!(
        first_text.starts_with(&shown) && content.starts_with(&first_text),
        "the text went on from {shown:?}, not from {first_text:?}"
    );
    assert!(shown.len() < content.len(), "the reload came mid-stream");
}

// Two tabs show the same text: the one that leads streams it, and hands the other the
// text so far, then each piece.
#[wasm_bindgen_test]
async fn two_tabs_show_the_same_streamed_text() {
    let (_, base, text) = streamed_scenario("tabs", 3, 40).await;
    let one = client(&base, Some(mapStorage()));
    let other = client(&base, Some(mapStorage()));
    let job = ok(one.submit(
        "summarize".into(),
        text,
        Some(on_fallback().unchecked_into()),
    ))
    .await;
    let r1 = recorder();
    let first = JsFuture::from(one.wait(id_of(&job), Some(get(&r1, "options").unchecked_into())));
    futures_util::pin_mut!(first);
    let some_text = JsFuture::from(deltas_at_least(&r1, 3));
    let first = match futures_util::future::select(first, some_text).await {
        futures_util::future::Either::Right((_, first)) => first,
        futures_util::future::Either::Left(_) => panic!("the job ended before it streamed"),
    };
    let r2 = recorder();
    // The second tab follows through the first's connection: it announces the job.
    let announced = JsFuture::from(want_heard(&base, token(), &id_of(&job), 5_000));
    let second =
        JsFuture::from(other.wait(id_of(&job), Some(get(&r2, "options").unchecked_into())));
    let (a, b, announced) = futures_util::future::join3(first, second, announced).await;
    assert_eq!(
        announced.unwrap(),
        true,
        "the second tab followed, it did not lead"
    );
    let content = streamed_content(STREAMED);
    for (done, r) in [(a.unwrap(), &r1), (b.unwrap(), &r2)] {
        assert_eq!(get(&done, "status"), "succeeded");
        assert_eq!(text_problems(r, &attempt_id(&done, 1), &content), "");
    }
}

/// A hedged job whose primary is held at a gate while its hedge (`fallback`) streams:
/// the scenario, its client, the job and the gate.
async fn hedged_stream(name: &str, chunk_ms: u32) -> (Client, JsValue, String) {
    let (id, base, text) = streamed_scenario(name, 2, chunk_ms).await;
    let gate = format!("{id}-gate");
    script("primary", &id, &format!(r#"[{{"gate":"{gate}"}}]"#)).await;
    // A hedge goes only to a provider certified for the kind.
    let admin = env(
        "ONCECLICK_SDK_ADMIN_TOKEN",
        option_env!("ONCECLICK_SDK_ADMIN_TOKEN"),
    );
    ok(certify(
        &format!("{base}/v1/providers/fallback/certify"),
        admin,
    ))
    .await;
    let c = client(&base, Some(mapStorage()));
    let job = ok(c.submit("summarize_hedged".into(), text, None)).await;
    (c, job, gate)
}

// A hedge race where the hedge streams and wins: the SDK's final text is the winner's,
// and the job's result is what it says.
#[wasm_bindgen_test]
async fn a_hedge_that_streams_and_wins_is_the_text_and_the_result() {
    let (c, job, gate) = hedged_stream("hedge-wins", 10).await;
    let r = recorder();
    let done = ok(c.wait(id_of(&job), Some(get(&r, "options").unchecked_into()))).await;
    release(&gate).await;
    assert_eq!(get(&done, "status"), "succeeded");
    let hedge = attempt_id(&done, 2);
    assert_eq!(get(&done, "completed_by"), hedge.as_str());
    assert_eq!(text_problems(&r, &hedge, &streamed_content(STREAMED)), "");
    let last = recorded(&r, "texts").last().unwrap().clone();
    let parsed = js_sys::JSON::parse(&last.as_string().unwrap()).unwrap();
    assert_eq!(
        get(&parsed, "summary"),
        get(&get(&done, "result"), "summary")
    );
}

// A hedge race where the hedge streamed first and the primary (which does not stream)
// wins: the SDK followed the hedge's text, then shows the winner's, and never the
// loser's after the winner was known.
#[wasm_bindgen_test]
async fn a_hedge_that_streamed_and_lost_gives_way_to_the_winners_text() {
    let (c, job, gate) = hedged_stream("hedge-loses", 100).await;
    let r = recorder();
    let wait = JsFuture::from(c.wait(id_of(&job), Some(get(&r, "options").unchecked_into())));
    ok(deltas_at_least(&r, 2)).await;
    release(&gate).await;
    let done = wait.await.unwrap();
    assert_eq!(get(&done, "status"), "succeeded");
    let (primary, hedge) = (attempt_id(&done, 1), attempt_id(&done, 2));
    assert_eq!(get(&done, "completed_by"), primary.as_str());
    let attempts: Vec<String> = recorded(&r, "attempts")
        .iter()
        .map(|a| a.as_string().unwrap())
        .collect();
    assert_eq!(attempts.first(), Some(&hedge), "the hedge streamed first");
    let winner_from = attempts.iter().position(|a| *a == primary);
    assert!(
        winner_from.is_some_and(|at| attempts[at..].iter().all(|a| *a == primary)),
        "once the winner is shown, only the winner: {attempts:?}"
    );
    // No piece of the loser's comes after the document that names the winner.
    let deltas = recorded(&r, "deltas");
    let settled = recorded(&r, "updates")
        .iter()
        .find(|u| get(u, "0") == "succeeded")
        .map(|u| get(u, "1").as_f64().unwrap() as usize);
    assert!(
        settled.is_some_and(|at| deltas[at..]
            .iter()
            .all(|d| get(d, "attemptId") != hedge.as_str())),
        "a delta of the loser after the succeeded document: {settled:?} of {}",
        deltas.len()
    );
    let last = recorded(&r, "texts").last().unwrap().as_string().unwrap();
    assert_eq!(
        Some(last),
        js_sys::JSON::stringify(&get(&done, "result"))
            .ok()
            .map(String::from),
        "the winner's text is its result"
    );
}

#[wasm_bindgen_test]
async fn every_rejection_is_an_onceclick_error_and_an_error() {
    // The constructor throws one.
    let thrown = Client::new(Object::new().unchecked_into()).unwrap_err();
    rejected_with(&thrown, "invalid_argument");
    assert!(get(&thrown, "message")
        .as_string()
        .unwrap()
        .contains("baseUrl"));

    // A submit whose input cannot be sent rejects with one, before any request.
    let c = client(proxy(), Some(mapStorage()));
    let cyclic = Object::new();
    set(&cyclic, "me", cyclic.clone());
    let error = JsFuture::from(c.submit("summarize".into(), cyclic.into(), None))
        .await
        .unwrap_err();
    rejected_with(&error, "invalid_argument");

    // What JS threw underneath is its `cause`: a URL `Request` refuses.
    let options = Object::new();
    set(&options, "intent", "a bad URL");
    set(&options, "storage", mapStorage());
    let error = JsFuture::from(onceclick::idempotent_fetch(
        "http://[not a host".into(),
        JsValue::UNDEFINED,
        options.unchecked_into(),
    ))
    .await
    .unwrap_err();
    rejected_with(&error, "invalid_argument");
    assert!(
        get(&error, "cause").is_instance_of::<js_sys::TypeError>(),
        "the Request's TypeError is the cause"
    );

    // The server's refusal: a cancel of a job that does not exist (one request, no
    // live stream left behind for the tests after this one).
    let error = JsFuture::from(c.cancel("job_00000000-0000-7000-8000-000000000001".into(), None))
        .await
        .unwrap_err();
    rejected_with(&error, "not_found");
    assert_eq!(get(&error, "status"), 404);
}

/// A client of `base` with the options `extra` besides its token and storage.
fn client_with(base: &str, extra: &[(&str, JsValue)]) -> Client {
    let mut members = vec![
        ("baseUrl", JsValue::from_str(base)),
        ("token", JsValue::from_str(token())),
        ("storage", mapStorage()),
    ];
    members.extend(extra.iter().cloned());
    Client::new(options(&members).unchecked_into()).unwrap()
}

#[wasm_bindgen_test]
async fn the_clients_retry_policy_and_timeout_bound_each_call() {
    // Every request held unanswered: each try ends at `timeoutMs` (long enough for its
    // CORS preflight on a busy machine), and is retried as `retry` says, with the same key.
    let id = scenario("retry-policy");
    let policy = options(&[
        ("tries", 2.into()),
        ("baseMs", 1.into()),
        ("capMs", 1.into()),
    ]);
    let c = client_with(
        &format!("{}/hang/{id}", proxy()),
        &[("retry", policy), ("timeoutMs", 1500.into())],
    );
    let error = JsFuture::from(c.submit("summarize".into(), input(&format!("{id}: held")), None))
        .await
        .unwrap_err();
    rejected_with(&error, "timeout");
    assert_eq!(get(&error, "retryable"), true);
    let sent = posts(&seen(&id).await);
    assert_eq!(sent.len(), 2, "two tries: {sent:?}");
    assert_eq!(
        get(&sent[0], "idempotency_key"),
        get(&sent[1], "idempotency_key")
    );

    // `retry: false`: one try.
    let once = scenario("retry-off");
    let c = client_with(
        &format!("{}/hang/{once}", proxy()),
        &[("retry", false.into()), ("timeoutMs", 1500.into())],
    );
    let error = JsFuture::from(c.submit("summarize".into(), input(&format!("{once}: held")), None))
        .await
        .unwrap_err();
    rejected_with(&error, "timeout");
    assert_eq!(posts(&seen(&once).await).len(), 1, "one try");

    // The caller's abort in the middle of the one try is `aborted`, not the network's.
    let held = scenario("retry-off-aborted");
    let c = client_with(
        &format!("{}/hang/{held}", proxy()),
        &[("retry", false.into())],
    );
    let controller = web_sys::AbortController::new().unwrap();
    let submit = options(&[("signal", controller.signal().into())]);
    let pending = c.submit(
        "summarize".into(),
        input(&format!("{held}: aborted")),
        Some(submit.unchecked_into()),
    );
    seen_until(&held, |log| !posts(log).is_empty()).await;
    controller.abort();
    let error = JsFuture::from(pending).await.unwrap_err();
    rejected_with(&error, "aborted");
}

#[wasm_bindgen_test]
async fn a_custom_fetch_sends_every_request_and_the_apps_headers_ride_along() {
    let id = scenario("custom-fetch");
    let counting = counting_fetch();
    let headers = options(&[("X-Onceclick-Test", "from the app".into())]);
    let c = client_with(
        &format!("{}/pass/{id}", proxy()),
        &[("fetch", get(&counting, "fetch")), ("headers", headers)],
    );
    let job = ok(c.submit("summarize".into(), input(&format!("{id}: fetched")), None)).await;
    let done = ok(c.wait(id_of(&job), None)).await;
    assert_eq!(get(&done, "status"), "succeeded");
    let calls: Vec<String> = js_sys::Array::from(&get(&counting, "calls"))
        .iter()
        .map(|c| c.as_string().unwrap())
        .collect();
    let path = |p: &str| format!("/pass/{id}{p}");
    assert!(
        calls.contains(&format!("POST {}", path("/v1/jobs"))),
        "{calls:?}"
    );
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with(&format!("GET {}", path("/v1/stream")))),
        "the live stream's request too: {calls:?}"
    );
    let log = seen(&id).await;
    assert!(!log.is_empty());
    for entry in &log {
        assert_eq!(get(entry, "app_header"), "from the app", "{entry:?}");
    }
}

#[wasm_bindgen_test]
async fn cancel_and_forget_take_a_signal() {
    let id = scenario("signals");
    let gate = format!("gate-{id}");
    script("primary", &id, &format!(r#"[{{"gate":"{gate}"}}]"#)).await;
    let c = client(&format!("{}/pass/{id}", proxy()), Some(mapStorage()));
    let text = format!("{id}: cancel and forget, aborted.");
    let job = ok(c.submit("summarize".into(), input(&text), None)).await;
    let aborted = web_sys::AbortController::new().unwrap();
    aborted.abort();
    let with_signal = options(&[("signal", aborted.signal().into())]);

    let error = JsFuture::from(c.cancel(id_of(&job), Some(with_signal.clone().unchecked_into())))
        .await
        .unwrap_err();
    rejected_with(&error, "aborted");
    let error = JsFuture::from(c.forget(
        "summarize".into(),
        input(&text),
        Some(with_signal.unchecked_into()),
    ))
    .await
    .unwrap_err();
    rejected_with(&error, "aborted");
    // Neither did anything: the job was not cancelled, and its key still names it.
    assert!(
        to_path(&seen(&id).await, "/cancel").is_empty(),
        "no cancel was sent"
    );
    let again = ok(c.submit("summarize".into(), input(&text), None)).await;
    assert_eq!(id_of(&again), id_of(&job), "the key was not forgotten");
    release(&gate).await;
    let done = ok(c.wait(id_of(&job), None)).await;
    assert_eq!(get(&done, "status"), "succeeded");
}
