//! The checks after every step: each answer a request heard, against the reference
//! model (`model/`); each job the step touched, read from its place, against what the
//! model last saw of it and the store's own invariants (one position per job, one job
//! per key across every place, tokens only on an answer's attempt); and the lines the
//! step logged.

use super::generate::Request;
use super::{column_text, Shape, World};
use crate::db;
use crate::model::{self, JobRecord, JobView, Reply};
use crate::requests::Answer;
use onceclick_core::store::native::Layout;
use onceclick_protocol::moving::StoreLayout;
use onceclick_protocol::shard::IdRoute;
use onceclick_protocol::{AttemptState, JobStatus};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

/// The retention of an ended job (`JOB_RETENTION_HOURS`), in ms.
const RETENTION_MS: u64 = 24 * 3_600_000;
/// Log lines that are no change a client sees: they move no ETag.
const UNSEEN_LINES: [&str; 3] = [
    "dispatch_ignored",
    "failover_skipped",
    "late_result_discarded",
];

/// What the model last saw of a job, and where it lives.
#[derive(Clone, Debug)]
pub(super) struct SeenJob {
    pub(super) place: String,
    pub(super) owner: String,
    /// Its kind and input, as made.
    pub(super) kind: String,
    pub(super) input: Value,
    /// The job's change counter (`jobs.seq`) as last seen: it never goes back.
    pub(super) seq: i64,
    pub(super) job: JobRecord,
}

/// What a job was made with, as its row says.
struct Made<'a> {
    owner: &'a str,
    kind: String,
    input: Value,
}

/// An answer of the core's, as a client sees it.
fn reply_of(answer: &Answer) -> Reply<'_> {
    Reply {
        status: answer.status,
        code: answer.code,
        job: answer.job.as_ref(),
        attempt_id: answer.attempt_id.as_deref(),
        problem_job: answer.problem_job.as_deref(),
    }
}

/// An integer column, `-1` when it is none.
fn column_int(v: Option<&Value>) -> i64 {
    v.and_then(Value::as_i64).unwrap_or(-1)
}

impl World {
    /// After one step of task `task` (`done`: it ended): the lines it logged, the
    /// answers heard, and every job it touched.
    pub(super) fn after_step(self: &Rc<Self>, task: u64, done: bool) {
        for line in crate::platform::drain_log() {
            self.check_line(&line);
        }
        let answers: Vec<_> = std::mem::take(&mut *self.answers.borrow_mut());
        for (task, request, answer) in answers {
            self.check_answer(task, &request, &answer);
        }
        if done {
            db::take_writes(task);
            self.alarm_tasks.borrow_mut().remove(&task);
        }
        let touched: Vec<(String, String)> = std::mem::take(&mut *self.db.touched.borrow_mut())
            .into_iter()
            .collect();
        for (place, job) in touched {
            self.check_job(&place, &job);
        }
        self.live_problems();
    }

    /// A log line: a hedge is checked, and a result that came after the purge took its
    /// job is that result's record.
    fn check_line(&self, line: &Value) {
        let event = line.get("event").and_then(Value::as_str);
        if event == Some("hedge_started") {
            self.check_hedge(line);
        }
        if event == Some("late_result_discarded")
            && line.get("attempt_state").and_then(Value::as_str) == Some("purged")
        {
            if let Some(a) = line.get("attempt_id").and_then(Value::as_str) {
                self.purged_lines.borrow_mut().insert(a.to_owned());
            }
        }
    }

