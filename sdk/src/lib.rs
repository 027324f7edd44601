//! onceclick for the browser: make a button safe to click twice.
//!
//! Each user intent — (owner, kind, fingerprint of the input) — gets one
//! `Idempotency-Key`, stored before the first byte is sent and reused on a double-click,
//! a re-render, a reload and in another tab, for as long as its job lives: until the SDK
//! sees the job end (`succeeded`, `cancelled`) or `forget` is called. Calls retry
//! safely with the same key; a new attempt (`retry`) carries its own key too.
//!
//! ```js
//! import init, { Client } from "onceclick";
//! await init();
//! const client = new Client({ baseUrl: "https://api.example.com", getToken });
//! const job = await client.submit("summarize", { text });
//! const done = await client.wait(job.id, { onUpdate: render });
//! ```
#![deny(missing_docs, missing_debug_implementations)]

mod error;
mod http;
mod js;
mod json;
mod keys;

pub use error::OnceclickError;

use http::{Answer, Policy};
use js_sys::Promise;
use keys::{Keys, PREFIX};
use onceclick_protocol::{fingerprint, JobStatus};

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::future_to_promise;
use web_sys::{AbortSignal, Headers, Request, RequestInit};

#[wasm_bindgen(typescript_custom_section)]
const TYPES: &'static str = r#"
export type JobStatus = "queued" | "running" | "unknown" | "failed" | "succeeded" | "cancelled";
export type AttemptState = "starting" | "running" | "succeeded" | "failed" | "unknown" | "abandoned" | "cancelled" | "superseded";
export type ErrorCode =
  | "unauthorized" | "forbidden" | "not_found" | "method_not_allowed"
  | "idempotency_key_missing" | "idempotency_key_invalid" | "payload_too_large" | "invalid_json"
  | "unknown_kind" | "invalid_input" | "unknown_provider" | "idempotency_key_reused"
  | "attempt_in_flight" | "attempt_unresolved" | "job_finished" | "attempt_not_unknown"
  | "provider_not_certified" | "precondition_failed" | "contract_violation"
  | "service_unavailable" | "internal"
  | "network" | "aborted" | "timeout" | "invalid_argument" | "invalid_response";
export interface AttemptError { code: string; message: string; retryable: boolean }
export interface Attempt {
  id: string; n: number; provider: string; state: AttemptState;
  started_at: string; finished_at: string | null; error: AttemptError | null;
}
export interface Job<Result = unknown, Input = unknown> {
  id: string; kind: string; status: JobStatus; version: number; input: Input;
  provider: string; result: Result | null; completed_by: string | null;
  created_at: string; updated_at: string; attempts: Attempt[];
}
/** Anything with the methods of `localStorage`. */
export interface StorageLike {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
  key(index: number): string | null;
  readonly length: number;
}
export interface RetryInfo { attempt: number; delayMs: number; code: string; status?: number }
export interface ClientOptions {
  /** The API's origin, e.g. "https://api.example.com". */
  baseUrl: string;
  /** A bearer token; or give `getToken`. */
  token?: string;
  /** Called before each call; may return a promise. */
  getToken?: () => string | Promise<string>;
  /**
   * `localStorage` by default; `null` keeps keys in memory only. A key is kept as long
   * as its job: until a submit, wait, cancel or retry sees the job `succeeded` or
   * `cancelled`, or `forget` is called. It never expires by age.
   */
  storage?: StorageLike | null;
}
export interface SubmitOptions {
  /** Naming the kind's primary provider is the same intent as naming none. */
  provider?: string;
  /** Aborts this submit only: a request shared with other submits goes on for them. */
  signal?: AbortSignal;
  /** Called before each retry of the request this submit waits on. */
  onRetry?: (info: RetryInfo) => void;
}
export interface WaitOptions {
  signal?: AbortSignal;
  /** Called with the job each time it changes. */
  onUpdate?: (job: Job) => void;
  /** Reject with code "timeout" after this long. */
  timeoutMs?: number;
}
/** A retry() sends its own Idempotency-Key: a resend after a lost answer gets the same attempt. */
export interface RetryOptions { provider?: string; signal?: AbortSignal; onRetry?: (info: RetryInfo) => void }
export interface ForgetOptions { provider?: string }
export interface IdempotentFetchOptions {
  /** Names the user's intent: one key per intent string. */
  intent: string;
  storage?: StorageLike | null;
  signal?: AbortSignal;
  onRetry?: (info: RetryInfo) => void;
  /** How long a stored key is reused, in hours (the server's retention; default 24). */
  retentionHours?: number;
}
"#;

