//! A scriptable OpenAI-compatible provider: a real HTTP server on 127.0.0.1.
//!
//! `POST /{provider}/v1/chat/completions` answers like a chat-completions API. By
//! default it succeeds at once with an answer that keeps the kind's contract. It knows
//! the kinds in the directory `ONCECLICK_KINDS` names (else the repository's
//! `edge/kinds`), and finds which one the request's messages were rendered from, and
//! from which input (`Kind::input_of`; the kind its `response_format` names first):
//! - `summarize`, `summarize_hedged`, and a call that fits no kind: a summary, the
//!   first half of the user message's text after its first blank line, sentiment
//!   `neutral`;
//! - any other kind, a user's new one too: the golden output of a golden input, else an
//!   output made from the kind's output schema and rules (`Kind::example_output`): its
//!   JSON for a JSON kind, the text itself for a text kind.
//!
//! Tests script it per provider and per request: a script applies to the calls of one
//! provider whose prompt contains a marker (so tests that run side by side never share a
//! script), and its steps are used in order, the last one repeating.
//!
//! Control API (for tests and for the demo page):
//! - `POST /_script` `{"provider", "contains", "steps": [Step…]}`
//! - `POST /_release` `{"gate"}` — lets every call held at that gate answer
//! - `POST /_expect` `{"provider", "headers"}` — the headers that provider requires
//!   (`expect.rs`): a call without one is a `401`
//! - `GET /_calls?contains=M` — every call whose prompt contains M
//! - `GET /_calls/wait?contains=M&count=N&timeout_ms=T` — waits for N such calls
//!
//! A call that asks for `"stream": true` gets the same answer streamed
//! (`text/event-stream`, chunk by chunk, as OpenAI-compatible providers send it), which
//! its step can stall, cut off or end early (`stream_fault`).
//!
//! Every call is recorded with its `Idempotency-Key`, so tests can count provider calls,
//! and with the kind it was found to be, so they can see what reached the provider.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

mod content;
mod expect;
#[cfg(test)]
mod tests;

/// No scripted delay or hold lasts longer than this: the mock stops by itself.
const MAX_HOLD: Duration = Duration::from_secs(60);

/// What the mock does with one call.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Wait this long before answering (a hang: longer than the provider's timeout).
    #[serde(default)]
    pub delay_ms: u64,
    /// Hold the answer until `POST /_release {"gate": …}` (or 60 s).
    #[serde(default)]
    pub gate: Option<String>,
    /// Answer 200 at once, then hold the body open this long (a space every 100 ms,
    /// which JSON allows before its value) before the answer: a call whose connection
    /// the mock watches. If the client goes away first, the call records when
    /// (`closed_after_ms`).
    #[serde(default)]
    pub hold_open_ms: u64,
    /// Answer with this status instead of 200 (500, 429, 400…).
    #[serde(default)]
    pub status: Option<u16>,
    /// With a status: the `Retry-After` header, in seconds.
    #[serde(default)]
    pub retry_after: Option<u64>,
    /// What a 200 carries: `ok` (default), `malformed` (content that is not JSON),
    /// `extra_key` (a top-level key the schema does not name), `wrong_shape`
    /// (sentiment not in the enum), `long_summary` (breaks "shorter than the text"),
    /// `bad_envelope` (not a chat completion at all), `cut_off` (status 200 and the
    /// first bytes of a body, then the connection breaks: the work may have been done).
    ///
    /// For a kind other than the two summarize kinds: a JSON kind's `malformed` is its
    /// answer cut in half, `extra_key` adds `"confidence": 0.9`, and `wrong_shape` puts a
    /// value of another type (an array; an object for an array) in its first member. A
    /// text kind's `malformed`, `extra_key` and `wrong_shape` are a blank content
    /// (`"   "`), which the contract refuses. `long_summary` is `ok` for both.
    #[serde(default)]
    pub reply: Option<String>,
    /// With `ok`, for the summarize kinds: the summary to send (default: the first
    /// half of the text).
    #[serde(default)]
    pub summary: Option<String>,
    /// A streamed answer (the call asked `"stream": true`): the code points of content
    /// per chunk (default 8).
    #[serde(default)]
    pub chunk_chars: Option<usize>,
    /// A streamed answer: the pause before each chunk of content.
    #[serde(default)]
    pub chunk_ms: u64,
    /// A streamed answer that goes wrong after `fault_after` chunks of content (default:
    /// half of them): `stall` (comments every 100 ms and no chunk, until the client
    /// goes or 60 s pass), `cut` (the connection breaks), `length` or `content_filter`
    /// (that finish reason), `error` (an error object), `refusal` (a refusal, no content).
    /// `no_done` sends the whole answer and its finish reason, then holds the connection
    /// open with comments instead of sending `[DONE]`. `ignore` answers a stream request
    /// with a whole completion, as a provider that does not stream does.
    #[serde(default)]
    pub stream_fault: Option<String>,
    /// With `stream_fault`: after how many chunks of content.
    #[serde(default)]
    pub fault_after: Option<usize>,
    /// With `ok`: the content padded with JSON whitespace after its object to this many
    /// code points, which the kind's contract reads as the same answer (a longer
    /// streamed answer of the same kind, for the bench's 2 KB figures). JSON kinds only.
    #[serde(default)]
    pub pad_to: Option<usize>,
}