    /// An answer heard, against the model: no failure on our side, a refusal that
    /// wrote nothing, and what the model says a request's answer may be.
    fn check_answer(&self, task: u64, request: &Request, answer: &Answer) {
        self.figures.borrow_mut().checks += 1;
        let writes = db::take_writes(task);
        let reply = reply_of(answer);
        let (status, code) = (reply.status, reply.code);
        self.note(|| {
            format!(
                "answer {status} {} {}",
                code.map(|c| c.as_str()).unwrap_or(""),
                reply.job.map(|j| j.id.as_str()).unwrap_or("")
            )
        });
        if reply.failed_on_our_side() {
            self.violate(format!(
                "{request:?} answered {status} {code:?}: a failure on our side ({})",
                answer.cause.as_deref().unwrap_or("no cause")
            ));
            return;
        }
        if reply.is_refusal() && writes > 0 && !self.purged_under_resolve(request, &reply) {
            self.violate(format!(
                "{request:?} was refused ({status} {code:?}) and wrote {writes} rows outside the figures"
            ));
        }
        if reply.is_unavailable() {
            return;
        }
        for what in self.answer_broken(request, &reply) {
            self.violate(what);
        }
        if let (Request::Create { .. }, Some(job)) = (request, reply.job) {
            if let (true, Shape::Moved { from, to }) =
                (self.of_previous_layout(&job.id), self.shape)
            {
                *self
                    .figures
                    .borrow_mut()
                    .previous_answers
                    .entry(format!("{from} → {to}"))
                    .or_default() += 1;
            }
        }
    }

    /// Whether `id` is a job of the layout a move left (none before the move).
    fn of_previous_layout(&self, id: &str) -> bool {
        let Layout::Deployed {
            previous: Some(previous),
            ..
        } = self.layout.get()
        else {
            return false;
        };
        match (previous, onceclick_protocol::shard::route_of_id(id)) {
            (StoreLayout::D1, IdRoute::Database) => true,
            (StoreLayout::Shards(count), IdRoute::Shard(shard)) => shard.count == count,
            _ => false,
        }
    }

    /// One race is no refusal that wrote: a resolve that moved the last live attempt of
    /// an old ended job, whose job the purge took before the resolve read it back
    /// (`404`, with the attempt gone everywhere).
    fn purged_under_resolve(&self, request: &Request, reply: &Reply) -> bool {
        let Request::Resolve { attempt, .. } = request else {
            return false;
        };
        reply.status == 404
            && self.db.places().iter().all(|p| {
                self.db
                    .query(p, "SELECT 1 FROM attempts WHERE id = ?1", &[json!(attempt)])
                    .is_empty()
            })
    }

    /// What the model says of the answer to `request`: the promises it broke.
    fn answer_broken(&self, request: &Request, reply: &Reply) -> Vec<String> {
        let purged = |id: &str| self.purged.borrow().contains(id);
        match request {
            // An answer that names a job the purge took says nothing of the key now.
            Request::Create { .. }
                if reply.job.is_some_and(|j| purged(&j.id))
                    || reply.problem_job.is_some_and(purged) =>
            {
                Vec::new()
            }
            Request::Create { intent, create } => {
                self.intents.borrow_mut()[*intent].key.answer(create, reply)
            }
            Request::Fallback { job, key, body } => self
                .fallbacks
                .borrow_mut()
                .entry((job.clone(), key.clone()))
                .or_default()
                .answer(job, key, *body, reply),
            Request::Cancel { job } => {
                let gone = || !self.exists("jobs", job);
                model::cancel_answer(job, reply, gone)
                    .err()
                    .into_iter()
                    .collect()
            }
            Request::Resolve { attempt, outcome } => {
                let exists = || self.exists("attempts", attempt);
                let answer = model::resolve_answer(attempt, *outcome, reply, exists);
                answer.err().into_iter().collect()
            }
            Request::Read { job } => {
                let known = self
                    .seen
                    .borrow()
                    .get(job)
                    .and_then(|s| s.job.view().result.clone());
                let gone = || !self.exists("jobs", job);
                let answer = model::read_answer(job, known.as_ref(), reply, gone);
                answer.err().into_iter().collect()
            }
        }
    }

