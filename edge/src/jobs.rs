//! Handlers for jobs: create-or-return, read, and the event log.

use crate::api::Ctx;
use crate::api::{etag_matches, job_headers, json, read_json};
use crate::auth::Caller;
use crate::clock;
use crate::dispatch;
use crate::error::{ApiResult, AppError};
use crate::kinds;
use crate::providers;
use crate::store::NewJob;
use onceclick_protocol::{fingerprint, CreateJob, ErrorCode, IdempotencyKey};
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
    let key = IdempotencyKey::parse(&raw_key)
        .map_err(|e| AppError::new(ErrorCode::IdempotencyKeyInvalid, e.to_string()))?;
    let request: CreateJob = read_json(req, "a job request").await?;

    let kind = kinds::find(&request.kind)
        .map_err(AppError::internal)?
        .ok_or_else(|| {
            AppError::new(
                ErrorCode::UnknownKind,
                format!("no kind is called {:?}", request.kind),
            )
        })?;
    kind.check_input(&request.input)
        .map_err(|e| AppError::new(ErrorCode::InvalidInput, format!("input: {e}")))?;
    let provider = request.provider.as_deref().unwrap_or(kind.primary());
    let configured = providers::configured(ctx.env)?;
    if !kind.names_provider(provider) || !configured.iter().any(|p| p.name == provider) {
        return Err(AppError::new(
            ErrorCode::UnknownProvider,
            format!(
                "no provider {provider:?} is configured for kind {:?}",
                kind.name()
            ),
        ));
    }

    let fingerprint = fingerprint(kind.name(), &request.input, provider);
    let job_id = clock::new_id("job");
    let attempt_id = clock::new_id("att");
    let input = request.input.to_string();
    let stored = ctx
        .store
        .create_or_get_job(&NewJob {
            job_id: &job_id,
            attempt_id: &attempt_id,
            owner: &caller.owner,
            key: key.as_str(),
            fingerprint: fingerprint.as_str(),
            kind: kind.name(),
            input: &input,
            provider,
        })
        .await?;

    if stored.job.id == job_id {
        if !drop_enqueue_fault(req, ctx) {
            dispatch::enqueue(ctx.env, &attempt_id).await;
        }
        let headers = job_headers(&stored);
        let _ = headers.set("Location", &format!("/v1/jobs/{job_id}"));
        json(201, stored.doc, headers)
    } else if stored.fingerprint == fingerprint.as_str() {
        let headers = job_headers(&stored);
        let _ = headers.set("Idempotent-Replayed", "true");
        json(200, stored.doc, headers)
    } else {
        Err(AppError::new(
            ErrorCode::IdempotencyKeyReused,
            "this Idempotency-Key is bound to a job made from another request; use a new key for a new intent",
        )
        .with_job(&stored.job.id))
    }
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
    if if_none_match.is_some_and(|v| etag_matches(&v, &stored.etag)) {
        return Ok(Response::empty()?.with_status(304).with_headers(headers));
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

/// Fault injection for tests of the reconciler: with `ALLOW_FAULT_INJECTION=true` (never
/// set in wrangler.toml) a request may ask that its dispatch message be lost, as if the
/// Worker had died between the insert and the enqueue.
fn drop_enqueue_fault(req: &Request, ctx: &Ctx<'_>) -> bool {
    let allowed = ctx
        .env
        .var("ALLOW_FAULT_INJECTION")
        .is_ok_and(|v| v.to_string() == "true");
    allowed
        && req
            .headers()
            .get("X-Onceclick-Fault")
            .ok()
            .flatten()
            .is_some_and(|f| f == "drop-enqueue")
}
