//! An answer as a client sees it, and what a cancel, a resolve and a read may answer.

use onceclick_protocol::{AttemptState, ErrorCode, Job, JobStatus};
use serde_json::Value;

/// An answer as a client sees it: its status, its problem's code, and what it names.
#[derive(Clone, Copy, Debug)]
pub struct Reply<'a> {
    pub status: u16,
    /// The problem's `code`, for an error.
    pub code: Option<ErrorCode>,
    /// The job's document, for a success that carries one.
    pub job: Option<&'a Job>,
    /// The attempt the fallback button's answer made or replayed.
    pub attempt_id: Option<&'a str>,
    /// The job a problem names (its `job_id`), if any.
    pub problem_job: Option<&'a str>,
}

impl Reply<'_> {
    /// A failure on our side: any `5xx` but `503 service_unavailable` (the store out
    /// for a moment, which a client tries again).
    pub fn failed_on_our_side(&self) -> bool {
        self.status >= 500 && self.code != Some(ErrorCode::ServiceUnavailable)
    }

    /// A refusal: any `4xx` but `429`. A refused request writes nothing (the figures'
    /// counters aside).
    pub fn is_refusal(&self) -> bool {
        (400..500).contains(&self.status) && self.status != 429
    }

    /// `503`: the request may or may not have done its work, and says nothing more.
    pub fn is_unavailable(&self) -> bool {
        self.status == 503
    }
}

/// What an admin's `resolve` of an `unknown` attempt says it became.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    Succeeded,
    Failed,
    Cancelled,
}

impl Resolution {
    /// The body's `outcome`.
    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Succeeded => "succeeded",
            Resolution::Failed => "failed",
            Resolution::Cancelled => "cancelled",
        }
    }

    /// Whether an attempt resolved so may now be in `state`: a result resolved by hand
    /// wins, or is superseded by a winner that came first.
    pub fn leaves(self, state: AttemptState) -> bool {
        match self {
            Resolution::Succeeded => {
                matches!(state, AttemptState::Succeeded | AttemptState::Superseded)
            }
            Resolution::Failed => state == AttemptState::Failed,
            Resolution::Cancelled => state == AttemptState::Cancelled,
        }
    }
}

/// The answer to a cancel of `job`: the job, `cancelled`; `409 job_finished`; or `404`,
/// only for a job that is gone (`gone` is asked only then).
pub fn cancel_answer(job: &str, reply: &Reply, gone: impl FnOnce() -> bool) -> Result<(), String> {
    match (reply.status, reply.code, reply.job) {
        (200, _, Some(doc)) if doc.status == JobStatus::Cancelled => Ok(()),
        (409, Some(ErrorCode::JobFinished), _) => Ok(()),
        (404, _, _) if gone() => Ok(()),
        (status, code, _) => Err(format!("cancel of {job} answered {status} {code:?}")),
    }
}

/// The answer to a resolve of `attempt` as `outcome`: the job, with the attempt as
/// [`Resolution::leaves`] says; else `409 attempt_not_unknown` or `job_finished`, or
/// `404`, never for an attempt that exists (`exists` is asked only then).
pub fn resolve_answer(
    attempt: &str,
    outcome: Resolution,
    reply: &Reply,
    exists: impl FnOnce() -> bool,
) -> Result<(), String> {
    let (status, code) = (reply.status, reply.code);
    if status == 200 {
        let state = reply
            .job
            .and_then(|j| j.attempts.iter().find(|a| a.id == attempt))
            .map(|a| a.state);
        return match state {
            Some(state) if outcome.leaves(state) => Ok(()),
            _ => Err(format!(
                "resolve {attempt} as {} left it {state:?}",
                outcome.as_str()
            )),
        };
    }
    if code == Some(ErrorCode::NotFound) && exists() {
        return Err(format!(
            "resolve {attempt} answered 404, and the attempt exists"
        ));
    }
    match code {
        Some(ErrorCode::AttemptNotUnknown | ErrorCode::JobFinished | ErrorCode::NotFound) => Ok(()),
        _ => Err(format!("resolve {attempt} answered {status} {code:?}")),
    }
}

