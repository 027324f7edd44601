//! The only module that writes SQL. Every decision that must be atomic is one statement
//! or one D1 batch (one transaction); nothing here reads, decides in Rust, then writes.
//!
//! Events and job status follow attempt moves through the triggers in
//! `migrations/`, so each move is a single conditional UPDATE. The statements themselves
//! are constants in [`sql`]; the files beside it group the calls by what they touch:
//! [`jobs`], [`attempts`], [`certifications`], the [`reconciler`]'s sweeps, and the
//! [`lists`] and figures that operators read.

mod attempts;
mod certifications;
mod jobs;
mod lists;
pub mod migrations;
pub mod op;
mod reconciler;
pub mod sql;
#[cfg(test)]
mod tells;

pub use attempts::{
    Claim, ClaimedAttempt, Completion, NewAttemptOutcome, NextAttempt, Offer, Stop,
};
pub use certifications::Certification;
pub use jobs::NewJob;
pub use lists::{AttemptFilter, JobFilter, Page, StatRow};
pub use op::{Moves, Op};
pub use reconciler::ReconcileRule;

pub mod native;
mod route;
mod rows;

pub use route::{Layout, Places, Route, Target};
#[allow(unreachable_pub)] // the simulator's shell names it (`sim.rs`)
pub use rows::HandOff;
pub use rows::{storage_error, Cost, Rows, Stmt};

use crate::clock;
use crate::error::{ApiResult, AppError};
use crate::fault::{Fault, Point, When};
use futures_util::future::LocalBoxFuture;
use onceclick_protocol::Job;
use serde::Deserialize;
use serde_json::Value;
use std::cell::{Cell, RefCell};

/// The store: one D1 database, or the shards (Durable Objects with SQLite storage), or
/// (inside a shard) that shard's own SQLite. It counts the round trips made and their
/// time per database or shard, for `Server-Timing`.
pub struct Store {
    places: std::rc::Rc<dyn Places>,
    layout: Layout,
    round_trips: Cell<u32>,
    /// Rows written and read so far, over every place.
    cost: Cell<Cost>,
    /// The dispatcher's watch reads over its calls ([`Op::Watch`]), counted apart: how
    /// many a call makes depends on how long its provider takes, not on the path.
    watched: Cell<(u32, Cost)>,
    /// The documents handed to the jobs' hubs (one request to a hub each).
    notified: Cell<u32>,
    /// Round trips, milliseconds and rows per database or shard, in the order first
    /// used.
    timing: RefCell<Vec<PlaceTiming>>,
    /// Test-only faults still armed (see `fault.rs`), and what they belong to (the
    /// request's path, or the dispatched attempt) for the `fault_fired` log line.
    faults: RefCell<Vec<Fault>>,
    fault_scope: String,
    /// `REFUSE_NEW_KEYS=true`: the first step of a move to another store. A create whose
    /// key is not bound yet is refused (503, retryable) instead of bound here.
    refuse_new_keys: bool,
    /// `LOG_STORE_CALLS=true` (test Workers): a `store_call` line for every call, naming
    /// its operation, its place and its scope, so a suite can count the calls each shard
    /// received, the queue consumer's included (it has no response to read).
    log_calls: bool,
    /// Where the documents of the jobs this store moves are sent, for their live
    /// streams (`live.rs`); `None` when nobody listens (the simulator, a deployment
    /// without the `LIVE` binding).
    live: Option<std::rc::Rc<dyn crate::host::Notify>>,
    /// The document of the last claim ([`Moves::OneJobByCaller`]), until the dispatcher
    /// tells its hub ([`Store::tell_claim`]).
    claimed: Cell<Option<Rows>>,
}

/// What one database or shard was asked for by this request.
struct PlaceTiming {
    name: String,
    trips: u32,
    millis: f64,
    cost: Cost,
}

/// A job read from `job_documents`: the API document plus what only the server sees.
#[derive(Debug)]
pub struct StoredJob {
    pub job: Job,
    pub fingerprint: String,
    /// The document exactly as the database rendered it.
    pub doc: String,
    /// The job's last event sequence, quoted: changes whenever the document does.
    pub etag: String,
}