#[derive(Debug, Clone, Deserialize)]
struct Script {
    provider: String,
    contains: String,
    steps: Vec<Step>,
}

/// One recorded call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Call {
    pub provider: String,
    pub idempotency_key: Option<String>,
    pub authorization: Option<String>,
    pub model: Option<String>,
    pub temperature: Option<f64>,
    pub prompt: String,
    pub has_response_format: bool,
    /// `response_format.type`, if it has one (`json_schema`, `json_object`).
    #[serde(default)]
    pub response_format: Option<String>,
    /// Whether the call asked for a streamed answer (`"stream": true`), and for its
    /// usage chunk (`stream_options.include_usage`).
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub include_usage: bool,
    /// A held-open call (`hold_open_ms`) whose client closed the connection before the
    /// answer: how long after the call came, in ms.
    #[serde(default)]
    pub closed_after_ms: Option<u64>,
    /// A streamed answer: for each chunk of content, the code points of content sent so
    /// far with it, and when (ms since the Unix epoch) its last bytes left the mock.
    #[serde(default)]
    pub sent: Vec<(u64, u64)>,
    /// Its headers, but the transport's (names in lower case).
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// The kind whose messages the call's are, if any (see the module's doc).
    #[serde(default)]
    pub kind: Option<String>,
    /// The call's `max_tokens`, if it sent one.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// How many messages the call sent (few-shot examples included).
    #[serde(default)]
    pub messages: usize,
}

#[derive(Default)]
struct Inner {
    scripts: Vec<(Script, usize)>,
    calls: Vec<Call>,
    released: HashSet<String>,
    expected: expect::Expected,
}

#[derive(Clone, Default)]
struct Mock {
    inner: Arc<Mutex<Inner>>,
    changed: Arc<Notify>,
}

impl Mock {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The router of the mock, to serve on any listener.
fn router(mock: Mock) -> Router {
    Router::new()
        .route("/{provider}/v1/chat/completions", post(chat))
        .route("/_script", post(script))
        .route("/_release", post(release))
        .route("/_expect", post(expect::expect))
        .route("/_calls", get(calls))
        .route("/_calls/wait", get(wait_calls))
        .fallback(preflight)
        .method_not_allowed_fallback(preflight)
        .layer(axum::middleware::map_response(allow_any_origin))
        .with_state(mock)
}

/// The demo page (on the Worker's origin) scripts the mock from the browser.
async fn allow_any_origin(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        "access-control-allow-origin",
        axum::http::HeaderValue::from_static("*"),
    );
    headers.insert(
        "access-control-allow-headers",
        // The tests' `fallback` headers too: the live bench calls it from the page.
        axum::http::HeaderValue::from_static("content-type, api-key, x-title, x-tenant"),
    );
    headers.insert(
        "access-control-allow-methods",
        axum::http::HeaderValue::from_static("GET, POST, OPTIONS"),
    );
    response
}

async fn preflight(method: axum::http::Method) -> StatusCode {
    if method == axum::http::Method::OPTIONS {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::NOT_FOUND
    }
}

/// Starts the mock on its own thread and runtime; returns once it is listening.
/// The secrets the tests' `fallback` reads, as the test Workers set them.
pub const FALLBACK_SECRETS: [(&str, &str); 2] = [
    ("FALLBACK_API_KEY", "test-key"),
    ("FALLBACK_TENANT", "tenant-7"),
];

