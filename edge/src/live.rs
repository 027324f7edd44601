//! The job's live hub: a Durable Object per job (`LIVE`, named by the job's id) that
//! holds the job's open streams as hibernatable WebSockets and fans every move out to
//! them.
//!
//! - **Who tells it.** The store, after each batch that moves the job
//!   (`store::LIVE_OPS`), sends the document that the batch read back in its own
//!   transaction, with its change counter (`POST /notify`, body `<seq>\n<doc>`).
//!   The request's and the queue consumer's stores send it (`Store::with_live`); the
//!   moves a shard's alarm or the reconciler commit reach streams by the re-read below.
//! - **Who listens.** `GET /v1/jobs/{id}/stream` (`stream.rs`) ends the SSE in the
//!   Worker and relays from here over a WebSocket (`GET /subscribe`). An object that
//!   holds only hibernatable WebSockets is not billed while nothing happens; one that
//!   held the SSE responses would be billed for as long as they are open.
//! - **Order.** The hub keeps the newest change it heard of and sends only newer ones;
//!   each stream also drops anything not newer than what it sent. Notifications from
//!   several writers may arrive out of order: an older one is dropped, never sent after
//!   a newer one.
//! - **Correctness never rests on a notification.** A stream reads the store when it
//!   opens, and while any stream is open the hub re-reads the job every
//!   `LIVE_REREAD_MS` (an alarm): a notification lost (an isolate that died after the
//!   commit, a failed send) or never sent (the reconciler's sweeps) is late by at most
//!   that, never lost.
//! - **Bounds.** At most `LIVE_MAX_SUBSCRIBERS` streams per job (429
//!   `too_many_subscribers` beyond). Nothing counts across jobs: a global counter
//!   would be the next hot object.

use crate::error::{ApiResult, AppError};
use crate::store::Store;
use futures_util::future::LocalBoxFuture;
use onceclick_protocol::chat::MAX_CHARS;
use onceclick_protocol::live::{
    after_chars, EndChunk, Hub, Keeper, Piece, Place, Position, Refused, FRAME_CHARS,
};
use onceclick_protocol::Job;
use std::cell::RefCell;
use std::time::Duration;
use wasm_bindgen::{JsCast, JsValue};
use worker::js_sys::{Function, Object, Promise, Reflect};
use worker::wasm_bindgen_futures::JsFuture;
use worker::{
    durable_object, DurableObject, Env, ObjectNamespace, Request, Response, Result, State,
    WebSocket, WebSocketIncomingMessage, WebSocketPair,
};

/// The binding of the hubs in wrangler.toml.
pub(crate) const BINDING: &str = "LIVE";

/// How often a hub with streams open re-reads its job, when `LIVE_REREAD_MS` is unset.
const DEFAULT_REREAD_MS: u64 = 5_000;

/// Streams one job may have open at once, when `LIVE_MAX_SUBSCRIBERS` is unset.
const DEFAULT_MAX_SUBSCRIBERS: usize = 100;

/// A whole-number variable, or its default (also for a value that is not a number).
pub(crate) fn number_var(env: &Env, name: &str, default: u64) -> u64 {
    env.var(name)
        .ok()
        .and_then(|v| v.to_string().parse().ok())
        .unwrap_or(default)
}

/// One change as the hub sends it to a stream: `<seq>\n<doc>`.
pub(crate) fn frame(seq: u64, doc: &str) -> String {
    format!("{seq}\n{doc}")
}

/// A piece of an attempt's text as the hub sends it to a stream:
/// `+<n> <offset> <attempt_id>\n<text>`.
pub(crate) fn text_frame(piece: &Piece<'_>) -> String {
    format!(
        "+{} {} {}\n{}",
        piece.n, piece.offset, piece.attempt_id, piece.text
    )
}

/// The frames of a piece, each within a WebSocket message's limit
/// ([`FRAME_CHARS`] code points).
fn text_frames(piece: &Piece<'_>) -> Vec<String> {
    piece.parts(FRAME_CHARS).map(|p| text_frame(&p)).collect()
}

