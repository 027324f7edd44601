//! The queue consumer (the Worker's shell of the dispatcher, `dispatch.rs`): reads each
//! message of a batch, gives it a store with its test-only faults, delivers it, and
//! acks or retries it. Every error is handled here: an `Err` out of a queue handler
//! would crash the isolate.

use crate::dispatch::{deliver, Dispatch};
use crate::fault;
use crate::worker_host::WorkerHost;
use onceclick_core::together::together;
use serde_json::json;
use worker::{Env, MessageBatch, MessageExt, QueueRetryOptionsBuilder};

/// How long a result that D1 would not take waits in the queue before it is offered
/// again (the queue gives each message `max_retries` deliveries).
const RESULT_RETRY_DELAY_S: u32 = 30;

/// The queue consumer. Messages of a batch run concurrently, each with its own store
/// (and its own test-only faults).
pub(crate) async fn consume(batch: MessageBatch<Dispatch>, env: &Env) {
    let (made, watched) = (&std::cell::Cell::new(0), &std::cell::Cell::new(0));
    let runs = batch.raw_iter().map(|message| async move {
        let dispatch: Result<Dispatch, _> = serde_wasm_bindgen::from_value(message.body());
        let dispatch = match dispatch {
            Ok(d) => d,
            Err(e) => {
                // A message we cannot read will not read better later.
                crate::log::error(json!({"event": "dispatch_unreadable", "cause": e.to_string()}));
                message.ack();
                return;
            }
        };
        // Faults ride in messages only from a Worker that allows them; checked again
        // here, so that a message can never arm one in a Worker that does not.
        let faults = dispatch
            .fault
            .as_deref()
            .filter(|_| crate::fault_header::allowed(env))
            .and_then(|spec| fault::parse(spec).ok())
            .unwrap_or_default();
        let store = match crate::places::from_env(env) {
            Ok(store) => store
                .with_faults(faults, &dispatch.attempt_id)
                .with_live(crate::live::notifier(env)),
            Err(e) => {
                crate::log::error(
                    json!({"event": "dispatch_no_store", "cause": e.cause_or_detail()}),
                );
                message.retry();
                return;
            }
        };
        let host = WorkerHost::new(env, None);
        let outcome = deliver(&host, &store, &dispatch).await;
        made.set(made.get() + host.made.get() + store.subrequests());
        watched.set(watched.get() + store.watched().0);
        match outcome {
            Ok(()) => message.ack(),
            Err(e) => {
                crate::log::error(
                    json!({"event": "dispatch_retry", "attempt_id": dispatch.attempt_id,
                           "code": e.code.as_str(), "cause": e.cause_or_detail()}),
                );
                if dispatch.result.is_some() {
                    // D1 refused this result through a whole delivery already: give it
                    // time to come back rather than spend the queue's retries at once.
                    let later = QueueRetryOptionsBuilder::new()
                        .with_delay_seconds(RESULT_RETRY_DELAY_S)
                        .build();
                    message.retry_with_options(&later);
                } else {
                    message.retry();
                }
            }
        }
    });
    let messages = together(runs).await.len();
    // Bounded whatever the calls' durations (SCALING.md, "Subrequests"): the watch's
    // reads, which grow with them up to `MAX_WATCH_READS` a delivery, said apart.
    crate::log::info(json!({"event": "batch_consumed", "messages": messages,
                            "subrequests": made.get(), "watch_reads": watched.get()}));
}
