//! `GET /v1/jobs/{id}/stream`: the job's document, pushed as Server-Sent Events at
//! every change, resumable with `Last-Event-ID`.
//!
//! The SSE ends here, in the Worker; the job's hub (`live.rs`) relays each change over
//! a hibernatable WebSocket. The stream:
//! 1. reads the job from the store, as `GET /v1/jobs/{id}` does (the same callers get
//!    the same 404): the first `event: job`, unless the client's `Last-Event-ID` is
//!    that very change, in which case a comment says at once that the stream is live;
//! 2. ends at once when the job is settled (`protocol::live::settled`); a reconnect
//!    that already has its last change is answered `204 No Content`, which stops an
//!    EventSource;
//! 3. otherwise subscribes to the hub (changes after the one it read), and sends each
//!    newer change as it comes, with its position as the event's `id`, dropping any
//!    change not newer than the last it sent;
//! 4. sends a comment every `KEEP_ALIVE_MS`, ends after the job's settling change, after
//!    `LIVE_MAX_STREAM_MS` (the client resumes with `Last-Event-ID`), when the hub goes
//!    away, or when the client reads so slowly that `MAX_BUFFERED` changes wait.

use crate::auth::Caller;
use crate::error::{ApiResult, AppError};
use crate::http::Ctx;
use crate::live::{self, Hubs};
use futures_channel::mpsc::{unbounded, UnboundedReceiver};
use futures_util::future::{select, Either};
use futures_util::StreamExt;
use onceclick_protocol::live::Position;
use onceclick_protocol::ErrorCode;
use std::cell::Cell;
use std::rc::Rc;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::JsCast;
use worker::{Headers, Request, Response, WebSocket};

/// A comment at least this often, so that proxies keep the connection open and a
/// client can tell a quiet stream from a dead one.
const KEEP_ALIVE_MS: u64 = 15_000;

/// How long one stream stays open when `LIVE_MAX_STREAM_MS` is unset: the client then
/// reconnects with `Last-Event-ID` (and a fresh token).
const DEFAULT_MAX_STREAM_MS: u64 = 300_000;

/// Changes that may wait for a slow reader before its stream is cut off.
const MAX_BUFFERED: usize = 32;

/// The comment a stream sends first when the client is already up to date.
const LIVE: &str = ": live\n\n";

