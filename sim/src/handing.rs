//! A streaming call's hand-off of its text to its job's hub: the core's own loop
//! (`hand_on.rs`), paced by its `Pacing` on the executor's timers, over the core's
//! connection (`hand_on::Connected`), each piece a message on the model's connection and
//! taken by the model's hub (`live/text.rs`). The call reads its
//! body meanwhile and says on `woken` whenever text came; it answers once both are done.

use crate::live::Live;
use futures_channel::mpsc::UnboundedReceiver;
use futures_util::future::LocalBoxFuture;
use onceclick_core::hand_on::{self, Connected, Ended, Handing, HubLine, HubLink};
use onceclick_core::host::{Host, ProviderCall};
use onceclick_core::pacing::HubAnswer;
use onceclick_protocol::chat::ChatStream;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// Hands the text of `chat` on to the hub of `call`'s job, as the Worker's call does.
/// Once the body is read and the hub has all of it, the hub must have been handed all
/// the text read.
pub(crate) async fn hand_on(
    host: &dyn Host,
    live: &Live,
    call: &ProviderCall<'_>,
    whole: &str,
    chat: &RefCell<ChatStream>,
    mut woken: UnboundedReceiver<()>,
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
}

impl ModelLink<'_> {
    fn failed(&self, why: String) -> String {
        self.failed.set(self.failed.get() + 1);
        self.took_all.set(false);
        why
    }
}

impl HubLink for ModelLink<'_> {
    fn open(&self) -> LocalBoxFuture<'_, Result<Rc<dyn HubLine + '_>, String>> {
        let opened = match self.live.connect(self.job_id) {
            Ok(restarts) => Ok(Rc::new(ModelLine {
                link: self,
                restarts,
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
}

impl HubLine for ModelLine<'_> {
    fn send<'a>(
        &'a self,
        sent: u64,
        piece: &'a str,
    ) -> LocalBoxFuture<'a, Result<HubAnswer, String>> {
        let link = self.link;
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
        link.took_all
            .set(matches!(taken, Ok(HubAnswer::Have(have)) if have >= offered));
        let taken = taken.map_err(|why| link.failed(why));
        Box::pin(std::future::ready(taken))
    }
}
