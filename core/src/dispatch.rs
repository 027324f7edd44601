//! The dispatcher: the queue consumer that runs attempts against providers.
//!
//! A dispatch message names one attempt. The consumer claims it (`starting → running`,
//! one conditional UPDATE with a fresh claim token), calls the provider, and offers the
//! outcome to the store. Every error is handled here; each message is acked or retried
//! explicitly, because an `Err` out of a queue handler would crash the isolate.
//!
//! A D1 write that fails (before it commits, or after, with its reply lost) is sent
//! again a few times right here, since every store call is safe to repeat. What a
//! provider delivered is never dropped: a result that D1 will not take is handed back to
//! the queue in a message of its own and recorded from there.

use crate::certification;
use crate::clock;
use crate::error::{ApiResult, AppError};

pub use crate::host::send;
use crate::host::{CallProgress, Host, ProviderCall};
use crate::kinds;
pub use crate::message::{Dispatch, PendingResult};
use crate::outcome::CallOutcome;
use crate::providers::{self, ProviderConfig};
use crate::store::{Claim, ClaimedAttempt, Completion, NextAttempt, Offer, Stop, Store};
use futures_util::future::{join, select, Either};
use onceclick_protocol::contract::Kind;
use onceclick_protocol::{AttemptError, AttemptState, EventType};
use serde_json::{json, Value};
use std::future::Future;

/// Tries of one D1 write inside one delivery, the first included.
const WRITE_TRIES: u32 = 8;

/// The watch's reads in one delivery at most, its calls' together (five minutes of one
/// call at the default `CANCEL_POLL_MS`). Each is a subrequest of the consumer's invocation: the bound keeps
/// a delivery's subrequests constant in the provider's duration, so that a batch of
/// long calls cannot run its invocation out of them before its completions and result
/// sends (SCALING.md). Past it a stop reaches the call only by the hub's word (a
/// streamed call's), or it is found when the call ends (its answer is then dropped).
pub const MAX_WATCH_READS: u32 = 300;

/// The subrequests of one delivery beside its watch's reads, at most: the store's round
/// trips (each of the path's few calls at most [`WRITE_TRIES`] times) and the documents
/// they hand to hubs, the provider's call (two for a hedge), the connections to the
/// job's hub (`hand_on::MAX_OPENS` a call) and the queue sends. None grows with the
/// answer's length or the provider's duration; SCALING.md adds them up against the
/// platform's limit per invocation. `tests/live_batch.rs` checks a batch against it.
pub const MAX_SUBREQUESTS_BESIDE_WATCH: u32 = 128;

/// A batch (`max_batch_size = 10`, wrangler.toml) keeps half the platform's 10,000
/// subrequests per invocation spare.
const _: () = assert!(10 * (MAX_WATCH_READS + MAX_SUBREQUESTS_BESIDE_WATCH) <= 5_000);

/// Enqueues the dispatch of `attempt_id` once the response is on its way
/// (`wait_until`), so that a create does not wait for the queue: a send that never
/// happens (the isolate dies first) is a lost dispatch, which the reconciler resends.
pub fn enqueue_after_response(host: &dyn Host, attempt_id: &str, fault: Option<&str>) {
    host.enqueue_after_response(Dispatch::run(attempt_id, fault));
}

/// Enqueues the dispatch of `attempt_id`. A lost enqueue is not an error for the
/// caller: the attempt stays `starting` and the reconciler sends it again.
pub async fn enqueue(host: &dyn Host, attempt_id: &str, fault: Option<&str>) {
    send(host, Dispatch::run(attempt_id, fault)).await;
}

