//! The adapter for OpenAI-compatible providers: `POST {base_url}/chat/completions`.
//!
//! One call per attempt, carrying `Idempotency-Key: <attempt id>`, bounded by the
//! provider's `timeout_ms`. The answer is classified so that the dispatcher never has to
//! look at HTTP: an output to offer, a failure (retryable or not), or an *unknown*: a
//! timeout, a 504, or an answer cut off after its status line, after which the
//! provider may have done the work (or may still be doing it).

use crate::live::SocketLink;
use crate::outcome::CallOutcome;
use futures_util::future::{select, Either, LocalBoxFuture};
use futures_util::StreamExt;
use onceclick_core::answer::{classify, classify_stream, request_body, timed_out};
use onceclick_core::hand_on::{self, Connected, Handing};
use onceclick_protocol::chat::ChatStream;
use onceclick_protocol::contract::Kind;
use onceclick_protocol::contract::ProviderConfig;
use onceclick_protocol::AttemptError;
use serde_json::Value;
use std::time::Duration;
use worker::{AbortController, Delay, Fetch, Headers, Method, Request, RequestInit, Response};

/// Aborts its fetch when dropped: a call dropped before its answer (the dispatcher
/// stopped it, or its isolate went away) closes the provider's connection rather than
/// leave it working for nobody. Aborting a fetch that has ended does nothing.
struct AbortOnDrop(Option<AbortController>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(controller) = self.0.take() {
            controller.abort();
        }
    }
}

/// Calls the provider once for attempt `attempt_id` and classifies the answer; a
/// streamed answer's text goes to `sink` as it comes, and `news` hears how much came
/// and whether the hub said the attempt ended. Dropped before it ends, it aborts the
/// fetch ([`AbortOnDrop`]).
pub(crate) async fn call(
    provider: &ProviderConfig,
    headers: &[(String, String)],
    kind: &Kind,
    input: &Value,
    attempt_id: &str,
    sink: Option<SocketLink<'_>>,
    news: Option<&crate::host::CallProgress>,
) -> CallOutcome {
    let controller = AbortController::default();
    let signal = controller.signal();
    let _abort = AbortOnDrop(Some(controller));
    // A streamed call's total limit runs from here, as the backstop below does.
    let deadline = crate::clock::now_ms() + provider.total_ms() as f64;
    // Set once a streamed body is read to its end: what is left of the exchange then is
    // the last hand-off of its text to our own hub, which the backstop does not bound.
    let read_over = std::cell::Cell::new(false);
    let exchange = async {
        let request =
            build_request(provider, headers, kind, input, attempt_id).map_err(Definite)?;
        let fetch = Fetch::Request(request);
        let sent = fetch.send_with_signal(&signal);
        futures_util::pin_mut!(sent);
        // No answer's head within `timeout_ms`: for a provider that streams, the total
        // limit is longer, and this is its silence limit before the first byte.
        let mut response = match select(sent, delay(provider.timeout_ms)).await {
            Either::Left((Ok(response), _)) => response,
            Either::Left((Err(e), _)) => return Err(unreached(provider, e)),
            Either::Right(((), _)) => return Err(Ambiguous(timed_out(provider))),
        };
        let status = response.status_code();
        // A provider that answers a stream request with a whole completion (it ignores
        // `stream`) is read as one.
        if provider.stream && is_event_stream(&response) && (200..=299).contains(&status) {
            let to = Reader {
                sink: sink.as_ref(),
                news,
            };
            return read_stream(
                provider,
                &mut response,
                deadline,
                to,
                attempt_id,
                &read_over,
            )
            .await
            .map(|chat| Answer::Streamed(Box::new(chat)));
        }
        let retry_after = response.headers().get("Retry-After").ok().flatten();
        let text = response
            .text()
            .await
            .map_err(|e| cut_off(provider, status, e))?;
        Ok::<_, Broke>(Answer::Whole(status, retry_after, text))
    };
    futures_util::pin_mut!(exchange);
    let answer = match select(exchange, delay(backstop_ms(provider))).await {
        Either::Left((answer, _)) => answer,
        // The provider is done; a hand-off still in flight ends within its own bound.
        Either::Right(((), exchange)) if read_over.get() => exchange.await,
        // The total limit: `_abort` aborts the fetch as this returns.
        Either::Right(((), _)) => return CallOutcome::Unknown(unfinished(provider)),
    };
    outcome(provider, kind, input, answer)
}

