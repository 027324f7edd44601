//! The scripted providers' calls, as the world draws and records them, and what is
//! checked of each: a call only after its attempt's claim and only once; a stop only
//! for a reason, and one that stops; a hedge only of a silent call; a streamed answer
//! classified as its end says.

use super::{column_text, World};
use crate::script::{CallRecord, Script, StreamEnd};
use onceclick_core::outcome::CallOutcome;
use onceclick_protocol::contract::Kind;
use onceclick_protocol::{AttemptState, JobStatus};
use serde_json::{json, Value};

/// What the providers' scripts are drawn from, by weight.
const SCRIPTS: [(u32, Script); 13] = [
    (47, Script::Answer),
    (3, Script::BreaksContract),
    (12, Script::FailRetryable),
    (5, Script::FailForGood),
    (8, Script::Hang),
    (10, Script::Late),
    (5, Script::CutOff),
    (5, Script::Streamed(StreamEnd::Stop)),
    (1, Script::Streamed(StreamEnd::Length)),
    (1, Script::Streamed(StreamEnd::ErrorAfterText)),
    (1, Script::Streamed(StreamEnd::ErrorBeforeText)),
    (1, Script::Streamed(StreamEnd::Cut)),
    (1, Script::Streamed(StreamEnd::Refusal)),
];

impl World {
    /// A provider's output for `input` under `kind`: valid for the kind, and different
    /// every call where the kind leaves room (a summary always does).
    pub(crate) fn output(&self, n: u64, kind: &Kind, input: &Value) -> Value {
        match kind.name().starts_with("summarize") {
            true => json!({"summary": format!("s{n}"), "sentiment": "neutral"}),
            false => stamped(kind, input, &format!("s{n} ")),
        }
    }

    /// A streamed provider's output: as [`World::output`], with text beyond ASCII, so
    /// that the reads' cuts fall inside characters' encodings. One summary in three is
    /// long (380 characters of 2 to 4 bytes) where the input's text allows it (a
    /// summary is shorter, and at most 400): hubs keep it in many chunks.
    pub(crate) fn streamed_output(&self, n: u64, kind: &Kind, input: &Value) -> Value {
        if !kind.name().starts_with("summarize") {
            return stamped(kind, input, &format!("s{n} é会😀 "));
        }
        let room = input
            .get("text")
            .and_then(Value::as_str)
            .map_or(0, |t| t.chars().count());
        let summary = if n % 3 == 0 && room > 400 {
            let long: String = "é会😀😀".chars().cycle().take(380).collect();
            format!("s{n} {long}")
        } else {
            format!("s{n} é会😀")
        };
        json!({"summary": summary, "sentiment": "neutral"})
    }

    /// A provider call begins: checked (claimed first, once per attempt), scripted.
    pub(crate) fn provider_call(
        &self,
        attempt_id: &str,
        provider: &str,
        timeout: u64,
    ) -> (Script, u64) {
        self.figures.borrow_mut().provider_calls += 1;
        // Claimed first: the claim (and only the claim) sets the token. The attempt may
        // have been cancelled since, between the claim and the call.
        match self.attempt_claim(attempt_id) {
            Some(Some(_)) => {}
            other => self.violate(format!(
                "provider call for {attempt_id}, which was never claimed ({other:?}): no call before its claim"
            )),
        }
        let mut rng = self.rng.borrow_mut();
        let script = rng.weighted(&SCRIPTS);
        let delay = 20 + rng.below(1_100);
        drop(rng);
        let record = CallRecord {
            script,
            output: matches!(script, Script::Answer | Script::Streamed(StreamEnd::Stop))
                && delay <= timeout,
            task: crate::exec::current(),
            delivered: false,
            orphaned: false,
            stopped_at: None,
            failed_on_record: false,
            began: crate::platform::now_ms() as u64,
            first_text: None,
        };
        let again = self
            .calls
            .borrow_mut()
            .insert(attempt_id.to_owned(), record)
            .is_some();
        if again {
            self.violate(format!("a second provider call for attempt {attempt_id}"));
        }
        self.note(|| format!("call {provider} for {attempt_id}: {script:?} in {delay} ms"));
        (script, delay)
    }