    /// The invariants of one job a step touched, and what the model saw of it.
    pub(super) fn check_job(&self, place: &str, job_id: &str) {
        self.figures.borrow_mut().checks += 1;
        let rows = self.db.query(
            place,
            "SELECT owner_id, idempotency_key, kind, input, status, result, completed_by, updated_at FROM jobs WHERE id = ?1",
            &[json!(job_id)],
        );
        let Some(row) = rows.first() else {
            return self.job_gone(job_id);
        };
        let attempts = self.db.query(
            place,
            "SELECT id, state, error FROM attempts WHERE job_id = ?1 ORDER BY n",
            &[json!(job_id)],
        );
        self.check_tokens(place, job_id);
        self.note_results_recorded(place, job_id);
        let view = match job_view(row, &attempts) {
            Ok(view) => view,
            Err(what) => return self.violate(format!("job {job_id} {what}")),
        };
        for what in view.broken(job_id) {
            self.violate(what);
        }
        if let Some(what) = says_why(job_id, view.status, &attempts) {
            self.violate(what);
        }
        let kind = column_text(row.get("kind")).unwrap_or_default();
        let input: Value = column_text(row.get("input"))
            .and_then(|input| serde_json::from_str(&input).ok())
            .unwrap_or_default();
        self.check_result_keeps_contract(job_id, &kind, &input, view.result.as_ref());
        let owner = column_text(row.get("owner_id")).unwrap_or_default();
        let key = column_text(row.get("idempotency_key")).unwrap_or_default();
        let made = Made {
            owner: &owner,
            kind,
            input,
        };
        if self.saw_first(place, job_id, made, view) {
            self.check_one_job_per_key(place, &owner, &key);
        }
    }

    /// A job's result, once it has one, keeps its kind's contract for its input: a
    /// provider's answer that breaks it never wins.
    fn check_result_keeps_contract(
        &self,
        job_id: &str,
        kind: &str,
        input: &Value,
        result: Option<&Value>,
    ) {
        let Some(result) = result else {
            return;
        };
        let Some(kind) = self.kinds().iter().find(|k| k.name() == kind) else {
            return self.violate(format!(
                "job {job_id} has a kind {kind:?} its world does not declare"
            ));
        };
        if let Err(broken) = kind.check_output(input, result) {
            self.violate(format!(
                "job {job_id} has a result that breaks its kind's contract ({broken}): {result}"
            ));
        }
    }

    /// A job the model saw is gone: only a purge removes a job, and only one that has
    /// ended with nothing live or unknown, past retention. Its key is free again.
    fn job_gone(&self, job_id: &str) {
        let Some(seen) = self.seen.borrow_mut().remove(job_id) else {
            return;
        };
        let cutoff = crate::platform::rfc3339((self.now() - RETENTION_MS) as f64);
        for what in seen.job.purge_broken(job_id, &cutoff) {
            self.violate(what);
        }
        self.note(|| format!("job {job_id} purged"));
        // Its events go with it; what its attempts were paid for is checked when the
        // world settles (a result still in the queue may come after).
        self.purged_seen.borrow_mut().push(seen);
        // Its key is free again: a resend may bind a new job.
        self.purged.borrow_mut().insert(job_id.to_owned());
        for intent in self.intents.borrow_mut().iter_mut() {
            if intent.key.job() == Some(job_id) {
                intent.key.free();
            }
        }
    }

    /// Tokens are written only with an answer (its attempt won, or lost the race), and
    /// are what the provider stated: the sim's streamed answers state 9 and 4, its whole
    /// answers nothing.
    fn check_tokens(&self, place: &str, job_id: &str) {
        for r in self.db.query(
            place,
            "SELECT id, state, tokens FROM attempts WHERE job_id = ?1 AND tokens IS NOT NULL",
            &[json!(job_id)],
        ) {
            let state = column_text(r.get("state")).unwrap_or_default();
            let tokens = column_text(r.get("tokens")).unwrap_or_default();
            let stated = serde_json::from_str::<Value>(&tokens).ok()
                == Some(json!({"prompt": 9, "completion": 4}));
            if !matches!(state.as_str(), "succeeded" | "superseded") || !stated {
                self.violate(format!(
                    "attempt {:?} of job {job_id} is {state} with tokens {tokens}: only an answer's attempt carries what its provider stated",
                    column_text(r.get("id"))
                ));
            }
        }
    }

