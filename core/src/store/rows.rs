//! What a store call sends and what it gets back, whichever place runs it: a
//! statement with its parameters ([`Stmt`]), its rows ([`Rows`]), what the place billed
//! for them ([`Cost`]), and a storage failure read as the client should see it.

use crate::error::{ApiResult, AppError};
use serde::de::value::MapDeserializer;
use serde_json::Value;

/// Rows written and read, as D1 and Durable Object SQLite bill them: every row and
/// every index entry a statement inserts or updates is one row written (D1's
/// `meta.rows_written`, a cursor's `rowsWritten`).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Cost {
    pub written: u64,
    pub read: u64,
}

impl Cost {
    pub fn add(&mut self, written: u64, read: u64) {
        self.written += written;
        self.read += read;
    }
}

/// One statement of `sql.rs` with its parameters (text, numbers or null, bound `?1`…),
/// in the neutral value type both shells bind: the Worker turns them into `JsValue`s at
/// its edge (`edge/src/places.rs`), the simulator binds them in rusqlite.
pub struct Stmt {
    pub sql: &'static str,
    pub params: Vec<Value>,
    /// In a shard: the attempts this statement returns (their ids) are handed to the
    /// dispatch queue by the shard's alarm, scheduled in the transaction that commits
    /// them (`handoff.rs`). `None` everywhere but a sharded create's first attempt.
    pub hand_off: Option<HandOff>,
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
pub struct Rows(pub Vec<Value>);

impl Rows {
    /// No rows (a route to no place).
    pub fn none() -> Self {
        Rows(Vec::new())
    }

    pub fn results<T: serde::de::DeserializeOwned>(&self) -> ApiResult<Vec<T>> {
        self.0
            .iter()
            .map(|row| row_as::<T>(row).map_err(AppError::internal))
            .collect()
    }

    /// The rows' size as JSON text: what an answer holding them weighs (measured only
    /// where a suite asks, `LOG_STORE_CALLS`).
    pub fn json_bytes(&self) -> usize {
        serde_json::to_string(&self.0).map_or(0, |t| t.len())
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> ApiResult<usize> {
        Ok(self.0.len())
    }
}

/// One row (or an object made of one) as `T`, read as the object it is: through serde's
/// map reader, not `serde_json::from_value`, whose reader would also bring in, for every
/// row type, the derive's "struct as a list" path that a row never takes (the Worker's
/// size, issue 43). Keys are lent and values cloned, one by one.
pub(super) fn row_as<T: serde::de::DeserializeOwned>(row: &Value) -> Result<T, serde_json::Error> {
    match row {
        Value::Object(map) => T::deserialize(MapDeserializer::<_, serde_json::Error>::new(
            map.iter().map(|(k, v)| (k.as_str(), v.clone())),
        )),
        _ => Err(serde::de::Error::custom("a row that is not an object")),
    }
}

/// A D1 failure as the client should see it. Most are transient (D1 did not answer, or
/// answered after committing with the reply lost): `503`, safe to retry. A statement
/// the database refuses for good (a constraint, a trigger's `RAISE`, a value too big,
/// SQL it cannot run) would fail the same way again: that is our bug, a `500`.
/// A storage failure by its text (D1's or a shard's): permanent (500) or retryable (503).
pub fn storage_error(text: String) -> AppError {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, PartialEq, Deserialize)]
    struct Inner {
        id: String,
        n: u32,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct Row {
        #[serde(flatten)]
        inner: Inner,
        at: i64,
        note: Option<String>,
    }

    /// The map reader reads a row as `from_value` did: flattened fields, integers of
    /// either sign, a missing optional column as `None`, columns it does not name
    /// skipped; a missing column or a value of the wrong type is an error.
    #[test]
    fn rows_read_as_from_value_reads_them() {
        let rows = Rows(vec![
            json!({"id": "a", "n": 2, "at": -5, "extra": [1]}),
            json!({"id": "b", "n": 0, "at": 7, "note": "x"}),
        ]);
        let read = rows.results::<Row>().ok();
        let expected: Vec<Row> = rows
            .0
            .iter()
            .map(|row| serde_json::from_value(row.clone()).unwrap())
            .collect();
        assert_eq!(expected[0].note, None);
        assert_eq!(expected[1].inner.id, "b");
        assert_eq!(read, Some(expected));
        for bad in [
            json!({"id": "a", "at": 1}),
            json!({"id": "a", "n": "2", "at": 1}),
            json!([1]),
        ] {
            assert!(Rows(vec![bad.clone()]).results::<Row>().is_err(), "{bad}");
        }
    }
}