/// One row of `job_documents`, as every statement that answers with a job selects it.
#[derive(Deserialize)]
struct DocRow {
    fingerprint: String,
    doc: String,
    etag: String,
}

impl DocRow {
    fn stored(self) -> ApiResult<StoredJob> {
        let job = serde_json::from_str(&self.doc).map_err(AppError::internal)?;
        Ok(StoredJob {
            job,
            fingerprint: self.fingerprint,
            doc: self.doc,
            etag: self.etag,
        })
    }
}

/// A statement's parameter (`?N`): text.
fn bind_text(s: &str) -> Value {
    Value::String(s.to_owned())
}

/// A statement's parameter: text, or `NULL`.
fn bind_opt_text(s: Option<&str>) -> Value {
    s.map_or(Value::Null, bind_text)
}

/// A statement's parameter: a whole number.
fn bind_num(n: u32) -> Value {
    Value::from(n)
}

/// A statement's parameter: a flag, as SQLite keeps one (0 or 1).
fn bind_flag(b: bool) -> Value {
    bind_num(u32::from(b))
}

/// How many rows a conditional write changed. Every such statement ends in
/// `RETURNING id`: SQLite returns exactly the rows it changed, which is more dependable
/// than D1's `meta.changes` (absent from batch results under local D1).
fn changes(result: &Rows) -> ApiResult<usize> {
    result.len()
}

/// The first row of a statement's result, if any.
fn first_row<T: serde::de::DeserializeOwned>(result: &Rows) -> ApiResult<Option<T>> {
    Ok(result.results::<T>()?.into_iter().next())
}

fn json_text(value: &impl serde::Serialize) -> ApiResult<String> {
    serde_json::to_string(value).map_err(AppError::internal)
}

impl Store {
    /// A store over `places`, laid out as `layout`.
    pub fn new(places: std::rc::Rc<dyn Places>, layout: Layout) -> Self {
        Self {
            places,
            layout,
            round_trips: Cell::new(0),
            cost: Cell::new(Cost::default()),
            watched: Cell::new((0, Cost::default())),
            notified: Cell::new(0),
            timing: RefCell::new(Vec::new()),
            faults: RefCell::new(Vec::new()),
            fault_scope: String::new(),
            refuse_new_keys: false,
            log_calls: false,
            live: None,
            claimed: Cell::new(None),
        }
    }

    /// `REFUSE_NEW_KEYS=true`: the first step of a move to another store (see the field).
    pub fn refusing_new_keys(mut self, refuse: bool) -> Self {
        self.refuse_new_keys = refuse;
        self
    }

    /// `LOG_STORE_CALLS=true`: a `store_call` line for every call (see the field).
    pub fn logging_calls(mut self, log: bool) -> Self {
        self.log_calls = log;
        self
    }

    /// The name of the one place this store is (`d1`, a shard's), for log lines.
    pub fn name(&self) -> String {
        self.layout.name()
    }

    /// Whether a create's dispatch is the store's to send: a shard hands a new job's
    /// attempt on from its alarm, scheduled in the create's transaction
    /// (`handoff.rs`); on D1 the create sends it once its answer is on its way.
    pub fn hands_off_creates(&self) -> bool {
        self.is_sharded()
    }

    /// True when new jobs live in shards that reconcile themselves (the cron has nothing
    /// to do but the previous layout's D1, if any).
    pub fn is_sharded(&self) -> bool {
        self.layout.is_sharded()
    }

    /// How many places a certification is written to: 1, or every shard (and, during a
    /// move, every place of the previous layout too).
    pub fn places(&self) -> u32 {
        self.layout.places()
    }

    /// True during a move: the deployment keeps the layout it moves from
    /// (`PREVIOUS_STORE`), still answering that layout's keys and jobs.
    pub fn has_previous(&self) -> bool {
        self.layout.has_previous()
    }

    /// The deployment's layout now (none inside a shard).
    pub fn now(&self) -> Option<onceclick_protocol::moving::StoreLayout> {
        self.layout.now()
    }

