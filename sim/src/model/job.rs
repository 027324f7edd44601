//! A job as a client reads it, and what it may become from one read to the next.

use onceclick_protocol::{AttemptState, Job, JobStatus};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The error code an attempt a person resolved as failed carries.
const RESOLVED_FAILED: &str = "resolved_failed";

/// A job as read: what its promises are about.
#[derive(Clone, Debug, PartialEq)]
pub struct JobView {
    pub status: JobStatus,
    pub result: Option<Value>,
    pub completed_by: Option<String>,
    /// Each attempt's state, by id.
    pub attempts: BTreeMap<String, AttemptState>,
    /// The attempts a person resolved as failed (their error's code is
    /// `resolved_failed`).
    pub resolved_failed: BTreeSet<String>,
    /// RFC 3339 UTC: its last change.
    pub updated_at: String,
}

impl JobView {
    /// The view of a job's document.
    pub fn of(job: &Job) -> Self {
        Self {
            status: job.status,
            result: job.result.clone(),
            completed_by: job.completed_by.clone(),
            attempts: job
                .attempts
                .iter()
                .map(|a| (a.id.clone(), a.state))
                .collect(),
            resolved_failed: job
                .attempts
                .iter()
                .filter(|a| a.error.as_ref().is_some_and(|e| e.code == RESOLVED_FAILED))
                .map(|a| a.id.clone())
                .collect(),
            updated_at: job.updated_at.clone(),
        }
    }

    /// Whether an attempt's error (as its JSON text) says a person resolved it as
    /// failed.
    pub fn resolved_failed_error(error: &str) -> bool {
        error.contains(&format!("\"{RESOLVED_FAILED}\""))
    }

    /// The promises a job keeps at every read: at most one winner; `succeeded` exactly
    /// when it names the attempt that completed it and has a result; and that attempt is
    /// its winner.
    pub fn broken(&self, job_id: &str) -> Vec<String> {
        let mut broken = Vec::new();
        let winners: Vec<&String> = self
            .attempts
            .iter()
            .filter(|(_, state)| **state == AttemptState::Succeeded)
            .map(|(id, _)| id)
            .collect();
        if winners.len() > 1 {
            broken.push(format!(
                "job {job_id} has {} winners: {winners:?}",
                winners.len()
            ));
        }
        let (status, result, completed_by) = (self.status, &self.result, &self.completed_by);
        if (status == JobStatus::Succeeded) != completed_by.is_some()
            || completed_by.is_some() != result.is_some()
        {
            broken.push(format!(
                "job {job_id} is {} with completed_by {completed_by:?} and result {result:?}",
                status.as_str()
            ));
        }
        if let Some(by) = completed_by {
            let state = self.attempts.get(by);
            if state != Some(&AttemptState::Succeeded) {
                broken.push(format!(
                    "job {job_id} was completed by {by}, which is {state:?}"
                ));
            }
        }
        broken
    }

    /// Whether any attempt is in one of `states`.
    fn any(&self, states: &[AttemptState]) -> bool {
        self.attempts.values().any(|s| states.contains(s))
    }
}

/// What a client last saw of one job, and what it may become.
#[derive(Clone, Debug)]
pub struct JobRecord {
    view: JobView,
    /// The job's document and ETag, as last read (empty before the first read).
    doc: String,
    etag: String,
}

impl JobRecord {
    /// The job's first read.
    pub fn new(view: JobView) -> Self {
        Self {
            view,
            doc: String::new(),
            etag: String::new(),
        }
    }

    /// The job as last seen (with every attempt ever seen resolved as failed).
    pub fn view(&self) -> &JobView {
        &self.view
    }

    /// The job's document and its ETag, read again: the ETag moves exactly when the
    /// document does.
    pub fn document(&mut self, job_id: &str, doc: String, etag: String) -> Result<(), String> {
        let broken = !self.doc.is_empty() && (self.doc != doc) != (self.etag != etag);
        let what = broken.then(|| {
            format!(
                "job {job_id}'s ETag went from {} to {etag} while its document {}",
                self.etag,
                if self.doc == doc {
                    "stayed the same"
                } else {
                    "changed"
                }
            )
        });
        self.doc = doc;
        self.etag = etag;
        what.map_or(Ok(()), Err)
    }

    /// The job read again, as `now`: a result never changes once set, an ended job
    /// (`succeeded` or `cancelled`) never changes its status, and every attempt moved
    /// only by `AttemptState::MOVES`. Then `now` is what was last seen.
    pub fn next(&mut self, job_id: &str, now: JobView) -> Vec<String> {
        self.moved(
            job_id,
            now,
            AttemptState::can_move_to,
            "not a move that exists",
        )
    }

