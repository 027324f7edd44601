//! The simulator's shell of the core's [`Host`]: configuration, the queue, providers and
//! timers, all in virtual time and all drawn from the run's seed.

use crate::exec::{Role, Sleep, Yield};
use crate::world::World;
use futures_util::future::LocalBoxFuture;
use onceclick_edge::sim::{CallOutcome, Dispatch, Host, ProviderCall};
use onceclick_protocol::AttemptError;
use serde_json::json;
use std::rc::Rc;

/// What a scripted provider does with one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Script {
    /// Answers a valid output after the delay.
    Answer,
    /// Fails at once, retryably (a 500 or 429): no work done.
    FailRetryable,
    /// Fails for good (a 400): no work done.
    FailForGood,
    /// Never answers: the call times out (`unknown`); no work done, as it happens.
    Hang,
    /// Does the work and answers after the call timed out: paid for, and the answer lost.
    Late,
    /// Answers with its status, then the body is cut off (`unknown`): paid for.
    CutOff,
    /// Streams its answer (after the delay, within the timeout), ending as this says;
    /// read through the protocol's reader and classified as the Worker's call does.
    Streamed(StreamEnd),
}

/// How a streamed answer ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamEnd {
    /// `finish_reason: stop`: an output.
    Stop,
    /// `finish_reason: length` after some text: failed, and paid for.
    Length,
    /// An error object after some text: failed, paid for, never retryable.
    ErrorAfterText,
    /// An error object before any text: failed retryably, no work done.
    ErrorBeforeText,
    /// Cut off after some text, before its finish reason: `unknown`, paid for.
    Cut,
    /// A refusal: failed, and paid for.
    Refusal,
}

impl Script {
    /// Whether the provider did (and bills) the work.
    pub(crate) fn paid(self) -> bool {
        match self {
            Script::Answer | Script::Late | Script::CutOff => true,
            Script::Streamed(end) => end != StreamEnd::ErrorBeforeText,
            Script::FailRetryable | Script::FailForGood | Script::Hang => false,
        }
    }
}

/// The body of a streamed answer whose content is `content`, ending as `end`.
fn stream_body(content: &str, end: StreamEnd) -> String {
    let chunk = |delta: serde_json::Value, finish: Option<&str>| {
        let chunk = json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {chunk}\n\n")
    };
    let chars: Vec<char> = content.chars().collect();
    let half = chars.len() / 2;
    let mut body = String::from(": processing\n\n");
    body.push_str(&chunk(json!({"role": "assistant", "content": ""}), None));
    let error = "data: {\"error\": {\"message\": \"overloaded\"}}\n\n";
    if end == StreamEnd::ErrorBeforeText {
        body.push_str(error);
        return body;
    }
    if end == StreamEnd::Refusal {
        body.push_str(&chunk(json!({"refusal": "no"}), Some("stop")));
        body.push_str("data: [DONE]\n\n");
        return body;
    }
    let sent = if end == StreamEnd::Stop {
        chars.len()
    } else {
        half.max(1)
    };
    for piece in chars[..sent.min(chars.len())].chunks(3) {
        body.push_str(&chunk(
            json!({"content": piece.iter().collect::<String>()}),
            None,
        ));
    }
    match end {
        StreamEnd::Stop => body.push_str(&chunk(json!({}), Some("stop"))),
        StreamEnd::Length => body.push_str(&chunk(json!({}), Some("length"))),
        StreamEnd::ErrorAfterText => body.push_str(error),
        _ => return body, // cut off
    }
    // The usage chunk without `choices`, as some gateways send it.
    body.push_str("data: {\"usage\": {\"prompt_tokens\": 9, \"completion_tokens\": 4}}\n\n");
    body.push_str("data: [DONE]\n\n");
    body
}

/// One provider call, as the world remembers it.
#[derive(Clone, Debug)]
pub(crate) struct CallRecord {
    pub(crate) script: Script,
    /// The provider answered an output within the timeout.
    pub(crate) output: bool,
    /// The dispatcher's task that made the call.
    pub(crate) task: u64,
    /// Its answer reached the dispatcher (the dispatcher's task lived that long).
    pub(crate) delivered: bool,
    /// The dispatcher's task was dropped by a crash before it finished.
    pub(crate) orphaned: bool,
    /// The dispatcher dropped the call before its answer (a stop): when, virtual ms.
    pub(crate) stopped_at: Option<u64>,
    /// The call failed for good on its own record: a streamed answer classified as a
    /// failure that is not retryable, whose attempt's error says what was paid for.
    pub(crate) failed_on_record: bool,
    /// When the call began, and when its first streamed text reached the dispatcher
    /// (virtual ms): a call that spoke within a kind's `hedge_after_ms` is never hedged.
    pub(crate) began: u64,
    pub(crate) first_text: Option<u64>,
}

/// Marks a call stopped if its future is dropped before the provider answers: what
/// the Worker's fetch does on a drop (it aborts, and the connection closes).
/// The longest wait between two reads of a streamed answer, in virtual ms.
const READ_GAP_MS: u64 = 40;

struct Stopped {
    world: Rc<World>,
    attempt_id: String,
    answered: bool,
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if !self.answered {
            self.world.stopped(&self.attempt_id);
        }
    }
}

