//! Handlers for jobs: create-or-return, read, the event log, and cancel.

use crate::auth::Caller;
use crate::error::{ApiResult, AppError};
use crate::http::{job_headers, json, none_match, read_json, Ctx};
use onceclick_core::jobs::{decide_cancel, decide_create};
use onceclick_protocol::{CreateJob, ErrorCode, IdempotencyKey};
use worker::{Headers, Request, Response};

pub(crate) async fn health(ctx: &Ctx<'_>) -> ApiResult<Response> {
    ctx.store.ping().await.map_err(|_| {
        AppError::new(
            ErrorCode::ServiceUnavailable,
            "the database does not answer",
        )
    })?;
    json(200, r#"{"status":"ok"}"#.to_owned(), Headers::new())
}

/// `POST /v1/jobs`: the job for one intent, created or returned.
///
/// A request that repeats an existing job's is answered from the stored job (200,
/// replayed), even when it would no longer pass validation: a deploy that removed a
/// provider, reordered a kind's providers or tightened its input schema applies to new
/// jobs only. Only a request that fails validation pays for the extra lookup.
pub(crate) async fn create(
    req: &mut Request,
    ctx: &Ctx<'_>,
    caller: &Caller,
) -> ApiResult<Response> {
    let raw_key = req
        .headers()
        .get("Idempotency-Key")
        .ok()
        .flatten()
        .ok_or_else(|| {
            AppError::new(
                ErrorCode::IdempotencyKeyMissing,
                "POST /v1/jobs needs an Idempotency-Key header naming this intent",
            )
        })?;
    let key = IdempotencyKey::from_header(&raw_key)
        .map_err(|e| AppError::new(ErrorCode::IdempotencyKeyInvalid, e.to_string()))?;
    let request: CreateJob = read_json(req, "a job request").await?;
    let created = decide_create(
        ctx.host,
        ctx.store,
        &caller.owner,
        &key,
        &request,
        ctx.fault.as_deref(),
    )
    .await?;
    let headers = job_headers(&created.stored);
    if !created.new {
        let _ = headers.set("Idempotent-Replayed", "true");
        return json(200, created.stored.doc, headers);
    }
    let _ = headers.set("Location", &format!("/v1/jobs/{}", created.stored.job.id));
    json(201, created.stored.doc, headers)
}

/// `GET /v1/jobs/{id}`, with `ETag` and `If-None-Match`.
pub(crate) async fn get(
    req: &Request,
    ctx: &Ctx<'_>,
    caller: &Caller,
    id: &str,
) -> ApiResult<Response> {
    let stored = ctx
        .store
        .job(Some(&caller.owner), id)
        .await?
        .ok_or_else(|| AppError::not_found(&format!("job {id}")))?;
    let headers = job_headers(&stored);
    let if_none_match = req.headers().get("If-None-Match").ok().flatten();
    if if_none_match.is_some_and(|v| none_match(&v, &stored.etag)) {
        return Ok(Response::empty()
            .map_err(crate::problem::runtime)?
            .with_status(304)
            .with_headers(headers));
    }
    json(200, stored.doc, headers)
}

/// `GET /v1/jobs/{id}/events`.
pub(crate) async fn events(ctx: &Ctx<'_>, caller: &Caller, id: &str) -> ApiResult<Response> {
    let events = ctx
        .store
        .events(&caller.owner, id)
        .await?
        .ok_or_else(|| AppError::not_found(&format!("job {id}")))?;
    let body = serde_json::to_string(&serde_json::json!({ "job_id": id, "events": events }))
        .map_err(AppError::internal)?;
    json(200, body, Headers::new())
}

/// `POST /v1/jobs/{id}/cancel`: the owner gives up. Cancelling a cancelled job answers
/// the job again; a succeeded job cannot be cancelled.
pub(crate) async fn cancel(ctx: &Ctx<'_>, caller: &Caller, job_id: &str) -> ApiResult<Response> {
    // An admin may cancel any owner's job (the operator's way out of `unknown`).
    let owner = (!caller.admin).then_some(caller.owner.as_str());
    let stored = decide_cancel(ctx.store, owner, job_id).await?;
    let headers = job_headers(&stored);
    json(200, stored.doc, headers)
}
