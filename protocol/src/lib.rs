//! The pure core of onceclick, shared by the edge Worker and the browser SDK.
//!
//! Everything here is a function of its arguments: no clock, no randomness, no I/O.
//! That is what lets the SDK and the edge compute the same [`fingerprint`] and agree on
//! the same [`ErrorCode`]s, and what keeps these rules unit-testable in milliseconds.
#![deny(missing_docs, missing_debug_implementations)]

pub mod chat;
#[cfg(feature = "contract")]
pub mod contract;
mod error;
pub mod etag;
mod fingerprint;
pub mod ijson;
pub mod jcs;
mod key;
pub mod live;
pub mod moving;
pub mod partial;
pub mod shard;
pub mod sse;
mod state;
mod wire;

pub use error::{ErrorCode, Problem};
pub use fingerprint::{fingerprint, fingerprint_canonical, Fingerprint};
pub use key::{IdempotencyKey, KeyError, MAX_KEY_LEN};
pub use state::{AttemptState, JobStatus};
pub use wire::{Attempt, AttemptError, CreateJob, Event, EventType, Job, NewAttempt};

/// Largest request body the API accepts, in bytes (64 KiB).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
