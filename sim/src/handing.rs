//! A streaming call's hand-off of its text to its job's hub: the core's own loop
//! (`hand_on.rs`), paced by its `Pacing` on the executor's timers, each piece taken by
//! the model's hub (`live/text.rs`) through the core's hub port. The call reads its
//! body meanwhile and says on `woken` whenever text came; it answers once both are done.

use crate::live::Live;
use futures_channel::mpsc::UnboundedReceiver;
use futures_util::future::LocalBoxFuture;
use onceclick_core::hand_on::{self, Ended, Handing, HubLine};
use onceclick_core::host::{Host, ProviderCall};
use onceclick_core::pacing::HubAnswer;
use onceclick_protocol::chat::ChatStream;
use std::cell::{Cell, RefCell};

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
    let hub = ModelHub {
        live,
        job_id,
        n,
        attempt_id: call.attempt_id,
        whole,
        took_all: Cell::new(false),
    };
    let who = Handing {
        job_id,
        attempt_id: call.attempt_id,
        news: call.news,
    };
    match hand_on::hand_on(&|ms| host.sleep(ms), &hub, who, chat, &mut woken).await {
        Ended::Whole(chars) => live.check_handed(job_id, call.attempt_id, chars),
        Ended::GaveUp if hub.took_all.get() => live.gave_up_though_taken(job_id, call.attempt_id),
        Ended::GaveUp | Ended::Stopped => {}
    }
}

/// The model's hub of one attempt's job, behind the core's hub port: it answers each
/// piece at once.
struct ModelHub<'a> {
    live: &'a Live,
    job_id: &'a str,
    n: u32,
    attempt_id: &'a str,
    /// The attempt's whole text, which the model checks each piece against.
    whole: &'a str,
    /// The hub's last answer took all of its piece: a hand-off may give up only after a
    /// piece failed, or was not taken whole.
    took_all: Cell<bool>,
}

impl HubLine for ModelHub<'_> {
    fn send<'a>(
        &'a self,
        sent: u64,
        piece: &'a str,
    ) -> LocalBoxFuture<'a, Result<HubAnswer, String>> {
        let taken = self.live.take(
            self.job_id,
            self.n,
            self.attempt_id,
            sent,
            piece,
            self.whole,
        );
        let offered = sent + piece.chars().count() as u64;
        self.took_all
            .set(matches!(taken, Ok(HubAnswer::Have(have)) if have >= offered));
        Box::pin(std::future::ready(taken))
    }
}
