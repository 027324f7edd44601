//! The one place where errors become HTTP answers (RFC 9457 problem+json), and where a
//! runtime's failure becomes an error.

use onceclick_core::error::AppError;
use onceclick_protocol::{ErrorCode, Problem};

pub(crate) fn respond(e: AppError) -> worker::Response {
    let mut problem = Problem::new(e.code, e.detail);
    if let Some(job) = e.job_id {
        problem = problem.with_job(job);
    }
    let body = serde_json::to_string(&problem).unwrap_or_default();
    let headers = worker::Headers::new();
    let _ = headers.set("Content-Type", "application/problem+json");
    if e.code == ErrorCode::Unauthorized {
        let _ = headers.set("WWW-Authenticate", "Bearer");
    }
    if e.code.retryable() {
        let seconds = e.retry_after_s.unwrap_or(1);
        let _ = headers.set("Retry-After", &seconds.to_string());
    }
    worker::Response::builder()
        .with_status(e.code.status())
        .with_headers(headers)
        .fixed(body.into_bytes())
}

/// A runtime call that failed (a binding, a body, a header): a failure on our side.
pub(crate) fn runtime(e: worker::Error) -> AppError {
    AppError::internal(e)
}

/// `AppError::into_response`, as the Worker's handlers call it.
pub(crate) trait IntoResponse {
    fn into_response(self) -> worker::Response;
}

impl IntoResponse for AppError {
    fn into_response(self) -> worker::Response {
        respond(self)
    }
}
