//! One world: a store layout, its places, a queue, providers, clients and isolates,
//! driven operation by operation from one seed, with the reference model and the
//! invariants checked after every step on the jobs that step touched.

use crate::db::{self, AnyMutant, Db, FaultRates, SimPlaces};
use crate::exec::{Exec, Role};
use crate::host::SimHost;
use crate::live::{Live, LiveFigures};
use crate::rng::Rng;
use crate::script::{CallRecord, Script, StreamEnd};
use onceclick_core::sim::{self, alarm, Answer, Dispatch, Layout};
use onceclick_protocol::shard::{Shard, ShardCount};
use onceclick_protocol::{AttemptState, CreateJob, ErrorCode, NewAttempt};
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::rc::Rc;

/// The front isolates (requests and their `wait_until` work), the consumer's, and the
/// reconciler's.
const FRONT: [u32; 2] = [1, 2];
const CONSUMER: u32 = 3;
const RECONCILER: u32 = 4;
/// How soon the runtime runs a shard's alarm again when its handler died: the alarm
/// stays set this far ahead while it runs.
const ALARM_RETRY_MS: u64 = 2_000;
/// The queue's deliveries of one message (`max_retries = 5` in `wrangler.toml`, plus
/// the first).
const DELIVERIES: u32 = 6;
const OWNERS: [&str; 3] = ["alice", "bob", "o:carol"];
/// How often a dispatcher holding a call looks whether it should stop (the Worker's
/// `CANCEL_POLL_MS`), in virtual ms.
pub(crate) const CANCEL_POLL_MS: u64 = 150;

/// The store layouts a world may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// One D1.
    D1,
    /// Shards.
    Shards(u32),
    /// One D1 first, then the move: shards with that D1 kept as the previous store.
    Moved(u32),
}

#[derive(Clone, Debug, Default)]
pub struct Figures {
    pub ops: u64,
    pub requests: u64,
    pub deliveries: u64,
    pub redeliveries: u64,
    pub provider_calls: u64,
    pub reconciles: u64,
    pub crashes: u64,
    pub clock_jumps: u64,
    pub store_faults: u64,
    pub batches: u64,
    pub checks: u64,
    pub jobs: u64,
    pub polls: u64,
    /// Provider calls the dispatcher stopped before their answer (a cancel, a lost race).
    pub stops: u64,
    /// Shard alarms run, and the attempts they handed to the queue.
    pub alarms: u64,
    pub handed_off: u64,
    /// The live channel's.
    pub live: LiveFigures,
}

impl Figures {
    pub fn add(&mut self, o: &Figures) {
        self.ops += o.ops;
        self.requests += o.requests;
        self.deliveries += o.deliveries;
        self.redeliveries += o.redeliveries;
        self.provider_calls += o.provider_calls;
        self.reconciles += o.reconciles;
        self.crashes += o.crashes;
        self.clock_jumps += o.clock_jumps;
        self.store_faults += o.store_faults;
        self.batches += o.batches;
        self.checks += o.checks;
        self.jobs += o.jobs;
        self.polls += o.polls;
        self.stops += o.stops;
        self.alarms += o.alarms;
        self.handed_off += o.handed_off;
        self.live.add(&o.live);
    }
}

/// A broken promise: which, at which operation.
#[derive(Clone, Debug)]
pub struct Violation {
    pub op: u64,
    pub what: String,
}

struct Msg {
    id: u64,
    dispatch: Dispatch,
    due: u64,
    deliveries: u32,
}

/// What the model knows of one intent (one owner's key).
#[derive(Clone, Debug)]
struct Intent {
    owner: &'static str,
    key: String,
    kind: &'static str,
    text: String,
    provider: Option<&'static str>,
    /// The job the key is bound to, once an answer named it.
    job: Option<String>,
    /// Whether a create has answered 201 (bound the key): only one may.
    created: bool,
    /// The request (text, provider) of the job the key is bound to, once an answer
    /// showed it.
    bound: Option<Sent>,
    /// Every request a create under this key has sent.
    sent: BTreeSet<Sent>,
}

/// A create's request as the model tells them apart: its text and the provider it names.
type Sent = (String, Option<&'static str>);

/// What the model last saw of a job.
#[derive(Clone, Debug)]
struct Seen {
    place: String,
    owner: String,
    status: String,
    result: Option<String>,
    completed_by: Option<String>,
    attempts: BTreeMap<String, String>,
    /// Attempts a person resolved as failed.
    resolved_failed: BTreeSet<String>,
    updated_at: String,
    /// The job's last change (`jobs.seq`), its document and its ETag, as last seen.
    seq: i64,
    doc: String,
    etag: String,
}

/// One fallback key of a job: its body's provider, and the attempt its answer named.
type Fallback = (Option<&'static str>, Option<String>);

/// A request in flight, and what its answer must agree with.
#[derive(Clone, Debug)]
enum Request {
    /// A create of intent `intent` with the text `text` and the provider `provider`
    /// (its own, or a changed one).
    Create {
        intent: usize,
        text: String,
        provider: Option<&'static str>,
    },
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
        outcome: &'static str,
    },
    Read {
        job: String,
    },
}

pub(crate) struct World {
    pub(crate) exec: Rc<Exec>,
    db: Rc<Db>,
    places: Rc<SimPlaces>,
    layout: Cell<Layout>,
    shape: Shape,
    pub(crate) vars: BTreeMap<String, String>,
    queue: RefCell<Vec<Msg>>,
    next_msg: Cell<u64>,
    /// Deliveries in flight: task → message.
    delivering: RefCell<BTreeMap<u64, Msg>>,
    calls: RefCell<BTreeMap<String, CallRecord>>,
    /// An isolate's tasks are being dropped by a crash.
    crashing: Cell<bool>,
    rng: RefCell<Rng>,
    intents: RefCell<Vec<Intent>>,
    seen: RefCell<BTreeMap<String, Seen>>,
    /// What the model last saw of each job the purge took.
    purged_seen: RefCell<Vec<Seen>>,
    /// Jobs the purge took (with their keys, which are free again).
    purged: RefCell<BTreeSet<String>>,
    /// Fallback keys per job: key → (body's provider, the attempt its answer named).
    fallbacks: RefCell<BTreeMap<(String, String), Fallback>>,
    /// The body each fallback key's attempt was made with, once an answer named it.
    fallback_bodies: RefCell<BTreeMap<(String, String), Option<&'static str>>>,
    /// Requests in flight: task → request.
    requests: RefCell<BTreeMap<u64, Request>>,
    answers: RefCell<Vec<(u64, Request, Answer)>>,
    /// Attempts whose result the platform gave up on after the store had refused it:
    /// the queue refused the message that carried it, or delivered it six times in
    /// vain. The Worker logged each step (`result_queued`, `enqueue_failed`,
    /// `dispatch_retry`); the output is lost, as designed, with its lines.
    given_up: RefCell<BTreeSet<String>>,
    /// Attempts whose result came after the purge took their job (the log's line).
    purged_lines: RefCell<BTreeSet<String>>,
    /// Attempts a `race_lost` or `late_result_discarded` event names, as the database
    /// recorded them.
    recorded: RefCell<BTreeSet<String>>,
    violations: RefCell<Vec<Violation>>,
    op: Cell<u64>,
    serial: Cell<u64>,
    figures: RefCell<Figures>,
    trace: Option<RefCell<Vec<String>>>,
    rust_mutant: Option<sim::Mutant>,
    move_at: u64,
    /// Every attempt a dispatch message was sent for.
    sent_ids: RefCell<BTreeSet<String>>,
    /// The shard whose alarm runs, by task: one alarm of an object runs at a time.
    alarm_tasks: RefCell<BTreeMap<u64, String>>,
    /// The jobs' hubs and the streams that follow them.
    live: Rc<Live>,
}

fn layout_of(shape: Shape, moved: bool) -> Layout {
    let count = |n: u32| {
        ShardCount::new(n)
            .or(ShardCount::new(1))
            .unwrap_or_else(|| unreachable!())
    };
    match shape {
        Shape::D1 => Layout::One,
        Shape::Shards(n) => Layout::Sharded {
            count: count(n),
            previous: false,
        },
        Shape::Moved(_) if !moved => Layout::One,
        Shape::Moved(n) => Layout::Sharded {
            count: count(n),
            previous: true,
        },
    }
}

fn s(v: Option<&Value>) -> Option<String> {
    v.and_then(|v| match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    })
}

