//! The only module that writes SQL. Every decision that must be atomic is one statement
//! or one D1 batch (one transaction); nothing here reads, decides in Rust, then writes.

use crate::clock;
use crate::error::{ApiResult, AppError};
use onceclick_protocol::{Event, Job};
use serde::Deserialize;
use std::cell::Cell;
use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement};

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
    /// The document exactly as the database rendered it; the ETag hashes this.
    pub(crate) doc: String,
}

#[derive(Deserialize)]
struct DocRow {
    fingerprint: String,
    doc: String,
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

fn js(s: &str) -> JsValue {
    JsValue::from_str(s)
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

    pub(crate) async fn ping(&self) -> ApiResult<()> {
        let stmt = self.stmt("SELECT 1 AS ok", &[])?;
        self.timed(stmt.first::<serde_json::Value>(None)).await?;
        Ok(())
    }

    /// Inserts the job and its first attempt, or finds the job the (owner, key) pair is
    /// already bound to. One batch, one round trip. The caller compares the returned
    /// job's id with `new.job_id` to learn which happened, and its fingerprint to learn
    /// whether a replay asked for the same thing.
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
        // Selecting from the job by its new id makes these inserts no-ops on a conflict:
        // the row with that id exists only if the insert above happened.
        let insert_attempt = self.stmt(
            "INSERT INTO attempts (id, job_id, n, provider, state, started_at)
             SELECT ?1, id, 1, provider, 'starting', ?3 FROM jobs WHERE id = ?2",
            &[js(new.attempt_id), js(new.job_id), js(&now)],
        )?;
        let insert_events = self.stmt(
            "INSERT INTO job_events (job_id, at, type, attempt_id, details)
             SELECT id, ?3, 'job_created', NULL,
                    json_object('kind', kind, 'provider', provider, 'idempotency_key', idempotency_key)
               FROM jobs WHERE id = ?1
             UNION ALL
             SELECT id, ?3, 'attempt_started', ?2, json_object('n', 1, 'provider', provider)
               FROM jobs WHERE id = ?1",
            &[js(new.job_id), js(new.attempt_id), js(&now)],
        )?;
        let read = self.stmt(
            "SELECT fingerprint, doc FROM job_documents WHERE owner_id = ?1 AND idempotency_key = ?2",
            &[js(new.owner), js(new.key)],
        )?;
        let results = self
            .timed(
                self.db
                    .batch(vec![insert_job, insert_attempt, insert_events, read]),
            )
            .await?;
        let row = results
            .last()
            .map(|r| r.results::<DocRow>())
            .transpose()?
            .and_then(|rows| rows.into_iter().next())
            .ok_or_else(|| AppError::internal("create_or_get_job: the batch returned no job"))?;
        stored(row)
    }

    /// The job `id` if `owner` owns it. One round trip.
    pub(crate) async fn job(&self, owner: &str, id: &str) -> ApiResult<Option<StoredJob>> {
        let stmt = self.stmt(
            "SELECT fingerprint, doc FROM job_documents WHERE id = ?1 AND owner_id = ?2",
            &[js(id), js(owner)],
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
                    "details": serde_json::from_str::<serde_json::Value>(&r.details)
                        .map_err(AppError::internal)?,
                });
                serde_json::from_value(value).map_err(AppError::internal)
            })
            .collect::<ApiResult<Vec<Event>>>()
            .map(Some)
    }
}

fn stored(row: DocRow) -> ApiResult<StoredJob> {
    let job = serde_json::from_str(&row.doc).map_err(AppError::internal)?;
    Ok(StoredJob {
        job,
        fingerprint: row.fingerprint,
        doc: row.doc,
    })
}