/// The frame that ends a new stream's catch-up: what follows is live.
pub(crate) const CAUGHT_UP: &str = "=";

/// What a hub sent a stream.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame<'a> {
    /// A change: its counter and the document.
    Doc(u64, &'a str),
    /// A piece of an attempt's text.
    Text(Piece<'a>),
    /// The catch-up is over ([`CAUGHT_UP`]).
    CaughtUp,
}

/// A frame's content, if it is one.
pub(crate) fn unframe(text: &str) -> Option<Frame<'_>> {
    if text == CAUGHT_UP {
        return Some(Frame::CaughtUp);
    }
    let (head, body) = text.split_once('\n')?;
    let Some(head) = head.strip_prefix('+') else {
        return Some(Frame::Doc(Position::parse(head)?.0, body));
    };
    let mut parts = head.splitn(3, ' ');
    let mut number = || Some(Position::parse(parts.next()?)?.0);
    let (n, offset) = (u32::try_from(number()?).ok()?, number()?);
    Some(Frame::Text(Piece {
        n,
        offset,
        attempt_id: parts.next().filter(|id| !id.is_empty())?,
        text: body,
    }))
}

/// What a hub answered a piece of text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// It has this many code points of the attempt's text: send on from there.
    Have(u64),
    /// The attempt may stream no more (the job's document says it ended): send nothing.
    Stop,
}

/// The Worker's side of the hubs: the store's [`crate::host::Notify`], and a stream's
/// subscription.
pub(crate) struct Hubs {
    namespace: ObjectNamespace,
}

impl Hubs {
    /// The hubs, if this deployment has the binding.
    pub(crate) fn from_env(env: &Env) -> Option<Self> {
        env.durable_object(BINDING)
            .ok()
            .map(|namespace| Self { namespace })
    }

    /// One request to the hub of `job_id`, on the stub's own `fetch` with a plain init
    /// object (as `store/backend.rs` calls shards, for the Worker's size).
    async fn send(
        &self,
        job_id: &str,
        path: &str,
        init: &Object,
    ) -> std::result::Result<JsValue, String> {
        let text = |e: JsValue| format!("{e:?}");
        let stub: JsValue = self
            .namespace
            .id_from_name(job_id)
            .and_then(|id| id.get_stub())
            .map_err(|e| e.to_string())?
            .into_rpc();
        let fetch: Function = Reflect::get(&stub, &"fetch".into())
            .map_err(text)?
            .dyn_into()
            .map_err(text)?;
        let url = JsValue::from_str(&format!("https://live{path}"));
        let promise: Promise = fetch
            .call2(&stub, &url, init)
            .map_err(text)?
            .dyn_into()
            .map_err(text)?;
        JsFuture::from(promise).await.map_err(text)
    }

    /// Hands the hub of `job_id` the piece of attempt `n`'s text that begins at code
    /// point `offset`.
    pub(crate) async fn text(
        &self,
        job_id: &str,
        n: u32,
        attempt_id: &str,
        offset: u64,
        text: &str,
    ) -> std::result::Result<Taken, String> {
        let show = |e: JsValue| format!("{e:?}");
        let init = Object::new();
        Reflect::set(&init, &"method".into(), &"POST".into()).map_err(show)?;
        Reflect::set(&init, &"body".into(), &text.into()).map_err(show)?;
        let path = format!("/text?attempt={attempt_id}&n={n}&offset={offset}");
        let reply = self.send(job_id, &path, &init).await?;
        let status = status_of(&reply);
        let body: Promise = Reflect::get(&reply, &"text".into())
            .and_then(|f| f.dyn_into::<Function>())
            .and_then(|f| f.call0(&reply))
            .and_then(|p| p.dyn_into())
            .map_err(show)?;
        let body = JsFuture::from(body).await.map_err(show)?;
        let have = body.as_string().and_then(|b| Position::parse(&b));
        match (status as u16, have) {
            (410, _) => Ok(Taken::Stop),
            (200 | 409, Some(have)) => Ok(Taken::Have(have.0)),
            _ => Err(format!("the hub answered {status}: {body:?}")),
        }
    }

