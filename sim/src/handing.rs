//! A streaming call's hand-off of its text to its job's hub: the core's own loop
//! (`hand_on.rs`), paced by its `Pacing` on the executor's timers, over the core's
//! connection (`hand_on::Connected`), each piece a message on the model's connection and
//! taken by the model's hub (`live/text.rs`), which answers whether a stream watches
//! and pokes the connection when one subscribes or a document comes. The call reads its
//! body meanwhile and says on `woken` whenever text came; it answers once both are done.

use crate::live::{CallSide, Live};
use futures_channel::mpsc::UnboundedReceiver;
use futures_util::future::LocalBoxFuture;
use futures_util::{Stream, StreamExt};
use onceclick_core::hand_on::{self, Connected, Ended, Handing, HubLine, HubLink};
use onceclick_core::host::{Host, ProviderCall};
use onceclick_core::pacing::HubAnswer;
use onceclick_protocol::chat::ChatStream;
use std::cell::{Cell, RefCell};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// Hands the text of `chat` on to the hub of `call`'s job, as the Worker's call does.
/// Once the body is read and the hub has all of it, the hub must have been handed all
/// the text read.
pub(crate) async fn hand_on(
    host: &dyn Host,
    live: &Live,
    call: &ProviderCall<'_>,
    whole: &str,
    chat: &RefCell<ChatStream>,
    woken: UnboundedReceiver<()>,
) {
    let Some((job_id, n)) = call.job else { return };
    let link = ModelLink {
        live,
        job_id,
        n,
        attempt_id: call.attempt_id,
        whole,
        took_all: Cell::new(false),
        failed: Cell::new(0),
        side: Rc::default(),
    };
    let mut woken = Woken {
        woken,
        side: &link.side,
        chat,
    };
    let hub = Connected::new(&link, call.news);
    let who = Handing {
        job_id,
        attempt_id: call.attempt_id,
        news: call.news,
    };
    let ended = hand_on::hand_on(&|ms| host.sleep(ms), &hub, who, chat, &mut woken).await;
    // One connection, and one more only after a send failed on one: constant in the
    // answer's length.
    live.check_opens(call.attempt_id, hub.opens(), link.failed.get());
    match ended {
        Ended::Whole(chars) => live.check_handed(job_id, call.attempt_id, chars),
        Ended::GaveUp if link.took_all.get() => live.gave_up_though_taken(job_id, call.attempt_id),
        Ended::GaveUp | Ended::Stopped => {}
    }
}

/// The call's word that text came, as its hand-off reads it (whenever it waits for text
/// or out its interval), telling the hub's poke check what the call has read, and that
/// its body is read.
struct Woken<'a> {
    woken: UnboundedReceiver<()>,
    side: &'a CallSide,
    chat: &'a RefCell<ChatStream>,
}

impl Stream for Woken<'_> {
    type Item = ();

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<()>> {
        let next = std::task::ready!(self.woken.poll_next_unpin(cx));
        match next {
            Some(()) => self.side.read.set(self.chat.borrow().chars()),
            None => self.side.body_read.set(true),
        }
        Poll::Ready(next)
    }
}

/// The model's way to one attempt's job's hub, behind the core's hub port: each
/// connection may fail to open, and drops when the hub restarts or the network cuts it.
struct ModelLink<'a> {
    live: &'a Live,
    job_id: &'a str,
    n: u32,
    attempt_id: &'a str,
    /// The attempt's whole text, which the model checks each piece against.
    whole: &'a str,
    /// The hub's last answer took all of its piece: a hand-off may give up only after a
    /// piece failed, or was not taken whole.
    took_all: Cell<bool>,
    /// Opens and sends that failed.
    failed: Cell<u32>,
    /// What the hub's poke check knows of the call.
    side: Rc<CallSide>,
}

impl ModelLink<'_> {
    fn failed(&self, why: String) -> String {
        self.failed.set(self.failed.get() + 1);
        self.took_all.set(false);
        self.side.pausing.set(true);
        why
    }
}

impl HubLink for ModelLink<'_> {
    fn open(&self) -> LocalBoxFuture<'_, Result<Rc<dyn HubLine + '_>, String>> {
        let opened = match self.live.connect(self.job_id, &self.side) {
            Ok(connection) => Ok(Rc::new(ModelLine {
                link: self,
                restarts: connection.restarts,
                pokes: RefCell::new(connection.pokes),
            }) as Rc<dyn HubLine>),
            Err(why) => Err(self.failed(why)),
        };
        Box::pin(std::future::ready(opened))
    }
}

/// One open connection of a [`ModelLink`]: the hub answers each piece at once.
struct ModelLine<'a> {
    link: &'a ModelLink<'a>,
    /// The hub's restarts when it opened.
    restarts: u64,
    /// The hub's pokes, in order.
    pokes: RefCell<UnboundedReceiver<()>>,
}

impl HubLine for ModelLine<'_> {
    fn poked(&self) -> LocalBoxFuture<'_, ()> {
        Box::pin(async move {
            // The Worker's own wait: never once the hub restarted (the channel closed).
            hand_on::next_poke(&self.pokes).await;
            self.link.side.heard.set(true);
        })
    }

    fn send<'a>(
        &'a self,
        sent: u64,
        piece: &'a str,
    ) -> LocalBoxFuture<'a, Result<HubAnswer, String>> {
        let link = self.link;
        link.live.check_poked(&link.side, link.attempt_id);
        if !link.live.still_open(link.job_id, self.restarts) {
            let why = link.failed("the connection to the hub dropped (simulated)".to_owned());
            return Box::pin(std::future::ready(Err(why)));
        }
        let taken = link.live.take(
            link.job_id,
            link.n,
            link.attempt_id,
            sent,
            piece,
            link.whole,
        );
        let offered = sent + piece.chars().count() as u64;
        let had = match taken {
            Ok(HubAnswer::Have(have) | HubAnswer::Alone(have)) => Some(have),
            _ => None,
        };
        link.took_all.set(had.is_some_and(|have| have >= offered));
        if let Some(have) = had {
            link.side.believed.set(have);
            link.side.pausing.set(false);
        }
        let taken = taken.map_err(|why| link.failed(why));
        Box::pin(std::future::ready(taken))
    }
}
