use serde::{Deserialize, Serialize};

/// The stable machine codes of the API. Clients branch on these, never on text.
///
/// The string form (`as_str`) is what travels in a problem's `code` member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// The bearer token is missing, malformed, badly signed, not HS256, or expired.
    /// Get a fresh token; retrying the same one will not help.
    Unauthorized,
    /// The token is valid but lacks the `admin` role this call needs.
    Forbidden,
    /// No such resource for this owner. Another owner's job answers this too.
    NotFound,
    /// The path exists but not for this method.
    MethodNotAllowed,
    /// `POST /v1/jobs` without an `Idempotency-Key` header.
    IdempotencyKeyMissing,
    /// The `Idempotency-Key` is empty, longer than 255, or has a character outside 0x21–0x7E.
    IdempotencyKeyInvalid,
    /// The request body is larger than 64 KiB.
    PayloadTooLarge,
    /// The body is not I-JSON (RFC 7493), or not the shape the endpoint takes.
    InvalidJson,
    /// A query parameter of a list is unknown, repeated or out of range, or its cursor
    /// is not one the API gave.
    InvalidQuery,
    /// A `Last-Event-ID` (or a multi-job stream's position) that is not a position of
    /// a job's stream.
    InvalidLastEventId,
    /// The job kind is not one this deployment declares.
    UnknownKind,
    /// The input fails the kind's input schema.
    InvalidInput,
    /// The provider is not configured, or not one the kind names.
    UnknownProvider,
    /// The key is bound to a job made from another request (another fingerprint).
    /// Use a new key for a new intent.
    IdempotencyKeyReused,
    /// An attempt is `starting` or `running`. Wait for it; this is retryable.
    AttemptInFlight,
    /// An attempt is `unknown`: resolve it (admin) or cancel the job first.
    AttemptUnresolved,
    /// The job is `succeeded` or `cancelled`; nothing more can happen to it.
    JobFinished,
    /// Only an attempt in the `unknown` state can be resolved.
    AttemptNotUnknown,
    /// The provider has not passed the contract test for this kind and contract version.
    ProviderNotCertified,
    /// `If-Match` named a version of the job that is no longer current.
    PreconditionFailed,
    /// The provider's output broke the kind's contract (attempt error, not an HTTP answer).
    ContractViolation,
    /// The owner sent more creates, attempts and lists than the per-owner limit allows; nothing
    /// was written. Send the same request again after `Retry-After` seconds.
    RateLimited,
    /// The owner opened more live streams than its own stream limit allows (a budget
    /// apart from creates', which this does not touch). Poll the job meanwhile, or open
    /// the stream again after `Retry-After` seconds.
    StreamRateLimited,
    /// The job has as many live streams open as one job may; retry later.
    TooManySubscribers,
    /// A dependency (D1, the queue) did not answer. Generally transient; retry with backoff.
    ServiceUnavailable,
    /// A bug on our side. Nothing the client sent causes this.
    Internal,
}

