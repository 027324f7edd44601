//! The requests the simulator sends, as a client sees their answers: each calls the
//! core's decision that the Worker's handler calls once it has read the request
//! (`jobs::decide_create`, `attempts::decide_attempt`, ...), and turns its result into
//! the status, code, job and ETag a client would get. The core's public API is the
//! door: nothing of the simulator lives in the core.

use onceclick_core::error::AppError;
use onceclick_core::fault;
use onceclick_core::host::{Host, Notify};
use onceclick_core::store::native::{Layout, Places};
use onceclick_core::store::{Store, StoredJob};
use onceclick_protocol::{CreateJob, ErrorCode, IdempotencyKey, Job, NewAttempt};
use serde_json::Value;
use std::rc::Rc;

/// A store over the simulator's places, with test-only faults armed as the
/// `X-Onceclick-Fault` header names them (`op:before,op:after`), for `scope`.
pub(crate) fn store(
    places: Rc<dyn Places>,
    layout: Layout,
    faults: &str,
    scope: &str,
) -> Result<Store, String> {
    let faults = if faults.is_empty() {
        Vec::new()
    } else {
        fault::parse(faults)?
    };
    Ok(Store::native(places, layout).with_faults(faults, scope))
}

/// The store, telling `live` of every move it commits, as the Worker's request and
/// queue stores tell the job's hub.
pub(crate) fn notifying(store: Store, live: Rc<dyn Notify>) -> Store {
    store.with_live(Some(live))
}

/// The answer a request got, as a client sees it.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub status: u16,
    /// The problem's code, for an error.
    pub code: Option<ErrorCode>,
    /// The job, for a success.
    pub job: Option<Job>,
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
            attempt_id: None,
            problem_job: e.job_id,
            cause: e.cause,
        }
    }
}

/// `POST /v1/jobs` by `owner` with `key`, once read.
pub(crate) async fn create(
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
    match onceclick_core::jobs::decide_create(host, store, owner, &key, request, fault).await {
        Ok(made) => Answer::ok(if made.new { 201 } else { 200 }, made.stored, None),
        Err(e) => Answer::error(e),
    }
}

/// `POST /v1/jobs/{id}/cancel` by `owner` (an admin for `None`).
pub(crate) async fn cancel(store: &Store, owner: Option<&str>, job_id: &str) -> Answer {
    match onceclick_core::jobs::decide_cancel(store, owner, job_id).await {
        Ok(stored) => Answer::ok(200, stored, None),
        Err(e) => Answer::error(e),
    }
}

/// `GET /v1/jobs/{id}` by `owner` (any owner for `None`).
pub(crate) async fn read(store: &Store, owner: Option<&str>, job_id: &str) -> Answer {
    match store.job(owner, job_id).await {
        Ok(Some(stored)) => Answer::ok(200, stored, None),
        Ok(None) => Answer::error(AppError::not_found(&format!("job {job_id}"))),
        Err(e) => Answer::error(e),
    }
}

/// The fallback button: `POST /v1/jobs/{id}/attempts` by `owner`, with its own key.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn fallback(
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
    let made = onceclick_core::attempts::decide_attempt(
        host, store, owner, job_id, key, body, tags, fault,
    )
    .await;
    match made {
        Ok(made) => Answer::ok(made.status, made.stored, Some(made.attempt_id)),
        Err(e) => Answer::error(e),
    }
}

/// `POST /v1/attempts/{id}/resolve` (admin), with its JSON body.
pub(crate) async fn resolve(
    host: &dyn Host,
    store: &Store,
    attempt_id: &str,
    body: &Value,
) -> Answer {
    let body = match serde_json::from_value(body.clone()) {
        Ok(body) => body,
        Err(e) => return Answer::error(AppError::new(ErrorCode::InvalidJson, e.to_string())),
    };
    match onceclick_core::attempts::decide_resolve(store, host, attempt_id, body).await {
        Ok(stored) => Answer::ok(200, stored, Some(attempt_id.to_owned())),
        Err(e) => Answer::error(e),
    }
}

/// One delivery of a dispatch message; `Err` asks the queue for it again.
pub(crate) async fn deliver(
    host: &dyn Host,
    store: &Store,
    dispatch: &onceclick_core::message::Dispatch,
) -> Result<(), ErrorCode> {
    onceclick_core::dispatch::deliver(host, store, dispatch)
        .await
        .map_err(|e| e.code)
}

/// One reconciler pass (the cron's on one database, or a shard's alarm's).
pub(crate) async fn reconcile(host: &dyn Host, store: &Store) -> Result<(), ErrorCode> {
    onceclick_core::reconcile::run(host, store)
        .await
        .map_err(|e| e.code)
}
