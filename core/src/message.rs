//! The dispatch queue's messages: run this attempt, or record a result it already has.
//! The store's shards make them for the attempts they hand on, the handlers and the
//! reconciler send them, and the queue consumer (the Worker's `queue.rs`, through `dispatch::deliver`) reads them.

use serde::{Deserialize, Serialize};

/// The queue binding that carries dispatch messages.
pub const QUEUE: &str = "DISPATCH";

/// One dispatch message: run this attempt, or record a result it already has.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Dispatch {
    pub attempt_id: String,
    /// Test-only faults for the dispatcher's calls (see `fault.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
    /// A provider's result that D1 would not take when it came: record it, call nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<PendingResult>,
}

/// A result waiting to be recorded (its output as JSON text: a queue turns a
/// `serde_json::Value` into a JS Map).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PendingResult {
    pub job_id: String,
    pub provider: String,
    pub output: String,
    /// The tokens the provider stated for it (`{"prompt", "completion"}`, JSON text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<String>,
}

impl Dispatch {
    /// The message that runs `attempt_id`, with the test-only faults for its
    /// dispatcher's calls.
    pub fn run(attempt_id: &str, fault: Option<&str>) -> Self {
        Self {
            attempt_id: attempt_id.to_owned(),
            fault: fault.map(str::to_owned),
            result: None,
        }
    }
}