/// The mock as the suites run it: `fallback`'s calls must carry the headers that
/// [`providers_var`] configures, or they are refused (`401`).
pub fn spawn_for_tests(port: u16) -> std::io::Result<()> {
    let mock = Mock::default();
    let required = [
        ("api-key", "test-key"),
        ("x-title", "onceclick tests"),
        ("x-tenant", "tenant-7"),
    ];
    mock.lock().expected.insert(
        "fallback".to_owned(),
        required
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    serve(port, mock)
}

/// The mock with no provider requiring a header (`cargo xtask dev`).
pub fn spawn(port: u16) -> std::io::Result<()> {
    serve(port, Mock::default())
}

fn serve(port: u16, mock: Mock) -> std::io::Result<()> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
    listener.set_nonblocking(true)?;
    std::thread::Builder::new()
        .name("mock-provider".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build();
            let Ok(runtime) = runtime else { return };
            runtime.block_on(async move {
                if let Ok(listener) = tokio::net::TcpListener::from_std(listener) {
                    let _ = axum::serve(listener, router(mock)).await;
                }
            });
        })?;
    Ok(())
}

fn prompt_of(body: &Value) -> String {
    body["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|msg| msg["content"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

async fn chat(
    State(mock): State<Mock>,
    Path(provider): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let prompt = prompt_of(&body);
    let asked = content::Asked::of(&body);
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let came = std::time::Instant::now();
    let (step, index) = {
        let mut inner = mock.lock();
        let index = inner.calls.len();
        inner.calls.push(Call {
            provider: provider.clone(),
            idempotency_key: header("idempotency-key"),
            authorization: header("authorization"),
            model: body["model"].as_str().map(str::to_owned),
            temperature: body["temperature"].as_f64(),
            prompt: prompt.clone(),
            has_response_format: body["response_format"]["json_schema"]["schema"].is_object(),
            response_format: body["response_format"]["type"].as_str().map(str::to_owned),
            stream: body["stream"] == true,
            include_usage: body["stream_options"]["include_usage"] == true,
            closed_after_ms: None,
            sent: Vec::new(),
            kind: asked.kind.map(|k| k.name().to_owned()),
            max_tokens: body["max_tokens"].as_u64(),
            messages: body["messages"].as_array().map_or(0, Vec::len),
            headers: expect::recorded(&headers),
        });
        if let Some(refused) = expect::refused(&inner.expected, &provider, &headers) {
            drop(inner);
            mock.changed.notify_waiters();
            return refused;
        }
        let step = inner
            .scripts
            .iter_mut()
            .rev()
            .find(|(s, _)| s.provider == provider && prompt.contains(&s.contains))
            .and_then(|(script, used)| {
                let step = script.steps.get(*used).or(script.steps.last()).cloned();
                *used += 1;
                step
            });
        (step.unwrap_or_default(), index)
    };
    mock.changed.notify_waiters();
    let content = asked.content(&step);
    let stream = body["stream"] == true;
    if step.hold_open_ms > 0 && !stream {
        return held_open(mock, index, came, &step, &content);
    }

    if step.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(step.delay_ms).min(MAX_HOLD)).await;
    }
    if let Some(gate) = &step.gate {
        let _ = tokio::time::timeout(MAX_HOLD, async {
            loop {
                let notified = mock.changed.notified();
                if mock.lock().released.contains(gate) {
                    break;
                }
                notified.await;
            }
        })
        .await;
    }
    let failing = step.status.is_some_and(|s| s != 200);
    if stream && !failing && step.stream_fault.as_deref() != Some("ignore") {
        let usage = body["stream_options"]["include_usage"] == true;
        let watched = Watched {
            mock,
            index,
            came,
            answered: false,
        };
        let plan = stream_plan(&step, &content, &prompt, usage);
        return play(plan, watched);
    }
    answer(&step, content, &prompt)
}

/// Records when the client of a held-open call went away, if it did before the end.
struct Watched {
    mock: Mock,
    index: usize,
    came: std::time::Instant,
    answered: bool,
}

impl Drop for Watched {
    fn drop(&mut self) {
        if !self.answered {
            let ms = self.came.elapsed().as_millis() as u64;
            if let Some(call) = self.mock.lock().calls.get_mut(self.index) {
                call.closed_after_ms = Some(ms);
            }
            self.mock.changed.notify_waiters();
        }
    }
}