    /// Opens a WebSocket to the hub of `job_id` for a stream at `since`: the hub sends
    /// the text it has past that place, then every newer change and piece of text it
    /// hears of. `429 too_many_subscribers` when the job has its fill of streams.
    pub(crate) async fn subscribe(&self, job_id: &str, since: &Place) -> ApiResult<WebSocket> {
        let unavailable = |why: String| AppError::unavailable(format!("live hub: {why}"));
        let init = Object::new();
        let headers = Object::new();
        let set = |o: &Object, k: &str, v: &str| {
            Reflect::set(o, &k.into(), &v.into()).map_err(|e| unavailable(format!("{e:?}")))
        };
        set(&headers, "Upgrade", "websocket")?;
        Reflect::set(&init, &"headers".into(), &headers)
            .map_err(|e| unavailable(format!("{e:?}")))?;
        let path = format!("/subscribe?job={job_id}&since={since}");
        let reply = self.send(job_id, &path, &init).await.map_err(unavailable)?;
        let status = status_of(&reply);
        if status == 429.0 {
            return Err(AppError::new(
                onceclick_protocol::ErrorCode::TooManySubscribers,
                format!("job {job_id} has as many live streams open as one job may; close one, or retry later"),
            )
            .with_job(job_id)
            .retry_after(5));
        }
        let socket = Reflect::get(&reply, &"webSocket".into()).unwrap_or(JsValue::NULL);
        if socket.is_null() || socket.is_undefined() {
            return Err(unavailable(format!(
                "the hub answered {status} without a WebSocket"
            )));
        }
        Ok(WebSocket::from(
            socket.unchecked_into::<worker::web_sys::WebSocket>(),
        ))
    }
}

/// The status of a hub's answer (a JS `Response`), or 0 if it has none.
fn status_of(reply: &JsValue) -> f64 {
    Reflect::get(reply, &"status".into())
        .ok()
        .and_then(|s| s.as_f64())
        .unwrap_or(0.0)
}

/// The store's notifier for this deployment: its hubs, or none without the binding.
pub(crate) fn notifier(env: &Env) -> Option<std::rc::Rc<dyn crate::host::Notify>> {
    Hubs::from_env(env).map(|hubs| std::rc::Rc::new(hubs) as std::rc::Rc<dyn crate::host::Notify>)
}

impl crate::host::Notify for Hubs {
    fn notify<'a>(
        &'a self,
        job_id: &'a str,
        seq: u64,
        doc: &'a str,
    ) -> LocalBoxFuture<'a, std::result::Result<(), String>> {
        Box::pin(async move {
            let init = Object::new();
            let text = |e: JsValue| format!("{e:?}");
            Reflect::set(&init, &"method".into(), &"POST".into()).map_err(text)?;
            Reflect::set(&init, &"body".into(), &frame(seq, doc).into()).map_err(text)?;
            self.send(job_id, "/notify", &init).await.map(|_| ())
        })
    }
}

/// The hub of one job (see the module's docs).
#[durable_object]
pub struct Live {
    state: State,
    env: Env,
    /// The newest change heard of since this instance began, and the text of each
    /// attempt that streams (`protocol::live::Hub`).
    latest: RefCell<Hub>,
    /// What of each attempt's text is in the hub's storage (`protocol::live::Keeper`).
    keeper: RefCell<Keeper>,
}

/// What a stream's socket carries for the hub's alarm: the job it follows.
#[derive(serde::Serialize, serde::Deserialize)]
struct Attachment {
    job: String,
}

