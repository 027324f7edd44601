//! The dispatcher: the queue consumer that runs attempts against providers.
//!
//! A dispatch message names one attempt. The consumer claims it (`starting → running`,
//! one conditional UPDATE), calls the provider, and offers the outcome to the store.
//! Every error is handled here; each message is acked or retried explicitly, because an
//! `Err` out of a queue handler would crash the isolate.

use crate::certify;
use crate::clock;
use crate::error::{ApiResult, AppError};
use crate::kinds;
use crate::openai::{self, CallOutcome};
use crate::providers::{self, ProviderConfig};
use crate::store::{Claim, ClaimedAttempt, Completion, Store};
use futures_util::future::{join, join_all, select, Either, LocalBoxFuture};
use futures_util::FutureExt;
use onceclick_protocol::contract::Kind;
use onceclick_protocol::{AttemptError, AttemptState, EventType};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::time::Duration;
use worker::{console_error, console_log, Delay, Env, MessageBatch, MessageExt};

/// The queue binding that carries dispatch messages.
pub(crate) const QUEUE: &str = "DISPATCH";

/// One dispatch message: run this attempt.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Dispatch {
    pub(crate) attempt_id: String,
}

/// Enqueues the dispatch of `attempt_id`. A lost enqueue is not an error for the
/// caller: the attempt stays `starting` and the reconciler sends it again.
pub(crate) async fn enqueue(env: &Env, attempt_id: &str) {
    let sent = match env.queue(QUEUE) {
        Ok(queue) => {
            queue
                .send(Dispatch {
                    attempt_id: attempt_id.to_owned(),
                })
                .await
        }
        Err(e) => Err(e),
    };
    if let Err(e) = sent {
        console_error!(
            "{}",
            json!({"event": "enqueue_failed", "attempt_id": attempt_id, "cause": e.to_string()})
        );
    }
}

/// The queue consumer. Messages of a batch run concurrently.
pub(crate) async fn consume(batch: MessageBatch<Dispatch>, env: &Env) {
    let store = match env.d1("DB") {
        Ok(db) => Store::new(db),
        Err(e) => {
            console_error!(
                "{}",
                json!({"event": "dispatch_no_db", "cause": e.to_string()})
            );
            batch.retry_all();
            return;
        }
    };
    let store = &store;
    let runs = batch.raw_iter().map(|message| async move {
        let dispatch: Result<Dispatch, _> = serde_wasm_bindgen::from_value(message.body());
        match dispatch {
            Err(e) => {
                // A message we cannot read will not read better later.
                console_error!("{}", json!({"event": "dispatch_unreadable", "cause": e.to_string()}));
                message.ack();
            }
            Ok(dispatch) => match run(env, store, &dispatch.attempt_id).await {
                Ok(()) => message.ack(),
                Err(e) => {
                    console_error!(
                        "{}",
                        json!({"event": "dispatch_retry", "attempt_id": dispatch.attempt_id, "cause": e.detail})
                    );
                    message.retry();
                }
            },
        }
    });
    join_all(runs).await;
}

/// Claims and runs one attempt. A delivery that finds the attempt already claimed (or
/// cancelled) logs `dispatch_ignored` and makes no provider call.
async fn run(env: &Env, store: &Store, attempt_id: &str) -> ApiResult<()> {
    match store.claim(attempt_id).await? {
        Claim::Claimed(attempt) => run_claimed(env, store, attempt, true).await,
        Claim::Ignored { job_id, state } => {
            store
                .log_event(
                    &job_id,
                    EventType::DispatchIgnored,
                    Some(attempt_id),
                    &json!({"state": state, "reason": "the attempt was no longer starting"}),
                )
                .await
        }
        Claim::Missing => Ok(()),
    }
}

