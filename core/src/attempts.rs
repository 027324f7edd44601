//! The decisions of the attempt handlers (the fallback button's `POST
//! /v1/jobs/{id}/attempts`, and the admin's resolve), once the Worker has read the
//! request.

use crate::dispatch;
use crate::error::{ApiResult, AppError};
use crate::host::Host;
use crate::kinds;
use crate::providers::{self, ProviderConfig};
use crate::store::{Completion, NewAttemptOutcome, NextAttempt, Offer, Store, StoredJob};
use onceclick_protocol::contract::Kind;
use onceclick_protocol::{AttemptError, AttemptState, ErrorCode, EventType, NewAttempt};
use serde::Deserialize;
use serde_json::Value;

pub fn job_not_found(id: &str) -> AppError {
    AppError::not_found(&format!("job {id}"))
}

/// What the fallback button made: the attempt (new, 201; or a resend's, 200) and its
/// job as it is now.
pub struct AttemptMade {
    pub status: u16,
    pub stored: StoredJob,
    pub attempt_id: String,
}

/// The decision of `POST /v1/jobs/{id}/attempts`, after the request is read.
#[allow(clippy::too_many_arguments)]
pub fn decide_attempt<'a>(
    host: &'a dyn Host,
    store: &'a Store,
    owner: &'a str,
    job_id: &'a str,
    key: Option<&'a str>,
    body: &'a NewAttempt,
    if_match: Option<Vec<&'a str>>,
    fault: Option<&'a str>,
) -> futures_util::future::LocalBoxFuture<'a, ApiResult<AttemptMade>> {
    Box::pin(async move {
        let stored = store
            .job(Some(owner), job_id)
            .await?
            .ok_or_else(|| job_not_found(job_id))?;
        let request_text = serde_json::to_string(body).map_err(AppError::internal)?;
        let configured = providers::configured(host)?;
        let (kind, provider) = match choose(host, &stored, body, &configured) {
            Ok(chosen) => chosen,
            // A resend is answered from what its first send made, even if a deploy has
            // since removed the provider or the kind it names.
            Err(invalid) => {
                let Some(key) = &key else {
                    return Err(invalid);
                };
                return match store.attempt_by_request(owner, job_id, key).await? {
                    Some((stored, attempt_id, fingerprint))
                        if fingerprint.as_deref() == Some(request_text.as_str()) =>
                    {
                        Ok(AttemptMade {
                            status: 200,
                            stored,
                            attempt_id,
                        })
                    }
                    Some(_) => Err(key_reused(job_id)),
                    None => Err(invalid),
                };
            }
        };

        let attempt_id = store.new_attempt_id(job_id);
        let digest = providers::digest(&configured, &provider, kind.name());
        let next = NextAttempt {
            new_id: &attempt_id,
            job_id,
            provider: &provider,
            contract_version: kind.contract_version(),
            provider_digest: &digest,
            request: key.map(|k| (k, request_text.as_str())),
        };
        let outcome = store.insert_attempt(&next, owner, if_match).await?;
        match outcome {
        NewAttemptOutcome::Created(stored) => {
            dispatch::enqueue_after_response(host, &attempt_id, fault);
            Ok(AttemptMade {
                status: 201,
                stored,
                attempt_id,
            })
        }
        NewAttemptOutcome::Replayed { stored, attempt_id } => Ok(AttemptMade {
            status: 200,
            stored,
            attempt_id,
        }),
        NewAttemptOutcome::KeyReused => Err(key_reused(job_id)),
        NewAttemptOutcome::NotFound => Err(job_not_found(job_id)),
        NewAttemptOutcome::NotCertified => Err(AppError::new(
            ErrorCode::ProviderNotCertified,
            format!(
                "provider {provider:?} has not passed certification for kind {:?} at contract version {} as it is configured now; an admin can run POST /v1/providers/{provider}/certify",
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
    })
}

fn key_reused(job_id: &str) -> AppError {
    AppError::new(
        ErrorCode::IdempotencyKeyReused,
        "this Idempotency-Key made an attempt from another request; use a new key for a new click",
    )
    .with_job(job_id)
}

/// The kind of `stored` and the provider a new attempt would run on: the one `body`
/// names, or the kind's next after the last attempt's.
fn choose(
    host: &dyn Host,
    stored: &StoredJob,
    body: &NewAttempt,
    configured: &[ProviderConfig],
) -> ApiResult<(&'static Kind, String)> {
    let kind = kinds::declared(host, &stored.job.kind)?;
    let usable =
        |name: &str| kind.names_provider(name) && providers::find(configured, name).is_some();
    let provider = match &body.provider {
        Some(name) if usable(name) => name.clone(),
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
    Ok((kind, provider))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resolve {
    outcome: Outcome,
    /// The output: an object for a JSON kind, a string for a text kind (anything else
    /// is refused as the request is read); checked against the kind's whole contract.
    #[serde(default, deserialize_with = "object_or_string")]
    result: Option<Value>,
}

/// A resolution's `result`, read only as an object or a string.
fn object_or_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        Some(v) if !v.is_object() && !v.is_string() => Err(serde::de::Error::custom(
            "result is an object (a JSON kind's output) or a string (a text kind's)",
        )),
        other => Ok(other),
    }
}

/// Read from its name only: serde would also take `{"failed": null}` for a unit variant.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(try_from = "String")]
enum Outcome {
    Failed,
    Cancelled,
    Succeeded,
}

impl TryFrom<String> for Outcome {
    type Error = String;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        match name.as_str() {
            "failed" => Ok(Self::Failed),
            "cancelled" => Ok(Self::Cancelled),
            "succeeded" => Ok(Self::Succeeded),
            other => Err(format!(
                "unknown outcome {other:?}: expected failed, cancelled or succeeded"
            )),
        }
    }
}

/// The decision of a resolve, after the request is read: the job as it is after.
pub fn decide_resolve<'a>(
    store: &'a Store,
    host: &'a dyn Host,
    attempt_id: &'a str,
    body: Resolve,
) -> futures_util::future::LocalBoxFuture<'a, ApiResult<StoredJob>> {
    Box::pin(async move {
        let not_found = || AppError::not_found(&format!("attempt {attempt_id}"));
        let (job_id, state) = store.attempt_job(attempt_id).await?.ok_or_else(not_found)?;
        let not_unknown = || {
            AppError::new(
                ErrorCode::AttemptNotUnknown,
                "only an attempt in the unknown state can be resolved",
            )
            .with_job(&job_id)
        };
        // Refused before anything is written. The writes below name `unknown` again, so
        // a resolution that loses a race with another is refused there too.
        if state != AttemptState::Unknown {
            if crate::mutant::on(crate::mutant::Mutant::RefusedResolveWritesEvent) {
                let details = serde_json::json!({"state": state});
                let event = EventType::LateResultDiscarded;
                store
                    .log_event(&job_id, event, Some(attempt_id), &details)
                    .await?;
            }
            return Err(not_unknown());
        }
        match (body.outcome, body.result) {
            (Outcome::Succeeded, None) => {
                return Err(AppError::new(
                    ErrorCode::InvalidJson,
                    "outcome succeeded needs the result",
                ))
            }
            (Outcome::Succeeded, Some(result)) => {
                let stored = store.job(None, &job_id).await?.ok_or_else(not_found)?;
                let kind = kinds::declared(host, &stored.job.kind)?;
                kind.check_output(&stored.job.input, &result)
                    .map_err(|v| AppError::new(ErrorCode::ContractViolation, v.0))?;
                let completion = store
                    .complete(&job_id, attempt_id, Offer::Resolution, &result, None)
                    .await?;
                let provider = stored
                    .job
                    .attempts
                    .iter()
                    .find(|a| a.id == attempt_id)
                    .map(|a| a.provider.clone())
                    .unwrap_or_default();
                dispatch::log_completion(&job_id, attempt_id, &provider, &completion);
                match completion {
                Completion::Discarded {
                    state: AttemptState::Unknown,
                } => {
                    return Err(AppError::new(
                        ErrorCode::JobFinished,
                        "the job has already succeeded with another result; resolve this attempt as failed or cancelled",
                    )
                    .with_job(&job_id))
                }
                Completion::Discarded { .. } => return Err(not_unknown()),
                // The purge took the job since it was read: the attempt had left
                // `unknown` another way first.
                Completion::Gone => return Err(not_found()),
                Completion::Won | Completion::Lost { .. } => {}
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
                if !store
                    .move_attempt(attempt_id, &[AttemptState::Unknown], to, error.as_ref())
                    .await?
                {
                    return Err(not_unknown());
                }
            }
        }
        store.job(None, &job_id).await?.ok_or_else(not_found)
    })
}
