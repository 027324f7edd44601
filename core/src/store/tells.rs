//! Every store operation that moves a job, on one job or many, tells
//! the job's hub, at the job's new position and with its new document.
//!
//! The store's real code on real SQLite: an in-memory database with the Worker's own
//! migrations, its `strftime('…', 'now')` read from the virtual clock (`clock.rs`) as
//! the simulator's is. The operations come from [`Op::ALL`] through an exhaustive
//! `match`, so an operation added to the store gets a scenario here, or is said to move
//! nothing.

use super::native::{Batch, Layout, Marks, Places};
use super::{
    Claim, Completion, Moves, NewAttemptOutcome, NewJob, NextAttempt, Offer, Op, ReconcileRule,
    Store,
};
use crate::clock;
use crate::host::Notify;
use crate::platform::Platform;
use futures_util::future::LocalBoxFuture;
use onceclick_protocol::live::Position;
use onceclick_protocol::{AttemptError, AttemptState, JobStatus};
use rusqlite::functions::FunctionFlags;
use rusqlite::types::{Value as Sql, ValueRef};
use rusqlite::Connection;
use serde_json::{json, Map, Value};
use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

const OWNER: &str = "owner_1";
const PROVIDER: &str = "p1";

/// The test's platform (`platform.rs`): a clock it moves, per thread; `uuid`'s ids; no
/// chance; no log.
struct TestPlatform;

thread_local! {
    static NOW_MS: std::cell::Cell<f64> = const { std::cell::Cell::new(1_800_000_000_000.0) };
}

impl Platform for TestPlatform {
    fn now_ms(&self) -> f64 {
        NOW_MS.with(std::cell::Cell::get)
    }

    fn rfc3339(&self, ms: f64) -> String {
        chrono::DateTime::from_timestamp_millis(ms as i64)
            .unwrap_or_default()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    }

    fn uuid_v7(&self) -> String {
        uuid::Uuid::now_v7().to_string()
    }

    fn random_below(&self, _n: u32) -> u32 {
        0
    }

    fn log(&self, _error: bool, _line: Value) {}
}

/// Moves the test's clock to `ms`.
fn set_now_ms(ms: f64) {
    NOW_MS.with(|now| now.set(ms));
}

/// One place, `d1`: the Worker's schema in memory, each batch one transaction.
struct Sqlite(Connection);

impl Sqlite {
    fn open() -> rusqlite::Result<Self> {
        let conn = Connection::open_in_memory()?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // "Now" is the virtual clock's; the Worker's SQL asks for no other time.
        conn.create_scalar_function("strftime", 2, FunctionFlags::SQLITE_UTF8, |ctx| {
            let format: String = ctx.get(0)?;
            let time: String = ctx.get(1)?;
            let now = chrono::DateTime::from_timestamp_millis(clock::now_ms() as i64);
            match (time.as_str(), now) {
                ("now", Some(now)) => Ok(now.format(&format.replace("%f", "%S%.3f")).to_string()),
                _ => Err(rusqlite::Error::UserFunctionError(
                    format!("strftime of {time:?}: only 'now' is kept here").into(),
                )),
            }
        })?;
        for (_, script) in crate::store::migrations::MIGRATIONS {
            conn.execute_batch(script)?;
        }
        Ok(Self(conn))
    }

    fn transaction(&self, batch: &Batch) -> rusqlite::Result<Vec<Vec<Value>>> {
        let tx = self.0.unchecked_transaction()?;
        let mut sets = Vec::with_capacity(batch.len());
        for (sql, params) in batch {
            let mut stmt = tx.prepare(sql)?;
            let names: Vec<String> = stmt
                .column_names()
                .iter()
                .map(|n| (*n).to_owned())
                .collect();
            let mut cursor = stmt.query(rusqlite::params_from_iter(params.iter().map(bind)))?;
            let mut rows = Vec::new();
            while let Some(row) = cursor.next()? {
                let mut object = Map::new();
                for (i, name) in names.iter().enumerate() {
                    object.insert(name.clone(), json_of(row.get_ref(i)?));
                }
                rows.push(Value::Object(object));
            }
            sets.push(rows);
        }
        tx.commit()?;
        Ok(sets)
    }
}