/// Runs `write` until D1 takes it: again after a `service_unavailable` (the write failed
/// or its reply was lost; every store call is safe to repeat), with a short backoff, at
/// most [`WRITE_TRIES`] times. Other errors are returned at once.
pub async fn persist<T, F, Fut>(host: &dyn Host, mut write: F) -> ApiResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ApiResult<T>>,
{
    let mut tries = 1;
    loop {
        match write().await {
            Err(e) if e.is_unavailable() && tries < WRITE_TRIES => {
                let ms = (25u64 << tries).min(1_000);
                host.sleep(ms).await;
                tries += 1;
            }
            out => return out,
        }
    }
}

/// One delivery of a dispatch message: record the result it carries, or claim and run
/// its attempt. `Err` asks for the message again (the queue's retry).
///
/// Boxed here, so that its future's code is made once, in this crate: a shell that
/// awaited the `async fn` itself would make a second copy of the whole call path.
pub fn deliver<'a>(
    host: &'a dyn Host,
    store: &'a Store,
    dispatch: &'a Dispatch,
) -> futures_util::future::LocalBoxFuture<'a, ApiResult<()>> {
    Box::pin(async move {
        match &dispatch.result {
            Some(pending) => record_pending(host, store, &dispatch.attempt_id, pending).await,
            None => run(host, store, &dispatch.attempt_id).await,
        }
    })
}

/// Claims and runs one attempt. A delivery that finds the attempt already claimed (or
/// cancelled, or its job finished) logs `dispatch_ignored` and makes no provider call.
async fn run(host: &dyn Host, store: &Store, attempt_id: &str) -> ApiResult<()> {
    // One token for every try of this claim: a try whose reply was lost is still ours.
    let token = clock::new_id("claim");
    match persist(host, || store.claim(attempt_id, &token)).await? {
        Claim::Claimed(attempt) => {
            let claim = store.round_trips();
            let claimed = store.cost();
            let job_id = attempt.job_id.clone();
            let ran = run_claimed(host, store, attempt).await;
            let total = store.cost();
            let (watches, watched) = store.watched();
            // What a dispatch costs in the store (the bench and `tests/budgets.rs` read
            // it): round trips, and rows as the place bills them; the watch reads over
            // the call apart (one per `CANCEL_POLL_MS` the provider took).
            crate::log::info(
                json!({"event": "dispatched", "job_id": job_id, "attempt_id": attempt_id,
                       "ok": ran.is_ok(),
                       "round_trips": {"claim": claim,
                                       "after_claim": store.round_trips() - claim},
                       "rows_written": {"claim": claimed.written,
                                        "after_claim": total.written - claimed.written},
                       "rows_read": {"claim": claimed.read,
                                     "after_claim": total.read - claimed.read},
                       "watch": {"round_trips": watches, "rows_read": watched.read},
                       "hub_notified": store.notified()}),
            );
            ran
        }
        Claim::Ignored { job_id, state } => {
            store.tell_claim().await;
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

/// What a claimed attempt needs before its provider call.
struct Prepared<'a> {
    kind: &'static Kind,
    configured: std::rc::Rc<Vec<ProviderConfig>>,
    /// The attempt's provider, as configured now: its place in `configured` (not a
    /// copy: a `ProviderConfig` clone costs the Worker its maps' clone code).
    provider_at: usize,
    /// The headers its call carries (its secrets read).
    headers: Vec<(String, String)>,
    input: Value,
    attempt: &'a ClaimedAttempt,
}

impl Prepared<'_> {
    /// The attempt's provider, as configured now.
    fn provider(&self) -> &ProviderConfig {
        &self.configured[self.provider_at]
    }
}

/// Why a claimed attempt could not be called: what its record says, and (for the log)
/// what really went wrong.
struct NotCalled {
    error: AttemptError,
    cause: Option<String>,
}

/// Everything between the claim and the provider call that can fail. Its failure ends
/// the attempt `failed` (no provider was called, so nothing is in doubt).
fn prepare<'a>(
    host: &dyn Host,
    store: &Store,
    attempt: &'a ClaimedAttempt,
) -> Result<Prepared<'a>, NotCalled> {
    let before_call = |e: AppError| NotCalled {
        error: AttemptError::new(
            "dispatch_failed",
            format!(
                "the dispatcher failed before calling the provider: {}",
                e.detail
            ),
            true,
        ),
        cause: e.cause,
    };
    store
        .fault_at(crate::fault::Point::DispatchPrepare)
        .map_err(before_call)?;
    let kind = kinds::declared(host, &attempt.kind).map_err(before_call)?;
    let configured = providers::configured(host).map_err(before_call)?;
    let input = serde_json::from_str(&attempt.input)
        .map_err(AppError::internal)
        .map_err(before_call)?;
    let Some(provider_at) = configured.iter().position(|p| p.name == attempt.provider) else {
        return Err(NotCalled {
            error: AttemptError::new(
                "provider_misconfigured",
                format!("provider {} is not configured", attempt.provider),
                false,
            ),
            cause: None,
        });
    };
    let headers = providers::headers(&configured[provider_at], host)
        .map_err(|error| NotCalled { error, cause: None })?;
    Ok(Prepared {
        kind,
        configured,
        provider_at,
        headers,
        input,
        attempt,
    })
}