impl Live {
    /// Takes change `seq` if it is newer than any heard of, and sends it to every
    /// stream; drops it otherwise.
    async fn offer(&self, seq: u64, doc: &str) {
        if !self.latest.borrow_mut().offer(seq, doc) {
            return;
        }
        self.broadcast(&frame(seq, doc));
        self.keep_unknown().await;
        // The result is stored, or the job ended without one: its text is done with
        // (`Hub::offer` dropped it from memory). Storage holds nothing else, so all of
        // it goes, whatever this instance knows of it; the re-read alarm too (since the
        // 2026-02-24 compatibility date): a settled job's streams close, and the next
        // stream to subscribe sets it again.
        let Some(job_id) = settled_job(doc) else {
            return;
        };
        if self.keeper.borrow_mut().settle() {
            // Not awaited: nobody's answer waits for it. A delete that fails leaves the
            // text in the hub's storage, said in the log; nothing is sent of it, since
            // the hub refuses a settled job's text and a settled job's stream
            // subscribes to no hub.
            let storage = self.state.storage();
            worker::wasm_bindgen_futures::spawn_local(async move {
                match storage.delete_all().await {
                    Ok(()) => crate::log::info(
                        serde_json::json!({"event": "live_text_deleted", "job_id": job_id}),
                    ),
                    Err(e) => crate::log::error(serde_json::json!({"event": "live_text_unkept",
                        "job_id": job_id, "cause": e.to_string()})),
                }
            });
        }
    }

    fn broadcast(&self, text: &str) {
        for socket in self.state.get_websockets() {
            // A socket that is closing takes nothing; its stream has ended.
            let _ = socket.send_with_str(text);
        }
    }

    /// Reads back the text kept in storage, once per instance (after a restart, the
    /// hub's memory is empty).
    async fn load(&self) -> Result<()> {
        if !self.keeper.borrow().to_load() {
            return Ok(());
        }
        let stored = self.state.storage().list().await?;
        if !self.keeper.borrow().to_load() {
            return Ok(()); // another request read it back meanwhile
        }
        let entries = stored
            .entries()
            .into_iter()
            .filter_map(|entry| {
                let pair = worker::js_sys::Array::from(&entry.ok()?);
                Some((pair.get(0).as_string()?, pair.get(1).as_string()?))
            })
            .collect();
        self.keeper
            .borrow_mut()
            .load(&mut self.latest.borrow_mut(), entries, MAX_CHARS);
        Ok(())
    }

    /// `POST /text?attempt=ID&n=N&offset=O`: a piece of attempt `n`'s text, from the
    /// call that streams it. Answers the code points the hub has of it (200, or 409 for
    /// a piece past them: send from there), or 410 when the attempt has ended.
    async fn text(&self, mut req: Request) -> Result<Response> {
        let query =
            crate::http::query(&req, &["attempt", "n", "offset"]).map_err(|e| e.detail.clone())?;
        let number = |name| crate::http::param(&query, name).and_then(Position::parse);
        let attempt = crate::http::param(&query, "attempt").map(str::to_owned);
        let (Some(attempt), Some(n), Some(offset)) = (attempt, number("n"), number("offset"))
        else {
            return Response::error("attempt, n and offset", 400);
        };
        let Ok(n) = u32::try_from(n.0) else {
            return Response::error("n", 400);
        };
        let text = req.text().await?;
        self.load().await?;
        let have = |hub: &Hub| hub.chars(n).to_string();
        let taken = {
            let mut hub = self.latest.borrow_mut();
            match hub.text(n, &attempt, offset.0, &text, MAX_CHARS) {
                Ok(Some(piece)) => Ok(text_frames(&piece)),
                Ok(None) => Err(200),
                Err(Refused::Gap(_)) => Err(409),
                Err(Refused::Ended) => Err(410),
            }
        };
        match taken {
            Ok(frames) => frames.iter().for_each(|frame| self.broadcast(frame)),
            Err(status) => {
                return Ok(Response::ok(have(&self.latest.borrow()))?.with_status(status))
            }
        }
        // Kept about once per kilobyte, each time the text since the last write: a
        // restart loses at most the text since.
        let chars = self.latest.borrow().chars(n);
        let due = self.keeper.borrow_mut().due(n, chars);
        let chunk = due.and_then(|from| {
            let hub = self.latest.borrow();
            let text = after_chars(hub.text_of(n)?, from);
            Some(EndChunk {
                n,
                chars,
                key: Keeper::key(n, from),
                value: format!("{attempt}\n{text}"),
            })
        });
        if let Some(chunk) = chunk {
            self.keep(chunk).await;
        }
        // A piece of an attempt already `unknown` (its call read on) is kept at once.
        self.keep_unknown().await;
        Response::ok(have(&self.latest.borrow()))
    }

