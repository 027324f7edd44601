//! The simulator's places: one in-memory SQLite per place (`d1`, or a shard's object
//! name), with the Worker's own migrations, running the Worker's own statements.
//!
//! - "Now" is the virtual clock's: `strftime` is replaced on each connection (SQLite
//!   lets an application define a built-in function again), so the SQL the Worker sends
//!   is the SQL that runs here, unchanged.
//! - A batch is one transaction, as a D1 batch and a shard's `transactionSync` are.
//! - A store call yields before it runs and after it commits, so that other tasks run
//!   in between (the round trip), and a crash can fall on either side of the commit.
//! - Faults: a batch may fail before it runs, or run, commit, and lose its reply.
//! - Instrumentation only the simulator has: temporary triggers name every job a batch
//!   touched, one line per row changed (so checks look only at those jobs, and the
//!   lines of each committed batch count the rows its task wrote outside the figures: a
//!   refused request can be shown to write nothing).

use crate::exec::{self, Yield};
use futures_util::future::LocalBoxFuture;
use onceclick_core::handoff::{to_hand_on, Outbox};
use onceclick_core::mutant::Mutant;
use onceclick_core::store::native::{Batch, Marks, Places};
use rusqlite::functions::FunctionFlags;
use rusqlite::types::Value as Sql;
use rusqlite::Connection;
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

/// The instrumentation's triggers: every job an insert, update or delete touched.
const TOUCH: &str = "
CREATE TEMP TABLE touched (job_id TEXT NOT NULL);
CREATE TEMP TRIGGER t_jobs_ins AFTER INSERT ON main.jobs BEGIN INSERT INTO touched VALUES (NEW.id); END;
CREATE TEMP TRIGGER t_jobs_upd AFTER UPDATE ON main.jobs BEGIN INSERT INTO touched VALUES (NEW.id); END;
CREATE TEMP TRIGGER t_jobs_del AFTER DELETE ON main.jobs BEGIN INSERT INTO touched VALUES (OLD.id); END;
CREATE TEMP TRIGGER t_att_ins AFTER INSERT ON main.attempts BEGIN INSERT INTO touched VALUES (NEW.job_id); END;
CREATE TEMP TRIGGER t_att_upd AFTER UPDATE ON main.attempts BEGIN INSERT INTO touched VALUES (NEW.job_id); END;
CREATE TEMP TRIGGER t_att_del AFTER DELETE ON main.attempts BEGIN INSERT INTO touched VALUES (OLD.job_id); END;
CREATE TEMP TRIGGER t_ev_ins AFTER INSERT ON main.job_events BEGIN INSERT INTO touched VALUES (NEW.job_id); END;
CREATE TEMP TRIGGER t_ev_del AFTER DELETE ON main.job_events BEGIN INSERT INTO touched VALUES (OLD.job_id); END;
";

thread_local! {
    /// Rows written outside the figures, per task (the update hook's count).
    static WRITES: RefCell<BTreeMap<u64, u32>> = const { RefCell::new(BTreeMap::new()) };
}

/// Rows task `task` wrote outside the figures (`stats`), and forgets them.
pub(crate) fn take_writes(task: u64) -> u32 {
    WRITES.with(|w| w.borrow_mut().remove(&task).unwrap_or(0))
}

pub(crate) fn clear_writes() {
    WRITES.with(|w| w.borrow_mut().clear());
}

/// A planted defect that lives in SQL: the statement's text, rewritten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqlMutant {
    /// The compare-and-swap without `completed_by IS NULL`.
    CasWithoutCompletedBy,
    /// The reconciler moves a lost `running` attempt to `failed`, not `unknown`.
    LostRunningFails,
    /// The purge takes a job with an `unknown` attempt.
    PurgeTakesUnknown,
    /// A claim numbers no change of its job: the document shows the attempt `running`
    /// under the ETag it had (a 304 would hide it), as `jobs.version` did before 0007.
    ClaimLeavesPosition,
}

