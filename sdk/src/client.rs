//! `Client`: submit, wait, retry, cancel and forget against one onceclick API, and what
//! every call shares (the token, sending, reading a job's answer, freeing the key of a
//! job that ended). Beside it: `naming.rs`, the name an intent's key is stored under;
//! `wait.rs`, how a wait follows the live stream or polls; `stream.rs`, the client's
//! one live connection.

mod naming;
mod stream;
mod wait;

use crate::call::Call;
use crate::decimal::decimal;
use crate::error::{JsOnceclickError, OnceclickError};
use crate::flight;
use crate::http::{Answer, Policy};
use crate::js;
use crate::js::future_to_promise;
use crate::json;
use crate::keys::{self, Keys};
use crate::text::Show;
use crate::transport::Transport;
use crate::types::{
    option_function, option_signal, option_string, policy, CancelOptions, ClientOptions,
    ForgetOptions, RetryOptions, SubmitOptions, WaitOptions,
};
use crate::watch::{status_of, Watching};
use js_sys::Promise;
use onceclick_protocol::JobStatus;
use std::cell::RefCell;
use std::rc::Rc;
use wait::{Followed, FIRST_EVENT_MS};
use wasm_bindgen::prelude::*;

/// The input as the server will read it: through `JSON.stringify`, then parsed as
/// I-JSON, so that what is fingerprinted here is exactly what is sent.
fn input_json(input: &JsValue) -> Result<String, OnceclickError> {
    json::canonical(input).map_err(|e| OnceclickError::invalid(format!("input: {e}")))
}

struct Inner {
    base_url: String,
    /// How its requests go out: `retry`, `timeoutMs`, `fetch`, `headers`.
    transport: Transport,
    token: Option<String>,
    get_token: Option<js_sys::Function>,
    keys: Keys,
    /// `GET /v1/providers`, asked once (again only after a failure).
    providers: RefCell<Option<Promise>>,
    /// Why the last `GET /v1/providers` failed.
    lookup_error: RefCell<Option<OnceclickError>>,
    /// The jobs followed live, on one connection (`watch.rs`), shared with the other
    /// tabs (`share.rs`).
    watching: Rc<RefCell<Watching>>,
}

