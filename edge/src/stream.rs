//! The live job streams: `GET /v1/jobs/{id}/stream` (one job, resumable with
//! `Last-Event-ID`) and `GET /v1/stream?job=…` (up to `MAX_STREAM_JOBS` jobs on one
//! connection, each resumable from the position its `job` parameter gives), pushing
//! each job's document as Server-Sent Events at every change.
//!
//! The SSE ends here, in the Worker; each job's hub (`live.rs`) relays its changes over
//! a hibernatable WebSocket. A stream:
//! 1. reads each job from the store, as `GET /v1/jobs/{id}` does (the same callers get
//!    the same 404): an `event: job` for each job that changed since the client's
//!    position (all of them, without one; a job still moving sends it after its hub's
//!    catch-up, in 3); when none did, a comment says at once that the stream is live;
//! 2. ends at once when every job is settled (`protocol::live::settled`); a reconnect
//!    that already has each one's last change is answered `204 No Content`, which stops
//!    an EventSource;
//! 3. otherwise subscribes to the hub of each job not settled, from the client's place:
//!    the hub's catch-up (the text the client lacks, then a newer change it heard of)
//!    comes first, then the document the stream read, if the client lacked it (so an
//!    attempt's last pieces come before the document that ends it); then each newer
//!    change and piece as it comes, with the place as the event's `id` (the document's
//!    own `id` names its job), dropping any change not newer than the last it sent for
//!    that job. A change from the hub no newer than the stream's own read is never
//!    sent, and never ends the stream: a hub that missed a notification may hold an
//!    older, settled document. A hub that fails to subscribe refuses a one-job stream
//!    (503); in a stream of several, the others are served and an `event: unserved`
//!    (no `id`; its data a problem naming `job_id`) names that job, which the client
//!    then polls;
//! 4. sends a comment when it has written nothing for `KEEP_ALIVE_MS`; ends when every
//!    job has sent its settling change, after `LIVE_MAX_STREAM_MS` (the client resumes
//!    from its positions), when a hub goes away, or when its client reads so slowly
//!    that more than `LIVE_MAX_BUFFERED_BYTES` of live frames wait. That bound is kept
//!    by the hub sockets' listeners, not by the reads: past it (or past the stream's
//!    time) they close the stream's hub sockets and drop what waits, so a client that
//!    stopped reading holds no more than that.
//!
//! DO stubs are not among the subrequests that count against a Worker's six
//! simultaneous connections, so a stream of 20 jobs holds 20 hub sockets.

use crate::auth::Caller;
use crate::error::{ApiResult, AppError};
use crate::http::Ctx;
use crate::live::{self, Frame, Hubs};
use futures_util::future::{join_all, poll_fn, select, Either};
use futures_util::StreamExt;
use onceclick_protocol::chat::MAX_CHARS;
use onceclick_protocol::live::{
    parse_followed, Follower, Place, Position, FRAME_CHARS, MAX_STREAM_JOBS,
};
use onceclick_protocol::ErrorCode;
use onceclick_protocol::Job;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::task::{Poll, Waker};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::JsCast;
use worker::{Headers, Request, Response, WebSocket};

/// A comment at least this often, so that proxies keep the connection open and a
/// client can tell a quiet stream from a dead one.
const KEEP_ALIVE_MS: u64 = 15_000;

/// How long one stream stays open when `LIVE_MAX_STREAM_MS` is unset: the client then
/// reconnects from its positions (and with a fresh token).
const DEFAULT_MAX_STREAM_MS: u64 = 300_000;

/// The bytes of live frames (changes and pieces of text that came after a hub's
/// catch-up) that may wait for a slow reader before its stream is cut off, when
/// `LIVE_MAX_BUFFERED_BYTES` is unset: a few hundred documents, or seconds of text from
/// every job, per stream. Never less than [`MIN_MAX_BUFFERED_BYTES`].
const DEFAULT_MAX_BUFFERED_BYTES: u64 = 1 << 20;

