use crate::{AttemptState, JobStatus};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The body of `POST /v1/jobs`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateJob {
    /// The job kind, e.g. `summarize`.
    pub kind: String,
    /// The kind's input; checked against its input schema.
    pub input: Value,
    /// The provider for the first attempt; the kind's primary when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

/// The body of `POST /v1/jobs/{id}/attempts`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewAttempt {
    /// The provider; the kind's next one in failover order when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

/// The durable record of one intent. The database renders it (`job_documents`). Read
/// tolerantly: a member added by a migration that runs before its deploy (as an
/// additive one does) is passed over by the Worker still running, not refused with a
/// 500 on every read. That the view and this type name the same members is the schema
/// tests' check (`tests/tests/schema.rs`: a document read back and written again is the
/// same JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// `job_` + UUIDv7.
    pub id: String,
    /// The kind it was created with.
    pub kind: String,
    /// Where it stands.
    pub status: JobStatus,
    /// Bumped by every change to the job row.
    pub version: i64,
    /// The input as created.
    pub input: Value,
    /// The provider of its first attempt.
    pub provider: String,
    /// The winning attempt's output; never changes once set.
    pub result: Option<Value>,
    /// The id of the attempt that won.
    pub completed_by: Option<String>,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// RFC 3339 UTC.
    pub updated_at: String,
    /// Every attempt, oldest first.
    pub attempts: Vec<Attempt>,
}

/// One try of a job against one provider. Read tolerantly, as [`Job`] is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// `att_` + UUIDv7. Also the `Idempotency-Key` sent to the provider.
    pub id: String,
    /// 1 for the first attempt of its job, then 2, 3, …
    pub n: i64,
    /// The provider it runs against.
    pub provider: String,
    /// Where it stands.
    pub state: AttemptState,
    /// RFC 3339 UTC.
    pub started_at: String,
    /// RFC 3339 UTC, once final or unknown.
    pub finished_at: Option<String>,
    /// Why it failed, where it did.
    pub error: Option<AttemptError>,
    /// The tokens its provider stated for its answer (`{prompt, completion}`), once it
    /// answered. (A JSON value, not a type of its own: a derived reader would cost the
    /// Worker about a kilobyte, for a member it never reads.)
    #[serde(default)]
    pub tokens: Option<serde_json::Value>,
}

/// Why an attempt failed or went unknown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptError {
    /// A stable code such as `provider_timeout`, `provider_unavailable` or
    /// `contract_violation`.
    pub code: String,
    /// What happened, for a human.
    pub message: String,
    /// Whether a new attempt may succeed where this one failed.
    pub retryable: bool,
}

impl AttemptError {
    /// An attempt error with its code, message and whether a new attempt may help.
    pub fn new(code: &str, message: impl Into<String>, retryable: bool) -> Self {
        Self {
            code: code.to_owned(),
            message: message.into(),
            retryable,
        }
    }
}

/// The kinds of entry in a job's append-only log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum EventType {
    JobCreated,
    AttemptStarted,
    AttemptRunning,
    AttemptSucceeded,
    AttemptFailed,
    AttemptTimedOut,
    AttemptResolved,
    RaceLost,
    LateResultDiscarded,
    JobCancelled,
    FailoverSkipped,
    DispatchIgnored,
}

impl EventType {
    /// The wire and database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::JobCreated => "job_created",
            Self::AttemptStarted => "attempt_started",
            Self::AttemptRunning => "attempt_running",
            Self::AttemptSucceeded => "attempt_succeeded",
            Self::AttemptFailed => "attempt_failed",
            Self::AttemptTimedOut => "attempt_timed_out",
            Self::AttemptResolved => "attempt_resolved",
            Self::RaceLost => "race_lost",
            Self::LateResultDiscarded => "late_result_discarded",
            Self::JobCancelled => "job_cancelled",
            Self::FailoverSkipped => "failover_skipped",
            Self::DispatchIgnored => "dispatch_ignored",
        }
    }
}

/// One entry of `GET /v1/jobs/{id}/events`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the job's log, strictly increasing.
    pub seq: i64,
    /// What happened.
    #[serde(rename = "type")]
    pub type_: EventType,
    /// RFC 3339 UTC.
    pub at: String,
    /// The attempt concerned, where there is one.
    pub attempt_id: Option<String>,
    /// Event-specific details (e.g. `winner` and `loser` for `race_lost`).
    pub details: Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_job_refuses_unknown_members() {
        let ok: Result<CreateJob, _> =
            serde_json::from_str(r#"{"kind":"summarize","input":{"text":"x"}}"#);
        assert_eq!(ok.unwrap().provider, None);
        let extra: Result<CreateJob, _> =
            serde_json::from_str(r#"{"kind":"summarize","input":{},"owner":"eve"}"#);
        assert!(extra.is_err());
    }

    #[test]
    fn a_job_document_with_a_member_added_later_is_still_read() {
        // What a migration that adds a member makes the view render, before the Worker
        // that knows the member is deployed.
        let doc = r#"{"id":"job_1","kind":"summarize","status":"running","version":2,
            "input":{"text":"x"},"provider":"primary","result":null,"completed_by":null,
            "created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z",
            "priority":3,
            "attempts":[{"id":"att_1","n":1,"provider":"primary","state":"running",
                "started_at":"2026-01-01T00:00:00Z","finished_at":null,"error":null,
                "region":"weur"}]}"#;
        let job: Job = serde_json::from_str(doc).expect("an added member is passed over");
        assert_eq!(job.attempts[0].state, AttemptState::Running);
        assert_eq!(job.attempts[0].tokens, None);
    }
}
