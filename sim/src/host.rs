//! The simulator's shell of the core's [`Host`]: configuration, the queue, providers and
//! timers, all in virtual time and all drawn from the run's seed.

use crate::exec::{Exec, Role, Sleep, Yield};
use crate::handing;
use crate::live::Live;
use crate::script::{Script, StreamEnd};
use futures_util::future::LocalBoxFuture;
use onceclick_core::host::{Host, ProviderCall};
use onceclick_core::message::Dispatch;
use onceclick_core::outcome::CallOutcome;
use onceclick_protocol::chat::ChatStream;
use onceclick_protocol::contract::Kind;
use onceclick_protocol::AttemptError;
use serde_json::{json, Value};
use std::rc::Rc;

/// The world, as its hosts reach it: the Worker's configuration, the queue, the
/// scripted providers with the record the world keeps of each call, the executor and
/// the live channel. `World` is the one platform (`world_platform.rs`); this trait keeps
/// the host below the world, which makes a host for every task it runs.
pub(crate) trait Platform {
    /// The core's configuration, read from the vars once.
    fn config(&self) -> Rc<onceclick_core::config::Config>;
    /// The executor every isolate's tasks run on.
    fn exec(&self) -> &Rc<Exec>;
    /// The queue takes a message.
    fn send(&self, dispatch: Dispatch) -> Result<(), String>;
    /// A provider call begins: its script, and its delay in virtual ms.
    fn provider_call(&self, attempt_id: &str, provider: &str, timeout: u64) -> (Script, u64);
    /// The call of `attempt_id` read streamed text.
    fn text_came(&self, attempt_id: &str);
    /// The call's answer reached the dispatcher, at `due`.
    fn delivered(&self, attempt_id: &str, due: u64);
    /// The dispatcher dropped the call before its answer.
    fn stopped(&self, attempt_id: &str);
    /// Checks a streamed answer's classification against how it ended.
    fn check_streamed(
        &self,
        attempt_id: &str,
        end: StreamEnd,
        expected: &Value,
        chars: u64,
        outcome: &CallOutcome,
    );
    /// The call of `attempt_id` came to `outcome` (a whole answer's).
    fn answered(&self, attempt_id: &str, outcome: &CallOutcome);
    /// A provider's output for `input` under `kind`, numbered `n`.
    fn output(&self, n: u64, kind: &Kind, input: &Value) -> Value;
    /// A streamed provider's output for `input` under `kind`, numbered `n`.
    fn streamed_output(&self, n: u64, kind: &Kind, input: &Value) -> Value;
    /// The next number of the world's serial.
    fn serial(&self) -> u64;
    /// A number below `n`, from the run's seed.
    fn below(&self, n: u64) -> u64;
    /// The live channel.
    fn live(&self) -> &Live;
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

/// The longest wait between two reads of a streamed answer, in virtual ms.
const READ_GAP_MS: u64 = 40;

/// Marks a call stopped if its future is dropped before the provider answers: what
/// the Worker's fetch does on a drop (it aborts, and the connection closes).
struct Stopped {
    world: Rc<dyn Platform>,
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
    pub(crate) world: Rc<dyn Platform>,
    pub(crate) isolate: u32,
    /// The notifier of the delivery's store (`Live::notifier`): its provider calls are
    /// checked against that store's notification of their claim.
    pub(crate) sender: Option<u64>,
}

impl Host for SimHost {
    fn config(&self) -> Rc<onceclick_core::config::Config> {
        self.world.config()
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
            .exec()
            .spawn(self.isolate, Role::AfterResponse, async move {
                Yield::new().await;
                let host = SimHost {
                    world: world.clone(),
                    isolate: 0,
                    sender: None,
                };
                onceclick_core::host::send(&host, message).await;
            });
    }

    fn call<'a>(&'a self, call: ProviderCall<'a>) -> LocalBoxFuture<'a, CallOutcome> {
        let world = self.world.clone();
        if call.attempt_id.starts_with("cert_") {
            let output = world.output(0, call.kind, call.input);
            return Box::pin(async move { CallOutcome::Output(output, None) });
        }
        let sender = self.sender;
        let timeout = call.provider.timeout_ms;
        let (script, delay) = world.provider_call(call.attempt_id, &call.provider.name, timeout);
        let attempt_id = call.attempt_id.to_owned();
        Box::pin(async move {
            // Begun when first polled, as the Worker's fetch is sent (`openai::call`).
            if let Some(sender) = sender {
                world.live().call_begins(sender, &attempt_id);
            }
            let answers_in = match script {
                Script::Hang | Script::Late => timeout,
                _ => delay.min(timeout),
            };
            let at = crate::platform::now_ms() as u64 + answers_in;
            let mut stopped = Stopped {
                world: world.clone(),
                attempt_id: attempt_id.clone(),
                answered: false,
            };
            Sleep::until(world.exec().clone(), at).await;
            // A streamed answer is read over time (below): a stop may land between
            // its reads, and then the call is dropped before its answer was whole.
            if !matches!(script, Script::Streamed(_)) || delay > timeout {
                stopped.answered = true;
                world.delivered(&attempt_id, at);
            }
            match script {
                Script::Streamed(end) if delay <= timeout => {
                    streamed_answer(self, &world, &call, end, &mut stopped).await
                }
                _ => {
                    let outcome = whole_answer(world.as_ref(), &call, script, delay, timeout);
                    world.answered(&attempt_id, &outcome);
                    outcome
                }
            }
        })
    }

