//! Jobs: create-or-return, reads, the event log and cancel.

use super::{
    bind_opt_text, bind_text, first_row, json_text, sql, DocRow, HandOff, Op, Route, Store,
    StoredJob,
};
use crate::error::{ApiResult, AppError};
use onceclick_protocol::ErrorCode;
use onceclick_protocol::{Event, EventType};
use serde::Deserialize;
use serde_json::Value;

/// What `create_or_get_job` needs to insert a new job with its first attempt.
pub struct NewJob<'a> {
    pub job_id: &'a str,
    pub attempt_id: &'a str,
    pub owner: &'a str,
    pub key: &'a str,
    pub fingerprint: &'a str,
    pub kind: &'a str,
    pub input: &'a str,
    pub provider: &'a str,
    /// Sharded: the shard hands the new attempt on to the queue from its alarm,
    /// scheduled in the create's own transaction (`handoff.rs`). `None` on D1, whose
    /// create sends the dispatch once the answer is on its way, and when a test fault
    /// drops the dispatch (`drop-enqueue`).
    pub hand_off: Option<HandOff>,
}

#[derive(Deserialize)]
struct EventRow {
    seq: i64,
    #[serde(rename = "type")]
    type_: String,
    at: String,
    attempt_id: Option<String>,
    details: String,
}

impl Store {
    /// Inserts the job and its first attempt, or finds the job the (owner, key) pair is
    /// already bound to. One batch, one round trip. The caller compares the returned
    /// job's id with `new.job_id` to learn which happened, and its fingerprint to learn
    /// whether a replay asked for the same thing. The `job_created` and
    /// `attempt_started` events are written by triggers; a replay or a conflict is
    /// counted for `GET /v1/stats` by the batch's last statement.
    ///
    /// A sharded deployment that keeps the database it moved from asks it first, one
    /// read: a key bound there is answered from there (no new create reaches that
    /// database, so what it holds cannot change under this read).
    pub async fn create_or_get_job(&self, new: &NewJob<'_>) -> ApiResult<StoredJob> {
        if self.refuse_new_keys {
            let bound = self.job_by_key(new.owner, new.key).await?;
            // Retry-After 30 s: the SDK's six tries then span the minutes between the
            // move's two deploys, instead of giving up within seconds.
            return bound.ok_or_else(|| {
                AppError::new(
                    ErrorCode::ServiceUnavailable,
                    "this deployment is moving to another store and binds no new key for a \
                     moment; retry with the same Idempotency-Key",
                )
                .retry_after(30)
            });
        }
        if let Some(found) = self
            .job_by_key_before(new.owner, new.key, Some(new))
            .await?
        {
            return Ok(found);
        }
        let route = Route::Key {
            owner: new.owner,
            key: new.key,
        };
        let insert_job = self.stmt(
            sql::INSERT_JOB,
            &[
                bind_text(new.job_id),
                bind_text(new.owner),
                bind_text(new.key),
                bind_text(new.fingerprint),
                bind_text(new.kind),
                bind_text(new.input),
                bind_text(new.provider),
            ],
        )?;
        let mut insert_attempt = self.stmt(
            sql::INSERT_FIRST_ATTEMPT,
            &[bind_text(new.attempt_id), bind_text(new.job_id)],
        )?;
        insert_attempt.hand_off = new.hand_off.clone();
        let read = self.stmt(sql::JOB_BY_KEY, &[bind_text(new.owner), bind_text(new.key)])?;
        let count = self.count_repeat(new)?;
        let [_, _, read, _] = self
            .batch(
                Op::CreateOrGetJob,
                route,
                [insert_job, insert_attempt, read, count],
            )
            .await?;
        first_row::<DocRow>(&read)?
            .ok_or_else(|| AppError::internal("create_or_get_job: the batch returned no job"))
            .and_then(DocRow::stored)
    }

    /// The job that (owner, key) is bound to, if any: how a request that no longer
    /// validates (a kind or provider removed since) is still answered with its replay.
    pub async fn job_by_key(&self, owner: &str, key: &str) -> ApiResult<Option<StoredJob>> {
        if let Some(found) = self.job_by_key_before(owner, key, None).await? {
            return Ok(Some(found));
        }
        let params = [bind_text(owner), bind_text(key)];
        self.read_job(
            Op::JobByKey,
            Route::Key { owner, key },
            sql::JOB_BY_KEY,
            &params,
        )
        .await
    }