/// The host of one task of one isolate.
pub(crate) struct SimHost {
    pub(crate) world: Rc<World>,
    pub(crate) isolate: u32,
}

impl Host for SimHost {
    fn var(&self, name: &str) -> Option<String> {
        self.world.vars.get(name).cloned()
    }

    fn secret(&self, name: &str) -> Option<String> {
        (name == "FALLBACK_API_KEY").then(|| "sim-key".to_owned())
    }

    fn enqueue(&self, message: Dispatch) -> LocalBoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            Yield::new().await;
            self.world.send(message)
        })
    }

    fn enqueue_after_response(&self, message: Dispatch) {
        let world = self.world.clone();
        self.world
            .exec
            .spawn(self.isolate, Role::AfterResponse, async move {
                Yield::new().await;
                let host = SimHost {
                    world: world.clone(),
                    isolate: 0,
                };
                onceclick_edge::sim::send(&host, message).await;
            });
    }

    fn call<'a>(&'a self, call: ProviderCall<'a>) -> LocalBoxFuture<'a, CallOutcome> {
        let world = self.world.clone();
        if call.attempt_id.starts_with("cert_") {
            return Box::pin(async move { CallOutcome::Output(world.output(0), None) });
        }
        let timeout = call.provider.timeout_ms;
        let (script, delay) = world.provider_call(call.attempt_id, &call.provider.name, timeout);
        let attempt_id = call.attempt_id.to_owned();
        Box::pin(async move {
            let answers_in = match script {
                Script::Hang | Script::Late => timeout,
                _ => delay.min(timeout),
            };
            let at = onceclick_edge::sim::now_ms() as u64 + answers_in;
            let mut stopped = Stopped {
                world: world.clone(),
                attempt_id: attempt_id.clone(),
                answered: false,
            };
            Sleep::until(world.exec.clone(), at).await;
            // A streamed answer is read over time (below): a stop may land between
            // its reads, and then the call is dropped before its answer was whole.
            if !matches!(script, Script::Streamed(_)) || delay > timeout {
                stopped.answered = true;
                world.delivered(&attempt_id, at);
            }
            let timed_out = |what: &str| {
                CallOutcome::Unknown(AttemptError::new(
                    "provider_timeout",
                    format!("no answer within {timeout} ms ({what})"),
                    true,
                ))
            };
            match script {
                Script::Answer if delay <= timeout => {
                    CallOutcome::Output(world.output(world.serial()), None)
                }
                Script::Answer => timed_out("slow"),
                Script::FailRetryable => CallOutcome::Failed(AttemptError::new(
                    "provider_error",
                    "the provider answered 500",
                    true,
                )),
                Script::FailForGood => CallOutcome::Failed(AttemptError::new(
                    "provider_rejected",
                    "the provider answered 400",
                    false,
                )),
                Script::Hang => timed_out("hang"),
                Script::Late => timed_out("late"),
                Script::CutOff => CallOutcome::Unknown(AttemptError::new(
                    "provider_cut_off",
                    json!("the answer broke off after its status").to_string(),
                    true,
                )),
                // Silent past the limit before its first chunk: as a slow answer.
                Script::Streamed(_) if delay > timeout => timed_out("slow stream"),
                Script::Streamed(end) => {
                    let expected = world.streamed_output(world.serial(), call.input);
                    let content = expected.to_string();
                    let body = stream_body(&content, end);
                    // Read in reads of any length, cut anywhere between characters.
                    let mut chat = onceclick_protocol::chat::ChatStream::default();
                    let mut rest = body.as_str();
                    while !rest.is_empty() && !chat.is_over() {
                        let n = 1 + world.below(rest.len() as u64) as usize;
                        let cut = (n..=rest.len())
                            .find(|&i| rest.is_char_boundary(i))
                            .unwrap_or(rest.len());
                        let fed = !chat.feed(&rest[..cut]).is_empty();
                        rest = &rest[cut..];
                        if fed {
                            world.text_came(&attempt_id);
                        }
                        if let (true, Some(news)) = (fed, call.news) {
                            news.read(chat.chars());
                        }
                        if let (true, Some((job_id, n))) = (fed, call.job) {
                            let live = world.live();
                            if live.hand(job_id, n, &attempt_id, chat.text(), &content) {
                                // As `openai::hand_on` does: the dispatcher looks now.
                                if let Some(news) = call.news {
                                    news.ended();
                                }
                            }
                        }
                        let next = onceclick_edge::sim::now_ms() as u64 + world.below(READ_GAP_MS);
                        Sleep::until(world.exec.clone(), next).await;
                    }
                    stopped.answered = true;
                    world.delivered(&attempt_id, onceclick_edge::sim::now_ms() as u64);
                    let outcome = onceclick_edge::sim::classify_stream(
                        call.provider,
                        call.kind,
                        call.input,
                        &chat,
                    );
                    world.check_streamed(&attempt_id, end, &expected, chat.chars(), &outcome);
                    outcome
                }
            }
        })
    }

    fn sleep(&self, ms: u64) -> LocalBoxFuture<'static, ()> {
        let at = onceclick_edge::sim::now_ms() as u64 + ms;
        Box::pin(Sleep::until(self.world.exec.clone(), at))
    }

    fn count_create(&self, _: &str, _: &str, _: &str, _: &str) {}

    fn count_call(&self, _: &str, _: &str, _: &str, _: f64) {}
}
