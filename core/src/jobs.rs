//! The decisions of the job handlers (`POST /v1/jobs` and its cancel), once the Worker
//! has read the request: validate in the order of the contract, then one store call.

use crate::dispatch;
use crate::error::{ApiResult, AppError};
use crate::fault;
use crate::host::Host;
use crate::kinds;
use crate::providers;
use crate::store::{HandOff, NewJob, Store, StoredJob};
use onceclick_protocol::contract::Kind;
use onceclick_protocol::{fingerprint, CreateJob, ErrorCode, IdempotencyKey, JobStatus};

/// What a create decided: the job (owner, key) is bound to, and whether this request
/// bound it (201) or repeats the request that did (200, replayed).
pub struct Created {
    pub stored: StoredJob,
    pub new: bool,
}

/// The decision of `POST /v1/jobs`, after the request is read: validate in the order
/// of the contract, then one store call; the same request again is a replay, another
/// request under the same key `409 idempotency_key_reused`. A new job's dispatch is
/// enqueued once the answer is on its way, or, sharded, handed on by the shard's alarm
/// that the create's own transaction scheduled (`handoff.rs`).
pub fn decide_create<'a>(
    host: &'a dyn Host,
    store: &'a Store,
    owner: &'a str,
    key: &'a IdempotencyKey,
    request: &'a CreateJob,
    fault: Option<&'a str>,
) -> futures_util::future::LocalBoxFuture<'a, ApiResult<Created>> {
    Box::pin(async move {
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
    })
}

/// The kind and the provider a new job would run on, or why the request is refused.
fn validate<'r>(host: &dyn Host, request: &'r CreateJob) -> ApiResult<(&'static Kind, &'r str)> {
    let kind = kinds::declared(host, &request.kind)?;
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

/// The decision of a cancel by `owner` (any owner for `None`, an admin).
pub fn decide_cancel<'a>(
    store: &'a Store,
    owner: Option<&'a str>,
    job_id: &'a str,
) -> futures_util::future::LocalBoxFuture<'a, ApiResult<StoredJob>> {
    Box::pin(async move {
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
    })
}