/// Runs a claimed attempt. A kind that declares `hedge_after_ms` gives a provider
/// silent that long (no answer, and no text of a streamed answer, since its call began)
/// one hedge attempt on the next provider, run concurrently: whichever finishes first
/// wins. A call that has sent text by then is not hedged (a second call would pay for
/// an answer already coming). The hedge itself is never hedged.
async fn run_claimed(host: &dyn Host, store: &Store, attempt: ClaimedAttempt) -> ApiResult<()> {
    let Some(prepared) = prepare_or_fail(host, store, &attempt).await? else {
        return Ok(());
    };
    let news = CallProgress::default();
    let own = call_and_record(host, store, &prepared, &news);
    let Some(ms) = prepared.kind.decl().hedge_after_ms else {
        return own.await;
    };
    futures_util::pin_mut!(own);
    let spoke = || {
        news.first_text_at().is_some() && !crate::mutant::on(crate::mutant::Mutant::HedgeAfterText)
    };
    match select(own, host.sleep(ms)).await {
        Either::Left((done, _)) => done,
        Either::Right(((), own)) if spoke() => own.await,
        // Whatever happens to the hedge, the primary's call in flight goes on and its
        // answer is recorded.
        Either::Right(((), own)) => match start_hedge(host, store, &prepared, ms).await {
            Ok(Some(hedge)) => {
                let (a, b) = join(own, run_hedge(host, store, hedge)).await;
                a.and(b)
            }
            Ok(None) => own.await,
            Err(e) => {
                crate::log::error(json!({"event": "hedge_failed", "job_id": attempt.job_id,
                           "attempt_id": attempt.id, "cause": e.cause_or_detail()}));
                // Best effort: the log may fail for the same reason.
                let reason = format!("the hedge could not start: {}", e.detail);
                let _ = log_skipped(store, &attempt, "hedge", &reason).await;
                own.await
            }
        },
    }
}

/// Runs a claimed hedge attempt: its call and its outcome, with no hedge of its own.
async fn run_hedge(host: &dyn Host, store: &Store, hedge: ClaimedAttempt) -> ApiResult<()> {
    match prepare_or_fail(host, store, &hedge).await? {
        Some(prepared) => call_and_record(host, store, &prepared, &CallProgress::default()).await,
        None => Ok(()),
    }
}

/// [`prepare`]s a claimed attempt; if that fails, records the attempt `failed` (no
/// provider was called) and returns `None`.
async fn prepare_or_fail<'a>(
    host: &dyn Host,
    store: &Store,
    attempt: &'a ClaimedAttempt,
) -> ApiResult<Option<Prepared<'a>>> {
    match prepare(host, store, attempt) {
        Ok(prepared) => Ok(Some(prepared)),
        Err(NotCalled { error, cause }) => {
            crate::log::error(json!({"event": "dispatch_failed", "job_id": attempt.job_id,
                       "attempt_id": attempt.id, "error": error, "cause": cause}));
            record_move(
                host,
                store,
                attempt,
                &[AttemptState::Running],
                AttemptState::Failed,
                &error,
            )
            .await?;
            Ok(None)
        }
    }
}

