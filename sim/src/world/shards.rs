//! The shards' side of a world: each shard's alarm and its hand-off of the attempts its
//! creates committed (the core's `Outbox`), decided by the Worker's own `alarm.rs`, and
//! the checks that a committed create is always dispatched: every attempt a create
//! committed is sent to the queue by its shard, whatever the shard's memory lost, and
//! a shard never waits for the reconciler to do it.

use super::{World, RECONCILER};
use crate::exec::Role;
use crate::host::SimHost;
use crate::requests;
use crate::rng::Rng;
use onceclick_core::store::native::Layout;
use onceclick_core::{alarm, handoff};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::rc::Rc;

/// How soon the runtime runs a shard's alarm again when its handler died: the alarm
/// stays set this far ahead while it runs.
const ALARM_RETRY_MS: u64 = 2_000;
/// The most `starting` attempts a new shard instance takes from its rows; any beyond
/// are the reconciler's by design (`handoff.rs`).
const BORN_WITH_AT_MOST: usize = 1_000;

impl World {
    /// Whether attempt `attempt_id` in `place` is `starting`.
    fn is_starting(&self, place: &str, attempt_id: &str) -> bool {
        self.db
            .query(
                place,
                "SELECT state FROM attempts WHERE id = ?1",
                &[json!(attempt_id)],
            )
            .first()
            .is_some_and(|r| r.get("state") == Some(&json!("starting")))
    }

    /// The layout of a shard's own database (its alarm's pass), by its place's name.
    fn shard_layout(&self, place: &str) -> Option<Layout> {
        super::passes_of(self.layout.get())
            .into_iter()
            .find(|layout| matches!(layout, Layout::Inside(shard) if shard.object_name() == place))
    }

    /// The shards whose alarm is running.
    fn running_alarms(&self) -> BTreeSet<String> {
        self.alarm_tasks.borrow().values().cloned().collect()
    }

    /// The shards whose alarm is due and not running.
    pub(super) fn due_alarms(&self) -> Vec<String> {
        let now = self.now();
        let running = self.running_alarms();
        self.db
            .alarms
            .borrow()
            .iter()
            .filter(|(place, due)| **due <= now && !running.contains(*place))
            .map(|(place, _)| place.clone())
            .collect()
    }

    /// A shard's alarm: its hand-off (`handoff.rs`, the core's outbox), on the objects'
    /// isolate (the reconciler's here), then its reconciler pass when due, then its next
    /// alarm, each decided by the Worker's own `alarm.rs`. The alarm stays set while it
    /// runs (the runtime retries an alarm whose handler died); the handler sets the next
    /// one. The shell's part is `shard.rs`'s, modelled (the pass's due time kept in
    /// `Db::pass_due`, not the shard's table); the real-Worker crash suite runs
    /// `shard.rs` itself. Then every attempt a create committed in that shard and still
    /// `starting` when the alarm began must have been sent to the queue, unless the queue
    /// refused a send: a committed create is always dispatched by its shard, whatever
    /// the shard's memory lost.
    pub(super) fn alarm(self: &Rc<Self>, rng: &mut Rng) {
        let due = self.due_alarms();
        if due.is_empty() {
            return;
        }
        let place = due[rng.below(due.len() as u64) as usize].clone();
        self.figures.borrow_mut().alarms += 1;
        self.db
            .alarms
            .borrow_mut()
            .insert(place.clone(), self.now() + ALARM_RETRY_MS);
        let starting = self.created_and_starting(&place);
        self.note(|| {
            format!(
                "alarm of {place}: {} created attempts starting",
                starting.len()
            )
        });
        let world = self.clone();
        let at = place.clone();
        let task = self.exec.spawn(RECONCILER, Role::Reconcile, async move {
            world.run_alarm(&at, starting).await;
        });
        self.alarm_tasks.borrow_mut().insert(task, place);
    }

    /// The attempts creates committed in `place` that are still `starting`.
    fn created_and_starting(&self, place: &str) -> Vec<String> {
        let committed: Vec<String> = self
            .db
            .handed
            .borrow()
            .get(place)
            .cloned()
            .unwrap_or_default();
        committed
            .into_iter()
            .filter(|id| self.is_starting(place, id))
            .collect()
    }

