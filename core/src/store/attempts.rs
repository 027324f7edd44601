//! Attempts: the claim, moves, the compare-and-swap completion, and every attempt after
//! a job's first (the fallback button, a hedge, a failover).

use super::{
    bind_flag, bind_num, bind_opt_text, bind_text, changes, first_row, json_text, sql, DocRow, Op,
    Route, Stmt, Store, StoredJob,
};
use crate::error::{ApiResult, AppError};
use onceclick_protocol::{AttemptError, AttemptState, JobStatus};
use serde::Deserialize;
use serde_json::Value;

/// An attempt the dispatcher has claimed (`starting → running`), with what it needs.
#[derive(Debug, Clone, Deserialize)]
pub struct ClaimedAttempt {
    pub id: String,
    /// 1, 2, 3… within its job: its text's name in a stream's place.
    pub n: u32,
    pub job_id: String,
    pub provider: String,
    /// The provider of the job's first attempt: it needs no certification.
    pub job_provider: String,
    pub kind: String,
    pub input: String,
}

#[derive(Deserialize)]
struct AttemptRow {
    #[serde(flatten)]
    attempt: ClaimedAttempt,
    state: AttemptState,
    claim_token: Option<String>,
}

/// The answer to a claim.
pub enum Claim {
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
pub enum Offer {
    /// The provider answered: from `running`, or from `unknown` if the reconciler gave
    /// up on the dispatcher meanwhile (a result is the best resolution of an unknown).
    /// A result for an attempt that has ended is logged as `late_result_discarded`.
    Provider,
    /// An admin resolves an `unknown` attempt as succeeded. It may become `superseded`
    /// only when its result equals the job's; otherwise nothing is written.
    Resolution,
}

impl Offer {
    /// The states the offering attempt may leave, as the JSON array the SQL reads.
    fn leaves(self) -> &'static str {
        match self {
            Offer::Provider => r#"["running","unknown"]"#,
            Offer::Resolution => r#"["unknown"]"#,
        }
    }
}

/// What became of a result offered by an attempt.
#[derive(Debug)]
pub enum Completion {
    /// It won the compare-and-swap: it is the job's result, for good.
    Won,
    /// Another attempt had won; this one is now `superseded` and its output dropped.
    Lost { winner: Option<String> },
    /// The attempt or its job had ended (cancelled, abandoned…); the output was dropped.
    Discarded { state: AttemptState },
    /// The attempt is no more: its job ended and was purged (a race with the purge: a
    /// provider's answer or an admin's resolution that came after the attempt left
    /// `running` or `unknown` another way). The output was dropped.
    Gone,
}

/// An attempt whose call is being made, as its dispatcher watches it.
#[derive(Debug, Deserialize)]
pub struct Watched {
    pub state: AttemptState,
    pub job_status: JobStatus,
    pub completed_by: Option<String>,
}

/// Why a call in flight stops before its provider answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The job was cancelled: the attempt is `cancelled` already.
    Cancelled,
    /// The job succeeded with another attempt: this one's answer could only be
    /// discarded.
    LostRace,
}

impl Watched {
    /// Whether the call of attempt `id` should stop now, and why.
    pub fn stop(&self, id: &str) -> Option<Stop> {
        match (self.state, self.job_status) {
            (AttemptState::Cancelled, _)
                if !crate::mutant::on(crate::mutant::Mutant::CallOutlivesCancel) =>
            {
                Some(Stop::Cancelled)
            }
            // A loser, still calling (or moved to `unknown` by the reconciler since).
            (AttemptState::Running | AttemptState::Unknown, JobStatus::Succeeded)
                if self.completed_by.as_deref() != Some(id) =>
            {
                Some(Stop::LostRace)
            }
            _ => None,
        }
    }
}

/// Why a new attempt was or was not inserted.
pub enum NewAttemptOutcome {
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
    created: u32,
    replay_id: Option<String>,
    replay_fingerprint: Option<String>,
    in_flight: u32,
    unresolved: u32,
    certified: u32,
}

/// One attempt after a job's first, for [`Store::insert_hedge`],
/// [`Store::insert_failover`] and the fallback button.
pub struct NextAttempt<'a> {
    pub new_id: &'a str,
    pub job_id: &'a str,
    pub provider: &'a str,
    pub contract_version: &'a str,
    /// [`onceclick_protocol::contract::ProviderConfig::digest`] of `provider` now.
    pub provider_digest: &'a str,
    /// The request's `Idempotency-Key` and body text, for the fallback button.
    pub request: Option<(&'a str, &'a str)>,
}

