//! Small typed doors into the JS global scope: timers, fetch, Web Locks, abort signals.
//! Everything goes through `globalThis`, so the SDK works in a window and in a worker.

use crate::error::OnceclickError;
use futures_util::future::{select, Either};
use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

pub(crate) fn global() -> JsValue {
    js_sys::global().into()
}

/// `obj[name]`, or `undefined`.
pub(crate) fn get(obj: &JsValue, name: &str) -> JsValue {
    Reflect::get(obj, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED)
}

/// `obj[name]` as a string, if it is one.
pub(crate) fn get_string(obj: &JsValue, name: &str) -> Option<String> {
    get(obj, name).as_string()
}

/// `obj[name](...args)`; a throw becomes `Err`.
pub(crate) fn call(obj: &JsValue, name: &str, args: &[JsValue]) -> Result<JsValue, JsValue> {
    let f: Function = get(obj, name)
        .dyn_into()
        .map_err(|_| JsValue::from_str(&format!("{name} is not a function")))?;
    let array: js_sys::Array = args.iter().collect();
    f.apply(obj, &array)
}

/// `wasm_bindgen_futures::future_to_promise`, through one boxed future type: its
/// machinery is then compiled once for the whole SDK instead of once per call site. Its
/// error is an [`OnceclickError`], so that every promise the SDK hands out rejects with
/// a JS `OnceclickError`, never anything else.
pub(crate) fn future_to_promise(
    work: impl std::future::Future<Output = Result<JsValue, OnceclickError>> + 'static,
) -> Promise {
    wasm_bindgen_futures::future_to_promise(rejecting(Box::pin(work)))
}

/// One boxed future of the SDK's, its error made the JS `OnceclickError`: not generic,
/// so compiled once.
async fn rejecting(
    work: std::pin::Pin<Box<dyn std::future::Future<Output = Result<JsValue, OnceclickError>>>>,
) -> Result<JsValue, JsValue> {
    Ok(work.await?)
}

/// A promise that resolves to `undefined` after `ms` milliseconds.
pub(crate) fn timer(ms: f64) -> Promise {
    timer_id(ms).0
}

/// [`timer`], and its id for `clearTimeout`: a timer raced against something that
/// usually comes first is cleared, not left to pile up.
pub(crate) fn timer_id(ms: f64) -> (Promise, JsValue) {
    let mut id = JsValue::UNDEFINED;
    let promise = Promise::new(&mut |resolve, _| {
        id = call(
            &global(),
            "setTimeout",
            &[resolve.into(), JsValue::from_f64(ms)],
        )
        .unwrap_or(JsValue::UNDEFINED);
    });
    (promise, id)
}

/// Resolves after `ms` milliseconds.
pub(crate) async fn sleep(ms: f64) {
    let _ = JsFuture::from(timer(ms)).await;
}

/// A future that resolves when `signal` aborts (never, without a signal).
async fn aborted(signal: Option<&web_sys::AbortSignal>) {
    let Some(signal) = signal else {
        return futures_util::future::pending().await;
    };
    if signal.aborted() {
        return;
    }
    let promise = Promise::new(&mut |resolve, _| {
        let options = js_sys::Object::new();
        let _ = Reflect::set(&options, &"once".into(), &JsValue::TRUE);
        let _ = call(
            signal.as_ref(),
            "addEventListener",
            &[JsValue::from_str("abort"), resolve.into(), options.into()],
        );
    });
    let _ = JsFuture::from(promise).await;
}

/// Runs `work` unless `signal` aborts first; an abort rejects at once with `aborted`.
pub(crate) async fn abortable<T>(
    signal: Option<&web_sys::AbortSignal>,
    work: impl std::future::Future<Output = T>,
) -> Result<T, OnceclickError> {
    if signal.is_some_and(|s| s.aborted()) {
        return Err(OnceclickError::aborted());
    }
    let work = std::pin::pin!(work);
    let abort = std::pin::pin!(aborted(signal));
    match select(work, abort).await {
        Either::Left((out, _)) => Ok(out),
        Either::Right(((), _)) => Err(OnceclickError::aborted()),
    }
}

/// `new globalThis[class]()`.
pub(crate) fn construct(class: &str) -> Result<JsValue, JsValue> {
    construct_with(class, &[])
}

/// `new globalThis[class](...args)`.
pub(crate) fn construct_with(class: &str, args: &[JsValue]) -> Result<JsValue, JsValue> {
    let class: Function = get(&global(), class).dyn_into()?;
    Reflect::construct(&class, &args.iter().collect())
}

