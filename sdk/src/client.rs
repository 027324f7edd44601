//! `Client`: submit, wait, retry, cancel and forget against one onceclick API.

use crate::call::Call;
use crate::decimal::decimal;
use crate::error::OnceclickError;
use crate::flight;
use crate::http::{Answer, Policy};
use crate::js;
use crate::js::future_to_promise;
use crate::json;
use crate::keys::{self, Intent, Keys};
use crate::live;
use crate::text::Show;
use crate::types::{
    option_function, option_signal, option_string, policy, ClientOptions, ForgetOptions,
    RetryOptions, SubmitOptions, WaitOptions,
};
use crate::watch::{self, status_of, waits_end, Update, Watching};
use js_sys::Promise;
use onceclick_protocol::JobStatus;
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::AbortSignal;

/// The name of `kind`'s primary provider, read off `GET /v1/providers`.
fn primary_of(list: &JsValue, kind: &str) -> Option<String> {
    let providers: js_sys::Array = js::get(list, "providers").dyn_into().ok()?;
    providers
        .iter()
        .find(|p| js::get(&js::get(&js::get(p, "kinds"), kind), "primary").as_bool() == Some(true))
        .and_then(|p| js::get_string(&p, "name"))
}

/// The input as the server will read it: through `JSON.stringify`, then parsed as
/// I-JSON, so that what is fingerprinted here is exactly what is sent.
fn input_json(input: &JsValue) -> Result<String, OnceclickError> {
    json::canonical(input).map_err(|e| OnceclickError::invalid(format!("input: {e}")))
}

struct Inner {
    base_url: String,
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

/// How often a submit that names a provider asks `GET /v1/providers` (each ask already
/// retried as every call is) before it fails rather than guess the intent's name.
const LOOKUP_TRIES: u32 = 3;

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
                lookup_error: RefCell::new(None),
                watching: Rc::default(),
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
                    outcome
                }
                Err(aborted) => {
                    flight::Flight::leave(&flight, on_retry.as_ref());
                    Err(aborted.into())
                }
            }
        })
    }

    /// Resolves to the job once it has finished (`succeeded`, `cancelled`) or needs a
    /// decision (`failed`: ask for a new attempt; `unknown`: resolve or cancel), calling
    /// `onUpdate` once per change, in order. Follows the job's live stream, reconnecting
    /// from its last position after a dropped connection; polls with backoff and `ETag`
    /// where the stream cannot be had (see `WaitOptions`).
    #[wasm_bindgen(unchecked_return_type = "Promise<Job>")]
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
            let answer = client.send(Call::post(&path)).await?;
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
            let asked = option_string(&options, "provider");
            let resolved = client.as_named(&kind, asked.clone(), None).await?;
            let (name, _) =
                client.stored_name(&token, &kind, &input, asked.as_deref(), resolved.as_deref());
            client.inner.keys.remove(&name);
            Ok(JsValue::UNDEFINED)
        })
    }
}

impl Client {
    /// `provider`, or `None` when it names `kind`'s primary: naming the primary is the
    /// same intent as naming no provider. Reads `GET /v1/providers` (once per client).
    ///
    /// The answer decides the intent's name, so it is never guessed: a lookup that fails
    /// is asked again with backoff (inside `signal`), and if it still fails the submit
    /// fails, retryable, before any key is made or any request sent. A name guessed
    /// while the lookup was down would be another key, and so a second job, once it
    /// works again.
    async fn as_named(
        &self,
        kind: &str,
        provider: Option<String>,
        signal: Option<&AbortSignal>,
    ) -> Result<Option<String>, OnceclickError> {
        let Some(provider) = provider else {
            return Ok(None);
        };
        let mut tries = 1;
        let list = loop {
            let listed = wasm_bindgen_futures::JsFuture::from(self.providers());
            match js::abortable(signal, listed).await? {
                Ok(list) => break list,
                Err(_) if tries < LOOKUP_TRIES => {
                    let pause = crate::http::delay_ms(tries, None, js_sys::Math::random());
                    js::abortable(signal, js::sleep(pause)).await?;
                    tries += 1;
                }
                Err(_) => return Err(self.lookup_failed()),
            }
        };
        let primary = primary_of(&list, kind);
        Ok((primary.as_deref() != Some(provider.as_str())).then_some(provider))
    }

    /// Why a submit naming a provider could not go out: the provider list would not load.
    /// Its own error, retryable (nothing was sent), unless the token is refused, which
    /// the create would be too.
    fn lookup_failed(&self) -> OnceclickError {
        match self.inner.lookup_error.borrow().clone() {
            Some(e) if matches!(e.status(), Some(401 | 403)) => e,
            Some(e) => e.lookup(),
            None => OnceclickError::network("").lookup(),
        }
    }