    /// The alarm's handler in shard `at`: the hand-off, the pass when due, the next
    /// alarm; then the check that `starting` (what creates committed there, still
    /// `starting` when it began) were all sent.
    async fn run_alarm(self: &Rc<Self>, at: &str, starting: Vec<String>) {
        let host = self.host(RECONCILER);
        let outbox = self.db.outbox(at);
        let handed = outbox.hand_off(&host).await;
        let pass_due = self.alarm_pass(&host, at).await;
        // Decided and set in one step, after the last await.
        let needs = outbox.next_in_ms();
        self.set_next_alarm(at, needs, pass_due);
        self.figures.borrow_mut().handed_off += handed as u64;
        // Another hand-off under way (one a create started) may hold some of them
        // still: a later alarm checks them.
        let complete = needs != Some(handoff::RETRY_MS) && !outbox.sending();
        if complete && starting.len() < BORN_WITH_AT_MOST {
            self.check_alarm_sent(at, &starting);
        }
    }

    /// The shard's reconciler pass, if due by `alarm::pass`: when the next one is due
    /// (platform ms).
    async fn alarm_pass(self: &Rc<Self>, host: &SimHost, at: &str) -> f64 {
        let every = self.config.borrow().reconcile_every_ms;
        let kept = self.db.pass_due.borrow().get(at).copied();
        let pass = alarm::pass(kept, crate::platform::now_ms(), every);
        if pass.keep {
            self.db
                .pass_due
                .borrow_mut()
                .insert(at.to_owned(), pass.due_ms);
        }
        match self.shard_layout(at) {
            Some(layout) if pass.runs => {
                self.note(|| format!("alarm of {at}: its reconciler pass"));
                let store = self.notifying_store(layout, "/v1/_reconcile");
                let _ = requests::reconcile(host, &store).await;
                let due = crate::platform::now_ms() + every;
                self.db.pass_due.borrow_mut().insert(at.to_owned(), due);
                due
            }
            _ => pass.due_ms,
        }
    }

    /// Sets (or clears) shard `at`'s next alarm as `alarm::next_in_ms` decides, from
    /// what its outbox `needs` and when its pass is due.
    fn set_next_alarm(&self, at: &str, needs: Option<f64>, pass_due: f64) {
        let holds_jobs = || {
            let rows = self.db.query(at, alarm::HAS_JOBS, &[]);
            let any = rows
                .first()
                .and_then(|r| r.get("any"))
                .and_then(Value::as_f64);
            any.unwrap_or(1.0) != 0.0
        };
        match alarm::next_in_ms(needs, pass_due, crate::platform::now_ms(), holds_jobs) {
            Some(in_ms) => {
                let due = self.now() + in_ms as u64;
                self.db.alarms.borrow_mut().insert(at.to_owned(), due);
            }
            None => {
                self.db.alarms.borrow_mut().remove(at);
            }
        }
    }

    /// Every attempt of `starting` was sent to the queue, unless something else moved it
    /// meanwhile (a cancel).
    fn check_alarm_sent(&self, at: &str, starting: &[String]) {
        let lost = starting
            .iter()
            .find(|id| !self.sent_ids.borrow().contains(*id) && self.is_starting(at, id));
        if let Some(lost) = lost {
            self.violate(format!(
                "attempt {lost}, committed by a create in {at} and still starting, was never sent to the queue though the shard's alarm ran: a create whose dispatch was lost"
            ));
        }
    }

    /// A shard's hand-off right after a create's commit (`shard.rs` starts it in the
    /// object's `wait_until`, the alarm staying set as the guarantee): the same outbox,
    /// on the objects' isolate, racing the alarm. Whatever it takes and the queue
    /// refuses is kept again; an alarm that runs meanwhile comes again in `RETRY_MS`
    /// (`Outbox::next_in_ms`) for that, and for what a crash of the isolate loses with
    /// the task (the new instance is born with what is `starting`).
    pub(super) fn eager_hand_off(self: &Rc<Self>, rng: &mut Rng) {
        let place = {
            let mut owed = self.db.eager.borrow_mut();
            if owed.is_empty() {
                return;
            }
            let i = rng.below(owed.len() as u64) as usize;
            owed.swap_remove(i)
        };
        self.note(|| format!("hand-off of {place} after a create's answer"));
        let world = self.clone();
        self.exec.spawn(RECONCILER, Role::Reconcile, async move {
            let host = world.host(RECONCILER);
            let outbox = world.db.outbox(&place);
            let handed = outbox.hand_off(&host).await;
            world.figures.borrow_mut().handed_off += handed as u64;
        });
    }

