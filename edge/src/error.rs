//! The one place where errors become HTTP answers (RFC 9457 problem+json).
//!
//! Building an `AppError` has no side effects. The cause of a failure on our side rides
//! along in `cause` (never sent: it may name internals) and is logged once, at the
//! boundary that gives up on it: `api::handle` (with method and path),
//! `dispatch::consume` (with the attempt id), and the cron handler.

use onceclick_protocol::{ErrorCode, Problem};

/// Everything a handler can fail with. Handlers return `Result<_, AppError>` and use `?`;
/// only [`AppError::into_response`] knows about status codes and headers.
#[derive(Debug)]
pub(crate) struct AppError {
    pub(crate) code: ErrorCode,
    pub(crate) detail: String,
    pub(crate) job_id: Option<String>,
    /// What really went wrong, for the log; `None` for a client's mistake.
    pub(crate) cause: Option<String>,
    /// `Retry-After` in seconds for a retryable answer (1 unless set).
    pub(crate) retry_after_s: Option<u32>,
}

impl AppError {
    pub(crate) fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
            job_id: None,
            cause: None,
            retry_after_s: None,
        }
    }

    /// The same error, telling the client to wait `seconds` before sending it again.
    pub(crate) fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after_s = Some(seconds);
        self
    }

    /// The same error, with `cause` kept for the log.
    pub(crate) fn with_cause(mut self, cause: impl std::fmt::Display) -> Self {
        self.cause = Some(cause.to_string());
        self
    }

    /// What the log should say: the cause if there is one, else the detail.
    pub(crate) fn cause_or_detail(&self) -> &str {
        self.cause.as_deref().unwrap_or(&self.detail)
    }

    pub(crate) fn with_job(mut self, job_id: &str) -> Self {
        self.job_id = Some(job_id.to_owned());
        self
    }

    pub(crate) fn not_found(what: &str) -> Self {
        Self::new(ErrorCode::NotFound, format!("{what} does not exist"))
    }

    /// A failure on our side. The cause is kept for the log, never sent.
    pub(crate) fn internal(cause: impl std::fmt::Display) -> Self {
        Self::new(
            ErrorCode::Internal,
            "the request could not be completed; it is safe to retry with the same Idempotency-Key",
        )
        .with_cause(cause)
    }

    /// D1 failed or did not answer: the call may not have reached it, or may have
    /// committed and lost its reply. Every store call is safe to send again, so the
    /// client is told to retry (503, `Retry-After`); the cause is kept for the log.
    pub(crate) fn unavailable(cause: impl std::fmt::Display) -> Self {
        Self::new(
            ErrorCode::ServiceUnavailable,
            "the database did not answer; it is safe to retry with the same Idempotency-Key",
        )
        .with_cause(cause)
    }

    /// Whether the failure was the database's (worth retrying the same write).
    pub(crate) fn is_unavailable(&self) -> bool {
        self.code == ErrorCode::ServiceUnavailable
    }

    pub(crate) fn into_response(self) -> worker::Response {
        let mut problem = Problem::new(self.code, self.detail);
        if let Some(job) = self.job_id {
            problem = problem.with_job(job);
        }
        let body = serde_json::to_string(&problem).unwrap_or_default();
        let headers = worker::Headers::new();
        let _ = headers.set("Content-Type", "application/problem+json");
        if self.code == ErrorCode::Unauthorized {
            let _ = headers.set("WWW-Authenticate", "Bearer");
        }
        if self.code.retryable() {
            let seconds = self.retry_after_s.unwrap_or(1);
            let _ = headers.set("Retry-After", &seconds.to_string());
        }
        worker::Response::builder()
            .with_status(self.code.status())
            .with_headers(headers)
            .fixed(body.into_bytes())
    }
}

impl From<worker::Error> for AppError {
    fn from(e: worker::Error) -> Self {
        Self::internal(e)
    }
}

pub(crate) type ApiResult<T> = Result<T, AppError>;
