//! One stream's side of its hub sockets: the listeners fill an [`Inbox`] (and keep its
//! bound), and [`Relay::next`] turns what they heard into the stream's events, one
//! chunk each time the stream is read.

use super::{event, Held};
use crate::error::{ApiResult, AppError};
use crate::live::{self, Frame};
use futures_util::future::{poll_fn, select, Either};
use onceclick_protocol::chat::MAX_CHARS;
use onceclick_protocol::live::Follower;
use onceclick_protocol::Job;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::task::{Poll, Waker};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::JsCast;
use worker::WebSocket;

/// A comment at least this often, so that proxies keep the connection open and a
/// client can tell a quiet stream from a dead one.
const KEEP_ALIVE_MS: u64 = 15_000;

/// The bytes of catch-up frames that may wait, apart from the live ones: a hub's
/// catch-up is the text the client lacks, sent at once, which a bound on live frames
/// would cut at every reconnect. One attempt's whole text (`MAX_CHARS` code points of
/// up to four bytes) fits; a stream whose jobs together lack more than that is cut,
/// and resumes from its place.
const MAX_CATCH_UP_BYTES: u64 = 4 * MAX_CHARS;

const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

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

/// A hub socket's listener.
pub(crate) type Listener = Closure<dyn FnMut(worker::web_sys::MessageEvent)>;

/// Puts listeners on a hub socket: `on_close` hears its error too.
pub(crate) fn listen(socket: &WebSocket, on_message: &Listener, on_close: &Listener) {
    let raw: &worker::web_sys::WebSocket = socket.as_ref();
    raw.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    raw.set_onclose(Some(on_close.as_ref().unchecked_ref()));
    raw.set_onerror(Some(on_close.as_ref().unchecked_ref()));
}

/// Takes the listeners off a hub socket.
pub(crate) fn unlisten(socket: &WebSocket) {
    let raw: &worker::web_sys::WebSocket = socket.as_ref();
    raw.set_onmessage(None);
    raw.set_onclose(None);
    raw.set_onerror(None);
}

/// One job's hub socket, with the place it was last sent.
struct Watch {
    socket: WebSocket,
    /// The listeners, kept alive as long as the socket is.
    _listeners: [Listener; 2],
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

    /// The event a frame from this job's hub makes, if any.
    fn relay(&mut self, frame: Frame<'_>) -> Step {
        let out = match frame {
            Frame::Doc(seq, doc) => {
                // The stream's own read is the newest it knows until the hub sends a
                // newer change: an older one (a hub that missed a notification, a
                // settled document it kept) is never sent, nor ends the stream.
                if self.held.as_ref().is_some_and(|(held, _, _)| seq <= *held) {
                    return Step::Skip;
                }
                let Ok(job) = serde_json::from_str::<Job>(doc) else {
                    return Step::Skip;
                };
                self.held = None;
                self.doc(seq, &job, doc)
            }
            Frame::CaughtUp => {
                let Some((seq, job, doc)) = self.held.take() else {
                    return Step::Skip;
                };
                self.doc(seq, &job, &doc)
            }
            Frame::Text(piece) => match self.sent.take_text(&piece) {
                Ok(Some((offset, text))) => {
                    let data = serde_json::json!({"job_id": self.job,
                        "attempt_id": piece.attempt_id, "offset": offset, "text": text});
                    Some(event(self.sent.place(), "delta", &data.to_string()))
                }
                Ok(None) => None,
                // A piece past what the client has: the hub's text is contiguous, so
                // this should not happen; the stream ends, and the client resumes from
                // its place, where the hub sends what it lacks.
                Err(_) => return Step::End,
            },
        };
        match out {
            Some(out) => Step::Send(out),
            None => Step::Skip,
        }
    }

    fn close(&mut self, why: &str) {
        unlisten(&self.socket);
        let _ = self.socket.close(Some(1000), Some(why));
    }
}

/// One stream's side of its hub sockets.
pub(super) struct Relay {
    watches: Vec<Watch>,
    /// What the hub sockets delivered, not yet read by the stream, over all its jobs.
    /// It also holds the stream's deadline.
    inbox: Rc<Inbox>,
    /// When the stream last wrote something: the keep-alive counts from there.
    wrote_ms: f64,
}

impl Relay {
    pub(super) fn new(deadline_ms: f64, max_bytes: u64) -> Self {
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
    pub(super) fn follow(
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
        listen(&socket, &on_message, &on_close);
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

    /// Whether any of the stream's jobs is still followed.
    pub(super) fn serves(&self) -> bool {
        self.watches.iter().any(|w| !w.done)
    }

    /// A client that stops reading never pulls the stream again: its hub sockets close
    /// at the deadline all the same.
    pub(super) fn cut_at_deadline(&self) {
        let deadline_ms = self.inbox.deadline_ms;
        let inbox = Rc::downgrade(&self.inbox);
        worker::wasm_bindgen_futures::spawn_local(async move {
            let left = (deadline_ms - crate::clock::now_ms()).max(0.0) as u64;
            worker::Delay::from(std::time::Duration::from_millis(left)).await;
            if let Some(inbox) = inbox.upgrade() {
                inbox.cut("the stream's time is up");
            }
        });
    }

    /// The stream's next chunk: a newer change, a keep-alive comment, or the end.
    pub(super) async fn next(mut self) -> Option<(Result<Vec<u8>, worker::Error>, Self)> {
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
            let out = match select(next, tick).await {
                Either::Left(((index, heard), _)) => match self.relay(index, heard) {
                    Step::Send(out) => out.into_bytes(),
                    Step::Skip => continue,
                    Step::End => return None,
                },
                Either::Right(_) if ends => return None, // the stream's time is up
                Either::Right(_) => KEEP_ALIVE.to_vec(),
            };
            self.wrote_ms = crate::clock::now_ms();
            return Some((Ok(out), self));
        }
    }

    /// What `heard`, from the hub socket of the job at `index`, makes of the stream.
    fn relay(&mut self, index: usize, heard: Heard) -> Step {
        let text = match heard {
            Heard::Frame(text) => text,
            Heard::Cut => return Step::End,
            // A hub gone while its job is still moving: the client resumes.
            Heard::End if !self.watches.get(index).is_some_and(|w| w.done) => return Step::End,
            Heard::End => return Step::Skip,
        };
        let Some(frame) = live::unframe(&text) else {
            return Step::Skip;
        };
        match self.watches.get_mut(index) {
            Some(watch) if !watch.done => watch.relay(frame),
            _ => Step::Skip,
        }
    }
}

/// What one thing a hub socket delivered makes of the stream.
enum Step {
    /// An event to send.
    Send(String),
    /// Nothing to send: read on.
    Skip,
    /// The stream ends; the client resumes from its place.
    End,
}

impl Drop for Relay {
    fn drop(&mut self) {
        for watch in self.watches.iter_mut().filter(|w| !w.done) {
            watch.close("stream ended");
        }
    }
}