/// A 200 whose body stays open for `hold_open_ms` (a space every 100 ms), then the
/// answer, `content`. The server drops the body when a write finds the connection
/// closed, and the drop records it.
fn held_open(
    mock: Mock,
    index: usize,
    came: std::time::Instant,
    step: &Step,
    content: &str,
) -> Response {
    use futures::StreamExt;
    let hold = Duration::from_millis(step.hold_open_ms).min(MAX_HOLD);
    let answer = json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
    })
    .to_string();
    let watched = Watched {
        mock,
        index,
        came,
        answered: false,
    };
    let body = futures::stream::unfold(Some((watched, answer)), move |state| async move {
        let (mut watched, answer) = state?;
        if watched.came.elapsed() < hold {
            tokio::time::sleep(Duration::from_millis(100)).await;
            return Some((
                Ok::<_, std::io::Error>(" ".to_owned()),
                Some((watched, answer)),
            ));
        }
        watched.answered = true;
        Some((Ok(answer), None))
    })
    .boxed();
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(axum::body::Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The whole answer of `step`, whose content (with `ok`) is `content`.
fn answer(step: &Step, content: String, prompt: &str) -> Response {
    if let Some(status) = step.status.filter(|s| *s != 200) {
        let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (
            code,
            Json(json!({"error": {"message": "scripted failure"}})),
        )
            .into_response();
        if let Some(secs) = step.retry_after {
            if let Ok(value) = secs.to_string().parse() {
                response.headers_mut().insert("retry-after", value);
            }
        }
        return response;
    }
    match step.reply.as_deref().unwrap_or("ok") {
        "bad_envelope" => return Json(json!({"output": "not a chat completion"})).into_response(),
        "cut_off" => {
            use futures::StreamExt;
            // The status line and the first bytes go out; a moment later the connection
            // breaks, so the client has surely seen the status before the body fails.
            let head = futures::stream::once(async {
                Ok::<_, std::io::Error>("{\"id\": \"chatcmpl-mock\", \"choices\": [")
            });
            let broken = futures::stream::once(async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Err(std::io::Error::other("the provider went away mid-answer"))
            });
            let broken = head.chain(broken);
            return Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "application/json")
                .body(axum::body::Body::from_stream(broken))
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
        }
        _ => {}
    }
    Json(json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": usage(prompt, &content),
    }))
    .into_response()
}

/// One server-sent event of a streamed answer.
fn sse(data: &Value) -> String {
    format!("data: {data}\n\n")
}

/// A chunk whose choice 0 has `delta` and `finish_reason`.
fn chunk(delta: Value, finish_reason: Option<&str>) -> String {
    sse(
        &json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}),
    )
}

/// What a streamed answer sends next.
enum Piece {
    /// These bytes, after this pause; with the content's code points so far when they
    /// end a chunk of content (recorded in the call's `sent` as they leave).
    Send(u64, Vec<u8>, Option<u64>),
    /// A comment every 100 ms, and no chunk, until this long after the call came (so
    /// each is a write that finds a connection the client closed).
    Comments(Duration),
    /// The connection breaks.
    Break,
}

fn send(pause: u64, bytes: impl Into<Vec<u8>>) -> Piece {
    Piece::Send(pause, bytes.into(), None)
}

