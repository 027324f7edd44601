//! Model-based testing against the real Worker, held to the simulator's reference model
//! (`onceclick_sim::model`): one model of the contract, run twice. The simulation
//! (`sim/`) runs the core's decisions under that model a million operations a CI run;
//! this run drives the real Worker in `wrangler dev` (the JS shell, workerd, local D1 or
//! Durable Object shards, the local queue and cron) with a scripted provider, and holds
//! its HTTP answers and documents to the same model.
//!
//! proptest draws random sequences of operations over three jobs' keys — two keys of one
//! owner, and the first of those keys again under a second owner — and two providers
//! (`primary`, and `fallback`, which abandons an `unknown` attempt after 200 ms):
//! create, replay and mismatch; the fallback button on either provider, with and
//! without a lost answer; provider outcomes delivered in any order (success, 429, 5xx,
//! a rejection, a contract violation, an ambiguous 504, or held past the provider's
//! timeout, then answering late); cancel, admin resolve, a redelivered dispatch,
//! reconciler ticks, and clock advances (`Age`: a job's rows are backdated 30 days, so
//! the next tick finds its dispatcher dead, abandons what may be abandoned, and purges
//! the job if it has ended, freeing its key).
//!
//! The shared model judges every answer and every read: one key, one job (a replay
//! answers it, only one `201`, another request is `409` naming it: `Key`); a refusal
//! writes nothing (`Reply::is_refusal`, against the D1 file); the fallback button is
//! refused in the contract's order (`fallback_refusal`) and its key answers one attempt
//! (`FallbackKey`); what a cancel and a resolve may answer; at most one winner, and
//! `succeeded` exactly with a result (`JobView::broken`); a result never changes, an
//! attempt reaches its states only by `AttemptState::MOVES` (between two reads, by a
//! path of them: `JobRecord::next_read`), and the ETag moves exactly when the document
//! does (`JobRecord`).
//!
//! What this run checks on its own is what only the real platform shows: a mirror of
//! each attempt predicts the state the scripted provider's answer, a held call, the
//! provider's timeout or a reconciler pass leaves it in (the provider adapter's
//! classification, the queue, the cron, the Durable Objects' alarms); abandonment on
//! time; the provider called at most once per attempt, and only after its claim (the
//! mock's record against the D1 file); one job per key across the real places; and the
//! HTTP edge's problem+json and `Idempotent-Replayed`.
//!
//! A failing sequence is shrunk, and printed as a ready-to-paste regression test.
//! `cargo xtask test` runs at least 250 operations, every kind of operation and every
//! rarer path among them (the simulation runs the million); `ONCECLICK_SOAK=1`
//! (`cargo xtask test --soak`) runs 50,000.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onceclick_protocol::{AttemptState, ErrorCode, Job, JobStatus};
use onceclick_sim::model::{
    cancel_answer, fallback_refusal, resolve_answer, Create, FallbackKey, JobRecord, JobView, Key,
    Reply, Resolution,
};
use onceclick_tests::client::{self, send, unique, Api, Mock};
use onceclick_tests::{db, report};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The test Worker's provider timeout (`TEST_TIMEOUT_MS` in xtask).
const PROVIDER_TIMEOUT: Duration = Duration::from_millis(4000);

/// What the provider will do with one attempt's call, once the test lets it answer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    RateLimited,
    Unavailable,
    Rejected,
    Violation,
    GatewayTimeout,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    Primary,
    Fallback,
}

impl Provider {
    fn name(self) -> &'static str {
        match self {
            Provider::Primary => "primary",
            Provider::Fallback => "fallback",
        }
    }
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Provider::Primary => write!(f, "Provider::Primary"),
            Provider::Fallback => write!(f, "Provider::Fallback"),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum How {
    Failed,
    Cancelled,
    Succeeded,
}

impl How {
    fn resolution(self) -> Resolution {
        match self {
            How::Failed => Resolution::Failed,
            How::Cancelled => Resolution::Cancelled,
            How::Succeeded => Resolution::Succeeded,
        }
    }
}

// Printed with their type, so that a shrunk sequence pastes as Rust.
impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            Outcome::Success => "Success",
            Outcome::RateLimited => "RateLimited",
            Outcome::Unavailable => "Unavailable",
            Outcome::Rejected => "Rejected",
            Outcome::Violation => "Violation",
            Outcome::GatewayTimeout => "GatewayTimeout",
        };
        write!(f, "Outcome::{name}")
    }
}

impl std::fmt::Debug for How {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            How::Failed => "Failed",
            How::Cancelled => "Cancelled",
            How::Succeeded => "Succeeded",
        };
        write!(f, "How::{name}")
    }
}

#[derive(Clone, Debug)]
pub enum Op {
    /// `POST /v1/jobs` with key `key` and text number `text`; a new job's first
    /// attempt will end with `outcome`, at once, or (`held`) when a `Deliver` lets it.
    Create {
        key: u8,
        text: u8,
        outcome: Outcome,
        held: bool,
    },
    /// The fallback button, naming `provider`; with `lost_answer`, the answer is lost and
    /// the very same request (same `Idempotency-Key`) is sent again.
    Fallback {
        key: u8,
        provider: Provider,
        lost_answer: bool,
        outcome: Outcome,
        held: bool,
    },
    /// The provider answers the job's held call.
    Deliver {
        key: u8,
    },
    Cancel {
        key: u8,
    },
    /// An admin resolves the job's `unknown` attempt (or tries, on its last one).
    Resolve {
        key: u8,
        how: How,
    },
    /// An admin re-sends the dispatch of the job's last attempt.
    Redispatch {
        key: u8,
    },
    /// One reconciler pass.
    Tick,
    /// The clock jumps 30 days for one job (its `updated_at` and every `dispatched_at`
    /// are backdated), then one reconciler pass.
    Age {
        key: u8,
    },
}

impl Op {
    /// The kinds of operation, as the report names them.
    const KINDS: [&'static str; 8] = [
        "create",
        "fallback",
        "deliver",
        "cancel",
        "resolve",
        "redispatch",
        "tick",
        "age",
    ];

    /// This operation's place in [`Op::KINDS`].
    fn kind(&self) -> usize {
        match self {
            Op::Create { .. } => 0,
            Op::Fallback { .. } => 1,
            Op::Deliver { .. } => 2,
            Op::Cancel { .. } => 3,
            Op::Resolve { .. } => 4,
            Op::Redispatch { .. } => 5,
            Op::Tick => 6,
            Op::Age { .. } => 7,
        }
    }
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        4 => Just(Outcome::Success),
        1 => Just(Outcome::RateLimited),
        1 => Just(Outcome::Unavailable),
        1 => Just(Outcome::Rejected),
        1 => Just(Outcome::Violation),
        2 => Just(Outcome::GatewayTimeout),
    ]
}

/// A held call blocks the local queue's consumer (it runs one batch at a time) until
/// it is let go or times out, so few calls are held.
fn held() -> impl Strategy<Value = bool> {
    prop_oneof![15 => Just(false), 1 => Just(true)]
}

