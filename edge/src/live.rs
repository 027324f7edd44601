//! The job's live hub: a Durable Object per job (`LIVE`, named by the job's id) that
//! holds the job's open streams as hibernatable WebSockets and fans every move out to
//! them.
//!
//! - **Who tells it.** The store, after each batch that moves the job
//!   (`store::Op::moves`), sends the document that the batch read back in its own
//!   transaction, with its change counter (`POST /notify`, body `<seq>\n<doc>`).
//!   The request's and the queue consumer's stores send it (`Store::with_live`), and
//!   the reconciler's (the cron's, or a shard's alarm's), which reads back the jobs its
//!   sweeps moved (`Store::tell_moved`).
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
//!   commit, a failed send) is late by at most that, never lost.
//! - **Kept text never outlives its job.** A hub deletes its storage once it learns
//!   that its job is settled or gone, however it learns it. While storage keeps text,
//!   the same alarm reads the job at least every [`Live::check_every_ms`] (the
//!   retention): so even when every notification is lost, the text goes before the
//!   purge could take the job (a job is purged a retention after it settled). An
//!   `unknown` job's text stays, for its operator: such a job is never purged.
//! - **Bounds.** At most `LIVE_MAX_SUBSCRIBERS` streams per job (429
//!   `too_many_subscribers` beyond). Nothing counts across jobs: a global counter
//!   would be the next hot object.

use crate::error::{ApiResult, AppError};
use crate::keeping::{self, Writes};
use crate::pacing::Taken;
use futures_util::future::LocalBoxFuture;
use onceclick_protocol::chat::MAX_CHARS;
use onceclick_protocol::live::{EndChunk, Hub, Keeper, Piece, Place, Position, FRAME_CHARS};
use onceclick_protocol::Job;
use std::cell::{Cell, RefCell};
use std::time::Duration;
use wasm_bindgen::{JsCast, JsValue};
use worker::js_sys::{Function, Object, Promise, Reflect};
use worker::wasm_bindgen_futures::JsFuture;
use worker::{
    durable_object, DurableObject, Env, ObjectNamespace, Request, Response, Result, State,
    WebSocket, WebSocketIncomingMessage, WebSocketPair,
};

/// The storage key of the job's id, written with its first kept text.
const JOB_KEY: &str = "job";

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
        fault: Option<&str>,
    ) -> std::result::Result<Taken, String> {
        let show = |e: JsValue| format!("{e:?}");
        let init = Object::new();
        Reflect::set(&init, &"method".into(), &"POST".into()).map_err(show)?;
        Reflect::set(&init, &"body".into(), &text.into()).map_err(show)?;
        let mut path = format!("/text?attempt={attempt_id}&n={n}&offset={offset}");
        if let Some(fault) = fault {
            path.push_str("&fault=");
            path.push_str(fault);
        }
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
    /// The newest document heard of settles the job.
    settled: Cell<bool>,
    /// The job's id is in storage beside the text ([`JOB_KEY`]).
    job_kept: Cell<bool>,
}

/// What a stream's socket carries for the hub's alarm: the job it follows.
#[derive(serde::Serialize, serde::Deserialize)]
struct Attachment {
    job: String,
}

impl Live {
    /// Takes change `seq` if it is newer than any heard of, and sends it to every
    /// stream; drops it otherwise. The job's id when that document settles the job and
    /// the hub's storage is to be emptied ([`Live::delete_kept`]).
    async fn offer(&self, seq: u64, doc: &str) -> Option<String> {
        if !self.latest.borrow_mut().offer(seq, doc) {
            return None;
        }
        self.broadcast(&frame(seq, doc));
        self.write(Writes::after_document()).await;
        // The result is stored, or the job ended without one: its text is done with
        // (`Hub::offer` dropped it from memory). Storage holds nothing else, so all of
        // it goes, whatever this instance knows of it.
        let settled = settled_job(doc);
        self.settled.set(settled.is_some());
        settled.filter(|_| self.keeper.borrow_mut().settle())
    }