/// Calls the attempt's provider and records the outcome; a retryable failure then
/// fails over, if the kind allows. A call whose attempt is cancelled meanwhile, or whose
/// job another attempt wins, is stopped ([`unless_stopped`]). `news` hears the call as
/// it runs. The claim's document goes to the job's hub as the call's watch begins
/// ([`Store::tell_claim`]), beside the call, not before it: a request to the hub is not
/// on the way to the first text.
async fn call_and_record(
    host: &dyn Host,
    store: &Store,
    p: &Prepared<'_>,
    news: &CallProgress,
) -> ApiResult<()> {
    if crate::mutant::on(crate::mutant::Mutant::ClaimNoticeFirst) {
        store.tell_claim().await;
    }
    let started = clock::now_ms();
    let call = host.call(ProviderCall {
        provider: p.provider(),
        headers: &p.headers,
        kind: p.kind,
        input: &p.input,
        attempt_id: &p.attempt.id,
        job: Some((&p.attempt.job_id, p.attempt.n)),
        news: Some(news),
        hand_off_fault: hand_off_fault(store),
    });
    let watching = Watching { news, started };
    let outcome = unless_stopped(host, store, p, call, watching).await?;
    // What a streamed call cost on the way (the bench reads it): the pieces of text it
    // sent its job's hub, the connections they went on (the hub's requests), the text,
    // the pieces the hub answered with no stream watching and its pokes (`pacing.rs`),
    // and the time to its first text (null if none came).
    if p.provider().stream {
        let first_text_ms = news
            .first_text_at()
            .map(|at| (at - started).max(0.0) as u64);
        let (alone, pokes) = news.alone_and_pokes();
        crate::log::info(json!({"event": "call_streamed", "job_id": p.attempt.job_id,
                                "attempt_id": p.attempt.id, "chars": news.chars(),
                                "hand_offs": news.hand_offs(), "hub_opens": news.opens(),
                                "alone": alone, "pokes": pokes,
                                "first_text_ms": first_text_ms}));
    }
    let Some(outcome) = outcome else {
        return Ok(());
    };
    let event = match &outcome {
        CallOutcome::Output(..) => "call_answered",
        CallOutcome::Failed(_) => "call_failed",
        CallOutcome::Unknown(_) => "call_unknown",
    };
    host.count_call(
        event,
        p.kind.name(),
        &p.provider().name,
        clock::now_ms() - started,
    );
    // The provider's bill for the answer, as it states it: usually the larger cost of a
    // job, and the user's own (`cargo xtask bench` reads it).
    if let CallOutcome::Output(_, Some(tokens)) = &outcome {
        crate::log::info(json!({"event": "call_tokens", "job_id": p.attempt.job_id,
                                "attempt_id": p.attempt.id, "provider": p.provider().name,
                                "prompt_tokens": tokens.prompt,
                                "completion_tokens": tokens.completion}));
    }
    match outcome {
        CallOutcome::Failed(error) if error.retryable => fail(host, store, p, &error).await,
        outcome => record(host, store, p.attempt, outcome).await.map(drop),
    }
}

/// Test-only (`fault.rs`): what the job's hub does to the call's connection, as the
/// shells name it: `cut` it, answer `late`, or `reset` its memory; or `off`, no hub.
fn hand_off_fault(store: &Store) -> Option<&'static str> {
    use crate::fault::Point;
    if store.fault_when(Point::NoHandOff).is_some() {
        return Some("off");
    }
    match store.fault_when(Point::HandOff) {
        Some("before") => Some("cut"),
        Some(_) => Some("late"),
        None => store.fault_when(Point::HubReset).map(|_| "reset"),
    }
}

