//! The store's side of the live channel: each move it commits is told to the job's hub,
//! and the notification may be lost (an isolate that died after the commit: half of
//! them the sender hears of) or late, and arrive out of order.

use super::{Live, LATE_MS, LOST_ONE_IN};
use futures_util::future::{self, LocalBoxFuture};
use onceclick_core::host::Notify;
use std::rc::Rc;

/// A notification on its way to `job`'s hub, there at `due`.
pub(super) struct Notification {
    pub(super) due: u64,
    pub(super) job: String,
    pub(super) seq: u64,
    pub(super) doc: String,
}

/// The store's side: what `Store::with_live` is given in the model.
pub(super) struct Notifier(pub(super) Rc<Live>);

impl Notify for Notifier {
    fn notify<'a>(
        &'a self,
        job_id: &'a str,
        seq: u64,
        doc: &'a str,
    ) -> LocalBoxFuture<'a, Result<(), String>> {
        let live = &self.0;
        live.record(job_id, seq, doc, "told");
        live.count(|f| f.told += 1);
        let mut rng = live.rng.borrow_mut();
        if rng.below(LOST_ONE_IN) == 0 {
            live.count(|f| f.lost += 1);
            // Half of them the sender hears of (a failed send, logged); half not.
            let answer = if rng.below(2) == 0 {
                Err("the hub did not answer (simulated)".to_owned())
            } else {
                Ok(())
            };
            return Box::pin(future::ready(answer));
        }
        let due = crate::platform::now_ms() as u64 + rng.below(LATE_MS);
        live.notifications.borrow_mut().push(Notification {
            due,
            job: job_id.to_owned(),
            seq,
            doc: doc.to_owned(),
        });
        Box::pin(future::ready(Ok(())))
    }
}
