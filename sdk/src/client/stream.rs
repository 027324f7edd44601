//! The client's one live connection (`GET /v1/stream?job=…`) for every job its waits
//! follow: opened from each job's position, read into `Watching` (which hands each
//! newer document and piece of text to its waits), reopened after a drop or when the
//! jobs change, and given up for polling when the stream cannot be had.

use super::Client;
use crate::call::Call;
use crate::http::{Policy, MAX_TRIES};
use crate::js;
use crate::live;
use crate::watch::{self, Watching};
use js_sys::Promise;
use std::cell::RefCell;
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::JsFuture;
use web_sys::{AbortSignal, Request, Response};

/// How long a live connection may stay silent before `wait` takes it for dead and
/// reconnects: three of the server's 15 s keep-alives.
const SILENCE_MS: f64 = 45_000.0;

/// What the connection does once a connection has ended, or could not be made.
enum Then {
    /// Opens another: at once, or (`failed`) as one more failure in a row, after a
    /// backoff.
    Reopen { failed: bool },
    /// Gives the stream up, saying `why`: every wait polls. `everyone`: the failure is
    /// the stream's, not this client's own, so the other tabs' jobs poll too (see
    /// `Watching::fall_back`).
    FallBack { why: &'static str, everyone: bool },
}

impl Client {
    /// The live connection (`GET /v1/stream?job=…`) for every job followed: reopened
    /// with each job's position after a drop (with backoff) or when a job joins, asking
    /// `getToken` each time. When the stream cannot be had (refused, failing
    /// `MAX_TRIES` times in a row, or silent for `first_ms` after it opens), every wait
    /// polls instead, from its position, and so do the other tabs' jobs unless the
    /// failure is this client's own (its token).
    ///
    /// Its steps are plain functions, and its awaits all here: a step made an `async fn`
    /// of its own would be a state machine inside this one, which measured about 300 B
    /// of the package's gzip each (issue 44). A step that ends the connection says what
    /// to do next (`Then`), which the end of the loop carries out.
    pub(super) async fn run_stream(self, first_ms: f64) {
        let watching = &self.inner.watching;
        let mut failures = 0;
        let (why, everyone) = loop {
            if failures >= MAX_TRIES {
                break ("the live stream keeps failing", true);
            }
            if failures > 0 {
                let pause = crate::http::delay_ms(failures, None, js_sys::Math::random());
                js::sleep(pause).await;
            }
            let then = 'connection: {
                let Ok((abort, signal)) = js::abort_controller() else {
                    break 'connection fall_back("this browser cannot abort a request", true);
                };
                let Some((query, interrupt)) = watching.borrow_mut().connect(abort.clone()) else {
                    return; // no job left
                };
                // A token that cannot be had: the polls say why, as every call would.
                let Ok(token) = self.token().await else {
                    break 'connection fall_back("no token for the live stream", false);
                };
                let request = match self.request(&query, signal, &token) {
                    Ok(request) => request,
                    Err(then) => break 'connection then,
                };
                let fetcher = self.inner.transport.fetch.as_ref();
                let fetched = js::fetch_within(&request, first_ms, fetcher).await;
                let response = match answered(fetched, &abort, watching) {
                    Ok(response) => response,
                    Err(then) => break 'connection then,
                };
                // Every job settled, and their waits have their last change: wait until
                // a job joins or the last one leaves.
                if response.status() == 204 {
                    let _ = JsFuture::from(interrupt).await;
                    break 'connection Then::Reopen { failed: false };
                }
                let problem = match refusal(&response) {
                    Some(body) => JsFuture::from(body).await.ok(),
                    None => None,
                };
                if let Err(then) = admitted(response.status(), problem, watching) {
                    break 'connection then;
                }
                let Some(mut stream) = live::Stream::of(&response) else {
                    let why = "this browser cannot read a response as it comes";
                    break 'connection fall_back(why, true);
                };
                let mut heard = false;
                loop {
                    let quiet = if heard { SILENCE_MS } else { first_ms };
                    let item = match stream.next(quiet, &interrupt).await {
                        live::Next::Item(item) => item,
                        // The jobs changed: reopen at once with the new set.
                        live::Next::Woken => break 'connection Then::Reopen { failed: false },
                        // A dropped connection, or one silent for three keep-alives (a
                        // laptop that slept, a network that changed): reopen from the
                        // positions.
                        live::Next::End => break 'connection Then::Reopen { failed: true },
                        live::Next::Quiet if heard => {
                            break 'connection Then::Reopen { failed: true }
                        }
                        live::Next::Quiet => {
                            break 'connection fall_back("the stream said nothing in time", true)
                        }
                    };
                    // A connection that lives past its first item, or brings a change,
                    // is healthy: only connections cut before either count as failures.
                    let new = hear(watching, item);
                    if heard || new {
                        failures = 0;
                    }
                    heard = true;
                }
            };
            match then {
                Then::Reopen { failed } => failures += u32::from(failed),
                Then::FallBack { why, everyone } => break (why, everyone),
            }
        };
        live::note_polling(why);
        watching.borrow_mut().fall_back(everyone);
    }

