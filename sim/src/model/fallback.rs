//! The fallback button (`POST /v1/jobs/{id}/attempts`, with its own `Idempotency-Key`):
//! when it is refused, and what its key may answer.

use super::Reply;
use onceclick_protocol::{AttemptState, ErrorCode, JobStatus};

/// The codes the fallback button may be refused with.
pub const FALLBACK_REFUSALS: &[ErrorCode] = &[
    ErrorCode::JobFinished,
    ErrorCode::AttemptUnresolved,
    ErrorCode::AttemptInFlight,
    ErrorCode::IdempotencyKeyReused,
    ErrorCode::ProviderNotCertified,
    ErrorCode::NotFound,
    ErrorCode::UnknownProvider,
];

/// Why the fallback button is refused on a job that has `ended` (succeeded or
/// cancelled) and whose attempts are in `states`, in the contract's order: an ended job
/// (`job_finished`), an `unknown` attempt (`attempt_unresolved`: the provider may still
/// be working), a `starting` or `running` one (`attempt_in_flight`). `None`: a new
/// attempt may be added.
pub fn fallback_refusal(
    ended: bool,
    states: impl IntoIterator<Item = AttemptState>,
) -> Option<ErrorCode> {
    if ended {
        return Some(ErrorCode::JobFinished);
    }
    let states: Vec<AttemptState> = states.into_iter().collect();
    if states.contains(&AttemptState::Unknown) {
        Some(ErrorCode::AttemptUnresolved)
    } else if states.iter().any(|s| s.is_in_flight()) {
        Some(ErrorCode::AttemptInFlight)
    } else {
        None
    }
}

/// What a client knows of one fallback key of a job: the body (the provider it names)
/// whose answer first named an attempt, and that attempt.
#[derive(Clone, Debug, Default)]
pub struct FallbackKey {
    made_with: Option<Option<String>>,
    attempt: Option<String>,
}

impl FallbackKey {
    /// The answer to a click with key `key` on `job`, naming `body`'s provider: `200` or
    /// `201` with the key's one attempt, made by this body, and (a `201`) added to a job
    /// that [`fallback_refusal`] did not refuse; or one of [`FALLBACK_REFUSALS`].
    pub fn answer(
        &mut self,
        job: &str,
        key: &str,
        body: Option<&str>,
        reply: &Reply,
    ) -> Vec<String> {
        let made = matches!(reply.status, 200 | 201)
            .then_some(reply.attempt_id)
            .flatten();
        let Some(attempt) = made else {
            return match reply.code {
                Some(code) if FALLBACK_REFUSALS.contains(&code) => Vec::new(),
                code => vec![format!(
                    "fallback on {job} answered {} {code:?}",
                    reply.status
                )],
            };
        };
        let mut broken = Vec::new();
        // A key's attempt answers only the body that made it.
        match &self.made_with {
            Some(first) if first.as_deref() != body => broken.push(format!(
                "fallback key {key} of {job} answered the body {body:?} with the attempt of {first:?}"
            )),
            _ => self.made_with = Some(body.map(str::to_owned)),
        }
        match &self.attempt {
            Some(first) if first != attempt => broken.push(format!(
                "fallback key {key} of {job} made attempt {attempt} after {first}"
            )),
            _ => self.attempt = Some(attempt.to_owned()),
        }
        if let (201, Some(doc)) = (reply.status, reply.job) {
            let ended = doc.result.is_some() || doc.status == JobStatus::Cancelled;
            let others = doc
                .attempts
                .iter()
                .filter(|a| a.id != attempt)
                .map(|a| a.state);
            match fallback_refusal(ended, others) {
                None => {}
                Some(ErrorCode::JobFinished) => broken.push(format!(
                    "fallback {attempt} was added to {job}, which had ended ({})",
                    doc.status.as_str()
                )),
                Some(_) => broken.push(format!(
                    "fallback {attempt} of {job} was added beside a live or unknown attempt"
                )),
            }
        }
        broken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, code: Option<ErrorCode>, attempt_id: Option<&str>) -> Reply<'_> {
        Reply {
            status,
            code,
            job: None,
            attempt_id,
            problem_job: None,
        }
    }

    #[test]
    fn the_button_is_refused_in_the_contracts_order() {
        use AttemptState::*;
        assert_eq!(
            fallback_refusal(true, [Failed]),
            Some(ErrorCode::JobFinished)
        );
        assert_eq!(
            fallback_refusal(false, [Running, Unknown]),
            Some(ErrorCode::AttemptUnresolved)
        );
        assert_eq!(
            fallback_refusal(false, [Failed, Starting]),
            Some(ErrorCode::AttemptInFlight)
        );
        assert_eq!(fallback_refusal(false, [Failed, Abandoned]), None);
    }

    #[test]
    fn a_fallback_key_answers_one_attempt_and_only_the_body_that_made_it() {
        let mut key = FallbackKey::default();
        assert!(key
            .answer(
                "job_1",
                "fb1",
                Some("fallback"),
                &reply(201, None, Some("att_2"))
            )
            .is_empty());
        assert!(key
            .answer(
                "job_1",
                "fb1",
                Some("fallback"),
                &reply(200, None, Some("att_2"))
            )
            .is_empty());
        assert_eq!(
            key.answer("job_1", "fb1", None, &reply(200, None, Some("att_2")))
                .len(),
            1
        );
        assert_eq!(
            key.answer(
                "job_1",
                "fb1",
                Some("fallback"),
                &reply(200, None, Some("att_3"))
            )
            .len(),
            1
        );
        let reused = reply(409, Some(ErrorCode::IdempotencyKeyReused), None);
        assert!(key.answer("job_1", "fb1", None, &reused).is_empty());
        let failed = reply(500, Some(ErrorCode::Internal), None);
        assert_eq!(key.answer("job_1", "fb1", None, &failed).len(), 1);
    }
}
