//! A thin client for the Worker under test. Answers are kept whole (status, headers,
//! body) so tests can assert on every part of the contract.

use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder};
use serde_json::Value;

/// The Worker under test, as `cargo xtask test` describes it in the environment.
#[derive(Clone, Debug)]
pub struct Api {
    pub base: String,
    pub secret: String,
    pub http: reqwest::Client,
}

/// One HTTP answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
}

impl Reply {
    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The `code` of a problem+json answer, checking that it is one.
    pub fn problem_code(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "not a problem: {} {}",
            self.status,
            self.text
        );
        let body = self.json();
        assert_eq!(body["status"], self.status, "status member: {body}");
        for member in ["type", "title", "detail", "code"] {
            assert!(body[member].is_string(), "problem lacks {member}: {body}");
        }
        body["code"].as_str().unwrap_or_default().to_owned()
    }
}

impl Api {
    /// Reads `ONCECLICK_URL` and `ONCECLICK_AUTH_SECRET`, which `cargo xtask test` sets.
    pub fn from_env() -> Self {
        let base = std::env::var("ONCECLICK_URL")
            .expect("ONCECLICK_URL is not set: run the integration tests with `cargo xtask test`");
        let secret = std::env::var("ONCECLICK_AUTH_SECRET")
            .expect("ONCECLICK_AUTH_SECRET is not set: run with `cargo xtask test`");
        Self {
            base,
            secret,
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .build()
                .expect("http client"),
        }
    }

    /// The Worker at `base`, whose tokens are signed with `secret`.
    pub fn at(base: &str, secret: &str) -> Self {
        Self {
            base: base.to_owned(),
            secret: secret.to_owned(),
            http: reqwest::Client::new(),
        }
    }

    /// A valid one-hour token for `owner`.
    pub fn token(&self, owner: &str) -> String {
        crate::auth::mint(&self.secret, owner, false, 3600).expect("mint token")
    }

    /// A valid one-hour admin token for `owner`.
    pub fn admin_token(&self, owner: &str) -> String {
        crate::auth::mint(&self.secret, owner, true, 3600).expect("mint token")
    }

