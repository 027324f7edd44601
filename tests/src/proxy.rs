//! A fault-injecting HTTP proxy on 127.0.0.1, in front of the Worker, for the browser
//! SDK's tests. The first path segments choose the behaviour and name a scenario:
//!
//! - `/pass/{id}/…` forwards every request;
//! - `/drop-once/{id}/…` forwards the first non-preflight request, lets the Worker
//!   answer, then closes the connection without a byte: the answer is lost, the work
//!   was done — exactly the failure retries must survive;
//! - `/drop-attempts-once/{id}/…` forwards everything, but drops the answer to the
//!   first `POST …/attempts` (a new attempt, the fallback button) the same way;
//! - `/d1-fault-once/{id}/…` adds `X-Onceclick-Fault: create_or_get_job:after` to the
//!   first non-preflight `POST` it forwards: the Worker's D1 batch commits, its reply is
//!   lost, and the Worker answers 503 (the Worker must run with fault injection allowed);
//! - `/hang/{id}/…` holds every non-preflight request unanswered (at most 30 s);
//! - `/hang-streams/{id}/…` forwards everything but a live stream (`GET /v1/stream…`,
//!   `…/stream`), which it holds unanswered, headers and all, until the browser closes
//!   the connection (at most 30 s), and then marks `client_closed` in its log entry;
//! - `/providers-fail-once/{id}/…` answers the first `GET /v1/providers` with a 500 of
//!   its own, and forwards everything else;
//! - `/providers-fail/{id}/…` answers every `GET /v1/providers` with a 500;
//! - `/primary-is-fallback/{id}/…` forwards everything, and rewrites the answer of
//!   `GET /v1/providers` as a deploy that made `fallback` every kind's primary would
//!   give it.
//!
//! - `/unserve-stream-once/{id}/…` adds `X-Onceclick-Fault: subscribe:before` to the
//!   first live stream of several jobs it forwards: the Worker serves the others and
//!   names the first job in an `unserved` event (its hub "failed");
//! - `/cut-stream-once/{id}/…` forwards everything, but closes the first live stream
//!   (`text/event-stream`) it forwards right after its first event: a dropped
//!   connection in mid-job, which the SDK must resume from with nothing lost.
//!
//! A live stream's answer is passed on as it comes (every other answer is read whole
//! first). `GET /_log/{id}` lists what the scenario saw: method, path,
//! `Idempotency-Key`, `Last-Event-ID`, `X-Onceclick-Test` (an app's own header), the
//! Worker's status, and whether the answer was dropped. One request per connection.

use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const MAX_HOLD: Duration = Duration::from_secs(30);
const MAX_REQUEST: usize = 1 << 20;

#[derive(Debug, Clone, Serialize)]
struct Seen {
    method: String,
    path: String,
    idempotency_key: Option<String>,
    last_event_id: Option<String>,
    /// `X-Onceclick-Test`, a header an app adds through the SDK's `headers` option.
    app_header: Option<String>,
    status: Option<u16>,
    dropped: bool,
    /// For a held request: the browser closed the connection before the bound.
    client_closed: bool,
    /// When the request came, in ms since the proxy started.
    at_ms: u64,
}

/// Milliseconds since the proxy's first request: the log's clock.
fn now_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

type Log = Arc<Mutex<HashMap<String, Vec<Seen>>>>;

/// The scenarios whose one-time fault has been used.
type Used = Arc<Mutex<HashSet<String>>>;

/// Whether this request takes the scenario's one-time fault: true once per scenario,
/// decided when the request arrives, so two requests in flight never both take it.
fn take_once(used: &Used, id: &str) -> bool {
    used.lock().is_ok_and(|mut u| u.insert(id.to_owned()))
}

struct Parsed {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

async fn read_request(stream: &mut TcpStream) -> Option<Parsed> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_REQUEST {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, target) = (first.next()?.to_owned(), first.next()?.to_owned());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length.min(MAX_REQUEST) {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Parsed {
        method,
        target,
        headers,
        body,
    })
}