#[wasm_bindgen]
extern "C" {
    /// `ClientOptions` in TypeScript.
    #[wasm_bindgen(typescript_type = "ClientOptions")]
    pub type ClientOptions;
    /// `SubmitOptions` in TypeScript.
    #[wasm_bindgen(typescript_type = "SubmitOptions")]
    pub type SubmitOptions;
    /// `WaitOptions` in TypeScript.
    #[wasm_bindgen(typescript_type = "WaitOptions")]
    pub type WaitOptions;
    /// `RetryOptions` in TypeScript.
    #[wasm_bindgen(typescript_type = "RetryOptions")]
    pub type RetryOptions;
    /// `ForgetOptions` in TypeScript.
    #[wasm_bindgen(typescript_type = "ForgetOptions")]
    pub type ForgetOptions;
    /// `IdempotentFetchOptions` in TypeScript.
    #[wasm_bindgen(typescript_type = "IdempotentFetchOptions")]
    pub type IdempotentFetchOptions;
}

/// `idempotentFetch`'s default: the server keeps a key bound for at least 24 hours.
const DEFAULT_RETENTION_HOURS: f64 = 24.0;

thread_local! {
    /// In-flight submits of this page, by intent: one request each, shared by every
    /// submit of that intent until it settles. A few at most, so a list (a hash map
    /// costs the SDK a kilobyte).
    static FLIGHTS: RefCell<Vec<(String, Rc<Flight>)>> = const { RefCell::new(Vec::new()) };
}

/// One request, shared by the concurrent submits of one intent. It runs under its own
/// signal, so that one submit's abort does not end it for the others.
struct Flight {
    promise: Promise,
    /// Its `AbortController`: aborted once every submit waiting on it has been aborted.
    controller: JsValue,
    /// Submits still waiting on it.
    waiters: Cell<u32>,
    /// The `onRetry` of every submit still waiting on it.
    on_retry: Callbacks,
}

type Callbacks = Rc<RefCell<Vec<js_sys::Function>>>;

impl Flight {
    fn join(&self, on_retry: Option<&js_sys::Function>) {
        self.waiters.set(self.waiters.get() + 1);
        if let Some(callback) = on_retry {
            self.on_retry.borrow_mut().push(callback.clone());
        }
    }

    /// A waiter was aborted: it stops hearing of retries; the last one ends the request.
    fn leave(flight: &Rc<Flight>, on_retry: Option<&js_sys::Function>) {
        if let Some(callback) = on_retry {
            let mut list = flight.on_retry.borrow_mut();
            let target: &JsValue = callback;
            if let Some(i) = list.iter().position(|f| {
                let f: &JsValue = f;
                f == target
            }) {
                list.remove(i);
            }
        }
        flight.waiters.set(flight.waiters.get().saturating_sub(1));
        if flight.waiters.get() == 0 {
            let _ = js::call(&flight.controller, "abort", &[]);
            land(flight);
        }
    }
}

/// The flight of `intent`, if one is in the air.
fn flight_of(intent: &str) -> Option<Rc<Flight>> {
    FLIGHTS.with(|f| {
        f.borrow()
            .iter()
            .find(|(name, _)| name == intent)
            .map(|(_, flight)| flight.clone())
    })
}

/// Takes `flight` off the list (a newer flight of the same intent stays).
fn land(flight: &Rc<Flight>) {
    FLIGHTS.with(|f| f.borrow_mut().retain(|(_, g)| !Rc::ptr_eq(g, flight)));
}

