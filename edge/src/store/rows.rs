//! What a store call sends and what it gets back, whichever place runs it: a
//! statement with its parameters ([`Stmt`]), its rows ([`Rows`]), what the place billed
//! for them ([`Cost`]), and a storage failure read as the client should see it.

use crate::error::{ApiResult, AppError};
use serde_json::Value;

/// Rows written and read, as D1 and Durable Object SQLite bill them: every row and
/// every index entry a statement inserts or updates is one row written (D1's
/// `meta.rows_written`, a cursor's `rowsWritten`).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct Cost {
    pub(crate) written: u64,
    pub(crate) read: u64,
}

impl Cost {
    pub(crate) fn add(&mut self, written: u64, read: u64) {
        self.written += written;
        self.read += read;
    }
}

/// One statement of `sql.rs` with its parameters (text, numbers or null, bound `?1`…),
/// in the neutral value type both shells bind: the Worker turns them into `JsValue`s at
/// its edge (`backend.rs`), the simulator binds them in rusqlite.
pub(crate) struct Stmt {
    pub(crate) sql: &'static str,
    pub(crate) params: Vec<Value>,
    /// In a shard: the attempts this statement returns (their ids) are handed to the
    /// dispatch queue by the shard's alarm, scheduled in the transaction that commits
    /// them (`handoff.rs`). `None` everywhere but a sharded create's first attempt.
    pub(crate) hand_off: Option<HandOff>,
}

/// A statement's ask that its shard hand on the attempts it returns (`handoff.rs`):
/// with the test-only faults for their dispatchers (`fault.rs`).
#[derive(Clone, Debug, Default)]
#[allow(unreachable_pub)] // the simulator's shell names it (`sim.rs`)
pub struct HandOff {
    pub fault: Option<String>,
}

/// What one statement returned, from D1 or from a shard's SQLite (or, in the native
/// shell, from the simulator's SQLite): its rows, each a JSON object.
#[derive(Debug, Default)]
pub(crate) struct Rows(pub(crate) Vec<Value>);

impl Rows {
    /// No rows (a route to no place).
    pub(crate) fn none() -> Self {
        Rows(Vec::new())
    }

    pub(crate) fn results<T: serde::de::DeserializeOwned>(&self) -> ApiResult<Vec<T>> {
        self.0
            .iter()
            .map(|row| serde_json::from_value::<T>(row.clone()).map_err(AppError::internal))
            .collect()
    }

    /// The rows' size as JSON text: what an answer holding them weighs (measured only
    /// where a suite asks, `LOG_STORE_CALLS`).
    pub(crate) fn json_bytes(&self) -> usize {
        serde_json::to_string(&self.0).map_or(0, |t| t.len())
    }

    pub(crate) fn len(&self) -> ApiResult<usize> {
        Ok(self.0.len())
    }
}

/// A D1 failure as the client should see it. Most are transient (D1 did not answer, or
/// answered after committing with the reply lost): `503`, safe to retry. A statement
/// the database refuses for good (a constraint, a trigger's `RAISE`, a value too big,
/// SQL it cannot run) would fail the same way again: that is our bug, a `500`.
/// A storage failure by its text (D1's or a shard's): permanent (500) or retryable (503).
pub(crate) fn storage_error(text: String) -> AppError {
    const PERMANENT: &[&str] = &[
        "constraint",
        "TOOBIG",
        "too big",
        "syntax error",
        "no such",
        "AttemptState::MOVES",
    ];
    if PERMANENT.iter().any(|p| text.contains(p)) {
        AppError::internal(text)
    } else {
        AppError::unavailable(text)
    }
}
