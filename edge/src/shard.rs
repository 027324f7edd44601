//! The shard: a Durable Object with SQLite storage that holds the jobs whose (owner, key)
//! hash to it (`STORE=durable`; see `places.rs`).
//!
//! Each object is a single-threaded writer with its own SQLite. It applies the same
//! migration files as D1 on its first call, runs each batch the front Worker sends as one
//! synchronous transaction, and runs its own alarm. The alarm hands the jobs the shard
//! created on to the queue (`handoff.rs`: a create schedules it in its own transaction),
//! and reconciles the shard when its pass is due (every `RECONCILE_EVERY_MS`, the due
//! time kept in the shard's own table): lost dispatches, dead dispatchers,
//! `abandon_after_ms` and the retention purge, on its own rows only.

use crate::alarm;
use crate::error::AppError;
use crate::fault;
use crate::handoff::Outbox;
use crate::places::Local;
use crate::places::WireBatch;
use crate::reconcile;
use serde::Deserialize;
use serde_json::{json, Value};
use std::cell::Cell;
use wasm_bindgen::{JsCast, JsValue};
use worker::js_sys::{Array, Reflect};
use worker::{durable_object, DurableObject, Env, Request, Response, Result, State};

const MIGRATIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS onceclick_migrations (
    name TEXT PRIMARY KEY,
    applied_at TEXT NOT NULL)";
/// The object's own name (`s8.3`), kept so that an instance the alarm wakes (with no
/// call to learn it from) still names itself in its log lines.
const NAME_TABLE: &str = "CREATE TABLE IF NOT EXISTS onceclick_shard (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    name TEXT NOT NULL)";
const SAVE_NAME: &str = "INSERT INTO onceclick_shard (one, name) VALUES (1, ?1)
    ON CONFLICT (one) DO NOTHING";
const NAME: &str = "SELECT name FROM onceclick_shard";
/// When the shard's next reconciler pass is due (ms since the epoch): one alarm serves
/// the hand-off and the pass, so the pass's time is kept apart from the alarm's.
const PASS_TABLE: &str = "CREATE TABLE IF NOT EXISTS onceclick_pass (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    due_ms REAL NOT NULL)";
const PASS_DUE: &str = "SELECT due_ms FROM onceclick_pass";
const SET_PASS_DUE: &str = "INSERT INTO onceclick_pass (one, due_ms) VALUES (1, ?1)
    ON CONFLICT (one) DO UPDATE SET due_ms = excluded.due_ms";
const APPLIED: &str = "SELECT name FROM onceclick_migrations";
const RECORD: &str = "INSERT INTO onceclick_migrations (name, applied_at)
    VALUES (?1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))";

// Only `fetch` and `alarm` are bound: the WebSocket and socket handlers a bare
// `#[durable_object]` adds would cost the Worker their glue for nothing.
#[durable_object(alarm)]
pub struct Shard {
    state: State,
    env: Env,
    /// The object's name (`s8.3`), learnt from the first call.
    name: std::cell::RefCell<String>,
    migrated: Cell<bool>,
    /// An alarm is known to be set.
    armed: Cell<bool>,
    /// The name is kept in the shard's own table.
    name_kept: Cell<bool>,
    /// The attempts created here and not yet handed to the queue.
    outbox: std::rc::Rc<Outbox>,
}

/// `POST /reconcile`: the test-only "reconcile now" (faults armed as in a request), or
/// with `alarm_in_ms` set, the shard's alarm moved to that many milliseconds from now.
#[derive(Deserialize)]
struct ReconcileNow {
    shard: String,
    #[serde(default)]
    fault: Option<String>,
    #[serde(default)]
    alarm_in_ms: Option<i64>,
}

impl DurableObject for Shard {
    fn new(state: State, env: Env) -> Self {
        Self {
            state,
            env,
            name: std::cell::RefCell::new(String::new()),
            migrated: Cell::new(false),
            armed: Cell::new(false),
            name_kept: Cell::new(false),
            outbox: std::rc::Rc::new(Outbox::new()),
        }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        let text = req.text().await?;
        let answer = match req.path().as_str() {
            "/batch" => match serde_json::from_str::<WireBatch>(&text) {
                Ok(batch) => self.batch(batch).await,
                Err(e) => json!({"error": format!("a batch that does not parse: {e}")}).to_string(),
            },
            "/reconcile" => match serde_json::from_str::<ReconcileNow>(&text) {
                Ok(now) => self.reconcile_now(now).await.to_string(),
                Err(e) => json!({"error": format!("a reconcile call that does not parse: {e}")})
                    .to_string(),
            },
            other => json!({"error": format!("no shard call {other}")}).to_string(),
        };
        Response::ok(answer)
    }

