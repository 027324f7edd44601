//! The queue: it takes a message (or refuses it, in a world with faults), delivers the
//! due ones in any order and now and then twice, and delivers again what a consumer
//! did not acknowledge, up to the queue's limit.

use super::{World, CONSUMER};
use crate::exec::Role;
use crate::requests;
use crate::rng::Rng;
use onceclick_core::message::Dispatch;
use std::rc::Rc;

/// The queue's deliveries of one message (`max_retries = 5` in `wrangler.toml`, plus
/// the first).
const DELIVERIES: u32 = 6;

/// A message in the queue.
pub(super) struct Message {
    pub(super) id: u64,
    pub(super) dispatch: Dispatch,
    /// When it may be delivered, virtual ms.
    pub(super) due: u64,
    /// Its deliveries so far.
    pub(super) deliveries: u32,
}

impl World {
    /// The queue takes a message (a small delay before it can be delivered).
    pub(crate) fn send(&self, dispatch: Dispatch) -> Result<(), String> {
        // The queue refuses a send now and then, in a world with faults.
        let refuse = self.db.faults.borrow().before / 2;
        if self.rng.borrow_mut().chance(refuse) {
            self.note(|| format!("queue refused {}", dispatch.attempt_id));
            if dispatch.result.is_some() {
                self.given_up
                    .borrow_mut()
                    .insert(dispatch.attempt_id.clone());
            }
            return Err("Queue send failed (simulated)".to_owned());
        }
        let id = self.next_message_id();
        let due = self.now() + self.rng.borrow_mut().below(50);
        self.note(|| format!("queue <- {} (msg {id})", dispatch.attempt_id));
        self.sent_ids
            .borrow_mut()
            .insert(dispatch.attempt_id.clone());
        self.queue.borrow_mut().push(Message {
            id,
            dispatch,
            due,
            deliveries: 0,
        });
        Ok(())
    }

    fn next_message_id(&self) -> u64 {
        let id = self.next_msg.get() + 1;
        self.next_msg.set(id);
        id
    }

    /// Delivers one due message, if any, to the consumer.
    pub(super) fn deliver(self: &Rc<Self>, rng: &mut Rng) {
        let now = self.now();
        let due: Vec<usize> = self
            .queue
            .borrow()
            .iter()
            .enumerate()
            .filter(|(_, m)| m.due <= now)
            .map(|(i, _)| i)
            .collect();
        if due.is_empty() {
            return;
        }
        // Any due message, not the oldest: the queue does not keep order.
        let i = due[rng.below(due.len() as u64) as usize];
        let mut msg = self.queue.borrow_mut().remove(i);
        msg.deliveries += 1;
        let mut figures = self.figures.borrow_mut();
        figures.deliveries += 1;
        if msg.deliveries > 1 {
            figures.redeliveries += 1;
        }
        drop(figures);
        // At least once: now and then a message is delivered and also kept.
        if rng.below(40) == 0 {
            let id = self.next_message_id();
            self.queue.borrow_mut().push(Message {
                id,
                dispatch: msg.dispatch.clone(),
                due: now + rng.below(2_000),
                deliveries: msg.deliveries,
            });
        }
        self.consume(msg);
    }

    /// The consumer's task for one delivery: the core's `deliver`, then the ack, or the
    /// message back to the queue.
    fn consume(self: &Rc<Self>, msg: Message) {
        let world = self.clone();
        let layout = self.layout.get();
        let dispatch = msg.dispatch.clone();
        self.note(|| {
            format!(
                "deliver msg {} ({}), delivery {}",
                msg.id, dispatch.attempt_id, msg.deliveries
            )
        });
        let task = self
            .exec
            .spawn(CONSUMER, Role::Delivery(msg.id), async move {
                let (store, sender) = world.sending_store(layout, &dispatch.attempt_id, true);
                let host = world.sending_host(CONSUMER, sender);
                let outcome = requests::deliver(&host, &store, &dispatch).await;
                // The watch's reads are bounded per delivery (a hedge's share them), one
                // more per call after its hub's word: so are its subrequests.
                let (reads, most) = (store.watched().0, world.config.borrow().max_watch_reads);
                if reads >= most {
                    world.figures.borrow_mut().watch_capped += 1;
                }
                if reads > most + 2 {
                    world.violate(format!(
                        "the delivery of {} read its attempt {reads} times, over its {most} (and one after the hub's word per call)",
                        dispatch.attempt_id
                    ));
                }
                let task = crate::exec::current();
                let msg = world.delivering.borrow_mut().remove(&task);
                if let (Err(code), Some(msg)) = (outcome, msg) {
                    world.note(|| {
                        format!(
                            "delivery of msg {} failed ({}): retried",
                            msg.id,
                            code.as_str()
                        )
                    });
                    // A result D1 would not take waits 30 s (`RESULT_RETRY_DELAY_S`).
                    let delay = if msg.dispatch.result.is_some() {
                        30_000
                    } else {
                        1_000
                    };
                    world.retry(msg, delay);
                }
            });
        self.delivering.borrow_mut().insert(task, msg);
    }

    /// A message back to the queue for a later delivery, unless it has had them all.
    pub(super) fn retry(&self, mut msg: Message, delay: u64) {
        if msg.deliveries >= DELIVERIES {
            if msg.dispatch.result.is_some() {
                self.given_up
                    .borrow_mut()
                    .insert(msg.dispatch.attempt_id.clone());
            }
            self.note(|| {
                format!(
                    "msg {} dead-lettered after {} deliveries",
                    msg.id, msg.deliveries
                )
            });
            return;
        }
        msg.due = self.now() + delay + self.rng.borrow_mut().below(delay);
        self.queue.borrow_mut().push(msg);
    }
}