/// One event, its data split into `data:` lines (a document has none, but a frame
/// must never end early).
fn event(id: u64, name: &str, data: &str) -> String {
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
fn last_event_id(req: &Request) -> ApiResult<Option<Position>> {
    let Some(text) = req.headers().get("Last-Event-ID").ok().flatten() else {
        return Ok(None);
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    Position::parse(text.trim()).map(Some).ok_or_else(|| {
        AppError::new(
            ErrorCode::InvalidLastEventId,
            format!("Last-Event-ID {text:?} is not a position of this stream; positions are the event ids it sent (decimal digits)"),
        )
    })
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
    let stored = ctx
        .store
        .job(Some(&caller.owner), id)
        .await?
        .ok_or_else(|| AppError::not_found(&format!("job {id}")))?;
    let at = Position::of_etag(&stored.etag).ok_or_else(|| {
        AppError::internal(format!("job {id}: ETag {} is no position", stored.etag))
    })?;
    let settled = stored.job.is_settled();
    // A position at or ahead of the job's (a client that cannot be ahead, but says so)
    // gets nothing older than it claims to have.
    let fresh = after.is_none_or(|a| a < at);
    if settled && !fresh {
        return Ok(Response::empty()?
            .with_status(204)
            .with_headers(sse_headers()));
    }
    let first = if fresh {
        event(at.0, "job", &stored.doc)
    } else {
        LIVE.to_owned()
    };
    if settled {
        return Ok(
            Response::from_stream(futures_util::stream::iter([Ok::<_, worker::Error>(
                first.into_bytes(),
            )]))?
            .with_headers(sse_headers()),
        );
    }
    let hubs = Hubs::from_env(ctx.env)
        .ok_or_else(|| AppError::internal("the LIVE binding is not configured"))?;
    let socket = hubs.subscribe(id, at.0).await?;
    let max_ms = live::number_var(ctx.env, "LIVE_MAX_STREAM_MS", DEFAULT_MAX_STREAM_MS);
    let relay = Relay::new(socket, at.0, crate::clock::now_ms() + max_ms as f64)?;
    let body =
        futures_util::stream::once(async move { Ok::<_, worker::Error>(first.into_bytes()) })
            .chain(futures_util::stream::unfold(relay, Relay::next));
    Ok(Response::from_stream(body)?.with_headers(sse_headers()))
}

/// What the hub's socket delivered.
enum Heard {
    Frame(String),
    /// The hub closed the socket, or the reader fell `MAX_BUFFERED` behind.
    End,
}

/// One stream's side of its hub socket.
struct Relay {
    socket: WebSocket,
    heard: UnboundedReceiver<Heard>,
    /// Frames delivered and not yet read by the stream.
    waiting: Rc<Cell<usize>>,
    /// The listeners, kept alive as long as the socket is.
    _listeners: [Closure<dyn FnMut(worker::web_sys::MessageEvent)>; 2],
    /// The last change sent.
    sent: u64,
    deadline_ms: f64,
    done: bool,
}

impl Relay {
    fn new(socket: WebSocket, sent: u64, deadline_ms: f64) -> ApiResult<Self> {
        let (tx, heard) = unbounded();
        let waiting = Rc::new(Cell::new(0usize));
        let on_message = {
            let (tx, waiting) = (tx.clone(), waiting.clone());
            Closure::<dyn FnMut(worker::web_sys::MessageEvent)>::new(
                move |e: worker::web_sys::MessageEvent| {
                    let Some(text) = e.data().as_string() else {
                        return;
                    };
                    waiting.set(waiting.get() + 1);
                    let heard = if waiting.get() > MAX_BUFFERED {
                        Heard::End
                    } else {
                        Heard::Frame(text)
                    };
                    let _ = tx.unbounded_send(heard);
                },
            )
        };
        let on_close = Closure::<dyn FnMut(worker::web_sys::MessageEvent)>::new(
            move |_e: worker::web_sys::MessageEvent| {
                let _ = tx.unbounded_send(Heard::End);
            },
        );
        let raw: &worker::web_sys::WebSocket = socket.as_ref();
        raw.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        raw.set_onclose(Some(on_close.as_ref().unchecked_ref()));
        raw.set_onerror(Some(on_close.as_ref().unchecked_ref()));
        socket
            .accept()
            .map_err(|e| AppError::unavailable(format!("live hub: {e}")))?;
        Ok(Self {
            socket,
            heard,
            waiting,
            _listeners: [on_message, on_close],
            sent,
            deadline_ms,
            done: false,
        })
    }

    /// The stream's next chunk: a newer change, a keep-alive comment, or the end.
    async fn next(mut self) -> Option<(Result<Vec<u8>, worker::Error>, Self)> {
        loop {
            if self.done {
                return None;
            }
            let left = self.deadline_ms - crate::clock::now_ms();
            if left <= 0.0 {
                return None;
            }
            let wait = (left as u64).min(KEEP_ALIVE_MS);
            let tick = worker::Delay::from(std::time::Duration::from_millis(wait));
            let heard = match select(self.heard.next(), tick).await {
                Either::Left((heard, _)) => heard,
                Either::Right(_) => {
                    if wait < KEEP_ALIVE_MS {
                        return None; // the stream's time is up
                    }
                    return Some((Ok(b": keep-alive\n\n".to_vec()), self));
                }
            };
            let Some(Heard::Frame(text)) = heard else {
                return None;
            };
            self.waiting.set(self.waiting.get().saturating_sub(1));
            let Some((seq, doc)) = live::unframe(&text) else {
                continue;
            };
            if seq <= self.sent {
                continue;
            }
            self.sent = seq;
            self.done = live::ends_stream(doc);
            let chunk = event(seq, "job", doc).into_bytes();
            return Some((Ok(chunk), self));
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let raw: &worker::web_sys::WebSocket = self.socket.as_ref();
        raw.set_onmessage(None);
        raw.set_onclose(None);
        raw.set_onerror(None);
        let _ = self.socket.close(Some(1000), Some("stream ended"));
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