/// A new `AbortController`: the controller itself (to `abort` it) and its signal.
pub(crate) fn abort_controller() -> Result<(JsValue, web_sys::AbortSignal), OnceclickError> {
    let fail = OnceclickError::invalid_from;
    let controller = construct("AbortController").map_err(fail)?;
    let signal = get(&controller, "signal").dyn_into().map_err(fail)?;
    Ok((controller, signal))
}

/// `fetch(request)`, or the app's `fetch` if it gave one; a rejection (the network)
/// becomes `Err` with what it rejected with.
pub(crate) async fn fetch(
    request: &web_sys::Request,
    fetcher: Option<&Function>,
) -> Result<web_sys::Response, JsValue> {
    let promise = fetched(request, fetcher)?;
    let promise: Promise = promise.dyn_into()?;
    JsFuture::from(promise).await?.dyn_into()
}

/// [`fetch`], given `ms` to answer: `Ok(None)` when it did not (the caller aborts it).
pub(crate) async fn fetch_within(
    request: &web_sys::Request,
    ms: f64,
    fetcher: Option<&Function>,
) -> Result<Option<web_sys::Response>, String> {
    let promise = fetched(request, fetcher).map_err(|e| describe(&e))?;
    let (timer, id) = timer_id(ms);
    let answer = JsFuture::from(Promise::race(&js_sys::Array::of2(&promise, &timer))).await;
    let _ = call(&global(), "clearTimeout", &[id]);
    match answer.map_err(|e| describe(&e))? {
        answer if answer.is_undefined() => Ok(None),
        answer => answer.dyn_into().map(Some).map_err(|e| describe(&e)),
    }
}

/// What `fetch(request)` (the app's, or the global one) returns.
fn fetched(request: &web_sys::Request, fetcher: Option<&Function>) -> Result<JsValue, JsValue> {
    match fetcher {
        Some(f) => f.call1(&JsValue::UNDEFINED, request),
        None => call(&global(), "fetch", &[request.into()]),
    }
}

/// A signal that aborts after `ms` (`AbortSignal.timeout`), and when `signal` does
/// (`AbortSignal.any`). A browser without `any` gets the deadline alone (the caller's
/// abort still rejects the call at once, through `abortable`); one without `timeout`,
/// `signal` alone.
pub(crate) fn timeout_signal(ms: f64, signal: Option<&web_sys::AbortSignal>) -> JsValue {
    let class = get(&global(), "AbortSignal");
    let Ok(timeout) = call(&class, "timeout", &[JsValue::from_f64(ms)]) else {
        return signal.map_or(JsValue::UNDEFINED, |s| s.into());
    };
    match signal {
        Some(signal) => call(
            &class,
            "any",
            &[js_sys::Array::of2(&timeout, signal).into()],
        )
        .unwrap_or(timeout),
        None => timeout,
    }
}

/// A JS error value as text.
pub(crate) fn describe(e: &JsValue) -> String {
    get_string(e, "message")
        .or_else(|| e.as_string())
        .unwrap_or_else(|| "unknown error".to_owned())
}

/// Awaits `value` if it is a promise (or thenable), else returns it.
pub(crate) async fn resolve(value: JsValue) -> Result<JsValue, JsValue> {
    if value.has_type::<Promise>() || get(&value, "then").is_function() {
        JsFuture::from(Promise::resolve(&value)).await
    } else {
        Ok(value)
    }
}

/// The work that `start` begins, run while holding the Web Lock `name`
/// (`navigator.locks`) where the browser has the API, otherwise directly; the promise
/// settles as the work does. Tabs of one origin then take turns: the second sees the
/// first's stored key.
pub(crate) fn locked(name: &str, start: impl FnOnce() -> Promise + 'static) -> Promise {
    let locks = get(&get(&global(), "navigator"), "locks");
    if locks.is_undefined() || locks.is_null() {
        return start();
    }
    let held = Closure::once_into_js(move |_lock: JsValue| start());
    match call(&locks, "request", &[JsValue::from_str(name), held]) {
        Ok(promise) => Promise::resolve(&promise),
        Err(e) => Promise::reject(&e),
    }
}

/// A plain JS object; `undefined` members are left out by `JSON.stringify`.
pub(crate) fn object(members: &[(&str, JsValue)]) -> JsValue {
    let o = js_sys::Object::new();
    for (name, value) in members {
        let _ = Reflect::set(&o, &JsValue::from_str(name), value);
    }
    o.into()
}
