//! Structured log lines, one JSON object each, to the platform's log (`platform.rs`):
//! the runtime's console in the Worker, a buffer the simulator drains after every step,
//! to check that nothing paid for is lost without a line.

use serde_json::Value;

/// A line about something that went as designed (`console.log`).
pub fn info(line: Value) {
    crate::platform::get().log(false, line);
}

/// A line about a failure (`console.error`).
pub fn error(line: Value) {
    crate::platform::get().log(true, line);
}
