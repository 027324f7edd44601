//! The only module that writes SQL. Every decision that must be atomic is one statement
//! or one D1 batch (one transaction); nothing here reads, decides in Rust, then writes.
//!
//! Events and job status follow attempt moves through the triggers in
//! `migrations/0001_*.sql`, so each move below is a single conditional UPDATE.

use crate::clock;
use crate::error::{ApiResult, AppError};
use crate::fault::{Fault, When};
use onceclick_protocol::{AttemptError, AttemptState, Event, EventType, Job, JobStatus};
use serde::Deserialize;
use serde_json::Value;
use std::cell::{Cell, RefCell};
use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement, D1Result};

/// Every timestamp the store writes comes from the database's clock, so that an
/// event's `at` never goes backwards against its `seq` (the Worker's clock differs
/// between isolates and stands still between I/O).
const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

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

#[derive(Deserialize)]
struct DocRow {
    fingerprint: String,
    doc: String,
    etag: String,
}

#[derive(Deserialize)]
struct EventRow {
    seq: f64,
    #[serde(rename = "type")]
    type_: String,
    at: String,
    attempt_id: Option<String>,
    details: String,
}

/// What `create_or_get_job` needs to insert a new job with its first attempt.
pub(crate) struct NewJob<'a> {
    pub(crate) job_id: &'a str,
    pub(crate) attempt_id: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) key: &'a str,
    pub(crate) fingerprint: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) input: &'a str,
    pub(crate) provider: &'a str,
}

/// An attempt the dispatcher has claimed (`starting → running`), with what it needs.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ClaimedAttempt {
    pub(crate) id: String,
    pub(crate) job_id: String,
    pub(crate) provider: String,
    /// The provider of the job's first attempt: it needs no certification.
    pub(crate) job_provider: String,
    pub(crate) kind: String,
    pub(crate) input: String,
}

#[derive(Deserialize)]
struct AttemptRow {
    #[serde(flatten)]
    attempt: ClaimedAttempt,
    state: AttemptState,
    claim_token: Option<String>,
}

/// The answer to a claim.
pub(crate) enum Claim {
    /// This claim (this token) holds the attempt in `running`: call the provider.
    Claimed(ClaimedAttempt),
    /// Another delivery claimed it already, it was cancelled, or its job has finished
    /// (then it is `superseded`): do nothing.
    Ignored { job_id: String, state: AttemptState },
    /// No such attempt (its job was purged).
    Missing,
}

/// Who offers a result to [`Store::complete`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Offer {
    /// The provider answered: from `running`, or from `unknown` if the reconciler gave
    /// up on the dispatcher meanwhile (a result is the best resolution of an unknown).
    /// A result for an attempt that has ended is logged as `late_result_discarded`.
    Provider,
    /// An admin resolves an `unknown` attempt as succeeded. It may become `superseded`
    /// only when its result equals the job's; otherwise nothing is written.
    Resolution,
}

impl Offer {
    fn leaves(self) -> &'static str {
        match self {
            Offer::Provider => r#"["running","unknown"]"#,
            Offer::Resolution => r#"["unknown"]"#,
        }
    }
}

/// What became of a result offered by an attempt.
#[derive(Debug)]
pub(crate) enum Completion {
    /// It won the compare-and-swap: it is the job's result, for good.
    Won,
    /// Another attempt had won; this one is now `superseded` and its output dropped.
    Lost { winner: Option<String> },
    /// The attempt or its job had ended (cancelled, abandoned…); the output was dropped.
    Discarded { state: AttemptState },
}

/// Why a new attempt was or was not inserted.
pub(crate) enum NewAttemptOutcome {
    Created(StoredJob),
    /// A resend of the request that made `attempt_id` (same `Idempotency-Key`).
    Replayed {
        stored: StoredJob,
        attempt_id: String,
    },
    /// The `Idempotency-Key` made another attempt with another request.
    KeyReused,
    NotFound,
    Refused {
        status: JobStatus,
        in_flight: bool,
        unresolved: bool,
    },
    NotCertified,
    Stale,
}

#[derive(Deserialize)]
struct NewAttemptRow {
    #[serde(flatten)]
    doc: DocRow,
    status: JobStatus,
    created: f64,
    replay_id: Option<String>,
    replay_fingerprint: Option<String>,
    in_flight: f64,
    unresolved: f64,
    certified: f64,
}

fn js(s: &str) -> JsValue {
    JsValue::from_str(s)
}