/// The least `LIVE_MAX_BUFFERED_BYTES` may be: two of the largest frames (a piece of
/// `FRAME_CHARS` code points of four bytes each, and its head), so that a reader that
/// keeps up is never cut by one piece that comes as a burst of frames.
const MIN_MAX_BUFFERED_BYTES: u64 = 2 * (4 * FRAME_CHARS as u64 + 128);

/// The bytes of catch-up frames that may wait, apart from the live ones: a hub's
/// catch-up is the text the client lacks, sent at once, which a bound on live frames
/// would cut at every reconnect. One attempt's whole text (`MAX_CHARS` code points of
/// up to four bytes) fits; a stream whose jobs together lack more than that is cut,
/// and resumes from its place.
const MAX_CATCH_UP_BYTES: u64 = 4 * MAX_CHARS;

/// The comment a stream sends first when the client is already up to date.
const LIVE: &str = ": live\n\n";

const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// One event, its data split into `data:` lines (a document has none, but a frame
/// must never end early).
fn event(id: impl std::fmt::Display, name: &str, data: &str) -> String {
    let mut out = format!("id: {id}\nevent: {name}\n");
    for line in data.split('\n') {
        out.push_str("data: ");
        out.push_str(line.strip_suffix('\r').unwrap_or(line));
        out.push('\n');
    }
    out.push('\n');
    out
}

