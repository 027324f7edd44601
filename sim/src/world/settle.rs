//! A world's end: faults stop, time passes, every message is delivered and every place
//! reconciled until nothing moves; then no job may be stuck, no paid-for work lost
//! without a record, and every live stream shows its job's last change.

use super::checks::SeenJob;
use super::World;
use crate::db::FaultRates;
use crate::rng::Rng;
use onceclick_protocol::AttemptState;
use std::rc::Rc;

/// How long a world settles at least: long enough for every rule of the reconciler to
/// apply (a lost dispatch after 5 s, a lost dispatcher after timeout + 2 s, an abandon
/// after 20 s), twice over.
const SETTLE_MS: u64 = 120_000;
/// How often every place is reconciled while the world settles.
const PASS_EVERY_MS: u64 = 10_000;
/// The most turns the settling takes.
const SETTLE_TURNS: u32 = 20_000;

impl World {
    /// Faults stop, time passes, every message is delivered and every place is
    /// reconciled until nothing moves; then no job may be stuck, and no paid-for work
    /// lost without a record.
    pub(crate) fn settle(self: &Rc<Self>) {
        *self.db.faults.borrow_mut() = FaultRates::default();
        *self.db.outage_until.borrow_mut() = 0;
        self.op.set(self.op.get() + 1);
        self.note(|| "settle: faults stop, time passes".to_owned());
        self.run_until_still();
        self.check_every_job_again();
        self.check_settled();
        self.live.settle(&|id| self.read_job_document(id));
        self.live_problems();
    }

    /// Runs the world with no new operation: its tasks, the due deliveries, hand-offs
    /// and alarms, a reconciler pass of every place now and then, and time to the next
    /// thing due; until at least [`SETTLE_MS`] have passed and no task or message is
    /// left.
    fn run_until_still(self: &Rc<Self>) {
        let mut rng = Rng::new(0x5E77);
        let start = self.now();
        let mut last_pass = 0;
        for _ in 0..SETTLE_TURNS {
            while self.step(&mut rng) {}
            let now = self.now();
            self.live.tick(now, &|id| self.read_job_document(id));
            if self.queue.borrow().iter().any(|m| m.due <= now) {
                self.deliver(&mut rng);
                continue;
            }
            if !self.db.eager.borrow().is_empty() {
                self.eager_hand_off(&mut rng);
                continue;
            }
            if !self.due_alarms().is_empty() {
                self.alarm(&mut rng);
                continue;
            }
            if now >= last_pass + PASS_EVERY_MS {
                last_pass = now;
                self.reconcile_everywhere();
                continue;
            }
            if now >= start + SETTLE_MS && self.exec.is_empty() && self.queue.borrow().is_empty() {
                break;
            }
            let next_due = self.queue.borrow().iter().map(|m| m.due).min();
            let next_alarm = self.db.alarms.borrow().values().copied().min();
            let next = [
                self.exec.next_timer(),
                next_due,
                next_alarm,
                Some(last_pass + PASS_EVERY_MS),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + 1_000);
            self.advance(next.saturating_sub(now).max(1));
        }
    }

    /// A reconciler pass of every place: each shard, and the D1, of both layouts during
    /// a move.
    fn reconcile_everywhere(self: &Rc<Self>) {
        for layout in super::passes_of(self.layout.get()) {
            self.spawn_reconcile(layout);
        }
    }

    /// Every job the model saw, read once more.
    fn check_every_job_again(&self) {
        let jobs: Vec<(String, String)> = self
            .seen
            .borrow()
            .iter()
            .map(|(id, s)| (s.place.clone(), id.clone()))
            .collect();
        for (place, job) in &jobs {
            self.check_job(place, job);
        }
    }

    /// Nothing is left to run, no job is stuck, and no paid-for work is lost without a
    /// record, of the jobs there and of those the purge took.
    fn check_settled(&self) {
        let left = (self.exec.count(|_| true), self.queue.borrow().len());
        if left != (0, 0) {
            self.violate(format!(
                "the world did not settle: {} tasks and {} messages left once faults stopped and time passed",
                left.0, left.1
            ));
        }
        for (job_id, seen) in self.seen.borrow().iter() {
            if seen.job.stuck() {
                let view = seen.job.view();
                self.violate(format!(
                    "job {job_id} is stuck: {} with attempts {:?} once faults stopped and time passed",
                    view.status.as_str(),
                    view.attempts
                ));
            }
            self.check_paid(seen, false);
        }
        for seen in self.purged_seen.borrow().iter() {
            self.check_paid(seen, true);
        }
    }

    /// Nothing paid for is lost without a record: every call whose provider did the work
    /// ended as the job's result or `superseded`, or with a `race_lost` or
    /// `late_result_discarded` event naming its attempt; or, when the dispatcher never
    /// had an output to record (a late or cut-off answer, or a crash took it), the
    /// attempt went to `unknown` and on to a person's or the abandon rule's decision.
    fn check_paid(&self, seen: &SeenJob, purged: bool) {
        use AttemptState::{Abandoned, Cancelled, Failed, Succeeded, Superseded, Unknown};
        let calls = self.calls.borrow();
        let recorded = self.recorded.borrow();
        let job = seen.job.view();
        for (attempt, state) in &job.attempts {
            let Some(call) = calls.get(attempt) else {
                continue;
            };
            if !call.script.paid() {
                continue;
            }
            // A result that came after the purge took its job has no row to go to: its
            // record is the log line (`attempt_state: purged`).
            let kept = matches!(state, Succeeded | Superseded)
                || recorded.contains(attempt)
                || (purged && self.purged_lines.borrow().contains(attempt));
            let held = call.output && call.delivered && !call.orphaned;
            // A call that failed on its own record: its attempt's error is the record.
            let kept = kept || (call.failed_on_record && *state == Failed);
            let ok = if held && !self.given_up.borrow().contains(attempt) {
                // The dispatcher had the output and lived: it must have recorded it.
                kept
            } else {
                kept || matches!(state, Unknown | Abandoned | Cancelled)
                    || job.resolved_failed.contains(attempt)
            };
            if !ok {
                self.violate(format!(
                    "paid work of attempt {attempt} ({:?}, output {}, delivered {}, dispatcher crashed {}) was lost without a record: it is {}",
                    call.script, call.output, call.delivered, call.orphaned, state.as_str()
                ));
            }
        }
    }
}
