//! The store's side of the live channel: each move it commits is told to the job's hub,
//! and the notification may be lost (an isolate that died after the commit: half of
//! them the sender hears of) or late, and arrive out of order.

use super::{Live, LATE_MS, LOST_ONE_IN, SENT_IN_MS};
use crate::exec::{Exec, Sleep};
use futures_util::future::LocalBoxFuture;
use onceclick_core::host::Notify;
use std::rc::Rc;

/// A notification on its way to `job`'s hub, there at `due`.
pub(super) struct Notification {
    pub(super) due: u64,
    pub(super) job: String,
    pub(super) seq: u64,
    pub(super) doc: String,
}

/// The store's side: what `Store::with_live` is given in the model. Each request takes
/// the sender 1 to `SENT_IN_MS` virtual ms, whatever becomes of the notification.
pub(super) struct Notifier {
    pub(super) live: Rc<Live>,
    pub(super) exec: Rc<Exec>,
    /// Its store's name (`Live::notifier`).
    pub(super) sender: u64,
}

impl Notify for Notifier {
    fn notify<'a>(
        &'a self,
        job_id: &'a str,
        seq: u64,
        doc: &'a str,
    ) -> LocalBoxFuture<'a, Result<(), String>> {
        let live = &self.live;
        live.record(job_id, seq, doc, "told");
        let claims = live.claims_in(self.sender, doc);
        live.count(|f| f.told += 1);
        let now = crate::platform::now_ms() as u64;
        let (answer, back_at) = {
            let mut rng = live.rng.borrow_mut();
            let back_at = now + 1 + rng.below(SENT_IN_MS);
            if rng.below(LOST_ONE_IN) == 0 {
                live.count(|f| f.lost += 1);
                // Half of them the sender hears of (a failed send, logged); half not.
                let answer = match rng.below(2) {
                    0 => Err("the hub did not answer (simulated)".to_owned()),
                    _ => Ok(()),
                };
                (answer, back_at)
            } else {
                let due = now + rng.below(LATE_MS);
                live.notifications.borrow_mut().push(Notification {
                    due,
                    job: job_id.to_owned(),
                    seq,
                    doc: doc.to_owned(),
                });
                (Ok(()), back_at)
            }
        };
        let exec = self.exec.clone();
        Box::pin(async move {
            Sleep::until(exec, back_at).await;
            live.claims_back(&claims);
            answer
        })
    }
}
