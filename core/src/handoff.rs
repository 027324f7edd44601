//! A shard's dispatch of the jobs it creates: the create commits with it.
//!
//! On D1 a create sends its dispatch message once the answer is on its way
//! (`wait_until`): a send that never happens waits for the reconciler's lost-dispatch
//! sweep. A shard does better, because a Durable Object's alarm commits with its
//! writes:
//!
//! - The statement of a sharded create that inserts the first attempt is marked
//!   (`store::HandOff`) and returns the attempt's id. The shard runs the batch in one
//!   `transactionSync`, keeps the returned ids in its [`Outbox`] (memory), and sets its
//!   alarm to now in the same synchronous turn: the alarm is scheduled if and only if
//!   the job is committed. The create makes no queue send and no second round trip.
//! - Once the alarm is set, the shard also hands the kept attempts on at once, as it
//!   answers (a task of the object's: the runtime's output gate holds the send until
//!   the commit and the alarm are written). The alarm is the guarantee, not the way.
//!   Waiting for the alarm's turn cost a streamed job about 11 ms before its first
//!   text, locally.
//!   An alarm that runs while a hand-off is under way sets the next one [`RETRY_MS`]
//!   away at most: what that hand-off took is neither kept nor sent yet, and if the
//!   queue refuses it (it is kept again) or the instance ends first (a new instance's
//!   `born` finds it `starting`), that alarm hands it on. One alarm more per create
//!   whose alarm comes before its send is done.
//! - The alarm hands every kept attempt to the queue ([`Outbox::hand_off`]). It never
//!   calls a provider: the queue consumer does, as for every other attempt.
//! - The ids in memory die with the instance (a crash, an eviction, a deploy). So a new
//!   instance, in its first event and before it runs any batch, reads the attempts its
//!   shard holds `starting` ([`Outbox::born`], `sql::STARTING`): one instance of an
//!   object runs at a time, so those are what a dead instance held, or attempts whose
//!   message is in flight. No clock is compared. A kill right after the commit delays
//!   the dispatch until the alarm runs on a new instance (the alarm is durable, and
//!   retried); a message the old instance sent before it died is sent again, and the
//!   claim (a compare-and-swap) lets one of the two through. Faults a test asked for
//!   are not in the rows: a swept attempt's dispatcher runs without them.
//! - A send the queue refuses stays in the outbox, and the alarm runs again in
//!   [`RETRY_MS`].
//!
//! A new instance takes the newest [`sql::STARTING`] attempts at most (the oldest are
//! the likeliest to have their message queued); any beyond are the reconciler's, whose
//! lost-dispatch sweep still runs in every shard's pass.
//!
//! [`sql::STARTING`]: crate::store::sql::STARTING

use crate::host::Host;
use crate::message::Dispatch;
use std::cell::{Cell, RefCell};

/// How soon the alarm runs again when a hand-off could not send everything.
pub const RETRY_MS: f64 = 1_000.0;

/// What a shard instance holds between a create's commit and its hand-off (the one
/// the create starts, or its alarm's).
pub struct Outbox {
    pending: RefCell<Vec<Dispatch>>,
    /// This instance has read what its shard held `starting` when it came to be.
    born: Cell<bool>,
    /// The last hand-off left something the queue refused.
    refused: Cell<bool>,
    /// Hand-offs under way: what they took is neither kept nor known sent yet.
    sending: Cell<u32>,
}

impl Default for Outbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Outbox {
    /// The outbox of an instance that has run nothing yet.
    pub fn new() -> Self {
        Self {
            pending: RefCell::default(),
            born: Cell::new(false),
            refused: Cell::new(false),
            sending: Cell::new(0),
        }
    }

    /// Whether the instance has read its shard's `starting` attempts yet.
    pub fn is_born(&self) -> bool {
        self.born.get()
    }

    /// The instance's first event, before it runs any batch: `starting`, the attempts
    /// its shard holds `starting` (`sql::STARTING`), are kept for the next alarm.
    pub fn born(&self, starting: Vec<String>) {
        if !crate::mutant::on(crate::mutant::Mutant::HandOffSkipsSweep) {
            let kept = starting.iter().map(|id| Dispatch::run(id, None));
            self.pending.borrow_mut().extend(kept);
        }
        self.born.set(true);
    }

    /// Keeps attempts a committed batch returned, for the next alarm.
    pub fn keep(&self, handed: Vec<Dispatch>) {
        self.pending.borrow_mut().extend(handed);
    }

    /// When the alarm must run again for the outbox, in ms from now: in [`RETRY_MS`]
    /// after a refusal, and while another hand-off is under way (what the queue refuses
    /// it, or an end of the instance loses, needs an alarm: this instance's, or the
    /// next one's `born`); at once if anything else waits; `None` if nothing does.
    pub fn next_in_ms(&self) -> Option<f64> {
        if self.pending.borrow().is_empty() {
            let ignore = crate::mutant::on(crate::mutant::Mutant::AlarmIgnoresHandOff);
            (self.sending.get() > 0 && !ignore).then_some(RETRY_MS)
        } else if self.refused.get() {
            Some(RETRY_MS)
        } else {
            Some(0.0)
        }
    }

    /// Whether a hand-off is under way (what it took is neither kept nor sent yet).
    pub fn sending(&self) -> bool {
        self.sending.get() > 0
    }

    /// Hands every kept attempt to the queue; what the queue refused stays kept. The
    /// number sent.
    pub async fn hand_off(&self, host: &dyn Host) -> usize {
        self.refused.set(false);
        let due = std::mem::take(&mut *self.pending.borrow_mut());
        self.sending.set(self.sending.get() + 1);
        let mut sent = 0;
        let mut refused = Vec::new();
        for message in due {
            if crate::host::send(host, message.clone()).await {
                sent += 1;
            } else {
                refused.push(message);
            }
        }
        self.sending.set(self.sending.get() - 1);
        if !refused.is_empty() {
            self.refused.set(true);
            let mut pending = self.pending.borrow_mut();
            refused.append(&mut pending);
            *pending = refused;
        }
        sent
    }
}

/// What a committed batch asks its shard to hand on (`handoff.rs`): the attempts its
/// marked statements returned, each with the faults for its dispatcher.
pub type ToHandOn = Vec<crate::message::Dispatch>;

/// The attempts a statement marked for hand-off returned (its rows' `id`s).
pub fn to_hand_on(hand_off: &crate::store::HandOff, ids: impl Iterator<Item = String>) -> ToHandOn {
    ids.map(|id| crate::message::Dispatch::run(&id, hand_off.fault.as_deref()))
        .collect()
}