    /// An attempt that went `unknown` keeps its whole text, not only its whole
    /// kilobytes: the operator reads it to resolve the attempt, maybe after this instance
    /// is gone. (The chunks are taken in one borrow, written after it.)
    async fn keep_unknown(&self) {
        let chunks = self.keeper.borrow_mut().at_unknown(&self.latest.borrow());
        for chunk in chunks {
            self.keep(chunk).await;
        }
    }

    /// Writes a chunk of an attempt's text to storage. A write that fails costs a
    /// restart's read-back, not the stream: said in the log, and tried again with more
    /// text (a kilobyte later, or at the next document that shows it `unknown`).
    async fn keep(&self, chunk: EndChunk) {
        // The attempt the chunk is of, for the log line that counts the hub's writes.
        let attempt = chunk
            .value
            .split('\n')
            .next()
            .unwrap_or_default()
            .to_owned();
        match self.state.storage().put_raw(&chunk.key, chunk.value).await {
            Ok(()) => {
                self.keeper.borrow_mut().wrote(chunk.n, chunk.chars);
                crate::log::info(serde_json::json!({"event": "live_text_kept",
                    "attempt_id": attempt, "key": chunk.key}));
            }
            Err(e) => crate::log::error(serde_json::json!({"event": "live_text_unkept",
                "key": chunk.key, "cause": e.to_string()})),
        }
    }

    async fn subscribe(&self, req: &Request) -> Result<Response> {
        // The hub's own query, read with `form_urlencoded` (`http::query`'s way): the
        // `url` crate would link its IDNA tables into the Worker.
        let query = crate::http::query(req, &["job", "since"]).map_err(|e| e.detail.clone())?;
        let job = crate::http::param(&query, "job").map(str::to_owned);
        let since = crate::http::param(&query, "since")
            .and_then(Place::parse)
            .unwrap_or_default();
        let Some(job) = job else {
            return Response::error("no job", 400);
        };
        let max = number_var(
            &self.env,
            "LIVE_MAX_SUBSCRIBERS",
            DEFAULT_MAX_SUBSCRIBERS as u64,
        );
        if self.state.get_websockets().len() as u64 >= max {
            return Response::error("too many subscribers", 429);
        }
        self.load().await?;
        // From here to the catch-up nothing awaits: the socket gets each later change
        // and piece from `offer` and `text`, and what came before from here.
        let pair = WebSocketPair::new()?;
        self.state.accept_web_socket(&pair.server);
        pair.server.serialize_attachment(Attachment { job })?;
        // A change heard of between the stream's own read and now, and the text the
        // stream lacks.
        // The text first: a document after it may end its attempt.
        {
            let hub = self.latest.borrow();
            for frame in hub.text_after(&since).flat_map(|p| text_frames(&p)) {
                let _ = pair.server.send_with_str(frame);
            }
            if let Some((seq, doc)) = hub.catch_up(since.seq) {
                let _ = pair.server.send_with_str(frame(seq, doc));
            }
            // The stream holds back its own read's document until here, so that the
            // text an attempt sent before its end comes before the document that ends
            // it.
            let _ = pair.server.send_with_str(CAUGHT_UP);
        }
        let storage = self.state.storage();
        if storage.get_alarm().await?.is_none() {
            storage.set_alarm(self.reread_every()).await?;
        }
        Response::from_websocket(pair.client)
    }