/// Calls the provider for a claimed attempt and records the outcome. With `may_hedge`
/// and a kind that declares `hedge_after_ms`, a silent provider gets one hedge attempt
/// on the next provider, run concurrently: whichever finishes first wins.
fn run_claimed<'a>(
    env: &'a Env,
    store: &'a Store,
    attempt: ClaimedAttempt,
    may_hedge: bool,
) -> LocalBoxFuture<'a, ApiResult<()>> {
    async move {
        let kind = kinds::find(&attempt.kind)
            .map_err(AppError::internal)?
            .ok_or_else(|| {
                AppError::internal(format!("kind {} is no longer declared", attempt.kind))
            })?;
        let configured = providers::configured(env)?;
        let input: Value = serde_json::from_str(&attempt.input).map_err(AppError::internal)?;
        let Some(provider) = providers::find(&configured, &attempt.provider) else {
            let error = AttemptError::new(
                "provider_misconfigured",
                format!("provider {} is not configured", attempt.provider),
                false,
            );
            store
                .move_attempt(
                    &attempt.id,
                    AttemptState::Running,
                    AttemptState::Failed,
                    Some(&error),
                )
                .await?;
            return Ok(());
        };
        let api_key = providers::api_key(provider, env);
        let own = async {
            let outcome =
                openai::call(provider, api_key.as_deref(), kind, &input, &attempt.id).await;
            let retryable = matches!(&outcome, CallOutcome::Failed(e) if e.retryable);
            if record(store, &attempt, outcome).await? && retryable {
                fail_over(env, store, &attempt, kind, &configured).await?;
            }
            Ok(())
        };
        let hedge_after = kind.decl().hedge_after_ms.filter(|_| may_hedge);
        let Some(ms) = hedge_after else {
            return own.await;
        };
        futures_util::pin_mut!(own);
        match select(own, Delay::from(Duration::from_millis(ms))).await {
            Either::Left((done, _)) => done,
            Either::Right(((), own)) => {
                match start_hedge(store, &attempt, kind, &configured, ms).await? {
                    None => own.await,
                    Some(hedge) => {
                        let (a, b) = join(own, run_claimed(env, store, hedge, false)).await;
                        a.and(b)
                    }
                }
            }
        }
    }
    .boxed_local()
}

/// The next provider after the attempt's own in the kind's failover order that is
/// configured, is not the attempt's own, and is the job's first provider or certified
/// for the kind's current contract version. `Err` carries why there is none, for the
/// `failover_skipped` event.
async fn next_certified(
    store: &Store,
    attempt: &ClaimedAttempt,
    kind: &Kind,
    configured: &[ProviderConfig],
) -> ApiResult<Result<String, String>> {
    let certified = certify::certified_for(store, kind).await?;
    let after = attempt.provider.as_str();
    let next = kind.next_provider(Some(after), |p| {
        p != after
            && providers::find(configured, p).is_some()
            && (p == attempt.job_provider || certified.contains(p))
    });
    Ok(next.map(str::to_owned).ok_or_else(|| {
        let others: Vec<&str> = kind
            .decl()
            .providers
            .iter()
            .map(String::as_str)
            .filter(|p| *p != after)
            .collect();
        format!(
            "no configured provider after {after} is certified for {}@{} (candidates: {})",
            kind.name(),
            kind.contract_version(),
            others.join(", ")
        )
    }))
}

/// Logs (event and structured line) why a hedge or failover did not start.
async fn log_skipped(
    store: &Store,
    attempt: &ClaimedAttempt,
    what: &str,
    reason: &str,
) -> ApiResult<()> {
    let details = json!({"for": what, "reason": reason});
    console_log!(
        "{}",
        json!({"event": "failover_skipped", "job_id": attempt.job_id,
               "attempt_id": attempt.id, "details": details})
    );
    store
        .log_event(
            &attempt.job_id,
            EventType::FailoverSkipped,
            Some(&attempt.id),
            &details,
        )
        .await
}