    /// The job (owner, key) is bound to in the previous layout (its D1, or the shard the
    /// pair hashes to under the previous count), during a move; no call otherwise. For a
    /// create (`counting`), a replay or a conflict there is counted there too for
    /// `GET /v1/stats`, as the create's own batch counts it: still one round trip, and no
    /// row if the key is not bound there.
    async fn job_by_key_before(
        &self,
        owner: &str,
        key: &str,
        counting: Option<&NewJob<'_>>,
    ) -> ApiResult<Option<StoredJob>> {
        if !self.has_previous()
            || crate::mutant::on(crate::mutant::Mutant::ShardedCreateSkipsBefore)
        {
            return Ok(None);
        }
        let read = self.stmt(sql::JOB_BY_KEY, &[bind_text(owner), bind_text(key)])?;
        let route = Route::Previous { owner, key };
        let read = match counting {
            Some(new) => {
                let count = self.count_repeat(new)?;
                let [_, read] = self.batch(Op::JobByKeyBefore, route, [count, read]).await?;
                read
            }
            None => self.one(Op::JobByKeyBefore, route, read).await?,
        };
        first_row::<DocRow>(&read)?.map(DocRow::stored).transpose()
    }

    /// The statement that counts a create of `new` that found its key bound: a replay,
    /// or a conflict (`GET /v1/stats`).
    fn count_repeat(&self, new: &NewJob<'_>) -> ApiResult<super::Stmt> {
        self.stmt(
            sql::COUNT_REPEAT,
            &[
                bind_text(new.owner),
                bind_text(new.key),
                bind_text(new.fingerprint),
                bind_text(new.job_id),
            ],
        )
    }

    /// The job `id` if `owner` owns it (any owner for `None`). One round trip.
    ///
    /// Boxed, so that its future's code is made once, in this crate, though the
    /// Worker's handlers await it too.
    pub fn job<'a>(
        &'a self,
        owner: Option<&'a str>,
        id: &'a str,
    ) -> futures_util::future::LocalBoxFuture<'a, ApiResult<Option<StoredJob>>> {
        Box::pin(async move {
            self.read_job(
                Op::Job,
                Route::Id(id),
                sql::JOB_BY_ID,
                &[bind_text(id), bind_opt_text(owner)],
            )
            .await
        })
    }

    /// The event log of job `id` if `owner` owns it, oldest first. `None` when the job
    /// does not exist for this owner (every job has at least its `job_created` event).
    pub async fn events(&self, owner: &str, id: &str) -> ApiResult<Option<Vec<Event>>> {
        let stmt = self.stmt(sql::EVENTS, &[bind_text(id), bind_text(owner)])?;
        let rows = self
            .one(Op::Events, Route::Id(id), stmt)
            .await?
            .results::<EventRow>()?;
        if rows.is_empty() {
            return Ok(None);
        }
        rows.into_iter()
            .map(|r| {
                let value = serde_json::json!({
                    "seq": r.seq,
                    "type": r.type_,
                    "at": r.at,
                    "attempt_id": r.attempt_id,
                    "details": serde_json::from_str::<Value>(&r.details)
                        .map_err(AppError::internal)?,
                });
                super::rows::row_as::<Event>(&value).map_err(AppError::internal)
            })
            .collect::<ApiResult<Vec<Event>>>()
            .map(Some)
    }

    /// Appends one event that no state move writes (`dispatch_ignored`,
    /// `failover_skipped`, `late_result_discarded` of a failure). None of them changes
    /// the job's document, so none moves its ETag.
    pub async fn log_event(
        &self,
        job_id: &str,
        event: EventType,
        attempt_id: Option<&str>,
        details: &Value,
    ) -> ApiResult<()> {
        debug_assert!(
            matches!(
                event,
                EventType::DispatchIgnored
                    | EventType::FailoverSkipped
                    | EventType::LateResultDiscarded
            ),
            "{event:?} is no log-only line: LOG_EVENT would write nothing"
        );
        let stmt = self.stmt(
            sql::LOG_EVENT,
            &[
                bind_text(job_id),
                bind_text(event.as_str()),
                bind_opt_text(attempt_id),
                bind_text(&json_text(details)?),
            ],
        )?;
        self.one(Op::LogEvent, Route::Id(job_id), stmt).await?;
        Ok(())
    }

    /// The owner (or, for `None`, an admin) gives up. One batch: the job becomes
    /// `cancelled` (unless it already succeeded), `job_cancelled` is logged once, and
    /// every attempt still `starting`, `running` or `unknown` becomes `cancelled`.
    /// Returns the job as it is after.
    pub async fn cancel(&self, owner: Option<&str>, job_id: &str) -> ApiResult<Option<StoredJob>> {
        let cancel = self.stmt(sql::CANCEL_JOB, &[bind_text(job_id), bind_opt_text(owner)])?;
        let log = self.stmt(sql::LOG_CANCELLED, &[bind_text(job_id)])?;
        let attempts = self.stmt(sql::CANCEL_ATTEMPTS, &[bind_text(job_id)])?;
        let read = self.stmt(sql::JOB_BY_ID, &[bind_text(job_id), bind_opt_text(owner)])?;
        let [_, _, _, read] = self
            .batch(Op::Cancel, Route::Id(job_id), [cancel, log, attempts, read])
            .await?;
        first_row::<DocRow>(&read)?.map(DocRow::stored).transpose()
    }
}
