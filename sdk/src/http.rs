//! Sending with safe retries: full-jitter exponential backoff (base 250 ms, cap 8 s, at
//! most 6 tries) for network errors, 429, 503 and retryable 409s, honouring
//! `Retry-After`; never for another 4xx; the same request — and so the same
//! `Idempotency-Key` — every time.

use crate::error::OnceclickError;
use crate::js;
use crate::transport::Transport;
use onceclick_protocol::Problem;
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use web_sys::{AbortSignal, Request, Response};

pub(crate) const BASE_MS: f64 = 250.0;
pub(crate) const CAP_MS: f64 = 8_000.0;
/// Tries in all, the first included.
pub(crate) const MAX_TRIES: u32 = 6;

/// How one call is sent.
#[derive(Clone, Default)]
pub(crate) struct Policy {
    pub(crate) signal: Option<AbortSignal>,
    /// Each is called before each retry with `{attempt, delayMs, code, status}`. Shared
    /// and growable: a submit that joins a request in flight adds its own.
    pub(crate) on_retry: Rc<RefCell<Vec<js_sys::Function>>>,
}

/// What came back.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) response: Response,
}

impl Answer {
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        self.response.headers().get(name).ok().flatten()
    }

    pub(crate) async fn text(&self) -> Result<String, OnceclickError> {
        let promise = self.response.text().map_err(OnceclickError::network_from)?;
        wasm_bindgen_futures::JsFuture::from(promise)
            .await
            .map(|v| v.as_string().unwrap_or_default())
            .map_err(OnceclickError::network_from)
    }

    /// The body parsed by the browser's `JSON.parse`: handed to the caller as it is.
    pub(crate) async fn js_json(&self) -> Result<JsValue, OnceclickError> {
        let text = self.text().await?;
        js_sys::JSON::parse(&text)
            .map_err(|_| OnceclickError::new("invalid_response", "the server's answer is not JSON"))
    }

    /// The problem this answer carries, as an error.
    pub(crate) async fn error(&self) -> OnceclickError {
        let problem = match self.text().await {
            Ok(text) => crate::json::parse(&text).and_then(|v| problem(&v)),
            Err(_) => None,
        };
        OnceclickError::from_problem(self.status, problem)
    }
}

/// A problem+json body, read member by member.
fn problem(v: &JsValue) -> Option<Problem> {
    Some(Problem {
        type_: js::get_string(v, "type").unwrap_or_default(),
        title: js::get_string(v, "title").unwrap_or_default(),
        status: js::get(v, "status").as_f64()? as u16,
        detail: js::get_string(v, "detail").unwrap_or_default(),
        code: js::get_string(v, "code")?,
        retryable: js::get(v, "retryable").as_bool().unwrap_or(false),
        job_id: js::get_string(v, "job_id"),
    })
}

/// The full-jitter delay before try `n + 1` (n ≥ 1), with the default base and cap, or
/// `Retry-After` when given.
pub(crate) fn delay_ms(n: u32, retry_after: Option<&str>, random: f64) -> f64 {
    delay_between(n, retry_after, random, BASE_MS, CAP_MS)
}

/// [`delay_ms`] with the backoff's `base` and `cap` in ms.
pub(crate) fn delay_between(
    n: u32,
    retry_after: Option<&str>,
    random: f64,
    base: f64,
    cap: f64,
) -> f64 {
    if let Some(secs) = retry_after.and_then(|v| v.trim().parse::<u32>().ok().map(f64::from)) {
        return (secs * 1000.0).clamp(0.0, 60_000.0);
    }
    let ceiling = (base * 2f64.powi(n as i32 - 1)).min(cap);
    random * ceiling
}

/// Sends `make()` (a fresh `Request` per try: a body is read once) until it answers
/// with something not worth retrying, or the tries run out.
///
/// Answers 2xx, 304 and non-retryable errors are returned as they are; `retry_409`
/// says whether a 409 marked `retryable` counts (not for a new attempt: see `retry`).
pub(crate) async fn send(
    make: &dyn Fn() -> Result<Request, JsValue>,
    policy: &Policy,
    to: &Transport,
    retry_409: bool,
) -> Result<Answer, OnceclickError> {
    let mut n = 1;
    loop {
        let request = make().map_err(OnceclickError::invalid_from)?;
        let fetched = js::fetch(&request, to.fetch.as_ref());
        let outcome = js::abortable(policy.signal.as_ref(), fetched).await?;
        let (error, retry_after) = match outcome {
            // The caller's abort, which the request's signal carried to `fetch`: not
            // the network's failure.
            Err(_) if policy.signal.as_ref().is_some_and(AbortSignal::aborted) => {
                return Err(OnceclickError::aborted())
            }
            Err(e) => (OnceclickError::network_from(e), None),
            Ok(response) => {
                let answer = Answer {
                    status: response.status(),
                    response,
                };
                let retryable = match answer.status {
                    429 | 503 => true,
                    409 if retry_409 => answer.error_is_retryable().await,
                    _ => false,
                };
                if !retryable || n >= to.tries {
                    // The caller turns a final error answer into its problem.
                    return Ok(answer);
                }
                let retry_after = answer.header("Retry-After");
                (
                    OnceclickError::from_problem(answer.status, None),
                    retry_after,
                )
            }
        };
        if n >= to.tries {
            return Err(error);
        }
        let random = js_sys::Math::random();
        let wait = delay_between(n, retry_after.as_deref(), random, to.base_ms, to.cap_ms);
        // A copy: a callback may abort its submit, which takes it off the list.
        let callbacks = policy.on_retry.borrow().clone();
        for callback in callbacks {
            let info = js_sys::Object::new();
            let _ = js_sys::Reflect::set(&info, &"attempt".into(), &JsValue::from(n + 1));
            let _ = js_sys::Reflect::set(&info, &"delayMs".into(), &JsValue::from_f64(wait));
            let _ = js_sys::Reflect::set(&info, &"code".into(), &error.code.as_str().into());
            let _ = js_sys::Reflect::set(&info, &"status".into(), &error.status.into());
            let _ = callback.call1(&JsValue::NULL, &info);
        }
        js::abortable(policy.signal.as_ref(), js::sleep(wait)).await?;
        n += 1;
    }
}

impl Answer {
    /// Reads a 409's problem without consuming the response the caller may still want.
    async fn error_is_retryable(&self) -> bool {
        let Ok(copy) = self.response.clone() else {
            return false;
        };
        let copy = Answer {
            status: self.status,
            response: copy,
        };
        copy.js_json()
            .await
            .is_ok_and(|v| js::get(&v, "retryable").as_bool() == Some(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_full_jitter_capped_at_eight_seconds() {
        assert_eq!(delay_ms(1, None, 1.0), 250.0);
        assert_eq!(delay_ms(2, None, 1.0), 500.0);
        assert_eq!(delay_ms(5, None, 1.0), 4000.0);
        assert_eq!(delay_ms(6, None, 1.0), 8000.0);
        assert_eq!(delay_ms(30, None, 1.0), 8000.0);
        assert_eq!(delay_ms(3, None, 0.0), 0.0);
        assert_eq!(delay_ms(3, None, 0.5), 500.0);
    }

    #[test]
    fn retry_after_wins_over_jitter() {
        assert_eq!(delay_ms(1, Some("3"), 0.0), 3000.0);
        assert_eq!(delay_ms(1, Some(" 0 "), 1.0), 0.0);
        assert_eq!(delay_ms(1, Some("99999"), 1.0), 60_000.0);
        assert_eq!(delay_ms(2, Some("soon"), 1.0), 500.0, "unparseable: jitter");
    }
}