    /// What the database recorded of results that did not become the job's: the
    /// attempts its `race_lost` and `late_result_discarded` events name.
    fn note_results_recorded(&self, place: &str, job_id: &str) {
        for r in self.db.query(
            place,
            "SELECT attempt_id FROM job_events WHERE job_id = ?1 AND attempt_id IS NOT NULL
                AND type IN ('race_lost', 'late_result_discarded')",
            &[json!(job_id)],
        ) {
            if let Some(a) = column_text(r.get("attempt_id")) {
                self.recorded.borrow_mut().insert(a);
            }
        }
    }

    /// The job read as `view`, against what the model last saw of it: its change
    /// counter never goes back, its ETag moves exactly when its document does, and it
    /// became only what [`JobRecord::next`] allows. Whether the model saw it first now.
    fn saw_first(&self, place: &str, job_id: &str, made: Made<'_>, view: JobView) -> bool {
        let mut seen_map = self.seen.borrow_mut();
        let first = !seen_map.contains_key(job_id);
        if first {
            self.figures.borrow_mut().jobs += 1;
        }
        let seen = seen_map
            .entry(job_id.to_owned())
            .or_insert_with(|| SeenJob {
                place: place.to_owned(),
                owner: made.owner.to_owned(),
                kind: made.kind,
                input: made.input,
                seq: 0,
                job: JobRecord::new(view.clone()),
            });
        let (seq, doc, etag) = self.check_position(place, job_id);
        let mut broken = Vec::new();
        if seq < seen.seq {
            broken.push(format!(
                "job {job_id}'s change counter went back from {} to {seq}",
                seen.seq
            ));
        }
        seen.seq = seq;
        broken.extend(seen.job.document(job_id, doc, etag).err());
        broken.extend(seen.job.next(job_id, view));
        drop(seen_map);
        for what in broken {
            self.violate(what);
        }
        first
    }

    /// One position per job: its log numbers every change once, from 1 to the job's
    /// counter with no gap and no repeat (the lines read from its rows and the rows of
    /// `job_events` alike), and its ETag is the last change a client can see. The
    /// counter, the document and the ETag.
    fn check_position(&self, place: &str, job_id: &str) -> (i64, String, String) {
        let job = self.db.query(
            place,
            "SELECT j.seq, j.doc_seq, d.doc, d.etag FROM jobs AS j
               JOIN job_documents AS d ON d.id = j.id WHERE j.id = ?1",
            &[json!(job_id)],
        );
        let Some(job) = job.first() else {
            return (0, String::new(), String::new());
        };
        let (seq, doc_seq) = (column_int(job.get("seq")), column_int(job.get("doc_seq")));
        let lines: Vec<(i64, String)> = self
            .db
            .query(
                place,
                "SELECT seq, type FROM job_log WHERE job_id = ?1 ORDER BY seq",
                &[json!(job_id)],
            )
            .into_iter()
            .map(|r| {
                let kind = column_text(r.get("type")).unwrap_or_default();
                (column_int(r.get("seq")), kind)
            })
            .collect();
        let numbers: Vec<i64> = lines.iter().map(|l| l.0).collect();
        if numbers != (1..=seq).collect::<Vec<_>>() {
            self.violate(format!(
                "job {job_id}'s log numbers its changes {numbers:?}, its counter is {seq}"
            ));
        }
        let shown = lines
            .iter()
            .filter(|(_, kind)| !UNSEEN_LINES.contains(&kind.as_str()))
            .map(|l| l.0)
            .max();
        let etag = column_text(job.get("etag"));
        if shown != Some(doc_seq) || etag != Some(format!("\"{doc_seq}\"")) {
            self.violate(format!(
                "job {job_id}'s ETag {:?} (doc_seq {doc_seq}) is not its last change a client sees, {shown:?}",
                job.get("etag")
            ));
        }
        let (doc, etag) = (
            column_text(job.get("doc")).unwrap_or_default(),
            etag.unwrap_or_default(),
        );
        if let Some(at) = onceclick_protocol::live::Position::of_etag(&etag) {
            self.live.record(job_id, at.0, &doc, "read");
        }
        (seq, doc, etag)
    }