/// What the dispatcher watches a call with: the call's news (what it read, and the
/// hub's word that its attempt ended), and when the call began.
struct Watching<'a> {
    news: &'a CallProgress,
    started: f64,
}

/// The call's outcome; or, if its attempt is cancelled or its job won by another attempt
/// before the provider answers, `None`: the call is dropped, and dropping it aborts its
/// fetch, which closes the provider's connection (`openai::call`). The dispatcher reads
/// the attempt every `CANCEL_POLL_MS` while it waits (one read by primary key; a failed
/// read is tried again at the next tick), so a stop reaches the call within about one
/// interval; a streamed call whose text the job's hub refuses (its document says the
/// attempt ended) has it read at once. A loser moves to `superseded` (its `race_lost`
/// names it); a cancelled attempt is `cancelled` already. The stop's line says the
/// streamed text that was paid for and dropped with the call.
async fn unless_stopped(
    host: &dyn Host,
    store: &Store,
    p: &Prepared<'_>,
    call: futures_util::future::LocalBoxFuture<'_, CallOutcome>,
    watching: Watching<'_>,
) -> ApiResult<Option<CallOutcome>> {
    let config = host.config();
    let (every, most) = (config.cancel_poll_ms, config.max_watch_reads);
    let attempt = p.attempt;
    let Watching { news, started } = watching;
    let watch = async {
        // The claim's document, beside the call (polled first, below). A hub slow to
        // answer delays the first read by as much (before issue 49 it delayed the call
        // and the watch both).
        store.tell_claim().await;
        let mut said = false;
        // The hub's word, until it comes (once); then the ticks alone. Past
        // `MAX_WATCH_READS` in this delivery (a hedge's watch shares them), the hub's
        // word alone, and one read after it.
        let mut heard = false;
        loop {
            let tick = match store.watched().0 >= most {
                true => Box::pin(futures_util::future::pending()),
                false => host.sleep(every),
            };
            let woken = if heard {
                tick.await;
                false
            } else {
                heard = matches!(select(tick, news.heard()).await, Either::Right(_));
                heard
            };
            // A tick that the cap overtook meanwhile (the other call's watch read) reads
            // nothing: past it, only the hub's word reads, once a call.
            if !woken && store.watched().0 >= most {
                continue;
            }
            match store.watch(&attempt.id).await {
                Ok(Some(seen)) => {
                    if let Some(stop) = seen.stop(&attempt.id) {
                        return (stop, woken);
                    }
                }
                Ok(None) => {}
                // Looked at again at the next tick; said once per call, so that a watch
                // that cannot read is seen rather than a stop that never comes.
                Err(e) if !said => {
                    said = true;
                    crate::log::error(json!({"event": "watch_failed", "job_id": attempt.job_id,
                                             "attempt_id": attempt.id,
                                             "cause": e.cause_or_detail()}));
                }
                Err(_) => {}
            }
        }
    };
    futures_util::pin_mut!(watch);
    let (stop, woken) = match select(call, watch).await {
        Either::Left((outcome, _)) => return Ok(Some(outcome)),
        Either::Right((stop, call)) => {
            drop(call);
            stop
        }
    };
    let ms = clock::now_ms() - started;
    host.count_call("call_stopped", p.kind.name(), &p.provider().name, ms);
    crate::log::info(json!({"event": "call_stopped", "job_id": attempt.job_id,
                            "attempt_id": attempt.id, "provider": p.provider().name,
                            "reason": match stop {
                                Stop::Cancelled => "cancelled",
                                Stop::LostRace => "lost_race",
                            },
                            "after_ms": ms,
                            "woken_by": if woken { "hub" } else { "tick" },
                            "streamed_chars": news.chars()}));
    if stop == Stop::LostRace {
        let error = AttemptError::new(
            "stopped_race_lost",
            "the job succeeded with another attempt; this call was stopped",
            false,
        );
        // From `unknown` too: the reconciler may have found the call lost meanwhile.
        record_move(
            host,
            store,
            attempt,
            &[AttemptState::Running, AttemptState::Unknown],
            AttemptState::Superseded,
            &error,
        )
        .await?;
    }
    Ok(None)
}

