//! The world as the core sees it: the narrow interface between the Worker's own
//! decisions (the handlers' `decide` functions, the dispatcher, the reconciler, the
//! store's calls) and the platform they run on. Two shells implement it: the Worker
//! (`worker_host.rs`, workers-rs), and the simulator (`sim/`, natively). The store's own
//! seam is `store::route::Places` (the places a batch runs in), and the clock's and the
//! log's are `clock.rs` and `log.rs`.

use crate::message::Dispatch;
use crate::outcome::CallOutcome;
use futures_util::future::LocalBoxFuture;
use onceclick_protocol::contract::{Kind, ProviderConfig};
use serde_json::{json, Value};

/// Sends `message`; false (and a line in the log) if the queue refused it.
pub fn send(host: &dyn Host, message: Dispatch) -> LocalBoxFuture<'_, bool> {
    Box::pin(async move {
        let attempt_id = message.attempt_id.clone();
        let sent = host.enqueue(message).await;
        if let Err(cause) = &sent {
            crate::log::error(
                json!({"event": "enqueue_failed", "attempt_id": attempt_id, "cause": cause}),
            );
        }
        sent.is_ok()
    })
}

/// One provider call, as the dispatcher makes it.
pub struct ProviderCall<'a> {
    pub provider: &'a ProviderConfig,
    /// The headers the call carries beyond its body's: the key, and the provider's
    /// extra headers, secrets read (`providers::headers`).
    pub headers: &'a [(String, String)],
    pub kind: &'static Kind,
    pub input: &'a Value,
    /// The attempt: the call's `Idempotency-Key`.
    pub attempt_id: &'a str,
    /// The attempt's job and its `n`, where its streamed text goes as it comes (none
    /// for a certification's calls).
    pub job: Option<(&'a str, u32)>,
    /// Where the call tells its dispatcher what it hears while it runs (none for a
    /// certification's calls).
    pub news: Option<&'a CallProgress>,
    /// Test-only (`fault.rs`): what the job's hub does to the call's connection: `cut`
    /// it or `reset` its memory at the first piece past the first, or answer each piece
    /// `late`; or `off`: the call hands its text to no hub.
    pub hand_off_fault: Option<&'static str>,
}

/// What a running call tells the dispatcher that waits on it (`dispatch::unless_stopped`):
/// how much streamed text it has read and when its first came (a hedge is only for a
/// call still silent, `dispatch::run_claimed`), and that the job's hub refused its text
/// because the attempt ended, so that the dispatcher looks at the store at once rather
/// than at its next tick.
#[derive(Default)]
pub struct CallProgress {
    chars: std::cell::Cell<u64>,
    first_text_at: std::cell::Cell<Option<f64>>,
    hand_offs: std::cell::Cell<u32>,
    opens: std::cell::Cell<u32>,
    alone: std::cell::Cell<u32>,
    pokes: std::cell::Cell<u32>,
    ended: std::cell::Cell<bool>,
    waker: std::cell::RefCell<Option<std::task::Waker>>,
}

impl CallProgress {
    /// The call has read `chars` code points of streamed text so far; the first time
    /// there are any, that is the time of its first text.
    pub fn read(&self, chars: u64) {
        self.chars.set(chars);
        if chars > 0 && self.first_text_at.get().is_none() {
            self.first_text_at.set(Some(crate::clock::now_ms()));
        }
    }

    /// When (the clock's ms) the call read its first streamed text, if it has.
    pub fn first_text_at(&self) -> Option<f64> {
        self.first_text_at.get()
    }

    /// The call sends a piece of its text to the job's hub.
    pub fn handed_off(&self) {
        self.hand_offs.set(self.hand_offs.get() + 1);
    }

    /// The hub answered a piece saying no stream watches the job (`HubAnswer::Alone`).
    pub fn alone(&self) {
        self.alone.set(self.alone.get() + 1);
    }

    /// The hub poked the call while it waited to hand on (`HubLine::poked`).
    pub fn poked(&self) {
        self.pokes.set(self.pokes.get() + 1);
    }

    /// The pieces the hub answered alone, and the pokes that ended a wait.
    pub fn alone_and_pokes(&self) -> (u32, u32) {
        (self.alone.get(), self.pokes.get())
    }

    /// The call opens a connection to the job's hub (`hand_on::Connected`).
    pub fn opened(&self) {
        self.opens.set(self.opens.get() + 1);
    }

    /// The connections the call has opened to the job's hub: its requests to the hub.
    pub fn opens(&self) -> u32 {
        self.opens.get()
    }

    /// The pieces of its text the call has sent to the job's hub (messages on its
    /// connections).
    pub fn hand_offs(&self) -> u32 {
        self.hand_offs.get()
    }

    /// The code points of streamed text the call has read: paid for, and dropped with
    /// the call if it is stopped.
    pub fn chars(&self) -> u64 {
        self.chars.get()
    }

    /// The job's hub says the attempt ended (its document says so); wakes whoever waits
    /// in [`CallProgress::heard`].
    pub fn ended(&self) {
        self.ended.set(true);
        let waker = self.waker.take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Ready once the hub has said the attempt ended (at once if it has already). One
    /// task waits on it: the call's dispatcher.
    pub fn heard(&self) -> impl std::future::Future<Output = ()> + '_ {
        futures_util::future::poll_fn(move |cx| {
            if self.ended.get() {
                std::task::Poll::Ready(())
            } else {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                std::task::Poll::Pending
            }
        })
    }
}

/// What the core asks of its platform.
pub trait Host {
    /// The core's configuration, typed (`config.rs`): the vars the decisions read (the
    /// core reads no var by name). A shell reads it once, with `Config::read`, and keeps
    /// it (the Worker per isolate, the simulator per world).
    fn config(&self) -> std::rc::Rc<crate::config::Config>;
    /// A secret (a provider's API key), if set.
    fn secret(&self, name: &str) -> Option<String>;
    /// Sends a dispatch message to the queue; the error's text if the queue refused it.
    fn enqueue(&self, message: Dispatch) -> LocalBoxFuture<'_, Result<(), String>>;
    /// Sends a dispatch message once the response is on its way (`wait_until`): lost,
    /// with everything else in flight, if the isolate dies first.
    fn enqueue_after_response(&self, message: Dispatch);
    /// Calls a provider, within its `timeout_ms`.
    fn call<'a>(&'a self, call: ProviderCall<'a>) -> LocalBoxFuture<'a, CallOutcome>;
    /// A timer.
    fn sleep(&self, ms: u64) -> LocalBoxFuture<'static, ()>;
    /// Counts a create's outcome for the figures outside the store (Analytics Engine).
    fn count_create(&self, owner: &str, event: &str, kind: &str, provider: &str);
    /// Counts a provider call's outcome and time, likewise.
    fn count_call(&self, event: &str, kind: &str, provider: &str, ms: f64);
}

/// Where a moved job's document goes: the job's live streams (`live.rs`). The store
/// calls it after each move it commits, with the document its batch read back.
pub trait Notify {
    /// Tells the streams of `job_id` that the job is now at change `seq`, with `doc`
    /// as `GET /v1/jobs/{id}` would answer it. The error's text if it was not sent.
    fn notify<'a>(
        &'a self,
        job_id: &'a str,
        seq: u64,
        doc: &'a str,
    ) -> LocalBoxFuture<'a, Result<(), String>>;
}