/// Inserts and claims the hedge attempt, or says in the log why there is none.
async fn start_hedge(
    store: &Store,
    running: &ClaimedAttempt,
    kind: &Kind,
    configured: &[ProviderConfig],
    silent_ms: u64,
) -> ApiResult<Option<ClaimedAttempt>> {
    let next = match next_certified(store, running, kind, configured).await? {
        Ok(next) => next,
        Err(reason) => {
            log_skipped(store, running, "hedge", &reason).await?;
            return Ok(None);
        }
    };
    let hedge_id = clock::new_id("att");
    let inserted = store
        .insert_hedge(
            &running.job_id,
            &running.id,
            &hedge_id,
            &next,
            kind.contract_version(),
        )
        .await?;
    if !inserted {
        // The attempt finished, the job ended, or an attempt is unknown: no hedge.
        return Ok(None);
    }
    console_log!(
        "{}",
        json!({"event": "hedge_started", "job_id": running.job_id, "attempt_id": hedge_id,
               "provider": next, "after_ms": silent_ms, "silent_attempt": running.id})
    );
    match store.claim(&hedge_id).await? {
        Claim::Claimed(hedge) => Ok(Some(hedge)),
        _ => Ok(None),
    }
}

/// After a retryable failure, the kind's `auto_failover` tries the next certified
/// provider, up to its `max_attempts`. Never after `unknown`: the caller only comes
/// here for a recorded `failed`.
async fn fail_over(
    env: &Env,
    store: &Store,
    failed: &ClaimedAttempt,
    kind: &Kind,
    configured: &[ProviderConfig],
) -> ApiResult<()> {
    let Some(policy) = &kind.decl().auto_failover else {
        return Ok(());
    };
    let next = match next_certified(store, failed, kind, configured).await? {
        Ok(next) => next,
        Err(reason) => return log_skipped(store, failed, "auto_failover", &reason).await,
    };
    let new_id = clock::new_id("att");
    let inserted = store
        .insert_failover(
            &failed.job_id,
            &failed.id,
            &new_id,
            &next,
            kind.contract_version(),
            policy.max_attempts,
        )
        .await?;
    if inserted {
        enqueue(env, &new_id).await;
        Ok(())
    } else {
        let reason = format!(
            "the job has ended, has an attempt in flight or unknown, or has {} attempts already",
            policy.max_attempts
        );
        log_skipped(store, failed, "auto_failover", &reason).await
    }
}

/// Writes an attempt's outcome: a result goes through the compare-and-swap; a failure
/// or a timeout is one conditional move out of `running`.
/// Returns whether a failure or timeout was recorded (false for a result, and for an
/// attempt that had already left `running`).
async fn record(store: &Store, attempt: &ClaimedAttempt, outcome: CallOutcome) -> ApiResult<bool> {
    let (to, error) = match outcome {
        CallOutcome::Output(output) => {
            let completion = store
                .complete(&attempt.job_id, &attempt.id, AttemptState::Running, &output)
                .await?;
            log_completion(&attempt.job_id, &attempt.id, &attempt.provider, &completion);
            return Ok(false);
        }
        CallOutcome::Failed(error) => (AttemptState::Failed, error),
        CallOutcome::TimedOut(error) => (AttemptState::Unknown, error),
    };
    let recorded = store
        .move_attempt(&attempt.id, AttemptState::Running, to, Some(&error))
        .await?;
    if !recorded {
        console_log!(
            "{}",
            json!({"event": "late_result_discarded", "job_id": attempt.job_id,
                   "attempt_id": attempt.id, "outcome": to, "error": error})
        );
    }
    Ok(recorded)
}

/// One structured log line for every result that did not become the job's.
pub(crate) fn log_completion(
    job_id: &str,
    attempt_id: &str,
    provider: &str,
    completion: &Completion,
) {
    match completion {
        Completion::Won => {}
        Completion::Lost { winner } => console_log!(
            "{}",
            json!({"event": "race_lost", "job_id": job_id, "winner": winner,
                   "loser": attempt_id, "provider": provider})
        ),
        Completion::Discarded { state } => console_log!(
            "{}",
            json!({"event": "late_result_discarded", "job_id": job_id,
                   "attempt_id": attempt_id, "attempt_state": state, "provider": provider})
        ),
    }
}