    /// One job per (owner, key), across every place.
    fn check_one_job_per_key(&self, place: &str, owner: &str, key: &str) {
        let mut count = 0;
        for p in self.db.places() {
            count += self
                .db
                .query(
                    &p,
                    "SELECT id FROM jobs WHERE owner_id = ?1 AND idempotency_key = ?2",
                    &[json!(owner), json!(key)],
                )
                .len();
        }
        if count > 1 {
            self.violate(format!(
                "{count} jobs for ({owner}, {key}) across the places (one in {place})"
            ));
        }
    }

    /// A job as a stream or a hub reads it: its position (the ETag's) and document.
    pub(super) fn read_job_document(&self, job_id: &str) -> Option<(u64, String)> {
        let place = self.seen.borrow().get(job_id).map(|s| s.place.clone())?;
        let rows = self.db.query(
            &place,
            "SELECT doc, etag FROM job_documents WHERE id = ?1",
            &[json!(job_id)],
        );
        let row = rows.first()?;
        let etag = column_text(row.get("etag"))?;
        let at = onceclick_protocol::live::Position::of_etag(&etag)?;
        Some((at.0, column_text(row.get("doc"))?))
    }
}

/// What is wrong, if anything, with why job `job_id` ended badly as the SDK tells it
/// (`Job.failure`): a `failed` or `unknown` job names the attempt that decided it
/// (`JobStatus::decided_by`, over its attempts oldest first), and that attempt's error
/// has a code and a sentence.
fn says_why(job_id: &str, status: JobStatus, attempts: &[Map<String, Value>]) -> Option<String> {
    if !matches!(status, JobStatus::Failed | JobStatus::Unknown) {
        return None;
    }
    let states: Vec<AttemptState> = attempts
        .iter()
        .filter_map(|r| AttemptState::from_wire(&column_text(r.get("state")).unwrap_or_default()))
        .collect();
    let Some(at) = status.decided_by(&states) else {
        return Some(format!(
            "job {job_id} is {} and names no attempt that says why: {states:?}",
            status.as_str()
        ));
    };
    let error: Option<Value> =
        column_text(attempts[at].get("error")).and_then(|e| serde_json::from_str(&e).ok());
    let said = |name: &str| {
        error
            .as_ref()
            .and_then(|e| e.get(name))
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    (!said("code") || !said("message")).then(|| {
        format!(
            "job {job_id} is {} and its deciding attempt ({}) says no code and sentence: {error:?}",
            status.as_str(),
            states[at].as_str()
        )
    })
}

/// A job's row and its attempts' rows, as the model views a job.
fn job_view(row: &Map<String, Value>, attempts: &[Map<String, Value>]) -> Result<JobView, String> {
    let status = column_text(row.get("status")).unwrap_or_default();
    let status = JobStatus::from_wire(&status)
        .ok_or_else(|| format!("has the status {status:?}, which is none"))?;
    let mut states = BTreeMap::new();
    let mut resolved_failed = BTreeSet::new();
    for r in attempts {
        let id = column_text(r.get("id")).unwrap_or_default();
        let state = column_text(r.get("state")).unwrap_or_default();
        let state = AttemptState::from_wire(&state)
            .ok_or_else(|| format!("has attempt {id} in state {state:?}, which is none"))?;
        if column_text(r.get("error")).is_some_and(|e| JobView::resolved_failed_error(&e)) {
            resolved_failed.insert(id.clone());
        }
        states.insert(id, state);
    }
    // The result as stored is the output's JSON text.
    let result = column_text(row.get("result"))
        .map(|text| serde_json::from_str(&text).unwrap_or(Value::String(text)));
    Ok(JobView {
        status,
        result,
        completed_by: column_text(row.get("completed_by")),
        attempts: states,
        resolved_failed,
        updated_at: column_text(row.get("updated_at")).unwrap_or_default(),
    })
}