    /// The layout a move leaves, during one.
    pub fn previous(&self) -> Option<onceclick_protocol::moving::StoreLayout> {
        self.layout.previous()
    }

    /// Every shard of the layout now and of the previous one (none on D1 alone).
    pub fn shards(&self) -> Vec<onceclick_protocol::shard::Shard> {
        self.layout
            .everywhere()
            .into_iter()
            .filter_map(|place| match place {
                Target::Shard(shard) => Some(shard),
                _ => None,
            })
            .collect()
    }

    /// New ids for a job of (owner, key) and its first attempt: UUIDv7 on D1; in the
    /// shard the pair hashes to otherwise.
    pub fn new_job_ids(&self, owner: &str, key: &str) -> (String, String) {
        self.layout.new_ids(Route::Key { owner, key })
    }

    /// Whether `route` names a place of this store (an id of a store it no longer keeps,
    /// or of another shard count, names none).
    fn routes_somewhere(&self, route: Route<'_>) -> bool {
        matches!(self.layout.target(route), Ok(t) if t != Target::Nowhere)
    }

    /// A new attempt id in the same place as the job `job_id`.
    pub fn new_attempt_id(&self, job_id: &str) -> String {
        self.layout.new_ids(Route::Id(job_id)).1
    }

    /// Sends the document of every job this store moves to `live` (see [`Op::moves`]).
    pub fn with_live(mut self, live: Option<std::rc::Rc<dyn crate::host::Notify>>) -> Self {
        self.live = live;
        self
    }

    /// Arms test-only faults (see `fault.rs`) for calls made on behalf of `scope`.
    pub fn with_faults(mut self, faults: Vec<Fault>, scope: &str) -> Self {
        *self.faults.borrow_mut() = faults;
        self.fault_scope = scope.to_owned();
        self
    }

    /// Fires (and disarms) the fault armed for `at` at `when`, if any.
    fn fault(&self, at: Point, when: When) -> Option<AppError> {
        let mut faults = self.faults.borrow_mut();
        let i = faults.iter().position(|f| f.at == at && f.when == when)?;
        faults.remove(i);
        let op = at.name();
        crate::log::error(serde_json::json!({"event": "fault_fired", "op": op,
                               "when": if when == When::Before { "before" } else { "after" },
                               "scope": self.fault_scope}));
        let what = match when {
            When::Before => "failed before it committed",
            When::After => "committed, and its reply was lost",
        };
        Some(AppError::unavailable(format!(
            "injected fault: the store call {op} {what}"
        )))
    }

    /// Fires the fault armed for a step that is not a store call (`dispatch_prepare`).
    pub fn fault_at(&self, at: Point) -> ApiResult<()> {
        self.fault(at, When::Before).map_or(Ok(()), Err)
    }