/// The next provider after the attempt's own in the kind's failover order that is
/// configured, is not the attempt's own, and is the job's first provider or certified
/// for the kind's current contract version and its current configuration; `None` when
/// there is none (see [`no_next_provider`] for the reason logged).
async fn next_certified(store: &Store, p: &Prepared<'_>) -> ApiResult<Option<String>> {
    let (attempt, kind) = (p.attempt, p.kind);
    let certified =
        certification::certified_for(store, &attempt.job_id, kind, &p.configured).await?;
    let after = attempt.provider.as_str();
    let next = kind.next_provider(Some(after), |name| {
        name != after
            && providers::find(&p.configured, name).is_some()
            && (name == attempt.job_provider || certified.contains(name))
    });
    Ok(next.map(str::to_owned))
}

/// Why [`next_certified`] found no provider, for the `failover_skipped` event.
fn no_next_provider(p: &Prepared<'_>) -> String {
    let (after, kind) = (p.attempt.provider.as_str(), p.kind);
    let others: Vec<&str> = kind
        .decl()
        .providers
        .iter()
        .map(String::as_str)
        .filter(|name| *name != after)
        .collect();
    format!(
        "no configured provider after {after} is certified for {}@{} (candidates: {})",
        kind.name(),
        kind.contract_version(),
        others.join(", ")
    )
}

