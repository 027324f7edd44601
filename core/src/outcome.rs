//! How one provider call ended, as the dispatcher and a certification read it: the
//! provider adapter (`openai.rs`) classifies every answer into one of these, so that
//! nothing above it looks at HTTP.

use onceclick_protocol::chat::Tokens;
use onceclick_protocol::AttemptError;
use serde_json::Value;

/// How one provider call ended.
#[derive(Debug)]
pub enum CallOutcome {
    /// An output that keeps the kind's contract, and the tokens the answer says it
    /// used (if it says).
    Output(Value, Option<Tokens>),
    /// The call failed, and the provider did no work; `retryable` says whether a new
    /// attempt may help.
    Failed(AttemptError),
    /// Nobody knows whether the provider did the work: no answer within `timeout_ms`,
    /// a 504 from a gateway in front of it, or an answer cut off after its status (a
    /// streamed one also when it stalls, or breaks off before its finish reason).
    Unknown(AttemptError),
}
