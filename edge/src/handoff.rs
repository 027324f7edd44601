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
//! - The alarm hands every kept attempt to the queue ([`Outbox::hand_off`]). It never
//!   calls a provider: the queue consumer does, as for every other attempt.
//! - The ids in memory die with the instance (a crash, an eviction, a deploy). So an
//!   instance that has not swept yet first hands on every attempt of its shard that was
//!   `starting` before the instance came to be: the rows say what a dead instance held
//!   (one instance of an object runs at a time). What this instance commits later is in
//!   its own outbox, or was meant to wait (a test's `drop-enqueue`, an attempt another
//!   task sends). A kill right after the commit
//!   delays the dispatch until the alarm runs again on a new instance (the alarm is
//!   durable, and retried). A message the old instance sent before it died is sent
//!   again; the claim (a compare-and-swap) lets one of the two through.
//! - A send the queue refuses stays in the outbox, and the alarm runs again in
//!   [`RETRY_MS`].
//!
//! The sweep takes at most [`SWEEP`] attempts; any beyond are the reconciler's, whose
//! lost-dispatch sweep still runs in every shard's pass.

use crate::clock;
use crate::dispatch;
use crate::error::ApiResult;
use crate::host::{Dispatch, Host};
use crate::store::Store;
use std::cell::{Cell, RefCell};

/// How soon the alarm runs again when a hand-off could not send everything.
pub(crate) const RETRY_MS: f64 = 1_000.0;
/// The most `starting` attempts a new instance's sweep hands on.
const SWEEP: u32 = 100;

/// What a shard instance holds between a create's commit and its alarm.
pub(crate) struct Outbox {
    pending: RefCell<Vec<Dispatch>>,
    /// This instance has handed on the attempts that were `starting` before it.
    swept: Cell<bool>,
    /// When this instance came to be (ms since the epoch).
    born_ms: f64,
    /// The last hand-off left something the queue refused.
    refused: Cell<bool>,
}

impl Outbox {
    /// The outbox of an instance coming to be now.
    pub(crate) fn new() -> Self {
        Self {
            pending: RefCell::default(),
            swept: Cell::new(false),
            born_ms: clock::now_ms(),
            refused: Cell::new(false),
        }
    }

    /// Keeps attempts a committed batch returned, for the next alarm.
    pub(crate) fn keep(&self, handed: Vec<Dispatch>) {
        self.pending.borrow_mut().extend(handed);
    }

    /// When the alarm must run again for the outbox, in ms from now: at once for an
    /// attempt kept since the last hand-off began, in [`RETRY_MS`] after a refusal or a
    /// sweep that could not read; `None` when nothing waits.
    pub(crate) fn next_in_ms(&self) -> Option<f64> {
        if self.refused.get() || !self.swept.get() {
            Some(RETRY_MS)
        } else if self.pending.borrow().is_empty() {
            None
        } else {
            Some(0.0)
        }
    }

    /// Hands every kept attempt to the queue (after the sweep, on an instance that has
    /// not swept); what the queue refused stays kept. The number sent.
    pub(crate) async fn hand_off(&self, host: &dyn Host, store: &Store) -> ApiResult<usize> {
        self.refused.set(false);
        let mut due = std::mem::take(&mut *self.pending.borrow_mut());
        if !self.swept.get() {
            if !crate::mutant::on(crate::mutant::Mutant::HandOffSkipsSweep) {
                let cutoff = clock::rfc3339(self.born_ms);
                let starting = match store.stuck_starting(&cutoff, SWEEP).await {
                    Ok(ids) => ids,
                    Err(e) => {
                        self.keep(due);
                        return Err(e);
                    }
                };
                for attempt_id in starting {
                    if !due.iter().any(|d| d.attempt_id == attempt_id) {
                        due.push(dispatch::message(&attempt_id, None));
                    }
                }
            }
            self.swept.set(true);
        }
        let mut sent = 0;
        let mut refused = Vec::new();
        for message in due {
            if crate::host::send(host, message.clone()).await {
                sent += 1;
            } else {
                refused.push(message);
            }
        }
        if !refused.is_empty() {
            self.refused.set(true);
            let mut pending = self.pending.borrow_mut();
            refused.append(&mut pending);
            *pending = refused;
        }
        Ok(sent)
    }
}