/// What must also hold for a next attempt to be inserted, besides the job being open
/// and the provider allowed. Each guard owns its statement and its parameters (`?8`…).
enum Guard<'a> {
    /// The fallback button: the owner's job, nothing live, unchanged under `If-Match`
    /// (a JSON array of strong tags), and no attempt made yet for the request's key.
    Owner {
        owner: &'a str,
        if_match: Option<String>,
    },
    /// A hedge next to `running_id`, the only attempt in flight, with nothing unknown.
    Hedge { running_id: &'a str },
    /// The failover after `failed_id`, with nothing live and fewer than `max_attempts`.
    Failover {
        failed_id: &'a str,
        max_attempts: u32,
    },
}

impl Guard<'_> {
    fn sql(&self) -> &'static str {
        match self {
            Guard::Owner { .. } => sql::NEXT_ATTEMPT_BY_OWNER,
            Guard::Hedge { .. } => sql::NEXT_ATTEMPT_HEDGE,
            Guard::Failover { .. } => sql::NEXT_ATTEMPT_FAILOVER,
        }
    }

    /// The guard's parameters, bound from `?8` on (D1 refuses more than the SQL names).
    fn params(&self) -> Vec<Value> {
        match self {
            Guard::Owner { owner, if_match } => {
                vec![bind_text(owner), bind_opt_text(if_match.as_deref())]
            }
            Guard::Hedge { running_id } => vec![bind_text(running_id)],
            Guard::Failover {
                failed_id,
                max_attempts,
            } => vec![bind_text(failed_id), bind_num(*max_attempts)],
        }
    }
}