    fn sleep(&self, ms: u64) -> LocalBoxFuture<'static, ()> {
        let at = crate::platform::now_ms() as u64 + ms;
        Box::pin(Sleep::until(self.world.exec().clone(), at))
    }

    fn count_create(&self, _: &str, _: &str, _: &str, _: &str) {}

    fn count_call(&self, _: &str, _: &str, _: &str, _: f64) {}
}

/// The answer of a call that is not streamed (or streamed too late: silent past the
/// limit before its first chunk), as its script says.
fn whole_answer(
    world: &dyn Platform,
    call: &ProviderCall<'_>,
    script: Script,
    delay: u64,
    timeout: u64,
) -> CallOutcome {
    let timed_out = |what: &str| {
        CallOutcome::Unknown(AttemptError::new(
            "provider_timeout",
            format!("no answer within {timeout} ms ({what})"),
            true,
        ))
    };
    // An answer is classified as the Worker classifies a whole answer's content.
    let offer = |output: Value| {
        onceclick_core::answer::offer(call.provider, call.kind, call.input, Ok((output, None)))
    };
    match script {
        Script::Answer if delay <= timeout => {
            offer(world.output(world.serial(), call.kind, call.input))
        }
        Script::BreaksContract if delay <= timeout => {
            offer(broken(world.output(world.serial(), call.kind, call.input)))
        }
        Script::Answer | Script::BreaksContract => timed_out("slow"),
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
        Script::Streamed(_) => timed_out("slow stream"),
    }
}

/// `output` made to break any kind's contract: a JSON answer with a top-level key no
/// schema names, a text answer blank.
fn broken(output: Value) -> Value {
    match output {
        Value::Object(mut members) => {
            members.insert("sim_extra".to_owned(), json!(true));
            Value::Object(members)
        }
        _ => json!("  "),
    }
}

/// A streamed answer ending as `end`: its body read in reads of any length, cut
/// anywhere between characters, while the text is handed to the job's hub
/// (`handing.rs`), as `openai::read_stream` does; the answer waits for both. Then it is
/// classified as the Worker's call classifies it, and that is checked.
async fn streamed_answer(
    host: &dyn Host,
    world: &Rc<dyn Platform>,
    call: &ProviderCall<'_>,
    end: StreamEnd,
    stopped: &mut Stopped,
) -> CallOutcome {
    let attempt_id = call.attempt_id;
    let expected = world.streamed_output(world.serial(), call.kind, call.input);
    // A text answer's content is its text; a JSON answer's, its JSON.
    let content = match &expected {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let body = stream_body(&content, end);
    let chat = std::cell::RefCell::new(ChatStream::default());
    let (wake, woken) = futures_channel::mpsc::unbounded::<()>();
    let read = async {
        let mut rest = body.as_str();
        while !rest.is_empty() && !chat.borrow().is_over() {
            let n = 1 + world.below(rest.len() as u64) as usize;
            let cut = (n..=rest.len())
                .find(|&i| rest.is_char_boundary(i))
                .unwrap_or(rest.len());
            let fed = !chat.borrow_mut().feed(&rest[..cut]).is_empty();
            rest = &rest[cut..];
            if fed {
                world.text_came(attempt_id);
                let _ = wake.unbounded_send(());
                if let Some(news) = call.news {
                    news.read(chat.borrow().chars());
                }
            }
            let next = crate::platform::now_ms() as u64 + world.below(READ_GAP_MS);
            Sleep::until(world.exec().clone(), next).await;
        }
        drop(wake);
    };
    let hand = handing::hand_on(host, world.live(), call, &content, &chat, woken);
    futures_util::future::join(read, hand).await;
    let chat = chat.into_inner();
    stopped.answered = true;
    world.delivered(attempt_id, crate::platform::now_ms() as u64);
    let outcome =
        onceclick_core::answer::classify_stream(call.provider, call.kind, call.input, &chat);
    world.check_streamed(attempt_id, end, &expected, chat.chars(), &outcome);
    outcome
}
