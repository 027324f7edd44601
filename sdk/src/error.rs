//! `OnceclickError`: the one error type the SDK rejects with, a JS `Error`.

use crate::decimal::decimal;
use onceclick_protocol::Problem;
use wasm_bindgen::prelude::*;

/// The JS class every rejection is an instance of (`js/error.js`, re-exported by the
/// package as `OnceclickError`): a real `Error`, with a stack.
#[wasm_bindgen(module = "/js/error.js")]
extern "C" {
    /// `OnceclickError` in JS: `class OnceclickError extends Error`.
    #[wasm_bindgen(js_name = OnceclickError, extends = js_sys::Error, reexport)]
    #[derive(Debug, Clone)]
    pub type JsOnceclickError;

    #[wasm_bindgen(constructor, js_class = OnceclickError)]
    fn new(
        code: &str,
        message: &str,
        status: Option<u16>,
        retryable: bool,
        job_id: Option<String>,
        cause: &JsValue,
    ) -> JsOnceclickError;
}

/// Why a call failed, until it is handed to JS as a [`JsOnceclickError`]. Its `code` is
/// an `ErrorCode`: one of the API's problem codes, `network`, `aborted`, `timeout`,
/// `invalid_argument`, `invalid_response` from the SDK itself, or `http_<status>` for an
/// answer that was not problem+json.
#[derive(Debug, Clone)]
pub(crate) struct OnceclickError {
    pub(crate) code: String,
    message: String,
    pub(crate) status: Option<u16>,
    retryable: bool,
    job_id: Option<String>,
    /// What JS threw or rejected with underneath (a `TypeError` of `fetch`), if anything.
    cause: JsValue,
}

impl From<OnceclickError> for JsValue {
    fn from(e: OnceclickError) -> JsValue {
        JsOnceclickError::new(
            &e.code,
            &e.message,
            e.status,
            e.retryable,
            e.job_id,
            &e.cause,
        )
        .into()
    }
}

impl OnceclickError {
    pub(crate) fn new(code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.to_owned(),
            message: message.into(),
            status: None,
            retryable: false,
            job_id: None,
            cause: JsValue::UNDEFINED,
        }
    }

    /// What a shared promise of the SDK rejected with (a flight that other submits
    /// joined), as this error again; anything else JS rejected with there (a Web Lock
    /// refused) is an `internal` error caused by it.
    pub(crate) fn from_js(e: JsValue) -> Self {
        if !e.is_instance_of::<JsOnceclickError>() {
            return Self::new("internal", crate::js::describe(&e)).caused_by(e);
        }
        let text = |name| crate::js::get_string(&e, name);
        Self {
            code: text("code").unwrap_or_default(),
            message: text("message").unwrap_or_default(),
            status: crate::js::get(&e, "status").as_f64().map(|s| s as u16),
            retryable: crate::js::get(&e, "retryable").is_truthy(),
            job_id: text("jobId"),
            cause: crate::js::get(&e, "cause"),
        }
    }

    /// This error, with what JS threw underneath as its `cause`.
    pub(crate) fn caused_by(self, cause: JsValue) -> Self {
        Self { cause, ..self }
    }

    pub(crate) fn network(message: impl Into<String>) -> Self {
        Self {
            retryable: true,
            ..Self::new("network", message)
        }
    }

    /// This error of `GET /v1/providers`, as the failure of a submit that names a
    /// provider: the SDK could not tell whether it is the kind's primary, which decides
    /// the intent's key, so nothing was sent. Retryable.
    pub(crate) fn lookup(self) -> Self {
        Self {
            message: format!(
                "GET /v1/providers failed ({}), so the intent's key could not be named; nothing was sent: submit again",
                self.message
            ),
            retryable: true,
            ..self
        }
    }

    /// A network error caused by what `fetch` or a body read rejected with; `timeout`
    /// (retryable too) when it was the client's `timeoutMs` that aborted it.
    pub(crate) fn network_from(e: JsValue) -> Self {
        let mut error = Self::network(crate::js::describe(&e));
        if crate::js::get_string(&e, "name").as_deref() == Some("TimeoutError") {
            error.code = "timeout".to_owned();
        }
        error.caused_by(e)
    }

    /// A bad argument, caused by what JS threw on it (a `Request` it refused).
    pub(crate) fn invalid_from(e: JsValue) -> Self {
        Self::invalid(crate::js::describe(&e)).caused_by(e)
    }

    pub(crate) fn aborted() -> Self {
        Self::new("aborted", "the call was aborted by its AbortSignal")
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new("invalid_argument", message)
    }

    /// From a problem+json answer (or a bare status when the body was not one).
    pub(crate) fn from_problem(status: u16, problem: Option<Problem>) -> Self {
        match problem {
            Some(p) => Self {
                code: p.code,
                message: p.detail,
                status: Some(status),
                retryable: p.retryable,
                job_id: p.job_id,
                cause: JsValue::UNDEFINED,
            },
            None => Self {
                code: ["http_", &decimal(status.into())].concat(),
                message: ["the server answered ", &decimal(status.into())].concat(),
                status: Some(status),
                retryable: status == 429 || status == 503,
                job_id: None,
                cause: JsValue::UNDEFINED,
            },
        }
    }
}