/// How many rows a conditional write changed. Every such statement ends in
/// `RETURNING id`: SQLite returns exactly the rows it changed, which is more dependable
/// than D1's `meta.changes` (absent from batch results under local D1).
fn changes(result: &D1Result) -> ApiResult<usize> {
    Ok(result.results::<Value>()?.len())
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

    async fn batch(
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

    pub(crate) async fn ping(&self) -> ApiResult<()> {
        let stmt = self.stmt("SELECT 1 AS ok", &[])?;
        self.timed("ping", stmt.first::<Value>(None)).await?;
        Ok(())
    }

    /// Inserts the job and its first attempt, or finds the job the (owner, key) pair is
    /// already bound to. One batch, one round trip. The caller compares the returned
    /// job's id with `new.job_id` to learn which happened, and its fingerprint to learn
    /// whether a replay asked for the same thing. The `job_created` and
    /// `attempt_started` events are written by triggers.
    pub(crate) async fn create_or_get_job(&self, new: &NewJob<'_>) -> ApiResult<StoredJob> {
        let insert_job = self.stmt(
            &format!(
                "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, kind, input, provider,
                                   status, version, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'queued', 1, {NOW}, {NOW})
                 ON CONFLICT (owner_id, idempotency_key) DO NOTHING"
            ),
            &[
                js(new.job_id),
                js(new.owner),
                js(new.key),
                js(new.fingerprint),
                js(new.kind),
                js(new.input),
                js(new.provider),
            ],
        )?;
        // Selecting from the job by its new id makes this a no-op on a conflict: a row
        // with that id exists only if the insert above happened.
        let insert_attempt = self.stmt(
            "INSERT INTO attempts (id, job_id, n, provider, state, started_at)
             SELECT ?1, id, 1, provider, 'starting', created_at FROM jobs WHERE id = ?2",
            &[js(new.attempt_id), js(new.job_id)],
        )?;
        let read = self.stmt(
            "SELECT fingerprint, doc, etag FROM job_documents
              WHERE owner_id = ?1 AND idempotency_key = ?2",
            &[js(new.owner), js(new.key)],
        )?;
        let results = self
            .batch("create_or_get_job", vec![insert_job, insert_attempt, read])
            .await?;
        first_row::<DocRow>(results.last())?
            .ok_or_else(|| AppError::internal("create_or_get_job: the batch returned no job"))
            .and_then(stored)
    }

    /// The job that (owner, key) is bound to, if any: how a request that no longer
    /// validates (a kind or provider removed since) is still answered with its replay.
    pub(crate) async fn job_by_key(&self, owner: &str, key: &str) -> ApiResult<Option<StoredJob>> {
        let stmt = self.stmt(
            "SELECT fingerprint, doc, etag FROM job_documents
              WHERE owner_id = ?1 AND idempotency_key = ?2",
            &[js(owner), js(key)],
        )?;
        self.timed("job_by_key", stmt.first::<DocRow>(None))
            .await?
            .map(stored)
            .transpose()
    }

    /// The attempt that the fallback-button request `key` made on `owner`'s job, with
    /// the job and the request's fingerprint: how a resend is answered when it would no
    /// longer pass validation (a provider or kind removed since).
    pub(crate) async fn attempt_by_request(
        &self,
        owner: &str,
        job_id: &str,
        key: &str,
    ) -> ApiResult<Option<(StoredJob, String, Option<String>)>> {
        #[derive(Deserialize)]
        struct Row {
            #[serde(flatten)]
            doc: DocRow,
            attempt_id: String,
            request_fingerprint: Option<String>,
        }
        let stmt = self.stmt(
            "SELECT j.fingerprint, j.doc, j.etag, a.id AS attempt_id, a.request_fingerprint
               FROM job_documents AS j JOIN attempts AS a ON a.job_id = j.id
              WHERE j.id = ?1 AND j.owner_id = ?2 AND a.request_key = ?3",
            &[js(job_id), js(owner), js(key)],
        )?;
        self.timed("attempt_by_request", stmt.first::<Row>(None))
            .await?
            .map(|r| Ok((stored(r.doc)?, r.attempt_id, r.request_fingerprint)))
            .transpose()
    }

    /// The job `id` if `owner` owns it (any owner for `None`). One round trip.
    pub(crate) async fn job(&self, owner: Option<&str>, id: &str) -> ApiResult<Option<StoredJob>> {
        let stmt = self.stmt(
            "SELECT fingerprint, doc, etag FROM job_documents
              WHERE id = ?1 AND (?2 IS NULL OR owner_id = ?2)",
            &[js(id), owner.map_or(JsValue::NULL, js)],
        )?;
        self.timed("job", stmt.first::<DocRow>(None))
            .await?
            .map(stored)
            .transpose()
    }

    /// The event log of job `id` if `owner` owns it, oldest first. `None` when the job
    /// does not exist for this owner (every job has at least its `job_created` event).
    pub(crate) async fn events(&self, owner: &str, id: &str) -> ApiResult<Option<Vec<Event>>> {
        let stmt = self.stmt(
            "SELECT e.seq, e.type, e.at, e.attempt_id, e.details
               FROM job_events AS e JOIN jobs AS j ON j.id = e.job_id
              WHERE j.id = ?1 AND j.owner_id = ?2
              ORDER BY e.seq",
            &[js(id), js(owner)],
        )?;
        let rows = self
            .timed("events", stmt.all())
            .await?
            .results::<EventRow>()?;
        if rows.is_empty() {
            return Ok(None);
        }
        rows.into_iter()
            .map(|r| {
                let value = serde_json::json!({
                    "seq": r.seq as i64,
                    "type": r.type_,
                    "at": r.at,
                    "attempt_id": r.attempt_id,
                    "details": serde_json::from_str::<Value>(&r.details)
                        .map_err(AppError::internal)?,
                });
                serde_json::from_value(value).map_err(AppError::internal)
            })
            .collect::<ApiResult<Vec<Event>>>()
            .map(Some)
    }

    /// Appends one event that no state move writes (`dispatch_ignored`,
    /// `failover_skipped`, `late_result_discarded` of a failure). None of them changes
    /// the job's document, so none moves its ETag.
    pub(crate) async fn log_event(
        &self,
        job_id: &str,
        event: EventType,
        attempt_id: Option<&str>,
        details: &Value,
    ) -> ApiResult<()> {
        let stmt = self.stmt(
            &format!(
                "INSERT INTO job_events (job_id, at, type, attempt_id, details)
                 SELECT id, {NOW}, ?2, ?3, ?4 FROM jobs WHERE id = ?1"
            ),
            &[
                js(job_id),
                js(event.as_str()),
                attempt_id.map_or(JsValue::NULL, js),
                js(&json_text(details)?),
            ],
        )?;
        self.timed("log_event", stmt.run()).await?;
        Ok(())
    }

    /// The dispatcher's claim: `starting → running` with a fresh `token`, one
    /// conditional UPDATE. The attempt is this caller's only if it is `running` with
    /// this token afterwards, so sending the same claim again after a lost reply finds
    /// it still ours, while a second delivery (another token) is told to do nothing: the
    /// provider is never called twice for one attempt. An attempt whose job has
    /// succeeded is never claimed; the same batch moves it to `superseded`.
    pub(crate) async fn claim(&self, attempt_id: &str, token: &str) -> ApiResult<Claim> {
        let claim = self.stmt(
            &format!(
                "UPDATE attempts SET state = 'running', dispatched_at = {NOW}, claim_token = ?2
                  WHERE id = ?1 AND state = 'starting'
                    AND (SELECT status FROM jobs WHERE id = attempts.job_id)
                        NOT IN ('succeeded', 'cancelled')"
            ),
            &[js(attempt_id), js(token)],
        )?;
        // Also a claim of ours, sent again after a lost reply, that finds the job
        // succeeded meanwhile: it must not call the provider now.
        let supersede = self.stmt(
            &format!(
                "UPDATE attempts SET state = 'superseded', finished_at = {NOW}
                  WHERE id = ?1
                    AND (state = 'starting' OR (state = 'running' AND claim_token = ?2))
                    AND (SELECT status FROM jobs WHERE id = attempts.job_id) = 'succeeded'"
            ),
            &[js(attempt_id), js(token)],
        )?;
        let read = self.stmt(
            "SELECT a.id, a.job_id, a.provider, j.provider AS job_provider, a.state,
                    a.claim_token, j.kind, j.input
               FROM attempts AS a JOIN jobs AS j ON j.id = a.job_id
              WHERE a.id = ?1",
            &[js(attempt_id)],
        )?;
        let results = self.batch("claim", vec![claim, supersede, read]).await?;
        Ok(match first_row::<AttemptRow>(results.last())? {
            None => Claim::Missing,
            Some(row)
                if row.state == AttemptState::Running
                    && row.claim_token.as_deref() == Some(token) =>
            {
                Claim::Claimed(row.attempt)
            }
            Some(row) => Claim::Ignored {
                job_id: row.attempt.job_id,
                state: row.state,
            },
        })
    }

    /// One move of one attempt, from any of `from` to `to`, recording `error` when
    /// given: a single conditional UPDATE that names the states it leaves. False when
    /// the attempt was in none of them (a concurrent move won: the job was cancelled).
    ///
    /// The dispatcher moves `running | unknown → failed` and `running → unknown`; an
    /// admin's resolve moves `unknown → failed | cancelled`.
    pub(crate) async fn move_attempt(
        &self,
        attempt_id: &str,
        from: &[AttemptState],
        to: AttemptState,
        error: Option<&AttemptError>,
    ) -> ApiResult<bool> {
        debug_assert!(
            from.iter().all(|f| f.can_move_to(to)),
            "{from:?} -> {to:?} is not a move"
        );
        let error = error.map(json_text).transpose()?;
        let from = json_text(&from.iter().map(|s| s.as_str()).collect::<Vec<_>>())?;
        let stmt = self.stmt(
            &format!(
                "UPDATE attempts SET state = ?3, error = coalesce(?4, error), finished_at = {NOW}
                  WHERE id = ?1 AND state IN (SELECT value FROM json_each(?2))
                  RETURNING id"
            ),
            &[
                js(attempt_id),
                js(&from),
                js(to.as_str()),
                error.as_deref().map_or(JsValue::NULL, js),
            ],
        )?;
        self.changed_one("move_attempt", stmt).await
    }

    /// Offers `output` as the result of `attempt_id` (see [`Offer`] for who may). One
    /// batch, safe to send again after a lost reply:
    ///
    /// 1. the compare-and-swap on the job: it takes the result only while
    ///    `completed_by IS NULL`, the job is not cancelled, and the attempt belongs to
    ///    the job and is in a state the offer may leave;
    /// 2. a hedge still `starting` when the job succeeds becomes `superseded`;
    /// 3. the attempt becomes `succeeded` if it is now the job's `completed_by`, else
    ///    `superseded` (the trigger logs `race_lost` with both ids);
    /// 4. a provider's result for an attempt that had already ended is logged as
    ///    `late_result_discarded`.
    pub(crate) async fn complete(
        &self,
        job_id: &str,
        attempt_id: &str,
        offer: Offer,
        output: &Value,
    ) -> ApiResult<Completion> {
        let output = json_text(output)?;
        let from = offer.leaves();
        let cas = self.stmt(
            &format!(
                "UPDATE jobs
                    SET status = 'succeeded', result = ?3, completed_by = ?2,
                        version = version + 1, updated_at = {NOW}
                  WHERE id = ?1 AND completed_by IS NULL AND status <> 'cancelled'
                    AND EXISTS (SELECT 1 FROM attempts
                                 WHERE id = ?2 AND job_id = ?1
                                   AND state IN (SELECT value FROM json_each(?4)))"
            ),
            &[js(job_id), js(attempt_id), js(&output), js(from)],
        )?;
        let supersede_starting = self.stmt(
            &format!(
                "UPDATE attempts SET state = 'superseded', finished_at = {NOW}
                  WHERE job_id = ?1 AND state = 'starting'
                    AND (SELECT status FROM jobs WHERE id = ?1) = 'succeeded'"
            ),
            &[js(job_id)],
        )?;
        let strict = offer == Offer::Resolution;
        let settle = self.stmt(
            &format!(
                "UPDATE attempts
                    SET state = CASE WHEN (SELECT completed_by FROM jobs WHERE id = ?1) = ?2
                                     THEN 'succeeded' ELSE 'superseded' END,
                        finished_at = {NOW}
                  WHERE id = ?2 AND job_id = ?1
                    AND state IN (SELECT value FROM json_each(?4))
                    AND (SELECT status FROM jobs WHERE id = ?1) = 'succeeded'
                    AND (?5 = 0
                         OR (SELECT completed_by FROM jobs WHERE id = ?1) = ?2
                         OR (SELECT result FROM jobs WHERE id = ?1) = ?3)
                 RETURNING id"
            ),
            &[
                js(job_id),
                js(attempt_id),
                js(&output),
                js(from),
                JsValue::from_f64(if strict { 1.0 } else { 0.0 }),
            ],
        )?;
        let discard = self.stmt(
            &format!(
                "INSERT INTO job_events (job_id, at, type, attempt_id, details)
                 SELECT job_id, {NOW}, 'late_result_discarded', id,
                        json_object('state', state, 'provider', provider,
                                    'job_status', (SELECT status FROM jobs WHERE id = job_id))
                   FROM attempts
                  WHERE id = ?1 AND ?2 = 0 AND state NOT IN ('succeeded', 'superseded')"
            ),
            &[
                js(attempt_id),
                JsValue::from_f64(if strict { 1.0 } else { 0.0 }),
            ],
        )?;
        let read = self.stmt(
            "SELECT a.state, j.completed_by FROM attempts AS a JOIN jobs AS j ON j.id = a.job_id
              WHERE a.id = ?1 AND a.job_id = ?2",
            &[js(attempt_id), js(job_id)],
        )?;
        #[derive(Deserialize)]
        struct Row {
            state: AttemptState,
            completed_by: Option<String>,
        }
        let results = self
            .batch(
                "complete",
                vec![cas, supersede_starting, settle, discard, read],
            )
            .await?;
        let row = first_row::<Row>(results.last())?
            .ok_or_else(|| AppError::internal("complete: the attempt vanished"))?;
        // An admin's resolution counts only if this very batch moved the attempt: one
        // that finds it already settled (by a provider's result that came first, say)
        // did nothing, and is told so.
        let settled = results.get(2).map(changes).transpose()?.unwrap_or(0) == 1;
        if strict && !settled {
            return Ok(Completion::Discarded { state: row.state });
        }
        Ok(match row.state {
            AttemptState::Succeeded if row.completed_by.as_deref() == Some(attempt_id) => {
                Completion::Won
            }
            AttemptState::Superseded => Completion::Lost {
                winner: row.completed_by,
            },
            state => Completion::Discarded { state },
        })
    }

    /// The one statement behind every attempt after a job's first: insert `a.new_id` as
    /// the job's next attempt, `starting` on `a.provider`, only while the job has not
    /// finished, the provider is the job's first or certified for the kind at
    /// `a.contract_version` with its current `a.provider_digest`, and `guards` hold.
    /// `guards` is SQL over the job `j` (`job_documents`) whose parameters are `extra`,
    /// numbered from `?8`.
    fn next_attempt(
        &self,
        a: &NextAttempt<'_>,
        guards: &str,
        extra: &[JsValue],
    ) -> ApiResult<D1PreparedStatement> {
        let sql = format!(
            "INSERT INTO attempts (id, job_id, n, provider, state, started_at,
                                   request_key, request_fingerprint)
             SELECT ?1, j.id, (SELECT max(n) + 1 FROM attempts WHERE job_id = j.id), ?3,
                    'starting', {NOW}, ?6, ?7
               FROM job_documents AS j
              WHERE j.id = ?2 AND j.status NOT IN ('succeeded', 'cancelled')
                AND (?3 = j.provider OR {})
                AND {guards}
             ON CONFLICT DO NOTHING
             RETURNING id",
            certified("?3", "j.kind", "?4", "?5")
        );
        let (key, fingerprint) = a.request.unzip();
        let mut params = vec![
            js(a.new_id),
            js(a.job_id),
            js(a.provider),
            js(a.contract_version),
            js(a.provider_digest),
            key.map_or(JsValue::NULL, js),
            fingerprint.map_or(JsValue::NULL, js),
        ];
        params.extend_from_slice(extra);
        self.stmt(&sql, &params)
    }

    /// A new attempt asked for by the owner (the fallback button). One statement
    /// inserts it only if the job is the owner's, has not finished, has no attempt
    /// `starting`, `running` or `unknown`, (with `If-Match`) is unchanged, and (with an
    /// `Idempotency-Key`) no attempt was made for that key yet; the same batch then
    /// reads why, so two clicks make one attempt and a resend gets the first one's.
    ///
    /// `if_match` holds the strong tags of `If-Match` (`None`: no header, or `*`).
    pub(crate) async fn insert_attempt(
        &self,
        r: &NextAttempt<'_>,
        owner: &str,
        if_match: Option<Vec<&str>>,
    ) -> ApiResult<NewAttemptOutcome> {
        let if_match = if_match.as_ref().map(json_text).transpose()?;
        let insert = self.next_attempt(
            r,
            "j.owner_id = ?8
             AND NOT EXISTS (SELECT 1 FROM attempts
                              WHERE job_id = j.id AND state IN ('starting', 'running', 'unknown'))
             AND (?9 IS NULL OR j.etag IN (SELECT value FROM json_each(?9)))
             AND (?6 IS NULL OR NOT EXISTS (SELECT 1 FROM attempts
                                             WHERE job_id = j.id AND request_key = ?6))",
            &[js(owner), if_match.as_deref().map_or(JsValue::NULL, js)],
        )?;
        let read = self.stmt(
            &format!(
                "SELECT j.fingerprint, j.doc, j.etag, j.status,
                    (SELECT count(*) FROM attempts WHERE id = ?1) AS created,
                    (SELECT id FROM attempts
                      WHERE job_id = j.id AND request_key = ?6) AS replay_id,
                    (SELECT request_fingerprint FROM attempts
                      WHERE job_id = j.id AND request_key = ?6) AS replay_fingerprint,
                    (SELECT count(*) FROM attempts
                      WHERE job_id = j.id AND state IN ('starting', 'running')) AS in_flight,
                    (SELECT count(*) FROM attempts
                      WHERE job_id = j.id AND state = 'unknown') AS unresolved,
                    (?4 = j.provider OR {}) AS certified
               FROM job_documents AS j WHERE j.id = ?2 AND j.owner_id = ?3",
                certified("?4", "j.kind", "?5", "?7")
            ),
            &[
                js(r.new_id),
                js(r.job_id),
                js(owner),
                js(r.provider),
                js(r.contract_version),
                r.request.map_or(JsValue::NULL, |(key, _)| js(key)),
                js(r.provider_digest),
            ],
        )?;
        let results = self.batch("insert_attempt", vec![insert, read]).await?;
        let Some(row) = first_row::<NewAttemptRow>(results.last())? else {
            return Ok(NewAttemptOutcome::NotFound);
        };
        if let Some(attempt_id) = row.replay_id {
            // Ours (this call inserted it, or a lost reply's earlier send did) or
            // another request's under the same key.
            let ours = r.request.map(|(_, f)| f) == row.replay_fingerprint.as_deref();
            if !ours {
                return Ok(NewAttemptOutcome::KeyReused);
            }
            let stored = stored(row.doc)?;
            return Ok(if row.created > 0.0 {
                NewAttemptOutcome::Created(stored)
            } else {
                NewAttemptOutcome::Replayed { stored, attempt_id }
            });
        }
        if row.created > 0.0 {
            return stored(row.doc).map(NewAttemptOutcome::Created);
        }
        let (in_flight, unresolved) = (row.in_flight > 0.0, row.unresolved > 0.0);
        if row.status.is_final() || in_flight || unresolved {
            return Ok(NewAttemptOutcome::Refused {
                status: row.status,
                in_flight,
                unresolved,
            });
        }
        if row.certified == 0.0 {
            return Ok(NewAttemptOutcome::NotCertified);
        }
        Ok(NewAttemptOutcome::Stale)
    }

    /// One hedge attempt next to `running_id`: inserted only while that attempt is still
    /// `running`, is the only one in flight, no attempt is `unknown`, and the job has
    /// not finished. True if inserted.
    pub(crate) async fn insert_hedge(
        &self,
        hedge: &NextAttempt<'_>,
        running_id: &str,
    ) -> ApiResult<bool> {
        let stmt = self.next_attempt(
            hedge,
            "(SELECT state FROM attempts WHERE id = ?8) = 'running'
             AND NOT EXISTS (SELECT 1 FROM attempts WHERE job_id = j.id AND state = 'unknown')
             AND (SELECT count(*) FROM attempts
                   WHERE job_id = j.id AND state IN ('starting', 'running')) = 1",
            &[js(running_id)],
        )?;
        self.changed_one("insert_hedge", stmt).await
    }

    /// The automatic failover after `failed_id` failed retryably: a new attempt,
    /// inserted only while the job has not finished, nothing is in flight or unknown,
    /// the job has fewer than `max_attempts` attempts, and the provider is the job's
    /// first or certified. True if inserted.
    pub(crate) async fn insert_failover(
        &self,
        next: &NextAttempt<'_>,
        failed_id: &str,
        max_attempts: u32,
    ) -> ApiResult<bool> {
        let stmt = self.next_attempt(
            next,
            "(SELECT state FROM attempts WHERE id = ?8) = 'failed'
             AND NOT EXISTS (SELECT 1 FROM attempts WHERE job_id = j.id
                              AND state IN ('starting', 'running', 'unknown'))
             AND (SELECT count(*) FROM attempts WHERE job_id = j.id) < ?9",
            &[js(failed_id), JsValue::from_f64(f64::from(max_attempts))],
        )?;
        self.changed_one("insert_failover", stmt).await
    }

    /// Stores a certification report, replacing an earlier one for the same provider,
    /// kind and contract version.
    pub(crate) async fn save_certification(&self, report: &Certification) -> ApiResult<()> {
        let stmt = self.stmt(
            "INSERT INTO certifications (provider, kind, contract_version, passed, failures,
                                         certified_at, provider_digest)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (provider, kind, contract_version) DO UPDATE
               SET passed = excluded.passed, failures = excluded.failures,
                   certified_at = excluded.certified_at,
                   provider_digest = excluded.provider_digest",
            &[
                js(&report.provider),
                js(&report.kind),
                js(&report.contract_version),
                JsValue::from_f64(if report.passed { 1.0 } else { 0.0 }),
                js(&json_text(&report.failures)?),
                js(&report.certified_at),
                js(&report.provider_digest),
            ],
        )?;
        self.timed("save_certification", stmt.run()).await?;
        Ok(())
    }

    /// Every stored certification report (for the current and older contract versions).
    pub(crate) async fn certifications(&self) -> ApiResult<Vec<Certification>> {
        #[derive(Deserialize)]
        struct Row {
            provider: String,
            kind: String,
            contract_version: String,
            provider_digest: String,
            passed: f64,
            failures: String,
            certified_at: String,
        }
        let stmt = self.stmt(
            "SELECT provider, kind, contract_version, provider_digest, passed, failures,
                    certified_at
               FROM certifications ORDER BY provider, kind, certified_at",
            &[],
        )?;
        self.timed("certifications", stmt.all())
            .await?
            .results::<Row>()?
            .into_iter()
            .map(|r| {
                Ok(Certification {
                    provider: r.provider,
                    kind: r.kind,
                    contract_version: r.contract_version,
                    provider_digest: r.provider_digest,
                    passed: r.passed != 0.0,
                    failures: serde_json::from_str(&r.failures).map_err(AppError::internal)?,
                    certified_at: r.certified_at,
                })
            })
            .collect()
    }

    /// The owner gives up. One batch: the job becomes `cancelled` (unless it already
    /// succeeded), `job_cancelled` is logged once, and every attempt still `starting`,
    /// `running` or `unknown` becomes `cancelled`. Returns the job as it is after.
    pub(crate) async fn cancel(&self, owner: &str, job_id: &str) -> ApiResult<Option<StoredJob>> {
        let cancel = self.stmt(
            &format!(
                "UPDATE jobs SET status = 'cancelled', version = version + 1, updated_at = {NOW}
                  WHERE id = ?1 AND owner_id = ?2 AND status NOT IN ('succeeded', 'cancelled')"
            ),
            &[js(job_id), js(owner)],
        )?;
        let log = self.stmt(
            &format!(
                "INSERT INTO job_events (job_id, at, type, details)
                 SELECT id, {NOW}, 'job_cancelled',
                        json_object('attempts', (SELECT json_group_array(id) FROM attempts
                            WHERE job_id = jobs.id AND state IN ('starting', 'running', 'unknown')))
                   FROM jobs
                  WHERE id = ?1 AND status = 'cancelled'
                    AND NOT EXISTS (SELECT 1 FROM job_events
                                     WHERE job_id = ?1 AND type = 'job_cancelled')"
            ),
            &[js(job_id)],
        )?;
        let attempts = self.stmt(
            &format!(
                "UPDATE attempts SET state = 'cancelled', finished_at = {NOW}
                  WHERE job_id = ?1 AND state IN ('starting', 'running', 'unknown')
                    AND (SELECT status FROM jobs WHERE id = ?1) = 'cancelled'"
            ),
            &[js(job_id)],
        )?;
        let read = self.stmt(
            "SELECT fingerprint, doc, etag FROM job_documents WHERE id = ?1 AND owner_id = ?2",
            &[js(job_id), js(owner)],
        )?;
        let results = self
            .batch("cancel", vec![cancel, log, attempts, read])
            .await?;
        first_row::<DocRow>(results.last())?.map(stored).transpose()
    }

    /// The job an attempt belongs to, for admin calls that name only the attempt.
    pub(crate) async fn attempt_job(
        &self,
        attempt_id: &str,
    ) -> ApiResult<Option<(String, AttemptState)>> {
        #[derive(Deserialize)]
        struct Row {
            job_id: String,
            state: AttemptState,
        }
        let stmt = self.stmt(
            "SELECT job_id, state FROM attempts WHERE id = ?1",
            &[js(attempt_id)],
        )?;
        Ok(self
            .timed("attempt_job", stmt.first::<Row>(None))
            .await?
            .map(|r| (r.job_id, r.state)))
    }

    /// Attempts still `starting` that were inserted before `cutoff`: their dispatch
    /// message may have been lost.
    pub(crate) async fn stuck_starting(&self, cutoff: &str, limit: u32) -> ApiResult<Vec<String>> {
        #[derive(Deserialize)]
        struct Row {
            id: String,
        }
        let stmt = self.stmt(
            "SELECT id FROM attempts WHERE state = 'starting' AND started_at <= ?1
              ORDER BY started_at LIMIT ?2",
            &[js(cutoff), JsValue::from_f64(f64::from(limit))],
        )?;
        Ok(self
            .timed("stuck_starting", stmt.all())
            .await?
            .results::<Row>()?
            .into_iter()
            .map(|r| r.id)
            .collect())
    }

    /// The reconciler's moves, per provider, in one batch:
    /// - `unknown → abandoned` once the provider's `abandon_after_ms` has passed since
    ///   the call;
    /// - `running → unknown` for an attempt whose dispatcher died mid-call (no answer
    ///   recorded well after the provider's timeout).
    ///
    /// Returns how many attempts were abandoned and how many were found lost.
    pub(crate) async fn reconcile(&self, rules: &[ReconcileRule]) -> ApiResult<(usize, usize)> {
        let mut statements = Vec::new();
        for rule in rules {
            if let Some(cutoff) = &rule.abandon_before {
                statements.push(self.stmt(
                    &format!(
                        "UPDATE attempts SET state = 'abandoned', finished_at = {NOW}
                          WHERE state = 'unknown' AND provider = ?1 AND dispatched_at <= ?2
                         RETURNING id"
                    ),
                    &[js(&rule.provider), js(cutoff)],
                )?);
            }
        }
        let abandon_count = statements.len();
        let lost = AttemptError::new(
            "dispatcher_lost",
            "the dispatcher stopped before the provider answered; the provider may have done the work",
            false,
        );
        let lost = json_text(&lost)?;
        for rule in rules {
            statements.push(self.stmt(
                &format!(
                    "UPDATE attempts SET state = 'unknown', finished_at = {NOW}, error = ?3
                      WHERE state = 'running' AND provider = ?1 AND dispatched_at <= ?2
                     RETURNING id"
                ),
                &[js(&rule.provider), js(&rule.lost_before), js(&lost)],
            )?);
        }
        if statements.is_empty() {
            return Ok((0, 0));
        }
        let results = self.batch("reconcile", statements).await?;
        let mut counts = (0, 0);
        for (i, result) in results.iter().enumerate() {
            let n = changes(result)?;
            if i < abandon_count {
                counts.0 += n;
            } else {
                counts.1 += n;
            }
        }
        Ok(counts)
    }

    /// Deletes at most `chunk` jobs that ended (`succeeded`, `cancelled`, or `failed`
    /// with nothing in flight or unknown) and were last changed before `cutoff`, with
    /// their attempts and events. Their keys become free again. A job with an attempt
    /// `unknown` is never purged while it is unresolved. One batch; the reconciler calls
    /// it again while chunks come back full, so a backlog never makes one huge
    /// statement. Returns the number of jobs deleted.
    pub(crate) async fn purge(&self, cutoff: &str, chunk: u32) -> ApiResult<usize> {
        // The same ordered, bounded selection in all three statements: jobs are deleted
        // last, so the first two see the same rows.
        let expired = "SELECT id FROM jobs
                        WHERE status IN ('succeeded', 'cancelled', 'failed') AND updated_at <= ?1
                          AND NOT EXISTS (SELECT 1 FROM attempts
                                           WHERE job_id = jobs.id
                                             AND state IN ('starting', 'running', 'unknown'))
                        ORDER BY updated_at, id LIMIT ?2";
        let params = [js(cutoff), JsValue::from_f64(f64::from(chunk))];
        let events = self.stmt(
            &format!("DELETE FROM job_events WHERE job_id IN ({expired})"),
            &params,
        )?;
        let attempts = self.stmt(
            &format!("DELETE FROM attempts WHERE job_id IN ({expired})"),
            &params,
        )?;
        let jobs = self.stmt(
            &format!("DELETE FROM jobs WHERE id IN ({expired}) RETURNING id"),
            &params,
        )?;
        let results = self.batch("purge", vec![events, attempts, jobs]).await?;
        results
            .last()
            .map(changes)
            .transpose()
            .map(Option::unwrap_or_default)
    }
}

