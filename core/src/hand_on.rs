//! A streaming call's hand-off of its text to its job's hub: the loop that both shells
//! run, paced by [`Pacing`], over the hub port [`HubLine`].
//!
//! The hub port is a channel of messages, not a transport: the call sends a piece (the
//! attempt's text from a code point on), and the hub answers what it has of the
//! attempt's text (and whether a stream watches), or that the attempt may stream no
//! more; between pieces the hub may poke the call ([`HubLine::poked`]). A shell carries the messages
//! on one connection per call ([`HubLink`], [`Connected`]): the Worker on a WebSocket to
//! the job's Durable Object (`edge/src/live/line.rs`), the simulator on its model of
//! one. A connection that drops is opened again, at most [`MAX_OPENS`] times a call, and
//! the hub's answer to the next piece says where to send from.

use crate::host::CallProgress;
use crate::mutant::{self, Mutant};
use crate::pacing::{HubAnswer, Next, Pacing, HAND_OFF_MS};
use futures_channel::mpsc::UnboundedReceiver;
use futures_util::future::{select, Either, FutureExt, LocalBoxFuture};
use futures_util::{Stream, StreamExt};
use onceclick_protocol::chat::ChatStream;
use onceclick_protocol::live::FRAME_CHARS;
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// The hub of one attempt's job, as a call hands text to it.
pub trait HubLine {
    /// Hands `piece`, the attempt's text from code point `sent` on, to the hub: what the
    /// hub answered, or why the piece did not reach it.
    fn send<'a>(
        &'a self,
        sent: u64,
        piece: &'a str,
    ) -> LocalBoxFuture<'a, Result<HubAnswer, String>>;

    /// The last piece went unanswered for [`HAND_OFF_MS`]: a connection that carried it
    /// is taken for dropped (a late answer on it is not waited for).
    fn unanswered(&self) {}

    /// Ready when the hub pokes the call: a stream subscribed to the job, or its
    /// document changed (it may say the attempt ended), so the next piece should go
    /// now. A poke that came while a piece was on its way is kept for the next wait.
    /// Never ready on a connection that cannot be poked.
    fn poked(&self) -> LocalBoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }
}

/// The next poke on a connection's channel of them, for a shell whose [`HubLine::poked`]
/// hears the hub's pokes there: ready at a poke, with those that came meanwhile taken
/// with it (the one piece that follows answers them all); never, once the channel is
/// closed (the connection is gone).
pub async fn next_poke(pokes: &RefCell<UnboundedReceiver<()>>) {
    let poke = std::future::poll_fn(|cx| pokes.borrow_mut().poll_next_unpin(cx));
    if poke.await.is_none() {
        std::future::pending::<()>().await;
    }
    while pokes.borrow_mut().try_recv().is_ok() {}
}

/// The connections a call opens to its hub at most: one, and one again for each that
/// dropped. The bound keeps a call's requests to its hub (each a subrequest of the
/// consumer's invocation) constant in the answer's length, whatever the connection
/// does; past it the call goes on and records its answer, and its streams see the rest
/// of the text in the result.
pub const MAX_OPENS: u32 = 4;

/// A shell's way to open a connection to a call's hub: each piece is then a message on
/// it, answered on it ([`HubLine`]).
pub trait HubLink {
    /// Opens a connection to the hub, or says why it could not.
    fn open(&self) -> LocalBoxFuture<'_, Result<Rc<dyn HubLine + '_>, String>>;
}

/// The hub port over one connection at a time ([`HubLink`]): opened at the first piece,
/// and again at the next piece after a send failed on it (which drops it), at most
/// [`MAX_OPENS`] times.
pub struct Connected<'l> {
    link: &'l dyn HubLink,
    line: RefCell<Option<Rc<dyn HubLine + 'l>>>,
    opens: Cell<u32>,
    news: Option<&'l CallProgress>,
}

impl<'l> Connected<'l> {
    pub fn new(link: &'l dyn HubLink, news: Option<&'l CallProgress>) -> Self {
        Self {
            link,
            line: RefCell::new(None),
            opens: Cell::new(0),
            news,
        }
    }

    /// The connections opened so far.
    pub fn opens(&self) -> u32 {
        self.opens.get()
    }

    async fn line(&self) -> Result<Rc<dyn HubLine + 'l>, String> {
        if let Some(line) = self.line.borrow().clone() {
            return Ok(line);
        }
        if self.opens.get() >= MAX_OPENS {
            return Err(format!(
                "the connection to the hub dropped {MAX_OPENS} times"
            ));
        }
        self.opens.set(self.opens.get() + 1);
        if let Some(news) = self.news {
            news.opened();
        }
        let line = self.link.open().await?;
        *self.line.borrow_mut() = Some(line.clone());
        Ok(line)
    }
}

impl HubLine for Connected<'_> {
    fn unanswered(&self) {
        self.line.borrow_mut().take();
    }

    fn poked(&self) -> LocalBoxFuture<'_, ()> {
        // The connection open now; none is opened to hear a poke.
        let line = self.line.borrow().clone();
        Box::pin(async move {
            match line {
                Some(line) => line.poked().await,
                None => std::future::pending().await,
            }
        })
    }

    fn send<'a>(
        &'a self,
        sent: u64,
        piece: &'a str,
    ) -> LocalBoxFuture<'a, Result<HubAnswer, String>> {
        Box::pin(async move {
            let line = self.line().await?;
            let answer = line.send(sent, piece).await;
            if answer.is_err() {
                // Dropped: the next piece opens another, and the hub says where it stands.
                self.line.borrow_mut().take();
            }
            answer
        })
    }
}

