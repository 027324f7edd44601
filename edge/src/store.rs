//! The only module that writes SQL. Every decision that must be atomic is one statement
//! or one D1 batch (one transaction); nothing here reads, decides in Rust, then writes.
//!
//! Events and job status follow attempt moves through the triggers in
//! `migrations/0001_*.sql`, so each move below is a single conditional UPDATE.

use crate::clock;
use crate::error::{ApiResult, AppError};
use onceclick_protocol::{AttemptError, AttemptState, Event, EventType, Job, JobStatus};
use serde::Deserialize;
use serde_json::Value;
use std::cell::Cell;
use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement, D1Result};

/// D1 plus a count of the round trips made and the time they took, for `Server-Timing`.
pub(crate) struct Store {
    db: D1Database,
    round_trips: Cell<u32>,
    millis: Cell<f64>,
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
}

/// The answer to a claim.
pub(crate) enum Claim {
    /// This call moved the attempt to `running`: call the provider.
    Claimed(ClaimedAttempt),
    /// Another delivery claimed it already, or it was cancelled: do nothing.
    Ignored { job_id: String, state: AttemptState },
    /// No such attempt (its job was purged).
    Missing,
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
        }
    }

    /// `Server-Timing` value: `d1;dur=…;desc="round trips=N"`.
    pub(crate) fn server_timing(&self) -> String {
        format!(
            "d1;dur={:.1};desc=\"round trips={}\"",
            self.millis.get(),
            self.round_trips.get()
        )
    }

    /// D1 reports `meta.duration` as 0 locally, so round trips are timed here.
    async fn timed<T>(
        &self,
        call: impl std::future::Future<Output = worker::Result<T>>,
    ) -> ApiResult<T> {
        let start = clock::now_ms();
        let out = call.await;
        self.round_trips.set(self.round_trips.get() + 1);
        self.millis
            .set(self.millis.get() + (clock::now_ms() - start));
        out.map_err(AppError::from)
    }

    fn stmt(&self, sql: &str, params: &[JsValue]) -> ApiResult<D1PreparedStatement> {
        Ok(self.db.prepare(sql).bind(params)?)
    }

    async fn batch(&self, statements: Vec<D1PreparedStatement>) -> ApiResult<Vec<D1Result>> {
        self.timed(self.db.batch(statements)).await
    }

    /// Runs one conditional write (ending in `RETURNING id`); true if it changed a row.
    async fn changed_one(&self, stmt: D1PreparedStatement) -> ApiResult<bool> {
        let result = self.timed(stmt.all()).await?;
        Ok(changes(&result)? == 1)
    }

    pub(crate) async fn ping(&self) -> ApiResult<()> {
        let stmt = self.stmt("SELECT 1 AS ok", &[])?;
        self.timed(stmt.first::<Value>(None)).await?;
        Ok(())
    }

    /// Inserts the job and its first attempt, or finds the job the (owner, key) pair is
    /// already bound to. One batch, one round trip. The caller compares the returned
    /// job's id with `new.job_id` to learn which happened, and its fingerprint to learn
    /// whether a replay asked for the same thing. The `job_created` and
    /// `attempt_started` events are written by triggers.
    pub(crate) async fn create_or_get_job(&self, new: &NewJob<'_>) -> ApiResult<StoredJob> {
        let now = clock::now_rfc3339();
        let insert_job = self.stmt(
            "INSERT INTO jobs (id, owner_id, idempotency_key, fingerprint, kind, input, provider,
                               status, version, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'queued', 1, ?8, ?8)
             ON CONFLICT (owner_id, idempotency_key) DO NOTHING",
            &[
                js(new.job_id),
                js(new.owner),
                js(new.key),
                js(new.fingerprint),
                js(new.kind),
                js(new.input),
                js(new.provider),
                js(&now),
            ],
        )?;
        // Selecting from the job by its new id makes this a no-op on a conflict: a row
        // with that id exists only if the insert above happened.
        let insert_attempt = self.stmt(
            "INSERT INTO attempts (id, job_id, n, provider, state, started_at)
             SELECT ?1, id, 1, provider, 'starting', ?3 FROM jobs WHERE id = ?2",
            &[js(new.attempt_id), js(new.job_id), js(&now)],
        )?;
        let read = self.stmt(
            "SELECT fingerprint, doc, etag FROM job_documents
              WHERE owner_id = ?1 AND idempotency_key = ?2",
            &[js(new.owner), js(new.key)],
        )?;
        let results = self.batch(vec![insert_job, insert_attempt, read]).await?;
        first_row::<DocRow>(results.last())?
            .ok_or_else(|| AppError::internal("create_or_get_job: the batch returned no job"))
            .and_then(stored)
    }

    /// The job `id` if `owner` owns it (any owner for `None`). One round trip.
    pub(crate) async fn job(&self, owner: Option<&str>, id: &str) -> ApiResult<Option<StoredJob>> {
        let stmt = self.stmt(
            "SELECT fingerprint, doc, etag FROM job_documents
              WHERE id = ?1 AND (?2 IS NULL OR owner_id = ?2)",
            &[js(id), owner.map_or(JsValue::NULL, js)],
        )?;
        self.timed(stmt.first::<DocRow>(None))
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
        let rows = self.timed(stmt.all()).await?.results::<EventRow>()?;
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
    /// `failover_skipped`, `late_result_discarded` of a failure).
    pub(crate) async fn log_event(
        &self,
        job_id: &str,
        event: EventType,
        attempt_id: Option<&str>,
        details: &Value,
    ) -> ApiResult<()> {
        let stmt = self.stmt(
            "INSERT INTO job_events (job_id, at, type, attempt_id, details)
             SELECT id, ?2, ?3, ?4, ?5 FROM jobs WHERE id = ?1",
            &[
                js(job_id),
                js(&clock::now_rfc3339()),
                js(event.as_str()),
                attempt_id.map_or(JsValue::NULL, js),
                js(&json_text(details)?),
            ],
        )?;
        self.timed(stmt.run()).await?;
        Ok(())
    }

    /// The dispatcher's claim: `starting → running`, one conditional UPDATE. A second
    /// delivery of the same message finds the attempt no longer `starting` and is told
    /// to do nothing, so the provider is never called twice for one attempt.
    pub(crate) async fn claim(&self, attempt_id: &str) -> ApiResult<Claim> {
        let now = clock::now_rfc3339();
        let claim = self.stmt(
            "UPDATE attempts SET state = 'running', dispatched_at = ?2
              WHERE id = ?1 AND state = 'starting'
              RETURNING id",
            &[js(attempt_id), js(&now)],
        )?;
        let read = self.stmt(
            "SELECT a.id, a.job_id, a.provider, j.provider AS job_provider, a.state, j.kind, j.input
               FROM attempts AS a JOIN jobs AS j ON j.id = a.job_id
              WHERE a.id = ?1",
            &[js(attempt_id)],
        )?;
        let results = self.batch(vec![claim, read]).await?;
        let claimed = results.first().map(changes).transpose()?.unwrap_or(0) == 1;
        Ok(match first_row::<AttemptRow>(results.last())? {
            None => Claim::Missing,
            Some(row) if claimed => Claim::Claimed(row.attempt),
            Some(row) => Claim::Ignored {
                job_id: row.attempt.job_id,
                state: row.state,
            },
        })
    }

    /// One move of one attempt, `from → to`, recording `error` when given: a single
    /// conditional UPDATE that names the state it leaves. False when the attempt was
    /// no longer in `from` (a concurrent move won: the job was cancelled, say).
    ///
    /// The dispatcher moves `running → failed | unknown`; an admin's resolve moves
    /// `unknown → failed | cancelled`.
    pub(crate) async fn move_attempt(
        &self,
        attempt_id: &str,
        from: AttemptState,
        to: AttemptState,
        error: Option<&AttemptError>,
    ) -> ApiResult<bool> {
        debug_assert!(from.can_move_to(to), "{from:?} -> {to:?} is not a move");
        let error = error.map(json_text).transpose()?;
        let stmt = self.stmt(
            "UPDATE attempts SET state = ?3, error = coalesce(?4, error), finished_at = ?5
              WHERE id = ?1 AND state = ?2
              RETURNING id",
            &[
                js(attempt_id),
                js(from.as_str()),
                js(to.as_str()),
                error.as_deref().map_or(JsValue::NULL, js),
                js(&clock::now_rfc3339()),
            ],
        )?;
        self.changed_one(stmt).await
    }

    /// Offers `output` as the result of `attempt_id`, which must be in state `from`
    /// (`running` for the dispatcher, `unknown` for an admin's resolve). One batch:
    ///
    /// 1. the compare-and-swap on the job: it takes the result only while
    ///    `completed_by IS NULL` and the job is not cancelled;
    /// 2. the attempt becomes `succeeded` if it is now the job's `completed_by`, else
    ///    `superseded` (the trigger logs `race_lost` with both ids);
    /// 3. a result for an attempt that had already ended is logged as
    ///    `late_result_discarded`.
    pub(crate) async fn complete(
        &self,
        job_id: &str,
        attempt_id: &str,
        from: AttemptState,
        output: &Value,
    ) -> ApiResult<Completion> {
        let now = clock::now_rfc3339();
        let cas = self.stmt(
            "UPDATE jobs
                SET status = 'succeeded', result = ?3, completed_by = ?2,
                    version = version + 1, updated_at = ?4
              WHERE id = ?1 AND completed_by IS NULL AND status <> 'cancelled'
                AND EXISTS (SELECT 1 FROM attempts WHERE id = ?2 AND state = ?5)",
            &[
                js(job_id),
                js(attempt_id),
                js(&json_text(output)?),
                js(&now),
                js(from.as_str()),
            ],
        )?;
        let settle = self.stmt(
            "UPDATE attempts
                SET state = CASE WHEN (SELECT completed_by FROM jobs WHERE id = ?1) = ?2
                                 THEN 'succeeded' ELSE 'superseded' END,
                    finished_at = ?3
              WHERE id = ?2 AND state = ?4",
            &[js(job_id), js(attempt_id), js(&now), js(from.as_str())],
        )?;
        let discard = self.stmt(
            "INSERT INTO job_events (job_id, at, type, attempt_id, details)
             SELECT job_id, ?2, 'late_result_discarded', id,
                    json_object('state', state, 'provider', provider,
                                'job_status', (SELECT status FROM jobs WHERE id = job_id))
               FROM attempts WHERE id = ?1 AND state NOT IN ('succeeded', 'superseded')",
            &[js(attempt_id), js(&now)],
        )?;
        let read = self.stmt(
            "SELECT a.state, j.completed_by FROM attempts AS a JOIN jobs AS j ON j.id = a.job_id
              WHERE a.id = ?1",
            &[js(attempt_id)],
        )?;
        #[derive(Deserialize)]
        struct Row {
            state: AttemptState,
            completed_by: Option<String>,
        }
        let results = self.batch(vec![cas, settle, discard, read]).await?;
        let row = first_row::<Row>(results.last())?
            .ok_or_else(|| AppError::internal("complete: the attempt vanished"))?;
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

    /// The one statement behind every attempt after a job's first: insert `new_id` as
    /// the job's next attempt, `starting` on `provider`, only while the job has not
    /// finished, the provider is the job's first or certified for the kind at
    /// `contract_version`, and `guards` hold. `guards` is SQL over the job `j`
    /// (`job_documents`) whose parameters are `extra`, numbered from `?6`.
    fn next_attempt(
        &self,
        new_id: &str,
        job_id: &str,
        provider: &str,
        contract_version: &str,
        guards: &str,
        extra: &[JsValue],
    ) -> ApiResult<D1PreparedStatement> {
        let sql = format!(
            "INSERT INTO attempts (id, job_id, n, provider, state, started_at)
             SELECT ?1, j.id, (SELECT max(n) + 1 FROM attempts WHERE job_id = j.id), ?3, 'starting', ?4
               FROM job_documents AS j
              WHERE j.id = ?2 AND j.status NOT IN ('succeeded', 'cancelled')
                AND (?3 = j.provider OR {})
                AND {guards}
             RETURNING id",
            certified("?3", "j.kind", "?5")
        );
        let mut params = vec![
            js(new_id),
            js(job_id),
            js(provider),
            js(&clock::now_rfc3339()),
            js(contract_version),
        ];
        params.extend_from_slice(extra);
        self.stmt(&sql, &params)
    }

    /// A new attempt on `provider`, asked for by the owner (the fallback button). One
    /// statement inserts it only if the job is the owner's, has not finished, has no
    /// attempt `starting`, `running` or `unknown`, and (with `If-Match`) is unchanged;
    /// the same batch then reads why, so two clicks make one attempt.
    pub(crate) async fn insert_attempt(
        &self,
        owner: &str,
        job_id: &str,
        attempt_id: &str,
        provider: &str,
        contract_version: &str,
        if_match: Option<&str>,
    ) -> ApiResult<NewAttemptOutcome> {
        let insert = self.next_attempt(
            attempt_id,
            job_id,
            provider,
            contract_version,
            "j.owner_id = ?6
             AND NOT EXISTS (SELECT 1 FROM attempts
                              WHERE job_id = j.id AND state IN ('starting', 'running', 'unknown'))
             AND (?7 IS NULL OR ?7 = j.etag)",
            &[js(owner), if_match.map_or(JsValue::NULL, js)],
        )?;
        let read = self.stmt(
            &format!(
                "SELECT j.fingerprint, j.doc, j.etag, j.status,
                    (SELECT count(*) FROM attempts WHERE id = ?1) AS created,
                    (SELECT count(*) FROM attempts
                      WHERE job_id = j.id AND state IN ('starting', 'running')) AS in_flight,
                    (SELECT count(*) FROM attempts
                      WHERE job_id = j.id AND state = 'unknown') AS unresolved,
                    (?4 = j.provider OR {}) AS certified
               FROM job_documents AS j WHERE j.id = ?2 AND j.owner_id = ?3",
                certified("?4", "j.kind", "?5")
            ),
            &[
                js(attempt_id),
                js(job_id),
                js(owner),
                js(provider),
                js(contract_version),
            ],
        )?;
        let results = self.batch(vec![insert, read]).await?;
        let Some(row) = first_row::<NewAttemptRow>(results.last())? else {
            return Ok(NewAttemptOutcome::NotFound);
        };
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
        job_id: &str,
        running_id: &str,
        hedge_id: &str,
        provider: &str,
        contract_version: &str,
    ) -> ApiResult<bool> {
        let stmt = self.next_attempt(
            hedge_id,
            job_id,
            provider,
            contract_version,
            "(SELECT state FROM attempts WHERE id = ?6) = 'running'
             AND NOT EXISTS (SELECT 1 FROM attempts WHERE job_id = j.id AND state = 'unknown')
             AND (SELECT count(*) FROM attempts
                   WHERE job_id = j.id AND state IN ('starting', 'running')) = 1",
            &[js(running_id)],
        )?;
        self.changed_one(stmt).await
    }

    /// The automatic failover after `failed_id` failed retryably: a new attempt on
    /// `provider`, inserted only while the job has not finished, nothing is in flight
    /// or unknown, the job has fewer than `max_attempts` attempts, and the provider is
    /// the job's first or certified. True if inserted.
    pub(crate) async fn insert_failover(
        &self,
        job_id: &str,
        failed_id: &str,
        new_id: &str,
        provider: &str,
        contract_version: &str,
        max_attempts: u32,
    ) -> ApiResult<bool> {
        let stmt = self.next_attempt(
            new_id,
            job_id,
            provider,
            contract_version,
            "(SELECT state FROM attempts WHERE id = ?6) = 'failed'
             AND NOT EXISTS (SELECT 1 FROM attempts WHERE job_id = j.id
                              AND state IN ('starting', 'running', 'unknown'))
             AND (SELECT count(*) FROM attempts WHERE job_id = j.id) < ?7",
            &[js(failed_id), JsValue::from_f64(f64::from(max_attempts))],
        )?;
        self.changed_one(stmt).await
    }

    /// Stores a certification report, replacing an earlier one for the same provider,
    /// kind and contract version.
    pub(crate) async fn save_certification(&self, report: &Certification) -> ApiResult<()> {
        let stmt = self.stmt(
            "INSERT INTO certifications (provider, kind, contract_version, passed, failures, certified_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (provider, kind, contract_version) DO UPDATE
               SET passed = excluded.passed, failures = excluded.failures,
                   certified_at = excluded.certified_at",
            &[
                js(&report.provider),
                js(&report.kind),
                js(&report.contract_version),
                JsValue::from_f64(if report.passed { 1.0 } else { 0.0 }),
                js(&json_text(&report.failures)?),
                js(&report.certified_at),
            ],
        )?;
        self.timed(stmt.run()).await?;
        Ok(())
    }

    /// Every stored certification report (for the current and older contract versions).
    pub(crate) async fn certifications(&self) -> ApiResult<Vec<Certification>> {
        #[derive(Deserialize)]
        struct Row {
            provider: String,
            kind: String,
            contract_version: String,
            passed: f64,
            failures: String,
            certified_at: String,
        }
        let stmt = self.stmt(
            "SELECT provider, kind, contract_version, passed, failures, certified_at
               FROM certifications ORDER BY provider, kind, certified_at",
            &[],
        )?;
        self.timed(stmt.all())
            .await?
            .results::<Row>()?
            .into_iter()
            .map(|r| {
                Ok(Certification {
                    provider: r.provider,
                    kind: r.kind,
                    contract_version: r.contract_version,
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
        let now = clock::now_rfc3339();
        let cancel = self.stmt(
            "UPDATE jobs SET status = 'cancelled', version = version + 1, updated_at = ?3
              WHERE id = ?1 AND owner_id = ?2 AND status NOT IN ('succeeded', 'cancelled')",
            &[js(job_id), js(owner), js(&now)],
        )?;
        let log = self.stmt(
            "INSERT INTO job_events (job_id, at, type, details)
             SELECT id, ?2, 'job_cancelled',
                    json_object('attempts', (SELECT json_group_array(id) FROM attempts
                        WHERE job_id = jobs.id AND state IN ('starting', 'running', 'unknown')))
               FROM jobs
              WHERE id = ?1 AND status = 'cancelled'
                AND NOT EXISTS (SELECT 1 FROM job_events
                                 WHERE job_id = ?1 AND type = 'job_cancelled')",
            &[js(job_id), js(&now)],
        )?;
        let attempts = self.stmt(
            "UPDATE attempts SET state = 'cancelled', finished_at = ?2
              WHERE job_id = ?1 AND state IN ('starting', 'running', 'unknown')
                AND (SELECT status FROM jobs WHERE id = ?1) = 'cancelled'",
            &[js(job_id), js(&now)],
        )?;
        let read = self.stmt(
            "SELECT fingerprint, doc, etag FROM job_documents WHERE id = ?1 AND owner_id = ?2",
            &[js(job_id), js(owner)],
        )?;
        let results = self.batch(vec![cancel, log, attempts, read]).await?;
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
            .timed(stmt.first::<Row>(None))
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
            .timed(stmt.all())
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
        let now = clock::now_rfc3339();
        let mut statements = Vec::new();
        for rule in rules {
            if let Some(cutoff) = &rule.abandon_before {
                statements.push(self.stmt(
                    "UPDATE attempts SET state = 'abandoned', finished_at = ?3
                      WHERE state = 'unknown' AND provider = ?1 AND dispatched_at <= ?2
                     RETURNING id",
                    &[js(&rule.provider), js(cutoff), js(&now)],
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
                "UPDATE attempts SET state = 'unknown', finished_at = ?3, error = ?4
                  WHERE state = 'running' AND provider = ?1 AND dispatched_at <= ?2
                 RETURNING id",
                &[
                    js(&rule.provider),
                    js(&rule.lost_before),
                    js(&now),
                    js(&lost),
                ],
            )?);
        }
        if statements.is_empty() {
            return Ok((0, 0));
        }
        let results = self.batch(statements).await?;
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

    /// Deletes finished jobs (with their attempts and events) last changed before
    /// `cutoff`. Their keys become free again. Returns the number of jobs deleted.
    pub(crate) async fn purge(&self, cutoff: &str) -> ApiResult<usize> {
        let expired =
            "SELECT id FROM jobs WHERE status IN ('succeeded', 'cancelled') AND updated_at <= ?1";
        let events = self.stmt(
            &format!("DELETE FROM job_events WHERE job_id IN ({expired})"),
            &[js(cutoff)],
        )?;
        let attempts = self.stmt(
            &format!("DELETE FROM attempts WHERE job_id IN ({expired})"),
            &[js(cutoff)],
        )?;
        let jobs = self.stmt(
            "DELETE FROM jobs WHERE status IN ('succeeded', 'cancelled') AND updated_at <= ?1
             RETURNING id",
            &[js(cutoff)],
        )?;
        let results = self.batch(vec![events, attempts, jobs]).await?;
        results
            .last()
            .map(changes)
            .transpose()
            .map(Option::unwrap_or_default)
    }
}

/// One certification report: a provider against one contract version of a kind.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Certification {
    pub(crate) provider: String,
    pub(crate) kind: String,
    pub(crate) contract_version: String,
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
/// version `version` (each a parameter or column expression).
fn certified(provider: &str, kind: &str, version: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM certifications AS c
                  WHERE c.provider = {provider} AND c.kind = {kind}
                    AND c.contract_version = {version} AND c.passed = 1)"
    )
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
