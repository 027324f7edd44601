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
mod reconciler;
mod sql;

pub(crate) use attempts::{
    Claim, ClaimedAttempt, Completion, NewAttemptOutcome, NextAttempt, Offer,
};
pub(crate) use certifications::Certification;
pub(crate) use jobs::NewJob;
pub(crate) use lists::{AttemptFilter, JobFilter, Page, StatRow};
pub(crate) use reconciler::ReconcileRule;

use crate::clock;
use crate::error::{ApiResult, AppError};
use crate::fault::{Fault, When};
use onceclick_protocol::Job;
use serde::Deserialize;
use serde_json::Value;
use std::cell::{Cell, RefCell};
use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement, D1Result};

/// D1 plus a count of the round trips made and the time they took, for `Server-Timing`.
pub(crate) struct Store {
    db: D1Database,
    round_trips: Cell<u32>,
    millis: Cell<f64>,
    /// Test-only faults still armed (see `fault.rs`), and what they belong to (the
    /// request's path, or the dispatched attempt) for the `fault_fired` log line.
    faults: RefCell<Vec<Fault>>,
    fault_scope: String,
}

/// A job read from `job_documents`: the API document plus what only the server sees.
#[derive(Debug)]
pub(crate) struct StoredJob {
    pub(crate) job: Job,
    pub(crate) fingerprint: String,
    /// The document exactly as the database rendered it.
    pub(crate) doc: String,
    /// The job's last event sequence, quoted: changes whenever the document does.
    pub(crate) etag: String,
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

fn js(s: &str) -> JsValue {
    JsValue::from_str(s)
}

fn js_opt(s: Option<&str>) -> JsValue {
    s.map_or(JsValue::NULL, js)
}

fn js_num(n: u32) -> JsValue {
    JsValue::from_f64(f64::from(n))
}

fn js_flag(b: bool) -> JsValue {
    js_num(u32::from(b))
}

/// How many rows a conditional write changed. Every such statement ends in
/// `RETURNING id`: SQLite returns exactly the rows it changed, which is more dependable
/// than D1's `meta.changes` (absent from batch results under local D1).
fn changes(result: &D1Result) -> ApiResult<usize> {
    Ok(result.results::<Value>()?.len())
}

/// The first row of a statement's result, if any.
fn first_row<T: serde::de::DeserializeOwned>(result: &D1Result) -> ApiResult<Option<T>> {
    Ok(result.results::<T>()?.into_iter().next())
}

fn json_text(value: &impl serde::Serialize) -> ApiResult<String> {
    serde_json::to_string(value).map_err(AppError::internal)
}

impl Store {
    pub(crate) fn new(db: D1Database) -> Self {
        Self {
            db,
            round_trips: Cell::new(0),
            millis: Cell::new(0.0),
            faults: RefCell::new(Vec::new()),
            fault_scope: String::new(),
        }
    }

    /// Arms test-only faults (see `fault.rs`) for calls made on behalf of `scope`.
    pub(crate) fn with_faults(mut self, faults: Vec<Fault>, scope: &str) -> Self {
        *self.faults.borrow_mut() = faults;
        self.fault_scope = scope.to_owned();
        self
    }

    /// Fires (and disarms) the fault armed for `op` at `when`, if any.
    fn fault(&self, op: &str, when: When) -> Option<AppError> {
        let mut faults = self.faults.borrow_mut();
        let i = faults.iter().position(|f| f.op == op && f.when == when)?;
        faults.remove(i);
        worker::console_error!(
            "{}",
            serde_json::json!({"event": "fault_fired", "op": op,
                               "when": if when == When::Before { "before" } else { "after" },
                               "scope": self.fault_scope})
        );
        let what = match when {
            When::Before => "failed before it committed",
            When::After => "committed, and its reply was lost",
        };
        Some(AppError::unavailable(format!(
            "injected fault: the D1 call {op} {what}"
        )))
    }

    /// Fires the fault armed for a step that is not a D1 call (`dispatch_prepare`).
    pub(crate) fn fault_at(&self, op: &str) -> ApiResult<()> {
        self.fault(op, When::Before).map_or(Ok(()), Err)
    }

