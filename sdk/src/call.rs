//! One call of the onceclick API, built up and then sent with the SDK's retry policy:
//! `Call::post(path).json(body).header(name, value).policy(&p).send(base_url, &token, &to)`.
//! It knows nothing of the `Client`: the client gives it the address and the token.

use crate::error::OnceclickError;
use crate::http::{self, Answer, Policy};
use crate::js;
use crate::transport::Transport;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{Request, RequestInit};

/// A call to be sent: the bearer token and the base URL come from the client at `send`.
pub(crate) struct Call<'a> {
    method: &'static str,
    path: &'a str,
    body: Option<&'a str>,
    /// Two at most, the most any call sends: a list in place costs the bundle less than
    /// a `Vec`.
    headers: [Option<(&'a str, &'a str)>; 2],
    policy: Option<&'a Policy>,
    retry_conflict: bool,
}

impl<'a> Call<'a> {
    fn new(method: &'static str, path: &'a str) -> Self {
        Self {
            method,
            path,
            body: None,
            headers: [None; 2],
            policy: None,
            retry_conflict: true,
        }
    }

    /// `GET path`.
    pub(crate) fn get(path: &'a str) -> Self {
        Self::new("GET", path)
    }

    /// `POST path`.
    pub(crate) fn post(path: &'a str) -> Self {
        Self::new("POST", path)
    }

    /// Sends `text`, already JSON, as the body.
    pub(crate) fn json(mut self, text: &'a str) -> Self {
        self.body = Some(text);
        self
    }

    /// Adds a header to every try.
    pub(crate) fn header(mut self, name: &'a str, value: &'a str) -> Self {
        debug_assert!(self.headers.iter().any(Option::is_none), "a third header");
        if let Some(free) = self.headers.iter_mut().find(|h| h.is_none()) {
            *free = Some((name, value));
        }
        self
    }

    /// The caller's signal and `onRetry`; without it the call has neither.
    pub(crate) fn policy(mut self, policy: &'a Policy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Whether a 409 marked `retryable` is retried (the default). A new attempt says
    /// no: its `attempt_in_flight` is another click's attempt, not a passing state.
    pub(crate) fn retry_conflict(mut self, retry: bool) -> Self {
        self.retry_conflict = retry;
        self
    }

    /// The `Request` of one try: `base_url`, `token` and the transport `to` (its extra
    /// headers; its `timeoutMs` when `timed`) are the client's.
    pub(crate) fn request(
        &self,
        base_url: &str,
        token: &str,
        to: &Transport,
        timed: bool,
    ) -> Result<Request, JsValue> {
        let h = to.headers()?;
        h.set("Authorization", &format!("Bearer {token}"))?;
        if self.body.is_some() {
            h.set("Content-Type", "application/json")?;
        }
        for (name, value) in self.headers.iter().flatten() {
            h.set(name, value)?;
        }
        let init = RequestInit::new();
        init.set_method(self.method);
        init.set_headers(&h);
        if let Some(b) = self.body {
            init.set_body(&JsValue::from_str(b));
        }
        let signal = self.policy.and_then(|p| p.signal.as_ref());
        match to.timeout_ms.filter(|_| timed) {
            Some(ms) => init.set_signal(Some(js::timeout_signal(ms, signal).unchecked_ref())),
            None => init.set_signal(signal),
        }
        Request::new_with_str_and_init(&format!("{base_url}{}", self.path), &init)
    }

    /// Sends it through `to` until it answers with something not worth retrying (see
    /// `http::send`).
    pub(crate) async fn send(
        self,
        base_url: &str,
        token: &str,
        to: &Transport,
    ) -> Result<Answer, OnceclickError> {
        let none = Policy::default();
        let policy = self.policy.unwrap_or(&none);
        let make = || self.request(base_url, token, to, true);
        http::send(&make, policy, to, self.retry_conflict).await
    }
}