impl SqlMutant {
    fn rewrite(self, sql: &str) -> Option<String> {
        let (from, to) = match self {
            SqlMutant::CasWithoutCompletedBy
                if sql.starts_with("UPDATE jobs\n        SET status = 'succeeded'") =>
            {
                ("AND completed_by IS NULL ", "")
            }
            SqlMutant::LostRunningFails
                if sql.contains("WHERE state = 'running' AND provider = ?1") =>
            {
                ("SET state = 'unknown'", "SET state = 'failed'")
            }
            SqlMutant::PurgeTakesUnknown
                if sql.starts_with("DELETE FROM")
                    && sql.contains("ORDER BY updated_at, id LIMIT ?2") =>
            {
                (
                    "('starting', 'running', 'unknown')",
                    "('starting', 'running')",
                )
            }
            SqlMutant::ClaimLeavesPosition
                if sql.starts_with("UPDATE attempts SET state = 'running'") =>
            {
                (
                    ",\n            running_seq = (SELECT seq + 1 FROM jobs WHERE id = attempts.job_id)",
                    "",
                )
            }
            _ => return None,
        };
        let out = sql.replace(from, to);
        (out != sql).then_some(out)
    }
}

/// Either kind of planted defect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnyMutant {
    Rust(Mutant),
    Sql(SqlMutant),
}

/// The faults the places inject, per batch.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FaultRates {
    /// Chance in a million that a batch fails before it runs.
    pub(crate) before: u32,
    /// Chance in a million that a batch commits and its reply is lost.
    pub(crate) after: u32,
}

pub(crate) struct Db {
    conns: RefCell<BTreeMap<String, Connection>>,
    pub(crate) faults: RefCell<FaultRates>,
    /// Until this virtual time, every batch fails before it runs (an outage).
    pub(crate) outage_until: RefCell<u64>,
    pub(crate) rng: RefCell<crate::rng::Rng>,
    mutant: Option<SqlMutant>,
    /// Whether the planted SQL defect's statement ever ran (a mutant that never runs
    /// proves nothing).
    pub(crate) mutant_ran: RefCell<bool>,
    /// Jobs touched since the last drain, per place.
    pub(crate) touched: RefCell<BTreeSet<(String, String)>>,
    pub(crate) batches: RefCell<u64>,
    pub(crate) faults_fired: RefCell<u64>,
    /// When a dispatcher's watch read first came back with its attempt `cancelled`, by
    /// attempt id: from then on its call must not answer.
    pub(crate) watch_saw_cancel: RefCell<BTreeMap<String, u64>>,
    /// Each shard's outbox: its object's memory (a crash of the objects' isolate
    /// empties it), made when first used (the instance coming to be).
    pub(crate) outboxes: RefCell<BTreeMap<String, Rc<Outbox>>>,
    /// Each shard's alarm, virtual ms: durable, as a Durable Object's alarm is.
    pub(crate) alarms: RefCell<BTreeMap<String, u64>>,
    /// When each shard's next reconciler pass is due, virtual ms, as its alarm keeps it
    /// (the shard's `onceclick_pass` row): durable.
    pub(crate) pass_due: RefCell<BTreeMap<String, f64>>,
    /// The first attempts each shard's creates committed for hand-off, by shard: what
    /// the shard's rows say, whatever its memory lost.
    pub(crate) handed: RefCell<BTreeMap<String, Vec<String>>>,
    /// Shards whose create committed a hand-off that their object then starts at once,
    /// after its answer (`shard.rs`'s `wait_until`), besides the alarm: one entry per
    /// commit, taken when it runs.
    pub(crate) eager: RefCell<Vec<String>>,
}

fn open(place: &str) -> rusqlite::Result<Connection> {
    let conn = Connection::open_in_memory()?;
    // As D1 and a Durable Object's SQLite do.
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.set_prepared_statement_cache_capacity(256);
    conn.create_scalar_function("strftime", 2, FunctionFlags::SQLITE_UTF8, |ctx| {
        let format: String = ctx.get(0)?;
        let time: Option<String> = ctx.get(1)?;
        Ok(time.and_then(|t| strftime(&format, &t)))
    })?;
    for (_, script) in onceclick_core::store::migrations::MIGRATIONS {
        conn.execute_batch(script)?;
    }
    conn.execute_batch(TOUCH)?;
    let _ = place;
    Ok(conn)
}

