//! The core's door for its second shell, the deterministic simulator (`sim/`): the
//! interface it implements ([`Host`], and natively [`Places`]) and the decisions it
//! drives, the same functions the Worker's handlers, queue consumer, cron and alarms
//! call once they have read a request. The platform it installs is
//! [`crate::platform`]'s.

pub use crate::host::{Host, Notify, ProviderCall};
pub use crate::message::{Dispatch, PendingResult};
pub use crate::mutant::Mutant;
pub use crate::outcome::CallOutcome;

/// A shard's alarm, decided (`alarm.rs`): as the Worker's shard runs it.
pub mod alarm {
    pub use crate::alarm::*;
}

/// The pacing of a call's streamed text on its way to the hub (`pacing.rs`): as the
/// Worker's call hands it on.
pub mod pacing {
    pub use crate::pacing::*;
}

/// What a hub takes of a piece of text and writes to its storage (`keeping.rs`): as
/// the Worker's hub keeps it.
pub mod keeping {
    pub use crate::keeping::*;
}

pub use native::*;

mod native {
    use super::{Dispatch, Host};
    use crate::error::AppError;
    pub use crate::store::native::{Batch, Layout, Marks, Places};
    pub use crate::store::HandOff;
    use crate::store::StoredJob;
    use onceclick_protocol::{CreateJob, ErrorCode, IdempotencyKey, Job, NewAttempt};
    use serde_json::Value;
    use std::rc::Rc;

    /// How the Worker classifies a streamed answer read to its end
    /// (`openai::classify_stream`): the simulated provider streams its answers through
    /// the protocol's reader and this, as the real call does.
    pub fn classify_stream(
        provider: &onceclick_protocol::contract::ProviderConfig,
        kind: &onceclick_protocol::contract::Kind,
        input: &Value,
        chat: &onceclick_protocol::chat::ChatStream,
    ) -> super::CallOutcome {
        crate::answer::classify_stream(provider, kind, input, chat)
    }