/// How a hand-off ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The body is read and the hub has all of its text: this many code points.
    Whole(u64),
    /// The hub said the attempt may stream no more (the call's news heard it).
    Stopped,
    /// The hand-off gave up (the hub took no more, or failed too often in a row): the
    /// stream's clients see the rest of the text only in the result.
    GaveUp,
}

/// Who is handing on, for the log.
pub struct Handing<'a> {
    pub job_id: &'a str,
    pub attempt_id: &'a str,
    /// Hears each hand-off, and that the attempt ended.
    pub news: Option<&'a CallProgress>,
}

/// Hands the text of `chat` on to `hub` as [`Pacing`] says, waiting on the shell's
/// timers (`sleep`): each piece what the hub
/// lacks, at most one per interval, the last as soon as the body is read. The call reads
/// its body meanwhile, feeding `chat` and saying on `woken` whenever text came; `woken`
/// ends when the body is read. Ends when the body is read and the hub has all of it,
/// when the hub says the attempt has ended, or after too many failed hand-offs in a row
/// (said in the log).
pub async fn hand_on(
    sleep: &dyn Fn(u64) -> LocalBoxFuture<'static, ()>,
    hub: &dyn HubLine,
    who: Handing<'_>,
    chat: &RefCell<ChatStream>,
    woken: &mut (dyn Stream<Item = ()> + Unpin),
) -> Ended {
    let mut pace = Pacing::default();
    loop {
        // Read before the match: the reader feeds `chat` while this waits.
        let chars = chat.borrow().chars();
        let sent = match pace.next(chars, crate::clock::now_ms()) {
            Next::Text => {
                pace.read(woken.next().await.is_some());
                continue;
            }
            Next::ReadOn(ms) => {
                let poked = match mutant::on(Mutant::PokeIgnored) {
                    true => Box::pin(std::future::pending()),
                    false => hub.poked(),
                };
                match read_on(sleep, woken, ms, poked).await {
                    Waited::Poked => {
                        pace.poked();
                        if let Some(news) = who.news {
                            news.poked();
                        }
                    }
                    Waited::Out(reading) => pace.read(reading),
                }
                continue;
            }
            Next::Sleep(ms) => {
                sleep(ms).await;
                continue;
            }
            Next::Done => return Ended::Whole(chars),
            Next::Hand(sent) => sent,
        };
        // What came so far goes in this piece.
        while let Some(Some(())) = woken.next().now_or_never() {}
        // At most a frame's worth: a message stays within what a socket carries, and
        // the rest goes with the next.
        let piece = {
            let chat = chat.borrow();
            let after = onceclick_protocol::live::after_chars(chat.text(), sent);
            let end = after.char_indices().nth(FRAME_CHARS);
            end.map_or(after, |(at, _)| &after[..at]).to_owned()
        };
        if let Some(news) = who.news {
            news.handed_off();
        }
        let why = match select(hub.send(sent, &piece), sleep(HAND_OFF_MS)).await {
            Either::Left((Ok(answer @ (HubAnswer::Have(have) | HubAnswer::Alone(have))), _)) => {
                let alone = matches!(answer, HubAnswer::Alone(_));
                if let (Some(news), true) = (who.news, alone) {
                    news.alone();
                }
                if pace.took(have, alone) && !mutant::on(Mutant::HandOffQuitsAfterFirstPiece) {
                    continue;
                }
                crate::log::error(json!({"event": "text_hand_off_failed",
                    "job_id": who.job_id, "attempt_id": who.attempt_id, "sent": pace.sent(),
                    "cause": "the hub takes no more"}));
                return Ended::GaveUp;
            }
            Either::Left((Ok(HubAnswer::Stop), _)) => {
                if let Some(news) = who.news {
                    news.ended();
                }
                return Ended::Stopped;
            }
            Either::Left((Err(e), _)) => e,
            Either::Right(_) => {
                hub.unanswered();
                format!("the hub did not answer within {HAND_OFF_MS} ms")
            }
        };
        let again = pace.failed();
        let event = match again {
            true => "text_hand_off_retried",
            false => "text_hand_off_failed",
        };
        crate::log::error(json!({"event": event, "job_id": who.job_id,
            "attempt_id": who.attempt_id, "sent": pace.sent(), "tries": pace.tries(),
            "cause": why}));
        if !again {
            return Ended::GaveUp;
        }
    }
}

/// How a wait of [`read_on`] ended.
enum Waited {
    /// The time was out: `true` while the body is still read, `false` if its reading
    /// ended first (the rest of the text goes at once).
    Out(bool),
    /// The hub poked the call first.
    Poked,
}

/// Waits `ms` while the body is read on, or until the hub pokes the call (`poked`).
async fn read_on(
    sleep: &dyn Fn(u64) -> LocalBoxFuture<'static, ()>,
    woken: &mut (dyn Stream<Item = ()> + Unpin),
    ms: u64,
    poked: LocalBoxFuture<'_, ()>,
) -> Waited {
    // A poke that came by the time the interval is out still counts as one.
    let mut timer = select(poked, sleep(ms));
    loop {
        match select(woken.next(), &mut timer).await {
            Either::Left((Some(()), _)) => continue,
            Either::Left((None, _)) => return Waited::Out(false),
            Either::Right((Either::Left(_), _)) => return Waited::Poked,
            Either::Right((Either::Right(_), _)) => return Waited::Out(true),
        }
    }
}