/// The answer to a read of `job`: that job, showing no result but `known` (the one it
/// was last seen with, if any: a read that ran before the result was set shows none);
/// or `404`, only for a job that is gone (`gone` is asked only then).
pub fn read_answer(
    job: &str,
    known: Option<&Value>,
    reply: &Reply,
    gone: impl FnOnce() -> bool,
) -> Result<(), String> {
    match (reply.status, reply.job) {
        (200, Some(doc)) => {
            let other_result =
                known.is_some() && doc.result.is_some() && doc.result.as_ref() != known;
            if doc.id != job || other_result {
                return Err(format!(
                    "a read of {job} answered {} with result {:?}, not {known:?}",
                    doc.id, doc.result
                ));
            }
            Ok(())
        }
        (404, _) if gone() => Ok(()),
        (status, _) => Err(format!(
            "a read of {job} answered {status} {:?}",
            reply.code
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(id: &str, status: &str, result: Option<Value>) -> Job {
        serde_json::from_value(json!({
            "id": id, "kind": "summarize", "status": status, "version": 1,
            "input": {"text": "t"}, "provider": "primary", "result": result,
            "completed_by": null, "created_at": "", "updated_at": "",
            "attempts": [{"id": "att_1", "n": 1, "provider": "primary", "state": "superseded",
                          "started_at": "", "finished_at": null, "error": null}],
        }))
        .unwrap_or_else(|e| panic!("a job document: {e}"))
    }

    fn reply(status: u16, code: Option<ErrorCode>, job: Option<&Job>) -> Reply<'_> {
        Reply {
            status,
            code,
            job,
            attempt_id: None,
            problem_job: None,
        }
    }

    #[test]
    fn a_refusal_is_a_4xx_but_429_and_a_failure_on_our_side_a_5xx_but_503() {
        assert!(reply(409, None, None).is_refusal());
        assert!(!reply(429, None, None).is_refusal());
        assert!(reply(500, Some(ErrorCode::Internal), None).failed_on_our_side());
        let unavailable = reply(503, Some(ErrorCode::ServiceUnavailable), None);
        assert!(!unavailable.failed_on_our_side() && unavailable.is_unavailable());
    }

    #[test]
    fn a_cancel_answers_404_only_for_a_job_that_is_gone() {
        let doc = job("job_1", "cancelled", None);
        assert!(cancel_answer("job_1", &reply(200, None, Some(&doc)), || false).is_ok());
        let not_found = reply(404, Some(ErrorCode::NotFound), None);
        assert!(cancel_answer("job_1", &not_found, || true).is_ok());
        assert!(cancel_answer("job_1", &not_found, || false).is_err());
        let running = job("job_1", "running", None);
        assert!(cancel_answer("job_1", &reply(200, None, Some(&running)), || true).is_err());
    }

    #[test]
    fn a_result_resolved_by_hand_may_be_superseded_and_a_404_needs_the_attempt_gone() {
        let doc = job("job_1", "succeeded", None);
        let ok = reply(200, None, Some(&doc));
        assert!(resolve_answer("att_1", Resolution::Succeeded, &ok, || true).is_ok());
        assert!(resolve_answer("att_1", Resolution::Failed, &ok, || true).is_err());
        let not_found = reply(404, Some(ErrorCode::NotFound), None);
        assert!(resolve_answer("att_1", Resolution::Failed, &not_found, || true).is_err());
        assert!(resolve_answer("att_1", Resolution::Failed, &not_found, || false).is_ok());
    }

    #[test]
    fn a_read_shows_no_result_but_the_one_known() {
        let known = json!({"summary": "a"});
        let shown = job("job_1", "succeeded", Some(json!({"summary": "b"})));
        assert!(read_answer(
            "job_1",
            Some(&known),
            &reply(200, None, Some(&shown)),
            || false
        )
        .is_err());
        let none_yet = job("job_1", "running", None);
        assert!(read_answer(
            "job_1",
            Some(&known),
            &reply(200, None, Some(&none_yet)),
            || false
        )
        .is_ok());
        assert!(read_answer("job_2", None, &reply(200, None, Some(&none_yet)), || false).is_err());
    }
}