fn option_string(options: &JsValue, name: &str) -> Option<String> {
    js::get_string(options, name)
}

fn option_signal(options: &JsValue) -> Option<AbortSignal> {
    js::get(options, "signal").dyn_into().ok()
}

fn option_function(options: &JsValue, name: &str) -> Option<js_sys::Function> {
    js::get(options, name).dyn_into().ok()
}

fn policy(options: &JsValue) -> Policy {
    Policy {
        signal: option_signal(options),
        on_retry: Rc::new(RefCell::new(
            option_function(options, "onRetry").into_iter().collect(),
        )),
    }
}

/// The owner a token names (its `sub`), read without verifying: it only scopes keys.
fn owner_of(token: &str) -> String {
    let payload = token.split('.').nth(1).unwrap_or_default();
    let mut b64: String = payload.replace('-', "+").replace('_', "/");
    while b64.len() % 4 != 0 {
        b64.push('=');
    }
    js::call(&js::global(), "atob", &[b64.into()])
        .ok()
        .and_then(|s| s.as_string())
        .and_then(|text| json::parse(&text))
        .and_then(|claims| js::get_string(&claims, "sub"))
        .unwrap_or_else(|| "anonymous".to_owned())
}

/// The name of `kind`'s primary provider, read off `GET /v1/providers`.
fn primary_of(list: &JsValue, kind: &str) -> Option<String> {
    let providers: js_sys::Array = js::get(list, "providers").dyn_into().ok()?;
    providers
        .iter()
        .find(|p| js::get(&js::get(&js::get(p, "kinds"), kind), "primary").as_bool() == Some(true))
        .and_then(|p| js::get_string(&p, "name"))
}

/// The job's `status`, read off the server's JSON.
fn status_of(job: &JsValue) -> Option<JobStatus> {
    let status = js::get_string(job, "status")?;
    JobStatus::ALL
        .iter()
        .copied()
        .find(|s| s.as_str() == status)
}

/// The input as the server will read it: through `JSON.stringify`, then parsed as
/// I-JSON, so that what is fingerprinted here is exactly what is sent.
fn input_json(input: &JsValue) -> Result<serde_json::Value, OnceclickError> {
    json::to_value(input).map_err(|e| OnceclickError::invalid(format!("input: {e}")))
}

struct Inner {
    base_url: String,
    token: Option<String>,
    get_token: Option<js_sys::Function>,
    keys: Keys,
    /// `GET /v1/providers`, asked once (again only after a failure).
    providers: RefCell<Option<Promise>>,
}

/// A client of one onceclick API.
#[wasm_bindgen]
#[derive(Clone)]
pub struct Client {
    inner: Rc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &self.inner.base_url)
            .finish_non_exhaustive()
    }
}

#[wasm_bindgen]
impl Client {
    /// `new Client({ baseUrl, token | getToken, storage? })`.
    #[wasm_bindgen(constructor)]
    pub fn new(options: ClientOptions) -> Result<Client, OnceclickError> {
        let options: JsValue = options.into();
        let base_url = option_string(&options, "baseUrl")
            .ok_or_else(|| OnceclickError::invalid("baseUrl is required"))?
            .trim_end_matches('/')
            .to_owned();
        let token = option_string(&options, "token");
        let get_token = option_function(&options, "getToken");
        if token.is_none() && get_token.is_none() {
            return Err(OnceclickError::invalid("give token or getToken"));
        }
        Ok(Client {
            inner: Rc::new(Inner {
                base_url,
                token,
                get_token,
                // A key lives as long as its job, not a fixed time: the server keeps a
                // `failed` or `unknown` job, and its key, for as long as it is not final.
                keys: Keys::new(js::get(&options, "storage"), None),
                providers: RefCell::new(None),
            }),
        })
    }