impl Places for Sqlite {
    fn run(
        &self,
        place: &str,
        batch: Batch,
        _marks: Marks,
    ) -> LocalBoxFuture<'static, Result<Vec<Vec<Value>>, String>> {
        let out = match place {
            "d1" => self.transaction(&batch).map_err(|e| e.to_string()),
            other => Err(format!("no place {other} in a one-database store")),
        };
        Box::pin(std::future::ready(out))
    }
}

fn bind(value: &Value) -> Sql {
    match value {
        Value::Null => Sql::Null,
        Value::Bool(b) => Sql::Integer(i64::from(*b)),
        Value::Number(n) => n
            .as_i64()
            .map_or_else(|| Sql::Real(n.as_f64().unwrap_or(0.0)), Sql::Integer),
        Value::String(s) => Sql::Text(s.clone()),
        other => Sql::Text(other.to_string()),
    }
}

fn json_of(value: ValueRef<'_>) -> Value {
    match value {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::from(i),
        ValueRef::Real(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        ValueRef::Text(t) | ValueRef::Blob(t) => {
            Value::String(String::from_utf8_lossy(t).into_owned())
        }
    }
}

/// What a hub was told: the job, its position, its document.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Told {
    job_id: String,
    seq: u64,
    doc: String,
}

/// The hubs, as one recorder.
#[derive(Default)]
struct Hubs(RefCell<Vec<Told>>);

impl Notify for Hubs {
    fn notify<'a>(
        &'a self,
        job_id: &'a str,
        seq: u64,
        doc: &'a str,
    ) -> LocalBoxFuture<'a, Result<(), String>> {
        self.0.borrow_mut().push(Told {
            job_id: job_id.to_owned(),
            seq,
            doc: doc.to_owned(),
        });
        Box::pin(std::future::ready(Ok(())))
    }
}

/// Runs a store call to its end. Every place and hub here answers at once, so one poll
/// finishes it; a call still pending would wait on something this test does not have.
fn done<F: Future>(call: F) -> F::Output {
    let mut call = std::pin::pin!(call);
    match call.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("a store call waited, on nothing that this test provides"),
    }
}

/// A store on a fresh database, with its hubs recorded.
struct Bench {
    store: Store,
    hubs: Rc<Hubs>,
    keys: std::cell::Cell<u32>,
}

impl Bench {
    fn new() -> Self {
        crate::platform::install(&TestPlatform);
        let places = Sqlite::open().unwrap_or_else(|e| panic!("open the schema: {e}"));
        let hubs = Rc::new(Hubs::default());
        let store = Store::native(Rc::new(places), Layout::ONE).with_live(Some(hubs.clone()));
        Self {
            store,
            hubs,
            keys: std::cell::Cell::new(0),
        }
    }

    /// A new job on [`PROVIDER`], its first attempt `starting`: (job, attempt).
    fn create(&self) -> (String, String) {
        self.keys.set(self.keys.get() + 1);
        let key = format!("key_{}", self.keys.get());
        let (job_id, attempt_id) = self.store.new_job_ids(OWNER, &key);
        let stored = done(self.store.create_or_get_job(&NewJob {
            job_id: &job_id,
            attempt_id: &attempt_id,
            owner: OWNER,
            key: &key,
            fingerprint: "fp",
            kind: "kind_1",
            input: "{}",
            provider: PROVIDER,
            hand_off: None,
        }))
        .unwrap_or_else(|e| panic!("create: {e:?}"));
        assert_eq!(stored.job.id, job_id, "a new key makes a new job");
        (job_id, attempt_id)
    }

    /// The dispatcher's claim: the attempt `running`.
    fn claim(&self, attempt_id: &str) {
        let claim = done(self.store.claim(attempt_id, "token_1"))
            .unwrap_or_else(|e| panic!("claim: {e:?}"));
        done(self.store.tell_claim());
        assert!(
            matches!(claim, Claim::Claimed(_)),
            "the claim holds {attempt_id}"
        );
    }

    /// One move of an attempt that must happen.
    fn move_attempt(&self, attempt_id: &str, from: AttemptState, to: AttemptState) {
        let moved = done(self.store.move_attempt(attempt_id, &[from], to, None))
            .unwrap_or_else(|e| panic!("move: {e:?}"));
        assert!(moved, "{attempt_id} moves {from:?} → {to:?}");
    }