    /// The promise of `GET /v1/providers`'s JSON, shared by every submit of this client.
    fn providers(&self) -> Promise {
        if let Some(asked) = self.inner.providers.borrow().clone() {
            return asked;
        }
        let client = self.clone();
        let asked = future_to_promise(async move {
            let answer = client.send(Call::get("/v1/providers")).await;
            let list = match answer {
                Ok(answer) if answer.status == 200 => answer.js_json().await,
                Ok(answer) => Err(answer.error().await),
                Err(e) => Err(e),
            };
            // A failure is not kept: the next submit asks again.
            list.map_err(|e| {
                client.inner.providers.replace(None);
                client.inner.lookup_error.replace(Some(e));
                JsValue::NULL
            })
        });
        self.inner.providers.replace(Some(asked.clone()));
        asked
    }

    /// The name an intent's key is stored under, and whether its request names the
    /// provider (else it leaves the provider out, as for the kind's primary).
    ///
    /// That is the intent's own name (see `Intent::name`), unless the kind's primary has
    /// changed since a submit naming `asked` stored this intent's key: then the key is
    /// where it was stored, so that a deploy that changes the primary never orphans the
    /// key of an open job.
    /// - `asked` is the primary now (`resolved` is `None`), and was not then: the key
    ///   is under the name that names it (looked at first). A key under the plain name
    ///   whose job runs on another provider is not this intent's;
    /// - `asked` is not the primary now, and was then: with no key under its own name,
    ///   the key is under the name without a provider, in an entry whose job runs on
    ///   `asked` (made by a submit that named it, or named none).
    fn stored_name(
        &self,
        token: &str,
        kind: &str,
        input: &str,
        asked: Option<&str>,
        resolved: Option<&str>,
    ) -> (String, bool) {
        let name = |provider: Option<&str>| {
            Intent::Job {
                token,
                kind,
                input,
                provider,
            }
            .name()
        };
        let own = (name(resolved), resolved.is_some());
        let Some(asked) = asked else {
            return own;
        };
        match resolved {
            // `asked` is the primary now. A key stored under the name that names it was
            // made for `asked` by name, when it was not the primary: that one is this
            // intent's. So is one under the plain name, unless its job runs on another
            // provider (the primary of its day): then this intent is the one named.
            None => {
                let named = name(Some(asked));
                if self.inner.keys.get(&named).is_some() {
                    return (named, true);
                }
                match self.inner.keys.get(&own.0) {
                    Some(entry) if entry.provider.as_deref().is_some_and(|p| p != asked) => {
                        (named, true)
                    }
                    _ => own,
                }
            }
            Some(_) if self.inner.keys.get(&own.0).is_some() => own,
            Some(_) => {
                let plain = name(None);
                match self.inner.keys.get(&plain) {
                    Some(entry) if entry.provider.as_deref() == Some(asked) => (plain, false),
                    _ => own,
                }
            }
        }
    }