/// What a streamed answer (`text/event-stream`) of `content` sends, in order, as an
/// OpenAI-compatible provider sends it: a comment, a role chunk, the content, the
/// finish reason, the usage chunk if asked for, `[DONE]`; each chunk of content written
/// in two halves, cut in its `data:` line. `hold_open_ms` holds it open with comments
/// first; `stream_fault` breaks it after `fault_after` chunks of content.
fn stream_plan(step: &Step, content: &str, prompt: &str, usage: bool) -> Vec<Piece> {
    let chars: Vec<char> = content.chars().collect();
    let pieces: Vec<String> = chars
        .chunks(step.chunk_chars.unwrap_or(8).max(1))
        .map(|c| c.iter().collect())
        .collect();
    // A whole answer's faults, streamed: `cut_off` breaks after the first chunk, and
    // `bad_envelope` sends a chunk that is no chat-completion chunk.
    let (fault, fault_after) = match step.reply.as_deref() {
        Some("cut_off") => (Some("cut"), 1),
        _ => (
            step.stream_fault.as_deref(),
            step.fault_after.unwrap_or(pieces.len() / 2),
        ),
    };
    let mut plan = vec![send(0, ": mock processing\n\n")];
    if step.reply.as_deref() == Some("bad_envelope") {
        plan.push(send(0, sse(&json!({"output": "not a chat completion"}))));
    }
    if step.hold_open_ms > 0 {
        plan.push(Piece::Comments(Duration::from_millis(step.hold_open_ms)));
    }
    plan.push(send(
        0,
        chunk(json!({"role": "assistant", "content": ""}), None),
    ));
    let mut finish = "stop";
    let mut ended = false;
    let mut sent_chars = 0;
    for (n, piece) in pieces.iter().enumerate() {
        if n == fault_after {
            match fault_piece(fault) {
                Fault::Piece(piece) => plan.push(piece),
                Fault::Finish(reason) => finish = reason,
                Fault::Nothing => {}
            }
            if fault.is_some_and(|f| f != "no_done") {
                ended = matches!(fault, Some("stall" | "cut" | "error"));
                break;
            }
        }
        let data = chunk(json!({"content": piece}), None).into_bytes();
        // Cut in the middle of its `data:` line, by bytes (so maybe in a character): a
        // client reads lines, and characters, across reads.
        let (a, b) = data.split_at(data.len() / 2);
        plan.push(send(step.chunk_ms, a.to_vec()));
        sent_chars += piece.chars().count() as u64;
        plan.push(Piece::Send(0, b.to_vec(), Some(sent_chars)));
    }
    if !ended {
        plan.push(send(0, chunk(json!({}), Some(finish))));
        if usage {
            let usage = self::usage(prompt, content);
            plan.push(send(
                0,
                sse(
                    &json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk",
                            "choices": [], "usage": usage}),
                ),
            ));
        }
        match fault {
            Some("no_done") => plan.push(Piece::Comments(MAX_HOLD)),
            _ => plan.push(send(0, "data: [DONE]\n\n")),
        }
    }
    plan
}

/// What a `stream_fault` does where it falls.
enum Fault<'a> {
    /// Sends this instead of the next chunk of content.
    Piece(Piece),
    /// Ends with this finish reason (`length`, `content_filter`).
    Finish(&'a str),
    /// Nothing there (`no_done` acts at the end; no fault at all).
    Nothing,
}

fn fault_piece(fault: Option<&str>) -> Fault<'_> {
    match fault {
        Some("stall") => Fault::Piece(Piece::Comments(MAX_HOLD)),
        Some("cut") => Fault::Piece(Piece::Break),
        Some("error") => Fault::Piece(send(
            0,
            sse(&json!({"error": {"message": "the mock failed mid-stream", "code": 502}})),
        )),
        Some("refusal") => Fault::Piece(send(
            0,
            chunk(
                json!({"refusal": "The mock will not summarize this."}),
                None,
            ),
        )),
        Some("no_done") | None => Fault::Nothing,
        Some(reason) => Fault::Finish(reason),
    }
}

/// The rest of a plan as it plays, and who watches it (`None` once it broke).
type Playing = (
    std::iter::Peekable<std::iter::Enumerate<std::vec::IntoIter<Piece>>>,
    Option<Watched>,
);

/// Plays `plan` as the body of a `200` `text/event-stream`.
fn play(plan: Vec<Piece>, watched: Watched) -> Response {
    use futures::StreamExt;
    let last = plan.len();
    let state: Playing = (plan.into_iter().enumerate().peekable(), Some(watched));
    let body = futures::stream::unfold(state, move |state| next_bytes(state, last)).boxed();
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .body(axum::body::Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The next bytes of a playing plan of `last` pieces, and what is left of it; `None`
/// at its end.
async fn next_bytes(
    (mut plan, watched): Playing,
    last: usize,
) -> Option<(std::io::Result<Vec<u8>>, Playing)> {
    let mut watched = watched?;
    let (n, piece) = plan.peek()?;
    match piece {
        Piece::Comments(until) => {
            if watched.came.elapsed() < *until {
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Some((Ok(b": waiting\n\n".to_vec()), (plan, Some(watched))));
            }
            // A stall ends with the bound, unfinished; a hold goes on.
            let n = *n;
            plan.next();
            if n + 1 == last {
                watched.answered = true;
                return None;
            }
            Some((Ok(Vec::new()), (plan, Some(watched))))
        }
        Piece::Send(pause, ..) => {
            if *pause > 0 {
                tokio::time::sleep(Duration::from_millis(*pause).min(MAX_HOLD)).await;
            }
            let Some((n, Piece::Send(_, bytes, content))) = plan.next() else {
                return None;
            };
            watched.answered = n + 1 == last;
            if let Some(chars) = content {
                let at = crate::client::epoch_ms();
                if let Some(call) = watched.mock.lock().calls.get_mut(watched.index) {
                    call.sent.push((chars, at));
                }
            }
            Some((Ok::<_, std::io::Error>(bytes), (plan, Some(watched))))
        }
        Piece::Break => {
            // A moment first, so that the client has surely read the head and the
            // chunks before the connection breaks (as `cut_off` does).
            tokio::time::sleep(Duration::from_millis(200)).await;
            // The mock's own doing, not the client's.
            watched.answered = true;
            Some((
                Err(std::io::Error::other("the provider went away mid-stream")),
                (plan, None),
            ))
        }
    }
}

/// A chat completion's `usage`, as the mock estimates it: a token per four characters
/// (no provider's tokenizer; a real provider's figures replace these).
fn usage(prompt: &str, content: &str) -> Value {
    let tokens = |text: &str| text.chars().count().div_ceil(4);
    let (p, c) = (tokens(prompt), tokens(content));
    json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c})
}