/// The position the client has, from `Last-Event-ID`: `None` without the header (or
/// with an empty one, which EventSource sends to mean none), 400 for one this stream
/// never wrote.
fn last_event_id(req: &Request) -> ApiResult<Option<Place>> {
    let Some(text) = req.headers().get("Last-Event-ID").ok().flatten() else {
        return Ok(None);
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    Place::parse(text.trim()).map(Some).ok_or_else(|| {
        AppError::new(
            ErrorCode::InvalidLastEventId,
            format!("Last-Event-ID {text:?} is not a position of this stream; positions are the event ids it sent (7, or 7/1:40 once text came)"),
        )
    })
}

/// The jobs of `GET /v1/stream`, from its `job` parameters, each once, with the
/// position the client has.
fn followed(req: &Request) -> ApiResult<Vec<(String, Option<Place>)>> {
    let query = crate::http::query_repeating(req, &["job"], &["job"])?;
    if query.len() > MAX_STREAM_JOBS {
        return Err(crate::http::invalid_query(format!(
            "one stream follows at most {MAX_STREAM_JOBS} jobs; open another for the rest"
        )));
    }
    let mut jobs: Vec<(String, Option<Place>)> = Vec::new();
    for (_, value) in &query {
        // A refusal names the job at fault, so that a client follows that one some other
        // way and the rest live. One that does not parse is named whole: a client sends a
        // position only with an id the stream took, so it sent this one bare.
        let (id, after) = parse_followed(value).ok_or_else(|| {
            let error = crate::http::invalid_query(format!(
                "job {value:?} is neither a job's id nor an id, a colon and a position the stream sent (job_…:7)"
            ));
            match value.is_empty() {
                true => error,
                false => error.with_job(value),
            }
        })?;
        if jobs.iter().any(|(seen, _)| seen == id) {
            return Err(crate::http::invalid_query(format!(
                "job {id} is given twice; give each job once, with the position the client has"
            ))
            .with_job(id));
        }
        jobs.push((id.to_owned(), after));
    }
    if jobs.is_empty() {
        return Err(crate::http::invalid_query(
            "give at least one job: ?job=ID, or ?job=ID:POSITION to resume after that change",
        ));
    }
    Ok(jobs)
}

fn sse_headers() -> Headers {
    let headers = Headers::new();
    let _ = headers.set("Content-Type", "text/event-stream");
    let _ = headers.set("Cache-Control", "no-store");
    let _ = headers.set("X-Accel-Buffering", "no");
    headers
}

/// `GET /v1/jobs/{id}/stream`.
pub(crate) async fn job(
    req: &Request,
    ctx: &Ctx<'_>,
    caller: &Caller,
    id: &str,
) -> ApiResult<Response> {
    let after = last_event_id(req)?;
    serve(ctx, caller, vec![(id.to_owned(), after)]).await
}

/// `GET /v1/stream?job=…`. `Last-Event-ID` is not read: one id cannot hold the
/// positions of several jobs, so each `job` parameter carries its own.
pub(crate) async fn jobs(req: &Request, ctx: &Ctx<'_>, caller: &Caller) -> ApiResult<Response> {
    let jobs = followed(req)?;
    serve(ctx, caller, jobs).await
}

/// The stream of `jobs`, each with the position its client has.
async fn serve(
    ctx: &Ctx<'_>,
    caller: &Caller,
    jobs: Vec<(String, Option<Place>)>,
) -> ApiResult<Response> {
    let reads = join_all(
        jobs.iter()
            .map(|(id, _)| ctx.store.job(Some(&caller.owner), id)),
    )
    .await;
    let mut first = String::new();
    // The jobs whose changes are still to come, with where each stream stands and the
    // document it read, if the client lacks it.
    let mut open: Vec<(&str, Follower, Option<Held>)> = Vec::new();
    for ((id, after), read) in jobs.iter().zip(reads) {
        // The refusal names its job, so a client following several drops that one.
        let stored = read?.ok_or_else(|| AppError::not_found(&format!("job {id}")).with_job(id))?;
        let at = Position::of_etag(&stored.etag).ok_or_else(|| {
            AppError::internal(format!("job {id}: ETag {} is no position", stored.etag))
        })?;
        // A position at or ahead of the job's (a client that cannot be ahead, but says
        // so) gets nothing older than it claims to have.
        // The text the client has stays its own: the hub sends what it lacks.
        let mut sent = Follower::after(after.clone());
        if stored.job.is_settled() {
            // No text comes after the result: the document alone.
            if sent.take_job(at.0, &stored.job) {
                first.push_str(&event(sent.place(), "job", &stored.doc));
            }
        } else if sent.at.is_some_and(|had| at.0 <= had) {
            // The client has this document: what it says ended, ended before now.
            sent.take_job(at.0, &stored.job);
            open.push((id, sent, None));
        } else {
            // A document the client lacks waits for the hub's catch-up: the text an
            // attempt sent before the document ended it comes first (a winner's tail
            // while a hedge runs on, a stopped attempt's last words).
            open.push((id, sent, Some((at.0, stored.job, stored.doc))));
        }
    }
    if open.is_empty() && first.is_empty() {
        return Ok(Response::empty()
            .map_err(crate::problem::runtime)?
            .with_status(204)
            .with_headers(sse_headers()));
    }
    if first.is_empty() && open.iter().all(|(_, _, held)| held.is_none()) {
        first.push_str(LIVE);
    }
    if open.is_empty() {
        return whole(first);
    }
    let hubs = Hubs::from_env(ctx.env)
        .ok_or_else(|| AppError::internal("the LIVE binding is not configured"))?;
    // Test-only (`fault.rs`): the first job's hub fails to subscribe.
    let failing = ctx.store.fault_at(crate::fault::Point::Subscribe).err();
    let hubs = &hubs;
    let subscribed = join_all(open.iter().enumerate().map(|(i, (id, at, _))| {
        let failing = failing.as_ref().filter(|_| i == 0);
        async move {
            match failing {
                Some(fault) => Err(AppError::unavailable(fault.cause_or_detail()).with_job(id)),
                None => hubs.subscribe(id, at.place()).await,
            }
        }
    }))
    .await;
    let max_ms = live::number_var(ctx.env, "LIVE_MAX_STREAM_MS", DEFAULT_MAX_STREAM_MS);
    let max_bytes = live::number_var(
        ctx.env,
        "LIVE_MAX_BUFFERED_BYTES",
        DEFAULT_MAX_BUFFERED_BYTES,
    );
    let deadline_ms = crate::clock::now_ms() + max_ms as f64;
    let mut relay = Relay::new(deadline_ms, max_bytes.max(MIN_MAX_BUFFERED_BYTES));
    // A refusal (a job with its fill of streams) refuses the stream, naming its job: the
    // client follows that one some other way. A hub that fails does not: the stream
    // serves the others, and names that job in an `unserved` event.
    let mut refused = None;
    let mut unserved = Vec::new();
    for ((id, at, held), socket) in open.into_iter().zip(subscribed) {
        match socket {
            Ok(socket) if refused.is_none() => {
                if let Err(e) = relay.follow(socket, id, at, held) {
                    unserved.push((id, e));
                }
            }
            // The others' sockets close with the relay.
            Ok(socket) => close_unused(&socket),
            Err(e) if e.is_unavailable() => unserved.push((id, e)),
            Err(e) => {
                refused.get_or_insert(e);
            }
        }
    }
    if let Some(e) = refused {
        return Err(e); // `relay` drops here, closing what it holds
    }
    let served = relay.watches.iter().any(|w| !w.done);
    if !served && (first.is_empty() || first == LIVE) && !unserved.is_empty() {
        // No hub answered, and nothing else to send.
        return Err(unserved.swap_remove(0).1);
    }
    for (id, e) in unserved {
        crate::log::error(serde_json::json!({"event": "stream_unserved", "job_id": id,
                                              "cause": e.cause_or_detail()}));
        let problem = onceclick_protocol::Problem::new(
            ErrorCode::ServiceUnavailable,
            format!(
                "the live hub of job {id} did not answer: follow it by polling GET /v1/jobs/{id}"
            ),
        )
        .with_job(id.to_owned());
        // No `id`: it is no position of the stream. Its data is one line of JSON.
        let data = serde_json::to_string(&problem).unwrap_or_default();
        first.push_str(&format!("event: {UNSERVED}\ndata: {data}\n\n"));
    }
    if !served {
        // The settled jobs' documents and the names of those it cannot serve: the end.
        return whole(first);
    }
    // A client that stops reading never pulls the stream again: its hub sockets close
    // at the deadline all the same.
    let inbox = Rc::downgrade(&relay.inbox);
    worker::wasm_bindgen_futures::spawn_local(async move {
        let left = (deadline_ms - crate::clock::now_ms()).max(0.0) as u64;
        worker::Delay::from(std::time::Duration::from_millis(left)).await;
        if let Some(inbox) = inbox.upgrade() {
            inbox.cut("the stream's time is up");
        }
    });
    let first = (!first.is_empty()).then(|| Ok::<_, worker::Error>(first.into_bytes()));
    let body =
        futures_util::stream::iter(first).chain(futures_util::stream::unfold(relay, Relay::next));
    Ok(Response::from_stream(body)
        .map_err(crate::problem::runtime)?
        .with_headers(sse_headers()))
}

/// A stream that sends `events` and ends.
fn whole(events: String) -> ApiResult<Response> {
    let body = futures_util::stream::iter([Ok::<_, worker::Error>(events.into_bytes())]);
    Ok(Response::from_stream(body)
        .map_err(crate::problem::runtime)?
        .with_headers(sse_headers()))
}

/// The event that names a job whose hub did not answer: the client polls it.
const UNSERVED: &str = "unserved";

/// A hub socket that a refused stream will not read.
fn close_unused(socket: &WebSocket) {
    let _ = socket.accept();
    let _ = socket.close(Some(1000), Some("stream refused"));
}

/// What a hub socket delivered, tagged by the index of its job in the relay.
enum Heard {
    Frame(String),
    /// The hub closed the socket.
    End,
    /// The stream was cut: its reader fell `LIVE_MAX_BUFFERED_BYTES` behind, or its
    /// time was up while frames came.
    Cut,
}

/// What a stream's hub sockets delivered and the stream has not read yet: filled by the
/// sockets' listeners, emptied by [`Relay::next`]. The listeners keep its bound
/// themselves, since a client that stops reading never pulls the stream again: past
/// the bound (or the stream's deadline) they close every hub socket of the stream and
/// drop what waits; the client, when it reads on, resumes from its place.
struct Inbox {
    /// What came, by the index of its job, with its bytes and whether it is live.
    queue: RefCell<VecDeque<(usize, Heard, u64, bool)>>,
    /// The bytes of the live frames in `queue`, and of the catch-up frames.
    bytes: Cell<u64>,
    catch_up_bytes: Cell<u64>,
    /// By job: whether its hub's catch-up is over (what comes after counts).
    caught_up: RefCell<Vec<bool>>,
    max_bytes: u64,
    deadline_ms: f64,
    /// The stream's hub sockets, for the listeners to close at a cut, and their jobs.
    sockets: RefCell<Vec<WebSocket>>,
    jobs: RefCell<Vec<String>>,
    cut: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Inbox {
    fn push(&self, index: usize, heard: Heard) {
        if self.cut.get() {
            return;
        }
        let (mut bytes, mut live) = (0, false);
        if let Heard::Frame(text) = &heard {
            bytes = text.len() as u64;
            let mut caught_up = self.caught_up.borrow_mut();
            match caught_up.get_mut(index) {
                Some(true) => live = true,
                Some(over) => *over = text == live::CAUGHT_UP,
                None => {}
            }
        }
        let total = match live {
            true => &self.bytes,
            false => &self.catch_up_bytes,
        };
        total.set(total.get() + bytes);
        // A frame that comes to an empty queue is never what puts a reader behind.
        let behind = !self.queue.borrow().is_empty()
            && (self.bytes.get() > self.max_bytes
                || self.catch_up_bytes.get() > MAX_CATCH_UP_BYTES);
        if behind {
            return self.cut("the stream's reader fell behind");
        }
        if crate::clock::now_ms() > self.deadline_ms {
            return self.cut("the stream's time is up");
        }
        self.queue
            .borrow_mut()
            .push_back((index, heard, bytes, live));
        self.wake();
    }

    /// Closes every hub socket of the stream and drops what waits: the stream ends when
    /// it is next read.
    fn cut(&self, why: &str) {
        if self.cut.replace(true) {
            return;
        }
        for socket in self.sockets.borrow().iter() {
            unlisten(socket);
            let _ = socket.close(Some(1000), Some(why));
        }
        crate::log::info(serde_json::json!({"event": "stream_cut", "cause": why,
                               "waiting_bytes": self.bytes.get(),
                               "catch_up_bytes": self.catch_up_bytes.get(),
                               "max_bytes": self.max_bytes, "jobs": *self.jobs.borrow()}));
        self.queue.borrow_mut().clear();
        self.bytes.set(0);
        self.catch_up_bytes.set(0);
        self.queue.borrow_mut().push_back((0, Heard::Cut, 0, false));
        self.wake();
    }

    fn wake(&self) {
        if let Some(waker) = self.waker.borrow_mut().take() {
            waker.wake();
        }
    }

    /// The next thing heard, once there is one.
    async fn next(&self) -> (usize, Heard) {
        poll_fn(|cx| match self.queue.borrow_mut().pop_front() {
            Some((index, heard, bytes, live)) => {
                let total = match live {
                    true => &self.bytes,
                    false => &self.catch_up_bytes,
                };
                total.set(total.get().saturating_sub(bytes));
                Poll::Ready((index, heard))
            }
            None => {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }
}

/// Takes the stream's listeners off a hub socket.
fn unlisten(socket: &WebSocket) {
    let raw: &worker::web_sys::WebSocket = socket.as_ref();
    raw.set_onmessage(None);
    raw.set_onclose(None);
    raw.set_onerror(None);
}

/// A job's document as the stream read it from the store: its position, and the
/// document parsed and as text.
type Held = (u64, Job, String);

/// One job's hub socket, with the place it was last sent.
struct Watch {
    socket: WebSocket,
    /// The listeners, kept alive as long as the socket is.
    _listeners: [Closure<dyn FnMut(worker::web_sys::MessageEvent)>; 2],
    job: String,
    /// The last change sent, and each attempt's text as far as it was sent: a change
    /// is sent only if newer, and of a piece of text only what the client lacks.
    sent: Follower,
    /// The stream's own read, sent (if still newer) once the hub's catch-up is over.
    held: Option<Held>,
    /// Its settling change is sent, and its socket closed.
    done: bool,
}

impl Watch {
    /// The event for change `seq` (`job`, as text `doc`), if it is newer than all sent.
    fn doc(&mut self, seq: u64, job: &Job, doc: &str) -> Option<String> {
        if !self.sent.take_job(seq, job) {
            return None;
        }
        if job.is_settled() {
            self.done = true;
            self.close("job settled");
        }
        Some(event(self.sent.place(), "job", doc))
    }

    fn close(&mut self, why: &str) {
        unlisten(&self.socket);
        let _ = self.socket.close(Some(1000), Some(why));
    }
}

/// One stream's side of its hub sockets.
struct Relay {
    watches: Vec<Watch>,
    /// What the hub sockets delivered, not yet read by the stream, over all its jobs.
    /// It also holds the stream's deadline.
    inbox: Rc<Inbox>,
    /// When the stream last wrote something: the keep-alive counts from there.
    wrote_ms: f64,
}

impl Relay {
    fn new(deadline_ms: f64, max_bytes: u64) -> Self {
        Self {
            watches: Vec::new(),
            inbox: Rc::new(Inbox {
                queue: RefCell::new(VecDeque::new()),
                bytes: Cell::new(0),
                catch_up_bytes: Cell::new(0),
                caught_up: RefCell::new(Vec::new()),
                max_bytes,
                deadline_ms,
                sockets: RefCell::new(Vec::new()),
                jobs: RefCell::new(Vec::new()),
                cut: Cell::new(false),
                waker: RefCell::new(None),
            }),
            wrote_ms: crate::clock::now_ms(),
        }
    }

    /// Listens on `socket`, the hub of job `job`, last sent at `sent`, with the stream's
    /// own read still to send.
    fn follow(
        &mut self,
        socket: WebSocket,
        job: &str,
        sent: Follower,
        held: Option<Held>,
    ) -> ApiResult<()> {
        let index = self.watches.len();
        let on_message = {
            let inbox = self.inbox.clone();
            Closure::<dyn FnMut(worker::web_sys::MessageEvent)>::new(
                move |e: worker::web_sys::MessageEvent| {
                    if let Some(text) = e.data().as_string() {
                        inbox.push(index, Heard::Frame(text));
                    }
                },
            )
        };
        let on_close = {
            let inbox = self.inbox.clone();
            Closure::<dyn FnMut(worker::web_sys::MessageEvent)>::new(
                move |_e: worker::web_sys::MessageEvent| inbox.push(index, Heard::End),
            )
        };
        let raw: &worker::web_sys::WebSocket = socket.as_ref();
        raw.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        raw.set_onclose(Some(on_close.as_ref().unchecked_ref()));
        raw.set_onerror(Some(on_close.as_ref().unchecked_ref()));
        let accepted = socket.accept();
        if accepted.is_err() {
            unlisten(&socket);
            let _ = socket.close(Some(1011), Some("the stream could not take this socket"));
        }
        self.inbox.sockets.borrow_mut().push(socket.clone());
        self.inbox.caught_up.borrow_mut().push(false);
        self.inbox.jobs.borrow_mut().push(job.to_owned());
        self.watches.push(Watch {
            socket,
            _listeners: [on_message, on_close],
            job: job.to_owned(),
            sent,
            held,
            // A socket that could not be taken serves nothing: the stream names its job.
            done: accepted.is_err(),
        });
        accepted.map_err(|e| AppError::unavailable(format!("live hub: {e}")))
    }

    /// The stream's next chunk: a newer change, a keep-alive comment, or the end.
    async fn next(mut self) -> Option<(Result<Vec<u8>, worker::Error>, Self)> {
        loop {
            if self.watches.iter().all(|w| w.done) {
                return None;
            }
            let now = crate::clock::now_ms();
            let left = self.inbox.deadline_ms - now;
            if left <= 0.0 {
                return None;
            }
            let keep_alive_in = (self.wrote_ms + KEEP_ALIVE_MS as f64 - now).max(0.0);
            let ends = left <= keep_alive_in;
            let tick = worker::Delay::from(std::time::Duration::from_millis(
                left.min(keep_alive_in) as u64,
            ));
            let inbox = self.inbox.clone();
            let next = inbox.next();
            futures_util::pin_mut!(next);
            let (index, heard) = match select(next, tick).await {
                Either::Left((heard, _)) => heard,
                Either::Right(_) if ends => return None, // the stream's time is up
                Either::Right(_) => {
                    self.wrote_ms = crate::clock::now_ms();
                    return Some((Ok(KEEP_ALIVE.to_vec()), self));
                }
            };
            let text = match heard {
                Heard::Frame(text) => text,
                Heard::Cut => return None,
                // A hub gone while its job is still moving: the client resumes.
                Heard::End if !self.watches.get(index).is_some_and(|w| w.done) => return None,
                Heard::End => continue,
            };
            let Some(frame) = live::unframe(&text) else {
                continue;
            };
            let Some(watch) = self.watches.get_mut(index) else {
                continue;
            };
            if watch.done {
                continue;
            }
            let out = match frame {
                Frame::Doc(seq, doc) => {
                    // The stream's own read is the newest it knows until the hub sends a
                    // newer change: an older one (a hub that missed a notification, a
                    // settled document it kept) is never sent, nor ends the stream.
                    if watch.held.as_ref().is_some_and(|(held, _, _)| seq <= *held) {
                        continue;
                    }
                    let Ok(job) = serde_json::from_str::<Job>(doc) else {
                        continue;
                    };
                    watch.held = None;
                    match watch.doc(seq, &job, doc) {
                        Some(out) => out,
                        None => continue,
                    }
                }
                Frame::CaughtUp => {
                    let Some((seq, job, doc)) = watch.held.take() else {
                        continue;
                    };
                    match watch.doc(seq, &job, &doc) {
                        Some(out) => out,
                        None => continue,
                    }
                }
                Frame::Text(piece) => match watch.sent.take_text(&piece) {
                    Ok(Some((offset, text))) => {
                        let data = serde_json::json!({"job_id": watch.job,
                            "attempt_id": piece.attempt_id, "offset": offset, "text": text});
                        event(watch.sent.place(), "delta", &data.to_string())
                    }
                    Ok(None) => continue,
                    // A piece past what the client has: the hub's text is contiguous,
                    // so this should not happen; the stream ends, and the client
                    // resumes from its place, where the hub sends what it lacks.
                    Err(_) => return None,
                },
            };
            self.wrote_ms = crate::clock::now_ms();
            return Some((Ok(out.into_bytes()), self));
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        for watch in self.watches.iter_mut().filter(|w| !w.done) {
            watch.close("stream ended");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_one_block_with_its_id() {
        assert_eq!(
            event(7, "job", "{\"a\":1}"),
            "id: 7\nevent: job\ndata: {\"a\":1}\n\n"
        );
        assert_eq!(
            event(8, "job", "a\nb"),
            "id: 8\nevent: job\ndata: a\ndata: b\n\n"
        );
    }
}