    /// Sends `call` to this client's API with its token (asked of `getToken` now).
    async fn send(&self, call: Call<'_>) -> Result<Answer, OnceclickError> {
        let token = self.token().await?;
        call.send(&self.inner.base_url, &token).await
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
                format!("getToken threw: {}", js::describe(e)),
            )
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
    ) -> Result<JsValue, JsValue> {
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

    /// Follows `job_id`'s live stream until the job settles for `wait`, or until the
    /// stream cannot be had: then `Poll` with the position the stream had shown, from
    /// which polling goes on.
    ///
    /// Each connection asks `getToken` again and sends `Last-Event-ID`, so nothing seen
    /// is shown twice and the latest document always comes. A stream that ends after
    /// it said something (the server's maximum duration) is reopened at once; failures
    /// in a row back off as calls do, and after as many as a call tries, polling takes
    /// over. So does a 404 or 405 (a server without the stream: the poll then answers
    /// for the job), a `too_many_subscribers`, and a connection that says nothing, not
    /// even its answer's head or its first comment, within `first_ms` (a proxy that
    /// buffers the stream).
    /// Follows `job_id` on the client's one live connection, which this starts if none
    /// runs (`first_ms` then applies to it), until the job ends its wait or the stream
    /// cannot be had. Dropping this (an abort, a timeout) leaves the connection; the
    /// connection closes when no job is left.
    async fn follow(&self, job_id: &str, show: &mut Show, first_ms: f64) -> Followed {
        let (number, mailbox, start) = self.inner.watching.borrow_mut().watch(job_id);
        let _leave = Leave {
            watching: &self.inner.watching,
            job_id,
            number,
        };
        if start {
            let client = self.clone();
            wasm_bindgen_futures::spawn_local(async move {
                let watching = client.inner.watching.clone();
                // The tabs that share a connection are one owner's; without a token the
                // connection fails alone, and its waits poll (which say why).
                let owner = client.token().await.map(|t| keys::sharing_owner(&t));
                let lead = client.clone().run_stream(first_ms);
                crate::share::run(
                    watching,
                    &client.inner.base_url,
                    owner.ok().as_deref(),
                    lead,
                )
                .await;
            });
        }
        loop {
            match watch::take(&mailbox).await {
                Update::Job(job) => {
                    self.seen_job(&job);
                    show.job(&job);
                    if waits_end(&job) {
                        return Followed::Settled(job);
                    }
                }
                Update::Text(attempt, offset, text) => show.piece(&attempt, offset, &text),
                Update::Poll(from) => return Followed::Poll(from),
            }
        }
    }

    /// The live connection (`GET /v1/stream?job=…`) for every job followed: reopened
    /// with each job's position after a drop (with backoff) or when a job joins, asking
    /// `getToken` each time. When the stream cannot be had (refused, failing
    /// `MAX_TRIES` times in a row, or silent for `first_ms` after it opens), every wait
    /// polls instead, from its position, and so do the other tabs' jobs unless the
    /// failure is this client's own (its token).
    async fn run_stream(self, first_ms: f64) {
        let watching = &self.inner.watching;
        // `everyone`: the failure is the stream's, not this client's own (see
        // `Watching::fall_back`).
        let fall_back = |why: &str, everyone: bool| {
            live::note_polling(why);
            watching.borrow_mut().fall_back(everyone);
        };
        let mut failures = 0;
        loop {
            if failures >= crate::http::MAX_TRIES {
                return fall_back("the live stream keeps failing", true);
            }
            if failures > 0 {
                let pause = crate::http::delay_ms(failures, None, js_sys::Math::random());
                js::sleep(pause).await;
            }
            let Ok((abort, signal)) = js::abort_controller() else {
                return fall_back("this browser cannot abort a request", true);
            };
            let Some((query, interrupt)) = watching.borrow_mut().connect(abort.clone()) else {
                return; // no job left
            };
            // A token that cannot be had: the polls say why, as every call would.
            let Ok(token) = self.token().await else {
                return fall_back("no token for the live stream", false);
            };
            let path = format!("/v1/stream?{query}");
            let policy = Policy {
                signal: Some(signal),
                ..Policy::default()
            };
            let call = Call::get(&path).policy(&policy);
            // A request that cannot be made is taken for this client's own failure: the
            // usual cause is its token (a character a header cannot carry).
            let Ok(request) = call.request(&self.inner.base_url, &token) else {
                return fall_back("the live stream's request could not be made", false);
            };
            // An answer that does not come within `first_ms` is a proxy that holds the
            // stream back, as one that sends nothing after its head is.
            let response = match js::fetch_within(&request, first_ms).await {
                Ok(Some(response)) => response,
                Ok(None) => {
                    let _ = js::call(&abort, "abort", &[]);
                    return fall_back("the live stream did not answer in time", true);
                }
                // Aborted because the jobs changed: reopen at once.
                Err(_) => {
                    if !watching.borrow().interrupted() {
                        failures += 1;
                    }
                    continue;
                }
            };
            let status = response.status();
            // A refusal that names its job (a 404 for a job this owner may not see, a
            // 429 for a job with its fill of streams): that job polls, where its poll
            // reports what is wrong with it, and the others go on live.
            if matches!(status, 400..=499) {
                let named = match response.json() {
                    Ok(body) => wasm_bindgen_futures::JsFuture::from(body).await.ok(),
                    Err(_) => None,
                };
                // A job that left meanwhile is gone either way: reopen with the rest. A
                // name that matches no job here counts as a failure, so that the same
                // refusal cannot loop without backoff.
                if let Some(job) = named.and_then(|p| js::get_string(&p, "job_id")) {
                    if !watching.borrow_mut().poll_one(&job) {
                        failures += 1;
                    }
                    continue;
                }
            }
            match status {
                200 => {}
                // Every job settled, and their waits have their last change: wait
                // until a job joins or the last one leaves.
                204 => {
                    let _ = wasm_bindgen_futures::JsFuture::from(interrupt).await;
                    continue;
                }
                502..=504 => {
                    failures += 1;
                    continue;
                }
                // A refusal of this client's token (which its polls then report as it
                // is): the other tabs' jobs wait for a leader whose token passes.
                401 | 403 => return fall_back("the live stream refused the token", false),
                // A server without the stream (404, 405), or a refusal of the stream as
                // a whole (429 `stream_rate_limited`: the owner's stream opens, a budget
                // apart from creates'; the poll's backoff spreads the load).
                _ => return fall_back("the live stream was refused", true),
            }
            let Some(mut stream) = live::Stream::of(&response) else {
                return fall_back("this browser cannot read a response as it comes", true);
            };
            let mut heard = false;
            loop {
                let quiet = if heard { SILENCE_MS } else { first_ms };
                let item = match stream.next(quiet, &interrupt).await {
                    live::Next::Item(item) => item,
                    // The jobs changed: reopen at once with the new set.
                    live::Next::Woken => break,
                    // A dropped connection, or one silent for three keep-alives (a
                    // laptop that slept, a network that changed): reopen from the
                    // positions.
                    live::Next::End => {
                        failures += 1;
                        break;
                    }
                    live::Next::Quiet if heard => {
                        failures += 1;
                        break;
                    }
                    live::Next::Quiet => return fall_back("the stream said nothing in time", true),
                };
                // A connection that lives past its first item, or brings a change, is
                // healthy: only connections cut before either count as failures.
                if heard {
                    failures = 0;
                }
                heard = true;
                // Clients ignore the events they do not know.
                let live::Item::Event { event, id, data } = item else {
                    continue;
                };
                // A job whose hub the stream cannot reach: it polls, the others go on.
                if event == "unserved" {
                    let named = js_sys::JSON::parse(&data).ok();
                    if let Some(job) = named.and_then(|p| js::get_string(&p, "job_id")) {
                        watching.borrow_mut().poll_one(&job);
                    }
                    continue;
                }
                // Once text has come, an id also counts it (`7/1:40`), and is kept whole:
                // the next connection resumes after the last piece.
                if !live::is_position(watch::seq(&id)) {
                    continue;
                }
                let Ok(data) = js_sys::JSON::parse(&data) else {
                    continue;
                };
                let text = |name| js::get_string(&data, name);
                let mut watching = watching.borrow_mut();
                let new = match event.as_str() {
                    "job" => text("id").is_some_and(|job_id| watching.deliver(&id, &job_id, &data)),
                    "delta" => match (
                        text("job_id"),
                        text("attempt_id"),
                        js::get(&data, "offset").as_f64(),
                        text("text"),
                    ) {
                        (Some(job_id), Some(attempt), Some(offset), Some(piece)) => {
                            watching.deliver_text(&id, &job_id, &attempt, offset, &piece)
                        }
                        _ => false,
                    },
                    _ => false,
                };
                if new {
                    failures = 0;
                }
            }
        }
    }

    async fn poll(
        &self,
        job_id: &str,
        policy: &Policy,
        show: &mut Show,
        from: Option<String>,
    ) -> Result<JsValue, OnceclickError> {
        let path = format!("/v1/jobs/{job_id}");
        let mut etag: Option<String> = from.as_deref().map(live::etag);
        let mut pause = 250.0;
        loop {
            let mut call = Call::get(&path).policy(policy);
            if let Some(etag) = &etag {
                call = call.header("If-None-Match", etag);
            }
            let answer = self.send(call).await?;
            if answer.status == 304 {
                pause = (pause * 1.5_f64).min(4000.0);
            } else {
                etag = answer.header("ETag");
                let job = self.job_answer(answer).await?;
                show.job(&job);
                if waits_end(&job) {
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

/// How long a new connection to the live stream may say nothing before `wait` polls
/// instead: the server writes its first event or comment at once, so a silence this
/// long is a proxy that buffers the stream (`WaitOptions.firstEventMs`).
const FIRST_EVENT_MS: f64 = 3_000.0;

/// How long a live connection may stay silent before `wait` takes it for dead and
/// reconnects: three of the server's 15 s keep-alives.
const SILENCE_MS: f64 = 45_000.0;

/// Takes a wait off the live connection when it ends, however it ends.
struct Leave<'a> {
    watching: &'a RefCell<Watching>,
    job_id: &'a str,
    number: u32,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.watching.borrow_mut().unwatch(self.job_id, self.number);
    }
}

/// Where `follow` left a wait.
enum Followed {
    /// The job as `wait` resolves to it.
    Settled(JsValue),
    /// The stream cannot be had: poll, from the position the stream had shown.
    Poll(Option<String>),
}
