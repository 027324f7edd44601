//! Handlers for jobs: create-or-return, read, and the event log.

use crate::api::Ctx;
use crate::auth::Caller;
use crate::clock;
use crate::error::{ApiResult, AppError};
use crate::kinds;
use crate::providers;
use crate::store::{NewJob, StoredJob};
use onceclick_protocol::{
    fingerprint, ijson, CreateJob, ErrorCode, IdempotencyKey, MAX_BODY_BYTES,
};
use sha2::{Digest, Sha256};
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
    let body = read_body(req).await?;
    let value =
        ijson::parse(&body).map_err(|e| AppError::new(ErrorCode::InvalidJson, e.to_string()))?;
    let request: CreateJob = serde_json::from_value(value).map_err(|e| {
        AppError::new(
            ErrorCode::InvalidJson,
            format!("the body is not a job request: {e}"),
        )
    })?;

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
        .job(&caller.owner, id)
        .await?
        .ok_or_else(|| AppError::not_found(&format!("job {id}")))?;
    let headers = job_headers(&stored);
    let if_none_match = req.headers().get("If-None-Match").ok().flatten();
    if if_none_match.is_some_and(|v| etag_matches(&v, &etag(&stored.doc))) {
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

async fn read_body(req: &mut Request) -> ApiResult<Vec<u8>> {
    let too_large = |n: usize| {
        AppError::new(
            ErrorCode::PayloadTooLarge,
            format!("the body is {n} bytes; at most {MAX_BODY_BYTES} are accepted"),
        )
    };
    let declared = req
        .headers()
        .get("Content-Length")
        .ok()
        .flatten()
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(n) = declared.filter(|n| *n > MAX_BODY_BYTES) {
        return Err(too_large(n));
    }
    let body = req.bytes().await?;
    if body.len() > MAX_BODY_BYTES {
        return Err(too_large(body.len()));
    }
    Ok(body)
}

/// A strong ETag over the job document as the database rendered it: it changes whenever
/// the job row or any of its attempts changes, because both are in the document.
fn etag(doc: &str) -> String {
    let digest = hex::encode(Sha256::digest(doc.as_bytes()));
    format!("\"{}\"", &digest[..32])
}

fn etag_matches(header: &str, current: &str) -> bool {
    header
        .split(',')
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == "*" || t == current)
}

fn job_headers(stored: &StoredJob) -> Headers {
    let headers = Headers::new();
    let _ = headers.set("ETag", &etag(&stored.doc));
    headers
}

fn json(status: u16, body: String, headers: Headers) -> ApiResult<Response> {
    headers.set("Content-Type", "application/json")?;
    Ok(Response::from_bytes(body.into_bytes())?
        .with_status(status)
        .with_headers(headers))
}
