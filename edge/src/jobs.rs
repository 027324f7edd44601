//! Handlers for jobs: create-or-return, read, the event log, and cancel.

use crate::auth::Caller;
use crate::dispatch;
use crate::error::{ApiResult, AppError};
use crate::fault;
use crate::host::Host;
use crate::http::{job_headers, json, none_match, read_json, Ctx};
use crate::kinds;
use crate::providers;
use crate::store::{HandOff, NewJob, Store, StoredJob};
use onceclick_protocol::contract::Kind;
use onceclick_protocol::{fingerprint, CreateJob, ErrorCode, IdempotencyKey, JobStatus};
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

/// What a create decided: the job (owner, key) is bound to, and whether this request
/// bound it (201) or repeats the request that did (200, replayed).
pub(crate) struct Created {
    pub(crate) stored: StoredJob,
    pub(crate) new: bool,
}

/// The decision of `POST /v1/jobs`, after the request is read: validate in the order
/// of the contract, then one store call; the same request again is a replay, another
/// request under the same key `409 idempotency_key_reused`. A new job's dispatch is
/// enqueued once the answer is on its way, or, sharded, handed on by the shard's alarm
/// that the create's own transaction scheduled (`handoff.rs`).
pub(crate) async fn decide_create(
    host: &dyn Host,
    store: &Store,
    owner: &str,
    key: &IdempotencyKey,
    request: &CreateJob,
    fault: Option<&str>,
) -> ApiResult<Created> {
    let (kind, provider) = match validate(host, request) {
        Ok(valid) => valid,
        Err(invalid) => {
            return match store.job_by_key(owner, key.as_str()).await? {
                Some(stored) => replay(stored, request),
                None => Err(invalid),
            }
        }
    };

    let fingerprint = fingerprint(kind.name(), &request.input, provider);
    let (job_id, attempt_id) = store.new_job_ids(owner, key.as_str());
    let input = request.input.to_string();
    let dropped = fault::drops_enqueue(fault);
    let hand_off = (store.hands_off_creates() && !dropped).then(|| HandOff {
        fault: fault.map(str::to_owned),
    });
    let stored = store
        .create_or_get_job(&NewJob {
            job_id: &job_id,
            attempt_id: &attempt_id,
            owner,
            key: key.as_str(),
            fingerprint: fingerprint.as_str(),
            kind: kind.name(),
            input: &input,
            provider,
            hand_off,
        })
        .await?;

    if stored.job.id != job_id {
        let answer = replay(stored, request);
        let event = if answer.is_ok() {
            "job_replayed"
        } else {
            "job_conflict"
        };
        host.count_create(owner, event, kind.name(), provider);
        return answer;
    }
    host.count_create(owner, "job_created", kind.name(), provider);
    if !dropped && !store.hands_off_creates() {
        dispatch::enqueue_after_response(host, &attempt_id, fault);
    }
    Ok(Created { stored, new: true })
}

/// The kind and the provider a new job would run on, or why the request is refused.
fn validate<'r>(host: &dyn Host, request: &'r CreateJob) -> ApiResult<(&'static Kind, &'r str)> {
    let kind = kinds::declared(&request.kind)?;
    kind.check_input(&request.input)
        .map_err(|e| AppError::new(ErrorCode::InvalidInput, format!("input: {e}")))?;
    let provider = request.provider.as_deref().unwrap_or(kind.primary());
    let configured = providers::configured(host)?;
    if !kind.names_provider(provider) || !configured.iter().any(|p| p.name == provider) {
        return Err(AppError::new(
            ErrorCode::UnknownProvider,
            format!(
                "no provider {provider:?} is configured for kind {:?}",
                kind.name()
            ),
        ));
    }
    Ok((kind, provider))
}

/// The answer to a request whose key is bound to `stored`: the replay if it asks for the
/// same thing, else `409 idempotency_key_reused`. A request that names no provider asks
/// for the provider the job was made on (the primary of its day), so a later reorder
/// of the kind's providers does not turn an honest resend into a conflict.
fn replay(stored: StoredJob, request: &CreateJob) -> ApiResult<Created> {
    let provider = request.provider.as_deref().unwrap_or(&stored.job.provider);
    if stored.fingerprint == fingerprint(&request.kind, &request.input, provider).as_str()
        || crate::mutant::on(crate::mutant::Mutant::CreateSkipsFingerprint)
    {
        return Ok(Created { stored, new: false });
    }
    Err(AppError::new(
        ErrorCode::IdempotencyKeyReused,
        "this Idempotency-Key is bound to a job made from another request; use a new key for a new intent",
    )
    .with_job(&stored.job.id))
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

/// `POST /v1/jobs/{id}/cancel`: the owner gives up. Cancelling a cancelled job answers
/// the job again; a succeeded job cannot be cancelled.
pub(crate) async fn cancel(ctx: &Ctx<'_>, caller: &Caller, job_id: &str) -> ApiResult<Response> {
    // An admin may cancel any owner's job (the operator's way out of `unknown`).
    let owner = (!caller.admin).then_some(caller.owner.as_str());
    let stored = decide_cancel(ctx.store, owner, job_id).await?;
    let headers = job_headers(&stored);
    json(200, stored.doc, headers)
}

/// The decision of a cancel by `owner` (any owner for `None`, an admin).
pub(crate) async fn decide_cancel(
    store: &Store,
    owner: Option<&str>,
    job_id: &str,
) -> ApiResult<StoredJob> {
    let stored = store
        .cancel(owner, job_id)
        .await?
        .ok_or_else(|| AppError::not_found(&format!("job {job_id}")))?;
    if stored.job.status == JobStatus::Succeeded {
        return Err(AppError::new(
            ErrorCode::JobFinished,
            "the job has succeeded; its result stands",
        )
        .with_job(job_id));
    }
    Ok(stored)
}