    /// Submits the intent `(kind, input)`: creates its job, or returns the one it
    /// already has. Concurrent submits of one intent share one request; each keeps its
    /// own `signal` (aborting one rejects only that one) and its own `onRetry`.
    #[wasm_bindgen(unchecked_return_type = "Promise<Job>")]
    pub fn submit(
        &self,
        kind: String,
        #[wasm_bindgen(unchecked_param_type = "unknown")] input: JsValue,
        options: Option<SubmitOptions>,
    ) -> Promise {
        let options: JsValue = options.map(Into::into).unwrap_or(JsValue::UNDEFINED);
        let client = self.clone();
        let provider = option_string(&options, "provider");
        let value = match input_json(&input) {
            Ok(v) => v,
            Err(e) => return Promise::reject(&e.into()),
        };
        // Both bodies now, while the input is as the caller gave it: the one naming the
        // provider, and the one without it, sent if the provider is the kind's primary.
        let body = |provider: Option<&str>| {
            json::stringify(&object(&[
                ("kind", JsValue::from_str(&kind)),
                ("input", input.clone()),
                (
                    "provider",
                    provider.map_or(JsValue::UNDEFINED, JsValue::from_str),
                ),
            ]))
        };
        let (Some(named), Some(plain)) = (body(provider.as_deref()), body(None)) else {
            return Promise::reject(
                &OnceclickError::invalid("input is not JSON-serializable").into(),
            );
        };
        let signal = option_signal(&options);
        let on_retry = option_function(&options, "onRetry");
        // The intent needs the owner, which may need an async token: the flight is
        // keyed once the token is known, inside the future.
        future_to_promise(async move {
            let token = client.token().await?;
            let provider = client.as_named(&kind, provider, signal.as_ref()).await?;
            let body = if provider.is_some() { named } else { plain };
            let print = fingerprint(&kind, &value, provider.as_deref().unwrap_or(""));
            let intent = format!("{PREFIX}intent:{}:{kind}:{print}", owner_of(&token));
            let flight = match flight_of(&intent) {
                Some(flight) => flight,
                None => client.take_off(&intent, body)?,
            };
            flight.join(on_retry.as_ref());
            let shared = wasm_bindgen_futures::JsFuture::from(flight.promise.clone());
            match js::abortable(signal.as_ref(), shared).await {
                Ok(outcome) => {
                    land(&flight);
                    outcome
                }
                Err(aborted) => {
                    Flight::leave(&flight, on_retry.as_ref());
                    Err(aborted.into())
                }
            }
        })
    }

    /// Resolves to the job once it has finished (`succeeded`, `cancelled`) or needs a
    /// decision (`failed`: ask for a new attempt; `unknown`: resolve or cancel). Polls
    /// with backoff and `ETag`, calling `onUpdate` on every change.
    #[wasm_bindgen(unchecked_return_type = "Promise<Job>")]
    pub fn wait(&self, job_id: String, options: Option<WaitOptions>) -> Promise {
        let options: JsValue = options.map(Into::into).unwrap_or(JsValue::UNDEFINED);
        let client = self.clone();
        future_to_promise(async move {
            let policy = policy(&options);
            let on_update = option_function(&options, "onUpdate");
            let timeout = js::get(&options, "timeoutMs").as_f64();
            let work = client.poll(&job_id, &policy, on_update.as_ref());
            let job = match timeout {
                None => js::abortable(policy.signal.as_ref(), work).await??,
                Some(ms) => {
                    let limit = async {
                        js::sleep(ms).await;
                        Err(OnceclickError::new(
                            "timeout",
                            format!("job {job_id} did not finish within {} ms", ms as u64),
                        ))
                    };
                    let (work, limit) = (std::pin::pin!(work), std::pin::pin!(limit));
                    let raced = futures_util::future::select(work, limit);
                    match js::abortable(policy.signal.as_ref(), raced).await? {
                        futures_util::future::Either::Left((out, _))
                        | futures_util::future::Either::Right((out, _)) => out?,
                    }
                }
            };
            Ok(job)
        })
    }