    async fn alarm(&self) -> Result<Response> {
        self.armed.set(false);
        self.recall_name();
        let name = self.name.borrow().clone();
        let local = self.local();
        let host = crate::worker_host::WorkerHost::new(&self.env, None);
        self.wake(&local);
        let handed = self.outbox.hand_off(&host).await;
        let kept = first_value(&local, PASS_DUE, "due_ms").and_then(|v| v.as_f64());
        let pass = alarm::pass(kept, crate::clock::now_ms(), self.every_ms());
        if pass.keep {
            self.keep_pass_due(pass.due_ms);
        }
        worker::console_log!(
            "{}",
            json!({"event": "alarm_ran", "shard": name, "handed_off": handed, "reconciled": pass.runs})
        );
        let due = if pass.runs {
            if let Err(e) = self.reconcile(None).await {
                worker::console_error!(
                    "{}",
                    json!({"event": "reconcile_failed", "shard": name, "code": e.code.as_str(),
                           "cause": e.cause_or_detail()})
                );
            }
            self.keep_pass_due(crate::clock::now_ms() + self.every_ms())
        } else {
            pass.due_ms
        };
        // Decided and set in one synchronous turn, after the last await (`alarm.rs`).
        let holds_jobs = || {
            first_value(&local, onceclick_core::alarm::HAS_JOBS, "any")
                .and_then(|v| v.as_f64())
                .unwrap_or(1.0)
                != 0.0
        };
        let next = alarm::next_in_ms(
            self.outbox.next_in_ms(),
            due,
            crate::clock::now_ms(),
            holds_jobs,
        );
        // A shard that still has work and could not set its next alarm fails this one,
        // so that the runtime runs it again (with backoff) instead of the shard going
        // unreconciled until its next write.
        if let Some(in_ms) = next {
            if !self.arm(in_ms).await {
                return Err(worker::Error::RustError(format!(
                    "shard {name}: the next alarm could not be set"
                )));
            }
        }
        Response::ok("reconciled")
    }
}

impl Shard {
    fn local(&self) -> Local {
        Local::new(&self.state.storage(), &self.name.borrow())
    }

    /// Learns the object's name from a call (the first of this instance), and keeps it.
    /// Until that is stored, every call tries again.
    fn learn_name(&self, name: &str) {
        if self.name_kept.get() {
            return;
        }
        if self.name.borrow().is_empty() {
            *self.name.borrow_mut() = name.to_owned();
        }
        let local = self.local();
        let kept = self.migrate(&local).is_ok()
            && local
                .run(vec![(SAVE_NAME.to_owned(), vec![JsValue::from_str(name)])])
                .is_ok();
        self.name_kept.set(kept);
    }

    /// The name kept by an earlier instance, for an instance the alarm woke.
    fn recall_name(&self) {
        if !self.name.borrow().is_empty() {
            return;
        }
        let local = self.local();
        let name = self
            .migrate(&local)
            .ok()
            .and_then(|()| first_value(&local, NAME, "name"))
            .and_then(|v| v.as_string());
        if let Some(name) = name {
            *self.name.borrow_mut() = name;
        }
    }

    /// Applies the migrations this shard has not applied yet, each in one transaction
    /// with the row that records it.
    fn migrate(&self, local: &Local) -> std::result::Result<(), String> {
        if self.migrated.get() {
            return Ok(());
        }
        let sets = local.run(vec![
            (MIGRATIONS_TABLE.to_owned(), Vec::new()),
            (NAME_TABLE.to_owned(), Vec::new()),
            (PASS_TABLE.to_owned(), Vec::new()),
            (APPLIED.to_owned(), Vec::new()),
        ])?;
        let applied: Vec<String> = sets
            .get(3)
            .dyn_into::<Array>()
            .map(|rows| {
                rows.iter()
                    .filter_map(|row| column(&row, "name")?.as_string())
                    .collect()
            })
            .unwrap_or_default();
        for (name, script) in onceclick_core::store::migrations::MIGRATIONS {
            if !applied.iter().any(|a| a == name) {
                local.migrate(script, RECORD, name)?;
            }
        }
        self.migrated.set(true);
        Ok(())
    }

    /// The instance's first event, once migrated: before it runs any batch, it reads
    /// what its shard holds `starting` (`handoff.rs`). Whether it kept any (for an
    /// alarm to hand on).
    fn wake(&self, local: &Local) -> bool {
        if self.outbox.is_born() {
            return false;
        }
        match local.ids(crate::store::sql::STARTING) {
            Ok(starting) => {
                let any = !starting.is_empty();
                self.outbox.born(starting);
                any
            }
            Err(cause) => {
                worker::console_error!(
                    "{}",
                    json!({"event": "hand_off_failed", "shard": *self.name.borrow(), "cause": cause})
                );
                false
            }
        }
    }