    /// The D1 round trips made so far.
    pub(crate) fn round_trips(&self) -> u32 {
        self.round_trips.get()
    }

    /// `Server-Timing` value: `d1;dur=…;desc="round trips=N"`.
    pub(crate) fn server_timing(&self) -> String {
        format!(
            "d1;dur={:.1};desc=\"round trips={}\"",
            self.millis.get(),
            self.round_trips.get()
        )
    }

    /// One D1 round trip of the store operation `op`. D1 reports `meta.duration` as 0
    /// locally, so round trips are timed here. A D1 failure is `service_unavailable`
    /// (503, retryable): the database may not have seen the call, or may have committed
    /// it and lost the reply; every write here is safe to send again.
    async fn timed<T>(
        &self,
        op: &str,
        call: impl std::future::Future<Output = worker::Result<T>>,
    ) -> ApiResult<T> {
        if let Some(fault) = self.fault(op, When::Before) {
            return Err(fault);
        }
        let start = clock::now_ms();
        let out = call.await;
        self.round_trips.set(self.round_trips.get() + 1);
        self.millis
            .set(self.millis.get() + (clock::now_ms() - start));
        let out = out.map_err(d1_error)?;
        match self.fault(op, When::After) {
            Some(fault) => Err(fault),
            None => Ok(out),
        }
    }

    fn stmt(&self, sql: &str, params: &[JsValue]) -> ApiResult<D1PreparedStatement> {
        Ok(self.db.prepare(sql).bind(params)?)
    }

    /// One batch (one transaction) of exactly `N` statements; its results come back in
    /// the same shape, so callers destructure them by position.
    async fn batch<const N: usize>(
        &self,
        op: &str,
        statements: [D1PreparedStatement; N],
    ) -> ApiResult<[D1Result; N]> {
        let results = self.batch_of(op, statements.into()).await?;
        let got = results.len();
        results.try_into().map_err(|_| {
            AppError::internal(format!(
                "{op}: the batch of {N} statements returned {got} results"
            ))
        })
    }

    /// A batch whose length is known only at run time (the reconciler's, per provider).
    async fn batch_of(
        &self,
        op: &str,
        statements: Vec<D1PreparedStatement>,
    ) -> ApiResult<Vec<D1Result>> {
        self.timed(op, self.db.batch(statements)).await
    }

    /// Runs one conditional write (ending in `RETURNING id`); true if it changed a row.
    async fn changed_one(&self, op: &str, stmt: D1PreparedStatement) -> ApiResult<bool> {
        let result = self.timed(op, stmt.all()).await?;
        Ok(changes(&result)? == 1)
    }

    /// One job read through `job_documents` by the statement `sql`.
    async fn read_job(
        &self,
        op: &str,
        sql: &str,
        params: &[JsValue],
    ) -> ApiResult<Option<StoredJob>> {
        let stmt = self.stmt(sql, params)?;
        self.timed(op, stmt.first::<DocRow>(None))
            .await?
            .map(DocRow::stored)
            .transpose()
    }

    pub(crate) async fn ping(&self) -> ApiResult<()> {
        let stmt = self.stmt(sql::PING, &[])?;
        self.timed("ping", stmt.first::<Value>(None)).await?;
        Ok(())
    }
}

/// A D1 failure as the client should see it. Most are transient (D1 did not answer, or
/// answered after committing with the reply lost): `503`, safe to retry. A statement
/// the database refuses for good (a constraint, a trigger's `RAISE`, a value too big,
/// SQL it cannot run) would fail the same way again: that is our bug, a `500`.
fn d1_error(e: worker::Error) -> AppError {
    const PERMANENT: &[&str] = &[
        "constraint",
        "TOOBIG",
        "too big",
        "syntax error",
        "no such",
        "AttemptState::MOVES",
    ];
    let text = e.to_string();
    if PERMANENT.iter().any(|p| text.contains(p)) {
        AppError::internal(text)
    } else {
        AppError::unavailable(text)
    }
}
