//! The operations a world draws and runs, each from its own seed: a client's requests
//! (a new intent, its resend, another request under its key, the fallback button,
//! cancel, resolve, read), queue deliveries, reconciler passes, time passing and the
//! clock jumping, crashes, store outages, shards' alarms and hand-offs, the live
//! channel's streams, and the tasks' steps in between.

use super::{layout_of, passes_of, Shape, World, CONSUMER, FRONT, RECONCILER};
use crate::exec::Role;
use crate::host::SimHost;
use crate::model::{Create, Key, Resolution};
use crate::requests::{self, Answer};
use crate::rng::Rng;
use onceclick_core::store::native::Layout;
use onceclick_core::store::Store;
use onceclick_protocol::moving::StoreLayout;
use onceclick_protocol::{AttemptState, CreateJob, NewAttempt};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::rc::Rc;

const OWNERS: [&str; 3] = ["alice", "bob", "o:carol"];
/// The provider a job runs on when its create names none (the first of `PROVIDERS`).
const DEFAULT_PROVIDER: &str = "primary";

/// One intent of a client: what the model knows of its key, and the request it sends
/// (unless it sends another under the same key).
#[derive(Clone, Debug)]
pub(super) struct Intent {
    pub(super) key: Key,
    /// The input its own request sends.
    pub(super) input: Value,
    pub(super) provider: Option<&'static str>,
}

/// A request in flight, and what its answer must agree with.
#[derive(Clone, Debug)]
pub(super) enum Request {
    /// A create under the key of intent `intent` (its own request, or another).
    Create {
        intent: usize,
        create: Create,
    },
    /// The fallback button on `job`, with key `key`, its body naming `body`.
    Fallback {
        job: String,
        key: String,
        body: Option<&'static str>,
    },
    Cancel {
        job: String,
    },
    Resolve {
        attempt: String,
        outcome: Resolution,
    },
    Read {
        job: String,
    },
}

/// What an operation does, drawn by weight ([`OPERATIONS`]).
#[derive(Clone, Copy, Debug)]
enum Operation {
    NewIntent,
    Resend,
    /// The same key, another request.
    Mismatch,
    FallbackButton,
    Cancel,
    Resolve,
    Read,
    Deliver,
    Reconcile,
    TimePasses,
    ClockJump,
    Crash,
    /// A store outage of a few seconds (in a world with faults).
    Outage,
    /// A shard's alarm, if one is due.
    Alarm,
    /// A shard's hand-off after a create's answer, if one is owed.
    HandOff,
    /// A live stream opens, drops and reconnects, or a hub restarts.
    Live,
    /// Only tasks run.
    TasksRun,
    /// A deploy changes the fallback's configuration (`World::redeploy`).
    Redeploy,
}

/// The operations by weight, in the order drawn.
const OPERATIONS: [(u32, Operation); 18] = [
    (14, Operation::NewIntent),
    (8, Operation::Resend),
    (3, Operation::Mismatch),
    (5, Operation::FallbackButton),
    (3, Operation::Cancel),
    (3, Operation::Resolve),
    (2, Operation::Read),
    (14, Operation::Deliver),
    (3, Operation::Reconcile),
    (16, Operation::TimePasses),
    (2, Operation::ClockJump),
    (1, Operation::Crash),
    (1, Operation::Outage),
    (10, Operation::Alarm),
    (6, Operation::HandOff),
    (8, Operation::Live),
    (30, Operation::TasksRun),
    (1, Operation::Redeploy),
];