    /// Asks for a new attempt on the same job (the fallback button). Safe to retry: each
    /// call sends its own `Idempotency-Key`, unchanged on every resend, so a resend after
    /// a lost answer gets the attempt the first send made (200, replayed), never a
    /// second one. It also sends `If-Match` with the job's ETag, so a click on a job
    /// that changed since it was read is refused (412).
    #[wasm_bindgen(unchecked_return_type = "Promise<Attempt>")]
    pub fn retry(&self, job_id: String, options: Option<RetryOptions>) -> Promise {
        let options: JsValue = options.map(Into::into).unwrap_or(JsValue::UNDEFINED);
        let client = self.clone();
        future_to_promise(async move { Ok(client.new_attempt(&job_id, &options).await?) })
    }

    /// The owner gives up: the job becomes `cancelled` and its key is freed.
    #[wasm_bindgen(unchecked_return_type = "Promise<Job>")]
    pub fn cancel(&self, job_id: String) -> Promise {
        let client = self.clone();
        future_to_promise(async move {
            let path = format!("/v1/jobs/{job_id}/cancel");
            let answer = client
                .call("POST", &path, None, &[], &Policy::default(), true)
                .await?;
            let job = client.job_answer(answer).await?;
            Ok(job)
        })
    }

    /// Forgets the key of the intent `(kind, input)`: the next submit is a new intent.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn forget(
        &self,
        kind: String,
        #[wasm_bindgen(unchecked_param_type = "unknown")] input: JsValue,
        options: Option<ForgetOptions>,
    ) -> Promise {
        let options: JsValue = options.map(Into::into).unwrap_or(JsValue::UNDEFINED);
        let client = self.clone();
        future_to_promise(async move {
            let input = input_json(&input)?;
            let token = client.token().await?;
            let provider = option_string(&options, "provider");
            let provider = client.as_named(&kind, provider, None).await?;
            let print = fingerprint(&kind, &input, provider.as_deref().unwrap_or(""));
            client.inner.keys.remove(&format!(
                "{PREFIX}intent:{}:{kind}:{print}",
                owner_of(&token)
            ));
            Ok(JsValue::UNDEFINED)
        })
    }
}

impl Client {
    /// Starts the one request of `intent` on this page, under its own signal.
    fn take_off(&self, intent: &str, body: String) -> Result<Rc<Flight>, OnceclickError> {
        let (controller, signal) = js::abort_controller()?;
        let policy = Policy {
            signal: Some(signal),
            on_retry: Callbacks::default(),
        };
        let on_retry = policy.on_retry.clone();
        let (client, name) = (self.clone(), intent.to_owned());
        let work = move || {
            future_to_promise(async move { client.submit_once(&name, &body, &policy).await })
        };
        let promise = js::locked(intent, work);
        let flight = Rc::new(Flight {
            promise,
            controller,
            waiters: Cell::new(0),
            on_retry,
        });
        FLIGHTS.with(|f| f.borrow_mut().push((intent.to_owned(), flight.clone())));
        Ok(flight)
    }

    /// `provider`, or `None` when it names `kind`'s primary: naming the primary is the
    /// same intent as naming no provider. Reads `GET /v1/providers` (once per client);
    /// if that fails, the provider stays as named.
    async fn as_named(
        &self,
        kind: &str,
        provider: Option<String>,
        signal: Option<&AbortSignal>,
    ) -> Result<Option<String>, OnceclickError> {
        let Some(provider) = provider else {
            return Ok(None);
        };
        let listed = wasm_bindgen_futures::JsFuture::from(self.providers());
        let primary = js::abortable(signal, listed)
            .await?
            .ok()
            .and_then(|list| primary_of(&list, kind));
        Ok((primary.as_deref() != Some(provider.as_str())).then_some(provider))
    }

