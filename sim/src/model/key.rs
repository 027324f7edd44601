//! One owner's `Idempotency-Key` of `POST /v1/jobs`: one key, one job.

use super::Reply;
use onceclick_protocol::ErrorCode;
use serde_json::Value;

/// A create's request as the contract tells two apart (the fingerprint holds both): its
/// input, and the provider it names. None asks for the job's own on a replay, and for
/// the first configured provider on a new job.
#[derive(Clone, Debug, PartialEq)]
pub struct Create {
    pub input: Value,
    pub provider: Option<String>,
}

/// What a client knows of one owner's key: the job it is bound to, and the requests
/// sent under it. Shared by any number of requests in flight: an answer is checked
/// against what every answer before it showed.
#[derive(Clone, Debug)]
pub struct Key {
    pub owner: String,
    pub key: String,
    /// The kind every create under this key asks for.
    pub kind: String,
    /// The provider a new job runs on when its request names none (the first of
    /// `PROVIDERS`).
    pub default_provider: String,
    /// The job the key is bound to, once an answer named it.
    job: Option<String>,
    /// Whether a create has answered `201` (bound the key): only one may.
    created: bool,
    /// The request of the last answer that showed the key's job.
    bound: Option<Create>,
    /// Every request a create under this key has sent.
    sent: Vec<Create>,
}

impl Key {
    pub fn new(owner: &str, key: &str, kind: &str, default_provider: &str) -> Self {
        Self {
            owner: owner.to_owned(),
            key: key.to_owned(),
            kind: kind.to_owned(),
            default_provider: default_provider.to_owned(),
            job: None,
            created: false,
            bound: None,
            sent: Vec::new(),
        }
    }

    /// The job an answer has bound the key to.
    pub fn job(&self) -> Option<&str> {
        self.job.as_deref()
    }

    /// A create is sent under this key (before its answer is heard).
    pub fn send(&mut self, request: &Create) {
        if !self.sent.contains(request) {
            self.sent.push(request.clone());
        }
    }

    /// The purge took the key's job: the key is free again, and a resend may bind a new
    /// job (with a new `201`).
    pub fn free(&mut self) {
        self.job = None;
        self.created = false;
        self.bound = None;
    }

    /// The answer to `request` under this key, after what earlier answers showed:
    /// - `200` or `201` with the key's one job (only one `201` per binding), which is a
    ///   job of this request: its input, its kind, and the provider it asked for;
    /// - `409 idempotency_key_reused` only for another request than the key's job's (or,
    ///   before any answer showed it, than one sent under the key), naming the key's job.
    ///
    /// An answer that names a job the purge took says nothing of the key now: the caller
    /// does not ask.
    pub fn answer(&mut self, request: &Create, reply: &Reply) -> Vec<String> {
        match (reply.status, reply.code, reply.job) {
            (200 | 201, _, Some(job)) => self.answered_job(request, reply.status, job),
            (409, Some(ErrorCode::IdempotencyKeyReused), _) => self.answered_reused(request, reply),
            (status, code, _) => vec![format!(
                "a create of {}/{} answered {status} {code:?}",
                self.owner, self.key
            )],
        }
    }

    fn answered_job(
        &mut self,
        request: &Create,
        status: u16,
        job: &onceclick_protocol::Job,
    ) -> Vec<String> {
        let mut broken = Vec::new();
        let (owner, key) = (&self.owner, &self.key);
        if let Some(known) = &self.job {
            if *known != job.id {
                broken.push(format!(
                    "key {owner}/{key} answered job {} after job {known}: one key, two jobs",
                    job.id
                ));
            }
        }
        if status == 201 {
            if self.created {
                broken.push(format!(
                    "key {owner}/{key} bound twice (201 again) to {}",
                    job.id
                ));
            }
            self.created = true;
        }
        // No provider asks for the job's own (a replay), or the first (a new job).
        let asked = match (&request.provider, status) {
            (Some(p), _) => p.as_str(),
            (None, 201) => self.default_provider.as_str(),
            (None, _) => job.provider.as_str(),
        };
        if job.input != request.input || job.kind != self.kind || job.provider != asked {
            broken.push(format!(
                "key {owner}/{key} answered with a job of another request ({status}): the request was {} on {asked}, the job's {} on {}",
                request.input, job.input, job.provider
            ));
        }
        self.job = Some(job.id.clone());
        self.bound = Some(request.clone());
        broken
    }

