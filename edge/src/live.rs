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

mod alarm;
mod frame;
mod hubs;
mod kept;
mod line;

pub(crate) use frame::{unframe, Frame, CAUGHT_UP};
pub(crate) use hubs::{notifier, Hubs};
pub(crate) use line::SocketLink;

use crate::keeping::{self, Writes};
use alarm::sooner;
use frame::{frame, text_frames};
use onceclick_protocol::live::{Hub, Keeper, Piece, Place};
use onceclick_protocol::Job;
use std::cell::{Cell, RefCell};
use std::time::Duration;
use worker::{
    durable_object, DurableObject, Env, Request, Response, Result, State, WebSocket,
    WebSocketIncomingMessage, WebSocketPair,
};

/// The storage key of the job's id, written with its first kept text.
const JOB_KEY: &str = "job";

/// The tag of a stream's socket, and of a streaming call's ([`line::HAND`]): the fan-out,
/// the subscriber limit and the alarm's re-read count only the streams'.
const STREAM: &str = "stream";
const CALL: &str = "call";

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
        // It may say an attempt ended: a call that hands on at the slow pace hears it
        // with its next piece, now.
        self.poke();
        self.write(Writes::after_document()).await;
        // The result is stored, or the job ended without one: its text is done with
        // (`Hub::offer` dropped it from memory). Storage holds nothing else, so all of
        // it goes, whatever this instance knows of it.
        let settled = settled_job(doc);
        self.settled.set(settled.is_some());
        settled.filter(|_| self.keeper.borrow_mut().settle())
    }

    fn broadcast(&self, text: &str) {
        Self::send_all(&self.state.get_websockets_with_tag(STREAM), text);
    }

    /// Tells every streaming call on the hub to hand its text on now (`line::POKE`).
    fn poke(&self) {
        Self::send_all(&self.state.get_websockets_with_tag(CALL), line::POKE);
    }

    fn send_all(sockets: &[WebSocket], text: &str) {
        for socket in sockets {
            // A socket that is closing takes nothing; its stream or call has ended.
            let _ = socket.send_with_str(text);
        }
    }

    /// A piece of an attempt's text, on its call's connection ([`line::HAND`]): taken
    /// and sent to every stream, or refused. The code points the hub has of the
    /// attempt's text (send from there), or `None` when the attempt has ended.
    async fn take(&self, piece: &Piece<'_>) -> Result<Option<u64>> {
        self.load().await?;
        let taken = {
            let mut hub = self.latest.borrow_mut();
            let (n, id) = (piece.n, piece.attempt_id);
            keeping::take_text(&mut hub, n, id, piece.offset, piece.text).map(|p| text_frames(&p))
        };
        match taken {
            Ok(frames) => frames.iter().for_each(|frame| self.broadcast(frame)),
            Err(keeping::Answer::Ended) => return Ok(None),
            Err(_) => return Ok(Some(self.latest.borrow().chars(piece.n))),
        }
        self.write(Writes::after_text(piece.n)).await;
        Ok(Some(self.latest.borrow().chars(piece.n)))
    }

    /// A call's message: a piece of text (`line.rs`), answered on the same socket. A
    /// message that is none, or a hub that cannot read its storage, closes the socket:
    /// the call opens another and sends from where the hub stands.
    async fn hand(&self, ws: &WebSocket, message: &str) -> Result<()> {
        // Test-only (`fault.rs`, `hand_off`, `hub_reset`): a first line `!<fault>`.
        let (fault, message) = match message.strip_prefix('!').and_then(|m| m.split_once('\n')) {
            Some((fault, rest)) if crate::fault_header::allowed(&self.env) => (fault, rest),
            _ => ("", message),
        };
        let Some(Frame::Text(piece)) = unframe(message) else {
            return ws.close(Some(1008), Some("not a piece of text"));
        };
        match fault {
            "cut" => return ws.close(Some(1011), Some("injected fault: the connection is cut")),
            // What an eviction loses: memory. Storage is read back by `take`.
            "reset" => {
                *self.latest.borrow_mut() = Hub::default();
                *self.keeper.borrow_mut() = Keeper::default();
                self.job_kept.set(false);
            }
            _ => {}
        }
        let have = match self.take(&piece).await {
            Ok(have) => have,
            Err(e) => {
                crate::log::error(serde_json::json!({"event": "live_text_refused",
                    "attempt_id": piece.attempt_id, "cause": e.to_string()}));
                return ws.close(Some(1011), Some("the hub could not read its storage"));
            }
        };
        if fault == "late" {
            let late = crate::pacing::HAND_OFF_MS - 100;
            worker::Delay::from(Duration::from_millis(late)).await;
        }
        // No stream watches: the call may hand on at its slower pace until a poke.
        if have.is_some() && self.state.get_websockets_with_tag(STREAM).is_empty() {
            let _ = ws.send_with_str(line::ALONE);
        }
        let have = have.map_or("stop".to_owned(), |have| have.to_string());
        // A call that has gone (stopped, or its invocation ended) takes nothing.
        let _ = ws.send_with_str(format!("{} {have}", piece.offset));
        Ok(())
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
        if self.state.get_websockets_with_tag(STREAM).len() as u64 >= max {
            return Response::error("too many subscribers", 429);
        }
        self.load().await?;
        // From here to the catch-up nothing awaits: the socket gets each later change
        // and piece from `offer` and `text`, and what came before from here.
        let pair = WebSocketPair::new()?;
        self.state
            .accept_websocket_with_tags(&pair.server, &[STREAM]);
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
        // A call handing on at the slow pace sends the rest now, then at the watched one.
        self.poke();
        // Sooner than a check of kept text that may be set (a retention away).
        let storage = self.state.storage();
        let reread = self.reread_every();
        if sooner(storage.get_alarm().await?, crate::clock::now_ms(), reread) {
            storage.set_alarm(reread as i64).await?;
        }
        Response::from_websocket(pair.client)
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
            line::HAND => {
                let pair = WebSocketPair::new()?;
                self.state.accept_websocket_with_tags(&pair.server, &[CALL]);
                Response::from_websocket(pair.client)
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
        ws: WebSocket,
        message: WebSocketIncomingMessage,
    ) -> Result<()> {
        // Streams (the Worker's relays) send nothing; a call sends its text.
        match message {
            WebSocketIncomingMessage::String(m) => self.hand(&ws, &m).await,
            _ => Ok(()),
        }
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