impl World {
    pub(crate) fn new(
        seed: u64,
        shape: Shape,
        mutant: Option<AnyMutant>,
        trace: bool,
        move_at: u64,
    ) -> Rc<Self> {
        let sql_mutant = match mutant {
            Some(AnyMutant::Sql(m)) => Some(m),
            _ => None,
        };
        let rust_mutant = match mutant {
            Some(AnyMutant::Rust(m)) => Some(m),
            _ => None,
        };
        let db = Rc::new(Db::new(seed, sql_mutant));
        let vars = [
            (
                "PROVIDERS",
                json!([
                    {"name": "primary", "base_url": "http://sim/primary/v1", "model": "m-small",
                     "timeout_ms": 1000, "abandon_after_ms": 20000},
                    {"name": "fallback", "base_url": "http://sim/fallback/v1", "model": "m-large",
                     "timeout_ms": 1000, "api_key_secret": "FALLBACK_API_KEY"},
                ])
                .to_string(),
            ),
            ("RECONCILE_STARTING_AFTER_MS", "5000".to_owned()),
            ("RECONCILE_LOST_GRACE_MS", "2000".to_owned()),
            ("JOB_RETENTION_HOURS", "24".to_owned()),
            // Well inside the providers' 1 s timeout, so that stops happen.
            ("CANCEL_POLL_MS", CANCEL_POLL_MS.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        Rc::new(Self {
            exec: Rc::new(Exec::default()),
            places: Rc::new(SimPlaces(db.clone())),
            db,
            layout: Cell::new(layout_of(shape, false)),
            shape,
            vars,
            queue: RefCell::new(Vec::new()),
            next_msg: Cell::new(0),
            delivering: RefCell::new(BTreeMap::new()),
            calls: RefCell::new(BTreeMap::new()),
            crashing: Cell::new(false),
            rng: RefCell::new(Rng::new(seed)),
            intents: RefCell::new(Vec::new()),
            seen: RefCell::new(BTreeMap::new()),
            purged: RefCell::new(BTreeSet::new()),
            purged_seen: RefCell::new(Vec::new()),
            fallbacks: RefCell::new(BTreeMap::new()),
            requests: RefCell::new(BTreeMap::new()),
            fallback_bodies: RefCell::new(BTreeMap::new()),
            answers: RefCell::new(Vec::new()),
            recorded: RefCell::new(BTreeSet::new()),
            purged_lines: RefCell::new(BTreeSet::new()),
            given_up: RefCell::new(BTreeSet::new()),
            violations: RefCell::new(Vec::new()),
            op: Cell::new(0),
            serial: Cell::new(0),
            figures: RefCell::new(Figures::default()),
            trace: trace.then(|| RefCell::new(Vec::new())),
            rust_mutant,
            move_at,
            sent_ids: RefCell::new(BTreeSet::new()),
            alarm_tasks: RefCell::new(BTreeMap::new()),
            live: Live::new(seed),
        })
    }

    fn now(&self) -> u64 {
        crate::platform::now_ms() as u64
    }

    fn note(&self, line: impl FnOnce() -> String) {
        if let Some(trace) = &self.trace {
            let line = format!(
                "#{:<6} t={:<9} {}",
                self.op.get(),
                self.now() - crate::EPOCH_MS,
                line()
            );
            trace.borrow_mut().push(line);
        }
    }

    pub(crate) fn trace(&self) -> Vec<String> {
        self.trace
            .as_ref()
            .map(|t| t.borrow().clone())
            .unwrap_or_default()
    }

    fn violate(&self, what: String) {
        self.note(|| format!("VIOLATION {what}"));
        self.violations.borrow_mut().push(Violation {
            op: self.op.get(),
            what,
        });
    }

    pub(crate) fn violations(&self) -> Vec<Violation> {
        self.violations.borrow().clone()
    }

    pub(crate) fn figures(&self) -> Figures {
        let mut f = self.figures.borrow().clone();
        f.batches = *self.db.batches.borrow();
        f.store_faults = *self.db.faults_fired.borrow();
        f.polls = self.exec.polls.get();
        f.live = self.live.figures();
        f
    }

    pub(crate) fn mutant_ran(&self) -> bool {
        *self.db.mutant_ran.borrow()
    }

    /// A number below `n`, from the run's seed.
    pub(crate) fn below(&self, n: u64) -> u64 {
        self.rng.borrow_mut().below(n)
    }

    pub(crate) fn serial(&self) -> u64 {
        let n = self.serial.get() + 1;
        self.serial.set(n);
        n
    }

    /// A provider's output for `input`: valid for the kind, and different every call.
    pub(crate) fn output(&self, n: u64) -> Value {
        json!({"summary": format!("s{n}"), "sentiment": "neutral"})
    }

    /// A streamed provider's output: as [`World::output`], with text beyond ASCII, so
    /// that the reads' cuts fall inside characters' encodings. One in three is long
    /// (380 characters of 2 to 4 bytes) where the input's text allows it (a summary is
    /// shorter, and at most 400): hubs keep it in many chunks.
    pub(crate) fn streamed_output(&self, n: u64, input: &Value) -> Value {
        let room = input
            .get("text")
            .and_then(Value::as_str)
            .map_or(0, |t| t.chars().count());
        let summary = if n % 3 == 0 && room > 400 {
            let long: String = "é会😀😀".chars().cycle().take(380).collect();
            format!("s{n} {long}")
        } else {
            format!("s{n} é会😀")
        };
        json!({"summary": summary, "sentiment": "neutral"})
    }

    fn store(&self, layout: Layout, scope: &str) -> sim::Store {
        let places: Rc<dyn sim::Places> = self.places.clone();
        match sim::Store::new(places, layout, "", scope) {
            Ok(store) => store,
            Err(e) => panic!("a store with no faults: {e}"),
        }
    }

    /// A store that tells the jobs' hubs of every move it commits, as a request's, the
    /// queue consumer's and the reconciler's do in the Worker (a shard's hand-off moves
    /// no job).
    fn telling_store(&self, layout: Layout, scope: &str) -> sim::Store {
        self.store(layout, scope).with_live(self.live.teller())
    }

    /// A job as a stream or a hub reads it: its position (the ETag's) and document.
    fn live_read(&self, job_id: &str) -> Option<(u64, String)> {
        let place = self.seen.borrow().get(job_id).map(|s| s.place.clone())?;
        let rows = self.db.query(
            &place,
            "SELECT doc, etag FROM job_documents WHERE id = ?1",
            &[json!(job_id)],
        );
        let row = rows.first()?;
        let at = onceclick_protocol::live::Position::of_etag(&s(row.get("etag"))?)?;
        Some((at.0, s(row.get("doc"))?))
    }

    /// The live channel.
    pub(crate) fn live(&self) -> &Live {
        &self.live
    }

    /// The live channel's problems, as violations.
    fn live_problems(&self) {
        for what in self.live.take_problems() {
            self.violate(what);
        }
    }

    fn host(self: &Rc<Self>, isolate: u32) -> SimHost {
        SimHost {
            world: self.clone(),
            isolate,
        }
    }

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
        let id = self.next_msg.get() + 1;
        self.next_msg.set(id);
        let due = self.now() + self.rng.borrow_mut().below(50);
        self.note(|| format!("queue <- {} (msg {id})", dispatch.attempt_id));
        self.sent_ids
            .borrow_mut()
            .insert(dispatch.attempt_id.clone());
        self.queue.borrow_mut().push(Msg {
            id,
            dispatch,
            due,
            deliveries: 0,
        });
        Ok(())
    }

    /// A provider call begins: checked (claimed first, once per attempt), scripted.
    pub(crate) fn provider_call(
        &self,
        attempt_id: &str,
        provider: &str,
        timeout: u64,
    ) -> (Script, u64) {
        self.figures.borrow_mut().provider_calls += 1;
        // Claimed first: the claim (and only the claim) sets the token. The attempt may
        // have been cancelled since, between the claim and the call.
        match self.attempt_claim(attempt_id) {
            Some(Some(_)) => {}
            other => self.violate(format!(
                "provider call for {attempt_id}, which was never claimed ({other:?}): no call before its claim"
            )),
        }
        let mut rng = self.rng.borrow_mut();
        let script = rng.weighted(&[
            (50, Script::Answer),
            (12, Script::FailRetryable),
            (5, Script::FailForGood),
            (8, Script::Hang),
            (10, Script::Late),
            (5, Script::CutOff),
            (5, Script::Streamed(StreamEnd::Stop)),
            (1, Script::Streamed(StreamEnd::Length)),
            (1, Script::Streamed(StreamEnd::ErrorAfterText)),
            (1, Script::Streamed(StreamEnd::ErrorBeforeText)),
            (1, Script::Streamed(StreamEnd::Cut)),
            (1, Script::Streamed(StreamEnd::Refusal)),
        ]);
        let delay = 20 + rng.below(1_100);
        drop(rng);
        if self
            .calls
            .borrow_mut()
            .insert(
                attempt_id.to_owned(),
                CallRecord {
                    script,
                    output: matches!(script, Script::Answer | Script::Streamed(StreamEnd::Stop))
                        && delay <= timeout,
                    task: crate::exec::current(),
                    delivered: false,
                    orphaned: false,
                    stopped_at: None,
                    failed_on_record: false,
                    began: crate::platform::now_ms() as u64,
                    first_text: None,
                },
            )
            .is_some()
        {
            self.violate(format!("a second provider call for attempt {attempt_id}"));
        }
        self.note(|| format!("call {provider} for {attempt_id}: {script:?} in {delay} ms"));
        (script, delay)
    }

    /// A streamed answer's classification: what its end makes of it (the whole output
    /// and its usage, `unknown`, or a failure with its code), and never a retryable
    /// failure once text came (a failover would pay for the work twice). A failure for
    /// good is marked as the call's own record of what was paid for.
    pub(crate) fn check_streamed(
        &self,
        attempt_id: &str,
        end: StreamEnd,
        expected: &Value,
        chars: u64,
        outcome: &onceclick_core::sim::CallOutcome,
    ) {
        use onceclick_core::sim::CallOutcome;
        let usage = Some(onceclick_protocol::chat::Tokens {
            prompt: 9,
            completion: 4,
        });
        let code = |e: &onceclick_protocol::AttemptError, code: &str| e.code == code;
        let fits = match (end, outcome) {
            (StreamEnd::Stop, CallOutcome::Output(output, tokens)) => {
                output == expected && *tokens == usage
            }
            (StreamEnd::Cut, CallOutcome::Unknown(e)) => code(e, "provider_answer_cut_off"),
            (StreamEnd::ErrorBeforeText, CallOutcome::Failed(e)) => {
                e.retryable && code(e, "provider_stream_error")
            }
            (StreamEnd::ErrorAfterText, CallOutcome::Failed(e)) => {
                !e.retryable && code(e, "provider_stream_error")
            }
            (StreamEnd::Length, CallOutcome::Failed(e)) => {
                !e.retryable && code(e, "provider_output_incomplete")
            }
            (StreamEnd::Refusal, CallOutcome::Failed(e)) => {
                !e.retryable && code(e, "provider_refused")
            }
            _ => false,
        };
        if let CallOutcome::Failed(e) = outcome {
            if !e.retryable {
                if let Some(call) = self.calls.borrow_mut().get_mut(attempt_id) {
                    call.failed_on_record = true;
                }
            }
        }
        let retried_paid = matches!(outcome, CallOutcome::Failed(e) if e.retryable && chars > 0);
        if !fits || retried_paid {
            self.violate(format!(
                "streamed answer of {attempt_id} ending {end:?} after {chars} characters was classified {outcome:?}"
            ));
        }
    }

    /// A call is stopped only for a reason: its attempt is `cancelled`, or its job has
    /// succeeded with another attempt.
    fn check_stop_reason(&self, attempt_id: &str) {
        let Some(place) = self.place_of(attempt_id) else {
            return;
        };
        let rows = self.db.query(
            &place,
            "SELECT a.state, j.status, j.completed_by FROM attempts AS a
               JOIN jobs AS j ON j.id = a.job_id WHERE a.id = ?1",
            &[json!(attempt_id)],
        );
        // A purge may have taken the job since its call read the reason: the job's last
        // seen record then says what its rows said.
        let (state, status, completed_by) = match rows.first() {
            Some(row) => (
                s(row.get("state")).unwrap_or_default(),
                s(row.get("status")),
                s(row.get("completed_by")),
            ),
            None => {
                let purged = self.purged_seen.borrow();
                let Some(seen) = purged.iter().find(|j| j.attempts.contains_key(attempt_id)) else {
                    self.violate(format!(
                        "the call of attempt {attempt_id} was stopped, and its attempt is gone"
                    ));
                    return;
                };
                (
                    seen.attempts[attempt_id].clone(),
                    Some(seen.status.clone()),
                    seen.completed_by.clone(),
                )
            }
        };
        let won_by_another =
            status.as_deref() == Some("succeeded") && completed_by.as_deref() != Some(attempt_id);
        if state != "cancelled" && !won_by_another {
            self.violate(format!(
                "the call of attempt {attempt_id} was stopped for no reason: it is {state}, its job {status:?} by {completed_by:?}"
            ));
        }
    }

    /// The call of `attempt_id` read streamed text: the first time, when.
    pub(crate) fn text_came(&self, attempt_id: &str) {
        if let Some(call) = self.calls.borrow_mut().get_mut(attempt_id) {
            call.first_text
                .get_or_insert(crate::platform::now_ms() as u64);
        }
    }

    /// A hedge is only for a call silent since it began: none whose text came within
    /// `after_ms` of its start (text in that very millisecond may go either way).
    fn check_hedge(&self, line: &Value) {
        let (Some(silent), Some(after)) = (
            line.get("silent_attempt").and_then(Value::as_str),
            line.get("after_ms").and_then(Value::as_u64),
        ) else {
            return self.violate(format!("a hedge_started line without its primary: {line}"));
        };
        let spoke = self.calls.borrow().get(silent).and_then(|call| {
            call.first_text
                .filter(|at| *at < call.began + after)
                .map(|at| at - call.began)
        });
        if let Some(ms) = spoke {
            self.violate(format!(
                "a hedge of {silent}, whose streamed text began {ms} ms into its call, within the {after} ms of silence a hedge waits for"
            ));
        }
    }

    pub(crate) fn delivered(&self, attempt_id: &str, due: u64) {
        if let Some(call) = self.calls.borrow_mut().get_mut(attempt_id) {
            call.delivered = true;
        }
        self.call_ended(attempt_id, false, due);
    }

    /// The dispatcher dropped the call before its answer: a stop, unless its isolate is
    /// crashing (the crash marks the call orphaned).
    pub(crate) fn stopped(&self, attempt_id: &str) {
        if !self.crashing.get() {
            self.call_ended(attempt_id, true, u64::MAX);
        }
    }

    /// Where an attempt or job id lives, by the current layout (v7 ids: `d1`).
    fn place_of(&self, id: &str) -> Option<String> {
        match onceclick_protocol::shard::route_of_id(id) {
            onceclick_protocol::shard::IdRoute::Shard(shard) => Some(shard.object_name()),
            onceclick_protocol::shard::IdRoute::Database => Some("d1".to_owned()),
            onceclick_protocol::shard::IdRoute::Unknown => None,
        }
    }

    /// Whether a row with this id is in `table` of any place.
    fn exists(&self, table: &str, id: &str) -> bool {
        let sql = format!("SELECT 1 FROM {table} WHERE id = ?1");
        self.db
            .places()
            .iter()
            .any(|p| !self.db.query(p, &sql, &[json!(id)]).is_empty())
    }

    /// The attempt's claim token (`None` inside: never claimed), if it exists.
    fn attempt_claim(&self, attempt_id: &str) -> Option<Option<String>> {
        let place = self.place_of(attempt_id)?;
        let rows = self.db.query(
            &place,
            "SELECT claim_token FROM attempts WHERE id = ?1",
            &[json!(attempt_id)],
        );
        rows.first().map(|r| s(r.get("claim_token")))
    }

    // --- the operations ---------------------------------------------------------

    /// Runs operation `index` with its own seed.
    pub(crate) fn operation(self: &Rc<Self>, index: u64, seed: u64) {
        self.op.set(index);
        self.figures.borrow_mut().ops += 1;
        let mut rng = Rng::new(seed);
        // A moved world moves halfway, once its front isolates hold no request (the
        // move's first deploy refuses new keys until the old layout's creates are done).
        if let Shape::Moved(_) = self.shape {
            if self.layout.get() == Layout::One && index >= self.move_at {
                self.drain_front();
                self.layout.set(layout_of(self.shape, true));
                self.note(|| "the move: shards, with D1 kept as the previous store".to_owned());
            }
        }
        let pick = rng.weighted(&[
            (14, 0u8), // a new intent
            (8, 1),    // its resend
            (3, 2),    // the same key, another request
            (5, 3),    // the fallback button
            (3, 4),    // cancel
            (3, 5),    // resolve
            (2, 6),    // read
            (14, 7),   // a queue delivery
            (3, 8),    // a reconciler pass
            (16, 9),   // time passes
            (2, 10),   // a clock jump
            (1, 11),   // a crash
            (1, 13),   // a store outage of a few seconds (in a world with faults)
            (10, 14),  // a shard's alarm, if one is due
            (6, 16),   // a shard's hand-off after a create's answer, if one is owed
            (8, 15),   // a live stream opens, drops and reconnects, or a hub restarts
            (30, 12),  // tasks run
        ]);
        match pick {
            0 => self.new_intent(&mut rng),
            1 => self.resend(&mut rng, false),
            2 => self.resend(&mut rng, true),
            3 => self.fallback(&mut rng),
            4 => self.cancel(&mut rng),
            5 => self.resolve(&mut rng),
            6 => self.read(&mut rng),
            7 => self.deliver(&mut rng),
            8 => self.reconcile(&mut rng),
            9 => self.advance(1 + rng.below(400)),
            10 => {
                self.figures.borrow_mut().clock_jumps += 1;
                let ms = rng.weighted(&[(6, 5_000u64), (3, 60_000), (1, 25 * 3_600_000)]);
                self.advance(ms + rng.below(ms));
            }
            11 => self.crash(&mut rng),
            14 => self.alarm(&mut rng),
            16 => self.eager_hand_off(&mut rng),
            15 => {
                let job = self.known_job(&mut rng);
                self.live.act(&mut rng, job, &|id| self.live_read(id));
            }
            // One pick in three: a few outages a world.
            13 if self.db.faults.borrow().before > 0 && rng.below(3) == 0 => {
                let until = self.now() + 3_000 + rng.below(9_000);
                self.note(|| format!("store outage until t={}", until - crate::EPOCH_MS));
                *self.db.outage_until.borrow_mut() = until;
            }
            _ => {}
        }
        for _ in 0..rng.below(6) {
            self.step(&mut rng);
        }
        self.live.tick(self.now(), &|id| self.live_read(id));
        self.live_problems();
        self.outboxes_armed();
    }

    /// A shard that keeps attempts to hand on, with no hand-off under way, has its alarm
    /// set to come when they need it (at once, or in `RETRY_MS` after a refusal), unless
    /// its alarm is running and has yet to set the next: else they wait for the
    /// reconciler's sweep, or the shard's pass (a refusal the hand-off after a create's
    /// answer did not arm for, say). And a shard that holds jobs has its alarm set: else
    /// its pass waits for its next write.
    fn outboxes_armed(&self) {
        let now = self.now();
        let running: BTreeSet<String> = self.alarm_tasks.borrow().values().cloned().collect();
        let late = self
            .db
            .outboxes
            .borrow()
            .iter()
            .filter(|(place, outbox)| !outbox.busy() && !running.contains(*place))
            .find_map(|(place, outbox)| {
                let need = now + outbox.next_in_ms()? as u64;
                let at = self.db.alarms.borrow().get(place).copied();
                at.is_none_or(|at| at > need)
                    .then(|| (place.clone(), at.map(|at| at - now), need - now))
            });
        if let Some((place, at, need)) = late {
            self.violate(match at {
                None => format!(
                    "shard {place} keeps attempts to hand to the queue and has no alarm set: they wait for the reconciler"
                ),
                Some(at) => format!(
                    "shard {place} keeps attempts to hand to the queue and its alarm comes in {at} ms, not within the {need} ms they need: they wait for its pass"
                ),
            });
            return;
        }
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
        if let Some(place) = unarmed {
            self.violate(format!(
                "shard {place} holds jobs and has no alarm set: its reconciler pass waits for its next write"
            ));
            return;
        }
        // Nor is an attempt a create committed, still `starting` and never sent, left
        // where only the reconciler (or the shard's pass) would find it: its shard's
        // alarm is running, or comes within `RETRY_MS` (or the runtime's retry of an
        // alarm whose handler died), or a hand-off holds it (memory that a crash loses,
        // so the alarm must outlive it).
        let soon = now + ALARM_RETRY_MS.max(sim::RETRY_MS as u64);
        let handed = self.db.handed.borrow();
        for (place, ids) in handed.iter() {
            // A new instance takes the newest 1,000 `starting` attempts at most; any
            // beyond are the reconciler's by design (`handoff.rs`).
            let alarm = self.db.alarms.borrow().get(place).copied();
            if ids.len() >= 1_000
                || running.contains(place)
                || alarm.is_some_and(|at| at <= soon)
                || self
                    .db
                    .outboxes
                    .borrow()
                    .get(place)
                    .is_some_and(|o| o.busy())
            {
                continue;
            }
            let sent = self.sent_ids.borrow();
            let lost = ids
                .iter()
                .filter(|id| !sent.contains(*id))
                .find(|id| self.is_starting(place, id));
            if let Some(lost) = lost {
                let lost = lost.clone();
                drop(sent);
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
            let store = world.telling_store(layout, "request");
            let answer = match &req {
                Request::Create {
                    intent,
                    text,
                    provider,
                } => {
                    let i = world.intents.borrow()[*intent].clone();
                    let body = CreateJob {
                        kind: i.kind.to_owned(),
                        input: json!({ "text": text }),
                        provider: provider.map(str::to_owned),
                    };
                    sim::create(&host, &store, i.owner, &i.key, &body, None).await
                }
                Request::Fallback { job, key, body } => {
                    let owner = world.seen.borrow().get(job).map(|s| s.owner.clone()).unwrap_or_default();
                    let body = NewAttempt {
                        provider: body.map(str::to_owned),
                    };
                    sim::fallback(&host, &store, &owner, job, Some(key), &body, None, None).await
                }
                Request::Cancel { job } => {
                    let owner = world.seen.borrow().get(job).map(|s| s.owner.clone());
                    sim::cancel(&store, owner.as_deref(), job).await
                }
                Request::Resolve { attempt, outcome } => {
                    let body = match *outcome {
                        "succeeded" => {
                            json!({"outcome": "succeeded", "result": {"summary": format!("r{}", world.serial()), "sentiment": "neutral"}})
                        }
                        other => json!({ "outcome": other }),
                    };
                    sim::resolve(&store, attempt, &body).await
                }
                Request::Read { job } => sim::read(&store, None, job).await,
            };
            let task = crate::exec::current();
            let request = world.requests.borrow_mut().remove(&task);
            if let Some(request) = request {
                world.answers.borrow_mut().push((task, request, answer));
            }
        });
        self.note(|| format!("  (task {id})"));
        self.requests.borrow_mut().insert(id, request);
    }

    fn new_intent(self: &Rc<Self>, rng: &mut Rng) {
        let n = self.intents.borrow().len();
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
        let intent = Intent {
            owner: OWNERS[rng.below(OWNERS.len() as u64) as usize],
            key: format!("k{n}-{}", rng.below(1_000_000)),
            kind,
            text: format!(
                "The text of intent number {n}, long enough to be summarized in a few words.{more}"
            ),
            provider: (rng.below(5) == 0).then_some("fallback"),
            job: None,
            created: false,
            bound: None,
            sent: BTreeSet::new(),
        };
        self.intents.borrow_mut().push(intent);
        self.create(rng, n, false);
    }

    fn create(self: &Rc<Self>, rng: &mut Rng, intent: usize, mismatch: bool) {
        let (text, provider) = {
            let mut intents = self.intents.borrow_mut();
            let i = &mut intents[intent];
            // Another request under the same key: another text, or another provider
            // (the fingerprint holds both).
            let sent = match (mismatch, rng.below(2)) {
                (false, _) => (i.text.clone(), i.provider),
                (true, 0) => (
                    format!("{} Changed: {}.", i.text, rng.below(1_000)),
                    i.provider,
                ),
                (true, _) => (
                    i.text.clone(),
                    if i.provider.is_some() {
                        None
                    } else {
                        Some("fallback")
                    },
                ),
            };
            i.sent.insert(sent.clone());
            sent
        };
        self.spawn_request(
            rng,
            Request::Create {
                intent,
                text,
                provider,
            },
        );
    }

    fn resend(self: &Rc<Self>, rng: &mut Rng, mismatch: bool) {
        let candidates: Vec<usize> = self
            .intents
            .borrow()
            .iter()
            .enumerate()
            .filter(|(_, i)| !mismatch || i.job.is_some())
            .map(|(n, _)| n)
            .collect();
        if candidates.is_empty() {
            return;
        }
        let intent = candidates[rng.below(candidates.len() as u64) as usize];
        self.create(rng, intent, mismatch);
    }

    fn known_job(&self, rng: &mut Rng) -> Option<String> {
        let seen = self.seen.borrow();
        if seen.is_empty() {
            return None;
        }
        let n = rng.below(seen.len() as u64) as usize;
        seen.keys().nth(n).cloned()
    }

    fn fallback(self: &Rc<Self>, rng: &mut Rng) {
        let Some(job) = self.known_job(rng) else {
            return;
        };
        let earlier: Vec<(String, Option<&'static str>)> = self
            .fallbacks
            .borrow()
            .iter()
            .filter(|((j, _), _)| *j == job)
            .map(|((_, k), (b, _))| (k.clone(), *b))
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
            self.fallbacks
                .borrow_mut()
                .insert((job.clone(), key.clone()), (body, None));
            (key, body)
        };
        self.spawn_request(rng, Request::Fallback { job, key, body });
    }

    fn cancel(self: &Rc<Self>, rng: &mut Rng) {
        if let Some(job) = self.known_job(rng) {
            self.spawn_request(rng, Request::Cancel { job });
        }
    }

    fn read(self: &Rc<Self>, rng: &mut Rng) {
        if let Some(job) = self.known_job(rng) {
            self.spawn_request(rng, Request::Read { job });
        }
    }

    fn resolve(self: &Rc<Self>, rng: &mut Rng) {
        let unknown: Vec<String> = self
            .seen
            .borrow()
            .values()
            .flat_map(|s| {
                s.attempts
                    .iter()
                    .filter(|(_, st)| *st == "unknown")
                    .map(|(id, _)| id.clone())
            })
            .collect();
        let any: Vec<String> = self
            .seen
            .borrow()
            .values()
            .flat_map(|s| s.attempts.keys().cloned())
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
        let outcome = rng.weighted(&[(4, "failed"), (2, "cancelled"), (4, "succeeded")]);
        self.spawn_request(rng, Request::Resolve { attempt, outcome });
    }

    fn deliver(self: &Rc<Self>, rng: &mut Rng) {
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
            let id = self.next_msg.get() + 1;
            self.next_msg.set(id);
            self.queue.borrow_mut().push(Msg {
                id,
                dispatch: msg.dispatch.clone(),
                due: now + rng.below(2_000),
                deliveries: msg.deliveries,
            });
        }
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
                let host = world.host(CONSUMER);
                let store = world.telling_store(layout, &dispatch.attempt_id);
                let outcome = sim::deliver(&host, &store, &dispatch).await;
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
    fn retry(&self, mut msg: Msg, delay: u64) {
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

    fn reconcile(self: &Rc<Self>, rng: &mut Rng) {
        self.figures.borrow_mut().reconciles += 1;
        let layout = match self.layout.get() {
            Layout::Sharded { count, previous } => {
                let n = u64::from(count.get()) + u64::from(previous);
                let i = rng.below(n) as u32;
                if i < count.get() {
                    Layout::Inside(Shard { count, index: i })
                } else {
                    Layout::One
                }
            }
            other => other,
        };
        let world = self.clone();
        self.note(|| format!("reconcile {layout:?}"));
        self.exec.spawn(RECONCILER, Role::Reconcile, async move {
            let host = world.host(RECONCILER);
            let store = world.telling_store(layout, "/v1/_reconcile");
            let _ = sim::reconcile(&host, &store).await;
        });
    }

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
        let Layout::Sharded { count, .. } = self.layout.get() else {
            return None;
        };
        (0..count.get())
            .map(|index| Shard { count, index })
            .find(|shard| shard.object_name() == place)
            .map(Layout::Inside)
    }

    /// The shards whose alarm is due and not running.
    fn due_alarms(&self) -> Vec<String> {
        let now = self.now();
        let running: BTreeSet<String> = self.alarm_tasks.borrow().values().cloned().collect();
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
    fn alarm(self: &Rc<Self>, rng: &mut Rng) {
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
        let committed: Vec<String> = self
            .db
            .handed
            .borrow()
            .get(&place)
            .cloned()
            .unwrap_or_default();
        let starting: Vec<String> = committed
            .into_iter()
            .filter(|id| self.is_starting(&place, id))
            .collect();
        self.note(|| {
            format!(
                "alarm of {place}: {} created attempts starting",
                starting.len()
            )
        });
        let world = self.clone();
        let at = place.clone();
        let task = self.exec.spawn(RECONCILER, Role::Reconcile, async move {
            let host = world.host(RECONCILER);
            let outbox = world.db.outbox(&at);
            let handed = outbox.hand_off(&host).await;
            let every = world.vars.get("RECONCILE_EVERY_MS").map(String::as_str);
            let every = alarm::every_ms(every);
            let kept = world.db.pass_due.borrow().get(&at).copied();
            let pass = alarm::pass(kept, crate::platform::now_ms(), every);
            if pass.keep {
                world.db.pass_due.borrow_mut().insert(at.clone(), pass.due_ms);
            }
            let due = match world.shard_layout(&at) {
                Some(layout) if pass.runs => {
                    world.note(|| format!("alarm of {at}: its reconciler pass"));
                    let store = world.telling_store(layout, "/v1/_reconcile");
                    let _ = sim::reconcile(&host, &store).await;
                    let due = crate::platform::now_ms() + every;
                    world.db.pass_due.borrow_mut().insert(at.clone(), due);
                    due
                }
                _ => pass.due_ms,
            };
            // Decided and set in one step, after the last await.
            let needs = outbox.next_in_ms();
            let holds_jobs = || {
                let rows = world.db.query(&at, sim::HAS_JOBS, &[]);
                let any = rows.first().and_then(|r| r.get("any")).and_then(Value::as_f64);
                any.unwrap_or(1.0) != 0.0
            };
            match alarm::next_in_ms(needs, due, crate::platform::now_ms(), holds_jobs) {
                Some(in_ms) => {
                    let due = world.now() + in_ms as u64;
                    world.db.alarms.borrow_mut().insert(at.clone(), due);
                }
                None => {
                    world.db.alarms.borrow_mut().remove(&at);
                }
            }
            world.figures.borrow_mut().handed_off += handed as u64;
            // Another hand-off under way (one a create started) may hold some of them
            // still: a later alarm checks them.
            let complete = needs != Some(sim::RETRY_MS) && !outbox.busy();
            if complete && starting.len() < 1_000 {
                // Unless something else moved it meanwhile (a cancel).
                let lost = starting.iter().find(|id| {
                    !world.sent_ids.borrow().contains(*id) && world.is_starting(&at, id)
                });
                if let Some(lost) = lost.cloned() {
                    world.violate(format!(
                        "attempt {lost}, committed by a create in {at} and still starting, was never sent to the queue though the shard's alarm ran: a create whose dispatch was lost"
                    ));
                }
            }
        });
        self.alarm_tasks.borrow_mut().insert(task, place);
    }

    /// A shard's hand-off right after a create's commit (`shard.rs` starts it in the
    /// object's `wait_until`, the alarm staying set as the guarantee): the same outbox,
    /// on the objects' isolate, racing the alarm. Whatever it takes and the queue
    /// refuses is kept again; an alarm that runs meanwhile comes again in `RETRY_MS`
    /// (`Outbox::next_in_ms`) for that, and for what a crash of the isolate loses with
    /// the task (the new instance is born with what is `starting`).
    fn eager_hand_off(self: &Rc<Self>, rng: &mut Rng) {
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

    fn advance(&self, ms: u64) {
        let to = self.now() + ms;
        crate::platform::set_now_ms(to as f64);
        self.exec.fire_timers(to);
    }

    /// A call has ended at `now`: answered (it was due at `due`), or stopped. A stop that
    /// stops: once a watch read of the dispatcher has come back with its attempt
    /// `cancelled`, the call must not answer (it may only tie: an answer due by the time
    /// the read came back). How long after the cancel that read comes is the scheduler's
    /// doing here (a task runs when the world lets it), so it is not bounded in virtual
    /// time; the Worker's figure is `cargo xtask bench`'s.
    pub(crate) fn call_ended(&self, attempt_id: &str, stopped: bool, due: u64) {
        let now = self.now();
        let orphaned = {
            let mut calls = self.calls.borrow_mut();
            let Some(call) = calls.get_mut(attempt_id) else {
                return;
            };
            if stopped {
                call.stopped_at = Some(now);
            }
            call.orphaned
        };
        if orphaned {
            return;
        }
        if stopped {
            self.figures.borrow_mut().stops += 1;
            self.note(|| format!("call of {attempt_id} stopped"));
            self.check_stop_reason(attempt_id);
        }
        let seen = self.db.watch_saw_cancel.borrow().get(attempt_id).copied();
        if let Some(seen) = seen {
            if !stopped && seen < due {
                self.violate(format!(
                    "the call of attempt {attempt_id} answered (due at {due}) though its dispatcher's watch had read it cancelled at {seen}: a stop that did not stop"
                ));
            }
        }
    }

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
            db::take_writes(task);
            if let Role::Delivery(_) = role {
                // Never acked: the queue delivers it again.
                if let Some(msg) = self.delivering.borrow_mut().remove(&task) {
                    self.retry(msg, 500);
                }
            }
        }
    }

    /// Polls one ready task, then checks what it did.
    fn step(self: &Rc<Self>, rng: &mut Rng) -> bool {
        let ready = self.exec.ready();
        if ready.is_empty() {
            return false;
        }
        let id = ready[rng.below(ready.len() as u64) as usize];
        let done = self.exec.poll(id);
        self.after_step(id, done);
        true
    }

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

    // --- the checks ---------------------------------------------------------------

    fn after_step(self: &Rc<Self>, task: u64, done: bool) {
        for line in crate::platform::drain_log() {
            let event = line.get("event").and_then(Value::as_str);
            if event == Some("hedge_started") {
                self.check_hedge(&line);
            }
            if event == Some("late_result_discarded")
                && line.get("attempt_state").and_then(Value::as_str) == Some("purged")
            {
                if let Some(a) = line.get("attempt_id").and_then(Value::as_str) {
                    self.purged_lines.borrow_mut().insert(a.to_owned());
                }
            }
        }
        let answers: Vec<_> = std::mem::take(&mut *self.answers.borrow_mut());
        for (task, request, answer) in answers {
            self.check_answer(task, &request, &answer);
        }
        if done {
            db::take_writes(task);
            self.alarm_tasks.borrow_mut().remove(&task);
        }
        let touched: Vec<(String, String)> = std::mem::take(&mut *self.db.touched.borrow_mut())
            .into_iter()
            .collect();
        for (place, job) in touched {
            self.check_job(&place, &job);
        }
        self.live_problems();
    }

    fn check_answer(&self, task: u64, request: &Request, answer: &Answer) {
        self.figures.borrow_mut().checks += 1;
        let writes = db::take_writes(task);
        let status = answer.status;
        let code = answer.code;
        self.note(|| {
            format!(
                "answer {status} {} {}",
                code.map(|c| c.as_str()).unwrap_or(""),
                answer.job.as_ref().map(|j| j.id.as_str()).unwrap_or("")
            )
        });
        if status >= 500 && code != Some(ErrorCode::ServiceUnavailable) {
            self.violate(format!(
                "{request:?} answered {status} {code:?}: a failure on our side ({})",
                answer.cause.as_deref().unwrap_or("no cause")
            ));
            return;
        }
        // A refused request writes nothing but the figures' counters.
        if (400..500).contains(&status) && status != 429 && writes > 0 {
            // One race is no refusal: a resolve that moved the last live attempt of
            // an old ended job, whose job the purge took before the resolve read it
            // back (404, with the attempt gone everywhere).
            let purged_under_it = match request {
                Request::Resolve { attempt, .. } if status == 404 => {
                    self.db.places().iter().all(|p| {
                        self.db
                            .query(p, "SELECT 1 FROM attempts WHERE id = ?1", &[json!(attempt)])
                            .is_empty()
                    })
                }
                _ => false,
            };
            if !purged_under_it {
                self.violate(format!(
                "{request:?} was refused ({status} {code:?}) and wrote {writes} rows outside the figures"
            ));
            }
        }
        if status == 503 {
            return;
        }
        let purged = |id: &str| self.purged.borrow().contains(id);
        match request {
            Request::Create { .. } if answer.job.as_ref().is_some_and(|j| purged(&j.id)) => {}
            Request::Create { .. } if answer.problem_job.as_deref().is_some_and(purged) => {}
            Request::Create {
                intent,
                text,
                provider,
            } => {
                let this: Sent = (text.clone(), *provider);
                let mut intents = self.intents.borrow_mut();
                let i = &mut intents[*intent];
                match (status, code, &answer.job) {
                    (200 | 201, _, Some(job)) => {
                        if let Some(known) = &i.job {
                            if *known != job.id {
                                self.violate(format!(
                                    "key {}/{} answered job {} after job {known}: one key, two jobs",
                                    i.owner, i.key, job.id
                                ));
                            }
                        }
                        if status == 201 {
                            if i.created {
                                self.violate(format!(
                                    "key {}/{} bound twice (201 again) to {}",
                                    i.owner, i.key, job.id
                                ));
                            }
                            i.created = true;
                        }
                        let input = job.input.get("text").and_then(Value::as_str);
                        // No provider asks for the job's own (a replay), or the primary (a
                        // new job).
                        let asked = match (provider, status) {
                            (Some(p), _) => *p,
                            (None, 201) => "primary",
                            (None, _) => job.provider.as_str(),
                        };
                        if input != Some(text.as_str())
                            || job.kind != i.kind
                            || job.provider != asked
                        {
                            self.violate(format!(
                                "key {}/{} answered with a job of another request ({status}): the request was {text:?} on {asked}, the job's {input:?} on {}",
                                i.owner, i.key, job.provider
                            ));
                        }
                        i.job = Some(job.id.clone());
                        i.bound = Some(this.clone());
                    }
                    (409, Some(ErrorCode::IdempotencyKeyReused), _) => {
                        // Only another request can be refused: the key's job has another
                        // text (known), or another text was sent under it (unknown yet).
                        let other = match &i.bound {
                            Some(bound) => !compatible(&this, bound),
                            None => i.sent.iter().any(|t| !compatible(&this, t)),
                        };
                        if !other {
                            self.violate(format!(
                                "key {}/{} refused its own request (409): {text:?}",
                                i.owner, i.key
                            ));
                        }
                        if i.job.is_some() && answer.problem_job.as_ref() != i.job.as_ref() {
                            self.violate(format!(
                                "a 409 for {}/{} names job {:?}, not {:?}",
                                i.owner, i.key, answer.problem_job, i.job
                            ));
                        }
                    }
                    _ => self.violate(format!(
                        "a create of {}/{} answered {status} {code:?}",
                        i.owner, i.key
                    )),
                }
            }
            Request::Fallback { job, key, body } => {
                let made = (status == 200 || status == 201)
                    .then(|| answer.attempt_id.clone())
                    .flatten();
                if let Some(attempt) = made {
                    // A key's attempt answers only the body that made it.
                    let mut bodies = self.fallback_bodies.borrow_mut();
                    match bodies.get(&(job.clone(), key.clone())) {
                        Some(first) if first != body => self.violate(format!(
                            "fallback key {key} of {job} answered the body {body:?} with the attempt of {first:?}"
                        )),
                        _ => {
                            bodies.insert((job.clone(), key.clone()), *body);
                        }
                    }
                    drop(bodies);
                    let mut fallbacks = self.fallbacks.borrow_mut();
                    let entry = fallbacks
                        .entry((job.clone(), key.clone()))
                        .or_insert((None, None));
                    match &entry.1 {
                        Some(first) if *first != attempt => self.violate(format!(
                            "fallback key {key} of {job} made attempt {attempt} after {first}"
                        )),
                        _ => entry.1 = Some(attempt.clone()),
                    }
                    if status == 201 {
                        if let Some(doc) = &answer.job {
                            if doc.result.is_some() || doc.status.as_str() == "cancelled" {
                                self.violate(format!(
                                    "fallback {attempt} was added to {job}, which had ended ({})",
                                    doc.status.as_str()
                                ));
                            }
                            let others_live = doc.attempts.iter().any(|a| {
                                a.id != attempt
                                    && matches!(
                                        a.state,
                                        AttemptState::Starting
                                            | AttemptState::Running
                                            | AttemptState::Unknown
                                    )
                            });
                            if others_live {
                                self.violate(format!("fallback {attempt} of {job} was added beside a live or unknown attempt"));
                            }
                        }
                    }
                } else if !matches!(
                    code,
                    Some(
                        ErrorCode::JobFinished
                            | ErrorCode::AttemptUnresolved
                            | ErrorCode::AttemptInFlight
                            | ErrorCode::IdempotencyKeyReused
                            | ErrorCode::ProviderNotCertified
                            | ErrorCode::NotFound
                            | ErrorCode::UnknownProvider
                    )
                ) {
                    self.violate(format!("fallback on {job} answered {status} {code:?}"));
                }
            }
            Request::Cancel { job } => match (status, code, &answer.job) {
                (200, _, Some(doc)) if doc.status.as_str() == "cancelled" => {}
                (409, Some(ErrorCode::JobFinished), _) => {}
                // Only a job the purge took is not found.
                (404, _, _) if !self.exists("jobs", job) => {}
                _ => self.violate(format!("cancel of {job} answered {status} {code:?}")),
            },
            Request::Resolve { attempt, outcome } => {
                if status == 200 {
                    let state = answer
                        .job
                        .as_ref()
                        .and_then(|j| j.attempts.iter().find(|a| a.id == *attempt))
                        .map(|a| a.state.as_str().to_owned());
                    let ok = match *outcome {
                        "succeeded" => matches!(state.as_deref(), Some("succeeded" | "superseded")),
                        other => state.as_deref() == Some(other),
                    };
                    if !ok {
                        self.violate(format!("resolve {attempt} as {outcome} left it {state:?}"));
                    }
                } else if code == Some(ErrorCode::NotFound) && self.exists("attempts", attempt) {
                    self.violate(format!(
                        "resolve {attempt} answered 404, and the attempt exists"
                    ));
                } else if !matches!(
                    code,
                    Some(
                        ErrorCode::AttemptNotUnknown | ErrorCode::JobFinished | ErrorCode::NotFound
                    )
                ) {
                    self.violate(format!("resolve {attempt} answered {status} {code:?}"));
                }
            }
            Request::Read { job } => match (status, &answer.job) {
                (200, Some(doc)) => {
                    let seen = self.seen.borrow();
                    let result = seen.get(job).and_then(|s| s.result.clone());
                    let known: Option<Value> = result.and_then(|r| serde_json::from_str(&r).ok());
                    // A read may have run before the result was set (its answer is heard
                    // later); a result it shows must be the one.
                    if doc.id != *job
                        || (known.is_some() && doc.result.is_some() && doc.result != known)
                    {
                        self.violate(format!(
                            "a read of {job} answered {} with result {:?}, not {known:?}",
                            doc.id, doc.result
                        ));
                    }
                }
                (404, _) if !self.exists("jobs", job) => {}
                _ => self.violate(format!("a read of {job} answered {status} {code:?}")),
            },
        }
    }

    /// One position per job: its log numbers every change once, from 1 to the job's
    /// counter with no gap and no repeat (the lines read from its rows and the rows of
    /// `job_events` alike), and its ETag is the last change a client can see. The
    /// counter, the document and the ETag.
    fn check_position(&self, place: &str, job_id: &str) -> (i64, String, String) {
        let job = self.db.query(
            place,
            "SELECT j.seq, j.doc_seq, d.doc, d.etag FROM jobs AS j
               JOIN job_documents AS d ON d.id = j.id WHERE j.id = ?1",
            &[json!(job_id)],
        );
        let Some(job) = job.first() else {
            return (0, String::new(), String::new());
        };
        let int = |v: Option<&Value>| v.and_then(Value::as_i64).unwrap_or(-1);
        let (seq, doc_seq) = (int(job.get("seq")), int(job.get("doc_seq")));
        let lines: Vec<(i64, String)> = self
            .db
            .query(
                place,
                "SELECT seq, type FROM job_log WHERE job_id = ?1 ORDER BY seq",
                &[json!(job_id)],
            )
            .into_iter()
            .map(|r| (int(r.get("seq")), s(r.get("type")).unwrap_or_default()))
            .collect();
        let numbers: Vec<i64> = lines.iter().map(|l| l.0).collect();
        if numbers != (1..=seq).collect::<Vec<_>>() {
            self.violate(format!(
                "job {job_id}'s log numbers its changes {numbers:?}, its counter is {seq}"
            ));
        }
        let shown = lines
            .iter()
            .filter(|(_, t)| {
                !matches!(
                    t.as_str(),
                    "dispatch_ignored" | "failover_skipped" | "late_result_discarded"
                )
            })
            .map(|l| l.0)
            .max();
        if shown != Some(doc_seq) || s(job.get("etag")) != Some(format!("\"{doc_seq}\"")) {
            self.violate(format!(
                "job {job_id}'s ETag {:?} (doc_seq {doc_seq}) is not its last change a client sees, {shown:?}",
                job.get("etag")
            ));
        }
        let (doc, etag) = (
            s(job.get("doc")).unwrap_or_default(),
            s(job.get("etag")).unwrap_or_default(),
        );
        if let Some(at) = onceclick_protocol::live::Position::of_etag(&etag) {
            self.live.record(job_id, at.0, &doc, "read");
        }
        (seq, doc, etag)
    }

    /// The invariants of one job a step touched.
    fn check_job(&self, place: &str, job_id: &str) {
        self.figures.borrow_mut().checks += 1;
        let rows = self.db.query(
            place,
            "SELECT owner_id, idempotency_key, status, result, completed_by, updated_at FROM jobs WHERE id = ?1",
            &[json!(job_id)],
        );
        let Some(row) = rows.first() else {
            // Gone: only a purge removes a job, and only one that has ended with
            // nothing live or unknown.
            if let Some(seen) = self.seen.borrow_mut().remove(job_id) {
                let live = seen
                    .attempts
                    .values()
                    .any(|st| matches!(st.as_str(), "starting" | "running" | "unknown"));
                // Only past retention (`JOB_RETENTION_HOURS = 24`) since its last change.
                let cutoff = crate::platform::rfc3339((self.now() - 24 * 3_600_000) as f64);
                if seen.updated_at > cutoff {
                    self.violate(format!(
                        "job {job_id} was purged though it last changed at {}, within retention",
                        seen.updated_at
                    ));
                }
                if live || !matches!(seen.status.as_str(), "succeeded" | "failed" | "cancelled") {
                    self.violate(format!(
                        "job {job_id} was purged while {} with attempts {:?}",
                        seen.status, seen.attempts
                    ));
                }
                self.note(|| format!("job {job_id} purged"));
                // Its events go with it; what its attempts were paid for is checked when
                // the world settles (a result still in the queue may come after).
                self.purged_seen.borrow_mut().push(seen.clone());
                // Its key is free again: a resend may bind a new job.
                self.purged.borrow_mut().insert(job_id.to_owned());
                for intent in self.intents.borrow_mut().iter_mut() {
                    if intent.job.as_deref() == Some(job_id) {
                        intent.job = None;
                        intent.created = false;
                        intent.bound = None;
                    }
                }
            }
            return;
        };
        let attempts: BTreeMap<String, (String, Option<String>)> = self
            .db
            .query(
                place,
                "SELECT id, state, error FROM attempts WHERE job_id = ?1",
                &[json!(job_id)],
            )
            .into_iter()
            .map(|r| {
                let id = s(r.get("id")).unwrap_or_default();
                (
                    id,
                    (s(r.get("state")).unwrap_or_default(), s(r.get("error"))),
                )
            })
            .collect();
        // Tokens are written only with an answer (its attempt won, or lost the race),
        // and are what the provider stated: the sim's streamed answers state 9 and 4,
        // its whole answers nothing.
        for r in self.db.query(
            place,
            "SELECT id, state, tokens FROM attempts WHERE job_id = ?1 AND tokens IS NOT NULL",
            &[json!(job_id)],
        ) {
            let state = s(r.get("state")).unwrap_or_default();
            let tokens = s(r.get("tokens")).unwrap_or_default();
            let stated = serde_json::from_str::<serde_json::Value>(&tokens).ok()
                == Some(json!({"prompt": 9, "completion": 4}));
            if !matches!(state.as_str(), "succeeded" | "superseded") || !stated {
                self.violate(format!(
                    "attempt {:?} of job {job_id} is {state} with tokens {tokens}: only an answer's attempt carries what its provider stated",
                    s(r.get("id"))
                ));
            }
        }
        // What the database recorded of results that did not become the job's.
        for r in self.db.query(
            place,
            "SELECT attempt_id FROM job_events WHERE job_id = ?1 AND attempt_id IS NOT NULL
                AND type IN ('race_lost', 'late_result_discarded')",
            &[json!(job_id)],
        ) {
            if let Some(a) = s(r.get("attempt_id")) {
                self.recorded.borrow_mut().insert(a);
            }
        }
        let status = s(row.get("status")).unwrap_or_default();
        let result = s(row.get("result"));
        let completed_by = s(row.get("completed_by"));
        let owner = s(row.get("owner_id")).unwrap_or_default();
        let key = s(row.get("idempotency_key")).unwrap_or_default();
        let winners: Vec<&String> = attempts
            .iter()
            .filter(|(_, (st, _))| st == "succeeded")
            .map(|(id, _)| id)
            .collect();
        if winners.len() > 1 {
            self.violate(format!(
                "job {job_id} has {} winners: {winners:?}",
                winners.len()
            ));
        }
        if (status == "succeeded") != completed_by.is_some()
            || completed_by.is_some() != result.is_some()
        {
            self.violate(format!(
                "job {job_id} is {status} with completed_by {completed_by:?} and result {result:?}"
            ));
        }
        if let Some(by) = &completed_by {
            if attempts.get(by).map(|a| a.0.as_str()) != Some("succeeded") {
                self.violate(format!(
                    "job {job_id} was completed by {by}, which is {:?}",
                    attempts.get(by)
                ));
            }
        }
        let mut seen_map = self.seen.borrow_mut();
        let first = !seen_map.contains_key(job_id);
        if first {
            self.figures.borrow_mut().jobs += 1;
        }
        let seen = seen_map.entry(job_id.to_owned()).or_insert_with(|| Seen {
            place: place.to_owned(),
            owner: owner.clone(),
            status: status.clone(),
            result: None,
            completed_by: None,
            attempts: BTreeMap::new(),
            resolved_failed: BTreeSet::new(),
            updated_at: String::new(),
            seq: 0,
            doc: String::new(),
            etag: String::new(),
        });
        let (seq, doc, etag) = self.check_position(place, job_id);
        if seq < seen.seq {
            self.violate(format!(
                "job {job_id}'s change counter went back from {} to {seq}",
                seen.seq
            ));
        }
        if !seen.doc.is_empty() && (seen.doc != doc) != (seen.etag != etag) {
            self.violate(format!(
                "job {job_id}'s ETag went from {} to {etag} while its document {}",
                seen.etag,
                if seen.doc == doc {
                    "stayed the same"
                } else {
                    "changed"
                }
            ));
        }
        seen.seq = seq;
        seen.doc = doc;
        seen.etag = etag;
        if seen.result.is_some() && (seen.result != result || seen.completed_by != completed_by) {
            self.violate(format!(
                "job {job_id}'s result changed from {:?} by {:?} to {result:?} by {completed_by:?}",
                seen.result, seen.completed_by
            ));
        }
        if matches!(seen.status.as_str(), "succeeded" | "cancelled") && seen.status != status {
            self.violate(format!(
                "job {job_id} was {} and is now {status}: an ended job changed",
                seen.status
            ));
        }
        for (id, (_, error)) in &attempts {
            if error
                .as_deref()
                .is_some_and(|e| e.contains("\"resolved_failed\""))
            {
                seen.resolved_failed.insert(id.clone());
            }
        }
        for (id, (state, _)) in &attempts {
            if let Some(before) = seen.attempts.get(id) {
                if before != state && !legal_move(before, state) {
                    self.violate(format!(
                        "attempt {id} moved {before} → {state}, not a move that exists"
                    ));
                }
            }
        }
        seen.status = status;
        seen.updated_at = s(row.get("updated_at")).unwrap_or_default();
        seen.result = result;
        seen.completed_by = completed_by;
        seen.attempts = attempts.into_iter().map(|(id, (st, _))| (id, st)).collect();
        let place_first = seen.place.clone();
        drop(seen_map);
        if first {
            // One job per (owner, key), across every place.
            let mut count = 0;
            for p in self.db.places() {
                count += self
                    .db
                    .query(
                        &p,
                        "SELECT id FROM jobs WHERE owner_id = ?1 AND idempotency_key = ?2",
                        &[json!(owner), json!(key)],
                    )
                    .len();
            }
            if count > 1 {
                self.violate(format!(
                    "{count} jobs for ({owner}, {key}) across the places (one in {place_first})"
                ));
            }
        }
    }

    // --- the end of a world -------------------------------------------------------

    /// Faults stop, time passes, every message is delivered and every place is
    /// reconciled until nothing moves; then no job may be stuck, and no paid-for work
    /// lost without a record.
    pub(crate) fn settle(self: &Rc<Self>) {
        *self.db.faults.borrow_mut() = FaultRates::default();
        *self.db.outage_until.borrow_mut() = 0;
        let mut rng = Rng::new(0x5E77);
        self.op.set(self.op.get() + 1);
        self.note(|| "settle: faults stop, time passes".to_owned());
        // Long enough for every rule of the reconciler to apply (a lost dispatch after
        // 5 s, a lost dispatcher after timeout + 2 s, an abandon after 20 s), twice over.
        let start = self.now();
        let mut last_pass = 0;
        for _ in 0..20_000 {
            while self.step(&mut rng) {}
            let now = self.now();
            self.live.tick(now, &|id| self.live_read(id));
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
            if now >= last_pass + 10_000 {
                last_pass = now;
                self.reconcile_everywhere();
                continue;
            }
            if now >= start + 120_000 && self.exec.is_empty() && self.queue.borrow().is_empty() {
                break;
            }
            let next_due = self.queue.borrow().iter().map(|m| m.due).min();
            let next_alarm = self.db.alarms.borrow().values().copied().min();
            let next = [
                self.exec.next_timer(),
                next_due,
                next_alarm,
                Some(last_pass + 10_000),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + 1_000);
            self.advance(next.saturating_sub(now).max(1));
        }
        // Every job the model saw, read once more.
        let jobs: Vec<(String, String)> = self
            .seen
            .borrow()
            .iter()
            .map(|(id, s)| (s.place.clone(), id.clone()))
            .collect();
        for (place, job) in &jobs {
            self.check_job(place, job);
        }
        let left = (self.exec.count(|_| true), self.queue.borrow().len());
        if left != (0, 0) {
            self.violate(format!(
                "the world did not settle: {} tasks and {} messages left once faults stopped and time passed",
                left.0, left.1
            ));
        }
        for (job_id, seen) in self.seen.borrow().iter() {
            let waiting = seen.attempts.values().any(|st| st == "unknown");
            let live = seen
                .attempts
                .values()
                .any(|st| matches!(st.as_str(), "starting" | "running"));
            if live
                || !(matches!(seen.status.as_str(), "succeeded" | "failed" | "cancelled")
                    || (waiting && seen.status == "unknown"))
            {
                self.violate(format!(
                    "job {job_id} is stuck: {} with attempts {:?} once faults stopped and time passed",
                    seen.status, seen.attempts
                ));
            }
            self.check_paid(seen, false);
        }
        for seen in self.purged_seen.borrow().iter() {
            self.check_paid(seen, true);
        }
        self.live.settle(&|id| self.live_read(id));
        self.live_problems();
    }

    /// Nothing paid for is lost without a record: every call whose provider did the work
    /// ended as the job's result or `superseded`, or with a `race_lost` or
    /// `late_result_discarded` event naming its attempt; or, when the dispatcher never
    /// had an output to record (a late or cut-off answer, or a crash took it), the
    /// attempt went to `unknown` and on to a person's or the abandon rule's decision.
    fn check_paid(&self, seen: &Seen, purged: bool) {
        let calls = self.calls.borrow();
        let recorded = self.recorded.borrow();
        for (attempt, state) in &seen.attempts {
            let Some(call) = calls.get(attempt) else {
                continue;
            };
            if !call.script.paid() {
                continue;
            }
            // A result that came after the purge took its job has no row to go to: its
            // record is the log line (`attempt_state: purged`).
            let kept = matches!(state.as_str(), "succeeded" | "superseded")
                || recorded.contains(attempt)
                || (purged && self.purged_lines.borrow().contains(attempt));
            let held = call.output && call.delivered && !call.orphaned;
            // A call that failed on its own record: its attempt's error is the record.
            let kept = kept || (call.failed_on_record && state == "failed");
            let ok = if held && !self.given_up.borrow().contains(attempt) {
                // The dispatcher had the output and lived: it must have recorded it.
                kept
            } else {
                kept || matches!(state.as_str(), "unknown" | "abandoned" | "cancelled")
                    || seen.resolved_failed.contains(attempt)
            };
            if !ok {
                self.violate(format!(
                    "paid work of attempt {attempt} ({:?}, output {}, delivered {}, dispatcher crashed {}) was lost without a record: it is {state}",
                    call.script, call.output, call.delivered, call.orphaned
                ));
            }
        }
    }

    fn reconcile_everywhere(self: &Rc<Self>) {
        let layouts: Vec<Layout> = match self.layout.get() {
            Layout::Sharded { count, previous } => (0..count.get())
                .map(|index| Layout::Inside(Shard { count, index }))
                .chain(previous.then_some(Layout::One))
                .collect(),
            other => vec![other],
        };
        for layout in layouts {
            let world = self.clone();
            self.exec.spawn(RECONCILER, Role::Reconcile, async move {
                let host = world.host(RECONCILER);
                let store = world.telling_store(layout, "/v1/_reconcile");
                let _ = sim::reconcile(&host, &store).await;
            });
        }
    }

    /// Before the first operation: the fallback provider certified (no faults).
    pub(crate) fn setup(self: &Rc<Self>, faults: FaultRates) {
        sim::plant(self.rust_mutant);
        let world = self.clone();
        let layout = self.layout.get();
        self.exec.spawn(RECONCILER, Role::Setup, async move {
            let host = world.host(RECONCILER);
            let store = world.store(layout, "setup");
            let _ = sim::certify(&host, &store, "fallback").await;
        });
        let mut rng = Rng::new(1);
        while self.step(&mut rng) {}
        let _ = crate::platform::drain_log();
        *self.db.faults.borrow_mut() = faults;
        // In a moved world the shards are certified at the move: once now is enough,
        // since every shard's copy is written by the same call (it goes everywhere).
        if let Shape::Moved(n) = self.shape {
            let world = self.clone();
            let layout = layout_of(Shape::Moved(n), true);
            self.exec.spawn(RECONCILER, Role::Setup, async move {
                let host = world.host(RECONCILER);
                let store = world.store(layout, "setup");
                let _ = sim::certify(&host, &store, "fallback").await;
            });
            *self.db.faults.borrow_mut() = FaultRates::default();
            while self.step(&mut rng) {}
            let _ = crate::platform::drain_log();
            *self.db.faults.borrow_mut() = faults;
        }
        db::clear_writes();
    }

    pub(crate) fn summary(&self) -> String {
        let mut out = String::new();
        let jobs = self.seen.borrow();
        let mut by: BTreeMap<&str, usize> = BTreeMap::new();
        for s in jobs.values() {
            *by.entry(s.status.as_str()).or_insert(0) += 1;
        }
        let _ = write!(out, "{} jobs {:?}", jobs.len(), by);
        out
    }
}

/// Whether a create's request `asked` repeats the one that bound the key, `bound`:
/// the same text, and the same provider or none (a request that names no provider asks
/// for the job's own).
fn compatible(asked: &Sent, bound: &Sent) -> bool {
    asked.0 == bound.0 && (asked.1.is_none() || asked.1 == Some(bound.1.unwrap_or("primary")))
}

fn legal_move(from: &str, to: &str) -> bool {
    let parse = |s: &str| serde_json::from_value::<AttemptState>(Value::String(s.to_owned())).ok();
    match (parse(from), parse(to)) {
        (Some(a), Some(b)) => a.can_move_to(b),
        _ => false,
    }
}