/// Jobs per case: `SLOTS` keys, the last one the first key again under another owner.
const SLOTS: usize = 3;

/// A reconciler pass acts on every case at once (it abandons `fallback`'s `unknown`
/// attempts), so the runners take turns: an operation holds this shared, a pass
/// exclusively. Each operation first reads what passes did since its case's last one.
static PASSES: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// How often each kind of operation sent something, for the report: every kind must
/// reach the real Worker.
static SENT: [AtomicUsize; Op::KINDS.len()] = [const { AtomicUsize::new(0) }; Op::KINDS.len()];

/// How often the rarer paths were reached, for the report: a suite that never reaches
/// a path proves nothing about it.
static PURGED: AtomicUsize = AtomicUsize::new(0);
static FOUND_LOST: AtomicUsize = AtomicUsize::new(0);
static ABANDONED: AtomicUsize = AtomicUsize::new(0);
static LATE_RESOLVED: AtomicUsize = AtomicUsize::new(0);
static ON_FALLBACK: AtomicUsize = AtomicUsize::new(0);
static STOPPED: AtomicUsize = AtomicUsize::new(0);

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..SLOTS as u8;
    let provider = prop_oneof![Just(Provider::Primary), Just(Provider::Fallback)];
    prop_oneof![
        4 => (key.clone(), 0u8..2, outcome(), held())
            .prop_map(|(key, text, outcome, held)| Op::Create { key, text, outcome, held }),
        3 => (key.clone(), provider, any::<bool>(), outcome(), held())
            .prop_map(|(key, provider, lost_answer, outcome, held)| {
                Op::Fallback { key, provider, lost_answer, outcome, held }
            }),
        2 => key.clone().prop_map(|key| Op::Deliver { key }),
        1 => key.clone().prop_map(|key| Op::Cancel { key }),
        2 => (key.clone(), prop_oneof![Just(How::Failed), Just(How::Cancelled), Just(How::Succeeded)])
            .prop_map(|(key, how)| Op::Resolve { key, how }),
        1 => key.clone().prop_map(|key| Op::Redispatch { key }),
        1 => Just(Op::Tick),
        1 => key.prop_map(|key| Op::Age { key }),
    ]
}

/// Mostly one operation; sometimes a short story whose steps rarely meet by chance:
/// a dispatcher found dead mid-call (a held call, then the clock jumps), its call then
/// answering late; or a job failed over by hand to `fallback`, whose 504 leaves an
/// `unknown` for the reconciler to abandon. The stories are what only the real platform
/// can show (a held call, the queue, the cron, a timeout on the real clock), so a CI
/// run tells one chunk in five: its few hundred operations reach each rarer path several
/// times. The soak (`soak`), whose breadth is its point, tells one in thirteen.
fn chunk(soak: bool) -> impl Strategy<Value = Vec<Op>> {
    let key = 0u8..SLOTS as u8;
    let (single, story) = if soak { (24, 1) } else { (17, 2) };
    prop_oneof![
        single => op().prop_map(|op| vec![op]),
        story => (key.clone(), outcome(), any::<bool>()).prop_map(|(key, outcome, late)| {
            let mut ops = vec![Op::Create { key, text: 0, outcome, held: true }, Op::Age { key }];
            if late {
                ops.push(Op::Deliver { key });
            }
            ops
        }),
        story => key.prop_map(|key| vec![
            Op::Create { key, text: 0, outcome: Outcome::Unavailable, held: false },
            Op::Fallback {
                key,
                provider: Provider::Fallback,
                lost_answer: false,
                outcome: Outcome::GatewayTimeout,
                held: false,
            },
            Op::Tick,
        ]),
    ]
}

/// A sequence, printed (on failure, after shrinking) as a regression test to paste.
#[derive(Clone)]
pub struct Ops(Vec<Op>);

impl std::fmt::Debug for Ops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "\n#[test]\nfn regression() {{\n    replay(vec![")?;
        for op in &self.0 {
            writeln!(f, "        Op::{op:?},")?;
        }
        write!(f, "    ]);\n}}")
    }
}

// ---- the mirror: what the test knows of each job -------------------------------------

/// What the test knows of one attempt: its scripted provider call, and the state the
/// platform must have left it in.
#[derive(Debug, Clone)]
struct MAttempt {
    id: String,
    provider: Provider,
    state: AttemptState,
    /// `unknown` because the reconciler found its dispatcher dead (not by the call's
    /// own timeout): the held call may still answer, and that answer resolves it.
    lost: bool,
    outcome: Outcome,
    gate: String,
    released: bool,
    /// When its call reached the provider (the mock), by the test's clock.
    called_at: Instant,
}

/// What the test knows of one job: its attempts as the mirror predicts them, and what
/// the shared model last saw of it (`record`).
#[derive(Debug, Clone)]
struct MJob {
    id: String,
    marker: String,
    attempts: Vec<MAttempt>,
    cancelled: bool,
    record: JobRecord,
}

impl MJob {
    fn states(&self) -> Vec<AttemptState> {
        self.attempts.iter().map(|a| a.state).collect()
    }

    fn won(&self) -> bool {
        self.attempts
            .iter()
            .any(|a| a.state == AttemptState::Succeeded)
    }

    /// Succeeded or cancelled: nothing more can happen to it.
    fn is_final(&self) -> bool {
        self.won() || self.cancelled
    }

    fn status(&self) -> JobStatus {
        if self.won() {
            JobStatus::Succeeded
        } else if self.cancelled {
            JobStatus::Cancelled
        } else {
            JobStatus::rollup(&self.states())
        }
    }
}

/// An HTTP answer as the shared model reads it (its [`Reply`] borrows from this).
struct Heard {
    status: u16,
    code: Option<ErrorCode>,
    job: Option<Job>,
    attempt_id: Option<String>,
    problem_job: Option<String>,
}

impl Heard {
    /// An answer whose success carries a job's document (a create, a cancel, a resolve).
    fn job(reply: &client::Reply) -> Result<Self, TestCaseError> {
        let mut heard = Self::problem(reply)?;
        if heard.code.is_none() {
            let doc = serde_json::from_str(&reply.text)
                .map_err(|e| fail(format!("not a job's document ({e}): {}", reply.text)))?;
            heard.job = Some(doc);
        }
        Ok(heard)
    }

    /// An answer whose success carries an attempt (the fallback button's).
    fn attempt(reply: &client::Reply) -> Result<Self, TestCaseError> {
        let mut heard = Self::problem(reply)?;
        if heard.code.is_none() {
            heard.attempt_id = reply.json()["id"].as_str().map(str::to_owned);
        }
        Ok(heard)
    }