    pub fn request(&self, method: Method, path: &str, token: Option<&str>) -> RequestBuilder {
        let rb = self.http.request(method, format!("{}{path}", self.base));
        match token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    /// `POST /v1/jobs` with a JSON body given as text (so tests control every byte).
    pub fn create(&self, token: &str, key: Option<&str>, body: &str) -> RequestBuilder {
        let rb = self
            .request(Method::POST, "/v1/jobs", Some(token))
            .header("Content-Type", "application/json")
            .body(body.to_owned());
        match key {
            Some(k) => rb.header("Idempotency-Key", k),
            None => rb,
        }
    }

    pub fn get(&self, token: &str, path: &str) -> RequestBuilder {
        self.request(Method::GET, path, Some(token))
    }

    /// Polls `GET /v1/jobs/{id}` (with `If-None-Match`, so an unchanged job costs a
    /// 304) until `done` holds, for at most 30 s; returns the job.
    pub async fn wait_job(&self, token: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        self.wait_job_for(30, token, id, done).await
    }

    /// [`Api::wait_job`] for at most `seconds`.
    pub async fn wait_job_for(
        &self,
        seconds: u64,
        token: &str,
        id: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
        let mut etag: Option<String> = None;
        let mut last = Value::Null;
        loop {
            let mut rb = self.get(token, &format!("/v1/jobs/{id}"));
            if let Some(tag) = &etag {
                rb = rb.header("If-None-Match", tag);
            }
            let reply = send(rb).await;
            if reply.status == 200 {
                etag = reply.header("etag").map(str::to_owned);
                last = reply.json();
                if done(&last) {
                    return last;
                }
            } else {
                assert_eq!(reply.status, 304, "{}", reply.text);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "job {id} did not reach the awaited state in {seconds} s; last seen: {last}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    }

    /// Polls the job's events until one of type `kind` appears (at most 30 s).
    pub async fn wait_event(&self, token: &str, id: &str, kind: &str) -> Vec<Value> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let events = self.events(token, id).await;
            if events.iter().any(|e| e["type"] == kind) {
                return events;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no {kind} event for {id} in 30 s: {events:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    }

    pub async fn events(&self, token: &str, id: &str) -> Vec<Value> {
        let reply = send(self.get(token, &format!("/v1/jobs/{id}/events"))).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        reply.json()["events"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Runs the Worker's cron handler once (`wrangler dev --test-scheduled`) and waits
    /// for it to finish. Against a sharded Worker (`ONCECLICK_STORE=durable`), whose
    /// shards reconcile themselves, it asks every shard for a pass now instead (the
    /// test-only `POST /v1/_reconcile`).
    pub async fn run_cron(&self) {
        if std::env::var("ONCECLICK_STORE").is_ok_and(|s| s == "durable") {
            let admin = self.admin_token("cron");
            // A shard's SQLite may be busy for a moment under the local runtime (the
            // suites read its file while it writes): that is a 503, retryable by the
            // contract, and the pass is asked for again, as the next alarm would run it.
            let (reply, _) = resend_while_unavailable(
                || self.post_json(&admin, "/v1/_reconcile", &serde_json::json!({})),
                &[200; 4],
            )
            .await;
            assert_eq!(reply.status, 200, "{}", reply.text);
            return;
        }
        let reply = send(
            self.http
                .get(format!("{}/__scheduled", self.base))
                .query(&[("cron", "* * * * *")]),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }

    /// `POST` with a JSON body.
    pub fn post_json(&self, token: &str, path: &str, body: &Value) -> RequestBuilder {
        self.request(Method::POST, path, Some(token)).json(body)
    }

    /// Runs `POST /v1/providers/{name}/certify` as an admin; returns the reports.
    pub async fn certify(&self, provider: &str) -> Vec<Value> {
        let admin = self.admin_token("certifier");
        let reply = send(self.post_json(
            &admin,
            &format!("/v1/providers/{provider}/certify"),
            &serde_json::json!({}),
        ))
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        reply.json()["reports"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Certifies `provider` and checks that every report passed.
    pub async fn ensure_certified(&self, provider: &str) {
        for report in self.certify(provider).await {
            assert_eq!(
                report["passed"], true,
                "{provider} must pass certification: {report}"
            );
        }
    }

    /// `POST /v1/jobs` of a `kind` job whose text carries `marker`, under a fresh key,
    /// with the test-only `fault` armed if given. Returns the answer unchecked.
    pub async fn create_marked(
        &self,
        token: &str,
        kind: &str,
        marker: &str,
        fault: Option<&str>,
    ) -> Reply {
        let body = serde_json::json!({"kind": kind, "input": {"text": marked_text(marker)}});
        let mut rb = self.create(token, Some(&unique("key")), &body.to_string());
        if let Some(fault) = fault {
            rb = rb.header(FAULT_HEADER, fault);
        }
        send(rb).await
    }

    /// Creates a job of `kind` with `text` as its input under a fresh key, checking
    /// that it is new (201). Put a unique marker in `text` to script the mock for it.
    ///
    /// A `503 service_unavailable` is sent again with the same key, as the contract says
    /// a client does (at most twice more, 100 and 200 ms later): local D1 answers
    /// `SQLITE_BUSY` now and then while the tests write concurrently. A resend may then
    /// get the job the first send made (200).
    pub async fn create_job(
        &self,
        token: &str,
        kind: &str,
        text: &str,
        provider: Option<&str>,
    ) -> Value {
        let mut body = serde_json::json!({"kind": kind, "input": {"text": text}});
        if let Some(p) = provider {
            body["provider"] = serde_json::json!(p);
        }
        let key = unique("key");
        let (reply, resent) = resend_while_unavailable(
            || self.create(token, Some(&key), &body.to_string()),
            &[100, 200],
        )
        .await;
        // After a resend, 200 is the first send's job, replayed.
        assert!(
            reply.status == 201 || (resent && reply.status == 200),
            "{} {}",
            reply.status,
            reply.text
        );
        reply.json()
    }

    /// Sends one request written by hand, over a new TCP connection to the Worker, for
    /// what reqwest refuses to send (a header value with a control character): the
    /// request line, `Host`, then `headers` byte for byte and in order, then
    /// `Content-Length`, `Connection: close` and `body`. Reads until the server closes
    /// the connection (at most 10 s). Returns the answer's status and body, or `None` if
    /// the server closed the connection (or stayed silent for 10 s) without answering.
    pub async fn send_raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &[u8])],
        body: &[u8],
    ) -> Option<(u16, String)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let authority = self
            .base
            .split_once("://")
            .map_or(self.base.as_str(), |(_, rest)| rest);
        let authority = authority.split('/').next().unwrap_or(authority);
        let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\n").into_bytes();
        for (name, value) in headers {
            request.extend_from_slice(name.as_bytes());
            request.extend_from_slice(b": ");
            request.extend_from_slice(value);
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(
            format!(
                "Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        );
        request.extend_from_slice(body);
        let mut stream = tokio::net::TcpStream::connect(authority)
            .await
            .expect("the Worker accepts a connection");
        // A server may answer and close before it has read the whole request: a write
        // that fails is no error here; the answer, or its absence, is what counts.
        let _ = stream.write_all(&request).await;
        let mut answer = Vec::new();
        // A reset after the answer is no error either: what was read is kept.
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            stream.read_to_end(&mut answer),
        )
        .await;
        let text = String::from_utf8_lossy(&answer);
        let status = text.strip_prefix("HTTP/1.")?.get(2..5)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        Some((status, body.to_owned()))
    }
}

/// Sends and collects the whole answer.
pub async fn send(rb: RequestBuilder) -> Reply {
    let resp = rb.send().await.expect("request reaches the Worker");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("read body");
    Reply {
        status,
        headers,
        text,
    }
}

/// Sends the request `make` builds, and builds and sends it again (so with the same
/// key) after each pause of `pauses_ms` while the answer is a `503
/// service_unavailable`, as the contract says a client does: the local runtime's
/// SQLite answers busy now and then while the tests write concurrently. The last answer,
/// and whether it came to a resend.
pub async fn resend_while_unavailable(
    make: impl Fn() -> RequestBuilder,
    pauses_ms: &[u64],
) -> (Reply, bool) {
    let mut reply = send(make()).await;
    let mut resent = false;
    for pause_ms in pauses_ms {
        if reply.status != 503 || reply.problem_code() != "service_unavailable" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(*pause_ms)).await;
        reply = send(make()).await;
        resent = true;
    }
    (reply, resent)
}

/// The header that arms test-only faults in the test Worker (see `core/src/fault.rs`).
pub const FAULT_HEADER: &str = "X-Onceclick-Fault";

/// A job text that carries `marker`, so that mock scripts and call counts apply to the
/// job alone.
pub fn marked_text(marker: &str) -> String {
    format!("{marker}: the quarterly numbers came in above the forecast again.")
}

/// This machine's clock, in ms since the Unix epoch (the mock's `sent` times are on it).
pub fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A fresh key that no other test (or earlier run) uses.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{prefix}-{nanos}-{}", N.fetch_add(1, Ordering::Relaxed))
}

/// The mock provider that `cargo xtask test` runs, as `ONCECLICK_MOCK_URL` names it.
#[derive(Clone, Debug)]
pub struct Mock {
    pub base: String,
    pub http: reqwest::Client,
}

impl Mock {
    pub fn from_env() -> Self {
        Self {
            base: std::env::var("ONCECLICK_MOCK_URL")
                .expect("ONCECLICK_MOCK_URL is not set: run with `cargo xtask test`"),
            http: reqwest::Client::new(),
        }
    }

    /// Scripts the calls to `provider` whose prompt contains `marker`.
    pub async fn script(&self, provider: &str, marker: &str, steps: Value) {
        let status = self
            .http
            .post(format!("{}/_script", self.base))
            .json(&serde_json::json!({"provider": provider, "contains": marker, "steps": steps}))
            .send()
            .await
            .expect("mock reachable")
            .status();
        assert_eq!(status, 204, "script refused");
    }

    /// Lets every call held at `gate` answer.
    pub async fn release(&self, gate: &str) {
        self.http
            .post(format!("{}/_release", self.base))
            .json(&serde_json::json!({"gate": gate}))
            .send()
            .await
            .expect("mock reachable");
    }

    /// Every call so far whose prompt contains `marker`.
    pub async fn calls(&self, marker: &str) -> Vec<Value> {
        let body: Value = self
            .http
            .get(format!("{}/_calls", self.base))
            .query(&[("contains", marker)])
            .send()
            .await
            .expect("mock reachable")
            .json()
            .await
            .expect("calls JSON");
        body["calls"].as_array().cloned().unwrap_or_default()
    }

    /// Waits (up to 30 s) until `count` calls whose prompt contains `marker` have arrived.
    pub async fn wait_calls(&self, marker: &str, count: usize) -> Vec<Value> {
        let resp = self
            .http
            .get(format!("{}/_calls/wait", self.base))
            .query(&[
                ("contains", marker.to_owned()),
                ("count", count.to_string()),
                ("timeout_ms", "30000".to_owned()),
            ])
            .send()
            .await
            .expect("mock reachable");
        let status = resp.status();
        let body: Value = resp.json().await.expect("calls JSON");
        assert_eq!(
            status, 200,
            "waited for {count} calls with {marker:?}, got {body}"
        );
        body["calls"].as_array().cloned().unwrap_or_default()
    }

    /// Waits (at most 15 s) for a call with `marker` that `matches` (a held-open call
    /// whose connection closed, say), and returns it.
    pub async fn wait_call(&self, marker: &str, matches: impl Fn(&Value) -> bool) -> Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            let calls = self.calls(marker).await;
            if let Some(call) = calls.iter().find(|c| matches(c)) {
                return call.clone();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no call with {marker:?} matched in 15 s: {calls:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

/// True once the job has reached `status`.
pub fn status_is(status: &'static str) -> impl Fn(&Value) -> bool {
    move |job| job["status"] == status
}

/// The `id` member of a job (or attempt).
pub fn id(v: &Value) -> String {
    v["id"].as_str().expect("an id").to_owned()
}