    /// The answer's JSON text: `{"results": [[row, …], …], "rows_written": N,
    /// "rows_read": N}`, or `{"error": "…"}`.
    async fn batch(&self, batch: WireBatch) -> String {
        self.learn_name(&batch.shard);
        let local = self.local();
        let mut woke = false;
        let ran = self.migrate(&local).and_then(|()| {
            woke = self.wake(&local);
            local.run_wire(batch)
        });
        let ran = match ran {
            Ok(ran) => ran,
            Err(error) => {
                if woke {
                    self.arm(0.0).await;
                }
                return json!({ "error": error }).to_string();
            }
        };
        let answer = ran
            .answer()
            .unwrap_or_else(|error| json!({ "error": error }).to_string());
        if woke || !ran.handed.is_empty() {
            // In the turn of the commit, with no await between: the alarm is scheduled
            // with the rows (a Durable Object's writes and its alarm commit together),
            // so a committed job is always handed on. Should the alarm not take, the
            // attempts are handed on now, before the answer.
            self.outbox.keep(ran.handed);
            if self.arm(0.0).await {
                // The alarm is the guarantee; the hand-off starts now, as the answer goes
                // (the output gate holds its send until the commit and the alarm are
                // written), rather than in the alarm's turn (`handoff.rs`). An alarm that
                // runs while it sends comes again in `RETRY_MS`, for what the queue
                // refuses it or an end of this instance loses.
                let (outbox, env) = (self.outbox.clone(), self.env.clone());
                self.state.wait_until(async move {
                    let host = crate::worker_host::WorkerHost::new(&env, None);
                    outbox.hand_off(&host).await;
                });
            } else {
                let host = crate::worker_host::WorkerHost::new(&self.env, None);
                self.outbox.hand_off(&host).await;
            }
        } else if !self.armed.get() {
            self.arm_if_unset().await;
        }
        answer
    }

    fn every_ms(&self) -> f64 {
        crate::worker_host::config(&self.env).reconcile_every_ms
    }

    /// Sets the alarm `every_ms` from now unless one is already set.
    async fn arm_if_unset(&self) {
        let storage = self.state.storage();
        match storage.get_alarm().await {
            Ok(Some(_)) => self.armed.set(true),
            Ok(None) => {
                self.arm(self.every_ms()).await;
            }
            Err(e) => worker::console_error!(
                "{}",
                json!({"event": "alarm_failed", "shard": *self.name.borrow(), "cause": e.to_string()})
            ),
        }
    }

    /// Keeps when the next reconciler pass is due; that time.
    fn keep_pass_due(&self, due_ms: f64) -> f64 {
        let kept = self.local().run(vec![(
            SET_PASS_DUE.to_owned(),
            vec![JsValue::from_f64(due_ms)],
        )]);
        if let Err(cause) = kept {
            worker::console_error!(
                "{}",
                json!({"event": "pass_due_failed", "shard": *self.name.borrow(), "cause": cause})
            );
        }
        due_ms
    }

    /// Sets the alarm `in_ms` from now; false (and logged) if it could not.
    async fn arm(&self, in_ms: f64) -> bool {
        match self.state.storage().set_alarm(in_ms as i64).await {
            Ok(()) => {
                self.armed.set(true);
                true
            }
            Err(e) => {
                worker::console_error!(
                    "{}",
                    json!({"event": "alarm_failed", "shard": *self.name.borrow(), "cause": e.to_string()})
                );
                false
            }
        }
    }

    /// One reconciler pass over this shard's rows.
    async fn reconcile(&self, faults: Option<&str>) -> std::result::Result<(), AppError> {
        let local = self.local();
        self.migrate(&local).map_err(AppError::unavailable)?;
        let faults = faults
            .map(fault::parse)
            .transpose()
            .map_err(AppError::internal)?;
        let scope = "/v1/_reconcile";
        // The pass tells the hubs of the jobs its sweeps move, as the cron's does.
        let store = crate::places::local(local)
            .with_faults(faults.unwrap_or_default(), scope)
            .with_live(crate::live::notifier(&self.env));
        let host = crate::worker_host::WorkerHost::new(&self.env, None);
        reconcile::run(&host, &store).await
    }

    async fn reconcile_now(&self, now: ReconcileNow) -> Value {
        self.learn_name(&now.shard);
        if let Some(ms) = now.alarm_in_ms {
            let in_ms = ms.max(0) as f64;
            if let Err(e) = self.migrate(&self.local()) {
                return json!({"error": e});
            }
            self.keep_pass_due(crate::clock::now_ms() + in_ms);
            return if self.arm(in_ms).await {
                json!({"status": "armed"})
            } else {
                json!({"error": "the alarm could not be set"})
            };
        }
        match self.reconcile(now.fault.as_deref()).await {
            Ok(()) => json!({"status": "reconciled"}),
            Err(e) => json!({"error": e.cause_or_detail(), "code": e.code.as_str()}),
        }
    }
}

/// One column of a row object.
fn column(row: &JsValue, name: &str) -> Option<JsValue> {
    Reflect::get(row, &name.into()).ok()
}

/// The column `name` of the first row that `sql` (no parameters) returns, if any.
fn first_value(local: &Local, sql: &str, name: &str) -> Option<JsValue> {
    let sets = local.run(vec![(sql.to_owned(), Vec::new())]).ok()?;
    column(&sets.get(0).dyn_into::<Array>().ok()?.get(0), name)
}
