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
//!
//! This file opens the stream (steps 1 to 3); `relay.rs` keeps it (step 4).

pub(crate) mod relay;

use crate::auth::Caller;
use crate::error::{ApiResult, AppError};
use crate::http::Ctx;
use crate::live::{self, Hubs};
use crate::store::StoredJob;
use futures_util::StreamExt;
use onceclick_core::together::together;
use onceclick_protocol::live::{
    parse_followed, Follower, Place, Position, FRAME_CHARS, MAX_STREAM_JOBS,
};
use onceclick_protocol::ErrorCode;
use onceclick_protocol::Job;
use relay::Relay;
use worker::{Env, Headers, Request, Response, WebSocket};

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

/// The comment a stream sends first when the client is already up to date.
const LIVE: &str = ": live\n\n";

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
    let reads = together(
        jobs.iter()
            .map(|(id, _)| ctx.store.job(Some(&caller.owner), id)),
    )
    .await;
    let mut first = String::new();
    let open = start(&jobs, reads, &mut first)?;
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
    let subscribed = together(open.iter().enumerate().map(|(i, (id, at, _))| {
        let failing = failing.as_ref().filter(|_| i == 0);
        async move {
            match failing {
                Some(fault) => Err(AppError::unavailable(fault.cause_or_detail()).with_job(id)),
                None => hubs.subscribe(id, at.place()).await,
            }
        }
    }))
    .await;
    let mut relay = new_relay(ctx.env);
    let mut unserved = follow_all(&mut relay, open, subscribed)?;
    let served = relay.serves();
    if !served && (first.is_empty() || first == LIVE) && !unserved.is_empty() {
        // No hub answered, and nothing else to send.
        return Err(unserved.swap_remove(0).1);
    }
    name_unserved(&mut first, unserved);
    if !served {
        // The settled jobs' documents and the names of those it cannot serve: the end.
        return whole(first);
    }
    relay.cut_at_deadline();
    let first = (!first.is_empty()).then(|| Ok::<_, worker::Error>(first.into_bytes()));
    let body =
        futures_util::stream::iter(first).chain(futures_util::stream::unfold(relay, Relay::next));
    Ok(Response::from_stream(body)
        .map_err(crate::problem::runtime)?
        .with_headers(sse_headers()))
}

/// A job whose changes are still to come: its id, where its stream stands, and the
/// document the stream read, if the client lacks it.
type Open<'a> = (&'a str, Follower, Option<Held>);

/// What the stream's reads of `jobs` make of it: the events it sends at once go to
/// `first` (the documents of settled jobs that the client lacks), and the jobs still to
/// follow come back.
fn start<'a>(
    jobs: &'a [(String, Option<Place>)],
    reads: Vec<ApiResult<Option<StoredJob>>>,
    first: &mut String,
) -> ApiResult<Vec<Open<'a>>> {
    let mut open: Vec<Open<'a>> = Vec::new();
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
    Ok(open)
}

/// A relay for a stream that opens now, within `LIVE_MAX_STREAM_MS` and
/// `LIVE_MAX_BUFFERED_BYTES`.
fn new_relay(env: &Env) -> Relay {
    let max_ms = live::number_var(env, "LIVE_MAX_STREAM_MS", DEFAULT_MAX_STREAM_MS);
    let max_bytes = live::number_var(env, "LIVE_MAX_BUFFERED_BYTES", DEFAULT_MAX_BUFFERED_BYTES);
    let deadline_ms = crate::clock::now_ms() + max_ms as f64;
    Relay::new(deadline_ms, max_bytes.max(MIN_MAX_BUFFERED_BYTES))
}

/// Hands each job's hub socket to `relay`. A refusal (a job with its fill of streams)
/// refuses the stream, naming its job: the client follows that one some other way. A
/// hub that fails does not: the stream serves the others, and what this returns names
/// each job it cannot serve.
fn follow_all<'a>(
    relay: &mut Relay,
    open: Vec<Open<'a>>,
    subscribed: Vec<ApiResult<WebSocket>>,
) -> ApiResult<Vec<(&'a str, AppError)>> {
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
    match refused {
        Some(e) => Err(e), // `relay` drops with the stream, closing what it holds
        None => Ok(unserved),
    }
}

/// An `unserved` event in `first` for each job whose hub did not answer, said in the
/// log: the client polls those.
fn name_unserved(first: &mut String, unserved: Vec<(&str, AppError)>) {
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

/// A job's document as the stream read it from the store: its position, and the
/// document parsed and as text.
type Held = (u64, Job, String);

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