    fn answered_reused(&self, request: &Create, reply: &Reply) -> Vec<String> {
        let mut broken = Vec::new();
        // Only another request can be refused: the key's job is of another (known), or
        // another was sent under it (unknown yet).
        let other = match &self.bound {
            Some(bound) => !self.repeats(request, bound),
            None => self.sent.iter().any(|sent| !self.repeats(request, sent)),
        };
        if !other {
            broken.push(format!(
                "key {}/{} refused its own request (409): {}",
                self.owner, self.key, request.input
            ));
        }
        if self.job.is_some() && reply.problem_job != self.job.as_deref() {
            broken.push(format!(
                "a 409 for {}/{} names job {:?}, not {:?}",
                self.owner, self.key, reply.problem_job, self.job
            ));
        }
        broken
    }

    /// Whether `asked` repeats `bound`: the same input, and the same provider or none
    /// (a request that names no provider asks for the job's own).
    fn repeats(&self, asked: &Create, bound: &Create) -> bool {
        let bound_provider = bound.provider.as_deref().unwrap_or(&self.default_provider);
        asked.input == bound.input
            && asked
                .provider
                .as_deref()
                .is_none_or(|p| p == bound_provider)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onceclick_protocol::Job;
    use serde_json::json;

    fn create(text: &str, provider: Option<&str>) -> Create {
        Create {
            input: json!({ "text": text }),
            provider: provider.map(str::to_owned),
        }
    }

    fn job(id: &str, text: &str, provider: &str) -> Job {
        serde_json::from_value(json!({
            "id": id, "kind": "summarize", "status": "queued", "version": 1,
            "input": {"text": text}, "provider": provider, "result": null,
            "completed_by": null, "created_at": "", "updated_at": "", "attempts": [],
        }))
        .unwrap_or_else(|e| panic!("a job document: {e}"))
    }

    fn reply<'a>(status: u16, job: Option<&'a Job>, problem_job: Option<&'a str>) -> Reply<'a> {
        let code = (status == 409).then_some(ErrorCode::IdempotencyKeyReused);
        Reply {
            status,
            code,
            job,
            attempt_id: None,
            problem_job,
        }
    }

    #[test]
    fn a_replay_answers_the_keys_one_job_and_only_once_201() {
        let mut key = Key::new("alice", "k1", "summarize", "primary");
        let (a, b) = (job("job_a", "t", "primary"), job("job_b", "t", "primary"));
        let first = create("t", None);
        key.send(&first);
        assert!(key.answer(&first, &reply(201, Some(&a), None)).is_empty());
        assert!(key.answer(&first, &reply(200, Some(&a), None)).is_empty());
        assert_eq!(key.answer(&first, &reply(201, Some(&a), None)).len(), 1);
        assert_eq!(key.answer(&first, &reply(200, Some(&b), None)).len(), 1);
        key.free();
        assert!(key.answer(&first, &reply(201, Some(&b), None)).is_empty());
    }

    #[test]
    fn a_conflicting_payload_is_409_naming_the_keys_job_and_its_own_request_never_is() {
        let mut key = Key::new("alice", "k1", "summarize", "primary");
        let (first, changed) = (create("t", None), create("t, changed", None));
        key.send(&first);
        let a = job("job_a", "t", "primary");
        assert!(key.answer(&first, &reply(201, Some(&a), None)).is_empty());
        key.send(&changed);
        assert!(key
            .answer(&changed, &reply(409, None, Some("job_a")))
            .is_empty());
        assert_eq!(
            key.answer(&changed, &reply(409, None, Some("job_b"))).len(),
            1
        );
        assert_eq!(
            key.answer(&first, &reply(409, None, Some("job_a"))).len(),
            1
        );
        // The same text on the provider the job runs on is the same request.
        let named = create("t", Some("primary"));
        assert_eq!(
            key.answer(&named, &reply(409, None, Some("job_a"))).len(),
            1
        );
        assert_eq!(key.answer(&changed, &reply(200, Some(&a), None)).len(), 1);
    }
}