async fn script(State(mock): State<Mock>, Json(script): Json<Script>) -> StatusCode {
    if script.steps.is_empty() {
        return StatusCode::UNPROCESSABLE_ENTITY;
    }
    mock.lock().scripts.push((script, 0));
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
struct Release {
    gate: String,
}

async fn release(State(mock): State<Mock>, Json(release): Json<Release>) -> StatusCode {
    mock.lock().released.insert(release.gate);
    mock.changed.notify_waiters();
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
struct CallQuery {
    contains: String,
    #[serde(default)]
    count: usize,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

fn matching(mock: &Mock, contains: &str) -> Vec<Call> {
    mock.lock()
        .calls
        .iter()
        .filter(|c| c.prompt.contains(contains))
        .cloned()
        .collect()
}

async fn calls(State(mock): State<Mock>, Query(q): Query<CallQuery>) -> Json<Value> {
    Json(json!({"calls": matching(&mock, &q.contains)}))
}

async fn wait_calls(State(mock): State<Mock>, Query(q): Query<CallQuery>) -> Response {
    let limit = Duration::from_millis(q.timeout_ms.unwrap_or(30_000)).min(MAX_HOLD);
    let waited = tokio::time::timeout(limit, async {
        loop {
            let notified = mock.changed.notified();
            let calls = matching(&mock, &q.contains);
            if calls.len() >= q.count {
                return calls;
            }
            notified.await;
        }
    })
    .await;
    match waited {
        Ok(calls) => Json(json!({"calls": calls})).into_response(),
        Err(_) => (
            StatusCode::REQUEST_TIMEOUT,
            Json(json!({"calls": matching(&mock, &q.contains)})),
        )
            .into_response(),
    }
}

/// Providers for a Worker that talks to a mock on `port`, as the `PROVIDERS` var:
/// `primary` answers whole, `fallback` streams.
pub fn providers_var(
    port: u16,
    timeout_ms: u64,
    fallback_abandon_after_ms: Option<u64>,
    primary_streams: bool,
) -> String {
    // `fallback` streams its answers: every test that reaches it runs the streamed path,
    // within two `timeout_ms` in all (a limit a test reaches in seconds),
    // `primary` the whole answer (unless `primary_streams`: the demo page's end-to-end
    // tests, where a hedge race has two streams).
    // `fallback` is also a provider of the other shape: its key in an `api-key` header
    // (as Azure's), two more headers (one a secret's), and JSON asked as `json_object`.
    // The mock refuses its calls without them ([`spawn_for_tests`]).
    let mut fallback = json!({"name": "fallback", "base_url": format!("http://127.0.0.1:{port}/fallback/v1"),
                              "model": "mock-large", "timeout_ms": timeout_ms, "api_key_secret": "FALLBACK_API_KEY",
                              "key_header": "api-key", "json_form": "json_object",
                              "headers": {"X-Title": "onceclick tests"}, "secret_headers": {"X-Tenant": "FALLBACK_TENANT"},
                              "stream": true, "total_timeout_ms": timeout_ms * 2});
    if let Some(ms) = fallback_abandon_after_ms {
        fallback["abandon_after_ms"] = json!(ms);
    }
    json!([
        // A prompt limit no golden prompt fits: certifying `primary` must refuse it.
        {"name": "primary", "base_url": format!("http://127.0.0.1:{port}/primary/v1"),
         "model": "mock-small", "timeout_ms": timeout_ms, "max_prompt_tokens": 10,
         "stream": primary_streams},
        fallback,
    ])
    .to_string()
}