/// Logs (event and structured line) why a hedge or failover did not start.
async fn log_skipped(
    store: &Store,
    attempt: &ClaimedAttempt,
    what: &str,
    reason: &str,
) -> ApiResult<()> {
    let details = json!({"for": what, "reason": reason});
    crate::log::info(
        json!({"event": "failover_skipped", "job_id": attempt.job_id,
               "attempt_id": attempt.id, "details": details}),
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
    host: &dyn Host,
    store: &Store,
    running: &Prepared<'_>,
    silent_ms: u64,
) -> ApiResult<Option<ClaimedAttempt>> {
    let attempt = running.attempt;
    let Some(next) = next_certified(store, running).await? else {
        log_skipped(store, attempt, "hedge", &no_next_provider(running)).await?;
        return Ok(None);
    };
    let hedge_id = store.new_attempt_id(&attempt.job_id);
    let digest = providers::digest(&running.configured, &next, running.kind.name());
    let inserted = store
        .insert_hedge(
            &NextAttempt {
                new_id: &hedge_id,
                job_id: &attempt.job_id,
                provider: &next,
                contract_version: running.kind.contract_version(),
                provider_digest: &digest,
                request: None,
            },
            &attempt.id,
        )
        .await?;
    if !inserted {
        // The attempt finished, the job ended, or an attempt is unknown: no hedge.
        return Ok(None);
    }
    crate::log::info(
        json!({"event": "hedge_started", "job_id": attempt.job_id, "attempt_id": hedge_id,
               "provider": next, "after_ms": silent_ms, "silent_attempt": attempt.id}),
    );
    let token = clock::new_id("claim");
    match persist(host, || store.claim(&hedge_id, &token)).await? {
        Claim::Claimed(hedge) => Ok(Some(hedge)),
        _ => {
            store.tell_claim().await;
            Ok(None)
        }
    }
}

/// A retryable failure: the move to `failed` and, when the kind has `auto_failover`
/// and a next certified provider exists, the failover's insert in the same batch
/// (`Store::fail_and_fail_over`), so the job never shows `failed` with nothing live
/// between the two; up to the policy's `max_attempts`.
async fn fail(
    host: &dyn Host,
    store: &Store,
    failed: &Prepared<'_>,
    error: &AttemptError,
) -> ApiResult<()> {
    let attempt = failed.attempt;
    let from = &[AttemptState::Running, AttemptState::Unknown];
    let policy = failed.kind.decl().auto_failover.as_ref();
    let next = match policy {
        Some(_) => next_certified(store, failed).await?,
        None => None,
    };
    let (Some(policy), Some(next)) = (policy, next) else {
        if !record_move(host, store, attempt, from, AttemptState::Failed, error).await? {
            log_discarded(attempt, AttemptState::Failed, error);
        } else if policy.is_some() {
            log_skipped(store, attempt, "auto_failover", &no_next_provider(failed)).await?;
        }
        return Ok(());
    };
    let new_id = store.new_attempt_id(&attempt.job_id);
    let digest = providers::digest(&failed.configured, &next, failed.kind.name());
    let failover = NextAttempt {
        new_id: &new_id,
        job_id: &attempt.job_id,
        provider: &next,
        contract_version: failed.kind.contract_version(),
        provider_digest: &digest,
        request: None,
    };
    let mut failed_before = false;
    let (moved, exists, first) = persist(host, || {
        let first = !failed_before;
        failed_before = true;
        let failover = &failover;
        async move {
            store
                .fail_and_fail_over(&attempt.id, from, error, failover, policy.max_attempts)
                .await
                .map(|(moved, exists)| (moved, exists, first))
        }
    })
    .await?;
    let recorded =
        moved || exists || (!first && is_now(host, store, attempt, AttemptState::Failed).await?);
    if !recorded {
        log_discarded(attempt, AttemptState::Failed, error);
    } else if exists {
        enqueue(host, &new_id, None).await;
    } else {
        let reason = format!(
            "the job has ended, has an attempt in flight or unknown, or has {} attempts already",
            policy.max_attempts
        );
        log_skipped(store, attempt, "auto_failover", &reason).await?;
    }
    Ok(())
}

/// A definite outcome that came for an attempt that had already left the states it
/// could record from (cancelled, say).
fn log_discarded(attempt: &ClaimedAttempt, to: AttemptState, error: &AttemptError) {
    crate::log::info(
        json!({"event": "late_result_discarded", "job_id": attempt.job_id,
               "attempt_id": attempt.id, "outcome": to, "error": error}),
    );
}

/// Whether the attempt is in `to` now (after a try whose reply was lost).
async fn is_now(
    host: &dyn Host,
    store: &Store,
    attempt: &ClaimedAttempt,
    to: AttemptState,
) -> ApiResult<bool> {
    let now = persist(host, || store.attempt_job(&attempt.id)).await?;
    Ok(now.is_some_and(|(_, state)| state == to))
}

/// Writes an attempt's outcome: a result goes through the compare-and-swap; a failure
/// is one conditional move out of `running` (or out of `unknown`: a definite answer
/// resolves it); a timeout or an ambiguous answer is `running → unknown`.
/// Returns whether a failure or timeout was recorded (false for a result, and for an
/// attempt that had already left those states).
async fn record(
    host: &dyn Host,
    store: &Store,
    attempt: &ClaimedAttempt,
    outcome: CallOutcome,
) -> ApiResult<bool> {
    let (from, to, error): (&[AttemptState], _, _) = match outcome {
        CallOutcome::Output(output, tokens) => {
            let tokens =
                tokens.map(|t| json!({"prompt": t.prompt, "completion": t.completion}).to_string());
            record_result(
                host,
                store,
                &attempt.id,
                &attempt.job_id,
                &attempt.provider,
                &output,
                tokens,
            )
            .await?;
            return Ok(false);
        }
        CallOutcome::Failed(error) => (
            &[AttemptState::Running, AttemptState::Unknown],
            AttemptState::Failed,
            error,
        ),
        CallOutcome::Unknown(error) => (&[AttemptState::Running], AttemptState::Unknown, error),
    };
    let recorded = record_move(host, store, attempt, from, to, &error).await?;
    if !recorded {
        log_discarded(attempt, to, &error);
    }
    Ok(recorded)
}

/// One attempt move, sent again while D1 fails. A try that finds the attempt already
/// in `to` after an earlier try failed counts as recorded: that try committed and only
/// its reply was lost.
async fn record_move(
    host: &dyn Host,
    store: &Store,
    attempt: &ClaimedAttempt,
    from: &[AttemptState],
    to: AttemptState,
    error: &AttemptError,
) -> ApiResult<bool> {
    let mut failed_before = false;
    let moved = persist(host, || {
        let first = !failed_before;
        failed_before = true;
        async move {
            store
                .move_attempt(&attempt.id, from, to, Some(error))
                .await
                .map(|moved| (moved, first))
        }
    })
    .await?;
    match moved {
        (true, _) => Ok(true),
        (false, true) => Ok(false),
        (false, false) => is_now(host, store, attempt, to).await,
    }
}

/// Offers a provider's result until D1 takes it. If D1 keeps refusing, the result is
/// handed to the queue in a message of its own rather than dropped.
async fn record_result(
    host: &dyn Host,
    store: &Store,
    attempt_id: &str,
    job_id: &str,
    provider: &str,
    output: &Value,
    tokens: Option<String>,
) -> ApiResult<()> {
    match persist(host, || {
        store.complete(
            job_id,
            attempt_id,
            Offer::Provider,
            output,
            tokens.as_deref(),
        )
    })
    .await
    {
        Ok(completion) => {
            log_completion(job_id, attempt_id, provider, &completion);
            Ok(())
        }
        Err(e) if e.is_unavailable() => {
            let pending = PendingResult {
                job_id: job_id.to_owned(),
                provider: provider.to_owned(),
                output: output.to_string(),
                tokens,
            };
            crate::log::error(
                json!({"event": "result_queued", "job_id": job_id, "attempt_id": attempt_id,
                       "cause": e.cause_or_detail()}),
            );
            let message = Dispatch {
                attempt_id: attempt_id.to_owned(),
                fault: None,
                result: Some(pending),
            };
            if send(host, message).await {
                Ok(())
            } else {
                Err(e)
            }
        }
        Err(e) => Err(e),
    }
}

/// A result that came back through the queue: offered again; the message is retried
/// (by the queue) until D1 takes it.
async fn record_pending(
    host: &dyn Host,
    store: &Store,
    attempt_id: &str,
    pending: &PendingResult,
) -> ApiResult<()> {
    let output: Value = serde_json::from_str(&pending.output).map_err(AppError::internal)?;
    let completion = persist(host, || {
        store.complete(
            &pending.job_id,
            attempt_id,
            Offer::Provider,
            &output,
            pending.tokens.as_deref(),
        )
    })
    .await?;
    log_completion(&pending.job_id, attempt_id, &pending.provider, &completion);
    Ok(())
}

/// One structured log line for every result that did not become the job's.
pub fn log_completion(job_id: &str, attempt_id: &str, provider: &str, completion: &Completion) {
    match completion {
        Completion::Won => {}
        Completion::Lost { winner } => crate::log::info(
            json!({"event": "race_lost", "job_id": job_id, "winner": winner,
                   "loser": attempt_id, "provider": provider}),
        ),
        Completion::Discarded { state } => {
            crate::log::info(json!({"event": "late_result_discarded", "job_id": job_id,
                   "attempt_id": attempt_id, "attempt_state": state, "provider": provider}))
        }
        Completion::Gone => crate::log::info(json!({"event": "late_result_discarded",
               "job_id": job_id, "attempt_id": attempt_id, "attempt_state": "purged",
               "provider": provider})),
    }
}
