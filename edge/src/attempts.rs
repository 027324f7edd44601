//! Handlers that add or end attempts: the fallback button, and the admin's ways out of
//! `unknown`.

use crate::auth::Caller;
use crate::dispatch;
use crate::error::{ApiResult, AppError};
use crate::http::{job_headers, json, read_json, Ctx};
use crate::store::StoredJob;
use onceclick_core::attempts::{decide_attempt, decide_resolve, Resolve};
use onceclick_protocol::etag::Condition;
use onceclick_protocol::{ErrorCode, IdempotencyKey, NewAttempt};
use worker::{Headers, Request, Response};

/// `POST /v1/jobs/{id}/attempts`: one more attempt on the same job (the fallback
/// button).
///
/// The request has its own identity: an `Idempotency-Key` header. A resend with the
/// same key, after a lost answer, gets the attempt the first send made (200,
/// `Idempotent-Replayed: true`) and never a second one, whatever the job has done
/// since; the same key with another body is `409 idempotency_key_reused`. Without a key,
/// `If-Match` alone guards against a second attempt (a resend is then a 412).
pub(crate) async fn create(
    req: &mut Request,
    ctx: &Ctx<'_>,
    caller: &Caller,
    job_id: &str,
) -> ApiResult<Response> {
    let key = match req.headers().get("Idempotency-Key").ok().flatten() {
        Some(raw) => Some(
            IdempotencyKey::from_header(&raw)
                .map_err(|e| AppError::new(ErrorCode::IdempotencyKeyInvalid, e.to_string()))?,
        ),
        None => None,
    };
    let body: NewAttempt = read_json(req, "an attempt request").await?;
    let if_match = req
        .headers()
        .get("If-Match")
        .ok()
        .flatten()
        .map(|h| Condition::parse(&h));
    let made = decide_attempt(
        ctx.host,
        ctx.store,
        &caller.owner,
        job_id,
        key.as_ref().map(IdempotencyKey::as_str),
        &body,
        if_match.as_ref().and_then(Condition::strong_tags),
        ctx.fault.as_deref(),
    )
    .await?;
    attempt_answer(
        made.status,
        &made.stored,
        &made.attempt_id,
        made.status == 200,
    )
}

/// The attempt `attempt_id` of `stored`, as the answer to the fallback button.
fn attempt_answer(
    status: u16,
    stored: &StoredJob,
    attempt_id: &str,
    replayed: bool,
) -> ApiResult<Response> {
    let attempt = stored
        .job
        .attempts
        .iter()
        .find(|a| a.id == attempt_id)
        .ok_or_else(|| AppError::internal("the attempt is missing from its job"))?;
    let body = serde_json::to_string(attempt).map_err(AppError::internal)?;
    let headers = job_headers(stored);
    let _ = headers.set("Location", &format!("/v1/jobs/{}", stored.job.id));
    if replayed {
        let _ = headers.set("Idempotent-Replayed", "true");
    }
    json(status, body, headers)
}

/// `POST /v1/attempts/{id}/resolve` (admin): the out-of-band way out of `unknown`.
///
/// Only an `unknown` attempt can be resolved; anything else is a 409 that writes
/// nothing (no event, no ETag change). A result for a job that another attempt has
/// already completed is accepted only if it is that same result (the attempt becomes
/// `superseded`); a different one is a 409 and nothing is written.
pub(crate) async fn resolve(
    req: &mut Request,
    ctx: &Ctx<'_>,
    attempt_id: &str,
) -> ApiResult<Response> {
    let body: Resolve = read_json(req, "a resolution").await?;
    let stored = decide_resolve(ctx.store, ctx.host, attempt_id, body).await?;
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
    dispatch::enqueue(ctx.host, attempt_id, ctx.fault.as_deref()).await;
    let body = serde_json::json!({"attempt_id": attempt_id, "job_id": job_id, "state": state});
    json(202, body.to_string(), Headers::new())
}