    /// The migrations, in order, as the shards apply them (and D1, by wrangler).
    pub fn migrations() -> &'static [(&'static str, &'static str)] {
        crate::store::migrations::MIGRATIONS
    }

    /// Every statement the store sends, by name (`store/sql.rs`).
    pub fn statements() -> &'static [(&'static str, &'static str)] {
        crate::store::sql::ALL
    }

    /// Plants one defect of the core (or none).
    #[cfg(feature = "mutants")]
    pub fn plant(mutant: Option<super::Mutant>) {
        crate::mutant::plant(mutant);
    }

    /// A store over the simulator's places, with test-only faults armed as the
    /// `X-Onceclick-Fault` header names them (`op:before,op:after`), for `scope`.
    pub struct Store(pub crate::store::Store);

    impl Store {
        pub fn new(
            places: Rc<dyn Places>,
            layout: Layout,
            faults: &str,
            scope: &str,
        ) -> Result<Self, String> {
            let faults = if faults.is_empty() {
                Vec::new()
            } else {
                crate::fault::parse(faults)?
            };
            Ok(Self(
                crate::store::Store::native(places, layout).with_faults(faults, scope),
            ))
        }

        /// The store, telling `live` of every move it commits, as the Worker's request
        /// and queue stores tell the job's hub.
        pub fn with_live(self, live: Rc<dyn super::Notify>) -> Self {
            Self(self.0.with_live(Some(live)))
        }
    }

    /// The answer a request got, as a client sees it.
    #[derive(Debug, Clone)]
    pub struct Answer {
        pub status: u16,
        /// The problem's code, for an error.
        pub code: Option<ErrorCode>,
        /// The job, for a success.
        pub job: Option<Job>,
        /// The job's ETag, for a success.
        pub etag: Option<String>,
        /// The attempt an answer is about (the fallback button's).
        pub attempt_id: Option<String>,
        /// The job a problem names, if any.
        pub problem_job: Option<String>,
        /// What really went wrong, for a failure on our side (never sent to a client).
        pub cause: Option<String>,
    }

    impl Answer {
        fn ok(status: u16, stored: StoredJob, attempt_id: Option<String>) -> Self {
            Self {
                status,
                code: None,
                etag: Some(stored.etag),
                job: Some(stored.job),
                attempt_id,
                problem_job: None,
                cause: None,
            }
        }

        fn error(e: AppError) -> Self {
            Self {
                status: e.code.status(),
                code: Some(e.code),
                job: None,
                etag: None,
                attempt_id: None,
                problem_job: e.job_id,
                cause: e.cause,
            }
        }
    }

    /// `POST /v1/jobs` by `owner` with `key`, once read.
    pub async fn create(
        host: &dyn Host,
        store: &Store,
        owner: &str,
        key: &str,
        request: &CreateJob,
        fault: Option<&str>,
    ) -> Answer {
        let key = match IdempotencyKey::from_header(key) {
            Ok(key) => key,
            Err(e) => {
                return Answer::error(AppError::new(
                    ErrorCode::IdempotencyKeyInvalid,
                    e.to_string(),
                ))
            }
        };
        match crate::jobs::decide_create(host, &store.0, owner, &key, request, fault).await {
            Ok(made) => Answer::ok(if made.new { 201 } else { 200 }, made.stored, None),
            Err(e) => Answer::error(e),
        }
    }

    /// `POST /v1/jobs/{id}/cancel` by `owner` (an admin for `None`).
    pub async fn cancel(store: &Store, owner: Option<&str>, job_id: &str) -> Answer {
        match crate::jobs::decide_cancel(&store.0, owner, job_id).await {
            Ok(stored) => Answer::ok(200, stored, None),
            Err(e) => Answer::error(e),
        }
    }

    /// `GET /v1/jobs/{id}` by `owner` (any owner for `None`).
    pub async fn read(store: &Store, owner: Option<&str>, job_id: &str) -> Answer {
        match store.0.job(owner, job_id).await {
            Ok(Some(stored)) => Answer::ok(200, stored, None),
            Ok(None) => Answer::error(AppError::not_found(&format!("job {job_id}"))),
            Err(e) => Answer::error(e),
        }
    }

    /// The fallback button: `POST /v1/jobs/{id}/attempts` by `owner`, with its own key.
    #[allow(clippy::too_many_arguments)]
    pub async fn fallback(
        host: &dyn Host,
        store: &Store,
        owner: &str,
        job_id: &str,
        key: Option<&str>,
        body: &NewAttempt,
        if_match: Option<&str>,
        fault: Option<&str>,
    ) -> Answer {
        let condition = if_match.map(onceclick_protocol::etag::Condition::parse);
        let tags = condition.as_ref().and_then(|c| c.strong_tags());
        let made =
            crate::attempts::decide_attempt(host, &store.0, owner, job_id, key, body, tags, fault)
                .await;
        match made {
            Ok(made) => Answer::ok(made.status, made.stored, Some(made.attempt_id)),
            Err(e) => Answer::error(e),
        }
    }

    /// `POST /v1/attempts/{id}/resolve` (admin), with its JSON body.
    pub async fn resolve(store: &Store, attempt_id: &str, body: &Value) -> Answer {
        let body = match serde_json::from_value(body.clone()) {
            Ok(body) => body,
            Err(e) => return Answer::error(AppError::new(ErrorCode::InvalidJson, e.to_string())),
        };
        match crate::attempts::decide_resolve(&store.0, attempt_id, body).await {
            Ok(stored) => Answer::ok(200, stored, Some(attempt_id.to_owned())),
            Err(e) => Answer::error(e),
        }
    }

    /// Sends a dispatch message through `host`, logging a refusal (what a create's
    /// `wait_until` does).
    pub async fn send(host: &dyn Host, message: Dispatch) -> bool {
        crate::dispatch::send(host, message).await
    }

    /// One delivery of a dispatch message; `Err` asks the queue for it again.
    pub async fn deliver(
        host: &dyn Host,
        store: &Store,
        dispatch: &Dispatch,
    ) -> Result<(), ErrorCode> {
        crate::dispatch::deliver(host, &store.0, dispatch)
            .await
            .map_err(|e| e.code)
    }

    /// A shard instance's outbox (`handoff.rs`): the attempts its creates committed,
    /// until its alarm hands them to the queue. Memory: a crash of the instance loses
    /// it, and a new instance is born with what its shard's rows hold `starting`.
    pub struct Outbox(crate::handoff::Outbox);

    /// How soon a shard's alarm runs again after a hand-off the queue refused.
    pub const RETRY_MS: f64 = crate::handoff::RETRY_MS;

    /// The statement a new shard instance reads its `starting` attempts with.
    pub const STARTING: &str = crate::store::sql::STARTING;

    /// The statement a shard's alarm asks whether the shard still holds a job with
    /// (column `any`, 0 or 1).
    pub const HAS_JOBS: &str = crate::alarm::HAS_JOBS;

    impl Outbox {
        /// The outbox of a new instance, born with the ids [`STARTING`] read in its
        /// shard before it runs anything.
        pub fn born(starting: Vec<String>) -> Self {
            let outbox = crate::handoff::Outbox::new();
            outbox.born(starting);
            Self(outbox)
        }

        /// Keeps the attempts a marked statement returned (`ids`), in the step of the
        /// commit.
        pub fn keep(&self, mark: &HandOff, ids: Vec<String>) {
            self.0
                .keep(crate::handoff::to_hand_on(mark, ids.into_iter()));
        }

        /// When the shard's alarm must run again for the outbox, in ms from now.
        pub fn next_in_ms(&self) -> Option<f64> {
            self.0.next_in_ms()
        }

        /// Whether a hand-off is under way (what it took is neither kept nor sent yet).
        pub fn busy(&self) -> bool {
            self.0.sending()
        }

        /// A hand-off (a create's, or its alarm's): the number of attempts sent to the
        /// queue.
        pub async fn hand_off(&self, host: &dyn Host) -> usize {
            self.0.hand_off(host).await
        }
    }

    /// One reconciler pass (the cron's on one database, or a shard's alarm's).
    pub async fn reconcile(host: &dyn Host, store: &Store) -> Result<(), ErrorCode> {
        crate::reconcile::run(host, &store.0)
            .await
            .map_err(|e| e.code)
    }

    /// Certifies `provider` for every kind that names it (`POST
    /// /v1/providers/{name}/certify`): whether every report passed.
    pub async fn certify(
        host: &dyn Host,
        store: &Store,
        provider: &str,
    ) -> Result<bool, ErrorCode> {
        let configured = crate::providers::configured(host).map_err(|e| e.code)?;
        let config = crate::providers::find(&configured, provider)
            .ok_or(ErrorCode::NotFound)?
            .clone();
        let reports = crate::certification::run(&store.0, host, &config)
            .await
            .map_err(|e| e.code)?;
        Ok(reports.iter().all(|r| r.passed))
    }
}