    /// Fires the fault armed for `op` at either time, and says which: `before` or
    /// `after` (a streamed call's hand-offs to its hub, `fault.rs`).
    pub fn fault_when(&self, at: Point) -> Option<&'static str> {
        [(When::Before, "before"), (When::After, "after")]
            .into_iter()
            .find_map(|(when, name)| self.fault(at, when).map(|_| name))
    }

    /// The store round trips made so far.
    pub fn round_trips(&self) -> u32 {
        self.round_trips.get()
    }

    /// The rows written and read so far, over every place (the watch reads apart).
    pub fn cost(&self) -> Cost {
        self.cost.get()
    }

    /// The documents handed to the jobs' hubs so far.
    pub fn notified(&self) -> u32 {
        self.notified.get()
    }

    /// The subrequests this store has made so far: its round trips, its watch reads
    /// and its documents handed to hubs.
    pub fn subrequests(&self) -> u32 {
        self.round_trips.get() + self.watched.get().0 + self.notified.get()
    }

    /// The watch reads made so far (a failed one too), and their rows.
    pub fn watched(&self) -> (u32, Cost) {
        self.watched.get()
    }

    /// `Server-Timing` value: one metric per database or shard called,
    /// `d1;dur=…;desc="round trips=N rows written=W rows read=R"` or the same under the
    /// shard's object name (`s8.3`); past 8 places, their sum as `shards;dur=…;desc="round
    /// trips=N over M places rows written=W rows read=R"` (the shards, and the previous
    /// layout's D1 if kept). No call at all is `d1;dur=0.0;desc="round trips=0"` (or
    /// `shards`).
    pub fn server_timing(&self) -> String {
        let timing = self.timing.borrow();
        if timing.is_empty() {
            let name = if self.is_sharded() { "shards" } else { "d1" };
            return format!("{name};dur=0.0;desc=\"round trips=0\"");
        }
        let rows = |c: Cost| format!("rows written={} rows read={}", c.written, c.read);
        if timing.len() > 8 {
            let trips: u32 = timing.iter().map(|t| t.trips).sum();
            let millis: f64 = timing.iter().map(|t| t.millis).sum();
            let mut cost = Cost::default();
            for t in timing.iter() {
                cost.add(t.cost.written, t.cost.read);
            }
            return format!(
                "shards;dur={millis:.1};desc=\"round trips={trips} over {} places {}\"",
                timing.len(),
                rows(cost)
            );
        }
        timing
            .iter()
            .map(|t| {
                format!(
                    "{};dur={:.1};desc=\"round trips={} {}\"",
                    t.name,
                    t.millis,
                    t.trips,
                    rows(t.cost)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn record(&self, target: &str, millis: f64, cost: Cost) {
        self.round_trips.set(self.round_trips.get() + 1);
        let mut total = self.cost.get();
        total.add(cost.written, cost.read);
        self.cost.set(total);
        let mut timing = self.timing.borrow_mut();
        match timing.iter_mut().find(|t| t.name == target) {
            Some(t) => {
                t.trips += 1;
                t.millis += millis;
                t.cost.add(cost.written, cost.read);
            }
            None => timing.push(PlaceTiming {
                name: target.to_owned(),
                trips: 1,
                millis,
                cost,
            }),
        }
    }

    fn stmt(&self, sql: &'static str, params: &[Value]) -> ApiResult<Stmt> {
        Ok(Stmt {
            sql,
            params: params.to_vec(),
            hand_off: None,
        })
    }

    /// One round trip of the store operation `op` to the one place `route` names: one
    /// D1 batch, or one transaction in one shard. A failure is `service_unavailable`
    /// (503, retryable): the database may not have seen the call, or may have committed
    /// it and lost the reply; every write here is safe to send again. A route to no
    /// place (an id this service never made) reads as no rows, with no round trip.
    ///
    /// Boxed, like [`Store::call`]: every store call awaits this one future instead of
    /// having its body (both backends') compiled into its own state machine, which
    /// cost the Worker tens of KB of wasm.
    fn exec<'a>(
        &'a self,
        op: Op,
        route: Route<'a>,
        statements: Vec<Stmt>,
    ) -> LocalBoxFuture<'a, ApiResult<Vec<Rows>>> {
        Box::pin(async move {
            if let Some(fault) = self.fault(Point::Store(op), When::Before) {
                return Err(fault);
            }
            let target = self.layout.target(route)?;
            if self.log_calls {
                crate::log::info(
                    serde_json::json!({"event": "store_call", "op": op.name(), "place": target.name(),
                                       "scope": self.fault_scope}),
                );
            }
            // A move of one job reads its document back in its own batch, for the job's
            // hub; a move of many reads theirs after (`tell_moved`).
            let moves = op.moves();
            let live = match (&self.live, moves, route) {
                (Some(live), Moves::OneJob | Moves::OneJobByCaller, Route::Id(id)) => {
                    Some((live, id))
                }
                _ => None,
            };
            let mut statements = statements;
            if let Some((_, id)) = live {
                statements.push(self.stmt(sql::LIVE_DOC, &[bind_text(id)])?);
            }
            let out = if op == Op::Watch {
                // Counted as it starts: a watch beside it (a hedge's) sees it at once.
                let (trips, total) = self.watched.get();
                self.watched.set((trips + 1, total));
                let out = self.run(&target, statements).await;
                if let Ok((_, cost)) = &out {
                    let (trips, mut total) = self.watched.get();
                    total.add(cost.written, cost.read);
                    self.watched.set((trips, total));
                }
                out.map(|(rows, _)| rows)?
            } else {
                self.call(&target, statements).await?
            };
            if let Some(fault) = self.fault(Point::Store(op), When::After) {
                return Err(fault);
            }
            let mut out = out;
            if let Some((live, _)) = live {
                let doc = out.pop().ok_or_else(|| {
                    AppError::internal(format!("{}: the batch returned no document", op.name()))
                })?;
                match moves {
                    Moves::OneJobByCaller => self.claimed.set(Some(doc)),
                    _ => self.notify_hub(live.as_ref(), &doc).await,
                }
            }
            if moves == Moves::Many {
                self.tell_moved(&out).await;
            }
            Ok(out)
        })
    }

    /// Hands the last claim's document to its job's hub, if it has not gone yet. The
    /// dispatcher does so as its call's watch begins, beside the provider's call rather
    /// than before it; a document never told is only late (the streams re-read).
    pub async fn tell_claim(&self) {
        if let (Some(live), Some(doc)) = (&self.live, self.claimed.take()) {
            self.notify_hub(live.as_ref(), &doc).await;
        }
    }

    /// Hands a moved job's document to its live streams. A notification that cannot be
    /// sent is only late: the streams re-read the store while they are open, so the
    /// move itself stands and the caller is not told.
    async fn notify_hub(&self, live: &dyn crate::host::Notify, doc: &Rows) {
        #[derive(Deserialize)]
        struct Row {
            id: String,
            doc: String,
            etag: String,
        }
        let Ok(Some(row)) = first_row::<Row>(doc) else {
            return; // the job is gone (purged), or the id named none
        };
        let Some(seq) = onceclick_protocol::live::Position::of_etag(&row.etag) else {
            return;
        };
        if self.fault(Point::Notify, When::Before).is_some() {
            return;
        }
        let seq = if crate::mutant::on(crate::mutant::Mutant::NotifyUnderTheNextPosition) {
            seq.0 + 1
        } else {
            seq.0
        };
        self.notified.set(self.notified.get() + 1);
        if let Err(cause) = live.notify(&row.id, seq, &row.doc).await {
            crate::log::error(
                serde_json::json!({"event": "live_notify_failed", "job_id": row.id, "cause": cause}),
            );
        }
    }

    fn call<'a>(
        &'a self,
        target: &'a Target,
        statements: Vec<Stmt>,
    ) -> LocalBoxFuture<'a, ApiResult<Vec<Rows>>> {
        Box::pin(async move {
            // No place, no round trip to count ([`Store::run`] answers with no rows).
            if let Target::Nowhere = target {
                return self.run(target, statements).await.map(|(rows, _)| rows);
            }
            let start = clock::now_ms();
            let out = self.run(target, statements).await;
            let cost = out.as_ref().map_or(Cost::default(), |(_, cost)| *cost);
            self.record(&target.name(), clock::now_ms() - start, cost);
            out.map(|(rows, _)| rows)
        })
    }

    /// Runs `statements` in `target` as one transaction: their rows, and what the place
    /// billed. No place answers with no rows, and no round trip.
    fn run<'a>(
        &'a self,
        target: &'a Target,
        statements: Vec<Stmt>,
    ) -> LocalBoxFuture<'a, ApiResult<(Vec<Rows>, Cost)>> {
        match target {
            Target::Nowhere => Box::pin(futures_util::future::ready(Ok((
                statements.iter().map(|_| Rows::none()).collect(),
                Cost::default(),
            )))),
            _ => self.places.run(target, statements),
        }
    }

    /// The same statements in every place (of the layout now, and of the previous one);
    /// the results per place. One round trip to each, concurrently.
    async fn exec_everywhere(
        &self,
        op: Op,
        statements: impl Fn() -> ApiResult<Vec<Stmt>>,
    ) -> ApiResult<Vec<Vec<Rows>>> {
        self.exec_at(op, &self.layout.everywhere(), statements)
            .await
    }

    /// The same statements in each of `places`; the results per place, as
    /// [`Store::exec_everywhere`].
    async fn exec_at(
        &self,
        op: Op,
        places: &[Target],
        statements: impl Fn() -> ApiResult<Vec<Stmt>>,
    ) -> ApiResult<Vec<Vec<Rows>>> {
        if let Some(fault) = self.fault(Point::Store(op), When::Before) {
            return Err(fault);
        }
        let targets: Vec<&Target> = places.iter().collect();
        let out = self.call_all(&targets, &|_| statements()).await?;
        match self.fault(Point::Store(op), When::After) {
            Some(fault) => Err(fault),
            None => Ok(out),
        }
    }

    /// The batch `statements(i)` in the place `targets[i]`, for each, at most 32 in flight
    /// at once (their statements made wave by wave, so that a large parameter is not
    /// copied for every place at once); the results in the same order. Every place is
    /// called even after one fails, so that a write reaches all the others (a
    /// certification copy, say); the first failure is reported once all have answered.
    /// Boxed, and shared by every call that fans out, for the Worker's size.
    fn call_all<'a>(
        &'a self,
        targets: &'a [&'a Target],
        statements: &'a dyn Fn(usize) -> ApiResult<Vec<Stmt>>,
    ) -> LocalBoxFuture<'a, ApiResult<Vec<Vec<Rows>>>> {
        Box::pin(async move {
            let mut out = Vec::with_capacity(targets.len());
            let mut failed = None;
            for (wave, chunk) in targets.chunks(32).enumerate() {
                let calls = chunk
                    .iter()
                    .enumerate()
                    .map(|(i, t)| Ok(self.call(t, statements(wave * 32 + i)?)))
                    .collect::<ApiResult<Vec<_>>>()?;
                for result in futures_util::future::join_all(calls).await {
                    match result {
                        Ok(rows) => out.push(rows),
                        Err(e) => {
                            failed.get_or_insert(e);
                        }
                    }
                }
            }
            match failed {
                Some(e) => Err(e),
                None => Ok(out),
            }
        })
    }

    /// One batch (one transaction) of exactly `N` statements; its results come back in
    /// the same shape, so callers destructure them by position.
    async fn batch<const N: usize>(
        &self,
        op: Op,
        route: Route<'_>,
        statements: [Stmt; N],
    ) -> ApiResult<[Rows; N]> {
        exactly(self.exec(op, route, statements.into()).await?, op)
    }

    /// One statement, one round trip.
    async fn one(&self, op: Op, route: Route<'_>, stmt: Stmt) -> ApiResult<Rows> {
        let [rows] = self.batch(op, route, [stmt]).await?;
        Ok(rows)
    }

    /// Runs one conditional write (ending in `RETURNING id`); true if it changed a row.
    async fn changed_one(&self, op: Op, route: Route<'_>, stmt: Stmt) -> ApiResult<bool> {
        Ok(changes(&self.one(op, route, stmt).await?)? == 1)
    }

    /// One job read through `job_documents` by the statement `sql`.
    async fn read_job(
        &self,
        op: Op,
        route: Route<'_>,
        sql: &'static str,
        params: &[Value],
    ) -> ApiResult<Option<StoredJob>> {
        let stmt = self.stmt(sql, params)?;
        first_row::<DocRow>(&self.one(op, route, stmt).await?)?
            .map(DocRow::stored)
            .transpose()
    }

    pub async fn ping(&self) -> ApiResult<()> {
        let stmt = self.stmt(sql::PING, &[])?;
        self.one(Op::Ping, Route::Any, stmt).await?;
        Ok(())
    }
}

/// A batch's results as exactly `N` sets, one per statement, so callers destructure them
/// by position.
fn exactly<const N: usize>(results: Vec<Rows>, op: Op) -> ApiResult<[Rows; N]> {
    let got = results.len();
    results.try_into().map_err(|_| {
        AppError::internal(format!(
            "{}: the batch of {N} statements returned {got} results",
            op.name()
        ))
    })
}