/// One attempt after a job's first, for [`Store::insert_hedge`],
/// [`Store::insert_failover`] and the fallback button.
pub(crate) struct NextAttempt<'a> {
    pub(crate) new_id: &'a str,
    pub(crate) job_id: &'a str,
    pub(crate) provider: &'a str,
    pub(crate) contract_version: &'a str,
    /// [`onceclick_protocol::contract::ProviderConfig::digest`] of `provider` now.
    pub(crate) provider_digest: &'a str,
    /// The request's `Idempotency-Key` and body text, for the fallback button.
    pub(crate) request: Option<(&'a str, &'a str)>,
}

/// One certification report: a provider against one contract version of a kind.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Certification {
    pub(crate) provider: String,
    pub(crate) kind: String,
    pub(crate) contract_version: String,
    /// What was certified: the provider's model and base URL, as a digest.
    pub(crate) provider_digest: String,
    pub(crate) passed: bool,
    /// `[{input, code, message}]`: which golden input failed, and how.
    pub(crate) failures: Vec<Value>,
    pub(crate) certified_at: String,
}

/// What the reconciler applies to one provider's attempts.
pub(crate) struct ReconcileRule {
    pub(crate) provider: String,
    /// `unknown` attempts called before this are abandoned (if the provider promises).
    pub(crate) abandon_before: Option<String>,
    /// `running` attempts called before this have lost their dispatcher.
    pub(crate) lost_before: String,
}

/// The certification gate as SQL: provider `provider` passed for kind `kind` at contract
/// version `version` with its configuration digest `digest` (each a parameter or column
/// expression).
fn certified(provider: &str, kind: &str, version: &str, digest: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM certifications AS c
                  WHERE c.provider = {provider} AND c.kind = {kind}
                    AND c.contract_version = {version} AND c.provider_digest = {digest}
                    AND c.passed = 1)"
    )
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

fn first_row<T: serde::de::DeserializeOwned>(result: Option<&D1Result>) -> ApiResult<Option<T>> {
    Ok(result
        .map(|r| r.results::<T>())
        .transpose()?
        .and_then(|rows| rows.into_iter().next()))
}

fn stored(row: DocRow) -> ApiResult<StoredJob> {
    let job = serde_json::from_str(&row.doc).map_err(AppError::internal)?;
    Ok(StoredJob {
        job,
        fingerprint: row.fingerprint,
        doc: row.doc,
        etag: row.etag,
    })
}
