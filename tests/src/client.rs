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