    /// The promise of `GET /v1/providers`'s JSON, shared by every submit of this client.
    fn providers(&self) -> Promise {
        if let Some(asked) = self.inner.providers.borrow().clone() {
            return asked;
        }
        let client = self.clone();
        let asked = future_to_promise(async move {
            let answer = client
                .call("GET", "/v1/providers", None, &[], &Policy::default(), true)
                .await;
            let list = match answer {
                Ok(answer) if answer.status == 200 => answer.js_json().await.ok(),
                _ => None,
            };
            // A failure is not kept: the next submit asks again.
            list.ok_or_else(|| {
                client.inner.providers.replace(None);
                JsValue::NULL
            })
        });
        self.inner.providers.replace(Some(asked.clone()));
        asked
    }

    async fn token(&self) -> Result<String, OnceclickError> {
        if let Some(token) = &self.inner.token {
            return Ok(token.clone());
        }
        let get = self
            .inner
            .get_token
            .as_ref()
            .ok_or_else(|| OnceclickError::invalid("no token"))?;
        let value = get.call0(&JsValue::NULL).map_err(|e| {
            OnceclickError::new(
                "unauthorized",
                format!("getToken threw: {}", js::describe(e)),
            )
        })?;
        js::resolve(value)
            .await
            .ok()
            .and_then(|v| v.as_string())
            .ok_or_else(|| OnceclickError::new("unauthorized", "getToken gave no string"))
    }

    /// One API call with the SDK's retry policy.
    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
        policy: &Policy,
        retry_409: bool,
    ) -> Result<Answer, OnceclickError> {
        let token = self.token().await?;
        let url = format!("{}{path}", self.inner.base_url);
        let make = || -> Result<Request, JsValue> {
            let h = Headers::new()?;
            h.set("Authorization", &format!("Bearer {token}"))?;
            if body.is_some() {
                h.set("Content-Type", "application/json")?;
            }
            for (name, value) in headers {
                h.set(name, value)?;
            }
            let init = RequestInit::new();
            init.set_method(method);
            init.set_headers(&h);
            if let Some(b) = body {
                init.set_body(&JsValue::from_str(b));
            }
            if let Some(signal) = &policy.signal {
                init.set_signal(Some(signal));
            }
            Request::new_with_str_and_init(&url, &init)
        };
        http::send(&make, policy, retry_409).await
    }

    /// A 2xx job answer as a `Job`, else its problem as an error. Frees the key of a
    /// job that has ended.
    async fn job_answer(&self, answer: Answer) -> Result<JsValue, OnceclickError> {
        if !(200..300).contains(&answer.status) {
            return Err(answer.error().await);
        }
        let job = answer.js_json().await?;
        if status_of(&job).is_some_and(JobStatus::is_final) {
            if let Some(id) = js::get_string(&job, "id") {
                self.inner.keys.free_job(&id);
            }
        }
        Ok(job)
    }

    async fn submit_once(
        &self,
        intent: &str,
        body: &str,
        policy: &Policy,
    ) -> Result<JsValue, JsValue> {
        // Stored before the first byte is sent: a reload mid-request reuses it.
        let mut entry = self.inner.keys.get_or_create(intent);
        let answer = self
            .call(
                "POST",
                "/v1/jobs",
                Some(body),
                &[("Idempotency-Key", &entry.key)],
                policy,
                true,
            )
            .await?;
        let job = self.job_answer(answer).await?;
        if status_of(&job).is_some_and(JobStatus::is_final) {
            // The job has ended: free the key, even when this is the first answer seen
            // for it (a replay after a lost 201, a reload mid-request), whose entry has
            // no job id for `free_job` to find.
            self.inner.keys.remove(intent);
        } else {
            entry.job_id = js::get_string(&job, "id");
            self.inner.keys.put(intent, &entry);
        }
        Ok(job)
    }

    async fn poll(
        &self,
        job_id: &str,
        policy: &Policy,
        on_update: Option<&js_sys::Function>,
    ) -> Result<JsValue, OnceclickError> {
        let path = format!("/v1/jobs/{job_id}");
        let mut etag: Option<String> = None;
        let mut pause = 250.0;
        loop {
            let conditional: Vec<(&str, &str)> =
                etag.iter().map(|t| ("If-None-Match", t.as_str())).collect();
            let answer = self
                .call("GET", &path, None, &conditional, policy, true)
                .await?;
            if answer.status == 304 {
                pause = (pause * 1.5_f64).min(4000.0);
            } else {
                etag = answer.header("ETag");
                let job = self.job_answer(answer).await?;
                if let Some(callback) = on_update {
                    let _ = callback.call1(&JsValue::NULL, &job);
                }
                if matches!(
                    status_of(&job),
                    Some(
                        JobStatus::Succeeded
                            | JobStatus::Cancelled
                            | JobStatus::Failed
                            | JobStatus::Unknown
                    )
                ) {
                    return Ok(job);
                }
                pause = 250.0;
            }
            js::sleep(pause).await;
        }
    }

    async fn new_attempt(
        &self,
        job_id: &str,
        options: &JsValue,
    ) -> Result<JsValue, OnceclickError> {
        let policy = policy(options);
        // This request's identity, the same on every resend: a resend after a lost
        // answer gets the attempt the first send made.
        let request = keys::new_key();
        let path = format!("/v1/jobs/{job_id}");
        let current = self.call("GET", &path, None, &[], &policy, true).await?;
        let etag = current.header("ETag").unwrap_or_default();
        self.job_answer(current).await?;
        let provider = option_string(options, "provider");
        let body = object(&[(
            "provider",
            provider
                .as_deref()
                .map_or(JsValue::UNDEFINED, JsValue::from_str),
        )]);
        let body = json::stringify(&body).unwrap_or_else(|| "{}".to_owned());
        // No retry of a retryable 409 here: `attempt_in_flight` is another click's
        // attempt (a resend of ours is answered with ours, by its Idempotency-Key).
        let answer = self
            .call(
                "POST",
                &format!("{path}/attempts"),
                Some(&body),
                &[("If-Match", &etag), ("Idempotency-Key", &request)],
                &policy,
                false,
            )
            .await?;
        match answer.status {
            // 201: made now; 200: made by an earlier send of this same request.
            200 | 201 => answer.js_json().await,
            _ => Err(answer.error().await),
        }
    }
}