/// SQLite's `strftime(format, time)` for the formats the Worker's SQL uses, with
/// `'now'` read from the virtual clock.
fn strftime(format: &str, time: &str) -> Option<String> {
    let at = if time == "now" {
        chrono::DateTime::from_timestamp_millis(crate::platform::now_ms() as i64)?
    } else {
        chrono::DateTime::parse_from_rfc3339(time).ok()?.to_utc()
    };
    let format = format.replace("%f", "%S%.3f");
    Some(at.format(&format).to_string())
}

fn bind(value: &Value) -> Sql {
    match value {
        Value::Null => Sql::Null,
        Value::Bool(b) => Sql::Integer(i64::from(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Sql::Integer(i),
            None => Sql::Real(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => Sql::Text(s.clone()),
        other => Sql::Text(other.to_string()),
    }
}

fn json_of(value: rusqlite::types::ValueRef<'_>) -> Value {
    use rusqlite::types::ValueRef;
    match value {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::from(i),
        ValueRef::Real(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
    }
}

impl Db {
    pub(crate) fn new(seed: u64, mutant: Option<SqlMutant>) -> Self {
        Self {
            conns: RefCell::new(BTreeMap::new()),
            faults: RefCell::new(FaultRates::default()),
            outage_until: RefCell::new(0),
            rng: RefCell::new(crate::rng::Rng::new(seed ^ 0xD1D1)),
            mutant,
            mutant_ran: RefCell::new(false),
            touched: RefCell::new(BTreeSet::new()),
            batches: RefCell::new(0),
            faults_fired: RefCell::new(0),
            watch_saw_cancel: RefCell::new(BTreeMap::new()),
            outboxes: RefCell::new(BTreeMap::new()),
            alarms: RefCell::new(BTreeMap::new()),
            pass_due: RefCell::new(BTreeMap::new()),
            handed: RefCell::new(BTreeMap::new()),
            eager: RefCell::new(Vec::new()),
        }
    }

    /// The shard's outbox. A shard whose instance died has none: a new instance is
    /// born, with what the shard's rows hold `starting` (read before it runs anything,
    /// as the shard object's first event does), and sets its alarm if that is anything.
    pub(crate) fn outbox(&self, place: &str) -> Rc<Outbox> {
        if let Some(outbox) = self.outboxes.borrow().get(place) {
            return outbox.clone();
        }
        let starting: Vec<String> = self
            .query(place, onceclick_core::store::sql::STARTING, &[])
            .into_iter()
            .filter_map(|r| r.get("id").and_then(Value::as_str).map(str::to_owned))
            .collect();
        if !starting.is_empty() {
            let now = crate::platform::now_ms() as u64;
            self.alarms.borrow_mut().insert(place.to_owned(), now);
        }
        let outbox = Rc::new(Outbox::new());
        outbox.born(starting);
        self.outboxes
            .borrow_mut()
            .insert(place.to_owned(), outbox.clone());
        outbox
    }

    /// Runs `f` on the place's connection, opening (and migrating) it first if new.
    pub(crate) fn with<T>(&self, place: &str, f: impl FnOnce(&Connection) -> T) -> T {
        let mut conns = self.conns.borrow_mut();
        if !conns.contains_key(place) {
            let conn = open(place).unwrap_or_else(|e| panic!("open {place}: {e}"));
            conns.insert(place.to_owned(), conn);
        }
        f(&conns[place])
    }

    /// The places opened so far.
    pub(crate) fn places(&self) -> Vec<String> {
        self.conns.borrow().keys().cloned().collect()
    }

    /// Rows of `sql` in `place`, as JSON objects (the checks' reads: no fault, no yield).
    pub(crate) fn query(
        &self,
        place: &str,
        sql: &str,
        params: &[Value],
    ) -> Vec<Map<String, Value>> {
        self.with(place, |conn| {
            rows(conn, sql, params).unwrap_or_else(|e| panic!("{sql}: {e}"))
        })
    }

    fn run_now(
        &self,
        place: &str,
        batch: &Batch,
        marks: &Marks,
    ) -> Result<Vec<Vec<Value>>, String> {
        let mutant = self.mutant;
        let out = self.with(place, |conn| {
            conn.execute_batch("BEGIN").map_err(|e| e.to_string())?;
            let mut sets = Vec::with_capacity(batch.len());
            for (sql, params) in batch {
                let rewritten = mutant.and_then(|m| m.rewrite(sql));
                if rewritten.is_some() {
                    *self.mutant_ran.borrow_mut() = true;
                }
                let text = rewritten.as_deref().unwrap_or(sql);
                match rows(conn, text, params) {
                    Ok(set) => sets.push(set.into_iter().map(Value::Object).collect()),
                    Err(e) => {
                        let _ = conn.execute_batch("ROLLBACK");
                        return Err(e.to_string());
                    }
                }
            }
            let touched: Vec<String> = rows(conn, "DELETE FROM temp.touched RETURNING job_id", &[])
                .map_err(|e| e.to_string())?
                .into_iter()
                .filter_map(|r| r.get("job_id").and_then(Value::as_str).map(str::to_owned))
                .collect();
            conn.execute_batch("COMMIT").map_err(|e| e.to_string())?;
            // One line of `touched` per row a committed batch changed (SQLite's update
            // hook does not see WITHOUT ROWID tables).
            let task = exec::current();
            let written = u32::try_from(touched.len()).unwrap_or(u32::MAX);
            WRITES.with(|w| *w.borrow_mut().entry(task).or_insert(0) += written);
            Ok((sets, touched))
        });
        let (sets, touched) = out?;
        let mut all = self.touched.borrow_mut();
        for job in touched {
            all.insert((place.to_owned(), job));
        }
        // In the step of the commit, as the shard object does in its turn: the
        // attempts kept for the alarm, and the alarm set to now.
        for (i, mark) in marks {
            let ids: Vec<String> = sets
                .get(*i)
                .into_iter()
                .flatten()
                .filter_map(|row: &Value| row["id"].as_str().map(str::to_owned))
                .collect();
            if ids.is_empty() {
                continue;
            }
            self.handed
                .borrow_mut()
                .entry(place.to_owned())
                .or_default()
                .extend(ids.iter().cloned());
            self.outbox(place).keep(to_hand_on(mark, ids.into_iter()));
            let now = crate::platform::now_ms() as u64;
            self.alarms.borrow_mut().insert(place.to_owned(), now);
            self.eager.borrow_mut().push(place.to_owned());
        }
        Ok(sets)
    }
}

fn rows(
    conn: &Connection,
    sql: &str,
    params: &[Value],
) -> rusqlite::Result<Vec<Map<String, Value>>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let names: Vec<String> = stmt
        .column_names()
        .iter()
        .map(|n| (*n).to_owned())
        .collect();
    let bound: Vec<Sql> = params.iter().map(bind).collect();
    let mut out = Vec::new();
    let mut cursor = stmt.query(rusqlite::params_from_iter(bound))?;
    while let Some(row) = cursor.next()? {
        let mut object = Map::new();
        for (i, name) in names.iter().enumerate() {
            object.insert(name.clone(), json_of(row.get_ref(i)?));
        }
        out.push(object);
    }
    Ok(out)
}

/// The store's view of the places: a batch travels (a yield), runs as one transaction,
/// and its reply travels back (a yield), with the faults drawn on the way.
pub(crate) struct SimPlaces(pub(crate) Rc<Db>);

impl Places for SimPlaces {
    fn run(
        &self,
        place: &str,
        batch: Batch,
        marks: Marks,
    ) -> LocalBoxFuture<'static, Result<Vec<Vec<Value>>, String>> {
        let db = self.0.clone();
        let place = place.to_owned();
        Box::pin(async move {
            let out = run_batch(&db, &place, &batch, &marks).await;
            if let (Ok(sets), Some((sql, params))) = (&out, batch.first()) {
                let cancelled = sets
                    .first()
                    .and_then(|rows| rows.first())
                    .is_some_and(|row| row["state"] == "cancelled");
                if *sql == watch_sql() && cancelled {
                    if let Some(id) = params.first().and_then(Value::as_str) {
                        let now = crate::platform::now_ms() as u64;
                        db.watch_saw_cancel
                            .borrow_mut()
                            .entry(id.to_owned())
                            .or_insert(now);
                    }
                }
            }
            out
        })
    }
}

/// The statement of a dispatcher's watch over its call (`ATTEMPT_WATCH`).
fn watch_sql() -> &'static str {
    onceclick_core::store::sql::ALL
        .iter()
        .find(|(name, _)| *name == "ATTEMPT_WATCH")
        .map_or("", |(_, sql)| sql)
}

/// One batch's trip: out (a yield), the transaction, back (a yield), with the faults.
async fn run_batch(
    db: &Db,
    place: &str,
    batch: &Batch,
    marks: &Marks,
) -> Result<Vec<Vec<Value>>, String> {
    Yield::new().await;
    *db.batches.borrow_mut() += 1;
    let rates = *db.faults.borrow();
    let outage = (crate::platform::now_ms() as u64) < *db.outage_until.borrow();
    if outage || db.rng.borrow_mut().chance(rates.before) {
        *db.faults_fired.borrow_mut() += 1;
        return Err("D1_ERROR: Network connection lost (simulated, before commit)".to_owned());
    }
    let out = db.run_now(place, batch, marks);
    Yield::new().await;
    if out.is_ok() && db.rng.borrow_mut().chance(rates.after) {
        *db.faults_fired.borrow_mut() += 1;
        return Err(
            "D1_ERROR: Network connection lost (simulated, reply lost after commit)".to_owned(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The simulator's `strftime` against SQLite's own, for every format the Worker's
    /// SQL writes (`now!()`, and the figures' minute), on times that are not "now".
    #[test]
    fn strftime_agrees_with_sqlite() {
        let builtin = Connection::open_in_memory().unwrap_or_else(|e| panic!("{e}"));
        for format in ["%Y-%m-%dT%H:%M:%fZ", "%Y-%m-%dT%H:%M"] {
            for time in [
                "2026-12-01T17:05:04.123Z",
                "2027-01-31T23:59:59.999Z",
                "2026-02-28T00:00:00.000Z",
            ] {
                let theirs: String = builtin
                    .query_row("SELECT strftime(?1, ?2)", [format, time], |r| r.get(0))
                    .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(
                    strftime(format, time).as_deref(),
                    Some(theirs.as_str()),
                    "{format} {time}"
                );
            }
        }
    }

    /// Every planted SQL defect rewrites exactly the statements it means, among all
    /// the store sends: a renamed or reworded statement cannot leave a mutant planted
    /// nowhere.
    #[test]
    fn each_sql_mutant_rewrites_exactly_its_statements() {
        for (mutant, names) in [
            (SqlMutant::CasWithoutCompletedBy, &["COMPLETE_CAS"][..]),
            (SqlMutant::LostRunningFails, &["LOSE_RUNNING"][..]),
            (
                SqlMutant::PurgeTakesUnknown,
                &["PURGE_EVENTS", "PURGE_ATTEMPTS", "PURGE_JOBS"][..],
            ),
            (SqlMutant::ClaimLeavesPosition, &["CLAIM"][..]),
        ] {
            let hit: Vec<&str> = onceclick_core::store::sql::ALL
                .iter()
                .filter(|(_, sql)| mutant.rewrite(sql).is_some())
                .map(|(name, _)| *name)
                .collect();
            assert_eq!(hit, names, "{mutant:?}");
        }
    }
}
