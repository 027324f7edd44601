//! `OnceclickError`: the one error type the SDK rejects with.

use crate::decimal::decimal;
use onceclick_protocol::Problem;
use wasm_bindgen::prelude::*;

/// Why a call failed. Branch on `code` (an `ErrorCode`): one of the API's problem codes,
/// `network`, `aborted`, `timeout`, `invalid_argument`, `invalid_response` from the SDK
/// itself, or `http_<status>` for an answer that was not problem+json.
#[wasm_bindgen]
#[derive(Debug, Clone)]
pub struct OnceclickError {
    code: String,
    message: String,
    status: Option<u16>,
    retryable: bool,
    job_id: Option<String>,
}

#[wasm_bindgen]
impl OnceclickError {
    /// The stable machine code.
    #[wasm_bindgen(getter, unchecked_return_type = "ErrorCode")]
    pub fn code(&self) -> JsValue {
        JsValue::from_str(&self.code)
    }

    /// What went wrong, for a human.
    #[wasm_bindgen(getter, unchecked_return_type = "string")]
    pub fn message(&self) -> JsValue {
        JsValue::from_str(&self.message)
    }

    /// The HTTP status, when the server answered.
    #[wasm_bindgen(getter)]
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// Whether the same call may succeed later (the SDK has already retried it).
    #[wasm_bindgen(getter)]
    pub fn retryable(&self) -> bool {
        self.retryable
    }

    /// The job concerned, where known.
    #[wasm_bindgen(getter, js_name = jobId, unchecked_return_type = "string | undefined")]
    pub fn job_id(&self) -> JsValue {
        self.job_id
            .as_deref()
            .map_or(JsValue::UNDEFINED, JsValue::from_str)
    }

    /// Always `"OnceclickError"`, as on an `Error`.
    #[wasm_bindgen(getter, unchecked_return_type = "string")]
    pub fn name(&self) -> JsValue {
        JsValue::from_str("OnceclickError")
    }

    /// `OnceclickError [code]: message`.
    #[wasm_bindgen(js_name = toString, unchecked_return_type = "string")]
    pub fn to_js_string(&self) -> JsValue {
        JsValue::from_str(&format!("OnceclickError [{}]: {}", self.code, self.message))
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
        }
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
            },
            None => Self {
                code: ["http_", &decimal(status.into())].concat(),
                message: ["the server answered ", &decimal(status.into())].concat(),
                status: Some(status),
                retryable: status == 429 || status == 503,
                job_id: None,
            },
        }
    }
}