impl World {
    /// Runs operation `index` with its own seed, a few of the tasks' steps, and the
    /// checks that follow every operation.
    pub(crate) fn operation(self: &Rc<Self>, index: u64, seed: u64) {
        self.op.set(index);
        self.figures.borrow_mut().ops += 1;
        let mut rng = Rng::new(seed);
        self.move_when_due(index);
        match rng.weighted(&OPERATIONS) {
            Operation::NewIntent => self.new_intent(&mut rng),
            Operation::Resend => self.resend(&mut rng, false),
            Operation::Mismatch => self.resend(&mut rng, true),
            Operation::FallbackButton => self.fallback(&mut rng),
            Operation::Cancel => self.cancel(&mut rng),
            Operation::Resolve => self.resolve(&mut rng),
            Operation::Read => self.read(&mut rng),
            Operation::Deliver => self.deliver(&mut rng),
            Operation::Reconcile => self.reconcile(&mut rng),
            Operation::TimePasses => self.advance(1 + rng.below(400)),
            Operation::ClockJump => {
                self.figures.borrow_mut().clock_jumps += 1;
                let ms = rng.weighted(&[(6, 5_000u64), (3, 60_000), (1, 25 * 3_600_000)]);
                self.advance(ms + rng.below(ms));
            }
            Operation::Crash => self.crash(&mut rng),
            Operation::Outage => self.outage(&mut rng),
            Operation::Alarm => self.alarm(&mut rng),
            Operation::HandOff => self.eager_hand_off(&mut rng),
            Operation::Live => {
                let job = self.pick_job(&mut rng);
                self.live
                    .act(&mut rng, job, &|id| self.read_job_document(id));
            }
            Operation::TasksRun => {}
            Operation::Redeploy => self.redeploy(),
        }
        for _ in 0..rng.below(6) {
            self.step(&mut rng);
        }
        self.live.tick(self.now(), &|id| self.read_job_document(id));
        self.live_problems();
        self.outboxes_armed();
    }

    /// A moved world moves halfway, once its front isolates hold no request (the
    /// move's first deploy refuses new keys until the old layout's creates are done).
    fn move_when_due(self: &Rc<Self>, index: u64) {
        if let Shape::Moved { from, to } = self.shape {
            if self.layout.get() == layout_of(self.shape, false) && index >= self.move_at {
                self.drain_front();
                self.layout.set(layout_of(self.shape, true));
                self.note(|| format!("the move: {to}, with {from} kept as the previous store"));
                *self
                    .figures
                    .borrow_mut()
                    .moves
                    .entry(format!("{from} → {to}"))
                    .or_default() += 1;
            }
        }
    }

    /// One pick in three: a few outages a world, in a world with faults.
    fn outage(&self, rng: &mut Rng) {
        if self.db.faults.borrow().before > 0 && rng.below(3) == 0 {
            let until = self.now() + 3_000 + rng.below(9_000);
            self.note(|| format!("store outage until t={}", until - crate::EPOCH_MS));
            *self.db.outage_until.borrow_mut() = until;
        }
    }

    /// Sends `request` from a front isolate; its answer is checked after the step that
    /// hears it.
    fn spawn_request(self: &Rc<Self>, rng: &mut Rng, request: Request) {
        self.figures.borrow_mut().requests += 1;
        let isolate = FRONT[rng.below(FRONT.len() as u64) as usize];
        let world = self.clone();
        let layout = self.layout.get();
        let req = request.clone();
        let op = self.op.get();
        self.note(|| format!("request {req:?} on isolate {isolate}"));
        let id = self.exec.spawn(isolate, Role::Request(op), async move {
            let host = world.host(isolate);
            let store = world.notifying_store(layout, "request");
            let answer = world.answer(&host, &store, &req).await;
            let task = crate::exec::current();
            let request = world.requests.borrow_mut().remove(&task);
            if let Some(request) = request {
                world.answers.borrow_mut().push((task, request, answer));
            }
        });
        self.note(|| format!("  (task {id})"));
        self.requests.borrow_mut().insert(id, request);
    }

    /// The core's answer to `request`, as the Worker's handler gives it.
    async fn answer(&self, host: &SimHost, store: &Store, request: &Request) -> Answer {
        match request {
            Request::Create { intent, create } => {
                let (owner, key, body) = {
                    let intents = self.intents.borrow();
                    let key = &intents[*intent].key;
                    let body = CreateJob {
                        kind: key.kind.clone(),
                        input: create.input.clone(),
                        provider: create.provider.clone(),
                    };
                    (key.owner.clone(), key.key.clone(), body)
                };
                requests::create(host, store, &owner, &key, &body, None).await
            }
            Request::Fallback { job, key, body } => {
                let owner = self.owner_of(job).unwrap_or_default();
                let body = NewAttempt {
                    provider: body.map(str::to_owned),
                };
                requests::fallback(host, store, &owner, job, Some(key), &body, None, None).await
            }
            Request::Cancel { job } => {
                let owner = self.owner_of(job);
                requests::cancel(store, owner.as_deref(), job).await
            }
            Request::Resolve { attempt, outcome } => {
                let body = match outcome {
                    Resolution::Succeeded => {
                        let result = self.resolution(attempt);
                        json!({"outcome": "succeeded", "result": result})
                    }
                    other => json!({ "outcome": other.as_str() }),
                };
                requests::resolve(host, store, attempt, &body).await
            }
            Request::Read { job } => requests::read(store, None, job).await,
        }
    }