    /// A next attempt on the job's own provider (which needs no certification).
    fn next<'a>(&self, job_id: &'a str, new_id: &'a str) -> NextAttempt<'a> {
        NextAttempt {
            new_id,
            job_id,
            provider: PROVIDER,
            contract_version: "1",
            provider_digest: "digest",
            request: None,
        }
    }

    /// The job's position and document, as `GET /v1/jobs/{id}` reads them.
    fn read(&self, job_id: &str) -> (u64, String) {
        let stored = done(self.store.job(None, job_id))
            .unwrap_or_else(|e| panic!("read {job_id}: {e:?}"))
            .unwrap_or_else(|| panic!("{job_id} is gone"));
        let seq = Position::of_etag(&stored.etag)
            .unwrap_or_else(|| panic!("{job_id}'s ETag {} is no position", stored.etag));
        (seq.0, stored.doc)
    }

    /// `act`, the operation `op`, moves each of `jobs`, and their hubs are told so:
    /// each job once, at its new position, with its new document, and no other.
    fn tells(&self, op: Op, jobs: &[&str], act: impl FnOnce(&Store)) {
        let before: Vec<u64> = jobs.iter().map(|job| self.read(job).0).collect();
        self.hubs.0.borrow_mut().clear();
        act(&self.store);
        let mut told = self.hubs.0.take();
        let mut after = Vec::new();
        for (job, was) in jobs.iter().zip(before) {
            let (seq, doc) = self.read(job);
            assert!(
                seq > was,
                "{op:?} did not move {job} (position {was}, then {seq}): this scenario \
                 would prove nothing"
            );
            after.push(Told {
                job_id: (*job).to_owned(),
                seq,
                doc,
            });
        }
        told.sort();
        after.sort();
        assert_eq!(
            told, after,
            "{op:?} moved these jobs: the hub of each must be told, at its new position"
        );
    }
}

