//! Handlers that add or end attempts: the fallback button, cancel, and the admin's ways
//! out of `unknown`.

use crate::api::{job_headers, json, read_json, Ctx};
use crate::auth::Caller;
use crate::clock;
use crate::dispatch;
use crate::error::{ApiResult, AppError};
use crate::kinds;
use crate::providers;
use crate::store::{Completion, NewAttemptOutcome};
use onceclick_protocol::{AttemptError, AttemptState, ErrorCode, JobStatus, NewAttempt};
use serde::Deserialize;
use serde_json::Value;
use worker::{Headers, Request, Response};

fn job_not_found(id: &str) -> AppError {
    AppError::not_found(&format!("job {id}"))
}

/// `POST /v1/jobs/{id}/attempts`: one more attempt on the same job.
pub(crate) async fn create(
    req: &mut Request,
    ctx: &Ctx<'_>,
    caller: &Caller,
    job_id: &str,
) -> ApiResult<Response> {
    let body: NewAttempt = read_json(req, "an attempt request").await?;
    let if_match = req.headers().get("If-Match").ok().flatten();
    let stored = ctx
        .store
        .job(Some(&caller.owner), job_id)
        .await?
        .ok_or_else(|| job_not_found(job_id))?;
    let kind = kinds::find(&stored.job.kind)
        .map_err(AppError::internal)?
        .ok_or_else(|| {
            AppError::internal(format!("kind {} is no longer declared", stored.job.kind))
        })?;
    let configured = providers::configured(ctx.env)?;
    let usable =
        |name: &str| kind.names_provider(name) && providers::find(&configured, name).is_some();
    let provider = match body.provider {
        Some(name) if usable(&name) => name,
        Some(name) => {
            return Err(AppError::new(
                ErrorCode::UnknownProvider,
                format!(
                    "no provider {name:?} is configured for kind {:?}",
                    kind.name()
                ),
            ))
        }
        None => kind
            .next_provider(
                stored.job.attempts.last().map(|a| a.provider.as_str()),
                usable,
            )
            .map(str::to_owned)
            .ok_or_else(|| {
                AppError::new(
                    ErrorCode::UnknownProvider,
                    format!("kind {:?} has no configured provider", kind.name()),
                )
            })?,
    };

    let attempt_id = clock::new_id("att");
    let outcome = ctx
        .store
        .insert_attempt(
            &caller.owner,
            job_id,
            &attempt_id,
            &provider,
            kind.contract_version(),
            if_match.as_deref(),
        )
        .await?;
    match outcome {
        NewAttemptOutcome::Created(stored) => {
            dispatch::enqueue(ctx.env, &attempt_id).await;
            let attempt = stored
                .job
                .attempts
                .iter()
                .find(|a| a.id == attempt_id)
                .ok_or_else(|| AppError::internal("the new attempt is missing from its job"))?;
            let body = serde_json::to_string(attempt).map_err(AppError::internal)?;
            let headers = job_headers(&stored);
            let _ = headers.set("Location", &format!("/v1/jobs/{job_id}"));
            json(201, body, headers)
        }
        NewAttemptOutcome::NotFound => Err(job_not_found(job_id)),
        NewAttemptOutcome::NotCertified => Err(AppError::new(
            ErrorCode::ProviderNotCertified,
            format!(
                "provider {provider:?} has not passed certification for kind {:?} at contract version {}; an admin can run POST /v1/providers/{provider}/certify",
                kind.name(),
                kind.contract_version()
            ),
        )
        .with_job(job_id)),
        NewAttemptOutcome::Refused { status, in_flight, unresolved } => Err(if status.is_final() {
            AppError::new(
                ErrorCode::JobFinished,
                format!("the job is {}; no attempt can be added", status.as_str()),
            )
        } else if unresolved {
            AppError::new(
                ErrorCode::AttemptUnresolved,
                "an attempt is unknown: the provider may still be working. Resolve it or cancel the job first",
            )
        } else {
            debug_assert!(in_flight);
            AppError::new(
                ErrorCode::AttemptInFlight,
                "an attempt is already starting or running; wait for it to finish",
            )
        }
        .with_job(job_id)),
        NewAttemptOutcome::Stale => Err(AppError::new(
            ErrorCode::PreconditionFailed,
            "If-Match does not name the job's current ETag; read the job again",
        )
        .with_job(job_id)),
    }
}