/// A plain JS object; `undefined` members are left out by `JSON.stringify`.
fn object(members: &[(&str, JsValue)]) -> JsValue {
    let o = js_sys::Object::new();
    for (name, value) in members {
        let _ = js_sys::Reflect::set(&o, &JsValue::from_str(name), value);
    }
    o.into()
}

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
        let entry = keys.get_or_create(&format!("{PREFIX}fetch:{intent}"));
        let init: RequestInit = if init.is_undefined() || init.is_null() {
            RequestInit::new()
        } else {
            init.unchecked_into()
        };
        let policy = policy(&options);
        if let Some(signal) = &policy.signal {
            init.set_signal(Some(signal));
        }
        let template = Request::new_with_str_and_init(&url, &init)
            .map_err(|e| OnceclickError::invalid(js::describe(e)))?;
        template
            .headers()
            .set("Idempotency-Key", &entry.key)
            .map_err(|e| OnceclickError::invalid(js::describe(e)))?;
        let make = || template.clone();
        let answer = http::send(&make, &policy, true).await?;
        Ok(answer.response.into())
    })
}

#[cfg(test)]
mod tests {
    use onceclick_protocol::{AttemptState, ErrorCode, JobStatus};

    #[test]
    fn typescript_names_every_code_and_state() {
        // The TypeScript section is consumed by the macro; read it from the source.
        const TYPES: &str = include_str!("lib.rs");
        for code in ErrorCode::ALL {
            assert!(TYPES.contains(&format!("\"{}\"", code.as_str())), "{code}");
        }
        for status in JobStatus::ALL {
            assert!(
                TYPES.contains(&format!("\"{}\"", status.as_str())),
                "{status:?}"
            );
        }
        for state in AttemptState::ALL {
            assert!(
                TYPES.contains(&format!("\"{}\"", state.as_str())),
                "{state:?}"
            );
        }
    }
}