/// The status line and the Worker's headers, without those that frame the body (the
/// caller adds its own).
fn response_head(status: u16, headers: &[(String, String)]) -> String {
    let mut head = format!("HTTP/1.1 {status} X\r\n");
    for (k, v) in headers {
        let skip = ["content-length", "transfer-encoding", "connection"];
        if !skip.iter().any(|s| k.eq_ignore_ascii_case(s)) {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    head
}

async fn write_response(
    stream: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
) {
    let mut head = response_head(status, headers);
    head.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    ));
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body).await;
    let _ = stream.shutdown().await;
}

/// One request, as its scenario sees it: `/{mode}/{id}/{rest}`.
struct Scenario {
    req: Parsed,
    /// The behaviour, such as `drop-once`.
    mode: String,
    /// The scenario's name, which keys its log and its one-time faults.
    id: String,
    /// The path forwarded to the Worker.
    rest: String,
    /// When the request came (the log's clock).
    came: u64,
}

impl Scenario {
    /// `None` for a target without a mode and an id.
    fn of(req: Parsed) -> Option<Self> {
        let parts: Vec<&str> = req.target.splitn(4, '/').collect();
        // ["", mode, id, rest]
        let (Some(mode), Some(id)) = (parts.get(1).copied(), parts.get(2).copied()) else {
            return None;
        };
        let (mode, id) = (mode.to_owned(), id.to_owned());
        let rest = format!("/{}", parts.get(3).copied().unwrap_or_default());
        Some(Scenario {
            req,
            mode,
            id,
            rest,
            came: now_ms(),
        })
    }

    fn header(&self, name: &str) -> Option<String> {
        self.req
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    }

    fn preflight(&self) -> bool {
        self.req.method == "OPTIONS"
    }

    fn post(&self) -> bool {
        self.req.method == "POST"
    }

    /// `GET /v1/providers`.
    fn lookup(&self) -> bool {
        self.req.method == "GET" && self.rest.ends_with("/v1/providers")
    }

    /// A live stream: `GET /v1/stream?…` or `GET …/stream`.
    fn live_stream(&self) -> bool {
        self.req.method == "GET"
            && (self.rest.starts_with("/v1/stream?")
                || self
                    .rest
                    .split('?')
                    .next()
                    .is_some_and(|p| p.ends_with("/stream")))
    }

    /// Adds what this request saw to the scenario's log.
    fn record(&self, log: &Log, status: Option<u16>, dropped: bool) {
        if let Ok(mut l) = log.lock() {
            l.entry(self.id.clone()).or_default().push(Seen {
                method: self.req.method.clone(),
                path: self.rest.clone(),
                idempotency_key: self.header("idempotency-key"),
                last_event_id: self.header("last-event-id"),
                app_header: self.header("x-onceclick-test"),
                status,
                dropped,
                client_closed: false,
                at_ms: self.came,
            });
        }
    }
}

/// One connection: its request, through its scenario's behaviour, to the Worker and
/// back.
async fn handle(
    mut stream: TcpStream,
    upstream: String,
    log: Log,
    used: Used,
    http: reqwest::Client,
) {
    let Some(req) = read_request(&mut stream).await else {
        return;
    };
    let cors = vec![("access-control-allow-origin".to_owned(), "*".to_owned())];
    if let Some(id) = log_asked(&req.target) {
        serve_log(&mut stream, &log, id, &cors).await;
        return;
    }
    let Some(call) = Scenario::of(req) else {
        write_response(&mut stream, 404, &cors, b"").await;
        return;
    };
    let (mode, id) = (call.mode.as_str(), call.id.as_str());
    let drop_answer = match mode {
        "drop-once" => !call.preflight() && take_once(&used, id),
        "drop-attempts-once" => {
            call.post() && call.rest.ends_with("/attempts") && take_once(&used, id)
        }
        _ => false,
    };
    let fault = mode == "d1-fault-once" && call.post() && take_once(&used, id);
    let lookup_fails = call.lookup()
        && (mode == "providers-fail" || (mode == "providers-fail-once" && take_once(&used, id)));
    if lookup_fails {
        call.record(&log, Some(500), false);
        fail_lookup(&mut stream, &cors).await;
        return;
    }
    if (mode == "hang" && !call.preflight()) || (mode == "hang-streams" && call.live_stream()) {
        call.record(&log, None, true);
        hold(stream, &log, &call).await;
        return;
    }
    // An answer to rewrite is asked for uncompressed.
    let rewrite = mode == "primary-is-fallback" && call.lookup();
    let Ok(answer) = forward(&http, &upstream, &call, &used, fault, rewrite)
        .send()
        .await
    else {
        call.record(&log, None, false);
        write_response(&mut stream, 502, &cors, b"").await;
        return;
    };
    pass_on(stream, &log, &call, &used, answer, drop_answer, rewrite).await;
}