/// `POST /v1/jobs/{id}/cancel`: the owner gives up. Cancelling a cancelled job answers
/// the job again; a succeeded job cannot be cancelled.
pub(crate) async fn cancel(ctx: &Ctx<'_>, caller: &Caller, job_id: &str) -> ApiResult<Response> {
    let stored = ctx
        .store
        .cancel(&caller.owner, job_id)
        .await?
        .ok_or_else(|| job_not_found(job_id))?;
    if stored.job.status == JobStatus::Succeeded {
        return Err(AppError::new(
            ErrorCode::JobFinished,
            "the job has succeeded; its result stands",
        )
        .with_job(job_id));
    }
    let headers = job_headers(&stored);
    json(200, stored.doc, headers)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Resolve {
    outcome: Outcome,
    #[serde(default)]
    result: Option<Value>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Outcome {
    Failed,
    Cancelled,
    Succeeded,
}

/// `POST /v1/attempts/{id}/resolve` (admin): the out-of-band way out of `unknown`.
pub(crate) async fn resolve(
    req: &mut Request,
    ctx: &Ctx<'_>,
    attempt_id: &str,
) -> ApiResult<Response> {
    let body: Resolve = read_json(req, "a resolution").await?;
    let not_found = || AppError::not_found(&format!("attempt {attempt_id}"));
    let (job_id, _) = ctx
        .store
        .attempt_job(attempt_id)
        .await?
        .ok_or_else(not_found)?;
    let not_unknown = || {
        AppError::new(
            ErrorCode::AttemptNotUnknown,
            "only an attempt in the unknown state can be resolved",
        )
        .with_job(&job_id)
    };
    match (body.outcome, body.result) {
        (Outcome::Succeeded, None) => {
            return Err(AppError::new(
                ErrorCode::InvalidJson,
                "outcome succeeded needs the result",
            ))
        }
        (Outcome::Succeeded, Some(result)) => {
            let stored = ctx.store.job(None, &job_id).await?.ok_or_else(not_found)?;
            let kind = kinds::find(&stored.job.kind)
                .map_err(AppError::internal)?
                .ok_or_else(|| AppError::internal("the job's kind is no longer declared"))?;
            kind.check_output(&stored.job.input, &result)
                .map_err(|v| AppError::new(ErrorCode::ContractViolation, v.0))?;
            let completion = ctx
                .store
                .complete(&job_id, attempt_id, AttemptState::Unknown, &result)
                .await?;
            let provider = stored
                .job
                .attempts
                .iter()
                .find(|a| a.id == attempt_id)
                .map(|a| a.provider.clone())
                .unwrap_or_default();
            dispatch::log_completion(&job_id, attempt_id, &provider, &completion);
            if let Completion::Discarded { .. } = completion {
                return Err(not_unknown());
            }
        }
        (outcome, _) => {
            let (to, error) = match outcome {
                Outcome::Cancelled => (AttemptState::Cancelled, None),
                _ => (
                    AttemptState::Failed,
                    Some(AttemptError::new(
                        "resolved_failed",
                        "an admin resolved the unknown attempt as failed",
                        true,
                    )),
                ),
            };
            if !ctx
                .store
                .move_attempt(attempt_id, AttemptState::Unknown, to, error.as_ref())
                .await?
            {
                return Err(not_unknown());
            }
        }
    }
    let stored = ctx.store.job(None, &job_id).await?.ok_or_else(not_found)?;
    let headers = job_headers(&stored);
    json(200, stored.doc, headers)
}

/// `POST /v1/attempts/{id}/dispatch` (admin): sends the attempt's dispatch message
/// again. Harmless by design — a dispatch of an attempt that is no longer `starting`
/// is ignored and logged — and the way to prove it.
pub(crate) async fn redispatch(ctx: &Ctx<'_>, attempt_id: &str) -> ApiResult<Response> {
    let (job_id, state) = ctx
        .store
        .attempt_job(attempt_id)
        .await?
        .ok_or_else(|| AppError::not_found(&format!("attempt {attempt_id}")))?;
    dispatch::enqueue(ctx.env, attempt_id).await;
    let body = serde_json::json!({"attempt_id": attempt_id, "job_id": job_id, "state": state});
    json(202, body.to_string(), Headers::new())
}