    fn reread_every(&self) -> Duration {
        Duration::from_millis(number_var(&self.env, "LIVE_REREAD_MS", DEFAULT_REREAD_MS).max(100))
    }

    /// The alarm: while streams are open, read the job from the store and offer it, so
    /// that a lost notification is only late.
    async fn reread(&self) -> Result<()> {
        let sockets = self.state.get_websockets();
        let Some(job) = sockets
            .iter()
            .find_map(|s| s.deserialize_attachment::<Attachment>().ok().flatten())
        else {
            return Ok(()); // nobody listens: no next alarm
        };
        let store = Store::from_env(&self.env).map_err(|e| e.cause_or_detail().to_owned())?;
        match store.job(None, &job.job).await {
            Ok(Some(stored)) => {
                if let Some(seq) = Position::of_etag(&stored.etag) {
                    self.offer(seq.0, &stored.doc).await;
                }
            }
            // Purged: its streams end, and a reconnect is told 404.
            Ok(None) => {
                for socket in &sockets {
                    let _ = socket.close(Some(1000), Some("the job is gone"));
                }
                return Ok(());
            }
            Err(e) => crate::log::error(
                serde_json::json!({"event": "live_reread_failed", "job_id": job.job,
                                   "cause": e.cause_or_detail()}),
            ),
        }
        self.state.storage().set_alarm(self.reread_every()).await
    }
}

impl DurableObject for Live {
    fn new(state: State, env: Env) -> Self {
        Self {
            state,
            env,
            latest: RefCell::new(Hub::default()),
            keeper: RefCell::new(Keeper::default()),
        }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        match req.path().as_str() {
            "/notify" => {
                let body = req.text().await?;
                match unframe(&body) {
                    Some(Frame::Doc(seq, doc)) => {
                        self.offer(seq, doc).await;
                        Ok(Response::empty()?.with_status(204))
                    }
                    _ => Response::error("not a frame", 400),
                }
            }
            "/text" => self.text(req).await,
            "/subscribe" => self.subscribe(&req).await,
            _ => Response::error("not found", 404),
        }
    }

    async fn alarm(&self) -> Result<Response> {
        self.reread().await?;
        Response::empty()
    }

    async fn websocket_message(
        &self,
        _ws: WebSocket,
        _message: WebSocketIncomingMessage,
    ) -> Result<()> {
        Ok(()) // streams send nothing
    }

    async fn websocket_close(
        &self,
        ws: WebSocket,
        _code: usize,
        _reason: String,
        _was_clean: bool,
    ) -> Result<()> {
        let _ = ws.close(Some(1000), Some("closed"));
        Ok(())
    }

    async fn websocket_error(&self, ws: WebSocket, _error: worker::Error) -> Result<()> {
        let _ = ws.close(Some(1011), Some("error"));
        Ok(())
    }
}

/// The job of a document that ends its stream (`protocol::live::settled`), by id.
pub(crate) fn settled_job(doc: &str) -> Option<String> {
    serde_json::from_str::<Job>(doc)
        .ok()
        .filter(Job::is_settled)
        .map(|job| job.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_reads_back_and_anything_else_is_refused() {
        let text = frame(7, "{\"id\":\"job_1\"}");
        assert_eq!(unframe(&text), Some(Frame::Doc(7, "{\"id\":\"job_1\"}")));
        let piece = Piece {
            n: 2,
            offset: 40,
            attempt_id: "att_1",
            text: "a\nb 😀",
        };
        assert_eq!(unframe(&text_frame(&piece)), Some(Frame::Text(piece)));
        assert_eq!(unframe(CAUGHT_UP), Some(Frame::CaughtUp));
        for bad in [
            "7",
            "x\n{}",
            "-1\n{}",
            "+2 40\nab",
            "+2 40 \nab",
            "+x 40 att\nab",
            "+2\nab",
            "==",
        ] {
            assert_eq!(unframe(bad), None, "{bad:?}");
        }
    }
}