/// A client of one onceclick API. Its TypeScript declaration, generic over the kinds, is
/// written in `types.rs`.
#[wasm_bindgen(skip_typescript)]
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
    /// `new Client({ baseUrl, token | getToken, storage? })`; throws an
    /// `OnceclickError` (`invalid_argument`) without them.
    #[wasm_bindgen(constructor, skip_typescript)]
    pub fn new(options: ClientOptions) -> Result<Client, JsOnceclickError> {
        Self::made(options.into()).map_err(|e| JsValue::from(e).unchecked_into())
    }

    /// Submits the intent `(kind, input)`: creates its job, or returns the one it
    /// already has. Concurrent submits of one intent share one request; each keeps its
    /// own `signal` (aborting one rejects only that one) and its own `onRetry`.
    #[wasm_bindgen(skip_typescript)]
    pub fn submit(&self, kind: String, input: JsValue, options: Option<SubmitOptions>) -> Promise {
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
            json::stringify(&js::object(&[
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
            let asked = provider;
            let resolved = client
                .as_named(&kind, asked.clone(), signal.as_ref())
                .await?;
            let (intent, named_body) =
                client.stored_name(&token, &kind, &value, asked.as_deref(), resolved.as_deref());
            let body = if named_body { named } else { plain };
            let flight = match flight::flight_of(&intent) {
                Some(flight) => flight,
                None => {
                    let name = intent.clone();
                    flight::take_off(&intent, move |policy: Policy| {
                        future_to_promise(async move {
                            client
                                .submit_once(&name, &body, asked.as_deref(), &policy)
                                .await
                        })
                    })?
                }
            };
            flight.join(on_retry.as_ref());
            let shared = wasm_bindgen_futures::JsFuture::from(flight.promise.clone());
            match js::abortable(signal.as_ref(), shared).await {
                Ok(outcome) => {
                    flight::land(&flight);
                    outcome.map_err(OnceclickError::from_js)
                }
                Err(aborted) => {
                    flight::Flight::leave(&flight, on_retry.as_ref());
                    Err(aborted)
                }
            }
        })
    }

    /// Resolves to the job once it has finished (`succeeded`, `cancelled`) or needs a
    /// decision (`failed`: ask for a new attempt; `unknown`: resolve or cancel), calling
    /// `onUpdate` once per change, in order. Follows the job's live stream, reconnecting
    /// from its last position after a dropped connection; polls with backoff and `ETag`
    /// where the stream cannot be had (see `WaitOptions`).
    #[wasm_bindgen(skip_typescript)]
    pub fn wait(&self, job_id: String, options: Option<WaitOptions>) -> Promise {
        let options: JsValue = options.map(Into::into).unwrap_or(JsValue::UNDEFINED);
        let client = self.clone();
        future_to_promise(async move {
            let policy = policy(&options);
            let mut show = Show::of(&options);
            let timeout = js::get(&options, "timeoutMs").as_f64();
            let live = js::get(&options, "live").as_bool() != Some(false);
            let first_ms = js::get(&options, "firstEventMs")
                .as_f64()
                .unwrap_or(FIRST_EVENT_MS);
            let work = async {
                let followed = match live {
                    true => client.follow(&job_id, &mut show, first_ms).await,
                    false => Followed::Poll(None),
                };
                let job = match followed {
                    Followed::Settled(job) => job,
                    Followed::Poll(from) => client.poll(&job_id, &policy, &mut show, from).await?,
                };
                show.end(&job);
                Ok(job)
            };
            let job = match timeout {
                None => js::abortable(policy.signal.as_ref(), work).await??,
                Some(ms) => {
                    let limit = async {
                        js::sleep(ms).await;
                        Err(OnceclickError::new(
                            "timeout",
                            format!(
                                "job {job_id} did not finish within {} ms",
                                decimal(ms.max(0.0).trunc())
                            ),
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
    #[wasm_bindgen(skip_typescript)]
    pub fn retry(&self, job_id: String, options: Option<RetryOptions>) -> Promise {
        let options: JsValue = options.map(Into::into).unwrap_or(JsValue::UNDEFINED);
        let client = self.clone();
        future_to_promise(async move { client.new_attempt(&job_id, &options).await })
    }

    /// The owner gives up: the job becomes `cancelled` and its key is freed. Its
    /// `signal` aborts the call.
    #[wasm_bindgen(skip_typescript)]
    pub fn cancel(&self, job_id: String, options: Option<CancelOptions>) -> Promise {
        let options: JsValue = options.map(Into::into).unwrap_or(JsValue::UNDEFINED);
        let client = self.clone();
        future_to_promise(async move {
            let policy = policy(&options);
            let path = format!("/v1/jobs/{job_id}/cancel");
            let answer = client.send(Call::post(&path).policy(&policy)).await?;
            let job = client.job_answer(answer).await?;
            Ok(job)
        })
    }

    /// Forgets the key of the intent `(kind, input)`: the next submit is a new intent.
    #[wasm_bindgen(skip_typescript)]
    pub fn forget(&self, kind: String, input: JsValue, options: Option<ForgetOptions>) -> Promise {
        let options: JsValue = options.map(Into::into).unwrap_or(JsValue::UNDEFINED);
        let client = self.clone();
        future_to_promise(async move {
            let input = input_json(&input)?;
            let token = client.token().await?;
            let asked = option_string(&options, "provider");
            let signal = option_signal(&options);
            if signal.as_ref().is_some_and(web_sys::AbortSignal::aborted) {
                return Err(OnceclickError::aborted());
            }
            let resolved = client
                .as_named(&kind, asked.clone(), signal.as_ref())
                .await?;
            let (name, _) =
                client.stored_name(&token, &kind, &input, asked.as_deref(), resolved.as_deref());
            client.inner.keys.remove(&name);
            Ok(JsValue::UNDEFINED)
        })
    }
}

impl Client {
    /// The client `options` describe.
    fn made(options: JsValue) -> Result<Client, OnceclickError> {
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
                transport: Transport::of(&options),
                token,
                get_token,
                // A key lives as long as its job, not a fixed time: the server keeps a
                // `failed` or `unknown` job, and its key, for as long as it is not final.
                keys: Keys::new(js::get(&options, "storage"), None),
                providers: RefCell::new(None),
                lookup_error: RefCell::new(None),
                watching: Rc::default(),
            }),
        })
    }

    /// Sends `call` to this client's API with its token (asked of `getToken` now).
    async fn send(&self, call: Call<'_>) -> Result<Answer, OnceclickError> {
        let token = self.token().await?;
        call.send(&self.inner.base_url, &token, &self.inner.transport)
            .await
    }

    /// The bearer token: the one given, or what `getToken` gives now.
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
                format!("getToken threw: {}", js::describe(&e)),
            )
            .caused_by(e)
        })?;
        js::resolve(value)
            .await
            .ok()
            .and_then(|v| v.as_string())
            .ok_or_else(|| OnceclickError::new("unauthorized", "getToken gave no string"))
    }

    /// A 2xx job answer as a `Job`, else its problem as an error. Frees the key of a
    /// job that has ended.
    async fn job_answer(&self, answer: Answer) -> Result<JsValue, OnceclickError> {
        if !(200..300).contains(&answer.status) {
            return Err(answer.error().await);
        }
        let job = answer.js_json().await?;
        crate::failure::annotate(&job);
        self.seen_job(&job);
        Ok(job)
    }

    /// Frees the key of `job` if it has ended.
    fn seen_job(&self, job: &JsValue) {
        if status_of(job).is_some_and(JobStatus::is_final) {
            if let Some(id) = js::get_string(job, "id") {
                self.inner.keys.free_job(&id);
            }
        }
    }

    async fn submit_once(
        &self,
        intent: &str,
        body: &str,
        provider: Option<&str>,
        policy: &Policy,
    ) -> Result<JsValue, OnceclickError> {
        // Stored before the first byte is sent: a reload mid-request reuses it.
        let mut entry = self.inner.keys.get_or_create(intent, provider);
        let call = Call::post("/v1/jobs")
            .json(body)
            .header("Idempotency-Key", &entry.key)
            .policy(policy);
        let answer = self.send(call).await?;
        let job = self.job_answer(answer).await?;
        if status_of(&job).is_some_and(JobStatus::is_final) {
            // The job has ended: free the key, even when this is the first answer seen
            // for it (a replay after a lost 201, a reload mid-request), whose entry has
            // no job id for `free_job` to find.
            self.inner.keys.remove(intent);
        } else {
            entry.job_id = js::get_string(&job, "id");
            // The provider its job runs on, as the server says: what a submit naming a
            // provider matches this key on after the kind's primary changed.
            entry.provider = js::get_string(&job, "provider").or(entry.provider);
            self.inner.keys.put(intent, &entry);
        }
        Ok(job)
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
        let current = self.send(Call::get(&path).policy(&policy)).await?;
        let etag = current.header("ETag").unwrap_or_default();
        self.job_answer(current).await?;
        let provider = option_string(options, "provider");
        let body = js::object(&[(
            "provider",
            provider
                .as_deref()
                .map_or(JsValue::UNDEFINED, JsValue::from_str),
        )]);
        let body = json::stringify(&body).unwrap_or_else(|| "{}".to_owned());
        // No retry of a retryable 409 here: `attempt_in_flight` is another click's
        // attempt (a resend of ours is answered with ours, by its Idempotency-Key).
        let attempts = format!("{path}/attempts");
        let call = Call::post(&attempts)
            .json(&body)
            .header("If-Match", &etag)
            .header("Idempotency-Key", &request)
            .policy(&policy)
            .retry_conflict(false);
        let answer = self.send(call).await?;
        match answer.status {
            // 201: made now; 200: made by an earlier send of this same request.
            200 | 201 => answer.js_json().await,
            _ => Err(answer.error().await),
        }
    }
}