    /// Empties the hub's storage: every chunk of text it kept, and its alarm too (since
    /// the 2026-02-24 compatibility date: a settled job's streams close, and the next
    /// stream to subscribe sets it again). `by` says what told the hub (`notify`, or its
    /// own `alarm`), `job` what it learnt (`settled`, or `gone`: purged).
    async fn delete_kept(
        storage: worker::Storage,
        job_id: &str,
        by: &str,
        job: &str,
    ) -> Result<()> {
        let deleted = storage.delete_all().await;
        match &deleted {
            Ok(()) => crate::log::info(serde_json::json!({"event": "live_text_deleted",
                "job_id": job_id, "by": by, "job": job})),
            Err(e) => crate::log::error(serde_json::json!({"event": "live_text_unkept",
                "job_id": job_id, "cause": e.to_string()})),
        }
        deleted
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
        let query = crate::http::query(&req, &["attempt", "n", "offset", "fault"])
            .map_err(|e| e.detail.clone())?;
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
            keeping::take_text(&mut hub, n, &attempt, offset.0, &text).map(|p| text_frames(&p))
        };
        match taken {
            Ok(frames) => frames.iter().for_each(|frame| self.broadcast(frame)),
            Err(answer) => {
                return Ok(Response::ok(have(&self.latest.borrow()))?.with_status(answer.status()))
            }
        }
        self.write(Writes::after_text(n)).await;
        Response::ok(have(&self.latest.borrow()))
    }

    /// Writes what `writes` gives, step by step (`keeping.rs`). (Each step's chunks are
    /// taken in one borrow, written after it.)
    async fn write(&self, mut writes: Writes) {
        loop {
            let chunks = writes.next(&mut self.keeper.borrow_mut(), &self.latest.borrow());
            let Some(chunks) = chunks else { return };
            for chunk in chunks {
                self.keep(chunk).await;
            }
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
        // The job's id beside the text, once per instance: an alarm that wakes a cold
        // instance with no stream may not be told its own name, and must still find the
        // job it reads.
        let storage = self.state.storage();
        if !self.job_kept.get() {
            if let Some(job) = self.job_id(&[]) {
                self.job_kept
                    .set(storage.put_raw(JOB_KEY, job).await.is_ok());
            }
        }
        match storage.put_raw(&chunk.key, chunk.value).await {
            Ok(()) => {
                self.keeper.borrow_mut().wrote(chunk.n, chunk.chars);
                crate::log::info(serde_json::json!({"event": "live_text_kept",
                    "attempt_id": attempt, "key": chunk.key}));
                self.arm(self.check_every_ms()).await;
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
        // Sooner than a check of kept text that may be set (a retention away).
        let storage = self.state.storage();
        let reread = self.reread_every();
        if sooner(storage.get_alarm().await?, crate::clock::now_ms(), reread) {
            storage.set_alarm(reread as i64).await?;
        }
        Response::from_websocket(pair.client)
    }

    /// How often a hub with streams open re-reads its job, in ms.
    fn reread_every(&self) -> u64 {
        number_var(&self.env, "LIVE_REREAD_MS", DEFAULT_REREAD_MS).max(100)
    }

    /// The longest a hub that keeps text goes without reading its job, in ms: the
    /// retention (`JOB_RETENTION_HOURS`, as the purge counts it), or
    /// `LIVE_KEPT_CHECK_MS` if that is shorter. A job settles at the latest a retention
    /// before its purge, so the hub has read it settled, and deleted the text, by then.
    fn check_every_ms(&self) -> u64 {
        let hours = self
            .env
            .var("JOB_RETENTION_HOURS")
            .ok()
            .and_then(|v| v.to_string().parse().ok());
        let retention = (crate::retention::hours(hours) * 3_600_000.0) as u64;
        number_var(&self.env, "LIVE_KEPT_CHECK_MS", retention)
            .min(retention)
            .max(100)
    }

    /// Sets the alarm `in_ms` from now, unless it is set sooner. A failure is said in
    /// the log: the next write of text, or the next stream, tries again.
    async fn arm(&self, in_ms: u64) {
        let storage = self.state.storage();
        let set = storage.get_alarm().await.ok().flatten();
        if sooner(set, crate::clock::now_ms(), in_ms) {
            if let Err(e) = storage.set_alarm(in_ms as i64).await {
                crate::log::error(serde_json::json!({"event": "live_alarm_failed",
                    "cause": e.to_string()}));
            }
        }
    }

    /// Whether the hub's storage keeps anything (text: it keeps nothing else). Asked of
    /// the storage itself: after a restart, memory knows nothing of it.
    async fn keeps(&self) -> Result<bool> {
        // `list({limit: 1})` on the binding itself: `worker`'s `ListOptions` would bring
        // its serializer into the Worker.
        let storage = self.state.storage();
        let raw: &JsValue = storage.as_raw().unchecked_ref();
        let options = Object::new();
        Reflect::set(&options, &"limit".into(), &1.into())?;
        let list: Function = Reflect::get(raw, &"list".into())?.dyn_into()?;
        let found: Promise = list.call1(raw, &options)?.dyn_into()?;
        let found: worker::js_sys::Map = JsFuture::from(found).await?.dyn_into()?;
        Ok(found.size() > 0)
    }

    /// The job this hub serves: its own name (the hubs are named by job id), or a
    /// stream's.
    fn job_id(&self, sockets: &[WebSocket]) -> Option<String> {
        self.state.id().name().or_else(|| {
            sockets
                .iter()
                .find_map(|s| s.deserialize_attachment::<Attachment>().ok().flatten())
                .map(|a| a.job)
        })
    }

    /// [`Live::job_id`], or the id kept beside the text ([`JOB_KEY`]).
    async fn job_of(&self, sockets: &[WebSocket]) -> Option<String> {
        match self.job_id(sockets) {
            Some(job) => Some(job),
            None => self
                .state
                .storage()
                .get::<String>(JOB_KEY)
                .await
                .ok()
                .flatten(),
        }
    }

    /// The hub's one alarm, for two needs: while streams are open, a re-read every
    /// `LIVE_REREAD_MS`, so that a lost notification is only late; and while storage
    /// keeps text, a read at least every [`Live::check_every_ms`], so that the text never
    /// outlives its job even when every notification is lost. Each alarm reads the job
    /// (offered as a notification is); the text goes once the job is settled or gone,
    /// and stays while it is not (an `unknown` attempt's text is what an operator
    /// resolves it with, and such a job is never purged). The next alarm is the sooner
    /// of the needs that remain ([`next_alarm_in`]).
    async fn reread(&self) -> Result<()> {
        let sockets = self.state.get_websockets();
        // Storage is asked only when no stream needs the alarm anyway. A failure to ask
        // counts as kept: the alarm comes again (the runtime's own retries of a failed
        // alarm run out).
        let kept = sockets.is_empty()
            && self.keeps().await.unwrap_or_else(|e| {
                crate::log::error(serde_json::json!({"event": "live_reread_failed",
                    "cause": e.to_string()}));
                true
            });
        if sockets.is_empty() && !kept {
            return Ok(()); // nobody listens, nothing kept: no next alarm
        }
        let Some(job) = self.job_of(&sockets).await else {
            crate::log::error(serde_json::json!({"event": "live_reread_failed",
                "cause": "a live hub that does not know its job's id"}));
            return self
                .state
                .storage()
                .set_alarm(self.check_every_ms() as i64)
                .await;
        };
        let read = match crate::places::from_env(&self.env) {
            Ok(store) => store.job(None, &job).await,
            Err(e) => Err(e),
        };
        let failed = match read {
            Ok(Some(stored)) => {
                let mut due = false;
                if let Some(seq) = Position::of_etag(&stored.etag) {
                    due = self.offer(seq.0, &stored.doc).await.is_some();
                }
                // Settled: emptied now (a delete that failed before is done again); a
                // delete that fails now is tried again at the next re-read.
                (due || (kept && self.settled.get()))
                    && Self::delete_kept(self.state.storage(), &job, "alarm", "settled")
                        .await
                        .is_err()
            }
            // Purged: its streams end (a reconnect is told 404), and what it kept goes.
            Ok(None) => {
                for socket in &sockets {
                    let _ = socket.close(Some(1000), Some("the job is gone"));
                }
                *self.latest.borrow_mut() = Hub::default();
                if self.keeper.borrow_mut().settle() || kept {
                    let deleted = Self::delete_kept(self.state.storage(), &job, "alarm", "gone");
                    if deleted.await.is_err() {
                        return self
                            .state
                            .storage()
                            .set_alarm(self.reread_every() as i64)
                            .await;
                    }
                }
                return Ok(());
            }
            Err(e) => {
                crate::log::error(serde_json::json!({"event": "live_reread_failed",
                    "job_id": job, "cause": e.cause_or_detail()}));
                true
            }
        };
        // Decided after the last await: a stream that subscribed meanwhile counts.
        let keeps = !self.settled.get() && (kept || !sockets.is_empty());
        let streams = !self.state.get_websockets().is_empty();
        if kept && keeps {
            crate::log::info(serde_json::json!({"event": "live_text_checked", "job_id": job}));
        }
        let next = next_alarm_in(
            streams || failed,
            keeps,
            self.reread_every(),
            self.check_every_ms(),
        );
        match next {
            Some(in_ms) => self.state.storage().set_alarm(in_ms as i64).await,
            None => Ok(()),
        }
    }
}

impl DurableObject for Live {
    fn new(state: State, env: Env) -> Self {
        Self {
            state,
            env,
            latest: RefCell::new(Hub::default()),
            keeper: RefCell::new(Keeper::default()),
            settled: Cell::new(false),
            job_kept: Cell::new(false),
        }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        match req.path().as_str() {
            "/notify" => {
                let body = req.text().await?;
                match unframe(&body) {
                    Some(Frame::Doc(seq, doc)) => {
                        if let Some(job_id) = self.offer(seq, doc).await {
                            // Not awaited: nobody's answer waits for it. A delete that
                            // fails leaves the text, said in the log, until the hub's
                            // next alarm: nothing is sent of it meanwhile, since the hub
                            // refuses a settled job's text and a settled job's stream
                            // subscribes to no hub.
                            let storage = self.state.storage();
                            worker::wasm_bindgen_futures::spawn_local(async move {
                                let _ =
                                    Self::delete_kept(storage, &job_id, "notify", "settled").await;
                            });
                        }
                        Ok(Response::empty()?.with_status(204))
                    }
                    _ => Response::error("not a frame", 400),
                }
            }
            "/text" => {
                // Test-only (`fault.rs`, `hand_off`): refuse the piece, or answer late.
                let fault = match crate::fault_header::allowed(&self.env) {
                    true => crate::http::query(&req, &["attempt", "n", "offset", "fault"])
                        .ok()
                        .and_then(|q| crate::http::param(&q, "fault").map(str::to_owned)),
                    false => None,
                };
                if fault.as_deref() == Some("before") {
                    return Response::error("injected fault: the hub failed to take the text", 503);
                }
                let answer = self.text(req).await;
                if fault.as_deref() == Some("after") {
                    let late = crate::pacing::HAND_OFF_MS - 100;
                    worker::Delay::from(Duration::from_millis(late)).await;
                }
                answer
            }
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

/// Whether an alarm set for `set` (ms since the epoch; `None`: none) must be brought
/// forward to `in_ms` from `now`. One alarm serves both the re-read and the check of
/// kept text: neither may put off the other.
fn sooner(set: Option<i64>, now: f64, in_ms: u64) -> bool {
    set.is_none_or(|at| at as f64 > now + in_ms as f64)
}

/// When the hub's next alarm comes, in ms from now: every `reread_ms` while streams
/// are open (or after a read that failed), at most `check_ms` away while storage keeps
/// text, the sooner of the two when both; none when neither.
fn next_alarm_in(streams: bool, keeps: bool, reread_ms: u64, check_ms: u64) -> Option<u64> {
    [streams.then_some(reread_ms), keeps.then_some(check_ms)]
        .into_iter()
        .flatten()
        .min()
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

    // Issue 42, item 3: one alarm serves the re-read of open streams and the check of
    // kept text; neither need starves the other.
    #[test]
    fn the_next_alarm_is_the_sooner_need_and_none_without_one() {
        let (reread, check) = (5_000, 168 * 3_600_000);
        assert_eq!(next_alarm_in(true, true, reread, check), Some(reread));
        assert_eq!(next_alarm_in(true, false, reread, check), Some(reread));
        // The last stream gone, the text still kept: the check, not nothing.
        assert_eq!(next_alarm_in(false, true, reread, check), Some(check));
        assert_eq!(next_alarm_in(false, false, reread, check), None);
        // A check period shorter than the re-read (a test Worker's) still wins.
        assert_eq!(next_alarm_in(true, true, 1_000, 300), Some(300));
    }

    #[test]
    fn an_alarm_is_brought_forward_never_put_off() {
        let now = 1_000_000.0;
        assert!(sooner(None, now, 5_000), "none set: set it");
        // A check a week away does not put off a stream's re-read …
        assert!(sooner(Some(1_000_000 + 604_800_000), now, 5_000));
        // … and a re-read due soon is not put off by a check.
        assert!(!sooner(Some(1_003_000), now, 604_800_000));
        assert!(
            !sooner(Some(1_005_000), now, 5_000),
            "as soon: left as it is"
        );
    }

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