#[test]
fn every_operation_that_moves_a_job_tells_its_hub() {
    let mut scenarios = 0;
    for &op in Op::ALL {
        let t = Bench::new();
        match op {
            // Its caller tells the hub (`Store::tell_claim`), when it chooses.
            Op::Claim => {
                let (job, att) = t.create();
                t.tells(op, &[&job], |s| {
                    let claim = done(s.claim(&att, "token_1")).unwrap_or_else(|e| panic!("{e:?}"));
                    assert!(matches!(claim, Claim::Claimed(_)));
                    done(s.tell_claim());
                });
            }
            Op::MoveAttempt => {
                let (job, att) = t.create();
                t.claim(&att);
                t.tells(op, &[&job], |_| {
                    t.move_attempt(&att, AttemptState::Running, AttemptState::Unknown);
                });
            }
            Op::Complete => {
                let (job, att) = t.create();
                t.claim(&att);
                t.tells(op, &[&job], |s| {
                    let output = json!({"text": "done"});
                    let completion = done(s.complete(&job, &att, Offer::Provider, &output, None))
                        .unwrap_or_else(|e| panic!("{e:?}"));
                    assert!(matches!(completion, Completion::Won), "{completion:?}");
                });
            }
            Op::Cancel => {
                let (job, _) = t.create();
                t.tells(op, &[&job], |s| {
                    let after = done(s.cancel(None, &job)).unwrap_or_else(|e| panic!("{e:?}"));
                    assert_eq!(after.map(|a| a.job.status), Some(JobStatus::Cancelled));
                });
            }
            Op::InsertAttempt => {
                // The fallback button, on a job whose attempt failed.
                let (job, att) = t.create();
                t.claim(&att);
                t.move_attempt(&att, AttemptState::Running, AttemptState::Failed);
                let new_id = t.store.new_attempt_id(&job);
                t.tells(op, &[&job], |s| {
                    let outcome = done(s.insert_attempt(&t.next(&job, &new_id), OWNER, None))
                        .unwrap_or_else(|e| panic!("{e:?}"));
                    assert!(matches!(outcome, NewAttemptOutcome::Created(_)));
                });
            }
            Op::InsertHedge => {
                let (job, att) = t.create();
                t.claim(&att);
                let new_id = t.store.new_attempt_id(&job);
                t.tells(op, &[&job], |s| {
                    let hedged = done(s.insert_hedge(&t.next(&job, &new_id), &att))
                        .unwrap_or_else(|e| panic!("{e:?}"));
                    assert!(hedged, "a hedge next to the only attempt running");
                });
            }
            Op::InsertFailover => {
                let (job, att) = t.create();
                t.claim(&att);
                let new_id = t.store.new_attempt_id(&job);
                let error = AttemptError::new("provider_error", "the provider failed", true);
                t.tells(op, &[&job], |s| {
                    let next = t.next(&job, &new_id);
                    let out = done(s.fail_and_fail_over(
                        &att,
                        &[AttemptState::Running],
                        &error,
                        &next,
                        3,
                    ))
                    .unwrap_or_else(|e| panic!("{e:?}"));
                    assert_eq!(out, (true, true), "failed, and failed over");
                });
            }
            Op::Reconcile => {
                // One sweep moves two jobs, one by each of its statements: a `running`
                // attempt whose dispatcher is lost, and an `unknown` one past abandon.
                let (lost, lost_att) = t.create();
                t.claim(&lost_att);
                let (abandoned, abandoned_att) = t.create();
                t.claim(&abandoned_att);
                t.move_attempt(&abandoned_att, AttemptState::Running, AttemptState::Unknown);
                set_now_ms(clock::now_ms() + 60_000.0);
                let cutoff = clock::rfc3339(clock::now_ms() - 30_000.0);
                let rule = ReconcileRule {
                    provider: PROVIDER.to_owned(),
                    abandon_before: Some(cutoff.clone()),
                    lost_before: cutoff,
                };
                t.tells(op, &[&lost, &abandoned], |s| {
                    let swept = done(s.reconcile(&[rule])).unwrap_or_else(|e| panic!("{e:?}"));
                    assert_eq!(swept, (1, 1), "one abandoned, one lost");
                });
            }
            Op::AttemptByRequest
            | Op::AttemptJob
            | Op::Certifications
            | Op::CreateOrGetJob
            | Op::Events
            | Op::Job
            | Op::JobByKey
            | Op::JobByKeyBefore
            | Op::LogEvent
            | Op::ListAttempts
            | Op::ListJobs
            | Op::MoveStatus
            | Op::Ping
            | Op::Purge
            | Op::PurgeStats
            | Op::SaveCertification
            | Op::Stats
            | Op::StuckStarting
            | Op::Watch => {
                assert_eq!(
                    op.moves(),
                    Moves::Nothing,
                    "{op:?} moves jobs now: give it a scenario above"
                );
                continue;
            }
        }
        scenarios += 1;
    }
    let moving = Op::ALL.iter().filter(|op| op.moves() != Moves::Nothing);
    assert_eq!(
        scenarios,
        moving.count(),
        "one scenario per operation that moves jobs"
    );
}

/// The claim's document waits in the store, not sent to the hub: the hub hears of the
/// claim only when its caller tells it, at the claim's position, and only once; a
/// delivery that finds the attempt already claimed has the document to tell too.
#[test]
fn a_claim_tells_its_hub_only_through_its_caller() {
    let t = Bench::new();
    let (job, att) = t.create();
    t.hubs.0.borrow_mut().clear();
    let claim = done(t.store.claim(&att, "token_1")).unwrap_or_else(|e| panic!("{e:?}"));
    assert!(matches!(claim, Claim::Claimed(_)), "{att} is claimed");
    assert_eq!(t.hubs.0.borrow().len(), 0, "the claim itself tells no hub");
    let (seq, doc) = t.read(&job);
    done(t.store.tell_claim());
    assert_eq!(
        t.hubs.0.take(),
        vec![Told {
            job_id: job.clone(),
            seq,
            doc
        }],
        "told by its caller, at the claim's position"
    );
    done(t.store.tell_claim());
    assert_eq!(t.hubs.0.take().len(), 0, "a claim's document is told once");
    let again = done(t.store.claim(&att, "token_2")).unwrap_or_else(|e| panic!("{e:?}"));
    assert!(
        matches!(again, Claim::Ignored { .. }),
        "a second delivery is ignored"
    );
    done(t.store.tell_claim());
    assert_eq!(
        t.hubs.0.take().len(),
        1,
        "its document is there to tell too"
    );
}