impl ErrorCode {
    /// Every code, for docs and exhaustive tests.
    pub const ALL: &'static [ErrorCode] = &[
        Self::Unauthorized,
        Self::Forbidden,
        Self::NotFound,
        Self::MethodNotAllowed,
        Self::IdempotencyKeyMissing,
        Self::IdempotencyKeyInvalid,
        Self::PayloadTooLarge,
        Self::InvalidJson,
        Self::InvalidQuery,
        Self::InvalidLastEventId,
        Self::UnknownKind,
        Self::InvalidInput,
        Self::UnknownProvider,
        Self::IdempotencyKeyReused,
        Self::AttemptInFlight,
        Self::AttemptUnresolved,
        Self::JobFinished,
        Self::AttemptNotUnknown,
        Self::ProviderNotCertified,
        Self::PreconditionFailed,
        Self::ContractViolation,
        Self::RateLimited,
        Self::StreamRateLimited,
        Self::TooManySubscribers,
        Self::ServiceUnavailable,
        Self::Internal,
    ];

    /// The machine code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::IdempotencyKeyMissing => "idempotency_key_missing",
            Self::IdempotencyKeyInvalid => "idempotency_key_invalid",
            Self::PayloadTooLarge => "payload_too_large",
            Self::InvalidJson => "invalid_json",
            Self::InvalidQuery => "invalid_query",
            Self::InvalidLastEventId => "invalid_last_event_id",
            Self::UnknownKind => "unknown_kind",
            Self::InvalidInput => "invalid_input",
            Self::UnknownProvider => "unknown_provider",
            Self::IdempotencyKeyReused => "idempotency_key_reused",
            Self::AttemptInFlight => "attempt_in_flight",
            Self::AttemptUnresolved => "attempt_unresolved",
            Self::JobFinished => "job_finished",
            Self::AttemptNotUnknown => "attempt_not_unknown",
            Self::ProviderNotCertified => "provider_not_certified",
            Self::PreconditionFailed => "precondition_failed",
            Self::ContractViolation => "contract_violation",
            Self::RateLimited => "rate_limited",
            Self::StreamRateLimited => "stream_rate_limited",
            Self::TooManySubscribers => "too_many_subscribers",
            Self::ServiceUnavailable => "service_unavailable",
            Self::Internal => "internal",
        }
    }

    /// Parses a wire code; `None` for a code this version does not know.
    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.as_str() == code)
    }

    /// The HTTP status this code is answered with.
    pub fn status(self) -> u16 {
        match self {
            Self::Unauthorized => 401,
            Self::Forbidden => 403,
            Self::NotFound => 404,
            Self::MethodNotAllowed => 405,
            Self::IdempotencyKeyMissing
            | Self::IdempotencyKeyInvalid
            | Self::InvalidJson
            | Self::InvalidQuery
            | Self::InvalidLastEventId => 400,
            Self::PayloadTooLarge => 413,
            Self::UnknownKind
            | Self::InvalidInput
            | Self::UnknownProvider
            | Self::ProviderNotCertified
            | Self::ContractViolation => 422,
            Self::IdempotencyKeyReused
            | Self::AttemptInFlight
            | Self::AttemptUnresolved
            | Self::JobFinished
            | Self::AttemptNotUnknown => 409,
            Self::PreconditionFailed => 412,
            Self::RateLimited | Self::StreamRateLimited | Self::TooManySubscribers => 429,
            Self::ServiceUnavailable => 503,
            Self::Internal => 500,
        }
    }

    /// Whether the same request may succeed if sent again later (it then carries `Retry-After`).
    pub fn retryable(self) -> bool {
        matches!(
            self,
            Self::AttemptInFlight
                | Self::RateLimited
                | Self::StreamRateLimited
                | Self::TooManySubscribers
                | Self::ServiceUnavailable
        )
    }

    /// A short human title, the same for every occurrence of the code (RFC 9457 `title`).
    pub fn title(self) -> &'static str {
        match self {
            Self::Unauthorized => "Missing or invalid bearer token",
            Self::Forbidden => "This call needs the admin role",
            Self::NotFound => "Not found",
            Self::MethodNotAllowed => "Method not allowed",
            Self::IdempotencyKeyMissing => "Idempotency-Key header is required",
            Self::IdempotencyKeyInvalid => "Idempotency-Key header is malformed",
            Self::PayloadTooLarge => "Request body is too large",
            Self::InvalidJson => "Request body is not valid I-JSON",
            Self::InvalidQuery => "A query parameter is not valid",
            Self::InvalidLastEventId => "Last-Event-ID is not a position of this stream",
            Self::UnknownKind => "Unknown job kind",
            Self::InvalidInput => "Input does not match the kind's input schema",
            Self::UnknownProvider => "Unknown provider",
            Self::IdempotencyKeyReused => "Idempotency-Key was used for another request",
            Self::AttemptInFlight => "An attempt is already in flight",
            Self::AttemptUnresolved => "An attempt is in the unknown state",
            Self::JobFinished => "The job has finished",
            Self::AttemptNotUnknown => "The attempt is not in the unknown state",
            Self::ProviderNotCertified => "Provider is not certified for this kind",
            Self::PreconditionFailed => "The job changed since the given ETag",
            Self::ContractViolation => "Output breaks the kind's contract",
            Self::RateLimited => "Too many requests from this owner",
            Self::StreamRateLimited => "Too many stream opens from this owner",
            Self::TooManySubscribers => "Too many live streams on this job",
            Self::ServiceUnavailable => "Service temporarily unavailable",
            Self::Internal => "Internal error",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An RFC 9457 problem document, as every error of the API is answered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Problem {
    /// A URI reference naming the problem type: `/problems/{code}`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The code's fixed title.
    pub title: String,
    /// The HTTP status, repeated for convenience.
    pub status: u16,
    /// What went wrong with this request, for a human.
    pub detail: String,
    /// The stable machine code.
    pub code: String,
    /// Whether sending the same request again later may succeed.
    #[serde(default)]
    pub retryable: bool,
    /// The job concerned, where there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
}

impl Problem {
    /// The problem document for `code` with a request-specific `detail`.
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            type_: format!("/problems/{}", code.as_str()),
            title: code.title().to_owned(),
            status: code.status(),
            detail: detail.into(),
            code: code.as_str().to_owned(),
            retryable: code.retryable(),
            job_id: None,
        }
    }

    /// Names the job the problem concerns.
    pub fn with_job(mut self, job_id: impl Into<String>) -> Self {
        self.job_id = Some(job_id.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_wire_form() {
        for &code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
        assert_eq!(ErrorCode::parse("no_such_code"), None);
    }

    #[test]
    fn retryable_codes_are_the_ones_the_contract_names() {
        let retryable: Vec<_> = ErrorCode::ALL.iter().filter(|c| c.retryable()).collect();
        assert_eq!(
            retryable,
            [
                &ErrorCode::AttemptInFlight,
                &ErrorCode::RateLimited,
                &ErrorCode::StreamRateLimited,
                &ErrorCode::TooManySubscribers,
                &ErrorCode::ServiceUnavailable
            ]
        );
        assert!(!ErrorCode::AttemptUnresolved.retryable());
        assert!(!ErrorCode::IdempotencyKeyReused.retryable());
    }

    #[test]
    fn problem_carries_status_title_and_code() {
        let p = Problem::new(ErrorCode::IdempotencyKeyReused, "key k").with_job("job_1");
        assert_eq!(p.status, 409);
        assert_eq!(p.code, "idempotency_key_reused");
        assert_eq!(p.type_, "/problems/idempotency_key_reused");
        assert_eq!(p.job_id.as_deref(), Some("job_1"));
    }
}