    /// As [`JobRecord::next`], for a client that reads the job now and then rather than
    /// after every step (the real-Worker run): an attempt may have made several moves
    /// since the last read, so each must have reached its state by a path of
    /// `AttemptState::MOVES`.
    pub fn next_read(&mut self, job_id: &str, now: JobView) -> Vec<String> {
        self.moved(job_id, now, reaches, "not reached by any path of moves")
    }

    /// [`JobRecord::next`], with an attempt's change from `before` to `after` allowed
    /// when `allowed(before, after)`, and called `what` when not.
    fn moved(
        &mut self,
        job_id: &str,
        now: JobView,
        allowed: fn(AttemptState, AttemptState) -> bool,
        what: &str,
    ) -> Vec<String> {
        let mut broken = Vec::new();
        let seen = &self.view;
        if seen.result.is_some()
            && (seen.result != now.result || seen.completed_by != now.completed_by)
        {
            broken.push(format!(
                "job {job_id}'s result changed from {:?} by {:?} to {:?} by {:?}",
                seen.result, seen.completed_by, now.result, now.completed_by
            ));
        }
        if seen.status.is_final() && seen.status != now.status {
            broken.push(format!(
                "job {job_id} was {} and is now {}: an ended job changed",
                seen.status.as_str(),
                now.status.as_str()
            ));
        }
        for (id, state) in &now.attempts {
            if let Some(before) = seen.attempts.get(id) {
                if before != state && !allowed(*before, *state) {
                    broken.push(format!(
                        "attempt {id} moved {} → {}, {what}",
                        before.as_str(),
                        state.as_str()
                    ));
                }
            }
        }
        let mut resolved_failed = std::mem::take(&mut self.view.resolved_failed);
        resolved_failed.extend(now.resolved_failed.iter().cloned());
        self.view = JobView {
            resolved_failed,
            ..now
        };
        broken
    }

    /// The job is gone: only the purge removes a job, only one whose last change is
    /// before `cutoff` (RFC 3339: now less the retention), and only once it has ended
    /// with no attempt live or `unknown`.
    pub fn purge_broken(&self, job_id: &str, cutoff: &str) -> Vec<String> {
        use AttemptState::{Running, Starting, Unknown};
        let mut broken = Vec::new();
        let seen = &self.view;
        if seen.updated_at.as_str() > cutoff {
            broken.push(format!(
                "job {job_id} was purged though it last changed at {}, within retention",
                seen.updated_at
            ));
        }
        if seen.any(&[Starting, Running, Unknown]) || !ended_or_failed(seen.status) {
            broken.push(format!(
                "job {job_id} was purged while {} with attempts {:?}",
                seen.status.as_str(),
                seen.attempts
            ));
        }
        broken
    }

    /// Once faults have stopped and time has passed: whether the job is stuck. It must
    /// have ended or failed, with no attempt `starting` or `running`, or wait, `unknown`,
    /// for a person (or the abandon rule) to resolve its `unknown` attempt.
    pub fn stuck(&self) -> bool {
        use AttemptState::{Running, Starting, Unknown};
        let seen = &self.view;
        let waiting = seen.any(&[Unknown]) && seen.status == JobStatus::Unknown;
        seen.any(&[Starting, Running]) || !(ended_or_failed(seen.status) || waiting)
    }
}

/// Whether an attempt in `from` can come to be in `to` by one move or more of
/// `AttemptState::MOVES`.
fn reaches(from: AttemptState, to: AttemptState) -> bool {
    let mut seen = vec![from];
    let mut unvisited = vec![from];
    while let Some(at) = unvisited.pop() {
        for &(_, next) in AttemptState::MOVES.iter().filter(|(a, _)| *a == at) {
            if next == to {
                return true;
            }
            if !seen.contains(&next) {
                seen.push(next);
                unvisited.push(next);
            }
        }
    }
    false
}