    /// The request of `GET /v1/stream?{query}`, which `signal` aborts.
    fn request(&self, query: &str, signal: AbortSignal, token: &str) -> Result<Request, Then> {
        let path = format!("/v1/stream?{query}");
        let policy = Policy {
            signal: Some(signal),
            ..Policy::default()
        };
        let call = Call::get(&path).policy(&policy);
        // A request that cannot be made is taken for this client's own failure: the
        // usual cause is its token (a character a header cannot carry).
        call.request(&self.inner.base_url, token, &self.inner.transport, false)
            .map_err(|_| fall_back("the live stream's request could not be made", false))
    }
}

/// The answer's head, if it came within the time given (`Ok(None)`: then `abort`
/// aborts the request).
fn answered(
    fetched: Result<Option<Response>, String>,
    abort: &JsValue,
    watching: &RefCell<Watching>,
) -> Result<Response, Then> {
    match fetched {
        Ok(Some(response)) => Ok(response),
        // An answer that does not come in time is a proxy that holds the stream back,
        // as one that sends nothing after its head is.
        Ok(None) => {
            let _ = js::call(abort, "abort", &[]);
            Err(fall_back("the live stream did not answer in time", true))
        }
        // Aborted because the jobs changed: reopen at once.
        Err(_) => Err(Then::Reopen {
            failed: !watching.borrow().interrupted(),
        }),
    }
}

/// The body of a refusal (4xx), which may name its job: the JSON of its problem.
fn refusal(response: &Response) -> Option<Promise> {
    match response.status() {
        400..=499 => response.json().ok(),
        _ => None,
    }
}

/// Whether an answer of `status` (not 204) lets its body be read; if not, what to do
/// instead. `problem`: the problem of a refusal, which may name its job.
fn admitted(
    status: u16,
    problem: Option<JsValue>,
    watching: &RefCell<Watching>,
) -> Result<(), Then> {
    // A refusal that names its job (a 404 for a job this owner may not see, a 429 for a
    // job with its fill of streams): that job polls, where its poll reports what is
    // wrong with it, and the others go on live. A job that left meanwhile is gone
    // either way: reopen with the rest. A name that matches no job here counts as a
    // failure, so that the same refusal cannot loop without backoff.
    if let Some(followed) = poll_named(watching, problem) {
        return Err(Then::Reopen { failed: !followed });
    }
    match status {
        200 => Ok(()),
        502..=504 => Err(Then::Reopen { failed: true }),
        // A refusal of this client's token (which its polls then report as it is): the
        // other tabs' jobs wait for a leader whose token passes.
        401 | 403 => Err(fall_back("the live stream refused the token", false)),
        // A server without the stream (404, 405), or a refusal of the stream as a whole
        // (429 `stream_rate_limited`: the owner's stream opens, a budget apart from
        // creates'; the poll's backoff spreads the load).
        _ => Err(fall_back("the live stream was refused", true)),
    }
}

/// Polls the job that `problem` names (its `job_id`), if it names one: whether that job
/// was followed here.
fn poll_named(watching: &RefCell<Watching>, problem: Option<JsValue>) -> Option<bool> {
    let job = problem.and_then(|p| js::get_string(&p, "job_id"))?;
    Some(watching.borrow_mut().poll_one(&job))
}

/// Gives the stream up, saying `why` (see [`Then::FallBack`]).
fn fall_back(why: &'static str, everyone: bool) -> Then {
    Then::FallBack { why, everyone }
}

/// One item of the stream, at the place its `id` says: a document or a piece of text
/// handed to the waits, and whether it was new to them; or a job the stream cannot
/// serve, which polls. Clients ignore the events they do not know.
fn hear(watching: &RefCell<Watching>, item: live::Item) -> bool {
    let live::Item::Event { event, id, data } = item else {
        return false;
    };
    // A job whose hub the stream cannot reach: it polls, the others go on.
    if event == "unserved" {
        poll_named(watching, js_sys::JSON::parse(&data).ok());
        return false;
    }
    // Once text has come, an id also counts it (`7/1:40`), and is kept whole: the next
    // connection resumes after the last piece.
    if !live::is_position(watch::seq(&id)) {
        return false;
    }
    let Ok(data) = js_sys::JSON::parse(&data) else {
        return false;
    };
    let text = |name| js::get_string(&data, name);
    let mut watching = watching.borrow_mut();
    match event.as_str() {
        "job" => text("id").is_some_and(|job_id| {
            crate::failure::annotate(&data);
            watching.deliver(&id, &job_id, &data)
        }),
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
    }
}