/// The scenario whose log `target` asks for (`/_log/{id}`), if it does.
fn log_asked(target: &str) -> Option<&str> {
    let parts: Vec<&str> = target.splitn(4, '/').collect();
    (parts.get(1) == Some(&"_log")).then(|| parts.get(2).copied().unwrap_or_default())
}

/// `GET /_log/{id}`: what the scenario saw.
async fn serve_log(stream: &mut TcpStream, log: &Log, id: &str, cors: &[(String, String)]) {
    let seen = log
        .lock()
        .map(|l| l.get(id).cloned().unwrap_or_default())
        .unwrap_or_default();
    let body = serde_json::to_vec(&seen).unwrap_or_default();
    write_response(stream, 200, cors, &body).await;
}

/// The proxy's own 500 to a lookup of the providers.
async fn fail_lookup(stream: &mut TcpStream, cors: &[(String, String)]) {
    let mut headers = cors.to_vec();
    headers.push(("content-type".into(), "application/problem+json".into()));
    let problem = br#"{"type":"about:blank","title":"Internal","status":500,"code":"internal","detail":"the proxy failed this lookup","retryable":false}"#;
    write_response(stream, 500, &headers, problem).await;
}

/// Holds a request unanswered until the browser gives up (aborts) or the bound passes;
/// a close by the browser marks the request's log entry `client_closed`.
async fn hold(mut stream: TcpStream, log: &Log, call: &Scenario) {
    let mut sink = [0u8; 1];
    let closed = matches!(
        tokio::time::timeout(MAX_HOLD, stream.read(&mut sink)).await,
        Ok(Ok(0) | Err(_))
    );
    if closed {
        if let Ok(mut l) = log.lock() {
            let held = l.get_mut(&call.id).and_then(|seen| {
                seen.iter_mut().rev().find(|s| {
                    s.path == call.rest && s.method == call.req.method && !s.client_closed
                })
            });
            if let Some(held) = held {
                held.client_closed = true;
            }
        }
    }
}

/// The request as the Worker gets it: its headers but those that frame it (and, for an
/// answer to rewrite, `Accept-Encoding`), with the scenario's fault header if it takes
/// one.
fn forward(
    http: &reqwest::Client,
    upstream: &str,
    call: &Scenario,
    used: &Used,
    fault: bool,
    rewrite: bool,
) -> reqwest::RequestBuilder {
    let req = &call.req;
    let method = reqwest::Method::from_bytes(req.method.as_bytes()).unwrap_or(reqwest::Method::GET);
    let mut forward = http
        .request(method, format!("{upstream}{}", call.rest))
        .body(req.body.clone());
    for (k, v) in &req.headers {
        let skip = ["host", "content-length", "connection"];
        let compressed = rewrite && k.eq_ignore_ascii_case("accept-encoding");
        if !skip.iter().any(|s| k.eq_ignore_ascii_case(s)) && !compressed {
            forward = forward.header(k, v);
        }
    }
    if fault {
        forward = forward.header("X-Onceclick-Fault", "create_or_get_job:after");
    }
    let several = call.live_stream() && call.rest.matches("job=").count() >= 2;
    if call.mode == "unserve-stream-once" && several && take_once(used, &call.id) {
        forward = forward.header("X-Onceclick-Fault", "subscribe:before");
    }
    forward
}

