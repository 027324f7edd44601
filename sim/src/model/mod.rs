//! The reference model: what the contract says a client sees, as plain types and
//! functions over requests, answers, job documents and ETags. It knows nothing of how
//! the answers are made (no store, no clock, no simulator), so any client can hold its
//! answers to it: the simulation checks every answer and every job a step touched
//! against it (`world/checks.rs`), and the real-Worker run can check its HTTP answers
//! the same way.
//!
//! - [`Reply`]: an answer as a client sees it. A `5xx` other than `503` is a failure on
//!   our side; a refusal ([`Reply::is_refusal`]) writes nothing.
//! - [`Key`] and [`Create`]: one owner's `Idempotency-Key` of `POST /v1/jobs`. One key,
//!   one job: a replay answers that job (and only one answer is `201`), another request
//!   under the key is `409 idempotency_key_reused` naming it, and a purge frees the key.
//! - [`FallbackKey`] and [`fallback_refusal`]: the fallback button's key answers only
//!   the body that made its attempt, always with that attempt; the button is refused on
//!   an ended job, or beside an `unknown`, `starting` or `running` attempt.
//! - [`cancel_answer`], [`resolve_answer`] ([`Resolution`]) and [`read_answer`]: what
//!   the other requests may answer.
//! - [`JobView`] and [`JobRecord`]: a job as read, and what it may become. At most one
//!   winner, and `succeeded` exactly when it has one and a result; a result never
//!   changes; an ended job never changes; an attempt moves only by
//!   `AttemptState::MOVES` (for a client that reads now and then, by a path of them:
//!   [`JobRecord::next_read`]); the ETag moves exactly when the document does; only an
//!   ended job with nothing live, past retention, is purged; and once faults stop and
//!   time passes, no job is stuck.
//!
//! Each check returns the promises it found broken, as sentences (an empty list, or
//! `Ok`, when all were kept); the caller reports them.

mod answers;
mod fallback;
mod job;
mod key;

pub use answers::{cancel_answer, read_answer, resolve_answer, Reply, Resolution};
pub use fallback::{fallback_refusal, FallbackKey, FALLBACK_REFUSALS};
pub use job::{JobRecord, JobView};
pub use key::{Create, Key};
