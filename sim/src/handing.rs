//! A streaming call's hand-off of its text to its job's hub, as `openai::hand_on` does
//! it: paced by the Worker's own [`Pacing`] on the executor's timers, each piece taken
//! by the model's hub (`live/text.rs`). The call reads its body meanwhile and says on
//! `woken` whenever text came; it answers once both are done.

use crate::exec::{Exec, Sleep};
use crate::live::Live;
use futures_channel::mpsc::UnboundedReceiver;
use futures_util::future::{select, Either};
use futures_util::StreamExt;
use onceclick_core::host::ProviderCall;
use onceclick_core::pacing::{Next, Pacing, Taken};
use onceclick_protocol::chat::ChatStream;
use onceclick_protocol::live::after_chars;
use std::cell::RefCell;
use std::rc::Rc;

/// Hands the text of `chat` on to the hub of `call`'s job as `Pacing` says, until the
/// body is read and the hub has all of it, the hub says the attempt ended (the call
/// tells its dispatcher), or the hand-offs fail too often in a row. Once done, the hub
/// must have been handed all the text read.
pub(crate) async fn hand_on(
    exec: &Rc<Exec>,
    live: &Live,
    call: &ProviderCall<'_>,
    whole: &str,
    chat: &RefCell<ChatStream>,
    mut woken: UnboundedReceiver<()>,
) {
    let Some((job_id, n)) = call.job else { return };
    let mut pace = Pacing::default();
    loop {
        let chars = chat.borrow().chars();
        let sent = match pace.next(chars, crate::platform::now_ms()) {
            Next::Text => {
                pace.read(woken.next().await.is_some());
                continue;
            }
            Next::ReadOn(ms) => {
                pace.read(read_on(exec, &mut woken, ms).await);
                continue;
            }
            Next::Sleep(ms) => {
                Sleep::until(exec.clone(), crate::platform::now_ms() as u64 + ms).await;
                continue;
            }
            Next::Done => return live.check_handed(job_id, call.attempt_id, chars),
            Next::Hand(sent) => sent,
        };
        while woken.try_recv().is_ok() {}
        let piece = after_chars(chat.borrow().text(), sent).to_owned();
        if let Some(news) = call.news {
            news.handed_off();
        }
        match live.take(job_id, n, call.attempt_id, sent, &piece, whole) {
            Ok(Taken::Have(have)) if pace.took(have) => {}
            Ok(Taken::Have(_)) => return,
            Ok(Taken::Stop) => {
                // The dispatcher looks at the store now.
                if let Some(news) = call.news {
                    news.ended();
                }
                return;
            }
            Err(_) if pace.failed() => {}
            Err(_) => return,
        }
    }
}

/// Waits `ms` while the body is read on; `false` if its reading ends first.
async fn read_on(exec: &Rc<Exec>, woken: &mut UnboundedReceiver<()>, ms: u64) -> bool {
    let timer = Sleep::until(exec.clone(), crate::platform::now_ms() as u64 + ms);
    futures_util::pin_mut!(timer);
    loop {
        match select(woken.next(), &mut timer).await {
            Either::Left((Some(()), _)) => continue,
            Either::Left((None, _)) => return false,
            Either::Right(_) => return true,
        }
    }
}
