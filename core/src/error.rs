//! What every decision fails with (`AppError`): the Worker turns it into its HTTP answer
//! (RFC 9457 problem+json) in one place, `edge/src/problem.rs`.
//!
//! Building an `AppError` has no side effects. The cause of a failure on our side rides
//! along in `cause` (never sent: it may name internals) and is logged once, at the
//! boundary that gives up on it: `api::handle` (with method and path),
//! the Worker's `queue::consume` (with the attempt id), and its cron handler.

use onceclick_protocol::ErrorCode;

/// Everything a handler can fail with. Handlers return `Result<_, AppError>` and use `?`;
/// only the Worker's `problem::respond` knows about status codes and headers.
#[derive(Debug)]
pub struct AppError {
    pub code: ErrorCode,
    pub detail: String,
    pub job_id: Option<String>,
    /// What really went wrong, for the log; `None` for a client's mistake.
    pub cause: Option<String>,
    /// `Retry-After` in seconds for a retryable answer (1 unless set).
    pub retry_after_s: Option<u32>,
}

impl AppError {
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
            job_id: None,
            cause: None,
            retry_after_s: None,
        }
    }

    /// The same error, telling the client to wait `seconds` before sending it again.
    pub fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after_s = Some(seconds);
        self
    }

    /// The same error, with `cause` kept for the log.
    pub fn with_cause(mut self, cause: impl std::fmt::Display) -> Self {
        self.cause = Some(cause.to_string());
        self
    }

    /// What the log should say: the cause if there is one, else the detail.
    pub fn cause_or_detail(&self) -> &str {
        self.cause.as_deref().unwrap_or(&self.detail)
    }

    pub fn with_job(mut self, job_id: &str) -> Self {
        self.job_id = Some(job_id.to_owned());
        self
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(ErrorCode::NotFound, format!("{what} does not exist"))
    }

    /// A failure on our side. The cause is kept for the log, never sent.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        Self::new(
            ErrorCode::Internal,
            "the request could not be completed; it is safe to retry with the same Idempotency-Key",
        )
        .with_cause(cause)
    }

    /// D1 failed or did not answer: the call may not have reached it, or may have
    /// committed and lost its reply. Every store call is safe to send again, so the
    /// client is told to retry (503, `Retry-After`); the cause is kept for the log.
    pub fn unavailable(cause: impl std::fmt::Display) -> Self {
        Self::new(
            ErrorCode::ServiceUnavailable,
            "the database did not answer; it is safe to retry with the same Idempotency-Key",
        )
        .with_cause(cause)
    }

    /// Whether the failure was the database's (worth retrying the same write).
    pub fn is_unavailable(&self) -> bool {
        self.code == ErrorCode::ServiceUnavailable
    }
}

pub type ApiResult<T> = Result<T, AppError>;