    /// A person's result for `attempt`: an output of its job's kind for its input,
    /// numbered as no provider's is (a summary's when the model knows no such job).
    fn resolution(&self, attempt: &str) -> Value {
        let seen = self.seen.borrow();
        let job = seen
            .values()
            .find(|s| s.job.view().attempts.contains_key(attempt));
        let kind = job.and_then(|job| self.kinds().iter().find(|k| k.name() == job.kind));
        match (kind, job) {
            (Some(kind), Some(job)) if !kind.name().starts_with("summarize") => {
                super::calls::stamped(kind, &job.input, &format!("r{} ", self.serial()))
            }
            _ => json!({"summary": format!("r{}", self.serial()), "sentiment": "neutral"}),
        }
    }

    /// The owner of a job the model saw.
    fn owner_of(&self, job: &str) -> Option<String> {
        self.seen.borrow().get(job).map(|s| s.owner.clone())
    }

    fn new_intent(self: &Rc<Self>, rng: &mut Rng) {
        let n = self.intents.borrow().len();
        let (kind, input) = self.intent_input(rng, n);
        let owner = OWNERS[rng.below(OWNERS.len() as u64) as usize];
        let key = format!("k{n}-{}", rng.below(1_000_000));
        let intent = Intent {
            key: Key::new(owner, &key, &kind, DEFAULT_PROVIDER),
            input,
            provider: (rng.below(5) == 0).then_some("fallback"),
        };
        self.intents.borrow_mut().push(intent);
        self.create(rng, n, false);
    }

    /// The kind and input of intent `n`. Most are the two summarize kinds (one in
    /// three hedged), with a text one in four of long enough for a long streamed
    /// summary; one in four is one of the world's other kinds (a text answer, a rule on
    /// the input's labels, a nested answer, or a kind file of the test's own), on one of
    /// its golden inputs made the intent's own.
    fn intent_input(&self, rng: &mut Rng, n: usize) -> (String, Value) {
        let others: Vec<&str> = self
            .kinds()
            .iter()
            .map(|k| k.name())
            .filter(|k| !k.starts_with("summarize"))
            .collect();
        if !others.is_empty() && rng.below(4) == 0 {
            let kind = others[rng.below(others.len() as u64) as usize];
            let input = self
                .kinds()
                .iter()
                .find(|k| k.name() == kind)
                .and_then(|k| {
                    let golden: Vec<&Value> = k.golden().map(|(input, _)| input).collect();
                    golden.get(n % golden.len().max(1)).map(|g| (*g).clone())
                })
                .unwrap_or_default();
            return (kind.to_owned(), marked(input, &format!(" (intent {n})")));
        }
        let kind = if rng.below(3) == 0 {
            "summarize_hedged"
        } else {
            "summarize"
        };
        // One in four is long enough for a long streamed summary.
        let more = if n % 4 == 0 {
            " It goes on, and on.".repeat(24)
        } else {
            String::new()
        };
        let text = format!(
            "The text of intent number {n}, long enough to be summarized in a few words.{more}"
        );
        (kind.to_owned(), json!({ "text": text }))
    }

    /// A create under intent `intent`'s key: its own request, or (`mismatch`) another
    /// text or another provider (the fingerprint holds both).
    fn create(self: &Rc<Self>, rng: &mut Rng, intent: usize, mismatch: bool) {
        let create = {
            let mut intents = self.intents.borrow_mut();
            let i = &mut intents[intent];
            let (input, provider) = match (mismatch, rng.below(2)) {
                (false, _) => (i.input.clone(), i.provider),
                (true, 0) => (
                    marked(i.input.clone(), &format!(" Changed: {}.", rng.below(1_000))),
                    i.provider,
                ),
                (true, _) => (
                    i.input.clone(),
                    if i.provider.is_some() {
                        None
                    } else {
                        Some("fallback")
                    },
                ),
            };
            let create = Create {
                input,
                provider: provider.map(str::to_owned),
            };
            i.key.send(&create);
            create
        };
        self.spawn_request(rng, Request::Create { intent, create });
    }