/// `succeeded`, `failed` or `cancelled`: nothing runs for the job.
fn ended_or_failed(status: JobStatus) -> bool {
    matches!(
        status,
        JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use AttemptState::*;

    fn view(status: JobStatus, attempts: &[(&str, AttemptState)]) -> JobView {
        let winner = attempts
            .iter()
            .find(|(_, s)| *s == Succeeded)
            .map(|(id, _)| *id);
        JobView {
            status,
            result: winner.map(|_| json!({"summary": "s"})),
            completed_by: winner.map(str::to_owned),
            attempts: attempts
                .iter()
                .map(|(id, s)| ((*id).to_owned(), *s))
                .collect(),
            resolved_failed: BTreeSet::new(),
            updated_at: "2027-01-01T00:00:00.000Z".to_owned(),
        }
    }

    #[test]
    fn a_job_has_one_winner_which_completed_it() {
        assert!(view(JobStatus::Succeeded, &[("a1", Succeeded)])
            .broken("j")
            .is_empty());
        let two = view(
            JobStatus::Succeeded,
            &[("a1", Succeeded), ("a2", Succeeded)],
        );
        assert_eq!(two.broken("j").len(), 1);
        let mut no_result = view(JobStatus::Succeeded, &[("a1", Succeeded)]);
        no_result.result = None;
        assert_eq!(no_result.broken("j").len(), 1);
    }

    #[test]
    fn attempts_move_only_by_moves_and_an_ended_job_stays_ended() {
        let mut job = JobRecord::new(view(JobStatus::Running, &[("a1", Running)]));
        assert!(job
            .next("j", view(JobStatus::Unknown, &[("a1", Unknown)]))
            .is_empty());
        assert_eq!(
            job.next("j", view(JobStatus::Running, &[("a1", Running)]))
                .len(),
            1
        );
        let mut ended = JobRecord::new(view(JobStatus::Cancelled, &[("a1", Cancelled)]));
        assert_eq!(
            ended
                .next("j", view(JobStatus::Failed, &[("a1", Cancelled)]))
                .len(),
            1
        );
    }

    #[test]
    fn a_job_read_now_and_then_may_show_several_moves_but_never_one_back() {
        let mut job = JobRecord::new(view(JobStatus::Queued, &[("a1", Starting)]));
        assert_eq!(
            job.clone()
                .next("j", view(JobStatus::Failed, &[("a1", Failed)]))
                .len(),
            1
        );
        assert!(job
            .next_read("j", view(JobStatus::Failed, &[("a1", Failed)]))
            .is_empty());
        let mut unknown = JobRecord::new(view(JobStatus::Unknown, &[("a1", Unknown)]));
        assert!(unknown
            .next_read("j", view(JobStatus::Failed, &[("a1", Abandoned)]))
            .is_empty());
        assert_eq!(
            unknown
                .next_read("j", view(JobStatus::Running, &[("a1", Running)]))
                .len(),
            1
        );
        assert!(reaches(Starting, Superseded) && !reaches(Failed, Succeeded));
    }

    #[test]
    fn a_result_never_changes_once_set() {
        let mut job = JobRecord::new(view(JobStatus::Succeeded, &[("a1", Succeeded)]));
        let mut other = view(JobStatus::Succeeded, &[("a1", Succeeded)]);
        other.result = Some(json!({"summary": "another"}));
        assert_eq!(job.next("j", other).len(), 1);
    }

    #[test]
    fn the_etag_moves_exactly_when_the_document_does() {
        let mut job = JobRecord::new(view(JobStatus::Queued, &[("a1", Starting)]));
        let doc = |s: &str| s.to_owned();
        assert!(job.document("j", doc("{1}"), doc("\"1\"")).is_ok());
        assert!(job.document("j", doc("{1}"), doc("\"1\"")).is_ok());
        assert!(job.document("j", doc("{2}"), doc("\"1\"")).is_err());
        assert!(job.document("j", doc("{2}"), doc("\"3\"")).is_err());
        assert!(job.document("j", doc("{3}"), doc("\"4\"")).is_ok());
    }

    #[test]
    fn only_an_ended_job_past_retention_is_purged_and_an_unknown_one_may_wait() {
        let failed = JobRecord::new(view(JobStatus::Failed, &[("a1", Failed)]));
        assert!(failed
            .purge_broken("j", "2027-01-02T00:00:00.000Z")
            .is_empty());
        assert_eq!(
            failed.purge_broken("j", "2026-12-31T00:00:00.000Z").len(),
            1
        );
        let unknown = JobRecord::new(view(JobStatus::Unknown, &[("a1", Unknown)]));
        assert_eq!(
            unknown.purge_broken("j", "2027-01-02T00:00:00.000Z").len(),
            1
        );
        assert!(!unknown.stuck() && !failed.stuck());
        assert!(JobRecord::new(view(JobStatus::Running, &[("a1", Running)])).stuck());
    }

    #[test]
    fn a_view_of_a_document_knows_what_a_person_resolved_as_failed() {
        let job: Job = serde_json::from_value(json!({
            "id": "j", "kind": "summarize", "status": "failed", "version": 3,
            "input": {"text": "t"}, "provider": "primary", "result": null,
            "completed_by": null, "created_at": "", "updated_at": "",
            "attempts": [{"id": "a1", "n": 1, "provider": "primary", "state": "failed",
                          "started_at": "", "finished_at": null,
                          "error": {"code": "resolved_failed", "message": "m", "retryable": false}}],
        }))
        .unwrap_or_else(|e| panic!("a job document: {e}"));
        let seen = JobView::of(&job);
        assert!(seen.resolved_failed.contains("a1"));
        assert!(JobView::resolved_failed_error(
            r#"{"code":"resolved_failed"}"#
        ));
    }
}