    /// The status; for an error, its problem+json's code and the job it names.
    fn problem(reply: &client::Reply) -> Result<Self, TestCaseError> {
        let (code, problem_job) = if reply.status >= 400 {
            let code = reply.problem_code();
            let code = ErrorCode::parse(&code)
                .ok_or_else(|| fail(format!("a problem with an unknown code: {}", reply.text)))?;
            let job = reply.json()["job_id"].as_str().map(str::to_owned);
            (Some(code), job)
        } else {
            (None, None)
        };
        Ok(Self {
            status: reply.status,
            code,
            job: None,
            attempt_id: None,
            problem_job,
        })
    }

    fn reply(&self) -> Reply<'_> {
        Reply {
            status: self.status,
            code: self.code,
            job: self.job.as_ref(),
            attempt_id: self.attempt_id.as_deref(),
            problem_job: self.problem_job.as_deref(),
        }
    }
}

struct Case<'a> {
    api: &'a Api,
    mock: &'a Mock,
    /// Prefix of every marker, key and owner of this case.
    case_id: String,
    tokens: [String; 2],
    admin: String,
    keys: [String; 2],
    /// Each slot's `Idempotency-Key` as the shared model knows it.
    intents: [Key; SLOTS],
    /// How many jobs each slot has had purged: part of its marker, so that a new job
    /// under a freed key never meets an old job's scripts or gates.
    generations: [u32; SLOTS],
    jobs: [Option<MJob>; SLOTS],
    /// Gates of purged jobs' calls, let go when the case ends.
    stale_gates: Vec<String>,
    ops: &'a AtomicUsize,
}

fn fail(why: impl Into<String>) -> TestCaseError {
    TestCaseError::fail(why.into())
}

macro_rules! expect {
    ($cond:expr, $($why:tt)+) => {
        if !$cond {
            return Err(fail(format!($($why)+)));
        }
    };
}

/// The promises the shared model found broken, as the case's failure.
fn kept(broken: impl IntoIterator<Item = String>) -> Result<(), TestCaseError> {
    let broken: Vec<String> = broken.into_iter().collect();
    if broken.is_empty() {
        Ok(())
    } else {
        Err(fail(broken.join("; ")))
    }
}

fn step(outcome: Outcome, gate: &str) -> Value {
    match outcome {
        Outcome::Success => json!({"gate": gate}),
        Outcome::RateLimited => json!({"gate": gate, "status": 429}),
        Outcome::Unavailable => json!({"gate": gate, "status": 500}),
        Outcome::Rejected => json!({"gate": gate, "status": 400}),
        Outcome::Violation => json!({"gate": gate, "reply": "extra_key"}),
        Outcome::GatewayTimeout => json!({"gate": gate, "status": 504}),
    }
}

/// The state an attempt ends in when its provider answers with `outcome`.
fn settled(outcome: Outcome) -> AttemptState {
    match outcome {
        Outcome::Success => AttemptState::Succeeded,
        Outcome::GatewayTimeout => AttemptState::Unknown,
        _ => AttemptState::Failed,
    }
}

/// The owner of a slot's job: the last slot belongs to the second owner.
fn owner_of(slot: usize) -> usize {
    usize::from(slot == SLOTS - 1)
}

/// The key of a slot's job: the last slot reuses the first slot's key.
fn key_of(slot: usize) -> usize {
    if slot == SLOTS - 1 {
        0
    } else {
        slot
    }
}