    /// After every operation: no shard leaves what it must hand on to the reconciler.
    /// A shard that keeps attempts to hand on has its alarm set to come when they need
    /// it; a shard that holds jobs has its alarm set; and no attempt a create committed
    /// is left `starting` and unsent with nothing under way to send it.
    pub(super) fn outboxes_armed(&self) {
        let now = self.now();
        let running = self.running_alarms();
        // One broken promise at a time: the later ones would follow from it.
        if self.check_outboxes_have_alarms(now, &running)
            && self.check_shards_with_jobs_armed(&running)
        {
            self.check_created_are_handed(now, &running);
        }
    }

    /// A shard that keeps attempts to hand on, with no hand-off under way, has its alarm
    /// set to come when they need it (at once, or in `RETRY_MS` after a refusal), unless
    /// its alarm is running and has yet to set the next: else they wait for the
    /// reconciler's sweep, or the shard's pass (a refusal the hand-off after a create's
    /// answer did not arm for, say). Whether it holds.
    fn check_outboxes_have_alarms(&self, now: u64, running: &BTreeSet<String>) -> bool {
        let late = self
            .db
            .outboxes
            .borrow()
            .iter()
            .filter(|(place, outbox)| !outbox.sending() && !running.contains(*place))
            .find_map(|(place, outbox)| {
                let need = now + outbox.next_in_ms()? as u64;
                let at = self.db.alarms.borrow().get(place).copied();
                at.is_none_or(|at| at > need)
                    .then(|| (place.clone(), at.map(|at| at - now), need - now))
            });
        let Some((place, at, need)) = late else {
            return true;
        };
        self.violate(match at {
            None => format!(
                "shard {place} keeps attempts to hand to the queue and has no alarm set: they wait for the reconciler"
            ),
            Some(at) => format!(
                "shard {place} keeps attempts to hand to the queue and its alarm comes in {at} ms, not within the {need} ms they need: they wait for its pass"
            ),
        });
        false
    }

    /// A shard that holds jobs has its alarm set (or running): else its reconciler pass
    /// waits for its next write. Whether it holds.
    fn check_shards_with_jobs_armed(&self, running: &BTreeSet<String>) -> bool {
        let unarmed = self
            .db
            .handed
            .borrow()
            .keys()
            .filter(|place| {
                !self.db.alarms.borrow().contains_key(*place) && !running.contains(*place)
            })
            .find(|place| {
                !self
                    .db
                    .query(place, "SELECT 1 FROM jobs LIMIT 1", &[])
                    .is_empty()
            })
            .cloned();
        let Some(place) = unarmed else {
            return true;
        };
        self.violate(format!(
            "shard {place} holds jobs and has no alarm set: its reconciler pass waits for its next write"
        ));
        false
    }

    /// No attempt a create committed, still `starting` and never sent, is left where
    /// only the reconciler (or the shard's pass) would find it: its shard's alarm is
    /// running, or comes within `RETRY_MS` (or the runtime's retry of an alarm whose
    /// handler died), or a hand-off holds it (memory that a crash loses, so the alarm
    /// must outlive it).
    fn check_created_are_handed(&self, now: u64, running: &BTreeSet<String>) {
        let soon = now + ALARM_RETRY_MS.max(handoff::RETRY_MS as u64);
        let handed = self.db.handed.borrow();
        for (place, ids) in handed.iter() {
            let alarm = self.db.alarms.borrow().get(place).copied();
            let busy = || {
                self.db
                    .outboxes
                    .borrow()
                    .get(place)
                    .is_some_and(|o| o.sending())
            };
            if ids.len() >= BORN_WITH_AT_MOST
                || running.contains(place)
                || alarm.is_some_and(|at| at <= soon)
                || busy()
            {
                continue;
            }
            let lost = {
                let sent = self.sent_ids.borrow();
                ids.iter()
                    .filter(|id| !sent.contains(*id))
                    .find(|id| self.is_starting(place, id))
                    .cloned()
            };
            if let Some(lost) = lost {
                let alarm = match alarm {
                    Some(at) => format!("comes in {} ms", at - now),
                    None => "is not set".to_owned(),
                };
                self.violate(format!(
                    "attempt {lost}, committed by a create in {place} and still starting, was never sent, no hand-off is under way, and its shard's alarm {alarm}: its dispatch waits for the reconciler"
                ));
                return;
            }
        }
    }
}