    /// The attempt's claim token (`None` inside: never claimed), if it exists.
    fn attempt_claim(&self, attempt_id: &str) -> Option<Option<String>> {
        let place = self.place_of(attempt_id)?;
        let rows = self.db.query(
            &place,
            "SELECT claim_token FROM attempts WHERE id = ?1",
            &[json!(attempt_id)],
        );
        rows.first().map(|r| column_text(r.get("claim_token")))
    }

    /// A streamed answer's classification: what its end makes of it (the whole output
    /// and its usage, `unknown`, or a failure with its code), and never a retryable
    /// failure once text came (a failover would pay for the work twice). A failure for
    /// good is marked as the call's own record of what was paid for.
    pub(crate) fn check_streamed(
        &self,
        attempt_id: &str,
        end: StreamEnd,
        expected: &Value,
        chars: u64,
        outcome: &CallOutcome,
    ) {
        self.answered(attempt_id, outcome);
        let retried_paid = matches!(outcome, CallOutcome::Failed(e) if e.retryable && chars > 0);
        if !stream_fits(end, expected, outcome) || retried_paid {
            self.violate(format!(
                "streamed answer of {attempt_id} ending {end:?} after {chars} characters was classified {outcome:?}"
            ));
        }
    }

    /// The call of `attempt_id` came to `outcome`: a failure for good is on its
    /// attempt's record (its error), so its paid work is not lost.
    pub(crate) fn answered(&self, attempt_id: &str, outcome: &CallOutcome) {
        if let CallOutcome::Failed(e) = outcome {
            if !e.retryable {
                if let Some(call) = self.calls.borrow_mut().get_mut(attempt_id) {
                    call.failed_on_record = true;
                }
            }
        }
    }

    /// The call of `attempt_id` read streamed text: the first time, when.
    pub(crate) fn text_came(&self, attempt_id: &str) {
        if let Some(call) = self.calls.borrow_mut().get_mut(attempt_id) {
            call.first_text
                .get_or_insert(crate::platform::now_ms() as u64);
        }
    }

    /// A hedge is only for a call silent since it began: none whose text came within
    /// `after_ms` of its start (text in that very millisecond may go either way).
    pub(super) fn check_hedge(&self, line: &Value) {
        let (Some(silent), Some(after)) = (
            line.get("silent_attempt").and_then(Value::as_str),
            line.get("after_ms").and_then(Value::as_u64),
        ) else {
            return self.violate(format!("a hedge_started line without its primary: {line}"));
        };
        let spoke = self.calls.borrow().get(silent).and_then(|call| {
            call.first_text
                .filter(|at| *at < call.began + after)
                .map(|at| at - call.began)
        });
        if let Some(ms) = spoke {
            self.violate(format!(
                "a hedge of {silent}, whose streamed text began {ms} ms into its call, within the {after} ms of silence a hedge waits for"
            ));
        }
    }

    /// The call's answer reached its dispatcher, due at `due`.
    pub(crate) fn delivered(&self, attempt_id: &str, due: u64) {
        if let Some(call) = self.calls.borrow_mut().get_mut(attempt_id) {
            call.delivered = true;
        }
        self.call_ended(attempt_id, false, due);
    }

    /// The dispatcher dropped the call before its answer: a stop, unless its isolate is
    /// crashing (the crash marks the call orphaned).
    pub(crate) fn stopped(&self, attempt_id: &str) {
        if !self.crashing.get() {
            self.call_ended(attempt_id, true, u64::MAX);
        }
    }

    /// A call has ended at `now`: answered (it was due at `due`), or stopped. A stop that
    /// stops: once a watch read of the dispatcher has come back with its attempt
    /// `cancelled`, the call must not answer (it may only tie: an answer due by the time
    /// the read came back). How long after the cancel that read comes is the scheduler's
    /// doing here (a task runs when the world lets it), so it is not bounded in virtual
    /// time; the Worker's figure is `cargo xtask bench`'s.
    fn call_ended(&self, attempt_id: &str, stopped: bool, due: u64) {
        let now = self.now();
        let orphaned = {
            let mut calls = self.calls.borrow_mut();
            let Some(call) = calls.get_mut(attempt_id) else {
                return;
            };
            if stopped {
                call.stopped_at = Some(now);
            }
            call.orphaned
        };
        if orphaned {
            return;
        }
        if stopped {
            self.figures.borrow_mut().stops += 1;
            self.note(|| format!("call of {attempt_id} stopped"));
            self.check_stop_reason(attempt_id);
        }
        let seen = self.db.watch_saw_cancel.borrow().get(attempt_id).copied();
        if let Some(seen) = seen {
            if !stopped && seen < due {
                self.violate(format!(
                    "the call of attempt {attempt_id} answered (due at {due}) though its dispatcher's watch had read it cancelled at {seen}: a stop that did not stop"
                ));
            }
        }
    }