impl Case<'_> {
    fn token(&self, slot: usize) -> &str {
        &self.tokens[owner_of(slot)]
    }

    fn key(&self, slot: usize) -> &str {
        &self.keys[key_of(slot)]
    }

    /// The marker the next job of `slot` carries in its text.
    fn marker(&self, slot: usize) -> String {
        format!("{}-s{slot}g{}x", self.case_id, self.generations[slot])
    }

    fn text(&self, slot: usize, text: u8) -> String {
        format!(
            "{} text {text}: the numbers came in above the forecast again.",
            self.marker(slot)
        )
    }

    /// Scripts `provider` for the next attempt (the `n`th) of the job with `marker`: it
    /// answers `outcome` at once, or (`held`) when its gate is let go.
    async fn script(
        &self,
        provider: Provider,
        marker: &str,
        n: usize,
        outcome: Outcome,
        held: bool,
    ) -> String {
        let gate = format!("{marker}-a{n}");
        let mut step = step(outcome, &gate);
        if !held {
            step.as_object_mut().unwrap().remove("gate");
        }
        self.mock
            .script(provider.name(), marker, json!([step]))
            .await;
        gate
    }

    async fn held(&self, marker: &str, n: usize) -> Result<Instant, TestCaseError> {
        let calls = self.mock.wait_calls(marker, n).await;
        expect!(
            calls.len() == n,
            "{} calls for {marker}, expected {n}",
            calls.len()
        );
        Ok(Instant::now())
    }

    /// A snapshot of what both owners have written: (jobs, attempts, visible events).
    fn written(&self) -> (i64, i64, i64) {
        let conn = db::open();
        let like = format!("{}-o%", self.case_id);
        let one = |sql: &str| -> i64 { conn.query_row(sql, [&like], |r| r.get(0)).unwrap() };
        (
            one("SELECT count(*) FROM jobs WHERE owner_id LIKE ?1"),
            one("SELECT count(*) FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.owner_id LIKE ?1"),
            one("SELECT count(*) FROM job_log e JOIN jobs j ON j.id = e.job_id WHERE j.owner_id LIKE ?1
                   AND e.type NOT IN ('dispatch_ignored', 'failover_skipped', 'late_result_discarded')"),
        )
    }

    /// One operation: sent, then held to the model. A refusal must have written
    /// nothing, and every job must read as the mirror and the model say.
    async fn run(&mut self, op: &Op) -> Result<(), TestCaseError> {
        // Only operations that send something count (a `Deliver` with nothing held, or
        // an operation on a key with no job yet, is a no-op).
        let idle = match *op {
            Op::Create { .. } | Op::Tick | Op::Age { .. } => false,
            Op::Deliver { key } => self.jobs[key as usize]
                .as_ref()
                .is_none_or(|j| j.attempts.iter().all(|a| a.released)),
            Op::Fallback { key, .. }
            | Op::Cancel { key }
            | Op::Resolve { key, .. }
            | Op::Redispatch { key } => self.jobs[key as usize].is_none(),
        };
        if !idle {
            self.ops.fetch_add(1, Ordering::Relaxed);
            SENT[op.kind()].fetch_add(1, Ordering::Relaxed);
        }
        let (_exclusive, _shared);
        if matches!(op, Op::Tick | Op::Age { .. }) {
            _exclusive = PASSES.write().await;
        } else {
            _shared = PASSES.read().await;
        }
        // Predictions are made from a settled mirror: a held call that may time out
        // while this operation runs has timed out first (the lock may have been a long
        // wait).
        self.await_timeouts(Duration::from_millis(1500)).await?;
        self.abandoned_meanwhile().await?;
        let before = self.written();
        let refused = self.apply(op).await?;
        // A held call may time out (and write) at any moment near the provider's
        // timeout; only outside that window is an unchanged database a proof.
        if refused && !self.near_timeout() {
            expect!(
                self.written() == before,
                "{op:?} was refused but wrote: {before:?} -> {:?}",
                self.written()
            );
        }
        self.check().await
    }

    /// Sends `op`; returns whether its answer was a refusal ([`Reply::is_refusal`]).
    async fn apply(&mut self, op: &Op) -> Result<bool, TestCaseError> {
        match *op {
            Op::Create {
                key,
                text,
                outcome,
                held,
            } => self.create(key as usize, text, outcome, held).await,
            Op::Fallback {
                key,
                provider,
                lost_answer,
                outcome,
                held,
            } => {
                self.fallback(key as usize, provider, lost_answer, outcome, held)
                    .await
            }
            Op::Deliver { key } => self.deliver(key as usize).await,
            Op::Cancel { key } => self.cancel(key as usize).await,
            Op::Resolve { key, how } => self.resolve(key as usize, how).await,
            Op::Redispatch { key } => self.redispatch(key as usize).await,
            Op::Tick => self.tick(None).await,
            Op::Age { key } => self.tick(Some(key as usize)).await,
        }
    }

    /// Whether a held call is near the provider's timeout, when it may write at any
    /// moment.
    fn near_timeout(&self) -> bool {
        self.jobs
            .iter()
            .flatten()
            .flat_map(|j| &j.attempts)
            .any(|a| {
                let held = a.called_at.elapsed();
                a.state == AttemptState::Running
                    && !a.released
                    && held + Duration::from_secs(1) > PROVIDER_TIMEOUT
                    && held < PROVIDER_TIMEOUT + Duration::from_secs(3)
            })
    }

    /// `POST /v1/jobs` under the slot's key, judged by the model's [`Key`]. Under a free
    /// key it makes the job the mirror then follows (its provider scripted first).
    async fn create(
        &mut self,
        slot: usize,
        text: u8,
        outcome: Outcome,
        held: bool,
    ) -> Result<bool, TestCaseError> {
        let request = Create {
            input: json!({"text": self.text(slot, text)}),
            provider: None,
        };
        let body = json!({"kind": "summarize", "input": request.input}).to_string();
        let marker = self.marker(slot);
        let gate = if self.jobs[slot].is_none() {
            Some(
                self.script(Provider::Primary, &marker, 1, outcome, held)
                    .await,
            )
        } else {
            None
        };
        self.intents[slot].send(&request);
        let reply = send(
            self.api
                .create(self.token(slot), Some(self.key(slot)), &body),
        )
        .await;
        let heard = Heard::job(&reply)?;
        kept(self.intents[slot].answer(&request, &heard.reply()))?;
        expect!(
            reply.status != 200 || reply.header("idempotent-replayed") == Some("true"),
            "a replay answered 200 without Idempotent-Replayed: true"
        );
        let Some(gate) = gate else {
            return Ok(heard.reply().is_refusal());
        };
        let Some(doc) = heard.job.filter(|_| reply.status == 201) else {
            return Err(fail(format!(
                "a create under a free key answered {} {}",
                reply.status, reply.text
            )));
        };
        let Some(first) = doc.attempts.first().map(|a| a.id.clone()) else {
            return Err(fail(format!("a new job with no attempt: {}", reply.text)));
        };
        self.jobs[slot] = Some(MJob {
            id: doc.id.clone(),
            marker,
            attempts: Vec::new(),
            cancelled: false,
            record: JobRecord::new(JobView::of(&doc)),
        });
        self.started(slot, first, Provider::Primary, outcome, gate, held)
            .await?;
        Ok(false)
    }

    /// A new attempt was made: wait until its call is held at the provider, or (not
    /// held) until the provider's answer is recorded.
    async fn started(
        &mut self,
        slot: usize,
        id: String,
        provider: Provider,
        outcome: Outcome,
        gate: String,
        held: bool,
    ) -> Result<(), TestCaseError> {
        let job = self.jobs[slot].as_mut().unwrap();
        let n = job.attempts.len() + 1;
        let marker = job.marker.clone();
        job.attempts.push(MAttempt {
            id,
            provider,
            lost: false,
            state: AttemptState::Running,
            outcome,
            gate,
            released: !held,
            called_at: Instant::now(),
        });
        if held {
            let called_at = self.held(&marker, n).await?;
            self.jobs[slot].as_mut().unwrap().attempts[n - 1].called_at = called_at;
            Ok(())
        } else {
            self.settle(slot, n - 1).await?;
            // Settled, so claimed and called by now: a bound on how long ago that was,
            // from below, is all the abandonment rule needs.
            self.jobs[slot].as_mut().unwrap().attempts[n - 1].called_at = Instant::now();
            Ok(())
        }
    }

    /// Waits until attempt `i` of the job has left `starting` and `running`, and moves
    /// the mirror the same way: by the provider's answer, or by its timeout if that
    /// struck first.
    async fn settle(&mut self, slot: usize, i: usize) -> Result<(), TestCaseError> {
        let job = self.jobs[slot].as_ref().unwrap();
        let (id, att) = (job.id.clone(), job.attempts[i].id.clone());
        let doc = self
            .api
            .wait_job(self.token(slot), &id, |j| {
                j["attempts"].as_array().into_iter().flatten().any(|a| {
                    a["id"] == att.as_str() && a["state"] != "running" && a["state"] != "starting"
                })
            })
            .await;
        let attempt = &mut self.jobs[slot].as_mut().unwrap().attempts[i];
        let seen = &doc["attempts"][i];
        let timed_out = seen["state"] == "unknown" && seen["error"]["code"] == "provider_timeout";
        attempt.state = if timed_out {
            AttemptState::Unknown
        } else {
            settled(attempt.outcome)
        };
        Ok(())
    }

    /// The fallback button on the slot's job, with a new click key: refused as
    /// [`fallback_refusal`] orders it, or a new attempt on `provider`, which the very
    /// same click sent again (`lost_answer`) answers once more ([`FallbackKey`]).
    async fn fallback(
        &mut self,
        slot: usize,
        provider: Provider,
        lost_answer: bool,
        outcome: Outcome,
        held: bool,
    ) -> Result<bool, TestCaseError> {
        let Some(job) = &self.jobs[slot] else {
            return Ok(false);
        };
        let (job_id, marker, n) = (job.id.clone(), job.marker.clone(), job.attempts.len() + 1);
        let path = format!("/v1/jobs/{job_id}/attempts");
        let click = unique("click");
        let body = json!({"provider": provider.name()});
        let request = || {
            self.api
                .post_json(self.token(slot), &path, &body)
                .header("Idempotency-Key", &click)
        };
        if let Some(code) = fallback_refusal(job.is_final(), job.states()) {
            let reply = send(request()).await;
            expect!(
                reply.status == 409 && reply.problem_code() == code.as_str(),
                "a click expected to be refused ({code}) answered {} {}",
                reply.status,
                reply.text
            );
            return Ok(Heard::attempt(&reply)?.reply().is_refusal());
        }
        let gate = self.script(provider, &marker, n, outcome, held).await;
        let mut click_key = FallbackKey::default();
        let reply = send(request()).await;
        let heard = Heard::attempt(&reply)?;
        let named = Some(provider.name());
        kept(click_key.answer(&job_id, &click, named, &heard.reply()))?;
        expect!(
            reply.status == 201,
            "a click answered {} {}",
            reply.status,
            reply.text
        );
        let attempt = reply.json();
        expect!(
            attempt["n"] == n && attempt["provider"] == provider.name(),
            "the new attempt is n={} on {}, not {n} on {}",
            attempt["n"],
            attempt["provider"],
            provider.name()
        );
        if lost_answer {
            let again = send(request()).await;
            kept(click_key.answer(&job_id, &click, named, &Heard::attempt(&again)?.reply()))?;
            expect!(
                again.status == 200 && again.header("idempotent-replayed") == Some("true"),
                "a resent click answered {} {}",
                again.status,
                again.text
            );
        }
        let id = attempt["id"].as_str().unwrap().to_owned();
        if provider == Provider::Fallback {
            ON_FALLBACK.fetch_add(1, Ordering::Relaxed);
        }
        self.started(slot, id, provider, outcome, gate, held)
            .await?;
        Ok(false)
    }

    async fn deliver(&mut self, slot: usize) -> Result<bool, TestCaseError> {
        let Some(job) = &self.jobs[slot] else {
            return Ok(false);
        };
        let Some(i) = job.attempts.iter().position(|a| !a.released) else {
            return Ok(false);
        };
        let (gate, id, state) = (
            job.attempts[i].gate.clone(),
            job.id.clone(),
            job.attempts[i].state,
        );
        self.mock.release(&gate).await;
        let job = self.jobs[slot].as_mut().unwrap();
        job.attempts[i].released = true;
        if state == AttemptState::Unknown && job.attempts[i].lost {
            return self.late_answer(slot, i).await;
        }
        if state != AttemptState::Running {
            // Cancelled (or timed out) before its answer: the answer changes nothing.
            // A cancelled call ends one of two ways: its dispatcher's watch reads the
            // cancel and drops the call (`call_stopped`), or the answer comes first and
            // is logged as discarded. Wait for one of them, so no write is in flight —
            // unless the Worker may have given up on the call already (its timeout).
            let held = job.attempts[i].called_at.elapsed();
            if job.attempts[i].outcome == Outcome::Success
                && state == AttemptState::Cancelled
                && held + Duration::from_millis(500) < PROVIDER_TIMEOUT
            {
                let attempt_id = job.attempts[i].id.clone();
                let discarded = || {
                    db::count(
                        "SELECT count(*) FROM job_events WHERE job_id = ?1 AND type = 'late_result_discarded'",
                        &id,
                    ) > 0
                };
                let stopped = || {
                    onceclick_tests::log::events("call_stopped")
                        .iter()
                        .any(|l| l["attempt_id"] == attempt_id.as_str())
                };
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    if discarded() {
                        break;
                    }
                    if stopped() {
                        STOPPED.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    expect!(
                        Instant::now() < deadline,
                        "a cancelled call was neither stopped nor its late result logged"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            return Ok(false);
        }
        self.settle(slot, i).await?;
        Ok(false)
    }

    /// The held call of an attempt the reconciler called lost (`Age`) answers. While the
    /// Worker still waits on the call (its timeout), a definite answer resolves the
    /// `unknown`: a result wins, a failure fails it; a 504 changes nothing. After the
    /// timeout nobody hears the answer.
    async fn late_answer(&mut self, slot: usize, i: usize) -> Result<bool, TestCaseError> {
        let job = self.jobs[slot].as_ref().unwrap();
        let (id, att) = (job.id.clone(), &job.attempts[i]);
        let (outcome, called_at) = (att.outcome, att.called_at);
        let heard = called_at.elapsed() + Duration::from_secs(1) < PROVIDER_TIMEOUT;
        if outcome == Outcome::GatewayTimeout {
            return Ok(false);
        }
        // Until the Worker's timeout has surely passed, the answer may still land.
        let deadline = called_at + PROVIDER_TIMEOUT + Duration::from_secs(2);
        loop {
            let reply = send(self.api.get(self.token(slot), &format!("/v1/jobs/{id}"))).await;
            let seen = reply.json()["attempts"][i]["state"].clone();
            if seen != "unknown" {
                let to = settled(outcome);
                expect!(
                    seen == to.as_str(),
                    "a late {outcome:?} moved the unknown attempt to {seen}"
                );
                self.jobs[slot].as_mut().unwrap().attempts[i].state = to;
                LATE_RESOLVED.fetch_add(1, Ordering::Relaxed);
                return Ok(false);
            }
            if Instant::now() > deadline {
                expect!(
                    !heard,
                    "a late {outcome:?} within the provider's timeout did not resolve the unknown"
                );
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Another case's reconciler pass may have abandoned this case's `unknown` attempts
    /// on `fallback` (its `abandon_after_ms` is 200): the one move a pass elsewhere can
    /// make here. Reads each such job, and moves the mirror with what it finds.
    async fn abandoned_meanwhile(&mut self) -> Result<(), TestCaseError> {
        for slot in 0..SLOTS {
            let Some(job) = self.jobs[slot].as_ref() else {
                continue;
            };
            let unsure =
                |a: &MAttempt| a.provider == Provider::Fallback && a.state == AttemptState::Unknown;
            if !job.attempts.iter().any(unsure) {
                continue;
            }
            let path = format!("/v1/jobs/{}", job.id);
            let doc = send(self.api.get(self.token(slot), &path)).await.json();
            let job = self.jobs[slot].as_mut().unwrap();
            for (i, a) in job.attempts.iter_mut().enumerate() {
                if unsure(a) && doc["attempts"][i]["state"] == "abandoned" {
                    a.state = AttemptState::Abandoned;
                    ABANDONED.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    /// Waits until every held call at or near the provider's timeout has timed out, and
    /// moves the mirror with it: a reconciler pass must see the same states.
    async fn await_timeouts(&mut self, margin: Duration) -> Result<(), TestCaseError> {
        for slot in 0..SLOTS {
            let Some(job) = self.jobs[slot].as_ref() else {
                continue;
            };
            let id = job.id.clone();
            let near: Vec<usize> = job
                .attempts
                .iter()
                .enumerate()
                .filter(|(_, a)| {
                    a.state == AttemptState::Running
                        && !a.released
                        && a.called_at.elapsed() + margin > PROVIDER_TIMEOUT
                })
                .map(|(i, _)| i)
                .collect();
            for i in near {
                let doc = self
                    .api
                    .wait_job(self.token(slot), &id, |j| {
                        j["attempts"][i]["state"] != "running"
                    })
                    .await;
                let seen = &doc["attempts"][i];
                let a = &mut self.jobs[slot].as_mut().unwrap().attempts[i];
                // On `fallback`, another runner's pass may have abandoned it since.
                let abandoned = a.provider == Provider::Fallback && seen["state"] == "abandoned";
                expect!(
                    (seen["state"] == "unknown" || abandoned)
                        && seen["error"]["code"] == "provider_timeout",
                    "a held call past the timeout: {seen}"
                );
                a.state = if abandoned {
                    ABANDONED.fetch_add(1, Ordering::Relaxed);
                    AttemptState::Abandoned
                } else {
                    AttemptState::Unknown
                };
            }
        }
        Ok(())
    }

    /// One reconciler pass; with `aged`, after that job's clock jumped 30 days. The pass:
    /// - abandons `fallback`'s `unknown` attempts called over 200 ms ago (its
    ///   `abandon_after_ms`);
    /// - moves an aged `running` attempt to `unknown`: its dispatcher looks dead;
    /// - purges an aged job that has ended with nothing live, and frees its key.
    async fn tick(&mut self, aged: Option<usize>) -> Result<bool, TestCaseError> {
        // A pass may take a while on a busy machine: no held call may time out inside it.
        self.await_timeouts(Duration::from_secs(3)).await?;
        let aged = aged.filter(|slot| self.jobs[*slot].is_some());
        if let Some(slot) = aged {
            self.backdate(slot);
        }
        self.api.run_cron().await;
        for slot in 0..SLOTS {
            self.after_pass(slot, aged == Some(slot)).await?;
        }
        Ok(false)
    }

    /// Moves the slot's job 30 days back: its `updated_at` and every `dispatched_at`.
    fn backdate(&mut self, slot: usize) {
        let job = self.jobs[slot].as_mut().unwrap();
        let old = "2000-01-01T00:00:00.000Z";
        db::execute_with(
            "UPDATE jobs SET updated_at = ?2 WHERE id = ?1",
            &[&job.id, old],
        );
        db::execute_with(
            "UPDATE attempts SET dispatched_at = ?2 WHERE job_id = ?1 AND dispatched_at IS NOT NULL",
            &[&job.id, old],
        );
        // Backdating rewrites times the document shows, behind the Worker's back (a
        // real clock moves no document): the ETag rule starts afresh from here.
        job.record = JobRecord::new(job.record.view().clone());
    }

    /// What a pass did to the slot's job (`aged`: the one whose clock jumped), as the
    /// mirror predicts it; where an abandonment depends on milliseconds, as read.
    async fn after_pass(&mut self, slot: usize, aged: bool) -> Result<(), TestCaseError> {
        let Some(job) = self.jobs[slot].as_mut() else {
            return Ok(());
        };
        let live = |a: &MAttempt| {
            matches!(
                a.state,
                AttemptState::Starting | AttemptState::Running | AttemptState::Unknown
            )
        };
        let ended_idle = job.status() != JobStatus::Unknown && !job.attempts.iter().any(live);
        let mut unsure = Vec::new();
        for (i, a) in job.attempts.iter_mut().enumerate() {
            match a.state {
                AttemptState::Unknown if a.provider == Provider::Fallback => {
                    if aged || a.called_at.elapsed() > Duration::from_secs(1) {
                        a.state = AttemptState::Abandoned;
                        ABANDONED.fetch_add(1, Ordering::Relaxed);
                    } else {
                        unsure.push(i);
                    }
                }
                AttemptState::Running if aged => {
                    a.state = AttemptState::Unknown;
                    a.lost = true;
                    FOUND_LOST.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
        }
        if aged && ended_idle {
            return self.purged(slot).await;
        }
        if unsure.is_empty() {
            return Ok(());
        }
        let path = format!("/v1/jobs/{}", job.id);
        let doc = send(self.api.get(self.token(slot), &path)).await.json();
        let job = self.jobs[slot].as_mut().unwrap();
        for i in unsure {
            let seen = &doc["attempts"][i]["state"];
            expect!(
                seen == "unknown" || seen == "abandoned",
                "a fresh unknown attempt on fallback became {seen}"
            );
            if seen == "abandoned" {
                job.attempts[i].state = AttemptState::Abandoned;
                ABANDONED.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// An aged job that had ended with nothing live: the pass purged it (its `GET` is
    /// 404), and its key is free for a new job.
    async fn purged(&mut self, slot: usize) -> Result<(), TestCaseError> {
        let id = self.jobs[slot].as_ref().unwrap().id.clone();
        let reply = send(self.api.get(self.token(slot), &format!("/v1/jobs/{id}"))).await;
        expect!(
            reply.status == 404,
            "an aged job that had ended was not purged: {} {}",
            reply.status,
            reply.text
        );
        PURGED.fetch_add(1, Ordering::Relaxed);
        if let Some(job) = self.jobs[slot].take() {
            self.stale_gates
                .extend(job.attempts.into_iter().map(|a| a.gate));
        }
        self.intents[slot].free();
        self.generations[slot] += 1;
        Ok(())
    }

    /// Cancels the slot's job: the model says what the answer may be ([`cancel_answer`];
    /// the mirror follows every purge, so the job is there), and the mirror cancels a
    /// job that had not ended (a wrong refusal shows at the next read).
    async fn cancel(&mut self, slot: usize) -> Result<bool, TestCaseError> {
        let Some(job) = &self.jobs[slot] else {
            return Ok(false);
        };
        let path = format!("/v1/jobs/{}/cancel", job.id);
        let reply = send(self.api.post_json(self.token(slot), &path, &json!({}))).await;
        let heard = Heard::job(&reply)?;
        kept(cancel_answer(&job.id, &heard.reply(), || false).err())?;
        let job = self.jobs[slot].as_mut().unwrap();
        if !job.is_final() {
            job.cancelled = true;
            for a in &mut job.attempts {
                if matches!(
                    a.state,
                    AttemptState::Starting | AttemptState::Running | AttemptState::Unknown
                ) {
                    a.state = AttemptState::Cancelled;
                }
            }
        }
        Ok(heard.reply().is_refusal())
    }

    /// An admin resolves the job's `unknown` attempt (or tries, on its last one): the
    /// model says what the answer may be ([`resolve_answer`]), and the mirror moves an
    /// attempt that was `unknown` (a wrong refusal shows at the next read). A result
    /// given by hand is the job's.
    async fn resolve(&mut self, slot: usize, how: How) -> Result<bool, TestCaseError> {
        let Some(job) = &self.jobs[slot] else {
            return Ok(false);
        };
        let i = job
            .attempts
            .iter()
            .position(|a| a.state == AttemptState::Unknown)
            .unwrap_or(job.attempts.len() - 1);
        let (attempt, was_unknown) = (
            job.attempts[i].id.clone(),
            job.attempts[i].state == AttemptState::Unknown,
        );
        let outcome = how.resolution();
        let result = json!({"summary": "resolved by hand", "sentiment": "neutral"});
        let mut body = json!({"outcome": outcome.as_str()});
        if how == How::Succeeded {
            body["result"] = result.clone();
        }
        let path = format!("/v1/attempts/{attempt}/resolve");
        let reply = send(self.api.post_json(&self.admin, &path, &body)).await;
        let heard = Heard::job(&reply)?;
        let exists = || db::count("SELECT count(*) FROM attempts WHERE id = ?1", &attempt) > 0;
        kept(resolve_answer(&attempt, outcome, &heard.reply(), exists).err())?;
        if !was_unknown {
            return Ok(heard.reply().is_refusal());
        }
        if how == How::Succeeded {
            let shown = heard.job.as_ref().and_then(|j| j.result.as_ref());
            expect!(
                shown == Some(&result),
                "resolve {attempt} as succeeded answered {} with result {shown:?}",
                reply.status
            );
        }
        self.jobs[slot].as_mut().unwrap().attempts[i].state = match how {
            How::Failed => AttemptState::Failed,
            How::Cancelled => AttemptState::Cancelled,
            How::Succeeded => AttemptState::Succeeded,
        };
        Ok(heard.reply().is_refusal())
    }

    async fn redispatch(&mut self, slot: usize) -> Result<bool, TestCaseError> {
        let Some(job) = &self.jobs[slot] else {
            return Ok(false);
        };
        let att = job.attempts.last().unwrap().id.clone();
        let ignored = || {
            db::count(
                "SELECT count(*) FROM job_events WHERE attempt_id = ?1 AND type = 'dispatch_ignored'",
                &att,
            )
        };
        let before = ignored();
        let reply = send(self.api.post_json(
            &self.admin,
            &format!("/v1/attempts/{att}/dispatch"),
            &json!({}),
        ))
        .await;
        expect!(reply.status == 202, "redispatch answered {}", reply.status);
        let deadline = Instant::now() + Duration::from_secs(20);
        while ignored() == before {
            expect!(
                Instant::now() < deadline,
                "the redelivered dispatch was never ignored"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(false)
    }

    /// Reads every job and holds it to the mirror and the model; then what the D1 file
    /// and the mock recorded.
    async fn check(&mut self) -> Result<(), TestCaseError> {
        for slot in 0..SLOTS {
            if self.jobs[slot].is_some() {
                self.timed_out_meanwhile(slot).await?;
                self.check_job(slot).await?;
            }
        }
        self.check_database().await
    }

    /// A held call past the provider's timeout: the Worker's clock moved it to
    /// `unknown` (`provider_timeout`), and so does the mirror.
    async fn timed_out_meanwhile(&mut self, slot: usize) -> Result<(), TestCaseError> {
        let path = format!("/v1/jobs/{}", self.jobs[slot].as_ref().unwrap().id);
        let reply = send(self.api.get(self.token(slot), &path)).await;
        expect!(reply.status == 200, "GET {path} answered {}", reply.status);
        let doc = reply.json();
        let job = self.jobs[slot].as_mut().unwrap();
        for (i, a) in job.attempts.iter_mut().enumerate() {
            let seen = &doc["attempts"][i];
            if a.state == AttemptState::Running
                && !a.released
                && a.called_at.elapsed() >= PROVIDER_TIMEOUT - Duration::from_millis(500)
            {
                if seen["state"] == "running"
                    && a.called_at.elapsed() < PROVIDER_TIMEOUT + Duration::from_secs(3)
                {
                    continue;
                }
                expect!(
                    seen["state"] == "unknown" && seen["error"]["code"] == "provider_timeout",
                    "attempt {} held {:?}: {seen}",
                    a.id,
                    a.called_at.elapsed()
                );
                a.state = AttemptState::Unknown;
            }
        }
        Ok(())
    }

    /// The job read again: the model's promises ([`JobView::broken`], then
    /// [`JobRecord`]: a result never changes, attempts reach their states only by paths
    /// of `MOVES`, the ETag moves exactly when the document does), and the status and
    /// attempts' states the mirror predicts.
    async fn check_job(&mut self, slot: usize) -> Result<(), TestCaseError> {
        let job = self.jobs[slot].as_mut().unwrap();
        let path = format!("/v1/jobs/{}", job.id);
        let reply = send(self.api.get(&self.tokens[owner_of(slot)], &path)).await;
        expect!(reply.status == 200, "GET {path} answered {}", reply.status);
        let etag = reply.header("etag").unwrap_or_default().to_owned();
        let Some(doc) = Heard::job(&reply)?.job else {
            return Err(fail(format!("GET {path} answered no job: {}", reply.text)));
        };
        let view = JobView::of(&doc);
        kept(view.broken(&job.id))?;
        let states: Vec<AttemptState> = doc.attempts.iter().map(|a| a.state).collect();
        expect!(
            doc.status == job.status() && states == job.states(),
            "job {} is {} with attempts {states:?}, but the mirror says {} with {:?}",
            job.id,
            doc.status.as_str(),
            job.status().as_str(),
            job.states()
        );
        kept(
            job.record
                .document(&job.id, reply.json().to_string(), etag)
                .err(),
        )?;
        kept(job.record.next_read(&job.id, view))
    }

    /// What the D1 file shows across the real places (on the shards, every shard at
    /// once): one job per (owner, key); and each attempt with its claim time.
    fn database_invariants(&self) -> Result<Vec<(String, Option<String>)>, TestCaseError> {
        let conn = db::open();
        let owners = format!("{}-o%", self.case_id);
        let dup: i64 = conn
            .query_row(
                "SELECT count(*) FROM (SELECT idempotency_key FROM jobs WHERE owner_id LIKE ?1
                   GROUP BY owner_id, idempotency_key HAVING count(*) > 1)",
                [&owners],
                |r| r.get(0),
            )
            .unwrap();
        expect!(dup == 0, "two jobs for one key");
        let mut stmt = conn
            .prepare(
                "SELECT a.id, a.dispatched_at FROM attempts a JOIN jobs j ON j.id = a.job_id
                  WHERE j.owner_id LIKE ?1",
            )
            .unwrap();
        let attempts: Vec<(String, Option<String>)> = stmt
            .query_map([&owners], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        Ok(attempts)
    }

    /// At most one provider call per attempt, and only after its claim: the mock's
    /// record against the D1 file.
    async fn check_database(&self) -> Result<(), TestCaseError> {
        let attempts = self.database_invariants()?;
        let calls = self.mock.calls(&self.case_id).await;
        for (attempt, claimed) in attempts {
            let n = calls
                .iter()
                .filter(|c| c["idempotency_key"] == attempt.as_str())
                .count();
            expect!(n <= 1, "attempt {attempt} was called {n} times");
            expect!(
                n == 0 || claimed.is_some(),
                "attempt {attempt} was called before its claim"
            );
        }
        Ok(())
    }
}

/// Runs one sequence on two fresh owners and two fresh keys.
async fn run_case(
    api: &Api,
    mock: &Mock,
    ops: &[Op],
    counter: &AtomicUsize,
) -> Result<(), TestCaseError> {
    let case_id = unique("mdl");
    let owners = [format!("{case_id}-o0"), format!("{case_id}-o1")];
    let keys = [format!("{case_id}-k0"), format!("{case_id}-k1")];
    let intent = |slot: usize| {
        Key::new(
            &owners[owner_of(slot)],
            &keys[key_of(slot)],
            "summarize",
            "primary",
        )
    };
    let intents = [intent(0), intent(1), intent(2)];
    let mut case = Case {
        api,
        mock,
        tokens: [api.token(&owners[0]), api.token(&owners[1])],
        admin: api.admin_token("model-ops"),
        intents,
        keys,
        generations: [0; SLOTS],
        jobs: [None, None, None],
        stale_gates: Vec::new(),
        case_id,
        ops: counter,
    };
    for op in ops {
        case.run(op).await?;
    }
    // Let every held call go, so nothing waits on the mock after the case.
    let gates = case
        .jobs
        .iter()
        .flatten()
        .flat_map(|j| &j.attempts)
        .map(|a| &a.gate);
    for gate in gates.chain(&case.stale_gates) {
        mock.release(gate).await;
    }
    Ok(())
}

/// Replays one sequence: what a printed regression test calls.
fn replay(ops: Vec<Op>) {
    let (api, mock) = (Api::from_env(), Mock::from_env());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let counter = AtomicUsize::new(0);
    rt.block_on(api.ensure_certified("fallback"));
    rt.block_on(run_case(&api, &mock, &ops, &counter)).unwrap();
}

/// A cancel, then the held call's answer: the dispatcher's watch may stop the call
/// before the answer, or the answer may come first and be discarded (found by CI on the
/// durable store once the stop came in; either is right, neither must go missing).
#[test]
fn a_cancelled_call_is_stopped_or_its_answer_discarded() {
    replay(vec![
        Op::Create {
            key: 1,
            text: 1,
            outcome: Outcome::Success,
            held: true,
        },
        Op::Cancel { key: 1 },
        Op::Deliver { key: 1 },
        Op::Resolve {
            key: 2,
            how: How::Cancelled,
        },
        Op::Create {
            key: 2,
            text: 1,
            outcome: Outcome::Success,
            held: false,
        },
        Op::Create {
            key: 2,
            text: 1,
            outcome: Outcome::Success,
            held: false,
        },
        Op::Deliver { key: 2 },
    ]);
}

#[test]
fn random_operation_sequences_keep_every_promise() {
    let soak = std::env::var("ONCECLICK_SOAK").is_ok_and(|v| !v.is_empty() && v != "0");
    // The breadth of interleavings is the simulation's (`sim/`, a million operations a
    // run, under the same model): this run proves the model's promises on the real
    // platform, and what only the platform has (RELIABILITY.md, "What only the real run
    // checks"). So it needs every kind of operation and every rarer path a few times on
    // each store, not volume: 40 cases of about 10 chunks, one in five of them a story,
    // sent 482 operations on D1 and 370 on the shards (2026-12-06; 100 cases had sent
    // 775 and 806), every kind at least 5 times (redispatch on the shards), every rarer
    // path at least 6 times (a late answer resolving an `unknown`, on the shards), in
    // 98 s and 80 s (169 s and 239 s before), but 177 s and 186 s in CI, which then ran
    // 51 minutes; 28 cases since (about 330 operations, 200 the floor), to keep CI under
    // 45. The soak's 8,000 cases send 50,000 and more.
    let (cases, runners, least) = if soak {
        (2_000u32, 4, 50_000)
    } else {
        (14u32, 2, 200)
    };
    // A fixed seed in CI, so that a run reaches the same operations every time and a
    // failure replays; the soak draws its own. `ONCECLICK_MODEL_SEED` sets it either way.
    // Runner `i` draws from `seed + i`.
    let seed = std::env::var("ONCECLICK_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| match soak {
            true => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64),
            false => 20_261_206,
        });
    eprintln!("reliability model: seed {seed} (ONCECLICK_MODEL_SEED={seed} replays it)");
    let counter = AtomicUsize::new(0);
    // The fallback button may name `fallback`: it must be certified for `summarize`.
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(Api::from_env().ensure_certified("fallback"));
    let started = Instant::now();
    let failures: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..runners)
            .map(|i| {
                let counter = &counter;
                scope.spawn(move || {
                    // Each runner its own runtime and its own HTTP clients: a pooled
                    // connection belongs to the runtime that opened it.
                    let rt = tokio::runtime::Runtime::new().unwrap();
                    let (api, mock) = (&Api::from_env(), &Mock::from_env());
                    let mut runner = TestRunner::new(Config {
                        cases,
                        max_shrink_iters: 64,
                        max_shrink_time: 300_000,
                        failure_persistence: None,
                        rng_seed: RngSeed::Fixed(seed.wrapping_add(i as u64)),
                        ..Config::default()
                    });
                    let strategy = proptest::collection::vec(chunk(soak), 1..20)
                        .prop_map(|chunks| Ops(chunks.concat()));
                    runner
                        .run(&strategy, |ops| {
                            rt.block_on(run_case(api, mock, &ops.0, counter))
                        })
                        .err()
                        .map(|e| e.to_string())
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .collect()
    });
    let operations = counter.load(Ordering::Relaxed);
    let mut figures = json!({
        "runners": runners, "cases": cases * runners, "operations": operations, "seed": seed,
        "violations": failures.len(), "seconds": started.elapsed().as_secs_f64(),
    });
    report::write("model", reached(&mut figures));
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(operations >= least, "only {operations} operations ran");
    // Every kind of operation, and the rarer paths, must have been reached (each came
    // up several times a run): a change that stops reaching one would otherwise pass
    // unnoticed.
    for (kind, sent) in Op::KINDS.iter().zip(&SENT) {
        assert!(
            sent.load(Ordering::Relaxed) > 0,
            "no {kind} sent in the run"
        );
    }
    for (path, count) in [
        ("fallback attempts", &ON_FALLBACK),
        ("abandonments", &ABANDONED),
        ("dispatchers found lost", &FOUND_LOST),
        ("late answers resolving an unknown", &LATE_RESOLVED),
        ("purges", &PURGED),
    ] {
        assert!(count.load(Ordering::Relaxed) > 0, "no {path} in the run");
    }
}

/// `figures`, with how often each kind of operation sent something and each rarer path
/// was reached.
fn reached(figures: &mut Value) -> &Value {
    for (path, count) in [
        ("fallback_attempts", &ON_FALLBACK),
        ("abandoned", &ABANDONED),
        ("dispatchers_found_lost", &FOUND_LOST),
        ("late_results_resolving_unknown", &LATE_RESOLVED),
        ("purged", &PURGED),
        ("cancelled_calls_stopped", &STOPPED),
    ] {
        figures[path] = count.load(Ordering::Relaxed).into();
    }
    for (kind, sent) in Op::KINDS.iter().zip(&SENT) {
        figures[format!("sent_{kind}")] = sent.load(Ordering::Relaxed).into();
    }
    figures
}