/// The Worker's answer, to the browser: a live stream relayed as it comes (or cut), any
/// other answer read whole (and rewritten), or dropped without a byte.
async fn pass_on(
    mut stream: TcpStream,
    log: &Log,
    call: &Scenario,
    used: &Used,
    answer: reqwest::Response,
    drop_answer: bool,
    rewrite: bool,
) {
    let status = answer.status().as_u16();
    let headers: Vec<(String, String)> = answer
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_owned())))
        .collect();
    let streamed = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("content-type") && v.starts_with("text/event-stream"));
    if streamed {
        call.record(log, Some(status), drop_answer);
        if drop_answer {
            return;
        }
        let cut = call.mode == "cut-stream-once" && take_once(used, &call.id);
        relay_stream(stream, status, &headers, answer, cut).await;
        return;
    }
    let mut body = answer.bytes().await.unwrap_or_default().to_vec();
    if rewrite && status == 200 {
        body = fallback_as_primary(&body);
    }
    if drop_answer {
        call.record(log, Some(status), true);
        // The Worker did the work; the browser never hears of it.
        drop(stream);
        return;
    }
    call.record(log, Some(status), false);
    write_response(&mut stream, status, &headers, &body).await;
}

/// Passes a live stream on as it comes, ended by closing the connection; with `cut`,
/// closes it right after the first event (its first blank line), mid-stream.
async fn relay_stream(
    mut stream: TcpStream,
    status: u16,
    headers: &[(String, String)],
    mut answer: reqwest::Response,
    cut: bool,
) {
    let mut head = response_head(status, headers);
    head.push_str("connection: close\r\n\r\n");
    if stream.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    let mut sent = Vec::new();
    // Bounded like every hold here: a stream the browser keeps open ends with the bound.
    let deadline = tokio::time::Instant::now() + MAX_HOLD;
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, answer.chunk()).await {
        sent.extend_from_slice(&chunk);
        let first_event_end = sent.windows(2).position(|w| w == b"\n\n");
        let chunk = match (cut, first_event_end) {
            (true, Some(end)) => &chunk[..chunk.len() - (sent.len() - end - 2)],
            _ => &chunk[..],
        };
        if stream.write_all(chunk).await.is_err() || (cut && first_event_end.is_some()) {
            break;
        }
    }
    let _ = stream.shutdown().await;
}

/// A `GET /v1/providers` answer as it would read if `fallback` were the primary of every
/// kind that names it (and no other provider were).
fn fallback_as_primary(body: &[u8]) -> Vec<u8> {
    let Ok(mut list) = serde_json::from_slice::<serde_json::Value>(body) else {
        return body.to_vec();
    };
    for provider in list["providers"].as_array_mut().into_iter().flatten() {
        let is_fallback = provider["name"] == "fallback";
        for kind in provider["kinds"].as_object_mut().into_iter().flatten() {
            kind.1["primary"] = serde_json::Value::Bool(is_fallback);
        }
    }
    serde_json::to_vec(&list).unwrap_or_default()
}

/// Starts the proxy on `127.0.0.1:port` in front of `upstream`, on its own thread.
pub fn spawn(port: u16, upstream: String) -> std::io::Result<()> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
    listener.set_nonblocking(true)?;
    std::thread::Builder::new()
        .name("fault-proxy".into())
        .spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                let Ok(listener) = TcpListener::from_std(listener) else {
                    return;
                };
                let log: Log = Arc::default();
                let used: Used = Arc::default();
                let http = reqwest::Client::new();
                while let Ok((stream, _)) = listener.accept().await {
                    let (log, used) = (log.clone(), used.clone());
                    tokio::spawn(handle(stream, upstream.clone(), log, used, http.clone()));
                }
            });
        })?;
    Ok(())
}