    /// A call is stopped only for a reason: its attempt is `cancelled`, or its job has
    /// succeeded with another attempt.
    fn check_stop_reason(&self, attempt_id: &str) {
        let Some(place) = self.place_of(attempt_id) else {
            return;
        };
        let rows = self.db.query(
            &place,
            "SELECT a.state, j.status, j.completed_by FROM attempts AS a
               JOIN jobs AS j ON j.id = a.job_id WHERE a.id = ?1",
            &[json!(attempt_id)],
        );
        // A purge may have taken the job since its call read the reason: the job's last
        // seen record then says what its rows said.
        let (state, status, completed_by) = match rows.first() {
            Some(row) => (
                column_text(row.get("state")).unwrap_or_default(),
                column_text(row.get("status")),
                column_text(row.get("completed_by")),
            ),
            None => {
                let purged = self.purged_seen.borrow();
                let last = purged
                    .iter()
                    .map(|seen| seen.job.view())
                    .find_map(|job| job.attempts.get(attempt_id).map(|state| (state, job)));
                let Some((state, job)) = last else {
                    self.violate(format!(
                        "the call of attempt {attempt_id} was stopped, and its attempt is gone"
                    ));
                    return;
                };
                (
                    state.as_str().to_owned(),
                    Some(job.status.as_str().to_owned()),
                    job.completed_by.clone(),
                )
            }
        };
        let won_by_another = status.as_deref() == Some(JobStatus::Succeeded.as_str())
            && completed_by.as_deref() != Some(attempt_id);
        if state != AttemptState::Cancelled.as_str() && !won_by_another {
            self.violate(format!(
                "the call of attempt {attempt_id} was stopped for no reason: it is {state}, its job {status:?} by {completed_by:?}"
            ));
        }
    }
}

/// Whether a streamed answer that ended as `end` was classified as that end says: the
/// whole output (`expected`) with the usage the stream stated; `unknown` when cut off;
/// a failure with its code, retryable only before any text.
fn stream_fits(end: StreamEnd, expected: &Value, outcome: &CallOutcome) -> bool {
    let usage = Some(onceclick_protocol::chat::Tokens {
        prompt: 9,
        completion: 4,
    });
    let code = |e: &onceclick_protocol::AttemptError, code: &str| e.code == code;
    match (end, outcome) {
        (StreamEnd::Stop, CallOutcome::Output(output, tokens)) => {
            output == expected && *tokens == usage
        }
        (StreamEnd::Cut, CallOutcome::Unknown(e)) => code(e, "provider_answer_cut_off"),
        (StreamEnd::ErrorBeforeText, CallOutcome::Failed(e)) => {
            e.retryable && code(e, "provider_stream_error")
        }
        (StreamEnd::ErrorAfterText, CallOutcome::Failed(e)) => {
            !e.retryable && code(e, "provider_stream_error")
        }
        (StreamEnd::Length, CallOutcome::Failed(e)) => {
            !e.retryable && code(e, "provider_output_incomplete")
        }
        (StreamEnd::Refusal, CallOutcome::Failed(e)) => !e.retryable && code(e, "provider_refused"),
        _ => false,
    }
}

/// An output of `kind` for `input` (the kind's example: a golden output, or one made
/// from its schema and rules) with `tag` before its text, or before the first of its
/// top-level strings that can take it and keep the contract; the example as it is when
/// none can.
pub(crate) fn stamped(kind: &Kind, input: &Value, tag: &str) -> Value {
    let example = kind.example_output(input);
    let candidates: Vec<Value> = match &example {
        Value::String(text) => vec![Value::String(format!("{tag}{text}"))],
        Value::Object(members) => members
            .iter()
            .filter_map(|(name, value)| {
                let mut stamped = example.clone();
                stamped[name.as_str()] = Value::String(format!("{tag}{}", value.as_str()?));
                Some(stamped)
            })
            .collect(),
        _ => Vec::new(),
    };
    candidates
        .into_iter()
        .find(|c| kind.check_output(input, c).is_ok())
        .unwrap_or(example)
}