/// Whether an answer is a stream of events (`text/event-stream`).
fn is_event_stream(response: &Response) -> bool {
    response
        .headers()
        .get("Content-Type")
        .ok()
        .flatten()
        .is_some_and(|t| {
            t.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

/// The bound of a whole call. A streamed call keeps its total limit itself (so that an
/// answer already finished is kept); this bound is then a backstop.
fn backstop_ms(provider: &ProviderConfig) -> u64 {
    let slack = if provider.stream {
        FINISHED_GRACE_MS + 1_000
    } else {
        0
    };
    provider.total_ms() + slack
}

/// What the call comes to: its answer classified, or how it broke.
fn outcome(
    provider: &ProviderConfig,
    kind: &Kind,
    input: &Value,
    answer: Result<Answer, Broke>,
) -> CallOutcome {
    match answer {
        Ok(Answer::Whole(status, retry_after, text)) => {
            classify(provider, kind, input, status, retry_after, &text)
        }
        Ok(Answer::Streamed(chat)) => classify_stream(provider, kind, input, &chat),
        Err(Definite(error)) => CallOutcome::Failed(error),
        Err(Ambiguous(error)) => CallOutcome::Unknown(error),
    }
}

fn delay(ms: u64) -> Delay {
    Delay::from(Duration::from_millis(ms))
}

/// An answer read to its end.
enum Answer {
    /// Its status, `Retry-After` and body.
    Whole(u16, Option<String>, String),
    /// A streamed 2xx, read until its `[DONE]`, its end, or a chunk that ends it.
    Streamed(Box<ChatStream>),
}

/// Who hears of a streamed answer as it is read: the hub its text goes to, and the
/// dispatcher's news of the call.
#[derive(Clone, Copy)]
struct Reader<'a> {
    sink: Option<&'a SocketLink<'a>>,
    news: Option<&'a crate::host::CallProgress>,
}

/// Reads a streamed answer's body chunk by chunk, each within `timeout_ms` of the last,
/// and hands its text to `to.sink` meanwhile ([`hand_on`]); returns once both are done,
/// setting `read_over` when the body is read. A body that fails or ends early is not an
/// error here: [`ChatStream::end`] tells a cut-off from a finished answer. A stall is:
/// the provider may still be working.
async fn read_stream(
    provider: &ProviderConfig,
    response: &mut Response,
    deadline: f64,
    to: Reader<'_>,
    attempt_id: &str,
    read_over: &std::cell::Cell<bool>,
) -> Result<ChatStream, Broke> {
    let chat = std::cell::RefCell::new(ChatStream::default());
    let (wake, woken) = futures_channel::mpsc::unbounded::<()>();
    let read = async {
        let read = read_body(provider, response, deadline, &chat, wake, to.news).await;
        read_over.set(true);
        read
    };
    let (read, ()) = futures_util::future::join(read, hand_on(to, attempt_id, &chat, woken)).await;
    read.map(|()| chat.into_inner())
}

/// Hands the text of `chat` on to `sink` as it comes: the core's loop
/// (`hand_on.rs`), each piece a message on the call's connection to the job's hub
/// (`live/line.rs`). Ends when the body is read and the hub has all of it, when the hub
/// says the attempt has ended (which `to.news` hears, so that the call is stopped at
/// once), or after too many failed hand-offs in a row (said in the log).
async fn hand_on(
    to: Reader<'_>,
    attempt_id: &str,
    chat: &std::cell::RefCell<ChatStream>,
    mut woken: futures_channel::mpsc::UnboundedReceiver<()>,
) {
    let Some(link) = to.sink else { return };
    let hub = Connected::new(link, to.news);
    let who = Handing {
        job_id: link.job_id,
        attempt_id,
        news: to.news,
    };
    let sleep = |ms| -> LocalBoxFuture<'static, ()> { Box::pin(delay(ms)) };
    hand_on::hand_on(&sleep, &hub, who, chat, &mut woken).await;
}

/// The reading half of [`read_stream`]: feeds the body to `chat`, and says on `wake`
/// (and to `news`) whenever text came.
async fn read_body(
    provider: &ProviderConfig,
    response: &mut Response,
    deadline: f64,
    chat: &std::cell::RefCell<ChatStream>,
    wake: futures_channel::mpsc::UnboundedSender<()>,
    news: Option<&crate::host::CallProgress>,
) -> Result<(), Broke> {
    let Ok(mut body) = response.stream() else {
        return Ok(());
    };
    let mut pending = Vec::new();
    // Silence is no chunk for `timeout_ms`: comments keep a connection alive, and say
    // nothing of the answer. Once the finish reason has come, only the usage chunk and
    // `[DONE]` may follow, and they get a short grace.
    let quiet_ms = |chat: &ChatStream| match chat.finished() {
        false => provider.timeout_ms as f64,
        true => provider.timeout_ms.min(FINISHED_GRACE_MS) as f64,
    };
    let mut quiet_until = crate::clock::now_ms() + quiet_ms(&chat.borrow());
    while !chat.borrow().is_over() {
        // The limits are read off the clock here, not left to the timer to win its race:
        // in workerd the clock moves with I/O, so a timer that comes due with the next
        // comment would lose to it every time, and a stream of comments never stall.
        let now = crate::clock::now_ms();
        if now >= quiet_until.min(deadline) {
            // A finished answer stands, however its connection ends.
            let chat = chat.borrow();
            if chat.finished() {
                break;
            }
            return Err(Ambiguous(stream_cut_short(
                provider,
                &chat,
                now >= deadline,
            )));
        }
        let next = body.next();
        futures_util::pin_mut!(next);
        let left = (quiet_until.min(deadline) - now).ceil().max(1.0) as u64;
        match select(next, delay(left)).await {
            Either::Left((Some(Ok(bytes)), _)) => {
                pending.extend_from_slice(&bytes);
                let mut chat = chat.borrow_mut();
                let before = chat.chunks();
                if !chat.feed(&decoded(&mut pending)).is_empty() {
                    let _ = wake.unbounded_send(());
                    if let Some(news) = news {
                        news.read(chat.chars());
                    }
                }
                if chat.chunks() > before {
                    quiet_until = crate::clock::now_ms() + quiet_ms(&chat);
                }
            }
            Either::Left((Some(Err(_)) | None, _)) => break,
            // A limit came due: the top of the loop says which.
            Either::Right(((), _)) => {}
        }
    }
    Ok(())
}

/// How long a streamed answer whose finish reason came may take for its usage chunk
/// and `[DONE]`, at most.
const FINISHED_GRACE_MS: u64 = 1_000;

/// The text of `pending`'s bytes, less an unfinished character at the end, which waits
/// there for the next read. Bytes that are no UTF-8 read as U+FFFD, as a browser's
/// decoder reads them.
fn decoded(pending: &mut Vec<u8>) -> String {
    // The last character's first byte, among the last four: if it says more bytes than
    // are there, the character is unfinished.
    let unfinished = (1..=pending.len().min(4))
        .find_map(|back| {
            let byte = pending[pending.len() - back];
            let needs = match byte {
                0x00..=0x7f => return Some(0),
                0x80..=0xbf => return None, // a continuation: look further back
                0xc0..=0xdf => 2,
                0xe0..=0xef => 3,
                _ => 4,
            };
            Some(if back < needs { back } else { 0 })
        })
        .unwrap_or(0);
    let rest = pending.split_off(pending.len() - unfinished);
    let text = String::from_utf8_lossy(pending).into_owned();
    *pending = rest;
    text
}

/// How a call broke before its answer was read.
enum Broke {
    /// Before the provider took the request: it did nothing.
    Definite(AttemptError),
    /// After: it may have done the work.
    Ambiguous(AttemptError),
}

use Broke::{Ambiguous, Definite};

/// The provider could not be reached: it did nothing.
fn unreached(provider: &ProviderConfig, e: worker::Error) -> Broke {
    Definite(AttemptError::new(
        "provider_unreachable",
        format!("could not reach {}: {e}", provider.name),
        true,
    ))
}

/// Past the status line the provider has taken the request: a body that breaks off may
/// carry work that was done.
fn cut_off(provider: &ProviderConfig, status: u16, e: worker::Error) -> Broke {
    Ambiguous(AttemptError::new(
        "provider_answer_cut_off",
        format!(
            "the answer from {} broke off after its status {status}: {e}; it may have done the work",
            provider.name
        ),
        false,
    ))
}

/// No whole answer within the total limit: the provider may still be working.
fn unfinished(provider: &ProviderConfig) -> AttemptError {
    AttemptError::new(
        "provider_timeout",
        format!(
            "{} did not finish its answer within {} ms; it may still be working",
            provider.name,
            provider.total_ms()
        ),
        false,
    )
}

/// A streamed answer that did not finish: past the total limit (`past_deadline`), or
/// silent for `timeout_ms`. The provider may still be working.
fn stream_cut_short(
    provider: &ProviderConfig,
    chat: &ChatStream,
    past_deadline: bool,
) -> AttemptError {
    match past_deadline {
        true => AttemptError::new(
            "provider_timeout",
            format!(
                "{} did not finish its streamed answer within {} ms ({} characters came); it may still be working",
                provider.name,
                provider.total_ms(),
                chat.chars()
            ),
            false,
        ),
        false => AttemptError::new(
            "provider_stalled",
            format!(
                "{} said nothing for {} ms after {} characters of its streamed answer; it may still be working",
                provider.name,
                provider.timeout_ms,
                chat.chars()
            ),
            false,
        ),
    }
}

fn build_request(
    provider: &ProviderConfig,
    extra: &[(String, String)],
    kind: &Kind,
    input: &Value,
    attempt_id: &str,
) -> Result<Request, AttemptError> {
    let setup = |e: worker::Error| {
        AttemptError::new(
            "provider_misconfigured",
            format!("cannot build a request for {}: {e}", provider.name),
            false,
        )
    };
    let headers = Headers::new();
    headers
        .set("Content-Type", "application/json")
        .map_err(setup)?;
    headers.set("Idempotency-Key", attempt_id).map_err(setup)?;
    for (name, value) in extra {
        headers.set(name, value).map_err(setup)?;
    }
    let body = request_body(provider, kind, input).to_string();
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_headers(headers)
        .with_body(Some(body.into()));
    let url = format!(
        "{}/chat/completions",
        provider.base_url.trim_end_matches('/')
    );
    Request::new_with_init(&url, &init).map_err(setup)
}

#[cfg(test)]
mod tests {
    use super::decoded;
    use onceclick_core::answer::output_of;
    use onceclick_protocol::chat::Tokens;
    use onceclick_protocol::contract::Answer;

    #[test]
    fn bytes_cut_anywhere_decode_to_the_same_text() {
        let text = "Café, 会议 and 😀: done";
        let bytes = text.as_bytes();
        for cut in 0..=bytes.len() {
            for second in cut..=bytes.len() {
                let mut pending = Vec::new();
                let mut out = String::new();
                for part in [&bytes[..cut], &bytes[cut..second], &bytes[second..]] {
                    pending.extend_from_slice(part);
                    out.push_str(&decoded(&mut pending));
                }
                assert_eq!(out, text, "cut at {cut} and {second}");
                assert!(pending.is_empty());
            }
        }
        // Bytes that are no UTF-8 read as U+FFFD; an unfinished character after them
        // still waits for its rest.
        let mut pending = vec![b'a', 0xff, b'b', 0xe4, 0xbc];
        assert_eq!(decoded(&mut pending), "a\u{fffd}b");
        pending.push(0x9a);
        assert_eq!(decoded(&mut pending), "会");
    }

    fn envelope(usage: &str) -> String {
        format!(r#"{{"choices": [{{"message": {{"content": "{{\"summary\": \"s\"}}"}}}}]{usage}}}"#)
    }

    #[test]
    fn an_answer_says_what_it_billed_or_nothing() {
        let (output, tokens) = output_of(
            Answer::Json,
            &envelope(
                r#", "usage": {"prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40}"#,
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(output["summary"], "s");
        assert_eq!(
            tokens,
            Some(Tokens {
                prompt: 31,
                completion: 9
            })
        );
        for usage in [
            "",
            r#", "usage": {"prompt_tokens": 31}"#,
            r#", "usage": {"prompt_tokens": -1, "completion_tokens": 9}"#,
            r#", "usage": {"prompt_tokens": "31", "completion_tokens": 9}"#,
            r#", "usage": null"#,
            // Past 2^32 - 1: no count a provider bills (the figures' sums stay whole).
            r#", "usage": {"prompt_tokens": 4294967296, "completion_tokens": 9}"#,
        ] {
            let (_, tokens) =
                output_of(Answer::Json, &envelope(usage)).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(tokens, None, "{usage}");
        }
    }
}