impl Store {
    /// The attempt that the fallback-button request `key` made on `owner`'s job, with
    /// the job and the request's fingerprint: how a resend is answered when it would no
    /// longer pass validation (a provider or kind removed since).
    pub async fn attempt_by_request(
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
            sql::ATTEMPT_BY_REQUEST,
            &[bind_text(job_id), bind_text(owner), bind_text(key)],
        )?;
        first_row::<Row>(
            &self
                .one(Op::AttemptByRequest, Route::Id(job_id), stmt)
                .await?,
        )?
        .map(|r| Ok((r.doc.stored()?, r.attempt_id, r.request_fingerprint)))
        .transpose()
    }

    /// The job an attempt belongs to, for admin calls that name only the attempt.
    pub async fn attempt_job(&self, attempt_id: &str) -> ApiResult<Option<(String, AttemptState)>> {
        #[derive(Deserialize)]
        struct Row {
            job_id: String,
            state: AttemptState,
        }
        let stmt = self.stmt(sql::ATTEMPT_JOB, &[bind_text(attempt_id)])?;
        Ok(first_row::<Row>(
            &self
                .one(Op::AttemptJob, Route::Id(attempt_id), stmt)
                .await?,
        )?
        .map(|r| (r.job_id, r.state)))
    }

    /// The attempt's state, its job's status and winner: what tells the dispatcher
    /// holding its call to stop. `None` if the attempt is gone. One round trip.
    pub async fn watch(&self, attempt_id: &str) -> ApiResult<Option<Watched>> {
        let stmt = self.stmt(sql::ATTEMPT_WATCH, &[bind_text(attempt_id)])?;
        first_row::<Watched>(&self.one(Op::Watch, Route::Id(attempt_id), stmt).await?)
    }

    /// The dispatcher's claim: `starting → running` with a fresh `token`, one
    /// conditional UPDATE. The attempt is this caller's only if it is `running` with
    /// this token afterwards, so sending the same claim again after a lost reply finds
    /// it still ours, while a second delivery (another token) is told to do nothing: the
    /// provider is never called twice for one attempt. An attempt whose job has
    /// succeeded is never claimed; the same batch moves it to `superseded`.
    pub async fn claim(&self, attempt_id: &str, token: &str) -> ApiResult<Claim> {
        let claim = self.stmt(sql::CLAIM, &[bind_text(attempt_id), bind_text(token)])?;
        let supersede = self.stmt(
            sql::CLAIM_SUPERSEDE,
            &[bind_text(attempt_id), bind_text(token)],
        )?;
        let read = self.stmt(sql::CLAIMED, &[bind_text(attempt_id)])?;
        let [_, _, read] = self
            .batch(Op::Claim, Route::Id(attempt_id), [claim, supersede, read])
            .await?;
        Ok(match first_row::<AttemptRow>(&read)? {
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
    pub async fn move_attempt(
        &self,
        attempt_id: &str,
        from: &[AttemptState],
        to: AttemptState,
        error: Option<&AttemptError>,
    ) -> ApiResult<bool> {
        let stmt = self.move_stmt(attempt_id, from, to, error)?;
        self.changed_one(Op::MoveAttempt, Route::Id(attempt_id), stmt)
            .await
    }

    /// A retryable failure and the automatic failover after it, in one batch: the
    /// move `running | unknown → failed` of `attempt_id`, then the insert of `next`
    /// (guarded as [`Store::insert_failover`]), then whether `next` exists. So the job
    /// is never seen `failed` with nothing live between the two: a live stream would
    /// end there. Returns (moved, the failover exists). Safe to send again with the
    /// same `next.new_id`: a try whose reply was lost is found by the last read.
    pub async fn fail_and_fail_over(
        &self,
        attempt_id: &str,
        from: &[AttemptState],
        error: &AttemptError,
        next: &NextAttempt<'_>,
        max_attempts: u32,
    ) -> ApiResult<(bool, bool)> {
        let moved = self.move_stmt(attempt_id, from, AttemptState::Failed, Some(error))?;
        let guard = Guard::Failover {
            failed_id: attempt_id,
            max_attempts,
        };
        let insert = self.next_attempt(next, &guard)?;
        let exists = self.stmt(sql::ATTEMPT_JOB, &[bind_text(next.new_id)])?;
        let [moved, _, exists] = self
            .batch(
                Op::InsertFailover,
                Route::Id(attempt_id),
                [moved, insert, exists],
            )
            .await?;
        Ok((changes(&moved)? == 1, changes(&exists)? == 1))
    }

    fn move_stmt(
        &self,
        attempt_id: &str,
        from: &[AttemptState],
        to: AttemptState,
        error: Option<&AttemptError>,
    ) -> ApiResult<Stmt> {
        debug_assert!(
            from.iter().all(|f| f.can_move_to(to)),
            "{from:?} -> {to:?} is not a move"
        );
        let error = error.map(json_text).transpose()?;
        let from = json_text(&from.iter().map(|s| s.as_str()).collect::<Vec<_>>())?;
        self.stmt(
            sql::MOVE_ATTEMPT,
            &[
                bind_text(attempt_id),
                bind_text(&from),
                bind_text(to.as_str()),
                bind_opt_text(error.as_deref()),
            ],
        )
    }

    /// Offers `output` as the result of `attempt_id` (see [`Offer`] for who may). One
    /// batch, safe to send again after a lost reply:
    ///
    /// 1. the compare-and-swap on the job: it takes the result only while
    ///    `completed_by IS NULL`, the job is not cancelled, and the attempt belongs to
    ///    the job and is in a state the offer may leave;
    /// 2. the attempt becomes `succeeded` if it is now the job's `completed_by`, else
    ///    `superseded` (the trigger logs `race_lost` with both ids);
    /// 3. a hedge still `starting` when the job succeeds becomes `superseded`;
    /// 4. a provider's result for an attempt that had already ended is logged as
    ///    `late_result_discarded`.
    pub async fn complete(
        &self,
        job_id: &str,
        attempt_id: &str,
        offer: Offer,
        output: &Value,
        tokens: Option<&str>,
    ) -> ApiResult<Completion> {
        let output = json_text(output)?;
        let from = offer.leaves();
        let strict = offer == Offer::Resolution;
        let cas = self.stmt(
            sql::COMPLETE_CAS,
            &[
                bind_text(job_id),
                bind_text(attempt_id),
                bind_text(&output),
                bind_text(from),
            ],
        )?;
        let supersede_starting =
            self.stmt(sql::COMPLETE_SUPERSEDE_STARTING, &[bind_text(job_id)])?;
        let settle = self.stmt(
            sql::COMPLETE_SETTLE,
            &[
                bind_text(job_id),
                bind_text(attempt_id),
                bind_text(&output),
                bind_text(from),
                bind_flag(strict),
                bind_opt_text(tokens),
            ],
        )?;
        let discard = self.stmt(
            sql::COMPLETE_DISCARD,
            &[bind_text(attempt_id), bind_flag(strict)],
        )?;
        let read = self.stmt(sql::COMPLETED, &[bind_text(attempt_id), bind_text(job_id)])?;
        #[derive(Deserialize)]
        struct Row {
            state: AttemptState,
            completed_by: Option<String>,
        }
        // The settle right after the compare-and-swap: a winner's `succeeded` is the
        // same change of the job as its result (`attempt_moved` in 0007), so no other
        // statement may number a change between the two.
        let [_, settle, _, _, read] = self
            .batch(
                Op::Complete,
                Route::Id(job_id),
                [cas, settle, supersede_starting, discard, read],
            )
            .await?;
        // No attempt at all in the place its id names: its job ended and the purge
        // took it (with the job) since the offer was read; the output has nowhere to go.
        // An id that names no place (a job of a store this deployment no longer keeps)
        // stays an error: the result is kept, retried, and in the log, never dropped.
        let Some(row) = first_row::<Row>(&read)? else {
            if !self.routes_somewhere(Route::Id(job_id)) {
                return Err(AppError::internal(
                    "complete: the job's id names no place of this store",
                ));
            }
            return Ok(Completion::Gone);
        };
        // An admin's resolution counts only if this very batch moved the attempt: one
        // that finds it already settled (by a provider's result that came first, say)
        // did nothing, and is told so.
        if strict && changes(&settle)? != 1 {
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

    /// The statement that inserts `a` as the job's next attempt, `starting`, only while
    /// the job has not finished, the provider is the job's first or certified for the
    /// kind at `a.contract_version` with its current `a.provider_digest`, and `guard`
    /// holds.
    fn next_attempt(&self, a: &NextAttempt<'_>, guard: &Guard<'_>) -> ApiResult<Stmt> {
        let (key, fingerprint) = a.request.unzip();
        let mut params = vec![
            bind_text(a.new_id),
            bind_text(a.job_id),
            bind_text(a.provider),
            bind_text(a.contract_version),
            bind_text(a.provider_digest),
            bind_opt_text(key),
            bind_opt_text(fingerprint),
        ];
        params.extend(guard.params());
        self.stmt(guard.sql(), &params)
    }

    /// A new attempt asked for by the owner (the fallback button). One statement
    /// inserts it only if the job is the owner's, has not finished, has no attempt
    /// `starting`, `running` or `unknown`, (with `If-Match`) is unchanged, and (with an
    /// `Idempotency-Key`) no attempt was made for that key yet; the same batch then
    /// reads why, so two clicks make one attempt and a resend gets the first one's.
    ///
    /// `if_match` holds the strong tags of `If-Match` (`None`: no header, or `*`).
    pub async fn insert_attempt(
        &self,
        r: &NextAttempt<'_>,
        owner: &str,
        if_match: Option<Vec<&str>>,
    ) -> ApiResult<NewAttemptOutcome> {
        let guard = Guard::Owner {
            owner,
            if_match: if_match.as_ref().map(json_text).transpose()?,
        };
        let insert = self.next_attempt(r, &guard)?;
        let read = self.stmt(
            sql::NEXT_ATTEMPT_OUTCOME,
            &[
                bind_text(r.new_id),
                bind_text(r.job_id),
                bind_text(owner),
                bind_text(r.provider),
                bind_text(r.contract_version),
                bind_opt_text(r.request.map(|(key, _)| key)),
                bind_text(r.provider_digest),
            ],
        )?;
        let [_, read] = self
            .batch(Op::InsertAttempt, Route::Id(r.job_id), [insert, read])
            .await?;
        let Some(row) = first_row::<NewAttemptRow>(&read)? else {
            return Ok(NewAttemptOutcome::NotFound);
        };
        if let Some(attempt_id) = row.replay_id {
            // Ours (this call inserted it, or a lost reply's earlier send did) or
            // another request's under the same key.
            let ours = r.request.map(|(_, f)| f) == row.replay_fingerprint.as_deref();
            if !ours {
                return Ok(NewAttemptOutcome::KeyReused);
            }
            let stored = row.doc.stored()?;
            return Ok(if row.created > 0 {
                NewAttemptOutcome::Created(stored)
            } else {
                NewAttemptOutcome::Replayed { stored, attempt_id }
            });
        }
        if row.created > 0 {
            return row.doc.stored().map(NewAttemptOutcome::Created);
        }
        let (in_flight, unresolved) = (row.in_flight > 0, row.unresolved > 0);
        if row.status.is_final() || in_flight || unresolved {
            return Ok(NewAttemptOutcome::Refused {
                status: row.status,
                in_flight,
                unresolved,
            });
        }
        if row.certified == 0 {
            return Ok(NewAttemptOutcome::NotCertified);
        }
        Ok(NewAttemptOutcome::Stale)
    }

    /// One hedge attempt next to `running_id`: inserted only while that attempt is still
    /// `running`, is the only one in flight, no attempt is `unknown`, and the job has
    /// not finished. True if inserted.
    pub async fn insert_hedge(&self, hedge: &NextAttempt<'_>, running_id: &str) -> ApiResult<bool> {
        let stmt = self.next_attempt(hedge, &Guard::Hedge { running_id })?;
        self.changed_one(Op::InsertHedge, Route::Id(hedge.job_id), stmt)
            .await
    }
}