    fn resend(self: &Rc<Self>, rng: &mut Rng, mismatch: bool) {
        let candidates: Vec<usize> = self
            .intents
            .borrow()
            .iter()
            .enumerate()
            .filter(|(_, i)| !mismatch || i.key.job().is_some())
            .map(|(n, _)| n)
            .collect();
        if candidates.is_empty() {
            return;
        }
        let intent = candidates[rng.below(candidates.len() as u64) as usize];
        self.create(rng, intent, mismatch);
    }

    /// One of the jobs the model saw, if any.
    fn pick_job(&self, rng: &mut Rng) -> Option<String> {
        let seen = self.seen.borrow();
        if seen.is_empty() {
            return None;
        }
        let n = rng.below(seen.len() as u64) as usize;
        seen.keys().nth(n).cloned()
    }

    /// The fallback button on a job: a new key, or now and then a key clicked before
    /// (with its body, or another click's).
    fn fallback(self: &Rc<Self>, rng: &mut Rng) {
        let Some(job) = self.pick_job(rng) else {
            return;
        };
        let earlier: Vec<(String, Option<&'static str>)> = self
            .fallback_keys
            .borrow()
            .iter()
            .filter(|((j, _), _)| *j == job)
            .map(|((_, k), b)| (k.clone(), *b))
            .collect();
        let (key, body) = if !earlier.is_empty() && rng.below(3) == 0 {
            let (key, body) = earlier[rng.below(earlier.len() as u64) as usize].clone();
            // Now and then the same key with another body: another click's request.
            let body = match rng.below(4) {
                0 if body.is_some() => None,
                0 => Some("fallback"),
                _ => body,
            };
            (key, body)
        } else {
            let key = format!("fb{}", rng.below(1_000_000_000));
            let body = (rng.below(2) == 0).then_some("fallback");
            self.fallback_keys
                .borrow_mut()
                .insert((job.clone(), key.clone()), body);
            (key, body)
        };
        self.spawn_request(rng, Request::Fallback { job, key, body });
    }

    fn cancel(self: &Rc<Self>, rng: &mut Rng) {
        if let Some(job) = self.pick_job(rng) {
            self.spawn_request(rng, Request::Cancel { job });
        }
    }

    fn read(self: &Rc<Self>, rng: &mut Rng) {
        if let Some(job) = self.pick_job(rng) {
            self.spawn_request(rng, Request::Read { job });
        }
    }

    /// An admin's resolve: mostly of an `unknown` attempt, now and then of any.
    fn resolve(self: &Rc<Self>, rng: &mut Rng) {
        let unknown: Vec<String> = self
            .seen
            .borrow()
            .values()
            .flat_map(|s| s.job.view().attempts.iter())
            .filter(|(_, state)| **state == AttemptState::Unknown)
            .map(|(id, _)| id.clone())
            .collect();
        let any: Vec<String> = self
            .seen
            .borrow()
            .values()
            .flat_map(|s| s.job.view().attempts.keys().cloned())
            .collect();
        let pool = if !unknown.is_empty() && rng.below(5) != 0 {
            unknown
        } else {
            any
        };
        if pool.is_empty() {
            return;
        }
        let attempt = pool[rng.below(pool.len() as u64) as usize].clone();
        let outcome = rng.weighted(&[
            (4, Resolution::Failed),
            (2, Resolution::Cancelled),
            (4, Resolution::Succeeded),
        ]);
        self.spawn_request(rng, Request::Resolve { attempt, outcome });
    }

    /// A reconciler pass, of one place: the D1, or a shard (of either layout during a
    /// move).
    fn reconcile(self: &Rc<Self>, rng: &mut Rng) {
        self.figures.borrow_mut().reconciles += 1;
        let passes = passes_of(self.layout.get());
        let layout = passes[rng.below(passes.len() as u64) as usize];
        self.note(|| format!("reconcile {layout:?}"));
        self.spawn_reconcile(layout);
    }

    /// Runs a reconciler pass over `layout` on the reconciler's isolate.
    /// The pass over the whole store (the cron's, or D1's) is followed by the background
    /// certification pass, as the cron runs it: it certifies again what a redeploy
    /// voided, under the world's faults.
    pub(super) fn spawn_reconcile(self: &Rc<Self>, layout: Layout) {
        let world = self.clone();
        let whole = self.layout.get();
        self.exec.spawn(RECONCILER, Role::Reconcile, async move {
            let host = world.host(RECONCILER);
            let store = world.notifying_store(layout, "/v1/_reconcile");
            let _ = requests::reconcile(&host, &store).await;
            // The cron's minute: after D1's pass, or (sharded) after the first shard's of
            // the layout now.
            let cron = layout == Layout::ONE
                || matches!((&layout, &whole), (Layout::Inside(shard), Layout::Deployed {
                    now: StoreLayout::Shards(count), ..
                }) if shard.index == 0 && shard.count == *count);
            if cron {
                let store = world.store(whole, "cron");
                let config = onceclick_core::host::Host::config(&host);
                if let Ok(made) = onceclick_core::certification::auto(&store, &host).await {
                    world.certified_in_background(&config, &made);
                }
            }
        });
    }

    /// Time passes: the timers due fire.
    pub(super) fn advance(&self, ms: u64) {
        let to = self.now() + ms;
        crate::platform::set_now_ms(to as f64);
        self.exec.fire_timers(to);
    }

    /// An isolate crashes: its tasks are dropped, with the memory of what they held.
    fn crash(&self, rng: &mut Rng) {
        self.figures.borrow_mut().crashes += 1;
        let isolate = rng.weighted(&[(2, FRONT[0]), (2, FRONT[1]), (3, CONSUMER), (1, RECONCILER)]);
        self.crashing.set(true);
        let dropped = self.exec.crash(isolate);
        self.crashing.set(false);
        self.note(|| format!("crash isolate {isolate}: {} tasks dropped", dropped.len()));
        let ids: BTreeSet<u64> = dropped.iter().map(|(t, _)| *t).collect();
        if isolate == RECONCILER {
            // The shards' objects live here: their memory (the outboxes) dies with it.
            self.db.outboxes.borrow_mut().clear();
            self.db.eager.borrow_mut().clear();
        }
        self.alarm_tasks
            .borrow_mut()
            .retain(|t, _| !ids.contains(t));
        for call in self.calls.borrow_mut().values_mut() {
            if ids.contains(&call.task) {
                call.orphaned = true;
            }
        }
        for (task, role) in dropped {
            self.requests.borrow_mut().remove(&task);
            crate::db::take_writes(task);
            if let Role::Delivery(_) = role {
                // Never acked: the queue delivers it again.
                if let Some(msg) = self.delivering.borrow_mut().remove(&task) {
                    self.retry(msg, 500);
                }
            }
        }
    }

    /// Polls one ready task, then checks what it did.
    pub(super) fn step(self: &Rc<Self>, rng: &mut Rng) -> bool {
        let ready = self.exec.ready();
        if ready.is_empty() {
            return false;
        }
        let id = ready[rng.below(ready.len() as u64) as usize];
        let done = self.exec.poll(id);
        self.after_step(id, done);
        true
    }

    /// Runs the front isolates' tasks to their end, time passing as they need.
    fn drain_front(self: &Rc<Self>) {
        let mut rng = Rng::new(self.op.get());
        for _ in 0..100_000 {
            let front = self
                .exec
                .count(|r| matches!(r, Role::Request(_) | Role::AfterResponse));
            if front == 0 {
                return;
            }
            if !self.step(&mut rng) {
                self.advance(100);
            }
        }
    }
}

/// `input` with `mark` added to its first string member (`text` in every kind the
/// world draws): the intent's own input, or another under the same key.
fn marked(mut input: Value, mark: &str) -> Value {
    if let Some(text) = input
        .as_object_mut()
        .and_then(|members| members.values_mut().find(|v| v.is_string()))
    {
        *text = Value::String(format!("{}{mark}", text.as_str().unwrap_or_default()));
    }
    input
}
