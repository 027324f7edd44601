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
//!    that job;
//! 4. sends a comment when it has written nothing for `KEEP_ALIVE_MS`; ends when every
//!    job has sent its settling change, after `LIVE_MAX_STREAM_MS` (the client resumes
//!    from its positions), when a hub goes away, or when the client reads so slowly
//!    that `MAX_BUFFERED` changes wait.
//!
//! DO stubs are not among the subrequests that count against a Worker's six
//! simultaneous connections, so a stream of 20 jobs holds 20 hub sockets.

use crate::auth::Caller;
use crate::error::{ApiResult, AppError};
use crate::http::Ctx;
use crate::live::{self, Frame, Hubs};
use futures_channel::mpsc::{unbounded, UnboundedReceiver, UnboundedSender};
use futures_util::future::{join_all, select, Either};
use futures_util::StreamExt;
use onceclick_protocol::live::{parse_followed, Follower, Place, Position, MAX_STREAM_JOBS};
use onceclick_protocol::ErrorCode;
use onceclick_protocol::Job;
use std::cell::Cell;
use std::rc::Rc;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::JsCast;
use worker::{Headers, Request, Response, WebSocket};

/// A comment at least this often, so that proxies keep the connection open and a
/// client can tell a quiet stream from a dead one.
const KEEP_ALIVE_MS: u64 = 15_000;

/// How long one stream stays open when `LIVE_MAX_STREAM_MS` is unset: the client then
/// reconnects from its positions (and with a fresh token).
const DEFAULT_MAX_STREAM_MS: u64 = 300_000;

/// Frames (changes and pieces of text) that may wait for a slow reader before its
/// stream is cut off.
const MAX_BUFFERED: usize = 256;

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
        return Ok(Response::empty()?
            .with_status(204)
            .with_headers(sse_headers()));
    }
    if first.is_empty() && open.iter().all(|(_, _, held)| held.is_none()) {
        first.push_str(LIVE);
    }
    if open.is_empty() {
        return Ok(
            Response::from_stream(futures_util::stream::iter([Ok::<_, worker::Error>(
                first.into_bytes(),
            )]))?
            .with_headers(sse_headers()),
        );
    }
    let hubs = Hubs::from_env(ctx.env)
        .ok_or_else(|| AppError::internal("the LIVE binding is not configured"))?;
    let subscribed = join_all(
        open.iter()
            .map(|(id, at, _)| hubs.subscribe(id, at.place())),
    )
    .await;
    let max_ms = live::number_var(ctx.env, "LIVE_MAX_STREAM_MS", DEFAULT_MAX_STREAM_MS);
    let mut relay = Relay::new(crate::clock::now_ms() + max_ms as f64);
    let mut refused = None;
    for ((id, at, held), socket) in open.into_iter().zip(subscribed) {
        match socket {
            Ok(socket) if refused.is_none() => {
                if let Err(e) = relay.follow(socket, id, at, held) {
                    refused = Some(e);
                }
            }
            // The others' sockets close with the relay.
            Ok(socket) => close_unused(&socket),
            Err(e) => {
                refused.get_or_insert(e);
            }
        }
    }
    if let Some(e) = refused {
        return Err(e); // `relay` drops here, closing what it holds
    }
    let first = (!first.is_empty()).then(|| Ok::<_, worker::Error>(first.into_bytes()));
    let body =
        futures_util::stream::iter(first).chain(futures_util::stream::unfold(relay, Relay::next));
    Ok(Response::from_stream(body)?.with_headers(sse_headers()))
}

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
    /// The reader fell `MAX_BUFFERED` behind.
    Behind,
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
        let raw: &worker::web_sys::WebSocket = self.socket.as_ref();
        raw.set_onmessage(None);
        raw.set_onclose(None);
        raw.set_onerror(None);
        let _ = self.socket.close(Some(1000), Some(why));
    }
}

/// One stream's side of its hub sockets.
struct Relay {
    watches: Vec<Watch>,
    tx: UnboundedSender<(usize, Heard)>,
    heard: UnboundedReceiver<(usize, Heard)>,
    /// Frames delivered and not yet read by the stream, over all its jobs.
    waiting: Rc<Cell<usize>>,
    deadline_ms: f64,
    /// When the stream last wrote something: the keep-alive counts from there.
    wrote_ms: f64,
}

impl Relay {
    fn new(deadline_ms: f64) -> Self {
        let (tx, heard) = unbounded();
        Self {
            watches: Vec::new(),
            tx,
            heard,
            waiting: Rc::new(Cell::new(0)),
            deadline_ms,
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
            let (tx, waiting) = (self.tx.clone(), self.waiting.clone());
            Closure::<dyn FnMut(worker::web_sys::MessageEvent)>::new(
                move |e: worker::web_sys::MessageEvent| {
                    let Some(text) = e.data().as_string() else {
                        return;
                    };
                    waiting.set(waiting.get() + 1);
                    let heard = if waiting.get() > MAX_BUFFERED {
                        Heard::Behind
                    } else {
                        Heard::Frame(text)
                    };
                    let _ = tx.unbounded_send((index, heard));
                },
            )
        };
        let on_close = {
            let tx = self.tx.clone();
            Closure::<dyn FnMut(worker::web_sys::MessageEvent)>::new(
                move |_e: worker::web_sys::MessageEvent| {
                    let _ = tx.unbounded_send((index, Heard::End));
                },
            )
        };
        let raw: &worker::web_sys::WebSocket = socket.as_ref();
        raw.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        raw.set_onclose(Some(on_close.as_ref().unchecked_ref()));
        raw.set_onerror(Some(on_close.as_ref().unchecked_ref()));
        let accepted = socket.accept();
        self.watches.push(Watch {
            socket,
            _listeners: [on_message, on_close],
            job: job.to_owned(),
            sent,
            held,
            done: false,
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
            let left = self.deadline_ms - now;
            if left <= 0.0 {
                return None;
            }
            let keep_alive_in = (self.wrote_ms + KEEP_ALIVE_MS as f64 - now).max(0.0);
            let ends = left <= keep_alive_in;
            let tick = worker::Delay::from(std::time::Duration::from_millis(
                left.min(keep_alive_in) as u64,
            ));
            let (index, heard) = match select(self.heard.next(), tick).await {
                Either::Left((Some(heard), _)) => heard,
                Either::Left((None, _)) => return None,
                Either::Right(_) if ends => return None, // the stream's time is up
                Either::Right(_) => {
                    self.wrote_ms = crate::clock::now_ms();
                    return Some((Ok(KEEP_ALIVE.to_vec()), self));
                }
            };
            let text = match heard {
                Heard::Frame(text) => text,
                Heard::Behind => return None,
                // A hub gone while its job is still moving: the client resumes.
                Heard::End if !self.watches.get(index).is_some_and(|w| w.done) => return None,
                Heard::End => continue,
            };
            self.waiting.set(self.waiting.get().saturating_sub(1));
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
                    let Ok(job) = serde_json::from_str::<Job>(doc) else {
                        continue;
                    };
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
